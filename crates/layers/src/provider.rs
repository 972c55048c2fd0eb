//! [`TracedProvider`]: the `lifecycle` spans around a [`Provider`]'s calls, and
//! [`TracedSandbox`]: the same spans around a handle's `close` and `destroy`.
//!
//! A middleware, not part of the contract (`execseam-core` has no runtime dependency and no
//! tracing), so it lives here beside the other host-side layers; the facade's registry
//! (`execseam::adapters`) applies it to every provider it builds.

use std::future::Future;
use std::time::Instant;

use tracing::Instrument;
use tracing::field::Empty;

use execseam_core::{
    BoxFuture, Capabilities, Command, Error, Exec, ExecStream, ExposedPort, Kept,
    LifecycleCapabilities, ListFilter, Output, Ownership, Processes, Provider, Sandbox,
    SandboxInfo, SandboxSpec, SandboxState, SnapshotInfo, SnapshotOutcome, SnapshotRequest,
    WireStatus,
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
/// `capabilities` and `lifecycle` are forwarded. The [`Sandbox`] handles `create` and `connect`
/// return come back as [`TracedSandbox`]s, which add the same span to the handle's `close` and
/// `destroy` and forward everything else, [`Exec::streaming`] and [`Exec::processes`] included,
/// to the handle the inner provider made (so nothing a caller discovers on a handle is hidden
/// behind the wrapper). An operation the provider does not have still fails with its
/// `Unsupported` error, in a span that says so.
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
        let fut = run(span, self.0.create(spec), |s, sb| {
            s.record("sandbox", sb.id());
        });
        Box::pin(async move { fut.await.map(TracedSandbox::boxed) })
    }

    fn connect<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Box<dyn Sandbox>, Error>> {
        let span = span(self.0.provider(), "connect", Some(id));
        let fut = run(span, self.0.connect(id), |_, _| {});
        Box::pin(async move { fut.await.map(TracedSandbox::boxed) })
    }

    /// No I/O, so no span: the handle's `close` and `destroy` are traced.
    fn attach(&self, id: &str) -> Result<Box<dyn Sandbox>, Error> {
        self.0.attach(id).map(TracedSandbox::boxed)
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

    fn pause<'a>(
        &'a self,
        id: &'a str,
        keep: Option<Kept>,
    ) -> BoxFuture<'a, Result<SandboxState, Error>> {
        let span = span(self.0.provider(), "pause", Some(id));
        run(span, self.0.pause(id, keep), |_, _| {})
    }

    fn resume<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        let span = span(self.0.provider(), "resume", Some(id));
        run(span, self.0.resume(id), |_, _| {})
    }

    fn snapshot<'a>(
        &'a self,
        id: &'a str,
        request: SnapshotRequest,
    ) -> BoxFuture<'a, Result<SnapshotOutcome, Error>> {
        let span = span(self.0.provider(), "snapshot", Some(id));
        run(span, self.0.snapshot(id, request), |_, _| {})
    }

    fn restore<'a>(&'a self, id: &'a str, snapshot: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        let span = span(self.0.provider(), "restore", Some(id));
        run(span, self.0.restore(id, snapshot), |_, _| {})
    }

    fn list_snapshots<'a>(
        &'a self,
        source: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<SnapshotInfo>, Error>> {
        let span = span(self.0.provider(), "list_snapshots", source);
        run(span, self.0.list_snapshots(source), |s, v| {
            s.record("count", v.len());
        })
    }

    fn delete_snapshot<'a>(&'a self, snapshot: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        let span = span(self.0.provider(), "delete_snapshot", None);
        run(span, self.0.delete_snapshot(snapshot), |_, _| {})
    }

    fn fork<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Box<dyn Sandbox>, Error>> {
        let span = span(self.0.provider(), "fork", Some(id));
        let fut = run(span, self.0.fork(id), |_, _| {});
        Box::pin(async move { fut.await.map(TracedSandbox::boxed) })
    }

    fn expose<'a>(&'a self, id: &'a str, port: u16) -> BoxFuture<'a, Result<ExposedPort, Error>> {
        let span = span(self.0.provider(), "expose", Some(id));
        run(span, self.0.expose(id, port), |_, _| {})
    }

    fn exposed<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Vec<ExposedPort>, Error>> {
        let span = span(self.0.provider(), "exposed", Some(id));
        run(span, self.0.exposed(id), |s, v| {
            s.record("count", v.len());
        })
    }

    fn unexpose<'a>(&'a self, id: &'a str, port: u16) -> BoxFuture<'a, Result<(), Error>> {
        let span = span(self.0.provider(), "unexpose", Some(id));
        run(span, self.0.unexpose(id, port), |_, _| {})
    }
}

