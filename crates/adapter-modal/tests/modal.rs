//! The Modal adapter against the emulator: lifecycle (create with a spec, connect by id, list by
//! label, destroy, close by ownership), token refresh, idempotent creates and exec starts, the
//! exec timeout, V1 sandboxes, signals.

use std::time::{Duration, Instant};

use execseam_core::{
    Command, Deadline, ErrorKind, Exec, Exit, ListFilter, Provider, Retry, Sandbox, SandboxSpec,
    SandboxState,
};
use execseam_emulators::modal::{ModalEmulator, TOKEN_ID};
use execseam_emulators::{EmulatorOptions, Fault, FaultRule};
use execseam_layers::ExecExt;
use execseam_modal::{ModalConfig, ModalExec, ModalProvider, is_v1_sandbox_id};
use execseam_modal_proto::api;
use execseam_test_util::exec::{alive_or_gone, command, sh};

async fn emulator() -> ModalEmulator {
    ModalEmulator::start(EmulatorOptions::default())
        .await
        .expect("emulator")
}

fn config(emu: &ModalEmulator) -> ModalConfig {
    ModalConfig::new(TOKEN_ID, emu.token_secret())
        .server_url(emu.url())
        .sandbox_timeout(Duration::from_secs(600))
}

fn provider(emu: &ModalEmulator) -> ModalProvider {
    ModalProvider::new(config(emu)).unwrap()
}

async fn create(emu: &ModalEmulator) -> ModalExec {
    provider(emu).create(SandboxSpec::new()).await.unwrap()
}

