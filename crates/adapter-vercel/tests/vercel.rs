//! The Vercel adapter against its emulator: the lifecycle (create with tags, list by tag,
//! connect, stop and resume, destroy twice), files, stdin larger than one request, the kill on
//! drop, and configuration errors before any I/O.

use std::time::Duration;

use execseam_core::{
    Command, ErrorKind, Exec, ExecStream, Exit, ListFilter, Provider, Sandbox, SandboxSpec,
};
use execseam_emulators::EmulatorOptions;
use execseam_emulators::vercel::{PROJECT_ID, TEAM_ID, VercelEmulator, VercelOptions};
use execseam_test_util::exec::{command, sh};
use execseam_vercel::{VercelConfig, VercelProvider};

async fn setup() -> (VercelEmulator, VercelProvider) {
    let emu = VercelEmulator::start_with(EmulatorOptions::default(), VercelOptions::default())
        .await
        .expect("emulator");
    let provider = VercelProvider::new(
        VercelConfig::new(emu.token(), TEAM_ID, PROJECT_ID).api_url(emu.base_url()),
    )
    .expect("provider");
    (emu, provider)
}

#[tokio::test(flavor = "multi_thread")]
async fn lifecycle_create_list_connect_stop_resume_destroy() {
    let (emu, provider) = setup().await;
    let a = provider
        .create(
            SandboxSpec::new()
                .with_label("suite", "a")
                .with_env("GREETING", "hi"),
        )
        .await
        .unwrap();
    let b = provider
        .create(SandboxSpec::new().with_label("suite", "b"))
        .await
        .unwrap();
    assert!(a.owned() && b.owned());
    let out = a.exec(sh("printf %s \"$GREETING\"")).await.unwrap();
    assert_eq!(
        out.stdout.as_ref(),
        b"hi",
        "the spec's env reaches every command"
    );

    let listed = provider
        .list(&ListFilter::new().with_label("suite", "a"))
        .await
        .unwrap();
    assert_eq!(
        listed.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(),
        [a.id()]
    );
    assert_eq!(listed[0].labels.get("suite").map(String::as_str), Some("a"));

    a.write_files(&[("note.txt", b"written by a\n", 0o644)])
        .await
        .unwrap();
    let again = provider.connect(a.id()).await.unwrap();
    assert!(!again.owned());
    assert_eq!(
        again
            .read_file("/vercel/sandbox/note.txt")
            .await
            .unwrap()
            .as_deref(),
        Some(&b"written by a\n"[..])
    );

    // A stopped session resumes (a new session) on the next command, files kept.
    let before = a.session_id();
    a.stop().await.unwrap();
    let out = a.exec(command(["cat", "note.txt"])).await.unwrap();
    assert_eq!(out.stdout.as_ref(), b"written by a\n");
    assert_ne!(a.session_id(), before);

    again.close().await.unwrap();
    assert_eq!(
        emu.sandbox_names().len(),
        2,
        "closing a connected handle deletes nothing"
    );
    a.close().await.unwrap();
    let err = a.exec(command(["true"])).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    provider
        .destroy(a.id())
        .await
        .expect("destroying a gone sandbox is Ok");
    Sandbox::destroy(&b).await.unwrap();
    Sandbox::destroy(&b).await.expect("destroy is idempotent");
    assert!(emu.sandbox_names().is_empty(), "{:?}", emu.sandbox_names());
    let err = provider.connect("never-was").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
}

