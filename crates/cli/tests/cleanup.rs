//! A sandbox that `execseam run` created is removed before the CLI exits; one named by the
//! caller is kept (against the E2B emulator, whose control plane lists running sandboxes).

mod common;

use common::http;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_created_by_the_run_is_removed_and_an_existing_one_is_kept() {
    let common::Emu { emu, key, base, .. } = common::e2b().await;
    let env = emu.env.clone();
    let run = move |extra: Vec<(String, String)>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_execseam"));
        cmd.args(common::run_sh("e2b", "printf ran; exit 4"));
        cmd.envs(env.iter().chain(extra.iter()).map(|(k, v)| (k, v)));
        cmd.output().unwrap()
    };
    let first = run.clone();
    let out = tokio::task::spawn_blocking(move || first(vec![]))
        .await
        .unwrap();
    assert_eq!(
        (out.stdout.as_slice(), out.status.code()),
        (&b"ran"[..], Some(4))
    );
    assert_eq!(
        http(&base, &key, "GET", "/sandboxes"),
        "[]",
        "the sandbox the run created is gone"
    );

    // A sandbox named by --sandbox (EXECSEAM_SANDBOX) belongs to the caller: it is kept.
    let created = common::request(
        &base,
        &key,
        "POST",
        "/sandboxes",
        r#"{"templateID":"base"}"#,
    );
    let id = serde_json::from_str::<serde_json::Value>(&created).unwrap()["sandboxID"]
        .as_str()
        .unwrap()
        .to_owned();
    let named = vec![("EXECSEAM_SANDBOX".to_owned(), id.clone())];
    let out = tokio::task::spawn_blocking(move || run(named))
        .await
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        http(&base, &key, "GET", "/sandboxes").contains(&id),
        "an existing sandbox is kept"
    );
    http(&base, &key, "DELETE", &format!("/sandboxes/{id}"));
}

// Issue 38, D15/D16/D17: what a run started is killed, and what it created is removed, before
// the process exits (the kit's reaper, drained by the CLI), whatever ends the run.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use execseam_test_util::probe;

fn spawn_run(env: &[(String, String)], args: &[&str]) -> Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_execseam"))
        .arg("run")
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// `run`'s arguments: `sh -c <script>` on `adapter` (in `sandbox` when given) with
/// `--timeout <secs>`.
fn with_deadline<'a>(
    adapter: &'a str,
    sandbox: Option<&'a str>,
    secs: &'a str,
    script: &'a str,
) -> Vec<&'a str> {
    let mut args = vec!["--adapter", adapter];
    if let Some(id) = sandbox {
        args.extend(["--sandbox", id]);
    }
    args.extend(["--timeout", secs, "--", "sh", "-c", script]);
    args
}

