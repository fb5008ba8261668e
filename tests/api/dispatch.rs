//! The callback contract, end to end: what a plugin's callback receives and how each of its
//! answers (or failures) becomes the tool result, through `POST /api/tools/invoke`.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::callback_server::{
    CallbackServer, ClosedPort, Reply, error_text, invoke, invoke_ok, register, tool_with_timeout,
};
use crate::child::LineChild;
use crate::helpers::{TestApp, settings, spawn_app, spawn_app_with, tool_body};
use crate::python::{repo_file, venv_python};

/// Registers `weather` (every role) against `server`'s `/cb`, with this timeout.
async fn weather_on(app: &TestApp, server: &CallbackServer, timeout_seconds: f64) {
    register(
        app,
        tool_with_timeout(
            "weather",
            &server.url("/cb"),
            "plugin:weather",
            timeout_seconds,
        ),
    )
    .await;
}

/// The result of one call of a `weather` tool whose callback gives `reply`.
async fn result_of(reply: Reply) -> Value {
    let app = spawn_app(&["Lanlan"]).await;
    let server = CallbackServer::with("/cb", reply);
    weather_on(&app, &server, 30.0).await;
    invoke_ok(&app, "weather", json!({"city": "Shanghai"})).await
}

#[actix_web::test]
async fn the_callback_receives_exactly_name_arguments_call_id_and_raw_arguments() {
    let app = spawn_app(&["Lanlan"]).await;
    let server = CallbackServer::with("/tools/get_weather", Reply::output(json!("sunny")));
    register(
        &app,
        tool_body(
            "get_weather",
            &server.url("/tools/get_weather"),
            "plugin:weather",
        ),
    )
    .await;

    let arguments = json!({"location": "Shanghai", "days": [1, 2], "units": {"t": "C"}});
    let (status, _) = invoke(
        &app,
        json!({"name": "get_weather", "arguments": arguments, "call_id": "call_123"}),
    )
    .await;
    assert_eq!(status, 200);

    let received = server.wait_for_requests(1).await;
    assert_eq!(received.len(), 1);
    let request = &received[0];
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/tools/get_weather");
    assert_eq!(request.header("content-type"), Some("application/json"));
    let body = request.json();
    assert_eq!(
        body,
        json!({
            "name": "get_weather",
            "arguments": {"location": "Shanghai", "days": [1, 2], "units": {"t": "C"}},
            "call_id": "call_123",
            "raw_arguments": r#"{"location":"Shanghai","days":[1,2],"units":{"t":"C"}}"#,
        })
    );
    // The fields come in the contract's order, and raw_arguments is the JSON text of arguments.
    let keys: Vec<&str> = body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, ["name", "arguments", "call_id", "raw_arguments"]);
    let raw: Value = serde_json::from_str(body["raw_arguments"].as_str().unwrap()).unwrap();
    assert_eq!(raw, arguments);
}

#[actix_web::test]
async fn empty_arguments_are_sent_as_an_empty_object() {
    let app = spawn_app(&["Lanlan"]).await;
    let server = CallbackServer::with("/cb", Reply::output(json!(1)));
    weather_on(&app, &server, 30.0).await;
    let (status, _) = invoke(&app, json!({"name": "weather", "call_id": "c1"})).await;
    assert_eq!(status, 200);
    let body = server.wait_for_requests(1).await[0].json();
    assert_eq!(
        body,
        json!({"name": "weather", "arguments": {}, "call_id": "c1", "raw_arguments": "{}"})
    );
}

#[actix_web::test]
async fn a_successful_answer_gives_its_output() {
    let result = result_of(Reply::json(
        json!({"output": {"temperature_c": 28}, "is_error": false}),
    ))
    .await;
    assert_eq!(result["output"], json!({"temperature_c": 28}));
    assert_eq!(result["is_error"], json!(false));
    assert!(result.get("error").is_none(), "{result}");
}

#[actix_web::test]
async fn output_may_be_any_json_value() {
    for output in [json!(null), json!("text"), json!(3.5), json!([1, {"a": 2}])] {
        let result = result_of(Reply::output(output.clone())).await;
        assert_eq!(result["output"], output);
        assert_eq!(result["is_error"], json!(false));
    }
}

#[actix_web::test]
async fn is_error_true_gives_the_error_text() {
    let result = result_of(Reply::json(
        json!({"error": "location not found", "is_error": true}),
    ))
    .await;
    assert_eq!(error_text(&result), "location not found");
    assert_eq!(result["output"], Value::Null);
}

