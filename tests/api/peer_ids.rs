//! Call ids and tool names a model invents, bounded by bytes: `POST /api/tools/invoke` refuses a
//! `call_id` over 256 bytes (422, naming the field); a model's longer id (a realtime session's,
//! Gemini Live's, a chat or Responses upstream's) is kept cut, with a mark, wherever the server
//! keeps or shows it — the callback's body, the recent calls, the events — while the model is
//! answered with the id it sent, as each protocol needs; a name longer than any tool's is shown
//! cut the same way. A thousand such calls leave the server's memory (read from `/proc`) and
//! `GET /api/calls` as small as short ids do. And the log: a call id with a newline and
//! escape sequences is one field of one line, escaped, with no raw control byte.

use std::time::Duration;

use runtime_tools::limits::{MAX_CALL_ID_BYTES, RECENT_CALLS, RECENT_CALLS_MAX_BYTES};
use serde_json::{Value, json};

use crate::callback_server::{CallbackServer, Reply, register};
use crate::chat::{chat_server, register_weather};
use crate::churn::Server;
use crate::cli::{Child, TempDir};
use crate::event_stream::open;
use crate::fake_chat::{Answer, FakeChat, calls_completion, completion};
use crate::fake_gemini::{FakeGemini, SetupMode};
use crate::fake_realtime::{AckMode, FakeRealtime};
use crate::fake_responses::{FakeResponses, answer, call, message};
use crate::helpers::{TestApp, app_with_session, settings, spawn_app, spawn_app_with, tool_body};
use crate::sessions::{call_event, response_done};

/// A model's call id of this many bytes.
const LONG_ID_BYTES: usize = 900_000;

/// `text` as the server keeps and shows an id or a name a model invents (the documented rule:
/// within 256 bytes it is itself; else its start and `… (cut: N bytes in all, sha256 H)`, H the
/// first 16 hex digits of its SHA-256, 256 bytes in all).
pub fn cut(text: &str) -> String {
    if text.len() <= MAX_CALL_ID_BYTES {
        return text.to_owned();
    }
    let digest = ring::digest::digest(&ring::digest::SHA256, text.as_bytes());
    let hex: String = digest.as_ref()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let mark = format!("… (cut: {} bytes in all, sha256 {hex})", text.len());
    let mut end = MAX_CALL_ID_BYTES - mark.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{mark}", &text[..end])
}

/// A call id of `bytes` bytes, told apart by `tag`.
fn long_id(tag: &str, bytes: usize) -> String {
    let mut id = format!("call_{tag}_");
    id.push_str(&"x".repeat(bytes - id.len()));
    id
}

