#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! One path for every emulated adapter, written once: start emulator X (a row of
//! [`execseam_emulators::ALL`]), configure adapter X from the variables the emulator advertises
//! ([`AnyEmulator::env`](execseam_emulators::AnyEmulator)) through the facade's registry
//! ([`execseam::adapter`]), reach one sandbox (the one `EXECSEAM_SANDBOX` names, else a new one),
//! and from the same variables the two broken variants every suite needs: the adapter against
//! an endpoint where nothing listens (every [`VarKind::Url`] variable pointed at a dead port) and
//! a handle on a sandbox that does not exist ([`Provider::attach`] of the emulator's
//! [`missing id`](execseam_emulators::Entry::missing_sandbox_id)).
//!
//! [`targets`] lists the targets: one per emulator, named and configured after it, plus the
//! variants ([`Spec`]: extra variables, another record name) a provider needs; an emulator
//! added to `ALL` is a target with no edit here. The conformance binary (`tests/conformance.rs`),
//! the reliability suite's table and the benchmarks start their targets with [`Emulated::start`].

use std::any::Any;
use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;

use execseam::{BoxFuture, Error, ErrorKind, Provider, Sandbox, SandboxSpec, VarKind};
use execseam_emulators::{AnyEmulator, EmulatorOptions, Entry};

/// What a start hook gives back: the running emulator and what must outlive it.
pub type Started = (AnyEmulator, Vec<Box<dyn Any + Send + Sync>>);

/// Starts an emulator in a way of its own (typed options, a host directory to mount).
pub type StartHook = fn(EmulatorOptions) -> BoxFuture<'static, io::Result<Started>>;

/// How the suite gets a handle on a sandbox that does not exist.
#[derive(Clone, Copy, Debug)]
pub enum Vanish {
    /// `attach` of the emulator's [`missing_sandbox_id`](Entry::missing_sandbox_id) (the
    /// default).
    MissingId,
    /// The suite's own sandbox, attached with these variables changed (a guest address that is
    /// live, and an actor it does not have).
    Vars(&'static [(&'static str, &'static str)]),
    /// A sandbox the adapter created and then destroyed, not owned by the handle (for a provider
    /// where any id is a sandbox on first use, until destroyed).
    Destroyed,
}

/// One emulated target: an adapter against its provider's emulator.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    /// The record's and the report's name (`docs/conformance/<name>.txt`).
    pub name: &'static str,
    /// The adapter (the facade's registry) and the emulator (`ALL`), which share the name.
    pub adapter: &'static str,
    /// Adapter variables beyond the emulator's environment.
    pub vars: &'static [(&'static str, &'static str)],
    /// How the vanished sandbox is made.
    pub vanish: Vanish,
    /// The sandbox's id is its endpoint (a guest's `host:port`): the dead endpoint is a handle
    /// on a dead address, not the same id through dead endpoint variables.
    pub id_is_endpoint: bool,
    /// Why a background child ends with its command here (a fresh sandbox per execution).
    pub children_end: Option<&'static str>,
    /// Why the provider reports an exit only once every holder of the output closed it.
    pub exit_waits: Option<&'static str>,
    /// Why the provider reports a signal death without the signal.
    pub signals_unnamed: Option<&'static str>,
    /// Cases per property test.
    pub proptest_cases: u32,
    /// Starts the emulator when the default start (the provider's default options) does not do.
    pub start: Option<StartHook>,
}

impl Spec {
    /// The target named after an emulator, with the defaults.
    pub const fn of(entry: &Entry) -> Spec {
        Spec {
            name: entry.name,
            adapter: entry.name,
            vars: &[],
            vanish: Vanish::MissingId,
            id_is_endpoint: false,
            children_end: None,
            exit_waits: None,
            signals_unnamed: None,
            proptest_cases: 16,
            start: None,
        }
    }
}