#[actix_web::test]
async fn an_http_error_quotes_the_status_and_the_first_200_characters_of_the_body() {
    // 300 characters, multi-byte ones included: the quote counts characters, not bytes.
    let body = format!("{}{}", "é".repeat(150), "x".repeat(150));
    let result = result_of(Reply::text(500, "text/plain", &body)).await;
    assert_eq!(
        error_text(&result),
        format!(
            "remote tool callback returned HTTP 500: {}{}",
            "é".repeat(150),
            "x".repeat(50)
        )
    );

    let result = result_of(Reply::status_json(404, json!({"detail": "Not Found"}))).await;
    assert_eq!(
        error_text(&result),
        r#"remote tool callback returned HTTP 404: {"detail":"Not Found"}"#
    );

    // An HTTP error is an error even when its body looks like a success.
    let result = result_of(Reply::status_json(503, json!({"output": 1}))).await;
    assert_eq!(
        error_text(&result),
        r#"remote tool callback returned HTTP 503: {"output":1}"#
    );
}

#[actix_web::test]
async fn a_business_dict_without_output_or_is_error_is_the_output_as_a_whole() {
    let result = result_of(Reply::json(json!({"error": "x"}))).await;
    assert_eq!(result["is_error"], json!(false));
    assert_eq!(result["output"], json!({"error": "x"}));
    assert!(result.get("error").is_none(), "{result}");
}

#[actix_web::test]
async fn a_json_array_is_the_output() {
    let result = result_of(Reply::json(json!([1, "two", {"three": 3}]))).await;
    assert_eq!(result["is_error"], json!(false));
    assert_eq!(result["output"], json!([1, "two", {"three": 3}]));
}

#[actix_web::test]
async fn a_body_that_is_not_json_is_the_output_as_text() {
    let result = result_of(Reply::text(200, "text/plain", "28 degrees, sunny")).await;
    assert_eq!(result["is_error"], json!(false));
    assert_eq!(result["output"], json!("28 degrees, sunny"));

    // Whatever the content type claims.
    let result = result_of(Reply::text(200, "application/json", "{not json")).await;
    assert_eq!(result["output"], json!("{not json"));
}

#[actix_web::test]
async fn a_slow_callback_times_out_at_its_timeout() {
    let app = spawn_app(&["Lanlan"]).await;
    let server = CallbackServer::with(
        "/cb",
        Reply::after(Duration::from_secs(30), Reply::output(json!("late"))),
    );
    weather_on(&app, &server, 1.5).await;

    let started = Instant::now();
    let result = invoke_ok(&app, "weather", json!({})).await;
    let elapsed = started.elapsed();

    let text = error_text(&result);
    assert!(text.contains("timed out"), "{text}");
    assert!(text.contains("1.5 s"), "{text}");
    assert!(
        elapsed >= Duration::from_millis(1500),
        "answered before the timeout: {elapsed:?}"
    );
    // Generous, as every timing bound here: a loaded 2-core machine may be seconds late; a
    // timeout that did not fire would take the callback's 30 s.
    assert!(
        elapsed < Duration::from_millis(1500) + Duration::from_secs(5),
        "the timeout took too long: {elapsed:?}"
    );
    assert_eq!(server.received().len(), 1);
}

#[actix_web::test]
async fn a_callback_that_never_answers_times_out() {
    let app = spawn_app(&["Lanlan"]).await;
    let server = CallbackServer::with("/cb", Reply::Hang);
    weather_on(&app, &server, 0.5).await;
    let result = invoke_ok(&app, "weather", json!({})).await;
    let text = error_text(&result);
    assert!(text.contains("timed out"), "{text}");
}

#[actix_web::test]
async fn the_timeout_also_bounds_a_body_that_stops_arriving() {
    let app = spawn_app(&["Lanlan"]).await;
    let server = CallbackServer::with("/cb", Reply::Stall);
    weather_on(&app, &server, 0.5).await;
    let result = invoke_ok(&app, "weather", json!({})).await;
    let text = error_text(&result);
    assert!(text.contains("timed out"), "{text}");
}

#[actix_web::test]
async fn an_answer_that_is_not_http_is_an_error() {
    let result = result_of(Reply::Raw(b"hello there\r\n\r\n".to_vec())).await;
    let text = error_text(&result);
    assert!(text.starts_with("remote tool callback failed"), "{text}");
}

