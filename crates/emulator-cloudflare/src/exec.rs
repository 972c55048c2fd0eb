//! `POST /v1/sandbox/{id}/exec`: validation in the bridge's order, faults, sessions, and the SSE
//! stream.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, Request, Response, header};
use bytes::Bytes;
use execseam_core::{Command, Event, ExecStream, Exit};
use execseam_emulator_kit::sh::quote;
use execseam_emulator_kit::stream::Utf8;
use futures_util::StreamExt as _;
use tokio::sync::mpsc;

use super::routes::{MAX_BODY, read_body, session_header};
use super::wire::{
    base64, error_body, error_json, resolve_workspace_path, shell_quote, sse_event, text,
};
use super::{Entry, Session, State, WORKSPACE};
use execseam_emulator_kit::clock::{self, Fraction};
use execseam_emulator_kit::{ConnControl, Fault, reset_connection};

const SESSIONS_DIR: &str = "/tmp/.execseam-bridge-sessions";

/// An ISO 8601 UTC timestamp with milliseconds (`new Date().toISOString()`).
pub(crate) fn timestamp() -> String {
    clock::rfc3339(std::time::SystemTime::now(), Fraction::Millis)
}

/// Creates a session's state: working directory and environment (the container's
/// `createSession`, cwd defaulting to `/workspace`).
pub(crate) async fn new_session(
    entry: &Entry,
    id: &str,
    cwd: Option<&str>,
    env: &[(String, String)],
) -> std::io::Result<()> {
    // Any string is a session id here: name the directory by its hex, never by the id itself.
    let hex: String = id.bytes().take(120).map(|b| format!("{b:02x}")).collect();
    let dir = format!("{SESSIONS_DIR}/{hex}");
    let sandbox_cwd = cwd.unwrap_or(WORKSPACE).to_owned();
    let cwd = entry.sandbox.visible_path(&sandbox_cwd);
    let mut lines = String::new();
    for (k, v) in env {
        if !k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            lines.push_str(&format!("export {k}={}\n", quote(v)));
        }
    }
    let d = dir.clone();
    entry
        .sandbox
        .fs(move |fs| {
            let host = fs.path(&d);
            std::fs::create_dir_all(&host)?;
            std::fs::write(host.join("cwd"), cwd)?;
            std::fs::write(host.join("env"), lines)
        })
        .await?;
    entry.sessions.lock().expect("sessions").insert(
        id.to_owned(),
        Arc::new(Session {
            dir,
            cwd: sandbox_cwd,
            env: env.to_vec(),
        }),
    );
    Ok(())
}

/// A session command as the real bridge runs it: the bridge always takes the container's
/// streaming path (`executor.exec(command, {stream: true, onOutput})`, `dist/bridge/index.js`
/// exec route), which runs it in the background of the session's shell (`session.ts`
/// `buildFIFOScript(isBackground=true)`: `{ cmd } < /dev/null > "$sp" 2> "$ep" &`). So the
/// session's creation-time cwd and env apply, stdin is `/dev/null`, and nothing the command does
/// to its shell (`cd`, `export`, functions, `exit`) persists: Cloudflare's
/// `docs/SESSION_EXECUTION.md`, "Background | execStream(), startProcess() | State Persists? No"
/// (research note cf-vercel-modal-nf.md, correction "Cloudflare bridge sessions").
const SESSION_SCRIPT: &str = r#"__execseam_S=$1; __execseam_cmd=$2; shift 2
. "$__execseam_S/env" 2>/dev/null
cd -- "$(cat "$__execseam_S/cwd")" 2>/dev/null || cd /workspace 2>/dev/null
[ -n "$__execseam_cwd" ] && cd -- "$__execseam_cwd"
unset __execseam_cwd __execseam_S
{ eval "$__execseam_cmd"; } < /dev/null
"#;

/// What the runner task reports to the response stream.
enum Raw {
    Out(Bytes),
    Err(Bytes),
    Exit(Exit),
    Failed(String),
    TimedOut,
}

