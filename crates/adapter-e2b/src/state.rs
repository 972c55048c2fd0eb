//! Sandbox state on E2B: pause (`POST /sandboxes/{id}/pause`, `memory: false` for a
//! filesystem-only pause) and resume (connect), snapshot templates (`POST
//! /sandboxes/{id}/snapshots`, `GET /snapshots`, `DELETE /templates/{id}`, create with the
//! snapshot id as `templateID`), the native fork (`POST /sandboxes/{id}/fork`), and ports by
//! E2B's host scheme (`{port}-{id}.{domain}`, the SDK's `get_host`).

use execseam_adapter_kit::StateChecks as _;
use tokio::time::Instant;

use execseam_adapter_kit::retry::Stage;
use execseam_core::{
    Error, ErrorKind, ExposeSupport, ExposedPort, ForkSupport, Kept, Ownership, PauseSupport,
    PortAuth, PortsWhen, Retry, SandboxState, Scope, Secret, SnapshotInfo, SnapshotOutcome,
    SnapshotRequest, SnapshotSupport, SourceAfter, StateCapabilities, WhilePaused,
};

use crate::PROVIDER;
use crate::config::ENVD_PORT;
use crate::connect::CallError;
use crate::error::{self, Ctx};
use crate::exec::E2bExec;
use crate::provider::E2bProvider;

/// What E2B keeps (from `e2b-dev/infra` `packages/api/internal/handlers` and the SDK 2.63.0):
///
/// - pause keeps memory and processes by default (`memory` omitted), or the files only
///   (`memory: false`: "resuming reboots the sandbox from its disk"); a command sent to a paused
///   sandbox meets the proxy's "sandbox was not found" (no auto-resume unless created with it),
///   which the adapter reports as `Conflict` with the sandbox's state `Paused`; connect resumes.
/// - a snapshot is a memory snapshot (the stored servers ignore `memory` on snapshots): the
///   source is checkpointed in place (briefly paused, then running with the same id); its id is
///   a template (`<template>:default`, or `<team>/<name>:default` when named).
/// - fork is native: the source is checkpointed in place, each fork boots from that snapshot
///   and shares nothing with it afterwards.
/// - every listening port is reachable at `https://{port}-{id}.{domain}` (no call, no list, no
///   unexpose; envd's port is E2B's own).
pub const STATE: StateCapabilities = StateCapabilities {
    pause: Some(PauseSupport {
        kinds: &[Kept::FilesystemAndMemory, Kept::Filesystem],
        scope: Scope::Root,
        while_paused: WhilePaused::Refused,
        connect_resumes: true,
    }),
    snapshot: Some(SnapshotSupport {
        kinds: &[Kept::FilesystemAndMemory],
        scope: Scope::Root,
        source_after: SourceAfter::PausedBriefly,
        named: true,
        ..SnapshotSupport::FILESYSTEM
    }),
    fork: Some(ForkSupport {
        native: true,
        keeps: Kept::FilesystemAndMemory,
        source_after: SourceAfter::PausedBriefly,
        includes_unsaved: true,
        independent: true,
    }),
    expose: Some(ExposeSupport {
        when: PortsWhen::AnyTime,
        auth: PortAuth::None,
        list: false,
        unexpose: false,
        ports: (1, 65535),
        reserved: &[ENVD_PORT],
        only: None,
    }),
};

fn ctx(op: &'static str, stage: Stage) -> Ctx {
    Ctx::new(op, stage)
}

impl E2bProvider {
    /// Pauses sandbox `id`: memory kept unless `keep` is [`Kept::Filesystem`]. One paused
    /// already is `Ok`.
    pub async fn pause(&self, id: &str, keep: Option<Kept>) -> Result<SandboxState, Error> {
        let kind = STATE.check_pause(PROVIDER, keep)?;
        let memory = (kind == Kept::Filesystem).then_some(false);
        self.control()?
            .pause(id, memory)
            .await
            .map_err(|e| error::map(e, &ctx("pause", Stage::Submit)))?;
        Ok(SandboxState::Paused)
    }

    /// Resumes sandbox `id` (`POST /v2/sandboxes/{id}/connect`, its lifetime set to
    /// [`E2bConfig::sandbox_timeout`](crate::E2bConfig::sandbox_timeout)); a running one is `Ok`.
    pub async fn resume(&self, id: &str) -> Result<(), Error> {
        STATE.check_resume(PROVIDER)?;
        self.control()?
            .connect(id)
            .await
            .map_err(|e| error::map(e, &ctx("resume", Stage::Submit)))?;
        Ok(())
    }

