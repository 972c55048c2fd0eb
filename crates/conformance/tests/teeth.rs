//! The suite has teeth: deliberately broken adapters fail the named cases, while the honest local
//! adapter passes the same cases in the same run.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::{Bytes, BytesMut};
use execseam_conformance::{Fault, Faults, Outcome, Target, run};
use execseam_core::{
    BoxFuture, Capabilities, Command, Error, ErrorKind, Event, Exec, ExecStream, Exit, Output,
};
use execseam_local::LocalExec;

/// How a broken adapter lies.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Lie {
    /// Puts stderr into stdout (the Daytona one-shot shortcut).
    MergeStderr,
    /// Reports exit 0 whatever happened (`exitCode || 0`).
    InventSuccess,
    /// Raises on a non-zero exit (the E2B SDK's shape).
    ErrorOnNonZero,
    /// Reverses the arguments.
    ReorderArgv,
    /// Drops stdin.
    IgnoreStdin,
    /// Ignores the workdir.
    IgnoreWorkdir,
    /// Turns a cut stream into `Ok` with exit 0.
    CutStreamIsOk,
    /// Honest: a cut stream is a protocol error (the control for `CutStreamIsOk`).
    CutStreamIsError,
    /// Says it can stream but cannot.
    ClaimsStreaming,
}

struct Broken {
    inner: LocalExec,
    lie: Lie,
    cut_armed: AtomicBool,
}

impl Broken {
    fn new(lie: Lie) -> Arc<Broken> {
        Arc::new(Broken {
            inner: LocalExec::new(),
            lie,
            cut_armed: AtomicBool::new(false),
        })
    }

    async fn run(&self, cmd: Command) -> Result<Output, Error> {
        let cmd = match self.lie {
            Lie::ReorderArgv => {
                let mut args = cmd.args().to_vec();
                args.reverse();
                let program = cmd.program().to_owned();
                cmd.into_builder()
                    .argv(std::iter::once(program).chain(args))
                    .build()?
            }
            Lie::IgnoreStdin => cmd.into_builder().stdin(Bytes::new()).build()?,
            Lie::IgnoreWorkdir => cmd.into_builder().no_workdir().build()?,
            _ => cmd,
        };
        if self.cut_armed.swap(false, Ordering::SeqCst) {
            // The transport drops everything from the exit frame on.
            let mut stream = self
                .inner
                .streaming()
                .expect("local streams")
                .exec_stream(cmd)
                .await?;
            let (mut out, mut err) = (BytesMut::new(), BytesMut::new());
            while let Some(ev) = stream.next().await {
                match ev? {
                    Event::Stdout(b) => out.extend_from_slice(&b),
                    Event::Stderr(b) => err.extend_from_slice(&b),
                    Event::Exit(_) => break,
                }
            }
            return match self.lie {
                Lie::CutStreamIsOk => Ok(Output::new(out.freeze(), err.freeze(), Exit::Code(0))),
                _ => Err(Error::protocol("the stream ended without an exit frame")),
            };
        }
        let mut out = self.inner.exec(cmd).await?;
        match self.lie {
            Lie::MergeStderr => {
                let mut merged = BytesMut::from(&out.stdout[..]);
                merged.extend_from_slice(&out.stderr);
                out = Output::new(merged.freeze(), Bytes::new(), out.exit);
            }
            Lie::InventSuccess => out = Output::new(out.stdout, out.stderr, Exit::Code(0)),
            Lie::ErrorOnNonZero if !out.exit.success() => {
                return Err(Error::new(
                    ErrorKind::Internal,
                    format!("command exited {:?}", out.exit),
                ));
            }
            _ => {}
        }
        Ok(out)
    }
}

impl Exec for Broken {
    fn provider(&self) -> &str {
        "broken"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            streaming: self.lie == Lie::ClaimsStreaming,
            ..Capabilities::FULL
        }
    }
    fn exec(&self, command: Command) -> BoxFuture<'_, Result<Output, Error>> {
        Box::pin(self.run(command))
    }
    fn streaming(&self) -> Option<&dyn ExecStream> {
        None
    }
}

impl Faults for Broken {
    fn inject(&self, fault: Fault) -> Result<(), String> {
        if fault == Fault::CutBeforeExit {
            self.cut_armed.store(true, Ordering::SeqCst);
            Ok(())
        } else {
            Err(execseam_conformance::cannot_inject(fault))
        }
    }
    fn clear(&self) {
        self.cut_armed.store(false, Ordering::SeqCst);
    }
}

