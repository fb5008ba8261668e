//! Long-running tools (`behavior: "non_blocking"`): a registration says whether the model's
//! conversation waits for a tool's calls; a non-blocking call is answered at once as running,
//! its result reaches the model as a `system` message when the plugin answers, and the model is
//! asked to speak of it by the answer's `scheduling` (when idle, silent, interrupt). Against the
//! fake realtime peer as the model, with plugins that hold their answers until the test opens
//! their gate; every event the server sent validates against the OpenAI SDK's schema.

use runtime_tools::Dialect;
use serde_json::{Value, json};

use crate::callback_server::{CallbackServer, Reply, register, tool_with_timeout};
use crate::event_stream::{EventReader, open};
use crate::fake_realtime::{AckMode, EVENT_DEADLINE, FakeRealtime};
use crate::helpers::{TestApp, app_with_session, spawn_app, tool_body};
use crate::relay::server_events;
use crate::schema::validate_client_events;
use crate::sessions::{call_event, response_done};

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

/// The slow tools of these tests, each behind a gate the test opens: `search` answers
/// `{"flights": 3}` (when idle, the default), `quiet` answers with `scheduling: "silent"`,
/// `urgent` with `scheduling: "interrupt"`; `watch` never answers (its plugin holds the
/// connection and counts its close); `book` is blocking and never answers.
struct Slow {
    search: CallbackServer,
    second: CallbackServer,
    quiet: CallbackServer,
    urgent: CallbackServer,
    watch: CallbackServer,
    book: CallbackServer,
}

impl Slow {
    fn start() -> Self {
        let gated = |path: &str, body: Value| {
            CallbackServer::with(path, Reply::after_gate(Reply::json(body)))
        };
        Self {
            search: gated("/search", json!({"output": {"flights": 3}})),
            second: gated("/second", json!({"output": {"hotels": 2}})),
            quiet: gated(
                "/quiet",
                json!({"output": {"note": "saved"}, "scheduling": "silent"}),
            ),
            urgent: gated(
                "/urgent",
                json!({"output": {"alarm": "now"}, "scheduling": "interrupt"}),
            ),
            watch: CallbackServer::with("/watch", Reply::HoldOpen),
            book: CallbackServer::with("/book", Reply::HoldOpen),
        }
    }

    /// Registers every tool for Mio: the gated ones non-blocking, `book` blocking.
    async fn register(&self, app: &TestApp) {
        for (name, server, path) in [
            ("search", &self.search, "/search"),
            ("second", &self.second, "/second"),
            ("quiet", &self.quiet, "/quiet"),
            ("urgent", &self.urgent, "/urgent"),
            ("watch", &self.watch, "/watch"),
        ] {
            let mut body = tool_with_timeout(name, &server.url(path), "plugin:travel", 300.0);
            body["behavior"] = json!("non_blocking");
            register(app, body).await;
        }
        register(
            app,
            tool_with_timeout("book", &self.book.url("/book"), "plugin:travel", 300.0),
        )
        .await;
    }
}

const TOOLS: [&str; 6] = ["search", "second", "quiet", "urgent", "watch", "book"];

/// Mio's session on `fake` with the slow tools, and its event stream.
async fn session(fake: &FakeRealtime, slow: &Slow) -> (TestApp, EventReader) {
    let app = app_with_session(&fake.url, &[], Dialect::Openai, |_| {}).await;
    slow.register(&app).await;
    fake.update_with_tools(&TOOLS).await;
    let mut stream = open(&app, "?role=Mio", None).await.expect("stream opens");
    stream.expect("hello").await;
    (app, stream)
}

pub fn response_created(response: &str) -> Value {
    json!({"type": "response.created", "event_id": format!("srv_created_{response}"),
           "response": {"id": response, "object": "realtime.response", "status": "in_progress",
                        "output": []}})
}