#[actix_web::test]
async fn a_callback_that_switches_protocols_is_an_error() {
    let app = spawn_app(&["Lanlan"]).await;
    let server = CallbackServer::with(
        "/cb",
        Reply::Raw(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
                .to_vec(),
        ),
    );
    weather_on(&app, &server, 30.0).await;
    let result = invoke_ok(&app, "weather", json!({"city": "Shanghai"})).await;
    assert_eq!(
        error_text(&result),
        "remote tool callback answered 101 Switching Protocols: a tool callback must answer \
         with a final HTTP status, not switch protocols"
    );
    // The switched connection is not kept: the next call is answered on a new one.
    server.route("/cb", Reply::output(json!("sunny")));
    let result = invoke_ok(&app, "weather", json!({"city": "Shanghai"})).await;
    assert_eq!(result["output"], json!("sunny"), "{result}");
}

#[actix_web::test]
async fn a_tls_handshake_that_stalls_fails_as_a_connection_within_its_own_bound() {
    // Accepts every connection and never answers the ClientHello.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    actix_web::rt::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let app = spawn_app(&["Lanlan"]).await;
    let url = format!("https://127.0.0.1:{port}/cb");
    // A tool timeout well past the bound: the call must not wait for it.
    register(
        &app,
        tool_with_timeout("weather", &url, "plugin:tls", 120.0),
    )
    .await;
    let result = invoke_ok(&app, "weather", json!({"city": "Shanghai"})).await;
    assert_eq!(
        error_text(&result),
        format!(
            "could not connect to remote tool callback https://127.0.0.1:{port}: the connection \
             and its TLS handshake did not finish within 10 s"
        )
    );
}

#[actix_web::test]
async fn a_localhost_callback_is_reached() {
    let app = spawn_app(&["Lanlan"]).await;
    let server = CallbackServer::with("/cb", Reply::output(json!("via localhost")));
    register(
        &app,
        tool_body(
            "weather",
            &format!("http://LocalHost:{}/cb", server.port()),
            "plugin:weather",
        ),
    )
    .await;
    let result = invoke_ok(&app, "weather", json!({})).await;
    assert_eq!(result["output"], json!("via localhost"));
}

#[actix_web::test]
async fn the_callback_gets_its_urls_host_and_query_as_written() {
    let app = spawn_app(&["Lanlan"]).await;
    let target = "/cb/v1?key=a%20b&x=1";
    let server = CallbackServer::with(target, Reply::output(json!("ok")));
    register(
        &app,
        tool_body(
            "weather",
            &format!("http://LocalHost:{}{target}", server.port()),
            "plugin:weather",
        ),
    )
    .await;
    let result = invoke_ok(&app, "weather", json!({})).await;
    assert_eq!(result["output"], json!("ok"), "{result}");
    let received = server.wait_for_requests(1).await;
    assert_eq!(received[0].path, target);
    let host = format!("localhost:{}", server.port());
    assert_eq!(received[0].header("host"), Some(host.as_str()));
    assert_eq!(received[0].header("x-runtime-tools-hop"), Some("1"));
}

#[actix_web::test]
async fn a_refused_port_is_a_connection_error() {
    let app = spawn_app(&["Lanlan"]).await;
    let closed = ClosedPort::new();
    register(
        &app,
        tool_body("weather", &closed.url("/cb"), "plugin:weather"),
    )
    .await;
    let result = invoke_ok(&app, "weather", json!({})).await;
    let text = error_text(&result);
    assert!(text.contains("connect"), "{text}");
    assert!(
        text.contains(&format!("127.0.0.1:{}", closed.port())),
        "{text}"
    );
}

#[actix_web::test]
async fn a_redirect_is_not_followed() {
    let app = spawn_app(&["Lanlan"]).await;
    let target = CallbackServer::with("/elsewhere", Reply::output(json!("bounced")));
    for status in [301, 302, 307, 308] {
        let server =
            CallbackServer::with("/cb", Reply::redirect(status, &target.url("/elsewhere")));
        weather_on(&app, &server, 30.0).await;
        let result = invoke_ok(&app, "weather", json!({"secret": "user data"})).await;
        let text = error_text(&result);
        assert!(text.contains("redirect"), "{text}");
        assert!(text.contains(&format!("HTTP {status}")), "{text}");
        assert_eq!(server.received().len(), 1);
    }
    // Following would have happened inside the calls, which have all returned.
    assert_eq!(target.received().len(), 0);
    assert_eq!(target.connections(), 0);
}

/// An app whose callback answers may be at most `limit` bytes.
async fn app_with_limit(limit: usize) -> TestApp {
    let mut settings = settings(&["Lanlan"]);
    settings.dispatch.max_response_bytes = limit;
    spawn_app_with(settings).await
}

async fn limited_result(limit: usize, reply: Reply) -> Value {
    let app = app_with_limit(limit).await;
    let server = CallbackServer::with("/cb", reply);
    weather_on(&app, &server, 30.0).await;
    invoke_ok(&app, "weather", json!({})).await
}

