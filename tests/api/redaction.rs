//! The keys the server holds never come back out of it: a realtime model whose error event, a
//! Gemini Live API whose close reason, an MCP server whose error (and stderr) quotes its key has
//! `[redacted]` in its place in the change answers, `GET /api/sessions`, the invoke answer, the
//! event stream and the server's log.

use std::path::PathBuf;
use std::time::Duration;

use indexmap::IndexMap;
use runtime_tools::{Dialect, McpServerSettings, McpTransport, Settings};
use serde_json::{Value, json};

use crate::callback_server::{error_text, invoke_ok};
use crate::cli::{Child, TempDir, get};
use crate::event_stream::{EventReader, open};
use crate::fake_gemini::{FakeGemini, SetupMode};
use crate::fake_realtime::{AckMode, EVENT_DEADLINE, FakeRealtime};
use crate::helpers::{TestApp, app_with_session, settings, spawn_app_with, tool_body};
use crate::python::{repo_file, venv_python};

const REDACTED: &str = "[redacted]";

/// Sets `name` to `key` for the server (each test names its own variable).
fn set_key(name: &str, key: &str) {
    // SAFETY: each test names its own variable; nothing else reads it.
    unsafe { std::env::set_var(name, key) };
}

/// Registers a tool for every character; the answer.
async fn register(app: &TestApp, name: &str) -> Value {
    let (status, answer) = app
        .register(&tool_body(name, "http://127.0.0.1:9/cb", "plugin:keys"))
        .await;
    assert_eq!(status, 200, "{answer}");
    answer
}

/// Every event of the stream until a `session.state` whose failed update says `redacted`.
async fn events_until_redacted(events: &mut EventReader) -> String {
    events
        .wait_for("session.state", |d| {
            d["last_sync"]["error"]
                .as_str()
                .is_some_and(|e| e.contains(REDACTED))
        })
        .await
        .data
        .to_string()
}

#[actix_web::test]
async fn a_realtime_model_that_quotes_the_key_in_an_error_has_it_redacted() {
    const KEY: &str = "sk-realtime-quoted-back-91c2e7";
    set_key("RT_TEST_REALTIME_KEY_QUOTED", KEY);
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let app = app_with_session(&fake.url, &[], Dialect::Openai, |s| {
        s.api_key_env = Some("RT_TEST_REALTIME_KEY_QUOTED".into())
    })
    .await;
    fake.wait_connections(1).await;
    let mut events = open(&app, "?role=Mio", None).await.expect("stream opens");
    events.expect("hello").await;
    // The model quotes the header it was given.
    let header = fake.authorizations()[0].clone().expect("the key was sent");
    assert_eq!(header, format!("Bearer {KEY}"));
    fake.set_mode(AckMode::Error(format!(
        "bad Authorization header: {header}"
    )));

    let answer = register(&app, "get_weather").await;
    assert_eq!(
        answer["failed_roles"],
        json!([{"role": "Mio", "error": format!(
            "model session refused the tool update: bad Authorization header: Bearer {REDACTED} \
             (invalid_value)")}])
    );
    let event = events_until_redacted(&mut events).await;
    let (_, sessions) = app.get("/api/sessions").await;
    let error = &sessions["sessions_by_role"]["Mio"]["last_sync"]["error"];
    assert!(
        error.as_str().is_some_and(|e| e.contains(REDACTED)),
        "{sessions}"
    );
    let everything = format!("{answer}{event}{sessions}");
    assert!(!everything.contains(KEY), "{everything}");
}

#[actix_web::test]
async fn a_gemini_close_reason_that_quotes_the_key_has_it_redacted() {
    const KEY: &str = "gemini-key-quoted-back-4d7a02";
    set_key("RT_TEST_GEMINI_KEY_QUOTED", KEY);
    let fake = FakeGemini::start(SetupMode::Complete).await;
    let mut settings = settings(&["Mio"]);
    let mut session = runtime_tools::SessionSettings::gemini(Some(&fake.url), Some("gemini-test"));
    session.api_key_env = Some("RT_TEST_GEMINI_KEY_QUOTED".into());
    settings.characters[0].session = Some(session);
    let app = spawn_app_with(settings).await;
    fake.nth_setup(1).await;
    let mut events = open(&app, "?role=Mio", None).await.expect("stream opens");
    events.expect("hello").await;
    // The API refuses the next setup, quoting the key it was given.
    let key = fake.keys()[0].clone().expect("the key was sent");
    fake.set_mode(SetupMode::Refuse(format!("API key {key} not valid")));

    let answer = register(&app, "get_weather").await;
    assert_eq!(
        answer["failed_roles"],
        json!([{"role": "Mio", "error": format!(
            "model session refused the tool update: the new connection failed: API key \
             {REDACTED} not valid")}])
    );
    let event = events_until_redacted(&mut events).await;
    let (_, sessions) = app.get("/api/sessions").await;
    let everything = format!("{answer}{event}{sessions}");
    assert!(everything.contains(REDACTED), "{everything}");
    assert!(!everything.contains(KEY), "{everything}");
}

