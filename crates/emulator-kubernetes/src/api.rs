//! The API server's HTTP surface: discovery, the generic registry (create, get, list, watch,
//! update, patch, delete, the `status` and `scale` subresources) for every resource in
//! [`schema::ALL`], and the `pods/exec` upgrade.
//!
//! Semantics from `k8s.io/apiserver` (`endpoints/handlers/{create,get,watch,update,patch,delete}.go`,
//! `registry/generic/registry/store.go`) and the resources' strategies: creates answer 201 with
//! the stored object; a custom resource's PUT needs `metadata.resourceVersion` (422) and a stale
//! one is 409; `generation` moves when the spec does; a `status` subresource keeps the two
//! halves apart; deletes answer 200 with the object; pods are deleted gracefully.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::cluster::Cluster;
use crate::schema::{self, Resource};
use crate::select::{FieldSelector, LabelSelector};
use crate::status::{self, ApiError};
use crate::store::{self, ChangeKind, From};
use crate::{exec, patch, portforward};

/// The API server's routes (one handler: the path is parsed by hand, as the apiserver's
/// installer lays it out).
pub fn router(cluster: Arc<Cluster>) -> Router {
    Router::new().fallback(serve).with_state(cluster)
}

fn json_response(code: StatusCode, v: &Value) -> Response {
    let mut r = (code, v.to_string()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    r
}

fn ok(v: &Value) -> Response {
    json_response(StatusCode::OK, v)
}

/// The query, form-decoded (`+` is a space), as Go's `url.ParseQuery`.
pub fn query(q: &str) -> Vec<(String, String)> {
    execseam_emulator_kit::util::form_pairs(q)
}

fn param<'a>(q: &'a [(String, String)], name: &str) -> Option<&'a str> {
    q.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// Go's `strconv.ParseBool`.
pub fn parse_bool(v: &str) -> Option<bool> {
    match v {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

async fn serve(State(cluster): State<Arc<Cluster>>, request: Request) -> Response {
    match dispatch(&cluster, request).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

/// What a path names.
enum Target<'a> {
    Collection {
        res: &'static Resource,
        ns: Option<&'a str>,
    },
    Object {
        res: &'static Resource,
        ns: &'a str,
        name: &'a str,
        sub: Option<&'a str>,
    },
}

fn resource(group: &str, version: &str, plural: &str) -> Result<&'static Resource, ApiError> {
    schema::find(group, version, plural).ok_or_else(status::no_route)
}

fn target<'a>(group: &'a str, version: &'a str, rest: &[&'a str]) -> Result<Target<'a>, ApiError> {
    match rest {
        // namespaces/{ns}/{plural}[/{name}[/{sub}]] (but namespaces/{name}/status is the
        // namespace's own subresource)
        ["namespaces", ns, plural] if !(group.is_empty() && *plural == "status") => {
            Ok(Target::Collection {
                res: resource(group, version, plural)?,
                ns: Some(ns),
            })
        }
        ["namespaces", ns, plural, name, sub @ ..] if sub.len() <= 1 => Ok(Target::Object {
            res: resource(group, version, plural)?,
            ns,
            name,
            sub: sub.first().copied(),
        }),
        [plural] => Ok(Target::Collection {
            res: resource(group, version, plural)?,
            ns: None,
        }),
        // {plural}/{name}[/{sub}]: cluster-scoped resources only
        [plural, name, sub @ ..] if sub.len() <= 1 => {
            let res = resource(group, version, plural)?;
            if res.namespaced {
                return Err(status::no_route());
            }
            Ok(Target::Object {
                res,
                ns: "",
                name,
                sub: sub.first().copied(),
            })
        }
        _ => Err(status::no_route()),
    }
}

