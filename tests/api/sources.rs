//! Sources nobody can squat, and restored tools only their owner wakes: `GET /api/sources` lists
//! every source with tools or a binding (no token, no hash); the operator frees a binding a
//! squatter made (`DELETE /api/sources/{source}/binding`), durably, and the owner binds its
//! source again; `[[security.source]]` binds a source before any plugin runs; a restored tool
//! of an unbound source wakes on an HTTP answer from its callback's origin, never on a bare TCP
//! connection; a restored tool's dormant time counts across restarts; under
//! `plugin_tokens = "required"` a plugin's context and progress need the token of a bound
//! source, and the context's event names that source.

use std::time::{Duration, Instant};

use runtime_tools::{ConfiguredSource, Dialect, SessionSettings, TokenPolicy};
use serde_json::{Value, json};

use crate::callback_server::{CallbackServer, ClosedPort, Reply, listen, read_request};
use crate::cli::{Child, TempDir, get};
use crate::durability::{post_with_token, registered_then_killed, serve};
use crate::event_stream::open;
use crate::fake_realtime::{AckMode, FakeRealtime};
use crate::helpers::{TestApp, settings, spawn_app, spawn_app_with};
use crate::ownership::{TOKEN_A, TOKEN_B, not_owner, post_as};

fn tool(name: &str, source: &str, url: &str) -> Value {
    json!({"name": name, "description": "d", "callback_url": url, "source": source})
}

/// `DELETE /api/sources/{source}/binding` with `Authorization: Bearer` and this value (none
/// when `None`).
async fn unbind_with(app: &TestApp, source: &str, bearer: Option<&str>) -> (u16, Value) {
    let mut request = app
        .client
        .delete(app.url(&format!("/api/sources/{source}/binding")));
    if let Some(token) = bearer {
        request = request.insert_header(("authorization", format!("Bearer {token}")));
    }
    let mut response = request.send().await.expect("request sent");
    let status = response.status().as_u16();
    let body = response.body().await.expect("body read");
    (status, crate::helpers::parse_json(&body))
}

/// `DELETE /api/sources/{source}/binding` as the operator.
async fn unbind(app: &TestApp, source: &str) -> (u16, Value) {
    unbind_with(app, source, Some(&app.operator_token)).await
}

/// What an unbinding without the operator token is told, when the server made the token.
const NO_OPERATOR: &str = "freeing a source's binding needs the operator token: send it as \
                           \"Authorization: Bearer TOKEN\"; the server printed it at start on \
                           its standard output, on the line \"inspector: \
                           http://HOST:PORT/#token=TOKEN\"";

/// The refusal of a `[[security.source]]` source's unbinding.
fn configured_refusal(source: &str) -> Value {
    json!({"ok": false, "detail": format!(
        "source \"{source}\" is bound by the configuration ([[security.source]]): remove it \
         there and restart to free it"
    )})
}

