//! Traces: the spans the server exports over OTLP/HTTP, received by a real HTTP receiver on
//! loopback and decoded with the official protobuf types (`opentelemetry-proto`): their names,
//! kinds, attributes and parentage, and the `traceparent` each callback got naming them. And a
//! collector that is down or slow: calls go on, spans are dropped and counted; one that answers
//! with gibibytes is read 64 KiB deep. A callback URL's query values never reach `url.full`. And
//! the binary, switched on and off by the standard `OTEL_*` variables.

use std::collections::HashMap;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use prost::Message;
use runtime_tools::{Dialect, Settings, TraceSettings};
use serde_json::{Value, json};

use crate::callback_server::{CallbackServer, ClosedPort, Reply, invoke_ok, register};
use crate::fake_chat::{Answer, FakeChat, calls_completion, completion};
use crate::fake_realtime::{AckMode, FakeRealtime};
use crate::helpers::{HTTP_DEADLINE, TestApp, settings, spawn_app_with};
use crate::sessions::{call_event, response_done};

/// An exported span, as the receiver decoded it.
#[derive(Debug, Clone)]
pub struct Exported {
    pub name: String,
    /// OTLP's `SpanKind`: 1 internal, 2 server, 3 client.
    pub kind: i32,
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    pub attributes: HashMap<String, String>,
    /// OTLP's `StatusCode`: 0 unset, 2 error.
    pub status: i32,
    pub service: String,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Every span the receiver got so far.
pub fn decode(receiver: &CallbackServer) -> Vec<Exported> {
    let mut spans = Vec::new();
    for request in receiver.received() {
        assert_eq!(request.path, "/v1/traces");
        assert_eq!(
            request.header("content-type"),
            Some("application/x-protobuf")
        );
        let export = ExportTraceServiceRequest::decode(request.body.as_slice())
            .expect("an OTLP trace export");
        for resource in export.resource_spans {
            let service = resource
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|a| a.key == "service.name")
                .map(|a| text(a.value.as_ref()))
                .unwrap_or_default();
            for scope in resource.scope_spans {
                for span in scope.spans {
                    spans.push(Exported {
                        name: span.name,
                        kind: span.kind,
                        trace_id: hex(&span.trace_id),
                        span_id: hex(&span.span_id),
                        parent_span_id: hex(&span.parent_span_id),
                        attributes: span
                            .attributes
                            .iter()
                            .map(|a| (a.key.clone(), text(a.value.as_ref())))
                            .collect(),
                        status: span.status.map_or(0, |s| s.code),
                        service: service.clone(),
                    });
                }
            }
        }
    }
    spans
}

