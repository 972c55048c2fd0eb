//! Sandbox state: pause and resume, snapshots (and sandboxes created from them), forks, and
//! exposed ports, with capabilities that say what each operation keeps and destroys.
//!
//! Each provider declares what it has in [`StateCapabilities`] (the `state` field of its
//! [`LifecycleCapabilities`](crate::LifecycleCapabilities)); the operations are
//! [`Provider`](crate::Provider) methods by sandbox id, each defaulting to
//! [`Unsupported`](crate::ErrorKind::Unsupported). Adapters refuse, before any I/O, an operation
//! the provider does not have, a kind it cannot take, a destructive snapshot the caller did not
//! opt into ([`SnapshotRequest::allow_stop`]), and a port outside the provider's rule (the
//! adapter kit's `StateChecks` does it).

use std::fmt;
use std::time::{Duration, SystemTime};

use crate::lifecycle::SandboxState;

/// What an operation keeps of a sandbox.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kept {
    /// Nothing survives (a stop that resets the root filesystem).
    Nothing,
    /// Files survive; memory and running processes do not (a cold boot on resume or restore).
    Filesystem,
    /// Files, memory and running processes survive (connections from outside may drop).
    FilesystemAndMemory,
}

impl Kept {
    /// `"nothing"`, `"filesystem"`, `"filesystem+memory"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kept::Nothing => "nothing",
            Kept::Filesystem => "filesystem",
            Kept::FilesystemAndMemory => "filesystem+memory",
        }
    }

    /// True if running processes survive.
    pub fn keeps_processes(self) -> bool {
        self == Kept::FilesystemAndMemory
    }
}

impl fmt::Display for Kept {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which part of the filesystem an operation keeps.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The whole root filesystem (the writable layer over the image).
    Root,
    /// Only this directory (the Cloudflare bridge's `/workspace`, Sprites' `/home/sprite`).
    Dir(&'static str),
    /// The sandbox's working directory only (the local adapter's `<root>/<id>/work`).
    Workdir,
    /// Attached volumes only (Kubernetes' suspended sandbox keeps its claims).
    Volumes,
}

/// What happens to the source sandbox during and after an operation. [`Stopped`] and
/// [`ProcessesKilled`] are destructive: the caller opts in ([`SnapshotRequest::allow_stop`]).
///
/// [`Stopped`]: SourceAfter::Stopped
/// [`ProcessesKilled`]: SourceAfter::ProcessesKilled
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceAfter {
    /// Keeps running and is not frozen: the copy is not one point in time while it writes.
    Running,
    /// Frozen during the operation, then running again with the same id and processes.
    PausedBriefly,
    /// Left stopped: its processes end, a later exec starts it again (Vercel's snapshot).
    Stopped,
    /// Its processes are killed, its files kept.
    ProcessesKilled,
}

impl SourceAfter {
    /// True for the variants that end the source's processes.
    pub fn is_destructive(self) -> bool {
        matches!(self, SourceAfter::Stopped | SourceAfter::ProcessesKilled)
    }
}

/// What a command sent to a paused sandbox does (exhaustive: there is no third answer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WhilePaused {
    /// The provider (or adapter) resumes the sandbox and the command runs.
    Resumes,
    /// A typed error at once: [`Conflict`](crate::ErrorKind::Conflict) with
    /// [`Error::sandbox_state`](crate::Error::sandbox_state) `Some(Paused)`, retry `Never`. Never
    /// a hang.
    Refused,
}

/// How a provider pauses ([`Provider::pause`](crate::Provider::pause)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PauseSupport {
    /// What a pause can keep (what resume restores); the first is the default.
    pub kinds: &'static [Kept],
    /// Which files a pause keeps.
    pub scope: Scope,
    /// What an exec on a paused sandbox does.
    pub while_paused: WhilePaused,
    /// [`Provider::connect`](crate::Provider::connect) resumes a paused sandbox.
    pub connect_resumes: bool,
}

/// How a provider snapshots ([`Provider::snapshot`](crate::Provider::snapshot)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotSupport {
    /// The kinds it can take; the first is the default.
    pub kinds: &'static [Kept],
    /// Which files a snapshot holds.
    pub scope: Scope,
    /// What the source goes through.
    pub source_after: SourceAfter,
    /// A new sandbox can start from a snapshot ([`SandboxSpec::with_snapshot`](crate::SandboxSpec::with_snapshot)).
    pub create_from: bool,
    /// The same sandbox can be restored in place ([`Provider::restore`](crate::Provider::restore)).
    pub restore_in_place: bool,
    /// [`Provider::list_snapshots`](crate::Provider::list_snapshots) exists.
    pub list: bool,
    /// [`Provider::delete_snapshot`](crate::Provider::delete_snapshot) exists.
    pub delete: bool,
    /// [`SnapshotRequest::name`] is honoured.
    pub named: bool,
    /// [`SnapshotRequest::ttl`] is honoured.
    pub ttl: bool,
    /// The provider's retention when no ttl is asked for, if snapshots expire by default.
    pub default_ttl: Option<Duration>,
    /// [`SnapshotRequest::never_expires`] is honoured.
    pub never_expires: bool,
}

