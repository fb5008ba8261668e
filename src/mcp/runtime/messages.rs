//! The messages of `McpPlugins`, what they answer, and how a registration fails.

use std::time::Duration;

use actix::prelude::*;
use serde::Serialize;

use crate::actors::change::ChangeReport;
use crate::actors::router::RouterError;
use crate::domain::approval::McpApproval;
use crate::domain::callback_url::CallbackUrl;
use crate::domain::limits::CallLimits;
use crate::domain::ownership::TokenHash;
use crate::domain::tool::Behavior;
use crate::mcp::mapping::Skipped;

use super::MAX_RUNTIME_SERVERS;

/// One MCP server as a plugin registers it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct McpRegistration {
    /// Letters, digits, `-`, `_`, `.`: unique among MCP servers.
    pub name: String,
    /// Its Streamable HTTP endpoint, on loopback.
    pub url: CallbackUrl,
    /// The character that gets its tools; `None`: every character that exists when its tools
    /// are (re)listed.
    pub role: Option<String>,
    pub source: String,
    /// The longest the registration's connect, initialize and listing take together, and the
    /// longest one `tools/call` takes.
    pub timeout: Duration,
    /// Whether a live conversation waits for its tools' calls.
    pub behavior: Behavior,
    /// Which of its tools' calls wait for a person's approval.
    pub approval: McpApproval,
    /// Each of its tools' limits (`max_concurrent`, `rate`, `dedupe_seconds`).
    pub limits: CallLimits,
}

/// Register (or replace) an MCP server for a plugin; answers once its tools are registered and
/// synced (and, when the server keeps state, the registration is durable), or why it could not
/// be reached.
#[derive(Message, Debug)]
#[rtype(result = "Result<McpRegistered, McpPluginError>")]
pub(crate) struct RegisterMcpServer {
    pub registration: McpRegistration,
    /// The plugin's token hash, if it sent one.
    pub token: Option<TokenHash>,
    /// The registration's body as sent (JSON text): what the state store keeps, when the
    /// server keeps state.
    pub record: Option<String>,
}

/// Remove an MCP server registered at run time: its tools from every character, its connection
/// closed.
#[derive(Message, Debug)]
#[rtype(result = "Result<McpUnregistered, McpPluginError>")]
pub(crate) struct UnregisterMcpServer {
    pub name: String,
    /// The plugin's token hash, if it sent one.
    pub token: Option<TokenHash>,
}

/// Close every connection (the server is stopping); answers once each is closed (or
/// [`CLOSE_TIMEOUT`] passed).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(crate) struct CloseMcpPlugins;

/// A server announced `notifications/tools/list_changed`.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(super) struct ToolListChanged {
    pub(super) name: String,
    pub(super) generation: u64,
}

/// A connection ended by itself (the MCP session was closed under us).
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(super) struct ConnectionEnded {
    pub(super) name: String,
    pub(super) generation: u64,
    pub(super) reason: String,
}

/// The third call in a row of a `plugin:` server's tools could not connect to it; answered
/// once its tools are gone.
#[derive(Message, Debug)]
#[rtype(result = "()")]
pub(super) struct ServerDead {
    pub(super) name: String,
    pub(super) generation: u64,
    pub(super) failures: u32,
}

/// Which step of a registration failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) enum McpStage {
    /// The TCP connection to the endpoint.
    #[serde(rename = "connect")]
    Connect,
    /// MCP's `initialize` handshake.
    #[serde(rename = "initialize")]
    Initialize,
    /// Listing the tools.
    #[serde(rename = "tools/list")]
    ToolsList,
}

impl McpStage {
    pub(super) fn name(self) -> &'static str {
        match self {
            McpStage::Connect => "connect",
            McpStage::Initialize => "initialize",
            McpStage::ToolsList => "tools/list",
        }
    }
}

/// What a registration did.
#[derive(Debug, Clone, Default)]
pub(crate) struct McpRegistered {
    /// The tools registered, in the server's order.
    pub tools: Vec<String>,
    /// Tools of its listing that could not be registered, and why.
    pub skipped: Vec<Skipped>,
    pub report: ChangeReport,
    /// Why nothing was registered (or no role took the tools), when that is so.
    pub error: Option<String>,
    /// The step that failed, when the server could not be reached.
    pub stage: Option<McpStage>,
}

impl McpRegistered {
    /// True when the server's tools are registered (and some role took them, if it has any).
    pub(crate) fn ok(&self) -> bool {
        self.error.is_none()
    }

    pub(super) fn failed(stage: Option<McpStage>, error: String) -> Self {
        Self {
            error: Some(error),
            stage,
            ..Self::default()
        }
    }
}

/// What an unregistration did.
#[derive(Debug, Clone, Default)]
pub(crate) struct McpUnregistered {
    /// Whether a server of that name was registered.
    pub removed: bool,
    pub report: ChangeReport,
}

/// Why a registration was refused before anything was tried.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum McpPluginError {
    #[error(transparent)]
    Router(#[from] RouterError),
    /// Another MCP server's tools have this source: a source names one server's tools.
    #[error(
        "source {taken:?} is the source of MCP server {server:?}: each MCP server needs a source \
         of its own"
    )]
    SourceTaken { taken: String, server: String },
    #[error(
        "{MAX_RUNTIME_SERVERS} MCP servers are registered already (the most at once): unregister \
         one first"
    )]
    TooMany,
    /// The router has stopped: the tools could not be registered (or removed).
    #[error("the tool router has stopped")]
    RouterStopped,
}
