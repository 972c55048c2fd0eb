#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! Emulator of Modal Sandboxes as the official `modal==1.6.4` client drives them: the control
//! plane (`modal.client.ModalClient`, the RPCs below) and the task command router
//! (`modal.task_command_router.TaskCommandRouter`, the per-task exec service) on one plain-text
//! HTTP/2 port, gRPC framing by tonic, messages from the wheel's own descriptors
//! (`execseam_modal_proto`).
//!
//! The client speaks h2c to `MODAL_SERVER_URL=http://127.0.0.1:PORT` and accepts an `http://`
//! router URL only when that server is localhost (`sandbox/_task_command_router_client.py`
//! `_connect`), so the router access the emulator hands out points back at itself.
//!
//! # RPCs served
//!
//! | service | RPC | behaviour |
//! |---|---|---|
//! | ModalClient | `AppGetOrCreate` | apps by (environment, name); `CREATE_IF_MISSING`, lookup (`NOT_FOUND`), `CREATE_FAIL_IF_EXISTS` (`ALREADY_EXISTS`), ephemeral |
//! | | `EnvironmentGetOrCreate`, `ClientHello` | the `main` environment, image builder 2025.06 |
//! | | `ImageGetOrCreate`, `ImageJoinStreaming` | every image builds at once (`GENERIC_STATUS_SUCCESS`); the id is derived from the definition; its `ENV` and `WORKDIR` lines (over its `base_images`) are kept for its sandboxes ([`image`]); a line the builder cannot parse is `GENERIC_STATUS_FAILURE` (the client's `ImageBuildError`) |
//! | | `ImageDelete` | a snapshot or built image is gone for good (creating from it is `NOT_FOUND`); an unknown id is `NOT_FOUND` |
//! | | `AuthTokenGet` | a JWT with `exp`; V2 sandbox calls must carry one it issued in `x-modal-auth-token` |
//! | | `SandboxCreateV2`, `SandboxCreate` (V1) | V2 returns `task_id` and `command_router_access` at once; deduplicated on `x-idempotency-key` |
//! | | `SandboxWaitV2`, `SandboxWait` | long poll (`timeout` 0 = poll); the result as the client reads it (`TERMINATED`, `TIMEOUT`, `SUCCESS`/`FAILURE` with the entrypoint's code) |
//! | | `SandboxGetTaskIdV2`, `SandboxGetTaskId` | the task id; a finished sandbox answers `task_result` only |
//! | | `SandboxGetTunnelsV2`, `SandboxGetTunnels` | the `open_ports` of the create (see Tunnels below): a TLS endpoint each (`Tunnel.url`), and a raw TCP one for an unencrypted port (`Tunnel.tcp_socket`), on loopback; none once finished; `SandboxCreateV2` answers the encrypted ones |
//! | | `SandboxGetCommandRouterAccess`, `TaskGetCommandRouterAccess` | a fresh router JWT and this server's URL; `FAILED_PRECONDITION` once finished |
//! | | `SandboxTerminateV2`, `SandboxTerminate` | kills every process; idempotent |
//! | | `SandboxListV2`, `SandboxList` | newest first, paged by `before_timestamp`, filtered by app, tags, `include_finished` |
//! | | `SandboxGetFromNameV2`, `SandboxGetFromName`, `SandboxTags{Get,Set}{,V2}` | names unique among an app's running sandboxes |
//! | TaskCommandRouter | `TaskExecStart` | argv, workdir, env (`secret_sources` env, `env`), stdout/stderr config (0 = DEVNULL), `timeout_secs` killed here with SIGKILL; idempotent on `exec_id` |
//! | | `TaskExecStdioRead` | from any byte `offset`, live, ends OK at the end of that stream |
//! | | `TaskExecStdinWrite`, `TaskExecStdinWriteStream`, `TaskExecStdinStatus` | offset-addressed (a retried write is dropped, a gap refused), eof; the status evicts a stream in flight |
//! | | `TaskExecWait`, `TaskExecPoll` | `code`, or `signal` for a signal death (the client adds 128) |
//! | | `SandboxStdioReadV2` | the entrypoint's stdout or stderr from any byte `offset`, live and after it exited (`starting_offset` past the request when older bytes are no longer retained: the most recent 64 MiB of each, [`Modal::set_entrypoint_retention`]); ends OK at the end of the stream; without an entrypoint, ends with the sandbox |
//! | | `SandboxStdinWriteV2` | the entrypoint's stdin, offset-addressed like an exec's, `eof` closes it (a second is ignored); `FAILED_PRECONDITION` once it exited |
//! | | `TaskSnapshotFilesystem` | the sandbox's writable layer copied (frozen meanwhile) into a new `im-` image over its source's image; `ttl_seconds` `-1` keeps it, `> 0` expires it |
//! | | `TaskSnapshotDirectory` | one directory's files copied (frozen meanwhile; the kit's [`DirImage`](execseam_emulator_kit::DirImage)) into a new `im-` image, kept as above; the call's `snapshot_id` deduplicates retries; a missing path is `NOT_FOUND`, a file `INVALID_ARGUMENT` (both inferred); creating a sandbox from it is `FAILED_PRECONDITION` (inferred: it holds one directory, no system) |
//! | | `TaskMountDirectory`, `TaskUnmountDirectory` | a copy of a directory snapshot (`image_id` "": `Image.from_scratch()`, empty) on a fresh tmpfs mounted at `path` (created if missing) in the sandbox's own mount namespace, hiding what was there; unmount (only of a path `mount_image` mounted, else `NOT_FOUND`, inferred) shows it again. Mounting a filesystem snapshot or a built image is `UNIMPLEMENTED` (the emulator's images are the host's system); a deleted or expired image `NOT_FOUND` |
//!
//! Every other RPC of the two services is `UNIMPLEMENTED` (tonic's answer for an unknown
//! method, which the client raises as `UnimplementedError`).
//!
//! # Sandboxes
//!
//! Each sandbox is a harness [`Sandbox`] (its own pid, mount, UTS and IPC namespaces, an
//! overlay root over the host's `/`) with Modal's image view: commands run as root with
//! `HOME=/root`, Debian's `PATH` and the image's `ENV` (under the sandbox's `env`/secrets and
//! each exec's), working directory `Sandbox.create(workdir=)`, else the image's `WORKDIR`, else
//! `/`, and the filesystem helper at `/__modal/.bin/modal-sandbox-fs-tools` (see
//! `modal-sandbox-fs-tools.py` beside this file for its protocol and where the formats come
//! from). The sandbox's `timeout_secs` is enforced here (the client's own deadline only stops
//! waiting); at the end the result is `GENERIC_STATUS_TIMEOUT`. Terminating a sandbox kills its
//! whole pid namespace.
//!
//! # Tunnels
//!
//! Modal's tunnels are TCP: its edge terminates TLS on `host:port` and passes the bytes to the
//! container's port; an unencrypted port also gets a raw TCP socket (modal 1.6.4 `_tunnel.py`).
//! Offline, each declared port gets a TLS listener on `127.0.0.1:<ephemeral>` (`Tunnel.url` is
//! `https://127.0.0.1:<port>`), presenting a certificate for `localhost` and `127.0.0.1` made
//! when the emulator starts ([`Modal::tunnel_ca_pem`]: a client trusts it, e.g. Python through
//! `SSL_CERT_FILE`; `execseam emulate modal` writes it to a file and prints that variable),
//! `h2` offered by ALPN for an `h2_ports` port; an unencrypted port also gets a plain listener
//! (`Tunnel.tcp_socket`). Each connection reaches the sandbox's own listener
//! only (the kit's `ports::connect`); a paused sandbox or a closed port closes it. The listeners
//! close when the sandbox finishes.
//!
//! # Faults
//!
//! Routes: `exec` (`TaskExecStart`), `stdio` (each `TaskExecStdioRead` and
//! `SandboxStdioReadV2`), `stdin` (exec and entrypoint writes), `wait`
//! (`TaskExecWait`), `create` (`SandboxCreate*`), `auth-token`, `access`, `terminate`, `lookup`
//! (wait, task id, from name, list, tags, tunnels), `app`, `image`. Rendering:
//!
//! | fault | rendering |
//! |---|---|
//! | `429[:s]` | `RESOURCE_EXHAUSTED` with Modal's status detail `RPCRetryPolicy{retry_after_secs: s}` (which the client honours); nothing happens |
//! | `500` | the request takes effect (the command starts), then `INTERNAL` |
//! | `503` | `UNAVAILABLE`; nothing happens |
//! | `reset` | the request takes effect, then the TCP connection is reset |
//! | `cut` | on `exec`: the command starts and its stdio reads and its wait end without a gRPC status; elsewhere this response does |
//! | `malformed` | the request takes effect; the response message is not valid protobuf |
//! | `latency:<ms>` | the answer is delayed |
//! | `auth` | `UNAUTHENTICATED`; nothing happens |
//! | `vanish` | on `exec`: the command starts and 300 ms later the sandbox is gone (processes killed, streams `UNAVAILABLE`, the task `NOT_FOUND`); elsewhere at once |
#![warn(missing_docs)]
// Handlers return `Result<_, Response>` (axum's idiom) or `Result<_, tonic::Status>`.
#![allow(clippy::result_large_err)]

