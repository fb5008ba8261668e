//! What both Gemini Live actors (the server's own connection and an app's relay) do to move a
//! session to a new connection: keep the latest resumable handle (shared with the adapter,
//! which puts it in every setup), wait for a moment with no call running and a resumable
//! handle, open a connection that resumes the session with the new setup, move to it when its
//! `setupComplete` comes (which acknowledges the update), and retire the one left behind (its
//! close sent, both halves dropped once the API answers or after the close grace: see
//! [`Wires`](crate::session::wire::Wires)). A connection being opened that is given up is
//! retired alike, or its connect cancelled. Also theirs: the bound on the first setup of a
//! connection ([`bound_first_setup`]), and reading what the API sends ([`hear`]).

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use actix::prelude::*;
use actix_http::ws::{CloseCode, CloseReason, Message};
use awc::ws::{self, Frame};
use bytes::Bytes;
use bytestring::ByteString;
use futures_util::SinkExt;

use super::super::core::ModelEvent;
use super::super::gemini::Resumption;
use super::super::gemini::read::{self, Signals};
use super::super::shell::{self, MODEL_CONNECT_TIMEOUT, Reassembly, Shell, Whole};
use super::super::wire::FromUpstream;
use crate::domain::peer_text;

/// Why a new tool list waits: the words `failed_roles` gives when no moment comes in time.
const CALL_RUNNING: &str = "a tool call is running";
const NO_HANDLE: &str = "the session has not given a resumable handle yet";

/// How long after the sync timeout a connection whose first setup is unanswered is given up:
/// the update's failure (`no setupComplete within N s`) is reported first, with its reason,
/// and a connection the API never set up is of no use to anyone.
const SETUP_GRACE: Duration = Duration::from_secs(1);

/// A Gemini session's moves: the connection being opened, the handle to resume from.
pub(crate) struct Moves {
    /// The latest resumable handle, shared with the adapter, which puts it in every setup.
    pub handle: Resumption,
    /// The session said it can be resumed now (its latest `sessionResumptionUpdate`).
    pub resumable: bool,
    /// A new connection is wanted: new tools, or a `goAway`.
    pub wanted: bool,
    /// The connection being opened to move to.
    opening: Option<Opening>,
    /// The API key header each connection carries.
    header: Option<(String, String)>,
    /// The connection in use answered its first setup.
    set_up: bool,
}

/// A connection being opened: its number, and its connect while it runs.
struct Opening {
    id: u64,
    dialing: SpawnHandle,
    connected: bool,
}

/// Where a frame came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum From {
    /// The connection in use.
    Current,
    /// The connection in use, answering its first setup (the app's, behind a relay).
    SetUp,
    /// The connection being opened, whose `setupComplete` just moved the session to it.
    Moved,
    /// The connection being opened, before its `setupComplete`: not the session's yet.
    Elsewhere,
}

impl Moves {
    pub(crate) fn new(header: Option<(String, String)>) -> Self {
        Self {
            handle: Rc::new(RefCell::new(None)),
            resumable: false,
            wanted: false,
            opening: None,
            header,
            set_up: false,
        }
    }

    pub(crate) fn header(&self) -> Option<(&str, &str)> {
        self.header.as_ref().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// Whether a connection is being opened (what the app sends meanwhile is held).
    pub(crate) fn is_opening(&self) -> bool {
        self.opening.is_some()
    }

    /// The actor stopped, or starts again: the connections went with its context.
    pub(crate) fn reset(&mut self) {
        self.opening = None;
        self.wanted = false;
        self.resumable = false;
        self.set_up = false;
    }
}

/// An actor that moves its Gemini session between connections.
pub(crate) trait Moving: Shell {
    fn moves(&mut self) -> &mut Moves;

    /// The session moved to a new connection.
    fn moved(&mut self, ctx: &mut Context<Self>) {
        let _ = ctx;
    }

    /// The connection being opened was given up: the session stays where it is.
    fn stayed(&mut self, ctx: &mut Context<Self>) {
        let _ = ctx;
    }

