//! What the harnesses that run the release server as a child process share: starting it on a
//! configuration, stopping it however the run ends, and reading its CPU time.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// Kernel clock ticks per second of `/proc/<pid>/stat` (USER_HZ, 100 on Linux).
const TICKS_PER_SECOND: f64 = 100.0;

/// The release server (or the binary `RUNTIME_TOOLS_BIN` names, e.g. an older build to compare
/// in one sitting), killed however the run ends (a failed assertion included).
pub struct Server {
    child: Child,
    /// `HOST:PORT` it listens on.
    pub address: String,
}

impl Server {
    /// Starts `serve --config CONFIG` and waits for the address it prints; its log goes to
    /// `stderr`, with `RUST_LOG` set to `log_level` when given (the server's default otherwise).
    pub fn start(config: &Path, stderr: Stdio, log_level: Option<&str>) -> Self {
        let program = std::env::var_os("RUNTIME_TOOLS_BIN")
            .unwrap_or_else(|| env!("CARGO_BIN_EXE_runtime-tools").into());
        Self::start_program(program.as_ref(), config, stderr, log_level)
    }

    /// [`Server::start`] of the server binary `program` (e.g. another build, measured
    /// alternately with this one).
    pub fn start_program(
        program: &std::ffi::OsStr,
        config: &Path,
        stderr: Stdio,
        log_level: Option<&str>,
    ) -> Self {
        let mut command = Command::new(program);
        command
            .args(["serve", "--config"])
            .arg(config)
            .stdout(Stdio::piped())
            .stderr(stderr);
        if let Some(level) = log_level {
            command.env("RUST_LOG", level);
        }
        Self::spawn(&mut command)
    }

    /// Starts `command` (stdout piped) and waits for the `listening on http://HOST:PORT` line it
    /// prints first: the server, or another process a harness measures the same way.
    pub fn spawn(command: &mut Command) -> Self {
        command.stdout(Stdio::piped());
        let mut child = command.spawn().expect("the process starts");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut server = Server {
            child,
            address: String::new(),
        };
        let mut lines = BufReader::new(stdout).lines();
        server.address = loop {
            let line = lines
                .next()
                .expect("the process prints its address")
                .expect("a line");
            if let Some(address) = line.strip_prefix("listening on http://") {
                break address.trim().to_owned();
            }
        };
        // Keep reading so the server never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        server
    }

    /// utime + stime of the process so far, in seconds.
    pub fn cpu_seconds(&self) -> f64 {
        let pid = self.child.id();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
        // Fields after the command name (which is in parentheses and may hold spaces).
        let rest = &stat[stat.rfind(')').expect("a stat line") + 2..];
        let fields: Vec<&str> = rest.split(' ').collect();
        let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
        ticks / TICKS_PER_SECOND
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value at fraction `p` of `sorted` (NaN when empty).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}
