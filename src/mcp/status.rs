//! `McpBoard`: each configured MCP server's state, written by its client actor and read by
//! `GET /api/mcp`.

use std::sync::{Arc, Mutex, PoisonError};

use indexmap::IndexMap;
use serde::Serialize;
use utoipa::ToSchema;

use super::mapping::Skipped;
use super::settings::McpServerSettings;

/// Where an MCP server's connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub(crate) struct McpServerReport {
    pub state: McpState,
    /// `stdio` or `http`.
    pub transport: &'static str,
    /// The source its tools are registered with: `mcp:<name>`.
    pub source: String,
    /// The characters that get its tools; `null`: every character.
    #[schema(required = true)]
    pub roles: Option<Vec<String>>,
    /// The tools registered from its last listing, in its order.
    pub tools: Vec<String>,
    /// Tools of the listing that break this server's name rule, and why.
    pub skipped: Vec<Skipped>,
    /// Why the last connection failed or ended; `null` once connected.
    #[schema(required = true)]
    pub last_error: Option<String>,
    /// How many times it was started again after a failure or a disconnection.
    pub restarts: u32,
    /// The child process, for a stdio server that is running.
    #[schema(required = true)]
    pub pid: Option<u32>,
}

/// Every MCP server's report, in configuration order; cheap to clone.
#[derive(Debug, Clone, Default)]
pub(crate) struct McpBoard(Arc<Mutex<IndexMap<String, McpServerReport>>>);

impl McpBoard {
    /// A board with every server connecting.
    pub(crate) fn new(servers: &[McpServerSettings]) -> Self {
        let reports = servers
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
        Self(Arc::new(Mutex::new(reports)))
    }

    /// Changes one server's report.
    pub(crate) fn update(&self, name: &str, change: impl FnOnce(&mut McpServerReport)) {
        let mut reports = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(report) = reports.get_mut(name) {
            change(report);
        }
    }

    /// Every report, in configuration order.
    pub(crate) fn reports(&self) -> IndexMap<String, McpServerReport> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}