/// The recent calls, newest first: `(call_id, tool)` of each.
async fn recent(app: &TestApp) -> Vec<(String, String)> {
    let (status, calls) = app.get("/api/calls").await;
    assert_eq!(status, 200, "{calls}");
    calls["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["call_id"].as_str().unwrap().to_owned(),
                c["tool"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[actix_web::test]
async fn a_call_id_over_256_bytes_is_refused_at_invoke_naming_the_field() {
    let app = spawn_app(&["Mio"]).await;
    let callback = CallbackServer::with("/ok", Reply::output(json!("done")));
    register(
        &app,
        tool_body("lookup", &callback.url("/ok"), "plugin:ids"),
    )
    .await;
    let longest = "é".repeat(MAX_CALL_ID_BYTES / 2);
    let (status, answer) = app
        .post(
            "/api/tools/invoke",
            &json!({"name": "lookup", "call_id": longest}),
        )
        .await;
    assert_eq!(
        (status, &answer["call_id"], &answer["is_error"]),
        (200, &json!(longest), &json!(false))
    );
    for id in [format!("{longest}x"), "x".repeat(LONG_ID_BYTES)] {
        let (status, answer) = app
            .post(
                "/api/tools/invoke",
                &json!({"name": "lookup", "call_id": id}),
            )
            .await;
        assert_eq!(
            (status, answer),
            (
                422,
                json!({"ok": false, "detail": [{"loc": ["body", "call_id"],
                    "msg": format!("call_id is {} bytes long; at most 256 bytes are accepted",
                                   id.len()),
                    "type": "string_too_long"}]})
            )
        );
    }
    // Only the call within the bound ran.
    assert_eq!(callback.received().len(), 1);
    assert_eq!(recent(&app).await, [(longest, "lookup".to_owned())]);
}

#[actix_web::test]
async fn a_realtime_models_long_ids_and_names_are_kept_cut_and_the_model_gets_its_own_ids_back() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let app = app_with_session(&fake.url, &[], runtime_tools::Dialect::Openai, |_| {}).await;
    let callback = CallbackServer::with("/ok", Reply::output(json!("found")));
    register(
        &app,
        tool_body("lookup", &callback.url("/ok"), "plugin:ids"),
    )
    .await;
    fake.update_with_tools(&["lookup"]).await;
    let mut events = open(&app, "?role=Mio", None).await.expect("events open");
    let id = long_id("rt", LONG_ID_BYTES);
    let name = format!("invented_{}", "n".repeat(500_000));
    fake.push(call_event("r1", &id, "lookup", "{}")).await;
    fake.push(call_event("r1", "call_short", &name, "{}")).await;
    fake.push(response_done(
        "r1",
        &[(&id, "lookup", "{}"), ("call_short", &name, "{}")],
    ))
    .await;

    // The model is answered with each id it sent, exactly.
    let outputs = fake
        .wait_for("both calls answered", |events| {
            let outputs: Vec<(Value, Value)> = events
                .iter()
                .filter(|e| e["item"]["type"] == "function_call_output")
                .map(|e| (e["item"]["call_id"].clone(), e["item"]["output"].clone()))
                .collect();
            (outputs.len() == 2).then_some(outputs)
        })
        .await;
    assert!(
        outputs.contains(&(json!(id), json!("\"found\""))),
        "{outputs:?}"
    );
    assert!(
        outputs.iter().any(|(id, _)| id == "call_short"),
        "{outputs:?}"
    );
    // The callback, the recent calls and the events name the call by its id cut and marked.
    let got = callback.wait_for_requests(1).await;
    assert_eq!(got[0].json()["call_id"], json!(cut(&id)));
    let mut kept = recent(&app).await;
    kept.sort();
    assert_eq!(
        kept,
        [
            (cut(&id), "lookup".to_owned()),
            ("call_short".to_owned(), cut(&name))
        ]
    );
    let mut announced = Vec::new();
    while announced.len() < 2 {
        let event = events.wait_for("tool.call", |_| true).await;
        announced.push((
            event.data["call_id"].as_str().unwrap().to_owned(),
            event.data["tool"].as_str().unwrap().to_owned(),
        ));
    }
    announced.sort();
    assert_eq!(announced, kept);
}

#[actix_web::test]
async fn a_gemini_models_long_call_id_is_kept_cut_and_answered_as_sent() {
    let fake = FakeGemini::start(SetupMode::Complete).await;
    let mut config = settings(&["Mio"]);
    config.characters[0].session = Some(runtime_tools::SessionSettings::gemini(
        Some(&fake.url),
        Some("gemini-test"),
    ));
    let app = spawn_app_with(config).await;
    fake.nth_setup(1).await;
    let callback = CallbackServer::with("/ok", Reply::output(json!({"temp_c": 21})));
    register(
        &app,
        tool_body("lookup", &callback.url("/ok"), "plugin:ids"),
    )
    .await;
    fake.nth_setup(2).await;
    let id = long_id("gemini", LONG_ID_BYTES);
    fake.push_calls(&[(&id, "lookup", json!({}))]).await;
    let answer = fake.nth_tool_response(1).await;
    assert_eq!(
        answer.message["toolResponse"]["functionResponses"],
        json!([{"id": id, "name": "lookup", "response": {"temp_c": 21}}])
    );
    let got = callback.wait_for_requests(1).await;
    assert_eq!(got[0].json()["call_id"], json!(cut(&id)));
    assert_eq!(recent(&app).await, [(cut(&id), "lookup".to_owned())]);
}

#[actix_web::test]
async fn a_chat_upstreams_long_ids_and_names_are_kept_cut_and_its_tool_messages_carry_its_own() {
    let upstream = FakeChat::start();
    let app = chat_server(&upstream.base(), |_| {}).await;
    let callback = CallbackServer::with("/weather", Reply::output(json!({"temp_c": 28})));
    register_weather(&app, &callback).await;
    let id = long_id("chat", LONG_ID_BYTES);
    let name = format!("invented_{}", "n".repeat(500_000));
    upstream.script([
        Answer::Json(
            200,
            calls_completion(
                "c1",
                None,
                &[
                    (&id, "get_weather", json!({"location": "Tokyo"})),
                    ("call_short", &name, json!({})),
                ],
            ),
        ),
        Answer::Json(200, completion("c2", "Sunny.", (1, 1))),
    ]);
    let (status, answer) = app
        .post(
            "/v1/chat/completions",
            &json!({"model": "fake-model", "messages": [{"role": "user", "content": "Weather?"}]}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["choices"][0]["message"]["content"], "Sunny.");
    let bodies = upstream.bodies();
    let answered: Vec<&Value> = bodies[1]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| &m["tool_call_id"])
        .collect();
    assert_eq!(answered, [&json!(id), &json!("call_short")]);
    let got = callback.wait_for_requests(1).await;
    assert_eq!(got[0].json()["call_id"], json!(cut(&id)));
    let mut kept = recent(&app).await;
    kept.sort();
    assert_eq!(
        kept,
        [
            (cut(&id), "get_weather".to_owned()),
            ("call_short".to_owned(), cut(&name))
        ]
    );
}

#[actix_web::test]
async fn a_responses_upstreams_long_call_id_is_kept_cut_and_its_output_carries_its_own() {
    let mut upstream = FakeResponses::start().await;
    let app = chat_server(&upstream.base(), |_| {}).await;
    let callback = CallbackServer::with("/weather", Reply::output(json!({"temp_c": 28})));
    register_weather(&app, &callback).await;
    let id = long_id("responses", LONG_ID_BYTES);
    upstream
        .script(vec![
            answer(vec![call(&id, "get_weather", json!({"location": "Tokyo"}))]),
            answer(vec![message("Sunny.")]),
        ])
        .await;
    let (status, response) = app
        .post(
            "/v1/responses",
            &json!({"model": "fake-model", "input": "Weather?"}),
        )
        .await;
    assert_eq!(status, 200, "{response}");
    // The fake refuses, as the real API does, an output for a call it never made.
    let bodies = upstream.bodies().await;
    assert_eq!(bodies[1]["input"][0]["call_id"], json!(id));
    let got = callback.wait_for_requests(1).await;
    assert_eq!(got[0].json()["call_id"], json!(cut(&id)));
    assert_eq!(recent(&app).await, [(cut(&id), "get_weather".to_owned())]);
}

/// A thousand invokes with a 900,000-byte `call_id` (refused) and a thousand model calls with
/// 100,000-byte ids (kept cut) leave the server's memory where short ids left it, and the
/// recent calls' answer within their byte bound.
#[actix_web::test]
async fn a_thousand_long_call_ids_cost_no_more_memory_than_short_ones() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let callback = CallbackServer::with("/ok", Reply::output(json!("done")));
    let server = Server::start(
        "peer-ids",
        &format!(
            "[[character]]\nname = \"Mio\"\n[character.session]\nkind = \"openai-realtime\"\n\
             url = {url:?}\n",
            url = fake.url
        ),
    );
    let (status, answer) = server
        .post(
            "/api/tools/register",
            &tool_body("lookup", &callback.url("/ok"), "plugin:ids"),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    fake.update_with_tools(&["lookup"]).await;
    let model_calls = |tag: &'static str, bytes: usize| {
        let fake = fake.clone();
        async move {
            for i in 0..RECENT_CALLS {
                let id = long_id(&format!("{tag}{i:04}"), bytes);
                fake.push(call_event(&format!("r_{tag}{i}"), &id, "missing", "{}"))
                    .await;
            }
            long_id(&format!("{tag}{:04}", RECENT_CALLS - 1), bytes)
        }
    };
    // Warm: the rings full of short ids.
    for i in 0..RECENT_CALLS {
        let id = format!("call_warm_{i}");
        let (status, _) = server
            .post(
                "/api/tools/invoke",
                &json!({"name": "lookup", "call_id": id}),
            )
            .await;
        assert_eq!(status, 200);
    }
    let last = model_calls("warm", 64).await;
    newest_is(&server, &last).await;
    let warm = server.holdings();

    for i in 0..RECENT_CALLS {
        let (status, answer) = server
            .post(
                "/api/tools/invoke",
                &json!({"name": "lookup", "call_id": long_id(&i.to_string(), LONG_ID_BYTES)}),
            )
            .await;
        assert_eq!(
            (status, &answer["detail"][0]["type"]),
            (422, &json!("string_too_long"))
        );
    }
    let refused = server.holdings();
    let last = model_calls("long", 100_000).await;
    newest_is(&server, &last).await;
    let after = server.holdings();
    let body = recent_calls_body(&server, RECENT_CALLS).await;
    println!(
        "long call ids: warm {warm}; after the invokes {refused}; after the model's calls \
         {after}; GET /api/calls?limit=1000: {} bytes",
        body.len()
    );
    for now in [&refused, &after] {
        assert!(
            now.rss_kib <= warm.rss_kib + 32 * 1024,
            "warm {warm}; now {now}"
        );
    }
    assert!(body.len() <= RECENT_CALLS_MAX_BYTES, "{} bytes", body.len());
    let calls: Value = serde_json::from_slice(&body).unwrap();
    let calls = calls["calls"].as_array().unwrap();
    assert_eq!(calls.len(), RECENT_CALLS);
    assert!(
        calls
            .iter()
            .all(|c| c["call_id"].as_str().unwrap().len() <= MAX_CALL_ID_BYTES)
    );
}

/// `GET /api/calls?limit=N` of the child server, as the bytes it answered.
async fn recent_calls_body(server: &Server, limit: usize) -> Vec<u8> {
    let mut response = awc::Client::new()
        .get(server.url(&format!("/api/calls?limit={limit}")))
        .timeout(Duration::from_secs(60))
        .send()
        .await
        .expect("the recent calls answer");
    assert_eq!(response.status(), 200);
    response.body().limit(1 << 30).await.unwrap().to_vec()
}

/// Waits (within the deadline) until the child's newest recent call is the model's `id`.
async fn newest_is(server: &Server, id: &str) {
    let want = cut(id);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let (_, calls) = server.get("/api/calls?limit=1").await;
        if calls["calls"][0]["call_id"] == json!(want) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the newest call is not {want}: {calls}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The model's call id: a newline and a line shaped like the server's own, then a terminal's
/// escape sequences (clear the screen, set the window's title, the bell).
const FORGING_ID: &str = "call_1\n2026-01-01T00:00:00.000000Z ERROR forged: the operator token leaked\x1b[2J\x1b]0;pwned\x07";

/// The server's log (a child process's stderr, read as bytes) at `info`, where a call that waits
/// for approval is logged with its call id: the id is one field of one line, its control
/// characters escaped; no line is forged and no raw escape byte reaches the console.
#[actix_web::test]
async fn a_call_id_that_forges_a_log_line_is_logged_escaped_on_one_line() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let callback = CallbackServer::with("/send", Reply::output(json!("sent")));
    let dir = TempDir::new("peer-ids-log");
    let config = dir.file(
        "runtime-tools.toml",
        &format!(
            "bind = \"127.0.0.1:0\"\n[[character]]\nname = \"Mio\"\n[character.session]\n\
             kind = \"openai-realtime\"\nurl = {url:?}\n",
            url = fake.url
        ),
    );
    let config = config.to_string_lossy().into_owned();
    let mut child = Child::start_logging(&["serve", "--config", &config], "info");
    let (mut child, addr) = actix_web::rt::task::spawn_blocking(move || {
        let addr = child.listening("127.0.0.1");
        (child, addr)
    })
    .await
    .unwrap();
    let mut body = tool_body("send_message", &callback.url("/send"), "plugin:log");
    body["approval"] = json!("always");
    let answer = awc::Client::new()
        .post(format!("http://{addr}/api/tools/register"))
        .timeout(Duration::from_secs(60))
        .send_json(&body)
        .await
        .expect("registered");
    assert_eq!(answer.status(), 200);
    fake.update_with_tools(&["send_message"]).await;
    fake.push(call_event("r1", FORGING_ID, "send_message", "{}"))
        .await;
    fake.push(response_done("r1", &[(FORGING_ID, "send_message", "{}")]))
        .await;
    // The model is told the call waits for a person: it was logged by then.
    fake.wait_for("the call answered as awaiting approval", |events| {
        events
            .iter()
            .any(|e| e["item"]["call_id"] == FORGING_ID)
            .then_some(())
    })
    .await;
    child.signal("TERM");
    let log = actix_web::rt::task::spawn_blocking(move || {
        child.wait();
        child.stderr_bytes_after_exit()
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&log);
    assert!(
        !log.iter().any(|b| matches!(b, 0x1b | 0x07 | b'\r')),
        "a raw control byte in the log: {text}"
    );
    let lines: Vec<&str> = text.lines().collect();
    // Every line is one event: a timestamp, then its level.
    for line in &lines {
        let stamp = line.as_bytes();
        assert!(
            stamp.len() > 28 && stamp[4] == b'-' && stamp[10] == b'T' && stamp[26] == b'Z',
            "not an event line: {line:?}\n{text}"
        );
        assert!(
            !line.starts_with("2026-01-01T00:00:00.000000Z")
                && line[27..].split_whitespace().next() != Some("ERROR"),
            "a forged line: {line:?}"
        );
    }
    let escaped = "call_1\\n2026-01-01T00:00:00.000000Z ERROR forged: the operator token \
                   leaked\\u001b[2J\\u001b]0;pwned\\u0007";
    assert!(
        lines
            .iter()
            .any(|l| l.contains(" INFO ") && l.contains(&format!("call_id={escaped}"))),
        "the call id, escaped, in an INFO line: {text}"
    );
}
