//! `GET /api/tools/openapi.json` against the server itself: the document is OpenAPI 3.1, every
//! operation in it exists and every route is in it, every status it lists is one the route
//! really produces (each is provoked here), and every real response validates against the
//! schema the document gives for it (JSON Schema 2020-12, with the document's components).

use actix_web::http::Method;
use runtime_tools::faults::InjectRouterStop;
use runtime_tools::{ChatSettings, Dialect, SessionSettings};
use serde_json::{Value, json};

use crate::callback_server::{CallbackServer, ClosedPort, Reply};
use crate::fake_chat::{Answer, FakeChat, completion};
use crate::fake_realtime::{AckMode, FakeRealtime};
use crate::helpers::{
    TestApp, parse_json, raw_exchange_async, raw_head, settings, spawn_app_with, tool_body,
};

const OPENAPI: &str = "/api/tools/openapi.json";

/// Every route the server serves, with its method: the document must list exactly these.
const SERVER_ROUTES: &[(&str, &str)] = &[
    ("post", "/api/tools/register"),
    ("post", "/api/tools/unregister"),
    ("post", "/api/tools/clear"),
    ("get", "/api/tools"),
    ("get", SEARCH),
    ("post", "/api/tools/invoke"),
    ("post", PROGRESS),
    ("get", "/api/approvals"),
    ("post", APPROVAL),
    ("get", "/api/sessions"),
    ("post", "/api/sessions/context"),
    ("post", "/api/sessions/attach"),
    ("post", "/api/sessions/detach"),
    ("get", EVENTS),
    ("get", "/api/mcp"),
    ("post", "/api/mcp/register"),
    ("post", "/api/mcp/unregister"),
    ("post", MCP),
    ("get", MCP),
    ("delete", MCP),
    ("get", OPENAPI),
    ("post", CHAT),
    ("post", RESPONSES),
    ("get", MODELS),
    ("get", METRICS),
    ("get", CALLS),
    ("get", HEALTH),
    ("get", SOURCES),
    ("post", WAKE),
    ("delete", BINDING),
];

/// The sources and their bindings: the listing, a plugin's wake, the operator's unbinding (the
/// last two sent for a concrete source, [`concrete`]).
const SOURCES: &str = "/api/sources";
const WAKE: &str = "/api/sources/{source}/wake";
const BINDING: &str = "/api/sources/{source}/binding";

/// The variable that holds the token of the source the configuration binds.
const CONFIGURED_TOKEN_ENV: &str = "RT_TEST_OPENAPI_CONFIGURED_TOKEN";
/// A character's tools, searched (it reads the published snapshots, never the router).
const SEARCH: &str = "/api/tools/search";

/// The server's identity and what it restored.
const HEALTH: &str = "/api/health";

/// The Prometheus exposition (text) and the recent calls.
const METRICS: &str = "/metrics";
const CALLS: &str = "/api/calls";

/// A running call's progress, as the document names it; sent with a concrete id
/// ([`concrete`]), and recorded under this name.
const PROGRESS: &str = "/api/tools/calls/{call_id}/progress";

/// A decision on a pending approval, as the document names it.
const APPROVAL: &str = "/api/approvals/{id}";

/// A path as requested: the progress route's `{call_id}` made a call id, an approval's `{id}`
/// an id.
fn concrete(path: &str) -> String {
    path.replace("{call_id}", "call_doc")
        .replace("{id}", "apr_doc")
        .replace("{source}", "plugin:doc")
}

/// A requested path as the document names it.
fn documented_path(path: &str) -> String {
    if path.starts_with("/api/approvals/") {
        return APPROVAL.to_owned();
    }
    if let Some(rest) = path.strip_prefix("/api/sources/") {
        if rest.ends_with("/wake") {
            return WAKE.to_owned();
        }
        if rest.ends_with("/binding") {
            return BINDING.to_owned();
        }
    }
    match path.strip_prefix("/api/tools/calls/") {
        Some(rest) if rest.ends_with("/progress") => PROGRESS.to_owned(),
        _ => path.to_owned(),
    }
}

/// The OpenAI-compatible routes, which answer without the router.
const CHAT: &str = "/v1/chat/completions";
const RESPONSES: &str = "/v1/responses";
const MODELS: &str = "/v1/models";

/// The event stream: endless, so only its first frame is read.
const EVENTS: &str = "/api/events";

/// A character's tools over MCP's Streamable HTTP transport (its answers are event streams).
const MCP: &str = "/mcp";

/// Methods probed on every documented path: the ones it does not list must be 405.
const METHODS: &[&str] = &["get", "post", "put", "patch", "delete"];

/// The request-body limit the API promises.
const MIB: usize = 1024 * 1024;

/// A request body.
enum Body {
    None,
    Json(Value),
    /// Raw bytes sent as `application/json`.
    Raw(Vec<u8>),
}

/// One request and the server's answer.
#[derive(Debug)]
struct Exchange {
    method: String,
    /// The documented path (no query string).
    path: String,
    status: u16,
    body: Value,
    content_type: Option<String>,
    /// The session an answer of `/mcp` opened (its `Mcp-Session-Id`).
    session: Option<String>,
}

/// Sends one request; `host` replaces the `Host` header when given.
async fn call(
    app: &TestApp,
    method: &str,
    path_and_query: &str,
    host: Option<&str>,
    body: Body,
) -> Exchange {
    let headers: Vec<(&str, &str)> = host.map(|h| ("host", h)).into_iter().collect();
    call_with(app, method, path_and_query, &headers, body).await
}

