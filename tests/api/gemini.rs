//! Gemini Live sessions (`kind = "gemini-live"`) against a fake of the API
//! ([`FakeGemini`]): tools in the setup, calls answered in one `toolResponse`, cancellation by
//! id, a registration while live moving the session to a new connection resumed from its
//! handle, a registration during a running call failing with its reason and moving after,
//! `goAway`, images and the runaway guard. Every message the server sends the fake is checked
//! against the official `google-genai` SDK's types.

use serde_json::{Value, json};

use crate::callback_server::{CallbackServer, Reply, register};
use crate::event_stream::open;
use crate::fake_gemini::{FakeGemini, Received, SetupMode, declared};
use crate::helpers::{TestApp, raw_exchange_async, settings, spawn_app_with, tool_body};
use runtime_tools::SessionSettings;

/// A server whose character Mio holds a Gemini Live session (client mode) on `fake`.
async fn gemini_app(fake: &FakeGemini, tweak: impl FnOnce(&mut SessionSettings)) -> TestApp {
    let mut settings = settings(&["Mio"]);
    let mut session = SessionSettings::gemini(Some(&fake.url), Some("gemini-test"));
    tweak(&mut session);
    settings.characters[0].session = Some(session);
    spawn_app_with(settings).await
}

/// Checks every message the server sent `fake` against the SDK's `LiveClientMessage`.
async fn assert_valid_for_the_sdk(fake: &FakeGemini) {
    let checked = crate::schema::validate_gemini_messages(fake.messages())
        .await
        .unwrap_or_else(|e| panic!("a message the server sent breaks the SDK's types: {e}"));
    assert!(checked.contains("client messages valid"), "{checked}");
}

/// The first setup, then the session made resumable.
async fn connected(fake: &FakeGemini) -> Received {
    let first = fake.nth_setup(1).await;
    fake.wait_until("a handle given", |f| (f.connections() > 0).then_some(()))
        .await;
    first
}

fn weather(callback: &CallbackServer) -> Value {
    tool_body("get_weather", &callback.url("/weather"), "plugin:weather")
}

#[actix_web::test]
async fn tools_go_in_the_setup_and_a_registration_moves_the_session_to_a_resumed_connection() {
    let fake = FakeGemini::start(SetupMode::Complete).await;
    let app = gemini_app(&fake, |_| {}).await;
    let first = connected(&fake).await;
    assert_eq!(first.connection, 0);
    assert_eq!(
        first.message,
        json!({"setup": {"model": "models/gemini-test", "sessionResumption": {}}})
    );

    let callback = CallbackServer::with("/weather", Reply::output(json!({"temp_c": 21})));
    let (status, answer) = app.register(&weather(&callback)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        (&answer["affected_roles"], &answer["failed_roles"]),
        (&json!(["Mio"]), &json!([]))
    );
    // Taken on a new connection that resumes the session, before the answer; the old one is
    // closed, and ends.
    let second = fake.nth_setup(2).await;
    assert_eq!(second.connection, 1);
    assert_eq!(declared(&second.message), ["get_weather"]);
    let handle = second.message["setup"]["sessionResumption"]["handle"]
        .as_str()
        .expect("the setup resumes the session");
    assert!(handle.starts_with("handle-0-"), "{handle}");
    assert_eq!(
        second.message["setup"]["tools"][0]["functionDeclarations"][0],
        json!({"name": "get_weather", "description": "get_weather tool",
               "parametersJsonSchema": {"type": "object", "properties": {"city": {"type": "string"}}}})
    );
    // The old connection ended: closed with 1000, and its TCP connection closed by the server
    // once the fake answered the close.
    fake.wait_ended(0, 1000).await;

    let (_, sessions) = app.get("/api/sessions").await;
    let client = &sessions["sessions_by_role"]["Mio"]["connections"][0];
    assert_eq!(client["acknowledged_tools"], json!(1), "{client}");
    assert_eq!(client["gemini"]["switches"], json!(1), "{client}");
    assert_eq!(client["gemini"]["refused"], json!(0), "{client}");
    assert!(client["gemini"]["handle_age_ms"].is_u64(), "{client}");
    assert_valid_for_the_sdk(&fake).await;
}

