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
use std::time::{Duration, Instant};

use execseam_core::{Command, Exec};
use execseam_local::LocalExec;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

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
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for i in 0..iterations {
        // Alternate which goes first, so neither always runs on a warmer machine.
        if i % 2 == 0 {
            let t = Instant::now();
            raw(argv).await;
            b.push(t.elapsed());
            let t = Instant::now();
            seam(&exec, argv).await;
            a.push(t.elapsed());
        } else {
            let t = Instant::now();
            seam(&exec, argv).await;
            a.push(t.elapsed());
            let t = Instant::now();
            raw(argv).await;
            b.push(t.elapsed());
        }
    }
    let (ma, mb) = (median(a), median(b));
    let ratio = ma.as_secs_f64() / mb.as_secs_f64();
    println!(
        "{name:<28} execseam-local {:>10.3} ms   raw tokio::process {:>10.3} ms   ratio {ratio:.3}  ({iterations} iterations each, medians)",
        ma.as_secs_f64() * 1e3,
        mb.as_secs_f64() * 1e3,
    );
    ratio
}

fn main() {
    // `cargo test --benches` passes `--bench`-less args; run only under `cargo bench`.
    if !std::env::args().any(|a| a == "--bench") {
        println!("overhead: run with `cargo bench -p execseam-local`");
        return;
    }
    let scale: f64 = std::env::var("EXECSEAM_BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let n = |base: usize| ((base as f64 * scale) as usize).max(3);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
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
