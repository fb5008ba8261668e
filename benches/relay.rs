//! Relay benchmark: what the relay (`GET /v1/realtime`) adds to each event it forwards, with
//! many characters streaming audio at once.
//!
//! An echo model (actix-web + actix-ws, one worker, in this process) answers every
//! `input_audio_buffer.append` with a `response.output_audio.delta` carrying the same audio. 64
//! apps (awc websockets, in this process) each stream audio-sized appends at a fixed cadence and
//! time each round trip: first straight to the echo model (the floor), then through a plain TCP
//! forwarder (this harness as a second process: what any extra hop costs), then through the
//! server (the release binary, a child process, one relaying character per app). A round trip through
//! the relay forwards two events (the append up, the delta down), so the added latency per
//! forwarded event is half the difference of the round trips. The server's CPU time (utime +
//! stime from `/proc`, 100 ticks a second) over the relayed run, divided by the events it
//! forwarded, is its CPU per event. Every app checks that every echo came back, in order, with
//! its audio byte for byte: a lost, reordered or altered event fails the run.
//!
//! Figures and method: docs/benchmarks.md. Run: `cargo bench --bench relay` (options:
//! `-- --apps N --events N --interval-ms N --audio-bytes N`).

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_web::{App, HttpRequest, HttpResponse, HttpServer, web};
use base64::Engine;
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;

mod support;
use support::{Server, percentile};

/// Apps streaming at once (the issue's 64 characters).
const APPS: usize = 64;
/// Appends each app sends.
const EVENTS: usize = 500;
/// Time between two appends of one app: 5 times real time for 100 ms chunks. The apps' cadences
/// are spread over the interval.
const INTERVAL: Duration = Duration::from_millis(20);
/// Raw audio per append: 100 ms of 24 kHz, 16-bit mono (6 400 characters in base64).
const AUDIO_BYTES: usize = 4800;
/// Longest a run may take before it is declared stuck.
const RUN_DEADLINE: Duration = Duration::from_secs(120);

struct Options {
    apps: usize,
    events: usize,
    interval: Duration,
    audio_bytes: usize,
}

