//! Two `execseam-server serve` processes on one PostgreSQL (`.ci/postgres start`): an operation
//! submitted to one is served (status, result, cancel) by the other; the cancel reaches the
//! owner through the store and kills the command; an operation whose owner is killed -9 is
//! found by lease expiry and reconciled by the survivor as `outcome_uncertain` (local adapter,
//! its supervisor killed too, so nothing recorded an exit),
//! or reattached by the survivor and cancelled through it, the cancel killing the command in the
//! sandbox (E2B adapter, its emulator in this test process).

mod common;

use std::time::Duration;

use common::*;
use execseam_chrono::durable::ResultAnswer;
use execseam_chrono::{Operation, Terminal};
use execseam_chrono_contract::wire::{Completion, Status, codes};

fn args(store: &str, tokens: &std::path::Path, replica: &str) -> Vec<String> {
    args_for("local", store, tokens, replica)
}

fn args_for(adapter: &str, store: &str, tokens: &std::path::Path, replica: &str) -> Vec<String> {
    serve_args(&[
        ("--adapter", adapter),
        ("--store", store),
        ("--tokens", tokens.to_str().unwrap()),
        ("--replica-id", replica),
        ("--lease-secs", "2"),
    ])
}

async fn owner_of(store: &str, id: &str) -> Option<String> {
    use sqlx::{Connection as _, Row as _};
    let mut c = sqlx::AnyConnection::connect(store).await.unwrap();
    sqlx::query("SELECT lease_owner FROM operations WHERE id = $1")
        .bind(id.to_owned())
        .fetch_one(&mut c)
        .await
        .unwrap()
        .try_get("lease_owner")
        .unwrap()
}

#[tokio::test]
async fn one_replica_serves_what_the_other_runs_and_cancels_through_the_store() {
    let store = postgres_db("serve").await;
    let tokens = token_file();
    let a = Proc::spawn(&args(&store, &tokens, "replica-a"));
    let b = Proc::spawn(&args(&store, &tokens, "replica-b"));
    let (ca, cb) = (client(&a.base_url, ALICE), client(&b.base_url, ALICE));

    // Submitted to A, read through B (status with ETag, then the result).
    let req = bash("echo from-a; exit 2");
    let id = ca
        .submit(&key("ab"), &req)
        .await
        .unwrap()
        .receipt
        .operation_id;
    let mut op = Operation::resume(key("ab2"), req.clone(), &id, None).unwrap();
    let t = run(&cb, &mut op).await;
    assert!(
        matches!(&t, Terminal::Ran { output, .. } if output.stdout == "from-a\n" && output.exit_code == 2),
        "{t:?}"
    );
    let ResultAnswer::Ready(Completion::Ran { output, .. }) = cb.result(&id).await.unwrap() else {
        panic!()
    };
    assert_eq!(output.stdout, "from-a\n");
    // Idempotency holds across replicas: the same key on B is the same operation.
    let k = key("same");
    let x = ca.submit(&k, &req).await.unwrap().receipt.operation_id;
    assert_eq!(cb.submit(&k, &req).await.unwrap().receipt.operation_id, x);
    assert_eq!(
        cb.submit(&k, &bash("true")).await.unwrap_err().code(),
        Some(codes::IDEMPOTENCY_KEY_REUSE)
    );

    // A long program, whichever replica claimed it, is cancelled through the other one.
    let m = marker();
    let long = bash(&format!("sleep {m}"));
    let id = ca
        .submit(&key("long"), &long)
        .await
        .unwrap()
        .receipt
        .operation_id;
    until("the program runs", || !processes_with(&m).is_empty()).await;
    let holder = owner_of(&store, &id).await.expect("leased");
    let other = if holder == "replica-a" { &cb } else { &ca };
    let mut op = Operation::resume(key("l"), long, &id, None).unwrap();
    op.request_cancel();
    ended_with(&run(other, &mut op).await, codes::EXECUTION_CANCELLED);
    until("the process is gone", || processes_with(&m).is_empty()).await;
    drop((a, b));
}

