//! The emulators' per-exec launch overhead, old launcher against new, measured side by side in
//! one run (alternating, so all see the same machine load), with a plain local spawn as the
//! baseline. Prints the medians and each launcher's overhead over the baseline. Goal: the new
//! launcher's median overhead at most 3 ms.
//!
//! - **plain**: `execseam_spawn::ProcessExec` on the host (no isolation): the cost of spawning the
//!   command itself.
//! - **old**: the launcher the emulators used before: `unshare --mount --propagation private` +
//!   `/bin/sh` binding three private directories (E2B's `/home/user`, `/root`, `/tmp`) with one
//!   `mount --bind` each, then the command through a `/bin/sh -c` workdir wrapper. Rebuilt here
//!   over directories of the benchmark's own (the mount targets too, so nothing is created on
//!   the host outside them).
//! - **new**: [`Sandbox::exec`]: a thread enters the sandbox's existing namespaces (`setns`) and
//!   spawns the command there, as the sandbox's user.
//!
//! `cargo bench -p execseam-emulator-kit --bench launcher` (or `cargo xtask bench`); needs root.
//! `EXECSEAM_BENCH_SCALE=0.1` shortens it.

use std::time::{Duration, Instant};

use execseam_core::{Command, Exec};
use execseam_emulator_kit::{Isolation, Sandbox, SandboxSpec, Sandboxing, User};
use execseam_spawn::{ProcessConfig, ProcessExec};

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The launcher `harness::sandbox` built before this benchmark's change (verbatim shape).
fn old_launcher(root: &std::path::Path) -> ProcessExec {
    let private = ["/home/user", "/root", "/tmp"];
    let mut argv: Vec<String> = vec![
        "unshare".into(),
        "--mount".into(),
        "--propagation".into(),
        "private".into(),
        "--".into(),
        "/bin/sh".into(),
        "-c".into(),
        format!(
            "n=$1; shift; while [ \"$n\" -gt 0 ]; do mkdir -p \"$2\" && mount --bind \"$1\" \"$2\" || {{ printf '%s\\n' '{}sandbox mount failed' >&2; exit 125; }}; shift 2; n=$((n-1)); done; exec \"$@\"",
            execseam_spawn::LAUNCHER_MARK
        ),
        "sh".into(),
        private.len().to_string(),
    ];
    for p in private {
        let source = root.join("sources").join(p.trim_start_matches('/'));
        let target = root.join("targets").join(p.trim_start_matches('/'));
        std::fs::create_dir_all(&source).unwrap();
        std::fs::create_dir_all(&target).unwrap();
        argv.push(source.to_string_lossy().into_owned());
        argv.push(target.to_string_lossy().into_owned());
    }
    ProcessExec::new(
        ProcessConfig::new().inherit(["PATH"]).launcher(argv),
        "local",
    )
}

async fn run(exec: &ProcessExec, workdir: &str) -> Duration {
    let cmd = Command::builder(["true"]).workdir(workdir).build().unwrap();
    let t = Instant::now();
    let out = exec.exec(cmd).await.expect("exec");
    let d = t.elapsed();
    assert!(out.exit.success(), "{out:?}");
    d
}

fn main() {
    // `cargo test --benches` passes `--bench`-less args; run only under `cargo bench`.
    if !std::env::args().any(|a| a == "--bench") {
        println!("launcher: run with `cargo bench -p execseam-emulator-kit --bench launcher`");
        return;
    }
    assert_eq!(
        Isolation::detect(),
        Isolation::Namespaces,
        "launcher: needs root and util-linux's unshare (both launchers use namespaces)"
    );
    let scale: f64 = std::env::var("EXECSEAM_BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let iterations = ((300.0 * scale) as usize).max(5);
    let dir = std::env::temp_dir().join(format!("execseam-bench-launcher-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let plain = ProcessExec::new(ProcessConfig::new().inherit(["PATH"]), "local");
        let old = old_launcher(&dir);
        let sandboxing = Sandboxing {
            state_dir: Some(dir.clone()),
            ..Sandboxing::default()
        };
        let spec = SandboxSpec::new(
            "bench",
            "e2b.local",
            User::new("user", 1000, "/home/user"),
            [("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")],
        );
        let sandbox = Sandbox::create("bench", spec, &sandboxing).expect("sandbox");
        let old_workdir = dir.join("targets/tmp").to_string_lossy().into_owned();
        let host_tmp = std::env::temp_dir().to_string_lossy().into_owned();
        // Warm up every path (page cache, binaries).
        for _ in 0..5 {
            run(&plain, &host_tmp).await;
            run(&old, &old_workdir).await;
            run(sandbox.exec(), "/tmp").await;
        }
        let (mut p, mut o, mut n) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..iterations {
            // Rotate which goes first, so none always runs on a warmer machine.
            for k in 0..3 {
                match (i + k) % 3 {
                    0 => p.push(run(&plain, &host_tmp).await),
                    1 => o.push(run(&old, &old_workdir).await),
                    _ => n.push(run(sandbox.exec(), "/tmp").await),
                }
            }
        }
        let (mp, mo, mn) = (median(p), median(o), median(n));
        let (over_old, over_new) = (ms(mo) - ms(mp), ms(mn) - ms(mp));
        println!(
            "launcher `true`, {iterations} runs each, medians: plain {:.3} ms, old launcher {:.3} ms (overhead {over_old:.3} ms), new launcher {:.3} ms (overhead {over_new:.3} ms)",
            ms(mp),
            ms(mo),
            ms(mn)
        );
        println!(
            "launcher: new overhead {over_new:.3} ms (goal: at most 3 ms) -> {}; {:.1}x faster than the old launcher",
            if over_new <= 3.0 { "met" } else { "NOT met" },
            ms(mo) / ms(mn)
        );
        drop(sandbox);
        execseam_emulator_kit::sandbox::wait_for_teardowns(Duration::from_secs(10)).await;
    });
    std::fs::remove_dir_all(&dir).unwrap();
}
