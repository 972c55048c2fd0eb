//! Helpers shared by the server's tests.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use execseam_chrono::durable::Sleep;
use execseam_chrono::{ChronoConfig, DurableClient, DurablePolicy, Operation, Terminal};
use execseam_chrono_contract::wire::{self, ExecuteRequest, Language};
use execseam_core::BoxFuture;
use secrecy::SecretString;

pub const ALICE: &str = "alice-token-0123456789";
pub const BOB: &str = "bob-token-9876543210";

/// A fresh path under the target's temporary directory.
pub fn tmp(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("server-tests");
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(format!(
        "{name}-{}-{}",
        std::process::id(),
        execseam_chrono_contract::contract::random_hex(8)
    ))
}

pub fn sqlite_url(name: &str) -> String {
    format!("sqlite://{}", tmp(name).with_extension("db").display())
}

/// The token file for ALICE and BOB.
pub fn token_file() -> PathBuf {
    let p = tmp("tokens");
    let h = |t: &str| execseam_server::auth::hash_token(&SecretString::from(t.to_owned()));
    std::fs::write(
        &p,
        format!("# owner hash\nalice {}\nbob {}\n", h(ALICE), h(BOB)),
    )
    .unwrap();
    p
}

/// A config with ALICE and BOB, on a free loopback port.
pub fn config(store: String) -> execseam_server::Config {
    let mut c = execseam_server::Config::new(store);
    let mut tokens = execseam_server::auth::Tokens::new();
    tokens
        .insert_token("alice", &SecretString::from(ALICE.to_owned()))
        .unwrap();
    tokens
        .insert_token("bob", &SecretString::from(BOB.to_owned()))
        .unwrap();
    c.tokens = Some(tokens);
    c.listen = "127.0.0.1:0".parse().unwrap();
    c
}

pub fn policy() -> DurablePolicy {
    DurablePolicy {
        default_retry_after: Duration::from_millis(100),
        ..DurablePolicy::default()
    }
}

/// Sleeps at most 50 ms of what the loop asks for (the server's Retry-After is 1 s).
#[derive(Default)]
pub struct Quick(pub Mutex<Vec<Duration>>);

impl Sleep for Quick {
    fn sleep(&self, d: Duration) -> BoxFuture<'static, ()> {
        self.0.lock().unwrap().push(d);
        Box::pin(tokio::time::sleep(d.min(Duration::from_millis(50))))
    }
}

pub fn chrono_config(base: &str, token: &str) -> ChronoConfig {
    ChronoConfig::new(base).token(token).policy(policy())
}

pub fn client(base: &str, token: &str) -> DurableClient {
    DurableClient::new(chrono_config(base, token))
        .unwrap()
        .with_sleep(Arc::new(Quick::default()))
}

pub fn bash(script: &str) -> ExecuteRequest {
    ExecuteRequest::new(Language::Bash, script, 60)
}

pub fn key(name: &str) -> String {
    wire::operation_key(&[
        name.as_bytes(),
        execseam_chrono_contract::contract::random_hex(16).as_bytes(),
    ])
}

pub async fn run(client: &DurableClient, op: &mut Operation) -> Terminal {
    client
        .run_operation(op, std::future::pending())
        .await
        .expect("a terminal outcome")
}

pub fn ran(t: &Terminal) -> (&str, i32) {
    match t {
        Terminal::Ran { output, .. } => (output.stdout.as_str(), output.exit_code),
        other => panic!("not Ran: {other:?}"),
    }
}

/// Host processes whose command line contains `marker`.
pub use execseam_test_util::probe::processes_with;

/// Kills (SIGKILL) every process whose command line holds `marker`, the spool's supervisors
/// first (their script takes the `ln -s` lock) and then the program: nothing is left to record
/// an exit, so the outcome of a detached command is unknown. Returns how many supervisors it
/// found.
pub fn kill_supervisors_then_programs(marker: &str) -> usize {
    let is_supervisor = |pid: &u32| {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains("ln -s"))
    };
    let (supervisors, programs): (Vec<u32>, Vec<u32>) =
        processes_with(marker).into_iter().partition(is_supervisor);
    let n = supervisors.len();
    for pid in supervisors.into_iter().chain(programs) {
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
    }
    n
}

