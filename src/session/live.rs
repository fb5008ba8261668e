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

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use actix::io::WriteHandler;
use actix::prelude::*;
use awc::error::WsProtocolError;
use awc::ws::{self, Frame};
use futures_util::SinkExt;
use futures_util::stream::{self, StreamExt};

use super::client::{INITIAL_BACKOFF, MAX_BACKOFF};
use super::core::{Seen, SessionCore};
use super::gemini::read::{self, Signals};
use super::gemini::{API_KEY_HEADER, Gemini, Resumption};
use super::settings::SessionSettings;
use super::shell::{self, Link, Reassembly, Shell, UpstreamHalf, UpstreamSink, Whole};
use super::{CloseSession, ConnectionState};
use crate::dispatch::Dispatcher;
use crate::domain::connection::ConnectionKind;
use crate::domain::tool::SharedTool;
use crate::events::EventHub;

/// Why a new tool list waits: the words `failed_roles` gives when no moment comes in time.
const CALL_RUNNING: &str = "a tool call is running";
const NO_HANDLE: &str = "the session has not given a resumable handle yet";

pub(crate) struct GeminiSession {
    link: Link,
    api_key: Option<String>,
    /// The latest resumable handle, shared with the adapter, which puts it in every setup.
    handle: Resumption,
    /// The session said it can be resumed now (its latest `sessionResumptionUpdate`).
    resumable: bool,
    /// The number of the connection in use; frames of any other are not the session's.
    current: u64,
    next_connection: u64,
    /// A new connection is wanted: new tools, or a `goAway`.
    wanted: bool,
    /// The connection being opened to move to, and its write half once it is up.
    opening: Option<Opening>,
    /// Connections left behind, closing: kept until they end.
    retiring: Vec<(u64, UpstreamSink)>,
    /// Failed connection attempts in a row (drives the backoff).
    attempt: u32,
    closing: bool,
}

struct Opening {
    id: u64,
    half: Option<UpstreamHalf>,
}

/// A frame of connection `0`, or its end.
enum Tagged {
    Frame(u64, Result<Frame, WsProtocolError>),
    Ended(u64),
}

