//! Chat benchmark: an app's request with one round of a registered tool, run by the server,
//! against the same work done by the app itself (the floor); and the first streamed token
//! through the server against straight from the upstream. Both wire formats: chat completions
//! (`chat-*`, `ttft-*`) and the Responses API (`responses-*`, `responses-ttft-*`).
//!
//! A fake OpenAI-compatible upstream (actix-web, one worker, in this process) answers a request
//! that carries no tool result with a call of the registered tool, and one that does (or asks
//! for words, the marker below) with a short answer in words; streamed when asked. The tool's
//! callback is the nginx callback of `benches/http/` (`--callback`, started by
//! `benches/http/run.sh chat`). Scenarios, each a closed loop of `--conns` clients for the
//! measured window after a warm-up, alternated run by run; at one connection, the scenarios
//! compared with each other run in turn within each of `--slices` slices of the window, so a
//! change in the machine's speed falls on all of them alike:
//!
//! - `chat-floor` / `responses-floor`: what an app running its own tool loop does: the upstream
//!   (a call), the callback, the upstream again (the words; for the Responses API chained with
//!   `previous_response_id`) — three exchanges, one after the other;
//! - `chat-server` / `responses-server`: one request to the server's `/v1/chat/completions` or
//!   `/v1/responses`, which does the same; the server's CPU (utime + stime from `/proc`) per
//!   request and per round (two rounds);
//! - at one connection, `ttft-direct` and `ttft-server` (and `responses-ttft-*`): a streamed
//!   request answered in words, the time to the first event with text, straight from the
//!   upstream and through the server;
//! - `chat-forwarder`, `ttft-forwarder` (and `responses-*`): the same requests through a plain
//!   forwarder, the floor of any server of this shape on this stack: this harness run as a child
//!   process (`--forwarder UPSTREAM CALLBACK`), an actix-web server with one worker per CPU as
//!   the server has, whose awc client does the round's three exchanges with bytes prepared in
//!   advance (no JSON read or written) and passes a streamed answer on chunk by chunk.
//!
//! With `MAIN_BIN=PATH` (another build of the server, e.g. main's), that binary runs beside this
//! one and every server scenario is measured on it too, right before this build's, run after run
//! (`chat-main`, `ttft-main`, `responses-main`, `responses-ttft-main`, with the same suffixes):
//! two builds compared in the same minutes, beside the same floor.
//!
//! Every answer is checked (the words of the final answer); a wrong one is a fault, printed.
//! Figures and method: docs/benchmarks.md. Run:
//! `cargo bench --bench chat -- [--conns N] [--seconds S] [--warmup-seconds S] [--runs N]
//! [--callback URL] [--only round|ttft] [--slices N]`; `RUNTIME_TOOLS_BIN=PATH` measures that server binary instead of this build.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::{Duration, Instant};

use actix_web::{App, HttpResponse, HttpServer, web};
use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::future::LocalBoxFuture;
use serde_json::{Value, json};

mod support;
use support::{Server, percentile};

/// The tool every request's model calls.
const TOOL: &str = "get_weather";
/// The final answer's words, checked in every answer.
const WORDS: &str = "It is sunny and 28 degrees in Tokyo.";
/// A request whose last message says this is answered in words at once.
const WORDS_PLEASE: &str = "answer in words";
/// Longest one request may take before the run counts it as a fault.
const REQUEST_DEADLINE: Duration = Duration::from_secs(10);

struct Options {
    conns: usize,
    seconds: f64,
    warmup_seconds: f64,
    runs: usize,
    callback: String,
    /// The other build measured alternately with this one (`MAIN_BIN`).
    main_bin: Option<std::ffi::OsString>,
    /// Only the one-round requests (`round`) or only the first token (`ttft`).
    only: Option<String>,
    /// How many slices a one-connection window is cut into ([`sliced`]).
    slices: usize,
}