mod control;
pub mod ids;
pub mod image;
pub mod process;
mod router;
#[cfg(test)]
mod tests;
mod tunnel;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use execseam_modal_proto::api::{self, GenericResult, generic_result::GenericStatus};
use execseam_modal_proto::google::protobuf::Any;
use execseam_modal_proto::{api::modal_client_server::ModalClientServer, tcr};
use prost::Message as _;
use tokio::sync::watch;
use tonic::Status;

use execseam_emulator_kit::grpc::body_faults;
use execseam_emulator_kit::{
    Dir, Emulator, FAULT_NAMES, Fault, FaultHandle, Provider, Rendered, Sandbox, SandboxEntry,
    SandboxSpec, Shell, User,
};
use process::Proc;

/// Where the helper lives inside every sandbox (`modal/sandbox/_filesystem.py`).
pub const FS_TOOLS_PATH: &str = "/__modal/.bin/modal-sandbox-fs-tools";
const FS_TOOLS: &str = include_str!("modal-sandbox-fs-tools.py");
/// The token id the emulator prints for the client (`MODAL_TOKEN_ID`).
pub const TOKEN_ID: &str = "ak-emulator";
/// The token secret it accepts when none is configured.
pub const TOKEN_SECRET: &str = "as-emulator";
/// Debian's default `PATH`, as in the `python:*-slim` images Modal's `debian_slim` builds on.
pub const IMAGE_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
/// The environment every image starts from (the image's own `ENV` lines go over it).
const IMAGE_ENV: &[(&str, &str)] = &[("PATH", IMAGE_PATH), ("LANG", "C.UTF-8")];
/// How much of each entrypoint stream is retained unless set: the most recent 64 MiB (the
/// service retains "only the most recent portion of output", `modal/io_streams.py`; its size is
/// not published).
pub const ENTRYPOINT_RETENTION: usize = 64 * 1024 * 1024;
/// The default sandbox lifetime when a request leaves it 0 (the client sends 300 by default).
const DEFAULT_TIMEOUT_SECS: u32 = 300;
/// Modal's documented maximum sandbox lifetime (24 h).
const MAX_TIMEOUT_SECS: u32 = 24 * 60 * 60;

