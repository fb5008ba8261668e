//! The examples under `examples/` work, so they cannot rot: the Python plugin registers its tool,
//! answers a call, registers again after the server restarts and clears its tools on SIGTERM;
//! the Rust in-process plugin's `run` registers an actor tool and calls it over HTTP; the
//! in-process session's `run` joins a character, takes its tools and has its model call one; the
//! Python realtime app talks to the fake model through the relay with the official SDK.
//!
//! The configuration file of `examples/` and the one shown in the README load, too.
//!
//! The Python plugin runs as a child process; the test follows its progress lines on stdout,
//! waiting on each with a deadline, never sleeping.

use std::process::{Command, Stdio};
use std::time::Duration;

use runtime_tools::config::Settings;
use runtime_tools::session::protocol::Dialect;
use runtime_tools::session::settings::{SessionMode, SessionSettings};
use serde_json::{Value, json};

use crate::callback_server::{CallbackServer, Reply};
use crate::fake_realtime::{AckMode, FakeRealtime};
use crate::helpers::{Lines, TestApp, settings, spawn_app, spawn_app_with, tool_body};
use crate::schema::python;

#[allow(dead_code)]
#[path = "../../examples/inprocess_plugin.rs"]
mod inprocess_plugin;

#[allow(dead_code)]
#[path = "../../examples/inprocess_session.rs"]
mod inprocess_session;

/// Longest wait for the plugin to start, register, notice a restart or stop (a loaded machine).
const DEADLINE: Duration = Duration::from_secs(60);

const WEATHER_PLUGIN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/weather_plugin.py");

const REALTIME_APP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/realtime_app.py");

const EXAMPLE_CONFIG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/runtime-tools.toml");

const README: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/README.md");

/// An example run as a child process (`examples/weather_plugin.py`,
/// `examples/realtime_app.py`); killed if a test fails before stopping it.
struct WeatherPlugin {
    /// `None` once it has been waited for.
    child: Option<std::process::Child>,
    /// Its stdout, line by line.
    lines: Lines,
    /// Every line so far, for failure messages.
    seen: Vec<String>,
}

impl WeatherPlugin {
    fn start(server: &str) -> Self {
        let mut command = Command::new("python3");
        command.arg(WEATHER_PLUGIN).args([
            "--server",
            server,
            "--port",
            "0",
            "--poll-interval",
            "0.1",
        ]);
        Self::run(command)
    }

