//! The Prometheus metrics of one server: its own registry (several servers may run in one
//! process), the families every call, change, sync and chat request records into, and the text
//! `GET /metrics` answers, with the gauges read at scrape time from the caller.
//!
//! Label values come from bounded sets: characters (the configuration's), callers, kinds and
//! outcomes (the code's), and tool names capped at [`MAX_TOOL_LABELS`] distinct values at a
//! time: once the cap is reached, the names of tools no character has any more give their
//! places (and their series) up to new ones. No id — a call's, a session's — is ever a label.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

use crate::domain::connection::ConnectionKind;

/// Distinct `tool` label values at a time; past them, the name of a tool no character has any
/// more gives its place up, and calls of a tool that finds none are counted under
/// `OTHER_TOOL`. Far above the tools a deployment registers, low enough that a plugin
/// registering names in a loop cannot grow the exposition (and a scraper's memory) without
/// bound.
pub const MAX_TOOL_LABELS: usize = 500;

/// The `tool` label of calls past [`MAX_TOOL_LABELS`], and of calls of a name the character has
/// no tool of (a name a model invents is never a label): empty, which no tool's name can be (a
/// name is 1 to 64 characters), and which Prometheus reads as no `tool` label at all.
pub(crate) const OTHER_TOOL: &str = "";

/// Which tool names some character has now: what tells the metrics a labelled name is gone.
pub(crate) trait ToolRoster: Send + Sync {
    /// Whether some character has a tool of this name.
    fn has_tool(&self, name: &str) -> bool;
    /// A number that changes whenever the characters' tools may have changed: the roster is
    /// asked again only then.
    fn version(&self) -> u64;
}

/// The tool names that have a label of their own, each with the series it labels (to remove
/// them when it gives its place up), and the roster's version when they were last checked.
#[derive(Default)]
struct ToolLabels {
    /// Each name's series by a hash of their other labels: a call finds its series without
    /// copying a label. (Two series of one name with the same hash would leave the second in the
    /// exposition when the name gives its place up: one in 2^64.)
    names: HashMap<String, HashMap<u64, Series>>,
    checked: Option<u64>,
    hasher: foldhash::fast::RandomState,
}

/// The other labels of one tool's series of calls.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Series {
    character: String,
    caller: String,
    kind: &'static str,
    outcome: String,
}

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
    searches: IntCounterVec,
    revealed: IntCounterVec,
    /// The tool names that have a label of their own. Held while a call is counted, so a name
    /// that gives its place up never has a series counted after its series were removed.
    tool_labels: Mutex<ToolLabels>,
    /// What says a labelled name's tool is gone (none: names keep their labels).
    roster: OnceLock<Arc<dyn ToolRoster>>,
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
        let searches = counter(
            &r,
            "runtime_tools_tool_searches_total",
            "Searches of a character's tools, by who searched (api: GET /api/tools/search; \
             a session's kind or mcp: a model's find_tools).",
            &["kind"],
        );
        let revealed = counter(
            &r,
            "runtime_tools_tools_revealed_total",
            "Tools a model's find_tools returned to its session, by the session's kind.",
            &["kind"],
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
            searches,
            revealed,
            tool_labels: Mutex::default(),
            roster: OnceLock::new(),
        }
    }
}

impl Metrics {
    /// Tells the metrics which tool names some character has: from then on, names of tools that
    /// are gone give their labels up to new ones. Set once; later calls do nothing.
    pub(crate) fn watch_tools(&self, roster: Arc<dyn ToolRoster>) {
        let _ = self.roster.set(roster);
    }

