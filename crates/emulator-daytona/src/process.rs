//! The toolbox's process routes: one-shot execute and code-run, sessions, logs, input.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use execseam_core::{Command, Exec, Exit};
use futures_util::{SinkExt as _, StreamExt as _};
use http::{HeaderMap, StatusCode};
use hyper_util::rt::TokioIo;
use serde::Deserialize;
use tokio::io::AsyncReadExt as _;
use tokio_websockets::{CloseCode, Message, WebSocketStream};

use super::{HOME, SESSIONS_DIR, SandboxEntry, State, daemon_error, envelope, json_response};
use execseam_emulator_kit::{ConnControl, Fault, reset_connection};

const STDOUT_PREFIX: &[u8] = b"\x01\x01\x01";
const STDERR_PREFIX: &[u8] = b"\x02\x02\x02";

/// The daemon's `GetShell()`: the first of zsh, bash listed in `/etc/shells`, else `sh`.
pub(crate) fn shell() -> String {
    let listed = std::fs::read_to_string("/etc/shells").unwrap_or_default();
    for cand in ["/usr/bin/zsh", "/bin/zsh", "/usr/bin/bash", "/bin/bash"] {
        if listed.lines().any(|l| l.trim() == cand) && std::path::Path::new(cand).exists() {
            return cand.to_owned();
        }
    }
    "sh".to_owned()
}

/// Renders the faults that mean "the request never reached the daemon" and latency. Returns
/// `None` when the request should go on (no fault, or latency already applied, or a fault the
/// caller renders itself).
pub(super) async fn generic_fault(
    f: Fault,
    source: &str,
    path: &str,
    method: &str,
) -> Option<Response> {
    match f {
        Fault::RateLimited { retry_after_secs } => {
            let mut r = envelope(
                StatusCode::TOO_MANY_REQUESTS,
                "ThrottlerException: Too Many Requests",
                None,
                source,
                path,
                method,
            );
            r.headers_mut().insert(
                http::header::RETRY_AFTER,
                http::HeaderValue::from_str(&retry_after_secs.to_string()).expect("digits"),
            );
            Some(r)
        }
        Fault::Unavailable => Some(envelope(
            StatusCode::SERVICE_UNAVAILABLE,
            "Service Unavailable",
            None,
            "DAYTONA_PROXY",
            path,
            method,
        )),
        Fault::AuthFailure => Some(super::unauthorized("DAYTONA_PROXY", path, method)),
        Fault::Latency(d) => {
            tokio::time::sleep(d).await;
            None
        }
        _ => None,
    }
}

/// How the daemon shapes session answers for this client (`X-Daytona-SDK-Version`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Shape {
    /// >= 0.167.0 (or a dev build): raw `output` plus demultiplexed `stdout`/`stderr`; JSON logs.
    Split,
    /// 0.27.0 <= v < 0.167.0, or no version with `X-Daytona-Split-Output: true`: raw `output`;
    /// plain-text logs.
    Raw,
    /// < 0.27.0, or no version at all: prefixes stripped, streams merged.
    Combined,
}

pub(crate) fn shape(headers: &HeaderMap) -> Shape {
    let version = headers
        .get("x-daytona-sdk-version")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .trim()
        .trim_start_matches('v')
        .to_owned();
    if version.is_empty() {
        let split = headers
            .get("x-daytona-split-output")
            .and_then(|v| v.to_str().ok())
            == Some("true");
        return if split { Shape::Raw } else { Shape::Combined };
    }
    if version == "0.0.0-dev" {
        return Shape::Split;
    }
    let core = version.split(['-', '+']).next().unwrap_or("");
    let nums: Vec<u64> = core.split('.').filter_map(|p| p.parse().ok()).collect();
    let v = (
        nums.first().copied().unwrap_or(0),
        nums.get(1).copied().unwrap_or(0),
        nums.get(2).copied().unwrap_or(0),
    );
    if v < (0, 27, 0) {
        Shape::Combined
    } else if v < (0, 167, 0) {
        Shape::Raw
    } else {
        Shape::Split
    }
}

/// Splits a prefixed log into (stdout, stderr), as the daemon's demux does.
pub(crate) fn demux(log: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut cur: Option<bool> = None; // Some(true) = stdout
    let mut i = 0;
    while i < log.len() {
        if log[i..].starts_with(STDOUT_PREFIX) {
            cur = Some(true);
            i += 3;
            continue;
        }
        if log[i..].starts_with(STDERR_PREFIX) {
            cur = Some(false);
            i += 3;
            continue;
        }
        match cur {
            Some(true) => out.push(log[i]),
            Some(false) => err.push(log[i]),
            None => {}
        }
        i += 1;
    }
    (out, err)
}