#[actix_web::test]
async fn calls_of_one_turn_are_answered_together_and_a_cancelled_one_is_not_answered() {
    let fake = FakeGemini::start(SetupMode::Complete).await;
    let app = gemini_app(&fake, |_| {}).await;
    connected(&fake).await;
    let callback = CallbackServer::with("/weather", Reply::output(json!({"temp_c": 21})));
    callback.route("/slow", Reply::HoldOpen);
    callback.route("/text", Reply::output(json!("sunny")));
    register(&app, weather(&callback)).await;
    register(
        &app,
        tool_body("slow", &callback.url("/slow"), "plugin:weather"),
    )
    .await;
    register(
        &app,
        tool_body("forecast", &callback.url("/text"), "plugin:weather"),
    )
    .await;
    fake.nth_setup(4).await;

    // One turn of three calls: one answer for all, an object as it is, any other output as
    // `result`, a tool the character does not have as `error`.
    fake.push_calls(&[
        ("c1", "get_weather", json!({"city": "Kyoto"})),
        ("c2", "forecast", json!({})),
        ("c3", "nope", json!({})),
    ])
    .await;
    let answer = fake.nth_tool_response(1).await;
    let responses = answer.message["toolResponse"]["functionResponses"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(responses.len(), 3, "{responses:?}");
    let by_id = |id: &str| responses.iter().find(|r| r["id"] == id).unwrap().clone();
    assert_eq!(
        by_id("c1"),
        json!({"id": "c1", "name": "get_weather", "response": {"temp_c": 21}})
    );
    assert_eq!(
        by_id("c2"),
        json!({"id": "c2", "name": "forecast", "response": {"result": "sunny"}})
    );
    let error = by_id("c3")["response"]["error"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        error.starts_with("tool 'nope' is not registered"),
        "{error}"
    );
    assert_eq!(
        callback.wait_for_requests(2).await[0].json()["arguments"],
        json!({"city": "Kyoto"})
    );

    // The provider cancels a running call: its callback's connection is closed, nothing is
    // sent for it, and a later turn is answered alone.
    let mut events = open(&app, "", None).await.expect("stream opens");
    fake.push_calls(&[("c4", "slow", json!({}))]).await;
    callback.wait_for_requests(3).await;
    fake.push(json!({"toolCallCancellation": {"ids": ["c4"]}}))
        .await;
    callback.wait_for_hang_ups(1).await;
    let cancelled = events
        .wait_for("tool.call", |d| d["call_id"] == "c4")
        .await
        .data;
    assert_eq!(
        (&cancelled["cancelled"], &cancelled["kind"]),
        (&json!(true), &json!("client"))
    );
    fake.push_calls(&[("c5", "forecast", json!({}))]).await;
    let next = fake.nth_tool_response(2).await;
    assert_eq!(
        next.message,
        json!({"toolResponse": {"functionResponses": [
            {"id": "c5", "name": "forecast", "response": {"result": "sunny"}}]}})
    );
    assert_valid_for_the_sdk(&fake).await;
}

#[actix_web::test]
async fn a_registration_during_a_running_call_fails_with_the_reason_and_the_session_moves_after() {
    let fake = FakeGemini::start(SetupMode::Complete).await;
    let app = gemini_app(&fake, |s| {
        s.sync_timeout = std::time::Duration::from_secs(1);
    })
    .await;
    connected(&fake).await;
    let callback = CallbackServer::with("/slow", Reply::after_gate(Reply::output(json!("done"))));
    register(&app, tool_body("slow", &callback.url("/slow"), "plugin:w")).await;
    fake.nth_setup(2).await;
    fake.push_calls(&[("c1", "slow", json!({}))]).await;
    callback.wait_for_requests(1).await;

    let (status, answer) = app
        .register(&tool_body("later", &callback.url("/later"), "plugin:w"))
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["failed_roles"],
        json!([{"role": "Mio",
                "error": "gemini session not resumable: a tool call is running"}])
    );
    assert_eq!(
        fake.connections(),
        2,
        "no connection opened while the call runs"
    );

    // The call ends; its answer goes on the connection in use, then the session moves.
    callback.open_gate();
    let answered = fake.nth_tool_response(1).await;
    assert_eq!(answered.connection, 1);
    let third = fake.nth_setup(3).await;
    assert_eq!(third.connection, 2);
    assert_eq!(declared(&third.message), ["slow", "later"]);
    let report = loop_until_switched(&app, 2).await;
    assert_eq!(report["gemini"]["refused"], json!(1), "{report}");
    assert_eq!(report["last_sync"]["ok"], json!(true), "{report}");
    assert_eq!(report["acknowledged_tools"], json!(2), "{report}");
    assert_valid_for_the_sdk(&fake).await;
}

/// The client connection's report once it has moved `switches` times (waiting on the
/// `session.state` events that announce it).
async fn loop_until_switched(app: &TestApp, switches: u64) -> Value {
    let mut events = open(app, "", None).await.expect("stream opens");
    loop {
        let (_, sessions) = app.get("/api/sessions").await;
        let client = sessions["sessions_by_role"]["Mio"]["connections"][0].clone();
        if client["gemini"]["switches"] == json!(switches)
            && client["last_sync"]["ok"] == json!(true)
        {
            return client;
        }
        events.wait_for("session.state", |_| true).await;
    }
}

