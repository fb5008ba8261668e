//! `RealtimeSession`: the websocket to one character's model session.
//!
//! Supervised: when the connection fails or drops the actor stops, and its supervisor restarts
//! it, which reconnects after a capped exponential backoff. Every (re)connect first sends
//! `session.update` with the current tools. Receiving never waits on a tool call: calls run as
//! spawned futures and answer when they finish.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use actix::io::{SinkWrite, WriteHandler};
use actix::prelude::*;
use awc::BoxedSocket;
use awc::error::WsProtocolError;
use awc::ws::{self, Codec, Frame};
use bytes::{Bytes, BytesMut};
use futures_util::stream::{SplitSink, StreamExt};
use serde::Serialize;
use serde_json::Value;
use tokio::sync::oneshot;

use super::calls::{CallLimiter, ResponseCalls};
use super::protocol::{self, FunctionCall, ServerEvent};
use super::settings::SessionSettings;
use super::sync::SyncState;
use crate::dispatch::Dispatcher;
use crate::domain::call::{ToolCall, ToolResult};
use crate::domain::registry::not_registered_text;
use crate::domain::tool::SharedTool;
use crate::events::{Caller, EventHub, ToolCallFinished};

/// First reconnect delay; doubled per failed attempt up to [`MAX_BACKOFF`].
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(250);

/// Longest reconnect delay: a provider outage is retried at least twice a minute.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Longest wait for the websocket handshake.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest server event accepted, whether it comes in one frame or in fragments:
/// `session.updated` echoes the whole configuration, tools included, which can run to megabytes
/// with many large schemas.
pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// Why a change did not reach a session whose connection ended while it waited.
const CLOSED_BEFORE_ACKNOWLEDGING: &str =
    "model session closed before acknowledging the tool update";

/// Why a change did not reach a session that did not acknowledge it within `timeout`.
fn not_acknowledged_text(timeout: Duration) -> String {
    format!(
        "model session did not acknowledge the tool update (no session.updated within {} s)",
        timeout.as_secs_f64()
    )
}

/// Push a character's current tool list into its session and wait for the acknowledgement.
/// Answers at once when the session is not connected (the list goes out on reconnect).
#[derive(Message, Debug)]
#[rtype(result = "Result<(), String>")]
pub struct SyncTools(pub Arc<[SharedTool]>);

/// The session's connection state and last sync, for `GET /api/sessions`.
#[derive(Message, Debug)]
#[rtype(result = "SessionReport")]
pub struct SessionStatus;

