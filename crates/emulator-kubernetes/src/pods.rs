//! Pods as sandboxes: a pod the store holds runs as one harness sandbox (the "node"), its
//! status progressing as a kubelet's would; deleting it signals its processes (`SIGTERM`), waits
//! at most its grace period, kills what is left, then removes it.
//!
//! The containers of a pod share the sandbox's filesystem (a real pod gives each its own root;
//! documented). No image runs: a container is its user, working directory and environment, and
//! the commands `pods/exec` starts (and the runtime model the router reaches) are its processes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use execseam_emulator_kit::{Dir, Mount, Sandbox, SandboxEntry, SandboxSpec, User};

use crate::cluster::Cluster;
use crate::schema;
use crate::store;

/// The node every pod is scheduled on.
pub const NODE: &str = "execseam-emulator";
/// The node's IP.
pub const HOST_IP: &str = "10.0.0.2";
/// `PATH` in the containers (the common image default).
pub const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// One container: who its processes run as, where, with what environment.
#[derive(Clone, Debug)]
pub struct ContainerRun {
    /// The container's name.
    pub name: String,
    /// Its user (`securityContext.runAsUser`, else root).
    pub user: User,
    /// Its working directory (`workingDir`, else `/`).
    pub workdir: String,
    /// Its environment (the image's `PATH`, `HOSTNAME`, the service variables, `env`).
    pub env: BTreeMap<String, String>,
    /// Its image is agent-sandbox's `sandboxd` (it serves `ProcessService`).
    pub sandboxd: bool,
}

/// A running pod.
pub struct PodRun {
    /// The pod's UID.
    pub uid: String,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its IP.
    pub ip: String,
    /// Its sandbox.
    pub sandbox: Arc<Sandbox>,
    /// Its containers, in order.
    pub containers: Vec<ContainerRun>,
    /// When `SIGTERM` went out (a graceful delete).
    terminating: std::sync::Mutex<Option<Instant>>,
    /// A warm pool's spare: capacity, not a sandbox anybody has (not counted as live).
    pub(crate) warm: std::sync::atomic::AtomicBool,
    /// sandboxd's process registry (its virtual process ids).
    pub(crate) processes: crate::sandboxd::Registry,
}

impl SandboxEntry for PodRun {
    /// A warm pool's spare pod is capacity, not a sandbox a client made.
    fn is_live(&self) -> bool {
        !self.warm.load(std::sync::atomic::Ordering::SeqCst)
    }

    fn teardown(&self) {
        self.stop();
    }
}

execseam_emulator_kit::debug_fields!(PodRun: name, ip);

impl PodRun {
    /// The container `name`, or the only one.
    pub fn container(&self, name: Option<&str>) -> Option<&ContainerRun> {
        match name {
            Some(n) => self.containers.iter().find(|c| c.name == n),
            None => self.containers.first(),
        }
    }

    /// Kills its processes and removes its root.
    pub fn stop(&self) {
        self.sandbox.destroy();
    }

    fn busy(&self) -> bool {
        self.sandbox.processes().is_some_and(|p| p.len() > 1)
    }
}

fn user_of(spec: &Value, container: &Value) -> User {
    let uid = container["securityContext"]["runAsUser"]
        .as_u64()
        .or_else(|| spec["securityContext"]["runAsUser"].as_u64())
        .unwrap_or(0);
    if uid == 0 {
        User::root()
    } else {
        let uid = u32::try_from(uid).unwrap_or(65534);
        User::new("user", uid, "/home/user")
    }
}

