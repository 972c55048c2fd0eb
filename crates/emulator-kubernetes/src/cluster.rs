//! The cluster's shared state: the store, the credential, the faults, the pods' sandboxes, and
//! the deletes (graceful for pods; the garbage collector's cascade along `ownerReferences`).

use std::sync::{Arc, Mutex};

use axum::http::HeaderMap;
use serde_json::{Value, json};
use tokio::sync::Notify;

use execseam_emulator_kit::{FaultHandle, Sandboxing, Shell};

use crate::Kubernetes;
use crate::api::DeleteOptions;
use crate::pods::PodRun;
use crate::schema::{self, Resource};
use crate::status::{self, ApiError};
use crate::store::{self, From, Store, Subscription};

/// The finalizer the `StorageObjectInUseProtection` admission plugin puts on every claim.
pub(crate) const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";

/// Everything the API server, the controllers, the exec server and the router share.
pub struct Cluster {
    pub(crate) store: Store,
    /// The kit's shell: the credential, the faults, how sandboxes are made, and the registry of
    /// running pods (by UID).
    pub(crate) shell: Arc<Shell<Kubernetes>>,
    /// `host:port` of the API server (discovery's `serverAddressByClientCIDRs`).
    pub(crate) server_address: Mutex<String>,
    /// Wakes the controllers.
    pub(crate) wake: Notify,
    /// The exec protocols served.
    pub(crate) protocols: Mutex<Vec<&'static str>>,
    ips: Mutex<u32>,
    /// Where the PersistentVolumeClaims' volumes live on the host (one directory each, made
    /// when a pod first mounts it, removed with the claim and with the cluster).
    volumes: std::path::PathBuf,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.volumes);
    }
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field(
                "server_address",
                &self.server_address.lock().expect("address"),
            )
            .finish_non_exhaustive()
    }
}

