//! The Gemini relay (`mode = "relay"` of a `gemini-live` character): an app's Gemini Live
//! connection through the server, to a fake of the API ([`FakeGemini`]). The app is the
//! official `google-genai` SDK (tests/gemini_app.py) and, where a test must time what the app
//! sends, a raw websocket client. Every message the server sends the fake is checked against
//! the SDK's types.

use std::process::Command;

use actix_codec::Framed;
use awc::BoxedSocket;
use awc::ws::{Codec, Frame, Message};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};

use crate::callback_server::{CallbackServer, Reply, register};
use crate::chat_aimock::{Aimock, fixture};
use crate::child::LineChild;
use crate::fake_gemini::{BIDI_PATH, FakeGemini, SetupMode, declared, tool_response};
use crate::fake_realtime::EVENT_DEADLINE;
use crate::helpers::{TestApp, settings, spawn_app_with, tool_body};
use crate::python::{repo_file, venv_python};
use runtime_tools::{SessionMode, SessionSettings};

/// A server whose character Mio holds a Gemini Live session in relay mode on `fake`, with
/// `get_weather` registered.
async fn relay_app(fake: &FakeGemini) -> (TestApp, CallbackServer) {
    let mut settings = settings(&["Mio"]);
    let mut session = SessionSettings::gemini(Some(&fake.url), None);
    session.mode = SessionMode::Relay;
    settings.characters[0].session = Some(session);
    let app = spawn_app_with(settings).await;
    let callback = CallbackServer::with("/weather", Reply::output(json!({"temp_c": 21})));
    register(
        &app,
        tool_body("get_weather", &callback.url("/weather"), "plugin:weather"),
    )
    .await;
    (app, callback)
}

async fn assert_valid_for_the_sdk(fake: &FakeGemini) {
    let checked = crate::schema::validate_gemini_messages(fake.messages())
        .await
        .unwrap_or_else(|e| panic!("a message the server sent breaks the SDK's types: {e}"));
    assert!(checked.contains("client messages valid"), "{checked}");
}

/// The function responses of a `toolResponse`, by id.
fn responses(message: &Value) -> Vec<(String, Value)> {
    let response = tool_response(message).expect("a toolResponse");
    let list = response
        .get("functionResponses")
        .or_else(|| response.get("function_responses"))
        .and_then(Value::as_array)
        .expect("function responses");
    list.iter()
        .map(|r| (r["id"].as_str().unwrap().to_owned(), r["response"].clone()))
        .collect()
}