fn assert_names_the_limit(result: &Value, limit: usize) {
    let text = error_text(result);
    assert!(text.contains(&format!("{limit}-byte limit")), "{text}");
    assert!(text.contains("max_response_bytes"), "{text}");
}

#[actix_web::test]
async fn a_body_over_the_limit_with_a_content_length_is_an_error_naming_the_limit() {
    let body = "a".repeat(2048);
    let result = limited_result(1024, Reply::text(200, "text/plain", &body)).await;
    assert_names_the_limit(&result, 1024);
}

#[actix_web::test]
async fn a_chunked_body_over_the_limit_is_an_error_naming_the_limit() {
    let result = limited_result(1024, Reply::Chunked { total: Some(4096) }).await;
    assert_names_the_limit(&result, 1024);
}

#[actix_web::test]
async fn an_endless_body_is_cut_at_the_limit() {
    let result = limited_result(1024, Reply::Chunked { total: None }).await;
    assert_names_the_limit(&result, 1024);
}

#[actix_web::test]
async fn a_body_of_exactly_the_limit_is_accepted() {
    let text = "b".repeat(1022);
    let body = format!("\"{text}\"");
    assert_eq!(body.len(), 1024);
    let result = limited_result(1024, Reply::text(200, "application/json", &body)).await;
    assert_eq!(result["output"], json!(text));
    let result = limited_result(1024, Reply::Chunked { total: Some(1024) }).await;
    assert_eq!(result["output"], json!("a".repeat(1024)));
}

#[actix_web::test]
async fn the_limit_counts_the_body_after_decompression() {
    let plain = "a".repeat(64 * 1024);
    let compressed = gzip_run(b'a', plain.len());
    assert!(compressed.len() < 1024, "{} bytes", compressed.len());
    let reply = |body: Vec<u8>| Reply::Respond {
        status: 200,
        headers: vec![
            ("content-type".into(), "text/plain".into()),
            ("content-encoding".into(), "gzip".into()),
        ],
        body,
    };
    // Under the limit once decompressed: the plain text is the output.
    let result = limited_result(128 * 1024, reply(compressed.clone())).await;
    assert_eq!(result["output"], json!(plain));
    // Small on the wire, over the limit decompressed.
    let result = limited_result(1024, reply(compressed)).await;
    assert_names_the_limit(&result, 1024);
}

#[actix_web::test]
async fn a_callback_that_closes_the_connection_without_answering_is_an_error() {
    let app = spawn_app(&["Lanlan"]).await;
    let server = CallbackServer::with("/cb", Reply::Close);
    weather_on(&app, &server, 30.0).await;
    let result = invoke_ok(&app, "weather", json!({"city": "Shanghai"})).await;
    // The plugin still accepts connections (the probe succeeds): an error naming its origin.
    assert_eq!(
        error_text(&result),
        format!(
            "remote tool callback http://127.0.0.1:{} closed the connection without answering",
            server.port()
        )
    );
}

#[actix_web::test]
async fn connections_to_a_callback_are_kept_alive_and_reused() {
    // One HTTP worker, so every call uses the same keep-alive pool.
    let mut settings = settings(&["Lanlan"]);
    settings.workers = Some(1);
    let app = spawn_app_with(settings).await;
    let server = CallbackServer::with("/cb", Reply::output(json!("ok")));
    weather_on(&app, &server, 30.0).await;
    for _ in 0..5 {
        let result = invoke_ok(&app, "weather", json!({})).await;
        assert_eq!(result["output"], json!("ok"));
    }
    assert_eq!(server.received().len(), 5);
    // One connection normally; a machine stalled for longer than the keep-alive between two
    // calls would need a second, so the test only insists that connections were reused.
    assert!(
        server.connections() < 5,
        "{} connections",
        server.connections()
    );
}

#[actix_web::test]
async fn idle_connections_to_a_callback_are_closed_after_the_keep_alive() {
    let mut settings = settings(&["Lanlan"]);
    settings.workers = Some(1);
    let app = spawn_app_with(settings).await;
    let server = CallbackServer::with("/cb", Reply::output(json!("ok")));
    weather_on(&app, &server, 30.0).await;
    let result = invoke_ok(&app, "weather", json!({})).await;
    assert_eq!(result["output"], json!("ok"));
    // Nothing else calls: the connection kept for reuse is closed by the server once it has
    // been idle for the keep-alive period (a plugin's server is never left holding it).
    server.wait_for_hang_ups(1).await;
    assert_eq!((server.connections(), server.hang_ups()), (1, 1));
    // The next call opens a new connection and is answered as usual.
    let result = invoke_ok(&app, "weather", json!({})).await;
    assert_eq!(result["output"], json!("ok"));
    assert_eq!(server.connections(), 2);
}

