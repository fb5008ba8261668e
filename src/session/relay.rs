//! `Relay`: an app's realtime connection, relayed to the model through the server
//! (`GET /v1/realtime`). One actor per open relay, on the HTTP worker that accepted it.
//!
//! Everything passes both ways in order and unchanged — text and binary frames byte for byte —
//! except: the app's `session.update` goes up with the registered tools merged into its `tools`;
//! the server's own `session.update`s, function-call outputs and `response.create`s go up between
//! the app's events (the outputs of calls a new user turn of the app's cancels just before that
//! turn); and the answers to the server's own updates (`session.updated`, or an `error` naming
//! one) do not come down, so the app's acknowledgements stay one per update it sent. Pings are
//! answered on each side. Either side closing closes the other with the same code and reason; an
//! app that stops reading is closed past [`MAX_APP_QUEUE_BYTES`].

use std::sync::Arc;

use actix::io::WriteHandler;
use actix::prelude::*;
use actix_http::ws::{CloseCode, CloseReason, Message, ProtocolError};
use awc::ws::{self, Frame};
use futures_util::stream::StreamExt;

use super::core::{Seen, SessionCore};
use super::outbox::{
    AppOutbox, AppSide, OutboxBody, RelaysApp, closed_by_server, on_app_frame, on_app_gone,
};
use super::realtime::app::AppEvent;
use super::realtime::{self, Realtime};
use super::settings::Dialect;
use super::settings::SessionSettings;
use super::shell::{self, Link, Reassembly, Shell, UpstreamSocket, Whole};
use super::{CloseSession, ConnectionState};
use crate::dispatch::Dispatcher;
use crate::domain::connection::ConnectionKind;
use crate::events::EventHub;

/// The close code sent to the app when the model's connection ended without a close frame or
/// broke (1014, bad gateway).
pub(crate) const UPSTREAM_LOST_CODE: u16 = 1014;

/// The app's stream of frames, as actix-ws decodes them.
pub(crate) type AppStream = actix_ws::MessageStream;

/// What an app asked for in the relay's query string.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RelayQuery {
    /// `character`, when given (not empty).
    pub character: Option<String>,
    /// Every other parameter (e.g. `model`), in order: they go upstream.
    pub upstream: Vec<(String, String)>,
}

impl RelayQuery {
    pub(crate) fn parse(query: &str) -> Self {
        let mut parsed = Self::default();
        for (key, value) in url::form_urlencoded::parse(query.as_bytes()) {
            if key == "character" {
                if parsed.character.is_none() && !value.is_empty() {
                    parsed.character = Some(value.into_owned());
                }
            } else {
                parsed.upstream.push((key.into_owned(), value.into_owned()));
            }
        }
        parsed
    }
}

/// `base` with the app's parameters: one that `base` already has is replaced, the others are
/// added, so an app may choose e.g. its `model`.
pub(crate) fn upstream_url(base: &str, parameters: &[(String, String)]) -> Result<String, String> {
    let mut url = url::Url::parse(base).map_err(|e| format!("{base:?} is not a URL: {e}"))?;
    if parameters.is_empty() {
        return Ok(url.into());
    }
    let kept: Vec<(String, String)> = url
        .query_pairs()
        .filter(|(k, _)| !parameters.iter().any(|(p, _)| p == k))
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    url.query_pairs_mut()
        .clear()
        .extend_pairs(kept.iter().chain(parameters));
    Ok(url.into())
}

/// A connected upstream websocket and where it goes.
pub(crate) struct Upstream {
    pub url: String,
    socket: UpstreamSocket,
}

/// Opens the model's side of a relay: the character's URL with the app's parameters, and its
/// configured key or, when it has none, the app's own `Authorization`.
pub(crate) async fn connect_upstream(
    settings: &SessionSettings,
    query: &RelayQuery,
    app_authorization: Option<String>,
) -> Result<Upstream, String> {
    let url = upstream_url(&settings.url, &query.upstream)?;
    let authorization = match settings.api_key().map_err(|e| format!("{e:#}"))? {
        Some(key) => Some(shell::bearer(&key)),
        None => app_authorization,
    };
    let socket = shell::connect(&url, authorization.as_deref())
        .await
        .map_err(|e| format!("could not connect to the model at {url}: {e}"))?;
    Ok(Upstream { url, socket })
}

