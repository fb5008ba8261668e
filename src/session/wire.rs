//! The model's websockets as a session actor holds them ([`Wires`]): each connection numbered,
//! its frames read in the actor's context and tagged with its number ([`FromUpstream`]), its
//! writes queued through a [`SinkWrite`] spawned there too and counted ([`Metered`]). One is in
//! use; a Gemini session also holds the one it is moving to.
//!
//! A connection the actor gives up while it goes on (a Gemini session that moved, a new
//! connection abandoned or failed) is *retired*: its close frame goes out, and it is released —
//! its reader and writer cancelled, so both halves of the socket are dropped and it closes —
//! when the model answers the close or ends the connection, or after [`CLOSE_GRACE`]. Dropping
//! the `SinkWrite` alone would not release it: the future it spawned holds the write half, and
//! with it the socket, for as long as the actor lives. An actor that stops (or starts again)
//! releases every connection with its context.

use std::cell::Cell;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use actix::io::{SinkWrite, WriteHandler};
use actix::prelude::*;
use actix_http::ws::{CloseReason, Item, ProtocolError};
use awc::BoxedSocket;
use awc::ws::{self, Codec, Frame};
use futures_util::Sink;
use futures_util::stream::{self, SplitSink, StreamExt};

/// An upstream websocket, connected.
pub(crate) type UpstreamSocket = actix_codec::Framed<BoxedSocket, Codec>;

/// The split write half of a connected upstream websocket.
type UpstreamHalf = SplitSink<UpstreamSocket, ws::Message>;

/// How long a connection that was closed waits for the model to answer the close before it is
/// dropped (and how long a closing actor waits before it stops): the frame leaves at once on a
/// connection that is read, and a model answers in well under a second.
pub(crate) const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// A frame of connection `0`, or its end.
#[derive(Debug)]
pub(crate) enum FromUpstream {
    Frame(u64, Result<Frame, ProtocolError>),
    Ended(u64),
}

impl FromUpstream {
    /// The number of the connection it came from.
    pub(crate) fn connection(&self) -> u64 {
        match self {
            Self::Frame(id, _) | Self::Ended(id) => *id,
        }
    }

    /// Whether nothing more comes from its connection that matters: the model's close, a broken
    /// frame, or the end of the stream.
    pub(crate) fn ends(&self) -> bool {
        matches!(
            self,
            Self::Frame(_, Ok(Frame::Close(_)) | Err(_)) | Self::Ended(_)
        )
    }
}

/// An actor that reads and writes upstream connections through [`Wires`].
pub(crate) trait HoldsWires:
    Actor<Context = Context<Self>> + StreamHandler<FromUpstream> + WriteHandler<ProtocolError>
{
    fn wires(&mut self) -> &mut Wires;
}

/// One connection: its writer and reader in the actor's context.
struct Wire {
    id: u64,
    writer: SinkWrite<ws::Message, Metered>,
    reader: SpawnHandle,
    /// Bytes written and not yet taken by the connection.
    queued: Rc<Cell<usize>>,
    /// Retired: the timer that releases it if the model does not end it first.
    retired: Option<SpawnHandle>,
}

/// A session actor's upstream connections.
#[derive(Default)]
pub(crate) struct Wires {
    wires: Vec<Wire>,
    in_use: Option<u64>,
    next: u64,
}

/// What became of a write on the connection in use.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Written {
    /// Queued, behind `waiting` bytes the connection had not taken yet.
    Queued { waiting: usize },
    /// No connection is in use.
    Nowhere,
    /// The connection's writer has stopped.
    Closed,
}