async fn dispatch(cluster: &Arc<Cluster>, request: Request) -> Result<Response, ApiError> {
    if !cluster.authorized(request.headers()) {
        return Err(status::unauthorized());
    }
    let path = request.uri().path().to_owned();
    let q = query(request.uri().query().unwrap_or(""));
    let segments: Vec<&str> = path
        .trim_start_matches('/')
        .trim_end_matches('/')
        .split('/')
        .collect();
    let method = request.method().clone();
    let get = method == Method::GET;
    // Discovery, with and without the trailing slash (go-restful routes both).
    match segments.as_slice() {
        ["version"] if get => return Ok(ok(&schema::version_info())),
        ["api"] if get => {
            let address = cluster.server_address.lock().expect("address").clone();
            return Ok(ok(&schema::core_versions(&address)));
        }
        ["apis"] if get => return Ok(ok(&schema::group_list())),
        ["api", "v1"] if get => {
            return Ok(ok(&schema::resource_list("", "v1").expect("core v1")));
        }
        ["apis", g] if get => {
            return schema::group(g)
                .map(|v| ok(&v))
                .ok_or_else(status::no_route);
        }
        ["apis", g, v] if get => {
            return schema::resource_list(g, v)
                .map(|v| ok(&v))
                .ok_or_else(status::no_route);
        }
        ["healthz" | "livez" | "readyz"] if get => {
            return Ok((StatusCode::OK, "ok").into_response());
        }
        _ => {}
    }
    let (group, version, rest): (&str, &str, &[&str]) = match segments.as_slice() {
        ["api", "v1", rest @ ..] if !rest.is_empty() => ("", "v1", rest),
        ["apis", g, v, rest @ ..] if !rest.is_empty() => (g, v, rest),
        _ => return Err(status::no_route()),
    };
    match target(group, version, rest)? {
        Target::Collection { res, ns } => {
            if let Some(ns) = ns {
                check_namespace_exists(cluster, res, ns, &method)?;
            }
            match method {
                Method::GET => {
                    let watch = param(&q, "watch").and_then(parse_bool).unwrap_or(false);
                    if watch {
                        watch_response(cluster, res, ns, &q)
                    } else {
                        list(cluster, res, ns, &q)
                    }
                }
                Method::POST => {
                    let ns = if res.namespaced {
                        ns.ok_or_else(status::no_route)?
                    } else {
                        ""
                    };
                    let body = body_json(request).await?;
                    create(cluster, res, ns, body).map(|v| json_response(StatusCode::CREATED, &v))
                }
                _ => Err(status::method_not_allowed("")),
            }
        }
        Target::Object { res, ns, name, sub } => {
            let (ns, name, sub) = (ns.to_owned(), name.to_owned(), sub.map(str::to_owned));
            match (sub.as_deref(), method.clone()) {
                (None, Method::GET) => get_object(cluster, res, &ns, &name).map(|v| ok(&v)),
                (None, Method::PUT) => {
                    let body = body_json(request).await?;
                    replace(cluster, res, &ns, &name, body, false).map(|v| ok(&v))
                }
                (None, Method::PATCH) => {
                    let ct = content_type(request.headers());
                    let body = body_bytes(request).await?;
                    patch_object(cluster, res, &ns, &name, &ct, &body, false).map(|v| ok(&v))
                }
                (None, Method::DELETE) => {
                    let body = body_bytes(request).await?;
                    delete(cluster, res, &ns, &name, &body, &q).map(|v| ok(&v))
                }
                (Some("status"), Method::GET) if res.status_subresource => {
                    get_object(cluster, res, &ns, &name).map(|v| ok(&v))
                }
                (Some("status"), Method::PUT) if res.status_subresource => {
                    let body = body_json(request).await?;
                    replace(cluster, res, &ns, &name, body, true).map(|v| ok(&v))
                }
                (Some("status"), Method::PATCH) if res.status_subresource => {
                    let ct = content_type(request.headers());
                    let body = body_bytes(request).await?;
                    patch_object(cluster, res, &ns, &name, &ct, &body, true).map(|v| ok(&v))
                }
                (Some("scale"), _) if res.scale => scale(cluster, res, &ns, &name, request).await,
                (Some("exec"), Method::GET | Method::POST) if res.kind == "Pod" => {
                    Ok(exec::serve(cluster.clone(), &ns, &name, &q, request).await)
                }
                (Some("portforward"), Method::GET | Method::POST) if res.kind == "Pod" => {
                    Ok(portforward::serve(cluster.clone(), (&ns, &name), &q, request).await)
                }
                (Some("exec" | "portforward" | "status" | "scale"), _) => {
                    Err(status::method_not_allowed(""))
                }
                _ => Err(status::no_route()),
            }
        }
    }
}

fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

async fn body_bytes(request: Request) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(request.into_body(), 64 << 20)
        .await
        .map_err(|e| status::bad_request(format!("cannot read the body: {e}")))
}

async fn body_json(request: Request) -> Result<Value, ApiError> {
    let b = body_bytes(request).await?;
    serde_json::from_slice(&b)
        .map_err(|e| status::bad_request(format!("the body of the request is not valid JSON: {e}")))
}

fn check_namespace_exists(
    cluster: &Cluster,
    res: &Resource,
    ns: &str,
    method: &Method,
) -> Result<(), ApiError> {
    // NamespaceLifecycle admission refuses creates in a namespace that does not exist; reads
    // of an absent namespace are just empty.
    if res.namespaced
        && *method == Method::POST
        && cluster.store.get(&schema::NAMESPACES, "", ns).is_none()
    {
        return Err(status::not_found(&schema::NAMESPACES, ns));
    }
    Ok(())
}

fn get_object(
    cluster: &Cluster,
    res: &'static Resource,
    ns: &str,
    name: &str,
) -> Result<Value, ApiError> {
    cluster
        .store
        .get(res, ns, name)
        .ok_or_else(|| status::not_found(res, name))
}

/// The request's `labelSelector` and `fieldSelector` (each empty when absent).
fn selectors(
    res: &'static Resource,
    q: &[(String, String)],
) -> Result<(LabelSelector, FieldSelector), ApiError> {
    Ok((
        LabelSelector::parse(param(q, "labelSelector").unwrap_or(""))?,
        FieldSelector::parse(res, param(q, "fieldSelector").unwrap_or(""))?,
    ))
}

fn list(
    cluster: &Cluster,
    res: &'static Resource,
    ns: Option<&str>,
    q: &[(String, String)],
) -> Result<Response, ApiError> {
    let (labels, fields) = selectors(res, q)?;
    let (items, rev) = cluster.store.list(res, ns);
    let items: Vec<Value> = items
        .into_iter()
        .filter(|o| labels.matches(&o["metadata"]["labels"]) && fields.matches(o))
        .collect();
    Ok(ok(&json!({
        "apiVersion": res.api_version(),
        "kind": format!("{}List", res.kind),
        "metadata": {"resourceVersion": rev.to_string()},
        "items": items,
    })))
}

