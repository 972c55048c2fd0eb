//! The Chrono durable client (and the Chrono adapter) drive `execseam serve` through the whole
//! contract, including the fault cases the client runs against the Chrono emulator
//! (crates/adapter-chrono/tests/durable.rs). The rules are Aevatar's (seed 004 "Durable workflow
//! execution"; `NyxIdCodeExecutionPort.Durable.cs` and its tests, quoted in
//! `research/ax-agentcore-chrono.md` §3.4); the server is on SQLite, commands run on this host.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use execseam_chrono::durable::{ResultAnswer, StatusAnswer};
use execseam_chrono::http::{Answer, Exchange, HttpTransport, Transport};
use execseam_chrono::{ChronoExec, DurableClient, Operation, Terminal};
use execseam_chrono_contract::wire::{self, Completion, ExecuteRequest, Language, Status, codes};
use execseam_core::{BoxFuture, Command, Error, ErrorKind, Exec, Exit, Retry, WireStatus};
use execseam_server::{Config, Server};

async fn server(tweak: impl FnOnce(&mut Config)) -> Server {
    let mut c = config(sqlite_url("contract"));
    tweak(&mut c);
    Server::start(c).await.expect("the server starts")
}

fn executions(s: &Server) -> u64 {
    s.node().metrics.executions.load(Ordering::Relaxed)
}

/// Loses the answer of the first `POST /executions` after the server handled it.
struct LoseFirstSubmit {
    inner: HttpTransport,
    lost: std::sync::atomic::AtomicBool,
}

impl Transport for LoseFirstSubmit {
    fn send(&self, ex: Exchange) -> BoxFuture<'_, Result<Answer, Error>> {
        Box::pin(async move {
            let submit = ex.op.operation == "submit";
            let a = self.inner.send(ex).await?;
            if submit && !self.lost.swap(true, Ordering::SeqCst) {
                return Err(
                    Error::new(ErrorKind::Unavailable, "the connection was reset")
                        .with_retry(Retry::SAFE),
                );
            }
            Ok(a)
        })
    }
}

#[tokio::test]
async fn a_lost_submit_response_converges_on_one_operation_and_one_execution() {
    // Rule: "A lost submit response may repeat POST /executions only with the same admitted
    // operation key"; production: the same owner, key and payload "converged on the same
    // operation".
    let s = server(|_| {}).await;
    let http = HttpTransport::new(Arc::new(chrono_config(&s.base_url(), ALICE))).unwrap();
    let c = DurableClient::with_transport(
        Arc::new(LoseFirstSubmit {
            inner: http,
            lost: false.into(),
        }),
        policy(),
    )
    .with_sleep(Arc::new(Quick::default()));
    let mut op = Operation::new(key("lost"), bash("echo once")).unwrap();
    assert_eq!(ran(&run(&c, &mut op).await), ("once\n", 0));
    assert_eq!(
        op.stats.submits, 2,
        "the first answer was lost: one resubmit"
    );
    assert_eq!(executions(&s), 1, "one execution for two submits");
    let again = c.submit(op.key(), op.request()).await.unwrap();
    assert_eq!(Some(again.receipt.operation_id), op.operation_id);
    assert_eq!(executions(&s), 1);
}

#[tokio::test]
async fn key_reuse_is_409_and_keys_and_ids_are_scoped_by_owner() {
    let s = server(|_| {}).await;
    let alice = client(&s.base_url(), ALICE);
    let bob = client(&s.base_url(), BOB);
    let k = key("reuse");
    let a = alice.submit(&k, &bash("true")).await.unwrap();
    assert_eq!(
        alice.run(&k, &bash("false")).await.unwrap(),
        Terminal::KeyReused
    );
    let e = alice.submit(&k, &bash("false")).await.unwrap_err();
    assert_eq!(
        (e.kind(), e.retry(), e.code()),
        (
            ErrorKind::Conflict,
            Retry::Never,
            Some(codes::IDEMPOTENCY_KEY_REUSE)
        )
    );
    // Bob may use the same key: another operation.
    let b = bob.submit(&k, &bash("false")).await.unwrap();
    assert_ne!(a.receipt.operation_id, b.receipt.operation_id);
    // Alice's id is 404 for Bob (terminal, never resubmitted).
    let id = a.receipt.operation_id.clone();
    let mut op = Operation::resume(key("theirs"), bash("true"), &id, None).unwrap();
    assert_eq!(
        run(&bob, &mut op).await,
        Terminal::NotFound { operation_id: id }
    );
    assert_eq!(op.stats.submits, 0);
}

