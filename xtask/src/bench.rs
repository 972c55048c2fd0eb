//! `cargo xtask bench`: every benchmark, each measured side by side with its baseline.

use crate::{cargo, run_cmd};

pub fn run(args: &[String]) -> Result<(), String> {
    if let Some(a) = args.first() {
        return Err(format!("unknown argument {a:?}"));
    }
    run_cmd(cargo().args(["bench", "--workspace"]))
}