/// Close the connection for good (the character was removed or rebuilt).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub struct CloseSession;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ConnectionState {
    /// No session is configured.
    None,
    Connecting,
    Connected,
    /// Waiting before the next connection attempt.
    Backoff,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SyncOutcome {
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// RFC 3339, UTC.
    pub at: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SessionReport {
    pub state: ConnectionState,
    #[schema(required = true)]
    pub last_sync: Option<SyncOutcome>,
    /// Tools in the last update the session acknowledged.
    pub acknowledged_tools: usize,
}

impl SessionReport {
    /// The report of a character without a session.
    pub fn none() -> Self {
        Self {
            state: ConnectionState::None,
            last_sync: None,
            acknowledged_tools: 0,
        }
    }
}

type WsSink = SplitSink<actix_codec::Framed<BoxedSocket, Codec>, ws::Message>;
type Waiter = oneshot::Sender<Result<(), String>>;

pub struct RealtimeSession {
    character: String,
    settings: SessionSettings,
    api_key: Option<String>,
    dispatcher: Dispatcher,
    /// Where state changes and answered calls are announced.
    events: EventHub,
    /// The newest tool list; what a (re)connect sends and what calls are resolved against.
    tools: Arc<[SharedTool]>,
    state: ConnectionState,
    /// Failed connection attempts in a row (drives the backoff).
    attempt: u32,
    closing: bool,
    sink: Option<SinkWrite<ws::Message, WsSink>>,
    /// A text message arriving in continuation frames.
    partial: Option<BytesMut>,
    sync: SyncState<Waiter>,
    /// The `session.update` in flight: its event id and the tools it carries.
    in_flight: Option<(String, Arc<[SharedTool]>)>,
    /// The tools of the last acknowledged update, to recognise a late duplicate of its
    /// acknowledgement (`session.updated` carries no event id to match).
    acknowledged: Option<Arc<[SharedTool]>>,
    sync_timer: Option<SpawnHandle>,
    calls: ResponseCalls,
    limiter: CallLimiter,
    last_sync: Option<SyncOutcome>,
    acknowledged_tools: usize,
    next_event: u64,
}

impl RealtimeSession {
    /// Starts the supervised session for `character` with its current `tools`.
    pub fn launch(
        character: String,
        settings: SessionSettings,
        api_key: Option<String>,
        dispatcher: Dispatcher,
        events: EventHub,
        tools: Arc<[SharedTool]>,
    ) -> Addr<Self> {
        let limiter = CallLimiter::new(
            settings.max_tool_calls_per_window,
            settings.tool_call_window,
        );
        let session = RealtimeSession {
            character,
            settings,
            api_key,
            dispatcher,
            events,
            tools,
            state: ConnectionState::Connecting,
            attempt: 0,
            closing: false,
            sink: None,
            partial: None,
            sync: SyncState::new(),
            in_flight: None,
            acknowledged: None,
            sync_timer: None,
            calls: ResponseCalls::default(),
            limiter,
            last_sync: None,
            acknowledged_tools: 0,
            next_event: 0,
        };
        Supervisor::start(|ctx: &mut Context<Self>| {
            ctx.set_mailbox_capacity(0);
            session
        })
    }

    fn event_id(&mut self, kind: &str) -> String {
        self.next_event += 1;
        format!("rt_{kind}_{}", self.next_event)
    }

    /// The state and last sync `GET /api/sessions` reports.
    fn report(&self) -> SessionReport {
        SessionReport {
            state: self.state,
            last_sync: self.last_sync.clone(),
            acknowledged_tools: self.acknowledged_tools,
        }
    }

    /// Moves to `state`, announcing it when it is a change.
    fn set_state(&mut self, state: ConnectionState) {
        if self.state != state {
            self.state = state;
            self.events.session_state(&self.character, &self.report());
        }
    }

    fn connect(&mut self, ctx: &mut Context<Self>) {
        self.set_state(ConnectionState::Connecting);
        let client = awc::Client::builder()
            // Websockets need HTTP/1.1; TLS would otherwise offer h2 through ALPN.
            .max_http_version(awc::http::Version::HTTP_11)
            .timeout(CONNECT_TIMEOUT)
            .finish();
        let mut request = client
            .ws(self.settings.url.as_str())
            .max_frame_size(MAX_EVENT_BYTES);
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let url = self.settings.url.clone();
        ctx.spawn(
            async move { request.connect().await }
                .into_actor(self)
                .map(move |result, act, ctx| match result {
                    Ok((_, framed)) => {
                        let (sink, stream) = framed.split();
                        ctx.add_stream(stream);
                        act.sink = Some(SinkWrite::new(sink, ctx));
                        act.on_connected(ctx);
                    }
                    Err(e) => {
                        tracing::warn!(character = %act.character, %url, error = %e, "model session connection failed");
                        ctx.stop();
                    }
                }),
        );
    }

    fn on_connected(&mut self, ctx: &mut Context<Self>) {
        tracing::info!(character = %self.character, tools = self.tools.len(), "model session connected");
        self.set_state(ConnectionState::Connected);
        self.attempt = 0;
        self.limiter.reset();
        self.calls.clear();
        self.sync.connected();
        self.send_update(ctx);
    }

    /// Sends `session.update` with the current tools and arms the acknowledgement timer.
    fn send_update(&mut self, ctx: &mut Context<Self>) {
        let event_id = self.event_id("sync");
        let update = protocol::session_update_text(self.settings.dialect, &self.tools, &event_id);
        self.in_flight = Some((event_id, self.tools.clone()));
        if let Some(timer) = self.sync_timer.take() {
            ctx.cancel_future(timer);
        }
        let version = self.sync.in_flight();
        self.sync_timer = Some(ctx.run_later(self.settings.sync_timeout, move |act, ctx| {
            if act.sync.in_flight() == version {
                let error = not_acknowledged_text(act.settings.sync_timeout);
                act.settle(Err(error), ctx);
            }
        }));
        self.send_text(update, ctx);
    }

    /// Settles the update in flight and sends the next one if changes are waiting.
    fn settle(&mut self, outcome: Result<(), String>, ctx: &mut Context<Self>) {
        let settled = match outcome {
            Ok(()) => self.sync.acknowledged(),
            Err(_) => self.sync.failed(),
        };
        let Some(settled) = settled else {
            tracing::debug!(character = %self.character, "ignoring an acknowledgement with no update in flight");
            return;
        };
        if let Some(timer) = self.sync_timer.take() {
            ctx.cancel_future(timer);
        }
        let sent = self.in_flight.take().map(|(_, tools)| tools);
        if outcome.is_ok() {
            self.acknowledged_tools = sent.as_ref().map_or(0, |t| t.len());
            self.acknowledged = sent;
        } else if let Err(error) = &outcome {
            tracing::warn!(character = %self.character, %error, "tool update not acknowledged");
        }
        self.last_sync = Some(SyncOutcome {
            ok: outcome.is_ok(),
            error: outcome.clone().err(),
            at: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
        });
        self.events.session_state(&self.character, &self.report());
        for waiter in settled.waiters {
            let _ = waiter.send(outcome.clone());
        }
        if settled.send_next.is_some() {
            self.send_update(ctx);
        }
    }

    fn send(&mut self, event: &Value, ctx: &mut Context<Self>) {
        self.send_text(event.to_string(), ctx);
    }

    fn send_text(&mut self, event: String, ctx: &mut Context<Self>) {
        let Some(sink) = &mut self.sink else {
            return;
        };
        if sink.write(ws::Message::Text(event.into())).is_err() {
            tracing::warn!(character = %self.character, "model session closed while sending");
            ctx.stop();
        }
    }

    /// Whether an acknowledgement echoing `echoed` repeats the previous update's rather than
    /// answering the one in flight: it matches the previous list and not the one in flight.
    fn is_stale_acknowledgement(&self, echoed: Option<&[String]>) -> bool {
        let (Some(echoed), Some((_, sent)), Some(previous)) =
            (echoed, &self.in_flight, &self.acknowledged)
        else {
            return false;
        };
        let same = |tools: &[SharedTool]| {
            tools.len() == echoed.len() && tools.iter().zip(echoed).all(|(t, n)| t.name == *n)
        };
        same(previous) && !same(sent)
    }

    fn on_text(&mut self, text: &[u8], ctx: &mut Context<Self>) {
        let text = String::from_utf8_lossy(text);
        match protocol::parse_server_event(&text) {
            Ok(ServerEvent::SessionUpdated { tools }) => {
                if self.is_stale_acknowledgement(tools.as_deref()) {
                    tracing::debug!(character = %self.character, "ignoring a repeated acknowledgement of the previous update");
                } else {
                    self.settle(Ok(()), ctx);
                }
            }
            Ok(ServerEvent::Error { message, event_id }) => {
                let ours = match (&self.in_flight, &event_id) {
                    (Some((sent, _)), Some(id)) => sent == id,
                    (Some(_), None) => true,
                    (None, _) => false,
                };
                if ours {
                    self.settle(
                        Err(format!("model session refused the tool update: {message}")),
                        ctx,
                    );
                } else {
                    tracing::warn!(character = %self.character, error = %message, event_id = ?event_id, "model session reported an error");
                }
            }
            Ok(ServerEvent::FunctionCall(call)) => self.start_call(call, ctx),
            Ok(ServerEvent::ResponseDone { response_id, calls }) => {
                for call in calls {
                    self.start_call(call, ctx);
                }
                if let Some(response_id) = response_id
                    && self.calls.done(&response_id)
                {
                    self.request_response(ctx);
                }
            }
            Ok(ServerEvent::Ignored) => {}
            Err(e) => {
                tracing::warn!(character = %self.character, error = %e, "ignoring a malformed event from the model session");
            }
        }
    }

    /// Runs one function call of the model, without pausing the receive loop.
    fn start_call(&mut self, call: FunctionCall, ctx: &mut Context<Self>) {
        if !self
            .calls
            .started(call.response_id.as_deref(), &call.call_id)
        {
            return;
        }
        let response_id = call.response_id;
        let started = Instant::now();
        let tool_call = ToolCall::from_raw(call.call_id, call.name, call.arguments);
        if !self.limiter.admit(Instant::now()) {
            let error = format!(
                "tool call limit reached: more than {} calls within {} s; the call was not run",
                self.limiter.max(),
                self.limiter.window().as_secs_f64()
            );
            tracing::warn!(character = %self.character, tool = %tool_call.name, "runaway guard refused a tool call");
            let result = tool_call.error(error);
            self.answer(response_id, result, None, started, ctx);
            return;
        }
        let Some(tool) = self
            .tools
            .iter()
            .find(|t| t.name == tool_call.name)
            .cloned()
        else {
            let available = self.tools.iter().map(|t| t.name.as_str());
            let error = not_registered_text(&tool_call.name, None, available);
            let result = tool_call.error(error);
            self.answer(response_id, result, None, started, ctx);
            return;
        };
        let dispatcher = self.dispatcher.clone();
        ctx.spawn(
            async move {
                let result = dispatcher.dispatch(&tool, tool_call).await;
                (tool, result)
            }
            .into_actor(self)
            .map(move |(tool, result), act, ctx| {
                act.answer(response_id, result, Some(&tool.source), started, ctx)
            }),
        );
    }

    /// Answers a call: its output, then (when the model takes images and the turn has room)
    /// one user message with its images; images that cannot go are named in the output. The
    /// call is announced on the event stream (`source` is `None` for a tool the character does
    /// not have).
    fn answer(
        &mut self,
        response_id: Option<String>,
        mut result: ToolResult,
        source: Option<&str>,
        started: Instant,
        ctx: &mut Context<Self>,
    ) {
        self.events.tool_call(&ToolCallFinished {
            role: &self.character,
            tool: &result.name,
            source,
            call_id: &result.call_id,
            caller: Caller::Model,
            duration_ms: started.elapsed().as_secs_f64() * 1000.0,
            is_error: result.is_error,
        });
        let warning = if self.settings.dialect.takes_images() {
            self.calls
                .image_budget(response_id.as_deref())
                .take(&mut result.images)
        } else {
            protocol::images_not_taken(self.settings.dialect, &mut result.images)
        };
        result.add_image_warnings(warning.into_iter().collect());
        let event_id = self.event_id("call");
        let event =
            protocol::function_call_output(&result.call_id, &result.model_text(), &event_id);
        self.send(&event, ctx);
        if !result.images.is_empty() {
            let event_id = self.event_id("images");
            let event = protocol::image_message(&result, &event_id);
            self.send_text(event, ctx);
        }
        if self.calls.answered(response_id.as_deref(), &result.call_id) {
            self.request_response(ctx);
        }
    }

    fn request_response(&mut self, ctx: &mut Context<Self>) {
        let event_id = self.event_id("response");
        self.send(&protocol::response_create(&event_id), ctx);
    }

    fn backoff(&self) -> Duration {
        let factor = 2u32.saturating_pow(self.attempt.saturating_sub(1));
        INITIAL_BACKOFF.saturating_mul(factor).min(MAX_BACKOFF)
    }
}

impl Actor for RealtimeSession {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if self.closing {
            return;
        }
        if self.attempt == 0 {
            // A new session starts out connecting: say so, as every later state is said.
            self.events.session_state(&self.character, &self.report());
            self.connect(ctx);
        } else {
            self.set_state(ConnectionState::Backoff);
            ctx.run_later(self.backoff(), |act, ctx| act.connect(ctx));
        }
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        if self.closing {
            tracing::debug!(character = %self.character, "model session closed");
        } else if self.state == ConnectionState::Connected {
            tracing::warn!(character = %self.character, "model session disconnected");
        }
        self.sink = None;
        self.partial = None;
        self.in_flight = None;
        self.sync_timer = None;
        if self.closing {
            // Closed for good (the character was removed or rebuilt): nothing to announce.
            self.state = ConnectionState::Backoff;
        } else {
            self.set_state(ConnectionState::Backoff);
        }
        for waiter in self.sync.disconnected() {
            let _ = waiter.send(Err(CLOSED_BEFORE_ACKNOWLEDGING.to_owned()));
        }
    }
}

