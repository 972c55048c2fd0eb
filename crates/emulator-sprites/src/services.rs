//! A sprite's services (`/v1/sprites/{name}/services…`) and network policy
//! (`/v1/sprites/{name}/policy/network`), as the API reference (docs.sprites.dev/api, "Services
//! API" and "Policy API") and the SDKs (`sprites-py` 0.7.2 `sprites/services.py` and
//! `sprites/policy.py`; `sprites-go` `services.go` and `policy.go`) describe them:
//!
//! - `GET /services`: a JSON array of `{name, cmd, args, needs, http_port, env, dir, state}`,
//!   `state` `{name, status, pid, started_at, error, restart_count}`; `GET /services/{service}`
//!   one of them, 404 for an unknown name;
//! - `PUT /services/{service}?duration=` `{cmd, args, needs, http_port, env, dir}` creates or
//!   replaces the definition and starts it (after the services it `needs`), answering NDJSON
//!   log events (`started`, `stdout`/`stderr` lines, `exit`, `complete`) for `duration` (Go
//!   syntax, default `5s`) or until the process exits; a missing `cmd` is a 400;
//! - `POST /services/{service}/start?duration=` the same stream for an existing definition;
//!   `POST /services/{service}/stop?timeout=` SIGTERM to the process group, SIGKILL after
//!   `timeout` (default `10s`), 409 when it is not running; `POST /services/signal
//!   {name, signal}` 204, 404 for an unknown service, 409 when it is not running, 400 for an
//!   unknown signal name; `DELETE /services/{service}` stops it and answers 204, 409 while
//!   another service `needs` it;
//! - `GET /policy/network` `{rules}` (empty on a new sprite) and `POST /policy/network
//!   {rules}` 204 (both SDKs accept only 204; the reference shows 200 with the rules), 400 for a
//!   body that is not `{rules: [...]}` or a rule that has neither `include` nor a `domain` with
//!   `action` `allow` or `deny`.
//!
//! Not emulated: the runtime's restart of a crashed service (`restart_count`,
//! `next_restart_at` stay unset; a service that exits is `stopped` after exit 0, else `failed`),
//! starting services at boot (they start again after a checkpoint's restore), log files (`complete` carries no
//! `log_files`), and any filtering of traffic by the policy (docs/adapters/sprites.md).

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::body::Bytes;
use axum::extract::{FromRequestParts, Path, Query};
use axum::response::{IntoResponse, Response};
use http::request::Parts;
use http::{HeaderValue, StatusCode, header};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::broadcast;

use super::exec::{AddressedSprite, json_response};
use super::{HOME, Sprite, State, wire};

/// A service definition.
#[derive(Clone, Deserialize)]
pub(crate) struct Def {
    cmd: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    needs: Vec<String>,
    http_port: Option<u16>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    dir: Option<String>,
}

struct Run {
    host_pid: u32,
    pid: u32,
    started_at: SystemTime,
}

/// One service: its definition, its process and its log.
pub(crate) struct Service {
    name: String,
    def: Mutex<Def>,
    run: Mutex<Option<Run>>,
    status: Mutex<(&'static str, Option<String>)>,
    log: broadcast::Sender<Value>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn event(kind: &str) -> Value {
    json!({"type": kind, "timestamp": now_ms()})
}

impl Service {
    fn json(&self) -> Value {
        let def = self.def.lock().expect("def").clone();
        let (status, error) = self.status.lock().expect("status").clone();
        let mut state = json!({"name": self.name, "status": status, "restart_count": 0});
        if let Some(r) = self.run.lock().expect("run").as_ref() {
            state["pid"] = json!(r.pid);
            state["started_at"] = json!(execseam_emulator_kit::util::rfc3339(r.started_at));
        }
        if let Some(e) = error {
            state["error"] = json!(e);
        }
        json!({
            "name": self.name,
            "cmd": def.cmd,
            "args": def.args,
            "needs": def.needs,
            "http_port": def.http_port,
            "env": def.env,
            "dir": def.dir,
            "state": state,
        })
    }

    fn running(&self) -> bool {
        self.run.lock().expect("run").is_some()
    }
}

impl Sprite {
    /// The `http_port` of a running service, the port its URL routes to (the first by name).
    pub(crate) fn http_port(&self) -> Option<u16> {
        self.services
            .lock()
            .expect("services")
            .values()
            .filter(|s| s.running())
            .find_map(|s| s.def.lock().expect("def").http_port)
    }
}

/// Go's `time.ParseDuration` for the forms the SDKs send (`1s`, `1.5s`, `500ms`, `2m`).
fn go_duration(s: &str) -> Option<Duration> {
    let (num, unit) = s.split_at(s.find(|c: char| c.is_ascii_alphabetic())?);
    let n: f64 = num.parse().ok()?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => return None,
    };
    (secs >= 0.0).then(|| Duration::from_secs_f64(secs))
}

/// One JSON value a line, `application/x-ndjson`.
pub(crate) fn ndjson(events: &[Value]) -> Response {
    let mut body = String::new();
    for e in events {
        body.push_str(&e.to_string());
        body.push('\n');
    }
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-ndjson"),
    );
    r
}

