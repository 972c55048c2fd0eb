//! The benchmark suite behind `cargo xtask bench` (which prints its rows as one table and writes
//! `docs/performance.md`). Every row is A against B measured alternating in this one run, against
//! the same emulator process; each prints as one `ROW\t...` line (the format is xtask's
//! `bench::Row::parse`), everything else is progress.
//!
//! - **P1**, every emulator-backed adapter in the reliability suite's table (`tests/setups`): the
//!   adapter's exec of `/bin/true` against a raw client replaying the adapter's own request on
//!   the same stack (reqwest, same HTTP version, same emulator). The request is captured once
//!   through a recording proxy; where an exec is more than one request (later ones carry ids
//!   the first answer assigned) or a WebSocket, a replay would not do the same work, and the row
//!   says so.
//! - **P2**, every provider with an official Python SDK under `target/interop`: the adapter
//!   against the SDK running `/bin/true` (a program on both sides: see [`PROGRAM`]) in the same
//!   sandbox of the same emulator, both through one chaos proxy (which counts the requests:
//!   round trips per exec), on loopback and with `*=delay:25` (25 ms before every request);
//!   latency (alternating pairs) and time per exec at 64 concurrent (alternating rounds).
//! - **P3**, the local adapter against raw `tokio::process`, and the CLI's start-up
//!   (`execseam --version`, `EXECSEAM_BENCH_CLI`) against `/bin/true`: alternating in-process,
//!   and with hyperfine when it is on PATH.
//! - **P4**, `Tools::glob` over a real generated tree (1000 × 1000 files under `target/`, made
//!   once by `cargo xtask bench` while it builds: `EXECSEAM_BENCH_TREE`) through the local
//!   adapter, against `find | sort | head` on the same tree.
//! - **P5**, 512 concurrent execs on one emulator through one handle, for every adapter: errors,
//!   p50, p99, peak RSS of this process (the client and the emulator share it).
//! - **P6**, keystroke to echo on a terminal, for the providers whose official SDK has one (E2B,
//!   Daytona, Modal): the adapter's terminal handle (one key written by offset, its echo seen on
//!   one attach stream kept open) against the SDK's own terminal (`sdk_driver.py` `key`), both
//!   running [`ECHO`] in the same sandbox, through P2's proxy, on loopback and with P2's
//!   injected latency.
//!
//! - **P7**, process handles, for every adapter that has them and local: a start of
//!   `/bin/true`, an attach from offset 0 read to its exit and a wait, against one exec of it
//!   (alternating, same handle); and for one adapter of each mechanism ([`P7_MEMORY`]) the
//!   growth of this process's RSS per live handle (512 started and held) against per exec in
//!   flight (512 at once).
//! - **P8**, sandbox state, for the providers whose official SDK has the operations
//!   ([`sdk_state`]): snapshot, create from a snapshot, fork, pause and resume, restore in
//!   place, through the adapter against the SDK (`sdk_driver.py` `snap`, `from`, ...) on the
//!   same sandbox of the same emulator, through P2's proxy, loopback, [`P8_PAIRS`] pairs; an
//!   operation the SDK lacks is a row with the reason.
//!
//! `EXECSEAM_BENCH_QUICK=1`: fewer pairs, 64 at once (a smoke run; xtask makes a 50,000-file tree).
//! `EXECSEAM_BENCH_ONLY=<adapter>`: P1/P2/P5-P8 for that adapter only (`local`: its P7);
//! `EXECSEAM_BENCH_SECTIONS=P1` (a comma-separated list): only those sections.
//! `EXECSEAM_BENCH_PAIRS=N`: N pairs per row instead of 200 (the table then says so in its `n`
//! column).

#[path = "../tests/setups/mod.rs"]
mod setups;

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use execseam_chaos::{ChaosProxy, parse_rules};
use execseam_core::{Command, Exec};
use execseam_reliability::{Knobs, Setup};
use http_body_util::BodyExt as _;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};

const IDLE: Duration = Duration::from_secs(120);

struct Plan {
    quick: bool,
    pairs: usize,
    burst: usize,
    concurrent: usize,
    concurrent_execs: usize,
    concurrent_rounds: usize,
    glob_rounds: usize,
    /// P2's latency rows with injected latency run this many providers at a time.
    lanes: usize,
}

impl Plan {
    fn from_env() -> Plan {
        let mut plan = Plan::defaults();
        if let Some(n) = std::env::var("EXECSEAM_BENCH_PAIRS")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            plan.pairs = n;
        }
        if let Some(n) = std::env::var("EXECSEAM_BENCH_LANES")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            plan.lanes = n;
        }
        plan
    }

    fn defaults() -> Plan {
        if std::env::var("EXECSEAM_BENCH_QUICK").is_ok_and(|v| v == "1") {
            Plan {
                quick: true,
                pairs: 20,
                burst: 64,
                concurrent: 16,
                concurrent_execs: 32,
                concurrent_rounds: 1,
                glob_rounds: 2,
                lanes: 3,
            }
        } else {
            Plan {
                quick: false,
                pairs: 200,
                burst: 512,
                concurrent: 64,
                concurrent_execs: 128,
                concurrent_rounds: 2,
                glob_rounds: 5,
                lanes: 3,
            }
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn quantile(v: &[Duration], q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut v = v.to_vec();
    v.sort();
    Some(ms(v[((v.len() - 1) as f64 * q).round() as usize]))
}

fn f(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.3}"))
}

/// When the last row was printed (or the suite started).
static ROW_CLOCK: Mutex<Option<Instant>> = Mutex::new(None);

/// One `ROW` line (xtask's `bench::Row::parse`).
#[allow(clippy::too_many_arguments)]
fn row(
    section: &str,
    name: &str,
    a: &str,
    av: &[Duration],
    b: &str,
    bv: &[Duration],
    n: usize,
    target: Option<f64>,
    note: &str,
) {
    let clean = |s: &str| s.replace(['\t', '\n'], " ");
    // Progress: how long this row took (since the previous one), for the run's time budget.
    let now = Instant::now();
    if let Some(t) = ROW_CLOCK.lock().expect("row clock").replace(now) {
        eprintln!("suite: {section} {name}: {:.1} s", (now - t).as_secs_f64());
    }
    println!(
        "ROW\t{section}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{n}\t{}\t{}",
        clean(name),
        clean(a),
        f(quantile(av, 0.5)),
        f(quantile(av, 0.9)),
        clean(b),
        f(quantile(bv, 0.5)),
        f(quantile(bv, 0.9)),
        target.map_or_else(|| "-".into(), |t| t.to_string()),
        clean(note)
    );
}

/// A row whose measurement could not be made, with the reason.
fn missing(section: &str, name: &str, why: &str) {
    row(
        section,
        name,
        "-",
        &[],
        "-",
        &[],
        0,
        None,
        &format!("not measured: {why}"),
    );
}

/// The program every row runs (sdk_driver.py's PROGRAM): a program on both sides of P2, where
/// `true` would be the shell's builtin for the SDKs that take a shell string (e2b, daytona,
/// agentcore) and a process for the adapter.
const PROGRAM: &str = "/bin/true";

fn cmd_true() -> Command {
    Command::new([PROGRAM]).expect("valid")
}

async fn exec_true(e: &dyn Exec) -> Result<Duration, String> {
    let t = Instant::now();
    let o = e.exec(cmd_true()).await.map_err(|e| e.to_string())?;
    let d = t.elapsed();
    if !o.exit.success() {
        return Err(format!("`{PROGRAM}` failed: {o:?}"));
    }
    Ok(d)
}

/// `n` pairs, A and B alternating (who goes first swaps every pair), after three warm-up pairs.
async fn alternate<A, B>(n: usize, a: A, b: B) -> Result<(Vec<Duration>, Vec<Duration>), String>
where
    A: AsyncFnMut() -> Result<Duration, String>,
    B: AsyncFnMut() -> Result<Duration, String>,
{
    alternate_warm(3, n, a, b).await
}

/// [`alternate`] with `warm` warm-up pairs.
async fn alternate_warm<A, B>(
    warm: usize,
    n: usize,
    mut a: A,
    mut b: B,
) -> Result<(Vec<Duration>, Vec<Duration>), String>
where
    A: AsyncFnMut() -> Result<Duration, String>,
    B: AsyncFnMut() -> Result<Duration, String>,
{
    for _ in 0..warm {
        a().await?;
        b().await?;
    }
    let (mut va, mut vb) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for i in 0..n {
        if i % 2 == 0 {
            va.push(a().await?);
            vb.push(b().await?);
        } else {
            vb.push(b().await?);
            va.push(a().await?);
        }
    }
    Ok((va, vb))
}

// ---------------------------------------------------------------------------------------------
// P1: the capture proxy and the raw replay

/// An upgraded connection's chunks in the order they passed: `(from the client, bytes)`.
type Relayed = Arc<Mutex<Vec<(bool, Vec<u8>)>>>;

#[derive(Clone)]
struct Captured {
    method: http::Method,
    path: String,
    version: http::Version,
    headers: http::HeaderMap,
    body: Arc<Mutex<Vec<u8>>>,
    upgrade: bool,
    /// The answer's body bytes (what a later request's server-assigned ids come from).
    answer: Arc<Mutex<Vec<u8>>>,
    /// An upgraded connection's bytes in the order they passed.
    relayed: Relayed,
    /// When the request arrived, and when the last of its answer passed.
    arrived: Instant,
    answered: Arc<Mutex<Option<Instant>>>,
}

/// Records every request (head and body bytes) and its answer's body, and forwards it, in its
/// HTTP version, to the upstream. An upgrade (a WebSocket, Docker's hijacked exec stream) is
/// forwarded too, and the bytes of the upgraded connection are recorded both ways, in order.
struct Capture {
    addr: std::net::SocketAddr,
    log: Arc<Mutex<Vec<Captured>>>,
    task: tokio::task::JoinHandle<()>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Capture {
    async fn start(upstream: &str) -> Capture {
        let authority = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_owned();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let log: Arc<Mutex<Vec<Captured>>> = Arc::default();
        let l = log.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let (log, authority) = (l.clone(), authority.clone());
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req: http::Request<Incoming>| {
                        let (log, authority) = (log.clone(), authority.clone());
                        async move {
                            let r = match capture_one(req, &log, &authority).await {
                                Ok(r) => r,
                                Err(e) => {
                                    let body =
                                        http_body_util::Full::new(Bytes::from(e.to_string()))
                                            .map_err(never)
                                            .boxed_unsync();
                                    let mut r = http::Response::new(body);
                                    *r.status_mut() = http::StatusCode::BAD_GATEWAY;
                                    r
                                }
                            };
                            Ok::<_, std::convert::Infallible>(r)
                        }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection_with_upgrades(TokioIo::new(tcp), svc)
                        .await;
                });
            }
        });
        Capture { addr, log, task }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn take(&self) -> Vec<Captured> {
        std::mem::take(&mut *self.log.lock().expect("capture log"))
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn boxed(e: hyper::Error) -> BoxError {
    Box::new(e)
}

fn never(e: std::convert::Infallible) -> BoxError {
    match e {}
}

type AnyBody = http_body_util::combinators::UnsyncBoxBody<Bytes, BoxError>;

async fn capture_one(
    req: http::Request<Incoming>,
    log: &Mutex<Vec<Captured>>,
    authority: &str,
) -> Result<http::Response<AnyBody>, BoxError> {
    let mut req = req;
    // As the chaos proxy does: the emulators that hand out follow-up URLs (Modal's router,
    // Daytona's toolbox) build them on the address the client reached.
    execseam_chaos::mark_forwarded_host(&mut req);
    let upgrade = req.headers().contains_key(http::header::UPGRADE);
    let body = Arc::new(Mutex::new(Vec::new()));
    let answer = Arc::new(Mutex::new(Vec::new()));
    let relayed = Arc::new(Mutex::new(Vec::new()));
    let answered = Arc::new(Mutex::new(None));
    log.lock().expect("capture log").push(Captured {
        method: req.method().clone(),
        path: req
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned(),
        version: req.version(),
        headers: req.headers().clone(),
        body: body.clone(),
        upgrade,
        answer: answer.clone(),
        relayed: relayed.clone(),
        arrived: Instant::now(),
        answered: answered.clone(),
    });
    if upgrade {
        return forward_upgrade(req, authority, body, relayed).await;
    }
    let (mut parts, incoming) = req.into_parts();
    let tee = incoming
        .map_frame(move |fr| {
            if let Some(d) = fr.data_ref() {
                body.lock().expect("body").extend_from_slice(d);
            }
            fr
        })
        .map_err(boxed)
        .boxed_unsync();
    let tcp = tokio::net::TcpStream::connect(authority).await?;
    let _ = tcp.set_nodelay(true);
    let io = TokioIo::new(tcp);
    let resp = if parts.version == http::Version::HTTP_2 {
        let pq = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        parts.uri = format!("http://{authority}{pq}").parse()?;
        let (mut send, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), io).await?;
        tokio::spawn(conn);
        send.send_request(http::Request::from_parts(parts, tee))
            .await?
    } else {
        let (mut send, conn) = hyper::client::conn::http1::handshake(io).await?;
        tokio::spawn(conn);
        send.send_request(http::Request::from_parts(parts, tee))
            .await?
    };
    *answered.lock().expect("answered") = Some(Instant::now());
    Ok(resp.map(move |b| {
        b.map_frame(move |fr| {
            if let Some(d) = fr.data_ref() {
                answer.lock().expect("answer").extend_from_slice(d);
            }
            *answered.lock().expect("answered") = Some(Instant::now());
            fr
        })
        .map_err(boxed)
        .boxed_unsync()
    }))
}

