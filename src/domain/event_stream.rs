//! A `text/event-stream` body read into its events' data, as the HTML standard's event-stream
//! interpretation reads it (WHATWG HTML, "Server-sent events", interpreting an event stream):
//! a line ends in CRLF, LF or CR (the CR of one chunk and the LF first in the next are one end);
//! a byte-order mark before the first line is dropped; a line that starts with a colon is a
//! comment; a line without a colon is a field of that name with an empty value; one space after
//! the colon is not part of the value; each `data` line's value is added to the event's data,
//! lines joined by LF; a blank line ends the event, which is dispatched when its data is not
//! empty; any other field (`event`, `id`, `retry`, or a name the standard does not know) is read
//! and left out, as what this server reads of an event is its JSON data; what is pending when
//! the body ends is dropped. Bytes that are not UTF-8 are read as U+FFFD.
//!
//! The `sse-stream` crate, which this replaced, refused a stream with an unknown field, a line
//! without a colon or a second `event` line (all legal), failing the request. Plain: bytes in,
//! data out, in time linear in the bytes fed, and a line split over many chunks copied once.

use std::collections::VecDeque;

/// The byte-order mark a stream may begin with.
const BOM: &[u8] = "\u{feff}".as_bytes();

/// Reads a stream's bytes, chunk by chunk, into its events' data.
#[derive(Debug, Default)]
pub(crate) struct EventStreamReader {
    /// The start of a line whose end has not come yet.
    partial: Vec<u8>,
    /// The data of the event being read: each `data` value so far, each followed by LF.
    data: String,
    /// Whether the first line was read (only it may begin with a byte-order mark).
    past_first_line: bool,
    /// The last chunk ended in CR: an LF that begins the next one ends no other line.
    after_cr: bool,
    /// Events read and not yet taken, in order.
    ready: VecDeque<String>,
}

impl EventStreamReader {
    /// Reads the next chunk of the body.
    pub(crate) fn feed(&mut self, mut bytes: &[u8]) {
        if self.after_cr && !bytes.is_empty() {
            self.after_cr = false;
            if bytes[0] == b'\n' {
                bytes = &bytes[1..];
            }
        }
        while let Some(at) = memchr::memchr2(b'\n', b'\r', bytes) {
            if self.partial.is_empty() {
                self.line(&bytes[..at]);
            } else {
                let mut line = std::mem::take(&mut self.partial);
                line.extend_from_slice(&bytes[..at]);
                self.line(&line);
                line.clear();
                self.partial = line;
            }
            let end = bytes[at];
            bytes = &bytes[at + 1..];
            if end == b'\r' {
                match bytes.first() {
                    Some(b'\n') => bytes = &bytes[1..],
                    None => self.after_cr = true,
                    Some(_) => {}
                }
            }
        }
        self.partial.extend_from_slice(bytes);
    }

    /// The next event's data, in the order the stream sent them.
    pub(crate) fn next_data(&mut self) -> Option<String> {
        self.ready.pop_front()
    }

    fn line(&mut self, mut line: &[u8]) {
        if !self.past_first_line {
            self.past_first_line = true;
            line = line.strip_prefix(BOM).unwrap_or(line);
        }
        if line.is_empty() {
            return self.dispatch();
        }
        if line[0] == b':' {
            return;
        }
        let (name, value) = match memchr::memchr(b':', line) {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &[][..]),
        };
        if name == b"data" {
            let value = String::from_utf8_lossy(value);
            self.data.reserve(value.len() + 1);
            self.data.push_str(&value);
            self.data.push('\n');
        }
    }

    /// A blank line: the event read so far is dispatched if it has data.
    fn dispatch(&mut self) {
        if self.data.is_empty() {
            return;
        }
        let mut data = std::mem::take(&mut self.data);
        data.pop();
        self.ready.push_back(data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every event's data, the stream fed in the given chunks.
    fn read(chunks: &[&[u8]]) -> Vec<String> {
        let mut reader = EventStreamReader::default();
        let mut events = Vec::new();
        for chunk in chunks {
            reader.feed(chunk);
            while let Some(data) = reader.next_data() {
                events.push(data);
            }
        }
        events
    }

    /// The same stream cut at every byte: the events do not depend on where chunks end.
    fn read_every_way(stream: &[u8]) -> Vec<String> {
        let whole = read(&[stream]);
        for at in 0..=stream.len() {
            let (a, b) = stream.split_at(at);
            assert_eq!(read(&[a, b]), whole, "cut at {at}");
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(read(&bytes), whole, "byte by byte");
        whole
    }

    #[test]
    fn data_lines_join_and_a_blank_line_ends_each_event() {
        assert_eq!(
            read_every_way(b"data: {\"a\":1}\n\ndata: first\ndata:second\n\n"),
            ["{\"a\":1}", "first\nsecond"]
        );
    }

    #[test]
    fn every_line_end_the_standard_allows() {
        assert_eq!(
            read_every_way(b"data: a\r\n\r\ndata: b\r\rdata: c\n\ndata: d\r\ndata: e\r\r\n"),
            ["a", "b", "c", "d\ne"]
        );
    }

    #[test]
    fn comments_other_fields_and_lines_without_a_colon_are_read_and_left_out() {
        let stream = b"\xEF\xBB\xBF: a comment\nretry: 3000\nretry: soon\nid: 7\nid: 8\n\
            event: one\nevent: two\nfoo: bar\njustsometext\ndata: kept\n\n";
        assert_eq!(read_every_way(stream), ["kept"]);
        // "data" alone is a data field with an empty value: the data is one LF, then none.
        assert_eq!(read_every_way(b"data\n\ndata\ndata\n\ndata:\n"), ["", "\n"]);
    }

    #[test]
    fn only_one_space_after_the_colon_is_dropped_and_events_without_data_are_not_dispatched() {
        assert_eq!(
            read_every_way(b"data:  two\n\nevent: x\n\nid: 1\n\n\n\ndata:x:y\n\n"),
            [" two", "x:y"]
        );
    }

    #[test]
    fn what_is_pending_when_the_body_ends_is_dropped() {
        assert_eq!(read_every_way(b"data: whole\n\ndata: cut"), ["whole"]);
        assert_eq!(read_every_way(b"data: whole\n\ndata: cut\n"), ["whole"]);
    }

    #[test]
    fn a_mark_is_dropped_only_before_the_first_line_and_bytes_not_utf8_read_as_replacements() {
        assert_eq!(
            read_every_way(b"data: a\n\n\xEF\xBB\xBFdata: b\n\ndata: \xFF\n\n"),
            ["a", "\u{fffd}"]
        );
    }
}
