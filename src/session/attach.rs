//! `Attachment`: a second websocket to a live call the app started elsewhere — a browser over
//! WebRTC or a phone line over SIP — joined with `POST /api/sessions/attach` (OpenAI's GA
//! Realtime API accepts `wss://…/v1/realtime?call_id=…` for this).
//!
//! It reads the call's tools from the session's own events (`session.created`, then every
//! `session.updated`) before it sends its update, so the app's tools are kept; it answers the
//! calls of registered tools and leaves the app's to the app. It ends when the call ends (the
//! socket closes) or on detach; it does not reconnect.

use actix::io::WriteHandler;
use actix::prelude::*;
use awc::error::WsProtocolError;
use awc::ws::{self, Frame};
use futures_util::stream::StreamExt;
use std::sync::Arc;
use tokio::sync::oneshot;

use super::core::{CLOSED_BEFORE_ACK, SessionCore, Transport};
use super::settings::SessionSettings;
use super::shell::{self, Link, Shell, Whole};
use super::{CloseSession, ConnectionState, SessionStatus, SyncTools};
use crate::dispatch::Dispatcher;
use crate::domain::tool::SharedTool;
use crate::events::EventHub;

/// How joining a call went: `Err` when the websocket could not be opened, otherwise the outcome
/// of the first tool update (`Err` says why the call did not take the tools).
pub type Joined = Result<Result<(), String>, String>;

pub struct Attachment {
    link: Link,
    authorization: Option<String>,
    /// Who waits for the join, until it is settled.
    joined: Option<oneshot::Sender<Joined>>,
    /// A close frame was sent: the call's answer ends the attachment.
    closing: bool,
}

impl Attachment {
    /// Joins the call at `url` for `character`; the receiver hears how it went. Its state and
    /// the calls it answers are announced on `events`.
    pub fn launch(
        character: String,
        settings: &SessionSettings,
        url: String,
        api_key: Option<String>,
        dispatcher: Dispatcher,
        events: EventHub,
        tools: Arc<[SharedTool]>,
    ) -> (Addr<Self>, oneshot::Receiver<Joined>) {
        let (joined, outcome) = oneshot::channel();
        let core = SessionCore::new(character, Transport::Attach, url, settings, events, tools);
        let attachment = Attachment {
            link: Link::new(core, dispatcher),
            authorization: api_key.as_deref().map(shell::bearer),
            joined: Some(joined),
            closing: false,
        };
        let addr = Attachment::create(|ctx| {
            ctx.set_mailbox_capacity(0);
            attachment
        });
        (addr, outcome)
    }
}

impl Shell for Attachment {
    fn link(&mut self) -> &mut Link {
        &mut self.link
    }
}

impl Actor for Attachment {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        // It starts out connecting: say so, as every later state is said.
        self.link.core.announce();
        let url = self.link.core.upstream().to_owned();
        let authorization = self.authorization.clone();
        ctx.spawn(
            async move { shell::connect(&url, authorization.as_deref()).await }
                .into_actor(self)
                .map(|result, act, ctx| match result {
                    Ok(framed) => {
                        let (sink, stream) = framed.split();
                        ctx.add_stream(stream);
                        tracing::info!(character = %act.link.core.character(), url = %act.link.core.upstream(), "attached to a call");
                        let (first, settled) = oneshot::channel();
                        act.link.connected(sink, Some(first), ctx);
                        shell::run_effects(act, ctx);
                        if let Some(joined) = act.joined.take() {
                            actix::spawn(async move {
                                let outcome =
                                    settled.await.unwrap_or(Err(CLOSED_BEFORE_ACK.to_owned()));
                                let _ = joined.send(Ok(outcome));
                            });
                        }
                    }
                    Err(error) => {
                        if let Some(joined) = act.joined.take() {
                            let _ = joined.send(Err(error));
                        }
                        ctx.stop();
                    }
                }),
        );
    }

    fn stopped(&mut self, _: &mut Self::Context) {
        tracing::info!(character = %self.link.core.character(), url = %self.link.core.upstream(), "attachment ended");
        self.link.sink = None;
        self.link.core.set_state(ConnectionState::Closed);
        self.link.core.disconnected();
    }
}

impl WriteHandler<WsProtocolError> for Attachment {
    fn error(&mut self, err: WsProtocolError, _: &mut Self::Context) -> Running {
        tracing::warn!(character = %self.link.core.character(), error = %err, "attachment write failed");
        Running::Stop
    }
}

impl StreamHandler<Result<Frame, WsProtocolError>> for Attachment {
    fn handle(&mut self, frame: Result<Frame, WsProtocolError>, ctx: &mut Self::Context) {
        let whole = match frame {
            Ok(Frame::Text(bytes)) => shell::text_of(bytes).map(|t| Some(Whole::Text(t))),
            // A broken fragmented message is a protocol error, as in the client: the attachment
            // ends rather than buffer what the call sends.
            Ok(Frame::Continuation(item)) => match self.link.fragments.push(item) {
                Err(error) => {
                    tracing::warn!(character = %self.link.core.character(), %error, "attachment protocol error");
                    ctx.stop();
                    return;
                }
                whole => whole,
            },
            Ok(Frame::Ping(payload)) => {
                shell::send_upstream(self, ws::Message::Pong(payload), ctx);
                Ok(None)
            }
            Ok(Frame::Binary(_) | Frame::Pong(_)) => Ok(None),
            Ok(Frame::Close(reason)) => {
                tracing::debug!(character = %self.link.core.character(), ?reason, "the call ended");
                if self.closing {
                    ctx.stop();
                } else {
                    self.closing = true;
                    shell::close_upstream(self, reason, ctx);
                }
                return;
            }
            Err(e) => {
                tracing::warn!(character = %self.link.core.character(), error = %e, "attachment protocol error");
                ctx.stop();
                return;
            }
        };
        match whole {
            Ok(Some(Whole::Text(text))) => {
                self.link.core.from_upstream(&text);
                shell::run_effects(self, ctx);
            }
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(character = %self.link.core.character(), %error, "ignoring a malformed message from the call");
            }
        }
    }

    fn finished(&mut self, ctx: &mut Self::Context) {
        ctx.stop();
    }
}

impl Handler<SyncTools> for Attachment {
    type Result = ResponseFuture<Result<(), String>>;

    fn handle(&mut self, SyncTools(tools): SyncTools, ctx: &mut Self::Context) -> Self::Result {
        shell::sync_tools(self, tools, ctx)
    }
}

impl Handler<SessionStatus> for Attachment {
    type Result = MessageResult<SessionStatus>;

    fn handle(&mut self, _: SessionStatus, _: &mut Self::Context) -> Self::Result {
        MessageResult(self.link.core.report())
    }
}

impl Handler<CloseSession> for Attachment {
    type Result = ResponseFuture<()>;

    /// The reply comes when the attachment is gone.
    fn handle(&mut self, _: CloseSession, ctx: &mut Self::Context) -> Self::Result {
        if !self.closing {
            self.closing = true;
            shell::close_upstream(self, Some(ws::CloseCode::Normal.into()), ctx);
        }
        self.link.closed()
    }
}
