//! The last [`RECENT_CALLS`] finished calls, at most [`RECENT_CALLS_MAX_BYTES`] of them, for
//! `GET /api/calls` and the inspector: who called which tool, how long it took, how it ended and
//! its trace. Never the arguments or the output.

use std::collections::VecDeque;
use std::mem::size_of;
use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;

use crate::domain::call::Outcome;
use crate::domain::connection::{Caller, ConnectionKind};

/// Calls kept: enough for a latency view of every tool of a busy few minutes.
pub const RECENT_CALLS: usize = 1000;

/// Bytes the kept calls may take, each counted as it is held (its record, its text, the shared
/// pointers' counts). A call is about 300 bytes, and about 1 KiB with its id, tool name and
/// source at their bounds (`domain::peer_id`), so the last 1,000 calls fit either way; text no
/// bound cut (an embedding application's own) makes the oldest go sooner.
pub const RECENT_CALLS_MAX_BYTES: usize = 1024 * 1024;

/// What an `Arc<str>` or `Arc<T>` costs besides its contents: the two counts.
const ARC_COUNTS: usize = 2 * size_of::<usize>();

/// One finished call.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RecentCall {
    pub call_id: Arc<str>,
    pub role: Arc<str>,
    pub tool: Arc<str>,
    /// `null` when the character has no such tool.
    pub source: Option<Arc<str>>,
    pub caller: Caller,
    /// The kind of session whose model made the call; `null` for an invoke or an `/mcp` call.
    pub kind: Option<ConnectionKind>,
    /// When the call started, RFC 3339, UTC.
    pub started_at: String,
    pub duration_ms: f64,
    pub outcome: Outcome,
    /// The trace the call's span belongs to (32 hex digits).
    pub trace_id: String,
}

/// Which calls a listing wants.
#[derive(Debug, Default)]
pub(crate) struct CallFilter<'a> {
    pub role: Option<&'a str>,
    pub tool: Option<&'a str>,
    pub limit: usize,
}

impl RecentCall {
    /// The bytes it holds: the record in its `Arc`, and each text it owns.
    fn held_bytes(&self) -> usize {
        let shared = |text: &Arc<str>| ARC_COUNTS + text.len();
        ARC_COUNTS
            + size_of::<Self>()
            + shared(&self.call_id)
            + shared(&self.role)
            + shared(&self.tool)
            + self.source.as_ref().map_or(0, shared)
            + self.started_at.capacity()
            + self.trace_id.capacity()
    }
}

/// The ring, shared by every clone.
#[derive(Clone, Default)]
pub(crate) struct RecentCalls(Arc<Mutex<Ring>>);

/// The calls kept, oldest first, each with the bytes it holds, and their sum.
#[derive(Default)]
struct Ring {
    calls: VecDeque<(Arc<RecentCall>, usize)>,
    bytes: usize,
}

impl RecentCalls {
    /// Keeps `call`, forgetting the oldest past [`RECENT_CALLS`] calls or
    /// [`RECENT_CALLS_MAX_BYTES`] bytes (the newest call is always kept).
    pub(crate) fn push(&self, call: RecentCall) {
        let cost = call.held_bytes();
        let mut ring = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        while ring.calls.len() >= RECENT_CALLS
            || (!ring.calls.is_empty() && ring.bytes + cost > RECENT_CALLS_MAX_BYTES)
        {
            let Some((_, freed)) = ring.calls.pop_front() else {
                break;
            };
            ring.bytes -= freed;
        }
        ring.bytes += cost;
        ring.calls.push_back((Arc::new(call), cost));
    }