#[tokio::test(flavor = "multi_thread")]
async fn files_modes_mkdir_and_missing() {
    let (_emu, provider) = setup().await;
    let sb = provider.create(SandboxSpec::new()).await.unwrap();
    let bin: Vec<u8> = (0..=255u8).collect();
    sb.write_files(&[
        ("/vercel/sandbox/bin.dat", &bin, 0o644),
        ("deep/er/run.sh", b"#!/bin/sh\necho ran\n", 0o755),
    ])
    .await
    .unwrap();
    assert_eq!(
        sb.read_file("bin.dat").await.unwrap().as_deref(),
        Some(&bin[..])
    );
    let out = sb
        .exec(command(["/vercel/sandbox/deep/er/run.sh"]))
        .await
        .unwrap();
    assert_eq!(out.stdout.as_ref(), b"ran\n");
    assert_eq!(sb.read_file("/vercel/sandbox/missing").await.unwrap(), None);
    sb.mkdir("/vercel/sandbox/x/y/z", true).await.unwrap();
    let err = sb.mkdir("/vercel/sandbox/p/q", false).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    let out = sb
        .exec(command(["test", "-d", "/vercel/sandbox/x/y/z"]))
        .await
        .unwrap();
    assert_eq!(out.exit, Exit::Code(0));
    sb.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn stdin_over_several_requests_and_a_command_that_does_not_read_it() {
    let (_emu, provider) = setup().await;
    let sb = provider.create(SandboxSpec::new()).await.unwrap();
    let big: Vec<u8> = (0..1_300_000u32).map(|i| (i % 251) as u8).collect();
    let cmd = Command::builder(["sha256sum"])
        .stdin(big.clone())
        .build()
        .unwrap();
    let out = sb.exec(cmd).await.unwrap();
    let local = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            use std::io::Write;
            c.stdin.take().unwrap().write_all(&big)?;
            c.wait_with_output()
        })
        .unwrap();
    assert_eq!(
        out.stdout, local.stdout,
        "1.3 MB of stdin arrive whole, in order"
    );
    let cmd = Command::builder(["true"])
        .stdin(vec![b'x'; 2_000_000])
        .build()
        .unwrap();
    let out = sb.exec(cmd).await.unwrap();
    assert_eq!(
        out.exit,
        Exit::Code(0),
        "unread stdin is a closed pipe, not an error"
    );
    sb.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn dropping_a_stream_kills_the_command() {
    let (emu, provider) = setup().await;
    let sb = provider.create(SandboxSpec::new()).await.unwrap();
    // A duration no other process has, to find it again.
    let marker = format!("30.{}", std::process::id());
    let mut stream = sb
        .exec_stream(sh(&format!("echo started; exec sleep {marker}")))
        .await
        .unwrap();
    let first = stream.next().await.unwrap().unwrap();
    assert!(
        matches!(first, execseam_core::Event::Stdout(_)),
        "{first:?}"
    );
    drop(stream);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let out = sb
        .exec(sh(&format!(
            "ps -eo args | grep -c '^sleep {marker}$' || true"
        )))
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "0",
        "the command was killed"
    );
    assert!(emu.exec_requests() >= 2);
    sb.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_providers_trait_objects_work_and_bad_config_fails_before_io() {
    let (_emu, provider) = setup().await;
    let p: &dyn Provider = &provider;
    assert_eq!(p.provider(), "vercel");
    let sb = p
        .create(SandboxSpec::new().with_cpu_millis(1500))
        .await
        .unwrap();
    assert_eq!(
        sb.exec(command(["true"])).await.unwrap().exit,
        Exit::Code(0)
    );
    sb.close().await.unwrap();
    let err = p
        .create(SandboxSpec::new().with_memory_mib(512))
        .await
        .err()
        .unwrap();
    assert_eq!(
        err.kind(),
        ErrorKind::Unsupported,
        "memory follows the vCPUs"
    );
    let err = VercelProvider::new(VercelConfig::new("", "t", "p")).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    let err =
        VercelProvider::new(VercelConfig::new("t", "t", "p").api_url("not a url")).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
}

#[tokio::test(flavor = "multi_thread")]
async fn sandboxes_are_isolated_and_their_processes_end_with_them() {
    let (emu, provider) = setup().await;
    let a = provider.create(SandboxSpec::new()).await.unwrap();
    let b = provider.create(SandboxSpec::new()).await.unwrap();
    let out = a.exec(command(["id", "-u"])).await.unwrap();
    assert_eq!(
        out.stdout.as_ref(),
        b"1000\n",
        "commands run as vercel-sandbox"
    );
    // Its own pid namespace: its init, its helper and this pipeline.
    let out = a.exec(sh("ps -e -o pid= | wc -l")).await.unwrap();
    let n: usize = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(
        n < 10,
        "ps lists only the sandbox's processes (the host has hundreds): {n}"
    );
    // Writes outside the private paths stay in the sandbox.
    let marker = format!("/var/tmp/execseam-vercel-{}", std::process::id());
    a.exec(sh(&format!("echo x > {marker}"))).await.unwrap();
    assert!(!std::path::Path::new(&marker).exists(), "not on the host");
    let out = b.exec(command(["cat", &marker])).await.unwrap();
    assert_ne!(out.exit, Exit::Code(0), "not in another sandbox");
    // A daemonized child dies with its sandbox.
    a.exec(sh("setsid sleep 300 >/dev/null 2>&1 < /dev/null &"))
        .await
        .unwrap();
    let root = emu.sandbox(a.id()).unwrap().root().clone();
    assert!(root.processes().is_some_and(|p| !p.is_empty()));
    a.close().await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while root.processes().is_some_and(|p| !p.is_empty()) && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        root.processes().is_none_or(|p| p.is_empty()),
        "the daemon was killed"
    );
    b.close().await.unwrap();
}

