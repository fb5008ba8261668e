//! What every call, change and request leaves behind for an operator: Prometheus metrics
//! (`metrics`), the recent-calls ring (`recent`), and OpenTelemetry spans (`trace`, exported by
//! `export`).
//!
//! One [`Observer`] per server, shared by handle. It rides with the event hub, where every call
//! is announced: the hub's call watch (`events::CallWatch`) starts each call's span and, when
//! the call ends, records it here once — whoever made the call. The dispatcher adds the
//! callback's client span; the router counts changes, the sessions their syncs, the model
//! endpoints their requests and rounds. Plain code: no actor, no web framework.

mod export;
pub(crate) mod metrics;
pub(crate) mod recent;
pub(crate) mod trace;

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::trace::{SpanContext, SpanKind};

use self::metrics::{CallSample, Metrics, Snapshot};
use self::recent::{CallFilter, RecentCall, RecentCalls};
use self::trace::{Span, TraceSettings, Tracing};
use crate::domain::callback_url::CallbackUrl;
use crate::domain::connection::ConnectionKind;

/// How long a stopping server waits for the last spans to reach the collector.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(2);

/// The name of a call's span, before the tool's.
const CALL_SPAN_PREFIX: &str = "execute_tool ";

/// The identity of a call, as its span and its record name it: shared text, so the span's
/// attributes and the recent calls' record take it for a reference count, not a copy.
#[derive(Debug, Clone)]
pub(crate) struct CallIdentity {
    pub role: Arc<str>,
    pub tool: Arc<str>,
    /// `None`: the character has no tool of this name.
    pub source: Option<Arc<str>>,
    pub call_id: Arc<str>,
    pub caller: crate::domain::connection::Caller,
    pub kind: Option<ConnectionKind>,
}

/// A shared handle on one server's observer; cheap to clone.
#[derive(Clone)]
pub struct Observer {
    inner: Arc<Inner>,
}

struct Inner {
    metrics: Metrics,
    recent: RecentCalls,
    tracing: Tracing,
}

impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Observer")
            .field("exports", &self.inner.tracing.exports())
            .finish_non_exhaustive()
    }
}

impl Default for Observer {
    /// Metrics and the recent calls; spans of ids only.
    fn default() -> Self {
        Self::with(Metrics::default(), Tracing::off())
    }
}

impl Observer {
    /// An observer that exports spans as `settings` say.
    pub fn new(settings: &TraceSettings) -> anyhow::Result<Self> {
        let metrics = Metrics::default();
        if !settings.export {
            return Ok(Self::with(metrics, Tracing::off()));
        }
        let counts = export::SpanCounts::new(
            metrics.spans_exported.clone(),
            metrics.spans_dropped.clone(),
        );
        let provider = export::provider(settings, counts)?;
        Ok(Self::with(metrics, Tracing::on(provider)))
    }

    /// The OpenTelemetry tracer provider spans are exported through (batch processor, OTLP/HTTP
    /// exporter), when export is on: for an embedding app's own spans, which then share the
    /// server's queue and collector.
    pub fn tracer_provider(&self) -> Option<opentelemetry_sdk::trace::SdkTracerProvider> {
        self.inner.tracing.provider().cloned()
    }

    fn with(metrics: Metrics, tracing: Tracing) -> Self {
        Self {
            inner: Arc::new(Inner {
                metrics,
                recent: RecentCalls::default(),
                tracing,
            }),
        }
    }

    pub(crate) fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// The `execute_tool {tool}` span of a call, with the GenAI semantic conventions'
    /// attributes and the server's own.
    pub(crate) fn call_span(&self, call: &CallIdentity, parent: Option<&SpanContext>) -> Span {
        self.inner.tracing.start(
            || {
                let mut name = String::with_capacity(CALL_SPAN_PREFIX.len() + call.tool.len());
                name.push_str(CALL_SPAN_PREFIX);
                name.push_str(&call.tool);
                name.into()
            },
            SpanKind::Internal,
            parent,
            || {
                // Room for `error.type` and a repeat's `runtime_tools.first_call_id` too: the
                // span's list never grows after its start.
                let mut attributes = Vec::with_capacity(10);
                attributes.extend([
                    KeyValue::new("gen_ai.operation.name", "execute_tool"),
                    KeyValue::new("gen_ai.tool.name", call.tool.clone()),
                    KeyValue::new("gen_ai.tool.call.id", call.call_id.clone()),
                    KeyValue::new("gen_ai.tool.type", "function"),
                    KeyValue::new("runtime_tools.character", call.role.clone()),
                    KeyValue::new("runtime_tools.caller", call.caller.name()),
                ]);
                if let Some(source) = &call.source {
                    attributes.push(KeyValue::new("runtime_tools.source", source.clone()));
                }
                if let Some(kind) = call.kind {
                    attributes.push(KeyValue::new("runtime_tools.kind", kind.name()));
                }
                attributes
            },
        )
    }

