//! Live model sessions against the fake realtime server: acknowledged sync, dialects, merging,
//! reconnects, the model's function calls, the runaway guard and `/api/sessions`.

use std::rc::Rc;
use std::time::Duration;

use runtime_tools::JoinSession;
use runtime_tools::embedding::{
    CloseSession, ConnectionKind, ConnectionReport, ConnectionState, Conversation, SessionHandle,
    SessionStatus, SyncError, SyncTools, rfc3339_now,
};
use runtime_tools::limits::MAX_UPSTREAM_QUEUE_BYTES;
use runtime_tools::{Dialect, SessionSettings};
use serde_json::{Value, json};

use crate::callback_server::{CallbackServer, Reply};
use crate::deaf_model::DeafModel;
use crate::fake_realtime::{AckMode, EVENT_DEADLINE, FakeRealtime, update_tool_names};
use crate::helpers::{TestApp, tool_body};
use crate::schema::validate_client_events;

async fn app_with_session_at(url: &str, tweak: impl FnOnce(&mut SessionSettings)) -> TestApp {
    crate::helpers::app_with_session(url, &[], Dialect::Openai, tweak).await
}

async fn app_with_session(
    fake: &FakeRealtime,
    others: &[&str],
    dialect: Dialect,
    tweak: impl FnOnce(&mut SessionSettings),
) -> TestApp {
    crate::helpers::app_with_session(&fake.url, others, dialect, tweak).await
}

/// A callback server for the tools the model calls: `/ok/get_weather` answers an output,
/// `/err/lookup` a tool-level error.
fn callback() -> CallbackServer {
    let server = CallbackServer::start();
    server.route(
        "/ok/get_weather",
        Reply::output(json!({"temperature_c": 28})),
    );
    server.route("/ok/alive", Reply::output(json!({"temperature_c": 28})));
    server.route(
        "/err/lookup",
        Reply::json(json!({"error": "location not found", "is_error": true})),
    );
    server
}

fn received_bodies(server: &CallbackServer) -> Vec<Value> {
    server.received().iter().map(|r| r.json()).collect()
}

/// Registers a global `plugin:w` tool whose callback is never called in that test.
async fn register(app: &TestApp, name: &str) -> (u16, Value) {
    app.register(&tool_body(name, "http://127.0.0.1:9/cb", "plugin:w"))
        .await
}

/// A `response.function_call_arguments.done` the model sends for one call.
pub fn call_event(response_id: &str, call_id: &str, name: &str, arguments: &str) -> Value {
    json!({"type": "response.function_call_arguments.done", "event_id": format!("srv_{call_id}"),
           "response_id": response_id, "item_id": format!("item_{call_id}"), "output_index": 0,
           "call_id": call_id, "name": name, "arguments": arguments})
}

pub fn response_done(response_id: &str, calls: &[(&str, &str, &str)]) -> Value {
    let output: Vec<Value> = calls
        .iter()
        .map(|(call_id, name, arguments)| {
            json!({"type": "function_call", "id": format!("item_{call_id}"),
              "call_id": call_id, "name": name, "arguments": arguments, "status": "completed"})
        })
        .collect();
    json!({"type": "response.done", "event_id": format!("srv_done_{response_id}"),
           "response": {"id": response_id, "status": "completed", "output": output}})
}

#[actix_web::test]
async fn register_returns_after_the_acknowledged_update_that_carries_the_tool() {
    let fake = FakeRealtime::start(AckMode::Delay(Duration::from_millis(300))).await;
    let app = app_with_session(&fake, &[], Dialect::Openai, |_| {}).await;
    let first = fake.nth_update(1).await;
    assert_eq!(first["session"], json!({"type": "realtime", "tools": []}));

    let (status, body) = register(&app, "get_weather").await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"ok": true, "registered": "get_weather", "affected_roles": ["Mio"], "failed_roles": []})
    );
    // The answer came only after the fake acknowledged the update carrying the tool.
    assert!(fake.acks_sent() >= 2, "acks sent: {}", fake.acks_sent());
    let update = fake.update_with_tools(&["get_weather"]).await;
    assert_eq!(
        update["session"],
        json!({"type": "realtime", "tool_choice": "auto", "tools": [{
            "type": "function", "name": "get_weather", "description": "get_weather tool",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]})
    );
}

