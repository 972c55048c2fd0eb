//! Behaviour of the Fly adapter against the emulator beyond the conformance suite: starting the
//! machine, leases, the API's timeout and output limit, 503 never re-sent, token forms.

use std::time::{Duration, Instant};

use execseam_core::{
    Command, Deadline, ErrorKind, Exec, Exit, Output, Retry, SandboxState, WireStatus,
};
use execseam_emulators::fly::{FlyEmulator, FlyOptions, TimeoutMode};
use execseam_emulators::{EmulatorOptions, Fault};
use execseam_fly::{FlyConfig, FlyExec, FlyProvider};
use execseam_test_util::exec::{assert_error, sh};

const TOKEN: &str = "fm2_lJPECAAAAAAAAMx6xBDH";

async fn emulator(opts: FlyOptions) -> FlyEmulator {
    FlyEmulator::start_with(
        EmulatorOptions {
            token: Some(TOKEN.into()),
            ..EmulatorOptions::default()
        },
        opts,
    )
    .await
    .expect("the emulator starts")
}

fn adapter(emu: &FlyEmulator, f: impl FnOnce(FlyConfig) -> FlyConfig) -> FlyExec {
    let m = emu.default_machine();
    on(
        f(FlyConfig::new(m.app(), TOKEN).base_url(emu.base_url())),
        m.id(),
    )
}

/// A handle on machine `id` (no request).
fn on(config: FlyConfig, id: &str) -> FlyExec {
    FlyProvider::new(config)
        .expect("a provider")
        .attach(id)
        .expect("a handle")
}

