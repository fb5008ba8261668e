//! The chat app of the chat tests: `tests/chat_app.py`, the official OpenAI Python SDK's
//! chat-completions client pointed at a base URL, run with the test virtualenv's interpreter and
//! driven one JSON command at a time (each answer awaited with a deadline).

use std::process::Command;

use serde_json::{Value, json};

use crate::child::LineChild;
use crate::python::{repo_file, venv_python};

/// A Python SDK app of `tests/` (its commands: `tests/sdk_commands.py`), with the client settings
/// every command carries: base URL, query, headers, key.
pub struct SdkApp {
    app: LineChild,
    client: Value,
}

impl SdkApp {
    /// `script` (under the repository) whose SDK's base URL is `base`.
    pub async fn start(script: &str, base: &str) -> Self {
        let app = LineChild::spawn_talking(
            Command::new(venv_python().await)
                .arg(repo_file(script))
                .env("PYTHONUNBUFFERED", "1"),
        );
        Self {
            app,
            client: json!({"base": base, "api_key": "sk-app", "query": {}, "headers": {}}),
        }
    }

    /// Sends one command (with the client settings it does not name itself) and waits for its
    /// answer.
    pub async fn ask(&mut self, mut command: Value) -> Value {
        if let (Some(command), Some(client)) = (command.as_object_mut(), self.client.as_object()) {
            for (key, value) in client {
                command.entry(key.clone()).or_insert(value.clone());
            }
        }
        self.app.ask_json(&command).await
    }

    /// Sends one command; its answer's `key`, or panics with the whole answer.
    pub async fn answer(&mut self, command: Value, key: &str) -> Value {
        let answer = self.ask(command).await;
        answer
            .get(key)
            .cloned()
            .unwrap_or_else(|| panic!("no {key:?} in the answer: {answer}"))
    }
}

pub struct ChatApp {
    sdk: SdkApp,
}

impl ChatApp {
    /// An app whose SDK's base URL is `base` (the server's `/v1`, or an upstream's).
    pub async fn start(base: &str) -> Self {
        Self {
            sdk: SdkApp::start("tests/chat_app.py", base).await,
        }
    }

    /// The SDK's `default_query` from now on.
    pub fn query(&mut self, query: Value) -> &mut Self {
        self.sdk.client["query"] = query;
        self
    }

    /// The SDK's `default_headers` from now on.
    pub fn headers(&mut self, headers: Value) -> &mut Self {
        self.sdk.client["headers"] = headers;
        self
    }

    pub fn api_key(&mut self, key: &str) -> &mut Self {
        self.sdk.client["api_key"] = json!(key);
        self
    }

    /// Sends one command (with the client settings) and waits for its answer.
    pub async fn ask(&mut self, command: Value) -> Value {
        self.sdk.ask(command).await
    }

    /// `client.chat.completions.create(**request)`: the completion, or panics with the error.
    pub async fn create(&mut self, request: Value) -> Value {
        let answer = self.ask(json!({"cmd": "create", "request": request})).await;
        answer
            .get("completion")
            .cloned()
            .unwrap_or_else(|| panic!("the request failed: {answer}"))
    }

    /// `create(**request)` that must fail: the SDK's error.
    pub async fn create_error(&mut self, request: Value) -> Value {
        let answer = self.ask(json!({"cmd": "create", "request": request})).await;
        answer
            .get("error")
            .cloned()
            .unwrap_or_else(|| panic!("the request did not fail: {answer}"))
    }

    /// `create(stream=True, **request)` read to its end: the answer (`chunks`, maybe `error`).
    pub async fn stream(&mut self, request: Value) -> Value {
        self.ask(json!({"cmd": "stream", "request": request})).await
    }

    /// The chunks of a stream that must end well.
    pub async fn chunks(&mut self, request: Value) -> Vec<Value> {
        let answer = self.stream(request).await;
        assert!(answer.get("error").is_none(), "the stream failed: {answer}");
        answer["chunks"].as_array().cloned().unwrap_or_default()
    }

    /// `client.chat.completions.stream(**request)`: the SDK's accumulated final completion.
    pub async fn stream_helper(&mut self, request: Value) -> Value {
        let answer = self
            .ask(json!({"cmd": "stream_helper", "request": request}))
            .await;
        answer
            .get("final")
            .cloned()
            .unwrap_or_else(|| panic!("the stream helper failed: {answer}"))
    }

    /// Opens a stream and reads until its first chunk with text; the stream stays open.
    pub async fn open_stream(&mut self, request: Value) -> Value {
        let answer = self
            .ask(json!({"cmd": "open_stream", "request": request}))
            .await;
        answer
            .get("first")
            .cloned()
            .unwrap_or_else(|| panic!("no text arrived: {answer}"))
    }

    /// The open stream's next chunk, or `None` at its end.
    pub async fn next(&mut self) -> Option<Value> {
        let answer = self.ask(json!({"cmd": "next"})).await;
        answer.get("chunk").cloned()
    }

    /// Closes the open stream (and its connection).
    pub async fn close_stream(&mut self) {
        let answer = self.ask(json!({"cmd": "close_stream"})).await;
        assert_eq!(answer, json!({"ok": true}));
    }

    /// `client.models.list()`: the ids.
    pub async fn models(&mut self) -> Value {
        self.ask(json!({"cmd": "models"})).await
    }
}

/// The text a stream's chunks carry, joined.
pub fn streamed_text(chunks: &[Value]) -> String {
    chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect()
}