pub(crate) fn strip_prefixes(log: &[u8]) -> Vec<u8> {
    let (mut v, mut i) = (Vec::with_capacity(log.len()), 0);
    while i < log.len() {
        if log[i..].starts_with(STDOUT_PREFIX) || log[i..].starts_with(STDERR_PREFIX) {
            i += 3;
        } else {
            v.push(log[i]);
            i += 1;
        }
    }
    v
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

// ---------------------------------------------------------------------------------------------
// One-shot execute and code-run

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct ExecuteRequest {
    command: Option<String>,
    code: Option<String>,
    language: Option<String>,
    argv: Option<Vec<String>>,
    cwd: Option<String>,
    envs: Option<BTreeMap<String, String>>,
    timeout: Option<u64>,
}

const ARTIFACT_PREFIX: &str = "dtn_artifact_k39fd2:";

fn code_run_command(code: &str, language: &str, argv: &[String]) -> Option<String> {
    let args = argv.join(" "); // the daemon does not quote argv
    let b64 = |s: &str| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, s);
    Some(match language {
        "python" => format!(
            "printf '%s' '{}' | base64 -d | python3 -u - {args}",
            b64(code)
        ),
        "javascript" => format!(
            "printf '%s' '{}' | base64 -d | node - {args}",
            b64(&format!("process.argv.splice(1, 1);\n{code}"))
        ),
        "typescript" => format!(
            "_f=/tmp/dtn_$$.ts; printf '%s' '{}' | base64 -d > \"$_f\"; npm_config_loglevel=error npx ts-node -T --ignore-diagnostics 5107 -O '{{\"module\":\"CommonJS\"}}' \"$_f\" {args}; _dtn_ec=$?; rm -f \"$_f\"; exit $_dtn_ec",
            b64(code)
        ),
        _ => return None,
    })
}

fn valid_env_key(k: &str) -> bool {
    let mut c = k.chars();
    matches!(c.next(), Some(ch) if ch.is_ascii_alphabetic() || ch == '_')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

pub(super) async fn execute(
    state: Arc<State>,
    sb: Arc<SandboxEntry>,
    req: Request,
    code_run: bool,
) -> Response {
    let path = req
        .uri()
        .path()
        .trim_start_matches(&format!("/toolbox/{}", sb.id))
        .to_owned();
    let ctl = req.extensions().get::<ConnControl>().cloned();
    let fault = state.faults.take("exec");
    if let Some(f) = fault {
        if f == Fault::ResetBeforeResponse {
            return reset_connection(ctl.as_ref()).await;
        }
        if let Some(r) = generic_fault(f, "DAYTONA_PROXY", &path, "POST").await {
            return r;
        }
    }
    let body = match axum::body::to_bytes(req.into_body(), usize::MAX).await {
        Ok(b) => b,
        Err(e) => {
            return daemon_error(
                StatusCode::BAD_REQUEST,
                &e.to_string(),
                Some("BAD_REQUEST"),
                &path,
                "POST",
            );
        }
    };
    let r: ExecuteRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return invalid_body(&e, &path);
        }
    };
    let script = if code_run {
        let language = r.language.clone().unwrap_or_else(|| "python".into());
        match code_run_command(
            r.code.as_deref().unwrap_or(""),
            &language,
            r.argv.as_deref().unwrap_or(&[]),
        ) {
            Some(s) => s,
            None => {
                return daemon_error(
                    StatusCode::BAD_REQUEST,
                    &format!("bad request: unsupported language: {language}"),
                    Some("BAD_REQUEST"),
                    &path,
                    "POST",
                );
            }
        }
    } else {
        let c = r.command.clone().unwrap_or_default();
        if c.trim().is_empty() {
            return daemon_error(
                StatusCode::BAD_REQUEST,
                "bad request: command cannot be empty or whitespace-only",
                Some("BAD_REQUEST"),
                &path,
                "POST",
            );
        }
        c
    };
    let envs = r.envs.clone().unwrap_or_default();
    if let Some(k) = envs.keys().find(|k| !valid_env_key(k)) {
        return daemon_error(
            StatusCode::BAD_REQUEST,
            &format!("bad request: invalid environment variable name: '{k}'"),
            Some("BAD_REQUEST"),
            &path,
            "POST",
        );
    }
    let cwd = match r.cwd.as_deref() {
        None | Some("") => HOME.to_owned(),
        Some(c) if c.starts_with('/') => c.to_owned(),
        Some(c) => format!("{HOME}/{c}"),
    };
    let sh = shell();
    let cmd = Command::builder(["/bin/sh", "-c", "exec \"$0\" 2>&1", sh.as_str()])
        .workdir(sb.sandbox.visible_path(&cwd))
        .envs(sb.env.clone())
        .envs(envs)
        .stdin(script.into_bytes())
        .build();
    let cmd = match cmd {
        Ok(c) => c,
        Err(e) => {
            return daemon_error(
                StatusCode::BAD_REQUEST,
                e.message(),
                Some("BAD_REQUEST"),
                &path,
                "POST",
            );
        }
    };
    if fault == Some(Fault::SandboxVanishes) {
        let (st, id) = (state.clone(), sb.id.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            st.destroy(&id);
        });
    }
    // The daemon (`toolbox/process/execute.go`) kills the command at the deadline from a timer
    // of its own, 360 s unless the request sets one, whether or not the client still waits:
    // here the deadline lives in the task that runs the command (dropping the exec future kills
    // its process group), not in this handler, which a disconnect drops.
    let timeout = Duration::from_secs(r.timeout.filter(|t| *t > 0).unwrap_or(DEFAULT_TIMEOUT_SECS));
    let sandbox = sb.sandbox.clone();
    let run = tokio::spawn(async move {
        tokio::time::timeout(timeout, sandbox.exec().exec(cmd))
            .await
            .ok()
    });
    sb.sandbox.track(run.abort_handle());
    let result = match run.await {
        Ok(None) => {
            return daemon_error(
                StatusCode::REQUEST_TIMEOUT,
                "command execution timeout",
                Some("PROCESS_EXECUTION_TIMEOUT"),
                &path,
                "POST",
            );
        }
        Ok(Some(r)) => Ok(r),
        Err(e) => Err(e),
    };
    let (code, out) = match result {
        Ok(Ok(o)) => (
            match o.exit {
                Exit::Code(c) => c,
                Exit::Signal(_) => -1,
            },
            o.stdout.to_vec(),
        ),
        Ok(Err(e)) if e.kind() == execseam_core::ErrorKind::NotFound => (
            -1,
            format!("chdir {cwd}: no such file or directory").into_bytes(),
        ),
        Ok(Err(e)) => (-1, e.message().as_bytes().to_vec()),
        Err(_) => {
            // The task was aborted: the sandbox is gone.
            return envelope(
                StatusCode::BAD_GATEWAY,
                "runner is unreachable: sandbox destroyed",
                Some("RUNNER_UNREACHABLE"),
                "DAYTONA_PROXY",
                &path,
                "POST",
            );
        }
    };
    let mut text = lossy(&out);
    let mut body = serde_json::json!({"exitCode": code});
    if code_run {
        let mut charts = Vec::new();
        let mut kept = String::new();
        for line in text.split_inclusive('\n') {
            if let Some(rest) = line.strip_prefix(ARTIFACT_PREFIX) {
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(rest.trim())
                    && v["type"] == "chart"
                {
                    charts.push(v["value"].clone());
                }
                continue;
            }
            kept.push_str(line);
        }
        text = kept;
        if !charts.is_empty() {
            body["artifacts"] = serde_json::json!({ "charts": charts });
        }
    }
    body["result"] = text.into();
    finish_with_fault(
        fault,
        StatusCode::OK,
        body.to_string(),
        &path,
        &sb.id,
        &state,
    )
}

