//! One-command checks any adapter's exec tests make against their emulators: stdin carried
//! through `cat`, a working directory that does not exist, a child left in the background, an
//! error's kind and retry advice; and the commands and streams those tests run.

use std::time::{Duration, Instant};

use execseam_core::{Command, Error, ErrorKind, EventStream, Exec, Output, Retry};

pub use crate::processes::sh;

/// `argv` as a command (a test's literal argv is valid).
pub fn command<I, S>(argv: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: Into<String>,
{
    Command::new(argv).expect("a valid command")
}

/// The event stream of `cmd` on `exec` (an adapter that streams, a command that starts).
pub async fn stream_of<E: Exec + ?Sized>(exec: &E, cmd: Command) -> EventStream {
    exec.streaming()
        .expect("the adapter streams")
        .exec_stream(cmd)
        .await
        .expect("the stream starts")
}

/// Checks `e`'s kind and retry advice; a failure shows the error.
#[track_caller]
pub fn assert_error(e: &Error, kind: ErrorKind, retry: Retry) {
    assert_eq!((e.kind(), e.retry()), (kind, retry), "{e}");
}

/// Runs `check` (a script that prints `gone` once what it watches has ended, as
/// [`leave_a_background_child`] returns) on `exec` every 100 ms until it does; fails with `what`
/// when `within` has passed first.
pub async fn until_gone<E: Exec + ?Sized>(exec: &E, check: &str, within: Duration, what: &str) {
    let until = Instant::now() + within;
    loop {
        let o = exec.exec(sh(check)).await.expect("the check runs");
        if o.stdout.as_ref() == b"gone\n" {
            return;
        }
        assert!(Instant::now() < until, "{what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

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
    alive_or_gone(pidfile)
}

/// The script that prints `alive` while the process whose pid is in `pidfile` (a path in the
/// sandbox as the command sees it) runs, else `gone`.
pub fn alive_or_gone(pidfile: &str) -> String {
    format!("kill -0 \"$(cat {pidfile})\" 2>/dev/null && echo alive || echo gone")
}
