//! [`GuardedCreate`]: a [`Provider`] whose `create` does not leak the sandbox when its answer is
//! lost (issue 38, D17). The facade's registry applies it to every provider it builds, so the
//! CLI, `mcp`, `serve` and a library user who drops a create future all get it.
//!
//! - The create runs as work of its own ([`reaper::guarded`]): a caller who stops waiting (a
//!   signal, a dropped future, a timeout around it) does not stop it; the answer nobody received
//!   is closed (destroyed), and front ends drain that before they exit.
//! - Where the provider keeps labels and lists by them, each create carries a per-request tag
//!   ([`CREATE_TAG`] = 16 random hex digits): when the answer never arrives (or the create failed
//!   after it was sent: [`reaper::after_send`]), what the request made is found by that tag and
//!   destroyed (looking for up to [`SWEEP_LOOKS_FOR`] where the provider never answered), bounded
//!   by [`SWEEP_WITHIN`]; a failed create answers its error after that. Providers without labels
//!   (AgentCore, Sprites, Cloudflare, AX, Chrono) get the first half only: an answer that never
//!   arrives leaks there.

use std::sync::Arc;
use std::time::Duration;

use execseam_core::{
    BoxFuture, Capabilities, Error, ErrorKind, ExposedPort, Kept, LifecycleCapabilities,
    ListFilter, Provider, Sandbox, SandboxInfo, SandboxSpec, SandboxState, SnapshotInfo,
    SnapshotOutcome, SnapshotRequest,
};

use crate::reaper::{self, Looking};

/// The label each guarded create carries: a per-request tag, what a lost answer's sandbox is
/// found by.
pub const CREATE_TAG: &str = "execseam-create";

/// The most a sweep for a lost answer's sandbox takes (its lists and destroys).
pub const SWEEP_WITHIN: Duration = Duration::from_secs(6);

/// How long a sweep keeps looking when the provider never answered (it may still be making
/// the sandbox): a sandbox that appears later than this leaks.
pub const SWEEP_LOOKS_FOR: Duration = Duration::from_secs(2);

/// See the [module docs](self).
pub struct GuardedCreate {
    name: &'static str,
    inner: Arc<dyn Provider>,
}

/// Wraps `inner` (the provider of adapter `name`) in a [`GuardedCreate`].
pub fn guard(name: &'static str, inner: Box<dyn Provider>) -> Box<dyn Provider> {
    Box::new(GuardedCreate {
        name,
        inner: Arc::from(inner),
    })
}

/// Destroys every sandbox tagged `tag` (a create's answer was lost), within [`SWEEP_WITHIN`];
/// unanswered, it lists again (at growing intervals) until it finds one or
/// [`SWEEP_LOOKS_FOR`] has passed.
async fn sweep(provider: Arc<dyn Provider>, tag: String, looking: Looking) -> Result<(), Error> {
    let work = async {
        let filter = ListFilter::new().with_label(CREATE_TAG, &tag);
        let until = tokio::time::Instant::now() + SWEEP_LOOKS_FOR;
        let mut pause = Duration::from_millis(100);
        let made = loop {
            let made = provider.list(&filter).await?;
            if !made.is_empty()
                || looking == Looking::Answered
                || tokio::time::Instant::now() + pause > until
            {
                break made;
            }
            tokio::time::sleep(pause).await;
            pause *= 2;
        };
        for s in made {
            crate::gone_is_destroyed(provider.destroy(&s.id).await)?;
        }
        Ok(())
    };
    tokio::time::timeout(SWEEP_WITHIN, work)
        .await
        .unwrap_or_else(|_| {
            Err(Error::new(
                ErrorKind::Unavailable,
                format!("no list and destroy within {SWEEP_WITHIN:?}"),
            ))
        })
}

impl Provider for GuardedCreate {
    fn provider(&self) -> &str {
        self.inner.provider()
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn lifecycle(&self) -> LifecycleCapabilities {
        self.inner.lifecycle()
    }

    fn create(&self, spec: SandboxSpec) -> BoxFuture<'_, Result<Box<dyn Sandbox>, Error>> {
        let l = self.inner.lifecycle();
        let tag = (l.list && l.spec.labels).then(|| crate::id::random_id(16));
        let spec = match &tag {
            Some(t) => spec.with_label(CREATE_TAG, t),
            None => spec,
        };
        let made_by = self.inner.clone();
        let swept = self.inner.clone();
        Box::pin(reaper::guarded(
            self.name,
            "destroy the sandbox of a create whose answer was lost",
            async move { made_by.create(spec).await },
            |made: Box<dyn Sandbox>| async move { made.close().await },
            tag.map(|t| move |looking| sweep(swept, t, looking)),
        ))
    }

    fn connect<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Box<dyn Sandbox>, Error>> {
        self.inner.connect(id)
    }

    fn attach(&self, id: &str) -> Result<Box<dyn Sandbox>, Error> {
        self.inner.attach(id)
    }

