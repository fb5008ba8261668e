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

use actix::prelude::*;
use awc::error::WsProtocolError;
use awc::ws;
use futures_util::future::{FutureExt, LocalBoxFuture};

use super::moving::{self, From, Heard, Moves, Moving};
use crate::dispatch::Dispatcher;
use crate::domain::connection::ConnectionKind;
use crate::events::EventHub;
use crate::policy::Policy;
use crate::session::CharacterTools;
use crate::session::core::{Seen, SessionCore};
use crate::session::gemini::{API_KEY_HEADER, Gemini};
use crate::session::settings::SessionSettings;
use crate::session::shell::{self, Link, Shell};
use crate::session::supervised::{self, Reconnecting, Reconnects};
use crate::session::wire::{FromUpstream, UpstreamSocket};

pub(crate) struct GeminiSession {
    link: Link,
    moves: Moves,
    reconnects: Reconnects,
}

impl GeminiSession {
    /// Starts the supervised session for `character` with its current `tools`.
    pub(crate) fn launch(
        character: String,
        settings: SessionSettings,
        api_key: Option<String>,
        dispatcher: Dispatcher,
        events: EventHub,
        policy: Policy,
        tools: CharacterTools,
    ) -> Addr<Self> {
        let moves = Moves::new(api_key.map(|key| (API_KEY_HEADER.to_owned(), key)));
        let mut core = SessionCore::new(
            character,
            ConnectionKind::Client,
            Box::new(Gemini::new(moves.handle.clone())),
            settings.url.clone(),
            &settings,
            events,
            policy,
            tools,
            false,
        );
        core.resumes();
        if let Some(model) = &settings.model {
            let mut own = serde_json::Map::new();
            own.insert("model".into(), model.clone().into());
            core.described_settings(own);
        }
        supervised::launch(GeminiSession {
            link: Link::new(core, dispatcher),
            moves,
            reconnects: Reconnects::default(),
        })
    }

    fn on_text(&mut self, id: u64, text: &str, ctx: &mut Context<Self>) {
        let (from, go_away) = moving::on_text(self, id, text, ctx);
        match from {
            From::Elsewhere => return,
            // The API set the session up: a failure from here on starts the backoff anew.
            From::SetUp => self.reconnects.succeeded(),
            From::Current | From::Moved => {}
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

    /// Connection `id` closed or broke: the one in use ends the session (its supervisor
    /// connects again).
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

    /// The supervisor connects again, after the backoff.
    fn not_set_up(&mut self, _reason: String, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

impl Reconnecting for GeminiSession {
    const NAME: &'static str = "gemini-live";

    fn reconnects(&mut self) -> &mut Reconnects {
        &mut self.reconnects
    }

    fn dial(&mut self) -> LocalBoxFuture<'static, Result<UpstreamSocket, String>> {
        let url = self.link.core.upstream().to_owned();
        let header = self
            .moves
            .header()
            .map(|(n, v)| (n.to_owned(), v.to_owned()));
        async move {
            let header = header.as_ref().map(|(n, v)| (n.as_str(), v.as_str()));
            shell::connect_with(&url, header).await
        }
        .boxed_local()
    }

    /// The setup goes next, with the tools (and the handle of the session it resumes, if one is
    /// held); the backoff starts anew only once the API has set the session up.
    fn on_connected(&mut self, id: u64, ctx: &mut Context<Self>) {
        tracing::debug!(character = %self.link.core.character(), resumed = self.moves.handle.borrow().is_some(), "gemini session connected");
        self.moves.resumable = false;
        moving::bound_first_setup(self, id, ctx);
    }

    /// A handle the provider no longer knows must not fail every attempt.
    fn dial_failed(&mut self) {
        self.moves.handle.borrow_mut().take();
    }

    fn let_go(&mut self) {
        self.moves.reset();
    }
}

crate::reconnecting_actor!(GeminiSession);

impl Shell for GeminiSession {
    fn link(&mut self) -> &mut Link {
        &mut self.link
    }

    fn upstream(&mut self, item: FromUpstream, ctx: &mut Context<Self>) {
        let id = item.connection();
        match moving::hear(self, item) {
            Heard::Message(text, _) => self.on_text(id, &text, ctx),
            Heard::Ping(payload) => shell::send_upstream(self, ws::Message::Pong(payload), ctx),
            Heard::Closed(reason) => self.on_close(id, reason.and_then(|r| r.description), ctx),
            Heard::Broke(error) => {
                tracing::warn!(character = %self.link.core.character(), %error, "gemini session protocol error");
                self.on_close(id, Some(error), ctx);
            }
            Heard::Bytes(_) | Heard::Nothing => {}
        }
    }

    fn reconnect(&mut self, _setup: String, ctx: &mut Context<Self>) {
        // The setup is written when the connection opens, with the handle of that moment.
        moving::want_new_connection(self, ctx);
    }

    fn call_finished(&mut self, ctx: &mut Context<Self>) {
        moving::move_when_possible(self, ctx);
    }
}

impl actix::io::WriteHandler<WsProtocolError> for GeminiSession {
    fn error(&mut self, err: WsProtocolError, _: &mut Self::Context) -> Running {
        // A connection left behind may fail as it closes; the one in use ending is seen on
        // its read side.
        tracing::debug!(character = %self.link.core.character(), error = %err, "gemini session write failed");
        Running::Continue
    }

    /// A write half finished: one left behind. The session goes on (the one in use ending is
    /// seen on its read side).
    fn finished(&mut self, _: &mut Self::Context) {}
}

crate::session_handlers!(GeminiSession);