#[actix_web::test]
async fn reconnect_sends_the_tools_again() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let app = app_with_session(&fake, &[], Dialect::Openai, |_| {}).await;
    fake.nth_update(1).await;
    let (status, _) = register(&app, "get_weather").await;
    assert_eq!(status, 200);
    let before = fake.events_of("session.update").len();

    fake.drop_connection().await;
    fake.wait_connections(2).await;
    let after = fake.nth_update(before + 1).await;
    assert_eq!(update_tool_names(&after), ["get_weather"]);
}

#[actix_web::test]
async fn unacknowledged_update_fails_the_character_but_keeps_the_change() {
    let fake = FakeRealtime::start(AckMode::Never).await;
    let app = app_with_session(&fake, &[], Dialect::Openai, |s| {
        s.sync_timeout = Duration::from_millis(500)
    })
    .await;
    fake.nth_update(1).await;
    let (status, body) = register(&app, "get_weather").await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"ok": false, "registered": "get_weather", "affected_roles": [],
               "failed_roles": [{"role": "Mio", "error": "model session did not acknowledge the tool update (no session.updated within 0.5 s)"}],
               "error": "no role accepted the registration"})
    );
    assert_eq!(
        app.tool_names(Some("Mio")).await,
        json!({"Mio": ["get_weather"]})
    );
}

#[actix_web::test]
async fn error_event_fails_the_character_with_the_provider_message() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let app = app_with_session(&fake, &["Lanlan"], Dialect::Openai, |_| {}).await;
    fake.nth_update(1).await;
    fake.set_mode(AckMode::Error(
        "Invalid schema for function 'get_weather'".into(),
    ));
    let (status, body) = register(&app, "get_weather").await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"ok": true, "registered": "get_weather", "affected_roles": ["Lanlan"],
               "failed_roles": [{"role": "Mio", "error": "model session refused the tool update: Invalid schema for function 'get_weather' (invalid_value)"}]})
    );
}

