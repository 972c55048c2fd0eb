//! The default exec route, `POST /process/execute` ([`ExecRoute::Execute`]), against the Daytona
//! emulator: one request per exec (two with stdin), the streams apart and exact although the
//! route merges them, a background child that does not hold the exec, a dropped exec whose
//! command is killed, the output limit, and nothing left in the temp directory.

use std::time::{Duration, Instant};

use execseam_core::{Command, ErrorKind, Exec, Exit, Sandbox, SandboxSpec};
use execseam_daytona::{DaytonaConfig, DaytonaExec, DaytonaProvider};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::daytona::DaytonaEmulator;

async fn setup(
    config: impl FnOnce(DaytonaConfig) -> DaytonaConfig,
) -> (DaytonaEmulator, DaytonaExec) {
    let emu = DaytonaEmulator::start(EmulatorOptions::default())
        .await
        .unwrap();
    let exec = DaytonaProvider::new(config(
        DaytonaConfig::new(emu.token().to_owned()).api_url(emu.api_url()),
    ))
    .unwrap()
    .create(SandboxSpec::new())
    .await
    .unwrap();
    (emu, exec)
}

fn sh(script: &str) -> Command {
    Command::new(["sh", "-c", script]).unwrap()
}

/// What the adapter left in the temp directory, once the background removals had a moment:
/// stdin files (`.execseam-*`) and the frame's files and markers (`.execseam_exec.*`), but for
/// the listing command's own (its stdout is one of them).
async fn leftovers(exec: &DaytonaExec) -> String {
    let until = Instant::now() + Duration::from_secs(3);
    loop {
        let o = exec
            .exec(sh(
                "own=$(readlink /proc/$$/fd/1); own=${own%.o}; own=${own##*/}; ls -A /tmp | grep '^\\.execseam' | grep -vF \"$own\" || true",
            ))
            .await
            .unwrap();
        let left = String::from_utf8_lossy(&o.stdout).trim().replace('\n', ",");
        if left.is_empty() || Instant::now() > until {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_exec_is_one_request_with_the_streams_apart_and_exact() {
    let (emu, exec) = setup(|c| c).await;
    let before = emu.toolbox_requests();
    let o = exec
        .exec(sh(
            "printf 'a\\000b\\377'; printf 'e\\nno newline' >&2; exit 3",
        ))
        .await
        .unwrap();
    assert_eq!(emu.toolbox_requests() - before, 1, "one request");
    assert_eq!(o.stdout.as_ref(), b"a\0b\xff");
    assert_eq!(o.stderr.as_ref(), b"e\nno newline");
    assert_eq!(o.exit, Exit::Code(3));
    let before = emu.toolbox_requests();
    let c = Command::builder(["cat"]).stdin("in\0put").build().unwrap();
    let o = exec.exec(c).await.unwrap();
    assert_eq!(emu.toolbox_requests() - before, 2, "upload + execute");
    assert_eq!(o.stdout.as_ref(), b"in\0put");
    // A command that reads stdin without any gets EOF (not the rest of the daemon's script).
    let o = exec.exec(Command::new(["cat"]).unwrap()).await.unwrap();
    assert_eq!(o.stdout.as_ref(), b"");
    assert_eq!(
        leftovers(&exec).await,
        "",
        "stdin files and frame directories are removed"
    );
    exec.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_background_child_does_not_hold_the_exec() {
    let (emu, exec) = setup(|c| c).await;
    let pidfile = emu.visible_path(exec.id(), "/tmp/bg.pid").unwrap();
    let started = Instant::now();
    let o = exec
        .exec(sh(&format!("sleep 60 & echo $! > {pidfile}; echo started")))
        .await
        .unwrap();
    assert_eq!(o.stdout.as_ref(), b"started\n");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // The child runs on (as a process the command left behind does in the real sandbox) and
    // ends with the sandbox.
    let alive = format!("kill -0 \"$(cat {pidfile})\" 2>/dev/null && echo alive || echo gone");
    assert_eq!(
        exec.exec(sh(&alive)).await.unwrap().stdout.as_ref(),
        b"alive\n"
    );
    exec.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn dropping_an_exec_kills_its_command() {
    let (emu, exec) = setup(|c| c).await;
    let pidfile = emu.visible_path(exec.id(), "/tmp/drop.pid").unwrap();
    let marker = emu.visible_path(exec.id(), "/tmp/drop.after").unwrap();
    let script = format!("echo $$ > {pidfile}; sleep 3; touch {marker}");
    let r = tokio::time::timeout(Duration::from_secs(1), exec.exec(sh(&script))).await;
    assert!(r.is_err(), "the command was still running");
    let check = format!("kill -0 \"$(cat {pidfile})\" 2>/dev/null && echo alive || echo gone");
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let o = exec.exec(sh(&check)).await.unwrap();
        if o.stdout.as_ref() == b"gone\n" {
            break;
        }
        assert!(Instant::now() < until, "the dropped command kept running");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let o = exec
        .exec(sh(&format!(
            "test -e {marker} && echo ran-on || echo killed"
        )))
        .await
        .unwrap();
    assert_eq!(o.stdout.as_ref(), b"killed\n");
    assert_eq!(
        leftovers(&exec).await,
        "",
        "the kill removes the frame's directory and marker"
    );
    exec.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn more_output_than_max_output_is_an_output_limit_error() {
    let (_emu, exec) = setup(|c| c.max_output(10)).await;
    let e = exec.exec(sh("printf 0123456789A")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::OutputLimit, "{e}");
    let o = exec.exec(sh("printf 0123456789 >&2")).await.unwrap();
    assert_eq!(o.stderr.as_ref(), b"0123456789");
    exec.close().await.unwrap();
}
