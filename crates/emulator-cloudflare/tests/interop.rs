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
    EmulatorOptions {
        token: Some("interop-secret".into()),
        ..EmulatorOptions::default()
    }
}

fn show(out: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_agents_cloudflare_client_against_the_emulator() {
    let emulator = CloudflareEmulator::start(options())
        .await
        .expect("emulator");
    let env = emulator.env();
    let out = tokio::task::spawn_blocking(move || {
        let python = python_env("cloudflare", &dir().join("requirements.txt"))?;
        run_python(&python, &dir().join("interop.py"), &env)
    })
    .await
    .expect("join")
    .expect("the interop script could not run (is PyPI reachable?)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        text.contains("interop: all checks passed"),
        "{}",
        show(&out)
    );
    let checks = text.lines().filter(|l| l.starts_with("ok ")).count();
    assert_eq!(checks, 32, "{}", show(&out));
    // The SDK deleted its sandbox.
    assert!(
        emulator.sandbox_ids().is_empty(),
        "{:?}",
        emulator.sandbox_ids()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn openai_agents_shell_tools_run_commands_on_the_bridge_terminal() {
    let emulator = CloudflareEmulator::start(options())
        .await
        .expect("emulator");
    let env = emulator.env();
    let out = tokio::task::spawn_blocking(move || {
        let python = python_env("cloudflare", &dir().join("requirements.txt"))?;
        run_python(&python, &dir().join("pty_interop.py"), &env)
    })
    .await
    .expect("join")
    .expect("the PTY interop script could not run (is PyPI reachable?)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        text.contains("pty interop: all checks passed"),
        "{}",
        show(&out)
    );
    let checks = text.lines().filter(|l| l.starts_with("ok ")).count();
    assert_eq!(checks, 22, "{}", show(&out));
    assert!(
        emulator.sandbox_ids().is_empty(),
        "{:?}",
        emulator.sandbox_ids()
    );
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