/// A squatter binds an unbound plugin's source with a token of its own and takes its tool over;
/// the owner is refused until the operator frees the binding, which leaves the tools as they
/// are; the owner's next registration with its token binds the source to it, and the squatter
/// is refused from then on.
#[actix_web::test]
async fn a_squatter_unbound_by_the_operator_and_the_owner_back_in() {
    let app = spawn_app(&["Lanlan"]).await;
    let owner = ClosedPort::new();
    let squatter = ClosedPort::new();
    let (status, _) = app
        .register(&tool("notes", "plugin:notes", &owner.url("/notes")))
        .await;
    assert_eq!(status, 200);
    // The squatter binds the source, clears the owner's tool and registers its own.
    let takeover = tool("notes", "plugin:notes", &squatter.url("/notes"));
    let (status, _) = post_as(&app, "/api/tools/register", &takeover, Some(TOKEN_B)).await;
    assert_eq!(status, 200);
    let owners = tool("notes", "plugin:notes", &owner.url("/notes"));
    let (status, answer) = post_as(&app, "/api/tools/register", &owners, Some(TOKEN_A)).await;
    assert_eq!((status, answer), (403, not_owner("plugin:notes")));
    let listed = json!({"sources": [
        {"source": "plugin:notes", "bound": true, "configured": false, "tools": 1, "dormant": 0}
    ]});
    assert_eq!(app.get("/api/sources").await, (200, listed));

    // Only the operator frees it: not the owner, nor anyone with a plugin's token.
    assert_eq!(
        unbind_with(&app, "plugin:notes", None).await,
        (401, json!({"ok": false, "detail": NO_OPERATOR}))
    );
    let (status, answer) = unbind_with(&app, "plugin:notes", Some(TOKEN_A)).await;
    assert_eq!(status, 403, "{answer}");
    assert!(
        answer["detail"]
            .as_str()
            .unwrap()
            .starts_with("freeing a source's binding needs the operator token, and the bearer"),
        "{answer}"
    );
    assert_eq!(
        unbind(&app, "plugin:notes").await,
        (
            200,
            json!({"ok": true, "source": "plugin:notes", "unbound": true})
        )
    );
    assert_eq!(
        unbind(&app, "plugin:notes").await,
        (
            404,
            json!({"ok": false, "detail": "source \"plugin:notes\" has no binding to free"})
        )
    );
    // Its tools stay.
    let listed = json!({"sources": [
        {"source": "plugin:notes", "bound": false, "configured": false, "tools": 1, "dormant": 0}
    ]});
    assert_eq!(app.get("/api/sources").await, (200, listed));
    let (_, tools) = app.get("/api/tools").await;
    assert_eq!(
        tools["tools_by_role"]["Lanlan"][0]["callback_url"],
        squatter.url("/notes")
    );

    // The owner is back in, and the squatter out.
    let (status, answer) = post_as(&app, "/api/tools/register", &owners, Some(TOKEN_A)).await;
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = post_as(&app, "/api/tools/register", &takeover, Some(TOKEN_B)).await;
    assert_eq!((status, answer), (403, not_owner("plugin:notes")));
    let (status, answer) = post_as(
        &app,
        "/api/tools/clear",
        &json!({"source": "plugin:notes"}),
        Some(TOKEN_B),
    )
    .await;
    assert_eq!((status, answer), (403, not_owner("plugin:notes")));
    let (_, tools) = app.get("/api/tools").await;
    assert_eq!(
        tools["tools_by_role"]["Lanlan"][0]["callback_url"],
        owner.url("/notes")
    );
    assert_eq!(app.get("/api/sources").await.1["sources"][0]["bound"], true);
}

/// With `--state`, the unbinding is stored before its answer: a server killed right after it
/// comes back with the source free, and the owner binds it.
#[actix_web::test]
async fn an_unbinding_is_stored_before_its_answer() {
    let dir = TempDir::new("sources-unbind-state");
    let path = dir.path("state.redb");
    let port = ClosedPort::new();
    let (mut child, addr) = serve(&path, &["Lanlan"], "info");
    let takeover = tool("notes", "plugin:notes", &port.url("/squat"));
    let (status, _) = post_with_token(addr, "/api/tools/register", &takeover, TOKEN_B);
    assert_eq!(status, 200);
    let operator = child.printed_token().expect("a made token").to_owned();
    let client = crate::helpers::test_client();
    let mut response = client
        .delete(format!("http://{addr}/api/sources/plugin:notes/binding"))
        .insert_header(("authorization", format!("Bearer {operator}")))
        .send()
        .await
        .expect("request sent");
    assert_eq!(response.status().as_u16(), 200);
    response.body().await.expect("body read");
    child.signal("KILL");
    assert!(!child.wait().success(), "the server was killed");

    let (mut child, addr) = serve(&path, &["Lanlan"], "info");
    let (_, sources) = get(addr, "/api/sources");
    assert_eq!(
        sources,
        json!({"sources": [
            {"source": "plugin:notes", "bound": false, "configured": false, "tools": 1, "dormant": 1}
        ]})
    );
    let owners = tool("notes", "plugin:notes", &port.url("/notes"));
    let (status, answer) = post_with_token(addr, "/api/tools/register", &owners, TOKEN_A);
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = post_with_token(addr, "/api/tools/register", &takeover, TOKEN_B);
    assert_eq!((status, answer), (403, not_owner("plugin:notes")));
    child.signal("KILL");
    child.wait();
}