/// A watch: one JSON event per line (`{"type":…,"object":…}`), `ADDED`s of the current state
/// first unless a revision is given, ending after `timeoutSeconds` (default 1800, the
/// apiserver's minimum request timeout). A revision older than the history is `200` with one
/// `ERROR` event carrying the `410 Expired` Status (the cacher's behaviour), then the end.
fn watch_response(
    cluster: &Arc<Cluster>,
    res: &'static Resource,
    ns: Option<&str>,
    q: &[(String, String)],
) -> Result<Response, ApiError> {
    let (labels, fields) = selectors(res, q)?;
    let from = match param(q, "resourceVersion") {
        None | Some("") | Some("0") => From::Now,
        Some(v) => match v.parse::<u64>() {
            Ok(n) => From::After(n),
            Err(_) => {
                return Err(status::bad_request(format!(
                    "invalid resource version: {v:?}"
                )));
            }
        },
    };
    let timeout = param(q, "timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .unwrap_or(1800);
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(64);
    let line = |kind: &str, object: &Value| {
        let mut s = json!({"type": kind, "object": object}).to_string();
        s.push('\n');
        Bytes::from(s)
    };
    match cluster.watch(res, ns, from) {
        Err(e) => {
            let l = line("ERROR", &e.status());
            tokio::spawn(async move {
                let _ = tx.send(l).await;
            });
        }
        Ok(mut sub) => {
            let ns = ns.map(str::to_owned);
            let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
            tokio::spawn(async move {
                let matches =
                    |o: &Value| labels.matches(&o["metadata"]["labels"]) && fields.matches(o);
                let event = |c: &store::Change| -> Option<Bytes> {
                    let now = matches(&c.object);
                    let before = c.previous.as_ref().is_some_and(&matches);
                    let kind = match (c.kind, before, now) {
                        (ChangeKind::Added, _, true) => "ADDED",
                        (ChangeKind::Deleted, _, true) => "DELETED",
                        (ChangeKind::Modified, true, true) => "MODIFIED",
                        (ChangeKind::Modified, false, true) => "ADDED",
                        (ChangeKind::Modified, true, false) => "DELETED",
                        _ => return None,
                    };
                    Some(line(kind, &c.object))
                };
                for c in &sub.backlog {
                    if let Some(l) = event(c)
                        && tx.send(l).await.is_err()
                    {
                        return;
                    }
                }
                loop {
                    tokio::select! {
                        _ = tokio::time::sleep_until(deadline) => return,
                        _ = tx.closed() => return,
                        c = sub.live.recv() => match c {
                            Ok(c) => {
                                if c.res.group != res.group || c.res.plural != res.plural {
                                    continue;
                                }
                                if let Some(n) = &ns && &c.ns != n {
                                    continue;
                                }
                                if let Some(l) = event(&c)
                                    && tx.send(l).await.is_err()
                                {
                                    return;
                                }
                            }
                            // A watcher that falls behind is ended (the cacher does the same);
                            // the client watches again.
                            Err(_) => return,
                        }
                    }
                }
            });
        }
    }
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, std::io::Error>(b), rx))
    });
    let mut r = Response::new(Body::from_stream(stream));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    Ok(r)
}

/// Fills the system fields of a new object and stores it.
pub fn create(
    cluster: &Cluster,
    res: &'static Resource,
    ns: &str,
    mut obj: Value,
) -> Result<Value, ApiError> {
    if !obj.is_object() {
        return Err(status::bad_request("the body is not a JSON object"));
    }
    let want = res.api_version();
    if let Some(v) = obj["apiVersion"].as_str()
        && v != want
    {
        return Err(status::bad_request(format!(
            "the API version in the data ({v}) does not match the expected API version ({want})"
        )));
    }
    if let Some(k) = obj["kind"].as_str()
        && k != res.kind
    {
        return Err(status::bad_request(format!(
            "the kind in the data ({k}) does not match the expected kind ({})",
            res.kind
        )));
    }
    obj["apiVersion"] = json!(want);
    obj["kind"] = json!(res.kind);
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    let meta = &mut obj["metadata"];
    if res.namespaced {
        match meta["namespace"].as_str() {
            Some(n) if !n.is_empty() && n != ns => {
                return Err(status::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ));
            }
            _ => meta["namespace"] = json!(ns),
        }
    } else if let Some(m) = meta.as_object_mut() {
        m.remove("namespace");
    }
    let generated = meta["name"].as_str().is_none_or(str::is_empty);
    if generated {
        match meta["generateName"].as_str() {
            Some(prefix) if !prefix.is_empty() => {
                // `storage/names/generate.go`: the prefix cut to 58, then 5 characters.
                let base: String = prefix.chars().take(58).collect();
                meta["name"] = json!(format!("{base}{}", crate::names::suffix()));
            }
            _ => {
                return Err(status::invalid(
                    res,
                    "",
                    &[status::Cause {
                        reason: "FieldValueRequired",
                        field: "metadata.name".into(),
                        message: "Required value: name or generateName is required".into(),
                    }],
                ));
            }
        }
    }
    let m = meta.as_object_mut().expect("an object");
    for system in [
        "resourceVersion",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "managedFields",
        "selfLink",
    ] {
        m.remove(system);
    }
    m.insert("uid".into(), json!(crate::names::uuid()));
    m.insert("creationTimestamp".into(), json!(store::now()));
    if res.kind != "Namespace" {
        m.insert("generation".into(), json!(1));
    }
    if res.status_subresource {
        obj.as_object_mut().expect("an object").remove("status");
    }
    match res.kind {
        "Pod" => obj["status"] = json!({"phase": "Pending", "qosClass": "BestEffort"}),
        "Namespace" => obj["status"] = json!({"phase": "Active"}),
        "PersistentVolumeClaim" => {
            obj["status"] = json!({"phase": "Pending"});
            // plugin/pkg/admission/storage/storageobjectinuseprotection/admission.go
            let m = &mut obj["metadata"];
            let mut fin = m["finalizers"].as_array().cloned().unwrap_or_default();
            if !fin.iter().any(|f| f == crate::cluster::PVC_PROTECTION) {
                fin.push(json!(crate::cluster::PVC_PROTECTION));
            }
            m["finalizers"] = json!(fin);
        }
        _ => {}
    }
    schema::apply_defaults(res, &mut obj);
    let name = obj["metadata"]["name"].as_str().unwrap_or("").to_owned();
    let causes = schema::validate(res, &obj);
    if !causes.is_empty() {
        return Err(status::invalid(res, &name, &causes));
    }
    let mut attempt = obj;
    for _ in 0..8 {
        match cluster.store.create(res, ns, attempt.clone()) {
            Err(e) if e.code == 409 && generated => {
                let prefix = attempt["metadata"]["generateName"]
                    .as_str()
                    .unwrap_or("")
                    .to_owned();
                let base: String = prefix.chars().take(58).collect();
                attempt["metadata"]["name"] = json!(format!("{base}{}", crate::names::suffix()));
            }
            other => {
                let created = other?;
                cluster.kick();
                return Ok(created);
            }
        }
    }
    Err(status::internal("could not generate a unique name"))
}

