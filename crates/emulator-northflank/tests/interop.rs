//! The official Northflank clients against the emulator: the Python SDK (PyPI `northflank`,
//! pinned in `interop/northflank/requirements.txt`) and the JS client (npm
//! `@northflank/js-client`, pinned in `interop/northflank/package-lock.json`), each driving the
//! REST routes around exec, one-shot exec (argv, shell strings, separate streams, exit codes),
//! sessions with stdin, files, a job run (detached, polled, its logs), a bad token, and two
//! injected faults. Fails loudly when a registry cannot be reached.

use std::path::{Path, PathBuf};

use execseam_emulator_kit::Fault;
use execseam_emulator_kit::{EmulatorOptions, Isolation};
use execseam_emulator_northflank::{JOB_ID, NorthflankEmulator, NorthflankOptions};
use execseam_test_util::interop;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("interop")
}

async fn emulator() -> NorthflankEmulator {
    assert_eq!(
        Isolation::detect(),
        Isolation::Namespaces,
        "the Northflank interop checks need mount namespaces (root and unshare): the clients \
         address the container's /app and /root"
    );
    NorthflankEmulator::start_with(
        EmulatorOptions::with_token("nf-interop-token"),
        NorthflankOptions::default(),
    )
    .await
    .expect("the emulator starts")
}

/// The emulator's environment, the job, and `rules` armed once the client script is ready (the
/// hand-shake files in `scratch`).
fn env_for(
    emu: &NorthflankEmulator,
    scratch: &Path,
    rules: Vec<(&'static str, u64, Fault)>,
) -> Vec<(String, String)> {
    let mut env = emu.env();
    env.push(("NORTHFLANK_JOB_ID".into(), JOB_ID.into()));
    env.extend(interop::arm_faults_when_ready(emu.faults(), scratch, rules));
    env
}

/// A started emulator, its environment with `rules` armed ([`env_for`]) and the scratch
/// directory of the hand-shake files (both kept for the test's length).
async fn armed(
    rules: Vec<(&'static str, u64, Fault)>,
) -> (NorthflankEmulator, Vec<(String, String)>, tempfile::TempDir) {
    let emu = emulator().await;
    let scratch = tempfile::tempdir().expect("scratch");
    let env = env_for(&emu, scratch.path(), rules);
    (emu, env, scratch)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_official_python_sdk_works_against_the_emulator() {
    let (_emu, env, _scratch) = armed(vec![
        ("exec", 1, Fault::CutBeforeExit),
        (
            "exec",
            2,
            Fault::RateLimited {
                retry_after_secs: 1,
            },
        ),
    ])
    .await;
    interop::python_checks("northflank", &dir(), "sdk_check.py", env, 32).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_official_js_client_works_against_the_emulator() {
    let (_emu, env, _scratch) = armed(vec![
        ("exec", 1, Fault::ServerError),
        ("exec", 2, Fault::CutBeforeExit),
    ])
    .await;
    interop::node_checks("northflank-npm", &dir(), "sdk_check.mjs", env, 22).await;
}