/// Applies the faults that come after the command ran (500, malformed, cut, vanished).
fn finish_with_fault(
    fault: Option<Fault>,
    status: StatusCode,
    body: String,
    path: &str,
    sandbox_id: &str,
    state: &State,
) -> Response {
    match fault {
        Some(Fault::ServerError) => envelope(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal server error",
            Some("INTERNAL_SERVER_ERROR"),
            "DAYTONA_DAEMON",
            path,
            "POST",
        ),
        Some(Fault::MalformedBody) => (
            status,
            [(
                http::header::CONTENT_TYPE,
                "application/json; charset=utf-8",
            )],
            "{\"cmdId\": 42, \"exitCode\": \"zero\", <html>",
        )
            .into_response(),
        Some(Fault::CutBeforeExit) => {
            let bytes = body.into_bytes();
            let len = bytes.len();
            let half = bytes[..len / 2].to_vec();
            let stream = futures_util::stream::iter(vec![
                Ok::<_, std::io::Error>(axum::body::Bytes::from(half)),
                Err(std::io::Error::other("cut by fault injection")),
            ]);
            let mut r = Response::new(Body::from_stream(stream));
            *r.status_mut() = status;
            r.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json; charset=utf-8"),
            );
            r.headers_mut().insert(
                http::header::CONTENT_LENGTH,
                http::HeaderValue::from_str(&len.to_string()).expect("digits"),
            );
            r
        }
        Some(Fault::SandboxVanishes) if state.sandbox(sandbox_id).is_none() => envelope(
            StatusCode::BAD_GATEWAY,
            "runner is unreachable: sandbox destroyed",
            Some("RUNNER_UNREACHABLE"),
            "DAYTONA_PROXY",
            path,
            "POST",
        ),
        _ => (
            status,
            [(
                http::header::CONTENT_TYPE,
                "application/json; charset=utf-8",
            )],
            body,
        )
            .into_response(),
    }
}

// ---------------------------------------------------------------------------------------------
// Sessions

struct CmdEntry {
    id: String,
    command: String,
    cut: bool,
}

/// The daemon's deadline for `/process/execute` when the request sets none.
const DEFAULT_TIMEOUT_SECS: u64 = 360;

/// A session: a shell reading commands from a FIFO, in the sandbox.
pub(crate) struct Session {
    id: String,
    sandbox: Arc<execseam_emulator_kit::Sandbox>,
    /// The session's directory as the sandbox sees it (the daemon's state, owned by its user).
    dir: String,
    dir_visible: String,
    stdin: Mutex<std::fs::File>,
    commands: Mutex<Vec<CmdEntry>>,
    ended: tokio::sync::watch::Sender<bool>,
    task: Mutex<Option<tokio::task::AbortHandle>>,
}

impl Session {
    /// Kills the shell and everything it started.
    pub(crate) fn kill(&self) {
        if let Some(t) = self.task.lock().expect("task").take() {
            t.abort();
        }
        let _ = self.ended.send_replace(true);
    }

