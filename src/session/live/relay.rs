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

use actix::io::WriteHandler;
use actix::prelude::*;
use actix_http::ws::{CloseCode, CloseReason, Message, ProtocolError};
use awc::ws::{self, Frame};
use bytes::Bytes;
use futures_util::stream::StreamExt;

use super::moving::{self, From, Moves, Moving, Tagged};
use crate::dispatch::Dispatcher;
use crate::domain::connection::ConnectionKind;
use crate::events::EventHub;
use crate::session::core::{ModelEvent, Seen, SessionCore, SyncError};
use crate::session::gemini::app::app_setup;
use crate::session::gemini::read;
use crate::session::gemini::{API_KEY_HEADER, Gemini};
use crate::session::outbox::{
    AppOutbox, AppSide, OutboxBody, RelaysApp, closed_by_server, on_app_frame, on_app_gone,
};
use crate::session::relay::{AppStream, UPSTREAM_LOST_CODE};
use crate::session::settings::SessionSettings;
use crate::session::shell::{
    self, Link, MAX_UPSTREAM_QUEUE_BYTES, Reassembly, Shell, UpstreamSocket, Whole,
};
use crate::session::{CloseSession, ConnectionState};

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
    setup_answered: bool,
    /// The app asked for resumption updates itself.
    app_resumes: bool,
    /// What the app sent while the session was moving, in order, and its size.
    held: VecDeque<ws::Message>,
    held_bytes: usize,
    /// Closing: frames still arriving are dropped.
    ending: bool,
}

