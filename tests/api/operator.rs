//! The person's credential: deciding an approval needs the operator token, generated at start
//! and printed on the inspector line, or read from `[security] operator_token_env`; any other
//! caller — a plugin with its own token included — is refused and the call does not run.
//! `[security] decisions = "loopback"` lets any local caller decide.

use std::time::Duration;

use serde_json::{Value, json};

use crate::callback_server::{CallbackServer, Reply};
use crate::cli::{Child, TempDir};
use crate::event_stream::{EventReader, open};
use crate::fake_chat::{Answer, FakeChat, calls_completion, completion};
use crate::helpers::{TestApp, raw_exchange, raw_head, settings, spawn_app_with};

/// A decision on `id` sent to `addr` with these extra headers, over a connection of its own.
fn decide_raw(addr: std::net::SocketAddr, id: &str, headers: &[(&str, &str)]) -> (u16, Value) {
    let host = addr.to_string();
    let body = br#"{"decision": "approve"}"#;
    let length = body.len().to_string();
    let mut all = vec![
        ("Host", host.as_str()),
        ("Content-Type", "application/json"),
        ("Content-Length", length.as_str()),
    ];
    all.extend_from_slice(headers);
    let mut request = raw_head("POST", &format!("/api/approvals/{id}"), &all);
    request.extend_from_slice(body);
    let response = raw_exchange(addr, request);
    (response.status, response.json())
}

/// What a decision without the token is told when the token was made at start.
const GENERATED_HINT: &str = "send it as \"Authorization: Bearer TOKEN\"; the server printed it \
                              at start on its standard output, on the line \"inspector: \
                              http://HOST:PORT/#token=TOKEN\"";

#[test]
fn the_token_printed_on_the_inspector_line_decides_and_no_other_value_does() {
    let mut child = Child::start_logging(&["serve", "--bind", "127.0.0.1:0"], "debug");
    let addr = child.listening("127.0.0.1");
    let token = child
        .printed_token()
        .expect("a made token is printed")
        .to_owned();
    assert_eq!(token.len(), 32, "128 bits in hex: {token}");
    assert!(token.bytes().all(|b| b.is_ascii_hexdigit()), "{token}");

    assert_eq!(
        decide_raw(addr, "apr_nobody", &[]),
        (
            401,
            json!({"ok": false, "detail": format!("deciding an approval needs the operator token: {GENERATED_HINT}")})
        )
    );
    let plugin = [("Authorization", "Bearer a-plugin-token-0123456789")];
    assert_eq!(
        decide_raw(addr, "apr_nobody", &plugin),
        (
            403,
            json!({"ok": false, "detail": format!(
                "deciding an approval needs the operator token, and the bearer token sent is \
                 not it (a plugin's token is not the operator's): {GENERATED_HINT}")})
        )
    );
    let basic = [("Authorization", "Basic b3BlcmF0b3I6c2VjcmV0")];
    assert_eq!(decide_raw(addr, "apr_nobody", &basic).0, 401);
    // With the printed token the decision goes through to the approvals: none of this id.
    let bearer = format!("Bearer {token}");
    assert_eq!(
        decide_raw(addr, "apr_nobody", &[("Authorization", &bearer)]),
        (
            404,
            json!({"ok": false, "detail": "no approval with id apr_nobody"})
        )
    );
    // A token of another start is not this one.
    let mut other = Child::start(&["serve", "--bind", "127.0.0.1:0"]);
    let other_addr = other.listening("127.0.0.1");
    assert_ne!(
        other.printed_token(),
        Some(token.as_str()),
        "new at each start"
    );
    assert_eq!(
        decide_raw(other_addr, "apr_nobody", &[("Authorization", &bearer)]).0,
        403
    );

    child.signal("TERM");
    let stderr = child.stderr_after_exit();
    assert!(stderr.contains("DEBUG"), "logged at debug: {stderr}");
    assert!(
        !stderr.contains(&token),
        "the token is never logged: {stderr}"
    );
}

