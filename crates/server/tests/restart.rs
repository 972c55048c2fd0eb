//! kill -9 the real `execseam-server serve` binary while operations are done, running and
//! queued; restart it on the same SQLite store: done results are served byte for byte, the
//! queued one runs, the running one whose supervisor was killed too is reconciled as
//! `outcome_uncertain` (nothing recorded its exit, and the command may have run: it is never run
//! again), and idempotency holds across the restart. E2B- and Sprites-backed running operations
//! (process handles) are reattached after the restart and complete with their real exit and
//! output.

mod common;

use std::time::Duration;

use common::*;
use execseam_chrono::{Operation, Terminal};
use execseam_chrono_contract::wire::{self, Status, codes};

async fn get(url: &str) -> (u16, Vec<u8>) {
    let r = http_client()
        .get(url)
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.bytes().await.unwrap().to_vec())
}

async fn status_of(base: &str, id: &str) -> Status {
    let (st, body) = get(&format!("{base}{}", wire::path::status(id))).await;
    assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));
    wire::parse_snapshot(&body, id).unwrap().status
}

#[tokio::test]
async fn kill_9_and_restart_keeps_results_runs_the_queue_and_reconciles_the_running() {
    let store = sqlite_url("restart");
    let tokens = token_file();
    let args = || {
        serve_args(&[
            ("--store", &store),
            ("--tokens", tokens.to_str().unwrap()),
            ("--replica-id", "node-1"),
            ("--max-running", "1"),
        ])
    };
    let mut first = Proc::spawn(&args());
    let base = first.base_url.clone();
    let c = client(&base, ALICE);

    // Done: an output with every awkward byte a JSON string can carry.
    let done_req =
        bash(r#"printf 'a\tb\n"quoted" \\ \u00e9 \u2603\n'; printf 'err\n' >&2; exit 5"#);
    let mut done = Operation::new(key("done"), done_req.clone()).unwrap();
    let t = run(&c, &mut done).await;
    assert!(
        matches!(&t, Terminal::Ran { output, .. } if output.exit_code == 5),
        "{t:?}"
    );
    let done_id = done.operation_id.clone().unwrap();
    let (st, before) = get(&format!("{base}{}", wire::path::result(&done_id))).await;
    assert_eq!(st, 200);

    // Running: a sleep that outlives the server.
    let m = marker();
    let running_req = bash(&format!("sleep {m}"));
    let running_key = key("running");
    let running = c
        .submit(&running_key, &running_req)
        .await
        .unwrap()
        .receipt
        .operation_id;
    until("the program runs", || !processes_with(&m).is_empty()).await;
    assert_eq!(status_of(&base, &running).await, Status::Running);

    // Queued behind it (one slot).
    let queued_req = bash("echo ran-after-restart");
    let queued = c
        .submit(&key("queued"), &queued_req)
        .await
        .unwrap()
        .receipt
        .operation_id;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(status_of(&base, &queued).await, Status::Queued);

    first.kill9();
    // The program runs detached (the adapter kit's spool: a supervisor shell in a session of
    // its own), so it survives the kill. Kill its supervisor first, then the program: nothing
    // is left to record an exit, so the outcome is unknown.
    assert!(
        !processes_with(&m).is_empty(),
        "the program outlived the killed server"
    );
    assert_eq!(kill_supervisors_then_programs(&m), 1);

    let second = Proc::spawn(&args());
    let base = second.base_url.clone();
    let c = client(&base, ALICE);

    // Done: byte for byte.
    let (st, after) = get(&format!("{base}{}", wire::path::result(&done_id))).await;
    assert_eq!(st, 200);
    assert_eq!(after, before, "the stored result is served byte for byte");
    // Queued: runs now.
    let mut q = Operation::resume(key("q"), queued_req, &queued, None).unwrap();
    assert_eq!(ran(&run(&c, &mut q).await), ("ran-after-restart\n", 0));
    // Running: reconciled, never re-run.
    let mut r =
        Operation::resume(running_key.clone(), running_req.clone(), &running, None).unwrap();
    ended_with(&run(&c, &mut r).await, codes::OUTCOME_UNCERTAIN);
    assert!(processes_with(&m).is_empty(), "not started again");
    // The same key and payload converge on the same operation; another payload is 409.
    let again = c.submit(&running_key, &running_req).await.unwrap();
    assert_eq!(again.receipt.operation_id, running);
    assert_eq!(again.receipt.status, Status::OutcomeUncertain);
    let e = c
        .submit(&running_key, &bash("echo other"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(codes::IDEMPOTENCY_KEY_REUSE));
    let again = c.submit(done.key(), &done_req).await.unwrap();
    assert_eq!(again.receipt.operation_id, done_id);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(processes_with(&m).is_empty());
    let out = second.output();
    assert!(out.contains("held by this replica's previous run"), "{out}");
}

/// An E2B-backed operation running at kill -9 is reattached after the restart and finished with
/// its real exit and byte-exact output: what it wrote before the kill, while no server was
/// attached, and after the reattach. The E2B emulator runs in this test process, so the
/// sandbox and its command outlive the killed server (as they do on E2B).
#[tokio::test(flavor = "multi_thread")]
async fn kill_9_with_an_e2b_operation_running_reattaches_and_finishes_it_exactly() {
    let emu = execseam_emulators::e2b::E2bEmulator::start(Default::default())
        .await
        .unwrap();
    let store = sqlite_url("restart-e2b");
    let tokens = token_file();
    let args = || {
        serve_args(&[
            ("--adapter", "e2b"),
            ("--store", &store),
            ("--tokens", tokens.to_str().unwrap()),
            ("--replica-id", "node-e2b"),
        ])
    };
    let mut first = Proc::spawn_with_env(&args(), &emu.env());
    let base = first.base_url.clone();
    let c = client(&base, ALICE);

    // Three phases, each released by a file the test creates in the sandbox: before the kill,
    // while no server is attached, after the reattach. Bytes JSON must escape, and stderr.
    let script = r#"echo run >>/tmp/runs; printf 'before \303\251\t"q"\n'; printf 'err-before\n' >&2
while [ ! -e /tmp/go-1 ]; do sleep 0.05; done
printf 'while-detached\n'; printf 'err-detached\n' >&2; : >/tmp/detached
while [ ! -e /tmp/go-2 ]; do sleep 0.05; done
printf 'after\n'; exit 4"#;
    let req = bash(script);
    let k = key("e2b-running");
    let id = c.submit(&k, &req).await.unwrap().receipt.operation_id;
    until("the sandbox exists", || emu.sandbox_ids().len() == 1).await;
    let sandbox = emu.sandbox_ids()[0].clone();
    let file = |name: &str| emu.host_path(&sandbox, &format!("/tmp/{name}")).unwrap();
    until("the command runs", || file("runs").exists()).await;
    let (b, i) = (&base, &id);
    poll(
        200,
        || async move { status_of(b, i).await == Status::Running },
    )
    .await;
    assert_eq!(status_of(&base, &id).await, Status::Running);

    first.kill9();
    // The command runs on in the sandbox, and writes while nobody is attached.
    std::fs::write(file("go-1"), b"").unwrap();
    until("the command outlived the killed server", || {
        file("detached").exists()
    })
    .await;

    let second = Proc::spawn_with_env(&args(), &emu.env());
    let base = second.base_url.clone();
    let c = client(&base, ALICE);
    until("the restarted server reattached", || {
        second.output().contains("reattaching")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        status_of(&base, &id).await,
        Status::Running,
        "still running"
    );
    // Once, never re-run by the reattach (read now: the sandbox goes with the result).
    assert_eq!(
        std::fs::read_to_string(file("runs")).unwrap(),
        "run\n",
        "the program was started exactly once"
    );
    std::fs::write(file("go-2"), b"").unwrap();

    let mut op = Operation::resume(k.clone(), req.clone(), &id, None).unwrap();
    let t = run(&c, &mut op).await;
    let Terminal::Ran { output, .. } = &t else {
        panic!("{t:?}")
    };
    assert_eq!(
        output.stdout,
        "before \u{e9}\t\"q\"\nwhile-detached\nafter\n"
    );
    assert_eq!(output.stderr, "err-before\nerr-detached\n");
    assert_eq!(output.exit_code, 4);
    // The per-operation sandbox is destroyed once the result is stored.
    until("the sandbox is destroyed", || emu.sandbox_ids().is_empty()).await;
    let again = c.submit(&k, &req).await.unwrap();
    assert_eq!(again.receipt.operation_id, id);
    assert_eq!(
        again.receipt.status,
        Status::Failed,
        "exit 4 is a failed run"
    );
}

/// A detached command in a shared sandbox outlives the killed server, is reattached after the
/// restart and completes with its exit and exact output, started exactly once; then the
/// adapter's handle directory in the sandbox (`handles`) is empty again. `exec` runs in that
/// sandbox; `settle`: how long the test waits after the kill before it looks (past what the
/// provider allows a disconnected command).
struct SharedSandbox<'a> {
    adapter: &'static str,
    /// `--sandbox`.
    sandbox: &'a str,
    env: Vec<(String, String)>,
    exec: &'a dyn execseam_core::Exec,
    handles: &'static str,
    settle: Duration,
}

/// The kit's spool in a sandbox.
const SPOOL: &str = "/tmp/.execseam/p";

fn spec() -> execseam_core::SandboxSpec {
    execseam_core::SandboxSpec::new()
}

impl<'a> SharedSandbox<'a> {
    /// A sandbox the test created (`--sandbox` its id), whose commands outlive a disconnect.
    fn created<S: execseam_core::Sandbox + execseam_core::Exec>(
        adapter: &'static str,
        env: Vec<(String, String)>,
        exec: &'a S,
        handles: &'static str,
    ) -> SharedSandbox<'a> {
        SharedSandbox {
            adapter,
            sandbox: execseam_core::Sandbox::id(exec),
            env,
            exec,
            handles,
            settle: Duration::ZERO,
        }
    }
}

async fn reattaches_in_a_shared_sandbox(t: SharedSandbox<'_>) {
    let in_sandbox = |script: &str| {
        let cmd = execseam_core::Command::new(["sh", "-c", script]).unwrap();
        async move { t.exec.exec(cmd).await.unwrap() }
    };
    let exists = |path: &'static str| async move {
        in_sandbox(&format!("test -e {path}")).await.exit.success()
    };
    let store = sqlite_url(&format!("restart-{}", t.adapter));
    let tokens = token_file();
    let replica = format!("node-{}", t.adapter);
    let args = || {
        serve_args(&[
            ("--adapter", t.adapter),
            ("--sandbox", t.sandbox),
            ("--store", store.as_str()),
            ("--tokens", tokens.to_str().unwrap()),
            ("--replica-id", &replica),
        ])
    };
    in_sandbox("rm -f /tmp/runs /tmp/go-1 /tmp/go-2 /tmp/detached").await;
    let mut first = Proc::spawn_with_env(&args(), &t.env);
    let base = first.base_url.clone();
    let c = client(&base, ALICE);
    let script = r#"echo run >>/tmp/runs; printf 'before\n'; printf 'err\n' >&2
while [ ! -e /tmp/go-1 ]; do sleep 0.05; done
printf 'while-detached \303\251\n'; : >/tmp/detached
while [ ! -e /tmp/go-2 ]; do sleep 0.05; done
printf 'after\n'; exit 3"#;
    let req = bash(script);
    let k = key(&format!("{}-running", t.adapter));
    let id = c.submit(&k, &req).await.unwrap().receipt.operation_id;
    let (b, i) = (&base, &id);
    poll(400, || async move {
        exists("/tmp/runs").await && status_of(b, i).await == Status::Running
    })
    .await;
    let (_, body) = get(&format!("{base}{}", wire::path::status(&id))).await;
    assert_eq!(
        status_of(&base, &id).await,
        Status::Running,
        "{}\n{}",
        String::from_utf8_lossy(&body),
        first.output()
    );

    first.kill9();
    in_sandbox("touch /tmp/go-1").await;
    tokio::time::sleep(t.settle).await;
    poll(400, || exists("/tmp/detached")).await;
    assert!(
        exists("/tmp/detached").await,
        "the command outlived the killed server"
    );

    let second = Proc::spawn_with_env(&args(), &t.env);
    let base = second.base_url.clone();
    let c = client(&base, ALICE);
    until("the restarted server reattached", || {
        second.output().contains("reattaching")
    })
    .await;
    in_sandbox("touch /tmp/go-2").await;
    let mut op = Operation::resume(k.clone(), req.clone(), &id, None).unwrap();
    let t2 = run(&c, &mut op).await;
    let Terminal::Ran { output, .. } = &t2 else {
        panic!("{t2:?}")
    };
    assert_eq!(output.stdout, "before\nwhile-detached \u{e9}\nafter\n");
    assert_eq!(output.stderr, "err\n");
    assert_eq!(output.exit_code, 3);
    let runs = in_sandbox("cat /tmp/runs").await;
    assert_eq!(&runs.stdout[..], b"run\n", "started exactly once");
    // The handle is released once the result is known (the sandbox is shared and stays).
    let left = in_sandbox(&format!("ls -A {} 2>/dev/null | wc -l", t.handles)).await;
    assert_eq!(String::from_utf8_lossy(&left.stdout).trim(), "0");
}