/// What differs from [`Spec::of`], per provider (each with its reason).
fn tailor(spec: &mut Spec) -> Vec<Spec> {
    match spec.adapter {
        // Its sandboxes live 300 s unless told; a loaded machine's run must not outlive them.
        "e2b" => spec.vars = &[("E2B_SANDBOX_TIMEOUT", "3600")],
        "modal" => spec.vars = &[("EXECSEAM_MODAL_SANDBOX_TIMEOUT", "3600")],
        "vercel" => spec.vars = &[("VERCEL_SANDBOX_TIMEOUT", "3600")],
        // The lifecycle cases create machines, which need an image (the emulator takes any).
        "fly" => spec.vars = &[("EXECSEAM_FLY_IMAGE", "debian:stable")],
        // The sandbox is the guest's address: another actor on the same guest is the vanished one.
        "ax" => {
            spec.vars = &[("AX_TARGET_ACTOR", "execseam/guest-0")];
            spec.id_is_endpoint = true;
            spec.vanish = Vanish::Vars(&[("AX_TARGET_ACTOR", "execseam/no-such-actor")]);
        }
        // The bridge gives any id a container on first use: only a destroyed one is gone.
        "cloudflare" => {
            spec.vanish = Vanish::Destroyed;
            // Both output modes are recorded.
            let exact = Spec {
                name: "cloudflare-exact",
                vars: &[("EXECSEAM_CLOUDFLARE_MODE", "exact")],
                ..*spec
            };
            return vec![exact];
        }
        "chrono" => {
            spec.vars = &[("CHRONO_TIMEOUT_SECS", "120")];
            spec.children_end = Some(
                "Chrono runs every execution in a fresh sandbox removed when it ends \
                 (docs/adapters/chrono.md, Lifecycle), and the emulator kills the execution's \
                 process group",
            );
            spec.proptest_cases = 12;
            spec.start = Some(start_chrono);
        }
        // An exec's exit waits for its output's holders, as the Northflank proxy's backend (below).
        "kubernetes" => {
            spec.exit_waits = Some(
                "Kubernetes reports an exec's exit once its output pipes close: containerd's CRI \
                 execInternal waits on attachDone after the process exits \
                 (internal/cri/server/container_execsync.go); a background child holding stdout \
                 keeps the stream, and the status, back",
            );
            // The sandboxd fast path: plain pods of the sandboxd image, each command a `Start`
            // on its ProcessService over a port-forward.
            let sandboxd = Spec {
                name: "kubernetes-sandboxd",
                vars: &[
                    ("EXECSEAM_KUBERNETES_EXEC", "sandboxd"),
                    ("EXECSEAM_KUBERNETES_MODE", "pod"),
                    (
                        "EXECSEAM_KUBERNETES_IMAGE",
                        "us-central1-docker.pkg.dev/k8s-staging-images/agent-sandbox/sandboxd:latest-main",
                    ),
                ],
                exit_waits: Some(
                    "sandboxd's Start sends the exit once the leader is reaped and its output \
                     pipes drained, waiting up to pipeDrainGrace (5 s) for a child that still \
                     holds them before it closes them (packages/sandboxd/pkg/server/process.go)",
                ),
                signals_unnamed: Some(
                    "sandboxd reports every signal death as exit_code -1 (process.go: Go's \
                     ExitError.ExitCode() is -1 for a process a signal ended), so the adapter \
                     answers an error",
                ),
                ..*spec
            };
            return vec![sandboxd];
        }
        "northflank" => {
            spec.exit_waits = Some(
                "Kubernetes exec (the proxy's backend) reports the exit after the output pipes \
                 close: containerd's CRI execInternal waits on attachDone after the exit \
                 (internal/cri/server/container_execsync.go; its drain timeout covers ExecSync \
                 only, and its comment names `bash -c \"sleep 365d &\"` as holding the pipe)",
            );
        }
        _ => {}
    }
    Vec::new()
}

/// Every emulated target: one per emulator of `ALL`, then its variants.
pub fn targets() -> Vec<Spec> {
    let mut all = Vec::new();
    for entry in execseam_emulators::ALL {
        let mut spec = Spec::of(entry);
        let variants = tailor(&mut spec);
        all.push(spec);
        all.extend(variants);
    }
    all
}

/// The targets of `adapter` (its emulator's, and their variants).
pub fn targets_of(adapter: &str) -> Vec<Spec> {
    targets()
        .into_iter()
        .filter(|s| s.adapter == adapter)
        .collect()
}