#[test]
fn a_configured_token_is_read_from_its_variable_and_not_printed() {
    let dir = TempDir::new("operator-configured");
    let config = dir.file(
        "operator.toml",
        "bind = \"127.0.0.1:0\"\n[security]\noperator_token_env = \"RT_TEST_OPERATOR\"\n",
    );
    let token = "person-at-the-machine-0123456789";
    let config_arg = config.to_str().unwrap();
    let mut child = Child::start_with_env(
        &["serve", "--config", config_arg],
        &[("RT_TEST_OPERATOR", token)],
    );
    let addr = child.listening("127.0.0.1");
    assert_eq!(
        child.inspector.as_deref(),
        Some(format!("inspector: http://{addr}/").as_str())
    );
    assert_eq!(child.printed_token(), None);
    let (status, answer) = decide_raw(addr, "apr_nobody", &[]);
    assert_eq!(
        (status, answer),
        (
            401,
            json!({"ok": false, "detail": "deciding an approval needs the operator token: send \
                   it as \"Authorization: Bearer TOKEN\"; it is the value of the environment \
                   variable RT_TEST_OPERATOR ([security] operator_token_env)"})
        )
    );
    let bearer = format!("Bearer {token}");
    assert_eq!(
        decide_raw(addr, "apr_nobody", &[("Authorization", &bearer)]).0,
        404
    );

    // Without the variable, or with a value too short to be a token, the server does not start.
    for (env, why) in [
        (
            vec![],
            "environment variable RT_TEST_OPERATOR is not set".to_owned(),
        ),
        (
            vec![("RT_TEST_OPERATOR", "short")],
            "environment variable RT_TEST_OPERATOR: the token must be 16 to 256 visible ASCII \
             characters, got 5"
                .to_owned(),
        ),
    ] {
        let mut failed = Child::start_with_env(&["serve", "--config", config_arg], &env);
        let status = failed.wait();
        let stderr = failed.stderr_after_exit();
        assert_eq!(status.code(), Some(1), "{stderr}");
        assert!(
            stderr.contains(&format!("key `security.operator_token_env`: {why}"))
                && stderr.contains(config_arg),
            "{stderr}"
        );
    }
}

/// `send_message` for Mio, which needs approval, answered at `/send`.
fn send_message(callback: &CallbackServer) -> Value {
    json!({
        "name": "send_message",
        "description": "Sends a message",
        "parameters": {"type": "object", "properties": {"to": {"type": "string"}}},
        "callback_url": callback.url("/send"),
        "source": "plugin:messages",
        "role": "Mio",
        "approval": "always",
        "approval_timeout_seconds": 300,
    })
}

/// A server whose Mio chats on `upstream`, with `send_message` registered by a plugin that holds
/// a token of its own; Mio's event stream.
async fn chat_app(
    upstream: &FakeChat,
    tweak: impl FnOnce(&mut runtime_tools::Settings),
) -> (TestApp, CallbackServer, EventReader) {
    let mut config = settings(&["Mio"]);
    config.characters[0].chat = Some(runtime_tools::ChatSettings::new(upstream.base()));
    tweak(&mut config);
    let app = spawn_app_with(config).await;
    let callback = CallbackServer::with("/send", Reply::output(json!({"sent": true})));
    let request = app
        .client
        .post(app.url("/api/tools/register"))
        .insert_header(("X-Plugin-Token", PLUGIN_TOKEN));
    let (status, answer) = app.send(request, Some(&send_message(&callback))).await;
    assert_eq!(status, 200, "{answer}");
    let stream = open(&app, "?role=Mio", None).await.expect("stream opens");
    (app, callback, stream)
}

/// The token of the plugin that registered `send_message`.
const PLUGIN_TOKEN: &str = "the-messages-plugin-0123456789";

