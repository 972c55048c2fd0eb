//! `GET /v1/sandbox/{id}/pty`: the bridge's terminal WebSocket, as the real one behaves.
//!
//! From the sources (bridge `@cloudflare/sandbox` 0.12.10 `dist/bridge/index.js`, the `pty` route
//! and the SDK's `proxyTerminal`; container 0.12.7 `packages/sandbox-container/src/server.ts`
//! (`/ws/pty`), `handlers/pty-ws-handler.ts`, `pty.ts` and `services/session-manager.ts`
//! `getPty`):
//! - the bridge checks `Upgrade: websocket` (400 `invalid_request` "WebSocket upgrade required"),
//!   `cols`/`rows` (`Number(…)`; NaN is 400 "cols and rows must be valid numbers"; absent, empty
//!   or 0 means the container's 80×24), then a `Session-Id` header or `?session=` (400 "Invalid
//!   session ID format"); without one the terminal belongs to the sandbox's default session,
//!   `sandbox-<id>`, and the upgrade is passed through to the container unchanged;
//! - the container keeps **one terminal per session**: the first connection starts `bash` (or
//!   `?shell=`) on a pseudo-terminal in the session's working directory with the session's
//!   environment plus `TERM=xterm-256color` and `PROMPT_COMMAND='clear; unset PROMPT_COMMAND'`;
//!   later connections attach to the same shell. It keeps the last 256 KiB of output; a connection
//!   first receives that buffer as one binary frame, then `{"type":"ready"}`, then live output as
//!   binary frames;
//! - binary frames from the client are keystrokes; a text frame is a control message:
//!   `{"type":"resize","cols":C,"rows":R}` resizes the terminal (non-positive sizes answer
//!   `{"type":"error","message":"Invalid dimensions: cols and rows must be positive"}`), other
//!   types are ignored, and text that is not JSON answers `{"type":"error","message":"Invalid
//!   control message"}`;
//! - a terminal that cannot be started answers `{"type":"error","message":"Failed to create PTY:
//!   …"}` and closes with 1011;
//! - closing the socket leaves the shell running. When the shell exits, the container sends
//!   nothing (the `exit` status message is declared in `packages/shared/src/pty-types.ts` and in
//!   the bridge's OpenAPI text, but no released handler sends it) and the terminal stays closed
//!   for the session: input to it is dropped.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::{Request, Response, header};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use tokio::sync::mpsc;
use tokio_websockets::{CloseCode, Message};

use super::routes::{query_param, session_header};
use super::wire::{error_json, valid_session_id};
use super::{Entry, WORKSPACE};
use execseam_emulator_kit::ws::Ws;

/// The container's output ring buffer (`pty.ts` `DEFAULT_BUFFER_SIZE`).
pub(crate) const BUFFER: usize = 256 * 1024;

/// What a connection asks of the session's terminal.
pub(crate) enum Control {
    Write(Bytes),
    Resize(u16, u16),
    /// `Pty.destroy()` (its session deleted: `session-manager.ts` `deleteSession` →
    /// `Session.destroy`): the terminal closed and its program killed (`process.kill()`,
    /// Bun's default SIGTERM).
    Destroy,
}

struct TermState {
    ring: VecDeque<u8>,
    subscribers: Vec<mpsc::UnboundedSender<Bytes>>,
    closed: bool,
}

/// A session's terminal: the shell on its pseudo-terminal, its buffered output and the
/// connections attached to it.
pub(crate) struct Terminal {
    state: Mutex<TermState>,
    control: mpsc::UnboundedSender<Control>,
}

impl Terminal {
    fn new(control: mpsc::UnboundedSender<Control>) -> Terminal {
        Terminal {
            state: Mutex::new(TermState {
                ring: VecDeque::new(),
                subscribers: Vec::new(),
                closed: false,
            }),
            control,
        }
    }

    /// Output from the terminal: into the ring buffer and to every attached connection.
    pub(crate) fn output(&self, data: &[u8]) {
        let mut s = self.state.lock().expect("terminal");
        s.ring.extend(data);
        let excess = s.ring.len().saturating_sub(BUFFER);
        s.ring.drain(..excess);
        let chunk = Bytes::copy_from_slice(data);
        s.subscribers.retain(|tx| tx.send(chunk.clone()).is_ok());
    }

    /// The shell exited: the terminal stays closed for its session.
    pub(crate) fn close(&self) {
        self.state.lock().expect("terminal").closed = true;
    }

    /// Ends every connection (the sandbox is gone).
    pub(crate) fn detach_all(&self) {
        self.state.lock().expect("terminal").subscribers.clear();
    }