fn options() -> Options {
    let mut o = Options {
        conns: 16,
        seconds: 6.0,
        warmup_seconds: 2.0,
        runs: 3,
        callback: std::env::var("CALLBACK").unwrap_or_else(|_| "http://127.0.0.1:9333".into()),
        main_bin: std::env::var_os("MAIN_BIN").filter(|bin| !bin.is_empty()),
        only: None,
        slices: 10,
    };
    let args: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < args.len() {
        let value = || args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--conns" => o.conns = value().parse().expect("--conns N"),
            "--seconds" => o.seconds = value().parse().expect("--seconds S"),
            "--warmup-seconds" => o.warmup_seconds = value().parse().expect("--warmup-seconds S"),
            "--runs" => o.runs = value().parse().expect("--runs N"),
            "--slices" => {
                o.slices = value().parse().expect("--slices N");
                assert!(o.slices > 0, "--slices N: at least one slice");
            }
            "--callback" => o.callback = value(),
            "--only" => {
                let only = value();
                assert!(
                    only == "round" || only == "ttft",
                    "--only round|ttft, not {only:?}"
                );
                o.only = Some(only);
            }
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

/// The fake upstream's canned answers, of both wire formats.
struct Canned {
    call: Bytes,
    words: Bytes,
    words_stream: Bytes,
    response_call: Bytes,
    response_words: Bytes,
    response_words_stream: Bytes,
}

fn canned() -> Canned {
    let header = |object: &str| {
        json!({"id": "chatcmpl-bench", "object": object, "created": 1_700_000_000,
               "model": "bench-model"})
    };
    let mut call = header("chat.completion");
    call["choices"] = json!([{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": null, "tool_calls": [{"id": "call_bench",
        "type": "function", "function": {"name": TOOL,
        "arguments": "{\"city\":\"Tokyo\",\"unit\":\"c\"}"}}]}}]);
    call["usage"] = json!({"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60});
    let mut words = header("chat.completion");
    words["choices"] = json!([{"index": 0, "finish_reason": "stop",
        "message": {"role": "assistant", "content": WORDS}}]);
    words["usage"] = json!({"prompt_tokens": 70, "completion_tokens": 12, "total_tokens": 82});
    let chunk = |delta: Value, finish: Value| {
        let mut chunk = header("chat.completion.chunk");
        chunk["choices"] = json!([{"index": 0, "delta": delta, "finish_reason": finish}]);
        format!("data: {chunk}\n\n")
    };
    let mut stream = chunk(json!({"role": "assistant", "content": ""}), Value::Null);
    for word in WORDS.split_inclusive(' ') {
        stream.push_str(&chunk(json!({"content": word}), Value::Null));
    }
    stream.push_str(&chunk(json!({}), json!("stop")));
    let mut usage = header("chat.completion.chunk");
    usage["choices"] = json!([]);
    usage["usage"] = json!({"prompt_tokens": 70, "completion_tokens": 12, "total_tokens": 82});
    stream.push_str(&format!("data: {usage}\n\ndata: [DONE]\n\n"));
    let (response_call, response_words, response_words_stream) = canned_responses();
    Canned {
        call: Bytes::from(call.to_string()),
        words: Bytes::from(words.to_string()),
        words_stream: Bytes::from(stream),
        response_call,
        response_words,
        response_words_stream,
    }
}

/// The Responses API's answers: a call, the words, and the words streamed as its events.
fn canned_responses() -> (Bytes, Bytes, Bytes) {
    let response = |id: &str, output: Value| {
        json!({"id": id, "object": "response", "created_at": 1_700_000_000,
               "status": "completed", "model": "bench-model", "output": output,
               "usage": {"input_tokens": 50, "output_tokens": 10, "total_tokens": 60}})
    };
    let call = response(
        "resp_call",
        json!([{"type": "function_call", "id": "fc_bench", "call_id": "call_bench",
                "name": TOOL, "arguments": "{\"city\":\"Tokyo\",\"unit\":\"c\"}",
                "status": "completed"}]),
    );
    let message = json!({"type": "message", "id": "msg_bench", "role": "assistant",
        "status": "completed", "content": [{"type": "output_text", "text": WORDS,
        "annotations": []}]});
    let words = response("resp_words", json!([message]));
    let mut opening = words.clone();
    opening["status"] = json!("in_progress");
    opening["output"] = json!([]);
    let mut events = vec![
        json!({"type": "response.created", "response": opening}),
        json!({"type": "response.in_progress", "response": opening}),
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": {"type": "message", "id": "msg_bench", "role": "assistant",
                        "status": "in_progress", "content": []}}),
        json!({"type": "response.content_part.added", "output_index": 0, "item_id": "msg_bench",
               "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}),
    ];
    for word in WORDS.split_inclusive(' ') {
        events.push(
            json!({"type": "response.output_text.delta", "output_index": 0,
            "item_id": "msg_bench", "content_index": 0, "delta": word}),
        );
    }
    events.push(
        json!({"type": "response.output_text.done", "output_index": 0,
        "item_id": "msg_bench", "content_index": 0, "text": WORDS}),
    );
    events.push(
        json!({"type": "response.output_item.done", "output_index": 0,
        "item": message}),
    );
    events.push(json!({"type": "response.completed", "response": words}));
    let mut stream = String::new();
    for (number, mut event) in events.into_iter().enumerate() {
        event["sequence_number"] = json!(number);
        stream.push_str(&format!(
            "event: {}\ndata: {event}\n\n",
            event["type"].as_str().unwrap()
        ));
    }
    (
        Bytes::from(call.to_string()),
        Bytes::from(words.to_string()),
        Bytes::from(stream),
    )
}

