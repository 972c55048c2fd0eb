//! Sandboxes, sessions and commands, and their JSON payloads (field names and optionality as
//! `validators.ts` (zod) and `api_client.py` (pydantic) check them).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};
use tokio::sync::watch;
use tokio::task::AbortHandle;

use execseam_emulator_kit::clock::hex_id;
use execseam_emulator_kit::{Dir, FaultHandle, Sandbox, SandboxEntry, SandboxSpec, Shell, User};

use super::{CWD, HOME, USER, Vercel};

const PATH: &str =
    "/vercel/runtimes/node24/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
pub(crate) const REGION: &str = "iad1";

/// The uid of `vercel-sandbox` (not documented; the image's first user).
pub const SANDBOX_UID: u32 = 1000;

/// `vercel-sandbox`, the user commands run as.
pub(crate) fn sandbox_user() -> User {
    User::new(USER, SANDBOX_UID, HOME)
}

/// Behaviour switches.
#[derive(Clone, Debug)]
pub struct VercelOptions {
    /// A session's lifetime when `create` gives no `timeout` (the mock's 300 000 ms).
    pub default_timeout: Duration,
}

impl Default for VercelOptions {
    fn default() -> Self {
        VercelOptions {
            default_timeout: Duration::from_millis(300_000),
        }
    }
}

/// Milliseconds since the Unix epoch (every timestamp of this API).
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// `se_…`, `cmd_…`: a prefix and 32 hex digits, as the official mock makes them.
pub(crate) fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", hex_id(32))
}

/// The options a sandbox was created with.
#[derive(Clone, Debug)]
pub(crate) struct Spec {
    pub(crate) project_id: String,
    pub(crate) persistent: bool,
    pub(crate) vcpus: u64,
    pub(crate) memory: u64,
    pub(crate) runtime: Option<String>,
    pub(crate) ports: Vec<u64>,
    pub(crate) tags: BTreeMap<String, String>,
    pub(crate) env: BTreeMap<String, String>,
    /// `snapshotExpiration` (ms, 0 = never): the default lifetime of its snapshots.
    pub(crate) snapshot_expiration: Option<u64>,
}

/// One emulated sandbox: a name, its options, its current session, and the filesystem that
/// outlives its sessions.
pub struct VercelSandbox {
    pub(crate) name: String,
    pub(crate) spec: Spec,
    pub(crate) created_at: u64,
    pub(crate) timeout_ms: Mutex<u64>,
    /// The filesystem: kept across sessions when `persistent`, a fresh one per session
    /// otherwise.
    pub(crate) root: Mutex<Arc<Sandbox>>,
    pub(crate) inner: Mutex<SandboxInner>,
}

pub(crate) struct SandboxInner {
    pub(crate) updated_at: u64,
    pub(crate) status_updated_at: u64,
    pub(crate) session: Arc<Session>,
    /// The latest snapshot taken of it, or the one it was created from (`currentSnapshotId`).
    pub(crate) current_snapshot_id: Option<String>,
}

execseam_emulator_kit::debug_fields!(VercelSandbox: name);

impl VercelSandbox {
    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The current session's id.
    pub fn session_id(&self) -> String {
        self.session().id.clone()
    }

    /// The sandbox behind it (its root outlives sessions when it is persistent).
    pub fn root(&self) -> Arc<Sandbox> {
        self.root.lock().expect("root").clone()
    }

    pub(crate) fn session(&self) -> Arc<Session> {
        self.inner.lock().expect("sandbox").session.clone()
    }

