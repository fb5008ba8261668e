//! A character's tools over MCP's Streamable HTTP transport (`/mcp`), driven by the official MCP
//! Python SDK's client (`streamable_http_client`, `tests/mcp_http_client.py`): initialize, list
//! (one character's tools, with their schemas; `?role=` another's), calls through the dispatcher
//! (an output, a tool error, arguments that break the schema, an unknown tool, an image as image
//! content), `notifications/tools/list_changed` after a registration, and a page of another
//! site refused. Then the transport's rules over raw HTTP: sessions, `DELETE`, the refusals, and
//! a call's trace context in `params._meta` (a malformed `tracestate` there ignored, as in a
//! header).

use std::io::Cursor;
use std::process::Command;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use image::{DynamicImage, ImageBuffer, ImageFormat, Rgb};
use serde_json::{Value, json};

use crate::callback_server::{CallbackServer, Reply, spawn_invoke};
use crate::child::LineChild;
use crate::event_stream::open;
use crate::helpers::{TestApp, parse_json, settings, spawn_app, spawn_app_with, tool_body};
use crate::python::{repo_file, venv_python};

/// One step the client script printed, as JSON.
async fn step(client: &mut LineChild, name: &str) -> Value {
    let line = client.expect_line(&format!("{{\"step\": \"{name}\"")).await;
    serde_json::from_str(&line).expect("a JSON step")
}

async fn register(app: &TestApp, name: &str, callback: &CallbackServer, role: &str) {
    let mut body = tool_body(name, &callback.url(&format!("/{name}")), "plugin:mcp-test");
    body["role"] = json!(role);
    let (status, answer) = app.register(&body).await;
    assert_eq!(status, 200, "{answer}");
}

/// A small PNG, base64.
fn small_png() -> String {
    let image = ImageBuffer::from_fn(16, 12, |x, y| Rgb([(x * 16) as u8, (y * 20) as u8, 90]));
    let mut bytes = Vec::new();
    DynamicImage::ImageRgb8(image)
        .write_to(&mut Cursor::new(&mut bytes), ImageFormat::Png)
        .unwrap();
    STANDARD.encode(bytes)
}