/// A `[[security.source]]` source is bound from the first request on: a stranger's change is
/// refused with or without a token, the listing says it is configured, the owner's token works,
/// and the operator cannot free it (409).
#[actix_web::test]
async fn a_configured_source_refuses_a_stranger_from_the_first_request() {
    const VARIABLE: &str = "RT_TEST_CONFIGURED_NOTES_TOKEN";
    // SAFETY: no other test reads or writes this variable.
    unsafe { std::env::set_var(VARIABLE, TOKEN_A) };
    let mut config = settings(&["Lanlan"]);
    config.configured_sources = vec![ConfiguredSource {
        source: "plugin:notes".into(),
        token_env: VARIABLE.into(),
    }];
    let app = spawn_app_with(config).await;
    let port = ClosedPort::new();
    let stranger = tool("notes", "plugin:notes", &port.url("/stranger"));
    for token in [None, Some(TOKEN_B)] {
        let (status, answer) = post_as(&app, "/api/tools/register", &stranger, token).await;
        assert_eq!((status, answer), (403, not_owner("plugin:notes")));
    }
    let listed = json!({"sources": [
        {"source": "plugin:notes", "bound": true, "configured": true, "tools": 0, "dormant": 0}
    ]});
    assert_eq!(app.get("/api/sources").await, (200, listed));
    let owners = tool("notes", "plugin:notes", &port.url("/notes"));
    let (status, answer) = post_as(&app, "/api/tools/register", &owners, Some(TOKEN_A)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        unbind(&app, "plugin:notes").await,
        (409, configured_refusal("plugin:notes"))
    );
    let (status, answer) = post_as(
        &app,
        "/api/tools/clear",
        &json!({"source": "plugin:notes"}),
        None,
    )
    .await;
    assert_eq!((status, answer), (403, not_owner("plugin:notes")));
}

/// A `[[security.source]]` whose variable is missing, or holds no token, stops start-up with an
/// error that names the variable and the key, never the value.
#[test]
fn a_configured_sources_missing_or_bad_token_stops_start_up_naming_the_variable_and_the_key() {
    let dir = TempDir::new("sources-configured-errors");
    let config = dir.file(
        "runtime-tools.toml",
        "bind = \"127.0.0.1:0\"\n[[security.source]]\nsource = \"plugin:notes\"\n\
         token_env = \"RT_TEST_NOTES_TOKEN_UNSET\"\n",
    );
    let args = ["serve", "--config", config.to_str().unwrap()];
    for (env, expected) in [
        (
            None,
            "key `security.source[0].token_env`: environment variable RT_TEST_NOTES_TOKEN_UNSET \
             is not set: it must hold the X-Plugin-Token of source \"plugin:notes\"",
        ),
        (
            Some("tiny-tok"),
            "key `security.source[0].token_env`: the value of environment variable \
             RT_TEST_NOTES_TOKEN_UNSET must be 16 to 256 visible ASCII characters, got 8",
        ),
    ] {
        let vars: Vec<(&str, &str)> = env
            .map(|value| ("RT_TEST_NOTES_TOKEN_UNSET", value))
            .into_iter()
            .collect();
        let mut child = Child::start_with_env(&args, &vars);
        let status = child.wait();
        let stderr = child.stderr_after_exit();
        assert_eq!(status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
        assert!(
            !stderr.contains("tiny-tok"),
            "the value was repeated: {stderr}"
        );
    }
}

/// A restored tool of an unbound source is anyone's who answers HTTP on its callback's origin
/// (docs/api.md says so), but a listener that accepts connections and never answers does not
/// wake it: the probe sends a request and waits for an answer. Once an answer comes (any
/// status), the tool wakes.
#[actix_web::test]
async fn an_unbound_restored_tool_is_not_woken_by_a_bare_tcp_listener_but_by_an_http_answer() {
    let dir = TempDir::new("sources-bare-listener");
    let path = dir.path("state.redb");
    let port = ClosedPort::new();
    // `weather` is bound to token A; `open`, registered without a token, is nobody's.
    registered_then_killed(
        &path,
        &["Mio"],
        &port.url("/weather"),
        Some(&port.url("/open")),
    );
    let (fake, app, mut stream) = crate::durability::restarted_with_a_live_session(&path).await;

    use tokio::io::AsyncWriteExt;
    let listener = listen(port.port()).expect("listening on the tool's port");
    let accept = async || {
        tokio::time::timeout(crate::helpers::HTTP_DEADLINE, listener.accept())
            .await
            .expect("a probe connects")
            .expect("accepted")
            .0
    };
    // The unbound tool (`open`) is probed; a bound one (`weather`) would not be.
    let mut first = accept().await;
    let mut buf = Vec::new();
    let probe = read_request(&mut first, &mut buf)
        .await
        .expect("the probe sends a request, not just a connection");
    assert_eq!(
        (probe.method.as_str(), probe.path.as_str()),
        ("HEAD", "/open")
    );
    // Never answered: the probe gives up on it and connects again later.
    let mut second = accept().await;
    let mut buf = Vec::new();
    read_request(&mut second, &mut buf)
        .await
        .expect("the second probe's request");
    let (_, listing) = app.get("/api/tools").await;
    let states: Vec<(&str, &str)> = listing["tools_by_role"]["Mio"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap(), t["state"].as_str().unwrap()))
        .collect();
    assert_eq!(states, [("open", "dormant"), ("weather", "dormant")]);
    // An answer, whatever its status, wakes it.
    second
        .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
        .await
        .unwrap();
    let woke = stream
        .wait_for("tools.changed", |d| d["op"] == "restored")
        .await;
    assert_eq!(woke.data["name"], "open");
    fake.update_with_tools(&["open"]).await;
    drop(first);
}

