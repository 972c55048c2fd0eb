//! The toolbox's PTY sessions (`apps/daemon/pkg/toolbox/process/pty`: `controller.go`,
//! `session.go`, `websocket.go`, `subprotocol.go`, `types.go`): `POST /process/pty` (create, 201
//! `{"sessionId"}`), `GET /process/pty` (`{"sessions":[PtySessionInfo]}`), `GET|DELETE
//! /process/pty/{id}`, `POST /process/pty/{id}/resize` (`{"cols","rows"}`, answers the info), and
//! two WebSockets: `GET /process/pty/{id}/connect` and `GET /process/pty/create-connect?id&cwd&cols&rows`
//! (envs as the subprotocol token `X-Daytona-Pty-Envs~<base64url JSON>`). The shell (`-i -l`)
//! runs on a real pseudo-terminal of the sandbox ([`Sandbox::spawn_pty`]) with `TERM`
//! defaulting to `xterm-256color`; a client gets `{"type":"control","status":"connected"}`, then
//! the terminal's output as binary frames (no replay of what came before it connected); every
//! frame it sends (text or binary) is typed into the terminal. When the shell exits, every client
//! gets a close frame whose reason is `{"exitCode":N[,"exitReason":R]}` (code 1000 for exit 0,
//! 1011 otherwise); `DELETE` closes them with 137 / `SIGKILL`. A slow client is dropped (1008
//! "slow consumer"), as the daemon drops one whose queue is full.

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::body::Body;
use axum::response::Response;
use base64::Engine as _;
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};
use tokio_websockets::{CloseCode, Message, WebSocketStream};

use super::{HOME, SandboxEntry, daemon_error, json_response};
use execseam_emulator_kit::clock::{self, Fraction};
use execseam_emulator_kit::{PtyMaster, PtySize};

const ENVS_PREFIX: &str = "X-Daytona-Pty-Envs~";

/// `PtySessionInfo`.
#[derive(Clone, Debug)]
struct Info {
    id: String,
    cwd: String,
    envs: BTreeMap<String, String>,
    cols: u16,
    rows: u16,
    created_at: String,
    active: bool,
    lazy_start: bool,
}

impl Info {
    fn json(&self) -> Value {
        json!({
            "id": self.id,
            "cwd": self.cwd,
            "envs": self.envs,
            "cols": self.cols,
            "rows": self.rows,
            "createdAt": self.created_at,
            "active": self.active,
            "lazyStart": self.lazy_start,
        })
    }
}

/// One PTY session.
pub(crate) struct PtySession {
    info: Mutex<Info>,
    master: PtyMaster,
    host_pid: u32,
    sb: std::sync::Weak<SandboxEntry>,
    out: broadcast::Sender<Bytes>,
    /// `(exitCode, exitReason)` once the shell ended or the session was deleted.
    exit: watch::Sender<Option<(i32, Option<String>)>>,
}

/// `closeClientsWithExitCode`'s reason for an exit code.
fn exit_reason(code: i32) -> Option<String> {
    match code {
        0 => None,
        130 => Some("Ctrl+C".into()),
        137 => Some("SIGKILL".into()),
        143 => Some("SIGTERM".into()),
        c if c > 128 => Some(format!("signal {}", c - 128)),
        _ => Some("non-zero exit".into()),
    }
}

impl PtySession {
    /// `kill` (DELETE): the process is killed and every client closed with 137.
    pub(crate) fn kill(&self) {
        let was_active = {
            let mut info = self.info.lock().expect("info");
            std::mem::replace(&mut info.active, false)
        };
        if !was_active {
            return;
        }
        if let Some(sb) = self.sb.upgrade() {
            let _ = sb.sandbox.signal_group(self.host_pid, libc::SIGKILL);
        }
        self.exit
            .send_if_modified(|e| e.is_none() && e.replace((137, exit_reason(137))).is_none());
    }
}