    pub(crate) fn payload(&self) -> Value {
        let inner = self.inner.lock().expect("sandbox");
        let session = &inner.session;
        let mut m = Map::new();
        m.insert("name".into(), json!(self.name));
        m.insert("persistent".into(), json!(self.spec.persistent));
        m.insert("region".into(), json!(REGION));
        m.insert("vcpus".into(), json!(self.spec.vcpus));
        m.insert("memory".into(), json!(self.spec.memory));
        if let Some(r) = &self.spec.runtime {
            m.insert("runtime".into(), json!(r));
        }
        m.insert(
            "timeout".into(),
            json!(*self.timeout_ms.lock().expect("timeout")),
        );
        m.insert("createdAt".into(), json!(self.created_at));
        m.insert("updatedAt".into(), json!(inner.updated_at));
        m.insert("currentSessionId".into(), json!(session.id));
        m.insert("status".into(), json!(session.status().as_str()));
        m.insert("statusUpdatedAt".into(), json!(inner.status_updated_at));
        m.insert("cwd".into(), json!(CWD));
        m.insert("projectId".into(), json!(self.spec.project_id));
        if let Some(id) = &inner.current_snapshot_id {
            m.insert("currentSnapshotId".into(), json!(id));
        }
        if let Some(ms) = self.spec.snapshot_expiration {
            m.insert("snapshotExpiration".into(), json!(ms));
        }
        if !self.spec.tags.is_empty() {
            m.insert("tags".into(), json!(self.spec.tags));
        }
        Value::Object(m)
    }

    /// The subdomain of the route to `port`: `{name}-{port}`, the name lowercased with every
    /// other character a `-`.
    fn subdomain(&self, port: u64) -> String {
        let base: String = self
            .name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .collect();
        format!("{base}-{port}")
    }

    /// The routes of the ports declared at create. The service answers
    /// `https://{subdomain}.vercel.run`, which cannot resolve offline; here the URL is
    /// `http://{subdomain}.vercel.localhost:<emulator port>` (`base` is the emulator's URL),
    /// served by [`route_proxy`](super::routes::route_proxy). The Python SDK's `routes` hands `url`
    /// on as is; the TS SDK's `domain(port)` builds `https://{subdomain}.vercel.run` from the
    /// subdomain, which offline is reached at the emulator with `Host: {subdomain}.vercel.localhost`.
    pub(crate) fn routes(&self, base: &str) -> Value {
        let authority = base.rsplit("://").next().unwrap_or(base);
        let emulator_port = authority.rsplit_once(':').map_or("80", |(_, p)| p);
        Value::Array(
            self.spec
                .ports
                .iter()
                .map(|&p| {
                    let sub = self.subdomain(p);
                    let url = format!("http://{sub}.{ROUTE_DOMAIN}:{emulator_port}");
                    json!({"url": url, "subdomain": sub, "port": p})
                })
                .collect(),
        )
    }

    /// The declared port whose route has this subdomain.
    pub(crate) fn route_port(&self, subdomain: &str) -> Option<u16> {
        self.spec
            .ports
            .iter()
            .copied()
            .find(|&p| self.subdomain(p) == subdomain)
            .and_then(|p| u16::try_from(p).ok())
    }
}

/// The domain of the emulator's routes (RFC 6761 lets `*.localhost` resolve to loopback).
pub(crate) const ROUTE_DOMAIN: &str = "vercel.localhost";

/// A session's status (`Session.status` in `validators.ts`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    Running,
    Stopped,
}

impl Status {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Status::Running => "running",
            Status::Stopped => "stopped",
        }
    }
}

/// One running instance of a sandbox.
pub(crate) struct Session {
    pub(crate) id: String,
    pub(crate) sandbox_name: String,
    pub(crate) project_id: String,
    pub(crate) vcpus: u64,
    pub(crate) memory: u64,
    pub(crate) runtime: Option<String>,
    pub(crate) root: Arc<Sandbox>,
    pub(crate) env: BTreeMap<String, String>,
    pub(crate) requested_at: u64,
    pub(crate) inner: Mutex<SessionInner>,
    pub(crate) commands: Mutex<Vec<Arc<CommandRecord>>>,
    /// `true` once stopped: running commands end, streams report it.
    pub(crate) stopped: watch::Sender<bool>,
}

pub(crate) struct SessionInner {
    pub(crate) status: Status,
    pub(crate) timeout_ms: u64,
    pub(crate) updated_at: u64,
    pub(crate) stopped_at: Option<u64>,
    pub(crate) timer: Option<AbortHandle>,
}

impl Session {
    pub(crate) fn status(&self) -> Status {
        self.inner.lock().expect("session").status
    }

    pub(crate) fn is_running(&self) -> bool {
        self.status() == Status::Running
    }