fn not_found(name: &str) -> Response {
    json_response(
        StatusCode::NOT_FOUND,
        &wire::error(&format!("service not found: {name}")),
    )
}

fn find(sprite: &Sprite, name: &str) -> Option<Arc<Service>> {
    sprite.services.lock().expect("services").get(name).cloned()
}

/// A start or stop request: its sprite, the service it names (404 when there is none) and the
/// query's window; checked in that order (the sprite and the query as the extractors do).
pub(crate) struct ServiceCall(Arc<Sprite>, String, Arc<Service>, Window);

impl FromRequestParts<Arc<State>> for ServiceCall {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, st: &Arc<State>) -> Result<Self, Response> {
        let AddressedSprite(sprite) = AddressedSprite::from_request_parts(parts, st).await?;
        let Path((_, service)) = Path::<(String, String)>::from_request_parts(parts, st)
            .await
            .map_err(IntoResponse::into_response)?;
        let Query(q) = Query::<Window>::from_request_parts(parts, st)
            .await
            .map_err(IntoResponse::into_response)?;
        let Some(svc) = find(&sprite, &service) else {
            return Err(not_found(&service));
        };
        Ok(ServiceCall(sprite, service, svc, q))
    }
}

/// Starts the service's process (and, first, the services it needs that are not running).
async fn spawn(sprite: &Arc<Sprite>, svc: &Arc<Service>, depth: usize) -> Result<(), String> {
    if svc.running() {
        return Ok(());
    }
    let def = svc.def.lock().expect("def").clone();
    if depth < 8 {
        for need in &def.needs {
            if let Some(dep) = find(sprite, need) {
                Box::pin(spawn(sprite, &dep, depth + 1)).await?;
            }
        }
    }
    let cmd = def.cmd.clone().unwrap_or_default();
    let mut command = tokio::process::Command::new(&cmd);
    command
        .args(&def.args)
        .env_clear()
        .envs(&sprite.sandbox.spec().env)
        .env("HOME", HOME)
        .env("USER", "sprite")
        .env("LOGNAME", "sprite")
        .envs(&def.env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(false);
    let dir = def.dir.clone().unwrap_or_else(|| HOME.to_owned());
    let user = sprite.sandbox.user().clone();
    let mut child = match sprite.sandbox.spawn(command, &user, &dir).await {
        Ok(c) => c,
        Err(e) => {
            let why = format!("{e:?}");
            *svc.status.lock().expect("status") = ("failed", Some(why.clone()));
            let mut ev = event("error");
            ev["data"] = json!(why);
            let _ = svc.log.send(ev);
            return Err(why);
        }
    };
    *svc.run.lock().expect("run") = Some(Run {
        host_pid: child.host_pid,
        pid: child.pid,
        started_at: SystemTime::now(),
    });
    *svc.status.lock().expect("status") = ("running", None);
    let _ = svc.log.send(event("started"));
    let pipes = [
        (
            "stdout",
            child
                .child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
        ),
        (
            "stderr",
            child
                .child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn tokio::io::AsyncRead + Send + Unpin>),
        ),
    ];
    let mut readers = Vec::new();
    for (kind, pipe) in pipes {
        let Some(pipe) = pipe else { continue };
        let log = svc.log.clone();
        readers.push(tokio::spawn(async move {
            let mut lines = BufReader::new(pipe).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let mut ev = event(kind);
                ev["data"] = json!(format!("{line}\n"));
                let _ = log.send(ev);
            }
        }));
    }
    let svc = svc.clone();
    let handle = tokio::spawn(async move {
        let status = child.child.wait().await;
        for r in readers {
            let _ = r.await;
        }
        let code = match status {
            Ok(s) => s.code().unwrap_or_else(|| {
                use std::os::unix::process::ExitStatusExt as _;
                128 + s.signal().unwrap_or(0)
            }),
            Err(_) => -1,
        };
        *svc.run.lock().expect("run") = None;
        {
            let mut st = svc.status.lock().expect("status");
            *st = match st.0 {
                "stopping" => ("stopped", None),
                _ if code == 0 => ("stopped", None),
                _ => ("failed", Some(format!("exited with code {code}"))),
            };
        }
        let mut ev = event("exit");
        ev["exit_code"] = json!(code);
        let _ = svc.log.send(ev);
    });
    sprite.sandbox.track(handle.abort_handle());
    Ok(())
}

