//! MCP servers as tool sources, against real MCP servers nobody here wrote: `mcp-server-time`
//! (PyPI) over stdio, `@modelcontextprotocol/server-everything` (npm) over stdio and Streamable
//! HTTP, and a small server written with the official MCP Python SDK whose tool list changes at
//! run time. Each: the tools registered for the characters (source `mcp:<name>`, with an event),
//! a call, an error result, an image, a `tools/list_changed`, and a killed server coming back;
//! and a call of `server-everything`'s long-running tool that the person interrupts, or that
//! times out, reaches the server as `notifications/cancelled` naming its request.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use indexmap::IndexMap;
use runtime_tools::{Dialect, McpServerSettings, McpTransport, SessionSettings, Settings};
use serde_json::{Value, json};

use actix_web::rt::net::TcpListener;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::child::LineChild;
use crate::event_stream::{EventReader, open};
use crate::fake_realtime::{AckMode, EVENT_DEADLINE, FakeRealtime, update_tool_names};
use crate::helpers::{TestApp, settings, spawn_app_with};
use crate::node::server_everything;
use crate::python::{python, repo_file, venv};
use crate::sessions::{call_event, response_done};

/// A stdio MCP server of the configuration.
fn stdio(name: &str, command: PathBuf, args: &[&str]) -> McpServerSettings {
    McpServerSettings {
        behavior: Default::default(),
        approval: Default::default(),
        limits: Default::default(),
        name: name.to_owned(),
        transport: McpTransport::Stdio {
            command: command.to_string_lossy().into_owned(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            env: IndexMap::new(),
        },
        roles: None,
        timeout: Duration::from_secs(30),
    }
}

async fn provisioned<T: Send + 'static>(provision: fn() -> Result<T, String>, what: &str) -> T {
    actix_web::rt::task::spawn_blocking(provision)
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// A server with `characters` and these MCP servers, and its event stream from the first event.
async fn start(characters: &[&str], servers: Vec<McpServerSettings>) -> (TestApp, EventReader) {
    let app = spawn_app_with(Settings {
        mcp_servers: servers,
        ..settings(characters)
    })
    .await;
    let events = open(&app, "", Some("0")).await.expect("stream opens");
    (app, events)
}

/// Waits for the `tools.changed` event of an MCP server's listing (or removal); returns its data.
async fn mcp_change(events: &mut EventReader, source: &str) -> Value {
    events
        .wait_for("tools.changed", |d| {
            d["op"] == "mcp" && d["source"] == source
        })
        .await
        .data
}

async fn invoke(app: &TestApp, name: &str, arguments: Value) -> Value {
    let (status, body) = app
        .post(
            "/api/tools/invoke",
            &json!({"name": name, "arguments": arguments, "call_id": "call_mcp"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    body
}

async fn mcp_report(app: &TestApp, name: &str) -> Value {
    let (status, body) = app.get("/api/mcp").await;
    assert_eq!(status, 200);
    body["mcp_servers"][name].clone()
}

#[actix_web::test]
async fn the_time_server_lists_answers_fails_and_comes_back_when_killed() {
    provisioned(python, "the test virtualenv (tests/requirements.txt)").await;
    let time = stdio(
        "time",
        venv().join("bin/mcp-server-time"),
        &["--local-timezone", "UTC"],
    );
    let (app, mut events) = start(&["Lanlan", "Mio"], vec![time]).await;

    let listed = mcp_change(&mut events, "mcp:time").await;
    assert_eq!(
        listed,
        json!({"op": "mcp", "name": null, "source": "mcp:time",
               "affected_roles": ["Lanlan", "Mio"], "failed_roles": []})
    );
    let (status, listing) = app.get("/api/tools?role=Mio&detail=full").await;
    assert_eq!(status, 200);
    let tools = listing["tools_by_role"]["Mio"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["get_current_time", "convert_time"]);
    let current = &tools[0];
    assert_eq!(
        (
            &current["source"],
            &current["callback_url"],
            &current["is_remote"],
            &current["timeout_seconds"]
        ),
        (
            &json!("mcp:time"),
            &json!(null),
            &json!(false),
            &json!(30.0)
        )
    );
    assert_eq!(
        current["parameters"]["properties"]["timezone"]["type"],
        json!("string")
    );

    // A call: the server's structuredContent is the output.
    let answer = invoke(&app, "get_current_time", json!({"timezone": "UTC"})).await;
    assert_eq!(answer["is_error"], json!(false), "{answer}");
    let output = &answer["output"];
    assert_eq!(
        crate::helpers::keys(output),
        ["timezone", "datetime", "day_of_week", "is_dst"]
    );
    assert_eq!(
        (&output["timezone"], &output["is_dst"]),
        (&json!("UTC"), &json!(false))
    );
    assert!(
        output["datetime"].as_str().unwrap().ends_with("+00:00"),
        "{output}"
    );
    // An error result: isError with the server's text.
    let failed = invoke(&app, "get_current_time", json!({"timezone": "Not/AZone"})).await;
    assert_eq!(
        failed,
        json!({"ok": true, "name": "get_current_time", "call_id": "call_mcp", "output": null,
               "is_error": true,
               "error": "Error executing tool get_current_time: Invalid timezone: 'No time zone found with key Not/AZone'"})
    );

    let report = mcp_report(&app, "time").await;
    assert_eq!(
        (
            &report["state"],
            &report["transport"],
            &report["tools"],
            &report["restarts"]
        ),
        (
            &json!("connected"),
            &json!("stdio"),
            &json!(["get_current_time", "convert_time"]),
            &json!(0)
        )
    );
    let pid = report["pid"].as_u64().expect("a running child has a pid");

    // Killed: its tools leave every character, then come back with the restarted server.
    let status = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let removed = mcp_change(&mut events, "mcp:time").await;
    assert_eq!(removed["affected_roles"], json!(["Lanlan", "Mio"]));
    let back = mcp_change(&mut events, "mcp:time").await;
    assert_eq!(back["affected_roles"], json!(["Lanlan", "Mio"]));
    assert_eq!(
        app.tool_names(None).await,
        json!({"Lanlan": ["get_current_time", "convert_time"],
               "Mio": ["get_current_time", "convert_time"]})
    );
    let report = mcp_report(&app, "time").await;
    assert_eq!(report["restarts"], json!(1));
    assert_eq!(report["state"], json!("connected"));
    assert_ne!(report["pid"], json!(pid));
    let again = invoke(&app, "get_current_time", json!({"timezone": "Asia/Tokyo"})).await;
    assert_eq!(again["output"]["timezone"], json!("Asia/Tokyo"));
}

/// `server-everything`'s tools every transport must show, checked through calls.
async fn check_everything(app: &TestApp, events: &mut EventReader, source: &str) {
    mcp_change(events, source).await;
    let names = app.tool_names(Some("Lanlan")).await;
    for expected in [
        "echo",
        "get-sum",
        "get-tiny-image",
        "get-structured-content",
    ] {
        assert!(
            names["Lanlan"]
                .as_array()
                .unwrap()
                .contains(&json!(expected)),
            "{expected} in {names}"
        );
    }
    assert_eq!(
        invoke(app, "get-sum", json!({"a": 2, "b": 3})).await,
        json!({"ok": true, "name": "get-sum", "call_id": "call_mcp",
               "output": "The sum of 2 and 3 is 5.", "is_error": false})
    );
    // Arguments that break the tool's inputSchema are refused here, before the MCP server sees
    // them, with the text that tells the model what to fix.
    assert_eq!(
        invoke(app, "get-sum", json!({"a": "two", "b": 3})).await["error"],
        json!(
            "arguments for get-sum do not match its parameters: /a must be a number (got \"two\"). Call get-sum again with arguments that match."
        )
    );
    // An image goes through the image channel: checked, decoded and delivered as an image; the
    // text around it stays the output.
    let image = invoke(app, "get-tiny-image", json!({})).await;
    assert_eq!(
        image["output"],
        json!("Here's the image you requested:\nThe image above is the MCP logo."),
        "{image}"
    );
    let images = image["images"].as_array().expect("images delivered");
    assert_eq!(images.len(), 1, "{image}");
    assert_eq!(images[0]["mime"], json!("image/png"));
    assert_eq!(images[0]["data_b64"].as_str().map(str::len), Some(5380));
    assert!(images[0]["width"].as_u64() > Some(0), "{image}");
    assert!(image.get("image_warnings").is_none(), "{image}");
    let structured = invoke(
        app,
        "get-structured-content",
        json!({"location": "Chicago"}),
    )
    .await;
    assert_eq!(structured["is_error"], json!(false), "{structured}");
    assert!(structured["output"].is_object(), "{structured}");
}

#[actix_web::test]
async fn server_everything_over_stdio() {
    let entry = provisioned(server_everything, "npm install of server-everything").await;
    let entry = entry.to_string_lossy().into_owned();
    let everything = stdio("everything", PathBuf::from("node"), &[&entry, "stdio"]);
    let (app, mut events) = start(&["Lanlan"], vec![everything]).await;
    check_everything(&app, &mut events, "mcp:everything").await;
}

#[actix_web::test]
async fn server_everything_over_streamable_http() {
    let entry = provisioned(server_everything, "npm install of server-everything").await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut node = LineChild::spawn(
        Command::new("node")
            .arg(&entry)
            .arg("streamableHttp")
            .env("PORT", port.to_string()),
    );
    node.expect_line("Starting Streamable HTTP server").await;
    // Until the server listens, the client retries with its backoff.
    let everything = McpServerSettings {
        behavior: Default::default(),
        approval: Default::default(),
        transport: McpTransport::Http {
            url: format!("http://127.0.0.1:{port}/mcp"),
        },
        ..stdio("everything-http", PathBuf::new(), &[])
    };
    let (app, mut events) = start(&["Lanlan"], vec![everything]).await;
    check_everything(&app, &mut events, "mcp:everything-http").await;
    assert_eq!(
        mcp_report(&app, "everything-http").await["transport"],
        json!("http")
    );
}

#[actix_web::test]
async fn a_tool_added_at_run_time_arrives_by_list_changed() {
    let python = provisioned(python, "the test virtualenv (tests/requirements.txt)").await;
    let script = repo_file("tests/mcp_dynamic_server.py");
    let dynamic = McpServerSettings {
        behavior: Default::default(),
        approval: Default::default(),
        roles: Some(vec!["Mio".to_owned()]),
        ..stdio("dynamic", python, &[&script.to_string_lossy()])
    };
    let (app, mut events) = start(&["Lanlan", "Mio"], vec![dynamic]).await;
    assert_eq!(
        mcp_change(&mut events, "mcp:dynamic").await["affected_roles"],
        json!(["Mio"])
    );
    assert_eq!(
        app.tool_names(None).await,
        json!({"Lanlan": [], "Mio": ["add_tool"]})
    );

    let added = invoke(&app, "add_tool", json!({"name": "greet"})).await;
    assert_eq!(added["output"], json!({"result": "added greet"}));
    assert_eq!(
        mcp_change(&mut events, "mcp:dynamic").await["affected_roles"],
        json!(["Mio"])
    );
    assert_eq!(
        app.tool_names(None).await,
        json!({"Lanlan": [], "Mio": ["add_tool", "greet"]})
    );
    let greeted = invoke(&app, "greet", json!({"who": "Lanlan"})).await;
    assert_eq!(
        greeted["output"],
        json!({"result": "hello Lanlan, from greet"})
    );
    assert_eq!(
        mcp_report(&app, "dynamic").await["tools"],
        json!(["add_tool", "greet"])
    );
}

/// What passes between the server and an MCP server, as `tests/mcp_tap.py` tells it: one
/// `{"to": "server" | "client", "message": M}` per message, in order.
struct Tap {
    lines: tokio::io::Lines<BufReader<actix_web::rt::net::TcpStream>>,
    seen: Vec<Value>,
}

impl Tap {
    /// The tap of the server started with `listener`'s port.
    async fn accept(listener: TcpListener) -> Self {
        let (socket, _) = tokio::time::timeout(EVENT_DEADLINE, listener.accept())
            .await
            .expect("the tap connects")
            .unwrap();
        Self {
            lines: BufReader::new(socket).lines(),
            seen: Vec::new(),
        }
    }

    /// Reads until a message `to` one side satisfies `matches`; returns it.
    async fn wait_for(&mut self, what: &str, to: &str, matches: impl Fn(&Value) -> bool) -> Value {
        let found = tokio::time::timeout(EVENT_DEADLINE, async {
            loop {
                let line = self.lines.next_line().await.expect("the tap reads");
                let line = line.unwrap_or_else(|| panic!("the tap ended before {what}"));
                let record: Value = serde_json::from_str(&line).expect("the tap writes JSON");
                self.seen.push(record.clone());
                if record["to"] == to && matches(&record["message"]) {
                    return record["message"].clone();
                }
            }
        })
        .await;
        found.unwrap_or_else(|_| panic!("no {what} within {EVENT_DEADLINE:?}: {:#?}", self.seen))
    }
}

/// Waits until the model got an answer to `call_id` whose output contains `text`.
async fn answered_with(fake: &FakeRealtime, call_id: &str, text: &str) {
    fake.wait_for(&format!("{call_id}'s answer with {text:?}"), |events| {
        events
            .iter()
            .any(|e| {
                e["item"]["call_id"] == call_id
                    && e["item"]["output"]
                        .as_str()
                        .is_some_and(|o| o.contains(text))
            })
            .then_some(())
    })
    .await;
}

/// `server-everything` over stdio behind `tests/mcp_tap.py` (its calls bounded by `timeout`), and
/// the listener its tap reports to.
async fn tapped_everything(timeout: Duration) -> (McpServerSettings, TcpListener) {
    let entry = provisioned(server_everything, "npm install of server-everything").await;
    let python = provisioned(python, "the test virtualenv (tests/requirements.txt)").await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let tap_script = repo_file("tests/mcp_tap.py");
    let mut everything = stdio(
        "everything",
        python,
        &[
            &tap_script.to_string_lossy(),
            &port,
            "node",
            &entry.to_string_lossy(),
            "stdio",
        ],
    );
    everything.timeout = timeout;
    (everything, listener)
}

#[actix_web::test]
async fn a_timed_out_call_of_the_long_running_tool_is_cancelled_on_the_mcp_server() {
    let (everything, listener) = tapped_everything(Duration::from_secs(1)).await;
    let (app, mut events) = start(&["Lanlan"], vec![everything]).await;
    let mut tap = Tap::accept(listener).await;
    mcp_change(&mut events, "mcp:everything").await;
    let answer = invoke(
        &app,
        "trigger-long-running-operation",
        json!({"duration": 120, "steps": 120}),
    )
    .await;
    assert_eq!(
        answer["error"],
        "MCP server everything did not answer tools/call within 1 s"
    );
    let call = tap
        .wait_for("the tools/call", "server", |m| m["method"] == "tools/call")
        .await;
    let notice = tap
        .wait_for("notifications/cancelled", "server", |m| {
            m["method"] == "notifications/cancelled"
        })
        .await;
    assert_eq!(
        notice["params"],
        json!({"requestId": call["id"], "reason": "the call timed out after 1 s"})
    );
}

#[actix_web::test]
async fn an_interrupted_call_of_the_long_running_tool_is_cancelled_on_the_mcp_server() {
    // Longer than the call takes: its end is the interruption's, not a timeout's.
    let (everything, listener) = tapped_everything(Duration::from_secs(300)).await;
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let mut config = settings(&["Mio"]);
    config.characters[0].session = Some(SessionSettings::new(&fake.url, Dialect::Openai));
    config.mcp_servers = vec![everything];
    let _app = spawn_app_with(config).await;
    let mut tap = Tap::accept(listener).await;
    let tool = "trigger-long-running-operation";
    fake.wait_for("the MCP server's tools in the session", |events| {
        events
            .iter()
            .any(|e| {
                e["type"] == "session.update" && update_tool_names(e).iter().any(|n| n == tool)
            })
            .then_some(())
    })
    .await;
    // Two minutes: only the interruption ends it within the test's deadline.
    let arguments = r#"{"duration": 120, "steps": 120}"#;
    let is_call = |m: &Value| m["method"] == "tools/call" && m["params"]["name"] == tool;

    fake.push(call_event("r1", "c1", tool, arguments)).await;
    fake.push(response_done("r1", &[("c1", tool, arguments)]))
        .await;
    let first = tap
        .wait_for("the first tools/call", "server", is_call)
        .await;
    fake.push(json!({"type": "input_audio_buffer.speech_started", "audio_start_ms": 700}))
        .await;
    // The server is told, with the request's id.
    let notice = tap
        .wait_for("notifications/cancelled", "server", |m| {
            m["method"] == "notifications/cancelled"
        })
        .await;
    assert_eq!(notice["params"]["requestId"], first["id"], "{notice}");
    assert_eq!(
        notice["params"]["reason"], "the call was cancelled",
        "{notice}"
    );
    answered_with(&fake, "c1", "cancelled because the person interrupted").await;

    // The connection goes on: the next call is answered.
    let echo = r#"{"message": "still here"}"#;
    fake.push(call_event("r2", "c2", "echo", echo)).await;
    fake.push(response_done("r2", &[("c2", "echo", echo)]))
        .await;
    answered_with(&fake, "c2", "Echo: still here").await;
    // The interrupted call was never answered.
    let answered = tap
        .seen
        .iter()
        .any(|r| r["to"] == "client" && r["message"]["id"] == first["id"]);
    assert!(!answered, "{:#?}", tap.seen);
}
