//! Logging: human-readable lines on stderr, filtered like `RUST_LOG` (`info` by default).

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. Safe to call more than once (later calls do nothing).
pub fn init() {
    init_with_default("info");
}

/// [`init`], with `default` as the filter when `RUST_LOG` is not set (the demo keeps its
/// output clean with `warn`).
pub fn init_with_default(default: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
    log_panics();
}

/// Replaces the default panic report with one log line, so a panicking actor (an in-process
/// tool, a manager) is reported once, in the log, while the rest of the server keeps running.
fn log_panics() {
    std::panic::set_hook(Box::new(|info| {
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(no message)".to_owned());
        let location = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let thread = std::thread::current();
        tracing::error!(
            thread = thread.name().unwrap_or("unnamed"),
            %location,
            "panic: {message}; the actor that panicked stopped, the rest keep running"
        );
    }));
}
