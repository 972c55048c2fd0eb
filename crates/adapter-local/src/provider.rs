//! [`LocalProvider`]: local "sandboxes" are private directories on this host.
//!
//! A sandbox is `<sandbox_root>/<id>/`: its `work/` directory is the working directory of every
//! command run without one, its env (from [`SandboxSpec::with_env`]) is set for every command,
//! and its labels are kept beside it. It is **not an isolation boundary**: commands run as this
//! process's user with the host's whole filesystem in view; use an emulator or a provider for
//! isolation. Destroying it removes the directory (a process it started keeps running).
//!
//! A snapshot is a copy of the sandbox's `work/` directory under `<sandbox_root>/.snapshots/`
//! (`cp -a`, reflinked where the filesystem can); a sandbox created from one starts with a copy
//! of it. An exposed port is `http://127.0.0.1:<port>`: local commands share this host's network.

use execseam_adapter_kit::{Checks as _, StateChecks as _};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use execseam_adapter_kit::id::random_id;
use execseam_core::{
    Error, ErrorKind, ExposedPort, Kept, ListFilter, Ownership, Provider, SandboxInfo, SandboxSpec,
    SandboxState, SnapshotInfo, SnapshotOutcome, SnapshotRequest,
};

use crate::config::LocalConfig;
use crate::exec::{LocalExec, SandboxDir};
use crate::{LIFECYCLE, PROVIDER};

/// Creates, connects to, lists and destroys local sandboxes (directories). See the
/// [module docs](self).
#[derive(Clone, Debug)]
pub struct LocalProvider {
    config: Arc<LocalConfig>,
}

const LABELS: &str = "labels";
const ENV: &str = "env";
const WORK: &str = "work";
const SNAPSHOTS: &str = ".snapshots";
/// A snapshot's source sandbox id, then its creation time in seconds since the epoch.
const META: &str = "meta";

fn lifecycle_error(kind: ErrorKind, operation: &'static str, message: String) -> Error {
    Error::new(kind, message)
        .with_provider(PROVIDER)
        .with_operation(operation)
}

fn io_failure(operation: &'static str, what: &str, e: std::io::Error) -> Error {
    let kind = match e.kind() {
        std::io::ErrorKind::NotFound => ErrorKind::NotFound,
        std::io::ErrorKind::PermissionDenied => ErrorKind::PermissionDenied,
        _ => ErrorKind::Internal,
    };
    lifecycle_error(kind, operation, format!("{what}: {e}")).with_source(e)
}

/// `key=value\0` records (keys never hold `=` or NUL: the spec is checked first).
fn encode(map: &BTreeMap<String, String>) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in map {
        out.extend_from_slice(k.as_bytes());
        out.push(b'=');
        out.extend_from_slice(v.as_bytes());
        out.push(0);
    }
    out
}

fn decode(bytes: &[u8]) -> BTreeMap<String, String> {
    bytes
        .split(|b| *b == 0)
        .filter_map(|r| {
            let r = std::str::from_utf8(r).ok()?;
            let (k, v) = r.split_once('=')?;
            Some((k.to_owned(), v.to_owned()))
        })
        .collect()
}

