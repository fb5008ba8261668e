//! A real, programmable plugin callback server on loopback, and a port that refuses connections.
//!
//! The server speaks just enough HTTP/1.1, straight over a tokio listener, that a test decides
//! exactly what the plugin does: answer (now, later, or when a gate opens), never answer, close
//! the connection, redirect, send an oversized or endless body, or exit. It records every request
//! it receives, and a test waits for them on an event with a deadline. Everything runs on the
//! test's own thread, next to the test's actors.
#![allow(dead_code)]

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::rc::Rc;
use std::time::Duration;

use actix_web::rt::net::{TcpListener, TcpStream};
use actix_web::rt::task::JoinHandle;
use serde_json::{Value, json};
use socket2::{Domain, Socket, Type};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

use crate::helpers::{HTTP_DEADLINE, TestApp};

/// Largest request a callback accepts: calls are small JSON documents.
const MAX_REQUEST_BYTES: usize = 1 << 20;

/// Size of each chunk of a chunked answer.
const CHUNK_BYTES: usize = 1024;

/// What the callback does with a request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Answer with this status, extra headers and body, sent with a `Content-Length`.
    Respond {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// Wait this long, then reply.
    After(Duration, Box<Reply>),
    /// Wait until the server's gate opens, then reply.
    AfterGate(Box<Reply>),
    /// Never answer; the connection stays open until the server stops.
    Hang,
    /// Close the connection without answering.
    Close,
    /// 200 with a chunked body (no `Content-Length`) of `total` bytes, or without end.
    Chunked { total: Option<usize> },
    /// Send the head and the start of a body, then nothing more.
    Stall,
    /// Send these bytes as they are (not necessarily HTTP), then close the connection.
    Raw(Vec<u8>),
    /// Never answer; wait for the caller to close the connection, and count that close.
    HoldOpen,
}

impl Reply {
    /// 200 with this JSON body.
    pub fn json(body: Value) -> Self {
        Self::status_json(200, body)
    }

    pub fn status_json(status: u16, body: Value) -> Self {
        Self::text(status, "application/json", &body.to_string())
    }

    pub fn text(status: u16, content_type: &str, body: &str) -> Self {
        Self::Respond {
            status,
            headers: vec![("content-type".into(), content_type.into())],
            body: body.as_bytes().to_vec(),
        }
    }

    /// `{"output": output, "is_error": false}`, the usual successful answer.
    pub fn output(output: Value) -> Self {
        Self::json(json!({"output": output, "is_error": false}))
    }

    pub fn redirect(status: u16, location: &str) -> Self {
        Self::Respond {
            status,
            headers: vec![("location".into(), location.into())],
            body: Vec::new(),
        }
    }

    pub fn after(delay: Duration, then: Reply) -> Self {
        Self::After(delay, Box::new(then))
    }

    pub fn after_gate(then: Reply) -> Self {
        Self::AfterGate(Box::new(then))
    }
}

/// One request the callback received.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: String,
    pub path: String,
    /// Header names in lower case, in the order sent.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Received {
    /// The body as JSON (panics when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("callback body is not JSON ({e}): {:?}", self.body))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

struct Shared {
    routes: RefCell<HashMap<String, Reply>>,
    received: RefCell<Vec<Received>>,
    /// The number of requests received, for waiting on.
    count: watch::Sender<usize>,
    gate: watch::Sender<bool>,
    /// Connections held open by [`Reply::HoldOpen`] that the caller has since closed.
    closed: watch::Sender<usize>,
    /// Kept-alive connections the caller closed between requests.
    hung_up: watch::Sender<usize>,
    connections: Cell<usize>,
    tasks: RefCell<Vec<JoinHandle<()>>>,
    /// Requests received and not yet answered (or given up) now, and the most there ever were.
    in_flight: Cell<usize>,
    most_in_flight: Cell<usize>,
}

