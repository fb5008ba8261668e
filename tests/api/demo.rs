//! `runtime-tools demo`, run as the built binary: it exits 0 within the deadline and prints
//! every step of the round trip (the registration and its `affected_roles`, the `session.update`
//! the model saw, the callback payload, the result the model got), with logs kept off stdout.

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::{Value, json};

/// Longest the demo may take (it needs well under a second; a loaded 2-core machine is slow).
const DEADLINE: Duration = Duration::from_secs(60);

const BINARY: &str = env!("CARGO_BIN_EXE_runtime-tools");

/// Runs `runtime-tools demo`; returns its exit code, stdout and stderr.
fn run_demo() -> (Option<i32>, String, String) {
    let mut child = Command::new(BINARY)
        .arg("demo")
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runtime-tools starts");
    let pid = child.id();
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let errors = std::thread::spawn(move || {
        let mut err = String::new();
        let _ = stderr.read_to_string(&mut err);
        err
    });
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let mut out = String::new();
        let _ = stdout.read_to_string(&mut out);
        let status = child.wait().expect("child waited for");
        let err = errors.join().expect("stderr read");
        let _ = done.send((status.code(), out, err));
    });
    finished.recv_timeout(DEADLINE).unwrap_or_else(|_| {
        // Our own child, by its id: do not leave it running.
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        panic!("runtime-tools demo did not finish within {DEADLINE:?}")
    })
}

/// The output of step `[n]`: its heading and the JSON blocks printed under it.
fn step(stdout: &str, n: u32) -> (String, Vec<Value>) {
    let marker = format!("[{n}] ");
    let start = stdout
        .find(&marker)
        .unwrap_or_else(|| panic!("no step {n} in:\n{stdout}"));
    let section = &stdout[start..];
    let end = section[1..].find("\n[").map_or(section.len(), |i| i + 1);
    let mut lines = section[..end].lines();
    let heading = lines.next().unwrap().to_owned();
    let mut blocks = Vec::new();
    let mut block = String::new();
    for line in lines {
        if line == "    {" {
            block.clear();
        }
        if line.starts_with("    ") {
            block.push_str(line);
            block.push('\n');
        }
        if line == "    }" {
            blocks.push(serde_json::from_str(&block).expect("a JSON block"));
        }
    }
    (heading, blocks)
}

#[test]
fn the_demo_prints_the_whole_round_trip_and_exits_0() {
    let (code, stdout, stderr) = run_demo();
    assert_eq!(code, Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        !stdout.contains(" INFO ") && !stdout.contains(" WARN ") && !stdout.contains(" ERROR "),
        "logs on stdout:\n{stdout}"
    );
    assert!(!stderr.contains("ERROR"), "{stderr}");

    let (_, connected) = step(&stdout, 2);
    assert_eq!(
        connected[0]["session"],
        json!({"type": "realtime", "tools": []})
    );

    let (heading, registration) = step(&stdout, 3);
    assert!(heading.contains("get_weather"), "{heading}");
    // With its token (a clear without it would be refused: step 9 removes the tool).
    assert!(
        heading.contains("with its X-Plugin-Token (which binds plugin:demo-weather to it)"),
        "{heading}"
    );
    assert_eq!(
        crate::helpers::without_instance_id("/api/tools/register", 200, registration[0].clone()),
        json!({"ok": true, "registered": "get_weather", "affected_roles": ["Lanlan"], "failed_roles": []})
    );
    assert!(
        stdout.contains("    affected_roles: [\"Lanlan\"]"),
        "{stdout}"
    );

    let (_, update) = step(&stdout, 4);
    assert_eq!(update[0]["type"], "session.update");
    assert_eq!(update[0]["session"]["tools"][0]["name"], "get_weather");

    let (_, model_call) = step(&stdout, 5);
    assert_eq!(
        model_call[0]["type"],
        "response.function_call_arguments.done"
    );

    let (_, callback) = step(&stdout, 6);
    assert_eq!(
        callback[0],
        json!({"name": "get_weather", "arguments": {"location": "Shanghai"},
               "call_id": "call_demo_1", "raw_arguments": "{\"location\":\"Shanghai\"}"})
    );

    let (_, result) = step(&stdout, 7);
    assert_eq!(
        result[0]["item"],
        json!({"type": "function_call_output", "call_id": "call_demo_1",
               "output": "{\"location\":\"Shanghai\",\"temperature_c\":28,\"sky\":\"clear\"}"})
    );

    let (_, next) = step(&stdout, 8);
    assert_eq!(next[0]["type"], "response.create");

    let (_, cleared) = step(&stdout, 9);
    assert_eq!(cleared[0]["removed"], 1);
    assert!(stdout.trim_end().ends_with("have stopped."), "{stdout}");
}
