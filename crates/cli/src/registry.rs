//! The adapters, through the `execseam` facade's registry: a provider per name, configured from
//! the environment, and the sandboxes this run creates (removed before it exits).

use std::sync::{Arc, Mutex};

use execseam::{
    AdapterInfo as Adapter, BoxFuture, Capabilities, Error, Exec, Provider, Sandbox, SandboxSpec,
};

/// A clean-up: closes a sandbox this run created.
type Cleanup = BoxFuture<'static, Result<(), Error>>;

/// Clean-ups to run before the CLI exits: sandboxes this run created.
static CLOSERS: Mutex<Vec<(String, Cleanup)>> = Mutex::new(Vec::new());

/// Runs every registered clean-up; a failure is reported on stderr, never hidden.
pub async fn close_all() {
    let closers = std::mem::take(&mut *CLOSERS.lock().expect("closers"));
    for (adapter, cleanup) in closers {
        if let Err(e) = cleanup.await {
            eprintln!("execseam: {adapter}: removing the sandbox this run created failed: {e}");
        }
    }
}

/// Every adapter compiled in.
pub fn all() -> Vec<Adapter> {
    execseam::adapters()
}

/// The adapter's capabilities as the environment configures it (its defaults if the
/// environment does not configure it).
pub fn capabilities(a: &Adapter) -> Capabilities {
    a.build(&|k: &str| std::env::var(k).ok())
        .map_or(a.capabilities, |p| p.capabilities())
}

/// The provider `name`, configured from the environment.
pub fn provider(name: &str) -> Result<Box<dyn Provider>, Error> {
    execseam::provider(name)
}

/// A sandbox to run in: `sandbox` when given (connected, left running), else a new one that is
/// closed (destroyed) before the CLI exits.
pub async fn open(name: &str, sandbox: Option<&str>) -> Result<Arc<dyn Exec>, Error> {
    open_with(name, sandbox, SandboxSpec::new()).await
}

/// [`open`], creating from `spec` when no sandbox is given.
pub async fn open_with(
    name: &str,
    sandbox: Option<&str>,
    spec: SandboxSpec,
) -> Result<Arc<dyn Exec>, Error> {
    let provider = provider(name)?;
    let handle: Arc<dyn Sandbox> = match sandbox.filter(|s| !s.is_empty()) {
        Some(id) => Arc::from(provider.connect(id).await?),
        None => {
            let created: Arc<dyn Sandbox> = Arc::from(provider.create(spec).await?);
            let owned = created.clone();
            CLOSERS.lock().expect("closers").push((
                name.to_owned(),
                Box::pin(async move { owned.close().await }),
            ));
            created
        }
    };
    Ok(handle as Arc<dyn Exec>)
}
