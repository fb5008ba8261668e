//! Registrations that survive a restart (`--state FILE`): the server killed with SIGKILL in the
//! middle of a storm of registrations, unregistrations and clears from several clients keeps
//! every change it answered with success and nothing half of one it did not; restored tools
//! are dormant (listed, given to no model) until they wake — a bound source's only after its
//! owner's wake, never for an impostor answering on its port — then reach a live session; one
//! that never wakes is removed after the configured time. The token a plugin sends never
//! appears in the log.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::rc::Rc;

use runtime_tools::{Dialect, SessionSettings};
use serde_json::{Value, json};

use crate::callback_server::{CallbackServer, ClosedPort, Reply};
use crate::child::LineChild;
use crate::cli::{Child, TempDir, get, post};
use crate::event_stream::{EventReader, open};
use crate::fake_realtime::{AckMode, FakeRealtime};
use crate::helpers::{TestApp, raw_exchange, raw_head, settings, spawn_app_with, test_client};
use crate::ownership::{TOKEN_A, TOKEN_B};
use crate::python::{repo_file, venv_python};

/// Clients of the storm, each with a source, a token and names of its own.
const CLIENTS: usize = 4;
/// Changes each client asks for (1,000 in all), unless the server dies first.
const CHANGES_PER_CLIENT: usize = 250;
/// The server is killed once this many changes were answered.
const KILL_AFTER: usize = 500;
/// Names per client: few, so changes overwrite and remove each other.
const NAMES: usize = 6;

fn token(client: usize) -> String {
    format!("storm-client-{client}-token-0000")
}

/// A server child process keeping its state in `path`, logging at `level`.
pub fn serve(path: &Path, characters: &[&str], level: &str) -> (Child, SocketAddr) {
    let mut args = vec![
        "serve",
        "--bind",
        "127.0.0.1:0",
        "--state",
        path.to_str().unwrap(),
    ];
    for c in characters {
        args.extend(["--character", c]);
    }
    let mut child = Child::start_logging(&args, level);
    let addr = child.listening("127.0.0.1");
    (child, addr)
}

/// A blocking POST with an `X-Plugin-Token`.
pub fn post_with_token(addr: SocketAddr, path: &str, body: &Value, token: &str) -> (u16, Value) {
    let host = addr.to_string();
    let body = serde_json::to_vec(body).unwrap();
    let length = body.len().to_string();
    let mut request = raw_head(
        "POST",
        path,
        &[
            ("Host", &host),
            ("Content-Type", "application/json"),
            ("Content-Length", &length),
            ("X-Plugin-Token", token),
        ],
    );
    request.extend(body);
    let response = raw_exchange(addr, request);
    (response.status, response.json())
}

/// One change of the storm.
#[derive(Debug, Clone)]
enum Op {
    Register {
        name: String,
        role: Option<&'static str>,
        url: String,
    },
    Unregister {
        name: String,
    },
    Clear {
        role: Option<&'static str>,
    },
    /// A registration with another client's token: refused, never applied.
    Refused {
        name: String,
        url: String,
    },
}

/// `(character, name)` → callback URL: what a client's source holds.
type Model = BTreeMap<(String, String), String>;

const CHARACTERS: [&str; 2] = ["Lanlan", "Mio"];

fn apply(model: &mut Model, op: &Op) {
    let targets = |role: &Option<&'static str>| -> Vec<String> {
        match role {
            Some(r) => vec![r.to_string()],
            None => CHARACTERS.iter().map(|c| c.to_string()).collect(),
        }
    };
    match op {
        Op::Register { name, role, url } => {
            for c in targets(role) {
                model.insert((c, name.clone()), url.clone());
            }
        }
        Op::Unregister { name } => model.retain(|(_, n), _| n != name),
        Op::Clear { role } => {
            let targets = targets(role);
            model.retain(|(c, _), _| !targets.contains(c));
        }
        Op::Refused { .. } => {}
    }
}

