//! Routes: sprites, exec (WebSocket and POST), sessions, kill, control.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, FromRequestParts, Path, Request, State as AxState};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use execseam_core::{Command, Exec, ExecStream};
use futures_util::{SinkExt, StreamExt};
use http::request::Parts;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio_websockets::{CloseCode, Message};

use super::pty;
use super::query::{Params, Query};
use super::session::{Out, Session, drive};
use super::wire::{self, EXIT, MAX_FRAME, STDERR, STDIN, STDIN_EOF, STDOUT};
use super::{
    EnvMode, HOME, SPRITE_VERSION, Sprite, SpritesOptions, State, UnknownSprite, fs, lifecycle,
};
use execseam_emulator_kit::util::hex_id;
use execseam_emulator_kit::ws::{self, Ws};
use execseam_emulator_kit::{ConnControl, Fault, PtySize, reset_connection};

type St = AxState<Arc<State>>;

pub(crate) fn router(state: Arc<State>) -> Router {
    Router::new()
        .route(
            "/v1/sprites",
            get(lifecycle::list_sprites).post(create_sprite),
        )
        .route(
            "/v1/sprites/{name}",
            get(show_sprite)
                .put(lifecycle::update_sprite)
                .delete(delete_sprite),
        )
        .route(
            "/v1/sprites/{name}/checkpoint",
            post(lifecycle::create_checkpoint),
        )
        .route(
            "/v1/sprites/{name}/checkpoints",
            get(lifecycle::list_checkpoints),
        )
        .route(
            "/v1/sprites/{name}/checkpoints/{id}",
            get(lifecycle::get_checkpoint),
        )
        .route(
            "/v1/sprites/{name}/checkpoints/{id}/restore",
            post(lifecycle::restore_checkpoint),
        )
        .route(
            "/v1/sprites/{name}/exec",
            get(exec_get).post(exec_post).head(exec_head),
        )
        .route("/v1/sprites/{name}/exec/{id}", get(attach_path))
        .route("/v1/sprites/{name}/exec/{id}/kill", post(kill))
        .route("/v1/sprites/{name}/control", get(control))
        .route("/v1/sprites/{name}/services", get(super::services::list))
        .route(
            "/v1/sprites/{name}/services/signal",
            post(super::services::signal),
        )
        .route(
            "/v1/sprites/{name}/services/{service}",
            get(super::services::get)
                .put(super::services::put)
                .delete(super::services::delete),
        )
        .route(
            "/v1/sprites/{name}/services/{service}/start",
            post(super::services::start),
        )
        .route(
            "/v1/sprites/{name}/services/{service}/stop",
            post(super::services::stop),
        )
        .route(
            "/v1/sprites/{name}/policy/network",
            get(super::services::get_policy).post(super::services::set_policy),
        )
        .route("/v1/sprites/{name}/fs/read", get(fs::read))
        .route("/v1/sprites/{name}/fs/write", axum::routing::put(fs::write))
        .route("/v1/sprites/{name}/fs/list", get(fs::list))
        .route(
            "/v1/sprites/{name}/fs/delete",
            axum::routing::delete(fs::delete),
        )
        .route("/v1/sprites/{name}/fs/rename", post(fs::rename))
        .route("/v1/sprites/{name}/fs/copy", post(fs::copy))
        .route("/v1/sprites/{name}/fs/chmod", post(fs::chmod))
        .route("/v1/sprites/{name}/fs/chown", post(fs::chown))
        .fallback(|| async { json_response(StatusCode::NOT_FOUND, &wire::error("not found")) })
        .layer(axum::middleware::map_response(common_headers))
        .layer(DefaultBodyLimit::max(256 << 20))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            crate::url::route,
        ))
        .with_state(state)
}

async fn common_headers(mut r: Response) -> Response {
    let h = r.headers_mut();
    h.insert("sprite-version", HeaderValue::from_static(SPRITE_VERSION));
    if let Ok(v) = HeaderValue::from_str(&format!("{}-iad", hex_id(26).to_uppercase())) {
        h.insert("fly-request-id", v);
    }
    r
}

pub(crate) fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut r = (status, body.to_string()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    r
}

fn text_response(status: StatusCode, text: &str) -> Response {
    let mut r = (status, format!("{text}\n")).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn unauthorized() -> Response {
    json_response(
        StatusCode::UNAUTHORIZED,
        &wire::error("authentication failed"),
    )
}

pub(crate) fn check_auth(st: &State, headers: &HeaderMap) -> Result<(), Response> {
    let tok = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, rest) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        })
        .filter(|t| !t.is_empty());
    match tok {
        Some(t) if st.shell.token().accepts(t) => Ok(()),
        _ => Err(unauthorized()),
    }
}

pub(crate) fn unknown_sprite(st: &State) -> Response {
    match st.options().unknown_sprite {
        UnknownSprite::Observed500 => json_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &wire::error("failed to retrieve sprite"),
        ),
        UnknownSprite::NotFound => {
            json_response(StatusCode::NOT_FOUND, &wire::error("sprite not found"))
        }
    }
}

