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

use std::borrow::Cow;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use execseam_core::{BoxFuture, Error, ErrorKind, Retry};
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
    pub provider: Cow<'static, str>,
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
    // Every piece of work here ends something (a command, a session, a sandbox): `NotFound` means
    // it is already gone, which is what the work was for, not a failure to report.
    if r.error.kind() == ErrorKind::NotFound {
        return;
    }
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
/// failure is kept for [`drain`]. Dropped outside a runtime (a handle kept past its runtime's
/// end), the work runs on a thread with a runtime of its own, counted the same way.
pub fn spawn<F>(provider: impl Into<Cow<'static, str>>, what: &'static str, work: F)
where
    F: Future<Output = Result<(), Error>> + Send + 'static,
{
    let provider = provider.into();
    let flight = InFlight::new();
    let named = provider.clone();
    let tracked = async move {
        let _flight = flight;
        if let Err(error) = work.await {
            record(Reaped {
                provider,
                what,
                error,
            });
        }
    };
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => {
            rt.spawn(tracked);
        }
        Err(_) => {
            std::thread::spawn(move || {
                match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt.block_on(tracked),
                    Err(e) => {
                        drop(tracked);
                        record(Reaped {
                            provider: named.clone(),
                            what,
                            error: Error::new(
                                ErrorKind::Internal,
                                format!("no runtime to run it on: {e}"),
                            )
                            .with_provider(named),
                        });
                    }
                }
            });
        }
    }
}

/// Runs `work` (a kill on an error path) now, waiting at most `wait` for it: an error must not
/// be held by a clean-up the far end does not answer. Past `wait` the work goes on as drop-time
/// work (counted, awaited by [`drain`], its failure reported there); `None` then.
pub async fn run_bounded<T, F>(
    provider: impl Into<Cow<'static, str>>,
    what: &'static str,
    work: F,
    wait: Duration,
) -> Option<Result<T, Error>>
where
    T: Send + 'static,
    F: Future<Output = Result<T, Error>> + Send + 'static,
{
    tokio::time::timeout(wait, answered(provider, what, work))
        .await
        .ok()?
}

/// Runs `work` as drop-time work and answers its outcome; a caller that stops waiting leaves
/// it to the reaper (counted, drained, its failure reported). `None`: the work's task was lost.
async fn answered<T, F>(
    provider: impl Into<Cow<'static, str>>,
    what: &'static str,
    work: F,
) -> Option<Result<T, Error>>
where
    T: Send + 'static,
    F: Future<Output = Result<T, Error>> + Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    spawn(provider, what, async move {
        let outcome = work.await;
        // Nobody waits any more: the outcome is the reaper's to report.
        match tx.send(outcome) {
            Ok(()) => Ok(()),
            Err(outcome) => outcome.map(drop),
        }
    });
    rx.await.ok()
}

type Work = (&'static str, BoxFuture<'static, Result<(), Error>>);

/// Drop-time work (a kill, a removal) that a caller can also run and wait for: what makes a
/// stream's kill awaitable where the adapter only had a kill on drop. Issue 38 (D15): AX and
/// Docker killed an abandoned command only when its stream was dropped, so a host deadline
/// could only say "abandoned … (unconfirmed)" although the kill went out.
///
/// The adapter arms it while the command may run on and disarms it at the exit. Dropped
/// armed, the work runs through [`spawn`]; [`OnDrop::kill`] (for `EventStream::with_kill`)
/// takes it instead, runs it through the reaper too (a caller that stops waiting still has it
/// drained) and answers when it ends.
pub struct OnDrop {
    provider: &'static str,
    slot: Arc<Mutex<Option<Work>>>,
}

impl OnDrop {
    /// Disarmed.
    pub fn new(provider: &'static str) -> OnDrop {
        OnDrop {
            provider,
            slot: Arc::new(Mutex::new(None)),
        }
    }

