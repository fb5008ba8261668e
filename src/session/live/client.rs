//! `GeminiSession`: the server's own connection to a character's Gemini Live session
//! (`kind = "gemini-live"`, `mode = "client"`).
//!
//! What the session does is its [`SessionCore`]'s, speaking through the [`Gemini`] adapter;
//! this actor owns what Gemini Live asks of a connection. Gemini takes tools only in the setup
//! that opens a connection, so a new tool list is a new connection: every setup asks for
//! session resumption, the actor keeps the latest handle while the session says it is
//! resumable, and when the core asks for a new connection ([`Shell::reconnect`]) it waits for
//! a moment with no call running and a resumable handle, opens a connection that resumes the
//! session with the new setup, moves to it when its `setupComplete` comes (which acknowledges
//! the update), and closes the old one. A `goAway` moves the session the same way before the
//! old connection ends. A connection that fails or drops stops the actor; its supervisor starts
//! it again after a backoff, and the new connection resumes the session when a handle is held.

use std::sync::Arc;

use actix::io::WriteHandler;
use actix::prelude::*;
use awc::error::WsProtocolError;
use awc::ws::{self, Frame};
use futures_util::stream::StreamExt;

use super::moving::{self, From, Moves, Moving, Tagged};
use crate::dispatch::Dispatcher;
use crate::domain::connection::ConnectionKind;
use crate::domain::tool::SharedTool;
use crate::events::EventHub;
use crate::session::client::backoff;
use crate::session::core::{Seen, SessionCore};
use crate::session::gemini::{API_KEY_HEADER, Gemini};
use crate::session::settings::SessionSettings;
use crate::session::shell::{self, Link, Reassembly, Shell, Whole};
use crate::session::{CloseSession, ConnectionState};

pub(crate) struct GeminiSession {
    link: Link,
    moves: Moves,
    /// Failed connection attempts in a row (drives the backoff).
    attempt: u32,
    closing: bool,
}

impl GeminiSession {
    /// Starts the supervised session for `character` with its current `tools`.
    pub(crate) fn launch(
        character: String,
        settings: SessionSettings,
        api_key: Option<String>,
        dispatcher: Dispatcher,
        events: EventHub,
        tools: Arc<[SharedTool]>,
    ) -> Addr<Self> {
        let moves = Moves::new(api_key.map(|key| (API_KEY_HEADER.to_owned(), key)));
        let mut core = SessionCore::new(
            character,
            ConnectionKind::Client,
            Box::new(Gemini::new(moves.handle.clone())),
            settings.url.clone(),
            &settings,
            events,
            tools,
            false,
        );
        core.resumes();
        if let Some(model) = &settings.model {
            let mut own = serde_json::Map::new();
            own.insert("model".into(), model.clone().into());
            core.described_settings(own);
        }
        let session = GeminiSession {
            link: Link::new(core, dispatcher),
            moves,
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
        let header = self
            .moves
            .header()
            .map(|(n, v)| (n.to_owned(), v.to_owned()));
        ctx.spawn(
            async move {
                let header = header.as_ref().map(|(n, v)| (n.as_str(), v.as_str()));
                shell::connect_with(&url, header).await
            }
            .into_actor(self)
            .map(move |result, act, ctx| match result {
                Ok(framed) => {
                    let (sink, stream) = framed.split();
                    act.moves.current = act.moves.number();
                    moving::listen(act.moves.current, stream, ctx);
                    tracing::info!(character = %act.link.core.character(), resumed = act.moves.handle.borrow().is_some(), "gemini session connected");
                    act.attempt = 0;
                    act.moves.resumable = false;
                    act.link.connected(sink, ctx);
                    // The setup goes first, with the tools (and the handle of the session it
                    // resumes, if one is held).
                    act.link.core.sync_now();
                    shell::run_effects(act, ctx);
                }
                Err(error) => {
                    tracing::warn!(character = %act.link.core.character(), url = %act.link.core.upstream(), %error, "gemini session connection failed");
                    // A handle the provider no longer knows must not fail every attempt.
                    act.moves.handle.borrow_mut().take();
                    ctx.stop();
                }
            }),
        );
    }

    fn on_text(&mut self, id: u64, text: &str, ctx: &mut Context<Self>) {
        let (from, go_away) = moving::on_text(self, id, text, ctx);
        if from == From::Elsewhere {
            return;
        }
        if let Some(left) = go_away {
            tracing::info!(character = %self.link.core.character(), time_left_ms = left.as_millis() as u64, "gemini session going away: moving to a new connection");
            self.moves.wanted = true;
        }
        let character = self.link.core.character().to_owned();
        let calls_before = self.link.core.has_running_calls();
        match self.link.core.on_upstream(text) {
            Seen::Error { message, .. } => {
                tracing::warn!(%character, error = %message, "gemini session reported an error");
            }
            Seen::Unreadable(e) => {
                tracing::warn!(%character, error = %e, "ignoring a malformed message from the gemini session");
            }
            Seen::Pass | Seen::Ours | Seen::Described { .. } => {}
        }
        if !calls_before && self.link.core.has_running_calls() {
            moving::abandon_opening(self, ctx);
        }
        shell::run_effects(self, ctx);
        moving::move_when_possible(self, ctx);
    }

    fn on_frame(&mut self, id: u64, frame: Frame, ctx: &mut Context<Self>) {
        let whole = match frame {
            // Gemini sends its JSON messages as binary frames; either kind is read as text.
            Frame::Text(bytes) | Frame::Binary(bytes) => shell::text_of(bytes).map(Some),
            Frame::Continuation(item) if id == self.moves.current => {
                match self.link.fragments.push(item) {
                    Ok(Some(Whole::Text(text))) => Ok(Some(text)),
                    Ok(Some(Whole::Binary(bytes))) => shell::text_of(bytes).map(Some),
                    Ok(None) => Ok(None),
                    Err(error) => {
                        tracing::warn!(character = %self.link.core.character(), %error, "gemini session protocol error; reconnecting");
                        ctx.stop();
                        return;
                    }
                }
            }
            Frame::Continuation(_) | Frame::Pong(_) | Frame::Ping(_) => Ok(None),
            Frame::Close(reason) => {
                self.on_close(id, reason.and_then(|r| r.description), ctx);
                Ok(None)
            }
        };
        match whole {
            Ok(Some(text)) => self.on_text(id, &text, ctx),
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(character = %self.link.core.character(), %error, "ignoring a malformed message from the gemini session");
            }
        }
    }

