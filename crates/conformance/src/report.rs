//! Running the suite, printing one line per case, and the JSON report and record.

use std::future::Future;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use execseam_core::{Command, Error};
use serde_json::json;

use crate::{Case, Outcome, Target, cases};

/// How long one case may take before the watchdog fails it.
const WATCHDOG: Duration = Duration::from_secs(240);

/// The outcome of one case.
#[derive(Clone, Debug)]
pub struct CaseReport {
    /// The case's name.
    pub name: &'static str,
    /// What it concluded.
    pub outcome: Outcome,
    /// How long it took.
    pub elapsed: Duration,
}

/// The outcome of a run.
#[derive(Clone, Debug)]
pub struct Report {
    /// The adapter's name.
    pub adapter: String,
    /// The provider the adapter reported.
    pub provider: String,
    /// One entry per case run, in order.
    pub cases: Vec<CaseReport>,
    /// [`Target::environment`](crate::Target::environment).
    pub environment: Option<String>,
}

impl Report {
    fn count(&self, f: impl Fn(&Outcome) -> bool) -> usize {
        self.cases.iter().filter(|c| f(&c.outcome)).count()
    }

    /// Cases that passed.
    pub fn passed(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Pass))
    }

    /// Cases that failed.
    pub fn failed(&self) -> usize {
        self.count(|o| matches!(o, Outcome::Fail(_)))
    }

    /// Cases that did not apply.
    pub fn not_applicable(&self) -> usize {
        self.count(|o| matches!(o, Outcome::NotApplicable(_)))
    }

    /// The outcome of the named case, if it ran.
    pub fn outcome(&self, name: &str) -> Option<&Outcome> {
        self.cases
            .iter()
            .find(|c| c.name == name)
            .map(|c| &c.outcome)
    }

    /// `N passed, M failed, K not applicable`.
    pub fn summary(&self) -> String {
        format!(
            "{} passed, {} failed, {} not applicable",
            self.passed(),
            self.failed(),
            self.not_applicable()
        )
    }

    /// The whole report as JSON (with timings).
    pub fn to_json(&self) -> serde_json::Value {
        let cases: Vec<_> = self
            .cases
            .iter()
            .map(|c| {
                let (outcome, detail) = match &c.outcome {
                    Outcome::Pass => ("pass", String::new()),
                    Outcome::Fail(d) => ("fail", d.clone()),
                    Outcome::NotApplicable(d) => ("not_applicable", d.clone()),
                };
                json!({
                    "name": c.name,
                    "outcome": outcome,
                    "detail": detail,
                    "millis": c.elapsed.as_millis() as u64,
                })
            })
            .collect();
        json!({
            "adapter": self.adapter,
            "provider": self.provider,
            "passed": self.passed(),
            "failed": self.failed(),
            "not_applicable": self.not_applicable(),
            "cases": cases,
        })
    }

    /// The deterministic record (no timings, no failure text): one `name<TAB>outcome` line per
    /// case, where the outcome is `pass`, `FAIL`, or `n/a: <reason>`.
    pub fn record(&self) -> String {
        let mut s = format!("# conformance record: adapter {}\n", self.adapter);
        if let Some(env) = &self.environment {
            s.push_str(&format!("# environment: {env}\n"));
        }
        for c in &self.cases {
            let o = match &c.outcome {
                Outcome::Pass => "pass".to_owned(),
                Outcome::Fail(_) => "FAIL".to_owned(),
                Outcome::NotApplicable(why) => format!("n/a: {why}"),
            };
            s.push_str(&format!("{}\t{o}\n", c.name));
        }
        s
    }
}

fn one_line(s: &str) -> String {
    s.replace('\n', "\n      ")
}

/// Runs every case of the suite ([`cases::all`]) against `target`.
pub async fn run(target: &Target, filter: Option<&str>) -> Report {
    run_cases(target, &cases::all(), filter).await
}

/// Runs `list` against `target`, printing one line per case; `filter` keeps the cases whose name
/// contains it.
pub async fn run_cases(target: &Target, list: &[Case], filter: Option<&str>) -> Report {
    let mut report = Report {
        adapter: target.name.clone(),
        provider: target.exec.provider().to_owned(),
        cases: Vec::new(),
        environment: target.environment.clone(),
    };
    let setup = prepare(target).await;
    for case in list {
        if filter.is_some_and(|f| !case.name.contains(f)) {
            continue;
        }
        let start = Instant::now();
        let outcome = match &setup {
            Err(e) => Outcome::Fail(format!(
                "setup failed: cannot create the scratch directory: {e}"
            )),
            Ok(()) => match tokio::time::timeout(WATCHDOG, (case.run)(target)).await {
                Ok(Ok(())) => Outcome::Pass,
                Ok(Err(o)) => o,
                Err(_) => Outcome::Fail(format!("the watchdog fired after {WATCHDOG:?}")),
            },
        };
        let c = CaseReport {
            name: case.name,
            outcome,
            elapsed: start.elapsed(),
        };
        println!("{}", report_line(&c));
        let _ = std::io::stdout().flush();
        report.cases.push(c);
    }
    println!("{}", report.summary());
    report
}

