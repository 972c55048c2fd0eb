//! The resources this API server serves, their defaults and validation, and the discovery
//! documents.
//!
//! The agent-sandbox kinds follow their CRDs (`k8s/crds/*.yaml` of kubernetes-sigs/agent-sandbox
//! at `2fd412d`, the `v1beta1` version: the official Python SDK 1.0.8 uses only it): the
//! structural defaults (`operatingMode: Running`, `shutdownPolicy: Retain`, a pool's
//! `replicas: 1` and `updateStrategy.type: OnReplenish`, a template's `envVarsInjectionPolicy:
//! Disallowed`, `networkPolicyManagement: Managed`, `volumeClaimTemplatesPolicy: Disallowed`,
//! `ports[].protocol: TCP`), the required fields and the enums. Discovery follows
//! `apiserver/pkg/endpoints/installer.go` (sorted verbs; `singularName` on every entry, empty on
//! subresources) and `discovery.go`.

use serde_json::{Value, json};

use crate::status::Cause;

/// One resource type.
#[derive(Debug, PartialEq, Eq)]
pub struct Resource {
    /// The API group (`""` for the core group).
    pub group: &'static str,
    /// The version.
    pub version: &'static str,
    /// The plural (the path segment).
    pub plural: &'static str,
    /// The singular.
    pub singular: &'static str,
    /// The kind.
    pub kind: &'static str,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Short names.
    pub short_names: &'static [&'static str],
    /// Categories.
    pub categories: &'static [&'static str],
    /// Has a `status` subresource (a main write keeps the stored status).
    pub status_subresource: bool,
    /// Has a `scale` subresource.
    pub scale: bool,
}

const CRUD: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

impl Resource {
    /// `<plural>.<group>` (or the plural alone for the core group), as errors name it.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_owned()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// `<group>/<version>` (or the version alone).
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// A custom resource (agent-sandbox), not a built-in.
    pub fn is_custom(&self) -> bool {
        self.group.ends_with("agents.x-k8s.io")
    }

    /// The patch types this resource takes (custom resources: no strategic merge).
    pub fn patch_types(&self) -> &'static [&'static str] {
        if self.is_custom() {
            &[
                "application/json-patch+json",
                "application/merge-patch+json",
                "application/apply-patch+yaml",
            ]
        } else {
            &[
                "application/json-patch+json",
                "application/merge-patch+json",
                "application/strategic-merge-patch+json",
                "application/apply-patch+yaml",
            ]
        }
    }

    /// The `APIResource` entries (the resource and its subresources), for discovery.
    fn discovery(&self) -> Vec<Value> {
        let mut main = json!({
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": CRUD,
        });
        if !self.short_names.is_empty() {
            main["shortNames"] = json!(self.short_names);
        }
        if !self.categories.is_empty() {
            main["categories"] = json!(self.categories);
        }
        if self.plural == "namespaces" {
            main["verbs"] = json!([
                "create", "delete", "get", "list", "patch", "update", "watch"
            ]);
        }
        let sub = |name: &str, kind: &str, verbs: &[&str]| {
            json!({"name": format!("{}/{name}", self.plural), "singularName": "",
                   "namespaced": self.namespaced, "kind": kind, "verbs": verbs})
        };
        let mut out = vec![main];
        if self.status_subresource {
            out.push(sub("status", self.kind, &["get", "patch", "update"]));
        }
        if self.scale {
            let mut s = sub("scale", "Scale", &["get", "patch", "update"]);
            s["group"] = json!("autoscaling");
            s["version"] = json!("v1");
            out.push(s);
        }
        if self.plural == "pods" {
            out.push(sub("exec", "PodExecOptions", &["create", "get"]));
            out.push(sub("log", "Pod", &["get"]));
            out.push(sub(
                "portforward",
                "PodPortForwardOptions",
                &["create", "get"],
            ));
        }
        out
    }
}

/// `pods` (core v1).
pub static PODS: Resource = Resource {
    group: "",
    version: "v1",
    plural: "pods",
    singular: "pod",
    kind: "Pod",
    namespaced: true,
    short_names: &["po"],
    categories: &["all"],
    status_subresource: true,
    scale: false,
};

/// `namespaces` (core v1, cluster-scoped).
pub static NAMESPACES: Resource = Resource {
    group: "",
    version: "v1",
    plural: "namespaces",
    singular: "namespace",
    kind: "Namespace",
    namespaced: false,
    short_names: &["ns"],
    categories: &[],
    status_subresource: true,
    scale: false,
};

