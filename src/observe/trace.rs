//! Traces: the spans of calls, turns and requests, and the W3C trace context they travel with.
//!
//! With export on (an OTLP endpoint configured), spans are the OpenTelemetry SDK's and go to
//! the collector through the batch processor (`export.rs`); with export off, a span is only its
//! ids — random, or the caller's trace — so every callback still gets a `traceparent` for its
//! own call at the cost of two random numbers, and nothing else is built.

use std::borrow::Cow;
use std::time::Duration;

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{
    Span as _, SpanContext, SpanKind, Status, TraceContextExt, TraceFlags, TraceState, Tracer as _,
    TracerProvider as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SdkTracer, SdkTracerProvider};

/// The service name spans carry unless `OTEL_SERVICE_NAME` says otherwise.
pub(crate) const DEFAULT_SERVICE_NAME: &str = "runtime-tools";

/// Spans waiting for the exporter (`OTEL_BSP_MAX_QUEUE_SIZE`, the SDK's default): a few seconds
/// of a busy server's calls; past it spans are dropped and counted, never waited for.
pub const DEFAULT_SPAN_QUEUE: usize = 2048;

/// How long one export may take, retries included (`OTEL_EXPORTER_OTLP_TIMEOUT`, the SDK's
/// default). It runs on the exporter's own thread: a slow collector costs queued spans, not
/// calls.
pub(crate) const DEFAULT_EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// Where and how spans are exported. Read from the standard `OTEL_*` variables by
/// [`TraceSettings::from_env`]; off by default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceSettings {
    /// Export spans over OTLP/HTTP (protobuf).
    pub export: bool,
    /// The traces URL (`.../v1/traces`); `None`: the exporter reads
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, or `OTEL_EXPORTER_OTLP_ENDPOINT` + `/v1/traces`.
    pub endpoint: Option<String>,
    /// `None`: `OTEL_SERVICE_NAME` when set, else `runtime-tools`.
    pub service_name: Option<String>,
    /// Spans held for the exporter; more are dropped (and counted).
    pub max_queue: usize,
    /// How often queued spans are sent (`None`: `OTEL_BSP_SCHEDULE_DELAY`, or 5 s).
    pub schedule_delay: Option<Duration>,
    /// How long one export may take, retries included.
    pub export_timeout: Duration,
}

impl Default for TraceSettings {
    fn default() -> Self {
        Self {
            export: false,
            endpoint: None,
            service_name: None,
            max_queue: DEFAULT_SPAN_QUEUE,
            schedule_delay: None,
            export_timeout: DEFAULT_EXPORT_TIMEOUT,
        }
    }
}