/// Detached commands: `spawn` answers with an id before the command ends, `logs` gives both
/// streams apart (live, then complete), `wait` the exit, `kill` a signal's 128+n; stdin is
/// refused before any request.
#[tokio::test(flavor = "multi_thread")]
async fn detached_commands_wait_logs_and_kill() {
    let (emu, provider) = setup().await;
    let sb = provider.create(SandboxSpec::new()).await.unwrap();
    let started = std::time::Instant::now();
    let cmd = sb
        .spawn(sh("echo out; echo err >&2; sleep 1; echo late; exit 4"))
        .await
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "spawn waited for the command: {:?}",
        started.elapsed()
    );
    assert!(cmd.id().starts_with("cmd_"), "{}", cmd.id());
    let mut logs = cmd.logs().await.unwrap();
    // Live: the first stdout line arrives before the command ends. stdout and stderr are two
    // pipes, so `err` may come before or after `out` (it did both ways in CI).
    let mut early_err = Vec::new();
    loop {
        match logs.next().await {
            Some(Ok(execseam_core::Event::Stdout(b))) => {
                assert_eq!(b.as_ref(), b"out\n");
                break;
            }
            Some(Ok(execseam_core::Event::Stderr(b))) => early_err.extend_from_slice(&b),
            other => panic!("event before the first stdout line: {other:?}"),
        }
    }
    assert!(started.elapsed() < Duration::from_millis(900));
    let rest = logs.collect().await.unwrap();
    assert_eq!(rest.stdout.as_ref(), b"late\n", "{rest:?}");
    early_err.extend_from_slice(&rest.stderr);
    assert_eq!(early_err, b"err\n", "{rest:?}");
    assert_eq!(rest.exit, Exit::Code(4));
    // The logs again, from the start, and the exit.
    let all = cmd.logs().await.unwrap().collect().await.unwrap();
    assert_eq!(all.stdout.as_ref(), b"out\nlate\n", "{all:?}");
    assert_eq!(cmd.wait().await.unwrap(), Exit::Code(4));
    // waiting again answers at once with the same exit.
    assert_eq!(cmd.wait().await.unwrap(), Exit::Code(4));

    let long = sb.spawn(sh("sleep 30")).await.unwrap();
    long.kill(15).await.unwrap();
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(10), long.wait())
            .await
            .expect("the killed command ends")
            .unwrap(),
        Exit::Code(143)
    );

    let refused = sb
        .spawn(Command::builder(["cat"]).stdin("x").build().unwrap())
        .await
        .unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Unsupported, "{refused}");
    sb.close().await.unwrap();
    drop(emu);
}

/// A handle's wait rides on Vercel's own (`GET …/cmd/{id}?wait=true` on the spool's supervisor,
/// found in `GET …/cmd`), not on polls of the spool: one status exec before and one after,
/// where polling every 20..500 ms would have run about six over the second.
#[tokio::test(flavor = "multi_thread")]
async fn a_handles_wait_is_vercels_wait_on_its_supervisor() {
    let (emu, provider) = setup().await;
    let sb = provider.create(SandboxSpec::new()).await.unwrap();
    let p = sb.processes().expect("handles");
    let waited_key = execseam_core::StartKey::new("waited").unwrap();
    let request = execseam_core::StartRequest::new(waited_key, sh("sleep 1; exit 3"));
    let s = p.start(request).await.unwrap();
    let (execs, requests) = (emu.exec_requests(), emu.requests().len());
    let waited = p.wait(&s.handle, Duration::from_secs(20)).await.unwrap();
    assert_eq!(waited, execseam_core::Waited::Exited(Exit::Code(3)));
    let gets: Vec<String> = emu.requests()[requests..]
        .iter()
        .filter(|r| r.method == "GET")
        .map(|r| r.path.clone())
        .collect();
    let wait_on = |p: &String| p.rsplit('/').nth(1) == Some("cmd");
    assert!(
        gets.first().is_some_and(|p| p.ends_with("/cmd")) && gets.iter().any(wait_on),
        "the list, then the supervisor's wait: {gets:?}"
    );
    assert!(
        emu.exec_requests() - execs <= 2,
        "{} status execs",
        emu.exec_requests() - execs
    );
    p.release(&s.handle).await.unwrap();
    drop(p);
    sb.close().await.unwrap();
}

