//! `Dispatcher`: runs a tool call — a remote plugin's HTTP callback or an in-process actor — and
//! turns every outcome into a [`ToolResult`] the model can see.
//!
//! The HTTP handlers (the invoke route) and the model sessions call it. It is `Send` and cheap to
//! clone. Callbacks go through hyper's HTTP/1.1 client, one keep-alive pool per thread (HTTP
//! worker or arbiter) created on first use, so an exchange never leaves the thread that asked for
//! it. Connection failures of `plugin:` sources are counted here, and the third in a row asks the
//! router to remove that origin's tools. Images in a result are checked here too, off the async
//! threads. When the server stops, calls still running at the end of the grace period are
//! answered with a tool error saying so ([`Dispatcher::abandon_calls`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::{Either, select};
use http_body_util::{BodyExt, Full};
use hyper::header::{
    CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, HOST, HeaderName, HeaderValue,
};
use tokio::sync::{Notify, watch};
use url::Position;

use self::settings::DispatchSettings;
use crate::domain::call::{
    Outcome, ToolAnswer, ToolCall, ToolResult, map_callback_response, seconds,
};
use crate::domain::failures::{DeadOrigin, DeadOriginRemover, Liveness, SharedFailures};
use crate::domain::images::{ToolImage, accept_images};
use crate::domain::tool::{RemoteEndpoint, SharedTool, ToolHandler};
use crate::observe::Observer;
use crate::observe::trace::{inject, is_header_text};

pub(crate) use self::answers::answers_http;
use self::body::BodySink;
use self::failure::{CallFailure, body_failure, send_failure};

mod answers;
mod board;
mod body;
mod cancel;
pub(crate) mod client;
mod failure;
pub(crate) mod settings;

pub(crate) use self::board::{CallBoard, CallProgress, Listed, Where};
pub use self::cancel::CallCanceller;

/// Idle connections to callbacks kept per thread and origin. Above the concurrency any realistic
/// client uses, so calls never queue behind each other for a connection.
pub(crate) const CALLBACK_CONNECTION_LIMIT: usize = 4096;

/// Longest wait for a TCP connection to a callback. On loopback a listening plugin accepts at
/// once; this only bounds a full accept queue, and counts as a connection failure.
pub(crate) const CALLBACK_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest wait for the TLS handshake of an `https` callback once its TCP connection is made
/// (a connection and its handshake get [`CALLBACK_CONNECT_TIMEOUT`] and this together). On loopback a
/// handshake takes milliseconds; this bounds a peer that accepts and never answers, which
/// counts as a connection failure rather than costing the call its whole timeout.
pub(crate) const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// How long an idle keep-alive connection to a callback is kept for reuse. Just under the 5 s
/// idle timeout of the usual plugin servers (uvicorn, Node, actix-web), so we let a connection go
/// before the plugin closes it under a call we are sending.
pub(crate) const CALLBACK_KEEP_ALIVE: Duration = Duration::from_secs(4);

/// Upper bound on an in-process tool's run: the largest timeout a remote tool may ask for.
pub(crate) const LOCAL_TOOL_TIMEOUT: Duration = crate::domain::tool::MAX_TIMEOUT;

/// The header every callback request carries. The invoke route refuses a request that has it:
/// a tool whose callback is an invoke route (this server's, or another's that calls back here)
/// would otherwise call itself without end.
pub(crate) const HOP_HEADER: &str = "x-runtime-tools-hop";

#[derive(Clone)]
pub struct Dispatcher {
    inner: Arc<Inner>,
}

struct Inner {
    max_response_bytes: usize,
    max_in_flight: usize,
    in_flight: AtomicUsize,
    /// Check arguments against the tool's schema before any call (`[dispatch]
    /// validate_arguments`).
    validate_arguments: bool,
    failures: SharedFailures,
    removals: Arc<dyn DeadOriginRemover>,
    /// `Some(grace)` once calls are abandoned (the server is stopping).
    abandoned: watch::Sender<Option<Duration>>,
    /// Calls running now (of every kind), and a wake-up for whoever waits for none.
    running: AtomicUsize,
    idle: Notify,
    /// The calls of sessions and chats running now, for progress reports.
    board: CallBoard,
    /// Makes each callback exchange's span.
    observer: Observer,
}