#[actix_web::test]
async fn the_sdk_app_talks_through_the_relay_and_a_registration_moves_the_session_unseen() {
    let fake = FakeGemini::start(SetupMode::Complete).await;
    let (app, _callback) = relay_app(&fake).await;
    let python = venv_python().await;
    let mut sdk = LineChild::spawn(
        Command::new(python)
            .arg(repo_file("tests/gemini_app.py"))
            .arg(&app.base)
            .arg("Mio"),
    );
    sdk.expect_line(r#"{"connected": true}"#).await;

    // The app's setup went up with the registered tool after its own, and resumption asked
    // for; the app got its setupComplete.
    let setup = fake.nth_setup(1).await.message;
    assert_eq!(declared(&setup), ["app_clock", "get_weather"]);
    assert_eq!(setup["setup"]["model"], json!("models/gemini-test"));
    assert_eq!(setup["setup"]["sessionResumption"], json!({}));

    // A mixed turn: the server answers its own call, the app its own.
    fake.push_calls(&[
        ("c1", "get_weather", json!({"city": "Kyoto"})),
        ("c2", "app_clock", json!({})),
    ])
    .await;
    sdk.expect_line(r#"{"tool_call": ["get_weather", "app_clock"]}"#)
        .await;
    let first = fake.nth_tool_response(1).await.message;
    let second = fake.nth_tool_response(2).await.message;
    let mut answered = responses(&first);
    answered.extend(responses(&second));
    answered.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        answered,
        [
            ("c1".to_owned(), json!({"temp_c": 21})),
            ("c2".to_owned(), json!({"time": "12:00"}))
        ]
    );

    // A registration while the app is connected: the session moves to a new connection
    // resumed from its handle; the app's socket stays open and sees none of it.
    let forecast = CallbackServer::with("/f", Reply::output(json!("sunny")));
    let (status, answer) = app
        .register(&tool_body(
            "forecast",
            &forecast.url("/f"),
            "plugin:weather",
        ))
        .await;
    assert_eq!(
        (status, &answer["failed_roles"]),
        (200, &json!([])),
        "{answer}"
    );
    let moved = fake.nth_setup(2).await;
    assert_eq!(moved.connection, 1);
    assert_eq!(
        declared(&moved.message),
        ["app_clock", "get_weather", "forecast"]
    );
    assert!(moved.message["setup"]["sessionResumption"]["handle"].is_string());
    fake.wait_ended(0, 1000).await;

    // The conversation goes on on the new connection.
    fake.push(
        json!({"serverContent": {"modelTurn": {"parts": [{"text": "done"}]},
                                       "turnComplete": true}}),
    )
    .await;
    sdk.expect_line(r#"{"turn_complete": "done"}"#).await;
    assert_eq!(sdk.wait_exit().await, Some(0));
    assert_valid_for_the_sdk(&fake).await;
}

/// An app's raw websocket to the Gemini relay.
async fn raw_app(app: &TestApp) -> Framed<BoxedSocket, Codec> {
    let (_, socket) = awc::Client::new()
        .ws(format!("ws://{}{BIDI_PATH}?character=Mio", app.addr))
        .connect()
        .await
        .expect("the relay answers");
    socket
}

/// The next message the app gets, as JSON (the API sends binary frames).
async fn next_message(socket: &mut Framed<BoxedSocket, Codec>) -> Value {
    let frame = tokio::time::timeout(EVENT_DEADLINE, socket.next())
        .await
        .expect("a message in time")
        .expect("the socket is open")
        .expect("a frame");
    match frame {
        Frame::Binary(bytes) | Frame::Text(bytes) => serde_json::from_slice(&bytes).unwrap(),
        other => panic!("not a message: {other:?}"),
    }
}

#[actix_web::test]
async fn what_the_app_sends_while_the_session_moves_is_held_and_goes_in_order_to_the_new_connection()
 {
    let fake = FakeGemini::start(SetupMode::Complete).await;
    let (app, _callback) = relay_app(&fake).await;
    let mut socket = raw_app(&app).await;
    let setup = json!({"setup": {"model": "models/gemini-test",
        "tools": [{"googleSearch": {}}, {"functionDeclarations": [{"name": "app_clock"}]}]}});
    socket
        .send(Message::Text(setup.to_string().into()))
        .await
        .unwrap();
    assert_eq!(
        next_message(&mut socket).await,
        json!({"setupComplete": {}})
    );
    let first = fake.nth_setup(1).await.message;
    assert_eq!(
        first["setup"]["tools"],
        json!([{"googleSearch": {}}, {"functionDeclarations": [
            {"name": "app_clock"},
            {"name": "get_weather", "description": "get_weather tool",
             "parametersJsonSchema": {"type": "object", "properties": {"city": {"type": "string"}}}}]}])
    );

    // The new connection's setup is held by the API; the app talks meanwhile.
    fake.set_mode(SetupMode::Held);
    let forecast = CallbackServer::with("/f", Reply::output(json!("sunny")));
    let registering = {
        let app_url = app.url("/api/tools/register");
        let body = tool_body("forecast", &forecast.url("/f"), "plugin:weather");
        actix_web::rt::spawn(async move {
            crate::helpers::test_client()
                .post(app_url)
                .send_json(&body)
                .await
                .unwrap()
                .status()
        })
    };
    fake.nth_setup(2).await;
    for turn in ["one", "two"] {
        let content = json!({"clientContent": {"turns": [{"role": "user", "parts": [{"text": turn}]}],
                                               "turnComplete": true}});
        socket
            .send(Message::Text(content.to_string().into()))
            .await
            .unwrap();
    }
    fake.release_setups(1);
    assert_eq!(registering.await.unwrap(), 200);
    let contents = fake
        .wait_until("the held messages", |f| {
            let held: Vec<_> = f
                .received()
                .into_iter()
                .filter(|r| r.message.get("clientContent").is_some())
                .collect();
            (held.len() == 2).then_some(held)
        })
        .await;
    assert_eq!(
        contents
            .iter()
            .map(|r| (
                r.connection,
                r.message["clientContent"]["turns"][0]["parts"][0]["text"].clone()
            ))
            .collect::<Vec<_>>(),
        [(1, json!("one")), (1, json!("two"))]
    );
    // The app saw nothing of the move: the next thing it gets is the model's.
    fake.push(json!({"serverContent": {"turnComplete": true}}))
        .await;
    assert_eq!(
        next_message(&mut socket).await,
        json!({"serverContent": {"turnComplete": true}})
    );
    // The old connection ended: closed, and its TCP connection closed once the API answered.
    fake.wait_ended(0, 1000).await;
    assert_valid_for_the_sdk(&fake).await;
}

#[actix_web::test]
async fn a_call_and_its_answer_with_aimock_as_the_gemini_live_api() {
    let aimock = Aimock::start(json!({"fixtures": [
        fixture("weather in Tokyo?", None,
                json!({"toolCalls": [{"name": "get_weather", "arguments": {"city": "Tokyo"}}]})),
        fixture("weather in Tokyo?", Some("sunny"), json!({"content": "It is sunny in Tokyo."})),
    ]}))
    .await;
    let upstream = format!("{}{BIDI_PATH}", aimock.root.replace("http://", "ws://"));
    let mut settings = settings(&["Mio"]);
    let mut session = SessionSettings::gemini(Some(&upstream), None);
    session.mode = SessionMode::Relay;
    settings.characters[0].session = Some(session);
    let app = spawn_app_with(settings).await;
    let callback = CallbackServer::with("/weather", Reply::output(json!("sunny")));
    register(
        &app,
        tool_body("get_weather", &callback.url("/weather"), "plugin:weather"),
    )
    .await;

    let mut socket = raw_app(&app).await;
    let setup = json!({"setup": {"model": "models/gemini-test"}});
    socket
        .send(Message::Text(setup.to_string().into()))
        .await
        .unwrap();
    assert_eq!(
        next_message(&mut socket).await,
        json!({"setupComplete": {}})
    );
    let ask = json!({"clientContent": {"turns": [{"role": "user",
        "parts": [{"text": "weather in Tokyo?"}]}], "turnComplete": true}});
    socket
        .send(Message::Text(ask.to_string().into()))
        .await
        .unwrap();
    // The model's call reaches the app as it came; the server answers it, and the model's
    // answer follows.
    let mut text = String::new();
    loop {
        let message = next_message(&mut socket).await;
        if let Some(call) = message.get("toolCall") {
            assert_eq!(call["functionCalls"][0]["name"], json!("get_weather"));
        }
        for part in message["serverContent"]["modelTurn"]["parts"]
            .as_array()
            .into_iter()
            .flatten()
        {
            text.push_str(part["text"].as_str().unwrap_or_default());
        }
        if message["serverContent"]["turnComplete"] == json!(true) && !text.is_empty() {
            break;
        }
    }
    assert_eq!(text, "It is sunny in Tokyo.");
    assert_eq!(
        callback.received()[0].json()["arguments"],
        json!({"city": "Tokyo"})
    );
}

/// A server whose character Mio relays to `fake` with a sync timeout of 1 s, and an app
/// connected to it that has sent its setup.
async fn app_set_up_with_a_1s_sync_timeout(
    fake: &FakeGemini,
) -> (TestApp, Framed<BoxedSocket, Codec>) {
    let mut settings = settings(&["Mio"]);
    let mut session = SessionSettings::gemini(Some(&fake.url), None);
    session.mode = SessionMode::Relay;
    session.sync_timeout = std::time::Duration::from_secs(1);
    settings.characters[0].session = Some(session);
    let app = spawn_app_with(settings).await;
    let mut socket = raw_app(&app).await;
    let setup = json!({"setup": {"model": "models/gemini-test"}});
    socket
        .send(Message::Text(setup.to_string().into()))
        .await
        .unwrap();
    (app, socket)
}

#[actix_web::test]
async fn a_move_whose_connection_never_takes_its_setup_is_given_up_and_the_held_messages_go_on() {
    let fake = FakeGemini::start(SetupMode::Complete).await;
    let (app, mut socket) = app_set_up_with_a_1s_sync_timeout(&fake).await;
    assert_eq!(
        next_message(&mut socket).await,
        json!({"setupComplete": {}})
    );

    // The API never answers the new connection's setup: the registration fails at its sync
    // timeout, and the move is given up after the connect bound and that timeout.
    fake.set_mode(SetupMode::Held);
    let callback = CallbackServer::with("/weather", Reply::output(json!({})));
    let (_, answer) = app
        .register(&tool_body(
            "get_weather",
            &callback.url("/weather"),
            "plugin:w",
        ))
        .await;
    assert_eq!(
        answer["failed_roles"],
        json!([{"role": "Mio",
                "error": "gemini session did not take the new tools (no setupComplete within 1 s)"}])
    );
    fake.nth_setup(2).await;
    let content = json!({"clientContent": {"turns": [{"role": "user", "parts": [{"text": "hi"}]}],
                                           "turnComplete": true}});
    socket
        .send(Message::Text(content.to_string().into()))
        .await
        .unwrap();
    let delivered = fake
        .wait_until("the held message", |f| {
            f.received()
                .into_iter()
                .find(|r| r.message.get("clientContent").is_some())
        })
        .await;
    assert_eq!(delivered.connection, 0, "on the connection still in use");
    // The connection given up ended: the API, answering its setup at last, finds it gone.
    fake.release_setups(1);
    fake.wait_until("the given-up connection ended", |f| {
        f.ended().contains(&1).then_some(())
    })
    .await;
    assert_eq!(fake.open_connections(), [0]);
}

#[actix_web::test]
async fn a_relay_whose_api_never_answers_the_apps_setup_is_closed_with_the_reason() {
    let fake = FakeGemini::start(SetupMode::Held).await;
    let (app, mut socket) = app_set_up_with_a_1s_sync_timeout(&fake).await;
    fake.nth_setup(1).await;
    // No setupComplete within the sync timeout and a second: the app is told why, and the
    // API's connection is closed (it ends once the API, answering at last, finds it gone).
    let frame = tokio::time::timeout(EVENT_DEADLINE, socket.next())
        .await
        .expect("a close in time")
        .expect("the socket is open")
        .expect("a frame");
    let Frame::Close(Some(reason)) = frame else {
        panic!("not a close: {frame:?}");
    };
    assert_eq!(
        (u16::from(reason.code), reason.description.as_deref()),
        (
            1014,
            Some("the model did not set the session up: no setupComplete within 2 s")
        )
    );
    fake.release_setups(1);
    fake.wait_until("the API's connection ended", |f| {
        f.ended().contains(&0).then_some(())
    })
    .await;
    let (_, sessions) = app.get("/api/sessions").await;
    assert_eq!(
        sessions["sessions_by_role"]["Mio"]["connections"],
        json!([]),
        "{sessions}"
    );
}
