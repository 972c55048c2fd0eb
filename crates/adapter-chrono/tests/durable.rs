//! The durable client against the Chrono emulator, driven through its fault injection. Each test
//! names the Aevatar rule it checks (seed 004 "Durable workflow execution"; Aevatar
//! `NyxIdCodeExecutionPort.Durable.cs` and `NyxIdDurableCodeExecutionPortTests.cs`, as quoted in
//! `research/ax-agentcore-chrono.md` §3.4).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use execseam_adapter_kit::retry::{Call, Stage};
use execseam_chrono::durable::{Progress, ResultAnswer, Sleep, StatusAnswer};
use execseam_chrono::http::{Exchange, HttpTransport, Method, Transport};
use execseam_chrono::{
    ChronoConfig, ChronoExec, DurableClient, DurablePolicy, Operation, Terminal,
};
use execseam_chrono_contract::wire::{self, Completion, ExecuteRequest, Language, Status, codes};
use execseam_core::{BoxFuture, ErrorKind, Exec, Retry, WireStatus};
use execseam_emulators::chrono::{ChronoEmulator, ChronoOptions};
use execseam_emulators::{EmulatorOptions, Fault};
use execseam_test_util::exec::{assert_error, command};
use execseam_test_util::probe::processes_with;

async fn emulator(options: ChronoOptions) -> ChronoEmulator {
    ChronoEmulator::start_with(EmulatorOptions::default(), options)
        .await
        .expect("the Chrono emulator starts")
}

fn policy() -> DurablePolicy {
    DurablePolicy {
        default_retry_after: Duration::from_millis(100),
        ..DurablePolicy::default()
    }
}

fn config(emu: &ChronoEmulator, policy: DurablePolicy) -> ChronoConfig {
    ChronoConfig::new(emu.base_url())
        .token(emu.token())
        .policy(policy)
}

fn client(emu: &ChronoEmulator, policy: DurablePolicy) -> DurableClient {
    DurableClient::new(config(emu, policy)).expect("a client")
}

fn bash(script: &str) -> ExecuteRequest {
    ExecuteRequest::new(Language::Bash, script, 60)
}

fn key(name: &str) -> String {
    wire::operation_key(&[
        name.as_bytes(),
        format!("{:?}", std::time::SystemTime::now()).as_bytes(),
    ])
}

/// Records every delay the loop asks for and sleeps at most 20 ms of it.
#[derive(Default)]
struct Recorder(Mutex<Vec<Duration>>);

impl Sleep for Recorder {
    fn sleep(&self, d: Duration) -> BoxFuture<'static, ()> {
        self.0.lock().unwrap().push(d);
        Box::pin(tokio::time::sleep(d.min(Duration::from_millis(20))))
    }
}

async fn run(client: &DurableClient, op: &mut Operation) -> Terminal {
    client
        .run_operation(op, std::future::pending())
        .await
        .expect("a terminal outcome")
}

fn ran(t: &Terminal) -> (&str, i32) {
    match t {
        Terminal::Ran { output, .. } => (output.stdout.as_str(), output.exit_code),
        other => panic!("not Ran: {other:?}"),
    }
}

/// Steps until the snapshot says `running`.
async fn until_running(client: &DurableClient, op: &mut Operation) {
    for _ in 0..200 {
        if op
            .snapshot
            .as_ref()
            .is_some_and(|s| s.status == Status::Running)
        {
            return;
        }
        match client.step(op).await.expect("a step") {
            Progress::Wait(_) => tokio::time::sleep(Duration::from_millis(25)).await,
            Progress::Done(t) => panic!("terminal too early: {t:?}"),
        }
    }
    panic!("never running: {op:?}");
}

