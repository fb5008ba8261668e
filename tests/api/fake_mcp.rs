//! A hostile MCP server over Streamable HTTP on loopback, scripted by the test: it initializes
//! like any server (JSON answers, a session id), and then answers `tools/list` and `tools/call`
//! as the test says — tools of any size (written as they go, never held whole), a cursor that
//! comes back, results of hundreds of megabytes as JSON or as an event stream, or an answer that
//! is not JSON at all. It speaks HTTP/1.1 straight over a tokio listener, on the test's thread,
//! and counts the bytes it managed to write.
#![allow(dead_code)]

use std::cell::{Cell, RefCell};
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;

use actix_web::rt::net::TcpStream;
use actix_web::rt::task::JoinHandle;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use crate::callback_server::{listen, read_request, reason};

/// How `tools/list` is answered.
#[derive(Debug, Clone)]
pub enum Listing {
    /// These tools, in one page.
    Tools(Vec<Value>),
    /// One tool whose description is this many bytes.
    HugeDescription(usize),
    /// One tool per page, each page's `nextCursor` the same.
    RepeatingCursor,
    /// `pages` pages of one tool each (`tool_1`, `tool_2`, …), each description this many
    /// bytes.
    Pages { pages: usize, description: usize },
}

/// How `tools/call` is answered.
#[derive(Debug, Clone)]
pub enum CallAnswer {
    /// A text result.
    Text(String),
    /// A text result of this many bytes, in a JSON answer (chunked), or as an event stream.
    Huge { bytes: usize, stream: bool },
    /// `200 application/json` whose body is not JSON.
    NotJson,
}

struct Shared {
    listing: RefCell<Listing>,
    call: RefCell<CallAnswer>,
    /// Bytes of `tools/call` answers written (what the client read, at most).
    written: Cell<usize>,
    calls: Cell<usize>,
    tasks: RefCell<Vec<JoinHandle<()>>>,
}

pub struct FakeMcp {
    addr: SocketAddr,
    shared: Rc<Shared>,
    acceptor: JoinHandle<()>,
}

impl FakeMcp {
    pub fn start(listing: Listing, call: CallAnswer) -> Self {
        let listener = listen(0).expect("the fake MCP server listens");
        let addr = listener.local_addr().unwrap();
        let shared = Rc::new(Shared {
            listing: RefCell::new(listing),
            call: RefCell::new(call),
            written: Cell::new(0),
            calls: Cell::new(0),
            tasks: RefCell::new(Vec::new()),
        });
        let accepting = shared.clone();
        let acceptor = actix_web::rt::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let task = actix_web::rt::spawn(serve(stream, accepting.clone()));
                accepting.tasks.borrow_mut().push(task);
            }
        });
        Self {
            addr,
            shared,
            acceptor,
        }
    }

    /// Its endpoint, for a registration.
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    pub fn set_call(&self, call: CallAnswer) {
        *self.shared.call.borrow_mut() = call;
    }

    /// Bytes of `tools/call` answers written so far.
    pub fn written(&self) -> usize {
        self.shared.written.get()
    }

    pub fn calls(&self) -> usize {
        self.shared.calls.get()
    }
}

impl Drop for FakeMcp {
    fn drop(&mut self) {
        self.acceptor.abort();
        for task in self.shared.tasks.borrow().iter() {
            task.abort();
        }
    }
}

async fn serve(mut stream: TcpStream, shared: Rc<Shared>) {
    let mut buf = Vec::new();
    while let Some(request) = read_request(&mut stream, &mut buf).await {
        let written = match request.method.as_str() {
            "POST" => answer(&mut stream, &request.json(), &shared).await,
            "DELETE" => whole(&mut stream, 200, "application/json", b"", &[]).await,
            _ => whole(&mut stream, 405, "text/plain", b"no stream here", &[]).await,
        };
        if written.is_err() {
            return;
        }
    }
}

