//! boto3 (the official AWS SDK for Python, pinned in `interop/agentcore/requirements.txt`) against
//! the AgentCore emulator: sessions, executeCommand (success, non-zero exit, stderr, the user, the
//! executionTime in seconds as observed), executeCode (executionTime in ms as documented; (a python, a javascript and a typescript context per session,
//! clearContext), the fresh session directory's listing, the files
//! tools, the task tools, and AgentCore-specific faults (an exception event, an HTTP 402, a bad
//! CRC, the generic error frame) as botocore's own event-stream parser sees them.
//!
//! Needs PyPI (or a warm `target/interop/agentcore` virtualenv); fails loudly without it.

use std::path::PathBuf;

use execseam_emulator_agentcore::{AgentCoreEmulator, AgentCoreFault, AgentCoreOptions, Exception};
use execseam_emulator_kit::EmulatorOptions;
use execseam_test_util::interop;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("interop")
}

async fn run(phase: &'static str, env: Vec<(String, String)>) -> String {
    let out = tokio::task::spawn_blocking(move || {
        let python = interop::python_env("agentcore", &dir().join("requirements.txt"))
            .expect("the boto3 virtualenv (is PyPI reachable?)");
        interop::run_python(&python, &dir().join("interop.py"), &with_phase(env, phase))
            .expect("python runs")
    })
    .await
    .expect("the blocking task");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "interop.py {phase} failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stdout.trim_end().ends_with("done"), "{stdout}");
    println!("interop.py {phase}:\n{stdout}");
    stdout
}

fn with_phase(mut env: Vec<(String, String)>, phase: &str) -> Vec<(String, String)> {
    // interop::run_python takes no arguments: the phase travels in the environment.
    env.push(("EXECSEAM_INTEROP_PHASE".into(), phase.into()));
    env
}

#[tokio::test(flavor = "multi_thread")]
async fn boto3_drives_the_emulator() {
    // TypeScript cells are stripped by esbuild, which tsx brings (installed from npm).
    tokio::task::spawn_blocking(interop::typescript_runtime)
        .await
        .expect("join")
        .expect("tsx and esbuild from the npm registry (is it reachable?)");
    let esbuild = interop::target_dir().join("interop/typescript/node_modules/esbuild");
    let options = AgentCoreOptions {
        esbuild: Some(esbuild),
    };
    let emu = AgentCoreEmulator::start_with(EmulatorOptions::default(), options)
        .await
        .expect("emulator");
    let stdout = run("main", emu.env()).await;
    for check in [
        "ok start_code_interpreter_session",
        "ok get_code_interpreter_session READY",
        "ok executeCommand success",
        "ok executeCommand executionTime in seconds, as observed",
        "ok commands run as genesis1ptools (992) in the session directory",
        "ok executeCode python: variables, functions and imports survive between calls",
        "ok executeCode python runs as genesis1ptools in the session directory",
        "ok executeCode python: an exception is an error result and the context survives it",
        "ok executeCode python: clearContext resets the context",
        "ok executeCode javascript: a context per session, reset by clearContext",
        "ok executeCode typescript: typed code, a context per session, reset by clearContext",
        "ok executeCommand non-zero exit and stderr",
        "ok writeFiles text and blob",
        "ok readFiles text and blob",
        "ok listFiles",
        "ok files written through writeFiles are seen by commands",
        "ok startCommandExecution + getTask",
        "ok stopTask",
        "ok removeFiles",
        "ok list_code_interpreter_sessions",
        "ok stop_code_interpreter_session TERMINATED",
        "ok a stopped session is ResourceNotFoundException",
    ] {
        assert!(stdout.contains(check), "missing {check:?} in:\n{stdout}");
    }
    // boto3 signs every request; the emulator counted the command submissions.
    assert!(emu.count("exec") >= 6, "{}", emu.count("exec"));
}

#[tokio::test(flavor = "multi_thread")]
async fn botocore_sees_the_faults_in_agentcore_format() {
    let emu = AgentCoreEmulator::start(EmulatorOptions::default())
        .await
        .expect("emulator");
    for f in [
        AgentCoreFault::StreamException(Exception::Validation),
        AgentCoreFault::HttpException(Exception::ServiceQuotaExceeded),
        AgentCoreFault::BadMessageCrc,
        AgentCoreFault::ErrorFrame,
    ] {
        emu.arm("exec", f);
    }
    let stdout = run("faults", emu.env()).await;
    for check in [
        "ok exception event -> EventStreamError validationException",
        "ok HTTP 402 -> ServiceQuotaExceededException",
        "ok bad message CRC -> ChecksumMismatch",
        "ok error frame -> EventStreamError InternalFailure",
        "ok the next call is served normally",
    ] {
        assert!(stdout.contains(check), "missing {check:?} in:\n{stdout}");
    }
    // Retries were off: each faulted call reached the emulator once (4), plus the last one.
    assert_eq!(emu.count("exec"), 5);
}
