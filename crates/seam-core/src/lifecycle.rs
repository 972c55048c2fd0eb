//! Sandbox lifecycle: a [`Provider`] creates, connects to, lists and destroys sandboxes; a
//! [`Sandbox`] is one of them, an [`Exec`] that knows its id and is ended by an awaited
//! [`close`](Sandbox::close).
//!
//! ```
//! use execseam_core::{ListFilter, SandboxSpec};
//! use std::time::Duration;
//!
//! let spec = SandboxSpec::new()
//!     .with_image("python:3.12")
//!     .with_env("LANG", "C.UTF-8")
//!     .with_label("team", "agents")
//!     .with_lifetime(Duration::from_secs(600));
//! assert_eq!(spec.labels().get("team").map(String::as_str), Some("agents"));
//! let filter = ListFilter::new().with_label("team", "agents");
//! # let _ = filter;
//! // let sandbox = provider.create(spec).await?;   // Box<dyn Sandbox>, owned: close destroys it
//! // let out = sandbox.exec(cmd).await?;
//! // sandbox.close().await?;
//! ```
//!
//! # Ownership
//!
//! A handle returned by [`Provider::create`] **owns** its sandbox: [`Sandbox::close`] destroys
//! it. A handle returned by [`Provider::connect`] does not: `close` only releases what the
//! handle holds (connections, sessions) and the sandbox keeps running. Either can be changed with
//! [`Sandbox::set_owned`] (keep a sandbox you created, say, to hand its id to another process; or
//! take over one you connected to). [`Sandbox::destroy`] destroys whatever the ownership.
//!
//! `close` and `destroy` are awaited and return a `Result`: teardown is never left to `Drop`.
//! Adapters may still destroy an owned, unclosed sandbox when its last handle is dropped (a
//! best-effort safety net that needs a running async runtime and is not awaited); code that
//! cares closes.
//!
//! Destroy is idempotent: destroying a sandbox that is already gone is `Ok(())`. After a sandbox
//! is destroyed, an exec through any handle to it is an `Err` of kind
//! [`NotFound`](crate::ErrorKind::NotFound), never an `Ok` and never an exit code.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::capabilities::Capabilities;
use crate::error::{Error, ErrorKind};
use crate::exec::{BoxFuture, Exec};
use crate::state::{
    ExposedPort, Kept, SnapshotInfo, SnapshotOutcome, SnapshotRequest, StateCapabilities,
};

/// Which lifecycle operations a provider has, and which [`SandboxSpec`] fields it honours.
///
/// Filled in literally by each adapter (its `LIFECYCLE` constant) and read by the conformance
/// suite: an operation declared `false` must fail with
/// [`Unsupported`](crate::ErrorKind::Unsupported); one declared `true` must work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LifecycleCapabilities {
    /// [`Provider::create`] makes a new sandbox.
    pub create: bool,
    /// [`Provider::connect`] attaches to an existing sandbox by id.
    pub connect: bool,
    /// [`Provider::list`] lists sandboxes.
    pub list: bool,
    /// [`Provider::destroy`] and [`Sandbox::destroy`] end a sandbox.
    pub destroy: bool,
    /// The spec fields [`Provider::create`] honours; any other field set is an error.
    pub spec: SpecSupport,
    /// The provider-specific [`SandboxSpec::with_option`] keys [`Provider::create`] accepts.
    pub options: &'static [&'static str],
    /// Pause and resume, snapshots, forks and exposed ports: what the provider has and what
    /// each operation keeps and destroys.
    pub state: StateCapabilities,
}

impl LifecycleCapabilities {
    /// No lifecycle at all: the adapter only runs commands in a sandbox it was configured with.
    pub const NONE: LifecycleCapabilities = LifecycleCapabilities {
        create: false,
        connect: false,
        list: false,
        destroy: false,
        spec: SpecSupport::NONE,
        options: &[],
        state: StateCapabilities::NONE,
    };

    /// Create, connect, list and destroy, with no spec field, option or state operation: what a
    /// provider with the whole lifecycle states its spec and state over.
    pub const ALL_OPERATIONS: LifecycleCapabilities = LifecycleCapabilities {
        create: true,
        connect: true,
        list: true,
        destroy: true,
        ..LifecycleCapabilities::NONE
    };
}

