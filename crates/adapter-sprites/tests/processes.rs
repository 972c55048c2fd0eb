//! Process handles against the emulator. The Sprites behaviour relied on (research/fly-sprites.md
//! §B.2–B.4, from the API reference and sprites-go/sprites-js): a non-TTY session is killed
//! `max_run_after_disconnect` after its socket closes (default 10 s; the emulator's is set to
//! 500 ms here), and its attach replay is a bounded scrollback without offsets (16 bytes here).
//! The kit's spool runs the command outside the exec's session, in files of the sprite, so it
//! outlives the socket and reads back exactly from any offset.

use std::time::Duration;

use execseam_core::{
    ErrorKind, Exec, Exit, ProcessHandle, Signal, StartKey, StartRequest, StreamOffsets,
    TerminalSize, Waited,
};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::sprites::{DEFAULT_SPRITE, SpritesEmulator, SpritesOptions};
use execseam_sprites::{SpritesConfig, SpritesExec, SpritesProvider, TerminalMode};
use execseam_test_util::processes::{output_from_start, sh, stdin_env_and_workdir_reach};

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
    handle_with(emu, TerminalMode::Recorder)
}

/// The same, with terminals in `mode`.
fn handle_with(emu: &SpritesEmulator, mode: TerminalMode) -> SpritesExec {
    SpritesProvider::new(
        SpritesConfig::new("spr_test")
            .base_url(emu.base_url())
            .terminal(mode),
    )
    .expect("a provider")
    .attach(DEFAULT_SPRITE)
    .expect("a handle")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_detached_command_outlives_its_socket_and_is_attached_again_byte_exact() {
    let emu = emulator().await;
    let first = handle_on(&emu);
    let script = r#"printf 'one\n\377\000two-long-enough-to-overflow-the-ring\n'; printf 'e1\n' >&2; sleep 1.5; printf 'three\n'; printf 'e2' >&2; exit 7"#;
    let started = first
        .processes()
        .expect("Sprites has process handles")
        .start(StartRequest::new(
            StartKey::new("detached").unwrap(),
            sh(script),
        ))
        .await
        .unwrap();
    drop(first);
    // Past max_run_after_disconnect of every socket the start used.
    tokio::time::sleep(Duration::from_millis(800)).await;

    let second = handle_on(&emu);
    let p = second.processes().unwrap();
    let stored = ProcessHandle::new(started.handle.as_str().to_owned());
    assert_eq!(
        p.wait(&stored, Duration::from_millis(100)).await.unwrap(),
        Waited::Running,
        "still running after its socket closed"
    );
    let out = output_from_start(&*p, &stored).await;
    assert_eq!(
        &out.stdout[..],
        b"one\n\xff\x00two-long-enough-to-overflow-the-ring\nthree\n"
    );
    assert_eq!(&out.stderr[..], b"e1\ne2");
    assert_eq!(out.exit, Exit::Code(7));
    let again = p
        .attach(&stored, StreamOffsets::new(6, 0))
        .await
        .unwrap()
        .collect()
        .await
        .unwrap();
    assert_eq!(&again.stdout[..], &out.stdout[6..]);
    p.release(&stored).await.unwrap();
    assert_eq!(
        p.read(&stored, StreamOffsets::ZERO)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_handle_that_never_started_is_not_found_and_a_foreign_one_is_refused() {
    let emu = emulator().await;
    let exec = handle_on(&emu);
    let p = exec.processes().unwrap();
    let handle = p.handle_for(&StartKey::new("never").unwrap());
    assert_eq!(
        p.read(&handle, StreamOffsets::ZERO)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::NotFound
    );
    assert_eq!(
        p.read(&ProcessHandle::new("e2b1:execseam-x"), StreamOffsets::ZERO)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidCommand
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_signal_ends_the_command() {
    let emu = emulator().await;
    let exec = handle_on(&emu);
    let p = exec.processes().unwrap();
    let s = p
        .start(StartRequest::new(
            StartKey::new("kill").unwrap(),
            sh("sleep 30; echo late"),
        ))
        .await
        .unwrap();
    p.signal(&s.handle, Signal::Term).await.unwrap();
    assert_eq!(
        p.wait(&s.handle, Duration::from_secs(10)).await.unwrap(),
        Waited::Exited(Exit::Code(143))
    );
    let out = output_from_start(&*p, &s.handle).await;
    assert!(out.stdout.is_empty(), "it did not run on");
}

#[tokio::test(flavor = "multi_thread")]
async fn stdin_env_and_workdir_reach_the_detached_command() {
    let emu = emulator().await;
    let exec = handle_on(&emu);
    let p = exec.processes().unwrap();
    stdin_env_and_workdir_reach(&*p).await;
}

/// The sprite's exec sessions whose command mentions `needle`, as `GET /exec` lists them:
/// `(tty, is_active)` each.
async fn sessions(emu: &SpritesEmulator, needle: &str) -> Vec<(bool, bool)> {
    let url = format!("{}/v1/sprites/{DEFAULT_SPRITE}/exec", emu.base_url());
    let answer = reqwest::Client::new()
        .get(url)
        .bearer_auth("spr_test")
        .send();
    let list: serde_json::Value = answer.await.unwrap().json().await.unwrap();
    list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["command"].as_str().unwrap_or_default().contains(needle))
        .map(|s| (s["tty"] == true, s["is_active"] == true))
        .collect()
}

/// With `EXECSEAM_SPRITES_TERMINAL=attached`, terminals are Sprites' own TTY sessions (`tty=true`: research/fly-sprites.md §B.3.2), not the
/// kit's recorder over a pipe exec: the sprite lists the session with `"tty": true`. They are
/// held by the handle that opened them: a session attached again replays a bounded scrollback
/// without offsets (16 bytes here), so another handle is refused (`NotFound`), never answered
/// from it; the handle dropped, its session is killed.
#[tokio::test(flavor = "multi_thread")]
async fn a_terminal_is_a_sprites_tty_session_held_by_the_handle_that_opened_it() {
    let emu = emulator().await;
    let first = handle_with(&emu, TerminalMode::Attached);
    let p = first.processes().unwrap();
    let caps = p.process_capabilities();
    assert!(caps.terminal && !caps.terminal_reattach, "{caps:?}");
    let started = p
        .start(
            StartRequest::new(StartKey::new("tty").unwrap(), sh("echo ready; sleep 31"))
                .terminal(TerminalSize { cols: 90, rows: 20 }),
        )
        .await
        .unwrap();
    // The session is listed once the server has started it, which the upgrade may precede.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while sessions(&emu, "sleep 31").await != [(true, true)] {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no TTY session listed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let other = handle_with(&emu, TerminalMode::Attached);
    let e = other
        .processes()
        .unwrap()
        .read(&started.handle, StreamOffsets::ZERO)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    drop(p);
    drop(first);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while sessions(&emu, "sleep 31").await.contains(&(true, true)) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the session outlived its handle"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
