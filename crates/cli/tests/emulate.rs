//! `execseam emulate` states the isolation in force, and leaves nothing behind: after SIGTERM or
//! SIGINT no process it started (sandbox inits, commands, daemons) is alive and its sandboxes'
//! state directory is empty; after SIGKILL its sandboxes' processes still die (their init reads a
//! lifeline only the emulator held). Counts only what this test's own emulator started: its
//! descendants, and a state directory of the test's own.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use execseam_emulators::Isolation;
use execseam_test_util::daemon::Daemon;

struct Emulate {
    daemon: Daemon,
    env: Vec<(String, String)>,
    banner: String,
    state: PathBuf,
}

fn start(name: &str) -> Emulate {
    let state = std::env::temp_dir().join(format!(
        "execseam-cli-emulate-{name}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&state).unwrap();
    let daemon = Daemon::start(
        env!("CARGO_BIN_EXE_execseam"),
        &["emulate", "e2b", "--state-dir", state.to_str().unwrap()],
        |l| l.starts_with("export E2B_API_KEY="),
    );
    Emulate {
        env: daemon.env(),
        banner: daemon.banner.join("\n"),
        daemon,
        state,
    }
}

impl Emulate {
    fn var(&self, k: &str) -> String {
        self.env.iter().find(|(n, _)| n == k).unwrap().1.clone()
    }

    /// Creates a sandbox through the control plane and starts a daemon in it with `execseam run`.
    fn sandbox_with_daemon(&self) {
        let base = self.var("E2B_API_URL");
        let addr = base.trim_start_matches("http://").to_owned();
        let body = r#"{"templateID":"base"}"#;
        let mut s = TcpStream::connect(&addr).unwrap();
        write!(
            s,
            "POST /sandboxes HTTP/1.1\r\nHost: {addr}\r\nX-API-KEY: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.var("E2B_API_KEY"),
            body.len()
        )
        .unwrap();
        let mut resp = String::new();
        s.read_to_string(&mut resp).unwrap();
        let json = resp.split("\r\n\r\n").nth(1).unwrap();
        let id = serde_json::from_str::<serde_json::Value>(json).unwrap()["sandboxID"]
            .as_str()
            .unwrap()
            .to_owned();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_execseam"))
            .args(["run", "--adapter", "e2b", "--", "sh", "-c"])
            .arg("setsid sleep 300 </dev/null >/dev/null 2>&1 & echo started")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            // The CLI's --sandbox (its variable): run in this sandbox and leave it running.
            .env("EXECSEAM_SANDBOX", id)
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "started\n",
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn ppid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')')
        .next()?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Every live process below `root`.
fn descendants(root: u32) -> Vec<u32> {
    let all: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    let mut found = vec![root];
    let mut grew = true;
    while grew {
        grew = false;
        for &p in &all {
            if !found.contains(&p) && ppid(p).is_some_and(|pp| found.contains(&pp)) {
                found.push(p);
                grew = true;
            }
        }
    }
    found.retain(|&p| p != root);
    found
}

fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

fn assert_gone(pids: &[u32], within: Duration) {
    let deadline = Instant::now() + within;
    while pids.iter().any(|&p| alive(p)) {
        assert!(
            Instant::now() < deadline,
            "left running: {:?}",
            pids.iter().filter(|&&p| alive(p)).collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
                .collect()
        })
        .unwrap_or_default()
}

fn stops_cleanly(sig: &str) {
    let mut emu = start(sig.trim_start_matches('-'));
    assert!(
        emu.banner.contains("isolation:") && emu.banner.contains("not in a VM"),
        "the banner states the isolation: {}",
        emu.banner
    );
    emu.sandbox_with_daemon();
    let started = descendants(emu.daemon.id());
    // unshare, the init and the daemon, at least.
    assert!(started.len() >= 3, "{started:?}");
    assert!(!entries(&emu.state).is_empty());
    signal(emu.daemon.id(), sig);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(st) = emu.daemon.try_wait() {
            assert!(st.success(), "emulate exited with {st}");
            break;
        }
        assert!(Instant::now() < deadline, "emulate did not stop on {sig}");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_gone(&started, Duration::from_secs(2));
    assert_eq!(
        entries(&emu.state),
        Vec::<String>::new(),
        "state left behind"
    );
    std::fs::remove_dir(&emu.state).unwrap();
}

fn needs_namespaces() {
    assert_eq!(
        Isolation::detect(),
        Isolation::Namespaces,
        "this test needs root and util-linux's unshare (the emulators' real sandboxes)"
    );
}

#[test]
fn sigterm_leaves_nothing_behind() {
    needs_namespaces();
    stops_cleanly("-TERM");
}

#[test]
fn sigint_leaves_nothing_behind() {
    needs_namespaces();
    stops_cleanly("-INT");
}

#[test]
fn sigkill_still_ends_the_sandboxes() {
    needs_namespaces();
    let mut emu = start("KILL");
    emu.sandbox_with_daemon();
    let started = descendants(emu.daemon.id());
    signal(emu.daemon.id(), "-KILL");
    emu.daemon.kill();
    // unshare outlives its parent briefly; the init ends when the lifeline closes, and with it
    // every process of the sandbox.
    assert_gone(&started, Duration::from_secs(5));
    // What SIGKILL cannot clean: the state directory this test created.
    std::fs::remove_dir_all(&emu.state).unwrap();
}

/// `execseam emulate modal` writes the certificate its tunnels present (with this system's roots)
/// and prints `SSL_CERT_FILE` naming it: the official client's `Tunnel.url` then verifies under
/// Python's default ssl context, run with exactly the environment the CLI printed.
#[test]
fn emulate_modal_prints_the_tunnel_certificate_that_verifies_tunnel_url() {
    needs_namespaces();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("modal-ca.pem");
    let daemon = Daemon::start(
        env!("CARGO_BIN_EXE_execseam"),
        &["emulate", "modal", "--ca-file", ca.to_str().unwrap()],
        |l| l.starts_with("export SSL_CERT_FILE="),
    );
    assert_eq!(daemon.var("SSL_CERT_FILE"), ca.display().to_string());
    let pem = std::fs::read_to_string(&ca).unwrap();
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
    let interop = Path::new(env!("CARGO_MANIFEST_DIR")).join("../emulator-modal/interop");
    let python =
        execseam_test_util::interop::python_env("modal", &interop.join("requirements.txt"))
            .expect("the modal virtualenv (is PyPI reachable?)");
    let out = std::process::Command::new(python)
        .arg(interop.join("interop.py"))
        .arg("tunnel-ca")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(daemon.env())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.trim_end().ends_with("done"),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("ok GET Tunnel.url verifies with the certificate execseam emulate printed")
    );
    assert!(stdout.contains("ok without it, the tunnel's certificate does not verify"));
}
