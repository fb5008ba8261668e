//! `GET /api/tools`: the exact shape, roles in configuration order, tools in registration order,
//! replace-by-name (one definition, the last registration wins) and callback URLs exactly as
//! registered.

use serde_json::json;

use crate::helpers::{keys, listed_names, spawn_app, tool_body};

#[actix_web::test]
async fn the_listing_has_the_exact_shape_of_the_spec() {
    let app = spawn_app(&["Lanlan", "Mio"]).await;
    let (status, _) = app
        .register(&json!({
            "name": "get_weather",
            "description": "Get weather for a location.",
            "parameters": {
                "type": "object",
                "properties": {"location": {"type": "string"}},
                "required": ["location"]
            },
            "callback_url": "http://127.0.0.1:9333/tools/get_weather",
            "role": "Lanlan",
            "source": "plugin:weather",
            "timeout_seconds": 30
        }))
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        app.listing(None).await,
        json!({
            "ok": true,
            "tools_by_role": {
                "Lanlan": [
                    {"name": "get_weather", "description": "Get weather for a location.",
                     "source": "plugin:weather",
                     "callback_url": "http://127.0.0.1:9333/tools/get_weather",
                     "is_remote": true}
                ],
                "Mio": []
            }
        })
    );
    assert_eq!(
        app.listing(Some("Lanlan")).await,
        json!({
            "ok": true,
            "tools_by_role": {
                "Lanlan": [
                    {"name": "get_weather", "description": "Get weather for a location.",
                     "source": "plugin:weather",
                     "callback_url": "http://127.0.0.1:9333/tools/get_weather",
                     "is_remote": true}
                ]
            }
        })
    );
    let (status, body) = app.get("/api/tools").await;
    assert_eq!(status, 200);
    assert_eq!(keys(&body), ["ok", "tools_by_role"]);
    assert_eq!(
        keys(&body["tools_by_role"]["Lanlan"][0]),
        ["name", "description", "source", "callback_url", "is_remote"]
    );
}

#[actix_web::test]
async fn roles_are_listed_in_configuration_order() {
    let characters = ["Mio", "Lanlan", "Aoi", "Zed", "Bea"];
    let app = spawn_app(&characters).await;
    let (status, _) = app
        .register(&tool_body("t", "http://localhost/cb", "s"))
        .await;
    assert_eq!(status, 200);
    assert_eq!(keys(&app.listing(None).await["tools_by_role"]), characters);
    let (_, answer) = app
        .register(&tool_body("u", "http://localhost/cb", "s"))
        .await;
    assert_eq!(answer["affected_roles"], json!(characters));
}

