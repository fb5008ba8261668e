//! Shared test fixtures: a real server on port 0 and small HTTP helpers.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::Duration;

use actix::Addr;
use runtime_tools::{Application, CharacterSettings, Dialect, Router, SessionSettings, Settings};
use serde_json::Value;

/// Generous upper bound for any single HTTP exchange in tests (a loaded 2-core machine).
pub const HTTP_DEADLINE: Duration = Duration::from_secs(30);

pub struct TestApp {
    pub addr: SocketAddr,
    pub base: String,
    pub router: Addr<Router>,
    pub client: awc::Client,
    pub handle: actix_web::dev::ServerHandle,
    /// Stops the server as `main` does on SIGTERM.
    pub stopper: runtime_tools::Stopper,
    /// The server's event hub, for tests that watch its events in-process.
    pub events: runtime_tools::EventHub,
    /// The operator token (`Authorization: Bearer`), as the person holds it.
    pub operator_token: String,
    /// The server's dispatcher, for tests that run calls as an in-process session does.
    pub dispatcher: runtime_tools::Dispatcher,
}

/// Settings for a test server on 127.0.0.1:0 with these characters.
pub fn settings(characters: &[&str]) -> Settings {
    Settings {
        bind: "127.0.0.1:0".parse().unwrap(),
        characters: characters
            .iter()
            .map(|c| CharacterSettings::new(*c))
            .collect(),
        workers: Some(2),
        ..Settings::default()
    }
}

/// Starts the real server (through the same seam `main` uses) with these characters.
pub async fn spawn_app(characters: &[&str]) -> TestApp {
    spawn_app_with(settings(characters)).await
}

/// A server whose first character, `Mio`, has a session at `url` (`others` beside it, without),
/// its settings adjusted by `tweak`.
pub async fn app_with_session(
    url: &str,
    others: &[&str],
    dialect: Dialect,
    tweak: impl FnOnce(&mut SessionSettings),
) -> TestApp {
    let mut names = vec!["Mio"];
    names.extend_from_slice(others);
    let mut settings = settings(&names);
    let mut session = SessionSettings::new(url, dialect);
    tweak(&mut session);
    settings.characters[0].session = Some(session);
    spawn_app_with(settings).await
}

pub async fn spawn_app_with(settings: Settings) -> TestApp {
    let app = Application::build(settings).await.expect("server builds");
    let addr = app.local_addr();
    let router = app.router();
    let handle = app.handle();
    let stopper = app.stopper();
    let events = app.events();
    let operator_token = app.operator_token().expose().to_owned();
    let dispatcher = app.dispatcher();
    actix_web::rt::spawn(app.run_until_stopped());
    TestApp {
        addr,
        base: format!("http://{addr}"),
        router,
        client: test_client(),
        handle,
        stopper,
        events,
        operator_token,
        dispatcher,
    }
}

/// A plain HTTP client with a deadline well above anything a test waits for.
pub fn test_client() -> awc::Client {
    awc::Client::builder()
        // Idle connections are dropped well before the server's 5 s keep-alive closes them, so
        // a test that waits several seconds never reuses a connection the server just closed.
        .connector(awc::Connector::new().conn_keep_alive(TEST_CLIENT_KEEP_ALIVE))
        .timeout(HTTP_DEADLINE)
        .disable_redirects()
        .finish()
}

/// How long the test client keeps an idle connection: under the server's keep-alive (5 s).
pub const TEST_CLIENT_KEEP_ALIVE: Duration = Duration::from_secs(2);

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// POSTs a JSON body; returns the status and the JSON answer (a change's answer without
    /// its `instance_id`, checked by [`without_instance_id`]).
    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let mut response = self
            .client
            .post(self.url(path))
            .send_json(body)
            .await
            .expect("request sent");
        let status = response.status().as_u16();
        let bytes = response.body().limit(64 << 20).await.expect("body read");
        (
            status,
            without_instance_id(path, status, parse_json(&bytes)),
        )
    }

    /// POSTs a JSON body as the person: with `Authorization: Bearer` and the operator token.
    pub async fn post_as_operator(&self, path: &str, body: &Value) -> (u16, Value) {
        let request = self
            .client
            .post(self.url(path))
            .insert_header(("authorization", format!("Bearer {}", self.operator_token)));
        self.send(request, Some(body)).await
    }

    /// POSTs raw bytes with the given Content-Type (or none).
    pub async fn post_raw(
        &self,
        path: &str,
        content_type: Option<&str>,
        body: Vec<u8>,
    ) -> (u16, Value) {
        let mut request = self.client.post(self.url(path));
        if let Some(ct) = content_type {
            request = request.insert_header(("content-type", ct));
        }
        let mut response = request.send_body(body).await.expect("request sent");
        let status = response.status().as_u16();
        let bytes = response.body().limit(64 << 20).await.expect("body read");
        (
            status,
            without_instance_id(path, status, parse_json(&bytes)),
        )
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let mut response = self
            .client
            .get(self.url(path))
            .send()
            .await
            .expect("request sent");
        let status = response.status().as_u16();
        let bytes = response.body().limit(64 << 20).await.expect("body read");
        (status, parse_json(&bytes))
    }

    pub async fn register(&self, body: &Value) -> (u16, Value) {
        self.post("/api/tools/register", body).await
    }

    /// The listing of one role (or all when `None`), as `{role: [names]}`.
    pub async fn tool_names(&self, role: Option<&str>) -> Value {
        let path = match role {
            Some(r) => format!("/api/tools?role={r}"),
            None => "/api/tools".to_owned(),
        };
        let (status, body) = self.get(&path).await;
        assert_eq!(status, 200, "{body}");
        let mut out = serde_json::Map::new();
        for (role, tools) in body["tools_by_role"].as_object().expect("tools_by_role") {
            let names: Vec<Value> = tools
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["name"].clone())
                .collect();
            out.insert(role.clone(), Value::Array(names));
        }
        Value::Object(out)
    }
}