fn sigterm(child: &Child) {
    let status = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Polls until `ready` holds (at most 20 s).
async fn until(what: &str, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{what}: timed out"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn finish(child: Child) -> (Option<i32>, String) {
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `run ARGS -- sh -c "sleep TOKEN"` with `env`, SIGTERM once the command runs (seen from the
/// host, where the emulators and the engine run the sandboxes): the CLI's status and stderr, and
/// the processes that still carried the token (then killed).
async fn sigterm_mid_run(
    env: &[(String, String)],
    args: &[&str],
) -> (Option<i32>, String, Vec<u32>) {
    let token = probe::unique_sleep();
    let script = format!("sleep {token}");
    let mut argv = args.to_vec();
    argv.extend(["--", "sh", "-c", &script]);
    let child = spawn_run(env, &argv);
    until("the command starts", || {
        !probe::processes_with_arg(&token).is_empty()
    })
    .await;
    sigterm(&child);
    let (code, stderr) = finish(child).await;
    let left = probe::processes_with_arg(&token);
    probe::kill_leftovers(&token);
    (code, stderr, left)
}

/// SIGTERM mid-run killed the command before the CLI exited 143 with its one line.
fn assert_killed_first(what: &str, (code, stderr, left): (Option<i32>, String, Vec<u32>)) {
    assert_eq!(code, Some(143), "{what}: {stderr}");
    assert!(
        left.is_empty(),
        "{what}: SIGTERM left the command running: {left:?}"
    );
    assert_eq!(stderr.lines().count(), 1, "{what}: one line: {stderr}");
    assert!(
        stderr.contains("the command was killed"),
        "{what}: {stderr}"
    );
}

/// The deadline's one line says the kill was answered (the stream's kill awaited), not
/// "abandoned".
fn assert_deadline_killed(what: &str, stderr: &str) {
    assert!(
        stderr.contains("deadline") && stderr.contains("the command was killed"),
        "{what}: {stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{what}: one line: {stderr}");
}

/// AX's kill ran only when its stream was dropped: before the reaper, `--timeout` and SIGTERM
/// both exited before that kill left the host (8 of 9 runs); before the kit's awaitable
/// drop-time kill (`reaper::OnDrop`) the deadline's message said "abandoned … (unconfirmed)"
/// although the kill then went out (D15).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_or_a_signal_kills_the_command_before_the_cli_exits() {
    let emu = execseam_emulators::start("ax", Default::default())
        .await
        .unwrap();
    let env = emu.env.clone();

    // --timeout: the deadline drops the stream; the exit waits for its kill.
    // The token is never a whole argument of the CLI itself: only the command has it.
    let token = probe::unique_sleep();
    let script = format!("sleep {token}");
    let child = spawn_run(&env, &with_deadline("ax", None, "1", &script));
    let (code, stderr) = finish(child).await;
    assert_eq!(code, Some(125), "{stderr}");
    assert_deadline_killed("ax", &stderr);
    let left = probe::processes_with_arg(&token);
    probe::kill_leftovers(&token);
    assert!(
        left.is_empty(),
        "--timeout left the command running: {left:?}"
    );

    // SIGTERM mid-run in a named sandbox (EXECSEAM_SANDBOX is the guest): killed, one line.
    assert_killed_first("ax", sigterm_mid_run(&env, &["--adapter", "ax"]).await);
}

/// SIGTERM to `execseam ARGS` (stdin open) once the E2B emulator behind the proxy made the
/// sandbox whose create answer the proxy holds: the CLI exits 143 with no sandbox left.
async fn sigterm_during_create(env: &[(String, String)], e2b: &common::Emu, args: &[&str]) {
    let list = || http(&e2b.base, &e2b.key, "GET", "/sandboxes");
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_execseam"))
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    until("the emulator made the sandbox", || list() != "[]").await;
    sigterm(&child);
    let (code, stderr) = finish(child).await;
    assert_eq!(code, Some(143), "{args:?}: {stderr}");
    assert_eq!(
        list(),
        "[]",
        "{args:?}: the sandbox created for the interrupted command is gone: {stderr}"
    );
}

/// A signal while the create's answer is in flight: the CLI exits only once that sandbox is
/// destroyed. Held 2.5 s after the emulator made it (`run`, and `mcp`, which before died on
/// the signal mid-create, no handler yet, and left the sandbox), or never sent (`hold:0`: the
/// sandbox is found by its create's tag; before, it stayed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_during_the_create_destroys_the_sandbox_when_its_answer_arrives() {
    let e2b = common::e2b().await;
    let rules =
        execseam_chaos::parse_rules("POST /*sandboxes#1-2=hold:2500;POST /*sandboxes#3=hold:0")
            .unwrap();
    let proxy = execseam_chaos::ChaosProxy::start(([127, 0, 0, 1], 0).into(), &e2b.base, rules)
        .await
        .unwrap();
    let env: Vec<(String, String)> = e2b
        .emu
        .env
        .iter()
        .map(|(k, v)| (k.clone(), v.replace(&e2b.base, &proxy.base_url())))
        .collect();
    for args in [
        &["run", "--adapter", "e2b", "--", "true"][..],
        &["mcp", "--adapter", "e2b"],
        &["run", "--adapter", "e2b", "--", "true"],
    ] {
        sigterm_during_create(&env, &e2b, args).await;
    }
    proxy.shutdown().await;
}

/// Docker keeps an exec's processes when its attach connection goes (docs/adapters/docker.md):
/// only the kill exec ends them. `--timeout` in a named warm container (which the run does not
/// remove) must not exit before that kill ran; before the reaper it did, 5 runs of 5.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_or_a_signal_in_a_named_docker_container_leaves_no_survivor() {
    let env: Vec<(String, String)> = execseam_test_util::fixtures::podman()
        .vars()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    let id = create(&env, "docker");
    let token = probe::unique_sleep();
    let script = format!("sleep {token}");
    let args = with_deadline("docker", Some(&id), "3", &script);
    let child = spawn_run(&env, &args);
    // The command really runs (seen from the host) before the deadline fires.
    until("the command starts", || {
        !probe::processes_with_arg(&token).is_empty()
    })
    .await;
    let (code, stderr) = finish(child).await;
    let left = probe::processes_with_arg(&token);
    probe::kill_leftovers(&token);
    // D16: SIGTERM mid-run in the same container kills the command before the CLI exits 143.
    let killed = sigterm_mid_run(&env, &["--adapter", "docker", "--sandbox", &id]).await;
    let shell = shell_refuses_to_detach(&env, &id);
    cli(&env, &["sandbox", "destroy", "--adapter", "docker", &id]);
    let (shell_err, attach) = shell;
    assert!(
        shell_err.contains(
            "execseam: not detached: adapter docker's terminals cannot be attached again"
        ),
        "{shell_err}"
    );
    assert!(!shell_err.contains("reattach with"), "{shell_err}");
    assert_eq!(
        attach.status.code(),
        Some(2),
        "--attach on docker is a usage error"
    );
    assert_eq!(code, Some(125), "{stderr}");
    assert_deadline_killed("docker", &stderr);
    assert!(
        left.is_empty(),
        "--timeout left the command running: {left:?}"
    );
    assert_killed_first("docker", killed);
}