/// Forwards an upgrade request (HTTP/1.1) and, once both sides have switched protocols, relays
/// the upgraded connection's bytes, recording each chunk with its direction in arrival order.
async fn forward_upgrade(
    mut req: http::Request<Incoming>,
    authority: &str,
    body: Arc<Mutex<Vec<u8>>>,
    relayed: Relayed,
) -> Result<http::Response<AnyBody>, BoxError> {
    let client_side = hyper::upgrade::on(&mut req);
    let (parts, incoming) = req.into_parts();
    let bytes = incoming.collect().await?.to_bytes();
    body.lock().expect("body").extend_from_slice(&bytes);
    let tcp = tokio::net::TcpStream::connect(authority).await?;
    let _ = tcp.set_nodelay(true);
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    let mut resp = send
        .send_request(http::Request::from_parts(
            parts,
            http_body_util::Full::new(bytes),
        ))
        .await?;
    if resp.status() != http::StatusCode::SWITCHING_PROTOCOLS {
        return Ok(resp.map(|b| b.map_err(boxed).boxed_unsync()));
    }
    let server_side = hyper::upgrade::on(&mut resp);
    let mut answer = http::Response::builder().status(resp.status());
    for (k, v) in resp.headers() {
        answer = answer.header(k, v);
    }
    tokio::spawn(async move {
        let (Ok(c), Ok(s)) = (client_side.await, server_side.await) else {
            return;
        };
        let (mut cr, mut cw) = tokio::io::split(TokioIo::new(c));
        let (mut sr, mut sw) = tokio::io::split(TokioIo::new(s));
        let copy = async |r: &mut (dyn tokio::io::AsyncRead + Unpin + Send),
                          w: &mut (dyn tokio::io::AsyncWrite + Unpin + Send),
                          from_client: bool| {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = match tokio::io::AsyncReadExt::read(r, &mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                relayed
                    .lock()
                    .expect("relayed")
                    .push((from_client, buf[..n].to_vec()));
                if tokio::io::AsyncWriteExt::write_all(w, &buf[..n])
                    .await
                    .is_err()
                {
                    break;
                }
            }
            let _ = tokio::io::AsyncWriteExt::shutdown(w).await;
        };
        tokio::join!(copy(&mut cr, &mut sw, true), copy(&mut sr, &mut cw, false));
    });
    let empty = http_body_util::Empty::<Bytes>::new()
        .map_err(never)
        .boxed_unsync();
    Ok(answer.body(empty)?)
}

/// The raw client: the captured request, sent again by reqwest on the same HTTP version, the
/// answer read to its end.
struct Raw {
    client: reqwest::Client,
    url: String,
    req: Captured,
    body: Bytes,
}

impl Raw {
    fn new(upstream: &str, req: Captured) -> Raw {
        let b = reqwest::Client::builder().no_proxy();
        let b = if req.version == http::Version::HTTP_2 {
            b.http2_prior_knowledge()
        } else {
            b.http1_only()
        };
        let body = Bytes::from(req.body.lock().expect("body").clone());
        Raw {
            client: b.build().expect("reqwest"),
            url: format!("{}{}", upstream.trim_end_matches('/'), req.path),
            req,
            body,
        }
    }

    async fn once(&self) -> Result<Duration, String> {
        let mut headers = self.req.headers.clone();
        for h in [
            http::header::HOST,
            http::header::CONTENT_LENGTH,
            http::header::CONNECTION,
            http::header::TRANSFER_ENCODING,
        ] {
            headers.remove(h);
        }
        let t = Instant::now();
        let resp = self
            .client
            .request(self.req.method.clone(), &self.url)
            .headers(headers)
            .body(self.body.clone())
            .send()
            .await
            .map_err(|e| format!("raw replay: {e}"))?;
        let status = resp.status();
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| format!("raw replay body: {e}"))?;
        let d = t.elapsed();
        if !status.is_success() {
            return Err(format!(
                "raw replay answered {status}: {}",
                String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
            ));
        }
        Ok(d)
    }
}

/// An exec over an upgraded connection (a WebSocket) done raw: the captured upgrade request
/// sent again by hyper, then the client's recorded bytes written as they were (its WebSocket
/// frames, masked as sent), each chunk once the server has sent at least as many bytes as it
/// had before that chunk, and the server's side read until it has sent as many bytes as it sent
/// the adapter (or ended). No frame is parsed.
struct RawUpgrade {
    authority: String,
    req: Captured,
    body: Bytes,
    relayed: Vec<(bool, Vec<u8>)>,
}

impl RawUpgrade {
    fn new(upstream: &str, req: Captured) -> Result<RawUpgrade, String> {
        let relayed = req.relayed.lock().expect("relayed").clone();
        if !relayed.iter().any(|(client, _)| !*client) {
            return Err("the upgraded connection carried nothing from the server".into());
        }
        let body = Bytes::from(req.body.lock().expect("body").clone());
        Ok(RawUpgrade {
            authority: upstream
                .trim_start_matches("http://")
                .trim_end_matches('/')
                .to_owned(),
            body,
            req,
            relayed,
        })
    }

    async fn once(&self) -> Result<Duration, String> {
        let t = Instant::now();
        tokio::time::timeout(Duration::from_secs(30), self.exchange())
            .await
            .map_err(|_| "raw upgraded exchange: no end after 30 s".to_owned())??;
        Ok(t.elapsed())
    }

    async fn exchange(&self) -> Result<(), String> {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut send = raw_http1(&self.authority).await?;
        let mut req = http::Request::new(http_body_util::Full::new(self.body.clone()));
        *req.method_mut() = self.req.method.clone();
        *req.uri_mut() = self
            .req
            .path
            .parse()
            .map_err(|e| format!("raw path: {e}"))?;
        let mut headers = self.req.headers.clone();
        for h in [
            http::header::CONTENT_LENGTH,
            http::header::TRANSFER_ENCODING,
        ] {
            headers.remove(h);
        }
        headers.insert(
            http::header::HOST,
            http::HeaderValue::from_str(&self.authority).map_err(|e| e.to_string())?,
        );
        *req.headers_mut() = headers;
        let resp = send
            .send_request(req)
            .await
            .map_err(|e| format!("raw upgrade request: {e}"))?;
        if resp.status() != http::StatusCode::SWITCHING_PROTOCOLS {
            return Err(format!("raw upgrade answered {}", resp.status()));
        }
        let mut io = TokioIo::new(
            hyper::upgrade::on(resp)
                .await
                .map_err(|e| format!("raw upgrade: {e}"))?,
        );
        let (mut got, mut need) = (0usize, 0usize);
        let mut buf = vec![0u8; 64 * 1024];
        for (from_client, bytes) in &self.relayed {
            if !*from_client {
                need += bytes.len();
                continue;
            }
            while got < need {
                match io.read(&mut buf).await {
                    Ok(0) => return Err("raw upgraded: the server ended early".into()),
                    Ok(n) => got += n,
                    Err(e) => return Err(format!("raw upgraded read: {e}")),
                }
            }
            io.write_all(bytes)
                .await
                .map_err(|e| format!("raw upgraded write: {e}"))?;
        }
        // The rest of the server's side: as many bytes as it sent the adapter (its close frame
        // last), or its end if that comes first (a server may wait for the client to close).
        let all: usize = self
            .relayed
            .iter()
            .filter(|(from_client, _)| !*from_client)
            .map(|(_, b)| b.len())
            .sum();
        while got < all {
            match io.read(&mut buf).await {
                Ok(0) => return Ok(()),
                Ok(n) => got += n,
                Err(e) => return Err(format!("raw upgraded read: {e}")),
            }
        }
        Ok(())
    }
}

/// Where a later request carries an id an earlier answer assigned: `len` bytes at `at` of
/// request `req`'s body are bytes `from..from + len` of answer `answer`.
struct IdPatch {
    req: usize,
    at: usize,
    len: usize,
    answer: usize,
    from: usize,
}