/// A restored tool's dormant time counts from when it first went dormant, across restarts: a
/// server restarted more often than `dormant_ttl_seconds` still forgets a plugin that never
/// came back (here, the third start removes it at once, announced as `auto_removed`).
#[test]
fn a_restored_tools_dormant_time_counts_across_restarts() {
    const TTL: Duration = Duration::from_secs(2);
    let dir = TempDir::new("sources-dormant-time");
    let path = dir.path("state.redb");
    let config = dir.file(
        "runtime-tools.toml",
        &format!("[state]\ndormant_ttl_seconds = {}\n", TTL.as_secs()),
    );
    let port = ClosedPort::new();
    let body = tool("weather", "plugin:w", &port.url("/weather"));
    let start = |path: &std::path::Path| {
        let mut child = Child::start(&[
            "serve",
            "--config",
            config.to_str().unwrap(),
            "--state",
            path.to_str().unwrap(),
            "--bind",
            "127.0.0.1:0",
            "--character",
            "Lanlan",
        ]);
        let addr = child.listening("127.0.0.1");
        (child, addr)
    };
    let (mut first, addr) = start(&path);
    let (status, _) = crate::cli::post(addr, "/api/tools/register", &body);
    assert_eq!(status, 200);
    first.signal("KILL");
    first.wait();

    // The second start restores it dormant (its time starts then: before it listens) and is
    // killed at once.
    let (mut second, addr) = start(&path);
    let second_listening = Instant::now();
    let (_, listing) = get(addr, "/api/tools");
    assert_eq!(listing["tools_by_role"]["Lanlan"][0]["state"], "dormant");
    second.signal("KILL");
    second.wait();

    // The third start comes after the dormant time has passed since the second began, yet
    // less than that time after its own start: the tool is gone from its first answer on.
    // (What is waited for here is the wall clock itself: the dormant time passing.)
    let passed = second_listening.elapsed();
    std::thread::sleep(TTL.saturating_sub(passed) + Duration::from_millis(50));
    let (mut third, addr) = start(&path);
    let (_, listing) = get(addr, "/api/tools");
    assert_eq!(listing["tools_by_role"]["Lanlan"], json!([]), "{listing}");
    let (_, health) = get(addr, "/api/health");
    assert_eq!(
        (health["restored"].clone(), health["dormant"].clone()),
        (json!(1), json!(0))
    );
    third.signal("TERM");
    third.wait();
    let log = third.stderr_after_exit();
    assert!(
        log.contains("removed a restored tool that did not wake within the dormant time"),
        "{log}"
    );
}