/// The fake upstream: a call unless the request carries a tool result or asks for words.
async fn fake_upstream(body: Bytes, canned: web::Data<Canned>) -> HttpResponse {
    let text = std::str::from_utf8(&body).unwrap_or_default();
    let words = text.contains("\"role\":\"tool\"") || text.contains(WORDS_PLEASE);
    answer(
        text,
        words,
        [&canned.call, &canned.words, &canned.words_stream],
    )
}

/// The fake upstream's `/v1/responses`: the same, in the Responses API's terms.
async fn fake_responses(body: Bytes, canned: web::Data<Canned>) -> HttpResponse {
    let text = std::str::from_utf8(&body).unwrap_or_default();
    let words = text.contains("function_call_output") || text.contains(WORDS_PLEASE);
    answer(
        text,
        words,
        [
            &canned.response_call,
            &canned.response_words,
            &canned.response_words_stream,
        ],
    )
}

/// `[call, words, words streamed]` as the request asks.
fn answer(text: &str, words: bool, [call, whole, stream]: [&Bytes; 3]) -> HttpResponse {
    let streamed = text.contains("\"stream\":true");
    let (body, content_type) = match (words, streamed) {
        (true, true) => (stream, "text/event-stream"),
        (true, false) => (whole, "application/json"),
        (false, _) => (call, "application/json"),
    };
    HttpResponse::Ok()
        .content_type(content_type)
        .body(body.clone())
}

/// The plain forwarder (`--forwarder UPSTREAM CALLBACK`): what a server of the endpoint's shape
/// costs with no work of its own. A request asking for a stream is passed to the upstream and its
/// answer passed back chunk by chunk; any other request is the tool round: its bytes to the
/// upstream, the callback's request, the answered request (both prepared once), the upstream's
/// last answer passed back. Nothing is parsed.
struct Forwarder {
    upstream: String,
    callback_url: String,
    callback_body: Bytes,
    /// The round's second request to the upstream, by wire format.
    answered: [Bytes; 2],
}

fn forwarder_main(upstream: String, callback: String) {
    let arguments = "{\"city\":\"Tokyo\",\"unit\":\"c\"}";
    let callback_body = json!({"name": TOOL, "arguments": serde_json::from_str::<Value>(arguments)
        .expect("arguments"), "call_id": "call_bench", "raw_arguments": arguments});
    // The callback's answer as nginx's callback gives it (`benches/http/nginx-callback.conf`).
    let output = json!({"output": {"temperature_c": 28}, "is_error": false});
    let canned = canned();
    let answered = [Format::Chat, Format::Responses].map(|format| {
        let first: Value = serde_json::from_slice(match format {
            Format::Chat => &canned.call,
            Format::Responses => &canned.response_call,
        })
        .expect("a canned call");
        let (call_id, _) = format.call(&first);
        Bytes::from(format.answered(&first, call_id, &output).to_string())
    });
    let forwarder = web::Data::new(Forwarder {
        upstream,
        callback_url: format!("{callback}/tools/{TOOL}"),
        callback_body: Bytes::from(callback_body.to_string()),
        answered,
    });
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    actix_web::rt::System::new().block_on(async move {
        let server = HttpServer::new(move || {
            App::new()
                .app_data(forwarder.clone())
                .app_data(web::Data::new(client()))
                .app_data(web::PayloadConfig::new(1 << 20))
                .route("/v1/chat/completions", web::post().to(forward_chat))
                .route("/v1/responses", web::post().to(forward_responses))
        })
        .workers(workers)
        .disable_signals()
        .bind("127.0.0.1:0")
        .expect("a loopback port");
        println!("listening on http://{}", server.addrs()[0]);
        server.run().await.expect("the forwarder runs");
    });
}

