//! Call-path benchmark: a model in a live session calls a tool, the server runs the callback and
//! answers; the time a person waits for.
//!
//! A fake realtime model (actix-web + actix-ws, one worker, in this process) takes each session
//! the server opens (client mode) or relays (relay mode: one app per character, awc websockets in
//! this process, connected through `GET /v1/realtime`). It acknowledges every `session.update`
//! and, once every session has the tool, each session calls it in a closed loop: it sends
//! `response.function_call_arguments.done` and `response.done` for one call and waits for the
//! server's `function_call_output` for that call and the `response.create` that follows, then
//! calls again. The time from sending the call to receiving each of the two is one sample. The
//! tool's callback is the nginx callback of `benches/http/` (`--callback`, started by
//! `benches/http/run.sh callpath`), whose answer is checked in every output.
//!
//! Per run: calls answered in the measured window, calls per second, p50 / p99 to the output and
//! to the `response.create`, the server's CPU (utime + stime of the release binary from `/proc`)
//! per call, and the faults: a call not answered within [`CALL_DEADLINE`] (lost), a second output
//! for a call (twice), an output that is not the callback's answer or a `response.create` before
//! the output (bad). Any fault is printed; the figures of a run with faults are not to be used.
//!
//! Figures and method: docs/benchmarks.md. Run:
//! `cargo bench --bench call_path -- --mode client|relay --sessions N [--seconds S]
//! [--warmup-seconds S] [--runs N] [--callback URL] [--label NAME]`; `RUNTIME_TOOLS_BIN=PATH`
//! measures that server binary instead (e.g. an older build, to compare in one sitting), and the
//! server inherits the environment (`OTEL_EXPORTER_OTLP_ENDPOINT` switches span export on).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

mod support;
use support::{Server, percentile};

/// The tool every session calls.
const TOOL: &str = "get_weather";
/// The arguments of every call (valid for the tool's schema, so every call reaches the callback).
const ARGUMENTS: &str = r#"{"city":"Tokyo","unit":"c"}"#;
/// What the nginx callback answers, as the model must get it.
const EXPECTED_OUTPUT: &str = r#"{"temperature_c": 28}"#;
/// Longest a call may take before it counts as lost.
const CALL_DEADLINE: Duration = Duration::from_secs(10);
/// Longest the sessions may take to connect and acknowledge the tool.
const READY_DEADLINE: Duration = Duration::from_secs(60);
/// How long after the last call a session keeps listening for a second answer to any call.
const DRAIN: Duration = Duration::from_millis(300);
/// Largest frame the fake model and apps accept (the server's own limit).
const MAX_FRAME: usize = 16 << 20;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Client,
    Relay,
}

struct Options {
    mode: Mode,
    sessions: usize,
    seconds: f64,
    warmup_seconds: f64,
    runs: usize,
    callback: String,
    /// Appended to the scenario's name (`--label main`: `callpath-client-n1-main`), so runs of
    /// different binaries or settings in one invocation are told apart.
    label: Option<String>,
}

fn options() -> Options {
    let mut o = Options {
        mode: Mode::Client,
        sessions: 1,
        seconds: 6.0,
        warmup_seconds: 2.0,
        runs: 1,
        callback: std::env::var("CALLBACK").unwrap_or_else(|_| "http://127.0.0.1:9333".into()),
        label: None,
    };
    let args: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < args.len() {
        let value = || args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--mode" => {
                o.mode = match value().as_str() {
                    "client" => Mode::Client,
                    "relay" => Mode::Relay,
                    other => panic!("--mode client|relay, got {other:?}"),
                }
            }
            "--sessions" => o.sessions = value().parse().expect("--sessions N"),
            "--seconds" => o.seconds = value().parse().expect("--seconds S"),
            "--warmup-seconds" => o.warmup_seconds = value().parse().expect("--warmup-seconds S"),
            "--runs" => o.runs = value().parse().expect("--runs N"),
            "--callback" => o.callback = value(),
            "--label" => o.label = Some(value()),
            // `cargo bench` passes `--bench`; anything else is not ours.
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    assert!(o.sessions > 0, "--sessions must be at least 1");
    o
}