/// Authenticates and finds the sprite.
/// The live sprite a request's path names (`/v1/sprites/{name}/…`), for an authorized request
/// (401 otherwise): as [`sprite_for`], before any body or query is read.
pub(crate) struct AddressedSprite(pub(crate) Arc<Sprite>);

impl FromRequestParts<Arc<State>> for AddressedSprite {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, st: &Arc<State>) -> Result<Self, Response> {
        let params =
            Path::<std::collections::BTreeMap<String, String>>::from_request_parts(parts, st)
                .await
                .map_err(IntoResponse::into_response)?;
        let name = params.get("name").map_or("", String::as_str);
        sprite_for(st, &parts.headers, name).map(AddressedSprite)
    }
}

pub(crate) fn sprite_for(
    st: &State,
    headers: &HeaderMap,
    name: &str,
) -> Result<Arc<Sprite>, Response> {
    check_auth(st, headers)?;
    st.sprite(name)
        .filter(|s| s.is_alive())
        .ok_or_else(|| unknown_sprite(st))
}

// ---------------------------------------------------------------------------------------------
// Sprites

async fn create_sprite(st: St, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(r) = check_auth(&st, &headers) {
        return r;
    }
    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let Some(name) = req["name"].as_str().filter(|n| !n.is_empty()) else {
        return json_response(StatusCode::BAD_REQUEST, &wire::error("name is required"));
    };
    let settings = match crate::url::requested(&req) {
        Ok(s) => s,
        Err(r) => return r,
    };
    match st.create_sprite(name) {
        Ok((s, true)) => {
            lifecycle::set_created_labels(&s, &req);
            s.set_url_settings(settings);
            json_response(StatusCode::CREATED, &s.info())
        }
        Ok((_, false)) => {
            json_response(StatusCode::CONFLICT, &wire::error("sprite already exists"))
        }
        Err(e) => json_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            &wire::error(&format!("cannot create the sprite: {e}")),
        ),
    }
}

async fn show_sprite(st: St, Path(name): Path<String>, headers: HeaderMap) -> Response {
    match sprite_for(&st, &headers, &name) {
        Ok(s) => json_response(StatusCode::OK, &s.info()),
        Err(r) => r,
    }
}

async fn delete_sprite(st: St, Path(name): Path<String>, headers: HeaderMap) -> Response {
    if let Err(r) = sprite_for(&st, &headers, &name) {
        return r;
    }
    st.destroy_sprite(&name);
    StatusCode::NO_CONTENT.into_response()
}

async fn control(st: St, Path(name): Path<String>, headers: HeaderMap) -> Response {
    if let Err(r) = sprite_for(&st, &headers, &name) {
        return r;
    }
    json_response(StatusCode::NOT_FOUND, &wire::error("not found"))
}

async fn exec_head(st: St, Path(name): Path<String>, headers: HeaderMap) -> Response {
    match sprite_for(&st, &headers, &name) {
        Ok(_) => StatusCode::OK.into_response(),
        Err(r) => r,
    }
}

// ---------------------------------------------------------------------------------------------
// What to run

/// A command as the exec query describes it.
struct Spec {
    program: String,
    args: Vec<String>,
    command_line: String,
    dir: String,
    env: Option<Vec<(String, String)>>,
    stdin: bool,
    tty: Option<(u16, u16)>,
    max_run: Option<Duration>,
}

/// Go's `time.ParseDuration` for the forms clients send (`10s`, `1m30s`, `500ms`, `0`), or plain
/// seconds.
fn parse_duration(s: &str) -> Option<Duration> {
    if let Ok(n) = s.parse::<u64>() {
        return Some(Duration::from_secs(n));
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let n_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let n: f64 = rest[..n_end].parse().ok()?;
        rest = &rest[n_end..];
        let u_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = match &rest[..u_end] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            "us" | "µs" => 0.000_001,
            "ns" => 0.000_000_001,
            _ => return None,
        };
        total += Duration::from_secs_f64(n * unit);
        rest = &rest[u_end..];
    }
    Some(total)
}

fn spec_of(q: &Query, opts: &SpritesOptions) -> Spec {
    let mut cmd = q.all("cmd");
    if cmd.is_empty() {
        cmd = q.all("cmd[]");
    }
    let program = q
        .get("path")
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .or_else(|| cmd.first().cloned())
        .unwrap_or_else(|| "bash".to_owned());
    let args = cmd.iter().skip(1).cloned().collect();
    let env_params = q.all("env");
    let env = (!env_params.is_empty()).then(|| {
        env_params
            .iter()
            .filter_map(|kv| {
                kv.split_once('=')
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
            })
            .collect()
    });
    let tty = q.flag("tty").then(|| {
        let n = |k: &str, d: u16| q.get(k).and_then(|v| v.parse().ok()).unwrap_or(d);
        (n("rows", 24), n("cols", 80))
    });
    // TTY: stdin unless stdin=false; non-TTY: only with stdin=true.
    let stdin = match tty {
        Some(_) => q.get("stdin") != Some("false"),
        None => q.flag("stdin"),
    };
    let max_run = match q.get("max_run_after_disconnect").and_then(parse_duration) {
        Some(d) if d.is_zero() => None,
        Some(d) => Some(d),
        None if tty.is_some() => None,
        None => Some(opts.max_run_after_disconnect),
    };
    Spec {
        command_line: if cmd.is_empty() {
            program.clone()
        } else {
            cmd.join(" ")
        },
        program,
        args,
        dir: q
            .get("dir")
            .filter(|d| !d.is_empty())
            .unwrap_or(HOME)
            .to_owned(),
        env,
        stdin,
        tty,
        max_run,
    }
}

