//! The agent-sandbox controllers, as far as a sandbox's lifecycle shows through the API
//! (kubernetes-sigs/agent-sandbox at `2fd412d`): `controllers/sandbox_controller.go` (a Sandbox
//! makes a Pod named after it; the `Ready` and `Suspended` conditions; suspend, resume,
//! expiry), `extensions/controllers/sandboxwarmpool_controller.go` (a pool keeps `replicas`
//! Sandboxes `<pool>-xxxxx`), `sandboxclaim_controller.go` (a claim adopts a Ready warm Sandbox,
//! which keeps its name, or starts a cold one named like the claim; `WarmPoolNotFound`,
//! `TemplateNotFound`, `EnvVarsInjectionRejected`; expiry) and `sandboxtemplate_controller.go`
//! (the template's hash label). Same condition types, reasons and messages, same labels,
//! annotations and FNV-1a hashes, same names.
//!
//! Each pass reconciles every object from the store (the emulator's scale is small); a pass runs
//! after every write through the API and every 250 ms (expiries, graceful deletes).
//!
//! A Sandbox's `volumeClaimTemplates` become PersistentVolumeClaims `<template>-<sandbox>`,
//! owned by the Sandbox and kept in either operating mode (`reconcilePVCs`), mounted by its pod
//! (`MergeVolumeClaimVolumes`): a suspend deletes the pod and keeps the claims, so their files
//! survive a resume. Not reproduced: the adoption of an existing unowned claim (the
//! `sandbox-adoptable` label), Services (`spec.service`), NetworkPolicies, events, the warm pool's readiness grace period and
//! `Recreate` strategy, the `sandbox-template-hash` label's exact value (Go's JSON of the
//! template, not reproducible byte for byte: the emulator hashes its own JSON).

use std::sync::Weak;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

use crate::api::{self, DeleteOptions};
use crate::cluster::Cluster;
use crate::names::name_hash;
use crate::schema::{self, CLAIMS, PODS, PVCS, SANDBOXES, TEMPLATES, WARM_POOLS};
use crate::store;

const SANDBOX_NAME_HASH: &str = "agents.x-k8s.io/sandbox-name-hash";
const WARM_POOL_LABEL: &str = "agents.x-k8s.io/warm-pool-sandbox";
const TEMPLATE_REF_HASH: &str = "agents.x-k8s.io/sandbox-template-ref-hash";
const TEMPLATE_HASH: &str = "agents.x-k8s.io/sandbox-template-hash";
const POD_TEMPLATE_HASH: &str = "agents.x-k8s.io/sandbox-pod-template-hash";
const CLAIM_UID: &str = "agents.x-k8s.io/claim-uid";
const LAUNCH_TYPE: &str = "agents.x-k8s.io/launch-type";
const CREATED_BY: &str = "agents.x-k8s.io/created-by";
const POD_NAME_ANN: &str = "agents.x-k8s.io/pod-name";
const TEMPLATE_REF_ANN: &str = "agents.x-k8s.io/sandbox-template-ref";
const SANDBOX_NAME_ANN: &str = "agents.x-k8s.io/sandbox-name";
/// The labels a Sandbox passes to its pod (the controller's extension labels).
const EXTENSION_LABELS: &[&str] = &[WARM_POOL_LABEL, TEMPLATE_REF_HASH, CLAIM_UID, CREATED_BY];
/// How long a claim waits for a warm member to get its IPs before it starts cold.
const ADOPTION_GRACE: Duration = Duration::from_secs(2);

/// Runs the controllers until the cluster is gone.
pub(crate) async fn run(cluster: Weak<Cluster>) {
    loop {
        let Some(c) = cluster.upgrade() else { return };
        // Passes until nothing changes (bounded), then sleep until a write or the tick.
        for _ in 0..8 {
            let before = c.store.revision();
            pass(&c);
            if c.store.revision() == before {
                break;
            }
        }
        tokio::select! {
            _ = c.wake.notified() => {}
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
        drop(c);
    }
}

fn pass(c: &Cluster) {
    crate::pods::reconcile(c);
    for t in c.store.list(&TEMPLATES, None).0 {
        reconcile_template(c, &t);
    }
    for p in c.store.list(&WARM_POOLS, None).0 {
        reconcile_pool(c, &p);
    }
    for cl in c.store.list(&CLAIMS, None).0 {
        reconcile_claim(c, &cl);
    }
    for s in c.store.list(&SANDBOXES, None).0 {
        reconcile_sandbox(c, &s);
    }
    c.finish_foreground();
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn meta<'a>(o: &'a Value, f: &str) -> &'a str {
    o["metadata"][f].as_str().unwrap_or("")
}

