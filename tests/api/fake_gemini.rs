//! A fake of the Gemini Live API (`BidiGenerateContent` over a websocket): actix-web + actix-ws
//! on port 0, speaking as the API does — JSON messages in binary frames, `setupComplete` for a
//! setup, `sessionResumptionUpdate` with a new handle after the setup and after each
//! `toolResponse` (and `resumable: false` while calls are out), a setup that resumes an unknown
//! handle refused with a close, as the API refuses. It records every client message of every
//! connection (each checked later against the official SDK's types), and lets a test push
//! server messages, hold or refuse setups, and wait (with a deadline) for what it expects. A
//! client's close is answered, and the connection left open until the client ends it (as
//! RFC 6455 lets a server): the fake records both, so a test sees the connection end.

use std::sync::{Arc, Mutex};

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::fake_realtime::EVENT_DEADLINE;

/// The path of the API's websocket.
pub const BIDI_PATH: &str =
    "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent";

/// How a setup is answered.
#[derive(Debug, Clone, PartialEq)]
pub enum SetupMode {
    /// `setupComplete` at once.
    Complete,
    /// Answered when the test calls [`FakeGemini::release_setups`].
    Held,
    /// The connection is closed with this reason (code 1007), as the API refuses a setup.
    Refuse(String),
}

/// One client message, with the connection it came on (0 is the first).
#[derive(Debug, Clone)]
pub struct Received {
    pub connection: usize,
    pub message: Value,
}

#[derive(Default)]
struct Shared {
    received: Vec<Received>,
    /// The `x-goog-api-key` header of each handshake.
    keys: Vec<Option<String>>,
    /// Path and query of each handshake.
    targets: Vec<String>,
    /// Each connection's session, by number; `None` once it closed.
    sessions: Vec<Option<actix_ws::Session>>,
    /// Close frames the clients sent: (connection, code).
    closes: Vec<(usize, u16)>,
    /// Connections whose client ended the TCP connection (the fake read its end).
    ended: Vec<usize>,
    /// Handles given out, each naming the number of messages consumed when it was given.
    handles: Vec<String>,
}

#[derive(Clone)]
pub struct FakeGemini {
    pub url: String,
    shared: Arc<Mutex<Shared>>,
    mode: Arc<Mutex<SetupMode>>,
    released: Arc<tokio::sync::Semaphore>,
    changed: watch::Sender<u64>,
}

impl FakeGemini {
    pub async fn start(mode: SetupMode) -> FakeGemini {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (changed, _) = watch::channel(0);
        let fake = FakeGemini {
            url: format!("ws://127.0.0.1:{port}{BIDI_PATH}"),
            shared: Arc::default(),
            mode: Arc::new(Mutex::new(mode)),
            released: Arc::new(tokio::sync::Semaphore::new(0)),
            changed,
        };
        let state = web::Data::new(fake.clone());
        let server = HttpServer::new(move || {
            App::new()
                .app_data(state.clone())
                .route(BIDI_PATH, web::get().to(handshake))
        })
        .workers(1)
        .listen(listener)
        .unwrap()
        .run();
        actix_web::rt::spawn(server);
        fake
    }

    pub fn set_mode(&self, mode: SetupMode) {
        *self.mode.lock().unwrap() = mode;
    }

    /// Lets `n` held setups be answered.
    pub fn release_setups(&self, n: usize) {
        self.released.add_permits(n);
    }

