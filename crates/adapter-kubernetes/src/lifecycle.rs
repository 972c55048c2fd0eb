//! The lifecycle on the API server: create (a SandboxClaim, a Sandbox or a Pod) and wait for it
//! to be Ready with one watch, find a sandbox's pod, list, delete.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::BytesMut;
use execseam_adapter_kit::retry::{NoAnswer, Stage};
use execseam_adapter_kit::text::escape_path_segment;
use execseam_adapter_kit::vars::config_error;
use execseam_core::{
    Deadline, Error, ErrorKind, ListFilter, Retry, SandboxInfo, SandboxSpec, SandboxState,
};
use http_body_util::BodyExt;
use kube::core::Request;
use kube::core::params::{DeleteParams, GetParams, ListParams, PostParams, PropagationPolicy};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::PROVIDER;
use crate::client::{self, Api, adapter, no_answer, status_error};
use crate::config::Mode;
use crate::error::claim_failure;
use crate::exec::Target;
use crate::names;
use crate::wire::{
    self, Claim, EXTENSIONS_GROUP, List, MANAGED_BY, Pod, SANDBOX_GROUP, SandboxObject, VERSION,
    WatchEvent, condition,
};

/// The longest watch line read (one object).
const MAX_LINE: usize = 4 << 20;

/// The collection path of `plural` in `namespace`.
fn collection(mode_plural: &str, group: Option<&str>, namespace: &str) -> String {
    let ns = escape_path_segment(namespace);
    match group {
        Some(g) => format!("/apis/{g}/{VERSION}/namespaces/{ns}/{mode_plural}"),
        None => format!("/api/v1/namespaces/{ns}/{mode_plural}"),
    }
}

fn claims(ns: &str) -> Request {
    Request::new(collection("sandboxclaims", Some(EXTENSIONS_GROUP), ns))
}

fn sandboxes(ns: &str) -> Request {
    Request::new(collection("sandboxes", Some(SANDBOX_GROUP), ns))
}

fn templates(ns: &str) -> Request {
    Request::new(collection("sandboxtemplates", Some(EXTENSIONS_GROUP), ns))
}

fn pods(ns: &str) -> Request {
    Request::new(collection("pods", None, ns))
}

/// The collection `mode`'s sandboxes are in.
fn top(mode: Mode, ns: &str) -> Request {
    match mode {
        Mode::Claim => claims(ns),
        Mode::Sandbox => sandboxes(ns),
        Mode::Pod => pods(ns),
    }
}

fn built(
    r: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
    op: &'static str,
) -> Result<http::Request<Vec<u8>>, Error> {
    r.map_err(|e| adapter(ErrorKind::Internal, Retry::Never, op, e.to_string()))
}

/// A name the API server gave that is not one (an answer that is not what was asked for).
fn malformed(op: &'static str, what: String) -> Error {
    no_answer(NoAnswer::Malformed, op, Stage::Before, what)
}

fn not_found(op: &'static str, what: String) -> Error {
    adapter(ErrorKind::NotFound, Retry::Never, op, what)
}

/// A claim the controller has not bound to a sandbox yet: `Unavailable`, `Safe` (it may be soon).
fn not_bound(op: &'static str, id: &str) -> Error {
    adapter(
        ErrorKind::Unavailable,
        Retry::SAFE,
        op,
        format!("claim {id} is not bound to a sandbox yet"),
    )
}

/// An id that is not a Kubernetes name names no sandbox: `NotFound` before any request.
fn check_id(op: &'static str, id: &str) -> Result<(), Error> {
    if names::is_dns_subdomain(id) {
        return Ok(());
    }
    Err(not_found(
        op,
        format!("{id:?} is not a Kubernetes name: no such sandbox"),
    ))
}

/// One round of a poll waiting for the API server to report `what`: past `deadline` it is
/// `Timeout(Request)` (`Safe`: the polls change nothing), with `what` given the ready timeout in
/// seconds; otherwise a pause of `wait`, which doubles up to 1 s.
async fn next_poll(
    api: &Api,
    op: &'static str,
    deadline: Instant,
    wait: &mut Duration,
    what: impl FnOnce(u64) -> String,
) -> Result<(), Error> {
    if Instant::now() >= deadline {
        return Err(adapter(
            ErrorKind::Timeout(Deadline::Request),
            Retry::SAFE,
            op,
            what(api.config().ready_timeout.as_secs()),
        ));
    }
    client::pause(*wait, deadline).await;
    *wait = (*wait * 2).min(Duration::from_secs(1));
    Ok(())
}