/// Whether a write changes what moves `generation`: anything outside `metadata` and `status` for
/// a custom resource, the `spec` for a pod.
fn spec_changed(res: &Resource, old: &Value, new: &Value) -> bool {
    if res.kind == "Pod" {
        return old["spec"] != new["spec"];
    }
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.as_object_mut() {
            m.remove("metadata");
            m.remove("status");
        }
        v
    };
    strip(old) != strip(new)
}

/// Stores `new` over `old` as an update of the main resource (`status_only`: of the status
/// subresource), keeping what the client cannot change.
fn merge_update(res: &Resource, old: &Value, mut new: Value, status_only: bool) -> Value {
    if status_only {
        let mut out = old.clone();
        out["status"] = new["status"].take();
        return out;
    }
    let om = &old["metadata"];
    for system in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "namespace",
        "name",
    ] {
        if om[system].is_null() {
            if let Some(m) = new["metadata"].as_object_mut() {
                m.remove(system);
            }
        } else {
            new["metadata"][system] = om[system].clone();
        }
    }
    new["apiVersion"] = old["apiVersion"].clone();
    new["kind"] = old["kind"].clone();
    if res.status_subresource {
        new["status"] = old["status"].clone();
        if old["status"].is_null()
            && let Some(m) = new.as_object_mut()
        {
            m.remove("status");
        }
    }
    let g = old["metadata"]["generation"].as_i64().unwrap_or(1);
    if spec_changed(res, old, &new) && res.kind != "Namespace" {
        new["metadata"]["generation"] = json!(g + 1);
    }
    new
}

