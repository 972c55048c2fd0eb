//! [`KubernetesExec`]: one sandbox (a claim's, a Sandbox's or a plain pod), every command a
//! `pods/exec` in its pod.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use execseam_adapter_kit::degrade::{StderrGate, WrapOptions};
use execseam_adapter_kit::exec_span;
use execseam_adapter_kit::retry::after_submit;
use execseam_adapter_kit::{id, size};
use execseam_core::{
    BoxFuture, Command, Error, ErrorKind, Event, EventStream, Exec, ExecStream, Exit, Output,
    Ownership, Retry, Sandbox,
};
use tokio::sync::Mutex;

use crate::PROVIDER;
use crate::channel::{self, ExecRequest, Frame, Opened, Protocol, Session};
use crate::client::{Api, adapter};
use crate::config::{ExecPath, Mode};
use crate::error::exec_refused;
use crate::lifecycle;
use crate::script::{self, Plan};

/// What the provider's handles share: the API connection and what the server said about its
/// exec protocol.
pub(crate) struct Shared {
    pub(crate) api: Api,
    /// The channel protocol the server chose last (0: not known yet).
    protocol: AtomicU8,
}

impl Shared {
    pub(crate) fn new(api: Api) -> Shared {
        Shared {
            api,
            protocol: AtomicU8::new(0),
        }
    }

    fn protocol(&self) -> Option<Protocol> {
        match self.protocol.load(Ordering::Relaxed) {
            5 => Some(Protocol::V5),
            4 => Some(Protocol::V4),
            _ => None,
        }
    }

    fn learn(&self, p: Protocol) {
        let v = match p {
            Protocol::V5 => 5,
            Protocol::V4 => 4,
        };
        self.protocol.store(v, Ordering::Relaxed);
    }
}

/// Where commands run: a pod and (maybe) a container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Target {
    pub namespace: String,
    pub pod: String,
    pub container: Option<String>,
    /// The pod's UID when it was looked up (a pod recreated under the same name is another).
    pub uid: Option<String>,
}

/// A sandbox: a SandboxClaim (claim mode), a Sandbox (sandbox mode) or a Pod (pod mode), named
/// by [`id`](Sandbox::id); every command is a `pods/exec` in its pod. Cheap to clone.
#[derive(Clone)]
pub struct KubernetesExec {
    inner: Arc<Inner>,
}

struct Inner {
    shared: Arc<Shared>,
    id: String,
    mode: Mode,
    /// The pod, found on first use (a claim's pod is its bound Sandbox's).
    target: Mutex<Option<Target>>,
    ownership: Ownership,
    /// Terminals on the API server's `tty` exec this handle holds (`terminal.rs`).
    terminals: execseam_adapter_kit::attached::Terminals,
    /// What the pod's `execve` takes, asked once.
    arg_max: size::ArgMax,
}

execseam_adapter_kit::debug_fields!(self => KubernetesExec {
    id: self.inner.id,
    mode: self.inner.mode,
    owned: self.inner.ownership.owned(),
});

impl KubernetesExec {
    pub(crate) fn new(
        shared: Arc<Shared>,
        id: String,
        mode: Mode,
        target: Option<Target>,
        ownership: Ownership,
    ) -> KubernetesExec {
        KubernetesExec {
            inner: Arc::new(Inner {
                shared,
                id,
                mode,
                target: Mutex::new(target),
                ownership,
                terminals: Default::default(),
                arg_max: Default::default(),
            }),
        }
    }

    /// The sandbox's id: the claim's, the Sandbox's or the Pod's name.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The pod commands run in (looked up on first use).
    pub async fn pod(&self) -> Result<String, Error> {
        Ok(self.target().await?.pod)
    }

    /// Suspends the sandbox: `spec.operatingMode: Suspended` on its Sandbox (claim and sandbox
    /// modes), then waits until the controller reports it suspended (its pod deleted, the
    /// Sandbox and its volumes kept): what [`Provider::pause`](execseam_core::Provider::pause)
    /// does by id.
    pub async fn suspend(&self) -> Result<(), Error> {
        self.set_suspended(true).await
    }

    /// Resumes a suspended sandbox: `spec.operatingMode: Running`, then waits until it is Ready
    /// (a new pod under the same name, with a new IP). A provider extra, as
    /// [`suspend`](Self::suspend).
    pub async fn resume(&self) -> Result<(), Error> {
        self.set_suspended(false).await
    }

