//! `cargo xtask bench` (`cargo bench -p execseam-server --bench load`): 1,000 submits with 64 in
//! flight against `serve --adapter local`, on SQLite and on PostgreSQL, side by side in one run.
//!
//! Each program appends its own number to one log file (`O_APPEND`, one short line: atomic), so
//! executions are counted on the host, not by the server: **lost** = submitted operations that
//! did not end `succeeded` with their line in the log; **duplicates** = numbers logged more than
//! once. One submit in ten is repeated with the same key after its operation ended (a client
//! retry): it must converge on the same operation and run nothing. Reported: p50/p99 latency of
//! the first submit, and end-to-end throughput (first submit to last terminal status).
//!
//! PostgreSQL comes from `.ci/postgres start` (target/postgres/env); without it the bench fails
//! and says so. The client, the server and the programs share this machine's cores.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use execseam_chrono::durable::{Sleep, StatusAnswer};
use execseam_chrono::{ChronoConfig, DurableClient, DurablePolicy};
use execseam_chrono_contract::wire::{self, ExecuteRequest, Language, Status};
use execseam_core::BoxFuture;
use execseam_server::{Config, Server};

/// 1000 submits; 200 under `EXECSEAM_BENCH_QUICK=1` (a smoke run).
fn submits() -> usize {
    if std::env::var("EXECSEAM_BENCH_QUICK").is_ok_and(|v| v == "1") {
        200
    } else {
        1000
    }
}
const IN_FLIGHT: usize = 64;

struct Short;

impl Sleep for Short {
    fn sleep(&self, d: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(d.min(Duration::from_millis(20))))
    }
}

fn postgres_admin_url() -> Result<String, String> {
    if let Ok(u) = std::env::var("EXECSEAM_TEST_POSTGRES_URL") {
        return Ok(u);
    }
    let env = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/postgres/env");
    std::fs::read_to_string(&env)
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("EXECSEAM_TEST_POSTGRES_URL=").map(|u| u.trim().to_owned()))
        })
        .ok_or_else(|| {
            format!(
                "no PostgreSQL: EXECSEAM_TEST_POSTGRES_URL is unset and {} is missing; run `.ci/postgres start`",
                env.display()
            )
        })
}