fn replace(
    cluster: &Cluster,
    res: &'static Resource,
    ns: &str,
    name: &str,
    body: Value,
    status_only: bool,
) -> Result<Value, ApiError> {
    if body["metadata"]["name"].as_str().is_some_and(|n| n != name) {
        return Err(status::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            body["metadata"]["name"].as_str().unwrap_or("")
        )));
    }
    let rv = body["metadata"]["resourceVersion"]
        .as_str()
        .map(str::to_owned);
    if rv.is_none() && res.is_custom() {
        // Custom resources: `AllowUnconditionalUpdate() == false`.
        return Err(status::invalid(
            res,
            name,
            &[status::Cause {
                reason: "FieldValueInvalid",
                field: "metadata.resourceVersion".into(),
                message: "Invalid value: 0x0: must be specified for an update".into(),
            }],
        ));
    }
    let updated = cluster.store.update(res, ns, name, |cur| {
        if let Some(rv) = &rv
            && cur["metadata"]["resourceVersion"].as_str() != Some(rv)
        {
            return Err(status::conflict(res, name));
        }
        replace_valid(res, name, cur, body, status_only)
    })?;
    cluster.kick();
    Ok(updated)
}

/// Replaces `cur` with `body` merged into it ([`merge_update`]), defaulted, if it is valid (422
/// with the causes otherwise).
fn replace_valid(
    res: &'static Resource,
    name: &str,
    cur: &mut Value,
    body: Value,
    status_only: bool,
) -> Result<(), ApiError> {
    let mut next = merge_update(res, cur, body, status_only);
    schema::apply_defaults(res, &mut next);
    let causes = schema::validate(res, &next);
    if !causes.is_empty() {
        return Err(status::invalid(res, name, &causes));
    }
    *cur = next;
    Ok(())
}

fn patch_object(
    cluster: &Cluster,
    res: &'static Resource,
    ns: &str,
    name: &str,
    content_type: &str,
    body: &[u8],
    status_only: bool,
) -> Result<Value, ApiError> {
    if !res.patch_types().contains(&content_type) {
        return Err(status::unsupported_patch(content_type, res.patch_types()));
    }
    if content_type == "application/apply-patch+yaml" {
        return Err(status::unsupported_patch(
            content_type,
            &res.patch_types()[..res.patch_types().len() - 1],
        ));
    }
    let p: Value = serde_json::from_slice(body)
        .map_err(|e| status::bad_request(format!("the patch is not valid JSON: {e}")))?;
    let updated = cluster.store.update(res, ns, name, |cur| {
        let mut doc = cur.clone();
        match content_type {
            "application/merge-patch+json" => patch::merge(&mut doc, &p),
            "application/strategic-merge-patch+json" => patch::strategic(&mut doc, &p),
            _ => patch::json_patch(&mut doc, &p)?,
        }
        // A patch that names a resourceVersion is a precondition.
        if let Some(rv) = doc["metadata"]["resourceVersion"].as_str()
            && Some(rv) != cur["metadata"]["resourceVersion"].as_str()
        {
            return Err(status::conflict(res, name));
        }
        replace_valid(res, name, cur, doc, status_only)
    })?;
    cluster.kick();
    Ok(updated)
}

async fn scale(
    cluster: &Cluster,
    res: &'static Resource,
    ns: &str,
    name: &str,
    request: Request,
) -> Result<Response, ApiError> {
    let method = request.method().clone();
    let ct = content_type(request.headers());
    let body = body_bytes(request).await?;
    let obj = get_object(cluster, res, ns, name)?;
    let view = |o: &Value| {
        json!({
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {"name": name, "namespace": ns, "uid": o["metadata"]["uid"],
                         "resourceVersion": o["metadata"]["resourceVersion"],
                         "creationTimestamp": o["metadata"]["creationTimestamp"]},
            "spec": {"replicas": o["spec"]["replicas"].as_i64().unwrap_or(0)},
            "status": {"replicas": o["status"]["replicas"].as_i64().unwrap_or(0),
                       "selector": o["status"]["selector"].as_str().unwrap_or("")},
        })
    };
    let mut scale = view(&obj);
    match method {
        Method::GET => return Ok(ok(&scale)),
        Method::PUT => {
            scale = serde_json::from_slice(&body)
                .map_err(|e| status::bad_request(format!("not JSON: {e}")))?;
        }
        Method::PATCH => {
            let p: Value = serde_json::from_slice(&body)
                .map_err(|e| status::bad_request(format!("not JSON: {e}")))?;
            match ct.as_str() {
                "application/json-patch+json" => patch::json_patch(&mut scale, &p)?,
                _ => patch::merge(&mut scale, &p),
            }
        }
        _ => return Err(status::method_not_allowed("")),
    }
    let replicas = scale["spec"]["replicas"].clone();
    let updated = cluster.store.update(res, ns, name, |cur| {
        if cur["spec"]["replicas"] != replicas {
            cur["spec"]["replicas"] = replicas;
            let g = cur["metadata"]["generation"].as_i64().unwrap_or(1);
            cur["metadata"]["generation"] = json!(g + 1);
        }
        let causes = schema::validate(res, cur);
        if causes.is_empty() {
            Ok(())
        } else {
            Err(status::invalid(res, name, &causes))
        }
    })?;
    cluster.kick();
    Ok(ok(&view(&updated)))
}