    fn list<'a>(
        &'a self,
        filter: &'a ListFilter,
    ) -> BoxFuture<'a, Result<Vec<SandboxInfo>, Error>> {
        self.inner.list(filter)
    }

    fn destroy<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        self.inner.destroy(id)
    }

    fn pause<'a>(
        &'a self,
        id: &'a str,
        keep: Option<Kept>,
    ) -> BoxFuture<'a, Result<SandboxState, Error>> {
        self.inner.pause(id, keep)
    }

    fn resume<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        self.inner.resume(id)
    }

    fn snapshot<'a>(
        &'a self,
        id: &'a str,
        request: SnapshotRequest,
    ) -> BoxFuture<'a, Result<SnapshotOutcome, Error>> {
        self.inner.snapshot(id, request)
    }

    fn restore<'a>(&'a self, id: &'a str, snapshot: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        self.inner.restore(id, snapshot)
    }

    fn list_snapshots<'a>(
        &'a self,
        source: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<SnapshotInfo>, Error>> {
        self.inner.list_snapshots(source)
    }

    fn delete_snapshot<'a>(&'a self, snapshot: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        self.inner.delete_snapshot(snapshot)
    }

    fn fork<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Box<dyn Sandbox>, Error>> {
        self.inner.fork(id)
    }

    fn expose<'a>(&'a self, id: &'a str, port: u16) -> BoxFuture<'a, Result<ExposedPort, Error>> {
        self.inner.expose(id, port)
    }

    fn exposed<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Vec<ExposedPort>, Error>> {
        self.inner.exposed(id)
    }

    fn unexpose<'a>(&'a self, id: &'a str, port: u16) -> BoxFuture<'a, Result<(), Error>> {
        self.inner.unexpose(id, port)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::sync::Mutex;

    use execseam_core::{Retry, SpecSupport};

    use super::*;

    /// A provider whose create makes the sandbox and then never answers (or fails after it
    /// made it: `fail`).
    #[derive(Default)]
    struct Lossy {
        fail: Option<fn() -> Error>,
        made: Mutex<Vec<SandboxInfo>>,
        destroyed: Mutex<Vec<String>>,
    }

    impl Provider for Lossy {
        fn provider(&self) -> &str {
            "lossy"
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities::FULL
        }
        fn lifecycle(&self) -> LifecycleCapabilities {
            LifecycleCapabilities {
                create: true,
                list: true,
                destroy: true,
                spec: SpecSupport {
                    labels: true,
                    ..SpecSupport::NONE
                },
                ..LifecycleCapabilities::NONE
            }
        }
        fn create(&self, spec: SandboxSpec) -> BoxFuture<'_, Result<Box<dyn Sandbox>, Error>> {
            let mut made = self.made.lock().unwrap();
            let id = format!("sb-{}", made.len());
            made.push(SandboxInfo::new(id).with_labels(spec.labels().clone()));
            let fail = self.fail;
            Box::pin(async move {
                match fail {
                    Some(e) => Err(e()),
                    None => std::future::pending().await,
                }
            })
        }
        fn list<'a>(
            &'a self,
            filter: &'a ListFilter,
        ) -> BoxFuture<'a, Result<Vec<SandboxInfo>, Error>> {
            let made = self.made.lock().unwrap().clone();
            Box::pin(async move { Ok(made.into_iter().filter(|s| filter.matches(s)).collect()) })
        }
        fn destroy<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), Error>> {
            self.destroyed.lock().unwrap().push(id.to_owned());
            Box::pin(async { Ok(()) })
        }
    }

    /// What a create whose answer is lost made is found by its tag and destroyed: dropped
    /// mid-flight (a signal, a library user's timeout), or failed after it was sent: a reset
    /// (`Unsafe`), and an answer that broke after the provider made it (`Never`: before
    /// session 6 only `Unsafe` was swept, and Docker's and E2B's cut create answers leaked);
    /// a failed create answers once the sweep has ended. A refusal is not swept. Called from
    /// the reaper's one test (its counters are process-wide).
    pub(crate) async fn a_lost_answers_sandbox_is_found_by_its_tag_and_destroyed() {
        let reset: fn() -> Error = || {
            Error::new(ErrorKind::Unavailable, "reset after the request").with_retry(Retry::Unsafe)
        };
        let malformed: fn() -> Error =
            || Error::protocol("a malformed answer").with_retry(Retry::Never);
        let refused: fn() -> Error =
            || Error::new(ErrorKind::InvalidCommand, "bad image").with_retry(Retry::Never);
        for fail in [None, Some(reset), Some(malformed), Some(refused)] {
            let swept = fail.is_none_or(|e| reaper::after_send(&e()));
            let lossy = Arc::new(Lossy {
                fail,
                ..Lossy::default()
            });
            // A sandbox of someone else's, without the tag: kept.
            lossy.made.lock().unwrap().push(SandboxInfo::new("theirs"));
            let p = guard("lossy", Box::new(lossy.clone()));
            let create = p.create(SandboxSpec::new().with_label("team", "a"));
            match tokio::time::timeout(Duration::from_millis(100), create).await {
                Err(_) => assert!(fail.is_none(), "the failed create did not answer"),
                Ok(r) => {
                    assert!(
                        fail.is_some() && r.is_err(),
                        "the failure reaches the caller"
                    );
                    let destroyed = lossy.destroyed.lock().unwrap().clone();
                    assert_eq!(destroyed.len(), usize::from(swept), "{destroyed:?}");
                }
            }
            let start = std::time::Instant::now();
            while swept && lossy.destroyed.lock().unwrap().is_empty() {
                assert!(start.elapsed() < Duration::from_secs(10), "never swept");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let made = lossy.made.lock().unwrap().clone();
            assert_eq!(made[1].labels.get("team").map(String::as_str), Some("a"));
            assert_eq!(made[1].labels[CREATE_TAG].len(), 16);
            let destroyed = lossy.destroyed.lock().unwrap().clone();
            assert_eq!(destroyed, if swept { &["sb-1"][..] } else { &[] });
        }
    }
}
