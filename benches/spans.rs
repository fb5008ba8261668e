//! What span export costs per call, in one process: the server's dispatcher runs a call of a
//! remote tool inside its `execute_tool` span (a `CallWatch`, as every session starts one) and
//! the callback's exchange in its CLIENT span, exactly as the call path does, with export off
//! and with every span exported over OTLP/HTTP; the two alternate, run after run. Beside them,
//! the floor of any server exporting these spans with the official crates: the same two spans
//! (names, kinds, attributes, parentage) made straight with the OpenTelemetry SDK, through the
//! server's own tracer provider (batch processor, OTLP/HTTP exporter), around the call of a
//! server with export off (`sdk beside a call`: its figure less export off's is what the SDK
//! costs on a call path) and with no call at all (`sdk alone`).
//!
//! The callback and the OTLP receiver are small keep-alive HTTP servers on threads of this
//! process; the CPU those threads spend is read from each thread (`getrusage(RUSAGE_THREAD)`)
//! and taken out, so a call's figure is the CPU of the server's own code: process CPU (user +
//! system) per call, less the fake peers'. The receiver decodes every export with the official
//! protobuf types and counts its spans; a run with export on ends only once every span of its
//! calls has arrived, so the exporter's work (encoding, posting) is inside the figure.
//!
//! Run: `cargo bench --bench spans [-- --calls N --runs N --concurrency N]`; `--only on` (or
//! `off`, `call`, `alone`: how a variant's name ends) runs one variant alone, to profile it. Figures and
//! method: docs/benchmarks.md ("Span export on the call path").

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message as _;
use runtime_tools::embedding::{CallStart, CallWatch, Caller, ConnectionKind};
use runtime_tools::{
    Application, Behavior, CallbackUrl, CharacterSettings, Dispatcher, EventHub, Parameters,
    Settings, SharedTool, ToolCall, ToolSpec, TraceSettings,
};
use serde_json::json;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const TOOL: &str = "get_weather";
const ARGUMENTS: &str = r#"{"city":"Tokyo","unit":"c"}"#;
const CALLBACK_ANSWER: &str = r#"{"output": {"temperature_c": 28}, "is_error": false}"#;
/// Spans per call: `execute_tool` and the callback's CLIENT span.
const SPANS_PER_CALL: usize = 2;
/// Longest the exporter may take to deliver a run's spans.
const EXPORT_DEADLINE: Duration = Duration::from_secs(60);

struct Options {
    calls: usize,
    runs: usize,
    concurrency: usize,
    /// `--only off|on|call|alone`: run the variant whose name ends so alone (to profile it).
    only: Option<String>,
}

impl Options {
    fn from_args() -> Self {
        let mut options = Options {
            calls: 20_000,
            runs: 5,
            concurrency: 8,
            only: None,
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            if arg == "--only" {
                options.only = args.next();
                continue;
            }
            let mut value = || {
                args.next()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| panic!("{arg} needs a number"))
            };
            match arg.as_str() {
                "--calls" => options.calls = value(),
                "--runs" => options.runs = value(),
                "--concurrency" => options.concurrency = value(),
                // `cargo bench` passes `--bench`.
                _ => {}
            }
        }
        options
    }
}

/// CPU time (user + system) of `who` (`RUSAGE_SELF` or `RUSAGE_THREAD`), in microseconds.
fn cpu_micros(who: libc::c_int) -> u64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `usage` is a valid, writable rusage; getrusage only writes it.
    let usage = unsafe {
        assert_eq!(libc::getrusage(who, usage.as_mut_ptr()), 0);
        usage.assume_init()
    };
    let micros = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    micros(usage.ru_utime) + micros(usage.ru_stime)
}

/// The fake peers' threads: each keeps its own CPU so far in its slot.
#[derive(Clone, Default)]
struct PeerCpu(Arc<Mutex<Vec<Arc<AtomicU64>>>>);