    /// Sets the operating mode, waits for the controller to report it, and forgets the pod
    /// (resolved again on the next command).
    async fn set_suspended(&self, suspended: bool) -> Result<(), Error> {
        let api = &self.inner.shared.api;
        lifecycle::set_operating_mode(api, self.inner.mode, &self.inner.id, suspended).await?;
        self.forget_target().await;
        Ok(())
    }

    /// The channel protocol the API server chose on the last exec, if any ran yet.
    pub fn protocol(&self) -> Option<Protocol> {
        self.inner.shared.protocol()
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.inner.shared
    }

    pub(crate) fn terminals(&self) -> &execseam_adapter_kit::attached::Terminals {
        &self.inner.terminals
    }

    pub(crate) async fn target(&self) -> Result<Target, Error> {
        let mut t = self.inner.target.lock().await;
        if let Some(t) = t.as_ref() {
            return Ok(t.clone());
        }
        let found =
            lifecycle::resolve(&self.inner.shared.api, self.inner.mode, &self.inner.id).await?;
        *t = Some(found.clone());
        Ok(found)
    }

    async fn forget_target(&self) {
        *self.inner.target.lock().await = None;
    }

    /// What every command is checked for before any request: its size against the pod's own
    /// `execve` limit (asked once, `size::ArgMax`: the container runtime's or image's stack
    /// limit sets it), and the sandbox not destroyed.
    pub(crate) async fn admit(&self, command: &Command) -> Result<(), Error> {
        let arg_max = &self.inner.arg_max;
        (arg_max.check_in(PROVIDER, command, &crate::SIZE_LIMIT, self)).await?;
        if self.inner.ownership.is_destroyed() {
            return Err(adapter(
                ErrorKind::NotFound,
                Retry::Never,
                "exec",
                format!("sandbox {} was destroyed", self.inner.id),
            ));
        }
        Ok(())
    }

    /// The limit on what a pod execs after wrapping: its own once asked.
    pub(crate) fn wire_limit(&self) -> size::SizeLimit {
        self.inner.arg_max.limit_or(&crate::SIZE_LIMIT)
    }

    /// The pod when commands take the sandboxd path (`EXECSEAM_KUBERNETES_EXEC=sandboxd`).
    async fn sandboxd(&self, command: &Command) -> Result<Option<Target>, Error> {
        if self.inner.shared.api.config().exec_path != ExecPath::Sandboxd {
            return Ok(None);
        }
        self.admit(command).await?;
        self.target().await.map(Some)
    }

    async fn start(&self, command: Command) -> Result<Run, Error> {
        self.admit(&command).await?;
        let shared = &self.inner.shared;
        let config = shared.api.config();
        let tag = config.remote_kill.then(|| id::random_id(32));
        let needs_close = !command.stdin().is_empty() || !command.env().is_empty();
        let mut target = self.target().await?;
        let mut retried_pod = false;
        let mut retried_protocol = false;
        loop {
            let known = shared.protocol();
            // Stdin that must end needs v5 (or, once the server is known to speak only v4, the
            // wrapper that reads a known length): offer only v5 until then, so that a v4-only
            // server refuses the upgrade (nothing runs) instead of running a command whose stdin
            // can never end.
            let (assume, mut offers): (Protocol, &[Protocol]) = match known {
                Some(Protocol::V4) => (Protocol::V4, &[Protocol::V5, Protocol::V4]),
                _ if needs_close => (Protocol::V5, &[Protocol::V5]),
                _ => (Protocol::V5, &[Protocol::V5, Protocol::V4]),
            };
            let request_of = |plan: &Plan| {
                ExecRequest {
                    namespace: &target.namespace,
                    pod: &target.pod,
                    container: target.container.as_deref(),
                    argv: &plan.argv,
                    stdin: plan.stdin.is_some(),
                    tty: false,
                }
                .path()
            };
            let mut plan = script::plan(&command, assume, tag.as_deref(), &config.temp_dir)?;
            let mut path = request_of(&plan);
            if path.len() > script::MAX_URL {
                // Too long for a URL: the command rides on stdin behind a fixed wrapper (which
                // needs stdin to end: v5, or the v4 wrapper once the server is known to be v4).
                if known != Some(Protocol::V4) && offers != [Protocol::V5] {
                    offers = &[Protocol::V5];
                }
                plan = script::plan_as(&command, assume, tag.as_deref(), &config.temp_dir, true)?;
                path = request_of(&plan);
            }
            size::check_wire(PROVIDER, &plan.argv, &self.wire_limit())?;
            // Armed before the upgrade is sent: the command starts when the server upgrades,
            // before the client has read the answer, so an exec dropped in between has a
            // running command only the tag can find. A refusal ran nothing: disarmed. An
            // upgrade that failed is killed by the tag first when it may have reached the
            // server (`Unsafe`), then returned ([`Cleanup::upgrade_failed`]).
            let mut cleanup = Cleanup::new(tag.clone().map(|tag| Kill {
                shared: shared.clone(),
                target: target.clone(),
                tag,
            }));
            let opened = channel::open(&shared.api, &path, offers, "exec").await;
            match opened {
                Err(e) => return Err(cleanup.upgrade_failed(e).await),
                Ok(Opened::Socket(socket)) => {
                    shared.learn(socket.protocol);
                    return Ok(Run::new(shared.clone(), target, socket, plan, cleanup));
                }
                Ok(Opened::Refused(answer)) => {
                    cleanup.disarm();
                    // x/net/websocket answers a protocol it does not speak with a bare 403
                    // (the kubelet's server without the apiserver's v5 translator).
                    let no_v5 = offers == [Protocol::V5]
                        && answer.status == 403
                        && serde_json::from_slice::<crate::wire::Status>(&answer.body).is_err();
                    if no_v5 && !retried_protocol {
                        retried_protocol = true;
                        shared.learn(Protocol::V4);
                        continue;
                    }
                    if answer.status == 404 && self.inner.mode != Mode::Pod && !retried_pod {
                        // The pod may have been replaced (a resumed sandbox gets a new pod).
                        retried_pod = true;
                        self.forget_target().await;
                        let again = self.target().await?;
                        if again != target {
                            target = again;
                            continue;
                        }
                    }
                    return Err(exec_refused(&answer, &target.pod));
                }
            }
        }
    }

