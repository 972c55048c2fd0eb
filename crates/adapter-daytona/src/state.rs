//! Sandbox state on Daytona: stop/start as a filesystem-only pause, snapshots of a sandbox
//! (`POST /sandbox/{id}/snapshot`, `GET /snapshots`, `DELETE /snapshots/{id}`, create with
//! `snapshot`), forks as snapshot + create, and preview links
//! (`GET /sandbox/{id}/ports/{port}/preview-url`).

use execseam_adapter_kit::StateChecks as _;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use execseam_core::{
    Error, ErrorKind, ExposeSupport, ExposedPort, ForkSupport, Kept, PauseSupport, PortAuth,
    PortsWhen, Retry, SandboxState, Scope, Secret, SnapshotInfo, SnapshotOutcome, SnapshotRequest,
    SnapshotSupport, SourceAfter, StateCapabilities, WhilePaused,
};

use crate::PROVIDER;
use crate::client::Client;
use crate::provider::DaytonaProvider;
use crate::wire;

/// The header a preview request carries the sandbox's token in (`apps/proxy/pkg/proxy/proxy.go`
/// `SANDBOX_AUTH_KEY_HEADER`).
pub const PREVIEW_TOKEN_HEADER: &str = "X-Daytona-Preview-Token";

/// What Daytona keeps (`daytonaio/daytona` v0.190.0 `apps/api/src/sandbox/services/
/// sandbox.service.ts`, the SDK `daytona` 0.226.1 `_sync/sandbox.py`):
///
/// - pause is **stop** (`POST /sandbox/{id}/stop`): the files stay, the processes end; resume is
///   `POST /sandbox/{id}/start`. Daytona's own `pause` (memory kept) exists only for `linux-vm`
///   and `windows` sandboxes (422 "Pausing is not supported for this sandbox" otherwise, and
///   containers are the default class), so it is not what this adapter calls. A stopped sandbox
///   answers commands with the runner's 400 "Is the Sandbox started?": `Conflict`, state
///   `Stopped`; connect does not start it. Sandboxes this adapter creates are ephemeral
///   (`autoDeleteInterval` 0, deleted when they stop), so pause first turns auto-delete off
///   (`POST /sandbox/{id}/autodelete/-1`, Daytona's default); closing an owning handle still
///   deletes the sandbox. An idle or stopped sandbox Daytona archives (`archived`, listed as
///   [`SandboxState::Archived`]) starts again the same way, more slowly.
/// - a snapshot is the runner's `docker commit` (`Pause: false`: the container runs on, so the
///   copy is not one point in time while it writes), named (the name is its id here: create
///   takes it); the sandbox is `snapshotting` meanwhile, then back in its previous state.
///   Memory snapshots are Windows-only (`includeMemory`).
/// - fork: Daytona's native fork is `linux-vm`/`windows` only (422 for containers), so a fork is
///   a snapshot, a create from it, and the snapshot's deletion.
/// - any port 1–65535 has a preview URL (`{port}-{id}.{proxyDomain}`) whose requests carry
///   the sandbox's token in `X-Daytona-Preview-Token`; no list, no unexpose. The daemon's own
///   ports (toolbox 2280, terminal 22222, recording dashboard 33333) are refused. With
///   [`DaytonaConfig::signed_previews`](crate::DaytonaConfig::signed_previews) the URL is a
///   signed one instead (`{port}-{token}.{proxyDomain}`, [`PortAuth::InUrl`]), which expires.
pub const STATE: StateCapabilities = StateCapabilities {
    pause: Some(PauseSupport {
        kinds: &[Kept::Filesystem],
        scope: Scope::Root,
        while_paused: WhilePaused::Refused,
        connect_resumes: false,
    }),
    snapshot: Some(SnapshotSupport {
        kinds: &[Kept::Filesystem],
        scope: Scope::Root,
        source_after: SourceAfter::Running,
        named: true,
        ..SnapshotSupport::FILESYSTEM
    }),
    fork: Some(ForkSupport::SNAPSHOT_AND_CREATE),
    expose: Some(ExposeSupport {
        when: PortsWhen::AnyTime,
        auth: PortAuth::Header(PREVIEW_TOKEN_HEADER),
        list: false,
        unexpose: false,
        ports: (1, 65535),
        reserved: &[2280, 22222, 33333],
        only: None,
    }),
};