/// One Modal sandbox: its identity, its definition, its processes and its result.
pub struct ModalSandbox {
    /// `sb-…` (the shape says V1 or V2).
    pub id: String,
    /// `ta-…`.
    pub task_id: String,
    /// Created through `SandboxCreateV2`.
    pub v2: bool,
    /// The app it belongs to.
    pub app_id: String,
    /// `Sandbox.create(name=)`.
    pub name: Option<String>,
    /// When it was created (seconds since the epoch).
    pub created_at: f64,
    /// Its image.
    pub image_id: String,
    /// Its lifetime.
    pub timeout_secs: u32,
    workdir: String,
    env: BTreeMap<String, String>,
    tags: Mutex<Vec<(String, String)>>,
    sandbox: Arc<Sandbox>,
    execs: Mutex<HashMap<String, Arc<Proc>>>,
    /// The `Sandbox.create(*args)` process, whose stdio is the sandbox's own.
    entrypoint: std::sync::OnceLock<Arc<Proc>>,
    result: watch::Sender<Option<GenericResult>>,
    finished_at: Mutex<f64>,
    last_active: Mutex<std::time::Instant>,
    /// Its open ports (`open_ports`), closed when it finishes.
    tunnels: Vec<tunnel::Tunnel>,
    /// Where `mount_image` mounted an image, in order (`unmount_image` takes these only).
    mounts: tokio::sync::Mutex<Vec<String>>,
}

impl std::fmt::Debug for ModalSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModalSandbox")
            .field("id", &self.id)
            .field("task_id", &self.task_id)
            .field("result", &*self.result.borrow())
            .finish_non_exhaustive()
    }
}

impl ModalSandbox {
    /// The harness sandbox its commands run in.
    pub fn sandbox(&self) -> &Arc<Sandbox> {
        &self.sandbox
    }

    /// Its result, once finished.
    pub fn result(&self) -> Option<GenericResult> {
        self.result.borrow().clone()
    }

    /// True until it finishes.
    pub fn is_running(&self) -> bool {
        self.result.borrow().is_none()
    }

    /// An exec by id.
    pub fn exec(&self, exec_id: &str) -> Option<Arc<Proc>> {
        self.execs.lock().expect("execs").get(exec_id).cloned()
    }

    /// The entrypoint process, if `Sandbox.create` named one.
    pub fn entrypoint(&self) -> Option<&Arc<Proc>> {
        self.entrypoint.get()
    }

    /// Records activity (a router call): the idle timeout counts from the last one.
    pub(crate) fn touch(&self) {
        *self.last_active.lock().expect("active") = std::time::Instant::now();
    }

    /// True while one of its commands runs.
    fn busy(&self) -> bool {
        self.entrypoint().is_some_and(|p| p.ended().is_none())
            || self
                .execs
                .lock()
                .expect("execs")
                .values()
                .any(|p| p.ended().is_none())
    }

    /// How many execs it has run.
    pub fn exec_count(&self) -> usize {
        self.execs.lock().expect("execs").len()
    }

    /// Its tunnels as `SandboxGetTunnels*` answers them: none once it has finished (the
    /// listeners are closed).
    fn tunnels(&self) -> Vec<api::TunnelData> {
        if !self.is_running() {
            return Vec::new();
        }
        self.tunnels.iter().map(|t| t.data(true)).collect()
    }

    fn tags(&self) -> Vec<api::SandboxTag> {
        self.tags
            .lock()
            .expect("tags")
            .iter()
            .map(|(k, v)| api::SandboxTag {
                tag_name: k.clone(),
                tag_value: v.clone(),
            })
            .collect()
    }

    /// Ends the sandbox with `status` (first end wins): every process is killed, waiters wake.
    pub fn finish(&self, status: GenericStatus, exitcode: i32, exception: &str) -> GenericResult {
        let mut first = false;
        self.result.send_if_modified(|r| {
            if r.is_some() {
                return false;
            }
            *r = Some(GenericResult {
                status: status as i32,
                exitcode,
                exception: exception.to_owned(),
                ..GenericResult::default()
            });
            first = true;
            true
        });
        if first {
            *self.finished_at.lock().expect("finished") = ids::now_f64();
            for p in self.execs.lock().expect("execs").values() {
                p.kill(9);
            }
            if let Some(p) = self.entrypoint() {
                p.kill(9);
            }
            for t in &self.tunnels {
                t.close();
            }
            self.sandbox.destroy();
        }
        self.result().unwrap_or_default()
    }

