//! The relay (`GET /v1/realtime`): the official OpenAI Python SDK is the app
//! (`tests/realtime_app.py`), the fake realtime peer is the model. Checked: the app's
//! `session.update` goes up with the registered tools merged in and its own kept; a registration
//! while connected goes up and is acknowledged before the HTTP answer, and the app does not see
//! that acknowledgement; audio and binary frames pass byte for byte both ways; calls of
//! registered tools are answered by the server while the app sees them, calls of the app's own
//! tools only by the app; closes propagate with their code and reason both ways; an app that
//! stops reading is closed with a reason, not buffered; the three dialects; the errors before
//! the upgrade; a relay is an active session whose failures fail the character; a manager's
//! restart closes its relays and an app that reconnects gets the character's tools back; its state and
//! the calls it answers are announced on the event stream; and every event the server itself
//! sends validates against the SDK's GA schema.

use std::rc::Rc;
use std::time::Duration;

use runtime_tools::limits::{MAX_APP_QUEUE_BYTES, MAX_UPSTREAM_QUEUE_BYTES};
use runtime_tools::{Dialect, SessionMode, SessionSettings};
use serde_json::{Value, json};

use crate::callback_server::{CallbackServer, Reply};
use crate::event_stream::open;
use crate::events::{assert_call, assert_state, state};
use crate::fake_realtime::{AckMode, FakeRealtime, update_tool_names};
use crate::helpers::{
    TestApp, app_with_session, raw_exchange_async, settings, spawn_app_with, tool_body,
};
use crate::schema::validate_client_events;
use crate::sdk_app::SdkApp;

/// A server whose `Mio` relays to `fake` (`mode = "relay"`: no connection of its own), with
/// `others` beside it.
pub async fn relay_app(
    fake: &FakeRealtime,
    others: &[&str],
    dialect: Dialect,
    tweak: impl FnOnce(&mut SessionSettings),
) -> TestApp {
    app_with_session(&fake.url, others, dialect, |session| {
        session.mode = SessionMode::Relay;
        tweak(session)
    })
    .await
}

/// The relay's base URL for the SDK's `websocket_base_url`.
pub fn base(app: &TestApp) -> String {
    format!("ws://{}/v1", app.addr)
}

fn callback() -> CallbackServer {
    CallbackServer::with("/cb", Reply::output(json!({"temperature_c": 28})))
}

/// The app's own tool, in the GA shape.
fn clock_tool() -> Value {
    json!({"type": "function", "name": "app_clock", "description": "The app's clock.",
           "parameters": {"type": "object", "properties": {}}})
}

/// The tool a registration of `name` with [`tool_body`] gives the model, in the GA shape.
fn registered_view(name: &str) -> Value {
    json!({"type": "function", "name": name, "description": format!("{name} tool"),
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}})
}

/// The events the server itself sent upstream: its own updates, outputs and `response.create`s.
pub fn server_events(fake: &FakeRealtime) -> Vec<Value> {
    fake.events()
        .into_iter()
        .filter(|e| {
            e["event_id"]
                .as_str()
                .is_some_and(|id| id.starts_with("rt_"))
        })
        .collect()
}