#[actix_web::test]
async fn the_python_sdk_client_lists_calls_and_hears_of_changes_over_streamable_http() {
    let app = spawn_app(&["Lanlan", "Mio"]).await;
    let mut events = open(&app, "", None).await.expect("stream opens");
    let callback =
        CallbackServer::with("/get_weather", Reply::output(json!({"temperature_c": 28})));
    callback.route(
        "/broken",
        Reply::json(json!({"error": "sensor offline", "is_error": true})),
    );
    let png = small_png();
    callback.route(
        "/camera",
        Reply::json(
            json!({"output": "the gauge", "images": [{"data_b64": png, "mime": "image/png"}]}),
        ),
    );
    register(&app, "get_weather", &callback, "Lanlan").await;
    register(&app, "broken", &callback, "Lanlan").await;
    register(&app, "camera", &callback, "Lanlan").await;
    register(&app, "mio_only", &callback, "Mio").await;

    let python = venv_python().await;
    let mut client = LineChild::spawn(
        Command::new(python)
            .arg(repo_file("tests/mcp_http_client.py"))
            .arg(app.url("/mcp"))
            .arg(app.url("/mcp?role=Mio")),
    );

    // Without `?role=`, the first character.
    assert_eq!(
        step(&mut client, "initialize").await,
        json!({"step": "initialize", "server": "runtime-tools",
               "title": "the tools of Lanlan on runtime-tools",
               "protocol_version": "2025-11-25", "list_changed": true})
    );
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}});
    assert_eq!(
        step(&mut client, "list").await["tools"],
        json!([
            {"name": "get_weather", "description": "get_weather tool", "input_schema": schema},
            {"name": "broken", "description": "broken tool", "input_schema": schema},
            {"name": "camera", "description": "camera tool", "input_schema": schema}
        ])
    );
    assert_eq!(
        step(&mut client, "call").await,
        json!({"step": "call", "is_error": false, "texts": ["{\"temperature_c\":28}"],
               "images": [], "structured": {"temperature_c": 28}})
    );
    let received = callback.wait_for_requests(1).await;
    assert_eq!(received[0].json()["arguments"], json!({"city": "Kyoto"}));
    let call = events
        .wait_for("tool.call", |d| d["tool"] == "get_weather")
        .await;
    assert_eq!(
        (
            &call.data["role"],
            &call.data["caller"],
            &call.data["source"]
        ),
        (&json!("Lanlan"), &json!("mcp"), &json!("plugin:mcp-test"))
    );
    assert!(call.data.get("kind").is_none(), "{}", call.data);

    assert_eq!(
        step(&mut client, "error").await,
        json!({"step": "error", "is_error": true,
               "texts": ["{\"error\":\"sensor offline\",\"is_error\":true}"], "images": [],
               "structured": null})
    );
    // Arguments that break the schema never reach the callback: the text says what to fix.
    assert_eq!(
        step(&mut client, "arguments").await["texts"],
        json!([json!({"error": "arguments for get_weather do not match its parameters: /city must be a string (got 7). Call get_weather again with arguments that match.", "is_error": true}).to_string()])
    );
    let missing = step(&mut client, "missing").await;
    assert_eq!(
        (&missing["is_error"], &missing["texts"]),
        (
            &json!(true),
            &json!([json!({"error": "tool 'nope' is not registered for role Lanlan; available tools: get_weather, broken, camera", "is_error": true}).to_string()])
        )
    );
    assert_eq!(
        step(&mut client, "image").await,
        json!({"step": "image", "is_error": false, "texts": ["\"the gauge\""],
               "images": [{"mime": "image/png", "bytes_b64": png.len()}], "structured": null})
    );
    assert_eq!(
        step(&mut client, "other_role").await["tools"],
        json!(["mio_only"])
    );

    step(&mut client, "waiting").await;
    // A registration for another character says nothing to this session; one for it does.
    register(&app, "mio_later", &callback, "Mio").await;
    register(&app, "get_time", &callback, "Lanlan").await;
    assert_eq!(
        step(&mut client, "changed").await["tools"],
        json!(["get_weather", "broken", "camera", "get_time"])
    );

    // A page of another site is refused before anything runs.
    let refused = step(&mut client, "foreign_origin").await;
    assert_eq!(refused["refused"], json!(true), "{refused}");
    assert_eq!(client.wait_exit().await, Some(0));
    // The two sessions' calls were the only ones the callback saw (the refused one ran none).
    assert_eq!(callback.received().len(), 3);
}

