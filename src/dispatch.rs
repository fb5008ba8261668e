//! `Dispatcher`: runs a tool call — a remote plugin's HTTP callback or an in-process actor — and
//! turns every outcome into a [`ToolResult`] the model can see.
//!
//! The HTTP handlers (the invoke route) and the model sessions call it. It is `Send` and cheap to
//! clone; the `awc::Client` it uses is `!Send`, so each thread (HTTP worker or arbiter) owns its
//! own client and keep-alive pool, created on first use. Connection failures of `plugin:` sources
//! are counted here, and the third in a row asks the router to remove that origin's tools.

use std::fmt;
use std::io;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use actix_web::error::ParseError;
use actix_web::http::header::{CONTENT_ENCODING, CONTENT_LENGTH};
use actix_web::rt::net::TcpStream;
use actix_web::web::Bytes;
use awc::error::{ConnectError, PayloadError, SendRequestError};
use futures_util::future::{Either, select};
use tokio::sync::{Notify, watch};
use url::{Host, Url};

use crate::config::DispatchSettings;
use crate::domain::call::{ToolCall, ToolOutcome, ToolResult, map_callback_response};
use crate::domain::failures::{DeadOrigin, DeadOriginRemover, Liveness, SharedFailures};
use crate::domain::tool::{RemoteEndpoint, SharedTool, ToolHandler};

/// Connections to callbacks kept per thread. Above the concurrency any realistic client uses,
/// so calls never queue behind each other for a connection.
pub const CALLBACK_CONNECTION_LIMIT: usize = 4096;

/// Longest wait for a TCP connection to a callback. On loopback a listening plugin accepts at
/// once; this only bounds a full accept queue, and counts as a connection failure.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long an idle keep-alive connection to a callback is kept for reuse. Just under the 5 s
/// idle timeout of the usual plugin servers (uvicorn, Node, actix-web), so we let a connection go
/// before the plugin closes it under a call we are sending.
pub const CALLBACK_KEEP_ALIVE: Duration = Duration::from_secs(4);

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
    failures: SharedFailures,
    removals: Arc<dyn DeadOriginRemover>,
    /// `Some(grace)` once calls are abandoned (the server is stopping).
    abandoned: watch::Sender<Option<Duration>>,
    /// Calls running now, and a wake-up for whoever waits for none.
    in_flight: AtomicUsize,
    idle: Notify,
}

/// One running call, counted while it lives.
struct InFlight<'a>(&'a Inner);

