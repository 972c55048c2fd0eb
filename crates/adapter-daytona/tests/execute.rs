//! The default exec route, `POST /process/execute` ([`ExecRoute::Execute`]), against the Daytona
//! emulator: one request per exec (two with stdin), the streams apart and exact although the
//! route merges them, a background child that does not hold the exec, a dropped exec whose
//! command is killed, the output limit, and the frame files removed in batches.

use std::time::{Duration, Instant};

use execseam_core::{Command, ErrorKind, Exec, Exit, Sandbox, SandboxSpec};
use execseam_daytona::{DaytonaConfig, DaytonaExec, DaytonaProvider};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::daytona::DaytonaEmulator;
use execseam_test_util::exec;
use execseam_test_util::exec::{alive_or_gone, command, sh, until_gone};

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

/// What the adapter left in the temp directory: the prefixes of frame files
/// (`.execseam_exec.<id>.{o,e,g,x}`) but for the listing command's own, and the stdin files
/// (`.execseam-*`).
async fn temp_files(exec: &DaytonaExec) -> (std::collections::BTreeSet<String>, Vec<String>) {
    let o = exec
        .exec(sh(
            "own=$(readlink /proc/$$/fd/1); own=${own%.o}; own=${own##*/}; ls -A /tmp | grep '^\\.execseam' | grep -vF \"$own\" || true",
        ))
        .await
        .unwrap();
    let (mut frames, mut stdin) = (std::collections::BTreeSet::new(), Vec::new());
    for name in String::from_utf8_lossy(&o.stdout).lines() {
        match name.strip_prefix(".execseam_exec.") {
            Some(rest) => {
                let prefix = rest.rsplit_once('.').map_or(rest, |(p, _)| p);
                frames.insert(format!("/tmp/.execseam_exec.{prefix}"));
            }
            None => stdin.push(name.to_owned()),
        }
    }
    (frames, stdin)
}

/// The prefix of the frame files of the exec that runs this (its stdout is `<prefix>.o`).
const OWN_PREFIX: &str = "own=$(readlink /proc/$$/fd/1); printf %s \"${own%.o}\"";

/// Frame files stay until a later frame removes a batch of them: after 32 more execs, those of
/// `prefix` are gone (the removal runs in the background), and at most a batch is left.
async fn removed_by_a_later_batch(exec: &DaytonaExec, prefix: &str) {
    for _ in 0..33 {
        exec.exec(command(["true"])).await.unwrap();
    }
    let until = Instant::now() + Duration::from_secs(3);
    loop {
        let (frames, stdin) = temp_files(exec).await;
        assert!(stdin.is_empty(), "stdin files are removed: {stdin:?}");
        if !frames.contains(prefix) {
            assert!(frames.len() <= 34, "more than a batch left: {frames:?}");
            return;
        }
        assert!(Instant::now() < until, "{prefix} stays: {frames:?}");
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
    let o = exec.exec(command(["cat"])).await.unwrap();
    assert_eq!(o.stdout.as_ref(), b"");
    let first = exec.exec(sh(OWN_PREFIX)).await.unwrap().stdout;
    let first = String::from_utf8(first.to_vec()).unwrap();
    let (frames, stdin) = temp_files(&exec).await;
    assert!(stdin.is_empty(), "stdin files are removed: {stdin:?}");
    assert!(
        frames.contains(&first),
        "{first} is left for a batch: {frames:?}"
    );
    removed_by_a_later_batch(&exec, &first).await;
    exec.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_background_child_does_not_hold_the_exec() {
    let (emu, exec) = setup(|c| c).await;
    let pidfile = emu.visible_path(exec.id(), "/tmp/bg.pid").unwrap();
    let alive = exec::leave_a_background_child(&exec, &pidfile).await;
    // The child runs on (as a process the command left behind does in the real sandbox) and
    // ends with the sandbox.
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
    let prefixfile = emu.visible_path(exec.id(), "/tmp/drop.prefix").unwrap();
    let script =
        format!("echo $$ > {pidfile}; {OWN_PREFIX} > {prefixfile}; sleep 3; touch {marker}");
    let r = tokio::time::timeout(Duration::from_secs(1), exec.exec(sh(&script))).await;
    assert!(r.is_err(), "the command was still running");
    let kept = "the dropped command kept running";
    let within = Duration::from_secs(10);
    until_gone(&exec, &alive_or_gone(&pidfile), within, kept).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let o = exec
        .exec(sh(&format!(
            "test -e {marker} && echo ran-on || echo killed"
        )))
        .await
        .unwrap();
    assert_eq!(o.stdout.as_ref(), b"killed\n");
    let prefix = exec
        .exec(sh(&format!("cat {prefixfile}")))
        .await
        .unwrap()
        .stdout;
    let prefix = String::from_utf8(prefix.to_vec()).unwrap();
    assert!(prefix.starts_with("/tmp/.execseam_exec."), "{prefix}");
    let (frames, _) = temp_files(&exec).await;
    assert!(
        !frames.contains(&prefix),
        "the kill removes the frame's files and marker: {frames:?}"
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
