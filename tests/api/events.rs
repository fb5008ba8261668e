//! `GET /api/events` over real sockets: `hello`, each event kind with its exact data, the role
//! filter, resuming with `Last-Event-ID` and the `reset` when that is no longer possible (or
//! would replay more than a subscriber's buffer holds), a stuck
//! subscriber dropped while registrations keep answering and other subscribers keep everything,
//! the keep-alive comment, and the loopback / `Host` / `Origin` guard.

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use runtime_tools::limits::{RING_CAPACITY, SUBSCRIBER_BUFFER};
use runtime_tools::{
    CallbackUrl, Dialect, RegisterTool, SessionSettings, Settings, ToolSpec, empty_parameters,
};
use serde_json::{Value, json};

use crate::callback_server::{CallbackServer, Reply};
use crate::event_stream::{EventReader, Frame, Received, open, open_with};
use crate::fake_realtime::{AckMode, FakeRealtime};
use crate::helpers::{TestApp, settings, spawn_app, spawn_app_with, tool_body};

async fn stream(app: &TestApp, query: &str) -> EventReader {
    open(app, query, None).await.expect("stream opens")
}

/// A tool that answers through `callback` for `role`.
fn tool_for(name: &str, callback: &CallbackServer, source: &str, role: Option<&str>) -> Value {
    let mut body = tool_body(name, &callback.url("/cb"), source);
    body["role"] = json!(role);
    body
}

/// The `tools.changed` data a change produces.
fn changed(op: &str, name: Value, source: Value, affected: &[&str]) -> Value {
    json!({"op": op, "name": name, "source": source, "affected_roles": affected,
           "failed_roles": []})
}

/// Checks `tool.call` data whose duration and trace cannot be known in advance; `behavior` is
/// `blocking` unless `expected` says otherwise, and `outcome` `ok` (or `cancelled` for a
/// cancelled call) unless it says otherwise.
pub fn assert_call(event: &Received, expected: Value) {
    assert_eq!(event.event, "tool.call");
    let mut data = event.data.clone();
    let trace = data["trace_id"].take();
    assert!(
        trace
            .as_str()
            .is_some_and(|t| t.len() == 32 && t.bytes().all(|b| b.is_ascii_hexdigit())),
        "trace_id {trace}"
    );
    data["trace_id"] = json!(null);
    let duration = data["duration_ms"].take();
    assert!(
        duration.as_f64().is_some_and(|d| d >= 0.0),
        "duration_ms {duration}"
    );
    data["duration_ms"] = json!(null);
    let mut expected = expected;
    expected["duration_ms"] = json!(null);
    if expected.get("behavior").is_none() {
        expected["behavior"] = json!("blocking");
    }
    if expected.get("outcome").is_none() {
        expected["outcome"] = match (&expected["cancelled"], &expected["is_error"]) {
            (Value::Bool(true), _) => json!("cancelled"),
            (_, Value::Bool(false)) => json!("ok"),
            _ => panic!("name the outcome of a failed call: {expected}"),
        };
    }
    expected["trace_id"] = json!(null);
    assert_eq!(data, expected);
}

/// Checks `session.state` data whose `since` (when the connection started) cannot be known in
/// advance: it must be an RFC 3339 time.
pub fn assert_state(event: &Received, expected: Value) {
    assert_eq!(event.event, "session.state");
    let mut data = event.data.clone();
    let since = data["since"].take();
    assert!(
        since
            .as_str()
            .is_some_and(|s| humantime::parse_rfc3339(s).is_ok()),
        "since {since}"
    );
    assert_eq!(data, expected);
}

/// The `session.state` data of a connection with `since` left out (see [`assert_state`]).
pub fn state(role: &str, kind: &str, upstream: &str, state: &str) -> Value {
    json!({"role": role, "kind": kind, "since": null, "upstream": upstream, "state": state,
           "last_sync": null, "acknowledged_tools": 0, "calls_answered": 0, "clashes": [],
           "offered_tools": 0, "over_budget": false, "running_calls": [], "conversation": "idle"})
}

