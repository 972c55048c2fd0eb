//! The official Vercel Sandbox clients against the emulator: the Python SDK (PyPI
//! `vercel-sandbox`, pinned in `interop/vercel/requirements.txt`) and the TypeScript SDK (npm
//! `@vercel/sandbox`, pinned in `interop/vercel/package-lock.json`), each driving create, exec
//! (argv, cwd, env, stdin, separate streams, exit codes), detached commands with wait and logs,
//! files, the lifecycle, and two injected faults. Fails loudly when a registry cannot be reached.

use std::path::{Path, PathBuf};

use execseam_emulator_kit::Fault;
use execseam_emulator_kit::{EmulatorOptions, Isolation};
use execseam_emulator_vercel::{VercelEmulator, VercelOptions};
use execseam_test_util::interop;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("interop")
}

async fn emulator() -> VercelEmulator {
    assert_eq!(
        Isolation::detect(),
        Isolation::Namespaces,
        "the Vercel interop checks need mount namespaces (root and unshare): the SDKs address \
         /vercel/sandbox"
    );
    VercelEmulator::start_with(
        EmulatorOptions::with_token("vercel-interop-token"),
        VercelOptions::default(),
    )
    .await
    .expect("the emulator starts")
}

/// The emulator's environment, with `rules` armed once the client script is ready (the
/// hand-shake files in `scratch`).
fn env_with_faults(
    emu: &VercelEmulator,
    scratch: &Path,
    rules: Vec<(&'static str, u64, Fault)>,
) -> Vec<(String, String)> {
    let mut env = emu.env();
    env.extend(interop::arm_faults_when_ready(emu.faults(), scratch, rules));
    env
}

/// A started emulator, its environment with `rules` armed ([`env_with_faults`]) and the
/// scratch directory of the hand-shake files (both kept for the test's length).
async fn armed(
    rules: Vec<(&'static str, u64, Fault)>,
) -> (VercelEmulator, Vec<(String, String)>, tempfile::TempDir) {
    let emu = emulator().await;
    let scratch = tempfile::tempdir().expect("scratch");
    let env = env_with_faults(&emu, scratch.path(), rules);
    (emu, env, scratch)
}

/// The SDK deleted every sandbox it created.
fn assert_deleted(emu: &VercelEmulator) {
    assert!(
        emu.sandbox_names().is_empty(),
        "the SDK deleted its sandboxes: {:?}",
        emu.sandbox_names()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_official_python_sdk_works_against_the_emulator() {
    let (emu, env, _scratch) = armed(vec![
        ("exec", 1, Fault::ServerError),
        ("exec", 2, Fault::CutBeforeExit),
    ])
    .await;
    interop::python_checks("vercel", &dir(), "sdk_check.py", env, 58).await;
    assert_deleted(&emu);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_official_typescript_sdk_works_against_the_emulator() {
    // 429 on the 1st submit (the SDK's retry is the 2nd), a cut stream on the 3rd, a 500 on the
    // 4th (the SDK's retry of it is the 5th).
    let (emu, env, _scratch) = armed(vec![
        (
            "exec",
            1,
            Fault::RateLimited {
                retry_after_secs: 1,
            },
        ),
        ("exec", 3, Fault::CutBeforeExit),
        ("exec", 4, Fault::ServerError),
    ])
    .await;
    interop::node_checks("vercel-npm", &dir(), "sdk_check.mjs", env, 41).await;
    assert_deleted(&emu);
}