fn env_of(pod: &Value, container: &Value, ip: &str) -> BTreeMap<String, String> {
    let name = pod["metadata"]["name"].as_str().unwrap_or("");
    let mut env: BTreeMap<String, String> = [
        ("PATH", PATH.to_owned()),
        ("HOSTNAME", name.to_owned()),
        // The kubelet adds the API server's service to every container.
        ("KUBERNETES_SERVICE_HOST", "10.96.0.1".to_owned()),
        ("KUBERNETES_SERVICE_PORT", "443".to_owned()),
        ("KUBERNETES_SERVICE_PORT_HTTPS", "443".to_owned()),
        ("KUBERNETES_PORT", "tcp://10.96.0.1:443".to_owned()),
        ("KUBERNETES_PORT_443_TCP", "tcp://10.96.0.1:443".to_owned()),
        ("KUBERNETES_PORT_443_TCP_PROTO", "tcp".to_owned()),
        ("KUBERNETES_PORT_443_TCP_PORT", "443".to_owned()),
        ("KUBERNETES_PORT_443_TCP_ADDR", "10.96.0.1".to_owned()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    for e in container["env"].as_array().into_iter().flatten() {
        let Some(k) = e["name"].as_str() else {
            continue;
        };
        let v = match (
            &e["value"],
            e["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
        ) {
            (Value::String(v), _) => v.clone(),
            (_, Some("metadata.name")) => name.to_owned(),
            (_, Some("metadata.namespace")) => pod["metadata"]["namespace"]
                .as_str()
                .unwrap_or("")
                .to_owned(),
            (_, Some("status.podIP")) => ip.to_owned(),
            (_, Some("spec.nodeName")) => NODE.to_owned(),
            _ => String::new(),
        };
        env.insert(k.to_owned(), v);
    }
    env
}

/// The claims a pod's volumes name (`persistentVolumeClaim.claimName`), by volume name.
fn claim_volumes(spec: &Value) -> BTreeMap<&str, &str> {
    spec["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| {
            Some((
                v["name"].as_str()?,
                v["persistentVolumeClaim"]["claimName"].as_str()?,
            ))
        })
        .collect()
}

/// Every claim the pod names exists, is bound and is not being deleted: until then the
/// scheduler leaves it `Pending` (`VolumeBinding` plugin: "persistentvolumeclaim not found",
/// "is being deleted", unbound immediate claims).
fn claims_bound(cluster: &Cluster, pod: &Value) -> bool {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or("");
    claim_volumes(&pod["spec"]).values().all(|claim| {
        cluster
            .store
            .get(&schema::PVCS, ns, claim)
            .is_some_and(|c| {
                c["status"]["phase"].as_str() == Some("Bound")
                    && c["metadata"]["deletionTimestamp"].is_null()
            })
    })
}

/// The containers' `volumeMounts` of claim volumes, as binds of the claims' host directories
/// (the pod's containers share one sandbox, so every container's mounts are in it).
fn claim_mounts(cluster: &Cluster, ns: &str, spec: &Value) -> std::io::Result<Vec<Mount>> {
    let claims = claim_volumes(spec);
    let mut mounts = Vec::new();
    for c in spec["containers"].as_array().into_iter().flatten() {
        for m in c["volumeMounts"].as_array().into_iter().flatten() {
            let (Some(claim), Some(path)) = (
                m["name"].as_str().and_then(|n| claims.get(n)),
                m["mountPath"].as_str(),
            ) else {
                continue;
            };
            mounts.push(Mount {
                host: cluster.volume(ns, claim)?,
                sandbox: path.trim_end_matches('/').to_owned(),
                read_only: m["readOnly"].as_bool() == Some(true),
            });
        }
    }
    Ok(mounts)
}

/// The PersistentVolume controller with a dynamic provisioner and `Immediate` binding: a
/// `Pending` claim gets a volume and is `Bound`, its capacity what it requested
/// (pkg/controller/volume/persistentvolume/pv_controller.go `bind`: `spec.volumeName`,
/// `status.phase`, `status.accessModes`, `status.capacity` from the volume).
fn bind_claims(cluster: &Cluster) {
    for pvc in cluster.store.list(&schema::PVCS, None).0 {
        if pvc["status"]["phase"].as_str() != Some("Pending") {
            continue;
        }
        let ns = pvc["metadata"]["namespace"].as_str().unwrap_or("");
        let name = pvc["metadata"]["name"].as_str().unwrap_or("");
        let volume = format!("pvc-{}", pvc["metadata"]["uid"].as_str().unwrap_or(""));
        let _ = cluster.store.update(&schema::PVCS, ns, name, |v| {
            v["spec"]["volumeName"] = json!(volume);
            v["status"] = json!({
                "phase": "Bound",
                "accessModes": v["spec"]["accessModes"].clone(),
                "capacity": {"storage": v["spec"]["resources"]["requests"]["storage"].clone()},
            });
            Ok(())
        });
    }
}

/// Starts the sandbox of a pod the store holds (blocking: the sandbox's init starts).
pub(crate) fn start(cluster: &Cluster, pod: &Value) -> std::io::Result<PodRun> {
    let ns = pod["metadata"]["namespace"]
        .as_str()
        .unwrap_or("")
        .to_owned();
    let name = pod["metadata"]["name"].as_str().unwrap_or("").to_owned();
    let uid = pod["metadata"]["uid"].as_str().unwrap_or("").to_owned();
    let ip = cluster.next_ip();
    let spec = &pod["spec"];
    let containers: Vec<ContainerRun> = spec["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| ContainerRun {
            name: c["name"].as_str().unwrap_or("").to_owned(),
            user: user_of(spec, c),
            workdir: c["workingDir"].as_str().unwrap_or("/").to_owned(),
            env: env_of(pod, c, &ip),
            sandboxd: crate::sandboxd::is_sandboxd(c["image"].as_str().unwrap_or("")),
        })
        .collect();
    let first = containers
        .first()
        .cloned()
        .ok_or_else(|| std::io::Error::other("the pod has no containers"))?;
    let mut others: Vec<User> = containers
        .iter()
        .skip(1)
        .map(|c| c.user.clone())
        .filter(|u| *u != first.user && !u.is_root())
        .collect();
    others.dedup_by(|a, b| a.name == b.name);
    let hostname = spec["hostname"].as_str().unwrap_or(&name).to_owned();
    let mut dirs = vec![Dir::owned("/app", &first.user, 0o755)];
    for c in &containers {
        if c.workdir != "/" && c.workdir != "/app" {
            dirs.push(Dir::owned(&c.workdir, &c.user, 0o755));
        }
        if c.sandboxd {
            // sandboxd creates its root at start (`os.MkdirAll(rootDir, 0o755)`).
            dirs.push(Dir::owned(crate::sandboxd::ROOT, &c.user, 0o755));
        }
    }
    let env: Vec<(String, String)> = first.env.clone().into_iter().collect();
    let sandbox_spec = SandboxSpec::new("kubernetes", &hostname, first.user.clone(), env)
        .other_users(others)
        .dirs(dirs);
    let mut sandboxing = cluster.sandboxing().clone();
    sandboxing.mounts.extend(claim_mounts(cluster, &ns, spec)?);
    let sandbox = Sandbox::create(format!("{ns}/{name}"), sandbox_spec, &sandboxing)?;
    Ok(PodRun {
        uid,
        namespace: ns,
        name,
        ip,
        sandbox,
        containers,
        terminating: std::sync::Mutex::new(None),
        warm: std::sync::atomic::AtomicBool::new(is_warm(pod)),
        processes: crate::sandboxd::Registry::default(),
    })
}

fn condition(kind: &str, at: &str) -> Value {
    json!({"type": kind, "status": "True", "lastProbeTime": null, "lastTransitionTime": at})
}

/// The status a kubelet reports for a running pod.
fn running_status(pod: &Value, run: &PodRun) -> Value {
    let at = store::now();
    let statuses: Vec<Value> = pod["spec"]["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let image = c["image"].as_str().unwrap_or("");
            let full = if image.contains('/') {
                image.to_owned()
            } else {
                format!("docker.io/library/{image}")
            };
            json!({
                "name": c["name"],
                "state": {"running": {"startedAt": at}},
                "lastState": {},
                "ready": true,
                "restartCount": 0,
                "image": full,
                "imageID": format!("{}@sha256:{}", full.split(':').next().unwrap_or(&full), crate::names::hex(64)),
                "containerID": format!("containerd://{}", crate::names::hex(64)),
                "started": true,
            })
        })
        .collect();
    json!({
        "phase": "Running",
        "conditions": [
            condition("PodReadyToStartContainers", &at),
            condition("Initialized", &at),
            condition("Ready", &at),
            condition("ContainersReady", &at),
            condition("PodScheduled", &at),
        ],
        "hostIP": HOST_IP,
        "hostIPs": [{"ip": HOST_IP}],
        "podIP": run.ip,
        "podIPs": [{"ip": run.ip}],
        "startTime": at,
        "containerStatuses": statuses,
        "qosClass": pod["status"]["qosClass"].as_str().unwrap_or("BestEffort"),
    })
}