    /// Connection `id` closed: the one in use ends the session (its supervisor connects
    /// again).
    fn on_close(&mut self, id: u64, reason: Option<String>, ctx: &mut Context<Self>) {
        if moving::closed(self, id, reason.clone(), ctx) {
            tracing::info!(character = %self.link.core.character(), reason = ?reason, "gemini session closed by the server");
            ctx.stop();
        }
    }
}

impl Moving for GeminiSession {
    fn moves(&mut self) -> &mut Moves {
        &mut self.moves
    }
}

impl Shell for GeminiSession {
    fn link(&mut self) -> &mut Link {
        &mut self.link
    }

    fn reconnect(&mut self, _setup: String, ctx: &mut Context<Self>) {
        // The setup is written when the connection opens, with the handle of that moment.
        self.moves.wanted = true;
        moving::move_when_possible(self, ctx);
    }

    fn call_finished(&mut self, ctx: &mut Context<Self>) {
        moving::move_when_possible(self, ctx);
    }
}

impl Actor for GeminiSession {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        if self.closing {
            return;
        }
        if self.attempt == 0 {
            self.link.core.announce();
            self.connect(ctx);
        } else {
            self.link.core.set_state(ConnectionState::Backoff);
            ctx.run_later(backoff(self.attempt), |act, ctx| act.connect(ctx));
        }
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        if self.closing {
            tracing::debug!(character = %self.link.core.character(), "gemini session closed");
        } else if self.link.core.state() == ConnectionState::Connected {
            tracing::warn!(character = %self.link.core.character(), "gemini session disconnected");
        }
        self.link.sink = None;
        self.link.fragments = Reassembly::default();
        self.link.sync_timer = None;
        self.moves.reset();
        if !self.closing {
            self.link.core.set_state(ConnectionState::Backoff);
        }
        self.link.disconnected();
    }
}

impl Supervised for GeminiSession {
    fn restarting(&mut self, _: &mut Self::Context) {
        self.attempt = self.attempt.saturating_add(1);
    }
}

impl WriteHandler<WsProtocolError> for GeminiSession {
    fn error(&mut self, err: WsProtocolError, _: &mut Self::Context) -> Running {
        // The connection left behind may fail as it closes; the one in use ending is seen on
        // its read side.
        tracing::debug!(character = %self.link.core.character(), error = %err, "gemini session write failed");
        Running::Continue
    }

    /// A write half finished: the one left behind, closed after a move. The session goes on
    /// (the one in use ending is seen on its read side).
    fn finished(&mut self, _: &mut Self::Context) {}
}

impl Handler<Tagged> for GeminiSession {
    type Result = ();

    fn handle(&mut self, tagged: Tagged, ctx: &mut Self::Context) {
        match tagged {
            Tagged::Frame(id, Ok(frame)) => self.on_frame(id, frame, ctx),
            Tagged::Frame(id, Err(e)) => {
                tracing::warn!(character = %self.link.core.character(), error = %e, "gemini session protocol error");
                self.on_close(id, Some(e.to_string()), ctx);
            }
            Tagged::Ended(id) => self.on_close(id, None, ctx),
        }
    }
}

crate::session_handlers!(GeminiSession);

impl Handler<CloseSession> for GeminiSession {
    type Result = ResponseFuture<()>;

    /// The reply comes when the session is gone.
    fn handle(&mut self, _: CloseSession, ctx: &mut Self::Context) -> Self::Result {
        self.closing = true;
        shell::close_upstream(self, Some(ws::CloseCode::Normal.into()), ctx);
        self.link.closed()
    }
}
