//! Interop: the official `e2b` Python SDK (pinned in `interop/e2b/requirements.txt`) against the
//! E2B emulator: the exec and files surface end to end, then one command under each fault the SDK
//! maps to its own exception. Fails loudly when PyPI cannot be reached.

use std::path::{Path, PathBuf};
use std::time::Duration;

use execseam_emulators::e2b::{E2bEmulator, StreamFault};
use execseam_emulators::{EmulatorOptions, Fault, interop};

/// Checks `e2b_interop.py main` makes; the run must report exactly this many.
const MAIN_CHECKS: usize = 57;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("interop/e2b")
}

async fn python() -> PathBuf {
    tokio::task::spawn_blocking(|| {
        interop::python_env("e2b", &dir().join("requirements.txt"))
            .expect("the official e2b SDK installs from PyPI")
    })
    .await
    .unwrap()
}

async fn run(python: &Path, env: Vec<(String, String)>, args: &[&str]) -> (bool, String) {
    let python = python.to_owned();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new(&python)
            .arg(dir().join("e2b_interop.py"))
            .args(&args)
            .envs(env)
            .env("PYTHONUNBUFFERED", "1")
            .stdin(std::process::Stdio::null())
            .output()
            .expect("python runs");
        let text = format!(
            "{}\n--- stderr ---\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_official_sdk_runs_commands_and_files_against_the_emulator() {
    let python = python().await;
    let emu = E2bEmulator::start(EmulatorOptions::default())
        .await
        .unwrap();
    let (ok, out) = run(&python, emu.env(), &["main"]).await;
    assert!(ok, "the SDK run failed:\n{out}");
    assert!(
        out.contains(&format!("ALL CHECKS PASSED {MAIN_CHECKS}")),
        "not every check ran:\n{out}"
    );
    let checks = out.lines().filter(|l| l.starts_with("CHECK ")).count();
    assert_eq!(checks, MAIN_CHECKS, "{out}");
    // What the SDK sent: the v2 create, Connect streams with its keepalive header.
    let reqs = emu.requests();
    assert!(
        reqs.iter()
            .any(|r| r.path == "/v2/sandboxes" && r.method == "POST")
    );
    let start = reqs
        .iter()
        .find(|r| r.path == "/process.Process/Start")
        .expect("a Start");
    assert_eq!(start.headers["content-type"], "application/connect+json");
    assert_eq!(start.headers["keepalive-ping-interval"], "50");
    assert_eq!(start.headers["connect-timeout-ms"], "60000");
    assert!(
        reqs.iter()
            .any(|r| r.path == "/process.Process/StreamInput")
    );
    assert!(
        reqs.iter()
            .any(|r| r.path == "/filesystem.Filesystem/ListDir")
    );
    assert!(
        reqs.iter()
            .any(|r| r.path == "/files" && r.method == "POST")
    );
    eprintln!("{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_official_sdk_maps_the_emulators_faults_to_its_exceptions() {
    let python = python().await;
    let emu = E2bEmulator::start(EmulatorOptions::default())
        .await
        .unwrap();
    type Arm = Box<dyn Fn(&E2bEmulator)>;
    let cases: Vec<(&str, &str, Arm)> = vec![
        (
            "rate-limited",
            "RateLimitException",
            Box::new(|e| {
                e.faults().arm(
                    "exec",
                    Fault::RateLimited {
                        retry_after_secs: 1,
                    },
                )
            }),
        ),
        (
            "auth",
            "AuthenticationException",
            Box::new(|e| e.faults().arm("exec", Fault::AuthFailure)),
        ),
        (
            "stream-error",
            "SandboxException",
            Box::new(|e| {
                e.arm_stream_fault(StreamFault::Error {
                    code: "internal",
                    message: "boom".into(),
                })
            }),
        ),
        (
            "deadline",
            "TimeoutException",
            Box::new(|e| {
                e.arm_stream_fault(StreamFault::Error {
                    code: "deadline_exceeded",
                    message: "context deadline exceeded".into(),
                })
            }),
        ),
        (
            "no-end-event",
            "Exception",
            Box::new(|e| e.arm_stream_fault(StreamFault::NoEndEvent)),
        ),
        // Last: the sandbox is gone afterwards.
        (
            "vanish",
            "SandboxNotRunningException",
            Box::new(|e| e.faults().arm("exec", Fault::SandboxVanishes)),
        ),
    ];
    let sbx = emu.create_sandbox(Duration::from_secs(600)).unwrap();
    for (kind, class, arm) in cases {
        arm(&emu);
        let (ok, out) = run(&python, emu.env(), &["fault", kind, &sbx.sandbox_id]).await;
        assert!(ok, "{kind}:\n{out}");
        assert!(
            out.contains(&format!("FAULT {kind} {class} ")),
            "{kind}: want {class}:\n{out}"
        );
        emu.faults().clear();
    }
}
