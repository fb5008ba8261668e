//! A tool's own limits (`max_concurrent`, `rate`, `dedupe_seconds`), held on the one path every
//! call takes: the model's calls of Mio's two live sessions (the server's own connection to one
//! fake realtime peer, and a call attached on a second one), the invoke route, and what an
//! operator sees of them (the full listing, the events, `/api/calls`, `/metrics`). Plugins
//! record every request (and how many they were answering at once), so "never reached the
//! plugin" and "never two at a time" are read off them.

use std::time::Duration;

use serde_json::{Value, json};

use crate::callback_server::{CallbackServer, Reply};
use crate::event_stream::{EventReader, open};
use crate::events::assert_call;
use crate::fake_chat::{Answer, FakeChat, calls_completion, completion};
use crate::fake_mcp::{CallAnswer, FakeMcp, Listing};
use crate::fake_realtime::{AckMode, EVENT_DEADLINE, FakeRealtime};
use crate::helpers::{HTTP_DEADLINE, TestApp, app_with_session, test_client};
use crate::metrics::scrape;
use crate::non_blocking::{outputs_of, response_created};
use crate::sessions::{call_event, response_done};

/// A tool `name` of every character, answered by `callback` at `/NAME`, with `limits` (fields
/// of the registration body) and `timeout` seconds.
fn limited(callback: &CallbackServer, name: &str, timeout: u64, limits: Value) -> Value {
    let mut body = json!({
        "name": name,
        "description": "Acts in the world",
        "parameters": {"type": "object", "properties": {
            "room": {"type": "string"}, "on": {"type": "boolean"}}},
        "callback_url": callback.url(&format!("/{name}")),
        "source": "plugin:home",
        "timeout_seconds": timeout,
    });
    for (field, value) in limits.as_object().unwrap() {
        body[field] = value.clone();
    }
    body
}

/// Mio with two live sessions on its tools — the server's own connection to `own`, and a call
/// attached on `call` — and Lanlan beside it; `tools` registered for both (every character);
/// Mio's event stream past its `hello`.
async fn two_sessions(
    own: &FakeRealtime,
    call: &FakeRealtime,
    tools: &[Value],
) -> (TestApp, EventReader) {
    let app = app_with_session(&own.url, &["Lanlan"], runtime_tools::Dialect::Openai, |s| {
        s.max_tool_calls_per_window = 1000;
    })
    .await;
    let url = format!("{}&call_id=rtc_1", call.url);
    let (status, body) = app
        .post("/api/sessions/attach", &json!({"role": "Mio", "url": url}))
        .await;
    assert_eq!(status, 200, "{body}");
    for tool in tools {
        let (status, body) = app.register(tool).await;
        assert_eq!(status, 200, "{body}");
    }
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    own.update_with_tools(&names).await;
    call.update_with_tools(&names).await;
    let mut stream = open(&app, "?role=Mio", None).await.expect("stream opens");
    stream.expect("hello").await;
    (app, stream)
}

/// The model of `fake` calls `name` with `arguments` (exact text) in a response of its own.
pub(crate) async fn model_calls(fake: &FakeRealtime, call_id: &str, name: &str, arguments: &str) {
    let response = format!("r_{call_id}");
    fake.push(response_created(&response)).await;
    fake.push(call_event(&response, call_id, name, arguments))
        .await;
    fake.push(response_done(&response, &[(call_id, name, arguments)]))
        .await;
}

/// The `function_call_output` events `fake` got for `call_id`, once there is one.
async fn outputs(fake: &FakeRealtime, call_id: &str) -> Vec<Value> {
    fake.wait_for(&format!("the output of {call_id}"), |events| {
        let found: Vec<Value> = events
            .iter()
            .filter(|e| {
                e["type"] == "conversation.item.create"
                    && e["item"]["type"] == "function_call_output"
                    && e["item"]["call_id"] == call_id
            })
            .cloned()
            .collect();
        (!found.is_empty()).then_some(found)
    })
    .await
}

/// The one output `fake`'s model got for `call_id`, parsed.
async fn output(fake: &FakeRealtime, call_id: &str) -> Value {
    outputs(fake, call_id).await;
    let parsed = outputs_of(&fake.events(), call_id);
    assert_eq!(parsed.len(), 1, "one output per call id: {parsed:?}");
    parsed[0].clone()
}

/// Mio's entry of `name` in the full listing.
async fn listed(app: &TestApp, name: &str) -> Value {
    let (status, listing) = app.get("/api/tools?detail=full").await;
    assert_eq!(status, 200, "{listing}");
    listing["tools_by_role"]["Mio"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("{name} is not listed: {listing}"))
}