    /// Runs `command` to its exit.
    async fn run(&self, command: Command) -> Result<Output, Error> {
        if let Some(target) = self.sandboxd(&command).await? {
            return crate::sandboxd::run(&self.inner.shared, &target, command).await;
        }
        // The stream's collect: the output at the exit, or the error with what came before it.
        event_stream(self.start(command).await?).collect().await
    }
}

/// One running exec.
struct Run {
    shared: Arc<Shared>,
    target: Target,
    session: Session,
    wrap: Option<WrapOptions>,
    gate: StderrGate,
    /// An event ready to be returned next (the exit after held stderr).
    pending: Option<Event>,
    cleanup: Cleanup,
    done: bool,
}

impl Run {
    fn new(
        shared: Arc<Shared>,
        target: Target,
        socket: channel::Socket,
        plan: Plan,
        cleanup: Cleanup,
    ) -> Run {
        let wrap = plan.wrapped.then(WrapOptions::default);
        let gate = match &wrap {
            Some(w) => StderrGate::new(w),
            None => StderrGate::open(),
        };
        let idle = shared.api.config().idle_timeout;
        Run {
            shared,
            target,
            session: Session::start(socket, plan.stdin, idle),
            wrap,
            gate,
            pending: None,
            cleanup,
            done: false,
        }
    }

    async fn next_event(&mut self) -> Result<Event, Error> {
        if let Some(e) = self.pending.take() {
            if matches!(e, Event::Exit(_)) {
                self.done = true;
            }
            return Ok(e);
        }
        loop {
            let frame = match self.session.next("exec").await {
                Ok(f) => f,
                Err(e) => {
                    self.done = true;
                    if self.session.status_seen() {
                        // The server reported the exec's end (an error status): nothing to kill.
                        self.cleanup.disarm();
                    } else {
                        self.cleanup.run_now().await;
                    }
                    return Err(after_submit(e));
                }
            };
            match frame {
                Frame::Stdout(b) => return Ok(Event::Stdout(b)),
                Frame::Stderr(b) => {
                    if let Some(b) = self.gate.push(b) {
                        return Ok(Event::Stderr(b));
                    }
                }
                Frame::Exit(exit) => {
                    self.cleanup.disarm();
                    if matches!(exit, Exit::Code(137 | 143))
                        && let Some(e) = self.pod_gone(exit).await
                    {
                        self.done = true;
                        return Err(e);
                    }
                    let held = self.gate.finish(exit);
                    let checked = match &self.wrap {
                        Some(w) => w.check(held),
                        None => Ok(held),
                    };
                    let out = match checked {
                        Ok(out) => out,
                        Err(e) => {
                            self.done = true;
                            return Err(e.with_provider(PROVIDER));
                        }
                    };
                    if out.stderr.is_empty() {
                        self.done = true;
                        return Ok(Event::Exit(exit));
                    }
                    self.pending = Some(Event::Exit(exit));
                    return Ok(Event::Stderr(out.stderr));
                }
            }
        }
    }
}

