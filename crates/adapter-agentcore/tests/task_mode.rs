//! The whole conformance suite in `ExecMode::Task` (startCommandExecution + getTask, stopTask on
//! drop): every case must pass, and the deadline case must prove the remote kill (this mode
//! declares `remote_kill`).

mod common;

use execseam_agentcore::ExecMode;
use execseam_conformance::{Outcome, run};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_suite_passes_in_task_mode() {
    let target = common::target("agentcore-task", ExecMode::Task)
        .await
        .expect("target");
    assert!(target.exec.capabilities().remote_kill);
    let report = run(&target, None).await;
    let failed: Vec<_> = report
        .cases
        .iter()
        .filter(|c| matches!(c.outcome, Outcome::Fail(_)))
        .map(|c| format!("{}: {}", c.name, c.outcome))
        .collect();
    assert!(
        failed.is_empty(),
        "failed in task mode:\n{}",
        failed.join("\n")
    );
    assert_eq!(
        report.outcome("deadline-keeps-partial-and-kills"),
        Some(&Outcome::Pass)
    );
    assert_eq!(
        report.outcome("fault-no-duplicate-execution"),
        Some(&Outcome::Pass)
    );
}
