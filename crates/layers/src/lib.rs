#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! Host-side layers: policy that wraps any [`Exec`] without touching [`Command`].
//!
//! - [`WithDeadline`]: the host's own deadline. When it fires the command is abandoned (adapters
//!   with [`remote_kill`](execseam_core::Capabilities::remote_kill) kill it) and the result is an `Err` of
//!   kind [`Timeout(Command)`](execseam_core::Deadline::Command) carrying the partial output.
//!   Where the adapter's stream has an awaitable kill ([`EventStream::kill`]) the layer waits
//!   for it (at most [`WithDeadline::kill_wait`], 750 ms by default; past that the kill goes on
//!   as the adapter kit's drop-time work, which front ends drain before they exit), and the
//!   message says "killed" only when the kill was answered. A deadline too large for the clock
//!   (`Duration::MAX`) means none. The adapter sees the deadline (the kit's `deadline`
//!   module): one whose provider kills at a per-exec timeout of its own (Modal, Fly) sends it
//!   there, and the layer then waits its [`WithDeadline::provider_kill_grace`] longer for that kill's
//!   answer. Over process handles it bounds each call, not the detached command (`wait`'s
//!   window shortened to fit, [`WAIT_ANSWER_RESERVE`]); see `WithDeadline::processes`.
//! - [`WithOutputCap`]: keeps at most N bytes of each stream and records what it dropped in
//!   [`Output::truncated`].
//! - [`WithRetry`]: retries only errors whose class is [`Retry::Safe`], with exponential backoff,
//!   honouring the provider's retry-after up to [`RetryPolicy::max_retry_after`] (30 s by
//!   default); a longer wait is not slept but returned as [`ErrorKind::RateLimited`]. An exec
//!   that may have started is never re-submitted. Each attempt runs in an
//!   `attempt{provider, operation, tool, attempt}` span (1-based) under the layer's `retry`
//!   span, which closes with `attempts`; each retry is logged at `info` with the failed
//!   attempt's number, the error's kind, retry class, status, message and the delay.
//!
//! - [`TracedProvider`] (and [`traced`]): a [`Provider`](execseam_core::Provider) whose lifecycle
//!   calls run in `lifecycle{provider, operation, sandbox, status, kind, count}` spans; the
//!   facade's registry wraps every provider it builds in it. The handles it returns are
//!   [`TracedSandbox`]es: `close` and `destroy` in the same span, streaming and process handles
//!   forwarded.
//!
//! Recommended order, innermost first: `adapter.with_retry(..).with_deadline(..).with_output_cap(..)`
//! (the deadline bounds the retries; the cap sees the deadline's partial output).

mod deadline_processes;
mod provider;

pub use deadline_processes::WAIT_ANSWER_RESERVE;

pub use provider::{TracedProvider, TracedSandbox, traced};

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tracing::Instrument;

use backon::{ExponentialBuilder, Retryable};
use bytes::{Bytes, BytesMut};
use futures_core::Stream;
use tokio::time::{Instant, Sleep};

pub use execseam_adapter_kit::deadline::PROVIDER_KILL_GRACE;
use execseam_adapter_kit::deadline::{Taken, until};
use execseam_adapter_kit::reaper;
use execseam_core::{
    BoxFuture, Capabilities, Command, Deadline, Error, ErrorKind, Event, EventStream, Exec,
    ExecStream, Output, Ownership, PartialOutput, Retry, Sandbox, Truncated,
};

/// Adds the layers to every [`Exec`].
pub trait ExecExt: Exec + Sized {
    /// See [`WithDeadline`].
    fn with_deadline(self, limit: Duration) -> WithDeadline<Self> {
        WithDeadline {
            inner: self,
            limit,
            kill_wait: DEFAULT_KILL_WAIT,
            provider_kill_grace: PROVIDER_KILL_GRACE,
        }
    }

    /// See [`WithOutputCap`].
    fn with_output_cap(self, max_bytes_per_stream: u64) -> WithOutputCap<Self> {
        WithOutputCap {
            inner: self,
            cap: max_bytes_per_stream,
        }
    }

    /// See [`WithRetry`].
    fn with_retry(self, policy: RetryPolicy) -> WithRetry<Self> {
        WithRetry {
            inner: self,
            policy,
        }
    }
}

impl<E: Exec + Sized> ExecExt for E {}

/// A layer over a [`Sandbox`] is the same sandbox: its id, ownership, `close` and `destroy` are
/// the wrapped handle's (a layer changes how commands run, never what ends the sandbox).
macro_rules! forward_sandbox {
    ($($layer:ident),*) => {$(
        impl<S: Sandbox> Sandbox for $layer<S> {
            fn id(&self) -> &str {
                self.inner.id()
            }
            fn ownership(&self) -> &Ownership {
                self.inner.ownership()
            }
            fn end(&self) -> BoxFuture<'_, Result<(), Error>> {
                self.inner.end()
            }
            fn release(&self) -> BoxFuture<'_, Result<(), Error>> {
                self.inner.release()
            }
            fn owned(&self) -> bool {
                self.inner.owned()
            }
            fn set_owned(&self, owned: bool) {
                self.inner.set_owned(owned)
            }
            fn close(&self) -> BoxFuture<'_, Result<(), Error>> {
                self.inner.close()
            }
            fn destroy(&self) -> BoxFuture<'_, Result<(), Error>> {
                self.inner.destroy()
            }
        }
    )*};
}

forward_sandbox!(WithDeadline, WithOutputCap, WithRetry);

/// In a layer's `Exec` impl: the inner adapter's provider and capabilities, and the layer
/// itself as the stream where the inner adapter streams (its `ExecStream` impl applies the
/// layer). `processes`: also the inner adapter's process handles, unchanged (a detached command
/// outlives any one call, so the layer's policy does not apply to it; bound a wait with
/// `Processes::wait`'s own deadline).
macro_rules! forward_exec {
    () => {
        fn provider(&self) -> &str {
            self.inner.provider()
        }

        fn capabilities(&self) -> Capabilities {
            self.inner.capabilities()
        }

        fn streaming(&self) -> Option<&dyn ExecStream> {
            self.inner.streaming().map(|_| self as &dyn ExecStream)
        }
    };
    (processes) => {
        forward_exec!();

        fn processes(&self) -> Option<Box<dyn execseam_core::Processes + '_>> {
            self.inner.processes()
        }
    };
}

// ---------------------------------------------------------------------------------------------
// Deadline

/// How long [`WithDeadline`] waits for a kill to be answered by default: short, so the deadline
/// error still comes within a second of its time.
pub const DEFAULT_KILL_WAIT: Duration = Duration::from_millis(750);

/// The host's deadline on each command. See the [module docs](self).
#[derive(Clone, Debug)]
pub struct WithDeadline<E> {
    inner: E,
    limit: Duration,
    kill_wait: Duration,
    provider_kill_grace: Duration,
}

impl<E> WithDeadline<E> {
    /// The wrapped adapter.
    pub fn inner(&self) -> &E {
        &self.inner
    }

    /// How long to wait for the adapter's kill to be answered once the deadline fired (default
    /// [`DEFAULT_KILL_WAIT`]). An unanswered kill keeps going in the background.
    #[must_use]
    pub fn kill_wait(mut self, wait: Duration) -> Self {
        self.kill_wait = wait;
        self
    }

    /// How much longer than the deadline to wait when the adapter sent it to its provider as a
    /// per-exec timeout (Modal, Fly), for the provider's own kill to be what the error reports
    /// (default [`PROVIDER_KILL_GRACE`], 900 ms: why, there). A stalled provider costs the
    /// grace too: `Duration::ZERO` ends every deadline at itself, the provider's kill then
    /// unconfirmed.
    #[must_use]
    pub fn provider_kill_grace(mut self, grace: Duration) -> Self {
        self.provider_kill_grace = grace;
        self
    }
}

