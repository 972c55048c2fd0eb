//! One-command checks any adapter's exec tests make against their emulators: stdin carried
//! through `cat`, a working directory that does not exist, and a child left in the background.

use std::time::{Duration, Instant};

use execseam_core::{Command, Error, Exec, Output};

use crate::processes::sh;

/// Runs `cat` on `exec` with `stdin`: its output (where the adapter carries stdin exactly, the
/// same bytes on stdout).
pub async fn cat<E: Exec + ?Sized>(exec: &E, stdin: &[u8]) -> Output {
    let cmd = Command::builder(["cat"])
        .stdin(stdin.to_vec())
        .build()
        .expect("a valid command");
    exec.exec(cmd).await.expect("cat runs")
}

/// Runs `argv` on `exec` in `workdir`, a directory that does not exist: the error (a missing
/// working directory is the adapter's typed error, never the command's exit).
pub async fn in_missing_workdir<E: Exec + ?Sized>(exec: &E, argv: &[&str], workdir: &str) -> Error {
    let cmd = Command::builder(argv.iter().copied())
        .workdir(workdir)
        .build()
        .expect("a valid command");
    exec.exec(cmd).await.expect_err("an error, not a result")
}

/// Runs `sleep 60 &` on `exec`, the child's pid written to `pidfile` (a path in the sandbox as
/// the command sees it), and checks that the exec answers within 5 s (a child left running does
/// not hold the exec). Returns the script that prints `alive` while that child runs, else
/// `gone`.
pub async fn leave_a_background_child<E: Exec + ?Sized>(exec: &E, pidfile: &str) -> String {
    let started = Instant::now();
    let o = exec
        .exec(sh(&format!("sleep 60 & echo $! > {pidfile}; echo started")))
        .await
        .expect("the exec");
    assert_eq!(o.stdout.as_ref(), b"started\n");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    format!("kill -0 \"$(cat {pidfile})\" 2>/dev/null && echo alive || echo gone")
}