async fn raw(
    base: &str,
    method: reqwest::Method,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut r = http_client()
        .request(method, format!("{base}{path}"))
        .body(body.to_owned());
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    let resp = r.send().await.unwrap();
    let status = resp.status().as_u16();
    let h = resp.headers().clone();
    (status, h, resp.text().await.unwrap())
}

#[tokio::test]
async fn credentials_keys_and_bodies_are_checked_in_order() {
    let s = server(|c| c.max_payload_bytes = 4096).await;
    let base = s.base_url();
    let auth = format!("Bearer {ALICE}");
    let post = reqwest::Method::POST;
    // No token, a wrong token: 401.
    for h in [vec![], vec![("authorization", "Bearer nope")]] {
        let (st, _, body) = raw(&base, post.clone(), "/executions", &h, "{}").await;
        assert_eq!(st, 401);
        assert_eq!(
            wire::error_code(body.as_bytes()).as_deref(),
            Some(codes::UNAUTHENTICATED)
        );
    }
    // The production probe: no key, empty script and language → IDEMPOTENCY_KEY_MISSING.
    let (st, _, body) = raw(
        &base,
        post.clone(),
        "/executions",
        &[("authorization", &auth)],
        r#"{"script":"","language":""}"#,
    )
    .await;
    assert_eq!(
        (st, wire::error_code(body.as_bytes()).as_deref()),
        (400, Some(codes::IDEMPOTENCY_KEY_MISSING))
    );
    // A key that breaks the rule, an unknown language, a timeout out of range: 400.
    for (k, b) in [
        ("a,b", r#"{"language":"bash","script":"true"}"#),
        ("k1", r#"{"language":"cobol","script":"true"}"#),
        (
            "k2",
            r#"{"language":"bash","script":"true","timeout_secs":601}"#,
        ),
        (
            "k3",
            r#"{"language":"bash","script":"true","timeout_secs":0}"#,
        ),
    ] {
        let (st, _, body) = raw(
            &base,
            post.clone(),
            "/executions",
            &[("authorization", &auth), ("idempotency-key", k)],
            b,
        )
        .await;
        assert_eq!(
            (st, wire::error_code(body.as_bytes()).as_deref()),
            (400, Some(codes::INVALID_REQUEST)),
            "{k}: {body}"
        );
    }
    // Too large: 413, on both routes.
    let big = format!(r#"{{"language":"bash","script":"{}"}}"#, "x".repeat(5000));
    for path in ["/executions", "/execute"] {
        let (st, _, body) = raw(
            &base,
            post.clone(),
            path,
            &[("authorization", &auth), ("idempotency-key", "k4")],
            &big,
        )
        .await;
        assert_eq!(
            (st, wire::error_code(body.as_bytes()).as_deref()),
            (413, Some(codes::EXECUTION_PAYLOAD_TOO_LARGE))
        );
    }
    // Unknown ids and routes: 404.
    let (st, _, body) = raw(
        &base,
        reqwest::Method::GET,
        "/executions/op_00000000000000000000000000000000",
        &[("authorization", &auth)],
        "",
    )
    .await;
    assert_eq!(
        (st, wire::error_code(body.as_bytes()).as_deref()),
        (404, Some(codes::OPERATION_NOT_FOUND))
    );
    assert_eq!(
        raw(&base, reqwest::Method::GET, "/nope", &[], "").await.0,
        404
    );
    assert_eq!(executions(&s), 0, "nothing ran");
}

#[tokio::test]
async fn status_is_conditional_and_results_are_pending_until_terminal() {
    let s = server(|_| {}).await;
    let c = client(&s.base_url(), ALICE);
    let a = c
        .submit(&key("304"), &bash("sleep 2.5; echo late"))
        .await
        .unwrap();
    assert_eq!(a.retry_after, Some(Duration::from_secs(1)));
    assert!(
        a.location
            .as_deref()
            .is_some_and(|l| l.ends_with(&wire::path::status(&a.receipt.operation_id)))
    );
    let id = a.receipt.operation_id;
    // Read once it runs (the version stays put while the program runs).
    let (etag, retry_after, snapshot) = loop {
        let StatusAnswer::Snapshot {
            etag,
            retry_after,
            snapshot,
        } = c.status(&id, None).await.unwrap()
        else {
            panic!("a full answer without If-None-Match")
        };
        if snapshot.status == Status::Running {
            break (etag, retry_after, snapshot);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
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
    // Rule: "A result-side 409 OPERATION_NOT_TERMINAL remains pending."
    assert_eq!(
        c.result(&id).await.unwrap(),
        ResultAnswer::Pending {
            retry_after: Some(Duration::from_secs(1))
        }
    );
    let mut op =
        Operation::resume(key("x"), bash("sleep 2.5; echo late"), &id, Some(etag)).unwrap();
    assert_eq!(ran(&run(&c, &mut op).await), ("late\n", 0));
    assert!(op.stats.conditional > 0, "{:?}", op.stats);
    let ResultAnswer::Ready(Completion::Ran { output, .. }) = c.result(&id).await.unwrap() else {
        panic!("the result once terminal")
    };
    assert_eq!(output.stdout, "late\n");
}

#[tokio::test]
async fn cancel_mid_run_reaches_cancelled_and_the_process_is_gone() {
    let s = server(|_| {}).await;
    let c = client(&s.base_url(), ALICE);
    let m = marker();
    let a = c
        .submit(&key("cancel"), &bash(&format!("sleep {m}")))
        .await
        .unwrap();
    until("the program runs", || !processes_with(&m).is_empty()).await;
    let mut op = Operation::resume(
        key("c"),
        bash(&format!("sleep {m}")),
        &a.receipt.operation_id,
        None,
    )
    .unwrap();
    op.request_cancel();
    let t = run(&c, &mut op).await;
    let snap = ended_with(&t, codes::EXECUTION_CANCELLED);
    assert!(snap.cancel_requested && snap.status == Status::Cancelled);
    until("the process is gone", || processes_with(&m).is_empty()).await;
    let ResultAnswer::Ready(Completion::NoOutput { error, .. }) =
        c.result(&a.receipt.operation_id).await.unwrap()
    else {
        panic!()
    };
    assert_eq!(error.code, codes::EXECUTION_CANCELLED);
    // The deadline is absolute: a redelivered cancel does not move it.
    let id = a.receipt.operation_id;
    let first = s
        .node()
        .store
        .get(&id)
        .await
        .unwrap()
        .unwrap()
        .cancel_deadline_ms;
    assert!(first.is_some());
    c.cancel(&id).await.unwrap();
    assert_eq!(
        s.node()
            .store
            .get(&id)
            .await
            .unwrap()
            .unwrap()
            .cancel_deadline_ms,
        first
    );
}

#[tokio::test]
async fn a_queued_operation_is_cancelled_without_running() {
    let s = server(|c| c.max_running = 1).await;
    let c = client(&s.base_url(), ALICE);
    let m = marker();
    let first = c
        .submit(&key("busy"), &bash(&format!("sleep {m}")))
        .await
        .unwrap();
    until("the first program runs", || !processes_with(&m).is_empty()).await;
    let second = c.submit(&key("queued"), &bash("echo never")).await.unwrap();
    let (snap, _) = c.cancel(&second.receipt.operation_id).await.unwrap();
    assert_eq!(snap.status, Status::Cancelled);
    assert_eq!(executions(&s), 1, "only the first ran");
    c.cancel(&first.receipt.operation_id).await.unwrap();
    until("the process is gone", || processes_with(&m).is_empty()).await;
}

#[tokio::test]
async fn expiry_is_410_and_terminal() {
    let s = server(|c| c.retention = Duration::from_secs(2)).await;
    let c = client(&s.base_url(), ALICE);
    let mut op = Operation::new(key("expire"), bash("true")).unwrap();
    assert_eq!(ran(&run(&c, &mut op).await), ("", 0));
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let id = op.operation_id.clone().unwrap();
    for e in [
        c.status(&id, None).await.unwrap_err(),
        c.result(&id).await.unwrap_err(),
    ] {
        assert_eq!(
            (e.status(), e.code()),
            (Some(WireStatus::Http(410)), Some(codes::OPERATION_EXPIRED))
        );
    }
    let mut resumed =
        Operation::resume(op.key(), op.request().clone(), &id, op.etag.clone()).unwrap();
    assert_eq!(
        run(&c, &mut resumed).await,
        Terminal::Expired { operation_id: id }
    );
    assert_eq!(resumed.stats.submits, 0);
    // An expired operation no longer binds its key: the same key starts a new one.
    let again = c.submit(op.key(), op.request()).await.unwrap();
    assert_ne!(Some(again.receipt.operation_id), op.operation_id);
}

#[tokio::test]
async fn a_program_longer_than_the_exchange_bound_completes_through_short_exchanges() {
    let s = server(|_| {}).await;
    let bound = execseam_chrono::DurablePolicy {
        exchange_timeout: Duration::from_secs(1),
        ..policy()
    };
    let c = DurableClient::new(chrono_config(&s.base_url(), ALICE).policy(bound)).unwrap();
    let mut op = Operation::new(key("long"), bash("sleep 3; echo finished")).unwrap();
    let t0 = std::time::Instant::now();
    assert_eq!(ran(&run(&c, &mut op).await), ("finished\n", 0));
    assert!(t0.elapsed() >= Duration::from_secs(3));
    assert_eq!(op.stats.timeouts, 0, "{:?}", op.stats);
    assert!(
        op.stats.longest_exchange < Duration::from_secs(1),
        "{:?}",
        op.stats
    );
    // The waits honour the server's Retry-After of 1 s, capped by the policy.
    assert!(op.stats.waits.iter().all(|w| *w <= Duration::from_secs(30)));
}

#[tokio::test]
async fn timeouts_limits_and_a_disabled_async_handler_are_typed() {
    let s = server(|c| {
        c.max_operations = 1;
        c.max_running = 1;
    })
    .await;
    let c = client(&s.base_url(), ALICE);
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
    // One active operation at most: the second is 429 with Retry-After.
    let m = marker();
    let first = c
        .submit(&key("one"), &bash(&format!("sleep {m}")))
        .await
        .unwrap();
    let e = c.submit(&key("two"), &bash("true")).await.unwrap_err();
    assert_eq!(
        (e.kind(), e.status(), e.code()),
        (
            ErrorKind::RateLimited,
            Some(WireStatus::Http(429)),
            Some(codes::EXECUTION_CAPACITY_EXCEEDED)
        )
    );
    assert_eq!(e.retry().after(), Some(Duration::from_secs(1)));
    // The one slot is taken: a synchronous call is 429 too.
    until("the program runs", || !processes_with(&m).is_empty()).await;
    let sync = ChronoExec::new(chrono_config(&s.base_url(), ALICE)).unwrap();
    let e = sync
        .exec(Command::new(["true"]).unwrap())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::RateLimited, "{e}");
    c.cancel(&first.receipt.operation_id).await.unwrap();
    // A synchronous timeout is 504 SANDBOX_TIMEOUT.
    let sync = ChronoExec::new(chrono_config(&s.base_url(), ALICE).timeout_secs(1)).unwrap();
    until("the slot is free", || processes_with(&m).is_empty()).await;
    let e = sync
        .exec(Command::new(["sleep", "5"]).unwrap())
        .await
        .unwrap_err();
    assert_eq!(
        e.kind(),
        ErrorKind::Timeout(execseam_core::Deadline::Command),
        "{e}"
    );
    s.stop().await;

    let off = server(|c| c.async_enabled = false).await;
    let e = client(&off.base_url(), ALICE)
        .run(&key("off"), &bash("true"))
        .await
        .unwrap_err();
    assert_eq!(
        (e.kind(), e.retry(), e.code()),
        (
            ErrorKind::Unsupported,
            Retry::Never,
            Some(codes::ASYNC_EXECUTION_UNAVAILABLE)
        )
    );
}

#[tokio::test]
async fn every_language_runs_through_both_paths_and_the_chrono_adapter_works_over_serve() {
    let s = server(|_| {}).await;
    let c = client(&s.base_url(), ALICE);
    let sync = ChronoExec::new(chrono_config(&s.base_url(), ALICE)).unwrap();
    for (lang, src, want) in [
        (
            Language::Python,
            "import sys; print('py'); sys.stderr.write('e'); sys.exit(4)",
            "py\n",
        ),
        (
            Language::Javascript,
            "console.log('js'); process.stderr.write('e'); process.exit(4)",
            "js\n",
        ),
        (Language::Bash, "echo sh; printf e >&2; exit 4", "sh\n"),
    ] {
        let out = sync
            .execute(&ExecuteRequest::new(lang, src, 30))
            .await
            .unwrap();
        assert_eq!(
            (out.stdout.as_ref(), out.stderr.as_ref(), out.exit),
            (want.as_bytes(), &b"e"[..], Exit::Code(4)),
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
            (
                output.stdout.as_str(),
                output.stderr.as_str(),
                output.exit_code
            ),
            (want, "e", 4),
            "{lang}"
        );
        assert_eq!(
            error.map(|e| e.code),
            Some(codes::EXECUTION_FAILED.to_owned())
        );
    }
    // TypeScript runs on plain node (Node 20 here, no tsx): its types are stripped by the server.
    let ts = ExecuteRequest::new(
        Language::Typescript,
        "const x: number = 6*7; console.log(x)",
        30,
    );
    let out = sync.execute(&ts).await.unwrap();
    assert_eq!(
        (out.stdout.as_ref(), out.exit),
        (&b"42\n"[..], Exit::Code(0))
    );
    let t = c.run(&key("ts-42"), &ts).await.unwrap();
    let Terminal::Ran { output, error, .. } = t else {
        panic!("typescript: {t:?}")
    };
    assert_eq!(
        (output.stdout.as_str(), output.exit_code, error),
        ("42\n", 0, None)
    );
    // A sandbox without the language's interpreter: INVALID_REQUEST, never an exit code (a
    // PATH without python, so the launcher finds no python3).
    // (A PATH of the system's tools but python: the durable path's process spool needs them.)
    let bare = tempfile::tempdir().unwrap();
    for dir in ["/bin", "/usr/bin"] {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let name = e.file_name();
            let link = bare.path().join(&name);
            if !name.to_string_lossy().starts_with("python") && !link.exists() {
                let _ = std::os::unix::fs::symlink(e.path(), link);
            }
        }
    }
    let mut py = ExecuteRequest::new(Language::Python, "print(1)", 30);
    py.env
        .insert("PATH".into(), bare.path().to_str().unwrap().into());
    let e = sync.execute(&py).await.unwrap_err();
    assert_eq!(e.code(), Some("INVALID_REQUEST"), "{e}");
    assert!(e.message().contains("no python runtime"), "{e}");
    let t = c.run(&key("no-python"), &py).await.unwrap();
    assert!(
        matches!(&t, Terminal::Failed { error, .. } if error.code == "INVALID_REQUEST"),
        "{t:?}"
    );
    // The adapter's argv commands (exact quoting, env, stdin, workdir) over /execute…
    let cmd = Command::builder([
        "sh",
        "-c",
        "printf '%s|%s|' \"$1\" \"$GREETING\"; cat; pwd",
        "x",
        "a 'b' \"c\"",
    ])
    .env("GREETING", "hi there")
    .stdin(&b"from stdin"[..])
    .workdir("/tmp")
    .build()
    .unwrap();
    let out = sync.exec(cmd.clone()).await.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "a 'b' \"c\"|hi there|from stdin/tmp\n"
    );
    // …and over the durable path.
    let durable = ChronoExec::new(chrono_config(&s.base_url(), ALICE).durable(true)).unwrap();
    let out = durable.exec(cmd).await.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "a 'b' \"c\"|hi there|from stdin/tmp\n"
    );
}

#[tokio::test]
async fn the_stream_route_healthz_and_metrics() {
    let s = server(|_| {}).await;
    let base = s.base_url();
    let (st, h, body) = raw(
        &base,
        reqwest::Method::POST,
        "/execute/stream",
        &[("authorization", &format!("Bearer {ALICE}"))],
        r#"{"language":"bash","script":"echo out; echo err >&2; exit 2"}"#,
    )
    .await;
    assert_eq!(st, 200);
    assert_eq!(h.get("content-type").unwrap(), "text/event-stream");
    let events: Vec<serde_json::Value> = body
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let text = |t: &str| {
        events
            .iter()
            .filter(|e| e["type"] == t)
            .map(|e| e["text"].as_str().unwrap().to_owned())
            .collect::<String>()
    };
    assert_eq!(
        (text("stdout").as_str(), text("stderr").as_str()),
        ("out\n", "err\n")
    );
    let last = events.last().unwrap();
    assert_eq!(
        (last["type"].as_str(), last["exit_code"].as_i64()),
        (Some("complete"), Some(2))
    );

    let c = client(&base, ALICE);
    c.run(&key("m"), &bash("true")).await.unwrap();
    let (st, _, health) = raw(&base, reqwest::Method::GET, "/healthz", &[], "").await;
    assert_eq!(st, 200, "{health}");
    let health: serde_json::Value = serde_json::from_str(&health).unwrap();
    assert_eq!(
        (
            health["status"].as_str(),
            health["store"].as_str(),
            health["adapter"].as_str()
        ),
        (Some("ok"), Some("sqlite"), Some("local"))
    );
    let (st, h, m) = raw(&base, reqwest::Method::GET, "/metrics", &[], "").await;
    assert_eq!(st, 200);
    assert!(
        h.get("content-type")
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    for want in [
        "execseam_operations{status=\"succeeded\"} 1",
        "execseam_operations{status=\"queued\"} 0",
        "execseam_exec_duration_seconds_count 2",
        "execseam_store_query_duration_seconds_bucket{le=\"+Inf\"}",
        "execseam_http_requests_total{route=\"submit\",code=\"202\"} 1",
        "execseam_store_up 1",
    ] {
        assert!(m.contains(want), "{want} not in\n{m}");
    }
}