/// Waits until Mio's session says its conversation is `state` (the model's events before it
/// were read).
pub async fn conversation_is(app: &TestApp, state: &str) {
    let deadline = tokio::time::Instant::now() + EVENT_DEADLINE;
    loop {
        let (_, sessions) = app.get("/api/sessions").await;
        let now = &sessions["sessions_by_role"]["Mio"]["connections"][0]["conversation"];
        if now == state {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the conversation never became {state}: {sessions}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// The model begins `response`, and the server has seen it.
pub async fn responding(app: &TestApp, fake: &FakeRealtime, response: &str) {
    fake.push(response_created(response)).await;
    conversation_is(app, "responding").await;
}

/// The model calls `name` in `response`, from its start to its end.
async fn model_calls(fake: &FakeRealtime, response: &str, call_id: &str, name: &str) {
    fake.push(response_created(response)).await;
    fake.push(call_event(response, call_id, name, "{}")).await;
    fake.push(response_done(response, &[(call_id, name, "{}")]))
        .await;
}

/// The `function_call_output` texts the server sent for `call_id`.
pub fn outputs_of(events: &[Value], call_id: &str) -> Vec<Value> {
    events
        .iter()
        .filter(|e| e["item"]["type"] == "function_call_output" && e["item"]["call_id"] == call_id)
        .map(|e| serde_json::from_str(e["item"]["output"].as_str().unwrap()).unwrap())
        .collect()
}

/// The texts of the `system` message items the server sent, in order.
pub fn system_texts(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["type"] == "conversation.item.create" && e["item"]["role"] == "system")
        .map(|e| e["item"]["content"][0]["text"].as_str().unwrap().to_owned())
        .collect()
}

/// How many events of `kind` the server itself sent.
pub fn sent(events: &[Value], kind: &str) -> usize {
    events
        .iter()
        .filter(|e| {
            e["type"] == kind
                && e["event_id"]
                    .as_str()
                    .is_some_and(|id| id.starts_with("rt_"))
        })
        .count()
}

/// Waits until the model has `n` system messages; returns every event.
pub async fn system_messages(fake: &FakeRealtime, n: usize) -> Vec<Value> {
    fake.wait_for(&format!("{n} system message(s)"), |events| {
        (system_texts(events).len() >= n).then(|| events.to_vec())
    })
    .await
}

/// Everything the server decided before now has reached the model: a registration's update
/// goes after it on the same connection. Returns every event by then.
async fn settled(app: &TestApp, fake: &FakeRealtime, n: usize) -> Vec<Value> {
    let quick = CallbackServer::with("/q", Reply::output(json!({})));
    let name = format!("barrier_{n}");
    register(app, tool_body(&name, &quick.url("/q"), "plugin:barrier")).await;
    let mut names: Vec<&str> = TOOLS.to_vec();
    let barriers: Vec<String> = (1..=n).map(|i| format!("barrier_{i}")).collect();
    names.extend(barriers.iter().map(String::as_str));
    fake.update_with_tools(&names).await;
    fake.events()
}

#[actix_web::test]
async fn a_non_blocking_call_is_answered_as_running_and_its_result_comes_when_the_model_is_idle() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let slow = Slow::start();
    let (app, mut stream) = session(&fake, &slow).await;

    model_calls(&fake, "r1", "c1", "search").await;
    // Answered at once, while the plugin still works: the output says it runs, and the turn
    // goes on.
    let events = fake
        .wait_for("c1's running answer and a response.create", |events| {
            (sent(events, "response.create") == 1).then(|| events.to_vec())
        })
        .await;
    assert_eq!(
        outputs_of(&events, "c1"),
        [json!({"status": "running", "tool": "search", "call_id": "c1"})]
    );
    slow.search.wait_for_requests(1).await;
    let (_, sessions) = app.get("/api/sessions").await;
    let running = &sessions["sessions_by_role"]["Mio"]["connections"][0]["running_calls"];
    assert_eq!(running.as_array().unwrap().len(), 1, "{sessions}");
    assert_eq!(
        (
            &running[0]["tool"],
            &running[0]["call_id"],
            &running[0]["behavior"]
        ),
        (&json!("search"), &json!("c1"), &json!("non_blocking"))
    );
    assert!(running[0]["started"].as_str().unwrap().ends_with('Z'));

    // The model speaks (a response in progress) when the plugin answers.
    responding(&app, &fake, "r2").await;
    slow.search.open_gate();
    let events = system_messages(&fake, 1).await;
    let text = &system_texts(&events)[0];
    assert!(
        text.contains("search") && text.contains("c1") && text.contains(r#"{"flights":3}"#),
        "{text}"
    );
    // No response.create while the response is in progress...
    let events = settled(&app, &fake, 1).await;
    assert_eq!(sent(&events, "response.create"), 1, "{events:#?}");
    // ...one once it is done.
    fake.push(response_done("r2", &[])).await;
    fake.wait_for("the response.create after r2", |events| {
        (sent(events, "response.create") == 2).then_some(())
    })
    .await;
    let call = stream.wait_for("tool.call", |d| d["call_id"] == "c1").await;
    assert_eq!(
        (
            &call.data["behavior"],
            &call.data["is_error"],
            &call.data["cancelled"]
        ),
        (&json!("non_blocking"), &json!(false), &json!(false))
    );
    let delivered = stream
        .wait_for("tool.result", |d| d["call_id"] == "c1")
        .await;
    assert_eq!(
        delivered.data,
        json!({"role": "Mio", "tool": "search", "call_id": "c1", "kind": "client",
               "scheduling": "when_idle", "is_error": false})
    );
    let (_, sessions) = app.get("/api/sessions").await;
    assert_eq!(
        sessions["sessions_by_role"]["Mio"]["connections"][0]["running_calls"],
        json!([])
    );
    let report = validate_client_events(server_events(&fake)).await;
    assert!(report.is_ok(), "{report:?}");
}

#[actix_web::test]
async fn results_ready_during_one_response_come_in_order_with_one_response_create() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let slow = Slow::start();
    let (app, _stream) = session(&fake, &slow).await;

    fake.push(response_created("r1")).await;
    fake.push(call_event("r1", "c1", "search", "{}")).await;
    fake.push(call_event("r1", "c2", "second", "{}")).await;
    fake.push(response_done(
        "r1",
        &[("c1", "search", "{}"), ("c2", "second", "{}")],
    ))
    .await;
    slow.search.wait_for_requests(1).await;
    slow.second.wait_for_requests(1).await;
    responding(&app, &fake, "r2").await;
    // The second finishes first.
    slow.second.open_gate();
    system_messages(&fake, 1).await;
    slow.search.open_gate();
    let events = system_messages(&fake, 2).await;
    let texts = system_texts(&events);
    assert!(
        texts[0].contains("c2") && texts[1].contains("c1"),
        "{texts:#?}"
    );
    let events = settled(&app, &fake, 1).await;
    assert_eq!(
        sent(&events, "response.create"),
        1,
        "the running answers' only"
    );
    fake.push(response_done("r2", &[])).await;
    fake.wait_for("one response.create after r2", |events| {
        (sent(events, "response.create") == 2).then_some(())
    })
    .await;
    let events = settled(&app, &fake, 2).await;
    assert_eq!(
        sent(&events, "response.create"),
        2,
        "both results in one response"
    );
}

#[actix_web::test]
async fn a_silent_result_asks_for_nothing_and_an_interrupting_one_cancels_the_response() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let slow = Slow::start();
    let (app, mut stream) = session(&fake, &slow).await;

    model_calls(&fake, "r1", "c1", "quiet").await;
    model_calls(&fake, "r2", "c2", "urgent").await;
    slow.quiet.wait_for_requests(1).await;
    slow.urgent.wait_for_requests(1).await;
    let before = sent(&settled(&app, &fake, 1).await, "response.create");

    // The session is idle; a silent result is only told.
    slow.quiet.open_gate();
    system_messages(&fake, 1).await;
    let events = settled(&app, &fake, 2).await;
    assert_eq!(
        sent(&events, "response.create"),
        before,
        "silent: {events:#?}"
    );
    let delivered = stream
        .wait_for("tool.result", |d| d["call_id"] == "c1")
        .await;
    assert_eq!(delivered.data["scheduling"], "silent");

    // A response is in progress; an interrupting result cancels it and asks at once.
    responding(&app, &fake, "r3").await;
    slow.urgent.open_gate();
    let events = fake
        .wait_for("the cancel and the response.create", |events| {
            (sent(events, "response.create") == before + 1).then(|| events.to_vec())
        })
        .await;
    let at = |kind: &str| {
        events
            .iter()
            .rposition(|e| e["type"] == kind && e["event_id"].as_str().unwrap().starts_with("rt_"))
            .unwrap()
    };
    let item = events
        .iter()
        .rposition(|e| e["item"]["role"] == "system")
        .unwrap();
    assert!(
        item < at("response.cancel") && at("response.cancel") < at("response.create"),
        "{events:#?}"
    );
    assert!(system_texts(&events)[1].contains("alarm"));
    let report = validate_client_events(server_events(&fake)).await;
    assert!(report.is_ok(), "{report:?}");
}

