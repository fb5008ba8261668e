//! The core's rules, with the OpenAI Realtime adapter writing and reading the frames.

use serde_json::json;

use super::*;
use crate::domain::call::{ToolAnswer, ToolResult};
use crate::domain::images::ToolImage;
use crate::domain::tool::test_tools;
use crate::events::{EventSettings, Subscription};
use crate::session::realtime::{self, Dialect, Realtime};

const URL: &str = "ws://127.0.0.1:9/v1/realtime";

fn tools(names: &[&str]) -> Arc<[SharedTool]> {
    test_tools(names).into()
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
    assert!(!passed(relay.from_upstream(&updated(&["lookup"]))));
    let next = sent(&mut relay);
    assert_eq!(names(&next[0]), ["own", "lookup", "more"]);
    // The second answer is the app's: it sees it.
    assert!(passed(relay.from_upstream(&updated(&["own", "lookup"]))));
    assert!(rx.try_recv().is_err(), "not settled by the app's answer");
    assert!(!passed(
        relay.from_upstream(&updated(&["own", "lookup", "more"]))
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
        passed(relay.from_upstream(&app_error.to_string())),
        "the app's error is the app's"
    );
    let ours = json!({"type": "error", "error": {"message": "no", "event_id": update["event_id"]}});
    assert!(!passed(relay.from_upstream(&ours.to_string())));
    assert_eq!(
        relay.report().last_sync.unwrap().error.as_deref(),
        Some("model session refused the tool update: no")
    );
    // An error that names nothing of the server's is reported to the actor as such.
    let nobodys = json!({"type": "error", "error": {"message": "who", "event_id": "x9"}});
    assert_eq!(
        relay.from_upstream(&nobodys.to_string()),
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
    assert!(passed(relay.from_upstream(&call("c1", "own"))));
    assert!(relay.take_effects().is_empty(), "the app's call is not run");
    assert!(passed(relay.from_upstream(&call("c2", "get_weather"))));
    let run = the_run(&mut relay);
    assert_eq!(run.call.call_id, "c2");
    let done = json!({"type": "response.done", "response": {"id": "r1", "output": []}});
    relay.from_upstream(&done.to_string());
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
    client.from_upstream(&updated(&["a"]));
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
    client.from_upstream(&updated(&["a", "b"]));
    assert!(rx.try_recv().is_err(), "the late answer settles nothing");
    client.from_upstream(&updated(&["a", "b", "c"]));
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
        session.from_upstream(
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
        let calls = published(&mut subscription);
        assert_eq!(calls.len(), 1, "{transport:?}: {calls:?}");
        let (kind, mut data) = calls.into_iter().next().unwrap();
        assert_eq!(kind, "tool.call");
        assert!(data["duration_ms"].as_f64().unwrap() >= 0.0);
        data.as_object_mut().unwrap().remove("duration_ms");
        let kind = serde_json::to_value(transport).unwrap();
        assert_eq!(
            data,
            json!({"role": "Mio", "tool": "cam", "source": "plugin:w", "call_id": "c1",
                   "caller": "model", "kind": kind, "is_error": false}),
            "{transport:?}: no arguments, no output, the kind of session"
        );
    }
}

#[test]
fn a_session_that_takes_no_images_is_told_what_it_missed() {
    let mut relay = core_on(ConnectionKind::Relay, &["cam"], Dialect::Glm, &hub());
    connect(&mut relay, ConnectionKind::Relay, None);
    sent(&mut relay);
    relay.from_upstream(
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
    relay.from_upstream(&updated(&["a"]));
    assert_eq!(rx.try_recv().unwrap(), Ok(()));
    let state = published(&mut subscription);
    assert_eq!(state.len(), 1, "{state:?}");
    assert_eq!(state[0].1["kind"], "relay");
    assert_eq!(state[0].1["last_sync"]["ok"], true);
    assert_eq!(state[0].1["acknowledged_tools"], 1);
}