/// Sprites, in one shared sprite (`--sandbox`): the spool's supervisor outlives the socket
/// beyond the default `max_run_after_disconnect`.
#[tokio::test(flavor = "multi_thread")]
async fn kill_9_with_a_sprites_operation_running_reattaches_it_in_the_shared_sprite() {
    use execseam_emulators::sprites::{DEFAULT_SPRITE, SpritesEmulator, SpritesOptions};
    let emu = SpritesEmulator::start_with(
        execseam_emulators::EmulatorOptions {
            token: Some("spr_test".into()),
            ..Default::default()
        },
        SpritesOptions {
            // A command left to the default would be killed while no server runs.
            max_run_after_disconnect: Duration::from_millis(300),
            ..SpritesOptions::default()
        },
    )
    .await
    .unwrap();
    let sprite = emu.sprite(DEFAULT_SPRITE).unwrap();
    reattaches_in_a_shared_sandbox(SharedSandbox {
        adapter: "sprites",
        sandbox: DEFAULT_SPRITE,
        env: emu.env(),
        exec: sprite.sandbox().exec(),
        handles: SPOOL,
        // Past max_run_after_disconnect of every socket the first server had open.
        settle: Duration::from_millis(600),
    })
    .await;
    assert!(sprite.is_alive());
}