/// `persistentvolumeclaims` (core v1): what a Sandbox's `volumeClaimTemplates` become.
pub static PVCS: Resource = Resource {
    group: "",
    version: "v1",
    plural: "persistentvolumeclaims",
    singular: "persistentvolumeclaim",
    kind: "PersistentVolumeClaim",
    namespaced: true,
    short_names: &["pvc"],
    categories: &[],
    status_subresource: true,
    scale: false,
};

/// `sandboxes.agents.x-k8s.io`.
pub static SANDBOXES: Resource = Resource {
    group: "agents.x-k8s.io",
    version: "v1beta1",
    plural: "sandboxes",
    singular: "sandbox",
    kind: "Sandbox",
    namespaced: true,
    short_names: &["sandbox"],
    categories: &[],
    status_subresource: true,
    scale: false,
};

/// `sandboxtemplates.extensions.agents.x-k8s.io`.
pub static TEMPLATES: Resource = Resource {
    group: "extensions.agents.x-k8s.io",
    version: "v1beta1",
    plural: "sandboxtemplates",
    singular: "sandboxtemplate",
    kind: "SandboxTemplate",
    namespaced: true,
    short_names: &["sandboxtemplate"],
    categories: &[],
    status_subresource: false,
    scale: false,
};

/// `sandboxwarmpools.extensions.agents.x-k8s.io`.
pub static WARM_POOLS: Resource = Resource {
    group: "extensions.agents.x-k8s.io",
    version: "v1beta1",
    plural: "sandboxwarmpools",
    singular: "sandboxwarmpool",
    kind: "SandboxWarmPool",
    namespaced: true,
    short_names: &["swp"],
    categories: &[],
    status_subresource: true,
    scale: true,
};

/// `sandboxclaims.extensions.agents.x-k8s.io`.
pub static CLAIMS: Resource = Resource {
    group: "extensions.agents.x-k8s.io",
    version: "v1beta1",
    plural: "sandboxclaims",
    singular: "sandboxclaim",
    kind: "SandboxClaim",
    namespaced: true,
    short_names: &["sandboxclaim"],
    categories: &[],
    status_subresource: true,
    scale: false,
};

/// Every resource served.
pub static ALL: &[&Resource] = &[
    &PODS,
    &NAMESPACES,
    &PVCS,
    &SANDBOXES,
    &TEMPLATES,
    &WARM_POOLS,
    &CLAIMS,
];

