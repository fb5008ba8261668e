//! What both Gemini Live actors (the server's own connection and an app's relay) do to move a
//! session to a new connection: keep the latest resumable handle (shared with the adapter,
//! which puts it in every setup), wait for a moment with no call running and a resumable
//! handle, open a connection that resumes the session with the new setup, move to it when its
//! `setupComplete` comes (which acknowledges the update), and close the one left behind. Each
//! connection is numbered, and its frames come to the actor tagged with its number
//! ([`Tagged`]), so the frames of the one left behind or the one being opened are told apart.

use std::cell::RefCell;
use std::rc::Rc;

use actix::prelude::*;
use awc::error::WsProtocolError;
use awc::ws::{self, Frame};
use futures_util::SinkExt;
use futures_util::stream::{self, StreamExt};

use super::super::core::ModelEvent;
use super::super::gemini::Resumption;
use super::super::gemini::read::{self, Signals};
use super::super::shell::{self, MODEL_CONNECT_TIMEOUT, Shell, UpstreamHalf, UpstreamSink};

/// Why a new tool list waits: the words `failed_roles` gives when no moment comes in time.
const CALL_RUNNING: &str = "a tool call is running";
const NO_HANDLE: &str = "the session has not given a resumable handle yet";

/// A frame of connection `0`, or its end.
pub(crate) enum Tagged {
    Frame(u64, Result<Frame, WsProtocolError>),
    Ended(u64),
}

impl Message for Tagged {
    type Result = ();
}

/// A Gemini session's connections: the one in use, the one being opened, those left behind.
pub(crate) struct Moves {
    /// The latest resumable handle, shared with the adapter, which puts it in every setup.
    pub handle: Resumption,
    /// The session said it can be resumed now (its latest `sessionResumptionUpdate`).
    pub resumable: bool,
    /// The number of the connection in use; frames of any other are not the session's.
    pub current: u64,
    next: u64,
    /// A new connection is wanted: new tools, or a `goAway`.
    pub wanted: bool,
    /// The connection being opened to move to, and its write half once it is up.
    opening: Option<Opening>,
    /// Connections left behind, closing: kept until they end.
    retiring: Vec<(u64, UpstreamSink)>,
    /// The API key header each connection carries.
    header: Option<(String, String)>,
}

struct Opening {
    id: u64,
    half: Option<UpstreamHalf>,
}

/// Where a frame came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum From {
    /// The connection in use.
    Current,
    /// The connection being opened, whose `setupComplete` just moved the session to it.
    Moved,
    /// The connection being opened, before its `setupComplete`, or one left behind: not the
    /// session's.
    Elsewhere,
}

impl Moves {
    pub(crate) fn new(header: Option<(String, String)>) -> Self {
        Self {
            handle: Rc::new(RefCell::new(None)),
            resumable: false,
            current: 0,
            next: 0,
            wanted: false,
            opening: None,
            retiring: Vec::new(),
            header,
        }
    }

