//! The `runtime-tools` command: parses the command line, loads settings, runs the application.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use runtime_tools::{Application, Settings, TokenOrigin, parse_bind, telemetry};

/// mimalloc instead of the system allocator: the server allocates and frees many short-lived
/// buffers of a few kilobytes per call (frames, HTTP exchanges, JSON), which glibc's allocator
/// spends a measurable share of each call on (docs/benchmarks.md, "Where the time goes").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    version,
    about = "Turns local plugins' HTTP callbacks into tools a live AI model can call"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the Runtime Tool API server.
    Serve(ServeArgs),
    /// Show the whole round trip on this machine: the server, an example plugin and a scripted
    /// model that calls the plugin's tool; prints each step, then stops everything.
    Demo,
    /// Serve one character's tools to an MCP client (a desktop assistant, an IDE, the MCP
    /// Inspector) over stdio, through a running server. Logs go to stderr.
    Mcp(McpArgs),
}

#[derive(clap::Args)]
struct McpArgs {
    /// The runtime-tools server.
    #[arg(long, value_name = "URL", env = "RUNTIME_TOOLS_URL", default_value = runtime_tools::mcp_bridge::DEFAULT_SERVER)]
    server: String,
    /// The character whose tools to serve (default: every character's, as invoke resolves them).
    #[arg(long, value_name = "NAME")]
    role: Option<String>,
}

#[derive(clap::Args)]
struct ServeArgs {
    /// TOML configuration file (default: the embedded configuration).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address to listen on, overriding the configuration (port 0 picks a free port).
    #[arg(long, value_name = "ADDR:PORT")]
    bind: Option<String>,
    /// A character; repeat for several. Replaces the configured character list.
    #[arg(long = "character", value_name = "NAME")]
    characters: Vec<String>,
    /// Keep registrations in this file across restarts (overrides `[state] path`): each change
    /// is durable before it is made and answered (one the file cannot take is refused with 503
    /// and not made), and restored tools wait, dormant, for their callback.
    #[arg(long, value_name = "FILE")]
    state: Option<PathBuf>,
    /// Start a new, empty store in the --state file when that file is empty (0 bytes); without
    /// it an empty file is refused, so a store cut to nothing is never taken for a new one. A
    /// missing file is always created (mode 0600); a file that holds a store opens as usual.
    #[arg(long)]
    state_new: bool,
    /// HTTP worker threads (default: one per CPU).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    workers: Option<u16>,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // The demo's story goes to stdout; only warnings and errors join it (on stderr). The guard
    // lives as long as `main`, so what is still queued is written when it returns.
    let _log = telemetry::init_with_default(match cli.command {
        Command::Demo => "warn",
        Command::Serve(_) => "info",
        // The SDK logs every request at info: an MCP client shows stderr, keep it to ours.
        Command::Mcp(_) => "warn,runtime_tools=info",
    });
    match cli.command {
        Command::Serve(args) => serve(args),
        // Stdout carries the protocol: the log (on stderr) is the only other output.
        Command::Mcp(args) => actix_web::rt::System::new().block_on(
            runtime_tools::mcp_bridge::run(runtime_tools::mcp_bridge::ServeSettings {
                server: args.server,
                role: args.role,
            }),
        ),
        Command::Demo => actix_web::rt::System::new()
            .block_on(runtime_tools::demo::run(&mut std::io::stdout().lock())),
    }
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let mut settings = match &args.config {
        Some(path) => Settings::from_file(path)?,
        None => Settings::default(),
    };
    if let Some(bind) = &args.bind {
        settings.bind = parse_bind(bind).context("option --bind")?;
    }
    if !args.characters.is_empty() {
        settings.set_characters(args.characters)?;
    }
    settings.workers = args.workers.map(usize::from);
    if let Some(state) = args.state {
        settings.state.path = Some(state);
    }
    if args.state_new {
        settings.state.new = true;
    }
    // Span export is switched on by the standard OpenTelemetry variables.
    settings.trace = runtime_tools::TraceSettings::from_env();

    actix_web::rt::System::new().block_on(async move {
        let app = Application::build(settings).await?;
        // The server installs its own signal handlers only when it first runs, which is after
        // the listening line: a supervisor that stops us as soon as it reads the line would
        // otherwise kill the process (the signal's default action) instead of stopping it.
        let stop_signal = stop_signal().context("cannot listen for SIGINT / SIGTERM")?;
        let stopper = app.stopper();
        let stopping = actix_web::rt::spawn(async move {
            let signal = stop_signal.await;
            tracing::info!("{signal} received; stopping gracefully");
            stopper.stop().await;
        });

        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "listening on http://{}", app.local_addr())?;
        // The person's address of the inspector: with a token made at this start, the token
        // rides in the fragment, which a browser never sends to the server. Printed here only:
        // the log never carries it.
        let token = app.operator_token();
        match token.origin() {
            TokenOrigin::Generated => writeln!(
                stdout,
                "inspector: http://{}/#token={}",
                app.local_addr(),
                token.expose()
            )?,
            TokenOrigin::Env(_) => writeln!(stdout, "inspector: http://{}/", app.local_addr())?,
        }
        stdout.flush()?;
        drop(stdout);
        app.run_until_stopped().await?;
        // Only the stop above ends the server; the model sessions' calls may still be
        // finishing (or be answered with the stopping error) when it has stopped.
        stopping.await?;
        tracing::info!("stopped");
        Ok(())
    })
}

/// Starts listening for SIGINT and SIGTERM now; the future resolves with the name of the first
/// one that arrives.
#[cfg(unix)]
fn stop_signal() -> std::io::Result<impl Future<Output = &'static str>> {
    use futures_util::future::{Either, select};
    use tokio::signal::unix::{SignalKind, signal};

    let mut terminate = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    Ok(async move {
        let terminated = std::pin::pin!(terminate.recv());
        let interrupted = std::pin::pin!(interrupt.recv());
        match select(terminated, interrupted).await {
            Either::Left(_) => "SIGTERM",
            Either::Right(_) => "SIGINT",
        }
    })
}

/// Ctrl-C, where Unix signals do not exist; the future resolves when it arrives.
#[cfg(not(unix))]
fn stop_signal() -> std::io::Result<impl Future<Output = &'static str>> {
    use futures_util::FutureExt;

    Ok(tokio::signal::ctrl_c().map(|_| "Ctrl-C"))
}
