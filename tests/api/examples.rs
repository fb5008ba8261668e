//! The examples under `examples/` work, so they cannot rot: the Python plugin registers its tool,
//! answers a call, registers again when the event stream shows a restarted server or a change
//! that removed its tool, falls back to polling a server without the stream, and clears its tools
//! on SIGTERM; the Rust in-process plugin's `run` registers an actor tool and calls it over
//! HTTP; the in-process session's `run` joins a character, takes its tools and has its model call
//! one; the Python realtime app talks to the fake model through the relay with the official SDK;
//! the Python chat app chats through the chat endpoint with a fake chat model; the Python agent
//! app (the OpenAI Agents SDK's default model) through the Responses API with a fake of it.
//!
//! The configuration file of `examples/` and the ones shown in the README load, too.
//!
//! Every example plugin sends its `X-Plugin-Token`: its source is listed bound
//! (`GET /api/sources`), and a change with another token is refused. The weather plugin makes its
//! token and keeps it in a file of mode 0600 when no variable holds one.
//!
//! The Python examples run as child processes; the test follows their progress lines on stdout,
//! waiting on each with a deadline, never sleeping.

use std::process::Command;

use runtime_tools::{Dialect, SessionMode, SessionSettings, Settings};
use serde_json::{Value, json};

use crate::callback_server::{CallbackServer, Reply};
use crate::chat::{chat_server, register_weather};
use crate::child::LineChild;
use crate::fake_chat::{Answer, FakeChat, call_chunks, text_chunks};
use crate::fake_realtime::{AckMode, FakeRealtime};
use crate::helpers::{TestApp, settings, spawn_app, spawn_app_with, tool_body};
use crate::python::venv_python;

#[allow(dead_code)]
#[path = "../../examples/inprocess_plugin.rs"]
mod inprocess_plugin;

#[allow(dead_code)]
#[path = "../../examples/inprocess_session.rs"]
mod inprocess_session;

const WEATHER_PLUGIN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/weather_plugin.py");

const REALTIME_APP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/realtime_app.py");

const CHAT_APP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/chat_app.py");

const AGENT_APP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/agent_app.py");

const EXAMPLE_CONFIG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/runtime-tools.toml");

const README: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/README.md");

/// The weather plugin's token in these tests (`WEATHER_PLUGIN_TOKEN`).
pub const WEATHER_TOKEN: &str = "weather-plugin-test-token-0001";

/// The slow tool's token (`SLOW_TOOL_TOKEN`).
const SLOW_TOOL_TOKEN: &str = "slow-tool-test-token-0000001";

/// `examples/weather_plugin.py` as a child process.
pub struct WeatherPlugin;

impl WeatherPlugin {
    /// Starts the plugin with [`WEATHER_TOKEN`] in its variable.
    pub fn start(server: &str) -> LineChild {
        Self::start_polling_every(server, "0.1")
    }

    /// Starts the plugin; `poll_interval` (seconds) is how often it polls while the event stream
    /// is unavailable.
    fn start_polling_every(server: &str, poll_interval: &str) -> LineChild {
        LineChild::spawn(
            Self::command(server, poll_interval).env("WEATHER_PLUGIN_TOKEN", WEATHER_TOKEN),
        )
    }

    /// Starts the plugin without the token's variable: it makes its token and keeps it in
    /// `token_file`.
    fn start_keeping_its_token_in(server: &str, token_file: &std::path::Path) -> LineChild {
        LineChild::spawn(
            Self::command(server, "0.1")
                .env_remove("WEATHER_PLUGIN_TOKEN")
                .arg("--token-file")
                .arg(token_file),
        )
    }

    fn command(server: &str, poll_interval: &str) -> Command {
        let mut command = Command::new("python3");
        command
            .arg(WEATHER_PLUGIN)
            .args([
                "--server",
                server,
                "--port",
                "0",
                "--poll-interval",
                poll_interval,
            ])
            .env("PYTHONUNBUFFERED", "1");
        command
    }
}