/// The routes that change tools: each answer (200) carries the server's `instance_id`.
pub const CHANGE_ROUTES: [&str; 5] = [
    "/api/tools/register",
    "/api/tools/unregister",
    "/api/tools/clear",
    "/api/mcp/register",
    "/api/mcp/unregister",
];

/// A change's answer with its `instance_id` checked (32 hex digits) and taken out, so a test can
/// compare the rest exactly; any other answer as it is.
pub fn without_instance_id(path: &str, status: u16, mut answer: Value) -> Value {
    if status == 200 && CHANGE_ROUTES.contains(&path) {
        let id = answer
            .as_object_mut()
            .and_then(|o| o.remove("instance_id"))
            .unwrap_or_else(|| panic!("{path} answered without instance_id"));
        let id = id.as_str().expect("instance_id is a string");
        assert!(
            id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()),
            "{id}"
        );
    }
    answer
}

pub fn parse_json(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
}

/// A register body for `name` with the given callback URL and source (role null).
pub fn tool_body(name: &str, callback_url: &str, source: &str) -> Value {
    serde_json::json!({
        "name": name,
        "description": format!("{name} tool"),
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        "callback_url": callback_url,
        "role": null,
        "source": source,
        "timeout_seconds": 30
    })
}

impl TestApp {
    /// Sends `request` (a GET, or a POST of `body` as JSON) and returns the status and JSON answer.
    pub async fn send(&self, request: awc::ClientRequest, body: Option<&Value>) -> (u16, Value) {
        let mut response = match body {
            Some(body) => request.send_json(body).await,
            None => request.send().await,
        }
        .expect("request sent");
        let status = response.status().as_u16();
        let bytes = response.body().limit(64 << 20).await.expect("body read");
        (status, parse_json(&bytes))
    }

    /// GET `path` with this `Host` header instead of the address connected to.
    pub async fn get_with_host(&self, path: &str, host: &str) -> (u16, Value) {
        let request = self
            .client
            .get(self.url(path))
            .insert_header(("host", host));
        self.send(request, None).await
    }

    /// The full listing (`GET /api/tools`, or one role), asserting a 200.
    pub async fn listing(&self, role: Option<&str>) -> Value {
        let path = match role {
            Some(r) => format!("/api/tools?role={r}"),
            None => "/api/tools".to_owned(),
        };
        let (status, body) = self.get(&path).await;
        assert_eq!(status, 200, "{body}");
        body
    }

    /// Runs `request` (raw HTTP/1.x bytes) over a fresh connection to the server.
    pub async fn raw(&self, request: Vec<u8>) -> RawResponse {
        raw_exchange_async(self.addr, request).await
    }

    /// The `Host` value a well-behaved local client sends.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }
}

/// The keys of a JSON object in the order they were written.
pub fn keys(value: &Value) -> Vec<String> {
    value
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {value}"))
        .keys()
        .cloned()
        .collect()
}

/// The names of the tools listed for `role` in a listing, in order.
pub fn listed_names(listing: &Value, role: &str) -> Vec<String> {
    listing["tools_by_role"][role]
        .as_array()
        .unwrap_or_else(|| panic!("no role {role} in {listing}"))
        .iter()
        .map(|t| t["name"].as_str().expect("tool name").to_owned())
        .collect()
}

