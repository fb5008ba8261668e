//! The examples under `examples/` work, so they cannot rot: the Python plugin registers its tool,
//! answers a call, registers again when the event stream shows a restarted server or a change
//! that removed its tool, falls back to polling a server without the stream, and clears its tools
//! on SIGTERM;
//! the Rust in-process plugin's `run` registers an actor tool and calls it over HTTP.
//!
//! The configuration file of `examples/` and the one shown in the README load, too.
//!
//! The Python plugin runs as a child process; the test follows its progress lines on stdout,
//! waiting on each with a deadline, never sleeping.

use std::process::Command;

use runtime_tools::config::Settings;
use serde_json::{Value, json};

use crate::child::LineChild;
use crate::helpers::{TestApp, settings, spawn_app, spawn_app_with};

#[allow(dead_code)]
#[path = "../../examples/inprocess_plugin.rs"]
mod inprocess_plugin;

const WEATHER_PLUGIN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/weather_plugin.py");

const EXAMPLE_CONFIG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/runtime-tools.toml");

const README: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/README.md");

/// `examples/weather_plugin.py` as a child process.
pub struct WeatherPlugin;

impl WeatherPlugin {
    pub fn start(server: &str) -> LineChild {
        Self::start_polling_every(server, "0.1")
    }

    /// Starts the plugin; `poll_interval` (seconds) is how often it polls while the event stream
    /// is unavailable.
    fn start_polling_every(server: &str, poll_interval: &str) -> LineChild {
        LineChild::spawn(
            Command::new("python3")
                .arg(WEATHER_PLUGIN)
                .args([
                    "--server",
                    server,
                    "--port",
                    "0",
                    "--poll-interval",
                    poll_interval,
                ])
                .env("PYTHONUNBUFFERED", "1"),
        )
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
    first.handle.stop(false).await;
    plugin.expect_line("event stream lost").await;
    plugin
        .expect_line(&format!("server {} unreachable", first.base))
        .await;
    let second = spawn_app_with(Settings {
        bind: first.addr,
        ..settings(&["Lanlan"])
    })
    .await;
    // The stream's greeting names a new instance: that, not polling, brings the tool back.
    plugin.expect_line("the server restarted (instance ").await;
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
async fn weather_plugin_registers_again_when_an_event_shows_its_tool_removed() {
    let app = spawn_app(&["Lanlan"]).await;
    // Polling once an hour: only the event stream can bring the tool back within the deadline.
    let mut plugin = WeatherPlugin::start_polling_every(&app.base, "3600");
    plugin.expect_line("registered ").await;
    let (status, body) = app
        .post("/api/tools/clear", &json!({"source": "plugin:weather"}))
        .await;
    assert_eq!((status, &body["removed"]), (200, &json!(1)));
    plugin
        .expect_line("get_weather is missing from the server; registering again")
        .await;
    assert_eq!(
        plugin.expect_line("registered ").await,
        "registered get_weather (affected_roles: Lanlan)"
    );
    assert_eq!(
        app.tool_names(None).await,
        json!({"Lanlan": ["get_weather"]})
    );
    plugin.signal("TERM");
    assert_eq!(plugin.wait_exit().await, Some(0));
}

/// A server without the event stream (an older version): forwards every request to `app`, except
/// `GET /api/events`, which is not found.
async fn server_without_events(app: &TestApp) -> (String, actix_web::dev::ServerHandle) {
    use actix_web::{HttpRequest, HttpResponse, web};

    let upstream = app.base.clone();
    let server = actix_web::HttpServer::new(move || {
        let upstream = upstream.clone();
        actix_web::App::new().default_service(web::to(
            move |request: HttpRequest, body: web::Bytes| {
                let upstream = upstream.clone();
                async move {
                    if request.path() == "/api/events" {
                        return HttpResponse::NotFound()
                            .json(json!({"ok": false, "detail": "Not Found"}));
                    }
                    let client = awc::Client::default();
                    let mut forwarded = client
                        .request(
                            request.method().clone(),
                            format!("{upstream}{}", request.uri()),
                        )
                        .insert_header(("content-type", "application/json"))
                        .send_body(body)
                        .await
                        .expect("upstream answers");
                    let answer = forwarded.body().await.expect("upstream body");
                    HttpResponse::build(forwarded.status())
                        .content_type("application/json")
                        .body(answer)
                }
            },
        ))
    })
    .workers(1)
    .bind("127.0.0.1:0")
    .expect("proxy binds");
    let address = format!("http://{}", server.addrs()[0]);
    let server = server.run();
    let handle = server.handle();
    actix_web::rt::spawn(server);
    (address, handle)
}

#[actix_web::test]
async fn weather_plugin_polls_a_server_without_the_event_stream() {
    let app = spawn_app(&["Lanlan"]).await;
    let (old_server, handle) = server_without_events(&app).await;
    let mut plugin = WeatherPlugin::start(&old_server);
    assert_eq!(
        plugin.expect_line("event stream unavailable").await,
        "event stream unavailable (HTTP 404); polling every 0.1 s"
    );
    assert_eq!(
        plugin.expect_line("registered ").await,
        "registered get_weather (affected_roles: Lanlan)"
    );
    // Polling notices a removal too.
    let (status, _) = app
        .post("/api/tools/clear", &json!({"source": "plugin:weather"}))
        .await;
    assert_eq!(status, 200);
    plugin
        .expect_line("get_weather is missing from the server; registering again")
        .await;
    plugin.expect_line("registered ").await;
    assert_eq!(
        app.tool_names(None).await,
        json!({"Lanlan": ["get_weather"]})
    );
    plugin.signal("TERM");
    plugin.expect_line("cleared 1 tool(s)").await;
    assert_eq!(plugin.wait_exit().await, Some(0));
    handle.stop(false).await;
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
