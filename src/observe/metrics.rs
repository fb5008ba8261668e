//! The Prometheus metrics of one server: its own registry (several servers may run in one
//! process), the families every call, change, sync and chat request records into, and the text
//! `GET /metrics` answers, with the gauges read at scrape time from the caller.
//!
//! Label values come from bounded sets: characters (the configuration's), callers, kinds and
//! outcomes (the code's), and tool names capped at [`MAX_TOOL_LABELS`] distinct values. No id —
//! a call's, a session's — is ever a label.

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

use crate::domain::connection::ConnectionKind;

/// Distinct `tool` label values kept; later names are counted as `tool="other"`. Far above the
/// tools a deployment registers, low enough that a plugin registering names in a loop cannot
/// grow the exposition (and a scraper's memory) without bound.
pub const MAX_TOOL_LABELS: usize = 500;

/// The `tool` label of calls past [`MAX_TOOL_LABELS`], and of calls of a name the character has
/// no tool of (a name a model invents is never a label).
pub(crate) const OTHER_TOOL: &str = "other";

/// The call-duration buckets, in seconds: 1 ms (an in-process tool) to 300 s (the longest a
/// tool may take), about three to a decade.
const CALL_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0,
];

/// The buckets of a call's wait for its turn (a tool's `max_concurrent`), in seconds: none (a
/// turn free at once) to 300 s (the longest a call may wait, its timeout).
const WAIT_BUCKETS: &[f64] = &[
    0.0, 0.001, 0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// The session-sync buckets, in seconds: a loopback model acknowledges in milliseconds; the
/// longest sync timeout is a minute.
const SYNC_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// The `kind` label of a call no session made (an invoke, an `/mcp` call): empty.
const NO_KIND: &str = "";

/// One finished call, as the metrics count it.
pub(crate) struct CallSample<'a> {
    pub character: &'a str,
    /// `None`: the character has no tool of this name.
    pub tool: Option<&'a str>,
    pub caller: &'a str,
    pub kind: Option<ConnectionKind>,
    pub outcome: &'a str,
    pub duration: Duration,
}

/// What `GET /metrics` reads at scrape time (the state now, rather than counted as it changes).
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    /// Each live session's kind and state.
    pub sessions: Vec<(&'static str, &'static str)>,
    /// Each character's tool count.
    pub tools: Vec<(String, usize)>,
    /// Calls running now.
    pub running_calls: usize,
}

/// The registry and its families.
pub(crate) struct Metrics {
    registry: Registry,
    calls: IntCounterVec,
    call_seconds: HistogramVec,
    wait_seconds: HistogramVec,
    sync_seconds: HistogramVec,
    changes: IntCounterVec,
    tools_removed: IntCounterVec,
    requests: IntCounterVec,
    rounds: IntCounterVec,
    upstream_errors: IntCounterVec,
    pub(crate) spans_exported: IntCounter,
    pub(crate) spans_dropped: IntCounterVec,
    /// The tool names that have a label of their own.
    tool_labels: Mutex<HashSet<String>>,
}

/// Registers `metric` with `registry` and returns it. Registration fails only for a name
/// registered twice, which the fixed list below never does.
fn registered<M: prometheus::core::Collector + Clone + 'static>(
    registry: &Registry,
    metric: M,
) -> M {
    registry
        .register(Box::new(metric.clone()))
        .expect("each metric is registered once");
    metric
}

fn counter(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let metric = IntCounterVec::new(Opts::new(name, help), labels).expect("a valid metric");
    registered(registry, metric)
}

fn histogram(
    registry: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
    buckets: &[f64],
) -> HistogramVec {
    let opts = HistogramOpts::new(name, help).buckets(buckets.to_vec());
    registered(
        registry,
        HistogramVec::new(opts, labels).expect("a valid metric"),
    )
}