fn deleting(o: &Value) -> bool {
    !o["metadata"]["deletionTimestamp"].is_null()
}

fn controller_ref(o: &Value) -> Option<&Value> {
    o["metadata"]["ownerReferences"]
        .as_array()?
        .iter()
        .find(|r| r["controller"].as_bool() == Some(true))
}

fn owner_ref(kind: &str, api_version: &str, owner: &Value) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": kind,
        "name": meta(owner, "name"),
        "uid": meta(owner, "uid"),
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

/// A `metav1.Condition`; the transition time is kept when status, reason and message are
/// unchanged.
fn condition(
    old: &[Value],
    kind: &str,
    status: &str,
    reason: &str,
    message: &str,
    generation: i64,
) -> Value {
    let at = old
        .iter()
        .find(|c| {
            c["type"] == kind
                && c["status"] == status
                && c["reason"] == reason
                && c["message"] == message
        })
        .and_then(|c| c["lastTransitionTime"].as_str())
        .map(str::to_owned)
        .unwrap_or_else(store::now);
    json!({"type": kind, "status": status, "observedGeneration": generation,
           "lastTransitionTime": at, "reason": reason, "message": message})
}

fn conditions(o: &Value) -> Vec<Value> {
    o["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn find_condition<'a>(conds: &'a [Value], kind: &str) -> Option<&'a Value> {
    conds.iter().find(|c| c["type"] == kind)
}

/// Writes a status (only what changed makes a revision).
fn write_status(c: &Cluster, res: &'static schema::Resource, o: &Value, status: Value) {
    let _ = c
        .store
        .update(res, meta(o, "namespace"), meta(o, "name"), |v| {
            v["status"] = status;
            Ok(())
        });
}

fn past(time: &Value) -> bool {
    time.as_str()
        .and_then(store::parse_rfc3339)
        .is_some_and(|t| t <= now_secs())
}

/// Marks `o` not ready because it expired (`reason`, `message`), unless its status says so
/// already.
fn mark_expired(
    c: &Cluster,
    res: &'static schema::Resource,
    o: &Value,
    reason: &str,
    message: &str,
) {
    let generation = o["metadata"]["generation"].as_i64().unwrap_or(1);
    let ready = condition(
        &conditions(o),
        "Ready",
        "False",
        reason,
        message,
        generation,
    );
    let status = json!({"conditions": [ready]});
    if o["status"] != status {
        write_status(c, res, o, status);
    }
}

fn delete(c: &Cluster, res: &'static schema::Resource, o: &Value, propagation: &str) {
    let _ = c.delete(
        res,
        meta(o, "namespace"),
        meta(o, "name"),
        &DeleteOptions {
            propagation: propagation.into(),
            ..DeleteOptions::default()
        },
    );
}

// ---------------------------------------------------------------------------------------------
// Template

fn reconcile_template(c: &Cluster, t: &Value) {
    let hash = name_hash(meta(t, "name"));
    if t["metadata"]["labels"][TEMPLATE_REF_HASH].as_str() != Some(hash.as_str()) {
        let _ = c
            .store
            .update(&TEMPLATES, meta(t, "namespace"), meta(t, "name"), |v| {
                if !v["metadata"]["labels"].is_object() {
                    v["metadata"]["labels"] = json!({});
                }
                v["metadata"]["labels"][TEMPLATE_REF_HASH] = json!(hash);
                Ok(())
            });
    }
}

/// `ApplySandboxSecureDefaults`: no service-account token unless the template asks; with managed
/// network policy and neither a policy nor a DNS setting, public resolvers.
fn secure_defaults(template_spec: &Value, pod_spec: &mut Value) {
    if pod_spec["automountServiceAccountToken"].is_null() {
        pod_spec["automountServiceAccountToken"] = json!(false);
    }
    let managed = template_spec["networkPolicyManagement"].as_str() != Some("Unmanaged");
    if managed && template_spec["networkPolicy"].is_null() && pod_spec["dnsPolicy"].is_null() {
        pod_spec["dnsPolicy"] = json!("None");
        pod_spec["dnsConfig"] = json!({"nameservers": ["8.8.8.8", "1.1.1.1"]});
    }
}

/// A Sandbox spec from a template's blueprint.
fn blueprint(template: &Value) -> Value {
    let ts = &template["spec"];
    let mut pod_template = ts["podTemplate"].clone();
    secure_defaults(ts, &mut pod_template["spec"]);
    let mut spec = json!({"podTemplate": pod_template});
    for f in ["volumeClaimTemplates", "service"] {
        if !ts[f].is_null() {
            spec[f] = ts[f].clone();
        }
    }
    spec
}

// ---------------------------------------------------------------------------------------------
// Warm pool

fn pool_members(c: &Cluster, pool: &Value) -> Vec<Value> {
    let hash = name_hash(meta(pool, "name"));
    c.store
        .list(&SANDBOXES, Some(meta(pool, "namespace")))
        .0
        .into_iter()
        .filter(|s| {
            s["metadata"]["labels"][WARM_POOL_LABEL].as_str() == Some(hash.as_str())
                && controller_ref(s).is_some_and(|r| {
                    r["kind"] == "SandboxWarmPool" && r["uid"].as_str() == Some(meta(pool, "uid"))
                })
        })
        .collect()
}

fn sandbox_ready(s: &Value) -> bool {
    find_condition(&conditions(s), "Ready").is_some_and(|r| r["status"] == "True")
}

fn reconcile_pool(c: &Cluster, pool: &Value) {
    if deleting(pool) {
        return;
    }
    let ns = meta(pool, "namespace");
    let name = meta(pool, "name");
    let replicas = pool["spec"]["replicas"].as_u64().unwrap_or(1) as usize;
    let mut members: Vec<Value> = pool_members(c, pool)
        .into_iter()
        .filter(|s| !deleting(s))
        .collect();
    let template_name = pool["spec"]["sandboxTemplateRef"]["name"]
        .as_str()
        .unwrap_or("");
    if members.len() < replicas
        && let Some(template) = c.store.get(&TEMPLATES, ns, template_name)
    {
        let bp = blueprint(&template);
        let template_hash = name_hash(&bp.to_string());
        for _ in members.len()..replicas {
            let labels = json!({
                WARM_POOL_LABEL: name_hash(name),
                TEMPLATE_REF_HASH: name_hash(template_name),
                LAUNCH_TYPE: "warm",
                TEMPLATE_HASH: template_hash,
                POD_TEMPLATE_HASH: template_hash,
                CREATED_BY: "controller",
            });
            let body = json!({
                "apiVersion": SANDBOXES.api_version(),
                "kind": "Sandbox",
                "metadata": {
                    "generateName": format!("{name}-"),
                    "labels": labels,
                    "annotations": {TEMPLATE_REF_ANN: template_name},
                    "ownerReferences": [owner_ref("SandboxWarmPool", &WARM_POOLS.api_version(), pool)],
                },
                "spec": bp.clone(),
            });
            if let Ok(s) = api::create(c, &SANDBOXES, ns, body) {
                members.push(s);
            }
        }
    }
    if members.len() > replicas {
        // Scale down: the ones not ready first.
        members.sort_by_key(sandbox_ready);
        for s in members.drain(..members.len() - replicas) {
            delete(c, &SANDBOXES, &s, "Background");
        }
    }
    let ready = members.iter().filter(|s| sandbox_ready(s)).count();
    let status = json!({
        "replicas": members.len(),
        "readyReplicas": ready,
        "selector": format!("{WARM_POOL_LABEL}={}", name_hash(name)),
        "observedGeneration": pool["metadata"]["generation"].as_i64().unwrap_or(1),
    });
    if pool["status"] != status {
        write_status(c, &WARM_POOLS, pool, status);
    }
}

// ---------------------------------------------------------------------------------------------
// Claim

/// Why a claim has no sandbox.
struct Failure {
    reason: &'static str,
    message: String,
}

fn reconcile_claim(c: &Cluster, claim: &Value) {
    if deleting(claim) {
        return;
    }
    let generation = claim["metadata"]["generation"].as_i64().unwrap_or(1);
    let old = conditions(claim);
    let lifecycle = &claim["spec"]["lifecycle"];
    let bound = bound_sandbox(c, claim);
    if past(&lifecycle["shutdownTime"]) {
        let policy = lifecycle["shutdownPolicy"].as_str().unwrap_or("Retain");
        match policy {
            "Delete" => return delete(c, &CLAIMS, claim, "Background"),
            "DeleteForeground" => return delete(c, &CLAIMS, claim, "Foreground"),
            _ => {
                if let Some(s) = &bound {
                    delete(c, &SANDBOXES, s, "Background");
                }
                return mark_expired(
                    c,
                    &CLAIMS,
                    claim,
                    "ClaimExpired",
                    "Claim expired. Sandbox cleanup initiated.",
                );
            }
        }
    }
    let sandbox = match bound {
        Some(s) => Ok(s),
        None => bind(c, claim),
    };
    let (ready, sandbox_status) = match sandbox {
        Err(f) => (
            condition(&old, "Ready", "False", f.reason, &f.message, generation),
            Value::Null,
        ),
        Ok(s) => {
            let sconds = conditions(&s);
            let ready = match find_condition(&sconds, "Ready") {
                Some(r) if r["reason"] == "SandboxExpired" => condition(
                    &old,
                    "Ready",
                    "False",
                    "SandboxExpired",
                    "Underlying Sandbox resource has expired independently of the Claim.",
                    generation,
                ),
                // The Sandbox's Ready condition, as it is, with the claim's generation.
                Some(r) => {
                    let mut r = r.clone();
                    r["observedGeneration"] = json!(generation);
                    r
                }
                None => condition(
                    &old,
                    "Ready",
                    "False",
                    "SandboxNotReady",
                    "Sandbox is not ready",
                    generation,
                ),
            };
            let mut st = json!({"name": meta(&s, "name")});
            if let Some(ips) = s["status"]["podIPs"].as_array()
                && !ips.is_empty()
            {
                st["podIPs"] = json!(ips);
            }
            (ready, st)
        }
    };
    let mut status = json!({"conditions": [ready]});
    if !sandbox_status.is_null() {
        status["sandbox"] = sandbox_status;
    }
    if claim["status"] != status {
        write_status(c, &CLAIMS, claim, status);
    }
}

fn controlled_by(s: &Value, owner_uid: &str) -> bool {
    controller_ref(s).is_some_and(|r| r["uid"].as_str() == Some(owner_uid))
}

/// The Sandbox the claim already has (`status.sandbox.name`, the `sandbox-name` annotation, or
/// one named like the claim), if it is the claim's.
fn bound_sandbox(c: &Cluster, claim: &Value) -> Option<Value> {
    let ns = meta(claim, "namespace");
    let uid = meta(claim, "uid");
    let names = [
        claim["status"]["sandbox"]["name"].as_str(),
        claim["metadata"]["annotations"][SANDBOX_NAME_ANN].as_str(),
        Some(meta(claim, "name")),
    ];
    names
        .into_iter()
        .flatten()
        .filter(|n| !n.is_empty())
        .filter_map(|n| c.store.get(&SANDBOXES, ns, n))
        .find(|s| controlled_by(s, uid) && !deleting(s))
}

/// Adopts a warm Sandbox or makes a cold one (`getOrCreateSandbox`).
fn bind(c: &Cluster, claim: &Value) -> Result<Value, Failure> {
    let ns = meta(claim, "namespace");
    let name = meta(claim, "name");
    let uid = meta(claim, "uid");
    if let Some(s) = c.store.get(&SANDBOXES, ns, name)
        && !controlled_by(&s, uid)
    {
        return Err(Failure {
            reason: "ReconcilerError",
            message: format!(
                "Error seen: sandbox \"{name}\" is not controlled by claim \"{name}\". Please use a different claim name or delete the sandbox manually"
            ),
        });
    }
    let pool_name = claim["spec"]["warmPoolRef"]["name"].as_str().unwrap_or("");
    let spec = &claim["spec"];
    let forced_cold = spec["env"].as_array().is_some_and(|e| !e.is_empty())
        || spec["volumeClaimTemplates"]
            .as_array()
            .is_some_and(|v| !v.is_empty());
    let pool = c.store.get(&WARM_POOLS, ns, pool_name);
    if !forced_cold && let Some(pool) = &pool {
        let members = pool_members(c, pool);
        let ready: Vec<&Value> = members
            .iter()
            .filter(|s| {
                !deleting(s)
                    && sandbox_ready(s)
                    && s["status"]["podIPs"]
                        .as_array()
                        .is_some_and(|i| !i.is_empty())
            })
            .collect();
        if let Some(s) = ready.first() {
            return adopt(c, claim, s);
        }
        // Members still starting: wait for them a little before a cold start.
        let age = store::parse_rfc3339(meta(claim, "creationTimestamp"))
            .map(|t| now_secs().saturating_sub(t))
            .unwrap_or(0);
        if members.iter().any(|s| !deleting(s)) && Duration::from_secs(age) < ADOPTION_GRACE {
            return Err(Failure {
                reason: "SandboxMissing",
                message: "Sandbox does not exist".into(),
            });
        }
    }
    let Some(pool) = pool else {
        return Err(Failure {
            reason: "WarmPoolNotFound",
            message: format!("SandboxWarmPool \"{pool_name}\" not found"),
        });
    };
    let template_name = pool["spec"]["sandboxTemplateRef"]["name"]
        .as_str()
        .unwrap_or("");
    let Some(template) = c.store.get(&TEMPLATES, ns, template_name) else {
        return Err(Failure {
            reason: "TemplateNotFound",
            message: format!("SandboxTemplate \"{template_name}\" not found"),
        });
    };
    let mut bp = blueprint(&template);
    if let Some(env) = spec["env"].as_array().filter(|e| !e.is_empty()) {
        inject_env(&template, &mut bp, env)?;
    }
    if let Some(vct) = spec["volumeClaimTemplates"]
        .as_array()
        .filter(|v| !v.is_empty())
    {
        match template["spec"]["volumeClaimTemplatesPolicy"]
            .as_str()
            .unwrap_or("Disallowed")
        {
            "Disallowed" => {
                return Err(Failure {
                    reason: "VolumeClaimTemplatesError",
                    message: "volumeClaimTemplates are not allowed by the template's volumeClaimTemplatesPolicy".into(),
                });
            }
            _ => bp["volumeClaimTemplates"] = json!(vct),
        }
    }
    let mut pod_meta = bp["podTemplate"]["metadata"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    merge_additional(&mut pod_meta, &spec["additionalPodMetadata"]);
    bp["podTemplate"]["metadata"] = Value::Object(pod_meta);
    let mut labels = json!({
        CLAIM_UID: uid,
        LAUNCH_TYPE: "cold",
        TEMPLATE_REF_HASH: name_hash(template_name),
    });
    if let Some(by) = claim["metadata"]["labels"][CREATED_BY].as_str() {
        labels[CREATED_BY] = json!(by);
    }
    let body = json!({
        "apiVersion": SANDBOXES.api_version(),
        "kind": "Sandbox",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {TEMPLATE_REF_ANN: template_name},
            "ownerReferences": [owner_ref("SandboxClaim", &CLAIMS.api_version(), claim)],
        },
        "spec": bp,
    });
    match api::create(c, &SANDBOXES, ns, body) {
        Ok(s) => Ok(s),
        Err(e) if e.code == 409 => Err(Failure {
            reason: "SandboxCreatePending",
            message: "Sandbox already created; waiting for cache to converge".into(),
        }),
        Err(e) => Err(Failure {
            reason: "ReconcilerError",
            message: format!("Error seen: {}", e.message),
        }),
    }
}

fn merge_additional(pod_meta: &mut Map<String, Value>, additional: &Value) {
    for field in ["labels", "annotations"] {
        if let Some(extra) = additional[field].as_object() {
            let entry = pod_meta.entry(field).or_insert_with(|| json!({}));
            if let Some(m) = entry.as_object_mut() {
                for (k, v) in extra {
                    m.insert(k.clone(), v.clone());
                }
            }
        }
    }
}

/// The claim's env into the template's containers as `envVarsInjectionPolicy` allows.
fn inject_env(template: &Value, bp: &mut Value, env: &[Value]) -> Result<(), Failure> {
    let policy = template["spec"]["envVarsInjectionPolicy"]
        .as_str()
        .unwrap_or("Disallowed");
    let reject = |m: String| Failure {
        reason: "EnvVarsInjectionRejected",
        message: format!("environment variable injection rejected: {m}"),
    };
    if policy == "Disallowed" {
        return Err(reject(
            "the template's envVarsInjectionPolicy is Disallowed".into(),
        ));
    }
    let Some(containers) = bp["podTemplate"]["spec"]["containers"].as_array_mut() else {
        return Ok(());
    };
    for e in env {
        let target = e["containerName"].as_str();
        let k = e["name"].as_str().unwrap_or("");
        for ct in containers.iter_mut() {
            if target.is_some_and(|t| ct["name"].as_str() != Some(t)) {
                continue;
            }
            if !ct["env"].is_array() {
                ct["env"] = json!([]);
            }
            let list = ct["env"].as_array_mut().expect("an array");
            match list.iter_mut().find(|x| x["name"].as_str() == Some(k)) {
                Some(_) if policy == "Allowed" => {
                    return Err(reject(format!(
                        "variable {k} is set by the template and the policy (Allowed) does not allow overrides"
                    )));
                }
                Some(x) => *x = json!({"name": k, "value": e["value"]}),
                None => list.push(json!({"name": k, "value": e["value"]})),
            }
        }
    }
    Ok(())
}

/// Takes a warm Sandbox for the claim: the claim's annotation first (an optimistic write), then
/// the Sandbox: out of the pool (its pool labels dropped), owned by the claim, `pod-name` set to
/// its own name, the claim's UID labelled. It keeps its name.
fn adopt(c: &Cluster, claim: &Value, s: &Value) -> Result<Value, Failure> {
    let ns = meta(claim, "namespace");
    let sname = meta(s, "name").to_owned();
    let written = c.store.update(&CLAIMS, ns, meta(claim, "name"), |v| {
        if v["metadata"]["resourceVersion"] != claim["metadata"]["resourceVersion"] {
            return Err(crate::status::conflict(&CLAIMS, meta(claim, "name")));
        }
        if !v["metadata"]["annotations"].is_object() {
            v["metadata"]["annotations"] = json!({});
        }
        v["metadata"]["annotations"][SANDBOX_NAME_ANN] = json!(sname);
        Ok(())
    });
    if written.is_err() {
        return Err(Failure {
            reason: "AdoptionConflict",
            message: "the claim changed while adopting a warm sandbox; the next pass retries from a converged view".into(),
        });
    }
    let claim_ref = owner_ref("SandboxClaim", &CLAIMS.api_version(), claim);
    let additional = claim["spec"]["additionalPodMetadata"].clone();
    c.store
        .update(&SANDBOXES, ns, &sname, |v| {
            let labels = v["metadata"]["labels"].as_object_mut().expect("labels");
            for k in [WARM_POOL_LABEL, TEMPLATE_HASH, POD_TEMPLATE_HASH] {
                labels.remove(k);
            }
            labels.insert(LAUNCH_TYPE.into(), json!("warm"));
            labels.insert(CLAIM_UID.into(), json!(meta(claim, "uid")));
            v["metadata"]["ownerReferences"] = json!([claim_ref]);
            if !v["metadata"]["annotations"].is_object() {
                v["metadata"]["annotations"] = json!({});
            }
            v["metadata"]["annotations"][POD_NAME_ANN] = json!(sname);
            let mut pod_meta = v["spec"]["podTemplate"]["metadata"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            merge_additional(&mut pod_meta, &additional);
            if !pod_meta.is_empty() {
                v["spec"]["podTemplate"]["metadata"] = Value::Object(pod_meta);
            }
            Ok(())
        })
        .map_err(|e| Failure {
            reason: "ReconcilerError",
            message: format!("Error seen: {}", e.message),
        })
}

// ---------------------------------------------------------------------------------------------
// Sandbox

fn pod_name(s: &Value) -> String {
    s["metadata"]["annotations"][POD_NAME_ANN]
        .as_str()
        .filter(|n| !n.is_empty())
        .unwrap_or(meta(s, "name"))
        .to_owned()
}

fn reserved(key: &str) -> bool {
    key.starts_with("agents.x-k8s.io/") || key.starts_with("extensions.agents.x-k8s.io/")
}

/// A template's labels or annotations (an object, or nothing) without the reserved keys.
fn unreserved(m: &Value) -> Map<String, Value> {
    m.as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| !reserved(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// The labels the Sandbox's pod carries: its template's (minus reserved keys), the name hash,
/// the extension labels.
fn pod_labels(s: &Value) -> Map<String, Value> {
    let mut labels = unreserved(&s["spec"]["podTemplate"]["metadata"]["labels"]);
    labels.insert(SANDBOX_NAME_HASH.into(), json!(name_hash(meta(s, "name"))));
    for k in EXTENSION_LABELS {
        if let Some(v) = s["metadata"]["labels"][*k].as_str() {
            labels.insert((*k).into(), json!(v));
        }
    }
    labels
}

fn reconcile_sandbox(c: &Cluster, s: &Value) {
    if deleting(s) {
        return;
    }
    let ns = meta(s, "namespace");
    let uid = meta(s, "uid");
    let generation = s["metadata"]["generation"].as_i64().unwrap_or(1);
    let old = conditions(s);
    let pname = pod_name(s);
    let pod = c
        .store
        .get(&PODS, ns, &pname)
        .filter(|p| controlled_by(p, uid));
    let selector = format!("{SANDBOX_NAME_HASH}={}", name_hash(meta(s, "name")));
    if past(&s["spec"]["shutdownTime"]) {
        if let Some(p) = &pod {
            delete(c, &PODS, p, "Background");
        }
        if s["spec"]["shutdownPolicy"].as_str() == Some("Delete") {
            return delete(c, &SANDBOXES, s, "Background");
        }
        return mark_expired(c, &SANDBOXES, s, "SandboxExpired", "Sandbox has expired");
    }
    reconcile_pvcs(c, s);
    let suspended = s["spec"]["operatingMode"].as_str() == Some("Suspended");
    let (ready, suspended_cond, pod_for_status) = if suspended {
        match &pod {
            Some(p) => {
                if !deleting(p) {
                    delete(c, &PODS, p, "Background");
                }
                (
                    condition(
                        &old,
                        "Ready",
                        "False",
                        "SandboxSuspended",
                        "Sandbox is suspending",
                        generation,
                    ),
                    condition(
                        &old,
                        "Suspended",
                        "False",
                        "PodTerminating",
                        "Pod is terminating",
                        generation,
                    ),
                    None,
                )
            }
            None => {
                if s["metadata"]["annotations"][POD_NAME_ANN].is_string() {
                    let _ = c.store.update(&SANDBOXES, ns, meta(s, "name"), |v| {
                        if let Some(a) = v["metadata"]["annotations"].as_object_mut() {
                            a.remove(POD_NAME_ANN);
                        }
                        Ok(())
                    });
                }
                (
                    condition(
                        &old,
                        "Ready",
                        "False",
                        "SandboxSuspended",
                        "Sandbox is suspended",
                        generation,
                    ),
                    condition(
                        &old,
                        "Suspended",
                        "True",
                        "PodTerminated",
                        "Pod has been terminated. Sandbox is suspended",
                        generation,
                    ),
                    None,
                )
            }
        }
    } else {
        let pod = match pod {
            Some(p) => {
                sync_pod_labels(c, s, &p);
                Some(p)
            }
            None if c.store.get(&PODS, ns, &pname).is_some() => None,
            None => create_pod(c, s, &pname).ok(),
        };
        let not_suspended = condition(
            &old,
            "Suspended",
            "False",
            "NotSuspended",
            "Sandbox is not suspended",
            generation,
        );
        // A pod being deleted counts as none.
        let ready = match pod.as_ref().filter(|p| !deleting(p)) {
            None => condition(
                &old,
                "Ready",
                "False",
                "DependenciesNotReady",
                "Pod does not exist",
                generation,
            ),
            Some(p) => {
                let phase = p["status"]["phase"].as_str().unwrap_or("Pending");
                let pod_ready = p["status"]["conditions"].as_array().is_some_and(|cs| {
                    cs.iter()
                        .any(|x| x["type"] == "Ready" && x["status"] == "True")
                });
                let has_ip = p["status"]["podIPs"]
                    .as_array()
                    .is_some_and(|i| !i.is_empty());
                match (phase, pod_ready, has_ip) {
                    ("Running", true, true) => condition(
                        &old,
                        "Ready",
                        "True",
                        "DependenciesReady",
                        "Pod is Ready",
                        generation,
                    ),
                    ("Running", true, false) => condition(
                        &old,
                        "Ready",
                        "False",
                        "DependenciesNotReady",
                        "Pod is Ready but has no podIPs yet",
                        generation,
                    ),
                    ("Running", false, _) => condition(
                        &old,
                        "Ready",
                        "False",
                        "DependenciesNotReady",
                        "Pod is Running but not Ready",
                        generation,
                    ),
                    ("Succeeded", _, _) => condition(
                        &old,
                        "Ready",
                        "False",
                        "PodSucceeded",
                        "Pod has succeeded",
                        generation,
                    ),
                    ("Failed", _, _) => condition(
                        &old,
                        "Ready",
                        "False",
                        "PodFailed",
                        "Pod has failed",
                        generation,
                    ),
                    (phase, _, _) => condition(
                        &old,
                        "Ready",
                        "False",
                        "DependenciesNotReady",
                        &format!("Pod exists with phase: {phase}"),
                        generation,
                    ),
                }
            }
        };
        (ready, not_suspended, pod)
    };
    let mut status = json!({
        "conditions": [ready, suspended_cond],
        "selector": selector,
    });
    if let Some(p) = pod_for_status.filter(|p| !deleting(p)) {
        let ips: Vec<Value> = p["status"]["podIPs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| i["ip"].as_str().map(|s| json!(s)))
            .collect();
        if !ips.is_empty() {
            status["podIPs"] = json!(ips);
        }
        if let Some(n) = p["spec"]["nodeName"].as_str() {
            status["nodeName"] = json!(n);
        }
        let scheduled = p["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|x| x["type"] == "PodScheduled").cloned());
        if let Some(sc) = scheduled {
            let cond = condition(
                &old,
                "PodScheduled",
                sc["status"].as_str().unwrap_or("True"),
                "PodScheduled",
                "",
                generation,
            );
            status["conditions"]
                .as_array_mut()
                .expect("an array")
                .push(cond);
        }
    }
    if s["status"] != status {
        write_status(c, &SANDBOXES, s, status);
    }
}

fn sync_pod_labels(c: &Cluster, s: &Value, pod: &Value) {
    let want = pod_labels(s);
    let have = pod["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let mut next = have.clone();
    for k in EXTENSION_LABELS {
        next.remove(*k);
    }
    for (k, v) in want {
        next.insert(k, v);
    }
    if next != have {
        let _ = c
            .store
            .update(&PODS, meta(pod, "namespace"), meta(pod, "name"), |v| {
                v["metadata"]["labels"] = Value::Object(next);
                Ok(())
            });
    }
}

/// `reconcilePVCs` (sandbox_controller.go at `2fd412d`), in either operating mode: each
/// `volumeClaimTemplates` entry is a claim `<template>-<sandbox>` with the template's labels,
/// the sandbox's name-hash label, its annotations and spec, controlled by the Sandbox (so the
/// garbage collector deletes it with the Sandbox). One that exists is left alone (the
/// controller's ownership checks only fail the reconcile: the pod is made either way).
fn reconcile_pvcs(c: &Cluster, s: &Value) {
    let ns = meta(s, "namespace");
    for t in s["spec"]["volumeClaimTemplates"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let name = format!(
            "{}-{}",
            t["metadata"]["name"].as_str().unwrap_or(""),
            meta(s, "name")
        );
        if c.store.get(&PVCS, ns, &name).is_some() {
            continue;
        }
        let mut labels = t["metadata"]["labels"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        labels.insert(SANDBOX_NAME_HASH.into(), json!(name_hash(meta(s, "name"))));
        let body = json!({
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {
                "name": name,
                "labels": labels,
                "annotations": t["metadata"]["annotations"].as_object().cloned().unwrap_or_default(),
                "ownerReferences": [owner_ref("Sandbox", &SANDBOXES.api_version(), s)],
            },
            "spec": t["spec"].clone(),
        });
        let _ = api::create(c, &PVCS, ns, body);
    }
}

/// The pod spec's volumes with one `persistentVolumeClaim` volume per `volumeClaimTemplates`
/// entry, replacing a volume of the same name (`MergeVolumeClaimVolumes`: StatefulSet's rule).
fn merge_claim_volumes(s: &Value, pod_spec: &mut Value) {
    let Some(templates) = s["spec"]["volumeClaimTemplates"].as_array() else {
        return;
    };
    let names: Vec<&str> = templates
        .iter()
        .filter_map(|t| t["metadata"]["name"].as_str())
        .collect();
    let mut volumes: Vec<Value> = pod_spec["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| !v["name"].as_str().is_some_and(|n| names.contains(&n)))
        .cloned()
        .collect();
    for n in names {
        volumes.push(json!({"name": n, "persistentVolumeClaim": {"claimName": format!("{n}-{}", meta(s, "name"))}}));
    }
    pod_spec["volumes"] = json!(volumes);
}

fn create_pod(c: &Cluster, s: &Value, name: &str) -> Result<Value, crate::status::ApiError> {
    let template = &s["spec"]["podTemplate"];
    let annotations = unreserved(&template["metadata"]["annotations"]);
    let mut body = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": pod_labels(s),
            "annotations": annotations,
            "ownerReferences": [owner_ref("Sandbox", &SANDBOXES.api_version(), s)],
        },
        "spec": template["spec"].clone(),
    });
    merge_claim_volumes(s, &mut body["spec"]);
    api::create(c, &PODS, meta(s, "namespace"), body)
}