/// The client's `i`th change (a small deterministic generator per client).
fn op(client: usize, i: usize, port: &ClosedPort) -> Op {
    let x = (client * 7919 + i * 104_729 + (i * i) % 97) % 100;
    let name = format!("c{client}_t{}", (i * 31 + client) % NAMES);
    let role = if x % 3 == 0 { Some("Mio") } else { None };
    match x {
        // The first change binds the client's source to its token.
        _ if i == 0 => Op::Register {
            name,
            role: None,
            url: port.url(&format!("/c{client}/{i}")),
        },
        0..=59 => Op::Register {
            name,
            role,
            url: port.url(&format!("/c{client}/{i}")),
        },
        60..=79 => Op::Unregister { name },
        80..=87 => Op::Clear {
            role: if x % 2 == 0 { Some("Lanlan") } else { None },
        },
        _ => Op::Refused {
            name: format!("c{client}_refused_{i}"),
            url: port.url("/refused"),
        },
    }
}

/// Sends `op` for `client`; `None` when no answer came (the server died).
async fn send(client: &awc::Client, addr: SocketAddr, who: usize, op: &Op) -> Option<u16> {
    let source = format!("plugin:c{who}");
    let (path, body, token) = match op {
        Op::Register { name, role, url } => (
            "/api/tools/register",
            json!({"name": name, "callback_url": url, "source": source, "role": role}),
            token(who),
        ),
        Op::Unregister { name } => ("/api/tools/unregister", json!({"name": name}), token(who)),
        Op::Clear { role } => (
            "/api/tools/clear",
            json!({"source": source, "role": role}),
            token(who),
        ),
        Op::Refused { name, url } => (
            "/api/tools/register",
            json!({"name": name, "callback_url": url, "source": source}),
            token(who + 1),
        ),
    };
    let mut response = client
        .post(format!("http://{addr}{path}"))
        .insert_header(("X-Plugin-Token", token))
        .send_json(&body)
        .await
        .ok()?;
    let status = response.status().as_u16();
    response.body().await.ok()?;
    Some(status)
}

/// `(character, name)` → `(callback_url, state)` of every listed tool of `source`.
fn listed(listing: &Value, source: &str) -> BTreeMap<(String, String), (String, String)> {
    let mut rows = BTreeMap::new();
    for (role, tools) in listing["tools_by_role"].as_object().unwrap() {
        for t in tools.as_array().unwrap() {
            if t["source"] == source {
                rows.insert(
                    (role.clone(), t["name"].as_str().unwrap().to_owned()),
                    (
                        t["callback_url"].as_str().unwrap().to_owned(),
                        t["state"].as_str().unwrap().to_owned(),
                    ),
                );
            }
        }
    }
    rows
}

