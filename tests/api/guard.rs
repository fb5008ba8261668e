//! The loopback rule for callers: a foreign `Host` header is a 403 on every route (checked
//! before the body is read), loopback `Host` forms pass, forwarded headers change nothing, and a
//! non-loopback peer is refused — through the seam that decides it, and over a real socket when
//! this machine has a non-loopback address.

use std::net::{IpAddr, UdpSocket};

use serde_json::{Value, json};

use crate::helpers::{cannot_run, raw_head, settings, spawn_app, spawn_app_with, tool_body};

fn foreign_host(host: &str) -> Value {
    json!({"ok": false, "detail": format!("Host header {host:?} is not a loopback name or address")})
}

fn foreign_peer(ip: &str) -> Value {
    json!({"ok": false, "detail": format!("only loopback clients may use this API (caller {ip})")})
}

#[actix_web::test]
async fn a_foreign_host_header_is_a_403_on_every_route() {
    let app = spawn_app(&["Lanlan"]).await;
    let port = app.addr.port();
    let hosts = [
        "evil.example".to_owned(),
        format!("evil.example:{port}"),
        "localhost.evil.example".to_owned(),
        format!("localhost.evil.example:{port}"),
        "127.0.0.1.evil.example".to_owned(),
        "localhost.".to_owned(),
        "127.1".to_owned(),
        "2130706433".to_owned(),
        format!("10.0.0.1:{port}"),
        format!("[2001:db8::1]:{port}"),
        "0.0.0.0".to_owned(),
    ];
    for host in &hosts {
        assert_eq!(
            app.get_with_host("/api/tools", host).await,
            (403, foreign_host(host)),
            "GET {host}"
        );
        for (path, body) in [
            (
                "/api/tools/register",
                tool_body("t", "http://127.0.0.1:9000/cb", "s"),
            ),
            ("/api/tools/unregister", json!({"name": "t"})),
            ("/api/tools/clear", json!({"source": "s"})),
            ("/api/tools/invoke", json!({"name": "t"})),
            ("/api/tools/calls/c1/progress", json!({"message": "m"})),
            ("/api/sessions/context", json!({"text": "t"})),
        ] {
            let request = app
                .client
                .post(app.url(path))
                .insert_header(("host", host.as_str()));
            assert_eq!(
                app.send(request, Some(&body)).await,
                (403, foreign_host(host)),
                "POST {path} {host}"
            );
        }
        // Unknown routes too: the rule covers the whole server.
        assert_eq!(
            app.get_with_host("/nowhere", host).await,
            (403, foreign_host(host)),
            "GET /nowhere {host}"
        );
    }
    assert_eq!(app.tool_names(None).await, json!({"Lanlan": []}));
}

#[actix_web::test]
async fn loopback_host_forms_pass() {
    let app = spawn_app(&["Lanlan"]).await;
    let port = app.addr.port();
    for host in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
        format!("LocalHost:{port}"),
        format!("127.0.0.2:{port}"),
        format!("[::ffff:127.0.0.1]:{port}"),
        "localhost".to_owned(),
        "127.0.0.1".to_owned(),
        "[::1]".to_owned(),
    ] {
        assert_eq!(
            app.get_with_host("/api/tools", &host).await,
            (200, json!({"ok": true, "tools_by_role": {"Lanlan": []}})),
            "{host}"
        );
        for (path, body) in [
            (
                "/api/tools/register",
                tool_body("t", "http://localhost/cb", "s"),
            ),
            ("/api/tools/unregister", json!({"name": "t"})),
        ] {
            let request = app
                .client
                .post(app.url(path))
                .insert_header(("host", host.as_str()));
            let (status, answer) = app.send(request, Some(&body)).await;
            assert_eq!(
                (status, &answer["ok"]),
                (200, &json!(true)),
                "{host}: {answer}"
            );
        }
    }
}

#[actix_web::test]
async fn a_request_without_host_passes() {
    let app = spawn_app(&["Lanlan"]).await;
    let response = app.raw(b"GET /api/tools HTTP/1.0\r\n\r\n".to_vec()).await;
    assert_eq!(
        (response.status, response.json()),
        (200, json!({"ok": true, "tools_by_role": {"Lanlan": []}}))
    );
}

