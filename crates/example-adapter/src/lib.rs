#![doc = include_str!("../README.md")]
//!
//! # The shape, in order
//!
//! 1. [`Example`]: the adapter as a type. The registry of the `execseam` facade lists it (one
//!    line); everything the registry, the CLI and the generic test paths know about the adapter
//!    comes from this impl.
//! 2. [`ExampleConfig`]: built from the declared variables ([`VARS`]) by the kit's reader, or
//!    with setters; no I/O, no public fields.
//! 3. [`ExampleProvider`]: the lifecycle calls the provider has (said in [`LIFECYCLE`]; the
//!    others keep the contract's `Unsupported` defaults), and `attach` (a handle on an existing
//!    sandbox with no I/O).
//! 4. [`ExampleSandbox`]: `Exec` (here delegated to the host) and `Sandbox`'s three required
//!    items; `owned`, `set_owned`, `close` and `destroy` are provided by the contract.
#![warn(missing_docs)]

use execseam_adapter_kit::Checks as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use execseam_adapter_kit::{Adapter, Var, Vars, id};
use execseam_core::{
    BoxFuture, Capabilities, Command, Error, ErrorKind, Exec, LifecycleCapabilities, Output,
    Ownership, Provider, Sandbox, SandboxSpec,
};
use execseam_local::LocalExec;

/// The provider name in errors and reports.
pub const PROVIDER: &str = "example";

/// What its sandboxes do: everything native (they are host processes), no streaming (the
/// contract's `streaming` is optional; this example leaves it out).
pub const CAPABILITIES: Capabilities = Capabilities {
    streaming: false,
    ..Capabilities::FULL
};

/// Create, connect and destroy; no listing, no spec fields.
pub const LIFECYCLE: LifecycleCapabilities = LifecycleCapabilities {
    list: false,
    // No spec fields or options; no pause, snapshots, forks or exposed ports: every state
    // operation is Unsupported.
    ..LifecycleCapabilities::ALL_OPERATIONS
};

/// The variables its configuration reads.
pub const VARS: &[Var] = &[Var::text("EXECSEAM_EXAMPLE_ROOT")];

/// The adapter.
#[derive(Clone, Copy, Debug, Default)]
pub struct Example;

impl Adapter for Example {
    const NAME: &'static str = PROVIDER;
    const ABOUT: &'static str = "the smallest adapter (docs/architecture.md, \"Adding an adapter\"): directories on this host";
    const VARS: &'static [Var] = VARS;
    const CAPABILITIES: Capabilities = CAPABILITIES;
    const LIFECYCLE: LifecycleCapabilities = LIFECYCLE;

    type Config = ExampleConfig;
    type Provider = ExampleProvider;

    fn config(vars: &Vars<'_>) -> Result<ExampleConfig, Error> {
        let mut config = ExampleConfig::new();
        if let Some(root) = vars.text("EXECSEAM_EXAMPLE_ROOT") {
            config = config.root(root);
        }
        Ok(config)
    }

    fn provider(config: ExampleConfig) -> Result<ExampleProvider, Error> {
        Ok(ExampleProvider {
            root: Arc::from(config.root),
        })
    }
}

/// The configuration: where the sandboxes' directories are.
#[derive(Clone, Debug)]
pub struct ExampleConfig {
    root: PathBuf,
}

impl Default for ExampleConfig {
    fn default() -> ExampleConfig {
        ExampleConfig::new()
    }
}

impl ExampleConfig {
    /// Sandboxes under `<temp dir>/execseam-example`.
    pub fn new() -> ExampleConfig {
        ExampleConfig {
            root: std::env::temp_dir().join("execseam-example"),
        }
    }

    /// Sandboxes under `dir` (`EXECSEAM_EXAMPLE_ROOT`).
    #[must_use]
    pub fn root(mut self, dir: impl Into<PathBuf>) -> Self {
        self.root = dir.into();
        self
    }
}

/// Creates, connects to and destroys the sandboxes under the configured root.
#[derive(Clone, Debug)]
pub struct ExampleProvider {
    root: Arc<Path>,
}