impl Default for Metrics {
    fn default() -> Self {
        let r = Registry::new();
        let call_labels = ["character", "tool", "caller", "kind"];
        let calls = counter(
            &r,
            "runtime_tools_tool_calls_total",
            "Tool calls finished, by how they ended.",
            &["character", "tool", "caller", "kind", "outcome"],
        );
        let call_seconds = histogram(
            &r,
            "runtime_tools_tool_call_duration_seconds",
            "Wall time of a tool call, from its start to its result (or cancellation).",
            &call_labels,
            CALL_BUCKETS,
        );
        let wait_seconds = histogram(
            &r,
            "runtime_tools_tool_call_wait_seconds",
            "Time a call of a tool with max_concurrent waited for its turn (0 when one was free; \
             its whole timeout when it did not come and the call was busy).",
            &call_labels,
            WAIT_BUCKETS,
        );
        let sync_seconds = histogram(
            &r,
            "runtime_tools_session_sync_seconds",
            "A tool change sent to a live session until the session acknowledged it.",
            &["kind"],
            SYNC_BUCKETS,
        );
        let changes = counter(
            &r,
            "runtime_tools_tool_changes_total",
            "Changes applied to the characters' tools: register, unregister, clear, \
             auto_removal (a dead plugin origin), mcp (an MCP server's listing).",
            &["op"],
        );
        let tools_removed = counter(
            &r,
            "runtime_tools_tools_removed_total",
            "Registry entries removed, by the kind of change that removed them.",
            &["op"],
        );
        let requests = counter(
            &r,
            "runtime_tools_model_requests_total",
            "Requests served by the model endpoints the server runs the tool loop of, by how \
             they ended (ok, upstream_error, gone).",
            &["kind", "character", "outcome"],
        );
        let rounds = counter(
            &r,
            "runtime_tools_model_rounds_total",
            "Upstream model rounds of those requests (one per answer the model gave).",
            &["kind", "character"],
        );
        let upstream_errors = counter(
            &r,
            "runtime_tools_upstream_errors_total",
            "Upstream model failures, by reason (unreachable, timeout, status, invalid, \
             stream_error).",
            &["kind", "character", "reason"],
        );
        let spans_exported = registered(
            &r,
            IntCounter::new(
                "runtime_tools_spans_exported_total",
                "Spans the OTLP exporter delivered.",
            )
            .expect("a valid metric"),
        );
        let spans_dropped = counter(
            &r,
            "runtime_tools_spans_dropped_total",
            "Spans dropped instead of exported: queue_full (the exporter fell behind), \
             export_failed (the collector refused or could not be reached).",
            &["reason"],
        );
        Self {
            registry: r,
            calls,
            call_seconds,
            wait_seconds,
            sync_seconds,
            changes,
            tools_removed,
            requests,
            rounds,
            upstream_errors,
            spans_exported,
            spans_dropped,
            tool_labels: Mutex::new(HashSet::new()),
        }
    }
}