    pub(crate) fn payload(&self) -> Value {
        let inner = self.inner.lock().expect("session");
        let mut m = Map::new();
        m.insert("id".into(), json!(self.id));
        m.insert("memory".into(), json!(self.memory));
        m.insert("vcpus".into(), json!(self.vcpus));
        m.insert("region".into(), json!(REGION));
        if let Some(r) = &self.runtime {
            m.insert("runtime".into(), json!(r));
        }
        m.insert("timeout".into(), json!(inner.timeout_ms));
        m.insert("status".into(), json!(inner.status.as_str()));
        m.insert("requestedAt".into(), json!(self.requested_at));
        m.insert("startedAt".into(), json!(self.requested_at));
        if let Some(t) = inner.stopped_at {
            m.insert("requestedStopAt".into(), json!(t));
            m.insert("stoppedAt".into(), json!(t));
            m.insert(
                "duration".into(),
                json!(t.saturating_sub(self.requested_at)),
            );
        }
        m.insert("createdAt".into(), json!(self.requested_at));
        m.insert("cwd".into(), json!(CWD));
        m.insert("updatedAt".into(), json!(inner.updated_at));
        m.insert("sourceSandboxName".into(), json!(self.sandbox_name));
        m.insert("projectId".into(), json!(self.project_id));
        Value::Object(m)
    }

    /// Stops the session: every running command is killed (their streams end with an in-band
    /// error line). Idempotent; returns whether it was running.
    pub(crate) fn stop(&self) -> bool {
        let timer = {
            let mut inner = self.inner.lock().expect("session");
            if inner.status != Status::Running {
                return false;
            }
            let now = now_ms();
            inner.status = Status::Stopped;
            inner.stopped_at = Some(now);
            inner.updated_at = now;
            inner.timer.take()
        };
        if let Some(t) = timer {
            t.abort();
        }
        let _ = self.stopped.send(true);
        for c in self.commands.lock().expect("commands").iter() {
            c.abort(&self.root);
        }
        true
    }

    pub(crate) fn command(&self, id: &str) -> Option<Arc<CommandRecord>> {
        self.commands
            .lock()
            .expect("commands")
            .iter()
            .find(|c| c.id == id)
            .cloned()
    }
}

/// Which stream a log line belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// How a command ended (or that it has not).
#[derive(Clone, Debug, Default)]
pub(crate) struct Progress {
    /// Log lines so far.
    pub(crate) lines: usize,
    /// `Some` once the command exited.
    pub(crate) exit: Option<i32>,
    pub(crate) duration_ms: Option<u64>,
    /// The session stopped under the command (its streams end with an error line).
    pub(crate) lost: bool,
}

/// One command and everything it printed.
pub(crate) struct CommandRecord {
    pub(crate) id: String,
    pub(crate) name: String,
    pub(crate) args: Vec<String>,
    pub(crate) cwd: String,
    pub(crate) session_id: String,
    pub(crate) started_at: u64,
    pub(crate) logs: Mutex<Vec<(Stream, String)>>,
    pub(crate) progress: watch::Sender<Progress>,
    pub(crate) stdin: Option<tokio::sync::Mutex<super::cmd::StdinPipe>>,
    /// The process group on the host, once started.
    pub(crate) host_pid: Mutex<Option<u32>>,
    pub(crate) task: Mutex<Option<AbortHandle>>,
}

impl CommandRecord {
    pub(crate) fn payload(&self) -> Value {
        let p = self.progress.borrow();
        let mut m = Map::new();
        m.insert("id".into(), json!(self.id));
        m.insert("name".into(), json!(self.name));
        m.insert("args".into(), json!(self.args));
        m.insert("cwd".into(), json!(self.cwd));
        m.insert("sessionId".into(), json!(self.session_id));
        m.insert("exitCode".into(), json!(p.exit));
        if let Some(d) = p.duration_ms {
            m.insert("durationMs".into(), json!(d));
        }
        m.insert("startedAt".into(), json!(self.started_at));
        Value::Object(m)
    }

    /// The first NDJSON line: the command as started (`exitCode: null`).
    pub(crate) fn started_payload(&self) -> Value {
        let mut v = self.payload();
        v["exitCode"] = Value::Null;
        v.as_object_mut().expect("object").remove("durationMs");
        v
    }

