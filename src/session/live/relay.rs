//! `GeminiRelay`: an app's Gemini Live connection, relayed to the API through the server (the
//! Gemini relay route). One actor per open relay.
//!
//! Everything passes both ways in order and unchanged, frame for frame, except: the app's
//! `setup` goes up with the registered tools merged into its function declarations (its own
//! first, as it wrote them; a registered tool of the same name as one of its own is left out)
//! and session resumption asked for; the answers to the server's calls go up between the app's
//! messages, and the calls of the app's own tools are the app's to answer; the
//! `sessionResumptionUpdate`s reach the app only when it asked for resumption itself. When the
//! character's tools change, the session moves to a new connection resumed from its handle
//! ([`super::moving`]): what the app sends meanwhile is held and goes, in order, to the
//! connection the session is on once the move is done or given up; the app's socket stays open
//! and sees nothing of the move (not the new connection's `setupComplete`, nor the old one's
//! close).

use std::collections::VecDeque;

use actix::prelude::*;
use actix_http::ws::{CloseCode, CloseReason, Message, ProtocolError};
use awc::ws;
use bytes::Bytes;

use super::moving::{self, From, Heard, Moves, Moving};
use crate::session::core::{Seen, SyncError};
use crate::session::gemini::app::app_setup;
use crate::session::gemini::read;
use crate::session::gemini::{API_KEY_HEADER, Gemini};
use crate::session::outbox::{AppOutbox, OutboxBody};
use crate::session::relaying::{
    self, AppSide, OpensRelay, RelayStart, RelaysApp, UPSTREAM_LOST_CODE, lost,
};
use crate::session::settings::SessionSettings;
use crate::session::shell::{self, Link, MAX_UPSTREAM_QUEUE_BYTES, Reassembly, Shell, Whole};
use crate::session::wire::{FromUpstream, UpstreamSocket};

/// A connected upstream websocket, where it goes, and the key it was opened with.
pub(crate) struct GeminiUpstream {
    pub url: String,
    socket: UpstreamSocket,
    key: Option<String>,
}

/// Opens the API's side of a Gemini relay: the character's URL, with its configured key or,
/// when it has none, the app's own.
pub(crate) async fn connect_gemini(
    settings: &SessionSettings,
    app_key: Option<String>,
) -> Result<GeminiUpstream, String> {
    let key = settings
        .api_key()
        .map_err(|e| format!("{e:#}"))?
        .or(app_key);
    let url = settings.url.clone();
    let header = key.as_deref().map(|k| (API_KEY_HEADER, k));
    let socket = shell::connect_with(&url, header)
        .await
        .map_err(|e| format!("could not connect to the model at {url}: {e}"))?;
    Ok(GeminiUpstream { url, socket, key })
}

pub(crate) struct GeminiRelay {
    link: Link,
    moves: Moves,
    app: AppOutbox,
    /// A message from the app arriving in fragments.
    from_app: Reassembly,
    /// The app's setup went up; its answer is the first `setupComplete`, the only one the app
    /// sees.
    setup_sent: bool,
    /// The app asked for resumption updates itself.
    app_resumes: bool,
    /// What the app sent while the session was moving, in order, and its size.
    held: VecDeque<ws::Message>,
    held_bytes: usize,
    /// Closing: frames still arriving are dropped.
    ending: bool,
}

impl OpensRelay for GeminiRelay {
    type Upstream = GeminiUpstream;

    fn url(upstream: &GeminiUpstream) -> String {
        upstream.url.clone()
    }

    /// The tools go up with the app's setup.
    fn open(relay: RelayStart, upstream: GeminiUpstream) -> (Addr<Self>, OutboxBody) {
        let GeminiUpstream { url, socket, key } = upstream;
        let moves = Moves::new(key.map(|key| (API_KEY_HEADER.to_owned(), key)));
        let protocol = Box::new(Gemini::new(moves.handle.clone()));
        relaying::start(relay, protocol, url, socket, |mut link, app| {
            link.core.resumes();
            GeminiRelay {
                link,
                moves,
                app,
                from_app: Reassembly::default(),
                setup_sent: false,
                app_resumes: false,
                held: VecDeque::new(),
                held_bytes: 0,
                ending: false,
            }
        })
    }
}

