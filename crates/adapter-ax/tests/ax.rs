//! The adapter against the emulator: AX's own acceptance behaviours (its `internal/guest`
//! client tests, replayed with AX's calling pattern on the generated stubs and through the
//! adapter), resuming after a reset, a stream that ends without the exit, kills, files, routing.

use std::time::{Duration, Instant};

use bytes::Bytes;
use execseam_ax::{AxConfig, AxExec, AxProvider};
use execseam_ax_proto::process_service_client::ProcessServiceClient;
use execseam_ax_proto::{
    GetProcessRequest, ProcessState, Signal, SignalProcessRequest, StartProcessRequest,
    StreamProcessOutputRequest, WriteProcessInputRequest, process_output::Output,
};
use execseam_core::{Command, ErrorKind, Event, Exec, Exit, Retry};
use execseam_emulators::ax::AxEmulator;
use execseam_emulators::{EmulatorOptions, Fault};
use execseam_test_util::exec;
use execseam_test_util::exec::{assert_error, command, sh, stream_of};
use tokio::sync::mpsc;
use tonic::transport::Channel;

async fn emulator() -> AxEmulator {
    AxEmulator::start(EmulatorOptions::default())
        .await
        .expect("the ax emulator starts")
}

fn adapter(emu: &AxEmulator) -> AxExec {
    on(AxConfig::new(), &emu.endpoint())
}

/// A handle on the guest at `address` (no request).
fn on(config: AxConfig, address: &str) -> AxExec {
    AxProvider::new(config).unwrap().attach(address).unwrap()
}