/// Starts a session's shell (`session.start`): `-i -l` on a terminal of `cols`×`rows`, in `cwd`,
/// with the sandbox's environment, then `envs`.
async fn start(
    sb: &Arc<SandboxEntry>,
    id: &str,
    cwd: String,
    mut envs: BTreeMap<String, String>,
    cols: u16,
    rows: u16,
) -> Result<Arc<PtySession>, String> {
    if envs.get("TERM").is_none_or(|t| t.is_empty()) {
        envs.insert("TERM".into(), "xterm-256color".into());
    }
    let user = sb.sandbox.user().clone();
    let mut cmd = tokio::process::Command::new(super::process::shell());
    cmd.args(["-i", "-l"])
        .env_clear()
        .envs(sb.sandbox.env_of(&user))
        .envs(sb.env.clone())
        .envs(envs.clone())
        .kill_on_drop(false);
    let p = sb
        .sandbox
        .spawn_pty(cmd, &user, &cwd, PtySize::new(rows, cols))
        .await
        .map_err(|e| match e {
            execseam_spawn::SpawnError::Workdir(w) => format!("pty.StartWithSize: chdir: {w}"),
            execseam_spawn::SpawnError::Io(e) => format!("pty.StartWithSize: {e}"),
        })?;
    let (out, _) = broadcast::channel(256);
    let (exit, _) = watch::channel(None);
    let session = Arc::new(PtySession {
        info: Mutex::new(Info {
            id: id.to_owned(),
            cwd,
            envs,
            cols,
            rows,
            created_at: clock::rfc3339(SystemTime::now(), Fraction::Trimmed),
            active: true,
            lazy_start: false,
        }),
        master: p.master.clone(),
        host_pid: p.host_pid,
        sb: Arc::downgrade(sb),
        out: out.clone(),
        exit: exit.clone(),
    });
    sb.ptys
        .lock()
        .expect("ptys")
        .insert(id.to_owned(), session.clone());
    let (mut child, master, s2) = (p.child, p.master, session.clone());
    let task = tokio::spawn(async move {
        let mut buf = vec![0u8; 32 << 10];
        let mut status = None;
        let mut open = true;
        let mut drain_until: Option<tokio::time::Instant> = None;
        while open || status.is_none() {
            let drain = async {
                match drain_until {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                n = master.read(&mut buf), if open => match n {
                    Ok(n) if n > 0 => { let _ = out.send(Bytes::copy_from_slice(&buf[..n])); }
                    _ => open = false,
                },
                st = child.wait(), if status.is_none() => {
                    status = Some(st);
                    drain_until = Some(tokio::time::Instant::now() + Duration::from_secs(1));
                }
                () = drain => open = false,
            }
        }
        // Go's `ExitCode()`: the code, or -1 for a signal death.
        let code = match status {
            Some(Ok(s)) => s
                .code()
                .unwrap_or(if s.signal().is_some() { -1 } else { 1 }),
            _ => 1,
        };
        s2.info.lock().expect("info").active = false;
        s2.exit
            .send_if_modified(|e| e.is_none() && e.replace((code, exit_reason(code))).is_none());
        if let Some(sb) = s2.sb.upgrade() {
            let mut ptys = sb.ptys.lock().expect("ptys");
            if ptys
                .get(&s2.info.lock().expect("info").id)
                .is_some_and(|p| Arc::ptr_eq(p, &s2))
            {
                ptys.remove(&s2.info.lock().expect("info").id);
            }
        }
    });
    sb.sandbox.track(task.abort_handle());
    Ok(session)
}

fn error(status: StatusCode, msg: &str, path: &str, method: &str) -> Response {
    daemon_error(status, msg, None, path, method)
}

/// A new session's id: given (else a 400 saying `missing`) and not in use (else a 409).
fn new_id(
    sb: &SandboxEntry,
    id: &str,
    missing: &str,
    path: &str,
    method: &str,
) -> Result<(), Response> {
    if id.is_empty() {
        return Err(error(StatusCode::BAD_REQUEST, missing, path, method));
    }
    if sb.ptys.lock().expect("ptys").contains_key(id) {
        return Err(error(
            StatusCode::CONFLICT,
            &format!("PTY session with ID '{id}' already exists"),
            path,
            method,
        ));
    }
    Ok(())
}

/// The `Sec-WebSocket-Key` of an upgrade request.
pub(crate) fn ws_key(req: &Request<Body>) -> Option<Vec<u8>> {
    req.headers()
        .get(http::header::SEC_WEBSOCKET_KEY)
        .map(|k| k.as_bytes().to_vec())
}

fn query(req: &Request<Body>) -> BTreeMap<String, String> {
    super::files::query(req).into_iter().collect()
}

/// `parseUint16Query`: the default when absent or unparsable.
fn u16_query(q: &BTreeMap<String, String>, key: &str, default: u16) -> u16 {
    q.get(key)
        .filter(|v| !v.is_empty())
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `extractPtyEnvsSubprotocol`.
fn envs_subprotocol(req: &Request<Body>) -> Result<BTreeMap<String, String>, String> {
    let Some(list) = req
        .headers()
        .get(http::header::SEC_WEBSOCKET_PROTOCOL)
        .and_then(|v| v.to_str().ok())
    else {
        return Ok(BTreeMap::new());
    };
    for p in list.split(',').map(str::trim) {
        if let Some(enc) = p.strip_prefix(ENVS_PREFIX) {
            let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(enc)
                .map_err(|e| format!("failed to decode PTY envs subprotocol: {e}"))?;
            return serde_json::from_slice(&raw)
                .map_err(|e| format!("failed to unmarshal PTY envs subprotocol: {e}"));
        }
    }
    Ok(BTreeMap::new())
}

/// Routes `/process/pty…`; `None` when the path is not a PTY route.
pub(crate) async fn route(
    sb: Arc<SandboxEntry>,
    method: &str,
    segs: &[&str],
    path: &str,
    req: Request<Body>,
) -> Option<Response> {
    Some(match (method, segs) {
        ("GET", ["process", "pty"]) => {
            let sessions: Vec<Value> = sb
                .ptys
                .lock()
                .expect("ptys")
                .values()
                .map(|s| s.info.lock().expect("info").json())
                .collect();
            json_response(StatusCode::OK, &json!({ "sessions": sessions }))
        }
        ("POST", ["process", "pty"]) => create(sb, path, req).await,
        ("GET", ["process", "pty", "create-connect"]) => create_connect(sb, path, req).await,
        ("GET", ["process", "pty", id]) => match sb.ptys.lock().expect("ptys").get(*id) {
            Some(s) => json_response(StatusCode::OK, &s.info.lock().expect("info").json()),
            None => error(StatusCode::NOT_FOUND, "PTY session not found", path, method),
        },
        ("DELETE", ["process", "pty", id]) => {
            let s = sb.ptys.lock().expect("ptys").remove(*id);
            match s {
                Some(s) => {
                    s.kill();
                    json_response(StatusCode::OK, &json!({"message": "PTY session deleted"}))
                }
                None => error(StatusCode::NOT_FOUND, "PTY session not found", path, method),
            }
        }
        ("POST", ["process", "pty", id, "resize"]) => {
            let id = (*id).to_owned();
            resize(sb, &id, path, req).await
        }
        ("GET", ["process", "pty", id, "connect"]) => {
            let s = sb.ptys.lock().expect("ptys").get(*id).cloned();
            let id = (*id).to_owned();
            upgrade(req, move |ws| async move {
                match s.filter(|s| s.info.lock().expect("info").active) {
                    Some(s) => serve(ws, s).await,
                    None => {
                        send_error(
                            ws,
                            &format!(
                                "Failed to connect to PTY session: PTY session {id} not found"
                            ),
                        )
                        .await
                    }
                }
            })
        }
        _ => return None,
    })
}

async fn create(sb: Arc<SandboxEntry>, path: &str, req: Request<Body>) -> Response {
    let body = axum::body::to_bytes(req.into_body(), 1 << 20)
        .await
        .unwrap_or_default();
    let v: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return error(StatusCode::BAD_REQUEST, &e.to_string(), path, "POST"),
    };
    let id = v["id"].as_str().unwrap_or_default().to_owned();
    if let Err(r) = new_id(&sb, &id, "session ID is required", path, "POST") {
        return r;
    }
    let cwd = v["cwd"]
        .as_str()
        .filter(|c| !c.is_empty())
        .unwrap_or(HOME)
        .to_owned();
    let envs: BTreeMap<String, String> = v["envs"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_owned())))
                .collect()
        })
        .unwrap_or_default();
    let dim = |k: &str| {
        v[k].as_u64()
            .map_or(Some(if k == "cols" { 80 } else { 24 }), |n| {
                u16::try_from(n).ok()
            })
    };
    let (Some(cols), Some(rows)) = (dim("cols"), dim("rows")) else {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid value for cols or rows",
            path,
            "POST",
        );
    };
    if cols > 1000 {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid value for cols - must be less than 1000",
            path,
            "POST",
        );
    }
    if rows > 1000 {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid value for rows - must be less than 1000",
            path,
            "POST",
        );
    }
    match start(&sb, &id, cwd, envs, cols, rows).await {
        Ok(_) => json_response(StatusCode::CREATED, &json!({ "sessionId": id })),
        Err(_) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "failed to start PTY session",
            path,
            "POST",
        ),
    }
}

