//! The adapter against the Daytona emulator, beyond the conformance suite, with execs through
//! sessions ([`ExecRoute::Session`]; `tests/execute.rs` has the default route): the files API, the
//! session pool (a free session reused: one request per exec; nothing of a command stays in the
//! session's shell; a session whose command did not end cleanly is deleted, never reused; the
//! pool's sessions deleted at close), a session that ends mid-command, streaming that really
//! streams, errors at connect, terminals on PTY sessions, and signed preview URLs.

use std::time::{Duration, Instant};

use execseam_core::{
    Command, ErrorKind, Event, Exec, Exit, Provider, Retry, Sandbox, SandboxSpec, WireStatus,
};
use execseam_daytona::{DaytonaConfig, DaytonaExec, DaytonaProvider, ExecRoute, TerminalMode};
use execseam_emulators::daytona::DaytonaEmulator;
use execseam_emulators::{EmulatorOptions, Fault};
use execseam_test_util::exec;
use execseam_test_util::exec::{alive_or_gone, command, sh, stream_of, until_gone};

async fn setup() -> (DaytonaEmulator, DaytonaExec) {
    let emu = DaytonaEmulator::start(EmulatorOptions::default())
        .await
        .unwrap();
    let exec = create(config(&emu)).await.unwrap();
    (emu, exec)
}

async fn create(config: DaytonaConfig) -> Result<DaytonaExec, execseam_core::Error> {
    DaytonaProvider::new(config)?
        .create(SandboxSpec::new())
        .await
}