impl Run {
    /// On a 137/143 exit, whether the pod went away under the command (deleted, or being
    /// deleted): then the signal was the pod's end, not the command's own, and the result is an
    /// error (the Docker adapter reads its container's state the same way).
    async fn pod_gone(&self, exit: Exit) -> Option<Error> {
        let gone = pod_state(&self.shared, &self.target).await;
        gone.then(|| {
            adapter(
                ErrorKind::NotFound,
                Retry::Unsafe,
                "exec",
                format!(
                    "pod {} was deleted while the command ran (it ended with {exit:?})",
                    self.target.pod
                ),
            )
        })
    }
}

/// Whether the pod is gone or being deleted (a failed lookup counts as not gone: the exit
/// stands).
pub(crate) async fn pod_state(shared: &Shared, target: &Target) -> bool {
    let path = format!(
        "/api/v1/namespaces/{}/pods/{}",
        execseam_adapter_kit::text::escape_path_segment(&target.namespace),
        execseam_adapter_kit::text::escape_path_segment(&target.pod)
    );
    let Ok(request) = http::Request::get(path).body(Vec::new()) else {
        return false;
    };
    match shared
        .api
        .send(
            request,
            "exec",
            execseam_adapter_kit::retry::Stage::Before,
            crate::client::MAX_BODY,
        )
        .await
    {
        Ok(a) if a.status == 404 => true,
        Ok(a) if a.status == 200 => {
            serde_json::from_slice::<crate::wire::Pod>(&a.body).is_ok_and(|p| {
                p.metadata.deletion_timestamp.is_some()
                    || (target.uid.is_some() && p.metadata.uid != target.uid)
            })
        }
        _ => false,
    }
}

/// Kills an exec's processes (by tag) unless disarmed: at once on an error, in the background
/// when the exec is dropped (a host deadline, a cancel).
pub(crate) struct Cleanup {
    /// Shared with a stream's awaitable kill: whoever kills first takes it.
    kill: Arc<std::sync::Mutex<Option<Kill>>>,
}

pub(crate) struct Kill {
    pub(crate) shared: Arc<Shared>,
    pub(crate) target: Target,
    pub(crate) tag: String,
}

/// How long an error waits for the kill exec before it is returned (the kill goes on).
const CLEANUP_WAIT: Duration = Duration::from_secs(5);

impl Cleanup {
    pub(crate) fn new(kill: Option<Kill>) -> Cleanup {
        Cleanup {
            kill: Arc::new(std::sync::Mutex::new(kill)),
        }
    }

    fn take(&self) -> Option<Kill> {
        self.kill.lock().ok().and_then(|mut k| k.take())
    }

    pub(crate) fn disarm(&mut self) {
        self.take();
    }

    /// An upgrade that failed: when it may have reached the server (`Unsafe`: the command
    /// starts at the upgrade), the kill runs before the error is returned, so that it cannot
    /// race the caller's next request (a retry, the next command); a failure that ran nothing
    /// disarms.
    pub(crate) async fn upgrade_failed(&mut self, e: Error) -> Error {
        if e.retry() == Retry::Unsafe {
            self.run_now().await;
        } else {
            self.disarm();
        }
        e
    }

    async fn run_now(&mut self) {
        if let Some(k) = self.take() {
            let outcome =
                execseam_adapter_kit::reaper::run_bounded(PROVIDER, "kill", k.run(), CLEANUP_WAIT)
                    .await;
            tracing::debug!(provider = PROVIDER, ?outcome, "killed an abandoned exec");
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let Some(k) = self.take() else {
            return;
        };
        execseam_adapter_kit::reaper::spawn(PROVIDER, "kill", k.run());
    }
}

impl Kill {
    async fn run(self) -> Result<(), Error> {
        kill_tagged(&self.shared, &self.target, &self.tag).await
    }
}

/// Runs the kill script in the pod: every process carrying the tag dies.
pub(crate) async fn kill_tagged(shared: &Shared, target: &Target, tag: &str) -> Result<(), Error> {
    let argv = script::kill_argv(tag);
    let request = ExecRequest {
        namespace: &target.namespace,
        pod: &target.pod,
        container: target.container.as_deref(),
        argv: &argv,
        stdin: false,
        tty: false,
    };
    let op = "kill";
    match channel::open(
        &shared.api,
        &request.path(),
        &[Protocol::V5, Protocol::V4],
        op,
    )
    .await?
    {
        Opened::Refused(answer) if answer.status == 404 => Ok(()), // the pod is gone, and its processes
        Opened::Refused(answer) => Err(exec_refused(&answer, &target.pod)),
        Opened::Socket(socket) => {
            let mut session = Session::start(socket, None, shared.api.config().idle_timeout);
            loop {
                match session.next(op).await? {
                    Frame::Exit(Exit::Code(0)) => return Ok(()),
                    Frame::Exit(exit) => {
                        return Err(adapter(
                            ErrorKind::Internal,
                            Retry::SAFE,
                            op,
                            format!("the kill script exited {exit:?}"),
                        ));
                    }
                    Frame::Stdout(_) | Frame::Stderr(_) => {}
                }
            }
        }
    }
}

impl Exec for KubernetesExec {
    execseam_adapter_kit::accessors!(
        self => provider: PROVIDER,
        capabilities: crate::capabilities_of(self.inner.shared.api.config()),
    );

