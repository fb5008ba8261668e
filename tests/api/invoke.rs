//! `POST /api/tools/invoke`: which tool and role a call goes to, the call id, the answer's shape,
//! and in-process tools.

use actix::prelude::*;
use runtime_tools::{
    CallLocalTool, RegisterTool, ToolOutcome, ToolSpec, empty_parameters, local_handler,
};
use serde_json::{Value, json};

use crate::callback_server::{CallbackServer, Reply, error_text, invoke, invoke_ok, register};
use crate::helpers::{spawn_app, tool_body};

/// A register body for `name` in one role.
fn tool_for(name: &str, url: &str, role: &str) -> Value {
    let mut body = tool_body(name, url, "plugin:test");
    body["role"] = json!(role);
    body
}

#[actix_web::test]
async fn the_answer_carries_name_call_id_output_and_is_error() {
    let app = spawn_app(&["Lanlan"]).await;
    let server = CallbackServer::with("/cb", Reply::output(json!({"t": 28})));
    register(&app, tool_body("weather", &server.url("/cb"), "plugin:w")).await;
    let (status, body) = invoke(
        &app,
        json!({"name": "weather", "arguments": {"city": "Tokyo"}, "role": "Lanlan", "call_id": "call_9"}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"ok": true, "name": "weather", "call_id": "call_9", "output": {"t": 28}, "is_error": false})
    );

    server.route(
        "/cb",
        Reply::json(json!({"is_error": true, "error": "no such city"})),
    );
    let (status, body) = invoke(
        &app,
        json!({"name": "weather", "arguments": {}, "call_id": "call_10"}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"ok": true, "name": "weather", "call_id": "call_10", "output": null, "is_error": true, "error": "no such city"})
    );
}

#[actix_web::test]
async fn a_call_id_is_generated_when_absent_and_sent_to_the_callback() {
    let app = spawn_app(&["Lanlan"]).await;
    let server = CallbackServer::with("/cb", Reply::output(json!(1)));
    register(&app, tool_body("weather", &server.url("/cb"), "plugin:w")).await;

    let mut ids = Vec::new();
    for body in [
        json!({"name": "weather"}),
        json!({"name": "weather", "call_id": null}),
        json!({"name": "weather", "call_id": ""}),
    ] {
        let (status, answer) = invoke(&app, body).await;
        assert_eq!(status, 200, "{answer}");
        let id = answer["call_id"].as_str().expect("call_id").to_owned();
        let hex = id.strip_prefix("call_").expect("call_ prefix");
        assert_eq!(hex.len(), 32, "{id}");
        assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()), "{id}");
        ids.push(id);
    }
    let received = server.wait_for_requests(3).await;
    let sent: Vec<String> = received
        .iter()
        .map(|r| {
            r.json()["call_id"]
                .as_str()
                .expect("call_id sent")
                .to_owned()
        })
        .collect();
    assert_eq!(sent, ids);
    assert!(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2]);
}

#[actix_web::test]
async fn a_given_call_id_is_echoed_and_sent_to_the_callback() {
    let app = spawn_app(&["Lanlan"]).await;
    let server = CallbackServer::with("/cb", Reply::output(json!(1)));
    register(&app, tool_body("weather", &server.url("/cb"), "plugin:w")).await;
    let (status, answer) = invoke(&app, json!({"name": "weather", "call_id": "my-id-1"})).await;
    assert_eq!(status, 200);
    assert_eq!(answer["call_id"], json!("my-id-1"));
    assert_eq!(
        server.wait_for_requests(1).await[0].json()["call_id"],
        json!("my-id-1")
    );
}

#[actix_web::test]
async fn an_unknown_tool_is_404_naming_the_available_tools() {
    let app = spawn_app(&["Lanlan", "Mio"]).await;
    let server = CallbackServer::start();
    register(&app, tool_body("weather", &server.url("/a"), "plugin:w")).await;
    register(&app, tool_for("clock", &server.url("/b"), "Mio")).await;

    let (status, body) = invoke(&app, json!({"name": "nope", "arguments": {}})).await;
    assert_eq!(status, 404);
    assert_eq!(
        body,
        json!({"ok": false, "detail": "tool 'nope' is not registered; available tools: weather, clock"})
    );

    let (status, body) = invoke(&app, json!({"name": "clock", "role": "Lanlan"})).await;
    assert_eq!(status, 404);
    assert_eq!(
        body,
        json!({"ok": false, "detail": "tool 'clock' is not registered for role Lanlan; available tools: weather"})
    );
    assert_eq!(server.received().len(), 0);
}