impl Cluster {
    pub(crate) fn new(
        shell: Arc<Shell<Kubernetes>>,
        server_address: String,
        history: usize,
    ) -> Cluster {
        let c = Cluster {
            store: Store::new(history),
            shell,
            server_address: Mutex::new(server_address),
            wake: Notify::new(),
            protocols: Mutex::new(crate::exec::PROTOCOLS.to_vec()),
            ips: Mutex::new(0),
            volumes: std::env::temp_dir().join(format!(
                "execseam-kubernetes-volumes-{}",
                crate::names::hex(16)
            )),
        };
        for ns in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let obj = json!({
                "apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": ns, "uid": crate::names::uuid(), "creationTimestamp": store::now(),
                             "labels": {"kubernetes.io/metadata.name": ns}},
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            });
            let _ = c.store.create(&schema::NAMESPACES, "", obj);
        }
        c
    }

    /// `Authorization: Bearer <token>` with the accepted token (the scheme in any case, as the
    /// API server's bearer authenticator reads it).
    pub fn authorized(&self, headers: &HeaderMap) -> bool {
        headers
            .get(axum::http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                let (scheme, rest) = v.split_once(' ')?;
                scheme.eq_ignore_ascii_case("bearer").then_some(rest.trim())
            })
            .is_some_and(|t| self.shell.token().accepts(t))
    }

    /// The faults.
    pub(crate) fn faults(&self) -> &FaultHandle {
        self.shell.faults()
    }

    /// How sandboxes are made.
    pub(crate) fn sandboxing(&self) -> &Sandboxing {
        self.shell.sandboxing()
    }

    /// The running pods.
    pub(crate) fn runs(&self) -> Vec<Arc<PodRun>> {
        self.shell.sandboxes().values()
    }

    /// The running pod with this UID.
    pub(crate) fn run(&self, uid: &str) -> Option<Arc<PodRun>> {
        self.shell.sandboxes().get(uid)
    }

    /// Wakes the controllers (after a write).
    pub fn kick(&self) {
        self.wake.notify_one();
    }

    /// A watch on the store.
    pub fn watch(
        &self,
        res: &'static Resource,
        ns: Option<&str>,
        from: From,
    ) -> Result<Subscription, ApiError> {
        self.store.watch(res, ns, from)
    }

    /// The next pod IP: 10.244.0.0/16 (the usual pod CIDR; never dialled: the router maps IPs to
    /// pods in memory).
    pub(crate) fn next_ip(&self) -> String {
        let mut n = self.ips.lock().expect("ips");
        *n = (*n % 65_000) + 1;
        let v = *n + 1;
        format!("10.244.{}.{}", v / 250, v % 250 + 2)
    }

    /// The running pod with this IP.
    pub fn pod_by_ip(&self, ip: &str) -> Option<Arc<PodRun>> {
        self.runs().into_iter().find(|p| p.ip == ip)
    }

    /// The running pod `ns/name`.
    pub fn pod(&self, ns: &str, name: &str) -> Option<Arc<PodRun>> {
        self.runs()
            .into_iter()
            .find(|p| p.namespace == ns && p.name == name)
    }

    /// Deletes an object as the API server does: a pod gracefully (its `deletionTimestamp` set;
    /// the pods controller stops it, then removes it), anything else at once; dependents follow
    /// (`Background`: after; `Foreground`: first, the owner waits with the `foregroundDeletion`
    /// finalizer; `Orphan`: their owner reference is dropped). Returns what the API answers.
    pub fn delete(
        &self,
        res: &'static Resource,
        ns: &str,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<Value, ApiError> {
        let cur = self
            .store
            .get(res, ns, name)
            .ok_or_else(|| status::not_found(res, name))?;
        let uid = cur["metadata"]["uid"].as_str().unwrap_or("").to_owned();
        match options.propagation.as_str() {
            "Orphan" => self.orphan(&uid),
            "Foreground" if res.kind != "Pod" => {
                let out = self.store.update(res, ns, name, |v| {
                    if v["metadata"]["deletionTimestamp"].is_null() {
                        v["metadata"]["deletionTimestamp"] = json!(store::now());
                        v["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                    }
                    let fin = v["metadata"]["finalizers"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default();
                    if !fin.iter().any(|f| f == "foregroundDeletion") {
                        let mut fin = fin;
                        fin.push(json!("foregroundDeletion"));
                        v["metadata"]["finalizers"] = json!(fin);
                    }
                    Ok(())
                })?;
                self.cascade(&uid);
                self.kick();
                return Ok(out);
            }
            _ => {}
        }
        if res.kind == "Pod" {
            return self.delete_pod(ns, name, options.grace);
        }
        let protected = cur["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|x| x == PVC_PROTECTION));
        if res.kind == "PersistentVolumeClaim" && protected {
            // Terminating until no pod uses it: the pvc-protection controller then drops the
            // finalizer (`Cluster::release_claims`).
            let out = self.store.update(res, ns, name, |v| {
                if v["metadata"]["deletionTimestamp"].is_null() {
                    v["metadata"]["deletionTimestamp"] = json!(store::now());
                    v["metadata"]["deletionGracePeriodSeconds"] = json!(0);
                }
                Ok(())
            })?;
            self.kick();
            return Ok(out);
        }
        let out = self
            .store
            .remove(res, ns, name)
            .ok_or_else(|| status::not_found(res, name))?;
        if res.kind == "PersistentVolumeClaim" {
            // The claim's volume goes with it (a dynamically provisioned volume's reclaim
            // policy is `Delete`).
            let _ = std::fs::remove_dir_all(self.volumes.join(ns).join(name));
        }
        if res.kind == "Namespace" {
            for r in schema::ALL.iter().filter(|r| r.namespaced) {
                for o in self.store.list(r, Some(name)).0 {
                    let n = o["metadata"]["name"].as_str().unwrap_or("").to_owned();
                    let _ = self.delete(r, name, &n, &DeleteOptions::default());
                }
            }
        }
        if options.propagation != "Orphan" {
            self.cascade(&uid);
        }
        self.kick();
        Ok(out)
    }

    /// A pod's delete: immediate with grace 0 or when it never ran; else `deletionTimestamp` and
    /// `deletionGracePeriodSeconds` (`pod/strategy.go CheckGracefulDelete`).
    fn delete_pod(&self, ns: &str, name: &str, grace: Option<u64>) -> Result<Value, ApiError> {
        let res = &schema::PODS;
        let cur = self
            .store
            .get(res, ns, name)
            .ok_or_else(|| status::not_found(res, name))?;
        let grace = grace.unwrap_or_else(|| {
            cur["spec"]["terminationGracePeriodSeconds"]
                .as_u64()
                .unwrap_or(30)
        });
        let unscheduled = cur["spec"]["nodeName"].as_str().is_none_or(str::is_empty);
        let terminal = matches!(
            cur["status"]["phase"].as_str(),
            Some("Succeeded" | "Failed")
        );
        if grace == 0 || unscheduled || terminal {
            let out = self
                .store
                .remove(res, ns, name)
                .ok_or_else(|| status::not_found(res, name))?;
            if let Some(uid) = out["metadata"]["uid"].as_str() {
                self.stop_pod(uid);
                self.cascade(uid);
            }
            self.kick();
            return Ok(out);
        }
        let out = self.store.update(res, ns, name, |v| {
            if v["metadata"]["deletionTimestamp"].is_null() {
                let at = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0)
                    + grace;
                v["metadata"]["deletionTimestamp"] = json!(store::rfc3339(at));
                v["metadata"]["deletionGracePeriodSeconds"] = json!(grace);
            }
            Ok(())
        })?;
        self.kick();
        Ok(out)
    }

    /// What a pod's sandbox is, from the user's side: the claim that owns its Sandbox, else the
    /// Sandbox, else the pod.
    pub(crate) fn top_owner(&self, ns: &str, pod: &str) -> (&'static Resource, String) {
        let controller = |o: &Value| -> Option<(String, String)> {
            o["metadata"]["ownerReferences"]
                .as_array()?
                .iter()
                .find(|r| r["controller"].as_bool() == Some(true))
                .map(|r| {
                    (
                        r["kind"].as_str().unwrap_or("").to_owned(),
                        r["name"].as_str().unwrap_or("").to_owned(),
                    )
                })
        };
        let Some(p) = self.store.get(&schema::PODS, ns, pod) else {
            return (&schema::PODS, pod.to_owned());
        };
        match controller(&p) {
            Some((kind, sandbox)) if kind == "Sandbox" => {
                let owner = self
                    .store
                    .get(&schema::SANDBOXES, ns, &sandbox)
                    .and_then(|s| controller(&s));
                match owner {
                    Some((kind, claim)) if kind == "SandboxClaim" => (&schema::CLAIMS, claim),
                    _ => (&schema::SANDBOXES, sandbox),
                }
            }
            _ => (&schema::PODS, pod.to_owned()),
        }
    }

    /// The host directory of the claim `ns/name`'s volume (created on first use, root's, 0755:
    /// a fresh filesystem's root as a provisioner formats it).
    pub(crate) fn volume(&self, ns: &str, name: &str) -> std::io::Result<std::path::PathBuf> {
        let dir = self.volumes.join(ns).join(name);
        std::fs::create_dir_all(&dir)?;
        Ok(dir)
    }

    /// The pvc-protection controller (pkg/controller/volume/pvcprotection): a claim being
    /// deleted loses its finalizer, and so goes (with its volume), once no pod in its
    /// namespace names it.
    pub(crate) fn release_claims(&self) {
        for pvc in self.store.list(&schema::PVCS, None).0 {
            if pvc["metadata"]["deletionTimestamp"].is_null() {
                continue;
            }
            let ns = pvc["metadata"]["namespace"].as_str().unwrap_or("");
            let name = pvc["metadata"]["name"].as_str().unwrap_or("");
            let used = self.store.list(&schema::PODS, Some(ns)).0.iter().any(|p| {
                p["spec"]["volumes"].as_array().is_some_and(|vs| {
                    vs.iter()
                        .any(|v| v["persistentVolumeClaim"]["claimName"].as_str() == Some(name))
                })
            });
            if !used && self.store.remove(&schema::PVCS, ns, name).is_some() {
                let _ = std::fs::remove_dir_all(self.volumes.join(ns).join(name));
            }
        }
    }

    /// Stops a pod's sandbox (its processes die, its root goes).
    pub(crate) fn stop_pod(&self, uid: &str) {
        self.shell.sandboxes().destroy(uid);
    }

    /// Deletes everything owned by `uid` (the garbage collector, background propagation).
    pub(crate) fn cascade(&self, uid: &str) {
        for (res, ns, name) in self.store.dependents(uid) {
            let _ = self.delete(res, &ns, &name, &DeleteOptions::default());
        }
    }

    fn orphan(&self, uid: &str) {
        for (res, ns, name) in self.store.dependents(uid) {
            let _ = self.store.update(res, &ns, &name, |v| {
                if let Some(refs) = v["metadata"]["ownerReferences"].as_array_mut() {
                    refs.retain(|r| r["uid"].as_str() != Some(uid));
                }
                Ok(())
            });
        }
    }

    /// Removes objects waiting on `foregroundDeletion` whose dependents are gone.
    pub(crate) fn finish_foreground(&self) {
        for res in schema::ALL.iter().copied().filter(|r| r.kind != "Pod") {
            for o in self.store.list(res, None).0 {
                let waiting = o["metadata"]["finalizers"]
                    .as_array()
                    .is_some_and(|f| f.iter().any(|x| x == "foregroundDeletion"));
                if !waiting {
                    continue;
                }
                let uid = o["metadata"]["uid"].as_str().unwrap_or("");
                if self.store.dependents(uid).is_empty() {
                    let ns = o["metadata"]["namespace"].as_str().unwrap_or("");
                    let name = o["metadata"]["name"].as_str().unwrap_or("");
                    self.store.remove(res, ns, name);
                }
            }
        }
    }
}