/// Runs `program` exactly, even when it starts with `-` or contains `=`.
fn launch(program: &str) -> Vec<String> {
    if program.contains('=') {
        vec![
            "/bin/sh".into(),
            "-c".into(),
            "exec \"$0\" \"$@\"".into(),
            program.into(),
        ]
    } else if program.starts_with('-') {
        vec!["env".into(), "--".into(), program.into()]
    } else {
        vec![program.into()]
    }
}

/// The command the sandbox runs: a tiny shell that takes stdin from the FIFO (if any) and then
/// execs the program (through `env -i` when `env` replaces the environment).
fn build(
    sprite: &Sprite,
    spec: &Spec,
    fifo: Option<&str>,
    mode: EnvMode,
) -> Result<Command, String> {
    let (argv, merged) = argv_of(spec, fifo, mode);
    Command::builder(Vec::<String>::new())
        .envs(merged)
        .argv(argv)
        .workdir(sprite.visible_path(&spec.dir))
        .build()
        .map_err(|e| e.message().to_owned())
}

/// The wrapper's argv for `spec` (stdin from `fifo` if any, `env -i` when `env` replaces the
/// environment) and the variables to merge over the default environment.
fn argv_of(spec: &Spec, fifo: Option<&str>, mode: EnvMode) -> (Vec<String>, Vec<(String, String)>) {
    let script = "f=$1; shift; if [ -n \"$f\" ]; then exec 0<\"$f\" || exit 125; rm -f -- \"$f\"; fi; exec \"$@\"";
    let mut argv: Vec<String> = vec![
        "/bin/sh".into(),
        "-c".into(),
        script.into(),
        "sh".into(),
        fifo.unwrap_or("").into(),
    ];
    let mut merged = Vec::new();
    match (&spec.env, mode) {
        (Some(env), EnvMode::Replace) => {
            argv.extend(["env".into(), "-i".into(), "--".into()]);
            argv.extend(env.iter().map(|(k, v)| format!("{k}={v}")));
        }
        (Some(env), EnvMode::Merge) => merged.extend(env.iter().cloned()),
        (None, _) => {}
    }
    argv.extend(launch(&spec.program));
    argv.extend(spec.args.iter().cloned());
    (argv, merged)
}

/// A FIFO in the sprite's `/tmp` for streamed stdin, and the writer half (held open read-write,
/// so the command's open never blocks and it sees EOF only when the writer is dropped).
async fn make_fifo(
    sprite: &Sprite,
) -> std::io::Result<(String, String, tokio::net::unix::pipe::Sender)> {
    let name = format!("/tmp/.execseam-stdin-{}", hex_id(16));
    let n = name.clone();
    // Made as the sprite's user, who runs the command that opens it.
    let file = sprite
        .sandbox
        .fs_as(sprite.sandbox.user(), move |fs| {
            fs.mkfifo(&fs.path(&n), 0o600)?;
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(fs.path(&n))
        })
        .await?;
    let tx = tokio::net::unix::pipe::Sender::from_file(file)?;
    Ok((name.clone(), sprite.visible_path(&name), tx))
}