/// A plugin's callback server. Unknown paths answer 404.
pub struct CallbackServer {
    addr: SocketAddr,
    shared: Rc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl CallbackServer {
    /// Starts on a free port of 127.0.0.1.
    pub fn start() -> Self {
        Self::start_on(0)
    }

    /// Starts on `port` of 127.0.0.1 (0: a free one). Binding works while a [`ClosedPort`]
    /// holds the port, so a port can refuse, then serve, then refuse again.
    pub fn start_on(port: u16) -> Self {
        let listener = listen(port).expect("callback server listens");
        let addr = listener.local_addr().unwrap();
        let shared = Rc::new(Shared {
            routes: RefCell::new(HashMap::new()),
            received: RefCell::new(Vec::new()),
            count: watch::channel(0).0,
            gate: watch::channel(false).0,
            closed: watch::channel(0).0,
            hung_up: watch::channel(0).0,
            connections: Cell::new(0),
            tasks: RefCell::new(Vec::new()),
            in_flight: Cell::new(0),
            most_in_flight: Cell::new(0),
        });
        let acceptor = actix_web::rt::spawn(accept_loop(listener, shared.clone()));
        Self {
            addr,
            shared,
            acceptor: Some(acceptor),
        }
    }

    /// Starts with one route.
    pub fn with(path: &str, reply: Reply) -> Self {
        let server = Self::start();
        server.route(path, reply);
        server
    }

    /// Sets what requests to `path` get from now on.
    pub fn route(&self, path: &str, reply: Reply) {
        self.shared
            .routes
            .borrow_mut()
            .insert(path.to_owned(), reply);
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// `http://127.0.0.1:PORT` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Every request received so far, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        self.shared.received.borrow().clone()
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> usize {
        self.shared.connections.get()
    }

    /// The most requests the server was answering at one time so far (a request counts from
    /// its arrival until its answer is written, or its connection is gone).
    pub fn most_at_once(&self) -> usize {
        self.shared.most_in_flight.get()
    }

    /// Waits until `n` requests have arrived (panics after the deadline); returns them all.
    pub async fn wait_for_requests(&self, n: usize) -> Vec<Received> {
        let mut count = self.shared.count.subscribe();
        let arrived = tokio::time::timeout(HTTP_DEADLINE, count.wait_for(|c| *c >= n)).await;
        assert!(
            matches!(arrived, Ok(Ok(_))),
            "the callback received {} of {n} requests within {HTTP_DEADLINE:?}",
            self.shared.received.borrow().len()
        );
        self.received()
    }

    /// Waits until callers have closed `n` connections held by [`Reply::HoldOpen`] (panics after
    /// the deadline).
    pub async fn wait_for_closed(&self, n: usize) {
        let mut closed = self.shared.closed.subscribe();
        let seen = tokio::time::timeout(HTTP_DEADLINE, closed.wait_for(|c| *c >= n)).await;
        assert!(
            matches!(seen, Ok(Ok(_))),
            "{} of {n} held connections were closed by the caller within {HTTP_DEADLINE:?}",
            *self.shared.closed.borrow()
        );
    }

    /// Waits until callers have closed `n` kept-alive connections between requests (panics after
    /// the deadline).
    pub async fn wait_for_hang_ups(&self, n: usize) {
        let mut hung_up = self.shared.hung_up.subscribe();
        let seen = tokio::time::timeout(HTTP_DEADLINE, hung_up.wait_for(|c| *c >= n)).await;
        assert!(
            matches!(seen, Ok(Ok(_))),
            "{} of {n} kept-alive connections were closed by the caller within {HTTP_DEADLINE:?}",
            *self.shared.hung_up.borrow()
        );
    }

    /// Kept-alive connections the caller has closed between requests so far.
    pub fn hang_ups(&self) -> usize {
        *self.shared.hung_up.borrow()
    }

    /// Lets every request waiting on the gate (and every later one) through.
    pub fn open_gate(&self) {
        self.shared.gate.send_replace(true);
    }

    /// Stops accepting: the listening socket is closed. Open connections stay as they are.
    pub async fn close_listener(&mut self) {
        if let Some(acceptor) = self.acceptor.take() {
            acceptor.abort();
            let _ = acceptor.await;
        }
    }

    /// The plugin exits: the listening socket and every connection are closed when this returns.
    pub async fn stop(&mut self) {
        self.close_listener().await;
        let tasks = std::mem::take(&mut *self.shared.tasks.borrow_mut());
        for task in &tasks {
            task.abort();
        }
        for task in tasks {
            let _ = task.await;
        }
    }
}

impl Drop for CallbackServer {
    fn drop(&mut self) {
        if let Some(acceptor) = &self.acceptor {
            acceptor.abort();
        }
        for task in self.shared.tasks.borrow().iter() {
            task.abort();
        }
    }
}

/// A listening socket that, like the one of a plugin server, may share its port with a
/// [`ClosedPort`].
pub fn listen(port: u16) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.bind(&SocketAddrV4::new(Ipv4Addr::LOCALHOST, port).into())?;
    socket.listen(1024)?;
    socket.set_nonblocking(true)?;
    TcpListener::from_std(socket.into())
}

async fn accept_loop(listener: TcpListener, shared: Rc<Shared>) {
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        shared.connections.set(shared.connections.get() + 1);
        let task = actix_web::rt::spawn(serve_connection(stream, shared.clone()));
        shared.tasks.borrow_mut().push(task);
    }
}

