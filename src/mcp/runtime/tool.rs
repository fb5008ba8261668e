//! The handler of a registered server's tools: runs their calls on its connection and counts
//! the calls that could not connect.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use actix::prelude::*;
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use rmcp::{Peer, RoleClient};

use crate::domain::call::{LocalHandler, ToolCall, ToolOutcome};
use crate::domain::callback_url::CallbackUrl;
use crate::domain::failures::{FailureTracker, Liveness};
use crate::mcp::call::{CallFailure, call_tool};
use crate::mcp::mapping;
use crate::mcp::status::{McpBoard, RuntimeMcpState};

use super::McpPlugins;
use super::connection::probe;
use super::messages::ServerDead;

/// Runs a call of a registered server's tool — `tools/call` on its connection, bounded by its
/// `timeout_seconds` — and counts the calls that could not connect to it: for a `plugin:`
/// source the third in a row has the server removed before the call answers.
pub(super) struct PluginTool {
    pub(super) name: Arc<str>,
    pub(super) generation: u64,
    pub(super) source: String,
    pub(super) url: CallbackUrl,
    pub(super) peer: Peer<RoleClient>,
    pub(super) timeout: Duration,
    /// The bound of a call's result (`dispatch.max_response_bytes`).
    pub(super) max_result_bytes: usize,
    pub(super) failures: Mutex<FailureTracker>,
    /// The last call could not connect (so the board says so).
    pub(super) was_unreachable: AtomicBool,
    pub(super) plugins: Addr<McpPlugins>,
    pub(super) board: McpBoard,
}

impl PluginTool {
    /// The call reached the server: the count starts again, and the board says it is back.
    fn reached(&self) {
        self.failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .record(&self.source, self.url.origin(), Liveness::Reachable);
        if self.was_unreachable.swap(false, Ordering::AcqRel) {
            self.board.update_runtime(&self.name, |r| {
                r.state = RuntimeMcpState::Connected;
                r.last_error = None;
            });
        }
    }

    /// The call could not connect; the third time in a row (for a `plugin:` source), the
    /// server's tools are removed before this returns.
    async fn unreachable(&self, error: &str) {
        let reached = self
            .failures
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .record(&self.source, self.url.origin(), Liveness::ConnectFailed);
        self.was_unreachable.store(true, Ordering::Release);
        self.board.update_runtime(&self.name, |r| {
            r.state = RuntimeMcpState::Unreachable;
            r.last_error = Some(error.to_owned());
        });
        if let Some(failures) = reached {
            let dead = ServerDead {
                name: self.name.to_string(),
                generation: self.generation,
                failures,
            };
            if self.plugins.send(dead).await.is_err() {
                tracing::warn!(mcp_server = %self.name, "could not remove the tools of a dead MCP server: its registry has stopped");
            }
        }
    }
}

/// The handler of a server's tools: one per registration, so its address tells the server's
/// tools from any other tool of the same source.
pub(super) struct PluginToolHandler(pub(super) Arc<PluginTool>);

impl LocalHandler for PluginToolHandler {
    fn call(&self, call: ToolCall) -> BoxFuture<'static, ToolOutcome> {
        let this = self.0.clone();
        async move {
            let failure =
                match call_tool(&this.peer, call, this.timeout, this.max_result_bytes).await {
                    Ok(result) => {
                        this.reached();
                        return mapping::outcome(result);
                    }
                    Err(failure) => failure,
                };
            // A failure of the transport: whether the server can still be connected to decides
            // whether it counts towards removal. An error answer is an answer (the server is
            // there); a server that went quiet is not a dead one: as a callback's read timeout,
            // either starts the count again.
            if let CallFailure::Transport(_) = failure
                && let Err(connect) = probe(&this.url).await
            {
                let error = format!(
                    "MCP server {} could not be reached: could not connect to {}: {connect}",
                    this.name,
                    this.url.origin()
                );
                this.unreachable(&error).await;
                return Err(error);
            }
            this.reached();
            Err(failure.text(&this.name, this.timeout))
        }
        .boxed()
    }

    fn timeout(&self) -> Option<Duration> {
        Some(self.0.timeout)
    }
}
