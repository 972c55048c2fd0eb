//! [`WithDeadline`](crate::WithDeadline) over process handles (issue 38, D29).
//!
//! A detached command outlives any one call, so the host's deadline does not kill it (that is
//! [`Processes::signal`]'s job, and a deadline that killed every detached start would make
//! `start` pointless). What the deadline bounds is each **call** on the handles, measured from
//! the call's own start:
//!
//! - Every call (`start`, `read`, `write_stdin`, `signal`, `status`, `list`, `release`,
//!   `resize`, and `attach`'s opening) answers within the deadline, or is
//!   [`Timeout(Request)`](execseam_core::Deadline::Request) at the deadline itself; the
//!   command, if it started, runs on. Its retry class says what a retry does: `start` is
//!   [`Retry::Safe`] where the adapter's starts are idempotent (the same key finds the first
//!   start) and [`Retry::Unsafe`] otherwise, as the contract says; `signal` is `Unsafe` (it may
//!   have been delivered); the others are `Safe` (reads, and a `write_stdin` retried at the
//!   same offset, change nothing twice).
//! - `wait` is given the deadline less the time its answer needs ([`WAIT_ANSWER_RESERVE`], at
//!   most half the deadline), so a provider that answers says
//!   [`Waited::Running`](execseam_core::Waited::Running) within the deadline; one that does not
//!   is `Timeout(Request)` at it.
//! - A followed stream (`attach`) ends at the deadline with `Timeout(Request)` naming the
//!   offsets to attach again from: dropping it detaches, never kills.
//!
//! The deadline is not sent to the provider (the kit's `deadline::within` is not used here): a
//! provider's per-exec timeout would kill the detached command at it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_core::Stream;
use tokio::time::Sleep;

use execseam_core::{
    BoxFuture, Deadline, Error, ErrorKind, ProcessCapabilities, ProcessEvent, ProcessHandle,
    ProcessInfo, ProcessRead, ProcessStream, Processes, Retry, Signal, StartKey, StartRequest,
    Started, StdinState, StdinWrite, StreamOffsets, TerminalSize, Waited,
};

use crate::deadline_at;

/// The most of a deadline that `wait` leaves for its answer to come back (half the deadline
/// when that is less): a provider's wait answers after its window plus one status round trip
/// (the kit's spool polls once more at the window's end), which 1 s covers on every emulator
/// and on the providers' documented latencies.
pub const WAIT_ANSWER_RESERVE: Duration = Duration::from_secs(1);

/// The window a `wait` of `within` is given under a deadline of `limit`.
fn wait_window(within: Duration, limit: Duration) -> Duration {
    within.min(limit - WAIT_ANSWER_RESERVE.min(limit / 2))
}

/// Process handles whose every call is bounded by the host's deadline. See the [module
/// docs](self).
pub(crate) struct DeadlineProcesses<'a> {
    pub(crate) inner: Box<dyn Processes + 'a>,
    pub(crate) provider: String,
    pub(crate) limit: Duration,
}

/// The deadline's error for `operation`, which it ended `after` something.
fn expired(
    provider: &str,
    limit: Duration,
    operation: &'static str,
    retry: Retry,
    after: &str,
) -> Error {
    Error::new(
        ErrorKind::Timeout(Deadline::Request),
        format!(
            "the host's deadline of {}ms expired {after}; a detached command is not killed by it",
            limit.as_millis()
        ),
    )
    .with_retry(retry)
    .with_provider(provider.to_owned())
    .with_operation(operation)
}

impl DeadlineProcesses<'_> {
    /// `call` until the deadline (from now), or its `Timeout(Request)` error of class `retry`.
    async fn bounded<T>(
        &self,
        operation: &'static str,
        retry: Retry,
        call: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        match tokio::time::timeout_at(deadline_at(self.limit), call).await {
            Ok(r) => r,
            Err(_) => Err(expired(
                &self.provider,
                self.limit,
                operation,
                retry,
                &format!("before the provider answered `{operation}`"),
            )),
        }
    }
}

const SAFE: Retry = Retry::Safe { after: None };

