//! `cargo xtask bench`: every benchmark, each measured side by side with its baseline in the same
//! run (`cargo bench --workspace` would also build every library's test harness in release).

use crate::{cargo, run_cmd};

/// `(package, bench target)`: the benchmarks of the workspace.
const BENCHES: &[(&str, &str)] = &[
    ("execseam-local", "overhead"),
    ("execseam-tools", "glob"),
    ("execseam-modal", "exec_latency"),
    ("execseam-chrono", "latency"),
    ("execseam-server", "load"),
    ("execseam-vercel", "sdk"),
    ("execseam-daytona", "session_pool"),
    ("execseam-northflank", "sdk"),
    ("execseam-docker", "latency"),
    ("execseam-emulators", "launcher"),
    ("execseam-agentcore", "sdk"),
    ("execseam-sprites", "memory"),
];

pub fn run(args: &[String]) -> Result<(), String> {
    if let Some(a) = args.first() {
        return Err(format!("unknown argument {a:?}"));
    }
    for (package, bench) in BENCHES {
        run_cmd(cargo().args(["bench", "-p", package, "--bench", bench]))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_bench_target_is_listed() {
        let root = crate::root().join("crates");
        let mut found = Vec::new();
        for krate in std::fs::read_dir(&root).unwrap().flatten() {
            let Ok(benches) = std::fs::read_dir(krate.path().join("benches")) else {
                continue;
            };
            for b in benches.flatten() {
                let name = b
                    .file_name()
                    .to_string_lossy()
                    .trim_end_matches(".rs")
                    .to_owned();
                found.push(name);
            }
        }
        found.sort();
        let mut listed: Vec<String> = super::BENCHES
            .iter()
            .map(|(_, b)| (*b).to_owned())
            .collect();
        listed.sort();
        assert_eq!(found, listed, "xtask bench must run every benchmark");
    }
}
