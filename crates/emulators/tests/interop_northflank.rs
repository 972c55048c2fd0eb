//! The official Northflank clients against the emulator: the Python SDK (PyPI `northflank`,
//! pinned in `interop/northflank/requirements.txt`) and the JS client (npm
//! `@northflank/js-client`, pinned in `interop/northflank/package-lock.json`), each driving the
//! REST routes around exec, one-shot exec (argv, shell strings, separate streams, exit codes),
//! sessions with stdin, files, a job run (detached, polled, its logs), a bad token, and two
//! injected faults. Fails loudly when a registry cannot be reached.

use std::path::{Path, PathBuf};
use std::time::Duration;

use execseam_emulators::harness::{Fault, FaultRule, When};
use execseam_emulators::northflank::{JOB_ID, NorthflankEmulator, NorthflankOptions};
use execseam_emulators::{EmulatorOptions, Isolation, interop};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("interop/northflank")
}

async fn emulator() -> NorthflankEmulator {
    assert_eq!(
        Isolation::detect(),
        Isolation::Namespaces,
        "the Northflank interop checks need mount namespaces (root and unshare): the clients \
         address the container's /app and /root"
    );
    NorthflankEmulator::start(
        EmulatorOptions {
            token: Some("nf-interop-token".into()),
            ..EmulatorOptions::default()
        },
        NorthflankOptions::default(),
    )
    .await
    .expect("the emulator starts")
}

/// Arms `rules` (route `exec`, `(nth, fault)`) once the client creates the ready file.
fn arm_faults_when_ready(
    emu: &NorthflankEmulator,
    scratch: &Path,
    rules: Vec<(u64, Fault)>,
) -> Vec<(String, String)> {
    let ready = scratch.join("faults-ready");
    let armed = scratch.join("faults-armed");
    let faults = emu.faults().clone();
    let (r, a) = (ready.clone(), armed.clone());
    tokio::spawn(async move {
        while !r.exists() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for (n, fault) in rules {
            faults.add(FaultRule {
                route: "exec".into(),
                when: When::Nth(n),
                fault,
            });
        }
        std::fs::write(&a, b"").expect("armed");
    });
    let mut env = emu.env();
    env.push(("NORTHFLANK_JOB_ID".into(), JOB_ID.into()));
    env.push(("FAULTS_READY".into(), ready.to_string_lossy().into()));
    env.push(("FAULTS_ARMED".into(), armed.to_string_lossy().into()));
    env
}

fn assert_checks(name: &str, out: &std::process::Output, want: usize) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}");
    assert!(
        out.status.success() && stdout.lines().last() == Some("OK"),
        "the {name} check failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    let checks = stdout.lines().filter(|l| l.starts_with("ok ")).count();
    assert_eq!(
        checks, want,
        "every check of the {name} script ran:\n{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_official_python_sdk_works_against_the_emulator() {
    let emu = emulator().await;
    let reqs = dir().join("requirements.txt");
    let python = tokio::task::spawn_blocking(move || interop::python_env("northflank", &reqs))
        .await
        .unwrap()
        .expect("a virtualenv with the official northflank SDK");
    let scratch = tempfile::tempdir().expect("scratch");
    let env = arm_faults_when_ready(
        &emu,
        scratch.path(),
        vec![
            (1, Fault::CutBeforeExit),
            (
                2,
                Fault::RateLimited {
                    retry_after_secs: 1,
                },
            ),
        ],
    );
    let script = dir().join("sdk_check.py");
    let out = tokio::task::spawn_blocking(move || interop::run_python(&python, &script, &env))
        .await
        .unwrap()
        .expect("python runs");
    assert_checks("Python", &out, 31);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_official_js_client_works_against_the_emulator() {
    let emu = emulator().await;
    let npm = tokio::task::spawn_blocking(|| interop::node_env("northflank-npm", &dir()))
        .await
        .unwrap()
        .expect("an npm directory with the official @northflank/js-client");
    let scratch = tempfile::tempdir().expect("scratch");
    let env = arm_faults_when_ready(
        &emu,
        scratch.path(),
        vec![(1, Fault::ServerError), (2, Fault::CutBeforeExit)],
    );
    let script = dir().join("sdk_check.mjs");
    let out = tokio::task::spawn_blocking(move || interop::run_node(&npm, &script, &env))
        .await
        .unwrap()
        .expect("node runs");
    assert_checks("JS", &out, 21);
}