impl PeerCpu {
    fn slot(&self) -> Arc<AtomicU64> {
        let slot = Arc::new(AtomicU64::new(0));
        self.0.lock().unwrap().push(slot.clone());
        slot
    }

    fn total(&self) -> u64 {
        let slots = self.0.lock().unwrap();
        slots.iter().map(|s| s.load(Ordering::Acquire)).sum()
    }
}

/// A keep-alive HTTP/1.1 server answering every request with `answer`, one thread per
/// connection; `seen` gets each request's body.
fn peer(cpu: PeerCpu, answer: &'static str, seen: fn(&[u8])) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("a port");
    let address = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let slot = cpu.slot();
            std::thread::spawn(move || {
                let _ = serve(stream, answer, seen, &slot);
            });
        }
    });
    address
}

fn serve(
    stream: TcpStream,
    answer: &str,
    seen: fn(&[u8]),
    slot: &AtomicU64,
) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut writer = stream;
    let response = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{answer}",
        answer.len()
    );
    let mut line = String::new();
    let mut body = Vec::new();
    loop {
        let mut length = 0;
        loop {
            line.clear();
            if reader.read_line(&mut line)? == 0 {
                return Ok(());
            }
            if line == "\r\n" {
                break;
            }
            let lower = line.to_ascii_lowercase();
            if let Some(value) = lower.strip_prefix("content-length:") {
                length = value.trim().parse().unwrap_or(0);
            }
            assert!(
                !lower.starts_with("transfer-encoding:"),
                "the peers read bodies with a length only"
            );
        }
        body.resize(length, 0);
        reader.read_exact(&mut body)?;
        seen(&body);
        writer.write_all(response.as_bytes())?;
        slot.store(cpu_micros(libc::RUSAGE_THREAD), Ordering::Release);
    }
}

/// Spans the OTLP receiver has decoded.
static SPANS_RECEIVED: AtomicUsize = AtomicUsize::new(0);

fn count_spans(body: &[u8]) {
    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP/HTTP protobuf export");
    let spans: usize = request
        .resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .map(|s| s.spans.len())
        .sum();
    SPANS_RECEIVED.fetch_add(spans, Ordering::AcqRel);
}

/// One server, export on or off; or the SDK's spans made straight, beside a call of a server
/// with export off or alone.
struct Variant {
    label: &'static str,
    exports: bool,
    sdk: Option<(opentelemetry_sdk::trace::SdkTracer, Floor)>,
    dispatcher: Dispatcher,
    events: EventHub,
    tool: SharedTool,
}

impl Variant {
    async fn start(
        label: &'static str,
        callback: SocketAddr,
        receiver: Option<SocketAddr>,
        calls: usize,
    ) -> Self {
        let trace = match receiver {
            Some(at) => TraceSettings {
                export: true,
                endpoint: Some(format!("http://{at}/v1/traces")),
                schedule_delay: Some(Duration::from_millis(100)),
                // Room for every span of a run: on a loaded machine the exporter's thread may
                // wait for a core longer than the default queue (2048 spans) lasts, and a
                // dropped span would cost less than an exported one (and never arrive).
                max_queue: calls * SPANS_PER_CALL,
                ..TraceSettings::default()
            },
            None => TraceSettings::default(),
        };
        let settings = Settings {
            bind: "127.0.0.1:0".parse().unwrap(),
            characters: vec![CharacterSettings::new("Lanlan")],
            trace,
            ..Settings::default()
        };
        let app = Application::build(settings)
            .await
            .expect("the server starts");
        let (dispatcher, events) = (app.dispatcher(), app.events());
        actix_web::rt::spawn(app.run_until_stopped());
        let schema = json!({"type": "object", "properties": {
            "city": {"type": "string"}, "unit": {"type": "string"}}});
        let parameters = Parameters::new(schema.as_object().unwrap().clone()).unwrap();
        let url = CallbackUrl::parse(&format!("http://{callback}/tools/{TOOL}")).unwrap();
        let tool = Arc::new(ToolSpec::remote(
            TOOL,
            "Get the weather.",
            parameters,
            "plugin:bench",
            url,
            Duration::from_secs(10),
        ));
        Self {
            label,
            exports: receiver.is_some(),
            sdk: None,
            dispatcher,
            events,
            tool,
        }
    }