    /// From now on, `work` (`what`: `kill`, `remove the container`) undoes the command.
    pub fn arm<F>(&self, what: &'static str, work: F)
    where
        F: Future<Output = Result<(), Error>> + Send + 'static,
    {
        if let Ok(mut slot) = self.slot.lock() {
            *slot = Some((what, Box::pin(work)));
        }
    }

    /// The command ended cleanly: nothing to undo.
    pub fn disarm(&self) {
        drop(self.take());
    }

    fn take(&self) -> Option<Work> {
        self.slot.lock().ok().and_then(|mut s| s.take())
    }

    /// Runs the armed work now (an error path), waiting at most `wait`: see [`run_bounded`].
    /// `None` when nothing was armed, or the wait ended first.
    pub async fn run_now(&self, wait: Duration) -> Option<Result<(), Error>> {
        let (what, work) = self.take()?;
        run_bounded(self.provider, what, work, wait).await
    }

    /// The awaitable kill for `EventStream::with_kill`: runs the armed work and answers its
    /// outcome; `Ok` at once when nothing is armed any more (the exit was seen, or the work
    /// already ran).
    pub fn kill(
        &self,
    ) -> impl FnOnce() -> BoxFuture<'static, Result<(), Error>> + Send + 'static + use<> {
        let (provider, slot) = (self.provider, self.slot.clone());
        move || {
            // Taken when called, not when first polled: `EventStream::kill` drops the stream
            // (this guard's owner) in between, which would run it unawaited.
            let armed = slot.lock().ok().and_then(|mut s| s.take());
            Box::pin(async move {
                let Some((what, work)) = armed else {
                    return Ok(());
                };
                answered(provider, what, work).await.unwrap_or_else(|| {
                    Err(
                        Error::new(ErrorKind::Internal, format!("{what}: its task was lost"))
                            .with_provider(provider),
                    )
                })
            })
        }
    }
}

impl Drop for OnDrop {
    fn drop(&mut self) {
        if let Some((what, work)) = self.take() {
            spawn(self.provider, what, work);
        }
    }
}

/// How long a create whose caller stopped waiting still waits for its answer before it looks
/// for what the request made by its tag ([`guarded`]'s `sweep`).
const ANSWER_GRACE: Duration = Duration::from_secs(2);

/// Runs `create` (a request that makes something the caller must later destroy) as work of
/// its own, so that a caller who stops waiting (a signal, a dropped future, a timeout) does not
/// leak what it makes: the answer nobody received is handed to `undo`, counted like drop-time
/// work and awaited by [`drain`]. Issue 38 (D17): a signal while a create's answer was in
/// flight left the sandbox running.
///
/// `sweep` (where the request carries a tag the provider keeps) finds and ends what the request
/// made when its answer is lost: when the caller has gone and no answer came within
/// [`ANSWER_GRACE`], or when the create failed after its request was sent ([`after_send`]).
/// A failed create's error is answered once the sweep has ended, so a caller that gets it
/// (and a process that exits right after) leaves nothing behind. The sweep is told whether
/// the provider answered ([`Looking::Answered`]: what it made is there now) or not
/// ([`Looking::Unanswered`]: it may still be making it).
pub async fn guarded<T, F, U, UF, S, SF>(
    provider: &'static str,
    what: &'static str,
    create: F,
    undo: U,
    sweep: Option<S>,
) -> Result<T, Error>
where
    T: Send + 'static,
    F: Future<Output = Result<T, Error>> + Send + 'static,
    U: FnOnce(T) -> UF + Send + 'static,
    UF: Future<Output = Result<(), Error>> + Send + 'static,
    S: FnOnce(Looking) -> SF + Send + 'static,
    SF: Future<Output = Result<(), Error>> + Send + 'static,
{
    let (mut tx, rx) = tokio::sync::oneshot::channel();
    let flight = InFlight::new();
    tokio::spawn(async move {
        let _flight = flight;
        let tagged = sweep.is_some();
        let lost = async {
            if !tagged {
                std::future::pending::<()>().await;
            }
            tx.closed().await;
            tokio::time::sleep(ANSWER_GRACE).await;
        };
        let made = tokio::select! {
            made = create => Some(made),
            () = lost => None,
        };
        let outcome = match made {
            Some(Ok(v)) => match tx.send(Ok(v)) {
                Err(Ok(unclaimed)) => undo(unclaimed).await,
                _ => Ok(()),
            },
            Some(Err(e)) => {
                let swept = match sweep {
                    Some(sweep) if after_send(&e) => sweep(Looking::of(&e)).await,
                    _ => Ok(()),
                };
                let _ = tx.send(Err(e));
                swept
            }
            None => match sweep {
                Some(sweep) => sweep(Looking::Unanswered).await,
                None => Ok(()),
            },
        };
        if let Err(error) = outcome {
            record(Reaped {
                provider: provider.into(),
                what,
                error,
            });
        }
    });
    match rx.await {
        Ok(made) => made,
        Err(_) => Err(Error::new(
            ErrorKind::Internal,
            "the create ended without an answer (its task panicked)",
        )
        .with_provider(provider)),
    }
}

/// Whether a failed create may have made what it asked for: its request was sent and the
/// error is not the provider's refusal. [`Retry::Safe`] says nothing ran; a typed refusal
/// (bad input or configuration, credentials, not found, a conflict, a quota) made nothing.
/// Everything else may come after the provider acted: a reset or timeout mid-answer, an
/// answer cut, malformed or endless after a success status, a 5xx from a gateway that had
/// forwarded (issue 38, D17: keyed on `Retry::Unsafe` alone, Docker's and E2B's cut create
/// answers left their sandbox).
pub fn after_send(e: &Error) -> bool {
    match e.retry() {
        Retry::Unsafe => true,
        Retry::Safe { .. } => false,
        Retry::Never => matches!(
            e.kind(),
            ErrorKind::Protocol
                | ErrorKind::OutputLimit
                | ErrorKind::Timeout(_)
                | ErrorKind::Unavailable
                | ErrorKind::Internal
                | ErrorKind::Cancelled
        ),
    }
}

/// What a create's sweep may assume when it looks for what the request made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Looking {
    /// The provider answered (a status, a body read): what it made exists now; one look.
    Answered,
    /// No answer (a reset, a timeout, a caller gone): the provider may still be making it;
    /// look again for a while.
    Unanswered,
}