#[actix_web::test]
async fn the_sdk_app_talks_through_the_relay_and_the_server_does_only_its_part() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let weather = callback();
    let app = Rc::new(relay_app(&fake, &[], Dialect::Openai, |_| {}).await);
    for name in ["get_weather", "app_clock"] {
        let (status, _) = app
            .register(&tool_body(name, &weather.url("/cb"), "plugin:w"))
            .await;
        assert_eq!(status, 200);
    }

    let mut stream = open(&app, "?role=Mio", None).await.expect("stream opens");
    stream.expect("hello").await;

    let mut sdk = SdkApp::start().await;
    sdk.connect_ok(&base(&app), json!({"character": "Mio"}))
        .await;
    let upstream = fake.url.replace("model=fake", "model=gpt-realtime");
    // The relay announces itself connected, then its first sync.
    assert_state(
        &stream.expect("session.state").await,
        state("Mio", "relay", &upstream, "connected"),
    );
    let synced = stream.expect("session.state").await;
    assert_eq!(
        (
            &synced.data["last_sync"]["ok"],
            &synced.data["acknowledged_tools"]
        ),
        (&json!(true), &json!(2)),
        "{synced:?}"
    );
    // The character stays here; the app's other parameters go up; the app's key goes up, as
    // the character has none configured.
    assert_eq!(fake.targets(), ["/v1/realtime?model=gpt-realtime"]);
    assert_eq!(fake.authorizations(), [Some("Bearer sk-app".to_owned())]);
    // The server's own first update carries the registered tools.
    let first = fake.nth_update(1).await;
    assert_eq!(update_tool_names(&first), ["get_weather", "app_clock"]);

    // The app's own update: its tool kept first, the registered ones merged in, the clashing
    // registered `app_clock` left out; everything else it set goes up as it was.
    sdk.send(
        json!({"type": "session.update", "event_id": "app_update_1", "session": {
        "type": "realtime", "instructions": "Be brief.", "tools": [clock_tool()]}}),
    )
    .await;
    let merged = fake.nth_update(2).await;
    assert_eq!(
        merged,
        json!({"type": "session.update", "event_id": "app_update_1", "session": {
            "type": "realtime", "instructions": "Be brief.",
            "tools": [clock_tool(), registered_view("get_weather")]}})
    );
    // The app sees the session's greeting and the answer to its own update, never the answer
    // to the server's.
    assert_eq!(sdk.recv_event().await["type"], "session.created");
    let acknowledged = sdk.recv_event().await;
    assert_eq!(acknowledged["type"], "session.updated");
    assert_eq!(
        update_tool_names(&acknowledged),
        ["app_clock", "get_weather"]
    );

    // A registration while connected goes up (keeping the app's tool) and is acknowledged
    // before the HTTP answer.
    fake.set_mode(AckMode::Held);
    let pending = {
        let (app, url) = (app.clone(), weather.url("/cb"));
        actix_web::rt::spawn(
            async move { app.register(&tool_body("lookup", &url, "plugin:w")).await },
        )
    };
    fake.update_with_tools(&["app_clock", "get_weather", "lookup"])
        .await;
    assert!(
        !pending.is_finished(),
        "answered before the acknowledgement"
    );
    fake.release_acks(1);
    let (status, body) = pending.await.unwrap();
    assert_eq!(
        (status, body),
        (
            200,
            json!({"ok": true, "registered": "lookup", "affected_roles": ["Mio"], "failed_roles": []})
        )
    );
    fake.set_mode(AckMode::Immediate);

    // Audio both ways, byte for byte, and the app did not see the server's acknowledgement:
    // the next frame it reads is the audio.
    let append = r#"{"type":"input_audio_buffer.append","event_id":"app_audio_1","audio":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="}"#;
    sdk.send_raw(append).await;
    fake.wait_until("the app's audio", |f| {
        f.texts().contains(&append.to_owned()).then_some(())
    })
    .await;
    let delta = "{\"type\": \"response.output_audio.delta\",  \"event_id\":\"srv_a\",\"response_id\":\"r0\",\"item_id\":\"i0\",\"output_index\":0,\"content_index\":0,\"delta\":\"//79/Pv6+fj39vX08/Lx8A==\"}";
    fake.push_text(delta).await;
    assert_eq!(sdk.recv().await["text"], delta);
    // Binary frames too.
    let up: Vec<u8> = (0..=255u8).rev().collect();
    sdk.send_binary(&up).await;
    fake.wait_until("the app's binary frame", |f| {
        f.binaries().contains(&up).then_some(())
    })
    .await;
    let down: Vec<u8> = (0..=255u8).collect();
    fake.push_binary(down.clone()).await;
    let frame = sdk.recv().await;
    use base64::Engine;
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(frame["binary_b64"].as_str().expect("a binary frame"))
            .unwrap(),
        down
    );

    // A call of a registered tool: the server runs it and answers; the app sees the call.
    fake.push_call("resp_1", "call_1", "get_weather").await;
    assert_eq!(
        sdk.recv_event().await["type"],
        "response.function_call_arguments.done"
    );
    assert_eq!(sdk.recv_event().await["type"], "response.done");
    fake.wait_for("the server's output and response.create", |events| {
        let answered = events.iter().any(|e| {
            e["type"] == "conversation.item.create"
                && e["item"]
                    == json!({"type": "function_call_output", "call_id": "call_1",
                              "output": "{\"temperature_c\":28}"})
        });
        let created = events.iter().any(|e| e["type"] == "response.create");
        (answered && created).then_some(())
    })
    .await;
    assert_eq!(weather.received().len(), 1);
    assert_call(
        &stream
            .wait_for("tool.call", |d| d["call_id"] == "call_1")
            .await,
        json!({"role": "Mio", "tool": "get_weather", "source": "plugin:w", "call_id": "call_1",
               "caller": "model", "kind": "relay", "is_error": false, "cancelled": false}),
    );

    // A call of the app's own tool: only the app answers it.
    fake.push_call("resp_2", "call_2", "app_clock").await;
    let call = sdk.recv_event().await;
    assert_eq!(call["call_id"], "call_2");
    assert_eq!(sdk.recv_event().await["type"], "response.done");
    sdk.send(json!({"type": "conversation.item.create", "item": {
        "type": "function_call_output", "call_id": "call_2", "output": "{\"time\":\"12:00\"}"}}))
        .await;
    sdk.send(json!({"type": "response.create"})).await;
    let events = fake
        .wait_for("the app's response.create", |events| {
            (events
                .iter()
                .filter(|e| e["type"] == "response.create")
                .count()
                == 2)
                .then(|| events.to_vec())
        })
        .await;
    let outputs: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "conversation.item.create" && e["item"]["call_id"] == "call_2")
        .collect();
    assert_eq!(
        outputs.len(),
        1,
        "only the app answered call_2: {outputs:?}"
    );
    assert_eq!(outputs[0]["item"]["output"], "{\"time\":\"12:00\"}");
    assert_eq!(
        weather.received().len(),
        1,
        "the app's tool never reaches a callback"
    );

    // The sessions listing shows the relay.
    let (status, sessions) = app.get("/api/sessions").await;
    assert_eq!(status, 200);
    let mio = &sessions["sessions_by_role"]["Mio"];
    assert_eq!(mio["state"], "connected");
    let relay = &mio["connections"][0];
    assert_eq!(relay["kind"], "relay");
    assert_eq!(relay["upstream"], json!(upstream));
    assert_eq!(relay["calls_answered"], 1);
    assert_eq!(relay["clashes"], json!(["app_clock"]));
    assert_eq!(relay["acknowledged_tools"], 2);
    assert_eq!(relay["last_sync"]["ok"], true);
    assert!(relay["since"].as_str().unwrap().ends_with('Z'), "{relay}");

    // The app closing closes the model's side with the same code and reason.
    sdk.close(4000, "the user hung up").await;
    fake.wait_until("the close upstream", |f| {
        (!f.closes().is_empty()).then_some(())
    })
    .await;
    assert_eq!(fake.closes(), [(4000, "the user hung up".to_owned())]);
    // The relay's last event says it closed; no call of the app's own tool was announced.
    let mut skipped = Vec::new();
    let closed = loop {
        let event = stream.next_event().await;
        if event.event == "session.state" && event.data["state"] == "closed" {
            break event;
        }
        skipped.push(event);
    };
    assert_eq!(closed.data["calls_answered"], 1, "{closed:?}");
    assert!(
        !skipped.iter().any(|e| e.event == "tool.call"),
        "{skipped:#?}"
    );

    // Every event the server itself sent, and the app's update as the server rewrote it, are
    // GA client events.
    let mut originated = server_events(&fake);
    assert!(originated.len() >= 4, "{originated:#?}");
    originated.push(merged);
    let report = validate_client_events(originated).await;
    assert!(report.is_ok(), "{report:?}");
}

