//! The adapter against a real engine (`DOCKER_HOST`, `EXECSEAM_DOCKER_IMAGE`; `.ci/podman start`
//! provides both, `.ci/run` starts it). Without an engine every test fails, saying so.
//!
//! The traps: exit codes the compat layer loses, exit codes that collide with the engine's own
//! (125/126/127), signal exits without an init, kills that leave processes behind, per-call
//! containers that outlive their exec, and the engine failing under a running exec.

mod support;

use std::time::{Duration, Instant};

use bollard::Docker;
use bollard::query_parameters::{KillContainerOptions, StopContainerOptions};
use execseam_core::layer::ExecExt;
use execseam_core::{Command, Deadline, ErrorKind, Event, Exec, Exit, Retry};
use execseam_docker::{DockerConfig, DockerExec, Mode};
use support::{Destroy, config, require_engine};

fn sh(script: &str) -> Command {
    Command::new(["sh", "-c", script]).expect("valid")
}

async fn warm(suite: &str) -> (DockerExec, Destroy) {
    let c = config(suite);
    require_engine(&c).await;
    support::sweep(&c).await;
    let exec = DockerExec::create(c.clone())
        .await
        .unwrap_or_else(|e| panic!("creating a warm container: {e}"));
    let id = exec.container_id().expect("warm").to_owned();
    (exec, Destroy(c, id))
}

async fn per_call(suite: &str) -> (DockerExec, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a temp dir");
    let c = config(suite).worktree(dir.path().to_string_lossy());
    require_engine(&c).await;
    support::sweep(&c.clone().mode(Mode::PerCall)).await;
    (DockerExec::per_call(c).expect("per-call adapter"), dir)
}

/// The containers of `suite` in `mode`, running or not.
async fn containers(suite: &str, mode: Mode) -> Vec<String> {
    DockerExec::list(&config(suite).mode(mode))
        .await
        .expect("listing containers")
        .into_iter()
        .map(|c| c.id)
        .collect()
}