async fn forward_chat(
    body: Bytes,
    forwarder: web::Data<Forwarder>,
    client: web::Data<awc::Client>,
) -> HttpResponse {
    forward(body, forwarder, client, Format::Chat).await
}

async fn forward_responses(
    body: Bytes,
    forwarder: web::Data<Forwarder>,
    client: web::Data<awc::Client>,
) -> HttpResponse {
    forward(body, forwarder, client, Format::Responses).await
}

async fn forward(
    body: Bytes,
    forwarder: web::Data<Forwarder>,
    client: web::Data<awc::Client>,
    format: Format,
) -> HttpResponse {
    let url = format!("{}/{}", forwarder.upstream, format.path());
    let exchange = |url: &str, body: Bytes| {
        client
            .post(url)
            .insert_header(("content-type", "application/json"))
            .send_body(body)
    };
    let failed = |e: &dyn std::fmt::Display| HttpResponse::BadGateway().body(e.to_string());
    let streamed = asks_for_stream(&body);
    let first = match exchange(&url, body).await {
        Ok(response) => response,
        Err(e) => return failed(&e),
    };
    if streamed {
        return HttpResponse::Ok()
            .content_type("text/event-stream")
            .streaming(first);
    }
    let mut first = first;
    if let Err(e) = first.body().limit(1 << 20).await {
        return failed(&e);
    }
    let mut output = match exchange(&forwarder.callback_url, forwarder.callback_body.clone()).await
    {
        Ok(response) => response,
        Err(e) => return failed(&e),
    };
    if let Err(e) = output.body().limit(1 << 20).await {
        return failed(&e);
    }
    let answered = forwarder.answered[format as usize].clone();
    let mut last = match exchange(&url, answered).await {
        Ok(response) => response,
        Err(e) => return failed(&e),
    };
    match last.body().limit(1 << 20).await {
        Ok(bytes) => HttpResponse::Ok()
            .content_type("application/json")
            .body(bytes),
        Err(e) => failed(&e),
    }
}

/// Whether a request's bytes ask for a stream (read as the fake upstream reads them).
fn asks_for_stream(body: &[u8]) -> bool {
    const MARK: &[u8] = b"\"stream\":true";
    body.windows(MARK.len()).any(|w| w == MARK)
}

fn client() -> awc::Client {
    awc::Client::builder()
        .max_http_version(awc::http::Version::HTTP_11)
        .timeout(REQUEST_DEADLINE)
        .finish()
}

/// The wire format a scenario speaks.
#[derive(Clone, Copy)]
enum Format {
    Chat,
    Responses,
}