#[actix_web::test]
async fn qwen_and_glm_dialect_shapes() {
    for (dialect, expected) in [
        (
            Dialect::Qwen,
            json!({"enable_search": false, "tools": [{"type": "function", "function": {
                "name": "get_weather", "description": "get_weather tool",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]}),
        ),
        (
            Dialect::Glm,
            json!({"turn_detection": {"type": "server_vad"}, "tools": [{"type": "function",
                "name": "get_weather", "description": "get_weather tool",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]}),
        ),
    ] {
        let fake = FakeRealtime::start(AckMode::Immediate).await;
        let app = app_with_session(&fake, &[], dialect, |_| {}).await;
        fake.nth_update(1).await;
        let (status, _) = register(&app, "get_weather").await;
        assert_eq!(status, 200);
        let update = fake.update_with_tools(&["get_weather"]).await;
        assert_eq!(update["session"], expected, "{dialect:?}");
    }
}

#[actix_web::test]
async fn changes_during_an_update_merge_into_the_next_one() {
    let fake = FakeRealtime::start(AckMode::Held).await;
    let app = Rc::new(
        app_with_session(&fake, &[], Dialect::Openai, |s| {
            s.sync_timeout = Duration::from_secs(30)
        })
        .await,
    );
    fake.nth_update(1).await;
    fake.release_acks(1);
    fake.wait_for("the first acknowledgement", |_| {
        (fake.acks_sent() >= 1).then_some(())
    })
    .await;

    let register = |name: &'static str| {
        let app = app.clone();
        actix_web::rt::spawn(async move {
            app.register(&tool_body(name, "http://127.0.0.1:9/cb", "plugin:w"))
                .await
        })
    };
    let first = register("a");
    fake.update_with_tools(&["a"]).await;
    let rest: Vec<_> = ["b", "c", "d"].into_iter().map(register).collect();
    // All four changes are in the registry while the update for "a" is still unacknowledged.
    let deadline = tokio::time::Instant::now() + EVENT_DEADLINE;
    while sorted_names(&app.tool_names(Some("Mio")).await["Mio"]) != ["a", "b", "c", "d"] {
        assert!(
            tokio::time::Instant::now() < deadline,
            "changes never reached the registry"
        );
        actix_web::rt::task::yield_now().await;
    }
    assert!(
        !first.is_finished(),
        "a change returned before its update was acknowledged"
    );

    fake.release_acks(10);
    for handle in std::iter::once(first).chain(rest) {
        let (status, body) = handle.await.unwrap();
        assert_eq!((status, body["ok"].clone()), (200, json!(true)), "{body}");
    }
    let updates = fake.events_of("session.update");
    // The initial update, then "a", then at most two more for the three merged changes.
    assert!(
        updates.len() <= 4,
        "{} updates for 4 changes: merging failed",
        updates.len()
    );
    let mut last = update_tool_names(updates.last().unwrap());
    last.sort();
    assert_eq!(last, ["a", "b", "c", "d"]);
}

fn sorted_names(names: &Value) -> Vec<String> {
    let mut names: Vec<String> = names
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|n| n.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

#[actix_web::test]
async fn model_calls_reach_the_callback_and_are_answered() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let callback = callback();
    let app = app_with_session(&fake, &[], Dialect::Openai, |_| {}).await;
    fake.nth_update(1).await;
    for (name, path) in [
        ("get_weather", "/ok/get_weather"),
        ("lookup", "/err/lookup"),
    ] {
        let (status, _) = app
            .register(&tool_body(name, &callback.url(path), "plugin:w"))
            .await;
        assert_eq!(status, 200);
    }

    // One response with two parallel calls: one succeeds, one is a tool-level error.
    let raw = "{\"city\": \"Tokyo\"}";
    fake.push(call_event("resp_1", "call_1", "get_weather", raw))
        .await;
    fake.push(call_event("resp_1", "call_2", "lookup", "{\"q\":1}"))
        .await;
    fake.push(response_done(
        "resp_1",
        &[
            ("call_1", "get_weather", raw),
            ("call_2", "lookup", "{\"q\":1}"),
        ],
    ))
    .await;

    callback.wait_for_requests(2).await;
    let bodies = received_bodies(&callback);
    let weather = bodies.iter().find(|b| b["call_id"] == "call_1").unwrap();
    assert_eq!(
        weather,
        &json!({"name": "get_weather", "arguments": {"city": "Tokyo"}, "call_id": "call_1", "raw_arguments": raw})
    );
    let outputs = fake
        .wait_for("two function outputs and a response.create", |events| {
            let items: Vec<Value> = events
                .iter()
                .filter(|e| e["type"] == "conversation.item.create")
                .map(|e| e["item"].clone())
                .collect();
            let creates = events
                .iter()
                .filter(|e| e["type"] == "response.create")
                .count();
            (items.len() == 2 && creates == 1).then_some(items)
        })
        .await;
    let by_call = |id: &str| outputs.iter().find(|i| i["call_id"] == id).unwrap().clone();
    assert_eq!(
        by_call("call_1"),
        json!({"type": "function_call_output", "call_id": "call_1", "output": "{\"temperature_c\":28}"})
    );
    let error_output: Value =
        serde_json::from_str(by_call("call_2")["output"].as_str().unwrap()).unwrap();
    assert_eq!(
        error_output,
        json!({"error": "location not found", "is_error": true})
    );

    // A later response gets its own single response.create: none was sent twice for the first.
    fake.push(call_event("resp_2", "call_3", "get_weather", "{}"))
        .await;
    fake.push(response_done("resp_2", &[("call_3", "get_weather", "{}")]))
        .await;
    fake.wait_for("the second response.create", |events| {
        (events
            .iter()
            .filter(|e| e["type"] == "response.create")
            .count()
            >= 2)
            .then_some(())
    })
    .await;
    let events = fake.events();
    let last_output = events
        .iter()
        .rposition(|e| e["type"] == "conversation.item.create")
        .unwrap();
    let creates: Vec<usize> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| e["type"] == "response.create")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(creates.len(), 2);
    assert!(
        creates[1] > last_output,
        "response.create must follow the last answer"
    );

    // Unknown tool: answered with an error naming the available tools, without a callback.
    fake.push(call_event("resp_3", "call_4", "nope", "{}"))
        .await;
    fake.push(response_done("resp_3", &[("call_4", "nope", "{}")]))
        .await;
    let item = fake
        .wait_for("the unknown-tool answer", |events| {
            events
                .iter()
                .find(|e| {
                    e["type"] == "conversation.item.create" && e["item"]["call_id"] == "call_4"
                })
                .map(|e| e["item"].clone())
        })
        .await;
    let output: Value = serde_json::from_str(item["output"].as_str().unwrap()).unwrap();
    assert_eq!(
        output,
        json!({"error": "tool 'nope' is not registered; available tools: get_weather, lookup", "is_error": true})
    );
    assert_eq!(received_bodies(&callback).len(), 3);

    // Every event this session sent validates against the official GA client-event schema.
    let events = fake.events();
    let count = events.len();
    let report = validate_client_events(events).await;
    assert_eq!(report, Ok(format!("{count} client events valid\n")));
}

#[actix_web::test]
async fn schema_check_rejects_beta_shaped_events_naming_the_field() {
    // The beta shape: no `session.type`. A validator that could not run fails with another text.
    let beta = json!({"type": "session.update", "session": {"tools": [], "modalities": ["text"]}});
    let report = validate_client_events(vec![beta]).await;
    let error = report.expect_err("the validator must reject a beta session.update");
    assert!(
        error.starts_with("invalid client event 'session.update': ")
            && error.contains("\nsession.RealtimeSessionCreateRequest.type\n  Field required"),
        "{error}"
    );
    // The GA shape with a field only the beta had.
    let extra = json!({"type": "session.update", "session": {"type": "realtime", "tools": [], "modalities": ["text"]}});
    let report = validate_client_events(vec![extra]).await;
    assert_eq!(
        report,
        Err(
            "client event 'session.update' has fields the schema lacks: ['event.session.modalities']\n"
                .to_owned()
        )
    );
}

#[actix_web::test]
async fn runaway_guard_answers_without_calling_the_plugin() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let callback = callback();
    let app = app_with_session(&fake, &[], Dialect::Openai, |s| {
        s.max_tool_calls_per_window = 2;
        s.tool_call_window = Duration::from_secs(600);
    })
    .await;
    fake.nth_update(1).await;
    let (status, _) = app
        .register(&tool_body(
            "get_weather",
            &callback.url("/ok/get_weather"),
            "plugin:w",
        ))
        .await;
    assert_eq!(status, 200);
    let calls = [
        ("c1", "get_weather", "{}"),
        ("c2", "get_weather", "{}"),
        ("c3", "get_weather", "{}"),
    ];
    for (id, name, args) in calls {
        fake.push(call_event("r1", id, name, args)).await;
    }
    fake.push(response_done("r1", &calls)).await;
    let outputs = fake
        .wait_for("three answers and a response.create", |events| {
            let items: Vec<Value> = events
                .iter()
                .filter(|e| e["type"] == "conversation.item.create")
                .map(|e| e["item"].clone())
                .collect();
            let created = events.iter().any(|e| e["type"] == "response.create");
            (items.len() == 3 && created).then_some(items)
        })
        .await;
    let refused = outputs.iter().find(|i| i["call_id"] == "c3").unwrap();
    let text: Value = serde_json::from_str(refused["output"].as_str().unwrap()).unwrap();
    assert_eq!(
        text,
        json!({"error": "tool call limit reached: more than 2 calls within 600 s; the call was not run", "is_error": true})
    );
    assert_eq!(received_bodies(&callback).len(), 2);
}

