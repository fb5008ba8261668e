//! When the person interrupts: the calls of the turn they abandon are cancelled. Against the fake
//! realtime peer as the model — the server's own connection, an attached call, and through the
//! relay with the official OpenAI SDK as the app: the person starts speaking
//! (`input_audio_buffer.speech_started`), the app adds the person's message or cancels the
//! response, or the provider cancels the response, while a slow callback runs. The plugin sees
//! its connection close; the model gets a `function_call_output` saying the call was cancelled
//! and no `response.create` for that turn; the call is announced as cancelled; an in-process
//! tool's future is dropped; `cancel_on_interruption = false` keeps the call running to its end;
//! a relay that closes drops its running calls too; and every event the server sent validates
//! against the SDK's schema.

use std::sync::{Arc, Mutex};

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use runtime_tools::{
    Dialect, LocalHandler, LocalToolHandler, Parameters, RegisterTool, SessionMode, ToolCall,
    ToolOutcome, ToolSpec,
};
use serde_json::{Map, Value, json};
use tokio::sync::oneshot;

use crate::callback_server::{CallbackServer, Reply, register, tool_with_timeout};
use crate::event_stream::{EventReader, open};
use crate::events::assert_call;
use crate::fake_realtime::{AckMode, EVENT_DEADLINE, FakeRealtime, update_tool_names};
use crate::helpers::{TestApp, app_with_session, tool_body};
use crate::non_blocking::sent as server_events_of;
use crate::relay::{base, relay_app, server_events};
use crate::schema::validate_client_events;
use crate::sdk_app::SdkApp;
use crate::sessions::{call_event, response_done};

/// What the provider sends when it hears the person start speaking (server VAD).
fn speech_started(n: u32) -> Value {
    json!({"type": "input_audio_buffer.speech_started", "event_id": format!("srv_speech_{n}"),
           "audio_start_ms": 1200 * n, "item_id": format!("item_user_{n}")})
}

/// The start of the error every cancelled call's output carries.
const CANCELLED: &str = "cancelled because the person interrupted: a new user turn began after \
                         the call had run ";

/// The three tools of these tests: `find_flight` never answers (the plugin holds the connection
/// and counts its close), `book_hotel` answers when `gated`'s gate opens, `get_weather` at
/// once. Each may take longer than any test waits: only a cancel ends the slow ones in time.
struct Plugins {
    held: CallbackServer,
    gated: CallbackServer,
    quick: CallbackServer,
}

impl Plugins {
    fn start() -> Self {
        Self {
            held: CallbackServer::with("/held", Reply::HoldOpen),
            gated: CallbackServer::with(
                "/gated",
                Reply::after_gate(Reply::output(json!({"booked": "Hotel Kyoto"}))),
            ),
            quick: CallbackServer::with("/quick", Reply::output(json!({"temperature_c": 28}))),
        }
    }

    async fn register(&self, app: &TestApp) {
        for (name, server, path) in [
            ("find_flight", &self.held, "/held"),
            ("book_hotel", &self.gated, "/gated"),
        ] {
            register(
                app,
                tool_with_timeout(name, &server.url(path), "plugin:travel", 300.0),
            )
            .await;
        }
        register(
            app,
            tool_body("get_weather", &self.quick.url("/quick"), "plugin:weather"),
        )
        .await;
    }
}

/// The model calls `name` in `response` (the call, then the response's end).
async fn model_calls(fake: &FakeRealtime, response: &str, call_id: &str, name: &str) {
    fake.push(call_event(response, call_id, name, "{}")).await;
    fake.push(response_done(response, &[(call_id, name, "{}")]))
        .await;
}

