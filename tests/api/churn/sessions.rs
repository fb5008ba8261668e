//! Churn of the model sessions: Gemini Live moves (client and relay, by registration and by
//! `goAway`), realtime clients that reconnect, relay apps that leave (cleanly, by dropping
//! TCP, in the middle of an update), and attachments that come and go.

use actix_codec::Framed;
use awc::BoxedSocket;
use awc::ws::{Codec, Frame, Message};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};

use super::{Server, cycles};
use crate::fake_gemini::{BIDI_PATH, FakeGemini, SetupMode};
use crate::fake_realtime::{AckMode, EVENT_DEADLINE, FakeRealtime};
use crate::helpers::tool_body;

/// Cycles before the reading the bounds are held against: pools, caches and the allocator
/// reach their working size.
const WARM_UP: usize = 10;

/// A `[[character]]` block with a `[character.session]` of these lines.
fn character(name: &str, session: &str) -> String {
    format!("[[character]]\nname = \"{name}\"\n[character.session]\n{session}\n")
}

/// A Gemini Live session on `url` in `mode`.
fn gemini_live(url: &str, mode: &str) -> String {
    format!("kind = \"gemini-live\"\nurl = \"{url}\"\nmodel = \"gemini-test\"\nmode = \"{mode}\"")
}

/// An OpenAI Realtime session on `url` in `mode`.
fn realtime(url: &str, mode: &str) -> String {
    format!("kind = \"openai-realtime\"\nurl = \"{url}\"\nmode = \"{mode}\"")
}

/// A tool of `role` whose callback nobody answers (its calls are not made here).
fn tool(name: &str, role: &str) -> Value {
    let mut body = tool_body(name, "http://127.0.0.1:9/cb", "plugin:churn");
    body["role"] = json!(role);
    body
}

/// Registers, then unregisters, `name` for `role` (every second cycle): each changes the
/// role's tool list, so a Gemini session moves to a new connection. The change must succeed.
async fn change_tools(server: &Server, role: &str, cycle: usize) {
    let answer = if cycle % 2 == 0 {
        server.register(&tool("churn", role)).await
    } else {
        let (status, answer) = server
            .post(
                "/api/tools/unregister",
                &json!({"name": "churn", "role": role}),
            )
            .await;
        assert_eq!(status, 200, "{answer}");
        answer
    };
    assert_eq!(
        (&answer["affected_roles"], &answer["failed_roles"]),
        (&json!([role]), &json!([])),
        "cycle {cycle}: {answer}"
    );
}

/// An app's websocket to the server at `path`.
async fn app_socket(server: &Server, path: &str) -> Framed<BoxedSocket, Codec> {
    let (_, socket) = awc::Client::new()
        .ws(format!("ws://{}{path}", server.addr))
        .connect()
        .await
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    socket
}

/// The next frame the app gets that is not a ping (within the deadline).
async fn next_frame(socket: &mut Framed<BoxedSocket, Codec>) -> Frame {
    loop {
        let frame = tokio::time::timeout(EVENT_DEADLINE, socket.next())
            .await
            .expect("a frame in time")
            .expect("the socket is open")
            .expect("a frame");
        if !matches!(frame, Frame::Ping(_) | Frame::Pong(_)) {
            return frame;
        }
    }
}

/// The app closes with a close frame and reads until the server's answer.
async fn close_cleanly(mut socket: Framed<BoxedSocket, Codec>) {
    socket.send(Message::Close(None)).await.expect("close sent");
    loop {
        match tokio::time::timeout(EVENT_DEADLINE, socket.next())
            .await
            .expect("the close answered in time")
        {
            Some(Ok(Frame::Close(_))) | None | Some(Err(_)) => return,
            Some(Ok(_)) => {}
        }
    }
}

/// Waits until fake `fake` saw the end of `n` connections the server left behind.
async fn ended(fake: &FakeGemini, n: usize) {
    fake.wait_until(&format!("{n} connections ended"), |f| {
        (f.ended().len() >= n).then_some(())
    })
    .await;
}

