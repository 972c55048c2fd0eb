//! The bridge emulator against clients no one here wrote:
//!
//! 1. the OpenAI Agents SDK's Cloudflare sandbox client (`openai-agents[cloudflare]` from PyPI,
//!    pinned in `interop/cloudflare/requirements.txt`): create, start, exec, files, ls,
//!    running, persist/hydrate, delete, and wire-level error shapes with its HTTP stack;
//!    and its Shell capability's `exec_command`/`write_stdin` tools, invoked as the agent runtime
//!    invokes a function tool, over the terminal WebSocket (`interop/cloudflare/pty_interop.py`);
//! 2. schemathesis (pinned in `interop/cloudflare/requirements-schema.txt`) driving every
//!    operation of the bridge's own OpenAPI document against the emulator, checking status
//!    codes, content types and response bodies against it.
//!
//! Both fail loudly when PyPI cannot be reached.

use std::path::{Path, PathBuf};
use std::process::Output;

use execseam_emulator_cloudflare::CloudflareEmulator;
use execseam_emulator_kit::EmulatorOptions;
use execseam_test_util::interop::{python_env, run_python};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("interop")
}

/// A configured `SANDBOX_API_KEY`, so that a wrong token is refused.
fn options() -> EmulatorOptions {
    EmulatorOptions::with_token("interop-secret")
}

fn show(out: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs the OpenAI Agents SDK script `script` (the `cloudflare` virtualenv) against a fresh
/// emulator: it must succeed, print `passed`, run exactly `checks` checks (`ok …` lines), and
/// delete the sandboxes it made.
async fn sdk_checks(script: &'static str, passed: &str, checks: usize) {
    let emulator = CloudflareEmulator::start(options())
        .await
        .expect("emulator");
    let env = emulator.env();
    let out = tokio::task::spawn_blocking(move || {
        let python = python_env("cloudflare", &dir().join("requirements.txt"))?;
        run_python(&python, &dir().join(script), &env)
    })
    .await
    .expect("join")
    .unwrap_or_else(|e| panic!("{script} could not run (is PyPI reachable?): {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", show(&out));
    assert!(text.contains(passed), "{}", show(&out));
    let ran = text.lines().filter(|l| l.starts_with("ok ")).count();
    assert_eq!(ran, checks, "{}", show(&out));
    // The SDK deleted its sandbox.
    assert!(
        emulator.sandbox_ids().is_empty(),
        "{:?}",
        emulator.sandbox_ids()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_agents_cloudflare_client_against_the_emulator() {
    sdk_checks("interop.py", "interop: all checks passed", 32).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_agents_shell_tools_run_commands_on_the_bridge_terminal() {
    sdk_checks("pty_interop.py", "pty interop: all checks passed", 22).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_bridge_openapi_document_holds_for_the_emulator() {
    let emulator = CloudflareEmulator::start(options())
        .await
        .expect("emulator");
    let mut env = emulator.env();
    env.push((
        "EXECSEAM_OPENAPI".into(),
        dir().join("openapi-0.12.10.json").display().to_string(),
    ));
    env.push((
        "EXECSEAM_SCHEMATHESIS_HOOKS".into(),
        dir().join("schema_hooks.py").display().to_string(),
    ));
    let out = tokio::task::spawn_blocking(move || {
        let python = python_env("cloudflare-schema", &dir().join("requirements-schema.txt"))?;
        run_python(&python, &dir().join("schema_check.py"), &env)
    })
    .await
    .expect("join")
    .expect("the schema check could not run (is PyPI reachable?)");
    assert!(out.status.success(), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("schema check: passed"), "{}", show(&out));
    // The summary (operations, test cases, failures dropped by the documented filter).
    let summary: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.contains("SUMMARY"))
        .collect();
    println!("{}", summary.join("\n"));
    assert!(
        text.contains("Tested: 19"),
        "every operation but the PTY must be tested:\n{}",
        show(&out)
    );
}