    fn exec(&self, command: Command) -> BoxFuture<'_, Result<Output, Error>> {
        exec_span!(PROVIDER, "exec", command, |command| self.run(command))
    }

    fn streaming(&self) -> Option<&dyn ExecStream> {
        Some(self)
    }

    /// The adapter kit's spool, in the container's `/tmp`: pod exec has no detach and no
    /// reattach, and the API server keeps nothing of an exec once its stream ends. Terminals:
    /// `terminal.rs` (the recorder, or the API server's `tty` exec). The start
    /// exec's `setsid -f` supervisor holds none of the exec's pipes, so the exec's status comes
    /// back at once and the command lives on in the container (reparented to its init) until
    /// the container ends. A container restart (a new container: its writable layer and its
    /// processes are new) loses the spool under `/tmp`: handles are then `NotFound`; where `/tmp`
    /// is a volume that survives the restart, `Unknown` (the supervisor is gone, no exit).
    fn processes(&self) -> Option<Box<dyn execseam_core::Processes + '_>> {
        Some(crate::terminal::processes(self))
    }
}

/// A running command whose events a stream yields: up to its exit, or its first error.
pub(crate) trait Events: Send + 'static {
    /// The next event.
    fn next_event(&mut self) -> impl Future<Output = Result<Event, Error>> + Send;
    /// The exit has been returned.
    fn done(&self) -> bool;
}

impl Events for Run {
    fn next_event(&mut self) -> impl Future<Output = Result<Event, Error>> + Send {
        Run::next_event(self)
    }

    fn done(&self) -> bool {
        self.done
    }
}

/// The stream of `run`'s events.
pub(crate) fn event_stream(run: impl Events) -> EventStream {
    EventStream::new(futures_util::stream::unfold(
        Some(run),
        |state| async move {
            let mut run = state?;
            let item = run.next_event().await;
            let more = !run.done() && item.is_ok();
            Some((item, more.then_some(run)))
        },
    ))
}

impl ExecStream for KubernetesExec {
    fn exec_stream(&self, command: Command) -> BoxFuture<'_, Result<EventStream, Error>> {
        exec_span!(PROVIDER, "exec_stream", command, |command| async move {
            if let Some(target) = self.sandboxd(&command).await? {
                return crate::sandboxd::stream(&self.inner.shared, &target, command).await;
            }
            let run = self.start(command).await?;
            let has_kill = run
                .cleanup
                .kill
                .lock()
                .map(|k| k.is_some())
                .unwrap_or(false);
            let kill = run.cleanup.kill.clone();
            let stream = event_stream(run);
            if !has_kill {
                return Ok(stream);
            }
            Ok(stream.with_kill(move || async move {
                let k = kill.lock().ok().and_then(|mut k| k.take());
                match k {
                    Some(k) => kill_tagged(&k.shared, &k.target, &k.tag).await,
                    None => Ok(()), // the exit was seen, or the kill already ran
                }
            }))
        })
    }
}

impl Sandbox for KubernetesExec {
    execseam_adapter_kit::accessors!(self => id: &self.inner.id, ownership: &self.inner.ownership);

    /// Deletes the claim, the Sandbox or the Pod, and waits for the pod to be gone; later
    /// commands through any handle are `Err(NotFound)`.
    fn end(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            let pod = self.inner.target.lock().await.clone().map(|t| t.pod);
            lifecycle::delete(&self.inner.shared.api, self.inner.mode, &self.inner.id, pod).await
        })
    }
}
