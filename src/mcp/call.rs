//! A call of an MCP server's tool: `tools/call` on the connection the tool was listed on, bounded
//! by the server's `timeout_seconds`.
//!
//! A call that ends without its answer — cancelled (the person interrupted, or the invoke's
//! client went away: the call's future is dropped) or timed out — tells the server so with
//! `notifications/cancelled` naming the request's id, MCP's cancellation notice, so the server
//! can stop the work. rmcp sends nothing when a request's future is dropped, so the notice is
//! this module's: the request goes out as a cancellable one, and a guard that lives as long as
//! the wait for its answer sends the notice unless the answer came.

use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use rmcp::model::{
    CallToolRequestParams, CancelledNotificationParam, ClientRequest, Request, RequestId,
    ServerResult,
};
use rmcp::service::PeerRequestOptions;
use rmcp::{Peer, RoleClient};

use super::mapping;
use crate::domain::call::{LocalHandler, ToolCall, ToolOutcome, seconds};
use crate::domain::peer_text;

/// The reason a dropped call's notice gives.
const CANCELLED_REASON: &str = "the call was cancelled";

/// Runs a call of an MCP server's tool.
pub(super) struct McpToolHandler {
    server: Arc<str>,
    peer: Peer<RoleClient>,
    timeout: Duration,
}

impl McpToolHandler {
    /// Calls on `peer`, the connection to the server named `server`, each bounded by `timeout`.
    pub(super) fn new(server: &str, peer: Peer<RoleClient>, timeout: Duration) -> Self {
        Self {
            server: server.into(),
            peer,
            timeout,
        }
    }
}

impl LocalHandler for McpToolHandler {
    fn call(&self, call: ToolCall) -> BoxFuture<'static, ToolOutcome> {
        let (server, peer, timeout) = (self.server.clone(), self.peer.clone(), self.timeout);
        async move {
            let params = CallToolRequestParams::new(call.name).with_arguments(call.arguments);
            let request = ClientRequest::CallToolRequest(Request::new(params));
            let could_not = |e: &dyn std::fmt::Display| {
                peer_text::bounded(format!("MCP server {server} could not run the call: {e}"))
            };
            let handle = peer
                .send_cancellable_request(request, PeerRequestOptions::no_options())
                .await
                .map_err(|e| could_not(&e))?;
            let mut unanswered = Unanswered {
                peer: peer.clone(),
                id: Some(handle.id.clone()),
                reason: CANCELLED_REASON.to_owned(),
            };
            match tokio::time::timeout(timeout, handle.await_response()).await {
                Ok(answer) => {
                    unanswered.id = None;
                    match answer {
                        Ok(ServerResult::CallToolResult(result)) => mapping::outcome(result),
                        Ok(_) => Err(could_not(&"it answered tools/call with another result")),
                        Err(e) => Err(could_not(&e)),
                    }
                }
                Err(_) => {
                    unanswered.reason = format!("the call timed out after {} s", seconds(timeout));
                    Err(format!(
                        "MCP server {server} did not answer tools/call within {} s",
                        seconds(timeout)
                    ))
                }
            }
        }
        .boxed()
    }

    fn timeout(&self) -> Option<Duration> {
        Some(self.timeout)
    }
}

/// A request whose answer has not come: dropped while it still names the request, it sends the
/// server `notifications/cancelled` for it.
struct Unanswered {
    peer: Peer<RoleClient>,
    /// The request's id; `None` once it was answered.
    id: Option<RequestId>,
    reason: String,
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else {
            return;
        };
        // Sending is async (through the connection's queue): a task of its own, so the drop
        // never waits. Without a runtime (the process is ending) there is no connection left to
        // tell.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let peer = self.peer.clone();
        let notice =
            CancelledNotificationParam::new(Some(id), Some(std::mem::take(&mut self.reason)));
        runtime.spawn(async move {
            if let Err(e) = peer.notify_cancelled(notice).await {
                tracing::debug!(error = %e, "could not tell an MCP server that a call was cancelled");
            }
        });
    }
}
