//! `RealtimeSession`: the server's own websocket to one character's model session
//! (`mode = "client"`, the default): for headless use and the demo, where no app holds the
//! conversation.
//!
//! Supervised: when the connection fails or drops the actor stops, and its supervisor restarts
//! it, which reconnects after a capped exponential backoff. Every (re)connect first sends
//! `session.update` with the current tools. The protocol itself is the [`SessionCore`]'s.

use std::sync::Arc;
use std::time::Duration;

use actix::io::WriteHandler;
use actix::prelude::*;
use awc::error::WsProtocolError;
use awc::ws::{self, Frame};
use futures_util::stream::StreamExt;

use super::core::{Seen, SessionCore};
use super::realtime::Realtime;
use super::settings::SessionSettings;
use super::shell::{self, Link, Reassembly, Shell, Whole};
use super::{CloseSession, ConnectionState};
use crate::dispatch::Dispatcher;
use crate::domain::connection::ConnectionKind;
use crate::domain::tool::SharedTool;
use crate::events::EventHub;

/// First reconnect delay; doubled per failed attempt up to [`MAX_BACKOFF`].
pub(crate) const INITIAL_BACKOFF: Duration = Duration::from_millis(250);

/// Longest reconnect delay: a provider outage is retried at least twice a minute.
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(30);

pub(crate) struct RealtimeSession {
    link: Link,
    api_key: Option<String>,
    /// Failed connection attempts in a row (drives the backoff).
    attempt: u32,
    closing: bool,
}

impl RealtimeSession {
    /// Starts the supervised session for `character` with its current `tools`; its state and
    /// the calls it answers are announced on `events`.
    pub(crate) fn launch(
        character: String,
        settings: SessionSettings,
        api_key: Option<String>,
        dispatcher: Dispatcher,
        events: EventHub,
        tools: Arc<[SharedTool]>,
    ) -> Addr<Self> {
        let core = SessionCore::new(
            character,
            ConnectionKind::Client,
            Box::new(Realtime(settings.dialect)),
            settings.url.clone(),
            &settings,
            events,
            tools,
            false,
        );
        let session = RealtimeSession {
            link: Link::new(core, dispatcher),
            api_key,
            attempt: 0,
            closing: false,
        };
        Supervisor::start(|ctx: &mut Context<Self>| {
            ctx.set_mailbox_capacity(0);
            session
        })
    }

    fn connect(&mut self, ctx: &mut Context<Self>) {
        self.link.core.set_state(ConnectionState::Connecting);
        let url = self.link.core.upstream().to_owned();
        let authorization = self.api_key.as_deref().map(shell::bearer);
        ctx.spawn(
            async move { shell::connect(&url, authorization.as_deref()).await }
                .into_actor(self)
                .map(move |result, act, ctx| match result {
                    Ok(framed) => {
                        let (sink, stream) = framed.split();
                        ctx.add_stream(stream);
                        tracing::info!(character = %act.link.core.character(), "model session connected");
                        act.attempt = 0;
                        act.link.connected(sink, ctx);
                        // Nobody else talks in this conversation: the tools go at once.
                        act.link.core.sync_now();
                        shell::run_effects(act, ctx);
                    }
                    Err(error) => {
                        tracing::warn!(character = %act.link.core.character(), url = %act.link.core.upstream(), %error, "model session connection failed");
                        ctx.stop();
                    }
                }),
        );
    }

    fn on_whole(&mut self, message: Whole, ctx: &mut Context<Self>) {
        if let Whole::Text(text) = message {
            let character = self.link.core.character().to_owned();
            match self.link.core.on_upstream(&text) {
                Seen::Error { message, event_id } => {
                    tracing::warn!(%character, error = %message, event_id = ?event_id, "model session reported an error");
                }
                Seen::Unreadable(e) => {
                    tracing::warn!(%character, error = %e, "ignoring a malformed event from the model session");
                }
                Seen::Pass | Seen::Ours | Seen::Described { .. } => {}
            }
            shell::run_effects(self, ctx);
        }
    }
}

