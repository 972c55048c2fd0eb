//! The control plane: `/api/sandbox…` (NestJS in the real service).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{FromRequestParts, Path, State as AxState};
use axum::response::{IntoResponse, Response};
use http::request::Parts;
use http::{HeaderMap, Method, StatusCode, Uri};
use serde::Deserialize;

use super::{SandboxEntry, State, authorized, envelope, json_response, unauthorized};
use execseam_emulator_kit::Sandbox;

/// The organization's default snapshot (`defaultSnapshot`), a general one.
const DEFAULT_SNAPSHOT: &str = "daytonaio/sandbox:0.4.3";

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
struct CreateSandbox {
    name: Option<String>,
    env: BTreeMap<String, String>,
    labels: BTreeMap<String, String>,
    target: Option<String>,
    snapshot: Option<String>,
    auto_stop_interval: Option<u64>,
    auto_archive_interval: Option<i64>,
    auto_delete_interval: Option<i64>,
    network_block_all: Option<bool>,
    network_allow_list: Option<String>,
    domain_allow_list: Option<String>,
}

/// The base URL the client reached: a reverse proxy's `x-forwarded-host` (the chaos proxy sets
/// it), else the emulator's own. The toolbox proxy URL is built on it, so an SDK that reached the
/// API through a proxy sends its toolbox requests through the same proxy (the real service
/// answers its own proxy's fixed URL).
fn reached(state: &State, headers: &HeaderMap) -> String {
    headers
        .get(execseam_emulator_kit::FORWARDED_HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| !h.is_empty() && !h.contains('/'))
        .map_or_else(
            || state.shell.base_url().to_owned(),
            |h| format!("http://{h}"),
        )
}

pub(crate) fn dto(
    state: &State,
    headers: &HeaderMap,
    s: &SandboxEntry,
    status: Option<&str>,
) -> serde_json::Value {
    let life = s.life.lock().expect("life");
    let status = status.unwrap_or(life.state);
    serde_json::json!({
        "id": s.id,
        "organizationId": super::ORG,
        "name": s.name,
        "user": "daytona",
        "env": s.env,
        "labels": life.labels,
        "public": false,
        "networkBlockAll": life.network_block_all,
        "networkAllowList": life.network_allow_list,
        "domainAllowList": life.domain_allow_list,
        "errorReason": life.error_reason,
        "recoverable": life.recoverable,
        "kvm": false,
        "target": "us",
        "cpu": 1,
        "gpu": 0,
        "memory": 1,
        "disk": 3,
        "state": status,
        // A sandbox in error keeps the state it was meant to be in.
        "desiredState": match status {
            "destroying" => "destroyed",
            "error" => "started",
            s => s,
        },
        "snapshot": s.snapshot,
        // The class decides what `pause` and `fork` take (`state.rs`); Daytona's default.
        "sandboxClass": "container",
        "autoStopInterval": life.auto_stop,
        "autoArchiveInterval": life.auto_archive,
        "autoDeleteInterval": life.auto_delete,
        "createdAt": s.created_at,
        "updatedAt": life.updated_at,
        "daemonVersion": "0.226.1",
        "toolboxProxyUrl": format!("{}/toolbox", reached(state, headers)),
    })
}

fn check(state: &State, headers: &HeaderMap, uri: &Uri, method: &Method) -> Option<Response> {
    (!authorized(state, headers)).then(|| unauthorized("DAYTONA_API", uri.path(), method.as_str()))
}

/// A control-plane request for the sandbox its path names (`/sandbox/{id}/…`, by id or name):
/// authorized (401 otherwise) and for a sandbox that exists (404 "Sandbox with ID or name … not
/// found" otherwise), in that order, before any body is read; with what the answers need (the
/// headers for `toolboxProxyUrl`, the route for the error envelope).
pub(super) struct Addressed {
    pub(super) state: Arc<State>,
    pub(super) s: Arc<SandboxEntry>,
    pub(super) headers: HeaderMap,
    pub(super) uri: Uri,
    pub(super) method: Method,
}