    /// The connection in use never answered its first setup (`reason` says so).
    fn not_set_up(&mut self, reason: String, ctx: &mut Context<Self>);
}

/// What a Gemini actor hears on one of its connections, read out of its frames.
pub(crate) enum Heard {
    /// A whole message: its text, and the message to pass on as it came (text or binary).
    Message(ByteString, Message),
    /// A binary message of the connection in use that is not text: passed on as it came.
    Bytes(Bytes),
    /// A ping on the connection in use.
    Ping(Bytes),
    /// The connection closed, with the API's reason.
    Closed(Option<CloseReason>),
    /// The connection broke: a broken frame or message, or its end without a close.
    Broke(String),
    /// Nothing to act on (part of a message, a pong, a frame of a connection being opened
    /// that is not a message).
    Nothing,
}

/// Reads one frame (or the end) of connection `id` (Gemini sends its JSON messages in binary
/// frames: either kind is read as text); a message in fragments is put together only on the
/// connection in use.
pub(crate) fn hear<A: Moving>(act: &mut A, item: FromUpstream) -> Heard {
    let (id, frame) = match item {
        FromUpstream::Frame(id, Ok(frame)) => (id, frame),
        FromUpstream::Frame(_, Err(e)) => return Heard::Broke(e.to_string()),
        FromUpstream::Ended(_) => return Heard::Broke("closed without a close frame".into()),
    };
    let in_use = act.link().wires.is_in_use(id);
    let whole = match frame {
        Frame::Text(bytes) => Whole::Text(match shell::text_of(bytes) {
            Ok(text) => text,
            Err(error) => return Heard::Broke(error),
        }),
        Frame::Binary(bytes) => Whole::Binary(bytes),
        Frame::Continuation(item) if in_use => match act.link().fragments.push(item) {
            Ok(Some(whole)) => whole,
            Ok(None) => return Heard::Nothing,
            Err(error) => return Heard::Broke(error),
        },
        Frame::Ping(payload) if in_use => return Heard::Ping(payload),
        Frame::Continuation(_) | Frame::Ping(_) | Frame::Pong(_) => return Heard::Nothing,
        Frame::Close(reason) => return Heard::Closed(reason),
    };
    match whole {
        Whole::Text(text) => Heard::Message(text.clone(), Message::Text(text)),
        Whole::Binary(bytes) => match shell::text_of(bytes.clone()) {
            Ok(text) => Heard::Message(text, Message::Binary(bytes)),
            Err(_) if in_use => Heard::Bytes(bytes),
            Err(_) => Heard::Nothing,
        },
    }
}

/// What a text message of connection `id` means for the moves: a new handle is kept, a
/// `goAway` returned; the `setupComplete` of the connection being opened moves the session to
/// it.
pub(crate) fn on_text<A: Moving>(
    act: &mut A,
    id: u64,
    text: &str,
    ctx: &mut Context<A>,
) -> (From, Option<Duration>) {
    let Signals {
        resumption,
        go_away,
    } = read::signals(text);
    let current = act.link().wires.is_in_use(id);
    let moves = act.moves();
    let opening = moves.opening.as_ref().is_some_and(|o| o.id == id);
    // Handles count from the connection in use and the one being opened, never from one left
    // behind (a late one would be older than the session's).
    if let Some((handle, resumable)) = resumption.filter(|_| current || opening) {
        if let Some(handle) = handle {
            *moves.handle.borrow_mut() = Some(handle);
            act.link().core.handle_received();
        }
        if current {
            act.moves().resumable = resumable;
        }
    }
    let moves = act.moves();
    if current {
        // Most messages are audio: the text is parsed again only when it can be the answer.
        if !moves.set_up
            && text.contains("etup")
            && matches!(read::server_message(text), Ok(ModelEvent::Updated { .. }))
        {
            moves.set_up = true;
            return (From::SetUp, go_away);
        }
        return (From::Current, go_away);
    }
    if !opening || !matches!(read::server_message(text), Ok(ModelEvent::Updated { .. })) {
        return (From::Elsewhere, None);
    }
    moves.opening = None;
    move_to(act, id, ctx);
    (From::Moved, None)
}

/// The new connection took the setup: the session moves to it, and the old one is retired.
fn move_to<A: Moving>(act: &mut A, id: u64, ctx: &mut Context<A>) {
    let link = act.link();
    if let Some(old) = link.wires.use_connection(id) {
        link.wires.retire(old, Some(CloseCode::Normal.into()), ctx);
    }
    // A message the old connection left in fragments is not the new one's.
    link.fragments = Reassembly::default();
    link.core.switched();
    tracing::info!(character = %link.core.character(), "gemini session moved to a new connection");
    act.moves().resumable = false;
    act.moved(ctx);
}

/// The first setup went up on connection `id`: if it is still unanswered when the sync timeout
/// and [`SETUP_GRACE`] have passed, the connection is of no use ([`Moving::not_set_up`]).
pub(crate) fn bound_first_setup<A: Moving>(act: &mut A, id: u64, ctx: &mut Context<A>) {
    act.moves().set_up = false;
    let bound = act.link().core.sync_timeout() + SETUP_GRACE;
    ctx.run_later(bound, move |act, ctx| {
        if act.link().wires.is_in_use(id) && !act.moves().set_up {
            let reason = format!("no setupComplete within {} s", bound.as_secs_f64());
            tracing::warn!(character = %act.link().core.character(), %reason, "giving up a gemini connection that was never set up");
            act.not_set_up(reason, ctx);
        }
    });
}

/// The session wants a new connection (new tools): opened at the next moment it can be.
pub(crate) fn want_new_connection<A: Moving>(act: &mut A, ctx: &mut Context<A>) {
    act.moves().wanted = true;
    move_when_possible(act, ctx);
}

/// Opens the connection to move to, when the moment has come: no call running, and a handle
/// the session said it can be resumed from. Otherwise the update waits, and says why.
pub(crate) fn move_when_possible<A: Moving>(act: &mut A, ctx: &mut Context<A>) {
    let connected = act.link().core.is_connected();
    let moves = act.moves();
    if !moves.wanted || moves.opening.is_some() || !connected {
        return;
    }
    let resumable = moves.resumable && moves.handle.borrow().is_some();
    let blocked = if act.link().core.has_running_calls() {
        Some(CALL_RUNNING)
    } else if !resumable {
        Some(NO_HANDLE)
    } else {
        None
    };
    if let Some(reason) = blocked {
        act.link().core.update_waits(reason.to_owned());
        return;
    }
    let setup = act.link().core.current_update();
    let url = act.link().core.upstream().to_owned();
    let planned = act.link().wires.number();
    let moves = act.moves();
    moves.wanted = false;
    let header = moves.header.clone();
    tracing::debug!(character = %act.link().core.character(), "opening a gemini connection that resumes the session");
    // A connection that never takes its setup is given up, so the session (and what a relay's
    // app sends meanwhile) does not wait on it without end.
    let bound = MODEL_CONNECT_TIMEOUT + act.link().core.sync_timeout();
    ctx.run_later(bound, move |act, ctx| {
        if act
            .moves()
            .opening
            .as_ref()
            .is_some_and(|o| o.id == planned)
        {
            let reason = format!("no setupComplete within {} s", bound.as_secs_f64());
            opening_failed(act, &reason, ctx);
        }
    });
    let dialing = async move {
        let header = header.as_ref().map(|(n, v)| (n.as_str(), v.as_str()));
        let mut framed = shell::connect_with(&url, header).await?;
        framed
            .send(ws::Message::Text(setup.into()))
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(framed)
    }
    .into_actor(act)
    .map(move |result, act, ctx| {
        let Some(opening) = act.moves().opening.as_mut().filter(|o| o.id == planned) else {
            // Given up meanwhile: the connection is dropped here, unused.
            return;
        };
        match result {
            Ok(framed) => {
                opening.connected = true;
                act.link().wires.open(planned, framed, ctx);
            }
            Err(error) => opening_failed(act, &format!("could not connect: {error}"), ctx),
        }
    });
    let dialing = ctx.spawn(dialing);
    act.moves().opening = Some(Opening {
        id: planned,
        dialing,
        connected: false,
    });
}

/// The connection being opened is given up: its connect is cancelled, or, once connected, it
/// is retired.
fn give_up_opening<A: Moving>(act: &mut A, ctx: &mut Context<A>) -> bool {
    let Some(opening) = act.moves().opening.take() else {
        return false;
    };
    if opening.connected {
        act.link().wires.retire(opening.id, None, ctx);
    } else {
        ctx.cancel_future(opening.dialing);
    }
    true
}

/// The connection being opened failed before it took the setup: the update fails.
fn opening_failed<A: Moving>(act: &mut A, reason: &str, ctx: &mut Context<A>) {
    give_up_opening(act, ctx);
    tracing::warn!(character = %act.link().core.character(), %reason, "a new gemini connection failed");
    act.link()
        .core
        .update_connection_failed(format!("the new connection failed: {reason}"));
    shell::run_effects(act, ctx);
    act.stayed(ctx);
}

/// The model called tools on the connection in use while another was being opened: that one
/// would resume the session from before the calls. It is dropped, and opened again at the next
/// moment.
pub(crate) fn abandon_opening<A: Moving>(act: &mut A, ctx: &mut Context<A>) {
    if give_up_opening(act, ctx) {
        act.moves().wanted = true;
        act.stayed(ctx);
    }
}

/// Connection `id` closed or broke (`reason`). Returns whether it was the one in use; the one
/// being opened fails its update with the reason the API gave (Gemini refuses a setup by
/// closing) and is retired.
pub(crate) fn closed<A: Moving>(
    act: &mut A,
    id: u64,
    reason: Option<String>,
    ctx: &mut Context<A>,
) -> bool {
    if act.moves().opening.as_ref().is_some_and(|o| o.id == id) {
        // The API's text, kept in the session's report and quoted by answers and events.
        let reason = reason.map_or_else(
            || "it closed before setupComplete".into(),
            peer_text::bounded,
        );
        opening_failed(act, &reason, ctx);
        return false;
    }
    act.link().wires.is_in_use(id)
}