/// AX, a native-handle adapter, in its one guest (`--sandbox`: its address): the guest's own
/// process outlives the server, and the kit's registry finds it again by key.
#[tokio::test(flavor = "multi_thread")]
async fn kill_9_with_an_ax_operation_running_reattaches_its_native_handle() {
    let emu = execseam_emulators::ax::AxEmulator::start(Default::default())
        .await
        .unwrap();
    let env = emu.env();
    let address = &env.iter().find(|(k, _)| k == "EXECSEAM_SANDBOX").unwrap().1;
    let provider = execseam::ax::AxProvider::new(execseam::ax::AxConfig::default()).unwrap();
    let exec = provider.connect(address).await.unwrap();
    reattaches_in_a_shared_sandbox(SharedSandbox {
        adapter: "ax",
        sandbox: address,
        env: env.clone(),
        exec: &exec,
        handles: "/tmp/.execseam/ax",
        settle: Duration::ZERO,
    })
    .await;
}

/// Vercel, a hybrid adapter (the spool's supervisor is a detached `…/cmd` command), in one
/// sandbox created first (`--sandbox` its id).
#[tokio::test(flavor = "multi_thread")]
async fn kill_9_with_a_vercel_operation_running_reattaches_its_detached_supervisor() {
    use execseam::vercel::{VercelConfig, VercelProvider};
    use execseam_emulators::vercel::{PROJECT_ID, TEAM_ID, VercelEmulator};
    let emu = VercelEmulator::start_with(Default::default(), Default::default())
        .await
        .unwrap();
    let config = VercelConfig::new(emu.token(), TEAM_ID, PROJECT_ID).api_url(emu.base_url());
    let sandbox = VercelProvider::new(config).unwrap().create(spec()).await;
    let exec = sandbox.unwrap();
    reattaches_in_a_shared_sandbox(SharedSandbox::created("vercel", emu.env(), &exec, SPOOL)).await;
}

/// Modal, the other native-handle adapter (the task command router's execs, by an id derived
/// from the key), in one sandbox created first (`--sandbox` its id).
#[tokio::test(flavor = "multi_thread")]
async fn kill_9_with_a_modal_operation_running_reattaches_its_router_exec() {
    use execseam::modal::{ModalConfig, ModalProvider};
    use execseam_emulators::modal::{ModalEmulator, TOKEN_ID};
    let emu = ModalEmulator::start(Default::default()).await.unwrap();
    let config = ModalConfig::new(TOKEN_ID, emu.token_secret()).server_url(emu.url());
    let exec = ModalProvider::new(config).unwrap().create(spec()).await;
    // The kit's registry in the sandbox.
    let t = SharedSandbox::created(
        "modal",
        emu.env(),
        exec.as_ref().unwrap(),
        "/tmp/.execseam/m",
    );
    reattaches_in_a_shared_sandbox(t).await;
}
