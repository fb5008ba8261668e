//! A protocol-faithful fake of an OpenAI-Realtime-style server: actix-web + actix-ws on port 0.
//!
//! It greets each connection with `session.created` (listing the tools a test gave it, as a live
//! call's session would), records every client event (and each text frame exactly as sent, each
//! binary frame, each close), answers `session.update` according to its [`AckMode`], and lets a
//! test push server events and binary frames, close or drop the connection, and wait (with a
//! deadline) for what it expects.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, watch};

/// How `session.update` is answered.
#[derive(Debug, Clone, PartialEq)]
pub enum AckMode {
    /// `session.updated` at once.
    Immediate,
    /// `session.updated` after a delay.
    Delay(Duration),
    /// Only when the test calls [`FakeRealtime::release_acks`].
    Held,
    /// Never answered.
    Never,
    /// An `error` event naming the update's `event_id`.
    Error(String),
    /// `session.updated` twice, back to back.
    Twice,
}

#[derive(Default)]
struct Shared {
    /// Client events, in arrival order, over every connection.
    events: Vec<Value>,
    /// Every text frame exactly as it arrived, in order.
    texts: Vec<String>,
    /// Every binary frame, in order.
    binaries: Vec<Vec<u8>>,
    /// The close frames clients sent: `(code, reason)`.
    closes: Vec<(u16, String)>,
    /// Path and query of each handshake.
    targets: Vec<String>,
    /// The tools `session.created` lists.
    created_tools: Vec<Value>,
    /// No `session.created` for new connections.
    silent: bool,
    /// Every connection stops reading after the event it reads next.
    deaf: bool,
    /// Authorization headers seen at each handshake.
    authorizations: Vec<Option<String>>,
    connections: usize,
    acks_sent: usize,
    session: Option<actix_ws::Session>,
}

#[derive(Clone)]
pub struct FakeRealtime {
    pub url: String,
    shared: Arc<Mutex<Shared>>,
    mode: Arc<Mutex<AckMode>>,
    released: Arc<Semaphore>,
    changed: watch::Sender<u64>,
}

/// Longest a test waits for the session to do something.
pub const EVENT_DEADLINE: Duration = Duration::from_secs(20);

impl FakeRealtime {
    pub async fn start(mode: AckMode) -> FakeRealtime {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (changed, _) = watch::channel(0);
        let fake = FakeRealtime {
            url: format!("ws://127.0.0.1:{port}/v1/realtime?model=fake"),
            shared: Arc::default(),
            mode: Arc::new(Mutex::new(mode)),
            released: Arc::new(Semaphore::new(0)),
            changed,
        };
        let state = web::Data::new(fake.clone());
        let server = HttpServer::new(move || {
            App::new()
                .app_data(state.clone())
                .route("/v1/realtime", web::get().to(handshake))
        })
        .workers(1)
        .listen(listener)
        .unwrap()
        .run();
        actix_web::rt::spawn(server);
        fake
    }

    pub fn set_mode(&self, mode: AckMode) {
        *self.mode.lock().unwrap() = mode;
    }

    /// Lets `n` held acknowledgements go.
    pub fn release_acks(&self, n: usize) {
        self.released.add_permits(n);
    }

    pub fn events(&self) -> Vec<Value> {
        self.shared.lock().unwrap().events.clone()
    }

    /// Client events of one type, in order.
    pub fn events_of(&self, kind: &str) -> Vec<Value> {
        self.events()
            .into_iter()
            .filter(|e| e["type"] == kind)
            .collect()
    }

    pub fn connections(&self) -> usize {
        self.shared.lock().unwrap().connections
    }

    pub fn acks_sent(&self) -> usize {
        self.shared.lock().unwrap().acks_sent
    }

    pub fn authorizations(&self) -> Vec<Option<String>> {
        self.shared.lock().unwrap().authorizations.clone()
    }

    pub fn texts(&self) -> Vec<String> {
        self.shared.lock().unwrap().texts.clone()
    }

    pub fn binaries(&self) -> Vec<Vec<u8>> {
        self.shared.lock().unwrap().binaries.clone()
    }

    pub fn closes(&self) -> Vec<(u16, String)> {
        self.shared.lock().unwrap().closes.clone()
    }

    /// Path and query of each handshake, in order.
    pub fn targets(&self) -> Vec<String> {
        self.shared.lock().unwrap().targets.clone()
    }

    /// The tools `session.created` lists from now on (a call's session has the app's).
    pub fn set_created_tools(&self, tools: Vec<Value>) {
        self.shared.lock().unwrap().created_tools = tools;
    }

    /// New connections get no `session.created`.
    pub fn set_silent(&self) {
        self.shared.lock().unwrap().silent = true;
    }

    /// Every connection stops reading after the next frame it reads: what the client writes
    /// piles up in the socket buffers, then in the client.
    pub fn set_deaf(&self) {
        self.shared.lock().unwrap().deaf = true;
    }