#[actix_web::test]
async fn gemini_moves_and_go_aways_release_every_connection() {
    let client = FakeGemini::start(SetupMode::Complete).await;
    let relay = FakeGemini::start(SetupMode::Complete).await;
    let going = FakeGemini::start(SetupMode::Complete).await;
    let config = [
        character("Client", &gemini_live(&client.url, "client")),
        character("Relay", &gemini_live(&relay.url, "relay")),
        character("Going", &gemini_live(&going.url, "client")),
    ]
    .concat();
    let server = Server::start("gemini", &config);
    client.nth_setup(1).await;
    going.nth_setup(1).await;
    let mut app = app_socket(&server, &format!("{BIDI_PATH}?character=Relay")).await;
    let setup = json!({"setup": {"model": "models/gemini-test"}});
    app.send(Message::Text(setup.to_string().into()))
        .await
        .unwrap();
    assert!(matches!(next_frame(&mut app).await, Frame::Binary(_)));

    // Registrations move the client and the relay (with its app connected); goAways move the
    // third. Each kind in its own sequence, the three at once.
    let moves = |from: usize, to: usize| {
        let server = &server;
        let going = &going;
        async move {
            let by_registration = async {
                for cycle in from..to {
                    futures_util::join!(
                        change_tools(server, "Client", cycle),
                        change_tools(server, "Relay", cycle)
                    );
                }
            };
            let by_go_away = async {
                for cycle in from..to {
                    // On the connection in use: the server left the one before.
                    going
                        .wait_until("the move done", |f| {
                            (f.open_connections() == [cycle]).then_some(())
                        })
                        .await;
                    going.push(json!({"goAway": {"timeLeft": "5s"}})).await;
                    going.nth_setup(cycle + 2).await;
                }
            };
            futures_util::join!(by_registration, by_go_away);
        }
    };
    moves(0, warm_up()).await;
    // At rest: the client's and the goAway character's connections, the relay's two sides.
    let warm = server.at_rest(4).await;
    // The case: after 20 registrations and after 500, nothing left behind.
    moves(warm_up(), warm_up() + 20).await;
    server
        .holds_bounds("gemini moves (20 of each)", 20, &warm, 4)
        .await;
    let total = cycles(500);
    moves(warm_up() + 20, warm_up() + total).await;
    server
        .holds_bounds("gemini moves (client, relay, goAway)", total, &warm, 4)
        .await;
    // Every connection left behind ended: the fake saw its TCP connection closed.
    let left = warm_up() + total;
    for fake in [&client, &relay, &going] {
        ended(fake, left).await;
        assert_eq!(
            fake.open_connections(),
            [left],
            "only the one in use is open"
        );
    }
    // The app's socket stayed open throughout, and the relay goes on.
    app.send(Message::Ping("still here".into())).await.unwrap();
    let answer = tokio::time::timeout(EVENT_DEADLINE, app.next())
        .await
        .expect("an answer in time");
    assert!(matches!(answer, Some(Ok(Frame::Pong(_)))), "{answer:?}");
}

#[actix_web::test]
async fn realtime_clients_that_reconnect_release_each_connection() {
    // Each reconnect waits the first backoff (250 ms): four characters reconnect at once.
    let fakes = [
        FakeRealtime::start(AckMode::Immediate).await,
        FakeRealtime::start(AckMode::Immediate).await,
        FakeRealtime::start(AckMode::Immediate).await,
        FakeRealtime::start(AckMode::Immediate).await,
    ];
    let config: String = fakes
        .iter()
        .enumerate()
        .map(|(i, fake)| character(&format!("Client{i}"), &realtime(&fake.url, "client")))
        .collect();
    let server = Server::start("realtime", &config);
    let reconnects = |from: usize, to: usize| {
        futures_util::future::join_all(fakes.iter().map(move |fake| async move {
            for cycle in from..to {
                fake.wait_connections(cycle + 1).await;
                // The new connection is up (its first update came) before the model drops it.
                fake.nth_update(cycle + 1).await;
                fake.drop_connection().await;
            }
            fake.nth_update(to + 1).await;
        }))
    };
    reconnects(0, warm_up() / 2).await;
    let warm = server.at_rest(fakes.len()).await;
    let per_character = cycles(300).div_ceil(fakes.len());
    reconnects(warm_up() / 2, warm_up() / 2 + per_character).await;
    server
        .holds_bounds(
            "realtime client reconnects",
            per_character * fakes.len(),
            &warm,
            fakes.len(),
        )
        .await;
}