/// A raw request to `/mcp` with these headers and body; the status, headers and body read whole
/// (an event stream's answer is one event, and the transport ends it).
async fn exchange(
    app: &TestApp,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Vec<(String, String)>, String) {
    let mut request = app.client.request(
        actix_web::http::Method::from_bytes(method.as_bytes()).unwrap(),
        app.url(path),
    );
    for (name, value) in headers {
        request = request.insert_header((*name, *value));
    }
    let mut response = request.send_body(body.to_owned()).await.expect("sent");
    let status = response.status().as_u16();
    let names = response
        .headers()
        .iter()
        .map(|(n, v)| (n.as_str().to_owned(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let bytes = response.body().limit(1 << 20).await.expect("body read");
    (status, names, String::from_utf8_lossy(&bytes).into_owned())
}

const JSON_AND_SSE: (&str, &str) = ("accept", "application/json, text/event-stream");
const JSON: (&str, &str) = ("content-type", "application/json");

/// The JSON-RPC answer an event stream carries (its `data:` line that holds one).
fn rpc_answer(stream: &str) -> Value {
    stream
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
        .find(|m| m.get("result").is_some() || m.get("error").is_some())
        .unwrap_or_else(|| panic!("no JSON-RPC answer in {stream:?}"))
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

#[actix_web::test]
async fn the_transport_keeps_sessions_and_refuses_in_json_rpc() {
    let app = spawn_app(&["Lanlan"]).await;
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}})
    .to_string();
    let (status, headers, body) =
        exchange(&app, "POST", "/mcp", &[JSON_AND_SSE, JSON], &initialize).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(header(&headers, "content-type"), Some("text/event-stream"));
    let session = header(&headers, "mcp-session-id")
        .expect("a session id")
        .to_owned();
    let answer = rpc_answer(&body);
    assert_eq!(
        answer["result"]["serverInfo"]["name"],
        json!("runtime-tools")
    );
    assert_eq!(answer["result"]["protocolVersion"], json!("2025-06-18"));
    let with_session = [
        JSON_AND_SSE,
        JSON,
        ("mcp-session-id", session.as_str()),
        ("mcp-protocol-version", "2025-06-18"),
    ];
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    let (status, _, _) = exchange(&app, "POST", "/mcp", &with_session, &initialized).await;
    assert_eq!(status, 202);
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string();
    let (status, _, body) = exchange(&app, "POST", "/mcp", &with_session, &list).await;
    assert_eq!(status, 200);
    assert_eq!(rpc_answer(&body)["result"]["tools"], json!([]));

    // A call's arguments reach the tool exactly as the client wrote them (written by hand here:
    // a JSON library would round the number on the way).
    let callback = CallbackServer::with("/exact", Reply::output(json!("ok")));
    let mut exact = tool_body("exact", &callback.url("/exact"), "plugin:mcp-test");
    exact["parameters"] = json!({"type": "object"});
    let (status, answer) = app.register(&exact).await;
    assert_eq!(status, 200, "{answer}");
    let arguments = r#"{"big": 123456789012345678901234567890, "text": "\u00e9"}"#;
    let call = format!(
        r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"exact","arguments":{arguments}}}}}"#
    );
    let (status, _, body) = exchange(&app, "POST", "/mcp", &with_session, &call).await;
    assert_eq!(status, 200);
    assert_eq!(
        rpc_answer(&body)["result"]["isError"],
        json!(false),
        "{body}"
    );
    let received = callback.wait_for_requests(1).await;
    let sent = String::from_utf8(received[0].body.clone()).expect("UTF-8");
    assert!(
        sent.contains(&format!(r#""arguments":{arguments}"#)),
        "the callback got {sent}"
    );

    // The refusals, each a JSON-RPC error without an id.
    let refusal = |code: i64, message: &str| json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}});
    let (status, _, body) = exchange(
        &app,
        "POST",
        "/mcp",
        &[JSON_AND_SSE, JSON, ("origin", "https://evil.example")],
        &initialize,
    )
    .await;
    assert_eq!(status, 403);
    assert_eq!(
        parse_json(body.as_bytes()),
        refusal(
            -32600,
            "Origin \"https://evil.example\" is not a loopback page: browsers may call this API only from http://localhost or http://127.0.0.1 pages"
        )
    );
    let (status, _, body) = exchange(
        &app,
        "POST",
        "/mcp",
        &[JSON_AND_SSE, JSON, ("host", "evil.example")],
        &initialize,
    )
    .await;
    assert_eq!(status, 403, "{body}");
    let (status, _, body) = exchange(
        &app,
        "POST",
        "/mcp?role=Nobody",
        &[JSON_AND_SSE, JSON],
        &initialize,
    )
    .await;
    assert_eq!(
        (status, parse_json(body.as_bytes())),
        (404, refusal(-32600, "unknown role: Nobody"))
    );
    let (status, _, body) = exchange(&app, "POST", "/mcp", &[JSON_AND_SSE, JSON], "{").await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(parse_json(body.as_bytes())["error"]["code"], json!(-32700));
    let (status, _, body) = exchange(&app, "POST", "/mcp", &[JSON], &initialize).await;
    assert_eq!(status, 406, "{body}");
    let (status, _, body) = exchange(&app, "POST", "/mcp", &[JSON_AND_SSE, JSON], &list).await;
    assert_eq!(
        (status, parse_json(body.as_bytes())),
        (
            422,
            refusal(-32600, "Unexpected message, expect initialize request")
        )
    );
    let (status, _, _) = exchange(&app, "PUT", "/mcp", &[], "").await;
    assert_eq!(status, 405);

    // The stream of the session, then its end.
    let (status, _, body) =
        exchange(&app, "GET", "/mcp", &[("accept", "text/event-stream")], "").await;
    assert_eq!(
        (status, parse_json(body.as_bytes())),
        (400, refusal(-32600, "Bad Request: Session ID is required"))
    );
    let (status, _, _) = exchange(&app, "DELETE", "/mcp", &with_session, "").await;
    assert_eq!(status, 200);
    let (status, _, body) = exchange(&app, "POST", "/mcp", &with_session, &list).await;
    assert_eq!(
        (status, parse_json(body.as_bytes())),
        (404, refusal(-32600, "Not Found: Session not found"))
    );
}

