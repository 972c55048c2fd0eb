//! Commands: start (detached or awaited NDJSON), wait, logs, kill, stdin.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Request};
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::response::Response;
use base64::Engine as _;
use execseam_spawn::SpawnError;
use futures_util::StreamExt;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::process::ChildStdin;
use tokio::sync::watch;

use super::CWD;
use super::routes::{
    St, api_error, bad_request, json_body, not_found, ok, query, query_get, status_fault, stopped,
};
use super::state::{CommandRecord, Progress, Session, State, Stream, new_id, now_ms, sandbox_user};
use execseam_emulator_kit::stream::{self, Out, Utf8};
use execseam_emulator_kit::util::resolve_path;
use execseam_emulator_kit::{ConnControl, Fault, User};

/// How long output still in the pipes is read after the command itself exited, before its exit
/// is reported: a background child that keeps stdout open (`sh -c 'sleep 5 & echo started'`)
/// does not hold the exit for its lifetime. Vercel's in-VM agent is not public: this is the
/// emulator's choice (docs/adapters/vercel.md, "Not verified").
const DRAIN_AFTER_EXIT: Duration = Duration::from_secs(1);

/// The most a stdin request may carry after base64 decoding (the Python SDK's chunk is 512 KiB,
/// "keeping the base64 JSON body under the API's 1 MB limit").
const MAX_STDIN_BODY: usize = 1024 * 1024;

/// A command's stdin (the Python SDK's `attachStdin`) and how much went through it.
pub(crate) struct StdinPipe {
    pipe: Option<ChildStdin>,
    written: u64,
}

fn ndjson(body: Body) -> Response {
    let mut r = Response::new(body);
    // Compared with `!==` by the TS SDK: exactly this, no parameters.
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    r
}

fn line(v: &Value) -> Bytes {
    let mut s = v.to_string();
    s.push('\n');
    Bytes::from(s)
}

fn session_for(st: &State, sid: &str) -> Result<Arc<Session>, Response> {
    st.session(sid).ok_or_else(|| not_found("Session", sid))
}

/// The session and the command a `…/cmd/{cid}…` route names, or its 404.
fn session_and_command(
    st: &State,
    sid: &str,
    cid: &str,
) -> Result<(Arc<Session>, Arc<CommandRecord>), Response> {
    let session = session_for(st, sid)?;
    let record = session
        .command(cid)
        .ok_or_else(|| not_found("Command", cid))?;
    Ok((session, record))
}

/// What `POST …/cmd` asks for.
struct RunRequest {
    command: String,
    args: Vec<String>,
    cwd: String,
    env: Vec<(String, String)>,
    sudo: bool,
    wait: bool,
    logs: bool,
    timeout: Option<Duration>,
    attach_stdin: bool,
}

fn parse_run(body: &serde_json::Map<String, Value>, uri: &Uri) -> Result<RunRequest, Response> {
    let q = query(uri);
    let flag = |key: &str| {
        body.get(key).and_then(Value::as_bool).unwrap_or(false)
            || query_get(&q, key) == Some("true")
    };
    let command = match body.get("command") {
        Some(Value::String(c)) if !c.is_empty() => c.clone(),
        _ => return Err(bad_request("command must be a non-empty string")),
    };
    let args = match body.get("args") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad_request("args must be strings"))?,
        Some(_) => return Err(bad_request("args must be an array")),
    };
    let cwd = match body.get("cwd") {
        None | Some(Value::Null) => CWD.to_owned(),
        Some(Value::String(c)) => resolve_path(CWD, c),
        Some(_) => return Err(bad_request("cwd must be a string")),
    };
    let env = match body.get("env") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_owned())))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad_request("env values must be strings"))?,
        Some(_) => return Err(bad_request("env must be an object")),
    };
    let timeout = match body.get("timeout") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_f64() {
            Some(ms) if ms >= 0.0 => Some(Duration::from_millis(ms as u64)),
            _ => return Err(bad_request("timeout must be a number of milliseconds")),
        },
    };
    Ok(RunRequest {
        command,
        args,
        cwd,
        env,
        sudo: body.get("sudo").and_then(Value::as_bool).unwrap_or(false),
        wait: flag("wait"),
        logs: flag("logs"),
        timeout,
        attach_stdin: body
            .get("attachStdin")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    })
}