impl Format {
    /// The path of a request, under a base URL (`.../v1`).
    fn path(self) -> &'static str {
        match self {
            Format::Chat => "chat/completions",
            Format::Responses => "responses",
        }
    }

    /// The scenarios' names start with this.
    fn label(self) -> &'static str {
        match self {
            Format::Chat => "chat",
            Format::Responses => "responses",
        }
    }

    fn question(self, words: bool) -> Value {
        let content = if words {
            WORDS_PLEASE
        } else {
            "What is the weather in Tokyo?"
        };
        match self {
            Format::Chat => json!({"model": "bench-model",
                                   "messages": [{"role": "user", "content": content}]}),
            Format::Responses => json!({"model": "bench-model", "input": content}),
        }
    }

    /// The answer's words.
    fn words(self, answer: &Value) -> Option<&str> {
        match self {
            Format::Chat => answer["choices"][0]["message"]["content"].as_str(),
            Format::Responses => answer["output"][0]["content"][0]["text"].as_str(),
        }
    }

    /// The first call of an answer: `(call id, argument text)`.
    fn call(self, answer: &Value) -> (Value, &str) {
        match self {
            Format::Chat => {
                let call = &answer["choices"][0]["message"]["tool_calls"][0];
                let arguments = call["function"]["arguments"].as_str().unwrap_or_default();
                (call["id"].clone(), arguments)
            }
            Format::Responses => {
                let call = &answer["output"][0];
                let arguments = call["arguments"].as_str().unwrap_or_default();
                (call["call_id"].clone(), arguments)
            }
        }
    }

    /// The request that answers the call with the callback's output.
    fn answered(self, first: &Value, call_id: Value, output: &Value) -> Value {
        let mut next = self.question(false);
        match self {
            Format::Chat => {
                let messages = next["messages"].as_array_mut().expect("messages");
                messages.push(first["choices"][0]["message"].clone());
                messages.push(
                    json!({"role": "tool", "tool_call_id": call_id, "name": TOOL,
                                     "content": output["output"].to_string()}),
                );
            }
            Format::Responses => {
                next["previous_response_id"] = first["id"].clone();
                next["input"] = json!([{"type": "function_call_output", "call_id": call_id,
                                        "output": output["output"].to_string()}]);
            }
        }
        next
    }

    /// What the first text of a stream looks like, and its end.
    fn stream_marks(self) -> (&'static str, &'static str) {
        match self {
            Format::Chat => ("\"content\":\"It", "[DONE]"),
            Format::Responses => ("\"delta\":\"It", "response.completed"),
        }
    }
}

async fn post(client: &awc::Client, url: &str, body: &Value) -> Result<Value, String> {
    let mut response = client
        .post(url)
        .send_json(body)
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    let bytes = response
        .body()
        .limit(1 << 20)
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    if !response.status().is_success() {
        return Err(format!(
            "{url}: {} {}",
            response.status(),
            String::from_utf8_lossy(&bytes)
        ));
    }
    serde_json::from_slice(&bytes).map_err(|e| format!("{url}: {e}"))
}

fn check_words(format: Format, answer: &Value) -> Result<(), String> {
    match format.words(answer) {
        Some(WORDS) => Ok(()),
        other => Err(format!("the answer said {other:?}")),
    }
}

/// One request of the floor: the app's own tool loop.
async fn floor_request(
    client: &awc::Client,
    format: Format,
    upstream: &str,
    callback: &str,
) -> Result<(), String> {
    let url = format!("{upstream}/{}", format.path());
    let first = post(client, &url, &format.question(false)).await?;
    let (call_id, arguments) = format.call(&first);
    let body = json!({"name": TOOL, "arguments": serde_json::from_str::<Value>(arguments)
        .unwrap_or_default(), "call_id": call_id, "raw_arguments": arguments});
    let output = post(client, &format!("{callback}/tools/{TOOL}"), &body).await?;
    let next = format.answered(&first, call_id, &output);
    check_words(format, &post(client, &url, &next).await?)
}

/// One request through the server.
async fn server_request(client: &awc::Client, format: Format, server: &str) -> Result<(), String> {
    let url = format!("{server}/v1/{}", format.path());
    check_words(format, &post(client, &url, &format.question(false)).await?)
}

/// Microseconds to the first event with text of a streamed request answered in words; the
/// stream is read to its end.
async fn first_token(client: &awc::Client, format: Format, base: &str) -> Result<f64, String> {
    let mut body = format.question(true);
    body["stream"] = json!(true);
    let (text_mark, end_mark) = format.stream_marks();
    let started = Instant::now();
    let url = format!("{base}/{}", format.path());
    let mut response = client
        .post(&url)
        .send_json(&body)
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    let mut seen = String::new();
    let mut first = None;
    while let Some(chunk) = response.next().await {
        let chunk = chunk.map_err(|e| format!("{url}: {e}"))?;
        seen.push_str(&String::from_utf8_lossy(&chunk));
        if first.is_none() && seen.contains(text_mark) {
            first = Some(started.elapsed());
        }
    }
    if !seen.contains(end_mark) {
        return Err(format!("{url}: the stream did not end with {end_mark}"));
    }
    first
        .map(|d| d.as_secs_f64() * 1e6)
        .ok_or_else(|| format!("{url}: no text in the stream"))
}