impl SnapshotSupport {
    /// A filesystem snapshot of the root, the source left running, creatable from, listed and
    /// deletable; no names, no ttl: a base to override with `..SnapshotSupport::FILESYSTEM`.
    pub const FILESYSTEM: SnapshotSupport = SnapshotSupport {
        kinds: &[Kept::Filesystem],
        scope: Scope::Root,
        source_after: SourceAfter::Running,
        create_from: true,
        restore_in_place: false,
        list: true,
        delete: true,
        named: false,
        ttl: false,
        default_ttl: None,
        never_expires: false,
    };
}

/// How a provider forks ([`Provider::fork`](crate::Provider::fork)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForkSupport {
    /// One provider call; otherwise the fork is a snapshot and a create from it (the default
    /// [`Provider::fork`](crate::Provider::fork) does that), whose temporary snapshot is deleted.
    pub native: bool,
    /// What the fork has of the source.
    pub keeps: Kept,
    /// What the source goes through.
    pub source_after: SourceAfter,
    /// Changes made since the source's last snapshot are in the fork (false: Vercel's native
    /// fork restores the source's last snapshot).
    pub includes_unsaved: bool,
    /// Fork and source share nothing writable afterwards: a change on one side is never seen
    /// on the other.
    pub independent: bool,
}

impl ForkSupport {
    /// A fork made by the default [`Provider::fork`](crate::Provider::fork): a filesystem
    /// snapshot of the running source and a create from it, with everything written up to the
    /// fork, sharing nothing afterwards: a base to override with
    /// `..ForkSupport::SNAPSHOT_AND_CREATE`.
    pub const SNAPSHOT_AND_CREATE: ForkSupport = ForkSupport {
        native: false,
        keeps: Kept::Filesystem,
        source_after: SourceAfter::Running,
        includes_unsaved: true,
        independent: true,
    };
}

/// When ports can be exposed.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortsWhen {
    /// Any listening port, at any time.
    AnyTime,
    /// Only ports declared at create ([`SandboxSpec::with_port`](crate::SandboxSpec::with_port)).
    AtCreate,
    /// At create, or later by updating the sandbox.
    AtCreateOrUpdate,
}

/// What a client of an exposed port must present.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortAuth {
    /// Nothing: whoever has the URL reaches the port.
    None,
    /// This header, with the value in [`ExposedPort::headers`].
    Header(&'static str),
    /// A token inside the URL itself.
    InUrl,
}

/// How a provider exposes ports ([`Provider::expose`](crate::Provider::expose)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExposeSupport {
    /// When a port can be exposed.
    pub when: PortsWhen,
    /// What a client presents.
    pub auth: PortAuth,
    /// [`Provider::exposed`](crate::Provider::exposed) exists.
    pub list: bool,
    /// [`Provider::unexpose`](crate::Provider::unexpose) exists.
    pub unexpose: bool,
    /// The ports allowed, inclusive.
    pub ports: (u16, u16),
    /// Ports in that range the provider refuses.
    pub reserved: &'static [u16],
    /// The one port that can be exposed, if only one can.
    pub only: Option<u16>,
}

impl ExposeSupport {
    /// Ports declared at create ([`SandboxSpec::with_port`](crate::SandboxSpec::with_port)),
    /// any of 1-65535, public (no token), listed, never closed before the sandbox ends.
    pub const DECLARED_AT_CREATE: ExposeSupport = ExposeSupport {
        when: PortsWhen::AtCreate,
        auth: PortAuth::None,
        list: true,
        unexpose: false,
        ports: (1, 65535),
        reserved: &[],
        only: None,
    };
}

/// The state operations a provider has; `None` is [`Unsupported`](crate::ErrorKind::Unsupported),
/// refused before any I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateCapabilities {
    /// Pause and resume.
    pub pause: Option<PauseSupport>,
    /// Snapshots.
    pub snapshot: Option<SnapshotSupport>,
    /// Forks.
    pub fork: Option<ForkSupport>,
    /// Exposed ports.
    pub expose: Option<ExposeSupport>,
}

impl StateCapabilities {
    /// Nothing: every state operation is `Unsupported`.
    pub const NONE: StateCapabilities = StateCapabilities {
        pause: None,
        snapshot: None,
        fork: None,
        expose: None,
    };
}

