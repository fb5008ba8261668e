//! `Dispatcher`: runs a tool call — a remote plugin's HTTP callback or an in-process actor — and
//! turns every outcome into a [`ToolResult`] the model can see.
//!
//! The HTTP handlers (the invoke route) and the model sessions call it. It is `Send` and cheap to
//! clone; the `awc::Client` it uses is `!Send`, so each thread (HTTP worker or arbiter) owns its
//! own client and keep-alive pool, created on first use. Connection failures of `plugin:` sources
//! are counted here, and the third in a row asks the router to remove that origin's tools.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix::Recipient;
use awc::error::{PayloadError, SendRequestError};

use crate::actors::router::RemoveDeadOrigin;
use crate::config::DispatchSettings;
use crate::domain::call::{ToolCall, ToolOutcome, ToolResult, map_callback_response};
use crate::domain::failures::{FailureTracker, Liveness};
use crate::domain::tool::{RemoteEndpoint, SharedTool, ToolHandler};

/// Connections to callbacks kept per thread. Above the concurrency any realistic client uses,
/// so calls never queue behind each other for a connection.
pub const CALLBACK_CONNECTION_LIMIT: usize = 4096;

/// Longest wait for a TCP connection to a callback. On loopback a listening plugin accepts at
/// once; this only bounds a full accept queue, and counts as a connection failure.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long an idle keep-alive connection to a callback is kept for reuse.
pub const CALLBACK_KEEP_ALIVE: Duration = Duration::from_secs(30);

/// Upper bound on an in-process tool's run: the largest timeout a remote tool may ask for.
pub const LOCAL_TOOL_TIMEOUT: Duration = Duration::from_secs(300);

thread_local! {
    static CLIENT: awc::Client = callback_client();
}

fn callback_client() -> awc::Client {
    let connector = awc::Connector::new()
        .limit(CALLBACK_CONNECTION_LIMIT)
        .timeout(CONNECT_TIMEOUT)
        .conn_keep_alive(CALLBACK_KEEP_ALIVE);
    awc::Client::builder()
        .connector(connector)
        // A loopback callback must not bounce the user's data elsewhere.
        .disable_redirects()
        // The tool's own timeout bounds the whole exchange instead.
        .disable_timeout()
        .finish()
}

#[derive(Clone)]
pub struct Dispatcher {
    inner: Arc<Inner>,
}

struct Inner {
    max_response_bytes: usize,
    failures: Mutex<FailureTracker>,
    removals: Recipient<RemoveDeadOrigin>,
}

impl Dispatcher {
    /// `removals` receives the dead-origin reports (the router).
    pub fn new(settings: &DispatchSettings, removals: Recipient<RemoveDeadOrigin>) -> Self {
        Self {
            inner: Arc::new(Inner {
                max_response_bytes: settings.max_response_bytes,
                failures: Mutex::new(FailureTracker::new()),
                removals,
            }),
        }
    }

    /// Runs `call` against `tool`. Never fails: every problem becomes an error result.
    pub async fn dispatch(&self, tool: &SharedTool, call: ToolCall) -> ToolResult {
        let outcome = match &tool.handler {
            ToolHandler::Remote(endpoint) => self.call_remote(tool, endpoint, &call).await,
            ToolHandler::Local(handler) => {
                match tokio::time::timeout(LOCAL_TOOL_TIMEOUT, handler.0.call(call.clone())).await {
                    Ok(outcome) => outcome,
                    Err(_) => Err(format!(
                        "in-process tool '{}' timed out after {} s",
                        tool.name,
                        LOCAL_TOOL_TIMEOUT.as_secs()
                    )),
                }
            }
        };
        let result = call.result(outcome);
        tracing::debug!(tool = %result.name, call_id = %result.call_id, is_error = result.is_error, output = %result.model_text(), "tool call finished");
        result
    }

    async fn call_remote(
        &self,
        tool: &SharedTool,
        endpoint: &RemoteEndpoint,
        call: &ToolCall,
    ) -> ToolOutcome {
        let client = CLIENT.with(awc::Client::clone);
        let url = endpoint.callback_url.url().as_str();
        tracing::debug!(tool = %call.name, call_id = %call.call_id, arguments = %call.raw_arguments, "calling remote tool");
        let exchange = async {
            let mut response = client
                .post(url)
                .send_json(call)
                .await
                .map_err(CallFailure::Send)?;
            let body = response
                .body()
                .limit(self.inner.max_response_bytes)
                .await
                .map_err(CallFailure::Body)?;
            Ok::<_, CallFailure>((response.status().as_u16(), body))
        };
        let (liveness, outcome) = match tokio::time::timeout(endpoint.timeout, exchange).await {
            Ok(Ok((status, body))) => (Liveness::Reachable, map_callback_response(status, &body)),
            Ok(Err(CallFailure::Send(SendRequestError::Connect(e)))) => (
                Liveness::ConnectFailed,
                Err(format!(
                    "could not connect to remote tool callback {}: {e}",
                    endpoint.callback_url.origin()
                )),
            ),
            Ok(Err(CallFailure::Send(e))) => (
                Liveness::Reachable,
                Err(format!("remote tool callback failed: {e}")),
            ),
            Ok(Err(CallFailure::Body(PayloadError::Overflow))) => (
                Liveness::Reachable,
                Err(format!(
                    "remote tool callback response exceeded the {}-byte limit (dispatch.max_response_bytes)",
                    self.inner.max_response_bytes
                )),
            ),
            Ok(Err(CallFailure::Body(e))) => (
                Liveness::Reachable,
                Err(format!(
                    "remote tool callback response could not be read: {e}"
                )),
            ),
            Err(_) => (
                Liveness::Reachable,
                Err(format!(
                    "remote tool callback timed out after {} s",
                    format_seconds(endpoint.timeout)
                )),
            ),
        };
        self.record(tool, liveness);
        outcome
    }

    fn record(&self, tool: &SharedTool, liveness: Liveness) {
        let Some(origin) = tool.callback_origin() else {
            return;
        };
        let reached = {
            let mut failures = self
                .inner
                .failures
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            failures.record(&tool.source, origin, liveness)
        };
        if let Some(failures) = reached {
            // Sent before this call's result is returned, so anything the caller does next is
            // queued behind the removal.
            self.inner.removals.do_send(RemoveDeadOrigin {
                source: tool.source.clone(),
                origin: origin.clone(),
                failures,
            });
        }
    }
}

enum CallFailure {
    Send(SendRequestError),
    Body(PayloadError),
}

/// `30`, `0.5`, `2.25`: seconds as a person would write them.
fn format_seconds(d: Duration) -> String {
    let text = format!("{:.3}", d.as_secs_f64());
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_read_naturally() {
        assert_eq!(format_seconds(Duration::from_secs(30)), "30");
        assert_eq!(format_seconds(Duration::from_millis(500)), "0.5");
        assert_eq!(format_seconds(Duration::from_millis(2250)), "2.25");
    }
}
