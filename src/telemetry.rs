//! Logging: human-readable lines on stderr, filtered like `RUST_LOG` (`info` by default).
//!
//! Lines never block the thread that logs them (an actor's, an HTTP worker's): they go through
//! a bounded queue to a thread of its own that writes them to stderr (tracing-appender's
//! non-blocking writer). When stderr does not take them — a pipe that an app launching the
//! server never reads — the queue fills and further lines are dropped and counted; once stderr
//! takes lines again, that thread writes how many were dropped before the next line. That
//! thread also redacts the keys the server holds (`domain::secrets`) from each line.
//!
//! Every event is one line: the value of every field, the message included, is written with its
//! control characters escaped as JSON escapes them (`\n`, `\u001b`, ...), and with them the
//! characters that move or reorder text on a console (line and paragraph separators,
//! bidirectional controls). Much of what is logged is a peer's text — a model's call id, an
//! upstream's error, an MCP server's message — and it must not be able to write a line of its
//! own, or reach the operator's terminal as an escape sequence (`EscapedFields`).

use std::fmt::{self, Write as _};
use std::io::{self, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use tracing::field::{Field, Visit};
use tracing_appender::non_blocking::{ErrorCounter, NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::Writer;

/// Lines the log holds while stderr does not take them. Enough for a burst (a few hundred
/// registrations, a reconnect storm) to reach a slow reader whole; past it lines are dropped
/// rather than held: a reader that is this far behind may never read again.
pub const LOG_QUEUE_LINES: usize = 8192;

/// Keeps the log's writer thread; dropping it writes what is queued (waiting a second at most).
/// Hold it until the process ends.
#[must_use = "dropping the guard stops the log's writer"]
pub struct LogGuard {
    worker: Option<WorkerGuard>,
    counts: Arc<Counts>,
}

impl Drop for LogGuard {
    fn drop(&mut self) {
        // While stderr takes nothing (lines are being dropped), there is nothing to write what
        // is queued to, and the writer's own shutdown would complain on stdout, which may carry
        // a protocol: the thread is left to end with the process.
        if let Some(worker) = self.worker.take()
            && self.counts.unreported() > 0
        {
            std::mem::forget(worker);
        }
    }
}

/// Lines dropped, and how many of them the writer thread has reported.
#[derive(Default)]
struct Counts {
    dropped: OnceLock<ErrorCounter>,
    reported: AtomicUsize,
}

impl Counts {
    fn unreported(&self) -> usize {
        let dropped = self.dropped.get().map_or(0, ErrorCounter::dropped_lines);
        dropped.saturating_sub(self.reported.load(Ordering::Relaxed))
    }
}

/// Installs the global subscriber. Safe to call more than once (later calls do nothing).
pub fn init() -> LogGuard {
    init_with_default("info")
}

/// [`init`], with `default` as the filter when `RUST_LOG` is not set (the demo keeps its
/// output clean with `warn`).
pub fn init_with_default(default: &str) -> LogGuard {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let (writer, worker, counts) = non_blocking(std::io::stderr(), LOG_QUEUE_LINES);
    let installed = tracing_subscriber::fmt()
        .fmt_fields(EscapedFields)
        .with_env_filter(filter)
        .with_writer(writer)
        .with_target(false)
        .with_ansi(ansi)
        .try_init()
        .is_ok();
    log_panics();
    LogGuard {
        // A writer nobody installed has nothing to write.
        worker: installed.then_some(worker),
        counts,
    }
}

/// A lossy non-blocking writer of at most `lines` queued lines to `sink`, whose thread reports
/// the lines it dropped.
fn non_blocking<W: Write + Send + 'static>(
    sink: W,
    lines: usize,
) -> (
    tracing_appender::non_blocking::NonBlocking,
    WorkerGuard,
    Arc<Counts>,
) {
    let counts = Arc::new(Counts::default());
    let sink = ReportingSink {
        sink,
        counts: counts.clone(),
    };
    let (writer, worker) = NonBlockingBuilder::default()
        .lossy(true)
        .buffered_lines_limit(lines)
        .thread_name("log-writer")
        .finish(sink);
    let _ = counts.dropped.set(writer.error_counter());
    (writer, worker, counts)
}

/// The sink of the writer thread: before each line, a line saying how many were dropped since
/// it last said so; each line with the server's keys redacted. Written by that thread itself,
/// so a report never waits in (or is dropped from) the queue.
struct ReportingSink<W> {
    sink: W,
    counts: Arc<Counts>,
}

impl<W: Write> Write for ReportingSink<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let unreported = self.counts.unreported();
        if unreported > 0 {
            self.sink.write_all(dropped_line(unreported).as_bytes())?;
            self.counts
                .reported
                .fetch_add(unreported, Ordering::Relaxed);
        }
        // Every key the server holds is redacted from every line, whatever logged it.
        let held = crate::domain::secrets::held();
        self.sink.write_all(&held.redact(buf))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.sink.flush()
    }
}