/// After a restore (every process killed, their watchers aborted): each service starts again
/// from its definition, as after a cold wake (docs.sprites.dev/concepts/checkpoints: "After a
/// restore, Services come back from their on-disk definitions").
pub(crate) async fn restart_all(sprite: &Arc<Sprite>) {
    let all: Vec<Arc<Service>> = sprite
        .services
        .lock()
        .expect("services")
        .values()
        .cloned()
        .collect();
    for svc in &all {
        *svc.run.lock().expect("run") = None;
        *svc.status.lock().expect("status") = ("stopped", None);
    }
    for svc in &all {
        let _ = spawn(sprite, svc, 0).await;
    }
}

/// Collects the service's log for `window` or until it exits, ending with `complete`.
async fn watch(
    mut rx: broadcast::Receiver<Value>,
    window: Duration,
    mut events: Vec<Value>,
) -> Vec<Value> {
    let until = tokio::time::Instant::now() + window;
    loop {
        match tokio::time::timeout_at(until, rx.recv()).await {
            Ok(Ok(ev)) => {
                let done = ev["type"] == "exit";
                events.push(ev);
                if done {
                    break;
                }
            }
            Ok(Err(broadcast::error::RecvError::Lagged(_))) => continue,
            Ok(Err(_)) | Err(_) => break,
        }
    }
    events.push(event("complete"));
    events
}

#[derive(Deserialize)]
pub(crate) struct Window {
    duration: Option<String>,
    timeout: Option<String>,
}

fn window(q: &Window) -> Result<Duration, Response> {
    match q.duration.as_deref() {
        None | Some("") => Ok(Duration::from_secs(5)),
        Some(d) => go_duration(d).ok_or_else(|| {
            json_response(
                StatusCode::BAD_REQUEST,
                &wire::error(&format!("invalid duration: {d}")),
            )
        }),
    }
}

/// `GET /v1/sprites/{name}/services`.
pub(crate) async fn list(AddressedSprite(sprite): AddressedSprite) -> Response {
    let all: Vec<Value> = sprite
        .services
        .lock()
        .expect("services")
        .values()
        .map(|s| s.json())
        .collect();
    json_response(StatusCode::OK, &Value::Array(all))
}

/// `GET /v1/sprites/{name}/services/{service}`.
pub(crate) async fn get(
    AddressedSprite(sprite): AddressedSprite,
    Path((_, service)): Path<(String, String)>,
) -> Response {
    match find(&sprite, &service) {
        Some(s) => json_response(StatusCode::OK, &s.json()),
        None => not_found(&service),
    }
}