/// Feeds stdin chunks to the FIFO; `None` (or the channel closing) is EOF. The writer is only
/// dropped (EOF) once the command has opened the FIFO (its wrapper removes the path right after
/// opening it): a FIFO opened for reading with no writer left would block forever.
fn stdin_pump(
    mut tx: tokio::net::unix::pipe::Sender,
    sandbox: Arc<execseam_emulator_kit::Sandbox>,
    fifo: String,
) -> (
    mpsc::UnboundedSender<Option<Bytes>>,
    tokio::task::JoinHandle<()>,
) {
    let (send, mut recv) = mpsc::unbounded_channel::<Option<Bytes>>();
    let task = tokio::spawn(async move {
        while let Some(Some(b)) = recv.recv().await {
            if tx.write_all(&b).await.is_err() {
                break;
            }
        }
        loop {
            let f = fifo.clone();
            let exists = sandbox.fs(move |fs| Ok(fs.path(&f).exists())).await;
            if !exists.unwrap_or(false) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        drop(tx);
    });
    (send, task)
}

enum StartError {
    /// The workdir does not exist: the server cannot start the process.
    CannotStart,
    Internal(String),
}

struct Started {
    session: Arc<Session>,
    rx: mpsc::Receiver<Out>,
    stdin: Option<mpsc::UnboundedSender<Option<Bytes>>>,
}

async fn start_session(
    st: &State,
    sprite: &Arc<Sprite>,
    spec: &Spec,
) -> Result<Started, StartError> {
    let opts = st.options();
    let dir = spec.dir.clone();
    let is_dir = sprite
        .sandbox
        .fs(move |fs| Ok(fs.path(&dir).is_dir()))
        .await;
    if !is_dir.unwrap_or(false) {
        return Err(StartError::CannotStart);
    }
    if let Some((rows, cols)) = spec.tty {
        return start_tty_session(st, sprite, spec, PtySize::new(rows, cols)).await;
    }
    let (fifo_host, fifo_visible, pump) = if spec.stdin {
        let (host, visible, tx) = make_fifo(sprite)
            .await
            .map_err(|e| StartError::Internal(format!("stdin pipe: {e}")))?;
        let (send, task) = stdin_pump(tx, sprite.sandbox.clone(), host.clone());
        (Some(host), Some(visible), Some((send, task)))
    } else {
        (None, None, None)
    };
    let cmd = build(sprite, spec, fifo_visible.as_deref(), opts.env_mode)
        .map_err(StartError::Internal)?;
    let id = st
        .next_session
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let session = Session::new(
        id,
        spec.command_line.clone(),
        spec.dir.clone(),
        spec.tty.is_some(),
        opts.replay_bytes,
    );
    let (_, rx) = session.subscribe().expect("a new session is open");
    let stream = match sprite.sandbox.exec().exec_stream(cmd).await {
        Ok(s) => s,
        Err(e) => {
            if let Some(h) = fifo_host.clone() {
                let _ = sprite
                    .sandbox
                    .fs(move |fs| std::fs::remove_file(fs.path(&h)))
                    .await;
            }
            return Err(if e.kind() == execseam_core::ErrorKind::NotFound {
                StartError::CannotStart
            } else {
                StartError::Internal(e.to_string())
            });
        }
    };
    sprite
        .sessions
        .lock()
        .expect("sessions")
        .insert(id, session.clone());
    let (stdin, pump_task) = match pump {
        Some((send, task)) => (Some(send), Some(task)),
        None => (None, None),
    };
    let (sprite2, session2, max_run) = (sprite.clone(), session.clone(), spec.max_run);
    let task = tokio::spawn(async move {
        let code = drive(session2, stream, max_run, opts.signal_exit).await;
        sprite2.sessions.lock().expect("sessions").remove(&id);
        if let Some(c) = code {
            sprite2.finished.lock().expect("finished").insert(id, c);
        }
        if let Some(t) = pump_task {
            t.abort();
        }
        if let Some(h) = fifo_host {
            let _ = sprite2
                .sandbox
                .fs(move |fs| std::fs::remove_file(fs.path(&h)))
                .await;
        }
    });
    sprite.sandbox.track(task.abort_handle());
    Ok(Started { session, rx, stdin })
}

/// [`start_session`] in TTY mode: the command on a real terminal of the sprite, as the sprite's
/// user, with the sprite's environment (see [`pty`](super::pty)).
async fn start_tty_session(
    st: &State,
    sprite: &Arc<Sprite>,
    spec: &Spec,
    size: PtySize,
) -> Result<Started, StartError> {
    let opts = st.options();
    let (argv, merged) = argv_of(spec, None, opts.env_mode);
    let user = sprite.sandbox.user().clone();
    let mut cmd = tokio::process::Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .env_clear()
        .envs(sprite.sandbox.env_of(&user))
        .envs(merged)
        .kill_on_drop(false);
    let id = st
        .next_session
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let session = Session::new(
        id,
        spec.command_line.clone(),
        spec.dir.clone(),
        true,
        opts.replay_bytes,
    );
    let (_, rx) = session.subscribe().expect("a new session is open");
    let p = sprite
        .sandbox
        .spawn_pty(cmd, &user, &spec.dir, size)
        .await
        .map_err(|e| match e {
            execseam_spawn::SpawnError::Workdir(_) => StartError::CannotStart,
            execseam_spawn::SpawnError::Io(e) => StartError::Internal(format!("tty: {e}")),
        })?;
    let stdin = spec.stdin.then(|| pty::input(p.master.clone()));
    session.set_pty(p.master.clone(), stdin.clone());
    let stream = pty::stream(sprite.sandbox.clone(), p);
    sprite
        .sessions
        .lock()
        .expect("sessions")
        .insert(id, session.clone());
    let (sprite2, session2, max_run) = (sprite.clone(), session.clone(), spec.max_run);
    let task = tokio::spawn(async move {
        let code = drive(session2.clone(), stream, max_run, opts.signal_exit).await;
        session2.clear_pty();
        sprite2.sessions.lock().expect("sessions").remove(&id);
        if let Some(c) = code {
            sprite2.finished.lock().expect("finished").insert(id, c);
        }
    });
    sprite.sandbox.track(task.abort_handle());
    Ok(Started { session, rx, stdin })
}

// ---------------------------------------------------------------------------------------------
// WebSocket plumbing

/// The kit's WebSocket upgrade, with the Sprites server's answer to a request without a key and
/// the capability header it sends on the 101.
fn upgrade<F, Fut>(req: &mut Request, serve: F) -> Response
where
    F: FnOnce(Ws) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    if !req.headers().contains_key(header::SEC_WEBSOCKET_KEY) {
        return text_response(StatusCode::BAD_REQUEST, "missing Sec-WebSocket-Key");
    }
    let mut r = ws::upgrade(req, serve);
    r.headers_mut()
        .insert("x-sprite-capabilities", HeaderValue::from_static("signal"));
    r
}