#[actix_web::test]
async fn an_unknown_role_is_404() {
    let app = spawn_app(&["Lanlan"]).await;
    let server = CallbackServer::start();
    register(&app, tool_body("weather", &server.url("/a"), "plugin:w")).await;
    let (status, body) = invoke(&app, json!({"name": "weather", "role": "Nobody"})).await;
    assert_eq!(status, 404);
    assert_eq!(body, json!({"ok": false, "detail": "unknown role: Nobody"}));
    assert_eq!(server.received().len(), 0);
}

#[actix_web::test]
async fn role_null_picks_the_first_character_in_configuration_order_that_has_the_tool() {
    let app = spawn_app(&["Ann", "Bo", "Cy"]).await;
    let server = CallbackServer::start();
    for (path, answer) in [("/bo", "Bo's"), ("/cy", "Cy's")] {
        server.route(path, Reply::output(json!(answer)));
    }
    // Registered in the opposite order: configuration order decides, not registration order.
    register(&app, tool_for("weather", &server.url("/cy"), "Cy")).await;
    register(&app, tool_for("weather", &server.url("/bo"), "Bo")).await;

    for role in [json!(null), json!("")] {
        let (status, body) = invoke(&app, json!({"name": "weather", "role": role})).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["output"], json!("Bo's"));
    }
    let (status, body) = invoke(&app, json!({"name": "weather", "role": "Cy"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["output"], json!("Cy's"));

    let paths: Vec<String> = server
        .wait_for_requests(3)
        .await
        .into_iter()
        .map(|r| r.path)
        .collect();
    assert_eq!(paths, ["/bo", "/bo", "/cy"]);
}

#[actix_web::test]
async fn invoke_validates_its_body() {
    let app = spawn_app(&["Lanlan"]).await;
    let (status, body) = invoke(&app, json!({"arguments": "x"})).await;
    assert_eq!(status, 422, "{body}");
    let locs: Vec<Value> = body["detail"]
        .as_array()
        .expect("field errors")
        .iter()
        .map(|e| e["loc"].clone())
        .collect();
    assert_eq!(
        locs,
        [json!(["body", "name"]), json!(["body", "arguments"])]
    );
}

/// An in-process plugin: rolls a "die" whose result is the argument `sides`, or fails.
struct Dice;

impl Actor for Dice {
    type Context = Context<Self>;
}

impl Handler<CallLocalTool> for Dice {
    type Result = ToolOutcome;

    fn handle(&mut self, CallLocalTool(call): CallLocalTool, _: &mut Self::Context) -> ToolOutcome {
        match call.arguments.get("sides") {
            Some(sides) => {
                Ok(json!({"rolled": sides, "call_id": call.call_id, "raw": call.raw_arguments}))
            }
            None => Err("sides is required".to_owned()),
        }
    }
}

#[actix_web::test]
async fn an_in_process_tool_runs_through_invoke() {
    let app = spawn_app(&["Lanlan", "Mio"]).await;
    let dice = Dice.start();
    let tool = ToolSpec::local(
        "roll_dice",
        "Roll a die.",
        empty_parameters(),
        "inproc:dice",
        local_handler(dice.recipient()),
    );
    let report = app
        .router
        .send(RegisterTool { tool, role: None })
        .await
        .expect("router answers")
        .expect("registered");
    assert_eq!(report.affected_roles, ["Lanlan", "Mio"]);

    let (status, body) = invoke(
        &app,
        json!({"name": "roll_dice", "arguments": {"sides": 6}, "role": "Mio", "call_id": "c7"}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"ok": true, "name": "roll_dice", "call_id": "c7",
               "output": {"rolled": 6, "call_id": "c7", "raw": "{\"sides\":6}"}, "is_error": false})
    );

    let body = invoke_ok(&app, "roll_dice", json!({})).await;
    assert_eq!(error_text(&body), "sides is required");
}