fn sse_response(body: Body) -> Response<Body> {
    let mut r = Response::new(body);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

fn quote_argv(argv: &[serde_json::Value]) -> Option<String> {
    let mut parts = Vec::with_capacity(argv.len());
    for a in argv {
        let s = match a {
            serde_json::Value::String(s) => shell_quote(s),
            serde_json::Value::Number(n) => shell_quote(&n.to_string()),
            serde_json::Value::Bool(b) => b.to_string(),
            // `[..].join(' ')` renders null as an empty string.
            serde_json::Value::Null => String::new(),
            // `arg.replace` on an object or array throws: Hono answers 500.
            _ => return None,
        };
        parts.push(s);
    }
    Some(parts.join(" "))
}

pub(crate) async fn exec(
    state: Arc<State>,
    entry: Arc<Entry>,
    req: Request<Body>,
) -> Response<Body> {
    let fault = state.faults.take("exec");
    let ctl = req.extensions().get::<ConnControl>().cloned();
    match fault {
        Some(Fault::AuthFailure) => return error_json("Unauthorized", "unauthorized", 401),
        Some(Fault::RateLimited { retry_after_secs }) => {
            // Cloudflare's edge (a rate limiting rule) answers before the Worker runs.
            let mut r = text("error code: 1015", 429);
            r.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from_str(&retry_after_secs.to_string()).expect("digits"),
            );
            return r;
        }
        Some(Fault::Unavailable) => {
            return error_json(
                "Maximum number of running container instances exceeded: instance limit reached",
                "capacity_exceeded",
                503,
            );
        }
        Some(Fault::ResetBeforeResponse) => return reset_connection(ctl.as_ref()).await,
        Some(Fault::Latency(d)) => tokio::time::sleep(d).await,
        _ => {}
    }
    let headers = req.headers().clone();
    let Ok(raw) = read_body(req, MAX_BODY).await else {
        return error_json("Invalid JSON body", "invalid_request", 400);
    };
    let Ok(body) = serde_json::from_slice::<serde_json::Value>(&raw) else {
        return error_json("Invalid JSON body", "invalid_request", 400);
    };
    if body.is_null() {
        // `null.argv` throws.
        return text("Internal Server Error", 500);
    }
    let argv = match body.get("argv").and_then(|v| v.as_array()) {
        Some(a) if !a.is_empty() => a.clone(),
        _ => return error_json("argv must be a non-empty array", "invalid_request", 400),
    };
    let session_id = match session_header(&headers) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let Some(command) = quote_argv(&argv) else {
        return text("Internal Server Error", 500);
    };
    let timeout = body
        .get("timeout_ms")
        .and_then(|v| v.as_f64())
        .map(|ms| Duration::from_millis(ms.max(0.0).min(u64::MAX as f64) as u64));
    let cwd = match body.get("cwd").and_then(|v| v.as_str()) {
        Some(c) => match resolve_workspace_path(c) {
            Some(r) => Some(r),
            None => {
                return error_json(
                    "cwd must resolve to a location within /workspace",
                    "invalid_request",
                    403,
                );
            }
        },
        None => None,
    };
    let session = match &session_id {
        None => None,
        Some(sid) => {
            let existing = entry.sessions.lock().expect("sessions").get(sid).cloned();
            match existing {
                Some(s) => Some(s),
                None => {
                    // `getSession` on an unknown id: the container creates it with defaults.
                    if let Err(e) = new_session(&entry, sid, None, &[]).await {
                        return error_json(
                            &format!("exec failed: {e}"),
                            "exec_transport_error",
                            502,
                        );
                    }
                    entry.sessions.lock().expect("sessions").get(sid).cloned()
                }
            }
        }
    };
    let cmd = match &session {
        None => Command::builder(["/bin/bash", "-c", &command])
            .workdir(
                entry
                    .sandbox
                    .visible_path(cwd.as_deref().unwrap_or(WORKSPACE)),
            )
            .build(),
        Some(s) => {
            let mut b = Command::builder([
                "/bin/bash",
                "-c",
                SESSION_SCRIPT,
                "bash",
                &entry.sandbox.visible_path(&s.dir),
                &command,
            ]);
            if let Some(c) = &cwd {
                b = b.env("__execseam_cwd", entry.sandbox.visible_path(c));
            }
            b.build()
        }
    };
    let cmd = match cmd {
        Ok(c) => c,
        Err(_) => {
            // A NUL in argv reaches Bun.spawn inside the container, which throws; the SDK's
            // exec rejects and the bridge reports it in the already open stream.
            let frame = sse_event(
                "error",
                &error_body(
                    "The argument 'args' must be a string without null bytes",
                    "exec_error",
                ),
            );
            return sse_response(Body::from(frame));
        }
    };

    let (tx, rx) = mpsc::channel::<Raw>(64);
    let runner = {
        let entry = entry.clone();
        // `timeout_ms` is not applied to session targets (the container's
        // `execution-service.ts` `executeStream`, session branch).
        let timeout = if session.is_some() { None } else { timeout };
        tokio::spawn(async move { run(entry, cmd, timeout, tx).await })
    };
    entry.sandbox.track(runner.abort_handle());

    if fault == Some(Fault::ServerError) {
        // The command runs to its end, then the Worker throws (Hono's default 500).
        let mut rx = rx;
        while rx.recv().await.is_some() {}
        return text("Internal Server Error", 500);
    }
    if fault == Some(Fault::SandboxVanishes) {
        let state = state.clone();
        let id = entry.sandbox.id().to_owned();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(400)).await;
            state.destroy(&id);
        });
    }
    let cut = fault == Some(Fault::CutBeforeExit);
    let malformed = fault == Some(Fault::MalformedBody);
    let what = Framing {
        lines: session_id.is_some(),
        timeout,
    };
    sse_response(Body::from_stream(frames(rx, what, cut, malformed)))
}