/// Sends one output chunk as frames of at most [`MAX_FRAME`] bytes.
async fn send_output(ws: &mut Ws, stream: u8, data: &[u8], tty: bool) -> bool {
    for chunk in data.chunks(MAX_FRAME) {
        let frame = if tty {
            chunk.to_vec()
        } else {
            let mut f = Vec::with_capacity(chunk.len() + 1);
            f.push(stream);
            f.extend_from_slice(chunk);
            f
        };
        if ws.send(Message::binary(frame)).await.is_err() {
            return false;
        }
    }
    true
}

/// After the exit the production server keeps the socket open ~5 s before closing it itself;
/// a client that closes first is answered at once.
async fn linger(ws: &mut Ws, d: Duration) {
    let deadline = tokio::time::sleep(d);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            () = &mut deadline => {
                let _ = ws
                    .send(Message::close(Some(CloseCode::NORMAL_CLOSURE), ""))
                    .await;
                return;
            }
            m = ws.next() => match m {
                Some(Ok(m)) if m.is_close() => {
                    let _ = ws.flush().await; // the close reply queued
                    return;
                }
                None | Some(Err(_)) => return,
                Some(Ok(_)) => {}
            }
        }
    }
}

struct Conn {
    session: Arc<Session>,
    replay: Vec<Out>,
    rx: mpsc::Receiver<Out>,
    stdin: Option<mpsc::UnboundedSender<Option<Bytes>>>,
    info: Value,
    tty: bool,
    linger: Duration,
    fault: Option<Fault>,
}