/// A [`Sandbox`] handle whose `close` and `destroy` each run in the `lifecycle` span of
/// [`TracedProvider`] (operation `close` or `destroy`, the handle's id as `sandbox`). Every other
/// method is forwarded to the inner handle unchanged: `exec`, `capabilities`, `id`, ownership,
/// and the discovered capabilities [`Exec::streaming`] and [`Exec::processes`], which return the
/// inner handle's own implementation (so a stream or a process handle goes straight to the adapter).
pub struct TracedSandbox(Box<dyn Sandbox>);

impl TracedSandbox {
    /// Wraps `inner`.
    pub fn new(inner: Box<dyn Sandbox>) -> TracedSandbox {
        TracedSandbox(inner)
    }

    /// Wraps `inner` and boxes it again (what [`TracedProvider`] does with every handle).
    pub fn boxed(inner: Box<dyn Sandbox>) -> Box<dyn Sandbox> {
        Box::new(TracedSandbox(inner))
    }

    /// The wrapped handle.
    pub fn inner(&self) -> &dyn Sandbox {
        &*self.0
    }

    /// Unwraps the handle.
    pub fn into_inner(self) -> Box<dyn Sandbox> {
        self.0
    }
}

impl std::fmt::Debug for TracedSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TracedSandbox")
            .field("provider", &self.0.provider())
            .field("id", &self.0.id())
            .finish_non_exhaustive()
    }
}

impl Exec for TracedSandbox {
    fn provider(&self) -> &str {
        self.0.provider()
    }

    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }

    fn exec(&self, command: Command) -> BoxFuture<'_, Result<Output, Error>> {
        self.0.exec(command)
    }

    fn streaming(&self) -> Option<&dyn ExecStream> {
        self.0.streaming()
    }

    fn processes(&self) -> Option<Box<dyn Processes + '_>> {
        self.0.processes()
    }
}

impl Sandbox for TracedSandbox {
    fn id(&self) -> &str {
        self.0.id()
    }

    fn ownership(&self) -> &Ownership {
        self.0.ownership()
    }

