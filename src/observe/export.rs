//! The span export pipeline: spans go into the SDK's batch processor — a bounded queue and a
//! thread of its own that sends them, so no call ever waits for a collector — and from there to
//! the OTLP/HTTP exporter, which posts them through a hyper client (the callbacks' TLS stack)
//! driven by a small runtime on that thread.
//!
//! The batch processor drops spans when its queue is full without saying how many; a gate in
//! front of it keeps the same bound and counts what it drops (`queue_full`), and the exporter's
//! wrapper counts what a failed export loses (`export_failed`) and what it delivers.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use opentelemetry::Context;
use opentelemetry_http::{HttpClient, HttpError, Request, Response, ResponseBodyTooLarge};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, Span, SpanData, SpanExporter,
    SpanProcessor,
};
use prometheus::{IntCounter, IntCounterVec};

use super::trace::{DEFAULT_SERVICE_NAME, TraceSettings};

/// Longest wait for the collector's TCP connection; the export's own timeout bounds the rest.
const COLLECTOR_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Most of a collector's answer read, in bytes. An OTLP answer is an
/// `ExportTraceServiceResponse` (empty, or a count and a message of rejected spans) or an error
/// `Status`: tens of bytes. Whatever answers past this is not a collector (or not one to
/// believe): the export fails (`export_failed`) and the connection is closed unread, so an
/// endless answer costs nothing but this.
pub(crate) const MAX_COLLECTOR_ANSWER_BYTES: usize = 64 * 1024;

/// The counters the pipeline keeps (registered in the server's metrics).
#[derive(Clone, Debug)]
pub(crate) struct SpanCounts {
    /// Spans handed to the batch processor and not yet to the exporter.
    queued: Arc<AtomicUsize>,
    pub(crate) exported: IntCounter,
    pub(crate) dropped: IntCounterVec,
}

impl SpanCounts {
    pub(crate) fn new(exported: IntCounter, dropped: IntCounterVec) -> Self {
        Self {
            queued: Arc::default(),
            exported,
            dropped,
        }
    }
}

/// A tracer provider exporting to the collector `settings` name.
pub(crate) fn provider(
    settings: &TraceSettings,
    counts: SpanCounts,
) -> anyhow::Result<SdkTracerProvider> {
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_http_client(Hyper::new(settings.export_timeout)?)
        .with_timeout(settings.export_timeout);
    if let Some(endpoint) = &settings.endpoint {
        exporter = exporter.with_endpoint(endpoint.clone());
    }
    let exporter = exporter
        .build()
        .context("the OTLP trace exporter could not be set up")?;
    let mut batch = BatchConfigBuilder::default().with_max_queue_size(settings.max_queue);
    if let Some(delay) = settings.schedule_delay {
        batch = batch.with_scheduled_delay(delay);
    }
    let processor = BatchSpanProcessor::builder(Counted {
        inner: exporter,
        counts: counts.clone(),
    })
    .with_batch_config(batch.build())
    .build();
    let service = settings
        .service_name
        .clone()
        .or_else(|| {
            std::env::var("OTEL_SERVICE_NAME")
                .ok()
                .filter(|s| !s.is_empty())
        })
        .unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_owned());
    Ok(SdkTracerProvider::builder()
        .with_span_processor(Gate {
            inner: processor,
            max: settings.max_queue,
            counts,
        })
        .with_resource(Resource::builder().with_service_name(service).build())
        .build())
}

/// The batch processor behind a gate of the same bound that counts what it drops.
#[derive(Debug)]
struct Gate {
    inner: BatchSpanProcessor,
    max: usize,
    counts: SpanCounts,
}

impl SpanProcessor for Gate {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        let queued = &self.counts.queued;
        if queued.fetch_add(1, Ordering::AcqRel) >= self.max {
            queued.fetch_sub(1, Ordering::AcqRel);
            self.counts.dropped.with_label_values(&["queue_full"]).inc();
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The exporter, counting what it delivers and what it loses.
#[derive(Debug)]
struct Counted<E> {
    inner: E,
    counts: SpanCounts,
}

impl<E: SpanExporter> SpanExporter for Counted<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        self.counts.queued.fetch_sub(spans, Ordering::AcqRel);
        let result = self.inner.export(batch).await;
        match &result {
            Ok(()) => self.counts.exported.inc_by(spans as u64),
            Err(e) => {
                tracing::debug!(spans, "spans could not be exported: {e}");
                self.counts
                    .dropped
                    .with_label_values(&["export_failed"])
                    .inc_by(spans as u64);
            }
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// The exporter's HTTP client: hyper-util's, on a current-thread runtime of its own. The batch
/// processor exports on its own thread, blocking, so the exchange is run to its end there.
struct Hyper {
    /// Made on first use, on the processor's thread: a runtime must not be dropped inside
    /// another (as it would be, were it made where the server starts and the set-up failed).
    runtime: std::sync::OnceLock<std::io::Result<tokio::runtime::Runtime>>,
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    timeout: Duration,
}

impl std::fmt::Debug for Hyper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hyper")
    }
}

impl Hyper {
    fn new(timeout: Duration) -> anyhow::Result<Self> {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(COLLECTOR_CONNECT_TIMEOUT));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
            .context("the span exporter's TLS")?
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        Ok(Self {
            runtime: std::sync::OnceLock::new(),
            client: Client::builder(TokioExecutor::new()).build(https),
            timeout,
        })
    }
}

#[async_trait::async_trait]
impl HttpClient for Hyper {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (parts, body) = request.into_parts();
        let request = hyper::Request::from_parts(parts, Full::new(body));
        let exchange = async {
            let response = self.client.request(request).await?;
            let (parts, body) = response.into_parts();
            // Read only as far as the bound: past it, dropping the body closes the connection.
            let body = Limited::new(body, MAX_COLLECTOR_ANSWER_BYTES)
                .collect()
                .await
                .map_err(|e| -> HttpError {
                    if e.is::<LengthLimitError>() {
                        Box::new(ResponseBodyTooLarge::new())
                    } else {
                        e
                    }
                })?
                .to_bytes();
            Ok::<_, HttpError>(Response::from_parts(parts, body))
        };
        let runtime = self
            .runtime
            .get_or_init(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
            })
            .as_ref()
            .map_err(|e| HttpError::from(format!("the span exporter's runtime: {e}")))?;
        // The batch processor's thread is no runtime's: this blocks it, and only it.
        runtime
            .block_on(async {
                let answer = tokio::time::timeout(self.timeout, exchange).await;
                // The connection's own task runs only while this runtime is driven: it gets its
                // turn now, so one whose answer was left unread closes at once rather than when
                // the next export comes.
                tokio::task::yield_now().await;
                answer
            })
            .map_err(|_| HttpError::from("the collector did not answer in time"))?
    }
}