async fn answer(stream: &mut TcpStream, message: &Value, shared: &Shared) -> io::Result<()> {
    let Some(id) = message.get("id").cloned() else {
        // A notification.
        return whole(stream, 202, "application/json", b"", &[]).await;
    };
    let reply = |result: Value| json!({"jsonrpc": "2.0", "id": id, "result": result});
    match message["method"].as_str().unwrap_or_default() {
        "initialize" => {
            let version = message["params"]["protocolVersion"].clone();
            let body = reply(json!({"protocolVersion": version,
                "capabilities": {"tools": {"listChanged": false}},
                "serverInfo": {"name": "fake-mcp", "version": "1.0.0"}}));
            whole(
                stream,
                200,
                "application/json",
                body.to_string().as_bytes(),
                &[("mcp-session-id", "fake-session-1")],
            )
            .await
        }
        "tools/list" => {
            let listing = shared.listing.borrow().clone();
            match listing {
                Listing::Tools(tools) => {
                    let body = reply(json!({"tools": tools}));
                    whole(
                        stream,
                        200,
                        "application/json",
                        body.to_string().as_bytes(),
                        &[],
                    )
                    .await
                }
                Listing::RepeatingCursor => {
                    let body = reply(json!({"tools": [tool("again", "Listed again.")],
                                            "nextCursor": "page-2"}));
                    whole(
                        stream,
                        200,
                        "application/json",
                        body.to_string().as_bytes(),
                        &[],
                    )
                    .await
                }
                Listing::Pages { pages, description } => {
                    let page = message["params"]["cursor"]
                        .as_str()
                        .and_then(|c| c.parse::<usize>().ok())
                        .unwrap_or(1);
                    let mut result =
                        json!({"tools": [tool(&format!("tool_{page}"), &"d".repeat(description))]});
                    if page < pages {
                        result["nextCursor"] = json!((page + 1).to_string());
                    }
                    let body = reply(result);
                    whole(
                        stream,
                        200,
                        "application/json",
                        body.to_string().as_bytes(),
                        &[],
                    )
                    .await
                }
                Listing::HugeDescription(bytes) => {
                    let start = format!(
                        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"tools":[{{"name":"huge","inputSchema":{{"type":"object"}},"description":""#
                    );
                    let end = r#""}]}}"#;
                    chunked_filler(stream, "application/json", &start, bytes, end, None).await
                }
            }
        }
        "tools/call" => {
            shared.calls.set(shared.calls.get() + 1);
            let call = shared.call.borrow().clone();
            match call {
                CallAnswer::Text(text) => {
                    let body = reply(json!({"content": [{"type": "text", "text": text}]}));
                    whole(
                        stream,
                        200,
                        "application/json",
                        body.to_string().as_bytes(),
                        &[],
                    )
                    .await
                }
                CallAnswer::NotJson => {
                    whole(stream, 200, "application/json", b"<html>busy</html>", &[]).await
                }
                CallAnswer::Huge { bytes, stream: sse } => {
                    let start = format!(
                        r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":""#
                    );
                    let end = r#""}]}}"#;
                    let (content_type, start, end) = if sse {
                        (
                            "text/event-stream",
                            format!("data: {start}"),
                            format!("{end}\n\n"),
                        )
                    } else {
                        ("application/json", start, end.to_owned())
                    };
                    chunked_filler(
                        stream,
                        content_type,
                        &start,
                        bytes,
                        &end,
                        Some(&shared.written),
                    )
                    .await
                }
            }
        }
        other => {
            let body = json!({"jsonrpc": "2.0", "id": id,
                              "error": {"code": -32601, "message": format!("no {other}")}});
            whole(
                stream,
                200,
                "application/json",
                body.to_string().as_bytes(),
                &[],
            )
            .await
        }
    }
}

fn tool(name: &str, description: &str) -> Value {
    json!({"name": name, "description": description,
           "inputSchema": {"type": "object", "properties": {}}})
}

async fn whole(
    stream: &mut TcpStream,
    status: u16,
    content_type: &str,
    body: &[u8],
    headers: &[(&str, &str)],
) -> io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n",
        reason(status),
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    stream.flush().await
}

/// A chunked body: `start`, `bytes` of `x` in 1 MiB chunks, `end`, counting what was written.
async fn chunked_filler(
    stream: &mut TcpStream,
    content_type: &str,
    start: &str,
    bytes: usize,
    end: &str,
    written: Option<&Cell<usize>>,
) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\ntransfer-encoding: chunked\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await?;
    let count = |n: usize| {
        if let Some(written) = written {
            written.set(written.get() + n);
        }
    };
    let chunk = |data: &[u8]| {
        let mut framed = format!("{:x}\r\n", data.len()).into_bytes();
        framed.extend_from_slice(data);
        framed.extend_from_slice(b"\r\n");
        framed
    };
    stream.write_all(&chunk(start.as_bytes())).await?;
    count(start.len());
    let filler = vec![b'x'; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(filler.len());
        stream.write_all(&chunk(&filler[..n])).await?;
        count(n);
        left -= n;
    }
    stream.write_all(&chunk(end.as_bytes())).await?;
    stream.write_all(b"0\r\n\r\n").await?;
    stream.flush().await
}