impl Addressed {
    /// A 400 in the API's envelope, for this request.
    pub(super) fn fail(&self, message: &str) -> Response {
        sandbox_error(message, &self.uri, &self.method)
    }

    /// The sandbox as [`dto`] renders it for this request (`state_override` as there).
    pub(super) fn dto(&self, state_override: Option<&'static str>) -> serde_json::Value {
        dto(&self.state, &self.headers, &self.s, state_override)
    }

    /// 200 with the sandbox.
    pub(super) fn answer(&self) -> Response {
        json_response(StatusCode::OK, &self.dto(None))
    }
}

/// A control-plane request that carries the organization's key (401 otherwise), with what the
/// answers need.
pub(super) struct Authorized {
    pub(super) state: Arc<State>,
    pub(super) headers: HeaderMap,
    pub(super) uri: Uri,
    pub(super) method: Method,
}

impl FromRequestParts<Arc<State>> for Authorized {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<State>) -> Result<Self, Response> {
        let (headers, uri, method) = (
            parts.headers.clone(),
            parts.uri.clone(),
            parts.method.clone(),
        );
        if let Some(r) = check(state, &headers, &uri, &method) {
            return Err(r);
        }
        Ok(Authorized {
            state: state.clone(),
            headers,
            uri,
            method,
        })
    }
}

impl FromRequestParts<Arc<State>> for Addressed {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<State>) -> Result<Self, Response> {
        let Authorized {
            state,
            headers,
            uri,
            method,
        } = Authorized::from_request_parts(parts, state).await?;
        let params = Path::<BTreeMap<String, String>>::from_request_parts(parts, &state)
            .await
            .map_err(IntoResponse::into_response)?;
        let id = params.get("id").map_or("", String::as_str);
        let Some(s) = state.sandbox(id) else {
            return Err(not_found(id, &uri, &method));
        };
        Ok(Addressed {
            state,
            s,
            headers,
            uri,
            method,
        })
    }
}

fn not_found(id: &str, uri: &Uri, method: &Method) -> Response {
    envelope(
        StatusCode::NOT_FOUND,
        &format!("Sandbox with ID or name {id} not found"),
        Some("NOT_FOUND"),
        "DAYTONA_API",
        uri.path(),
        method.as_str(),
    )
}

pub(super) async fn create(
    AxState(state): AxState<Arc<State>>,
    headers: HeaderMap,
    uri: Uri,
    method: Method,
    body: Bytes,
) -> Response {
    if let Some(r) = check(&state, &headers, &uri, &method) {
        return r;
    }
    if let Some(f) = state.faults.take("create")
        && let Some(r) = super::process::generic_fault(f, "DAYTONA_API", uri.path(), "POST").await
    {
        return r;
    }
    let req: CreateSandbox = if body.is_empty() {
        CreateSandbox::default()
    } else {
        match serde_json::from_slice(&body) {
            Ok(r) => r,
            Err(e) => {
                return envelope(
                    StatusCode::BAD_REQUEST,
                    &format!("invalid body: {e}"),
                    None,
                    "DAYTONA_API",
                    uri.path(),
                    "POST",
                );
            }
        }
    };
    let _ = req.target;
    let network_allow_list = match req.network_allow_list.as_deref().map(network_allow_list) {
        Some(Err(m)) => return sandbox_error(&m, &uri, &method),
        Some(Ok(l)) => Some(l),
        None => None,
    };
    let auto_archive = match req.auto_archive_interval.map(auto_archive) {
        Some(Err(m)) => return sandbox_error(m, &uri, &method),
        Some(Ok(m)) => Some(m),
        None => None,
    };
    // The snapshot to start from: one of the organization's (its files), the default, or a 400.
    let source = match super::state::create_source(&state, req.snapshot.as_deref()) {
        Ok(s) => s,
        Err(m) => return sandbox_error(&m, &uri, &method),
    };
    let id = super::uuid_v4();
    let made = match &source {
        Some(snap) => Sandbox::create_from(
            id.clone(),
            state.spec(),
            state.shell.sandboxing(),
            &snap.layer,
        ),
        None => Sandbox::create(id.clone(), state.spec(), state.shell.sandboxing()),
    };
    let sandbox = match made {
        Ok(s) => s,
        Err(e) => {
            return envelope(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("cannot create the sandbox: {e}"),
                None,
                "DAYTONA_API",
                uri.path(),
                "POST",
            );
        }
    };
    let mut labels = req.labels;
    labels
        .entry("code-toolbox-language".into())
        .or_insert_with(|| "python".into());
    let now = super::files::rfc3339(std::time::SystemTime::now());
    let mut life = super::Life::new(labels, now.clone(), req.auto_stop_interval.unwrap_or(15));
    if let Some(b) = req.network_block_all {
        life.network_block_all = b;
    }
    life.network_allow_list = network_allow_list;
    life.domain_allow_list = req.domain_allow_list;
    if let Some(a) = auto_archive {
        life.auto_archive = a;
    }
    if let Some(d) = req.auto_delete_interval {
        life.auto_delete = d;
    }
    let entry = Arc::new(SandboxEntry {
        name: req.name.unwrap_or_else(|| id.clone()),
        id: id.clone(),
        created_at: now,
        env: req.env,
        snapshot: match &source {
            Some(s) => s.name.clone(),
            None => req
                .snapshot
                .clone()
                .filter(|n| !n.trim().is_empty())
                .unwrap_or_else(|| DEFAULT_SNAPSHOT.to_owned()),
        },
        auth_token: super::uuid_v4().replace('-', ""),
        life: Mutex::new(life),
        sandbox,
        sessions: Mutex::new(Default::default()),
        ptys: Mutex::new(Default::default()),
    });
    state.shell.sandboxes().lock().insert(id, entry.clone());
    // NestJS @HttpCode(200): create answers 200, not 201.
    json_response(StatusCode::OK, &dto(&state, &headers, &entry, None))
}