/// `now + limit`, or (for a limit too large for the clock) a deadline that never comes.
fn deadline_at(limit: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(limit)
        .unwrap_or_else(|| now + Duration::from_secs(86_400 * 365 * 30))
}

/// What became of the command when the deadline fired.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Killed {
    /// The adapter answered its kill.
    Confirmed,
    /// Dropped; the adapter kills it in the background (`remote_kill`) or cannot.
    Dropped { remote_kill: bool },
    /// The kill was sent but not answered in time.
    Unconfirmed(Duration),
    /// The kill failed.
    Failed(String),
    /// Dropped; the provider kills it at the per-exec timeout the adapter sent (unconfirmed).
    AtProviderTimeout,
}

impl Killed {
    /// What a dropped command becomes: killed by the provider at the timeout the adapter sent
    /// it, by the adapter in the background, or not at all.
    fn dropped(remote_kill: bool, taken: &Taken) -> Killed {
        if taken.by_provider() {
            Killed::AtProviderTimeout
        } else {
            Killed::Dropped { remote_kill }
        }
    }
}

/// Kills the stream, waiting at most `wait` for the answer; past that the kill goes on as the
/// kit's drop-time work, which front ends drain before they exit (issue 38, D29: a bare
/// `tokio::spawn` lost a kill slower than `wait` when the runtime shut down). `dropped`: what an
/// unkillable stream's command becomes.
async fn kill_stream(
    provider: String,
    stream: EventStream,
    dropped: Killed,
    wait: Duration,
) -> Killed {
    if !stream.can_confirm_kill() {
        drop(stream);
        return dropped;
    }
    let kill = "kill the command at the host's deadline";
    match reaper::run_bounded(provider, kill, stream.kill(), wait).await {
        Some(Ok(true)) => Killed::Confirmed,
        Some(Ok(false)) => dropped,
        Some(Err(e)) => Killed::Failed(e.to_string()),
        None => Killed::Unconfirmed(wait),
    }
}

fn deadline_error(
    provider: &str,
    limit: Duration,
    killed: &Killed,
    partial: PartialOutput,
) -> Error {
    let what = match killed {
        Killed::Confirmed => "the command was killed".to_owned(),
        Killed::Dropped { remote_kill: true } => {
            "the command was abandoned; the adapter kills it in the background (unconfirmed)"
                .to_owned()
        }
        Killed::Dropped { remote_kill: false } => {
            "the command was abandoned; this backend cannot kill it".to_owned()
        }
        Killed::Unconfirmed(wait) => format!(
            "a kill was sent but not answered within {}ms",
            wait.as_millis()
        ),
        Killed::Failed(e) => format!("the kill failed: {e}"),
        Killed::AtProviderTimeout => {
            "the command was abandoned; the provider kills it at the per-exec timeout it was sent (unconfirmed)"
                .to_owned()
        }
    };
    Error::new(
        ErrorKind::Timeout(Deadline::Command),
        format!(
            "the host's deadline of {}ms expired; {what}",
            limit.as_millis()
        ),
    )
    .with_retry(Retry::Unsafe)
    .with_provider(provider.to_owned())
    .with_operation("exec")
    .with_partial(partial)
}

impl<E: Exec> WithDeadline<E> {
    /// A stream's submit under `deadline` (which the adapter sees): the stream, or the
    /// deadline's error.
    async fn submit(
        &self,
        streaming: &dyn ExecStream,
        command: Command,
        deadline: Instant,
        taken: &Taken,
    ) -> Result<EventStream, Error> {
        match until(deadline, taken, streaming.exec_stream(command)).await {
            Some(r) => r,
            None => Err(deadline_error(
                self.provider(),
                self.limit,
                &Killed::dropped(self.inner.capabilities().remote_kill, taken),
                PartialOutput::default(),
            )),
        }
    }
}

impl<E: Exec> Exec for WithDeadline<E> {
    forward_exec!();

    fn exec(&self, command: Command) -> BoxFuture<'_, Result<Output, Error>> {
        let span = tracing::debug_span!("deadline", provider = self.inner.provider(), operation = "exec", tool = %command.tool());
        Box::pin(
            async move {
                let deadline = deadline_at(self.limit);
                let remote_kill = self.inner.capabilities().remote_kill;
                let taken = Taken::with_grace(self.provider_kill_grace);
                let Some(streaming) = self.inner.streaming() else {
                    // Without a stream there is no partial output to keep.
                    return match until(deadline, &taken, self.inner.exec(command)).await {
                        Some(r) => r,
                        None => Err(deadline_error(
                            self.provider(),
                            self.limit,
                            &Killed::dropped(remote_kill, &taken),
                            PartialOutput::default(),
                        )),
                    };
                };
                let mut stream = self.submit(streaming, command, deadline, &taken).await?;
                let deadline = taken.later(deadline);
                let (mut stdout, mut stderr) = (BytesMut::new(), BytesMut::new());
                loop {
                    match tokio::time::timeout_at(deadline, stream.next()).await {
                        Ok(Some(Ok(Event::Stdout(b)))) => stdout.extend_from_slice(&b),
                        Ok(Some(Ok(Event::Stderr(b)))) => stderr.extend_from_slice(&b),
                        Ok(Some(Ok(Event::Exit(exit)))) => {
                            return Ok(Output::new(stdout.freeze(), stderr.freeze(), exit));
                        }
                        Ok(Some(Err(mut e))) => {
                            if e.partial().is_none() {
                                e = e.with_partial(PartialOutput {
                                    stdout: stdout.freeze(),
                                    stderr: stderr.freeze(),
                                });
                            }
                            return Err(e);
                        }
                        Ok(None) => {
                            return Err(Error::protocol("the stream ended without an exit status")
                                .with_provider(self.provider().to_owned())
                                .with_operation("exec")
                                .with_partial(PartialOutput {
                                    stdout: stdout.freeze(),
                                    stderr: stderr.freeze(),
                                }));
                        }
                        Err(_) => {
                            let dropped = Killed::dropped(remote_kill, &taken);
                            let killed = kill_stream(
                                self.provider().to_owned(),
                                stream,
                                dropped,
                                self.kill_wait,
                            )
                            .await;
                            return Err(deadline_error(
                                self.provider(),
                                self.limit,
                                &killed,
                                PartialOutput {
                                    stdout: stdout.freeze(),
                                    stderr: stderr.freeze(),
                                },
                            ));
                        }
                    }
                }
            }
            .instrument(span),
        )
    }

    /// The inner adapter's, each call bounded by the deadline (a detached command is not killed
    /// by it): see `deadline_processes`.
    fn processes(&self) -> Option<Box<dyn execseam_core::Processes + '_>> {
        let inner = self.inner.processes()?;
        Some(Box::new(deadline_processes::DeadlineProcesses {
            inner,
            provider: self.provider().to_owned(),
            limit: self.limit,
        }))
    }
}

