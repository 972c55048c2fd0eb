//! A small fake API server for the adapter's wire tests: `pods/exec` over WebSocket that runs
//! the argv on this host (channels 0-3, v5's close signal, v4 without one, the status written
//! once before the close, as apimachinery's `wsstream` and the apiserver's stream translator do),
//! and just enough of the agent-sandbox claim API for the lifecycle. Faults are set per test.
//!
//! It is not the emulator (that is `execseam emulate kubernetes`): it exists to make the
//! adapter's failure paths happen on demand.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_websockets::Message;

pub const NS: &str = "ns";
pub const POD: &str = "pod-1";

/// What an exec does wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Close the socket after the output, without a status.
    NoStatus,
    /// A status that is not JSON.
    BadStatus,
    /// `InternalError` instead of running the command.
    Internal,
    /// Start the command (on its own, as the runtime does at the upgrade), then never answer
    /// the upgrade; once only.
    NoAnswer,
}

#[derive(Default)]
pub struct State {
    /// The protocols the server speaks (in its order of support).
    pub protocols: Vec<&'static str>,
    pub fault: Option<Fault>,
    pub pods: BTreeSet<String>,
    pub claims: BTreeMap<String, Value>,
    /// Every request line (method and path with query).
    pub requests: Vec<String>,
    /// The argv of every exec.
    pub execs: Vec<Vec<String>>,
    pub rv: u64,
    /// Bytes of padding in a missing claim's `Status` (an error answer longer than the adapter
    /// quotes).
    pub error_padding: usize,
}

#[derive(Clone)]
pub struct Fake {
    pub addr: SocketAddr,
    pub state: Arc<Mutex<State>>,
}

impl Fake {
    pub async fn start() -> Fake {
        let state = Arc::new(Mutex::new(State {
            protocols: vec!["v5.channel.k8s.io", "v4.channel.k8s.io"],
            pods: [POD.to_owned()].into(),
            rv: 100,
            ..State::default()
        }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let s = state.clone();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let s = s.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| handle(s.clone(), req));
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tcp), svc)
                        .with_upgrades()
                        .await;
                });
            }
        });
        Fake { addr, state }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        f(&mut self.state.lock().unwrap())
    }
}

type Resp = Response<Full<Bytes>>;

fn json_response(code: u16, v: &Value) -> Resp {
    Response::builder()
        .status(code)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(v.to_string())))
        .unwrap()
}

fn status(code: u16, reason: &str, message: &str) -> Resp {
    json_response(
        code,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": message, "reason": reason, "code": code}),
    )
}

/// `application/x-www-form-urlencoded` values, as Go's `url.ParseQuery` reads them.
pub fn query(q: &str) -> Vec<(String, String)> {
    fn decode(s: &str) -> String {
        let b = s.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < b.len() => {
                    let h = u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap();
                    out.push(h);
                    i += 2;
                }
                c => out.push(c),
            }
            i += 1;
        }
        String::from_utf8(out).unwrap()
    }
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(p), String::new()),
        })
        .collect()
}

