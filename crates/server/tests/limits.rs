//! `serve` under connections that never finish a request (issue 38): a header-read timeout,
//! a connection limit below the descriptor limit, `/healthz` saying what `/execute` can do, and
//! an `Idempotency-Key` that is there but invalid.

mod common;

use std::time::{Duration, Instant};

use common::*;
use execseam_server::{Server, listen};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn server(tweak: impl FnOnce(&mut execseam_server::Config)) -> Server {
    let mut c = config(sqlite_url("limits"));
    tweak(&mut c);
    Server::start(c).await.expect("the server starts")
}

fn http() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().no_proxy().build().unwrap()
}

async fn execute(base: &str, script: &str) -> (u16, String) {
    let r = http()
        .post(format!("{base}/execute"))
        .bearer_auth(ALICE)
        .body(format!(r#"{{"language":"bash","script":"{script}"}}"#))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// `n` connections that each send half a request head and nothing more.
async fn partial_heads(addr: std::net::SocketAddr, n: usize) -> Vec<TcpStream> {
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"POST /execute HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        conns.push(s);
    }
    conns
}

/// True once the server closed `s` (EOF or reset; anything it wrote first is read).
async fn closed(s: &mut TcpStream) -> bool {
    let mut buf = [0u8; 1024];
    loop {
        match s.read(&mut buf).await {
            Ok(0) | Err(_) => return true,
            Ok(_) => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_partial_heads_do_not_stop_execute_and_are_closed_on_the_header_timeout() {
    // 2,000 client sockets and 2,000 accepted ones live in this process.
    assert!(
        listen::raise_nofile() >= 4_300,
        "this test needs 4,300 descriptors"
    );
    let s = server(|c| c.header_timeout = Duration::from_secs(1)).await;
    let start = Instant::now();
    let mut partial = partial_heads(s.addr(), 2_000).await;
    let (st, body) =
        tokio::time::timeout(Duration::from_secs(5), execute(&s.base_url(), "echo ok"))
            .await
            .expect("/execute answered within 5 s beside 2,000 partial heads");
    assert_eq!(st, 200, "{body}");
    assert!(body.contains(r#""stdout":"ok\n""#), "{body}");
    // Before this listener (axum::serve, no timer) they stayed open for good.
    let all = futures_util::future::join_all(partial.iter_mut().map(closed));
    tokio::time::timeout(Duration::from_secs(3) + start.elapsed(), all)
        .await
        .expect("every partial head closed within the header timeout (+2 s)");
}

#[tokio::test]
async fn an_idle_kept_alive_connection_is_closed_after_the_header_timeout() {
    let s = server(|c| c.header_timeout = Duration::from_millis(500)).await;
    let mut conn = TcpStream::connect(s.addr()).await.unwrap();
    conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = conn.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
    let start = Instant::now();
    tokio::time::timeout(Duration::from_secs(3), closed(&mut conn))
        .await
        .expect("the idle connection was closed");
    assert!(start.elapsed() >= Duration::from_millis(400));
}

#[tokio::test]
async fn at_the_limit_a_new_connection_evicts_an_idle_one_and_execute_answers() {
    let s = server(|c| c.max_connections = Some(50)).await;
    let mut partial = partial_heads(s.addr(), 150).await;
    let (st, body) =
        tokio::time::timeout(Duration::from_secs(5), execute(&s.base_url(), "echo ok"))
            .await
            .expect("/execute answered at the connection limit");
    assert_eq!(st, 200, "{body}");
    let conns = &s.node().connections;
    assert!(conns.open() <= 50, "{} open", conns.open());
    assert!(conns.evicted() >= 100, "{} evicted", conns.evicted());
    // The oldest were closed to make room.
    tokio::time::timeout(Duration::from_secs(2), closed(&mut partial[0]))
        .await
        .expect("the oldest partial head was evicted");
}

#[tokio::test]
async fn when_every_connection_is_busy_a_new_one_is_refused_at_once() {
    let s = server(|c| {
        c.max_connections = Some(3);
        c.max_running = 4;
    })
    .await;
    let base = s.base_url();
    let conns = s.node().connections.clone();
    // Two running commands and one request whose body never comes: three requests in flight.
    let busy: Vec<_> = (0..2)
        .map(|_| tokio::spawn(execute_owned(base.clone())))
        .collect();
    let mut slow = TcpStream::connect(s.addr()).await.unwrap();
    let head = format!(
        "POST /execute HTTP/1.1\r\nHost: x\r\nauthorization: Bearer {ALICE}\r\ncontent-length: 1000\r\n\r\n{{"
    );
    slow.write_all(head.as_bytes()).await.unwrap();
    until("three busy connections", || conns.busy() == 3).await;
    let start = Instant::now();
    let mut c = TcpStream::connect(s.addr()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(2), c.read_to_end(&mut answer))
        .await
        .expect("refused at once")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("SERVER_BUSY"), "{answer}");
    assert!(start.elapsed() < Duration::from_secs(2));
    assert_eq!(conns.refused(), 1);
    drop(slow);
    for b in busy {
        assert_eq!(b.await.unwrap(), 200);
    }
    let r = http().get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let h: serde_json::Value = r.json().await.unwrap();
    assert_eq!(
        (h["connection_limit"].as_u64(), h["status"].as_str()),
        (Some(3), Some("ok"))
    );
}

async fn execute_owned(base: String) -> u16 {
    execute(&base, "sleep 2").await.0
}

#[tokio::test]
async fn healthz_reports_connections_exhausted_when_a_new_connection_would_be_refused() {
    let s = server(|c| {
        c.max_connections = Some(2);
        c.max_running = 4;
    })
    .await;
    let mut keep = TcpStream::connect(s.addr()).await.unwrap();
    let busy = tokio::spawn(execute_owned(s.base_url()));
    let conns = s.node().connections.clone();
    until("one busy connection", || conns.busy() == 1).await;
    // The kept connection asks: while it does, both connections are busy.
    keep.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    keep.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.contains(r#""status":"connections_exhausted""#),
        "{answer}"
    );
    assert_eq!(busy.await.unwrap(), 200);
}

#[tokio::test]
async fn a_non_ascii_idempotency_key_is_invalid_not_missing() {
    let s = server(|_| {}).await;
    let key = reqwest::header::HeaderValue::from_bytes("ключ".as_bytes()).unwrap();
    let r = http()
        .post(format!("{}/executions", s.base_url()))
        .bearer_auth(ALICE)
        .header("idempotency-key", key)
        .body(r#"{"language":"bash","script":"true"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let body = r.text().await.unwrap();
    assert!(body.contains("INVALID_REQUEST"), "{body}");
    assert!(body.contains("printable ASCII"), "{body}");
    let r = http()
        .post(format!("{}/executions", s.base_url()))
        .bearer_auth(ALICE)
        .body(r#"{"language":"bash","script":"true"}"#)
        .send()
        .await
        .unwrap();
    assert!(r.text().await.unwrap().contains("IDEMPOTENCY_KEY_MISSING"));
}