impl ExampleProvider {
    /// The directory of sandbox `id`, if `id` can name one of this provider's sandboxes.
    fn dir(&self, id: &str) -> Result<PathBuf, Error> {
        let ok = id
            .strip_prefix("example-")
            .is_some_and(|r| !r.is_empty() && r.bytes().all(|b| b.is_ascii_alphanumeric()));
        if !ok {
            return Err(
                Error::new(ErrorKind::NotFound, format!("no example sandbox {id:?}"))
                    .with_provider(PROVIDER),
            );
        }
        Ok(self.root.join(id))
    }

    fn handle(&self, id: String, ownership: Ownership) -> Result<Box<dyn Sandbox>, Error> {
        let dir = self.dir(&id)?;
        let host = LocalExec::new();
        Ok(Box::new(ExampleSandbox {
            id,
            dir,
            host,
            ownership,
        }))
    }
}

fn io(operation: &'static str, e: std::io::Error) -> Error {
    let message = format!("{operation}: {e}");
    let e = match e.kind() {
        std::io::ErrorKind::NotFound => Error::new(ErrorKind::NotFound, message),
        _ => Error::new(ErrorKind::Internal, message),
    };
    e.with_provider(PROVIDER).with_operation(operation)
}

impl Provider for ExampleProvider {
    fn provider(&self) -> &str {
        PROVIDER
    }

    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    fn lifecycle(&self) -> LifecycleCapabilities {
        LIFECYCLE
    }

    fn create(&self, spec: SandboxSpec) -> BoxFuture<'_, Result<Box<dyn Sandbox>, Error>> {
        Box::pin(async move {
            spec.check(PROVIDER, &LIFECYCLE)?;
            let id = format!("example-{}", id::random_id(16));
            std::fs::create_dir_all(self.root.join(&id)).map_err(|e| io("create", e))?;
            self.handle(id, Ownership::created())
        })
    }

    fn connect<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Box<dyn Sandbox>, Error>> {
        Box::pin(async move {
            std::fs::metadata(self.dir(id)?).map_err(|e| io("connect", e))?;
            self.handle(id.to_owned(), Ownership::connected())
        })
    }

    fn attach(&self, id: &str) -> Result<Box<dyn Sandbox>, Error> {
        self.handle(id.to_owned(), Ownership::connected())
    }

    fn destroy<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(async move {
            match std::fs::remove_dir_all(self.dir(id)?) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(io("destroy", e)),
                _ => Ok(()),
            }
        })
    }
}

/// One sandbox: commands run in its directory (their default workdir).
pub struct ExampleSandbox {
    id: String,
    dir: PathBuf,
    host: LocalExec,
    ownership: Ownership,
}

impl Exec for ExampleSandbox {
    fn provider(&self) -> &str {
        PROVIDER
    }

    fn capabilities(&self) -> Capabilities {
        CAPABILITIES
    }

    fn exec(&self, command: Command) -> BoxFuture<'_, Result<Output, Error>> {
        Box::pin(async move {
            if !self.dir.is_dir() {
                return Err(Error::new(
                    ErrorKind::NotFound,
                    format!("the sandbox {} is gone", self.id),
                )
                .with_provider(PROVIDER)
                .with_operation("exec"));
            }
            let command = match command.workdir() {
                Some(_) => command,
                None => command
                    .into_builder()
                    .workdir(self.dir.to_string_lossy())
                    .build()?,
            };
            self.host
                .exec(command)
                .await
                .map_err(|e| e.with_provider(PROVIDER))
        })
    }
}

impl Sandbox for ExampleSandbox {
    fn id(&self) -> &str {
        &self.id
    }

    fn ownership(&self) -> &Ownership {
        &self.ownership
    }

    fn end(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move { std::fs::remove_dir_all(&self.dir).map_err(|e| io("destroy", e)) })
    }
}

impl Drop for ExampleSandbox {
    /// The safety net: an owned sandbox dropped without `close` is removed.
    fn drop(&mut self) {
        if self.ownership.destroy_on_drop() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}
