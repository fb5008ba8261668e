//! Who gets in: a peer in another network namespace (a real non-loopback address) is refused
//! end to end, browser `Origin`s that are not loopback pages are refused, and binding anything
//! but loopback is announced loudly.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;

use serde_json::{Value, json};

use crate::helpers::{HTTP_DEADLINE, cannot_run, settings, spawn_app, spawn_app_with, tool_body};

fn forbidden(detail: &str) -> Value {
    json!({"ok": false, "detail": detail})
}

#[actix_web::test]
async fn a_browser_origin_that_is_not_loopback_is_a_403() {
    let app = spawn_app(&["Lanlan"]).await;
    let before = app.listing(None).await;
    for origin in [
        "https://evil.example",
        "http://localhost.evil.example",
        "null",
        "http://127.1:80",
    ] {
        let request = app
            .client
            .get(app.url("/api/tools"))
            .insert_header(("origin", origin));
        let (status, body) = app.send(request, None).await;
        assert_eq!(
            (status, body),
            (
                403,
                forbidden(&format!(
                    "Origin {origin:?} is not a loopback page: browsers may call this API only \
                     from http://localhost or http://127.0.0.1 pages"
                ))
            ),
            "{origin}"
        );
        let request = app
            .client
            .post(app.url("/api/tools/register"))
            .insert_header(("origin", origin));
        let body = tool_body("t", "http://127.0.0.1:9/cb", "plugin:t");
        let (status, _) = app.send(request, Some(&body)).await;
        assert_eq!(status, 403, "{origin}");
    }
    assert_eq!(app.listing(None).await, before);
    for origin in [
        "http://localhost:5173",
        "http://127.0.0.1:8080",
        "http://[::1]:3000",
    ] {
        let request = app
            .client
            .get(app.url("/api/tools"))
            .insert_header(("origin", origin));
        let (status, body) = app.send(request, None).await;
        assert_eq!(status, 200, "{origin}: {body}");
    }
}

/// A network namespace joined to this one by a veth pair, removed when dropped.
struct Netns {
    name: String,
    host_veth: String,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let output = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

impl Netns {
    /// `10.200.S.1/30` here, `10.200.S.2/30` inside the namespace (private test addresses, S
    /// from the process id so parallel runs differ).
    fn create(subnet: u8) -> Result<Self, String> {
        let id = std::process::id();
        let netns = Self {
            name: format!("rt-test-{id}"),
            host_veth: format!("rtv{id}a"),
        };
        let peer = format!("rtv{id}b");
        ip(&["netns", "add", &netns.name])?;
        ip(&[
            "link",
            "add",
            &netns.host_veth,
            "type",
            "veth",
            "peer",
            "name",
            &peer,
        ])?;
        ip(&["link", "set", &peer, "netns", &netns.name])?;
        ip(&[
            "addr",
            "add",
            &format!("10.200.{subnet}.1/30"),
            "dev",
            &netns.host_veth,
        ])?;
        ip(&["link", "set", &netns.host_veth, "up"])?;
        let inside = |args: &[&str]| {
            let mut all = vec!["netns", "exec", &netns.name, "ip"];
            all.extend_from_slice(args);
            ip(&all)
        };
        inside(&[
            "addr",
            "add",
            &format!("10.200.{subnet}.2/30"),
            "dev",
            &peer,
        ])?;
        inside(&["link", "set", &peer, "up"])?;
        inside(&["link", "set", "lo", "up"])?;
        Ok(netns)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting the namespace deletes its end of the pair, and with it ours.
        let _ = ip(&["link", "del", &self.host_veth]);
        let _ = ip(&["netns", "del", &self.name]);
    }
}

/// A GET from inside the namespace, by python3; prints the status and the body.
const CLIENT: &str = r#"
import sys, urllib.request, urllib.error
try:
    r = urllib.request.urlopen(sys.argv[1], timeout=20)
    print(r.status); print(r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code); print(e.read().decode())
"#;

#[actix_web::test]
async fn a_peer_in_another_network_namespace_is_refused_end_to_end() {
    let skip = if not_root() {
        Some("not root: creating a network namespace needs CAP_SYS_ADMIN".to_owned())
    } else if Command::new("ip").arg("-V").output().is_err() {
        Some("the `ip` command (iproute2) is missing".to_owned())
    } else {
        None
    };
    const TEST: &str = "a_peer_in_another_network_namespace_is_refused_end_to_end";
    if let Some(reason) = skip {
        return cannot_run(TEST, &reason);
    }
    let subnet = (std::process::id() % 250) as u8;
    let netns = match Netns::create(subnet) {
        Ok(netns) => netns,
        Err(e) => return cannot_run(TEST, &e),
    };
    let mut settings = settings(&["Lanlan"]);
    settings.bind = "0.0.0.0:0".parse().unwrap();
    let mut app = spawn_app_with(settings).await;
    // Local calls go to loopback (the wildcard is not a Host this server accepts).
    app.base = format!("http://127.0.0.1:{}", app.addr.port());
    let before = app.listing(None).await;
    let url = format!("http://10.200.{subnet}.1:{}/api/tools", app.addr.port());
    let name = netns.name.clone();
    let output = actix_web::rt::task::spawn_blocking(move || {
        Command::new("ip")
            .args(["netns", "exec", &name, "python3", "-c", CLIENT, &url])
            .output()
            .expect("client ran")
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut lines = stdout.lines();
    assert_eq!(
        lines.next(),
        Some("403"),
        "{stdout} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let body: Value = serde_json::from_str(lines.next().unwrap_or_default()).unwrap();
    assert_eq!(
        body,
        forbidden(&format!(
            "only loopback clients may use this API (caller 10.200.{subnet}.2)"
        ))
    );
    assert_eq!(app.listing(None).await, before);
    drop(netns);
}

fn not_root() -> bool {
    // The effective user id, read from /proc without libc.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| v.split_whitespace().nth(1).map(|u| u != "0"))
        })
        .unwrap_or(true)
}

#[test]
fn binding_a_non_loopback_address_warns_loudly_on_stderr() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_runtime-tools"))
        .args(["serve", "--bind", "0.0.0.0:0", "--character", "A"])
        // The warning must get through even a log filter that hides warnings.
        .env("RUST_LOG", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runtime-tools starts");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            if tx.send(line.unwrap_or_default()).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let found = loop {
        match rx.recv_timeout(HTTP_DEADLINE) {
            Ok(line) if line.starts_with(runtime_tools::limits::NON_LOOPBACK_WARNING) => {
                break Some(line);
            }
            Ok(line) => seen.push(line),
            Err(_) => break None,
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    let line = found.unwrap_or_else(|| panic!("no warning on stderr: {seen:?}"));
    assert!(line.contains("0.0.0.0:"), "{line}");
    assert!(line.contains("reachable from other machines"), "{line}");
    assert_eq!(
        seen.last().map(|l| l.chars().all(|c| c == '!')),
        Some(true),
        "{seen:?}"
    );
}