impl<'a> InFlight<'a> {
    fn enter(inner: &'a Inner) -> Self {
        inner.in_flight.fetch_add(1, Ordering::AcqRel);
        Self(inner)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Dispatcher {
    /// `failures` are the counts it keeps (shared with whoever forgets pairs that are gone);
    /// `removals` removes the tools of the origins it finds dead (the router).
    pub fn new(
        settings: &DispatchSettings,
        failures: SharedFailures,
        removals: Arc<dyn DeadOriginRemover>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                max_response_bytes: settings.max_response_bytes,
                failures,
                removals,
                abandoned: watch::Sender::new(None),
                in_flight: AtomicUsize::new(0),
                idle: Notify::new(),
            }),
        }
    }

    /// Runs `call` against `tool`. Never fails: every problem becomes an error result.
    pub async fn dispatch(&self, tool: &SharedTool, call: ToolCall) -> ToolResult {
        let _running = InFlight::enter(&self.inner);
        let mut abandoned = self.inner.abandoned.subscribe();
        let work = std::pin::pin!(async {
            match &tool.handler {
                ToolHandler::Remote(endpoint) => self.call_remote(tool, endpoint, &call).await,
                ToolHandler::Local(handler) => {
                    let run = handler.0.call(call.clone());
                    match tokio::time::timeout(LOCAL_TOOL_TIMEOUT, run).await {
                        Ok(outcome) => outcome,
                        Err(_) => Err(format!(
                            "in-process tool '{}' timed out after {} s",
                            tool.name,
                            LOCAL_TOOL_TIMEOUT.as_secs()
                        )),
                    }
                }
            }
        });
        let stopping = std::pin::pin!(abandoned.wait_for(Option::is_some));
        let outcome = match select(work, stopping).await {
            Either::Left((outcome, _)) => outcome,
            Either::Right((grace, _)) => {
                let grace = grace.ok().and_then(|g| *g).unwrap_or_default();
                Err(format!(
                    "the server is stopping: the call did not finish within the {} s grace period",
                    format_seconds(grace)
                ))
            }
        };
        let result = call.result(outcome);
        // Arguments and results may carry the user's conversation: they are never logged.
        tracing::debug!(tool = %result.name, call_id = %result.call_id, is_error = result.is_error, "tool call finished");
        result
    }

    /// Ends every call still running, and every later one, with a tool error saying the server
    /// is stopping: the end of a graceful stop's `grace` period.
    pub fn abandon_calls(&self, grace: Duration) {
        self.inner.abandoned.send_replace(Some(grace));
    }

    /// Resolves once no call is running.
    pub async fn idle(&self) {
        loop {
            let notified = self.inner.idle.notified();
            if self.inner.in_flight.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }

    async fn call_remote(
        &self,
        tool: &SharedTool,
        endpoint: &RemoteEndpoint,
        call: &ToolCall,
    ) -> ToolOutcome {
        tracing::debug!(tool = %call.name, call_id = %call.call_id, argument_bytes = call.raw_arguments.len(), "calling remote tool");
        let (liveness, outcome) =
            match tokio::time::timeout(endpoint.timeout, self.exchange(endpoint, call)).await {
                Ok(Ok((status, body))) => {
                    (Liveness::Reachable, map_callback_response(status, &body))
                }
                Ok(Err(failure)) => (failure.liveness, Err(failure.error)),
                // A connect that takes too long ends in the connector (`CONNECT_TIMEOUT`) and
                // counts; reaching the tool's own deadline first means the callback went quiet
                // (or the tool allows less time than a connect may take): a read timeout, which
                // never counts.
                Err(_) => (
                    Liveness::Reachable,
                    Err(format!(
                        "remote tool callback timed out after {} s",
                        format_seconds(endpoint.timeout)
                    )),
                ),
            };
        self.record(tool, liveness).await;
        outcome
    }

    /// One POST to the callback and its whole (capped) response body.
    async fn exchange(
        &self,
        endpoint: &RemoteEndpoint,
        call: &ToolCall,
    ) -> Result<(u16, Bytes), CallFailure> {
        let client = CLIENT.with(awc::Client::clone);
        let mut response = match client
            .post(endpoint.callback_url.url().as_str())
            .send_json(call)
            .await
        {
            Ok(response) => response,
            Err(e) => return Err(send_failure(endpoint, e).await),
        };
        let status = response.status().as_u16();
        // awc ends a sized body quietly when the connection closes early; a body shorter than
        // its `Content-Length` is a broken answer, not an output. (With a `Content-Encoding` the
        // length counts the encoded bytes, so only identity bodies can be compared.)
        let declared = match response.headers().get(CONTENT_ENCODING) {
            Some(encoding) if encoding.as_bytes() != b"identity" => None,
            _ => response
                .headers()
                .get(CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<usize>().ok()),
        };
        match response.body().limit(self.inner.max_response_bytes).await {
            Ok(body) if declared.is_some_and(|n| n != body.len()) => {
                Err(CallFailure::reachable(format!(
                    "remote tool callback closed the connection in the middle of its answer \
                     ({} of {} bytes received)",
                    body.len(),
                    declared.unwrap_or_default()
                )))
            }
            Ok(body) => Ok((status, body)),
            Err(PayloadError::Overflow) => Err(CallFailure::reachable(format!(
                "remote tool callback response exceeded the {}-byte limit (dispatch.max_response_bytes)",
                self.inner.max_response_bytes
            ))),
            Err(e) => Err(CallFailure::reachable(format!(
                "remote tool callback response could not be read: {e}"
            ))),
        }
    }

    async fn record(&self, tool: &SharedTool, liveness: Liveness) {
        let Some(origin) = tool.callback_origin() else {
            return;
        };
        let reached = self
            .inner
            .failures
            .lock()
            .record(&tool.source, origin, liveness);
        if let Some(failures) = reached {
            // The call that removes the tools returns once they are gone (sessions synced), so
            // anything its caller does next — a listing, another invoke — sees the removal.
            let removal = self.inner.removals.remove(DeadOrigin {
                source: tool.source.clone(),
                origin: origin.clone(),
                failures,
            });
            if !removal.await {
                tracing::warn!(source = %tool.source, origin = %origin, "could not remove the tools of a dead plugin origin: the router has stopped");
            }
        }
    }
}

