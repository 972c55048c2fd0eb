//! `cargo xtask publish-check`: packages every publishable crate, in dependency order, as
//! `cargo publish` would (a dry run), so each can be published independently.

use crate::{cargo, run_cmd};

pub fn run(args: &[String]) -> Result<(), String> {
    if let Some(a) = args.first() {
        return Err(format!("unknown argument {a:?}"));
    }
    run_cmd(cargo().args([
        "publish",
        "--dry-run",
        "--workspace",
        "--allow-dirty",
        "--exclude",
        "xtask",
    ]))
}