/// Opens a session of `/mcp` (initialize, then `notifications/initialized`); returns its id.
async fn open_session(app: &TestApp) -> String {
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}})
    .to_string();
    let (status, headers, body) =
        exchange(app, "POST", "/mcp", &[JSON_AND_SSE, JSON], &initialize).await;
    assert_eq!(status, 200, "{body}");
    let session = header(&headers, "mcp-session-id")
        .expect("a session id")
        .to_owned();
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"}).to_string();
    let in_session = [
        JSON_AND_SSE,
        JSON,
        ("mcp-session-id", session.as_str()),
        ("mcp-protocol-version", "2025-06-18"),
    ];
    let (status, _, _) = exchange(app, "POST", "/mcp", &in_session, &initialized).await;
    assert_eq!(status, 202);
    session
}

#[actix_web::test]
async fn an_open_session_stream_ends_as_the_stop_begins() {
    use futures_util::StreamExt;

    // A grace period far past the test's deadlines: a call may run through it.
    let mut long_grace = settings(&["Lanlan"]);
    long_grace.stop_grace = std::time::Duration::from_secs(3600);
    let app = spawn_app_with(long_grace).await;
    let callback = CallbackServer::with("/slow", Reply::after_gate(Reply::output(json!("done"))));
    let mut slow = tool_body("slow", &callback.url("/slow"), "plugin:slow");
    slow["timeout_seconds"] = json!(300);
    let (status, answer) = app.register(&slow).await;
    assert_eq!(status, 200, "{answer}");
    let session = open_session(&app).await;
    let client = awc::Client::builder()
        .timeout(crate::helpers::HTTP_DEADLINE)
        .finish();
    let mut stream = client
        .get(app.url("/mcp"))
        .insert_header(("accept", "text/event-stream"))
        .insert_header(("mcp-session-id", session.as_str()))
        .insert_header(("mcp-protocol-version", "2025-06-18"))
        .send()
        .await
        .expect("the stream opens");
    assert_eq!(stream.status().as_u16(), 200);
    // Its first event is there: the stream is open.
    stream.next().await.expect("a first chunk").expect("read");

    // A call runs (held by its plugin) when the stop begins.
    let call = spawn_invoke(&app, "slow");
    callback.wait_for_requests(1).await;
    let stopper = app.stopper.clone();
    let stopping = actix_web::rt::spawn(async move { stopper.stop().await });
    // The session's stream ends at once, while the call still runs: it neither waits for the
    // calls nor holds the stop.
    let ended = tokio::time::timeout(crate::child::DEADLINE, async {
        while let Some(Ok(_)) = stream.next().await {}
    })
    .await;
    assert!(ended.is_ok(), "the session's stream outlived the stop");
    assert!(
        !call.is_finished(),
        "the session's stream ended only after the running call"
    );
    callback.open_gate();
    assert_eq!(call.await.expect("the invoke")["output"], json!("done"));
    tokio::time::timeout(crate::child::DEADLINE, stopping)
        .await
        .expect("the stop ends once the call has")
        .expect("the server stopped");
}