/// Runs of id characters (`[A-Za-z0-9_-]`) of at least 8 bytes: `(offset, length)`.
fn id_runs(bytes: &[u8]) -> Vec<(usize, usize)> {
    let id = |b: &u8| b.is_ascii_alphanumeric() || *b == b'-' || *b == b'_';
    let mut runs = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if !id(&bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && id(&bytes[i]) {
            i += 1;
        }
        if i - start >= 8 {
            runs.push((start, i - start));
        }
    }
    runs
}

/// An exec of several sequential requests done raw: the captured requests sent again by
/// reqwest in order, on the same HTTP version, each answer read to its end; where a later
/// request carries an id an earlier answer assigned (found as the same run of id characters,
/// at least 8, in the captured answer and the captured request), the id the new answer holds
/// at the same place is written into the request first (ids of the same length: the message
/// layout is unchanged; anything else is an error, not a measurement).
struct RawSequence {
    client: reqwest::Client,
    upstream: String,
    reqs: Vec<(Captured, Vec<u8>)>,
    patches: Vec<IdPatch>,
}

impl RawSequence {
    fn new(upstream: &str, reqs: Vec<Captured>) -> Result<RawSequence, String> {
        for w in reqs.windows(2) {
            let answered = *w[0].answered.lock().expect("answered");
            if answered.is_none_or(|a| w[1].arrived < a) {
                return Err(format!(
                    "the adapter's requests overlap ({} {} is sent before the answer to {} {} ended), so a sequential replay is not the same exchange",
                    w[1].method,
                    w[1].path.split('?').next().unwrap_or(""),
                    w[0].method,
                    w[0].path.split('?').next().unwrap_or("")
                ));
            }
        }
        let mut patches = Vec::new();
        let bodies: Vec<Vec<u8>> = reqs
            .iter()
            .map(|r| r.body.lock().expect("body").clone())
            .collect();
        for (k, body) in bodies.iter().enumerate().skip(1) {
            let before = patches.len();
            for (j, earlier) in reqs[..k].iter().enumerate() {
                let answer = earlier.answer.lock().expect("answer");
                for (from, len) in id_runs(&answer) {
                    let id = &answer[from..from + len];
                    let mut at = 0;
                    while let Some(i) = body[at..].windows(len).position(|w| w == id) {
                        patches.push(IdPatch {
                            req: k,
                            at: at + i,
                            len,
                            answer: j,
                            from,
                        });
                        at += i + len;
                    }
                }
            }
            if patches.len() == before {
                return Err(format!(
                    "request {} carries no id found in an earlier answer",
                    k + 1
                ));
            }
        }
        let h2 = reqs.iter().all(|r| r.version == http::Version::HTTP_2);
        let b = reqwest::Client::builder().no_proxy();
        let b = if h2 {
            b.http2_prior_knowledge()
        } else {
            b.http1_only()
        };
        Ok(RawSequence {
            client: b.build().expect("reqwest"),
            upstream: upstream.trim_end_matches('/').to_owned(),
            reqs: reqs.into_iter().zip(bodies).collect(),
            patches,
        })
    }

    async fn once(&self) -> Result<Duration, String> {
        let t = Instant::now();
        self.exchange().await?;
        Ok(t.elapsed())
    }

    async fn check(&self) -> Result<(), String> {
        let answers = self.exchange().await?;
        for (k, ((req, _), new)) in self.reqs.iter().zip(&answers).enumerate() {
            let old = req.answer.lock().expect("answer").len();
            if old.abs_diff(new.len()) > 8 {
                return Err(format!(
                    "raw sequence: answer {} is {} bytes, the adapter's was {old}",
                    k + 1,
                    new.len()
                ));
            }
        }
        Ok(())
    }

    async fn exchange(&self) -> Result<Vec<Bytes>, String> {
        let mut answers: Vec<Bytes> = Vec::with_capacity(self.reqs.len());
        for (k, (req, body)) in self.reqs.iter().enumerate() {
            let mut body = body.clone();
            for p in self.patches.iter().filter(|p| p.req == k) {
                let id = answers[p.answer]
                    .get(p.from..p.from + p.len)
                    .filter(|id| id_runs(id) == [(0, p.len)])
                    .ok_or("raw sequence: the new answer holds no id of the same length there")?;
                body[p.at..p.at + p.len].copy_from_slice(id);
            }
            let mut headers = req.headers.clone();
            for h in [
                http::header::HOST,
                http::header::CONTENT_LENGTH,
                http::header::CONNECTION,
                http::header::TRANSFER_ENCODING,
            ] {
                headers.remove(h);
            }
            let resp = self
                .client
                .request(req.method.clone(), format!("{}{}", self.upstream, req.path))
                .headers(headers)
                .body(body)
                .send()
                .await
                .map_err(|e| format!("raw sequence: {e}"))?;
            let status = resp.status();
            // A gRPC error without a message is answered in the headers (trailers-only).
            let grpc = resp
                .headers()
                .get("grpc-status")
                .filter(|g| g.as_bytes() != b"0")
                .map(|g| String::from_utf8_lossy(g.as_bytes()).into_owned());
            let bytes = resp
                .bytes()
                .await
                .map_err(|e| format!("raw sequence body: {e}"))?;
            if !status.is_success() {
                return Err(format!("raw sequence answered {status}"));
            }
            if let Some(g) = grpc {
                return Err(format!("raw sequence answered grpc-status {g}"));
            }
            answers.push(bytes);
        }
        Ok(answers)
    }
}

/// Docker's exec done raw, the same requests as the adapter's: create the exec (reqwest,
/// keep-alive; the exec id parsed from its answer), start it on a fresh connection upgraded to
/// the raw stream (hyper) and read that to its end (no demultiplexing), inspect it (reqwest)
/// until the engine no longer reports it running, as the adapter does.
/// The captured create and start requests give the bodies, headers and API version.
struct RawDocker {
    client: reqwest::Client,
    upstream: String,
    authority: String,
    create: Captured,
    create_body: Bytes,
    start: Captured,
    start_body: Bytes,
}

impl RawDocker {
    fn new(upstream: &str, create: Captured, start: Captured) -> RawDocker {
        let body = |c: &Captured| Bytes::from(c.body.lock().expect("body").clone());
        RawDocker {
            client: reqwest::Client::builder()
                .no_proxy()
                .http1_only()
                .build()
                .expect("reqwest"),
            upstream: upstream.trim_end_matches('/').to_owned(),
            authority: upstream
                .trim_start_matches("http://")
                .trim_end_matches('/')
                .to_owned(),
            create_body: body(&create),
            start_body: body(&start),
            create,
            start,
        }
    }

    fn headers(c: &Captured) -> http::HeaderMap {
        let mut h = c.headers.clone();
        for k in [
            http::header::HOST,
            http::header::CONTENT_LENGTH,
            http::header::CONNECTION,
            http::header::TRANSFER_ENCODING,
            http::header::UPGRADE,
        ] {
            h.remove(k);
        }
        h
    }

    async fn once(&self) -> Result<Duration, String> {
        let t = Instant::now();
        let created = self
            .client
            .request(
                self.create.method.clone(),
                format!("{}{}", self.upstream, self.create.path),
            )
            .headers(Self::headers(&self.create))
            .body(self.create_body.clone())
            .send()
            .await
            .map_err(|e| format!("raw create: {e}"))?;
        let created = created
            .bytes()
            .await
            .map_err(|e| format!("raw create body: {e}"))?;
        let v: serde_json::Value =
            serde_json::from_slice(&created).map_err(|e| format!("raw create answer: {e}"))?;
        let id = v["Id"].as_str().ok_or("raw create: no Id")?;
        let version = self.start.path.split("/exec/").next().unwrap_or("");
        let mut send = raw_http1(&self.authority).await?;
        let mut req = http::Request::new(http_body_util::Full::new(self.start_body.clone()));
        *req.method_mut() = http::Method::POST;
        *req.uri_mut() = format!("{version}/exec/{id}/start")
            .parse()
            .map_err(|e| format!("raw start path: {e}"))?;
        let mut headers = Self::headers(&self.start);
        headers.insert(
            http::header::HOST,
            http::HeaderValue::from_str(&self.authority).map_err(|e| e.to_string())?,
        );
        headers.insert(
            http::header::CONNECTION,
            http::HeaderValue::from_static("Upgrade"),
        );
        headers.insert(http::header::UPGRADE, http::HeaderValue::from_static("tcp"));
        *req.headers_mut() = headers;
        let resp = send
            .send_request(req)
            .await
            .map_err(|e| format!("raw start: {e}"))?;
        if resp.status() == http::StatusCode::SWITCHING_PROTOCOLS {
            let upgraded = hyper::upgrade::on(resp)
                .await
                .map_err(|e| format!("raw upgrade: {e}"))?;
            let mut stream = Vec::new();
            tokio::io::AsyncReadExt::read_to_end(&mut TokioIo::new(upgraded), &mut stream)
                .await
                .map_err(|e| format!("raw stream: {e}"))?;
        } else if resp.status().is_success() {
            resp.into_body()
                .collect()
                .await
                .map_err(|e| format!("raw stream: {e}"))?;
        } else {
            return Err(format!("raw start answered {}", resp.status()));
        }
        // As the adapter does (`wait_exit`): the engine may still report the exec running for
        // a moment after its stream ended, so inspect until it does not (5 ms, doubling).
        let mut delay = Duration::from_millis(5);
        loop {
            let inspected = self
                .client
                .get(format!("{}{version}/exec/{id}/json", self.upstream))
                .send()
                .await
                .map_err(|e| format!("raw inspect: {e}"))?;
            if !inspected.status().is_success() {
                return Err(format!("raw inspect answered {}", inspected.status()));
            }
            let body = inspected
                .bytes()
                .await
                .map_err(|e| format!("raw inspect body: {e}"))?;
            let v: serde_json::Value =
                serde_json::from_slice(&body).map_err(|e| format!("raw inspect answer: {e}"))?;
            if v["Running"] != serde_json::Value::Bool(true) {
                break;
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_millis(200));
        }
        Ok(t.elapsed())
    }
}