/// The sandbox `id`'s pod. A claim that is not bound yet is `Unavailable` (`Safe`); anything
/// gone or being deleted is `NotFound`.
pub(crate) async fn resolve(api: &Api, mode: Mode, id: &str) -> Result<Target, Error> {
    let op = "resolve";
    check_id(op, id)?;
    let ns = api.namespace().await?;
    let container = api.config().container.clone();
    let pod = match mode {
        Mode::Pod => id.to_owned(),
        Mode::Sandbox => sandbox_pod(api, &ns, id, op).await?,
        Mode::Claim => {
            let claim: Claim = get(api, claims(&ns), id, op).await?;
            check_object(&claim.metadata, "claim", id, op)?;
            let bound = claim
                .status
                .sandbox
                .map(|s| s.name)
                .filter(|n| !n.is_empty())
                .ok_or_else(|| not_bound(op, id))?;
            if !names::is_dns_subdomain(&bound) {
                return Err(malformed(
                    op,
                    format!("claim {id} names the sandbox {bound:?}"),
                ));
            }
            sandbox_pod(api, &ns, &bound, op).await?
        }
    };
    // The pod itself: gone is NotFound; its UID tells a recreated pod from this one.
    let p: Pod = get(api, pods(&ns), &pod, op).await?;
    check_object(&p.metadata, "pod", &pod, op)?;
    Ok(Target {
        namespace: ns,
        pod,
        container,
        uid: p.metadata.uid,
    })
}

/// The answer for the `what` called `name`: it must name it (else it is malformed), and one
/// being deleted is `NotFound`.
fn check_object(meta: &wire::Meta, what: &str, name: &str, op: &'static str) -> Result<(), Error> {
    if meta.name != name {
        return Err(malformed(
            op,
            format!("the answer for {what} {name} names {:?}", meta.name),
        ));
    }
    if meta.deletion_timestamp.is_some() {
        return Err(not_found(op, format!("{what} {name} is being deleted")));
    }
    Ok(())
}

async fn sandbox_pod(api: &Api, ns: &str, name: &str, op: &'static str) -> Result<String, Error> {
    let sb: SandboxObject = get(api, sandboxes(ns), name, op).await?;
    if sb.metadata.name != name {
        return Err(malformed(
            op,
            format!("the answer for sandbox {name} names {:?}", sb.metadata.name),
        ));
    }
    let pod = sb.pod_name();
    if !names::is_dns_subdomain(pod) {
        return Err(malformed(
            op,
            format!("sandbox {name} names the pod {pod:?}"),
        ));
    }
    if sb.metadata.deletion_timestamp.is_some() {
        return Err(not_found(op, format!("sandbox {name} is being deleted")));
    }
    if sb.suspended() {
        return Err(paused(op));
    }
    Ok(sb.pod_name().to_owned())
}

/// A command or a connect on a suspended sandbox: it has no pod until it is resumed
/// (`WhilePaused::Refused`, never a wait and never an exit code).
pub(crate) fn paused(op: &'static str) -> Error {
    adapter(
        ErrorKind::Conflict,
        Retry::Never,
        op,
        "the sandbox is suspended (spec.operatingMode: Suspended): resume it first",
    )
    .with_sandbox_state(SandboxState::Paused)
}

async fn get<T: serde::de::DeserializeOwned>(
    api: &Api,
    collection: Request,
    name: &str,
    op: &'static str,
) -> Result<T, Error> {
    let req = built(collection.get(name, &GetParams::default()), op)?;
    api.json(req, op, Stage::Before).await
}

/// What waiting found in one state of the object.
enum Step {
    Ready,
    Wait,
}

/// Creates a sandbox as `mode` says; returns its id and pod once it is Ready. A failure after the
/// create deletes what was made (best effort).
pub(crate) async fn create(api: &Api, spec: &SandboxSpec) -> Result<(String, Target), Error> {
    let config = api.config();
    let mode = config.mode;
    let mut labels = config.labels.clone();
    labels.extend(spec.labels().clone());
    for (k, v) in &labels {
        names::check_label(k, v)
            .map_err(|m| adapter(ErrorKind::InvalidConfig, Retry::Never, "create", m))?;
    }
    labels.insert(MANAGED_BY.0.into(), MANAGED_BY.1.into());
    let ns = api.namespace().await?;
    let name = names::new_name();
    let body = match mode {
        Mode::Claim => claim_body(api, &name, labels, spec)?,
        Mode::Sandbox => sandbox_body(api, &ns, &name, labels, spec).await?,
        Mode::Pod => pod_body(api, &name, labels, spec).await?,
    };
    let op = "create";
    let body = serde_json::to_vec(&body)
        .map_err(|e| adapter(ErrorKind::Internal, Retry::Never, op, e.to_string()))?;
    let req = built(top(mode, &ns).create(&PostParams::default(), body), op)?;
    let answer = api.send(req, op, Stage::Submit, client::MAX_BODY).await?;
    if !(200..300).contains(&answer.status) {
        let e = status_error(&answer, op, Stage::Submit);
        return Err(match answer.status {
            404 => adapter(
                ErrorKind::NotFound,
                Retry::Never,
                op,
                format!(
                    "{} (is the namespace there{}?)",
                    e.message(),
                    if mode == Mode::Pod {
                        ""
                    } else {
                        ", and are the agent-sandbox CRDs installed (or use EXECSEAM_KUBERNETES_MODE=pod)"
                    }
                ),
            ),
            422 => adapter(
                ErrorKind::InvalidConfig,
                Retry::Never,
                op,
                e.message().to_owned(),
            ),
            _ => e,
        });
    }
    let created: wire::Meta =
        client::parse::<Value>(&answer.body, op, Stage::Submit).and_then(|v| {
            serde_json::from_value(v["metadata"].clone())
                .map_err(|e| no_answer(NoAnswer::Malformed, op, Stage::Submit, e.to_string()))
        })?;
    let deadline = Instant::now() + config.ready_timeout;
    match wait_ready(api, mode, &ns, &name, created.resource_version, deadline).await {
        Ok(target) => Ok((name, target)),
        Err(e) => {
            // Nothing is left behind by a create that failed.
            let cleanup = delete_object(api, mode, &ns, &name).await;
            let note = match cleanup {
                Ok(()) | Err(_) if e.kind() == ErrorKind::NotFound => "",
                Ok(()) => " (deleted again)",
                Err(_) => " (deleting it failed: it may be left behind)",
            };
            let message = format!("{}{note}", e.message());
            Err(Error::new(e.kind(), message)
                .with_retry(e.retry())
                .with_provider(PROVIDER)
                .with_operation(op))
        }
    }
}