impl<E: Exec> ExecStream for WithDeadline<E> {
    fn exec_stream(&self, command: Command) -> BoxFuture<'_, Result<EventStream, Error>> {
        let span = tracing::debug_span!("deadline", provider = self.inner.provider(), operation = "exec_stream", tool = %command.tool());
        Box::pin(
            async move {
                let inner = self
                    .inner
                    .streaming()
                    .ok_or_else(|| Error::unsupported("the wrapped adapter cannot stream"))?;
                let deadline = deadline_at(self.limit);
                let remote_kill = self.inner.capabilities().remote_kill;
                let taken = Taken::with_grace(self.provider_kill_grace);
                let stream = self.submit(inner, command, deadline, &taken).await?;
                let dropped = Killed::dropped(remote_kill, &taken);
                let deadline = taken.later(deadline);
                let provider = self.provider().to_owned();
                let (limit, kill_wait) = (self.limit, self.kill_wait);
                Ok(stream.wrap(|stream| DeadlineStream {
                    inner: Some(stream),
                    sleep: Box::pin(tokio::time::sleep_until(deadline)),
                    killing: None,
                    provider,
                    limit,
                    kill_wait,
                    dropped,
                }))
            }
            .instrument(span),
        )
    }
}

struct DeadlineStream {
    inner: Option<EventStream>,
    sleep: Pin<Box<Sleep>>,
    /// The kill in flight once the deadline fired.
    killing: Option<BoxFuture<'static, Killed>>,
    provider: String,
    limit: Duration,
    kill_wait: Duration,
    /// What the command becomes if its stream cannot confirm a kill.
    dropped: Killed,
}

impl Stream for DeadlineStream {
    type Item = Result<Event, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if let Some(killing) = this.killing.as_mut() {
            let Poll::Ready(killed) = killing.as_mut().poll(cx) else {
                return Poll::Pending;
            };
            this.killing = None;
            return Poll::Ready(Some(Err(deadline_error(
                &this.provider,
                this.limit,
                &killed,
                PartialOutput::default(),
            ))));
        }
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        if let Poll::Ready(item) = Pin::new(inner).poll_next(cx) {
            if item.is_none() {
                this.inner = None;
            }
            if matches!(item, Some(Ok(Event::Exit(_)))) {
                // Stop watching the clock once the command has ended.
                this.sleep
                    .as_mut()
                    .reset(Instant::now() + Duration::from_secs(86_400 * 365));
            }
            return Poll::Ready(item);
        }
        if this.sleep.as_mut().poll(cx).is_ready() {
            let stream = this.inner.take().expect("checked above");
            this.killing = Some(Box::pin(kill_stream(
                this.provider.clone(),
                stream,
                this.dropped.clone(),
                this.kill_wait,
            )));
            return self.poll_next(cx);
        }
        Poll::Pending
    }
}

// ---------------------------------------------------------------------------------------------
// Output cap

/// Keeps at most `cap` bytes of each stream; see the [module docs](self).
///
/// On the buffered path the dropped byte counts are recorded in [`Output::truncated`]. On the
/// streaming path chunks are cut at the cap (the exit event carries no counts).
#[derive(Clone, Debug)]
pub struct WithOutputCap<E> {
    inner: E,
    cap: u64,
}

impl<E> WithOutputCap<E> {
    /// The wrapped adapter.
    pub fn inner(&self) -> &E {
        &self.inner
    }
}

#[derive(Default)]
struct Capped {
    buf: BytesMut,
    dropped: u64,
}

impl Capped {
    /// Keeps what fits and returns the kept part.
    fn push(&mut self, cap: u64, b: &Bytes) -> Bytes {
        let room = cap.saturating_sub(self.buf.len() as u64) as usize;
        let keep = b.len().min(room);
        self.buf.extend_from_slice(&b[..keep]);
        self.dropped += (b.len() - keep) as u64;
        b.slice(..keep)
    }
}

fn cap_bytes(b: &Bytes, cap: u64) -> (Bytes, u64) {
    let keep = (b.len() as u64).min(cap) as usize;
    (b.slice(..keep), (b.len() - keep) as u64)
}

impl<E: Exec> Exec for WithOutputCap<E> {
    fn exec(&self, command: Command) -> BoxFuture<'_, Result<Output, Error>> {
        let span = tracing::debug_span!("output_cap", provider = self.inner.provider(), operation = "exec", tool = %command.tool());
        Box::pin(
            async move {
                let cap = self.cap;
                let Some(streaming) = self.inner.streaming() else {
                    let cap_partial = |mut e: Error| {
                        if let Some(p) = e.take_partial() {
                            e = e.with_partial(PartialOutput {
                                stdout: cap_bytes(&p.stdout, cap).0,
                                stderr: cap_bytes(&p.stderr, cap).0,
                            });
                        }
                        e
                    };
                    let out = self.inner.exec(command).await.map_err(cap_partial)?;
                    let (stdout, so) = cap_bytes(&out.stdout, cap);
                    let (stderr, se) = cap_bytes(&out.stderr, cap);
                    return Ok(
                        Output::new(stdout, stderr, out.exit).with_truncated(Truncated {
                            stdout: out.truncated.stdout + so,
                            stderr: out.truncated.stderr + se,
                        }),
                    );
                };
                // Stream so that memory stays bounded even when the command writes gigabytes.
                let mut stream = streaming.exec_stream(command).await?;
                let (mut out, mut err) = (Capped::default(), Capped::default());
                loop {
                    match stream.next().await {
                        Some(Ok(Event::Stdout(b))) => {
                            out.push(cap, &b);
                        }
                        Some(Ok(Event::Stderr(b))) => {
                            err.push(cap, &b);
                        }
                        Some(Ok(Event::Exit(exit))) => {
                            return Ok(Output::new(out.buf.freeze(), err.buf.freeze(), exit)
                                .with_truncated(Truncated {
                                    stdout: out.dropped,
                                    stderr: err.dropped,
                                }));
                        }
                        Some(Err(mut e)) => {
                            // Keep what we collected; a partial from a layer below is capped too.
                            let (mut so, mut se) = (out.buf.freeze(), err.buf.freeze());
                            if let Some(p) = e.take_partial()
                                && (p.stdout.len() > so.len() || p.stderr.len() > se.len())
                            {
                                so = cap_bytes(&p.stdout, cap).0;
                                se = cap_bytes(&p.stderr, cap).0;
                            }
                            return Err(e.with_partial(PartialOutput {
                                stdout: so,
                                stderr: se,
                            }));
                        }
                        None => {
                            return Err(Error::protocol("the stream ended without an exit status")
                                .with_provider(self.provider().to_owned())
                                .with_operation("exec")
                                .with_partial(PartialOutput {
                                    stdout: out.buf.freeze(),
                                    stderr: err.buf.freeze(),
                                }));
                        }
                    }
                }
            }
            .instrument(span),
        )
    }

    forward_exec!(processes);
}

impl<E: Exec> ExecStream for WithOutputCap<E> {
    fn exec_stream(&self, command: Command) -> BoxFuture<'_, Result<EventStream, Error>> {
        let span = tracing::debug_span!("output_cap", provider = self.inner.provider(), operation = "exec_stream", tool = %command.tool());
        Box::pin(
            async move {
                let inner = self
                    .inner
                    .streaming()
                    .ok_or_else(|| Error::unsupported("the wrapped adapter cannot stream"))?;
                let stream = inner.exec_stream(command).await?;
                let cap = self.cap;
                Ok(stream.wrap(|inner| CapStream {
                    inner,
                    cap,
                    out: 0,
                    err: 0,
                }))
            }
            .instrument(span),
        )
    }
}

struct CapStream {
    inner: EventStream,
    cap: u64,
    out: u64,
    err: u64,
}