async fn p1(plan: &Plan, name: &str, setup: &Setup, adapter: &Arc<dyn Exec>) -> Result<(), String> {
    let capture = Capture::start(&setup.upstream).await;
    let via = (setup.through)(capture.url(), IDLE)
        .await
        .map_err(|e| e.to_string())?;
    let title = format!("{name}: exec `{PROGRAM}`");
    for _ in 0..2 {
        exec_true(&*via)
            .await
            .map_err(|e| format!("through the capture: {e}"))?;
    }
    capture.take();
    exec_true(&*via)
        .await
        .map_err(|e| format!("through the capture: {e}"))?;
    // The answers' last bytes pass the capture just before the exec returns.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let reqs = capture.take();
    drop(via);
    let list = || {
        reqs.iter()
            .map(|r| format!("{} {}", r.method, r.path.split('?').next().unwrap_or("")))
            .collect::<Vec<_>>()
            .join(", ")
    };
    // The raw client, what it is, and the note.
    let (raw, label, note): (RawClient, String, String) = if name == "docker" {
        let docker_exec = |r: &&Captured, upgrade: bool, tail: &str| {
            r.upgrade == upgrade
                && r.method == http::Method::POST
                && r.path.split('?').next().is_some_and(|p| p.ends_with(tail))
        };
        let create = reqs.iter().rev().find(|r| docker_exec(r, false, "/exec"));
        let start = reqs.iter().rev().find(|r| docker_exec(r, true, "/start"));
        let (Some(create), Some(start)) = (create, start) else {
            return Err(format!("no exec create and start among {}", list()));
        };
        (
            RawClient::Docker(Box::new(RawDocker::new(
                &setup.upstream,
                create.clone(),
                start.clone(),
            ))),
            "raw reqwest + hyper: create, start upgraded, inspect until ended".into(),
            "3 or more requests per exec on both sides (create, start with the hijacked stream read to its end, inspect until the engine says the exec ended); the raw client parses only the exec id and the Running flag".into(),
        )
    } else if let [req] = reqs.as_slice()
        && req.upgrade
    {
        (
            RawClient::Upgrade(Box::new(RawUpgrade::new(&setup.upstream, req.clone())?)),
            "raw hyper, its upgrade and bytes replayed".into(),
            "1 upgraded connection per exec on both sides; the raw client writes the adapter's recorded frames (each after as many of the server's bytes as the adapter had) and reads as many as the adapter got, parsing none".into(),
        )
    } else if let [req] = reqs.as_slice() {
        let version = if req.version == http::Version::HTTP_2 {
            "h2c"
        } else {
            "HTTP/1.1"
        };
        (
            RawClient::One(Box::new(Raw::new(&setup.upstream, req.clone()))),
            format!("raw reqwest, its request replayed ({version})"),
            "1 request per exec on both sides".into(),
        )
    } else {
        match RawSequence::new(&setup.upstream, reqs.clone()) {
            Ok(raw) => {
                let ids = raw.patches.len();
                (
                    RawClient::Sequence(Box::new(raw)),
                    "raw reqwest, its requests replayed in order".into(),
                    format!(
                        "{} requests per exec on both sides ({}); the raw client writes the {ids} server-assigned id(s) of the new answers into the later requests, parsing nothing else",
                        reqs.len(),
                        list()
                    ),
                )
            }
            Err(why) => {
                missing(
                    "P1",
                    &title,
                    &format!("{} requests per exec ({}): {why}", reqs.len(), list()),
                );
                return Ok(());
            }
        }
    };
    raw.check().await?;
    let (a, b) = alternate(
        plan.pairs,
        async || exec_true(&**adapter).await,
        async || raw.once().await,
    )
    .await?;
    row(
        "P1",
        &title,
        &format!("execseam-{name}"),
        &a,
        &label,
        &b,
        plan.pairs,
        Some(1.05),
        &note,
    );
    Ok(())
}

/// P1's raw clients.
enum RawClient {
    One(Box<Raw>),
    Sequence(Box<RawSequence>),
    Upgrade(Box<RawUpgrade>),
    Docker(Box<RawDocker>),
}

impl RawClient {
    async fn once(&self) -> Result<Duration, String> {
        match self {
            RawClient::One(r) => r.once().await,
            RawClient::Sequence(r) => r.once().await,
            RawClient::Upgrade(r) => r.once().await,
            RawClient::Docker(r) => r.once().await,
        }
    }

