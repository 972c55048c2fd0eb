//! [`FlyProvider`]: machines of one app as sandboxes.

use execseam_adapter_kit::{Checks as _, StateChecks as _};
use std::sync::Arc;

use execseam_core::{
    Error, Kept, ListFilter, Ownership, Provider, Sandbox, SandboxInfo, SandboxSpec, SandboxState,
};

use crate::client::Client;
use crate::config::FlyConfig;
use crate::error::control;
use crate::exec::FlyExec;
use crate::wire::{CreateMachine, CreateMachineConfig, Guest};
use crate::{LIFECYCLE, PROVIDER};

/// Creates, connects to, lists and destroys the machines of one Fly app. Built without I/O.
///
/// | operation | Machines API call |
/// |---|---|
/// | [`create`](Self::create) | `POST /v1/apps/{app}/machines` (image, env, metadata, guest CPUs and memory; `auto_destroy`), then `…/wait?state=started` |
/// | [`connect`](Self::connect) | `GET …/machines/{id}`, starting it if it is stopped or suspended |
/// | [`list`](Self::list) | `GET /v1/apps/{app}/machines`, filtered on `config.metadata` here, as fly-go and flyctl filter |
/// | [`destroy`](Self::destroy) | `DELETE …/machines/{id}?kill=true` (fly-go's `Destroy` with `Kill`); 404 is `Ok` |
/// | [`pause`](Self::pause) | `POST …/machines/{id}/suspend`, then `…/wait?state=suspended`: a memory snapshot ("picks up exactly where it left off", fly.io/docs/reference/suspend-resume) |
/// | [`resume`](Self::resume) | `POST …/machines/{id}/start` (a suspended machine resumes from its snapshot), then `…/wait?state=started`; [`connect`](Self::connect) does the same |
///
/// No snapshots, forks or exposed ports: the Machines API has no filesystem snapshot of a
/// machine (only volume snapshots) and no per-machine URL (ports are the app's `services`
/// behind the Fly proxy). `stop` is not a pause: it resets the root filesystem.
#[derive(Clone, Debug)]
pub struct FlyProvider {
    client: Client,
}

impl FlyProvider {
    /// A provider with this configuration; what can be wrong in it is
    /// [`InvalidConfig`](execseam_core::ErrorKind::InvalidConfig). No I/O.
    pub fn new(config: FlyConfig) -> Result<FlyProvider, Error> {
        config.validate()?;
        Ok(FlyProvider {
            client: Client::new(Arc::new(config))?,
        })
    }

    execseam_adapter_kit::provider_config!(self => FlyConfig: self.client.config());

    /// Creates a machine and waits until it is started; the handle owns it (close destroys it).
    /// CPUs are whole (`cpu_millis` a multiple of 1000) and memory a multiple of 256 MiB, as the
    /// API requires.
    pub async fn create(&self, spec: SandboxSpec) -> Result<FlyExec, Error> {
        spec.check(PROVIDER, &LIFECYCLE)?;
        let invalid = |m: String| Error::invalid_config(m).with_provider(PROVIDER);
        let image = spec
            .image()
            .map(str::to_owned)
            .or_else(|| self.config().image.clone())
            .ok_or_else(|| {
                invalid(
                    "a Fly machine needs an image: set it in the spec or EXECSEAM_FLY_IMAGE".into(),
                )
            })?;
        let guest = match (spec.cpu_millis(), spec.memory_mib()) {
            (None, None) => None,
            (cpu, mem) => {
                let cpus = cpu.unwrap_or(1000);
                if cpus % 1000 != 0 {
                    return Err(invalid(format!(
                        "Fly machines have whole CPUs: {cpus} millis is not a multiple of 1000"
                    )));
                }
                let memory_mb = mem.unwrap_or(256);
                if memory_mb % 256 != 0 {
                    return Err(invalid(format!(
                        "Fly machine memory is a multiple of 256 MiB, not {memory_mb}"
                    )));
                }
                Some(Guest {
                    cpu_kind: "shared".into(),
                    cpus: cpus / 1000,
                    memory_mb,
                })
            }
        };
        let body = CreateMachine {
            region: self.config().region.clone(),
            config: CreateMachineConfig {
                image,
                env: spec.env().clone(),
                metadata: spec.labels().clone(),
                guest,
                auto_destroy: true,
            },
        };
        let m = self.client.create_machine(&body).await?;
        if m.id.is_empty() {
            return Err(Error::protocol("the created machine has no id")
                .with_provider(PROVIDER)
                .with_operation("create"));
        }
        let exec = FlyExec::new(self.client.for_machine(&m.id), Ownership::created());
        if let Err(e) = exec.ensure_started().await {
            let _ = Sandbox::destroy(&exec).await;
            return Err(e);
        }
        Ok(exec)
    }

    /// Connects to machine `id` (starting it if it is stopped or suspended); not owned.
    pub async fn connect(&self, id: &str) -> Result<FlyExec, Error> {
        let exec = FlyExec::new(self.client.for_machine(id), Ownership::connected());
        exec.ensure_started().await?;
        Ok(exec)
    }

    /// A handle on machine `id` without a request (it must be started); not owned.
    pub fn attach(&self, id: &str) -> Result<FlyExec, Error> {
        if id.is_empty() {
            return Err(control("attach").invalid_config("an empty machine id"));
        }
        Ok(FlyExec::new(
            self.client.for_machine(id),
            Ownership::connected(),
        ))
    }

    /// Lists the app's machines that `filter` selects (by `config.metadata`); destroyed ones
    /// are left out.
    pub async fn list(&self, filter: &ListFilter) -> Result<Vec<SandboxInfo>, Error> {
        filter.check(PROVIDER, &LIFECYCLE)?;
        let machines = self.client.list_machines().await?;
        Ok(machines
            .into_iter()
            .filter(|m| !matches!(m.state.as_str(), "destroyed" | "destroying"))
            .map(|m| {
                let state = crate::wire::sandbox_state(&m.state);
                let config = m.config.unwrap_or_default();
                let mut info = SandboxInfo::new(m.id)
                    .with_labels(config.metadata.unwrap_or_default())
                    .with_state(state);
                if let Some(image) = config.image {
                    info = info.with_image(image);
                }
                info
            })
            .filter(|i| filter.matches(i))
            .collect())
    }

    /// Suspends machine `id` (memory and processes kept) and waits until it is `suspended`; a
    /// suspended machine is `Ok`. [`connect`](Self::connect) resumes it; an exec is refused
    /// (the API's 412, `Conflict` with state `Paused`).
    pub async fn pause(&self, id: &str, keep: Option<Kept>) -> Result<SandboxState, Error> {
        LIFECYCLE.state.check_pause(PROVIDER, keep)?;
        self.attach(id)?.suspend().await?;
        Ok(SandboxState::Paused)
    }

    /// Resumes machine `id` (`start`); a started machine is `Ok`.
    pub async fn resume(&self, id: &str) -> Result<(), Error> {
        LIFECYCLE.state.check_resume(PROVIDER)?;
        self.attach(id)?.ensure_started().await
    }

    /// Destroys machine `id`; one that does not exist is `Ok(())`.
    pub async fn destroy(&self, id: &str) -> Result<(), Error> {
        Sandbox::destroy(&self.attach(id)?).await
    }
}

impl Provider for FlyProvider {
    execseam_adapter_kit::accessors!(
        self => provider: PROVIDER,
        capabilities: FlyExec::capabilities_of(self.config()),
        lifecycle: LIFECYCLE,
    );

    execseam_adapter_kit::forward_lifecycle!(FlyProvider: create, connect, attach, list, destroy, pause, resume);
}
