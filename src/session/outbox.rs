//! `AppOutbox`: a relay's queue of frames towards the app, and the response body that drains it.
//!
//! actix-ws's `Session` would queue in a channel of 32 messages whatever their size, and its
//! sender waits when the channel is full: a relay that waited there would stop reading the model,
//! so the acknowledgements and calls the server handles would stall behind an app that does not
//! read. Instead the relay encodes each frame into one buffer it never waits on; the HTTP
//! connection takes from it as fast as the socket accepts, and past [`MAX_APP_QUEUE_BYTES`] the
//! relay closes with a reason that says why. Both ends live on the HTTP worker thread that
//! accepted the connection, so the buffer is shared without locks.

use std::cell::RefCell;
use std::convert::Infallible;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use actix_codec::Encoder;
use actix_http::ws::{Codec, Message};
use bytes::{Bytes, BytesMut};
use futures_util::Stream;

/// Bytes a relay holds for an app that is not reading, beyond what the socket buffers hold: at
/// 24 kHz, 16-bit mono audio in base64 (64 KB a second), two minutes of audio deltas. An app
/// that falls that far behind is closed rather than buffered without bound.
pub const MAX_APP_QUEUE_BYTES: usize = 8 * 1024 * 1024;

/// The close code a relay sends when its app stopped reading (1008, policy violation).
pub(crate) const NOT_READING_CODE: u16 = 1008;

/// The close reason a relay sends when its app stopped reading.
pub(crate) fn not_reading_reason() -> String {
    format!("app is not reading: more than {MAX_APP_QUEUE_BYTES} bytes were waiting for it")
}

#[derive(Default)]
struct State {
    buffer: BytesMut,
    codec: Codec,
    /// A close frame is queued: nothing more goes in, and the body ends once it is taken.
    closed: bool,
    waker: Option<Waker>,
}

/// The writing end, held by the relay.
#[derive(Clone)]
pub(crate) struct AppOutbox(Rc<RefCell<State>>);

/// The reading end: the body of the websocket's HTTP response.
pub(crate) struct OutboxBody(Rc<RefCell<State>>);

/// The app is not reading: the queue is past [`MAX_APP_QUEUE_BYTES`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Overflow;

impl AppOutbox {
    pub(crate) fn new() -> (Self, OutboxBody) {
        let state = Rc::new(RefCell::new(State::default()));
        (Self(state.clone()), OutboxBody(state))
    }

    /// Queues one frame. After a close it is dropped: the connection is ending.
    pub(crate) fn send(&self, message: Message) -> Result<(), Overflow> {
        let mut state = self.0.borrow_mut();
        if state.closed {
            return Ok(());
        }
        // The app is behind when more than the limit was already waiting: a single frame larger
        // than the limit (events may be up to `MAX_EVENT_BYTES`) still goes to an app that keeps
        // up.
        let overflow = state.buffer.len() > MAX_APP_QUEUE_BYTES;
        let State { buffer, codec, .. } = &mut *state;
        if codec.encode(message, buffer).is_err() {
            // Only a close reason too long for a frame fails to encode, and close() takes none.
            return Ok(());
        }
        if let Some(waker) = state.waker.take() {
            waker.wake();
        }
        if overflow { Err(Overflow) } else { Ok(()) }
    }

    /// Queues a close frame after everything queued; the body ends once it is taken.
    pub(crate) fn close(&self, reason: Option<actix_http::ws::CloseReason>) {
        self.close_with(reason, false);
    }

    /// Drops everything queued and queues a close frame alone: the app gets it as soon as it
    /// reads what the socket already holds.
    pub(crate) fn abort(&self, reason: actix_http::ws::CloseReason) {
        self.close_with(Some(reason), true);
    }

    fn close_with(&self, reason: Option<actix_http::ws::CloseReason>, drop_queued: bool) {
        let mut state = self.0.borrow_mut();
        if state.closed {
            return;
        }
        if drop_queued {
            state.buffer.clear();
        }
        let State { buffer, codec, .. } = &mut *state;
        let _ = codec.encode(Message::Close(reason), buffer);
        state.closed = true;
        if let Some(waker) = state.waker.take() {
            waker.wake();
        }
    }

    /// Bytes queued and not yet taken by the connection.
    #[cfg(test)]
    fn queued(&self) -> usize {
        self.0.borrow().buffer.len()
    }

    #[cfg(test)]
    fn is_closed(&self) -> bool {
        self.0.borrow().closed
    }
}

impl Stream for OutboxBody {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let mut state = self.0.borrow_mut();
        if !state.buffer.is_empty() {
            return Poll::Ready(Some(Ok(state.buffer.split().freeze())));
        }
        if state.closed {
            return Poll::Ready(None);
        }
        state.waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Everything the body yields until it ends or would wait.
    fn drain(body: &mut OutboxBody) -> (Vec<u8>, bool) {
        let mut cx = Context::from_waker(Waker::noop());
        let mut all = Vec::new();
        loop {
            match Pin::new(&mut *body).poll_next(&mut cx) {
                Poll::Ready(Some(Ok(chunk))) => all.extend_from_slice(&chunk),
                Poll::Ready(None) => return (all, true),
                Poll::Pending => return (all, false),
            }
        }
    }

    #[test]
    fn frames_queue_in_order_and_the_close_ends_the_body() {
        let (outbox, mut body) = AppOutbox::new();
        outbox.send(Message::Text("a".into())).unwrap();
        outbox
            .send(Message::Binary(Bytes::from_static(b"\x00\x01")))
            .unwrap();
        outbox.close(None);
        outbox.send(Message::Text("late".into())).unwrap();
        // Text "a", binary 00 01, close without a reason; nothing after the close, and the body
        // ends.
        assert_eq!(
            drain(&mut body),
            (vec![0x81, 1, b'a', 0x82, 2, 0, 1, 0x88, 0], true)
        );
    }

    #[test]
    fn one_frame_larger_than_the_limit_goes_to_an_app_that_keeps_up() {
        let (outbox, mut body) = AppOutbox::new();
        let large = Bytes::from(vec![7u8; MAX_APP_QUEUE_BYTES + (1 << 20)]);
        assert_eq!(outbox.send(Message::Binary(large.clone())), Ok(()));
        let (bytes, ended) = drain(&mut body);
        assert!(!ended);
        assert_eq!(&bytes[bytes.len() - large.len()..], &large[..]);
        // Taken whole: the next frame is queued as usual.
        assert_eq!(outbox.send(Message::Text("next".into())), Ok(()));
    }

    #[test]
    fn past_the_limit_the_sender_is_told_and_abort_drops_the_queue() {
        let (outbox, mut body) = AppOutbox::new();
        outbox.send(Message::Text("taken".into())).unwrap();
        assert!(!drain(&mut body).1, "an open outbox waits for more");
        let chunk = Bytes::from(vec![0u8; 1 << 20]);
        let mut sent = 0;
        while outbox.send(Message::Binary(chunk.clone())).is_ok() {
            sent += 1;
        }
        // Eight whole mebibytes (and their frames' headers) went in: the queue was past the limit
        // when the ninth came.
        assert_eq!(sent, MAX_APP_QUEUE_BYTES >> 20);
        outbox.abort(actix_http::ws::CloseReason {
            code: actix_http::ws::CloseCode::Policy,
            description: Some(not_reading_reason()),
        });
        assert!(outbox.is_closed());
        assert!(outbox.queued() < 200, "only the close frame is left");
    }
}