/// Mio relays to `fake`, with the plugins' tools; its events, and the SDK app connected through
/// the relay once the model has the tools.
async fn relayed(fake: &FakeRealtime, plugins: &Plugins) -> (TestApp, EventReader, SdkApp) {
    let app = relay_app(fake, &[], Dialect::Openai, |_| {}).await;
    plugins.register(&app).await;
    let mut stream = open(&app, "?role=Mio", None).await.expect("stream opens");
    stream.expect("hello").await;
    let mut sdk = SdkApp::start().await;
    sdk.connect_ok(&base(&app), json!({"character": "Mio"}))
        .await;
    fake.update_with_tools(&["find_flight", "book_hotel", "get_weather"])
        .await;
    (app, stream, sdk)
}

/// Waits until the app's event `event_id` has gone up, and checks that the answer to `call_id`
/// (which it cancelled) went up before it; returns the events and the app event's place.
async fn answered_before(
    fake: &FakeRealtime,
    call_id: &str,
    event_id: &str,
) -> (Vec<Value>, usize) {
    let events = fake
        .wait_for(&format!("the app's {event_id}"), |events| {
            events
                .iter()
                .any(|e| e["event_id"] == event_id)
                .then(|| events.to_vec())
        })
        .await;
    let answer = events
        .iter()
        .position(|e| e["item"]["call_id"] == call_id)
        .expect("the cancelled call is answered");
    let app_event = events
        .iter()
        .position(|e| e["event_id"] == event_id)
        .unwrap();
    assert!(
        answer < app_event,
        "the cancelled answer goes up before the app's {event_id}: {events:#?}"
    );
    (events, app_event)
}

/// The model calls the slow `find_flight` in `resp_N` (`call_N`), as the relay tests' turn `n`.
async fn slow_call(fake: &FakeRealtime, n: u32) -> String {
    let (response, call) = (format!("resp_{n}"), format!("call_{n}"));
    model_calls(fake, &response, &call, "find_flight").await;
    call
}

/// The `function_call_output`s the server sent for `call_id`: their output texts.
fn outputs_of(events: &[Value], call_id: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| {
            e["type"] == "conversation.item.create"
                && e["item"]["type"] == "function_call_output"
                && e["item"]["call_id"] == call_id
        })
        .map(|e| e["item"]["output"].as_str().unwrap().to_owned())
        .collect()
}

/// Whether an output text is the cancelled answer.
fn is_cancelled(output: &str) -> bool {
    let output: Value = serde_json::from_str(output).unwrap();
    output["is_error"] == true
        && output["error"].as_str().is_some_and(|e| {
            e.starts_with(CANCELLED) && e.ends_with(" s, so its result was discarded")
        })
}

/// Waits until the model has the cancelled answer of each of `call_ids`; returns every event.
async fn cancelled_answers(fake: &FakeRealtime, call_ids: &[&str]) -> Vec<Value> {
    fake.wait_for(
        &format!("the cancelled answers of {call_ids:?}"),
        |events| {
            call_ids
                .iter()
                .all(|id| outputs_of(events, id).iter().any(|o| is_cancelled(o)))
                .then(|| events.to_vec())
        },
    )
    .await
}