fn options() -> Options {
    let mut o = Options {
        apps: APPS,
        events: EVENTS,
        interval: INTERVAL,
        audio_bytes: AUDIO_BYTES,
    };
    let args: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < args.len() {
        let value = || args.get(i + 1).and_then(|v| v.parse::<u64>().ok());
        match args[i].as_str() {
            "--apps" => o.apps = value().expect("--apps N") as usize,
            "--events" => o.events = value().expect("--events N") as usize,
            "--interval-ms" => {
                o.interval = Duration::from_millis(value().expect("--interval-ms N"))
            }
            "--audio-bytes" => o.audio_bytes = value().expect("--audio-bytes N") as usize,
            // `cargo bench` passes `--bench`; anything else is not ours.
            _ => {
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    o
}

/// The echo model: each append comes back as an audio delta with the same audio.
async fn echo(req: HttpRequest, body: web::Payload) -> actix_web::Result<HttpResponse> {
    let (response, mut session, stream) = actix_ws::handle(&req, body)?;
    let mut stream = stream.max_frame_size(16 << 20);
    actix_web::rt::spawn(async move {
        while let Some(Ok(message)) = stream.next().await {
            if let actix_ws::Message::Text(text) = message
                && text.starts_with(APPEND_PREFIX)
            {
                let delta = format!("{DELTA_PREFIX}{}", &text[APPEND_PREFIX.len()..]);
                if session.text(delta).await.is_err() {
                    break;
                }
            }
        }
    });
    Ok(response)
}

const APPEND_PREFIX: &str = r#"{"type":"input_audio_buffer.append","#;
const DELTA_PREFIX: &str = r#"{"type":"response.output_audio.delta","response_id":"r","item_id":"i","output_index":0,"content_index":0,"#;

/// One app's run: round-trip times in microseconds, in order. App `index` starts its cadence
/// `index / apps` of an interval after the first, as independent apps would: not all at once.
async fn app(
    index: usize,
    url: String,
    o: Arc<Options>,
    audio: Arc<String>,
) -> Result<Vec<f64>, String> {
    let (_, framed) = awc::Client::builder()
        .max_http_version(awc::http::Version::HTTP_11)
        .timeout(Duration::from_secs(30))
        .finish()
        .ws(url.as_str())
        .max_frame_size(16 << 20)
        .connect()
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    let (mut sink, mut stream) = framed.split();
    let sent: Arc<Mutex<Vec<Instant>>> = Arc::new(Mutex::new(Vec::with_capacity(o.events)));
    let reader = {
        let (sent, audio, events) = (sent.clone(), audio.clone(), o.events);
        actix_web::rt::spawn(async move {
            let mut rtts = Vec::with_capacity(events);
            while rtts.len() < events {
                let frame = match stream.next().await {
                    Some(Ok(frame)) => frame,
                    Some(Err(e)) => return Err(format!("read: {e}")),
                    None => return Err(format!("closed after {} echoes", rtts.len())),
                };
                let awc::ws::Frame::Text(bytes) = frame else {
                    continue;
                };
                let now = Instant::now();
                let event: Value = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
                if event["type"] != "response.output_audio.delta" {
                    continue; // the model's greeting, if any
                }
                let seq: usize = event["event_id"]
                    .as_str()
                    .and_then(|id| id.strip_prefix("a_"))
                    .and_then(|n| n.parse().ok())
                    .ok_or("an echo without its sequence number")?;
                if seq != rtts.len() {
                    return Err(format!("echo {seq} arrived where {} was due", rtts.len()));
                }
                if event["audio"].as_str() != Some(audio.as_str()) {
                    return Err(format!("echo {seq} did not carry the audio byte for byte"));
                }
                let at = sent.lock().unwrap()[seq];
                rtts.push((now - at).as_secs_f64() * 1e6);
            }
            Ok(rtts)
        })
    };
    let offset = o.interval.mul_f64(index as f64 / o.apps as f64);
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + offset, o.interval);
    for seq in 0..o.events {
        tick.tick().await;
        let append = format!(r#"{APPEND_PREFIX}"event_id":"a_{seq}","audio":"{audio}"}}"#);
        sent.lock().unwrap().push(Instant::now());
        sink.send(awc::ws::Message::Text(append.into()))
            .await
            .map_err(|e| format!("send: {e}"))?;
    }
    let rtts = reader.await.map_err(|e| e.to_string())??;
    let _ = sink.send(awc::ws::Message::Close(None)).await;
    Ok(rtts)
}

/// Every app's round trips, or the first failure.
async fn run(urls: Vec<String>, o: Arc<Options>, audio: Arc<String>) -> Vec<f64> {
    let apps: Vec<_> = urls
        .into_iter()
        .enumerate()
        .map(|(i, url)| actix_web::rt::spawn(app(i, url, o.clone(), audio.clone())))
        .collect();
    let mut all = Vec::new();
    for app in apps {
        match tokio::time::timeout(RUN_DEADLINE, app).await {
            Ok(Ok(Ok(rtts))) => all.extend(rtts),
            Ok(Ok(Err(e))) => panic!("an app failed: {e}"),
            Ok(Err(e)) => panic!("an app panicked: {e}"),
            Err(_) => panic!("an app did not finish within {RUN_DEADLINE:?}"),
        }
    }
    all
}

/// The release server with one relaying character per app, all to the echo model.
fn start_server(apps: usize, model: &str) -> Server {
    let mut config = String::from("bind = \"127.0.0.1:0\"\n");
    for i in 0..apps {
        config.push_str(&format!(
            "[[character]]\nname = \"c{i}\"\n[character.session]\nkind = \"openai-realtime\"\n\
             url = \"{model}\"\nmode = \"relay\"\n"
        ));
    }
    let path = std::env::temp_dir().join(format!("relay-bench-{}.toml", std::process::id()));
    std::fs::write(&path, config).expect("config written");
    Server::start(&path, Stdio::inherit(), Some("warn"))
}

fn summary(label: &str, rtts: &mut [f64]) -> (f64, f64) {
    rtts.sort_by(f64::total_cmp);
    let (p50, p99) = (percentile(rtts, 0.5), percentile(rtts, 0.99));
    println!(
        "{label:>8}: {} round trips, p50 {p50:.1} us, p99 {p99:.1} us",
        rtts.len()
    );
    (p50, p99)
}

/// A plain TCP forwarder: this harness run as `--forward-to HOST:PORT`, a process that copies
/// bytes both ways between each connection it accepts and one it opens to the target
/// (TCP_NODELAY on both), on two threads like the server's two workers. What it adds to a round
/// trip is what any extra process between the app and the model adds on this machine: the floor
/// of a relay.
fn forward(target: String) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port for the forwarder");
    listener.set_nonblocking(true).expect("non-blocking");
    println!(
        "listening on http://{}",
        listener.local_addr().expect("bound")
    );
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let listener = listener.try_clone().expect("the listener shared");
            let target = target.clone();
            std::thread::spawn(move || {
                actix_web::rt::System::new().block_on(accept_and_copy(listener, target))
            })
        })
        .collect();
    for thread in threads {
        let _ = thread.join();
    }
}