fn speech(kind: &str, n: u32) -> Value {
    json!({"type": format!("input_audio_buffer.{kind}"), "event_id": format!("srv_{kind}_{n}"),
           "audio_start_ms": 1000 * n, "audio_end_ms": 1000 * n + 500,
           "item_id": format!("item_user_{n}")})
}

#[actix_web::test]
async fn the_person_speaking_leaves_a_non_blocking_call_running_and_its_result_waits_for_them() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let slow = Slow::start();
    let (app, _stream) = session(&fake, &slow).await;

    model_calls(&fake, "r1", "c1", "search").await;
    model_calls(&fake, "r2", "c2", "book").await;
    slow.search.wait_for_requests(1).await;
    slow.book.wait_for_requests(1).await;
    fake.push(speech("speech_started", 1)).await;
    // The blocking call is cancelled; the non-blocking one runs on.
    slow.book.wait_for_closed(1).await;
    let events = settled(&app, &fake, 1).await;
    assert_eq!(
        outputs_of(&events, "c1").len(),
        1,
        "only the running answer"
    );
    let (_, sessions) = app.get("/api/sessions").await;
    let running = &sessions["sessions_by_role"]["Mio"]["connections"][0]["running_calls"];
    assert_eq!(running.as_array().unwrap().len(), 1, "{sessions}");
    let creates = sent(&events, "response.create");

    // Its result comes while the person speaks: told, not answered.
    conversation_is(&app, "person_speaking").await;
    slow.search.open_gate();
    system_messages(&fake, 1).await;
    fake.push(speech("speech_stopped", 1)).await;
    // The reply to the person's turn begins and ends; then the model speaks of the result.
    fake.push(response_created("r3")).await;
    let events = settled(&app, &fake, 2).await;
    assert_eq!(sent(&events, "response.create"), creates, "{events:#?}");
    fake.push(response_done("r3", &[])).await;
    // The reply covered it: it began after the result was told.
    let events = settled(&app, &fake, 3).await;
    assert_eq!(sent(&events, "response.create"), creates, "{events:#?}");
}