#[actix_web::test]
async fn a_sigkill_in_a_storm_keeps_every_answered_change_and_no_half_of_another() {
    let dir = TempDir::new("durability-storm");
    let path = dir.path("state.redb");
    let (child, addr) = serve(&path, &CHARACTERS, "debug");
    let (status, health) = get(addr, "/api/health");
    assert_eq!(status, 200);
    let first_instance = health["instance_id"].clone();
    assert_eq!(health["restored"], 0);
    let child = Rc::new(RefCell::new(child));
    let answered = Rc::new(Cell::new(0usize));
    let ports: Vec<ClosedPort> = (0..CLIENTS).map(|_| ClosedPort::new()).collect();

    // Each client: its answered changes applied to its model, and the one left unanswered.
    let runs = (0..CLIENTS).map(|who| {
        let (child, answered, port) = (child.clone(), answered.clone(), &ports[who]);
        async move {
            let client = test_client();
            let mut model = Model::new();
            let mut unanswered = None;
            let mut refused = 0;
            for i in 0..CHANGES_PER_CLIENT {
                let op = op(who, i, port);
                match send(&client, addr, who, &op).await {
                    None => {
                        unanswered = Some(op);
                        break;
                    }
                    Some(403) if matches!(op, Op::Refused { .. }) => refused += 1,
                    Some(200) => apply(&mut model, &op),
                    Some(other) => panic!("client {who}: {op:?} answered {other}"),
                }
                answered.set(answered.get() + 1);
                if answered.get() == KILL_AFTER {
                    child.borrow().signal("KILL");
                }
            }
            (model, unanswered, refused)
        }
    });
    let outcomes = futures_util::future::join_all(runs).await;
    assert!(answered.get() >= KILL_AFTER);
    let killed_log = {
        let mut child = child.borrow_mut();
        assert!(!child.wait().success(), "the server was killed");
        child.stderr_after_exit()
    };
    assert!(
        outcomes
            .iter()
            .any(|(_, unanswered, _)| unanswered.is_some()),
        "the kill came while changes were in flight"
    );
    assert!(outcomes.iter().all(|(_, _, refused)| *refused > 0));

    let (mut child, addr) = serve(&path, &CHARACTERS, "debug");
    let (status, listing) = get(addr, "/api/tools");
    assert_eq!(status, 200);
    let mut total = 0;
    for (who, (model, unanswered, _)) in outcomes.iter().enumerate() {
        let rows = listed(&listing, &format!("plugin:c{who}"));
        total += rows.len();
        // Nothing whose callback does not listen is given to a model.
        assert!(
            rows.values().all(|(_, state)| state == "dormant"),
            "{rows:?}"
        );
        let got: Model = rows.into_iter().map(|(key, (url, _))| (key, url)).collect();
        let mut with_unanswered = model.clone();
        if let Some(op) = unanswered {
            apply(&mut with_unanswered, op);
        }
        assert!(
            got == *model || got == with_unanswered,
            "client {who}: after the restart {got:?}\nanswered: {model:?}\nwith the unanswered \
             {unanswered:?}: {with_unanswered:?}"
        );
    }
    assert!(total > 0, "some tools were there to restore");
    let (_, health) = get(addr, "/api/health");
    assert_eq!(health["ok"], true);
    assert_ne!(health["instance_id"], first_instance, "a new instance");
    assert_eq!(health["restored"], total);
    assert_eq!(health["dormant"], total);
    assert_eq!(health["version"], env!("CARGO_PKG_VERSION"));

    // The sources are still bound to their tokens after the restart.
    let (status, answer) = post_with_token(
        addr,
        "/api/tools/clear",
        &json!({"source": "plugin:c0"}),
        TOKEN_B,
    );
    assert_eq!(
        (status, answer),
        (403, crate::ownership::not_owner("plugin:c0"))
    );

    child.signal("TERM");
    child.wait();
    let log = child.stderr_after_exit();
    for text in [&killed_log, &log] {
        for who in 0..=CLIENTS {
            assert!(!text.contains(&token(who)), "a token was logged");
        }
        assert!(!text.contains(TOKEN_B), "a token was logged");
    }
    // Each change's log line names the source it was made to, an unregister's included.
    assert!(
        killed_log.lines().any(|l| l.contains("tool change")
            && l.contains("route=\"unregister\"")
            && l.contains("source=\"plugin:c")),
        "{killed_log}"
    );
}

/// Registers `weather` (source `plugin:w`, token A) for every character of a server with its
/// state in `path`, and `open` (source `plugin:open`, no token) when `open` names its callback;
/// then kills the server.
pub fn registered_then_killed(path: &Path, characters: &[&str], url: &str, open: Option<&str>) {
    let (mut child, addr) = serve(path, characters, "info");
    let body = json!({"name": "weather", "callback_url": url, "source": "plugin:w"});
    let (status, answer) = post_with_token(addr, "/api/tools/register", &body, TOKEN_A);
    assert_eq!(status, 200, "{answer}");
    if let Some(open) = open {
        let body = json!({"name": "open", "callback_url": open, "source": "plugin:open"});
        let (status, answer) = post(addr, "/api/tools/register", &body);
        assert_eq!(status, 200, "{answer}");
    }
    child.signal("KILL");
    child.wait();
}

