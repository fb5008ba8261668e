//! The app of the Responses tests: `tests/responses_app.py`, the official OpenAI Python SDK's
//! `responses` client and the OpenAI Agents SDK (its default model class) pointed at a base URL,
//! run with the test virtualenv's interpreter and driven one JSON command at a time.

use std::process::Command;

use serde_json::{Value, json};

use crate::child::{DEADLINE, LineChild};
use crate::python::{repo_file, venv_python};

pub struct ResponsesApp {
    app: LineChild,
    client: Value,
}

impl ResponsesApp {
    /// An app whose SDK's base URL is `base` (the server's `/v1`).
    pub async fn start(base: &str) -> Self {
        let app = LineChild::spawn_talking(
            Command::new(venv_python().await)
                .arg(repo_file("tests/responses_app.py"))
                .env("PYTHONUNBUFFERED", "1"),
        );
        Self {
            app,
            client: json!({"base": base, "api_key": "sk-app", "query": {}}),
        }
    }

    /// Sends one command (with the client settings) and waits for its answer.
    pub async fn ask(&mut self, mut command: Value) -> Value {
        if let (Some(command), Some(client)) = (command.as_object_mut(), self.client.as_object()) {
            for (key, value) in client {
                command.entry(key.clone()).or_insert(value.clone());
            }
        }
        self.app.send_line(&command.to_string());
        match self.app.next_line().await {
            Ok(Some(line)) => serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("the app answered {line:?} ({e}) to {command}")),
            Ok(None) => panic!("the app exited before answering {command}"),
            Err(_) => panic!("the app did not answer {command} within {DEADLINE:?}"),
        }
    }

    /// `client.responses.create(**request)`: the response, or panics with the error.
    pub async fn create(&mut self, request: Value) -> Value {
        let answer = self.ask(json!({"cmd": "create", "request": request})).await;
        answer
            .get("response")
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

    /// `client.responses.stream(**request)`: the helper's events and its final response.
    pub async fn stream(&mut self, request: Value) -> (Vec<Value>, Value) {
        let answer = self.ask(json!({"cmd": "stream", "request": request})).await;
        let final_response = answer
            .get("final")
            .cloned()
            .unwrap_or_else(|| panic!("the stream helper failed: {answer}"));
        let events = answer["events"].as_array().cloned().unwrap_or_default();
        (events, final_response)
    }

    /// `create(stream=True, **request)` read to its end: the raw events.
    pub async fn raw_stream(&mut self, request: Value) -> Vec<Value> {
        let answer = self.ask(json!({"cmd": "raw_stream", "request": request})).await;
        answer
            .get("events")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_else(|| panic!("the stream failed: {answer}"))
    }

    /// One Agents SDK run (see the script's doc): its answer, or panics with the error.
    pub async fn agent(&mut self, run: Value) -> Value {
        let mut command = json!({"cmd": "agent"});
        if let (Some(command), Some(run)) = (command.as_object_mut(), run.as_object()) {
            command.extend(run.clone());
        }
        let answer = self.ask(command).await;
        assert!(answer.get("error").is_none(), "the agent failed: {answer}");
        answer
    }
}