    /// One call as a session makes it: its watch, the dispatch in the watch's span, the end.
    async fn call(&self, n: usize) {
        let call_id = format!("call_{n}");
        let spans = match &self.sdk {
            Some((tracer, floor)) => {
                let spans = CallSpans::start(tracer, call_id.clone(), &self.tool);
                if *floor == Floor::Alone {
                    return spans.end();
                }
                Some(spans)
            }
            None => None,
        };
        let watch = CallWatch::start(
            &self.events,
            CallStart {
                role: "Lanlan",
                tool: TOOL,
                source: Some("plugin:bench"),
                call_id: &call_id,
                caller: Caller::Model,
                kind: Some(ConnectionKind::Embedded),
                behavior: Behavior::Blocking,
            },
            None,
        );
        let mut call = ToolCall::from_raw(call_id, TOOL.into(), ARGUMENTS.into());
        call.trace = Some(watch.trace().clone());
        let result = self.dispatcher.dispatch(&self.tool, call).await;
        assert!(
            !result.is_error,
            "the callback's answer: {}",
            result.model_text()
        );
        watch.finished(&result);
        if let Some(spans) = spans {
            spans.end();
        }
    }

    /// `calls` calls, `concurrency` at a time; the CPU per call, the fake peers' taken out.
    async fn run(&self, calls: usize, concurrency: usize, peers: &PeerCpu) -> f64 {
        let spans_before = SPANS_RECEIVED.load(Ordering::Acquire);
        let (cpu_before, peers_before) = (cpu_micros(libc::RUSAGE_SELF), peers.total());
        let next = AtomicUsize::new(0);
        join_all((0..concurrency).map(|_| async {
            loop {
                let n = next.fetch_add(1, Ordering::AcqRel);
                if n >= calls {
                    break;
                }
                self.call(n).await;
            }
        }))
        .await;
        if self.exports {
            let deadline = Instant::now() + EXPORT_DEADLINE;
            while SPANS_RECEIVED.load(Ordering::Acquire) < spans_before + calls * SPANS_PER_CALL {
                assert!(
                    Instant::now() < deadline,
                    "the spans of the run were not all exported"
                );
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        let own = (cpu_micros(libc::RUSAGE_SELF) - cpu_before) - (peers.total() - peers_before);
        own as f64 / calls as f64
    }
}

/// Where the SDK's spans are made: around a call of a server with export off, or alone.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Floor {
    BesideACall,
    Alone,
}

impl Variant {
    /// `self` (a server with export off) making the SDK's spans straight with `provider`'s
    /// tracer.
    fn with_sdk(
        mut self,
        provider: opentelemetry_sdk::trace::SdkTracerProvider,
        floor: Floor,
    ) -> Self {
        use opentelemetry::trace::TracerProvider as _;
        self.sdk = Some((provider.tracer("runtime-tools"), floor));
        self.exports = true;
        self
    }
}

/// A call's two spans made straight with the SDK, as the server makes them: `execute_tool
/// {tool}` (INTERNAL) with the GenAI and server attributes, and under it the callback's `POST`
/// (CLIENT) with the HTTP ones and the status set at its end.
struct CallSpans {
    call: opentelemetry_sdk::trace::Span,
    client: opentelemetry_sdk::trace::Span,
}

impl CallSpans {
    fn start(
        tracer: &opentelemetry_sdk::trace::SdkTracer,
        call_id: String,
        tool: &SharedTool,
    ) -> Self {
        use opentelemetry::trace::{Span as _, SpanKind, TraceContextExt as _, Tracer as _};
        use opentelemetry::{Context, KeyValue};
        let url = tool.callback_url().unwrap_or_default().to_owned();
        let call = tracer
            .span_builder(format!("execute_tool {TOOL}"))
            .with_kind(SpanKind::Internal)
            .with_attributes([
                KeyValue::new("gen_ai.operation.name", "execute_tool"),
                KeyValue::new("gen_ai.tool.name", TOOL),
                KeyValue::new("gen_ai.tool.call.id", call_id),
                KeyValue::new("gen_ai.tool.type", "function"),
                KeyValue::new("runtime_tools.character", "Lanlan"),
                KeyValue::new("runtime_tools.caller", "model"),
                KeyValue::new("runtime_tools.source", "plugin:bench"),
                KeyValue::new("runtime_tools.kind", "embedded"),
            ])
            .start(tracer);
        let parent = Context::new().with_remote_span_context(call.span_context().clone());
        let client = tracer
            .span_builder("POST")
            .with_kind(SpanKind::Client)
            .with_attributes([
                KeyValue::new("http.request.method", "POST"),
                KeyValue::new("url.full", url),
                KeyValue::new("server.address", "127.0.0.1"),
                KeyValue::new("server.port", 8080_i64),
            ])
            .start_with_context(tracer, &parent);
        Self { call, client }
    }

