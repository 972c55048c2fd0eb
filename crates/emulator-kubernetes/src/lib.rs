#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! A Kubernetes API server subset on loopback, faithful to the real server's wire behaviour as
//! the official clients need it (`kubernetes` for Python, kube for Rust): discovery; the generic
//! registry for pods, namespaces and the four agent-sandbox kinds (create 201, optimistic
//! locking, `generation`, the `status` and `scale` subresources, merge and JSON patches,
//! graceful pod deletes, the garbage collector along `ownerReferences`); list and watch with
//! label and field selectors and resource versions (a replay from `0`, history after a version,
//! `410` for a compacted one, `timeoutSeconds`); `pods/exec` over WebSocket with the channel
//! protocols and the status channel; `pods/portforward` over WebSocket (`v4.channel.k8s.io`,
//! `portforward.rs`) to what a pod listens on: the runtime model on 8888, and a model of
//! sandboxd's `ProcessService` on 9090 in a pod whose container runs the sandboxd image
//! (`sandboxd.rs`); the agent-sandbox controllers (a claim adopts a warm
//! Sandbox or starts a cold one, conditions turn `Ready`, deletes cascade); and, on a second
//! port, the agent-sandbox router and a model of its legacy Python runtime, which the
//! `k8s-agent-sandbox` SDK uses in direct-URL mode.
//!
//! Every pod is a harness sandbox (the same namespaces and users as every emulator): `pods/exec`
//! runs its argv there for real.
//!
//! Sources: the research note `kubernetes.md` (apiserver, apimachinery, kubelet, agent-sandbox at
//! `2fd412d`, the `k8s-agent-sandbox` 1.0.8 sdist, `kubernetes` 37.0.2), cited where used.
#![warn(missing_docs)]
#![allow(clippy::result_large_err)]

mod api;
mod cluster;
mod controllers;
mod exec;
mod names;
mod patch;
mod pods;
mod portforward;
mod router;
mod runtime;
mod sandboxd;
mod schema;
mod select;
mod status;
mod store;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use execseam_emulator_kit::{Emulator, Provider, Rendered, Server, Shell};
use serde_json::{Value, json};

pub use cluster::Cluster;
pub use exec::PROTOCOLS;
pub use execseam_emulator_kit::EmulatorOptions;
pub use names::name_hash;
pub use pods::PodRun;

/// The namespace of the defaults.
pub const NAMESPACE: &str = "default";
/// The template created at start (the Python SDK's tests use this name).
pub const TEMPLATE: &str = "python-sandbox-template";
/// The warm pool created at start.
pub const WARM_POOL: &str = "python-sandbox-pool";
/// The placeholder credential advertised when any token is accepted.
pub const PLACEHOLDER_TOKEN: &str = "execseam-emulator-token";

/// Switches of this emulator.
#[derive(Clone, Debug)]
pub struct KubernetesOptions {
    /// The exec protocols served (default both; only `v4.channel.k8s.io` is a server before
    /// Kubernetes 1.30, or without the stream translator).
    pub exec_protocols: Vec<&'static str>,
    /// The router's bearer token (default: a random one).
    pub router_token: Option<String>,
    /// How many changes the watch history keeps.
    pub history: usize,
    /// Replicas of the default warm pool (0: no warm sandboxes, every claim starts cold).
    pub warm_replicas: u32,
}

impl Default for KubernetesOptions {
    fn default() -> Self {
        KubernetesOptions {
            exec_protocols: PROTOCOLS.to_vec(),
            router_token: None,
            history: 4096,
            warm_replicas: 1,
        }
    }
}

impl Cluster {
    /// The exec protocols served.
    pub(crate) fn exec_protocols(&self) -> Vec<&'static str> {
        self.protocols.lock().expect("protocols").clone()
    }
}

/// The Kubernetes provider emulator ([`Provider`]); its typed test accessors are reached
/// through [`KubernetesEmulator`] (`Deref`).
pub struct Kubernetes {
    cluster: Arc<Cluster>,
    router: Server,
    router_token: String,
    /// The kubeconfig file written at start (removed at shutdown).
    kubeconfig_path: std::path::PathBuf,
}