    /// Waits until it finishes, at most `limit`.
    async fn wait_finished(&self, limit: Duration) -> Option<GenericResult> {
        let mut rx = self.result.subscribe();
        let _ = tokio::time::timeout(limit, async {
            let _ = rx.wait_for(Option::is_some).await;
        })
        .await;
        self.result()
    }
}

/// A running sandbox counts as live; ending one (the emulator stopping) terminates it, and it
/// stays listed as finished until the emulator is gone.
impl SandboxEntry for ModalSandbox {
    fn is_live(&self) -> bool {
        self.is_running()
    }

    fn teardown(&self) {
        self.finish(GenericStatus::Terminated, 0, "the emulator stopped");
    }
}

/// What the control plane keeps besides the sandboxes (the shell's registry has those).
#[derive(Default)]
struct State {
    /// (environment, app name) → app id.
    apps: HashMap<(String, String), String>,
    tasks: HashMap<String, Arc<ModalSandbox>>,
    /// Issued `AuthTokenGet` tokens → exp.
    auth_tokens: HashMap<String, u64>,
    /// Issued router JWTs → (task id, exp).
    router_tokens: HashMap<String, (String, u64)>,
    /// `x-idempotency-key` of a create → the sandbox it created.
    created: HashMap<String, Arc<tokio::sync::OnceCell<String>>>,
    /// Image definitions by id (`ImageGetOrCreate`), for their `ENV` and `WORKDIR`.
    images: HashMap<String, api::Image>,
    /// Images `snapshot_filesystem` and `snapshot_directory` made, by id.
    snapshots: HashMap<String, SnapshotImage>,
    /// `TaskSnapshotDirectory`'s `snapshot_id` (a uuid per call, the same on the client's
    /// retries) → the image it made.
    dir_snapshot_ids: HashMap<String, String>,
    /// Ids of images `ImageDelete` removed (or whose ttl ran out): creating from one is
    /// `NOT_FOUND`.
    deleted_images: std::collections::HashSet<String>,
}

/// An image a snapshot made.
#[derive(Clone)]
struct SnapshotImage {
    content: Snapshotted,
    /// When it expires (seconds since the epoch); `None` for the client's `ttl=None`.
    expires_at: Option<u64>,
}

/// What a snapshot image holds.
#[derive(Clone)]
enum Snapshotted {
    /// `TaskSnapshotFilesystem`: the sandbox's filesystem over `base`, the image it ran (its
    /// `ENV` and `WORKDIR` stay).
    Filesystem {
        base: String,
        layer: execseam_emulator_kit::Snapshot,
    },
    /// `TaskSnapshotDirectory`: one directory's contents, for `mount_image`.
    Directory(execseam_emulator_kit::DirImage),
}

pub(crate) struct Shared {
    shell: Arc<Shell<Modal>>,
    faults: FaultHandle,
    lifetimes: Mutex<(Duration, Duration)>,
    /// How many bytes of each entrypoint stream are retained.
    entrypoint_retention: std::sync::atomic::AtomicUsize,
    state: Mutex<State>,
    /// The certificate of the tunnels' TLS endpoints.
    tls: tunnel::TunnelTls,
}

impl Shared {
    fn url(&self) -> String {
        self.shell.base_url().to_owned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("modal state")
    }

    fn sandbox(&self, id: &str) -> Result<Arc<ModalSandbox>, Status> {
        self.shell
            .sandboxes()
            .get(id)
            .ok_or_else(|| Status::not_found(format!("Sandbox {id} not found")))
    }

    /// What image `id` gives its processes: its base images' `ENV`/`WORKDIR`, then its own
    /// lines. An id the emulator never built (an `im-…` passed as is) gives nothing.
    fn image_config(&self, id: &str) -> Result<image::ImageConfig, image::BuildError> {
        let defaults: BTreeMap<String, String> = IMAGE_ENV
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let mut chain = Vec::new();
        {
            let st = self.lock();
            let mut next = Some(id.to_owned());
            while let Some(id) = next.take() {
                let Some(def) = st.images.get(&id) else { break };
                if chain.len() > 64 {
                    return Err(image::BuildError(
                        "the image's base chain is too deep".into(),
                    ));
                }
                // `FROM <tag>` names one of `base_images` (by `docker_tag`) or a registry image.
                let from = def
                    .dockerfile_commands
                    .iter()
                    .find_map(|l| {
                        let (w, rest) = l.trim().split_once(char::is_whitespace)?;
                        w.eq_ignore_ascii_case("FROM")
                            .then(|| rest.trim().to_owned())
                    })
                    .unwrap_or_default();
                next = def
                    .base_images
                    .iter()
                    .find(|b| b.docker_tag == from)
                    .map(|b| b.image_id.clone());
                chain.push(def.dockerfile_commands.clone());
            }
        }
        let mut config = image::ImageConfig::default();
        for lines in chain.iter().rev() {
            for line in lines {
                config.apply(line, &defaults)?;
            }
        }
        Ok(config)
    }

    /// Snapshots `sb`'s filesystem into a new image; its id.
    async fn snapshot_sandbox(
        &self,
        sb: &Arc<ModalSandbox>,
        expires_at: Option<u64>,
    ) -> Result<String, Status> {
        let sandbox = sb.sandbox.clone();
        let layer = tokio::task::spawn_blocking(move || sandbox.snapshot())
            .await
            .map_err(|e| Status::internal(format!("the snapshot task failed: {e}")))?
            .map_err(|e| Status::internal(format!("cannot snapshot the filesystem: {e}")))?;
        let content = Snapshotted::Filesystem {
            base: sb.image_id.clone(),
            layer,
        };
        Ok(self.add_snapshot(content, expires_at))
    }