/// `PUT /v1/sprites/{name}/services/{service}?duration=`.
pub(crate) async fn put(
    AddressedSprite(sprite): AddressedSprite,
    Path((_, service)): Path<(String, String)>,
    Query(q): Query<Window>,
    body: Bytes,
) -> Response {
    let def: Def = match serde_json::from_slice(&body) {
        Ok(d) => d,
        Err(e) => {
            return json_response(
                StatusCode::BAD_REQUEST,
                &wire::error(&format!("invalid request body: {e}")),
            );
        }
    };
    if def.cmd.as_deref().is_none_or(str::is_empty) {
        return json_response(StatusCode::BAD_REQUEST, &wire::error("cmd is required"));
    }
    let win = match window(&q) {
        Ok(w) => w,
        Err(r) => return r,
    };
    let existing = find(&sprite, &service);
    let svc = match existing {
        Some(s) => {
            stop_process(&sprite.sandbox, &s, Duration::from_secs(10)).await;
            *s.def.lock().expect("def") = def;
            s
        }
        None => {
            let s = Arc::new(Service {
                name: service.clone(),
                def: Mutex::new(def),
                run: Mutex::new(None),
                status: Mutex::new(("stopped", None)),
                log: broadcast::channel(1024).0,
            });
            sprite
                .services
                .lock()
                .expect("services")
                .insert(service.clone(), s.clone());
            s
        }
    };
    let rx = svc.log.subscribe();
    let _ = spawn(&sprite, &svc, 0).await;
    ndjson(&watch(rx, win, Vec::new()).await)
}

/// `POST /v1/sprites/{name}/services/{service}/start?duration=`.
pub(crate) async fn start(ServiceCall(sprite, _, svc, q): ServiceCall) -> Response {
    let win = match window(&q) {
        Ok(w) => w,
        Err(r) => return r,
    };
    if svc.running() {
        return ndjson(&[event("started"), event("complete")]);
    }
    let rx = svc.log.subscribe();
    let _ = spawn(&sprite, &svc, 0).await;
    ndjson(&watch(rx, win, Vec::new()).await)
}

/// SIGTERM to the process group, SIGKILL after `grace`; waits for the exit.
async fn stop_process(
    sandbox: &execseam_emulator_kit::Sandbox,
    svc: &Service,
    grace: Duration,
) -> Vec<Value> {
    let Some(host_pid) = svc.run.lock().expect("run").as_ref().map(|r| r.host_pid) else {
        return Vec::new();
    };
    let rx = svc.log.subscribe();
    svc.status.lock().expect("status").0 = "stopping";
    let _ = svc.log.send(event("stopping"));
    let _ = sandbox.signal_group(host_pid, libc::SIGTERM);
    let mut events = watch(rx, grace, vec![event("stopping")]).await;
    events.pop(); // `complete` comes last, after `stopped`.
    if svc.running() {
        let _ = sandbox.signal_group(host_pid, libc::SIGKILL);
        let rx = svc.log.subscribe();
        let mut more = watch(rx, Duration::from_secs(5), Vec::new()).await;
        more.pop();
        events.extend(more);
    }
    events.push(event("stopped"));
    events
}

/// `POST /v1/sprites/{name}/services/{service}/stop?timeout=`.
pub(crate) async fn stop(ServiceCall(sprite, service, svc, q): ServiceCall) -> Response {
    if !svc.running() {
        return json_response(
            StatusCode::CONFLICT,
            &wire::error(&format!("service not running: {service}")),
        );
    }
    let grace = q
        .timeout
        .as_deref()
        .and_then(go_duration)
        .unwrap_or(Duration::from_secs(10));
    let mut events = stop_process(&sprite.sandbox, &svc, grace).await;
    events.push(event("complete"));
    ndjson(&events)
}

#[derive(Deserialize)]
pub(crate) struct SignalReq {
    name: String,
    signal: String,
}