/// The line that reports `count` dropped lines, shaped like the others.
fn dropped_line(count: usize) -> String {
    format!(
        "{}  WARN {count} log lines were dropped: stderr was not taking them (more than \
         {LOG_QUEUE_LINES} were waiting)\n",
        humantime::format_rfc3339_micros(SystemTime::now())
    )
}

/// The fields of a log line as tracing's default format writes them (`message name=value ...`),
/// each value with the characters [`escaped`] picks escaped: whatever a field holds, the event
/// stays one line, and no escape sequence reaches a terminal.
pub(crate) struct EscapedFields;

impl<'writer> FormatFields<'writer> for EscapedFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = EscapingVisitor {
            writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

/// Writes one event's (or span's) fields.
struct EscapingVisitor<'writer> {
    writer: Writer<'writer>,
    first: bool,
    result: fmt::Result,
}

impl Visit for EscapingVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        // As tracing's default: a message as written, any other text quoted.
        if field.name() == "message" {
            self.record_debug(field, &format_args!("{value}"));
        } else {
            self.record_debug(field, &value);
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        let mut text = value.to_string();
        let mut source = value.source();
        while let Some(cause) = source {
            let _ = write!(text, ": {cause}");
            source = cause.source();
        }
        self.record_debug(field, &format_args!("{text}"));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let name = field.name();
        if self.result.is_err() || name.starts_with("log.") {
            return;
        }
        let separator = if std::mem::take(&mut self.first) {
            ""
        } else {
            " "
        };
        let mut escaping = Escaping(&mut self.writer);
        self.result = match name {
            "message" => {
                write!(escaping.0, "{separator}").and_then(|()| write!(escaping, "{value:?}"))
            }
            name => {
                let name = name.strip_prefix("r#").unwrap_or(name);
                write!(escaping.0, "{separator}{name}=")
                    .and_then(|()| write!(escaping, "{value:?}"))
            }
        };
    }
}

/// Writes through to a log line, every character [`escaped`] picks as its JSON escape.
struct Escaping<'a, W: fmt::Write>(&'a mut W);

impl<W: fmt::Write> fmt::Write for Escaping<'_, W> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        let mut plain = 0;
        for (at, c) in text.char_indices() {
            if !escaped(c) {
                continue;
            }
            self.0.write_str(&text[plain..at])?;
            match c {
                '\n' => self.0.write_str("\\n")?,
                '\r' => self.0.write_str("\\r")?,
                '\t' => self.0.write_str("\\t")?,
                c => write!(self.0, "\\u{:04x}", u32::from(c))?,
            }
            plain = at + c.len_utf8();
        }
        self.0.write_str(&text[plain..])
    }
}

