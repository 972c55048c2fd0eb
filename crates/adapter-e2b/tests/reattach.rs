//! `Reattach` against the emulator: a command started detached outlives its client and is
//! attached again from another connection with its exact output and exit, including after envd
//! forgot it. envd's behaviour the emulator follows (and these tests rely on): closing a Start
//! stream does not kill the process (e2b-dev/E2B#500); `process.Process/Connect` by tag streams
//! the events from then on and answers `not_found` for a process that ended, because envd
//! removes an ended process from its table (e2b-dev/infra `packages/envd/internal/services/
//! process/connect.go` `getProcess`, `start.go`); output nobody is subscribed to is not kept
//! (`handler/multiplex.go`), which is why the adapter spools it in the sandbox.

use std::time::{Duration, Instant};

use execseam_core::{Command, ErrorKind, Exec, Exit, ProcessHandle, Sandbox, SandboxSpec};
use execseam_e2b::{E2bConfig, E2bExec, E2bProvider};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::e2b::E2bEmulator;

async fn emulator() -> E2bEmulator {
    E2bEmulator::start(EmulatorOptions::default())
        .await
        .expect("the emulator starts")
}

fn config(emu: &E2bEmulator) -> E2bConfig {
    E2bConfig::new(emu.api_key())
        .api_url(emu.base_url())
        .sandbox_url(emu.base_url())
}

async fn create(emu: &E2bEmulator) -> E2bExec {
    E2bProvider::new(config(emu))
        .unwrap()
        .create(SandboxSpec::new())
        .await
        .unwrap()
}

/// Another process's view: a fresh provider and connection to the same sandbox.
async fn reconnect(emu: &E2bEmulator, id: &str) -> E2bExec {
    E2bProvider::new(config(emu))
        .unwrap()
        .connect(id)
        .await
        .unwrap()
}

fn sh(script: &str) -> Command {
    Command::new(["sh", "-c", script]).unwrap()
}

async fn until(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < end, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn connects(emu: &E2bEmulator) -> usize {
    emu.requests()
        .iter()
        .filter(|r| r.path == "/process.Process/Connect")
        .count()
}

async fn attach_err(exec: &E2bExec, handle: &ProcessHandle) -> execseam_core::Error {
    match exec.reattach().unwrap().attach(handle).await {
        Ok(s) => s.collect().await.unwrap_err(),
        Err(e) => e,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_detached_command_outlives_its_client_and_is_attached_again_byte_exact() {
    let emu = emulator().await;
    let first = create(&emu).await;
    let id = first.id().to_owned();
    let r = first.reattach().expect("E2B reattaches");
    let handle = r.new_handle();
    // Output before, while and after nobody is attached; bytes that are not UTF-8; both streams.
    let script = r#"printf 'one\n\377\000two'; printf 'e1\n' >&2; sleep 1; printf 'three\n'; printf 'e2' >&2; exit 7"#;
    r.start(&handle, sh(script)).await.unwrap();
    // The client goes away (as a killed server would) without ending the sandbox.
    first.set_owned(false);
    drop(first);
    let stored = ProcessHandle::new(handle.as_str().to_owned());

    let second = reconnect(&emu, &id).await;
    let before = connects(&emu);
    let out = second
        .reattach()
        .unwrap()
        .attach(&stored)
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(&out.stdout[..], b"one\n\xff\x00twothree\n");
    assert_eq!(&out.stderr[..], b"e1\ne2");
    assert_eq!(out.exit, Exit::Code(7));
    assert_eq!(
        connects(&emu),
        before + 1,
        "it waited through process.Connect"
    );

    // Attaching again gives the same answer (nothing is consumed) until released.
    let again = second
        .reattach()
        .unwrap()
        .attach(&stored)
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(again, out);
    second.reattach().unwrap().release(&stored).await.unwrap();
    let e = attach_err(&second, &stored).await;
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    second.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_command_that_exited_and_was_reaped_is_answered_from_the_spool() {
    let emu = emulator().await;
    let exec = create(&emu).await;
    let id = exec.id().to_owned();
    let r = exec.reattach().unwrap();
    let handle = r.new_handle();
    r.start(&handle, sh("printf done; printf warn >&2; exit 3"))
        .await
        .unwrap();
    // envd forgets an ended process: Connect by its tag is then not_found.
    until("envd forgot the process", || emu.processes(&id).is_empty()).await;
    let out = r.attach(&handle).await.unwrap().collect().await.unwrap();
    assert_eq!(&out.stdout[..], b"done");
    assert_eq!(&out.stderr[..], b"warn");
    assert_eq!(out.exit, Exit::Code(3));
    exec.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_handle_that_never_started_is_not_found_never_an_exit() {
    let emu = emulator().await;
    let exec = create(&emu).await;
    let handle = exec.reattach().unwrap().new_handle();
    let e = attach_err(&exec, &handle).await;
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    // A handle of another adapter is refused before any request.
    let e = attach_err(&exec, &ProcessHandle::new("sprites1:42")).await;
    assert_eq!(e.kind(), ErrorKind::InvalidCommand);
    exec.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn killing_through_the_attach_stream_kills_the_command_and_its_group() {
    let emu = emulator().await;
    let exec = create(&emu).await;
    let id = exec.id().to_owned();
    let r = exec.reattach().unwrap();
    let handle = r.new_handle();
    r.start(&handle, sh("sleep 30 & sleep 30; echo late"))
        .await
        .unwrap();
    until("the command runs", || !emu.processes(&id).is_empty()).await;
    let stream = r.attach(&handle).await.unwrap();
    assert!(stream.can_confirm_kill());
    assert!(stream.kill().await.unwrap(), "the kill was confirmed");
    until("the process is gone", || emu.processes(&id).is_empty()).await;
    // Killed: the wrapper could not record an exit, and envd no longer has it.
    let e = attach_err(&exec, &handle).await;
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    exec.destroy().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn stdin_env_and_workdir_reach_the_detached_command() {
    let emu = emulator().await;
    let exec = create(&emu).await;
    let r = exec.reattach().unwrap();
    let handle = r.new_handle();
    let cmd = Command::builder(["sh", "-c", "cat; printf '|%s|%s|' \"$A_1\" \"$(pwd)\""])
        .stdin("in\x00put")
        .env("A_1", "v 1")
        .workdir("/tmp")
        .build()
        .unwrap();
    r.start(&handle, cmd).await.unwrap();
    let out = r.attach(&handle).await.unwrap().collect().await.unwrap();
    assert_eq!(&out.stdout[..], b"in\x00put|v 1|/tmp|");
    assert_eq!(out.exit, Exit::Code(0));
    exec.destroy().await.unwrap();
}