async fn gone(marker: &str) -> bool {
    for _ in 0..100 {
        if processes_with(marker).is_empty() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

fn marker() -> String {
    // `sleep 3600.<digits>`: a command line no other process has.
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("3600.{n:09}{}", std::process::id())
}

#[tokio::test]
async fn a_lost_submit_response_is_retried_with_the_same_key_and_runs_once() {
    // Rule: "A lost submit response may repeat POST /executions only with the same admitted
    // operation key"; production: repeating the same owner, key and payload "converged on the
    // same operation".
    let emu = emulator(ChronoOptions::default()).await;
    let c = client(&emu, policy());
    emu.faults().arm("exec", Fault::ResetBeforeResponse);
    let mut op = Operation::new(key("lost"), bash("echo once")).unwrap();
    let t = run(&c, &mut op).await;
    assert_eq!(ran(&t), ("once\n", 0));
    assert_eq!(
        op.stats.submits, 2,
        "the first response was lost: one resubmit"
    );
    assert_eq!(emu.faults().count("exec"), 2);
    assert_eq!(emu.executions(), 1, "one execution for two submits");
    // A third submit with the same key and payload is the same operation.
    let again = c.submit(op.key(), op.request()).await.unwrap();
    assert_eq!(Some(again.receipt.operation_id), op.operation_id);
    assert_eq!(emu.executions(), 1);
    // A 500 after acceptance converges the same way.
    emu.faults().arm("exec", Fault::ServerError);
    let mut op = Operation::new(key("500"), bash("echo twice")).unwrap();
    assert_eq!(ran(&run(&c, &mut op).await), ("twice\n", 0));
    assert_eq!((op.stats.submits, emu.executions()), (2, 2));
}

#[tokio::test]
async fn the_same_key_with_another_payload_is_key_reuse() {
    let emu = emulator(ChronoOptions::default()).await;
    let c = client(&emu, policy());
    let k = key("reuse");
    c.submit(&k, &bash("true")).await.unwrap();
    let t = c.run(&k, &bash("false")).await.unwrap();
    assert_eq!(t, Terminal::KeyReused);
    let e = c.submit(&k, &bash("false")).await.unwrap_err();
    assert_eq!(
        (e.kind(), e.retry(), e.code()),
        (
            ErrorKind::Conflict,
            Retry::Never,
            Some(codes::IDEMPOTENCY_KEY_REUSE)
        )
    );
    // Another owner may use the same key freely (keys are scoped by owner).
    let other = DurableClient::new(
        ChronoConfig::new(emu.base_url())
            .token("someone-else")
            .policy(policy()),
    )
    .unwrap();
    assert!(other.submit(&k, &bash("false")).await.is_ok());
}

#[tokio::test]
async fn a_missing_key_is_refused_before_the_body_is_read() {
    // Production probe: no Idempotency-Key and an empty script/language → 400
    // IDEMPOTENCY_KEY_MISSING, not ASYNC_EXECUTION_UNAVAILABLE or a body error.
    let emu = emulator(ChronoOptions::default()).await;
    let http = HttpTransport::new(Arc::new(config(&emu, policy()))).unwrap();
    let a = http
        .send(Exchange {
            method: Method::Post,
            path: "/executions".into(),
            headers: vec![],
            body: Some(br#"{"script":"","language":""}"#.to_vec()),
            timeout: Duration::from_secs(5),
            op: Call::new(execseam_chrono::PROVIDER, "submit", Stage::Before),
        })
        .await
        .unwrap();
    assert_eq!(a.status, 400);
    assert_eq!(
        wire::error_code(&a.body).as_deref(),
        Some(codes::IDEMPOTENCY_KEY_MISSING)
    );
    // The client never sends a key that breaks the rule.
    let c = client(&emu, policy());
    for bad in ["", "a,b", "with space"] {
        let e = c.submit(bad, &bash("true")).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidCommand, "{bad:?}");
    }
    assert_eq!(
        emu.faults().count("exec"),
        1,
        "only the raw probe reached the emulator"
    );
}

#[tokio::test]
async fn status_304_with_and_without_etag() {
    // Rules: If-None-Match whenever an ETag is known; a 304 carries an ETag, and one without is
    // a client error (research note §3.7).
    let emu = emulator(ChronoOptions::default()).await;
    let c = client(&emu, policy());
    let mut op = Operation::new(key("304"), bash("sleep 2")).unwrap();
    until_running(&c, &mut op).await;
    let id = op.operation_id.clone().unwrap();
    let StatusAnswer::Snapshot {
        etag,
        retry_after,
        snapshot,
    } = c.status(&id, None).await.unwrap()
    else {
        panic!("a full answer without If-None-Match")
    };
    assert_eq!(etag, wire::etag_for_version(snapshot.version));
    assert_eq!(
        retry_after,
        Some(Duration::from_secs(1)),
        "Retry-After while active"
    );
    let StatusAnswer::NotModified { etag: same, .. } = c.status(&id, Some(&etag)).await.unwrap()
    else {
        panic!("304 for the current ETag")
    };
    assert_eq!(same, etag);
    // The loop sends If-None-Match and counts the 304s.
    let before = op.stats.not_modified;
    c.step(&mut op).await.unwrap();
    assert!(
        op.stats.conditional > 0 && op.stats.not_modified > before,
        "{:?}",
        op.stats
    );
    // A 304 without its ETag is malformed: a definitive error, never a guess.
    emu.faults().arm("status", Fault::MalformedBody);
    let e = c.status(&id, Some(&etag)).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Protocol);
    assert!(e.message().contains("304 without an ETag"), "{e}");
    emu.faults().arm("status", Fault::MalformedBody);
    let e = c.step(&mut op).await.unwrap_err();
    assert_eq!(
        e.kind(),
        ErrorKind::Protocol,
        "the loop does not go on after a malformed status"
    );
}

#[tokio::test]
async fn retry_after_3600_is_capped_at_30_seconds() {
    // Rule: "Retry delays are persisted and capped at 30 seconds".
    let emu = emulator(ChronoOptions::default()).await;
    let sleeps = Arc::new(Recorder::default());
    let c = client(&emu, DurablePolicy::default()).with_sleep(sleeps.clone());
    emu.faults().arm(
        "status",
        Fault::RateLimited {
            retry_after_secs: 3600,
        },
    );
    let mut op = Operation::new(key("cap"), bash("echo capped")).unwrap();
    assert_eq!(ran(&run(&c, &mut op).await), ("capped\n", 0));
    let waits = sleeps.0.lock().unwrap().clone();
    assert!(
        waits.contains(&Duration::from_secs(30)),
        "the 429's 3600 s became 30 s: {waits:?}"
    );
    assert!(
        waits.iter().all(|w| *w <= Duration::from_secs(30)),
        "{waits:?}"
    );
    assert_eq!(op.stats.waits, waits);
    // Without Retry-After the default is 2 s.
    assert_eq!(DurablePolicy::default().delay(None), Duration::from_secs(2));
}

#[tokio::test]
async fn a_result_read_while_running_is_pending() {
    // Rule: "A result-side 409 OPERATION_NOT_TERMINAL remains pending."
    let emu = emulator(ChronoOptions::default()).await;
    let c = client(&emu, policy());
    let mut op = Operation::new(key("pending"), bash("sleep 1; echo late")).unwrap();
    until_running(&c, &mut op).await;
    let id = op.operation_id.clone().unwrap();
    assert_eq!(
        c.result(&id).await.unwrap(),
        ResultAnswer::Pending {
            retry_after: Some(Duration::from_secs(1))
        }
    );
    assert_eq!(ran(&run(&c, &mut op).await), ("late\n", 0));
    let ResultAnswer::Ready(Completion::Ran { output, .. }) = c.result(&id).await.unwrap() else {
        panic!("the result once terminal")
    };
    assert_eq!(output.stdout, "late\n");
}

#[tokio::test]
async fn cancel_mid_run_reaches_cancelled_and_the_process_is_gone() {
    let emu = emulator(ChronoOptions::default()).await;
    let c = client(&emu, policy());
    let m = marker();
    let mut op = Operation::new(key("cancel"), bash(&format!("sleep {m}"))).unwrap();
    until_running(&c, &mut op).await;
    for _ in 0..100 {
        if !processes_with(&m).is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!processes_with(&m).is_empty(), "the program runs");
    op.request_cancel();
    let t = run(&c, &mut op).await;
    let Terminal::Cancelled {
        snapshot: Some(s), ..
    } = &t
    else {
        panic!("{t:?}")
    };
    assert!(s.cancel_requested && s.status == Status::Cancelled);
    assert_eq!(
        s.failure.as_ref().map(|f| f.code.as_str()),
        Some(codes::EXECUTION_CANCELLED)
    );
    assert!(op.cancel_sent);
    assert!(
        gone(&m).await,
        "the process was killed: {:?}",
        processes_with(&m)
    );
    // The result says so too, without output.
    let ResultAnswer::Ready(Completion::NoOutput { error, .. }) =
        c.result(op.operation_id.as_ref().unwrap()).await.unwrap()
    else {
        panic!()
    };
    assert_eq!(error.code, codes::EXECUTION_CANCELLED);
    assert_eq!(emu.running(), 0);
}

#[tokio::test]
async fn a_dropped_durable_exec_cancels_its_operation() {
    let emu = emulator(ChronoOptions::default()).await;
    let chrono = ChronoExec::new(config(&emu, policy()).durable(true)).unwrap();
    assert!(chrono.capabilities().remote_kill);
    let m = marker();
    let cmd = command(["sleep", m.as_str()]);
    let r = tokio::time::timeout(Duration::from_millis(800), chrono.exec(cmd)).await;
    assert!(r.is_err(), "still running when dropped");
    assert!(
        gone(&m).await,
        "dropping the exec cancelled it: {:?}",
        processes_with(&m)
    );
    assert_eq!(emu.faults().count("cancel"), 1);
}

#[tokio::test]
async fn expiry_is_410_and_terminal() {
    let emu = emulator(ChronoOptions {
        retention: Duration::from_secs(2),
        retry_after_secs: 0,
        ..ChronoOptions::default()
    })
    .await;
    let c = client(&emu, policy());
    let mut op = Operation::new(key("expire"), bash("true")).unwrap();
    let t = run(&c, &mut op).await;
    assert_eq!(ran(&t), ("", 0));
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let id = op.operation_id.clone().unwrap();
    let e = c.status(&id, None).await.unwrap_err();
    assert_eq!(
        (e.status(), e.code()),
        (Some(WireStatus::Http(410)), Some(codes::OPERATION_EXPIRED))
    );
    let e = c.result(&id).await.unwrap_err();
    assert_eq!(e.status(), Some(WireStatus::Http(410)));
    // A persisted operation resumed after expiry ends as Expired, without resubmitting.
    let mut resumed =
        Operation::resume(op.key(), op.request().clone(), &id, op.etag.clone()).unwrap();
    let t = run(&c, &mut resumed).await;
    assert_eq!(t, Terminal::Expired { operation_id: id });
    assert_eq!(resumed.stats.submits, 0);
}

#[tokio::test]
async fn once_the_id_is_known_404_is_terminal_and_nothing_is_resubmitted() {
    // Rule: "Once a provider operation ID is known, 404 is a terminal ownership/unknown-operation
    // failure; Aevatar does not submit a replacement execution."
    let emu = emulator(ChronoOptions::default()).await;
    let c = client(&emu, policy());
    let unknown = "op_00000000000000000000000000000000";
    let mut op = Operation::resume(key("404"), bash("true"), unknown, None).unwrap();
    assert_eq!(
        run(&c, &mut op).await,
        Terminal::NotFound {
            operation_id: unknown.into()
        }
    );
    // Another owner's operation is 404 too (owner isolation).
    let a = c
        .submit(&key("mine"), &bash("true"))
        .await
        .unwrap()
        .receipt
        .operation_id;
    let other = DurableClient::new(
        ChronoConfig::new(emu.base_url())
            .token("intruder")
            .policy(policy()),
    )
    .unwrap();
    let mut op = Operation::resume(key("theirs"), bash("true"), &a, None).unwrap();
    assert_eq!(
        run(&other, &mut op).await,
        Terminal::NotFound { operation_id: a }
    );
    assert_eq!(op.stats.submits, 0);
    assert_eq!(emu.faults().count("exec"), 1);
}

#[tokio::test]
async fn a_program_longer_than_the_exchange_bound_completes_through_short_exchanges() {
    // Seed 004: "a program running longer than 125 seconds completes through short
    // submit/status/result exchanges"; here the bound is 1 s and the program runs 3 s.
    let emu = emulator(ChronoOptions::default()).await;
    let bound = DurablePolicy {
        exchange_timeout: Duration::from_secs(1),
        ..policy()
    };
    let c = client(&emu, bound);
    let mut op = Operation::new(key("long"), bash("sleep 3; echo finished")).unwrap();
    let started = std::time::Instant::now();
    assert_eq!(ran(&run(&c, &mut op).await), ("finished\n", 0));
    assert!(started.elapsed() >= Duration::from_secs(3));
    assert_eq!(op.stats.timeouts, 0, "{:?}", op.stats);
    assert!(
        op.stats.longest_exchange < Duration::from_secs(1),
        "{:?}",
        op.stats
    );
    assert!(
        op.stats.exchanges >= 4,
        "submit, several status reads, result: {:?}",
        op.stats
    );
    // The same through the adapter's durable exec.
    let chrono = ChronoExec::new(config(&emu, bound).durable(true)).unwrap();
    let out = chrono
        .exec(command(["sh", "-c", "sleep 2; echo ok; exit 3"]))
        .await
        .unwrap();
    assert_eq!(
        (out.stdout.as_ref(), out.exit),
        (&b"ok\n"[..], execseam_core::Exit::Code(3))
    );
}

#[tokio::test]
async fn disabled_async_timeouts_and_vanished_sandboxes_are_typed() {
    let emu = emulator(ChronoOptions {
        async_enabled: false,
        ..ChronoOptions::default()
    })
    .await;
    let c = client(&emu, policy());
    let e = c.run(&key("off"), &bash("true")).await.unwrap_err();
    assert_eq!(
        (e.kind(), e.retry(), e.code()),
        (
            ErrorKind::Unsupported,
            Retry::Never,
            Some(codes::ASYNC_EXECUTION_UNAVAILABLE)
        )
    );

    let emu = emulator(ChronoOptions::default()).await;
    let c = client(&emu, policy());
    // timeout_secs enforced server-side: failed with SANDBOX_TIMEOUT, no output.
    let t = c
        .run(
            &key("slow"),
            &ExecuteRequest::new(Language::Bash, "sleep 5", 1),
        )
        .await
        .unwrap();
    let Terminal::Failed { error, .. } = t else {
        panic!("{t:?}")
    };
    assert_eq!(error.code, codes::SANDBOX_TIMEOUT);
    // The sandbox vanishing mid-run: the service cannot tell whether it ran.
    emu.faults().arm("exec", Fault::SandboxVanishes);
    let t = c.run(&key("vanish"), &bash("sleep 5")).await.unwrap();
    assert!(matches!(t, Terminal::OutcomeUncertain { .. }), "{t:?}");
    // Through the adapter these are typed errors, never Ok.
    let chrono = ChronoExec::new(config(&emu, policy()).durable(true).timeout_secs(1)).unwrap();
    let e = chrono.exec(command(["sleep", "5"])).await.unwrap_err();
    assert_eq!(
        (e.kind(), e.retry()),
        (
            ErrorKind::Timeout(execseam_core::Deadline::Command),
            Retry::Unsafe
        )
    );
}

#[tokio::test]
async fn every_language_runs_through_both_paths() {
    // TypeScript on plain node: the emulator strips the types (no tsx, no npm).
    let emu = emulator(ChronoOptions::default()).await;
    let c = client(&emu, policy());
    let sync = ChronoExec::new(config(&emu, policy())).unwrap();
    let progs = [
        (
            Language::Python,
            "import sys; print('py'); sys.stderr.write('e'); sys.exit(4)",
        ),
        (
            Language::Javascript,
            "console.log('js'); process.stderr.write('e'); process.exit(4)",
        ),
        (Language::Bash, "echo sh; printf e >&2; exit 4"),
        (
            Language::Typescript,
            "const n: number = 4; console.log('ts'); process.stderr.write('e'); process.exit(n)",
        ),
    ];
    for (lang, src) in progs {
        let want = match lang {
            Language::Python => "py\n",
            Language::Javascript => "js\n",
            Language::Bash => "sh\n",
            Language::Typescript => "ts\n",
        };
        let out = sync
            .execute(&ExecuteRequest::new(lang, src, 30))
            .await
            .unwrap();
        assert_eq!(
            (out.stdout.as_ref(), out.stderr.as_ref(), out.exit),
            (want.as_bytes(), &b"e"[..], execseam_core::Exit::Code(4)),
            "{lang}"
        );
        let t = c
            .run(&key(lang.as_str()), &ExecuteRequest::new(lang, src, 30))
            .await
            .unwrap();
        let Terminal::Ran { output, error, .. } = t else {
            panic!("{lang}: {t:?}")
        };
        assert_eq!(
            (output.stdout.as_str(), output.exit_code),
            (want, 4),
            "{lang}"
        );
        assert_eq!(
            error.map(|e| e.code),
            Some(codes::EXECUTION_FAILED.to_owned())
        );
    }
    // A language the image lacks is refused, typed.
    let mut options = ChronoOptions::default();
    options.runtimes.python = None;
    let bare = emulator(options).await;
    let sync = ChronoExec::new(config(&bare, policy())).unwrap();
    let e = sync
        .execute(&ExecuteRequest::new(Language::Python, "1", 30))
        .await
        .unwrap_err();
    assert_eq!(
        (e.kind(), e.code()),
        (ErrorKind::InvalidCommand, Some(codes::INVALID_REQUEST))
    );
}

#[tokio::test]
async fn tokens_never_reach_debug_or_errors() {
    let emu = emulator(ChronoOptions::default()).await;
    let secret = "nyxid_ag_SECRET-BEARER";
    let delegation = "SECRET-DELEGATION";
    let config = ChronoConfig::new(emu.base_url())
        .token(secret)
        .delegation_token(delegation)
        .via("us-code-alpha")
        .policy(policy());
    let chrono = ChronoExec::new(config.clone()).unwrap();
    let client = DurableClient::new(config.clone()).unwrap();
    let mut op = Operation::new(key("debug"), bash("echo SECRET-SOURCE")).unwrap();
    let shown = format!("{config:?} {chrono:?} {client:?} {op:?}");
    for s in [secret, delegation, "SECRET-SOURCE", op.key()] {
        assert!(!shown.contains(s), "{s} in {shown}");
    }
    emu.faults().arm("exec", Fault::AuthFailure);
    let e = chrono.exec(command(["true"])).await.unwrap_err();
    assert_error(&e, ErrorKind::Unauthenticated, Retry::Never);
    let shown = format!("{e} {e:?}");
    assert!(
        !shown.contains(secret) && !shown.contains(delegation),
        "{shown}"
    );
    // A dead endpoint's transport error carries no URL (the route id is in the query).
    let dead = ChronoExec::new(
        ChronoConfig::new("http://127.0.0.1:9")
            .token(secret)
            .via("us-code-alpha"),
    )
    .unwrap();
    let e = dead.exec(command(["true"])).await.unwrap_err();
    let shown = format!("{e} {e:?}");
    assert!(
        !shown.contains("us-code-alpha") && !shown.contains(secret),
        "{shown}"
    );
    let _ = client.step(&mut op).await;
}