#[actix_web::test]
async fn auto_removal_pushes_an_update_without_the_removed_tools() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let callback = callback();
    let app = app_with_session(&fake, &[], Dialect::Openai, |_| {}).await;
    fake.nth_update(1).await;
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("http://127.0.0.1:{}/cb", dead.local_addr().unwrap().port());
    drop(dead);
    app.register(&tool_body("alive", &callback.url("/ok/alive"), "plugin:w"))
        .await;
    app.register(&tool_body("dead", &dead_url, "plugin:w"))
        .await;
    fake.update_with_tools(&["alive", "dead"]).await;
    for _ in 0..3 {
        let (status, body) = app
            .post(
                "/api/tools/invoke",
                &json!({"name": "dead", "arguments": {}, "role": "Mio"}),
            )
            .await;
        assert_eq!(
            (status, body["is_error"].clone()),
            (200, json!(true)),
            "{body}"
        );
    }
    fake.update_with_tools(&["alive"]).await;
}

#[actix_web::test]
async fn sessions_route_reports_state_and_last_sync() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let app = app_with_session(&fake, &["Lanlan"], Dialect::Openai, |s| {
        s.api_key_env = Some("HOME".into())
    })
    .await;
    fake.nth_update(1).await;
    let (status, _) = register(&app, "get_weather").await;
    assert_eq!(status, 200);
    let (status, body) = app.get("/api/sessions").await;
    assert_eq!(status, 200);
    let mio = &body["sessions_by_role"]["Mio"];
    assert_eq!(mio["state"], "connected");
    assert_eq!(mio["acknowledged_tools"], 1);
    assert_eq!(mio["last_sync"]["ok"], true);
    assert!(
        mio["last_sync"]["at"].as_str().unwrap().ends_with('Z'),
        "{mio}"
    );
    let client = &mio["connections"][0];
    assert_eq!(
        (
            client["kind"].clone(),
            client["upstream"].clone(),
            client["state"].clone()
        ),
        (json!("client"), json!(fake.url), json!("connected"))
    );
    assert_eq!(client["last_sync"], mio["last_sync"]);
    assert_eq!(mio["connections"].as_array().unwrap().len(), 1);
    assert_eq!(
        body["sessions_by_role"]["Lanlan"],
        json!({"state": "none", "last_sync": null, "acknowledged_tools": 0, "connections": []})
    );
    let key = std::env::var("HOME").unwrap();
    assert_eq!(fake.authorizations(), [Some(format!("Bearer {key}"))]);
}

