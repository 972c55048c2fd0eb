//! `cargo xtask conformance --adapter <name>|all [--live] [-- FILTER]`
//!
//! Runs the suite on the adapter: an emulated adapter in the one binary of the emulated targets
//! (`crates/emulated/tests/conformance.rs`, `EXECSEAM_CONFORMANCE_ADAPTER` naming it: against
//! its emulator, or against the real provider with `--live`, using credentials from the
//! environment), local and docker in their own `tests/conformance.rs`. `all` runs every adapter,
//! local first, rewrites each committed record in `docs/conformance/`, and regenerates
//! `docs/conformance-matrix.md`.

use crate::{adapters, cargo, matrix, own_conformance, run_cmd};

pub fn run(args: &[String]) -> Result<(), String> {
    let mut adapter = None;
    let mut live = false;
    let mut filter = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--adapter" => adapter = it.next().cloned(),
            "--live" => live = true,
            "--" => filter = it.next().cloned(),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let adapter = adapter.ok_or("--adapter <name>|all is required")?;
    let known = adapters();
    if adapter == "all" {
        if live {
            return Err("--live runs one adapter at a time".into());
        }
        let mut failed = Vec::new();
        for name in &known {
            if let Err(e) = one(name, false, true, filter.as_deref()) {
                eprintln!("xtask: {name}: {e}");
                failed.push(name.clone());
            }
        }
        if filter.is_none() {
            matrix::write()?;
        }
        return if failed.is_empty() {
            Ok(())
        } else {
            Err(format!("conformance failed for {}", failed.join(", ")))
        };
    }
    if !known.contains(&adapter) {
        return Err(format!(
            "unknown adapter {adapter:?}; known: {}",
            known.join(", ")
        ));
    }
    one(&adapter, live, false, filter.as_deref())
}

fn one(name: &str, live: bool, bless: bool, filter: Option<&str>) -> Result<(), String> {
    let mut cmd = cargo();
    let package = if own_conformance(name) {
        format!("execseam-{name}")
    } else {
        cmd.env("EXECSEAM_CONFORMANCE_ADAPTER", name);
        "execseam-emulated".to_owned()
    };
    cmd.args([
        "test",
        "--quiet",
        "-p",
        &package,
        "--test",
        "conformance",
        "--",
    ]);
    if let Some(f) = filter {
        cmd.arg(f);
    }
    if live {
        cmd.env("EXECSEAM_LIVE", "1");
        if std::env::var_os("EXECSEAM_PROPTEST_CASES").is_none() {
            cmd.env("EXECSEAM_PROPTEST_CASES", "8");
        }
    }
    if bless {
        cmd.env("EXECSEAM_CONFORMANCE_BLESS", "1");
    }
    run_cmd(&mut cmd)
}
