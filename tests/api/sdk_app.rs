//! The realtime app of the relay tests: `tests/realtime_app.py`, the official OpenAI Python
//! SDK's realtime client, run with the test virtualenv's interpreter and driven one JSON command
//! at a time over stdin / stdout (each answer awaited with a deadline).

use std::io::Write;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::Duration;

use crate::helpers::Lines;
use crate::schema::{python, repo_file};
use base64::Engine;
use serde_json::{Value, json};

/// Longest wait for one answer of the app (a loaded machine; the first connect imports the SDK).
pub const ANSWER_DEADLINE: Duration = Duration::from_secs(60);

pub struct SdkApp {
    child: Child,
    stdin: ChildStdin,
    answers: Lines,
}

impl SdkApp {
    pub fn start() -> Self {
        let python = python().expect("the test virtualenv (tests/requirements.txt) is ready");
        let mut child = Command::new(python)
            .arg(repo_file("tests/realtime_app.py"))
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("tests/realtime_app.py starts");
        let stdin = child.stdin.take().expect("piped stdin");
        let answers = Lines::follow(child.stdout.take().expect("piped stdout"));
        Self {
            child,
            stdin,
            answers,
        }
    }

    /// Sends one command and waits for its answer.
    pub async fn ask(&mut self, command: Value) -> Value {
        writeln!(self.stdin, "{command}").expect("the app reads its commands");
        self.stdin.flush().expect("command sent");
        match self.answers.next(ANSWER_DEADLINE).await {
            Ok(Some(line)) => serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("the app answered {line:?} ({e}) to {command}")),
            Ok(None) => panic!("the app exited before answering {command}"),
            Err(_) => panic!("the app did not answer {command} within {ANSWER_DEADLINE:?}"),
        }
    }

    /// Connects through the relay at `base` (`ws://HOST:PORT/v1`) with these query parameters.
    pub async fn connect(&mut self, base: &str, query: Value) -> Value {
        self.ask(
            json!({"cmd": "connect", "base": base, "model": "gpt-realtime",
                        "query": query, "api_key": "sk-app"}),
        )
        .await
    }

    /// Connects and panics unless the relay accepted.
    pub async fn connect_ok(&mut self, base: &str, query: Value) {
        let answer = self.connect(base, query).await;
        assert_eq!(answer, json!({"ok": true}), "connect");
    }

    /// The SDK's typed send of one client event.
    pub async fn send(&mut self, event: Value) {
        let answer = self.ask(json!({"cmd": "send", "event": event})).await;
        assert_eq!(answer, json!({"ok": true}), "send");
    }

    /// A text frame exactly as given.
    pub async fn send_raw(&mut self, text: &str) {
        let answer = self.ask(json!({"cmd": "send_raw", "text": text})).await;
        assert_eq!(answer, json!({"ok": true}), "send_raw");
    }

    pub async fn send_binary(&mut self, bytes: &[u8]) {
        let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
        let answer = self.ask(json!({"cmd": "send_binary", "b64": b64})).await;
        assert_eq!(answer, json!({"ok": true}), "send_binary");
    }

    /// The next frame: `{"text": T, "type": SDK's event type}` or `{"binary_b64": B}`.
    pub async fn recv(&mut self) -> Value {
        self.ask(json!({"cmd": "recv"})).await
    }

    /// The next text frame, parsed, with the SDK's reading of its type checked against it.
    pub async fn recv_event(&mut self) -> Value {
        let frame = self.recv().await;
        let text = frame["text"]
            .as_str()
            .unwrap_or_else(|| panic!("expected a text frame, got {frame}"));
        let event: Value = serde_json::from_str(text).expect("a JSON event");
        assert_eq!(
            frame["type"], event["type"],
            "the SDK reads the event's type"
        );
        event
    }

    /// Reads until the server closes; `(code, reason, frames skipped on the way)`.
    pub async fn wait_close(&mut self) -> (Value, Value, u64) {
        let answer = self.ask(json!({"cmd": "wait_close"})).await;
        (
            answer["code"].clone(),
            answer["reason"].clone(),
            answer["skipped"]
                .as_u64()
                .unwrap_or_else(|| panic!("{answer}")),
        )
    }

    pub async fn close(&mut self, code: u16, reason: &str) {
        let answer = self
            .ask(json!({"cmd": "close", "code": code, "reason": reason}))
            .await;
        assert_eq!(answer, json!({"ok": true}), "close");
    }
}

impl Drop for SdkApp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
