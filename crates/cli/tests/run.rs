//! `execseam run`: streams to the right place, exit statuses, `--json`, infrastructure errors.

use std::process::{Command, Output};

fn execseam(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_execseam"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn stdout_stderr_and_the_exit_code_pass_through() {
    let out = execseam(&["run", "--", "sh", "-c", "echo out; echo err >&2; exit 7"]);
    assert_eq!(out.stdout, b"out\n");
    assert_eq!(out.stderr, b"err\n");
    assert_eq!(out.status.code(), Some(7));
}

#[test]
fn json_shows_a_nul_byte_losslessly() {
    let out = execseam(&["run", "--json", "--", "printf", "a\\0b"]);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["stdout"].as_str().unwrap().as_bytes(), b"a\0b");
    assert_eq!(v["stdout_base64"], "YQBi");
    assert_eq!(v["exit"]["code"], 0);
}

#[test]
fn json_keeps_non_utf8_output_in_base64() {
    let out = execseam(&["run", "--json", "--", "printf", "\\377"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["stdout"].is_null());
    assert_eq!(v["stdout_base64"], "/w==");
}

#[test]
fn a_signal_exits_128_plus_n() {
    let out = execseam(&["run", "--", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(out.status.code(), Some(143));
    let out = execseam(&["run", "--json", "--", "sh", "-c", "kill -KILL $$"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["exit"]["signal"], 9);
    assert_eq!(v["ambiguous_kill"], true);
}

#[test]
fn an_infrastructure_error_is_one_typed_line_and_exit_125() {
    let out = execseam(&["run", "--workdir", "/nonexistent/execseam", "--", "true"]);
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("not found") && err.contains("retry never"),
        "{err}"
    );
    let out = execseam(&[
        "run",
        "--json",
        "--workdir",
        "/nonexistent/execseam",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(125));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["kind"], "not-found");
    assert_eq!(v["error"]["retry"]["class"], "never");
}

#[test]
fn invalid_commands_fail_before_running() {
    // Usage errors, found before any I/O: exit 2 (clap's convention), not 125.
    let out = execseam(&["run", "--workdir", "relative", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid command"));
    let out = execseam(&["run", "--env", "A=B=C", "--env", "NOEQUALS", "--", "true"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn stdin_from_a_file_or_none() {
    let file = std::env::temp_dir().join(format!("execseam-cli-stdin-{}", std::process::id()));
    std::fs::write(&file, b"\0in\xff").unwrap();
    let out = execseam(&["run", "--stdin", file.to_str().unwrap(), "--", "cat"]);
    assert_eq!(out.stdout, b"\0in\xff");
    let out = execseam(&["run", "--", "cat"]);
    assert_eq!(out.stdout, b"", "without --stdin, stdin is at EOF");
    let _ = std::fs::remove_file(file);
}

#[test]
fn a_deadline_is_an_infrastructure_timeout_with_partial_output() {
    let out = execseam(&[
        "run",
        "--json",
        "--timeout",
        "1",
        "--",
        "sh",
        "-c",
        "echo started; sleep 30",
    ]);
    assert_eq!(out.status.code(), Some(125));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["error"]["kind"], "timeout-command");
    assert_eq!(v["error"]["partial"]["stdout"], "started\n");
}

/// Issue 24, defect 13: `--timeout` values that are not a finite number of seconds are usage
/// errors (exit 2), and one too large for a deadline means none (no panic).
#[test]
fn timeouts_that_are_not_finite_are_usage_errors_and_huge_ones_saturate() {
    for bad in ["inf", "nan", "-1"] {
        let out = execseam(&["run", "--timeout", bad, "--", "true"]);
        assert_eq!(out.status.code(), Some(2), "--timeout {bad}: {out:?}");
    }
    for huge in ["1e19", "1e30"] {
        let out = execseam(&["run", "--timeout", huge, "--", "sh", "-c", "echo ok"]);
        assert_eq!(out.status.code(), Some(0), "--timeout {huge}: {out:?}");
        assert_eq!(out.stdout, b"ok\n");
    }
}

#[test]
fn adapters_lists_local() {
    let out = execseam(&["adapters", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let local = v
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "local")
        .unwrap();
    assert_eq!(local["capabilities"]["streaming"], true);
}

#[test]
fn rust_log_goes_to_stderr_and_never_into_stdout() {
    let out = Command::new(env!("CARGO_BIN_EXE_execseam"))
        .args(["run", "--json", "--", "sh", "-c", "echo out"])
        .env("RUST_LOG", "trace")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    // stdout is exactly the JSON object.
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["stdout"], "out\n");
    let err = String::from_utf8_lossy(&out.stderr);
    // The adapter's exec span (provider, operation, tool) and its close line with the duration.
    assert!(
        err.lines()
            .any(|l| l.contains("exec{provider=\"local\" operation=\"exec\"")),
        "{err}"
    );
    assert!(err.contains("close time.busy="), "{err}");
    // Without RUST_LOG: warnings only, so nothing here.
    let out = Command::new(env!("CARGO_BIN_EXE_execseam"))
        .args(["run", "--", "true"])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert_eq!(out.stderr, b"");
}

/// Issue 38, D31: `--json` output meeting a closed pipe (`… | head -c 10`) ends the CLI with 141
/// (what a shell shows for SIGPIPE), not a panic.
#[test]
fn a_closed_stdout_ends_quietly_with_141() {
    use std::io::Read;
    let dir = tempfile::tempdir().unwrap();
    // Well over a pipe's buffer: the CLI is still writing when the reader goes.
    std::fs::write(dir.path().join("big"), vec![b'x'; 1 << 20]).unwrap();
    let root = dir.path().to_str().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_execseam"))
        .args(["read", "--json", "big", "--root", root])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut head = [0u8; 10];
    child.stdout.take().unwrap().read_exact(&mut head).unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(141), "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
}

/// Issue 38 (D5): `--stdin` is read only up to what the adapter takes (its `max_stdin`; Fly's
/// 1 MiB): a larger file is refused as a usage error before any request, having read one byte
/// more than the cap, not the file (here a sparse 1 GiB one, against a dead endpoint: the run
/// before read it whole and then failed to reach Fly, exit 125).
#[test]
fn a_stdin_over_the_adapters_cap_is_refused_before_reading_it() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big");
    std::fs::File::create(&big)
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_execseam"))
        .args(["run", "--adapter", "fly", "--stdin", big.to_str().unwrap()])
        .args(["--", "cat"])
        .env("FLY_API_TOKEN", "t")
        .env("FLY_APP_NAME", "a")
        .env("EXECSEAM_FLY_IMAGE", "img")
        .env("FLY_FLAPS_BASE_URL", "http://127.0.0.1:9")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("more than 1048576 bytes"), "{err}");
}
