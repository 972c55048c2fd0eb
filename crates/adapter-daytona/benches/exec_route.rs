//! Exec latency of `true` against the Daytona emulator, side by side in one run: the adapter's
//! default route (A, `ExecRoute::Execute`: one `POST /process/execute`) against its session
//! route (B, `ExecRoute::Session` with the pool: a warm exec is the one synchronous session
//! exec, answered on the daemon's 50 ms exit-code poll). Both run in the same sandbox of the same emulator
//! process, alternating A and B (the order swapped every pair), first on loopback, then through
//! the chaos proxy with 25 ms added to every request (`*=delay:25`, a WAN-like round trip).
//! Round trips per exec are counted at the emulator (its toolbox request count).
//!
//! `cargo bench -p execseam-daytona --bench exec_route` (or `cargo xtask bench`).
//! `EXECSEAM_BENCH_PAIRS=N` sets the pairs per setting (default 200).

use std::time::{Duration, Instant};

use execseam_chaos::{ChaosProxy, parse_rules};
use execseam_core::{Command, Exec, Sandbox, SandboxSpec};
use execseam_daytona::{DaytonaConfig, DaytonaExec, DaytonaProvider, ExecRoute};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::daytona::DaytonaEmulator;
use execseam_test_util::bench::{self, ms};

fn quantile(v: &[Duration], q: f64) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    v[((v.len() - 1) as f64 * q).round() as usize]
}

struct Side {
    times: Vec<Duration>,
    trips: Vec<u64>,
}

impl Side {
    fn new() -> Side {
        Side {
            times: Vec::new(),
            trips: Vec::new(),
        }
    }

    async fn once(&mut self, emu: &DaytonaEmulator, exec: &DaytonaExec) {
        let before = emu.toolbox_requests();
        let t = Instant::now();
        let out = exec.exec(Command::new(["true"]).unwrap()).await.unwrap();
        self.times.push(t.elapsed());
        self.trips.push(emu.toolbox_requests() - before);
        assert!(out.exit.success(), "{out:?}");
    }

    fn trips(&self) -> String {
        let (min, max) = (
            self.trips.iter().min().unwrap(),
            self.trips.iter().max().unwrap(),
        );
        let mean = self.trips.iter().sum::<u64>() as f64 / self.trips.len() as f64;
        if min == max {
            format!("{min}")
        } else {
            format!("{mean:.2} ({min}..{max})")
        }
    }
}

async fn pairs(emu: &DaytonaEmulator, a: &DaytonaExec, b: &DaytonaExec, n: usize) -> (Side, Side) {
    // Warm both (the pool's first session, the connections).
    for _ in 0..3 {
        a.exec(Command::new(["true"]).unwrap()).await.unwrap();
        b.exec(Command::new(["true"]).unwrap()).await.unwrap();
    }
    let (mut sa, mut sb) = (Side::new(), Side::new());
    for i in 0..n {
        if i % 2 == 0 {
            sa.once(emu, a).await;
            sb.once(emu, b).await;
        } else {
            sb.once(emu, b).await;
            sa.once(emu, a).await;
        }
    }
    (sa, sb)
}

fn report(setting: &str, n: usize, a: &Side, b: &Side) {
    let (am, ap) = (quantile(&a.times, 0.5), quantile(&a.times, 0.9));
    let (bm, bp) = (quantile(&b.times, 0.5), quantile(&b.times, 0.9));
    println!(
        "daytona exec `true`, {setting} ({n} pairs, alternating): process/execute median {:.2} ms p90 {:.2} ms, {} round trips/exec | pooled session median {:.2} ms p90 {:.2} ms, {} round trips/exec | execute/session median {:.2}, p90 {:.2}",
        ms(am),
        ms(ap),
        a.trips(),
        ms(bm),
        ms(bp),
        b.trips(),
        ms(am) / ms(bm),
        ms(ap) / ms(bp),
    );
}

fn main() {
    let n: usize = std::env::var("EXECSEAM_BENCH_PAIRS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    bench::runtime(None).block_on(async move {
        let emu = DaytonaEmulator::start(EmulatorOptions::default())
            .await
            .expect("emulator");
        let config = || DaytonaConfig::new(emu.token().to_owned()).api_url(emu.api_url());
        let owner = DaytonaProvider::new(config())
            .unwrap()
            .create(SandboxSpec::new())
            .await
            .unwrap();
        let id = owner.id().to_owned();
        let handles = |toolbox: &str| {
            let a = DaytonaProvider::new(config().toolbox_url(toolbox))
                .unwrap()
                .attach(&id)
                .unwrap();
            let b =
                DaytonaProvider::new(config().toolbox_url(toolbox).exec_route(ExecRoute::Session))
                    .unwrap()
                    .attach(&id)
                    .unwrap();
            (a, b)
        };

        let (a, b) = handles(&emu.toolbox_proxy_url());
        let (sa, sb) = pairs(&emu, &a, &b, n).await;
        report("loopback", n, &sa, &sb);
        a.close().await.unwrap();
        b.close().await.unwrap();

        let proxy = ChaosProxy::start(
            ([127, 0, 0, 1], 0).into(),
            &emu.base_url(),
            parse_rules("*=delay:25").unwrap(),
        )
        .await
        .expect("chaos proxy");
        let (a, b) = handles(&format!("{}/toolbox", proxy.base_url()));
        let (sa, sb) = pairs(&emu, &a, &b, n).await;
        report("+25 ms per request", n, &sa, &sb);
        a.close().await.unwrap();
        b.close().await.unwrap();
        proxy.shutdown().await;
        owner.close().await.unwrap();
    });
}