#[actix_web::test]
async fn when_nobody_replies_to_the_person_the_result_is_spoken_of_after_a_grace() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let slow = Slow::start();
    let (app, _stream) = session(&fake, &slow).await;

    model_calls(&fake, "r1", "c1", "search").await;
    slow.search.wait_for_requests(1).await;
    fake.push(speech("speech_started", 1)).await;
    conversation_is(&app, "person_speaking").await;
    slow.search.open_gate();
    system_messages(&fake, 1).await;
    fake.push(speech("speech_stopped", 1)).await;
    // No response begins (the app starts responses itself, and did not): the model is asked.
    fake.wait_for("the response.create after the grace", |events| {
        (sent(events, "response.create") == 2).then_some(())
    })
    .await;
}

#[actix_web::test]
async fn a_call_ends_with_its_tool_or_its_session_and_the_model_is_told_which() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let slow = Slow::start();
    let (app, mut stream) = session(&fake, &slow).await;

    model_calls(&fake, "r1", "c1", "watch").await;
    slow.watch.wait_for_requests(1).await;
    let (status, _) = app
        .post("/api/tools/unregister", &json!({"name": "watch"}))
        .await;
    assert_eq!(status, 200);
    slow.watch.wait_for_closed(1).await;
    let events = system_messages(&fake, 1).await;
    let text = &system_texts(&events)[0];
    assert!(
        text.contains("ended with an error") && text.contains("'watch' was removed"),
        "{text}"
    );
    let call = stream.wait_for("tool.call", |d| d["call_id"] == "c1").await;
    assert_eq!(
        (&call.data["is_error"], &call.data["cancelled"]),
        (&json!(true), &json!(true))
    );

    // The session ends under a running call: its plugin's connection closes at once.
    let mut watch = tool_with_timeout("watch", &slow.watch.url("/watch"), "plugin:travel", 300.0);
    watch["behavior"] = json!("non_blocking");
    register(&app, watch).await;
    model_calls(&fake, "r2", "c2", "watch").await;
    slow.watch.wait_for_requests(2).await;
    fake.drop_connection().await;
    slow.watch.wait_for_closed(2).await;
}