/// The server started again on the state file at `path`, Mio with a live session to a fake
/// model, and the event stream past its `hello`.
pub async fn restarted_with_a_live_session(path: &Path) -> (FakeRealtime, TestApp, EventReader) {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let mut config = settings(&["Mio"]);
    config.characters[0].session = Some(SessionSettings::new(&fake.url, Dialect::Openai));
    config.state.path = Some(path.to_owned());
    let app = spawn_app_with(config).await;
    let mut stream = open(&app, "", None).await.expect("stream opens");
    stream.expect("hello").await;
    (fake, app, stream)
}

/// `POST /api/sources/{source}/wake` with `token` (none when `None`).
pub async fn wake(app: &TestApp, source: &str, token: Option<&str>) -> (u16, Value) {
    crate::ownership::post_as(
        app,
        &format!("/api/sources/{source}/wake"),
        &json!({}),
        token,
    )
    .await
}

/// A restored tool of a source bound to a token does not wake for whoever answers on its old
/// port: an impostor serving HTTP there wakes the tool of an unbound source beside it (which
/// is anyone's, as the contract says) and not the bound one, which no model gets and no call
/// reaches. Only the owner's wake, with its token, lets it wake — on the next HTTP answer from
/// its callback's origin, the owner's own server back on the port.
#[actix_web::test]
async fn a_restored_bound_tool_stays_dormant_while_an_impostor_answers_on_its_port_and_wakes_on_its_owners_wake()
 {
    let dir = TempDir::new("durability-dormant");
    let path = dir.path("state.redb");
    let port = ClosedPort::new();
    registered_then_killed(
        &path,
        &["Mio"],
        &port.url("/weather"),
        Some(&port.url("/open")),
    );

    let (fake, app, mut stream) = restarted_with_a_live_session(&path).await;

    let (_, listing) = app.get("/api/tools").await;
    assert_eq!(
        names_and_states(&listing, "Mio"),
        [
            ("open".into(), "plugin:open".into(), "dormant".into()),
            ("weather".into(), "plugin:w".into(), "dormant".into())
        ]
    );
    assert_eq!(
        listing["tools_by_role"]["Mio"][1],
        json!({"name": "weather", "description": "", "source": "plugin:w",
               "callback_url": port.url("/weather"), "is_remote": true, "state": "dormant"})
    );
    let (_, health) = app.get("/api/health").await;
    assert_eq!(
        (health["restored"].clone(), health["dormant"].clone()),
        (json!(2), json!(2))
    );
    let (status, sources) = app.get("/api/sources").await;
    assert_eq!(
        (status, sources),
        (
            200,
            json!({"sources": [
                {"source": "plugin:open", "bound": false, "configured": false, "tools": 1, "dormant": 1},
                {"source": "plugin:w", "bound": true, "configured": false, "tools": 1, "dormant": 1},
            ]})
        )
    );
    // The session is connected, and no list it was sent has the tool.
    fake.wait_connections(1).await;
    for update in fake.events_of("session.update") {
        let names = crate::fake_realtime::update_tool_names(&update);
        assert!(!names.contains(&"weather".to_owned()), "{update}");
    }

    // An impostor listens on the port and answers HTTP: the unbound source's tool goes to it
    // (as the contract says), the bound one does not.
    let mut impostor = CallbackServer::start_on(port.port());
    impostor.route("/weather", Reply::output(json!({"stolen": true})));
    impostor.route("/open", Reply::output(json!({"open": true})));
    let woke = stream
        .wait_for("tools.changed", |d| d["op"] == "restored")
        .await;
    assert_eq!(
        (woke.data["name"].clone(), woke.data["source"].clone()),
        (json!("open"), json!("plugin:open"))
    );
    let (_, listing) = app.get("/api/tools").await;
    assert_eq!(
        names_and_states(&listing, "Mio"),
        [
            ("open".into(), "plugin:open".into(), "active".into()),
            ("weather".into(), "plugin:w".into(), "dormant".into())
        ]
    );
    let call = json!({"name": "weather", "arguments": {"city": "Oslo"}});
    let (status, answer) = app.post("/api/tools/invoke", &call).await;
    assert_eq!(status, 404, "a dormant tool cannot be called: {answer}");
    assert!(
        impostor.received().iter().all(|r| r.path != "/weather"),
        "the impostor got nothing of the bound tool's: {:?}",
        impostor.received()
    );

    // Nobody but the owner wakes it.
    let refused = json!({"ok": false, "detail": "source \"plugin:w\" is bound to another token: \
        waking its restored tools needs the X-Plugin-Token it is bound to"});
    for token in [None, Some(TOKEN_B)] {
        assert_eq!(wake(&app, "plugin:w", token).await, (403, refused.clone()));
    }
    assert_eq!(
        wake(&app, "plugin:open", Some(TOKEN_B)).await,
        (
            403,
            json!({"ok": false, "detail": "source \"plugin:open\" is bound to no token: its \
                restored tools wake when their callback answers HTTP, without a wake"})
        )
    );
    assert_eq!(
        wake(&app, "plugin:nobody", Some(TOKEN_A)).await,
        (
            404,
            json!({"ok": false, "detail": "unknown source: plugin:nobody (no tool and no binding)"})
        )
    );

    // The owner's server is back on its port, and the owner proves itself.
    impostor.stop().await;
    let callback = CallbackServer::start_on(port.port());
    callback.route("/weather", Reply::output(json!({"temperature_c": 28})));
    assert_eq!(
        wake(&app, "plugin:w", Some(TOKEN_A)).await,
        (200, json!({"ok": true, "source": "plugin:w", "woken": 1}))
    );
    let restored = stream
        .wait_for("tools.changed", |d| d["op"] == "restored")
        .await;
    assert_eq!(restored.data["name"], "weather");
    assert_eq!(restored.data["source"], "plugin:w");
    fake.update_with_tools(&["open", "weather"]).await;
    let (_, listing) = app.get("/api/tools").await;
    assert_eq!(
        names_and_states(&listing, "Mio"),
        [
            ("open".into(), "plugin:open".into(), "active".into()),
            ("weather".into(), "plugin:w".into(), "active".into())
        ]
    );
    let (_, health) = app.get("/api/health").await;
    assert_eq!(health["dormant"], 0);
    let (status, answer) = app.post("/api/tools/invoke", &call).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["output"], json!({"temperature_c": 28}));
    // A second wake finds nothing left to release.
    assert_eq!(
        wake(&app, "plugin:w", Some(TOKEN_A)).await,
        (200, json!({"ok": true, "source": "plugin:w", "woken": 0}))
    );
    // The binding came back with it.
    let (status, _) = crate::ownership::post_as(
        &app,
        "/api/tools/clear",
        &json!({"source": "plugin:w"}),
        None,
    )
    .await;
    assert_eq!(status, 403);
}

