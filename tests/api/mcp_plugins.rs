//! MCP servers that plugins register at run time (`POST /api/mcp/register`), against counterparts
//! nobody here wrote: a plugin written with the official MCP Python SDK (`tests/mcp_plugin.py`,
//! its `MCPServer` over the streamable-http transport) that registers itself, and
//! `@modelcontextprotocol/server-everything` in its streamable-HTTP mode. Each: the tools reach
//! the characters and a model session, a tool added at run time arrives by `list_changed`, a
//! dead plugin is removed after three calls, clear and unregister end its MCP session (it sees
//! the `DELETE`), and bad registrations are refused with the reason.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use indexmap::IndexMap;
use runtime_tools::Dialect;
use runtime_tools::Settings;
use runtime_tools::{McpServerSettings, McpTransport};
use serde_json::{Value, json};

use crate::callback_server::{CallbackServer, ClosedPort, Reply, invoke_ok};
use crate::child::LineChild;
use crate::event_stream::{EventReader, open};
use crate::fake_realtime::{AckMode, FakeRealtime};
use crate::helpers::{TestApp, app_with_session, settings, spawn_app, spawn_app_with, tool_body};
use crate::node::server_everything;
use crate::python::{repo_file, venv_python};
use crate::sessions::{call_event, response_done};

/// A running plugin and what its registration answered.
pub struct Plugin {
    pub child: LineChild,
    pub port: u16,
    pub answer: Value,
    /// The `DELETE`s of its endpoint `sees_delete` has counted.
    deletes_counted: usize,
}

/// Starts `tests/mcp_plugin.py` for `app` as MCP server `name` (with `args`), and waits for its
/// registration's answer (a 200).
pub async fn start_plugin(app: &TestApp, name: &str, args: &[&str]) -> Plugin {
    let python = venv_python().await;
    let mut child = LineChild::spawn(
        Command::new(python)
            .arg(repo_file("tests/mcp_plugin.py"))
            .arg(&app.base)
            .arg(name)
            .args(args),
    );
    let listening = child.expect_line("listening ").await;
    let port = listening["listening ".len()..].parse().expect("a port");
    let line = child.expect_line("registered ").await;
    let registered: Value = serde_json::from_str(&line["registered ".len()..]).expect("JSON");
    assert_eq!(registered["status"], json!(200), "{registered}");
    Plugin {
        child,
        port,
        answer: crate::helpers::without_instance_id(
            "/api/mcp/register",
            200,
            registered["answer"].clone(),
        ),
        deletes_counted: 0,
    }
}

impl Plugin {
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/mcp", self.port)
    }

    /// Waits until the plugin received one more `DELETE` of its endpoint (its MCP session
    /// ended) than this counted before; it may have come before the registration's answer.
    async fn sees_delete(&mut self) {
        const DELETE: &str = "request DELETE /mcp";
        let deletes = self.child.seen().iter().filter(|l| *l == DELETE).count();
        if deletes <= self.deletes_counted {
            self.child.expect_line(DELETE).await;
        }
        self.deletes_counted += 1;
    }
}

async fn register(app: &TestApp, body: Value) -> (u16, Value) {
    app.post("/api/mcp/register", &body).await
}

async fn runtime_servers(app: &TestApp) -> Value {
    let (status, body) = app.get("/api/mcp").await;
    assert_eq!(status, 200, "{body}");
    body["runtime_mcp_servers"].clone()
}

/// The model plays a call of `name` with `arguments`; returns the output it is answered with.
async fn model_calls(fake: &FakeRealtime, call_id: &str, name: &str, arguments: &str) -> Value {
    let response = format!("resp_{call_id}");
    fake.push(call_event(&response, call_id, name, arguments))
        .await;
    fake.push(response_done(&response, &[(call_id, name, arguments)]))
        .await;
    let item = fake
        .wait_for(&format!("the answer to {call_id}"), |events| {
            events
                .iter()
                .find(|e| {
                    e["type"] == "conversation.item.create" && e["item"]["call_id"] == call_id
                })
                .map(|e| e["item"].clone())
        })
        .await;
    assert_eq!(item["type"], "function_call_output", "{item}");
    let text = item["output"].as_str().expect("output is text");
    serde_json::from_str(text).unwrap_or_else(|e| panic!("output is not JSON ({e}): {text}"))
}

