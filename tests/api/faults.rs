//! Faults of the things the server talks to: callbacks that hang, break off, never stop, inflate
//! without end, or die with calls in flight; and a realtime peer that drops the socket mid-update,
//! acknowledges twice, sends garbage or never answers. Each call gets a clear tool error, the
//! server keeps serving, and nothing registered is lost.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use runtime_tools::{Dialect, SessionSettings};
use serde_json::{Value, json};

use crate::callback_server::{
    CallbackServer, Reply, error_text, invoke, invoke_ok, register, spawn_invoke, tool_with_timeout,
};
use crate::fake_realtime::{AckMode, FakeRealtime, update_tool_names};
use crate::helpers::{HTTP_DEADLINE, TestApp, settings, spawn_app, spawn_app_with, tool_body};

/// A healthy tool next to the faulty one: its calls must keep succeeding.
async fn healthy_tool(app: &TestApp) -> CallbackServer {
    let server = CallbackServer::with("/ok", Reply::output(json!("fine")));
    register(
        app,
        tool_body("healthy", &server.url("/ok"), "plugin:healthy"),
    )
    .await;
    server
}

/// Runs `faulty` calls of `name` and `healthy` calls of the healthy tool at once; every healthy
/// call must succeed. Returns the faulty results.
async fn calls_side_by_side(
    app: &TestApp,
    name: &str,
    faulty: usize,
    healthy: usize,
) -> Vec<Value> {
    let bad = join_all((0..faulty).map(|_| invoke_ok(app, name, json!({}))));
    let good = join_all((0..healthy).map(|_| invoke_ok(app, "healthy", json!({}))));
    let (bad, good) = futures_util::future::join(bad, good).await;
    for result in good {
        assert_eq!(result["output"], json!("fine"), "{result}");
    }
    bad
}

#[actix_web::test]
async fn a_callback_that_never_answers_times_out_and_others_are_unaffected() {
    let app = spawn_app(&["Lanlan"]).await;
    let _healthy = healthy_tool(&app).await;
    let hanging = CallbackServer::with("/cb", Reply::Hang);
    register(
        &app,
        tool_with_timeout("hangs", &hanging.url("/cb"), "plugin:h", 1.0),
    )
    .await;
    let started = Instant::now();
    let results = calls_side_by_side(&app, "hangs", 10, 40).await;
    for result in &results {
        assert_eq!(
            error_text(result),
            "remote tool callback timed out after 1 s"
        );
    }
    assert!(started.elapsed() < Duration::from_secs(1) + HTTP_DEADLINE);
    // A read timeout is not a dead plugin: nothing was removed.
    assert_eq!(
        app.tool_names(None).await,
        json!({"Lanlan": ["healthy", "hangs"]})
    );
}

#[actix_web::test]
async fn a_callback_that_closes_mid_response_is_an_error() {
    let app = spawn_app(&["Lanlan"]).await;
    let _healthy = healthy_tool(&app).await;
    let breaking = CallbackServer::with(
        "/cb",
        Reply::Raw(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"output\": \"par".to_vec()),
    );
    register(&app, tool_body("breaks", &breaking.url("/cb"), "plugin:b")).await;
    for result in calls_side_by_side(&app, "breaks", 10, 20).await {
        assert_eq!(
            error_text(&result),
            "remote tool callback closed the connection in the middle of its answer \
             (15 of 100 bytes received)"
        );
    }
    assert_eq!(
        app.tool_names(None).await,
        json!({"Lanlan": ["healthy", "breaks"]})
    );
}

#[actix_web::test]
async fn an_endless_chunked_answer_is_cut_at_the_limit() {
    let app = spawn_app(&["Lanlan"]).await;
    let _healthy = healthy_tool(&app).await;
    let endless = CallbackServer::with("/cb", Reply::Chunked { total: None });
    register(&app, tool_body("endless", &endless.url("/cb"), "plugin:e")).await;
    let limit = runtime_tools::DispatchSettings::default().max_response_bytes;
    for result in calls_side_by_side(&app, "endless", 4, 20).await {
        assert_eq!(
            error_text(&result),
            format!(
                "remote tool callback response exceeded the {limit}-byte limit (dispatch.max_response_bytes)"
            )
        );
    }
}

/// The largest memory the test process has used so far (`VmHWM`), in bytes.
pub fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    kib * 1024
}

/// `inflated` zero bytes, gzip-compressed at the best ratio, built without holding them.
fn gzip_bomb(inflated: usize) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let zeros = vec![0u8; 1 << 20];
    let mut left = inflated;
    while left > 0 {
        let n = left.min(zeros.len());
        encoder.write_all(&zeros[..n]).unwrap();
        left -= n;
    }
    encoder.finish().unwrap()
}