impl Supervised for RealtimeSession {
    fn restarting(&mut self, _: &mut Self::Context) {
        self.attempt = self.attempt.saturating_add(1);
    }
}

impl WriteHandler<WsProtocolError> for RealtimeSession {
    fn error(&mut self, err: WsProtocolError, _: &mut Self::Context) -> Running {
        tracing::warn!(character = %self.character, error = %err, "model session write failed");
        Running::Stop
    }
}

impl StreamHandler<Result<Frame, WsProtocolError>> for RealtimeSession {
    fn handle(&mut self, frame: Result<Frame, WsProtocolError>, ctx: &mut Self::Context) {
        let frame = match frame {
            Ok(frame) => frame,
            Err(e) => {
                tracing::warn!(character = %self.character, error = %e, "model session protocol error");
                ctx.stop();
                return;
            }
        };
        match frame {
            Frame::Text(text) => self.on_text(&text, ctx),
            Frame::Continuation(item) => self.on_continuation(item, ctx),
            Frame::Ping(payload) => {
                if let Some(sink) = &mut self.sink {
                    let _ = sink.write(ws::Message::Pong(payload));
                }
            }
            Frame::Close(reason) => {
                tracing::info!(character = %self.character, reason = ?reason, "model session closed by the server");
                ctx.stop();
            }
            Frame::Binary(_) | Frame::Pong(_) => {}
        }
    }

