//! The npm packages the tests use, installed with the machine's Node.js and npm into a directory
//! under `target/` on first use (and again when the pinned version changes).

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, OnceLock};

/// The reference MCP server of the MCP project, pinned.
pub const SERVER_EVERYTHING: &str = "@modelcontextprotocol/server-everything";
pub const SERVER_EVERYTHING_VERSION: &str = "2026.8.31";

/// CopilotKit's mock of AI providers (an OpenAI-compatible chat upstream nobody here wrote),
/// pinned.
pub const AIMOCK: &str = "@copilotkit/aimock";
pub const AIMOCK_VERSION: &str = "1.43.0";

/// The official OpenAI Node.js SDK (openai-node), pinned: its Responses stream helper checks
/// that a stream reads as one response.
pub const OPENAI_NODE: &str = "openai";
pub const OPENAI_NODE_VERSION: &str = "7.55.0";

static SERVER_EVERYTHING_INSTALLED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
static AIMOCK_INSTALLED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
static OPENAI_NODE_INSTALLED: OnceLock<Result<PathBuf, String>> = OnceLock::new();

/// One npm install at a time: they share one prefix.
static INSTALLING: Mutex<()> = Mutex::new(());

/// The entry point of the installed `server-everything` (blocking: call it off the actors'
/// thread).
pub fn server_everything() -> Result<PathBuf, String> {
    SERVER_EVERYTHING_INSTALLED
        .get_or_init(|| install(SERVER_EVERYTHING, SERVER_EVERYTHING_VERSION))
        .clone()
        .map(|package| package.join("dist/index.js"))
}

/// The entry point of the installed aimock's `llmock` command line (blocking: call it off the
/// actors' thread).
pub fn aimock() -> Result<PathBuf, String> {
    AIMOCK_INSTALLED
        .get_or_init(|| install(AIMOCK, AIMOCK_VERSION))
        .clone()
        .map(|package| package.join("dist/cli.js"))
}

/// The installed openai-node's package directory, for `require` (blocking: call it off the
/// actors' thread).
pub fn openai_node() -> Result<PathBuf, String> {
    OPENAI_NODE_INSTALLED
        .get_or_init(|| install(OPENAI_NODE, OPENAI_NODE_VERSION))
        .clone()
}

/// Installs `name@version` unless it is there; returns its directory.
fn install(name: &str, version: &str) -> Result<PathBuf, String> {
    let _one_at_a_time = INSTALLING.lock().unwrap_or_else(|e| e.into_inner());
    let prefix = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("npm");
    let package = prefix.join("node_modules").join(name);
    let installed_version = std::fs::read_to_string(package.join("package.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .and_then(|json| json["version"].as_str().map(str::to_owned));
    if installed_version.as_deref() != Some(version) {
        std::fs::create_dir_all(&prefix).map_err(|e| format!("{}: {e}", prefix.display()))?;
        let out = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--silent", "--prefix"])
            .arg(&prefix)
            .arg(format!("{name}@{version}"))
            .output()
            .map_err(|e| format!("npm (Node.js and npm are needed): {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "npm install {name}@{version} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    Ok(package)
}
