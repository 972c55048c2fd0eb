//! The official Sprites Python SDK (PyPI `sprites-py`, pinned in
//! `interop/sprites/requirements.txt`) against the Sprites emulator: sprites CRUD, exec over the
//! WebSocket (argv, cwd, env, stdin, stdout and stderr separately, exit codes, a failing command),
//! control mode's fallback, sessions (list, kill), the filesystem API, the sprite URL
//! (`url`, `url_settings.auth`, routed to a service's `http_port`), and the errors. Fails loudly
//! when PyPI cannot be reached.

use std::path::Path;

use execseam_emulator_kit::{EmulatorOptions, Isolation};
use execseam_emulator_sprites::{SpritesEmulator, SpritesOptions};
use execseam_test_util::interop;

#[tokio::test(flavor = "multi_thread")]
async fn the_official_python_sdk_works_against_the_emulator() {
    assert_eq!(
        Isolation::detect(),
        Isolation::Namespaces,
        "the Sprites interop check needs mount namespaces (root and unshare): without them the \
         sprite's paths are not /home/sprite and the SDK's path checks cannot hold"
    );
    let emu = SpritesEmulator::start_with(
        EmulatorOptions::with_token("spr-interop-token"),
        SpritesOptions::default(),
    )
    .await
    .expect("the emulator starts");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("interop");
    interop::python_checks("sprites", &dir, "sdk_check.py", emu.env(), 86).await;
    // The SDK's requests reached the exec route (and were counted there).
    assert!(
        emu.exec_requests() >= 20,
        "{} exec requests",
        emu.exec_requests()
    );
    assert!(
        emu.sprite("interop-py").is_none(),
        "the SDK destroyed its sprite"
    );
}

/// sprites-py in TTY mode (`tty=True`): a real terminal of the requested size, stdin typed into
/// it, the exit message, and resizes (`interop/sprites/pty_check.py`, which cites its sources).
#[tokio::test(flavor = "multi_thread")]
async fn the_official_python_sdk_gets_a_real_terminal() {
    assert_eq!(
        Isolation::detect(),
        Isolation::Namespaces,
        "the TTY check needs the sprite's own devpts (root and unshare)"
    );
    let emu = SpritesEmulator::start_with(EmulatorOptions::default(), SpritesOptions::default())
        .await
        .expect("the emulator starts");
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("interop");
    interop::python_checks("sprites", &dir, "pty_check.py", emu.env(), 9).await;
}