    /// Waits until `done` holds over the fake's records; returns its value.
    pub async fn wait_until<T>(
        &self,
        what: &str,
        mut done: impl FnMut(&FakeRealtime) -> Option<T>,
    ) -> T {
        let mut rx = self.changed.subscribe();
        let deadline = tokio::time::Instant::now() + EVENT_DEADLINE;
        loop {
            if let Some(found) = done(self) {
                return found;
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                _ => panic!(
                    "timed out waiting for {what}; events so far: {:#?}",
                    self.events()
                ),
            }
        }
    }

    /// Sends a binary frame to the connected client.
    pub async fn push_binary(&self, bytes: Vec<u8>) {
        let session = self.shared.lock().unwrap().session.clone();
        let mut session = session.expect("a client is connected");
        session.binary(bytes).await.expect("binary sent");
    }

    /// Closes the current connection with a close frame carrying `code` and `reason`.
    pub async fn close_with(&self, code: u16, reason: &str) {
        let session = self.shared.lock().unwrap().session.take();
        if let Some(session) = session {
            let _ = session
                .close(Some(actix_ws::CloseReason {
                    code: actix_ws::CloseCode::from(code),
                    description: Some(reason.to_owned()),
                }))
                .await;
        }
    }

    fn notify(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    /// Waits until `done` holds over the recorded events; returns its value.
    pub async fn wait_for<T>(&self, what: &str, mut done: impl FnMut(&[Value]) -> Option<T>) -> T {
        self.wait_until(what, |fake| done(&fake.events())).await
    }

    /// Waits for the `n`-th `session.update` (1-based) and returns it.
    pub async fn nth_update(&self, n: usize) -> Value {
        // Read in place: a soak's thousands of events are not copied at every wake-up.
        self.wait_until(&format!("session.update #{n}"), |fake| {
            fake.shared
                .lock()
                .unwrap()
                .events
                .iter()
                .filter(|e| e["type"] == "session.update")
                .nth(n - 1)
                .cloned()
        })
        .await
    }

    /// Waits for a `session.update` whose tool names are exactly `names`.
    pub async fn update_with_tools(&self, names: &[&str]) -> Value {
        self.wait_for(&format!("session.update with tools {names:?}"), |events| {
            events
                .iter()
                .rev()
                .find(|e| e["type"] == "session.update" && update_tool_names(e) == names)
                .cloned()
        })
        .await
    }

    /// Waits until `n` connections have been made.
    pub async fn wait_connections(&self, n: usize) {
        let mut rx = self.changed.subscribe();
        let deadline = tokio::time::Instant::now() + EVENT_DEADLINE;
        while self.connections() < n {
            if !matches!(
                tokio::time::timeout_at(deadline, rx.changed()).await,
                Ok(Ok(()))
            ) {
                panic!("timed out waiting for connection #{n}");
            }
        }
    }

    /// Sends a server event to the connected client.
    pub async fn push(&self, event: Value) {
        let session = self.shared.lock().unwrap().session.clone();
        let mut session = session.expect("a client is connected");
        session.text(event.to_string()).await.expect("event sent");
    }

    /// The model calls `name` (arguments `{"city": "Tokyo"}`) in response `response_id`, and
    /// the response ends: `response.function_call_arguments.done`, then `response.done` listing
    /// the call.
    pub async fn push_call(&self, response_id: &str, call_id: &str, name: &str) {
        let arguments = r#"{"city": "Tokyo"}"#;
        self.push(json!({"type": "response.function_call_arguments.done",
            "event_id": format!("srv_{call_id}"), "response_id": response_id,
            "item_id": format!("item_{call_id}"), "output_index": 0, "call_id": call_id,
            "name": name, "arguments": arguments}))
            .await;
        self.push(
            json!({"type": "response.done", "event_id": format!("srv_done_{response_id}"),
            "response": {"id": response_id, "status": "completed", "output": [
                {"type": "function_call", "id": format!("item_{call_id}"), "call_id": call_id,
                 "name": name, "arguments": arguments, "status": "completed"}]}}),
        )
        .await;
    }

    /// Sends a server event if a client is still connected; false once it is gone.
    pub async fn try_push(&self, event: Value) -> bool {
        let session = self.shared.lock().unwrap().session.clone();
        match session {
            Some(mut session) => session.text(event.to_string()).await.is_ok(),
            None => false,
        }
    }

    /// Sends a text frame as it is (not necessarily JSON) to the connected client.
    pub async fn push_text(&self, text: &str) {
        let session = self.shared.lock().unwrap().session.clone();
        let mut session = session.expect("a client is connected");
        session.text(text.to_owned()).await.expect("text sent");
    }

    /// Sends `parts` as one text message in continuation frames (the first part, then the
    /// rest; at least two parts).
    pub async fn push_fragments(&self, parts: Vec<Vec<u8>>) {
        use actix_ws::Item;

        let session = self.shared.lock().unwrap().session.clone();
        let mut session = session.expect("a client is connected");
        let last = parts.len() - 1;
        for (i, part) in parts.into_iter().enumerate() {
            let part = bytes::Bytes::from(part);
            let item = match i {
                0 => Item::FirstText(part),
                i if i == last => Item::Last(part),
                _ => Item::Continue(part),
            };
            if session.continuation(item).await.is_err() {
                // The client closed the connection under us: what an oversized message earns.
                return;
            }
        }
    }

    /// Closes the current connection from the server side.
    pub async fn drop_connection(&self) {
        let session = self.shared.lock().unwrap().session.take();
        if let Some(session) = session {
            let _ = session.close(None).await;
        }
    }
}

/// The tool names a recorded `session.update` carries (flat or nested shape).
pub fn update_tool_names(update: &Value) -> Vec<String> {
    update["session"]["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| {
                    t["name"]
                        .as_str()
                        .or_else(|| t["function"]["name"].as_str())
                        .unwrap_or_default()
                        .to_owned()
                })
                .collect()
        })
        .unwrap_or_default()
}

