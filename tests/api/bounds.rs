//! Every input bounded at the HTTP edge: callback URLs past the documented length, request
//! targets in absolute form, repeated `Origin` and `Host` headers, impossible ports, HEAD on the
//! read routes and CORS for pages served from another loopback port.

use std::io::{Read, Write};
use std::net::TcpStream;

use runtime_tools::limits::MAX_CALLBACK_URL_BYTES;
use serde_json::{Value, json};

use crate::helpers::{HTTP_DEADLINE, TestApp, raw_head, spawn_app, tool_body};

fn forbidden(detail: String) -> Value {
    json!({"ok": false, "detail": detail})
}

#[actix_web::test]
async fn a_callback_url_over_the_limit_is_a_422_naming_its_length() {
    let app = spawn_app(&["Lanlan"]).await;
    let base = "http://127.0.0.1:9333/";
    let longest = format!("{base}{}", "a".repeat(MAX_CALLBACK_URL_BYTES - base.len()));
    let (status, body) = app.register(&tool_body("edge", &longest, "s")).await;
    assert_eq!((status, &body["ok"]), (200, &json!(true)), "{body}");

    let huge = format!("{base}{}", "a".repeat(900 * 1024));
    let (status, body) = app.register(&tool_body("huge", &huge, "s")).await;
    assert_eq!(
        (status, body),
        (
            422,
            json!({"ok": false, "detail": [{"loc": ["body", "callback_url"],
                "msg": format!("callback_url is {} bytes long; at most 2048 bytes are accepted", huge.len()),
                "type": "string_too_long"}]})
        )
    );
    assert_eq!(app.tool_names(None).await, json!({"Lanlan": ["edge"]}));
}

#[actix_web::test]
async fn an_absolute_form_target_is_checked_like_host() {
    let app = spawn_app(&["Lanlan"]).await;
    let host = app.host();
    let response = app
        .raw(raw_head(
            "GET",
            "http://evil.example/api/tools",
            &[("Host", host.as_str())],
        ))
        .await;
    assert_eq!(
        (response.status, response.json()),
        (
            403,
            forbidden(
                "request target authority \"evil.example\" is not a loopback name or address"
                    .into()
            )
        )
    );
    let target = format!("http://{host}/api/tools");
    let response = app
        .raw(raw_head("GET", &target, &[("Host", host.as_str())]))
        .await;
    assert_eq!(
        (response.status, response.json()),
        (200, json!({"ok": true, "tools_by_role": {"Lanlan": []}}))
    );
}

#[actix_web::test]
async fn every_copy_of_origin_and_host_is_checked() {
    let app = spawn_app(&["Lanlan"]).await;
    let host = app.host();
    for (first, second) in [
        ("http://localhost:5173", "https://evil.example"),
        ("https://evil.example", "http://localhost:5173"),
    ] {
        let response = app
            .raw(raw_head(
                "GET",
                "/api/tools",
                &[
                    ("Host", host.as_str()),
                    ("Origin", first),
                    ("Origin", second),
                ],
            ))
            .await;
        assert_eq!(
            (response.status, response.json()),
            (
                403,
                forbidden(
                    "Origin \"https://evil.example\" is not a loopback page: browsers may call \
                     this API only from http://localhost or http://127.0.0.1 pages"
                        .into()
                )
            ),
            "{first}, {second}"
        );
    }
    let response = app
        .raw(raw_head(
            "GET",
            "/api/tools",
            &[("Host", host.as_str()), ("Host", "evil.example")],
        ))
        .await;
    assert_eq!(response.status, 400, "actix refuses a second Host itself");
}

#[actix_web::test]
async fn a_port_no_tcp_socket_can_have_is_refused() {
    let app = spawn_app(&["Lanlan"]).await;
    for host in ["localhost:99999", "127.0.0.1:65536", "localhost:0"] {
        assert_eq!(
            app.get_with_host("/api/tools", host).await,
            (
                403,
                forbidden(format!(
                    "Host header {host:?} is not a loopback name or address"
                ))
            ),
            "{host}"
        );
    }
    let request = app
        .client
        .get(app.url("/api/tools"))
        .insert_header(("origin", "http://localhost:99999"));
    assert_eq!(
        app.send(request, None).await,
        (
            403,
            forbidden(
                "Origin \"http://localhost:99999\" is not a loopback page: browsers may call \
                 this API only from http://localhost or http://127.0.0.1 pages"
                    .into()
            )
        )
    );
}