impl Message for Tagged {
    type Result = ();
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
        let handle: Resumption = Rc::new(RefCell::new(None));
        let mut core = SessionCore::new(
            character,
            ConnectionKind::Client,
            Box::new(Gemini::new(handle.clone())),
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
            api_key,
            handle,
            resumable: false,
            current: 0,
            next_connection: 0,
            wanted: false,
            opening: None,
            retiring: Vec::new(),
            attempt: 0,
            closing: false,
        };
        Supervisor::start(|ctx: &mut Context<Self>| {
            ctx.set_mailbox_capacity(0);
            session
        })
    }

    fn header(&self) -> Option<(&'static str, String)> {
        self.api_key.clone().map(|key| (API_KEY_HEADER, key))
    }

    /// A number for a new connection.
    fn number(&mut self) -> u64 {
        self.next_connection += 1;
        self.next_connection
    }

    /// Feeds the frames of connection `id`, then its end, to the actor.
    fn listen(
        id: u64,
        stream: impl futures_util::Stream<Item = Result<Frame, WsProtocolError>> + 'static,
        ctx: &mut Context<Self>,
    ) {
        let tagged = stream
            .map(move |frame| Tagged::Frame(id, frame))
            .chain(stream::once(async move { Tagged::Ended(id) }));
        ctx.add_message_stream(tagged);
    }

    fn connect(&mut self, ctx: &mut Context<Self>) {
        self.link.core.set_state(ConnectionState::Connecting);
        let url = self.link.core.upstream().to_owned();
        let header = self.header();
        ctx.spawn(
            async move {
                let header = header.as_ref().map(|(n, v)| (*n, v.as_str()));
                shell::connect_with(&url, header).await
            }
            .into_actor(self)
            .map(move |result, act, ctx| match result {
                Ok(framed) => {
                    let (sink, stream) = framed.split();
                    act.current = act.number();
                    Self::listen(act.current, stream, ctx);
                    tracing::info!(character = %act.link.core.character(), resumed = act.handle.borrow().is_some(), "gemini session connected");
                    act.attempt = 0;
                    act.resumable = false;
                    act.link.connected(sink, ctx);
                    // The setup goes first, with the tools (and the handle of the session it
                    // resumes, if one is held).
                    act.link.core.sync_now();
                    shell::run_effects(act, ctx);
                }
                Err(error) => {
                    tracing::warn!(character = %act.link.core.character(), url = %act.link.core.upstream(), %error, "gemini session connection failed");
                    // A handle the provider no longer knows must not fail every attempt.
                    act.handle.borrow_mut().take();
                    ctx.stop();
                }
            }),
        );
    }

    /// Opens the connection to move to, when the moment has come: no call running, and a
    /// handle the session said it can be resumed from. Otherwise the update waits, and says
    /// why.
    fn move_when_possible(&mut self, ctx: &mut Context<Self>) {
        if !self.wanted || self.opening.is_some() || !self.link.core.is_connected() {
            return;
        }
        let blocked = if self.link.core.has_running_calls() {
            Some(CALL_RUNNING)
        } else if !self.resumable || self.handle.borrow().is_none() {
            Some(NO_HANDLE)
        } else {
            None
        };
        if let Some(reason) = blocked {
            self.link.core.update_waits(reason.to_owned());
            return;
        }
        self.wanted = false;
        let setup = self.link.core.current_update();
        let url = self.link.core.upstream().to_owned();
        let header = self.header();
        let planned = self.number();
        self.opening = Some(Opening {
            id: planned,
            half: None,
        });
        tracing::debug!(character = %self.link.core.character(), "opening a gemini connection that resumes the session");
        ctx.spawn(
            async move {
                let header = header.as_ref().map(|(n, v)| (*n, v.as_str()));
                let mut framed = shell::connect_with(&url, header).await?;
                framed
                    .send(ws::Message::Text(setup.into()))
                    .await
                    .map_err(|e| e.to_string())?;
                Ok::<_, String>(framed)
            }
            .into_actor(self)
            .map(move |result, act, ctx| {
                if act.opening.as_ref().map(|o| o.id) != Some(planned) {
                    return;
                }
                match result {
                    Ok(framed) => {
                        let (half, stream) = framed.split();
                        Self::listen(planned, stream, ctx);
                        act.opening = Some(Opening {
                            id: planned,
                            half: Some(half),
                        });
                    }
                    Err(error) => act.opening_failed(&format!("could not connect: {error}"), ctx),
                }
            }),
        );
    }

    /// The connection being opened failed before it took the setup: the update fails.
    fn opening_failed(&mut self, reason: &str, ctx: &mut Context<Self>) {
        self.opening = None;
        tracing::warn!(character = %self.link.core.character(), %reason, "a new gemini connection failed");
        self.link
            .core
            .update_connection_failed(format!("the new connection failed: {reason}"));
        shell::run_effects(self, ctx);
    }

    /// The model called tools on the connection in use while another was being opened: that
    /// one would resume the session from before the calls. It is dropped, and opened again at
    /// the next moment.
    fn abandon_opening(&mut self, ctx: &mut Context<Self>) {
        if let Some(opening) = self.opening.take() {
            if let Some(mut half) = opening.half {
                ctx.spawn(
                    async move {
                        let _ = half.send(ws::Message::Close(None)).await;
                    }
                    .into_actor(self),
                );
            }
            self.wanted = true;
        }
    }

    /// The new connection took the setup: the session moves to it, and the old one is closed.
    fn move_to(&mut self, id: u64, half: UpstreamHalf, ctx: &mut Context<Self>) {
        if let Some(mut old) = self.link.sink.take() {
            let _ = old.write(ws::Message::Close(Some(ws::CloseCode::Normal.into())));
            // Kept until the provider answers the close and the connection ends.
            self.retiring.push((self.current, old));
        }
        self.current = id;
        self.resumable = false;
        self.link.open_sink(half, ctx);
        self.link.core.switched();
        tracing::info!(character = %self.link.core.character(), "gemini session moved to a new connection");
    }

    fn on_text(&mut self, id: u64, text: &str, ctx: &mut Context<Self>) {
        let Signals {
            resumption,
            go_away,
        } = read::signals(text);
        if let Some((handle, resumable)) = resumption {
            if let Some(handle) = handle {
                *self.handle.borrow_mut() = Some(handle);
                self.link.core.handle_received();
            }
            if id == self.current {
                self.resumable = resumable;
            }
        }
        if let Some(opening) = self.opening.as_mut().filter(|o| o.id == id) {
            let Ok(super::core::ModelEvent::Updated { .. }) = read::server_message(text) else {
                return;
            };
            let half = opening
                .half
                .take()
                .expect("a connection that answered is open");
            self.opening = None;
            self.move_to(id, half, ctx);
        } else if id != self.current {
            // The connection left behind: what it still says is not the session's.
            return;
        }
        if let Some(left) = go_away {
            tracing::info!(character = %self.link.core.character(), time_left_ms = left.as_millis() as u64, "gemini session going away: moving to a new connection");
            self.wanted = true;
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
            self.abandon_opening(ctx);
        }
        shell::run_effects(self, ctx);
        self.move_when_possible(ctx);
    }

    fn on_frame(&mut self, id: u64, frame: Frame, ctx: &mut Context<Self>) {
        let whole = match frame {
            // Gemini sends its JSON messages as binary frames; either kind is read as text.
            Frame::Text(bytes) | Frame::Binary(bytes) => {
                if id == self.current {
                    self.link.fragments = Reassembly::default();
                }
                shell::text_of(bytes).map(Some)
            }
            Frame::Continuation(item) if id == self.current => {
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

    /// Connection `id` closed (or its stream ended): the one in use ends the session (its
    /// supervisor connects again); the one being opened fails its update with the reason the
    /// provider gave (Gemini refuses a setup by closing).
    fn on_close(&mut self, id: u64, reason: Option<String>, ctx: &mut Context<Self>) {
        self.retiring.retain(|(old, _)| *old != id);
        if self.opening.as_ref().is_some_and(|o| o.id == id) {
            let reason = reason.unwrap_or_else(|| "it closed before setupComplete".into());
            self.opening_failed(&reason, ctx);
        } else if id == self.current {
            tracing::info!(character = %self.link.core.character(), reason = ?reason, "gemini session closed by the server");
            ctx.stop();
        }
    }

    fn backoff(&self) -> Duration {
        let factor = 2u32.saturating_pow(self.attempt.saturating_sub(1));
        INITIAL_BACKOFF.saturating_mul(factor).min(MAX_BACKOFF)
    }
}

impl Shell for GeminiSession {
    fn link(&mut self) -> &mut Link {
        &mut self.link
    }

    fn reconnect(&mut self, _setup: String, ctx: &mut Context<Self>) {
        // The setup is written when the connection opens, with the handle of that moment.
        self.wanted = true;
        self.move_when_possible(ctx);
    }

    fn call_finished(&mut self, ctx: &mut Context<Self>) {
        self.move_when_possible(ctx);
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
            ctx.run_later(self.backoff(), |act, ctx| act.connect(ctx));
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
        self.opening = None;
        self.retiring.clear();
        self.wanted = false;
        self.resumable = false;
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