/// Serves one client of a session until the exit (or until it leaves: the session goes on).
async fn serve_ws(mut ws: Ws, mut c: Conn) {
    if ws.send(Message::text(c.info.to_string())).await.is_err() {
        return;
    }
    for out in std::mem::take(&mut c.replay) {
        let ok = match out {
            Out::Stdout(b) => send_output(&mut ws, STDOUT, &b, c.tty).await,
            Out::Stderr(b) => send_output(&mut ws, STDERR, &b, c.tty).await,
            _ => true,
        };
        if !ok {
            return;
        }
    }
    loop {
        tokio::select! {
            out = c.rx.recv() => match out {
                Some(Out::Stdout(b)) | Some(Out::Stderr(b)) if c.fault == Some(Fault::CutBeforeExit) => {
                    let _ = send_output(&mut ws, STDOUT, &b, c.tty).await;
                    return; // dropped: no exit frame, no close frame
                }
                Some(Out::Stdout(b)) => {
                    if !send_output(&mut ws, STDOUT, &b, c.tty).await {
                        return;
                    }
                }
                Some(Out::Stderr(b)) => {
                    if !send_output(&mut ws, STDERR, &b, c.tty).await {
                        return;
                    }
                }
                Some(Out::Exit(code)) => {
                    match c.fault {
                        Some(Fault::CutBeforeExit) => return,
                        Some(Fault::MalformedBody) => {
                            let _ = ws.send(Message::binary(vec![EXIT])).await;
                        }
                        _ if c.tty => {
                            let msg = json!({"type": "exit", "exit_code": code});
                            let _ = ws.send(Message::text(msg.to_string())).await;
                            let _ = ws
                                .send(Message::close(Some(CloseCode::NORMAL_CLOSURE), ""))
                                .await;
                            return;
                        }
                        _ => {
                            let _ = ws.send(Message::binary(vec![EXIT, code])).await;
                        }
                    }
                    linger(&mut ws, c.linger).await;
                    return;
                }
                // Could not start, the sprite vanished, or the session was torn down: the socket
                // just drops, as the server's `defer conn.Close()` does.
                Some(Out::StartFailed) | Some(Out::Lost) | None => return,
            },
            msg = ws.next() => match msg {
                Some(Ok(m)) if m.is_binary() => {
                    let d = m.as_payload();
                    let Some(stdin) = &c.stdin else { continue };
                    if c.tty {
                        let _ = stdin.send(Some(Bytes::copy_from_slice(d)));
                    } else if d[..] == [STDIN_EOF] {
                        let _ = stdin.send(None);
                    } else if d.first() == Some(&STDIN) {
                        let _ = stdin.send(Some(Bytes::copy_from_slice(&d[1..])));
                    } else if !d.is_empty() {
                        let _ = stdin.send(Some(Bytes::copy_from_slice(d)));
                    }
                }
                Some(Ok(m)) if m.is_text() => {
                    let v: Value = serde_json::from_str(m.as_text().unwrap_or_default()).unwrap_or(Value::Null);
                    match v["type"].as_str() {
                        Some("signal") => {
                            let sig = v["signal"].as_str().unwrap_or("TERM");
                            c.session.kill(sig);
                        }
                        Some("stdin_eof") => {
                            if let Some(stdin) = &c.stdin {
                                let _ = stdin.send(None);
                            }
                        }
                        // TTY: the terminal's new size (the foreground job gets SIGWINCH);
                        // without a terminal, ignored as the server does.
                        Some("resize") => {
                            let dim = |k: &str| v[k].as_u64().and_then(|n| u16::try_from(n).ok());
                            if let (Some(m), Some(cols), Some(rows)) = (c.session.pty(), dim("cols"), dim("rows")) {
                                let _ = m.resize(PtySize::new(rows, cols));
                            }
                        }
                        _ => {}
                    }
                }
                Some(Ok(m)) if !m.is_close() => {}
                _ => return,
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Exec over WebSocket, session list, attach

/// Renders the faults that happen before any command runs. `Err` is the answer to send.
async fn prelude(
    st: &State,
    fault: Option<Fault>,
    ctl: Option<ConnControl>,
) -> Result<(), Response> {
    if let Some(Fault::Latency(d)) = fault {
        tokio::time::sleep(d).await;
    }
    match fault {
        Some(Fault::AuthFailure) => Err(unauthorized()),
        Some(Fault::RateLimited { retry_after_secs }) => {
            let mut r = json_response(
                StatusCode::TOO_MANY_REQUESTS,
                &json!({
                    "error": "rate_limited",
                    "message": "Too many requests",
                    "retry_after_seconds": retry_after_secs,
                }),
            );
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(retry_after_secs));
            Err(r)
        }
        Some(Fault::Unavailable) => Err(json_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &wire::error("service unavailable"),
        )),
        Some(Fault::ResetBeforeResponse) => Err(reset_connection(ctl.as_ref()).await),
        _ => {
            let _ = st;
            Ok(())
        }
    }
}

/// The 500 fault: the command runs to its end, then the answer is an error.
async fn run_then_fail(st: &State, sprite: &Sprite, spec: &Spec) -> Response {
    let dir = spec.dir.clone();
    let is_dir = sprite
        .sandbox
        .fs(move |fs| Ok(fs.path(&dir).is_dir()))
        .await;
    if is_dir.unwrap_or(false)
        && let Ok(cmd) = build(sprite, spec, None, st.options().env_mode)
    {
        let _ = sprite.sandbox.exec().exec(cmd).await;
    }
    json_response(
        StatusCode::INTERNAL_SERVER_ERROR,
        &wire::error("internal server error"),
    )
}

fn vanish_soon(st: &Arc<State>, name: &str) {
    let (st, name) = (st.clone(), name.to_owned());
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        st.destroy_sprite(&name);
    });
}

async fn exec_get(st: St, Path(name): Path<String>, mut req: Request) -> Response {
    let q = Query::parse(req.uri().query());
    if !ws::is_upgrade(req.headers()) {
        return list_sessions(&st, req.headers(), &name);
    }
    if let Some(id) = q.get("id").filter(|i| !i.is_empty()) {
        let id = id.to_owned();
        return attach(&st, &name, &id, req).await;
    }
    let fault = st.faults.take("exec");
    let ctl = req.extensions().get::<ConnControl>().cloned();
    if let Err(r) = prelude(&st, fault, ctl).await {
        return r;
    }
    let sprite = match sprite_for(&st, req.headers(), &name) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let opts = st.options();
    if q.all("cmd").is_empty() && q.all("cmd[]").is_empty() {
        return text_response(StatusCode::BAD_REQUEST, "No command specified");
    }
    let spec = spec_of(&q, &opts);
    if fault == Some(Fault::ServerError) {
        return run_then_fail(&st, &sprite, &spec).await;
    }
    if fault == Some(Fault::SandboxVanishes) {
        vanish_soon(&st, &name);
    }
    let st2 = st.0.clone();
    upgrade(&mut req, move |ws| async move {
        let started = match start_session(&st2, &sprite, &spec).await {
            Ok(s) => s,
            Err(StartError::CannotStart) => return, // dropped without an exit, as the server does
            Err(StartError::Internal(e)) => {
                tracing::warn!(error = %e, "cannot start the sprite command");
                return;
            }
        };
        let info = wire::session_info(&started.session, true, opts.session_id_string, spec.tty);
        serve_ws(
            ws,
            Conn {
                session: started.session,
                replay: Vec::new(),
                rx: started.rx,
                stdin: started.stdin,
                info,
                tty: spec.tty.is_some(),
                linger: opts.linger,
                fault,
            },
        )
        .await;
    })
}

