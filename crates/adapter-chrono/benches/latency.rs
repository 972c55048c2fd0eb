//! Latency of one exec through Chrono's synchronous `/execute` and through the durable
//! `/executions` contract (submit, status reads, result), against the emulator, side by side in
//! one run (alternating), with the local adapter running the same command as the floor. The
//! emulator answers `Retry-After: 0` and skips its provisioning pause, so the durable figure is
//! the protocol's own cost (exchanges), not a polling interval.
//!
//! `cargo bench -p execseam-chrono` (or `cargo xtask bench`). `EXECSEAM_BENCH_SCALE=0.1` shortens it.

use std::time::{Duration, Instant};

use execseam_chrono::{ChronoConfig, ChronoExec, DurablePolicy};
use execseam_core::{Command, Exec};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::chrono::{ChronoEmulator, ChronoOptions};
use execseam_test_util::bench::{self, median, ms};

async fn once(exec: &dyn Exec) -> Duration {
    let t = Instant::now();
    let out = exec
        .exec(Command::new(["echo", "bench"]).expect("valid"))
        .await
        .expect("exec");
    assert_eq!(out.stdout.as_ref(), b"bench\n");
    t.elapsed()
}

fn main() {
    let iterations = bench::count(100, 5);
    bench::runtime(Some(2)).block_on(async {
        let options = ChronoOptions {
            retry_after_secs: 0,
            phase_delay: Duration::ZERO,
            ..ChronoOptions::default()
        };
        let emu = ChronoEmulator::start_with(EmulatorOptions::default(), options)
            .await
            .expect("the emulator");
        let config = ChronoConfig::new(emu.base_url())
            .token(emu.token())
            .policy(DurablePolicy {
                default_retry_after: Duration::ZERO,
                ..DurablePolicy::default()
            });
        let sync = ChronoExec::new(config.clone()).expect("sync");
        let durable = ChronoExec::new(config.durable(true)).expect("durable");
        let local = execseam_local::LocalExec::new();
        let paths: [(&str, &dyn Exec); 3] = [
            ("local", &local),
            ("chrono /execute", &sync),
            ("chrono /executions", &durable),
        ];
        for (_, e) in paths {
            once(e).await; // warm up
        }
        let mut times: Vec<Vec<Duration>> = vec![Vec::new(); paths.len()];
        for i in 0..iterations {
            for k in 0..paths.len() {
                // Rotate the order so no path always runs first.
                let j = (i + k) % paths.len();
                times[j].push(once(paths[j].1).await);
            }
        }
        let floor = median(times[0].clone());
        println!("chrono latency: `echo bench`, {iterations} iterations each, medians");
        for ((name, _), t) in paths.iter().zip(times) {
            let m = median(t);
            println!(
                "  {name:<20} {:>8.2} ms  ({:.2}x local)",
                ms(m),
                ms(m) / ms(floor)
            );
        }
    });
}
