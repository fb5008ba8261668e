//! Hostile request bodies over real sockets: each gets a clear 4xx with its exact body, never a
//! crash or a hang, and the registry is unchanged afterwards. Slow uploads time out while other
//! clients keep being served.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use runtime_tools::limits::{BODY_READ_TIMEOUT, MAX_BODY_BYTES};
use serde_json::{Value, json};

use crate::helpers::{HTTP_DEADLINE, TestApp, chunked, raw_head, spawn_app, tool_body};

const REGISTER: &str = "/api/tools/register";

/// A server with one tool registered, and its listing to compare against afterwards.
async fn app() -> (TestApp, Value) {
    let app = spawn_app(&["Lanlan", "Mio"]).await;
    let (status, body) = app
        .register(&tool_body(
            "get_weather",
            "http://127.0.0.1:9/cb",
            "plugin:w",
        ))
        .await;
    assert_eq!(status, 200, "{body}");
    let listing = app.listing(None).await;
    (app, listing)
}

async fn assert_unchanged(app: &TestApp, before: &Value) {
    assert_eq!(&app.listing(None).await, before);
}

fn invalid(kind: &str, msg: &str) -> Value {
    json!({"ok": false, "detail": [{"loc": ["body"], "msg": msg, "type": kind}]})
}

fn field_invalid(field: &str, kind: &str, msg: &str) -> Value {
    json!({"ok": false, "detail": [{"loc": ["body", field], "msg": msg, "type": kind}]})
}

fn too_large() -> Value {
    json!({"ok": false, "detail": format!("request body is larger than the {MAX_BODY_BYTES}-byte limit")})
}

async fn post_json_bytes(app: &TestApp, body: Vec<u8>) -> (u16, Value) {
    app.post_raw(REGISTER, Some("application/json"), body).await
}

#[actix_web::test]
async fn json_nested_100_000_levels_deep_is_a_422() {
    let (app, before) = app().await;
    for (open, close) in [("[", "]"), ("{\"a\":", "}")] {
        let body = format!(
            "{{\"name\":\"deep\",\"parameters\":{}1{}}}",
            open.repeat(100_000),
            close.repeat(100_000)
        );
        let (status, answer) = post_json_bytes(&app, body.into_bytes()).await;
        assert_eq!(status, 422, "{answer}");
        assert_eq!(answer["detail"][0]["type"], "json_invalid", "{answer}");
        let msg = answer["detail"][0]["msg"].as_str().unwrap();
        assert!(
            msg.starts_with("JSON decode error: recursion limit exceeded at line 1 column "),
            "{msg}"
        );
    }
    assert_unchanged(&app, &before).await;
}

#[actix_web::test]
async fn huge_strings_under_the_limit_are_checked_and_over_it_are_a_413() {
    let (app, before) = app().await;
    // A name of nearly 1 MiB: read in full, then refused by the name rule.
    let mut body = tool_body("x", "http://127.0.0.1:9/cb", "plugin:w");
    body["name"] = json!("n".repeat(MAX_BODY_BYTES - 200));
    let bytes = serde_json::to_vec(&body).unwrap();
    assert!(bytes.len() <= MAX_BODY_BYTES);
    let (status, answer) = post_json_bytes(&app, bytes).await;
    assert_eq!(
        (status, answer),
        (
            422,
            field_invalid(
                "name",
                "string_too_long",
                "String should have at most 64 characters"
            )
        )
    );
    // Over the limit, with a Content-Length and chunked (16 MiB: refused at the first MiB).
    body["name"] = json!("n".repeat(MAX_BODY_BYTES));
    let (status, answer) = post_json_bytes(&app, serde_json::to_vec(&body).unwrap()).await;
    assert_eq!((status, answer), (413, too_large()));
    let huge = vec![b' '; 16 * MAX_BODY_BYTES];
    let mut request = raw_head(
        "POST",
        REGISTER,
        &[
            ("Host", &app.host()),
            ("Content-Type", "application/json"),
            ("Transfer-Encoding", "chunked"),
        ],
    );
    request.extend_from_slice(&chunked(&huge, 64 * 1024));
    let response = app.raw(request).await;
    assert_eq!((response.status, response.json()), (413, too_large()));
    assert_unchanged(&app, &before).await;
}