#[actix_web::test]
async fn a_loopback_page_may_be_an_mcp_client() {
    let app = spawn_app(&["Lanlan"]).await;
    let page = "http://localhost:6274";
    let preflight = app
        .client
        .request(awc::http::Method::OPTIONS, app.url("/mcp"))
        .insert_header(("origin", page))
        .insert_header(("access-control-request-method", "DELETE"))
        .insert_header(("access-control-request-headers", "mcp-session-id"))
        .send()
        .await
        .expect("preflight answered");
    assert_eq!(preflight.status().as_u16(), 200);
    let value = |r: &awc::ClientResponse<_>, name: &str| {
        r.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_ascii_lowercase())
            .unwrap_or_default()
    };
    assert!(
        value(&preflight, "access-control-allow-methods").contains("delete"),
        "{:?}",
        preflight.headers()
    );
    assert!(
        value(&preflight, "access-control-allow-headers").contains("mcp-session-id"),
        "{:?}",
        preflight.headers()
    );
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "page", "version": "1"}}})
    .to_string();
    let (status, headers, _) = exchange(
        &app,
        "POST",
        "/mcp",
        &[JSON_AND_SSE, JSON, ("origin", page)],
        &initialize,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(header(&headers, "access-control-allow-origin"), Some(page));
    assert!(
        header(&headers, "access-control-expose-headers")
            .is_some_and(|v| v.to_ascii_lowercase().contains("mcp-session-id")),
        "{headers:?}"
    );
    assert!(header(&headers, "mcp-session-id").is_some());
}

/// Opens the session's `GET` stream and reads its first event: the session is in use while it
/// is open.
pub(crate) async fn open_stream(
    app: &TestApp,
    session: &str,
) -> awc::ClientResponse<impl futures_util::Stream> {
    use futures_util::StreamExt;
    let client = awc::Client::builder()
        .timeout(crate::helpers::HTTP_DEADLINE)
        .finish();
    let mut stream = client
        .get(app.url("/mcp"))
        .insert_header(("accept", "text/event-stream"))
        .insert_header(("mcp-session-id", session))
        .insert_header(("mcp-protocol-version", "2025-06-18"))
        .send()
        .await
        .expect("the stream opens");
    assert_eq!(stream.status().as_u16(), 200);
    stream.next().await.expect("a first chunk").expect("read");
    stream
}

/// `tools/list` in `session`: its status.
async fn list_in(app: &TestApp, session: &str) -> u16 {
    let in_session = [
        JSON_AND_SSE,
        JSON,
        ("mcp-session-id", session),
        ("mcp-protocol-version", "2025-06-18"),
    ];
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string();
    exchange(app, "POST", "/mcp", &in_session, &list).await.0
}

#[actix_web::test]
async fn sessions_are_bounded_the_least_recently_used_idle_one_makes_room() {
    let mut bounded = settings(&["Lanlan"]);
    bounded.mcp_endpoint.max_sessions = 2;
    let app = spawn_app_with(bounded).await;

    // A third session takes the place of the least recently used idle one.
    let first = open_session(&app).await;
    let second = open_session(&app).await;
    assert_eq!(
        list_in(&app, &first).await,
        200,
        "the first is now the most recent"
    );
    let third = open_session(&app).await;
    assert_eq!(list_in(&app, &second).await, 404, "the second made room");
    assert_eq!(list_in(&app, &first).await, 200);
    assert_eq!(list_in(&app, &third).await, 200);

    // An `initialize` the transport refuses (its Accept lacks text/event-stream) opens no
    // session, so it ends nobody's.
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}})
    .to_string();
    let json_only = ("accept", "application/json");
    let (status, _, body) = exchange(&app, "POST", "/mcp", &[json_only, JSON], &initialize).await;
    assert_eq!(status, 406, "{body}");
    assert_eq!(
        list_in(&app, &first).await,
        200,
        "a refused initialize ends no session"
    );
    assert_eq!(list_in(&app, &third).await, 200);

    // Every session busy (its stream open): a new one is refused, in JSON-RPC.
    let first_stream = open_stream(&app, &first).await;
    let third_stream = open_stream(&app, &third).await;
    let (status, _, body) =
        exchange(&app, "POST", "/mcp", &[JSON_AND_SSE, JSON], &initialize).await;
    assert_eq!(
        (status, parse_json(body.as_bytes())),
        (
            503,
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32603, "message":
                "this character has 2 MCP sessions open and none is idle \
                 (mcp_endpoint.max_sessions): end one with DELETE, or try again later"}})
        )
    );
    assert_eq!(list_in(&app, &first).await, 200, "the open sessions go on");

    // A stream closed: its session is idle again, and makes room.
    drop(first_stream);
    let fourth = wait_for_session(&app).await;
    assert_eq!(list_in(&app, &fourth).await, 200);
    assert_eq!(list_in(&app, &first).await, 404);
    assert_eq!(list_in(&app, &third).await, 200);
    drop(third_stream);
}

