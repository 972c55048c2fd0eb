//! Exec latency of the Modal adapter next to the official `modal==1.6.4` client, against the
//! same emulator and the same sandbox, in one run: the two alternate command by command, so both
//! see the same machine load. Each side times one whole exec (start, stdout and stderr read to
//! their ends, exit) itself; the client reports its own `time.perf_counter()` span, so the pipe
//! to it is not counted. Prints the medians and the ratio (adapter / client).
//!
//! `cargo bench -p execseam-modal` (or `cargo xtask bench`). Needs the interop virtualenv
//! (PyPI, or a warm `target/interop/modal`). `EXECSEAM_BENCH_SCALE=0.1` shortens it.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command as Process, Stdio};
use std::time::{Duration, Instant};

use execseam_core::{Command, Exec, Sandbox, SandboxSpec};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::modal::{ModalEmulator, TOKEN_ID};
use execseam_modal::{ModalConfig, ModalExec, ModalProvider};
use execseam_test_util::{bench, interop};

struct Client {
    child: std::process::Child,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl Client {
    fn run(&mut self, argv: &[&str]) -> (Duration, usize) {
        let stdin = self.child.stdin.as_mut().expect("stdin");
        writeln!(stdin, "{}", argv.join(" ")).expect("write");
        stdin.flush().expect("flush");
        let line = self.lines.next().expect("a line").expect("read");
        let mut f = line.split_whitespace();
        let secs: f64 = f.next().expect("secs").parse().expect("float");
        let out: usize = f.next().expect("len").parse().expect("int");
        assert_eq!(f.nth(1), Some("0"), "exit code: {line}");
        (Duration::from_secs_f64(secs), out)
    }
}

async fn adapter(exec: &ModalExec, argv: &[&str]) -> (Duration, usize) {
    let t = Instant::now();
    let o = exec
        .exec(Command::new(argv.iter().copied()).expect("valid"))
        .await
        .expect("exec");
    let d = t.elapsed();
    assert!(o.exit.success(), "{o:?}");
    (d, o.stdout.len())
}

fn main() {
    bench::runtime(Some(2)).block_on(async {
        let emu = ModalEmulator::start(EmulatorOptions::default())
            .await
            .expect("emulator");
        let config = ModalConfig::new(TOKEN_ID, emu.token_secret())
            .server_url(emu.url())
            .sandbox_timeout(Duration::from_secs(3600));
        let exec = ModalProvider::new(config)
            .expect("config")
            .create(SandboxSpec::new())
            .await
            .expect("create");
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../emulator-modal/interop");
        let python = interop::python_env("modal", &dir.join("requirements.txt"))
            .expect("the modal virtualenv (is PyPI reachable?)");
        let mut child = Process::new(python)
            .arg(dir.join("bench.py"))
            .arg(exec.sandbox_id())
            .envs(emu.env())
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        assert_eq!(lines.next().expect("ready").expect("read"), "ready");
        let mut client = Client { child, lines };
        let workloads: [(&str, &[&str], usize); 2] = [
            ("true", &["true"], 200),
            ("1 MiB stdout", &["head", "-c", "1048576", "/dev/zero"], 60),
        ];
        for (name, argv, n) in workloads {
            let n = bench::count(n, 5);
            assert_eq!(
                adapter(&exec, argv).await.1,
                client.run(argv).1,
                "same output"
            );
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for i in 0..n {
                if i % 2 == 0 {
                    a.push(adapter(&exec, argv).await.0);
                    b.push(client.run(argv).0);
                } else {
                    b.push(client.run(argv).0);
                    a.push(adapter(&exec, argv).await.0);
                }
            }
            let medians = (bench::median(a), bench::median(b));
            bench::report(name, ["execseam-modal", "modal 1.6.4 client"], medians, n);
        }
        drop(client.child.stdin.take());
        let _ = client.child.wait();
        exec.close().await.expect("close");
    });
}