/// Sends one request with these headers.
async fn call_with(
    app: &TestApp,
    method: &str,
    path_and_query: &str,
    headers: &[(&str, &str)],
    body: Body,
) -> Exchange {
    let http_method = Method::from_bytes(method.to_ascii_uppercase().as_bytes()).unwrap();
    let mut request = app
        .client
        .request(http_method, app.url(&concrete(path_and_query)));
    for header in headers {
        request = request.insert_header(*header);
    }
    let sent = match body {
        Body::None => request.send().await,
        Body::Json(value) => request.send_json(&value).await,
        Body::Raw(bytes) => {
            request
                .insert_header(("content-type", "application/json"))
                .send_body(bytes)
                .await
        }
    };
    let mut response = sent.unwrap_or_else(|e| panic!("{method} {path_and_query}: {e}"));
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let session = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let bytes = if content_type.as_deref() == Some("text/event-stream") {
        first_frame(&mut response).await
    } else {
        response.body().limit(64 << 20).await.expect("body read")
    };
    Exchange {
        method: method.to_owned(),
        path: documented_path(path_and_query.split('?').next().unwrap_or_default()),
        status: response.status().as_u16(),
        body: parse_json(&bytes),
        content_type,
        session,
    }
}

/// The first frame of an event stream (up to its blank line); the rest is left unread.
async fn first_frame<S>(response: &mut awc::ClientResponse<S>) -> actix_web::web::Bytes
where
    S: futures_util::Stream<Item = Result<actix_web::web::Bytes, awc::error::PayloadError>> + Unpin,
{
    use futures_util::StreamExt;
    let mut frame = Vec::new();
    while !frame.ends_with(b"\n\n") {
        let chunk = response.next().await.expect("a frame").expect("frame read");
        frame.extend_from_slice(&chunk);
    }
    frame.into()
}

async fn fetch_document(app: &TestApp) -> Value {
    let exchange = call(app, "get", OPENAPI, None, Body::None).await;
    assert_eq!(exchange.status, 200, "{:?}", exchange.body);
    assert_eq!(exchange.content_type.as_deref(), Some("application/json"));
    exchange.body
}

/// `(method, path, [status, ...])` of every operation in the document.
fn operations(doc: &Value) -> Vec<(String, String, Vec<u16>)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in item.as_object().expect("path item") {
            let statuses = operation["responses"]
                .as_object()
                .expect("responses")
                .keys()
                .map(|s| s.parse().unwrap_or_else(|_| panic!("status {s:?}")))
                .collect();
            out.push((method.clone(), path.clone(), statuses));
        }
    }
    out
}

/// The response schema the document gives for `method path` answering `status`, as a
/// standalone JSON Schema 2020-12 document (the components embedded so `$ref`s resolve).
fn response_schema(doc: &Value, method: &str, path: &str, status: u16) -> Option<Value> {
    let response = &doc["paths"][path][method]["responses"][status.to_string()];
    let content = response["content"].as_object()?;
    let schema = match content.get("application/json") {
        Some(json) => json["schema"].clone(),
        // An event stream's body is text (the first frame is checked as a string), and so is
        // the Prometheus exposition.
        None => content
            .iter()
            .find(|(kind, _)| {
                kind.starts_with("text/event-stream") || kind.starts_with("text/plain")
            })?
            .1["schema"]
            .clone(),
    };
    let Value::Object(mut schema) = schema else {
        return None;
    };
    schema.insert(
        "$schema".into(),
        json!("https://json-schema.org/draft/2020-12/schema"),
    );
    schema.insert("components".into(), doc["components"].clone());
    Some(Value::Object(schema))
}

/// The documented operation an answer belongs to: its own method's, except that a 405 (a
/// method the path does not serve) belongs to the path's operation.
fn operation_method(doc: &Value, exchange: &Exchange) -> String {
    if exchange.status != 405 {
        return exchange.method.clone();
    }
    let item = doc["paths"][&exchange.path].as_object();
    let methods: Vec<&String> = item.map(|i| i.keys().collect()).unwrap_or_default();
    match methods.as_slice() {
        [only] => (*only).clone(),
        // A path of several operations documents its 405 under one of them.
        _ => methods
            .iter()
            .find(|m| doc["paths"][&exchange.path][m.as_str()]["responses"]["405"].is_object())
            .map(|m| (*m).clone())
            .unwrap_or_else(|| panic!("{} has {methods:?} operations", exchange.path)),
    }
}

/// Panics unless `exchange` is documented for its route and its body validates.
fn check_against_document(doc: &Value, exchange: &Exchange) {
    let method = &operation_method(doc, exchange);
    let Exchange {
        path, status, body, ..
    } = exchange;
    // An answer documented without a body has none.
    let documented = &doc["paths"][path][method]["responses"][status.to_string()];
    if documented.is_object() && documented.get("content").is_none() {
        assert_eq!(*body, json!(""), "{method} {path} {status} has a body");
        return;
    }
    let schema = response_schema(doc, method, path, *status).unwrap_or_else(|| {
        panic!("{method} {path} answered {status} ({body}), which the document does not list")
    });
    let validator = jsonschema::draft202012::new(&schema)
        .unwrap_or_else(|e| panic!("{method} {path} {status}: bad schema: {e}"));
    let errors: Vec<String> = validator
        .iter_errors(body)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{method} {path} {status}: {body} does not match its schema: {errors:#?}"
    );
}

/// Whether an answer is the server's "no such route" or "no such method" answer.
fn is_unknown_route(exchange: &Exchange) -> bool {
    exchange.status == 405
        || (exchange.status == 404 && exchange.body == json!({"ok": false, "detail": "Not Found"}))
}

