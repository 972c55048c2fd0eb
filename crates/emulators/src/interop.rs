//! Support for interop tests: the providers' official Python SDKs, installed into a virtualenv
//! under the target directory, run against an emulator.
//!
//! A test fails loudly when the registry cannot be reached: an interop check that silently skips
//! proves nothing.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The workspace's target directory (`CARGO_TARGET_DIR`, or `<workspace>/target`).
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .ancestors()
                .nth(2)
                .map(|p| p.join("target"))
                .unwrap_or_else(|| PathBuf::from("target"))
        })
}

/// Ensures `target/interop/<name>/venv` exists with exactly `requirements` installed (pinned
/// versions) and returns its `python`. Re-creates the venv when the requirements change.
///
/// Tests of one binary run in parallel and may ask for the same virtualenv at once: creation is
/// serialised (cargo runs test binaries one after the other).
pub fn python_env(name: &str, requirements: &Path) -> io::Result<PathBuf> {
    static CREATING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = CREATING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let dir = target_dir().join("interop").join(name);
    let venv = dir.join("venv");
    let python = venv.join("bin").join("python");
    let wanted = std::fs::read_to_string(requirements)?;
    let stamp = dir.join("installed-requirements.txt");
    if python.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(wanted.as_str()) {
        return Ok(python);
    }
    let _ = std::fs::remove_dir_all(&venv);
    std::fs::create_dir_all(&dir)?;
    let host_python = std::env::var("EXECSEAM_PYTHON").unwrap_or_else(|_| "python3".into());
    check(
        Command::new(&host_python).arg("-m").arg("venv").arg(&venv),
        "creating the virtualenv",
    )?;
    check(
        Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--quiet",
                "-r",
            ])
            .arg(requirements),
        "installing the official SDK from the registry (is PyPI reachable?)",
    )?;
    std::fs::write(&stamp, wanted)?;
    Ok(python)
}

fn check(cmd: &mut Command, what: &str) -> io::Result<()> {
    let out = cmd.stdin(Stdio::null()).output()?;
    if out.status.success() {
        return Ok(());
    }
    Err(io::Error::other(format!(
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )))
}

/// Runs `script` with `python` and `env`; returns its output (the caller asserts on it).
pub fn run_python(python: &Path, script: &Path, env: &[(String, String)]) -> io::Result<Output> {
    Command::new(python)
        .arg(script)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .output()
}
