//! The core's rules, with the OpenAI Realtime adapter writing and reading the frames.

use serde_json::json;

use super::*;
use crate::domain::call::{Scheduling, ToolAnswer, ToolResult};
use crate::domain::images::ToolImage;
use crate::domain::tool::test_tools;
use crate::events::{EventSettings, Subscription};
use crate::session::realtime::{self, Realtime};
use crate::session::settings::Dialect;

const URL: &str = "ws://127.0.0.1:9/v1/realtime";

fn tools(names: &[&str]) -> CharacterTools {
    CharacterTools::listed(test_tools(names).into())
}

fn core(kind: ConnectionKind, registered: &[&str]) -> SessionCore {
    core_on(kind, registered, Dialect::Openai, &hub())
}

fn hub() -> EventHub {
    EventHub::new(&EventSettings::default())
}

/// A core as each kind of connection makes it (an attachment's session is shared with the
/// app's own connection).
fn core_on(
    kind: ConnectionKind,
    registered: &[&str],
    dialect: Dialect,
    events: &EventHub,
) -> SessionCore {
    let settings = SessionSettings::new(URL, dialect);
    SessionCore::new(
        "Mio".into(),
        kind,
        Box::new(Realtime(dialect)),
        URL.into(),
        &settings,
        events.clone(),
        Policy::new(events.clone()),
        tools(registered),
        kind == ConnectionKind::Attach,
    )
}

/// The connection comes up, and the first update goes as each kind's actor has it go.
fn connect(core: &mut SessionCore, kind: ConnectionKind, waiter: Option<Waiter>) {
    core.connected();
    match kind {
        ConnectionKind::Client => core.sync_now(),
        ConnectionKind::Relay => core.sync_if_registered(waiter),
        _ => {
            let timeout = core.sync_timeout();
            core.hold_until_described(waiter, SyncError::NotDescribed(timeout));
        }
    }
}

/// What the relay does with an app's text frame: its update, merged.
fn from_app(core: &mut SessionCore, text: &str) -> Option<String> {
    realtime::app::session_update(Dialect::Openai, core.registered(), text)
        .and_then(|update| core.app_update(update))
}

/// Whether an app behind a relay sees a frame of the model's.
fn passed(seen: Seen) -> bool {
    seen != Seen::Ours
}

/// The events published since the last look: (kind, data).
fn published(subscription: &mut Subscription) -> Vec<(String, Value)> {
    let mut events = Vec::new();
    while let Ok(event) = subscription.events.try_recv() {
        let frame = std::str::from_utf8(event.frame()).unwrap();
        let line = |prefix: &str| {
            frame
                .lines()
                .find_map(|l| l.strip_prefix(prefix))
                .unwrap()
                .trim()
                .to_owned()
        };
        let data = serde_json::from_str(&line("data:")).unwrap();
        events.push((line("event:"), data));
    }
    events
}

/// A successful output of `text` (exact JSON) with `images`.
fn output(call: &ToolCall, text: &str, images: Vec<ToolImage>) -> ToolResult {
    let answer = ToolAnswer {
        output: serde_json::value::RawValue::from_string(text.into()).unwrap(),
        error: None,
        images: None,
        scheduling: Default::default(),
        outcome: crate::domain::call::Outcome::Ok,
    };
    call.result(answer, images)
}

fn image(prompt: &str) -> ToolImage {
    ToolImage {
        mime: "image/png",
        width: 1,
        height: 1,
        data_b64: "iVBO".into(),
        vision_prompt: prompt.into(),
    }
}

/// The one call of a registered tool the core asked to run.
fn the_run(core: &mut SessionCore) -> Run {
    match core.take_effects().pop() {
        Some(Effect::Run(run)) => *run,
        other => panic!("expected a call to run, got {other:?}"),
    }
}

/// The events sent upstream since the last look, as JSON.
fn sent(core: &mut SessionCore) -> Vec<Value> {
    core.take_effects()
        .into_iter()
        .filter_map(|e| match e {
            Effect::Upstream(text) => Some(serde_json::from_str(&text).unwrap()),
            _ => None,
        })
        .collect()
}

