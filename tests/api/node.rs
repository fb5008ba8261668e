//! The npm packages the tests use, installed with the machine's Node.js and npm into a directory
//! under `target/` on first use (and again when the pinned version changes).

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The reference MCP server of the MCP project, pinned.
pub const SERVER_EVERYTHING: &str = "@modelcontextprotocol/server-everything";
pub const SERVER_EVERYTHING_VERSION: &str = "2026.8.31";

static INSTALLED: OnceLock<Result<PathBuf, String>> = OnceLock::new();

/// The entry point of the installed `server-everything` (blocking: call it off the actors'
/// thread).
pub fn server_everything() -> Result<PathBuf, String> {
    INSTALLED.get_or_init(install).clone()
}

fn install() -> Result<PathBuf, String> {
    let prefix = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("npm");
    let package = prefix.join("node_modules").join(SERVER_EVERYTHING);
    let installed_version = std::fs::read_to_string(package.join("package.json"))
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .and_then(|json| json["version"].as_str().map(str::to_owned));
    if installed_version.as_deref() != Some(SERVER_EVERYTHING_VERSION) {
        std::fs::create_dir_all(&prefix).map_err(|e| format!("{}: {e}", prefix.display()))?;
        let out = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--silent", "--prefix"])
            .arg(&prefix)
            .arg(format!("{SERVER_EVERYTHING}@{SERVER_EVERYTHING_VERSION}"))
            .output()
            .map_err(|e| format!("npm (Node.js and npm are needed): {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "npm install {SERVER_EVERYTHING}@{SERVER_EVERYTHING_VERSION} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    Ok(package.join("dist/index.js"))
}
