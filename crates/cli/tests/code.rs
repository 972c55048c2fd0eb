//! `execseam code`: TypeScript on a machine with Node.js and nothing else at run time (no tsx,
//! no deno, no network): on the local adapter and through every emulator; and a missing runtime
//! is the typed infrastructure error (exit 125), never exit 127 as the program's result.

use std::io::Write;
use std::process::Output;

const PROGRAM: &str = "const x: number = 6*7; console.log(x)";

fn code(args: &[&str], source: &str, env: &[(String, String)]) -> Output {
    let args: Vec<&str> = ["code"]
        .into_iter()
        .chain(args.iter().copied())
        .chain(["-"])
        .collect();
    let mut child =
        execseam_test_util::daemon::spawn_piped(env!("CARGO_BIN_EXE_execseam"), &args, env);
    child
        .stdin
        .take()
        .unwrap()
        .write_all(source.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn typescript_runs_on_plain_node_on_the_local_adapter() {
    let o = code(&["--language", "typescript"], PROGRAM, &[]);
    assert_eq!(
        (o.status.code(), String::from_utf8_lossy(&o.stdout).as_ref()),
        (Some(0), "42\n"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // A syntax error is the program's failure (exit 1, the diagnostic on stderr), as with tsx.
    let o = code(&["--language", "typescript"], "const x: = 1;", &[]);
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("Unexpected token") && err.contains("main.ts:1:"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn typescript_prints_42_through_every_emulator() {
    for provider in execseam_emulators::providers() {
        let emu = execseam_emulators::start(provider, Default::default())
            .await
            .unwrap_or_else(|e| panic!("{provider}: {e}"));
        let env = emu.env.clone();
        let args = ["--adapter", provider, "--language", "typescript"];
        let o = tokio::task::spawn_blocking(move || code(&args, PROGRAM, &env))
            .await
            .unwrap();
        assert_eq!(
            (o.status.code(), String::from_utf8_lossy(&o.stdout).as_ref()),
            (Some(0), "42\n"),
            "{provider}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        drop(emu);
    }
}

#[test]
fn a_missing_runtime_is_exit_125_and_a_typed_line() {
    // A PATH with `sh` and nothing else: the launcher finds no python3 and no node.
    let bare = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink("/bin/sh", bare.path().join("sh")).unwrap();
    let path = [("PATH".to_owned(), bare.path().to_str().unwrap().to_owned())];
    for (language, want) in [
        ("python", "no python runtime (python3 is not on PATH)"),
        ("typescript", "no javascript runtime (node is not on PATH)"),
    ] {
        let o = code(&["--language", language], "1", &path);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(125), "{language}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(err.contains(want) && err.contains("retry never"), "{err}");
        assert!(o.stdout.is_empty());
        let o = code(&["--language", language, "--json"], "1", &path);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(
            (&v["error"]["kind"], &v["error"]["error"]["code"]),
            (
                &serde_json::json!("unsupported"),
                &serde_json::json!("RUNTIME_MISSING")
            ),
            "{v}"
        );
        assert!(v.get("exit").is_none(), "no exit code: {v}");
    }
}
