//! The `runtime-tools` command: parses the command line, loads settings, runs the application.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};
use runtime_tools::config::{Settings, parse_bind};
use runtime_tools::startup::Application;
use runtime_tools::telemetry;

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
    /// HTTP worker threads (default: one per CPU).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    workers: Option<u16>,
}

fn main() -> anyhow::Result<()> {
    telemetry::init();
    match Cli::parse().command {
        Command::Serve(args) => serve(args),
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

    actix_web::rt::System::new().block_on(async move {
        let app = Application::build(settings).await?;
        let mut stdout = std::io::stdout().lock();
        writeln!(stdout, "listening on http://{}", app.local_addr())?;
        stdout.flush()?;
        drop(stdout);
        app.run_until_stopped().await?;
        tracing::info!("stopped");
        Ok(())
    })
}
