//! The examples under `examples/` work, so they cannot rot: the Python plugin registers its tool,
//! answers a call, registers again after the server restarts and clears its tools on SIGTERM;
//! the Rust in-process plugin's `run` registers an actor tool and calls it over HTTP.
//!
//! The configuration file of `examples/` and the one shown in the README load, too.
//!
//! The Python plugin runs as a child process; the test follows its progress lines on stdout,
//! waiting on each with a deadline, never sleeping.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use runtime_tools::config::Settings;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::helpers::{TestApp, settings, spawn_app, spawn_app_with};

#[allow(dead_code)]
#[path = "../../examples/inprocess_plugin.rs"]
mod inprocess_plugin;

/// Longest wait for the plugin to start, register, notice a restart or stop (a loaded machine).
const DEADLINE: Duration = Duration::from_secs(60);

const WEATHER_PLUGIN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/weather_plugin.py");

const EXAMPLE_CONFIG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/runtime-tools.toml");

const README: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/README.md");

/// `examples/weather_plugin.py` as a child process; killed if a test fails before stopping it.
struct WeatherPlugin {
    /// `None` once it has been waited for.
    child: Option<std::process::Child>,
    /// Its stdout, line by line (read on a thread, so waiting never blocks the actors).
    lines: mpsc::UnboundedReceiver<String>,
    /// Every line so far, for failure messages.
    seen: Vec<String>,
}

impl WeatherPlugin {
    fn start(server: &str) -> Self {
        let mut child = Command::new("python3")
            .arg(WEATHER_PLUGIN)
            .args(["--server", server, "--port", "0", "--poll-interval", "0.1"])
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 runs examples/weather_plugin.py");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child: Some(child),
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits for the next line that starts with `prefix`; returns it.
    async fn expect_line(&mut self, prefix: &str) -> String {
        let waited = tokio::time::timeout(DEADLINE, async {
            while let Some(line) = self.lines.recv().await {
                self.seen.push(line.clone());
                if line.starts_with(prefix) {
                    return Some(line);
                }
            }
            None
        })
        .await;
        match waited {
            Ok(Some(line)) => line,
            Ok(None) => panic!(
                "plugin exited before {prefix:?}; its output: {:#?}",
                self.seen
            ),
            Err(_) => panic!(
                "no {prefix:?} line within {DEADLINE:?}; output: {:#?}",
                self.seen
            ),
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
    // Arguments that miss the schema's required location never reach the plugin (the README's
    // walk-through shows this call).
    assert_eq!(
        app.post(
            "/api/tools/invoke",
            &json!({"name": "get_weather", "arguments": {"city": "Shanghai"}, "call_id": "call_2"}),
        )
        .await,
        (
            200,
            json!({"ok": true, "name": "get_weather", "call_id": "call_2", "output": null,
                   "is_error": true,
                   "error": "arguments for get_weather do not match its parameters: /location is \
                             required. Call get_weather again with arguments that match."})
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
    assert!(example.dispatch.validate_arguments);

    let readme = std::fs::read_to_string(README).expect("README.md is readable");
    let block = readme
        .split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("the README shows a TOML configuration");
    let shown = Settings::from_toml(block).expect("the README's configuration loads");
    assert_eq!(shown, example);
}