/// `POST /v2/sandboxes/sessions/{sid}/cmd`.
pub(crate) async fn run(st: St, Path(sid): Path<String>, uri: Uri, req: Request) -> Response {
    let fault = st.faults.take("exec");
    let ctl = req.extensions().get::<ConnControl>().cloned();
    if let Some(r) = status_fault(fault, ctl.as_ref()).await {
        return r;
    }
    let session = match session_for(&st, &sid) {
        Ok(s) => s,
        Err(r) => return r,
    };
    if !session.is_running() {
        return stopped();
    }
    let Ok(raw) = axum::body::to_bytes(req.into_body(), MAX_STDIN_BODY * 2).await else {
        return bad_request("Invalid body");
    };
    let body = match json_body(&raw) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let rr = match parse_run(&body, &uri) {
        Ok(r) => r,
        Err(r) => return r,
    };
    let user = if rr.sudo {
        User::root()
    } else {
        sandbox_user()
    };
    let mut env: BTreeMap<String, String> = session.env.clone();
    env.extend(rr.env.iter().cloned());
    let mut argv = vec![rr.command.clone()];
    argv.extend(rr.args.iter().cloned());
    let running = match stream::start(
        &session.root,
        &user,
        &argv,
        &env,
        &rr.cwd,
        rr.attach_stdin,
        Some(DRAIN_AFTER_EXIT),
    )
    .await
    {
        Ok(r) => r,
        Err(SpawnError::Workdir(_)) => {
            return bad_request(&format!(
                "The working directory {:?} does not exist",
                rr.cwd
            ));
        }
        Err(e) => {
            return api_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal_server_error",
                &format!("could not start the command: {e:?}"),
            );
        }
    };
    let (progress, _) = watch::channel(Progress::default());
    let record = Arc::new(CommandRecord {
        id: new_id("cmd"),
        name: rr.command.clone(),
        args: rr.args.clone(),
        cwd: rr.cwd.clone(),
        session_id: session.id.clone(),
        started_at: now_ms(),
        logs: Mutex::new(Vec::new()),
        progress,
        stdin: rr.attach_stdin.then(|| {
            tokio::sync::Mutex::new(StdinPipe {
                pipe: None,
                written: 0,
            })
        }),
        host_pid: Mutex::new((running.host_pid != 0).then_some(running.host_pid)),
        task: Mutex::new(None),
    });
    session
        .commands
        .lock()
        .expect("commands")
        .push(record.clone());
    let stdin = running.stdin;
    if let (Some(slot), Some(pipe)) = (&record.stdin, stdin) {
        slot.try_lock().expect("new").pipe = Some(pipe);
    }
    let task = tokio::spawn(execute(
        session.clone(),
        record.clone(),
        running.events,
        rr.timeout,
    ));
    *record.task.lock().expect("task") = Some(task.abort_handle());

    match fault {
        Some(Fault::ServerError) => {
            let mut rx = record.progress.subscribe();
            let _ = rx.wait_for(|p| p.exit.is_some() || p.lost).await;
            return api_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal_server_error",
                "An unexpected internal error occurred",
            );
        }
        Some(Fault::SandboxVanishes) => {
            let s = session.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                s.stop();
            });
        }
        _ => {}
    }
    if !rr.wait {
        return ok(json!({ "command": record.started_payload() }));
    }
    let first = line(&json!({ "command": record.started_payload() }));
    let follow = follow(record, rr.logs, true, fault);
    ndjson(Body::from_stream(
        futures_util::stream::once(async move { Ok::<_, std::io::Error>(first) }).chain(follow),
    ))
}