/// The model's next turn calls `get_weather`: waits for its answer and the `response.create`
/// that follows it; checks that this is the `n`-th `response.create` the server sent. Everything
/// the server did about earlier events is done by then (the model's events are handled in
/// order).
async fn next_turn_goes_on(fake: &FakeRealtime, response: &str, call_id: &str, n: usize) {
    model_calls(fake, response, call_id, "get_weather").await;
    let events = fake
        .wait_for(
            &format!("{call_id}'s answer and the response.create after it"),
            |events| {
                let answer = events.iter().position(|e| {
                    e["item"]["type"] == "function_call_output" && e["item"]["call_id"] == call_id
                })?;
                events[answer..]
                    .iter()
                    .any(|e| e["type"] == "response.create")
                    .then(|| events.to_vec())
            },
        )
        .await;
    assert_eq!(outputs_of(&events, call_id), [r#"{"temperature_c":28}"#]);
    assert_eq!(
        server_events_of(&events, "response.create"),
        n,
        "no response.create for an abandoned turn: {events:#?}"
    );
}

/// Waits for the `tool.call` of `call_id` and checks it is a cancelled call of `tool`.
async fn announced_cancelled(stream: &mut EventReader, call_id: &str, tool: &str, kind: &str) {
    let event = stream
        .wait_for("tool.call", |d| d["call_id"] == call_id)
        .await;
    assert_call(
        &event,
        json!({"role": "Mio", "tool": tool, "source": "plugin:travel", "call_id": call_id,
               "caller": "model", "kind": kind, "is_error": true, "cancelled": true}),
    );
}

#[actix_web::test]
async fn speech_cancels_the_running_calls_and_the_model_hears_so_without_going_on() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let plugins = Plugins::start();
    let app = app_with_session(&fake.url, &[], Dialect::Openai, |_| {}).await;
    plugins.register(&app).await;
    fake.update_with_tools(&["find_flight", "book_hotel", "get_weather"])
        .await;
    let mut stream = open(&app, "?role=Mio", None).await.expect("stream opens");
    stream.expect("hello").await;

    // One turn calls two slow tools; both are running when the person starts speaking.
    fake.push(call_event("r1", "c1", "find_flight", "{}")).await;
    fake.push(call_event("r1", "c2", "book_hotel", "{}")).await;
    fake.push(response_done(
        "r1",
        &[("c1", "find_flight", "{}"), ("c2", "book_hotel", "{}")],
    ))
    .await;
    plugins.held.wait_for_requests(1).await;
    plugins.gated.wait_for_requests(1).await;
    fake.push(speech_started(1)).await;

    // The plugin sees its connection close: its call is over.
    plugins.held.wait_for_closed(1).await;
    // The model gets an answer for each call, saying it was cancelled.
    let events = cancelled_answers(&fake, &["c1", "c2"]).await;
    let answered: Vec<&str> = events
        .iter()
        .filter(|e| e["item"]["type"] == "function_call_output")
        .map(|e| e["item"]["call_id"].as_str().unwrap())
        .collect();
    assert_eq!(answered, ["c1", "c2"], "in the model's order");
    announced_cancelled(&mut stream, "c1", "find_flight", "client").await;
    announced_cancelled(&mut stream, "c2", "book_hotel", "client").await;

    // The slow hotel plugin answers now: too late, on a connection that is gone.
    plugins.gated.open_gate();
    // The person's turn goes on; the next call is answered and continued as ever.
    next_turn_goes_on(&fake, "r2", "c3", 1).await;
    let events = fake.events();
    for id in ["c1", "c2"] {
        assert_eq!(
            outputs_of(&events, id).len(),
            1,
            "{id}: one answer, the cancelled one"
        );
    }
    let (status, sessions) = app.get("/api/sessions").await;
    assert_eq!(status, 200);
    assert_eq!(
        sessions["sessions_by_role"]["Mio"]["connections"][0]["calls_answered"],
        3
    );

    // Every event the server sent is a GA client event.
    let report = validate_client_events(server_events(&fake)).await;
    assert!(report.is_ok(), "{report:?}");
}

#[actix_web::test]
async fn with_cancel_on_interruption_off_the_call_runs_to_its_end_and_the_turn_goes_on() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let plugins = Plugins::start();
    let app = app_with_session(&fake.url, &[], Dialect::Openai, |s| {
        s.cancel_on_interruption = false
    })
    .await;
    plugins.register(&app).await;
    fake.update_with_tools(&["find_flight", "book_hotel", "get_weather"])
        .await;
    let mut stream = open(&app, "?role=Mio", None).await.expect("stream opens");
    stream.expect("hello").await;

    model_calls(&fake, "r1", "c1", "book_hotel").await;
    plugins.gated.wait_for_requests(1).await;
    fake.push(speech_started(1)).await;
    // The person's turn: handled after the speech, so the speech was seen by then.
    next_turn_goes_on(&fake, "r2", "c2", 1).await;
    assert!(outputs_of(&fake.events(), "c1").is_empty(), "still running");

    // The hotel plugin answers: the model gets its result, and the turn goes on.
    plugins.gated.open_gate();
    let events = fake
        .wait_for("c1's answer and a second response.create", |events| {
            (!outputs_of(events, "c1").is_empty()
                && server_events_of(events, "response.create") == 2)
                .then(|| events.to_vec())
        })
        .await;
    assert_eq!(outputs_of(&events, "c1"), [r#"{"booked":"Hotel Kyoto"}"#]);
    let call = stream.wait_for("tool.call", |d| d["call_id"] == "c1").await;
    assert_eq!(
        (&call.data["is_error"], &call.data["cancelled"]),
        (&json!(false), &json!(false))
    );
}

#[actix_web::test]
async fn through_the_relay_the_apps_message_its_cancel_and_speech_each_cancel_the_running_call() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let plugins = Plugins::start();
    let (_app, mut stream, mut sdk) = relayed(&fake, &plugins).await;
    assert_eq!(sdk.recv_event().await["type"], "session.created");

    // The app sees the model call a registered tool, which the server runs.
    let fake = &fake;
    let call = slow_call(fake, 1).await;
    assert_eq!(
        sdk.recv_event().await["type"],
        "response.function_call_arguments.done"
    );
    assert_eq!(sdk.recv_event().await["type"], "response.done");
    plugins.held.wait_for_requests(1).await;

    // 1. The person types over it: the app adds their message (the SDK's typed send).
    let message = json!({"type": "conversation.item.create", "event_id": "app_msg_1", "item": {
        "type": "message", "role": "user",
        "content": [{"type": "input_text", "text": "Never mind, what's the weather?"}]}});
    sdk.send(message.clone()).await;
    plugins.held.wait_for_closed(1).await;
    let (events, app_message) = answered_before(fake, &call, "app_msg_1").await;
    assert!(is_cancelled(&outputs_of(&events, &call)[0]));
    assert_eq!(
        events[app_message], message,
        "the app's message goes up as it was"
    );
    announced_cancelled(&mut stream, &call, "find_flight", "relay").await;

    // 2. The app cancels the response that made the call.
    let call = slow_call(fake, 2).await;
    sdk.recv_event().await;
    sdk.recv_event().await;
    plugins.held.wait_for_requests(2).await;
    sdk.send(
        json!({"type": "response.cancel", "event_id": "app_cancel_2", "response_id": "resp_2"}),
    )
    .await;
    plugins.held.wait_for_closed(2).await;
    cancelled_answers(fake, &[&call]).await;
    answered_before(fake, &call, "app_cancel_2").await;
    announced_cancelled(&mut stream, &call, "find_flight", "relay").await;

    // 3. The person speaks (server VAD): the app sees the event, the call is cancelled.
    let call = slow_call(fake, 3).await;
    sdk.recv_event().await;
    sdk.recv_event().await;
    plugins.held.wait_for_requests(3).await;
    fake.push(speech_started(3)).await;
    assert_eq!(
        sdk.recv_event().await["type"],
        "input_audio_buffer.speech_started",
        "the app sees the person speak"
    );
    plugins.held.wait_for_closed(3).await;
    cancelled_answers(fake, &[&call]).await;
    announced_cancelled(&mut stream, &call, "find_flight", "relay").await;

    // The person's turn goes on; the server asked no abandoned turn to go on.
    next_turn_goes_on(fake, "resp_4", "call_4", 1).await;

    let report = validate_client_events(server_events(fake)).await;
    assert!(report.is_ok(), "{report:?}");
}

#[actix_web::test]
async fn a_relay_that_closes_under_a_running_call_drops_it_and_says_so() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let plugins = Plugins::start();
    let (_app, mut stream, mut sdk) = relayed(&fake, &plugins).await;
    let call = slow_call(&fake, 1).await;
    plugins.held.wait_for_requests(1).await;
    sdk.close(1000, "the person hung up").await;
    plugins.held.wait_for_closed(1).await;
    announced_cancelled(&mut stream, &call, "find_flight", "relay").await;
    assert!(
        outputs_of(&fake.events(), &call).is_empty(),
        "nobody to answer"
    );
}

