//! What the model gets, exactly: an error keeps the readable output the plugin sent with it (the
//! answers of the reference plugin server's tool route, as it really sends them), numbers pass
//! through as written both ways, and every HTTP/1.1 framing a raw-socket callback may use is
//! read whole or reported as the error it is.

use serde_json::{Value, json};

use crate::callback_server::{CallbackServer, Reply, error_text, invoke_ok, register};
use crate::helpers::{TestApp, spawn_app, tool_body};

/// A server with one `weather` tool whose callback gives `reply`.
async fn weather(reply: Reply) -> (TestApp, CallbackServer) {
    let app = spawn_app(&["Lanlan"]).await;
    let server = CallbackServer::with("/cb", reply);
    register(
        &app,
        tool_body("weather", &server.url("/cb"), "plugin:weather"),
    )
    .await;
    (app, server)
}

/// The invoke answer for a callback that answers `body` (JSON text, sent as is).
async fn answer_to(body: &str) -> Value {
    let (app, _server) = weather(Reply::text(200, "application/json", body)).await;
    let mut result = invoke_ok(&app, "weather", json!({})).await;
    result.as_object_mut().unwrap().remove("call_id");
    result
}

/// POSTs `body` (JSON text, sent as written) to the invoke route; the answer's status and text.
async fn invoke_text(app: &TestApp, body: &str) -> (u16, String) {
    let mut response = app
        .client
        .post(app.url("/api/tools/invoke"))
        .insert_header(("content-type", "application/json"))
        .send_body(body.to_owned())
        .await
        .expect("invoke sent");
    let bytes = response.body().await.expect("invoke answer");
    (
        response.status().as_u16(),
        String::from_utf8(bytes.to_vec()).unwrap(),
    )
}

#[actix_web::test]
async fn the_reference_plugin_routes_errors_reach_the_model_with_their_message() {
    // The plugin server's tool route answers each failure with HTTP 200, a short code in
    // `error` and the readable message in `output`.
    for (code, message) in [
        (
            "TOOL_NOT_REGISTERED",
            "tool 'weather' is not registered for plugin 'weather'",
        ),
        ("PLUGIN_NOT_RUNNING", "plugin 'weather' is not running"),
        ("TOOL_TIMEOUT", "tool 'weather' timed out after 30.0s"),
        // A handler that raised: the exception's type is the code.
        ("ValueError", "ValueError: boom"),
    ] {
        let sent = json!({"output": {"error": message}, "is_error": true, "error": code});
        let result = answer_to(&sent.to_string()).await;
        assert_eq!(
            result,
            json!({"ok": true, "name": "weather", "output": {"error": message},
                   "is_error": true, "error": code}),
            "{code}"
        );
    }
}

#[actix_web::test]
async fn a_reason_with_a_code_keeps_the_reason() {
    // A handler's `{"is_error": True, "reason": ..., "error": CODE}` goes out of the plugin
    // route without `output`; its other fields are the readable part.
    let result = answer_to(
        r#"{"is_error": true, "reason": "daily quota used up", "retry_after": 3600, "error": "QUOTA"}"#,
    )
    .await;
    assert_eq!(
        result,
        json!({"ok": true, "name": "weather",
               "output": {"reason": "daily quota used up", "retry_after": 3600},
               "is_error": true, "error": "QUOTA"})
    );
}