#[actix_web::test]
async fn tools_are_listed_in_registration_order() {
    let app = spawn_app(&["Lanlan", "Mio"]).await;
    for name in ["zeta", "alpha", "mid", "Beta", "_under"] {
        let (status, _) = app
            .register(&tool_body(name, "http://localhost/cb", "s"))
            .await;
        assert_eq!(status, 200);
    }
    let mut scoped = tool_body("aaa_mio_only", "http://localhost/cb", "s");
    scoped["role"] = json!("Mio");
    assert_eq!(app.register(&scoped).await.0, 200);
    let (status, _) = app
        .register(&tool_body("last", "http://localhost/cb", "s"))
        .await;
    assert_eq!(status, 200);
    let listing = app.listing(None).await;
    assert_eq!(
        listed_names(&listing, "Lanlan"),
        ["zeta", "alpha", "mid", "Beta", "_under", "last"]
    );
    assert_eq!(
        listed_names(&listing, "Mio"),
        [
            "zeta",
            "alpha",
            "mid",
            "Beta",
            "_under",
            "aaa_mio_only",
            "last"
        ]
    );
    // Removing one keeps the order of the rest.
    let (status, _) = app
        .post("/api/tools/unregister", &json!({"name": "mid"}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        listed_names(&app.listing(None).await, "Lanlan"),
        ["zeta", "alpha", "Beta", "_under", "last"]
    );
}

#[actix_web::test]
async fn replacing_by_name_keeps_one_definition_and_the_last_registration_wins() {
    let app = spawn_app(&["Lanlan", "Mio"]).await;
    for (name, url) in [("a", "http://127.0.0.1:1/a"), ("b", "http://127.0.0.1:1/b")] {
        assert_eq!(
            app.register(&tool_body(name, url, "plugin:one")).await.0,
            200
        );
    }
    let replacement = json!({
        "name": "a",
        "description": "second definition",
        "callback_url": "http://localhost:2/a2",
        "source": "plugin:two",
    });
    let (status, answer) = app.register(&replacement).await;
    assert_eq!(
        (status, answer),
        (
            200,
            json!({"ok": true, "registered": "a", "affected_roles": ["Lanlan", "Mio"], "failed_roles": []})
        )
    );
    let a = json!({"name": "a", "description": "second definition", "source": "plugin:two",
                   "callback_url": "http://localhost:2/a2", "is_remote": true});
    let b = json!({"name": "b", "description": "b tool", "source": "plugin:one",
                   "callback_url": "http://127.0.0.1:1/b", "is_remote": true});
    // One definition per name, in the place the name first took.
    assert_eq!(
        app.listing(None).await,
        json!({"ok": true, "tools_by_role": {"Lanlan": [a, b], "Mio": [a, b]}})
    );

    // A scoped replacement changes only that role.
    let mut scoped = tool_body("b", "http://127.0.0.1:3/mio", "plugin:mio");
    scoped["role"] = json!("Mio");
    scoped["description"] = json!("Mio's b");
    assert_eq!(app.register(&scoped).await.0, 200);
    let mio_b = json!({"name": "b", "description": "Mio's b", "source": "plugin:mio",
                       "callback_url": "http://127.0.0.1:3/mio", "is_remote": true});
    assert_eq!(
        app.listing(None).await,
        json!({"ok": true, "tools_by_role": {"Lanlan": [a, b], "Mio": [a, mio_b]}})
    );

    // Registering the same definition again is idempotent.
    let (status, _) = app.register(&replacement).await;
    assert_eq!(status, 200);
    assert_eq!(
        app.listing(None).await,
        json!({"ok": true, "tools_by_role": {"Lanlan": [a, b], "Mio": [a, mio_b]}})
    );

    // The replaced source no longer owns the name: clearing it leaves the new definition.
    let (_, answer) = app
        .post("/api/tools/clear", &json!({"source": "plugin:one"}))
        .await;
    assert_eq!(answer["removed"], 1);
    assert_eq!(
        app.listing(None).await,
        json!({"ok": true, "tools_by_role": {"Lanlan": [a], "Mio": [a, mio_b]}})
    );
}

#[actix_web::test]
async fn callback_urls_are_shown_exactly_as_registered() {
    let app = spawn_app(&["Lanlan"]).await;
    let written = [
        "HTTP://LOCALHOST:9000/Cb",
        "http://127.0.0.1:80/path/../x?q=a%20b#frag",
        "https://LocalHost/",
        "http://[::ffff:127.0.0.1]:9000/cb",
        "http://[0:0:0:0:0:0:0:1]:9000",
    ];
    for (i, url) in written.iter().enumerate() {
        let (status, body) = app.register(&tool_body(&format!("t{i}"), url, "s")).await;
        assert_eq!(status, 200, "{url}: {body}");
    }
    let listing = app.listing(None).await;
    let shown: Vec<&str> = listing["tools_by_role"]["Lanlan"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["callback_url"].as_str().unwrap())
        .collect();
    assert_eq!(shown, written);
}

/// An in-process tool for the full listing: it never runs.
struct Idle;

impl actix::Actor for Idle {
    type Context = actix::Context<Self>;
}

impl actix::Handler<runtime_tools::CallLocalTool> for Idle {
    type Result = runtime_tools::ToolOutcome;

    fn handle(&mut self, _: runtime_tools::CallLocalTool, _: &mut Self::Context) -> Self::Result {
        Ok(json!(null))
    }
}

#[actix_web::test]
async fn detail_full_adds_parameters_timeout_behavior_and_approval_and_nothing_else_changes() {
    use actix::Actor;
    use runtime_tools::RegisterTool;
    use runtime_tools::local_handler;
    use runtime_tools::{ToolSpec, empty_parameters};

    let app = spawn_app(&["Lanlan"]).await;
    let mut remote = tool_body("get_weather", "http://127.0.0.1:9333/cb", "plugin:w");
    remote["timeout_seconds"] = json!(12.5);
    assert_eq!(app.register(&remote).await.0, 200);
    let tool = ToolSpec::local(
        "idle",
        "Does nothing.",
        empty_parameters(),
        "inproc:idle",
        local_handler(Idle.start().recipient()),
    );
    app.router
        .send(RegisterTool { tool, role: None })
        .await
        .expect("router answers")
        .expect("registered");

    let summary = app.listing(None).await;
    assert_eq!(
        keys(&summary["tools_by_role"]["Lanlan"][0]),
        ["name", "description", "source", "callback_url", "is_remote"]
    );
    let (status, full) = app.get("/api/tools?role=Lanlan&detail=full").await;
    assert_eq!(status, 200);
    assert_eq!(
        full,
        json!({"ok": true, "tools_by_role": {"Lanlan": [
            {"name": "get_weather", "description": "get_weather tool", "source": "plugin:w",
             "callback_url": "http://127.0.0.1:9333/cb", "is_remote": true,
             "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
             "timeout_seconds": 12.5, "behavior": "blocking",
             "approval": "never", "approval_timeout_seconds": 120,
             "max_concurrent": null, "rate": null, "dedupe_seconds": 0},
            {"name": "idle", "description": "Does nothing.", "source": "inproc:idle",
             "callback_url": null, "is_remote": false,
             "parameters": {"type": "object", "properties": {}},
             "timeout_seconds": 300.0, "behavior": "blocking",
             "approval": "never", "approval_timeout_seconds": 120,
             "max_concurrent": null, "rate": null, "dedupe_seconds": 0}
        ]}})
    );
    let (status, body) = app.get("/api/tools?detail=some").await;
    assert_eq!(status, 422);
    assert_eq!(body["detail"][0]["type"], json!("query_invalid"));
    assert!(
        body["detail"][0]["msg"]
            .as_str()
            .unwrap()
            .contains("unknown variant `some`, expected `full`"),
        "{body}"
    );
}
