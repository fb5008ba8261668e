//! The `runtime-tools` command itself: the listening line, serving, dual-stack binding, a clean
//! exit (code 0) on SIGTERM and SIGINT, start-up errors that name the key and the file, and a
//! log pipe nobody reads, which must not stop the server.
//!
//! Each test runs the built binary as a child process and waits on its events (its stdout line,
//! its exit) with deadlines, never with sleeps.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{ChildStderr, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::helpers::{raw_exchange, raw_head};

/// Longest wait for the child to start, answer or exit (a loaded 2-core machine).
const DEADLINE: Duration = Duration::from_secs(60);

const BINARY: &str = env!("CARGO_BIN_EXE_runtime-tools");

/// A running (or finished) `runtime-tools` child process.
pub struct Child {
    pid: u32,
    stdout: Receiver<String>,
    exit: Receiver<ExitStatus>,
    stderr: Option<JoinHandle<Vec<u8>>>,
    /// The read end of a stderr pipe that is never read, held open.
    _unread_stderr: Option<ChildStderr>,
    exited: Option<ExitStatus>,
    /// The `inspector:` line printed after the listening line, once read.
    pub inspector: Option<String>,
}

impl Child {
    pub fn start(args: &[&str]) -> Self {
        Self::start_reading_stderr(args, &[], true, "info")
    }

    /// Starts the command logging at `level` (`RUST_LOG`).
    pub fn start_logging(args: &[&str], level: &str) -> Self {
        Self::start_reading_stderr(args, &[], true, level)
    }

    /// Starts the command logging at `level`, with these environment variables set as well.
    pub fn start_logging_with_env(args: &[&str], level: &str, env: &[(&str, &str)]) -> Self {
        Self::start_reading_stderr(args, env, true, level)
    }

