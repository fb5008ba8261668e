//! What the session actors share around their [`SessionCore`]: the model's websockets
//! (connecting; reading, writing and closing them through [`Wires`]; reassembling fragmented
//! messages), carrying out the core's effects
//! (sending, the sync timer, running calls through the dispatcher and cancelling them), and the
//! handlers of `SyncTools` and `SessionStatus` ([`session_handlers!`](crate::session_handlers)),
//! the same for every kind of connection.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use actix::io::WriteHandler;
use actix::prelude::*;
use actix_http::ws::{CloseReason, Item, ProtocolError};
use awc::ws;
use bytes::{Bytes, BytesMut};
use bytestring::ByteString;
use tokio::sync::oneshot;

use super::CharacterTools;
use super::core::{Effect, Run, SessionCore, SyncError, Ticket};
pub(crate) use super::wire::CLOSE_GRACE;
use super::wire::{FromUpstream, HoldsWires, UpstreamSocket, Wires, Written};
use crate::dispatch::{CallCanceller, CallProgress, Dispatcher, Listed, Where};
use crate::domain::tool::SharedTool;

/// Longest wait for a connection to a model provider (TCP, TLS and, for a websocket, its
/// handshake): a provider across the internet answers well under a second; ten leaves room for a
/// slow network, and a local model server accepts at once. Text chat's upstream shares it.
/// A plugin's callback has its own, shorter bound (`dispatch::CALLBACK_CONNECT_TIMEOUT`): it is on
/// loopback.
pub(crate) const MODEL_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest event accepted, whole or reassembled from fragments: `session.updated` echoes the
/// whole configuration, tools included, which can run to megabytes with many large schemas.
pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// Bytes of messages waiting to go to the model, beyond what the socket buffers hold: the same
/// two minutes of audio as an app may fall behind. A model that stops reading for that long is
/// dropped rather than buffered without bound.
pub const MAX_UPSTREAM_QUEUE_BYTES: usize = 8 * 1024 * 1024;

/// Why a session whose model stopped reading was ended.
pub(crate) fn model_not_reading_reason() -> String {
    format!("model is not reading: more than {MAX_UPSTREAM_QUEUE_BYTES} bytes were waiting for it")
}

/// Opens a websocket to `url` (HTTP/1.1, [`MODEL_CONNECT_TIMEOUT`], frames up to
/// [`MAX_EVENT_BYTES`]) with `authorization` as its `Authorization` header.
pub(crate) async fn connect(
    url: &str,
    authorization: Option<&str>,
) -> Result<UpstreamSocket, String> {
    let header = authorization.map(|value| (awc::http::header::AUTHORIZATION.as_str(), value));
    connect_with(url, header).await
}

/// Opens a websocket to `url` as [`connect`] does, with `header` (name, value) on the request.
pub(crate) async fn connect_with(
    url: &str,
    header: Option<(&str, &str)>,
) -> Result<UpstreamSocket, String> {
    // Events are small writes that must not wait for the model's acknowledgement of the one
    // before (Nagle's algorithm): each connection is made with TCP_NODELAY.
    let tcp = actix_service::ServiceExt::map(
        actix_tls::connect::Connector::default().service(),
        |connection: actix_tls::connect::Connection<
            awc::http::Uri,
            actix_web::rt::net::TcpStream,
        >| {
            let _ = connection.io_ref().set_nodelay(true);
            connection
        },
    );
    let client = awc::Client::builder()
        .connector(awc::Connector::new().connector(tcp))
        // Websockets need HTTP/1.1; TLS would otherwise offer h2 through ALPN.
        .max_http_version(awc::http::Version::HTTP_11)
        .timeout(MODEL_CONNECT_TIMEOUT)
        .finish();
    let mut request = client.ws(url).max_frame_size(MAX_EVENT_BYTES);
    if let Some((name, value)) = header {
        request = request.header(name, value);
    }
    match request.connect().await {
        Ok((_, framed)) => Ok(framed),
        Err(e) => Err(e.to_string()),
    }
}

