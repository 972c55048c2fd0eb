//! The tool cases have teeth: adapters that lie about listings in the ways real backends could
//! (paging, sorting then cutting, swallowing a failure, merging stderr) fail the named tool cases,
//! while the honest local adapter passes them in the same run.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use bytes::Bytes;
use execseam_conformance::{Outcome, Target, run};
use execseam_core::{BoxFuture, Capabilities, Command, Error, Exec, Exit, Output};
use execseam_local::LocalExec;
use execseam_tools_protocol::native::{self, NativeRequest};

#[derive(Clone, Copy, Debug)]
enum Lie {
    /// Returns only the first 5 records of a listing (a backend that pages, with no cursor).
    FirstPage,
    /// Sorts a listing itself and truncates to 5 (the library must still see everything).
    SortThenCut,
    /// Turns a typed failure (a missing root, an invalid regex) into an empty success.
    SwallowFailure,
    /// Appends stderr to stdout (the one-shot-exec shortcut).
    MergeStderr,
}

struct Liar {
    inner: LocalExec,
    lie: Lie,
}

fn first_records(stdout: &[u8], n: usize, sort: bool) -> Bytes {
    let mut recs: Vec<&[u8]> = match native::records(stdout) {
        Ok(r) => r.collect(),
        Err(_) => return Bytes::copy_from_slice(stdout),
    };
    if sort {
        recs.sort();
    }
    let mut out = Vec::new();
    for r in recs.into_iter().take(n) {
        out.extend_from_slice(r);
        out.push(0);
    }
    Bytes::from(out)
}

impl Exec for Liar {
    fn provider(&self) -> &str {
        "liar"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            streaming: false,
            ..self.inner.capabilities()
        }
    }
    fn exec(&self, command: Command) -> BoxFuture<'_, Result<Output, Error>> {
        Box::pin(async move {
            let req = NativeRequest::parse(&command);
            let mut out = self.inner.exec(command).await?;
            if let Lie::MergeStderr = self.lie {
                let mut all = out.stdout.to_vec();
                all.extend_from_slice(&out.stderr);
                out.stdout = Bytes::from(all);
                out.stderr = Bytes::new();
                return Ok(out);
            }
            let Some(req) = req else {
                return Ok(out);
            };
            match self.lie {
                Lie::FirstPage | Lie::SortThenCut => {
                    if !matches!(req, NativeRequest::Grep(_)) {
                        out.stdout =
                            first_records(&out.stdout, 5, matches!(self.lie, Lie::SortThenCut));
                    } else if let Some(cut) = out.stdout.iter().position(|&b| b == b'\n') {
                        out.stdout = out.stdout.slice(..=cut);
                    }
                }
                Lie::SwallowFailure => {
                    if native::Failure::from_output(&out).is_some() {
                        out = Output::new("", "", Exit::Code(0));
                    }
                }
                Lie::MergeStderr => {}
            }
            Ok(out)
        })
    }
}

fn scratch(tag: &str) -> String {
    // One directory per run: the tests run in parallel and each removes its own.
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().canonicalize().unwrap().join(format!(
        "execseam-tools-teeth-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir.to_str().unwrap().to_owned()
}

async fn outcome(exec: Arc<dyn Exec>, tag: &str, case: &str) -> Outcome {
    let target = Target::new("teeth", exec)
        .scratch(scratch(tag))
        .proptest_cases(16);
    let report = run(&target, Some(case)).await;
    let o = report
        .outcome(case)
        .unwrap_or_else(|| panic!("case {case} did not run"))
        .clone();
    let _ = std::fs::remove_dir_all(&target.scratch);
    o
}

async fn caught(lie: Lie, cases: &[&str]) {
    for case in cases {
        let liar = Arc::new(Liar {
            inner: LocalExec::new(),
            lie,
        });
        let got = outcome(liar, &format!("{lie:?}"), case).await;
        assert!(
            matches!(got, Outcome::Fail(_)),
            "{lie:?} should fail {case}, got {got}"
        );
        let honest = outcome(Arc::new(LocalExec::new()), "honest", case).await;
        assert_eq!(
            honest,
            Outcome::Pass,
            "the local adapter should pass {case}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_page_is_caught() {
    caught(
        Lie::FirstPage,
        &[
            "tools-glob-snapshot",
            "tools-list-snapshot",
            "tools-grep-snapshot",
            "tools-hostile-order",
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_sorts_and_cuts_is_caught() {
    caught(
        Lie::SortThenCut,
        &["tools-glob-snapshot", "tools-hostile-order"],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swallowed_failure_is_caught() {
    caught(Lie::SwallowFailure, &["tools-errors-typed"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merged_stderr_is_caught() {
    caught(Lie::MergeStderr, &["tools-bash"]).await;
}
