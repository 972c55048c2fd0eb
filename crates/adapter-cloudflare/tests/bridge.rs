//! Adapter behaviour beyond the conformance suite, against the bridge emulator: the bridge's
//! `timeout_ms`, sessions, the sandbox check, credentials, limits, tunnels, snapshots.

use std::time::Duration;

use execseam_cloudflare::{
    CloudflareConfig, CloudflareExec, CloudflareProvider, OutputMode, TerminalMode,
};
use execseam_core::{Command, Deadline, ErrorKind, Exec, Exit, Retry, Sandbox, SandboxSpec};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::cloudflare::CloudflareEmulator;
use execseam_test_util::exec::{assert_error, command};

async fn emulator() -> CloudflareEmulator {
    CloudflareEmulator::start(EmulatorOptions {
        token: Some("secret".into()),
        ..EmulatorOptions::default()
    })
    .await
    .expect("emulator")
}

fn config(emu: &CloudflareEmulator, mode: OutputMode) -> CloudflareConfig {
    CloudflareConfig::new(emu.base_url())
        .api_key("secret")
        .mode(mode)
}

async fn create(config: CloudflareConfig) -> Result<CloudflareExec, execseam_core::Error> {
    CloudflareProvider::new(config)?
        .create(SandboxSpec::new())
        .await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_bridge_timeout_is_a_command_timeout_with_the_partial_output() {
    let emu = emulator().await;
    for mode in [OutputMode::Streaming, OutputMode::Exact] {
        let exec = create(config(&emu, mode).command_timeout(Duration::from_millis(700)))
            .await
            .unwrap();
        let cmd = command(["sh", "-c", "echo start; sleep 5"]);
        let err = exec.exec(cmd).await.unwrap_err();
        assert_eq!(
            err.kind(),
            ErrorKind::Timeout(Deadline::Command),
            "{mode:?}: {err}"
        );
        assert_eq!(err.retry(), Retry::Unsafe);
        assert_eq!(
            err.partial().unwrap().stdout.as_ref(),
            b"start\n",
            "{mode:?}"
        );
        // A command's own exit 124 is a result.
        let own = exec
            .exec(command(["sh", "-c", "echo 'not the bridge' >&2; exit 124"]))
            .await
            .unwrap();
        assert_eq!(own.exit, Exit::Code(124));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replaced_container_is_not_found_and_attaching_without_the_check_works() {
    let emu = emulator().await;
    let exec = create(config(&emu, OutputMode::Streaming)).await.unwrap();
    exec.exec(command(["touch", "/workspace/state"]))
        .await
        .unwrap();
    let provider = CloudflareProvider::new(config(&emu, OutputMode::Streaming)).unwrap();
    let other = provider.connect(exec.id()).await.unwrap();
    Sandbox::destroy(&exec).await.unwrap();
    // The handle that destroyed it knows, without a request.
    let err = exec.exec(command(["true"])).await.unwrap_err();
    assert_error(&err, ErrorKind::NotFound, Retry::Never);
    assert!(err.message().contains("was destroyed"), "{err}");
    // Another handle finds its marker gone: the bridge gave the id a fresh container.
    let err = other.exec(command(["true"])).await.unwrap_err();
    assert_error(&err, ErrorKind::NotFound, Retry::Never);
    assert!(err.message().contains("the workspace is gone"), "{err}");
    // The id itself works again, with a fresh workspace, for whoever attaches anew.
    let again = CloudflareProvider::new(config(&emu, OutputMode::Streaming).verify_sandbox(false))
        .unwrap()
        .attach(exec.id())
        .expect("a handle");
    let out = again
        .exec(command(["ls", "/workspace/state"]))
        .await
        .unwrap();
    assert_ne!(out.exit, Exit::Code(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn credentials_and_limits_fail_before_any_command() {
    let emu = emulator().await;
    let err = create(CloudflareConfig::new(emu.base_url()).api_key("wrong"))
        .await
        .unwrap_err();
    assert_error(&err, ErrorKind::Unauthenticated, Retry::Never);
    assert_eq!(err.code(), Some("unauthorized"));

    let exec = create(config(&emu, OutputMode::Exact)).await.unwrap();
    let before = emu.faults().count("exec");
    let huge = Command::builder(["cat"])
        .stdin(vec![b'x'; 32 * 1024 * 1024 + 1])
        .build()
        .unwrap();
    let err = exec.exec(huge).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidCommand, "{err}");
    assert_eq!(emu.faults().count("exec"), before, "nothing was sent");

    let err = CloudflareProvider::new(CloudflareConfig::new(emu.base_url()))
        .unwrap()
        .connect("Not-Base32")
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    let err = CloudflareProvider::new(CloudflareConfig::new("ftp://x")).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
}

#[tokio::test(flavor = "multi_thread")]
async fn exact_mode_removes_its_capture_files() {
    let emu = emulator().await;
    let exec = create(config(&emu, OutputMode::Exact)).await.unwrap();
    let out = exec
        .exec(command(["sh", "-c", "printf '\\377'; printf '\\000' >&2"]))
        .await
        .unwrap();
    assert_eq!(
        (out.stdout.as_ref(), out.stderr.as_ref()),
        (&b"\xff"[..], &b"\0"[..])
    );
    let left = exec
        .exec(Command::new(["sh", "-c", "ls -A /workspace/.execseam | grep -c '[.]out$'"]).unwrap())
        .await
        .unwrap();
    // Only the listing command's own capture file: the first command's were removed.
    assert_eq!(left.stdout.as_ref(), b"1\n", "{left:?}");

    // Tunnels: the same one for the same port; its hostname reaches the emulator's tunnel
    // proxy (502: nothing listens on the port) until unexposed, then no tunnel has it (404).
    let p = CloudflareProvider::new(config(&emu, OutputMode::Exact)).unwrap();
    for (port, id) in [(3000, exec.id()), (80, exec.id()), (8080, "Not-Base32")] {
        let err = p.expose(id, port).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{port} {id}: {err}");
    }
    let first = p.expose(exec.id(), 8080).await.unwrap();
    assert_eq!(first.url, p.expose(exec.id(), 8080).await.unwrap().url);
    let host = first.url.split("//").nth(1).unwrap().trim_end_matches('/');
    let status = || async {
        reqwest::Client::new()
            .get(format!("{}/", emu.base_url()))
            .header(reqwest::header::HOST, host)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    };
    assert_eq!(status().await, 502, "{}", first.url);
    p.unexpose(exec.id(), 8080).await.unwrap();
    p.unexpose(exec.id(), 8080).await.unwrap();
    assert_eq!(status().await, 404, "{}", first.url);

    // Snapshots: the bridge's `persist` tar kept as a file here, without the adapter's temp
    // dir (its capture files and marker); listed by source; created from into a new sandbox
    // (`hydrate`); a snapshot not kept here is `NotFound` before any request (the provider
    // below points at nothing).
    let dir = std::env::temp_dir().join(format!("execseam-cf-snaps-{}", std::process::id()));
    let p = CloudflareProvider::new(config(&emu, OutputMode::Exact).snapshot_dir(&dir)).unwrap();
    exec.exec(command(["sh", "-c", "printf kept > /workspace/f"]))
        .await
        .unwrap();
    let snap = p
        .snapshot(exec.id(), execseam_core::SnapshotRequest::new())
        .await
        .unwrap();
    let tar = std::fs::read(dir.join(format!("{}.data", snap.snapshot.id))).unwrap();
    let has = |name: &[u8]| tar.windows(name.len()).any(|w| w == name);
    assert!(
        has(b"./f") && !has(b".execseam"),
        "the tar holds /workspace/f only"
    );
    let listed = p.list_snapshots(Some(exec.id())).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, snap.snapshot.id);
    assert!(p.list_snapshots(Some("other")).await.unwrap().is_empty());
    let made = p
        .create(SandboxSpec::new().with_snapshot(snap.snapshot.id.clone()))
        .await
        .unwrap();
    let got = made.exec(command(["cat", "/workspace/f"])).await.unwrap();
    assert_eq!(got.stdout.as_ref(), b"kept");
    made.close().await.unwrap();
    p.delete_snapshot(&snap.snapshot.id).await.unwrap();
    let dead =
        CloudflareProvider::new(CloudflareConfig::new("http://127.0.0.1:9").snapshot_dir(&dir))
            .unwrap();
    let err = dead
        .create(SandboxSpec::new().with_snapshot(snap.snapshot.id.clone()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// With `EXECSEAM_CLOUDFLARE_TERMINAL=attached`, a terminal runs on the bridge's terminal WebSocket with the command's workdir and env (the
/// env through a 0600 file, never typed into the terminal), and is held by the handle that
/// opened it: the container replays a new connection's scrollback without offsets, so another
/// handle of the same sandbox is refused (`NotFound`), never answered from it. A workdir that
/// does not exist is `NotFound` before any terminal opens. Closing the socket does not end a
/// terminal (`pty-ws-handler.ts` `onClose`): one whose handle goes has its session deleted, and
/// its command is gone (looked for among this host's processes, where the emulator runs it).
#[tokio::test(flavor = "multi_thread")]
async fn a_terminal_has_its_workdir_and_env_and_belongs_to_its_handle() {
    use execseam_core::{
        Signal, StartKey, StartRequest, StdinWrite, StreamOffsets, TerminalSize, Waited,
    };
    let emu = emulator().await;
    let attached = || config(&emu, OutputMode::Streaming).terminal(TerminalMode::Attached);
    let first = create(attached()).await.unwrap();
    let p = first.processes().unwrap();
    let caps = p.process_capabilities();
    assert!(caps.terminal && !caps.terminal_reattach, "{caps:?}");
    let cmd = Command::builder(["sh", "-c", "echo \"$PWD $TOKEN\"; exit 4"])
        .workdir("/tmp")
        .env("TOKEN", "t0k3n")
        .build()
        .unwrap();
    let size = TerminalSize { cols: 80, rows: 24 };
    let h = p
        .start(StartRequest::new(StartKey::new("tty").unwrap(), cmd).terminal(size))
        .await
        .unwrap()
        .handle;
    assert_eq!(
        p.wait(&h, Duration::from_secs(10)).await.unwrap(),
        Waited::Exited(Exit::Code(4))
    );
    let out = p.read(&h, StreamOffsets::ZERO).await.unwrap();
    assert_eq!(out.stdout, &b"/tmp t0k3n\r\n"[..]);
    let other = CloudflareProvider::new(attached())
        .unwrap()
        .attach(Sandbox::id(&first))
        .unwrap();
    let elsewhere = other.processes().unwrap();
    let e = elsewhere.read(&h, StreamOffsets::ZERO).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    let missing = Command::builder(["true"])
        .workdir("/nowhere")
        .build()
        .unwrap();
    let e = p
        .start(StartRequest::new(StartKey::new("tty2").unwrap(), missing).terminal(size))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");

    // Attached: no signal reaches the command (not a group leader under the recording script):
    // refused before any request, and the terminal runs on to the end it is typed.
    let read = command(["sh", "-c", "read s; exit \"$s\""]);
    let h = p
        .start(StartRequest::new(StartKey::new("tty4").unwrap(), read).terminal(size))
        .await
        .unwrap()
        .handle;
    let e = p.signal(&h, Signal::Term).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
    assert!(e.message().contains("recorder"), "{e}");
    let typed = StdinWrite {
        at: 0,
        data: "3\n".into(),
        close: false,
    };
    p.write_stdin(&h, typed).await.unwrap();
    assert_eq!(
        p.wait(&h, Duration::from_secs(10)).await.unwrap(),
        Waited::Exited(Exit::Code(3))
    );
    // The default recorder's terminal takes the signal: the command leads its group under
    // `script`, whose `-e` status is 128 + n for a signal death.
    let recorder = CloudflareProvider::new(config(&emu, OutputMode::Streaming))
        .unwrap()
        .attach(Sandbox::id(&first))
        .unwrap();
    let rp = recorder.processes().unwrap();
    let sleeper = command(["sleep", "100"]);
    let h = rp
        .start(StartRequest::new(StartKey::new("tty5").unwrap(), sleeper).terminal(size))
        .await
        .unwrap()
        .handle;
    rp.signal(&h, Signal::Term).await.unwrap();
    let Waited::Exited(exit) = rp.wait(&h, Duration::from_secs(10)).await.unwrap() else {
        panic!("the signalled terminal still runs");
    };
    assert_eq!(exit, Exit::Code(143), "{exit:?}");
    assert_eq!(exit.class(), execseam_core::ExitClass::AmbiguousKill);
    drop(rp);
    drop(recorder);

    let sleep = execseam_test_util::probe::unique_sleep();
    let long = command(["sh", "-c", "echo up; exec sleep \"$0\"", &sleep]);
    let h = p
        .start(StartRequest::new(StartKey::new("tty3").unwrap(), long).terminal(size))
        .await
        .unwrap()
        .handle;
    for _ in 0..200 {
        if p.read(&h, StreamOffsets::ZERO)
            .await
            .unwrap()
            .stdout
            .starts_with(b"up")
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(!execseam_test_util::probe::processes_with_arg(&sleep).is_empty());
    drop(elsewhere);
    drop(other);
    drop(p);
    // The sandbox stays (not owned): only the terminal's session goes with the handle.
    first.set_owned(false);
    drop(first);
    if let Err(left) = execseam_test_util::probe::gone_within(&sleep, Duration::from_secs(10)).await
    {
        panic!("the dropped terminal's command still runs: {left:?}");
    }
}