/// `Bearer <key>`.
pub(crate) fn bearer(key: &str) -> String {
    format!("Bearer {key}")
}

/// What every session actor holds: its [`SessionCore`] (which also keeps the connection's state
/// and report) and its upstream websocket.
pub(crate) struct Link {
    pub core: SessionCore,
    /// Its connections to the model: the one in use, and any being opened or closed.
    pub wires: Wires,
    /// A message from upstream arriving in fragments.
    pub fragments: Reassembly,
    /// The sync timer now armed, if any.
    pub sync_timer: Option<SpawnHandle>,
    pub dispatcher: Dispatcher,
    /// The calls running now, each stoppable, and listed for progress reports while it runs.
    running: HashMap<Ticket, (CallCanceller, Listed)>,
    /// Who asked it to close ([`super::CloseSession`]): they hear when the actor is gone.
    close_waiters: Vec<oneshot::Sender<()>>,
}

impl Link {
    pub(crate) fn new(core: SessionCore, dispatcher: Dispatcher) -> Self {
        Self {
            core,
            wires: Wires::default(),
            fragments: Reassembly::default(),
            sync_timer: None,
            dispatcher,
            running: HashMap::new(),
            close_waiters: Vec::new(),
        }
    }

    /// The reply to a [`super::CloseSession`]: it settles once the actor is gone (its senders
    /// are dropped with it), so whoever asked knows the close frames went out, or were given
    /// [`CLOSE_GRACE`].
    pub(crate) fn closed(&mut self) -> ResponseFuture<()> {
        let (tx, rx) = oneshot::channel();
        self.close_waiters.push(tx);
        Box::pin(async move {
            let _ = rx.await;
        })
    }

    /// The connection `socket` is up, and the one in use (see [`SessionCore::connected`]: what
    /// goes first is the actor's to say). Returns its number.
    pub(crate) fn connected<A: Shell>(
        &mut self,
        socket: UpstreamSocket,
        ctx: &mut Context<A>,
    ) -> u64 {
        let id = self.wires.number();
        self.wires.open(id, socket, ctx);
        self.wires.use_connection(id);
        self.fragments = Reassembly::default();
        self.core.connected();
        id
    }

    /// The actor stopped (or is starting again): its context dropped its connections, timers
    /// and calls. The calls are stopped, and the core hears that the connection is gone.
    pub(crate) fn gone(&mut self) {
        self.wires.clear();
        self.fragments = Reassembly::default();
        self.sync_timer = None;
        // Nobody is left to tell of their results: each is stopped now (a callback's
        // connection closes).
        for (_, (canceller, _)) in self.running.drain() {
            canceller.cancel();
        }
        self.core.disconnected();
    }
}

/// An actor that holds a [`Link`].
pub(crate) trait Shell:
    Actor<Context = Context<Self>>
    + Handler<CallProgress>
    + StreamHandler<FromUpstream>
    + WriteHandler<ProtocolError>
{
    fn link(&mut self) -> &mut Link;

    /// A frame (or the end) of one of its connections that is not retired: the one in use, or
    /// one being opened ([`wire::Wires::sort`](super::wire::Wires::sort) has kept the rest).
    fn upstream(&mut self, item: FromUpstream, ctx: &mut Context<Self>);

    /// Opens a new connection that resumes the session with `setup` (see
    /// [`Effect::Reconnect`]). Only an actor of a protocol whose tools need a new connection is
    /// asked to.
    fn reconnect(&mut self, setup: String, ctx: &mut Context<Self>) {
        let _ = (setup, ctx);
        tracing::error!(character = %self.link().core.character(), "a session that cannot reconnect was asked to");
    }

    /// A call finished and was answered (a moment that may let a waiting connection open).
    fn call_finished(&mut self, ctx: &mut Context<Self>) {
        let _ = ctx;
    }

    /// More than [`MAX_UPSTREAM_QUEUE_BYTES`] wait for the model: it stopped reading. The
    /// session ends (a client reconnects).
    fn model_not_reading(&mut self, ctx: &mut Context<Self>) {
        tracing::warn!(character = %self.link().core.character(), limit = MAX_UPSTREAM_QUEUE_BYTES, "dropping a model session that stopped reading");
        ctx.stop();
    }
}