/// Whether a log line writes `c` escaped: control characters (C0, DEL, C1), the line and
/// paragraph separators, and the bidirectional controls that reorder what a console shows.
fn escaped(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
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

#[cfg(test)]
mod tests {
    use super::*;

    use std::sync::{Condvar, Mutex};
    use std::time::{Duration, Instant};

    /// A sink that takes nothing until it is opened, and says when it wrote.
    #[derive(Clone, Default)]
    struct Gate {
        open: Arc<(Mutex<bool>, Condvar)>,
        written: Arc<(Mutex<Vec<u8>>, Condvar)>,
    }

    impl Write for Gate {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let (open, changed) = &*self.open;
            let mut is_open = open.lock().unwrap();
            while !*is_open {
                is_open = changed.wait(is_open).unwrap();
            }
            let (written, wrote) = &*self.written;
            written.lock().unwrap().extend_from_slice(buf);
            wrote.notify_all();
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Gate {
        fn open(&self) {
            let (open, changed) = &*self.open;
            *open.lock().unwrap() = true;
            changed.notify_all();
        }

        /// Waits (at most ten seconds) until `lines` lines were written; returns them.
        fn wait_for_lines(&self, lines: usize) -> String {
            let deadline = Instant::now() + Duration::from_secs(10);
            let (written, wrote) = &*self.written;
            let mut text = written.lock().unwrap();
            while text.iter().filter(|&&b| b == b'\n').count() < lines {
                let left = deadline.saturating_duration_since(Instant::now());
                assert!(!left.is_zero(), "{lines} lines not written in time");
                text = wrote.wait_timeout(text, left).unwrap().0;
            }
            String::from_utf8(text.clone()).unwrap()
        }
    }

    /// The lines `log` writes through the server's field format.
    fn logged(log: impl FnOnce()) -> String {
        let lines = Gate::default();
        lines.open();
        let writer = lines.clone();
        let subscriber = tracing_subscriber::fmt()
            .fmt_fields(EscapedFields)
            .with_writer(move || writer.clone())
            .with_target(false)
            .with_ansi(false)
            .without_time()
            .finish();
        tracing::subscriber::with_default(subscriber, log);
        let text = lines.written.0.lock().unwrap().clone();
        String::from_utf8(text).unwrap()
    }

    #[test]
    fn a_peers_text_in_any_field_stays_on_one_line_with_its_control_characters_escaped() {
        let id = "c1\n2026-01-01T00:00:00.000000Z ERROR forged\x1b[2J\u{202e}\u{85}";
        let line = logged(|| {
            tracing::info!(call_id = %id, quoted = id, debug = ?id, "waits: {id}\r\tdone");
        });
        // Display values escaped as JSON does; a `Debug` value was escaped by `Debug` already.
        let forged = "c1\\n2026-01-01T00:00:00.000000Z ERROR forged";
        assert_eq!(
            line,
            format!(
                " INFO waits: {forged}\\u001b[2J\\u202e\\u0085\\r\\tdone \
                 call_id={forged}\\u001b[2J\\u202e\\u0085 \
                 quoted=\"{forged}\\u{{1b}}[2J\\u{{202e}}\\u{{85}}\" \
                 debug=\"{forged}\\u{{1b}}[2J\\u{{202e}}\\u{{85}}\"\n"
            )
        );
    }

    #[test]
    fn an_error_field_with_its_sources_and_plain_text_are_as_tracing_writes_them() {
        let error = std::io::Error::other("disk\nfull");
        let line = logged(|| tracing::warn!(%error, r#type = 3, ok = true, "plain"));
        assert_eq!(line, " WARN plain error=disk\\nfull type=3 ok=true\n");
    }

    #[test]
    fn a_stalled_sink_costs_dropped_lines_that_are_then_reported() {
        let gate = Gate::default();
        let (mut writer, worker, counts) = non_blocking(gate.clone(), 4);
        // The sink takes nothing: every write still returns at once. One line is held by the
        // writer thread (or not yet), four wait in the queue, the rest are dropped.
        for i in 0..20 {
            writer.write_all(format!("line {i}\n").as_bytes()).unwrap();
        }
        let dropped = writer.error_counter().dropped_lines();
        assert!((15..=16).contains(&dropped), "{dropped}");
        gate.open();
        // What was kept, and the count before the first line written after the drops.
        let kept = 20 - dropped;
        let written = gate.wait_for_lines(kept + 1);
        assert_eq!(
            written
                .lines()
                .filter(|l| l.ends_with(&format!(
                    "WARN {dropped} log lines were dropped: stderr was not taking them (more \
                     than {LOG_QUEUE_LINES} were waiting)"
                )))
                .count(),
            1,
            "{written}"
        );
        // Reported once: later lines follow plainly.
        writer.write_all(b"after\n").unwrap();
        let written = gate.wait_for_lines(kept + 2);
        assert!(written.ends_with("\nafter\n"), "{written}");
        assert_eq!(written.matches("were dropped").count(), 1, "{written}");
        assert_eq!(counts.unreported(), 0);
        drop(worker);
    }
}
