//! A graceful stop (what SIGTERM and SIGINT do): calls still running when the grace period ends
//! are answered with a tool error saying the server is stopping — an invoke gets it as its
//! result, a model session as the call's output — instead of a closed connection; calls that
//! finish within the grace period are answered as usual. Then every relay is closed, both
//! ways, with 1001 "going away", and every attachment leaves its call: no app's connection
//! outlives the server, and none opens after.

use std::time::Duration;

use runtime_tools::faults::CloseAllConnections;
use runtime_tools::{Dialect, EventKind, SessionMode, SessionSettings};
use serde_json::{Value, json};

use crate::callback_server::{CallbackServer, Reply};
use crate::fake_realtime::{AckMode, FakeRealtime};
use crate::helpers::{
    TestApp, raw_exchange_async, settings, spawn_app_with, test_client, tool_body,
};
use crate::relay::assert_closed_by_server;
use crate::sdk_app::SdkApp;

const GRACE: Duration = Duration::from_secs(1);

const STOPPING: &str =
    "the server is stopping: the call did not finish within the 1 s grace period";

#[actix_web::test]
async fn an_invoke_still_running_at_the_end_of_the_grace_period_gets_a_tool_error() {
    let mut settings = settings(&["Lanlan"]);
    settings.stop_grace = GRACE;
    let app = spawn_app_with(settings).await;
    let slow = CallbackServer::with("/slow", Reply::Hang);
    slow.route(
        "/quick",
        Reply::after(Duration::from_millis(300), Reply::output(json!("done"))),
    );
    for (name, path) in [("slow", "/slow"), ("quick", "/quick")] {
        let (status, _) = app
            .register(&tool_body(name, &slow.url(path), "plugin:s"))
            .await;
        assert_eq!(status, 200);
    }
    let call = |name: &'static str| {
        let url = app.url("/api/tools/invoke");
        actix_web::rt::spawn(async move {
            let mut response = test_client()
                .post(url)
                .send_json(&json!({"name": name, "call_id": name}))
                .await
                .expect("answered, not closed");
            let status = response.status().as_u16();
            (
                status,
                response.json::<Value>().await.expect("a JSON answer"),
            )
        })
    };
    let (slow_call, quick_call) = (call("slow"), call("quick"));
    slow.wait_for_requests(2).await;

    app.stopper.stop().await;
    assert_eq!(
        slow_call.await.unwrap(),
        (
            200,
            json!({"ok": true, "name": "slow", "call_id": "slow", "output": null,
                   "is_error": true, "error": STOPPING})
        )
    );
    assert_eq!(
        quick_call.await.unwrap(),
        (
            200,
            json!({"ok": true, "name": "quick", "call_id": "quick", "output": "done",
                   "is_error": false})
        )
    );
}

#[actix_web::test]
async fn a_session_call_still_running_at_the_end_of_the_grace_period_gets_the_error_output() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let mut settings = settings(&["Mio"]);
    settings.stop_grace = GRACE;
    settings.characters[0].session = Some(SessionSettings::new(&fake.url, Dialect::Openai));
    let app = spawn_app_with(settings).await;
    fake.nth_update(1).await;
    let slow = CallbackServer::with("/slow", Reply::Hang);
    let (status, _) = app
        .register(&tool_body("slow", &slow.url("/slow"), "plugin:s"))
        .await;
    assert_eq!(status, 200);
    fake.push(
        json!({"type": "response.function_call_arguments.done", "response_id": "r1",
                     "call_id": "c1", "name": "slow", "arguments": "{}"}),
    )
    .await;
    slow.wait_for_requests(1).await;

    app.stopper.stop().await;
    let output = fake
        .wait_for("the stopping error as the call's output", |events| {
            events
                .iter()
                .find(|e| e["item"]["call_id"] == "c1")
                .map(|e| e["item"]["output"].clone())
        })
        .await;
    let output: Value = serde_json::from_str(output.as_str().unwrap()).unwrap();
    assert_eq!(output, json!({"error": STOPPING, "is_error": true}));
}

/// A fake model, a server whose Mio relays to it (with the short grace period), and the SDK app
/// connected through the relay.
async fn relayed_app() -> (FakeRealtime, TestApp, SdkApp) {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let mut settings = settings(&["Mio"]);
    settings.stop_grace = GRACE;
    let mut session = SessionSettings::new(&fake.url, Dialect::Openai);
    session.mode = SessionMode::Relay;
    settings.characters[0].session = Some(session);
    let app = spawn_app_with(settings).await;
    let mut sdk = SdkApp::start().await;
    sdk.connect_ok(&format!("ws://{}/v1", app.addr), json!({}))
        .await;
    fake.wait_connections(1).await;
    (fake, app, sdk)
}