    /// Keeps a snapshot image under a new `im-` id.
    fn add_snapshot(&self, content: Snapshotted, expires_at: Option<u64>) -> String {
        let id = ids::v1("im");
        let image = SnapshotImage {
            content,
            expires_at,
        };
        self.lock().snapshots.insert(id.clone(), image);
        id
    }

    /// `ImageDelete`: the image is gone for good (creating from it is `NOT_FOUND`); an id it
    /// never had is `NOT_FOUND`.
    fn delete_image(&self, id: &str) -> Result<(), Status> {
        let mut st = self.lock();
        let known = st.snapshots.remove(id).is_some() | st.images.remove(id).is_some();
        if !known {
            return Err(Status::not_found(format!("Image {id} not found")));
        }
        st.deleted_images.insert(id.to_owned());
        Ok(())
    }

    /// The snapshot image `id`, if it is one; a deleted or expired image is `NOT_FOUND`.
    fn snapshot_image(&self, id: &str) -> Result<Option<SnapshotImage>, Status> {
        let mut st = self.lock();
        if let Some(exp) = st.snapshots.get(id).and_then(|s| s.expires_at)
            && exp <= now_secs()
        {
            st.snapshots.remove(id);
            st.deleted_images.insert(id.to_owned());
        }
        if st.deleted_images.contains(id) {
            return Err(Status::not_found(format!("Image {id} not found")));
        }
        Ok(st.snapshots.get(id).cloned())
    }

    /// What `mount_image` can mount from image `id`: a directory snapshot. A filesystem
    /// snapshot or a built image is refused (mounting a whole image is not emulated: the
    /// emulator's images are the host's system); an unknown, deleted or expired one is
    /// `NOT_FOUND`.
    fn mountable(&self, id: &str) -> Result<execseam_emulator_kit::DirImage, Status> {
        match self.snapshot_image(id)?.map(|s| s.content) {
            Some(Snapshotted::Directory(image)) => Ok(image),
            Some(Snapshotted::Filesystem { .. }) => Err(Status::unimplemented(format!(
                "Image {id} is a filesystem snapshot: mounting one is not emulated (directory snapshots and Image.from_scratch() are)"
            ))),
            None if self.lock().images.contains_key(id) => Err(Status::unimplemented(format!(
                "Image {id} is a built image: mounting one is not emulated (directory snapshots and Image.from_scratch() are)"
            ))),
            None => Err(Status::not_found(format!("Image {id} not found"))),
        }
    }