    pub(crate) fn push_log(&self, stream: Stream, data: String) {
        if data.is_empty() {
            return;
        }
        let n = {
            let mut logs = self.logs.lock().expect("logs");
            logs.push((stream, data));
            logs.len()
        };
        self.progress.send_modify(|p| p.lines = n);
    }

    pub(crate) fn log_line(&self, i: usize) -> Option<(Stream, String)> {
        self.logs.lock().expect("logs").get(i).cloned()
    }

    pub(crate) fn finish(&self, exit: i32) {
        let d = now_ms().saturating_sub(self.started_at);
        self.progress.send_modify(|p| {
            if p.exit.is_none() {
                p.exit = Some(exit);
                p.duration_ms = Some(d);
            }
        });
    }

    /// Kills the command because its session stopped.
    pub(crate) fn abort(&self, root: &Sandbox) {
        if let Some(pid) = *self.host_pid.lock().expect("pid") {
            let _ = root.signal_group(pid, libc::SIGKILL);
        }
        if let Some(t) = self.task.lock().expect("task").take() {
            t.abort();
        }
        self.progress.send_modify(|p| {
            if p.exit.is_none() {
                p.lost = true;
            }
        });
    }

    pub(crate) fn is_done(&self) -> bool {
        let p = self.progress.borrow();
        p.exit.is_some() || p.lost
    }
}

/// Deleting a sandbox stops its session and removes its filesystem.
impl SandboxEntry for VercelSandbox {
    fn teardown(&self) {
        self.session().stop();
        self.root().destroy();
    }
}

pub(crate) struct State {
    pub(crate) shell: Arc<Shell<Vercel>>,
    pub(crate) faults: FaultHandle,
    pub(crate) options: VercelOptions,
    /// Every session ever started (stopped ones answer 410).
    pub(crate) sessions: Mutex<BTreeMap<String, Arc<Session>>>,
    /// Snapshots by id (deleted and expired ones are gone).
    pub(crate) snapshots: Mutex<BTreeMap<String, Arc<super::snapshot::VercelSnapshot>>>,
}

impl State {
    pub(crate) fn new(shell: Arc<Shell<Vercel>>, options: VercelOptions) -> State {
        State {
            faults: shell.faults().clone(),
            shell,
            options,
            sessions: Mutex::new(BTreeMap::new()),
            snapshots: Mutex::new(BTreeMap::new()),
        }
    }

    pub(crate) fn sandbox(&self, name: &str) -> Option<Arc<VercelSandbox>> {
        self.shell.sandboxes().lock().get(name).cloned()
    }

    pub(crate) fn names(&self) -> Vec<String> {
        self.shell.sandboxes().keys()
    }

    pub(crate) fn session(&self, id: &str) -> Option<Arc<Session>> {
        self.sessions.lock().expect("sessions").get(id).cloned()
    }

    /// The docs' system specifications: commands run as `vercel-sandbox` (uid inferred: the
    /// image's first user, 1000) in `/vercel/sandbox`, which it owns; `sudo: true` runs them as
    /// root.
    fn sandbox_spec(name: &str) -> SandboxSpec {
        let user = sandbox_user();
        let hostname = SandboxSpec::hostname_of(name);
        SandboxSpec::new(
            "vercel",
            &hostname,
            user.clone(),
            [("SHELL", "/bin/bash"), ("PATH", PATH)],
        )
        .other_users([User::root()])
        .dirs([Dir::root("/vercel"), Dir::owned(CWD, &user, 0o755)])
    }

    /// Creates a sandbox and its first session, its filesystem as `from` left it if given.
    pub(crate) fn create(
        self: &Arc<Self>,
        name: String,
        spec: Spec,
        timeout_ms: u64,
        from: Option<&super::snapshot::VercelSnapshot>,
    ) -> std::io::Result<Option<Arc<VercelSandbox>>> {
        let mut all = self.shell.sandboxes().lock();
        if all.contains_key(&name) {
            return Ok(None);
        }
        let sandbox_spec = Self::sandbox_spec(&name);
        let root = match from {
            Some(snap) => Sandbox::create_from(
                name.clone(),
                sandbox_spec,
                self.shell.sandboxing(),
                &snap.layer,
            )?,
            None => Sandbox::create(name.clone(), sandbox_spec, self.shell.sandboxing())?,
        };
        let session = self.new_session(&name, &spec, &root, timeout_ms);
        let now = now_ms();
        let sb = Arc::new(VercelSandbox {
            name: name.clone(),
            spec,
            created_at: now,
            timeout_ms: Mutex::new(timeout_ms),
            root: Mutex::new(root),
            inner: Mutex::new(SandboxInner {
                updated_at: now,
                status_updated_at: now,
                session,
                current_snapshot_id: from.map(|s| s.id.clone()),
            }),
        });
        all.insert(name, sb.clone());
        Ok(Some(sb))
    }

