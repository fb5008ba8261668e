//! A client of `GET /api/events` for the tests: opens the stream over a real connection and reads
//! it frame by frame (events and comments), each read with a deadline.
#![allow(dead_code)]

use std::pin::Pin;
use std::time::Duration;

use actix_web::web::Bytes;
use awc::error::PayloadError;
use futures_util::{Stream, StreamExt};
use serde_json::Value;

use crate::helpers::{TestApp, parse_json};

/// Longest a test waits for the next frame of the stream (a loaded machine).
pub const FRAME_DEADLINE: Duration = Duration::from_secs(30);

/// One event as received.
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    pub event: String,
    pub id: u64,
    pub data: Value,
}

/// One frame of the stream: an event, or a comment line (`: keep-alive`).
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    Event(Received),
    Comment(String),
}

pub struct EventReader {
    body: Pin<Box<dyn Stream<Item = Result<Bytes, PayloadError>>>>,
    buffer: Vec<u8>,
    pub content_type: Option<String>,
}

/// Opens `GET /api/events{query}` (with `Last-Event-ID` when given). `Err` carries the status and
/// JSON body of a refusal.
pub async fn open(
    app: &TestApp,
    query: &str,
    last_event_id: Option<&str>,
) -> Result<EventReader, (u16, Value)> {
    open_with(app, query, last_event_id, &[]).await
}

/// [`open`] with extra request headers.
pub async fn open_with(
    app: &TestApp,
    query: &str,
    last_event_id: Option<&str>,
    headers: &[(&str, &str)],
) -> Result<EventReader, (u16, Value)> {
    // A client of its own: the stream holds its connection for as long as the test reads.
    let client = awc::Client::builder()
        .timeout(FRAME_DEADLINE)
        .disable_redirects()
        .finish();
    let mut request = client.get(app.url(&format!("/api/events{query}")));
    if let Some(id) = last_event_id {
        request = request.insert_header(("Last-Event-ID", id));
    }
    for (name, value) in headers {
        request = request.insert_header((*name, *value));
    }
    let mut response = request.send().await.expect("events request sent");
    let status = response.status().as_u16();
    if status != 200 {
        let body = response.body().await.expect("error body read");
        return Err((status, parse_json(&body)));
    }
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    Ok(EventReader {
        body: Box::pin(response),
        buffer: Vec::new(),
        content_type,
    })
}

impl EventReader {
    /// The next frame; `None` when the stream ended.
    pub async fn next_frame(&mut self) -> Option<Frame> {
        loop {
            if let Some(end) = self.buffer.windows(2).position(|w| w == b"\n\n") {
                let block: Vec<u8> = self.buffer.drain(..end + 2).collect();
                return Some(parse_frame(&String::from_utf8_lossy(&block)));
            }
            let chunk = tokio::time::timeout(FRAME_DEADLINE, self.body.next())
                .await
                .unwrap_or_else(|_| {
                    panic!(
                        "no event within {FRAME_DEADLINE:?}; buffered: {:?}",
                        String::from_utf8_lossy(&self.buffer)
                    )
                });
            match chunk {
                Some(Ok(bytes)) => self.buffer.extend_from_slice(&bytes),
                Some(Err(e)) => panic!("event stream broke: {e}"),
                None => {
                    assert!(
                        self.buffer.is_empty(),
                        "stream ended inside a frame: {:?}",
                        String::from_utf8_lossy(&self.buffer)
                    );
                    return None;
                }
            }
        }
    }

    /// The next event, skipping comments; within [`FRAME_DEADLINE`] in all (keep-alive comments
    /// do not extend it).
    pub async fn next_event(&mut self) -> Received {
        let waited = tokio::time::timeout(FRAME_DEADLINE, async {
            loop {
                match self.next_frame().await {
                    Some(Frame::Event(event)) => return event,
                    Some(Frame::Comment(_)) => continue,
                    None => panic!("the event stream ended"),
                }
            }
        });
        waited
            .await
            .unwrap_or_else(|_| panic!("no event within {FRAME_DEADLINE:?}"))
    }

    /// The next event, which must be of `kind`.
    pub async fn expect(&mut self, kind: &str) -> Received {
        let event = self.next_event().await;
        assert_eq!(event.event, kind, "{event:?}");
        event
    }

    /// Skips events until one of `kind` whose data satisfies `matches`, within
    /// [`FRAME_DEADLINE`] in all; returns it.
    pub async fn wait_for(&mut self, kind: &str, matches: impl Fn(&Value) -> bool) -> Received {
        let mut skipped = Vec::new();
        let waited = tokio::time::timeout(FRAME_DEADLINE, async {
            loop {
                let event = self.next_event().await;
                if event.event == kind && matches(&event.data) {
                    return event;
                }
                skipped.push(event);
            }
        })
        .await;
        waited.unwrap_or_else(|_| {
            panic!("no matching {kind} event within {FRAME_DEADLINE:?}; skipped: {skipped:#?}")
        })
    }
}

fn parse_frame(block: &str) -> Frame {
    let lines: Vec<&str> = block.lines().filter(|l| !l.is_empty()).collect();
    if let [comment] = lines.as_slice()
        && let Some(text) = comment.strip_prefix(':')
    {
        return Frame::Comment(text.trim().to_owned());
    }
    let field = |name: &str| {
        lines
            .iter()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .unwrap_or_else(|| panic!("frame without {name}: {block:?}"))
    };
    Frame::Event(Received {
        event: field("event").to_owned(),
        id: field("id").parse().expect("numeric id"),
        data: serde_json::from_str(field("data")).expect("JSON data"),
    })
}