async fn create_connect(sb: Arc<SandboxEntry>, path: &str, req: Request<Body>) -> Response {
    let q = query(&req);
    let id = q.get("id").cloned().unwrap_or_default();
    let missing = "session ID is required (query param 'id')";
    if let Err(r) = new_id(&sb, &id, missing, path, "GET") {
        return r;
    }
    let cwd = q.get("cwd").cloned().unwrap_or_else(|| HOME.to_owned());
    let (cols, rows) = (u16_query(&q, "cols", 80), u16_query(&q, "rows", 24));
    if cols > 1000 || rows > 1000 {
        return error(
            StatusCode::BAD_REQUEST,
            "cols and rows must be less than 1000",
            path,
            "GET",
        );
    }
    let envs = match envs_subprotocol(&req) {
        Ok(e) => e,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                &format!("invalid envs subprotocol: {e}"),
                path,
                "GET",
            );
        }
    };
    upgrade(req, move |ws| async move {
        match start(&sb, &id, cwd, envs, cols, rows).await {
            Ok(s) => serve(ws, s).await,
            Err(e) => send_error(ws, &format!("Failed to start PTY session: {e}")).await,
        }
    })
}

async fn resize(sb: Arc<SandboxEntry>, id: &str, path: &str, req: Request<Body>) -> Response {
    let body = axum::body::to_bytes(req.into_body(), 1 << 20)
        .await
        .unwrap_or_default();
    let v: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let dim = |k: &str| {
        v[k].as_u64()
            .and_then(|n| u16::try_from(n).ok())
            .filter(|n| *n >= 1)
    };
    let (Some(cols), Some(rows)) = (dim("cols"), dim("rows")) else {
        return error(
            StatusCode::BAD_REQUEST,
            "Key: 'PTYResizeRequest.Cols' Error:Field validation for 'Cols' failed on the 'required' tag",
            path,
            "POST",
        );
    };
    if cols > 1000 {
        return error(
            StatusCode::BAD_REQUEST,
            "cols must be less than 1000",
            path,
            "POST",
        );
    }
    if rows > 1000 {
        return error(
            StatusCode::BAD_REQUEST,
            "rows must be less than 1000",
            path,
            "POST",
        );
    }
    let Some(s) = sb.ptys.lock().expect("ptys").get(id).cloned() else {
        return error(
            StatusCode::GONE,
            &format!("PTY session {id} not found"),
            path,
            "POST",
        );
    };
    if !s.info.lock().expect("info").active {
        return error(
            StatusCode::GONE,
            &format!("PTY session {id} is not active"),
            path,
            "POST",
        );
    }
    if let Err(e) = s.master.resize(PtySize::new(rows, cols)) {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &e.to_string(),
            path,
            "POST",
        );
    }
    let info = {
        let mut info = s.info.lock().expect("info");
        info.cols = cols;
        info.rows = rows;
        info.json()
    };
    json_response(StatusCode::OK, &info)
}