fn is_warm(pod: &Value) -> bool {
    pod["metadata"]["labels"]["agents.x-k8s.io/warm-pool-sandbox"].is_string()
}

/// One pass over the pods: start new ones, finish graceful deletes, stop what the store lost.
pub(crate) fn reconcile(cluster: &Cluster) {
    bind_claims(cluster);
    let (pods, _) = cluster.store.list(&schema::PODS, None);
    let mut seen = std::collections::HashSet::new();
    for pod in pods {
        let uid = pod["metadata"]["uid"].as_str().unwrap_or("").to_owned();
        let ns = pod["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        let name = pod["metadata"]["name"].as_str().unwrap_or("").to_owned();
        seen.insert(uid.clone());
        let run = cluster.run(&uid);
        if let Some(r) = &run {
            r.warm
                .store(is_warm(&pod), std::sync::atomic::Ordering::SeqCst);
        }
        let deleting = !pod["metadata"]["deletionTimestamp"].is_null();
        match (run, deleting) {
            (Some(run), true) => {
                let grace = pod["metadata"]["deletionGracePeriodSeconds"]
                    .as_u64()
                    .unwrap_or(30);
                let started = {
                    let mut t = run.terminating.lock().expect("terminating");
                    if t.is_none() {
                        run.sandbox.signal_processes(libc::SIGTERM);
                        *t = Some(Instant::now());
                    }
                    t.expect("set")
                };
                if !run.busy() || started.elapsed() >= Duration::from_secs(grace) {
                    cluster.stop_pod(&uid);
                    cluster.store.remove(&schema::PODS, &ns, &name);
                    cluster.cascade(&uid);
                }
            }
            (None, true) => {
                cluster.store.remove(&schema::PODS, &ns, &name);
                cluster.cascade(&uid);
            }
            (None, false)
                if pod["status"]["phase"].as_str() == Some("Pending")
                    && claims_bound(cluster, &pod) =>
            {
                match start(cluster, &pod) {
                    Ok(run) => {
                        let run = Arc::new(run);
                        let status = running_status(&pod, &run);
                        cluster.shell.sandboxes().insert(uid.clone(), run.clone());
                        let written = cluster.store.update(&schema::PODS, &ns, &name, |v| {
                            v["spec"]["nodeName"] = json!(NODE);
                            v["status"] = status;
                            Ok(())
                        });
                        if written.is_err() {
                            cluster.stop_pod(&uid);
                        }
                    }
                    Err(e) => {
                        tracing::warn!(pod = %name, error = %e, "the pod's sandbox did not start");
                        let _ = cluster.store.update(&schema::PODS, &ns, &name, |v| {
                            v["spec"]["nodeName"] = json!(NODE);
                            v["status"]["phase"] = json!("Failed");
                            v["status"]["reason"] = json!("SandboxFailed");
                            v["status"]["message"] = json!(format!(
                                "the emulator could not start the pod's sandbox: {e}"
                            ));
                            Ok(())
                        });
                    }
                }
            }
            _ => {}
        }
    }
    // Pods the store no longer has (removed at once): their sandboxes go too.
    let gone: Vec<String> = cluster
        .shell
        .sandboxes()
        .keys()
        .into_iter()
        .filter(|k| !seen.contains(k))
        .collect();
    for uid in gone {
        cluster.stop_pod(&uid);
    }
    cluster.release_claims();
}