    fn end(mut self) {
        use opentelemetry::KeyValue;
        use opentelemetry::trace::Span as _;
        self.client
            .set_attribute(KeyValue::new("http.response.status_code", 200_i64));
        self.client.end();
        self.call.end();
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    let options = Options::from_args();
    let peers = PeerCpu::default();
    let callback = peer(peers.clone(), CALLBACK_ANSWER, |_| {});
    let receiver = peer(peers.clone(), "", count_spans);
    actix_web::rt::System::new().block_on(async move {
        let on = Variant::start("export on", callback, Some(receiver), options.calls).await;
        let provider = on
            .events
            .observer()
            .tracer_provider()
            .expect("export is on");
        let variants = [
            Variant::start("export off", callback, None, options.calls).await,
            on,
            Variant::start("sdk beside a call", callback, None, options.calls)
                .await
                .with_sdk(provider.clone(), Floor::BesideACall),
            Variant::start("sdk alone", callback, None, options.calls)
                .await
                .with_sdk(provider, Floor::Alone),
        ];
        let skipped = |variant: &Variant| {
            options
                .only
                .as_deref()
                .is_some_and(|only| !variant.label.ends_with(only))
        };
        // Warm-up: connections, pools, the exporter's runtime.
        for variant in variants.iter().filter(|v| !skipped(v)) {
            variant
                .run(options.calls / 10, options.concurrency, &peers)
                .await;
        }
        let mut figures = vec![Vec::new(); variants.len()];
        for run in 1..=options.runs {
            for (variant, figures) in variants.iter().zip(&mut figures) {
                if skipped(variant) {
                    continue;
                }
                let per_call = variant
                    .run(options.calls, options.concurrency, &peers)
                    .await;
                println!("{} run{run} cpu_us_per_call={per_call:.2}", variant.label);
                figures.push(per_call);
            }
        }
        if options.only.is_some() {
            return;
        }
        let (off, on) = (median(figures[0].clone()), median(figures[1].clone()));
        let (beside, alone) = (median(figures[2].clone()), median(figures[3].clone()));
        println!(
            "# medians of {} runs of {} calls ({} at a time), CPU per call: export off {off:.2} \
             µs, export on {on:.2} µs: export costs {:.2} µs; the floor, the SDK's two spans made \
             straight: beside a call (export off) {beside:.2} µs, {:.2} µs more than export off; \
             alone (no call) {alone:.2} µs",
            options.runs,
            options.calls,
            options.concurrency,
            on - off,
            beside - off
        );
    });
}