#[actix_web::test]
async fn the_models_close_reaches_the_app_with_its_code_and_reason() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let app = relay_app(&fake, &[], Dialect::Openai, |s| {
        s.api_key_env = Some("HOME".into())
    })
    .await;
    let mut sdk = SdkApp::start().await;
    // `character` may be left out: Mio is the only character with a session.
    sdk.connect_ok(&base(&app), json!({})).await;
    fake.wait_connections(1).await;
    // The character's configured key goes up, not the app's.
    let key = std::env::var("HOME").unwrap();
    assert_eq!(fake.authorizations(), [Some(format!("Bearer {key}"))]);
    fake.close_with(4001, "session expired").await;
    let (code, reason, _) = sdk.wait_close().await;
    assert_eq!((code, reason), (json!(4001), json!("session expired")));
    // The relay is gone from the listing once it ended.
    let mio = loop_until_no_connections(&app).await;
    assert_eq!(mio["state"], "none");
}

#[actix_web::test]
async fn removing_the_character_closes_its_relays() {
    use runtime_tools::RemoveCharacter;
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let app = relay_app(&fake, &["Lanlan"], Dialect::Openai, |_| {}).await;
    let mut sdk = SdkApp::start().await;
    sdk.connect_ok(&base(&app), json!({"character": "Mio"}))
        .await;
    fake.wait_connections(1).await;
    let removed = app
        .router
        .send(RemoveCharacter { name: "Mio".into() })
        .await
        .unwrap();
    assert_eq!(removed, Ok(()));
    assert_closed_by_server(&mut sdk, &fake).await;
}

