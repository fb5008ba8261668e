//! A fake OpenAI-compatible chat upstream on loopback, scripted by the test: each request to
//! `/v1/chat/completions` takes the next scripted answer (a completion, an error, a stream of
//! chunks, chunked or delimited by closing the connection, possibly held at a gate, or no answer
//! at all), and every request is recorded. A chat request whose messages leave a call without
//! its tool message (or a tool message without its call) is refused as OpenAI refuses it (a 400
//! that takes no scripted answer). `/v1/models` answers a fixed list. It speaks HTTP/1.1
//! straight over a tokio listener (keeping connections alive like a real server), on the test's
//! own thread.
#![allow(dead_code)]

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;

use actix_web::rt::net::TcpStream;
use actix_web::rt::task::JoinHandle;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

use crate::callback_server::{Received, listen, read_request, reason};
use crate::helpers::HTTP_DEADLINE;

/// What the upstream answers one chat request with.
#[derive(Debug, Clone)]
pub enum Answer {
    /// A JSON body with this status.
    Json(u16, Value),
    /// A body of this type, as it is.
    Text(u16, String, String),
    /// An SSE stream of these `data:` payloads, chunked; when `gate_at` is set, the events
    /// from that index on wait for the gate.
    Sse {
        events: Vec<String>,
        gate_at: Option<usize>,
        close_delimited: bool,
    },
    /// No answer: the connection is held until the caller closes it (counted).
    HoldOpen,
    /// A redirect with this status to this `Location`.
    Redirect(u16, String),
}

impl Answer {
    /// A stream of these chunks, then `[DONE]`.
    pub fn stream(chunks: Vec<Value>) -> Self {
        let mut events: Vec<String> = chunks.iter().map(Value::to_string).collect();
        events.push("[DONE]".into());
        Self::Sse {
            events,
            gate_at: None,
            close_delimited: false,
        }
    }

    /// The same stream, its events from `at` on held until the gate opens.
    pub fn gated(self, at: usize) -> Self {
        match self {
            Self::Sse {
                events,
                close_delimited,
                ..
            } => Self::Sse {
                events,
                gate_at: Some(at),
                close_delimited,
            },
            other => other,
        }
    }

    /// The same stream, its end marked by closing the connection (no length, no chunks).
    pub fn close_delimited(self) -> Self {
        match self {
            Self::Sse {
                events, gate_at, ..
            } => Self::Sse {
                events,
                gate_at,
                close_delimited: true,
            },
            other => other,
        }
    }
}

/// A completion whose message says `text`.
pub fn completion(id: &str, text: &str, usage: (u64, u64)) -> Value {
    json!({
        "id": id, "object": "chat.completion", "created": 1700000000, "model": "fake-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                     "logprobs": null, "finish_reason": "stop"}],
        "usage": usage_of(usage),
    })
}

/// A completion that calls tools (`(id, name, arguments)`), with `text` before the calls.
pub fn calls_completion(id: &str, text: Option<&str>, calls: &[(&str, &str, Value)]) -> Value {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, arguments)| {
            json!({"id": id, "type": "function",
                   "function": {"name": name, "arguments": arguments.to_string()}})
        })
        .collect();
    json!({
        "id": id, "object": "chat.completion", "created": 1700000000, "model": "fake-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text,
                                             "tool_calls": calls},
                     "logprobs": null, "finish_reason": "tool_calls"}],
        "usage": usage_of((10, 5)),
    })
}

pub fn usage_of((prompt, completion): (u64, u64)) -> Value {
    json!({"prompt_tokens": prompt, "completion_tokens": completion,
           "total_tokens": prompt + completion})
}

/// One chunk of a stream with this delta (and finish reason).
pub fn chunk(id: &str, delta: Value, finish_reason: Option<&str>) -> Value {
    json!({"id": id, "object": "chat.completion.chunk", "created": 1700000000,
           "model": "fake-model", "system_fingerprint": "fp_fake",
           "choices": [{"index": 0, "delta": delta, "logprobs": null,
                        "finish_reason": finish_reason}]})
}

/// The usage chunk that ends a stream that asked for it.
pub fn usage_chunk(id: &str, usage: (u64, u64)) -> Value {
    json!({"id": id, "object": "chat.completion.chunk", "created": 1700000000,
           "model": "fake-model", "system_fingerprint": "fp_fake", "choices": [],
           "usage": usage_of(usage)})
}

/// The chunks of an answer in words, as OpenAI streams it: the role, the text in `parts`, the
/// finish, the usage.
pub fn text_chunks(id: &str, parts: &[&str], usage: (u64, u64)) -> Vec<Value> {
    let mut chunks = vec![chunk(id, json!({"role": "assistant", "content": ""}), None)];
    chunks.extend(parts.iter().map(|p| chunk(id, json!({"content": p}), None)));
    chunks.push(chunk(id, json!({}), Some("stop")));
    chunks.push(usage_chunk(id, usage));
    chunks
}

