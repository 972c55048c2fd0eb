//! `Reattach` against the emulator. The Sprites behaviour relied on (research/fly-sprites.md
//! §B.2–B.4, from the API reference and sprites-go/sprites-js): a non-TTY command outlives its
//! socket for `max_run_after_disconnect` (`0` = forever, default 10 s); `GET /exec` lists the
//! running sessions with their command line; `GET /exec/{id}` attaches (replaying a bounded,
//! undocumented scrollback first); an ended session is gone from the list; the kill route
//! signals the session's process group. The emulator's replay ring is set smaller than the
//! output here, so a result built from the replay would be truncated: the spool is what makes it
//! exact.

use std::time::{Duration, Instant};

use execseam_core::{Command, ErrorKind, Exec, Exit, ProcessHandle};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::sprites::{DEFAULT_SPRITE, SpritesEmulator, SpritesOptions};
use execseam_sprites::{SpritesConfig, SpritesExec, SpritesProvider};

async fn emulator() -> SpritesEmulator {
    SpritesEmulator::start_with(
        EmulatorOptions {
            token: Some("spr_test".into()),
            ..EmulatorOptions::default()
        },
        SpritesOptions {
            // Short, so that a command relying on the default would be killed during the test.
            max_run_after_disconnect: Duration::from_millis(500),
            replay_bytes: 16,
            ..SpritesOptions::default()
        },
    )
    .await
    .expect("the emulator starts")
}

/// A fresh handle on the sprite, as another process would have.
fn handle_on(emu: &SpritesEmulator) -> SpritesExec {
    SpritesProvider::new(SpritesConfig::new("spr_test").base_url(emu.base_url()))
        .expect("a provider")
        .attach(DEFAULT_SPRITE)
        .expect("a handle")
}

fn sh(script: &str) -> Command {
    Command::new(["sh", "-c", script]).unwrap()
}

fn sessions(emu: &SpritesEmulator) -> usize {
    emu.sprite(DEFAULT_SPRITE).unwrap().sessions().len()
}

async fn until(what: &str, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < end, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn attach_err(exec: &SpritesExec, handle: &ProcessHandle) -> execseam_core::Error {
    match exec.reattach().unwrap().attach(handle).await {
        Ok(s) => s.collect().await.unwrap_err(),
        Err(e) => e,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_detached_command_outlives_its_socket_and_is_attached_again_byte_exact() {
    let emu = emulator().await;
    let first = handle_on(&emu);
    let r = first
        .reattach()
        .expect("Sprites reattaches over WebSockets");
    let handle = r.new_handle();
    let script = r#"printf 'one\n\377\000two-long-enough-to-overflow-the-ring\n'; printf 'e1\n' >&2; sleep 1.5; printf 'three\n'; printf 'e2' >&2; exit 7"#;
    r.start(&handle, sh(script)).await.unwrap();
    drop(first);
    // Past the default max_run_after_disconnect: the detached start asked for forever.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(sessions(&emu), 1, "still running after its socket closed");

    let second = handle_on(&emu);
    let stored = ProcessHandle::new(handle.as_str().to_owned());
    let out = second
        .reattach()
        .unwrap()
        .attach(&stored)
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(
        &out.stdout[..],
        b"one\n\xff\x00two-long-enough-to-overflow-the-ring\nthree\n"
    );
    assert_eq!(&out.stderr[..], b"e1\ne2");
    assert_eq!(out.exit, Exit::Code(7));

    // Once the session ended it is gone from the list; the spool still answers, until released.
    assert_eq!(sessions(&emu), 0);
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
    assert_eq!(
        attach_err(&second, &stored).await.kind(),
        ErrorKind::NotFound
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_handle_that_never_started_is_not_found_and_a_foreign_one_is_refused() {
    let emu = emulator().await;
    let exec = handle_on(&emu);
    let handle = exec.reattach().unwrap().new_handle();
    assert_eq!(attach_err(&exec, &handle).await.kind(), ErrorKind::NotFound);
    assert_eq!(
        attach_err(&exec, &ProcessHandle::new("e2b1:execseam-x"))
            .await
            .kind(),
        ErrorKind::InvalidCommand
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn killing_through_the_attach_stream_kills_the_session() {
    let emu = emulator().await;
    let exec = handle_on(&emu);
    let r = exec.reattach().unwrap();
    let handle = r.new_handle();
    r.start(&handle, sh("sleep 30; echo late")).await.unwrap();
    until("the session runs", || sessions(&emu) == 1).await;
    let stream = r.attach(&handle).await.unwrap();
    assert!(stream.kill().await.unwrap(), "the kill was confirmed");
    until("the session is gone", || sessions(&emu) == 0).await;
    // Killed before it could record an exit: unknown, never an invented one.
    assert_eq!(attach_err(&exec, &handle).await.kind(), ErrorKind::NotFound);
}

#[tokio::test(flavor = "multi_thread")]
async fn stdin_env_and_workdir_reach_the_detached_command() {
    let emu = emulator().await;
    let exec = handle_on(&emu);
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
}