    fn issue_auth_token(&self) -> String {
        let exp = now_secs() + self.lifetimes.lock().expect("lifetimes").0.as_secs();
        let t = ids::jwt(r#""sub":"emulator""#, exp);
        self.lock().auth_tokens.insert(t.clone(), exp);
        t
    }

    fn issue_router_token(&self, task_id: &str) -> String {
        let exp = now_secs() + self.lifetimes.lock().expect("lifetimes").1.as_secs();
        let t = ids::jwt(&format!(r#""task_id":"{task_id}""#), exp);
        self.lock()
            .router_tokens
            .insert(t.clone(), (task_id.to_owned(), exp));
        t
    }

    /// Router access for a task. The router is served on the emulator's own port; a request
    /// that came through a reverse proxy (`x-forwarded-host`, as the chaos proxy sets it) is
    /// given the proxy's address instead, so the router calls go through it too.
    fn access(&self, task_id: &str, forwarded: Option<&str>) -> api::CommandRouterAccess {
        api::CommandRouterAccess {
            jwt: self.issue_router_token(task_id),
            url: forwarded.map_or_else(|| self.url(), |h| format!("http://{h}")),
        }
    }

    async fn new_sandbox(
        &self,
        v2: bool,
        app_id: &str,
        def: &api::Sandbox,
        mut env: BTreeMap<String, String>,
        tags: Vec<api::SandboxTag>,
    ) -> Result<Arc<ModalSandbox>, Status> {
        if !self.lock().apps.values().any(|a| a == app_id) {
            return Err(Status::not_found(format!("App {app_id} not found")));
        }
        let timeout_secs = match def.timeout_secs {
            0 => DEFAULT_TIMEOUT_SECS,
            t if t > MAX_TIMEOUT_SECS => {
                return Err(Status::invalid_argument(format!(
                    "timeout must be at most {MAX_TIMEOUT_SECS} seconds"
                )));
            }
            t => t,
        };
        let snapshot = match self.snapshot_image(&def.image_id)?.map(|s| s.content) {
            Some(Snapshotted::Filesystem { base, layer }) => Some((base, layer)),
            // Inferred: a directory snapshot holds one directory's files, no system to boot;
            // its documented use is `mount_image` (modal 1.6.4 `sandbox/_sandbox.py`).
            Some(Snapshotted::Directory(_)) => {
                return Err(Status::failed_precondition(format!(
                    "Image {} is a directory snapshot: mount it with mount_image",
                    def.image_id
                )));
            }
            None => None,
        };
        let base = snapshot.as_ref().map_or(def.image_id.as_str(), |s| &s.0);
        let image = self
            .image_config(base)
            .map_err(|e| Status::failed_precondition(format!("Image {}: {e}", def.image_id)))?;
        // `Sandbox.create(workdir=)` wins over the image's WORKDIR, as `docker run -w` does.
        let workdir = def
            .workdir
            .clone()
            .or_else(|| image.workdir.clone())
            .unwrap_or_else(|| "/".to_owned());
        if !workdir.starts_with('/') {
            return Err(Status::invalid_argument(format!(
                "workdir must be an absolute path, got: {workdir}"
            )));
        }
        if let Some(e) = &def.environment_variables {
            env.extend(e.contents.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        if let Some(name) = &def.name {
            let taken = self
                .shell
                .sandboxes()
                .lock()
                .values()
                .any(|s| s.is_running() && s.app_id == app_id && s.name.as_ref() == Some(name));
            if taken {
                return Err(Status::already_exists(format!(
                    "A Sandbox named {name:?} is already running in this app"
                )));
            }
        }
        let (id, task_id) = if v2 {
            (ids::v2_sandbox(), ids::v2_task())
        } else {
            (ids::v1("sb"), ids::v1_task())
        };
        // Modal's image view: root, Debian's PATH (the python:*-slim images `debian_slim` builds
        // on), and Modal's own directory for the filesystem helper. The hostname is not
        // documented: inferred.
        // The image's ENV over those defaults; the sandbox's and each exec's env over both.
        let image_env = IMAGE_ENV
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .chain(image.env);
        let spec = SandboxSpec::new("modal", "modal", User::root(), image_env)
            .dirs([Dir::root("/__modal"), Dir::root("/__modal/.bin")]);
        let sandbox = match &snapshot {
            // A filesystem snapshot is an image: the new sandbox starts over its files.
            Some((_, layer)) => {
                Sandbox::create_from(id.clone(), spec, self.shell.sandboxing(), layer)
            }
            None => Sandbox::create(id.clone(), spec, self.shell.sandboxing()),
        }
        .map_err(|e| Status::internal(format!("cannot create the sandbox: {e}")))?;
        let dir = workdir.clone();
        sandbox
            .fs(move |fs| {
                use std::os::unix::fs::PermissionsExt;
                let helper = fs.path(FS_TOOLS_PATH);
                std::fs::write(&helper, FS_TOOLS)?;
                std::fs::set_permissions(&helper, std::fs::Permissions::from_mode(0o755))?;
                // The container runtime creates the sandbox's working directory.
                std::fs::create_dir_all(fs.path(&dir))
            })
            .await
            .map_err(|e| Status::internal(format!("cannot prepare the sandbox: {e}")))?;
        let mut tunnels = Vec::new();
        if let Some(api::sandbox::OpenPortsOneof::OpenPorts(open)) = &def.open_ports_oneof {
            for spec in &open.ports {
                match tunnel::Tunnel::open(&sandbox, spec, &self.tls).await {
                    Ok(t) => tunnels.push(t),
                    Err(e) => {
                        tunnels.iter().for_each(tunnel::Tunnel::close);
                        sandbox.destroy();
                        return Err(Status::invalid_argument(format!("open_ports: {e}")));
                    }
                }
            }
        }
        let (result, _) = watch::channel(None);
        let sb = Arc::new(ModalSandbox {
            id: id.clone(),
            task_id: task_id.clone(),
            v2,
            app_id: app_id.to_owned(),
            name: def.name.clone(),
            created_at: ids::now_f64(),
            image_id: def.image_id.clone(),
            timeout_secs,
            workdir,
            env,
            tags: Mutex::new(
                tags.into_iter()
                    .map(|t| (t.tag_name, t.tag_value))
                    .collect(),
            ),
            sandbox,
            execs: Mutex::new(HashMap::new()),
            entrypoint: std::sync::OnceLock::new(),
            result,
            finished_at: Mutex::new(0.0),
            last_active: Mutex::new(std::time::Instant::now()),
            tunnels,
            mounts: tokio::sync::Mutex::new(Vec::new()),
        });
        {
            let mut st = self.lock();
            self.shell.sandboxes().insert(id.clone(), sb.clone());
            st.tasks.insert(task_id, sb.clone());
        }
        // The lifetime, enforced by the server.
        let weak = Arc::downgrade(&sb);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(u64::from(timeout_secs))).await;
            if let Some(sb) = weak.upgrade() {
                sb.finish(GenericStatus::Timeout, 0, "Sandbox timed out");
            }
        });
        // The idle timeout: no command running and no router call for that long (inferred
        // from the client docs: "idle" means nothing executing and no I/O).
        if let Some(idle) = def.idle_timeout_secs.filter(|s| *s > 0) {
            let idle = Duration::from_secs(u64::from(idle));
            let weak = Arc::downgrade(&sb);
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    let Some(sb) = weak.upgrade() else { return };
                    if !sb.is_running() {
                        return;
                    }
                    if sb.busy() {
                        sb.touch();
                    } else if sb.last_active.lock().expect("active").elapsed() >= idle {
                        sb.finish(GenericStatus::IdleTimeout, 0, "Sandbox idle timeout");
                        return;
                    }
                }
            });
        }
        if !def.entrypoint_args.is_empty() {
            self.start_entrypoint(&sb, def.entrypoint_args.clone())
                .await?;
        }
        Ok(sb)
    }

    /// Runs `Sandbox.create(*args)`: the sandbox ends when it exits, with its code. Its stdout
    /// and stderr are kept (the most recent `entrypoint_retention` bytes of each) for
    /// `SandboxStdioReadV2`, its stdin is fed by `SandboxStdinWriteV2`.
    async fn start_entrypoint(
        &self,
        sb: &Arc<ModalSandbox>,
        argv: Vec<String>,
    ) -> Result<(), Status> {
        let spec = process::Spawn {
            argv,
            cwd: sb.workdir.clone(),
            env: exec_env(sb, &BTreeMap::new()),
            stdout: true,
            stderr: process::StderrTo::Pipe,
            timeout: None,
            retain: Some(
                self.entrypoint_retention
                    .load(std::sync::atomic::Ordering::Relaxed),
            ),
            pty: None,
        };
        let p = process::spawn(&sb.sandbox, "entrypoint", spec)
            .await
            .map_err(spawn_status)?;
        let _ = sb.entrypoint.set(p.clone());
        let weak = Arc::downgrade(sb);
        tokio::spawn(async move {
            let ended = process::wait(&p).await;
            if let Some(sb) = weak.upgrade() {
                match ended {
                    process::Ended::Code(0) => sb.finish(GenericStatus::Success, 0, ""),
                    process::Ended::Code(c) => sb.finish(GenericStatus::Failure, c, ""),
                    process::Ended::Signal(s) => sb.finish(GenericStatus::Failure, 128 + s, ""),
                };
            }
        });
        Ok(())
    }

    /// Takes `route`'s fault: latency is served here, the status faults become the error, the
    /// rest is returned for the handler to render after the request took effect.
    async fn fault(&self, route: &str) -> Result<Option<Fault>, Status> {
        match self.faults.take(route) {
            Some(Fault::Latency(d)) => {
                tokio::time::sleep(d).await;
                Ok(None)
            }
            Some(f) => match status_fault(f) {
                Some(s) => Err(s),
                None => Ok(Some(f)),
            },
            None => Ok(None),
        }
    }

    fn vanish(&self, sb: &ModalSandbox) {
        sb.finish(
            GenericStatus::InternalFailure,
            0,
            "emulated fault: the sandbox vanished",
        );
    }
}

