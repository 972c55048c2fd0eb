//! `execseam chaos` and `execseam emulate --chaos`: the chaos proxy as a product. An agent's
//! command through a cut stream or a stalled answer gets a typed error (exit 125, one typed
//! line), never an exit code, and the proxy says which rule fired.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A long-running `execseam` process (emulate or chaos), stopped with SIGTERM when dropped.
struct Daemon {
    child: Child,
    /// What it printed on stdout before it was ready.
    banner: Vec<String>,
    /// Everything it writes to stderr.
    stderr: Arc<Mutex<String>>,
}

impl Daemon {
    /// Starts `execseam ARGS` and reads stdout until a line satisfies `ready`.
    fn start(args: &[&str], ready: impl Fn(&str) -> bool) -> Daemon {
        let mut child = Command::new(env!("CARGO_BIN_EXE_execseam"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut err = child.stderr.take().unwrap();
        let sink = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut banner = Vec::new();
        loop {
            let mut line = String::new();
            assert!(
                out.read_line(&mut line).unwrap() > 0,
                "execseam {args:?} exited early: {banner:?} {}",
                stderr.lock().unwrap()
            );
            let line = line.trim_end().to_owned();
            let done = ready(&line);
            banner.push(line);
            if done {
                break;
            }
        }
        std::thread::spawn(move || {
            let mut sink = Vec::new();
            let _ = out.read_to_end(&mut sink);
        });
        Daemon {
            child,
            banner,
            stderr,
        }
    }

    /// The `export K=V` lines it printed.
    fn env(&self) -> Vec<(String, String)> {
        self.banner
            .iter()
            .filter_map(|l| l.strip_prefix("export "))
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.trim_matches('\'').to_owned()))
            .collect()
    }

    fn var(&self, k: &str) -> String {
        self.env()
            .into_iter()
            .find(|(n, _)| n == k)
            .unwrap_or_else(|| panic!("no {k} in {:?}", self.banner))
            .1
    }

    /// Waits until its stderr contains `text`.
    fn wait_stderr(&self, text: &str) -> String {
        let t = Instant::now();
        loop {
            let s = self.stderr.lock().unwrap().clone();
            if s.contains(text) || t.elapsed() > Duration::from_secs(10) {
                return s;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let t = Instant::now();
        while t.elapsed() < Duration::from_secs(15) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `execseam run ARGS` with `env`: (exit status, stdout, stderr).
fn run(args: &[&str], env: &[(String, String)]) -> (Option<i32>, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_execseam"))
        .arg("run")
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
    (o.status.code(), text(o.stdout), text(o.stderr))
}

#[test]
fn execseam_chaos_in_front_of_an_emulator_cuts_and_stalls_the_stream() {
    let emu = Daemon::start(&["emulate", "e2b"], |l| l.starts_with("export E2B_DOMAIN="));
    let upstream = emu.var("E2B_API_URL");
    // The first command's output stream loses its end (the exit never comes); the second's
    // answer stalls after its head.
    let proxy = Daemon::start(
        &[
            "chaos",
            "--upstream",
            &upstream,
            "--rule",
            "POST /process.Process/Start#1=drop-last",
            "--rule",
            "POST /process.Process/Start#2=stall",
        ],
        |l| l.starts_with("# rule: POST /process.Process/Start#2=stall"),
    );
    let url = proxy.banner[0]
        .strip_prefix("chaos proxy listening on ")
        .and_then(|l| l.split_once(" -> "))
        .map(|(url, up)| {
            assert_eq!(up, upstream);
            url.to_owned()
        })
        .unwrap_or_else(|| panic!("{:?}", proxy.banner));
    let env: Vec<(String, String)> = emu
        .env()
        .into_iter()
        .map(|(k, v)| (k, v.replace(&upstream, &url)))
        .collect();

    let (code, out, err) = run(&["--adapter", "e2b", "--", "echo", "hi"], &env);
    // What streamed before the cut was the command's (`execseam run` streams); its end is not.
    assert_eq!(
        code,
        Some(125),
        "a cut stream is not an exit code: {out:?} {err}"
    );
    eprintln!("cut: {out:?} {err}");
    assert_eq!(err.lines().count(), 1, "one typed line: {err}");
    assert!(
        err.contains("protocol") && err.contains("retry unsafe"),
        "{err}"
    );
    let log = proxy.wait_stderr("-> drop-last");
    assert!(
        log.contains("chaos: POST /process.Process/Start -> drop-last"),
        "{log}"
    );

    let t = Instant::now();
    let (code, out, err) = run(
        &["--adapter", "e2b", "--timeout", "3", "--", "echo", "hi"],
        &env,
    );
    assert_eq!(
        code,
        Some(125),
        "a stalled answer is not an exit code: {out:?} {err}"
    );
    eprintln!("stall: {out:?} {err} after {:?}", t.elapsed());
    assert_eq!(err.lines().count(), 1, "one typed line: {err}");
    assert!(
        err.contains("timeout") && err.contains("retry unsafe"),
        "{err}"
    );
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    let log = proxy.wait_stderr("-> stall");
    assert!(
        log.contains("chaos: POST /process.Process/Start -> stall"),
        "{log}"
    );

    // Untouched after the rules' counts: the third command runs.
    let (code, out, err) = run(&["--adapter", "e2b", "--", "echo", "hi"], &env);
    assert_eq!((code, out.as_str()), (Some(0), "hi\n"), "{err}");
}

#[test]
fn emulate_with_chaos_prints_the_proxys_address() {
    let emu = Daemon::start(
        &["emulate", "chrono", "--chaos", "POST /execute=truncate:40"],
        |l| l.starts_with("export CHRONO_TOKEN="),
    );
    let listening = emu
        .banner
        .iter()
        .find(|l| l.starts_with("chaos proxy listening on "));
    let proxy = listening
        .and_then(|l| l.strip_prefix("chaos proxy listening on "))
        .and_then(|l| l.split_once(" -> "))
        .map(|(p, _)| p.to_owned())
        .unwrap_or_else(|| panic!("{:?}", emu.banner));
    assert_eq!(
        emu.var("CHRONO_BASE_URL"),
        proxy,
        "the export points at the proxy"
    );
    let (code, out, err) = run(&["--adapter", "chrono", "--", "echo", "hi"], &emu.env());
    assert_eq!(
        code,
        Some(125),
        "a cut answer is not an exit code: {out:?} {err}"
    );
    assert_eq!(
        out, "",
        "a buffered answer cut short shows nothing of the command"
    );
    eprintln!("chrono: {err}");
    assert_eq!(err.lines().count(), 1, "one typed line: {err}");
    assert!(err.contains("retry unsafe"), "{err}");
    let log = emu.wait_stderr("-> truncate:40");
    assert!(log.contains("chaos: POST /execute -> truncate:40"), "{log}");
}

#[test]
fn bad_rules_and_upstreams_are_usage_errors() {
    for args in [
        &[
            "chaos",
            "--upstream",
            "http://127.0.0.1:9",
            "--rule",
            "POST /x=explode",
        ][..],
        &[
            "chaos",
            "--upstream",
            "https://example.com",
            "--rule",
            "*=stall",
        ][..],
        &["emulate", "e2b", "--chaos", "no-equals-sign"][..],
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_execseam"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}: {o:?}");
        assert!(!o.stderr.is_empty());
    }
}