/// [`STATE`] as a provider configured with `signed` previews has it: the token in the URL.
pub(crate) fn state_with(signed: Option<Duration>) -> StateCapabilities {
    let mut state = STATE;
    if signed.is_some() {
        state.expose = state.expose.map(|e| ExposeSupport {
            auth: PortAuth::InUrl,
            ..e
        });
    }
    state
}

/// Polls the sandbox until `done` says its state is reached (the SDK's `_wait_for_state`),
/// within `timeout`; `error`/`build_failed`/`destroyed` end the wait with an error.
async fn wait_for(
    client: &Client,
    mut sandbox: wire::Sandbox,
    done: impl Fn(&str) -> bool,
    timeout: Duration,
    operation: &'static str,
) -> Result<wire::Sandbox, Error> {
    let until = Instant::now() + timeout;
    let mut pause = Duration::from_millis(25);
    loop {
        let state = sandbox.state.clone().unwrap_or_default();
        if done(&state) {
            return Ok(sandbox);
        }
        if matches!(
            state.as_str(),
            "error" | "build_failed" | "destroyed" | "destroying"
        ) {
            let kind = if state.starts_with("destr") {
                ErrorKind::NotFound
            } else {
                ErrorKind::Unavailable
            };
            return Err(Error::new(
                kind,
                format!(
                    "sandbox {} went {state} {}",
                    sandbox.id,
                    sandbox.error_reason.clone().unwrap_or_default()
                ),
            )
            .with_provider(PROVIDER)
            .with_operation(operation));
        }
        if Instant::now() > until {
            return Err(Error::new(
                ErrorKind::Timeout(execseam_core::Deadline::Request),
                format!(
                    "sandbox {} is still {state} after {}s",
                    sandbox.id,
                    timeout.as_secs()
                ),
            )
            .with_retry(Retry::Never)
            .with_provider(PROVIDER)
            .with_operation(operation));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(500));
        sandbox = client.get_sandbox(&sandbox.id).await?;
    }
}

fn info_of(s: &wire::Snapshot) -> SnapshotInfo {
    let mut info = SnapshotInfo::new(s.name.clone(), Kept::Filesystem);
    if let Some(src) = &s.source_sandbox_id {
        info = info.with_source(src.clone());
    }
    if let Some(gb) = s.size.filter(|g| g.is_finite() && *g >= 0.0) {
        info = info.with_size((gb * 1e9) as u64);
    }
    info
}

impl DaytonaProvider {
    /// Stops sandbox `id` (its files kept, its processes ended), first turning off the
    /// auto-delete of an ephemeral sandbox; one stopped or archived already is `Ok`.
    pub async fn pause(&self, id: &str, keep: Option<Kept>) -> Result<SandboxState, Error> {
        STATE.check_pause(PROVIDER, keep)?;
        let client = self.client();
        let sandbox = client.get_sandbox(id).await?;
        match sandbox.state.as_deref() {
            Some("stopped") => return Ok(SandboxState::Stopped),
            Some("archived" | "archiving") => return Ok(SandboxState::Archived),
            _ => {}
        }
        if sandbox.auto_delete_interval == Some(0) {
            client
                .sandbox_action::<()>(id, "autodelete/-1", None, "pause")
                .await?;
        }
        let stopped = client
            .sandbox_action::<()>(id, "stop", None, "pause")
            .await?;
        wait_for(
            client,
            stopped,
            |s| s == "stopped",
            self.config().start_timeout,
            "pause",
        )
        .await?;
        Ok(SandboxState::Stopped)
    }

    /// Starts sandbox `id` again (`POST /sandbox/{id}/start`, from `stopped` or `archived`) and
    /// waits until it is started; a started one is `Ok`.
    pub async fn resume(&self, id: &str) -> Result<(), Error> {
        STATE.check_resume(PROVIDER)?;
        let client = self.client();
        let started = client
            .sandbox_action::<()>(id, "start", None, "resume")
            .await?;
        wait_for(
            client,
            started,
            |s| s == "started",
            self.config().start_timeout,
            "resume",
        )
        .await
        .map(drop)
    }