/// What the sessions share with the driver.
struct Bench {
    /// Each session says once that it acknowledged an update listing the tool.
    ready: mpsc::UnboundedSender<()>,
    /// `true` once the sessions are to start calling.
    start: watch::Receiver<bool>,
    /// Set when the sessions are to finish their call in flight and report.
    stop: AtomicBool,
    /// Each session's samples and faults.
    reports: mpsc::UnboundedSender<Report>,
    /// Numbers the sessions, for their call ids.
    next_session: Mutex<usize>,
}

/// One answered call: when it was sent, and the microseconds to its output and to the
/// `response.create`.
struct Sample {
    sent: Instant,
    to_output: f64,
    to_create: f64,
}

#[derive(Default)]
struct Report {
    samples: Vec<Sample>,
    lost: usize,
    twice: usize,
    bad: Vec<String>,
}

/// A model session: acknowledges updates, and calls the tool in a loop once told to start.
async fn model(
    req: HttpRequest,
    body: web::Payload,
    bench: web::Data<Bench>,
) -> actix_web::Result<HttpResponse> {
    let (response, session, stream) = actix_ws::handle(&req, body)?;
    let bench = bench.into_inner();
    let index = {
        let mut next = bench.next_session.lock().unwrap();
        *next += 1;
        *next
    };
    actix_web::rt::spawn(async move {
        let mut report = Report::default();
        if let Err(e) = model_session(index, session, stream, &bench, &mut report).await {
            report.bad.push(format!("session {index}: {e}"));
        }
        let _ = bench.reports.send(report);
    });
    Ok(response)
}

/// What the model reads from the server, as far as the benchmark cares.
enum Incoming {
    Update(Value),
    Output { call_id: String, output: String },
    Create,
    Other,
}

fn incoming(text: &str) -> Result<Incoming, String> {
    let event: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    Ok(match event["type"].as_str() {
        Some("session.update") => Incoming::Update(event),
        Some("conversation.item.create") if event["item"]["type"] == "function_call_output" => {
            Incoming::Output {
                call_id: event["item"]["call_id"].as_str().unwrap_or("").to_owned(),
                output: event["item"]["output"].as_str().unwrap_or("").to_owned(),
            }
        }
        Some("response.create") => Incoming::Create,
        _ => Incoming::Other,
    })
}

/// Reads the next text event, answering pings; `None` when the server closed.
async fn next_text(
    session: &mut actix_ws::Session,
    stream: &mut actix_ws::AggregatedMessageStream,
) -> Result<Option<String>, String> {
    loop {
        match stream.next().await {
            Some(Ok(actix_ws::AggregatedMessage::Text(text))) => return Ok(Some(text.to_string())),
            Some(Ok(actix_ws::AggregatedMessage::Ping(bytes))) => {
                session.pong(&bytes).await.map_err(|e| e.to_string())?
            }
            Some(Ok(actix_ws::AggregatedMessage::Close(_))) | None => return Ok(None),
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(e.to_string()),
        }
    }
}

/// Acknowledges a `session.update` with the session it set; true if it lists the tool.
async fn acknowledge(session: &mut actix_ws::Session, update: Value) -> Result<bool, String> {
    let lists_tool = update["session"]["tools"]
        .as_array()
        .is_some_and(|tools| tools.iter().any(|t| t["name"] == TOOL));
    let ack = json!({
        "type": "session.updated",
        "event_id": format!("ack_{}", update["event_id"].as_str().unwrap_or("")),
        "session": update["session"],
    });
    session
        .text(ack.to_string())
        .await
        .map_err(|e| e.to_string())?;
    Ok(lists_tool)
}

