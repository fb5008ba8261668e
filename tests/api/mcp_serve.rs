//! `runtime-tools mcp` driven by the official MCP Python SDK client (`mcp`, pinned in
//! tests/requirements.txt): the real binary over stdio against the real server: initialize, list
//! (one character's tools, with their schemas), a call, a tool error and an unknown tool as
//! `isError` results with the model's text, and `notifications/tools/list_changed` after a
//! registration. And, spoken to line by line, arguments passed on exactly as the client wrote
//! them.

use std::process::Command;

use serde_json::{Value, json};

use crate::callback_server::{CallbackServer, Reply};
use crate::child::LineChild;
use crate::helpers::{TestApp, spawn_app, tool_body};
use crate::python::{repo_file, venv_python};

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

    let python = venv_python().await;
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

/// Sends one JSON-RPC message (its exact text) and returns the answer with `id`.
async fn exchange(server: &mut LineChild, message: &str, id: u64) -> Value {
    server.send_line(message);
    loop {
        let line = server
            .next_line()
            .await
            .expect("an answer in time")
            .expect("the server is running");
        let answer: Value = serde_json::from_str(&line).expect("a JSON-RPC message");
        if answer["id"] == json!(id) {
            return answer;
        }
    }
}

#[actix_web::test]
async fn arguments_reach_the_callback_exactly_as_the_client_wrote_them() {
    let app = spawn_app(&["Lanlan"]).await;
    let callback = CallbackServer::with("/exact", Reply::output(json!("ok")));
    let mut body = tool_body("exact", &callback.url("/exact"), "plugin:mcp-test");
    body["parameters"] = json!({"type": "object"});
    let (status, answer) = app.register(&body).await;
    assert_eq!(status, 200, "{answer}");

    let mut server = LineChild::spawn_talking(
        Command::new(env!("CARGO_BIN_EXE_runtime-tools"))
            .args(["mcp", "--server", &app.base, "--role", "Lanlan"])
            .env("RUST_LOG", "warn"),
    );
    let init = exchange(
        &mut server,
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"test","version":"1"}}}"#,
        1,
    )
    .await;
    assert_eq!(init["result"]["serverInfo"]["name"], json!("runtime-tools"));
    server.send_line(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    // Written by hand: a JSON library would round the number on the way.
    let arguments = r#"{"big": 123456789012345678901234567890, "text": "\u00e9"}"#;
    let called = exchange(
        &mut server,
        &format!(
            r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"exact","arguments":{arguments}}}}}"#
        ),
        2,
    )
    .await;
    assert_eq!(called["result"]["isError"], json!(false), "{called}");
    let received = callback.wait_for_requests(1).await;
    let sent = String::from_utf8(received[0].body.clone()).expect("UTF-8");
    assert!(
        sent.contains(&format!(r#""arguments":{arguments}"#)),
        "the callback got {sent}"
    );
}
