//! Work an adapter starts when a handle or a stream is dropped (kill an abandoned command, stop
//! a session, delete a sandbox nobody closed), owned by the process and awaited before it exits.
//!
//! `Drop` cannot await, so adapters spawn that work. A bare `tokio::spawn` is lost when the
//! runtime shuts down: "Tasks spawned through `Runtime::spawn` keep running until they yield.
//! Then they are dropped" (tokio's `Runtime` docs), and a kill whose first await is a network
//! call never leaves the host. Issue 38 measured it: `execseam run --timeout` exited before
//! its kill was sent (AX 8 of 9 runs, Docker 5 of 5), and a signal during `run --sandbox` sent
//! no kill at all.
//!
//! Every such piece of work goes through [`spawn`] instead; front ends (the CLI, `mcp`,
//! `serve`) call [`drain`] before their runtime shuts down, which waits (bounded) for all of
//! it, and report what failed in their own words ([`Drained::failures`]) instead of the
//! adapters logging at WARN around the front end's one line.

use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use execseam_core::Error;
use tokio::sync::Notify;

static PENDING: AtomicUsize = AtomicUsize::new(0);
static IDLE: Notify = Notify::const_new();
static FAILURES: Mutex<Vec<Reaped>> = Mutex::new(Vec::new());

/// The most failures kept for [`drain`] (the oldest are dropped beyond it).
const MAX_FAILURES: usize = 64;

/// A piece of drop-time work that failed (or could not start).
#[derive(Debug)]
pub struct Reaped {
    /// The provider.
    pub provider: &'static str,
    /// What it was (`kill`, `stop the session`, `delete the sandbox`).
    pub what: &'static str,
    /// Why it failed.
    pub error: Error,
}

/// What [`drain`] saw.
#[derive(Debug, Default)]
pub struct Drained {
    /// Work still running when the wait ended.
    pub pending: usize,
    /// Work that failed since the last drain.
    pub failures: Vec<Reaped>,
}

impl Drained {
    /// True if everything finished and nothing failed.
    pub fn clean(&self) -> bool {
        self.pending == 0 && self.failures.is_empty()
    }

    /// One clause for a front end's line (`""` when clean): what was not done, and why.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        for f in &self.failures {
            parts.push(format!(
                "{}: {} failed: {}",
                f.provider,
                f.what,
                f.error.message()
            ));
        }
        if self.pending > 0 {
            parts.push(format!(
                "{} clean-up request(s) still unconfirmed at exit",
                self.pending
            ));
        }
        parts.join("; ")
    }
}

fn record(r: Reaped) {
    if let Ok(mut f) = FAILURES.lock() {
        if f.len() >= MAX_FAILURES {
            f.remove(0);
        }
        f.push(r);
    }
}

/// Counts one piece of work in flight while it lives.
struct InFlight;

impl InFlight {
    fn new() -> InFlight {
        PENDING.fetch_add(1, Ordering::SeqCst);
        InFlight
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if PENDING.fetch_sub(1, Ordering::SeqCst) == 1 {
            IDLE.notify_waiters();
        }
    }
}

/// Runs `work` (a kill, a stop, a delete) on the current runtime, counted until it ends; its
/// failure is kept for [`drain`]. Without a runtime nothing can run it: that is recorded too.
pub fn spawn<F>(provider: &'static str, what: &'static str, work: F)
where
    F: Future<Output = Result<(), Error>> + Send + 'static,
{
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        record(Reaped {
            provider,
            what,
            error: Error::new(
                execseam_core::ErrorKind::Internal,
                "no async runtime to run it on (dropped outside one)",
            )
            .with_provider(provider),
        });
        return;
    };
    let flight = InFlight::new();
    rt.spawn(async move {
        let _flight = flight;
        if let Err(error) = work.await {
            record(Reaped {
                provider,
                what,
                error,
            });
        }
    });
}

/// Work in flight now.
pub fn pending() -> usize {
    PENDING.load(Ordering::SeqCst)
}

/// Waits until no drop-time work is in flight, at most `within`; returns what is still
/// pending and what failed since the last drain. Front ends call it before their runtime
/// shuts down.
pub async fn drain(within: Duration) -> Drained {
    let wait = async {
        loop {
            let idle = IDLE.notified();
            tokio::pin!(idle);
            // Registered before the check: a notification in between is not lost.
            idle.as_mut().enable();
            if pending() == 0 {
                return;
            }
            idle.await;
        }
    };
    let _ = tokio::time::timeout(within, wait).await;
    Drained {
        pending: pending(),
        failures: FAILURES
            .lock()
            .map(|mut f| std::mem::take(&mut *f))
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    use super::*;

    // One test: the counters are process-wide.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn drain_waits_for_drop_time_work_and_reports_its_failures() {
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        spawn("p", "kill", async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            d.store(true, Ordering::SeqCst);
            Ok(())
        });
        spawn("p", "delete the sandbox", async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Err(Error::new(execseam_core::ErrorKind::Unavailable, "reset"))
        });
        let drained = drain(Duration::from_secs(5)).await;
        assert!(
            done.load(Ordering::SeqCst),
            "drain returned before the kill ran"
        );
        assert_eq!(drained.pending, 0);
        assert_eq!(drained.failures.len(), 1);
        assert!(
            drained
                .describe()
                .contains("delete the sandbox failed: reset")
        );
        // Bounded: work that never ends is reported pending, not waited for.
        spawn("p", "kill", std::future::pending());
        let start = std::time::Instant::now();
        let drained = drain(Duration::from_millis(100)).await;
        assert!(start.elapsed() < Duration::from_secs(2));
        assert_eq!(drained.pending, 1);
        assert!(drained.describe().contains("unconfirmed"));
        // Without a runtime the work cannot run: recorded, not silently lost.
        std::thread::spawn(|| spawn("p", "kill", async { Ok(()) }))
            .join()
            .unwrap();
        assert_eq!(drain(Duration::ZERO).await.failures.len(), 1);
    }
}