async fn handle(state: Arc<Mutex<State>>, req: Request<Incoming>) -> Result<Resp, Infallible> {
    let path = req.uri().path().to_owned();
    let q = req.uri().query().unwrap_or("").to_owned();
    state
        .lock()
        .unwrap()
        .requests
        .push(format!("{} {}?{}", req.method(), path, q));
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let claims = [
        "apis",
        "extensions.agents.x-k8s.io",
        "v1beta1",
        "namespaces",
        NS,
        "sandboxclaims",
    ];
    Ok(match (req.method().as_str(), parts.as_slice()) {
        ("GET", ["api", "v1", "namespaces", NS, "pods", pod, "exec"]) => {
            exec(state, req, pod.to_string(), q).await
        }
        ("GET", ["api", "v1", "namespaces", NS, "pods", pod]) => {
            if state.lock().unwrap().pods.contains(*pod) {
                json_response(200, &json!({"metadata": {"name": pod}}))
            } else {
                status(404, "NotFound", &format!("pods \"{pod}\" not found"))
            }
        }
        ("POST", p) if p == claims => {
            let body = http_body_util::BodyExt::collect(req.into_body())
                .await
                .unwrap()
                .to_bytes();
            let mut claim: Value = serde_json::from_slice(&body).unwrap();
            let mut s = state.lock().unwrap();
            s.rv += 1;
            let name = claim["metadata"]["name"].as_str().unwrap().to_owned();
            claim["metadata"]["resourceVersion"] = json!(s.rv.to_string());
            claim["metadata"]["uid"] = json!("uid-1");
            s.claims.insert(name, claim.clone());
            json_response(201, &claim)
        }
        ("GET", p) if p == claims => {
            // A watch: one MODIFIED event that binds the claim and makes it Ready, then the end.
            let params = query(&q);
            let field = params
                .iter()
                .find(|(k, _)| k == "fieldSelector")
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            let name = field.trim_start_matches("metadata.name=").to_owned();
            let mut s = state.lock().unwrap();
            let Some(c) = s.claims.get(&name).cloned() else {
                return Ok(json_response(
                    200,
                    &json!({"kind": "SandboxClaimList", "items": []}),
                ));
            };
            s.rv += 1;
            let mut c = c;
            c["metadata"]["resourceVersion"] = json!(s.rv.to_string());
            let pool = c["spec"]["warmPoolRef"]["name"]
                .as_str()
                .unwrap_or("")
                .to_owned();
            if pool == "missing-pool" {
                c["status"] = json!({"conditions": [{"type": "Ready", "status": "False",
                    "reason": "WarmPoolNotFound", "message": "SandboxWarmPool \"missing-pool\" not found",
                    "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
            } else {
                c["status"] = json!({"sandbox": {"name": "pool-abcde"}, "conditions": [{"type": "Ready",
                    "status": "True", "reason": "DependenciesReady", "message": "Pod is Ready",
                    "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
            }
            s.claims.insert(name, c.clone());
            let line = format!("{}\n", json!({"type": "MODIFIED", "object": c}));
            Response::builder()
                .status(200)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(line)))
                .unwrap()
        }
        ("GET", [.., "sandboxclaims", name]) => {
            let s = state.lock().unwrap();
            match s.claims.get(*name) {
                Some(c) => json_response(200, c),
                None if s.error_padding > 0 => json_response(
                    404,
                    &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "reason": "NotFound", "code": 404,
                        "details": {"causes": [{"message": "x".repeat(s.error_padding)}]}}),
                ),
                None => status(
                    404,
                    "NotFound",
                    &format!("sandboxclaims.extensions.agents.x-k8s.io \"{name}\" not found"),
                ),
            }
        }
        ("DELETE", [.., "sandboxclaims", name]) => {
            let mut s = state.lock().unwrap();
            match s.claims.remove(*name) {
                Some(c) => {
                    s.pods.remove(POD);
                    json_response(200, &c)
                }
                None => status(
                    404,
                    "NotFound",
                    &format!("sandboxclaims.extensions.agents.x-k8s.io \"{name}\" not found"),
                ),
            }
        }
        (
            "GET",
            [
                "apis",
                "agents.x-k8s.io",
                "v1beta1",
                "namespaces",
                NS,
                "sandboxes",
                name,
            ],
        ) => json_response(
            200,
            &json!({"metadata": {"name": name, "annotations": {"agents.x-k8s.io/pod-name": POD}}}),
        ),
        _ => status(
            404,
            "NotFound",
            "the server could not find the requested resource",
        ),
    })
}

async fn exec(state: Arc<Mutex<State>>, req: Request<Incoming>, pod: String, q: String) -> Resp {
    let (supported, fault, exists) = {
        let s = state.lock().unwrap();
        (s.protocols.clone(), s.fault, s.pods.contains(&pod))
    };
    if !exists {
        return status(404, "NotFound", &format!("pods \"{pod}\" not found"));
    }
    let offered: Vec<String> = req
        .headers()
        .get("sec-websocket-protocol")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(',')
        .map(|s| s.trim().to_owned())
        .collect();
    // wsstream's handshake: the first of the client's offers the server supports.
    let Some(chosen) = offered
        .iter()
        .find(|o| supported.contains(&o.as_str()))
        .cloned()
    else {
        // x/net/websocket answers a failed handshake with a bare 403.
        return Response::builder()
            .status(403)
            .body(Full::new(Bytes::new()))
            .unwrap();
    };
    let params = query(&q);
    let argv: Vec<String> = params
        .iter()
        .filter(|(k, _)| k == "command")
        .map(|(_, v)| v.clone())
        .collect();
    let stdin = params.iter().any(|(k, v)| k == "stdin" && v == "true");
    state.lock().unwrap().execs.push(argv.clone());
    if fault == Some(Fault::NoAnswer) {
        state.lock().unwrap().fault = None;
        let mut child = tokio::process::Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(std::process::Stdio::null())
            .spawn()
            .unwrap();
        tokio::spawn(async move { child.wait().await });
        return std::future::pending().await;
    }
    let key = req
        .headers()
        .get("sec-websocket-key")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let v5 = chosen == "v5.channel.k8s.io";
    tokio::spawn(async move {
        let upgraded = hyper::upgrade::on(req).await.unwrap();
        let ws = tokio_websockets::ServerBuilder::new().serve(TokioIo::new(upgraded));
        run(ws, argv, stdin, v5, fault).await;
    });
    Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header("connection", "Upgrade")
        .header("upgrade", "websocket")
        .header("sec-websocket-accept", accept(&key))
        .header("sec-websocket-protocol", chosen)
        .body(Full::new(Bytes::new()))
        .unwrap()
}

fn accept(key: &str) -> String {
    use base64::Engine as _;
    let mut sha = sha1_smol::Sha1::new();
    sha.update(key.as_bytes());
    sha.update(b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11");
    base64::engine::general_purpose::STANDARD.encode(sha.digest().bytes())
}

type Ws = tokio_websockets::WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

async fn run(ws: Ws, argv: Vec<String>, stdin: bool, v5: bool, fault: Option<Fault>) {
    let (mut tx, mut rx) = ws.split();
    // The first message: empty, on the lowest writable channel (util/proxy/websocket.go).
    let _ = tx.send(Message::binary(vec![1u8])).await;
    if fault == Some(Fault::Internal) {
        let s = json!({"metadata": {}, "status": "Failure", "message": "Internal error occurred: error executing command in container: container not running", "reason": "InternalError", "code": 500});
        let mut f = vec![3u8];
        f.extend_from_slice(s.to_string().as_bytes());
        let _ = tx.send(Message::binary(f)).await;
        let _ = tx.close().await;
        return;
    }
    let mut cmd = tokio::process::Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .stdin(if stdin {
            std::process::Stdio::piped()
        } else {
            std::process::Stdio::null()
        })
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let s = json!({"metadata": {}, "status": "Failure", "message": format!("Internal error occurred: OCI runtime exec failed: exec: {:?}: executable file not found in $PATH: {e}", argv[0]), "reason": "InternalError", "code": 500});
            let mut f = vec![3u8];
            f.extend_from_slice(s.to_string().as_bytes());
            let _ = tx.send(Message::binary(f)).await;
            let _ = tx.close().await;
            return;
        }
    };
    let mut child_stdin = child.stdin.take();
    let out = child.stdout.take().unwrap();
    let err = child.stderr.take().unwrap();
    let (ftx, mut frx) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    for (ch, mut r) in [
        (
            1u8,
            Box::new(out) as Box<dyn tokio::io::AsyncRead + Send + Unpin>,
        ),
        (
            2u8,
            Box::new(err) as Box<dyn tokio::io::AsyncRead + Send + Unpin>,
        ),
    ] {
        let ftx = ftx.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 32 << 10];
            loop {
                match r.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        let mut f = vec![ch];
                        f.extend_from_slice(&buf[..n]);
                        if ftx.send(f).await.is_err() {
                            return;
                        }
                    }
                }
            }
        });
    }
    drop(ftx);
    let mut reading = true;
    let mut outputs_open = true;
    loop {
        tokio::select! {
            m = rx.next(), if reading => match m {
                Some(Ok(m)) if m.is_binary() || m.is_text() => {
                    let p = m.into_payload();
                    match p.first() {
                        Some(0) => {
                            if let Some(w) = child_stdin.as_mut() {
                                let _ = w.write_all(&p[1..]).await;
                            }
                        }
                        Some(255) if v5 && p.len() == 2 && p[1] == 0 => {
                            child_stdin = None;
                        }
                        _ => {}
                    }
                }
                Some(Ok(_)) => {}
                _ => {
                    // The client went away: its stdin ends; the command is not killed (as
                    // on a real cluster).
                    reading = false;
                    child_stdin = None;
                }
            },
            f = frx.recv(), if outputs_open => match f {
                Some(f) => { let _ = tx.send(Message::binary(f)).await; }
                None => outputs_open = false,
            },
            else => break,
        }
        if !outputs_open {
            break;
        }
    }
    let status = child.wait().await.unwrap();
    let code = status
        .code()
        .unwrap_or(128 + std::os::unix::process::ExitStatusExt::signal(&status).unwrap_or(0));
    match fault {
        Some(Fault::NoStatus) => {}
        Some(Fault::BadStatus) => {
            let _ = tx.send(Message::binary(b"\x03{not json".to_vec())).await;
        }
        _ => {
            let s = if code == 0 {
                json!({"metadata": {}, "status": "Success"})
            } else {
                json!({"metadata": {}, "status": "Failure",
                       "message": format!("command terminated with non-zero exit code: command terminated with exit code {code}"),
                       "reason": "NonZeroExitCode",
                       "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]}})
            };
            let mut f = vec![3u8];
            f.extend_from_slice(s.to_string().as_bytes());
            let _ = tx.send(Message::binary(f)).await;
        }
    }
    let _ = tx.close().await;
}