#[actix_web::test]
async fn a_gzip_bomb_is_cut_at_the_limit_after_decompression() {
    const INFLATED: usize = 1 << 30;
    let bomb = gzip_bomb(INFLATED);
    let app = spawn_app(&["Lanlan"]).await;
    let _healthy = healthy_tool(&app).await;
    let server = CallbackServer::with(
        "/cb",
        Reply::Respond {
            status: 200,
            headers: vec![
                ("content-type".into(), "application/json".into()),
                ("content-encoding".into(), "gzip".into()),
            ],
            body: bomb.clone(),
        },
    );
    register(&app, tool_body("bomb", &server.url("/cb"), "plugin:bomb")).await;
    let limit = runtime_tools::DispatchSettings::default().max_response_bytes;
    for result in calls_side_by_side(&app, "bomb", 3, 20).await {
        assert_eq!(
            error_text(&result),
            format!(
                "remote tool callback response exceeded the {limit}-byte limit (dispatch.max_response_bytes)"
            )
        );
    }
    // Three calls, each 1 GiB once inflated: had any been buffered, the peak would show it.
    let peak = peak_rss();
    println!(
        "gzip bomb: {} bytes on the wire, {INFLATED} inflated; test process peak RSS {} MiB",
        bomb.len(),
        peak >> 20
    );
    assert!(peak < 1 << 30, "peak RSS {} MiB", peak >> 20);
}

/// A plugin process (python3) whose callback accepts calls and never answers; it prints its port,
/// then one line per call received.
const HANGING_PLUGIN: &str = r#"
import http.server, socketserver, sys, threading
lock = threading.Lock()
class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        with lock:
            sys.stdout.write("call\n")
            sys.stdout.flush()
        threading.Event().wait()
    def log_message(self, *args):
        pass
class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    request_queue_size = 256
server = Server(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

/// A child process killed when dropped, so a failing test leaves no plugin behind.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[actix_web::test]
async fn a_plugin_killed_with_50_calls_in_flight_fails_each_call_and_the_server_keeps_serving() {
    const IN_FLIGHT: usize = 50;
    let mut child = Command::new("python3")
        .args(["-c", HANGING_PLUGIN])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let stdout = child.stdout.take().unwrap();
    let mut child = KillOnDrop(child);
    let (lines_tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if lines_tx.send(line.unwrap_or_default()).is_err() {
                break;
            }
        }
    });
    let next_line = |what: &str| {
        lines
            .recv_timeout(HTTP_DEADLINE)
            .unwrap_or_else(|e| panic!("the plugin did not print {what}: {e}"))
    };
    let port: u16 = next_line("its port").parse().expect("a port");

    let app = spawn_app(&["Lanlan", "Mio"]).await;
    let healthy = healthy_tool(&app).await;
    register(
        &app,
        tool_with_timeout(
            "doomed",
            &format!("http://127.0.0.1:{port}/cb"),
            "plugin:doomed",
            120.0,
        ),
    )
    .await;
    let calls: Vec<_> = (0..IN_FLIGHT)
        .map(|_| spawn_invoke(&app, "doomed"))
        .collect();
    // Every call has reached the plugin before it dies.
    let received = actix_web::rt::task::spawn_blocking(move || {
        for i in 0..IN_FLIGHT {
            let line = lines.recv_timeout(HTTP_DEADLINE);
            assert_eq!(line.as_deref(), Ok("call"), "call #{i}");
        }
    });
    received.await.unwrap();
    child.0.kill().expect("plugin killed");
    child.0.wait().expect("plugin reaped");

    // Each call names the callback's origin and what broke: a connection error when a new
    // connection failed too, or (when the dying process still accepted the probe) the close.
    let refused =
        format!("could not connect to remote tool callback http://127.0.0.1:{port}: the callback ");
    let closed = format!("remote tool callback http://127.0.0.1:{port} ");
    for call in calls {
        let result = call.await.unwrap();
        let text = error_text(&result);
        let what = [
            "closed the connection without answering",
            "connection failed while sending the call (",
            "connection failed before answering (",
        ];
        let named = match text.strip_prefix(&refused) {
            Some(rest) => {
                what.iter().any(|w| rest.starts_with(w))
                    && rest.contains(", and a new connection failed: ")
            }
            None => text
                .strip_prefix(&closed)
                .is_some_and(|rest| what.iter().any(|w| rest.starts_with(w))),
        };
        assert!(named, "{text}");
    }
    // The server keeps serving: the dead plugin's tools go (auto-removal), the rest stay. The
    // 50 broken calls usually remove it; a broken call whose probe reached a new listener on
    // the freed port (another test's server) counts as reachable, so at most three more calls
    // to the dead port finish the job.
    for _ in 0..3 {
        let names = app.tool_names(None).await;
        if names == json!({"Lanlan": ["healthy"], "Mio": ["healthy"]}) {
            break;
        }
        let (status, body) =
            crate::callback_server::invoke(&app, json!({"name": "doomed", "arguments": {}})).await;
        assert_eq!(
            (status, body["is_error"].clone()),
            (200, json!(true)),
            "{body}"
        );
    }
    assert_eq!(
        app.tool_names(None).await,
        json!({"Lanlan": ["healthy"], "Mio": ["healthy"]})
    );
    let result = invoke_ok(&app, "healthy", json!({})).await;
    assert_eq!(result["output"], json!("fine"));
    drop(healthy);
}