/// Follows the command: output into the record's log, then its exit (128+n for a signal). A
/// `timeout` is a timer of its own (it fires whether or not anyone reads): SIGKILL to the
/// command's group, so 137, as the service enforces it.
async fn execute(
    session: Arc<Session>,
    record: Arc<CommandRecord>,
    mut events: tokio::sync::mpsc::Receiver<Out>,
    timeout: Option<Duration>,
) {
    if let (Some(d), Some(pid)) = (timeout, *record.host_pid.lock().expect("pid")) {
        let root = session.root.clone();
        let mut rx = record.progress.subscribe();
        tokio::spawn(async move {
            if tokio::time::timeout(d, rx.wait_for(|p| p.exit.is_some() || p.lost))
                .await
                .is_err()
            {
                let _ = root.signal_group(pid, libc::SIGKILL);
            }
        });
    }
    let (mut out, mut err) = (Utf8::default(), Utf8::default());
    while let Some(ev) = events.recv().await {
        match ev {
            Out::Stdout(b) => record.push_log(Stream::Stdout, out.push(&b)),
            Out::Stderr(b) => record.push_log(Stream::Stderr, err.push(&b)),
            Out::Exit(code) => {
                record.push_log(Stream::Stdout, out.finish());
                record.push_log(Stream::Stderr, err.finish());
                if let Some(slot) = &record.stdin {
                    slot.lock().await.pipe = None;
                }
                record.finish(code);
                return;
            }
        }
    }
    record.finish(255);
}