#[tokio::test]
async fn a_dead_owner_is_found_by_lease_expiry_and_reconciled_by_the_survivor() {
    let store = postgres_db("lease").await;
    let tokens = token_file();
    let mut a = Proc::spawn(&args(&store, &tokens, "replica-a"));
    let ca = client(&a.base_url, ALICE);
    let m = marker();
    let long = bash(&format!("sleep {m}"));
    let k = key("dies");
    let id = ca.submit(&k, &long).await.unwrap().receipt.operation_id;
    until("the program runs", || !processes_with(&m).is_empty()).await;
    assert_eq!(owner_of(&store, &id).await.as_deref(), Some("replica-a"));
    // B starts with A alive: it must not touch A's operation while A's lease is renewed.
    let b = Proc::spawn(&args(&store, &tokens, "replica-b"));
    let cb = client(&b.base_url, ALICE);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let s = cb.status(&id, None).await.unwrap();
    let execseam_chrono::durable::StatusAnswer::Snapshot { snapshot, .. } = s else {
        panic!()
    };
    assert_eq!(snapshot.status, Status::Running, "A renews its lease");

    a.kill9();
    // The program is detached (process handles): without its supervisor nothing records an
    // exit, and that is the case this test is about.
    assert_eq!(kill_supervisors_then_programs(&m), 1);
    let t0 = std::time::Instant::now();
    let mut op = Operation::resume(k.clone(), long.clone(), &id, None).unwrap();
    ended_with(&run(&cb, &mut op).await, codes::OUTCOME_UNCERTAIN);
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "found within a few leases: {:?}",
        t0.elapsed()
    );
    assert!(processes_with(&m).is_empty(), "never run again");
    // Same key, same payload: still that operation.
    assert_eq!(cb.submit(&k, &long).await.unwrap().receipt.operation_id, id);
    let out = b.output();
    assert!(!out.contains(ALICE), "{out}");
}

#[tokio::test]
async fn a_dead_owners_e2b_command_is_reattached_by_the_survivor_and_its_cancel_kills_it() {
    let emu = execseam_emulators::e2b::E2bEmulator::start(Default::default())
        .await
        .unwrap();
    let store = postgres_db("reattach").await;
    let tokens = token_file();
    let mut a = Proc::spawn_with_env(&args_for("e2b", &store, &tokens, "replica-a"), &emu.env());
    let ca = client(&a.base_url, ALICE);
    let long = bash("echo run >>/tmp/runs; echo started; sleep 600; echo never");
    let k = key("e2b-dies");
    let id = ca.submit(&k, &long).await.unwrap().receipt.operation_id;
    until("the sandbox exists", || emu.sandbox_ids().len() == 1).await;
    let sandbox = emu.sandbox_ids()[0].clone();
    let runs = emu.host_path(&sandbox, "/tmp/runs").unwrap();
    until("the command runs", || runs.exists()).await;
    assert_eq!(owner_of(&store, &id).await.as_deref(), Some("replica-a"));
    let b = Proc::spawn_with_env(&args_for("e2b", &store, &tokens, "replica-b"), &emu.env());
    let cb = client(&b.base_url, ALICE);

    a.kill9();
    // B finds the expired lease and takes the operation over instead of giving up on it.
    let (s, i) = (&store, &id);
    poll(400, || async move {
        owner_of(s, i).await.as_deref() == Some("replica-b")
    })
    .await;
    assert_eq!(owner_of(&store, &id).await.as_deref(), Some("replica-b"));
    assert!(b.output().contains("reattaching"), "{}", b.output());
    assert_eq!(
        std::fs::read_to_string(&runs).unwrap(),
        "run\n",
        "the program was started exactly once, never re-run"
    );

    let mut op = Operation::resume(k.clone(), long.clone(), &id, None).unwrap();
    op.request_cancel();
    ended_with(&run(&cb, &mut op).await, codes::EXECUTION_CANCELLED);
    // Cancelled (not uncertain) means the kill was confirmed: the spool recorded the exit of
    // the killed process group.
    // The sandbox is destroyed after.
    until("the sandbox is gone", || emu.sandbox_ids().is_empty()).await;
}
