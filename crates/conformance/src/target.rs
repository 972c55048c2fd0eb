//! What a case runs against ([`Target`]) and what it concludes ([`Outcome`]).

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};

use execseam_core::{BoxFuture, Exec, Provider};

use crate::Faults;

/// What a case concluded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The adapter behaved as the contract says.
    Pass,
    /// It did not; the text says how (a diff where there is one).
    Fail(String),
    /// The case does not apply; the text names the capability or property that rules it out.
    NotApplicable(String),
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Pass => f.write_str("pass"),
            Outcome::Fail(why) => write!(f, "FAIL: {why}"),
            Outcome::NotApplicable(why) => write!(f, "n/a: {why}"),
        }
    }
}

/// What a case body returns: `Ok(())` is a pass; `Err` carries a failure or "not applicable".
pub type CaseResult = Result<(), Outcome>;

/// One named behaviour check.
#[derive(Clone, Copy)]
pub struct Case {
    /// A stable kebab-case name (used in reports, records and filters).
    pub name: &'static str,
    /// One line: what the case proves.
    pub about: &'static str,
    /// The check.
    pub run: fn(&Target) -> BoxFuture<'_, CaseResult>,
}

impl fmt::Debug for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Case").field("name", &self.name).finish()
    }
}

/// What the suite runs against.
pub struct Target {
    /// The adapter's short name (`local`, `fly`, …); names the report and the record.
    pub name: String,
    /// The adapter under test.
    pub exec: Arc<dyn Exec>,
    /// An absolute, canonical directory the suite may create and write in, inside the sandbox.
    pub scratch: String,
    /// The same adapter configured against an endpoint where nothing listens.
    pub dead_endpoint: Option<Arc<dyn Exec>>,
    /// The same adapter pointed at a sandbox that does not exist (or no longer does).
    pub vanished_sandbox: Option<Arc<dyn Exec>>,
    /// The same sandbox through another client (a provider configured afresh, the sandbox
    /// attached by id): what another process sees. The terminal replay case reattaches from it.
    pub another_client: Option<Arc<dyn Exec>>,
    /// Fault injection (emulated runs only).
    pub faults: Option<Arc<dyn Faults>>,
    /// A run against the real provider: records are not compared and proptest case counts are low.
    pub live: bool,
    /// Cases per property test unless `EXECSEAM_PROPTEST_CASES` says otherwise.
    pub proptest_cases: u32,
    /// The adapter's provider, configured like [`exec`](Target::exec): the lifecycle cases run
    /// against it, gated on its [`LifecycleCapabilities`](execseam_core::LifecycleCapabilities).
    pub provider: Option<Arc<dyn Provider>>,
    /// How many sandboxes the emulator holds right now (a test-only count): after the suite,
    /// none that it created may be left.
    pub live_sandboxes: Option<Arc<dyn Fn() -> usize + Send + Sync>>,
    /// What the target runs on, when it matters to the outcome (an emulator's sandbox isolation):
    /// written into the record's header.
    pub environment: Option<String>,
    /// Set when the provider itself reports a command's exit only once every holder of its
    /// output has closed it (so a background child delays the exit on the real service): the
    /// reason, with its source. `background-child-detached` is then not applicable.
    pub exit_waits_for_children: Option<String>,
    /// Set when the provider reports a signal death without the signal (sandboxd's `-1`): the
    /// reason, with its source. The kill cases then check that such a death is an error, never
    /// an exit code, and are not applicable.
    pub signal_deaths_unnamed: Option<String>,
    /// Set when every execution runs in a sandbox of its own that ends with it (Chrono), so a
    /// background child ends with its command: the reason. `background-child-detached` then
    /// checks that the child is gone instead of running.
    pub children_end_with_the_command: Option<String>,
    /// A well-formed id of a sandbox that does not exist (`connect` must answer `NotFound`).
    /// The default, `execseamnosuchsandbox0`, suits providers whose ids are free-form; one
    /// that checks an id's form first (Modal: `sb-…`) gives one of that form.
    pub missing_sandbox_id: String,
    keep_alive: Vec<Box<dyn Any + Send + Sync>>,
    suite: SuiteState,
}

/// What the lifecycle cases share across the run.
struct SuiteState {
    /// A value unique to this run (the `execseam-suite` label of its sandboxes).
    id: String,
    created: Mutex<Vec<String>>,
    baseline: Mutex<Option<usize>>,
}

impl Target {
    /// A target with a scratch directory of `/tmp/execseam-conformance` and nothing else.
    pub fn new(name: impl Into<String>, exec: Arc<dyn Exec>) -> Target {
        Target {
            name: name.into(),
            exec,
            scratch: "/tmp/execseam-conformance".into(),
            dead_endpoint: None,
            vanished_sandbox: None,
            another_client: None,
            faults: None,
            live: false,
            proptest_cases: 32,
            provider: None,
            live_sandboxes: None,
            environment: None,
            exit_waits_for_children: None,
            signal_deaths_unnamed: None,
            children_end_with_the_command: None,
            missing_sandbox_id: "execseamnosuchsandbox0".into(),
            keep_alive: Vec::new(),
            suite: SuiteState {
                id: format!("run-{}", execseam_adapter_kit::id::random_id(12)),
                created: Mutex::new(Vec::new()),
                baseline: Mutex::new(None),
            },
        }
    }

