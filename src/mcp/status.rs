//! `McpBoard`: the state of every MCP server whose tools the characters get — each configured
//! one (written by its client actor) and each one plugins registered at run time (written by
//! `McpPlugins` and by its tools' calls) — read by `GET /api/mcp`. Every change of a report is
//! announced as an `mcp.state` event, and so is the removal of a server registered at run time.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use indexmap::IndexMap;
use serde::Serialize;

use super::mapping::Skipped;
use super::settings::McpServerSettings;
use crate::events::EventHub;

/// Where an MCP server's connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum McpState {
    /// Starting the process or connecting, then initializing and listing.
    Connecting,
    /// Its tools are registered.
    Connected,
    /// Waiting before the next attempt; its tools are removed.
    Backoff,
}

/// One MCP server, as `GET /api/mcp` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct McpServerReport {
    pub state: McpState,
    /// `stdio` or `http`.
    pub transport: &'static str,
    /// The source its tools are registered with: `mcp:<name>`.
    pub source: String,
    /// The characters that get its tools; `null`: every character.
    pub roles: Option<Vec<String>>,
    /// The tools registered from its last listing, in its order.
    pub tools: Vec<String>,
    /// Tools of the listing that break this server's name rule, and why.
    pub skipped: Vec<Skipped>,
    /// Why the last connection failed or ended; `null` once connected.
    pub last_error: Option<String>,
    /// How many times it was started again after a failure or a disconnection.
    pub restarts: u32,
    /// The child process, for a stdio server that is running.
    pub pid: Option<u32>,
}

/// Where the connection to an MCP server registered at run time stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RuntimeMcpState {
    /// Registered; its last exchange (the listing, or a call) reached it.
    Connected,
    /// Its last call could not connect to it (a `plugin:` source's tools are removed after
    /// three such failures in a row).
    Unreachable,
    /// Restored from the state store after a restart and not answering yet: its tools (as its
    /// last listing had them) are listed dormant, given to no model.
    Dormant,
}

/// One MCP server a plugin registered at run time (`POST /api/mcp/register`), as
/// `GET /api/mcp` reports it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct RuntimeMcpReport {
    pub state: RuntimeMcpState,
    /// Always `http` (Streamable HTTP).
    pub transport: &'static str,
    /// Its endpoint, as registered.
    pub url: String,
    /// The source its tools are registered with.
    pub source: String,
    /// The character that gets its tools; `null`: every character that existed at its
    /// registration (and at each listing since).
    pub role: Option<String>,
    /// The tools registered from its last listing, in its order.
    pub tools: Vec<String>,
    /// Tools of the listing that could not be registered, and why.
    pub skipped: Vec<Skipped>,
    /// The longest one `tools/call` may take.
    pub timeout_seconds: f64,
    /// When it was registered (RFC 3339, UTC).
    pub registered_at: String,
    /// Why its last listing or call failed; `null` after an exchange that reached it.
    pub last_error: Option<String>,
}

/// The data of the `mcp.state` event that announces a server registered at run time going
/// away.
#[derive(Debug, Serialize)]
struct Removed<'a> {
    state: &'static str,
    reason: &'a str,
}

/// Every MCP server's report; cheap to clone.
#[derive(Debug, Clone, Default)]
pub(crate) struct McpBoard(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    reports: Mutex<Reports>,
    /// Where changes are announced; `None` on a board nobody follows.
    events: Option<EventHub>,
}

#[derive(Debug, Default)]
struct Reports {
    /// In configuration order.
    configured: IndexMap<String, McpServerReport>,
    /// In registration order.
    runtime: IndexMap<String, RuntimeMcpReport>,
}

impl McpBoard {
    /// A board with every configured server connecting, and none registered at run time; its
    /// changes are announced on `events`.
    pub(crate) fn new(servers: &[McpServerSettings], events: EventHub) -> Self {
        let configured = servers
            .iter()
            .map(|s| {
                let report = McpServerReport {
                    state: McpState::Connecting,
                    transport: s.transport_kind(),
                    source: s.source(),
                    roles: s.roles.clone(),
                    tools: Vec::new(),
                    skipped: Vec::new(),
                    last_error: None,
                    restarts: 0,
                    pid: None,
                };
                (s.name.clone(), report)
            })
            .collect();
        Self(Arc::new(Inner {
            reports: Mutex::new(Reports {
                configured,
                runtime: IndexMap::new(),
            }),
            events: Some(events),
        }))
    }

    fn reports(&self) -> MutexGuard<'_, Reports> {
        // A report is replaced field by field: a panic halfway leaves a report worth reading.
        self.0
            .reports
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Changes one configured server's report (announced when it changed).
    pub(crate) fn update(&self, name: &str, change: impl FnOnce(&mut McpServerReport)) {
        let mut reports = self.reports();
        if let Some(report) = reports.configured.get_mut(name) {
            let before = report.clone();
            change(report);
            if *report != before {
                self.announce(name, "configured", report);
            }
        }
    }

    /// Every configured server's report, in configuration order.
    pub(crate) fn configured(&self) -> IndexMap<String, McpServerReport> {
        self.reports().configured.clone()
    }

    /// Every server registered at run time, in registration order.
    pub(crate) fn runtime(&self) -> IndexMap<String, RuntimeMcpReport> {
        self.reports().runtime.clone()
    }

    /// Whether a configured server has this name.
    pub(crate) fn is_configured(&self, name: &str) -> bool {
        self.reports().configured.contains_key(name)
    }

    /// The configured server whose tools have this source, if any.
    pub(crate) fn configured_with_source(&self, source: &str) -> Option<String> {
        self.reports()
            .configured
            .iter()
            .find(|(_, r)| r.source == source)
            .map(|(name, _)| name.clone())
    }

    /// Records (or replaces) a server registered at run time, and announces it.
    pub(crate) fn set_runtime(&self, name: &str, report: RuntimeMcpReport) {
        let mut reports = self.reports();
        self.announce(name, "runtime", &report);
        // A replacement keeps its place: it is the same server, registered again.
        reports.runtime.insert(name.to_owned(), report);
    }

    /// Changes the report of a server registered at run time (announced when it changed).
    pub(crate) fn update_runtime(&self, name: &str, change: impl FnOnce(&mut RuntimeMcpReport)) {
        let mut reports = self.reports();
        if let Some(report) = reports.runtime.get_mut(name) {
            let before = report.clone();
            change(report);
            if *report != before {
                self.announce(name, "runtime", report);
            }
        }
    }

    /// Forgets a server registered at run time, announcing why it went.
    pub(crate) fn remove_runtime(&self, name: &str, reason: &str) {
        let mut reports = self.reports();
        if reports.runtime.shift_remove(name).is_some() {
            let removed = Removed {
                state: "removed",
                reason,
            };
            self.announce(name, "runtime", &removed);
        }
    }

    /// Announces under the board's lock, so events leave in the order the reports changed
    /// (publishing never waits).
    fn announce(&self, name: &str, kind: &str, report: &impl Serialize) {
        if let Some(events) = &self.0.events {
            events.mcp_state(name, kind, report);
        }
    }
}