/// Waits for an existing sandbox to be Ready (connect).
pub(crate) async fn connect(api: &Api, id: &str) -> Result<Target, Error> {
    let mode = api.config().mode;
    check_id("connect", id)?;
    let ns = api.namespace().await?;
    let deadline = Instant::now() + api.config().ready_timeout;
    wait_ready(api, mode, &ns, id, None, deadline).await
}

/// What a create starts from: the spec's image, else the configured `default` (a warm pool's or
/// a template's name), which must be a Kubernetes name.
fn image_or(spec: &SandboxSpec, default: &Option<String>, what: &str) -> Result<String, Error> {
    let name = spec
        .image()
        .map(str::to_owned)
        .or_else(|| default.clone())
        .unwrap_or_default();
    if !names::is_dns_label(&name) {
        return Err(adapter(
            ErrorKind::InvalidConfig,
            Retry::Never,
            "create",
            format!("{what} {name:?} is not a Kubernetes name"),
        ));
    }
    Ok(name)
}

fn claim_body(
    api: &Api,
    name: &str,
    labels: BTreeMap<String, String>,
    spec: &SandboxSpec,
) -> Result<Value, Error> {
    let config = api.config();
    let pool = image_or(spec, &config.warm_pool, "warm pool")?;
    let mut s = json!({"warmPoolRef": {"name": pool}});
    if !spec.env().is_empty() {
        // Injected by the claim controller into the sandbox's containers, as the template's
        // envVarsInjectionPolicy allows (the default, Disallowed, fails the claim with
        // EnvVarsInjectionRejected); a claim with env always starts cold.
        let env: Vec<Value> = spec
            .env()
            .iter()
            .map(|(k, v)| json!({"name": k, "value": v}))
            .collect();
        s["env"] = Value::Array(env);
    }
    if let Some(lifetime) = spec.lifetime() {
        s["lifecycle"] = json!({"shutdownTime": rfc3339_in(lifetime), "shutdownPolicy": "Delete"});
    }
    Ok(json!({
        "apiVersion": format!("{EXTENSIONS_GROUP}/{VERSION}"),
        "kind": "SandboxClaim",
        "metadata": {"name": name, "labels": labels},
        "spec": s,
    }))
}

/// A Sandbox copied from a template as the claim controller's cold path copies it
/// (`extensions/controllers/sandboxclaim_controller.go`): the blueprint, the env the template's
/// policy allows, the secure defaults (`ApplySandboxSecureDefaults`), the template's name in an
/// annotation and its hash in a label.
async fn sandbox_body(
    api: &Api,
    ns: &str,
    name: &str,
    mut labels: BTreeMap<String, String>,
    spec: &SandboxSpec,
) -> Result<Value, Error> {
    let op = "create";
    let config = api.config();
    let template_name = image_or(spec, &config.template, "template")?;
    let template: Value = get(api, templates(ns), &template_name, op)
        .await
        .map_err(|e| {
            if e.kind() == ErrorKind::NotFound {
                not_found(
                    op,
                    format!(
                        "SandboxTemplate {template_name:?} not found: {}",
                        e.message()
                    ),
                )
            } else {
                e
            }
        })?;
    let tspec = &template["spec"];
    let mut pod_template = tspec["podTemplate"].clone();
    if !pod_template.is_object() {
        return Err(adapter(
            ErrorKind::InvalidConfig,
            Retry::Never,
            op,
            format!("SandboxTemplate {template_name} has no spec.podTemplate"),
        ));
    }
    if !spec.env().is_empty() {
        let policy = tspec["envVarsInjectionPolicy"]
            .as_str()
            .unwrap_or("Disallowed");
        inject_env(
            &mut pod_template["spec"],
            spec.env(),
            policy,
            config.container.as_deref(),
        )?;
    }
    secure_defaults(&mut pod_template["spec"], tspec);
    labels.insert(
        "agents.x-k8s.io/sandbox-template-ref-hash".into(),
        names::fnv1a_hex(&template_name),
    );
    let mut s = json!({"podTemplate": pod_template});
    for field in ["volumeClaimTemplates", "service"] {
        if !tspec[field].is_null() {
            s[field] = tspec[field].clone();
        }
    }
    if let Some(lifetime) = spec.lifetime() {
        s["shutdownTime"] = json!(rfc3339_in(lifetime));
        s["shutdownPolicy"] = json!("Delete");
    }
    Ok(json!({
        "apiVersion": format!("{SANDBOX_GROUP}/{VERSION}"),
        "kind": "Sandbox",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {"agents.x-k8s.io/sandbox-template-ref": template_name},
        },
        "spec": s,
    }))
}