/// `DeleteOptions` (the body, or the query's `gracePeriodSeconds` and `propagationPolicy`).
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    /// Seconds of grace (pods).
    pub grace: Option<u64>,
    /// `Background` (default), `Foreground` or `Orphan`.
    pub propagation: String,
    /// `preconditions.uid`.
    pub uid: Option<String>,
    /// `preconditions.resourceVersion`.
    pub resource_version: Option<String>,
}

fn delete_options(body: &[u8], q: &[(String, String)]) -> Result<DeleteOptions, ApiError> {
    let v: Value = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        serde_json::from_slice(body)
            .map_err(|e| status::bad_request(format!("the DeleteOptions are not JSON: {e}")))?
    };
    let mut o = DeleteOptions {
        grace: v["gracePeriodSeconds"].as_u64(),
        propagation: v["propagationPolicy"].as_str().unwrap_or("").to_owned(),
        uid: v["preconditions"]["uid"].as_str().map(str::to_owned),
        resource_version: v["preconditions"]["resourceVersion"]
            .as_str()
            .map(str::to_owned),
    };
    if v["orphanDependents"].as_bool() == Some(true) && o.propagation.is_empty() {
        o.propagation = "Orphan".into();
    }
    if let Some(g) = param(q, "gracePeriodSeconds").and_then(|g| g.parse().ok()) {
        o.grace = Some(g);
    }
    if let Some(p) = param(q, "propagationPolicy") {
        o.propagation = p.to_owned();
    }
    if !matches!(
        o.propagation.as_str(),
        "" | "Background" | "Foreground" | "Orphan"
    ) {
        return Err(status::bad_request(format!(
            "propagationPolicy: Unsupported value: {:?}",
            o.propagation
        )));
    }
    Ok(o)
}

fn delete(
    cluster: &Cluster,
    res: &'static Resource,
    ns: &str,
    name: &str,
    body: &[u8],
    q: &[(String, String)],
) -> Result<Value, ApiError> {
    let options = delete_options(body, q)?;
    let cur = get_object(cluster, res, ns, name)?;
    // The preconditions, in the API server's order and words.
    for (label, field, want) in [
        ("UID", "uid", &options.uid),
        (
            "ResourceVersion",
            "resourceVersion",
            &options.resource_version,
        ),
    ] {
        let have = cur["metadata"][field].as_str();
        if let Some(want) = want
            && have != Some(want.as_str())
        {
            return Err(status::conflict_because(
                res,
                name,
                &format!(
                    "Precondition failed: {label} in precondition: {want}, {label} in object meta: {}",
                    have.unwrap_or("")
                ),
            ));
        }
    }
    let out = cluster.delete(res, ns, name, &options)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_decode_as_go_does() {
        let q = query("command=sh&command=-c&command=echo+hi%3B+exit+3&stdin=true&x");
        assert_eq!(q[2].1, "echo hi; exit 3");
        assert_eq!(q[4], ("x".to_owned(), String::new()));
        assert_eq!(query("a=%zz%4")[0].1, "%zz%4");
        assert_eq!(parse_bool("True"), Some(true));
        assert_eq!(parse_bool("yes"), None);
    }
}
