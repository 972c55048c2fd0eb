//! `cargo xtask publish-check`: packages every publishable crate, in dependency order, as
//! `cargo publish` would (a dry run that also builds each packaged crate against the packages of
//! the crates it depends on), so each can be published independently.

use std::path::PathBuf;

use crate::{cargo, run_cmd};

pub fn run(args: &[String]) -> Result<(), String> {
    if let Some(a) = args.first() {
        return Err(format!("unknown argument {a:?}"));
    }
    forget_earlier_dry_runs();
    run_cmd(
        cargo()
            .args([
                "publish",
                "--dry-run",
                "--workspace",
                "--allow-dirty",
                "--exclude",
                "xtask",
            ])
            .env("CARGO_TARGET_DIR", target_without_our_crates()),
    )
}

/// Its own target directory, without any build of our crates: cargo never rebuilds a registry
/// crate whose version it has built before, so an earlier dry run's packages would be linked
/// instead of today's. Third-party builds are kept.
fn target_without_our_crates() -> PathBuf {
    let target = crate::root().join("target").join("publish-check");
    for dir in [".fingerprint", "deps", "build"] {
        let dir = target.join("debug").join(dir);
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("execseam") || name.starts_with("libexecseam") {
                let path = entry.path();
                let _ = std::fs::remove_dir_all(&path).or_else(|_| std::fs::remove_file(&path));
            }
        }
    }
    target
}

/// A dry run verifies each crate against its dependencies' packages in a temporary local
/// registry, and cargo unpacks those into `$CARGO_HOME/registry/src/<that registry>/` once per
/// name and version: a second dry run would build against the first run's sources. Remove them.
fn forget_earlier_dry_runs() {
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    let Some(src) = home.map(|h| h.join("registry").join("src")) else {
        return;
    };
    let Ok(registries) = std::fs::read_dir(&src) else {
        return;
    };
    for registry in registries.flatten() {
        // Remote registries are named after their host (`index.crates.io-…`); the local one is not.
        if registry.file_name().to_string_lossy().starts_with("index.") {
            continue;
        }
        for krate in std::fs::read_dir(registry.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            if krate.file_name().to_string_lossy().starts_with("execseam-") {
                let _ = std::fs::remove_dir_all(krate.path());
            }
        }
    }
}