/// Which [`SandboxSpec`] fields a provider honours on create.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpecSupport {
    /// [`SandboxSpec::with_image`] (an image, template or snapshot name).
    pub image: bool,
    /// [`SandboxSpec::with_env`]: environment variables for every command in the sandbox.
    pub env: bool,
    /// [`SandboxSpec::with_label`]: labels (metadata) set on create and filtered on by [`ListFilter`].
    pub labels: bool,
    /// [`SandboxSpec::with_lifetime`]: the sandbox ends this long after it was created.
    pub lifetime: bool,
    /// [`SandboxSpec::with_idle_timeout`]: the sandbox stops after this long without activity.
    pub idle_timeout: bool,
    /// [`SandboxSpec::with_cpu_millis`].
    pub cpu: bool,
    /// [`SandboxSpec::with_memory_mib`].
    pub memory: bool,
    /// [`SandboxSpec::with_disk_mib`].
    pub disk: bool,
}

impl SpecSupport {
    /// No field is honoured: only an empty spec is accepted.
    pub const NONE: SpecSupport = SpecSupport {
        image: false,
        env: false,
        labels: false,
        lifetime: false,
        idle_timeout: false,
        cpu: false,
        memory: false,
        disk: false,
    };
}

/// What to create: the portable part of a sandbox's definition, plus provider-specific options.
///
/// Every field is optional; the provider's defaults (its configuration) fill the rest. A field
/// the provider cannot honour is an error from [`Provider::create`] (checked before any I/O: the
/// adapter kit's `Checks`),
/// never silently ignored. `Debug` never prints env values.
#[non_exhaustive]
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SandboxSpec {
    image: Option<String>,
    env: BTreeMap<String, String>,
    labels: BTreeMap<String, String>,
    lifetime: Option<Duration>,
    idle_timeout: Option<Duration>,
    cpu_millis: Option<u32>,
    memory_mib: Option<u64>,
    disk_mib: Option<u64>,
    snapshot: Option<String>,
    ports: Vec<u16>,
    options: BTreeMap<String, String>,
}

impl SandboxSpec {
    /// An empty spec: the provider's defaults.
    pub fn new() -> SandboxSpec {
        SandboxSpec::default()
    }

    /// An environment variable for every command run in the sandbox (a command's own
    /// [`Command`](crate::Command) env overrides it).
    #[must_use]
    pub fn with_env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// A label (metadata entry) on the sandbox, for [`ListFilter`].
    #[must_use]
    pub fn with_label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// Declares a port to expose (providers that open ports only at create need it before
    /// [`Provider::expose`]; the others accept it).
    #[must_use]
    pub fn with_port(mut self, port: u16) -> Self {
        if !self.ports.contains(&port) {
            self.ports.push(port);
        }
        self
    }

    /// A provider-specific option (the extension point): the keys each provider accepts are in
    /// its [`LifecycleCapabilities::options`]; any other key is
    /// [`InvalidConfig`](crate::ErrorKind::InvalidConfig).
    #[must_use]
    pub fn with_option(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.options.insert(key.into(), value.into());
        self
    }
}

setters!(SandboxSpec {
    /// The image, template or snapshot to start from.
    with_image(image: impl Into<String>) => image = Some(image.into());
    /// How long the sandbox may live, from creation.
    with_lifetime(lifetime: Duration) => lifetime = Some(lifetime);
    /// How long the sandbox may sit idle before the provider stops it.
    with_idle_timeout(timeout: Duration) => idle_timeout = Some(timeout);
    /// CPU, in thousandths of a virtual CPU (`1000` is one vCPU).
    with_cpu_millis(millis: u32) => cpu_millis = Some(millis);
    /// Memory, in MiB.
    with_memory_mib(mib: u64) => memory_mib = Some(mib);
    /// Disk, in MiB.
    with_disk_mib(mib: u64) => disk_mib = Some(mib);
    /// Starts from this snapshot (an id from [`Provider::snapshot`]) instead of an image; needs
    /// [`SnapshotSupport::create_from`](crate::SnapshotSupport::create_from). A snapshot that
    /// does not exist (or was deleted) is [`NotFound`](crate::ErrorKind::NotFound) from create.
    with_snapshot(snapshot: impl Into<String>) => snapshot = Some(snapshot.into());
});

getters!(SandboxSpec {
    /// The image, template or snapshot, if set.
    image -> Option<&str> = deref(image);
    /// The sandbox-wide environment.
    env -> &BTreeMap<String, String> = ref(env);
    /// The labels.
    labels -> &BTreeMap<String, String> = ref(labels);
    /// The lifetime, if set.
    lifetime -> Option<Duration> = copy(lifetime);
    /// The idle timeout, if set.
    idle_timeout -> Option<Duration> = copy(idle_timeout);
    /// The CPU in thousandths of a vCPU, if set.
    cpu_millis -> Option<u32> = copy(cpu_millis);
    /// The memory in MiB, if set.
    memory_mib -> Option<u64> = copy(memory_mib);
    /// The disk in MiB, if set.
    disk_mib -> Option<u64> = copy(disk_mib);
    /// The snapshot to start from, if set.
    snapshot -> Option<&str> = deref(snapshot);
    /// The ports declared, in the order given.
    ports -> &[u16] = ref(ports);
    /// The provider-specific options.
    options -> &BTreeMap<String, String> = ref(options);
});