/// A running Kubernetes emulator: the API server (its base URL) and the router.
pub type KubernetesEmulator = Emulator<Kubernetes>;

impl Provider for Kubernetes {
    const NAME: &'static str = "kubernetes";
    /// Every fault on `exec` (the exec upgrade and its stream) but 429: the API server's
    /// max-in-flight and priority-and-fairness filters let long-running requests through
    /// (`k8s.io/apiserver` `pkg/server/filters/maxinflight.go` and `priority-and-fairness.go`:
    /// `longRunningRequestCheck(r, requestInfo)` → the handler; kube-apiserver's check,
    /// kubernetes `pkg/controlplane/apiserver/config.go`, names the `attach`, `exec`, `proxy`,
    /// `log` and `portforward` subresources), so an exec is never
    /// refused with their 429. Where they do refuse (other requests), they write plain text,
    /// not a `Status`: `http.Error(w, "Too many requests, please try again later.", 429)`
    /// (`tooManyRequests`, `priority-and-fairness.go`), which the adapter recognises.
    const FAULTS: Rendered = &[(
        "exec",
        &[
            "500",
            "503",
            "reset",
            "cut",
            "malformed",
            "latency",
            "auth",
            "vanish",
        ],
    )];
    const PLACEHOLDER_TOKEN: &'static str = PLACEHOLDER_TOKEN;
    /// Every image has a writable `/tmp`.
    const SCRATCH: &'static str = "/tmp/execseam-conformance";
    /// A claim name never issued (the adapter's ids are claim names).
    const MISSING_SANDBOX_ID: &'static str = "execseam-nosuchclaim";
    type Options = KubernetesOptions;
    /// A running pod.
    type Sandbox = PodRun;
    /// The pod's UID.
    type Key = String;

    /// The default template and warm pool exist from the start; the router listens on a port
    /// of its own.
    async fn start(
        shell: Arc<Shell<Kubernetes>>,
        k8s: KubernetesOptions,
    ) -> io::Result<(Kubernetes, Router)> {
        let address = shell.base_url().trim_start_matches("http://").to_owned();
        let cluster = Arc::new(Cluster::new(shell, address.clone(), k8s.history));
        *cluster.protocols.lock().expect("protocols") = k8s.exec_protocols.clone();
        let router_token = k8s
            .router_token
            .clone()
            .unwrap_or_else(|| format!("router-{}", names::hex(24)));
        let router_state = Arc::new(router::RouterState {
            cluster: cluster.clone(),
            token: router_token.clone(),
        });
        let router = Server::start(
            SocketAddr::from(([127, 0, 0, 1], 0)),
            router::router(router_state),
        )
        .await?;
        tokio::spawn(controllers::run(Arc::downgrade(&cluster)));
        let dir = std::env::temp_dir().join(format!(
            "execseam-kubernetes-{}",
            address.replace([':', '.'], "-")
        ));
        let k = Kubernetes {
            cluster,
            router,
            router_token,
            kubeconfig_path: dir.join("kubeconfig"),
        };
        std::fs::create_dir_all(&dir)?;
        std::fs::write(&k.kubeconfig_path, k.kubeconfig())?;
        std::fs::set_permissions(
            &k.kubeconfig_path,
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )?;
        k.apply(NAMESPACE, &default_template())?;
        k.apply(NAMESPACE, &default_pool(k8s.warm_replicas))?;
        let routes = api::router(k.cluster.clone());
        Ok((k, routes))
    }