type Ws = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// Answers 101 (no subprotocol selected) and hands the socket to `serve`.
fn upgrade<F, Fut>(mut req: Request<Body>, serve: F) -> Response
where
    F: FnOnce(Ws) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let Some(key) = ws_key(&req) else {
        return error(
            StatusCode::BAD_REQUEST,
            "missing Sec-WebSocket-Key",
            req.uri().path(),
            "GET",
        );
    };
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let Ok(upgraded) = on_upgrade.await else {
            return;
        };
        let ws = tokio_websockets::ServerBuilder::new().serve(TokioIo::new(upgraded));
        serve(ws).await;
    });
    execseam_emulator_kit::ws::switching_protocols(&key, None)
}

async fn send_error(mut ws: Ws, msg: &str) {
    let m = json!({"type": "control", "status": "error", "error": msg});
    let _ = ws.send(Message::text(m.to_string())).await;
    let _ = ws.close().await;
}

fn close_frame(code: i32, reason: Option<String>) -> Message {
    let mut data = serde_json::Map::new();
    data.insert("exitCode".into(), json!(code));
    if let Some(r) = reason {
        data.insert("exitReason".into(), json!(r));
    }
    let ws_code = if code == 0 {
        CloseCode::NORMAL_CLOSURE
    } else {
        CloseCode::INTERNAL_SERVER_ERROR
    };
    Message::close(Some(ws_code), &Value::Object(data).to_string())
}