/// Sandbox-wide env into the pod's containers, as `envVarsInjectionPolicy` allows: `Allowed`
/// adds variables the container does not set, `Overrides` also replaces them, `Disallowed` (the
/// default) refuses.
fn inject_env(
    pod_spec: &mut Value,
    env: &BTreeMap<String, String>,
    policy: &str,
    container: Option<&str>,
) -> Result<(), Error> {
    let refuse = |m: String| Err(adapter(ErrorKind::Unsupported, Retry::Never, "create", m));
    if !matches!(policy, "Allowed" | "Overrides") {
        return refuse(format!(
            "the template's envVarsInjectionPolicy is {policy}: sandbox-wide env is refused"
        ));
    }
    let Some(containers) = pod_spec["containers"].as_array_mut() else {
        return refuse("the pod template has no containers".into());
    };
    for c in containers {
        if container.is_some_and(|n| c["name"].as_str() != Some(n)) {
            continue;
        }
        if !c["env"].is_array() {
            c["env"] = json!([]);
        }
        let list = c["env"].as_array_mut().expect("an array");
        for (k, v) in env {
            match list.iter_mut().find(|e| e["name"].as_str() == Some(k)) {
                Some(_) if policy == "Allowed" => {
                    return refuse(format!(
                        "the container sets {k} and the template's envVarsInjectionPolicy (Allowed) does not override"
                    ));
                }
                Some(e) => *e = json!({"name": k, "value": v}),
                None => list.push(json!({"name": k, "value": v})),
            }
        }
    }
    Ok(())
}

/// `ApplySandboxSecureDefaults`: no service-account token unless asked for; with managed
/// network policy and no policy or DNS setting of the template's own, public resolvers.
fn secure_defaults(pod_spec: &mut Value, template_spec: &Value) {
    if pod_spec["automountServiceAccountToken"].is_null() {
        pod_spec["automountServiceAccountToken"] = json!(false);
    }
    let managed = template_spec["networkPolicyManagement"]
        .as_str()
        .unwrap_or("Managed")
        == "Managed";
    if managed && template_spec["networkPolicy"].is_null() && pod_spec["dnsPolicy"].is_null() {
        pod_spec["dnsPolicy"] = json!("None");
        pod_spec["dnsConfig"] = json!({"nameservers": ["8.8.8.8", "1.1.1.1"]});
    }
}

/// A Pod from the configured manifest (or a one-container pod of the configured image that
/// sleeps until it is deleted).
async fn pod_body(
    api: &Api,
    name: &str,
    labels: BTreeMap<String, String>,
    spec: &SandboxSpec,
) -> Result<Value, Error> {
    let op = "create";
    let config = api.config();
    let mut pod = match &config.pod_template {
        Some(path) => {
            let text = tokio::fs::read_to_string(path).await.map_err(|e| {
                config_error(
                    PROVIDER,
                    format!("EXECSEAM_KUBERNETES_POD_TEMPLATE {}: {e}", path.display()),
                )
            })?;
            let v: Value = serde_saphyr::from_str(&text).map_err(|e| {
                config_error(
                    PROVIDER,
                    format!(
                        "EXECSEAM_KUBERNETES_POD_TEMPLATE {}: not a YAML or JSON manifest: {e}",
                        path.display()
                    ),
                )
            })?;
            if !v["spec"]["containers"].is_array() {
                return Err(config_error(
                    PROVIDER,
                    format!(
                        "EXECSEAM_KUBERNETES_POD_TEMPLATE {}: no spec.containers (want a Pod manifest)",
                        path.display()
                    ),
                ));
            }
            json!({"metadata": v["metadata"].clone(), "spec": v["spec"].clone()})
        }
        None => json!({
            "metadata": {},
            "spec": {
                "containers": [{
                    "name": "sandbox",
                    "image": "",
                    // PID 1 ignores SIGTERM unless it traps it: exit at once on delete.
                    "command": ["/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"],
                }],
                "restartPolicy": "Never",
                "automountServiceAccountToken": false,
                "terminationGracePeriodSeconds": 5,
            },
        }),
    };
    pod["apiVersion"] = json!("v1");
    pod["kind"] = json!("Pod");
    let meta = &mut pod["metadata"];
    if !meta.is_object() {
        *meta = json!({});
    }
    meta["name"] = json!(name);
    if let Some(m) = meta.as_object_mut() {
        m.remove("generateName");
        m.remove("namespace");
    }
    let mut all = meta["labels"].as_object().cloned().unwrap_or_default();
    for (k, v) in labels {
        all.insert(k, json!(v));
    }
    meta["labels"] = Value::Object(all);
    let image = spec
        .image()
        .map(str::to_owned)
        .or_else(|| config.image.clone());
    let containers = pod["spec"]["containers"]
        .as_array_mut()
        .filter(|c| !c.is_empty())
        .ok_or_else(|| config_error(PROVIDER, "the pod template has no containers"))?;
    let index = match config.container.as_deref() {
        Some(n) => containers
            .iter()
            .position(|c| c["name"].as_str() == Some(n))
            .ok_or_else(|| {
                config_error(PROVIDER, format!("the pod template has no container {n:?}"))
            })?,
        None => 0,
    };
    let c = &mut containers[index];
    if let Some(image) = image {
        c["image"] = json!(image);
    }
    if c["image"].as_str().is_none_or(str::is_empty) {
        return Err(config_error(
            PROVIDER,
            "no image: set EXECSEAM_KUBERNETES_IMAGE, give the spec an image, or use a pod template with one",
        ));
    }
    if !spec.env().is_empty() {
        if !c["env"].is_array() {
            c["env"] = json!([]);
        }
        let list = c["env"].as_array_mut().expect("an array");
        for (k, v) in spec.env() {
            list.retain(|e| e["name"].as_str() != Some(k));
            list.push(json!({"name": k, "value": v}));
        }
    }
    let mut resources = serde_json::Map::new();
    if let Some(m) = spec.cpu_millis() {
        resources.insert("cpu".into(), json!(format!("{m}m")));
    }
    if let Some(mib) = spec.memory_mib() {
        resources.insert("memory".into(), json!(format!("{mib}Mi")));
    }
    if !resources.is_empty() {
        c["resources"] = json!({"requests": resources.clone(), "limits": resources});
    }
    let _ = op;
    Ok(pod)
}