#[actix_web::test]
async fn a_restored_tool_whose_callback_never_listens_is_removed_after_the_configured_time() {
    let dir = TempDir::new("durability-expiry");
    let path = dir.path("state.redb");
    let port = ClosedPort::new();
    registered_then_killed(&path, &["Lanlan"], &port.url("/weather"), None);

    let mut config = settings(&["Lanlan"]);
    config.state.path = Some(path.clone());
    config.state.dormant_ttl = std::time::Duration::from_secs(1);
    let app = spawn_app_with(config).await;
    // From the first event on: the removal may come before the stream opens.
    let mut stream = open(&app, "", Some("0")).await.expect("stream opens");
    let removed = stream
        .wait_for("tools.changed", |d| d["op"] == "auto_removed")
        .await;
    assert_eq!(removed.data["name"], "weather");
    assert_eq!(removed.data["source"], "plugin:w");
    assert_eq!(removed.data["affected_roles"], json!(["Lanlan"]));
    let (_, listing) = app.get("/api/tools").await;
    assert_eq!(listing["tools_by_role"]["Lanlan"], json!([]));
    let (_, health) = app.get("/api/health").await;
    assert_eq!(
        (health["restored"].clone(), health["dormant"].clone()),
        (json!(1), json!(0))
    );
}