#[actix_web::test]
async fn an_attached_calls_provider_cancelling_the_response_cancels_its_calls() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let plugins = Plugins::start();
    let app = app_with_session(&fake.url, &[], Dialect::Openai, |s| {
        s.mode = SessionMode::Relay
    })
    .await;
    plugins.register(&app).await;
    let mut stream = open(&app, "?role=Mio", None).await.expect("stream opens");
    stream.expect("hello").await;
    let url = format!("{}&call_id=rtc_1", fake.url);
    let (status, body) = app
        .post("/api/sessions/attach", &json!({"role": "Mio", "url": url}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        update_tool_names(&fake.nth_update(1).await),
        ["find_flight", "book_hotel", "get_weather"]
    );

    // A response calls a slow tool; the provider cancels the response before it completes
    // (the person spoke over it, on the app's side of the call).
    fake.push(call_event("r1", "c1", "find_flight", "{}")).await;
    plugins.held.wait_for_requests(1).await;
    let mut cancelled = response_done("r1", &[("c1", "find_flight", "{}")]);
    cancelled["response"]["status"] = json!("cancelled");
    cancelled["response"]["status_details"] =
        json!({"type": "cancelled", "reason": "turn_detected"});
    fake.push(cancelled).await;
    plugins.held.wait_for_closed(1).await;
    cancelled_answers(&fake, &["c1"]).await;
    announced_cancelled(&mut stream, "c1", "find_flight", "attach").await;

    next_turn_goes_on(&fake, "r2", "c2", 1).await;
    let report = validate_client_events(server_events(&fake)).await;
    assert!(report.is_ok(), "{report:?}");
}