    /// The calls `filter` picks, newest first.
    pub(crate) fn list(&self, filter: &CallFilter<'_>) -> Vec<Arc<RecentCall>> {
        let ring = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        ring.calls
            .iter()
            .map(|(call, _)| call)
            .rev()
            .filter(|c| filter.role.is_none_or(|r| *c.role == *r))
            .filter(|c| filter.tool.is_none_or(|t| *c.tool == *t))
            .take(filter.limit)
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: usize, role: &str, tool: &str) -> RecentCall {
        RecentCall {
            call_id: format!("c{id}").into(),
            role: role.into(),
            tool: tool.into(),
            source: None,
            caller: Caller::Invoke,
            kind: None,
            started_at: String::new(),
            duration_ms: 1.0,
            outcome: Outcome::Ok,
            trace_id: String::new(),
        }
    }

    #[test]
    fn long_calls_are_bounded_by_bytes_and_a_call_at_the_bounds_is_about_a_kib() {
        use crate::domain::peer_id::{MAX_CALL_ID_BYTES, MAX_INVENTED_NAME_BYTES};
        let typical = RecentCall {
            started_at: "2026-01-01T00:00:00.000Z".into(),
            trace_id: "0af7651916cd43dd8448eb211c80319c".into(),
            source: Some("plugin:weather".into()),
            ..call(1, "Lanlan", "get_weather")
        };
        assert!(
            (250..=400).contains(&typical.held_bytes()),
            "{}",
            typical.held_bytes()
        );
        let widest = || RecentCall {
            call_id: "i".repeat(MAX_CALL_ID_BYTES).into(),
            tool: "t".repeat(MAX_INVENTED_NAME_BYTES).into(),
            source: Some("s".repeat(MAX_INVENTED_NAME_BYTES).into()),
            ..typical.clone()
        };
        let cost = widest().held_bytes();
        assert!((1000..=1200).contains(&cost), "{cost}");
        // Calls at the bounds: the last 1,000 still fit.
        let ring = RecentCalls::default();
        for _ in 0..RECENT_CALLS + 5 {
            ring.push(widest());
        }
        assert_eq!(ring.0.lock().unwrap().calls.len(), RECENT_CALLS);
        // Longer text (an embedding application's own ids): the bytes bound the ring.
        let long = || RecentCall {
            call_id: "l".repeat(4096).into(),
            ..typical.clone()
        };
        let cost = long().held_bytes();
        for _ in 0..RECENT_CALLS {
            ring.push(long());
        }
        assert_eq!(
            ring.0.lock().unwrap().calls.len(),
            RECENT_CALLS_MAX_BYTES / cost
        );
        assert!(ring.0.lock().unwrap().bytes <= RECENT_CALLS_MAX_BYTES);
        // One call past the byte bound alone is still kept: the newest always is.
        ring.push(RecentCall {
            call_id: "x".repeat(2 * RECENT_CALLS_MAX_BYTES).into(),
            ..typical.clone()
        });
        let ring = ring.0.lock().unwrap();
        assert_eq!(ring.calls.len(), 1);
    }

    #[test]
    fn newest_first_filtered_limited_and_bounded() {
        let ring = RecentCalls::default();
        for i in 0..RECENT_CALLS + 10 {
            ring.push(call(i, if i % 2 == 0 { "A" } else { "B" }, "t"));
        }
        let all = ring.list(&CallFilter {
            limit: usize::MAX,
            ..Default::default()
        });
        assert_eq!(all.len(), RECENT_CALLS);
        assert_eq!(*all[0].call_id, format!("c{}", RECENT_CALLS + 9));
        assert_eq!(&*all.last().unwrap().call_id, "c10");
        let b = ring.list(&CallFilter {
            role: Some("B"),
            tool: Some("t"),
            limit: 2,
        });
        let ids: Vec<&str> = b.iter().map(|c| &*c.call_id).collect();
        assert_eq!(
            ids,
            [
                format!("c{}", RECENT_CALLS + 9),
                format!("c{}", RECENT_CALLS + 7)
            ]
        );
        assert!(
            ring.list(&CallFilter {
                tool: Some("x"),
                limit: 5,
                ..Default::default()
            })
            .is_empty()
        );
    }
}