#[test]
fn a_state_file_of_another_format_is_refused_at_start_with_a_clear_error() {
    let dir = TempDir::new("durability-foreign");
    let path = dir.file("state.redb", "this is not a state store");
    let mut child = Child::start(&[
        "serve",
        "--bind",
        "127.0.0.1:0",
        "--state",
        path.to_str().unwrap(),
    ]);
    let status = child.wait();
    assert_eq!(status.code(), Some(1));
    let log = child.stderr_after_exit();
    assert!(log.contains("cannot open state file"), "{log}");
    assert!(log.contains(path.to_str().unwrap()), "{log}");
}

/// Starts `tests/mcp_plugin.py` (the official MCP Python SDK's server) as MCP server `name` for
/// the server at `base`, without registering it (`args` may name its `--port`); returns it and
/// its port once it listens.
async fn mcp_plugin(base: &str, name: &str, args: &[&str]) -> (LineChild, u16) {
    let python = venv_python().await;
    let mut child = LineChild::spawn(
        Command::new(python)
            .arg(repo_file("tests/mcp_plugin.py"))
            .arg(base)
            .arg(name)
            .arg("--no-register")
            .args(args),
    );
    let listening = child.expect_line("listening ").await;
    let port = listening["listening ".len()..].parse().expect("a port");
    (child, port)
}