/// `now + d` as RFC 3339 in UTC, to the second (what the CRDs' `date-time` fields take).
fn rfc3339_in(d: Duration) -> String {
    use k8s_openapi::jiff::{SignedDuration, Timestamp};
    let secs = i64::try_from(d.as_secs()).unwrap_or(i64::MAX / 2);
    Timestamp::now()
        .checked_add(SignedDuration::from_secs(secs))
        .unwrap_or(Timestamp::MAX)
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Whether the object is Ready, a terminal failure, or to be waited for.
fn step(mode: Mode, object: &Value) -> Result<Step, Error> {
    let op = "create";
    let malformed =
        |e: serde_json::Error| no_answer(NoAnswer::Malformed, op, Stage::Before, e.to_string());
    match mode {
        Mode::Claim => {
            let c: Claim = serde_json::from_value(object.clone()).map_err(malformed)?;
            // The SDK treats WarmPoolNotFound on any condition as terminal.
            for cond in &c.status.conditions {
                if cond.reason.as_deref() == Some("WarmPoolNotFound")
                    && let Some(e) =
                        claim_failure("WarmPoolNotFound", cond.message.as_deref().unwrap_or(""))
                {
                    return Err(e);
                }
            }
            let ready = condition(&c.status.conditions, "Ready");
            // The claim copies its Sandbox's Ready condition (`computeReadyCondition` in
            // `extensions/controllers/sandboxclaim_controller.go`), a suspension included.
            if ready.is_some_and(|r| r.reason.as_deref() == Some("SandboxSuspended")) {
                return Err(paused(op));
            }
            if let Some(r) = ready
                && r.status == "False"
                && let Some(e) = claim_failure(
                    r.reason.as_deref().unwrap_or(""),
                    r.message.as_deref().unwrap_or(""),
                )
            {
                return Err(e);
            }
            let bound = c.status.sandbox.is_some_and(|s| !s.name.is_empty());
            Ok(if bound && ready.is_some_and(|r| r.status == "True") {
                Step::Ready
            } else {
                Step::Wait
            })
        }
        Mode::Sandbox => {
            let s: SandboxObject = serde_json::from_value(object.clone()).map_err(malformed)?;
            let ready = condition(&s.status.conditions, "Ready");
            if let Some(r) = ready
                && r.status == "False"
            {
                let reason = r.reason.as_deref().unwrap_or("");
                if reason == "SandboxSuspended" {
                    return Err(paused(op));
                }
                if let Some(e) = claim_failure(reason, r.message.as_deref().unwrap_or("")) {
                    return Err(e);
                }
            }
            Ok(if ready.is_some_and(|r| r.status == "True") {
                Step::Ready
            } else {
                Step::Wait
            })
        }
        Mode::Pod => {
            let p: Pod = serde_json::from_value(object.clone()).map_err(malformed)?;
            if let Some(phase @ ("Failed" | "Succeeded")) = p.status.phase.as_deref() {
                return Err(adapter(
                    ErrorKind::Internal,
                    Retry::Never,
                    op,
                    format!("the pod ended ({phase}) before it was ready"),
                ));
            }
            for cs in &p.status.container_statuses {
                if let Some(w) = cs.state.as_ref().and_then(|s| s.waiting.as_ref()) {
                    let reason = w.reason.as_deref().unwrap_or("");
                    if matches!(
                        reason,
                        "ErrImagePull"
                            | "ImagePullBackOff"
                            | "InvalidImageName"
                            | "CreateContainerConfigError"
                            | "CreateContainerError"
                    ) {
                        return Err(adapter(
                            ErrorKind::InvalidConfig,
                            Retry::Never,
                            op,
                            format!(
                                "container {} cannot start: {reason}: {}",
                                cs.name,
                                w.message.as_deref().unwrap_or("")
                            ),
                        ));
                    }
                }
            }
            let ready = p.status.phase.as_deref() == Some("Running")
                && condition(&p.status.conditions, "Ready").is_some_and(|r| r.status == "True");
            Ok(if ready { Step::Ready } else { Step::Wait })
        }
    }
}

/// Waits until the sandbox `name` is Ready (one watch on it, from `rv`, restarted on 410 or a
/// cut stream), then finds its pod.
async fn wait_ready(
    api: &Api,
    mode: Mode,
    ns: &str,
    name: &str,
    rv: Option<String>,
    deadline: Instant,
) -> Result<Target, Error> {
    let op = "wait";
    let collection = top(mode, ns);
    let mut rv = rv;
    let mut backoff = Duration::from_millis(100);
    loop {
        if Instant::now() >= deadline {
            return Err(adapter(
                ErrorKind::Timeout(Deadline::Request),
                Retry::Unsafe,
                "create",
                format!(
                    "{name} was not Ready within {} s (EXECSEAM_KUBERNETES_READY_TIMEOUT)",
                    api.config().ready_timeout.as_secs()
                ),
            ));
        }
        let from = match rv.take() {
            Some(v) => v,
            None => {
                let object: Value = get(api, top(mode, ns), name, op).await?;
                if let Step::Ready = step(mode, &object)? {
                    return found(api, mode, ns, name).await;
                }
                object["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap_or("0")
                    .to_owned()
            }
        };
        let remaining = deadline.saturating_duration_since(Instant::now());
        let params = kube::core::params::WatchParams {
            field_selector: Some(format!("metadata.name={name}")),
            timeout: Some(remaining.as_secs().clamp(1, 290) as u32),
            bookmarks: true,
            ..Default::default()
        };
        let req = built(collection.watch(&params, &from), op)?;
        let response = match api.open(req, op, Stage::Before).await {
            Ok(r) => r,
            Err(e) if e.retry().is_safe() => {
                client::pause(backoff, deadline).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
                rv = Some(from);
                continue;
            }
            Err(e) => return Err(e),
        };
        if !response.status().is_success() {
            let status = response.status().as_u16();
            let (parts, body) = response.into_parts();
            let body = client::read_error(body, api.config().request_timeout).await;
            if status == 410 {
                continue; // too old: start again from a fresh GET
            }
            let e = status_error(
                &client::Answer {
                    status,
                    headers: parts.headers,
                    body,
                },
                op,
                Stage::Before,
            );
            if e.retry().is_safe() {
                client::pause(backoff, deadline).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
                rv = Some(from);
                continue;
            }
            return Err(e);
        }
        let mut body = response.into_body();
        let mut buf = BytesMut::new();
        let mut last = from;
        let mut restart_fresh = false;
        'stream: loop {
            // Whole lines first.
            while let Some(i) = buf.iter().position(|b| *b == b'\n') {
                let line = buf.split_to(i + 1);
                let line = &line[..i];
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                let event: WatchEvent = client::parse(line, op, Stage::Before)?;
                match event.kind.as_str() {
                    "ADDED" | "MODIFIED" => {
                        if let Some(v) = event.object["metadata"]["resourceVersion"].as_str() {
                            last = v.to_owned();
                        }
                        if event.object["metadata"]["name"].as_str() != Some(name) {
                            continue;
                        }
                        if let Step::Ready = step(mode, &event.object)? {
                            return found(api, mode, ns, name).await;
                        }
                    }
                    "DELETED" if event.object["metadata"]["name"].as_str() == Some(name) => {
                        return Err(not_found(
                            "create",
                            format!("{name} was deleted while waiting for it to be Ready"),
                        ));
                    }
                    "BOOKMARK" => {
                        if let Some(v) = event.object["metadata"]["resourceVersion"].as_str() {
                            last = v.to_owned();
                        }
                    }
                    "ERROR" => {
                        let code = event.object["code"].as_u64();
                        if code == Some(410) {
                            restart_fresh = true;
                            break 'stream;
                        }
                        let s: wire::Status =
                            serde_json::from_value(event.object).unwrap_or_default();
                        return Err(adapter(
                            ErrorKind::Unavailable,
                            Retry::SAFE,
                            op,
                            format!("the watch failed: {}", s.describe()),
                        ));
                    }
                    _ => {}
                }
            }
            if buf.len() > MAX_LINE {
                return Err(adapter(
                    ErrorKind::Protocol,
                    Retry::SAFE,
                    op,
                    format!("a watch event is longer than {MAX_LINE} bytes"),
                ));
            }
            let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
                Err(_) => break 'stream,           // the deadline: reported at the top
                Ok(None) => break 'stream,         // the server's timeoutSeconds
                Ok(Some(Err(_))) => break 'stream, // cut: watch again from the last version
                Ok(Some(Ok(f))) => f,
            };
            if let Ok(data) = frame.into_data() {
                buf.extend_from_slice(&data);
            }
        }
        if !restart_fresh {
            rv = Some(last);
        }
    }
}

