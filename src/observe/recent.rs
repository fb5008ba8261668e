//! The last [`RECENT_CALLS`] finished calls, for `GET /api/calls` and the inspector: who called
//! which tool, how long it took, how it ended and its trace. Never the arguments or the output.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;

use crate::domain::call::Outcome;
use crate::domain::connection::{Caller, ConnectionKind};

/// Calls kept: enough for a latency view of every tool of a busy few minutes, small enough
/// (about 300 bytes each) to never matter for memory.
pub const RECENT_CALLS: usize = 1000;

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

/// The ring, shared by every clone.
#[derive(Clone, Default)]
pub(crate) struct RecentCalls(Arc<Mutex<VecDeque<Arc<RecentCall>>>>);

impl RecentCalls {
    /// Keeps `call`, forgetting the oldest past [`RECENT_CALLS`].
    pub(crate) fn push(&self, call: RecentCall) {
        let mut ring = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if ring.len() == RECENT_CALLS {
            ring.pop_front();
        }
        ring.push_back(Arc::new(call));
    }

    /// The calls `filter` picks, newest first.
    pub(crate) fn list(&self, filter: &CallFilter<'_>) -> Vec<Arc<RecentCall>> {
        let ring = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        ring.iter()
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
