//! REST routes (services, jobs, runs, logs), the exec and log-tail upgrades.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Request, State as AxState};
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::response::Response;
use axum::routing::get;
use execseam_core::{Command, Event, ExecStream};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_websockets::{CloseCode, Message};

use super::{Entity, Kind, State, TEAM_ID, WORKDIR, exec, iso};
use execseam_emulator_kit::clock::hex_id;
use execseam_emulator_kit::stream::Utf8;
use execseam_emulator_kit::ws::{Ws, is_upgrade, upgrade};
use execseam_emulator_kit::{ConnControl, Fault};

type St = AxState<Arc<State>>;
type Params = Path<HashMap<String, String>>;

pub(crate) fn router(state: Arc<State>) -> Router {
    let scoped = Router::new()
        .route(
            "/services",
            get(|st, p, req| list(Kind::Service, st, p, req)),
        )
        .route(
            "/services/{id}",
            get(|st, p, req| show(Kind::Service, st, p, req)),
        )
        .route("/services/{id}/containers", get(service_containers))
        .route(
            "/services/{id}/logs",
            get(|st, p, req| logs(Kind::Service, st, p, req)),
        )
        .route("/jobs", get(|st, p, req| list(Kind::Job, st, p, req)))
        .route("/jobs/{id}", get(|st, p, req| show(Kind::Job, st, p, req)))
        .route("/jobs/{id}/runs", get(list_runs).post(start_run))
        .route("/jobs/{id}/runs/{run}", get(get_run))
        .route(
            "/jobs/{id}/logs",
            get(|st, p, req| logs(Kind::Job, st, p, req)),
        );
    Router::new()
        .route(
            "/v1/command-exec/projects/{project}/{kind}/{id}",
            get(exec_route),
        )
        .route(
            "/v1/command-exec/teams/{team}/projects/{project}/{kind}/{id}",
            get(exec_route),
        )
        .nest("/v1/projects/{project}", scoped.clone())
        .nest("/v1/teams/{team}/projects/{project}", scoped)
        .fallback(no_route)
        .with_state(state)
}

/// `{"error":{"status","message"}}` (what `endpoint.py` reads: `message`, `id`, `details`).
fn error(status: StatusCode, message: &str) -> Response {
    json_response(
        status,
        &json!({"error": {"status": status.as_u16(), "message": message}}),
    )
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    let mut r = Response::new(Body::from(body.to_string()));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    r
}

fn data(v: Value) -> Response {
    json_response(StatusCode::OK, &json!({ "data": v }))
}

fn page(key: &str, items: Vec<Value>) -> Response {
    let n = items.len();
    json_response(
        StatusCode::OK,
        &json!({"data": { key: items }, "pagination": {"hasNextPage": false, "cursor": null, "count": n}}),
    )
}

async fn no_route(method: Method, uri: Uri) -> Response {
    error(
        StatusCode::NOT_FOUND,
        &format!("Route {method} {} not found", uri.path()),
    )
}

/// The Bearer token, the team and the project of a REST request.
fn admit(st: &State, p: &HashMap<String, String>, req: &Request) -> Result<String, Response> {
    let token = execseam_emulator_kit::bearer(req.headers()).unwrap_or("");
    if !st.accepts(token) {
        return Err(error(
            StatusCode::UNAUTHORIZED,
            "Unauthorized: invalid API token",
        ));
    }
    scope(st, p)
}

fn scope(st: &State, p: &HashMap<String, String>) -> Result<String, Response> {
    if p.get("team").is_some_and(|t| t != TEAM_ID) {
        return Err(error(StatusCode::NOT_FOUND, "Team not found"));
    }
    let project = p.get("project").cloned().unwrap_or_default();
    if !st.has_project(&project) {
        return Err(error(
            StatusCode::NOT_FOUND,
            &format!("Project {project} not found"),
        ));
    }
    Ok(project)
}

