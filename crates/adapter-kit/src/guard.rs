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
//!   by [`SWEEP_WITHIN`]; a failed create answers its error after that.
//! - A provider without labels says how a lost answer's sandbox is found, or why nothing can be
//!   lost ([`LostCreate`], the adapter's `Adapter::LOST_CREATE`): where the create takes a name
//!   the provider lists (Sprites: the sprite's name is its id; AgentCore: the session's `name`),
//!   the guard gives each create a fresh one and sweeps by it as by a tag; where the create
//!   makes nothing before the caller holds the id (Cloudflare's bridge mints ids without state;
//!   Chrono's create sends no request; AX has no create), there is nothing to sweep.

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

/// How a create whose answer was lost is found (issue 38, D17): each adapter's
/// `Adapter::LOST_CREATE`, read by the facade's registry when it guards the provider.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LostCreate {
    /// By the per-request label [`CREATE_TAG`], where the provider keeps labels and lists by
    /// them (its `lifecycle()` says `list` and `spec.labels`); otherwise nothing is swept.
    Tagged,
    /// By a name the guard gives the create in the option `option` (a fresh
    /// `execseam-<16 hex>` per request), which [`Provider::list`] reports as the sandbox's id
    /// or [`SandboxInfo::name`]. A create whose spec already sets the option is not swept: a
    /// caller's own name may be shared by sandboxes it did not make.
    Named(&'static str),
    /// The create makes nothing the caller could lose before its answer names it: why.
    NothingMade(&'static str),
}

impl LostCreate {
    /// The name of a [`Named`](LostCreate::Named) create's sandbox: unique per request.
    fn fresh_name() -> String {
        format!("execseam-{}", crate::id::random_id(16))
    }
}

/// What a guarded create carries that finds what it made.
enum Mark {
    /// The label [`CREATE_TAG`] with this value.
    Tag(String),
    /// This name (the id or the [`SandboxInfo::name`] the provider lists).
    Name(String),
}

impl Mark {
    /// The mark for a create of `spec` on a provider with lifecycle `l`, and the spec carrying
    /// it; `None` where nothing can find what the create makes.
    fn of(
        lost: LostCreate,
        l: &LifecycleCapabilities,
        spec: SandboxSpec,
    ) -> (Option<Mark>, SandboxSpec) {
        match lost {
            LostCreate::Tagged if l.list && l.spec.labels => {
                let tag = crate::id::random_id(16);
                let spec = spec.with_label(CREATE_TAG, &tag);
                (Some(Mark::Tag(tag)), spec)
            }
            LostCreate::Named(option) if l.list && !spec.options().contains_key(option) => {
                let name = LostCreate::fresh_name();
                let spec = spec.with_option(option, &name);
                (Some(Mark::Name(name)), spec)
            }
            _ => (None, spec),
        }
    }

    /// What the provider lists that carries this mark.
    async fn made(&self, provider: &dyn Provider) -> Result<Vec<SandboxInfo>, Error> {
        match self {
            Mark::Tag(tag) => {
                provider
                    .list(&ListFilter::new().with_label(CREATE_TAG, tag))
                    .await
            }
            Mark::Name(name) => {
                let mut all = provider.list(&ListFilter::new()).await?;
                all.retain(|s| s.id == *name || s.name.as_deref() == Some(name));
                Ok(all)
            }
        }
    }
}

/// The sweep of a guarded call that carries nothing to find what it made by (none).
type Unswept = fn(Looking) -> std::future::Ready<Result<(), Error>>;

/// See the [module docs](self).
pub struct GuardedCreate {
    name: &'static str,
    lost: LostCreate,
    inner: Arc<dyn Provider>,
}

/// Wraps `inner` (the provider of adapter `name`, whose lost creates are found as `lost` says)
/// in a [`GuardedCreate`].
pub fn guard(name: &'static str, lost: LostCreate, inner: Box<dyn Provider>) -> Box<dyn Provider> {
    Box::new(GuardedCreate {
        name,
        lost,
        inner: Arc::from(inner),
    })
}

/// Destroys every sandbox carrying `mark` (a create's answer was lost), within
/// [`SWEEP_WITHIN`]; unanswered, it lists again (at growing intervals) until it finds one or
/// [`SWEEP_LOOKS_FOR`] has passed.
async fn sweep(provider: Arc<dyn Provider>, mark: Mark, looking: Looking) -> Result<(), Error> {
    let work = async {
        let until = tokio::time::Instant::now() + SWEEP_LOOKS_FOR;
        let mut pause = Duration::from_millis(100);
        let made = loop {
            let made = mark.made(&*provider).await?;
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
        let (mark, spec) = Mark::of(self.lost, &self.inner.lifecycle(), spec);
        let made_by = self.inner.clone();
        let swept = self.inner.clone();
        Box::pin(reaper::guarded(
            self.name,
            "destroy the sandbox of a create whose answer was lost",
            async move { made_by.create(spec).await },
            |made: Box<dyn Sandbox>| async move { made.close().await },
            mark.map(|m| move |looking| sweep(swept, m, looking)),
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

    /// A fork runs as work of its own too: an answer nobody received is closed (destroyed).
    /// A fork carries no spec, so what a fork whose answer never came made is not swept.
    fn fork<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Box<dyn Sandbox>, Error>> {
        let (inner, id) = (self.inner.clone(), id.to_owned());
        let unswept: Option<Unswept> = None;
        Box::pin(reaper::guarded(
            self.name,
            "destroy the fork whose answer was lost",
            async move { inner.fork(&id).await },
            |made: Box<dyn Sandbox>| async move { made.close().await },
            unswept,
        ))
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
    /// made it: `fail`). `named`: it keeps no labels, and lists the create's `name` option
    /// apart from the id it gives (as AgentCore's sessions).
    #[derive(Default)]
    struct Lossy {
        fail: Option<fn() -> Error>,
        named: bool,
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
                    labels: !self.named,
                    ..SpecSupport::NONE
                },
                options: &["name"],
                ..LifecycleCapabilities::NONE
            }
        }
        fn create(&self, spec: SandboxSpec) -> BoxFuture<'_, Result<Box<dyn Sandbox>, Error>> {
            let mut made = self.made.lock().unwrap();
            let mut info = SandboxInfo::new(format!("sb-{}", made.len()));
            if let Some(name) = spec.options().get("name") {
                info = info.with_name(name);
            }
            made.push(info.with_labels(spec.labels().clone()));
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

    /// What a create whose answer is lost made is found by its tag (or, on a provider without
    /// labels that lists a name the create takes, by a fresh name: before session 7 Sprites'
    /// and AgentCore's leaked) and destroyed: dropped mid-flight (a signal, a library user's
    /// timeout), or failed after it was sent: a reset (`Unsafe`), and an answer that broke
    /// after the provider made it (`Never`: before session 6 only `Unsafe` was swept, and
    /// Docker's and E2B's cut create answers leaked); a failed create answers once the sweep
    /// has ended. A refusal is not swept, nor a create the caller named itself. Called from the
    /// reaper's one test (its counters are process-wide).
    pub(crate) async fn a_lost_answers_sandbox_is_found_by_its_tag_and_destroyed() {
        let reset: fn() -> Error = || {
            Error::new(ErrorKind::Unavailable, "reset after the request").with_retry(Retry::Unsafe)
        };
        let malformed: fn() -> Error =
            || Error::protocol("a malformed answer").with_retry(Retry::Never);
        let refused: fn() -> Error =
            || Error::new(ErrorKind::InvalidCommand, "bad image").with_retry(Retry::Never);
        // Both ways at once: a dropped create waits out the reaper's answer grace (2 s).
        let cases = |named| async move {
            for fail in [None, Some(reset), Some(malformed), Some(refused)] {
                lost_create(named, fail, None).await;
            }
            // A name the caller chose: not swept (it may be another sandbox's too).
            lost_create(named, Some(reset), Some("mine")).await;
        };
        tokio::join!(cases(false), cases(true));
    }

    async fn lost_create(named: bool, fail: Option<fn() -> Error>, own_name: Option<&str>) {
        let lost = if named {
            LostCreate::Named("name")
        } else {
            LostCreate::Tagged
        };
        let swept = (!named || own_name.is_none()) && fail.is_none_or(|e| reaper::after_send(&e()));
        let lossy = Arc::new(Lossy {
            fail,
            named,
            ..Lossy::default()
        });
        // A sandbox of someone else's, without the tag or the name: kept.
        lossy.made.lock().unwrap().push(SandboxInfo::new("theirs"));
        let p = guard("lossy", lost, Box::new(lossy.clone()));
        let mut spec = SandboxSpec::new();
        if !named {
            spec = spec.with_label("team", "a");
        }
        if let Some(n) = own_name {
            spec = spec.with_option("name", n);
        }
        match tokio::time::timeout(Duration::from_millis(100), p.create(spec)).await {
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
        if named {
            let name = made[1].name.clone().unwrap_or_default();
            match own_name {
                Some(n) => assert_eq!(name, n),
                None => assert!(name.starts_with("execseam-") && name.len() == 25, "{name}"),
            }
        } else {
            assert_eq!(made[1].labels.get("team").map(String::as_str), Some("a"));
            assert_eq!(made[1].labels[CREATE_TAG].len(), 16);
        }
        let destroyed = lossy.destroyed.lock().unwrap().clone();
        assert_eq!(destroyed, if swept { &["sb-1"][..] } else { &[] });
    }
}