fn config(emu: &DaytonaEmulator) -> DaytonaConfig {
    DaytonaConfig::new(emu.token().to_owned())
        .api_url(emu.api_url())
        .exec_route(ExecRoute::Session)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_files_api_round_trips_and_shares_the_filesystem_with_commands() {
    let (emu, exec) = setup().await;
    let dir = emu.visible_path(exec.id(), "/tmp/files").unwrap();
    let data: Vec<u8> = (0..=255u8)
        .chain(b"\nhello world\n".iter().copied())
        .collect();
    exec.upload_file(&format!("{dir}/a.bin"), &data)
        .await
        .unwrap();
    exec.upload_file(&format!("{dir}/sub/b.txt"), b"one\nhello two\n")
        .await
        .unwrap();
    assert_eq!(
        exec.download_file(&format!("{dir}/a.bin")).await.unwrap(),
        data
    );
    let out = exec
        .exec(command(["cat", &format!("{dir}/sub/b.txt")]))
        .await
        .unwrap();
    assert_eq!(out.stdout.as_ref(), b"one\nhello two\n");

    let names: Vec<_> = exec
        .list_files(&dir)
        .await
        .unwrap()
        .into_iter()
        .map(|f| (f.name, f.is_dir))
        .collect();
    assert_eq!(names, [("a.bin".into(), false), ("sub".into(), true)]);
    let info = exec.file_info(&format!("{dir}/a.bin")).await.unwrap();
    assert_eq!(info.size, data.len() as u64);

    // find: literal, and the binary file is skipped by the daemon.
    let hits = exec.find_in_files(&dir, "hello").await.unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert_eq!(
        (
            hits[0].file.as_str(),
            hits[0].line,
            hits[0].content.as_str()
        ),
        (format!("{dir}/sub/b.txt").as_str(), 2, "hello two")
    );
    let mut found = exec.search_files(&dir, "*.txt").await.unwrap();
    found.sort();
    assert_eq!(found, [format!("{dir}/sub/b.txt")]);

    let err = exec
        .download_file(&format!("{dir}/missing"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    assert_eq!(err.code(), Some("FILE_NOT_FOUND"));
    exec.delete_file(&dir, true).await.unwrap();
    let err = exec.list_files(&dir).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");

    // Signed previews (`DaytonaConfig::signed_previews`): `expose` answers the signed URL, no
    // header, with its expiry; the capability says the token is in the URL; a fetch with no
    // header reaches the sandbox's server through the emulator's preview proxy.
    let bad = DaytonaProvider::new(config(&emu).signed_previews(Duration::from_secs(86_401)));
    assert_eq!(bad.unwrap_err().kind(), ErrorKind::InvalidConfig);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    exec.exec(sh(&format!(
        "mkdir -p {dir} && printf signed > {dir}/index.html && cd {dir} && \
         (python3 -m http.server {port} >/dev/null 2>&1 </dev/null &)"
    )))
    .await
    .unwrap();
    let p = DaytonaProvider::new(config(&emu).signed_previews(Duration::from_secs(600))).unwrap();
    let auth = p.lifecycle().state.expose.map(|e| e.auth);
    assert_eq!(auth, Some(execseam_core::PortAuth::InUrl));
    let e = p.expose(exec.id(), port).await.unwrap();
    assert!(e.headers.is_empty() && e.expires.is_some(), "{e:?}");
    // `{port}-{token}.proxy.localhost:<emulator port>`; glibc does not resolve *.localhost.
    let host = e.url.split("//").nth(1).unwrap().trim_end_matches('/');
    let at = format!("http://127.0.0.1:{}/", host.rsplit(':').next().unwrap());
    let mut last = None;
    for _ in 0..100 {
        let r = reqwest::Client::new()
            .get(&at)
            .header(reqwest::header::HOST, host)
            .send()
            .await
            .unwrap();
        last = Some(r.status().as_u16());
        if last == Some(200) {
            assert_eq!(r.text().await.unwrap(), "signed");
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(last, Some(200), "{}", e.url);
    exec.exec(sh(&format!(
        "pkill -f 'http[.]server {port}'; rm -rf {dir}"
    )))
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn sequential_execs_reuse_one_session_and_stdin_files_are_removed() {
    let (emu, exec) = setup().await;
    let id = exec.id().to_owned();
    for i in 0..3 {
        let c = Command::builder(["cat"])
            .stdin(format!("input {i}\0"))
            .build()
            .unwrap();
        let o = exec.exec(c).await.unwrap();
        assert_eq!(o.stdout, format!("input {i}\0"));
    }
    let s = exec.exec_stream_helper(sh("printf x")).await;
    assert_eq!(s, b"x");
    assert_eq!(emu.session_count(&id), 1, "one session, reused");
    let o = exec
        .exec(sh("ls -A /tmp | grep -c '^\\.execseam-' || true"))
        .await
        .unwrap();
    assert_eq!(o.stdout.as_ref(), b"0\n", "stdin temp files are removed");
    exec.close_sessions().await;
    assert_eq!(
        emu.session_count(&id),
        0,
        "close_sessions deletes the pool's sessions"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_warm_exec_is_one_request_and_without_the_pool_three() {
    let emu = DaytonaEmulator::start(EmulatorOptions::default())
        .await
        .unwrap();
    let pooled = create(config(&emu)).await.unwrap();
    let single = create(config(&emu).session_pool(0)).await.unwrap();
    let count = |exec: DaytonaExec, cmd: Command| {
        let emu = &emu;
        async move {
            let before = emu.toolbox_requests();
            let o = exec.exec(cmd).await.unwrap();
            assert!(o.exit.success(), "{o:?}");
            emu.toolbox_requests() - before
        }
    };
    // The first exec creates the session; then each is the synchronous session exec alone.
    assert_eq!(count(pooled.clone(), sh("true")).await, 2);
    for _ in 0..3 {
        assert_eq!(count(pooled.clone(), sh("true")).await, 1);
    }
    let with_stdin = Command::builder(["cat"]).stdin("x").build().unwrap();
    assert_eq!(
        count(pooled.clone(), with_stdin.clone()).await,
        2,
        "upload + exec"
    );
    assert_eq!(
        count(single.clone(), sh("true")).await,
        3,
        "create + exec + delete"
    );
    assert_eq!(count(single.clone(), with_stdin).await, 4);
    assert_eq!(emu.session_count(single.id()), 0);
    pooled.close().await.unwrap();
    single.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn nothing_of_a_command_stays_in_a_reused_session() {
    let (emu, exec) = setup().await;
    let home = "/home/daytona";
    // A command that changes everything a shell has: cwd, variables (exported or not),
    // options, traps, functions, aliases, umask.
    let o = exec
        .exec(sh(
            "cd /tmp && export LEAK=1 && plain=2 && set -e -u && trap 'echo trapped' EXIT \
              && f() { :; } && alias ll=ls && umask 077 && echo changed",
        ))
        .await
        .unwrap();
    assert_eq!(o.stdout.as_ref(), b"changed\ntrapped\n");
    let with = Command::builder(["sh", "-c", "pwd; echo \"${PER_EXEC-unset}\""])
        .workdir("/tmp")
        .env("PER_EXEC", "yes")
        .build()
        .unwrap();
    let o = exec.exec(with).await.unwrap();
    assert_eq!(o.stdout.as_ref(), b"/tmp\nyes\n");
    // The same session (the pool holds one), none of it left: the default cwd, no variables,
    // no per-exec env, the default umask.
    let probe = "pwd; echo \"${LEAK-unset} ${plain-unset} ${PER_EXEC-unset}\"; umask; \
                 command -v f || echo no-f; trap";
    let o = exec.exec(sh(probe)).await.unwrap();
    let pwd = emu.visible_path(exec.id(), home).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        format!("{pwd}\nunset unset unset\n0022\nno-f\n"),
        "stderr {:?}",
        o.stderr
    );
    assert_eq!(emu.session_count(exec.id()), 1, "the session was reused");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_background_child_outlives_its_exec_until_the_sandbox_handle_closes() {
    let emu = DaytonaEmulator::start(EmulatorOptions::default())
        .await
        .unwrap();
    let provider = DaytonaProvider::new(config(&emu)).unwrap();
    let owner = provider.create(SandboxSpec::new()).await.unwrap();
    let exec = provider.connect(owner.id()).await.unwrap();
    let pidfile = emu.visible_path(exec.id(), "/tmp/bg.pid").unwrap();
    let alive = exec::leave_a_background_child(&exec, &pidfile).await;
    let o = owner.exec(sh(&alive)).await.unwrap();
    assert_eq!(o.stdout.as_ref(), b"alive\n", "the child keeps running");
    // Closing the connected handle deletes its pool's sessions (not the sandbox): the child
    // ends with its session, as the daemon's session delete terminates the process tree.
    exec.close().await.unwrap();
    until_gone(
        &owner,
        &alive,
        Duration::from_secs(15),
        "the child outlived its session",
    )
    .await;
    owner.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_execs_get_sessions_of_their_own_and_the_pool_keeps_a_few() {
    let emu = DaytonaEmulator::start(EmulatorOptions::default())
        .await
        .unwrap();
    let exec = create(config(&emu).session_pool(2)).await.unwrap();
    let runs = (0..4).map(|i| {
        let exec = exec.clone();
        async move { exec.exec(sh(&format!("sleep 1; echo {i}"))).await.unwrap() }
    });
    let outs = futures_util::future::join_all(runs).await;
    for (i, o) in outs.iter().enumerate() {
        assert_eq!(o.stdout, format!("{i}\n"));
    }
    assert_eq!(
        emu.session_count(exec.id()),
        2,
        "two kept, the other two deleted"
    );
    exec.close().await.unwrap();
    assert!(emu.sandbox_ids().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pooled_session_deleted_behind_our_back_is_replaced_without_running_twice() {
    let (emu, exec) = setup().await;
    let marker = emu.visible_path(exec.id(), "/tmp/runs").unwrap();
    exec.exec(sh("true")).await.unwrap();
    // Someone deletes the pooled session (the SDK's delete_session, say).
    let base = format!("{}/{}", emu.toolbox_proxy_url(), exec.id());
    let http = reqwest::Client::new();
    let auth = format!("Bearer {}", emu.token());
    let sessions: serde_json::Value = http
        .get(format!("{base}/process/session"))
        .header("Authorization", &auth)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let sid = sessions[0]["sessionId"].as_str().unwrap().to_owned();
    let r = http
        .delete(format!("{base}/process/session/{sid}"))
        .header("Authorization", &auth)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let o = exec
        .exec(sh(&format!("echo ran >> {marker}; cat {marker}")))
        .await
        .unwrap();
    assert_eq!(o.stdout.as_ref(), b"ran\n", "ran once, in a fresh session");
    assert_eq!(emu.session_count(exec.id()), 1);
}

trait StreamHelper {
    async fn exec_stream_helper(&self, c: Command) -> Vec<u8>;
}

impl StreamHelper for DaytonaExec {
    async fn exec_stream_helper(&self, c: Command) -> Vec<u8> {
        let s = stream_of(&self, c).await;
        s.collect().await.unwrap().stdout.to_vec()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn dropping_an_exec_deletes_its_session_and_kills_the_command() {
    let (emu, exec) = setup().await;
    let id = exec.id().to_owned();
    // A pooled session: the dropped exec runs in it, and it must not be reused afterwards.
    exec.exec(sh("true")).await.unwrap();
    assert_eq!(emu.session_count(&id), 1);
    let pidfile = emu.visible_path(&id, "/tmp/drop.pid").unwrap();
    let script = format!("echo $$ > {pidfile}; exec sleep 60");
    let r = tokio::time::timeout(Duration::from_secs(2), exec.exec(sh(&script))).await;
    assert!(r.is_err(), "the command was still running");
    let until = Instant::now() + Duration::from_secs(10);
    while emu.session_count(&id) > 0 {
        assert!(Instant::now() < until, "the session was not deleted");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let kept = "the command outlived its session";
    let within = Duration::from_secs(15);
    until_gone(&exec, &alive_or_gone(&pidfile), within, kept).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_session_that_ends_mid_command_is_an_unsafe_error_not_a_result() {
    let (emu, exec) = setup().await;
    emu.end_next_session_mid_command();
    let err = exec
        .exec(sh("printf started; sleep 5; printf done"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert_eq!(err.retry(), Retry::Unsafe);
    assert_eq!(err.status(), Some(WireStatus::Http(410)));
    assert_eq!(err.code(), Some("SESSION_ENDED"));

    // Streaming: the log stream closes normally but without the trailers.
    emu.end_next_session_mid_command();
    let stream = tokio::time::timeout(
        Duration::from_secs(20),
        exec.streaming()
            .unwrap()
            .exec_stream(sh("printf started; sleep 5; printf done")),
    )
    .await
    .expect("exec_stream answers")
    .unwrap();
    let err = tokio::time::timeout(Duration::from_secs(20), stream.collect())
        .await
        .expect("the stream ends")
        .unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::Protocol | ErrorKind::Unavailable),
        "{err}"
    );
    assert_eq!(err.retry(), Retry::Unsafe);
}

#[tokio::test(flavor = "multi_thread")]
async fn streaming_delivers_output_before_the_command_ends() {
    let (_emu, exec) = setup().await;
    let started = Instant::now();
    let mut s = stream_of(
        &exec,
        sh("printf first; sleep 3; printf second >&2; exit 4"),
    )
    .await;
    let first = s.next().await.unwrap().unwrap();
    assert_eq!(first, Event::Stdout("first".into()));
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "the first chunk came only after {:?}",
        started.elapsed()
    );
    let mut rest = Vec::new();
    while let Some(ev) = s.next().await {
        rest.push(ev.unwrap());
    }
    assert_eq!(
        rest,
        [Event::Stderr("second".into()), Event::Exit(Exit::Code(4))]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cut_log_stream_is_an_error() {
    let (emu, exec) = setup().await;
    emu.faults().arm("exec", Fault::CutBeforeExit);
    let stream = stream_of(&exec, sh("printf before; sleep 1; printf after")).await;
    let err = stream.collect().await.unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::Protocol | ErrorKind::Unavailable),
        "{err}"
    );
    assert_eq!(err.retry(), Retry::Unsafe);
}

#[tokio::test(flavor = "multi_thread")]
async fn connect_errors_are_typed_and_a_deleted_sandbox_is_not_found() {
    let emu = DaytonaEmulator::start(EmulatorOptions {
        token: Some("right".into()),
        ..Default::default()
    })
    .await
    .unwrap();
    let err = create(DaytonaConfig::new("wrong").api_url(emu.api_url()))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unauthenticated, "{err}");
    assert_eq!(err.retry(), Retry::Never);

    let right = DaytonaProvider::new(DaytonaConfig::new("right").api_url(emu.api_url())).unwrap();
    let err = right.connect("no-such-sandbox").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");

    let exec = right.create(SandboxSpec::new()).await.unwrap();
    // Connecting by id works too.
    let again = right.connect(exec.id()).await.unwrap();
    let o = again.exec(sh("printf same")).await.unwrap();
    assert_eq!(o.stdout.as_ref(), b"same");
    Sandbox::destroy(&exec).await.unwrap();
    let err = again.exec(sh("true")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
    assert_eq!(err.code(), Some("SANDBOX_NOT_FOUND"));
    assert!(emu.sandbox_ids().is_empty());
}

/// Terminals on the daemon's PTY sessions (`src/terminal.rs`, `TerminalMode::Attached`; the
/// default recorder is the conformance suite's), beyond the conformance cases:
/// nothing of the session's shell (prompt, the typed line's echo) reaches the output; env values
/// never reach the session's listed `envs`; Ctrl-C to a command under a shell that waits for it
/// gives that shell's status; a handle dropped while its command runs deletes the session.
#[tokio::test(flavor = "multi_thread")]
async fn a_terminal_is_the_commands_alone_and_ends_with_its_handle() {
    use execseam_core::{StartKey, StartRequest, StdinWrite, StreamOffsets, TerminalSize, Waited};
    let emu = DaytonaEmulator::start(EmulatorOptions::default())
        .await
        .unwrap();
    let exec = create(config(&emu).terminal(TerminalMode::Attached))
        .await
        .unwrap();
    let caps = exec.capabilities().processes.unwrap();
    assert!(caps.terminal && !caps.terminal_reattach, "{caps:?}");
    let p = exec.processes().unwrap();
    let size = TerminalSize { cols: 90, rows: 30 };
    let cmd = Command::builder([
        "sh",
        "-c",
        "echo \"v=$SECRET_V $(stty size)\"; sleep 100; echo after $?",
    ])
    .env("SECRET_V", "s3cr3t")
    .build()
    .unwrap();
    let h = p
        .start(StartRequest::new(StartKey::new("t1").unwrap(), cmd).terminal(size))
        .await
        .unwrap()
        .handle;
    let mut text = String::new();
    for _ in 0..200 {
        let r = p.read(&h, StreamOffsets::ZERO).await.unwrap();
        text = String::from_utf8_lossy(&r.stdout).into_owned();
        if text.contains("30 90") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert_eq!(text, "v=s3cr3t 30 90\r\n", "the command's terminal alone");
    let listed = exec.exec(sh("ls -a /tmp")).await.unwrap();
    assert!(
        !String::from_utf8_lossy(&listed.stdout).contains(".execseam-"),
        "the script and env files are removed: {listed:?}"
    );
    let id = exec.id().to_owned();
    let sessions = ptys(&emu, &id).await;
    assert!(
        sessions.contains("\"cols\":90") && !sessions.contains("s3cr3t"),
        "{sessions}"
    );
    let w = StdinWrite {
        at: 0,
        data: bytes::Bytes::from_static(b"\x03"),
        close: false,
    };
    p.write_stdin(&h, w).await.unwrap();
    let exit = match p.wait(&h, Duration::from_secs(10)).await.unwrap() {
        Waited::Exited(e) => e,
        other => panic!("{other:?}"),
    };
    // `sh -c` dies of the SIGINT with its `sleep`: the job's shell reports 130.
    assert_eq!(exit, Exit::Code(130));

    let h2 = p
        .start(
            StartRequest::new(StartKey::new("t2").unwrap(), sh("echo up; exec sleep 100"))
                .terminal(size),
        )
        .await
        .unwrap()
        .handle;
    for _ in 0..200 {
        let r = p.read(&h2, StreamOffsets::ZERO).await.unwrap();
        if r.stdout.starts_with(b"up") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(ptys(&emu, &id).await.contains("\"active\":true"));
    drop(p);
    drop(exec);
    let mut left = String::new();
    for _ in 0..200 {
        left = ptys(&emu, &id).await;
        if !left.contains("\"active\":true") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(
        !left.contains("\"active\":true"),
        "the session outlived its handle: {left}"
    );
}

/// The sandbox's PTY sessions as the toolbox lists them (`GET /process/pty`).
async fn ptys(emu: &DaytonaEmulator, id: &str) -> String {
    reqwest::Client::new()
        .get(format!("{}/{id}/process/pty", emu.toolbox_proxy_url()))
        .bearer_auth(emu.token())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Handles are hybrid: the spool's supervisor is the one async command of a session named from
/// the key (`POST /process/session {"sessionId":"execseam-h-<key>"}`, then `…/exec` with
/// `runAsync`), and a wait follows that command's log to its end (`…/logs?follow=true`: the
/// daemon closes it once the exit code exists, `pkg/session/log.go`) instead of polling the
/// spool: one status exec before it and one after, where polls every 20..500 ms over 0.6 s
/// would run about five. Release deletes the session; the key then starts again in a new one.
#[tokio::test(flavor = "multi_thread")]
async fn a_handles_supervisor_is_a_session_command_and_its_wait_follows_it() {
    use execseam_core::{StartKey, StartRequest, Waited};
    let (emu, exec) = setup().await;
    let p = exec.processes().expect("handles");
    let key = StartKey::new("hybrid").unwrap();
    let run = || StartRequest::new(key.clone(), sh("sleep 0.6; exit 3"));
    let s = p.start(run()).await.unwrap();
    assert!(s.fresh);
    let session = "/process/session/execseam-h-hybrid";
    let posts = |from: usize| -> Vec<String> {
        emu.requests()[from..]
            .iter()
            .filter(|r| r.method == "POST")
            .map(|r| r.path.clone())
            .collect()
    };
    assert!(
        posts(0)
            .iter()
            .any(|p| p.ends_with(&format!("{session}/exec"))),
        "the supervisor is the session's command: {:?}",
        posts(0)
    );
    assert!(
        !p.start(run()).await.unwrap().fresh,
        "a retried start runs nothing"
    );
    let before = emu.requests().len();
    let waited = p.wait(&s.handle, Duration::from_secs(20)).await.unwrap();
    assert_eq!(waited, Waited::Exited(Exit::Code(3)));
    let after = &emu.requests()[before..];
    assert!(
        after
            .iter()
            .any(|r| r.path.contains(session) && r.path.contains("/logs")),
        "the wait follows the supervisor's log: {after:?}"
    );
    let execs = posts(before).len();
    assert!(execs <= 2, "{execs} status execs");
    let sessions = emu.session_count(exec.id());
    p.release(&s.handle).await.unwrap();
    assert_eq!(
        emu.session_count(exec.id()),
        sessions - 1,
        "the session is deleted"
    );
    let again = p.start(run()).await.unwrap();
    assert!(again.fresh);
    assert_eq!(
        p.wait(&again.handle, Duration::from_secs(20))
            .await
            .unwrap(),
        Waited::Exited(Exit::Code(3))
    );
    p.release(&again.handle).await.unwrap();
}