/// Serves the requests of one connection, keeping it alive between them like a real server.
async fn serve_connection(mut stream: TcpStream, shared: Rc<Shared>) {
    let mut buf = Vec::new();
    loop {
        let Some(request) = read_request(&mut stream, &mut buf).await else {
            shared.hung_up.send_modify(|c| *c += 1);
            return;
        };
        let reply = shared
            .routes
            .borrow()
            .get(&request.path)
            .cloned()
            .unwrap_or_else(|| Reply::text(404, "text/plain", "no such callback"));
        let close_requested = request
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"));
        shared.received.borrow_mut().push(request);
        shared.count.send_modify(|c| *c += 1);
        let answering = InFlight::enter(&shared);
        let written = write_reply(&mut stream, reply, &shared).await;
        drop(answering);
        if written.is_err() || close_requested {
            return;
        }
    }
}

/// One request being answered, counted while it lives (its task may be aborted).
struct InFlight<'a>(&'a Shared);

impl<'a> InFlight<'a> {
    fn enter(shared: &'a Shared) -> Self {
        let now = shared.in_flight.get() + 1;
        shared.in_flight.set(now);
        shared
            .most_in_flight
            .set(shared.most_in_flight.get().max(now));
        Self(shared)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.set(self.0.in_flight.get() - 1);
    }
}