async fn handshake(
    req: HttpRequest,
    body: web::Payload,
    fake: web::Data<FakeRealtime>,
) -> actix_web::Result<HttpResponse> {
    let (response, mut session, stream) = actix_ws::handle(&req, body)?;
    let mut stream = stream.max_frame_size(64 << 20);
    let fake = fake.get_ref().clone();
    {
        let mut shared = fake.shared.lock().unwrap();
        shared.connections += 1;
        shared.targets.push(req.uri().to_string());
        shared.authorizations.push(
            req.headers()
                .get("authorization")
                .map(|v| v.to_str().unwrap_or_default().to_owned()),
        );
        shared.session = Some(session.clone());
    }
    fake.notify();
    actix_web::rt::spawn(async move {
        let (tools, silent) = {
            let shared = fake.shared.lock().unwrap();
            (shared.created_tools.clone(), shared.silent)
        };
        if !silent {
            let created = json!({"type": "session.created", "event_id": "srv_0", "session": {"type": "realtime", "id": "sess_fake", "tools": tools}});
            let _ = session.text(created.to_string()).await;
        }
        while let Some(Ok(message)) = stream.next().await {
            if fake.shared.lock().unwrap().deaf {
                // Read no more (the socket stays open, unread).
                std::future::pending::<()>().await;
            }
            let text = match message {
                actix_ws::Message::Text(text) => text,
                actix_ws::Message::Binary(bytes) => {
                    fake.shared.lock().unwrap().binaries.push(bytes.to_vec());
                    fake.notify();
                    continue;
                }
                actix_ws::Message::Close(reason) => {
                    let (code, reason) = reason
                        .map(|r| (u16::from(r.code), r.description.unwrap_or_default()))
                        .unwrap_or((1005, String::new()));
                    fake.shared.lock().unwrap().closes.push((code, reason));
                    fake.notify();
                    break;
                }
                _ => continue,
            };
            fake.shared.lock().unwrap().texts.push(text.to_string());
            let event: Value =
                serde_json::from_str(&text).unwrap_or(Value::String(text.to_string()));
            // The mode in force when the event is recorded decides the answer: a test that
            // changes the mode after seeing an update never changes how that update is answered.
            let mode = fake.mode.lock().unwrap().clone();
            fake.shared.lock().unwrap().events.push(event.clone());
            fake.notify();
            if event["type"] == "session.update" {
                answer_update(&fake, mode, session.clone(), event);
            }
        }
    });
    Ok(response)
}

fn answer_update(
    fake: &FakeRealtime,
    mode: AckMode,
    mut session: actix_ws::Session,
    update: Value,
) {
    let ack =
        json!({"type": "session.updated", "event_id": "srv_ack", "session": update["session"]});
    let fake = fake.clone();
    actix_web::rt::spawn(async move {
        match mode {
            AckMode::Immediate => {}
            AckMode::Delay(d) => actix_web::rt::time::sleep(d).await,
            AckMode::Held => fake.released.acquire().await.unwrap().forget(),
            AckMode::Never => return,
            AckMode::Twice => {
                let _ = session.text(ack.to_string()).await;
            }
            AckMode::Error(message) => {
                let error = json!({"type": "error", "event_id": "srv_err", "error": {
                    "type": "invalid_request_error", "code": "invalid_value",
                    "message": message, "event_id": update["event_id"]}});
                let _ = session.text(error.to_string()).await;
                return;
            }
        }
        fake.shared.lock().unwrap().acks_sent += 1;
        fake.notify();
        let _ = session.text(ack.to_string()).await;
    });
}