pub(super) async fn get_one(a: Addressed) -> Response {
    json_response(StatusCode::OK, &dto(&a.state, &a.headers, &a.s, None))
}

/// The query pairs, percent-decoded, repeated keys kept (`states` is `multi`: one pair per state,
/// `daytona_api_client/api/sandbox_api.py` `_list_sandboxes_serialize`).
pub(crate) fn query_pairs(uri: &Uri) -> Vec<(String, String)> {
    axum::extract::Query::<Vec<(String, String)>>::try_from_uri(uri)
        .map(|q| q.0)
        .unwrap_or_default()
}

/// `GET /sandbox` (SDK 0.226.1: `ListSandboxesResponse {items, nextCursor}`, cursor pages) and
/// `GET /sandbox/paginated` (`{items, total, page, totalPages}`). `labels` is a JSON object (the
/// SDK sends `json.dumps(labels)`, `daytona/_sync/daytona.py` `_fetch_sandbox_page`) and a
/// sandbox matches when it carries every pair; `states` (repeated or comma-separated), `id` and
/// `name` filter too; `limit` bounds a page.
pub(super) async fn list(a: Authorized) -> Response {
    let Authorized {
        state,
        headers,
        uri,
        method,
    } = a;
    let q = query_pairs(&uri);
    let get = |k: &str| {
        q.iter()
            .find(|(key, v)| key == k && !v.is_empty())
            .map(|(_, v)| v.clone())
    };
    let filter: BTreeMap<String, String> = match get("labels") {
        None => BTreeMap::new(),
        Some(l) => match serde_json::from_str(&l) {
            Ok(f) => f,
            Err(_) => {
                return envelope(
                    StatusCode::BAD_REQUEST,
                    "Invalid labels JSON",
                    Some("BAD_REQUEST"),
                    "DAYTONA_API",
                    uri.path(),
                    method.as_str(),
                );
            }
        },
    };
    let states: Vec<String> = q
        .iter()
        .filter(|(k, _)| k == "states" || k == "states[]")
        .flat_map(|(_, v)| v.split(',').map(str::to_owned).collect::<Vec<_>>())
        .filter(|s| !s.is_empty())
        .collect();
    let (id, name) = (get("id"), get("name"));
    let mut items: Vec<_> = state
        .shell
        .sandboxes()
        .lock()
        .values()
        .filter(|s| {
            let life = s.life.lock().expect("life");
            filter.iter().all(|(k, v)| life.labels.get(k) == Some(v))
                && (states.is_empty() || states.iter().any(|st| st == life.state))
                && id.as_ref().is_none_or(|i| *i == s.id)
                && name.as_ref().is_none_or(|n| *n == s.name)
        })
        .map(|s| (s.id.clone(), dto(&state, &headers, s, None)))
        .collect();
    items.sort_by(|a, b| a.0.cmp(&b.0));
    let items: Vec<_> = items.into_iter().map(|(_, v)| v).collect();
    let total = items.len();
    let limit = get("limit").and_then(|l| l.parse::<usize>().ok());
    if !uri.path().ends_with("/paginated") {
        let from = get("cursor")
            .and_then(|c| c.parse::<usize>().ok())
            .unwrap_or(0);
        let limit = limit.unwrap_or(100).max(1);
        let page: Vec<_> = items.into_iter().skip(from).take(limit).collect();
        let next = (from + limit < total).then(|| (from + limit).to_string());
        return json_response(
            StatusCode::OK,
            &serde_json::json!({"items": page, "nextCursor": next}),
        );
    }
    let limit = limit.unwrap_or(10).max(1);
    let page = get("page")
        .and_then(|p| p.parse::<usize>().ok())
        .unwrap_or(1)
        .max(1);
    // The sandbox list answers at least one page; the snapshot list none when it is empty.
    paginated(items, page, limit, 1)
}