impl TraceSettings {
    /// Export is on when `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
    /// is set, unless `OTEL_SDK_DISABLED` is `true`; the exporter reads the endpoint and
    /// `OTEL_EXPORTER_OTLP_HEADERS` itself, the resource `OTEL_SERVICE_NAME` and
    /// `OTEL_RESOURCE_ATTRIBUTES`, the batch processor `OTEL_BSP_*`.
    pub fn from_env() -> Self {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let disabled =
            var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        let endpoint_set = var("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
            || var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some();
        let millis = |name: &str| var(name).and_then(|v| v.trim().parse::<u64>().ok());
        Self {
            export: endpoint_set && !disabled,
            max_queue: var("OTEL_BSP_MAX_QUEUE_SIZE")
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(DEFAULT_SPAN_QUEUE),
            export_timeout: millis("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
                .or_else(|| millis("OTEL_EXPORTER_OTLP_TIMEOUT"))
                .map_or(DEFAULT_EXPORT_TIMEOUT, Duration::from_millis),
            ..Self::default()
        }
    }
}

/// The tracer of one server: the SDK's when export is on.
pub(crate) struct Tracing {
    sdk: Option<(SdkTracerProvider, SdkTracer)>,
    ids: RandomIdGenerator,
}

impl Tracing {
    /// Spans of ids only: nothing is exported.
    pub(crate) fn off() -> Self {
        Self {
            sdk: None,
            ids: RandomIdGenerator::default(),
        }
    }

    /// Spans of `provider`'s tracer.
    pub(crate) fn on(provider: SdkTracerProvider) -> Self {
        let tracer = provider.tracer("runtime-tools");
        Self {
            sdk: Some((provider, tracer)),
            ids: RandomIdGenerator::default(),
        }
    }

    /// Whether spans are exported.
    pub(crate) fn exports(&self) -> bool {
        self.sdk.is_some()
    }

    /// The provider, to flush and shut down.
    pub(crate) fn provider(&self) -> Option<&SdkTracerProvider> {
        self.sdk.as_ref().map(|(provider, _)| provider)
    }

    /// Starts a span named `name` under `parent` (a new trace without one). `attributes` are
    /// built only when the span is exported.
    pub(crate) fn start(
        &self,
        name: impl FnOnce() -> Cow<'static, str>,
        kind: SpanKind,
        parent: Option<&SpanContext>,
        attributes: impl FnOnce() -> Vec<KeyValue>,
    ) -> Span {
        match &self.sdk {
            Some((_, tracer)) => {
                let parent_cx = match parent {
                    Some(parent) => Context::new().with_remote_span_context(parent.clone()),
                    None => Context::new(),
                };
                let span = tracer
                    .span_builder(name())
                    .with_kind(kind)
                    .with_attributes(attributes())
                    .start_with_context(tracer, &parent_cx);
                Span {
                    context: span.span_context().clone(),
                    live: Some(span),
                }
            }
            None => {
                let (trace_id, flags, state) = match parent {
                    Some(p) => (p.trace_id(), p.trace_flags(), p.trace_state().clone()),
                    None => (
                        self.ids.new_trace_id(),
                        TraceFlags::SAMPLED,
                        TraceState::default(),
                    ),
                };
                let context =
                    SpanContext::new(trace_id, self.ids.new_span_id(), flags, false, state);
                Span {
                    context,
                    live: None,
                }
            }
        }
    }
}

/// One span: its ids, and the SDK's span when it is exported. Dropping it ends it.
#[derive(Debug)]
pub(crate) struct Span {
    context: SpanContext,
    live: Option<opentelemetry_sdk::trace::Span>,
}

impl Span {
    /// Its ids: what a child's parent and a callback's `traceparent` name.
    pub(crate) fn context(&self) -> &SpanContext {
        &self.context
    }

    /// Sets an attribute (built only when the span is exported).
    pub(crate) fn set(&mut self, attribute: impl FnOnce() -> KeyValue) {
        if let Some(span) = &mut self.live {
            span.set_attribute(attribute());
        }
    }

    /// Marks it failed with `error_type` (the semantic conventions' `error.type`).
    pub(crate) fn fail(&mut self, error_type: &str) {
        if let Some(span) = &mut self.live {
            span.set_attribute(KeyValue::new("error.type", error_type.to_owned()));
            span.set_status(Status::error(error_type.to_owned()));
        }
    }
}

/// The W3C trace context of an incoming request's headers (`traceparent`, `tracestate`), when
/// it holds a valid one. `header` reads one header by its lower-case name: an HTTP header, or a
/// field of an MCP request's `_meta`, which are read alike — a value that is not visible ASCII
/// (what `HeaderValue::to_str` gives) is taken as absent, so a `tracestate` that no header could
/// carry is ignored, as it would be in a header, and never reaches a callback's request.
pub(crate) fn incoming<'a>(header: impl Fn(&str) -> Option<&'a str>) -> Option<SpanContext> {
    struct Headers<'a, F>(F, std::marker::PhantomData<&'a ()>);
    impl<'a, F: Fn(&str) -> Option<&'a str>> Extractor for Headers<'a, F> {
        fn get(&self, key: &str) -> Option<&str> {
            (self.0)(key).filter(|value| is_header_text(value))
        }
        fn keys(&self) -> Vec<&str> {
            vec!["traceparent", "tracestate"]
        }
    }
    let cx = TraceContextPropagator::new().extract(&Headers(header, std::marker::PhantomData));
    let context = cx.span().span_context().clone();
    context.is_valid().then_some(context)
}