/// A method that forwards to the inner handles' own under [`DeadlineProcesses::bounded`].
macro_rules! bounded {
    ($($name:ident($($arg:ident: $ty:ty),*) -> $out:ty, $retry:expr;)*) => {$(
        fn $name<'b>(&'b self, $($arg: $ty),*) -> BoxFuture<'b, Result<$out, Error>> {
            Box::pin(self.bounded(stringify!($name), $retry, self.inner.$name($($arg),*)))
        }
    )*};
}

impl Processes for DeadlineProcesses<'_> {
    fn process_capabilities(&self) -> ProcessCapabilities {
        self.inner.process_capabilities()
    }

    fn handle_for(&self, key: &StartKey) -> ProcessHandle {
        self.inner.handle_for(key)
    }

    fn start(&self, request: StartRequest) -> BoxFuture<'_, Result<Started, Error>> {
        let retry = if self.inner.process_capabilities().idempotent_start {
            SAFE
        } else {
            Retry::Unsafe
        };
        Box::pin(self.bounded("start", retry, self.inner.start(request)))
    }

    fn attach<'b>(
        &'b self,
        handle: &'b ProcessHandle,
        from: StreamOffsets,
    ) -> BoxFuture<'b, Result<ProcessStream<'b>, Error>> {
        Box::pin(async move {
            let at = deadline_at(self.limit);
            let stream = self
                .bounded("attach", SAFE, self.inner.attach(handle, from))
                .await?;
            Ok(ProcessStream::new(DeadlineFollow {
                inner: Some(stream),
                sleep: Box::pin(tokio::time::sleep_until(at)),
                next: from,
                provider: self.provider.clone(),
                limit: self.limit,
            }))
        })
    }

    fn wait<'b>(
        &'b self,
        handle: &'b ProcessHandle,
        within: Duration,
    ) -> BoxFuture<'b, Result<Waited, Error>> {
        let window = wait_window(within, self.limit);
        Box::pin(self.bounded("wait", SAFE, self.inner.wait(handle, window)))
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<ProcessInfo>, Error>> {
        Box::pin(self.bounded("list", SAFE, self.inner.list()))
    }

    bounded! {
        read(handle: &'b ProcessHandle, from: StreamOffsets) -> ProcessRead, SAFE;
        write_stdin(handle: &'b ProcessHandle, write: StdinWrite) -> StdinState, SAFE;
        signal(handle: &'b ProcessHandle, signal: Signal) -> (), Retry::Unsafe;
        status(handle: &'b ProcessHandle) -> ProcessInfo, SAFE;
        release(handle: &'b ProcessHandle) -> (), SAFE;
        resize(handle: &'b ProcessHandle, size: TerminalSize) -> (), SAFE;
    }
}

/// A followed stream that ends at the deadline, naming where to attach again.
struct DeadlineFollow<'a> {
    inner: Option<ProcessStream<'a>>,
    sleep: Pin<Box<Sleep>>,
    /// The offsets after the last event passed on.
    next: StreamOffsets,
    provider: String,
    limit: Duration,
}

impl Stream for DeadlineFollow<'_> {
    type Item = Result<ProcessEvent, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        if let Poll::Ready(item) = Pin::new(inner).poll_next(cx) {
            match &item {
                Some(Ok(ProcessEvent::Stdout { at, data })) => {
                    this.next.stdout = at + data.len() as u64;
                }
                Some(Ok(ProcessEvent::Stderr { at, data })) => {
                    this.next.stderr = at + data.len() as u64;
                }
                _ => {}
            }
            return Poll::Ready(item);
        }
        if this.sleep.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        // Dropping the stream detaches; the command runs on.
        this.inner = None;
        let after = format!(
            "while following the command (attach again from stdout {}, stderr {})",
            this.next.stdout, this.next.stderr
        );
        Poll::Ready(Some(Err(expired(
            &this.provider,
            this.limit,
            "attach",
            SAFE,
            &after,
        ))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_keeps_time_for_its_answer() {
        let s = Duration::from_secs;
        assert_eq!(wait_window(s(60), s(30)), s(29));
        assert_eq!(wait_window(s(10), s(30)), s(10));
        assert_eq!(wait_window(s(60), s(1)), Duration::from_millis(500));
        assert_eq!(wait_window(s(60), Duration::ZERO), Duration::ZERO);
    }
}