impl fmt::Debug for SandboxSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SandboxSpec")
            .field("image", &self.image)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("labels", &self.labels)
            .field("lifetime", &self.lifetime)
            .field("idle_timeout", &self.idle_timeout)
            .field("cpu_millis", &self.cpu_millis)
            .field("memory_mib", &self.memory_mib)
            .field("disk_mib", &self.disk_mib)
            .field("snapshot", &self.snapshot)
            .field("ports", &self.ports)
            .field("options", &self.options.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Which sandboxes [`Provider::list`] returns: those carrying every label given (all of them when
/// empty).
#[non_exhaustive]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListFilter {
    labels: BTreeMap<String, String>,
}

impl ListFilter {
    /// Every sandbox.
    pub fn new() -> ListFilter {
        ListFilter::default()
    }

    /// Only sandboxes whose label `key` is `value`.
    #[must_use]
    pub fn with_label(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// The labels asked for.
    pub fn labels(&self) -> &BTreeMap<String, String> {
        &self.labels
    }

    /// True if `info` carries every label of the filter (for providers that filter client-side).
    pub fn matches(&self, info: &SandboxInfo) -> bool {
        self.labels
            .iter()
            .all(|(k, v)| info.labels.get(k).is_some_and(|have| have == v))
    }
}

/// The state of a listed sandbox, as far as the provider says.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SandboxState {
    /// Being created or started.
    Starting,
    /// Running: commands can run.
    Running,
    /// Paused or suspended (it resumes on connect where the provider does that).
    Paused,
    /// Stopped but not destroyed.
    Stopped,
    /// Stopped, its files moved to cold storage (Daytona's `archived`): starts slowly.
    Archived,
    /// The provider said something else, or nothing.
    Unknown,
}

impl fmt::Display for SandboxState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SandboxState::Starting => "starting",
            SandboxState::Running => "running",
            SandboxState::Paused => "paused",
            SandboxState::Stopped => "stopped",
            SandboxState::Archived => "archived",
            SandboxState::Unknown => "unknown",
        })
    }
}

/// One sandbox, as [`Provider::list`] reports it.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxInfo {
    /// The id [`Provider::connect`] and [`Provider::destroy`] take.
    pub id: String,
    /// Its labels (metadata).
    pub labels: BTreeMap<String, String>,
    /// Its state.
    pub state: SandboxState,
    /// The image, template or snapshot it runs, if the provider says.
    pub image: Option<String>,
    /// The name it was created with, where the provider keeps one apart from its id.
    pub name: Option<String>,
}

impl SandboxInfo {
    /// A sandbox with this id, no labels and an unknown state.
    pub fn new(id: impl Into<String>) -> SandboxInfo {
        SandboxInfo {
            id: id.into(),
            labels: BTreeMap::new(),
            state: SandboxState::Unknown,
            image: None,
            name: None,
        }
    }
}

setters!(SandboxInfo {
    /// Sets the name.
    with_name(name: impl Into<String>) => name = Some(name.into());
    /// Sets the labels.
    with_labels(labels: BTreeMap<String, String>) => labels = labels;
    /// Sets the state.
    with_state(state: SandboxState) => state = state;
    /// Sets the image.
    with_image(image: impl Into<String>) => image = Some(image.into());
});

/// One sandbox: runs commands ([`Exec`], and [`ExecStream`](crate::ExecStream) through
/// [`Exec::streaming`] where the adapter streams), knows its id, and is ended by an awaited
/// [`close`](Sandbox::close). A handle from [`Provider::create`] owns its sandbox (`close`
/// destroys it), one from [`Provider::connect`] does not (`close` only releases what the handle
/// holds); see [`Ownership`].
///
/// An adapter implements [`id`](Sandbox::id), [`ownership`](Sandbox::ownership) and
/// [`end`](Sandbox::end) (and [`release`](Sandbox::release) if its handle holds anything);
/// ownership, `close` and `destroy` are provided, the same for every adapter.
pub trait Sandbox: Exec {
    /// The provider's id for this sandbox (what [`Provider::connect`] and
    /// [`Provider::attach`] take).
    fn id(&self) -> &str;

    /// The handle's ownership state, shared by its clones.
    fn ownership(&self) -> &Ownership;