/// The names and states `listing` gives character `role`, in order.
fn names_and_states(listing: &Value, role: &str) -> Vec<(String, String, String)> {
    listing["tools_by_role"][role]
        .as_array()
        .expect("the character's tools")
        .iter()
        .map(|t| {
            (
                t["name"].as_str().unwrap().to_owned(),
                t["source"].as_str().unwrap().to_owned(),
                t["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// An MCP server a plugin registered at run time, with its token, survives a SIGKILL of the
/// server: restarted with the same state file, its tools (as its last listing had them) are
/// listed dormant and given to no model, and its source is still bound (so it is not probed
/// until its owner's wake); once the owner wakes it and the MCP server answers again they
/// reach the live session and run. A second registration on the same
/// endpoint, without the token, skips the tools whose names the bound source holds (the
/// ownership rule, stated in its `skipped`); its unregistration is durable too. After the
/// restart, a tool added through `notifications/tools/list_changed` under a name another
/// plugin's bound source holds is skipped the same way, and the holder keeps it.
#[actix_web::test]
async fn a_runtime_mcp_server_is_restored_dormant_until_it_answers_then_reaches_a_live_session() {
    let dir = TempDir::new("durability-mcp");
    let path = dir.path("state.redb");
    let (mut child, addr) = serve(&path, &["Mio"], "info");
    let base = format!("http://{addr}");
    let port_text = crate::helpers::port_to_come_back_to().to_string();
    let (plugin, port) = mcp_plugin(&base, "weather", &["--port", &port_text]).await;
    let url = format!("http://127.0.0.1:{port}/mcp");
    let body = json!({"name": "weather", "url": url});
    let (status, answer) = post_with_token(addr, "/api/mcp/register", &body, TOKEN_A);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        (answer["ok"].clone(), answer["tools"].clone()),
        (json!(true), json!(["get_weather", "add_tool"]))
    );
    // The same endpoint under another name, without the token: the names are held by a source
    // bound to another plugin, so its tools are skipped, with why.
    let other = json!({"name": "copycat", "url": url});
    let (status, answer) = post(addr, "/api/mcp/register", &other);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["tools"], json!([]), "{answer}");
    let reason = format!(
        "its name is taken: {}",
        crate::ownership::not_owner("mcp:weather")["detail"]
            .as_str()
            .unwrap()
    );
    assert_eq!(
        answer["skipped"],
        json!([{"name": "get_weather", "reason": reason}, {"name": "add_tool", "reason": reason}])
    );
    let (status, listing) = get(addr, "/api/tools");
    assert_eq!(status, 200);
    assert_eq!(
        names_and_states(&listing, "Mio"),
        [
            ("get_weather".into(), "mcp:weather".into(), "active".into()),
            ("add_tool".into(), "mcp:weather".into(), "active".into())
        ]
    );
    let (status, _) = post(addr, "/api/mcp/unregister", &json!({"name": "copycat"}));
    assert_eq!(status, 200);
    child.signal("KILL");
    assert!(!child.wait().success(), "the server was killed");
    plugin.signal("KILL");
    plugin.wait_exit().await;

    let (fake, app, mut stream) = restarted_with_a_live_session(&path).await;
    let (_, listing) = app.get("/api/tools").await;
    assert_eq!(
        names_and_states(&listing, "Mio"),
        [
            ("get_weather".into(), "mcp:weather".into(), "dormant".into()),
            ("add_tool".into(), "mcp:weather".into(), "dormant".into())
        ]
    );
    let (_, servers) = app.get("/api/mcp").await;
    let runtime = &servers["runtime_mcp_servers"];
    assert_eq!(runtime["weather"]["state"], "dormant", "{servers}");
    assert_eq!(runtime["weather"]["url"], url);
    assert!(
        runtime.get("copycat").is_none(),
        "its removal was kept: {servers}"
    );
    let (_, health) = app.get("/api/health").await;
    assert_eq!(
        (health["restored"].clone(), health["dormant"].clone()),
        (json!(2), json!(2))
    );
    fake.wait_connections(1).await;
    for update in fake.events_of("session.update") {
        let names = crate::fake_realtime::update_tool_names(&update);
        assert!(!names.contains(&"get_weather".to_owned()), "{update}");
    }
    let call = json!({"name": "get_weather", "arguments": {"city": "Oslo"}});
    let (status, answer) = app.post("/api/tools/invoke", &call).await;
    assert_eq!(status, 404, "a dormant tool cannot be called: {answer}");
    // The source is still bound to the token it was registered with.
    let (status, answer) = crate::ownership::post_as(
        &app,
        "/api/mcp/unregister",
        &json!({"name": "weather"}),
        Some(TOKEN_B),
    )
    .await;
    assert_eq!(
        (status, answer),
        (403, crate::ownership::not_owner("mcp:weather"))
    );

    // Bound to a token, it is not even probed until its owner proves itself.
    assert_eq!(runtime["weather"]["last_error"], Value::Null, "{servers}");

    // The MCP server comes back on its port, and its owner wakes its source: its tools go to
    // the session.
    let (plugin, _) = mcp_plugin(&app.base, "weather", &["--port", &port_text]).await;
    assert_eq!(
        wake(&app, "mcp:weather", Some(TOKEN_A)).await,
        (
            200,
            json!({"ok": true, "source": "mcp:weather", "woken": 2})
        )
    );
    stream
        .wait_for("tools.changed", |d| {
            d["op"] == "mcp"
                && d["source"] == "mcp:weather"
                && d["affected_roles"] == json!(["Mio"])
        })
        .await;
    fake.update_with_tools(&["get_weather", "add_tool"]).await;
    let (_, listing) = app.get("/api/tools").await;
    assert_eq!(
        names_and_states(&listing, "Mio"),
        [
            ("get_weather".into(), "mcp:weather".into(), "active".into()),
            ("add_tool".into(), "mcp:weather".into(), "active".into())
        ]
    );
    let (_, health) = app.get("/api/health").await;
    assert_eq!(health["dormant"], 0);
    let (_, servers) = app.get("/api/mcp").await;
    assert_eq!(
        servers["runtime_mcp_servers"]["weather"]["state"],
        "connected"
    );
    let (status, answer) = app.post("/api/tools/invoke", &call).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["output"],
        json!({"city": "Oslo", "temperature_c": 28})
    );

    // A tool another plugin's bound source holds is not taken over by a new listing.
    let held = json!({"name": "greet_me", "callback_url": "http://127.0.0.1:9/greet",
                      "source": "plugin:b"});
    let (status, _) =
        crate::ownership::post_as(&app, "/api/tools/register", &held, Some(TOKEN_B)).await;
    assert_eq!(status, 200);
    let add = json!({"name": "add_tool", "arguments": {"name": "greet_me"}});
    let (status, answer) = app.post("/api/tools/invoke", &add).await;
    assert_eq!(status, 200, "{answer}");
    let skipped = stream
        .wait_for("mcp.state", |d| {
            d["name"] == "weather" && d["skipped"].as_array().is_some_and(|s| !s.is_empty())
        })
        .await;
    assert_eq!(
        skipped.data["skipped"],
        json!([{"name": "greet_me", "reason": format!(
            "its name is taken: {}",
            crate::ownership::not_owner("plugin:b")["detail"].as_str().unwrap()
        )}])
    );
    let (_, listing) = app.get("/api/tools").await;
    assert_eq!(
        names_and_states(&listing, "Mio"),
        [
            ("get_weather".into(), "mcp:weather".into(), "active".into()),
            ("add_tool".into(), "mcp:weather".into(), "active".into()),
            ("greet_me".into(), "plugin:b".into(), "active".into())
        ]
    );
    plugin.signal("KILL");
    plugin.wait_exit().await;
}

/// An invoke of `name` on the server at `addr`, from this thread's runtime (its callback may
/// be a server of this test's thread): the answer.
async fn invoke_at(addr: SocketAddr, name: &str) -> Value {
    let mut response = test_client()
        .post(format!("http://{addr}/api/tools/invoke"))
        .send_json(&json!({"name": name}))
        .await
        .expect("invoke sent");
    assert_eq!(response.status(), 200);
    response.json().await.expect("an invoke answer")
}

#[actix_web::test]
async fn a_tools_limits_are_kept_with_it_and_its_counts_start_again() {
    let dir = TempDir::new("durability-limits");
    let path = dir.path("state.redb");
    let quota = CallbackServer::with("/quota", Reply::output(json!({"left": 1})));
    let limits = json!({"max_concurrent": 2, "rate": {"calls": 1, "per_seconds": 3600},
                        "dedupe_seconds": 7});
    let mut body = json!({"name": "quota", "callback_url": quota.url("/quota"),
                          "source": "plugin:q"});
    for (field, value) in limits.as_object().unwrap() {
        body[field] = value.clone();
    }
    let (mut child, addr) = serve(&path, &["Mio"], "info");
    // Registered without a token: its source is nobody's, so the restored tool wakes as soon as
    // its callback answers.
    let (status, answer) = crate::cli::post(addr, "/api/tools/register", &body);
    assert_eq!(status, 200, "{answer}");
    assert_eq!(invoke_at(addr, "quota").await["output"], json!({"left": 1}));
    let refused = invoke_at(addr, "quota").await;
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .starts_with("the tool quota may be called at most 1 time per 3600 s"),
        "{refused}"
    );
    child.signal("KILL");
    child.wait();

    // Back, from the state file: the tool has its limits, and its count starts again.
    let mut config = settings(&["Mio"]);
    config.state.path = Some(path.clone());
    let app = spawn_app_with(config).await;
    let mut stream = open(&app, "", Some("0")).await.expect("stream opens");
    stream
        .wait_for("tools.changed", |d| d["op"] == "restored")
        .await;
    let (_, listing) = app.get("/api/tools?detail=full").await;
    let tool = &listing["tools_by_role"]["Mio"][0];
    for (field, value) in limits.as_object().unwrap() {
        assert_eq!(&tool[field], value, "{field}: {tool}");
    }
    assert_eq!(
        invoke_at(app.addr, "quota").await["output"],
        json!({"left": 1})
    );
    assert_eq!(invoke_at(app.addr, "quota").await["is_error"], json!(true));
    // Two calls reached it, one before the restart and one after (beside the probe that woke it).
    let calls: Vec<String> = quota
        .received()
        .iter()
        .filter(|r| r.method == "POST")
        .map(|r| r.json()["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(calls, ["quota", "quota"]);
}
