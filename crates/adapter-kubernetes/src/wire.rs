//! The JSON this adapter reads from the API server: `Status`, object metadata, conditions, and the
//! parts of SandboxClaim, Sandbox and Pod it looks at. Every field is optional and unknown fields
//! are ignored (servers add fields); what is required is checked where it is used.
//!
//! Written by hand from the CRDs (`k8s/crds/*.yaml` of kubernetes-sigs/agent-sandbox) and
//! apimachinery's `metav1.Status`, independently of the emulator's side.

use std::collections::BTreeMap;

use serde::Deserialize;

/// The API groups and versions of agent-sandbox (`v1beta1`; `v1alpha1` is deprecated and the
/// official Python SDK 1.0.8 uses only `v1beta1`).
pub const SANDBOX_GROUP: &str = "agents.x-k8s.io";
/// The extensions group: templates, warm pools, claims.
pub const EXTENSIONS_GROUP: &str = "extensions.agents.x-k8s.io";
/// The version this adapter speaks.
pub const VERSION: &str = "v1beta1";

/// The label on everything this adapter creates (the recommended `app.kubernetes.io` label), the
/// selector of [`list`](crate::KubernetesProvider::list).
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "execseam");

/// The Sandbox annotation naming its pod (`agents.x-k8s.io/pod-name`; absent: the Sandbox's
/// own name).
pub const POD_NAME_ANNOTATION: &str = "agents.x-k8s.io/pod-name";

/// `metav1.Status`: the body of every API error, and of an exec's channel 3.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// `Success` or `Failure`.
    #[serde(default)]
    pub status: Option<String>,
    /// Human-readable.
    #[serde(default)]
    pub message: Option<String>,
    /// Machine-readable (`NotFound`, `NonZeroExitCode`, …).
    #[serde(default)]
    pub reason: Option<String>,
    /// Causes.
    #[serde(default)]
    pub details: Option<StatusDetails>,
}

/// `metav1.StatusDetails` (only the causes are read).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct StatusDetails {
    /// Why.
    #[serde(default)]
    pub causes: Vec<StatusCause>,
}

/// `metav1.StatusCause`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct StatusCause {
    /// `ExitCode`, `FieldValueInvalid`, …
    #[serde(default)]
    pub reason: Option<String>,
    /// The cause's text (for `ExitCode`, the code in decimal).
    #[serde(default)]
    pub message: Option<String>,
}

impl Status {
    /// `reason: message` (or whichever is there), for an error.
    pub fn describe(&self) -> String {
        match (self.reason.as_deref(), self.message.as_deref()) {
            (Some(r), Some(m)) if !r.is_empty() && !m.is_empty() => format!("{r}: {m}"),
            (_, Some(m)) if !m.is_empty() => m.to_owned(),
            (Some(r), _) if !r.is_empty() => r.to_owned(),
            _ => "no message".to_owned(),
        }
    }
}

/// `metav1.ObjectMeta`, the parts read.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    /// The name.
    #[serde(default)]
    pub name: String,
    /// The UID.
    #[serde(default)]
    pub uid: Option<String>,
    /// The resource version (opaque).
    #[serde(default)]
    pub resource_version: Option<String>,
    /// Set once a delete was accepted.
    #[serde(default)]
    pub deletion_timestamp: Option<String>,
    /// Labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

/// `metav1.Condition` (agent-sandbox) or `PodCondition` (pods): the parts read.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Condition {
    /// `Ready`, `Suspended`, …
    #[serde(rename = "type", default)]
    pub kind: String,
    /// `True`, `False` or `Unknown`.
    #[serde(default)]
    pub status: String,
    /// CamelCase reason.
    #[serde(default)]
    pub reason: Option<String>,
    /// Text.
    #[serde(default)]
    pub message: Option<String>,
}

/// Finds the condition of `kind`.
pub fn condition<'a>(conditions: &'a [Condition], kind: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.kind == kind)
}

/// A `SandboxClaim`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Claim {
    /// Metadata.
    #[serde(default)]
    pub metadata: Meta,
    /// The spec (only the pool is read).
    #[serde(default)]
    pub spec: ClaimSpec,
    /// Status.
    #[serde(default)]
    pub status: ClaimStatus,
}

/// `SandboxClaim.spec`, the parts read.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClaimSpec {
    /// The warm pool.
    #[serde(default)]
    pub warm_pool_ref: Option<NameRef>,
}

/// `{name}`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct NameRef {
    /// The name.
    #[serde(default)]
    pub name: String,
}

/// `SandboxClaim.status`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ClaimStatus {
    /// Conditions (`Ready`, `Finished`).
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The Sandbox it is bound to.
    #[serde(default)]
    pub sandbox: Option<ClaimSandbox>,
}