async fn model_session(
    index: usize,
    mut session: actix_ws::Session,
    stream: actix_ws::MessageStream,
    bench: &Bench,
    report: &mut Report,
) -> Result<(), String> {
    let mut stream = stream.max_frame_size(MAX_FRAME).aggregate_continuations();
    let mut start = bench.start.clone();
    // Until the start: acknowledge updates, and say when the tool is there.
    let mut announced = false;
    while !*start.borrow() {
        tokio::select! {
            changed = start.changed() => changed.map_err(|e| e.to_string())?,
            text = next_text(&mut session, &mut stream) => {
                let Some(text) = text? else { return Err("closed before the start".into()) };
                if let Incoming::Update(update) = incoming(&text)? {
                    if acknowledge(&mut session, update).await? && !announced {
                        announced = true;
                        let _ = bench.ready.send(());
                    }
                }
            }
        }
    }
    let mut answered = std::collections::HashSet::new();
    let mut seq = 0usize;
    while !bench.stop.load(Ordering::Relaxed) {
        seq += 1;
        let call_id = format!("call_{index}_{seq}");
        let response_id = format!("resp_{index}_{seq}");
        let arguments_done = json!({
            "type": "response.function_call_arguments.done",
            "event_id": format!("ev_{index}_{seq}_a"),
            "response_id": response_id,
            "item_id": format!("item_{index}_{seq}"),
            "output_index": 0,
            "call_id": call_id,
            "name": TOOL,
            "arguments": ARGUMENTS,
        });
        let response_done = json!({
            "type": "response.done",
            "event_id": format!("ev_{index}_{seq}_d"),
            "response": {"id": response_id, "status": "completed", "output": [{
                "type": "function_call", "id": format!("item_{index}_{seq}"),
                "call_id": call_id, "name": TOOL, "arguments": ARGUMENTS,
            }]},
        });
        let sent = Instant::now();
        for event in [arguments_done, response_done] {
            session
                .text(event.to_string())
                .await
                .map_err(|e| e.to_string())?;
        }
        let mut to_output = None;
        let answer = tokio::time::timeout(CALL_DEADLINE, async {
            loop {
                let Some(text) = next_text(&mut session, &mut stream).await? else {
                    return Err("the server closed the session".to_owned());
                };
                match incoming(&text)? {
                    Incoming::Update(update) => {
                        acknowledge(&mut session, update).await?;
                    }
                    Incoming::Output {
                        call_id: id,
                        output,
                    } => {
                        if !answered.insert(id.clone()) {
                            report.twice += 1;
                        } else if id != call_id {
                            report
                                .bad
                                .push(format!("an output for {id} while {call_id} ran"));
                        } else if output != EXPECTED_OUTPUT {
                            report.bad.push(format!("{call_id} got {output:?}"));
                            to_output = Some(sent.elapsed());
                        } else {
                            to_output = Some(sent.elapsed());
                        }
                    }
                    Incoming::Create => {
                        let Some(to_output) = to_output else {
                            report
                                .bad
                                .push(format!("response.create before the output of {call_id}"));
                            continue;
                        };
                        return Ok((to_output, sent.elapsed()));
                    }
                    Incoming::Other => {}
                }
            }
        })
        .await;
        match answer {
            Ok(Ok((to_output, to_create))) => report.samples.push(Sample {
                sent,
                to_output: to_output.as_secs_f64() * 1e6,
                to_create: to_create.as_secs_f64() * 1e6,
            }),
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                report.lost += 1;
                return Err(format!(
                    "{call_id} was not answered within {CALL_DEADLINE:?}"
                ));
            }
        }
    }
    // Anything more is an answer given twice (or an update to acknowledge).
    let _ = tokio::time::timeout(DRAIN, async {
        while let Ok(Some(text)) = next_text(&mut session, &mut stream).await {
            match incoming(&text) {
                Ok(Incoming::Output { call_id, .. }) if !answered.insert(call_id.clone()) => {
                    report.twice += 1
                }
                Ok(Incoming::Output { call_id, .. }) => report
                    .bad
                    .push(format!("an output for {call_id}, never called")),
                Ok(Incoming::Update(update)) => {
                    let _ = acknowledge(&mut session, update).await;
                }
                _ => {}
            }
        }
    })
    .await;
    let _ = session.close(None).await;
    Ok(())
}