fn names(update: &Value) -> Vec<&str> {
    update["session"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect()
}

fn updated(names: &[&str]) -> String {
    let tools: Vec<Value> = names
        .iter()
        .map(|n| json!({"type": "function", "name": n}))
        .collect();
    json!({"type": "session.updated", "session": {"type": "realtime", "tools": tools}}).to_string()
}

fn waiter() -> (Waiter, oneshot::Receiver<Result<(), SyncError>>) {
    oneshot::channel()
}

#[test]
fn acknowledgements_are_matched_in_order_and_only_the_apps_reach_the_app() {
    let mut relay = core(ConnectionKind::Relay, &["lookup"]);
    connect(&mut relay, ConnectionKind::Relay, None);
    let first = sent(&mut relay);
    assert_eq!(
        names(&first[0]),
        ["lookup"],
        "the registered tools go up at once"
    );

    // The app's update goes up merged while the server's is still unanswered.
    let app = r#"{"type":"session.update","event_id":"a1","session":{"type":"realtime","tools":[{"type":"function","name":"own"}]}}"#;
    let merged: Value = serde_json::from_str(&from_app(&mut relay, app).unwrap()).unwrap();
    assert_eq!(names(&merged), ["own", "lookup"]);

    // A change while both wait: one update in flight, so it waits for the first answer.
    let (w, mut rx) = waiter();
    assert!(
        relay
            .tools_changed(tools(&["lookup", "more"]), Some(w))
            .is_none()
    );
    assert!(sent(&mut relay).is_empty());

    // The first answer is the server's: the app does not see it; the change goes out next,
    // keeping the app's tool.
    assert!(!passed(relay.on_upstream(&updated(&["lookup"]))));
    let next = sent(&mut relay);
    assert_eq!(names(&next[0]), ["own", "lookup", "more"]);
    // The second answer is the app's: it sees it.
    assert!(passed(relay.on_upstream(&updated(&["own", "lookup"]))));
    assert!(rx.try_recv().is_err(), "not settled by the app's answer");
    assert!(!passed(
        relay.on_upstream(&updated(&["own", "lookup", "more"]))
    ));
    assert_eq!(rx.try_recv().unwrap(), Ok(()));
    assert_eq!(relay.report().acknowledged_tools, 2);
}

#[test]
fn errors_settle_the_update_they_name() {
    let mut relay = core(ConnectionKind::Relay, &["lookup"]);
    connect(&mut relay, ConnectionKind::Relay, None);
    let update = sent(&mut relay).remove(0);
    from_app(
        &mut relay,
        r#"{"type":"session.update","event_id":"a1","session":{"tools":[]}}"#,
    );
    let app_error = json!({"type": "error", "error": {"message": "bad", "event_id": "a1"}});
    assert!(
        passed(relay.on_upstream(&app_error.to_string())),
        "the app's error is the app's"
    );
    let ours = json!({"type": "error", "error": {"message": "no", "event_id": update["event_id"]}});
    assert!(!passed(relay.on_upstream(&ours.to_string())));
    assert_eq!(
        relay.report().last_sync.unwrap().error.as_deref(),
        Some("model session refused the tool update: no")
    );
    // An error that names nothing of the server's is reported to the actor as such.
    let nobodys = json!({"type": "error", "error": {"message": "who", "event_id": "x9"}});
    assert_eq!(
        relay.on_upstream(&nobodys.to_string()),
        Seen::Error {
            message: "who".into(),
            event_id: Some("x9".into())
        }
    );
}

#[test]
fn calls_of_the_apps_tools_are_left_to_the_app() {
    let mut relay = core(ConnectionKind::Relay, &["get_weather", "own"]);
    connect(&mut relay, ConnectionKind::Relay, None);
    sent(&mut relay);
    from_app(
        &mut relay,
        r#"{"type":"session.update","session":{"tools":[{"type":"function","name":"own"}]}}"#,
    );
    assert_eq!(relay.report().clashes, ["own"]);
    let call = |id: &str, name: &str| {
        json!({"type": "response.function_call_arguments.done", "response_id": "r1",
               "call_id": id, "name": name, "arguments": "{}"})
        .to_string()
    };
    assert!(passed(relay.on_upstream(&call("c1", "own"))));
    assert!(relay.take_effects().is_empty(), "the app's call is not run");
    assert!(passed(relay.on_upstream(&call("c2", "get_weather"))));
    let run = the_run(&mut relay);
    assert_eq!(run.call.call_id, "c2");
    let done = json!({"type": "response.done", "response": {"id": "r1", "output": []}});
    relay.on_upstream(&done.to_string());
    let result = output(&run.call, "1", Vec::new());
    relay.answered(run.ticket, result);
    let answers = sent(&mut relay);
    assert_eq!(
        answers.len(),
        1,
        "an output, and no response.create: the app continues"
    );
    assert_eq!(answers[0]["item"]["call_id"], "c2");
    assert_eq!(relay.report().calls_answered, 1);
}

#[test]
fn a_timed_out_update_fails_and_its_late_answer_is_swallowed() {
    let mut client = core(ConnectionKind::Client, &["a"]);
    let (w, mut rx) = waiter();
    connect(&mut client, ConnectionKind::Client, None);
    sent(&mut client);
    client.on_upstream(&updated(&["a"]));
    client.tools_changed(tools(&["a", "b"]), Some(w));
    let version = client.sync.in_flight().unwrap();
    client.sync_timer_fired(version);
    let error = rx.try_recv().unwrap().unwrap_err();
    assert_eq!(
        error.to_string(),
        "model session did not acknowledge the tool update (no session.updated within 5 s)"
    );
    let (w, mut rx) = waiter();
    client.tools_changed(tools(&["a", "b", "c"]), Some(w));
    sent(&mut client);
    client.on_upstream(&updated(&["a", "b"]));
    assert!(rx.try_recv().is_err(), "the late answer settles nothing");
    client.on_upstream(&updated(&["a", "b", "c"]));
    assert_eq!(rx.try_recv().unwrap(), Ok(()));
}

#[test]
fn answers_carry_exact_output_and_images_on_every_kind_and_are_announced() {
    for transport in [
        ConnectionKind::Client,
        ConnectionKind::Relay,
        ConnectionKind::Attach,
    ] {
        let events = hub();
        let mut subscription = events.subscribe(None, None);
        let mut session = core_on(transport, &["cam"], Dialect::Openai, &events);
        connect(&mut session, transport, None);
        if transport == ConnectionKind::Attach {
            // What the attachment learns from the call's session.created: no tools of its own.
            session.described(Vec::new(), None);
        }
        sent(&mut session);
        let connected = published(&mut subscription);
        assert_eq!(connected[0].0, "session.state", "{transport:?}");
        assert_eq!(connected[0].1["state"], "connected", "{transport:?}");
        assert_eq!(
            connected[0].1["kind"],
            json!(transport),
            "the event names the kind of connection"
        );
        session.on_upstream(
            &json!({"type": "response.function_call_arguments.done", "response_id": "r1",
                    "call_id": "c1", "name": "cam", "arguments": "{}"})
            .to_string(),
        );
        let run = the_run(&mut session);
        let result = output(&run.call, r#"{"n": 1.50}"#, vec![image("look")]);
        session.answered(run.ticket, result);
        let answers = sent(&mut session);
        assert_eq!(
            answers[0]["item"],
            json!({"type": "function_call_output", "call_id": "c1", "output": r#"{"n": 1.50}"#}),
            "{transport:?}: the exact output text"
        );
        assert_eq!(answers[1]["item"]["role"], "user", "{transport:?}");
        assert_eq!(
            answers[1]["item"]["content"][1]["image_url"], "data:image/png;base64,iVBO",
            "{transport:?}: the image follows the output"
        );
        let calls = calls_announced(&mut subscription);
        assert_eq!(calls.len(), 1, "{transport:?}: {calls:?}");
        let data = calls.into_iter().next().unwrap();
        let kind = serde_json::to_value(transport).unwrap();
        assert_eq!(
            data,
            json!({"role": "Mio", "tool": "cam", "source": "plugin:w", "call_id": "c1",
                   "caller": "model", "kind": kind, "behavior": "blocking", "is_error": false, "cancelled": false,
                   "outcome": "ok"}),
            "{transport:?}: no arguments, no output, the kind of session"
        );
    }
}

#[test]
fn a_session_that_takes_no_images_is_told_what_it_missed() {
    let mut relay = core_on(ConnectionKind::Relay, &["cam"], Dialect::Glm, &hub());
    connect(&mut relay, ConnectionKind::Relay, None);
    sent(&mut relay);
    relay.on_upstream(
        &json!({"type": "response.function_call_arguments.done", "response_id": "r1",
                "call_id": "c1", "name": "cam", "arguments": "{}"})
        .to_string(),
    );
    let run = the_run(&mut relay);
    let result = output(&run.call, "7", vec![image("")]);
    relay.answered(run.ticket, result);
    let answers = sent(&mut relay);
    assert_eq!(answers.len(), 1, "no image message: {answers:?}");
    assert_eq!(
        answers[0]["item"]["output"],
        r#"{"result":7,"_image_warnings":["1 image(s) not shown: this model session (glm dialect) takes no images"]}"#
    );
}

#[test]
fn a_settled_sync_is_announced_with_the_connections_report() {
    let events = hub();
    let mut subscription = events.subscribe(None, None);
    let mut relay = core_on(ConnectionKind::Relay, &[], Dialect::Openai, &events);
    connect(&mut relay, ConnectionKind::Relay, None);
    published(&mut subscription);
    let (w, mut rx) = waiter();
    assert!(relay.tools_changed(tools(&["a"]), Some(w)).is_none());
    sent(&mut relay);
    relay.on_upstream(&updated(&["a"]));
    assert_eq!(rx.try_recv().unwrap(), Ok(()));
    let state = published(&mut subscription);
    assert_eq!(state.len(), 1, "{state:?}");
    assert_eq!(state[0].1["kind"], "relay");
    assert_eq!(state[0].1["last_sync"]["ok"], true);
    assert_eq!(state[0].1["acknowledged_tools"], 1);
}

// ---- Interruptions ----------------------------------------------------------------------------

/// A core of `kind`, connected and past its first update, with `cancel_on_interruption` as given.
fn interruptible(kind: ConnectionKind, cancel: bool, events: &EventHub) -> SessionCore {
    interruptible_in(kind, Dialect::Openai, cancel, events)
}

fn interruptible_in(
    kind: ConnectionKind,
    dialect: Dialect,
    cancel: bool,
    events: &EventHub,
) -> SessionCore {
    let mut settings = SessionSettings::new(URL, dialect);
    settings.cancel_on_interruption = cancel;
    let mut core = SessionCore::new(
        "Mio".into(),
        kind,
        Box::new(Realtime(dialect)),
        URL.into(),
        &settings,
        events.clone(),
        Policy::new(events.clone()),
        tools(&["slow", "quick"]),
        kind == ConnectionKind::Attach,
    );
    connect(&mut core, kind, None);
    if kind == ConnectionKind::Attach {
        core.described(Vec::new(), None);
    }
    sent(&mut core);
    core
}

/// The model calls `name` in `response`; `done`: the response ends (completed).
fn model_calls(core: &mut SessionCore, response: &str, call_id: &str, name: &str, done: bool) {
    core.on_upstream(
        &json!({"type": "response.function_call_arguments.done", "response_id": response,
                "call_id": call_id, "name": name, "arguments": "{}"})
        .to_string(),
    );
    if done {
        core.on_upstream(&response_done(response, "completed", &[]));
    }
}

/// `response.done` of `response` with `status`, listing these calls of `slow`.
fn response_done(response: &str, status: &str, calls: &[&str]) -> String {
    let output: Vec<Value> = calls
        .iter()
        .map(|c| json!({"type": "function_call", "call_id": c, "name": "slow", "arguments": "{}"}))
        .collect();
    json!({"type": "response.done", "response": {"id": response, "status": status,
           "output": output}})
    .to_string()
}

const SPEECH_STARTED: &str = r#"{"type":"input_audio_buffer.speech_started","audio_start_ms":800}"#;

/// The text a cancelled call's output carries, `ran` left out.
fn is_cancelled_output(event: &Value, call_id: &str) -> bool {
    let output: Value = serde_json::from_str(event["item"]["output"].as_str().unwrap()).unwrap();
    event["item"]["type"] == "function_call_output"
        && event["item"]["call_id"] == call_id
        && output["is_error"] == true
        && output["error"].as_str().is_some_and(|e| {
            e.starts_with("cancelled because the person interrupted: a new user turn began")
        })
}

/// The `tool.call` events published since the last look, `duration_ms` checked and left out.
fn calls_announced(subscription: &mut Subscription) -> Vec<Value> {
    published(subscription)
        .into_iter()
        .filter(|(kind, _)| kind == "tool.call")
        .map(|(_, mut data)| {
            assert!(data["duration_ms"].as_f64().unwrap() >= 0.0, "{data}");
            data.as_object_mut().unwrap().remove("duration_ms");
            // The call's trace, which its callback's `traceparent` names.
            let trace = data.as_object_mut().unwrap().remove("trace_id");
            assert_eq!(
                trace.and_then(|t| t.as_str().map(str::len)),
                Some(32),
                "{data}"
            );
            data
        })
        .collect()
}

#[test]
fn speech_cancels_the_running_calls_which_are_answered_as_cancelled_and_not_continued() {
    // Every kind, and every dialect (one each, in turn).
    for (kind, dialect) in [
        (ConnectionKind::Client, Dialect::Openai),
        (ConnectionKind::Relay, Dialect::Qwen),
        (ConnectionKind::Attach, Dialect::Glm),
    ] {
        let events = hub();
        let mut core = interruptible_in(kind, dialect, true, &events);
        let mut subscription = events.subscribe(None, None);
        // r1 calls two tools; the quick one answers, the slow one still runs when the person
        // speaks.
        model_calls(&mut core, "r1", "c1", "slow", false);
        let slow = the_run(&mut core);
        model_calls(&mut core, "r1", "c2", "quick", true);
        let quick = the_run(&mut core);
        let result = output(&quick.call, "2", Vec::new());
        core.answered(quick.ticket, result);
        assert_eq!(
            sent(&mut core).len(),
            1,
            "{kind:?}: c2's output, r1 waits for c1"
        );
        published(&mut subscription);

        assert_eq!(
            core.on_upstream(SPEECH_STARTED),
            Seen::Pass,
            "the app sees it"
        );
        let effects = core.take_effects();
        assert!(
            matches!(effects[0], Effect::Cancel(ticket) if ticket == slow.ticket),
            "{kind:?}: the slow call is dropped: {effects:?}"
        );
        let Effect::Upstream(text) = &effects[1] else {
            panic!("{kind:?}: {effects:?}")
        };
        let answered: Value = serde_json::from_str(text).unwrap();
        assert!(is_cancelled_output(&answered, "c1"), "{kind:?}: {answered}");
        assert_eq!(
            effects.len(),
            2,
            "{kind:?}: no response.create: {effects:?}"
        );
        assert_eq!(
            calls_announced(&mut subscription),
            [
                json!({"role": "Mio", "tool": "slow", "source": "plugin:w", "call_id": "c1",
                    "caller": "model", "kind": kind, "behavior": "blocking", "is_error": true, "cancelled": true,
                    "outcome": "cancelled"})
            ],
            "{kind:?}"
        );

        // Its result comes anyway: dropped, not announced again.
        let late = output(&slow.call, "1", Vec::new());
        core.answered(slow.ticket, late);
        assert!(core.take_effects().is_empty(), "{kind:?}");
        assert!(calls_announced(&mut subscription).is_empty(), "{kind:?}");
        // Nothing runs: a second interruption cancels nothing.
        core.on_upstream(SPEECH_STARTED);
        assert!(core.take_effects().is_empty(), "{kind:?}");

        // The next turn goes on as ever.
        model_calls(&mut core, "r2", "c3", "quick", true);
        let next = the_run(&mut core);
        let result = output(&next.call, "3", Vec::new());
        core.answered(next.ticket, result);
        let answers = sent(&mut core);
        assert_eq!(answers[0]["item"]["output"], "3", "{kind:?}");
        assert_eq!(answers[1]["type"], "response.create", "{kind:?}");
        assert_eq!(core.report().calls_answered, 3, "{kind:?}");
    }
}

#[test]
fn a_cancelled_response_cancels_its_own_calls_only_and_runs_none_it_lists_later() {
    let events = hub();
    let mut core = interruptible(ConnectionKind::Relay, true, &events);
    model_calls(&mut core, "r1", "c1", "slow", true);
    let other = the_run(&mut core);
    model_calls(&mut core, "r2", "c2", "slow", false);
    let cancelled = the_run(&mut core);
    // The provider cancels r2; its response.done lists c2 and a call never announced before.
    core.on_upstream(&response_done("r2", "cancelled", &["c2", "c3"]));
    let effects = core.take_effects();
    assert!(
        matches!(effects[0], Effect::Cancel(t) if t == cancelled.ticket),
        "{effects:?}"
    );
    let outputs: Vec<Value> = effects[1..]
        .iter()
        .map(|e| match e {
            Effect::Upstream(text) => serde_json::from_str(text).unwrap(),
            other => panic!("c3 is not run: {other:?}"),
        })
        .collect();
    assert_eq!(outputs.len(), 2, "{outputs:?}");
    assert!(is_cancelled_output(&outputs[0], "c2"), "{outputs:?}");
    assert!(is_cancelled_output(&outputs[1], "c3"), "{outputs:?}");
    // r1 was not cancelled: its call answers and it goes on.
    let result = output(&other.call, "1", Vec::new());
    core.answered(other.ticket, result);
    let answers = sent(&mut core);
    assert_eq!(answers[0]["item"]["call_id"], "c1");
    assert_eq!(answers[1]["type"], "response.create");
}

#[test]
fn calls_the_provider_cancels_by_id_are_dropped_unanswered_and_the_turn_goes_on_without_them() {
    // Even with cancellation on interruption off: the provider takes no answer for them.
    let mut core = interruptible(ConnectionKind::Client, false, &hub());
    model_calls(&mut core, "r1", "c1", "slow", false);
    let first = the_run(&mut core);
    model_calls(&mut core, "r1", "c2", "slow", true);
    let second = the_run(&mut core);
    core.interrupted(Interruption::Calls(vec!["c2".into()]));
    let effects = core.take_effects();
    assert!(
        matches!(effects[..], [Effect::Cancel(t)] if t == second.ticket),
        "cancelled, and nothing sent for it: {effects:?}"
    );
    let result = output(&first.call, "1", Vec::new());
    core.answered(first.ticket, result);
    let answers = sent(&mut core);
    assert_eq!(answers[0]["item"]["call_id"], "c1", "{answers:?}");
    assert_eq!(answers[1]["type"], "response.create", "{answers:?}");
    assert_eq!(answers.len(), 2, "{answers:?}");
}

#[test]
fn without_cancel_on_interruption_calls_run_to_their_end_and_the_turn_goes_on() {
    let events = hub();
    let mut core = interruptible(ConnectionKind::Relay, false, &events);
    let mut subscription = events.subscribe(None, None);
    model_calls(&mut core, "r1", "c1", "slow", false);
    let run = the_run(&mut core);
    core.on_upstream(SPEECH_STARTED);
    core.interrupted(Interruption::NewTurn);
    core.on_upstream(&response_done("r1", "cancelled", &["c1"]));
    assert!(core.take_effects().is_empty(), "nothing cancelled");
    let result = output(&run.call, "1", Vec::new());
    core.answered(run.ticket, result);
    let answers = sent(&mut core);
    assert_eq!(answers[0]["item"]["output"], "1");
    assert_eq!(answers[1]["type"], "response.create", "as before");
    assert_eq!(
        calls_announced(&mut subscription)[0]["cancelled"],
        json!(false)
    );
}

#[test]
fn calls_running_when_the_connection_ends_are_announced_as_cancelled() {
    let events = hub();
    let mut core = interruptible(ConnectionKind::Client, true, &events);
    let mut subscription = events.subscribe(None, None);
    model_calls(&mut core, "r1", "c1", "slow", true);
    let run = the_run(&mut core);
    core.disconnected();
    let announced = calls_announced(&mut subscription);
    assert_eq!(
        (&announced[0]["call_id"], &announced[0]["cancelled"]),
        (&json!("c1"), &json!(true))
    );
    // Its result, had it come, goes nowhere.
    let result = output(&run.call, "1", Vec::new());
    core.answered(run.ticket, result);
    assert!(core.take_effects().is_empty());
}

#[test]
fn things_ready_together_ask_for_one_response_until_it_begins_or_its_grace_passes() {
    let mut core = interruptible(ConnectionKind::Client, true, &hub());
    let creates = |frames: &[Value]| {
        frames
            .iter()
            .filter(|f| f["type"] == "response.create")
            .count()
    };
    let take = |core: &mut SessionCore| {
        let effects = core.take_effects();
        let frames: Vec<Value> = effects
            .iter()
            .filter_map(|e| match e {
                Effect::Upstream(text) => Some(serde_json::from_str(text).unwrap()),
                _ => None,
            })
            .collect();
        let wakes: Vec<Wake> = effects
            .iter()
            .filter_map(|e| match e {
                Effect::WakeAfter(_, wake) => Some(*wake),
                _ => None,
            })
            .collect();
        (frames, wakes)
    };
    for n in 0..100 {
        core.add_context(&format!("news {n}"), Some(Scheduling::WhenIdle))
            .unwrap();
    }
    let (frames, wakes) = take(&mut core);
    assert_eq!(creates(&frames), 1, "one ask for all hundred");
    assert_eq!(wakes, [Wake::ResponseStart(1)]);
    assert_eq!(core.floor.state(), Conversation::ResponseAsked);

    // It begins: it covers them all; more news while it runs waits for its end.
    core.on_upstream(r#"{"type":"response.created","response":{"id":"r1"}}"#);
    core.add_context("late news", Some(Scheduling::WhenIdle))
        .unwrap();
    core.woke(Wake::ResponseStart(1));
    assert_eq!(creates(&take(&mut core).0), 0);
    core.on_upstream(&response_done("r1", "completed", &[]));
    assert_eq!(
        creates(&take(&mut core).0),
        1,
        "the late news, once r1 ended"
    );

    // An ask that never begins (the model refused it) holds the floor only for its grace.
    core.add_context("more", Some(Scheduling::WhenIdle))
        .unwrap();
    assert_eq!(creates(&take(&mut core).0), 0);
    core.woke(Wake::ResponseStart(2));
    assert_eq!(creates(&take(&mut core).0), 1);
    // An interrupting item while an ask has not begun: the ask covers it.
    core.add_context("urgent", Some(Scheduling::Interrupt))
        .unwrap();
    let (frames, _) = take(&mut core);
    assert_eq!(creates(&frames), 0);
    assert!(!frames.iter().any(|f| f["type"] == "response.cancel"));
}
