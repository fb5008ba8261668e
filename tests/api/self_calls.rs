//! No tool may call the server itself: register refuses a callback on the server's own address,
//! a call that arrives through a tool callback is refused (which also ends a loop between two
//! servers), callback exchanges in flight are bounded, and an invoke whose client goes away
//! stops its callback exchange and is announced as cancelled.

use futures_util::future::join_all;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::callback_server::{
    CallbackServer, Reply, error_text, invoke, invoke_ok, register, spawn_invoke, tool_with_timeout,
};
use crate::event_stream::{Received, open};
use crate::events::assert_call;
use crate::helpers::{TestApp, settings, spawn_app, spawn_app_with, tool_body};

/// What a refused invoke's `error` says.
const HOP_REFUSAL: &str = "invoke refused: the request came from a tool callback \
     (x-runtime-tools-hop header); a tool's callback must not call the invoke route, or calls \
     would loop without end";

#[actix_web::test]
async fn register_refuses_a_callback_on_this_servers_own_address() {
    let app = spawn_app(&["Lanlan"]).await;
    let port = app.addr.port();
    for url in [
        format!("http://127.0.0.1:{port}/api/tools/invoke"),
        format!("http://localhost:{port}/api/tools/invoke"),
        format!("http://[::ffff:127.0.0.1]:{port}/anything"),
    ] {
        let (status, body) = app.register(&tool_body("loop", &url, "plugin:loop")).await;
        assert_eq!(status, 422, "{url}: {body}");
        assert_eq!(
            body,
            json!({"ok": false, "detail": [{"loc": ["body", "callback_url"], "type": "value_error",
                "msg": format!("Value error, callback_url points at this server itself (127.0.0.1:{port}): \
                    a tool whose callback is this server would call itself without end; use the \
                    plugin's own server")}]}),
            "{url}"
        );
    }
    assert_eq!(app.tool_names(None).await, json!({"Lanlan": []}));
}

#[actix_web::test]
async fn an_invoke_that_arrives_through_a_tool_callback_is_a_tool_error() {
    let app = spawn_app(&["Lanlan"]).await;
    let server = CallbackServer::with("/cb", Reply::output(json!("ran")));
    register(&app, tool_body("weather", &server.url("/cb"), "plugin:w")).await;
    let mut response = app
        .client
        .post(app.url("/api/tools/invoke"))
        .insert_header(("x-runtime-tools-hop", "1"))
        .send_json(&json!({"name": "weather", "arguments": {}, "call_id": "c1"}))
        .await
        .expect("invoke sent");
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body,
        json!({"ok": true, "name": "weather", "call_id": "c1", "output": null, "is_error": true,
               "error": HOP_REFUSAL})
    );
    assert_eq!(server.received().len(), 0);
    // Without the header the same call runs, and the callback is told where it came from.
    let result = invoke_ok(&app, "weather", json!({})).await;
    assert_eq!(result["output"], json!("ran"));
    let received = server.wait_for_requests(1).await;
    assert_eq!(received[0].header("x-runtime-tools-hop"), Some("1"));
}

#[actix_web::test]
async fn two_servers_whose_tools_call_each_other_stop_after_one_hop() {
    let a = spawn_app(&["Lanlan"]).await;
    let b = spawn_app(&["Lanlan"]).await;
    register(
        &a,
        tool_body("echo", &b.url("/api/tools/invoke"), "plugin:b"),
    )
    .await;
    register(
        &b,
        tool_body("echo", &a.url("/api/tools/invoke"), "plugin:a"),
    )
    .await;
    let (status, body) = invoke(
        &a,
        json!({"name": "echo", "arguments": {}, "call_id": "c7"}),
    )
    .await;
    assert_eq!(status, 200);
    // B refused the call from A's callback; A's caller gets B's refusal.
    assert_eq!(
        body,
        json!({"ok": true, "name": "echo", "call_id": "c7", "output": null, "is_error": true,
               "error": HOP_REFUSAL})
    );
}

async fn app_with_in_flight_limit(limit: usize) -> TestApp {
    let mut settings = settings(&["Lanlan"]);
    settings.dispatch.max_callbacks_in_flight = limit;
    spawn_app_with(settings).await
}

#[actix_web::test]
async fn calls_past_the_in_flight_limit_get_a_tool_error() {
    let app = app_with_in_flight_limit(2).await;
    let server = CallbackServer::with("/cb", Reply::after_gate(Reply::output(json!("done"))));
    register(&app, tool_body("slow", &server.url("/cb"), "plugin:slow")).await;
    let held: Vec<_> = (0..2).map(|_| spawn_invoke(&app, "slow")).collect();
    server.wait_for_requests(2).await;
    let refused = invoke_ok(&app, "slow", json!({})).await;
    assert_eq!(
        error_text(&refused),
        "too many tool callbacks in flight (dispatch.max_callbacks_in_flight = 2); the call was \
         not sent"
    );
    assert_eq!(server.received().len(), 2);
    server.open_gate();
    for result in join_all(held).await {
        assert_eq!(result.unwrap()["output"], json!("done"));
    }
    // The slots were given back.
    let result = invoke_ok(&app, "slow", json!({})).await;
    assert_eq!(result["output"], json!("done"));
}

#[actix_web::test]
async fn a_callback_exchange_ends_when_the_invoke_client_goes_away() {
    let app = app_with_in_flight_limit(1).await;
    let held = CallbackServer::with("/cb", Reply::HoldOpen);
    // The longest timeout there is: only a cancellation closes the connection within the
    // test's deadline.
    register(
        &app,
        tool_with_timeout("held", &held.url("/cb"), "plugin:held", 300.0),
    )
    .await;
    let mut events = open(&app, "", None).await.expect("stream opens");
    events.expect("hello").await;
    let body = json!({"name": "held", "arguments": {}}).to_string();
    let mut client = actix_web::rt::net::TcpStream::connect(app.addr)
        .await
        .unwrap();
    client
        .write_all(
            format!(
                "POST /api/tools/invoke HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: \
                 application/json\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    held.wait_for_requests(1).await;
    drop(client);
    // The server closes its connection to the callback: the exchange is over.
    held.wait_for_closed(1).await;
    // And the call is announced as cancelled, with how long it ran.
    let cancelled = events.wait_for("tool.call", |d| d["tool"] == "held").await;
    assert!(
        cancelled.data["call_id"]
            .as_str()
            .unwrap()
            .starts_with("call_")
    );
    let mut data = cancelled.data.clone();
    data["call_id"] = json!(null);
    assert_call(
        &Received { data, ..cancelled },
        json!({"role": "Lanlan", "tool": "held", "source": "plugin:held", "call_id": null,
               "caller": "invoke", "is_error": true, "cancelled": true}),
    );
    // And its slot is free again (the limit is 1).
    let ok = CallbackServer::with("/cb", Reply::output(json!("free")));
    register(&app, tool_body("ok", &ok.url("/cb"), "plugin:ok")).await;
    let result = invoke_ok(&app, "ok", json!({})).await;
    assert_eq!(result["output"], json!("free"), "{result}");
}
