//! Reading a callback's answer: its body collected up to the size cap, decoding an unasked-for
//! `gzip` or `deflate` answer on the way.

use std::fmt;
use std::io::{self, Write};

use super::failure::CallFailure;

/// Collects a response body up to the size cap, decoding an unasked-for `gzip` or `deflate`
/// answer on the way (we never advertise compression: on loopback it only costs CPU).
pub(super) enum BodySink {
    Plain(Capped),
    Gzip(flate2::write::GzDecoder<Capped>),
    Deflate(flate2::write::ZlibDecoder<Capped>),
}

/// A buffer that refuses to grow past the cap.
pub(super) struct Capped {
    bytes: Vec<u8>,
    cap: usize,
}

impl Write for Capped {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.bytes.len() + data.len() > self.cap {
            return Err(io::Error::other(OverCap));
        }
        self.bytes.extend_from_slice(data);
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[derive(Debug)]
struct OverCap;

impl fmt::Display for OverCap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("over the response size cap")
    }
}

impl std::error::Error for OverCap {}

impl BodySink {
    pub(super) fn new(encoding: Option<&[u8]>, cap: usize) -> Result<Self, CallFailure> {
        let capped = Capped {
            bytes: Vec::new(),
            cap,
        };
        let encoding = encoding.map(|e| String::from_utf8_lossy(e).trim().to_ascii_lowercase());
        Ok(match encoding.as_deref() {
            None | Some("") | Some("identity") => BodySink::Plain(capped),
            Some("gzip") | Some("x-gzip") => BodySink::Gzip(flate2::write::GzDecoder::new(capped)),
            Some("deflate") => BodySink::Deflate(flate2::write::ZlibDecoder::new(capped)),
            Some(other) => {
                return Err(CallFailure::reachable(format!(
                    "remote tool callback answered with Content-Encoding {other:?}, which is not \
                     supported; send the answer uncompressed"
                )));
            }
        })
    }

    pub(super) fn write(&mut self, data: &[u8]) -> Result<(), CallFailure> {
        let written = match self {
            BodySink::Plain(c) => c.write_all(data),
            BodySink::Gzip(d) => d.write_all(data),
            BodySink::Deflate(d) => d.write_all(data),
        };
        written.map_err(|e| self.failure(&e))
    }

    pub(super) fn finish(self) -> Result<Vec<u8>, CallFailure> {
        let cap = self.cap();
        let finished = match self {
            BodySink::Plain(c) => Ok(c),
            BodySink::Gzip(d) => d.finish(),
            BodySink::Deflate(d) => d.finish(),
        };
        finished
            .map(|c| c.bytes)
            .map_err(|e| size_or_decode_failure(&e, cap))
    }

    fn cap(&self) -> usize {
        match self {
            BodySink::Plain(c) => c.cap,
            BodySink::Gzip(d) => d.get_ref().cap,
            BodySink::Deflate(d) => d.get_ref().cap,
        }
    }

    fn failure(&self, e: &io::Error) -> CallFailure {
        size_or_decode_failure(e, self.cap())
    }
}

fn size_or_decode_failure(e: &io::Error, cap: usize) -> CallFailure {
    if e.get_ref().is_some_and(|inner| inner.is::<OverCap>()) {
        CallFailure::reachable(format!(
            "remote tool callback response exceeded the {cap}-byte limit (dispatch.max_response_bytes)"
        ))
    } else {
        CallFailure::reachable(format!(
            "remote tool callback response could not be decompressed: {e}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_sink_caps_plain_and_decoded_bodies() {
        let mut plain = BodySink::new(None, 4).ok().unwrap();
        plain.write(b"abcd").ok().unwrap();
        assert!(plain.write(b"e").is_err());
        let unknown = BodySink::new(Some(b"br"), 4).err().unwrap();
        assert_eq!(
            unknown.error,
            "remote tool callback answered with Content-Encoding \"br\", which is not \
             supported; send the answer uncompressed"
        );
    }
}