    /// The buffered output and a receiver of what follows (taken together, so nothing is lost
    /// or sent twice).
    fn attach(&self) -> (Bytes, mpsc::UnboundedReceiver<Bytes>) {
        let mut s = self.state.lock().expect("terminal");
        let (tx, rx) = mpsc::unbounded_channel();
        s.subscribers.push(tx);
        let (a, b) = s.ring.as_slices();
        (Bytes::from([a, b].concat()), rx)
    }

    fn send(&self, c: Control) {
        if !self.state.lock().expect("terminal").closed {
            let _ = self.control.send(c);
        }
    }
}

/// The terminals of one sandbox, by session id (created under the lock, as the container's
/// session lock serialises `getPty`).
#[derive(Default)]
pub(crate) struct Terminals {
    map: tokio::sync::Mutex<HashMap<String, Arc<Terminal>>>,
}

impl Terminals {
    /// Destroys the terminal of `session` (its session is being deleted); false if it had none.
    pub(crate) async fn destroy(&self, session: &str) -> bool {
        match self.map.lock().await.remove(session) {
            Some(t) => {
                t.send(Control::Destroy);
                true
            }
            None => false,
        }
    }
}

/// What the terminal is started with.
pub(crate) struct Launch {
    pub(crate) shell: String,
    pub(crate) cols: u16,
    pub(crate) rows: u16,
    pub(crate) cwd: String,
    pub(crate) env: Vec<(String, String)>,
}

/// `Number(param)` as the bridge parses it: `None` for NaN, 0 for absent or empty (then the
/// container's default applies).
fn js_number(p: Option<&str>) -> Option<f64> {
    match p {
        None | Some("") => Some(0.0),
        Some(s) => {
            let t = s.trim();
            if t.is_empty() {
                Some(0.0)
            } else {
                t.parse::<f64>().ok().filter(|n| !n.is_nan())
            }
        }
    }
}

/// A size as the container takes it: the bridge forwards only truthy numbers, the container
/// `parseInt`s them; anything outside 1..=1000 falls back to the default here (not verified
/// against Bun.Terminal).
fn size(n: f64, default: u16) -> u16 {
    let n = n.trunc();
    if (1.0..=1000.0).contains(&n) {
        n as u16
    } else {
        default
    }
}

pub(crate) async fn route(
    entry: Arc<Entry>,
    sandbox_id: &str,
    mut req: Request<Body>,
) -> Response<Body> {
    let upgrade = req
        .headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !upgrade.eq_ignore_ascii_case("websocket") {
        return error_json("WebSocket upgrade required", "invalid_request", 400);
    }
    let cols = js_number(query_param(req.uri(), "cols").as_deref());
    let rows = js_number(query_param(req.uri(), "rows").as_deref());
    let (Some(cols), Some(rows)) = (cols, rows) else {
        return error_json(
            "cols and rows must be valid numbers",
            "invalid_request",
            400,
        );
    };
    let shell = query_param(req.uri(), "shell").filter(|s| !s.is_empty());
    // `c.req.header("Session-Id") || c.req.query("session")`, then `validateSessionId`.
    let session = match session_header(req.headers()) {
        Err(r) => return r,
        Ok(Some(s)) => Some(s),
        Ok(None) => match query_param(req.uri(), "session").filter(|s| !s.is_empty()) {
            Some(s) if valid_session_id(&s) => Some(s),
            Some(_) => return error_json("Invalid session ID format", "invalid_request", 400),
            None => None,
        },
    };
    let session = session.unwrap_or_else(|| format!("sandbox-{sandbox_id}"));
    let launch = Launch {
        shell: shell.unwrap_or_else(|| "bash".into()),
        cols: size(cols, 80),
        rows: size(rows, 24),
        cwd: WORKSPACE.into(),
        env: Vec::new(),
    };
    execseam_emulator_kit::ws::upgrade(&mut req, move |ws| serve(entry, session, launch, ws))
}

fn status(v: serde_json::Value) -> Message {
    Message::text(v.to_string())
}