#[actix_web::test]
async fn a_restarted_manager_closes_its_relays_and_a_reconnecting_app_gets_the_tools_back() {
    use runtime_tools::faults::InjectManagerPanic;
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let weather = callback();
    let app = relay_app(&fake, &[], Dialect::Openai, |_| {}).await;
    let (status, _) = app
        .register(&tool_body("get_weather", &weather.url("/cb"), "plugin:w"))
        .await;
    assert_eq!(status, 200);
    let mut sdk = SdkApp::start().await;
    sdk.connect_ok(&base(&app), json!({})).await;
    assert_eq!(
        update_tool_names(&fake.nth_update(1).await),
        ["get_weather"]
    );

    let injected = app
        .router
        .send(InjectManagerPanic { role: "Mio".into() })
        .await
        .unwrap();
    assert_eq!(injected, Ok(()));
    assert_closed_by_server(&mut sdk, &fake).await;

    // The restarted manager holds the tools it had: an app that reconnects gets them.
    let mut again = SdkApp::start().await;
    again.connect_ok(&base(&app), json!({})).await;
    fake.wait_connections(2).await;
    assert_eq!(
        update_tool_names(&fake.nth_update(2).await),
        ["get_weather"]
    );
    let (_, sessions) = app.get("/api/sessions").await;
    let connections = &sessions["sessions_by_role"]["Mio"]["connections"];
    assert_eq!(
        connections.as_array().map(Vec::len),
        Some(1),
        "{connections}"
    );
    assert_eq!(connections[0]["kind"], "relay");
}

/// The relay of `sdk` to `fake` was closed by the server: both sides got 1001 going away.
pub async fn assert_closed_by_server(sdk: &mut SdkApp, fake: &FakeRealtime) {
    let reason = "the character's sessions were closed by the server";
    let (code, got, _) = sdk.wait_close().await;
    assert_eq!((code, got), (json!(1001), json!(reason)));
    fake.wait_until("the close upstream", |f| {
        (!f.closes().is_empty()).then_some(())
    })
    .await;
    assert_eq!(fake.closes(), [(1001, reason.to_owned())]);
}

/// Waits (on the listing, with a deadline) until Mio has no connection; returns its report.
async fn loop_until_no_connections(app: &TestApp) -> Value {
    let deadline = tokio::time::Instant::now() + crate::fake_realtime::EVENT_DEADLINE;
    loop {
        let (_, sessions) = app.get("/api/sessions").await;
        let mio = sessions["sessions_by_role"]["Mio"].clone();
        if mio["connections"] == json!([]) {
            return mio;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the relay is still listed: {mio}"
        );
        // A listing is cheap; the relay's end is observed on the next one.
        actix_web::rt::task::yield_now().await;
    }
}