/// The pod of a Ready sandbox.
async fn found(api: &Api, mode: Mode, _ns: &str, name: &str) -> Result<Target, Error> {
    resolve(api, mode, name).await
}

/// Deletes the object that is the sandbox (background propagation: the garbage collector
/// deletes the claim's Sandbox and its Pod).
async fn delete_object(api: &Api, mode: Mode, ns: &str, name: &str) -> Result<(), Error> {
    let op = "destroy";
    let mut params = DeleteParams {
        propagation_policy: Some(PropagationPolicy::Background),
        ..DeleteParams::default()
    };
    if mode == Mode::Pod {
        params.grace_period_seconds = Some(0);
    }
    let req = built(top(mode, ns).delete(name, &params), op)?;
    let answer = api.send(req, op, Stage::Before, client::MAX_BODY).await?;
    if (200..300).contains(&answer.status) {
        return Ok(());
    }
    Err(status_error(&answer, op, Stage::Before))
}

/// Deletes sandbox `id` and waits (up to the ready timeout) for its pod to be gone, so that
/// nothing of it runs once this returns. An `id` that does not exist is `Err(NotFound)`.
pub(crate) async fn delete(
    api: &Api,
    mode: Mode,
    id: &str,
    pod: Option<String>,
) -> Result<(), Error> {
    let op = "destroy";
    check_id(op, id)?;
    let ns = api.namespace().await?;
    let pod = match pod {
        Some(p) => Some(p),
        None => match resolve(api, mode, id).await {
            Ok(t) => Some(t.pod),
            Err(e) if e.kind() == ErrorKind::Unavailable => None, // not bound: no pod yet
            Err(e) if e.kind() == ErrorKind::NotFound && mode == Mode::Claim => {
                // The claim may be there with its Sandbox gone: delete it all the same.
                None
            }
            Err(e) if e.kind() == ErrorKind::NotFound => return Err(e),
            Err(e) => return Err(e),
        },
    };
    delete_object(api, mode, &ns, id).await?;
    let Some(pod) = pod else {
        return Ok(());
    };
    let deadline = Instant::now() + api.config().ready_timeout;
    let mut wait = Duration::from_millis(20);
    loop {
        let req = built(pods(&ns).get(&pod, &GetParams::default()), op)?;
        let answer = api.send(req, op, Stage::Before, client::MAX_BODY).await?;
        match answer.status {
            404 => return Ok(()),
            200..=299 => {}
            _ => {
                let e = status_error(&answer, op, Stage::Before);
                if !e.retry().is_safe() {
                    return Err(e);
                }
            }
        }
        next_poll(api, op, deadline, &mut wait, |s| {
            format!("{id} is deleted, but its pod {pod} was still terminating after {s} s")
        })
        .await?;
    }
}