/// One running call, counted while it lives.
struct Running<'a>(&'a Inner);

impl<'a> Running<'a> {
    fn enter(inner: &'a Inner) -> Self {
        inner.running.fetch_add(1, Ordering::AcqRel);
        Self(inner)
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Dispatcher {
    /// `failures` are the counts it keeps (shared with whoever forgets pairs that are gone);
    /// `removals` removes the tools of the origins it finds dead (the router); `observer` makes
    /// the spans of callback exchanges.
    pub fn new(
        settings: &DispatchSettings,
        failures: SharedFailures,
        removals: Arc<dyn DeadOriginRemover>,
        observer: Observer,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                max_response_bytes: settings.max_response_bytes,
                max_in_flight: settings.max_callbacks_in_flight,
                in_flight: AtomicUsize::new(0),
                validate_arguments: settings.validate_arguments,
                failures,
                removals,
                abandoned: watch::Sender::new(None),
                running: AtomicUsize::new(0),
                idle: Notify::new(),
                board: CallBoard::default(),
                observer,
            }),
        }
    }

    /// Runs `call` against `tool`. Never fails: every problem becomes an error result.
    /// Dropping the future cancels the call (an open callback exchange is closed); so does
    /// [`Dispatcher::abandon_calls`], which answers it with a tool error.
    pub async fn dispatch(&self, tool: &SharedTool, mut call: ToolCall) -> ToolResult {
        // Arguments that do not match the schema never reach the tool: the model gets the
        // reason to fix them, and nothing counts towards the tool's auto-removal.
        if self.inner.validate_arguments
            && let Err(refused) = call.check_arguments(&tool.parameters)
        {
            tracing::debug!(tool = %call.name, call_id = %call.call_id, "arguments do not match the tool's parameters; not called");
            return call.failed(Outcome::InvalidArguments, refused.message(&tool.name));
        }
        let _running = Running::enter(&self.inner);
        let mut abandoned = self.inner.abandoned.subscribe();
        let work = std::pin::pin!(self.run(tool, &call));
        let stopping = std::pin::pin!(abandoned.wait_for(Option::is_some));
        let answer = match select(work, stopping).await {
            Either::Left((answer, _)) => answer,
            Either::Right((grace, _)) => {
                let grace = grace.ok().and_then(|g| *g).unwrap_or_default();
                ToolAnswer::failed(
                    Outcome::Stopped,
                    format!(
                        "the server is stopping: the call did not finish within the {} s grace \
                         period",
                        seconds(grace)
                    ),
                )
            }
        };
        let (images, warnings) = match &answer.images {
            Some(raw) => check_images(raw.clone()).await,
            None => (Vec::new(), Vec::new()),
        };
        let mut result = call.result(answer, images);
        result.add_image_warnings(warnings);
        // Arguments and results may carry the user's conversation: they are never logged.
        tracing::debug!(tool = %result.name, call_id = %result.call_id, is_error = result.is_error, images = result.images.len(), "tool call finished");
        result
    }

    /// Ends every call still running, and every later one, with a tool error saying the server
    /// is stopping: the end of a graceful stop's `grace` period.
    pub fn abandon_calls(&self, grace: Duration) {
        self.inner.abandoned.send_replace(Some(grace));
    }

    /// The calls of sessions and chats running now (see [`CallBoard`]).
    pub(crate) fn board(&self) -> &CallBoard {
        &self.inner.board
    }

    /// The calls running now (of every kind).
    pub fn running(&self) -> usize {
        self.inner.running.load(Ordering::Acquire)
    }

    /// Resolves once no call is running.
    pub async fn idle(&self) {
        loop {
            let notified = self.inner.idle.notified();
            if self.inner.running.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }

    /// The call itself: the callback exchange or the in-process handler.
    async fn run(&self, tool: &SharedTool, call: &ToolCall) -> ToolAnswer {
        match &tool.handler {
            ToolHandler::Remote(endpoint) => self.call_remote(tool, endpoint, call).await,
            ToolHandler::Local(handler) => {
                match tokio::time::timeout(LOCAL_TOOL_TIMEOUT, handler.0.call(call.clone())).await {
                    Ok(outcome) => ToolAnswer::from_local(outcome),
                    Err(_) => ToolAnswer::failed(
                        Outcome::Timeout,
                        format!(
                            "in-process tool '{}' timed out after {} s",
                            tool.name,
                            LOCAL_TOOL_TIMEOUT.as_secs()
                        ),
                    ),
                }
            }
            // Offered by a session, the chat loop or `/mcp`, which answer it themselves: one
            // that reaches the dispatcher was not offered by whoever sent it here.
            ToolHandler::BuiltIn(_) => ToolAnswer::failed(
                Outcome::Refused,
                format!(
                    "'{}' is answered by the session that offers it, not run as a tool",
                    tool.name
                ),
            ),
        }
    }

    async fn call_remote(
        &self,
        tool: &SharedTool,
        endpoint: &RemoteEndpoint,
        call: &ToolCall,
    ) -> ToolAnswer {
        // Declared before the slot, so that when the call is cancelled (dropped) the slot is
        // given back before the exchange's connection closes: once the plugin sees the close,
        // the slot is free. (Locals drop in reverse order; nothing runs until it is awaited.)
        // The exchange's CLIENT span, under the call's: what the callback's `traceparent` names.
        let mut span = self
            .inner
            .observer
            .callback_span(call.trace.as_ref(), &endpoint.callback_url);
        let context = span.context().clone();
        let exchange = std::pin::pin!(tokio::time::timeout(
            endpoint.timeout,
            self.exchange(endpoint, call, &context)
        ));
        let Some(_slot) = InFlight::enter(&self.inner) else {
            span.fail(Outcome::Refused.name());
            return ToolAnswer::failed(
                Outcome::Refused,
                format!(
                    "too many tool callbacks in flight (dispatch.max_callbacks_in_flight = {}); \
                 the call was not sent",
                    self.inner.max_in_flight
                ),
            );
        };
        tracing::debug!(tool = %call.name, call_id = %call.call_id, argument_bytes = call.raw_arguments.len(), "calling remote tool");
        let (liveness, answer) = match exchange.await {
            Ok(Ok((status, body))) => {
                span.set(|| {
                    opentelemetry::KeyValue::new("http.response.status_code", i64::from(status))
                });
                if status >= 400 {
                    span.fail(&status.to_string());
                }
                (Liveness::Reachable, map_callback_response(status, &body))
            }
            Ok(Err(failure)) => {
                let outcome = match failure.liveness {
                    Liveness::ConnectFailed => Outcome::Unreachable,
                    Liveness::Reachable => Outcome::ToolError,
                };
                span.fail(outcome.name());
                (failure.liveness, ToolAnswer::failed(outcome, failure.error))
            }
            // A connect that takes too long ends in the connector (`CALLBACK_CONNECT_TIMEOUT`) and
            // counts; reaching the tool's own deadline first means the callback went quiet
            // (or the tool allows less time than a connect may take): a read timeout, which
            // never counts.
            Err(_) => {
                span.fail(Outcome::Timeout.name());
                (
                    Liveness::Reachable,
                    ToolAnswer::failed(
                        Outcome::Timeout,
                        format!(
                            "remote tool callback timed out after {} s",
                            seconds(endpoint.timeout)
                        ),
                    ),
                )
            }
        };
        drop(span);
        self.record(tool, liveness).await;
        answer
    }

    /// One POST to the callback and its whole (capped, decoded) response body.
    async fn exchange(
        &self,
        endpoint: &RemoteEndpoint,
        call: &ToolCall,
        trace: &opentelemetry::trace::SpanContext,
    ) -> Result<(u16, Vec<u8>), CallFailure> {
        let url = endpoint.callback_url.url();
        let origin = endpoint.callback_url.origin().as_str();
        // Serialising a call (strings and exact JSON text) cannot fail.
        let body = serde_json::to_vec(call).unwrap_or_default();
        let request = callback_request(
            &url[Position::BeforePath..Position::AfterQuery],
            &url[Position::BeforeHost..Position::AfterPort],
            body,
            trace,
        )
        .map_err(|e| CallFailure::reachable(format!("remote tool callback failed: {e}")))?;
        let (response, mut connection) = match client::send(origin, request).await {
            Ok(sent) => sent,
            Err(e) => return Err(send_failure(endpoint, e).await),
        };
        let status = response.status().as_u16();
        // A `101 Switching Protocols` hands the connection over to another protocol: there is
        // no answer to read on it, and the connection cannot be used again.
        if response.status().is_informational() {
            return Err(CallFailure::reachable(format!(
                "remote tool callback answered {status} {}: a tool callback must answer with a \
                 final HTTP status, not switch protocols",
                response
                    .status()
                    .canonical_reason()
                    .unwrap_or("(informational)")
            )));
        }
        let headers = response.headers();
        let declared = headers
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        let mut sink = BodySink::new(
            headers.get(CONTENT_ENCODING).map(|v| v.as_bytes()),
            self.inner.max_response_bytes,
        )?;
        let mut body = response.into_body();
        let read = connection
            .drive(async {
                let mut received: u64 = 0;
                while let Some(frame) = body.frame().await {
                    let frame = frame.map_err(|e| body_failure(&e, received, declared))?;
                    if let Ok(data) = frame.into_data() {
                        received += data.len() as u64;
                        sink.write(&data)?;
                    }
                }
                Ok::<_, CallFailure>(())
            })
            .await;
        read?;
        connection.release(origin);
        Ok((status, sink.finish()?))
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

/// The POST of a call: origin-form `target`, its own `Host`, the JSON `body`, the hop marker,
/// and the call's W3C trace context (`traceparent`, and `tracestate` when there is one).
fn callback_request(
    target: &str,
    host: &str,
    body: Vec<u8>,
    trace: &opentelemetry::trace::SpanContext,
) -> Result<hyper::Request<Full<Bytes>>, hyper::http::Error> {
    let mut request = hyper::Request::new(Full::new(Bytes::from(body)));
    *request.method_mut() = hyper::Method::POST;
    *request.uri_mut() = target.parse()?;
    let headers = request.headers_mut();
    headers.insert(HOST, HeaderValue::from_str(host)?);
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(
        HeaderName::from_static(HOP_HEADER),
        HeaderValue::from_static("1"),
    );
    // The `traceparent` is the server's own writing; a `tracestate` is the caller's, passed on
    // only when there is one and a header carries it as it is (visible ASCII): never as raw
    // bytes, never failing the call.
    inject(trace, |name, value| {
        if !value.is_empty()
            && is_header_text(&value)
            && let Ok(value) = HeaderValue::from_str(&value)
        {
            headers.insert(name, value);
        }
    });
    Ok(request)
}

/// Checks a result's images on the blocking pool: decoding and re-encoding take milliseconds
/// that must not stall the thread's other requests.
async fn check_images(raw: serde_json::Value) -> (Vec<ToolImage>, Vec<String>) {
    tokio::task::spawn_blocking(move || accept_images(&raw))
        .await
        .unwrap_or_else(|_| {
            (
                Vec::new(),
                vec!["the images could not be checked (the check failed); dropped".into()],
            )
        })
}

/// One of the bounded callback exchanges in flight (`max_callbacks_in_flight`); the slot is
/// given back on drop.
struct InFlight<'a>(&'a Inner);

impl<'a> InFlight<'a> {
    fn enter(inner: &'a Inner) -> Option<Self> {
        let previous = inner.in_flight.fetch_add(1, Ordering::AcqRel);
        if previous >= inner.max_in_flight {
            inner.in_flight.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Self(inner))
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}