/// Whether `value` is text an HTTP header carries as it is: visible ASCII, spaces and tabs (the
/// bytes `HeaderValue::to_str` accepts), at most [`MAX_TRACE_HEADER_BYTES`].
pub(crate) fn is_header_text(value: &str) -> bool {
    value.len() <= MAX_TRACE_HEADER_BYTES
        && value
            .bytes()
            .all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
}

/// Longest `traceparent` or `tracestate` value read, in bytes: W3C's own bound on what a
/// `tracestate` holds (32 members of at most 256 + 256 bytes) with room for its separators.
const MAX_TRACE_HEADER_BYTES: usize = 32 * (256 + 1 + 256) + 31;

/// Writes `context` as W3C headers (`traceparent`, and `tracestate` when it has one) through
/// `set(name, value)`.
pub(crate) fn inject(context: &SpanContext, set: impl FnMut(&'static str, String)) {
    struct Headers<F>(F);
    impl<F: FnMut(&'static str, String)> Injector for Headers<F> {
        fn set(&mut self, key: &str, value: String) {
            match key {
                "traceparent" => (self.0)("traceparent", value),
                "tracestate" => (self.0)("tracestate", value),
                _ => {}
            }
        }
    }
    let cx = Context::new().with_remote_span_context(context.clone());
    TraceContextPropagator::new().inject_context(&cx, &mut Headers(set));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_incoming_traceparent_is_the_parent_and_a_bad_one_is_ignored() {
        let good = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let parent = incoming(|name| match name {
            "traceparent" => Some(good),
            "tracestate" => Some("vendor=x"),
            _ => None,
        })
        .unwrap();
        assert_eq!(
            parent.trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        let off = Tracing::off();
        let child = off.start(|| "x".into(), SpanKind::Internal, Some(&parent), Vec::new);
        assert_eq!(child.context().trace_id(), parent.trace_id());
        assert_ne!(child.context().span_id(), parent.span_id());
        let mut headers = Vec::new();
        inject(child.context(), |name, value| headers.push((name, value)));
        assert_eq!(headers[0].0, "traceparent");
        assert!(
            headers[0]
                .1
                .starts_with("00-0af7651916cd43dd8448eb211c80319c-")
        );
        assert_eq!(headers[1], ("tracestate", "vendor=x".to_owned()));
        assert!(incoming(|_| Some("00-zz-b7ad6b7169203331-01")).is_none());
        // A `tracestate` no header could carry is ignored; the `traceparent` still counts.
        // 33 members of the longest key and value W3C allows: past the bound.
        let too_long = (0..33)
            .map(|i| format!("k{i:02}{}={}", "a".repeat(253), "v".repeat(256)))
            .collect::<Vec<_>>()
            .join(",");
        assert!(too_long.len() > MAX_TRACE_HEADER_BYTES);
        for state in [
            "vendor=x\nforged: 1",
            "vendor=é",
            "vendor=\u{1b}[2J",
            too_long.as_str(),
        ] {
            let parent = incoming(|name| match name {
                "traceparent" => Some(good),
                "tracestate" => Some(state),
                _ => None,
            })
            .expect("the traceparent is valid");
            let passed = parent.trace_state().header();
            assert!(passed.is_empty(), "{} bytes passed", passed.len());
        }
        let root = off.start(|| "y".into(), SpanKind::Internal, None, Vec::new);
        assert!(root.context().is_valid());
        assert_ne!(root.context().trace_id(), parent.trace_id());
    }
}