fn text(value: Option<&opentelemetry_proto::tonic::common::v1::AnyValue>) -> String {
    match value.and_then(|v| v.value.as_ref()) {
        Some(Any::StringValue(s)) => s.clone(),
        Some(Any::IntValue(i)) => i.to_string(),
        Some(Any::BoolValue(b)) => b.to_string(),
        Some(Any::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

/// Waits until the receiver has a span `name`d so with `attribute` (key, value), and returns it.
pub async fn span(receiver: &CallbackServer, name: &str, attribute: (&str, &str)) -> Exported {
    span_where(receiver, |s| {
        s.name == name && s.attributes.get(attribute.0).map(String::as_str) == Some(attribute.1)
    })
    .await
}

/// The span whose id is `id`, once exported.
async fn span_by_id(receiver: &CallbackServer, id: &str) -> Exported {
    span_where(receiver, |s| s.span_id == id).await
}

/// The first exported span `which` picks, waiting for exports until there is one.
async fn span_where(receiver: &CallbackServer, which: impl Fn(&Exported) -> bool) -> Exported {
    loop {
        let seen = receiver.received().len();
        if let Some(found) = decode(receiver).into_iter().find(&which) {
            return found;
        }
        receiver.wait_for_requests(seen + 1).await;
    }
}

/// The receiver: answers every export with success (an empty `ExportTraceServiceResponse`).
pub fn receiver() -> CallbackServer {
    CallbackServer::with(
        "/v1/traces",
        Reply::Respond {
            status: 200,
            headers: vec![("content-type".into(), "application/x-protobuf".into())],
            body: Vec::new(),
        },
    )
}

/// Export to `endpoint`, in batches sent every 20 ms.
pub fn exporting(mut settings: Settings, endpoint: String) -> Settings {
    settings.trace = TraceSettings {
        export: true,
        endpoint: Some(endpoint),
        service_name: Some("runtime-tools-test".into()),
        schedule_delay: Some(Duration::from_millis(20)),
        ..TraceSettings::default()
    };
    settings
}

/// `(trace id, parent id)` of a `traceparent` header (`00-TRACE-PARENT-FLAGS`).
fn traceparent(value: &str) -> (String, String) {
    let parts: Vec<&str> = value.split('-').collect();
    assert_eq!(parts.len(), 4, "{value}");
    assert_eq!((parts[0], parts[3]), ("00", "01"), "{value}");
    (parts[1].to_owned(), parts[2].to_owned())
}

fn tool(name: &str, url: &str) -> Value {
    json!({"name": name, "callback_url": url, "role": "Mio", "source": "plugin:trace"})
}

/// POSTs `body` to `path` with a `traceparent` header; the answer's status and JSON.
async fn post_traced(app: &TestApp, path: &str, body: &Value, parent: &str) -> (u16, Value) {
    let mut response = app
        .client
        .post(app.url(path))
        .insert_header(("traceparent", parent))
        .insert_header(("tracestate", "caller=1"))
        .send_json(body)
        .await
        .expect("request sent");
    let status = response.status().as_u16();
    (
        status,
        response
            .json::<Value>()
            .limit(1 << 20)
            .await
            .unwrap_or(Value::Null),
    )
}

const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

#[actix_web::test]
async fn an_invoke_in_the_callers_trace_a_span_per_call_and_the_callback_names_it() {
    let receiver = receiver();
    let app = spawn_app_with(exporting(settings(&["Mio"]), receiver.url("/v1/traces"))).await;
    let callback = CallbackServer::start();
    callback.route("/ok", Reply::output(json!({"temperature_c": 28})));
    callback.route("/err", Reply::status_json(500, json!({"detail": "boom"})));
    register(&app, tool("get_weather", &callback.url("/ok"))).await;
    register(&app, tool("broken", &callback.url("/err"))).await;

    // An invoke that carries the caller's trace context.
    let parent = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let (status, answer) = post_traced(
        &app,
        "/api/tools/invoke",
        &json!({"name": "get_weather", "call_id": "call_t1", "arguments": {}}),
        &parent,
    )
    .await;
    assert_eq!(
        (status, &answer["is_error"]),
        (200, &json!(false)),
        "{answer}"
    );
    let got = &callback.wait_for_requests(1).await[0];
    let (trace, client_span) = traceparent(got.header("traceparent").expect("a traceparent"));
    assert_eq!(trace, CALLER_TRACE);
    assert_eq!(got.header("tracestate"), Some("caller=1"));

    let call = span(
        &receiver,
        "execute_tool get_weather",
        ("gen_ai.tool.call.id", "call_t1"),
    )
    .await;
    assert_eq!(
        (
            call.kind,
            call.trace_id.as_str(),
            call.parent_span_id.as_str(),
            call.status
        ),
        (1, CALLER_TRACE, CALLER_SPAN, 0)
    );
    for (key, value) in [
        ("gen_ai.operation.name", "execute_tool"),
        ("gen_ai.tool.name", "get_weather"),
        ("gen_ai.tool.type", "function"),
        ("runtime_tools.character", "Mio"),
        ("runtime_tools.source", "plugin:trace"),
        ("runtime_tools.caller", "invoke"),
    ] {
        assert_eq!(
            call.attributes.get(key).map(String::as_str),
            Some(value),
            "{key}: {call:?}"
        );
    }
    assert!(!call.attributes.contains_key("error.type"));
    assert_eq!(call.service, "runtime-tools-test");
    // The callback's exchange: a CLIENT span under the call's, the one its traceparent names.
    let exchange = span_by_id(&receiver, &client_span).await;
    assert_eq!(
        (
            exchange.name.as_str(),
            exchange.kind,
            exchange.trace_id.as_str()
        ),
        ("POST", 3, CALLER_TRACE)
    );
    assert_eq!(exchange.parent_span_id, call.span_id);
    assert_eq!(exchange.attributes["http.response.status_code"], "200");
    assert_eq!(exchange.attributes["url.full"], callback.url("/ok"));
    assert_eq!(exchange.attributes["http.request.method"], "POST");

    // Without a trace context: a trace of its own, which the callback's traceparent names; a
    // failed call says how it failed.
    let failed = invoke_ok(&app, "broken", json!({})).await;
    assert_eq!(failed["is_error"], true);
    let got = &callback.wait_for_requests(2).await[1];
    let (trace, client_span) = traceparent(got.header("traceparent").expect("a traceparent"));
    assert_ne!(trace, CALLER_TRACE);
    let call = span(
        &receiver,
        "execute_tool broken",
        ("runtime_tools.caller", "invoke"),
    )
    .await;
    assert_eq!(
        (call.trace_id.as_str(), call.parent_span_id.as_str()),
        (trace.as_str(), "")
    );
    assert_eq!(
        (call.attributes["error.type"].as_str(), call.status),
        ("tool_error", 2)
    );
    let exchange = span_by_id(&receiver, &client_span).await;
    assert_eq!(exchange.parent_span_id, call.span_id);
    assert_eq!(
        (
            exchange.attributes["http.response.status_code"].as_str(),
            exchange.status
        ),
        ("500", 2)
    );
    // The recent calls name the same trace.
    let (_, listed) = app.get("/api/calls?tool=broken").await;
    assert_eq!(listed["calls"][0]["trace_id"], json!(trace));
}

#[actix_web::test]
async fn a_chat_request_and_a_sessions_turn_each_give_their_calls_one_trace() {
    let receiver = receiver();
    let upstream = FakeChat::start();
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let mut config = settings(&["Mio", "Lanlan"]);
    config.characters[0].chat = Some(runtime_tools::ChatSettings::new(upstream.base()));
    config.characters[1].session = Some(runtime_tools::SessionSettings::new(
        &fake.url,
        Dialect::Openai,
    ));
    let app = spawn_app_with(exporting(config, receiver.url("/v1/traces"))).await;
    let callback = CallbackServer::with("/ok", Reply::output(json!("sunny")));
    let mut weather = tool("get_weather", &callback.url("/ok"));
    weather["role"] = Value::Null;
    register(&app, weather).await;
    let mut clock = tool("get_time", &callback.url("/ok"));
    clock["role"] = json!("Lanlan");
    register(&app, clock).await;

    // A chat request in the caller's trace: its span, and its calls' under it.
    upstream.script([
        Answer::Json(
            200,
            calls_completion("c-1", None, &[("call_c1", "get_weather", json!({}))]),
        ),
        Answer::Json(200, completion("c-2", "Sunny.", (3, 1))),
    ]);
    let parent = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let (status, answer) = post_traced(
        &app,
        "/v1/chat/completions",
        &json!({"model": "m", "messages": [{"role": "user", "content": "Weather?"}]}),
        &parent,
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    let got = &callback.wait_for_requests(1).await[0];
    let (trace, _) = traceparent(got.header("traceparent").unwrap());
    assert_eq!(trace, CALLER_TRACE);
    let request = span(&receiver, "chat Mio", ("runtime_tools.kind", "chat")).await;
    assert_eq!(
        (
            request.kind,
            request.trace_id.as_str(),
            request.parent_span_id.as_str()
        ),
        (2, CALLER_TRACE, CALLER_SPAN)
    );
    let call = span(
        &receiver,
        "execute_tool get_weather",
        ("gen_ai.tool.call.id", "call_c1"),
    )
    .await;
    assert_eq!(call.parent_span_id, request.span_id);
    assert_eq!(call.attributes["runtime_tools.kind"], "chat");

    // A live session's turn that calls two tools: one trace, both under the turn's span.
    fake.update_with_tools(&["get_weather", "get_time"]).await;
    fake.push(call_event("r1", "s1", "get_weather", "{}")).await;
    fake.push(call_event("r1", "s2", "get_time", "{}")).await;
    fake.push(response_done(
        "r1",
        &[("s1", "get_weather", "{}"), ("s2", "get_time", "{}")],
    ))
    .await;
    let got = callback.wait_for_requests(3).await;
    let traces: Vec<String> = got[1..]
        .iter()
        .map(|r| traceparent(r.header("traceparent").unwrap()).0)
        .collect();
    assert_eq!(traces[0], traces[1], "one trace for the turn");
    let first = span(
        &receiver,
        "execute_tool get_weather",
        ("gen_ai.tool.call.id", "s1"),
    )
    .await;
    let second = span(
        &receiver,
        "execute_tool get_time",
        ("gen_ai.tool.call.id", "s2"),
    )
    .await;
    assert_eq!(
        (first.trace_id.as_str(), second.trace_id.as_str()),
        (traces[0].as_str(), traces[0].as_str())
    );
    assert_eq!(first.parent_span_id, second.parent_span_id);
    assert_eq!(
        (
            first.attributes["runtime_tools.caller"].as_str(),
            first.attributes["runtime_tools.kind"].as_str()
        ),
        ("model", "client")
    );
    let turn = span(&receiver, "turn Lanlan", ("runtime_tools.turn_id", "r1")).await;
    assert_eq!(turn.span_id, first.parent_span_id);
    assert_eq!(
        (turn.trace_id.as_str(), turn.parent_span_id.as_str()),
        (traces[0].as_str(), "")
    );

    // The metrics of the same: the chat request and its rounds, the session, its syncs, the
    // calls of each kind.
    let scrape = crate::metrics::scrape(&app).await;
    let chat = [("kind", "chat"), ("character", "Mio")];
    assert_eq!(
        scrape.value(
            "runtime_tools_model_requests_total",
            &[chat[0], chat[1], ("outcome", "ok")]
        ),
        1.0
    );
    assert_eq!(scrape.value("runtime_tools_model_rounds_total", &chat), 2.0);
    assert_eq!(
        scrape.value(
            "runtime_tools_sessions",
            &[("kind", "client"), ("state", "connected")]
        ),
        1.0
    );
    assert_eq!(
        scrape.types["runtime_tools_session_sync_seconds"],
        "histogram"
    );
    // The session took its first list and the two registrations.
    assert!(
        scrape.value(
            "runtime_tools_session_sync_seconds_count",
            &[("kind", "client")]
        ) >= 2.0
    );
    for (kind, character, tool) in [
        ("chat", "Mio", "get_weather"),
        ("client", "Lanlan", "get_weather"),
        ("client", "Lanlan", "get_time"),
    ] {
        let labels = [
            ("kind", kind),
            ("character", character),
            ("tool", tool),
            ("caller", "model"),
            ("outcome", "ok"),
        ];
        assert_eq!(
            scrape.value("runtime_tools_tool_calls_total", &labels),
            1.0,
            "{labels:?}"
        );
    }
}

#[actix_web::test]
async fn a_collector_that_is_down_or_stuck_costs_spans_never_calls() {
    // Down: every export fails; the spans are counted as dropped.
    let closed = ClosedPort::new();
    let mut config = exporting(settings(&["Mio"]), closed.url("/v1/traces"));
    config.trace.export_timeout = Duration::from_millis(300);
    let down = spawn_app_with(config).await;
    // Stuck: it never answers; the queue (two spans) fills, and the rest are dropped.
    let stuck_receiver = CallbackServer::with("/v1/traces", Reply::Hang);
    let mut config = exporting(settings(&["Mio"]), stuck_receiver.url("/v1/traces"));
    config.trace.max_queue = 2;
    config.trace.export_timeout = HTTP_DEADLINE;
    let stuck = spawn_app_with(config).await;
    let callback = CallbackServer::with("/ok", Reply::output(json!(1)));
    for app in [&down, &stuck] {
        register(app, tool("get_weather", &callback.url("/ok"))).await;
        for _ in 0..10 {
            let answer = invoke_ok(app, "get_weather", json!({})).await;
            assert_eq!(answer["is_error"], false, "{answer}");
        }
    }
    assert_eq!(callback.received().len(), 20);
    assert!(
        callback
            .received()
            .iter()
            .all(|r| r.header("traceparent").is_some())
    );
    // At most two spans wait and two are being sent: the other 16 of the 20 were dropped as
    // their calls ended, without waiting.
    assert!(dropped(&stuck, "queue_full").await >= 16);
    // An export has reached the stuck collector, which never answers it: calls made while it
    // hangs are answered all the same (were the call path to wait for the exporter, they would
    // wait for the whole export timeout, the client's own deadline, and fail).
    stuck_receiver.wait_for_requests(1).await;
    for _ in 0..5 {
        let answer = invoke_ok(&stuck, "get_weather", json!({})).await;
        assert_eq!(answer["is_error"], false, "{answer}");
    }
    assert_eq!(stuck_receiver.received().len(), 1, "still the one export");
    dropped_at_least(&down, "export_failed", 1).await;
}

/// The spans `/metrics` counts as dropped for `reason`.
async fn dropped(app: &TestApp, reason: &str) -> u64 {
    let line = format!("runtime_tools_spans_dropped_total{{reason=\"{reason}\"}} ");
    let mut response = app.client.get(app.url("/metrics")).send().await.unwrap();
    let text = String::from_utf8(response.body().limit(1 << 24).await.unwrap().to_vec()).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(line.as_str()))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0)
}

/// Waits until `/metrics` counts at least `n` spans dropped for `reason` (deadline: the HTTP
/// one): a failed export is counted on the exporter's own thread, after the calls answered, and
/// that thread answers to no event a test can await, so the count is read again until it comes.
async fn dropped_at_least(app: &TestApp, reason: &str, n: u64) {
    let deadline = tokio::time::Instant::now() + HTTP_DEADLINE;
    while dropped(app, reason).await < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {reason} drops counted within {HTTP_DEADLINE:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[actix_web::test]
async fn an_mcp_servers_tool_gets_the_calls_trace_in_meta() {
    let receiver = receiver();
    let app = spawn_app_with(exporting(settings(&["Mio"]), receiver.url("/v1/traces"))).await;
    let _plugin = crate::mcp_plugins::start_plugin(&app, "tracer", &["--traced-tool"]).await;

    let parent = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let (status, answer) = post_traced(
        &app,
        "/api/tools/invoke",
        &json!({"name": "traced", "call_id": "call_m1", "arguments": {}}),
        &parent,
    )
    .await;
    assert_eq!(
        (status, &answer["is_error"]),
        (200, &json!(false)),
        "{answer}"
    );
    // What the official MCP SDK's server read from the request's `params._meta`.
    let seen = &answer["output"];
    let (trace, parent_span) = traceparent(seen["traceparent"].as_str().expect("a traceparent"));
    assert_eq!(trace, CALLER_TRACE);
    assert_eq!(seen["tracestate"], "caller=1");
    let call = span(
        &receiver,
        "execute_tool traced",
        ("gen_ai.tool.call.id", "call_m1"),
    )
    .await;
    assert_eq!(
        call.span_id, parent_span,
        "the MCP server's parent is the call's span"
    );
    assert_eq!(call.parent_span_id, CALLER_SPAN);
}

/// Runs the server binary with `env`, registers a tool answered by `callback` and invokes it
/// once, then stops it with SIGTERM and waits for its exit (code 0); the request the callback got.
async fn one_call_then_stop(
    env: &[(&str, &str)],
    callback: &CallbackServer,
) -> crate::callback_server::Received {
    let seen = callback.received().len();
    let mut child = crate::cli::Child::start_with_env(
        &["serve", "--bind", "127.0.0.1:0", "--character", "Mio"],
        env,
    );
    let base = format!("http://{}", child.listening("127.0.0.1"));
    let client = crate::helpers::test_client();
    for (path, body) in [
        (
            "/api/tools/register",
            tool("get_weather", &callback.url("/ok")),
        ),
        (
            "/api/tools/invoke",
            json!({"name": "get_weather", "call_id": "call_env", "arguments": {}}),
        ),
    ] {
        let mut response = client
            .post(format!("{base}{path}"))
            .send_json(&body)
            .await
            .expect("request sent");
        let answer: Value = response.json().await.expect("a JSON answer");
        assert_eq!(response.status(), 200, "{path}: {answer}");
    }
    let got = callback.wait_for_requests(seen + 1).await[seen].clone();
    // Its exit flushes the spans still queued to the receiver, which runs on this thread: wait
    // for it elsewhere.
    let status = tokio::task::spawn_blocking(move || {
        child.signal("TERM");
        child.wait()
    })
    .await
    .expect("the waiting thread");
    assert!(status.success(), "{status}");
    got
}

/// The binary reads the standard variables: an endpoint switches export on (the service named
/// by `OTEL_SERVICE_NAME`, queued spans sent before it exits), `OTEL_SDK_DISABLED=true` keeps it
/// off; the callback gets a `traceparent` either way.
#[actix_web::test]
async fn the_standard_otel_variables_switch_export_on_and_off() {
    let receiver = receiver();
    let callback = CallbackServer::with("/ok", Reply::output(json!(1)));
    let endpoint = receiver.url("");
    // A schedule longer than the test: the span goes out when the server stops.
    let exporting = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_SERVICE_NAME", "weather-companion"),
        ("OTEL_BSP_SCHEDULE_DELAY", "600000"),
    ];
    let got = one_call_then_stop(&exporting, &callback).await;
    let (trace, _) = traceparent(got.header("traceparent").expect("a traceparent"));
    let call = span(
        &receiver,
        "execute_tool get_weather",
        ("gen_ai.tool.call.id", "call_env"),
    )
    .await;
    assert_eq!(
        (call.trace_id.as_str(), call.service.as_str()),
        (trace.as_str(), "weather-companion")
    );
    let exports = receiver.received().len();

    let mut disabled = exporting.to_vec();
    disabled.push(("OTEL_SDK_DISABLED", "true"));
    let got = one_call_then_stop(&disabled, &callback).await;
    traceparent(got.header("traceparent").expect("a traceparent"));
    // It has exited, and would have flushed its span on the way out: none came.
    assert_eq!(receiver.received().len(), exports);
}

/// A callback URL's query may carry a token: the CLIENT span's `url.full` keeps each
/// parameter's name, never its value (OpenTelemetry's `REDACTED`), and no fragment, while the
/// callback still gets its query as registered.
#[actix_web::test]
async fn url_full_carries_no_query_value_of_a_callback_url() {
    let receiver = receiver();
    let app = spawn_app_with(exporting(settings(&["Mio"]), receiver.url("/v1/traces"))).await;
    let callback = CallbackServer::start();
    let target = "/q?token=s3cret-4e1d&city=Tokyo&flag";
    callback.route(target, Reply::output(json!(1)));
    register(
        &app,
        tool("query", &callback.url(&format!("{target}#part"))),
    )
    .await;
    invoke_ok(&app, "query", json!({})).await;
    let got = &callback.wait_for_requests(1).await[0];
    assert_eq!(got.path, target);
    let (_, client_span) = traceparent(got.header("traceparent").expect("a traceparent"));
    let exchange = span_by_id(&receiver, &client_span).await;
    assert_eq!(
        exchange.attributes["url.full"],
        callback.url("/q?token=REDACTED&city=REDACTED&REDACTED")
    );
    for span in decode(&receiver) {
        assert!(
            span.attributes.values().all(|v| !v.contains("s3cret")),
            "{span:?}"
        );
    }
}

/// Bytes a flooding collector writes of its answer before it gives up: far more than an
/// exporter reading it whole could hold without notice, little enough for a test machine.
const FLOOD_BYTES: usize = 256 << 20;

/// What a flooding collector's answer to one export came to.
#[derive(Debug, Clone, Copy)]
struct Flood {
    /// Bytes of the answer's body written before the server closed the connection (or
    /// [`FLOOD_BYTES`], when it read them all).
    written: usize,
    /// The server closed the connection before the answer's end.
    cut_off: bool,
}

/// A collector on a raw socket that answers every export with `200`, a `Content-Length` of
/// 2 GiB and zeros, as fast as the server takes them; each answer's [`Flood`], in order.
fn flooding_collector() -> (String, tokio::sync::mpsc::UnboundedReceiver<Flood>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
    let (tx, floods) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut request = Vec::new();
                let mut chunk = [0u8; 64 * 1024];
                loop {
                    // The export's head and body (its length from the head).
                    if let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head = String::from_utf8_lossy(&request[..end]).to_ascii_lowercase();
                        let length: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse().ok())
                            .unwrap_or(0);
                        if request.len() >= end + 4 + length {
                            break;
                        }
                    }
                    match stream.read(&mut chunk) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&chunk[..n]),
                    }
                }
                let head = "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\n\
                            content-length: 2147483648\r\n\r\n";
                if stream.write_all(head.as_bytes()).is_err() {
                    return;
                }
                let zeros = [0u8; 64 * 1024];
                let mut written = 0;
                while written < FLOOD_BYTES {
                    match stream.write(&zeros) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => written += n,
                    }
                }
                let cut_off = written < FLOOD_BYTES;
                let _ = tx.send(Flood { written, cut_off });
                // Held until the server lets go of it (its export's timeout, at the latest).
                let _ = stream.read(&mut chunk);
            });
        }
    });
    (url, floods)
}