fn entity_of(
    st: &State,
    project: &str,
    kind: Kind,
    p: &HashMap<String, String>,
) -> Result<Arc<Entity>, Response> {
    let id = p.get("id").map(String::as_str).unwrap_or("");
    st.entity(project, kind, id).ok_or_else(|| {
        let what = if kind == Kind::Service {
            "Service"
        } else {
            "Job"
        };
        error(StatusCode::NOT_FOUND, &format!("{what} {id} not found"))
    })
}

fn entity_json(e: &Entity) -> Value {
    match e.kind {
        Kind::Service => service_json(e),
        Kind::Job => job_json(e),
    }
}

fn service_json(e: &Entity) -> Value {
    let t = iso(e.created);
    json!({
        "id": e.id, "appId": e.id, "name": e.id, "projectId": e.project, "uid": e.uid,
        "serviceType": "deployment", "description": "An execseam emulated service",
        "disabledCI": true, "disabledCD": false, "tags": [],
        "createdAt": t, "updatedAt": t,
        "deployment": {"instances": 1},
        "status": {"deployment": {"status": "COMPLETED", "reason": "DEPLOYING", "lastTransitionTime": t}},
    })
}

fn job_json(e: &Entity) -> Value {
    let t = iso(e.created);
    json!({
        "id": e.id, "appId": e.id, "name": e.id, "projectId": e.project, "uid": e.uid,
        "jobType": "manual", "description": "An execseam emulated job",
        "disabledCI": true, "disabledCD": false, "tags": [], "suspended": false,
        "createdAt": t, "updatedAt": t,
        "settings": {"backoffLimit": 0, "activeDeadlineSeconds": 600, "runOnSourceChange": "never"},
    })
}

/// `GET …/services`, `GET …/jobs`.
async fn list(kind: Kind, st: St, Path(p): Params, req: Request) -> Response {
    let project = match admit(&st, &p, &req) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let key = match kind {
        Kind::Service => "services",
        Kind::Job => "jobs",
    };
    page(
        key,
        st.list(&project, kind)
            .iter()
            .map(|e| entity_json(e))
            .collect(),
    )
}

/// `GET …/services/{id}`, `GET …/jobs/{id}`.
async fn show(kind: Kind, st: St, Path(p): Params, req: Request) -> Response {
    match admit(&st, &p, &req).and_then(|project| entity_of(&st, &project, kind, &p)) {
        Ok(e) => data(entity_json(&e)),
        Err(r) => r,
    }
}

async fn service_containers(st: St, Path(p): Params, req: Request) -> Response {
    match admit(&st, &p, &req).and_then(|project| entity_of(&st, &project, Kind::Service, &p)) {
        Ok(e) => {
            let created = e
                .created
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0);
            data(
                json!({"containers": [{"name": e.instance, "createdAt": created, "status": "TASK_RUNNING"}]}),
            )
        }
        Err(r) => r,
    }
}

// ---------------------------------------------------------------------------------------------
// Job runs

/// One container log line (`{containerId, log, ts}`, what both SDKs parse).
#[derive(Clone)]
pub(crate) struct LogLine {
    container: String,
    log: String,
    ts: String,
}

impl LogLine {
    fn json(&self) -> Value {
        json!({"containerId": self.container, "log": self.log, "ts": self.ts})
    }
}

/// One run of a job: it runs in the job's container; its output becomes log lines.
pub(crate) struct JobRun {
    id: String,
    name: String,
    container: String,
    started: SystemTime,
    lines: Mutex<Vec<LogLine>>,
    /// `(lines so far, Some(exit) once concluded)`.
    progress: watch::Sender<(usize, Option<(i32, SystemTime)>)>,
}