    fn is_ended(&self) -> bool {
        *self.ended.borrow()
    }

    /// A file of a command's directory, as the sandbox sees it.
    fn cmd_file(&self, cid: &str, name: &str) -> String {
        format!("{}/{cid}/{name}", self.dir)
    }

    fn read(&self, cid: &str, name: &str) -> Option<Vec<u8>> {
        let f = self.cmd_file(cid, name);
        self.sandbox
            .fs_blocking(move |fs| std::fs::read(fs.path(&f)))
            .ok()
    }

    fn exit_code(&self, cid: &str) -> Option<i32> {
        parse_exit_code(self.read(cid, "exit_code")?)
    }

    /// [`exit_code`](Self::exit_code) without blocking a runtime thread (for the pollers: the
    /// synchronous exec, the log follow and `GET …/command/{id}`, which run many at once).
    async fn exit_code_async(&self, cid: &str) -> Option<i32> {
        let f = self.cmd_file(cid, "exit_code");
        let b = self
            .sandbox
            .fs(move |fs| std::fs::read(fs.path(&f)))
            .await
            .ok()?;
        parse_exit_code(b)
    }

    fn log(&self, cid: &str) -> Vec<u8> {
        self.read(cid, "output.log").unwrap_or_default()
    }

    fn command_json(&self, c: &CmdEntry) -> serde_json::Value {
        let mut v = serde_json::json!({"id": c.id, "command": c.command});
        if let Some(code) = self.exit_code(&c.id) {
            v["exitCode"] = code.into();
        }
        v
    }
}

fn parse_exit_code(b: Vec<u8>) -> Option<i32> {
    let s = String::from_utf8(b).ok()?;
    s.trim_end_matches('\n').lines().next()?.trim().parse().ok()
}

fn session_not_found(path: &str, method: &str) -> Response {
    daemon_error(
        StatusCode::NOT_FOUND,
        "not found: session not found",
        Some("NOT_FOUND"),
        path,
        method,
    )
}

fn rel_path(sb: &SandboxEntry, req: &Request) -> String {
    req.uri()
        .path()
        .trim_start_matches(&format!("/toolbox/{}", sb.id))
        .to_owned()
}

/// A JSON body of at most `limit` bytes that must carry `what`: 400 `INVALID_REQUEST_BODY`
/// ("invalid body request: {what} is required") when it does not decode.
async fn required_body<T: serde::de::DeserializeOwned>(
    req: Request,
    limit: usize,
    path: &str,
    what: &str,
) -> Result<T, Response> {
    let body = axum::body::to_bytes(req.into_body(), limit)
        .await
        .unwrap_or_default();
    serde_json::from_slice(&body).map_err(|_| {
        daemon_error(
            StatusCode::BAD_REQUEST,
            &format!("invalid body request: {what} is required"),
            Some("INVALID_REQUEST_BODY"),
            path,
            "POST",
        )
    })
}

pub(super) async fn create_session(sb: Arc<SandboxEntry>, req: Request) -> Response {
    let path = rel_path(&sb, &req);
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Create {
        session_id: String,
    }
    let c: Create = match required_body(req, 1 << 20, &path, "sessionId").await {
        Ok(c) => c,
        Err(r) => return r,
    };
    if c.session_id == "entrypoint" {
        return daemon_error(
            StatusCode::BAD_REQUEST,
            "bad request: session ID 'entrypoint' is reserved",
            Some("BAD_REQUEST"),
            &path,
            "POST",
        );
    }
    if c.session_id.is_empty() || c.session_id.contains('/') {
        return daemon_error(
            StatusCode::BAD_REQUEST,
            "bad request: invalid session ID",
            Some("BAD_REQUEST"),
            &path,
            "POST",
        );
    }
    if sb
        .sessions
        .lock()
        .expect("sessions")
        .contains_key(&c.session_id)
    {
        return daemon_error(
            StatusCode::CONFLICT,
            "conflict: session already exists",
            Some("CONFLICT"),
            &path,
            "POST",
        );
    }
    match spawn_session(&sb, &c.session_id).await {
        Ok(s) => {
            sb.sessions
                .lock()
                .expect("sessions")
                .insert(c.session_id, Arc::new(s));
            StatusCode::CREATED.into_response()
        }
        Err(e) => daemon_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("failed to start the session shell: {e}"),
            None,
            &path,
            "POST",
        ),
    }
}