async fn serve(entry: Arc<Entry>, session: String, launch: Launch, mut ws: Ws) {
    let terminal = match terminal(&entry, &session, launch).await {
        Ok(t) => t,
        Err(e) => {
            let message = format!("Failed to create PTY: {e}");
            let _ = ws
                .send(status(
                    serde_json::json!({"type": "error", "message": message}),
                ))
                .await;
            let _ = ws
                .send(Message::close(
                    Some(CloseCode::INTERNAL_SERVER_ERROR),
                    &message,
                ))
                .await;
            return;
        }
    };
    let (buffered, mut rx) = terminal.attach();
    if !buffered.is_empty() && ws.send(Message::binary(buffered)).await.is_err() {
        return;
    }
    if ws
        .send(status(serde_json::json!({"type": "ready"})))
        .await
        .is_err()
    {
        return;
    }
    loop {
        tokio::select! {
            out = rx.recv() => match out {
                Some(data) => {
                    if ws.send(Message::binary(data)).await.is_err() {
                        return;
                    }
                }
                // The terminal is gone (its sandbox was destroyed).
                None => {
                    let _ = ws.send(Message::close(Some(CloseCode::GOING_AWAY), "")).await;
                    return;
                }
            },
            msg = ws.next() => match msg {
                Some(Ok(m)) if m.is_binary() => {
                    terminal.send(Control::Write(m.into_payload().into()));
                }
                Some(Ok(m)) if m.is_text() => {
                    let reply = control(&terminal, m.as_text().unwrap_or(""));
                    if let Some(v) = reply
                        && ws.send(status(v)).await.is_err()
                    {
                        return;
                    }
                }
                Some(Ok(m)) if m.is_close() => return,
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return,
            },
        }
    }
}

/// A control message (`pty-ws-handler.ts` `handleControl`); `Some` is the status to send.
fn control(terminal: &Terminal, text: &str) -> Option<serde_json::Value> {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(text) else {
        return Some(serde_json::json!({"type": "error", "message": "Invalid control message"}));
    };
    if v.get("type").and_then(|t| t.as_str()) != Some("resize") {
        return None;
    }
    let num = |k: &str| v.get(k).and_then(|n| n.as_f64()).unwrap_or(f64::NAN);
    let (cols, rows) = (num("cols"), num("rows"));
    // `control.cols <= 0 || control.rows <= 0`: false for NaN (then Bun.Terminal decides; here
    // nothing changes).
    if cols <= 0.0 || rows <= 0.0 {
        return Some(serde_json::json!({
            "type": "error",
            "message": "Invalid dimensions: cols and rows must be positive"
        }));
    }
    if cols.is_finite() && rows.is_finite() {
        terminal.send(Control::Resize(
            cols.min(u16::MAX as f64) as u16,
            rows.min(u16::MAX as f64) as u16,
        ));
    }
    None
}

/// The session's terminal, started on first use with the session's working directory and
/// environment (`session-manager.ts` `getPty`: the session shell's `env -0` and `pwd`).
async fn terminal(
    entry: &Arc<Entry>,
    session: &str,
    mut launch: Launch,
) -> std::io::Result<Arc<Terminal>> {
    let mut map = entry.terminals.map.lock().await;
    if let Some(t) = map.get(session) {
        return Ok(t.clone());
    }
    let named = entry
        .sessions
        .lock()
        .expect("sessions")
        .get(session)
        .cloned();
    if let Some(s) = named {
        launch.cwd = s.cwd.clone();
        launch.env = s.env.clone();
    }
    let (tx, rx) = mpsc::unbounded_channel();
    let t = Arc::new(Terminal::new(tx));
    super::pty_spawn::start(entry, t.clone(), rx, launch).await?;
    map.insert(session.to_owned(), t.clone());
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_sizes_follow_the_bridge_and_container() {
        assert_eq!(js_number(None), Some(0.0));
        assert_eq!(js_number(Some("")), Some(0.0));
        assert_eq!(js_number(Some("120")), Some(120.0));
        assert_eq!(js_number(Some("abc")), None);
        assert_eq!(size(0.0, 80), 80);
        assert_eq!(size(120.9, 80), 120);
    }

    #[test]
    fn the_ring_keeps_the_last_256_kib_and_attach_sees_the_rest() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let t = Terminal::new(tx);
        t.output(&vec![b'a'; BUFFER]);
        t.output(b"tail");
        let (buf, mut rx) = t.attach();
        assert_eq!(buf.len(), BUFFER);
        assert!(buf.ends_with(b"tail"));
        t.output(b"live");
        assert_eq!(rx.try_recv().unwrap(), Bytes::from_static(b"live"));
    }

    #[test]
    fn control_messages_answer_as_the_container_does() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let t = Terminal::new(tx);
        assert_eq!(
            control(&t, "not json").unwrap()["message"],
            "Invalid control message"
        );
        assert_eq!(
            control(&t, r#"{"type":"resize","cols":0,"rows":10}"#).unwrap()["message"],
            "Invalid dimensions: cols and rows must be positive"
        );
        assert!(control(&t, r#"{"type":"other"}"#).is_none());
        assert!(control(&t, r#"{"type":"resize","cols":100,"rows":30}"#).is_none());
        assert!(matches!(rx.try_recv(), Ok(Control::Resize(100, 30))));
    }
}