impl<A: Shell> HoldsWires for A {
    fn wires(&mut self) -> &mut Wires {
        &mut self.link().wires
    }
}

/// What comes from the model's connections: the actor's, unless it is of a retired connection
/// (whose end releases it).
pub(crate) fn from_upstream<A: Shell>(act: &mut A, item: FromUpstream, ctx: &mut Context<A>) {
    if let Some(item) = act.link().wires.sort(item, ctx) {
        act.upstream(item, ctx);
    }
}

/// Carries out every effect the core asked for.
pub(crate) fn run_effects<A: Shell>(act: &mut A, ctx: &mut Context<A>) {
    for effect in act.link().core.take_effects() {
        match effect {
            Effect::Upstream(text) => send_upstream(act, ws::Message::Text(text.into()), ctx),
            Effect::ArmSyncTimer(version) => {
                if let Some(timer) = act.link().sync_timer.take() {
                    ctx.cancel_future(timer);
                }
                let timeout = act.link().core.sync_timeout();
                let timer = ctx.run_later(timeout, move |act, ctx| {
                    act.link().sync_timer = None;
                    act.link().core.sync_timer_fired(version);
                    run_effects(act, ctx);
                });
                act.link().sync_timer = Some(timer);
            }
            Effect::Run(run) => {
                // The receive loop never waits on a call: it runs beside it and answers later.
                let Run {
                    call,
                    tool,
                    ticket,
                    admission,
                } = *run;
                let place = Where {
                    role: act.link().core.character().to_owned(),
                    tool: tool.name.clone(),
                    source: tool.source.clone(),
                    session: Some(ctx.address().recipient()),
                };
                let link = act.link();
                let listed = link.dispatcher.board().list(&call.call_id, place);
                let dispatcher = link.dispatcher.clone();
                // A call that waits for approval runs (as it was held) once the person approves.
                let (canceller, running) =
                    Dispatcher::cancellable(admission.run(call, move |call| async move {
                        dispatcher.dispatch(&tool, call).await
                    }));
                link.running.insert(ticket, (canceller, listed));
                ctx.spawn(running.into_actor(act).map(move |result, act, ctx| {
                    act.link().running.remove(&ticket);
                    // A cancelled call has no result: the core answered it when it cancelled it.
                    if let Some(result) = result {
                        act.link().core.answered(ticket, result);
                        run_effects(act, ctx);
                        act.call_finished(ctx);
                    }
                }));
            }
            Effect::Cancel(ticket) => {
                if let Some((canceller, _)) = act.link().running.remove(&ticket) {
                    canceller.cancel();
                }
            }
            Effect::Reconnect(setup) => act.reconnect(setup, ctx),
            Effect::WakeAfter(after, wake) => {
                ctx.run_later(after, move |act, ctx| {
                    act.link().core.woke(wake);
                    run_effects(act, ctx);
                });
            }
        }
    }
}

/// Writes one message on the connection in use; a closed one stops the actor.
pub(crate) fn send_upstream<A: Shell>(act: &mut A, message: ws::Message, ctx: &mut Context<A>) {
    let link = act.link();
    match link.wires.write(message) {
        Written::Nowhere => {}
        Written::Closed => {
            tracing::warn!(character = %link.core.character(), "model session closed while sending");
            ctx.stop();
        }
        // The model is behind when more than the limit was already waiting for it: a single
        // event larger than the limit (events may be up to `MAX_EVENT_BYTES`) still goes to a
        // model that keeps up.
        Written::Queued { waiting } => {
            if waiting > MAX_UPSTREAM_QUEUE_BYTES {
                act.model_not_reading(ctx);
            }
        }
    }
}