#[actix_web::test]
async fn numbers_out_of_range_are_a_422() {
    let (app, before) = app().await;
    for number in ["1e400", "-1e400", "1e999999999"] {
        let body = format!(
            r#"{{"name":"n","callback_url":"http://127.0.0.1:9/cb","timeout_seconds":{number}}}"#
        );
        let (status, answer) = post_json_bytes(&app, body.into_bytes()).await;
        assert_eq!(status, 422, "{answer}");
        assert_eq!(answer["detail"][0]["type"], "json_invalid", "{answer}");
        let msg = answer["detail"][0]["msg"].as_str().unwrap();
        assert!(
            msg.starts_with("JSON decode error: number out of range at line 1 column "),
            "{msg}"
        );
    }
    // A huge integer is a number serde reads as a float: out of the timeout's range.
    let mut body = tool_body("n", "http://127.0.0.1:9/cb", "plugin:w");
    body["timeout_seconds"] = json!(1e300);
    let (status, answer) = app.register(&body).await;
    assert_eq!(
        (status, answer),
        (
            422,
            field_invalid(
                "timeout_seconds",
                "less_than_equal",
                "Input should be less than or equal to 300"
            )
        )
    );
    assert_unchanged(&app, &before).await;
}

#[actix_web::test]
async fn duplicate_keys_are_a_422_at_any_depth() {
    let (app, before) = app().await;
    let top = r#"{"name":"a","name":"b","callback_url":"http://127.0.0.1:9/cb"}"#;
    let (status, answer) = post_json_bytes(&app, top.as_bytes().to_vec()).await;
    assert_eq!(
        (status, answer),
        (
            422,
            invalid(
                "json_invalid",
                "JSON decode error: duplicate key \"name\" at line 1 column 18"
            )
        )
    );
    let nested = r#"{"name":"a","callback_url":"http://127.0.0.1:9/cb","parameters":{"type":"object","type":"string"}}"#;
    let (status, answer) = post_json_bytes(&app, nested.as_bytes().to_vec()).await;
    assert_eq!(status, 422, "{answer}");
    assert!(
        answer["detail"][0]["msg"]
            .as_str()
            .unwrap()
            .starts_with("JSON decode error: duplicate key \"type\""),
        "{answer}"
    );
    assert_unchanged(&app, &before).await;
}

#[actix_web::test]
async fn invalid_utf8_and_lone_surrogates_are_a_422() {
    let (app, before) = app().await;
    let mut raw = br#"{"name":"a"#.to_vec();
    raw.extend_from_slice(b"\xff\xfe");
    raw.extend_from_slice(br#"","callback_url":"http://127.0.0.1:9/cb"}"#);
    let (status, answer) = post_json_bytes(&app, raw).await;
    assert_eq!(status, 422, "{answer}");
    assert!(
        answer["detail"][0]["msg"]
            .as_str()
            .unwrap()
            .starts_with("JSON decode error: invalid unicode code point at line 1 column "),
        "{answer}"
    );
    let surrogate = r#"{"name":"a\ud800","callback_url":"http://127.0.0.1:9/cb"}"#;
    let (status, answer) = post_json_bytes(&app, surrogate.as_bytes().to_vec()).await;
    assert_eq!(
        (status, answer),
        (
            422,
            invalid(
                "json_invalid",
                "JSON decode error: unexpected end of hex escape at line 1 column 17"
            )
        )
    );
    assert_unchanged(&app, &before).await;
}

#[actix_web::test]
async fn nul_and_control_characters_in_names_are_a_422() {
    let (app, before) = app().await;
    for name in [
        "a\u{0}b",
        "\u{0}",
        "a\u{1b}[31m",
        "line\nbreak",
        "del\u{7f}",
        "c1\u{85}",
    ] {
        for path in [REGISTER, "/api/tools/unregister", "/api/tools/invoke"] {
            let body = tool_body(name, "http://127.0.0.1:9/cb", "plugin:w");
            let (status, answer) = app.post(path, &body).await;
            assert_eq!(
                (status, answer),
                (
                    422,
                    field_invalid(
                        "name",
                        "string_pattern_mismatch",
                        "String should not contain control characters"
                    )
                ),
                "{name:?} on {path}"
            );
        }
    }
    assert_unchanged(&app, &before).await;
}

#[actix_web::test]
async fn a_wrong_content_type_is_a_422_before_the_body_is_read() {
    let (app, before) = app().await;
    let body = serde_json::to_vec(&tool_body("t", "http://127.0.0.1:9/cb", "plugin:w")).unwrap();
    for content_type in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        Some("multipart/form-data; boundary=x"),
        Some("application/jsonp"),
        None,
    ] {
        let (status, answer) = app.post_raw(REGISTER, content_type, body.clone()).await;
        assert_eq!(status, 422, "{content_type:?}: {answer}");
        assert_eq!(answer["detail"][0]["type"], "content_type", "{answer}");
    }
    let (status, answer) = app.post_raw(REGISTER, Some("text/plain"), body).await;
    assert_eq!(
        (status, answer),
        (
            422,
            invalid(
                "content_type",
                "Content-Type must be application/json, got \"text/plain\""
            )
        )
    );
    assert_unchanged(&app, &before).await;
}

