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

use super::core::{SessionCore, Transport, rfc3339_now};
use super::settings::SessionSettings;
use super::shell::{self, Reassembly, Shell, UpstreamSink, Whole};
use super::{CloseSession, ConnectionKind, ConnectionState, SessionStatus, SyncTools};
use crate::dispatch::Dispatcher;
use crate::domain::tool::SharedTool;

/// First reconnect delay; doubled per failed attempt up to [`MAX_BACKOFF`].
pub const INITIAL_BACKOFF: Duration = Duration::from_millis(250);

/// Longest reconnect delay: a provider outage is retried at least twice a minute.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

pub struct RealtimeSession {
    core: SessionCore,
    url: String,
    api_key: Option<String>,
    dispatcher: Dispatcher,
    state: ConnectionState,
    /// When the current connection was made (or the first attempt, before that).
    since: String,
    /// Failed connection attempts in a row (drives the backoff).
    attempt: u32,
    closing: bool,
    sink: Option<UpstreamSink>,
    fragments: Reassembly,
    sync_timer: Option<SpawnHandle>,
}

impl RealtimeSession {
    /// Starts the supervised session for `character` with its current `tools`.
    pub fn launch(
        character: String,
        settings: SessionSettings,
        api_key: Option<String>,
        dispatcher: Dispatcher,
        tools: Arc<[SharedTool]>,
    ) -> Addr<Self> {
        let session = RealtimeSession {
            core: SessionCore::new(character, Transport::Client, &settings, tools),
            url: settings.url,
            api_key,
            dispatcher,
            state: ConnectionState::Connecting,
            since: rfc3339_now(),
            attempt: 0,
            closing: false,
            sink: None,
            fragments: Reassembly::default(),
            sync_timer: None,
        };
        Supervisor::start(|ctx: &mut Context<Self>| {
            ctx.set_mailbox_capacity(0);
            session
        })
    }

    fn connect(&mut self, ctx: &mut Context<Self>) {
        self.state = ConnectionState::Connecting;
        let url = self.url.clone();
        let authorization = self.api_key.as_deref().map(shell::bearer);
        ctx.spawn(
            async move { shell::connect(&url, authorization.as_deref()).await }
                .into_actor(self)
                .map(move |result, act, ctx| match result {
                    Ok(framed) => {
                        let (sink, stream) = framed.split();
                        ctx.add_stream(stream);
                        act.sink = Some(actix::io::SinkWrite::new(sink, ctx));
                        tracing::info!(character = %act.core.character(), "model session connected");
                        act.state = ConnectionState::Connected;
                        act.since = rfc3339_now();
                        act.attempt = 0;
                        act.core.connected(None);
                        shell::run_effects(act, ctx);
                    }
                    Err(error) => {
                        tracing::warn!(character = %act.core.character(), url = %act.url, %error, "model session connection failed");
                        ctx.stop();
                    }
                }),
        );
    }

    fn on_whole(&mut self, message: Whole, ctx: &mut Context<Self>) {
        if let Whole::Text(text) = message {
            self.core.from_upstream(&text);
            shell::run_effects(self, ctx);
        }
    }

    fn backoff(&self) -> Duration {
        let factor = 2u32.saturating_pow(self.attempt.saturating_sub(1));
        INITIAL_BACKOFF.saturating_mul(factor).min(MAX_BACKOFF)
    }
}

impl Shell for RealtimeSession {
    fn core(&mut self) -> &mut SessionCore {
        &mut self.core
    }

    fn upstream(&mut self) -> Option<&mut UpstreamSink> {
        self.sink.as_mut()
    }

    fn dispatcher(&self) -> Dispatcher {
        self.dispatcher.clone()
    }

    fn sync_timer(&mut self) -> &mut Option<SpawnHandle> {
        &mut self.sync_timer
    }
}

impl Actor for RealtimeSession {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if self.closing {
            return;
        }
        if self.attempt == 0 {
            self.connect(ctx);
        } else {
            self.state = ConnectionState::Backoff;
            ctx.run_later(self.backoff(), |act, ctx| act.connect(ctx));
        }
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        if self.closing {
            tracing::debug!(character = %self.core.character(), "model session closed");
        } else if self.state == ConnectionState::Connected {
            tracing::warn!(character = %self.core.character(), "model session disconnected");
        }
        self.sink = None;
        self.fragments = Reassembly::default();
        self.sync_timer = None;
        self.state = ConnectionState::Backoff;
        self.core.disconnected();
    }
}

impl Supervised for RealtimeSession {
    fn restarting(&mut self, _: &mut Self::Context) {
        self.attempt = self.attempt.saturating_add(1);
    }
}

impl WriteHandler<WsProtocolError> for RealtimeSession {
    fn error(&mut self, err: WsProtocolError, _: &mut Self::Context) -> Running {
        tracing::warn!(character = %self.core.character(), error = %err, "model session write failed");
        Running::Stop
    }
}

impl StreamHandler<Result<Frame, WsProtocolError>> for RealtimeSession {
    fn handle(&mut self, frame: Result<Frame, WsProtocolError>, ctx: &mut Self::Context) {
        let frame = match frame {
            Ok(frame) => frame,
            Err(e) => {
                tracing::warn!(character = %self.core.character(), error = %e, "model session protocol error");
                ctx.stop();
                return;
            }
        };
        let whole = match frame {
            Frame::Text(bytes) => shell::text_of(bytes).map(|t| Some(Whole::Text(t))),
            Frame::Continuation(item) => self.fragments.push(item),
            Frame::Ping(payload) => {
                shell::send_upstream(self, ws::Message::Pong(payload), ctx);
                Ok(None)
            }
            Frame::Close(reason) => {
                tracing::info!(character = %self.core.character(), reason = ?reason, "model session closed by the server");
                ctx.stop();
                Ok(None)
            }
            Frame::Binary(_) | Frame::Pong(_) => Ok(None),
        };
        match whole {
            Ok(Some(message)) => self.on_whole(message, ctx),
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(character = %self.core.character(), %error, "ignoring a malformed message from the model session");
            }
        }
    }

    fn finished(&mut self, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

impl Handler<SyncTools> for RealtimeSession {
    type Result = ResponseFuture<Result<(), String>>;

    fn handle(&mut self, SyncTools(tools): SyncTools, ctx: &mut Self::Context) -> Self::Result {
        shell::sync_tools(self, tools, ctx)
    }
}

impl Handler<SessionStatus> for RealtimeSession {
    type Result = MessageResult<SessionStatus>;

    fn handle(&mut self, _: SessionStatus, _: &mut Self::Context) -> Self::Result {
        MessageResult(shell::report(
            &self.core,
            ConnectionKind::Client,
            self.state,
            &self.since,
            &self.url,
        ))
    }
}

impl Handler<CloseSession> for RealtimeSession {
    type Result = ();

    fn handle(&mut self, _: CloseSession, ctx: &mut Self::Context) {
        self.closing = true;
        shell::close_upstream(self, Some(ws::CloseCode::Normal.into()), ctx);
    }
}
