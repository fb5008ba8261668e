//! A person approves before a tool acts: the policy (a registration's, a character's), the
//! pending approval bound to the exact call, the decision routes, and what the model is told, in
//! the server's own realtime connection (the fake realtime peer as the model), text chat (the
//! fake chat upstream), the Responses API (the fake Responses upstream) and an MCP client of
//! `/mcp` (the official MCP Python SDK). Plugins record every request, so "never called" is read
//! off them.

use std::collections::HashMap;
use std::process::Command;

use futures_util::StreamExt;
use runtime_tools::Dialect;
use serde_json::{Value, json};

use crate::callback_server::{CallbackServer, Reply, invoke};
use crate::chat::chat_server;
use crate::child::LineChild;
use crate::event_stream::{EventReader, FRAME_DEADLINE, open};
use crate::fake_chat::{Answer, FakeChat, call_chunks, calls_completion, completion, text_chunks};
use crate::fake_gemini::{FakeGemini, SetupMode};
use crate::fake_realtime::{AckMode, FakeRealtime};
use crate::fake_responses::{FakeResponses, answer, call, message};
use crate::helpers::{HTTP_DEADLINE, TestApp, app_with_session, settings, spawn_app_with};
use crate::non_blocking::{
    outputs_of, responding, response_created, sent, system_messages, system_texts,
};
use crate::python::{repo_file, venv_python};
use crate::sessions::{call_event, response_done};

/// `send_message`, which needs approval (`timeout` seconds to decide), answered by `callback`
/// at `/send`; its schema requires `to`.
fn send_message(callback: &CallbackServer, timeout: u64) -> Value {
    json!({
        "name": "send_message",
        "description": "Sends a message",
        "parameters": {"type": "object", "properties": {"to": {"type": "string"},
                       "text": {"type": "string"}}, "required": ["to"]},
        "callback_url": callback.url("/send"),
        "source": "plugin:messages",
        "role": "Mio",
        "approval": "always",
        "approval_timeout_seconds": timeout,
    })
}

async fn register(app: &TestApp, body: &Value) {
    let (status, answer) = app.register(body).await;
    assert_eq!(status, 200, "{answer}");
}

/// Decides approval `id` as the person (with the operator token); the status and answer.
async fn decide(app: &TestApp, id: &str, body: Value) -> (u16, Value) {
    app.post_as_operator(&format!("/api/approvals/{id}"), &body)
        .await
}

