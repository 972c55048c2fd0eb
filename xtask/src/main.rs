//! `cargo xtask`: the workspace's chores, with no dependencies beyond std.
//!
//! - `cargo xtask conformance --adapter <name>|all [--live] [-- FILTER]`
//! - `cargo xtask matrix` (rewrites docs/conformance-matrix.md from the committed records)
//! - `cargo xtask reliability [--full] [--adapter <name>]` (the reliability suite; `--full`: every case)
//! - `cargo xtask publish-check`
//! - `cargo xtask bench [--quick] [--pairs N] [--target <name>]` (the suite's table, docs/performance.md)
//! - `cargo xtask tidy`

mod bench;
mod bench_setup;
mod conformance;
mod matrix;
mod publish;
mod tidy;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("conformance") => conformance::run(&args[1..]),
        Some("publish-check") => publish::run(&args[1..]),
        Some("bench") => bench::run(&args[1..]),
        Some("tidy") => tidy::run(&args[1..]),
        Some("matrix") => matrix::write(),
        Some("reliability") => reliability(&args[1..]),
        _ => Err(usage()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `cargo test -p execseam-reliability` with the suite's knobs as its environment.
fn reliability(args: &[String]) -> Result<(), String> {
    let mut cmd = cargo();
    cmd.current_dir(root()).args([
        "test",
        "-p",
        "execseam-reliability",
        "--test",
        "reliability",
    ]);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--full" => {
                cmd.env("EXECSEAM_RELIABILITY", "full");
            }
            "--adapter" => {
                let name = it.next().ok_or("--adapter needs a name")?;
                cmd.env("EXECSEAM_RELIABILITY_ONLY", name);
            }
            other => return Err(format!("unknown argument {other:?}\n{}", usage())),
        }
    }
    let status = cmd.status().map_err(|e| format!("cargo: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("the reliability suite failed: {status}"))
    }
}

fn usage() -> String {
    "usage:\n  cargo xtask conformance --adapter <name>|all [--live] [-- FILTER]\n  cargo xtask matrix\n  cargo xtask reliability [--full] [--adapter <name>]\n  cargo xtask publish-check\n  cargo xtask bench [--quick] [--pairs N] [--target <name>]\n  cargo xtask tidy".into()
}

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask is in the workspace")
        .to_path_buf()
}

/// Runs a command in the workspace root, failing on a non-zero exit.
pub fn run_cmd(cmd: &mut Command) -> Result<(), String> {
    cmd.current_dir(root());
    eprintln!("xtask: running {cmd:?}");
    let status = cmd
        .status()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed: {status}"))
    }
}

/// `cargo`, as the one that runs us, without the variables `cargo run` set for xtask itself.
///
/// Build scripts ask to be re-run when some of them change (ring's: `CARGO_PKG_NAME`,
/// `CARGO_MANIFEST_DIR`, ...), and cargo compares its own environment's values: left in, a
/// build started by xtask and one started from a shell dirty each other's ring and everything
/// above it (a rebuild of 500 to 600 s in release on these 2 cores).
pub fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    for (name, _) in std::env::vars_os() {
        if name.to_str().is_some_and(set_by_cargo_run) {
            cmd.env_remove(&name);
        }
    }
    cmd
}

/// The variables `cargo run` sets for the program it runs (the package's own; `CARGO` and
/// `CARGO_HOME` say which cargo this is and stay).
fn set_by_cargo_run(name: &str) -> bool {
    name.starts_with("CARGO_PKG_")
        || matches!(
            name,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_MANIFEST_LINKS"
                | "CARGO_CRATE_NAME"
                | "CARGO_BIN_NAME"
                | "CARGO_PRIMARY_PACKAGE"
        )
}

/// Every adapter in the workspace: `crates/adapter-<name>` → `<name>`, `local` first.
pub fn adapters() -> Vec<String> {
    let crates = root().join("crates");
    let mut names: Vec<String> = std::fs::read_dir(&crates)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .filter_map(|e| {
                    e.file_name()
                        .to_str()?
                        .strip_prefix("adapter-")
                        .map(str::to_owned)
                })
                // adapter-kit and emulator-kit are the kits, not an adapter and its emulator.
                .filter(|n| n != "kit")
                .filter(|n| own_conformance(n) || crates.join(format!("emulator-{n}")).is_dir())
                .collect()
        })
        .unwrap_or_default();
    names.sort_by_key(|n| (n != "local", n.clone()));
    names
}

/// Whether adapter `name` has a conformance binary of its own (`tests/conformance.rs`: local,
/// docker); the others run in the one binary of the emulated targets (`execseam-emulated`).
pub fn own_conformance(name: &str) -> bool {
    root()
        .join("crates")
        .join(format!("adapter-{name}/tests/conformance.rs"))
        .exists()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `cargo test` runs this with the package's variables set, as `cargo run` runs xtask.
    #[test]
    fn nested_cargo_runs_without_the_variables_cargo_run_set_for_xtask() {
        assert!(
            std::env::var_os("CARGO_PKG_NAME").is_some(),
            "cargo test sets CARGO_PKG_NAME"
        );
        let cmd = cargo();
        let removed: Vec<String> = cmd
            .get_envs()
            .filter(|(_, v)| v.is_none())
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect();
        for name in ["CARGO_PKG_NAME", "CARGO_PKG_VERSION", "CARGO_MANIFEST_DIR"] {
            assert!(
                removed.iter().any(|r| r == name),
                "{name} is passed on: {removed:?}"
            );
        }
        assert!(
            !removed.iter().any(|r| r == "CARGO" || r == "CARGO_HOME"),
            "{removed:?}"
        );
    }
}
