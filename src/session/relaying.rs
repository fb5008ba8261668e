//! What both relays — `Relay` (`relay.rs`, OpenAI Realtime) and `GeminiRelay`
//! (`live/relay.rs`) — do with the app's side and around it, whatever they speak: how one is
//! started on the worker that accepted the app ([`start`]), reading the app's frames and
//! answering its pings, writing to it through its [`AppOutbox`] (an app that stops reading is
//! closed), and ending: either side closing closes the other, with the same code and reason
//! where there is one, and the relay stops once the model has answered ([`while_ending`]) or
//! after the close grace. [`relay_handlers!`](crate::relay_handlers) writes the handlers of
//! the app's frames and of `CloseSession`; [`OpensRelay`] is what the relay routes open.

use actix::prelude::*;
use actix_http::ws::{CloseCode, CloseReason, Message, ProtocolError};
use bytes::Bytes;

use super::core::{Protocol, SessionCore};
use super::outbox::{
    AppOutbox, MAX_APP_QUEUE_BYTES, NOT_READING_CODE, OutboxBody, not_reading_reason,
};
use super::settings::SessionSettings;
use super::shell::{self, Link, Reassembly, Shell, Whole};
use super::wire::{FromUpstream, UpstreamSocket};
use super::{
    AddContext, CharacterTools, CloseSession, ConnectionState, OfferTools, SessionStatus, SyncTools,
};
use crate::dispatch::Dispatcher;
use crate::domain::connection::ConnectionKind;
use crate::events::EventHub;
use crate::policy::Policy;

/// The close code sent to the app when the model's connection ended without a close frame or
/// broke (1014, bad gateway).
pub(crate) const UPSTREAM_LOST_CODE: u16 = 1014;

/// The app's stream of frames, as actix-ws decodes them.
pub(crate) type AppStream = actix_ws::MessageStream;

/// A relay as its route opens it: the model's side is connected first (a refusal is the
/// app's 502), then the relay starts with the app's stream.
pub(crate) trait OpensRelay:
    RelaysApp
    + Handler<SyncTools>
    + Handler<SessionStatus>
    + Handler<CloseSession>
    + Handler<AddContext>
    + Handler<OfferTools>
{
    /// The model's side, connected.
    type Upstream;

    /// Where the model's side goes (the session's `upstream` in the listing).
    fn url(upstream: &Self::Upstream) -> String;

    /// Starts relaying between the app and `upstream` (see [`start`]).
    fn open(relay: RelayStart, upstream: Self::Upstream) -> (Addr<Self>, OutboxBody);
}

/// What a relay starts with, whatever it speaks: its character and settings, the app's
/// stream, and whom its calls and events go to.
pub(crate) struct RelayStart<'a> {
    pub character: String,
    pub settings: &'a SessionSettings,
    pub app_stream: AppStream,
    pub dispatcher: Dispatcher,
    pub events: EventHub,
    pub policy: Policy,
}

/// Starts a relay on this thread: a session of `protocol` on `socket` (the connection in use,
/// to `url`), the app read from the start's stream and written through the returned body (the
/// websocket response's); `make` builds the actor from its link and its outbox. It starts
/// with no tools: joining the character's sessions brings the current list. Its state and the
/// calls it answers are announced on the start's events.
pub(crate) fn start<A: RelaysApp>(
    relay: RelayStart,
    protocol: Box<dyn Protocol>,
    url: String,
    socket: UpstreamSocket,
    make: impl FnOnce(Link, AppOutbox) -> A,
) -> (Addr<A>, OutboxBody) {
    let RelayStart {
        character,
        settings,
        app_stream,
        dispatcher,
        events,
        policy,
    } = relay;
    let core = SessionCore::new(
        character,
        ConnectionKind::Relay,
        protocol,
        url,
        settings,
        events,
        policy,
        CharacterTools::none(),
        false,
    );
    let (app, body) = AppOutbox::new();
    let relay = A::create(|ctx| {
        // Frames are handled in arrival order, each side's in its own stream; an unbounded
        // mailbox never parks the manager that sends tool lists.
        ctx.set_mailbox_capacity(0);
        ctx.add_stream(app_stream);
        let mut link = Link::new(core, dispatcher);
        link.connected(socket, ctx);
        make(link, app)
    });
    (relay, body)
}