#[actix_web::test]
async fn go_away_moves_the_session_to_a_resumed_connection_with_the_same_tools() {
    let fake = FakeGemini::start(SetupMode::Complete).await;
    let app = gemini_app(&fake, |_| {}).await;
    connected(&fake).await;
    let callback = CallbackServer::with("/weather", Reply::output(json!({"temp_c": 21})));
    register(&app, weather(&callback)).await;
    fake.nth_setup(2).await;
    fake.push_handle().await;
    fake.push(json!({"goAway": {"timeLeft": "5s"}})).await;
    let third = fake.nth_setup(3).await;
    assert_eq!(third.connection, 2);
    assert_eq!(declared(&third.message), ["get_weather"]);
    assert!(third.message["setup"]["sessionResumption"]["handle"].is_string());
    fake.wait_ended(1, 1000).await;
    // Calls go on on the new connection.
    fake.push_calls(&[("c1", "get_weather", json!({}))]).await;
    assert_eq!(fake.nth_tool_response(1).await.connection, 2);
    assert_valid_for_the_sdk(&fake).await;
}

#[actix_web::test]
async fn result_images_follow_the_tool_response_and_the_guard_answers_a_flood() {
    let fake = FakeGemini::start(SetupMode::Complete).await;
    let app = gemini_app(&fake, |s| {
        s.max_tool_calls_per_window = 2;
    })
    .await;
    connected(&fake).await;
    let png = crate::images::small_png();
    let callback = CallbackServer::with(
        "/cam",
        Reply::json(json!({"output": {"seen": true}, "is_error": false,
            "images": [{"data_b64": png, "mime": "image/png", "vision_prompt": "the door"}]})),
    );
    register(
        &app,
        tool_body("camera", &callback.url("/cam"), "plugin:cam"),
    )
    .await;
    fake.nth_setup(2).await;

    fake.push_calls(&[("c1", "camera", json!({}))]).await;
    let images = fake
        .wait_until("the images", |f| {
            f.messages()
                .into_iter()
                .position(|m| m.get("clientContent").is_some())
                .map(|i| (i, f.messages()))
        })
        .await;
    let (at, messages) = images;
    assert!(
        messages[at - 1].get("toolResponse").is_some(),
        "after the answer"
    );
    let parts = &messages[at]["clientContent"]["turns"][0]["parts"];
    assert_eq!(
        parts[0],
        json!({"text": "Image from tool camera (call_id c1): the door"})
    );
    assert_eq!(parts[1]["inlineData"]["mimeType"], json!("image/png"));
    assert_eq!(messages[at]["clientContent"]["turnComplete"], json!(true));

    // Two calls in the guard's window ran; the third is answered for the plugin.
    fake.push_calls(&[("c2", "camera", json!({})), ("c3", "camera", json!({}))])
        .await;
    let answer = fake.nth_tool_response(2).await;
    let responses = answer.message["toolResponse"]["functionResponses"]
        .as_array()
        .unwrap();
    let refused = responses.iter().find(|r| r["id"] == "c3").unwrap();
    let error = refused["response"]["error"].as_str().unwrap();
    assert!(error.starts_with("tool call limit reached"), "{error}");
    assert_valid_for_the_sdk(&fake).await;
}

#[actix_web::test]
async fn a_setup_the_provider_refuses_fails_the_registration_with_its_reason() {
    let fake = FakeGemini::start(SetupMode::Complete).await;
    let app = gemini_app(&fake, |_| {}).await;
    connected(&fake).await;
    fake.set_mode(SetupMode::Refuse(
        "function declaration `bad` is invalid".into(),
    ));
    let callback = CallbackServer::with("/weather", Reply::output(json!({})));
    let (_, answer) = app.register(&weather(&callback)).await;
    assert_eq!(
        answer["failed_roles"],
        json!([{"role": "Mio", "error": "model session refused the tool update: the new connection failed: function declaration `bad` is invalid"}])
    );
    // The session goes on on the connection it had.
    fake.push_calls(&[("c1", "get_weather", json!({}))]).await;
    assert_eq!(fake.nth_tool_response(1).await.connection, 0);
}

#[actix_web::test]
async fn a_connection_whose_first_setup_is_never_answered_is_given_up_and_the_session_connects_again()
 {
    let fake = FakeGemini::start(SetupMode::Held).await;
    let app = gemini_app(&fake, |s| {
        s.sync_timeout = std::time::Duration::from_secs(1)
    })
    .await;
    // The API never answers the first setup: after the sync timeout and a second, the
    // connection is given up and the session connects again (after the backoff).
    assert_eq!(fake.nth_setup(1).await.connection, 0);
    assert_eq!(fake.nth_setup(2).await.connection, 1);
    // Answered at last, the first connection finds itself gone; the second is the session's.
    fake.release_setups(2);
    fake.wait_until("the first connection ended", |f| {
        f.ended().contains(&0).then_some(())
    })
    .await;
    let mut events = open(&app, "", None).await.expect("stream opens");
    loop {
        let (_, sessions) = app.get("/api/sessions").await;
        let client = &sessions["sessions_by_role"]["Mio"]["connections"][0];
        if client["state"] == json!("connected") && client["last_sync"]["ok"] == json!(true) {
            break;
        }
        events.wait_for("session.state", |_| true).await;
    }
    assert_eq!(fake.open_connections(), [1]);
}