    fn new_session(
        self: &Arc<Self>,
        name: &str,
        spec: &Spec,
        root: &Arc<Sandbox>,
        timeout_ms: u64,
    ) -> Arc<Session> {
        let now = now_ms();
        let (stopped, _) = watch::channel(false);
        let session = Arc::new(Session {
            id: new_id("se"),
            sandbox_name: name.to_owned(),
            project_id: spec.project_id.clone(),
            vcpus: spec.vcpus,
            memory: spec.memory,
            runtime: spec.runtime.clone(),
            root: root.clone(),
            env: spec.env.clone(),
            requested_at: now,
            inner: Mutex::new(SessionInner {
                status: Status::Running,
                timeout_ms,
                updated_at: now,
                stopped_at: None,
                timer: None,
            }),
            commands: Mutex::new(Vec::new()),
            stopped,
        });
        self.arm_timeout(&session);
        self.sessions
            .lock()
            .expect("sessions")
            .insert(session.id.clone(), session.clone());
        session
    }

    /// (Re)arms the session's lifetime: it stops `timeout` ms after it started.
    pub(crate) fn arm_timeout(&self, session: &Arc<Session>) {
        let mut inner = session.inner.lock().expect("session");
        if let Some(t) = inner.timer.take() {
            t.abort();
        }
        let end = session.requested_at + inner.timeout_ms;
        let wait = Duration::from_millis(end.saturating_sub(now_ms()));
        let weak = Arc::downgrade(session);
        let task = tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            if let Some(s) = weak.upgrade() {
                // Take the timer out first, so `stop` does not abort this very task.
                s.inner.lock().expect("session").timer = None;
                s.stop();
            }
        });
        inner.timer = Some(task.abort_handle());
    }

    /// `GET /v2/sandboxes/{name}?resume=true` on a stopped sandbox: a new session over the same
    /// filesystem when the sandbox is persistent (the default), over a fresh one otherwise.
    pub(crate) fn resume(self: &Arc<Self>, sb: &Arc<VercelSandbox>) -> bool {
        if sb.session().is_running() {
            return false;
        }
        let timeout = *sb.timeout_ms.lock().expect("timeout");
        let mut root = sb.root();
        if !sb.spec.persistent {
            // "Non-persistent sandboxes discard their filesystem when the session ends"
            // (vercel.com/docs/sandbox/concepts/persistent-sandboxes): a fresh root.
            root.destroy();
            match Sandbox::create(
                sb.name.clone(),
                Self::sandbox_spec(&sb.name),
                self.shell.sandboxing(),
            ) {
                Ok(fresh) => {
                    *sb.root.lock().expect("root") = fresh.clone();
                    root = fresh;
                }
                // No fresh root (the host refused): the sandbox stays stopped.
                Err(_) => return false,
            }
        }
        let session = self.new_session(&sb.name, &sb.spec, &root, timeout);
        let mut inner = sb.inner.lock().expect("sandbox");
        let now = now_ms();
        inner.session = session;
        inner.updated_at = now;
        inner.status_updated_at = now;
        true
    }

    /// Deletes a sandbox: its session stops, its filesystem goes.
    pub(crate) fn delete(&self, name: &str) -> Option<Arc<VercelSandbox>> {
        let sb = self.shell.sandboxes().remove(name)?;
        sb.teardown();
        Some(sb)
    }

    /// Stops every session (the sandboxes themselves are the shell's).
    pub(crate) fn stop_sessions(&self) {
        for s in std::mem::take(&mut *self.sessions.lock().expect("sessions")).into_values() {
            s.stop();
        }
    }
}