/// Sends `request` and reads until the server closes the connection: the head and whatever
/// followed it.
fn exchange_to_close(addr: std::net::SocketAddr, request: &[u8]) -> (String, Vec<u8>) {
    let mut stream = TcpStream::connect_timeout(&addr, HTTP_DEADLINE).expect("connected");
    stream.set_read_timeout(Some(HTTP_DEADLINE)).unwrap();
    stream.write_all(request).expect("request written");
    let mut all = Vec::new();
    stream.read_to_end(&mut all).expect("answer read");
    let end = all
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head")
        + 4;
    (
        String::from_utf8_lossy(&all[..end]).into_owned(),
        all[end..].to_vec(),
    )
}

/// `HEAD path` to `app`: the answer's head and whatever followed it before the server closed.
async fn head_request(app: &TestApp, path: &str) -> (String, Vec<u8>) {
    let request = raw_head("HEAD", path, &[("Host", app.host().as_str())]);
    let addr = app.addr;
    actix_web::rt::task::spawn_blocking(move || exchange_to_close(addr, &request))
        .await
        .unwrap()
}

#[actix_web::test]
async fn head_answers_the_read_routes_as_get_without_a_body() {
    let app = spawn_app(&["Lanlan"]).await;
    let (status, _) = app
        .register(&tool_body("t", "http://127.0.0.1:9/cb", "s"))
        .await;
    assert_eq!(status, 200);
    let host = app.host();
    for path in [
        "/api/tools",
        "/api/sessions",
        "/api/mcp",
        "/api/tools/openapi.json",
        "/",
        "/inspector.js",
    ] {
        let get = app
            .raw(raw_head("GET", path, &[("Host", host.as_str())]))
            .await;
        assert_eq!(get.status, 200, "{path}");
        let (head, body) = head_request(&app, path).await;
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{path}: {head}");
        let length = format!("content-length: {}\r\n", get.body.len());
        assert!(
            head.to_ascii_lowercase().contains(&length),
            "{path}: {head}"
        );
        assert_eq!(body, b"", "{path}: HEAD answered with a body");
    }
    // The write routes still refuse it, and so does the event stream (it has no length).
    for path in ["/api/tools/register", "/api/events"] {
        let (head, body) = head_request(&app, path).await;
        assert!(
            head.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"),
            "{path}: {head}"
        );
        assert_eq!(body, b"", "{path}");
    }
}

#[actix_web::test]
async fn a_page_on_another_loopback_port_gets_cors_answers() {
    let app = spawn_app(&["Lanlan"]).await;
    let page = "http://localhost:5173";
    // The preflight a browser sends before a JSON POST.
    let preflight = app
        .client
        .request(awc::http::Method::OPTIONS, app.url("/api/tools/register"))
        .insert_header(("origin", page))
        .insert_header(("access-control-request-method", "POST"))
        .insert_header(("access-control-request-headers", "content-type"))
        .send()
        .await
        .expect("preflight answered");
    assert_eq!(preflight.status(), 200);
    let header = |r: &awc::ClientResponse<_>, name: &str| {
        r.headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    assert_eq!(
        header(&preflight, "access-control-allow-origin").as_deref(),
        Some(page)
    );
    let methods = header(&preflight, "access-control-allow-methods").unwrap_or_default();
    assert!(methods.contains("POST"), "{methods}");
    let allowed = header(&preflight, "access-control-allow-headers").unwrap_or_default();
    assert!(
        allowed.to_ascii_lowercase().contains("content-type"),
        "{allowed}"
    );
    assert!(
        header(&preflight, "vary").is_some_and(|v| v.contains("Origin")),
        "{:?}",
        preflight.headers()
    );

    // The request itself, and its answer carries the page's origin.
    let mut response = app
        .client
        .post(app.url("/api/tools/register"))
        .insert_header(("origin", page))
        .send_json(&tool_body("t", "http://127.0.0.1:9/cb", "s"))
        .await
        .expect("answered");
    assert_eq!(response.status(), 200);
    assert_eq!(
        header(&response, "access-control-allow-origin").as_deref(),
        Some(page)
    );
    assert!(header(&response, "vary").is_some_and(|v| v.contains("Origin")));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["affected_roles"], json!(["Lanlan"]));

    // A foreign page's preflight is refused like its request.
    let (status, body) = app
        .send(
            app.client
                .request(awc::http::Method::OPTIONS, app.url("/api/tools/register"))
                .insert_header(("origin", "https://evil.example"))
                .insert_header(("access-control-request-method", "POST")),
            None,
        )
        .await;
    assert_eq!(
        (status, body),
        (
            403,
            forbidden(
                "Origin \"https://evil.example\" is not a loopback page: browsers may call \
                 this API only from http://localhost or http://127.0.0.1 pages"
                    .into()
            )
        )
    );
    // A client without Origin gets no CORS headers.
    let response = app
        .client
        .get(app.url("/api/tools"))
        .send()
        .await
        .expect("answered");
    assert_eq!(header(&response, "access-control-allow-origin"), None);
}