#[actix_web::test]
async fn through_the_relay_with_the_openai_sdk_as_the_app_the_result_follows_the_same_way() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let slow = Slow::start();
    let app = crate::relay::relay_app(&fake, &[], Dialect::Openai, |_| {}).await;
    slow.register(&app).await;
    let mut sdk = crate::sdk_app::SdkApp::start().await;
    sdk.connect_ok(&crate::relay::base(&app), json!({"character": "Mio"}))
        .await;
    fake.update_with_tools(&TOOLS).await;

    model_calls(&fake, "r1", "c1", "search").await;
    fake.wait_for("c1's running answer and a response.create", |events| {
        (sent(events, "response.create") == 1).then_some(())
    })
    .await;
    slow.search.open_gate();
    let events = system_messages(&fake, 1).await;
    assert!(system_texts(&events)[0].contains(r#"{"flights":3}"#));
    fake.wait_for("the response.create after the result", |events| {
        (sent(events, "response.create") == 2).then_some(())
    })
    .await;
    let (_, sessions) = app.get("/api/sessions").await;
    let relay = &sessions["sessions_by_role"]["Mio"]["connections"][0];
    assert_eq!(
        (&relay["kind"], &relay["running_calls"]),
        (&json!("relay"), &json!([]))
    );
    let report = validate_client_events(server_events(&fake)).await;
    assert!(report.is_ok(), "{report:?}");
}

#[actix_web::test]
async fn an_attached_call_answers_a_non_blocking_call_as_running_and_gets_its_result() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let slow = Slow::start();
    let app = app_with_session(&fake.url, &[], Dialect::Openai, |s| {
        s.mode = runtime_tools::SessionMode::Relay
    })
    .await;
    slow.register(&app).await;
    let mut stream = open(&app, "?role=Mio", None).await.expect("stream opens");
    stream.expect("hello").await;
    let url = format!("{}&call_id=rtc_1", fake.url);
    let (status, body) = app
        .post("/api/sessions/attach", &json!({"role": "Mio", "url": url}))
        .await;
    assert_eq!(status, 200, "{body}");
    fake.update_with_tools(&TOOLS).await;

    model_calls(&fake, "r1", "c1", "search").await;
    let events = fake
        .wait_for("c1's running answer and a response.create", |events| {
            (sent(events, "response.create") == 1).then(|| events.to_vec())
        })
        .await;
    assert_eq!(
        outputs_of(&events, "c1"),
        [json!({"status": "running", "tool": "search", "call_id": "c1"})]
    );
    slow.search.open_gate();
    let events = system_messages(&fake, 1).await;
    assert!(system_texts(&events)[0].contains(r#"{"flights":3}"#));
    let delivered = stream
        .wait_for("tool.result", |d| d["call_id"] == "c1")
        .await;
    assert_eq!(delivered.data["kind"], "attach");
    let report = validate_client_events(server_events(&fake)).await;
    assert!(report.is_ok(), "{report:?}");
}

/// Calls of `search` in one response of the model: as many as a session runs in its window.
const BURST: usize = 8;

/// The model calls `search` [`BURST`] times in one response and replies to the running answers;
/// then every result becomes ready at once, while the model takes its time to begin the
/// response it is asked for: one `response.create` covers them all, before it begins and after.
async fn a_burst_of_results_gets_one_response_create(
    app: &TestApp,
    fake: &FakeRealtime,
    slow: &Slow,
) {
    let calls: Vec<(String, &str, &str)> = (1..=BURST)
        .map(|i| (format!("c{i}"), "search", "{}"))
        .collect();
    fake.push(response_created("r1")).await;
    for (call_id, name, arguments) in &calls {
        fake.push(call_event("r1", call_id, name, arguments)).await;
    }
    let done: Vec<(&str, &str, &str)> =
        calls.iter().map(|(c, n, a)| (c.as_str(), *n, *a)).collect();
    fake.push(response_done("r1", &done)).await;
    fake.wait_for("the running answers' response.create", |events| {
        (sent(events, "response.create") == 1).then_some(())
    })
    .await;
    slow.search.wait_for_requests(BURST).await;
    fake.push(response_created("r2")).await;
    fake.push(response_done("r2", &[])).await;
    conversation_is(app, "idle").await;

    slow.search.open_gate();
    let events = system_messages(fake, BURST).await;
    assert_eq!(system_texts(&events).len(), BURST);
    conversation_is(app, "response_asked").await;
    let events = settled(app, fake, 1).await;
    assert_eq!(sent(&events, "response.create"), 2, "one for every result");
    // It begins and ends: nothing more is asked for.
    fake.push(response_created("r3")).await;
    fake.push(response_done("r3", &[])).await;
    conversation_is(app, "idle").await;
    let events = settled(app, fake, 2).await;
    assert_eq!(
        sent(&events, "response.create"),
        2,
        "{:#?}",
        system_texts(&events)
    );
}

#[actix_web::test]
async fn results_ready_together_ask_for_one_response_until_it_begins() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let slow = Slow::start();
    let (app, _stream) = session(&fake, &slow).await;
    a_burst_of_results_gets_one_response_create(&app, &fake, &slow).await;
}

#[actix_web::test]
async fn through_the_relay_with_the_openai_sdk_as_the_app_a_burst_gets_one_response_create() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let slow = Slow::start();
    let app = crate::relay::relay_app(&fake, &[], Dialect::Openai, |_| {}).await;
    slow.register(&app).await;
    let mut sdk = crate::sdk_app::SdkApp::start().await;
    sdk.connect_ok(&crate::relay::base(&app), json!({"character": "Mio"}))
        .await;
    fake.update_with_tools(&TOOLS).await;
    a_burst_of_results_gets_one_response_create(&app, &fake, &slow).await;
}