#[actix_web::test]
async fn a_graceful_stop_closes_the_open_relays_going_away() {
    let (fake, app, mut sdk) = relayed_app().await;

    app.stopper.stop().await;
    assert_closed_by_server(&mut sdk, &fake).await;
}

/// The stop closes the relays first and stops the HTTP server only when that is answered: a
/// stopping worker ends every task on its thread, a relay's unsent close frame included. So
/// closing every relay answers only once each relay is gone. The fake model does not answer
/// the close, so the relay waits out its close grace: an answer that did not wait for it comes
/// while the relay is still open.
#[actix_web::test]
async fn closing_every_relay_answers_once_each_relay_is_gone() {
    let (fake, app, mut sdk) = relayed_app().await;
    let mut subscription = app.events.subscribe(Some("Mio".to_owned()), None);

    app.router
        .send(CloseAllConnections)
        .await
        .expect("the router answers");
    // Events are handed to subscribers as they are published: what the relay announced before
    // the answer is here now.
    let mut states = Vec::new();
    while let Ok(event) = subscription.events.try_recv() {
        if event.kind == EventKind::SessionState {
            states.push(String::from_utf8_lossy(event.frame()).into_owned());
        }
    }
    assert!(
        states.iter().any(|s| s.contains(r#""state":"closed""#)),
        "the close was answered while the relay was still open; its states so far: {states:#?}"
    );
    assert_closed_by_server(&mut sdk, &fake).await;
}

/// Once the stop has closed the relays and attachments, a relay or attachment that reaches its
/// character later is refused: its request gets a 503 that says why, and a model connection it
/// opened first is closed with a close frame, not cut when the server's workers end.
#[actix_web::test]
async fn relays_and_attachments_that_come_after_the_stop_closed_the_others_are_refused() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let mut settings = settings(&["Mio"]);
    let mut session = SessionSettings::new(&fake.url, Dialect::Openai);
    session.mode = SessionMode::Relay;
    settings.characters[0].session = Some(session);
    let app = spawn_app_with(settings).await;

    app.router
        .send(CloseAllConnections)
        .await
        .expect("the router answers");
    let refused = json!({"ok": false,
        "detail": "the server is stopping: no new relay, attachment or session is joined"});

    // A websocket handshake written by hand: awc will not send `Connection: upgrade` itself.
    let head = format!(
        "GET /v1/realtime?character=Mio HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\n\
         Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        app.host()
    );
    let response = raw_exchange_async(app.addr, head.into_bytes()).await;
    assert_eq!((response.status, response.json()), (503, refused.clone()));
    // The relay opened its model connection before it asked to join; it is closed, both ways.
    fake.wait_until("the refused relay's close upstream", |f| {
        (!f.closes().is_empty()).then_some(())
    })
    .await;
    assert_eq!(
        fake.closes(),
        [(
            1001,
            "the character's sessions were closed by the server".to_owned()
        )]
    );

    let url = format!("{}&call_id=rtc_1", fake.url);
    let (status, body) = app
        .post("/api/sessions/attach", &json!({"role": "Mio", "url": url}))
        .await;
    assert_eq!((status, body), (503, refused));
    // Nothing joined: the character lists no connection.
    let (_, sessions) = app.get("/api/sessions").await;
    assert_eq!(
        sessions["sessions_by_role"]["Mio"]["connections"],
        json!([])
    );
}

/// The stop makes every attachment leave its call: the call's session gets the attachment's
/// close frame (1000, as on a detach: the call itself goes on) before the stop returns.
#[actix_web::test]
async fn a_graceful_stop_makes_the_open_attachments_leave_their_calls() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let mut settings = settings(&["Mio"]);
    settings.stop_grace = GRACE;
    let app = spawn_app_with(settings).await;
    let url = format!("{}&call_id=rtc_1", fake.url);
    let (status, _) = app
        .post("/api/sessions/attach", &json!({"role": "Mio", "url": url}))
        .await;
    assert_eq!(status, 200);
    fake.wait_connections(1).await;

    app.stopper.stop().await;
    // The stop returned: the close frame was sent before it did.
    assert_eq!(fake.closes(), [(1000, String::new())]);
}