/// One client (`attachWebSocket`): `connected`, then output and input until the exit.
async fn serve(mut ws: Ws, s: Arc<PtySession>) {
    let mut out = s.out.subscribe();
    let mut exit = s.exit.subscribe();
    let connected = json!({"type": "control", "status": "connected"});
    if ws.send(Message::text(connected.to_string())).await.is_err() {
        return;
    }
    loop {
        let ended = exit.borrow_and_update().clone();
        if let Some((code, reason)) = ended {
            // What the terminal wrote before the exit goes first.
            while let Ok(b) = out.try_recv() {
                if ws.send(Message::binary(b)).await.is_err() {
                    return;
                }
            }
            let _ = ws.send(close_frame(code, reason)).await;
            let _ = ws.flush().await;
            return;
        }
        tokio::select! {
            b = out.recv() => match b {
                Ok(b) => {
                    if ws.send(Message::binary(b)).await.is_err() {
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    let _ = ws
                        .send(Message::close(Some(CloseCode::POLICY_VIOLATION), "slow consumer"))
                        .await;
                    return;
                }
                Err(broadcast::error::RecvError::Closed) => {
                    let _ = exit.changed().await;
                }
            },
            r = exit.changed() => {
                if r.is_err() {
                    return;
                }
            }
            m = ws.next() => match m {
                Some(Ok(m)) if m.is_binary() || m.is_text() => {
                    let data = m.as_payload().to_vec();
                    if s.master.write_all(&data).await.is_err() {
                        let _ = ws
                            .send(Message::close(
                                Some(CloseCode::INTERNAL_SERVER_ERROR),
                                "PTY session unavailable",
                            ))
                            .await;
                        return;
                    }
                }
                Some(Ok(m)) if m.is_close() => return,
                Some(Ok(_)) => {}
                _ => return,
            },
        }
    }
}