/// A gzip member holding `len` copies of `byte`, deflated with fixed Huffman codes as one
/// literal followed by back-references of length 258 (and a shorter last one).
fn gzip_run(byte: u8, len: usize) -> Vec<u8> {
    assert!(len >= 4);
    let mut bits = BitWriter::default();
    bits.put(1, 1); // BFINAL
    bits.put(0b01, 2); // BTYPE: fixed Huffman
    put_literal(&mut bits, u16::from(byte));
    let mut left = len - 1;
    while left > 0 {
        // A length of 1 or 2 cannot be a back-reference: end with literals.
        if left < 3 {
            put_literal(&mut bits, u16::from(byte));
            left -= 1;
            continue;
        }
        let run = if left >= 258 + 3 || left == 258 {
            258
        } else if left > 258 {
            left - 3
        } else {
            left
        };
        put_length(&mut bits, run);
        bits.put_code(0, 5); // distance 1
        left -= run;
    }
    bits.put_code(0, 7); // end of block (256)
    let deflated = bits.finish();

    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    out.extend_from_slice(&deflated);
    let data = vec![byte; len];
    out.extend_from_slice(&crc32(&data).to_le_bytes());
    out.extend_from_slice(&(len as u32).to_le_bytes());
    out
}

fn put_literal(bits: &mut BitWriter, literal: u16) {
    match literal {
        0..=143 => bits.put_code(0x30 + u32::from(literal), 8),
        _ => bits.put_code(0x190 + u32::from(literal - 144), 9),
    }
}

/// A match length of 3 to 258, with the fixed-Huffman length code and its extra bits.
fn put_length(bits: &mut BitWriter, length: usize) {
    const BASE: [usize; 29] = [
        3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115,
        131, 163, 195, 227, 258,
    ];
    const EXTRA: [u32; 29] = [
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0,
    ];
    let i = BASE.iter().rposition(|&b| b <= length).unwrap();
    let code = 257 + i as u32;
    if code <= 279 {
        bits.put_code(code - 256, 7);
    } else {
        bits.put_code(0xc0 + (code - 280), 8);
    }
    bits.put((length - BASE[i]) as u32, EXTRA[i]);
}

/// Deflate's bit order: values least-significant bit first, Huffman codes most-significant first.
#[derive(Default)]
struct BitWriter {
    bytes: Vec<u8>,
    current: u32,
    filled: u32,
}

impl BitWriter {
    fn put(&mut self, value: u32, count: u32) {
        for i in 0..count {
            self.current |= ((value >> i) & 1) << self.filled;
            self.filled += 1;
            if self.filled == 8 {
                self.bytes.push(self.current as u8);
                self.current = 0;
                self.filled = 0;
            }
        }
    }

    fn put_code(&mut self, code: u32, count: u32) {
        for i in (0..count).rev() {
            self.put((code >> i) & 1, 1);
        }
    }

    fn finish(mut self) -> Vec<u8> {
        if self.filled > 0 {
            self.bytes.push(self.current as u8);
        }
        self.bytes
    }
}

fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in data {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[actix_web::test]
async fn an_https_callback_whose_certificate_no_root_vouches_for_is_refused() {
    // A real TLS server (Python's ssl, OpenSSL) with a self-signed certificate for 127.0.0.1.
    let mut plugin = LineChild::spawn(
        Command::new(venv_python().await)
            .arg(repo_file("tests/tls_callback.py"))
            .env("PYTHONUNBUFFERED", "1"),
    );
    let listening = plugin.expect_line("listening ").await;
    let port = listening["listening ".len()..].trim().to_owned();
    let url = format!("https://127.0.0.1:{port}/cb");
    let app = spawn_app(&["Lanlan"]).await;
    register(&app, tool_with_timeout("weather", &url, "plugin:tls", 30.0)).await;

    let result = invoke_ok(&app, "weather", json!({"city": "Shanghai"})).await;
    // The handshake ran and the server's certificate was refused: nothing was sent, and the
    // model is told why.
    assert_eq!(result["is_error"], json!(true), "{result}");
    let error = error_text(&result);
    assert!(
        error.starts_with(&format!(
            "could not connect to remote tool callback https://127.0.0.1:{port}: "
        )) && error.contains("invalid peer certificate: UnknownIssuer"),
        "{error}"
    );
    let seen = plugin.expect_line("handshake failed: ").await;
    assert!(seen.contains("ALERT"), "the client's alert: {seen}");
}