impl Metrics {
    /// The `tool` label of `tool`: its name while fewer than [`MAX_TOOL_LABELS`] names have one.
    fn tool_label<'a>(&self, tool: Option<&'a str>) -> &'a str {
        let Some(tool) = tool else {
            return OTHER_TOOL;
        };
        let mut labels = self
            .tool_labels
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if labels.contains(tool) {
            return tool;
        }
        if labels.len() < MAX_TOOL_LABELS {
            labels.insert(tool.to_owned());
            return tool;
        }
        OTHER_TOOL
    }

    /// Counts one finished call and its duration.
    pub(crate) fn call(&self, sample: &CallSample<'_>) {
        let tool = self.tool_label(sample.tool);
        let kind = sample.kind.map_or(NO_KIND, ConnectionKind::name);
        self.calls
            .with_label_values(&[sample.character, tool, sample.caller, kind, sample.outcome])
            .inc();
        self.call_seconds
            .with_label_values(&[sample.character, tool, sample.caller, kind])
            .observe(sample.duration.as_secs_f64());
    }

    /// A call of a tool with `max_concurrent` waited `waited` for its turn (or for nothing).
    pub(crate) fn call_waited(
        &self,
        character: &str,
        tool: &str,
        caller: &str,
        kind: Option<ConnectionKind>,
        waited: Duration,
    ) {
        let tool = self.tool_label(Some(tool));
        let kind = kind.map_or(NO_KIND, ConnectionKind::name);
        self.wait_seconds
            .with_label_values(&[character, tool, caller, kind])
            .observe(waited.as_secs_f64());
    }

    /// A live session of `kind` acknowledged a tool change after `took`.
    pub(crate) fn session_synced(&self, kind: ConnectionKind, took: Duration) {
        self.sync_seconds
            .with_label_values(&[kind.name()])
            .observe(took.as_secs_f64());
    }

    /// A change of `op` was applied, removing `removed` registry entries.
    pub(crate) fn tools_changed(&self, op: &str, removed: usize) {
        self.changes.with_label_values(&[op]).inc();
        if removed > 0 {
            self.tools_removed
                .with_label_values(&[op])
                .inc_by(removed as u64);
        }
    }

    /// A request of a model endpoint of `kind` (`chat`, `responses`) ended as `outcome`.
    pub(crate) fn model_request(&self, kind: ConnectionKind, character: &str, outcome: &str) {
        self.requests
            .with_label_values(&[kind.name(), character, outcome])
            .inc();
    }

    /// One upstream round of a model endpoint of `kind`.
    pub(crate) fn model_round(&self, kind: ConnectionKind, character: &str) {
        self.rounds
            .with_label_values(&[kind.name(), character])
            .inc();
    }

    /// An upstream failure of a model endpoint of `kind`.
    pub(crate) fn upstream_error(&self, kind: ConnectionKind, character: &str, reason: &str) {
        self.upstream_errors
            .with_label_values(&[kind.name(), character, reason])
            .inc();
    }

    /// The exposition: every family, and the gauges of `now`.
    pub(crate) fn render(&self, now: &Snapshot) -> String {
        let mut families = self.registry.gather();
        families.extend(gauges(now));
        families.sort_by(|a, b| a.name().cmp(b.name()));
        let mut text = Vec::new();
        // Encoding into a Vec of families gathered from valid metrics cannot fail.
        let _ = TextEncoder::new().encode(&families, &mut text);
        String::from_utf8(text).unwrap_or_default()
    }
}

/// The gauges of a snapshot, gathered from a registry of their own made for this scrape (two
/// scrapes at once never see each other's).
fn gauges(now: &Snapshot) -> Vec<prometheus::proto::MetricFamily> {
    let r = Registry::new();
    let sessions = registered(
        &r,
        IntGaugeVec::new(
            Opts::new(
                "runtime_tools_sessions",
                "Live model sessions, by kind and connection state.",
            ),
            &["kind", "state"],
        )
        .expect("a valid metric"),
    );
    for (kind, state) in &now.sessions {
        sessions.with_label_values(&[kind, state]).inc();
    }
    let tools = registered(
        &r,
        IntGaugeVec::new(
            Opts::new("runtime_tools_tools", "Tools each character has now."),
            &["character"],
        )
        .expect("a valid metric"),
    );
    for (character, count) in &now.tools {
        tools
            .with_label_values(&[character])
            .set(i64::try_from(*count).unwrap_or(i64::MAX));
    }
    let running = registered(
        &r,
        IntGauge::new(
            "runtime_tools_running_calls",
            "Tool calls running now (every kind of caller).",
        )
        .expect("a valid metric"),
    );
    running.set(i64::try_from(now.running_calls).unwrap_or(i64::MAX));
    r.gather()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample<'a>(tool: Option<&'a str>, outcome: &'a str) -> CallSample<'a> {
        CallSample {
            character: "Lanlan",
            tool,
            caller: "invoke",
            kind: None,
            outcome,
            duration: Duration::from_millis(3),
        }
    }

    #[test]
    fn the_tool_label_is_capped_and_unknown_names_are_other() {
        let metrics = Metrics::default();
        for i in 0..MAX_TOOL_LABELS + 5 {
            metrics.call(&sample(Some(&format!("t{i}")), "ok"));
        }
        metrics.call(&sample(None, "unknown_tool"));
        let text = metrics.render(&Snapshot::default());
        assert!(text.contains(r#"tool="t499""#));
        assert!(!text.contains(r#"tool="t500""#));
        assert!(text.contains(
            r#"runtime_tools_tool_calls_total{caller="invoke",character="Lanlan",kind="",outcome="ok",tool="other"} 5"#
        ));
        assert!(text.contains(r#"outcome="unknown_tool",tool="other"} 1"#));
    }
}
