//! A call of an MCP server's tool: `tools/call` on the connection the tool was listed on, bounded
//! by the server's `timeout_seconds`, its result by `dispatch.max_response_bytes`.
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
    CallToolRequestParams, CallToolResult, CancelledNotificationParam, ClientRequest, Meta,
    Request, RequestId, ServerResult,
};
use rmcp::service::{PeerRequestOptions, ServiceError};
use rmcp::{Peer, RoleClient};

use super::bounds::{ANSWER_REFUSED, json_bytes};
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
    max_result_bytes: usize,
}

impl McpToolHandler {
    /// Calls on `peer`, the connection to the server named `server`, each bounded by `timeout`,
    /// its result by `max_result_bytes`.
    pub(super) fn new(
        server: &str,
        peer: Peer<RoleClient>,
        timeout: Duration,
        max_result_bytes: usize,
    ) -> Self {
        Self {
            server: server.into(),
            peer,
            timeout,
            max_result_bytes,
        }
    }
}

impl LocalHandler for McpToolHandler {
    fn call(&self, call: ToolCall) -> BoxFuture<'static, ToolOutcome> {
        let (server, peer, timeout) = (self.server.clone(), self.peer.clone(), self.timeout);
        let max = self.max_result_bytes;
        async move {
            match call_tool(&peer, call, timeout, max).await {
                Ok(result) => mapping::outcome(result),
                Err(failure) => Err(failure.text(&server, timeout)),
            }
        }
        .boxed()
    }

    fn timeout(&self) -> Option<Duration> {
        Some(self.timeout)
    }
}

/// Why a call brought no result.
#[derive(Debug)]
pub(super) enum CallFailure {
    /// The server answered with an error, or with something other than a call's result: it is
    /// there.
    Answered(String),
    /// The request or its answer was lost on the way: the connection failed or closed.
    Transport(String),
    /// No answer came within the timeout; the server was told the call is cancelled.
    TimedOut,
}

impl CallFailure {
    /// The tool error the model gets for a call of `server`'s tool bounded by `timeout`.
    pub(super) fn text(&self, server: &str, timeout: Duration) -> String {
        match self {
            CallFailure::Answered(e) | CallFailure::Transport(e) => {
                peer_text::bounded(format!("MCP server {server} could not run the call: {e}"))
            }
            CallFailure::TimedOut => format!(
                "MCP server {server} did not answer tools/call within {} s",
                seconds(timeout)
            ),
        }
    }
}

/// `tools/call` on `peer`, waiting at most `timeout` for the answer, which may be at most
/// `max_result_bytes` (as JSON). A wait that ends without the answer (this future dropped, or
/// the timeout) sends the server `notifications/cancelled` for the request.
pub(super) async fn call_tool(
    peer: &Peer<RoleClient>,
    call: ToolCall,
    timeout: Duration,
    max_result_bytes: usize,
) -> Result<CallToolResult, CallFailure> {
    // The call's trace context goes in `_meta` (SEP-414), so the server's own spans of the
    // call join the call's trace.
    let mut options = PeerRequestOptions::no_options();
    if let Some(trace) = &call.trace {
        let mut meta = Meta::new();
        crate::observe::trace::inject(trace, |name, value| {
            meta.insert(name.to_owned(), serde_json::Value::String(value));
        });
        options.meta = Some(meta);
    }
    let params = CallToolRequestParams::new(call.name).with_arguments(call.arguments);
    let request = ClientRequest::CallToolRequest(Request::new(params));
    let handle = peer
        .send_cancellable_request(request, options)
        .await
        .map_err(|e| CallFailure::Transport(e.to_string()))?;
    let mut unanswered = Unanswered {
        peer: peer.clone(),
        id: Some(handle.id.clone()),
        reason: CANCELLED_REASON.to_owned(),
    };
    let Ok(answer) = tokio::time::timeout(timeout, handle.await_response()).await else {
        unanswered.reason = format!("the call timed out after {} s", seconds(timeout));
        return Err(CallFailure::TimedOut);
    };
    unanswered.id = None;
    match answer {
        // A stdio server's answer is bounded only as a message: its result is measured here.
        Ok(ServerResult::CallToolResult(result)) if json_bytes(&result) > max_result_bytes => {
            Err(CallFailure::Answered(format!(
                "its result is over the {max_result_bytes}-byte limit \
                 (dispatch.max_response_bytes)"
            )))
        }
        Ok(ServerResult::CallToolResult(result)) => Ok(result),
        // Refused by the client for what it was: its text says why.
        Err(ServiceError::McpError(e)) if e.code.0 == ANSWER_REFUSED => {
            Err(CallFailure::Answered(e.message.into_owned()))
        }
        Ok(_) => Err(CallFailure::Answered(
            "it answered tools/call with another result".to_owned(),
        )),
        Err(e @ (ServiceError::McpError(_) | ServiceError::UnexpectedResponse)) => {
            Err(CallFailure::Answered(e.to_string()))
        }
        Err(e) => Err(CallFailure::Transport(e.to_string())),
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