    fn finished(&mut self, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

impl RealtimeSession {
    fn on_continuation(&mut self, item: actix_http::ws::Item, ctx: &mut Context<Self>) {
        use actix_http::ws::Item;

        let (part, last) = match item {
            Item::FirstText(part) => {
                self.partial = Some(BytesMut::new());
                (part, false)
            }
            Item::FirstBinary(_) => {
                self.partial = None;
                return;
            }
            Item::Continue(part) => (part, false),
            Item::Last(part) => (part, true),
        };
        let Some(buffer) = &mut self.partial else {
            return;
        };
        // The whole message is bounded like a single frame: a peer that keeps sending
        // fragments is breaking the protocol, not handing us memory to keep.
        if buffer.len() + part.len() > MAX_EVENT_BYTES {
            tracing::warn!(character = %self.character, limit = MAX_EVENT_BYTES, "model session sent a fragmented message over the size limit; reconnecting");
            self.partial = None;
            ctx.stop();
            return;
        }
        buffer.extend_from_slice(&part);
        if last && let Some(buffer) = self.partial.take() {
            let text: Bytes = buffer.freeze();
            self.on_text(&text, ctx);
        }
    }
}

impl Handler<SyncTools> for RealtimeSession {
    type Result = ResponseFuture<Result<(), String>>;

    fn handle(&mut self, SyncTools(tools): SyncTools, ctx: &mut Self::Context) -> Self::Result {
        self.tools = tools;
        if self.state != ConnectionState::Connected {
            // Not connected: the list goes out first thing on reconnect.
            return Box::pin(async { Ok(()) });
        }
        let (tx, rx) = oneshot::channel();
        if self.sync.changed(Some(tx)).is_some() {
            self.send_update(ctx);
        }
        let timeout = self.settings.sync_timeout;
        Box::pin(async move {
            match tokio::time::timeout(timeout, rx).await {
                Ok(Ok(outcome)) => outcome,
                Ok(Err(_)) => Err(CLOSED_BEFORE_ACKNOWLEDGING.to_owned()),
                Err(_) => Err(not_acknowledged_text(timeout)),
            }
        })
    }
}

impl Handler<SessionStatus> for RealtimeSession {
    type Result = MessageResult<SessionStatus>;

    fn handle(&mut self, _: SessionStatus, _: &mut Self::Context) -> Self::Result {
        MessageResult(self.report())
    }
}

impl Handler<CloseSession> for RealtimeSession {
    type Result = ();

    fn handle(&mut self, _: CloseSession, ctx: &mut Self::Context) {
        self.closing = true;
        if let Some(sink) = &mut self.sink {
            let _ = sink.write(ws::Message::Close(Some(ws::CloseCode::Normal.into())));
            sink.close();
        }
        ctx.stop();
    }
}