fn list_sessions(st: &State, headers: &HeaderMap, name: &str) -> Response {
    let sprite = match sprite_for(st, headers, name) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let sessions: Vec<Value> = sprite
        .sessions()
        .iter()
        .map(|s| wire::session_entry(s))
        .collect();
    json_response(
        StatusCode::OK,
        &json!({"count": sessions.len(), "sessions": sessions}),
    )
}

async fn attach_path(st: St, Path((name, id)): Path<(String, String)>, req: Request) -> Response {
    if !ws::is_upgrade(req.headers()) {
        return text_response(StatusCode::BAD_REQUEST, "expected a websocket upgrade");
    }
    attach(&st, &name, &id, req).await
}

async fn attach(st: &Arc<State>, name: &str, id: &str, mut req: Request) -> Response {
    let sprite = match sprite_for(st, req.headers(), name) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let session = id
        .parse::<u64>()
        .ok()
        .and_then(|id| sprite.sessions.lock().expect("sessions").get(&id).cloned());
    let Some(session) = session else {
        return json_response(StatusCode::NOT_FOUND, &wire::error("session not found"));
    };
    let opts = st.options();
    upgrade(&mut req, move |ws| async move {
        let owner = !session.is_active();
        let Some((replay, rx)) = session.subscribe() else {
            return;
        };
        // A TTY session's current size; an attached client types into its terminal too.
        let tty = session.tty.then(|| {
            session
                .pty()
                .and_then(|m| m.size().ok())
                .map_or((24, 80), |s| (s.rows, s.cols))
        });
        let info = wire::session_info(&session, owner, opts.session_id_string, tty);
        let is_tty = session.tty;
        let stdin = session.tty_input();
        serve_ws(
            ws,
            Conn {
                session,
                replay,
                rx,
                stdin,
                info,
                tty: is_tty,
                linger: opts.linger,
                fault: None,
            },
        )
        .await;
    })
}

// ---------------------------------------------------------------------------------------------
// Kill

fn signal_name(s: &str) -> String {
    let s = s.trim().to_ascii_uppercase();
    if s.starts_with("SIG") {
        s
    } else {
        format!("SIG{s}")
    }
}