/// The chunks of a turn that says `text` then calls tools, each call's arguments in two
/// fragments, as OpenAI streams it.
pub fn call_chunks(id: &str, text: Option<&str>, calls: &[(&str, &str, Value)]) -> Vec<Value> {
    let mut chunks = vec![chunk(
        id,
        json!({"role": "assistant", "content": null}),
        None,
    )];
    if let Some(text) = text {
        chunks.push(chunk(id, json!({"content": text}), None));
    }
    for (index, (call_id, name, arguments)) in calls.iter().enumerate() {
        let text = arguments.to_string();
        let (a, b) = text.split_at(text.len() / 2);
        chunks.push(chunk(
            id,
            json!({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                   "function": {"name": name, "arguments": ""}}]}),
            None,
        ));
        for part in [a, b] {
            chunks.push(chunk(
                id,
                json!({"tool_calls": [{"index": index, "function": {"arguments": part}}]}),
                None,
            ));
        }
    }
    chunks.push(chunk(id, json!({}), Some("tool_calls")));
    chunks.push(usage_chunk(id, (10, 5)));
    chunks
}

struct Shared {
    answers: RefCell<VecDeque<Answer>>,
    /// Answers of `/v1/models` requests before the fixed list.
    models: RefCell<VecDeque<Answer>>,
    received: RefCell<Vec<Received>>,
    count: watch::Sender<usize>,
    gate: watch::Sender<bool>,
    /// Connections held by [`Answer::HoldOpen`] that the caller has since closed.
    closed: watch::Sender<usize>,
    /// Connections accepted.
    connections: std::cell::Cell<usize>,
    tasks: RefCell<Vec<JoinHandle<()>>>,
}

pub struct FakeChat {
    addr: SocketAddr,
    shared: Rc<Shared>,
    acceptor: JoinHandle<()>,
}