/// The release server, one character per session, each with a session to the fake model; logs
/// at the server's default level into a file, as an operator would run it.
fn start_server(o: &Options, model: &str, work: &std::path::Path) -> Server {
    let mut config = String::from("bind = \"127.0.0.1:0\"\n");
    for i in 0..o.sessions {
        config.push_str(&format!(
            "[[character]]\nname = \"role{i}\"\n[character.session]\nkind = \"openai-realtime\"\n\
             url = \"{model}\"\nmax_tool_calls_per_window = 1000000000\n\
             tool_call_window_seconds = 1\n{}",
            if o.mode == Mode::Relay {
                "mode = \"relay\"\n"
            } else {
                ""
            }
        ));
    }
    let path = work.join("call-path.toml");
    std::fs::write(&path, config).expect("config written");
    let log = std::fs::File::create(work.join("server.log")).expect("log file");
    Server::start(&path, log.into(), None)
}

/// Registers the tool for every character, answered by the nginx callback.
async fn register(address: &str, callback: &str) {
    let body = json!({
        "name": TOOL,
        "description": "Benchmark tool: get the current weather for a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name"},
            "unit": {"type": "string", "enum": ["c", "f"]}
        }, "required": ["city"]},
        "callback_url": format!("{callback}/tools/{TOOL}"),
        "role": null,
        "source": "plugin:bench",
        "timeout_seconds": 30
    });
    let mut response = awc::Client::builder()
        .timeout(Duration::from_secs(60))
        .finish()
        .post(format!("http://{address}/api/tools/register"))
        .send_json(&body)
        .await
        .expect("the register request is answered");
    let text = response.body().await.expect("a register body");
    assert!(
        response.status().is_success(),
        "register failed: {} {}",
        response.status(),
        String::from_utf8_lossy(&text)
    );
    let answer: Value = serde_json::from_slice(&text).expect("a JSON register body");
    assert_eq!(
        answer["failed_roles"],
        json!([]),
        "a session refused the tool: {answer}"
    );
}

/// One app connected through the relay: it reads (and drops) what comes down until `stop`. A
/// close is a fault unless the run is over (the model closes its sessions once it has reported,
/// and the relay passes that on).
async fn app(
    url: String,
    stop: watch::Receiver<bool>,
    bench: web::Data<Bench>,
) -> Result<(), String> {
    let (_, framed) = awc::Client::builder()
        .max_http_version(awc::http::Version::HTTP_11)
        .timeout(Duration::from_secs(30))
        .finish()
        .ws(url.as_str())
        .max_frame_size(MAX_FRAME)
        .connect()
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    let (mut sink, mut stream) = framed.split();
    let mut stop = stop;
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            frame = stream.next() => match frame {
                Some(Ok(awc::ws::Frame::Ping(bytes))) => {
                    sink.send(awc::ws::Message::Pong(bytes)).await.map_err(|e| e.to_string())?
                }
                Some(Ok(awc::ws::Frame::Close(_))) if bench.stop.load(Ordering::Relaxed) => {
                    return Ok(())
                }
                Some(Ok(awc::ws::Frame::Close(reason))) => {
                    return Err(format!("{url}: the relay closed: {reason:?}"))
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(format!("{url}: {e}")),
                None => return Err(format!("{url}: the relay ended")),
            }
        }
    }
    let _ = sink.send(awc::ws::Message::Close(None)).await;
    Ok(())
}