/// Removes a scratch directory when the target that uses it is dropped.
struct Remove(std::path::PathBuf);

impl Drop for Remove {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Gives `target` a fresh scratch directory, removed with the target.
fn scratched(target: Target) -> Target {
    let dir = std::env::temp_dir().canonicalize().unwrap().join(format!(
        "execseam-teeth-{}-{}",
        std::process::id(),
        execseam_adapter_kit::degrade::temp_path("/").trim_start_matches("/.execseam-")
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.to_str().unwrap().to_owned();
    target.scratch(path).keep_alive(Remove(dir))
}

async fn outcome(exec: Arc<dyn Exec>, faults: Option<Arc<dyn Faults>>, case: &str) -> Outcome {
    let mut target = Target::new("teeth", exec).proptest_cases(16);
    if let Some(f) = faults {
        target = target.faults(f);
    }
    let report = run(&target, Some(case)).await;
    let o = report
        .outcome(case)
        .unwrap_or_else(|| panic!("case {case} did not run"));
    o.clone()
}

/// The lie fails `case`, and the honest local adapter passes it.
async fn caught(lie: Lie, case: &str) {
    let broken = Broken::new(lie);
    let got = outcome(broken.clone(), Some(broken), case).await;
    assert!(
        matches!(got, Outcome::Fail(_)),
        "{lie:?} should fail {case}, got {got}"
    );
    let honest = outcome(Arc::new(LocalExec::new()), None, case).await;
    assert!(
        matches!(honest, Outcome::Pass | Outcome::NotApplicable(_)),
        "the local adapter should not fail {case}: {honest}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merging_stderr_into_stdout_is_caught() {
    caught(Lie::MergeStderr, "stdout-stderr-separate").await;
    caught(Lie::MergeStderr, "fast-failure-keeps-stderr").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inventing_exit_codes_is_caught() {
    caught(Lie::InventSuccess, "exit-code-is-a-result").await;
    caught(Lie::InventSuccess, "kill-is-ambiguous").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raising_on_a_non_zero_exit_is_caught() {
    caught(Lie::ErrorOnNonZero, "exit-code-is-a-result").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reordering_argv_is_caught() {
    caught(Lie::ReorderArgv, "argv-roundtrip").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_stdin_or_workdir_is_caught() {
    caught(Lie::IgnoreStdin, "stdin-roundtrip").await;
    caught(Lie::IgnoreWorkdir, "workdir-honoured").await;
    caught(Lie::IgnoreWorkdir, "workdir-missing").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_stream_reported_as_success_is_caught() {
    let broken = Broken::new(Lie::CutStreamIsOk);
    let got = outcome(broken.clone(), Some(broken), "fault-stream-cut").await;
    assert!(matches!(got, Outcome::Fail(_)), "got {got}");
    // The same transport fault, reported honestly, passes: the case is not always failing.
    let honest = Broken::new(Lie::CutStreamIsError);
    let got = outcome(honest.clone(), Some(honest), "fault-stream-cut").await;
    assert_eq!(got, Outcome::Pass);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claiming_a_capability_it_lacks_is_caught() {
    let broken = Broken::new(Lie::ClaimsStreaming);
    let got = outcome(broken.clone(), None, "streaming-declared").await;
    assert!(matches!(got, Outcome::Fail(_)), "got {got}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_endpoint_that_answers_ok_is_caught() {
    let mut target = scratched(Target::new(
        "teeth",
        Arc::new(LocalExec::new()) as Arc<dyn Exec>,
    ));
    target = target.dead_endpoint(Broken::new(Lie::InventSuccess));
    let report = run(&target, Some("dead-endpoint-is-an-error")).await;
    assert!(matches!(
        report.outcome("dead-endpoint-is-an-error"),
        Some(Outcome::Fail(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_honest_adapter_passes_everything_that_applies() {
    let target = scratched(Target::new(
        "teeth",
        Arc::new(LocalExec::new()) as Arc<dyn Exec>,
    ))
    .proptest_cases(8);
    let report = run(&target, None).await;
    assert_eq!(report.failed(), 0, "{}", report.summary());
    assert!(report.passed() >= 18, "{}", report.summary());
}