/// The resource at `group/version/plural`.
pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static Resource> {
    ALL.iter()
        .copied()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The version the emulator reports (`/version`): the API of Kubernetes 1.32, the oldest the
/// Rust client's k8s-openapi feature targets; the build metadata says what it is.
pub fn version_info() -> Value {
    json!({
        "major": "1",
        "minor": "32",
        "emulationMajor": "1",
        "emulationMinor": "32",
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "31",
        "gitVersion": "v1.32.0+execseam",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.23.4",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// `/api`: `APIVersions` (with `serverAddressByClientCIDRs`, which the Python model requires).
pub fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

/// The `APIResourceList` of `group/version`, if served.
pub fn resource_list(group: &str, version: &str) -> Option<Value> {
    let resources: Vec<Value> = ALL
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .flat_map(|r| r.discovery())
        .collect();
    if resources.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

fn groups() -> Vec<&'static str> {
    let mut g: Vec<&str> = ALL
        .iter()
        .map(|r| r.group)
        .filter(|g| !g.is_empty())
        .collect();
    g.dedup();
    g
}

/// One `APIGroup`.
pub fn group(name: &str) -> Option<Value> {
    if !groups().contains(&name) {
        return None;
    }
    let gv = json!({"groupVersion": format!("{name}/v1beta1"), "version": "v1beta1"});
    Some(json!({
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": name,
        "versions": [gv],
        "preferredVersion": gv,
    }))
}

/// `/apis`: `APIGroupList`.
pub fn group_list() -> Value {
    let groups: Vec<Value> = groups()
        .into_iter()
        .filter_map(group)
        .map(|mut g| {
            let m = g.as_object_mut().expect("an object");
            m.remove("kind");
            m.remove("apiVersion");
            g
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

// ---------------------------------------------------------------------------------------------
// Defaults and validation

fn default_field(obj: &mut Value, field: &str, value: Value) {
    if let Some(m) = obj.as_object_mut()
        && m.get(field).is_none_or(Value::is_null)
    {
        m.insert(field.to_owned(), value);
    }
}

/// Applies the structural defaults of `res`'s schema to a create or update body.
pub fn apply_defaults(res: &Resource, obj: &mut Value) {
    let spec = &mut obj["spec"];
    match res.kind {
        "Sandbox" if spec.is_object() => {
            default_field(spec, "operatingMode", json!("Running"));
            default_field(spec, "shutdownPolicy", json!("Retain"));
            pod_template_defaults(&mut spec["podTemplate"]);
        }
        "SandboxTemplate" if spec.is_object() => {
            default_field(spec, "envVarsInjectionPolicy", json!("Disallowed"));
            default_field(spec, "networkPolicyManagement", json!("Managed"));
            default_field(spec, "volumeClaimTemplatesPolicy", json!("Disallowed"));
            pod_template_defaults(&mut spec["podTemplate"]);
        }
        "SandboxWarmPool" if spec.is_object() => {
            default_field(spec, "replicas", json!(1));
            if spec["updateStrategy"].is_object() {
                default_field(&mut spec["updateStrategy"], "type", json!("OnReplenish"));
            }
        }
        "SandboxClaim" if spec["lifecycle"].is_object() => {
            default_field(&mut spec["lifecycle"], "shutdownPolicy", json!("Retain"));
        }
        "Pod" if spec.is_object() => pod_defaults(spec),
        _ => {}
    }
}

/// The structural defaults inside a CRD's embedded pod template (`ports[].protocol`).
fn pod_template_defaults(template: &mut Value) {
    for kind in ["containers", "initContainers"] {
        if let Some(cs) = template["spec"][kind].as_array_mut() {
            for c in cs {
                if let Some(ports) = c["ports"].as_array_mut() {
                    for p in ports {
                        default_field(p, "protocol", json!("TCP"));
                    }
                }
            }
        }
    }
}

/// A Pod's defaults (`pkg/apis/core/v1/defaults.go`).
fn pod_defaults(spec: &mut Value) {
    default_field(spec, "restartPolicy", json!("Always"));
    default_field(spec, "terminationGracePeriodSeconds", json!(30));
    default_field(spec, "dnsPolicy", json!("ClusterFirst"));
    default_field(spec, "schedulerName", json!("default-scheduler"));
    default_field(spec, "securityContext", json!({}));
    default_field(spec, "enableServiceLinks", json!(true));
    default_field(spec, "serviceAccountName", json!("default"));
    default_field(spec, "serviceAccount", json!("default"));
    default_field(spec, "priority", json!(0));
    default_field(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
    if let Some(cs) = spec["containers"].as_array_mut() {
        for c in cs {
            default_field(c, "terminationMessagePath", json!("/dev/termination-log"));
            default_field(c, "terminationMessagePolicy", json!("File"));
            let latest = c["image"].as_str().is_some_and(|i| {
                !i.rsplit('/').next().unwrap_or(i).contains(':') || i.ends_with(":latest")
            });
            default_field(
                c,
                "imagePullPolicy",
                json!(if latest { "Always" } else { "IfNotPresent" }),
            );
            default_field(c, "resources", json!({}));
            if let Some(ports) = c["ports"].as_array_mut() {
                for p in ports {
                    default_field(p, "protocol", json!("TCP"));
                }
            }
        }
    }
}

/// The value at a dotted path (numeric parts index arrays).
fn at<'a>(obj: &'a Value, path: &str) -> &'a Value {
    let mut v = obj;
    for part in path.split('.') {
        v = match (part.parse::<usize>(), v) {
            (Ok(i), Value::Array(a)) => a.get(i).unwrap_or(&Value::Null),
            _ => &v[part],
        };
    }
    v
}

fn required(causes: &mut Vec<Cause>, obj: &Value, path: &str) {
    let v = at(obj, path);
    if v.is_null() {
        causes.push(Cause {
            reason: "FieldValueRequired",
            field: path.to_owned(),
            message: "Required value".into(),
        });
    }
}

fn enum_of(causes: &mut Vec<Cause>, obj: &Value, path: &str, allowed: &[&str]) {
    let v = at(obj, path);
    match v {
        Value::Null => {}
        Value::String(s) if allowed.contains(&s.as_str()) => {}
        other => {
            let quoted: Vec<String> = allowed.iter().map(|a| format!("\"{a}\"")).collect();
            causes.push(Cause {
                reason: "FieldValueNotSupported",
                field: path.to_owned(),
                message: format!(
                    "Unsupported value: {other}: supported values: {}",
                    quoted.join(", ")
                ),
            });
        }
    }
}

fn min_int(causes: &mut Vec<Cause>, obj: &Value, path: &str, min: i64) {
    let v = at(obj, path);
    match v {
        Value::Null => {}
        Value::Number(n) if n.as_i64().is_some_and(|n| n >= min) => {}
        Value::Number(_) => causes.push(Cause {
            reason: "FieldValueInvalid",
            field: path.to_owned(),
            message: format!(
                "Invalid value: {v}: {path} in body should be greater than or equal to {min}"
            ),
        }),
        _ => causes.push(Cause {
            reason: "FieldValueTypeInvalid",
            field: path.to_owned(),
            message: format!(
                "Invalid value: \"{}\": {path} in body must be of type integer: \"{}\"",
                type_name(v),
                type_name(v)
            ),
        }),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// An RFC 1123 DNS label.
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=63).contains(&b.len())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// An RFC 1123 subdomain (object names).
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && !s.is_empty() && s.split('.').all(is_dns_label)
}

/// The schema's checks of a create or update body (after defaults): what the API server's 422
/// lists.
pub fn validate(res: &Resource, obj: &Value) -> Vec<Cause> {
    let mut c = Vec::new();
    let name = obj["metadata"]["name"].as_str().unwrap_or("");
    let name_ok = match res.kind {
        // Pods and namespaces are DNS labels / subdomains; CRs subdomains.
        "Namespace" => is_dns_label(name),
        _ => is_dns_subdomain(name),
    };
    if !name_ok {
        c.push(Cause {
            reason: "FieldValueInvalid",
            field: "metadata.name".into(),
            message: format!(
                "Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
            ),
        });
    }
    for field in ["labels", "annotations"] {
        let v = &obj["metadata"][field];
        if !(v.is_null()
            || v.as_object()
                .is_some_and(|m| m.values().all(Value::is_string)))
        {
            c.push(Cause {
                reason: "FieldValueTypeInvalid",
                field: format!("metadata.{field}"),
                message: "Invalid value: must be a map of strings".into(),
            });
        }
    }
    match res.kind {
        "Sandbox" => {
            required(&mut c, obj, "spec");
            required(&mut c, obj, "spec.podTemplate");
            required(&mut c, obj, "spec.podTemplate.spec");
            enum_of(&mut c, obj, "spec.operatingMode", &["Running", "Suspended"]);
            enum_of(&mut c, obj, "spec.shutdownPolicy", &["Delete", "Retain"]);
        }
        "SandboxTemplate" => {
            required(&mut c, obj, "spec");
            required(&mut c, obj, "spec.podTemplate");
            required(&mut c, obj, "spec.podTemplate.spec");
            enum_of(
                &mut c,
                obj,
                "spec.envVarsInjectionPolicy",
                &["Allowed", "Overrides", "Disallowed"],
            );
            enum_of(
                &mut c,
                obj,
                "spec.networkPolicyManagement",
                &["Managed", "Unmanaged"],
            );
            enum_of(
                &mut c,
                obj,
                "spec.volumeClaimTemplatesPolicy",
                &["Disallowed", "Allowed", "Overrides"],
            );
        }
        "SandboxWarmPool" => {
            required(&mut c, obj, "spec");
            required(&mut c, obj, "spec.sandboxTemplateRef");
            required(&mut c, obj, "spec.sandboxTemplateRef.name");
            min_int(&mut c, obj, "spec.replicas", 0);
            enum_of(
                &mut c,
                obj,
                "spec.updateStrategy.type",
                &["Recreate", "OnReplenish"],
            );
        }
        "SandboxClaim" => {
            required(&mut c, obj, "spec");
            required(&mut c, obj, "spec.warmPoolRef");
            required(&mut c, obj, "spec.warmPoolRef.name");
            enum_of(
                &mut c,
                obj,
                "spec.lifecycle.shutdownPolicy",
                &["Delete", "DeleteForeground", "Retain"],
            );
            min_int(&mut c, obj, "spec.lifecycle.ttlSecondsAfterFinished", 0);
            if let Some(env) = obj["spec"]["env"].as_array() {
                for (i, e) in env.iter().enumerate() {
                    required(&mut c, obj, &format!("spec.env.{i}.name"));
                    if e["value"].is_null() {
                        c.push(Cause {
                            reason: "FieldValueRequired",
                            field: format!("spec.env[{i}].value"),
                            message: "Required value".into(),
                        });
                    }
                }
            }
        }
        "Pod" => {
            let containers = obj["spec"]["containers"].as_array();
            match containers {
                None => c.push(Cause {
                    reason: "FieldValueRequired",
                    field: "spec.containers".into(),
                    message: "Required value".into(),
                }),
                Some(cs) if cs.is_empty() => c.push(Cause {
                    reason: "FieldValueRequired",
                    field: "spec.containers".into(),
                    message: "Required value".into(),
                }),
                Some(cs) => {
                    let mut seen = Vec::new();
                    for (i, ct) in cs.iter().enumerate() {
                        let n = ct["name"].as_str().unwrap_or("");
                        if !is_dns_label(n) {
                            c.push(Cause {
                                reason: "FieldValueRequired",
                                field: format!("spec.containers[{i}].name"),
                                message: "Required value".into(),
                            });
                        } else if seen.contains(&n) {
                            c.push(Cause {
                                reason: "FieldValueDuplicate",
                                field: format!("spec.containers[{i}].name"),
                                message: format!("Duplicate value: \"{n}\""),
                            });
                        }
                        seen.push(n);
                        if ct["image"].as_str().is_none_or(str::is_empty) {
                            c.push(Cause {
                                reason: "FieldValueRequired",
                                field: format!("spec.containers[{i}].image"),
                                message: "Required value".into(),
                            });
                        }
                    }
                }
            }
        }
        _ => {}
    }
    // `spec.env.0.name` reads better as the API server writes it.
    for cause in &mut c {
        if let Some(rest) = cause.field.strip_prefix("spec.env.")
            && let Some((i, tail)) = rest.split_once('.')
        {
            cause.field = format!("spec.env[{i}].{tail}");
        }
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_enums() {
        let mut s = json!({"metadata": {"name": "s"}, "spec": {"podTemplate": {"spec": {"containers": [
            {"name": "c", "image": "i", "ports": [{"containerPort": 8888}]}]}}}});
        apply_defaults(&SANDBOXES, &mut s);
        assert_eq!(s["spec"]["operatingMode"], "Running");
        assert_eq!(s["spec"]["shutdownPolicy"], "Retain");
        assert_eq!(
            s["spec"]["podTemplate"]["spec"]["containers"][0]["ports"][0]["protocol"],
            "TCP"
        );
        assert!(validate(&SANDBOXES, &s).is_empty());
        s["spec"]["operatingMode"] = json!("Paused");
        let c = validate(&SANDBOXES, &s);
        assert_eq!(c[0].field, "spec.operatingMode");
        assert_eq!(
            c[0].message,
            "Unsupported value: \"Paused\": supported values: \"Running\", \"Suspended\""
        );
        let claim = json!({"metadata": {"name": "c"}, "spec": {}});
        let c = validate(&CLAIMS, &claim);
        assert_eq!(c[0].field, "spec.warmPoolRef");
        let claim = json!({"metadata": {"name": "c"}, "spec": {"warmPoolRef": {"name": "p"},
            "env": [{"name": "A", "value": "1"}, {"value": "2"}]}});
        let c = validate(&CLAIMS, &claim);
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].field, "spec.env[1].name");
        let mut pool =
            json!({"metadata": {"name": "p"}, "spec": {"sandboxTemplateRef": {"name": "t"}}});
        apply_defaults(&WARM_POOLS, &mut pool);
        assert_eq!(pool["spec"]["replicas"], 1);
        assert!(pool["spec"].get("updateStrategy").is_none());
    }

    #[test]
    fn discovery_entries_have_singular_names() {
        let l = resource_list("", "v1").unwrap();
        let exec = l["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "pods/exec")
            .unwrap();
        assert_eq!(exec["singularName"], "");
        assert_eq!(exec["kind"], "PodExecOptions");
        let g = group_list();
        assert_eq!(g["groups"].as_array().unwrap().len(), 2);
        assert!(resource_list("agents.x-k8s.io", "v1alpha1").is_none());
    }
}