impl Stream for CapStream {
    type Item = Result<Event, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            let this = &mut *self;
            let item = match Pin::new(&mut this.inner).poll_next(cx) {
                Poll::Ready(item) => item,
                Poll::Pending => return Poll::Pending,
            };
            let (seen, b, is_out) = match item {
                Some(Ok(Event::Stdout(b))) => (&mut this.out, b, true),
                Some(Ok(Event::Stderr(b))) => (&mut this.err, b, false),
                other => return Poll::Ready(other),
            };
            let (kept, _) = cap_bytes(&b, this.cap.saturating_sub(*seen));
            *seen += kept.len() as u64;
            if kept.is_empty() {
                continue; // over the cap: keep draining so the command is not blocked
            }
            return Poll::Ready(Some(Ok(if is_out {
                Event::Stdout(kept)
            } else {
                Event::Stderr(kept)
            })));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Retry

/// How [`WithRetry`] backs off.
///
/// `#[non_exhaustive]`: new knobs (a total retry budget, say) are added without breaking anyone;
/// build one with [`RetryPolicy::default`] and the `with_*` setters.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in total, the first included.
    pub max_attempts: usize,
    /// The first delay.
    pub min_delay: Duration,
    /// The largest delay between attempts (a provider's retry-after may exceed it).
    pub max_delay: Duration,
    /// Randomise delays.
    pub jitter: bool,
    /// The longest retry-after the layer sleeps (default 30 s, as Aevatar's Chrono client caps
    /// it). A provider asking for longer gets no retry: the error comes back as
    /// [`ErrorKind::RateLimited`] with the provider's delay in its retry class.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 3,
            min_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(10),
            jitter: true,
            max_retry_after: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// Sets the attempts in total, the first included (at least 1).
    #[must_use]
    pub fn with_max_attempts(mut self, attempts: usize) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// Sets the first delay.
    #[must_use]
    pub fn with_min_delay(mut self, delay: Duration) -> Self {
        self.min_delay = delay;
        self
    }

    /// Sets the largest delay between attempts.
    #[must_use]
    pub fn with_max_delay(mut self, delay: Duration) -> Self {
        self.max_delay = delay;
        self
    }

    /// Randomises delays (default true).
    #[must_use]
    pub fn with_jitter(mut self, jitter: bool) -> Self {
        self.jitter = jitter;
        self
    }

    /// Sets the longest retry-after the layer sleeps (default 30 s).
    #[must_use]
    pub fn with_max_retry_after(mut self, wait: Duration) -> Self {
        self.max_retry_after = wait;
        self
    }
}

/// Retries [`Retry::Safe`] errors only; see the [module docs](self).
#[derive(Clone, Debug)]
pub struct WithRetry<E> {
    inner: E,
    policy: RetryPolicy,
}

/// Logs each retry: the failed attempt's number (1-based), the error's kind and message (never
/// the command), its retry class and the delay before the next attempt.
fn notify(attempt: u32, e: &Error, delay: Duration) {
    tracing::info!(
        attempt,
        kind = e.kind().as_str(),
        retry = e.retry().class(),
        status = ?e.status(),
        delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
        reason = %e,
        "retrying"
    );
}

impl<E> WithRetry<E> {
    /// The wrapped adapter.
    pub fn inner(&self) -> &E {
        &self.inner
    }

    fn backoff(&self) -> ExponentialBuilder {
        let b = ExponentialBuilder::new()
            .with_min_delay(self.policy.min_delay)
            .with_max_delay(self.policy.max_delay)
            .with_max_times(self.policy.max_attempts.saturating_sub(1));
        if self.policy.jitter {
            b.with_jitter()
        } else {
            b
        }
    }
}

/// The span one attempt runs in: `attempt{provider, operation, tool, attempt}` (1-based), the
/// parent of the wrapped adapter's `exec` span, so everything the adapter logs during attempt N
/// carries `attempt=N`.
fn attempt_span(
    provider: &str,
    operation: &'static str,
    tool: &str,
    attempt: u32,
) -> tracing::Span {
    tracing::debug_span!("attempt", provider, operation, tool = %tool, attempt)
}

fn adjust(e: &Error, next: Option<Duration>) -> Option<Duration> {
    // `None` means the attempts are used up; a retry-after never adds attempts.
    next.map(|d| e.retry().after().map_or(d, |after| after.max(d)))
}

impl<E> WithRetry<E> {
    /// Safe, and not asking for a longer wait than the policy allows.
    fn retryable(&self, e: &Error) -> bool {
        e.retry().is_safe()
            && e.retry()
                .after()
                .is_none_or(|after| after <= self.policy.max_retry_after)
    }

    /// An error that asked for a longer wait than the policy allows, as `RateLimited`.
    fn over_cap(&self, e: Error) -> Error {
        let cap = self.policy.max_retry_after;
        let Some(after) = e.retry().after().filter(|after| *after > cap) else {
            return e;
        };
        let mut out = Error::new(
            ErrorKind::RateLimited,
            format!(
                "the provider asked to wait {}s before a retry, more than the retry policy allows ({}s): {}",
                after.as_secs(),
                cap.as_secs(),
                e.message()
            ),
        )
        .with_retry(e.retry())
        .with_provider(e.provider().to_owned())
        .with_operation(e.operation().to_owned());
        if let Some(status) = e.status() {
            out = out.with_status(status);
        }
        if let Some(code) = e.code() {
            out = out.with_code(code.to_owned());
        }
        out.with_source(e)
    }
}

impl<E: Exec> Exec for WithRetry<E> {
    fn exec(&self, command: Command) -> BoxFuture<'_, Result<Output, Error>> {
        let span = tracing::debug_span!("retry", provider = self.inner.provider(), operation = "exec", tool = %command.tool(), attempts = tracing::field::Empty);
        let tool = command.tool().to_string();
        Box::pin(
            async move {
                let n = AtomicU32::new(0);
                let r = (|| {
                    let attempt = n.fetch_add(1, Ordering::Relaxed) + 1;
                    let span = attempt_span(self.inner.provider(), "exec", &tool, attempt);
                    self.inner.exec(command.clone()).instrument(span)
                })
                .retry(self.backoff())
                .sleep(tokio::time::sleep)
                .when(|e: &Error| self.retryable(e))
                .adjust(adjust)
                .notify(|e: &Error, d| notify(n.load(Ordering::Relaxed), e, d))
                .await
                .map_err(|e| self.over_cap(e));
                tracing::Span::current().record("attempts", n.load(Ordering::Relaxed));
                r
            }
            .instrument(span),
        )
    }

    forward_exec!(processes);
}

impl<E: Exec> ExecStream for WithRetry<E> {
    /// Retries opening the stream only; once events flow nothing is re-submitted.
    fn exec_stream(&self, command: Command) -> BoxFuture<'_, Result<EventStream, Error>> {
        let span = tracing::debug_span!("retry", provider = self.inner.provider(), operation = "exec_stream", tool = %command.tool(), attempts = tracing::field::Empty);
        let tool = command.tool().to_string();
        Box::pin(
            async move {
                let inner = self
                    .inner
                    .streaming()
                    .ok_or_else(|| Error::unsupported("the wrapped adapter cannot stream"))?;
                let n = AtomicU32::new(0);
                let r = (|| {
                    let attempt = n.fetch_add(1, Ordering::Relaxed) + 1;
                    let span = attempt_span(self.inner.provider(), "exec_stream", &tool, attempt);
                    inner.exec_stream(command.clone()).instrument(span)
                })
                .retry(self.backoff())
                .sleep(tokio::time::sleep)
                .when(|e: &Error| self.retryable(e))
                .adjust(adjust)
                .notify(|e: &Error, d| notify(n.load(Ordering::Relaxed), e, d))
                .await
                .map_err(|e| self.over_cap(e));
                tracing::Span::current().record("attempts", n.load(Ordering::Relaxed));
                r
            }
            .instrument(span),
        )
    }
}