    /// Snapshots sandbox `id` under `request.name` (or a fresh `execseam-…` name) and waits
    /// until the snapshot is active; the source runs on.
    pub async fn snapshot(
        &self,
        id: &str,
        request: SnapshotRequest,
    ) -> Result<SnapshotOutcome, Error> {
        let kind = STATE.check_snapshot(PROVIDER, &request)?;
        let name = request.name.clone().unwrap_or_else(|| {
            format!(
                "execseam-{}",
                execseam_adapter_kit::id::random_id(16).to_lowercase()
            )
        });
        let client = self.client();
        let timeout = self.config().start_timeout;
        let taken = client
            .sandbox_action(
                id,
                "snapshot",
                Some(&wire::CreateSandboxSnapshot { name: &name }),
                "snapshot",
            )
            .await?;
        let after = wait_for(client, taken, |s| s != "snapshotting", timeout, "snapshot").await?;
        // The sandbox is back; the snapshot is persisted when the runner's commit succeeded.
        let until = Instant::now() + timeout;
        let mut pause = Duration::from_millis(25);
        let snap = loop {
            match client.get_snapshot(&name).await? {
                Some(s) if s.state.as_deref() == Some("active") => break s,
                Some(s) if matches!(s.state.as_deref(), Some("error" | "build_failed")) => {
                    return Err(Error::new(
                        ErrorKind::Internal,
                        format!(
                            "snapshot {name} failed: {}",
                            s.error_reason.unwrap_or_default()
                        ),
                    )
                    .with_provider(PROVIDER)
                    .with_operation("snapshot"));
                }
                _ if Instant::now() > until => {
                    return Err(Error::new(
                        ErrorKind::Internal,
                        format!("snapshot {name} of sandbox {id} is not active after the sandbox left snapshotting"),
                    )
                    .with_provider(PROVIDER)
                    .with_operation("snapshot"));
                }
                _ => {}
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(500));
        };
        let mut info = info_of(&snap).with_created(SystemTime::now());
        info.kind = kind;
        if info.source.is_none() {
            info = info.with_source(id);
        }
        let state = match after.state.as_deref() {
            Some("stopped") => SandboxState::Stopped,
            _ => SandboxState::Running,
        };
        Ok(SnapshotOutcome::new(info, state))
    }

    /// The organization's snapshots (of sandbox `source` only, when given), every page; ids are
    /// names (what create takes).
    pub async fn list_snapshots(&self, source: Option<&str>) -> Result<Vec<SnapshotInfo>, Error> {
        STATE.check_list_snapshots(PROVIDER)?;
        let listed = self.client().list_snapshots(source).await?;
        let mut out: Vec<SnapshotInfo> = listed
            .iter()
            .filter(|s| s.state.as_deref() != Some("removing"))
            .map(info_of)
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    /// Deletes a snapshot by name or id (`GET /snapshots/{idOrName}`, then `DELETE
    /// /snapshots/{id}`, which takes the id only); one already gone is `Ok`.
    pub async fn delete_snapshot(&self, snapshot: &str) -> Result<(), Error> {
        STATE.check_delete_snapshot(PROVIDER, snapshot)?;
        let client = self.client();
        match client.get_snapshot(snapshot).await? {
            None => Ok(()),
            Some(s) => client.delete_snapshot(&s.id).await,
        }
    }

    /// The preview URL of port `port` of sandbox `id`, with the token its requests carry.
    pub async fn expose(&self, id: &str, port: u16) -> Result<ExposedPort, Error> {
        STATE.check_expose(PROVIDER, port)?;
        let signed = self.config().signed_previews;
        let asked = SystemTime::now();
        let p = self.client().preview_url(id, port, signed).await?;
        Ok(match signed {
            // The token is the URL's host label (`{port}-{token}.{proxyDomain}`).
            Some(t) => ExposedPort::new(port, p.url).with_expires(asked + t),
            None => ExposedPort::new(port, p.url)
                .with_header(PREVIEW_TOKEN_HEADER, Secret::new(p.token)),
        })
    }
}
