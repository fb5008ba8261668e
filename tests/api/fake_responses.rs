//! The fake Responses API upstream of the Responses tests: `tests/responses_upstream.py`, run with
//! the test virtualenv's interpreter. It checks every request against openai-python's own
//! types and refuses, as the real API would, a request that names a response it never stored or
//! leaves a call unanswered; the test scripts its answers and reads back what it got.

use std::process::Command;

use serde_json::{Value, json};

use crate::child::LineChild;
use crate::python::{repo_file, venv_python};

pub struct FakeResponses {
    process: LineChild,
    /// `http://127.0.0.1:PORT`.
    root: String,
}

impl FakeResponses {
    pub async fn start() -> Self {
        let mut process = LineChild::spawn_talking(
            Command::new(venv_python().await)
                .arg(repo_file("tests/responses_upstream.py"))
                .env("PYTHONUNBUFFERED", "1"),
        );
        let line = process.expect_line("listening ").await;
        let root = line["listening ".len()..].to_owned();
        Self { process, root }
    }

    /// The upstream's base URL (`.../v1`), as `[character.chat] url` names it.
    pub fn base(&self) -> String {
        format!("{}/v1", self.root)
    }

    async fn ask(&mut self, command: Value) -> Value {
        self.process.ask_json(&command).await
    }

    /// Queues answers, one per request to come (see the script's doc for their form).
    pub async fn script(&mut self, answers: Vec<Value>) {
        assert_eq!(
            self.ask(json!({"cmd": "script", "answers": answers})).await,
            json!({"ok": true})
        );
    }

    /// Every request so far: `body`, `authorization`, `stream`, and `refused` (null, or why the
    /// fake refused it as the real API would).
    pub async fn requests(&mut self) -> Vec<Value> {
        let answer = self.ask(json!({"cmd": "requests"})).await;
        answer["requests"].as_array().cloned().unwrap_or_default()
    }

    /// The request bodies so far, each asserted to have been taken (none refused).
    pub async fn bodies(&mut self) -> Vec<Value> {
        self.requests()
            .await
            .into_iter()
            .map(|r| {
                assert_eq!(r["refused"], Value::Null, "the fake refused a request: {r}");
                r["body"].clone()
            })
            .collect()
    }
}

/// A scripted answer of these output items.
pub fn answer(items: Vec<Value>) -> Value {
    json!({"output": items})
}

pub fn message(text: &str) -> Value {
    json!({"type": "message", "text": text})
}

pub fn reasoning(summary: &str) -> Value {
    json!({"type": "reasoning", "summary": summary})
}

pub fn call(call_id: &str, name: &str, arguments: Value) -> Value {
    json!({"type": "function_call", "call_id": call_id, "name": name,
           "arguments": arguments.to_string()})
}