/// The wait before reconnect attempt `attempt` (1 is the first after a failure): doubled per
/// attempt from [`INITIAL_BACKOFF`], at most [`MAX_BACKOFF`].
pub(crate) fn backoff(attempt: u32) -> Duration {
    let factor = 2u32.saturating_pow(attempt.saturating_sub(1));
    INITIAL_BACKOFF.saturating_mul(factor).min(MAX_BACKOFF)
}

impl Shell for RealtimeSession {
    fn link(&mut self) -> &mut Link {
        &mut self.link
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
            self.link.core.announce();
            self.connect(ctx);
        } else {
            self.link.core.set_state(ConnectionState::Backoff);
            ctx.run_later(backoff(self.attempt), |act, ctx| act.connect(ctx));
        }
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        if self.closing {
            tracing::debug!(character = %self.link.core.character(), "model session closed");
        } else if self.link.core.state() == ConnectionState::Connected {
            tracing::warn!(character = %self.link.core.character(), "model session disconnected");
        }
        self.link.sink = None;
        self.link.fragments = Reassembly::default();
        self.link.sync_timer = None;
        // Closed for good (the character was removed or rebuilt): nothing to announce.
        if !self.closing {
            self.link.core.set_state(ConnectionState::Backoff);
        }
        self.link.disconnected();
    }
}

impl Supervised for RealtimeSession {
    fn restarting(&mut self, _: &mut Self::Context) {
        self.attempt = self.attempt.saturating_add(1);
    }
}

impl WriteHandler<WsProtocolError> for RealtimeSession {
    fn error(&mut self, err: WsProtocolError, _: &mut Self::Context) -> Running {
        tracing::warn!(character = %self.link.core.character(), error = %err, "model session write failed");
        Running::Stop
    }
}

impl StreamHandler<Result<Frame, WsProtocolError>> for RealtimeSession {
    fn handle(&mut self, frame: Result<Frame, WsProtocolError>, ctx: &mut Self::Context) {
        let frame = match frame {
            Ok(frame) => frame,
            Err(e) => {
                tracing::warn!(character = %self.link.core.character(), error = %e, "model session protocol error");
                ctx.stop();
                return;
            }
        };
        let whole = match frame {
            Frame::Text(bytes) => shell::text_of(bytes).map(|t| Some(Whole::Text(t))),
            // A broken fragmented message (past the size limit, a continuation with no first
            // frame, text that is not UTF-8) is a protocol error, like a frame over the limit:
            // drop the connection and reconnect instead of buffering what the peer sends.
            Frame::Continuation(item) => match self.link.fragments.push(item) {
                Err(error) => {
                    tracing::warn!(character = %self.link.core.character(), %error, "model session protocol error; reconnecting");
                    ctx.stop();
                    return;
                }
                whole => whole,
            },
            Frame::Ping(payload) => {
                shell::send_upstream(self, ws::Message::Pong(payload), ctx);
                Ok(None)
            }
            Frame::Close(reason) => {
                tracing::info!(character = %self.link.core.character(), reason = ?reason, "model session closed by the server");
                ctx.stop();
                Ok(None)
            }
            Frame::Binary(_) | Frame::Pong(_) => Ok(None),
        };
        match whole {
            Ok(Some(message)) => self.on_whole(message, ctx),
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(character = %self.link.core.character(), %error, "ignoring a malformed message from the model session");
            }
        }
    }

    fn finished(&mut self, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

crate::session_handlers!(RealtimeSession);

impl Handler<CloseSession> for RealtimeSession {
    type Result = ResponseFuture<()>;

    /// The reply comes when the session is gone.
    fn handle(&mut self, _: CloseSession, ctx: &mut Self::Context) -> Self::Result {
        self.closing = true;
        shell::close_upstream(self, Some(ws::CloseCode::Normal.into()), ctx);
        self.link.closed()
    }
}