/// A server whose character Mio has a model session on `fake`.
async fn app_with_session(fake: &FakeRealtime, sync_timeout: Duration) -> TestApp {
    let mut settings = settings(&["Mio"]);
    let mut session = SessionSettings::new(&fake.url, Dialect::Openai);
    session.sync_timeout = sync_timeout;
    settings.characters[0].session = Some(session);
    spawn_app_with(settings).await
}

fn weather(name: &str) -> Value {
    tool_body(name, "http://127.0.0.1:9/cb", "plugin:w")
}

#[actix_web::test]
async fn the_peer_dropping_the_socket_mid_update_fails_the_wait_and_reconnect_resends() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let app = app_with_session(&fake, Duration::from_secs(30)).await;
    fake.nth_update(1).await;
    fake.set_mode(AckMode::Held);
    let register = {
        let app_base = app.base.clone();
        actix_web::rt::spawn(async move {
            let client = crate::helpers::test_client();
            let mut response = client
                .post(format!("{app_base}/api/tools/register"))
                .send_json(&weather("get_weather"))
                .await
                .expect("register sent");
            (
                response.status().as_u16(),
                response.json::<Value>().await.unwrap(),
            )
        })
    };
    assert_eq!(
        update_tool_names(&fake.nth_update(2).await),
        ["get_weather"]
    );
    fake.set_mode(AckMode::Immediate);
    fake.drop_connection().await;
    let (status, body) = register.await.unwrap();
    assert_eq!(status, 200);
    assert_eq!(body["ok"], json!(false), "{body}");
    assert_eq!(body["affected_roles"], json!([]), "{body}");
    let failure = &body["failed_roles"][0];
    assert_eq!(failure["role"], "Mio");
    assert_eq!(
        failure["error"],
        "model session closed before acknowledging the tool update"
    );
    // The registration was kept; the next connection gets it.
    fake.wait_connections(2).await;
    fake.update_with_tools(&["get_weather"]).await;
    assert_eq!(
        update_tool_names(&fake.nth_update(3).await),
        ["get_weather"]
    );
    assert_eq!(app.tool_names(None).await, json!({"Mio": ["get_weather"]}));
}

#[actix_web::test]
async fn a_peer_that_acknowledges_twice_does_no_harm() {
    let fake = FakeRealtime::start(AckMode::Twice).await;
    let app = app_with_session(&fake, Duration::from_secs(30)).await;
    fake.nth_update(1).await;
    let mut names = Vec::new();
    for name in ["a", "b", "c", "d"] {
        let (status, body) = app.register(&weather(name)).await;
        assert_eq!(status, 200);
        assert_eq!(body["affected_roles"], json!(["Mio"]), "{body}");
        assert_eq!(body["failed_roles"], json!([]), "{body}");
        names.push(name);
        fake.update_with_tools(&names).await;
    }
    let (status, body) = app
        .post("/api/tools/unregister", &json!({"name": "b"}))
        .await;
    assert_eq!(status, 200, "{body}");
    fake.update_with_tools(&["a", "c", "d"]).await;
    let last = fake.events_of("session.update").pop().unwrap();
    assert_eq!(update_tool_names(&last), ["a", "c", "d"]);
}