    /// Runs `command` with its stdout followed line by line.
    fn run(mut command: Command) -> Self {
        let mut child = command
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the example starts");
        let lines = Lines::follow(child.stdout.take().expect("piped stdout"));
        Self {
            child: Some(child),
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits for the next line that starts with `prefix`; returns it.
    async fn expect_line(&mut self, prefix: &str) -> String {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.lines.next(left).await {
                Ok(Some(line)) => {
                    self.seen.push(line.clone());
                    if line.starts_with(prefix) {
                        return line;
                    }
                }
                Ok(None) => panic!(
                    "the example exited before {prefix:?}; its output: {:#?}",
                    self.seen
                ),
                Err(()) => panic!(
                    "no {prefix:?} line within {DEADLINE:?}; output: {:#?}",
                    self.seen
                ),
            }
        }
    }

    fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("plugin running").id();
        let status = Command::new("kill")
            .args([format!("-{signal}"), pid.to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// Waits (off the actors' thread) for the plugin to exit; returns its exit code.
    async fn wait_exit(mut self) -> Option<i32> {
        let mut child = self.child.take().expect("plugin running");
        let status = tokio::time::timeout(
            DEADLINE,
            actix_web::rt::task::spawn_blocking(move || child.wait()),
        )
        .await
        .expect("plugin exits in time")
        .expect("wait task")
        .expect("plugin waited for");
        status.code()
    }
}

impl Drop for WeatherPlugin {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The tool a listing shows for the plugin's callback.
fn weather_view(callback_url: &str) -> Value {
    json!({"name": "get_weather", "description": "Get the current weather for a city.",
           "source": "plugin:weather", "callback_url": callback_url, "is_remote": true})
}

async fn invoke_weather(app: &TestApp, location: &str, call_id: &str) -> (u16, Value) {
    app.post(
        "/api/tools/invoke",
        &json!({"name": "get_weather", "arguments": {"location": location},
                "role": "Lanlan", "call_id": call_id}),
    )
    .await
}

#[actix_web::test]
async fn weather_plugin_registers_answers_and_clears_on_sigterm() {
    let app = spawn_app(&["Lanlan", "Mio"]).await;
    let mut plugin = WeatherPlugin::start(&app.base);
    let callback_url = plugin
        .expect_line("callback listening on ")
        .await
        .trim_start_matches("callback listening on ")
        .to_owned();
    assert_eq!(
        plugin.expect_line("registered ").await,
        "registered get_weather (affected_roles: Lanlan, Mio)"
    );
    assert_eq!(
        app.listing(None).await,
        json!({"ok": true, "tools_by_role": {
            "Lanlan": [weather_view(&callback_url)],
            "Mio": [weather_view(&callback_url)],
        }})
    );

    assert_eq!(
        invoke_weather(&app, "Shanghai", "call_1").await,
        (
            200,
            json!({"ok": true, "name": "get_weather", "call_id": "call_1",
                   "output": {"location": "Shanghai", "temperature_c": 28, "conditions": "sunny"},
                   "is_error": false})
        )
    );
    assert_eq!(
        invoke_weather(&app, "Atlantis", "call_2").await,
        (
            200,
            json!({"ok": true, "name": "get_weather", "call_id": "call_2", "output": null,
                   "is_error": true,
                   "error": "location not found (known: Shanghai, Tokyo, Berlin)"})
        )
    );

    plugin.signal("TERM");
    assert_eq!(
        plugin.expect_line("cleared ").await,
        "cleared 2 tool(s) of plugin:weather"
    );
    assert_eq!(plugin.wait_exit().await, Some(0));
    assert_eq!(
        app.listing(None).await,
        json!({"ok": true, "tools_by_role": {"Lanlan": [], "Mio": []}})
    );
}

#[actix_web::test]
async fn weather_plugin_registers_again_after_the_server_restarts() {
    let first = spawn_app(&["Lanlan"]).await;
    let mut plugin = WeatherPlugin::start(&first.base);
    plugin.expect_line("registered ").await;

    // Stop the server; the plugin notices, then a new server on the same address starts empty.
    first.handle.stop(true).await;
    plugin
        .expect_line(&format!("server {} unreachable", first.base))
        .await;
    let second = spawn_app_with(Settings {
        bind: first.addr,
        ..settings(&["Lanlan"])
    })
    .await;
    plugin
        .expect_line("get_weather is missing from the server")
        .await;
    assert_eq!(
        plugin.expect_line("registered ").await,
        "registered get_weather (affected_roles: Lanlan)"
    );
    let (status, answer) = invoke_weather(&second, "Tokyo", "call_3").await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["output"],
        json!({"location": "Tokyo", "temperature_c": 22, "conditions": "cloudy"})
    );

    plugin.signal("INT");
    plugin.expect_line("cleared 1 tool(s)").await;
    assert_eq!(plugin.wait_exit().await, Some(0));
    assert_eq!(
        second.listing(None).await,
        json!({"ok": true, "tools_by_role": {"Lanlan": []}})
    );
}

#[actix_web::test]
async fn inprocess_plugin_example_calls_its_actor_tool_over_http() {
    let answer = inprocess_plugin::run().await.expect("the example runs");
    assert_eq!(
        answer,
        json!({"ok": true, "name": "convert_temperature", "call_id": "call_example",
               "output": {"celsius": 28.0, "fahrenheit": 28.0 * 9.0 / 5.0 + 32.0, "calls_answered": 1},
               "is_error": false})
    );
}

#[actix_web::test]
async fn inprocess_session_example_takes_the_tools_and_its_model_calls_one() {
    let outcome = inprocess_session::run().await.expect("the example runs");
    // The join's list (empty), then the registration's.
    assert_eq!(outcome["updates"], 2);
    assert_eq!(outcome["answer"], r#"{"fahrenheit":82.4}"#);
    let connections = &outcome["connections"];
    assert_eq!(
        connections.as_array().map(Vec::len),
        Some(1),
        "{connections}"
    );
    assert_eq!(connections[0]["kind"], "embedded");
    assert_eq!(connections[0]["acknowledged_tools"], 1);
    assert_eq!(connections[0]["calls_answered"], 1);
    assert_eq!(connections[0]["last_sync"]["ok"], true);
}

#[actix_web::test]
async fn realtime_app_example_talks_through_the_relay() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let weather = CallbackServer::with("/cb", Reply::output(json!({"temperature_c": 28})));
    let mut config = settings(&["Mio"]);
    let mut session = SessionSettings::new(&fake.url, Dialect::Openai);
    session.mode = SessionMode::Relay;
    config.characters[0].session = Some(session);
    let app = spawn_app_with(config).await;
    let (status, _) = app
        .register(&tool_body(
            "get_weather",
            &weather.url("/cb"),
            "plugin:weather",
        ))
        .await;
    assert_eq!(status, 200);

    let mut command = Command::new(python().expect("the test virtualenv is ready"));
    command.arg(REALTIME_APP).args([
        "--server",
        &format!("ws://{}/v1", app.addr),
        "--character",
        "Mio",
    ]);
    let mut example = WeatherPlugin::run(command);
    assert_eq!(
        example.expect_line("session tools: ").await,
        "session tools: app_clock, get_weather"
    );
    // The question, then the request for a response, from the app.
    fake.wait_for("the app's response.create", |events| {
        events
            .iter()
            .any(|e| e["type"] == "response.create" && e.get("event_id").is_none())
            .then_some(())
    })
    .await;
    let asked = fake.events_of("conversation.item.create");
    assert_eq!(
        asked[0]["item"]["content"],
        json!([{"type": "input_text", "text": "What is the weather in Tokyo?"}])
    );

    // The model calls the registered tool: the server answers it, the app only reports it.
    fake.push_call("r1", "c1", "get_weather").await;
    assert_eq!(
        example.expect_line("the model calls ").await,
        "the model calls get_weather; the server answers it"
    );
    fake.wait_for("the server's answer", |events| {
        events
            .iter()
            .any(|e| {
                e["item"]["call_id"] == "c1" && e["item"]["output"] == "{\"temperature_c\":28}"
            })
            .then_some(())
    })
    .await;
    // Then the app's own tool: the app answers it.
    fake.push_call("r2", "c2", "app_clock").await;
    assert_eq!(
        example.expect_line("answering ").await,
        "answering app_clock myself"
    );
    fake.wait_for("the app's answer", |events| {
        events
            .iter()
            .any(|e| e["item"]["call_id"] == "c2" && e["item"]["type"] == "function_call_output")
            .then_some(())
    })
    .await;
    // And the model's words end the run.
    fake.push(
        json!({"type": "response.output_text.delta", "event_id": "srv_t", "response_id": "r3",
                     "item_id": "i3", "output_index": 0, "content_index": 0,
                     "delta": "Sunny and 28 °C in Tokyo."}),
    )
    .await;
    fake.push(json!({"type": "response.done", "event_id": "srv_d3",
                     "response": {"id": "r3", "status": "completed", "output": []}}))
        .await;
    assert_eq!(
        example.expect_line("model: ").await,
        "model: Sunny and 28 °C in Tokyo."
    );
    assert_eq!(example.expect_line("done").await, "done");
    assert_eq!(example.wait_exit().await, Some(0));
    assert_eq!(
        weather.received().len(),
        1,
        "only the registered tool reached its callback"
    );
}

/// What a configuration names: `(character, session URL)` in order, and the dispatch limit.
fn outline(settings: &Settings) -> (Vec<(String, Option<String>)>, usize) {
    let characters = settings
        .characters
        .iter()
        .map(|c| (c.name.clone(), c.session.as_ref().map(|s| s.url.clone())))
        .collect();
    (characters, settings.dispatch.max_response_bytes)
}

#[test]
fn the_example_configuration_and_the_readmes_copy_load() {
    let example = Settings::from_file(std::path::Path::new(EXAMPLE_CONFIG)).expect("example loads");
    let expected = (
        vec![
            ("Lanlan".to_owned(), None),
            (
                "Mio".to_owned(),
                Some("ws://127.0.0.1:48913/v1/realtime".to_owned()),
            ),
        ],
        4 * 1024 * 1024,
    );
    assert_eq!(outline(&example), expected);
    assert_eq!(example.bind, "127.0.0.1:48911".parse().unwrap());

    let readme = std::fs::read_to_string(README).expect("README.md is readable");
    let blocks: Vec<&str> = readme
        .split("```toml\n")
        .skip(1)
        .filter_map(|rest| rest.split("```").next())
        .collect();
    assert_eq!(
        blocks.len(),
        2,
        "the walk-through's relay.toml and the full configuration"
    );
    // The walk-through's relay configuration: Mio relays to OpenAI with the server's key.
    let relay = Settings::from_toml(blocks[0]).expect("the README's relay.toml loads");
    let mio = relay.characters[0]
        .session
        .as_ref()
        .expect("Mio has a session");
    assert_eq!(
        (mio.mode, mio.url.as_str(), mio.api_key_env.as_deref()),
        (
            SessionMode::Relay,
            "wss://api.openai.com/v1/realtime",
            Some("OPENAI_API_KEY")
        )
    );
    let shown = Settings::from_toml(blocks[1]).expect("the README's configuration loads");
    assert_eq!(shown, example);
}
