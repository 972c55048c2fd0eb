//! [`KubernetesProvider`]: sandboxes as agent-sandbox claims, Sandboxes, or plain pods.

use execseam_adapter_kit::{Checks as _, StateChecks as _};
use std::sync::Arc;

use execseam_core::{
    Error, Kept, ListFilter, Ownership, Provider, Sandbox, SandboxInfo, SandboxSpec, SandboxState,
};

use crate::client::Api;
use crate::config::KubernetesConfig;
use crate::exec::{KubernetesExec, Shared};
use crate::{PROVIDER, lifecycle};

/// Creates, connects to, lists and destroys sandboxes on a Kubernetes cluster. Built without
/// I/O (the kubeconfig is read on the first call); cheap to clone (one client).
///
/// | operation | claim mode (default) | sandbox mode | pod mode |
/// |---|---|---|---|
/// | [`create`](Self::create) | `POST sandboxclaims` on the warm pool, one watch until `Ready` and `status.sandbox.name`, `GET sandboxes/{name}` for the pod | `GET sandboxtemplates/{t}`, `POST sandboxes`, watch until `Ready` | `POST pods`, watch until `Running` and `Ready` |
/// | [`connect`](Self::connect) | the claim's watch until `Ready` | the Sandbox's | the Pod's |
/// | [`list`](Self::list) | `GET sandboxclaims?labelSelector=app.kubernetes.io/managed-by=execseam,…` | `GET sandboxes?…` | `GET pods?…` |
/// | [`destroy`](Self::destroy) | `DELETE sandboxclaims/{id}` (the garbage collector deletes its Sandbox and Pod), then wait until the pod is gone; a claim already gone is `Ok` | `DELETE sandboxes/{id}`, wait | `DELETE pods/{id}` (grace 0), wait |
/// | [`pause`](Self::pause) / [`resume`](Self::resume) | `GET` the claim for its Sandbox, `PATCH` its `spec.operatingMode`, poll the Sandbox until `Suspended=True` / `Ready=True` | the same on the Sandbox | `Unsupported` |
#[derive(Clone)]
pub struct KubernetesProvider {
    config: KubernetesConfig,
    shared: Arc<Shared>,
}

execseam_adapter_kit::debug_fields!(self => KubernetesProvider { config: self.config });

impl KubernetesProvider {
    /// A provider with this configuration; what is wrong in it is
    /// [`InvalidConfig`](execseam_core::ErrorKind::InvalidConfig). No I/O.
    pub fn new(config: KubernetesConfig) -> Result<KubernetesProvider, Error> {
        config.validate()?;
        let shared = Arc::new(Shared::new(Api::new(config.clone())));
        Ok(KubernetesProvider { config, shared })
    }

    execseam_adapter_kit::provider_config!(self => KubernetesConfig: &self.config);

    fn handle(
        &self,
        id: String,
        target: Option<crate::exec::Target>,
        owned: bool,
    ) -> KubernetesExec {
        let ownership = if owned {
            Ownership::created()
        } else {
            Ownership::connected()
        };
        KubernetesExec::new(self.shared.clone(), id, self.config.mode, target, ownership)
    }

    /// Creates a sandbox and waits until it is Ready; the handle owns it (close deletes it).
    pub async fn create(&self, spec: SandboxSpec) -> Result<KubernetesExec, Error> {
        spec.check(PROVIDER, &self.lifecycle())?;
        let (id, target) = lifecycle::create(&self.shared.api, &spec).await?;
        Ok(self.handle(id, Some(target), true))
    }

    /// Connects to sandbox `id` (waiting while it is still starting); the handle does not own it.
    pub async fn connect(&self, id: &str) -> Result<KubernetesExec, Error> {
        let target = lifecycle::connect(&self.shared.api, id).await?;
        Ok(self.handle(id.to_owned(), Some(target), false))
    }

    /// A handle on sandbox `id` without any request; its pod is looked up on the first exec.
    pub fn attach(&self, id: &str) -> Result<KubernetesExec, Error> {
        Ok(self.handle(id.to_owned(), None, false))
    }

    /// The sandboxes this adapter made that carry `filter`'s labels.
    pub async fn list(&self, filter: &ListFilter) -> Result<Vec<SandboxInfo>, Error> {
        filter.check(PROVIDER, &self.lifecycle())?;
        lifecycle::list(&self.shared.api, filter).await
    }

    /// Deletes sandbox `id` and waits for its pod to be gone; one that does not exist is `Ok`.
    pub async fn destroy(&self, id: &str) -> Result<(), Error> {
        Sandbox::destroy(&self.attach(id)?).await
    }

    /// Suspends sandbox `id` (claim and sandbox modes; see [`STATE`](crate::STATE)):
    /// `spec.operatingMode: Suspended` on its Sandbox by merge patch, then waits until the
    /// controller reports `Suspended=True` (its pod is gone). A suspended one is `Ok` again.
    pub async fn pause(&self, id: &str, keep: Option<Kept>) -> Result<SandboxState, Error> {
        self.lifecycle().state.check_pause(PROVIDER, keep)?;
        lifecycle::set_operating_mode(&self.shared.api, self.config.mode, id, true).await?;
        Ok(SandboxState::Paused)
    }

    /// Resumes sandbox `id`: `spec.operatingMode: Running`, then waits until it is `Ready` (a
    /// new pod, same name); a running one is `Ok`.
    pub async fn resume(&self, id: &str) -> Result<(), Error> {
        self.lifecycle().state.check_resume(PROVIDER)?;
        lifecycle::set_operating_mode(&self.shared.api, self.config.mode, id, false).await
    }
}

impl Provider for KubernetesProvider {
    execseam_adapter_kit::accessors!(
        self => provider: PROVIDER,
        capabilities: crate::capabilities_of(&self.config),
        lifecycle: crate::lifecycle_of(&self.config),
    );

    execseam_adapter_kit::forward_lifecycle!(KubernetesProvider: create, connect, attach, list, destroy, pause, resume);
}
