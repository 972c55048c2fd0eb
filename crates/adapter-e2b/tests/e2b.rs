//! The adapter against the emulator, beyond the conformance suite: the wire it sends, the four
//! timeouts, the E2B-specific stream faults, stdin paths, files, control-plane routes, and the
//! native listings proven byte-identical to the scripts they replace.

mod common;

use std::time::{Duration, Instant};

use common::{config, emulator};
use execseam_core::{Command, Deadline, ErrorKind, Exec, Exit, Retry, Sandbox, SandboxSpec, Tool};
use execseam_e2b::{ApiRoutes, E2bConfig, E2bExec, E2bProvider};
use execseam_emulators::Fault;
use execseam_emulators::RecordedRequest;
use execseam_emulators::e2b::{E2bEmulator, StreamFault};
use execseam_test_util::exec;
use execseam_test_util::exec::{assert_error, command, sh, stream_of};
use execseam_tools_protocol::native::{GlobRequest, NativeRequest, records};

async fn create(config: E2bConfig) -> Result<E2bExec, execseam_core::Error> {
    E2bProvider::new(config)?.create(SandboxSpec::new()).await
}

async fn connect(config: E2bConfig, id: &str) -> Result<E2bExec, execseam_core::Error> {
    E2bProvider::new(config)?.connect(id).await
}

fn requests(emu: &E2bEmulator, path: &str) -> Vec<RecordedRequest> {
    emu.requests()
        .into_iter()
        .filter(|r| r.path == path)
        .collect()
}