    /// The CLIENT span of a callback's HTTP exchange, under the call's span.
    pub(crate) fn callback_span(&self, parent: Option<&SpanContext>, url: &CallbackUrl) -> Span {
        self.inner.tracing.start(
            || "POST".into(),
            SpanKind::Client,
            parent,
            || {
                let (full, host) = url.shared_text();
                let port = url.url().port_or_known_default().unwrap_or_default();
                // Room for the status code and `error.type`, set when the exchange ends.
                let mut attributes = Vec::with_capacity(6);
                attributes.extend([
                    KeyValue::new("http.request.method", "POST"),
                    KeyValue::new("url.full", full.clone()),
                    KeyValue::new("server.address", host.clone()),
                    KeyValue::new("server.port", i64::from(port)),
                ]);
                attributes
            },
        )
    }

    /// The span of one request to a model endpoint of `kind` (`chat {character}`), under the
    /// caller's trace when its request carried one.
    pub(crate) fn request_span(
        &self,
        kind: ConnectionKind,
        character: &str,
        parent: Option<&SpanContext>,
    ) -> Span {
        self.inner.tracing.start(
            || format!("{} {character}", kind.name()).into(),
            SpanKind::Server,
            parent,
            || {
                vec![
                    KeyValue::new("gen_ai.operation.name", kind.name()),
                    KeyValue::new("runtime_tools.character", character.to_owned()),
                    KeyValue::new("runtime_tools.kind", kind.name()),
                ]
            },
        )
    }

    /// The span of a live session's model turn that called tools (`turn {character}`): the
    /// parent of the calls it made.
    pub(crate) fn turn_span(&self, kind: ConnectionKind, character: &str, turn: &str) -> Span {
        self.inner.tracing.start(
            || format!("turn {character}").into(),
            SpanKind::Internal,
            None,
            || {
                vec![
                    KeyValue::new("runtime_tools.character", character.to_owned()),
                    KeyValue::new("runtime_tools.kind", kind.name()),
                    // The model names its turns: kept within the bound of ids it invents.
                    KeyValue::new(
                        "runtime_tools.turn_id",
                        crate::domain::peer_id::call_id(turn).into_owned(),
                    ),
                ]
            },
        )
    }

    /// Records a finished call: its metrics and its place in the recent calls.
    pub(crate) fn call_finished(&self, call: RecentCall, duration: Duration) {
        self.inner.metrics.call(&CallSample {
            character: &call.role,
            tool: call.source.is_some().then_some(&*call.tool),
            caller: call.caller.name(),
            kind: call.kind,
            outcome: call.outcome.name(),
            duration,
        });
        self.inner.recent.push(call);
    }

    /// The recent calls `filter` picks, newest first.
    pub(crate) fn recent_calls(&self, filter: &CallFilter<'_>) -> Vec<Arc<RecentCall>> {
        self.inner.recent.list(filter)
    }

    /// The Prometheus exposition, with the state of `now`.
    pub(crate) fn render_metrics(&self, now: &Snapshot) -> String {
        self.inner.metrics.render(now)
    }

    /// Sends the spans still queued and stops the exporter (at most two seconds). Blocks:
    /// call it off the async threads.
    pub fn shut_down(&self) {
        if let Some(provider) = self.inner.tracing.provider()
            && let Err(e) = provider.shutdown_with_timeout(FLUSH_TIMEOUT)
        {
            tracing::debug!("the span exporter did not shut down cleanly: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tracer_provider_is_given_only_when_spans_are_exported() {
        let off = Observer::new(&TraceSettings::default()).unwrap();
        assert!(off.tracer_provider().is_none());
        let on = Observer::new(&TraceSettings {
            export: true,
            endpoint: Some("http://127.0.0.1:9/v1/traces".into()),
            ..TraceSettings::default()
        })
        .unwrap();
        let provider = on.tracer_provider().expect("export is on");
        provider.shutdown().ok();
    }
}