/// Sends the connection in use a close frame with `reason`; the actor stops when the model
/// answers it and ends the connection (its stream finishes), or after [`CLOSE_GRACE`]. Stopping
/// at once would drop the frame unsent, and a client that shuts its side down right after the
/// frame leaves the server reading an end of stream instead of the close (RFC 6455 §7.1.1: the
/// server closes the TCP connection).
pub(crate) fn close_upstream<A: Shell>(
    act: &mut A,
    reason: Option<CloseReason>,
    ctx: &mut Context<A>,
) {
    let written = act.link().wires.write(ws::Message::Close(reason));
    if matches!(written, Written::Queued { .. }) {
        ctx.run_later(CLOSE_GRACE, |_, ctx| ctx.stop());
    } else {
        ctx.stop();
    }
}

/// How much longer than its sync timeout a tool list's sender waits for the session to settle
/// it (the session's own timer reports the precise reason first): a quarter of a second here,
/// half a second in the manager that waits for this, within the router's second for the
/// manager (`SYNC_REPLY_MARGIN`).
pub(crate) const SYNC_FALLBACK_MARGIN: Duration = Duration::from_millis(250);

/// The character's tools as a session is handed them: with its snapshot and budget (the
/// manager's [`OfferTools`](super::OfferTools)), or a bare list ([`SyncTools`](super::SyncTools)).
pub(crate) enum Handed {
    Character(CharacterTools),
    List(Arc<[SharedTool]>),
}

/// Hands the character's new tools to the core; the future settles when the session
/// acknowledged them (or at once when it is not connected, or its set did not change).
pub(crate) fn sync_tools<A: Shell>(
    act: &mut A,
    tools: Handed,
    ctx: &mut Context<A>,
) -> ResponseFuture<Result<(), SyncError>> {
    let (tx, rx) = oneshot::channel();
    let core = &mut act.link().core;
    let waiter = match tools {
        Handed::Character(tools) => core.tools_changed(tools, Some(tx)),
        Handed::List(list) => core.list_changed(list, Some(tx)),
    };
    if let Some(waiter) = waiter {
        let _ = waiter.send(Ok(()));
    }
    run_effects(act, ctx);
    let timeout = act.link().core.sync_timeout();
    Box::pin(async move {
        // The core's own sync timer settles the update with the precise reason; this bound
        // only catches a session that never settles it.
        match tokio::time::timeout(timeout + SYNC_FALLBACK_MARGIN, rx).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(_)) => Err(SyncError::Closed),
            Err(_) => Err(SyncError::NotAcknowledged(timeout)),
        }
    })
}