async fn spawn_session(sb: &Arc<SandboxEntry>, sid: &str) -> std::io::Result<Session> {
    let dir = format!("{SESSIONS_DIR}/{sid}");
    // The daemon runs as the sandbox's user: its state belongs to that user.
    let user = sb.sandbox.user().clone();
    let d = dir.clone();
    let stdin = sb
        .sandbox
        .fs(move |fs| {
            fs.create_dir_all_as(&d, &user)?;
            let fifo = format!("{d}/stdin.fifo");
            let _ = std::fs::remove_file(fs.path(&fifo));
            fs.mkfifo(&fs.path(&fifo), 0o600)?;
            fs.chown(&fifo, &user)?;
            // Read-write: never blocks, and the shell never sees EOF while we hold it.
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(fs.path(&fifo))
        })
        .await?;
    let dir_visible = sb.sandbox.visible_path(&dir);
    let cmd = Command::builder([
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        "exec 0<>\"$1\" && exec \"$2\"".to_owned(),
        "sh".to_owned(),
        format!("{dir_visible}/stdin.fifo"),
        shell(),
    ])
    .workdir(sb.sandbox.visible_path(HOME))
    .envs(sb.env.clone())
    .build()
    .map_err(|e| std::io::Error::other(e.to_string()))?;
    let (ended, _) = tokio::sync::watch::channel(false);
    let ended2 = ended.clone();
    let sandbox = sb.sandbox.clone();
    let task = tokio::spawn(async move {
        if let Some(streaming) = sandbox.exec().streaming()
            && let Ok(mut events) = streaming.exec_stream(cmd).await
        {
            while let Some(ev) = events.next().await {
                if matches!(ev, Err(_) | Ok(execseam_core::Event::Exit(_))) {
                    break;
                }
            }
        }
        let _ = ended2.send_replace(true);
    });
    sb.sandbox.track(task.abort_handle());
    Ok(Session {
        id: sid.to_owned(),
        sandbox: sb.sandbox.clone(),
        dir,
        dir_visible,
        stdin: Mutex::new(stdin),
        commands: Mutex::new(Vec::new()),
        ended,
        task: Mutex::new(Some(task.abort_handle())),
    })
}

fn session_json(s: &Session) -> serde_json::Value {
    let cmds: Vec<_> = s
        .commands
        .lock()
        .expect("commands")
        .iter()
        .map(|c| s.command_json(c))
        .collect();
    serde_json::json!({"sessionId": s.id, "commands": cmds})
}

pub(super) async fn list_sessions(sb: Arc<SandboxEntry>) -> Response {
    let all: Vec<_> = sb
        .sessions
        .lock()
        .expect("sessions")
        .values()
        .map(|s| session_json(s))
        .collect();
    json_response(StatusCode::OK, &serde_json::Value::Array(all))
}

fn session(sb: &SandboxEntry, sid: &str) -> Option<Arc<Session>> {
    sb.sessions.lock().expect("sessions").get(sid).cloned()
}

pub(super) async fn get_session(sb: Arc<SandboxEntry>, sid: &str, path: &str) -> Response {
    match session(&sb, sid) {
        Some(s) => json_response(StatusCode::OK, &session_json(&s)),
        None => session_not_found(path, "GET"),
    }
}

pub(super) async fn delete_session(sb: Arc<SandboxEntry>, sid: &str, path: &str) -> Response {
    let Some(s) = sb.sessions.lock().expect("sessions").remove(sid) else {
        return session_not_found(path, "DELETE");
    };
    s.kill();
    let dir = s.dir.clone();
    let _ = sb
        .sandbox
        .fs(move |fs| std::fs::remove_dir_all(fs.path(&dir)))
        .await;
    StatusCode::NO_CONTENT.into_response()
}

/// The block written to the session shell for one command: behaves as the daemon's wrapper
/// (labelled FIFOs, command sourced from `cmd.sh`, stdin held open for async commands). The exit
/// code is the command's own status, written to `exit_code` only **after** the stdin holder is
/// stopped and both labellers have drained, as `cmdWrapperFormat` in the daemon's
/// `apps/daemon/pkg/session/execute.go` does at v0.190.0 (`b5a5d9e78`: "Write exit code only
/// after labelers have flushed all output to the log file. Previously echo "$?" ran before
/// wait, creating a race…"). So the synchronous answer and `GET …/command/{id}` see the whole
/// log, and a background child that keeps the command's stdout or stderr open delays the exit
/// code until it closes them (an older daemon, `0070d33`, wrote the code first).
fn wrapper(dir: &str, run_async: bool) -> String {
    let q = |s: &str| format!("'{}'", s.replace('\'', "'\\''"));
    let holder = if run_async {
        "while :; do sleep 3600; done > \"$_ip\" &"
    } else {
        "cat /dev/null > \"$_ip\" &"
    };
    format!(
        r#"{{
_d={d}
_log="$_d/output.log"; _op="$_d/stdout.pipe"; _ep="$_d/stderr.pipe"; _ip="$_d/input.pipe"
rm -f "$_op" "$_ep" "$_ip" && mkfifo "$_op" "$_ep" "$_ip" || echo 1 >> "$_d/exit_code"
( while IFS= read -r l || [ -n "$l" ]; do printf '\001\001\001%s\n' "$l"; done < "$_op" ) >> "$_log" & _r1=$!
( while IFS= read -r l || [ -n "$l" ]; do printf '\002\002\002%s\n' "$l"; done < "$_ep" ) >> "$_log" & _r2=$!
{holder}
_h=$!
{{ . "$_d/cmd.sh"; }} < "$_ip" > "$_op" 2> "$_ep"
_ec=$?
kill "$_h" 2>/dev/null; wait "$_h" 2>/dev/null
wait "$_r1" "$_r2"
echo "$_ec" >> "$_d/exit_code"
rm -f "$_op" "$_ep" "$_ip"
}}
"#,
        d = q(dir),
        holder = holder
    )
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SessionExecuteRequest {
    command: String,
    #[serde(default)]
    run_async: Option<bool>,
    #[serde(default, rename = "async")]
    legacy_async: Option<bool>,
}