/// Initializes until the server takes a new session (a closed stream is seen closed by the
/// server a moment after the client drops it); its id.
async fn wait_for_session(app: &TestApp) -> String {
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}})
    .to_string();
    let deadline = tokio::time::Instant::now() + crate::child::DEADLINE;
    loop {
        let (status, headers, body) =
            exchange(app, "POST", "/mcp", &[JSON_AND_SSE, JSON], &initialize).await;
        match status {
            200 => {
                return header(&headers, "mcp-session-id")
                    .expect("an id")
                    .to_owned();
            }
            503 if tokio::time::Instant::now() < deadline => {
                tokio::task::yield_now().await;
            }
            _ => panic!("initialize: {status} {body}"),
        }
    }
}

/// A `tools/call` whose `params._meta` carries a trace context (SEP-414): the call's span is in
/// the client's trace, a child of the client's span, and the callback's `traceparent` is in it.
#[actix_web::test]
async fn a_calls_meta_trace_context_puts_its_span_in_the_clients_trace() {
    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const SPAN: &str = "00f067aa0ba902b7";
    let receiver = crate::traces::receiver();
    let app = spawn_app_with(crate::traces::exporting(
        settings(&["Lanlan"]),
        receiver.url("/v1/traces"),
    ))
    .await;
    let callback = CallbackServer::with("/traced", Reply::output(json!("ok")));
    register(&app, "traced", &callback, "Lanlan").await;
    let session = open_session(&app).await;
    let in_session = [
        JSON_AND_SSE,
        JSON,
        ("mcp-session-id", session.as_str()),
        ("mcp-protocol-version", "2025-06-18"),
    ];
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "traced", "arguments": {},
        "_meta": {"traceparent": format!("00-{TRACE}-{SPAN}-01")}}})
    .to_string();
    let (status, _, body) = exchange(&app, "POST", "/mcp", &in_session, &call).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        rpc_answer(&body)["result"]["isError"],
        json!(false),
        "{body}"
    );
    let got = &callback.wait_for_requests(1).await[0];
    let sent = got.header("traceparent").expect("a traceparent");
    assert!(sent.starts_with(&format!("00-{TRACE}-")), "{sent}");
    let span = crate::traces::span(
        &receiver,
        "execute_tool traced",
        ("runtime_tools.caller", "mcp"),
    )
    .await;
    assert_eq!(
        (span.trace_id.as_str(), span.parent_span_id.as_str()),
        (TRACE, SPAN)
    );
}