/// A fake model, a server whose Mio relays to it, and the SDK app connected through the relay.
async fn one_relay() -> (FakeRealtime, TestApp, SdkApp) {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let app = relay_app(&fake, &[], Dialect::Openai, |_| {}).await;
    let mut sdk = SdkApp::start().await;
    sdk.connect_ok(&base(&app), json!({"character": "Mio"}))
        .await;
    fake.wait_connections(1).await;
    (fake, app, sdk)
}

#[actix_web::test]
async fn an_app_that_stops_reading_is_closed_not_buffered() {
    let (fake, _app, mut sdk) = one_relay().await;

    // The app reads nothing now. The model streams audio deltas until the relay gives up on
    // the app, which the model sees as the relay's close. Bounded: socket buffers plus the
    // relay's queue are far below what is offered.
    let chunk = "A".repeat(64 * 1024);
    let most = 16 * MAX_APP_QUEUE_BYTES / chunk.len();
    let mut pushed = 0;
    while fake.closes().is_empty() {
        assert!(
            pushed < most,
            "the relay still takes audio after {pushed} deltas of 64 KiB"
        );
        let delta = json!({"type": "response.output_audio.delta", "event_id": format!("srv_{pushed}"),
                           "response_id": "r", "item_id": "i", "output_index": 0,
                           "content_index": 0, "delta": chunk});
        if !fake.try_push(delta).await {
            break;
        }
        pushed += 1;
    }
    fake.wait_until("the relay's close", |f| {
        (!f.closes().is_empty()).then_some(())
    })
    .await;
    let reason =
        format!("app is not reading: more than {MAX_APP_QUEUE_BYTES} bytes were waiting for it");
    assert_eq!(fake.closes(), [(1008, reason.clone())]);
    // The app, reading again, finds what the socket held, then the close and its reason.
    let (code, got, skipped) = sdk.wait_close().await;
    assert_eq!((code, got), (json!(1008), json!(reason)));
    assert!(
        (skipped as usize) < pushed,
        "the relay dropped what it held: {skipped} of {pushed}"
    );
}

#[actix_web::test]
async fn a_model_that_stops_reading_is_dropped_and_the_app_told_why() {
    let (fake, app, mut sdk) = one_relay().await;

    // The model reads nothing more. The app streams its microphone until the relay gives up
    // on the model. Bounded: socket buffers plus the relay's queue are far below what is
    // offered.
    fake.set_deaf();
    let audio = "A".repeat(64 * 1024);
    let most = 16 * MAX_UPSTREAM_QUEUE_BYTES / audio.len();
    let mut sent = 0;
    loop {
        let append = json!({"type": "input_audio_buffer.append", "event_id": format!("app_{sent}"),
                            "audio": audio});
        let answer = sdk
            .ask(json!({"cmd": "send_raw", "text": append.to_string()}))
            .await;
        if answer != json!({"ok": true}) {
            break;
        }
        sent += 1;
        assert!(
            sent < most,
            "the relay still takes audio after {sent} appends of 64 KiB"
        );
    }
    let (code, reason, _) = sdk.wait_close().await;
    assert_eq!(
        (code, reason),
        (
            json!(1014),
            json!(format!(
                "model is not reading: more than {MAX_UPSTREAM_QUEUE_BYTES} bytes were waiting for it"
            ))
        )
    );
    // The relay is gone from the character's connections.
    loop_until_no_connections(&app).await;
}