impl JobRun {
    fn json(&self) -> Value {
        let (_, end) = *self.progress.borrow();
        let mut v = json!({
            "id": self.id, "runName": self.name, "startedAt": iso(self.started),
            "backoffLimit": 0, "completions": 1,
            "concluded": end.is_some(),
            "active": if end.is_some() { 0 } else { 1 },
            "succeeded": if matches!(end, Some((0, _))) { 1 } else { 0 },
            "failed": if matches!(end, Some((c, _)) if c != 0) { 1 } else { 0 },
            "status": match end { None => "RUNNING", Some((0, _)) => "SUCCESS", Some(_) => "FAILED" },
        });
        if let Some((_, t)) = end {
            v["concludedAt"] = json!(iso(t));
        }
        v
    }

    fn push(&self, log: String) {
        let n = {
            let mut lines = self.lines.lock().expect("lines");
            lines.push(LogLine {
                container: self.container.clone(),
                log,
                ts: iso(SystemTime::now()),
            });
            lines.len()
        };
        self.progress.send_modify(|p| p.0 = n);
    }
}

async fn start_run(st: St, Path(p): Params, req: Request) -> Response {
    let entity =
        match admit(&st, &p, &req).and_then(|project| entity_of(&st, &project, Kind::Job, &p)) {
            Ok(e) => e,
            Err(r) => return r,
        };
    let Ok(body) = axum::body::to_bytes(req.into_body(), 1 << 20).await else {
        return error(StatusCode::BAD_REQUEST, "Invalid body");
    };
    let body: Value = if body.is_empty() {
        json!({})
    } else {
        match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(_) => return error(StatusCode::BAD_REQUEST, "Invalid JSON body"),
        }
    };
    let docker = &body["deployment"]["docker"];
    let script = match docker["configType"].as_str() {
        Some("customCommand") | Some("customEntrypointCustomCommand") => {
            match docker["customCommand"].as_str() {
                Some(c) => c.to_owned(),
                None => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        "deployment.docker.customCommand is required",
                    );
                }
            }
        }
        _ => st.options().job_command,
    };
    let mut b =
        Command::builder(["/bin/sh", "-c", &script]).workdir(entity.sandbox.visible_path(WORKDIR));
    if let Some(env) = body["runtimeEnvironment"].as_object() {
        for (k, v) in env {
            let v = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            b = b.env(k, v);
        }
    }
    let cmd = match b.build() {
        Ok(c) => c,
        Err(e) => return error(StatusCode::BAD_REQUEST, &e.to_string()),
    };
    let name = format!("{}-{}", entity.id, hex_id(5));
    let run = Arc::new(JobRun {
        id: format!(
            "{}-{}-{}-{}-{}",
            hex_id(8),
            hex_id(4),
            hex_id(4),
            hex_id(4),
            hex_id(12)
        ),
        container: format!("{name}-{}", hex_id(5)),
        name,
        started: SystemTime::now(),
        lines: Mutex::new(Vec::new()),
        progress: watch::channel((0, None)).0,
    });
    entity.runs.lock().expect("runs").push(run.clone());
    let task = tokio::spawn(execute_run(entity.clone(), run.clone(), cmd));
    entity.sandbox.track(task.abort_handle());
    data(json!({"id": run.id, "runName": run.name}))
}