async fn prepare(target: &Target) -> Result<(), Error> {
    target.take_baseline();
    let cmd = Command::new(["mkdir", "-p", "--", &target.scratch])?;
    let out = target.exec.exec(cmd).await?;
    if out.exit.success() {
        Ok(())
    } else {
        Err(Error::new(
            execseam_core::ErrorKind::Internal,
            format!(
                "mkdir exited {:?}: {}",
                out.exit,
                String::from_utf8_lossy(&out.stderr)
            ),
        ))
    }
}

fn workspace_root() -> PathBuf {
    // crates/conformance -> the workspace root, when run from this repository.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// Where the JSON report of `adapter` is written.
pub fn report_path(adapter: &str) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"));
    target.join("conformance").join(format!("{adapter}.json"))
}

/// Where the committed record of `adapter` lives.
pub fn record_path(adapter: &str) -> PathBuf {
    workspace_root()
        .join("docs")
        .join("conformance")
        .join(format!("{adapter}.txt"))
}

/// The entry point of an adapter's `tests/conformance.rs` (`harness = false`).
///
/// Each case is a test of a standard libtest harness (`libtest-mimic`), so the usual arguments
/// work: `-- --list`, `-- --exact tools-glob-snapshot`, a name filter, `--skip`, `--ignored`,
/// and `cargo nextest run`. A case that does not apply is reported *ignored*, with the reason,
/// never as passed. The cases share one target and run one at a time, in the suite's order
/// (`--test-threads` is ignored).
///
/// `setup` builds the target the first time a case runs (never for `--list`). After the run
/// come the per-case report lines, the summary line `N passed, M failed, K not applicable`, the
/// JSON report, and, when every case ran, the comparison with (or, with
/// `EXECSEAM_CONFORMANCE_BLESS=1`, the rewrite of) the committed record. Exits non-zero on any
/// failure or a stale record.
pub fn main<F, Fut>(setup: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<Target, Error>>,
{
    let args = libtest_mimic::Arguments::from_args();
    std::process::exit(run_with_args(args, setup).code);
}

/// What [`run_with_args`] concluded.
#[derive(Debug)]
pub struct RunSummary {
    /// The process exit code [`main`] uses.
    pub code: i32,
    /// libtest's counts.
    pub conclusion: libtest_mimic::Conclusion,
    /// The cases that ran, in order (empty for `--list`).
    pub report: Option<Report>,
    /// True if `setup` was called.
    pub set_up: bool,
}

/// [`main`] with explicit arguments (for testing the runner itself).
pub fn run_with_args<F, Fut>(mut args: libtest_mimic::Arguments, setup: F) -> RunSummary
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = Result<Target, Error>>,
{
    use std::sync::{Arc, Mutex};

    // One sandbox, cases in order: a case may depend on the one before (the vanishing sandbox
    // runs last).
    args.test_threads = Some(1);
    let runtime = Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime"),
    );
    type Setup = Box<dyn FnOnce() -> Result<Target, Error> + Send>;
    let rt = runtime.clone();
    let setup: Setup = Box::new(move || rt.block_on(setup()));
    struct Shared {
        setup: Option<Setup>,
        target: Option<Result<Arc<Target>, String>>,
        ran_setup: bool,
        prepared: bool,
        cases: Vec<CaseReport>,
    }
    let shared = Arc::new(Mutex::new(Shared {
        setup: Some(setup),
        target: None,
        ran_setup: false,
        prepared: false,
        cases: Vec::new(),
    }));
    let target_of = {
        let shared = shared.clone();
        let runtime = runtime.clone();
        move || -> Result<Arc<Target>, String> {
            let mut s = shared.lock().expect("shared");
            if s.target.is_none() {
                let f = s.setup.take().expect("setup runs once");
                s.ran_setup = true;
                let t = f()
                    .map(Arc::new)
                    .map_err(|e| format!("conformance setup failed: {e}"));
                s.target = Some(t);
            }
            let t = s.target.clone().expect("set above")?;
            if !s.prepared {
                s.prepared = true;
                if let Err(e) = runtime.block_on(prepare(&t)) {
                    s.target = Some(Err(format!(
                        "setup failed: cannot create the scratch directory: {e}"
                    )));
                    return Err(s.target.clone().expect("set").err().unwrap_or_default());
                }
            }
            Ok(t)
        }
    };
    let target_of = Arc::new(target_of);
    let trials: Vec<libtest_mimic::Trial> = cases::all()
        .into_iter()
        .map(|case| {
            let shared = shared.clone();
            let runtime = runtime.clone();
            let target_of = target_of.clone();
            libtest_mimic::Trial::ignorable_test(case.name, move || {
                let start = Instant::now();
                let outcome = match target_of() {
                    Err(e) => Outcome::Fail(e),
                    Ok(t) => runtime.block_on(async {
                        match tokio::time::timeout(WATCHDOG, (case.run)(&t)).await {
                            Ok(Ok(())) => Outcome::Pass,
                            Ok(Err(o)) => o,
                            Err(_) => {
                                Outcome::Fail(format!("the watchdog fired after {WATCHDOG:?}"))
                            }
                        }
                    }),
                };
                let elapsed = start.elapsed();
                shared.lock().expect("shared").cases.push(CaseReport {
                    name: case.name,
                    outcome: outcome.clone(),
                    elapsed,
                });
                match outcome {
                    Outcome::Pass => Ok(libtest_mimic::Completion::Completed),
                    Outcome::NotApplicable(why) => Ok(libtest_mimic::Completion::ignored_with(
                        format!("n/a: {why}"),
                    )),
                    Outcome::Fail(why) => Err(why.into()),
                }
            })
        })
        .collect();
    let total = trials.len();
    let conclusion = libtest_mimic::run(&args, trials);
    let mut s = shared.lock().expect("shared");
    let set_up = s.ran_setup;
    if args.list || !set_up {
        let code = i32::from(conclusion.has_failed());
        return RunSummary {
            code,
            conclusion,
            report: None,
            set_up,
        };
    }
    let target = match s.target.clone() {
        Some(Ok(t)) => t,
        _ => {
            return RunSummary {
                code: 1,
                conclusion,
                report: None,
                set_up,
            };
        }
    };
    let report = Report {
        adapter: target.name.clone(),
        provider: target.exec.provider().to_owned(),
        cases: std::mem::take(&mut s.cases),
        environment: target.environment.clone(),
    };
    drop(s);
    println!(
        "\nconformance: adapter {} (provider {}){}",
        target.name,
        target.exec.provider(),
        if target.live { ", live" } else { "" }
    );
    for c in &report.cases {
        println!("{}", report_line(c));
    }
    println!("{}", report.summary());
    let complete = report.cases.len() == total;
    let mut code = finish(&target, &report, !complete);
    if conclusion.has_failed() {
        code = 1;
    }
    // The target (emulators, scratch dirs) goes away inside the runtime it was made on.
    {
        let _enter = runtime.enter();
        drop(target);
        drop(target_of);
        drop(shared);
    }
    RunSummary {
        code,
        conclusion,
        report: Some(report),
        set_up,
    }
}