/// A collector that answers each export with 2 GiB: the server reads no more than 64 KiB of it
/// (the connection is closed after that, so the collector cannot write more than the sockets'
/// buffers hold), the spans count as `export_failed`, and the server's peak memory (read from
/// `/proc`) stays where it was.
#[actix_web::test]
async fn a_collector_that_answers_with_gibibytes_is_read_64_kib_deep() {
    let (endpoint, mut floods) = flooding_collector();
    let callback = CallbackServer::with("/ok", Reply::output(json!(1)));
    let mut child = crate::cli::Child::start_with_env(
        &["serve", "--bind", "127.0.0.1:0", "--character", "Mio"],
        &[
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint.as_str()),
            ("OTEL_BSP_SCHEDULE_DELAY", "20"),
            ("MIMALLOC_PURGE_DELAY", "0"),
        ],
    );
    let base = format!("http://{}", child.listening("127.0.0.1"));
    let client = crate::helpers::test_client();
    let post = |path: &'static str, body: Value| {
        let request = client.post(format!("{base}{path}"));
        async move {
            let mut response = request.send_json(&body).await.expect("request sent");
            let answer: Value = response.json().await.expect("a JSON answer");
            assert_eq!(response.status(), 200, "{path}: {answer}");
            answer
        }
    };
    post(
        "/api/tools/register",
        tool("get_weather", &callback.url("/ok")),
    )
    .await;
    let before = crate::procfs::Holdings::of(child.pid());
    for export in 0..3 {
        let answer = post(
            "/api/tools/invoke",
            json!({"name": "get_weather", "arguments": {}}),
        )
        .await;
        assert_eq!(answer["is_error"], false, "{answer}");
        let flood = tokio::time::timeout(HTTP_DEADLINE, floods.recv())
            .await
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("export {export} was never answered"));
        assert!(
            flood.cut_off && flood.written < 32 << 20,
            "export {export}: the server took {flood:?}"
        );
    }
    let after = crate::procfs::Holdings::of(child.pid());
    println!("a flooding collector: before {before}; after {after}");
    assert!(
        after.peak_rss_kib <= before.peak_rss_kib.max(before.rss_kib) + 32 * 1024,
        "before {before}; after {after}"
    );
    let mut response = client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("metrics");
    let metrics =
        String::from_utf8(response.body().limit(1 << 24).await.unwrap().to_vec()).unwrap();
    let failed = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix("runtime_tools_spans_dropped_total{reason=\"export_failed\"} ")
        })
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    assert!(failed >= 3, "{metrics}");
    child.signal("TERM");
    tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap();
}