/// Container logs are lines, stdout and stderr interleaved as they came.
async fn execute_run(entity: Arc<Entity>, run: Arc<JobRun>, cmd: Command) {
    let mut stream = match ExecStream::exec_stream(entity.sandbox.exec(), cmd).await {
        Ok(s) => s,
        Err(e) => {
            run.push(e.message().to_owned());
            run.progress
                .send_modify(|p| p.1 = Some((1, SystemTime::now())));
            return;
        }
    };
    let (mut out, mut err) = (Utf8::default(), Utf8::default());
    let (mut out_line, mut err_line) = (String::new(), String::new());
    let flush = |buf: &mut String, more: String, run: &JobRun| {
        buf.push_str(&more);
        while let Some(i) = buf.find('\n') {
            let line: String = buf.drain(..=i).collect();
            run.push(line.trim_end_matches('\n').to_owned());
        }
    };
    let code = loop {
        match stream.next().await {
            Some(Ok(Event::Stdout(b))) => flush(&mut out_line, out.push(&b), &run),
            Some(Ok(Event::Stderr(b))) => flush(&mut err_line, err.push(&b), &run),
            Some(Ok(Event::Exit(x))) => break x.shell_status(),
            Some(Err(_)) | None => break 1,
        }
    };
    for (buf, dec) in [(&mut out_line, &mut out), (&mut err_line, &mut err)] {
        buf.push_str(&dec.finish());
        if !buf.is_empty() {
            run.push(std::mem::take(buf));
        }
    }
    run.progress
        .send_modify(|p| p.1 = Some((code, SystemTime::now())));
}

fn run_of(entity: &Entity, id: &str) -> Option<Arc<JobRun>> {
    entity
        .runs
        .lock()
        .expect("runs")
        .iter()
        .find(|r| r.id == id)
        .cloned()
}

async fn get_run(st: St, Path(p): Params, req: Request) -> Response {
    let entity =
        match admit(&st, &p, &req).and_then(|project| entity_of(&st, &project, Kind::Job, &p)) {
            Ok(e) => e,
            Err(r) => return r,
        };
    let id = p.get("run").map(String::as_str).unwrap_or("");
    match run_of(&entity, id) {
        Some(r) => data(r.json()),
        None => error(StatusCode::NOT_FOUND, &format!("Job run {id} not found")),
    }
}

async fn list_runs(st: St, Path(p): Params, req: Request) -> Response {
    let entity =
        match admit(&st, &p, &req).and_then(|project| entity_of(&st, &project, Kind::Job, &p)) {
            Ok(e) => e,
            Err(r) => return r,
        };
    let runs: Vec<Value> = entity
        .runs
        .lock()
        .expect("runs")
        .iter()
        .rev()
        .map(|r| r.json())
        .collect();
    page("runs", runs)
}

// ---------------------------------------------------------------------------------------------
// Logs

fn runs_for(entity: &Entity, run: Option<&str>) -> Vec<Arc<JobRun>> {
    entity
        .runs
        .lock()
        .expect("runs")
        .iter()
        .filter(|r| run.is_none_or(|id| r.id == id))
        .cloned()
        .collect()
}

fn query(uri: &Uri) -> HashMap<String, String> {
    uri.query()
        .unwrap_or("")
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.replace('+', " ")))
        .collect()
}

async fn logs(kind: Kind, st: St, Path(p): Params, req: Request) -> Response {
    let q = query(req.uri());
    if is_upgrade(req.headers()) {
        // The tail: authentication is the first frame, as for exec.
        let entity = match scope(&st, &p).and_then(|project| entity_of(&st, &project, kind, &p)) {
            Ok(e) => e,
            Err(r) => return r,
        };
        let st = st.0.clone();
        let mut req = req;
        return upgrade(&mut req, move |ws| {
            tail(ws, st, entity, q.get("runId").cloned())
        });
    }
    let entity = match admit(&st, &p, &req).and_then(|project| entity_of(&st, &project, kind, &p)) {
        Ok(e) => e,
        Err(r) => return r,
    };
    let limit: usize = q
        .get("lineLimit")
        .and_then(|l| l.parse().ok())
        .unwrap_or(200);
    let lines: Vec<Value> = runs_for(&entity, q.get("runId").map(String::as_str))
        .iter()
        .flat_map(|r| r.lines.lock().expect("lines").clone())
        .map(|l| l.json())
        .collect();
    let skip = lines.len().saturating_sub(limit);
    data(Value::Array(lines.into_iter().skip(skip).collect()))
}