/// `POST /v1/sprites/{name}/services/signal {name, signal}`.
pub(crate) async fn signal(AddressedSprite(sprite): AddressedSprite, body: Bytes) -> Response {
    let Ok(req) = serde_json::from_slice::<SignalReq>(&body) else {
        return json_response(
            StatusCode::BAD_REQUEST,
            &wire::error("invalid request body"),
        );
    };
    let Some(svc) = find(&sprite, &req.name) else {
        return not_found(&req.name);
    };
    let Some(sig) = signal_number(&req.signal) else {
        return json_response(
            StatusCode::BAD_REQUEST,
            &wire::error(&format!("invalid signal: {}", req.signal)),
        );
    };
    let Some(host_pid) = svc.run.lock().expect("run").as_ref().map(|r| r.host_pid) else {
        return json_response(
            StatusCode::CONFLICT,
            &wire::error(&format!("service not running: {}", req.name)),
        );
    };
    let _ = sprite.sandbox.signal_group(host_pid, sig);
    StatusCode::NO_CONTENT.into_response()
}

/// `DELETE /v1/sprites/{name}/services/{service}`.
pub(crate) async fn delete(
    AddressedSprite(sprite): AddressedSprite,
    Path((_, service)): Path<(String, String)>,
) -> Response {
    let Some(svc) = find(&sprite, &service) else {
        return not_found(&service);
    };
    let needed_by: Vec<String> = sprite
        .services
        .lock()
        .expect("services")
        .values()
        .filter(|s| s.def.lock().expect("def").needs.contains(&service))
        .map(|s| s.name.clone())
        .collect();
    if !needed_by.is_empty() {
        return json_response(
            StatusCode::CONFLICT,
            &wire::error(&format!(
                "service {service} is needed by {}",
                needed_by.join(", ")
            )),
        );
    }
    stop_process(&sprite.sandbox, &svc, Duration::from_secs(10)).await;
    sprite.services.lock().expect("services").remove(&service);
    StatusCode::NO_CONTENT.into_response()
}

/// A signal name (`SIGTERM` or `TERM`, any case) as its number.
fn signal_number(name: &str) -> Option<i32> {
    let n = name.trim().to_ascii_uppercase();
    let n = n.strip_prefix("SIG").unwrap_or(&n);
    Some(match n {
        "HUP" => libc::SIGHUP,
        "INT" => libc::SIGINT,
        "QUIT" => libc::SIGQUIT,
        "KILL" => libc::SIGKILL,
        "USR1" => libc::SIGUSR1,
        "USR2" => libc::SIGUSR2,
        "TERM" => libc::SIGTERM,
        "CONT" => libc::SIGCONT,
        "STOP" => libc::SIGSTOP,
        "WINCH" => libc::SIGWINCH,
        _ => return None,
    })
}

fn valid_rule(r: &Value) -> bool {
    let Some(o) = r.as_object() else {
        return false;
    };
    let s = |k: &str| o.get(k).and_then(Value::as_str).filter(|v| !v.is_empty());
    s("include").is_some()
        || (s("domain").is_some() && matches!(s("action"), Some("allow" | "deny")))
}

/// `GET /v1/sprites/{name}/policy/network`.
pub(crate) async fn get_policy(AddressedSprite(sprite): AddressedSprite) -> Response {
    let rules = sprite.policy.lock().expect("policy").clone();
    json_response(StatusCode::OK, &json!({"rules": rules}))
}

/// `POST /v1/sprites/{name}/policy/network {rules}`.
pub(crate) async fn set_policy(AddressedSprite(sprite): AddressedSprite, body: Bytes) -> Response {
    let rules = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.get("rules").and_then(Value::as_array).cloned());
    let Some(rules) = rules else {
        return json_response(
            StatusCode::BAD_REQUEST,
            &wire::error("invalid request body: rules must be a list"),
        );
    };
    if let Some(bad) = rules.iter().find(|r| !valid_rule(r)) {
        return json_response(
            StatusCode::BAD_REQUEST,
            &wire::error(&format!(
                "invalid rule {bad}: a rule needs a domain and an action of allow or deny, or an include"
            )),
        );
    }
    *sprite.policy.lock().expect("policy") = rules;
    StatusCode::NO_CONTENT.into_response()
}