    /// Names what the target runs on (for example the emulator's sandbox isolation); the record
    /// says it, so a run in another environment shows as a changed record.
    #[must_use]
    pub fn environment(mut self, environment: impl Into<String>) -> Target {
        self.environment = Some(environment.into());
        self
    }

    /// Sets the scratch directory (absolute and canonical: no symlinks on the way).
    #[must_use]
    pub fn scratch(mut self, dir: impl Into<String>) -> Target {
        self.scratch = dir.into();
        self
    }

    /// Sets the dead-endpoint variant of the adapter.
    #[must_use]
    pub fn dead_endpoint(mut self, exec: Arc<dyn Exec>) -> Target {
        self.dead_endpoint = Some(exec);
        self
    }

    /// Sets the vanished-sandbox variant of the adapter.
    #[must_use]
    pub fn vanished_sandbox(mut self, exec: Arc<dyn Exec>) -> Target {
        self.vanished_sandbox = Some(exec);
        self
    }

    /// Sets [`Target::another_client`].
    #[must_use]
    pub fn another_client(mut self, exec: Arc<dyn Exec>) -> Target {
        self.another_client = Some(exec);
        self
    }

    /// Sets the fault injector.
    #[must_use]
    pub fn faults(mut self, faults: Arc<dyn Faults>) -> Target {
        self.faults = Some(faults);
        self
    }

    /// Marks a live run.
    #[must_use]
    pub fn live(mut self, live: bool) -> Target {
        self.live = live;
        self
    }

    /// Sets the default number of cases per property.
    #[must_use]
    pub fn proptest_cases(mut self, n: u32) -> Target {
        self.proptest_cases = n;
        self
    }

    /// Sets the provider for the lifecycle cases.
    #[must_use]
    pub fn provider(mut self, provider: Arc<dyn Provider>) -> Target {
        self.provider = Some(provider);
        self
    }

    /// Sets the emulator's count of live sandboxes.
    #[must_use]
    pub fn live_sandboxes(mut self, count: impl Fn() -> usize + Send + Sync + 'static) -> Target {
        self.live_sandboxes = Some(Arc::new(count));
        self
    }

    /// Declares that the provider reports a signal death without naming the signal (see
    /// [`Target::signal_deaths_unnamed`]).
    #[must_use]
    pub fn signal_deaths_unnamed(mut self, reason: impl Into<String>) -> Target {
        self.signal_deaths_unnamed = Some(reason.into());
        self
    }

    /// Declares that the provider reports an exit only after the output is closed by every
    /// process holding it (see [`Target::exit_waits_for_children`]).
    #[must_use]
    pub fn exit_waits_for_children(mut self, reason: impl Into<String>) -> Target {
        self.exit_waits_for_children = Some(reason.into());
        self
    }

    /// Declares [`Target::children_end_with_the_command`].
    #[must_use]
    pub fn children_end_with_the_command(mut self, reason: impl Into<String>) -> Target {
        self.children_end_with_the_command = Some(reason.into());
        self
    }

    /// Sets [`Target::missing_sandbox_id`].
    #[must_use]
    pub fn missing_sandbox_id(mut self, id: impl Into<String>) -> Target {
        self.missing_sandbox_id = id.into();
        self
    }

    /// Keeps `value` (an emulator handle, a temp dir) alive as long as the target.
    #[must_use]
    pub fn keep_alive(mut self, value: impl Any + Send + Sync) -> Target {
        self.keep_alive.push(Box::new(value));
        self
    }

    /// The value of the `execseam-suite` label on every sandbox this run creates.
    pub fn suite_id(&self) -> &str {
        &self.suite.id
    }

    /// Records a sandbox the suite created (checked by `lifecycle-nothing-left`).
    pub fn record_created(&self, id: &str) {
        self.suite
            .created
            .lock()
            .expect("created")
            .push(id.to_owned());
    }

    /// The sandboxes the suite created.
    pub fn created(&self) -> Vec<String> {
        self.suite.created.lock().expect("created").clone()
    }

    /// The emulator's sandbox count before the first case, if it counts.
    pub fn baseline(&self) -> Option<usize> {
        *self.suite.baseline.lock().expect("baseline")
    }

    pub(crate) fn take_baseline(&self) {
        if let Some(count) = &self.live_sandboxes {
            *self.suite.baseline.lock().expect("baseline") = Some(count());
        }
    }

    /// A path under the scratch directory.
    pub fn path(&self, rel: &str) -> String {
        format!("{}/{rel}", self.scratch.trim_end_matches('/'))
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("name", &self.name)
            .field("provider", &self.exec.provider())
            .field("scratch", &self.scratch)
            .field("live", &self.live)
            .finish_non_exhaustive()
    }
}

/// Runs a future to completion on a fresh multi-thread runtime (for `harness = false` tests).
pub fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(f)
}