#[actix_web::test]
async fn the_key_goes_in_its_header_and_the_realtime_relay_and_attach_refuse_a_gemini_character() {
    let fake = FakeGemini::start(SetupMode::Complete).await;
    let app = gemini_app(&fake, |s| s.api_key_env = Some("HOME".into())).await;
    connected(&fake).await;
    assert_eq!(fake.keys(), [std::env::var("HOME").ok()]);

    let head = format!(
        "GET /v1/realtime?character=Mio HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\n\
         Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        app.host()
    );
    let response = raw_exchange_async(app.addr, head.into_bytes()).await;
    assert_eq!(
        (response.status, response.json()["detail"][0]["msg"].clone()),
        (
            422,
            json!(
                "character Mio's session is gemini-live: GET /v1/realtime serves openai-realtime sessions only"
            )
        )
    );
    let attach = json!({"role": "Mio", "url": "ws://127.0.0.1:9/v1/realtime?call_id=rtc_1"});
    let (status, body) = app.post("/api/sessions/attach", &attach).await;
    assert_eq!(
        (status, body["detail"][0]["msg"].clone()),
        (
            422,
            json!(
                "Value error, character Mio's session is gemini-live: attach joins openai-realtime calls only"
            )
        )
    );
}

#[actix_web::test]
async fn a_non_blocking_tool_is_declared_so_and_its_answer_carries_its_scheduling() {
    let fake = FakeGemini::start(SetupMode::Complete).await;
    let app = gemini_app(&fake, |_| {}).await;
    connected(&fake).await;
    let callback = CallbackServer::with("/weather", Reply::output(json!({"temp_c": 21})));
    callback.route(
        "/search",
        Reply::after_gate(Reply::json(
            json!({"output": {"flights": 3}, "scheduling": "silent"}),
        )),
    );
    register(&app, weather(&callback)).await;
    let mut search = tool_body("search", &callback.url("/search"), "plugin:travel");
    search["behavior"] = json!("non_blocking");
    register(&app, search).await;
    let setup = fake.nth_setup(3).await;
    let declarations = &setup.message["setup"]["tools"][0]["functionDeclarations"];
    assert_eq!(declarations[0].get("behavior"), None, "{declarations}");
    assert_eq!(
        declarations[1]["behavior"], "NON_BLOCKING",
        "{declarations}"
    );

    // One turn calls both: the blocking call's answer goes without waiting for the other.
    fake.push_calls(&[
        ("c1", "search", json!({})),
        ("c2", "get_weather", json!({})),
    ])
    .await;
    let first = fake.nth_tool_response(1).await;
    assert_eq!(
        first.message,
        json!({"toolResponse": {"functionResponses": [
            {"id": "c2", "name": "get_weather", "response": {"temp_c": 21}}]}})
    );

    // Its progress is a client content turn that asks for nothing.
    callback.wait_for_requests(2).await;
    let (status, answer) = app
        .post(
            "/api/tools/calls/c1/progress",
            &json!({"message": "Checking prices"}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let progress = fake
        .wait_until("the progress turn", |f| {
            f.messages()
                .into_iter()
                .find(|m| m.get("clientContent").is_some())
        })
        .await;
    assert_eq!(
        progress,
        json!({"clientContent": {"turns": [{"role": "user", "parts": [
            {"text": "Progress of the tool call search (call_id c1): Checking prices"}]}],
            "turnComplete": false}})
    );

    // The plugin answers: the call's own answer, with the scheduling it asked for.
    callback.open_gate();
    let late = fake.nth_tool_response(2).await;
    assert_eq!(
        late.message,
        json!({"toolResponse": {"functionResponses": [
            {"id": "c1", "name": "search", "response": {"flights": 3}, "scheduling": "SILENT"}]}})
    );

    // A plugin's context that asks for a reply completes its turn.
    let (status, answer) = app
        .post(
            "/api/sessions/context",
            &json!({"role": "Mio", "text": "The doorbell rang.", "respond": true}),
        )
        .await;
    assert_eq!((status, &answer["ok"]), (200, &json!(true)), "{answer}");
    let context = fake
        .wait_until("the context turn", |f| {
            f.messages()
                .into_iter()
                .filter(|m| m.get("clientContent").is_some())
                .nth(1)
        })
        .await;
    assert_eq!(context["clientContent"]["turnComplete"], true, "{context}");
    assert_valid_for_the_sdk(&fake).await;
}