async fn raw(emu: &AxEmulator) -> ProcessServiceClient<Channel> {
    let channel = Channel::from_shared(format!("http://{}", emu.endpoint()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    ProcessServiceClient::new(channel)
}

fn sh_argv(script: &str) -> Vec<String> {
    vec!["sh".into(), "-c".into(), script.into()]
}

/// What AX's `Client.Exec` does (internal/guest/client.go): StartProcess{stdin: given}, a
/// WriteProcessInput goroutine, SignalProcess for forwarded signals, StreamProcessOutput{follow}
/// until the exit message, GetProcess polling every 50 ms if the stream ends without one.
struct AxRun {
    code: i32,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

async fn ax_exec(
    client: &ProcessServiceClient<Channel>,
    command: Vec<String>,
    stdin: Option<mpsc::Receiver<Bytes>>,
    signal_when: Option<(&'static [u8], Signal)>,
) -> AxRun {
    let mut c = client.clone();
    let proc = c
        .start_process(StartProcessRequest {
            command,
            stdin: stdin.is_some(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let id = proc.process_id.clone();
    if let Some(mut rx) = stdin {
        let (mut c, id) = (client.clone(), id.clone());
        tokio::spawn(async move {
            let (tx2, rx2) = mpsc::channel(4);
            let call = tokio::spawn(async move {
                let stream = futures_stream(rx2);
                c.write_process_input(stream).await
            });
            while let Some(data) = rx.recv().await {
                let _ = tx2
                    .send(WriteProcessInputRequest {
                        process_id: id.clone(),
                        data,
                        close: false,
                    })
                    .await;
            }
            let _ = tx2
                .send(WriteProcessInputRequest {
                    process_id: id.clone(),
                    data: Bytes::new(),
                    close: true,
                })
                .await;
            drop(tx2);
            let _ = call.await;
        });
    }
    let mut stream = c
        .stream_process_output(StreamProcessOutputRequest {
            process_id: id.clone(),
            follow: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut run = AxRun {
        code: -1,
        stdout: Vec::new(),
        stderr: Vec::new(),
    };
    let mut signalled = false;
    while let Some(m) = stream.message().await.unwrap() {
        match m.output {
            Some(Output::Exit(p)) => {
                run.code = p.exit_code;
                return run;
            }
            Some(Output::Stdout(b)) => run.stdout.extend_from_slice(&b),
            Some(Output::Stderr(b)) => run.stderr.extend_from_slice(&b),
            None => {}
        }
        if let Some((trigger, sig)) = signal_when
            && !signalled
            && run.stdout.windows(trigger.len()).any(|w| w == trigger)
        {
            signalled = true;
            // Like a user at `ax ssh` pressing ^C until the command stops: dash catches SIGINT
            // under `-c` and may exec its last command (`cat`) with a SIGINT it caught but had
            // not acted on yet, so one signal at that instant can be lost (on any guest).
            let (mut c, id) = (c.clone(), id.clone());
            tokio::spawn(async move {
                loop {
                    let r = c
                        .signal_process(SignalProcessRequest {
                            process_id: id.clone(),
                            signal: sig as i32,
                        })
                        .await;
                    match r {
                        Ok(p) if p.get_ref().state == ProcessState::Running as i32 => {}
                        _ => return, // exited (FAILED_PRECONDITION) or gone
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            });
        }
    }
    // The polling fallback.
    loop {
        let p = c
            .get_process(GetProcessRequest {
                process_id: id.clone(),
            })
            .await
            .unwrap()
            .into_inner();
        if p.state != ProcessState::Running as i32 {
            run.code = p.exit_code;
            return run;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn futures_stream<T: Send + 'static>(
    rx: mpsc::Receiver<T>,
) -> impl futures_core::Stream<Item = T> + Send + 'static {
    struct S<T>(mpsc::Receiver<T>);
    impl<T> futures_core::Stream for S<T> {
        type Item = T;
        fn poll_next(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Option<T>> {
            self.0.poll_recv(cx)
        }
    }
    S(rx)
}

fn input(chunks: &[&'static [u8]]) -> mpsc::Receiver<Bytes> {
    let (tx, rx) = mpsc::channel(chunks.len().max(1));
    for c in chunks {
        tx.try_send(Bytes::from_static(c)).unwrap();
    }
    rx
}

// ---- AX's acceptance behaviours (internal/guest/client_test.go) ----

#[tokio::test(flavor = "multi_thread")]
async fn ax_stdin_is_echoed() {
    let emu = emulator().await;
    let client = raw(&emu).await;
    let run = ax_exec(
        &client,
        vec!["cat".into()],
        Some(input(&[b"hello from stdin\n"])),
        None,
    )
    .await;
    assert_eq!(
        (run.code, run.stdout.as_slice()),
        (0, &b"hello from stdin\n"[..])
    );

    let out = adapter(&emu)
        .exec(
            Command::builder(["cat"])
                .stdin("hello from stdin\n")
                .build()
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(out.stdout.as_ref(), b"hello from stdin\n");
    assert_eq!(out.exit, Exit::Code(0));
}

#[tokio::test(flavor = "multi_thread")]
async fn ax_interactive_line_by_line_echo() {
    let emu = emulator().await;
    let mut c = raw(&emu).await;
    let id = c
        .start_process(StartProcessRequest {
            command: vec!["cat".into()],
            stdin: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .process_id;
    let (tx, rx) = mpsc::channel(4);
    let mut writer = c.clone();
    let call = tokio::spawn(async move { writer.write_process_input(futures_stream(rx)).await });
    let mut out = c
        .stream_process_output(StreamProcessOutputRequest {
            process_id: id.clone(),
            follow: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    for line in ["one\n", "two\n", "three\n"] {
        tx.send(WriteProcessInputRequest {
            process_id: id.clone(),
            data: Bytes::from(line),
            close: false,
        })
        .await
        .unwrap();
        // The echo arrives while the process (and its stdin) is still open.
        let m = tokio::time::timeout(Duration::from_secs(10), out.message())
            .await
            .expect("the echo arrives")
            .unwrap()
            .unwrap();
        assert_eq!(m.output, Some(Output::Stdout(Bytes::from(line))));
    }
    tx.send(WriteProcessInputRequest {
        process_id: id.clone(),
        data: Bytes::new(),
        close: true,
    })
    .await
    .unwrap();
    drop(tx);
    assert_eq!(call.await.unwrap().unwrap().into_inner().bytes_written, 14);
    let m = out.message().await.unwrap().unwrap();
    match m.output {
        Some(Output::Exit(p)) => assert_eq!(p.exit_code, 0),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn ax_exit_code_from_stdin() {
    let emu = emulator().await;
    let client = raw(&emu).await;
    let run = ax_exec(
        &client,
        sh_argv("read code; exit $code"),
        Some(input(&[b"7\n"])),
        None,
    )
    .await;
    assert_eq!(run.code, 7);
    let out = adapter(&emu)
        .exec(
            Command::builder(["sh", "-c", "read code; exit $code"])
                .stdin("7\n")
                .build()
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(out.exit, Exit::Code(7), "a non-zero exit is a result");
}

#[tokio::test(flavor = "multi_thread")]
async fn ax_without_stdin_reads_empty() {
    let emu = emulator().await;
    let client = raw(&emu).await;
    let run = ax_exec(&client, sh_argv("cat; echo done"), None, None).await;
    assert_eq!((run.code, run.stdout.as_slice()), (0, &b"done\n"[..]));
}

#[tokio::test(flavor = "multi_thread")]
async fn ax_sigint_gives_130() {
    let emu = emulator().await;
    let client = raw(&emu).await;
    // stdin stays open (nothing is sent, nothing closes it): cat blocks until the signal.
    let (_keep, rx) = mpsc::channel::<Bytes>(1);
    let run = tokio::time::timeout(
        Duration::from_secs(20),
        ax_exec(
            &client,
            sh_argv("echo ready; cat"),
            Some(rx),
            Some((b"ready\n", Signal::Int)),
        ),
    )
    .await
    .expect("SIGINT ends the process");
    assert_eq!(run.code, 130, "128 + SIGINT");
    assert_eq!(run.stdout, b"ready\n");
}

// ---- resume, end without exit, faults on the output stream ----

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_reset_mid_output_is_resumed_from_the_offsets() {
    let emu = emulator().await;
    emu.faults().arm("stream", Fault::ResetBeforeResponse);
    let before = emu.faults().count("stream");
    let out = adapter(&emu)
        .exec(
            Command::new([
                "sh",
                "-c",
                "printf a; sleep 0.5; printf b >&2; printf c; exit 3",
            ])
            .unwrap(),
        )
        .await
        .expect("the reset is healed by resuming");
    assert_eq!(
        (out.stdout.as_ref(), out.stderr.as_ref(), out.exit),
        (&b"ac"[..], &b"b"[..], Exit::Code(3))
    );
    assert!(
        emu.faults().count("stream") >= before + 2,
        "a second stream resumed the first"
    );
    assert_eq!(
        emu.faults().count("exec"),
        1,
        "the command was started once"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_that_ends_without_the_exit_is_followed_by_polling() {
    let emu = emulator().await;
    emu.faults().arm("stream", Fault::CutBeforeExit);
    let out = adapter(&emu)
        .exec(sh("printf x; sleep 0.4; printf y >&2; exit 5"))
        .await
        .unwrap();
    assert_eq!(
        (out.stdout.as_ref(), out.stderr.as_ref(), out.exit),
        (&b"x"[..], &b"y"[..], Exit::Code(5))
    );
    assert!(emu.faults().count("get") >= 1, "GetProcess was polled");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_transient_unavailable_stream_is_retried() {
    let emu = emulator().await;
    emu.faults().arm("stream", Fault::Unavailable);
    let out = adapter(&emu).exec(sh("printf ok")).await.unwrap();
    assert_eq!((out.stdout.as_ref(), out.exit), (&b"ok"[..], Exit::Code(0)));
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unobservable_process_is_an_error_never_an_exit_code() {
    let emu = emulator().await;
    // Every output stream of the process is cut before its exit: it cannot be observed.
    emu.faults().arm("exec", Fault::CutBeforeExit);
    let err = adapter(&emu)
        .exec(sh("printf partial; exit 1"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Protocol, "{err}");
    assert_eq!(err.retry(), Retry::Unsafe);
    assert!(err.partial().unwrap().stdout.starts_with(b"partial"));
    assert_eq!(emu.faults().count("exec"), 1, "never re-submitted");
}

#[tokio::test(flavor = "multi_thread")]
async fn unavailable_before_the_start_is_safe_after_it_unsafe() {
    let emu = emulator().await;
    emu.faults().arm("exec", Fault::Unavailable);
    let err = adapter(&emu).exec(command(["true"])).await.unwrap_err();
    assert_error(&err, ErrorKind::Unavailable, Retry::SAFE);
    // After the start, UNAVAILABLE on every stream: resumed, then given up, unsafe.
    emu.faults().add("stream=503@always".parse().unwrap());
    let err = adapter(&emu).exec(command(["true"])).await.unwrap_err();
    emu.faults().clear();
    assert_error(&err, ErrorKind::Unavailable, Retry::Unsafe);
}

#[tokio::test(flavor = "multi_thread")]
async fn output_past_the_guest_limit_is_an_output_limit_error() {
    let emu = emulator().await;
    let err = adapter(&emu)
        .exec(sh("head -c 11000000 /dev/zero; exit 0"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OutputLimit, "{err}");
    let partial = err.partial().unwrap();
    assert!(partial.stdout.len() > 10 * 1024 * 1024);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_program_is_127_and_a_missing_workdir_not_found() {
    let emu = emulator().await;
    let ax = adapter(&emu);
    // Under the detaching wrapper the shell looks the program up, as a local shell does.
    let out = ax.exec(command(["execseam-nope"])).await.unwrap();
    assert_eq!(out.exit, Exit::Code(127), "{out:?}");
    assert!(out.stdout.is_empty(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("execseam-nope"),
        "{out:?}"
    );
    // The guest checks the cwd before it starts anything (Go: fork/exec ...: ENOENT).
    let err = exec::in_missing_workdir(&ax, &["true"], "/workspace/nope").await;
    assert_error(&err, ErrorKind::NotFound, Retry::Never);
}

// ---- the detaching wrapper (defect 2 of issue 24) ----

/// A background child holding stdout does not hold the exec: the guest's reaper waits for its
/// output copiers (tracker.go), which the emulator does too, so without the wrapper this takes
/// the child's 30 s.
#[tokio::test(flavor = "multi_thread")]
async fn a_background_child_does_not_hold_the_exit() {
    let emu = emulator().await;
    let ax = adapter(&emu);
    let start = Instant::now();
    let out = tokio::time::timeout(
        Duration::from_secs(10),
        ax.exec(
            Command::new([
                "sh",
                "-c",
                "sleep 30 & echo $! > /workspace/bg.pid; echo started; echo e >&2; exit 4",
            ])
            .unwrap(),
        ),
    )
    .await
    .expect("the exec returns before the child ends")
    .unwrap();
    let took = start.elapsed();
    assert_eq!(
        out,
        execseam_core::Output::new("started\n", "e\n", Exit::Code(4))
    );
    assert!(took < Duration::from_secs(5), "took {took:?}");
    // The child still runs (detached from the exec, not killed), then a kill of it works.
    let alive = ax
        .exec(sh("kill -0 $(cat /workspace/bg.pid) && echo alive"))
        .await
        .unwrap();
    assert_eq!(alive.stdout.as_ref(), b"alive\n", "{alive:?}");
    ax.exec(sh("kill $(cat /workspace/bg.pid)")).await.unwrap();
}

/// The streaming path too: the exit event comes while the child runs.
#[tokio::test(flavor = "multi_thread")]
async fn a_background_child_does_not_hold_the_stream() {
    let emu = emulator().await;
    let ax = adapter(&emu);
    let mut stream = stream_of(&ax, sh("sleep 30 & echo started")).await;
    let mut events = Vec::new();
    let done = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some(e) = stream.next().await {
            events.push(e.unwrap());
        }
    })
    .await;
    assert!(done.is_ok(), "the stream did not end: {events:?}");
    assert_eq!(
        events,
        vec![
            Event::Stdout(Bytes::from_static(b"started\n")),
            Event::Exit(Exit::Code(0))
        ]
    );
}

/// argv goes through the wrapper as given: each string one argument, the program `exec`ed (not a
/// shell builtin of the same name: dash's `echo` would turn `\t` into a tab), the exit status and
/// a large output intact, stdin delivered.
#[tokio::test(flavor = "multi_thread")]
async fn argv_stdin_and_status_are_exact_through_the_wrapper() {
    let emu = emulator().await;
    let ax = adapter(&emu);
    let odd = ["a b", "", "'\"$x`", "*", "a\\tb", "--", "-n"];
    let mut argv = vec!["printf".to_owned(), "[%s]".to_owned()];
    argv.extend(odd.iter().map(|s| (*s).to_owned()));
    let out = ax.exec(Command::new(argv).unwrap()).await.unwrap();
    let want: String = odd.iter().map(|s| format!("[{s}]")).collect();
    assert_eq!(String::from_utf8_lossy(&out.stdout), want);
    let out = ax.exec(command(["echo", "a\\tb"])).await.unwrap();
    assert_eq!(
        out.stdout.as_ref(),
        b"a\\tb\n",
        "the program, not the builtin"
    );
    let out = ax.exec(sh("exit 201")).await.unwrap();
    assert_eq!(out.exit, Exit::Code(201));
    let out = ax.exec(sh("kill -9 $$")).await.unwrap();
    assert_eq!(out.exit, Exit::Code(137), "{out:?}");
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
    let out = exec::cat(&ax, &data).await;
    assert!(out.stdout == data, "{} bytes back", out.stdout.len());
    // The wrapper's variables do not reach the command.
    let out = ax
        .exec(sh("echo \"${d-unset}${o-unset}${s-unset}\""))
        .await
        .unwrap();
    assert_eq!(out.stdout.as_ref(), b"unsetunsetunset\n");
}

/// Without a usable temp directory the command still runs, exactly, without the detachment.
#[tokio::test(flavor = "multi_thread")]
async fn without_a_temp_dir_the_command_runs_unwrapped() {
    let emu = emulator().await;
    let ax = adapter(&emu);
    let out = ax
        .exec(
            Command::builder(["sh", "-c", "printf o; printf e >&2; exit 6"])
                .env("TMPDIR", "/execseam-no-such-dir")
                .build()
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(out, execseam_core::Output::new("o", "e", Exit::Code(6)));
}

#[test]
fn the_wrapper_keeps_argv_and_leaves_dash_programs_alone() {
    use std::collections::BTreeMap;
    let none = BTreeMap::new();
    let argv: Vec<String> = ["ls", "-l", "a b"].map(str::to_owned).to_vec();
    let sent = execseam_ax::detached(&argv, &none);
    assert_eq!(sent[..4], ["/bin/sh", "-c", execseam_ax::DETACH, "sh"]);
    assert_eq!(sent[4..], argv[..]);
    let dash: Vec<String> = vec!["-x".to_owned()];
    assert_eq!(execseam_ax::detached(&dash, &none), dash);
    // Names a shell drops come again through env; identifiers are left to the guest.
    let env = BTreeMap::from([
        ("A-B.c".to_owned(), "v=1".to_owned()),
        ("OK_1".to_owned(), "x".to_owned()),
    ]);
    let sent = execseam_ax::detached(&argv, &env);
    assert_eq!(sent[4..7], ["env", "--", "A-B.c=v=1"]);
    assert_eq!(sent[7..], argv[..]);
    let eq: Vec<String> = vec!["a=b".to_owned()];
    assert_eq!(execseam_ax::detached(&eq, &env), eq);
    assert_eq!(execseam_ax::detached(&eq, &none)[4..], eq[..]);
}

/// Environment names that are not shell identifiers survive the wrapper (a shell drops them).
#[tokio::test(flavor = "multi_thread")]
async fn env_names_a_shell_drops_reach_the_command() {
    let emu = emulator().await;
    let ax = adapter(&emu);
    let out = ax
        .exec(
            Command::builder(["env"])
                .env("EXECSEAM-DASHED.key", "v=1")
                .env("PLAIN", "p")
                .build()
                .unwrap(),
        )
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().any(|l| l == "EXECSEAM-DASHED.key=v=1"),
        "{text}"
    );
    assert!(text.lines().any(|l| l == "PLAIN=p"), "{text}");
}

// ---- sizes (defect 11 of issue 24) ----

/// An oversized command is refused before any I/O: the address is dead, so any request would be
/// `Unavailable`.
#[tokio::test(flavor = "multi_thread")]
async fn an_oversized_command_is_invalid_before_any_request() {
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let a = l.local_addr().unwrap();
        drop(l);
        a
    };
    let ax = on(AxConfig::new(), &dead.to_string());
    let secret = "s3cr3t-argv-".repeat(12_000);
    for cmd in [
        command(["echo", secret.as_str()]),
        Command::new(
            std::iter::once("echo".to_owned())
                .chain((0..20).map(|_| "x".repeat(100_000)))
                .collect::<Vec<_>>(),
        )
        .unwrap(),
        Command::builder(["true"])
            .env("BIG", "v".repeat(200_000))
            .build()
            .unwrap(),
    ] {
        let err = ax.exec(cmd).await.unwrap_err();
        assert_error(&err, ErrorKind::InvalidCommand, Retry::Never);
        assert!(!err.message().contains("s3cr3t"), "{err}");
        assert!(err.message().len() <= 1024, "{err}");
    }
    // Just under the limit is sent (and fails only because nobody listens).
    let err = ax
        .exec(command(["echo", &"y".repeat(100_000)]))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
}

// ---- kill, files, routing ----

#[tokio::test(flavor = "multi_thread")]
async fn dropping_the_stream_kills_the_process_group() {
    let emu = emulator().await;
    let ax = adapter(&emu);
    let mut stream = stream_of(&ax, sh("echo started; sleep 30 & sleep 30; wait")).await;
    let first = stream.next().await.unwrap().unwrap();
    assert_eq!(first, Event::Stdout(Bytes::from_static(b"started\n")));
    assert_eq!(emu.primary().running(), 1);
    drop(stream);
    let until = Instant::now() + Duration::from_secs(10);
    while emu.primary().running() > 0 {
        assert!(Instant::now() < until, "the process survived the drop");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn files_and_commands_share_the_workspace() {
    let emu = emulator().await;
    let ax = adapter(&emu);
    let data = Bytes::from(
        (0..200_000u32)
            .map(|i| (i % 251) as u8)
            .collect::<Vec<u8>>(),
    );
    assert_eq!(
        ax.write_file("/workspace/d/f.bin", data.clone(), 0)
            .await
            .unwrap(),
        200_000
    );
    let out = ax
        .exec(command(["cat", "/workspace/d/f.bin"]))
        .await
        .unwrap();
    assert_eq!(out.stdout, data);
    ax.exec(sh("printf made > /workspace/m.txt")).await.unwrap();
    assert_eq!(
        ax.read_file("/workspace/m.txt").await.unwrap().as_ref(),
        b"made"
    );
    assert_eq!(
        ax.read_file("m.txt").await.unwrap().as_ref(),
        b"made",
        "relative to the root"
    );
    // An empty file is one message with an empty chunk.
    assert_eq!(
        ax.write_file("/workspace/empty", Bytes::new(), 0)
            .await
            .unwrap(),
        0
    );
    assert!(ax.read_file("/workspace/empty").await.unwrap().is_empty());
    let err = ax.read_file("/workspace/none").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);
    let err = ax.read_file("/etc/passwd").await.unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::PermissionDenied,
        "confined to the workspace"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_target_actor_routes_to_its_own_guest() {
    let emu = emulator().await;
    emu.add_guest("team/other").unwrap();
    let a = adapter(&emu);
    let b = on(AxConfig::new().target_actor("team/other"), &emu.endpoint());
    a.exec(sh("printf a > /workspace/who")).await.unwrap();
    b.exec(sh("printf b > /workspace/who")).await.unwrap();
    assert_eq!(a.read_file("/workspace/who").await.unwrap().as_ref(), b"a");
    assert_eq!(b.read_file("/workspace/who").await.unwrap().as_ref(), b"b");
    let gone = on(AxConfig::new().target_actor("team/none"), &emu.endpoint());
    let err = gone.exec(command(["true"])).await.unwrap_err();
    assert_error(&err, ErrorKind::NotFound, Retry::Never);
}

/// A loopback TCP proxy to `target` that counts the connections it accepts.
async fn counting_proxy(
    target: String,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let n = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let target = target.clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(&target).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    (addr, accepted)
}

#[tokio::test(flavor = "multi_thread")]
async fn one_grpc_connection_serves_every_exec_and_file_call_of_a_guest() {
    // AX keeps one grpc.ClientConn per guest (internal/guest/client.go: grpc.NewClient once per
    // Client); the adapter keeps one tonic Channel per guest handle, shared by its clones.
    let emu = emulator().await;
    let (addr, accepted) = counting_proxy(emu.endpoint()).await;
    let exec = on(AxConfig::new(), &addr);
    let clone = exec.clone();
    for i in 0..5 {
        let out = exec.exec(sh(&format!("echo {i}"))).await.unwrap();
        assert_eq!(out.stdout, format!("{i}\n").as_bytes());
    }
    clone.write_file("one.txt", b"x".to_vec(), 0).await.unwrap();
    assert_eq!(&exec.read_file("one.txt").await.unwrap()[..], b"x");
    clone.exec(sh("true")).await.unwrap();
    assert_eq!(
        accepted.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "one TCP connection for seven execs and two file calls"
    );
}

// ---- native process handles (the guest's processes, found by key) ----

/// The handle of `script` started under `key`.
async fn started(
    p: &dyn execseam_core::Processes,
    key: &str,
    script: &str,
) -> execseam_core::ProcessHandle {
    let cmd = sh(script);
    let key = execseam_core::StartKey::new(key).unwrap();
    p.start(execseam_core::StartRequest::new(key, cmd))
        .await
        .unwrap()
        .handle
}

#[tokio::test(flavor = "multi_thread")]
async fn a_process_start_whose_answer_is_lost_is_unsafe_and_never_runs() {
    use execseam_core::{ProcessState as State, StartKey, StartRequest, StreamOffsets, Waited};
    let emu = emulator().await;
    let exec = adapter(&emu);
    let p = exec.processes().expect("native handles");
    let count = format!("/tmp/execseam-ax-lost-{}", std::process::id());
    let once = command(["sh", "-c", "echo x >>\"$1\"", "sh", &count]);
    let key = StartKey::new("lost").unwrap();
    // Call 1 is the registry's `mkdir`; call 2 the command's own StartProcess: its answer is
    // reset after the guest started it. The guest mints the id, so nothing can find it again.
    emu.faults().add("exec=reset@2".parse().unwrap());
    let err = p
        .start(StartRequest::new(key.clone(), once.clone()))
        .await
        .unwrap_err();
    emu.faults().clear();
    assert_eq!(err.retry(), Retry::Unsafe, "{err}");
    let h = p.handle_for(&key);
    assert_eq!(p.status(&h).await.unwrap().state, State::Unknown);
    let err = p.read(&h, StreamOffsets::ZERO).await.unwrap_err();
    assert_error(&err, ErrorKind::Protocol, Retry::Never);
    // The command waits at its gate for an id that is never recorded: it did not run (the
    // gate gives up after 60 s, still without running it). Released, the key starts anew.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let out = exec.exec(command(["cat", &count])).await.unwrap();
    assert_ne!(out.exit, Exit::Code(0), "nothing ran: {out:?}");
    p.release(&h).await.unwrap();
    let s = p.start(StartRequest::new(key, sh("exit 3"))).await.unwrap();
    assert!(s.fresh);
    assert_eq!(
        p.wait(&s.handle, Duration::from_secs(10)).await.unwrap(),
        Waited::Exited(Exit::Code(3))
    );
    p.release(&s.handle).await.unwrap();
    let _ = std::fs::remove_file(&count);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_process_read_stops_at_the_guest_limit_and_past_it_is_an_output_limit() {
    use execseam_core::{ProcessEvent, StreamOffsets};
    let emu = emulator().await;
    let exec = adapter(&emu);
    let p = exec.processes().expect("native handles");
    let limit = 10 * 1024 * 1024;
    let h = started(&*p, "big", "head -c 11000000 /dev/zero").await;
    p.wait(&h, Duration::from_secs(30)).await.unwrap();
    // Up to the limit: bytes (bounded per read), and `written` says there is more.
    let r = p.read(&h, StreamOffsets::new(limit - 5, 0)).await.unwrap();
    assert_eq!(&r.stdout[..], &[0u8; 5]);
    assert!(r.written.stdout > limit, "the guest's marker is counted");
    // From the limit: the guest kept nothing but its marker.
    let err = p.read(&h, r.next()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OutputLimit, "{err}");
    // An attach ends in the same error, never in an exit.
    let mut s = p
        .attach(&h, StreamOffsets::new(limit - 5, 0))
        .await
        .unwrap();
    let mut last = None;
    while let Some(ev) = s.next().await {
        last = Some(ev);
    }
    match last {
        Some(Err(e)) => assert_eq!(e.kind(), ErrorKind::OutputLimit, "{e}"),
        Some(Ok(ProcessEvent::Exit(e))) => panic!("an exit past the limit: {e:?}"),
        other => panic!("{other:?}"),
    }
    p.release(&h).await.unwrap();
}

/// The guest forgets an exited process beyond the 100 most recent (agent-substrate/env
/// `guest/process` as the research note process-handles §2.6 reads it; the emulator's
/// `Limits::max_retained`): its handle is then
/// `Expired` for a read, an attach, a wait and a signal, `Unknown` for status, and it still
/// releases.
#[tokio::test(flavor = "multi_thread")]
async fn a_process_the_guest_forgot_is_expired() {
    use execseam_core::{ProcessState as State, StreamOffsets, Waited};
    let emu = emulator().await;
    let exec = adapter(&emu);
    let p = exec.processes().expect("native handles");
    let h = started(&*p, "forgotten", "echo gone").await;
    assert_eq!(
        p.wait(&h, Duration::from_secs(10)).await.unwrap(),
        Waited::Exited(Exit::Code(0))
    );
    // 101 processes that exit after it: the last one's start prunes it.
    for _ in 0..101 {
        exec.exec(command(["true"])).await.unwrap();
    }
    let expired = |e: execseam_core::Error| assert_eq!(e.kind(), ErrorKind::Expired, "{e}");
    expired(p.read(&h, StreamOffsets::ZERO).await.unwrap_err());
    expired(p.attach(&h, StreamOffsets::ZERO).await.err().unwrap());
    expired(p.wait(&h, Duration::from_secs(1)).await.unwrap_err());
    expired(p.signal(&h, execseam_core::Signal::Term).await.unwrap_err());
    let info = p.status(&h).await.unwrap();
    assert_eq!((info.state, info.stdin), (State::Unknown, None));
    assert_eq!(p.list().await.unwrap().len(), 1, "still registered");
    p.release(&h).await.unwrap();
    assert_eq!(
        p.status(&h).await.unwrap_err().kind(),
        ErrorKind::NotFound,
        "released"
    );
}

/// The guest's `execve` limit is its own (issue 38, D32): asked once for the first command over
/// 64 KiB, so Inspect's 16 x 64 KiB runs at the default stack and is refused before its
/// `StartProcess` where the guest's processes have a 1 MiB stack.
#[tokio::test(flavor = "multi_thread")]
async fn a_command_is_checked_against_the_guests_probed_arg_max() {
    let emu = emulator().await;
    let fresh = || async { adapter(&emu) };
    execseam_test_util::probe::arg_max_is_probed(&adapter(&emu), fresh, || emu.exec_requests())
        .await;
}

/// The guest SIGKILLs a process's group at its `StartProcessRequest.timeout` (the watchdog,
/// 1 h by default: agent-substrate/env `guest/process/tracker.go` `DefaultProcessTimeout`,
/// `time.AfterFunc` → `Kill`) and reports 137 like any kill. The adapter sends its
/// `process_timeout` (1 s here) and tells the watchdog's end by the run time: a handle's wait
/// and attach, and an exec, are `Timeout(Command)`, never exit 137; a KILL before it stays 137.
#[tokio::test(flavor = "multi_thread")]
async fn the_guest_watchdog_is_a_command_timeout_never_an_exit() {
    use execseam_core::{
        Deadline, ProcessEvent, ProcessState as State, Signal, StreamOffsets, Waited,
    };
    let emu = emulator().await;
    let exec = on(
        AxConfig::new().process_timeout(Duration::from_secs(1)),
        &emu.endpoint(),
    );
    let p = exec.processes().expect("native handles");
    let h = started(&*p, "watched", "echo before; exec sleep 30").await;
    let killed = started(&*p, "killed", "exec sleep 30").await;
    p.signal(&killed, Signal::Kill).await.unwrap();
    let timed_out = |e: execseam_core::Error| {
        assert_eq!(
            (e.kind(), e.retry()),
            (ErrorKind::Timeout(Deadline::Command), Retry::Never),
            "{e}"
        );
    };
    let (waited, one_shot) = tokio::join!(
        p.wait(&h, Duration::from_secs(20)),
        exec.exec(command(["sleep", "30"]))
    );
    timed_out(waited.unwrap_err());
    timed_out(one_shot.unwrap_err());
    let mut s = p.attach(&h, StreamOffsets::ZERO).await.unwrap();
    let mut events = Vec::new();
    while let Some(ev) = s.next().await {
        events.push(ev);
    }
    match events.as_slice() {
        [Ok(ProcessEvent::Stdout { at: 0, data }), Err(e)] if &data[..] == b"before\n" => {
            assert_eq!(e.kind(), ErrorKind::Timeout(Deadline::Command), "{e}")
        }
        other => panic!("{other:?}"),
    }
    // What the guest reports, as status and list show it.
    assert_eq!(
        p.status(&h).await.unwrap().state,
        State::Exited(Exit::Code(137))
    );
    assert_eq!(
        p.wait(&killed, Duration::from_secs(10)).await.unwrap(),
        Waited::Exited(Exit::Code(137)),
        "a kill before the watchdog is the kill's exit"
    );
    let zero = AxConfig::new().process_timeout(Duration::ZERO);
    assert_eq!(
        AxProvider::new(zero).unwrap_err().kind(),
        ErrorKind::InvalidConfig
    );
}

/// The guest runs at most 10 processes (`DefaultMaxConcurrentProcesses`; beyond it
/// `RESOURCE_EXHAUSTED "maximum concurrent processes limit (10) reached …"`,
/// agent-substrate/env `guest/process/tracker.go`), and the registry's own execs count: a handle
/// that would be the 10th cannot be recorded. Its command waits at the adapter's gate until its
/// id is recorded, so it is ended before it ran and the start is `RateLimited`, `Retry::Safe`,
/// nothing left under its key. With all 10 slots taken, the client that started the running
/// handles still signals and waits on them (no slot needed); another client cannot find them
/// and says so with the same typed error.
#[tokio::test(flavor = "multi_thread")]
async fn a_handle_beyond_the_guests_process_limit_is_rate_limited_and_never_runs() {
    use execseam_core::{Signal, StartKey, StartRequest, Started, Waited};
    let marker = format!("/tmp/execseam-ax-slots-{}", std::process::id());
    let script = format!("echo ran >>{marker}; exec sleep 30");
    let emu = emulator().await;
    let exec = adapter(&emu);
    let p = exec.processes().expect("native handles");
    // The guest frees a slot just after it reports an exit (its reaper decrements last), so
    // an exec right behind another may find all 10 taken for a moment.
    let start = |key: &str| {
        let (p, key) = (&p, StartKey::new(key).unwrap());
        let cmd = sh(&script);
        async move {
            let mut tries = 0;
            loop {
                match p.start(StartRequest::new(key.clone(), cmd.clone())).await {
                    Err(e) if e.kind() == ErrorKind::RateLimited && tries < 20 => {
                        tries += 1;
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    other => break other,
                }
            }
        }
    };
    let mut running = Vec::new();
    for i in 0..9 {
        let Started { handle, fresh } = start(&format!("slot-{i}")).await.unwrap();
        assert!(fresh);
        running.push(handle);
    }
    let ran = || async {
        let out = exec
            .exec(sh(&format!("cat {marker} | wc -l")))
            .await
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert_eq!(ran().await, "9");
    let tenth = StartRequest::new(StartKey::new("tenth").unwrap(), sh(&script));
    let err = p.start(tenth).await.unwrap_err();
    assert_error(&err, ErrorKind::RateLimited, Retry::SAFE);
    assert!(
        err.to_string().contains("maximum concurrent processes"),
        "{err}"
    );
    assert_eq!(ran().await, "9", "the refused handle's command never ran");
    // The 10th slot taken by a process of the guest's own: every slot is busy.
    let raw = raw(&emu).await;
    let other_id = raw
        .clone()
        .start_process(StartProcessRequest {
            command: vec!["sleep".into(), "30".into()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .process_id;
    let other = adapter(&emu);
    let q = other.processes().unwrap();
    let err = q.signal(&running[0], Signal::Kill).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RateLimited, "another client: {err}");
    p.signal(&running[0], Signal::Kill).await.unwrap();
    // Ended, it is no longer surely the key's (a key is released only once its process ended),
    // so the wait needs the registry, and the slot the kill frees comes just after the exit.
    let mut tries = 0;
    let waited = loop {
        match p.wait(&running[0], Duration::from_secs(10)).await {
            Err(e) if e.kind() == ErrorKind::RateLimited && tries < 20 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => break other.unwrap(),
        }
    };
    assert_eq!(waited, Waited::Exited(Exit::Code(137)));
    raw.clone()
        .signal_process(SignalProcessRequest {
            process_id: other_id,
            signal: execseam_ax_proto::Signal::Kill as i32,
        })
        .await
        .unwrap();
    // Two slots free again: the refused key starts afresh, once.
    let s = start("tenth").await.unwrap();
    assert!(s.fresh, "nothing was left under the refused key");
    running.push(s.handle);
    for h in &running[1..] {
        p.signal(h, Signal::Kill).await.unwrap();
    }
    assert_eq!(ran().await, "10");
    let _ = std::fs::remove_file(&marker);
}

/// `WriteProcessInput` takes no offset, so a write whose answer is lost (the fault `input=reset`:
/// the guest wrote the bytes, the connection reset before its answer) keeps the registry's
/// stdin lock: that write is `Unsafe`, and every later write, the retry included, is `Conflict`
/// saying why; the bytes arrived once. A write the guest refused with an answer (`input=429`)
/// wrote nothing and leaves stdin usable.
#[tokio::test(flavor = "multi_thread")]
async fn a_lost_stdin_answer_locks_stdin_and_a_refused_one_does_not() {
    use execseam_core::{Signal, StartKey, StartRequest, StdinWrite, StreamOffsets};
    let w = |at, data: &'static [u8]| StdinWrite {
        at,
        data: Bytes::from_static(data),
        close: false,
    };
    let emu = emulator().await;
    let exec = adapter(&emu);
    let p = exec.processes().expect("native handles");
    let key = StartKey::new("stdin-lock").unwrap();
    let cmd = command(["cat"]);
    let h = p
        .start(StartRequest::new(key, cmd).open_stdin())
        .await
        .unwrap()
        .handle;
    emu.faults().add("input=429".parse().unwrap());
    let err = p.write_stdin(&h, w(0, b"a")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RateLimited, "{err}");
    let st = p.write_stdin(&h, w(0, b"a")).await.unwrap();
    assert_eq!(
        st.accepted, 1,
        "refused with an answer: nothing written, not locked"
    );
    emu.faults().add("input=reset".parse().unwrap());
    let err = p.write_stdin(&h, w(1, b"b")).await.unwrap_err();
    assert_eq!(err.retry(), Retry::Unsafe, "{err}");
    for at in [1, 2] {
        let err = p.write_stdin(&h, w(at, b"b")).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Conflict, "{err}");
        assert!(err.to_string().contains("answer was lost"), "{err}");
    }
    let mut out = Bytes::new();
    for _ in 0..50 {
        out = p.read(&h, StreamOffsets::ZERO).await.unwrap().stdout;
        if out.len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(&out[..], b"ab", "the lost write's bytes arrived, once");
    p.signal(&h, Signal::Kill).await.unwrap();
}