impl Looking {
    fn of(e: &Error) -> Looking {
        let answered = e.status().is_some()
            || matches!(e.kind(), ErrorKind::Protocol | ErrorKind::OutputLimit);
        if answered {
            Looking::Answered
        } else {
            Looking::Unanswered
        }
    }
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
    use std::sync::atomic::AtomicBool;

    use super::*;

    type Sweep = fn(Looking) -> std::future::Ready<Result<(), Error>>;
    const NO_SWEEP: Option<Sweep> = None;

    // One test: the counters are process-wide.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn drain_waits_for_drop_time_work_and_reports_its_failures() {
        crate::guard::tests::a_lost_answers_sandbox_is_found_by_its_tag_and_destroyed().await;
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        spawn("p", "kill", async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            d.store(true, Ordering::SeqCst);
            Ok(())
        });
        spawn("p", "delete the sandbox", async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Err(Error::new(ErrorKind::Unavailable, "reset"))
        });
        // A kill whose sandbox is already gone did what it was for: not a failure.
        spawn("p", "kill", async {
            Err(Error::new(ErrorKind::NotFound, "no such sandbox"))
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
        // Dropped outside a runtime: the work still runs (on a thread), and drain waits for it.
        let ran = Arc::new(AtomicBool::new(false));
        let r = ran.clone();
        std::thread::spawn(move || {
            spawn("p", "kill", async move {
                tokio::time::sleep(Duration::from_millis(100)).await;
                r.store(true, Ordering::SeqCst);
                Ok(())
            })
        })
        .join()
        .unwrap();
        let drained = drain(Duration::from_secs(5)).await;
        assert!(ran.load(Ordering::SeqCst), "the off-runtime kill never ran");
        assert!(drained.clean());

        // A create whose caller stopped waiting: what it made is undone, and drain waits for it.
        let undone = Arc::new(AtomicBool::new(false));
        let u = undone.clone();
        let create = guarded(
            "p",
            "delete the sandbox",
            async {
                tokio::time::sleep(Duration::from_millis(200)).await;
                Ok::<_, Error>("sandbox-1")
            },
            move |id| async move {
                assert_eq!(id, "sandbox-1");
                u.store(true, Ordering::SeqCst);
                Ok(())
            },
            NO_SWEEP,
        );
        assert!(
            tokio::time::timeout(Duration::from_millis(20), create)
                .await
                .is_err()
        );
        drain(Duration::from_secs(5)).await;
        assert!(
            undone.load(Ordering::SeqCst),
            "the unclaimed sandbox was left"
        );
        // A caller that waits gets it, and nothing is undone.
        let made = guarded(
            "p",
            "delete",
            async { Ok::<_, Error>(7) },
            |_| async { Err(Error::new(ErrorKind::Internal, "undone although received")) },
            NO_SWEEP,
        )
        .await;
        assert_eq!(made.unwrap(), 7);

        // Drop-time work made awaitable (D15): the stream's kill runs it and answers when it
        // ended; dropped armed it still runs; disarmed (the exit was seen) nothing runs.
        let count = Arc::new(AtomicUsize::new(0));
        let work = |c: Arc<AtomicUsize>| async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            c.fetch_add(1, Ordering::SeqCst);
            Ok(())
        };
        let armed = OnDrop::new("p");
        armed.arm("kill", work(count.clone()));
        // As `EventStream::kill` does: called, then the stream (the guard's owner) dropped,
        // then awaited: it runs once, and the answer waits for it.
        let sent = armed.kill()();
        drop(armed);
        sent.await.unwrap();
        assert_eq!(count.load(Ordering::SeqCst), 1, "the kill was not awaited");
        let dropped = OnDrop::new("p");
        dropped.arm("kill", work(count.clone()));
        drop(dropped);
        let disarmed = OnDrop::new("p");
        disarmed.arm("kill", work(count.clone()));
        disarmed.disarm();
        disarmed.kill()().await.unwrap();
        drop(disarmed);
        assert!(drain(Duration::from_secs(5)).await.clean());
        assert_eq!(count.load(Ordering::SeqCst), 2);

        // Bounded: work that never ends is reported pending, not waited for.
        spawn("p", "kill", std::future::pending());
        let start = std::time::Instant::now();
        let drained = drain(Duration::from_millis(100)).await;
        assert!(start.elapsed() < Duration::from_secs(2));
        assert_eq!(drained.pending, 1);
        assert!(drained.failures.is_empty(), "{}", drained.describe());
        assert!(drained.describe().contains("unconfirmed"));
    }
}