fn sha256(text: &str) -> String {
    ring::digest::digest(&ring::digest::SHA256, text.as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

async fn requested(stream: &mut EventReader, call_id: &str) -> Value {
    stream
        .wait_for("approval.requested", |d| d["call_id"] == call_id)
        .await
        .data
}

async fn resolved(stream: &mut EventReader, call_id: &str) -> Value {
    stream
        .wait_for("approval.resolved", |d| d["call_id"] == call_id)
        .await
        .data
}

#[actix_web::test]
async fn a_registration_and_a_character_set_the_policy_the_listing_shows_it_and_invoke_skips_it() {
    let mut config = settings(&["Mio", "Lanlan"]);
    config.characters[1].approval_always = vec!["lights".into()];
    let app = spawn_app_with(config).await;
    let callback = CallbackServer::with("/send", Reply::output(json!({"sent": true})));
    callback.route("/lights", Reply::output(json!({"on": false})));
    register(&app, &send_message(&callback, 30)).await;
    let lights = json!({"name": "lights", "callback_url": callback.url("/lights"),
                        "source": "plugin:home"});
    register(&app, &lights).await;

    for (field, bad, kind) in [
        ("approval", json!("sometimes"), "enum"),
        ("approval", json!(true), "string_type"),
        ("approval_timeout_seconds", json!(0), "greater_than_equal"),
        ("approval_timeout_seconds", json!(3601), "less_than_equal"),
        ("approval_timeout_seconds", json!(1.5), "int_type"),
        ("approval_timeout_seconds", json!("60"), "int_type"),
    ] {
        let mut body = send_message(&callback, 30);
        body["name"] = json!("odd");
        body[field] = bad.clone();
        let (status, answer) = app.register(&body).await;
        assert_eq!(status, 422, "{field} = {bad}: {answer}");
        assert_eq!(
            (&answer["detail"][0]["loc"], &answer["detail"][0]["type"]),
            (&json!(["body", field]), &json!(kind)),
            "{answer}"
        );
    }

    let (_, full) = app.get("/api/tools?detail=full").await;
    let policy = |role: &str, name: &str| {
        let tool = full["tools_by_role"][role]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .unwrap()
            .clone();
        (
            tool["approval"].clone(),
            tool["approval_timeout_seconds"].clone(),
        )
    };
    assert_eq!(policy("Mio", "send_message"), (json!("always"), json!(30)));
    assert_eq!(policy("Mio", "lights"), (json!("never"), json!(120)));
    // The character's rule, whatever the registration says.
    assert_eq!(policy("Lanlan", "lights"), (json!("always"), json!(120)));
    let (_, plain) = app.get("/api/tools?role=Mio").await;
    assert!(plain["tools_by_role"]["Mio"][0].get("approval").is_none());

    // The invoke's caller is the person trying the tool: it runs at once, and says so.
    let (status, answer) = invoke(
        &app,
        json!({"name": "send_message", "role": "Mio", "arguments": {"to": "Ann"}}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        (&answer["output"], &answer["approval"]),
        (&json!({"sent": true}), &json!("not_asked")),
        "{answer}"
    );
    let (_, plain) = invoke(&app, json!({"name": "lights", "role": "Mio"})).await;
    assert!(plain.get("approval").is_none(), "{plain}");
    let (_, ruled) = invoke(&app, json!({"name": "lights", "role": "Lanlan"})).await;
    assert_eq!(ruled["approval"], json!("not_asked"));
    let (_, listed) = app.get("/api/approvals").await;
    assert_eq!(listed, json!({"approvals": []}));
}

/// Mio's realtime session (the server's own connection) on `fake` with `send_message`
/// (`timeout` seconds to decide), and Mio's event stream.
async fn realtime(
    fake: &FakeRealtime,
    callback: &CallbackServer,
    timeout: u64,
) -> (TestApp, EventReader) {
    let app = app_with_session(&fake.url, &[], Dialect::Openai, |s| {
        s.max_tool_calls_per_window = 1000;
    })
    .await;
    register(&app, &send_message(callback, timeout)).await;
    fake.update_with_tools(&["send_message"]).await;
    let mut stream = open(&app, "?role=Mio", None).await.expect("stream opens");
    stream.expect("hello").await;
    (app, stream)
}

/// The model calls `send_message` with `arguments` (exact text) in its own response.
async fn model_sends(fake: &FakeRealtime, call_id: &str, arguments: &str) {
    let response = format!("r_{call_id}");
    fake.push(response_created(&response)).await;
    fake.push(call_event(&response, call_id, "send_message", arguments))
        .await;
    fake.push(response_done(
        &response,
        &[(call_id, "send_message", arguments)],
    ))
    .await;
}

#[actix_web::test]
async fn realtime_the_model_hears_at_once_and_the_call_runs_only_as_approved_and_once() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let callback = CallbackServer::with("/send", Reply::output(json!({"sent": true})));
    let (app, mut stream) = realtime(&fake, &callback, 300).await;

    // Arguments that break the schema get the fix-it text at once; nobody is asked.
    model_sends(&fake, "c0", "{}").await;
    let events = fake
        .wait_for("c0's answer", |events| {
            (!outputs_of(events, "c0").is_empty()).then(|| events.to_vec())
        })
        .await;
    let fix = outputs_of(&events, "c0");
    assert!(
        fix[0]["error"].as_str().unwrap().contains("do not match"),
        "{fix:?}"
    );

    // The exact text the model sent: its spacing is what the digest covers.
    let text = r#"{"to": "Ann",  "text": "see you at 6"}"#;
    model_sends(&fake, "c1", text).await;
    let events = fake
        .wait_for("c1's awaiting answer", |events| {
            (!outputs_of(events, "c1").is_empty()).then(|| events.to_vec())
        })
        .await;
    assert_eq!(
        outputs_of(&events, "c1"),
        [json!({"status": "awaiting_approval", "tool": "send_message"})]
    );
    let record = requested(&mut stream, "c1").await;
    let id = record["id"].as_str().unwrap().to_owned();
    assert!(id.starts_with("apr_") && id.len() >= 4 + 32, "{id}");
    assert_eq!(
        (
            &record["role"],
            &record["tool"],
            &record["source"],
            &record["caller"],
            &record["kind"],
            &record["arguments"],
            &record["arguments_sha256"],
            &record["timeout_seconds"],
        ),
        (
            &json!("Mio"),
            &json!("send_message"),
            &json!("plugin:messages"),
            &json!("model"),
            &json!("client"),
            &json!({"to": "Ann", "text": "see you at 6"}),
            &json!(sha256(text)),
            &json!(300),
        ),
        "{record}"
    );
    assert!(record["generation"].as_u64().is_some());
    assert!(record["expires_at"].as_str().unwrap() > record["requested_at"].as_str().unwrap());
    let (_, listed) = app.get("/api/approvals?role=Mio").await;
    assert_eq!(listed["approvals"], json!([record]));
    let (status, _) = app.get("/api/approvals?role=Nobody").await;
    assert_eq!(status, 404);
    // The model's turn went on (the character can say what it is about to do and ask): c0's
    // answer and c1's each asked for a response.
    let asks = 2;
    fake.wait_for("c1's response.create", |events| {
        (sent(events, "response.create") == asks).then_some(())
    })
    .await;
    assert!(callback.received().is_empty(), "called before approval");

    // Bad decisions change nothing.
    for bad in [
        json!({"decision": "maybe"}),
        json!({}),
        json!({"decision": "approve", "by": "model"}),
        json!({"decision": "deny", "reason": "x".repeat(1025)}),
    ] {
        let (status, answer) = decide(&app, &id, bad.clone()).await;
        assert_eq!(status, 422, "{bad}: {answer}");
    }
    let (status, _) = decide(&app, "apr_unknown", json!({"decision": "approve"})).await;
    assert_eq!(status, 404);
    assert!(callback.received().is_empty());

    let (status, answer) = decide(&app, &id, json!({"decision": "approve"})).await;
    assert_eq!(
        (status, answer),
        (200, json!({"ok": true, "id": id, "decision": "approve"}))
    );
    let received = callback.wait_for_requests(1).await;
    assert_eq!(
        received[0].json()["arguments"],
        json!({"to": "Ann", "text": "see you at 6"})
    );
    assert_eq!(received[0].json()["raw_arguments"], json!(text));
    let outcome = resolved(&mut stream, "c1").await;
    assert_eq!(
        outcome,
        json!({"id": id, "role": "Mio", "tool": "send_message", "call_id": "c1",
               "outcome": "approved", "reason": null})
    );
    // The outcome comes as a system message, and (the model idle) one response.create.
    let events = system_messages(&fake, 1).await;
    let told = &system_texts(&events)[0];
    assert!(
        told.contains("approved") && told.contains("c1") && told.contains(r#"{"sent":true}"#),
        "{told}"
    );
    fake.wait_for("the response.create for c1's outcome", |events| {
        (sent(events, "response.create") > asks).then_some(())
    })
    .await;
    let call = stream.wait_for("tool.call", |d| d["call_id"] == "c1").await;
    assert_eq!(call.data["outcome"], json!("ok"));

    // Single use.
    let (status, answer) = decide(&app, &id, json!({"decision": "deny"})).await;
    assert_eq!(status, 409, "{answer}");
    assert!(
        answer["detail"]
            .as_str()
            .unwrap()
            .contains("already approved"),
        "{answer}"
    );
    let (_, listed) = app.get("/api/approvals").await;
    assert_eq!(listed, json!({"approvals": []}));

    // Denied: never called, and the model is told not to try again.
    model_sends(&fake, "c2", r#"{"to": "Bo"}"#).await;
    let id2 = requested(&mut stream, "c2").await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, _) = decide(
        &app,
        &id2,
        json!({"decision": "deny", "reason": "not to Bo"}),
    )
    .await;
    assert_eq!(status, 200);
    let outcome = resolved(&mut stream, "c2").await;
    assert_eq!(
        (&outcome["outcome"], &outcome["reason"]),
        (&json!("denied"), &json!("not to Bo"))
    );
    let events = system_messages(&fake, 2).await;
    let told = &system_texts(&events)[1];
    assert!(
        told.contains("declined") && told.contains("not to Bo") && told.contains("Do not try"),
        "{told}"
    );
    let call = stream.wait_for("tool.call", |d| d["call_id"] == "c2").await;
    assert_eq!(call.data["outcome"], json!("denied"));
    let (status, answer) = decide(&app, &id2, json!({"decision": "approve"})).await;
    assert_eq!(status, 409);
    assert!(
        answer["detail"]
            .as_str()
            .unwrap()
            .contains("already denied")
    );
    assert_eq!(callback.received().len(), 1, "a denied call was run");
}

#[actix_web::test]
async fn realtime_expiry_a_replaced_tool_and_the_when_idle_rule() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let callback = CallbackServer::with("/send", Reply::output(json!({"sent": true})));
    let (app, mut stream) = realtime(&fake, &callback, 1).await;

    // Nobody answers within the second: expired, by its own timer, and the model may ask again.
    model_sends(&fake, "c1", r#"{"to": "Ann"}"#).await;
    let record = requested(&mut stream, "c1").await;
    let outcome = resolved(&mut stream, "c1").await;
    assert_eq!(outcome["outcome"], json!("expired"), "{outcome}");
    let events = system_messages(&fake, 1).await;
    let told = &system_texts(&events)[0];
    assert!(
        told.contains("nobody answered") && !told.contains("declined"),
        "{told}"
    );
    let (status, answer) = decide(
        &app,
        record["id"].as_str().unwrap(),
        json!({"decision": "approve"}),
    )
    .await;
    assert_eq!(status, 409);
    assert!(
        answer["detail"].as_str().unwrap().contains("expired"),
        "{answer}"
    );
    let call = stream.wait_for("tool.call", |d| d["call_id"] == "c1").await;
    assert_eq!(call.data["outcome"], json!("expired"));

    // A new registration of the tool voids what waits under the old one.
    register(&app, &send_message(&callback, 300)).await;
    fake.update_with_tools(&["send_message"]).await;
    model_sends(&fake, "c2", r#"{"to": "Bo"}"#).await;
    requested(&mut stream, "c2").await;
    let mut replaced = send_message(&callback, 300);
    replaced["description"] = json!("Sends a message, now politely");
    register(&app, &replaced).await;
    let outcome = resolved(&mut stream, "c2").await;
    assert_eq!(outcome["outcome"], json!("cancelled"), "{outcome}");
    assert!(
        outcome["reason"]
            .as_str()
            .unwrap()
            .contains("the tool changed"),
        "{outcome}"
    );
    let events = system_messages(&fake, 2).await;
    assert!(
        system_texts(&events)[1].contains("cancelled"),
        "{events:#?}"
    );

    // Approved while the model speaks: told at once, asked to speak only when it is done.
    model_sends(&fake, "c3", r#"{"to": "Cy"}"#).await;
    let id = requested(&mut stream, "c3").await["id"]
        .as_str()
        .unwrap()
        .to_owned();
    responding(&app, &fake, "r_speaking").await;
    let asks = sent(&fake.events(), "response.create");
    decide(&app, &id, json!({"decision": "approve"})).await;
    let events = system_messages(&fake, 3).await;
    assert!(system_texts(&events)[2].contains("approved"));
    assert_eq!(
        sent(&events, "response.create"),
        asks,
        "asked while the model spoke"
    );
    fake.push(response_done("r_speaking", &[])).await;
    fake.wait_for("the response.create once the model is done", |events| {
        (sent(events, "response.create") == asks + 1).then_some(())
    })
    .await;
    assert_eq!(callback.received().len(), 1);
}

#[actix_web::test]
async fn the_pending_set_is_bounded_and_an_ended_session_cancels_its_approvals() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let callback = CallbackServer::with("/send", Reply::output(json!({"sent": true})));
    let (app, mut stream) = realtime(&fake, &callback, 300).await;
    for i in 0..32 {
        model_sends(&fake, &format!("c{i}"), r#"{"to": "Ann"}"#).await;
        requested(&mut stream, &format!("c{i}")).await;
    }
    // The 33rd is refused at once: not queued, nobody asked.
    model_sends(&fake, "c32", r#"{"to": "Ann"}"#).await;
    let events = fake
        .wait_for("c32's answer", |events| {
            (!outputs_of(events, "c32").is_empty()).then(|| events.to_vec())
        })
        .await;
    let refused = &outputs_of(&events, "c32")[0];
    assert!(
        refused["error"].as_str().unwrap().contains("at most 32"),
        "{refused}"
    );
    let (_, listed) = app.get("/api/approvals?role=Mio").await;
    assert_eq!(listed["approvals"].as_array().unwrap().len(), 32);

    // The session ends (its connection drops): each approval it held is cancelled.
    fake.drop_connection().await;
    for i in 0..32 {
        let outcome = resolved(&mut stream, &format!("c{i}")).await;
        assert_eq!(outcome["outcome"], json!("cancelled"), "{outcome}");
    }
    let (_, listed) = app.get("/api/approvals").await;
    assert_eq!(listed, json!({"approvals": []}));
    assert!(callback.received().is_empty());
}

/// A chat character on `upstream` with `send_message` registered (it needs approval), and Mio's
/// event stream.
async fn chat_with_send_message(upstream: &FakeChat) -> (TestApp, CallbackServer, EventReader) {
    let app = chat_server(&upstream.base(), |_| {}).await;
    let callback = CallbackServer::with("/send", Reply::output(json!({"sent": true})));
    register(&app, &send_message(&callback, 300)).await;
    let stream = open(&app, "?role=Mio", None).await.expect("stream opens");
    (app, callback, stream)
}

/// The upstream's answer that calls `send_message` to Ann as `call`.
fn asks_to_send(call: &str) -> Answer {
    Answer::Json(
        200,
        calls_completion(
            &format!("cmpl-{call}"),
            None,
            &[(call, "send_message", json!({"to": "Ann"}))],
        ),
    )
}

#[actix_web::test]
async fn a_chat_request_waits_for_the_decision_and_the_model_hears_it() {
    let upstream = FakeChat::start();
    let (app, callback, mut stream) = chat_with_send_message(&upstream).await;
    upstream.script([
        asks_to_send("call_1"),
        Answer::Json(200, completion("cmpl-2", "Sent.", (5, 1))),
        asks_to_send("call_2"),
        Answer::Json(200, completion("cmpl-4", "I will not.", (5, 1))),
    ]);
    let request = json!({"model": "fake-model",
                         "messages": [{"role": "user", "content": "Tell Ann hi"}]});
    let client = app.client.clone();
    let url = app.url("/v1/chat/completions");
    let post = |body: Value| {
        let (client, url) = (client.clone(), url.clone());
        actix_web::rt::spawn(async move {
            let mut response = client.post(url).send_json(&body).await.unwrap();
            let bytes = response.body().limit(1 << 20).await.unwrap();
            (
                response.status().as_u16(),
                serde_json::from_slice::<Value>(&bytes).unwrap(),
            )
        })
    };

    let pending = post(request.clone());
    let record = requested(&mut stream, "call_1").await;
    assert_eq!(
        (&record["caller"], &record["kind"]),
        (&json!("model"), &json!("chat"))
    );
    assert!(callback.received().is_empty());
    decide(
        &app,
        record["id"].as_str().unwrap(),
        json!({"decision": "approve"}),
    )
    .await;
    // The call ran after the decision, not before.
    resolved(&mut stream, "call_1").await;
    stream
        .wait_for("tool.call", |d| d["call_id"] == "call_1")
        .await;
    let (status, answer) = pending.await.unwrap();
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["choices"][0]["message"]["content"], json!("Sent."));
    assert_eq!(callback.received().len(), 1);
    let bodies = upstream.bodies();
    let tool_message = bodies[1]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(tool_message["content"], json!(r#"{"sent":true}"#));

    let pending = post(request);
    let record = requested(&mut stream, "call_2").await;
    decide(
        &app,
        record["id"].as_str().unwrap(),
        json!({"decision": "deny", "reason": "not today"}),
    )
    .await;
    let (status, answer) = pending.await.unwrap();
    assert_eq!(status, 200, "{answer}");
    let bodies = upstream.bodies();
    let told = bodies[3]["messages"].as_array().unwrap().last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        told.contains("declined") && told.contains("not today"),
        "{told}"
    );
    assert_eq!(callback.received().len(), 1, "a denied call was run");
}

#[actix_web::test]
async fn a_chat_request_that_goes_away_cancels_its_approval() {
    let upstream = FakeChat::start();
    let (app, callback, mut stream) = chat_with_send_message(&upstream).await;
    upstream.script([Answer::Json(
        200,
        calls_completion(
            "cmpl-1",
            None,
            &[("call_1", "send_message", json!({"to": "Ann"}))],
        ),
    )]);
    let client = app.client.clone();
    let url = app.url("/v1/chat/completions");
    let request = actix_web::rt::spawn(async move {
        let _ = client
            .post(url)
            .send_json(&json!({"model": "fake-model",
                               "messages": [{"role": "user", "content": "Tell Ann hi"}]}))
            .await;
    });
    let record = requested(&mut stream, "call_1").await;
    request.abort();
    let outcome = resolved(&mut stream, "call_1").await;
    assert_eq!(outcome["outcome"], json!("cancelled"), "{outcome}");
    let (status, _) = decide(
        &app,
        record["id"].as_str().unwrap(),
        json!({"decision": "approve"}),
    )
    .await;
    assert_eq!(status, 409);
    assert!(callback.received().is_empty());
}

/// One step the client script printed, as JSON.
async fn step(client: &mut LineChild, name: &str) -> Value {
    let line = client.expect_line(&format!("{{\"step\": \"{name}\"")).await;
    serde_json::from_str(&line).expect("a JSON step")
}

#[actix_web::test]
async fn an_mcp_client_of_mcp_waits_for_the_decision() {
    let app = spawn_app_with(settings(&["Mio"])).await;
    let callback = CallbackServer::with("/send", Reply::output(json!({"sent": true})));
    register(&app, &send_message(&callback, 300)).await;
    let mut soon = send_message(&callback, 1);
    soon["name"] = json!("send_soon");
    register(&app, &soon).await;
    let mut stream = open(&app, "?role=Mio", None).await.expect("stream opens");
    let python = venv_python().await;
    let mut client = LineChild::spawn(
        Command::new(python)
            .arg(repo_file("tests/mcp_approval_client.py"))
            .arg(app.url("/mcp?role=Mio")),
    );
    step(&mut client, "initialized").await;

    // Approved: the call returns the tool's result, run once with the held arguments.
    let record = stream
        .wait_for("approval.requested", |d| d["caller"] == "mcp")
        .await
        .data;
    assert!(record.get("kind").is_none(), "{record}");
    assert_eq!(record["arguments"], json!({"to": "Ann"}));
    assert!(callback.received().is_empty());
    decide(
        &app,
        record["id"].as_str().unwrap(),
        json!({"decision": "approve"}),
    )
    .await;
    // The call ran after the decision, not before.
    stream
        .wait_for("approval.resolved", |d| d["id"] == record["id"])
        .await;
    stream
        .wait_for("tool.call", |d| d["call_id"] == record["call_id"])
        .await;
    let first = step(&mut client, "approved").await;
    assert_eq!(
        (&first["is_error"], &first["texts"]),
        (&json!(false), &json!([r#"{"sent":true}"#])),
        "{first}"
    );
    assert_eq!(
        callback.wait_for_requests(1).await[0].json()["arguments"],
        json!({"to": "Ann"})
    );

    // Denied: an error result saying so; never called.
    let record = stream
        .wait_for("approval.requested", |d| d["arguments"]["to"] == "Bo")
        .await
        .data;
    decide(
        &app,
        record["id"].as_str().unwrap(),
        json!({"decision": "deny", "reason": "no"}),
    )
    .await;
    let second = step(&mut client, "denied").await;
    assert_eq!(second["is_error"], json!(true));
    assert!(
        second["texts"][0].as_str().unwrap().contains("declined"),
        "{second}"
    );

    // Nobody answers: a different error, the call may be made again.
    let third = step(&mut client, "expired").await;
    assert_eq!(third["is_error"], json!(true));
    let text = third["texts"][0].as_str().unwrap();
    assert!(
        text.contains("nobody answered") && !text.contains("declined"),
        "{third}"
    );
    assert_eq!(callback.received().len(), 1);
    assert_eq!(client.wait_exit().await, Some(0));
}

#[actix_web::test]
async fn through_the_relay_with_the_openai_sdk_as_the_app_and_the_app_leaving_cancels() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let callback = CallbackServer::with("/send", Reply::output(json!({"sent": true})));
    let app = crate::relay::relay_app(&fake, &[], Dialect::Openai, |_| {}).await;
    register(&app, &send_message(&callback, 300)).await;
    let mut stream = open(&app, "?role=Mio", None).await.expect("stream opens");
    let mut sdk = crate::sdk_app::SdkApp::start().await;
    sdk.connect_ok(&crate::relay::base(&app), json!({"character": "Mio"}))
        .await;
    fake.update_with_tools(&["send_message"]).await;

    model_sends(&fake, "c1", r#"{"to": "Ann"}"#).await;
    let events = fake
        .wait_for("c1's awaiting answer and a response.create", |events| {
            (sent(events, "response.create") == 1).then(|| events.to_vec())
        })
        .await;
    assert_eq!(
        outputs_of(&events, "c1"),
        [json!({"status": "awaiting_approval", "tool": "send_message"})]
    );
    let record = requested(&mut stream, "c1").await;
    assert_eq!(record["kind"], json!("relay"));
    assert!(callback.received().is_empty());
    decide(
        &app,
        record["id"].as_str().unwrap(),
        json!({"decision": "approve"}),
    )
    .await;
    assert_eq!(
        callback.wait_for_requests(1).await[0].json()["arguments"],
        json!({"to": "Ann"})
    );
    let events = system_messages(&fake, 1).await;
    assert!(system_texts(&events)[0].contains("approved"));
    fake.wait_for("the response.create after the outcome", |events| {
        (sent(events, "response.create") == 2).then_some(())
    })
    .await;

    // The app leaves: the relay ends, and so does what waits in it.
    model_sends(&fake, "c2", r#"{"to": "Bo"}"#).await;
    requested(&mut stream, "c2").await;
    sdk.close(1000, "bye").await;
    let outcome = resolved(&mut stream, "c2").await;
    assert_eq!(outcome["outcome"], json!("cancelled"), "{outcome}");
    assert_eq!(callback.received().len(), 1);
    let report = crate::schema::validate_client_events(crate::relay::server_events(&fake)).await;
    assert!(report.is_ok(), "{report:?}");
}

#[actix_web::test]
async fn gemini_live_hears_at_once_and_the_outcome_as_a_turn() {
    let fake = FakeGemini::start(SetupMode::Complete).await;
    let mut config = settings(&["Mio"]);
    config.characters[0].session = Some(runtime_tools::SessionSettings::gemini(
        Some(&fake.url),
        Some("gemini-test"),
    ));
    let app = spawn_app_with(config).await;
    fake.nth_setup(1).await;
    let callback = CallbackServer::with("/send", Reply::output(json!({"sent": true})));
    register(&app, &send_message(&callback, 300)).await;
    fake.nth_setup(2).await;
    let mut stream = open(&app, "?role=Mio", None).await.expect("stream opens");

    fake.push_calls(&[("c1", "send_message", json!({"to": "Ann"}))])
        .await;
    let answer = fake.nth_tool_response(1).await;
    assert_eq!(
        answer.message,
        json!({"toolResponse": {"functionResponses": [{"id": "c1", "name": "send_message",
               "response": {"status": "awaiting_approval", "tool": "send_message"}}]}})
    );
    let record = requested(&mut stream, "c1").await;
    assert_eq!(record["kind"], json!("client"));
    assert!(callback.received().is_empty());
    decide(
        &app,
        record["id"].as_str().unwrap(),
        json!({"decision": "approve"}),
    )
    .await;
    let turn = |n: usize| {
        let fake = &fake;
        async move {
            fake.wait_until(&format!("client content turn #{n}"), |f| {
                f.messages()
                    .into_iter()
                    .filter(|m| m.get("clientContent").is_some())
                    .nth(n - 1)
            })
            .await
        }
    };
    let told = turn(1).await;
    let text = told["clientContent"]["turns"][0]["parts"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        text.contains("approved") && text.contains(r#"{"sent":true}"#),
        "{text}"
    );
    assert_eq!(told["clientContent"]["turnComplete"], json!(true));
    assert_eq!(callback.wait_for_requests(1).await.len(), 1);

    fake.push_calls(&[("c2", "send_message", json!({"to": "Bo"}))])
        .await;
    let record = requested(&mut stream, "c2").await;
    decide(
        &app,
        record["id"].as_str().unwrap(),
        json!({"decision": "deny", "reason": "no"}),
    )
    .await;
    let told = turn(2).await;
    let text = told["clientContent"]["turns"][0]["parts"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(text.contains("declined"), "{text}");
    assert_eq!(callback.received().len(), 1);
    let checked = crate::schema::validate_gemini_messages(fake.messages())
        .await
        .unwrap_or_else(|e| panic!("a message the server sent breaks the SDK's types: {e}"));
    assert!(checked.contains("client messages valid"), "{checked}");
}

#[actix_web::test]
async fn a_responses_request_waits_for_the_decision_and_the_model_hears_it() {
    let mut upstream = FakeResponses::start().await;
    let app = chat_server(&upstream.base(), |_| {}).await;
    let callback = CallbackServer::with("/send", Reply::output(json!({"sent": true})));
    register(&app, &send_message(&callback, 300)).await;
    let mut stream = open(&app, "?role=Mio", None).await.expect("stream opens");
    upstream
        .script(vec![
            answer(vec![call("call_1", "send_message", json!({"to": "Ann"}))]),
            answer(vec![message("Sent.")]),
            answer(vec![call("call_2", "send_message", json!({"to": "Bo"}))]),
            answer(vec![message("I will not.")]),
        ])
        .await;
    let post = |text: &str| {
        let request = app
            .client
            .post(app.url("/v1/responses"))
            .send_json(&json!({"model": "fake-model", "input": text}));
        actix_web::rt::spawn(async move {
            let mut response = request.await.unwrap();
            let bytes = response.body().limit(1 << 20).await.unwrap();
            (
                response.status().as_u16(),
                serde_json::from_slice::<Value>(&bytes).unwrap(),
            )
        })
    };

    let pending = post("Tell Ann hi");
    let record = requested(&mut stream, "call_1").await;
    assert_eq!(
        (&record["caller"], &record["kind"]),
        (&json!("model"), &json!("responses"))
    );
    assert!(callback.received().is_empty(), "run before the decision");
    decide(
        &app,
        record["id"].as_str().unwrap(),
        json!({"decision": "approve"}),
    )
    .await;
    let (status, answer) = pending.await.unwrap();
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["status"], json!("completed"), "{answer}");
    let received = callback.received();
    assert_eq!(received.len(), 1);
    assert_eq!(received[0].json()["arguments"], json!({"to": "Ann"}));
    let bodies = upstream.bodies().await;
    assert_eq!(
        bodies[1]["input"],
        json!([{"type": "function_call_output", "call_id": "call_1",
                "output": r#"{"sent":true}"#}])
    );

    let pending = post("Tell Bo hi");
    let record = requested(&mut stream, "call_2").await;
    decide(
        &app,
        record["id"].as_str().unwrap(),
        json!({"decision": "deny", "reason": "not today"}),
    )
    .await;
    let (status, answer) = pending.await.unwrap();
    assert_eq!(status, 200, "{answer}");
    let bodies = upstream.bodies().await;
    let told = bodies[3]["input"][0].clone();
    assert_eq!(
        (&told["type"], &told["call_id"]),
        (&json!("function_call_output"), &json!("call_2")),
        "{told}"
    );
    let told = told["output"].as_str().unwrap();
    assert!(
        told.contains("declined") && told.contains("not today"),
        "{told}"
    );
    assert_eq!(callback.received().len(), 1, "a denied call was run");
}

#[actix_web::test]
async fn a_tool_unregistered_or_cleared_while_it_waits_cancels_its_approval() {
    let upstream = FakeChat::start();
    let app = chat_server(&upstream.base(), |_| {}).await;
    let callback = CallbackServer::with("/send", Reply::output(json!({"sent": true})));
    let mut stream = open(&app, "?role=Mio", None).await.expect("stream opens");
    upstream.script([
        asks_to_send("call_1"),
        Answer::Json(200, completion("cmpl-2", "It was cancelled.", (5, 1))),
        asks_to_send("call_2"),
        Answer::Json(200, completion("cmpl-4", "It was cancelled.", (5, 1))),
    ]);
    let removals = [
        (
            "call_1",
            "/api/tools/unregister",
            json!({"name": "send_message"}),
        ),
        (
            "call_2",
            "/api/tools/clear",
            json!({"source": "plugin:messages"}),
        ),
    ];
    for (round, (call_id, path, body)) in removals.into_iter().enumerate() {
        register(&app, &send_message(&callback, 300)).await;
        let request = app
            .client
            .post(app.url("/v1/chat/completions"))
            .send_json(&json!({"model": "fake-model",
                    "messages": [{"role": "user", "content": "Tell Ann hi"}]}));
        let pending = actix_web::rt::spawn(async move {
            let mut response = request.await.unwrap();
            let bytes = response.body().limit(1 << 20).await.unwrap();
            (
                response.status().as_u16(),
                serde_json::from_slice::<Value>(&bytes).unwrap(),
            )
        });
        let record = requested(&mut stream, call_id).await;
        let (status, answer) = app.post(path, &body).await;
        assert_eq!(status, 200, "{path}: {answer}");
        let outcome = resolved(&mut stream, call_id).await;
        assert_eq!(outcome["outcome"], json!("cancelled"), "{path}: {outcome}");
        assert!(
            outcome["reason"]
                .as_str()
                .unwrap()
                .contains("the tool changed"),
            "{path}: {outcome}"
        );
        let (status, answer) = pending.await.unwrap();
        assert_eq!(status, 200, "{path}: {answer}");
        let bodies = upstream.bodies();
        let told = bodies[2 * round + 1]["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()["content"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(told.contains("cancelled"), "{path}: {told}");
        let (status, _) = decide(
            &app,
            record["id"].as_str().unwrap(),
            json!({"decision": "approve"}),
        )
        .await;
        assert_eq!(status, 409, "{path}: a cancelled approval was decided");
        assert!(
            callback.received().is_empty(),
            "{path}: the callback was called"
        );
    }
}

#[actix_web::test]
async fn a_streamed_chat_request_that_waits_for_approval_gets_keep_alive_comments() {
    let upstream = FakeChat::start();
    let (app, callback, mut stream) = chat_with_send_message(&upstream).await;
    upstream.script([
        Answer::stream(call_chunks(
            "cmpl-1",
            None,
            &[("call_1", "send_message", json!({"to": "Ann"}))],
        )),
        Answer::stream(text_chunks("cmpl-2", &["Sent."], (5, 1))),
    ]);
    let mut response = app
        .client
        .post(app.url("/v1/chat/completions"))
        .timeout(FRAME_DEADLINE * 4)
        .send_json(&json!({"model": "fake-model", "stream": true,
                           "messages": [{"role": "user", "content": "Tell Ann hi"}]}))
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let record = requested(&mut stream, "call_1").await;

    // Nothing else is said while the approval waits: the comments keep the stream alive.
    let mut seen = String::new();
    tokio::time::timeout(FRAME_DEADLINE, async {
        while !seen.contains(": keep-alive\n\n") {
            let chunk = response.next().await.expect("the stream goes on").unwrap();
            seen.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no keep-alive within {FRAME_DEADLINE:?}; read: {seen:?}"));
    assert!(callback.received().is_empty(), "run before the decision");

    decide(
        &app,
        record["id"].as_str().unwrap(),
        json!({"decision": "approve"}),
    )
    .await;
    let rest = response.body().limit(1 << 20).await.unwrap();
    let rest = std::str::from_utf8(&rest).unwrap();
    assert!(
        rest.contains("Sent.") && rest.trim_end().ends_with("data: [DONE]"),
        "{rest}"
    );
    assert_eq!(callback.received().len(), 1);
}

/// Rounds of [`a_decision_at_the_expiry_instant_has_one_outcome_that_every_side_agrees_on`]: each
/// holds as many approvals as a character may have pending.
const EXPIRY_ROUNDS: i64 = 8;
const PER_ROUND: i64 = 32;

/// Where the decisions aimed at the expiry instant go, in microseconds from `expires_at`: the
/// server's timer fires up to a millisecond or two after it (`expires_at` is cut to the
/// millisecond, the timer's wheel turns by whole milliseconds) and a decision takes a moment to
/// arrive, so the span leans late. All rounds together sweep it in steps of about 20 µs.
const EXPIRY_SWEEP_US: (i64, i64) = (-1_000, 4_000);

/// Approves approval `id` as the person (with the operator `token`) over a connection of its
/// own, opened now, sending the request at the wall-clock instant `at` (from a thread of its
/// own, so the instant is kept to well under a millisecond); the status and answer.
fn approve_at(
    addr: std::net::SocketAddr,
    token: &str,
    id: &str,
    at: std::time::SystemTime,
) -> (u16, Value) {
    use std::io::{Read, Write};

    let body = r#"{"decision": "approve"}"#;
    let request = format!(
        "POST /api/approvals/{id} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut socket = std::net::TcpStream::connect(addr).expect("connected");
    socket.set_nodelay(true).unwrap();
    socket.set_read_timeout(Some(HTTP_DEADLINE)).unwrap();
    if let Ok(wait) = at.duration_since(std::time::SystemTime::now()) {
        std::thread::sleep(wait);
    }
    socket.write_all(request.as_bytes()).expect("decision sent");
    let mut answer = Vec::new();
    socket.read_to_end(&mut answer).expect("answer read");
    let answer = String::from_utf8(answer).expect("a text answer");
    let (head, body) = answer.split_once("\r\n\r\n").expect("a whole answer");
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok());
    (
        status.unwrap_or_else(|| panic!("no status in {head:?}")),
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body:?}")),
    )
}

/// `expires_at` shifted by `offset_us` microseconds.
fn at_offset(expires_at: &str, offset_us: i64) -> std::time::SystemTime {
    let expires = humantime::parse_rfc3339(expires_at).expect("an RFC 3339 expires_at");
    let shift = std::time::Duration::from_micros(offset_us.unsigned_abs());
    if offset_us < 0 {
        expires - shift
    } else {
        expires + shift
    }
}

#[actix_web::test]
async fn a_decision_at_the_expiry_instant_has_one_outcome_that_every_side_agrees_on() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let callback = CallbackServer::with("/send", Reply::output(json!({"sent": true})));
    let (app, mut stream) = realtime(&fake, &callback, 1).await;
    let (mut counted, mut disagreed) = ((0, 0), Vec::new());
    for round in 0..EXPIRY_ROUNDS {
        let calls: Vec<String> = (0..PER_ROUND).map(|i| format!("r{round}c{i}")).collect();
        for call_id in &calls {
            model_sends(&fake, call_id, &format!(r#"{{"to": "{call_id}"}}"#)).await;
        }
        // Each decision is aimed at its approval's expiry: the first of a round well before it,
        // the second well after, the rest swept across the instant itself.
        let mut decisions = Vec::new();
        for (i, call_id) in (0..).zip(&calls) {
            let record = requested(&mut stream, call_id).await;
            let offset_us = match i {
                0 => -500_000,
                1 => 500_000,
                _ => {
                    let (from, to) = EXPIRY_SWEEP_US;
                    let slot = (i - 2) * EXPIRY_ROUNDS + round;
                    from + (to - from) * slot / ((PER_ROUND - 2) * EXPIRY_ROUNDS)
                }
            };
            let at = at_offset(record["expires_at"].as_str().unwrap(), offset_us);
            let (addr, id) = (app.addr, record["id"].as_str().unwrap().to_owned());
            let token = app.operator_token.clone();
            decisions.push(actix_web::rt::task::spawn_blocking(move || {
                approve_at(addr, &token, &id, at)
            }));
        }
        let mut answers = Vec::new();
        for decision in decisions {
            answers.push(decision.await.expect("the decision's thread"));
        }
        // Every approval ends (approval.resolved) and every call is announced once it is
        // answered (tool.call), whichever way it went.
        let (mut resolved, mut announced) = (HashMap::new(), HashMap::new());
        while resolved.len() < calls.len() || announced.len() < calls.len() {
            let event = stream.next_event().await;
            let call_id = event.data["call_id"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            match event.event.as_str() {
                "approval.resolved" => resolved.insert(call_id, event.data["outcome"].clone()),
                "tool.call" => announced.insert(call_id, event.data["outcome"].clone()),
                _ => None,
            };
        }
        let ran: Vec<Value> = callback
            .received()
            .iter()
            .map(|r| r.json()["arguments"]["to"].clone())
            .collect();
        for (call_id, (status, answer)) in calls.iter().zip(&answers) {
            let runs = ran.iter().filter(|to| *to == call_id).count();
            let seen = (&resolved[call_id], &announced[call_id], runs);
            let agreed = match status {
                200 => {
                    counted.0 += 1;
                    seen == (&json!("approved"), &json!("ok"), 1)
                }
                409 => {
                    counted.1 += 1;
                    answer["detail"].as_str().unwrap().ends_with(
                        "expired before a decision: a decision is taken once, while the call waits",
                    ) && seen == (&json!("expired"), &json!("expired"), 0)
                }
                _ => false,
            };
            if !agreed {
                disagreed.push(format!(
                    "{call_id}: the decision got {status} {answer}; approval.resolved: {}, \
                     tool.call: {}, callback calls: {runs}",
                    seen.0, seen.1
                ));
            }
        }
    }
    eprintln!(
        "decisions at the expiry instant: {} won, {} lost to the expiry",
        counted.0, counted.1
    );
    assert!(
        disagreed.is_empty(),
        "a decision's answer, approval.resolved, tool.call and the callback disagree:\n{}",
        disagreed.join("\n")
    );
}