fn now_secs() -> u64 {
    ids::now_f64() as u64
}

/// The environment of a process in `sb`: the image's, the sandbox's secrets, then `extra`.
fn exec_env(sb: &ModalSandbox, extra: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut env = sb.sandbox.exec().config().environment();
    env.extend(sb.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    env.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
    env
}

/// `SecretSource{env}` entries as one map; `SecretSource{secret_id}` must be a known secret, and
/// the emulator has none.
fn secret_env(sources: &[api::SecretSource]) -> Result<BTreeMap<String, String>, Status> {
    let mut env = BTreeMap::new();
    for s in sources {
        match &s.source {
            Some(api::secret_source::Source::Env(m)) => {
                env.extend(m.contents.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
            Some(api::secret_source::Source::SecretId(id)) => {
                return Err(Status::not_found(format!("Secret {id} not found")));
            }
            None => {}
        }
    }
    Ok(env)
}

fn spawn_status(e: process::SpawnError) -> Status {
    match e {
        process::SpawnError::NotFound(m) => Status::not_found(m),
        // Inferred, as NOT_FOUND above: the router spawns argv itself (the client's mock router
        // runs `create_subprocess_exec`, py/test/conftest.py), so EACCES fails the start.
        process::SpawnError::PermissionDenied(m) => Status::permission_denied(m),
        process::SpawnError::Other(m) => Status::internal(m),
    }
}

/// A status carrying Modal's error details (`grpc-status-details-bin` = `RPCStatus` whose
/// `details` are `Any`s with `type.modal.com/` type URLs, as `CustomProtoStatusDetailsCodec`
/// in `modal/_utils/grpc_utils.py` reads them).
fn with_retry_policy(code: tonic::Code, message: &str, retry_after_secs: f32) -> Status {
    let detail = api::RpcRetryPolicy { retry_after_secs };
    let status = api::RpcStatus {
        code: code as i32,
        message: message.to_owned(),
        details: vec![Any {
            type_url: "type.modal.com/modal.client.RPCRetryPolicy".into(),
            value: detail.encode_to_vec().into(),
        }],
    };
    Status::with_details(code, message, status.encode_to_vec().into())
}

/// The statuses a fault renders as before anything happens; `None` for the others.
fn status_fault(fault: Fault) -> Option<Status> {
    match fault {
        Fault::RateLimited { retry_after_secs } => Some(with_retry_policy(
            tonic::Code::ResourceExhausted,
            "emulated fault: rate limited",
            retry_after_secs as f32,
        )),
        Fault::Unavailable => Some(Status::unavailable(
            "emulated fault: the service is unavailable",
        )),
        Fault::AuthFailure => Some(Status::unauthenticated(
            "emulated fault: the credentials were rejected",
        )),
        _ => None,
    }
}

/// The Modal emulator ([`Provider`]); its typed test accessors are reached through
/// [`ModalEmulator`] (`Deref`).
pub struct Modal {
    shared: Arc<Shared>,
}

/// A running emulator.
pub type ModalEmulator = Emulator<Modal>;

/// What every route renders before anything happens.
const EARLY: &[&str] = &["429", "503", "auth", "latency"];
/// What the routes whose request takes effect before the answer render.
const LATE: &[&str] = execseam_emulator_kit::FAULTS_BUT_VANISH;

impl Provider for Modal {
    const NAME: &'static str = "modal";
    /// The routes of the module docs: every fault on `exec` (`TaskExecStart`) and `create`;
    /// the late faults too on `app`, `auth-token`, `image` and `terminate`; `cut` and `reset` on
    /// `stdio`, `cut` on `wait`; the early faults only on `access`, `lookup` and `stdin`.
    const FAULTS: Rendered = &[
        ("exec", FAULT_NAMES),
        ("create", FAULT_NAMES),
        ("app", LATE),
        ("auth-token", LATE),
        ("image", LATE),
        ("terminate", LATE),
        ("stdio", &["429", "503", "auth", "latency", "cut", "reset"]),
        ("wait", &["429", "503", "auth", "latency", "cut"]),
        ("access", EARLY),
        ("lookup", EARLY),
        ("stdin", EARLY),
    ];
    /// The token secret it accepts when none is configured (any non-empty one is).
    const PLACEHOLDER_TOKEN: &'static str = TOKEN_SECRET;
    const SCRATCH: &'static str = "/root/execseam-conformance";
    const MISSING_SANDBOX_ID: &'static str = "sb-01ARZ3NDEKTSV4RRFFQ69G5FAV";
    type Options = ();
    type Sandbox = ModalSandbox;
    /// The sandbox id.
    type Key = String;

    /// `options.token` is the token secret it accepts.
    async fn start(shell: Arc<Shell<Modal>>, (): ()) -> std::io::Result<(Modal, axum::Router)> {
        let shared = Arc::new(Shared {
            faults: shell.faults().clone(),
            shell,
            lifetimes: Mutex::new((Duration::from_secs(3600), Duration::from_secs(3600))),
            entrypoint_retention: std::sync::atomic::AtomicUsize::new(ENTRYPOINT_RETENTION),
            state: Mutex::new(State::default()),
            tls: tunnel::TunnelTls::generate()?,
        });
        const MAX: usize = 64 * 1024 * 1024;
        let control = ModalClientServer::new(control::Control {
            shared: shared.clone(),
        })
        .max_decoding_message_size(MAX)
        .max_encoding_message_size(MAX);
        let router =
            tcr::task_command_router_server::TaskCommandRouterServer::new(router::Router {
                shared: shared.clone(),
                starting: tokio::sync::Mutex::new(()),
            })
            .max_decoding_message_size(MAX)
            .max_encoding_message_size(MAX);
        let routes = tonic::service::Routes::new(control)
            .add_service(router)
            .into_axum_router()
            .layer(axum::middleware::from_fn(body_faults));
        Ok((Modal { shared }, routes))
    }

    /// The environment the official client (and our adapter's `from_env`) needs.
    fn env(&self, shell: &Shell<Modal>) -> Vec<(String, String)> {
        vec![
            ("MODAL_SERVER_URL".to_owned(), shell.base_url().to_owned()),
            ("MODAL_TOKEN_ID".to_owned(), TOKEN_ID.to_owned()),
            (
                "MODAL_TOKEN_SECRET".to_owned(),
                shell.token().advertised().to_owned(),
            ),
        ]
    }

    /// The tunnels' certificate ([`Modal::tunnel_ca_pem`]).
    fn tls_ca_pem(&self) -> Option<String> {
        Some(self.tunnel_ca_pem().to_owned())
    }
}

impl Modal {
    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.url()
            .trim_start_matches("http://")
            .parse()
            .expect("the base URL names a socket address")
    }

    /// `http://127.0.0.1:<port>`: `MODAL_SERVER_URL`, and the router URL it hands out.
    pub fn url(&self) -> String {
        self.shared.url()
    }

    /// The certificate (PEM) the tunnels' TLS endpoints present: what a client trusts to fetch
    /// a `Tunnel.url` (`https://127.0.0.1:<port>`), e.g. in a file named by `SSL_CERT_FILE`.
    pub fn tunnel_ca_pem(&self) -> &str {
        self.shared.tls.ca_pem()
    }

    /// The token secret a client must send.
    pub fn token_secret(&self) -> String {
        self.shared.shell.token().advertised().to_owned()
    }

    /// Sets how long the tokens it issues from now on live: `AuthTokenGet`'s and the router's.
    pub fn set_token_lifetimes(&self, auth: Duration, router: Duration) {
        *self.shared.lifetimes.lock().expect("lifetimes") = (auth, router);
    }

    /// Sets how many bytes of each entrypoint stream sandboxes created from now on retain.
    pub fn set_entrypoint_retention(&self, bytes: usize) {
        self.shared
            .entrypoint_retention
            .store(bytes, std::sync::atomic::Ordering::Relaxed);
    }

    /// A sandbox by id.
    pub fn sandbox(&self, id: &str) -> Option<Arc<ModalSandbox>> {
        self.shared.shell.sandboxes().get(id)
    }

    /// Every sandbox, in creation order.
    pub fn sandboxes(&self) -> Vec<Arc<ModalSandbox>> {
        let mut v = self.shared.shell.sandboxes().values();
        v.sort_by(|a, b| a.created_at.total_cmp(&b.created_at));
        v
    }

    /// Makes a sandbox disappear (as the `vanish` fault does).
    pub fn vanish(&self, id: &str) -> bool {
        match self.sandbox(id) {
            Some(sb) => {
                self.shared.vanish(&sb);
                true
            }
            None => false,
        }
    }
}