/// The figures of one scenario's run.
#[derive(Default)]
struct Tally {
    /// Microseconds of each request in the measured window.
    samples: Vec<f64>,
    faults: Vec<String>,
}

/// `conns` clients in a closed loop of `request` for the warm-up and the window; the window's
/// samples and the server's CPU seconds over it.
async fn closed_loop<F, Fut>(
    o: &Options,
    conns: usize,
    server: &Server,
    request: F,
) -> (Tally, f64, f64)
where
    F: Fn(Rc<awc::Client>) -> Fut + Clone + 'static,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let tally = Rc::new(RefCell::new(Tally::default()));
    let window = Rc::new(RefCell::new(None::<(Instant, Instant)>));
    let stop = Rc::new(std::cell::Cell::new(false));
    let clients: Vec<_> = (0..conns)
        .map(|_| {
            let (tally, window, stop, request) =
                (tally.clone(), window.clone(), stop.clone(), request.clone());
            actix_web::rt::spawn(async move {
                let client = Rc::new(client());
                while !stop.get() {
                    let started = Instant::now();
                    let outcome = request(client.clone()).await;
                    let took = started.elapsed().as_secs_f64() * 1e6;
                    let in_window = window
                        .borrow()
                        .is_some_and(|(from, to)| started >= from && started < to);
                    let mut tally = tally.borrow_mut();
                    match outcome {
                        Ok(()) if in_window => tally.samples.push(took),
                        Ok(()) => {}
                        Err(e) => tally.faults.push(e),
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs_f64(o.warmup_seconds)).await;
    let (cpu0, from) = (server.cpu_seconds(), Instant::now());
    let to = from + Duration::from_secs_f64(o.seconds);
    *window.borrow_mut() = Some((from, to));
    tokio::time::sleep(Duration::from_secs_f64(o.seconds)).await;
    let cpu1 = server.cpu_seconds();
    stop.set(true);
    for client in clients {
        let _ = client.await;
    }
    let tally = Rc::try_unwrap(tally)
        .ok()
        .expect("every client is done")
        .into_inner();
    (tally, cpu1 - cpu0, o.seconds)
}

fn report(label: &str, run: usize, tally: &mut Tally, cpu: f64, seconds: f64, rounds: usize) {
    tally.samples.sort_by(f64::total_cmp);
    let n = tally.samples.len();
    let per_request = cpu * 1e6 / n.max(1) as f64;
    println!(
        "{label} run{run} requests={n} rps={:.0} p50_ms={:.3} p99_ms={:.3} cpu_us_per_req={:.1} \
         cpu_us_per_round={:.1} faults={}",
        n as f64 / seconds,
        percentile(&tally.samples, 0.5) / 1e3,
        percentile(&tally.samples, 0.99) / 1e3,
        per_request,
        per_request / rounds as f64,
        tally.faults.len(),
    );
    for fault in tally.faults.iter().take(5) {
        println!("# fault: {fault}");
    }
}

/// A server under measure: its process, its base URL and the name of its scenarios (`server` for
/// this build, `main` for `MAIN_BIN`'s).
struct Measured {
    server: Server,
    base: String,
    tag: &'static str,
}

fn start_server(
    upstream: &str,
    work: &std::path::Path,
    conns: usize,
    program: Option<&std::ffi::OsStr>,
    tag: &str,
) -> Server {
    // Every connection's request runs at once (the default limit, 8, would answer the rest
    // with 429: faults, not a measure).
    let config = format!(
        "bind = \"127.0.0.1:0\"\n[[character]]\nname = \"Mio\"\n[character.chat]\nurl = \"{upstream}\"\nmax_concurrent_requests = {conns}\n"
    );
    let path = work.join("chat.toml");
    std::fs::write(&path, config).expect("config written");
    let log = std::fs::File::create(work.join(format!("{tag}.log"))).expect("log file");
    match program {
        Some(program) => Server::start_program(program, &path, log.into(), None),
        None => Server::start(&path, log.into(), None),
    }
}

async fn register(server: &str, callback: &str) {
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
    let answer = post(&client(), &format!("{server}/api/tools/register"), &body)
        .await
        .expect("the tool registers");
    assert_eq!(answer["ok"], true, "{answer}");
}

/// One request of a one-connection scenario: its microseconds (the whole request, or up to the
/// first text).
type Probe = Box<dyn Fn(Rc<awc::Client>) -> LocalBoxFuture<'static, Result<f64, String>>>;

/// A one-connection scenario measured in slices: its label, the process whose CPU it costs
/// (none for the floor, which is the harness itself), its rounds per request and its request.
struct Sliced<'a> {
    label: String,
    server: Option<&'a Server>,
    rounds: usize,
    probe: Probe,
}

/// Requests each scenario runs at the start of each of its slices, not counted: its code warmed
/// up again after the others ran.
const SLICE_WARMUP_REQUESTS: usize = 20;

/// One connection's scenarios, measured against each other in the same seconds: the window is
/// cut into `o.slices` slices, and in each slice every scenario runs in turn (the order turning
/// by one each slice), one request at a time. A change in the machine's speed during the run
/// falls on every scenario alike, so their differences hold still where each scenario's own
/// figure moves; each slice still runs hundreds of requests of one scenario back to back, as a
/// closed loop does.
async fn sliced(o: &Options, scenarios: &[Sliced<'_>], run: usize) {
    let client = Rc::new(client());
    for scenario in scenarios {
        let warm = Instant::now();
        while warm.elapsed().as_secs_f64() < o.warmup_seconds {
            let _ = (scenario.probe)(client.clone()).await;
        }
    }
    let slice = o.seconds / o.slices as f64;
    let mut tallies: Vec<(Tally, f64)> = scenarios.iter().map(|_| Default::default()).collect();
    for turn in 0..o.slices {
        for k in 0..scenarios.len() {
            let at = (turn + k) % scenarios.len();
            let scenario = &scenarios[at];
            let (tally, cpu) = &mut tallies[at];
            for _ in 0..SLICE_WARMUP_REQUESTS {
                let _ = (scenario.probe)(client.clone()).await;
            }
            let cpu0 = scenario.server.map_or(0.0, Server::cpu_seconds);
            let from = Instant::now();
            while from.elapsed().as_secs_f64() < slice {
                match (scenario.probe)(client.clone()).await {
                    Ok(us) => tally.samples.push(us),
                    Err(e) => tally.faults.push(e),
                }
            }
            *cpu += scenario.server.map_or(0.0, Server::cpu_seconds) - cpu0;
        }
    }
    for (scenario, (tally, cpu)) in scenarios.iter().zip(&mut tallies) {
        report(
            &scenario.label,
            run,
            tally,
            *cpu,
            o.seconds,
            scenario.rounds,
        );
    }
}

/// Times a whole request.
async fn timed(
    request: impl std::future::Future<Output = Result<(), String>>,
) -> Result<f64, String> {
    let started = Instant::now();
    request.await?;
    Ok(started.elapsed().as_secs_f64() * 1e6)
}

/// One run of a wire format's scenarios: at `conns` connections, alternated (the floor, then
/// each server, `MAIN_BIN`'s first); at one connection, the one-round requests and then the
/// first token, each [`sliced`] against its floor.
async fn measure_format(
    o: &Options,
    servers: &[Measured],
    format: Format,
    run: usize,
    upstream: &str,
) {
    let label = format.label();
    if o.only.as_deref() != Some("ttft") && o.conns != 1 {
        let (upstream_, callback) = (upstream.to_owned(), o.callback.clone());
        let (mut tally, cpu, seconds) = closed_loop(o, o.conns, &servers[0].server, move |c| {
            let (u, cb) = (upstream_.clone(), callback.clone());
            async move { floor_request(&c, format, &u, &cb).await }
        })
        .await;
        report(&format!("{label}-floor"), run, &mut tally, cpu, seconds, 2);
        for measured in servers {
            let base_ = measured.base.clone();
            let (mut tally, cpu, seconds) = closed_loop(o, o.conns, &measured.server, move |c| {
                let b = base_.clone();
                async move { server_request(&c, format, &b).await }
            })
            .await;
            report(
                &format!("{label}-{}", measured.tag),
                run,
                &mut tally,
                cpu,
                seconds,
                2,
            );
        }
    }
    if o.only.as_deref() != Some("ttft") {
        let (u, cb) = (upstream.to_owned(), o.callback.clone());
        let mut scenarios = vec![Sliced {
            label: format!("{label}-floor-conn1"),
            server: None,
            rounds: 2,
            probe: Box::new(move |c| {
                let (u, cb) = (u.clone(), cb.clone());
                Box::pin(async move { timed(floor_request(&c, format, &u, &cb)).await })
            }),
        }];
        for measured in servers {
            let base = measured.base.clone();
            scenarios.push(Sliced {
                label: format!("{label}-{}-conn1", measured.tag),
                server: Some(&measured.server),
                rounds: 2,
                probe: Box::new(move |c| {
                    let b = base.clone();
                    Box::pin(async move { timed(server_request(&c, format, &b)).await })
                }),
            });
        }
        sliced(o, &scenarios, run).await;
    }
    if o.only.as_deref() == Some("round") {
        return;
    }
    let prefix = match format {
        Format::Chat => "",
        Format::Responses => "responses-",
    };
    let mut targets = vec![("direct", upstream.to_owned(), None)];
    for measured in servers {
        let at = format!("{}/v1", measured.base);
        targets.push((measured.tag, at, Some(&measured.server)));
    }
    let scenarios: Vec<Sliced> = targets
        .into_iter()
        .map(|(tag, at, server)| Sliced {
            label: format!("{prefix}ttft-{tag}"),
            server,
            rounds: 1,
            probe: Box::new(move |c| {
                let at = at.clone();
                Box::pin(async move { first_token(&c, format, &at).await })
            }),
        })
        .collect();
    sliced(o, &scenarios, run).await;
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "--forwarder") {
        let upstream = args
            .get(at + 1)
            .expect("--forwarder UPSTREAM CALLBACK")
            .clone();
        let callback = args
            .get(at + 2)
            .expect("--forwarder UPSTREAM CALLBACK")
            .clone();
        return forwarder_main(upstream, callback);
    }
    let o = options();
    let work = std::env::temp_dir().join(format!("chat-bench-{}", std::process::id()));
    std::fs::create_dir_all(&work).expect("a work directory");
    actix_web::rt::System::new().block_on(async {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let upstream = format!("http://{}/v1", listener.local_addr().unwrap());
        let answers = web::Data::new(canned());
        let fake = HttpServer::new(move || {
            App::new()
                .app_data(answers.clone())
                .app_data(web::PayloadConfig::new(1 << 20))
                .route("/v1/chat/completions", web::post().to(fake_upstream))
                .route("/v1/responses", web::post().to(fake_responses))
        })
        .workers(1)
        .disable_signals()
        .listen(listener)
        .unwrap()
        .run();
        let fake_handle = fake.handle();
        actix_web::rt::spawn(fake);

        let mut servers = Vec::new();
        if let Some(main_bin) = &o.main_bin {
            let server = start_server(&upstream, &work, o.conns, Some(main_bin), "main");
            println!("# main: {}", main_bin.to_string_lossy());
            servers.push((server, "main"));
        }
        servers.push((
            start_server(&upstream, &work, o.conns, None, "server"),
            "server",
        ));
        // The floor of the stack: the plain forwarder, measured like a server.
        let forwarder = Server::spawn(
            std::process::Command::new(std::env::current_exe().expect("this harness"))
                .args(["--forwarder", &upstream, &o.callback])
                .stderr(std::process::Stdio::inherit()),
        );
        let mut measured = vec![Measured {
            base: format!("http://{}", forwarder.address),
            server: forwarder,
            tag: "forwarder",
        }];
        for (server, tag) in servers {
            let base = format!("http://{}", server.address);
            register(&base, &o.callback).await;
            measured.push(Measured { server, base, tag });
        }
        for run in 1..=o.runs {
            for format in [Format::Chat, Format::Responses] {
                measure_format(&o, &measured, format, run, &upstream).await;
            }
        }
        drop(measured);
        fake_handle.stop(false).await;
    });
    let _ = std::fs::remove_dir_all(&work);
}