/// Asserts that `source` is bound (the example sent its token) and that a clear with another
/// plugin's token is refused.
async fn assert_bound(app: &TestApp, source: &str) {
    let (status, sources) = app.get("/api/sources").await;
    assert_eq!(status, 200);
    let listed = sources["sources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["source"] == source)
        .unwrap_or_else(|| panic!("{source} is not listed: {sources}"));
    assert_eq!(listed["bound"], true, "{sources}");
    let clear = json!({"source": source});
    let stranger = Some(crate::ownership::TOKEN_B);
    let (status, answer) =
        crate::ownership::post_as(app, "/api/tools/clear", &clear, stranger).await;
    assert_eq!((status, answer), (403, crate::ownership::not_owner(source)));
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
    let dir = crate::cli::TempDir::new("weather-plugin-token");
    let token_file = dir.path("weather.token");
    let mut plugin = WeatherPlugin::start_keeping_its_token_in(&app.base, &token_file);
    assert_eq!(
        plugin.expect_line("X-Plugin-Token ").await,
        format!(
            "X-Plugin-Token made now and kept in {}",
            token_file.display()
        )
    );
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
    // It registered with the token it made, kept for its owner's eyes only.
    use std::os::unix::fs::PermissionsExt;
    let kept = std::fs::metadata(&token_file).expect("the token file");
    assert_eq!(kept.permissions().mode() & 0o777, 0o600);
    let token = std::fs::read_to_string(&token_file).unwrap();
    assert_eq!(token.trim().len(), 32, "128 random bits in hex");
    assert_bound(&app, "plugin:weather").await;
    assert_eq!(app.tool_names(None).await["Mio"], json!(["get_weather"]));

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
    // Its own token may clear it (nobody else's may).
    let (status, body) = crate::ownership::post_as(
        &app,
        "/api/tools/clear",
        &json!({"source": "plugin:weather"}),
        Some(WEATHER_TOKEN),
    )
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
                    let mut forwarding = client
                        .request(
                            request.method().clone(),
                            format!("{upstream}{}", request.uri()),
                        )
                        .insert_header(("content-type", "application/json"));
                    if let Some(token) = request.headers().get("x-plugin-token") {
                        forwarding = forwarding.insert_header(("x-plugin-token", token.clone()));
                    }
                    let mut forwarded = forwarding.send_body(body).await.expect("upstream answers");
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
    assert_bound(&app, "plugin:weather").await;
    // Polling notices a removal too.
    let (status, _) = crate::ownership::post_as(
        &app,
        "/api/tools/clear",
        &json!({"source": "plugin:weather"}),
        Some(WEATHER_TOKEN),
    )
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

#[actix_web::test]
async fn inprocess_session_example_takes_the_tools_and_its_model_calls_one() {
    let outcome = inprocess_session::run().await.expect("the example runs");
    // The join's list (empty), then the two registrations'; each announced as `session.state`.
    assert_eq!(outcome["updates"], 3);
    assert_eq!(outcome["announced"], 3);
    assert_eq!(outcome["answer"], r#"{"fahrenheit":82.4}"#);
    // The slow call the person interrupted: dropped, answered as cancelled, announced so.
    assert_eq!(outcome["courier_dropped"], true);
    let interrupted = outcome["interrupted"]
        .as_array()
        .expect("one answer per call");
    assert_eq!(interrupted.len(), 1, "{outcome}");
    let told: Value = serde_json::from_str(interrupted[0].as_str().unwrap()).unwrap();
    assert!(
        told["error"].as_str().is_some_and(|e| e.starts_with(
            "cancelled because the person interrupted: a new user turn began after the call had run "
        )),
        "{told}"
    );
    assert_eq!(outcome["cancelled"], 1);
    let connections = &outcome["connections"];
    assert_eq!(
        connections.as_array().map(Vec::len),
        Some(1),
        "{connections}"
    );
    assert_eq!(connections[0]["kind"], "embedded");
    assert_eq!(connections[0]["acknowledged_tools"], 2);
    assert_eq!(connections[0]["calls_answered"], 2);
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

    let mut example = LineChild::spawn(
        Command::new(venv_python().await)
            .arg(REALTIME_APP)
            .args([
                "--server",
                &format!("ws://{}/v1", app.addr),
                "--character",
                "Mio",
            ])
            .env("PYTHONUNBUFFERED", "1"),
    );
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

#[actix_web::test]
async fn chat_app_example_chats_through_the_server() {
    let upstream = FakeChat::start();
    let app = chat_server(&upstream.base(), |chat| chat.model = Some("qwen2.5".into())).await;
    let weather = CallbackServer::with("/weather", Reply::output(json!({"temperature_c": 28})));
    register_weather(&app, &weather).await;
    upstream.script([
        // The model calls the plugin's tool (the server runs it), then says something and
        // calls the app's; then it answers in words.
        Answer::stream(call_chunks(
            "c1",
            None,
            &[("call_w", "get_weather", json!({"location": "Tokyo"}))],
        )),
        Answer::stream(call_chunks(
            "c2",
            Some("It is 28 °C in Tokyo."),
            &[("call_t", "app_clock", json!({}))],
        )),
        Answer::stream(text_chunks("c3", &["And it is ", "ten o'clock."], (1, 1))),
    ]);

    let example = LineChild::spawn(
        Command::new(venv_python().await)
            .arg(CHAT_APP)
            .args(["--server", &app.url("/v1"), "--character", "Mio"])
            .env("PYTHONUNBUFFERED", "1"),
    );

    the_apps_conversation(example).await;
    assert_eq!(weather.received().len(), 1);
    let bodies = upstream.bodies();
    assert_eq!(bodies.len(), 3);
    assert!(
        bodies.iter().all(|b| b["model"] == "qwen2.5"),
        "the configured model"
    );
    let last = bodies[2]["messages"].as_array().unwrap();
    assert_eq!(last[last.len() - 1]["tool_call_id"], "call_t");
}

#[actix_web::test]
async fn agent_app_example_runs_through_the_responses_api() {
    use crate::fake_responses::{FakeResponses, answer, call, message};
    let mut upstream = FakeResponses::start().await;
    let app = chat_server(&upstream.base(), |_| {}).await;
    let weather = CallbackServer::with("/weather", Reply::output(json!({"temperature_c": 28})));
    register_weather(&app, &weather).await;
    // The model calls the plugin's tool (the server runs it), then says something and calls
    // the agent's; then it answers in words.
    upstream
        .script(vec![
            answer(vec![call(
                "call_w",
                "get_weather",
                json!({"location": "Tokyo"}),
            )]),
            answer(vec![
                message("It is 28 °C in Tokyo."),
                call("call_t", "app_clock", json!({})),
            ]),
            answer(vec![message("And it is ten o'clock.")]),
        ])
        .await;

    let example = LineChild::spawn(
        Command::new(venv_python().await)
            .arg(AGENT_APP)
            .args(["--server", &app.url("/v1"), "--character", "Mio"])
            .env("PYTHONUNBUFFERED", "1"),
    );

    the_apps_conversation(example).await;
    assert_eq!(weather.received().len(), 1);
    let bodies = upstream.bodies().await;
    assert_eq!(bodies.len(), 3);
    assert!(bodies.iter().all(|b| b["model"] == "qwen2.5"));
}

/// What a chat example prints for the scripted conversation of its test: the model's words
/// after the plugin's call, its own tool's call, the model's last words; then it exits.
async fn the_apps_conversation(mut example: LineChild) {
    assert_eq!(
        example.expect_line("model: ").await,
        "model: It is 28 °C in Tokyo."
    );
    assert_eq!(
        example.expect_line("answering ").await,
        "answering app_clock myself"
    );
    assert_eq!(
        example.expect_line("model: ").await,
        "model: And it is ten o'clock."
    );
    assert_eq!(example.expect_line("done").await, "done");
    assert_eq!(example.wait_exit().await, Some(0));
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
            (
                "Rin".to_owned(),
                Some("wss://generativelanguage.googleapis.com/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent".to_owned()),
            ),
        ],
        4 * 1024 * 1024,
    );
    assert_eq!(outline(&example), expected);
    assert_eq!(example.bind, "127.0.0.1:48911".parse().unwrap());
    assert!(example.dispatch.validate_arguments);

    let readme = std::fs::read_to_string(README).expect("README.md is readable");
    let blocks: Vec<&str> = readme
        .split("```toml\n")
        .skip(1)
        .filter_map(|rest| rest.split("```").next())
        .collect();
    assert_eq!(
        blocks.len(),
        3,
        "the walk-through's relay.toml and chat.toml, and the full configuration"
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
    // The walk-through's chat configuration: Mio chats with a local Ollama model.
    let chat = Settings::from_toml(blocks[1]).expect("the README's chat.toml loads");
    let mio = chat.characters[0].chat.as_ref().expect("Mio has a chat");
    assert_eq!(
        (mio.url.as_str(), mio.model.as_deref()),
        ("http://127.0.0.1:11434/v1", Some("qwen2.5"))
    );
    let shown = Settings::from_toml(blocks[2]).expect("the README's configuration loads");
    assert_eq!(shown, example);
    assert_eq!(
        example.characters[1]
            .chat
            .as_ref()
            .map(|c| c.max_tool_rounds),
        Some(3)
    );
}

const SLOW_TOOL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/slow_tool.py");

/// The slow tool runs on a server that requires tokens: its registration, its context and its
/// progress all carry its token.
#[actix_web::test]
async fn slow_tool_example_keeps_the_conversation_going_and_its_result_follows() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let mut config = settings(&["Mio"]);
    config.characters[0].session = Some(SessionSettings::new(&fake.url, Dialect::Openai));
    config.plugin_tokens = runtime_tools::TokenPolicy::Required;
    let app = spawn_app_with(config).await;
    let mut plugin = LineChild::spawn(
        Command::new("python3")
            .arg(SLOW_TOOL)
            .args(["--server", &app.base, "--port", "0", "--seconds", "0.4"])
            .env("PYTHONUNBUFFERED", "1")
            .env("SLOW_TOOL_TOKEN", SLOW_TOOL_TOKEN),
    );
    plugin
        .expect_line("registered find_flights (non-blocking)")
        .await;
    assert_eq!(plugin.expect_line("told: ").await, "told: ['Mio']");
    assert_bound(&app, "plugin:flights").await;
    fake.update_with_tools(&["find_flights"]).await;

    fake.push(crate::sessions::call_event(
        "r1",
        "c1",
        "find_flights",
        r#"{"from":"Tokyo","to":"Osaka"}"#,
    ))
    .await;
    fake.push(crate::sessions::response_done(
        "r1",
        &[("c1", "find_flights", r#"{"from":"Tokyo","to":"Osaka"}"#)],
    ))
    .await;
    assert_eq!(
        plugin.expect_line("progress for call").await,
        "progress for call c1: HTTP 200"
    );
    plugin.expect_line("answered call c1").await;
    // The context, the progress, then the result; a response.create after the running answer
    // and one after the result (the session is idle).
    let events = fake
        .wait_for("the result and its response.create", |events| {
            let system: Vec<&str> = events
                .iter()
                .filter(|e| e["item"]["role"] == "system")
                .map(|e| e["item"]["content"][0]["text"].as_str().unwrap())
                .collect();
            let creates = events
                .iter()
                .filter(|e| e["type"] == "response.create")
                .count();
            (system.len() == 3 && creates == 2)
                .then(|| system.into_iter().map(str::to_owned).collect::<Vec<_>>())
        })
        .await;
    assert_eq!(events[0], "Flight search is available now.");
    assert_eq!(
        events[1],
        "Progress of the tool call find_flights (call_id c1): Found 3 flights, checking prices"
    );
    assert!(events[2].contains("NH 123"), "{events:?}");
    let running = fake
        .events()
        .into_iter()
        .find(|e| e["item"]["type"] == "function_call_output")
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(running["item"]["output"].as_str().unwrap()).unwrap(),
        json!({"status": "running", "tool": "find_flights", "call_id": "c1"})
    );

    plugin.signal("TERM");
    plugin.expect_line("cleared").await;
    assert_eq!(plugin.wait_exit().await, Some(0));
}