    /// Starts the command with these environment variables set as well.
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Self {
        Self::start_reading_stderr(args, env, true, "info")
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Starts the command with its stderr on a pipe that nobody reads, as an app that launches
    /// the server and ignores its output would.
    pub fn start_with_unread_stderr(args: &[&str]) -> Self {
        Self::start_reading_stderr(args, &[], false, "info")
    }

    fn start_reading_stderr(args: &[&str], env: &[(&str, &str)], read: bool, level: &str) -> Self {
        let mut child = Command::new(BINARY)
            .args(args)
            .env("RUST_LOG", level)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("runtime-tools starts");
        let pid = child.id();
        let out = child.stdout.take().unwrap();
        let err = child.stderr.take().unwrap();
        let (line_tx, stdout) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if line_tx.send(line).is_err() {
                    break;
                }
            }
        });
        let (stderr, unread) = if read {
            let reader = std::thread::spawn(move || {
                let mut err = err;
                let mut bytes = Vec::new();
                let _ = err.read_to_end(&mut bytes);
                bytes
            });
            (Some(reader), None)
        } else {
            (None, Some(err))
        };
        let (exit_tx, exit) = mpsc::channel();
        std::thread::spawn(move || {
            let status = child.wait().expect("child waited for");
            let _ = exit_tx.send(status);
        });
        Self {
            pid,
            stdout,
            exit,
            stderr,
            _unread_stderr: unread,
            exited: None,
            inspector: None,
        }
    }

    /// The next stdout line, waiting at most until the deadline.
    fn next_line(&self) -> Result<String, RecvTimeoutError> {
        self.stdout.recv_timeout(DEADLINE)
    }

    /// Reads the listening line and returns the address it announces.
    pub fn listening(&mut self, host: &str) -> SocketAddr {
        let line = match self.next_line() {
            Ok(line) => line,
            Err(e) => panic!(
                "no listening line ({e:?}); stderr: {}",
                self.stderr_after_exit()
            ),
        };
        let prefix = format!("listening on http://{host}:");
        let port = line
            .strip_prefix(&prefix)
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
        let port: u16 = port.parse().expect("a port number");
        assert_ne!(port, 0, "the real port is announced");
        let ip = host.trim_start_matches('[').trim_end_matches(']');
        // The person's address of the inspector follows at once.
        let inspector = self.next_line().expect("an inspector line");
        assert!(
            inspector.starts_with(&format!("inspector: http://{host}:{port}/")),
            "unexpected second line {inspector:?}"
        );
        self.inspector = Some(inspector);
        SocketAddr::new(ip.parse().unwrap(), port)
    }

    /// The operator token the inspector line carries (`#token=`), when the server made one.
    pub fn printed_token(&self) -> Option<&str> {
        let line = self
            .inspector
            .as_deref()
            .expect("the listening line was read");
        line.split_once("/#token=").map(|(_, token)| token)
    }

    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([format!("-{signal}"), self.pid.to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{signal} {}", self.pid);
    }

    /// Waits for the child to exit on its own (at most until the deadline).
    pub fn wait(&mut self) -> ExitStatus {
        if let Some(status) = self.exited {
            return status;
        }
        match self.exit.recv_timeout(DEADLINE) {
            Ok(status) => {
                self.exited = Some(status);
                status
            }
            Err(_) => {
                self.kill();
                panic!("runtime-tools did not exit within {DEADLINE:?}");
            }
        }
    }

    /// Every stdout line after the ones already read, once the child has exited.
    fn remaining_stdout(&mut self) -> Vec<String> {
        self.wait();
        let start = Instant::now();
        let mut lines = Vec::new();
        loop {
            match self
                .stdout
                .recv_timeout(DEADLINE.saturating_sub(start.elapsed()))
            {
                Ok(line) => lines.push(line),
                Err(RecvTimeoutError::Disconnected) => return lines,
                Err(RecvTimeoutError::Timeout) => panic!("stdout stayed open after exit"),
            }
        }
    }

    /// Everything the child wrote to stderr (waits for it to exit).
    pub fn stderr_after_exit(&mut self) -> String {
        String::from_utf8_lossy(&self.stderr_bytes_after_exit()).into_owned()
    }

    /// Everything the child wrote to stderr, as the bytes it wrote (waits for it to exit).
    pub fn stderr_bytes_after_exit(&mut self) -> Vec<u8> {
        if self.exited.is_none() {
            self.kill();
        }
        self.wait();
        self.stderr
            .take()
            .map(|h| h.join().expect("stderr reader"))
            .unwrap_or_default()
    }

    fn kill(&mut self) {
        if self.exited.is_none() {
            let _ = Command::new("kill")
                .args(["-KILL", &self.pid.to_string()])
                .status();
            if let Ok(status) = self.exit.recv_timeout(DEADLINE) {
                self.exited = Some(status);
            }
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `GET path` on `addr` with a matching `Host`, over a connection that closes afterwards.
pub fn get(addr: SocketAddr, path: &str) -> (u16, Value) {
    let host = addr.to_string();
    let response = raw_exchange(addr, raw_head("GET", path, &[("Host", &host)]));
    (response.status, response.json())
}

pub fn post(addr: SocketAddr, path: &str, body: &Value) -> (u16, Value) {
    let host = addr.to_string();
    let body = serde_json::to_vec(body).unwrap();
    let length = body.len().to_string();
    let mut request = raw_head(
        "POST",
        path,
        &[
            ("Host", &host),
            ("Content-Type", "application/json"),
            ("Content-Length", &length),
        ],
    );
    request.extend(body);
    let response = raw_exchange(addr, request);
    (response.status, response.json())
}

fn assert_clean_exit(child: &mut Child) {
    let status = child.wait();
    assert_eq!(
        status.code(),
        Some(0),
        "{status}; stderr: {}",
        child.stderr_after_exit()
    );
    assert_eq!(child.remaining_stdout(), Vec::<String>::new());
}

#[test]
fn serve_prints_one_line_serves_and_exits_0_on_sigterm() {
    let mut child = Child::start(&[
        "serve",
        "--bind",
        "127.0.0.1:0",
        "--character",
        "A",
        "--character",
        "B",
    ]);
    let addr = child.listening("127.0.0.1");
    assert_eq!(
        get(addr, "/api/tools"),
        (
            200,
            json!({"ok": true, "tools_by_role": {"A": [], "B": []}})
        )
    );
    let (status, body) = post(
        addr,
        "/api/tools/register",
        &json!({"name": "t", "callback_url": "http://127.0.0.1:9/cb", "role": "B"}),
    );
    let body = crate::helpers::without_instance_id("/api/tools/register", status, body);
    assert_eq!(
        (status, body),
        (
            200,
            json!({"ok": true, "registered": "t", "affected_roles": ["B"], "failed_roles": []})
        )
    );
    child.signal("TERM");
    assert_clean_exit(&mut child);
    let stderr = child.stderr_after_exit();
    // One info line per change request, naming the route and the tool.
    assert!(
        stderr.lines().any(|l| l.contains("INFO")
            && l.contains(r#"route="register""#)
            && l.contains(r#"name="t""#)),
        "{stderr}"
    );
}

#[test]
fn sigterm_right_after_the_listening_line_exits_0() {
    let mut child = Child::start(&["serve", "--bind", "127.0.0.1:0"]);
    child.listening("127.0.0.1");
    child.signal("TERM");
    assert_clean_exit(&mut child);
}

#[test]
fn sigint_exits_0() {
    let mut child = Child::start(&["serve", "--bind", "127.0.0.1:0", "--character", "A"]);
    let addr = child.listening("127.0.0.1");
    assert_eq!(get(addr, "/api/tools").0, 200);
    child.signal("INT");
    assert_clean_exit(&mut child);
}

#[test]
fn sigterm_with_an_idle_keep_alive_connection_still_exits_0() {
    use std::io::Write;

    let mut child = Child::start(&["serve", "--bind", "127.0.0.1:0"]);
    let addr = child.listening("127.0.0.1");
    // One exchange on a connection that stays open afterwards.
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    write!(stream, "GET /api/tools HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("tools_by_role") {
        let n = stream.read(&mut buf).expect("response read");
        assert!(n > 0, "connection closed early");
        seen.extend_from_slice(&buf[..n]);
    }
    child.signal("TERM");
    assert_clean_exit(&mut child);
    drop(stream);
}

#[test]
fn sigterm_ends_open_event_streams_cleanly_and_exits_0() {
    use std::io::Write;

    let mut child = Child::start(&["serve", "--bind", "127.0.0.1:0"]);
    let addr = child.listening("127.0.0.1");
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    write!(stream, "GET /api/events HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("event: hello") {
        let n = stream.read(&mut buf).expect("stream read");
        assert!(n > 0, "connection closed early");
        seen.extend_from_slice(&buf[..n]);
    }
    child.signal("TERM");
    // The stream ends with its last chunk (a graceful stop would otherwise wait for it).
    while !String::from_utf8_lossy(&seen).ends_with("\r\n0\r\n\r\n") {
        let n = stream.read(&mut buf).expect("stream read");
        assert!(
            n > 0,
            "closed without ending the stream: {:?}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    assert_clean_exit(&mut child);
}

#[test]
fn the_default_character_is_lanlan() {
    let mut child = Child::start(&["serve", "--bind", "127.0.0.1:0"]);
    let addr = child.listening("127.0.0.1");
    assert_eq!(
        get(addr, "/api/tools"),
        (200, json!({"ok": true, "tools_by_role": {"Lanlan": []}}))
    );
    child.signal("TERM");
    assert_clean_exit(&mut child);
}

#[test]
fn binding_the_ipv6_wildcard_serves_ipv4_and_ipv6() {
    let mut child = Child::start(&["serve", "--bind", "[::]:0", "--character", "A"]);
    let announced = child.listening("[::]");
    let port = announced.port();
    for addr in [
        SocketAddr::from(([127, 0, 0, 1], port)),
        SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, port)),
    ] {
        assert_eq!(
            get(addr, "/api/tools"),
            (200, json!({"ok": true, "tools_by_role": {"A": []}})),
            "{addr}"
        );
    }
    child.signal("TERM");
    assert_clean_exit(&mut child);
}

/// A fresh directory for this test's files, removed when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(test: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("runtime-tools-cli-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir created");
        Self(dir)
    }

    /// The path of `name` in the directory, without creating it.
    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    pub fn file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).expect("file written");
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn a_config_file_sets_the_bind_address_and_the_characters_in_order() {
    let dir = TempDir::new("good");
    let path = dir.file(
        "runtime-tools.toml",
        "bind = \"127.0.0.1:0\"\n[dispatch]\nmax_response_bytes = 4194304\n\
         [[character]]\nname = \"Mio\"\n[[character]]\nname = \"Lanlan\"\n",
    );
    let mut child = Child::start(&["serve", "--config", path.to_str().unwrap()]);
    let addr = child.listening("127.0.0.1");
    let (status, body) = get(addr, "/api/tools");
    assert_eq!(status, 200);
    assert_eq!(
        crate::helpers::keys(&body["tools_by_role"]),
        ["Mio", "Lanlan"]
    );
    child.signal("TERM");
    assert_clean_exit(&mut child);
}

#[test]
fn a_pinned_tool_nobody_holds_at_start_is_a_warning_not_an_error() {
    let dir = TempDir::new("pinned");
    let path = dir.file(
        "runtime-tools.toml",
        "bind = \"127.0.0.1:0\"\n[[character]]\nname = \"Mio\"\n\
         [character.tools]\nbudget = 8\npinned = [\"lights\"]\n\
         [[character]]\nname = \"Lanlan\"\n",
    );
    let mut child = Child::start(&["serve", "--config", path.to_str().unwrap()]);
    let addr = child.listening("127.0.0.1");
    // It serves: the pinned tool may register later.
    let (status, _) = get(addr, "/api/tools");
    assert_eq!(status, 200);
    child.signal("TERM");
    assert_clean_exit(&mut child);
    let stderr = child.stderr_after_exit();
    let warned: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("a pinned tool"))
        .collect();
    assert_eq!(warned.len(), 1, "{stderr}");
    assert!(
        warned[0].contains("WARN")
            && warned[0].contains(r#"character=Mio"#)
            && warned[0].contains(r#"tool="lights""#),
        "{stderr}"
    );
}

/// Starts with a bad configuration file and returns the child's stderr after its exit.
fn failed_start(dir: &TempDir, name: &str, text: &str, extra: &[&str]) -> (PathBuf, String) {
    let path = dir.file(name, text);
    let mut args = vec!["serve", "--config", path.to_str().unwrap()];
    args.extend_from_slice(extra);
    let mut child = Child::start(&args);
    let status = child.wait();
    let stderr = child.stderr_after_exit();
    assert!(!status.success(), "{status}; stderr: {stderr}");
    assert_ne!(status.code(), None, "exited, not killed: {status}");
    assert_eq!(child.remaining_stdout(), Vec::<String>::new(), "{stderr}");
    (path, stderr)
}

#[test]
fn an_unknown_config_key_stops_start_up_naming_the_key_and_the_file() {
    let dir = TempDir::new("unknown-key");
    for (file, text, key) in [
        (
            "top.toml",
            "bind = \"127.0.0.1:0\"\ncolour = \"blue\"\n",
            "colour",
        ),
        (
            "dispatch.toml",
            "bind = \"127.0.0.1:0\"\n[dispatch]\nmax_bytes = 1\n",
            "max_bytes",
        ),
        (
            "character.toml",
            "bind = \"127.0.0.1:0\"\n[[character]]\nname = \"A\"\nmood = \"calm\"\n",
            "mood",
        ),
    ] {
        let (path, stderr) = failed_start(&dir, file, text, &[]);
        assert!(stderr.contains(key), "{file}: {stderr}");
        assert!(stderr.contains(path.to_str().unwrap()), "{file}: {stderr}");
    }
}

#[test]
fn a_duplicate_character_stops_start_up_naming_the_key_and_the_file() {
    let dir = TempDir::new("duplicate");
    let (path, stderr) = failed_start(
        &dir,
        "dup.toml",
        "bind = \"127.0.0.1:0\"\n[[character]]\nname = \"Mio\"\n[[character]]\nname = \"Lanlan\"\n\
         [[character]]\nname = \"Mio\"\n",
        &[],
    );
    assert!(stderr.contains("character[2].name"), "{stderr}");
    assert!(
        stderr.contains("duplicate character name \"Mio\""),
        "{stderr}"
    );
    assert!(stderr.contains(path.to_str().unwrap()), "{stderr}");
}

#[test]
fn a_bad_config_value_stops_start_up_naming_the_key_and_the_file() {
    let dir = TempDir::new("bad-value");
    for (file, text, key) in [
        ("bind.toml", "bind = \"nowhere\"\n", "`bind`"),
        (
            "max.toml",
            "bind = \"127.0.0.1:0\"\n[dispatch]\nmax_response_bytes = 0\n",
            "dispatch.max_response_bytes",
        ),
        (
            "name.toml",
            "bind = \"127.0.0.1:0\"\n[[character]]\nname = \"\"\n",
            "character[0].name",
        ),
    ] {
        let (path, stderr) = failed_start(&dir, file, text, &[]);
        assert!(stderr.contains(key), "{file}: {stderr}");
        assert!(stderr.contains(path.to_str().unwrap()), "{file}: {stderr}");
    }
}

#[test]
fn a_duplicate_character_option_stops_start_up() {
    let mut child = Child::start(&[
        "serve",
        "--bind",
        "127.0.0.1:0",
        "--character",
        "A",
        "--character",
        "A",
    ]);
    let status = child.wait();
    let stderr = child.stderr_after_exit();
    assert!(!status.success(), "{status}");
    assert!(stderr.contains("--character"), "{stderr}");
    assert!(
        stderr.contains("duplicate character name \"A\""),
        "{stderr}"
    );
}

#[test]
fn options_override_the_config_file() {
    let dir = TempDir::new("override");
    let path = dir.file(
        "runtime-tools.toml",
        "bind = \"203.0.113.7:1\"\n[[character]]\nname = \"Mio\"\n[[character]]\nname = \"Lanlan\"\n",
    );
    let mut child = Child::start(&[
        "serve",
        "--config",
        path.to_str().unwrap(),
        "--bind",
        "127.0.0.1:0",
        "--character",
        "Zed",
        "--character",
        "Aoi",
    ]);
    let addr = child.listening("127.0.0.1");
    let (status, body) = get(addr, "/api/tools");
    assert_eq!(
        (status, crate::helpers::keys(&body["tools_by_role"])),
        (200, vec!["Zed".to_owned(), "Aoi".to_owned()])
    );
    child.signal("TERM");
    assert_clean_exit(&mut child);
}

#[test]
fn a_bad_bind_option_stops_start_up_naming_the_option() {
    let mut child = Child::start(&["serve", "--bind", "nowhere", "--character", "A"]);
    let status = child.wait();
    let stderr = child.stderr_after_exit();
    assert!(!status.success(), "{status}");
    assert!(stderr.contains("option --bind"), "{stderr}");
    assert!(stderr.contains("\"nowhere\""), "{stderr}");
    assert_eq!(child.remaining_stdout(), Vec::<String>::new());
}

#[test]
fn a_log_pipe_nobody_reads_never_stops_the_server() {
    let mut child = Child::start_with_unread_stderr(&[
        "serve",
        "--bind",
        "127.0.0.1:0",
        "--character",
        "Lanlan",
    ]);
    let addr = child.listening("127.0.0.1");
    // Each registration logs a line at info (the default): far more than the 64 KiB a pipe
    // holds.
    const REGISTRATIONS: usize = 2000;
    for i in 0..REGISTRATIONS {
        let (status, body) = post(
            addr,
            "/api/tools/register",
            &json!({"name": format!("t{i}"), "callback_url": "http://127.0.0.1:9/cb"}),
        );
        assert_eq!(status, 200, "registration {i}: {body}");
    }
    let (status, listing) = get(addr, "/api/tools");
    assert_eq!(status, 200);
    assert_eq!(
        listing["tools_by_role"]["Lanlan"].as_array().map(Vec::len),
        Some(REGISTRATIONS)
    );
    child.signal("TERM");
    assert_eq!(child.wait().code(), Some(0));
}
