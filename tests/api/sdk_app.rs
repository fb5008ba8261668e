//! The realtime app of the relay tests: `tests/realtime_app.py`, the official OpenAI Python
//! SDK's realtime client, run with the test virtualenv's interpreter and driven one JSON command
//! at a time over stdin / stdout (each answer awaited with a deadline: a loaded machine; the
//! first connect imports the SDK).

use std::process::Command;

use crate::child::LineChild;
use crate::python::{repo_file, venv_python};
use base64::Engine;
use serde_json::{Value, json};

pub struct SdkApp {
    app: LineChild,
}

impl SdkApp {
    pub async fn start() -> Self {
        let app = LineChild::spawn_talking(
            Command::new(venv_python().await)
                .arg(repo_file("tests/realtime_app.py"))
                .env("PYTHONUNBUFFERED", "1"),
        );
        Self { app }
    }

    /// Sends one command and waits for its answer.
    pub async fn ask(&mut self, command: Value) -> Value {
        self.app.ask_json(&command).await
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