    /// Ends the sandbox on the provider, once, whatever the ownership: what
    /// [`destroy`](Sandbox::destroy) calls (call that instead: it keeps the ownership state and
    /// counts a sandbox already gone, `Err(NotFound)`, as destroyed). A provider that cannot end
    /// its sandboxes says [`Unsupported`](crate::ErrorKind::Unsupported).
    fn end(&self) -> BoxFuture<'_, Result<(), Error>>;

    /// Releases what the handle holds (sessions, temporary files) when
    /// [`close`](Sandbox::close) keeps the sandbox. Nothing by default.
    fn release(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async { Ok(()) })
    }

    /// True if [`close`](Sandbox::close) destroys the sandbox: a handle from
    /// [`Provider::create`] starts owned, one from [`Provider::connect`] does not.
    fn owned(&self) -> bool {
        self.ownership().owned()
    }

    /// Changes the ownership: `false` keeps a created sandbox running after `close` (and after
    /// drop); `true` makes `close` destroy a connected one.
    fn set_owned(&self, owned: bool) {
        self.ownership().set_owned(owned);
    }

    /// Ends this handle: destroys the sandbox if the handle owns it (and it is not destroyed
    /// yet), else [`release`](Sandbox::release)s what the handle holds. Idempotent: only the
    /// first call does anything.
    fn close(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            let o = self.ownership();
            if !o.begin_close() {
                return Ok(());
            }
            if o.owned() && !o.is_destroyed() {
                self.destroy().await
            } else {
                self.release().await
            }
        })
    }

    /// Destroys the sandbox, whatever the ownership ([`end`](Sandbox::end)). Idempotent: a
    /// sandbox that is already gone is `Ok(())`.
    fn destroy(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            match self.end().await {
                Err(e) if e.kind() != ErrorKind::NotFound => Err(e),
                _ => {
                    self.ownership().mark_destroyed();
                    Ok(())
                }
            }
        })
    }
}

/// Creates, connects to, lists and destroys sandboxes of one provider. Configured without I/O
/// (each adapter's `<P>Provider::new(config)` or `from_env()`); the I/O happens in these calls.
///
/// Every method has a default that fails with [`Unsupported`](crate::ErrorKind::Unsupported), so
/// an adapter implements what its provider has and says so in
/// [`lifecycle`](Provider::lifecycle).
pub trait Provider: Send + Sync {
    /// The provider's short name (`"local"`, `"e2b"`, …), as [`Exec::provider`] gives it.
    fn provider(&self) -> &str;

    /// What the sandboxes of this provider can do (as configured).
    fn capabilities(&self) -> Capabilities;

    /// Which lifecycle operations this provider has.
    fn lifecycle(&self) -> LifecycleCapabilities;