/// Waits until the emulator tracks no process in the sandbox.
async fn no_process_left(emu: &E2bEmulator, id: &str) {
    let until = Instant::now() + Duration::from_secs(10);
    while !emu.processes(id).is_empty() {
        assert!(
            Instant::now() < until,
            "processes still running: {:?}",
            emu.processes(id)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_wire_matches_the_sdk() {
    let emu = emulator().await;
    let exec = create(config(&emu)).await.unwrap();
    let out = exec
        .exec(
            Command::builder(["cat"])
                .stdin("in")
                .env("A", "1")
                .workdir("/tmp")
                .build()
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(&out.stdout[..], b"in");

    let create = &requests(&emu, "/v2/sandboxes")[0];
    assert_eq!(create.method, "POST");
    assert_eq!(create.headers["x-api-key"], "<present>");

    let start = &requests(&emu, "/process.Process/Start")[0];
    let h = &start.headers;
    assert_eq!(h["content-type"], "application/connect+json");
    assert_eq!(h["connect-protocol-version"], "1");
    assert_eq!(h["connect-accept-encoding"], "identity");
    assert_eq!(h["keepalive-ping-interval"], "50");
    assert_eq!(h["e2b-sandbox-id"], exec.id());
    assert_eq!(h["e2b-sandbox-port"], "49983");
    assert_eq!(h["x-access-token"], "<present>");
    assert!(h["user-agent"].starts_with("execseam-e2b/"), "{h:?}");
    assert!(
        !h.contains_key("connect-timeout-ms"),
        "no command deadline unless configured: envd would kill at it"
    );
    assert!(!h.contains_key("authorization"), "envd's default user");

    let input = &requests(&emu, "/process.Process/SendInput")[0];
    assert_eq!(input.headers["content-type"], "application/json");
    assert!(input.headers.contains_key("connect-timeout-ms"));
    assert_eq!(requests(&emu, "/process.Process/CloseStdin").len(), 1);
    // Without stdin nothing is sent after the start.
    let before = emu.requests().len();
    exec.exec(command(["true"])).await.unwrap();
    let after: Vec<_> = emu.requests()[before..]
        .iter()
        .map(|r| r.path.clone())
        .collect();
    assert_eq!(after, ["/process.Process/Start"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_command_deadline_is_timeout_command_with_partial_output_and_kills() {
    let emu = emulator().await;
    // 3 s, not 1: under a loaded CI box the shell's first write once came after 1 s.
    let c = config(&emu).command_timeout(Some(Duration::from_secs(3)));
    let exec = create(c).await.unwrap();
    let started = Instant::now();
    let err = exec
        .exec(sh("echo start; exec sleep 30"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout(Deadline::Command), "{err}");
    assert_eq!(err.retry(), Retry::Unsafe);
    assert_eq!(&err.partial().unwrap().stdout[..], b"start\n");
    assert!(started.elapsed() < Duration::from_secs(10));
    let start = &requests(&emu, "/process.Process/Start")[0];
    assert_eq!(start.headers["connect-timeout-ms"], "3000");
    no_process_left(&emu, exec.id()).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_sandbox_lifetime_running_out_is_told_apart_from_a_killed_sandbox() {
    let emu = emulator().await;
    let c = config(&emu).sandbox_timeout(Duration::from_secs(2));
    let exec = create(c.clone()).await.unwrap();
    let err = exec.exec(sh("printf a; sleep 30")).await.unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::Timeout(Deadline::SandboxLifetime),
        "{err}"
    );
    assert_eq!(err.retry(), Retry::Never);
    assert_eq!(&err.partial().unwrap().stdout[..], b"a");
    // Later calls say the same.
    let err = exec.exec(sh("true")).await.unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::Timeout(Deadline::SandboxLifetime),
        "{err}"
    );

    // Killed well before its lifetime: NotFound, mid-command and after.
    let exec = create(c.sandbox_timeout(Duration::from_secs(600)))
        .await
        .unwrap();
    let id = exec.id().to_owned();
    let running = tokio::spawn({
        let exec = exec.clone();
        async move { exec.exec(sh("printf b; sleep 30")).await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(emu.kill_sandbox(&id));
    let err = running.await.unwrap().unwrap_err();
    assert_error(&err, ErrorKind::NotFound, Retry::Never);
    let err = exec.exec(sh("true")).await.unwrap_err();
    assert_error(&err, ErrorKind::NotFound, Retry::Never);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_in_stream_error_after_the_start_is_unsafe_and_the_process_is_killed() {
    let emu = emulator().await;
    let exec = create(config(&emu)).await.unwrap();
    emu.arm_stream_fault(StreamFault::Error {
        code: "internal",
        message: "error sending data event: broken".into(),
    });
    let err = exec.exec(sh("sleep 30")).await.unwrap_err();
    assert_error(&err, ErrorKind::Internal, Retry::Unsafe);
    assert_eq!(err.code(), Some("internal"));
    no_process_left(&emu, exec.id()).await;

    emu.arm_stream_fault(StreamFault::Error {
        code: "canceled",
        message: "canceled".into(),
    });
    let err = exec.exec(sh("sleep 30")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout(Deadline::Request), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_without_an_end_event_is_a_protocol_error_never_an_exit() {
    let emu = emulator().await;
    let exec = create(config(&emu)).await.unwrap();
    emu.arm_stream_fault(StreamFault::NoEndEvent);
    let err = exec.exec(sh("printf out; exit 4")).await.unwrap_err();
    assert_error(&err, ErrorKind::Protocol, Retry::Unsafe);
    assert_eq!(&err.partial().unwrap().stdout[..], b"out");
}

#[tokio::test(flavor = "multi_thread")]
async fn dropping_a_stream_kills_the_process() {
    let emu = emulator().await;
    let exec = create(config(&emu)).await.unwrap();
    let mut stream = stream_of(&exec, sh("echo up; exec sleep 60")).await;
    let first = stream.next().await.unwrap().unwrap();
    assert_eq!(first, execseam_core::Event::Stdout("up\n".into()));
    assert_eq!(emu.processes(exec.id()).len(), 1);
    drop(stream);
    no_process_left(&emu, exec.id()).await;
    // The tree kill next to it may end the process before the `SendSignal` that follows.
    let until = Instant::now() + Duration::from_secs(10);
    while requests(&emu, "/process.Process/SendSignal").is_empty() {
        assert!(Instant::now() < until, "no SendSignal");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let kill = &requests(&emu, "/process.Process/SendSignal")[0];
    assert_eq!(kill.headers["content-type"], "application/json");
}

#[tokio::test(flavor = "multi_thread")]
async fn stdin_paths_and_a_command_that_does_not_read_it() {
    let emu = emulator().await;
    let exec = create(config(&emu)).await.unwrap();
    let big: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    let out = exec::cat(&exec, &big).await;
    assert_eq!(out.stdout.len(), big.len());
    assert!(out.stdout == big);
    assert_eq!(requests(&emu, "/process.Process/StreamInput").len(), 1);
    // A command that never reads its stdin is still an Ok result (as with a local pipe).
    for script in ["exit 0", "head -c 1"] {
        let out = exec
            .exec(
                Command::builder(["sh", "-c", script])
                    .stdin(big.clone())
                    .build()
                    .unwrap(),
            )
            .await
            .unwrap();
        assert!(out.exit.success(), "{script}: {out:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn files_users_and_the_control_plane() {
    let emu = emulator().await;
    let c = config(&emu).api_routes(ApiRoutes::Legacy);
    let exec = create(c.clone()).await.unwrap();
    assert_eq!(requests(&emu, "/sandboxes").len(), 1, "the legacy route");

    exec.write_file("/home/user/a/b.txt", "hello")
        .await
        .unwrap();
    assert_eq!(
        &exec.read_file("/home/user/a/b.txt").await.unwrap()[..],
        b"hello"
    );
    let out = exec.exec(sh("cat /home/user/a/b.txt")).await.unwrap();
    assert_eq!(&out.stdout[..], b"hello");
    let err = exec.read_file("/home/user/nope").await.unwrap_err();
    assert_error(&err, ErrorKind::NotFound, Retry::Never);
    let entries = exec.list_dir("/home/user", 2).await.unwrap();
    let paths: Vec<_> = entries.iter().map(|e| e.path.as_str()).collect();
    assert!(paths.contains(&"/home/user/a/b.txt"), "{paths:?}");
    let st = exec.stat("/home/user/a/b.txt").await.unwrap();
    assert_eq!(st.size, 5);

    // Connect to the same sandbox by id; run as root.
    let root = c.clone().user("root");
    let again = connect(root, exec.id()).await.unwrap();
    assert_eq!(
        requests(&emu, &format!("/sandboxes/{}/connect", exec.id())).len(),
        1
    );
    let out = again.exec(sh("printf %s \"$HOME\"; id -u")).await.unwrap();
    assert_eq!(&out.stdout[..], b"/root0\n");
    let start = requests(&emu, "/process.Process/Start");
    assert_eq!(start.last().unwrap().headers["authorization"], "<present>");
    let out = exec
        .exec(sh("id -u; stat -c %u /home/user/a/b.txt"))
        .await
        .unwrap();
    assert_eq!(
        &out.stdout[..],
        b"1000\n1000\n",
        "commands and uploads belong to `user`"
    );

    Sandbox::destroy(&again).await.unwrap();
    Sandbox::destroy(&again)
        .await
        .expect("a second destroy finds nothing and is Ok");
    let err = exec.exec(sh("true")).await.unwrap_err();
    assert_error(&err, ErrorKind::NotFound, Retry::Never);

    // Connecting to a sandbox that does not exist.
    let err = connect(c.clone(), "inope").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound);

    // Create faults: the control plane's own answers. A 429 on the create is `Unsafe`: the
    // API's `{"code","message"}` envelope is also what any gateway (and the chaos proxy) can
    // write after forwarding, and nothing in E2B's answer proves the sandbox was not created
    // (issue 38, docs/reliability.md); only the sandbox proxy's templates carry `sandboxId`.
    emu.faults().arm(
        "create",
        Fault::RateLimited {
            retry_after_secs: 2,
        },
    );
    let err = create(c.clone()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::RateLimited);
    assert_eq!(err.retry(), Retry::Unsafe);
    emu.faults().arm("create", Fault::AuthFailure);
    let err = create(c.clone()).await.unwrap_err();
    assert_error(&err, ErrorKind::Unauthenticated, Retry::Never);
    // An empty key or a bad URL never reaches the network.
    let err = E2bProvider::new(E2bConfig::new("")).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    let err = E2bProvider::new(c.api_url("ftp://x")).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
}

/// The script's records, sorted (the library sorts; order is not part of the contract).
fn sorted_records(stdout: &[u8]) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = records(stdout).unwrap().map(<[u8]>::to_vec).collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread")]
async fn native_listings_are_byte_identical_to_the_scripts() {
    let emu = emulator().await;
    let exec = create(config(&emu)).await.unwrap();
    let tree = "set -e; r=/home/user/t; mkdir -p $r/a/b/c $r/empty $r/'sp ace' $r/locked; \
        printf x > $r/top.txt; printf y > $r/a/one.rs; printf z > $r/a/b/two.rs; printf w > $r/a/b/c/three.txt; \
        printf q > \"$r/sp ace/new
line.rs\"; ln -s ../top.txt $r/a/link.txt; ln -s b $r/a/dirlink; mkfifo $r/a/fifo; \
        printf s > $r/locked/secret; chmod 000 $r/locked; ln -s /home/user/t /home/user/tlink; printf f > /home/user/file";
    let out = exec.exec(sh(tree)).await.unwrap();
    assert!(out.exit.success(), "{out:?}");

    let list = |root: &str, depth| NativeRequest::list(root, depth);
    let glob = |start: &str, name: Option<&str>| {
        NativeRequest::Glob(GlobRequest {
            root: "/home/user/t".into(),
            start: start.into(),
            name: name.map(Into::into),
        })
    };
    // (request, served natively?)
    let cases = [
        (list("/home/user/t", Some(1)), true),
        (list("/home/user/t/a", Some(2)), true),
        (list("/home/user/t/a", None), true),
        // `locked` is mode 000: the sandbox user cannot read it, so ListDir's answer (envd runs
        // as root) is not what `find` prints: the script runs. At depth 1 it is not read.
        (list("/home/user/t", Some(2)), false),
        (list("/home/user/t", None), false),
        (list("/home/user/nope", None), true),
        (list("/home/user/file", Some(1)), true),
        (list("/home/user/tlink", Some(1)), false),
        (glob("", Some("*.rs")), false),
        (glob("a", Some("*.rs")), true),
        (glob("a", None), true),
        (glob("a/b", Some("t*")), true),
        (glob("missing", None), true),
        (glob("top.txt", None), true),
    ];
    for (req, native) in cases {
        let cmd = req.command().unwrap();
        let script = cmd.clone().into_builder().tool(Tool::EXEC).build().unwrap();
        let starts_before = requests(&emu, "/process.Process/Start").len();
        let got = exec.exec(cmd).await.unwrap();
        let served_natively = requests(&emu, "/process.Process/Start").len() == starts_before;
        let want = exec.exec(script).await.unwrap();
        assert_eq!(served_natively, native, "{req:?}");
        assert_eq!(got.exit, want.exit, "{req:?}: {got:?} vs {want:?}");
        assert_eq!(got.stderr, want.stderr, "{req:?}");
        if got.exit == Exit::Code(execseam_tools_protocol::native::STATUS) {
            assert_eq!(got.stdout, want.stdout, "{req:?}");
        } else {
            assert_eq!(
                sorted_records(&got.stdout),
                sorted_records(&want.stdout),
                "{req:?}"
            );
        }
    }
    // The native path made ListDir calls.
    assert!(!requests(&emu, "/filesystem.Filesystem/ListDir").is_empty());

    // Turned off: every listing runs its script.
    let c = config(&emu).native_tools(false);
    let plain = create(c).await.unwrap();
    assert!(plain.capabilities().native_tools.is_empty());
    let before = requests(&emu, "/process.Process/Start").len();
    plain
        .exec(list("/home/user", Some(1)).command().unwrap())
        .await
        .unwrap();
    assert_eq!(requests(&emu, "/process.Process/Start").len(), before + 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn keepalives_are_ignored_and_a_quiet_command_completes() {
    let emu = emulator().await;
    let c = config(&emu).keepalive_interval(Duration::from_secs(1));
    let exec = create(c).await.unwrap();
    let out = exec.exec(sh("sleep 2.5; echo done")).await.unwrap();
    assert_eq!(&out.stdout[..], b"done\n");
    assert_eq!(out.exit, Exit::Code(0));
    let start = &requests(&emu, "/process.Process/Start")[0];
    assert_eq!(start.headers["keepalive-ping-interval"], "1");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_lifecycle_maps_to_the_control_plane() {
    use execseam_core::{ListFilter, Provider};
    let emu = emulator().await;
    let count = emu.sandbox_counter();
    let p = E2bProvider::new(config(&emu)).unwrap();
    let spec = SandboxSpec::new()
        .with_image("base")
        .with_label("suite", "a b&c=d")
        .with_env("GREETING", "hi")
        .with_lifetime(Duration::from_secs(120));
    let a = p.create(spec).await.unwrap();
    assert!(a.owned());
    let out = a.exec(sh("printf %s \"$GREETING\"")).await.unwrap();
    assert_eq!(&out.stdout[..], b"hi", "envVars reach every command");
    let create = &requests(&emu, "/v2/sandboxes")[0];
    assert_eq!(create.method, "POST");

    // The filter survives the SDK's triple encoding: a value with `&`, `=` and a space.
    let listed = p
        .list(&ListFilter::new().with_label("suite", "a b&c=d"))
        .await
        .unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, a.id());
    assert_eq!(listed[0].labels["suite"], "a b&c=d");
    assert!(
        p.list(&ListFilter::new().with_label("suite", "other"))
            .await
            .unwrap()
            .is_empty()
    );

    let b = p.connect(a.id()).await.unwrap();
    assert!(!b.owned());
    b.close().await.unwrap();
    assert_eq!(count(), 1, "closing a connected handle leaves the sandbox");
    a.close().await.unwrap();
    assert_eq!(count(), 0);
    let e = a.exec(sh("true")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    Sandbox::destroy(&a).await.unwrap();
    Provider::destroy(&p, a.id()).await.unwrap();
    let e = p
        .create(SandboxSpec::new().with_cpu_millis(2000))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
}

/// envd's `SendSignal` signals the pid only (`handler.go`: `p.cmd.Process.Signal`), but the
/// process leads its own group (`Setpgid`): a deadline, a dropped future and a dropped stream
/// must take the background children and pipeline members too.
#[tokio::test(flavor = "multi_thread")]
async fn kills_reach_background_children_and_pipeline_members() {
    use execseam_layers::ExecExt;
    use execseam_test_util::probe::{gone_within, kill_leftovers, unique_sleep};
    let emu = emulator().await;
    let exec = create(config(&emu)).await.unwrap();
    let family = |token: &str| {
        Command::new([
            "sh",
            "-c",
            "sleep \"$1\" & sleep \"$1\" | cat & echo started; sleep \"$1\"",
            "sh",
            token,
        ])
        .unwrap()
    };
    let wait_started = |token: String| async move {
        let until = Instant::now() + Duration::from_secs(10);
        while execseam_test_util::probe::processes_with_arg(&token).len() < 3 {
            assert!(Instant::now() < until, "the family never started");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };

    // The host deadline: the kill is awaited, and only then called a kill.
    let token = unique_sleep();
    let err = (&exec)
        .with_deadline(Duration::from_secs(2))
        .exec(family(&token))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Timeout(Deadline::Command));
    assert!(err.message().contains("was killed"), "{err}");
    let left = gone_within(&token, Duration::from_millis(500)).await;
    kill_leftovers(&token);
    assert_eq!(left, Ok(()), "survivors of the deadline kill");

    // A dropped future.
    let token = unique_sleep();
    let run = exec.exec(family(&token));
    let started = wait_started(token.clone());
    tokio::select! {
        _ = run => panic!("the family ended"),
        () = started => {}
    }
    let left = gone_within(&token, Duration::from_secs(5)).await;
    kill_leftovers(&token);
    assert_eq!(
        left,
        Ok(()),
        "survivors of a dropped exec: {:?}",
        emu.requests()
            .iter()
            .map(|r| r.path.clone())
            .collect::<Vec<_>>()
    );

    // A dropped stream.
    let token = unique_sleep();
    let stream = stream_of(&exec, family(&token)).await;
    wait_started(token.clone()).await;
    drop(stream);
    let left = gone_within(&token, Duration::from_secs(5)).await;
    kill_leftovers(&token);
    assert_eq!(left, Ok(()), "survivors of a dropped stream");
}

/// A command too large for the sandbox's `execve` is refused before its request, never
/// retried, and its content is not echoed; what the `execve` takes is the sandbox's own (issue
/// 38, D32): asked once (one probe `Start`) for the first command over 64 KiB, so Inspect's 16 x
/// 64 KiB arguments run at the default stack and are refused where the stack is 1 MiB (the
/// code before assumed 8 MiB and sent them).
#[tokio::test(flavor = "multi_thread")]
async fn an_oversized_command_is_refused_before_any_request() {
    let emu = emulator().await;
    let exec = create(config(&emu)).await.unwrap();
    let starts = || requests(&emu, "/process.Process/Start").len();
    let before = starts();
    let inspect = execseam_test_util::probe::many_64_kib_args;
    let out = exec.exec(inspect(16)).await.unwrap();
    assert_eq!(out.stdout.as_ref(), b"16\n", "{out:?}");
    assert_eq!(starts(), before + 2, "one probe, then the command");
    let big = "secret-".repeat(10 << 20 >> 3);
    for cmd in [
        command(["echo", big.as_str()]),
        Command::builder(["true"])
            .env("A", "x".repeat(200 << 10))
            .build()
            .unwrap(),
        // Over the kernel's most (6 MiB, whatever the stack), in strings it takes.
        Command::new(vec!["x".repeat(120 << 10); 60]).unwrap(),
    ] {
        for err in [
            exec.exec(cmd.clone()).await.unwrap_err(),
            exec.streaming()
                .unwrap()
                .exec_stream(cmd)
                .await
                .unwrap_err(),
        ] {
            assert_error(&err, ErrorKind::InvalidCommand, Retry::Never);
            assert!(err.to_string().len() < 400, "{err}");
            assert!(!err.to_string().contains("secret"), "{err}");
        }
    }
    assert_eq!(starts(), before + 2);
    // An env name that is not a shell name moves argv into one wrapper script (`deliverable`):
    // checked as sent, before any request (the code before sent it; envd failed to start it).
    let odd = |n| {
        let cmd = inspect(n).into_builder().env("odd-name", "x");
        cmd.build().unwrap()
    };
    let e = exec.exec(odd(16)).await.unwrap_err();
    execseam_test_util::probe::too_large(&e, "after wrapping");
    assert_eq!(starts(), before + 2, "refused before its request");
    let out = exec.exec(odd(1)).await.unwrap();
    assert_eq!(out.stdout.as_ref(), b"1\n", "{out:?}");
    // A sandbox whose processes have a 1 MiB stack (ARG_MAX 256 KiB): both sides of its limit.
    let small = {
        let _stack = execseam_test_util::probe::StackLimit::set(1 << 20);
        let small = create(config(&emu)).await.unwrap();
        let before = starts();
        let e = small.exec(inspect(16)).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidCommand, "{e}");
        assert!(e.message().contains("ARG_MAX"), "{e}");
        assert_eq!(starts(), before + 1, "only the probe");
        let out = small.exec(inspect(2)).await.unwrap();
        assert_eq!(out.stdout.as_ref(), b"2\n", "{out:?}");
        small
    };
    small.close().await.unwrap();
}
