//! [`TracedProvider`]: the `lifecycle` spans around a [`Provider`]'s calls.
//!
//! A middleware, not part of the contract (`execseam-core` has no runtime dependency and no
//! tracing), so it lives here beside the other host-side layers; the facade's registry
//! (`execseam::adapters`) applies it to every provider it builds.

use std::future::Future;
use std::time::Instant;

use tracing::Instrument;
use tracing::field::Empty;

use execseam_core::{
    BoxFuture, Capabilities, Error, LifecycleCapabilities, ListFilter, Provider, Sandbox,
    SandboxInfo, SandboxSpec, WireStatus,
};

/// A [`Provider`] whose `create`, `connect`, `list` and `destroy` each run in one `debug` span
/// `lifecycle{provider, operation, sandbox, status, kind, count}`, built from explicit fields
/// only (never the spec's env, the labels' values, a token or a request body):
///
/// - `sandbox`: the id asked for (`connect`, `destroy`), or the created sandbox's id, recorded
///   when `create` returns;
/// - `status`: the error's HTTP or gRPC status (`http 404`, `grpc 5`) when the call fails with one;
/// - `kind`: the error's [`ErrorKind`](execseam_core::ErrorKind) name when the call fails;
/// - `count`: how many sandboxes `list` returned.
///
/// When the span closes, an event `lifecycle call ended` at `debug` carries `ok` and
/// `elapsed_ms`. Everything else is the inner provider's, unchanged: `provider`,
/// `capabilities` and `lifecycle` are forwarded, and results (the [`Sandbox`] handles
/// included) are returned as the inner provider made them, so nothing a caller discovers on a
/// handle ([`Exec::streaming`] and the rest) is hidden behind a wrapper. An operation the
/// provider does not have still fails with its `Unsupported` error, in a span that says so.
///
/// [`Exec::streaming`]: execseam_core::Exec::streaming
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TracedProvider<P = Box<dyn Provider>>(P);

impl<P: Provider> TracedProvider<P> {
    /// Wraps `inner`.
    pub fn new(inner: P) -> TracedProvider<P> {
        TracedProvider(inner)
    }

    /// The wrapped provider.
    pub fn inner(&self) -> &P {
        &self.0
    }

    /// Unwraps the provider.
    pub fn into_inner(self) -> P {
        self.0
    }
}

/// Boxes `inner` in a [`TracedProvider`]: what the facade's registry does with every provider.
pub fn traced(inner: Box<dyn Provider>) -> Box<dyn Provider> {
    Box::new(TracedProvider(inner))
}

impl<P: Provider> Provider for TracedProvider<P> {
    fn provider(&self) -> &str {
        self.0.provider()
    }

    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }

    fn lifecycle(&self) -> LifecycleCapabilities {
        self.0.lifecycle()
    }

    fn create(&self, spec: SandboxSpec) -> BoxFuture<'_, Result<Box<dyn Sandbox>, Error>> {
        let span = span(self.0.provider(), "create", None);
        run(span, self.0.create(spec), |s, sb| {
            s.record("sandbox", sb.id());
        })
    }

    fn connect<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Box<dyn Sandbox>, Error>> {
        let span = span(self.0.provider(), "connect", Some(id));
        run(span, self.0.connect(id), |_, _| {})
    }

    fn list<'a>(
        &'a self,
        filter: &'a ListFilter,
    ) -> BoxFuture<'a, Result<Vec<SandboxInfo>, Error>> {
        let span = span(self.0.provider(), "list", None);
        run(span, self.0.list(filter), |s, v| {
            s.record("count", v.len());
        })
    }

    fn destroy<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        let span = span(self.0.provider(), "destroy", Some(id));
        run(span, self.0.destroy(id), |_, _| {})
    }
}

fn span(provider: &str, operation: &'static str, sandbox: Option<&str>) -> tracing::Span {
    let span = tracing::debug_span!(
        "lifecycle",
        provider,
        operation,
        sandbox = Empty,
        status = Empty,
        kind = Empty,
        count = Empty
    );
    if let Some(id) = sandbox {
        span.record("sandbox", id);
    }
    span
}

fn status(s: WireStatus) -> String {
    match s {
        WireStatus::Http(c) => format!("http {c}"),
        WireStatus::Grpc(c) => format!("grpc {c}"),
        // `WireStatus` is `#[non_exhaustive]`: a status space added later is still named.
        other => format!("{other:?}"),
    }
}

fn ended<T>(span: &tracing::Span, started: Instant, r: &Result<T, Error>) {
    if let Err(e) = r {
        span.record("kind", e.kind().as_str());
        if let Some(s) = e.status() {
            span.record("status", status(s).as_str());
        }
    }
    let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    span.in_scope(|| tracing::debug!(ok = r.is_ok(), elapsed_ms, "lifecycle call ended"));
}

/// Runs `fut` in `span`; `after` records what the success says (the new id, the count).
fn run<'a, T: Send + 'a>(
    span: tracing::Span,
    fut: impl Future<Output = Result<T, Error>> + Send + 'a,
    after: impl FnOnce(&tracing::Span, &T) + Send + 'a,
) -> BoxFuture<'a, Result<T, Error>> {
    let inner = span.clone();
    Box::pin(
        async move {
            let started = Instant::now();
            let r = fut.await;
            if let Ok(v) = &r {
                after(&inner, v);
            }
            ended(&inner, started, &r);
            r
        }
        .instrument(span),
    )
}