/// Test-only process handles shared by the crate's tests.
#[cfg(test)]
pub(crate) mod fake_processes {
    use execseam_core::{
        BoxFuture, Error, ProcessCapabilities, ProcessEvent, ProcessHandle, ProcessInfo,
        ProcessRead, ProcessStream, Processes, Signal, StartKey, StartRequest, Started, StdinState,
        StdinWrite, StreamOffsets, Waited,
    };

    /// Process handles that name the sandbox they belong to in every answer; those of
    /// [`STALLED`] never answer, but for a `wait` that honours its window and an `attach` that
    /// gives 5 bytes and then nothing.
    pub(crate) struct FakeProcesses(pub(crate) &'static str);

    /// The sandbox whose provider stalls.
    pub(crate) const STALLED: &str = "stalled";

    impl FakeProcesses {
        fn no<T: Send + 'static>(&self, what: &str) -> BoxFuture<'static, Result<T, Error>> {
            if self.0 == STALLED {
                return Box::pin(std::future::pending());
            }
            let e = Error::protocol(format!("{what} in {}", self.0));
            Box::pin(async move { Err(e) })
        }
    }

    impl Processes for FakeProcesses {
        fn process_capabilities(&self) -> ProcessCapabilities {
            ProcessCapabilities {
                mechanism: execseam_core::Mechanism::Native,
                idempotent_start: false,
                stdin: false,
                signals: &[],
                replay: false,
                retention: None,
                list: false,
                exact_signal_exit: false,
                terminal: false,
                terminal_reattach: false,
            }
        }
        fn handle_for(&self, key: &StartKey) -> ProcessHandle {
            ProcessHandle::new(format!("h-{}-{key}", self.0))
        }
        fn start(&self, _: StartRequest) -> BoxFuture<'_, Result<Started, Error>> {
            self.no("start")
        }
        fn read<'a>(
            &'a self,
            _: &'a ProcessHandle,
            _: StreamOffsets,
        ) -> BoxFuture<'a, Result<ProcessRead, Error>> {
            self.no("read")
        }
        fn attach<'a>(
            &'a self,
            _: &'a ProcessHandle,
            from: StreamOffsets,
        ) -> BoxFuture<'a, Result<ProcessStream<'a>, Error>> {
            if self.0 == STALLED {
                let first = ProcessEvent::Stdout {
                    at: from.stdout,
                    data: bytes::Bytes::from_static(b"hello"),
                };
                // One event, then nothing.
                use futures_util::StreamExt;
                let events = futures_util::stream::once(async { Ok(first) })
                    .chain(futures_util::stream::pending());
                return Box::pin(async move { Ok(ProcessStream::new(events)) });
            }
            let e = Error::protocol(format!("attach in {}", self.0));
            Box::pin(async move { Err(e) })
        }
        fn write_stdin<'a>(
            &'a self,
            _: &'a ProcessHandle,
            _: StdinWrite,
        ) -> BoxFuture<'a, Result<StdinState, Error>> {
            self.no("write_stdin")
        }
        fn signal<'a>(
            &'a self,
            _: &'a ProcessHandle,
            _: Signal,
        ) -> BoxFuture<'a, Result<(), Error>> {
            self.no("signal")
        }
        fn wait<'a>(
            &'a self,
            _: &'a ProcessHandle,
            within: std::time::Duration,
        ) -> BoxFuture<'a, Result<Waited, Error>> {
            if self.0 == STALLED {
                return Box::pin(async move {
                    tokio::time::sleep(within).await;
                    Ok(Waited::Running)
                });
            }
            self.no("wait")
        }
        fn status<'a>(&'a self, _: &'a ProcessHandle) -> BoxFuture<'a, Result<ProcessInfo, Error>> {
            self.no("status")
        }
        fn list(&self) -> BoxFuture<'_, Result<Vec<ProcessInfo>, Error>> {
            self.no("list")
        }
        fn release<'a>(&'a self, _: &'a ProcessHandle) -> BoxFuture<'a, Result<(), Error>> {
            self.no("release")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use execseam_core::{
        Exit, ProcessEvent, Signal, StartKey, StartRequest, StdinWrite, StreamOffsets, Waited,
    };
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    /// A sandbox that counts its ends and has process handles (named for its `processes`).
    struct Kept {
        ownership: Ownership,
        ends: AtomicUsize,
        processes: &'static str,
    }

    impl Exec for Kept {
        fn provider(&self) -> &str {
            "kept"
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities::FULL
        }
        fn exec(&self, _: Command) -> BoxFuture<'_, Result<Output, Error>> {
            Box::pin(async { Ok(Output::new("", "", Exit::Code(0))) })
        }
        fn processes(&self) -> Option<Box<dyn execseam_core::Processes + '_>> {
            Some(Box::new(fake_processes::FakeProcesses(self.processes)))
        }
    }

    impl Sandbox for Kept {
        fn id(&self) -> &str {
            "kept-1"
        }
        fn ownership(&self) -> &Ownership {
            &self.ownership
        }
        fn end(&self) -> BoxFuture<'_, Result<(), Error>> {
            self.ends.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Ok(()) })
        }
    }

    #[tokio::test]
    async fn layers_keep_the_sandbox_and_its_processes() {
        let layered = Kept {
            ownership: Ownership::created(),
            ends: Default::default(),
            processes: "kept",
        }
        .with_retry(RetryPolicy::default())
        .with_deadline(Duration::from_secs(5))
        .with_output_cap(1024);
        assert_eq!(layered.id(), "kept-1");
        assert!(layered.owned());
        assert_eq!(
            layered.processes().map(|p| p
                .handle_for(&StartKey::new("k").unwrap())
                .as_str()
                .to_owned()),
            Some("h-kept-k".to_owned())
        );
        layered.close().await.unwrap();
        layered.close().await.unwrap();
        let inner = layered.inner().inner().inner();
        assert_eq!(
            inner.ends.load(Ordering::SeqCst),
            1,
            "closed once, destroyed once"
        );
        assert!(inner.ownership.is_destroyed());
        // Behind an Arc<dyn Sandbox>, as the CLI holds it.
        let dynamic: Arc<dyn Sandbox> = Arc::new(layered);
        assert_eq!(dynamic.id(), "kept-1");
    }

    /// A scripted adapter: each exec pops the next answer.
    struct Script {
        answers: Mutex<Vec<Result<Output, Error>>>,
        calls: AtomicUsize,
    }

    impl Script {
        fn new(mut answers: Vec<Result<Output, Error>>) -> Script {
            answers.reverse();
            Script {
                answers: Mutex::new(answers),
                calls: AtomicUsize::new(0),
            }
        }
    }

    impl Exec for Script {
        fn provider(&self) -> &str {
            "script"
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities {
                streaming: false,
                ..Capabilities::FULL
            }
        }
        fn exec(&self, _: Command) -> BoxFuture<'_, Result<Output, Error>> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let next = self.answers.lock().unwrap().pop().expect("no more answers");
            Box::pin(async move {
                tracing::debug!("inner call");
                next
            })
        }
    }

    /// A streaming adapter that emits `chunks` then either exits or hangs forever.
    struct Slow {
        chunks: Vec<Event>,
        hang: bool,
        dropped: Arc<AtomicUsize>,
    }

    /// How a [`Killable`] stream's kill behaves.
    #[derive(Clone, Copy)]
    enum KillBehaviour {
        AnsweredAfter(Duration),
        Hangs,
        /// None of the adapter's own: it sent the host's deadline to its provider (which then
        /// stalls) as a per-exec timeout.
        AtProviderTimeout,
    }

    /// A stream that hangs after one chunk and has an awaitable kill.
    struct Killable {
        kill: KillBehaviour,
        killed: Arc<AtomicUsize>,
    }

    impl Exec for Killable {
        fn provider(&self) -> &str {
            "killable"
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities::FULL
        }
        fn exec(&self, c: Command) -> BoxFuture<'_, Result<Output, Error>> {
            Box::pin(async move { self.exec_stream(c).await?.collect().await })
        }
        fn streaming(&self) -> Option<&dyn ExecStream> {
            Some(self)
        }
    }

    impl ExecStream for Killable {
        fn exec_stream(&self, _: Command) -> BoxFuture<'_, Result<EventStream, Error>> {
            let s = SlowStream {
                items: vec![Event::Stdout(Bytes::from_static(b"so far"))].into_iter(),
                hang: true,
                dropped: Default::default(),
            };
            let (kill, killed) = (self.kill, self.killed.clone());
            Box::pin(async move {
                if let KillBehaviour::AtProviderTimeout = kill {
                    let sent = execseam_adapter_kit::deadline::provider_timeout(None);
                    assert!(sent.is_some(), "the adapter sees the host's deadline");
                    return Ok(EventStream::new(s));
                }
                Ok(EventStream::new(s).with_kill(move || async move {
                    match kill {
                        KillBehaviour::AnsweredAfter(d) => tokio::time::sleep(d).await,
                        KillBehaviour::Hangs | KillBehaviour::AtProviderTimeout => {
                            std::future::pending().await
                        }
                    }
                    killed.fetch_add(1, Ordering::SeqCst);
                    Ok(())
                }))
            })
        }
    }

    struct SlowStream {
        items: std::vec::IntoIter<Event>,
        hang: bool,
        dropped: Arc<AtomicUsize>,
    }

    impl Drop for SlowStream {
        fn drop(&mut self) {
            self.dropped.fetch_add(1, Ordering::SeqCst);
        }
    }

    impl Stream for SlowStream {
        type Item = Result<Event, Error>;
        fn poll_next(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Self::Item>> {
            match self.items.next() {
                Some(e) => Poll::Ready(Some(Ok(e))),
                None if self.hang => Poll::Pending,
                None => Poll::Ready(None),
            }
        }
    }

    impl Exec for Slow {
        fn provider(&self) -> &str {
            "slow"
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities::FULL
        }
        fn exec(&self, c: Command) -> BoxFuture<'_, Result<Output, Error>> {
            Box::pin(async move { self.exec_stream(c).await?.collect().await })
        }
        fn streaming(&self) -> Option<&dyn ExecStream> {
            Some(self)
        }
    }

    impl ExecStream for Slow {
        fn exec_stream(&self, _: Command) -> BoxFuture<'_, Result<EventStream, Error>> {
            let s = SlowStream {
                items: self.chunks.clone().into_iter(),
                hang: self.hang,
                dropped: self.dropped.clone(),
            };
            Box::pin(async move { Ok(EventStream::new(s)) })
        }
    }

    fn cmd() -> Command {
        Command::new(["true"]).unwrap()
    }

    fn ok(code: i32) -> Result<Output, Error> {
        Ok(Output::new("", "", Exit::Code(code)))
    }

    /// Keeps every event's fields as text.
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<String>>);

    impl tracing::field::Visit for Capture {
        fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
            self.0.lock().unwrap().push_str(&format!("{f}={v:?} "));
        }
    }

    impl tracing::Subscriber for Capture {
        fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, s: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            s.record(&mut self.clone());
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, e: &tracing::Event<'_>) {
            e.record(&mut self.clone());
            self.0.lock().unwrap().push('\n');
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }

    #[test]
    fn each_retry_is_logged_with_its_reason_and_delay() {
        let cap = Capture::default();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        tracing::subscriber::with_default(cap.clone(), || {
            rt.block_on(async {
                let s =
                    Script::new(vec![
                        Err(Error::new(ErrorKind::Unavailable, "503 from the provider")
                            .with_retry(Retry::Safe {
                                after: Some(Duration::from_millis(1500)),
                            })),
                        ok(0),
                    ]);
                s.with_retry(RetryPolicy::default())
                    .exec(cmd())
                    .await
                    .unwrap();
            })
        });
        let log = cap.0.lock().unwrap().clone();
        let retry: Vec<&str> = log.lines().filter(|l| l.contains("retrying")).collect();
        assert_eq!(retry.len(), 1, "{log}");
        for want in [
            "kind=\"unavailable\"",
            "retry=\"safe\"",
            "delay_ms=1500",
            "503 from the provider",
        ] {
            assert!(retry[0].contains(want), "{want}: {log}");
        }
        assert!(
            log.contains("operation=\"exec\""),
            "the layer's span: {log}"
        );
    }

    /// A `fmt` subscriber's output, span context and close lines included.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn each_attempt_runs_in_a_span_with_its_number() {
        let lines = Lines::default();
        let w = lines.clone();
        let sub = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .without_time()
            .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
            .with_writer(move || w.clone())
            .finish();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        let safe = || {
            Err(Error::new(ErrorKind::Unavailable, "503").with_retry(Retry::Safe { after: None }))
        };
        tracing::subscriber::with_default(sub, || {
            rt.block_on(async {
                Script::new(vec![safe(), safe(), ok(0)])
                    .with_retry(RetryPolicy::default())
                    .exec(cmd())
                    .await
                    .unwrap();
            })
        });
        let log = String::from_utf8(lines.0.lock().unwrap().clone()).unwrap();
        // What the adapter logs during attempt N is inside `attempt{.. attempt=N}`.
        let inner: Vec<&str> = log.lines().filter(|l| l.contains("inner call")).collect();
        assert_eq!(inner.len(), 3, "{log}");
        for (i, l) in inner.iter().enumerate() {
            let want = format!(
                "retry{{provider=\"script\" operation=\"exec\" tool=exec}}:attempt{{provider=\"script\" operation=\"exec\" tool=exec attempt={}}}:",
                i + 1
            );
            assert!(l.contains(&want), "attempt {}: {l}\n{log}", i + 1);
        }
        let retrying: Vec<&str> = log.lines().filter(|l| l.contains("retrying")).collect();
        assert_eq!(retrying.len(), 2, "{log}");
        assert!(
            retrying[0].contains("attempt=1") && retrying[1].contains("attempt=2"),
            "{log}"
        );
        // The retry span closes with the number of attempts made.
        assert!(
            log.lines()
                .any(|l| l.contains("retry{") && l.contains("attempts=3") && l.contains("close")),
            "{log}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn retry_retries_safe_errors_only_and_honours_retry_after() {
        let s = Script::new(vec![
            Err(
                Error::new(ErrorKind::RateLimited, "429").with_retry(Retry::Safe {
                    after: Some(Duration::from_secs(30)),
                }),
            ),
            ok(7),
        ]);
        let r = s.with_retry(RetryPolicy::default());
        let start = Instant::now();
        let out = r.exec(cmd()).await.unwrap();
        assert_eq!(
            out.exit,
            Exit::Code(7),
            "a non-zero exit is returned, not retried"
        );
        assert!(
            start.elapsed() >= Duration::from_secs(30),
            "retry-after honoured"
        );
        assert_eq!(r.inner.calls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn retry_never_resubmits_an_exec_that_may_have_run() {
        for retry in [Retry::Unsafe, Retry::Never] {
            let s = Script::new(vec![
                Err(Error::new(ErrorKind::Internal, "500").with_retry(retry)),
                ok(0),
            ]);
            let r = s.with_retry(RetryPolicy::default());
            let err = r.exec(cmd()).await.unwrap_err();
            assert_eq!(err.kind(), ErrorKind::Internal);
            assert_eq!(r.inner.calls.load(Ordering::SeqCst), 1);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn retry_gives_up_after_max_attempts() {
        let safe = || Err(Error::new(ErrorKind::Unavailable, "503").with_retry(Retry::SAFE));
        let s = Script::new(vec![safe(), safe(), safe(), ok(0)]);
        let r = s.with_retry(RetryPolicy {
            max_attempts: 3,
            ..RetryPolicy::default()
        });
        assert_eq!(
            r.exec(cmd()).await.unwrap_err().kind(),
            ErrorKind::Unavailable
        );
        assert_eq!(r.inner.calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn deadline_returns_timeout_with_partial_output_and_drops_the_stream() {
        let dropped = Arc::new(AtomicUsize::new(0));
        let slow = Slow {
            chunks: vec![
                Event::Stdout(Bytes::from_static(b"start")),
                Event::Stderr(Bytes::from_static(b"warn")),
            ],
            hang: true,
            dropped: dropped.clone(),
        };
        let d = slow.with_deadline(Duration::from_secs(2));
        let err = d.exec(cmd()).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Timeout(Deadline::Command));
        assert_eq!(err.retry(), Retry::Unsafe);
        let p = err.partial().unwrap();
        assert_eq!(
            (&p.stdout[..], &p.stderr[..]),
            (&b"start"[..], &b"warn"[..])
        );
        assert_eq!(
            dropped.load(Ordering::SeqCst),
            1,
            "the stream was dropped (kill)"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn deadline_does_not_fire_for_a_command_that_exits() {
        let slow = Slow {
            chunks: vec![
                Event::Stdout(Bytes::from_static(b"x")),
                Event::Exit(Exit::Code(3)),
            ],
            hang: false,
            dropped: Default::default(),
        };
        let d = slow.with_deadline(Duration::from_secs(2));
        assert_eq!(
            d.exec(cmd()).await.unwrap(),
            Output::new("x", "", Exit::Code(3))
        );
        let mut s = d.streaming().unwrap().exec_stream(cmd()).await.unwrap();
        assert_eq!(
            s.next().await.unwrap().unwrap(),
            Event::Stdout(Bytes::from_static(b"x"))
        );
        assert_eq!(s.next().await.unwrap().unwrap(), Event::Exit(Exit::Code(3)));
        assert!(s.next().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn deadline_on_the_stream_interface_yields_a_timeout_item() {
        let slow = Slow {
            chunks: vec![Event::Stdout(Bytes::from_static(b"x"))],
            hang: true,
            dropped: Default::default(),
        };
        let d = slow.with_deadline(Duration::from_secs(1));
        let mut s = d.streaming().unwrap().exec_stream(cmd()).await.unwrap();
        assert!(matches!(s.next().await, Some(Ok(Event::Stdout(_)))));
        let e = s.next().await.unwrap().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Timeout(Deadline::Command));
        assert!(s.next().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn deadline_without_streaming_still_fires() {
        struct Never;
        impl Exec for Never {
            fn provider(&self) -> &str {
                "never"
            }
            fn capabilities(&self) -> Capabilities {
                Capabilities {
                    streaming: false,
                    remote_kill: false,
                    ..Capabilities::FULL
                }
            }
            fn exec(&self, _: Command) -> BoxFuture<'_, Result<Output, Error>> {
                Box::pin(std::future::pending())
            }
        }
        let err = Never
            .with_deadline(Duration::from_secs(1))
            .exec(cmd())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Timeout(Deadline::Command));
        assert!(err.message().contains("cannot kill"));
    }

    #[tokio::test(start_paused = true)]
    async fn deadline_waits_for_the_kill_and_says_killed_only_when_answered() {
        let killed = Arc::new(AtomicUsize::new(0));
        let k = Killable {
            kill: KillBehaviour::AnsweredAfter(Duration::from_millis(200)),
            killed: killed.clone(),
        };
        let start = Instant::now();
        let err = k
            .with_deadline(Duration::from_secs(2))
            .exec(cmd())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Timeout(Deadline::Command));
        assert_eq!(killed.load(Ordering::SeqCst), 1, "the kill was awaited");
        assert!(err.message().contains("was killed"), "{err}");
        assert_eq!(err.partial().unwrap().stdout.as_ref(), b"so far");
        assert_eq!(start.elapsed(), Duration::from_millis(2200));

        // The stream interface waits for it too.
        let k = Killable {
            kill: KillBehaviour::AnsweredAfter(Duration::from_millis(100)),
            killed: killed.clone(),
        };
        let d = k.with_deadline(Duration::from_secs(1));
        let mut s = d.streaming().unwrap().exec_stream(cmd()).await.unwrap();
        assert!(matches!(s.next().await, Some(Ok(Event::Stdout(_)))));
        let e = s.next().await.unwrap().unwrap_err();
        assert!(e.message().contains("was killed"), "{e}");
        assert_eq!(killed.load(Ordering::SeqCst), 2);
        assert!(s.next().await.is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn an_unanswered_kill_is_waited_for_boundedly_and_not_called_a_kill() {
        let killed = Arc::new(AtomicUsize::new(0));
        let k = Killable {
            kill: KillBehaviour::Hangs,
            killed: killed.clone(),
        };
        let start = Instant::now();
        let err = k
            .with_deadline(Duration::from_secs(2))
            .exec(cmd())
            .await
            .unwrap_err();
        assert_eq!(start.elapsed(), Duration::from_secs(2) + DEFAULT_KILL_WAIT);
        assert!(!err.message().contains("was killed"), "{err}");
        assert!(err.message().contains("not answered"), "{err}");
    }

    /// A kill slower than the layer's wait (E2B, Vercel, Kubernetes kills over 750 ms) goes on
    /// as the kit's drop-time work: a front end's drain waits for it before the runtime ends
    /// (issue 38, D29: through a bare `tokio::spawn`, the drain returned at once and the kill
    /// was dropped with the runtime).
    #[tokio::test(start_paused = true)]
    async fn a_kill_slower_than_the_wait_is_drained_before_exit() {
        let killed = Arc::new(AtomicUsize::new(0));
        let k = Killable {
            kill: KillBehaviour::AnsweredAfter(DEFAULT_KILL_WAIT * 2),
            killed: killed.clone(),
        };
        let err = k
            .with_deadline(Duration::from_secs(1))
            .exec(cmd())
            .await
            .unwrap_err();
        assert!(err.message().contains("not answered"), "{err}");
        assert_eq!(killed.load(Ordering::SeqCst), 0);
        reaper::drain(Duration::from_secs(5)).await;
        assert_eq!(killed.load(Ordering::SeqCst), 1, "the kill was lost");
    }

    /// `call` (the deadline is 400 ms) answered within 10 s of the test's clock, and when.
    async fn answered<T>(call: impl Future<Output = T>) -> (T, Duration) {
        let started = Instant::now();
        let r = tokio::time::timeout(Duration::from_secs(10), call)
            .await
            .expect("the call outlived the host's deadline (the layer passed it through)");
        (r, started.elapsed())
    }

    fn expect_deadline<T: std::fmt::Debug>(r: Result<T, Error>, op: &str, retry: Retry) {
        let e = r.expect_err("a stalled provider's call is an error");
        assert_eq!(e.kind(), ErrorKind::Timeout(Deadline::Request), "{op}: {e}");
        assert_eq!(e.retry(), retry, "{op}");
        assert_eq!(e.operation(), op);
        assert!(e.message().contains("not killed"), "{op}: {e}");
    }

    #[tokio::test(start_paused = true)]
    async fn every_call_on_process_handles_ends_at_the_host_deadline() {
        let limit = Duration::from_millis(400);
        let layered = Kept {
            ownership: Ownership::created(),
            ends: Default::default(),
            processes: fake_processes::STALLED,
        }
        .with_deadline(limit);
        let p = layered.processes().expect("the layer keeps the handles");
        let key = StartKey::new("k").unwrap();
        let h = p.handle_for(&key);
        assert_eq!(h.as_str(), "h-stalled-k");
        let start = StartRequest::new(key, Command::new(["sleep", "60"]).unwrap());

        let (r, took) = answered(p.start(start)).await;
        assert_eq!(took, limit, "at the deadline itself");
        // Not idempotent here: the start may have happened.
        expect_deadline(r, "start", Retry::Unsafe);
        let (r, _) = answered(p.signal(&h, Signal::Term)).await;
        expect_deadline(r, "signal", Retry::Unsafe);
        let safe = Retry::Safe { after: None };
        expect_deadline(answered(p.status(&h)).await.0, "status", safe);
        expect_deadline(answered(p.list()).await.0, "list", safe);
        expect_deadline(
            answered(p.read(&h, StreamOffsets::ZERO)).await.0,
            "read",
            safe,
        );
        expect_deadline(answered(p.release(&h)).await.0, "release", safe);
        let write = StdinWrite {
            at: 0,
            data: Bytes::from_static(b"x"),
            close: false,
        };
        expect_deadline(
            answered(p.write_stdin(&h, write)).await.0,
            "write_stdin",
            safe,
        );

        // A wait longer than the deadline is given what fits (half of it here, the rest left
        // for the answer) and says Running in time; a shorter one is left as asked.
        for (within, took) in [(60_000, 200), (50, 50)] {
            let (r, t) = answered(p.wait(&h, Duration::from_millis(within))).await;
            assert_eq!(r.unwrap(), Waited::Running);
            assert_eq!(t, Duration::from_millis(took), "a wait of {within} ms");
        }

        // Following ends at the deadline, naming where to attach again; the command runs on.
        let (follow, _) = answered(p.attach(&h, StreamOffsets::new(7, 3))).await;
        let mut follow = follow.unwrap();
        let (first, _) = answered(follow.next()).await;
        assert!(matches!(
            first,
            Some(Ok(ProcessEvent::Stdout { at: 7, .. }))
        ));
        let (end, took) = answered(follow.next()).await;
        assert_eq!(took, limit);
        let e = end.unwrap().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Timeout(Deadline::Request));
        assert!(
            e.message()
                .contains("attach again from stdout 12, stderr 3"),
            "{e}"
        );
        assert!(follow.next().await.is_none(), "it ends after its error");
    }

    #[tokio::test(start_paused = true)]
    async fn the_provider_kill_grace_is_the_callers_to_set() {
        let limit = Duration::from_secs(1);
        for (grace, waited) in [
            (None, limit + PROVIDER_KILL_GRACE),
            (Some(Duration::ZERO), limit),
            (Some(Duration::from_secs(3)), limit + Duration::from_secs(3)),
        ] {
            let takes = Killable {
                kill: KillBehaviour::AtProviderTimeout,
                killed: Default::default(),
            };
            let mut layered = takes.with_deadline(limit);
            if let Some(g) = grace {
                layered = layered.provider_kill_grace(g);
            }
            let started = Instant::now();
            let err = layered.exec(cmd()).await.unwrap_err();
            assert_eq!(started.elapsed(), waited, "grace {grace:?}");
            assert!(err.message().contains("per-exec timeout"), "{err}");
            let started = Instant::now();
            let mut stream = layered.exec_stream(cmd()).await.unwrap();
            assert!(matches!(stream.next().await, Some(Ok(Event::Stdout(_)))));
            let err = stream.next().await.unwrap().unwrap_err();
            assert_eq!(started.elapsed(), waited, "streamed, grace {grace:?}");
            assert_eq!(err.kind(), ErrorKind::Timeout(Deadline::Command));
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_too_large_for_the_clock_means_none() {
        let slow = || Slow {
            chunks: vec![Event::Exit(Exit::Code(0))],
            hang: false,
            dropped: Default::default(),
        };
        for limit in [Duration::MAX, Duration::from_secs(u64::MAX / 2)] {
            let d = slow().with_deadline(limit);
            assert_eq!(d.exec(cmd()).await.unwrap().exit, Exit::Code(0));
            let s = d.streaming().unwrap().exec_stream(cmd()).await.unwrap();
            assert_eq!(s.collect().await.unwrap().exit, Exit::Code(0));
        }
        let r = Script::new(vec![ok(0)]).with_deadline(Duration::MAX);
        assert_eq!(r.exec(cmd()).await.unwrap().exit, Exit::Code(0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_after_beyond_the_policy_is_not_slept_but_rate_limited() {
        let day = Duration::from_secs(86_400);
        for kind in [ErrorKind::RateLimited, ErrorKind::Unavailable] {
            let s = Script::new(vec![
                Err(Error::new(kind, "slow down")
                    .with_provider("p")
                    .with_retry(Retry::Safe { after: Some(day) })),
                ok(0),
            ]);
            let r = s.with_retry(RetryPolicy::default());
            let start = Instant::now();
            let err = r.exec(cmd()).await.unwrap_err();
            assert!(start.elapsed() < Duration::from_secs(1));
            assert_eq!(r.inner.calls.load(Ordering::SeqCst), 1);
            assert_eq!(err.kind(), ErrorKind::RateLimited, "{err}");
            assert_eq!(err.retry().after(), Some(day));
            assert!(err.message().contains("86400s"), "{err}");
        }
        // Within a raised cap it is honoured.
        let s = Script::new(vec![
            Err(
                Error::new(ErrorKind::RateLimited, "429").with_retry(Retry::Safe {
                    after: Some(Duration::from_secs(60)),
                }),
            ),
            ok(0),
        ]);
        let r = s.with_retry(RetryPolicy::default().with_max_retry_after(Duration::from_secs(60)));
        let start = Instant::now();
        r.exec(cmd()).await.unwrap();
        assert!(start.elapsed() >= Duration::from_secs(60));
    }

    #[tokio::test]
    async fn output_cap_records_what_it_dropped_on_both_paths() {
        let big = Output::new(vec![b'o'; 100], vec![b'e'; 10], Exit::Code(1));
        let s = Script::new(vec![Ok(big)]);
        let out = s.with_output_cap(40).exec(cmd()).await.unwrap();
        assert_eq!(out.stdout.len(), 40);
        assert_eq!(out.stderr.len(), 10);
        assert_eq!(
            out.truncated,
            Truncated {
                stdout: 60,
                stderr: 0
            }
        );
        assert_eq!(out.exit, Exit::Code(1));

        let slow = Slow {
            chunks: vec![
                Event::Stdout(Bytes::from(vec![b'a'; 30])),
                Event::Stdout(Bytes::from(vec![b'b'; 30])),
                Event::Stderr(Bytes::from(vec![b'c'; 5])),
                Event::Exit(Exit::Code(0)),
            ],
            hang: false,
            dropped: Default::default(),
        };
        let capped = slow.with_output_cap(40);
        let out = capped.exec(cmd()).await.unwrap();
        assert_eq!(
            &out.stdout[..],
            [vec![b'a'; 30], vec![b'b'; 10]].concat().as_slice()
        );
        assert_eq!(
            out.truncated,
            Truncated {
                stdout: 20,
                stderr: 0
            }
        );
        let streamed = capped
            .streaming()
            .unwrap()
            .exec_stream(cmd())
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        assert_eq!(streamed.stdout, out.stdout);
    }
}