    /// A number for a new connection.
    pub(crate) fn number(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    pub(crate) fn header(&self) -> Option<(&str, &str)> {
        self.header.as_ref().map(|(n, v)| (n.as_str(), v.as_str()))
    }

    /// Whether a connection is being opened (what the app sends meanwhile is held).
    pub(crate) fn is_opening(&self) -> bool {
        self.opening.is_some()
    }

    /// Every connection but the one in use is let go (the actor stops, or starts again).
    pub(crate) fn reset(&mut self) {
        self.opening = None;
        self.retiring.clear();
        self.wanted = false;
        self.resumable = false;
    }
}

/// An actor that moves its Gemini session between connections.
pub(crate) trait Moving:
    Shell + Handler<Tagged> + actix::io::WriteHandler<actix_http::ws::ProtocolError>
{
    fn moves(&mut self) -> &mut Moves;

    /// The session moved to a new connection.
    fn moved(&mut self, ctx: &mut Context<Self>) {
        let _ = ctx;
    }

    /// The connection being opened was given up: the session stays where it is.
    fn stayed(&mut self, ctx: &mut Context<Self>) {
        let _ = ctx;
    }
}

/// Feeds the frames of connection `id`, then its end, to the actor.
pub(crate) fn listen<A>(
    id: u64,
    stream: impl futures_util::Stream<Item = Result<Frame, WsProtocolError>> + 'static,
    ctx: &mut Context<A>,
) where
    A: Moving,
{
    let tagged = stream
        .map(move |frame| Tagged::Frame(id, frame))
        .chain(stream::once(async move { Tagged::Ended(id) }));
    ctx.add_message_stream(tagged);
}

/// What a text message of connection `id` means for the moves: a new handle is kept, a
/// `goAway` returned; the `setupComplete` of the connection being opened moves the session to
/// it.
pub(crate) fn on_text<A: Moving>(
    act: &mut A,
    id: u64,
    text: &str,
    ctx: &mut Context<A>,
) -> (From, Option<std::time::Duration>) {
    let Signals {
        resumption,
        go_away,
    } = read::signals(text);
    let moves = act.moves();
    let opening = moves.opening.as_ref().is_some_and(|o| o.id == id);
    // Handles count from the connection in use and the one being opened, never from one left
    // behind (a late one would be older than the session's).
    if let Some((handle, resumable)) = resumption.filter(|_| id == moves.current || opening) {
        if let Some(handle) = handle {
            *moves.handle.borrow_mut() = Some(handle);
            act.link().core.handle_received();
        }
        if id == act.moves().current {
            act.moves().resumable = resumable;
        }
    }
    let moves = act.moves();
    if id == moves.current {
        return (From::Current, go_away);
    }
    let Some(opening) = moves.opening.as_mut().filter(|o| o.id == id) else {
        return (From::Elsewhere, None);
    };
    if !matches!(read::server_message(text), Ok(ModelEvent::Updated { .. })) {
        return (From::Elsewhere, None);
    }
    let half = opening
        .half
        .take()
        .expect("a connection that answered is open");
    moves.opening = None;
    move_to(act, id, half, ctx);
    (From::Moved, None)
}

/// The new connection took the setup: the session moves to it, and the old one is closed.
fn move_to<A: Moving>(act: &mut A, id: u64, half: UpstreamHalf, ctx: &mut Context<A>) {
    if let Some(mut old) = act.link().sink.take() {
        let _ = old.write(ws::Message::Close(Some(ws::CloseCode::Normal.into())));
        // Kept until the provider answers the close and the connection ends.
        let current = act.moves().current;
        act.moves().retiring.push((current, old));
    }
    let moves = act.moves();
    moves.current = id;
    moves.resumable = false;
    act.link().open_sink(half, ctx);
    act.link().core.switched();
    tracing::info!(character = %act.link().core.character(), "gemini session moved to a new connection");
    act.moved(ctx);
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
    let moves = act.moves();
    moves.wanted = false;
    let header = moves.header.clone();
    let planned = moves.number();
    moves.opening = Some(Opening {
        id: planned,
        half: None,
    });
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
    ctx.spawn(
        async move {
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
            let moves = act.moves();
            let Some(opening) = moves.opening.as_mut().filter(|o| o.id == planned) else {
                return;
            };
            match result {
                Ok(framed) => {
                    let (half, stream) = framed.split();
                    opening.half = Some(half);
                    listen(planned, stream, ctx);
                }
                Err(error) => opening_failed(act, &format!("could not connect: {error}"), ctx),
            }
        }),
    );
}

/// The connection being opened failed before it took the setup: the update fails.
fn opening_failed<A: Moving>(act: &mut A, reason: &str, ctx: &mut Context<A>) {
    act.moves().opening = None;
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
    let Some(opening) = act.moves().opening.take() else {
        return;
    };
    if let Some(mut half) = opening.half {
        ctx.spawn(
            async move {
                let _ = half.send(ws::Message::Close(None)).await;
            }
            .into_actor(act),
        );
    }
    act.moves().wanted = true;
    act.stayed(ctx);
}

/// Connection `id` closed (or its stream ended). Returns whether it was the one in use; the one
/// being opened fails its update with the reason the provider gave (Gemini refuses a setup by
/// closing); one left behind is forgotten.
pub(crate) fn closed<A: Moving>(
    act: &mut A,
    id: u64,
    reason: Option<String>,
    ctx: &mut Context<A>,
) -> bool {
    let moves = act.moves();
    moves.retiring.retain(|(old, _)| *old != id);
    if moves.opening.as_ref().is_some_and(|o| o.id == id) {
        let reason = reason.unwrap_or_else(|| "it closed before setupComplete".into());
        opening_failed(act, &reason, ctx);
        return false;
    }
    id == act.moves().current
}