/// Chrono with its default options ([`start_chrono_with`]).
fn start_chrono(options: EmulatorOptions) -> BoxFuture<'static, io::Result<Started>> {
    Box::pin(start_chrono_with(
        options,
        execseam_emulators::chrono::ChronoOptions::default(),
    ))
}

/// Chrono runs each execution in a fresh sandbox: the scratch directory (fixtures written by one
/// command, read by the next) is a host directory mounted into every sandbox at its
/// [`SCRATCH`](execseam_emulators::Provider::SCRATCH). TypeScript runs on node, its types
/// stripped by the emulator.
pub async fn start_chrono_with(
    mut options: EmulatorOptions,
    chrono: execseam_emulators::chrono::ChronoOptions,
) -> io::Result<Started> {
    use execseam_emulators::Provider as _;
    use execseam_emulators::chrono::{Chrono, ChronoEmulator};
    let scratch = HostDir::new("chrono")?;
    options.sandboxing.mounts.push(execseam_emulators::Mount {
        host: scratch.0.clone(),
        sandbox: Chrono::SCRATCH.into(),
        read_only: false,
    });
    let emulator = ChronoEmulator::start_with(options, chrono).await?;
    Ok((
        emulator.into_any(),
        vec![Box::new(scratch) as Box<dyn Any + Send + Sync>],
    ))
}

/// A host directory any sandbox user can write, removed when dropped.
pub struct HostDir(pub std::path::PathBuf);

impl HostDir {
    /// A fresh one under `/var/tmp` (canonical: mounts need real paths).
    pub fn new(name: &str) -> io::Result<HostDir> {
        let dir = std::path::Path::new("/var/tmp")
            .canonicalize()?
            .join(format!(
                "execseam-{name}-{}-{}",
                std::process::id(),
                execseam_emulators::kit::clock::hex_id(8)
            ));
        std::fs::create_dir_all(&dir)?;
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))?;
        Ok(HostDir(dir))
    }
}

impl Drop for HostDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn setup(what: &str, e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Internal, format!("emulated target: {what}: {e}"))
}

/// A sandbox handle as the suites' `Exec`.
pub fn exec(sandbox: Box<dyn Sandbox>) -> Arc<dyn execseam::Exec> {
    let sandbox: Arc<dyn Sandbox> = sandbox.into();
    sandbox
}

/// A target's adapter variables and which of them are endpoints ([`VarKind::Url`]).
#[derive(Clone, Debug)]
pub struct Endpoints {
    vars: BTreeMap<String, String>,
    urls: Vec<&'static str>,
}

impl Endpoints {
    /// The variables with every endpoint moved to `origin` (`http://host:port`: the scheme and
    /// authority are replaced, the path is kept, so Daytona's `…/api` stays the API).
    pub fn vars_at(&self, origin: &str) -> BTreeMap<String, String> {
        let mut vars = self.vars.clone();
        for name in &self.urls {
            if let Some(value) = vars.get_mut(*name) {
                *value = rebase(value, origin);
            }
        }
        vars
    }

    /// Adapter `A`'s configuration from the variables as the emulator gave them.
    pub fn config_here<A: execseam::kit::Adapter>(&self) -> Result<A::Config, Error> {
        A::config_from(&|k| self.vars.get(k).cloned())
    }

    /// Adapter `A`'s configuration from the variables moved to `origin` (to tune it further).
    pub fn config<A: execseam::kit::Adapter>(&self, origin: &str) -> Result<A::Config, Error> {
        let vars = self.vars_at(origin);
        A::config_from(&|k| vars.get(k).cloned())
    }
}

/// `url` with its scheme and authority replaced by `origin`'s (its path kept).
pub fn rebase(url: &str, origin: &str) -> String {
    let path = url
        .split_once("://")
        .map(|(_, rest)| rest.find('/').map_or("", |i| &rest[i..]))
        .unwrap_or("");
    format!("{}{path}", origin.trim_end_matches('/'))
}

/// A loopback URL where nothing listens (a port bound, then released).
pub fn dead_url() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_or(9, |a| a.port());
    format!("http://127.0.0.1:{port}")
}