/// Waits until `waiting` calls of `name` wait for their turn (the full listing says so).
async fn waiting(app: &TestApp, name: &str, waiting: u64) {
    let deadline = tokio::time::Instant::now() + EVENT_DEADLINE;
    loop {
        let tool = listed(app, name).await;
        if tool["calls_waiting"] == waiting {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{waiting} calls of {name} never waited: {tool}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The call ids of the requests `callback` received, in order.
fn received_ids(callback: &CallbackServer) -> Vec<String> {
    callback
        .received()
        .iter()
        .map(|r| r.json()["call_id"].as_str().unwrap().to_owned())
        .collect()
}

/// An invoke of `name` with `arguments` and the call id `id`, on its own client and task: its
/// status and answer.
fn invoking(
    app: &TestApp,
    name: &str,
    id: &str,
    arguments: Value,
) -> actix_web::rt::task::JoinHandle<(u16, Value)> {
    let url = app.url("/api/tools/invoke");
    let body = json!({"name": name, "role": "Mio", "call_id": id, "arguments": arguments});
    actix_web::rt::spawn(async move {
        let mut response = test_client()
            .post(url)
            .send_json(&body)
            .await
            .expect("invoke sent");
        let status = response.status().as_u16();
        (
            status,
            response.json::<Value>().await.expect("invoke answer"),
        )
    })
}

/// The `tool.call` event of `call_id`.
async fn finished(stream: &mut EventReader, call_id: &str) -> crate::event_stream::Received {
    stream
        .wait_for("tool.call", |d| d["call_id"] == call_id)
        .await
}

#[actix_web::test]
async fn one_at_a_time_five_calls_of_two_sessions_run_in_arrival_order() {
    let own = FakeRealtime::start(AckMode::Immediate).await;
    let call = FakeRealtime::start(AckMode::Immediate).await;
    // The arm moves once its gate opens, and takes a while each time: two at once would show.
    let arm = CallbackServer::with(
        "/arm",
        Reply::after_gate(Reply::after(
            Duration::from_millis(50),
            Reply::output(json!({"moved": true})),
        )),
    );
    let tool = limited(&arm, "arm", 30, json!({"max_concurrent": 1}));
    let (app, mut stream) = two_sessions(&own, &call, &[tool]).await;
    let shown = listed(&app, "arm").await;
    assert_eq!(
        (
            &shown["max_concurrent"],
            &shown["rate"],
            &shown["dedupe_seconds"]
        ),
        (&json!(1), &json!(null), &json!(0))
    );
    assert_eq!(
        (&shown["calls_running"], &shown["calls_waiting"]),
        (&json!(0), &json!(0))
    );

    // The first call reaches the arm and holds it; four more come from both sessions, each
    // waiting behind the others before the next is made.
    model_calls(&own, "c1", "arm", r#"{"room": "1"}"#).await;
    arm.wait_for_requests(1).await;
    let order: [(u64, &FakeRealtime); 4] = [(2, &call), (3, &own), (4, &call), (5, &own)];
    for (i, fake) in order {
        model_calls(
            fake,
            &format!("c{i}"),
            "arm",
            &format!(r#"{{"room": "{i}"}}"#),
        )
        .await;
        waiting(&app, "arm", i - 1).await;
    }
    let shown = listed(&app, "arm").await;
    assert_eq!(
        (&shown["calls_running"], &shown["calls_waiting"]),
        (&json!(1), &json!(4))
    );
    assert_eq!(received_ids(&arm), ["c1"]);

    arm.open_gate();
    for (id, fake) in [
        ("c1", &own),
        ("c2", &call),
        ("c3", &own),
        ("c4", &call),
        ("c5", &own),
    ] {
        assert_eq!(output(fake, id).await, json!({"moved": true}), "{id}");
        let kind = if std::ptr::eq(fake, &own) {
            "client"
        } else {
            "attach"
        };
        assert_call(
            &finished(&mut stream, id).await,
            json!({"role": "Mio", "tool": "arm", "source": "plugin:home", "call_id": id,
                   "caller": "model", "kind": kind, "is_error": false, "cancelled": false}),
        );
    }
    assert_eq!(received_ids(&arm), ["c1", "c2", "c3", "c4", "c5"]);
    assert_eq!(arm.most_at_once(), 1, "the arm saw two calls at once");
    let shown = listed(&app, "arm").await;
    assert_eq!(
        (&shown["calls_running"], &shown["calls_waiting"]),
        (&json!(0), &json!(0))
    );

    // Each call's wait is in the histogram: the sessions' three and two.
    let metrics = scrape(&app).await;
    for (kind, calls) in [("client", 3.0), ("attach", 2.0)] {
        assert_eq!(
            metrics.value(
                "runtime_tools_tool_call_wait_seconds_count",
                &[("tool", "arm"), ("kind", kind), ("caller", "model")]
            ),
            calls,
            "{kind}"
        );
    }
}

#[actix_web::test]
async fn a_call_that_does_not_get_its_turn_within_its_timeout_is_busy_and_never_sent() {
    let own = FakeRealtime::start(AckMode::Immediate).await;
    let call = FakeRealtime::start(AckMode::Immediate).await;
    // Nothing answers until the gate opens: each call holds the door its whole timeout.
    let door = CallbackServer::with(
        "/door",
        Reply::after_gate(Reply::output(json!({"open": 1}))),
    );
    let tool = limited(&door, "door", 3, json!({"max_concurrent": 1}));
    let (app, mut stream) = two_sessions(&own, &call, &[tool]).await;

    // Two invokes take the door, one after the other; the model's call waits behind them.
    let first = invoking(&app, "door", "i1", json!({}));
    door.wait_for_requests(1).await;
    // Not a wait for an event: the margin of a test of timeouts. The second call must get its
    // turn when the first times out, before its own wait of 3 s is over; queued a moment after
    // the first began, the two deadlines would be milliseconds apart, and on a loaded machine a
    // timer that fires late gives the door to the model's call instead.
    actix_web::rt::time::sleep(QUEUE_MARGIN).await;
    let second = invoking(&app, "door", "i2", json!({}));
    waiting(&app, "door", 1).await;
    model_calls(&own, "c3", "door", "{}").await;
    waiting(&app, "door", 2).await;

    // The first times out after its 3 s, the second gets its turn, and the model's call, 3 s
    // after it came, is told the door was busy.
    let busy = output(&own, "c3").await;
    assert_eq!(
        busy,
        json!({"error": "the tool door was busy: it takes 1 call at a time, and this call did \
                         not get its turn within 3 s, so it was not run (the tool did not fail; \
                         it may be called again later)",
               "is_error": true})
    );
    assert_call(
        &finished(&mut stream, "c3").await,
        json!({"role": "Mio", "tool": "door", "source": "plugin:home", "call_id": "c3",
               "caller": "model", "kind": "client", "is_error": true, "cancelled": false,
               "outcome": "busy"}),
    );
    door.open_gate();
    let (status, first) = first.await.unwrap();
    assert_eq!(status, 200);
    assert!(
        first["error"].as_str().unwrap().contains("timed out"),
        "{first}"
    );
    let (status, second) = second.await.unwrap();
    assert_eq!((status, &second["output"]), (200, &json!({"open": 1})));
    assert_eq!(received_ids(&door), ["i1", "i2"]);

    let (_, recent) = app.get("/api/calls?tool=door").await;
    let outcomes: Vec<(&str, &str)> = recent["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["call_id"].as_str().unwrap(),
                c["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(outcomes, [("i2", "ok"), ("c3", "busy"), ("i1", "timeout")]);
    let metrics = scrape(&app).await;
    assert_eq!(
        metrics.value(
            "runtime_tools_tool_calls_total",
            &[("tool", "door"), ("outcome", "busy")]
        ),
        1.0
    );
}

#[actix_web::test]
async fn a_cancelled_waiting_call_leaves_the_queue_at_once() {
    let own = FakeRealtime::start(AckMode::Immediate).await;
    let call = FakeRealtime::start(AckMode::Immediate).await;
    let arm = CallbackServer::with("/arm", Reply::after_gate(Reply::output(json!({"ok": 1}))));
    let tool = limited(&arm, "arm", 30, json!({"max_concurrent": 1}));
    let (app, mut stream) = two_sessions(&own, &call, &[tool]).await;

    let first = invoking(&app, "arm", "i1", json!({}));
    arm.wait_for_requests(1).await;
    let second = invoking(&app, "arm", "i2", json!({}));
    waiting(&app, "arm", 1).await;
    // Its client goes away while it waits: it leaves the queue, though nothing else moved.
    second.abort();
    waiting(&app, "arm", 0).await;
    assert_call(
        &finished(&mut stream, "i2").await,
        json!({"role": "Mio", "tool": "arm", "source": "plugin:home", "call_id": "i2",
               "caller": "invoke", "is_error": true, "cancelled": true}),
    );
    // The model's call comes after it, and is the next to run.
    model_calls(&call, "c3", "arm", "{}").await;
    waiting(&app, "arm", 1).await;
    arm.open_gate();
    assert_eq!(output(&call, "c3").await, json!({"ok": 1}));
    let (status, first) = first.await.unwrap();
    assert_eq!((status, &first["output"]), (200, &json!({"ok": 1})));
    assert_eq!(received_ids(&arm), ["i1", "c3"]);
}

#[actix_web::test]
async fn a_call_beyond_the_rate_is_answered_at_once_and_never_sent() {
    let own = FakeRealtime::start(AckMode::Immediate).await;
    let call = FakeRealtime::start(AckMode::Immediate).await;
    let quota = CallbackServer::with("/quota", Reply::output(json!({"left": 1})));
    let tool = limited(
        &quota,
        "quota",
        30,
        json!({"rate": {"calls": 2, "per_seconds": 60}}),
    );
    let (app, mut stream) = two_sessions(&own, &call, &[tool]).await;
    assert_eq!(
        listed(&app, "quota").await["rate"],
        json!({"calls": 2, "per_seconds": 60})
    );

    model_calls(&own, "c1", "quota", "{}").await;
    assert_eq!(output(&own, "c1").await, json!({"left": 1}));
    model_calls(&call, "c2", "quota", "{}").await;
    assert_eq!(output(&call, "c2").await, json!({"left": 1}));
    // The third within the minute, from either session, is refused with when to try again.
    model_calls(&own, "c3", "quota", "{}").await;
    let refused = output(&own, "c3").await;
    let text = refused["error"].as_str().unwrap();
    let prefix =
        "the tool quota may be called at most 2 times per 60 s; the next call is possible in ";
    let seconds: u64 = text
        .strip_prefix(prefix)
        .and_then(|rest| rest.strip_suffix(" s"))
        .unwrap_or_else(|| panic!("{text}"))
        .parse()
        .unwrap();
    assert!((1..=60).contains(&seconds), "{text}");
    assert_call(
        &finished(&mut stream, "c3").await,
        json!({"role": "Mio", "tool": "quota", "source": "plugin:home", "call_id": "c3",
               "caller": "model", "kind": "client", "is_error": true, "cancelled": false,
               "outcome": "rate_limited"}),
    );
    // The person trying the tool is held to it too.
    let (status, answer) = crate::callback_server::invoke(
        &app,
        json!({"name": "quota", "role": "Mio", "call_id": "i4"}),
    )
    .await;
    assert_eq!((status, &answer["is_error"]), (200, &json!(true)));
    assert!(
        answer["error"].as_str().unwrap().starts_with(prefix),
        "{answer}"
    );
    assert_eq!(received_ids(&quota), ["c1", "c2"]);
    let metrics = scrape(&app).await;
    assert_eq!(
        metrics.value(
            "runtime_tools_tool_calls_total",
            &[
                ("tool", "quota"),
                ("outcome", "rate_limited"),
                ("caller", "model")
            ]
        ),
        1.0
    );
    assert_eq!(
        metrics.value(
            "runtime_tools_tool_calls_total",
            &[
                ("tool", "quota"),
                ("outcome", "rate_limited"),
                ("caller", "invoke")
            ]
        ),
        1.0
    );
}

/// Mio's two sessions with `lights`, which dedupes repeats for 5 s, its plugin taking 300 ms.
async fn lights() -> (
    FakeRealtime,
    FakeRealtime,
    CallbackServer,
    TestApp,
    EventReader,
) {
    let own = FakeRealtime::start(AckMode::Immediate).await;
    let call = FakeRealtime::start(AckMode::Immediate).await;
    let plugin = CallbackServer::with(
        "/lights",
        Reply::after(
            Duration::from_millis(300),
            Reply::output(json!({"on": true, "toggled": 1})),
        ),
    );
    let tool = limited(&plugin, "lights", 30, json!({"dedupe_seconds": 5}));
    let (app, stream) = two_sessions(&own, &call, &[tool]).await;
    (own, call, plugin, app, stream)
}

/// How long after the first call began the second is queued, in the busy test: what a timer may
/// fire late by on a loaded machine without the test's order changing (the tool's timeout is
/// 3 s; the model's call, queued after the second, is told the door was busy 2 s before the
/// second's turn ends).
const QUEUE_MARGIN: Duration = Duration::from_secs(1);

const KITCHEN_ON: &str = r#"{"on": true, "room": "kitchen"}"#;
/// The same arguments, written otherwise.
const KITCHEN_ON_AGAIN: &str = r#"{"room":"kitchen","on":true}"#;

#[actix_web::test]
async fn a_model_that_asks_twice_gets_two_identical_outputs_of_one_call() {
    let (own, _call, plugin, app, mut stream) = lights().await;
    assert_eq!(listed(&app, "lights").await["dedupe_seconds"], json!(5));

    model_calls(&own, "c1", "lights", KITCHEN_ON).await;
    // The model repeats itself a moment later, while the first call runs.
    tokio::time::sleep(Duration::from_millis(100)).await;
    model_calls(&own, "c2", "lights", KITCHEN_ON_AGAIN).await;
    let first = outputs(&own, "c1").await;
    let second = outputs(&own, "c2").await;
    assert_eq!((first.len(), second.len()), (1, 1));
    assert_eq!(
        first[0]["item"]["output"], second[0]["item"]["output"],
        "the repeat's output is the first call's"
    );
    assert_eq!(output(&own, "c2").await, json!({"on": true, "toggled": 1}));
    assert_call(
        &finished(&mut stream, "c1").await,
        json!({"role": "Mio", "tool": "lights", "source": "plugin:home", "call_id": "c1",
               "caller": "model", "kind": "client", "is_error": false, "cancelled": false}),
    );
    assert_call(
        &finished(&mut stream, "c2").await,
        json!({"role": "Mio", "tool": "lights", "source": "plugin:home", "call_id": "c2",
               "caller": "model", "kind": "client", "is_error": false, "cancelled": false,
               "outcome": "deduplicated", "first_call_id": "c1"}),
    );
    // Once more, after the first ended, within its 5 s: the same result again.
    model_calls(&own, "c3", "lights", KITCHEN_ON).await;
    assert_eq!(
        outputs(&own, "c3").await[0]["item"]["output"],
        first[0]["item"]["output"]
    );
    // Each response was answered and went on once.
    let creates = own
        .wait_for("three response.create", |events| {
            let n = events
                .iter()
                .filter(|e| e["type"] == "response.create")
                .count();
            (n >= 3).then_some(n)
        })
        .await;
    assert_eq!(creates, 3);
    assert_eq!(received_ids(&plugin), ["c1"]);
    let (_, recent) = app.get("/api/calls?tool=lights").await;
    let outcomes: Vec<&str> = recent["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["deduplicated", "deduplicated", "ok"]);
}

#[actix_web::test]
async fn the_same_call_from_another_session_runs_again() {
    let (own, call, plugin, _app, mut stream) = lights().await;
    model_calls(&own, "c1", "lights", KITCHEN_ON).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The other session (the attached call) makes the same call: a call of its own.
    model_calls(&call, "c2", "lights", KITCHEN_ON_AGAIN).await;
    // The first session repeats it: that one is the first's repeat.
    model_calls(&own, "c3", "lights", KITCHEN_ON_AGAIN).await;
    for (fake, id) in [(&own, "c1"), (&call, "c2"), (&own, "c3")] {
        assert_eq!(
            output(fake, id).await,
            json!({"on": true, "toggled": 1}),
            "{id}"
        );
    }
    let mut ids = received_ids(&plugin);
    ids.sort();
    assert_eq!(ids, ["c1", "c2"]);
    let repeat = finished(&mut stream, "c3").await;
    assert_eq!(
        (&repeat.data["outcome"], &repeat.data["first_call_id"]),
        (&json!("deduplicated"), &json!("c1"))
    );
}

#[actix_web::test]
async fn a_new_model_connection_is_a_new_conversation() {
    let (own, _call, plugin, _app, _stream) = lights().await;
    model_calls(&own, "c1", "lights", KITCHEN_ON).await;
    assert_eq!(output(&own, "c1").await, json!({"on": true, "toggled": 1}));
    // The model's connection ends; the server's own connection comes back as a new one.
    own.drop_connection().await;
    own.wait_connections(2).await;
    own.wait_for("the tools on the new connection", |events| {
        let with_lights = events.iter().filter(|e| {
            e["type"] == "session.update"
                && crate::fake_realtime::update_tool_names(e) == ["lights"]
        });
        (with_lights.count() >= 2).then_some(())
    })
    .await;
    model_calls(&own, "c2", "lights", KITCHEN_ON).await;
    assert_eq!(output(&own, "c2").await, json!({"on": true, "toggled": 1}));
    assert_eq!(received_ids(&plugin), ["c1", "c2"]);
}

#[actix_web::test]
async fn invoke_is_never_taken_for_a_repeat() {
    let (own, _call, plugin, app, _stream) = lights().await;
    model_calls(&own, "c1", "lights", KITCHEN_ON).await;
    assert_eq!(output(&own, "c1").await, json!({"on": true, "toggled": 1}));
    // The person trying the tool, twice, within the 5 s, with the model's very arguments:
    // each call runs.
    let arguments = json!({"on": true, "room": "kitchen"});
    let first = invoking(&app, "lights", "i1", arguments.clone());
    let second = invoking(&app, "lights", "i2", arguments);
    for invoked in [first, second] {
        let (status, answer) = tokio::time::timeout(HTTP_DEADLINE, invoked)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(status, 200);
        assert_eq!(answer["output"], json!({"on": true, "toggled": 1}));
    }
    // The model's repeat is still its first call's.
    model_calls(&own, "c2", "lights", KITCHEN_ON_AGAIN).await;
    assert_eq!(output(&own, "c2").await, json!({"on": true, "toggled": 1}));
    let mut ids = received_ids(&plugin);
    ids.sort();
    assert_eq!(ids, ["c1", "i1", "i2"]);
}

#[actix_web::test]
async fn each_bad_limit_is_a_422_naming_it_and_only_the_full_listing_shows_them() {
    let app = crate::helpers::spawn_app(&["Mio"]).await;
    let plugin = CallbackServer::with("/arm", Reply::output(json!({})));
    for (field, bad, loc, kind) in [
        (
            "max_concurrent",
            json!(0),
            json!(["body", "max_concurrent"]),
            "greater_than_equal",
        ),
        (
            "max_concurrent",
            json!(1025),
            json!(["body", "max_concurrent"]),
            "less_than_equal",
        ),
        (
            "max_concurrent",
            json!(1.5),
            json!(["body", "max_concurrent"]),
            "int_type",
        ),
        (
            "max_concurrent",
            json!("2"),
            json!(["body", "max_concurrent"]),
            "int_type",
        ),
        ("rate", json!(5), json!(["body", "rate"]), "dict_type"),
        (
            "rate",
            json!({"calls": 0, "per_seconds": 60}),
            json!(["body", "rate", "calls"]),
            "greater_than_equal",
        ),
        (
            "rate",
            json!({"calls": 100001, "per_seconds": 60}),
            json!(["body", "rate", "calls"]),
            "less_than_equal",
        ),
        (
            "rate",
            json!({"calls": 2}),
            json!(["body", "rate", "per_seconds"]),
            "missing",
        ),
        (
            "rate",
            json!({"calls": 2, "per_seconds": 86401}),
            json!(["body", "rate", "per_seconds"]),
            "less_than_equal",
        ),
        (
            "rate",
            json!({"calls": 2, "per_seconds": 60, "burst": 3}),
            json!(["body", "rate", "burst"]),
            "extra_forbidden",
        ),
        (
            "dedupe_seconds",
            json!(-1),
            json!(["body", "dedupe_seconds"]),
            "greater_than_equal",
        ),
        (
            "dedupe_seconds",
            json!(301),
            json!(["body", "dedupe_seconds"]),
            "less_than_equal",
        ),
        (
            "dedupe_seconds",
            json!(null),
            json!(["body", "dedupe_seconds"]),
            "int_type",
        ),
    ] {
        let body = limited(&plugin, "arm", 30, json!({ field: bad.clone() }));
        let (status, answer) = app.register(&body).await;
        assert_eq!(status, 422, "{field} = {bad}: {answer}");
        assert_eq!(
            (&answer["detail"][0]["loc"], &answer["detail"][0]["type"]),
            (&loc, &json!(kind)),
            "{field} = {bad}: {answer}"
        );
        // An MCP server's registration takes them for each of its tools, checked the same way
        // before anything is connected.
        let mcp = json!({"name": "home", "url": "http://127.0.0.1:9/mcp", field: bad.clone()});
        let (status, answer) = app.post("/api/mcp/register", &mcp).await;
        assert_eq!(status, 422, "MCP {field} = {bad}: {answer}");
        assert_eq!(
            (&answer["detail"][0]["loc"], &answer["detail"][0]["type"]),
            (&loc, &json!(kind)),
            "MCP {field} = {bad}: {answer}"
        );
    }
    let (_, answer) = app
        .register(&limited(
            &plugin,
            "arm",
            30,
            json!({"max_concurrent": 0, "dedupe_seconds": 301}),
        ))
        .await;
    assert_eq!(
        answer["detail"].as_array().unwrap().len(),
        2,
        "every field: {answer}"
    );

    // Null is no bound, as absent.
    let body = limited(
        &plugin,
        "arm",
        30,
        json!({"max_concurrent": null, "rate": null, "dedupe_seconds": 0}),
    );
    let (status, answer) = app.register(&body).await;
    assert_eq!(status, 200, "{answer}");
    let shown = listed(&app, "arm").await;
    assert_eq!(
        (
            &shown["max_concurrent"],
            &shown["rate"],
            &shown["dedupe_seconds"]
        ),
        (&json!(null), &json!(null), &json!(0))
    );
    assert!(shown.get("calls_waiting").is_none(), "{shown}");
    let body = limited(
        &plugin,
        "arm",
        30,
        json!({"max_concurrent": 3, "rate": {"calls": 5, "per_seconds": 1}, "dedupe_seconds": 2}),
    );
    assert_eq!(app.register(&body).await.0, 200);
    let shown = listed(&app, "arm").await;
    assert_eq!(
        (
            &shown["max_concurrent"],
            &shown["rate"],
            &shown["dedupe_seconds"],
            &shown["calls_running"],
            &shown["calls_waiting"]
        ),
        (
            &json!(3),
            &json!({"calls": 5, "per_seconds": 1}),
            &json!(2),
            &json!(0),
            &json!(0)
        )
    );
    let plain = app.listing(Some("Mio")).await;
    let plain = &plain["tools_by_role"]["Mio"][0];
    for field in [
        "max_concurrent",
        "rate",
        "dedupe_seconds",
        "calls_running",
        "calls_waiting",
    ] {
        assert!(plain.get(field).is_none(), "{field} in {plain}");
    }
}

/// Two tools as an MCP server lists them.
fn two_mcp_tools(names: [&str; 2]) -> Listing {
    Listing::Tools(
        names
            .iter()
            .map(|name| json!({"name": name, "inputSchema": {"type": "object"}}))
            .collect(),
    )
}

#[actix_web::test]
async fn an_mcp_servers_limits_bound_each_of_its_tools() {
    // One configured, one registered by a plugin: each of their tools at most once an hour.
    let configured = FakeMcp::start(two_mcp_tools(["a", "b"]), CallAnswer::Text("done".into()));
    let registered = FakeMcp::start(two_mcp_tools(["c", "d"]), CallAnswer::Text("done".into()));
    let rate = json!({"calls": 1, "per_seconds": 3600});
    let mut config = crate::helpers::settings(&["Mio"]);
    config.mcp_servers = vec![runtime_tools::McpServerSettings {
        name: "cfg".into(),
        transport: runtime_tools::McpTransport::Http {
            url: configured.url(),
        },
        roles: None,
        timeout: Duration::from_secs(30),
        behavior: Default::default(),
        approval: Default::default(),
        limits: runtime_tools::CallLimits {
            rate: Some(runtime_tools::Rate {
                calls: 1,
                per_seconds: 3600,
            }),
            dedupe_seconds: 4,
            ..Default::default()
        },
    }];
    let app = crate::helpers::spawn_app_with(config).await;
    let mut stream = open(&app, "", Some("0")).await.expect("stream opens");
    stream
        .wait_for("tools.changed", |d| d["source"] == "mcp:cfg")
        .await;
    let (status, answer) = app
        .post(
            "/api/mcp/register",
            &json!({"name": "run", "url": registered.url(), "rate": rate, "max_concurrent": 2}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");

    let (_, listing) = app.get("/api/tools?detail=full").await;
    for tool in listing["tools_by_role"]["Mio"].as_array().unwrap() {
        assert_eq!(tool["rate"], rate, "{tool}");
        let (max, dedupe) = match tool["source"].as_str().unwrap() {
            "mcp:cfg" => (json!(null), json!(4)),
            "mcp:run" => (json!(2), json!(0)),
            other => panic!("{other}"),
        };
        assert_eq!(
            (&tool["max_concurrent"], &tool["dedupe_seconds"]),
            (&max, &dedupe)
        );
    }
    let call = |name: &'static str| {
        let app = &app;
        async move {
            let (status, answer) = crate::callback_server::invoke(
                app,
                json!({"name": name, "role": "Mio", "call_id": format!("{name}-call")}),
            )
            .await;
            assert_eq!(status, 200, "{answer}");
            answer
        }
    };
    // Each tool of each server has its own count: a second call of `a` or `c` within the
    // hour is refused, `b` and `d` are untouched by them.
    for (tool, other) in [("a", "b"), ("c", "d")] {
        assert_eq!(call(tool).await["output"], json!("done"), "{tool}");
        let again = call(tool).await;
        let text = again["error"].as_str().unwrap();
        let prefix = format!(
            "the tool {tool} may be called at most 1 time per 3600 s; the next call is possible \
             in "
        );
        let next: u64 = text
            .strip_prefix(&prefix)
            .and_then(|rest| rest.strip_suffix(" s"))
            .unwrap_or_else(|| panic!("{text}"))
            .parse()
            .unwrap();
        assert!((3500..=3600).contains(&next), "{text}");
        assert_eq!(call(other).await["output"], json!("done"), "{other}");
    }
    assert_eq!((configured.calls(), registered.calls()), (2, 2));
}

#[actix_web::test]
async fn a_call_counts_toward_max_concurrent_once_approved_and_its_repeat_asks_nobody_again() {
    let own = FakeRealtime::start(AckMode::Immediate).await;
    let call = FakeRealtime::start(AckMode::Immediate).await;
    let plugin = CallbackServer::with(
        "/send",
        Reply::after_gate(Reply::output(json!({"sent": 1}))),
    );
    let mut tool = limited(
        &plugin,
        "send",
        30,
        json!({"max_concurrent": 1, "dedupe_seconds": 5}),
    );
    tool["approval"] = json!("always");
    let (app, mut stream) = two_sessions(&own, &call, &[tool]).await;

    // The model's call waits for a person; its repeat a moment later is answered the same way,
    // and nobody is asked twice.
    model_calls(&own, "c1", "send", r#"{"to": "Ann"}"#).await;
    let asked = stream
        .wait_for("approval.requested", |d| d["call_id"] == "c1")
        .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    model_calls(&own, "c2", "send", r#"{"to":"Ann"}"#).await;
    let awaiting = json!({"status": "awaiting_approval", "tool": "send"});
    assert_eq!(output(&own, "c1").await, awaiting);
    assert_eq!(output(&own, "c2").await, awaiting);
    let (_, pending) = app.get("/api/approvals").await;
    assert_eq!(
        pending["approvals"].as_array().unwrap().len(),
        1,
        "{pending}"
    );

    // Waiting for the person, it holds no turn: the person's own try runs at once.
    let tried = invoking(&app, "send", "i1", json!({"to": "Bob"}));
    plugin.wait_for_requests(1).await;
    // Approved, it waits for its turn behind that one.
    let id = asked.data["id"].as_str().unwrap();
    let (status, body) = app
        .post_as_operator(
            &format!("/api/approvals/{id}"),
            &json!({"decision": "approve"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    waiting(&app, "send", 1).await;
    plugin.open_gate();
    let (status, answer) = tried.await.unwrap();
    assert_eq!((status, &answer["output"]), (200, &json!({"sent": 1})));
    let told = crate::non_blocking::system_messages(&own, 2).await;
    let texts = crate::non_blocking::system_texts(&told);
    for id in ["c1", "c2"] {
        let text = format!(
            "The person approved the tool call send (call_id {id}); it ran and finished. \
             Result: {{\"sent\":1}}"
        );
        assert!(texts.contains(&text), "{text:?} not in {texts:?}");
    }
    assert_eq!(received_ids(&plugin), ["i1", "c1"]);
    let repeat = finished(&mut stream, "c2").await;
    assert_eq!(
        (&repeat.data["outcome"], &repeat.data["first_call_id"]),
        (&json!("deduplicated"), &json!("c1"))
    );
}

#[actix_web::test]
async fn a_chat_request_is_a_conversation_of_its_own() {
    let upstream = FakeChat::start();
    let app = crate::chat::chat_server(&upstream.base(), |_| {}).await;
    let plugin = CallbackServer::with("/lights", Reply::output(json!({"on": true})));
    let (status, body) = app
        .register(&limited(
            &plugin,
            "lights",
            30,
            json!({"dedupe_seconds": 30}),
        ))
        .await;
    assert_eq!(status, 200, "{body}");
    let mut stream = open(&app, "?role=Mio", None).await.expect("stream opens");
    stream.expect("hello").await;
    // Each request's model asks for the light twice in one answer.
    let round = |n: usize| {
        let twice = [
            (format!("call_{n}a"), json!({"room": "hall", "on": true})),
            (format!("call_{n}b"), json!({"on": true, "room": "hall"})),
        ];
        let calls: Vec<(&str, &str, Value)> = twice
            .iter()
            .map(|(id, arguments)| (id.as_str(), "lights", arguments.clone()))
            .collect();
        [
            Answer::Json(200, calls_completion(&format!("c{n}"), None, &calls)),
            Answer::Json(
                200,
                completion(&format!("d{n}"), "The hall is lit.", (5, 5)),
            ),
        ]
    };
    let ask = json!({"model": "fake-model", "messages": [{"role": "user", "content": "Light?"}]});
    for n in 1..=2 {
        upstream.script(round(n));
        let (status, answer) = app.post("/v1/chat/completions", &ask).await;
        assert_eq!(status, 200, "{answer}");
        // The model got the one result for both of its calls.
        let next = upstream.bodies().last().unwrap().clone();
        let results: Vec<&Value> = next["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "tool")
            .map(|m| &m["content"])
            .collect();
        assert_eq!(results.len(), 2, "{next}");
        assert_eq!(results[0], results[1]);
        let repeat = finished(&mut stream, &format!("call_{n}b")).await;
        assert_eq!(
            (
                &repeat.data["kind"],
                &repeat.data["outcome"],
                &repeat.data["first_call_id"]
            ),
            (
                &json!("chat"),
                &json!("deduplicated"),
                &json!(format!("call_{n}a"))
            )
        );
    }
    // A request is one conversation: the next request's first call runs again.
    assert_eq!(received_ids(&plugin), ["call_1a", "call_2a"]);
}

#[actix_web::test]
async fn an_mcp_session_is_a_conversation_of_its_own() {
    let app = crate::helpers::spawn_app(&["Mio"]).await;
    let plugin = CallbackServer::with("/lights", Reply::output(json!({"on": true})));
    let (status, body) = app
        .register(&limited(
            &plugin,
            "lights",
            30,
            json!({"dedupe_seconds": 30}),
        ))
        .await;
    assert_eq!(status, 200, "{body}");
    let mut stream = open(&app, "?role=Mio", None).await.expect("stream opens");
    stream.expect("hello").await;

    // The official MCP SDK's client: one session calls twice, another once.
    let python = crate::python::venv_python().await;
    let mut client = crate::child::LineChild::spawn(
        std::process::Command::new(python)
            .arg(crate::python::repo_file("tests/mcp_dedupe_client.py"))
            .arg(app.url("/mcp"))
            .arg("lights"),
    );
    for step in ["first", "repeat", "other_session"] {
        let line = client.expect_line(&format!("{{\"step\": \"{step}\"")).await;
        let result: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            (&result["is_error"], &result["texts"]),
            (&json!(false), &json!(["{\"on\":true}"])),
            "{step}"
        );
    }
    let first = stream
        .wait_for("tool.call", |d| d["tool"] == "lights")
        .await;
    let repeat = stream
        .wait_for("tool.call", |d| d["tool"] == "lights")
        .await;
    let other = stream
        .wait_for("tool.call", |d| d["tool"] == "lights")
        .await;
    assert_eq!(
        (&first.data["caller"], &first.data["outcome"]),
        (&json!("mcp"), &json!("ok"))
    );
    assert_eq!(
        (&repeat.data["outcome"], &repeat.data["first_call_id"]),
        (&json!("deduplicated"), &first.data["call_id"])
    );
    assert_eq!(other.data["outcome"], json!("ok"));
    assert_eq!(
        received_ids(&plugin),
        [
            first.data["call_id"].as_str().unwrap(),
            other.data["call_id"].as_str().unwrap()
        ]
    );
}

#[actix_web::test]
async fn each_limits_outcome_is_on_its_calls_span_and_in_the_metrics() {
    let receiver = crate::traces::receiver();
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let mut settings = crate::helpers::settings(&["Mio"]);
    let mut session =
        runtime_tools::SessionSettings::new(&fake.url, runtime_tools::Dialect::Openai);
    session.max_tool_calls_per_window = 1000;
    settings.characters[0].session = Some(session);
    let app = crate::helpers::spawn_app_with(crate::traces::exporting(
        settings,
        receiver.url("/v1/traces"),
    ))
    .await;
    let plugin = CallbackServer::start();
    plugin.route("/quota", Reply::output(json!({"left": 1})));
    plugin.route(
        "/broken",
        Reply::json(json!({"error": "jammed", "is_error": true})),
    );
    let door = CallbackServer::with(
        "/door",
        Reply::after_gate(Reply::output(json!({"open": 1}))),
    );
    let tools = [
        limited(
            &plugin,
            "quota",
            30,
            json!({"rate": {"calls": 1, "per_seconds": 60}, "dedupe_seconds": 5}),
        ),
        limited(&plugin, "broken", 30, json!({"dedupe_seconds": 5})),
        limited(&door, "door", 3, json!({"max_concurrent": 1})),
    ];
    for tool in &tools {
        let (status, body) = app.register(tool).await;
        assert_eq!(status, 200, "{body}");
    }
    fake.update_with_tools(&["quota", "broken", "door"]).await;

    // A call, its repeat (not counted by the rate), and a call of its own beyond the rate.
    model_calls(&fake, "c1", "quota", KITCHEN_ON).await;
    assert_eq!(output(&fake, "c1").await, json!({"left": 1}));
    model_calls(&fake, "c2", "quota", KITCHEN_ON_AGAIN).await;
    assert_eq!(output(&fake, "c2").await, json!({"left": 1}));
    model_calls(&fake, "c3", "quota", "{}").await;
    assert_eq!(output(&fake, "c3").await["is_error"], json!(true));
    // A failed call and its repeat.
    model_calls(&fake, "b1", "broken", KITCHEN_ON).await;
    let failed = output(&fake, "b1").await;
    assert_eq!(failed["is_error"], json!(true), "{failed}");
    model_calls(&fake, "b2", "broken", KITCHEN_ON).await;
    assert_eq!(output(&fake, "b2").await, failed);
    // Two invokes hold the door its whole timeout each; the model's call behind them is busy.
    let first = invoking(&app, "door", "i1", json!({}));
    door.wait_for_requests(1).await;
    // The second is queued a margin after the first began, so it gets its turn when the first
    // times out however late a loaded machine's timers fire (as in the busy test above).
    actix_web::rt::time::sleep(QUEUE_MARGIN).await;
    let second = invoking(&app, "door", "i2", json!({}));
    waiting(&app, "door", 1).await;
    model_calls(&fake, "d3", "door", "{}").await;
    waiting(&app, "door", 2).await;
    let busy = output(&fake, "d3").await;
    assert!(
        busy["error"]
            .as_str()
            .unwrap()
            .starts_with("the tool door was busy"),
        "{busy}"
    );
    door.open_gate();
    let _ = (first.await.unwrap(), second.await.unwrap());
    assert_eq!(received_ids(&door), ["i1", "i2"]);

    // The spans: a held-back call failed with its outcome; a repeat names its first call, and
    // failed (or not) as that one did.
    let span = |tool: &'static str, id: &'static str| {
        let receiver = &receiver;
        async move {
            crate::traces::span(
                receiver,
                &format!("execute_tool {tool}"),
                ("gen_ai.tool.call.id", id),
            )
            .await
        }
    };
    let attribute = |s: &crate::traces::Exported, key: &str| s.attributes.get(key).cloned();
    let repeat = span("quota", "c2").await;
    assert_eq!(
        (
            attribute(&repeat, "runtime_tools.first_call_id"),
            attribute(&repeat, "error.type"),
            repeat.status
        ),
        (Some("c1".to_owned()), None, 0)
    );
    let failed_repeat = span("broken", "b2").await;
    assert_eq!(
        (
            attribute(&failed_repeat, "runtime_tools.first_call_id"),
            attribute(&failed_repeat, "error.type"),
            failed_repeat.status
        ),
        (Some("b1".to_owned()), Some("tool_error".to_owned()), 2)
    );
    for (tool, id, outcome) in [("quota", "c3", "rate_limited"), ("door", "d3", "busy")] {
        let held = span(tool, id).await;
        assert_eq!(
            (
                attribute(&held, "error.type"),
                attribute(&held, "runtime_tools.first_call_id"),
                held.status
            ),
            (Some(outcome.to_owned()), None, 2),
            "{id}"
        );
    }

    // The metrics: each outcome by its label; each wait in the histogram, the busy call's its
    // whole timeout, the first invoke's none.
    let metrics = scrape(&app).await;
    for (tool, outcome) in [
        ("quota", "ok"),
        ("quota", "deduplicated"),
        ("quota", "rate_limited"),
        ("broken", "tool_error"),
        ("broken", "deduplicated"),
        ("door", "busy"),
    ] {
        assert_eq!(
            metrics.value(
                "runtime_tools_tool_calls_total",
                &[("tool", tool), ("outcome", outcome), ("caller", "model")]
            ),
            1.0,
            "{tool} {outcome}"
        );
    }
    let wait = |caller: &'static str, le: &'static str| {
        metrics.value(
            "runtime_tools_tool_call_wait_seconds_bucket",
            &[("tool", "door"), ("caller", caller), ("le", le)],
        )
    };
    assert_eq!((wait("model", "0.5"), wait("model", "+Inf")), (0.0, 1.0));
    assert_eq!((wait("invoke", "0"), wait("invoke", "+Inf")), (1.0, 2.0));
    // Only a tool with max_concurrent has waits.
    assert_eq!(
        metrics
            .matching(
                "runtime_tools_tool_call_wait_seconds_count",
                &[("tool", "quota")]
            )
            .count(),
        0
    );
}

#[actix_web::test]
async fn a_replacing_registration_starts_with_fresh_limits() {
    let app = crate::helpers::spawn_app(&["Mio"]).await;
    let quota = CallbackServer::with("/quota", Reply::output(json!({"left": 1})));
    let tool = limited(
        &quota,
        "quota",
        30,
        json!({"rate": {"calls": 1, "per_seconds": 60}}),
    );
    let (status, body) = app.register(&tool).await;
    assert_eq!(status, 200, "{body}");
    let call = |id: &'static str| {
        crate::callback_server::invoke(&app, json!({"name": "quota", "role": "Mio", "call_id": id}))
    };
    assert_eq!(call("i1").await.1["is_error"], json!(false));
    let (_, refused) = call("i2").await;
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .starts_with("the tool quota may be called at most 1 time per 60 s"),
        "{refused}"
    );
    // The same registration again replaces the tool: its window starts empty.
    let (status, body) = app.register(&tool).await;
    assert_eq!(status, 200, "{body}");
    let (_, again) = call("i3").await;
    assert_eq!(again["output"], json!({"left": 1}), "{again}");
    assert_eq!(received_ids(&quota), ["i1", "i3"]);
}