fn report_line(c: &CaseReport) -> String {
    match &c.outcome {
        Outcome::Pass => format!("pass  {} ({} ms)", c.name, c.elapsed.as_millis()),
        Outcome::Fail(why) => format!("FAIL  {}: {}", c.name, one_line(why)),
        Outcome::NotApplicable(why) => format!("n/a   {}: {why}", c.name),
    }
}

fn finish(target: &Target, report: &Report, filtered: bool) -> i32 {
    let path = report_path(&report.adapter);
    if let Some(dir) = path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    match std::fs::write(
        &path,
        serde_json::to_vec_pretty(&report.to_json()).unwrap_or_default(),
    ) {
        Ok(()) => println!("report: {}", path.display()),
        Err(e) => eprintln!("cannot write {}: {e}", path.display()),
    }
    let mut code = i32::from(report.failed() > 0);
    if target.live || filtered {
        return code;
    }
    let record = record_path(&report.adapter);
    if !record.parent().is_some_and(Path::exists) {
        println!("record: none (not running inside the execseam repository)");
        return code;
    }
    let bless = std::env::var("EXECSEAM_CONFORMANCE_BLESS").is_ok_and(|v| v == "1");
    let current = report.record();
    if bless {
        if let Some(dir) = record.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        if let Err(e) = std::fs::write(&record, &current) {
            eprintln!("cannot write {}: {e}", record.display());
            code = 1;
        } else {
            println!("record: {} (rewritten)", record.display());
        }
    } else {
        match std::fs::read_to_string(&record) {
            Ok(committed) if committed == current => {
                println!("record: {} (matches)", record.display());
            }
            Ok(committed) => {
                eprintln!(
                    "the committed record {} is stale; run `cargo xtask conformance --adapter all`:\n{}",
                    record.display(),
                    cases::diff(&committed, &current)
                );
                code = 1;
            }
            Err(e) => {
                eprintln!(
                    "no committed record at {} ({e}); run `cargo xtask conformance --adapter all`",
                    record.display()
                );
                code = 1;
            }
        }
    }
    code
}