    /// Creates a sandbox from `spec`; the handle owns it. `spec` is checked first (the adapter
    /// kit's `Checks`).
    fn create(&self, spec: SandboxSpec) -> BoxFuture<'_, Result<Box<dyn Sandbox>, Error>> {
        let _ = spec;
        unsupported(self.provider(), "create")
    }

    /// Connects to the existing sandbox `id`; the handle does not own it. A sandbox that does
    /// not exist is [`NotFound`](crate::ErrorKind::NotFound).
    fn connect<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Box<dyn Sandbox>, Error>> {
        let _ = id;
        unsupported(self.provider(), "connect")
    }

    /// A handle on the existing sandbox `id` without any I/O; the handle does not own it. A
    /// sandbox that does not exist is found out on first use (an exec through the handle is
    /// [`NotFound`](crate::ErrorKind::NotFound)); an `id` that cannot name one of this provider's
    /// sandboxes is an error here. For a sandbox whose id was stored (by another process, before
    /// a restart) and for tests that need a handle on a sandbox that vanished.
    fn attach(&self, id: &str) -> Result<Box<dyn Sandbox>, Error> {
        let _ = id;
        Err(unsupported_error(self.provider(), "attach"))
    }

    /// Lists the sandboxes `filter` selects, in no particular order, every page fetched.
    fn list<'a>(
        &'a self,
        filter: &'a ListFilter,
    ) -> BoxFuture<'a, Result<Vec<SandboxInfo>, Error>> {
        let _ = filter;
        unsupported(self.provider(), "list")
    }

    /// Destroys the sandbox `id`. Idempotent: a sandbox that is already gone is `Ok(())`.
    fn destroy<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        let _ = id;
        unsupported(self.provider(), "destroy")
    }

    /// Pauses the sandbox `id`, keeping `keep` (the provider's default kind when `None`; see
    /// [`PauseSupport`](crate::PauseSupport)), and returns the state it is in now (`Paused`, or
    /// `Stopped` where the provider's pause is a stop). Pausing a paused sandbox is `Ok`.
    fn pause<'a>(
        &'a self,
        id: &'a str,
        keep: Option<Kept>,
    ) -> BoxFuture<'a, Result<SandboxState, Error>> {
        let _ = (id, keep);
        unsupported(self.provider(), "pause")
    }

    /// Resumes the paused sandbox `id`: its files, and its processes where the pause kept
    /// memory. Resuming a running sandbox is `Ok`.
    fn resume<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        let _ = id;
        unsupported(self.provider(), "resume")
    }

    /// Snapshots the sandbox `id` (checked first against [`StateCapabilities`], with the adapter
    /// kit's `StateChecks`): the snapshot and the state the source is in.
    fn snapshot<'a>(
        &'a self,
        id: &'a str,
        request: SnapshotRequest,
    ) -> BoxFuture<'a, Result<SnapshotOutcome, Error>> {
        let _ = (id, request);
        unsupported(self.provider(), "snapshot")
    }

    /// Restores the sandbox `id` in place from `snapshot` (its processes end).
    fn restore<'a>(&'a self, id: &'a str, snapshot: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        let _ = (id, snapshot);
        unsupported(self.provider(), "restore")
    }

    /// Lists snapshots, of the sandbox `source` only when given.
    fn list_snapshots<'a>(
        &'a self,
        source: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<SnapshotInfo>, Error>> {
        let _ = source;
        unsupported(self.provider(), "list_snapshots")
    }

    /// Deletes a snapshot. Idempotent: one already gone is `Ok(())`; creating from it after is
    /// [`NotFound`](crate::ErrorKind::NotFound).
    fn delete_snapshot<'a>(&'a self, snapshot: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        let _ = snapshot;
        unsupported(self.provider(), "delete_snapshot")
    }

    /// Forks the sandbox `id` into a new one, which the handle owns. Where
    /// [`ForkSupport::native`](crate::ForkSupport::native) is false this default does it as a
    /// snapshot, a create from it, and the snapshot's deletion (where the provider deletes
    /// snapshots); a snapshot that stops the source is allowed when
    /// [`ForkSupport::source_after`](crate::ForkSupport::source_after) declares it. An adapter
    /// with a native fork implements it.
    fn fork<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Box<dyn Sandbox>, Error>> {
        Box::pin(async move {
            let state = self.lifecycle().state;
            let fork = state
                .fork
                .ok_or_else(|| unsupported_error(self.provider(), "fork"))?;
            if fork.native {
                return Err(unsupported_error(self.provider(), "fork"));
            }
            // The fork's capability says what the source goes through (a snapshot that stops
            // it, on Vercel): asking for the fork is asking for that.
            let request = SnapshotRequest::new()
                .kind(fork.keeps)
                .allow_stop(fork.source_after.is_destructive());
            let taken = self
                .snapshot(id, request)
                .await
                .map_err(|e| e.with_operation("fork"))?;
            let created = self
                .create(SandboxSpec::new().with_snapshot(taken.snapshot.id.clone()))
                .await
                .map_err(|e| e.with_operation("fork"));
            if state.snapshot.is_some_and(|s| s.delete) {
                // The fork holds what it needs; a failed cleanup leaves a snapshot, not a fault.
                let _ = self.delete_snapshot(&taken.snapshot.id).await;
            }
            created
        })
    }

    /// Exposes `port` of the sandbox `id`: a URL reachable from this host, and the headers a
    /// client sends.
    fn expose<'a>(&'a self, id: &'a str, port: u16) -> BoxFuture<'a, Result<ExposedPort, Error>> {
        let _ = (id, port);
        unsupported(self.provider(), "expose")
    }

    /// The ports exposed on the sandbox `id`.
    fn exposed<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Vec<ExposedPort>, Error>> {
        let _ = id;
        unsupported(self.provider(), "exposed")
    }

    /// Stops exposing `port` of the sandbox `id`. Idempotent.
    fn unexpose<'a>(&'a self, id: &'a str, port: u16) -> BoxFuture<'a, Result<(), Error>> {
        let _ = (id, port);
        unsupported(self.provider(), "unexpose")
    }
}

fn unsupported_error(provider: &str, operation: &'static str) -> Error {
    Error::unsupported(format!("{provider} has no {operation}"))
        .with_provider(provider.to_owned())
        .with_operation(operation)
}

fn unsupported<'a, T: Send + 'a>(
    provider: &str,
    operation: &'static str,
) -> BoxFuture<'a, Result<T, Error>> {
    let e = unsupported_error(provider, operation);
    Box::pin(async move { Err(e) })
}

/// The ownership state a [`Sandbox`] keeps: whether `close` destroys, and whether the handle
/// was closed or the sandbox destroyed already. Shared by clones of a handle.
#[derive(Clone, Debug)]
pub struct Ownership(Arc<OwnershipState>);