    /// Snapshots sandbox `id` into a template; the source runs on.
    pub async fn snapshot(
        &self,
        id: &str,
        request: SnapshotRequest,
    ) -> Result<SnapshotOutcome, Error> {
        let kind = STATE.check_snapshot(PROVIDER, &request)?;
        let taken = self
            .control()?
            .snapshot(id, request.name.as_deref())
            .await
            .map_err(|e| error::map(e, &ctx("snapshot", Stage::Submit)))?;
        let mut info = SnapshotInfo::new(taken.snapshot_id, kind)
            .with_source(id)
            .with_created(std::time::SystemTime::now());
        for n in taken.names {
            info = info.with_name(n);
        }
        Ok(SnapshotOutcome::new(info, SandboxState::Running))
    }

    /// The team's snapshots (of sandbox `source` only, when given), every page.
    pub async fn list_snapshots(&self, source: Option<&str>) -> Result<Vec<SnapshotInfo>, Error> {
        STATE.check_list_snapshots(PROVIDER)?;
        let listed = self
            .control()?
            .snapshots(source)
            .await
            .map_err(|e| error::map(e, &ctx("list_snapshots", Stage::Before)))?;
        let mut out: Vec<SnapshotInfo> = listed
            .into_iter()
            .map(|s| {
                let mut info = SnapshotInfo::new(s.snapshot_id, Kept::FilesystemAndMemory);
                if let Some(src) = source {
                    info = info.with_source(src);
                }
                for n in s.names {
                    info = info.with_name(n);
                }
                info
            })
            .collect();
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    /// Deletes a snapshot template; one already gone is `Ok`. E2B refuses (400) while a running
    /// sandbox was created from it.
    pub async fn delete_snapshot(&self, snapshot: &str) -> Result<(), Error> {
        STATE.check_delete_snapshot(PROVIDER, snapshot)?;
        self.control()?
            .delete_template(snapshot)
            .await
            .map(drop)
            .map_err(|e| error::map(e, &ctx("delete_snapshot", Stage::Before)))
    }

    /// Forks sandbox `id` natively (one fork, lifetime
    /// [`E2bConfig::sandbox_timeout`](crate::E2bConfig::sandbox_timeout)); the handle owns it.
    pub async fn fork(&self, id: &str) -> Result<E2bExec, Error> {
        STATE.check_fork(PROVIDER)?;
        let timeout = self.config.sandbox_timeout;
        let result = self
            .control()?
            .fork(id, timeout)
            .await
            .map_err(|e| error::map(e, &ctx("fork", Stage::Submit)))?;
        match (result.sandbox, result.error) {
            (Some(sandbox), None) => E2bExec::build(
                self.config.clone(),
                self.http.clone(),
                self.api.clone(),
                sandbox,
                Ownership::created(),
                Some(Instant::now() + timeout),
            ),
            (None, Some(e)) => Err(error::map(
                // The control plane's own answer inside a fork result: the provider's refusal.
                CallError::Http {
                    status: e.code,
                    signed: true,
                    message: e.message,
                    retry_after: None,
                },
                &ctx("fork", Stage::Submit),
            )),
            _ => Err(Error::new(
                ErrorKind::Protocol,
                "a fork result with neither or both of sandbox and error",
            )
            .with_retry(Retry::Unsafe)
            .with_provider(PROVIDER)
            .with_operation("fork")),
        }
    }

    /// The URL of port `port` of sandbox `id`, without a call (as the SDK's `get_host`):
    /// `https://{port}-{id}.{domain}`; with [`E2bConfig::sandbox_url`](crate::E2bConfig::sandbox_url)
    /// set (a self-hosted proxy, the emulator), that URL with the routing headers
    /// `E2b-Sandbox-Id` and `E2b-Sandbox-Port` the SDK sends there.
    pub fn expose(&self, id: &str, port: u16) -> Result<ExposedPort, Error> {
        STATE.check_expose(PROVIDER, port)?;
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
            return Err(
                Error::invalid_config(format!("{id:?} is not an E2B sandbox id"))
                    .with_provider(PROVIDER)
                    .with_operation("expose"),
            );
        }
        Ok(match &self.config.sandbox_url {
            Some(url) => ExposedPort::new(port, url.trim_end_matches('/'))
                .with_header("E2b-Sandbox-Id", Secret::new(id))
                .with_header("E2b-Sandbox-Port", Secret::new(port.to_string())),
            None => ExposedPort::new(port, format!("https://{port}-{id}.{}", self.config.domain)),
        })
    }
}

/// The error of a command sent to a paused sandbox.
pub(crate) fn paused(op: &'static str) -> Error {
    Error::new(
        ErrorKind::Conflict,
        "the sandbox is paused: resume it (connect) before running commands",
    )
    .with_retry(Retry::Never)
    .with_provider(PROVIDER)
    .with_operation(op)
    .with_sandbox_state(SandboxState::Paused)
}
