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
        let elapsed = start.elapsed();
        let line = match &outcome {
            Outcome::Pass => format!("pass  {} ({} ms)", case.name, elapsed.as_millis()),
            Outcome::Fail(why) => format!("FAIL  {}: {}", case.name, one_line(why)),
            Outcome::NotApplicable(why) => format!("n/a   {}: {why}", case.name),
        };
        println!("{line}");
        let _ = std::io::stdout().flush();
        report.cases.push(CaseReport {
            name: case.name,
            outcome,
            elapsed,
        });
    }
    println!("{}", report.summary());
    report
}

async fn prepare(target: &Target) -> Result<(), Error> {
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
/// Builds the target with `setup`, runs the suite (the first argument not starting with `-` is a
/// name filter), writes the JSON report, compares with (or, with `EXECSEAM_CONFORMANCE_BLESS=1`,
/// rewrites) the committed record, and exits non-zero on any failure.
pub fn main<F, Fut>(setup: F)
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<Target, Error>>,
{
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let code = crate::block_on(async move {
        let target = match setup().await {
            Ok(t) => t,
            Err(e) => {
                eprintln!("conformance setup failed: {e}");
                return 2;
            }
        };
        println!(
            "conformance: adapter {} (provider {}){}",
            target.name,
            target.exec.provider(),
            if target.live { ", live" } else { "" }
        );
        let report = run(&target, filter.as_deref()).await;
        finish(&target, &report, filter.is_some())
    });
    std::process::exit(code);
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