async fn kill(st: St, Path((name, id)): Path<(String, String)>, req: Request) -> Response {
    // Counted (and faultable) as route `kill`.
    match st.faults.take("kill") {
        Some(Fault::ServerError) => {
            return json_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                &wire::error("internal server error"),
            );
        }
        Some(Fault::Unavailable) => {
            return json_response(
                StatusCode::SERVICE_UNAVAILABLE,
                &wire::error("service unavailable"),
            );
        }
        _ => {}
    }
    let sprite = match sprite_for(&st, req.headers(), &name) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let signal = Params::read(req)
        .await
        .get("signal")
        .unwrap_or_else(|| "SIGTERM".to_owned());
    let signal = signal_name(&signal);
    let Ok(id) = id.parse::<u64>() else {
        return json_response(StatusCode::NOT_FOUND, &wire::error("session not found"));
    };
    let session = sprite.sessions.lock().expect("sessions").get(&id).cloned();
    let Some(session) = session else {
        if sprite.finished.lock().expect("finished").contains_key(&id) {
            return json_response(StatusCode::GONE, &wire::error("session already exited"));
        }
        return json_response(StatusCode::NOT_FOUND, &wire::error("session not found"));
    };
    session.kill(&signal);
    let mut code = None;
    for _ in 0..500 {
        if let Some(c) = sprite.finished.lock().expect("finished").get(&id) {
            code = Some(*c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut lines = vec![json!({
        "type": "signal",
        "message": format!("Signaling {signal} to process group {id}"),
        "pid": id,
        "signal": signal,
    })];
    match code {
        Some(c) => {
            lines.push(json!({"type": "killed", "message": "Process killed"}));
            lines.push(json!({"type": "complete", "exit_code": c}));
        }
        None => lines
            .push(json!({"type": "error", "message": "Warning: process may not have terminated"})),
    }
    super::services::ndjson(&lines)
}

// ---------------------------------------------------------------------------------------------
// Exec over HTTP POST

async fn exec_post(st: St, Path(name): Path<String>, req: Request) -> Response {
    let q = Query::parse(req.uri().query());
    let fault = st.faults.take("exec");
    let ctl = req.extensions().get::<ConnControl>().cloned();
    if let Err(r) = prelude(&st, fault, ctl).await {
        return r;
    }
    let sprite = match sprite_for(&st, req.headers(), &name) {
        Ok(s) => s,
        Err(r) => return r,
    };
    if q.has("tty") {
        return text_response(StatusCode::BAD_REQUEST, "TTY not supported on POST /exec");
    }
    if q.get("id").is_some_and(|v| !v.is_empty())
        || q.get("detachable").is_some_and(|v| !v.is_empty())
        || q.get("cc").is_some_and(|v| !v.is_empty())
    {
        return text_response(
            StatusCode::BAD_REQUEST,
            "Unsupported parameters for POST /exec",
        );
    }
    let opts = st.options();
    let spec = spec_of(&q, &opts);
    if fault == Some(Fault::ServerError) {
        return run_then_fail(&st, &sprite, &spec).await;
    }
    let started = match start_session(&st, &sprite, &spec).await {
        Ok(s) => s,
        Err(StartError::CannotStart) => {
            return text_response(StatusCode::INTERNAL_SERVER_ERROR, "failed to start process");
        }
        Err(StartError::Internal(_)) => {
            return text_response(StatusCode::INTERNAL_SERVER_ERROR, "failed to create runner");
        }
    };
    if let Some(stdin) = started.stdin.clone() {
        let mut body = req.into_body().into_data_stream();
        tokio::spawn(async move {
            while let Some(Ok(chunk)) = body.next().await {
                if stdin.send(Some(chunk)).is_err() {
                    return;
                }
            }
            let _ = stdin.send(None);
        });
    }
    if fault == Some(Fault::SandboxVanishes) {
        vanish_soon(&st, &name);
    }
    // One frame per body item: hyper writes each as its own chunk.
    struct S {
        rx: mpsc::Receiver<Out>,
        pending: std::collections::VecDeque<Bytes>,
        fault: Option<Fault>,
        sent: bool,
        done: bool,
        _session: Arc<Session>,
    }
    let state = S {
        rx: started.rx,
        pending: Default::default(),
        fault,
        sent: false,
        done: false,
        _session: started.session,
    };
    let stream = futures_util::stream::unfold(state, |mut s| async move {
        if s.done {
            return None;
        }
        loop {
            if let Some(frame) = s.pending.pop_front() {
                s.sent = true;
                return Some((Ok(frame), s));
            }
            if s.sent && s.fault == Some(Fault::CutBeforeExit) {
                s.done = true;
                return Some((Err(std::io::Error::other("cut before the exit frame")), s));
            }
            match s.rx.recv().await {
                Some(Out::Stdout(b)) | Some(Out::Stderr(b)) if b.is_empty() => {}
                Some(Out::Stdout(b)) => s.pending.extend(frames(STDOUT, &b)),
                Some(Out::Stderr(b)) => s.pending.extend(frames(STDERR, &b)),
                Some(Out::Exit(code)) => {
                    s.done = true;
                    let frame = match s.fault {
                        Some(Fault::CutBeforeExit) => {
                            return Some((
                                Err(std::io::Error::other("cut before the exit frame")),
                                s,
                            ));
                        }
                        Some(Fault::MalformedBody) => Bytes::from_static(&[EXIT]),
                        _ => Bytes::from(vec![EXIT, code]),
                    };
                    return Some((Ok(frame), s));
                }
                Some(Out::StartFailed) | Some(Out::Lost) | None => {
                    s.done = true;
                    return Some((Err(std::io::Error::other("the command was lost")), s));
                }
            }
        }
    });
    let mut r = Response::new(Body::from_stream(stream));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    r
}

fn frames(stream: u8, data: &[u8]) -> Vec<Bytes> {
    data.chunks(MAX_FRAME)
        .map(|c| {
            let mut f = Vec::with_capacity(c.len() + 1);
            f.push(stream);
            f.extend_from_slice(c);
            Bytes::from(f)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_like_go() {
        assert_eq!(parse_duration("10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("0"), Some(Duration::ZERO));
        assert_eq!(parse_duration("3"), Some(Duration::from_secs(3)));
        assert_eq!(parse_duration("x"), None);
    }

    #[test]
    fn spec_defaults_follow_the_server() {
        let opts = SpritesOptions::default();
        let s = spec_of(&Query::parse(Some("cmd=echo&cmd=hi")), &opts);
        assert_eq!(
            (s.program.as_str(), s.args.as_slice()),
            ("echo", &["hi".to_string()][..])
        );
        assert_eq!(s.dir, HOME);
        assert!(!s.stdin, "non-TTY stdin is off unless stdin=true");
        assert_eq!(s.max_run, Some(opts.max_run_after_disconnect));
        let s = spec_of(&Query::parse(Some("cmd=bash&tty=true")), &opts);
        assert!(s.stdin, "TTY stdin is on unless stdin=false");
        assert_eq!(s.max_run, None);
        let s = spec_of(
            &Query::parse(Some("cmd=x&path=/bin/y&env=A=1&env=B=2=3&env=junk")),
            &opts,
        );
        assert_eq!(s.program, "/bin/y");
        assert_eq!(
            s.env.unwrap(),
            [
                ("A".to_string(), "1".to_string()),
                ("B".to_string(), "2=3".to_string())
            ]
        );
    }

    #[test]
    fn programs_with_odd_names_are_launched_literally() {
        assert_eq!(launch("ls"), ["ls"]);
        assert_eq!(launch("-x"), ["env", "--", "-x"]);
        assert_eq!(launch("a=b")[3], "a=b");
    }
}