/// One run: a fresh server and fake model, warm-up, the measured window, the report line.
async fn run(o: &Options, number: usize, work: &std::path::Path) {
    let (ready_tx, mut ready_rx) = mpsc::unbounded_channel();
    let (start_tx, start_rx) = watch::channel(false);
    let (reports_tx, mut reports_rx) = mpsc::unbounded_channel();
    let bench = web::Data::new(Bench {
        ready: ready_tx,
        start: start_rx,
        stop: AtomicBool::new(false),
        reports: reports_tx,
        next_session: Mutex::new(0),
    });
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let model_url = format!("ws://{}/v1/realtime", listener.local_addr().unwrap());
    let shared = bench.clone();
    let model_server = HttpServer::new(move || {
        App::new()
            .app_data(shared.clone())
            .route("/v1/realtime", web::get().to(model))
    })
    .workers(1)
    .disable_signals()
    .listen(listener)
    .unwrap()
    .run();
    let model_handle = model_server.handle();
    actix_web::rt::spawn(model_server);

    let server = start_server(o, &model_url, work);
    let address = server.address.clone();
    register(&address, &o.callback).await;
    let (apps_stop_tx, apps_stop_rx) = watch::channel(false);
    let apps: Vec<_> = match o.mode {
        Mode::Client => Vec::new(),
        Mode::Relay => (0..o.sessions)
            .map(|i| {
                let url = format!("ws://{address}/v1/realtime?character=role{i}");
                actix_web::rt::spawn(app(url, apps_stop_rx.clone(), bench.clone()))
            })
            .collect(),
    };
    let deadline = Instant::now() + READY_DEADLINE;
    for _ in 0..o.sessions {
        let left = deadline.saturating_duration_since(Instant::now());
        tokio::time::timeout(left, ready_rx.recv())
            .await
            .expect("every session acknowledges the tool in time")
            .expect("the model runs");
    }

    start_tx.send(true).unwrap();
    tokio::time::sleep(Duration::from_secs_f64(o.warmup_seconds)).await;
    let (cpu0, from) = (server.cpu_seconds(), Instant::now());
    tokio::time::sleep(Duration::from_secs_f64(o.seconds)).await;
    let (cpu1, to) = (server.cpu_seconds(), Instant::now());
    bench.stop.store(true, Ordering::Relaxed);

    let mut all = Report::default();
    for _ in 0..o.sessions {
        let report = tokio::time::timeout(CALL_DEADLINE + DRAIN * 2, reports_rx.recv())
            .await
            .expect("every session reports")
            .expect("the model runs");
        all.samples.extend(report.samples);
        all.lost += report.lost;
        all.twice += report.twice;
        all.bad.extend(report.bad);
    }
    let _ = apps_stop_tx.send(true);
    for app in apps {
        if let Ok(Err(e)) = app.await {
            all.bad.push(e);
        }
    }
    drop(server);
    model_handle.stop(false).await;

    let window: Vec<&Sample> = all
        .samples
        .iter()
        .filter(|s| s.sent >= from && s.sent < to)
        .collect();
    let mut outputs: Vec<f64> = window.iter().map(|s| s.to_output).collect();
    let mut creates: Vec<f64> = window.iter().map(|s| s.to_create).collect();
    outputs.sort_by(f64::total_cmp);
    creates.sort_by(f64::total_cmp);
    let seconds = (to - from).as_secs_f64();
    let mode = match o.mode {
        Mode::Client => "client",
        Mode::Relay => "relay",
    };
    let label = o
        .label
        .as_ref()
        .map(|l| format!("-{l}"))
        .unwrap_or_default();
    println!(
        "callpath-{mode}-n{}{label} run{number} calls={} rps={:.0} p50_ms={:.3} p99_ms={:.3} \
         output_p50_ms={:.3} output_p99_ms={:.3} cpu_us_per_call={:.1} lost={} twice={} bad={}",
        o.sessions,
        window.len(),
        window.len() as f64 / seconds,
        percentile(&creates, 0.5) / 1e3,
        percentile(&creates, 0.99) / 1e3,
        percentile(&outputs, 0.5) / 1e3,
        percentile(&outputs, 0.99) / 1e3,
        (cpu1 - cpu0) * 1e6 / window.len().max(1) as f64,
        all.lost,
        all.twice,
        all.bad.len(),
    );
    for fault in all.bad.iter().take(10) {
        println!("# fault: {fault}");
    }
}

fn main() {
    let o = options();
    let work = std::env::temp_dir().join(format!("call-path-bench-{}", std::process::id()));
    std::fs::create_dir_all(&work).expect("a work directory");
    actix_web::rt::System::new().block_on(async {
        for number in 1..=o.runs {
            run(&o, number, &work).await;
        }
    });
    let _ = std::fs::remove_dir_all(&work);
}