/// Why an exchange produced no response to map, and what it says about the callback's origin.
struct CallFailure {
    liveness: Liveness,
    error: String,
}

impl CallFailure {
    fn reachable(error: String) -> Self {
        Self {
            liveness: Liveness::Reachable,
            error,
        }
    }

    fn connect_failed(endpoint: &RemoteEndpoint, detail: impl fmt::Display) -> Self {
        Self {
            liveness: Liveness::ConnectFailed,
            error: format!(
                "could not connect to remote tool callback {}: {detail}",
                endpoint.callback_url.origin()
            ),
        }
    }
}

/// Classifies a request that got no response.
async fn send_failure(endpoint: &RemoteEndpoint, error: SendRequestError) -> CallFailure {
    match error {
        // awc reports a connection that ended before the response head as `Disconnected`
        // too: the connection had been made, so it is not a connection-level failure by itself.
        SendRequestError::Connect(ConnectError::Disconnected) => {
            connection_lost(endpoint, "closed the connection without answering").await
        }
        SendRequestError::Connect(e) => CallFailure::connect_failed(endpoint, e),
        SendRequestError::Send(e) => {
            connection_lost(
                endpoint,
                format!("connection failed while sending the call ({e})"),
            )
            .await
        }
        SendRequestError::Response(ParseError::Io(e)) => {
            connection_lost(
                endpoint,
                format!("connection failed before answering ({e})"),
            )
            .await
        }
        other => CallFailure::reachable(format!("remote tool callback failed: {other}")),
    }
}

/// An exchange broke on a connection that had been made. It may have been a kept-alive
/// connection whose plugin has since exited — awc only notices a closed idle connection if the
/// close was seen before the call — so a fresh connection attempt (no request is sent on it)
/// tells a dead plugin, whose failure counts towards removal, from a live one that misbehaved.
async fn connection_lost(endpoint: &RemoteEndpoint, what: impl fmt::Display) -> CallFailure {
    match probe(endpoint.callback_url.url()).await {
        Ok(()) => CallFailure::reachable(format!(
            "remote tool callback {} {what}",
            endpoint.callback_url.origin()
        )),
        Err(e) => CallFailure::connect_failed(
            endpoint,
            format!("the callback {what}, and a new connection failed: {e}"),
        ),
    }
}

/// Opens (and at once closes) a TCP connection to `url`'s host and port.
async fn probe(url: &Url) -> io::Result<()> {
    let port = url.port_or_known_default().unwrap_or(80);
    let connect = async {
        match url.host() {
            Some(Host::Ipv4(ip)) => TcpStream::connect((IpAddr::V4(ip), port)).await,
            Some(Host::Ipv6(ip)) => TcpStream::connect((IpAddr::V6(ip), port)).await,
            Some(Host::Domain(name)) => TcpStream::connect((name, port)).await,
            None => Err(io::Error::new(io::ErrorKind::InvalidInput, "no host")),
        }
    };
    match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
        Ok(stream) => stream.map(drop),
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "timeout while establishing connection",
        )),
    }
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