/// What a frame from a relay's app asks of the relay.
#[derive(Debug)]
enum FromApp {
    /// A whole message, to relay.
    Message(Whole),
    /// A ping: answered with this pong.
    Pong(Bytes),
    /// The app closed, with this reason.
    Closed(Option<CloseReason>),
    /// The app's connection ended under it (the app exited): as a stream that ended.
    Ended,
    /// A frame that breaks the protocol.
    Broke(String),
    /// Nothing to do (a part of a fragmented message, a pong).
    Nothing,
}

/// Reads one frame of an app's (fragments put together in `fragments`).
fn from_app(frame: Result<Message, ProtocolError>, fragments: &mut Reassembly) -> FromApp {
    let whole = match frame {
        Ok(Message::Text(text)) => Ok(Some(Whole::Text(text))),
        Ok(Message::Binary(bytes)) => Ok(Some(Whole::Binary(bytes))),
        Ok(Message::Continuation(item)) => fragments.push(item),
        Ok(Message::Ping(payload)) => return FromApp::Pong(payload),
        Ok(Message::Pong(_) | Message::Nop) => Ok(None),
        Ok(Message::Close(reason)) => return FromApp::Closed(reason),
        Err(ProtocolError::Io(_)) => return FromApp::Ended,
        Err(e) => Err(e.to_string()),
    };
    match whole {
        Ok(Some(message)) => FromApp::Message(message),
        Ok(None) => FromApp::Nothing,
        Err(error) => FromApp::Broke(error),
    }
}

/// The close both sides get when the app's connection broke.
fn app_broke() -> CloseReason {
    CloseReason {
        code: CloseCode::Protocol,
        description: Some("the app's connection broke".into()),
    }
}

/// The close the model gets when the app's connection ended without a close frame.
fn app_gone() -> CloseReason {
    CloseReason {
        code: CloseCode::Away,
        description: Some("the app's connection ended without a close frame".into()),
    }
}

/// The close both sides get when the server closes a relay (its character was removed or
/// rebuilt, its manager restarted, or the server is stopping).
pub(crate) fn closed_by_server() -> CloseReason {
    CloseReason {
        code: CloseCode::Away,
        description: Some("the character's sessions were closed by the server".into()),
    }
}

/// The close the app gets when the model's side broke (`why`).
pub(crate) fn lost(why: &str) -> CloseReason {
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

/// A relay, as its app's side of it: both relays read their app's frames, write to it and end
/// alike.
pub(crate) trait RelaysApp: Shell + StreamHandler<Result<Message, ProtocolError>> {
    /// The app's side: its outbox, and whether the relay is closing (its frames then dropped).
    fn app_side(&mut self) -> AppSide<'_>;
    /// A whole message from the app, to relay.
    fn app_message(&mut self, message: Whole, ctx: &mut Self::Context);

    /// Sends the app `message`; an app that stopped reading ends the relay.
    fn send_to_app(&mut self, message: Message, ctx: &mut Self::Context) {
        if self.app_side().outbox.send(message).is_err() {
            let reason = CloseReason {
                code: CloseCode::Other(NOT_READING_CODE),
                description: Some(not_reading_reason()),
            };
            tracing::warn!(character = %self.link().core.character(), limit = MAX_APP_QUEUE_BYTES, "closing a relay whose app stopped reading");
            self.app_side().outbox.abort(reason.clone());
            self.end(None, Some(Some(reason)), ctx);
        }
    }

    /// Ends the relay: `to_app` goes to the app, `to_upstream` upstream (`None`: that side is
    /// already gone).
    fn end(
        &mut self,
        to_app: Option<Option<CloseReason>>,
        to_upstream: Option<Option<CloseReason>>,
        ctx: &mut Self::Context,
    ) {
        let side = self.app_side();
        if std::mem::replace(side.ending, true) {
            return;
        }
        if let Some(reason) = to_app {
            side.outbox.close(reason);
        }
        match to_upstream {
            Some(reason) => shell::close_upstream(self, reason, ctx),
            None => ctx.stop(),
        }
    }
}

/// A relay's app side, as [`RelaysApp`] reaches it.
pub(crate) struct AppSide<'a> {
    pub outbox: &'a mut AppOutbox,
    pub fragments: &'a mut Reassembly,
    pub ending: &'a mut bool,
}