/// Reads one request (with a `Content-Length` body, as the dispatcher sends); `None` at the end
/// of the connection.
pub async fn read_request(stream: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Received> {
    let mut chunk = [0u8; 16 * 1024];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_REQUEST_BYTES {
            return None;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let method = request_line.next()?.to_owned();
    let path = request_line.next()?.to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = buf[head_end..head_end + length].to_vec();
    buf.drain(..head_end + length);
    Some(Received {
        method,
        path,
        headers,
        body,
    })
}

async fn write_reply(stream: &mut TcpStream, reply: Reply, shared: &Shared) -> io::Result<()> {
    let mut reply = reply;
    loop {
        reply = match reply {
            Reply::After(delay, then) => {
                actix_web::rt::time::sleep(delay).await;
                *then
            }
            Reply::AfterGate(then) => {
                let mut gate = shared.gate.subscribe();
                let _ = gate.wait_for(|open| *open).await;
                *then
            }
            Reply::Hang => std::future::pending().await,
            Reply::HoldOpen => {
                let mut byte = [0u8; 1];
                // Reads until the caller closes (0 bytes) or resets the connection.
                while matches!(stream.read(&mut byte).await, Ok(n) if n > 0) {}
                shared.closed.send_modify(|c| *c += 1);
                return Err(io::Error::other("the caller closed the connection"));
            }
            Reply::Close => return Err(io::Error::other("closing without an answer")),
            Reply::Stall => {
                stream
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n{\"output\": ")
                    .await?;
                stream.flush().await?;
                std::future::pending().await
            }
            Reply::Raw(bytes) => {
                stream.write_all(&bytes).await?;
                stream.flush().await?;
                return Err(io::Error::other("closing after a raw answer"));
            }
            Reply::Respond {
                status,
                headers,
                body,
            } => {
                let mut head = format!(
                    "HTTP/1.1 {status} {}\r\ncontent-length: {}\r\n",
                    reason(status),
                    body.len()
                );
                for (name, value) in headers {
                    head.push_str(&format!("{name}: {value}\r\n"));
                }
                head.push_str("\r\n");
                stream.write_all(head.as_bytes()).await?;
                stream.write_all(&body).await?;
                return stream.flush().await;
            }
            Reply::Chunked { total } => {
                stream
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\
                          transfer-encoding: chunked\r\n\r\n",
                    )
                    .await?;
                let mut left = total;
                while left != Some(0) {
                    let size = left.map_or(CHUNK_BYTES, |l| l.min(CHUNK_BYTES));
                    let mut chunk = format!("{size:x}\r\n").into_bytes();
                    chunk.resize(chunk.len() + size, b'a');
                    chunk.extend_from_slice(b"\r\n");
                    stream.write_all(&chunk).await?;
                    left = left.map(|l| l - size);
                }
                stream.write_all(b"0\r\n\r\n").await?;
                return stream.flush().await;
            }
        }
    }
}

pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        301 => "Moved Permanently",
        302 => "Found",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        404 => "Not Found",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

/// A loopback port that refuses connections: it is bound (so no one else takes it) but not
/// listening. A [`CallbackServer`] can start on it and stop again; it refuses once more after.
pub struct ClosedPort {
    _socket: Socket,
    port: u16,
}

impl ClosedPort {
    pub fn new() -> Self {
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
        socket.set_reuse_address(true).expect("SO_REUSEADDR");
        socket
            .bind(&SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0).into())
            .expect("bound");
        let port = socket
            .local_addr()
            .unwrap()
            .as_socket()
            .expect("an IP socket")
            .port();
        Self {
            _socket: socket,
            port,
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

/// `POST /api/tools/invoke`.
pub async fn invoke(app: &TestApp, body: Value) -> (u16, Value) {
    app.post("/api/tools/invoke", &body).await
}

/// Starts an invoke of `name` (no arguments) on its own client and task, so a test can go on
/// while it waits; the task asserts a 200 and returns the answer.
pub fn spawn_invoke(app: &TestApp, name: &str) -> JoinHandle<Value> {
    let url = app.url("/api/tools/invoke");
    let body = json!({"name": name, "arguments": {}});
    actix_web::rt::spawn(async move {
        let client = crate::helpers::test_client();
        let mut response = client
            .post(url)
            .send_json(&body)
            .await
            .expect("invoke sent");
        assert_eq!(response.status(), 200);
        response.json::<Value>().await.expect("invoke answer")
    })
}

/// Invokes `name` with `arguments` for any role; asserts a 200 and returns the answer.
pub async fn invoke_ok(app: &TestApp, name: &str, arguments: Value) -> Value {
    let (status, body) = invoke(app, json!({"name": name, "arguments": arguments})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["ok"], json!(true), "{body}");
    body
}

/// The `error` text of an error result (panics on a success).
pub fn error_text(result: &Value) -> &str {
    assert_eq!(
        result["is_error"],
        json!(true),
        "expected an error: {result}"
    );
    result["error"]
        .as_str()
        .unwrap_or_else(|| panic!("error result without an error text: {result}"))
}

/// Registers a tool (every role), asserting it was accepted.
pub async fn register(app: &TestApp, body: Value) {
    let (status, answer) = app.register(&body).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["ok"], json!(true), "{answer}");
}

/// A register body for a plugin tool with this timeout.
pub fn tool_with_timeout(name: &str, url: &str, source: &str, timeout_seconds: f64) -> Value {
    let mut body = crate::helpers::tool_body(name, url, source);
    body["timeout_seconds"] = json!(timeout_seconds);
    body
}
