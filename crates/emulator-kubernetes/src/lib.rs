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
//! protocols and the status channel; the agent-sandbox controllers (a claim adopts a warm
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
mod router;
mod runtime;
mod schema;
mod select;
mod status;
mod store;

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use serde_json::{Value, json};

pub use cluster::Cluster;
pub use exec::PROTOCOLS;
pub use names::name_hash;

// The harness this emulator runs on (the emulators crate's today; the emulator kit's once it is
// on main).
pub use execseam_emulators::EmulatorOptions;
pub(crate) use execseam_emulators::harness::sandbox::{
    Dir, Fs, PtySize, Sandbox, SandboxSpec, User,
};
pub(crate) use execseam_emulators::harness::{ConnControl, Fault, clock, reset_connection};
pub use execseam_emulators::harness::{FaultHandle, FaultRule, Sandboxing, Server};
pub(crate) use execseam_local::SpawnError;

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

/// The faults each route renders (`exec`: the exec upgrade and its stream).
pub const FAULTS: &[(&str, &[&str])] = &[(
    "exec",
    &[
        "429",
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

/// A running emulator: the API server and the router.
pub struct KubernetesEmulator {
    cluster: Arc<Cluster>,
    router_token: String,
    token: String,
    _api: Server,
    router: Server,
    api_addr: SocketAddr,
}

impl std::fmt::Debug for KubernetesEmulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubernetesEmulator")
            .field("api", &self.api_addr)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// The exec protocols served.
    pub(crate) fn exec_protocols(&self) -> Vec<&'static str> {
        self.protocols.lock().expect("protocols").clone()
    }
}

impl KubernetesEmulator {
    /// Starts the emulator with the default switches.
    pub async fn start(options: EmulatorOptions) -> io::Result<KubernetesEmulator> {
        KubernetesEmulator::start_with(options, KubernetesOptions::default()).await
    }

    /// Starts the API server (on `options.listen`) and the router (on the next free loopback
    /// port), with the default template and warm pool.
    pub async fn start_with(
        options: EmulatorOptions,
        k8s: KubernetesOptions,
    ) -> io::Result<KubernetesEmulator> {
        let faults = FaultHandle::new();
        for rule in &options.faults {
            if !FAULTS.iter().any(|(r, names)| {
                (rule.route == *r || rule.route == "*") && names.contains(&rule.fault.name())
            }) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "the kubernetes emulator does not render fault {:?} on route {:?}",
                        rule.fault.name(),
                        rule.route
                    ),
                ));
            }
            faults.add(rule.clone());
        }
        let token = options
            .token
            .clone()
            .unwrap_or_else(|| PLACEHOLDER_TOKEN.to_owned());
        let cluster = Arc::new(Cluster::new(
            options.token.clone(),
            faults,
            options.sandboxing.clone(),
            String::new(),
            k8s.history,
        ));
        *cluster.protocols.lock().expect("protocols") = k8s.exec_protocols.clone();
        let api = Server::start(options.listen, api::router(cluster.clone())).await?;
        let api_addr = api.addr();
        *cluster.server_address.lock().expect("address") = api_addr.to_string();
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
        let emulator = KubernetesEmulator {
            cluster,
            router_token,
            token,
            _api: api,
            router,
            api_addr,
        };
        emulator.apply(NAMESPACE, &default_template())?;
        emulator.apply(NAMESPACE, &default_pool(k8s.warm_replicas))?;
        Ok(emulator)
    }

    /// `http://127.0.0.1:<port>`: the API server.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.api_addr)
    }

    /// `http://127.0.0.1:<port>`: the router.
    pub fn router_url(&self) -> String {
        format!("http://{}", self.router.addr())
    }

    /// The bearer token the API server accepts.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The router's bearer token.
    pub fn router_token(&self) -> &str {
        &self.router_token
    }

    /// The faults.
    pub fn faults(&self) -> FaultHandle {
        self.cluster.faults.clone()
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
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: execseam-emulator\n  cluster:\n    server: {}\ncontexts:\n- name: execseam-emulator\n  context:\n    cluster: execseam-emulator\n    user: execseam-emulator\n    namespace: {NAMESPACE}\ncurrent-context: execseam-emulator\nusers:\n- name: execseam-emulator\n  user:\n    token: {}\npreferences: {{}}\n",
            self.base_url(),
            self.token
        )
    }

    /// The environment the adapter's `from_env` reads to reach the emulator (explicit server
    /// and token, the default warm pool), and the router for the Python SDK
    /// (`SANDBOX_ROUTER_URL`, `ROUTER_AUTH_TOKEN`).
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("EXECSEAM_KUBERNETES_SERVER".into(), self.base_url()),
            ("EXECSEAM_KUBERNETES_TOKEN".into(), self.token.clone()),
            ("EXECSEAM_KUBERNETES_NAMESPACE".into(), NAMESPACE.into()),
            ("EXECSEAM_KUBERNETES_WARM_POOL".into(), WARM_POOL.into()),
            ("EXECSEAM_KUBERNETES_ROUTER_URL".into(), self.router_url()),
            (
                "EXECSEAM_KUBERNETES_ROUTER_TOKEN".into(),
                self.router_token.clone(),
            ),
        ]
    }

    /// How many sandboxes are live: pods that are not a warm pool's spare capacity (the
    /// conformance suite's "nothing left behind" count).
    pub fn sandbox_counter(&self) -> impl Fn() -> usize + Send + Sync + 'static {
        let cluster = Arc::downgrade(&self.cluster);
        move || {
            cluster.upgrade().map_or(0, |c| {
                c.store
                    .list(&schema::PODS, None)
                    .0
                    .iter()
                    .filter(|p| {
                        p["metadata"]["labels"]["agents.x-k8s.io/warm-pool-sandbox"].is_null()
                    })
                    .count()
            })
        }
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

impl Drop for KubernetesEmulator {
    fn drop(&mut self) {
        let runs: Vec<_> = self
            .cluster
            .pods
            .lock()
            .expect("pods")
            .drain()
            .map(|(_, r)| r)
            .collect();
        for r in runs {
            r.stop();
        }
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