#[actix_web::test]
async fn relay_apps_that_leave_cleanly_by_dropping_tcp_or_mid_update_leave_nothing() {
    let plain = FakeRealtime::start(AckMode::Immediate).await;
    // This model never acknowledges: every relay of its character leaves with the server's
    // update in flight.
    let deaf = FakeRealtime::start(AckMode::Never).await;
    let gemini = FakeGemini::start(SetupMode::Complete).await;
    let config = [
        character("Plain", &realtime(&plain.url, "relay")),
        character(
            "Syncing",
            &format!(
                "{}\nsync_timeout_seconds = 30",
                realtime(&deaf.url, "relay")
            ),
        ),
        character("Gemini", &gemini_live(&gemini.url, "relay")),
    ]
    .concat();
    let server = Server::start("relay", &config);
    server.register(&tool("weather", "Syncing")).await;
    let apps = |from: usize, to: usize| {
        let server = &server;
        let (plain, deaf, gemini) = (&plain, &deaf, &gemini);
        async move {
            let leave = async {
                for cycle in from..to {
                    let app = app_socket(server, "/v1/realtime?character=Plain").await;
                    plain.wait_connections(cycle + 1).await;
                    if cycle % 2 == 0 {
                        close_cleanly(app).await;
                    } else {
                        drop(app);
                    }
                }
            };
            let mid_update = async {
                for cycle in from..to {
                    let app = app_socket(server, "/v1/realtime?character=Syncing").await;
                    deaf.nth_update(cycle + 1).await;
                    if cycle % 2 == 0 {
                        drop(app);
                    } else {
                        close_cleanly(app).await;
                    }
                }
            };
            let gemini_apps = async {
                for cycle in from..to {
                    let mut app =
                        app_socket(server, &format!("{BIDI_PATH}?character=Gemini")).await;
                    let setup = json!({"setup": {"model": "models/gemini-test"}});
                    app.send(Message::Text(setup.to_string().into()))
                        .await
                        .unwrap();
                    gemini.nth_setup(cycle + 1).await;
                    if cycle % 2 == 0 {
                        close_cleanly(app).await;
                    } else {
                        drop(app);
                    }
                }
            };
            futures_util::join!(leave, mid_update, gemini_apps);
        }
    };
    apps(0, warm_up()).await;
    let warm = server.at_rest(0).await;
    let total = cycles(300);
    apps(warm_up(), warm_up() + total).await;
    server
        .holds_bounds(
            "relay apps (clean close, dropped TCP, mid-update; realtime and gemini)",
            total,
            &warm,
            0,
        )
        .await;
    let (_, sessions) = server.get("/api/sessions").await;
    for role in ["Plain", "Syncing", "Gemini"] {
        assert_eq!(
            sessions["sessions_by_role"][role]["connections"],
            json!([]),
            "{role}: {sessions}"
        );
    }
    ended(&gemini, warm_up() + total).await;
}

#[actix_web::test]
async fn attachments_that_are_detached_or_whose_call_ends_leave_nothing() {
    let call = FakeRealtime::start(AckMode::Immediate).await;
    // Attachments that have not finished closing do not count against the next ones.
    let config = character(
        "Caller",
        &format!("{}\nmax_attachments = 1000", realtime(&call.url, "relay")),
    );
    let server = Server::start("attach", &config);
    server.register(&tool("weather", "Caller")).await;
    let attachments = |from: usize, to: usize| {
        let server = &server;
        let call = &call;
        async move {
            for cycle in from..to {
                let url = format!("{}&call_id=churn_{cycle}", call.url);
                let attach = json!({"role": "Caller", "url": url});
                let (status, answer) = server.post("/api/sessions/attach", &attach).await;
                assert_eq!(status, 200, "{answer}");
                if cycle % 2 == 0 {
                    let (status, answer) = server.post("/api/sessions/detach", &attach).await;
                    assert_eq!(
                        (status, &answer["detached"]),
                        (200, &json!(true)),
                        "{answer}"
                    );
                } else {
                    // The call ends: the model closes the connection.
                    call.drop_connection().await;
                }
            }
        }
    };
    attachments(0, warm_up()).await;
    let warm = server.at_rest(0).await;
    let total = cycles(300);
    attachments(warm_up(), warm_up() + total).await;
    server
        .holds_bounds("attachments (detached, call ended)", total, &warm, 0)
        .await;
    let (_, sessions) = server.get("/api/sessions").await;
    assert_eq!(
        sessions["sessions_by_role"]["Caller"]["connections"],
        json!([]),
        "{sessions}"
    );
}

/// The cycles before the warm reading ([`super::warm_up`]).
fn warm_up() -> usize {
    super::warm_up(WARM_UP)
}