#[actix_web::test]
async fn malformed_events_are_ignored_and_the_session_keeps_working() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let app = app_with_session(&fake, Duration::from_secs(30)).await;
    fake.nth_update(1).await;
    for garbage in [
        json!("not an object"),
        json!({"no_type": true}),
        json!({"type": 5}),
        json!({"type": "response.function_call_arguments.done"}),
        json!({"type": "response.function_call_arguments.done", "call_id": 7, "name": [], "arguments": {}}),
        json!({"type": "response.done", "response": "x"}),
        json!({"type": "error"}),
        json!({"type": "session.updated", "session": 1}),
        json!({"type": "made.up.event", "x": "y"}),
    ] {
        fake.push(garbage).await;
    }
    fake.push_text("{\"type\": \"session.upd").await;
    fake.push_text("\u{0}\u{ffff}").await;
    // A call of an unknown tool, answered by the session: once the answer arrives, every event
    // before it has been handled.
    fake.push(json!({"type": "response.function_call_arguments.done", "response_id": "r1",
        "item_id": "i1", "output_index": 0, "call_id": "sentinel", "name": "nope", "arguments": "{}"}))
        .await;
    fake.wait_for("the answer to the sentinel call", |events| {
        events
            .iter()
            .find(|e| e["type"] == "conversation.item.create" && e["item"]["call_id"] == "sentinel")
            .cloned()
    })
    .await;
    let (status, body) = app.register(&weather("after_garbage")).await;
    assert_eq!(status, 200);
    assert_eq!(body["affected_roles"], json!(["Mio"]), "{body}");
    fake.update_with_tools(&["after_garbage"]).await;
    assert_eq!(
        fake.connections(),
        1,
        "the session stayed on its connection"
    );
}

#[actix_web::test]
async fn a_peer_that_never_answers_fails_the_sync_after_its_timeout() {
    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let app = app_with_session(&fake, Duration::from_millis(500)).await;
    fake.nth_update(1).await;
    fake.set_mode(AckMode::Never);
    let started = Instant::now();
    let (status, body) = app.register(&weather("unanswered")).await;
    assert_eq!(status, 200);
    assert_eq!(
        body["failed_roles"],
        json!([{"role": "Mio", "error": "model session did not acknowledge the tool update (no session.updated within 0.5 s)"}])
    );
    assert!(started.elapsed() < Duration::from_millis(500) + Duration::from_secs(5));
    // Kept, and the session still works once the peer answers again.
    fake.set_mode(AckMode::Immediate);
    let (status, body) = app.register(&weather("answered")).await;
    assert_eq!(status, 200);
    assert_eq!(body["affected_roles"], json!(["Mio"]), "{body}");
    fake.update_with_tools(&["unanswered", "answered"]).await;
    let _ = invoke(&app, json!({"name": "answered"})).await;
}

#[actix_web::test]
async fn a_fragmented_message_is_assembled_up_to_the_limit_and_refused_past_it() {
    use runtime_tools::limits::MAX_EVENT_BYTES;

    let fake = FakeRealtime::start(AckMode::Immediate).await;
    let app = app_with_session(&fake, Duration::from_secs(5)).await;
    fake.nth_update(1).await;
    // A function call in three fragments, padded to just under the limit: assembled, answered.
    let call = json!({"type": "response.function_call_arguments.done", "response_id": "r1",
                      "call_id": "c1", "name": "nope", "arguments": "{}", "padding": ""})
    .to_string();
    let pad = MAX_EVENT_BYTES - call.len();
    let text = call.replace(
        r#""padding":"""#,
        &format!(r#""padding":"{}""#, "x".repeat(pad)),
    );
    assert_eq!(text.len(), MAX_EVENT_BYTES);
    let bytes = text.into_bytes();
    let third = bytes.len() / 3;
    fake.push_fragments(vec![
        bytes[..third].to_vec(),
        bytes[third..2 * third].to_vec(),
        bytes[2 * third..].to_vec(),
    ])
    .await;
    let answer = fake
        .wait_for("the answer to the fragmented call", |events| {
            events
                .iter()
                .find(|e| e["item"]["call_id"] == "c1")
                .map(|e| e["item"]["output"].clone())
        })
        .await;
    assert_eq!(
        answer,
        json!(
            r#"{"error":"tool 'nope' is not registered; available tools: none","is_error":true}"#
        )
    );
    assert_eq!(fake.connections(), 1);

    // One byte more than the limit, in 1 MiB fragments: the session drops the connection (a
    // protocol error) and reconnects, instead of buffering whatever the peer sends.
    let mib = 1024 * 1024;
    let mut parts: Vec<Vec<u8>> = (0..MAX_EVENT_BYTES / mib)
        .map(|_| vec![b' '; mib])
        .collect();
    parts.push(b"{".to_vec());
    fake.push_fragments(parts).await;
    fake.wait_connections(2).await;
    // The new connection works: it gets the tool list and takes changes.
    fake.nth_update(2).await;
    let (status, body) = app.register(&weather("after")).await;
    assert_eq!(
        (status, body["affected_roles"].clone()),
        (200, json!(["Mio"]))
    );
}
