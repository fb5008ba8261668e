//! The Python virtualenv the tests use: created under `target/` from `tests/requirements.txt` on
//! first use, and installed again whenever that file changes (a copy of the installed file is
//! kept beside the venv as the stamp).

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();

/// A file of the repository.
pub fn repo_file(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The venv's directory.
pub fn venv() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("test-venv")
}

/// The venv's python, provisioned on first use (blocking: call it off the actors' thread).
pub fn python() -> Result<PathBuf, String> {
    PYTHON.get_or_init(provision).clone()
}

fn provision() -> Result<PathBuf, String> {
    let venv = venv();
    let python = venv.join("bin/python");
    let stamp = venv.join("installed-requirements.txt");
    let wanted = std::fs::read_to_string(repo_file("tests/requirements.txt"))
        .map_err(|e| format!("tests/requirements.txt: {e}"))?;
    let installed = std::fs::read_to_string(&stamp).ok();
    if python.exists() && installed.as_deref() == Some(wanted.as_str()) {
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
    if !python.exists() {
        run(Command::new("python3").arg("-m").arg("venv").arg(&venv))?;
    }
    run(Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check", "-r"])
        .arg(repo_file("tests/requirements.txt")))?;
    std::fs::write(&stamp, wanted).map_err(|e| format!("{}: {e}", stamp.display()))?;
    Ok(python)
}
