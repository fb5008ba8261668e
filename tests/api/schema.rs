//! Checks client events against the official OpenAI Realtime GA schema, using the `openai`
//! Python package, and asks the reference Python implementation of JSON Schema (`jsonschema`)
//! for its verdicts; both pinned in tests/requirements.txt, in a virtualenv the tests make
//! themselves.

use std::process::{Command, Stdio};

use serde_json::Value;

use crate::python::{python, repo_file};

/// Validates `events` (one client event each); `Err` carries the validator's explanation.
pub async fn validate_client_events(events: Vec<Value>) -> Result<String, String> {
    run_script("tests/realtime_schema.py", events).await
}

/// Validates Gemini Live client messages (one each) against the official `google-genai` SDK's
/// `LiveClientMessage`; `Err` carries the validator's explanation.
pub async fn validate_gemini_messages(messages: Vec<Value>) -> Result<String, String> {
    run_script("tests/gemini_schema.py", messages).await
}

/// The reference implementation's verdict on each request (`{"schema": S}` or
/// `{"schema": S, "instance": I}`): `schema-invalid`, `valid` or `invalid`.
pub async fn json_schema_verdicts(requests: Vec<Value>) -> Vec<String> {
    let out = run_script("tests/json_schema_verdicts.py", requests)
        .await
        .unwrap_or_else(|e| panic!("the jsonschema verdicts failed: {e}"));
    out.lines().map(str::to_owned).collect()
}

/// Runs a Python script of tests/ in the virtualenv with one JSON value per line on stdin;
/// `Ok` is its standard output, `Err` its standard error when it failed.
async fn run_script(script: &'static str, lines: Vec<Value>) -> Result<String, String> {
    actix_web::rt::task::spawn_blocking(move || {
        let python = python()?;
        let mut child = Command::new(python)
            .arg(repo_file(script))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| e.to_string())?;
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().unwrap();
            for line in &lines {
                writeln!(stdin, "{line}").map_err(|e| e.to_string())?;
            }
        }
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    })
    .await
    .expect("validator thread")
}