/// What to snapshot: the kind, a name, a ttl, and the opt-in for a destructive snapshot.
#[non_exhaustive]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SnapshotRequest {
    /// The kind; the provider's default (its first) when `None`.
    pub kind: Option<Kept>,
    /// A name (E2B names, Daytona's name); the provider makes one where it needs one.
    pub name: Option<String>,
    /// How long the provider keeps the snapshot.
    pub ttl: Option<Duration>,
    /// Keep the snapshot until it is deleted (Vercel's `expiration: 0`, Modal's `ttl=None`);
    /// refused where the provider cannot ([`SnapshotSupport::never_expires`]) and together with
    /// a [`ttl`](Self::ttl).
    pub never_expires: bool,
    /// Allows a snapshot that ends the sandbox's processes ([`SourceAfter::is_destructive`]).
    pub allow_stop: bool,
}

impl SnapshotRequest {
    /// The provider's default snapshot.
    pub fn new() -> SnapshotRequest {
        SnapshotRequest::default()
    }
}

setters!(SnapshotRequest {
    /// Asks for this kind.
    kind(kind: Kept) => kind = Some(kind);
    /// Names the snapshot.
    name(name: impl Into<String>) => name = Some(name.into());
    /// Keeps the snapshot this long.
    ttl(ttl: Duration) => ttl = Some(ttl);
    /// Keeps the snapshot until it is deleted (see [`never_expires`](Self::never_expires)).
    never_expires() => never_expires = true;
    /// Allows (or not) a snapshot that stops the sandbox or kills its processes.
    allow_stop(allow: bool) => allow_stop = allow;
});

/// One snapshot, as [`Provider::snapshot`](crate::Provider::snapshot) and
/// [`Provider::list_snapshots`](crate::Provider::list_snapshots) report it.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// What [`SandboxSpec::with_snapshot`](crate::SandboxSpec::with_snapshot),
    /// [`Provider::restore`](crate::Provider::restore) and
    /// [`Provider::delete_snapshot`](crate::Provider::delete_snapshot) take.
    pub id: String,
    /// What it holds.
    pub kind: Kept,
    /// The sandbox it was taken of, if the provider says.
    pub source: Option<String>,
    /// Its names, if any.
    pub names: Vec<String>,
    /// When it was taken, if the provider says.
    pub created: Option<SystemTime>,
    /// When the provider deletes it, if it will.
    pub expires: Option<SystemTime>,
    /// Its size, if the provider says.
    pub size_bytes: Option<u64>,
}

impl SnapshotInfo {
    /// A snapshot with this id and kind and nothing else known.
    pub fn new(id: impl Into<String>, kind: Kept) -> SnapshotInfo {
        SnapshotInfo {
            id: id.into(),
            kind,
            source: None,
            names: Vec::new(),
            created: None,
            expires: None,
            size_bytes: None,
        }
    }

    /// Adds a name.
    #[must_use]
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.names.push(name.into());
        self
    }
}

setters!(SnapshotInfo {
    /// Sets the source sandbox.
    with_source(source: impl Into<String>) => source = Some(source.into());
    /// Sets the creation time.
    with_created(at: SystemTime) => created = Some(at);
    /// Sets the expiry.
    with_expires(at: SystemTime) => expires = Some(at);
    /// Sets the size.
    with_size(bytes: u64) => size_bytes = Some(bytes);
});

/// What [`Provider::snapshot`](crate::Provider::snapshot) gives back.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotOutcome {
    /// The snapshot.
    pub snapshot: SnapshotInfo,
    /// The source's state after the call (`Stopped` where the snapshot stops it).
    pub source_state: SandboxState,
}

impl SnapshotOutcome {
    /// A snapshot and the source's state.
    pub fn new(snapshot: SnapshotInfo, source_state: SandboxState) -> SnapshotOutcome {
        SnapshotOutcome {
            snapshot,
            source_state,
        }
    }
}

/// A secret string (a token a client presents): `Debug` and `Display` never print it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value, for the request that needs it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// A port reachable from the host running execseam.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExposedPort {
    /// The port inside the sandbox.
    pub port: u16,
    /// Where a client on this host reaches it.
    pub url: String,
    /// Headers a client sends with every request (names in the clear, values secret).
    pub headers: Vec<(String, Secret)>,
    /// When the URL stops working, if it expires.
    pub expires: Option<SystemTime>,
}

impl ExposedPort {
    /// Port `port` at `url`, with no headers and no expiry.
    pub fn new(port: u16, url: impl Into<String>) -> ExposedPort {
        ExposedPort {
            port,
            url: url.into(),
            headers: Vec::new(),
            expires: None,
        }
    }

    /// Adds a header a client must send.
    #[must_use]
    pub fn with_header(mut self, name: impl Into<String>, value: Secret) -> Self {
        self.headers.push((name.into(), value));
        self
    }

    /// Sets the expiry.
    #[must_use]
    pub fn with_expires(mut self, at: SystemTime) -> Self {
        self.expires = Some(at);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_never_print() {
        let p = ExposedPort::new(8080, "http://x").with_header("X-Token", Secret::new("hunter2"));
        let d = format!("{p:?}");
        assert!(d.contains("X-Token") && !d.contains("hunter2"), "{d}");
        assert_eq!(p.headers[0].1.expose(), "hunter2");
    }
}
