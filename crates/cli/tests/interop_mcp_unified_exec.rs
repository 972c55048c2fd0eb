//! Interop: the official MCP Python SDK (the venv of `interop_mcp.rs`) drives `execseam mcp
//! --adapter local`'s unified exec tools under Codex's names: `python3 -i` on a terminal, `1+1`
//! typed and `2` read back, `exit()` and the session's exit code, a plain-pipes command with
//! stdout and stderr apart, and the per-call output bound. What the script asserts, and the
//! Codex source it follows, is written in `interop/mcp/unified_exec.py`. One MCP session.
//! And on an adapter without terminals (the Fly emulator's machine, `execseam emulate fly`):
//! `tty: true` refused as `unsupported`, the same command on pipes run (one more session,
//! `interop/mcp/unified_exec_no_terminal.py`).

mod common;

use execseam_test_util::daemon::Daemon;
use execseam_test_util::interop;

/// Checks `unified_exec.py` makes; the run must report exactly this many.
const CHECKS: usize = 7;

#[test]
fn the_official_python_sdk_drives_unified_exec_on_a_terminal() {
    let python = common::mcp_python();
    let scratch = tempfile::tempdir().unwrap();
    let root = scratch.path().canonicalize().unwrap();
    let env = vec![
        (
            "EXECSEAM_BIN".to_owned(),
            env!("CARGO_BIN_EXE_execseam").to_owned(),
        ),
        ("MCP_ROOT".to_owned(), root.to_str().unwrap().to_owned()),
    ];
    let out =
        interop::run_python(&python, &common::mcp_dir().join("unified_exec.py"), &env).unwrap();
    interop::assert_checks("mcp unified exec", &out, CHECKS);
}

#[test]
fn a_tty_session_on_an_adapter_without_terminals_is_refused_as_unsupported() {
    let python = common::mcp_python();
    let bin = env!("CARGO_BIN_EXE_execseam");
    let emu = Daemon::emulate(bin, "fly", "EXECSEAM_SANDBOX");
    let mut env = emu.env();
    env.push(("EXECSEAM_BIN".to_owned(), bin.to_owned()));
    let out = interop::run_python(
        &python,
        &common::mcp_dir().join("unified_exec_no_terminal.py"),
        &env,
    )
    .unwrap();
    interop::assert_checks("mcp unified exec without terminals", &out, 2);
}