/// Sets `spec.operatingMode` on sandbox `id`'s Sandbox (a claim's bound one) with a merge patch,
/// then waits (up to the ready timeout) until the controller reports it: `Suspended` (the
/// condition `Suspended=True`: the pod is gone; the Sandbox, its volumes and its name stay) or
/// `Running` (`Ready=True`: a new pod, a new IP). Pod mode has no operating mode: `Unsupported`.
pub(crate) async fn set_operating_mode(
    api: &Api,
    mode: Mode,
    id: &str,
    suspended: bool,
) -> Result<(), Error> {
    let op = if suspended { "suspend" } else { "resume" };
    check_id(op, id)?;
    let ns = api.namespace().await?;
    let sandbox = match mode {
        Mode::Pod => {
            return Err(adapter(
                ErrorKind::Unsupported,
                Retry::Never,
                op,
                "a plain pod has no operating mode (agent-sandbox's spec.operatingMode)",
            ));
        }
        Mode::Sandbox => id.to_owned(),
        Mode::Claim => {
            let claim: Claim = get(api, claims(&ns), id, op).await?;
            claim
                .status
                .sandbox
                .map(|s| s.name)
                .filter(|n| names::is_dns_subdomain(n))
                .ok_or_else(|| not_bound(op, id))?
        }
    };
    let word = if suspended { "Suspended" } else { "Running" };
    let patch =
        kube::core::params::Patch::Merge(serde_json::json!({"spec": {"operatingMode": word}}));
    let req = built(
        sandboxes(&ns).patch(
            &sandbox,
            &kube::core::params::PatchParams::default(),
            &patch,
        ),
        op,
    )?;
    // Setting the mode twice is the same as once.
    let _: Value = api.json(req, op, Stage::Before).await?;
    let deadline = Instant::now() + api.config().ready_timeout;
    let mut wait = Duration::from_millis(50);
    loop {
        let s: SandboxObject = get(api, sandboxes(&ns), &sandbox, op).await?;
        let cond =
            |kind: &str| condition(&s.status.conditions, kind).is_some_and(|c| c.status == "True");
        if (suspended && cond("Suspended")) || (!suspended && cond("Ready")) {
            return Ok(());
        }
        next_poll(api, op, deadline, &mut wait, |s| {
            format!("sandbox {sandbox} did not report {word} within {s} s")
        })
        .await?;
    }
}

