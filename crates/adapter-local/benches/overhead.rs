//! The local adapter's overhead over a raw `tokio::process` spawn of the same command, measured
//! side by side in one run (alternating, so both see the same machine load). Prints the medians and
//! the ratio. Goal: within 10%.
//!
//! The baseline gets exactly the environment the adapter gives the command (the adapter starts
//! every command from a from-scratch environment; a child's start-up cost depends on its
//! environment, and that is not adapter overhead).
//!
//! `cargo bench -p execseam-local` (or `cargo xtask bench`). `EXECSEAM_BENCH_SCALE=0.1` shortens it.

use std::process::Stdio;

use execseam_core::{Command, Exec};
use execseam_local::LocalExec;
use execseam_test_util::bench;

async fn raw(argv: &[&str]) -> (usize, usize) {
    let env = execseam_local::LocalConfig::new().environment();
    let out = tokio::process::Command::new(argv[0])
        .args(&argv[1..])
        .env_clear()
        .envs(env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .await
        .expect("raw spawn");
    assert!(out.status.success());
    (out.stdout.len(), out.stderr.len())
}

async fn seam(exec: &LocalExec, argv: &[&str]) -> (usize, usize) {
    let out = exec
        .exec(Command::new(argv.iter().copied()).expect("valid"))
        .await
        .expect("exec");
    assert!(out.exit.success());
    (out.stdout.len(), out.stderr.len())
}

async fn compare(name: &str, argv: &[&str], iterations: usize) -> f64 {
    let exec = LocalExec::new();
    // Warm up both paths (page cache, binaries).
    assert_eq!(
        raw(argv).await,
        seam(&exec, argv).await,
        "both paths must produce the same output"
    );
    // The raw spawn goes first in the first pair.
    let (mb, ma) = bench::alternate(
        iterations,
        async || raw(argv).await,
        async || seam(&exec, argv).await,
    )
    .await;
    bench::report(
        name,
        ["execseam-local", "raw tokio::process"],
        (ma, mb),
        iterations,
    )
}

fn main() {
    if !bench::under_cargo_bench("overhead", "execseam-local") {
        return;
    }
    let n = |base: usize| bench::count(base, 3);
    bench::runtime(Some(2)).block_on(async {
        let r1 = compare("true", &["true"], n(300)).await;
        let r2 = compare(
            "64 MiB on stdout",
            &["head", "-c", "67108864", "/dev/zero"],
            n(30),
        )
        .await;
        let r3 = compare(
            "64 MiB stdout + stderr",
            &[
                "sh",
                "-c",
                "head -c 67108864 /dev/zero & head -c 67108864 /dev/zero >&2; wait",
            ],
            n(20),
        )
        .await;
        let worst = r1.max(r2).max(r3);
        println!(
            "overhead: worst ratio {worst:.3} (goal: at most 1.10) -> {}",
            if worst <= 1.10 { "met" } else { "NOT met" }
        );
    });
}