    fn notify(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    /// Every client message so far, in arrival order.
    pub fn received(&self) -> Vec<Received> {
        self.shared.lock().unwrap().received.clone()
    }

    /// The client messages, without the connection.
    pub fn messages(&self) -> Vec<Value> {
        self.received().into_iter().map(|r| r.message).collect()
    }

    pub fn keys(&self) -> Vec<Option<String>> {
        self.shared.lock().unwrap().keys.clone()
    }

    pub fn connections(&self) -> usize {
        self.shared.lock().unwrap().sessions.len()
    }

    /// The connections still open.
    pub fn open_connections(&self) -> Vec<usize> {
        let shared = self.shared.lock().unwrap();
        (0..shared.sessions.len())
            .filter(|&i| shared.sessions[i].is_some())
            .collect()
    }

    pub fn closes(&self) -> Vec<(usize, u16)> {
        self.shared.lock().unwrap().closes.clone()
    }

    /// The connections whose TCP connection the client ended (with or without a close frame).
    pub fn ended(&self) -> Vec<usize> {
        self.shared.lock().unwrap().ended.clone()
    }

    /// Waits until the client closed connection `connection` with a close frame of `code` and
    /// then ended its TCP connection (the fake answers a close and waits for that end, as
    /// RFC 6455 lets a server).
    pub async fn wait_ended(&self, connection: usize, code: u16) {
        self.wait_until(
            &format!("connection {connection} closed ({code}) and ended"),
            |f| {
                (f.closes().contains(&(connection, code)) && f.ended().contains(&connection))
                    .then_some(())
            },
        )
        .await;
    }

    /// Waits (with a deadline) until `done` returns something.
    pub async fn wait_until<T>(
        &self,
        what: &str,
        mut done: impl FnMut(&FakeGemini) -> Option<T>,
    ) -> T {
        let mut changes = self.changed.subscribe();
        let waited = tokio::time::timeout(EVENT_DEADLINE, async {
            loop {
                if let Some(found) = done(self) {
                    return found;
                }
                changes.changed().await.expect("the fake lives");
            }
        })
        .await;
        match waited {
            Ok(found) => found,
            Err(_) => panic!(
                "waited {EVENT_DEADLINE:?} for {what}; closes {:?}, open {:?}; received: {:#?}",
                self.closes(),
                self.open_connections(),
                self.received()
            ),
        }
    }

    /// Waits for the `n`th setup (1-based), over every connection.
    pub async fn nth_setup(&self, n: usize) -> Received {
        // Read in place: a soak's thousands of messages are not copied at every wake-up.
        self.wait_until(&format!("setup #{n}"), |fake| {
            fake.shared
                .lock()
                .unwrap()
                .received
                .iter()
                .filter(|r| r.message.get("setup").is_some())
                .nth(n - 1)
                .cloned()
        })
        .await
    }

    /// Waits for the `n`th `toolResponse` (1-based).
    pub async fn nth_tool_response(&self, n: usize) -> Received {
        self.wait_until(&format!("toolResponse #{n}"), |fake| {
            fake.received()
                .into_iter()
                .filter(|r| tool_response(&r.message).is_some())
                .nth(n - 1)
        })
        .await
    }

    /// Sends `message` (JSON, in a binary frame as the API does) on connection `connection`.
    pub async fn push_on(&self, connection: usize, message: Value) {
        let session = self.shared.lock().unwrap().sessions[connection].clone();
        let mut session = session.expect("the connection is open");
        session
            .binary(message.to_string().into_bytes())
            .await
            .expect("the connection is open");
    }

    /// Sends `message` on the newest connection still open.
    pub async fn push(&self, message: Value) {
        let newest = *self
            .open_connections()
            .last()
            .expect("a connection is open");
        self.push_on(newest, message).await;
    }

    /// The model calls tools: `(id, name, args)`, in one `toolCall`; the session is not
    /// resumable until they are answered.
    pub async fn push_calls(&self, calls: &[(&str, &str, Value)]) {
        self.push(json!({"sessionResumptionUpdate": {"resumable": false}}))
            .await;
        let calls: Vec<Value> = calls
            .iter()
            .map(|(id, name, args)| json!({"id": id, "name": name, "args": args}))
            .collect();
        self.push(json!({"toolCall": {"functionCalls": calls}}))
            .await;
    }

    /// A new resumable handle on the newest connection.
    pub async fn push_handle(&self) -> String {
        let newest = *self
            .open_connections()
            .last()
            .expect("a connection is open");
        let handle = self.new_handle(newest);
        self.push(json!({"sessionResumptionUpdate": {"newHandle": handle, "resumable": true}}))
            .await;
        handle
    }

    fn new_handle(&self, connection: usize) -> String {
        let mut shared = self.shared.lock().unwrap();
        let handle = format!("handle-{connection}-{}", shared.handles.len());
        shared.handles.push(handle.clone());
        handle
    }
}

/// A `toolResponse`, as the API's or the SDK's spelling names it.
pub fn tool_response(message: &Value) -> Option<&Value> {
    message
        .get("toolResponse")
        .or_else(|| message.get("tool_response"))
}

/// The tool names of a setup's function declarations, in order.
pub fn declared(setup: &Value) -> Vec<String> {
    setup["setup"]["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["functionDeclarations"].as_array())
        .flatten()
        .map(|d| d["name"].as_str().unwrap_or_default().to_owned())
        .collect()
}

async fn handshake(
    req: HttpRequest,
    body: web::Payload,
    fake: web::Data<FakeGemini>,
) -> actix_web::Result<HttpResponse> {
    let (response, session, stream) = actix_ws::handle(&req, body)?;
    let mut stream = stream.max_frame_size(64 << 20);
    let fake = fake.get_ref().clone();
    let connection = {
        let mut shared = fake.shared.lock().unwrap();
        shared.targets.push(req.uri().to_string());
        shared.keys.push(
            req.headers()
                .get("x-goog-api-key")
                .map(|v| v.to_str().unwrap_or_default().to_owned()),
        );
        shared.sessions.push(Some(session.clone()));
        shared.sessions.len() - 1
    };
    fake.notify();
    actix_web::rt::spawn(async move {
        let mut session = session;
        let mut setup_done = false;
        // The read loop ends when the client ends the connection; `break` is the fake closing
        // it.
        loop {
            let Some(Ok(message)) = stream.next().await else {
                fake.shared.lock().unwrap().ended.push(connection);
                break;
            };
            let text = match message {
                actix_ws::Message::Text(text) => text.to_string(),
                actix_ws::Message::Binary(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                actix_ws::Message::Close(reason) => {
                    let code = reason.as_ref().map_or(1005, |r| u16::from(r.code));
                    {
                        let mut shared = fake.shared.lock().unwrap();
                        shared.closes.push((connection, code));
                        shared.sessions[connection] = None;
                    }
                    fake.notify();
                    // The close is answered, and the connection kept open (this task's session
                    // keeps the response going) until the client ends it.
                    let _ = session.clone().close(reason).await;
                    continue;
                }
                _ => continue,
            };
            let message: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
            // The mode in force when the message is recorded decides the answer: a test that
            // changes the mode after seeing a setup never changes how that setup is answered.
            let mode = fake.mode.lock().unwrap().clone();
            fake.shared.lock().unwrap().received.push(Received {
                connection,
                message: message.clone(),
            });
            fake.notify();
            if let Some(setup) = message.get("setup") {
                if setup_done {
                    let _ = session
                        .close(Some(close(1007, "setup must be the first message only")))
                        .await;
                    break;
                }
                setup_done = true;
                let handle = setup["sessionResumption"]["handle"].as_str();
                let known = handle
                    .is_none_or(|h| fake.shared.lock().unwrap().handles.iter().any(|k| k == h));
                if !known {
                    let _ = session
                        .close(Some(close(
                            1008,
                            "session not found for the resumption handle",
                        )))
                        .await;
                    break;
                }
                match mode {
                    SetupMode::Complete => {}
                    SetupMode::Held => fake.released.acquire().await.unwrap().forget(),
                    SetupMode::Refuse(reason) => {
                        let _ = session.close(Some(close(1007, &reason))).await;
                        break;
                    }
                }
                let _ = session
                    .binary(json!({"setupComplete": {}}).to_string().into_bytes())
                    .await;
                resumption_update(&fake, connection, &mut session).await;
            } else if tool_response(&message).is_some() {
                resumption_update(&fake, connection, &mut session).await;
            }
        }
        let mut shared = fake.shared.lock().unwrap();
        shared.sessions[connection] = None;
        drop(shared);
        fake.notify();
    });
    Ok(response)
}

/// A new resumable handle.
async fn resumption_update(fake: &FakeGemini, connection: usize, session: &mut actix_ws::Session) {
    let handle = fake.new_handle(connection);
    let update = json!({"sessionResumptionUpdate": {"newHandle": handle, "resumable": true}});
    let _ = session.binary(update.to_string().into_bytes()).await;
    fake.notify();
}

fn close(code: u16, reason: &str) -> actix_ws::CloseReason {
    actix_ws::CloseReason {
        code: actix_ws::CloseCode::Other(code),
        description: Some(reason.into()),
    }
}