/// The snapshot of a run that ended without a result of its own: `Cancelled` with
/// `EXECUTION_CANCELLED`, or `OutcomeUncertain` with `OUTCOME_UNCERTAIN` (`code` says which);
/// panics on any other terminal, one without a snapshot, or another failure code.
pub fn ended_with<'a>(t: &'a Terminal, code: &str) -> &'a wire::Snapshot {
    let snapshot = match t {
        Terminal::Cancelled {
            snapshot: Some(s), ..
        } if code == wire::codes::EXECUTION_CANCELLED => s,
        Terminal::OutcomeUncertain {
            snapshot: Some(s), ..
        } if code == wire::codes::OUTCOME_UNCERTAIN => s,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        snapshot.failure.as_ref().map(|f| f.code.as_str()),
        Some(code)
    );
    snapshot
}

/// `serve` arguments: each flag with its value, then `--listen` on a free loopback port.
pub fn serve_args(flags: &[(&str, &str)]) -> Vec<String> {
    let listen = format!("127.0.0.1:{}", free_port());
    let mut args = Vec::new();
    for (flag, value) in flags.iter().copied().chain([("--listen", listen.as_str())]) {
        args.extend([flag.to_owned(), value.to_owned()]);
    }
    args
}

/// Awaits `f` every 25 ms until it holds, `tries` times at the most (the caller asserts what
/// it waited for).
pub async fn poll<F: Future<Output = bool>>(tries: u32, mut f: impl FnMut() -> F) {
    for _ in 0..tries {
        if f().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

pub async fn until(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..400 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("timed out waiting for {what}");
}

/// `sleep 3600.<digits>`: a command line no other process has.
pub fn marker() -> String {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("3600.{n:09}{}", std::process::id())
}

/// A `execseam-server serve` process; its stdout and stderr are collected.
pub struct Proc {
    pub child: Child,
    pub base_url: String,
    pub output: Arc<Mutex<String>>,
}

impl Proc {
    /// Spawns the real binary with `args` after `serve`, and waits for its listening line.
    pub fn spawn(args: &[String]) -> Proc {
        Proc::spawn_with_env(args, &[])
    }

    /// [`Proc::spawn`] with more environment variables.
    pub fn spawn_with_env(args: &[String], env: &[(String, String)]) -> Proc {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_execseam-server"))
            .arg("serve")
            .args(args)
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the server binary starts");
        let output = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let out = child.stdout.take().unwrap();
        let err = child.stderr.take().unwrap();
        for (stream, tx) in [
            (Box::new(out) as Box<dyn std::io::Read + Send>, Some(tx)),
            (Box::new(err), None),
        ] {
            let output = output.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines().map_while(Result::ok) {
                    output.lock().unwrap().push_str(&format!("{line}\n"));
                    if let Some(tx) = &tx
                        && let Some(rest) = line.split("listening on ").nth(1)
                    {
                        let _ = tx.send(rest.split(' ').next().unwrap_or("").to_owned());
                    }
                }
            });
        }
        let base_url = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(u) => u,
            Err(_) => {
                let _ = child.kill();
                panic!("the server did not start: {}", output.lock().unwrap());
            }
        };
        Proc {
            child,
            base_url,
            output,
        }
    }

    /// SIGKILL, and wait for it.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    pub fn output(&self) -> String {
        self.output.lock().unwrap().clone()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free loopback port.
pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// The test PostgreSQL's administrator URL: the machine's (`EXECSEAM_TEST_POSTGRES_URL`), else
/// the repository's, which the first test that needs it starts (`.ci/postgres start`, stopped
/// when the test process ends).
pub fn postgres_url() -> String {
    execseam_test_util::fixtures::postgres()
        .var("EXECSEAM_TEST_POSTGRES_URL")
        .expect("the fixture names its URL")
}

/// A fresh database on the test PostgreSQL (`.ci/postgres start`), as a URL.
pub async fn postgres_db(name: &str) -> String {
    use sqlx::Connection as _;
    let admin = postgres_url();
    sqlx::any::install_default_drivers();
    let mut conn = sqlx::AnyConnection::connect(&admin)
        .await
        .unwrap_or_else(|e| panic!("cannot reach the test PostgreSQL at {admin} ({e})"));
    let db = format!(
        "t_{name}_{}",
        execseam_chrono_contract::contract::random_hex(10)
    );
    sqlx::Executor::execute(&mut conn, format!("CREATE DATABASE {db}").as_str())
        .await
        .unwrap();
    let base = admin.rsplit_once('/').unwrap().0;
    format!("{base}/{db}")
}

/// A plain HTTP client (rustls with ring, as everywhere in the workspace).
pub fn http_client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}
