//! What the server takes from an MCP server it calls (configured, or registered by a plugin),
//! bounded like a callback's answer: each message while it is read (a line of a stdio server,
//! an HTTP answer, an event of a stream), a listing's tools one by one and as a whole, and a
//! `tools/call` result by `dispatch.max_response_bytes`. Plain: the HTTP client
//! ([`super::http_client`]), the stdio reader and the listing ([`super::listing`]) apply them.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

/// Largest message read from an MCP server, other than a `tools/call` answer (which has the
/// callbacks' `max_response_bytes`): a page of a listing as large as a whole listing may be.
pub const MAX_MCP_MESSAGE_BYTES: usize = MAX_LISTING_BYTES;

/// Largest listing taken from one server, every page together: 1,024 tools of about 16 KiB
/// each, which every live session of the character gets in its tool update.
pub const MAX_LISTING_BYTES: usize = 16 * 1024 * 1024;

/// Largest tool of a listing (name, description and `inputSchema` as JSON): what a plugin can
/// register over HTTP, whose bodies are at most 1 MiB.
pub const MAX_TOOL_DEFINITION_BYTES: usize = 1024 * 1024;

/// The JSON-RPC error code of an answer the client refused for what it was (over its bound,
/// or not a JSON-RPC message), in the range JSON-RPC leaves to implementations.
pub(crate) const ANSWER_REFUSED: i32 = -32099;

/// What the text of a bound says, for messages: the setting it comes from, or the constant.
pub(crate) fn bound_name(limit: usize, max_result_bytes: usize) -> &'static str {
    if limit == max_result_bytes {
        "dispatch.max_response_bytes"
    } else {
        "the MCP message bound"
    }
}

/// Bytes of a JSON value written compactly, counted without writing them anywhere.
pub(crate) fn json_bytes<T: serde::Serialize>(value: &T) -> usize {
    struct Count(usize);
    impl io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // A value that cannot be written counts as what was written of it.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// Counts the bytes of the message being read (since the last end of one) and says when it
/// passes its bound. Messages end with a line break (stdio) or a blank line (an event stream).
#[derive(Debug, Clone)]
pub(crate) struct MessageBound {
    limit: usize,
    /// Bytes of the message so far.
    taken: usize,
    /// What ends a message: one line break, or two in a row.
    breaks_to_end: u8,
    /// Line breaks in a row just seen (carriage returns aside).
    breaks: u8,
}

impl MessageBound {
    /// For messages that are lines.
    pub(crate) fn lines(limit: usize) -> Self {
        Self::new(limit, 1)
    }

    /// For server-sent events (a blank line ends one).
    pub(crate) fn events(limit: usize) -> Self {
        Self::new(limit, 2)
    }

    fn new(limit: usize, breaks_to_end: u8) -> Self {
        Self {
            limit,
            taken: 0,
            breaks_to_end,
            breaks: 0,
        }
    }

    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    /// Takes the next bytes; false once the message being read has passed the bound.
    pub(crate) fn take(&mut self, bytes: &[u8]) -> bool {
        self.passed_at(bytes).is_none()
    }

    /// Takes the next bytes; where in them the message being read passed the bound, if it did.
    pub(crate) fn passed_at(&mut self, bytes: &[u8]) -> Option<usize> {
        for (at, &byte) in bytes.iter().enumerate() {
            match byte {
                b'\n' => {
                    self.breaks += 1;
                    if self.breaks >= self.breaks_to_end {
                        self.taken = 0;
                        continue;
                    }
                }
                // Line breaks may be written CRLF.
                b'\r' => continue,
                _ => self.breaks = 0,
            }
            self.taken += 1;
            if self.taken > self.limit {
                return Some(at);
            }
        }
        None
    }
}

/// A stdio server's output, each line (one message) at most its bound: past it the read fails,
/// which ends the connection (the line cannot be answered: its id is in the part not read).
pub(crate) struct BoundedLines<R> {
    inner: R,
    bound: MessageBound,
    /// A message passed the bound: the reads that follow fail.
    passed: bool,
}

impl<R> BoundedLines<R> {
    pub(crate) fn new(inner: R, limit: usize) -> Self {
        Self {
            inner,
            bound: MessageBound::lines(limit),
            passed: false,
        }
    }
}

/// The error of a message over its bound, naming it.
pub(crate) fn over_bound(limit: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "the MCP server sent a message over the {limit}-byte limit (the MCP message bound): \
             the connection was closed"
        ),
    )
}

impl<R: AsyncRead + Unpin> AsyncRead for BoundedLines<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.passed {
            return Poll::Ready(Err(over_bound(this.bound.limit())));
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => match this.bound.passed_at(&buf.filled()[before..]) {
                None => Poll::Ready(Ok(())),
                // What came before the message that passed goes on; the read after fails.
                Some(0) => {
                    this.passed = true;
                    Poll::Ready(Err(over_bound(this.bound.limit())))
                }
                Some(at) => {
                    this.passed = true;
                    buf.set_filled(before + at);
                    Poll::Ready(Ok(()))
                }
            },
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncBufReadExt;

    use super::*;

    #[test]
    fn a_message_is_counted_from_the_end_of_the_one_before() {
        let mut lines = MessageBound::lines(4);
        assert!(lines.take(b"abcd\nefgh\n\r\nij"));
        assert!(!lines.take(b"klm"));

        let mut events = MessageBound::events(12);
        assert!(events.take(b"data: abcd\n"), "one line break goes on");
        assert!(!events.take(b"data: efgh\n"));
        let mut events = MessageBound::events(12);
        assert!(events.take(b"data: abcd\r\n\r\ndata: efgh\n\n"));
    }

    #[actix_web::test]
    async fn a_line_over_the_bound_fails_the_read() {
        let text = format!("{{\"a\": 1}}\n{}\n", "x".repeat(100));
        let mut reader = tokio::io::BufReader::new(BoundedLines::new(text.as_bytes(), 64));
        let mut line = String::new();
        reader.read_line(&mut line).await.unwrap();
        assert_eq!(line, "{\"a\": 1}\n");
        let error = reader.read_line(&mut line).await.unwrap_err();
        assert!(
            error.to_string().contains("over the 64-byte limit"),
            "{error}"
        );
    }

    #[test]
    fn json_is_counted_as_written() {
        assert_eq!(json_bytes(&serde_json::json!({"a": [1, "b"]})), 13);
    }
}