/// Under `plugin_tokens = "required"`, a plugin's context and its progress need the token of a
/// bound source: 401 without a token, 403 with one that binds no source. The context then goes
/// to the live session, and its `context.added` event names the token's source.
#[actix_web::test]
async fn context_and_progress_under_required_need_the_token_of_a_bound_source() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let mut config = settings(&["Mio"]);
    config.characters[0].session = Some(SessionSettings::new(&fake.url, Dialect::Openai));
    config.plugin_tokens = TokenPolicy::Required;
    let app = spawn_app_with(config).await;
    fake.wait_connections(1).await;
    let mut stream = open(&app, "", None).await.expect("stream opens");
    stream.expect("hello").await;
    let required = json!({
        "ok": false,
        "detail": "an X-Plugin-Token header is required for every change: the server is \
                   configured with [security] plugin_tokens = \"required\""
    });
    let unbound = json!({
        "ok": false,
        "detail": "the X-Plugin-Token binds no source: with [security] plugin_tokens = \
                   \"required\" this needs the token of a source a registration (or \
                   [[security.source]]) bound"
    });
    let context = json!({"role": "Mio", "text": "The player just won."});
    let progress = "/api/tools/calls/call_none/progress";
    let report = json!({"message": "halfway"});
    for (path, body) in [("/api/sessions/context", &context), (progress, &report)] {
        assert_eq!(
            post_as(&app, path, body, None).await,
            (401, required.clone())
        );
        assert_eq!(
            post_as(&app, path, body, Some(TOKEN_B)).await,
            (403, unbound.clone()),
            "{path}"
        );
    }
    assert!(
        fake.texts()
            .iter()
            .all(|t| !t.contains("The player just won."))
    );

    let callback = CallbackServer::with("/slow", Reply::after_gate(Reply::output(json!("done"))));
    let slow = tool("slow", "plugin:notes", &callback.url("/slow"));
    let (status, answer) = post_as(&app, "/api/tools/register", &slow, Some(TOKEN_A)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        post_as(&app, "/api/sessions/context", &context, Some(TOKEN_A)).await,
        (
            200,
            json!({"ok": true, "affected_roles": ["Mio"], "failed_roles": []})
        )
    );
    let told = stream.wait_for("context.added", |_| true).await;
    assert_eq!(
        told.data,
        json!({"source": "plugin:notes", "role": "Mio", "text": "The player just won.",
               "respond": false, "affected_roles": ["Mio"], "failed_roles": []})
    );
    // Progress for a running call of the token's source.
    let invoke = crate::callback_server::spawn_invoke(&app, "slow");
    let received = callback.wait_for_requests(1).await;
    let call_id = received[0].json()["call_id"].as_str().unwrap().to_owned();
    let path = format!("/api/tools/calls/{call_id}/progress");
    assert_eq!(
        post_as(&app, &path, &report, Some(TOKEN_B)).await,
        (403, unbound)
    );
    let (status, answer) = post_as(&app, &path, &report, Some(TOKEN_A)).await;
    assert_eq!(status, 200, "{answer}");
    callback.open_gate();
    assert_eq!(invoke.await.unwrap()["output"], "done");
}

/// Without `required`, a context without a token still works; its event's source is `null`.
#[actix_web::test]
async fn a_context_without_a_token_names_no_source() {
    let app = spawn_app(&["Lanlan"]).await;
    let mut stream = open(&app, "", None).await.expect("stream opens");
    stream.expect("hello").await;
    let (status, answer) = app
        .post("/api/sessions/context", &json!({"text": "hello"}))
        .await;
    assert_eq!((status, answer["ok"].clone()), (200, json!(false)));
    let told = stream.wait_for("context.added", |_| true).await;
    assert_eq!(
        told.data,
        json!({"source": null, "role": null, "text": "hello", "respond": false,
               "affected_roles": [], "failed_roles": []})
    );
}