#[derive(Debug)]
struct OwnershipState {
    owned: AtomicBool,
    /// False for a sandbox this provider can never destroy: it cannot be owned.
    ownable: bool,
    closed: AtomicBool,
    destroyed: AtomicBool,
}

impl Default for Ownership {
    /// Not owned, as for [`Ownership::connected`].
    fn default() -> Ownership {
        Ownership::connected()
    }
}

impl Ownership {
    /// For a handle from [`Provider::create`]: owned.
    pub fn created() -> Ownership {
        Ownership::new(true)
    }

    /// For a handle from [`Provider::connect`]: not owned.
    pub fn connected() -> Ownership {
        Ownership::new(false)
    }

    /// For a handle on a sandbox the provider can never destroy (a guest that ends with its
    /// task, a service of the user's): never owned, and [`set_owned`](Self::set_owned)`(true)`
    /// is ignored, so `close` only releases.
    pub fn never_owned() -> Ownership {
        Ownership::with(false, false)
    }

    fn new(owned: bool) -> Ownership {
        Ownership::with(owned, true)
    }

    fn with(owned: bool, ownable: bool) -> Ownership {
        Ownership(Arc::new(OwnershipState {
            owned: AtomicBool::new(owned),
            ownable,
            closed: AtomicBool::new(false),
            destroyed: AtomicBool::new(false),
        }))
    }

    /// See [`Sandbox::owned`].
    pub fn owned(&self) -> bool {
        self.0.owned.load(Ordering::SeqCst)
    }

    /// See [`Sandbox::set_owned`]; ignored for [`never_owned`](Self::never_owned).
    pub fn set_owned(&self, owned: bool) {
        self.0
            .owned
            .store(owned && self.0.ownable, Ordering::SeqCst);
    }

    /// Marks the handle closed; true the first time only.
    pub fn begin_close(&self) -> bool {
        !self.0.closed.swap(true, Ordering::SeqCst)
    }

    /// True once [`close`](Sandbox::close) was called.
    pub fn is_closed(&self) -> bool {
        self.0.closed.load(Ordering::SeqCst)
    }

    /// Records that the sandbox was destroyed.
    pub fn mark_destroyed(&self) {
        self.0.destroyed.store(true, Ordering::SeqCst);
    }

    /// True once the sandbox was destroyed through a handle sharing this state.
    pub fn is_destroyed(&self) -> bool {
        self.0.destroyed.load(Ordering::SeqCst)
    }

    /// True if dropping the last handle should destroy the sandbox (the safety net): owned, not
    /// closed, not destroyed.
    pub fn destroy_on_drop(&self) -> bool {
        self.owned() && !self.is_closed() && !self.is_destroyed()
    }
}

forward_pointers!(Provider {
    fn provider(&self) -> &str;
    fn capabilities(&self) -> Capabilities;
    fn lifecycle(&self) -> LifecycleCapabilities;
    fn create(&self, spec: SandboxSpec) -> BoxFuture<'_, Result<Box<dyn Sandbox>, Error>>;
    fn connect<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Box<dyn Sandbox>, Error>>;
    fn attach(&self, id: &str) -> Result<Box<dyn Sandbox>, Error>;
    fn list<'a>(&'a self, filter: &'a ListFilter) -> BoxFuture<'a, Result<Vec<SandboxInfo>, Error>>;
    fn destroy<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), Error>>;
    fn pause<'a>(&'a self, id: &'a str, keep: Option<Kept>)
        -> BoxFuture<'a, Result<SandboxState, Error>>;
    fn resume<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), Error>>;
    fn snapshot<'a>(&'a self, id: &'a str, request: SnapshotRequest)
        -> BoxFuture<'a, Result<SnapshotOutcome, Error>>;
    fn restore<'a>(&'a self, id: &'a str, snapshot: &'a str) -> BoxFuture<'a, Result<(), Error>>;
    fn list_snapshots<'a>(&'a self, source: Option<&'a str>)
        -> BoxFuture<'a, Result<Vec<SnapshotInfo>, Error>>;
    fn delete_snapshot<'a>(&'a self, snapshot: &'a str) -> BoxFuture<'a, Result<(), Error>>;
    fn fork<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Box<dyn Sandbox>, Error>>;
    fn expose<'a>(&'a self, id: &'a str, port: u16) -> BoxFuture<'a, Result<ExposedPort, Error>>;
    fn exposed<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Vec<ExposedPort>, Error>>;
    fn unexpose<'a>(&'a self, id: &'a str, port: u16) -> BoxFuture<'a, Result<(), Error>>;
});