/// Ids are `local-` and 16 hex digits; anything else names no sandbox (and never a path).
fn valid_id(id: &str) -> bool {
    id.strip_prefix("local-")
        .is_some_and(|h| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Snapshot ids are `local-snap-` and 16 hex digits.
fn valid_snapshot_id(id: &str) -> bool {
    id.strip_prefix("local-snap-")
        .is_some_and(|h| h.len() == 16 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// `cp -a --reflink=auto FROM TO` (TO must not exist): modes, times, links and special files
/// kept, a copy-on-write clone where the filesystem has them.
async fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    let out = tokio::process::Command::new("cp")
        .args(["-a", "--reflink=auto", "--"])
        .arg(from)
        .arg(to)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .output()
        .await?;
    if out.status.success() {
        Ok(())
    } else {
        let _ = tokio::fs::remove_dir_all(to).await;
        Err(std::io::Error::other(format!(
            "cp: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

impl LocalProvider {
    /// A provider with this configuration. The sandbox root must be absolute
    /// ([`InvalidConfig`](ErrorKind::InvalidConfig) otherwise); nothing is created yet.
    pub fn new(config: LocalConfig) -> Result<LocalProvider, Error> {
        if !config.sandbox_root.is_absolute() {
            return Err(Error::invalid_config(format!(
                "the sandbox root {} is not absolute",
                config.sandbox_root.display()
            ))
            .with_provider(PROVIDER));
        }
        Ok(LocalProvider {
            config: Arc::new(config),
        })
    }

    execseam_adapter_kit::provider_config!(self => LocalConfig: &self.config);

    fn dir(&self, id: &str) -> PathBuf {
        self.config.sandbox_root.join(id)
    }

    /// Creates a sandbox directory; the handle owns it.
    pub async fn create(&self, spec: SandboxSpec) -> Result<LocalExec, Error> {
        spec.check(PROVIDER, &LIFECYCLE)?;
        let root = &self.config.sandbox_root;
        tokio::fs::create_dir_all(root)
            .await
            .map_err(|e| io_failure("create", "cannot create the sandbox root", e))?;
        let id = format!("local-{}", random_id(16));
        let dir = self.dir(&id);
        tokio::fs::create_dir(&dir)
            .await
            .map_err(|e| io_failure("create", "cannot create the sandbox", e))?;
        let from = spec.snapshot().map(|s| self.snapshot_dir(s));
        let write = async {
            write_private(&dir.join(ENV), &encode(spec.env())).await?;
            tokio::fs::write(dir.join(LABELS), encode(spec.labels())).await?;
            match &from {
                Some(snap) => copy_dir(&snap.join(WORK), &dir.join(WORK)).await,
                None => tokio::fs::create_dir(dir.join(WORK)).await,
            }
        };
        if let Some(snap) = spec.snapshot()
            && !(valid_snapshot_id(snap)
                && tokio::fs::metadata(self.snapshot_dir(snap).join(META))
                    .await
                    .is_ok())
        {
            let _ = tokio::fs::remove_dir(&dir).await;
            return Err(lifecycle_error(
                ErrorKind::NotFound,
                "create",
                format!("snapshot {snap:?} does not exist"),
            ));
        }
        if let Err(e) = write.await {
            let _ = tokio::fs::remove_dir_all(&dir).await;
            return Err(io_failure("create", "cannot set up the sandbox", e));
        }
        tracing::debug!(provider = PROVIDER, sandbox = %id, "created");
        Ok(self.handle(id, spec.env().clone(), Ownership::created()))
    }

    /// Connects to an existing sandbox directory; the handle does not own it.
    pub async fn connect(&self, id: &str) -> Result<LocalExec, Error> {
        let dir = self.existing(id, "connect").await?;
        let env = tokio::fs::read(dir.join(ENV))
            .await
            .map(|b| decode(&b))
            .map_err(|e| io_failure("connect", "cannot read the sandbox", e))?;
        Ok(self.handle(id.to_owned(), env, Ownership::connected()))
    }

    /// Lists the sandbox directories under the root that `filter` selects.
    pub async fn list(&self, filter: &ListFilter) -> Result<Vec<SandboxInfo>, Error> {
        filter.check(PROVIDER, &LIFECYCLE)?;
        let io = |e| io_failure("list", "cannot read the sandbox root", e);
        let mut out = Vec::new();
        for (id, path) in named_entries(&self.config.sandbox_root).await.map_err(io)? {
            if !valid_id(&id) {
                continue;
            }
            // A sandbox destroyed while we list is simply not there.
            let Ok(labels) = tokio::fs::read(path.join(LABELS)).await else {
                continue;
            };
            let info = SandboxInfo::new(id)
                .with_labels(decode(&labels))
                .with_state(SandboxState::Running);
            if filter.matches(&info) {
                out.push(info);
            }
        }
        Ok(out)
    }

    /// Removes a sandbox directory. A sandbox that does not exist is `Ok(())`.
    pub async fn destroy(&self, id: &str) -> Result<(), Error> {
        if !valid_id(id) {
            return Ok(());
        }
        remove(&self.dir(id)).await
    }

    fn snapshot_dir(&self, snapshot: &str) -> PathBuf {
        self.config.sandbox_root.join(SNAPSHOTS).join(snapshot)
    }

    /// Copies the sandbox's working directory into a new snapshot.
    pub async fn snapshot(
        &self,
        id: &str,
        request: SnapshotRequest,
    ) -> Result<SnapshotOutcome, Error> {
        let kind = LIFECYCLE.state.check_snapshot(PROVIDER, &request)?;
        let dir = self.existing(id, "snapshot").await?;
        let snap = format!("local-snap-{}", random_id(16));
        let target = self.snapshot_dir(&snap);
        let io = |e| io_failure("snapshot", "cannot write the snapshot", e);
        tokio::fs::create_dir_all(&target).await.map_err(io)?;
        let created = std::time::SystemTime::now();
        let secs = created
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let copied = async {
            copy_dir(&dir.join(WORK), &target.join(WORK)).await?;
            // Written last: a snapshot without its meta is an unfinished one, never listed.
            tokio::fs::write(target.join(META), format!("{id}\n{secs}\n")).await
        };
        if let Err(e) = copied.await {
            let _ = tokio::fs::remove_dir_all(&target).await;
            return Err(io(e));
        }
        let info = SnapshotInfo::new(snap, kind)
            .with_source(id)
            .with_created(created);
        Ok(SnapshotOutcome::new(info, SandboxState::Running))
    }

    /// The snapshots, of sandbox `source` only when given.
    pub async fn list_snapshots(&self, source: Option<&str>) -> Result<Vec<SnapshotInfo>, Error> {
        let root = self.config.sandbox_root.join(SNAPSHOTS);
        let io = |e| io_failure("list_snapshots", "cannot read the snapshots", e);
        let mut out = Vec::new();
        for (snap, path) in named_entries(&root).await.map_err(io)? {
            let Ok(meta) = tokio::fs::read_to_string(path.join(META)).await else {
                continue;
            };
            let mut lines = meta.lines();
            let from = lines.next().unwrap_or_default().to_owned();
            if !valid_snapshot_id(&snap) || source.is_some_and(|s| s != from) {
                continue;
            }
            let mut info = SnapshotInfo::new(snap, Kept::Filesystem).with_source(from);
            if let Some(secs) = lines.next().and_then(|l| l.parse::<u64>().ok()) {
                info =
                    info.with_created(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs));
            }
            out.push(info);
        }
        Ok(out)
    }

    /// Deletes a snapshot; one that does not exist is `Ok(())`.
    pub async fn delete_snapshot(&self, snapshot: &str) -> Result<(), Error> {
        LIFECYCLE.state.check_delete_snapshot(PROVIDER, snapshot)?;
        if !valid_snapshot_id(snapshot) {
            return Ok(());
        }
        match tokio::fs::remove_dir_all(self.snapshot_dir(snapshot)).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io_failure(
                "delete_snapshot",
                "cannot remove the snapshot",
                e,
            )),
        }
    }

    /// The loopback URL of `port`: local commands listen on this host's network.
    pub async fn expose(&self, id: &str, port: u16) -> Result<ExposedPort, Error> {
        LIFECYCLE.state.check_expose(PROVIDER, port)?;
        self.existing(id, "expose").await?;
        Ok(ExposedPort::new(port, format!("http://127.0.0.1:{port}")))
    }

    async fn existing(&self, id: &str, operation: &'static str) -> Result<PathBuf, Error> {
        let missing = || {
            lifecycle_error(
                ErrorKind::NotFound,
                operation,
                format!("sandbox {id:?} does not exist"),
            )
        };
        if !valid_id(id) {
            return Err(missing());
        }
        let dir = self.dir(id);
        match tokio::fs::metadata(dir.join(WORK)).await {
            Ok(m) if m.is_dir() => Ok(dir),
            _ => Err(missing()),
        }
    }

    fn handle(&self, id: String, env: BTreeMap<String, String>, ownership: Ownership) -> LocalExec {
        let dir = self.dir(&id);
        let work = dir.join(WORK).to_string_lossy().into_owned();
        LocalExec::in_sandbox(
            self.config.clone(),
            SandboxDir {
                id,
                dir,
                work,
                env,
                ownership,
            },
        )
    }
}

async fn write_private(path: &Path, data: &[u8]) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    let mut f = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .await?;
    f.write_all(data).await?;
    f.flush().await
}

/// Removes a sandbox directory; already gone is fine.
pub(crate) async fn remove(dir: &Path) -> Result<(), Error> {
    match tokio::fs::remove_dir_all(dir).await {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_failure("destroy", "cannot remove the sandbox", e)),
    }
}

impl Provider for LocalProvider {
    execseam_adapter_kit::accessors!(
        self => provider: PROVIDER,
        capabilities: LocalExec::capabilities_of(&self.config),
        lifecycle: LIFECYCLE,
    );

    execseam_adapter_kit::forward_lifecycle!(
        LocalProvider: create, connect, list, destroy, expose, snapshot, list_snapshots,
        delete_snapshot
    );
}

/// The entries of `dir` whose names are UTF-8, with their paths; a directory that does not
/// exist has none.
async fn named_entries(dir: &Path) -> std::io::Result<Vec<(String, PathBuf)>> {
    let mut entries = match tokio::fs::read_dir(dir).await {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out = Vec::new();
    while let Some(entry) = entries.next_entry().await? {
        if let Some(name) = entry.file_name().to_str() {
            out.push((name.to_owned(), entry.path()));
        }
    }
    Ok(out)
}