/// The odd stdio MCP server (`tests/mcp_odd_stdio_server.py`) with `env` besides its own.
pub fn odd_stdio_server(python: PathBuf, env: &[(&str, &str)]) -> McpServerSettings {
    McpServerSettings {
        behavior: Default::default(),
        approval: Default::default(),
        limits: Default::default(),
        name: "odd".into(),
        transport: McpTransport::Stdio {
            command: python.to_string_lossy().into_owned(),
            args: vec![
                repo_file("tests/mcp_odd_stdio_server.py")
                    .to_string_lossy()
                    .into_owned(),
            ],
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<IndexMap<_, _>>(),
        },
        roles: None,
        timeout: Duration::from_secs(60),
    }
}

#[actix_web::test]
async fn an_mcp_server_that_quotes_its_token_has_it_redacted() {
    const TOKEN: &str = "mcp-service-token-quoted-6b1f";
    let python = venv_python().await;
    let app = spawn_app_with(Settings {
        mcp_servers: vec![odd_stdio_server(python, &[("SERVICE_TOKEN", TOKEN)])],
        ..settings(&["Lanlan"])
    })
    .await;
    let mut events = open(&app, "", Some("0")).await.expect("stream opens");
    events
        .wait_for("tools.changed", |d| d["source"] == "mcp:odd")
        .await;

    let result = invoke_ok(&app, "leak", json!({})).await;
    assert_eq!(
        error_text(&result),
        format!("Error executing tool leak: the service refused Authorization: Bearer {REDACTED}")
    );
    let (_, calls) = app.get("/api/calls").await;
    let (_, mcp) = app.get("/api/mcp").await;
    let everything = format!("{result}{calls}{mcp}");
    assert!(!everything.contains(TOKEN), "{everything}");
}

/// The server's log, at debug: the realtime model's refusal, which quotes the session's key,
/// and the MCP server's stderr and error, which quote its token.
#[actix_web::test]
async fn keys_quoted_back_never_reach_the_log() {
    const KEY: &str = "sk-log-quoted-back-0e5d88";
    const TOKEN: &str = "mcp-log-token-quoted-3c9a";
    let fake = FakeRealtime::start(AckMode::Error(format!(
        "bad Authorization header: Bearer {KEY}"
    )))
    .await;
    let python = venv_python().await;
    let dir = TempDir::new("redaction-log");
    let config = dir.file(
        "runtime-tools.toml",
        &format!(
            "bind = \"127.0.0.1:0\"\n\
             [[character]]\nname = \"Mio\"\n\
             [character.session]\nkind = \"openai-realtime\"\nurl = {url:?}\napi_key_env = \"RT_TEST_LOG_KEY\"\n\
             [[mcp_server]]\nname = \"odd\"\ncommand = {python:?}\nargs = [{script:?}]\n\
             env = {{ SERVICE_TOKEN = {TOKEN:?} }}\n",
            url = fake.url,
            python = python.to_string_lossy(),
            script = repo_file("tests/mcp_odd_stdio_server.py").to_string_lossy(),
        ),
    );
    let config = config.to_string_lossy().into_owned();
    let (status, stderr) = actix_web::rt::task::spawn_blocking(move || {
        let mut child = Child::start_logging_with_env(
            &["serve", "--config", &config],
            "debug",
            &[("RT_TEST_LOG_KEY", KEY)],
        );
        let addr = child.listening("127.0.0.1");
        // The model refuses the first update; the MCP server's tools are listed.
        let deadline = std::time::Instant::now() + EVENT_DEADLINE;
        loop {
            let (_, sessions) = get(addr, "/api/sessions");
            let (_, tools) = get(addr, "/api/tools");
            let listed = tools["tools_by_role"]["Mio"].as_array().cloned();
            let mcp = listed.unwrap_or_default();
            if sessions["sessions_by_role"]["Mio"]["last_sync"]["ok"] == json!(false)
                && mcp.iter().any(|t| t["name"] == "leak")
            {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{sessions} {mcp:?}; stderr: {}",
                child.stderr_after_exit()
            );
            std::thread::yield_now();
        }
        let (status, answer) = crate::cli::post(
            addr,
            "/api/tools/invoke",
            &json!({"name": "leak", "arguments": {}}),
        );
        assert_eq!(status, 200, "{answer}");
        child.signal("TERM");
        let status = child.wait();
        (status, child.stderr_after_exit())
    })
    .await
    .expect("the child's task");
    assert!(status.success(), "{status}: {stderr}");
    assert!(
        stderr.contains(&format!("Bearer {REDACTED}"))
            && stderr.contains(&format!("SERVICE_TOKEN={REDACTED}")),
        "{stderr}"
    );
    assert!(!stderr.contains(KEY), "{stderr}");
    assert!(!stderr.contains(TOKEN), "{stderr}");
}