pub(crate) struct Relay {
    link: Link,
    /// The dialect the app and the model speak: the app's `session.update` is rewritten in it.
    dialect: Dialect,
    app: AppOutbox,
    /// A message from the app arriving in fragments.
    from_app: Reassembly,
    /// Closing: frames still arriving are dropped.
    ending: bool,
}

impl Relay {
    /// Starts relaying between the app (`app_stream` in; the returned body, the websocket
    /// response's, out) and `upstream`. It starts with no tools: joining the character's
    /// sessions brings the current list. Its state and the calls it answers are announced on
    /// `events`.
    pub(crate) fn open(
        character: String,
        settings: &SessionSettings,
        upstream: Upstream,
        app_stream: AppStream,
        dispatcher: Dispatcher,
        events: EventHub,
    ) -> (Addr<Self>, OutboxBody) {
        let Upstream { url, socket } = upstream;
        let core = SessionCore::new(
            character,
            ConnectionKind::Relay,
            Box::new(Realtime(settings.dialect)),
            url,
            settings,
            events,
            Arc::from([]),
            false,
        );
        let dialect = settings.dialect;
        let (app, body) = AppOutbox::new();
        let relay = Relay::create(|ctx| {
            // Frames are handled in arrival order, each side's in its own stream; an unbounded
            // mailbox never parks the manager that sends tool lists.
            ctx.set_mailbox_capacity(0);
            let (sink, stream) = socket.split();
            ctx.add_stream(stream);
            ctx.add_stream(app_stream);
            let mut link = Link::new(core, dispatcher);
            link.open_sink(sink, ctx);
            Relay {
                link,
                dialect,
                app,
                from_app: Reassembly::default(),
                ending: false,
            }
        });
        (relay, body)
    }

    fn upstream_message(&mut self, message: Whole, ctx: &mut Context<Self>) {
        match message {
            Whole::Text(text) => {
                // Everything but the answers to the server's own updates reaches the app, as
                // it came (an error or an event the server cannot read may be the app's).
                if self.link.core.on_upstream(&text) != Seen::Ours {
                    self.send_to_app(Message::Text(text), ctx);
                }
                shell::run_effects(self, ctx);
            }
            Whole::Binary(bytes) => self.send_to_app(Message::Binary(bytes), ctx),
        }
    }
}

impl RelaysApp for Relay {
    fn app_side(&mut self) -> AppSide<'_> {
        AppSide {
            outbox: &mut self.app,
            fragments: &mut self.from_app,
            ending: &mut self.ending,
        }
    }

    fn app_message(&mut self, message: Whole, ctx: &mut Self::Context) {
        let message = match message {
            Whole::Text(text) => {
                let core = &mut self.link.core;
                match realtime::app::app_event(self.dialect, core.registered(), &text) {
                    AppEvent::Update(update) => match core.app_update(update) {
                        Some(merged) => ws::Message::Text(merged.into()),
                        None => ws::Message::Text(text),
                    },
                    AppEvent::Interrupts(interruption) => {
                        // The calls it abandons are answered (cancelled) before the app's new
                        // turn goes up, so the model reads them in order.
                        core.interrupted(interruption);
                        shell::run_effects(self, ctx);
                        ws::Message::Text(text)
                    }
                    AppEvent::Other => ws::Message::Text(text),
                }
            }
            Whole::Binary(bytes) => ws::Message::Binary(bytes),
        };
        shell::send_upstream(self, message, ctx);
    }
}

impl Shell for Relay {
    fn link(&mut self) -> &mut Link {
        &mut self.link
    }

    /// The app is told why, after what it has not read yet; the model's connection is dropped
    /// (a close frame would wait behind what it does not read).
    fn model_not_reading(&mut self, ctx: &mut Context<Self>) {
        tracing::warn!(character = %self.link.core.character(), limit = shell::MAX_UPSTREAM_QUEUE_BYTES, "closing a relay whose model stopped reading");
        let reason = CloseReason {
            code: CloseCode::Other(UPSTREAM_LOST_CODE),
            description: Some(shell::model_not_reading_reason()),
        };
        self.end(Some(Some(reason)), None, ctx);
    }
}

