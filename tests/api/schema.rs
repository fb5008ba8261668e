//! Checks client events against the official OpenAI Realtime GA schema, using the `openai`
//! Python package (pinned in tests/requirements.txt) in a virtualenv the tests make themselves.

use std::process::{Command, Stdio};

use serde_json::Value;

use crate::python::{python, repo_file};

/// Validates `events` (one client event each); `Err` carries the validator's explanation.
pub async fn validate_client_events(events: Vec<Value>) -> Result<String, String> {
    actix_web::rt::task::spawn_blocking(move || {
        let python = python()?;
        let mut child = Command::new(python)
            .arg(repo_file("tests/realtime_schema.py"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| e.to_string())?;
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().unwrap();
            for event in &events {
                writeln!(stdin, "{event}").map_err(|e| e.to_string())?;
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
