//! Long-running tools (`behavior`): what a registration says about whether the model's
//! conversation waits for a tool's calls.

use serde_json::json;

use crate::callback_server::{CallbackServer, Reply};
use crate::helpers::{spawn_app, tool_body};

#[actix_web::test]
async fn a_registration_says_whether_the_conversation_waits_and_the_full_listing_shows_it() {
    let app = spawn_app(&["Mio"]).await;
    let callback = CallbackServer::with("/cb", Reply::output(json!({})));
    let (status, _) = app
        .register(&tool_body("plain", &callback.url("/cb"), "plugin:w"))
        .await;
    assert_eq!(status, 200);
    let mut slow = tool_body("slow", &callback.url("/cb"), "plugin:w");
    slow["behavior"] = json!("non_blocking");
    let (status, _) = app.register(&slow).await;
    assert_eq!(status, 200);

    let (_, full) = app.get("/api/tools?role=Mio&detail=full").await;
    let behaviors: Vec<_> = full["tools_by_role"]["Mio"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].clone(), t["behavior"].clone()))
        .collect();
    assert_eq!(
        behaviors,
        [
            (json!("plain"), json!("blocking")),
            (json!("slow"), json!("non_blocking"))
        ]
    );
    // The contract's listing keeps its five fields.
    let (_, plain) = app.get("/api/tools?role=Mio").await;
    assert!(
        plain["tools_by_role"]["Mio"][1].get("behavior").is_none(),
        "{plain}"
    );

    for bad in [json!("sometimes"), json!(true), json!(null)] {
        let mut body = tool_body("odd", &callback.url("/cb"), "plugin:w");
        body["behavior"] = bad.clone();
        let (status, answer) = app.register(&body).await;
        assert_eq!(status, 422, "{bad}: {answer}");
        assert_eq!(
            answer["detail"][0]["loc"],
            json!(["body", "behavior"]),
            "{answer}"
        );
    }
    assert_eq!(
        app.tool_names(Some("Mio")).await,
        json!({"Mio": ["plain", "slow"]}),
        "nothing registered by a refused body"
    );
}