#[actix_web::test]
async fn the_host_is_checked_before_the_body_is_read() {
    let app = spawn_app(&["Lanlan"]).await;
    // A declared body over the limit, never sent: the Host check answers first.
    let request = raw_head(
        "POST",
        "/api/tools/register",
        &[
            ("Host", "evil.example"),
            ("Content-Type", "application/json"),
            ("Content-Length", "5000000"),
        ],
    );
    let response = app.raw(request).await;
    assert_eq!(
        (response.status, response.json()),
        (403, foreign_host("evil.example"))
    );
    // A body that is not JSON: 403, not 422.
    let mut request = raw_head(
        "POST",
        "/api/tools/register",
        &[
            ("Host", "evil.example"),
            ("Content-Type", "text/plain"),
            ("Content-Length", "3"),
        ],
    );
    request.extend_from_slice(b"???");
    let response = app.raw(request).await;
    assert_eq!(
        (response.status, response.json()),
        (403, foreign_host("evil.example"))
    );
}

#[actix_web::test]
async fn forwarded_headers_change_nothing_for_a_loopback_caller() {
    let app = spawn_app(&["Lanlan"]).await;
    let request = app
        .client
        .get(app.url("/api/tools"))
        .insert_header(("x-forwarded-for", "8.8.8.8"))
        .insert_header(("forwarded", "for=8.8.8.8;host=evil.example"))
        .insert_header(("x-real-ip", "8.8.8.8"))
        .insert_header(("x-forwarded-host", "evil.example"));
    assert_eq!(
        app.send(request, None).await,
        (200, json!({"ok": true, "tools_by_role": {"Lanlan": []}}))
    );
}

/// A non-loopback IPv4 address of this machine: the one on its default route, else any local
/// address the kernel lists (`.ci/run` gives a machine without one a dummy interface).
pub fn non_loopback_address() -> Option<IpAddr> {
    let routed = UdpSocket::bind("0.0.0.0:0").ok().and_then(|socket| {
        // Connecting a UDP socket sends nothing; it only picks the route and the source address.
        socket.connect("198.51.100.1:9").ok()?;
        socket.local_addr().ok().map(|a| a.ip())
    });
    let usable = |ip: &IpAddr| !ip.is_loopback() && !ip.is_unspecified();
    routed.filter(usable).or_else(|| {
        // `/proc/net/fib_trie` lists each local address above a `/32 host LOCAL` line.
        let trie = std::fs::read_to_string("/proc/net/fib_trie").ok()?;
        let lines: Vec<&str> = trie.lines().collect();
        lines.windows(2).find_map(|pair| {
            let ip: IpAddr = pair[0].trim().trim_start_matches("|-- ").parse().ok()?;
            (pair[1].contains("/32 host LOCAL") && usable(&ip)).then_some(ip)
        })
    })
}

#[actix_web::test]
async fn a_real_non_loopback_peer_is_refused() {
    let Some(ip) = non_loopback_address() else {
        return cannot_run(
            "a_real_non_loopback_peer_is_refused",
            "this machine has no non-loopback IPv4 address",
        );
    };
    let mut config = settings(&["Lanlan"]);
    config.bind = "0.0.0.0:0".parse().unwrap();
    let app = spawn_app_with(config).await;
    let port = app.addr.port();
    let url = format!("http://{ip}:{port}/api/tools");
    for request in [
        app.client
            .get(&url)
            .insert_header(("host", format!("localhost:{port}"))),
        app.client
            .get(&url)
            .insert_header(("host", format!("127.0.0.1:{port}")))
            .insert_header(("x-forwarded-for", "127.0.0.1"))
            .insert_header(("forwarded", "for=127.0.0.1")),
    ] {
        assert_eq!(
            app.send(request, None).await,
            (403, foreign_peer(&ip.to_string()))
        );
    }
    for (path, body) in [
        (
            "/api/tools/register",
            tool_body("t", "http://127.0.0.1:9000/cb", "s"),
        ),
        ("/api/sessions/context", json!({"text": "t"})),
        ("/api/tools/calls/c1/progress", json!({"message": "m"})),
    ] {
        let request = app
            .client
            .post(format!("http://{ip}:{port}{path}"))
            .insert_header(("host", format!("localhost:{port}")));
        assert_eq!(
            app.send(request, Some(&body)).await,
            (403, foreign_peer(&ip.to_string())),
            "{path}"
        );
    }
    // The same server still answers loopback callers, and nothing was registered.
    let request = app.client.get(format!("http://127.0.0.1:{port}/api/tools"));
    assert_eq!(
        app.send(request, None).await,
        (200, json!({"ok": true, "tools_by_role": {"Lanlan": []}}))
    );
}