#[tokio::test(flavor = "multi_thread")]
async fn ensure_started_starts_and_suspend_suspends_the_machine() {
    let emu = emulator(FlyOptions {
        transition: Duration::from_millis(300),
        ..FlyOptions::default()
    })
    .await;
    let fly = adapter(&emu, |c| c);
    let m = emu.default_machine();

    emu.stop_machine(&m);
    let e = fly.exec(sh("true")).await.unwrap_err();
    assert_error(&e, ErrorKind::Conflict, Retry::Never);
    assert_eq!(e.status(), Some(WireStatus::Http(412)));
    // The 412 says nothing of the state: the adapter reads it from the machine.
    assert_eq!(e.sandbox_state(), Some(SandboxState::Stopped), "{e}");
    // Only a started machine can be suspended: refused at once, not waited out.
    let e = fly.suspend().await.unwrap_err();
    assert_eq!(
        (e.kind(), e.sandbox_state()),
        (ErrorKind::Conflict, Some(SandboxState::Stopped)),
        "{e}"
    );

    let t = Instant::now();
    fly.ensure_started().await.unwrap();
    assert_eq!(m.state(), "started");
    assert!(
        t.elapsed() >= Duration::from_millis(250),
        "it waited for the start"
    );
    assert!(fly.exec(sh("true")).await.unwrap().exit.success());

    fly.suspend().await.unwrap();
    assert_eq!(m.state(), "suspended");
    fly.suspend().await.unwrap(); // already suspended: nothing to do
    let e = fly.exec(sh("true")).await.unwrap_err();
    assert_eq!(
        (e.kind(), e.sandbox_state()),
        (ErrorKind::Conflict, Some(SandboxState::Paused)),
        "{e}"
    );
    fly.ensure_started().await.unwrap();
    assert_eq!(m.state(), "started");
    fly.ensure_started().await.unwrap(); // already started: nothing to do

    let other = on(
        FlyConfig::new(m.app(), TOKEN).base_url(emu.base_url()),
        "0000000000dead",
    );
    let e = other.ensure_started().await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lease_held_elsewhere_is_a_conflict_and_the_holder_passes() {
    let emu = emulator(FlyOptions::default()).await;
    let nonce = emu
        .default_machine()
        .acquire_lease("someone@else.example", Duration::from_secs(60));
    let fly = adapter(&emu, |c| c);
    let e = fly.exec(sh("true")).await.unwrap_err();
    assert_error(&e, ErrorKind::Conflict, Retry::SAFE);
    assert!(e.message().contains("lease currently held"), "{e}");
    let holder = adapter(&emu, |c| c.lease_nonce(nonce));
    assert!(holder.exec(sh("true")).await.unwrap().exit.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_apis_timeout_is_a_command_timeout_and_may_have_run() {
    let emu = emulator(FlyOptions::default()).await;
    let fly = adapter(&emu, |c| c.exec_timeout(Duration::from_secs(1)));
    let e = fly.exec(sh("sleep 5")).await.unwrap_err();
    assert_eq!(
        (e.kind(), e.retry()),
        (ErrorKind::Timeout(Deadline::Command), Retry::Unsafe),
        "{e}"
    );
    assert_eq!(e.code(), Some("deadline_exceeded"));

    // Where the API answers with the killed command's signal instead, that is the result.
    emu.set_options(|o| o.timeout_mode = TimeoutMode::Signal);
    let o = fly.exec(sh("printf partial; exec sleep 5")).await.unwrap();
    assert_eq!(o, Output::new("partial", "", Exit::Signal(9)));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_output_limit_is_output_limit() {
    let emu = emulator(FlyOptions::default()).await;
    let fly = adapter(&emu, |c| c);
    // 4 MiB of NULs: 6 bytes each once JSON-escaped (\u0000), over the 10 MiB response limit.
    let e = fly.exec(sh("head -c 4194304 /dev/zero")).await.unwrap_err();
    assert_error(&e, ErrorKind::OutputLimit, Retry::Unsafe);
    // Below the limit the output is exact.
    let o = fly
        .exec(sh("head -c 2097152 /dev/zero | tr '\\0' x"))
        .await
        .unwrap();
    assert_eq!(o.stdout.len(), 2 << 20);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_503_on_the_exec_is_never_sent_again() {
    let emu = emulator(FlyOptions::default()).await;
    let fly = adapter(&emu, |c| c);
    for fault in [
        Fault::Unavailable,
        Fault::ServerError,
        Fault::ResetBeforeResponse,
    ] {
        emu.faults().arm("exec", fault);
        let before = emu.exec_requests();
        let e = fly.exec(sh("true")).await.unwrap_err();
        assert_eq!(e.retry(), Retry::Unsafe, "{fault:?}: {e}");
        assert_eq!(emu.exec_requests(), before + 1, "{fault:?} was not retried");
    }
    emu.faults().arm(
        "exec",
        Fault::RateLimited {
            retry_after_secs: 7,
        },
    );
    // No known signature of Fly's own 429 proves it was answered before the machine ran the
    // command (issue 38): a 429 on the exec is Unsafe, and not sent again.
    let before = emu.exec_requests();
    let e = fly.exec(sh("true")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::RateLimited);
    assert_eq!(e.retry(), Retry::Unsafe, "{e}");
    assert_eq!(emu.exec_requests(), before + 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn tokens_are_sent_as_fly_go_sends_them() {
    let emu = emulator(FlyOptions::default()).await;
    for token in [
        TOKEN.to_owned(),
        format!("FlyV1 {TOKEN}"),
        format!("Bearer FlyV1 {TOKEN}"),
    ] {
        let m = emu.default_machine();
        let fly = on(
            FlyConfig::new(m.app(), token).base_url(emu.base_url()),
            m.id(),
        );
        assert!(fly.exec(sh("true")).await.unwrap().exit.success());
        assert!(
            !format!("{fly:?}").contains("lJPEC"),
            "Debug never shows the token"
        );
    }
    let m = emu.default_machine();
    let bad = on(
        FlyConfig::new(m.app(), "wrong").base_url(emu.base_url()),
        m.id(),
    );
    let e = bad.exec(sh("true")).await.unwrap_err();
    assert_error(&e, ErrorKind::Unauthenticated, Retry::Never);
}

#[tokio::test(flavor = "multi_thread")]
async fn results_are_the_same_whether_zero_values_are_omitted_or_not() {
    for omit_empty in [true, false] {
        let emu = emulator(FlyOptions {
            omit_empty,
            ..FlyOptions::default()
        })
        .await;
        let fly = adapter(&emu, |c| c);
        assert_eq!(
            fly.exec(sh("true")).await.unwrap(),
            Output::new("", "", Exit::Code(0))
        );
        assert_eq!(
            fly.exec(sh("printf o; printf e >&2; exit 3"))
                .await
                .unwrap(),
            Output::new("o", "e", Exit::Code(3))
        );
        // Binary stdin goes through the base64 temp file exactly (output is text: look at hex).
        let c = Command::builder(["od", "-An", "-tx1"])
            .stdin(vec![0u8, 0xff, b'\n'])
            .build()
            .unwrap();
        assert_eq!(fly.exec(c).await.unwrap().stdout.as_ref(), b" 00 ff 0a\n");
    }
}

/// Machines live in an app that must exist first (`POST /v1/apps`, or `fly apps create`): the
/// Machines API answers 404 `{"error":"app not found"}` for an unknown app (superfly/fly-go
/// @ 22d6e51 `flaps/flaps_apps_test.go`) and does not create it. The adapter is configured
/// with an existing app and reports an unknown one as `NotFound`, never as success.
#[tokio::test(flavor = "multi_thread")]
async fn an_app_that_does_not_exist_is_not_found_until_it_is_created() {
    use execseam_core::{ListFilter, Sandbox, SandboxSpec};
    let emu = emulator(FlyOptions::default()).await;
    let provider = FlyProvider::new(
        FlyConfig::new("not-created-yet", TOKEN)
            .base_url(emu.base_url())
            .image("debian"),
    )
    .unwrap();
    let e = provider.create(SandboxSpec::new()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    assert!(e.to_string().contains("app not found"), "{e}");
    let e = provider.list(&ListFilter::new()).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    assert!(emu.machine("not-created-yet", "x").is_none());

    assert!(emu.create_app("not-created-yet"));
    let fly = provider.create(SandboxSpec::new()).await.unwrap();
    assert!(fly.exec(sh("true")).await.unwrap().exit.success());
    assert_eq!(provider.list(&ListFilter::new()).await.unwrap().len(), 1);
    fly.close().await.unwrap();
}

/// Issue 38 (D32): the machine's own `ARG_MAX` is asked once, through the exec itself; 16 x 64
/// KiB runs at the default stack, and a handle made while the machine's processes have a 1 MiB
/// stack refuses it before its request (the assumed 8 MiB stack sent it before).
#[tokio::test(flavor = "multi_thread")]
async fn a_command_is_checked_against_the_machines_probed_arg_max() {
    let emu = emulator(FlyOptions::default()).await;
    let first = adapter(&emu, |c| c);
    let fresh = || async { adapter(&emu, |c| c) };
    execseam_test_util::probe::arg_max_is_probed(&first, fresh, || emu.exec_requests()).await;
}
