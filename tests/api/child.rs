//! A child process whose stdout the test follows line by line, each wait with a deadline (the
//! lines are read on a thread, so waiting never blocks the actors), and which may be written to
//! line by line; killed if a test fails before it exits.

use std::io::{BufRead, BufReader, Write};
use std::process::{ChildStdin, Command, Stdio};
use std::time::Duration;

use tokio::sync::mpsc;

/// Longest wait for a child's next expected line or its exit (a loaded machine).
pub const DEADLINE: Duration = Duration::from_secs(60);

pub struct LineChild {
    /// `None` once it has been waited for.
    child: Option<std::process::Child>,
    lines: mpsc::UnboundedReceiver<String>,
    /// Its stdin, when it takes lines from the test.
    stdin: Option<ChildStdin>,
    /// Every line so far, for failure messages.
    seen: Vec<String>,
}

impl LineChild {
    /// Spawns `command` with stdout piped to the test (stdin closed, stderr inherited).
    pub fn spawn(command: &mut Command) -> Self {
        Self::start(command.stdin(Stdio::null()))
    }

    /// Spawns `command` with stdin and stdout piped to the test (stderr inherited): a child
    /// driven one line at a time ([`LineChild::send_line`], [`LineChild::next_line`]).
    pub fn spawn_talking(command: &mut Command) -> Self {
        let mut talking = Self::start(command.stdin(Stdio::piped()));
        talking.stdin = talking.child.as_mut().and_then(|c| c.stdin.take());
        talking
    }

    fn start(command: &mut Command) -> Self {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("{command:?} runs: {e}"));
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child: Some(child),
            lines,
            stdin: None,
            seen: Vec::new(),
        }
    }

    /// Writes one line to the child's stdin.
    pub fn send_line(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("spawned with spawn_talking");
        writeln!(stdin, "{line}").expect("the child reads its stdin");
        stdin.flush().expect("line sent");
    }

    /// The next line, whatever it says: `Ok(None)` when the child closed its stdout, `Err` past
    /// [`DEADLINE`].
    pub async fn next_line(&mut self) -> Result<Option<String>, ()> {
        let line = tokio::time::timeout(DEADLINE, self.lines.recv())
            .await
            .map_err(drop)?;
        self.seen.extend(line.clone());
        Ok(line)
    }

    /// Sends one JSON command line and waits for the child's JSON answer line; panics (naming
    /// the command) when it exits, stays silent past [`DEADLINE`] or answers with something
    /// else.
    pub async fn ask_json(&mut self, command: &serde_json::Value) -> serde_json::Value {
        self.send_line(&command.to_string());
        match self.next_line().await {
            Ok(Some(line)) => serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("the child answered {line:?} ({e}) to {command}")),
            Ok(None) => panic!("the child exited before answering {command}"),
            Err(_) => panic!("the child did not answer {command} within {DEADLINE:?}"),
        }
    }

    /// Every line read so far.
    pub fn seen(&self) -> &[String] {
        &self.seen
    }

    /// Waits for the next line that starts with `prefix`; returns it.
    pub async fn expect_line(&mut self, prefix: &str) -> String {
        let waited = tokio::time::timeout(DEADLINE, async {
            while let Some(line) = self.lines.recv().await {
                self.seen.push(line.clone());
                if line.starts_with(prefix) {
                    return Some(line);
                }
            }
            None
        })
        .await;
        match waited {
            Ok(Some(line)) => line,
            Ok(None) => panic!(
                "the child exited before {prefix:?}; its output: {:#?}",
                self.seen
            ),
            Err(_) => panic!(
                "no {prefix:?} line within {DEADLINE:?}; output: {:#?}",
                self.seen
            ),
        }
    }

    pub fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("child running").id();
        let status = Command::new("kill")
            .args([format!("-{signal}"), pid.to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// Waits (off the actors' thread) for the child to exit; returns its exit code.
    pub async fn wait_exit(mut self) -> Option<i32> {
        let mut child = self.child.take().expect("child running");
        let status = tokio::time::timeout(
            DEADLINE,
            actix_web::rt::task::spawn_blocking(move || child.wait()),
        )
        .await
        .expect("child exits in time")
        .expect("wait task")
        .expect("child waited for");
        status.code()
    }
}

impl Drop for LineChild {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