/// The stream's kill is awaitable and confirmed (issue 24 item 8): `EventStream::kill` resolves
/// once `POST …/cmd/{id}/kill` was answered, so the command is gone when it returns, without
/// any sleep; and the deadline layer, which awaits that kill, says "killed" only then.
#[tokio::test(flavor = "multi_thread")]
async fn the_kill_is_awaited_and_confirmed() {
    use execseam_layers::ExecExt;
    let (_emu, provider) = setup().await;
    let sb = provider.create(SandboxSpec::new()).await.unwrap();
    let count = |marker: String| {
        let sb = &sb;
        async move {
            let out = sb
                .exec(sh(&format!(
                    "ps -eo args | grep -c '^sleep {marker}$' || true"
                )))
                .await
                .unwrap();
            String::from_utf8_lossy(&out.stdout).trim().to_owned()
        }
    };
    let marker = format!("31.{}", std::process::id());
    let mut stream = sb
        .exec_stream(sh(&format!("echo started; exec sleep {marker}")))
        .await
        .unwrap();
    assert!(
        stream.can_confirm_kill(),
        "the stream has an awaitable kill"
    );
    let first = stream.next().await.unwrap().unwrap();
    assert!(
        matches!(first, execseam_core::Event::Stdout(_)),
        "{first:?}"
    );
    assert!(stream.kill().await.unwrap(), "the kill was confirmed");
    // No sleep: the kill was answered, so the process is gone now.
    assert_eq!(count(marker).await, "0", "the command was killed");

    // Through the deadline layer: the message says "killed" because the kill was answered.
    let marker = format!("32.{}", std::process::id());
    let limited = (&sb).with_deadline(Duration::from_secs(2));
    let e = limited
        .exec(sh(&format!("echo started; exec sleep {marker}")))
        .await
        .unwrap_err();
    assert_eq!(
        e.kind(),
        ErrorKind::Timeout(execseam_core::Deadline::Command),
        "{e}"
    );
    assert!(e.to_string().contains("the command was killed"), "{e}");
    assert_eq!(count(marker).await, "0", "the deadline's kill had happened");
    sb.close().await.unwrap();
}

/// The sandbox's `execve` limit is its own (issue 38, D32): the first command over 64 KiB asks
/// it once (one probe command), so Inspect's 16 x 64 KiB arguments run at the default stack,
/// and a handle on a sandbox whose processes have a 1 MiB stack refuses them before their
/// command request (the code before assumed 8 MiB and sent them).
#[tokio::test(flavor = "multi_thread")]
async fn a_command_is_checked_against_the_sandboxs_probed_arg_max() {
    let (emu, provider) = setup().await;
    let a = provider.create(SandboxSpec::new()).await.unwrap();
    let fresh = || async { provider.connect(a.id()).await.unwrap() };
    execseam_test_util::probe::arg_max_is_probed(&a, fresh, || emu.exec_requests()).await;
    // The detached spawn path (the same `POST …/cmd`): it runs on the default stack, and a
    // fresh handle's first large spawn at a 1 MiB stack asks once and is refused before its
    // request.
    let inspect = execseam_test_util::probe::many_64_kib_args;
    let spawned = a.spawn(inspect(16)).await.unwrap();
    assert_eq!(spawned.wait().await.unwrap(), Exit::Code(0));
    let out = spawned.logs().await.unwrap().collect().await.unwrap();
    assert_eq!(out.stdout.as_ref(), b"16\n", "{out:?}");
    {
        let _stack = execseam_test_util::probe::StackLimit::set(1 << 20);
        let small = provider.connect(a.id()).await.unwrap();
        let before = emu.exec_requests();
        let e = small.spawn(inspect(16)).await.unwrap_err();
        execseam_test_util::probe::too_large(&e, "ARG_MAX");
        assert_eq!(emu.exec_requests(), before + 1, "only the probe");
    }
    a.destroy().await.unwrap();
}