pub(super) async fn session_exec(
    state: Arc<State>,
    sb: Arc<SandboxEntry>,
    sid: &str,
    req: Request,
) -> Response {
    let path = rel_path(&sb, &req);
    let ctl = req.extensions().get::<ConnControl>().cloned();
    let shape = shape(req.headers());
    let fault = state.faults.take("exec");
    let end_session = state.faults.take("session") == Some(Fault::SandboxVanishes);
    if let Some(f) = fault {
        if f == Fault::ResetBeforeResponse {
            return reset_connection(ctl.as_ref()).await;
        }
        if let Some(r) = generic_fault(f, "DAYTONA_PROXY", &path, "POST").await {
            return r;
        }
    }
    let body = axum::body::to_bytes(req.into_body(), usize::MAX)
        .await
        .unwrap_or_default();
    let r: SessionExecuteRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return invalid_body(&e, &path);
        }
    };
    if r.command.trim().is_empty() {
        return daemon_error(
            StatusCode::BAD_REQUEST,
            "bad request: command cannot be empty",
            Some("BAD_REQUEST"),
            &path,
            "POST",
        );
    }
    let run_async = r.run_async.unwrap_or(false) || r.legacy_async.unwrap_or(false);
    let Some(s) = session(&sb, sid) else {
        return session_not_found(&path, "POST");
    };
    if s.is_ended() {
        return daemon_error(
            StatusCode::GONE,
            "session ended",
            Some("SESSION_ENDED"),
            &path,
            "POST",
        );
    }
    let cid = super::uuid_v4();
    let (cmd_dir, user, command) = (
        format!("{}/{cid}", s.dir),
        sb.sandbox.user().clone(),
        r.command.clone(),
    );
    let prepared = sb
        .sandbox
        .fs(move |fs| {
            fs.create_dir_all_as(&cmd_dir, &user)?;
            for (name, data) in [("cmd.sh", command.as_bytes()), ("output.log", b"")] {
                let f = format!("{cmd_dir}/{name}");
                std::fs::write(fs.path(&f), data)?;
                fs.chown(&f, &user)?;
            }
            Ok(())
        })
        .await;
    if let Err(e) = prepared {
        return daemon_error(
            StatusCode::BAD_REQUEST,
            &format!("bad request: failed to create log file: {e}"),
            Some("BAD_REQUEST"),
            &path,
            "POST",
        );
    }
    s.commands.lock().expect("commands").push(CmdEntry {
        id: cid.clone(),
        command: r.command.clone(),
        cut: fault == Some(Fault::CutBeforeExit) && run_async,
    });
    let block = wrapper(&format!("{}/{cid}", s.dir_visible), run_async);
    let written = s.stdin.lock().expect("stdin").write_all(block.as_bytes());
    if let Err(e) = written {
        return daemon_error(
            StatusCode::BAD_REQUEST,
            &format!("bad request: failed to write command: {e}"),
            Some("BAD_REQUEST"),
            &path,
            "POST",
        );
    }
    if end_session {
        let s2 = s.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            s2.kill();
        });
    }
    if fault == Some(Fault::SandboxVanishes) {
        let (st, id) = (state.clone(), sb.id.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            st.destroy(&id);
        });
    }
    if run_async {
        let body = match fault {
            Some(Fault::MalformedBody) => "{\"cmdId\": null".to_owned(),
            _ => serde_json::json!({"cmdId": cid}).to_string(),
        };
        if fault == Some(Fault::ServerError) {
            return finish_with_fault(fault, StatusCode::ACCEPTED, body, &path, &sb.id, &state);
        }
        return (
            StatusCode::ACCEPTED,
            [(
                http::header::CONTENT_TYPE,
                "application/json; charset=utf-8",
            )],
            body,
        )
            .into_response();
    }
    let mut ended = s.ended.subscribe();
    let code = loop {
        if let Some(code) = s.exit_code_async(&cid).await {
            break code;
        }
        if *ended.borrow() {
            if state.sandbox(&sb.id).is_none() {
                return envelope(
                    StatusCode::BAD_GATEWAY,
                    "runner is unreachable: sandbox destroyed",
                    Some("RUNNER_UNREACHABLE"),
                    "DAYTONA_PROXY",
                    &path,
                    "POST",
                );
            }
            return daemon_error(
                StatusCode::GONE,
                "session ended while the command was running",
                Some("SESSION_ENDED"),
                &path,
                "POST",
            );
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(50)) => {}
            _ = ended.changed() => {}
        }
    };
    let log = s.log(&cid);
    let body = match shape {
        Shape::Split => {
            let (o, e) = demux(&log);
            serde_json::json!({"cmdId": cid, "output": lossy(&log), "stdout": lossy(&o), "stderr": lossy(&e), "exitCode": code})
        }
        Shape::Raw => serde_json::json!({"cmdId": cid, "output": lossy(&log), "exitCode": code}),
        Shape::Combined => {
            serde_json::json!({"cmdId": cid, "output": lossy(&strip_prefixes(&log)), "exitCode": code})
        }
    };
    finish_with_fault(
        fault,
        StatusCode::OK,
        body.to_string(),
        &path,
        &sb.id,
        &state,
    )
}