/// The log tail: `init` (auth only) → `init {auth: "successful"}`, then `log-lines` batches;
/// a tail of one run closes (1000) once the run concluded and its lines are sent.
async fn tail(mut ws: Ws, st: Arc<State>, entity: Arc<Entity>, run: Option<String>) {
    let first = match tokio::time::timeout(Duration::from_secs(30), ws.next()).await {
        Ok(Some(Ok(m))) if m.is_text() => {
            serde_json::from_str::<Value>(m.as_text().unwrap_or_default()).unwrap_or(Value::Null)
        }
        _ => return,
    };
    let token = first["data"]["auth"]["apiToken"].as_str().unwrap_or("");
    if first["type"] != "init" || !st.accepts(token) {
        let reply = json!({"type": "init", "data": {"auth": "failed", "message": "Authentication failed: invalid API token"}});
        let _ = ws.send(Message::text(reply.to_string())).await;
        let _ = ws
            .send(Message::close(Some(CloseCode::NORMAL_CLOSURE), ""))
            .await;
        return;
    }
    let reply = json!({"type": "init", "data": {"auth": "successful"}});
    if ws.send(Message::text(reply.to_string())).await.is_err() {
        return;
    }
    let mut sent: HashMap<String, usize> = HashMap::new();
    loop {
        let runs = runs_for(&entity, run.as_deref());
        let mut batch = Vec::new();
        let mut all_done = run.is_some();
        for r in &runs {
            let lines = r.lines.lock().expect("lines").clone();
            let n = sent.entry(r.id.clone()).or_insert(0);
            batch.extend(lines[*n..].iter().map(LogLine::json));
            *n = lines.len();
            let (count, end) = *r.progress.borrow();
            all_done &= end.is_some() && count == lines.len();
        }
        if !batch.is_empty() {
            let frame = json!({"type": "log-lines", "data": batch});
            if ws.send(Message::text(frame.to_string())).await.is_err() {
                return;
            }
        }
        if all_done && run.is_some() && !runs.is_empty() {
            let _ = ws
                .send(Message::close(Some(CloseCode::NORMAL_CLOSURE), ""))
                .await;
            while let Some(Ok(m)) = ws.next().await {
                if m.is_close() {
                    break;
                }
            }
            return;
        }
        tokio::select! {
            m = ws.next() => match m {
                None | Some(Err(_)) => return,
                Some(Ok(m)) if m.is_close() => return,
                _ => {}
            },
            () = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Exec

async fn exec_route(st: St, Path(p): Params, mut req: Request) -> Response {
    let fault = st.faults.take("exec");
    let ctl = req.extensions().get::<ConnControl>().cloned();
    match fault {
        Some(Fault::RateLimited { retry_after_secs }) => {
            let mut r = error(StatusCode::TOO_MANY_REQUESTS, "Too many requests");
            r.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from_str(&retry_after_secs.to_string()).expect("digits"),
            );
            return r;
        }
        Some(Fault::Unavailable) => {
            return error(StatusCode::SERVICE_UNAVAILABLE, "Service unavailable");
        }
        Some(Fault::Latency(d)) => tokio::time::sleep(d).await,
        _ => {}
    }
    let _ = ctl;
    let project = match scope(&st, &p) {
        Ok(p) => p,
        Err(r) => return r,
    };
    let kind = match p.get("kind").map(String::as_str) {
        Some("services") => Kind::Service,
        Some("jobs") => Kind::Job,
        Some("addons") | Some("builds") => return error(StatusCode::NOT_FOUND, "Entity not found"),
        _ => return error(StatusCode::NOT_FOUND, "Route not found"),
    };
    let entity = match entity_of(&st, &project, kind, &p) {
        Ok(e) => e,
        Err(r) => return r,
    };
    if !is_upgrade(req.headers()) {
        return error(StatusCode::BAD_REQUEST, "Expected a WebSocket upgrade");
    }
    let st = st.0.clone();
    upgrade(&mut req, move |ws| exec::serve(ws, st, entity, fault))
}
