//! The host's deadline, seen by the adapter it runs (issue 38, D29): a provider that kills a
//! command at a per-exec timeout of its own (Modal's `timeout_secs`, Fly's `timeout`) is sent the
//! host's deadline, so the command is killed there instead of abandoned, whatever set the
//! deadline (`WithDeadline` in the layers crate: the CLI's `run --timeout`, `mcp`'s
//! `timeout_secs`, a library user's layer).
//!
//! The deadline travels as a Tokio task-local around the exec's submit ([`within`]), not in the
//! [`Command`](execseam_core::Command) (no policy inside a command); an adapter reads it with
//! [`provider_timeout`], which also tells the layer ([`Taken`]) to wait a little longer for the
//! provider's own kill, so the error it reports (a confirmed kill) comes first.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

#[derive(Clone)]
struct HostDeadline {
    at: Instant,
    taken: Arc<AtomicBool>,
}

tokio::task_local! {
    static HOST: HostDeadline;
}

/// Whether the adapter under [`within`] sent the deadline to its provider, and how much longer
/// the caller then waits for the provider's kill (its grace).
#[derive(Clone, Debug)]
pub struct Taken {
    by_provider: Arc<AtomicBool>,
    grace: Duration,
}

impl Default for Taken {
    /// Not taken yet; a grace of [`PROVIDER_KILL_GRACE`].
    fn default() -> Taken {
        Taken::with_grace(PROVIDER_KILL_GRACE)
    }
}

impl Taken {
    /// Not taken yet; `grace` longer than the deadline is waited once a provider has it. A zero
    /// grace ends every deadline at itself (a stalled provider's too, and then the provider's
    /// own kill goes unconfirmed).
    pub fn with_grace(grace: Duration) -> Taken {
        Taken {
            by_provider: Arc::default(),
            grace,
        }
    }

    /// True once an adapter sent the host's deadline as its provider's per-exec timeout.
    pub fn by_provider(&self) -> bool {
        self.by_provider.load(Ordering::SeqCst)
    }

    /// `at`, or the grace later when the provider has the deadline: how long to wait for what
    /// follows the submit.
    pub fn later(&self, at: Instant) -> Instant {
        if self.by_provider() {
            at + self.grace
        } else {
            at
        }
    }
}

/// The default of how much longer than the host's deadline a caller waits when the adapter sent
/// it to its provider ([`provider_timeout`], rounded up to whole seconds there): the provider's
/// kill is then what the error reports. Why 900 ms: the provider kills at most 1 s after the
/// host's deadline (the rounding), so a longer grace would catch more of its kills, but a grace
/// is also what a stalled provider costs, and under a second a deadline still answers within
/// 1 s of itself (the reliability suite's `RetryAndDeadline` bound; 2 s failed it on Fly and
/// Modal). A caller that wants the other side of that trade sets its own
/// ([`Taken::with_grace`]; the layers' `WithDeadline::provider_kill_grace`).
pub const PROVIDER_KILL_GRACE: Duration = Duration::from_millis(900);

/// `fut` (an exec's submit, or its whole run) until `at`, which the adapter under it sees
/// ([`within`]); when the adapter sent that deadline to its provider, `taken`'s grace longer.
/// `None`: the deadline fired.
pub async fn until<F: Future>(at: Instant, taken: &Taken, fut: F) -> Option<F::Output> {
    let fut = within(at, taken, fut);
    tokio::pin!(fut);
    if let Ok(r) = tokio::time::timeout_at(at, &mut fut).await {
        return Some(r);
    }
    if !taken.by_provider() {
        return None;
    }
    tokio::time::timeout(taken.grace, fut).await.ok()
}

/// Runs `fut` (an exec's submit) with the host's deadline `at` visible to the adapter
/// ([`provider_timeout`]). Nested, the earlier deadline holds.
pub async fn within<F: Future>(at: Instant, taken: &Taken, fut: F) -> F::Output {
    let at = HOST.try_with(|h| h.at.min(at)).unwrap_or(at);
    let host = HostDeadline {
        at,
        taken: taken.by_provider.clone(),
    };
    HOST.scope(host, fut).await
}

/// The per-exec timeout to send the provider: the earlier of the adapter's `configured` one and
/// the host's deadline (when the exec runs [`within`] one), rounded up to whole seconds, at
/// least 1 s. Sending it marks the host's deadline [`Taken`].
pub fn provider_timeout(configured: Option<Duration>) -> Option<Duration> {
    let host = HOST
        .try_with(|h| {
            h.taken.store(true, Ordering::SeqCst);
            h.at.saturating_duration_since(Instant::now())
        })
        .ok();
    let d = match (configured, host) {
        (Some(c), Some(h)) => c.min(h),
        (c, h) => c.or(h)?,
    };
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    Some(Duration::from_secs(secs.max(1)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_host_deadline_reaches_the_adapter_rounded_up_and_the_earlier_holds() {
        assert_eq!(provider_timeout(None), None, "no deadline, none configured");
        assert_eq!(
            provider_timeout(Some(Duration::from_millis(1500))),
            Some(Duration::from_secs(2))
        );
        let taken = Taken::default();
        let at = Instant::now() + Duration::from_millis(2500);
        let sent = within(at, &taken, async { provider_timeout(None) }).await;
        assert_eq!(sent, Some(Duration::from_secs(3)));
        assert!(taken.by_provider());
        // A shorter configured timeout, and a nested later deadline, do not lengthen it.
        let sent = within(at, &Taken::default(), async {
            let later = Instant::now() + Duration::from_secs(60);
            within(later, &Taken::default(), async {
                (
                    provider_timeout(Some(Duration::from_secs(1))),
                    provider_timeout(None),
                )
            })
            .await
        })
        .await;
        assert_eq!(
            sent,
            (Some(Duration::from_secs(1)), Some(Duration::from_secs(3)))
        );
        // Outside the scope the adapter sees nothing, and nothing is marked.
        let untaken = Taken::default();
        assert!(!untaken.by_provider());
    }
}