/// A `Paginated*` answer: page `page` (from 1) of `all`, `limit` items a page, `totalPages`
/// at least `min_pages`.
pub(crate) fn paginated(
    all: Vec<serde_json::Value>,
    page: usize,
    limit: usize,
    min_pages: usize,
) -> Response {
    let total = all.len();
    let items: Vec<_> = all
        .into_iter()
        .skip((page - 1) * limit)
        .take(limit)
        .collect();
    json_response(
        StatusCode::OK,
        &serde_json::json!({
            "items": items,
            "total": total,
            "page": page,
            "totalPages": total.div_ceil(limit).max(min_pages),
        }),
    )
}

fn sandbox_error(message: &str, uri: &Uri, method: &Method) -> Response {
    envelope(
        StatusCode::BAD_REQUEST,
        message,
        Some("BAD_REQUEST"),
        "DAYTONA_API",
        uri.path(),
        method.as_str(),
    )
}

/// `POST /sandbox/{id}/start` (`sandbox.service.ts` `start`): a stopped or archived sandbox
/// starts (at once here: no `starting` state is observed), a started one is returned as is.
pub(super) async fn start(a: Addressed) -> Response {
    {
        let mut life = a.s.life.lock().expect("life");
        // `assertSandboxNotErrored`: a sandbox in error is recovered, not started.
        if life.state == "error" {
            drop(life);
            return a.fail("Sandbox is in an errored state");
        }
        if life.state != "started" {
            life.state = "started";
            life.touch();
        }
    }
    a.answer()
}

/// `POST /sandbox/{id}/stop` (`sandbox.service.ts` `stop`): only a started sandbox stops
/// ("Sandbox is not in a stoppable state"); its processes die, its filesystem stays.
pub(super) async fn stop(a: Addressed) -> Response {
    match a.s.life.lock().expect("life").state {
        "error" => return a.fail("Sandbox is in an errored state"),
        "started" => {}
        _ => return a.fail("Sandbox is not in a stoppable state"),
    }
    if a.s.stop() {
        // `autoDeleteInterval` 0: stopping destroys it (`desiredState: DESTROYED`).
        let body = a.dto(Some("destroying"));
        a.state.destroy(&a.s.id);
        return json_response(StatusCode::OK, &body);
    }
    a.answer()
}

