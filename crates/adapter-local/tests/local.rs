//! Behaviour specific to the local adapter (the shared behaviour is in tests/conformance.rs).

use std::time::{Duration, Instant};

use execseam_core::{Command, ErrorKind, Event, Exec, Exit};
use execseam_local::{LocalConfig, LocalExec};
use execseam_test_util::exec::{assert_error, command, stream_of};

fn alive(pid: &str) -> bool {
    std::path::Path::new(&format!("/proc/{}", pid.trim())).exists()
        && !std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()))
            .unwrap_or_default()
            .contains(") Z ")
}

async fn gone_within(pid: &str, limit: Duration) -> bool {
    let until = Instant::now() + limit;
    while Instant::now() < until {
        if !alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[tokio::test]
async fn the_host_environment_does_not_leak_into_commands() {
    // cargo sets CARGO_PKG_NAME for this test process; a command must not see it.
    assert!(std::env::var("CARGO_PKG_NAME").is_ok());
    let out = LocalExec::new().exec(command(["env"])).await.unwrap();
    let env = String::from_utf8(out.stdout.to_vec()).unwrap();
    assert!(!env.contains("CARGO_PKG_NAME="), "{env}");
    assert!(env.lines().any(|l| l.starts_with("PATH=")), "{env}");

    let inheriting = LocalExec::with_config(
        LocalConfig::new()
            .inherit(["CARGO_PKG_NAME"])
            .base_env([("BASE", "b")]),
    );
    let out = inheriting
        .exec(
            Command::builder(["env"])
                .env("BASE", "overridden")
                .build()
                .unwrap(),
        )
        .await
        .unwrap();
    let env = String::from_utf8(out.stdout.to_vec()).unwrap();
    assert!(env.contains("CARGO_PKG_NAME=execseam-local"), "{env}");
    assert!(
        env.lines().any(|l| l == "BASE=overridden"),
        "Command.env wins over the base: {env}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_stream_kills_the_whole_process_group() {
    let exec = LocalExec::new();
    let cmd = command(["sh", "-c", "sleep 300 & echo $!; wait"]);
    let mut stream = stream_of(&exec, cmd).await;
    let pid = match stream.next().await {
        Some(Ok(Event::Stdout(b))) => String::from_utf8(b.to_vec()).unwrap(),
        other => panic!("want the grandchild's pid first, got {other:?}"),
    };
    assert!(alive(&pid));
    drop(stream);
    assert!(
        gone_within(&pid, Duration::from_secs(5)).await,
        "grandchild {pid} survived the drop"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_an_exec_future_kills_the_whole_process_group() {
    let dir = std::env::temp_dir().join(format!("execseam-local-drop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pidfile = dir.join("pid");
    let script = format!("sleep 300 & echo $! > '{}'; wait", pidfile.display());
    let exec = LocalExec::new();
    let r = tokio::time::timeout(
        Duration::from_millis(500),
        exec.exec(command(["sh", "-c", &script])),
    )
    .await;
    assert!(r.is_err(), "the command cannot have finished");
    let pid = std::fs::read_to_string(&pidfile).unwrap();
    assert!(
        gone_within(&pid, Duration::from_secs(5)).await,
        "grandchild {pid} survived the drop"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_mib_on_each_stream_does_not_deadlock() {
    const N: usize = 100 << 20;
    let cmd = Command::new([
        "sh",
        "-c",
        "head -c 104857600 /dev/zero & head -c 104857600 /dev/zero >&2; wait",
    ])
    .unwrap();
    let out = tokio::time::timeout(Duration::from_secs(120), LocalExec::new().exec(cmd))
        .await
        .expect("no deadlock")
        .unwrap();
    assert_eq!((out.stdout.len(), out.stderr.len()), (N, N));
    assert!(out.stdout.iter().all(|&b| b == 0) && out.stderr.iter().all(|&b| b == 0));
}

#[tokio::test]
async fn a_background_child_holding_the_pipes_does_not_hang_the_exec() {
    let exec = LocalExec::with_config(LocalConfig::new().drain_timeout(Duration::from_millis(200)));
    let started = Instant::now();
    let out = exec
        .exec(command(["sh", "-c", "sleep 30 & echo hi"]))
        .await
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(out.stdout.as_ref(), b"hi\n");
    assert_eq!(out.exit, Exit::Code(0));
}

#[tokio::test]
async fn not_found_and_not_executable_are_127_and_126() {
    let exec = LocalExec::new();
    let out = exec.exec(command(["/nonexistent/execseam"])).await.unwrap();
    assert_eq!(out.exit, Exit::Code(127));
    assert!(String::from_utf8_lossy(&out.stderr).contains("command not found"));

    let file = std::env::temp_dir().join(format!("execseam-not-exec-{}", std::process::id()));
    std::fs::write(&file, "#!/bin/sh\necho never\n").unwrap();
    let out = exec.exec(command([file.to_str().unwrap()])).await.unwrap();
    assert_eq!(out.exit, Exit::Code(126));
    assert!(out.stdout.is_empty());
    let _ = std::fs::remove_file(file);

    // The streaming path gives the same answer.
    let out = stream_of(&exec, command(["/nonexistent/execseam"]))
        .await
        .collect()
        .await
        .unwrap();
    assert_eq!(out.exit, Exit::Code(127));
}

#[tokio::test]
async fn with_a_launcher_the_wrapper_enters_the_workdir_and_reports_a_missing_one() {
    let exec = LocalExec::with_config(LocalConfig::new().launcher(["env", "--"]));
    assert_eq!(
        exec.capabilities().workdir,
        execseam_core::Delivery::ShellWrapped
    );
    let cmd = Command::builder(["pwd"])
        .workdir("/")
        .env("K", "v")
        .build()
        .unwrap();
    let out = exec.exec(cmd).await.unwrap();
    assert_eq!(out.stdout.as_ref(), b"/\n");

    let missing = Command::builder(["true"])
        .workdir("/nonexistent/execseam")
        .build()
        .unwrap();
    let err = exec.exec(missing.clone()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    let err = stream_of(&exec, missing).await.collect().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");

    // A command an adapter wrapped itself keeps its own wrapper's failure as its output.
    let inner = Command::builder(["true"])
        .workdir("/nonexistent/inner")
        .build()
        .unwrap();
    let opts = execseam_adapter_kit::degrade::WrapOptions {
        workdir: true,
        ..Default::default()
    };
    let inner = execseam_adapter_kit::degrade::wrapped_command(&inner, &opts).unwrap();
    let out = exec.exec(inner.clone()).await.unwrap();
    assert_eq!(
        out.exit,
        Exit::Code(execseam_adapter_kit::degrade::WRAPPER_STATUS)
    );
    assert!(
        out.stderr
            .starts_with(execseam_adapter_kit::degrade::WRAPPER_MARK.as_bytes())
    );
    let streamed = stream_of(&exec, inner).await.collect().await.unwrap();
    assert_eq!(streamed, out);

    // Held-back stderr that only looks like the wrapper's is released with the exit.
    let cmd = command(["sh", "-c", "printf 'execseam-launcher: mine' >&2; exit 3"]);
    let out = stream_of(&exec, cmd).await.collect().await.unwrap();
    assert_eq!(
        (out.stderr.as_ref(), out.exit),
        (&b"execseam-launcher: mine"[..], Exit::Code(3))
    );
}

#[tokio::test]
async fn signals_are_reported_as_signals() {
    let out = LocalExec::new()
        .exec(command(["sh", "-c", "kill -INT $$"]))
        .await
        .unwrap();
    assert_eq!(out.exit, Exit::Signal(2));
    assert_eq!(out.exit.shell_status(), 130);
}

#[tokio::test]
async fn commands_start_with_default_signal_dispositions() {
    // Run a nested test process with SIGINT ignored, as `nohup` or a background job would: the
    // commands it runs must still die from SIGINT.
    if std::env::var_os("EXECSEAM_NESTED_SIGINT").is_some() {
        let out = LocalExec::new()
            .exec(command(["sh", "-c", "kill -INT $$; echo survived"]))
            .await
            .unwrap();
        assert_eq!(out.exit, Exit::Signal(2), "{out:?}");
        return;
    }
    let me = std::env::current_exe().unwrap();
    let status = std::process::Command::new("sh")
        .args(["-c", "trap '' INT; exec \"$0\" commands_start_with_default_signal_dispositions --exact --nocapture", me.to_str().unwrap()])
        .env("EXECSEAM_NESTED_SIGINT", "1")
        .status()
        .unwrap();
    assert!(status.success(), "the nested run failed: {status}");
}

/// Rust's runtime ignores SIGPIPE in this (test) process; the command must not inherit that
/// (std's spawn resets it, which is why the adapter leaves SIGPIPE to it): `yes | head -n 1`
/// ends because `yes` dies of SIGPIPE, and the command's ignored-signal mask has no SIGPIPE.
#[tokio::test]
async fn commands_get_sigpipe_at_its_default_although_rust_ignores_it_here() {
    let out = LocalExec::new()
        .exec(
            Command::new([
                "sh",
                "-c",
                "grep '^SigIgn:' /proc/self/status; yes | head -n 1 >/dev/null",
            ])
            .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(out.exit, Exit::Code(0), "{out:?}");
    let line = String::from_utf8_lossy(&out.stdout).into_owned();
    let mask = u64::from_str_radix(line.trim().trim_start_matches("SigIgn:").trim(), 16).unwrap();
    assert_eq!(
        mask & (1 << (13 - 1)),
        0,
        "SIGPIPE ignored in the command: {line}"
    );
}

/// A command larger than this host's `execve` takes is refused before anything is spawned,
/// never retried, and not quoted; if `execve` still says E2BIG (a launcher made it larger), that
/// is deterministic too: `InvalidCommand`, `Retry::Never`, never `Safe`.
#[tokio::test]
async fn an_oversized_command_is_invalid_and_never_retried() {
    use execseam_core::Retry;
    let exec = LocalExec::new();
    let secret = "secret-".repeat(3 << 20 >> 3);
    for cmd in [
        command(["echo", secret.as_str()]),
        Command::new(vec!["x".repeat(64 << 10); 64]).unwrap(),
        Command::builder(["true"])
            .env("BIG", "y".repeat(200 << 10))
            .build()
            .unwrap(),
    ] {
        let e = exec.exec(cmd).await.unwrap_err();
        assert_error(&e, ErrorKind::InvalidCommand, Retry::Never);
        assert!(e.message().contains("too large"), "{e}");
        assert!(!e.to_string().contains("secret"), "{e}");
    }
    // Issue 38 (D32): Inspect's 16 x 64 KiB arguments are within this host's ARG_MAX (a quarter
    // of the stack limit, 2 MiB by default) and run; the 64 x 64 KiB above are over it.
    let mut argv = vec!["sh".to_owned(), "-c".into(), "echo $#".into(), "sh".into()];
    argv.extend(std::iter::repeat_n("a".repeat(64 << 10), 16));
    let out = exec.exec(Command::new(argv).unwrap()).await.unwrap();
    assert_eq!(out.stdout.as_ref(), b"16\n", "{out:?}");
    // Within the check's limit, but the launcher adds a string execve refuses.
    let launched = LocalExec::with_config(
        LocalConfig::new().launcher(["env", &format!("PAD={}", "p".repeat(200 << 10))]),
    );
    let e = launched.exec(command(["true"])).await.unwrap_err();
    assert_error(&e, ErrorKind::InvalidCommand, Retry::Never);
    assert!(e.to_string().len() <= 1200, "{}", e.to_string().len());
}

/// Issue 38 (D29): the host's deadline bounds each call on a process handle, not the detached
/// command: a wait longer than the deadline answers `Running` within it, and the command runs on
/// to its own exit.
#[tokio::test]
async fn a_host_deadline_bounds_process_calls_not_the_detached_command() {
    use execseam_core::{StartKey, StartRequest, Waited};
    use execseam_layers::ExecExt;
    let limit = Duration::from_millis(600);
    let guarded = LocalExec::new().with_deadline(limit);
    let p = guarded.processes().unwrap();
    let key = StartKey::new(format!("deadline-{}", std::process::id())).unwrap();
    let cmd = command(["sh", "-c", "sleep 1; echo done"]);
    let h = p.start(StartRequest::new(key, cmd)).await.unwrap().handle;
    let started = Instant::now();
    assert_eq!(
        p.wait(&h, Duration::from_secs(60)).await.unwrap(),
        Waited::Running
    );
    assert!(started.elapsed() < limit, "{:?}", started.elapsed());
    let plain = LocalExec::new();
    let plain = plain.processes().unwrap();
    let waited = plain.wait(&h, Duration::from_secs(10)).await.unwrap();
    assert_eq!(
        waited,
        Waited::Exited(Exit::Code(0)),
        "not killed by the deadline"
    );
    let read = plain.read(&h, Default::default()).await.unwrap();
    assert_eq!(read.stdout.as_ref(), b"done\n");
    plain.release(&h).await.unwrap();
}
