//! `RealtimeSession`: the server's own websocket to one character's model session
//! (`mode = "client"`, the default): for headless use and the demo, where no app holds the
//! conversation.
//!
//! Supervised: when the connection fails or drops the actor stops, and its supervisor restarts
//! it, which reconnects after a capped exponential backoff. Every (re)connect first sends
//! `session.update` with the current tools. The protocol itself is the [`SessionCore`]'s.

use actix::prelude::*;
use awc::ws::{self, Frame};
use futures_util::future::{FutureExt, LocalBoxFuture};

use super::core::{Seen, SessionCore};
use super::realtime::Realtime;
use super::settings::SessionSettings;
use super::shell::{self, Link, Shell, Whole};
use super::supervised::{self, Reconnecting, Reconnects};
use super::wire::{FromUpstream, UpstreamSocket};
use crate::dispatch::Dispatcher;
use crate::domain::connection::ConnectionKind;
use crate::events::EventHub;
use crate::policy::Policy;
use crate::session::CharacterTools;

pub(crate) struct RealtimeSession {
    link: Link,
    api_key: Option<String>,
    reconnects: Reconnects,
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
        policy: Policy,
        tools: CharacterTools,
    ) -> Addr<Self> {
        let core = SessionCore::new(
            character,
            ConnectionKind::Client,
            Box::new(Realtime(settings.dialect)),
            settings.url.clone(),
            &settings,
            events,
            policy,
            tools,
            false,
        );
        supervised::launch(RealtimeSession {
            link: Link::new(core, dispatcher),
            api_key,
            reconnects: Reconnects::default(),
        })
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

impl Reconnecting for RealtimeSession {
    const NAME: &'static str = "realtime";

    fn reconnects(&mut self) -> &mut Reconnects {
        &mut self.reconnects
    }

    fn dial(&mut self) -> LocalBoxFuture<'static, Result<UpstreamSocket, String>> {
        let url = self.link.core.upstream().to_owned();
        let authorization = self.api_key.as_deref().map(shell::bearer);
        async move { shell::connect(&url, authorization.as_deref()).await }.boxed_local()
    }
}

crate::reconnecting_actor!(RealtimeSession);

impl actix::io::WriteHandler<awc::error::WsProtocolError> for RealtimeSession {
    fn error(&mut self, err: awc::error::WsProtocolError, _: &mut Self::Context) -> Running {
        tracing::warn!(character = %self.link.core.character(), error = %err, "model session write failed");
        Running::Stop
    }
}

impl Shell for RealtimeSession {
    fn link(&mut self) -> &mut Link {
        &mut self.link
    }

    fn upstream(&mut self, item: FromUpstream, ctx: &mut Context<Self>) {
        let frame = match item {
            FromUpstream::Frame(_, Ok(frame)) => frame,
            FromUpstream::Frame(_, Err(e)) => {
                tracing::warn!(character = %self.link.core.character(), error = %e, "model session protocol error");
                ctx.stop();
                return;
            }
            FromUpstream::Ended(_) => {
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
}

crate::session_handlers!(RealtimeSession);