#[actix_web::test]
async fn removals_that_the_session_refuses_still_remove() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let app = app_with_session(&fake, &["Lanlan"], Dialect::Openai, |_| {}).await;
    fake.nth_update(1).await;
    for name in ["a", "b"] {
        let (status, _) = app
            .register(&tool_body(name, "http://127.0.0.1:9/cb", "plugin:w"))
            .await;
        assert_eq!(status, 200);
    }
    fake.set_mode(AckMode::Error("try again later".into()));
    let refused = json!([{"role": "Mio", "error": "model session refused the tool update: try again later (invalid_value)"}]);

    let (status, body) = app
        .post(
            "/api/tools/unregister",
            &json!({"name": "a", "role": "Mio"}),
        )
        .await;
    assert_eq!(status, 200);
    // Removed from the registry (the change stays), but not synced: partial success.
    assert_eq!(
        body,
        json!({"ok": true, "removed": true, "name": "a", "affected_roles": [], "failed_roles": refused})
    );
    let (status, body) = app
        .post(
            "/api/tools/clear",
            &json!({"source": "plugin:w", "role": null}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        body,
        json!({"ok": true, "removed": 3, "source": "plugin:w", "affected_roles": ["Lanlan"], "failed_roles": refused})
    );
    assert_eq!(app.tool_names(None).await, json!({"Mio": [], "Lanlan": []}));
}

#[actix_web::test]
async fn a_session_whose_api_key_variable_is_unset_is_refused() {
    use runtime_tools::{AddCharacter, RouterError};
    let app = crate::helpers::spawn_app(&["Lanlan"]).await;
    let mut session = SessionSettings::new("ws://127.0.0.1:9/v1/realtime", Dialect::Openai);
    session.api_key_env = Some("RUNTIME_TOOLS_TEST_UNSET_KEY".into());
    let refused = app
        .router
        .send(AddCharacter {
            name: "Mio".into(),
            session: Some(session),
            chat: None,
        })
        .await
        .unwrap();
    assert_eq!(
        refused,
        Err(RouterError::InvalidSession {
            character: "Mio".into(),
            reason: "environment variable RUNTIME_TOOLS_TEST_UNSET_KEY (session.api_key_env) is not set: environment variable not found".into(),
        })
    );
    assert_eq!(app.tool_names(None).await, json!({"Lanlan": []}));
}

#[actix_web::test]
async fn a_late_repeat_of_the_previous_acknowledgement_does_not_settle_the_next_update() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let app = Rc::new(
        app_with_session(&fake, &[], Dialect::Openai, |s| {
            s.sync_timeout = Duration::from_secs(30)
        })
        .await,
    );
    fake.nth_update(1).await;
    let (status, _) = register(&app, "a").await;
    assert_eq!(status, 200);
    let previous = fake.update_with_tools(&["a"]).await;

    fake.set_mode(AckMode::Held);
    let pending = {
        let app = app.clone();
        actix_web::rt::spawn(async move { register(&app, "b").await })
    };
    fake.update_with_tools(&["a", "b"]).await;
    // A late duplicate of the acknowledgement of ["a"], then a call whose answer proves the
    // session has read everything before it (frames are handled in order).
    fake.push(
        json!({"type": "session.updated", "event_id": "srv_dup", "session": previous["session"]}),
    )
    .await;
    fake.push(call_event("r9", "c9", "nope", "{}")).await;
    fake.wait_for("the answer to the probe call", |events| {
        events
            .iter()
            .any(|e| e["type"] == "conversation.item.create" && e["item"]["call_id"] == "c9")
            .then_some(())
    })
    .await;
    assert!(
        !pending.is_finished(),
        "a stale acknowledgement settled the update in flight"
    );

    fake.release_acks(1);
    let (status, body) = pending.await.unwrap();
    assert_eq!(
        (status, body["affected_roles"].clone()),
        (200, json!(["Mio"])),
        "{body}"
    );
}

