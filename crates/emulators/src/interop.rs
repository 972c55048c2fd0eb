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

/// The pinned TypeScript runtime the Chrono emulator's tests use: `tsx` (esbuild under Node.js,
/// which runs TypeScript on the Node.js 20 here; Node's own `--experimental-strip-types` needs
/// 22.6 or later).
pub const TSX_VERSION: &str = "4.20.6";

/// Ensures `target/interop/typescript` holds `tsx@`[`TSX_VERSION`] from the npm registry and
/// returns the argv prefix that runs a `.ts` file with it (`node …/tsx/dist/cli.mjs`). Fails
/// loudly when npm or the registry is unreachable.
pub fn typescript_runtime() -> io::Result<Vec<String>> {
    static CREATING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = CREATING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let dir = target_dir().join("interop").join("typescript");
    let cli = dir.join("node_modules/tsx/dist/cli.mjs");
    let stamp = dir.join("installed-tsx.txt");
    if !(cli.exists() && std::fs::read_to_string(&stamp).ok().as_deref() == Some(TSX_VERSION)) {
        // Install next to it, then move into place: another test process may be reading it.
        let tmp = dir.with_file_name(format!("typescript.tmp-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp)?;
        std::fs::write(tmp.join("package.json"), "{\"private\": true}\n")?;
        check(
            Command::new("npm")
                .args([
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--save-exact",
                    "--prefix",
                ])
                .arg(&tmp)
                .arg(format!("tsx@{TSX_VERSION}")),
            "installing tsx from the npm registry (is it reachable?)",
        )?;
        std::fs::write(tmp.join("installed-tsx.txt"), TSX_VERSION)?;
        let _ = std::fs::remove_dir_all(&dir);
        if let Err(e) = std::fs::rename(&tmp, &dir) {
            let _ = std::fs::remove_dir_all(&tmp);
            if !cli.exists() {
                return Err(e);
            }
        }
    }
    let node = std::env::var("EXECSEAM_NODE").unwrap_or_else(|_| "node".into());
    let node = Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {node}"))
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|p| p.starts_with('/'))
        .ok_or_else(|| io::Error::other("node is not on PATH"))?;
    Ok(vec![node, cli.to_string_lossy().into_owned()])
}