/// Waits for the `mcp.state` event of runtime server `name` whose state is `state`.
async fn mcp_state(events: &mut EventReader, name: &str, state: &str) -> Value {
    events
        .wait_for("mcp.state", |d| {
            d["name"] == name && d["kind"] == "runtime" && d["state"] == state
        })
        .await
        .data
}

#[actix_web::test]
async fn a_python_sdk_plugin_registers_itself_serves_the_model_and_is_removed_when_it_dies() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let app = app_with_session(&fake.url, &["Lanlan"], Dialect::Openai, |_| {}).await;
    fake.nth_update(1).await;
    let mut events = open(&app, "", None).await.expect("stream opens");

    let plugin = start_plugin(&app, "weather", &["--source", "plugin:weather"]).await;
    assert_eq!(
        plugin.answer,
        json!({"ok": true, "registered": "weather", "tools": ["get_weather", "add_tool"],
               "skipped": [], "affected_roles": ["Mio", "Lanlan"], "failed_roles": []})
    );
    // Synced into the live session before the answer.
    fake.update_with_tools(&["get_weather", "add_tool"]).await;
    let connected = mcp_state(&mut events, "weather", "connected").await;
    assert_eq!(
        (&connected["url"], &connected["source"], &connected["tools"]),
        (
            &json!(plugin.url()),
            &json!("plugin:weather"),
            &json!(["get_weather", "add_tool"])
        )
    );
    let changed = events
        .wait_for("tools.changed", |d| d["source"] == "plugin:weather")
        .await
        .data;
    assert_eq!(
        changed,
        json!({"op": "mcp", "name": null, "source": "plugin:weather",
               "affected_roles": ["Mio", "Lanlan"], "failed_roles": []})
    );
    let listed = &runtime_servers(&app).await["weather"];
    assert_eq!(
        (
            &listed["state"],
            &listed["transport"],
            &listed["role"],
            &listed["timeout_seconds"],
            &listed["last_error"]
        ),
        (
            &json!("connected"),
            &json!("http"),
            &json!(null),
            &json!(30.0),
            &json!(null)
        )
    );
    let (_, configured) = app.get("/api/mcp").await;
    assert_eq!(configured["mcp_servers"], json!({}));

    // The model calls the plugin's tool: its structured content is the output.
    assert_eq!(
        model_calls(&fake, "call_w", "get_weather", r#"{"city": "Kyoto"}"#).await,
        json!({"city": "Kyoto", "temperature_c": 28})
    );
    let call = events
        .wait_for("tool.call", |d| d["tool"] == "get_weather")
        .await;
    assert_eq!(
        (
            &call.data["source"],
            &call.data["caller"],
            &call.data["is_error"]
        ),
        (&json!("plugin:weather"), &json!("model"), &json!(false))
    );

    // The plugin adds a tool and says so: the model's session gets it.
    assert_eq!(
        model_calls(&fake, "call_a", "add_tool", r#"{"name": "greet"}"#).await,
        json!({"result": "added greet"})
    );
    fake.update_with_tools(&["get_weather", "add_tool", "greet"])
        .await;
    assert_eq!(
        model_calls(&fake, "call_g", "greet", r#"{"who": "Mio"}"#).await,
        json!({"result": "hello Mio, from greet"})
    );
    assert_eq!(
        runtime_servers(&app).await["weather"]["tools"],
        json!(["get_weather", "add_tool", "greet"])
    );

    // Killed: two calls fail (the tools stay), the third removes them everywhere.
    let url = plugin.url();
    let refused = format!(
        "MCP server weather could not be reached: could not connect to http://127.0.0.1:{}",
        plugin.port
    );
    kill(plugin.child).await;
    for _ in 0..2 {
        let failed = invoke_ok(&app, "get_weather", json!({"city": "Kyoto"})).await;
        let error = failed["error"].as_str().unwrap();
        assert!(error.starts_with(&refused), "{error}");
        assert_eq!(
            app.tool_names(Some("Lanlan")).await,
            json!({"Lanlan": ["get_weather", "add_tool", "greet"]})
        );
    }
    let down = &runtime_servers(&app).await["weather"];
    assert_eq!(down["state"], json!("unreachable"), "{down}");
    assert!(
        down["last_error"].as_str().unwrap().starts_with(&refused),
        "{down}"
    );
    let third = invoke_ok(&app, "get_weather", json!({"city": "Kyoto"})).await;
    assert!(
        third["error"].as_str().unwrap().starts_with(&refused),
        "{third}"
    );
    // The removal was done before the third call answered.
    assert_eq!(app.tool_names(None).await, json!({"Mio": [], "Lanlan": []}));
    assert_eq!(runtime_servers(&app).await, json!({}));
    let removed = mcp_state(&mut events, "weather", "removed").await;
    assert_eq!(
        removed,
        json!({"name": "weather", "kind": "runtime", "state": "removed",
               "reason": format!("auto_removed: 3 calls in a row could not connect to {url}")})
    );
    fake.update_with_tools(&[]).await;
}

#[actix_web::test]
async fn a_registration_no_character_takes_is_not_ok_and_keeps_the_tools() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let app = app_with_session(&fake.url, &[], Dialect::Openai, |_| {}).await;
    fake.nth_update(1).await;
    fake.set_mode(AckMode::Error("tools are locked".into()));
    let plugin = start_plugin(&app, "weather", &[]).await;
    assert_eq!(
        plugin.answer,
        json!({"ok": false, "registered": "weather", "tools": ["get_weather", "add_tool"],
               "skipped": [], "affected_roles": [],
               "failed_roles": [{"role": "Mio", "error": "model session refused the tool update: tools are locked (invalid_value)"}],
               "error": "no role accepted the registration"})
    );
    // As for a registration: the character has the tools, and the server stays registered.
    assert_eq!(
        app.tool_names(None).await,
        json!({"Mio": ["get_weather", "add_tool"]})
    );
    assert_eq!(
        runtime_servers(&app).await["weather"]["state"],
        json!("connected")
    );
}

#[actix_web::test]
async fn a_listing_is_read_within_its_bounds() {
    let app = spawn_app(&["Lanlan"]).await;
    let cut = |reason: &str| json!([{"name": "…", "reason": reason}]);

    // More tools than are taken from one listing: the first 1,024 are registered.
    let many = start_plugin(&app, "many", &["--extra-tools", "1100"]).await;
    let tools = many.answer["tools"].as_array().expect("tools");
    assert_eq!(
        (tools.len(), &tools[1023], &many.answer["ok"]),
        (1024, &json!("tool_1022"), &json!(true))
    );
    assert_eq!(
        many.answer["skipped"],
        cut("the listing has more than 1024 tools: the rest were not read")
    );

    // A listing whose pages never end: read up to 256 pages.
    let endless = start_plugin(&app, "endless", &["--endless-pages"]).await;
    let tools = endless.answer["tools"].as_array().expect("tools");
    assert_eq!(
        (tools.len(), &tools[0], &tools[255]),
        (256, &json!("page_0001"), &json!("page_0256"))
    );
    assert_eq!(
        endless.answer["skipped"],
        cut("the listing goes on past 256 pages: the rest were not read")
    );
    assert_eq!(
        runtime_servers(&app).await["endless"]["skipped"],
        endless.answer["skipped"]
    );
}

/// Starts `tests/mcp_plugin.py` again on `port`, without registering: a plugin that comes back
/// on its old address.
async fn start_again(app: &TestApp, name: &str, port: u16, args: &[&str]) -> LineChild {
    let python = venv_python().await;
    let mut child = LineChild::spawn(
        Command::new(python)
            .arg(repo_file("tests/mcp_plugin.py"))
            .arg(&app.base)
            .arg(name)
            .args(["--port", &port.to_string(), "--no-register"])
            .args(args),
    );
    child.expect_line(&format!("listening {port}")).await;
    child
}

/// Kills a plugin and waits until it is gone: a call that still found its socket accepting
/// would count as reaching it.
async fn kill(child: LineChild) {
    child.signal("KILL");
    child.wait_exit().await;
}

#[actix_web::test]
async fn only_three_failed_calls_in_a_row_remove_a_plugins_mcp_server() {
    let app = spawn_app(&["Lanlan"]).await;
    let mut events = open(&app, "", None).await.expect("stream opens");
    let args = ["--source", "plugin:flaky", "--wait-tool", "--timeout", "10"];
    let first_port = crate::helpers::port_to_come_back_to().to_string();
    let first_args = [&args[..], &["--port", &first_port]].concat();
    let plugin = start_plugin(&app, "flaky", &first_args).await;
    assert_eq!(plugin.answer["ok"], json!(true), "{}", plugin.answer);
    let port = plugin.port;
    let refused = format!(
        "MCP server flaky could not be reached: could not connect to http://127.0.0.1:{port}"
    );
    let fails_to_connect = || async {
        let failed = invoke_ok(&app, "get_weather", json!({"city": "Kyoto"})).await;
        let error = failed["error"].as_str().unwrap().to_owned();
        assert!(error.starts_with(&refused), "{error}");
        assert_eq!(
            app.tool_names(None).await,
            json!({"Lanlan": ["get_weather", "add_tool", "wait"]}),
            "removed too early"
        );
    };

    // Two failures, then a call that reaches it (on its way back, the connection opens a new
    // MCP session): the count starts again.
    kill(plugin.child).await;
    fails_to_connect().await;
    fails_to_connect().await;
    assert_eq!(
        runtime_servers(&app).await["flaky"]["state"],
        json!("unreachable")
    );
    let back = start_again(&app, "flaky", port, &args).await;
    let reached = invoke_ok(&app, "get_weather", json!({"city": "Kyoto"})).await;
    assert_eq!(
        reached["output"],
        json!({"city": "Kyoto", "temperature_c": 28}),
        "{reached}"
    );
    let connected = mcp_state(&mut events, "flaky", "connected").await;
    assert_eq!(connected["last_error"], json!(null));

    // Two failures, then a call it does not answer in time: a quiet server is not a dead one,
    // and the count starts again too.
    kill(back).await;
    fails_to_connect().await;
    fails_to_connect().await;
    let mut back = start_again(&app, "flaky", port, &args).await;
    let quiet = invoke_ok(&app, "wait", json!({"seconds": 600})).await;
    assert_eq!(
        quiet["error"],
        json!("MCP server flaky did not answer tools/call within 10 s"),
        "{quiet}"
    );
    // The plugin was told the call it did not answer in time is cancelled.
    back.expect_line("cancelled wait 600").await;

    // Three failures in a row: its tools are removed.
    kill(back).await;
    fails_to_connect().await;
    fails_to_connect().await;
    let third = invoke_ok(&app, "get_weather", json!({"city": "Kyoto"})).await;
    assert!(
        third["error"].as_str().unwrap().starts_with(&refused),
        "{third}"
    );
    assert_eq!(app.tool_names(None).await, json!({"Lanlan": []}));
    assert_eq!(runtime_servers(&app).await, json!({}));
}

#[actix_web::test]
async fn clear_unregister_and_a_new_registration_end_the_plugins_mcp_session() {
    let app = spawn_app(&["Lanlan", "Mio"]).await;
    let mut events = open(&app, "", None).await.expect("stream opens");

    // A clear of its source removes its tools and ends its session.
    let mut weather = start_plugin(&app, "weather", &["--source", "plugin:weather"]).await;
    assert_eq!(weather.answer["ok"], json!(true), "{}", weather.answer);
    let (status, cleared) = app
        .post("/api/tools/clear", &json!({"source": "plugin:weather"}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        cleared,
        json!({"ok": true, "removed": 4, "source": "plugin:weather",
               "affected_roles": ["Lanlan", "Mio"], "failed_roles": []})
    );
    weather.sees_delete().await;
    assert_eq!(runtime_servers(&app).await, json!({}));
    assert_eq!(
        mcp_state(&mut events, "weather", "removed").await["reason"],
        json!("cleared")
    );

    // Registered for one character; a plugin's HTTP tool of the same source is not its.
    let mut first = start_plugin(&app, "news", &["--role", "Mio"]).await;
    assert_eq!(first.answer["affected_roles"], json!(["Mio"]));
    let callback = CallbackServer::with("/cb", Reply::output(json!("http")));
    let mut http_tool = tool_body("headline", &callback.url("/cb"), "mcp:news");
    http_tool["role"] = json!("Mio");
    let (status, _) = app.register(&http_tool).await;
    assert_eq!(status, 200);

    // The same name again (another process, every character): the new connection and its
    // tools replace the old ones, whose session ends.
    let second = start_plugin(&app, "news", &[]).await;
    assert_eq!(
        second.answer["affected_roles"],
        json!(["Lanlan", "Mio"]),
        "{}",
        second.answer
    );
    first.sees_delete().await;
    assert_eq!(
        app.tool_names(None).await,
        json!({"Lanlan": ["get_weather", "add_tool"],
               "Mio": ["get_weather", "add_tool", "headline"]})
    );
    let listed = runtime_servers(&app).await;
    assert_eq!(listed["news"]["url"], json!(second.url()));
    assert_eq!(listed["news"]["source"], json!("mcp:news"));
    let mut second = second;

    // Unregistered: its tools go (the HTTP tool of its source stays), its session ends.
    let (status, unregistered) = app
        .post("/api/mcp/unregister", &json!({"name": "news"}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        unregistered,
        json!({"ok": true, "removed": true, "name": "news",
               "affected_roles": ["Lanlan", "Mio"], "failed_roles": []})
    );
    second.sees_delete().await;
    assert_eq!(
        app.tool_names(None).await,
        json!({"Lanlan": [], "Mio": ["headline"]})
    );
    assert_eq!(
        mcp_state(&mut events, "news", "removed").await["reason"],
        json!("unregistered")
    );
    let (_, again) = app
        .post("/api/mcp/unregister", &json!({"name": "news"}))
        .await;
    assert_eq!(
        again,
        json!({"ok": true, "removed": false, "name": "news", "affected_roles": [],
               "failed_roles": []})
    );
}

#[actix_web::test]
async fn server_everything_over_streamable_http_is_registered_at_run_time() {
    let entry = actix_web::rt::task::spawn_blocking(server_everything)
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("npm install of server-everything: {e}"));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // It says it listens on stderr: merged into the stdout the test reads.
    let mut node = LineChild::spawn(
        Command::new("sh")
            .args(["-c", "exec node \"$0\" streamableHttp 2>&1"])
            .arg(&entry)
            .env("PORT", port.to_string()),
    );
    // Registration needs the server listening (it tries once, unlike a configured server).
    node.expect_line("MCP Streamable HTTP Server listening")
        .await;
    let app = spawn_app(&["Lanlan", "Mio"]).await;
    let url = format!("http://127.0.0.1:{port}/mcp");
    let (status, registered) = register(
        &app,
        json!({"name": "everything", "url": url, "role": "Lanlan", "source": "plugin:everything",
               "behavior": "non_blocking"}),
    )
    .await;
    assert_eq!(status, 200, "{registered}");
    // Every tool of the server has the registration's behavior.
    let (_, full) = app.get("/api/tools?role=Lanlan&detail=full").await;
    let listed = full["tools_by_role"]["Lanlan"].as_array().unwrap();
    assert!(!listed.is_empty());
    assert!(
        listed.iter().all(|t| t["behavior"] == "non_blocking"),
        "{full}"
    );
    assert_eq!(
        (
            &registered["ok"],
            &registered["affected_roles"],
            &registered["skipped"]
        ),
        (&json!(true), &json!(["Lanlan"]), &json!([])),
        "{registered}"
    );
    let tools = registered["tools"].as_array().unwrap();
    for expected in ["echo", "get-sum", "get-tiny-image"] {
        assert!(tools.contains(&json!(expected)), "{expected} in {tools:?}");
    }
    assert_eq!(app.tool_names(Some("Mio")).await, json!({"Mio": []}));
    let sum = invoke_ok(&app, "get-sum", json!({"a": 2, "b": 3})).await;
    assert_eq!(sum["output"], json!("The sum of 2 and 3 is 5."), "{sum}");
    let image = invoke_ok(&app, "get-tiny-image", json!({})).await;
    let images = image["images"].as_array().expect("images delivered");
    assert_eq!(images[0]["mime"], json!("image/png"), "{image}");

    let (status, unregistered) = app
        .post("/api/mcp/unregister", &json!({"name": "everything"}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(unregistered["affected_roles"], json!(["Lanlan"]));
    assert_eq!(app.tool_names(None).await, json!({"Lanlan": [], "Mio": []}));
}

/// A configured MCP server whose program exits at once: its name and source belong to it.
fn configured(name: &str) -> McpServerSettings {
    McpServerSettings {
        behavior: Default::default(),
        approval: Default::default(),
        limits: Default::default(),
        name: name.to_owned(),
        transport: McpTransport::Stdio {
            command: PathBuf::from("false").to_string_lossy().into_owned(),
            args: Vec::new(),
            env: IndexMap::new(),
        },
        roles: None,
        timeout: Duration::from_secs(30),
    }
}

/// The `detail` of a 422, as `(field, msg)` pairs.
fn refused_fields(body: &Value) -> Vec<(String, String)> {
    body["detail"]
        .as_array()
        .unwrap_or_else(|| panic!("no detail list in {body}"))
        .iter()
        .map(|e| {
            (
                e["loc"][1].as_str().unwrap_or_default().to_owned(),
                e["msg"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[actix_web::test]
async fn bad_registrations_are_refused_with_the_reason_and_register_nothing() {
    let app = spawn_app_with(Settings {
        mcp_servers: vec![configured("cfg")],
        ..settings(&["Lanlan"])
    })
    .await;

    // Refused before anything is tried.
    let (status, body) = register(
        &app,
        json!({"name": "w", "url": "http://192.168.1.20:9400/mcp"}),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        refused_fields(&body),
        [(
            "url".to_owned(),
            "Value error, url host \"192.168.1.20\" is not loopback: MCP servers must be on \
             loopback; use http:// with host localhost, 127.x.x.x, [::1] or [::ffff:127.x.x.x], \
             e.g. http://127.0.0.1:9400/mcp"
                .to_owned()
        )]
    );
    let (status, body) = register(
        &app,
        json!({"name": "w", "url": "http://127.0.0.1:9400/mcp", "behavior": "later"}),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(refused_fields(&body)[0].0, "behavior");
    let (status, body) = register(&app, json!({"name": "w", "url": app.url("/mcp")})).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(refused_fields(&body)[0].0, "url");
    assert!(
        refused_fields(&body)[0]
            .1
            .starts_with("Value error, url points at this server itself"),
        "{body}"
    );
    let closed = ClosedPort::new();
    let (status, body) = register(&app, json!({"name": "cfg", "url": closed.url("/mcp")})).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        refused_fields(&body),
        [(
            "name".to_owned(),
            "Value error, \"cfg\" is an MCP server of the configuration ([[mcp_server]]): a \
             plugin's MCP server needs a name of its own"
                .to_owned()
        )]
    );
    let (status, body) = register(
        &app,
        json!({"name": "w", "url": closed.url("/mcp"), "source": "mcp:cfg"}),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        refused_fields(&body),
        [(
            "source".to_owned(),
            "Value error, source \"mcp:cfg\" is the source of MCP server \"cfg\": each MCP \
             server needs a source of its own"
                .to_owned()
        )]
    );
    let (status, body) = register(
        &app,
        json!({"name": "w", "url": closed.url("/mcp"), "role": "Nobody"}),
    )
    .await;
    assert_eq!(
        (status, body),
        (404, json!({"ok": false, "detail": "unknown role: Nobody"}))
    );

    // Nothing listens: the connect step fails.
    let (status, body) = register(&app, json!({"name": "w", "url": closed.url("/mcp")})).await;
    assert_eq!(status, 200);
    assert_eq!(
        (&body["ok"], &body["stage"], &body["tools"]),
        (&json!(false), &json!("connect"), &json!([])),
        "{body}"
    );
    let connect = format!(
        "connect: could not connect to http://127.0.0.1:{}: ",
        closed.port()
    );
    assert!(
        body["error"].as_str().unwrap().starts_with(&connect),
        "{body}"
    );

    // A web page, not MCP: the initialize step fails.
    let html = CallbackServer::with(
        "/mcp",
        Reply::text(200, "text/html", "<html><body>Welcome</body></html>"),
    );
    let (_, body) = register(&app, json!({"name": "w", "url": html.url("/mcp")})).await;
    assert_eq!(
        (&body["ok"], &body["stage"]),
        (&json!(false), &json!("initialize")),
        "{body}"
    );
    let initialize = format!(
        "initialize: {} did not complete MCP's initialize handshake: ",
        html.url("/mcp")
    );
    assert!(
        body["error"].as_str().unwrap().starts_with(&initialize),
        "{body}"
    );

    // One that never answers: bounded by the registration's timeout.
    let silent = CallbackServer::with("/mcp", Reply::HoldOpen);
    let (_, body) = register(
        &app,
        json!({"name": "w", "url": silent.url("/mcp"), "timeout_seconds": 1}),
    )
    .await;
    assert_eq!(
        body,
        json!({"ok": false, "registered": "w", "tools": [], "skipped": [],
               "affected_roles": [], "failed_roles": [],
               "error": "initialize: no answer within 1 s (timeout_seconds)",
               "stage": "initialize"})
    );

    // A server that initializes but cannot list: the tools/list step fails, and the session
    // opened for it is ended.
    let mut listless = start_plugin(&app, "listless", &["--list-fails"]).await;
    assert_eq!(
        listless.answer,
        json!({"ok": false, "registered": "listless", "tools": [], "skipped": [],
               "affected_roles": [], "failed_roles": [],
               "error": "tools/list: Mcp error: -32603: the tool index is being rebuilt",
               "stage": "tools/list"})
    );
    listless.sees_delete().await;

    // None of that registered anything.
    assert_eq!(runtime_servers(&app).await, json!({}));
    assert_eq!(app.tool_names(None).await, json!({"Lanlan": []}));

    // 1,000 tools and one whose name is 65 characters long: the 1,002 that fit are registered,
    // the long one is skipped and reported.
    let big = start_plugin(&app, "big", &["--extra-tools", "1000", "--long-name"]).await;
    let long = "l".repeat(65);
    assert_eq!(big.answer["ok"], json!(true), "{}", big.answer);
    assert_eq!(big.answer["tools"].as_array().unwrap().len(), 1002);
    assert_eq!(big.answer["tools"][2], json!("tool_0001"));
    assert_eq!(big.answer["tools"][1001], json!("tool_1000"));
    assert_eq!(
        big.answer["skipped"],
        json!([{"name": long, "reason": "the name is longer than 64 characters"}])
    );
    let listed = app.tool_names(Some("Lanlan")).await;
    assert_eq!(listed["Lanlan"].as_array().unwrap().len(), 1002);
    assert_eq!(
        runtime_servers(&app).await["big"]["skipped"],
        big.answer["skipped"]
    );
    let added = invoke_ok(&app, "tool_0999", json!({"x": 1})).await;
    assert_eq!(added["output"], json!({"result": 1000}), "{added}");

    // Configured and registered servers are listed apart.
    let (_, both) = app.get("/api/mcp").await;
    let names =
        |servers: &Value| -> Vec<String> { servers.as_object().unwrap().keys().cloned().collect() };
    assert_eq!(
        (
            names(&both["mcp_servers"]),
            names(&both["runtime_mcp_servers"])
        ),
        (vec!["cfg".to_owned()], vec!["big".to_owned()])
    );

    // A registration of the same name that fails leaves the server registered before it as it
    // was.
    let (_, failed) = register(&app, json!({"name": "big", "url": closed.url("/mcp")})).await;
    assert_eq!(
        (&failed["ok"], &failed["stage"]),
        (&json!(false), &json!("connect")),
        "{failed}"
    );
    assert_eq!(runtime_servers(&app).await["big"]["url"], json!(big.url()));
    assert_eq!(
        app.tool_names(Some("Lanlan")).await["Lanlan"]
            .as_array()
            .unwrap()
            .len(),
        1002
    );
    let still = invoke_ok(&app, "tool_0001", json!({"x": 1})).await;
    assert_eq!(still["output"], json!({"result": 2}), "{still}");

    // Another server may not take a source that is the first one's.
    let (status, body) = register(
        &app,
        json!({"name": "other", "url": closed.url("/mcp"), "source": "mcp:big"}),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(refused_fields(&body)[0].0, "source");
}