impl FakeChat {
    pub fn start() -> Self {
        let listener = listen(0).expect("the fake chat upstream listens");
        let addr = listener.local_addr().unwrap();
        let shared = Rc::new(Shared {
            answers: RefCell::new(VecDeque::new()),
            models: RefCell::new(VecDeque::new()),
            received: RefCell::new(Vec::new()),
            count: watch::channel(0).0,
            gate: watch::channel(false).0,
            closed: watch::channel(0).0,
            connections: std::cell::Cell::new(0),
            tasks: RefCell::new(Vec::new()),
        });
        let accepting = shared.clone();
        let acceptor = actix_web::rt::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                accepting.connections.set(accepting.connections.get() + 1);
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

    /// The base URL a character's `[character.chat] url` names.
    pub fn base(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Queues the answers of the next chat requests, in order.
    pub fn script(&self, answers: impl IntoIterator<Item = Answer>) {
        self.shared.answers.borrow_mut().extend(answers);
    }

    /// Queues the answers of the next `/v1/models` requests (the fixed list after them).
    pub fn script_models(&self, answers: impl IntoIterator<Item = Answer>) {
        self.shared.models.borrow_mut().extend(answers);
    }

    /// Every request so far.
    pub fn received(&self) -> Vec<Received> {
        self.shared.received.borrow().clone()
    }

    /// The bodies of the chat requests so far.
    pub fn bodies(&self) -> Vec<Value> {
        self.received()
            .iter()
            .filter(|r| r.path.starts_with("/v1/chat/completions"))
            .map(Received::json)
            .collect()
    }

    /// Waits until `n` requests have arrived (panics after the deadline).
    pub async fn wait_for_requests(&self, n: usize) -> Vec<Received> {
        let mut count = self.shared.count.subscribe();
        let arrived = tokio::time::timeout(HTTP_DEADLINE, count.wait_for(|c| *c >= n)).await;
        assert!(
            matches!(arrived, Ok(Ok(_))),
            "the upstream received {} of {n} requests within {HTTP_DEADLINE:?}",
            self.shared.received.borrow().len()
        );
        self.received()
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.shared.connections.get()
    }

    /// Lets held stream events through.
    pub fn open_gate(&self) {
        self.shared.gate.send_replace(true);
    }

    /// Waits until callers closed `n` connections held without an answer.
    pub async fn wait_for_closed(&self, n: usize) {
        let mut closed = self.shared.closed.subscribe();
        let seen = tokio::time::timeout(HTTP_DEADLINE, closed.wait_for(|c| *c >= n)).await;
        assert!(
            matches!(seen, Ok(Ok(_))),
            "{} of {n} held upstream connections were closed within {HTTP_DEADLINE:?}",
            *self.shared.closed.borrow()
        );
    }
}

impl Drop for FakeChat {
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
        let scripted_models = request
            .path
            .starts_with("/v1/models")
            .then(|| shared.models.borrow_mut().pop_front())
            .flatten();
        let answer = if let Some(answer) = scripted_models {
            answer
        } else if request.path.starts_with("/v1/models") {
            Answer::Json(
                200,
                json!({"object": "list", "data": [
                    {"id": "fake-model", "object": "model", "created": 1700000000, "owned_by": "tests"}]}),
            )
        } else if let Some(refusal) = unanswered_calls(&request) {
            refusal
        } else {
            shared.answers.borrow_mut().pop_front().unwrap_or_else(|| {
                Answer::Json(
                    500,
                    json!({"error": {"message": "no scripted answer left"}}),
                )
            })
        };
        shared.received.borrow_mut().push(request);
        shared.count.send_modify(|c| *c += 1);
        match write_answer(&mut stream, answer, &shared).await {
            Ok(true) => {}
            Ok(false) | Err(_) => return,
        }
    }
}

/// OpenAI's refusal of a chat request whose conversation is not a valid sequence: an assistant
/// message's calls each answered by a tool message right after it, and no tool message that
/// answers nothing. `None` for any other request.
fn unanswered_calls(request: &Received) -> Option<Answer> {
    if !request.path.starts_with("/v1/chat/completions") {
        return None;
    }
    let body: Value = serde_json::from_slice(&request.body).ok()?;
    let messages = body["messages"].as_array()?;
    let refuse = |message: String, at: usize| {
        Some(Answer::Json(
            400,
            json!({"error": {"message": message, "type": "invalid_request_error",
                             "param": format!("messages.[{at}].role"), "code": null}}),
        ))
    };
    let mut pending: Vec<&str> = Vec::new();
    for (at, message) in messages.iter().enumerate() {
        let role = message["role"].as_str().unwrap_or_default();
        if role == "tool" {
            let id = message["tool_call_id"].as_str().unwrap_or_default();
            match pending.iter().position(|p| *p == id) {
                Some(found) => {
                    pending.remove(found);
                }
                None => {
                    return refuse(
                        "Invalid parameter: messages with role 'tool' must be a response to a \
                         preceeding message with 'tool_calls'."
                            .into(),
                        at,
                    );
                }
            }
            continue;
        }
        if !pending.is_empty() {
            return refuse(
                format!(
                    "An assistant message with 'tool_calls' must be followed by tool messages \
                     responding to each 'tool_call_id'. The following tool_call_ids did not \
                     have response messages: {}",
                    pending.join(", ")
                ),
                at,
            );
        }
        if role == "assistant" {
            pending = message["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|call| call["id"].as_str())
                .collect();
        }
    }
    if pending.is_empty() {
        None
    } else {
        refuse(
            format!(
                "An assistant message with 'tool_calls' must be followed by tool messages \
                 responding to each 'tool_call_id'. The following tool_call_ids did not have \
                 response messages: {}",
                pending.join(", ")
            ),
            messages.len() - 1,
        )
    }
}

/// Writes one answer; true when the connection stays open for the next request.
async fn write_answer(stream: &mut TcpStream, answer: Answer, shared: &Shared) -> io::Result<bool> {
    match answer {
        Answer::Json(status, body) => {
            write_whole(
                stream,
                status,
                "application/json",
                body.to_string().as_bytes(),
            )
            .await?;
            Ok(true)
        }
        Answer::Text(status, content_type, body) => {
            write_whole(stream, status, &content_type, body.as_bytes()).await?;
            Ok(true)
        }
        Answer::Redirect(status, location) => {
            let head = format!(
                "HTTP/1.1 {status} {}\r\nlocation: {location}\r\ncontent-length: 0\r\n\r\n",
                reason(status)
            );
            stream.write_all(head.as_bytes()).await?;
            stream.flush().await?;
            Ok(true)
        }
        Answer::HoldOpen => {
            let mut byte = [0u8; 1];
            while matches!(stream.read(&mut byte).await, Ok(n) if n > 0) {}
            shared.closed.send_modify(|c| *c += 1);
            Ok(false)
        }
        Answer::Sse {
            events,
            gate_at,
            close_delimited,
        } => {
            let framing = if close_delimited {
                "connection: close\r\n"
            } else {
                "transfer-encoding: chunked\r\n"
            };
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n\
                 {framing}\r\n"
            );
            stream.write_all(head.as_bytes()).await?;
            stream.flush().await?;
            for (i, event) in events.iter().enumerate() {
                if gate_at == Some(i) {
                    let mut gate = shared.gate.subscribe();
                    let _ = gate.wait_for(|open| *open).await;
                }
                let frame = format!("data: {event}\n\n");
                if close_delimited {
                    stream.write_all(frame.as_bytes()).await?;
                } else {
                    let chunk = format!("{:x}\r\n{frame}\r\n", frame.len());
                    stream.write_all(chunk.as_bytes()).await?;
                }
                stream.flush().await?;
            }
            if close_delimited {
                stream.shutdown().await?;
                return Ok(false);
            }
            stream.write_all(b"0\r\n\r\n").await?;
            stream.flush().await?;
            Ok(true)
        }
    }
}

async fn write_whole(
    stream: &mut TcpStream,
    status: u16,
    content_type: &str,
    body: &[u8],
) -> io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n",
        reason(status),
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body).await?;
    stream.flush().await
}