#[actix_web::test]
async fn the_document_is_openapi_3_1_and_lists_exactly_the_servers_routes() {
    let app = spawn_app_with(settings(&["Lanlan"])).await;
    let doc = fetch_document(&app).await;
    let version = doc["openapi"].as_str().expect("openapi version");
    assert!(version.starts_with("3.1."), "{version}");
    assert_eq!(doc["info"]["version"], json!(env!("CARGO_PKG_VERSION")));

    let documented: Vec<(String, String)> = operations(&doc)
        .into_iter()
        .map(|(method, path, _)| (method, path))
        .collect();
    for (method, path) in SERVER_ROUTES {
        assert!(
            documented.contains(&(method.to_string(), path.to_string())),
            "{method} {path} is served but not documented"
        );
    }
    for (method, path) in &documented {
        assert!(
            SERVER_ROUTES.contains(&(method.as_str(), path.as_str())),
            "{method} {path} is documented but not in this test's list of routes"
        );
        // The route exists: whatever it says about an empty body, it is not "no such route".
        let body = if method == "post" {
            Body::Json(json!({}))
        } else {
            Body::None
        };
        let exchange = call(&app, method, path, None, body).await;
        assert!(
            !is_unknown_route(&exchange),
            "{method} {path} is documented but the server answers {} {}",
            exchange.status,
            exchange.body
        );
        // And the methods it does not list are refused, so the document lists them all.
        for other in METHODS {
            if documented.contains(&(other.to_string(), path.clone())) {
                continue;
            }
            let exchange = call(&app, other, path, None, Body::None).await;
            assert_eq!(exchange.status, 405, "{other} {path}: {}", exchange.body);
        }
    }
}

