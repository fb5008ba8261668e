//! `runtime-tools mcp` driven by the official MCP Python SDK client (`mcp`, pinned in
//! tests/requirements.txt): the real binary over stdio against the real server: initialize, list
//! (one character's tools, with their schemas), a call, a tool error and an unknown tool as
//! `isError` results with the model's text, and `notifications/tools/list_changed` after a
//! registration.

use std::process::Command;

use serde_json::{Value, json};

use crate::callback_server::{CallbackServer, Reply};
use crate::child::LineChild;
use crate::helpers::{TestApp, spawn_app, tool_body};
use crate::python::{python, repo_file};

/// One step the client script printed, as JSON.
async fn step(client: &mut LineChild, name: &str) -> Value {
    let line = client.expect_line(&format!("{{\"step\": \"{name}\"")).await;
    serde_json::from_str(&line).expect("a JSON step")
}

async fn register(app: &TestApp, name: &str, callback: &CallbackServer, role: &str) {
    let mut body = tool_body(name, &callback.url(&format!("/{name}")), "plugin:mcp-test");
    body["role"] = json!(role);
    let (status, answer) = app.register(&body).await;
    assert_eq!(status, 200, "{answer}");
}

#[actix_web::test]
async fn an_mcp_client_lists_calls_and_hears_of_changes() {
    let app = spawn_app(&["Lanlan", "Mio"]).await;
    let callback =
        CallbackServer::with("/get_weather", Reply::output(json!({"temperature_c": 28})));
    callback.route(
        "/broken",
        Reply::json(json!({"error": "sensor offline", "is_error": true})),
    );
    register(&app, "get_weather", &callback, "Lanlan").await;
    register(&app, "broken", &callback, "Lanlan").await;
    register(&app, "mio_only", &callback, "Mio").await;

    let python = actix_web::rt::task::spawn_blocking(python)
        .await
        .unwrap()
        .expect("the test virtualenv (tests/requirements.txt)");
    let mut client = LineChild::spawn(
        Command::new(python)
            .arg(repo_file("tests/mcp_client.py"))
            .args([env!("CARGO_BIN_EXE_runtime-tools"), &app.base, "Lanlan"])
            .env("RUST_LOG", "warn"),
    );

    let init = step(&mut client, "initialize").await;
    assert_eq!(
        init,
        json!({"step": "initialize", "server": "runtime-tools",
               "protocol_version": "2025-11-25", "list_changed": true})
    );
    let listed = step(&mut client, "list").await;
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}});
    assert_eq!(
        listed["tools"],
        json!([
            {"name": "get_weather", "description": "get_weather tool", "input_schema": schema},
            {"name": "broken", "description": "broken tool", "input_schema": schema}
        ])
    );

    let call = step(&mut client, "call").await;
    assert_eq!(
        call,
        json!({"step": "call", "is_error": false, "texts": ["{\"temperature_c\":28}"],
               "structured": {"temperature_c": 28}})
    );
    let received = callback.wait_for_requests(1).await;
    assert_eq!(received[0].json()["arguments"], json!({"city": "Kyoto"}));

    let error = step(&mut client, "error").await;
    assert_eq!(
        error,
        json!({"step": "error", "is_error": true,
               "texts": ["{\"error\":\"sensor offline\",\"is_error\":true}"], "structured": null})
    );
    let missing = step(&mut client, "missing").await;
    assert_eq!(
        missing["texts"],
        json!([json!({"error": "tool 'nope' is not registered for role Lanlan; available tools: get_weather, broken", "is_error": true}).to_string()])
    );
    assert_eq!(missing["is_error"], json!(true));

    step(&mut client, "waiting").await;
    // A registration for another character says nothing to this one; one for it does.
    register(&app, "mio_later", &callback, "Mio").await;
    register(&app, "get_time", &callback, "Lanlan").await;
    let changed = step(&mut client, "changed").await;
    assert_eq!(
        changed["tools"],
        json!(["get_weather", "broken", "get_time"])
    );
    assert_eq!(client.wait_exit().await, Some(0));
}