impl GeminiRelay {
    /// Starts relaying between the app (`app_stream` in; the returned body out) and
    /// `upstream`. It starts with no tools: joining the character's sessions brings them, and
    /// they go up with the app's setup.
    pub(crate) fn open(
        character: String,
        settings: &SessionSettings,
        upstream: GeminiUpstream,
        app_stream: AppStream,
        dispatcher: Dispatcher,
        events: EventHub,
    ) -> (Addr<Self>, OutboxBody) {
        let GeminiUpstream { url, socket, key } = upstream;
        let moves = Moves::new(key.map(|key| (API_KEY_HEADER.to_owned(), key)));
        let mut core = SessionCore::new(
            character,
            ConnectionKind::Relay,
            Box::new(Gemini::new(moves.handle.clone())),
            url,
            settings,
            events,
            std::sync::Arc::from([]),
            false,
        );
        core.resumes();
        let (app, body) = AppOutbox::new();
        let relay = GeminiRelay::create(|ctx| {
            ctx.set_mailbox_capacity(0);
            let mut moves = moves;
            let (sink, stream) = socket.split();
            moves.current = moves.number();
            moving::listen(moves.current, stream, ctx);
            ctx.add_stream(app_stream);
            let mut link = Link::new(core, dispatcher);
            link.open_sink(sink, ctx);
            GeminiRelay {
                link,
                moves,
                app,
                from_app: Reassembly::default(),
                setup_sent: false,
                setup_answered: false,
                app_resumes: false,
                held: VecDeque::new(),
                held_bytes: 0,
                ending: false,
            }
        });
        (relay, body)
    }

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
            From::Current => {}
        }
        let calls_before = self.link.core.has_running_calls();
        let seen = self.link.core.on_upstream(text);
        // Most messages are audio: looks at the text spare parsing them again.
        let answers_the_apps_setup = !self.setup_answered
            && text.contains("etup")
            && matches!(read::server_message(text), Ok(ModelEvent::Updated { .. }));
        let pass = if answers_the_apps_setup {
            // The app's setup's answer, whoever's update it settled; the setups of later
            // connections are answered on them, and the app sees none.
            self.setup_answered = true;
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

    fn on_frame(&mut self, id: u64, frame: Frame, ctx: &mut Context<Self>) {
        if self.ending {
            if id == self.moves.current && matches!(frame, Frame::Close(_)) {
                ctx.stop();
            }
            return;
        }
        let (text, message) = match frame {
            Frame::Text(bytes) => match shell::text_of(bytes) {
                Ok(text) => (text.clone(), Message::Text(text)),
                Err(error) => return self.broke(id, &error, ctx),
            },
            Frame::Binary(bytes) => match shell::text_of(bytes.clone()) {
                Ok(text) => (text, Message::Binary(bytes)),
                // Not JSON text: the API's to say, passed on as it came.
                Err(_) if id == self.moves.current => {
                    return self.send_to_app(Message::Binary(bytes), ctx);
                }
                Err(_) => return,
            },
            Frame::Continuation(item) if id == self.moves.current => {
                match self.link.fragments.push(item) {
                    Ok(Some(Whole::Text(text))) => (text.clone(), Message::Text(text)),
                    Ok(Some(Whole::Binary(bytes))) => match shell::text_of(bytes.clone()) {
                        Ok(text) => (text, Message::Binary(bytes)),
                        Err(_) => return self.send_to_app(Message::Binary(bytes), ctx),
                    },
                    Ok(None) => return,
                    Err(error) => return self.broke(id, &error, ctx),
                }
            }
            Frame::Ping(payload) if id == self.moves.current => {
                return shell::send_upstream(self, ws::Message::Pong(payload), ctx);
            }
            Frame::Continuation(_) | Frame::Ping(_) | Frame::Pong(_) => return,
            Frame::Close(reason) => {
                let why = reason.as_ref().and_then(|r| r.description.clone());
                if moving::closed(self, id, why, ctx) {
                    tracing::debug!(character = %self.link.core.character(), ?reason, "gemini relay: the API closed");
                    self.end(Some(reason.clone()), Some(reason), ctx);
                }
                return;
            }
        };
        self.upstream_message(id, &text, message, ctx);
    }

    /// The connection `id` broke (a protocol error, or its end without a close frame).
    fn broke(&mut self, id: u64, why: &str, ctx: &mut Context<Self>) {
        if moving::closed(self, id, Some(why.to_owned()), ctx) && !self.ending {
            tracing::warn!(character = %self.link.core.character(), error = %why, "gemini relay: the API's side broke");
            self.end(Some(Some(lost(why))), None, ctx);
        } else if id == self.moves.current {
            ctx.stop();
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

/// The close the app gets when the API's side broke.
fn lost(why: &str) -> CloseReason {
    let mut description = format!("model session connection lost: {why}");
    // A close reason must fit a control frame (123 bytes of text).
    while description.len() > 123 {
        description.pop();
    }
    CloseReason {
        code: CloseCode::Other(UPSTREAM_LOST_CODE),
        description: Some(description),
    }
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

    fn reconnect(&mut self, _setup: String, ctx: &mut Context<Self>) {
        self.moves.wanted = true;
        moving::move_when_possible(self, ctx);
    }

    fn call_finished(&mut self, ctx: &mut Context<Self>) {
        moving::move_when_possible(self, ctx);
    }

    /// The app is told why, after what it has not read yet; the API's connection is dropped.
    fn model_not_reading(&mut self, ctx: &mut Context<Self>) {
        tracing::warn!(character = %self.link.core.character(), limit = shell::MAX_UPSTREAM_QUEUE_BYTES, "closing a gemini relay whose model stopped reading");
        let reason = CloseReason {
            code: CloseCode::Other(UPSTREAM_LOST_CODE),
            description: Some(shell::model_not_reading_reason()),
        };
        self.end(Some(Some(reason)), None, ctx);
    }
}

impl Actor for GeminiRelay {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        tracing::info!(character = %self.link.core.character(), upstream = %self.link.core.upstream(), "gemini relay opened");
        self.link.core.connected();
        // The tools go in the app's setup: nothing goes up before it.
        let timeout = self.link.core.sync_timeout();
        self.link
            .core
            .hold_until_described(None, SyncError::NoSetup(timeout));
        shell::run_effects(self, ctx);
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        tracing::info!(character = %self.link.core.character(), "gemini relay closed");
        self.app.close(None);
        self.link.sink = None;
        self.moves.reset();
        self.link.disconnected();
        self.link.core.set_state(ConnectionState::Closed);
    }
}

impl WriteHandler<ProtocolError> for GeminiRelay {
    fn error(&mut self, err: ProtocolError, _: &mut Self::Context) -> Running {
        // A connection left behind may fail as it closes; the one in use breaking is seen on
        // its read side.
        tracing::debug!(character = %self.link.core.character(), error = %err, "gemini relay: writing to the API failed");
        Running::Continue
    }

    fn finished(&mut self, _: &mut Self::Context) {}
}

impl Handler<Tagged> for GeminiRelay {
    type Result = ();

    fn handle(&mut self, tagged: Tagged, ctx: &mut Self::Context) {
        match tagged {
            Tagged::Frame(id, Ok(frame)) => self.on_frame(id, frame, ctx),
            Tagged::Frame(id, Err(e)) => self.broke(id, &e.to_string(), ctx),
            Tagged::Ended(id) => {
                if self.ending && id == self.moves.current {
                    ctx.stop();
                } else {
                    self.broke(id, "closed without a close frame", ctx);
                }
            }
        }
    }
}

/// Frames from the app.
impl StreamHandler<Result<Message, ProtocolError>> for GeminiRelay {
    fn handle(&mut self, message: Result<Message, ProtocolError>, ctx: &mut Self::Context) {
        on_app_frame(self, message, ctx);
    }

    fn finished(&mut self, ctx: &mut Self::Context) {
        on_app_gone(self, ctx);
    }
}

crate::session_handlers!(GeminiRelay);

impl Handler<CloseSession> for GeminiRelay {
    type Result = ResponseFuture<()>;

    /// Both sides are closed, going away. The reply comes when the relay is gone.
    fn handle(&mut self, _: CloseSession, ctx: &mut Self::Context) -> Self::Result {
        let reason = closed_by_server();
        self.end(Some(Some(reason.clone())), Some(Some(reason)), ctx);
        self.link.closed()
    }
}