/// `POST /sandbox/{id}/archive` (`sandbox.service.ts` `archive`): only a stopped sandbox
/// ("Sandbox is not stopped") that is not ephemeral ("Ephemeral sandboxes cannot be archived",
/// `autoDeleteInterval` 0); its files are kept (start brings it back).
pub(super) async fn archive(a: Addressed) -> Response {
    {
        let mut life = a.s.life.lock().expect("life");
        if life.state != "stopped" {
            drop(life);
            return a.fail("Sandbox is not stopped");
        }
        if life.auto_delete == 0 {
            drop(life);
            return a.fail("Ephemeral sandboxes cannot be archived");
        }
        life.state = "archived";
        life.touch();
    }
    a.answer()
}

#[derive(Deserialize)]
struct Labels {
    labels: BTreeMap<String, String>,
}

/// `PUT /sandbox/{id}/labels` `{"labels": {...}}` (`replaceLabels`: the whole set is replaced);
/// answers `SandboxLabels`.
pub(super) async fn replace_labels(a: Addressed, body: Bytes) -> Response {
    let Ok(req) = serde_json::from_slice::<Labels>(&body) else {
        return a.fail("labels must be an object of strings");
    };
    let mut life = a.s.life.lock().expect("life");
    life.labels = req.labels;
    life.touch();
    json_response(StatusCode::OK, &serde_json::json!({"labels": life.labels}))
}

/// `POST /sandbox/{id}/autostop/{interval}` (`setAutostopInterval`): minutes of inactivity
/// before the sandbox stops, 0 disables it; a negative or non-integer interval is a 400.
pub(super) async fn set_autostop(
    a: Addressed,
    Path((_, interval)): Path<(String, String)>,
) -> Response {
    let Ok(minutes) = interval.parse::<u64>() else {
        return a.fail("Auto-stop interval must be a non-negative integer");
    };
    {
        let mut life = a.s.life.lock().expect("life");
        life.auto_stop = minutes;
        life.touch();
    }
    a.answer()
}

/// `resolveAutoArchiveInterval` (`sandbox.service.ts`): negative is a 400, 0 is the maximum,
/// anything else is capped at it.
fn auto_archive(minutes: i64) -> Result<u64, &'static str> {
    match minutes {
        m if m < 0 => Err("Auto-archive interval must be non-negative"),
        0 => Ok(super::MAX_AUTO_ARCHIVE),
        m => Ok((m as u64).min(super::MAX_AUTO_ARCHIVE)),
    }
}

/// `validateNetworkAllowList` (`apps/api/src/sandbox/utils/network-validation.util.ts`): each
/// comma-separated entry (empty ones skipped) an IPv4 address with a CIDR prefix of 0–32, at
/// most 10 entries; the message becomes a 400 (`resolveNetworkAllowList`). Kept as given.
fn network_allow_list(list: &str) -> Result<String, String> {
    let networks: Vec<&str> = list.split(',').map(str::trim).collect();
    for network in networks.iter().filter(|n| !n.is_empty()) {
        let (ip, prefix) = match network.split_once('/') {
            Some((ip, p)) => (ip, Some(p.split('/').next().unwrap_or(p))),
            None => (*network, None),
        };
        if ip.parse::<std::net::Ipv4Addr>().is_err()
            || ip.split('.').any(|o| o.len() > 1 && o.starts_with('0'))
        {
            return Err(format!(
                "Invalid IP address: \"{ip}\" in network \"{network}\". Must be a valid IPv4 address"
            ));
        }
        let Some(prefix) = prefix.filter(|p| !p.is_empty()) else {
            return Err(format!(
                "Invalid network format: \"{network}\". Missing CIDR prefix length (e.g., /24)"
            ));
        };
        // `parseInt(prefix, 10)`: leading digits count, NaN passes both comparisons.
        let digits: String = prefix.chars().take_while(char::is_ascii_digit).collect();
        if digits.parse::<u64>().is_ok_and(|p| p > 32) {
            return Err(format!(
                "Invalid CIDR prefix length: {network}. Prefix must be between 0 and 32"
            ));
        }
    }
    if networks.len() > 10 {
        return Err("Network allow list cannot contain more than 10 networks".into());
    }
    Ok(list.to_owned())
}