fn command_not_found(path: &str, method: &str) -> Response {
    daemon_error(
        StatusCode::NOT_FOUND,
        "not found: command not found",
        Some("NOT_FOUND"),
        path,
        method,
    )
}

pub(super) async fn get_command(
    sb: Arc<SandboxEntry>,
    sid: &str,
    cid: &str,
    path: &str,
) -> Response {
    let Some(s) = session(&sb, sid) else {
        return session_not_found(path, "GET");
    };
    let found = s
        .commands
        .lock()
        .expect("commands")
        .iter()
        .find(|c| c.id == cid)
        .map(|c| (c.id.clone(), c.command.clone()));
    match found {
        Some((id, command)) => {
            let mut v = serde_json::json!({"id": id, "command": command});
            if let Some(code) = s.exit_code_async(&id).await {
                v["exitCode"] = code.into();
            }
            json_response(StatusCode::OK, &v)
        }
        None => command_not_found(path, "GET"),
    }
}

pub(super) async fn input(sb: Arc<SandboxEntry>, sid: &str, cid: &str, req: Request) -> Response {
    let path = rel_path(&sb, &req);
    #[derive(Deserialize)]
    struct Input {
        data: String,
    }
    let i: Input = match required_body(req, 1 << 24, &path, "data").await {
        Ok(i) => i,
        Err(r) => return r,
    };
    let Some(s) = session(&sb, sid) else {
        return session_not_found(&path, "POST");
    };
    if !s
        .commands
        .lock()
        .expect("commands")
        .iter()
        .any(|c| c.id == cid)
    {
        return command_not_found(&path, "POST");
    }
    if s.exit_code(cid).is_some() {
        return daemon_error(
            StatusCode::GONE,
            "command has already completed",
            Some("COMMAND_ALREADY_COMPLETED"),
            &path,
            "POST",
        );
    }
    if s.is_ended() {
        return daemon_error(
            StatusCode::GONE,
            "session ended",
            Some("SESSION_ENDED"),
            &path,
            "POST",
        );
    }
    let pipe = s.cmd_file(cid, "input.pipe");
    let write = s.sandbox.fs(move |fs| {
        let pipe = fs.path(&pipe);
        // The shell creates the FIFO when it reaches the command: wait for it.
        use std::os::unix::fs::FileTypeExt as _;
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while !std::fs::metadata(&pipe).is_ok_and(|m| m.file_type().is_fifo()) {
            if std::time::Instant::now() > until {
                return Err(std::io::Error::other(
                    "the command's input pipe never appeared",
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        std::fs::OpenOptions::new()
            .write(true)
            .open(&pipe)
            .and_then(|mut f| f.write_all(i.data.as_bytes()))
    });
    match tokio::time::timeout(Duration::from_secs(5), write).await {
        Ok(Ok(())) => StatusCode::NO_CONTENT.into_response(),
        _ => daemon_error(
            StatusCode::GONE,
            "command input is closed",
            Some("COMMAND_ALREADY_COMPLETED"),
            &path,
            "POST",
        ),
    }
}

pub(super) async fn logs(
    sb: Arc<SandboxEntry>,
    sid: &str,
    cid: &str,
    mut req: Request,
) -> Response {
    let path = rel_path(&sb, &req);
    let shape = shape(req.headers());
    let Some(s) = session(&sb, sid) else {
        return session_not_found(&path, "GET");
    };
    let cut = match s
        .commands
        .lock()
        .expect("commands")
        .iter()
        .find(|c| c.id == cid)
    {
        Some(c) => c.cut,
        None => return command_not_found(&path, "GET"),
    };
    let is_ws = req
        .headers()
        .get(http::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if !is_ws {
        let log = s.log(cid);
        return match shape {
            Shape::Split => {
                let (o, e) = demux(&log);
                json_response(
                    StatusCode::OK,
                    &serde_json::json!({"output": lossy(&log), "stdout": lossy(&o), "stderr": lossy(&e)}),
                )
            }
            Shape::Raw => (
                StatusCode::OK,
                [(http::header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                log,
            )
                .into_response(),
            Shape::Combined => (
                StatusCode::OK,
                [(http::header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                strip_prefixes(&log),
            )
                .into_response(),
        };
    }
    let follow = req
        .uri()
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "follow=true"));
    let Some(key) = super::pty::ws_key(&req) else {
        return daemon_error(
            StatusCode::BAD_REQUEST,
            "missing Sec-WebSocket-Key",
            Some("BAD_REQUEST"),
            &path,
            "GET",
        );
    };
    let protocol = req
        .headers()
        .get(http::header::SEC_WEBSOCKET_PROTOCOL)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.split(',')
                .map(str::trim)
                .find(|p| p.starts_with("X-Daytona-SDK-Version~"))
                .map(str::to_owned)
        });
    let on_upgrade = hyper::upgrade::on(&mut req);
    let log_path = s.cmd_file(cid, "output.log");
    let cid = cid.to_owned();
    let session = s.clone();
    tokio::spawn(async move {
        let Ok(upgraded) = on_upgrade.await else {
            return;
        };
        let ws = tokio_websockets::ServerBuilder::new().serve(TokioIo::new(upgraded));
        stream_log(
            ws,
            session,
            &cid,
            log_path,
            follow,
            shape == Shape::Combined,
            cut,
        )
        .await;
    });
    execseam_emulator_kit::ws::switching_protocols(&key, protocol.as_deref())
}

/// 400 `INVALID_REQUEST_BODY`: a POST body that does not decode.
fn invalid_body(e: &serde_json::Error, path: &str) -> Response {
    daemon_error(
        StatusCode::BAD_REQUEST,
        &format!("invalid body request: {e}"),
        Some("INVALID_REQUEST_BODY"),
        path,
        "POST",
    )
}

/// Tails the log as the daemon does: ≤ 1024-byte binary frames; with `follow`, ends after 50
/// consecutive empty reads 20 ms apart once the exit code is written; then Close 1000.
async fn stream_log<S>(
    mut ws: WebSocketStream<S>,
    session: Arc<Session>,
    cid: &str,
    log_path: String,
    follow: bool,
    combined: bool,
    cut: bool,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let opened = session
        .sandbox
        .fs(move |fs| std::fs::File::open(fs.path(&log_path)))
        .await;
    let Ok(mut file) = opened.map(tokio::fs::File::from_std) else {
        let _ = ws
            .send(Message::close(
                Some(CloseCode::INTERNAL_SERVER_ERROR),
                "log file not found",
            ))
            .await;
        return;
    };
    if cut {
        // Fault injection: once the command has ended, send the first half of its log and drop
        // the connection without a Close frame (the end of the log never arrives).
        loop {
            if session.exit_code_async(cid).await.is_some() || session.is_ended() {
                break;
            }
            tokio::select! {
                m = ws.next() => if !matches!(m, Some(Ok(ref m)) if !m.is_close()) {
                    return;
                },
                _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            }
        }
        let log = session.log(cid);
        let half = &log[..log.len() / 2];
        if !half.is_empty() {
            let _ = ws.send(Message::binary(half.to_vec())).await;
        }
        return;
    }
    let mut buf = vec![0u8; 1024];
    let mut held: Vec<u8> = Vec::new();
    let mut empty = 0u32;
    loop {
        let n = file.read(&mut buf).await.unwrap_or(0);
        if n > 0 {
            empty = 0;
            let chunk = if combined {
                held.extend_from_slice(&buf[..n]);
                let keep = held
                    .iter()
                    .rev()
                    .take(2)
                    .take_while(|&&b| b == 1 || b == 2)
                    .count();
                let ready = held.len() - keep;
                let out = strip_prefixes(&held[..ready]);
                held.drain(..ready);
                out
            } else {
                buf[..n].to_vec()
            };
            if ws.send(Message::binary(chunk)).await.is_err() {
                return;
            }
            continue;
        }
        empty += 1;
        let exited = session.exit_code_async(cid).await.is_some();
        if !follow || session.is_ended() || (empty >= 50 && exited) {
            break;
        }
        tokio::select! {
            m = ws.next() => match m {
                Some(Ok(m)) if !m.is_close() => {}
                _ => return,
            },
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        }
    }
    if !held.is_empty() {
        let _ = ws.send(Message::binary(held)).await;
    }
    let _ = ws
        .send(Message::close(Some(CloseCode::NORMAL_CLOSURE), ""))
        .await;
    // Let the client read the close frame before the connection goes.
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_header_selects_the_shape() {
        let h = |pairs: &[(&str, &str)]| {
            let mut m = HeaderMap::new();
            for (k, v) in pairs {
                m.insert(
                    http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    http::HeaderValue::from_str(v).unwrap(),
                );
            }
            m
        };
        for (version, want) in [
            ("0.226.1", Shape::Split),
            ("0.167.0", Shape::Split),
            ("0.166.9", Shape::Raw),
            ("0.27.0", Shape::Raw),
            ("0.26.0", Shape::Combined),
            ("0.0.0-dev", Shape::Split),
        ] {
            assert_eq!(
                shape(&h(&[("X-Daytona-SDK-Version", version)])),
                want,
                "{version}"
            );
        }
        assert_eq!(shape(&h(&[])), Shape::Combined);
        assert_eq!(shape(&h(&[("X-Daytona-Split-Output", "true")])), Shape::Raw);
    }

    #[test]
    fn demux_and_strip() {
        let log = b"\x01\x01\x01out\n\x02\x02\x02bad\n\x01\x01\x01two\n";
        let (o, e) = demux(log);
        assert_eq!(
            (o.as_slice(), e.as_slice()),
            (&b"out\ntwo\n"[..], &b"bad\n"[..])
        );
        assert_eq!(strip_prefixes(log), b"out\nbad\ntwo\n");
    }

    #[test]
    fn code_run_joins_argv_unquoted() {
        let c = code_run_command("print(1)", "python", &["a".into(), "b c".into()]).unwrap();
        assert!(c.ends_with("python3 -u - a b c"), "{c}");
        assert!(code_run_command("x", "cobol", &[]).is_none());
    }
}