forward_pointers!(Sandbox {
    fn id(&self) -> &str;
    fn ownership(&self) -> &Ownership;
    fn end(&self) -> BoxFuture<'_, Result<(), Error>>;
    fn release(&self) -> BoxFuture<'_, Result<(), Error>>;
    fn owned(&self) -> bool;
    fn set_owned(&self, owned: bool);
    fn close(&self) -> BoxFuture<'_, Result<(), Error>>;
    fn destroy(&self) -> BoxFuture<'_, Result<(), Error>>;
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Command, Exit, Output};
    use std::future::Future;

    #[test]
    fn debug_hides_env_values() {
        let d = format!("{:?}", SandboxSpec::new().with_env("TOKEN", "hunter2"));
        assert!(d.contains("TOKEN") && !d.contains("hunter2"), "{d}");
    }

    #[test]
    fn filters_match_every_label() {
        let mut labels = BTreeMap::new();
        labels.insert("a".to_owned(), "1".to_owned());
        labels.insert("b".to_owned(), "2".to_owned());
        let info = SandboxInfo::new("x").with_labels(labels);
        assert!(ListFilter::new().matches(&info));
        assert!(
            ListFilter::new()
                .with_label("a", "1")
                .with_label("b", "2")
                .matches(&info)
        );
        assert!(!ListFilter::new().with_label("a", "2").matches(&info));
        assert!(!ListFilter::new().with_label("c", "1").matches(&info));
    }

    #[test]
    fn ownership_is_shared_and_close_happens_once() {
        let o = Ownership::created();
        let clone = o.clone();
        assert!(o.destroy_on_drop());
        clone.set_owned(false);
        assert!(!o.owned() && !o.destroy_on_drop());
        assert!(o.begin_close());
        assert!(!clone.begin_close());
        assert!(!Ownership::connected().owned());
        let never = Ownership::never_owned();
        never.set_owned(true);
        assert!(!never.owned());
    }

    struct Fixed(Ownership);

    impl Exec for Fixed {
        fn provider(&self) -> &str {
            "fixed"
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities::FULL
        }
        fn exec(&self, _: Command) -> BoxFuture<'_, Result<Output, Error>> {
            Box::pin(async { Ok(Output::new("", "", Exit::Code(0))) })
        }
    }

    impl Sandbox for Fixed {
        fn id(&self) -> &str {
            "s1"
        }
        fn ownership(&self) -> &Ownership {
            &self.0
        }
        fn end(&self) -> BoxFuture<'_, Result<(), Error>> {
            Box::pin(async { Ok(()) })
        }
    }

    struct ConnectOnly;

    impl Provider for ConnectOnly {
        fn provider(&self) -> &str {
            "connect-only"
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities::FULL
        }
        fn lifecycle(&self) -> LifecycleCapabilities {
            LifecycleCapabilities {
                connect: true,
                ..LifecycleCapabilities::NONE
            }
        }
        fn connect<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<Box<dyn Sandbox>, Error>> {
            Box::pin(async { Ok(Box::new(Fixed(Ownership::connected())) as Box<dyn Sandbox>) })
        }
    }

    /// Counts `end` and `release`; `end` answers `answer`.
    struct Counting {
        ownership: Ownership,
        answer: Option<ErrorKind>,
        ends: std::sync::atomic::AtomicUsize,
        releases: std::sync::atomic::AtomicUsize,
    }

    impl Counting {
        fn new(ownership: Ownership, answer: Option<ErrorKind>) -> Counting {
            Counting {
                ownership,
                answer,
                ends: Default::default(),
                releases: Default::default(),
            }
        }
        fn counts(&self) -> (usize, usize) {
            (
                self.ends.load(Ordering::SeqCst),
                self.releases.load(Ordering::SeqCst),
            )
        }
    }

    impl Exec for Counting {
        fn provider(&self) -> &str {
            "counting"
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities::FULL
        }
        fn exec(&self, _: Command) -> BoxFuture<'_, Result<Output, Error>> {
            Box::pin(async { Ok(Output::new("", "", Exit::Code(0))) })
        }
    }

    impl Sandbox for Counting {
        fn id(&self) -> &str {
            "c1"
        }
        fn ownership(&self) -> &Ownership {
            &self.ownership
        }
        fn end(&self) -> BoxFuture<'_, Result<(), Error>> {
            self.ends.fetch_add(1, Ordering::SeqCst);
            let answer = self.answer.map(|k| Error::new(k, "answer"));
            Box::pin(async move { answer.map_or(Ok(()), Err) })
        }
        fn release(&self) -> BoxFuture<'_, Result<(), Error>> {
            self.releases.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Ok(()) })
        }
    }

    #[test]
    fn close_destroys_an_owned_sandbox_once_and_releases_a_connected_one() {
        let created = Counting::new(Ownership::created(), None);
        block(created.close()).unwrap();
        block(created.close()).unwrap();
        assert_eq!(created.counts(), (1, 0));
        assert!(created.ownership().is_destroyed());

        let connected = Counting::new(Ownership::connected(), None);
        block(connected.close()).unwrap();
        block(connected.close()).unwrap();
        assert_eq!(connected.counts(), (0, 1));

        // Kept: a created sandbox handed over survives close.
        let kept = Counting::new(Ownership::created(), None);
        kept.set_owned(false);
        block(kept.close()).unwrap();
        assert_eq!(kept.counts(), (0, 1));
    }

    #[test]
    fn destroy_counts_gone_as_done_and_reports_other_failures() {
        let gone = Counting::new(Ownership::connected(), Some(ErrorKind::NotFound));
        block(gone.destroy()).unwrap();
        assert!(gone.ownership().is_destroyed());
        let failing = Counting::new(Ownership::created(), Some(ErrorKind::Unavailable));
        assert_eq!(
            block(failing.close()).unwrap_err().kind(),
            ErrorKind::Unavailable
        );
        assert!(!failing.ownership().is_destroyed());
    }

    fn block<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    /// Snapshots, creates from snapshots and deletes them, recording each call.
    struct Snapshotting(std::sync::Mutex<Vec<String>>);

    impl Provider for Snapshotting {
        fn provider(&self) -> &str {
            "snapshotting"
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities::FULL
        }
        fn lifecycle(&self) -> LifecycleCapabilities {
            LifecycleCapabilities {
                create: true,
                state: StateCapabilities {
                    snapshot: Some(crate::SnapshotSupport::FILESYSTEM),
                    fork: Some(crate::ForkSupport {
                        native: false,
                        keeps: Kept::Filesystem,
                        source_after: crate::SourceAfter::Running,
                        includes_unsaved: true,
                        independent: true,
                    }),
                    ..StateCapabilities::NONE
                },
                ..LifecycleCapabilities::NONE
            }
        }
        fn snapshot<'a>(
            &'a self,
            id: &'a str,
            request: SnapshotRequest,
        ) -> BoxFuture<'a, Result<SnapshotOutcome, Error>> {
            self.0
                .lock()
                .unwrap()
                .push(format!("snapshot {id} {:?}", request.kind));
            Box::pin(async {
                Ok(SnapshotOutcome::new(
                    SnapshotInfo::new("snap-1", Kept::Filesystem),
                    SandboxState::Running,
                ))
            })
        }
        fn create(&self, spec: SandboxSpec) -> BoxFuture<'_, Result<Box<dyn Sandbox>, Error>> {
            self.0
                .lock()
                .unwrap()
                .push(format!("create {:?}", spec.snapshot()));
            Box::pin(async { Ok(Box::new(Fixed(Ownership::created())) as Box<dyn Sandbox>) })
        }
        fn delete_snapshot<'a>(&'a self, snapshot: &'a str) -> BoxFuture<'a, Result<(), Error>> {
            self.0.lock().unwrap().push(format!("delete {snapshot}"));
            Box::pin(async { Ok(()) })
        }
    }

    #[test]
    fn a_fork_that_is_not_native_is_a_snapshot_a_create_and_a_delete() {
        let p = Snapshotting(Default::default());
        let s = block(p.fork("src")).unwrap();
        assert!(s.owned());
        assert_eq!(
            *p.0.lock().unwrap(),
            [
                "snapshot src Some(Filesystem)",
                "create Some(\"snap-1\")",
                "delete snap-1"
            ]
        );
        let e = block(ConnectOnly.fork("src")).err().unwrap();
        assert_eq!((e.kind(), e.operation()), (ErrorKind::Unsupported, "fork"));
    }

    #[test]
    fn providers_and_sandboxes_are_dyn_and_upcast_to_exec() {
        let p: Arc<dyn Provider> = Arc::new(ConnectOnly);
        let e = block(p.create(SandboxSpec::new())).err().unwrap();
        assert_eq!(
            (e.kind(), e.operation()),
            (ErrorKind::Unsupported, "create")
        );
        let e = block(p.list(&ListFilter::new())).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        let e = p.attach("s1").err().unwrap();
        assert_eq!(
            (e.kind(), e.operation()),
            (ErrorKind::Unsupported, "attach")
        );
        let s = block(p.connect("s1")).unwrap();
        assert_eq!(s.id(), "s1");
        let exec: Arc<dyn Exec> = Arc::<dyn Sandbox>::from(s);
        assert_eq!(exec.provider(), "fixed");
    }
}