/// NDJSON log lines from the first, live, until the command ends; then (`with_final`) the
/// finished `{command}`. A command whose session stopped under it ends with an in-band error.
fn follow(
    record: Arc<CommandRecord>,
    logs: bool,
    with_final: bool,
    fault: Option<Fault>,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send {
    struct St {
        record: Arc<CommandRecord>,
        rx: watch::Receiver<Progress>,
        next: usize,
        logs: bool,
        with_final: bool,
        cut: bool,
        done: bool,
    }
    let rx = record.progress.subscribe();
    let st = St {
        record,
        rx,
        next: 0,
        logs,
        with_final,
        cut: fault == Some(Fault::CutBeforeExit),
        done: false,
    };
    // A malformed body: a truncated JSON line first.
    let garbage = (fault == Some(Fault::MalformedBody))
        .then(|| Ok(Bytes::from_static(b"{\"stream\":\"stdout\",\"data\":\n")));
    let lines = futures_util::stream::unfold(st, |mut st| async move {
        if st.done {
            return None;
        }
        loop {
            if st.logs
                && let Some((stream, data)) = st.record.log_line(st.next)
            {
                st.next += 1;
                let v = json!({ "stream": stream.as_str(), "data": data });
                return Some((Ok(line(&v)), st));
            }
            let p = st.rx.borrow_and_update().clone();
            let drained = !st.logs || st.next >= p.lines;
            if drained && (p.exit.is_some() || p.lost) {
                st.done = true;
                if st.cut {
                    return None;
                }
                if p.lost {
                    let v = json!({"stream": "error", "data": {
                        "code": "sandbox_stopped",
                        "message": "The sandbox was stopped while the command was running",
                    }});
                    return Some((Ok(line(&v)), st));
                }
                if !st.with_final {
                    return None;
                }
                return Some((Ok(line(&json!({ "command": st.record.payload() }))), st));
            }
            if !drained {
                continue;
            }
            if st.rx.changed().await.is_err() {
                return None;
            }
        }
    });
    futures_util::stream::iter(garbage).chain(lines)
}

/// `GET …/cmd`.
pub(crate) async fn list(st: St, Path(sid): Path<String>) -> Response {
    let session = match session_for(&st, &sid) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let all: Vec<Value> = session
        .commands
        .lock()
        .expect("commands")
        .iter()
        .map(|c| c.payload())
        .collect();
    ok(json!({ "commands": all }))
}

/// `GET …/cmd/{cid}[?wait=true]`.
pub(crate) async fn get(st: St, Path((sid, cid)): Path<(String, String)>, uri: Uri) -> Response {
    let (_, record) = match session_and_command(&st, &sid, &cid) {
        Ok(sc) => sc,
        Err(r) => return r,
    };
    if query_get(&query(&uri), "wait") == Some("true") {
        let mut rx = record.progress.subscribe();
        let _ = rx.wait_for(|p| p.exit.is_some() || p.lost).await;
        if record.progress.borrow().lost {
            return stopped();
        }
    }
    ok(json!({ "command": record.payload() }))
}

/// `GET …/cmd/{cid}/logs`.
pub(crate) async fn logs(st: St, Path((sid, cid)): Path<(String, String)>) -> Response {
    let (_, record) = match session_and_command(&st, &sid, &cid) {
        Ok(sc) => sc,
        Err(r) => return r,
    };
    ndjson(Body::from_stream(follow(record, true, false, None)))
}

/// `POST …/cmd/{cid}/kill {signal}`: the signal goes to the command's process.
pub(crate) async fn kill(
    st: St,
    Path((sid, cid)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let (session, record) = match session_and_command(&st, &sid, &cid) {
        Ok(sc) => sc,
        Err(r) => return r,
    };
    let body = match json_body(&body) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let signal = match body.get("signal") {
        None | Some(Value::Null) => 15,
        Some(v) => match v.as_u64().filter(|n| (1..=64).contains(n)) {
            Some(n) => n,
            None => return bad_request("signal must be a signal number"),
        },
    };
    if !record.is_done()
        && let Some(pid) = *record.host_pid.lock().expect("pid")
    {
        let _ = session.root.signal_group(pid, signal as i32);
    }
    ok(json!({ "command": record.payload() }))
}

/// `POST …/cmd/{cid}/stdin {data?, offset?, close?}`: resumable writes (a resent request with
/// the same offset skips what already arrived), `{bytesWritten}` back.
pub(crate) async fn stdin(
    st: St,
    Path((sid, cid)): Path<(String, String)>,
    body: Bytes,
) -> Response {
    let (_, record) = match session_and_command(&st, &sid, &cid) {
        Ok(sc) => sc,
        Err(r) => return r,
    };
    let unavailable = || {
        api_error(
            StatusCode::BAD_REQUEST,
            "command_stdin_unavailable",
            "The command's stdin is not available: it was not attached, is closed, or the command exited",
        )
    };
    let Some(pipe) = &record.stdin else {
        return unavailable();
    };
    let body = match json_body(&body) {
        Ok(b) => b,
        Err(r) => return r,
    };
    let data = match body.get("data") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => match base64::engine::general_purpose::STANDARD.decode(s) {
            Ok(d) => d,
            Err(_) => return bad_request("data must be base64"),
        },
        Some(_) => return bad_request("data must be a base64 string"),
    };
    if data.len() > MAX_STDIN_BODY {
        return api_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            "stdin chunk too large",
        );
    }
    let close = body.get("close").and_then(Value::as_bool).unwrap_or(false);
    let mut pipe = pipe.lock().await;
    let written = pipe.written;
    let offset = body
        .get("offset")
        .and_then(Value::as_u64)
        .unwrap_or(written);
    if offset > written {
        return bad_request(&format!(
            "offset {offset} is past the {written} bytes written"
        ));
    }
    if pipe.pipe.is_none() || record.is_done() {
        return unavailable();
    }
    let skip = ((written - offset) as usize).min(data.len());
    let fresh = &data[skip..];
    if !fresh.is_empty() {
        let w = pipe.pipe.as_mut().expect("open");
        if w.write_all(fresh).await.is_err() {
            pipe.pipe = None; // EPIPE: the command stopped reading
            return unavailable();
        }
        pipe.written += fresh.len() as u64;
    }
    if close {
        pipe.pipe = None;
    }
    ok(json!({ "command": record.payload(), "bytesWritten": pipe.written }))
}