/// The handlers' common start: auth, then the sandbox.
/// `POST /sandbox/{id}/autoarchive/{interval}` (`setAutoArchiveInterval`): minutes a sandbox
/// stays stopped before it is archived (`resolveAutoArchiveInterval`); answers the sandbox.
pub(super) async fn set_autoarchive(
    a: Addressed,
    Path((_, interval)): Path<(String, String)>,
) -> Response {
    let minutes = match interval
        .parse::<i64>()
        .map_err(|_| "Validation failed (numeric string is expected)")
        .and_then(auto_archive)
    {
        Ok(m) => m,
        Err(m) => return a.fail(m),
    };
    a.s.life.lock().expect("life").auto_archive = minutes;
    a.answer()
}

/// `POST /sandbox/{id}/autodelete/{interval}` (`setAutoDeleteInterval`): minutes a sandbox
/// stays stopped before it is deleted, stored as given (negative disables, 0 deletes on stop);
/// answers the sandbox.
pub(super) async fn set_autodelete(
    a: Addressed,
    Path((_, interval)): Path<(String, String)>,
) -> Response {
    let Ok(minutes) = interval.parse::<i64>() else {
        return a.fail("Validation failed (numeric string is expected)");
    };
    a.s.life.lock().expect("life").auto_delete = minutes;
    a.answer()
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct NetworkSettings {
    network_block_all: Option<bool>,
    network_allow_list: Option<String>,
    domain_allow_list: Option<String>,
}

/// `POST /sandbox/{id}/network-settings` `{networkBlockAll?, networkAllowList?,
/// domainAllowList?}` (`sandbox.service.ts` `updateNetworkSettings`): blocking all clears the
/// allow list, an allow list (validated) unblocks, `networkBlockAll: false` alone clears the
/// list, an empty string clears a list; answers the sandbox. The emulator stores and reports
/// the policy; it does not filter the sandbox's traffic (docs/adapters/daytona.md).
pub(super) async fn network_settings(a: Addressed, body: Bytes) -> Response {
    let req: NetworkSettings = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return a.fail(&format!("invalid body: {e}")),
    };
    let allow = match req.network_allow_list.as_deref() {
        Some(l) if !l.trim().is_empty() => match network_allow_list(l) {
            Ok(l) => Some(Some(l)),
            Err(m) => return a.fail(&m),
        },
        Some(_) => Some(None),
        None => None,
    };
    {
        let mut life = a.s.life.lock().expect("life");
        if let Some(d) = req.domain_allow_list {
            life.domain_allow_list = (!d.trim().is_empty()).then_some(d);
        }
        if let Some(b) = req.network_block_all {
            life.network_block_all = b;
            if b {
                life.network_allow_list = None;
            }
        }
        match allow {
            Some(Some(l)) => {
                life.network_allow_list = Some(l);
                life.network_block_all = false;
            }
            Some(None) => life.network_allow_list = None,
            None if req.network_block_all == Some(false) => life.network_allow_list = None,
            None => {}
        }
        life.updated_at = super::files::rfc3339(std::time::SystemTime::now());
    }
    a.answer()
}

/// `POST /sandbox/{id}/recover` (`sandbox.service.ts` `recover`, `recoverInPlace`): only a
/// sandbox in `error` whose error is recoverable ("Sandbox is not in a recoverable state",
/// 400); it goes to `stopped` (error cleared) and is started; answers the sandbox.
pub(super) async fn recover(a: Addressed) -> Response {
    {
        let mut life = a.s.life.lock().expect("life");
        if !life.recoverable {
            drop(life);
            return a.fail("Sandbox is not in a recoverable state");
        }
        if life.state != "error" {
            drop(life);
            return a.fail("Sandbox must be in error state to recover");
        }
        life.error_reason = None;
        life.recoverable = false;
        life.state = "started";
        life.touch();
    }
    a.answer()
}

pub(super) async fn delete(a: Addressed) -> Response {
    let body = a.dto(Some("destroying"));
    a.state.destroy(&a.s.id);
    json_response(StatusCode::OK, &body)
}

pub(super) async fn proxy_url(a: Addressed) -> Response {
    json_response(
        StatusCode::OK,
        &serde_json::json!({"url": format!("{}/toolbox", reached(&a.state, &a.headers))}),
    )
}