async fn postgres_db() -> Result<String, String> {
    use sqlx::Connection as _;
    let admin = postgres_admin_url()?;
    sqlx::any::install_default_drivers();
    let mut c = sqlx::AnyConnection::connect(&admin)
        .await
        .map_err(|e| format!("cannot reach PostgreSQL ({e}); run `.ci/postgres start`"))?;
    let db = format!(
        "bench_{}",
        execseam_chrono_contract::contract::random_hex(10)
    );
    sqlx::Executor::execute(&mut c, format!("CREATE DATABASE {db}").as_str())
        .await
        .map_err(|e| e.to_string())?;
    Ok(format!("{}/{db}", admin.rsplit_once('/').unwrap().0))
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

async fn load(name: &str, store: String) -> Result<(), String> {
    let total = submits();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/bench-load");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let log = dir.join(format!(
        "{name}-{}.log",
        execseam_chrono_contract::contract::random_hex(8)
    ));
    let mut config = Config::new(store);
    config.listen = "127.0.0.1:0".parse().unwrap();
    config.max_operations = total + 64;
    config.max_running = 16;
    let server = Server::start(config).await?;
    let client = Arc::new(
        DurableClient::new(ChronoConfig::new(server.base_url()).token("bench").policy(
            DurablePolicy {
                default_retry_after: Duration::from_millis(20),
                ..DurablePolicy::default()
            },
        ))
        .map_err(|e| e.to_string())?
        .with_sleep(Arc::new(Short)),
    );
    let next = Arc::new(AtomicUsize::new(0));
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..IN_FLIGHT {
        let (client, next, log) = (client.clone(), next.clone(), log.clone());
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= total {
                    return Ok::<_, String>(mine);
                }
                let req = ExecuteRequest::new(
                    Language::Bash,
                    format!("echo {n} >> '{}'", log.display()),
                    60,
                );
                let key = wire::operation_key(&[
                    b"bench",
                    n.to_string().as_bytes(),
                    log.to_string_lossy().as_bytes(),
                ]);
                let s = Instant::now();
                let id = client
                    .submit(&key, &req)
                    .await
                    .map_err(|e| format!("submit {n}: {e}"))?
                    .receipt
                    .operation_id;
                let submit = s.elapsed();
                let mut etag: Option<String> = None;
                let status = loop {
                    match client
                        .status(&id, etag.as_deref())
                        .await
                        .map_err(|e| format!("status {n}: {e}"))?
                    {
                        StatusAnswer::Snapshot {
                            snapshot, etag: e, ..
                        } => {
                            if snapshot.status.is_terminal() {
                                break snapshot.status;
                            }
                            etag = Some(e);
                        }
                        StatusAnswer::NotModified { .. } => {}
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                };
                let replay = if n % 10 == 0 {
                    Some(
                        client
                            .submit(&key, &req)
                            .await
                            .map_err(|e| format!("replay {n}: {e}"))?
                            .receipt
                            .operation_id
                            == id,
                    )
                } else {
                    None
                };
                mine.push((n, submit, status, replay));
            }
        }));
    }
    let mut rows = Vec::new();
    for t in tasks {
        rows.extend(t.await.map_err(|e| e.to_string())??);
    }
    let wall = t0.elapsed();
    // Let any stray duplicate execution land before counting.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let mut runs: BTreeMap<usize, usize> = BTreeMap::new();
    for l in text.lines() {
        *runs
            .entry(
                l.trim()
                    .parse()
                    .map_err(|_| format!("bad log line {l:?}"))?,
            )
            .or_default() += 1;
    }
    let lost = rows
        .iter()
        .filter(|(n, _, st, _)| *st != Status::Succeeded || !runs.contains_key(n))
        .count()
        + total.saturating_sub(rows.len());
    let duplicates: usize = runs.values().map(|c| c - 1).sum();
    let replays = rows.iter().filter(|r| r.3.is_some()).count();
    let replays_diverged = rows.iter().filter(|r| r.3 == Some(false)).count();
    let mut lat: Vec<Duration> = rows.iter().map(|r| r.1).collect();
    lat.sort();
    let execs = server.node().metrics.executions.load(Ordering::Relaxed);
    println!(
        "load/{name}: {total} submits, {IN_FLIGHT} in flight: lost {lost}, duplicate executions {duplicates} \
         (executions logged {}, server-counted {execs}), replays {replays} (diverged {replays_diverged}); \
         submit p50 {:.1} ms, p99 {:.1} ms; end-to-end {:.1} ops/s ({:.2} s)",
        runs.len(),
        pct(&lat, 0.50).as_secs_f64() * 1e3,
        pct(&lat, 0.99).as_secs_f64() * 1e3,
        total as f64 / wall.as_secs_f64(),
        wall.as_secs_f64(),
    );
    if std::env::var_os("EXECSEAM_BENCH_ROWS").is_some() {
        // One row of `cargo xtask bench`'s table (xtask's `bench::Row::parse`): p99 against p50.
        println!(
            "ROW\tP5\tserve load ({name}): {total} submits, {IN_FLIGHT} in flight\tsubmit p99\t{:.3}\t-\tsubmit p50\t{:.3}\t-\t{total}\t5\tlost {lost}, duplicate executions {duplicates}, replays diverged {replays_diverged}; end-to-end {:.1} ops/s",
            pct(&lat, 0.99).as_secs_f64() * 1e3,
            pct(&lat, 0.50).as_secs_f64() * 1e3,
            total as f64 / wall.as_secs_f64(),
        );
    }
    server.stop().await;
    let _ = std::fs::remove_file(&log);
    if lost > 0 || duplicates > 0 || replays_diverged > 0 || execs != total as u64 {
        return Err(format!("load/{name}: lost or duplicated operations"));
    }
    Ok(())
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // nothing for `cargo test --benches` to list
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let result = rt.block_on(async {
        let sqlite = format!(
            "sqlite://{}",
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join(format!(
                    "../../target/bench-load/load-{}.db",
                    execseam_chrono_contract::contract::random_hex(8)
                ))
                .display()
        );
        std::fs::create_dir_all(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/bench-load"),
        )
        .map_err(|e| e.to_string())?;
        load("sqlite", sqlite).await?;
        match postgres_db().await {
            Ok(db) => load("postgres", db).await,
            // In `cargo xtask bench`'s table, a missing PostgreSQL is a row that says so.
            Err(e) if std::env::var_os("EXECSEAM_BENCH_ROWS").is_some() => {
                println!(
                    "ROW\tP5\tserve load (postgres)\t-\t-\t-\t-\t-\t-\t0\t-\tnot measured: {e}"
                );
                Ok(())
            }
            Err(e) => Err(e),
        }
    });
    if let Err(e) = result {
        eprintln!("{e}");
        std::process::exit(1);
    }
}
