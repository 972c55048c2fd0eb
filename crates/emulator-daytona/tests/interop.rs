//! The official Daytona Python SDK (PyPI `daytona`, pinned in `interop/daytona/requirements.txt`)
//! against the Daytona emulator: sandbox create/get/delete, `process.exec` and `code_run`,
//! sessions (sync and async, command status, split logs, streamed logs, input), the files API, and
//! sandbox state (snapshots, create from one, the 422 of `pause`/`fork` for a container sandbox,
//! preview links and requests through them).
//! Fails loudly when PyPI cannot be reached.

use std::path::{Path, PathBuf};

use execseam_emulator_daytona::DaytonaEmulator;
use execseam_emulator_kit::EmulatorOptions;
use execseam_test_util::interop;

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("interop")
}

#[tokio::test(flavor = "multi_thread")]
async fn the_official_python_sdk_works_against_the_emulator() {
    let emu = std::sync::Arc::new(
        DaytonaEmulator::start(EmulatorOptions::default())
            .await
            .expect("the emulator starts"),
    );
    // Where the sandbox's home and /tmp appear to its commands.
    let probe = emu.visible_path("probe", "/tmp");
    assert!(probe.is_none(), "no sandbox exists yet");
    let iso = execseam_emulator_kit::Isolation::detect();
    let (home, tmp) = match iso {
        execseam_emulator_kit::Isolation::Namespaces => {
            ("/home/daytona".to_owned(), "/tmp".to_owned())
        }
        execseam_emulator_kit::Isolation::Translate => panic!(
            "the Daytona interop check needs mount namespaces (root and unshare): without them \
             sandbox paths differ from Daytona's and the SDK's path assertions cannot hold"
        ),
    };
    // `set_autostop_interval` counts minutes of inactivity: a minute lasts a second here, so
    // the SDK check can see an idle sandbox stop.
    emu.set_minute(std::time::Duration::from_secs(1));
    let mut env = emu.env();
    env.push(("EXPECT_MINUTE_SECS".into(), "1".into()));
    env.push(("EXPECT_HOME".into(), home));
    env.push(("EXPECT_TMP".into(), tmp));
    // `recover` needs a sandbox in `error`, which only the runner reports (nothing on the API
    // puts a sandbox there): the SDK check labels such sandboxes `interop: fail-recoverable` or
    // `fail-fatal`, and this puts each in error once, 300 ms after it appears.
    let watcher = {
        let emu = emu.clone();
        tokio::spawn(async move {
            let mut seen = std::collections::HashMap::new();
            let mut failed = std::collections::HashSet::new();
            loop {
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                for id in emu.sandbox_ids() {
                    let labels = emu.sandbox_labels(&id).unwrap_or_default();
                    let recoverable = match labels.get("interop").map(String::as_str) {
                        Some("fail-recoverable") => true,
                        Some("fail-fatal") => false,
                        _ => continue,
                    };
                    let first = *seen
                        .entry(id.clone())
                        .or_insert_with(std::time::Instant::now);
                    if !failed.contains(&id)
                        && first.elapsed() >= std::time::Duration::from_millis(300)
                        && emu.sandbox_state(&id) == Some("started")
                    {
                        emu.fail_sandbox(&id, "interop: disk full", recoverable);
                        failed.insert(id);
                    }
                }
            }
        })
    };
    interop::python_checks("daytona", &dir(), "sdk_check.py", env, 114).await;
    watcher.abort();
    assert!(emu.sandbox_ids().is_empty(), "the SDK deleted its sandbox");
}

/// The SDK's PTY sessions (`process.create_pty_session` and friends) on a real terminal of the
/// sandbox (`interop/daytona/pty_check.py`, which cites the SDK's and the daemon's sources).
#[tokio::test(flavor = "multi_thread")]
async fn the_official_python_sdk_drives_pty_sessions() {
    assert_eq!(
        execseam_emulator_kit::Isolation::detect(),
        execseam_emulator_kit::Isolation::Namespaces,
        "the PTY check needs the sandbox's own devpts and paths (root and unshare)"
    );
    let emu = DaytonaEmulator::start(EmulatorOptions::default())
        .await
        .expect("the emulator starts");
    interop::python_checks("daytona", &dir(), "pty_check.py", emu.env(), 14).await;
    assert!(emu.sandbox_ids().is_empty(), "the SDK deleted its sandbox");
}