/// `execseam shell` on docker's terminal (not attachable again: `terminal_reattach` false), keys
/// piped in one step at a time (each after the output it waits for: the engine drops what is
/// typed before the exec's terminal is attached): a command, then Ctrl-P Ctrl-Q, which does not
/// detach, then another command and `exit 3`, whose status is the CLI's. Its stderr, and the
/// output of an `--attach` (refused).
fn shell_refuses_to_detach(env: &[(String, String)], id: &str) -> (String, std::process::Output) {
    use execseam_test_util::daemon::{Output, collect, spawn_piped, text};
    use std::io::Write;
    let args = ["shell", "--adapter", "docker", "--sandbox", id, "--", "sh"];
    let mut child = spawn_piped(env!("CARGO_BIN_EXE_execseam"), &args, env);
    let out = collect(child.stdout.take().unwrap());
    let err = collect(child.stderr.take().unwrap());
    let wait_for = |b: &Output, want: &str| {
        let t = Instant::now();
        while !text(b).contains(want) {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "{want:?} never came: {:?} / {:?}",
                text(&out),
                text(&err)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let mut keys = child.stdin.take().unwrap();
    let mut typed = 0;
    // Until the remote shell answers (the first keys may be typed before it reads them).
    while !text(&out).contains("one-1") {
        if typed < 50 {
            keys.write_all(b"echo one-$((0+1))\n").unwrap();
            typed += 1;
        }
        std::thread::sleep(Duration::from_millis(200));
        assert!(typed < 50, "the shell never answered: {:?}", text(&err));
    }
    keys.write_all(b"\x10\x11").unwrap();
    wait_for(&err, "not detached");
    keys.write_all(b"echo two-$((1+1))\nexit 3\n").unwrap();
    wait_for(&out, "two-2");
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(3), "{:?}\n{:?}", text(&out), text(&err));
    let attach = cli(
        env,
        &[
            "shell",
            "--adapter",
            "docker",
            "--sandbox",
            id,
            "--attach",
            "h",
        ],
    );
    (text(&err), attach)
}

/// The CLI with `env`; its output.
fn cli(env: &[(String, String)], args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_execseam"))
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap()
}

/// `sandbox create` through the CLI: the new sandbox's id.
fn create(env: &[(String, String)], adapter: &str) -> String {
    let made = cli(env, &["sandbox", "create", "--adapter", adapter]);
    assert!(
        made.status.success(),
        "{adapter}: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    String::from_utf8_lossy(&made.stdout).trim().to_owned()
}

/// D16 on the adapters whose kill the issue found missing or racy (Daytona always, E2B and
/// Sprites racy; AX above, Docker below): SIGTERM mid-run in a sandbox named with `--sandbox`
/// kills the command (no process with its token, seen from the host, where the emulators run
/// the sandboxes) before the CLI exits 143 with its one line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_mid_run_in_a_named_sandbox_kills_the_command_first() {
    for adapter in ["daytona", "e2b", "sprites"] {
        let emu = execseam_emulators::start(adapter, Default::default())
            .await
            .unwrap();
        let env = emu.env.clone();
        let id = create(&env, adapter);
        let killed = sigterm_mid_run(&env, &["--adapter", adapter, "--sandbox", &id]).await;
        cli(&env, &["sandbox", "destroy", "--adapter", adapter, &id]);
        assert_killed_first(adapter, killed);
    }
}

/// D29: Modal has no call that kills one command; its per-exec `timeout_secs` does. `--timeout`
/// is sent there, so the command is killed (by Modal, reported as such) before the CLI exits.
/// Before, the command ran on: the error said "abandoned", the process stayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_on_modal_is_modals_own_kill() {
    let emu = execseam_emulators::start("modal", Default::default())
        .await
        .unwrap();
    // In a named sandbox, which the run leaves running (a created one is destroyed, which
    // would end the command anyway).
    let id = create(&emu.env, "modal");
    let token = probe::unique_sleep();
    let script = format!("sleep {token}");
    let args = with_deadline("modal", Some(&id), "1", &script);
    let child = spawn_run(&emu.env, &args);
    let (code, stderr) = finish(child).await;
    let left = probe::processes_with_arg(&token);
    probe::kill_leftovers(&token);
    cli(&emu.env, &["sandbox", "destroy", "--adapter", "modal", &id]);
    assert_eq!(code, Some(125), "{stderr}");
    assert!(stderr.contains("Modal killed the command"), "{stderr}");
    assert!(
        left.is_empty(),
        "--timeout left the command running: {left:?}"
    );
}