/// A `tracestate` in `params._meta` that no header could carry (a line break, non-ASCII) is
/// ignored, as it would be in the invoke route's headers: the call runs in the client's trace,
/// and its callback gets no `tracestate` (never raw bytes); a valid one is passed on.
#[actix_web::test]
async fn a_malformed_meta_tracestate_is_ignored_not_fatal_and_never_sent_raw() {
    const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
    const SPAN: &str = "00f067aa0ba902b7";
    let app = spawn_app(&["Lanlan"]).await;
    let callback = CallbackServer::with("/traced", Reply::output(json!("ok")));
    register(&app, "traced", &callback, "Lanlan").await;
    let session = open_session(&app).await;
    let in_session = [
        JSON_AND_SSE,
        JSON,
        ("mcp-session-id", session.as_str()),
        ("mcp-protocol-version", "2025-06-18"),
    ];
    let states = [
        ("vendor=x\r\nx-forged: 1", None),
        ("vendor=\u{e9}t\u{e9}", None),
        ("vendor=\u{1b}[2J", None),
        ("vendor=fine", Some("vendor=fine")),
    ];
    for (i, (state, passed)) in states.into_iter().enumerate() {
        let call = json!({"jsonrpc": "2.0", "id": i + 2, "method": "tools/call", "params": {
            "name": "traced", "arguments": {},
            "_meta": {"traceparent": format!("00-{TRACE}-{SPAN}-01"), "tracestate": state}}})
        .to_string();
        let (status, _, body) = exchange(&app, "POST", "/mcp", &in_session, &call).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(
            rpc_answer(&body)["result"]["isError"],
            json!(false),
            "{state:?}: {body}"
        );
        let got = &callback.wait_for_requests(i + 1).await[i];
        let sent = got.header("traceparent").expect("a traceparent");
        assert!(
            sent.starts_with(&format!("00-{TRACE}-")),
            "{state:?}: {sent}"
        );
        assert_eq!(got.header("tracestate"), passed, "{state:?}");
    }
}

/// Whether `session` is still open, asked without using it: a `GET` with a protocol version no
/// server speaks is refused (400) once the session is found, and a session let go is a 404.
async fn still_open(app: &TestApp, session: &str) -> bool {
    let probe = [
        ("accept", "text/event-stream"),
        ("mcp-session-id", session),
        ("mcp-protocol-version", "1999-01-01"),
    ];
    match exchange(app, "GET", "/mcp", &probe, "").await {
        (400, _, _) => true,
        (404, _, _) => false,
        (status, _, body) => panic!("probe of {session}: {status} {body}"),
    }
}

/// Waits (within the deadline) until `session` has been let go.
async fn let_go(app: &TestApp, session: &str) {
    let deadline = tokio::time::Instant::now() + crate::child::DEADLINE;
    while still_open(app, session).await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{session} is still open"
        );
        tokio::task::yield_now().await;
    }
}

#[actix_web::test]
async fn an_idle_session_is_let_go_and_a_busy_one_is_not() {
    let mut short = settings(&["Lanlan"]);
    short.mcp_endpoint.session_idle = std::time::Duration::from_secs(1);
    let app = spawn_app_with(short).await;
    let callback = CallbackServer::with("/slow", Reply::after_gate(Reply::output(json!("done"))));
    register(&app, "slow", &callback, "Lanlan").await;

    let idle = open_session(&app).await;
    let listening = open_session(&app).await;
    let stream = open_stream(&app, &listening).await;
    let calling = open_session(&app).await;
    let in_calling = [
        JSON_AND_SSE,
        JSON,
        ("mcp-session-id", calling.as_str()),
        ("mcp-protocol-version", "2025-06-18"),
    ];
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                      "params": {"name": "slow", "arguments": {}}})
    .to_string();
    let call = exchange(&app, "POST", "/mcp", &in_calling, &call);
    let waited = async {
        callback.wait_for_requests(1).await;
        let_go(&app, &idle).await;
        // A session opened after the busy ones' last use is let go too: they have gone
        // longer than the idle time with a stream open, or a call running.
        let later = open_session(&app).await;
        let_go(&app, &later).await;
        assert!(
            still_open(&app, &listening).await,
            "the listening one stays"
        );
        assert!(still_open(&app, &calling).await, "the calling one stays");
        callback.open_gate();
    };
    let ((status, _, body), ()) = futures_util::join!(call, waited);
    assert_eq!(status, 200, "{body}");
    let answer = rpc_answer(&body);
    assert!(
        answer["result"]["isError"] != json!(true) && answer.to_string().contains("done"),
        "{answer}"
    );
    assert_eq!(list_in(&app, &idle).await, 404, "its next request");

    // Idle once the call has ended, or the stream closed: let go in turn.
    let_go(&app, &calling).await;
    drop(stream);
    let_go(&app, &listening).await;
}
