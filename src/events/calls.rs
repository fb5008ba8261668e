//! A call's watch: the one place a call's start and end are observed, whoever makes it — a
//! live session's model, a chat request's, the invoke route, an MCP client of `/mcp`, an
//! application's own session. Started when the call starts, it opens the call's
//! `execute_tool` span (whose context the call carries to its callback as `traceparent`); when
//! the call ends it announces `tool.call`, records the call's metrics and its place in the
//! recent calls, and ends the span. Dropped before that — its caller went away, which drops the
//! call too — it does the same as cancelled.

use std::time::{Instant, SystemTime};

use opentelemetry::KeyValue;
use opentelemetry::trace::SpanContext;
use serde::Serialize;

use super::{EventHub, EventKind, Scope};
use crate::domain::call::{Outcome, ToolResult};
pub use crate::domain::connection::Caller;
use crate::domain::connection::ConnectionKind;
use crate::domain::peer_id;
use crate::domain::tool::Behavior;
use crate::observe::CallIdentity;
use crate::observe::recent::RecentCall;
use crate::observe::trace::Span;

/// The data of `tool.call`: the call, and how it ended. Never the arguments or the output:
/// they may carry the user's conversation.
#[derive(Debug, Serialize)]
pub struct ToolCallFinished<'a> {
    #[serde(flatten)]
    pub call: CallStart<'a>,
    /// Wall time from the call's start to its result (a cancelled call: to its cancellation),
    /// in milliseconds.
    pub duration_ms: f64,
    pub is_error: bool,
    /// The call was cancelled before it finished (the person interrupted, or its caller went
    /// away); such a call is also `is_error`.
    pub cancelled: bool,
    /// How the call ended (`ok`, `tool_error`, `timeout`, ...).
    pub outcome: Outcome,
    /// For a repeated call that got an identical call's result (outcome `deduplicated`): that
    /// call's id; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_call_id: Option<&'a str>,
    /// The trace of the call's span (32 hex digits), as its callback's `traceparent` named it.
    pub trace_id: &'a str,
}

/// What a call is, when it starts.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct CallStart<'a> {
    pub role: &'a str,
    pub tool: &'a str,
    /// `None` when the character has no tool of this name.
    pub source: Option<&'a str>,
    pub call_id: &'a str,
    pub caller: Caller,
    /// The kind of session whose model makes the call (`client`, `relay`, `attach`,
    /// `embedded`, `chat`); `None` (absent) for an invoke or an `/mcp` call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<ConnectionKind>,
    /// The tool's behavior: `non_blocking` calls of a live session were answered as running,
    /// and their result is delivered when it comes (`tool.result`).
    pub behavior: Behavior,
}

/// One call being run (see the module's header). Owned: a session keeps it with the call.
#[derive(Debug)]
pub struct CallWatch {
    hub: EventHub,
    call: CallIdentity,
    behavior: Behavior,
    span: Span,
    started: Instant,
    started_at: SystemTime,
    done: bool,
}

impl CallWatch {
    /// `call` starts now, in the trace of `parent` (a new trace without one): the span of a
    /// session's turn, of a chat request, or the `traceparent` an invoke came with.
    pub fn start(hub: &EventHub, call: CallStart<'_>, parent: Option<&SpanContext>) -> Self {
        // What a call's records keep is bounded by bytes, whoever made it: a model's invented
        // name, a long id an embedding application passes, a registration's long source are
        // cut and marked (`domain::peer_id`).
        let identity = CallIdentity {
            role: call.role.into(),
            tool: peer_id::name(call.tool).into(),
            source: call.source.map(|s| peer_id::name(s).into()),
            call_id: peer_id::call_id(call.call_id).into(),
            caller: call.caller,
            kind: call.kind,
        };
        let span = hub.observer().call_span(&identity, parent);
        Self {
            hub: hub.clone(),
            call: identity,
            behavior: call.behavior,
            span,
            started: Instant::now(),
            started_at: SystemTime::now(),
            done: false,
        }
    }

    /// The call's span: what its `ToolCall::trace` carries to the callback.
    pub fn trace(&self) -> &SpanContext {
        self.span.context()
    }

    /// The call ended with `result`.
    pub fn finished(mut self, result: &ToolResult) {
        let outcome = result.reported_outcome();
        if let Some(first) = &result.first_call_id {
            self.span
                .set(|| KeyValue::new("runtime_tools.first_call_id", first.clone()));
        }
        // A failed call's span names how it failed: a repeat's, how the call it repeats did.
        let failed = result.is_error.then_some(result.outcome);
        self.announce(outcome, failed, result.first_call_id.as_deref());
    }

    /// `failed`: how the call failed (its span's `error.type`), `None` when it did not.
    fn announce(&mut self, outcome: Outcome, failed: Option<Outcome>, first_call_id: Option<&str>) {
        let is_error = failed.is_some();
        self.done = true;
        let took = self.started.elapsed();
        let duration_ms = took.as_secs_f64() * 1000.0;
        let trace_id = self.span.context().trace_id().to_string();
        let call = &self.call;
        self.hub.publish(
            EventKind::ToolCall,
            Scope::Roles(vec![call.role.clone().into()]),
            &ToolCallFinished {
                call: CallStart {
                    role: &call.role,
                    tool: &call.tool,
                    source: call.source.as_deref(),
                    call_id: &call.call_id,
                    caller: call.caller,
                    kind: call.kind,
                    behavior: self.behavior,
                },
                duration_ms,
                is_error,
                cancelled: outcome == Outcome::Cancelled,
                outcome,
                first_call_id,
                trace_id: &trace_id,
            },
        );
        if let Some(failed) = failed {
            self.span.fail(failed.name());
        }
        self.hub.observer().call_finished(
            RecentCall {
                call_id: call.call_id.clone(),
                role: call.role.clone(),
                tool: call.tool.clone(),
                source: call.source.clone(),
                caller: call.caller,
                kind: call.kind,
                started_at: humantime::format_rfc3339_millis(self.started_at).to_string(),
                duration_ms,
                outcome,
                trace_id,
            },
            took,
        );
    }
}

impl Drop for CallWatch {
    fn drop(&mut self) {
        if !self.done {
            self.announce(Outcome::Cancelled, Some(Outcome::Cancelled), None);
        }
        // The span ends as it is dropped, after the call's record.
    }
}