async fn no_containers_within(suite: &str, limit: Duration) {
    let until = Instant::now() + limit;
    loop {
        let left = containers(suite, Mode::PerCall).await;
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < until,
            "per-call containers still there after {limit:?}: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn engine() -> Docker {
    Docker::connect_with_defaults().expect("DOCKER_HOST")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_3_stays_3_through_the_compat_api_in_both_modes() {
    let (w, _g) = warm("exit-3").await;
    let (p, _d) = per_call("exit-3").await;
    for exec in [&w, &p] {
        let o = exec
            .exec(sh("printf out; printf err >&2; exit 3"))
            .await
            .unwrap();
        assert_eq!(o.exit, Exit::Code(3), "{:?}", exec.config().current_mode());
        assert_eq!((&o.stdout[..], &o.stderr[..]), (&b"out"[..], &b"err"[..]));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exits_125_126_127_are_results_and_engine_failures_are_errors() {
    let (w, _g) = warm("collisions").await;
    let (p, _d) = per_call("collisions").await;
    for exec in [&w, &p] {
        for code in [125, 126, 127] {
            let o = exec.exec(sh(&format!("exit {code}"))).await.unwrap();
            assert_eq!(o.exit, Exit::Code(code));
        }
        // A missing program is the shell's 127, with the runtime's message.
        let o = exec
            .exec(Command::new(["execseam-no-such-program"]).unwrap())
            .await
            .unwrap();
        assert_eq!(o.exit, Exit::Code(127));
        assert!(!o.stderr.is_empty());
    }
    // The engine's own failures are typed errors, never 125.
    let missing = DockerConfig::new("localhost/execseam-no-such-image:0")
        .label(support::TEST_LABEL, "collisions");
    let e = DockerExec::per_call(missing.clone())
        .unwrap()
        .exec(sh("true"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    assert!(e.message().contains("image"), "{e}");
    let e = DockerExec::create(missing).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    let e = DockerExec::connect(config("collisions"), "execseam-no-such-container")
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    // A keepalive the image does not have: the container cannot start, and is removed.
    let before = containers("collisions", Mode::Warm).await;
    let e = DockerExec::create(config("collisions").keepalive(["/no/such/keepalive"]))
        .await
        .unwrap_err();
    assert_ne!(e.kind(), ErrorKind::NotFound, "{e}");
    assert!(e.message().contains("keepalive"), "{e}");
    assert_eq!(
        containers("collisions", Mode::Warm).await,
        before,
        "the failed container is left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_gives_143_and_the_init_is_pid_1() {
    let (w, guard) = warm("sigterm").await;
    let (p, _d) = per_call("sigterm").await;
    for exec in [&w, &p] {
        let o = exec.exec(sh("kill -TERM $$")).await.unwrap();
        assert_eq!(o.exit, Exit::Code(143));
        assert!(o.exit.is_ambiguous_kill());
        let o = exec
            .exec(sh("tr '\\0' ' ' < /proc/1/cmdline"))
            .await
            .unwrap();
        let pid1 = String::from_utf8_lossy(&o.stdout);
        assert!(pid1.contains("init"), "PID 1 is {pid1:?}, not an init");
    }
    // With the init as PID 1, SIGTERM reaches the keepalive: a stop does not wait for the timeout.
    let started = Instant::now();
    engine()
        .stop_container(
            &guard.1,
            Some(StopContainerOptions {
                t: Some(20),
                signal: None,
            }),
        )
        .await
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "stop took {:?}",
        started.elapsed()
    );
}

/// The processes in the warm container whose command line holds `needle`.
async fn processes(exec: &DockerExec, needle: &str) -> Vec<String> {
    let o = exec
        .exec(sh(
            "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline 2>/dev/null; echo; done",
        ))
        .await
        .unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.contains(needle) && !l.contains("/proc/"))
        .map(str::to_owned)
        .collect()
}

async fn gone_within(exec: &DockerExec, needle: &str, limit: Duration) {
    let until = Instant::now() + limit;
    loop {
        let left = processes(exec, needle).await;
        if left.is_empty() {
            return;
        }
        assert!(
            Instant::now() < until,
            "still running after {limit:?}: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_exec_leaves_no_process() {
    let (w, _g) = warm("kill").await;
    // Dropping a stream after its first chunk.
    let mut s = w
        .streaming()
        .unwrap()
        .exec_stream(sh("echo started; exec sleep 987"))
        .await
        .unwrap();
    assert_eq!(
        s.next().await.unwrap().unwrap(),
        Event::Stdout("started\n".into())
    );
    assert_eq!(
        processes(&w, "sleep 987").await.len(),
        1,
        "the command runs"
    );
    drop(s);
    gone_within(&w, "sleep 987", Duration::from_secs(5)).await;

    // The host's deadline, on a command with children that inherit its environment.
    let guarded = (&w).with_deadline(Duration::from_secs(1));
    let e = guarded
        .exec(sh("sleep 986 & sleep 985 & echo started; wait"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout(Deadline::Command));
    gone_within(&w, "sleep 98", Duration::from_secs(5)).await;

    // An untagged process (started by another exec) is left alone.
    let _bg = w.exec(sh("sleep 984 >/dev/null 2>&1 &")).await.unwrap();
    let guarded = (&w).with_deadline(Duration::from_millis(500));
    let _ = guarded.exec(sh("exec sleep 983")).await.unwrap_err();
    gone_within(&w, "sleep 983", Duration::from_secs(5)).await;
    assert_eq!(
        processes(&w, "sleep 984").await.len(),
        1,
        "another exec's process was killed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_call_container_never_outlives_its_exec() {
    let suite = "outlive";
    let (p, _d) = per_call(suite).await;
    let o = p.exec_detailed(sh("echo hi")).await.unwrap();
    assert_eq!(o.output.exit, Exit::Code(0));
    assert!(
        containers(suite, Mode::PerCall).await.is_empty(),
        "left after a clean exit"
    );
    let e = p
        .exec(
            Command::builder(["pwd"])
                .workdir("/no/such/dir")
                .build()
                .unwrap(),
        )
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert!(
        containers(suite, Mode::PerCall).await.is_empty(),
        "left after an error"
    );

    let mut s = p
        .streaming()
        .unwrap()
        .exec_stream(sh("echo started; exec sleep 60"))
        .await
        .unwrap();
    assert!(matches!(s.next().await, Some(Ok(Event::Stdout(_)))));
    assert_eq!(containers(suite, Mode::PerCall).await.len(), 1);
    drop(s);
    no_containers_within(suite, Duration::from_secs(5)).await;

    let guarded = (&p).with_deadline(Duration::from_secs(1));
    let e = guarded.exec(sh("exec sleep 60")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout(Deadline::Command));
    no_containers_within(suite, Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oom_kill_is_the_ambiguous_137_with_the_engine_flag() {
    let dir = tempfile::tempdir().unwrap();
    let c = config("oom").memory(24 << 20);
    require_engine(&c).await;
    support::sweep(&c).await;
    let p = DockerExec::per_call(c.clone().worktree(dir.path().to_string_lossy())).unwrap();
    let w = DockerExec::create(c.clone()).await.unwrap();
    let _g = Destroy(c, w.container_id().unwrap().to_owned());
    for exec in [&p, &w] {
        let o = exec
            // One process that grows until the kernel kills it (a pipeline would keep allocating
            // while it dies, and the OOM killer would go on to the keepalive).
            .exec_detailed(sh("x=a; while :; do x=$x$x; done"))
            .await
            .unwrap();
        assert_eq!(o.output.exit, Exit::Code(137), "{:?}", o.output);
        assert!(o.output.exit.is_ambiguous_kill());
        // The engine answered; on podman 4.3 with cgroup v1 it says `false` (see the adapter page).
        assert!(
            o.oom_killed.is_some(),
            "the engine's OOMKilled flag was not read"
        );
        // The container itself survived: it is a result, not a vanished sandbox.
        assert_eq!(exec.exec(sh("echo alive")).await.unwrap().stdout, "alive\n");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_container_stopped_or_removed_mid_exec_is_an_error() {
    for remove in [false, true] {
        let (w, guard) = warm("vanish").await;
        let id = guard.1.clone();
        let killer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(800)).await;
            if remove {
                DockerExec::with_container(config("vanish"), id)
                    .unwrap()
                    .destroy()
                    .await
                    .unwrap();
            } else {
                engine()
                    .kill_container(&id, None::<KillContainerOptions>)
                    .await
                    .unwrap();
            }
        });
        let e = w.exec(sh("printf start; sleep 30")).await.unwrap_err();
        killer.await.unwrap();
        assert_eq!(e.kind(), ErrorKind::NotFound, "remove={remove}: {e}");
        assert_eq!(
            e.retry(),
            Retry::Unsafe,
            "remove={remove}: the command had run"
        );
        assert_eq!(
            e.partial().map(|p| &p.stdout[..]),
            Some(&b"start"[..]),
            "remove={remove}"
        );
        // And the next command says the sandbox is gone.
        let e = w.exec(sh("true")).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound, "remove={remove}: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_stopping_mid_exec_is_an_error() {
    // A second podman service on the same storage, which this test may kill.
    let dir = std::env::var("EXECSEAM_PODMAN_DIR").unwrap_or_else(|_| {
        panic!("EXECSEAM_PODMAN_DIR is not set: this test stops a podman service of its own next to the one `.ci/podman start` runs; {}", support::NO_ENGINE)
    });
    let sock = std::path::Path::new(&dir).join(format!("kill-{}.sock", std::process::id()));
    let mut service = std::process::Command::new("podman")
        .args(["system", "service", "--time=0"])
        .arg(format!("unix://{}", sock.display()))
        .env("CONTAINERS_CONF", format!("{dir}/containers.conf"))
        .env("CONTAINERS_STORAGE_CONF", format!("{dir}/storage.conf"))
        .env(
            "CONTAINERS_REGISTRIES_CONF",
            format!("{dir}/registries.conf"),
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starting a second podman service");
    let until = Instant::now() + Duration::from_secs(10);
    while !sock.exists() {
        assert!(
            Instant::now() < until,
            "the second podman service did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let c = config("engine-stop").host(format!("unix://{}", sock.display()));
    let w = DockerExec::create(c).await.unwrap();
    let _g = Destroy(config("engine-stop"), w.container_id().unwrap().to_owned());
    let pid = service.id();
    let killer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(800)).await;
        // SIGKILL: the service gets no chance to finish the exec's stream.
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
    });
    let e = w
        .exec(sh("printf start; sleep 5; printf end"))
        .await
        .unwrap_err();
    killer.await.unwrap();
    let _ = service.wait();
    assert!(
        matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::Protocol),
        "{e}"
    );
    assert_eq!(e.retry(), Retry::Unsafe, "{e}: the command had started");
    // With the service gone, nothing is sent: safe to retry once it is back.
    let _ = std::fs::remove_file(&sock);
    let e = w.exec(sh("true")).await.unwrap_err();
    assert_eq!(
        (e.kind(), e.retry()),
        (ErrorKind::Unavailable, Retry::SAFE),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_engine_is_unavailable_and_safe_to_retry() {
    let c = config("dead").host("unix:///nonexistent/execseam-engine.sock");
    for exec in [
        DockerExec::with_container(c.clone(), "x").unwrap(),
        DockerExec::per_call(c.clone()).unwrap(),
    ] {
        let e = exec.exec(sh("true")).await.unwrap_err();
        assert_eq!(
            (e.kind(), e.retry()),
            (ErrorKind::Unavailable, Retry::SAFE),
            "{e}"
        );
    }
    let e = DockerExec::create(c).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_workdir_is_not_found_and_a_missing_program_in_a_real_one_is_127() {
    let (w, _g) = warm("workdir").await;
    let (p, _d) = per_call("workdir").await;
    for exec in [&w, &p] {
        for dir in ["/no/such/dir", "/etc/passwd"] {
            let e = exec
                .exec(Command::builder(["pwd"]).workdir(dir).build().unwrap())
                .await
                .unwrap_err();
            assert_eq!(e.kind(), ErrorKind::NotFound, "{dir}: {e}");
        }
        let o = exec
            .exec(
                Command::builder(["execseam-no-such-program"])
                    .workdir("/tmp")
                    .build()
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(o.exit, Exit::Code(127));
        let o = exec
            .exec(Command::builder(["pwd"]).workdir("/tmp").build().unwrap())
            .await
            .unwrap();
        assert_eq!(o.stdout, "/tmp\n");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_call_keeps_only_the_worktree() {
    let (p, dir) = per_call("worktree").await;
    let o = p
        .exec(sh("pwd; echo kept > kept.txt; echo lost > /tmp/lost.txt"))
        .await
        .unwrap();
    assert_eq!(o.stdout, "/workspace\n");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("kept.txt")).unwrap(),
        "kept\n"
    );
    let o = p
        .exec(sh(
            "cat kept.txt; [ -e /tmp/lost.txt ] && echo survived || echo gone",
        ))
        .await
        .unwrap();
    assert_eq!(o.stdout, "kept\ngone\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unread_stdin_loses_no_output() {
    // podman 4.3 drops the frames of an exec that exits with attached stdin unread.
    let (w, _g) = warm("stdin").await;
    let (p, _d) = per_call("stdin").await;
    for (exec, n) in [(&w, 40), (&p, 10)] {
        for size in [1usize, 200_000] {
            for _ in 0..n / 2 {
                let c = Command::builder(["sh", "-c", "echo out; echo err >&2; exit 3"])
                    .stdin(vec![b'x'; size])
                    .build()
                    .unwrap();
                let o = exec.exec(c).await.unwrap();
                assert_eq!(
                    (&o.stdout[..], &o.stderr[..], o.exit),
                    (&b"out\n"[..], &b"err\n"[..], Exit::Code(3))
                );
            }
        }
        // And stdin that is read arrives exactly, with no temp file left behind.
        let c = Command::builder(["sh", "-c", "cat; ls -A /tmp | grep -c execseam || true"])
            .stdin(vec![0u8, 255, 10, 13])
            .build()
            .unwrap();
        let o = exec.exec(c).await.unwrap();
        assert_eq!(&o.stdout[..], b"\0\xff\n\r0\n");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_env_value_with_a_newline_reaches_the_command() {
    // podman 4.3 cuts an exec's Env value at its first newline.
    let (w, _g) = warm("env").await;
    let (p, _d) = per_call("env").await;
    for exec in [&w, &p] {
        let c = Command::builder(["printenv", "A", "B"])
            .env("A", "one\ntwo")
            .env("B", "plain")
            .build()
            .unwrap();
        assert_eq!(exec.exec(c).await.unwrap().stdout, "one\ntwo\nplain\n");
        // A program name `env` would take for an assignment.
        let c = Command::builder(["a=b"]).env("A", "x\ny").build().unwrap();
        let o = exec.exec(c).await.unwrap();
        assert_eq!(o.exit, Exit::Code(127), "{o:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_create_list_connect_destroy() {
    let suite = "lifecycle";
    let c = config(suite);
    require_engine(&c).await;
    let a = DockerExec::create(c.clone()).await.unwrap();
    let id = a.container_id().unwrap().to_owned();
    let _g = Destroy(c.clone(), id.clone());
    let listed = DockerExec::list(&c).await.unwrap();
    assert_eq!(
        listed.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(),
        [id.as_str()]
    );
    assert_eq!(listed[0].state, "running");
    a.exec(sh("echo state > /tmp/state")).await.unwrap();
    // Another adapter, connected by id, sees the same container.
    let b = DockerExec::connect(c.clone(), &id).await.unwrap();
    assert_eq!(
        b.exec(sh("cat /tmp/state")).await.unwrap().stdout,
        "state\n"
    );
    // A stopped container is started again by connect, its files kept.
    engine()
        .kill_container(&id, None::<KillContainerOptions>)
        .await
        .unwrap();
    let b = DockerExec::connect(c.clone(), &id).await.unwrap();
    assert_eq!(
        b.exec(sh("cat /tmp/state")).await.unwrap().stdout,
        "state\n"
    );
    // Labels filter: another suite's list does not show it.
    assert!(
        DockerExec::list(&config("lifecycle-other"))
            .await
            .unwrap()
            .is_empty()
    );
    b.destroy().await.unwrap();
    b.destroy().await.unwrap(); // idempotent
    assert!(DockerExec::list(&c).await.unwrap().is_empty());
    let e = a.exec(sh("true")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    let e = DockerExec::connect(c, &id).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
}