/// Starts a chat request whose model calls `send_message` as `call`, then answers "Sent.".
fn ask_to_send(
    app: &TestApp,
    upstream: &FakeChat,
    call: &str,
) -> actix_web::rt::task::JoinHandle<u16> {
    upstream.script([
        Answer::Json(
            200,
            calls_completion(
                &format!("cmpl-{call}"),
                None,
                &[(call, "send_message", json!({"to": "Ann"}))],
            ),
        ),
        Answer::Json(200, completion("cmpl-done", "Sent.", (5, 1))),
    ]);
    let request = json!({"model": "m", "messages": [{"role": "user", "content": "Tell Ann hi"}]});
    let sent = app.client.post(app.url("/v1/chat/completions"));
    actix_web::rt::spawn(async move {
        let mut response = sent
            .timeout(Duration::from_secs(120))
            .send_json(&request)
            .await
            .unwrap();
        let _ = response.body().await;
        response.status().as_u16()
    })
}

async fn decide_with(app: &TestApp, id: &str, authorization: Option<&str>) -> (u16, Value) {
    let mut request = app.client.post(app.url(&format!("/api/approvals/{id}")));
    if let Some(value) = authorization {
        request = request.insert_header(("Authorization", value));
    }
    app.send(request, Some(&json!({"decision": "approve"})))
        .await
}

#[actix_web::test]
async fn a_plugin_cannot_approve_its_own_call_and_the_operator_can() {
    let upstream = FakeChat::start();
    let (app, callback, mut stream) = chat_app(&upstream, |_| {}).await;
    let (_, health) = app.get("/api/health").await;
    assert_eq!(health["decisions"], json!("operator"));
    let pending = ask_to_send(&app, &upstream, "call_1");
    let record = stream
        .wait_for("approval.requested", |d| d["call_id"] == "call_1")
        .await
        .data;
    let id = record["id"].as_str().unwrap();

    // The plugin follows the stream, so it knows the id; neither no token nor its own decides.
    let (status, answer) = decide_with(&app, id, None).await;
    assert_eq!(status, 401, "{answer}");
    let plugins = format!("Bearer {PLUGIN_TOKEN}");
    let (status, answer) = decide_with(&app, id, Some(&plugins)).await;
    assert_eq!(status, 403, "{answer}");
    let request = app
        .client
        .post(app.url(&format!("/api/approvals/{id}")))
        .insert_header(("X-Plugin-Token", PLUGIN_TOKEN));
    let (status, _) = app
        .send(request, Some(&json!({"decision": "approve"})))
        .await;
    assert_eq!(status, 401);
    // Still waiting, never run.
    let (_, listed) = app.get("/api/approvals").await;
    assert_eq!(listed["approvals"][0]["id"], json!(id));
    assert!(callback.received().is_empty(), "run without the person");

    let operator = format!("Bearer {}", app.operator_token);
    let (status, answer) = decide_with(&app, id, Some(&operator)).await;
    assert_eq!(
        (status, answer),
        (200, json!({"ok": true, "id": id, "decision": "approve"}))
    );
    assert_eq!(pending.await.unwrap(), 200);
    assert_eq!(callback.received().len(), 1);
}

#[actix_web::test]
async fn with_decisions_loopback_any_local_caller_decides() {
    let upstream = FakeChat::start();
    let (app, callback, mut stream) = chat_app(&upstream, |s| {
        s.decisions = runtime_tools::Decisions::Loopback;
    })
    .await;
    let (_, health) = app.get("/api/health").await;
    assert_eq!(health["decisions"], json!("loopback"));
    let pending = ask_to_send(&app, &upstream, "call_1");
    let record = stream
        .wait_for("approval.requested", |d| d["call_id"] == "call_1")
        .await
        .data;
    let id = record["id"].as_str().unwrap();
    let (status, answer) = decide_with(&app, id, None).await;
    assert_eq!(
        (status, answer),
        (200, json!({"ok": true, "id": id, "decision": "approve"}))
    );
    assert_eq!(pending.await.unwrap(), 200);
    assert_eq!(callback.received().len(), 1);
}