/// A frame from the app: relayed, answered (a ping), or the end of the relay.
pub(crate) fn on_app_frame<A: RelaysApp>(
    act: &mut A,
    frame: Result<Message, ProtocolError>,
    ctx: &mut A::Context,
) {
    let side = act.app_side();
    if *side.ending {
        return;
    }
    match from_app(frame, side.fragments) {
        FromApp::Message(message) => act.app_message(message, ctx),
        FromApp::Pong(payload) => act.send_to_app(Message::Pong(payload), ctx),
        FromApp::Closed(reason) => {
            tracing::debug!(character = %act.link().core.character(), ?reason, "relay: the app closed");
            act.end(Some(reason.clone()), Some(reason), ctx);
        }
        FromApp::Ended => {
            tracing::debug!(character = %act.link().core.character(), "relay: the app's connection ended");
            on_app_gone(act, ctx);
        }
        FromApp::Broke(error) => {
            tracing::warn!(character = %act.link().core.character(), %error, "relay: the app's side broke");
            act.end(Some(Some(app_broke())), Some(Some(app_broke())), ctx);
        }
        FromApp::Nothing => {}
    }
}

/// The app's stream ended without a close frame.
pub(crate) fn on_app_gone<A: RelaysApp>(act: &mut A, ctx: &mut A::Context) {
    act.end(Some(None), Some(Some(app_gone())), ctx);
}

/// While the relay ends, what the model sends is dropped, and the end of the connection in use
/// (its close answering the relay's, a broken frame, the end of its stream) stops it. Returns
/// whether the relay is ending.
pub(crate) fn while_ending<A: RelaysApp>(
    act: &mut A,
    item: &FromUpstream,
    ctx: &mut A::Context,
) -> bool {
    if !*act.app_side().ending {
        return false;
    }
    if act.link().wires.is_in_use(item.connection()) && item.ends() {
        ctx.stop();
    }
    true
}

/// More than the bound waits for the model: the app is told why, after what it has not read
/// yet; the model's connection is dropped (a close frame would wait behind what it does not
/// read).
pub(crate) fn model_not_reading<A: RelaysApp>(act: &mut A, ctx: &mut A::Context) {
    tracing::warn!(character = %act.link().core.character(), limit = shell::MAX_UPSTREAM_QUEUE_BYTES, "closing a relay whose model stopped reading");
    let reason = CloseReason {
        code: CloseCode::Other(UPSTREAM_LOST_CODE),
        description: Some(shell::model_not_reading_reason()),
    };
    act.end(Some(Some(reason)), None, ctx);
}

/// The relay stopped: whatever ended it, the app's side is not left open; its running calls go
/// with it, announced before it says it closed.
pub(crate) fn stopped<A: RelaysApp>(act: &mut A) {
    tracing::info!(character = %act.link().core.character(), "relay closed");
    act.app_side().outbox.close(None);
    act.link().gone();
    act.link().core.set_state(ConnectionState::Closed);
}

/// The handlers of a relay's app frames and of [`CloseSession`], the same for both relays.
#[macro_export]
#[doc(hidden)]
macro_rules! relay_handlers {
    ($actor:ty) => {
        /// Frames from the app.
        impl
            ::actix::StreamHandler<
                Result<::actix_http::ws::Message, ::actix_http::ws::ProtocolError>,
            > for $actor
        {
            fn handle(
                &mut self,
                message: Result<::actix_http::ws::Message, ::actix_http::ws::ProtocolError>,
                ctx: &mut Self::Context,
            ) {
                $crate::session::relaying::on_app_frame(self, message, ctx);
            }

            fn finished(&mut self, ctx: &mut Self::Context) {
                $crate::session::relaying::on_app_gone(self, ctx);
            }
        }

        impl ::actix::Handler<$crate::session::CloseSession> for $actor {
            type Result = ::actix::ResponseFuture<()>;

            /// The character was removed or rebuilt, its manager restarted, or the server is
            /// stopping: both sides are closed, going away. The reply comes when the relay is
            /// gone.
            fn handle(
                &mut self,
                _: $crate::session::CloseSession,
                ctx: &mut Self::Context,
            ) -> Self::Result {
                let reason = $crate::session::relaying::closed_by_server();
                $crate::session::relaying::RelaysApp::end(
                    self,
                    Some(Some(reason.clone())),
                    Some(Some(reason)),
                    ctx,
                );
                $crate::session::shell::Shell::link(self).closed()
            }
        }
    };
}