async fn accept_and_copy(listener: std::net::TcpListener, target: String) {
    let listener =
        actix_web::rt::net::TcpListener::from_std(listener).expect("a listener for this thread");
    while let Ok((mut inbound, _)) = listener.accept().await {
        let target = target.clone();
        actix_web::rt::spawn(async move {
            let Ok(mut outbound) = actix_web::rt::net::TcpStream::connect(&target).await else {
                return;
            };
            let _ = inbound.set_nodelay(true);
            let _ = outbound.set_nodelay(true);
            let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
        });
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--forward-to") {
        return forward(args[i + 1].clone());
    }
    let o = Arc::new(options());
    let audio = Arc::new(
        base64::engine::general_purpose::STANDARD.encode(
            (0..o.audio_bytes)
                .map(|i| (i * 31 % 251) as u8)
                .collect::<Vec<u8>>(),
        ),
    );
    actix_web::rt::System::new().block_on(async move {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let model_address = listener.local_addr().unwrap().to_string();
        let model = format!("ws://{model_address}/v1/realtime");
        let server = HttpServer::new(|| App::new().route("/v1/realtime", web::get().to(echo)))
            .workers(1)
            .listen(listener)
            .unwrap()
            .run();
        actix_web::rt::spawn(server);

        println!(
            "{} apps, {} appends each every {} ms, {} audio bytes ({} base64 characters)",
            o.apps,
            o.events,
            o.interval.as_millis(),
            o.audio_bytes,
            audio.len()
        );
        let direct = run(vec![model.clone(); o.apps], o.clone(), audio.clone()).await;
        let forwarder = Server::spawn(
            Command::new(std::env::current_exe().expect("this harness"))
                .arg("--forward-to")
                .arg(model_address.as_str()),
        );
        let before = forwarder.cpu_seconds();
        let urls = vec![format!("ws://{}/v1/realtime", forwarder.address); o.apps];
        let forwarded = run(urls, o.clone(), audio.clone()).await;
        let forwarder_cpu = forwarder.cpu_seconds() - before;
        drop(forwarder);
        let server = start_server(o.apps, &model);
        let urls: Vec<String> = (0..o.apps)
            .map(|i| format!("ws://{}/v1/realtime?character=c{i}", server.address))
            .collect();
        let before = server.cpu_seconds();
        let relayed = run(urls, o.clone(), audio.clone()).await;
        let cpu = server.cpu_seconds() - before;
        drop(server);

        let (mut direct, mut forwarded, mut relayed) = (direct, forwarded, relayed);
        let (d50, d99) = summary("direct", &mut direct);
        let (f50, f99) = summary("TCP fwd", &mut forwarded);
        let (r50, r99) = summary("relayed", &mut relayed);
        let events = 2 * relayed.len();
        println!(
            "a plain TCP forwarder adds per forwarded event: p50 {:.1} us, p99 {:.1} us; its CPU {:.1} us per event",
            (f50 - d50) / 2.0,
            (f99 - d99) / 2.0,
            forwarder_cpu * 1e6 / (2 * forwarded.len()) as f64
        );
        println!(
            "added per forwarded event: p50 {:.1} us, p99 {:.1} us ({:+.1} us over the TCP forwarder's p50); server CPU {:.2} s for {events} events: {:.1} us per event; no event lost, reordered or altered",
            (r50 - d50) / 2.0,
            (r99 - d99) / 2.0,
            (r50 - f50) / 2.0,
            cpu,
            cpu * 1e6 / events as f64
        );
    });
}