#[actix_web::test]
async fn hello_then_every_kind_of_event_with_its_exact_data() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let callback = CallbackServer::with("/cb", Reply::output(json!({"t": 1})));
    let mut config = settings(&["Lanlan", "Mio"]);
    config.characters[1].session = Some(SessionSettings::new(&fake.url, Dialect::Openai));
    let app = spawn_app_with(config).await;
    fake.update_with_tools(&[]).await;

    // `Last-Event-ID: 0` replays everything so far: Mio's session starting up.
    let mut events = open(&app, "", Some("0")).await.expect("stream opens");
    assert_eq!(events.content_type.as_deref(), Some("text/event-stream"));
    let hello = events.expect("hello").await;
    assert_eq!(hello.id, 0);
    let instance = hello.data["instance_id"].as_str().unwrap().to_owned();
    assert_eq!(instance.len(), 32, "{hello:?}");
    assert!(instance.chars().all(|c| c.is_ascii_hexdigit()));
    assert!(
        humantime::parse_rfc3339(hello.data["started_at"].as_str().unwrap()).is_ok(),
        "{hello:?}"
    );
    let connecting = events.expect("session.state").await;
    assert_eq!(connecting.id, 1);
    assert_state(&connecting, state("Mio", "client", &fake.url, "connecting"));
    let connected = events.expect("session.state").await;
    assert_state(&connected, state("Mio", "client", &fake.url, "connected"));
    let synced = events
        .wait_for("session.state", |d| !d["last_sync"].is_null())
        .await;
    assert_eq!(synced.data["last_sync"]["ok"], json!(true));

    // A registration: the session syncs (session.state), then the change is announced.
    let (status, _) = app
        .register(&tool_for("get_weather", &callback, "plugin:w", None))
        .await;
    assert_eq!(status, 200);
    let sync = events.expect("session.state").await;
    assert_eq!(sync.data["acknowledged_tools"], json!(1));
    assert_eq!(sync.data["state"], json!("connected"));
    let register = events.expect("tools.changed").await;
    assert_eq!(register.id, sync.id + 1);
    assert_eq!(
        register.data,
        changed(
            "register",
            json!("get_weather"),
            json!("plugin:w"),
            &["Lanlan", "Mio"]
        )
    );

    // A call by hand, then one by the model.
    let (status, _) = app
        .post(
            "/api/tools/invoke",
            &json!({"name": "get_weather", "arguments": {"city": "Kyoto"}, "call_id": "call_hand"}),
        )
        .await;
    assert_eq!(status, 200);
    assert_call(
        &events.next_event().await,
        json!({"role": "Lanlan", "tool": "get_weather", "source": "plugin:w",
               "call_id": "call_hand", "caller": "invoke", "is_error": false, "cancelled": false}),
    );
    fake.push(
        json!({"type": "response.function_call_arguments.done", "event_id": "e1",
                     "response_id": "r1", "item_id": "i1", "output_index": 0,
                     "call_id": "call_model", "name": "get_weather", "arguments": "{}"}),
    )
    .await;
    assert_call(
        &events.next_event().await,
        json!({"role": "Mio", "tool": "get_weather", "source": "plugin:w",
               "call_id": "call_model", "caller": "model", "kind": "client", "is_error": false, "cancelled": false}),
    );
    // A model call of a tool the character does not have has no source and is an error.
    fake.push(
        json!({"type": "response.function_call_arguments.done", "event_id": "e2",
                     "response_id": "r2", "item_id": "i2", "output_index": 0,
                     "call_id": "call_ghost", "name": "ghost", "arguments": "{}"}),
    )
    .await;
    assert_call(
        &events.next_event().await,
        json!({"role": "Mio", "tool": "ghost", "source": null,
               "call_id": "call_ghost", "caller": "model", "kind": "client", "is_error": true, "cancelled": false,
               "outcome": "unknown_tool"}),
    );

    // Unregister and clear.
    let (status, _) = app
        .post(
            "/api/tools/unregister",
            &json!({"name": "get_weather", "role": "Lanlan"}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        events.expect("tools.changed").await.data,
        changed(
            "unregister",
            json!("get_weather"),
            json!("plugin:w"),
            &["Lanlan"]
        )
    );
    let (status, _) = app
        .post("/api/tools/clear", &json!({"source": "plugin:w"}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        events.expect("session.state").await.data["acknowledged_tools"],
        json!(0)
    );
    assert_eq!(
        events.expect("tools.changed").await.data,
        changed("clear", json!(null), json!("plugin:w"), &["Mio"])
    );

    // A dead plugin's tools removed automatically: three failed calls, then the removal.
    let dead = tool_body("gone", "http://127.0.0.1:9/cb", "plugin:dead");
    assert_eq!(app.register(&dead).await.0, 200);
    events
        .wait_for("tools.changed", |d| d["name"] == "gone")
        .await;
    for i in 0..3 {
        let call = json!({"name": "gone", "role": "Lanlan", "call_id": format!("c{i}")});
        assert_eq!(app.post("/api/tools/invoke", &call).await.0, 200);
    }
    let removed = events
        .wait_for("tools.changed", |d| d["op"] == "auto_removed")
        .await;
    assert_eq!(
        removed.data,
        changed(
            "auto_removed",
            json!(null),
            json!("plugin:dead"),
            &["Lanlan", "Mio"]
        )
    );
}

#[actix_web::test]
async fn a_change_a_session_failed_names_it_in_failed_roles() {
    let fake = FakeRealtime::start(AckMode::Error("no tools today".into())).await;
    let callback = CallbackServer::with("/cb", Reply::output(json!(1)));
    let mut config = settings(&["Mio"]);
    config.characters[0].session = Some(SessionSettings::new(&fake.url, Dialect::Openai));
    let app = spawn_app_with(config).await;
    fake.wait_connections(1).await;
    let mut events = stream(&app, "").await;
    events.expect("hello").await;
    assert_eq!(
        app.register(&tool_for("t", &callback, "s", None)).await.0,
        200
    );
    let change = events.wait_for("tools.changed", |_| true).await;
    assert_eq!(change.data["affected_roles"], json!([]));
    assert_eq!(change.data["failed_roles"][0]["role"], json!("Mio"));
    assert!(
        change.data["failed_roles"][0]["error"]
            .as_str()
            .unwrap()
            .contains("no tools today"),
        "{change:?}"
    );
}

#[actix_web::test]
async fn the_role_filter_keeps_that_roles_events() {
    let callback = CallbackServer::with("/cb", Reply::output(json!(1)));
    let app = spawn_app(&["Lanlan", "Mio"]).await;
    let mut mio = stream(&app, "?role=Mio").await;
    let mut everyone = stream(&app, "?role=").await;
    mio.expect("hello").await;
    everyone.expect("hello").await;

    for (name, role) in [("for_lanlan", Some("Lanlan")), ("for_mio", Some("Mio"))] {
        assert_eq!(
            app.register(&tool_for(name, &callback, "s", role)).await.0,
            200
        );
    }
    let call = json!({"name": "for_lanlan", "call_id": "c1"});
    assert_eq!(app.post("/api/tools/invoke", &call).await.0, 200);
    let call = json!({"name": "for_mio", "call_id": "c2"});
    assert_eq!(app.post("/api/tools/invoke", &call).await.0, 200);

    let mut seen = Vec::new();
    for _ in 0..4 {
        let e = everyone.next_event().await;
        seen.push((e.event, e.id));
    }
    assert_eq!(
        seen,
        [
            ("tools.changed".to_owned(), 1),
            ("tools.changed".to_owned(), 2),
            ("tool.call".to_owned(), 3),
            ("tool.call".to_owned(), 4)
        ]
    );
    let first = mio.next_event().await;
    assert_eq!((first.event.as_str(), first.id), ("tools.changed", 2));
    assert_eq!(first.data["name"], json!("for_mio"));
    let second = mio.next_event().await;
    assert_eq!((second.event.as_str(), second.id), ("tool.call", 4));

    assert_eq!(
        open(&app, "?role=Nobody", None).await.err(),
        Some((404, json!({"ok": false, "detail": "unknown role: Nobody"})))
    );
    let (status, body) = open(&app, "?role=Mio&role=Lanlan", None)
        .await
        .err()
        .unwrap();
    assert_eq!(status, 422);
    assert_eq!(body["detail"][0]["type"], json!("query_invalid"));
}

/// Registers `count` tools in-process (through the router, as fast as it goes).
async fn register_many(app: &TestApp, count: usize) {
    for i in 0..count {
        let tool = ToolSpec::remote(
            format!("t{i}"),
            "",
            empty_parameters(),
            "s",
            CallbackUrl::parse("http://127.0.0.1:9/cb").unwrap(),
            Duration::from_secs(1),
        );
        app.router
            .send(RegisterTool { tool, role: None })
            .await
            .expect("router answers")
            .expect("registered");
    }
}

#[actix_web::test]
async fn last_event_id_resumes_exactly_after_it() {
    let app = spawn_app(&["Lanlan"]).await;
    register_many(&app, 5).await;

    let mut resumed = open(&app, "", Some("2")).await.expect("stream opens");
    let hello = resumed.expect("hello").await;
    assert_eq!(hello.id, 2, "hello carries the resumption point");
    for id in 3..=5 {
        let e = resumed.expect("tools.changed").await;
        assert_eq!(
            (e.id, e.data["name"].clone()),
            (id, json!(format!("t{}", id - 1)))
        );
    }
    // Then live events, numbered on.
    register_many(&app, 1).await;
    assert_eq!(resumed.expect("tools.changed").await.id, 6);

    let mut current = open(&app, "", Some("6")).await.expect("stream opens");
    assert_eq!(current.expect("hello").await.id, 6);
    let mut fresh = stream(&app, "").await;
    assert_eq!(
        fresh.expect("hello").await.id,
        6,
        "hello names the newest id"
    );
    register_many(&app, 1).await;
    assert_eq!(current.next_event().await.id, 7, "nothing replayed twice");
    assert_eq!(fresh.next_event().await.id, 7);
}

#[actix_web::test]
async fn an_id_the_ring_no_longer_holds_gets_a_reset() {
    let app = spawn_app(&["Lanlan"]).await;
    let total = RING_CAPACITY + 5;
    register_many(&app, total).await;
    let total = total as u64;

    // Resuming with as many events missed as a subscriber's buffer holds misses nothing.
    let from = total - SUBSCRIBER_BUFFER as u64;
    let mut edge = open(&app, "", Some(&from.to_string()))
        .await
        .expect("stream opens");
    assert_eq!(edge.expect("hello").await.id, from);
    for id in from + 1..=total {
        assert_eq!(edge.expect("tools.changed").await.id, id);
    }

    for lost in ["4", "1", "999999", "yesterday"] {
        let mut events = open(&app, "", Some(lost)).await.expect("stream opens");
        let hello = events.expect("hello").await;
        assert_eq!(hello.id, total, "{lost}");
        let reset = events.expect("reset").await;
        assert_eq!(reset.id, total);
        assert_eq!(
            reset.data,
            json!({"last_event_id": lost, "oldest_event_id": 6, "newest_event_id": total})
        );
    }
}

#[actix_web::test]
async fn a_resume_that_missed_more_than_a_subscribers_buffer_gets_a_reset() {
    let app = spawn_app(&["Lanlan"]).await;
    let total = 2 * SUBSCRIBER_BUFFER as u64;
    register_many(&app, total as usize).await;
    // All of them are still in the ring, but one more than the buffer would be replayed: each of
    // these subscribers gets `hello` and a `reset`, then only what happens next, rather than
    // hold the replay.
    let from = (total - SUBSCRIBER_BUFFER as u64 - 1).to_string();
    let mut resumed = Vec::new();
    for _ in 0..20 {
        let mut events = open(&app, "", Some(&from)).await.expect("stream opens");
        assert_eq!(events.expect("hello").await.id, total);
        let reset = events.expect("reset").await;
        assert_eq!(
            reset.data,
            json!({"last_event_id": from, "oldest_event_id": 1, "newest_event_id": total})
        );
        resumed.push(events);
    }
    register_many(&app, 1).await;
    for events in &mut resumed {
        assert_eq!(events.next_event().await.id, total + 1);
    }
}

#[actix_web::test]
async fn idle_streams_get_a_keep_alive_comment() {
    let app = spawn_app_with(Settings {
        events: runtime_tools::EventSettings {
            keep_alive: Duration::from_millis(200),
            ..Default::default()
        },
        ..settings(&["Lanlan"])
    })
    .await;
    let mut events = stream(&app, "").await;
    events.expect("hello").await;
    for _ in 0..2 {
        assert_eq!(
            events.next_frame().await,
            Some(Frame::Comment("keep-alive".into()))
        );
    }
    // An event in between is still delivered as an event.
    register_many(&app, 1).await;
    loop {
        match events.next_frame().await {
            Some(Frame::Comment(c)) => assert_eq!(c, "keep-alive"),
            Some(Frame::Event(e)) => {
                assert_eq!((e.event.as_str(), e.id), ("tools.changed", 1));
                break;
            }
            None => panic!("stream ended"),
        }
    }
}

/// Opens the stream on a raw socket with a tiny receive buffer and never reads it.
fn stuck_subscriber(addr: SocketAddr) -> TcpStream {
    use std::io::Write;
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(&addr.into()).unwrap();
    let mut stream: TcpStream = socket.into();
    write!(
        stream,
        "GET /api/events HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    stream
}

#[actix_web::test]
async fn a_stuck_subscriber_is_dropped_and_slows_nobody() {
    let buffer = 8;
    let app = spawn_app_with(Settings {
        events: runtime_tools::EventSettings {
            subscriber_buffer: buffer,
            ..Default::default()
        },
        ..settings(&["Lanlan"])
    })
    .await;
    let callback = CallbackServer::with("/cb", Reply::output(json!(1)));
    let stuck = stuck_subscriber(app.addr);
    let mut reader = stream(&app, "").await;
    reader.expect("hello").await;

    // Each event carries a 256 KiB source: 48 of them (12 MiB) are more than the socket buffers
    // on both sides and the subscriber's buffer can hold, so the stuck subscriber falls behind.
    let big_source = "s".repeat(256 * 1024);
    let registrations = 48;
    for i in 0..registrations {
        let (status, body) = app
            .register(&tool_for(&format!("t{i}"), &callback, &big_source, None))
            .await;
        assert_eq!((status, &body["affected_roles"]), (200, &json!(["Lanlan"])));
        // The reader keeps up and misses nothing.
        let e = reader.expect("tools.changed").await;
        assert_eq!(
            (e.id, e.data["name"].clone()),
            (i + 1, json!(format!("t{i}")))
        );
    }

    // The stuck subscriber's stream ended: what it finally reads stops short of the last event.
    let text = actix_web::rt::task::spawn_blocking(move || {
        let mut stuck = stuck;
        stuck
            .set_read_timeout(Some(crate::helpers::HTTP_DEADLINE))
            .unwrap();
        let mut all = Vec::new();
        stuck
            .read_to_end(&mut all)
            .expect("the dropped stream ends");
        String::from_utf8_lossy(&all).into_owned()
    })
    .await
    .unwrap();
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text:.200}");
    assert!(text.ends_with("\r\n0\r\n\r\n"), "the stream ends cleanly");
    let delivered = text.matches("event: tools.changed").count() as u64;
    assert!(
        delivered < registrations,
        "the stuck subscriber was dropped after {delivered} events"
    );
    // And the reader is still served.
    register_many(&app, 1).await;
    assert_eq!(reader.expect("tools.changed").await.id, registrations + 1);
}

#[actix_web::test]
async fn the_stream_is_behind_the_same_guard_as_every_route() {
    let app = spawn_app(&["Lanlan"]).await;
    assert_eq!(
        open_with(&app, "", None, &[("Host", "evil.example")])
            .await
            .err(),
        Some((
            403,
            json!({"ok": false, "detail": "Host header \"evil.example\" is not a loopback name or address"})
        ))
    );
    assert_eq!(
        open_with(&app, "", None, &[("Origin", "https://evil.example")])
            .await
            .err(),
        Some((
            403,
            json!({"ok": false, "detail": "Origin \"https://evil.example\" is not a loopback page: browsers may call this API only from http://localhost or http://127.0.0.1 pages"})
        ))
    );
    // A page served from loopback (the browser's EventSource sends its Origin) may subscribe.
    let mut page = open_with(&app, "", None, &[("Origin", "http://localhost:48911")])
        .await
        .expect("a loopback page subscribes");
    page.expect("hello").await;
    let (status, body) = app.post("/api/events", &json!({})).await;
    assert_eq!(
        (status, body),
        (405, json!({"ok": false, "detail": "Method Not Allowed"}))
    );
}