    /// The `tool` label of `tool`: its name while it has a place among the
    /// [`MAX_TOOL_LABELS`], else `OTHER_TOOL`.
    fn tool_label<'a>(&self, labels: &mut ToolLabels, tool: Option<&'a str>) -> &'a str {
        let Some(tool) = tool else {
            return OTHER_TOOL;
        };
        if labels.names.contains_key(tool) {
            return tool;
        }
        if labels.names.len() >= MAX_TOOL_LABELS {
            self.release_gone(labels);
        }
        if labels.names.len() < MAX_TOOL_LABELS {
            labels.names.insert(tool.to_owned(), HashMap::new());
            return tool;
        }
        OTHER_TOOL
    }

    /// Takes the labels (and removes the series) of names no character has a tool of any more,
    /// when the roster changed since it was last asked.
    fn release_gone(&self, labels: &mut ToolLabels) {
        let Some(roster) = self.roster.get() else {
            return;
        };
        let version = roster.version();
        if labels.checked == Some(version) {
            return;
        }
        labels.checked = Some(version);
        let gone: Vec<String> = labels
            .names
            .keys()
            .filter(|name| !roster.has_tool(name))
            .cloned()
            .collect();
        for name in gone {
            for series in labels.names.remove(&name).unwrap_or_default().into_values() {
                let Series {
                    character,
                    caller,
                    kind,
                    outcome,
                } = &series;
                let _ = self.calls.remove_label_values(&[
                    character.as_str(),
                    name.as_str(),
                    caller.as_str(),
                    kind,
                    outcome.as_str(),
                ]);
                let _ = self.call_seconds.remove_label_values(&[
                    character.as_str(),
                    name.as_str(),
                    caller.as_str(),
                    kind,
                ]);
                let _ = self.wait_seconds.remove_label_values(&[
                    character.as_str(),
                    name.as_str(),
                    caller.as_str(),
                    kind,
                ]);
            }
        }
    }

    /// Counts one finished call and its duration.
    pub(crate) fn call(&self, sample: &CallSample<'_>) {
        let mut labels = self
            .tool_labels
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let tool = self.tool_label(&mut labels, sample.tool);
        let kind = sample.kind.map_or(NO_KIND, ConnectionKind::name);
        let key = labels
            .hasher
            .hash_one((sample.character, sample.caller, kind, sample.outcome));
        if let Some(series) = labels.names.get_mut(tool) {
            series.entry(key).or_insert_with(|| Series {
                character: sample.character.to_owned(),
                caller: sample.caller.to_owned(),
                kind,
                outcome: sample.outcome.to_owned(),
            });
        }
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
        let mut labels = self
            .tool_labels
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // No series of its own to note: every call that waited is counted by `call` under the
        // same labels when it ends, and that series's release takes this one too.
        let tool = self.tool_label(&mut labels, Some(tool));
        let kind = kind.map_or(NO_KIND, ConnectionKind::name);
        self.wait_seconds
            .with_label_values(&[character, tool, caller, kind])
            .observe(waited.as_secs_f64());
    }

    /// One search of a character's tools, by `kind` (`api`, or a session's kind).
    pub(crate) fn tool_searched(&self, kind: &str) {
        self.searches.with_label_values(&[kind]).inc();
    }

    /// `count` tools a model's `find_tools` returned to a session of `kind`.
    pub(crate) fn tools_revealed(&self, kind: &str, count: usize) {
        self.revealed
            .with_label_values(&[kind])
            .inc_by(u64::try_from(count).unwrap_or(u64::MAX));
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
    fn the_tool_label_is_capped_and_unknown_names_have_none() {
        let metrics = Metrics::default();
        for i in 0..MAX_TOOL_LABELS + 5 {
            metrics.call(&sample(Some(&format!("t{i}")), "ok"));
        }
        metrics.call(&sample(None, "unknown_tool"));
        let text = metrics.render(&Snapshot::default());
        assert!(text.contains(r#"tool="t499""#));
        assert!(!text.contains(r#"tool="t500""#));
        assert!(text.contains(
            r#"runtime_tools_tool_calls_total{caller="invoke",character="Lanlan",kind="",outcome="ok",tool=""} 5"#
        ));
        assert!(text.contains(r#"outcome="unknown_tool",tool=""} 1"#));
    }

    /// A roster of the names in it, its version counting its changes.
    #[derive(Default)]
    struct Names(Mutex<(std::collections::HashSet<String>, u64)>);

    impl Names {
        fn set(&self, names: impl IntoIterator<Item = String>) {
            let mut held = self.0.lock().unwrap();
            held.0 = names.into_iter().collect();
            held.1 += 1;
        }
    }

    impl ToolRoster for Names {
        fn has_tool(&self, name: &str) -> bool {
            self.0.lock().unwrap().0.contains(name)
        }

        fn version(&self) -> u64 {
            self.0.lock().unwrap().1
        }
    }

    #[test]
    fn the_labels_of_tools_that_are_gone_go_to_new_ones_with_their_series() {
        let metrics = Metrics::default();
        let roster = Arc::new(Names::default());
        metrics.watch_tools(roster.clone());
        let live = |from: usize| (from..from + MAX_TOOL_LABELS).map(|i| format!("t{i}"));
        roster.set(live(0));
        for name in live(0) {
            metrics.call(&sample(Some(&name), "ok"));
        }
        // Every place is taken by a tool that is there: a new one has none.
        roster.set(live(0).chain(["new".to_owned()]));
        metrics.call(&sample(Some("new"), "ok"));
        let text = metrics.render(&Snapshot::default());
        assert!(!text.contains(r#"tool="new""#), "{text}");
        assert!(text.contains(r#"outcome="ok",tool=""} 1"#), "{text}");
        // The first 500 go, 500 others come: each has its label, the old series are gone.
        roster.set(live(MAX_TOOL_LABELS).chain(["new".to_owned()]));
        for name in live(MAX_TOOL_LABELS) {
            metrics.call(&sample(Some(&name), "tool_error"));
        }
        let text = metrics.render(&Snapshot::default());
        assert!(text.contains(r#"outcome="tool_error",tool="t999"} 1"#));
        assert!(!text.contains(r#"tool="t0""#), "{text}");
        assert_eq!(text.matches("runtime_tools_tool_calls_total{").count(), 501);
        assert_eq!(
            metrics.tool_labels.lock().unwrap().names.len(),
            MAX_TOOL_LABELS
        );
    }
}
