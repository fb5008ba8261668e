//! Checks client events against the official OpenAI Realtime GA schema, using the `openai`
//! Python package (pinned in tests/requirements.txt) in a virtualenv the tests make themselves.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

use crate::helpers::cannot_run;

static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();

fn repo_file(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The virtualenv's python, created and provisioned on first use.
fn python() -> Result<PathBuf, String> {
    PYTHON
        .get_or_init(|| {
            let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("test-venv");
            let python = venv.join("bin/python");
            let ready = |p: &PathBuf| {
                Command::new(p)
                    .args(["-c", "import openai.types.realtime"])
                    .status()
                    .is_ok_and(|s| s.success())
            };
            if ready(&python) {
                return Ok(python);
            }
            let run = |cmd: &mut Command| -> Result<(), String> {
                let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
                if out.status.success() {
                    Ok(())
                } else {
                    Err(format!(
                        "{cmd:?} failed: {}",
                        String::from_utf8_lossy(&out.stderr)
                    ))
                }
            };
            run(Command::new("python3").arg("-m").arg("venv").arg(&venv))?;
            run(Command::new(venv.join("bin/pip"))
                .args(["install", "--quiet", "--disable-pip-version-check", "-r"])
                .arg(repo_file("tests/requirements.txt")))?;
            if ready(&python) {
                Ok(python)
            } else {
                Err("openai package did not import after install".into())
            }
        })
        .clone()
}

/// Validates `events` (one client event each); `Err` carries the validator's explanation.
/// `None`: the validator could not be set up (no `python3` with `venv`, no PyPI), so the caller
/// skips — except under `CI=true`, where this fails the test instead.
pub async fn validate_client_events(
    test: &str,
    events: Vec<Value>,
) -> Option<Result<String, String>> {
    let python = match actix_web::rt::task::spawn_blocking(python).await {
        Ok(Ok(python)) => python,
        Ok(Err(setup)) => {
            cannot_run(
                test,
                &format!("the schema validator could not be set up: {setup}"),
            );
            return None;
        }
        Err(e) => panic!("validator set-up thread: {e}"),
    };
    let report = actix_web::rt::task::spawn_blocking(move || {
        let mut child = Command::new(python)
            .arg(repo_file("tests/realtime_schema.py"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the validator starts");
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().unwrap();
            for event in &events {
                writeln!(stdin, "{event}").expect("event written to the validator");
            }
        }
        let out = child.wait_with_output().expect("the validator ran");
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    })
    .await
    .expect("validator thread");
    Some(report)
}