    /// What the adapter's `from_env` reads (an explicit server and token, the namespace, the
    /// default warm pool), the kubeconfig written at start for every other client (`kubectl`,
    /// the official Python client), and what the `k8s-agent-sandbox` SDK's direct-URL mode
    /// needs (the router and its token, `ROUTER_AUTH_TOKEN` as the router names it).
    fn env(&self, shell: &Shell<Kubernetes>) -> Vec<(String, String)> {
        vec![
            (
                "KUBECONFIG".into(),
                self.kubeconfig_path.display().to_string(),
            ),
            (
                "EXECSEAM_KUBERNETES_SERVER".into(),
                shell.base_url().to_owned(),
            ),
            (
                "EXECSEAM_KUBERNETES_TOKEN".into(),
                shell.token().advertised().to_owned(),
            ),
            ("EXECSEAM_KUBERNETES_NAMESPACE".into(), NAMESPACE.into()),
            ("EXECSEAM_KUBERNETES_WARM_POOL".into(), WARM_POOL.into()),
            ("SANDBOX_ROUTER_URL".into(), self.router_url()),
            ("ROUTER_AUTH_TOKEN".into(), self.router_token.clone()),
        ]
    }

    fn shutdown(&self) {
        if let Some(dir) = self.kubeconfig_path.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Kubernetes {
    /// The kubeconfig file written at start ([`kubeconfig`](Self::kubeconfig)'s text).
    pub fn kubeconfig_path(&self) -> &std::path::Path {
        &self.kubeconfig_path
    }

    /// `http://127.0.0.1:<port>`: the router.
    pub fn router_url(&self) -> String {
        format!("http://{}", self.router.addr())
    }

    /// The router's bearer token.
    pub fn router_token(&self) -> &str {
        &self.router_token
    }

    /// The cluster (for tests).
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    /// Forgets the watch history, as etcd's compaction does: a watch from any earlier resource
    /// version is then `410 Expired`.
    pub fn compact(&self) {
        self.cluster.store.compact();
    }

    /// A kubeconfig for the API server (one cluster, user and context, namespace `default`).
    pub fn kubeconfig(&self) -> String {
        let shell = &self.cluster.shell;
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: execseam-emulator\n  cluster:\n    server: {}\ncontexts:\n- name: execseam-emulator\n  context:\n    cluster: execseam-emulator\n    user: execseam-emulator\n    namespace: {NAMESPACE}\ncurrent-context: execseam-emulator\nusers:\n- name: execseam-emulator\n  user:\n    token: {}\npreferences: {{}}\n",
            shell.base_url(),
            shell.token().advertised()
        )
    }

    /// Creates an object from its manifest (JSON) in `namespace`, as `POST` would.
    pub fn apply(&self, namespace: &str, manifest: &Value) -> io::Result<Value> {
        let api_version = manifest["apiVersion"].as_str().unwrap_or("");
        let kind = manifest["kind"].as_str().unwrap_or("");
        let res = schema::ALL
            .iter()
            .copied()
            .find(|r| r.api_version() == api_version && r.kind == kind)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("no resource {api_version} {kind}"),
                )
            })?;
        let ns = if res.namespaced { namespace } else { "" };
        api::create(&self.cluster, res, ns, manifest.clone())
            .map_err(|e| io::Error::other(e.message))
    }
}

/// The default template: one container, `python-runtime`, serving the runtime model on 8888 (as
/// the SDK's `python-sandbox-template.yaml`).
pub fn default_template() -> Value {
    json!({
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxTemplate",
        "metadata": {"name": TEMPLATE},
        "spec": {"podTemplate": {"spec": {
            "containers": [{
                "name": "python-runtime",
                "image": "registry.k8s.io/agent-sandbox/python-runtime-sandbox:latest",
                "ports": [{"containerPort": 8888}],
            }],
            "restartPolicy": "OnFailure",
        }}},
    })
}

/// The default warm pool on [`default_template`].
pub fn default_pool(replicas: u32) -> Value {
    json!({
        "apiVersion": "extensions.agents.x-k8s.io/v1beta1",
        "kind": "SandboxWarmPool",
        "metadata": {"name": WARM_POOL},
        "spec": {"replicas": replicas, "sandboxTemplateRef": {"name": TEMPLATE}},
    })
}
