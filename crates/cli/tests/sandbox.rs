//! `execseam sandbox …` and `run --sandbox` through the built binary against the E2B emulator:
//! create, run twice in the same sandbox (write then read), list by label, destroy; SIGTERM or
//! SIGINT in the middle of a run leaves no sandbox (exit 143 or 130); streamed output arrives
//! before the command ends;
//! usage errors exit 2.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{e2b as emulator, http};

fn execseam(env: &[(String, String)], args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_execseam"))
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env_remove("EXECSEAM_SANDBOX")
        .output()
        .unwrap()
}

/// `sandbox <sub> --adapter e2b <rest…>`.
fn e2b_sandbox<'a>(sub: &'a str, rest: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["sandbox", sub, "--adapter", "e2b"];
    args.extend_from_slice(rest);
    args
}

/// `run --adapter e2b --sandbox <id> -- <argv…>`.
fn in_sandbox<'a>(id: &'a str, argv: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["run", "--adapter", "e2b", "--sandbox", id, "--"];
    args.extend_from_slice(argv);
    args
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_run_twice_list_destroy() {
    let e = emulator().await;
    let env = e.env.clone();
    let out = tokio::task::spawn_blocking(move || {
        let created = execseam(&env, &e2b_sandbox("create", &["--label", "suite=cli"]));
        assert!(created.status.success(), "{}", text(&created.stderr));
        let id = text(&created.stdout).trim().to_owned();
        assert!(!id.is_empty());
        // Write, then read, in the same sandbox.
        let w = execseam(
            &env,
            &in_sandbox(&id, &["sh", "-c", "printf kept > /tmp/f"]),
        );
        assert_eq!(w.status.code(), Some(0), "{}", text(&w.stderr));
        let r = execseam(&env, &in_sandbox(&id, &["cat", "/tmp/f"]));
        assert_eq!(
            (r.status.code(), text(&r.stdout)),
            (Some(0), "kept".to_owned()),
            "{}",
            text(&r.stderr)
        );
        let listed = execseam(&env, &e2b_sandbox("list", &["--label", "suite=cli"]));
        assert!(
            text(&listed.stdout).contains(&id),
            "{}",
            text(&listed.stdout)
        );
        let other = execseam(&env, &e2b_sandbox("list", &["--label", "suite=other"]));
        assert!(!text(&other.stdout).contains(&id));
        let connected = execseam(&env, &e2b_sandbox("connect", &[&id, "--json"]));
        assert!(
            text(&connected.stdout).contains(&id),
            "{}",
            text(&connected.stderr)
        );
        let gone = execseam(&env, &e2b_sandbox("destroy", &[&id]));
        assert!(gone.status.success(), "{}", text(&gone.stderr));
        // Destroying again is fine; running in it is an infrastructure failure (NotFound).
        assert!(
            execseam(&env, &e2b_sandbox("destroy", &[&id]))
                .status
                .success()
        );
        let r = execseam(&env, &in_sandbox(&id, &["true"]));
        assert_eq!(r.status.code(), Some(125), "{}", text(&r.stderr));
        id
    })
    .await
    .unwrap();
    assert_eq!(
        http(&e.base, &e.key, "GET", "/sandboxes"),
        "[]",
        "{out} is gone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_run_kills_and_destroys_and_output_streams() {
    signal_mid_run("-TERM", 143).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_mid_run_kills_and_destroys_and_exits_130() {
    signal_mid_run("-INT", 130).await;
}

/// Runs a long command through the binary, sends `signal` once its first line has streamed, and
/// checks the exit status (128 + the signal's number) and that no sandbox is left.
async fn signal_mid_run(signal: &'static str, want: i32) {
    let e = emulator().await;
    let env = e.env.clone();
    let (code, streamed_in) = tokio::task::spawn_blocking(move || {
        let mut child = Command::new(env!("CARGO_BIN_EXE_execseam"))
            .args(common::run_sh("e2b", "echo started; exec sleep 30"))
            .envs(env.iter().map(|(k, v)| (k, v)))
            .env_remove("EXECSEAM_SANDBOX")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let start = Instant::now();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        // The first line arrives while the command still runs: the output streams.
        assert_eq!(line, "started\n");
        let streamed_in = start.elapsed();
        let pid = child.id().to_string();
        assert!(
            Command::new("kill")
                .args([signal, &pid])
                .status()
                .unwrap()
                .success()
        );
        let status = child.wait().unwrap();
        (status.code(), streamed_in)
    })
    .await
    .unwrap();
    assert_eq!(code, Some(want), "{signal} exits {want}");
    assert!(streamed_in < Duration::from_secs(20), "{streamed_in:?}");
    // No sandbox (and so no process in it) is left.
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let listed = http(&e.base, &e.key, "GET", "/sandboxes");
        if listed == "[]" {
            break;
        }
        assert!(Instant::now() < until, "still there: {listed}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn usage_errors_exit_2() {
    let none: Vec<(String, String)> = Vec::new();
    for args in [
        vec!["run", "--adapter", "no-such-adapter", "--", "true"],
        vec!["run", "--", "sh", "-c", "true"],
        vec!["run", "--workdir", "relative", "--", "true"],
        vec!["sandbox", "create", "--label", "no-equals-sign"],
        vec!["sandbox", "list", "--adapter", "e2b"],
        vec!["run"],
    ] {
        let out = execseam(&none, &args);
        let want = if args == ["run", "--", "sh", "-c", "true"] {
            0
        } else {
            2
        };
        assert_eq!(
            out.status.code(),
            Some(want),
            "{args:?}: {}",
            text(&out.stderr)
        );
    }
}

/// `execseam sandbox snapshot|create --from-snapshot|fork|pause|resume|expose|snapshots|
/// delete-snapshot` against the E2B emulator: the snapshot's files in the sandbox made from it,
/// a fork with the source's files, a paused sandbox listed as paused and resumed (by `resume`, and
/// by the connect of `run --sandbox`), the exposed URL and its routing headers, and a deleted
/// snapshot `NotFound`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_commands_snapshot_fork_pause_and_expose() {
    let e = emulator().await;
    let env = e.env.clone();
    tokio::task::spawn_blocking(move || {
        let ok = |args: &[&str]| -> String {
            let out = execseam(&env, args);
            assert_eq!(
                out.status.code(),
                Some(0),
                "{args:?}: {}",
                text(&out.stderr)
            );
            text(&out.stdout).trim().to_owned()
        };
        let sh = |id: &str, script: &str| ok(&in_sandbox(id, &["sh", "-c", script]));
        let id = ok(&["sandbox", "create", "--adapter", "e2b"]);
        sh(&id, "printf v1 > /home/user/f");
        let snap = ok(&e2b_sandbox("snapshot", &[&id]));
        assert!(snap.ends_with(":default"), "{snap}");
        sh(&id, "printf v2 > /home/user/f");
        let from = ok(&e2b_sandbox("create", &["--from-snapshot", &snap]));
        assert_eq!(sh(&from, "cat /home/user/f"), "v1");
        let fork = ok(&e2b_sandbox("fork", &[&id]));
        assert_ne!(fork, id);
        assert_eq!(sh(&fork, "cat /home/user/f"), "v2");

        let listed: serde_json::Value =
            serde_json::from_str(&ok(&e2b_sandbox("snapshots", &["--json", "--source", &id])))
                .unwrap();
        assert_eq!(listed[0]["id"], snap.as_str(), "{listed}");
        assert_eq!(listed[0]["kind"], "filesystem+memory", "{listed}");

        assert_eq!(ok(&e2b_sandbox("pause", &[&id])), "paused");
        assert_eq!(ok(&e2b_sandbox("pause", &[&id])), "paused");
        let rows = ok(&["sandbox", "list", "--adapter", "e2b"]);
        assert!(
            rows.lines()
                .any(|l| l.starts_with(&format!("{id}\tpaused"))),
            "{rows}"
        );
        ok(&e2b_sandbox("resume", &[&id]));
        let rows = ok(&["sandbox", "list", "--adapter", "e2b"]);
        assert!(
            rows.lines()
                .any(|l| l.starts_with(&format!("{id}\trunning"))),
            "{rows}"
        );
        assert_eq!(sh(&id, "cat /home/user/f"), "v2");
        // `run --sandbox` connects, and E2B's connect resumes a paused sandbox.
        ok(&e2b_sandbox("pause", &["--keep", "filesystem", &id]));
        assert_eq!(sh(&id, "cat /home/user/f"), "v2");

        let exposed: serde_json::Value =
            serde_json::from_str(&ok(&e2b_sandbox("expose", &["--json", &id, "8080"]))).unwrap();
        assert_eq!(exposed["port"], 8080);
        assert_eq!(
            exposed["headers"]["E2b-Sandbox-Id"],
            id.as_str(),
            "{exposed}"
        );
        assert_eq!(exposed["headers"]["E2b-Sandbox-Port"], "8080", "{exposed}");
        let reserved = execseam(&env, &e2b_sandbox("expose", &[&id, "49983"]));
        assert_eq!(
            reserved.status.code(),
            Some(2),
            "{}",
            text(&reserved.stderr)
        );

        ok(&e2b_sandbox("destroy", &[&from]));
        ok(&e2b_sandbox("delete-snapshot", &[&snap]));
        let gone = execseam(&env, &e2b_sandbox("create", &["--from-snapshot", &snap]));
        assert_eq!(gone.status.code(), Some(125), "{}", text(&gone.stderr));
        assert!(
            text(&gone.stderr).contains("not found"),
            "{}",
            text(&gone.stderr)
        );
        for s in [&id, &fork] {
            ok(&e2b_sandbox("destroy", &[s]));
        }
    })
    .await
    .unwrap();
}