impl GeminiRelay {
    /// A message of the API's, as text, with the frame it came in (passed on as it came).
    fn upstream_message(&mut self, id: u64, text: &str, frame: Message, ctx: &mut Context<Self>) {
        let (from, _) = moving::on_text(self, id, text, ctx);
        match from {
            From::Elsewhere => return,
            From::Moved => {
                // The new connection's setupComplete acknowledges the update; the app, which
                // sent one setup, has had its answer.
                self.link.core.on_upstream(text);
                shell::run_effects(self, ctx);
                return;
            }
            From::Current | From::SetUp => {}
        }
        let calls_before = self.link.core.has_running_calls();
        let seen = self.link.core.on_upstream(text);
        let pass = if from == From::SetUp {
            // The app's setup's answer, whoever's update it settled; the setups of later
            // connections are answered on them, and the app sees none.
            true
        } else if !self.app_resumes
            && text.contains("esumption")
            && read::signals(text).resumption.is_some()
        {
            false
        } else {
            seen != Seen::Ours
        };
        if pass {
            self.send_to_app(frame, ctx);
        }
        if !calls_before && self.link.core.has_running_calls() {
            moving::abandon_opening(self, ctx);
        }
        shell::run_effects(self, ctx);
        moving::move_when_possible(self, ctx);
    }

    /// Sends what the app sent while the session was moving, in order.
    fn release_held(&mut self, ctx: &mut Context<Self>) {
        self.held_bytes = 0;
        while let Some(message) = self.held.pop_front() {
            shell::send_upstream(self, message, ctx);
        }
    }

    /// Connection `id` closed (with `reason`: the same to the app, and echoed) or broke
    /// (`broke`: the app gets 1014 with it).
    fn closed(
        &mut self,
        id: u64,
        reason: Option<CloseReason>,
        broke: Option<String>,
        ctx: &mut Context<Self>,
    ) {
        let why = broke
            .clone()
            .or_else(|| reason.as_ref().and_then(|r| r.description.clone()));
        if !moving::closed(self, id, why, ctx) {
            return;
        }
        match broke {
            Some(why) => {
                tracing::warn!(character = %self.link.core.character(), error = %why, "gemini relay: the API's side broke");
                self.end(Some(Some(lost(&why))), None, ctx);
            }
            None => {
                tracing::debug!(character = %self.link.core.character(), ?reason, "gemini relay: the API closed");
                self.end(Some(reason.clone()), Some(reason), ctx);
            }
        }
    }
}

/// What a held message counts towards the bound on held messages.
fn held_len(message: &ws::Message) -> usize {
    match message {
        ws::Message::Text(text) => text.len(),
        ws::Message::Binary(bytes) => bytes.len(),
        _ => 0,
    }
}

/// Bytes known to be UTF-8 as text.
fn text_of(bytes: Bytes) -> bytestring::ByteString {
    bytestring::ByteString::try_from(bytes).expect("checked UTF-8")
}

impl Moving for GeminiRelay {
    fn moves(&mut self) -> &mut Moves {
        &mut self.moves
    }

    fn moved(&mut self, ctx: &mut Context<Self>) {
        self.release_held(ctx);
    }

    fn stayed(&mut self, ctx: &mut Context<Self>) {
        self.release_held(ctx);
    }

    /// The app is told why (1014, as for a model that broke); the API's connection is closed.
    fn not_set_up(&mut self, reason: String, ctx: &mut Context<Self>) {
        let to_app = CloseReason {
            code: CloseCode::Other(UPSTREAM_LOST_CODE),
            description: Some(format!("the model did not set the session up: {reason}")),
        };
        self.end(Some(Some(to_app)), Some(None), ctx);
    }
}