#[actix_web::test]
async fn one_event_larger_than_the_queue_bound_reaches_a_model_that_reads() {
    let (fake, _app, mut sdk) = one_relay().await;
    // Events may be up to 16 MiB; one of 12 MiB is more than the 8 MiB that may wait for the
    // model, and still goes: the model is reading.
    let audio = "A".repeat(MAX_UPSTREAM_QUEUE_BYTES + (4 << 20));
    let append =
        json!({"type": "input_audio_buffer.append", "event_id": "app_big", "audio": audio})
            .to_string();
    sdk.send_raw(&append).await;
    fake.wait_until("the app's large event", |f| {
        f.texts().contains(&append).then_some(())
    })
    .await;
    // The relay is still open both ways.
    let delta = r#"{"type":"response.output_audio.delta","event_id":"srv_after","response_id":"r0","item_id":"i0","output_index":0,"content_index":0,"delta":"AAAA"}"#;
    fake.push_text(delta).await;
    // After the model's `session.created`.
    let mut frames = Vec::new();
    while frames.len() < 2 && frames.last() != Some(&json!(delta)) {
        frames.push(sdk.recv().await["text"].clone());
    }
    assert_eq!(frames.last(), Some(&json!(delta)), "{frames:?}");
    assert!(fake.closes().is_empty(), "{:?}", fake.closes());
}

#[actix_web::test]
async fn qwen_and_glm_relays_merge_tools_in_their_shapes() {
    for dialect in [Dialect::Qwen, Dialect::Glm] {
        let fake = FakeRealtime::start(AckMode::Immediate).await;
        let weather = callback();
        let app = relay_app(&fake, &[], dialect, |_| {}).await;
        let mut sdk = SdkApp::start().await;
        sdk.connect_ok(&base(&app), json!({"character": "Mio"}))
            .await;
        fake.wait_connections(1).await;
        let (own, registered) = match dialect {
            Dialect::Qwen => (
                json!({"type": "function", "function": {"name": "app_clock", "parameters": {}}}),
                json!({"type": "function", "function": {"name": "get_weather",
                    "description": "get_weather tool",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}),
            ),
            _ => (
                json!({"type": "function", "name": "app_clock", "parameters": {}}),
                registered_view("get_weather"),
            ),
        };
        // These dialects' apps write their events themselves.
        let update = json!({"type": "session.update", "event_id": "app_1",
                            "session": {"modalities": ["text", "audio"], "tools": [own]}});
        sdk.send_raw(&update.to_string()).await;
        let first = fake.nth_update(1).await;
        assert_eq!(
            first, update,
            "{dialect:?}: nothing registered yet, nothing merged"
        );

        let (status, body) = app
            .register(&tool_body("get_weather", &weather.url("/cb"), "plugin:w"))
            .await;
        assert_eq!(
            (status, &body["affected_roles"]),
            (200, &json!(["Mio"])),
            "{body}"
        );
        let ours = fake.nth_update(2).await;
        let expected = match dialect {
            Dialect::Qwen => {
                json!({"tools": [own, registered], "enable_search": false})
            }
            _ => json!({"tools": [own, registered], "turn_detection": {"type": "server_vad"}}),
        };
        assert_eq!(ours["session"], expected, "{dialect:?}");

        sdk.send_raw(&update.to_string()).await;
        let merged = fake.nth_update(3).await;
        assert_eq!(
            merged["session"]["tools"],
            json!([own, registered]),
            "{dialect:?}"
        );

        fake.push_call("r1", "c1", "get_weather").await;
        fake.wait_for("the answer", |events| {
            events
                .iter()
                .any(|e| e["type"] == "response.create")
                .then_some(())
        })
        .await;
        assert_eq!(weather.received().len(), 1, "{dialect:?}");
    }
}

#[actix_web::test]
async fn every_relay_is_an_active_session_and_any_failure_fails_the_character() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let app = relay_app(&fake, &["Lanlan"], Dialect::Openai, |s| {
        s.sync_timeout = Duration::from_millis(500)
    })
    .await;
    let (mut one, mut two) = (SdkApp::start().await, SdkApp::start().await);
    one.connect_ok(&base(&app), json!({"character": "Mio"}))
        .await;
    two.connect_ok(&base(&app), json!({"character": "Mio"}))
        .await;
    fake.wait_connections(2).await;
    let (status, body) = app
        .register(&tool_body("a", "http://127.0.0.1:9/cb", "plugin:w"))
        .await;
    assert_eq!(status, 200);
    assert_eq!(body["affected_roles"], json!(["Mio", "Lanlan"]));
    assert_eq!(
        fake.events_of("session.update").len(),
        2,
        "one update per relay"
    );

    fake.set_mode(AckMode::Never);
    let (status, body) = app
        .register(&tool_body("b", "http://127.0.0.1:9/cb", "plugin:w"))
        .await;
    let timeout =
        "model session did not acknowledge the tool update (no session.updated within 0.5 s)";
    assert_eq!(
        (status, body),
        (
            200,
            json!({"ok": true, "registered": "b", "affected_roles": ["Lanlan"], "failed_roles": [
                {"role": "Mio", "error": format!("relay session: {timeout}; relay session: {timeout}")}]})
        )
    );
}