impl Wires {
    /// A number for a new connection.
    pub(crate) fn number(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    /// Reads and writes `socket` as connection `id` (from [`Wires::number`]) from now on; it is
    /// not the one in use until [`Wires::use_connection`] says so.
    pub(crate) fn open<A: HoldsWires>(
        &mut self,
        id: u64,
        socket: UpstreamSocket,
        ctx: &mut Context<A>,
    ) {
        let (half, frames) = socket.split();
        let tagged = frames
            .map(move |frame| FromUpstream::Frame(id, frame))
            .chain(stream::once(async move { FromUpstream::Ended(id) }));
        let reader = ctx.add_stream(tagged);
        let queued = Rc::default();
        let metered = Metered {
            inner: half,
            queued: Rc::clone(&queued),
        };
        let writer = SinkWrite::new(metered, ctx);
        self.wires.push(Wire {
            id,
            writer,
            reader,
            queued,
            retired: None,
        });
    }

    /// Connection `id` is the one in use from now on. Returns the one it replaces, for the
    /// actor to retire.
    pub(crate) fn use_connection(&mut self, id: u64) -> Option<u64> {
        self.in_use.replace(id).filter(|&old| old != id)
    }

    /// The number of the connection in use.
    pub(crate) fn in_use(&self) -> Option<u64> {
        self.in_use
    }

    /// Whether `id` is the connection in use.
    pub(crate) fn is_in_use(&self, id: u64) -> bool {
        self.in_use == Some(id)
    }

    /// Writes `message` on the connection in use.
    pub(crate) fn write(&mut self, message: ws::Message) -> Written {
        let Some(wire) = self.wires.iter_mut().find(|w| Some(w.id) == self.in_use) else {
            return Written::Nowhere;
        };
        let size = payload_len(&message);
        let waiting = wire.queued.get();
        if wire.writer.write(message).is_err() {
            return Written::Closed;
        }
        wire.queued.set(waiting + size);
        Written::Queued { waiting }
    }

    /// Gives connection `id` up: its close frame (with `reason`) goes out, and it is released
    /// when the model answers it or ends the connection, or after [`CLOSE_GRACE`].
    pub(crate) fn retire<A: HoldsWires>(
        &mut self,
        id: u64,
        reason: Option<CloseReason>,
        ctx: &mut Context<A>,
    ) {
        if self.in_use == Some(id) {
            self.in_use = None;
        }
        let Some(wire) = self
            .wires
            .iter_mut()
            .find(|w| w.id == id && w.retired.is_none())
        else {
            return;
        };
        let _ = wire.writer.write(ws::Message::Close(reason));
        wire.retired = Some(ctx.run_later(CLOSE_GRACE, move |act, ctx| {
            act.wires().release(id, ctx);
        }));
    }

    /// Drops connection `id`: its reader and writer are cancelled, so its socket closes.
    pub(crate) fn release<A: HoldsWires>(&mut self, id: u64, ctx: &mut Context<A>) {
        let Some(at) = self.wires.iter().position(|w| w.id == id) else {
            return;
        };
        let wire = self.wires.swap_remove(at);
        ctx.cancel_future(wire.writer.handle());
        ctx.cancel_future(wire.reader);
        if let Some(timer) = wire.retired {
            ctx.cancel_future(timer);
        }
        if self.in_use == Some(id) {
            self.in_use = None;
        }
    }

    /// The actor stopped: its context dropped every connection's reader and writer.
    pub(crate) fn clear(&mut self) {
        self.wires.clear();
        self.in_use = None;
    }

    /// What of `item` is the actor's: a frame or the end of a connection it holds and has not
    /// retired. The end of a retired one (its close, a broken frame, the end of its stream)
    /// releases it; the rest of what a retired or released one sends is dropped.
    pub(crate) fn sort<A: HoldsWires>(
        &mut self,
        item: FromUpstream,
        ctx: &mut Context<A>,
    ) -> Option<FromUpstream> {
        let id = item.connection();
        let wire = self.wires.iter().find(|w| w.id == id)?;
        if wire.retired.is_none() {
            return Some(item);
        }
        if item.ends() {
            self.release(id, ctx);
        }
        None
    }
}

/// An upstream write half that counts down the bytes it takes: with what [`Wires::write`]
/// counts up, the count is what waits in the [`SinkWrite`]'s queue (which has no bound of its
/// own) for a model that does not read.
pub(crate) struct Metered {
    inner: UpstreamHalf,
    queued: Rc<Cell<usize>>,
}

impl Sink<ws::Message> for Metered {
    type Error = ProtocolError;

    fn poll_ready(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Result<(), Self::Error>> {
        Pin::new(&mut self.inner).poll_ready(cx)
    }

    fn start_send(mut self: Pin<&mut Self>, item: ws::Message) -> Result<(), Self::Error> {
        let taken = payload_len(&item);
        self.queued.set(self.queued.get().saturating_sub(taken));
        Pin::new(&mut self.inner).start_send(item)
    }

    fn poll_flush(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Result<(), Self::Error>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_close(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Result<(), Self::Error>> {
        Pin::new(&mut self.inner).poll_close(cx)
    }
}

/// What a message counts towards the bound on what waits for the model: its payload.
fn payload_len(message: &ws::Message) -> usize {
    match message {
        ws::Message::Text(text) => text.len(),
        ws::Message::Binary(bytes) | ws::Message::Ping(bytes) | ws::Message::Pong(bytes) => {
            bytes.len()
        }
        ws::Message::Continuation(Item::FirstText(part) | Item::FirstBinary(part))
        | ws::Message::Continuation(Item::Continue(part) | Item::Last(part)) => part.len(),
        ws::Message::Close(_) | ws::Message::Nop => 0,
    }
}
