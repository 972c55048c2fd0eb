//! Interop: the official MCP Python SDK (`mcp`, pinned in `interop/mcp/requirements.txt`,
//! installed into `target/interop/mcp/venv`) drives `execseam mcp --adapter local` over stdio:
//! initialize, tools/list with every schema, a call of every tool, a failing command as a normal
//! result with stdout and stderr apart, a typed tool error, bad arguments, an unknown tool, and
//! the server's trace log on stderr only; apply_patch through a symlink, a 17 MB request,
//! `--confine` on every tool, and malformed lines answered with their id. What the script asserts, and the MCP specification and
//! SDK source it follows, is written in `interop/mcp/mcp_interop.py`. Fails loudly when PyPI
//! cannot be reached: an interop check that silently skips proves nothing.

mod common;

use execseam_test_util::interop;

/// Checks `mcp_interop.py` makes; the run must report exactly this many.
const CHECKS: usize = 33;

#[test]
fn the_official_python_sdk_drives_the_mcp_server_over_stdio() {
    let python = common::mcp_python();
    let scratch = std::env::temp_dir()
        .canonicalize()
        .unwrap()
        .join(format!("execseam-interop-mcp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let errlog = scratch.with_extension("stderr.log");
    let env = vec![
        (
            "EXECSEAM_BIN".to_owned(),
            env!("CARGO_BIN_EXE_execseam").to_owned(),
        ),
        ("MCP_ROOT".to_owned(), scratch.to_str().unwrap().to_owned()),
        ("MCP_ERRLOG".to_owned(), errlog.to_str().unwrap().to_owned()),
    ];
    let out =
        interop::run_python(&python, &common::mcp_dir().join("mcp_interop.py"), &env).unwrap();
    let _ = std::fs::remove_dir_all(&scratch);
    let _ = std::fs::remove_file(&errlog);
    interop::assert_checks("mcp", &out, CHECKS);
}