/// Sends `head_and_part` and then nothing (or, with `trickle`, one more byte every 200 ms); returns
/// the status, the body and how long the answer took.
fn stalled_upload(
    addr: SocketAddr,
    head_and_part: Vec<u8>,
    trickle: bool,
) -> (u16, Value, Duration) {
    let mut stream = TcpStream::connect_timeout(&addr, HTTP_DEADLINE).expect("connected");
    stream.set_read_timeout(Some(HTTP_DEADLINE)).unwrap();
    let started = Instant::now();
    stream.write_all(&head_and_part).unwrap();
    if trickle {
        let mut writer = stream.try_clone().unwrap();
        // A client that is slow on purpose: it sleeps to be slow, not to wait for anything.
        std::thread::spawn(move || {
            while writer.write_all(b" ").is_ok() {
                std::thread::sleep(Duration::from_millis(200));
            }
        });
    }
    let mut response = Vec::new();
    let mut chunk = [0u8; 4096];
    // The server closes the connection after its answer (the body was not read to its end).
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => response.extend_from_slice(&chunk[..n]),
            Err(e) if !response.is_empty() => {
                eprintln!("read ended with {e} after the response");
                break;
            }
            Err(e) => panic!("no answer to a stalled upload: {e}"),
        }
        if let Some(end) = response.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&response[..end]).to_ascii_lowercase();
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok());
            if length.is_some_and(|n| response.len() >= end + 4 + n) {
                break;
            }
        }
    }
    let elapsed = started.elapsed();
    let _ = stream.shutdown(std::net::Shutdown::Both);
    let text = String::from_utf8_lossy(&response).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad response {text:?}"));
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, crate::helpers::parse_json(body.as_bytes()), elapsed)
}

#[actix_web::test]
async fn slow_uploads_time_out_while_other_clients_are_served() {
    let (app, before) = app().await;
    let host = app.host();
    let sized = {
        let mut r = format!(
            "POST {REGISTER} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             Content-Length: 1000\r\n\r\n{{\"name\": \"slow\""
        )
        .into_bytes();
        r.extend_from_slice(b"");
        r
    };
    let chunked_head = format!(
        "POST {REGISTER} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: chunked\r\n\r\n5\r\n{{\"a\":"
    )
    .into_bytes();
    // More stalled uploads than the server has workers (2): none of them blocks anyone.
    let mut uploads = Vec::new();
    for i in 0..8 {
        let request = if i % 2 == 0 {
            sized.clone()
        } else {
            chunked_head.clone()
        };
        let addr = app.addr;
        uploads.push(actix_web::rt::task::spawn_blocking(move || {
            stalled_upload(addr, request, i == 0)
        }));
    }
    let trickling = {
        let addr = app.addr;
        let request = sized.clone();
        actix_web::rt::task::spawn_blocking(move || stalled_upload(addr, request, true))
    };
    uploads.push(trickling);
    // Meanwhile other clients register, list and unregister as usual.
    for round in 0..5 {
        let name = format!("meanwhile_{round}");
        let (status, answer) = app
            .register(&tool_body(&name, "http://127.0.0.1:9/cb", "plugin:m"))
            .await;
        assert_eq!(status, 200, "{answer}");
        let (status, answer) = app
            .post("/api/tools/unregister", &json!({"name": name}))
            .await;
        assert_eq!(status, 200, "{answer}");
    }
    assert_unchanged(&app, &before).await;
    let expected = json!({"ok": false, "detail": format!("request body was not received within {} s", BODY_READ_TIMEOUT.as_secs())});
    for upload in uploads {
        let (status, body, elapsed) = upload.await.unwrap();
        assert_eq!((status, &body), (408, &expected));
        assert!(
            elapsed >= BODY_READ_TIMEOUT && elapsed < BODY_READ_TIMEOUT + Duration::from_secs(5),
            "answered after {elapsed:?}"
        );
    }
    assert_unchanged(&app, &before).await;
}

#[actix_web::test]
async fn a_request_head_that_never_ends_times_out() {
    let (app, before) = app().await;
    let partial = format!(
        "POST {REGISTER} HTTP/1.1\r\nHost: {}\r\nContent-Ty",
        app.host()
    );
    let addr = app.addr;
    let (status, _, elapsed) = actix_web::rt::task::spawn_blocking(move || {
        stalled_upload(addr, partial.into_bytes(), false)
    })
    .await
    .unwrap();
    assert_eq!(status, 408);
    assert!(
        elapsed < runtime_tools::limits::REQUEST_HEAD_TIMEOUT + Duration::from_secs(5),
        "answered after {elapsed:?}"
    );
    assert_unchanged(&app, &before).await;
}