struct Framing {
    /// A session command: output re-emitted line by line, each line with `\n` (a final line
    /// without one gains it), as the container's session stream does (`session.ts`, the
    /// background FIFO readers; research note, correction "Cloudflare bridge sessions").
    lines: bool,
    timeout: Option<Duration>,
}

/// Splits `text` (appended to `pending`) into the SSE events of one stream: for a session, one
/// event per complete line; sessionless, the text as it came.
fn emit(kind: &str, pending: &mut String, text: &str, lines: bool) -> String {
    if !lines {
        return if text.is_empty() {
            String::new()
        } else {
            sse_event(kind, &base64(text.as_bytes()))
        };
    }
    pending.push_str(text);
    let mut s = String::new();
    while let Some(i) = pending.find('\n') {
        let line: String = pending.drain(..=i).collect();
        s.push_str(&sse_event(kind, &base64(line.as_bytes())));
    }
    s
}

/// The end of a session stream's output: a final line without a newline gains one.
fn flush(kind: &str, pending: &mut String, lines: bool) -> String {
    if !lines || pending.is_empty() {
        return String::new();
    }
    pending.push('\n');
    let line = std::mem::take(pending);
    sse_event(kind, &base64(line.as_bytes()))
}

fn frames(
    rx: mpsc::Receiver<Raw>,
    f: Framing,
    cut: bool,
    malformed: bool,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send {
    struct St {
        rx: mpsc::Receiver<Raw>,
        f: Framing,
        // What `TextDecoder` with `{stream: true}` does to the command's output before the
        // bridge re-encodes it.
        out: Utf8,
        err: Utf8,
        pending: [String; 2],
        cut: bool,
        done: bool,
    }
    let st = St {
        rx,
        f,
        out: Utf8::default(),
        err: Utf8::default(),
        pending: [String::new(), String::new()],
        cut,
        done: false,
    };
    // A malformed body: an event whose data is not base64, first.
    let garbage = malformed.then(|| Ok(Bytes::from(sse_event("stdout", "%%% not base64 %%%"))));
    let events = futures_util::stream::unfold(st, |mut st| async move {
        if st.done {
            return None;
        }
        loop {
            let frame = match st.rx.recv().await {
                Some(Raw::Out(b)) => {
                    let s = st.out.push(&b);
                    let f = emit("stdout", &mut st.pending[0], &s, st.f.lines);
                    (!f.is_empty()).then_some(f)
                }
                Some(Raw::Err(b)) => {
                    let s = st.err.push(&b);
                    let f = emit("stderr", &mut st.pending[1], &s, st.f.lines);
                    (!f.is_empty()).then_some(f)
                }
                Some(Raw::Exit(exit)) => {
                    st.done = true;
                    if st.cut {
                        return None;
                    }
                    let lines = st.f.lines;
                    let mut s = String::new();
                    let tail = st.out.finish();
                    s.push_str(&emit("stdout", &mut st.pending[0], &tail, lines));
                    s.push_str(&flush("stdout", &mut st.pending[0], lines));
                    let tail = st.err.finish();
                    s.push_str(&emit("stderr", &mut st.pending[1], &tail, lines));
                    s.push_str(&flush("stderr", &mut st.pending[1], lines));
                    let code = exit.shell_status();
                    s.push_str(&sse_event(
                        "exit",
                        &serde_json::json!({ "exit_code": code }).to_string(),
                    ));
                    Some(s)
                }
                Some(Raw::TimedOut) => {
                    st.done = true;
                    if st.cut {
                        return None;
                    }
                    // Only sessionless commands time out. The line is emitted as is, with no
                    // newline inserted before it (the container's `executeStream`:
                    // `Command timed out after ${timeoutMs}ms\n`).
                    let ms = st.f.timeout.map(|d| d.as_millis()).unwrap_or_default();
                    let mut s = String::new();
                    let line = format!("Command timed out after {ms}ms\n");
                    s.push_str(&sse_event("stderr", &base64(line.as_bytes())));
                    s.push_str(&sse_event("exit", "{\"exit_code\":124}"));
                    Some(s)
                }
                Some(Raw::Failed(msg)) => {
                    st.done = true;
                    if st.cut {
                        return None;
                    }
                    Some(sse_event("error", &error_body(&msg, "exec_error")))
                }
                None => {
                    // The runner was killed with the sandbox (destroyed while the command ran).
                    st.done = true;
                    if st.cut {
                        return None;
                    }
                    Some(sse_event(
                        "error",
                        &error_body(
                            "Container stopped while the command was running: the sandbox was destroyed",
                            "exec_error",
                        ),
                    ))
                }
            };
            if let Some(frame) = frame {
                return Some((Ok(Bytes::from(frame)), st));
            }
        }
    });
    futures_util::stream::iter(garbage).chain(events)
}

/// Runs the command; keeps draining when the client is gone (the bridge does not stop a
/// command whose caller disconnected). Aborted (the process group killed) when the sandbox is
/// destroyed.
async fn run(entry: Arc<Entry>, cmd: Command, timeout: Option<Duration>, tx: mpsc::Sender<Raw>) {
    let deadline = timeout.map(|d| tokio::time::Instant::now() + d);
    // A client that stays connected but stops reading must not hold the deadline back: a send
    // gives up at the deadline (the loop then kills the command).
    let send = |raw: Raw| {
        let tx = tx.clone();
        async move {
            match deadline {
                Some(t) => {
                    let _ = tokio::time::timeout_at(t, tx.send(raw)).await;
                }
                None => {
                    let _ = tx.send(raw).await;
                }
            }
        }
    };
    let mut stream = match ExecStream::exec_stream(entry.sandbox.exec(), cmd).await {
        Ok(s) => s,
        Err(e) => {
            send(Raw::Failed(format!(
                "Failed to start the command: {}",
                e.message()
            )))
            .await;
            return;
        }
    };
    loop {
        let sleep = async {
            match deadline {
                Some(t) => tokio::time::sleep_until(t).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            item = stream.next() => match item {
                Some(Ok(Event::Stdout(b))) => send(Raw::Out(b)).await,
                Some(Ok(Event::Stderr(b))) => send(Raw::Err(b)).await,
                Some(Ok(Event::Exit(x))) => {
                    send(Raw::Exit(x)).await;
                    return;
                }
                Some(Err(e)) => {
                    send(Raw::Failed(e.message().to_owned())).await;
                    return;
                }
                None => {
                    send(Raw::Failed("Stream ended without completion event".into())).await;
                    return;
                }
            },
            () = sleep => {
                drop(stream); // kills the process group
                let _ = tx.try_send(Raw::TimedOut);
                return;
            }
        }
    }
}