/// The handlers of the model's frames (tagged by connection, sorted by the [`Link`]'s
/// [`Wires`]), [`SyncTools`](super::SyncTools) (the new list, to the core, answered when
/// the session acknowledged it) and [`SessionStatus`](super::SessionStatus) (the core's report),
/// the same for every actor that holds a [`Link`] (implements [`Shell`]). A macro, since actix's
/// `Handler` cannot be implemented once for every such actor.
#[macro_export]
#[doc(hidden)]
macro_rules! session_handlers {
    ($actor:ty) => {
        impl ::actix::StreamHandler<$crate::session::wire::FromUpstream> for $actor {
            fn handle(
                &mut self,
                item: $crate::session::wire::FromUpstream,
                ctx: &mut Self::Context,
            ) {
                $crate::session::shell::from_upstream(self, item, ctx);
            }

            /// Each connection's end comes as an item ([`FromUpstream::Ended`]); the actor
            /// decides what it means.
            fn finished(&mut self, _: &mut Self::Context) {}
        }

        impl ::actix::Handler<$crate::session::SyncTools> for $actor {
            type Result = ::actix::ResponseFuture<Result<(), $crate::session::SyncError>>;

            fn handle(
                &mut self,
                $crate::session::SyncTools(tools): $crate::session::SyncTools,
                ctx: &mut Self::Context,
            ) -> Self::Result {
                let tools = $crate::session::shell::Handed::List(tools);
                $crate::session::shell::sync_tools(self, tools, ctx)
            }
        }

        impl ::actix::Handler<$crate::session::OfferTools> for $actor {
            type Result = ::actix::ResponseFuture<Result<(), $crate::session::SyncError>>;

            fn handle(
                &mut self,
                $crate::session::OfferTools(tools): $crate::session::OfferTools,
                ctx: &mut Self::Context,
            ) -> Self::Result {
                let tools = $crate::session::shell::Handed::Character(tools);
                $crate::session::shell::sync_tools(self, tools, ctx)
            }
        }

        impl ::actix::Handler<$crate::dispatch::CallProgress> for $actor {
            type Result = Option<String>;

            fn handle(
                &mut self,
                progress: $crate::dispatch::CallProgress,
                ctx: &mut Self::Context,
            ) -> Self::Result {
                let link = $crate::session::shell::Shell::link(self);
                let tool = link
                    .core
                    .progress(&progress.call_id, &progress.message, progress.speak);
                $crate::session::shell::run_effects(self, ctx);
                tool
            }
        }

        impl ::actix::Handler<$crate::session::AddContext> for $actor {
            type Result = Result<(), String>;

            fn handle(
                &mut self,
                context: $crate::session::AddContext,
                ctx: &mut Self::Context,
            ) -> Self::Result {
                let link = $crate::session::shell::Shell::link(self);
                let added = link.core.add_context(&context.text, context.respond);
                $crate::session::shell::run_effects(self, ctx);
                added
            }
        }

        impl ::actix::Handler<$crate::session::SessionStatus> for $actor {
            type Result = ::actix::MessageResult<$crate::session::SessionStatus>;

            fn handle(
                &mut self,
                _: $crate::session::SessionStatus,
                _: &mut Self::Context,
            ) -> Self::Result {
                ::actix::MessageResult($crate::session::shell::Shell::link(self).core.report())
            }
        }
    };
}

/// One whole message, after reassembly.
#[derive(Debug)]
pub(crate) enum Whole {
    Text(ByteString),
    Binary(Bytes),
}

/// Reassembles messages sent in continuation frames, up to [`MAX_EVENT_BYTES`] in all.
#[derive(Debug, Default)]
pub(crate) struct Reassembly {
    partial: Option<(bool, BytesMut)>,
}

impl Reassembly {
    /// Takes one fragment; returns the message it completes, if it does.
    pub(crate) fn push(&mut self, item: Item) -> Result<Option<Whole>, String> {
        let (part, last) = match item {
            Item::FirstText(part) => {
                self.partial = Some((true, BytesMut::new()));
                (part, false)
            }
            Item::FirstBinary(part) => {
                self.partial = Some((false, BytesMut::new()));
                (part, false)
            }
            Item::Continue(part) => (part, false),
            Item::Last(part) => (part, true),
        };
        let Some((is_text, buffer)) = &mut self.partial else {
            return Err("a continuation frame without a first frame".into());
        };
        if buffer.len() + part.len() > MAX_EVENT_BYTES {
            self.partial = None;
            return Err(format!(
                "a fragmented message is larger than {MAX_EVENT_BYTES} bytes"
            ));
        }
        buffer.extend_from_slice(&part);
        if !last {
            return Ok(None);
        }
        let is_text = *is_text;
        let (_, buffer) = self.partial.take().expect("a message is being reassembled");
        let bytes = buffer.freeze();
        if is_text {
            ByteString::try_from(bytes)
                .map(|t| Some(Whole::Text(t)))
                .map_err(|_| "a text message is not valid UTF-8".into())
        } else {
            Ok(Some(Whole::Binary(bytes)))
        }
    }
}

/// A text frame's payload as text, if it is valid UTF-8.
pub(crate) fn text_of(bytes: Bytes) -> Result<ByteString, String> {
    ByteString::try_from(bytes).map_err(|_| "a text message is not valid UTF-8".into())
}