/// A response read off a raw socket.
#[derive(Debug)]
pub struct RawResponse {
    pub status: u16,
    /// Header names in lower case, in the order sent.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawResponse {
    pub fn json(&self) -> Value {
        parse_json(&self.body)
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A raw request head: `METHOD PATH HTTP/1.1`, the given headers and `Connection: close`.
pub fn raw_head(method: &str, path: &str, headers: &[(&str, &str)]) -> Vec<u8> {
    let mut head = format!("{method} {path} HTTP/1.1\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("Connection: close\r\n\r\n");
    head.into_bytes()
}

/// `data` in chunked transfer encoding, `chunk` bytes per chunk, with the terminating chunk.
pub fn chunked(data: &[u8], chunk: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + data.len() / chunk * 10 + 16);
    for part in data.chunks(chunk) {
        out.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
        out.extend_from_slice(part);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"0\r\n\r\n");
    out
}

/// [`raw_exchange`] off the async runtime's threads (the test's actors run on this thread).
pub async fn raw_exchange_async(addr: SocketAddr, request: Vec<u8>) -> RawResponse {
    actix_web::rt::task::spawn_blocking(move || raw_exchange(addr, request))
        .await
        .expect("raw exchange finished")
}

/// Writes `request` to a fresh connection to `addr` (from its own thread, so a server that
/// answers before reading everything cannot deadlock us) and reads one response.
pub fn raw_exchange(addr: SocketAddr, request: Vec<u8>) -> RawResponse {
    use std::io::Write;
    use std::net::{Shutdown, TcpStream};

    let stream = TcpStream::connect_timeout(&addr, HTTP_DEADLINE).expect("connected");
    stream.set_read_timeout(Some(HTTP_DEADLINE)).unwrap();
    stream.set_write_timeout(Some(HTTP_DEADLINE)).unwrap();
    let mut writer = stream.try_clone().expect("socket cloned");
    let writing = std::thread::spawn(move || {
        // The server may stop reading once it has answered; that write error is expected.
        let _ = writer.write_all(&request).and_then(|()| writer.flush());
    });
    let response = read_response(&stream);
    // Unblocks a write still waiting for the server to read.
    let _ = stream.shutdown(Shutdown::Both);
    writing.join().expect("writer thread");
    response
}

/// Reads one HTTP/1.x response (sized, chunked, or delimited by the end of the connection).
fn read_response(mut stream: &std::net::TcpStream) -> RawResponse {
    use std::io::Read;

    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = read_some(stream, &mut chunk, "response head read");
        assert!(n > 0, "connection closed before a response head: {buf:?}");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers: Vec<(String, String)> = lines
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (n, v) = l.split_once(':').expect("header line");
            (n.trim().to_ascii_lowercase(), v.trim().to_owned())
        })
        .collect();
    let mut body = buf[head_end..].to_vec();
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    if let Some(length) = header("content-length") {
        let length: usize = length.parse().expect("content-length");
        while body.len() < length {
            let n = read_some(stream, &mut chunk, "response body read");
            assert!(n > 0, "connection closed inside a sized body");
            body.extend_from_slice(&chunk[..n]);
        }
        body.truncate(length);
    } else if header("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        while !body.ends_with(b"0\r\n\r\n") {
            let n = read_some(stream, &mut chunk, "response body read");
            assert!(n > 0, "connection closed inside a chunked body");
            body.extend_from_slice(&chunk[..n]);
        }
        body = dechunk(&body);
    } else {
        stream.read_to_end(&mut body).expect("response body read");
    }
    RawResponse {
        status,
        headers,
        body,
    }
}

/// One read from `stream`, tried again when a signal interrupted it (a child process's exit
/// can, in a test binary where something handles `SIGCHLD`).
fn read_some(mut stream: &std::net::TcpStream, chunk: &mut [u8], what: &str) -> usize {
    use std::io::Read;
    loop {
        match stream.read(chunk) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            read => return read.expect(what),
        }
    }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = data
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("chunk size line");
        let size_text = String::from_utf8_lossy(&data[..line_end]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16)
            .expect("chunk size");
        data = &data[line_end + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

/// A test that cannot set up what it needs: outside CI it says so and the caller returns
/// (skips); under `CI=true`, where `.ci/run` provides everything, it fails instead.
pub fn cannot_run(test: &str, reason: &str) {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{test} cannot run under CI: {reason}");
    }
    println!("SKIPPED {test}: {reason}");
}

/// A free loopback port below the kernel's ephemeral range, for a server that a test stops and
/// starts again on the same port. A port the kernel handed out for `bind(0)` can be handed to
/// another test's socket (a listener or an outgoing connection) while the server is down, so
/// the server could not come back on it, or a call meant to find it gone would reach another;
/// below the range, only an explicit bind takes a port, and these are picked at random.
pub fn port_to_come_back_to() -> u16 {
    use std::hash::{BuildHasher, RandomState};
    let low: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768);
    let floor = 10_000u16.min(low / 2);
    let random = RandomState::new();
    for attempt in 0u32..1000 {
        let pick = random.hash_one((std::process::id(), attempt));
        let port = floor + (pick % u64::from(low - floor)) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port below {low}");
}