    /// One exchange before the measurement; a sequence's new answers must be as long as the
    /// captured ones (within a few bytes), or the replay did something else (an error answer).
    async fn check(&self) -> Result<(), String> {
        match self {
            RawClient::Sequence(r) => r.check().await,
            other => other.once().await.map(drop),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// P2: the official Python SDKs

struct Sdk {
    /// The `target/interop/<venv>` virtualenv and its `crates/emulator-<dir>/interop`.
    venv: &'static str,
    label: &'static str,
    env: Vec<(String, String)>,
    sandbox: String,
    note: &'static str,
}

fn sdk_for(name: &str, setup: &Setup) -> Option<Sdk> {
    use execseam_emulators::{agentcore, daytona, e2b, modal, sprites, vercel};
    let g = &setup.guard;
    let id = setup.direct.id().to_owned();
    // A setup made by the generic emulated path holds the target, not the emulator.
    let env_of = |direct: Option<Vec<(String, String)>>| direct.or_else(|| emulated_env(&**g));
    let (venv, label, env, note) = match name {
        "e2b" => (
            "e2b",
            "e2b (Python) commands.run",
            env_of(g.downcast_ref::<e2b::E2bEmulator>().map(|e| e.env()))?,
            "",
        ),
        "daytona" => (
            "daytona",
            "daytona (Python) process.exec",
            env_of(
                g.downcast_ref::<daytona::DaytonaEmulator>()
                    .map(|e| e.env()),
            )?,
            "the SDK's process.exec merges stdout and stderr (a weaker contract than the adapter's)",
        ),
        "sprites" => (
            "sprites",
            "sprites (Python) run",
            env_of(
                g.downcast_ref::<sprites::SpritesEmulator>()
                    .map(|e| e.env()),
            )?,
            "",
        ),
        "agentcore" => (
            "agentcore",
            "boto3 executeCommand",
            env_of(
                g.downcast_ref::<agentcore::AgentCoreEmulator>()
                    .map(|e| e.env()),
            )?,
            "boto3's executeCommand answers stdout and stderr as text (the adapter's output is byte-exact)",
        ),
        "modal" => (
            "modal",
            "modal (Python) exec",
            env_of(g.downcast_ref::<modal::ModalEmulator>().map(|e| e.env()))?,
            "",
        ),
        "vercel" => (
            "vercel",
            "vercel-sandbox (Python) run_process",
            env_of(g.downcast_ref::<vercel::VercelEmulator>().map(|e| e.env()))?,
            "the SDK runs in a sandbox of its own on the same emulator",
        ),
        "northflank" => (
            "northflank",
            "northflank (Python) run_service_command",
            emulated_env(&**g)?,
            "",
        ),
        "kubernetes" => (
            "kubernetes",
            "kubernetes (Python) stream(connect_get_namespaced_pod_exec)",
            emulated_env(&**g)?,
            "one exec over WebSocket on each side; the client finds the claim's pod first, as the adapter does",
        ),
        _ => return None,
    };
    Some(Sdk {
        venv,
        label,
        env,
        sandbox: id,
        note,
    })
}

/// The emulator's environment of a setup made by the generic emulated path (`setups`'
/// `emulated`), whose guard is the target, not the emulator: the adapter's variables, which hold
/// the emulator's environment.
fn emulated_env(guard: &(dyn std::any::Any + Send + Sync)) -> Option<Vec<(String, String)>> {
    let t = guard.downcast_ref::<execseam_emulated::Emulated>()?;
    Some(t.vars.clone().into_iter().collect())
}

/// The Python driver (`benches/sdk_driver.py`): `one` runs one exec and answers its seconds;
/// `conc C N` runs N execs C at a time and answers the wall seconds and the errors.
struct Driver {
    child: std::process::Child,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl Driver {
    fn ask(&mut self, line: &str) -> Result<String, String> {
        let stdin = self.child.stdin.as_mut().ok_or("stdin")?;
        writeln!(stdin, "{line}").map_err(|e| e.to_string())?;
        stdin.flush().map_err(|e| e.to_string())?;
        let answer = self
            .lines
            .next()
            .ok_or("the SDK driver ended")?
            .map_err(|e| e.to_string())?;
        if let Some(e) = answer.strip_prefix("error ") {
            return Err(format!("SDK: {e}"));
        }
        Ok(answer)
    }

    fn one(&mut self) -> Result<Duration, String> {
        let a = self.ask("one")?;
        Ok(Duration::from_secs_f64(
            a.trim().parse().map_err(|_| format!("bad answer {a:?}"))?,
        ))
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_driver(provider: &str, sdk: &Sdk, proxy: &str, upstream: &str) -> Result<Driver, String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../emulator-{}", sdk.venv))
        .join("interop");
    let python = execseam_test_util::interop::python_env(sdk.venv, &dir.join("requirements.txt"))
        .map_err(|e| format!("the {} virtualenv: {e}", sdk.venv))?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/sdk_driver.py");
    let upstream = upstream.trim_end_matches('/');
    let mut child = std::process::Command::new(python)
        .arg(script)
        .arg(provider)
        .arg(&sdk.sandbox)
        .envs(
            sdk.env
                .iter()
                .map(|(k, v)| (k.clone(), v.replace(upstream, proxy))),
        )
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| format!("python: {e}"))?;
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    match lines.next() {
        Some(Ok(l)) if l == "ready" => Ok(Driver { child, lines }),
        other => Err(format!("the SDK driver did not start: {other:?}")),
    }
}

async fn burst_wall(e: &Arc<dyn Exec>, at_once: usize, total: usize) -> (Duration, usize) {
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let errors = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let t = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..at_once {
        let (e, next, errors) = (e.clone(), next.clone(), errors.clone());
        tasks.push(tokio::spawn(async move {
            while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < total {
                if exec_true(&*e).await.is_err() {
                    errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    (
        t.elapsed(),
        errors.load(std::sync::atomic::Ordering::Relaxed),
    )
}

fn trips(v: &[u64]) -> String {
    if v.is_empty() {
        return "-".into();
    }
    let (min, max) = (v.iter().min().unwrap(), v.iter().max().unwrap());
    if min == max {
        min.to_string()
    } else {
        format!("{:.2}", v.iter().sum::<u64>() as f64 / v.len() as f64)
    }
}

/// A provider's P2 state: one chaos proxy (which counts requests and injects the latency), the
/// adapter through it, and the SDK's driver, all on the same emulator.
struct P2 {
    name: &'static str,
    sdk: Sdk,
    proxy: ChaosProxy,
    adapter: Arc<dyn Exec>,
    driver: Arc<Mutex<Driver>>,
    /// Round trips per pair on loopback (both sides): how long its delayed row will take.
    trips: f64,
}

const DELAY: (&str, &str) = ("+25 ms per request", "*=delay:25");

/// P2 but its latency row with injected latency: loopback latency and time per exec, then time
/// per exec with the latency. The latency row with it is left to [`p2_delayed`], which `main`
/// runs for every provider at once after everything else (each of those rows waits 25 ms per
/// request for most of its time: 200 pairs take 13 to 37 s per provider, alone).
async fn p2(plan: &Plan, name: &'static str, setup: &Setup) -> Result<Option<P2>, String> {
    let Some(sdk) = sdk_for(name, setup) else {
        return Ok(None);
    };
    let proxy = ChaosProxy::start(([127, 0, 0, 1], 0).into(), &setup.upstream, Vec::new())
        .await
        .map_err(|e| e.to_string())?;
    let adapter = (setup.through)(proxy.base_url(), IDLE)
        .await
        .map_err(|e| e.to_string())?;
    let driver = match start_driver(name, &sdk, &proxy.base_url(), &setup.upstream) {
        Ok(d) => Arc::new(Mutex::new(d)),
        Err(e) => {
            missing("P2", &format!("{name}: latency"), &e);
            return Ok(None);
        }
    };
    let mut p2 = P2 {
        name,
        sdk,
        proxy,
        adapter,
        driver,
        trips: 0.0,
    };
    if on("P2") {
        p2.trips = p2_latency(plan, &p2, "loopback").await?;
        p2_throughput(plan, &p2, "loopback").await?;
    }
    p6(plan, &p2, "loopback").await;
    p8(plan, &p2, setup).await;
    p2.proxy.set_rules(parse_rules(DELAY.1).expect("rules"));
    if on("P2") {
        p2_throughput(plan, &p2, DELAY.0).await?;
    }
    Ok(Some(p2))
}

/// The latency rows with injected latency, `lanes` providers' at a time, the ones with the most
/// round trips per pair first (see [`p2`]).
async fn p2_delayed(plan: &Plan, mut all: Vec<P2>, lanes: usize) {
    all.sort_by(|a, b| b.trips.total_cmp(&a.trips));
    let queue = Mutex::new(all.iter().collect::<std::collections::VecDeque<_>>());
    let lane = async || {
        loop {
            let Some(p2) = queue.lock().expect("queue").pop_front() else {
                return;
            };
            if on("P2")
                && let Err(e) = p2_latency(plan, p2, DELAY.0).await
            {
                missing("P2", &format!("{}: latency, {}", p2.name, DELAY.0), &e);
            }
            p6(plan, p2, DELAY.0).await;
        }
    };
    futures_util::future::join_all((0..lanes.max(1)).map(|_| lane())).await;
    for p2 in all {
        drop(p2.driver);
        p2.proxy.shutdown().await;
    }
}

/// Latency: alternating pairs, counting each side's requests; returns the round trips per pair.
async fn p2_latency(plan: &Plan, p2: &P2, setting: &str) -> Result<f64, String> {
    let P2 {
        name,
        sdk,
        proxy,
        adapter,
        driver,
        ..
    } = p2;
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    let (a, b) = {
        let (ta, tb) = (&mut ta, &mut tb);
        // Counted per side from the proxy's log of this provider only (concurrent rows of
        // other providers go through their own proxies).
        alternate(
            plan.pairs,
            async || {
                let before = proxy.requests().len();
                let r = exec_true(&**adapter).await;
                ta.push((proxy.requests().len() - before) as u64);
                r
            },
            async || {
                let before = proxy.requests().len();
                let d = driver.clone();
                let r = tokio::task::spawn_blocking(move || d.lock().expect("driver").one())
                    .await
                    .map_err(|e| e.to_string())?;
                tb.push((proxy.requests().len() - before) as u64);
                r
            },
        )
        .await?
    };
    let (ra, rb) = (trips(&ta), trips(&tb));
    let mean = |v: &[u64]| v.iter().sum::<u64>() as f64 / v.len().max(1) as f64;
    // Never slower than the SDK; with injected latency, at least 2x faster where the SDK makes
    // more round trips.
    let target = if setting == DELAY.0 && mean(&tb) > mean(&ta) {
        0.5
    } else {
        1.0
    };
    let note = format!(
        "round trips per exec: adapter {ra}, SDK {rb}{}{}{}",
        if sdk.note.is_empty() { "" } else { "; " },
        sdk.note,
        if setting == DELAY.0 && plan.lanes > 1 {
            format!("; {} providers' rows of this setting at a time", plan.lanes)
        } else {
            String::new()
        }
    );
    row(
        "P2",
        &format!("{name}: latency, {setting}"),
        &format!("execseam-{name}"),
        &a,
        sdk.label,
        &b,
        plan.pairs,
        Some(target),
        &note,
    );
    Ok(mean(&ta) + mean(&tb))
}

/// Throughput: time per exec with `concurrent` at once, alternating rounds.
async fn p2_throughput(plan: &Plan, p2: &P2, setting: &str) -> Result<(), String> {
    let P2 {
        name,
        sdk,
        adapter,
        driver,
        ..
    } = p2;
    let (mut wa, mut wb, mut errs) = (Vec::new(), Vec::new(), (0, 0));
    let total = plan.concurrent_execs;
    for round in 0..plan.concurrent_rounds * 2 {
        if (round % 2 == 0) == (round / 2 % 2 == 0) {
            let (wall, e) = burst_wall(adapter, plan.concurrent, total).await;
            wa.push(wall / total as u32);
            errs.0 += e;
        } else {
            let d = driver.clone();
            let (c, n) = (plan.concurrent, total);
            let answer = tokio::task::spawn_blocking(move || {
                d.lock().expect("driver").ask(&format!("conc {c} {n}"))
            })
            .await
            .map_err(|e| e.to_string())??;
            let mut w = answer.split_whitespace();
            let secs: f64 = w
                .next()
                .and_then(|s| s.parse().ok())
                .ok_or("bad conc answer")?;
            let e: usize = w
                .next()
                .and_then(|s| s.parse().ok())
                .ok_or("bad conc answer")?;
            wb.push(Duration::from_secs_f64(secs / total as f64));
            errs.1 += e;
        }
    }
    let per_sec = |v: &[Duration]| 1000.0 / quantile(v, 0.5).unwrap_or(f64::NAN);
    row(
        "P2",
        &format!(
            "{name}: time per exec at {} concurrent, {setting}",
            plan.concurrent
        ),
        &format!("execseam-{name}"),
        &wa,
        sdk.label,
        &wb,
        plan.concurrent_rounds,
        Some(1.0),
        &format!(
            "{total} execs per round; {:.0} vs {:.0} execs/s; errors {} vs {}",
            per_sec(&wa),
            per_sec(&wb),
            errs.0,
            errs.1
        ),
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// P6: keystroke to echo on a terminal

/// The terminal's command on both sides (sdk_driver.py's ECHO): every key echoed at once by the
/// terminal (not canonical: no line to fill), read by `cat`; `R42` says it runs.
const ECHO: &str = "stty -icanon; echo R$((6*7)); exec cat >/dev/null";

/// The providers whose official SDK has a terminal, and its call.
fn sdk_terminal(name: &str) -> Option<&'static str> {
    match name {
        "e2b" => Some("e2b (Python) pty.create + send_stdin"),
        "daytona" => Some("daytona (Python) create_pty_session + send_input"),
        "modal" => Some("modal (Python) exec(pty=True) + stdin.write"),
        _ => None,
    }
}

/// The adapter's side: a terminal handle running [`ECHO`], its output on one attach stream
/// kept open (a task forwards it), keys written by offset.
struct Echo {
    adapter: Arc<dyn Exec>,
    handle: execseam_core::ProcessHandle,
    output: tokio::sync::mpsc::UnboundedReceiver<Bytes>,
    typed: u64,
}

impl Echo {
    async fn open(adapter: &Arc<dyn Exec>) -> Result<Echo, String> {
        use execseam_core::{ProcessEvent, StartKey, StartRequest, StreamOffsets, TerminalSize};
        let p = adapter.processes().ok_or("no process handles")?;
        static OPENED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = OPENED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let key = StartKey::new(format!("bench-echo-{n}")).map_err(|e| e.to_string())?;
        let cmd = Command::new(["sh", "-c", ECHO]).map_err(|e| e.to_string())?;
        let size = TerminalSize { cols: 80, rows: 24 };
        let handle = p
            .start(StartRequest::new(key, cmd).terminal(size))
            .await
            .map_err(|e| e.to_string())?
            .handle;
        drop(p);
        let (tx, output) = tokio::sync::mpsc::unbounded_channel();
        let (a, h) = (adapter.clone(), handle.clone());
        tokio::spawn(async move {
            let Some(p) = a.processes() else { return };
            let Ok(mut s) = p.attach(&h, StreamOffsets::ZERO).await else {
                return;
            };
            while let Some(Ok(ProcessEvent::Stdout { data, .. })) = s.next().await {
                if tx.send(data).is_err() {
                    return;
                }
            }
        });
        let mut echo = Echo {
            adapter: adapter.clone(),
            handle,
            output,
            typed: 0,
        };
        echo.until(b"R42").await?;
        Ok(echo)
    }

    async fn until(&mut self, want: &[u8]) -> Result<(), String> {
        let mut seen = Vec::new();
        while !seen.windows(want.len()).any(|w| w == want) {
            match tokio::time::timeout(Duration::from_secs(30), self.output.recv()).await {
                Ok(Some(chunk)) => seen.extend_from_slice(&chunk),
                Ok(None) => return Err("the terminal's output ended".into()),
                Err(_) => return Err(format!("{want:?} never came")),
            }
        }
        Ok(())
    }

    async fn key(&mut self) -> Result<Duration, String> {
        let p = self.adapter.processes().ok_or("no process handles")?;
        let t = Instant::now();
        let write = execseam_core::StdinWrite {
            at: self.typed,
            data: Bytes::from_static(b"k"),
            close: false,
        };
        p.write_stdin(&self.handle, write)
            .await
            .map_err(|e| e.to_string())?;
        drop(p);
        self.typed += 1;
        self.until(b"k").await?;
        Ok(t.elapsed())
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        let (a, h) = (self.adapter.clone(), self.handle.clone());
        tokio::spawn(async move {
            if let Some(p) = a.processes() {
                let _ = p.signal(&h, execseam_core::Signal::Kill).await;
            }
        });
    }
}

/// P6's row of `p2`'s provider at `setting`, when its SDK has a terminal (else nothing).
async fn p6(plan: &Plan, p2: &P2, setting: &str) {
    let Some(label) = sdk_terminal(p2.name).filter(|_| on("P6")) else {
        return;
    };
    let name = format!("{}: keystroke to echo, {setting}", p2.name);
    if let Err(e) = p6_row(plan, p2, label, &name).await {
        missing("P6", &name, &e);
    }
}

async fn p6_row(plan: &Plan, p2: &P2, label: &str, name: &str) -> Result<(), String> {
    let mut echo = Echo::open(&p2.adapter).await?;
    let ask = |line: &'static str| {
        let d = p2.driver.clone();
        async move {
            tokio::task::spawn_blocking(move || d.lock().expect("driver").ask(line))
                .await
                .map_err(|e| e.to_string())?
        }
    };
    ask("keys").await?;
    let (a, b) = alternate(
        plan.pairs,
        async || echo.key().await,
        async || {
            let s = ask("key").await?;
            Ok(Duration::from_secs_f64(
                s.trim().parse().map_err(|_| format!("bad answer {s:?}"))?,
            ))
        },
    )
    .await?;
    let caps = p2
        .adapter
        .processes()
        .map(|p| p.process_capabilities())
        .map_or_else(String::new, |c| {
            format!("{:?}, reattach {}", c.mechanism, c.terminal_reattach)
        });
    row(
        "P6",
        name,
        &format!("execseam-{}", p2.name),
        &a,
        label,
        &b,
        plan.pairs,
        Some(1.0),
        &format!(
            "the adapter's terminal handle ({caps}): a key is a stdin write by offset, its echo read on one open attach stream"
        ),
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// P7: process handles

/// Unique start keys for P7 (a key once used may not start again: Modal).
fn p7_key(what: &str) -> Result<execseam_core::StartKey, String> {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    execseam_core::StartKey::new(format!("bench-{what}-{}-{n}", std::process::id()))
        .map_err(|e| e.to_string())
}

/// A start of `/bin/true`, an attach from offset zero read to its exit, and a wait; timed
/// until the wait answers. The release after it is not timed.
async fn start_attach_wait(e: &dyn Exec) -> Result<Duration, String> {
    use execseam_core::{StartRequest, StreamOffsets, Waited};
    let p = e.processes().ok_or("no process handles")?;
    let key = p7_key("saw")?;
    let t = Instant::now();
    let handle = p
        .start(StartRequest::new(key, cmd_true()))
        .await
        .map_err(|e| format!("start: {e}"))?
        .handle;
    let out = p
        .attach(&handle, StreamOffsets::ZERO)
        .await
        .map_err(|e| format!("attach: {e}"))?
        .collect()
        .await
        .map_err(|e| format!("attach: {e}"))?;
    let waited = p
        .wait(&handle, Duration::from_secs(30))
        .await
        .map_err(|e| format!("wait: {e}"))?;
    let d = t.elapsed();
    if !out.exit.success() || waited != Waited::Exited(out.exit) {
        return Err(format!(
            "`{PROGRAM}` through a handle: {out:?}, wait {waited:?}"
        ));
    }
    p.release(&handle)
        .await
        .map_err(|e| format!("release: {e}"))?;
    Ok(d)
}

/// P7's cost row: start + attach + wait against one exec of the same program, alternating.
async fn p7(plan: &Plan, name: &str, adapter: &Arc<dyn Exec>) {
    let row_name = format!("{name}: start + attach + wait `{PROGRAM}`");
    let Some(caps) = adapter.processes().map(|p| p.process_capabilities()) else {
        missing("P7", &row_name, "the adapter has no process handles");
        return;
    };
    let r = alternate(
        plan.pairs,
        async || start_attach_wait(&**adapter).await,
        async || exec_true(&**adapter).await,
    )
    .await;
    match r {
        Ok((a, b)) => row(
            "P7",
            &row_name,
            &format!("execseam-{name} handle ({:?})", caps.mechanism),
            &a,
            "the same adapter's exec",
            &b,
            plan.pairs,
            None,
            "the handle's three calls (start, attach from offset 0 read to the exit, wait), timed to the wait's answer; the release after each is not timed",
        ),
        Err(e) => missing("P7", &row_name, &e),
    }
    if P7_MEMORY.contains(&name) {
        p7_memory(plan, name, adapter).await;
    }
}

/// The adapters of P7's memory row: one of each mechanism (native Modal, the kit's spool on
/// E2B, hybrid Vercel) and local.
const P7_MEMORY: &[&str] = &["modal", "e2b", "vercel", "local"];

/// The live command of P7's memory row: runs until it is killed.
const LIVE: &str = "sleep 600";

/// A number shown in a row's time columns (P7's memory row: KiB).
fn value(v: f64) -> Vec<Duration> {
    vec![Duration::from_secs_f64(v.max(0.0) / 1e3)]
}

/// Runs `n` futures from `f`, `at_once` at a time; their errors, counted by text.
async fn in_waves<F, Fut, T>(n: usize, at_once: usize, f: F) -> (Vec<T>, BTreeMap<String, usize>)
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    use futures_util::StreamExt as _;
    let results: Vec<Result<T, String>> = futures_util::stream::iter((0..n).map(f))
        .buffer_unordered(at_once)
        .collect()
        .await;
    let (mut ok, mut errors) = (Vec::new(), BTreeMap::new());
    for r in results {
        match r {
            Ok(v) => ok.push(v),
            Err(e) => *errors.entry(e).or_default() += 1,
        }
    }
    (ok, errors)
}

/// P7's memory row: the growth of this process's RSS (client and emulator) per live handle,
/// 512 handles of [`LIVE`] started and held, against per exec in flight, 512 one-shot execs
/// of the same command's short form (`sleep 1`) at once.
async fn p7_memory(plan: &Plan, name: &str, adapter: &Arc<dyn Exec>) {
    use execseam_core::StartRequest;
    let n = plan.burst;
    let row_name = format!("{name}: memory per live handle at {n} handles");
    let Some(p) = adapter.processes() else {
        return;
    };
    // The handles first: whatever the allocator keeps of their memory, the execs after reuse.
    reset_peak();
    let idle = status_kib("VmRSS:");
    let live = Command::new(["sh", "-c", LIVE]).expect("valid");
    let (handles, start_errors) = in_waves(n, 64, |_| {
        let (p, live) = (&p, live.clone());
        async move {
            let key = p7_key("live")?;
            let h = p.start(StartRequest::new(key, live)).await;
            h.map(|s| s.handle).map_err(|e| format!("{:?}", e.kind()))
        }
    })
    .await;
    let held = status_kib("VmRSS:");
    let peak_handles = status_kib("VmHWM:");
    let (_, end_errors) = in_waves(handles.len(), 64, |i| {
        let (p, h) = (&p, &handles[i]);
        async move {
            p.signal(h, execseam_core::Signal::Kill)
                .await
                .map_err(|e| format!("kill {:?}", e.kind()))?;
            p.wait(h, Duration::from_secs(60))
                .await
                .map_err(|e| format!("wait {:?}", e.kind()))?;
            p.release(h)
                .await
                .map_err(|e| format!("release {:?}", e.kind()))
        }
    })
    .await;
    drop(p);
    reset_peak();
    let idle_execs = status_kib("VmRSS:");
    let short = Command::new(["sleep", "1"]).expect("valid");
    let (_, exec_errors) = in_waves(n, n, |_| {
        let (a, short) = (adapter.clone(), short.clone());
        async move {
            match a.exec(short).await {
                Ok(o) if o.exit.success() => Ok(()),
                Ok(o) => Err(format!("exit {:?}", o.exit)),
                Err(e) => Err(format!("{:?}", e.kind())),
            }
        }
    })
    .await;
    let peak_execs = status_kib("VmHWM:");
    let per = |peak: u64, idle: u64| peak.saturating_sub(idle) as f64 / n as f64;
    row(
        "P7",
        &row_name,
        &format!("KiB per live handle ({} started)", handles.len()),
        &value(per(peak_handles, idle)),
        "KiB per exec in flight",
        &value(per(peak_execs, idle_execs)),
        n,
        None,
        &format!(
            "KiB, not ms: the peak RSS of this process (client and emulator) over its RSS before, / {n}; handles: {n} starts of `sh -c '{LIVE}'`, 64 at a time, held (RSS {:.1} MiB held, idle {:.1} MiB), then killed and released; execs: {n} execs of `sleep 1` at once (idle {:.1} MiB); errors: start {start_errors:?}, end {end_errors:?}, exec {exec_errors:?}",
            held as f64 / 1024.0,
            idle as f64 / 1024.0,
            idle_execs as f64 / 1024.0,
        ),
    );
}

// ---------------------------------------------------------------------------------------------
// P8: sandbox state

/// P8's pairs: each pair copies a sandbox's layer or starts a sandbox on both sides.
const P8_PAIRS: usize = 20;

/// A state operation of P8, and what the provider's official SDK has of it: its call (the
/// label of the row's B side) or why the row is not measured.
#[derive(Clone, Copy, PartialEq)]
enum StateOp {
    Snapshot,
    CreateFrom,
    Fork,
    /// Pause, then resume (two rows, from the same pairs).
    PauseResume,
    /// Restore in place.
    Restore,
}

impl StateOp {
    fn row(self) -> &'static str {
        match self {
            StateOp::Snapshot => "snapshot",
            StateOp::CreateFrom => "create from a snapshot",
            StateOp::Fork => "fork",
            StateOp::PauseResume => "pause",
            StateOp::Restore => "restore in place",
        }
    }
}

/// The operations the adapter declares (its `StateCapabilities`), each with the SDK's call or
/// the reason it has none.
fn sdk_state(name: &str) -> &'static [(StateOp, Result<&'static str, &'static str>)] {
    use StateOp::*;
    match name {
        "e2b" => &[
            (Snapshot, Ok("e2b (Python) create_snapshot")),
            (CreateFrom, Ok("e2b (Python) Sandbox.create(snapshot)")),
            (Fork, Ok("e2b (Python) fork")),
            (PauseResume, Ok("e2b (Python) pause / Sandbox.connect")),
        ],
        "modal" => &[
            (Snapshot, Ok("modal (Python) snapshot_filesystem")),
            (CreateFrom, Ok("modal (Python) Sandbox.create(image)")),
            (
                Fork,
                Err(
                    "the Modal SDK has no fork (the adapter's is snapshot_filesystem, a create from its image and the image's deletion)",
                ),
            ),
        ],
        "daytona" => &[
            (Snapshot, Ok("daytona (Python) create_snapshot")),
            (
                CreateFrom,
                Ok("daytona (Python) create(CreateSandboxFromSnapshotParams)"),
            ),
            (
                Fork,
                Err(
                    "the SDK's fork is Daytona's native fork, which the service refuses for a container sandbox (linux-vm and windows only); the adapter's fork is a snapshot and a create",
                ),
            ),
            (PauseResume, Ok("daytona (Python) stop / start")),
        ],
        "vercel" => &[
            (Snapshot, Ok("vercel-sandbox (Python) snapshot")),
            (
                CreateFrom,
                Ok("vercel-sandbox (Python) create_sandbox(source=SnapshotSource)"),
            ),
        ],
        "sprites" => &[
            (Snapshot, Ok("sprites (Python) create_checkpoint")),
            (Restore, Ok("sprites (Python) restore_checkpoint")),
        ],
        _ => &[],
    }
}

/// What an SDK answered a state request: its seconds, and the id it made (if any).
fn sdk_timed(d: &Arc<Mutex<Driver>>, line: String) -> Result<(Duration, Option<String>), String> {
    let a = d.lock().expect("driver").ask(&line)?;
    let mut w = a.split_whitespace();
    let secs: f64 = w
        .next()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad answer {a:?}"))?;
    Ok((Duration::from_secs_f64(secs), w.next().map(str::to_owned)))
}

/// P8's rows of `p2`'s provider (loopback only), each side through P2's proxy on the same
/// emulator and the same sandbox.
async fn p8(plan: &Plan, p2: &P2, setup: &Setup) {
    let ops = sdk_state(p2.name);
    if ops.is_empty() || !on("P8") {
        return;
    }
    let provider = match setup
        .guard
        .downcast_ref::<execseam_emulated::Emulated>()
        .ok_or_else(|| "not an emulated target".to_owned())
        .and_then(|t| {
            t.provider_at(&p2.proxy.base_url(), &[])
                .map_err(|e| e.to_string())
        }) {
        Ok(p) => p,
        Err(e) => {
            missing("P8", &format!("{}: sandbox state", p2.name), &e);
            return;
        }
    };
    let pairs = plan.pairs.min(P8_PAIRS);
    let mut made = (Vec::new(), Vec::new());
    for (op, sdk) in ops {
        let name = format!("{}: {}", p2.name, op.row());
        let label = match sdk {
            Ok(l) => *l,
            Err(why) => {
                missing("P8", &name, why);
                continue;
            }
        };
        let sdk_snapshots = ops
            .iter()
            .any(|(o, sdk)| *o == StateOp::Snapshot && sdk.is_ok());
        if let Err(e) = p8_row(pairs, p2, &*provider, *op, label, sdk_snapshots, &mut made).await {
            missing("P8", &name, &e);
        }
    }
    // The snapshots both sides made, deleted (not timed; where the provider deletes them).
    for id in made.0.iter().chain(&made.1) {
        let _ = provider.delete_snapshot(id).await;
    }
}

async fn p8_row(
    pairs: usize,
    p2: &P2,
    provider: &dyn execseam_core::Provider,
    op: StateOp,
    label: &str,
    sdk_snapshots: bool,
    made: &mut (Vec<String>, Vec<String>),
) -> Result<(), String> {
    use execseam_core::{SandboxSpec, SnapshotRequest};
    let id = p2.sdk.sandbox.as_str();
    let sdk = |line: String| {
        let d = p2.driver.clone();
        async move {
            tokio::task::spawn_blocking(move || sdk_timed(&d, line))
                .await
                .map_err(|e| e.to_string())?
        }
    };
    let snapshot_of = async |id: &str| {
        provider
            .snapshot(id, SnapshotRequest::new().allow_stop(true))
            .await
            .map(|o| o.snapshot.id)
            .map_err(|e| format!("snapshot: {e}"))
    };
    let snapshot = async || snapshot_of(id).await;
    // A snapshot that stops its source (Vercel's) is taken of a new running sandbox each pair,
    // made before the timing and destroyed after it (`sdk_driver.py` does the same).
    let destructive = provider
        .lifecycle()
        .state
        .snapshot
        .is_some_and(|s| s.source_after.is_destructive());
    // The snapshot each side starts from or restores, made by that side before the row (not
    // timed), as a user of each would (the Modal SDK's image object comes from its snapshot:
    // `Image.from_id` needs `ImageFromId`, which the emulator does not serve); the adapter's
    // where the SDK's snapshot is not measured.
    let (base, base_b) = match op {
        StateOp::CreateFrom | StateOp::Restore => {
            let s = snapshot().await?;
            made.0.push(s.clone());
            // Both from the same sandbox: where the snapshot stops its source, the SDK's
            // `snap` is of a new sandbox, so the SDK starts from the adapter's snapshot.
            let theirs = if sdk_snapshots && !destructive {
                let b = sdk("snap".into())
                    .await?
                    .1
                    .ok_or("the SDK's snapshot has no id")?;
                made.1.push(b.clone());
                b
            } else {
                s.clone()
            };
            (s, theirs)
        }
        _ => (String::new(), String::new()),
    };
    let (mut second_a, mut second_b) = (Vec::new(), Vec::new());
    let (a, b) = {
        let (made_a, made_b) = (&mut made.0, &mut made.1);
        let (second_a, second_b) = (&mut second_a, &mut second_b);
        let a = async || -> Result<Duration, String> {
            let t = Instant::now();
            match op {
                StateOp::Snapshot if destructive => {
                    let sb = provider
                        .create(SandboxSpec::new())
                        .await
                        .map_err(|e| format!("create: {e}"))?;
                    let t = Instant::now();
                    let s = snapshot_of(sb.id()).await?;
                    let d = t.elapsed();
                    made_a.push(s);
                    sb.destroy().await.map_err(|e| format!("destroy: {e}"))?;
                    Ok(d)
                }
                StateOp::Snapshot => {
                    let s = snapshot().await?;
                    let d = t.elapsed();
                    made_a.push(s);
                    Ok(d)
                }
                StateOp::CreateFrom => {
                    let sb = provider
                        .create(SandboxSpec::new().with_snapshot(base.as_str()))
                        .await
                        .map_err(|e| format!("create: {e}"))?;
                    let d = t.elapsed();
                    sb.destroy().await.map_err(|e| format!("destroy: {e}"))?;
                    Ok(d)
                }
                StateOp::Fork => {
                    let sb = provider.fork(id).await.map_err(|e| format!("fork: {e}"))?;
                    let d = t.elapsed();
                    sb.destroy().await.map_err(|e| format!("destroy: {e}"))?;
                    Ok(d)
                }
                StateOp::PauseResume => {
                    provider
                        .pause(id, None)
                        .await
                        .map_err(|e| format!("pause: {e}"))?;
                    let d = t.elapsed();
                    let t = Instant::now();
                    provider
                        .resume(id)
                        .await
                        .map_err(|e| format!("resume: {e}"))?;
                    second_a.push(t.elapsed());
                    Ok(d)
                }
                StateOp::Restore => {
                    provider
                        .restore(id, &base)
                        .await
                        .map_err(|e| format!("restore: {e}"))?;
                    Ok(t.elapsed())
                }
            }
        };
        let b = async || -> Result<Duration, String> {
            match op {
                StateOp::Snapshot => {
                    let (d, s) = sdk("snap".into()).await?;
                    made_b.extend(s);
                    Ok(d)
                }
                StateOp::CreateFrom => Ok(sdk(format!("from {base_b}")).await?.0),
                StateOp::Fork => Ok(sdk("fork".into()).await?.0),
                StateOp::PauseResume => {
                    let d = sdk("pause".into()).await?.0;
                    second_b.push(sdk("resume".into()).await?.0);
                    Ok(d)
                }
                StateOp::Restore => Ok(sdk(format!("restore {base_b}")).await?.0),
            }
        };
        alternate_warm(1, pairs, a, b).await?
    };
    let note = match op {
        StateOp::Snapshot if destructive => {
            "the snapshot stops its source: each pair, each side snapshots a new running sandbox of its own, made before the timing and destroyed after it; the snapshots are deleted after the row (not timed)"
        }
        StateOp::Snapshot => {
            "each side snapshots the same sandbox; the snapshots are deleted after the row (not timed)"
        }
        StateOp::CreateFrom => {
            "each side starts from a snapshot of the same sandbox it made before the row (Vercel's SDK: the adapter's); each sandbox made is destroyed after its timing"
        }
        StateOp::Fork => "each fork is destroyed after its timing",
        StateOp::PauseResume => "each pause is followed by a resume (the next row)",
        StateOp::Restore => {
            "each side restores in place a checkpoint of the same sprite it made before the row"
        }
    };
    let a_label = format!("execseam-{}", p2.name);
    let name = format!("{}: {}", p2.name, op.row());
    row("P8", &name, &a_label, &a, label, &b, pairs, Some(1.0), note);
    if op == StateOp::PauseResume {
        // The warm-up pair's resumes are left out, as its pauses are.
        row(
            "P8",
            &format!("{}: resume", p2.name),
            &a_label,
            second_a.get(1..).unwrap_or_default(),
            label,
            second_b.get(1..).unwrap_or_default(),
            pairs,
            Some(1.0),
            "each resume follows a pause (the previous row)",
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// P5: a burst of concurrent execs

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix(field)?
                    .trim()
                    .strip_suffix("kB")?
                    .trim()
                    .parse()
                    .ok()
            })
        })
        .unwrap_or(0)
}

/// Resets the peak RSS (`VmHWM`) to the current RSS (Linux: `clear_refs` 5).
fn reset_peak() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

async fn p5(plan: &Plan, name: &str, adapter: &Arc<dyn Exec>) {
    let n = plan.burst;
    exec_true(&**adapter).await.ok();
    reset_peak();
    let idle = status_kib("VmRSS:");
    let start = Arc::new(tokio::sync::Barrier::new(n));
    let mut tasks = Vec::with_capacity(n);
    for _ in 0..n {
        let (e, start) = (adapter.clone(), start.clone());
        tasks.push(tokio::spawn(async move {
            start.wait().await;
            let t = Instant::now();
            let r = e.exec(cmd_true()).await;
            (t.elapsed(), r.map(|o| o.exit.success()))
        }));
    }
    let (mut ok, mut errors) = (Vec::new(), BTreeMap::<String, usize>::new());
    for t in tasks {
        match t.await {
            Ok((d, Ok(true))) => ok.push(d),
            Ok((_, Ok(false))) => *errors.entry("exit != 0".into()).or_default() += 1,
            Ok((_, Err(e))) => *errors.entry(format!("{:?}", e.kind())).or_default() += 1,
            Err(e) => *errors.entry(format!("task: {e}")).or_default() += 1,
        }
    }
    let peak = status_kib("VmHWM:");
    let errs: usize = errors.values().sum();
    let p50 = quantile(&ok, 0.5);
    let p99: Vec<Duration> = quantile(&ok, 0.99)
        .map(|v| vec![Duration::from_secs_f64(v / 1e3)])
        .unwrap_or_default();
    let p50v: Vec<Duration> = p50
        .map(|v| vec![Duration::from_secs_f64(v / 1e3)])
        .unwrap_or_default();
    row(
        "P5",
        &format!("{name}: {n} concurrent execs"),
        "p99",
        &p99,
        "p50",
        &p50v,
        n,
        Some(5.0),
        &format!(
            "errors {errs}{}; peak RSS {:.1} MiB ({:.1} KiB per exec over the idle {:.1} MiB; client and emulator in one process)",
            if errors.is_empty() {
                String::new()
            } else {
                format!(" {errors:?}")
            },
            peak as f64 / 1024.0,
            peak.saturating_sub(idle) as f64 / n as f64,
            idle as f64 / 1024.0
        ),
    );
}

// ---------------------------------------------------------------------------------------------
// P3 and P4: local

async fn p3(plan: &Plan) -> Result<(), String> {
    let local = execseam_local::LocalExec::new();
    let env = execseam_local::LocalConfig::new().environment();
    let raw = async || {
        let t = Instant::now();
        let out = tokio::process::Command::new(PROGRAM)
            .env_clear()
            .envs(env.clone())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .output()
            .await
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!("raw {PROGRAM} failed"));
        }
        Ok(t.elapsed())
    };
    let (a, b) = alternate(plan.pairs, async || exec_true(&local).await, raw).await?;
    row(
        "P3",
        &format!("local: exec `{PROGRAM}`"),
        "execseam-local",
        &a,
        "raw tokio::process",
        &b,
        plan.pairs,
        Some(1.10),
        "the raw spawn gets the adapter's environment",
    );
    let Some(cli) = std::env::var_os("EXECSEAM_BENCH_CLI").map(PathBuf::from) else {
        missing(
            "P3",
            "CLI start-up",
            "EXECSEAM_BENCH_CLI is unset (cargo xtask bench sets it)",
        );
        return Ok(());
    };
    if !cli.exists() {
        missing(
            "P3",
            "CLI start-up",
            &format!("{} does not exist", cli.display()),
        );
        return Ok(());
    }
    let spawn = |p: &Path, args: &[&str]| -> Result<Duration, String> {
        let t = Instant::now();
        let s = std::process::Command::new(p)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(|e| e.to_string())?;
        let d = t.elapsed();
        if !s.success() {
            return Err(format!("{} failed", p.display()));
        }
        Ok(d)
    };
    let (a, b) = alternate(
        plan.pairs,
        async || spawn(&cli, &["--version"]),
        async || spawn(Path::new("/bin/true"), &[]),
    )
    .await?;
    row(
        "P3",
        "CLI start-up (alternating spawns)",
        "execseam --version",
        &a,
        "/bin/true",
        &b,
        plan.pairs,
        None,
        "spawn and wait from this process",
    );
    hyperfine(plan, &cli);
    Ok(())
}

fn hyperfine(plan: &Plan, cli: &Path) {
    let json = std::env::temp_dir().join(format!(
        "execseam-bench-hyperfine-{}.json",
        std::process::id()
    ));
    let runs = plan.pairs.to_string();
    let out = std::process::Command::new("hyperfine")
        .args(["-N", "--warmup", "10", "--runs", &runs, "--export-json"])
        .arg(&json)
        .arg(format!("{} --version", cli.display()))
        .arg("/bin/true")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let parsed = out.ok().filter(|s| s.success()).and_then(|_| {
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).ok()?).ok()?;
        let times = |i: usize| -> Option<Vec<Duration>> {
            v["results"][i]["times"]
                .as_array()?
                .iter()
                .map(|t| t.as_f64().map(Duration::from_secs_f64))
                .collect()
        };
        Some((times(0)?, times(1)?))
    });
    let _ = std::fs::remove_file(&json);
    match parsed {
        Some((a, b)) => row(
            "P3",
            "CLI start-up (hyperfine -N)",
            "execseam --version",
            &a,
            "/bin/true",
            &b,
            plan.pairs,
            None,
            "hyperfine runs each command's runs in a block (not alternating)",
        ),
        None => missing(
            "P3",
            "CLI start-up (hyperfine)",
            "hyperfine is not on PATH (apt-get install hyperfine)",
        ),
    }
}

/// P4's tree, made by `cargo xtask bench` while it builds (`EXECSEAM_BENCH_TREE`): its root and
/// file count (the stamp `.complete` holds it, written last).
fn tree() -> Result<(PathBuf, usize), String> {
    let root = std::env::var_os("EXECSEAM_BENCH_TREE")
        .map(PathBuf::from)
        .ok_or("EXECSEAM_BENCH_TREE is unset (cargo xtask bench makes the tree)")?;
    let stamp = root.join(".complete");
    let count = std::fs::read_to_string(&stamp)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .ok_or_else(|| format!("{}: no complete tree", root.display()))?;
    Ok((root, count))
}

async fn p4(plan: &Plan) -> Result<(), String> {
    const LIMIT: usize = 1000;
    let (root, count) = tree()?;
    let root = root.canonicalize().map_err(|e| e.to_string())?;
    let r = root.to_string_lossy().into_owned();
    let local = execseam_local::LocalExec::new();
    let tools = execseam_tools::Tools::new(&local);
    let ours = async || {
        let t = Instant::now();
        let l = tools
            .glob(&r, "**", LIMIT)
            .await
            .map_err(|e| e.to_string())?;
        let d = t.elapsed();
        if l.items.len() != LIMIT || l.omitted == 0 {
            return Err(format!(
                "glob: {} items, {} omitted",
                l.items.len(),
                l.omitted
            ));
        }
        Ok(d)
    };
    let theirs = async || {
        let t = Instant::now();
        let out = tokio::process::Command::new("sh")
            .args([
                "-c",
                "cd \"$1\" && find . -print0 | LC_ALL=C sort -z | head -z -n \"$2\"",
                "sh",
                &r,
                &LIMIT.to_string(),
            ])
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(|e| e.to_string())?;
        let d = t.elapsed();
        let n = out
            .stdout
            .split(|&b| b == 0)
            .filter(|r| !r.is_empty())
            .count();
        if !out.status.success() || n != LIMIT {
            return Err(format!("the pipeline: {} records, {:?}", n, out.status));
        }
        Ok(d)
    };
    // Each round walks the whole tree: `glob_rounds` pairs after one warm-up pair.
    let (a, b) = alternate_warm(1, plan.glob_rounds, ours, theirs).await?;
    row(
        "P4",
        &format!("glob `**` over a real tree of {count} files, limit {LIMIT}"),
        "Tools::glob via execseam-local",
        &a,
        "find | LC_ALL=C sort -z | head -z",
        &b,
        plan.glob_rounds,
        Some(1.2),
        "both walk the tree with find; the replayed variant is the glob bench target",
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------

/// One adapter's P1, P2 and P5; its P2 state and its emulator, when P2's delayed latency row
/// is still to run (see [`p2`]).
/// `EXECSEAM_BENCH_SECTIONS=P1,P5`: only those sections (a partial run, for development).
/// Without it, every section but [`OPT_IN`]'s.
fn on(section: &str) -> bool {
    std::env::var("EXECSEAM_BENCH_SECTIONS").ok().map_or_else(
        || !OPT_IN.contains(&section),
        |l| l.split(',').any(|x| x == section),
    )
}

/// Sections that run only when `EXECSEAM_BENCH_SECTIONS` names them, for the full run's time
/// budget (docs/performance.md, "Build and run time"): P7 at 200 pairs takes longer than the
/// rest of the suite (a spooled handle's start + attach + wait is 140 to 260 ms, Fly's about 2 s:
/// its follower reads once a second; four memory rows of 512 handles), P8 about 110 s.
const OPT_IN: &[&str] = &["P7", "P8"];

async fn adapter_rows(
    plan: &Plan,
    a: &execseam_reliability::Adapter,
) -> Result<Option<(P2, Setup)>, String> {
    let setup = (a.setup)(Knobs { idle_timeout: IDLE })
        .await
        .map_err(|e| format!("setup: {e}"))?;
    let adapter = (setup.through)(setup.upstream.clone(), IDLE)
        .await
        .map_err(|e| e.to_string())?;
    exec_true(&*adapter).await?;
    if on("P1")
        && let Err(e) = p1(plan, a.name, &setup, &adapter).await
    {
        missing("P1", &format!("{}: exec `{PROGRAM}`", a.name), &e);
    }
    let mut delayed = None;
    if on("P2") || on("P6") || on("P8") {
        match p2(plan, a.name, &setup).await {
            Ok(p2) => delayed = p2,
            Err(e) => missing("P2", &format!("{}: vs the Python SDK", a.name), &e),
        }
    }
    if on("P5") {
        p5(plan, a.name, &adapter).await;
    }
    if on("P7") {
        p7(plan, a.name, &adapter).await;
    }
    drop(adapter);
    Ok(delayed.map(|p2| (p2, setup)))
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!(
            "suite: run with `cargo xtask bench` (or `cargo bench -p execseam-reliability --bench suite`)"
        );
        return;
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let plan = Plan::from_env();
    *ROW_CLOCK.lock().expect("row clock") = Some(Instant::now());
    let only = std::env::var("EXECSEAM_BENCH_ONLY").ok();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let loadavg = || {
        std::fs::read_to_string("/proc/loadavg")
            .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
            .unwrap_or_default()
    };
    // The machine's load at the start and the end (xtask puts them in the document).
    println!("LOAD\t{}", loadavg());
    rt.block_on(async {
        eprintln!(
            "suite: {} pairs per row, {} at once{}",
            plan.pairs,
            plan.burst,
            if plan.quick { " (quick)" } else { "" }
        );
        let mut delayed = Vec::new();
        for a in setups::ADAPTERS {
            if only.as_deref().is_some_and(|o| o != a.name) {
                continue;
            }
            if a.name == "docker" && std::env::var_os("DOCKER_HOST").is_none() {
                missing("P1", "docker", "no engine (DOCKER_HOST unset; `.ci/podman start`); docker is not emulator-backed");
                continue;
            }
            let t = Instant::now();
            match adapter_rows(&plan, a).await {
                Ok(Some(d)) => delayed.push(d),
                Ok(None) => {}
                Err(e) => missing("P1", a.name, &e),
            }
            eprintln!("suite: {} done in {:.1} s", a.name, t.elapsed().as_secs_f64());
        }
        let t = Instant::now();
        let (p2s, setups): (Vec<P2>, Vec<Setup>) = delayed.into_iter().unzip();
        let n = p2s.len();
        p2_delayed(&plan, p2s, plan.lanes).await;
        drop(setups);
        eprintln!(
            "suite: P2's {n} latency rows {} done in {:.1} s",
            DELAY.0,
            t.elapsed().as_secs_f64()
        );
        if only.as_deref().is_none_or(|o| o == "local") && on("P7") {
            let local: Arc<dyn Exec> = Arc::new(execseam_local::LocalExec::new());
            p7(&plan, "local", &local).await;
        }
        if only.is_none() {
            if on("P3")
                && let Err(e) = p3(&plan).await
            {
                missing("P3", "local", &e);
            }
            if on("P4")
                && let Err(e) = p4(&plan).await
            {
                missing("P4", "glob over a real tree", &e);
            }
        }
    });
    rt.shutdown_timeout(Duration::from_secs(5));
    println!("LOAD\t{}", loadavg());
}

/// An HTTP/1.1 connection to `authority` (no delay on its socket, upgrades allowed), driven in
/// a task of its own: its request sender.
async fn raw_http1(
    authority: &str,
) -> Result<hyper::client::conn::http1::SendRequest<http_body_util::Full<Bytes>>, String> {
    let tcp = tokio::net::TcpStream::connect(authority)
        .await
        .map_err(|e| format!("raw connect: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(|e| format!("raw handshake: {e}"))?;
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    Ok(send)
}
