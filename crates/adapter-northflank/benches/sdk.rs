//! Exec latency of `true` against the Northflank emulator: this adapter, the official Python SDK
//! (`northflank`, `run_service_command`) and the official JS client (`@northflank/js-client`,
//! `execServiceCommand`), measured in alternating rounds of the same run. Every exec is one
//! WebSocket on every client; only the exec is timed. Prints the medians and the ratios.
//!
//! `cargo bench -p execseam-northflank` (or `cargo xtask bench`). `EXECSEAM_BENCH_SCALE=0.2`
//! shortens it. Installs the pinned clients under `target/interop/` like the interop tests.

use std::path::Path;
use std::time::{Duration, Instant};

use execseam_core::{Command, Exec};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::northflank::{
    NorthflankEmulator, NorthflankOptions, PROJECT_ID, SERVICE_ID,
};
use execseam_northflank::{NorthflankConfig, NorthflankProvider};
use execseam_test_util::interop;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let scale: f64 = std::env::var("EXECSEAM_BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let n = ((40.0 * scale) as usize).max(5);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let emu = NorthflankEmulator::start_with(EmulatorOptions::default(), NorthflankOptions::default())
            .await
            .expect("emulator");
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../emulator-northflank/interop");
        let python = interop::python_env("northflank", &dir.join("requirements.txt")).expect("python SDK");
        let npm = interop::node_env("northflank-npm", &dir).expect("TS SDK");
        let provider = NorthflankProvider::new(
            NorthflankConfig::new(emu.token(), PROJECT_ID).api_url(emu.base_url()),
        )
        .unwrap();
        let sb = provider.connect(SERVICE_ID).await.unwrap();
        sb.exec(Command::new(["true"]).unwrap()).await.unwrap();
        let mut env = emu.env();
        env.push(("BENCH_N".into(), n.to_string()));
        let (mut seam, mut py, mut ts) = (Vec::new(), Vec::new(), Vec::new());
        for round in 0..3 {
            let (p, e) = (python.clone(), env.clone());
            let script = dir.join("bench.py");
            let sdk_py = move || interop::timings(&interop::run_python(&p, &script, &e).unwrap()).unwrap();
            let (m, e) = (npm.clone(), env.clone());
            let script = dir.join("bench.mjs");
            let sdk_ts = move || interop::timings(&interop::run_node(&m, &script, &e).unwrap()).unwrap();
            // Rotate the order, so no client always runs on a warmer machine.
            for step in 0..3 {
                match (round + step) % 3 {
                    0 => seam.extend(adapter_times(&sb, n).await),
                    1 => py.extend(tokio::task::spawn_blocking(sdk_py.clone()).await.unwrap()),
                    _ => ts.extend(tokio::task::spawn_blocking(sdk_ts.clone()).await.unwrap()),
                }
            }
        }
        let (a, p, t) = (median(seam), median(py), median(ts));
        println!(
            "northflank exec `true` (median of {} each): execseam-northflank {:.2} ms, northflank (Python) {:.2} ms, @northflank/js-client {:.2} ms; adapter/python {:.2}, adapter/js {:.2}",
            3 * n,
            ms(a),
            ms(p),
            ms(t),
            ms(a) / ms(p),
            ms(a) / ms(t)
        );
    });
}

async fn adapter_times(sb: &execseam_northflank::NorthflankExec, n: usize) -> Vec<Duration> {
    let mut v = Vec::new();
    for _ in 0..n {
        let t = Instant::now();
        let out = sb.exec(Command::new(["true"]).unwrap()).await.unwrap();
        assert!(out.exit.success());
        v.push(t.elapsed());
    }
    v
}