impl Actor for Relay {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        tracing::info!(character = %self.link.core.character(), upstream = %self.link.core.upstream(), "relay opened");
        self.link.core.connected();
        // The app sends its own settings: the tools go now only when there are any.
        self.link.core.sync_if_registered(None);
        shell::run_effects(self, ctx);
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        tracing::info!(character = %self.link.core.character(), "relay closed");
        // Whatever ended it, the app's side is not left open; the model's closes with the sink.
        self.app.close(None);
        self.link.sink = None;
        // Its running calls go with it, announced before it says it closed.
        self.link.disconnected();
        self.link.core.set_state(ConnectionState::Closed);
    }
}

impl WriteHandler<ProtocolError> for Relay {
    fn error(&mut self, err: ProtocolError, _: &mut Self::Context) -> Running {
        tracing::warn!(character = %self.link.core.character(), error = %err, "relay: writing to the model failed");
        self.app.close(Some(lost(&err.to_string())));
        Running::Stop
    }
}

/// The close the app gets when the model's side broke.
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

/// Frames from the model.
impl StreamHandler<Result<Frame, ProtocolError>> for Relay {
    fn handle(&mut self, frame: Result<Frame, ProtocolError>, ctx: &mut Self::Context) {
        if self.ending {
            // Waiting for the model to answer our close: its close ends the relay.
            if matches!(frame, Ok(Frame::Close(_)) | Err(_)) {
                ctx.stop();
            }
            return;
        }
        let whole = match frame {
            Ok(Frame::Text(bytes)) => shell::text_of(bytes).map(|t| Some(Whole::Text(t))),
            Ok(Frame::Binary(bytes)) => Ok(Some(Whole::Binary(bytes))),
            Ok(Frame::Continuation(item)) => self.link.fragments.push(item),
            Ok(Frame::Ping(payload)) => {
                shell::send_upstream(self, ws::Message::Pong(payload), ctx);
                Ok(None)
            }
            Ok(Frame::Pong(_)) => Ok(None),
            Ok(Frame::Close(reason)) => {
                tracing::debug!(character = %self.link.core.character(), ?reason, "relay: the model closed");
                // The same code and reason to the app; the close is echoed to complete the
                // handshake, and the model ends the connection.
                self.end(Some(reason.clone()), Some(reason), ctx);
                return;
            }
            Err(e) => Err(e.to_string()),
        };
        match whole {
            Ok(Some(message)) => self.upstream_message(message, ctx),
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(character = %self.link.core.character(), %error, "relay: the model's side broke");
                self.end(Some(Some(lost(&error))), Some(None), ctx);
            }
        }
    }

    fn finished(&mut self, ctx: &mut Self::Context) {
        if self.ending {
            ctx.stop();
        } else {
            self.end(Some(Some(lost("closed without a close frame"))), None, ctx);
        }
    }
}

/// Frames from the app.
impl StreamHandler<Result<Message, ProtocolError>> for Relay {
    fn handle(&mut self, message: Result<Message, ProtocolError>, ctx: &mut Self::Context) {
        on_app_frame(self, message, ctx);
    }

    fn finished(&mut self, ctx: &mut Self::Context) {
        on_app_gone(self, ctx);
    }
}

crate::session_handlers!(Relay);

impl Handler<CloseSession> for Relay {
    type Result = ResponseFuture<()>;

    /// The character was removed or rebuilt, its manager restarted, or the server is stopping:
    /// both sides are closed, going away. The reply comes when the relay is gone.
    fn handle(&mut self, _: CloseSession, ctx: &mut Self::Context) -> Self::Result {
        let reason = closed_by_server();
        self.end(Some(Some(reason.clone())), Some(Some(reason)), ctx);
        self.link.closed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_apps_parameters_go_upstream_and_character_stays_here() {
        let query = RelayQuery::parse("model=gpt-realtime-mini&character=Mio&x=a%20b");
        assert_eq!(query.character.as_deref(), Some("Mio"));
        assert_eq!(
            upstream_url(
                "wss://api.example/v1/realtime?model=gpt-realtime&k=1",
                &query.upstream
            )
            .unwrap(),
            "wss://api.example/v1/realtime?k=1&model=gpt-realtime-mini&x=a+b"
        );
        assert_eq!(
            upstream_url("ws://127.0.0.1:9/v1/realtime?model=m", &[]).unwrap(),
            "ws://127.0.0.1:9/v1/realtime?model=m"
        );
        assert_eq!(RelayQuery::parse("character=").character, None);
    }
}
