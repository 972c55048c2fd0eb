//! Exec latency against the AgentCore emulator: this adapter with the one-pass exact-output
//! frame (the default), the same adapter with the frame it used before (temp files read back by
//! two `base64` runs, after `/bin/sh -c`; `legacy_framing(true)`, kept for this comparison
//! only), and boto3's `executeCommand` (the official SDK, pinned in
//! `crates/emulator-agentcore/interop/requirements.txt`, in a long-running Python process that
//! makes one call per request). All three use the same emulator process; each round runs each
//! client once, in an order that rotates, so the pairs alternate. Only the call is timed (boto3
//! times itself with `perf_counter`). The adapter returns stdout and stderr separately and
//! byte-exact; boto3 returns the service's text (stdout through the pty's CRLF).
//!
//! `cargo bench -p execseam-agentcore --bench sdk` (or `cargo xtask bench`).
//! `EXECSEAM_BENCH_SCALE=0.25` runs 50 rounds instead of 200.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command as Process, Stdio};
use std::time::{Duration, Instant};

use execseam_agentcore::{AgentCoreConfig, AgentCoreExec, AgentCoreProvider};
use execseam_core::{Command, Exec, Sandbox, SandboxSpec};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::agentcore::{ACCESS_KEY_ID, AgentCoreEmulator, REGION, SESSION_ROOT};
use execseam_test_util::{bench, interop};

fn pct(v: &mut [Duration], p: f64) -> f64 {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i].as_secs_f64() * 1000.0
}

async fn adapter(emu: &AgentCoreEmulator, legacy: bool) -> AgentCoreExec {
    let config = AgentCoreConfig::new(REGION, ACCESS_KEY_ID, "not-verified")
        .endpoint_url(emu.base_url())
        .legacy_framing(legacy);
    let exec = AgentCoreProvider::new(config.clone())
        .unwrap()
        .create(SandboxSpec::new())
        .await
        .unwrap();
    let sid = exec.id().to_owned();
    let root = emu.visible_path(&sid, SESSION_ROOT).unwrap();
    if root == SESSION_ROOT {
        return exec;
    }
    // Without mount namespaces the emulator's paths are translated (as in the tests).
    let tmp = emu.visible_path(&sid, "/tmp").unwrap();
    exec.set_owned(false);
    let attached = AgentCoreProvider::new(config.session_root(root).temp_dir(tmp))
        .unwrap()
        .attach(&sid)
        .expect("a handle");
    attached.set_owned(true);
    attached
}

async fn time_adapter(exec: &AgentCoreExec, argv: &[&str], want: &[u8]) -> Duration {
    let cmd = Command::new(argv.iter().copied()).unwrap();
    let t = Instant::now();
    let o = exec.exec(cmd).await.unwrap();
    let d = t.elapsed();
    assert!(o.exit.success(), "{o:?}");
    assert_eq!(o.stdout.as_ref(), want);
    d
}

fn main() {
    let rounds = bench::count(200, 10);
    bench::runtime(None).block_on(async move {
        let emu = AgentCoreEmulator::start(EmulatorOptions::default())
            .await
            .expect("emulator");
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../emulator-agentcore/interop");
        let python = interop::python_env("agentcore", &dir.join("requirements.txt"))
            .expect("the boto3 virtualenv");
        let mut py = Process::new(&python)
            .arg(dir.join("bench.py"))
            .envs(emu.env())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python");
        let mut py_in = py.stdin.take().unwrap();
        let mut py_out = BufReader::new(py.stdout.take().unwrap());
        let mut line = String::new();
        py_out.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "ready", "bench.py: {line}");
        let mut boto3 = move |command: &str| -> Duration {
            writeln!(py_in, "{command}").unwrap();
            py_in.flush().unwrap();
            let mut l = String::new();
            py_out.read_line(&mut l).unwrap();
            let ms: f64 = l.split(' ').next().unwrap().parse().expect("a time from bench.py");
            Duration::from_secs_f64(ms / 1000.0)
        };
        let new = adapter(&emu, false).await;
        let old = adapter(&emu, true).await;
        let lines: Vec<String> = (1..=1000).map(|i| i.to_string()).collect();
        let seq = format!("{}\n", lines.join("\n"));
        // (label, argv for the adapter, the same command for boto3, the expected stdout)
        let workloads: [(&str, Vec<&str>, &str, Vec<u8>); 2] = [
            ("/bin/echo hello", vec!["/bin/echo", "hello"], "/bin/echo hello", b"hello\n".to_vec()),
            ("seq 1000 (3.9 KB of text)", vec!["seq", "1000"], "seq 1000", seq.into_bytes()),
        ];
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        for (label, argv, command, want) in &workloads {
            // Warm up every client.
            for _ in 0..3 {
                time_adapter(&new, argv, want).await;
                time_adapter(&old, argv, want).await;
                boto3(command);
            }
            let (mut a, mut b, mut p) = (Vec::new(), Vec::new(), Vec::new());
            for round in 0..rounds {
                for step in 0..3 {
                    match (round + step) % 3 {
                        0 => a.push(time_adapter(&new, argv, want).await),
                        1 => b.push(time_adapter(&old, argv, want).await),
                        _ => p.push(tokio::task::block_in_place(|| boto3(command))),
                    }
                }
            }
            let (a50, a90) = (pct(&mut a, 0.5), pct(&mut a, 0.9));
            let (b50, b90) = (pct(&mut b, 0.5), pct(&mut b, 0.9));
            let (p50, p90) = (pct(&mut p, 0.5), pct(&mut p, 0.9));
            println!(
                "agentcore `{label}`, {rounds} rounds: new frame {a50:.2} ms (p90 {a90:.2}), old frame {b50:.2} ms (p90 {b90:.2}), boto3 {p50:.2} ms (p90 {p90:.2}); speed vs boto3 (boto3/adapter median): new {:.2}, old {:.2}",
                p50 / a50,
                p50 / b50,
            );
        }
        let end = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        println!(
            "agentcore bench load average: {} at the start, {} at the end",
            load.split(' ').take(3).collect::<Vec<_>>().join(" "),
            end.split(' ').take(3).collect::<Vec<_>>().join(" ")
        );
        let _ = new.close().await;
        let _ = old.close().await;
        drop(boto3);
        let _ = py.wait();
    });
}