/// `SandboxClaim.status.sandbox`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ClaimSandbox {
    /// The Sandbox's name (older controllers wrote `Name`).
    #[serde(default, alias = "Name")]
    pub name: String,
}

/// A `Sandbox`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct SandboxObject {
    /// Metadata.
    #[serde(default)]
    pub metadata: Meta,
    /// Spec, the parts read.
    #[serde(default)]
    pub spec: SandboxObjectSpec,
    /// Status.
    #[serde(default)]
    pub status: SandboxStatus,
}

/// `Sandbox.spec`, the parts read.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxObjectSpec {
    /// `Running` (the CRD's default) or `Suspended`.
    #[serde(default)]
    pub operating_mode: Option<String>,
}

impl SandboxObject {
    /// Suspended or suspending: `spec.operatingMode: Suspended`, or the controller's `Ready`
    /// condition says `SandboxSuspended` (`controllers/sandbox_controller.go`,
    /// `computeReadyCondition`: "Sandbox is suspending" while the pod terminates, then
    /// "Sandbox is suspended").
    pub fn suspended(&self) -> bool {
        self.spec.operating_mode.as_deref() == Some("Suspended")
            || condition(&self.status.conditions, "Ready")
                .is_some_and(|r| r.reason.as_deref() == Some("SandboxSuspended"))
    }

    /// Its pod's name: the `agents.x-k8s.io/pod-name` annotation, else its own name (the
    /// controller's `resolvePodName`).
    pub fn pod_name(&self) -> &str {
        self.metadata
            .annotations
            .get(POD_NAME_ANNOTATION)
            .map(String::as_str)
            .filter(|n| !n.is_empty())
            .unwrap_or(&self.metadata.name)
    }
}

/// `Sandbox.status`, the parts read.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxStatus {
    /// Conditions (`Ready`, `Suspended`, …).
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// A Pod, the parts read.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Pod {
    /// Metadata.
    #[serde(default)]
    pub metadata: Meta,
    /// Status.
    #[serde(default)]
    pub status: PodStatus,
}

/// `Pod.status`, the parts read.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    /// `Pending`, `Running`, `Succeeded`, `Failed`, `Unknown`.
    #[serde(default)]
    pub phase: Option<String>,
    /// Conditions (`Ready`, …).
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// Container states.
    #[serde(default)]
    pub container_statuses: Vec<ContainerStatus>,
}

/// `ContainerStatus`, the parts read.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ContainerStatus {
    /// The container.
    #[serde(default)]
    pub name: String,
    /// Its state.
    #[serde(default)]
    pub state: Option<ContainerState>,
}

/// `ContainerState`: only `waiting` is read (its reason says why a pod will never start).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ContainerState {
    /// Waiting, with a reason.
    #[serde(default)]
    pub waiting: Option<Condition>,
}

/// A list: the items.
#[derive(Clone, Debug, Deserialize)]
#[serde(bound = "T: serde::de::DeserializeOwned")]
pub struct List<T> {
    /// The objects.
    #[serde(default = "Vec::new")]
    pub items: Vec<T>,
}

/// One watch event line: `{"type": "ADDED", "object": {…}}`.
#[derive(Clone, Debug, Deserialize)]
pub struct WatchEvent {
    /// `ADDED`, `MODIFIED`, `DELETED`, `BOOKMARK` or `ERROR`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The object (a `Status` for `ERROR`).
    pub object: serde_json::Value,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_reads_with_unknown_fields_and_the_legacy_name() {
        let c: Claim = serde_json::from_str(
            r#"{"metadata":{"name":"c","uid":"u","resourceVersion":"7","x":1},
                "spec":{"warmPoolRef":{"name":"pool"}},
                "status":{"conditions":[{"type":"Ready","status":"True","reason":"DependenciesReady",
                  "message":"Pod is Ready","lastTransitionTime":"2026-01-01T00:00:00Z"}],
                  "sandbox":{"Name":"pool-abcde","podIPs":["10.244.0.9"]}}}"#,
        )
        .unwrap();
        assert_eq!(c.status.sandbox.unwrap().name, "pool-abcde");
        assert_eq!(
            condition(&c.status.conditions, "Ready").unwrap().status,
            "True"
        );
    }

    #[test]
    fn the_pod_name_is_the_annotation_else_the_name() {
        let mut s = SandboxObject::default();
        s.metadata.name = "sb".into();
        assert_eq!(s.pod_name(), "sb");
        s.metadata
            .annotations
            .insert(POD_NAME_ANNOTATION.into(), "pod-1".into());
        assert_eq!(s.pod_name(), "pod-1");
    }
}