/// A running target: the emulator, the adapter's variables for it, the provider, and the one
/// sandbox the suites use.
pub struct Emulated {
    /// The target.
    pub spec: Spec,
    /// Its emulator's row.
    pub entry: &'static Entry,
    /// The running emulator.
    pub emulator: AnyEmulator,
    /// The adapter's variables: the emulator's environment and the spec's.
    pub vars: BTreeMap<String, String>,
    /// The adapter's provider, configured from [`vars`](Emulated::vars).
    pub provider: Arc<dyn Provider>,
    /// The sandbox: the one the emulator names (`EXECSEAM_SANDBOX`), else one created for it.
    pub sandbox: Arc<dyn Sandbox>,
    /// The scratch directory in it (made).
    pub scratch: String,
    /// What the start hook gave to keep (dropped after the emulator: fields drop in order).
    _keep: Vec<Box<dyn Any + Send + Sync>>,
}

impl std::fmt::Debug for Emulated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Emulated")
            .field("target", &self.spec.name)
            .field("emulator", &self.emulator)
            .finish_non_exhaustive()
    }
}

impl Emulated {
    /// Starts the target's emulator (with `options`), configures the adapter and reaches its
    /// sandbox, whose scratch directory it makes.
    pub async fn start(spec: Spec, options: EmulatorOptions) -> Result<Emulated, Error> {
        let entry = execseam_emulators::entry(spec.adapter)
            .ok_or_else(|| setup("no emulator", spec.adapter))?;
        let (emulator, keep) = match spec.start {
            Some(hook) => hook(options).await,
            None => (entry.start)(options).await.map(|e| (e, Vec::new())),
        }
        .map_err(|e| setup(&format!("starting the {} emulator", entry.name), e))?;
        let mut vars: BTreeMap<String, String> = emulator.env.iter().cloned().collect();
        vars.extend(
            spec.vars
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        let provider: Arc<dyn Provider> = Arc::from(execseam::provider_from(spec.adapter, &vars)?);
        let sandbox: Arc<dyn Sandbox> = match vars.get("EXECSEAM_SANDBOX") {
            Some(id) => provider.connect(id).await?.into(),
            None => provider.create(SandboxSpec::new()).await?.into(),
        };
        let scratch = entry.scratch.to_owned();
        let made = sandbox
            .exec(execseam::Command::new(["mkdir", "-p", "--", &scratch])?)
            .await?;
        if !made.exit.success() {
            return Err(setup(
                &format!("mkdir {scratch}"),
                String::from_utf8_lossy(&made.stderr),
            ));
        }
        Ok(Emulated {
            spec,
            entry,
            emulator,
            vars,
            provider,
            sandbox,
            scratch,
            _keep: keep,
        })
    }

    /// The adapter's variables, to be moved to another endpoint (a proxy's) later.
    pub fn endpoints(&self) -> Endpoints {
        let urls = execseam::adapter(self.spec.adapter)
            .map(|a| {
                a.vars
                    .iter()
                    .filter(|v| v.kind == VarKind::Url)
                    .map(|v| v.name)
                    .collect()
            })
            .unwrap_or_default();
        Endpoints {
            vars: self.vars.clone(),
            urls,
        }
    }

    /// The adapter's variables with every endpoint moved to `origin` ([`Endpoints::vars_at`]).
    pub fn vars_at(&self, origin: &str) -> BTreeMap<String, String> {
        self.endpoints().vars_at(origin)
    }

    /// The adapter's provider with every endpoint at `origin` ([`vars_at`](Self::vars_at)) and
    /// `changes` applied (no I/O).
    pub fn provider_at(
        &self,
        origin: &str,
        changes: &[(&str, &str)],
    ) -> Result<Box<dyn Provider>, Error> {
        let mut vars = self.vars_at(origin);
        vars.extend(
            changes
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        execseam::provider_from(self.spec.adapter, &vars)
    }

    /// The adapter's provider with `changes` applied to its variables (no I/O).
    pub fn provider_with(&self, changes: &[(&str, &str)]) -> Result<Box<dyn Provider>, Error> {
        let mut vars = self.vars.clone();
        vars.extend(
            changes
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        execseam::provider_from(self.spec.adapter, &vars)
    }

    /// A handle on the sandbox through `provider`: `attach` (no I/O), or where the provider has
    /// nothing to attach to (its sandbox is the service: Chrono), `create`, which then does none.
    async fn handle(provider: &dyn Provider, id: &str) -> Result<Box<dyn Sandbox>, Error> {
        match provider.attach(id) {
            Err(e) if e.kind() == ErrorKind::Unsupported => {
                provider.create(SandboxSpec::new()).await
            }
            other => other,
        }
    }

    /// The sandbox, through an endpoint where nothing listens.
    pub async fn dead_endpoint(&self) -> Result<Box<dyn Sandbox>, Error> {
        let url = dead_url();
        if self.spec.id_is_endpoint {
            return self.provider.attach(url.trim_start_matches("http://"));
        }
        let dead = self.provider_at(&url, &[])?;
        Emulated::handle(dead.as_ref(), self.sandbox.id()).await
    }

    /// A handle on a sandbox that does not exist, made as the spec says; `None` where the
    /// provider has none to name (nothing to attach to).
    pub async fn vanished(&self) -> Result<Option<Box<dyn Sandbox>>, Error> {
        let gone = match self.spec.vanish {
            Vanish::MissingId => self.provider.attach(self.entry.missing_sandbox_id),
            Vanish::Vars(changes) => self.provider_with(changes)?.attach(self.sandbox.id()),
            Vanish::Destroyed => {
                let gone = self.provider.create(SandboxSpec::new()).await?;
                gone.destroy().await?;
                gone.set_owned(false);
                Ok(gone)
            }
        };
        match gone {
            Err(e) if e.kind() == ErrorKind::Unsupported => Ok(None),
            other => other.map(Some),
        }
    }

    /// The conformance suite's target: the sandbox, its provider, the two broken variants, the
    /// emulator's faults and live-sandbox count, the isolation the emulator runs with.
    pub async fn conformance(self) -> Result<execseam_conformance::Target, Error> {
        let dead = self.dead_endpoint().await?;
        let vanished = self.vanished().await?;
        // Another process's view: a provider configured afresh, connected to the sandbox by id
        // (what a stored id gives: E2B's envd token comes with the connect), else attached.
        let fresh = self.provider_with(&[])?;
        let another = match fresh.connect(self.sandbox.id()).await {
            Ok(s) => Some(s),
            Err(_) => fresh.attach(self.sandbox.id()).ok(),
        };
        let mut target = execseam_conformance::Target::new(
            self.spec.name,
            self.sandbox.clone() as Arc<dyn execseam::Exec>,
        )
        .environment(execseam_emulators::Isolation::detect().record_line())
        .scratch(self.scratch.clone())
        .dead_endpoint(exec(dead))
        .faults(Arc::new(self.emulator.faults.clone()))
        .provider(self.provider.clone())
        .missing_sandbox_id(self.entry.missing_sandbox_id)
        .proptest_cases(self.spec.proptest_cases);
        let count = self.emulator.live_sandboxes.clone();
        target = target.live_sandboxes(move || count());
        if let Some(v) = vanished {
            target = target.vanished_sandbox(exec(v));
        }
        if let Some(a) = another {
            target = target.another_client(exec(a));
        }
        if let Some(why) = self.spec.children_end {
            target = target.children_end_with_the_command(why);
        }
        if let Some(why) = self.spec.exit_waits {
            target = target.exit_waits_for_children(why);
        }
        if let Some(why) = self.spec.signals_unnamed {
            target = target.signal_deaths_unnamed(why);
        }
        Ok(target.keep_alive(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rebase_keeps_the_path() {
        assert_eq!(
            rebase("http://127.0.0.1:1/api", "http://h:2"),
            "http://h:2/api"
        );
        assert_eq!(rebase("http://127.0.0.1:1", "http://h:2/"), "http://h:2");
        assert_eq!(
            rebase("https://a.example/x/y", "http://h:2"),
            "http://h:2/x/y"
        );
    }

    #[test]
    fn every_emulator_is_a_target_and_names_are_unique() {
        let all = targets();
        for e in execseam_emulators::ALL {
            assert!(
                all.iter().any(|s| s.name == e.name && s.adapter == e.name),
                "{}",
                e.name
            );
        }
        let mut names: Vec<_> = all.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all.len());
    }
}