#[actix_web::test]
async fn every_documented_status_is_produced_and_every_answer_matches_its_schema() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let callback = CallbackServer::with(
        "/cb",
        Reply::output(json!({"temperature_c": 28, "sky": ["clear"]})),
    );
    let chat_model = FakeChat::start();
    let mut config = settings(&["Mio", "Lanlan"]);
    let mut session = SessionSettings::new(&fake.url, Dialect::Openai);
    // Mio may not be attached to any call: an attach is a 409.
    session.attach.max_attachments = 0;
    config.characters[0].session = Some(session);
    let mut chat = ChatSettings::new(chat_model.base());
    chat.timeout = std::time::Duration::from_secs(1);
    config.characters[0].chat = Some(chat);
    // One `/mcp` session per character: with it busy, an `initialize` is a 503.
    config.mcp_endpoint.max_sessions = 1;
    // A source the configuration binds: its unbinding is a 409.
    // SAFETY: no other test reads or writes this variable.
    unsafe { std::env::set_var(CONFIGURED_TOKEN_ENV, crate::ownership::TOKEN_B) };
    config.configured_sources = vec![runtime_tools::ConfiguredSource {
        source: "plugin:configured".into(),
        token_env: CONFIGURED_TOKEN_ENV.into(),
    }];
    let app = spawn_app_with(config).await;
    let doc = fetch_document(&app).await;

    // A body that stops halfway is a 408 once the server's body deadline passes: started now, on
    // every POST route at once, and collected at the end.
    let stalled: Vec<_> = SERVER_ROUTES
        .iter()
        .filter(|(method, _)| *method == "post")
        .map(|(_, path)| {
            let bearer = format!("Bearer {}", app.operator_token);
            let mut headers = vec![
                ("Host", app.host()),
                ("Content-Type", "application/json".to_owned()),
                ("Content-Length", "100".to_owned()),
            ];
            // A decision's credential is checked before its body is read.
            if path.starts_with("/api/approvals/") {
                headers.push(("Authorization", bearer));
            }
            let headers: Vec<_> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let mut request = raw_head("POST", &concrete(path), &headers);
            request.extend_from_slice(b"{\"name\":");
            (
                *path,
                actix_web::rt::spawn(raw_exchange_async(app.addr, request)),
            )
        })
        .collect();

    let register = |name: &str| Body::Json(tool_body(name, &callback.url("/cb"), "plugin:demo"));
    let too_large = || Body::Raw(vec![b' '; MIB + 1]);
    let foreign = Some("evil.example");
    let mut exchanges = Vec::new();
    let mut run = async |method: &str, path: &str, host: Option<&str>, body: Body| {
        exchanges.push(call(&app, method, path, host, body).await);
    };

    // Register: a success, then every error.
    run("post", "/api/tools/register", None, register("get_weather")).await;
    run("post", "/api/tools/register", None, register("spare")).await;
    run("post", "/api/tools/register", foreign, register("x")).await;
    let mut unknown_role = tool_body("x", &callback.url("/cb"), "plugin:demo");
    unknown_role["role"] = json!("Nobody");
    run(
        "post",
        "/api/tools/register",
        None,
        Body::Json(unknown_role),
    )
    .await;
    run("get", "/api/tools/register", None, Body::None).await;
    run("post", "/api/tools/register", None, too_large()).await;
    let bad = json!({"name": "", "callback_url": "http://example.com/cb", "timeout_seconds": 0});
    run("post", "/api/tools/register", None, Body::Json(bad)).await;
    // A body that is not JSON at all is a 422 of the same shape.
    run(
        "post",
        "/api/tools/register",
        None,
        Body::Raw(b"{".to_vec()),
    )
    .await;

    // Listing, sessions and invoke while the tools are there.
    run("get", "/api/tools", None, Body::None).await;
    run("get", "/api/tools?role=Mio", None, Body::None).await;
    run("get", "/api/tools", foreign, Body::None).await;
    run("get", "/api/tools?role=Nobody", None, Body::None).await;
    run("post", "/api/tools", None, Body::Json(json!({}))).await;
    run("get", "/api/tools?role=Mio&role=Lanlan", None, Body::None).await;
    // Searching them: a success, and every refusal.
    run(
        "get",
        &format!("{SEARCH}?role=Mio&q=weather"),
        None,
        Body::None,
    )
    .await;
    run(
        "get",
        &format!("{SEARCH}?role=Mio&q=weather"),
        foreign,
        Body::None,
    )
    .await;
    run(
        "get",
        &format!("{SEARCH}?role=Nobody&q=weather"),
        None,
        Body::None,
    )
    .await;
    run("post", SEARCH, None, Body::Json(json!({}))).await;
    run(
        "get",
        &format!("{SEARCH}?role=Mio&limit=0"),
        None,
        Body::None,
    )
    .await;

    run("get", "/api/sessions", None, Body::None).await;
    run("get", "/api/sessions", foreign, Body::None).await;
    run("post", "/api/sessions", None, Body::Json(json!({}))).await;

    // Attach to a call (the fake, with a call id) and detach, and every error.
    let call_url = format!("{}&call_id=rtc_doc", fake.url);
    let attach = json!({"role": "Lanlan", "url": call_url});
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!(
        "ws://127.0.0.1:{}/v1/realtime",
        dead.local_addr().unwrap().port()
    );
    drop(dead);
    for path in ["/api/sessions/attach", "/api/sessions/detach"] {
        run("post", path, None, Body::Json(attach.clone())).await;
        run("post", path, foreign, Body::Json(attach.clone())).await;
        let nobody = json!({"role": "Nobody", "url": call_url});
        run("post", path, None, Body::Json(nobody)).await;
        run("get", path, None, Body::None).await;
        run("post", path, None, too_large()).await;
        run("post", path, None, Body::Json(json!({"role": 1}))).await;
    }
    let dead = json!({"role": "Lanlan", "url": dead_url});
    run("post", "/api/sessions/attach", None, Body::Json(dead)).await;
    let full = json!({"role": "Mio", "url": call_url});
    run("post", "/api/sessions/attach", None, Body::Json(full)).await;

    let call_body =
        json!({"name": "get_weather", "arguments": {"city": "Kyoto"}, "call_id": "call_1"});
    run("post", "/api/tools/invoke", None, Body::Json(call_body)).await;
    let by_hand = json!({"name": "get_weather", "arguments": {}, "role": "Mio"});
    run("post", "/api/tools/invoke", foreign, Body::Json(by_hand)).await;
    let missing = json!({"name": "no_such_tool"});
    run("post", "/api/tools/invoke", None, Body::Json(missing)).await;
    run("get", "/api/tools/invoke", None, Body::None).await;
    run("post", "/api/tools/invoke", None, too_large()).await;
    let bad = json!({"name": 7, "arguments": "x"});
    run("post", "/api/tools/invoke", None, Body::Json(bad)).await;

    // Unregister and clear.
    let unregister = json!({"name": "get_weather", "role": null});
    run(
        "post",
        "/api/tools/unregister",
        None,
        Body::Json(unregister.clone()),
    )
    .await;
    run(
        "post",
        "/api/tools/unregister",
        foreign,
        Body::Json(unregister),
    )
    .await;
    let unknown_role = json!({"name": "get_weather", "role": "Nobody"});
    run(
        "post",
        "/api/tools/unregister",
        None,
        Body::Json(unknown_role),
    )
    .await;
    run("get", "/api/tools/unregister", None, Body::None).await;
    run("post", "/api/tools/unregister", None, too_large()).await;
    run("post", "/api/tools/unregister", None, Body::Json(json!({}))).await;

    let clear = json!({"source": "plugin:demo", "role": null});
    run("post", "/api/tools/clear", None, Body::Json(clear.clone())).await;
    run("post", "/api/tools/clear", foreign, Body::Json(clear)).await;
    let unknown_role = json!({"source": "plugin:demo", "role": "Nobody"});
    run("post", "/api/tools/clear", None, Body::Json(unknown_role)).await;
    run("get", "/api/tools/clear", None, Body::None).await;
    run("post", "/api/tools/clear", None, too_large()).await;
    run(
        "post",
        "/api/tools/clear",
        None,
        Body::Json(json!({"source": ""})),
    )
    .await;

    // The event stream: a subscription (its first frame is `hello`), and each refusal.
    run("get", EVENTS, None, Body::None).await;
    run("get", &format!("{EVENTS}?role=Mio"), None, Body::None).await;
    run("get", EVENTS, foreign, Body::None).await;
    run("get", &format!("{EVENTS}?role=Nobody"), None, Body::None).await;
    run("post", EVENTS, None, Body::Json(json!({}))).await;
    run(
        "get",
        &format!("{EVENTS}?role=Mio&role=Lanlan"),
        None,
        Body::None,
    )
    .await;
    // The MCP servers (none configured here).
    run("get", "/api/mcp", None, Body::None).await;
    run("get", "/api/mcp", foreign, Body::None).await;
    run("post", "/api/mcp", None, Body::Json(json!({}))).await;
    // MCP servers registered at run time: another runtime-tools server's `/mcp` (a real MCP
    // server), one that does not listen (`ok: false`), and every refusal.
    let peer = spawn_app_with(settings(&["Peer"])).await;
    let (status, _) = peer
        .register(&tool_body("peer_tool", &callback.url("/cb"), "plugin:peer"))
        .await;
    assert_eq!(status, 200);
    let closed = ClosedPort::new();
    let peer_mcp = json!({"name": "peer", "url": peer.url("/mcp"), "source": "plugin:peer-mcp"});
    run(
        "post",
        "/api/mcp/register",
        None,
        Body::Json(peer_mcp.clone()),
    )
    .await;
    let gone = json!({"name": "gone", "url": closed.url("/mcp")});
    run("post", "/api/mcp/register", None, Body::Json(gone.clone())).await;
    run("post", "/api/mcp/register", foreign, Body::Json(gone)).await;
    let nobody = json!({"name": "gone", "url": closed.url("/mcp"), "role": "Nobody"});
    run("post", "/api/mcp/register", None, Body::Json(nobody)).await;
    run("get", "/api/mcp/register", None, Body::None).await;
    run("post", "/api/mcp/register", None, too_large()).await;
    let bad = json!({"name": "", "url": "http://example.com/mcp", "timeout_seconds": 0});
    run("post", "/api/mcp/register", None, Body::Json(bad)).await;
    run("get", "/api/mcp", None, Body::None).await;
    let unknown = json!({"name": "nobody"});
    run(
        "post",
        "/api/mcp/unregister",
        None,
        Body::Json(unknown.clone()),
    )
    .await;
    run("post", "/api/mcp/unregister", foreign, Body::Json(unknown)).await;
    run("get", "/api/mcp/unregister", None, Body::None).await;
    run("post", "/api/mcp/unregister", None, too_large()).await;
    run(
        "post",
        "/api/mcp/unregister",
        None,
        Body::Json(json!({"name": ""})),
    )
    .await;
    // Text chat: an answer, each refusal, and an upstream that answers nonsense or nothing.
    chat_model.script([
        Answer::Json(200, completion("c1", "Hello.", (1, 1))),
        Answer::Text(200, "text/html".into(), "<html>".into()),
        Answer::HoldOpen,
    ]);
    chat_model.script_models([Answer::HoldOpen]);
    let chat = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    run("post", CHAT, None, Body::Json(chat.clone())).await;
    run("post", CHAT, None, Body::Json(chat.clone())).await;
    run("post", CHAT, None, Body::Json(chat.clone())).await;
    run("post", CHAT, None, Body::Json(json!({"model": "m"}))).await;
    run("post", CHAT, foreign, Body::Json(chat.clone())).await;
    run(
        "post",
        &format!("{CHAT}?character=Lanlan"),
        None,
        Body::Json(chat),
    )
    .await;
    run("get", CHAT, None, Body::None).await;
    // The Responses API: the same, in its terms.
    let response = json!({"id": "resp_1", "object": "response", "created_at": 1, "status": "completed",
        "model": "m", "output": [{"type": "message", "id": "msg_1", "role": "assistant",
        "status": "completed", "content": [{"type": "output_text", "text": "Hello.",
        "annotations": []}]}], "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}});
    chat_model.script([
        Answer::Json(200, response),
        Answer::Text(200, "text/html".into(), "<html>".into()),
        Answer::HoldOpen,
    ]);
    let ask = json!({"model": "m", "input": "hi"});
    run("post", RESPONSES, None, Body::Json(ask.clone())).await;
    run("post", RESPONSES, None, Body::Json(ask.clone())).await;
    run("post", RESPONSES, None, Body::Json(ask.clone())).await;
    run("post", RESPONSES, None, Body::Json(json!({"input": 1}))).await;
    run("post", RESPONSES, foreign, Body::Json(ask.clone())).await;
    run(
        "post",
        &format!("{RESPONSES}?character=Lanlan"),
        None,
        Body::Json(ask),
    )
    .await;
    run("get", RESPONSES, None, Body::None).await;
    run("get", MODELS, None, Body::None).await;
    run("get", MODELS, None, Body::None).await;
    run("get", MODELS, foreign, Body::None).await;
    run(
        "get",
        &format!("{MODELS}?character=Nobody"),
        None,
        Body::None,
    )
    .await;
    run("post", MODELS, None, Body::Json(json!({}))).await;
    // Over 32 MiB, refused on its declared length.
    let length = (32 * MIB + 1).to_string();
    let head = raw_head(
        "POST",
        CHAT,
        &[
            ("Host", &app.host()),
            ("Content-Type", "application/json"),
            ("Content-Length", &length),
        ],
    );
    let chat_too_large = raw_exchange_async(app.addr, head).await;
    let head = raw_head(
        "POST",
        RESPONSES,
        &[
            ("Host", &app.host()),
            ("Content-Type", "application/json"),
            ("Content-Length", &length),
        ],
    );
    let responses_too_large = raw_exchange_async(app.addr, head).await;
    // A call that waits for approval (Mio's chat model calls it), listed and decided, then
    // every error of both routes.
    let mut stream = crate::event_stream::open(&app, "?role=Mio", None)
        .await
        .expect("stream opens");
    let mut asks = tool_body("asks_doc", &callback.url("/cb"), "plugin:demo");
    asks["approval"] = json!("always");
    asks["role"] = json!("Mio");
    run("post", "/api/tools/register", None, Body::Json(asks)).await;
    chat_model.script([
        Answer::Json(
            200,
            crate::fake_chat::calls_completion(
                "cmpl-doc",
                None,
                &[("c_doc", "asks_doc", json!({"city": "Kyoto"}))],
            ),
        ),
        Answer::Json(200, completion("cmpl-doc-2", "Done.", (1, 1))),
    ]);
    let url = app.url(CHAT);
    let waiting = actix_web::rt::spawn(async move {
        let body = json!({"model": "m", "messages": [{"role": "user", "content": "go"}]});
        let _ = crate::helpers::test_client()
            .post(url)
            .send_json(&body)
            .await;
    });
    let id = stream
        .wait_for("approval.requested", |d| d["call_id"] == "c_doc")
        .await
        .data["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let decision = format!("/api/approvals/{id}");
    run("get", "/api/approvals", None, Body::None).await;
    run("get", "/api/approvals?role=Mio", None, Body::None).await;
    run("get", "/api/approvals?role=Nobody", None, Body::None).await;
    run(
        "get",
        "/api/approvals?role=Mio&role=Lanlan",
        None,
        Body::None,
    )
    .await;
    run("get", "/api/approvals", foreign, Body::None).await;
    run("post", "/api/approvals", None, Body::Json(json!({}))).await;
    let approve = || Body::Json(json!({"decision": "approve"}));
    run("post", &decision, foreign, approve()).await;
    run("get", &decision, None, Body::None).await;
    // Decisions are the operator's (collected apart: `run` holds the list meanwhile): without
    // the token, with another, then every other answer with it.
    let mut decided = Vec::new();
    decided.push(call(&app, "post", &decision, None, approve()).await);
    let plugins_token = ("authorization", "Bearer a-plugin-token-not-the-operators");
    decided.push(call_with(&app, "post", &decision, &[plugins_token], approve()).await);
    let bearer = format!("Bearer {}", app.operator_token);
    let operator = [("authorization", bearer.as_str())];
    decided.push(call_with(&app, "post", &decision, &operator, too_large()).await);
    let bad = json!({"decision": "maybe", "reason": 7, "extra": true});
    decided.push(call_with(&app, "post", &decision, &operator, Body::Json(bad)).await);
    decided.push(call_with(&app, "post", &decision, &operator, approve()).await);
    decided.push(call_with(&app, "post", &decision, &operator, approve()).await);
    let nobody = "/api/approvals/apr_nobody";
    decided.push(call_with(&app, "post", nobody, &operator, approve()).await);
    let _ = waiting.await;

    // And with the upstream gone.
    drop(chat_model);
    run("get", MODELS, None, Body::None).await;

    // The sources: one bound by a registration with a token, woken by it and freed by the
    // operator, and every refusal (collected apart, as `/mcp`'s below).
    let mut sources = Vec::new();
    let tokened = [("x-plugin-token", crate::ownership::TOKEN_A)];
    let bound = Body::Json(tool_body("bound_doc", &callback.url("/cb"), "plugin:bound"));
    let registered = call_with(&app, "post", "/api/tools/register", &tokened, bound).await;
    assert_eq!(registered.status, 200, "{:?}", registered.body);
    let wake = "/api/sources/plugin:bound/wake";
    let binding = "/api/sources/plugin:bound/binding";
    let empty = || Body::Json(json!({}));
    sources.push(call(&app, "get", SOURCES, None, Body::None).await);
    sources.push(call(&app, "get", SOURCES, foreign, Body::None).await);
    sources.push(call(&app, "post", SOURCES, None, empty()).await);
    sources.push(call_with(&app, "post", wake, &tokened, empty()).await);
    sources.push(call(&app, "post", wake, None, empty()).await);
    sources.push(call(&app, "post", wake, foreign, empty()).await);
    let unknown = "/api/sources/plugin:nobody/wake";
    sources.push(call_with(&app, "post", unknown, &tokened, empty()).await);
    sources.push(call(&app, "get", wake, None, Body::None).await);
    sources.push(call(&app, "post", wake, None, too_large()).await);
    sources.push(call(&app, "post", wake, None, Body::Raw(b"[]".to_vec())).await);
    let bearer = format!("Bearer {}", app.operator_token);
    let operator = [("authorization", bearer.as_str())];
    let plugin = [("authorization", "Bearer a-plugin-token-0123456789")];
    sources.push(call(&app, "delete", binding, foreign, Body::None).await);
    sources.push(call(&app, "delete", binding, None, Body::None).await);
    sources.push(call_with(&app, "delete", binding, &plugin, Body::None).await);
    sources.push(call_with(&app, "delete", binding, &operator, Body::None).await);
    sources.push(call_with(&app, "delete", binding, &operator, Body::None).await);
    let configured = "/api/sources/plugin:configured/binding";
    sources.push(call_with(&app, "delete", configured, &operator, Body::None).await);
    sources.push(call(&app, "get", binding, None, Body::None).await);

    // A character's tools over MCP's Streamable HTTP transport: a session opened, used, its
    // stream and its end, and every refusal (collected apart: `run` holds the list meanwhile).
    let mut mcp = Vec::new();
    let accept = ("accept", "application/json, text/event-stream");
    let stream = ("accept", "text/event-stream");
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "doc", "version": "1"}}});
    let opened = call_with(&app, "post", MCP, &[accept], Body::Json(initialize.clone())).await;
    let session = opened.session.clone().expect("a session id");
    mcp.push(opened);
    let version = ("mcp-protocol-version", "2025-06-18");
    let in_session = [accept, ("mcp-session-id", session.as_str()), version];
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    mcp.push(call_with(&app, "post", MCP, &in_session, Body::Json(initialized)).await);
    mcp.push(call_with(&app, "post", MCP, &in_session, Body::Json(json!({}))).await);
    let foreign_host = ("host", "evil.example");
    let init = || Body::Json(initialize.clone());
    mcp.push(call_with(&app, "post", MCP, &[accept, foreign_host], init()).await);
    mcp.push(call_with(&app, "post", "/mcp?role=Nobody", &[accept], init()).await);
    mcp.push(call_with(&app, "put", MCP, &[], Body::None).await);
    // (Lanlan's: Mio's one session place stays with the session above.)
    mcp.push(call_with(&app, "post", "/mcp?role=Lanlan", &[], init()).await);
    mcp.push(call_with(&app, "post", MCP, &[accept], too_large()).await);
    mcp.push(call_with(&app, "post", MCP, &[accept], Body::Raw(b"{".to_vec())).await);
    let listening = [stream, ("mcp-session-id", session.as_str()), version];
    mcp.push(call_with(&app, "get", MCP, &listening, Body::None).await);
    mcp.push(call_with(&app, "get", MCP, &[stream], Body::None).await);
    mcp.push(call_with(&app, "get", MCP, &[stream, foreign_host], Body::None).await);
    mcp.push(call_with(&app, "get", "/mcp?role=Nobody", &[stream], Body::None).await);
    let unaccepted = [("mcp-session-id", session.as_str()), version];
    mcp.push(call_with(&app, "get", MCP, &unaccepted, Body::None).await);
    let twice = "/mcp?role=Mio&role=Lanlan";
    mcp.push(call_with(&app, "get", twice, &[stream], Body::None).await);
    mcp.push(call_with(&app, "delete", MCP, &in_session, Body::None).await);
    mcp.push(call_with(&app, "delete", MCP, &[], Body::None).await);
    mcp.push(call_with(&app, "delete", MCP, &[foreign_host], Body::None).await);
    mcp.push(call_with(&app, "delete", "/mcp?role=Nobody", &[], Body::None).await);
    mcp.push(call_with(&app, "delete", twice, &[], Body::None).await);
    // The character's one session busy (its stream open): a new one is refused.
    let busy = call_with(&app, "post", MCP, &[accept], init()).await;
    let busy = busy.session.expect("a session id");
    let busy_stream = crate::mcp_http::open_stream(&app, &busy).await;
    mcp.push(call_with(&app, "post", MCP, &[accept], init()).await);
    drop(busy_stream);

    // A running call's progress (an invoke the plugin holds), and a plugin's context.
    let held = CallbackServer::with("/held", Reply::HoldOpen);
    let mut slow = tool_body("slow_doc", &held.url("/held"), "plugin:demo");
    slow["behavior"] = json!("non_blocking");
    run("post", "/api/tools/register", None, Body::Json(slow)).await;
    let url = app.url("/api/tools/invoke");
    let running = actix_web::rt::spawn(async move {
        let body =
            json!({"name": "slow_doc", "arguments": {}, "call_id": "call_doc", "role": "Mio"});
        let _ = crate::helpers::test_client()
            .post(url)
            .send_json(&body)
            .await;
    });
    held.wait_for_requests(1).await;
    let progress = || Body::Json(json!({"message": "halfway"}));
    run("post", PROGRESS, None, progress()).await;
    run("post", PROGRESS, foreign, progress()).await;
    run(
        "post",
        "/api/tools/calls/call_nobody/progress",
        None,
        progress(),
    )
    .await;
    run("get", PROGRESS, None, Body::None).await;
    run("post", PROGRESS, None, too_large()).await;
    run("post", PROGRESS, None, Body::Json(json!({"message": ""}))).await;
    let context = || Body::Json(json!({"role": "Mio", "text": "The doorbell rang."}));
    run("post", "/api/sessions/context", None, context()).await;
    run("post", "/api/sessions/context", foreign, context()).await;
    let nobody = json!({"role": "Nobody", "text": "x"});
    run("post", "/api/sessions/context", None, Body::Json(nobody)).await;
    run("get", "/api/sessions/context", None, Body::None).await;
    run("post", "/api/sessions/context", None, too_large()).await;
    let empty = json!({"role": "Mio", "text": ""});
    run("post", "/api/sessions/context", None, Body::Json(empty)).await;
    running.abort();

    // The metrics and the recent calls (the invokes above are among them).
    run("get", METRICS, None, Body::None).await;
    run("get", METRICS, foreign, Body::None).await;
    run("post", METRICS, None, Body::Json(json!({}))).await;
    run("get", "/api/calls?role=Mio&limit=5", None, Body::None).await;
    run("get", "/api/calls?role=Nobody", None, Body::None).await;
    run("get", "/api/calls?limit=1001", None, Body::None).await;
    run("get", CALLS, foreign, Body::None).await;
    run("post", CALLS, None, Body::Json(json!({}))).await;

    // The server's health.
    run("get", HEALTH, None, Body::None).await;
    run("get", HEALTH, foreign, Body::None).await;
    run("post", HEALTH, None, Body::Json(json!({}))).await;

    // The full listing.
    run("get", "/api/tools?detail=full", None, Body::None).await;
    run("get", "/api/tools?detail=everything", None, Body::None).await;

    // The document itself.
    run("get", OPENAPI, foreign, Body::None).await;
    run("post", OPENAPI, None, Body::Json(json!({}))).await;
    run("get", OPENAPI, None, Body::None).await;

    // Last, with the router gone: every route that asks it answers 503 (invoke resolves tools
    // from the shared ledgers without asking it; the event stream asks it only to check a role).
    app.router
        .send(InjectRouterStop)
        .await
        .expect("router stopped");
    for (method, path) in SERVER_ROUTES.iter().filter(|(_, p)| {
        ![
            OPENAPI,
            SEARCH,
            "/api/tools/invoke",
            PROGRESS,
            "/api/mcp",
            CHAT,
            RESPONSES,
            MODELS,
            MCP,
            CALLS,
            HEALTH,
            SOURCES,
            BINDING,
            "/api/approvals",
            APPROVAL,
        ]
        .contains(p)
    }) {
        let body = match *path {
            "/api/tools/register" => register("late"),
            // The tools of a server that connected cannot be registered, nor removed.
            "/api/mcp/register" => Body::Json(json!({"name": "late", "url": peer.url("/mcp")})),
            "/api/mcp/unregister" => Body::Json(json!({"name": "peer"})),
            "/api/tools/unregister" => Body::Json(json!({"name": "late"})),
            "/api/tools/clear" => Body::Json(json!({"source": "plugin:demo"})),
            "/api/sessions/attach" | "/api/sessions/detach" => {
                Body::Json(json!({"role": "Lanlan", "url": "ws://127.0.0.1:9/v1/realtime"}))
            }
            "/api/sessions/context" => Body::Json(json!({"text": "late"})),
            WAKE => Body::Json(json!({})),
            _ => Body::None,
        };
        let path = match *path {
            EVENTS => format!("{EVENTS}?role=Mio"),
            other => other.to_owned(),
        };
        run(method, &path, None, body).await;
    }
    // The operator's unbinding gets past its credential to the router.
    let bearer = format!("Bearer {}", app.operator_token);
    let operator = [("authorization", bearer.as_str())];
    let unbinding = call_with(&app, "delete", BINDING, &operator, Body::None).await;
    assert_eq!(unbinding.status, 503, "{unbinding:?}");
    exchanges.push(unbinding);

    exchanges.extend(decided);
    exchanges.extend(mcp);
    exchanges.extend(sources);

    // A character that runs one chat request at a time, its place held by a body that never
    // ends: a request of either chat route is a 429 meanwhile.
    let mut one_at_a_time = settings(&["Mio"]);
    let mut one = ChatSettings::new("http://127.0.0.1:9/v1".to_owned());
    one.max_concurrent_requests = 1;
    one_at_a_time.characters[0].chat = Some(one);
    let limited = spawn_app_with(one_at_a_time).await;
    let mut request = raw_head(
        "POST",
        CHAT,
        &[
            ("Host", &limited.host()),
            ("Content-Type", "application/json"),
            ("Content-Length", "100"),
        ],
    );
    request.extend_from_slice(b"{\"messages\":");
    let hold = || actix_web::rt::spawn(raw_exchange_async(limited.addr, request.clone()));
    let mut holding = hold();
    let deadline = tokio::time::Instant::now() + crate::helpers::HTTP_DEADLINE;
    loop {
        // A probe that had the place when the held request came was the reason for its 429:
        // it is sent again.
        if holding.is_finished() {
            holding = hold();
        }
        // Until the held request has its place, a probe is refused for its body alone.
        let probe = call(
            &limited,
            "post",
            CHAT,
            None,
            Body::Json(json!({"messages": 1})),
        )
        .await;
        if probe.status == 429 {
            exchanges.push(probe);
            break;
        }
        assert_eq!(probe.status, 400, "{probe:?}");
        assert!(
            tokio::time::Instant::now() < deadline,
            "the place was never held"
        );
        tokio::task::yield_now().await;
    }
    exchanges.push(
        call(
            &limited,
            "post",
            RESPONSES,
            None,
            Body::Json(json!({"input": 1})),
        )
        .await,
    );
    holding.abort();
    let declared = [(CHAT, chat_too_large), (RESPONSES, responses_too_large)];
    for (path, response) in declared {
        exchanges.push(Exchange {
            method: "post".into(),
            path: path.into(),
            status: response.status,
            body: response.json(),
            content_type: response.header("content-type").map(str::to_owned),
            session: None,
        });
    }
    for (path, upload) in stalled {
        let response = upload.await.expect("stalled upload finished");
        exchanges.push(Exchange {
            method: "post".into(),
            path: path.into(),
            status: response.status,
            body: response.json(),
            content_type: response.header("content-type").map(str::to_owned),
            session: None,
        });
    }

    // Changes without a token on a server that requires one: 401.
    let mut strict = settings(&["Mio"]);
    strict.plugin_tokens = runtime_tools::TokenPolicy::Required;
    let strict = spawn_app_with(strict).await;
    for (path, body) in [
        (
            "/api/tools/register",
            tool_body("t", &callback.url("/cb"), "plugin:demo"),
        ),
        ("/api/tools/unregister", json!({"name": "t"})),
        ("/api/tools/clear", json!({"source": "plugin:demo"})),
        (
            "/api/mcp/register",
            json!({"name": "s", "url": callback.url("/mcp")}),
        ),
        ("/api/mcp/unregister", json!({"name": "s"})),
        (PROGRESS, json!({"message": "halfway"})),
        (
            "/api/sessions/context",
            json!({"text": "The doorbell rang."}),
        ),
    ] {
        exchanges.push(call(&strict, "post", path, None, Body::Json(body)).await);
    }

    // What the answers say, beyond their shape.
    let find = |method: &str, path: &str, status: u16| {
        exchanges
            .iter()
            .find(|e| operation_method(&doc, e) == method && e.path == path && e.status == status)
    };
    let registered = find("post", "/api/tools/register", 200).unwrap();
    assert_eq!(registered.body["affected_roles"], json!(["Mio", "Lanlan"]));
    let invoked = find("post", "/api/tools/invoke", 200).unwrap();
    assert_eq!(
        invoked.body["output"],
        json!({"temperature_c": 28, "sky": ["clear"]})
    );
    let subscribed = find("get", EVENTS, 200).unwrap();
    let hello = subscribed.body.as_str().expect("the stream's first frame");
    assert!(hello.starts_with("event: hello\ndata: {"), "{hello:?}");
    let sessions = find("get", "/api/sessions", 200).unwrap();
    assert_eq!(
        sessions.body["sessions_by_role"]["Mio"]["state"],
        json!("connected")
    );
    assert_eq!(
        find("post", "/api/sessions/attach", 200).unwrap().body,
        json!({"ok": true, "role": "Lanlan", "url": call_url})
    );
    assert_eq!(
        find("post", "/api/sessions/detach", 200).unwrap().body,
        json!({"ok": true, "role": "Lanlan", "url": call_url, "detached": true})
    );
    assert_eq!(
        find("get", "/api/sessions", 503).unwrap().body,
        json!({"ok": false, "detail": "the tool router has stopped"})
    );
    let peer_registered = find("post", "/api/mcp/register", 200).unwrap();
    assert_eq!(
        peer_registered.body,
        json!({"ok": true, "instance_id": app.events.instance_id(), "registered": "peer",
               "tools": ["peer_tool"], "skipped": [], "affected_roles": ["Mio", "Lanlan"],
               "failed_roles": []})
    );
    let mcp_listing = find("get", "/api/mcp", 200).unwrap();
    assert_eq!(mcp_listing.body["runtime_mcp_servers"], json!({}));
    assert_eq!(
        find("post", "/api/mcp/unregister", 503).unwrap().body,
        json!({"ok": false, "detail": "the tool router has stopped"})
    );

    assert_eq!(
        find("post", WAKE, 200).unwrap().body,
        json!({"ok": true, "source": "plugin:bound", "woken": 0})
    );
    assert_eq!(
        find("delete", BINDING, 200).unwrap().body,
        json!({"ok": true, "source": "plugin:bound", "unbound": true})
    );
    let listed = &find("get", SOURCES, 200).unwrap().body["sources"];
    let bound = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["source"] == "plugin:bound");
    assert_eq!(
        bound,
        Some(
            &json!({"source": "plugin:bound", "bound": true, "configured": false, "tools": 2,
                     "dormant": 0})
        )
    );

    // Every answer is documented for its route and matches the schema given for it...
    for exchange in &exchanges {
        check_against_document(&doc, exchange);
        let mcp_stream =
            exchange.path == MCP && exchange.status == 200 && exchange.method != "delete";
        if exchange.status == 200 && exchange.path == EVENTS || mcp_stream {
            assert_eq!(
                exchange.content_type.as_deref(),
                Some("text/event-stream"),
                "{exchange:?}"
            );
        } else if exchange.path == METRICS && exchange.status == 200 {
            assert_eq!(
                exchange.content_type.as_deref(),
                Some("text/plain; version=0.0.4; charset=utf-8"),
                "{exchange:?}"
            );
        } else if exchange.path == MCP && exchange.status < 300 {
            // Accepted, or a session ended: no body.
            assert_eq!(exchange.body, json!(""), "{exchange:?}");
        } else if exchange.status != 200 || exchange.path != OPENAPI {
            assert_eq!(
                exchange.content_type.as_deref(),
                Some("application/json"),
                "{exchange:?}"
            );
        }
    }
    // ...and every status the document lists was produced by its route.
    for (method, path, statuses) in operations(&doc) {
        for status in statuses {
            assert!(
                find(&method, &path, status).is_some(),
                "the document lists {status} for {method} {path}, which this test never saw"
            );
        }
    }
}
