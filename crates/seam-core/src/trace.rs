//! The lifecycle spans every adapter's [`Provider`] runs in (feature `tracing`).
//!
//! Each of `create`, `connect`, `list` and `destroy` runs in one `debug` span
//! `lifecycle{provider, operation, sandbox, status, kind, count}` built from explicit fields only
//! (never the spec's env, the labels' values, a token or a request body):
//!
//! - `sandbox`: the id asked for (`connect`, `destroy`), or the created sandbox's id, recorded when
//!   `create` returns;
//! - `status`: the error's HTTP or gRPC status (`http 404`, `grpc 5`) when the call fails with one;
//! - `kind`: the error's [`ErrorKind`](crate::ErrorKind) name when the call fails;
//! - `count`: how many sandboxes `list` returned.
//!
//! When the span closes, an event `lifecycle call ended` at `debug` carries `ok` and `elapsed_ms`.
//! Adapters wrap their `Provider` methods in [`create`], [`connect`], [`list`] and [`destroy`].
//!
//! [`Provider`]: crate::Provider

use std::future::Future;
use std::time::Instant;

use tracing::Instrument;
use tracing::field::Empty;

use crate::{BoxFuture, Error, Sandbox, SandboxInfo, WireStatus};

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

/// `Provider::create` in its span; the created sandbox's id is recorded as `sandbox`.
pub fn create<'a>(
    provider: &str,
    fut: impl Future<Output = Result<Box<dyn Sandbox>, Error>> + Send + 'a,
) -> BoxFuture<'a, Result<Box<dyn Sandbox>, Error>> {
    run(span(provider, "create", None), fut, |s, sb| {
        s.record("sandbox", sb.id());
    })
}

/// `Provider::connect` in its span.
pub fn connect<'a>(
    provider: &str,
    id: &str,
    fut: impl Future<Output = Result<Box<dyn Sandbox>, Error>> + Send + 'a,
) -> BoxFuture<'a, Result<Box<dyn Sandbox>, Error>> {
    run(span(provider, "connect", Some(id)), fut, |_, _| {})
}

/// `Provider::list` in its span; the number of sandboxes is recorded as `count`.
pub fn list<'a>(
    provider: &str,
    fut: impl Future<Output = Result<Vec<SandboxInfo>, Error>> + Send + 'a,
) -> BoxFuture<'a, Result<Vec<SandboxInfo>, Error>> {
    run(span(provider, "list", None), fut, |s, v| {
        s.record("count", v.len());
    })
}

/// `Provider::destroy` in its span.
pub fn destroy<'a>(
    provider: &str,
    id: &str,
    fut: impl Future<Output = Result<(), Error>> + Send + 'a,
) -> BoxFuture<'a, Result<(), Error>> {
    run(span(provider, "destroy", Some(id)), fut, |_, _| {})
}
