//! Client memory per in-flight exec: 512 concurrent `sleep` commands through this adapter
//! against the Sprites emulator, which runs in a separate process (this binary re-executed), so
//! only the client's memory is counted. Each measurement runs in a fresh child process too (the
//! allocator keeps what an earlier run freed): RSS (`VmRSS` of `/proc/self/status`) is sampled
//! every 20 ms while the execs are in flight; the peak minus the RSS before they started,
//! divided by the number of execs, is the cost of one. The old WebSocket buffer configuration
//! (`SpritesConfig::ws_buffers(WsBuffers::LEGACY)`) and the new default alternate, A B B A.
//!
//! `cargo bench -p execseam-sprites --bench memory` (or `cargo xtask bench`).
//! `EXECSEAM_BENCH_SCALE=0.25` runs 128 execs instead of 512.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command as Process, Stdio};
use std::time::{Duration, Instant};

use execseam_core::{Command, Exec};
use execseam_sprites::{SpritesConfig, SpritesProvider, WsBuffers};

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn serve() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let emu = execseam_emulators::sprites::SpritesEmulator::start_with(
            execseam_emulators::EmulatorOptions {
                token: Some("spr_bench".into()),
                ..Default::default()
            },
            Default::default(),
        )
        .await
        .expect("the emulator starts");
        println!("{}", emu.base_url());
        std::io::stdout().flush().unwrap();
        // Until the parent closes our stdin.
        tokio::task::spawn_blocking(|| {
            let mut s = String::new();
            while std::io::stdin().read_line(&mut s).unwrap_or(0) > 0 {}
        })
        .await
        .unwrap();
    });
}

fn measure(url: &str, legacy: bool, n: usize, stdin: usize) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        // `inproc`: the emulator in this process too (what a test that starts it in-process
        // sees: the server side of every exec is counted as well).
        let emu = if url == "inproc" {
            Some(
                execseam_emulators::sprites::SpritesEmulator::start_with(
                    execseam_emulators::EmulatorOptions {
                        token: Some("spr_bench".into()),
                        ..Default::default()
                    },
                    Default::default(),
                )
                .await
                .expect("the emulator starts"),
            )
        } else {
            None
        };
        let url = emu.as_ref().map_or(url.to_owned(), |e| e.base_url());
        let mut config = SpritesConfig::new("spr_bench").base_url(url);
        if legacy {
            config = config.ws_buffers(WsBuffers::LEGACY);
        }
        let sprite = SpritesProvider::new(config)
            .unwrap()
            .attach("execseam")
            .unwrap();
        // Warm up: the runtime, the HTTP clients, the allocator's first arenas.
        for _ in 0..4 {
            let o = sprite.exec(Command::new(["true"]).unwrap()).await.unwrap();
            assert!(o.exit.success());
        }
        let mut warm = Vec::new();
        for _ in 0..32 {
            let s = sprite.clone();
            warm.push(tokio::spawn(async move {
                s.exec(Command::new(["true"]).unwrap()).await.unwrap()
            }));
        }
        for w in warm {
            w.await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let base = rss_kib();
        let hold = 3.0 + n as f64 / 100.0;
        // One shared buffer: the command's own stdin is not what is measured, what the exec
        // copies and queues of it is.
        let input = bytes::Bytes::from(vec![b'x'; stdin]);
        let mut tasks = Vec::new();
        let started = Instant::now();
        for _ in 0..n {
            let s = sprite.clone();
            let cmd = Command::builder(["sleep", &format!("{hold}")])
                .stdin(input.clone())
                .build()
                .unwrap();
            tasks.push(tokio::spawn(async move { s.exec(cmd).await }));
        }
        let mut peak = base;
        while !tasks.iter().all(|t| t.is_finished()) {
            peak = peak.max(rss_kib());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let elapsed = started.elapsed();
        let mut errors = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(o) if o.exit.success() => {}
                _ => errors += 1,
            }
        }
        // The result line the parent parses.
        println!(
            "RESULT {} {} {} {:.1}",
            base,
            peak,
            errors,
            elapsed.as_secs_f64()
        );
    });
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("--serve") => return serve(),
        Some("--measure") => {
            return measure(
                &args[2],
                args[3] == "old",
                args[4].parse().unwrap(),
                args[5].parse().unwrap(),
            );
        }
        _ => {}
    }
    let scale: f64 = std::env::var("EXECSEAM_BENCH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1.0);
    let n = ((512.0 * scale) as usize).max(16);
    let me = std::env::current_exe().unwrap();
    let mut emu = Process::new(&me)
        .arg("--serve")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the emulator process");
    let mut url = String::new();
    BufReader::new(emu.stdout.take().unwrap())
        .read_line(&mut url)
        .unwrap();
    let url = url.trim().to_owned();
    let per = |which: &str, url: &str, stdin: usize| -> (f64, u64, u64) {
        let out = Process::new(&me)
            .args(["--measure", url, which, &n.to_string(), &stdin.to_string()])
            .output()
            .expect("a measuring process");
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text
            .lines()
            .find_map(|l| l.strip_prefix("RESULT "))
            .unwrap_or_else(|| {
                panic!(
                    "no result from the {which} run: {text}{}",
                    String::from_utf8_lossy(&out.stderr)
                )
            });
        let f: Vec<f64> = line.split(' ').map(|x| x.parse().unwrap()).collect();
        let (base, peak, errors) = (f[0] as u64, f[1] as u64, f[2] as u64);
        assert_eq!(errors, 0, "{which}: {errors} of {n} execs failed");
        ((peak - base) as f64 / n as f64, base, peak)
    };
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let mut rows = Vec::new();
    // A command without stdin, and one whose 256 KiB of stdin the command never reads (`sleep`):
    // what the client queues of it stays queued while the command runs.
    for stdin in [0, 256 << 10] {
        let (mut old, mut new) = (Vec::new(), Vec::new());
        for which in ["old", "new", "new", "old"] {
            let r = per(which, &url, stdin);
            eprintln!(
                "  stdin {stdin} B, {which}: baseline {} KiB, peak {} KiB, {:.1} KiB per exec",
                r.1, r.2, r.0
            );
            if which == "old" {
                old.push(r.0);
            } else {
                new.push(r.0);
            }
        }
        rows.push((stdin, mean(&old), mean(&new)));
    }
    let both = per("new", "inproc", 0);
    eprintln!(
        "  new, no stdin, emulator in the same process: baseline {} KiB, peak {} KiB, {:.1} KiB per exec",
        both.1, both.2, both.0
    );
    drop(emu.stdin.take());
    let _ = emu.wait();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load = load.split(' ').take(3).collect::<Vec<_>>().join(" ");
    for (stdin, old, new) in rows {
        println!(
            "sprites memory, {n} concurrent execs in flight, {} KiB stdin each: old buffers {old:.1} KiB per exec, new {new:.1} KiB per exec, new/old {:.2} (load average {load})",
            stdin >> 10,
            new / old
        );
    }
    println!(
        "sprites memory, {n} concurrent execs, client and emulator in one process: {:.1} KiB per exec",
        both.0
    );
}