#[actix_web::test]
async fn relay_requests_that_cannot_be_served_get_clear_answers() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!(
        "ws://127.0.0.1:{}/v1/realtime",
        dead.local_addr().unwrap().port()
    );
    drop(dead);
    let mut config = settings(&["Mio", "Rin", "Lanlan"]);
    let mut session = SessionSettings::new(&fake.url, Dialect::Openai);
    session.mode = SessionMode::Relay;
    config.characters[0].session = Some(session);
    config.characters[1].session = Some(SessionSettings::new(&dead_url, Dialect::Openai));
    let app = spawn_app_with(config).await;

    // The SDK surfaces the refused handshake's status.
    let mut sdk = SdkApp::start().await;
    let refused = sdk
        .connect(&base(&app), json!({"character": "Nobody"}))
        .await;
    assert_eq!(refused["status"], 404, "{refused}");

    let handshake = async |query: &str| {
        let result = awc::Client::new()
            .ws(format!("ws://{}/v1/realtime{query}", app.addr))
            .connect()
            .await;
        match result {
            Err(awc::error::WsClientError::InvalidResponseStatus(status)) => status.as_u16(),
            Ok((response, _)) => response.status().as_u16(),
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(handshake("?character=Nobody").await, 404);
    assert_eq!(handshake("?character=Lanlan").await, 422);
    assert_eq!(handshake("").await, 422);
    assert_eq!(handshake("?character=Rin").await, 502);
    assert_eq!(handshake("?character=Mio").await, 101);

    // The bodies, as every route answers.
    let (status, body) = app.get("/v1/realtime?character=Mio").await;
    assert_eq!(
        (status, body),
        (
            400,
            json!({"ok": false, "detail": "/v1/realtime is a websocket endpoint: WebSocket upgrade is expected"})
        )
    );
    // A websocket handshake written by hand: awc will not send `Connection: upgrade` itself.
    let upgrade = async |path: &str, host: &str| {
        let head = format!(
            "GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
        );
        let response = raw_exchange_async(app.addr, head.into_bytes()).await;
        (response.status, response.json())
    };
    let host = app.host();
    assert_eq!(
        upgrade("/v1/realtime", &host).await,
        (
            422,
            json!({"ok": false, "detail": [{"loc": ["query", "character"], "type": "value_error",
                "msg": "more than one character has a session (Mio, Rin): name one with ?character=NAME"}]})
        )
    );
    let (status, body) = upgrade("/v1/realtime?character=Lanlan", &host).await;
    assert_eq!(
        (status, body["detail"][0]["msg"].clone()),
        (
            422,
            json!("character Lanlan has no [character.session]: a relay needs its model's URL")
        )
    );
    let (status, body) = upgrade("/v1/realtime?character=Nobody", &host).await;
    assert_eq!(
        (status, body),
        (404, json!({"ok": false, "detail": "unknown role: Nobody"}))
    );
    let (status, body) = upgrade("/v1/realtime?character=Rin", &host).await;
    assert_eq!(status, 502);
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.starts_with(&format!("could not connect to the model at {dead_url}: ")),
        "{detail}"
    );
    let (status, body) = upgrade("/v1/realtime?character=Mio", "evil.example").await;
    assert_eq!(
        (status, body),
        (
            403,
            json!({"ok": false, "detail": "Host header \"evil.example\" is not a loopback name or address"})
        )
    );
}
