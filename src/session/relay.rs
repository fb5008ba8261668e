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

use actix::prelude::*;
use actix_http::ws::{Message, ProtocolError};
use awc::ws::{self, Frame};

use super::core::Seen;
use super::outbox::{AppOutbox, OutboxBody};
use super::realtime::app::AppEvent;
use super::realtime::{self, Realtime};
use super::relaying::{self, AppSide, OpensRelay, RelayStart, RelaysApp, lost};
use super::settings::{Dialect, SessionSettings};
use super::shell::{self, Link, Reassembly, Shell, Whole};
use super::wire::{FromUpstream, UpstreamSocket};

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

impl OpensRelay for Relay {
    type Upstream = Upstream;

    fn url(upstream: &Upstream) -> String {
        upstream.url.clone()
    }

    fn open(relay: RelayStart, upstream: Upstream) -> (Addr<Self>, OutboxBody) {
        let Upstream { url, socket } = upstream;
        let dialect = relay.settings.dialect;
        let protocol = Box::new(Realtime(dialect));
        relaying::start(relay, protocol, url, socket, |link, app| Relay {
            link,
            dialect,
            app,
            from_app: Reassembly::default(),
            ending: false,
        })
    }
}

impl Relay {
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

    /// Frames from the model.
    fn upstream(&mut self, item: FromUpstream, ctx: &mut Context<Self>) {
        if relaying::while_ending(self, &item, ctx) {
            return;
        }
        let whole = match item {
            FromUpstream::Frame(_, Ok(Frame::Text(bytes))) => {
                shell::text_of(bytes).map(|t| Some(Whole::Text(t)))
            }
            FromUpstream::Frame(_, Ok(Frame::Binary(bytes))) => Ok(Some(Whole::Binary(bytes))),
            FromUpstream::Frame(_, Ok(Frame::Continuation(item))) => self.link.fragments.push(item),
            FromUpstream::Frame(_, Ok(Frame::Ping(payload))) => {
                shell::send_upstream(self, ws::Message::Pong(payload), ctx);
                Ok(None)
            }
            FromUpstream::Frame(_, Ok(Frame::Pong(_))) => Ok(None),
            FromUpstream::Frame(_, Ok(Frame::Close(reason))) => {
                tracing::debug!(character = %self.link.core.character(), ?reason, "relay: the model closed");
                // The same code and reason to the app; the close is echoed to complete the
                // handshake, and the model ends the connection.
                self.end(Some(reason.clone()), Some(reason), ctx);
                return;
            }
            FromUpstream::Frame(_, Err(e)) => Err(e.to_string()),
            FromUpstream::Ended(_) => {
                self.end(Some(Some(lost("closed without a close frame"))), None, ctx);
                return;
            }
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

    fn model_not_reading(&mut self, ctx: &mut Context<Self>) {
        relaying::model_not_reading(self, ctx);
    }
}

impl Actor for Relay {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        tracing::info!(character = %self.link.core.character(), upstream = %self.link.core.upstream(), "relay opened");
        // The app sends its own settings: the tools go now only when there are any.
        self.link.core.sync_if_registered(None);
        shell::run_effects(self, ctx);
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        relaying::stopped(self);
    }
}

impl actix::io::WriteHandler<ProtocolError> for Relay {
    fn error(&mut self, err: ProtocolError, _: &mut Self::Context) -> Running {
        tracing::warn!(character = %self.link.core.character(), error = %err, "relay: writing to the model failed");
        self.app.close(Some(lost(&err.to_string())));
        Running::Stop
    }
}

crate::session_handlers!(Relay);
crate::relay_handlers!(Relay);

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