/// An in-process tool whose call never finishes by itself; each call's future reports when it
/// is dropped.
struct Endless {
    dropped: Mutex<Option<oneshot::Sender<()>>>,
}

/// Sends when dropped.
struct DropSignal(Option<oneshot::Sender<()>>);

impl Drop for DropSignal {
    fn drop(&mut self) {
        if let Some(signal) = self.0.take() {
            let _ = signal.send(());
        }
    }
}

impl LocalHandler for Endless {
    fn call(&self, _: ToolCall) -> BoxFuture<'static, ToolOutcome> {
        let signal = DropSignal(self.dropped.lock().unwrap().take());
        async move {
            let _signal = signal;
            std::future::pending::<ToolOutcome>().await
        }
        .boxed()
    }
}

#[actix_web::test]
async fn an_in_process_tools_call_is_dropped_when_the_person_interrupts() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let app = app_with_session(&fake.url, &[], Dialect::Openai, |_| {}).await;
    let (dropped, was_dropped) = oneshot::channel();
    let handler = LocalToolHandler(Arc::new(Endless {
        dropped: Mutex::new(Some(dropped)),
    }));
    let tool = ToolSpec::local(
        "watch_the_sky",
        "Waits for a shooting star.",
        Parameters::new(object(json!({"type": "object", "properties": {}}))).expect("a schema"),
        "inproc:sky",
        handler,
    );
    app.router
        .send(RegisterTool { tool, role: None })
        .await
        .expect("router answers")
        .expect("registered");
    fake.update_with_tools(&["watch_the_sky"]).await;
    model_calls(&fake, "r1", "c1", "watch_the_sky").await;
    fake.push(speech_started(1)).await;
    let dropped = tokio::time::timeout(EVENT_DEADLINE, was_dropped).await;
    assert!(
        matches!(dropped, Ok(Ok(()))),
        "the tool's future was not dropped"
    );
    cancelled_answers(&fake, &["c1"]).await;
}

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(object) => object,
        other => panic!("not an object: {other}"),
    }
}