async fn stdout(exec: &ModalExec, script: &str) -> String {
    let o = exec.exec(sh(script)).await.expect("exec");
    assert_eq!(o.exit, Exit::Code(0), "{o:?}");
    String::from_utf8(o.stdout.to_vec()).unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn lifecycle_create_connect_list_destroy() {
    let emu = emulator().await;
    let p = provider(&emu);
    let spec = SandboxSpec::new()
        .with_env("SB_LEVEL", "sandbox")
        .with_label("team", "agents")
        .with_lifetime(Duration::from_secs(120))
        .with_cpu_millis(500)
        .with_memory_mib(512)
        .with_option("name", "worker-1")
        .with_option("workdir", "/root/work");
    let a = p.create(spec).await.unwrap();
    assert!(!is_v1_sandbox_id(a.id()), "{}", a.id());
    assert!(a.owned());
    assert!(a.task_id().is_some_and(|t| t.starts_with("ta-")));
    assert_eq!(
        stdout(&a, "echo $SB_LEVEL $(pwd); echo hi > /root/f").await,
        "sandbox /root/work\n"
    );
    assert_eq!(
        emu.sandbox(a.id()).unwrap().name.as_deref(),
        Some("worker-1")
    );
    assert_eq!(emu.sandbox(a.id()).unwrap().timeout_secs, 120);

    // Connect by id: the same sandbox (its files), a handle that does not own it.
    let b = p.connect(a.id()).await.unwrap();
    assert!(!b.owned());
    assert_eq!(stdout(&b, "cat /root/f").await, "hi\n");
    b.close().await.unwrap();
    assert!(
        a.poll().await.unwrap().is_none(),
        "closing a connected handle keeps it"
    );

    // Ports: declared at create (unencrypted_ports); the tunnel's TCP socket is the URL; a
    // port not declared is InvalidConfig.
    let c = p
        .create(SandboxSpec::new().with_label("team", "other").with_port(9))
        .await
        .unwrap();
    let exposed = p.exposed(c.id()).await.unwrap();
    assert_eq!(exposed.len(), 1, "{exposed:?}");
    assert_eq!(exposed[0].port, 9);
    assert!(
        exposed[0].url.starts_with("http://127.0.0.1:"),
        "{exposed:?}"
    );
    assert_eq!(p.expose(c.id(), 9).await.unwrap().url, exposed[0].url);
    let e = p.expose(c.id(), 10).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
    assert!(p.exposed(a.id()).await.unwrap().is_empty());
    let all = p.list(&ListFilter::new()).await.unwrap();
    let ids: Vec<&str> = all.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, [c.id(), a.id()], "newest first");
    assert!(all.iter().all(|s| s.state == SandboxState::Running));
    let agents = p
        .list(&ListFilter::new().with_label("team", "agents"))
        .await
        .unwrap();
    assert_eq!(agents.len(), 1);
    assert_eq!(agents[0].id, a.id());
    assert_eq!(
        agents[0].labels.get("team").map(String::as_str),
        Some("agents")
    );

    // Unsupported spec fields fail before any call.
    let e = p
        .create(SandboxSpec::new().with_disk_mib(1024))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
    let e = p
        .create(SandboxSpec::new().with_option("gpu", "a10g"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");

    // close() of the owned handle terminates it; exec through any handle is then NotFound.
    a.close().await.unwrap();
    a.close().await.expect("close is idempotent");
    let result = a.poll().await.unwrap().expect("finished");
    assert_eq!(
        result.status,
        api::generic_result::GenericStatus::Terminated as i32
    );
    let e = b.exec(sh("true")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    let e = p.connect(a.id()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    let ids: Vec<String> = p
        .list(&ListFilter::new())
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(ids, [c.id().to_owned()], "terminated ones are not listed");
    let e = p
        .connect("sb-01ARZ3NDEKTSV4RRFFQ69G5FAV")
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    // destroy by id, idempotent (a gone sandbox is Ok); through the dyn Provider too.
    let dynp: &dyn Provider = &p;
    dynp.destroy(c.id()).await.unwrap();
    dynp.destroy(c.id()).await.unwrap();
    dynp.destroy("sb-01ARZ3NDEKTSV4RRFFQ69G5FAV").await.unwrap();
    assert!(p.list(&ListFilter::new()).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_owned_handle_dropped_unclosed_is_terminated() {
    let emu = emulator().await;
    let counter = emu.sandbox_counter();
    let a = create(&emu).await;
    let kept = create(&emu).await;
    kept.set_owned(false);
    assert_eq!(counter(), 2);
    drop(a);
    drop(kept);
    let until = Instant::now() + Duration::from_secs(5);
    while counter() != 1 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(counter(), 1, "the owned one is gone, the released one runs");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_idle_timeout_ends_an_idle_sandbox() {
    let emu = emulator().await;
    let s = provider(&emu)
        .create(SandboxSpec::new().with_idle_timeout(Duration::from_secs(1)))
        .await
        .unwrap();
    // A command that runs longer than the idle timeout keeps it alive.
    assert_eq!(stdout(&s, "sleep 1.5; echo busy").await, "busy\n");
    tokio::time::sleep(Duration::from_millis(2000)).await;
    let r = s.poll().await.unwrap().expect("ended");
    assert_eq!(
        r.status,
        api::generic_result::GenericStatus::IdleTimeout as i32
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_auth_token_is_fetched_again_before_its_exp() {
    let emu = emulator().await;
    emu.set_token_lifetimes(Duration::from_secs(4), Duration::from_secs(3600));
    let exec = create(&emu).await;
    assert_eq!(emu.faults().count("auth-token"), 1);
    exec.poll().await.unwrap();
    assert_eq!(emu.faults().count("auth-token"), 1, "still fresh: reused");
    // Past half of its lifetime: fetched again before use.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    exec.poll().await.unwrap();
    assert_eq!(emu.faults().count("auth-token"), 2);
    // Past the first token's exp: still works (the emulator refuses expired tokens).
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(exec.poll().await.unwrap().is_none());
    assert_eq!(emu.faults().count("auth-token"), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_router_jwt_is_fetched_again_within_30s_of_its_exp() {
    let emu = emulator().await;
    // A router JWT with 20 s to live is always within the 30 s margin: every call refreshes.
    emu.set_token_lifetimes(Duration::from_secs(3600), Duration::from_secs(20));
    let exec = create(&emu).await;
    let before = emu.faults().count("access");
    assert_eq!(stdout(&exec, "echo a").await, "a\n");
    assert!(emu.faults().count("access") > before, "refreshed");
    // With long-lived JWTs the refreshed one is kept.
    emu.set_token_lifetimes(Duration::from_secs(3600), Duration::from_secs(3600));
    assert_eq!(stdout(&exec, "echo b").await, "b\n");
    let settled = emu.faults().count("access");
    assert_eq!(stdout(&exec, "echo c").await, "c\n");
    assert_eq!(emu.faults().count("access"), settled);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_create_whose_answer_is_lost_makes_one_sandbox() {
    let emu = ModalEmulator::start(EmulatorOptions {
        token: Some("as-the-right-one".into()),
        ..EmulatorOptions::default()
    })
    .await
    .expect("emulator");
    // INTERNAL after the sandbox was made, then a reset after the next one was: each create is
    // retried with its idempotency key and gets the sandbox its first attempt made.
    for fault in ["create=500", "create=reset"] {
        emu.faults().add(fault.parse::<FaultRule>().unwrap());
        let before = emu.sandboxes().len();
        let exec = provider(&emu)
            .create(SandboxSpec::new())
            .await
            .expect(fault);
        assert_eq!(emu.sandboxes().len(), before + 1, "{fault}");
        assert_eq!(emu.sandboxes().last().unwrap().id, exec.sandbox_id());
        assert_eq!(stdout(&exec, "echo ok").await, "ok\n");
    }
    // Rejected credentials are not retried.
    emu.faults().arm("create", Fault::AuthFailure);
    let e = provider(&emu).create(SandboxSpec::new()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unauthenticated, "{e}");
    let wrong = ModalConfig::new(TOKEN_ID, "as-wrong").server_url(emu.url());
    let e = ModalProvider::new(wrong)
        .unwrap()
        .create(SandboxSpec::new())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unauthenticated, "{e}");
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_start_retries_reuse_the_exec_id_so_the_command_runs_once() {
    let emu = emulator().await;
    let exec = ModalProvider::new(config(&emu).exec_start_retries(2))
        .unwrap()
        .create(SandboxSpec::new())
        .await
        .unwrap();
    for fault in [
        Fault::Unavailable,
        Fault::ResetBeforeResponse,
        Fault::ServerError,
    ] {
        let marker = format!("/root/once-{fault}");
        let before = emu.faults().count("exec");
        emu.faults().arm("exec", fault);
        let o = exec
            .exec(sh(&format!("echo ran >> {marker}; cat {marker}")))
            .await
            .unwrap_or_else(|e| panic!("{fault}: {e}"));
        assert_eq!(o.stdout.as_ref(), b"ran\n", "{fault}: ran once");
        assert_eq!(emu.faults().count("exec") - before, 2, "{fault}: one retry");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_exec_timeout_is_enforced_by_modal() {
    let emu = emulator().await;
    let exec = ModalProvider::new(config(&emu).exec_timeout(Duration::from_secs(1)))
        .unwrap()
        .create(SandboxSpec::new())
        .await
        .unwrap();
    let started = Instant::now();
    let mut e = exec
        .exec(sh("echo $$ > /root/pid; echo started; exec sleep 30"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout(Deadline::Command), "{e}");
    assert!(started.elapsed() < Duration::from_secs(5));
    let partial = e.take_partial().expect("partial output");
    assert_eq!(partial.stdout.as_ref(), b"started\n");
    let alive = exec.exec(sh(&alive_or_gone("/root/pid"))).await.unwrap();
    assert_eq!(alive.stdout.as_ref(), b"gone\n");

    // None configured: the host's deadline (a library user's `WithDeadline`; `mcp`'s
    // `timeout_secs`, the `code` tool and `run --timeout` take the same kit path) is sent as
    // Modal's timeout_secs, so the command is killed, not abandoned (issue 38, D29). Before,
    // the layer said "abandoned; this backend cannot kill it" and `sleep` ran on.
    let plain = provider(&emu).connect(exec.id()).await.unwrap();
    let e = (&plain)
        .with_deadline(Duration::from_secs(1))
        .exec(sh("echo $$ > /root/pid; exec sleep 30"))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout(Deadline::Command), "{e}");
    assert!(e.message().contains("Modal killed the command"), "{e}");
    let alive = stdout(&plain, &alive_or_gone("/root/pid")).await;
    assert_eq!(alive, "gone\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn signals_are_signals_and_codes_are_codes() {
    let emu = emulator().await;
    let exec = create(&emu).await;
    let o = exec.exec(sh("kill -TERM $$")).await.unwrap();
    assert_eq!(o.exit, Exit::Signal(15));
    assert!(o.exit.is_ambiguous_kill());
    let o = exec.exec(sh("exit 143")).await.unwrap();
    assert_eq!(o.exit, Exit::Code(143));
}

/// Issue 38, D30: a file without the execute bit was 125, `internal`, "retry unsafe". The router
/// spawns argv itself, so the start fails: `PERMISSION_DENIED`, nothing ran (inferred, as for a
/// missing program: docs/adapters/modal.md).
#[tokio::test(flavor = "multi_thread")]
async fn a_file_without_the_execute_bit_is_permission_denied_and_never_ran() {
    let emu = emulator().await;
    let exec = create(&emu).await;
    let o = exec
        .exec(sh(
            "printf '#!/bin/sh\necho ran\n' >/tmp/noexec && chmod 644 /tmp/noexec",
        ))
        .await
        .unwrap();
    assert_eq!(o.exit, Exit::Code(0));
    let e = exec.exec(command(["/tmp/noexec"])).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    assert_eq!(e.retry(), Retry::Never, "{e}");
    assert!(e.message().contains("Permission denied"), "{e}");
}

#[tokio::test(flavor = "multi_thread")]
async fn v1_sandboxes_are_reached_through_the_v1_rpcs() {
    use execseam_modal_proto::api::modal_client_client::ModalClientClient;
    let emu = emulator().await;
    // Make a V1 sandbox as the client does with MODAL_SANDBOX_V2=0 (SandboxCreate).
    let channel = tonic::transport::Channel::from_shared(emu.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut c = ModalClientClient::new(channel);
    fn with_creds<T>(msg: T, secret: &str) -> tonic::Request<T> {
        let mut r = tonic::Request::new(msg);
        r.metadata_mut()
            .insert("x-modal-token-id", TOKEN_ID.parse().unwrap());
        r.metadata_mut()
            .insert("x-modal-token-secret", secret.parse().unwrap());
        r
    }
    let secret = emu.token_secret();
    let app = c
        .app_get_or_create(with_creds(
            api::AppGetOrCreateRequest {
                app_name: "v1".into(),
                object_creation_type: api::ObjectCreationType::CreateIfMissing as i32,
                ..Default::default()
            },
            &secret,
        ))
        .await
        .unwrap()
        .into_inner()
        .app_id;
    let id = c
        .sandbox_create(with_creds(
            api::SandboxCreateRequest {
                app_id: app,
                definition: Some(api::Sandbox {
                    timeout_secs: 60,
                    ..Default::default()
                }),
                ..Default::default()
            },
            &secret,
        ))
        .await
        .unwrap()
        .into_inner()
        .sandbox_id;
    assert!(is_v1_sandbox_id(&id), "{id}");
    let exec = provider(&emu).connect(&id).await.unwrap();
    assert_eq!(stdout(&exec, "echo v1").await, "v1\n");
    exec.destroy().await.unwrap();
    assert!(exec.poll().await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread")]
async fn no_secret_reaches_debug() {
    let emu = emulator().await;
    let exec = create(&emu).await;
    let shown = format!("{exec:?} {:?}", exec.config());
    assert!(!shown.contains(&emu.token_secret()), "{shown}");
    assert!(!shown.contains("eyJ"), "no JWT: {shown}");
    let cmd = Command::builder(["sh", "-c", "printf %s \"$TOKEN\""])
        .env("TOKEN", "s3cr3t-value")
        .build()
        .unwrap();
    let o = exec.exec(cmd).await.unwrap();
    assert_eq!(o.stdout.as_ref(), b"s3cr3t-value");
}

/// Issue 38: Modal's `RPCRetryPolicy.retry_after_secs` over the kit's cap (30 s) is not waited
/// (86,400 s hung, 40 s was waited in full): the create fails at once, `RateLimited` with the
/// delay for the caller; within the cap it is waited and the create goes on.
#[tokio::test(flavor = "multi_thread")]
async fn a_retry_after_over_the_cap_fails_at_once_with_the_delay() {
    let emu = emulator().await;
    for (route, secs) in [
        ("create", 86_400),
        ("create", 40),
        ("app", 86_400),
        ("image", 40),
    ] {
        emu.faults()
            .add(format!("{route}=429:{secs}").parse::<FaultRule>().unwrap());
        let start = Instant::now();
        let e = provider(&emu).create(SandboxSpec::new()).await.unwrap_err();
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "{route} 429:{secs} took {:?}",
            start.elapsed()
        );
        assert_eq!(e.kind(), ErrorKind::RateLimited, "{e}");
        assert_eq!(
            e.retry(),
            Retry::Safe {
                after: Some(Duration::from_secs(secs))
            },
            "{route}: {e}"
        );
        emu.faults().clear();
    }
    emu.faults()
        .add("create=429:1".parse::<FaultRule>().unwrap());
    let start = Instant::now();
    let exec = provider(&emu).create(SandboxSpec::new()).await.unwrap();
    assert!(start.elapsed() >= Duration::from_secs(1));
    assert_eq!(stdout(&exec, "echo ok").await, "ok\n");
}

/// D12: a router that holds the answer to `TaskExecStdioRead` (the chaos proxy holds every
/// open) ends the exec at the request timeout, once: before, each stalled open timed out and
/// was reopened, 11 times (664 s at the default 60 s).
#[tokio::test(flavor = "multi_thread")]
async fn a_stalled_output_stream_ends_at_its_first_timeout() {
    let emu = emulator().await;
    let rules = execseam_chaos::parse_rules("POST /*/TaskExecStdioRead=hold:0").unwrap();
    let proxy = execseam_chaos::ChaosProxy::start(([127, 0, 0, 1], 0).into(), &emu.url(), rules)
        .await
        .unwrap();
    let config = config(&emu)
        .server_url(proxy.base_url())
        .request_timeout(Duration::from_secs(1))
        .stream_idle_timeout(Duration::from_secs(1));
    let exec = ModalProvider::new(config)
        .unwrap()
        .create(SandboxSpec::new())
        .await
        .unwrap();
    let start = Instant::now();
    let e = exec.exec(sh("echo hi")).await.unwrap_err();
    let took = start.elapsed();
    assert_eq!(e.retry(), Retry::Unsafe, "{e}");
    assert!(took < Duration::from_secs(5), "took {took:?}: {e}");
    exec.destroy().await.unwrap();
    proxy.shutdown().await;
}

/// A process start whose `TaskExecStart` answer is lost (after the command was started) is
/// retried by the caller under the same key: the exec id is the key's, so one command ran and the
/// retry is not fresh. A key reused after its release is `Conflict` (Modal keeps exec ids).
#[tokio::test(flavor = "multi_thread")]
async fn a_process_start_whose_answer_is_lost_runs_once_when_retried() {
    use execseam_core::{StartKey, StartRequest, Waited};
    let emu = emulator().await;
    let exec = ModalProvider::new(config(&emu).exec_start_retries(0))
        .unwrap()
        .create(SandboxSpec::new())
        .await
        .unwrap();
    let p = exec.processes().expect("native handles");
    let key = StartKey::new("lost").unwrap();
    let cmd = sh("echo ran >> /root/lost-runs; exit 3");
    // The registry's exec is the first TaskExecStart from here, the command's own the second.
    emu.faults()
        .add("exec=reset@2".parse::<FaultRule>().unwrap());
    let e = p
        .start(StartRequest::new(key.clone(), cmd.clone()))
        .await
        .unwrap_err();
    assert!(matches!(e.retry(), Retry::Safe { .. }), "{e}");
    let again = p.start(StartRequest::new(key.clone(), cmd)).await.unwrap();
    assert!(!again.fresh, "the first call made the registry entry");
    assert_eq!(
        p.wait(&again.handle, Duration::from_secs(10))
            .await
            .unwrap(),
        Waited::Exited(Exit::Code(3))
    );
    assert_eq!(stdout(&exec, "cat /root/lost-runs").await, "ran\n");
    p.release(&again.handle).await.unwrap();
    let reuse = p
        .start(StartRequest::new(key, sh("true")))
        .await
        .unwrap_err();
    assert_eq!(reuse.kind(), ErrorKind::Conflict, "{reuse}");
}

/// The container's `execve` limit is the container's own (issue 38, D32): the first command
/// over 64 KiB asks it once (`getconf ARG_MAX` and the env, one probe exec), so Inspect's 16 x
/// 64 KiB arguments run at the default stack, and a handle whose container processes have a
/// 1 MiB stack (ARG_MAX 256 KiB) refuses them before their `ExecStart` (the code before
/// assumed 8 MiB and sent them).
#[tokio::test(flavor = "multi_thread")]
async fn a_command_is_checked_against_the_containers_probed_arg_max() {
    let emu = emulator().await;
    let a = create(&emu).await;
    let execs = || emu.sandbox(a.id()).unwrap().exec_count() as u64;
    let fresh = || async { provider(&emu).connect(a.id()).await.unwrap() };
    let small = execseam_test_util::probe::arg_max_is_probed(&a, fresh, execs).await;
    small.close().await.unwrap();
    a.close().await.unwrap();
}