/// The sandboxes this adapter created that carry every label of `filter`.
pub(crate) async fn list(api: &Api, filter: &ListFilter) -> Result<Vec<SandboxInfo>, Error> {
    let op = "list";
    let mode = api.config().mode;
    let mut selector = vec![format!("{}={}", MANAGED_BY.0, MANAGED_BY.1)];
    for (k, v) in filter.labels() {
        names::check_label(k, v)
            .map_err(|m| adapter(ErrorKind::InvalidConfig, Retry::Never, op, m))?;
        selector.push(format!("{k}={v}"));
    }
    let ns = api.namespace().await?;
    let params = ListParams {
        label_selector: Some(selector.join(",")),
        ..ListParams::default()
    };
    let req = built(top(mode, &ns).list(&params), op)?;
    let list: List<Value> = api.json(req, op, Stage::Before).await?;
    let mut out = Vec::new();
    for item in list.items {
        let meta: wire::Meta = serde_json::from_value(item["metadata"].clone()).unwrap_or_default();
        if meta.name.is_empty() || meta.deletion_timestamp.is_some() {
            continue;
        }
        let (state, image) = match mode {
            Mode::Claim => {
                let c: Claim = serde_json::from_value(item).unwrap_or_default();
                let image = c.spec.warm_pool_ref.map(|p| p.name);
                (agent_state(&c.status.conditions), image)
            }
            Mode::Sandbox => {
                let s: SandboxObject = serde_json::from_value(item).unwrap_or_default();
                let image = meta
                    .annotations
                    .get("agents.x-k8s.io/sandbox-template-ref")
                    .cloned();
                (agent_state(&s.status.conditions), image)
            }
            Mode::Pod => {
                let image = item["spec"]["containers"][0]["image"]
                    .as_str()
                    .map(str::to_owned);
                let state = match item["status"]["phase"].as_str() {
                    Some("Pending") => SandboxState::Starting,
                    Some("Running") => SandboxState::Running,
                    Some("Succeeded" | "Failed") => SandboxState::Stopped,
                    _ => SandboxState::Unknown,
                };
                (state, image)
            }
        };
        let mut info = SandboxInfo::new(meta.name)
            .with_labels(meta.labels)
            .with_state(state);
        if let Some(i) = image {
            info = info.with_image(i);
        }
        if filter.matches(&info) {
            out.push(info);
        }
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(out)
}

/// A claim's or Sandbox's state from its `Ready` condition.
fn agent_state(conditions: &[wire::Condition]) -> SandboxState {
    match condition(conditions, "Ready") {
        Some(r) if r.status == "True" => SandboxState::Running,
        Some(r) if r.reason.as_deref() == Some("SandboxSuspended") => SandboxState::Paused,
        Some(r)
            if r.reason.as_deref().is_some_and(|x| {
                matches!(
                    x,
                    "DependenciesNotReady" | "SandboxNotReady" | "SandboxMissing"
                )
            }) =>
        {
            SandboxState::Starting
        }
        Some(r)
            if r.reason.as_deref().is_some_and(|x| {
                matches!(
                    x,
                    "SandboxExpired" | "ClaimExpired" | "PodSucceeded" | "PodFailed"
                )
            }) =>
        {
            SandboxState::Stopped
        }
        None => SandboxState::Starting,
        _ => SandboxState::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_injection_follows_the_policy() {
        let mut spec = json!({"containers": [{"name": "a", "env": [{"name": "X", "value": "0"}]}]});
        let env: BTreeMap<String, String> = [("X".to_owned(), "1".to_owned())].into();
        assert_eq!(
            inject_env(&mut spec.clone(), &env, "Disallowed", None)
                .unwrap_err()
                .kind(),
            ErrorKind::Unsupported
        );
        assert!(inject_env(&mut spec.clone(), &env, "Allowed", None).is_err());
        inject_env(&mut spec, &env, "Overrides", None).unwrap();
        assert_eq!(spec["containers"][0]["env"][0]["value"], "1");
    }

    #[test]
    fn secure_defaults_as_the_controller_applies_them() {
        let mut pod = json!({"containers": []});
        secure_defaults(&mut pod, &json!({}));
        assert_eq!(pod["automountServiceAccountToken"], false);
        assert_eq!(pod["dnsPolicy"], "None");
        let mut pod = json!({"automountServiceAccountToken": true, "dnsPolicy": "ClusterFirst"});
        secure_defaults(&mut pod, &json!({"networkPolicyManagement": "Unmanaged"}));
        assert_eq!(pod["automountServiceAccountToken"], true);
        assert_eq!(pod["dnsPolicy"], "ClusterFirst");
    }

    #[test]
    fn claim_steps() {
        let ready = json!({"metadata": {"name": "c"}, "status": {"sandbox": {"name": "p-x"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "DependenciesReady"}]}});
        assert!(matches!(step(Mode::Claim, &ready).unwrap(), Step::Ready));
        let waiting = json!({"metadata": {"name": "c"}, "status": {"conditions": [
            {"type": "Ready", "status": "False", "reason": "SandboxNotReady"}]}});
        assert!(matches!(step(Mode::Claim, &waiting).unwrap(), Step::Wait));
        let missing = json!({"metadata": {"name": "c"}, "status": {"conditions": [
            {"type": "Ready", "status": "False", "reason": "WarmPoolNotFound",
             "message": "SandboxWarmPool \"x\" not found"}]}});
        assert_eq!(
            step(Mode::Claim, &missing).err().unwrap().kind(),
            ErrorKind::NotFound
        );
        assert!(rfc3339_in(Duration::from_secs(60)).ends_with('Z'));
    }
}