#[actix_web::test]
async fn an_error_answer_with_extra_keys_gives_its_output_and_error() {
    let result = answer_to(
        r#"{"is_error": true, "error": "rate limited", "output": {"detail": "slow down"}, "retry_after": 30, "images": []}"#,
    )
    .await;
    assert_eq!(
        result,
        json!({"ok": true, "name": "weather", "output": {"detail": "slow down"},
               "is_error": true, "error": "rate limited"})
    );
    // Without `error`: the stock text, and the output still goes along.
    let result = answer_to(r#"{"output": {"detail": "why"}, "is_error": "yes"}"#).await;
    assert_eq!(
        result,
        json!({"ok": true, "name": "weather", "output": {"detail": "why"}, "is_error": true,
               "error": "remote tool reported an error without a message"})
    );
    // A success without `output`: its other fields are the output.
    let result = answer_to(r#"{"is_error": false, "temperature_c": 28, "unit": "C"}"#).await;
    assert_eq!(
        result,
        json!({"ok": true, "name": "weather", "output": {"temperature_c": 28, "unit": "C"},
               "is_error": false})
    );
}

#[actix_web::test]
async fn numbers_reach_the_callback_and_come_back_exactly_as_written() {
    let output =
        r#"{"big": 123456789012345678901234567890, "tiny": 1.0000000000000000000001e-400}"#;
    let (app, server) = weather(Reply::text(
        200,
        "application/json",
        &format!(r#"{{"output": {output}, "is_error": false}}"#),
    ))
    .await;
    let arguments = r#"{"big": 123456789012345678901234567890,  "list": [1.50, -0.0, 0.1000000000000000055511151231257827]}"#;
    let (status, text) = invoke_text(
        &app,
        &format!(r#"{{"name": "weather", "call_id": "c1", "arguments": {arguments}}}"#),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        text,
        format!(
            r#"{{"ok":true,"name":"weather","call_id":"c1","output":{output},"is_error":false}}"#
        )
    );
    let received = server.wait_for_requests(1).await;
    let body = String::from_utf8(received[0].body.clone()).unwrap();
    assert_eq!(
        body,
        format!(
            r#"{{"name":"weather","arguments":{arguments},"call_id":"c1","raw_arguments":{}}}"#,
            serde_json::to_string(arguments).unwrap()
        )
    );
}

/// The result of a call whose callback sends `bytes` on a raw socket, then closes it.
async fn raw_answer(bytes: &[u8]) -> Value {
    let (app, _server) = weather(Reply::Raw(bytes.to_vec())).await;
    invoke_ok(&app, "weather", json!({})).await
}

#[actix_web::test]
async fn a_body_delimited_by_closing_the_connection_is_read_whole() {
    for head in [
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n\r\n",
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n",
        "HTTP/1.0 200 OK\r\ncontent-type: application/json\r\n\r\n",
    ] {
        let raw = format!(r#"{head}{{"output": {{"temperature_c": 28}}, "is_error": false}}"#);
        let result = raw_answer(raw.as_bytes()).await;
        assert_eq!(result["is_error"], json!(false), "{head:?}: {result}");
        assert_eq!(result["output"], json!({"temperature_c": 28}), "{head:?}");
    }
}

#[actix_web::test]
async fn an_interim_100_continue_before_the_answer_is_skipped() {
    let body = r#"{"output": "after continue", "is_error": false}"#;
    let raw = format!(
        "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    let result = raw_answer(raw.as_bytes()).await;
    assert_eq!(result["is_error"], json!(false), "{result}");
    assert_eq!(result["output"], json!("after continue"));
}

const CHUNKED_HEAD: &str =
    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";

#[actix_web::test]
async fn a_chunked_body_cut_off_mid_chunk_is_an_error() {
    let raw = format!("{CHUNKED_HEAD}20\r\n{{\"output\": \"par");
    let result = raw_answer(raw.as_bytes()).await;
    assert_eq!(
        error_text(&result),
        "remote tool callback closed the connection in the middle of its answer (15 bytes received)"
    );
    assert_eq!(result["output"], Value::Null);
}

#[actix_web::test]
async fn a_chunked_body_without_its_last_chunk_is_an_error() {
    let chunk = r#"{"output": "all"}"#;
    let raw = format!("{CHUNKED_HEAD}{:x}\r\n{chunk}\r\n", chunk.len());
    let result = raw_answer(raw.as_bytes()).await;
    assert_eq!(
        error_text(&result),
        "remote tool callback closed the connection in the middle of its answer (17 bytes received)"
    );
    // With its last chunk the same answer is read whole.
    let whole = format!("{CHUNKED_HEAD}{:x}\r\n{chunk}\r\n0\r\n\r\n", chunk.len());
    let result = raw_answer(whole.as_bytes()).await;
    assert_eq!(result["output"], json!("all"), "{result}");
}

#[actix_web::test]
async fn a_sized_body_cut_short_is_an_error() {
    let raw = b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{\"output\": \"par";
    let result = raw_answer(raw).await;
    assert_eq!(
        error_text(&result),
        "remote tool callback closed the connection in the middle of its answer (15 of 100 bytes received)"
    );
}

#[actix_web::test]
async fn an_error_nested_deeper_than_the_parser_limit_stays_an_error() {
    let nested = format!("{}{}", "[".repeat(200), "]".repeat(200));
    let body = format!(r#"{{"is_error": true, "error": "too deep to care", "output": {nested}}}"#);
    let raw = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    let (app, _server) = weather(Reply::Raw(raw.into_bytes())).await;
    let (status, text) = invoke_text(&app, r#"{"name": "weather", "call_id": "c"}"#).await;
    assert_eq!(status, 200);
    assert_eq!(
        text,
        format!(
            r#"{{"ok":true,"name":"weather","call_id":"c","output":{nested},"is_error":true,"error":"too deep to care"}}"#
        )
    );
}

#[actix_web::test]
async fn a_realtime_model_reads_the_error_with_its_output_and_its_numbers_exactly() {
    use runtime_tools::Dialect;
    use runtime_tools::SessionSettings;

    use crate::fake_realtime::{AckMode, FakeRealtime};

    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let mut settings = crate::helpers::settings(&["Mio"]);
    settings.characters[0].session = Some(SessionSettings::new(&fake.url, Dialect::Openai));
    let app = crate::helpers::spawn_app_with(settings).await;
    fake.nth_update(1).await;
    let server = CallbackServer::start();
    server.route(
        "/boom",
        Reply::text(
            200,
            "application/json",
            r#"{"output": {"error": "ValueError: boom"}, "is_error": true, "error": "ValueError"}"#,
        ),
    );
    server.route(
        "/big",
        Reply::text(
            200,
            "application/json",
            r#"{"output": {"n": 123456789012345678901234567890}}"#,
        ),
    );
    for name in ["boom", "big"] {
        register(
            &app,
            tool_body(name, &server.url(&format!("/{name}")), "plugin:t"),
        )
        .await;
    }
    let arguments = r#"{"id": 98765432109876543210987654321}"#;
    for (call_id, name) in [("c1", "boom"), ("c2", "big")] {
        fake.push(
            json!({"type": "response.function_call_arguments.done", "response_id": "r1",
            "item_id": format!("i_{call_id}"), "output_index": 0, "call_id": call_id,
            "name": name, "arguments": arguments}),
        )
        .await;
    }
    let outputs = fake
        .wait_for("both answers", |events| {
            let outputs: Vec<(String, String)> = events
                .iter()
                .filter(|e| e["item"]["type"] == "function_call_output")
                .map(|e| {
                    (
                        e["item"]["call_id"].as_str().unwrap().to_owned(),
                        e["item"]["output"].as_str().unwrap().to_owned(),
                    )
                })
                .collect();
            (outputs.len() == 2).then_some(outputs)
        })
        .await;
    let text = |id: &str| outputs.iter().find(|(c, _)| c == id).unwrap().1.clone();
    assert_eq!(
        text("c1"),
        r#"{"error":"ValueError","output":{"error": "ValueError: boom"},"is_error":true}"#
    );
    assert_eq!(text("c2"), r#"{"n": 123456789012345678901234567890}"#);
    for request in server.wait_for_requests(2).await {
        let body = String::from_utf8(request.body.clone()).unwrap();
        assert!(
            body.contains(&format!(r#""arguments":{arguments},"#)),
            "{body}"
        );
    }
}