    fn end(&self) -> BoxFuture<'_, Result<(), Error>> {
        self.0.end()
    }

    fn release(&self) -> BoxFuture<'_, Result<(), Error>> {
        self.0.release()
    }

    fn owned(&self) -> bool {
        self.0.owned()
    }

    fn set_owned(&self, owned: bool) {
        self.0.set_owned(owned);
    }

    fn close(&self) -> BoxFuture<'_, Result<(), Error>> {
        let span = span(self.0.provider(), "close", Some(self.0.id()));
        run(span, self.0.close(), |_, _| {})
    }

    fn destroy(&self) -> BoxFuture<'_, Result<(), Error>> {
        let span = span(self.0.provider(), "destroy", Some(self.0.id()));
        run(span, self.0.destroy(), |_, _| {})
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::fmt::Debug;
    use std::sync::{Arc, Mutex};

    use execseam_core::{ErrorKind, EventStream, StartKey, StreamOffsets};
    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Metadata, Subscriber};

    /// Keeps every span (with its name) and every record and event, as text.
    #[derive(Clone, Default)]
    struct Spans(Arc<Mutex<String>>);

    impl Visit for Spans {
        fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
            self.0
                .lock()
                .unwrap()
                .push_str(&format!("{field}={value:?} "));
        }
    }

    impl Subscriber for Spans {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, span: &Attributes<'_>) -> Id {
            self.0
                .lock()
                .unwrap()
                .push_str(&format!("\nspan {} ", span.metadata().name()));
            span.record(&mut self.clone());
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, values: &Record<'_>) {
            self.0.lock().unwrap().push_str("| record ");
            values.record(&mut self.clone());
        }
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, event: &Event<'_>) {
            self.0.lock().unwrap().push_str("| event ");
            event.record(&mut self.clone());
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    /// A sandbox that streams and has process handles: the handle the wrapper returns must still say so,
    /// and hand back this very implementation.
    struct Streams(&'static str, Ownership);

    impl Exec for Streams {
        fn provider(&self) -> &str {
            "fake"
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities::FULL
        }
        fn exec(&self, _: Command) -> BoxFuture<'_, Result<Output, Error>> {
            Box::pin(async { Err(Error::protocol("not run in this test")) })
        }
        fn streaming(&self) -> Option<&dyn ExecStream> {
            Some(self)
        }
        fn processes(&self) -> Option<Box<dyn Processes + '_>> {
            Some(Box::new(crate::fake_processes::FakeProcesses(self.0)))
        }
    }

    impl ExecStream for Streams {
        fn exec_stream(&self, _: Command) -> BoxFuture<'_, Result<EventStream, Error>> {
            let id = self.0;
            Box::pin(async move { Err(Error::protocol(format!("stream of {id}"))) })
        }
    }

    impl Sandbox for Streams {
        fn id(&self) -> &str {
            self.0
        }
        fn ownership(&self) -> &Ownership {
            &self.1
        }
        fn end(&self) -> BoxFuture<'_, Result<(), Error>> {
            Box::pin(async {
                Err(Error::new(ErrorKind::Unavailable, "try later")
                    .with_status(WireStatus::Http(502)))
            })
        }
    }

    /// A handle that discovers nothing: the wrapper must not invent a capability.
    struct Plain(Ownership);

    impl Exec for Plain {
        fn provider(&self) -> &str {
            "plain"
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities::FULL
        }
        fn exec(&self, _: Command) -> BoxFuture<'_, Result<Output, Error>> {
            Box::pin(async { Err(Error::protocol("not run in this test")) })
        }
    }

    impl Sandbox for Plain {
        fn id(&self) -> &str {
            "plain-1"
        }
        fn ownership(&self) -> &Ownership {
            &self.0
        }
        fn end(&self) -> BoxFuture<'_, Result<(), Error>> {
            Box::pin(async { Ok(()) })
        }
    }

    const LIFECYCLE: LifecycleCapabilities = LifecycleCapabilities {
        create: true,
        connect: true,
        list: true,
        destroy: true,
        ..LifecycleCapabilities::NONE
    };

    /// Every lifecycle method, with answers the test can recognise; `destroy` of `"gone"` fails
    /// with a wire status.
    struct Fake {
        calls: Mutex<Vec<String>>,
    }

    impl Provider for Fake {
        fn provider(&self) -> &str {
            "fake"
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities {
                remote_kill: false,
                ..Capabilities::FULL
            }
        }
        fn lifecycle(&self) -> LifecycleCapabilities {
            LIFECYCLE
        }
        fn create(&self, spec: SandboxSpec) -> BoxFuture<'_, Result<Box<dyn Sandbox>, Error>> {
            let env = spec.env().len();
            self.calls.lock().unwrap().push(format!("create env={env}"));
            Box::pin(async {
                Ok(Box::new(Streams("fake-new", Ownership::connected())) as Box<dyn Sandbox>)
            })
        }
        fn connect<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<Box<dyn Sandbox>, Error>> {
            self.calls.lock().unwrap().push(format!("connect {id}"));
            Box::pin(async move {
                if id == "fake-new" {
                    Ok(Box::new(Streams("fake-new", Ownership::connected())) as Box<dyn Sandbox>)
                } else {
                    Err(Error::new(ErrorKind::NotFound, "no such sandbox"))
                }
            })
        }
        fn list<'a>(
            &'a self,
            filter: &'a ListFilter,
        ) -> BoxFuture<'a, Result<Vec<SandboxInfo>, Error>> {
            let labels = filter.labels().len();
            self.calls
                .lock()
                .unwrap()
                .push(format!("list labels={labels}"));
            Box::pin(async {
                Ok(vec![
                    SandboxInfo::new("a"),
                    SandboxInfo::new("b"),
                    SandboxInfo::new("c"),
                ])
            })
        }
        fn destroy<'a>(&'a self, id: &'a str) -> BoxFuture<'a, Result<(), Error>> {
            self.calls.lock().unwrap().push(format!("destroy {id}"));
            Box::pin(async move {
                if id == "gone" {
                    Err(Error::new(ErrorKind::Unavailable, "try later")
                        .with_status(WireStatus::Http(503)))
                } else {
                    Ok(())
                }
            })
        }
    }

    /// No lifecycle method implemented: the trait's defaults.
    struct Bare;

    impl Provider for Bare {
        fn provider(&self) -> &str {
            "bare"
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities::FULL
        }
        fn lifecycle(&self) -> LifecycleCapabilities {
            LifecycleCapabilities::NONE
        }
    }

    fn traced_run<T>(f: impl Future<Output = T>) -> (T, String) {
        let spans = Spans::default();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let out = tracing::subscriber::with_default(spans.clone(), || rt.block_on(f));
        let log = spans.0.lock().unwrap().clone();
        (out, log)
    }

    fn lines<'a>(log: &'a str, op: &str) -> Vec<&'a str> {
        log.lines()
            .filter(|l| {
                l.starts_with("span lifecycle ") && l.contains(&format!("operation=\"{op}\""))
            })
            .collect()
    }

    #[test]
    fn forwards_every_method_and_records_sandbox_count_kind_and_status() {
        let fake = Fake {
            calls: Mutex::new(Vec::new()),
        };
        let p = TracedProvider::new(fake);
        assert_eq!(Provider::provider(&p), "fake");
        assert_eq!(p.capabilities(), p.inner().capabilities());
        assert!(!p.capabilities().remote_kill);
        assert_eq!(p.lifecycle(), LIFECYCLE);
        let ((streams, connected, missing, count, destroyed, gone), log) = traced_run(async {
            let sb = p
                .create(SandboxSpec::new().with_env("API_TOKEN", "s3cr3t-env"))
                .await
                .unwrap();
            let streams = sb.streaming().is_some();
            let connected = p.connect("fake-new").await.unwrap().id().to_owned();
            let missing = p.connect("fake-nosuch").await.err().unwrap().kind();
            let count = p
                .list(&ListFilter::new().with_label("team", "s3cr3t-label"))
                .await
                .unwrap()
                .len();
            let destroyed = p.destroy("fake-new").await.is_ok();
            let gone = p.destroy("gone").await.err().unwrap().status();
            (streams, connected, missing, count, destroyed, gone)
        });
        // The inner provider got every call, with what was passed.
        assert_eq!(
            *p.inner().calls.lock().unwrap(),
            [
                "create env=1",
                "connect fake-new",
                "connect fake-nosuch",
                "list labels=1",
                "destroy fake-new",
                "destroy gone"
            ]
        );
        // The results are the inner provider's, the handle's streaming included.
        assert!(streams, "the created handle still streams");
        assert_eq!(connected, "fake-new");
        assert_eq!(missing, ErrorKind::NotFound);
        assert_eq!(count, 3);
        assert!(destroyed);
        assert_eq!(gone, Some(WireStatus::Http(503)));

        let create = lines(&log, "create");
        assert_eq!(create.len(), 1, "{log}");
        assert!(
            create[0].contains("provider=\"fake\"")
                && create[0].contains("record sandbox=\"fake-new\"")
                && create[0].contains("lifecycle call ended")
                && create[0].contains("ok=true")
                && create[0].contains("elapsed_ms="),
            "{log}"
        );
        let connect = lines(&log, "connect");
        assert_eq!(connect.len(), 2, "{log}");
        assert!(connect[0].contains("sandbox=\"fake-new\"") && connect[0].contains("ok=true"));
        assert!(
            connect[1].contains("sandbox=\"fake-nosuch\"")
                && connect[1].contains("kind=\"not-found\"")
                && connect[1].contains("ok=false"),
            "{log}"
        );
        let list = lines(&log, "list");
        assert_eq!(list.len(), 1, "{log}");
        assert!(list[0].contains("record count=3"), "{log}");
        let destroy = lines(&log, "destroy");
        assert_eq!(destroy.len(), 2, "{log}");
        assert!(destroy[0].contains("sandbox=\"fake-new\"") && destroy[0].contains("ok=true"));
        assert!(
            destroy[1].contains("sandbox=\"gone\"")
                && destroy[1].contains("kind=\"unavailable\"")
                && destroy[1].contains("status=\"http 503\"")
                && destroy[1].contains("ok=false"),
            "{log}"
        );
        // Explicit fields only: no spec env value, no label value.
        for secret in ["s3cr3t-env", "s3cr3t-label"] {
            assert!(!log.contains(secret), "{secret} leaked: {log}");
        }
    }

    #[test]
    fn a_missing_operation_keeps_its_unsupported_error() {
        let p = traced(Box::new(Bare));
        assert_eq!(p.provider(), "bare");
        assert_eq!(p.lifecycle(), LifecycleCapabilities::NONE);
        let (kinds, log) = traced_run(async {
            let filter = ListFilter::new();
            [
                p.create(SandboxSpec::new()).await.err().unwrap(),
                p.connect("x").await.err().unwrap(),
                p.list(&filter).await.err().unwrap(),
                p.destroy("x").await.err().unwrap(),
            ]
            .map(|e| (e.kind(), e.operation().to_owned()))
        });
        assert_eq!(
            kinds,
            ["create", "connect", "list", "destroy"]
                .map(|o| (ErrorKind::Unsupported, o.to_owned()))
        );
        for op in ["create", "connect", "list", "destroy"] {
            let l = lines(&log, op);
            assert_eq!(l.len(), 1, "{log}");
            assert!(
                l[0].contains("provider=\"bare\"")
                    && l[0].contains("kind=\"unsupported\"")
                    && l[0].contains("ok=false"),
                "{log}"
            );
        }
    }

    /// The handle's own `close` and `destroy` run in `lifecycle` spans; streaming and process handles
    /// are discovered through the wrapper, and are the inner handle's own implementations.
    #[test]
    fn a_handle_closes_and_destroys_in_spans_and_forwards_what_it_discovers() {
        let p = TracedProvider::new(Fake {
            calls: Mutex::new(Vec::new()),
        });
        let (checks, log) = traced_run(async {
            let mut out = Vec::new();
            for sb in [
                p.create(SandboxSpec::new()).await.unwrap(),
                p.connect("fake-new").await.unwrap(),
            ] {
                let s = sb.streaming().expect("streaming is forwarded");
                let r = sb.processes().expect("processes are forwarded");
                let key = StartKey::new("k").unwrap();
                // The inner handle's own implementations answer (the wrapper has none).
                let stream = s.exec_stream(Command::new(["true"]).unwrap()).await;
                let wrapped = stream
                    .err()
                    .unwrap()
                    .to_string()
                    .contains("stream of fake-new");
                let same = r
                    .attach(&r.handle_for(&key), StreamOffsets::ZERO)
                    .await
                    .err()
                    .unwrap()
                    .to_string()
                    .contains("attach in fake-new");
                let handle = r.handle_for(&key).as_str().to_owned();
                let close = sb.close().await.is_ok();
                let destroy = sb.destroy().await.err().unwrap().status();
                out.push((wrapped, same, handle, close, destroy, sb.id().to_owned()));
            }
            let plain = TracedSandbox::new(Box::new(Plain(Ownership::connected())));
            out.push((
                plain.streaming().is_none() && plain.processes().is_none(),
                !plain.owned(),
                String::new(),
                plain.close().await.is_ok(),
                plain.destroy().await.err().map(|e| e.status().unwrap()),
                plain.id().to_owned(),
            ));
            out
        });
        for (i, (wrapped, same, handle, close, destroy, id)) in checks.iter().enumerate() {
            if i < 2 {
                assert!(*wrapped && *same, "handle {i}: the inner implementations");
                assert_eq!(handle, "h-fake-new-k");
                assert_eq!(*destroy, Some(WireStatus::Http(502)));
            } else {
                assert!(
                    *wrapped,
                    "a plain handle discovers nothing through the wrapper"
                );
                assert!(*same, "ownership is forwarded");
                assert_eq!(*destroy, None);
            }
            assert!(*close);
            assert!(id == "fake-new" || id == "plain-1");
        }
        let close = lines(&log, "close");
        assert_eq!(close.len(), 3, "{log}");
        assert!(
            close[0].contains("provider=\"fake\"")
                && close[0].contains("sandbox=\"fake-new\"")
                && close[0].contains("ok=true"),
            "{log}"
        );
        assert!(close[2].contains("sandbox=\"plain-1\""), "{log}");
        let destroy = lines(&log, "destroy");
        assert_eq!(destroy.len(), 3, "{log}");
        assert!(
            destroy[0].contains("sandbox=\"fake-new\"")
                && destroy[0].contains("kind=\"unavailable\"")
                && destroy[0].contains("status=\"http 502\"")
                && destroy[0].contains("ok=false"),
            "{log}"
        );
        assert!(destroy[2].contains("ok=true"), "{log}");
    }
}