#[actix_web::test]
async fn a_model_that_stops_reading_is_dropped_and_the_session_reconnects() {
    let model = DeafModel::start();
    let callback = CallbackServer::start();
    // Each answer is a 1 MiB output: what waits for the model grows by that much per call.
    callback.route("/big", Reply::output(json!("x".repeat(1 << 20))));
    let app = app_with_session_at(&model.url, |s| {
        s.max_tool_calls_per_window = 1000;
        s.sync_timeout = Duration::from_millis(200);
    })
    .await;
    model.wait_connections(1).await;
    // The model never acknowledges: the registration stays, the character is reported failed.
    let (status, _) = app
        .register(&tool_body("big", &callback.url("/big"), "plugin:w"))
        .await;
    assert_eq!(status, 200);

    // The model keeps calling and reads nothing. Bounded: socket buffers plus the session's
    // queue are far below what the answers add up to.
    let most = 4 * (MAX_UPSTREAM_QUEUE_BYTES >> 20);
    let mut calls = 0;
    while model.connections() < 2 {
        assert!(
            calls < most,
            "the session still answers a model that reads nothing after {calls} answers of 1 MiB"
        );
        // A push fails once the session has dropped the connection: the loop then ends on
        // the new connection.
        let _ = model.push_call(calls, "big").await;
        calls += 1;
        // One answer at a time, so the queue grows by one answer per round; the call may also
        // have come after the session gave up on this connection.
        tokio::select! {
            _ = callback.wait_for_requests(calls) => {}
            _ = model.wait_connections(2) => break,
        }
    }
    // The session gave up on that connection and connected again.
    model.wait_connections(2).await;
}

/// An application's in-process session that takes every list and stops when told.
struct Embedded;

impl actix::Actor for Embedded {
    type Context = actix::Context<Self>;
}

impl actix::Handler<SyncTools> for Embedded {
    type Result = Result<(), SyncError>;

    fn handle(&mut self, _: SyncTools, _: &mut Self::Context) -> Self::Result {
        Ok(())
    }
}

impl actix::Handler<SessionStatus> for Embedded {
    type Result = actix::MessageResult<SessionStatus>;

    fn handle(&mut self, _: SessionStatus, _: &mut Self::Context) -> Self::Result {
        actix::MessageResult(ConnectionReport {
            kind: ConnectionKind::Embedded,
            since: rfc3339_now(),
            upstream: None,
            state: ConnectionState::Connected,
            last_sync: None,
            acknowledged_tools: 0,
            calls_answered: 0,
            clashes: Vec::new(),
            offered_tools: 0,
            over_budget: false,
            gemini: None,
            running_calls: Vec::new(),
            conversation: Conversation::Idle,
        })
    }
}

impl actix::Handler<CloseSession> for Embedded {
    type Result = ();

    fn handle(&mut self, _: CloseSession, ctx: &mut Self::Context) {
        actix::ActorContext::stop(ctx);
    }
}

#[actix_web::test]
async fn a_character_lets_go_of_ended_sessions_when_the_next_one_joins() {
    use actix::Actor;

    let app = crate::helpers::spawn_app(&["Lanlan"]).await;
    let join = |session: &actix::Addr<Embedded>| {
        app.router.send(JoinSession {
            role: "Lanlan".into(),
            session: SessionHandle::embedded(session),
        })
    };
    // Sessions that come and go with no tool change or listing in between: the character must
    // not keep a handle (and what it holds) per session that ended.
    let mut ended = Vec::new();
    for _ in 0..3 {
        let session = Embedded.start();
        join(&session).await.unwrap().unwrap();
        session.send(CloseSession).await.unwrap();
        let deadline = tokio::time::Instant::now() + EVENT_DEADLINE;
        while session.connected() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the session did not stop"
            );
            tokio::task::yield_now().await;
        }
        // A weak recipient upgrades while anything still holds the actor's address (a weak
        // address would not: it also asks whether the actor runs).
        ended.push(session.downgrade().recipient::<SyncTools>());
    }
    let next = Embedded.start();
    join(&next).await.unwrap().unwrap();
    let held = ended.iter().filter(|s| s.upgrade().is_some()).count();
    assert_eq!(held, 0, "ended sessions still held by the character");
    // The one that joined is kept: it gets the next change.
    let listed = app.get("/api/sessions").await.1;
    let connections = &listed["sessions_by_role"]["Lanlan"]["connections"];
    assert_eq!(connections.as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(connections[0]["kind"], "embedded", "{listed}");
}