impl RelaysApp for GeminiRelay {
    fn app_side(&mut self) -> AppSide<'_> {
        AppSide {
            outbox: &mut self.app,
            fragments: &mut self.from_app,
            ending: &mut self.ending,
        }
    }

    fn app_message(&mut self, message: Whole, ctx: &mut Self::Context) {
        let message = match message {
            Whole::Text(text) if !self.setup_sent => {
                self.setup_sent = true;
                if let Some(id) = self.link.wires.in_use() {
                    moving::bound_first_setup(self, id, ctx);
                }
                match app_setup(&text) {
                    Some(setup) => {
                        self.app_resumes = setup.resumes;
                        let core = &mut self.link.core;
                        core.described(setup.own, Some(setup.settings));
                        // With tools registered the merged setup is on its way already.
                        if let Some(own) = core.own_setup() {
                            shell::send_upstream(self, ws::Message::Text(own.into()), ctx);
                        }
                        shell::run_effects(self, ctx);
                        return;
                    }
                    None => ws::Message::Text(text),
                }
            }
            Whole::Text(text) => ws::Message::Text(text),
            Whole::Binary(bytes) if !self.setup_sent => {
                match std::str::from_utf8(&bytes).ok().and_then(app_setup) {
                    Some(_) => return self.app_message(Whole::Text(text_of(bytes)), ctx),
                    None => ws::Message::Binary(bytes),
                }
            }
            Whole::Binary(bytes) => ws::Message::Binary(bytes),
        };
        if self.moves.is_opening() {
            self.held_bytes += held_len(&message);
            self.held.push_back(message);
            if self.held_bytes > MAX_UPSTREAM_QUEUE_BYTES {
                // As a model that stops reading: the app is told why, and the relay ends.
                self.model_not_reading(ctx);
            }
        } else {
            shell::send_upstream(self, message, ctx);
        }
    }
}

impl Shell for GeminiRelay {
    fn link(&mut self) -> &mut Link {
        &mut self.link
    }

    fn upstream(&mut self, item: FromUpstream, ctx: &mut Context<Self>) {
        if relaying::while_ending(self, &item, ctx) {
            return;
        }
        let id = item.connection();
        match moving::hear(self, item) {
            Heard::Message(text, message) => self.upstream_message(id, &text, message, ctx),
            // Not JSON text: the API's to say, passed on as it came.
            Heard::Bytes(bytes) => self.send_to_app(Message::Binary(bytes), ctx),
            Heard::Ping(payload) => shell::send_upstream(self, ws::Message::Pong(payload), ctx),
            Heard::Closed(reason) => self.closed(id, reason, None, ctx),
            Heard::Broke(error) => self.closed(id, None, Some(error), ctx),
            Heard::Nothing => {}
        }
    }

    fn reconnect(&mut self, _setup: String, ctx: &mut Context<Self>) {
        moving::want_new_connection(self, ctx);
    }

    fn call_finished(&mut self, ctx: &mut Context<Self>) {
        moving::move_when_possible(self, ctx);
    }

    fn model_not_reading(&mut self, ctx: &mut Context<Self>) {
        relaying::model_not_reading(self, ctx);
    }
}

impl Actor for GeminiRelay {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        tracing::info!(character = %self.link.core.character(), upstream = %self.link.core.upstream(), "gemini relay opened");
        // The tools go in the app's setup: nothing goes up before it.
        let timeout = self.link.core.sync_timeout();
        self.link
            .core
            .hold_until_described(None, SyncError::NoSetup(timeout));
        shell::run_effects(self, ctx);
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        self.moves.reset();
        relaying::stopped(self);
    }
}

impl actix::io::WriteHandler<ProtocolError> for GeminiRelay {
    fn error(&mut self, err: ProtocolError, _: &mut Self::Context) -> Running {
        // A connection left behind may fail as it closes; the one in use breaking is seen on
        // its read side.
        tracing::debug!(character = %self.link.core.character(), error = %err, "gemini relay: writing to the API failed");
        Running::Continue
    }

    fn finished(&mut self, _: &mut Self::Context) {}
}

crate::session_handlers!(GeminiRelay);
crate::relay_handlers!(GeminiRelay);
