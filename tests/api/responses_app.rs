//! The app of the Responses tests: `tests/responses_app.py`, the official OpenAI Python SDK's
//! `responses` client and the OpenAI Agents SDK (its default model class) pointed at a base URL,
//! run with the test virtualenv's interpreter and driven one JSON command at a time; and the
//! official OpenAI Node.js SDK's stream helper (`tests/responses_node_app.cjs`).

use std::process::Command;

use serde_json::{Value, json};

use crate::chat_app::SdkApp;
use crate::child::LineChild;
use crate::node::openai_node;
use crate::python::repo_file;

pub struct ResponsesApp {
    sdk: SdkApp,
}

impl ResponsesApp {
    /// An app whose SDK's base URL is `base` (the server's `/v1`).
    pub async fn start(base: &str) -> Self {
        Self {
            sdk: SdkApp::start("tests/responses_app.py", base).await,
        }
    }

    /// `client.responses.create(**request)`: the response, or panics with the error.
    pub async fn create(&mut self, request: Value) -> Value {
        let command = json!({"cmd": "create", "request": request});
        self.sdk.answer(command, "response").await
    }

    /// `create(**request)` that must fail: the SDK's error.
    pub async fn create_error(&mut self, request: Value) -> Value {
        let command = json!({"cmd": "create", "request": request});
        self.sdk.answer(command, "error").await
    }

    /// `client.responses.stream(**request)`: the helper's events and its final response.
    pub async fn stream(&mut self, request: Value) -> (Vec<Value>, Value) {
        let answer = self
            .sdk
            .ask(json!({"cmd": "stream", "request": request}))
            .await;
        let final_response = answer
            .get("final")
            .cloned()
            .unwrap_or_else(|| panic!("the stream helper failed: {answer}"));
        let events = answer["events"].as_array().cloned().unwrap_or_default();
        (events, final_response)
    }

    /// `create(stream=True, **request)` read to its end: the raw events.
    pub async fn raw_stream(&mut self, request: Value) -> Vec<Value> {
        let command = json!({"cmd": "raw_stream", "request": request});
        let events = self.sdk.answer(command, "events").await;
        events.as_array().cloned().unwrap_or_default()
    }

    /// One Agents SDK run (see the script's doc): its answer, or panics with the error.
    pub async fn agent(&mut self, run: Value) -> Value {
        let mut command = json!({"cmd": "agent"});
        if let (Some(command), Some(run)) = (command.as_object_mut(), run.as_object()) {
            command.extend(run.clone());
        }
        let answer = self.sdk.ask(command).await;
        assert!(answer.get("error").is_none(), "the agent failed: {answer}");
        answer
    }
}

/// `client.responses.stream(request)` in openai-node, against the server's `/v1` at `base`, read
/// to its end by the SDK's helper: `{"events": [types], "final": response}`, or `{"error"}` when
/// the helper refused the stream.
pub async fn node_stream(base: &str, request: Value) -> Value {
    let package = actix_web::rt::task::spawn_blocking(openai_node)
        .await
        .expect("the install task")
        .unwrap_or_else(|e| panic!("openai-node (npm): {e}"));
    let mut process = LineChild::spawn(
        Command::new("node")
            .arg(repo_file("tests/responses_node_app.cjs"))
            .arg(package)
            .arg(base)
            .arg(request.to_string()),
    );
    let line = process.expect_line("{").await;
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
}
