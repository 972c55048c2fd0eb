use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use futures_core::Stream;

use crate::capabilities::Capabilities;
use crate::command::Command;
use crate::error::Error;
use crate::output::{Exit, Output, PartialOutput};
use crate::process::Processes;

/// A boxed, `Send` future: what [`Exec`] methods return, so the trait stays usable as `dyn Exec`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Runs a [`Command`] in a sandbox.
///
/// The one required method is [`exec`](Exec::exec): `Ok(Output)` for every command that ran to an
/// exit, whatever its status; `Err(Error)` for infrastructure failures only.
///
/// Dropping the returned future abandons the command: adapters that declare
/// [`Capabilities::remote_kill`] then kill it in the sandbox (best effort, asynchronously for
/// remote backends).
pub trait Exec: Send + Sync {
    /// The provider's short name (`"local"`, `"fly"`, …).
    fn provider(&self) -> &str;

    /// What this adapter can do.
    fn capabilities(&self) -> Capabilities;

    /// Runs the command to its exit and returns everything it wrote.
    fn exec(&self, command: Command) -> BoxFuture<'_, Result<Output, Error>>;

    /// The streaming interface, if this backend has one (Fly Machines does not, and that is legal).
    fn streaming(&self) -> Option<&dyn ExecStream> {
        None
    }

    /// Process handles, if this backend can start a command that outlives the call (and this
    /// process) and attach to it again later: see [`Processes`]. The adapter kit's spool gives
    /// them to any backend that runs `sh`; `None` is legal.
    fn processes(&self) -> Option<Box<dyn Processes + '_>> {
        None
    }
}

/// The optional streaming interface, discovered at runtime through [`Exec::streaming`].
pub trait ExecStream: Send + Sync {
    /// Starts the command and returns its events: stdout and stderr chunks in the order the backend
    /// delivered them, then exactly one [`Event::Exit`]; or an `Err` item, after which the stream
    /// ends. The chunks concatenate to what [`Exec::exec`] returns. Dropping the stream before the
    /// exit kills the command where the backend can.
    fn exec_stream(&self, command: Command) -> BoxFuture<'_, Result<EventStream, Error>>;
}

/// One event of a streamed command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A chunk of stdout.
    Stdout(Bytes),
    /// A chunk of stderr.
    Stderr(Bytes),
    /// The command ended; always the last item.
    Exit(Exit),
}

type KillFn = Box<dyn FnOnce() -> BoxFuture<'static, Result<(), Error>> + Send>;

/// The events of a streamed command; see [`ExecStream::exec_stream`].
///
/// Dropping it abandons the command (adapters with
/// [`remote_kill`](Capabilities::remote_kill) then kill it in the background, unconfirmed);
/// [`EventStream::kill`] abandons it and waits for the adapter's kill to be answered, where the
/// adapter provides one ([`EventStream::with_kill`]).
pub struct EventStream {
    inner: Pin<Box<dyn Stream<Item = Result<Event, Error>> + Send + 'static>>,
    done: bool,
    exited: bool,
    // Shared, so a layer that wraps the stream and the wrapper's owner both reach it; whoever
    // kills first takes it.
    kill: Option<Arc<Mutex<Option<KillFn>>>>,
}

impl EventStream {
    /// Wraps a stream of events.
    pub fn new(stream: impl Stream<Item = Result<Event, Error>> + Send + 'static) -> EventStream {
        EventStream {
            inner: Box::pin(stream),
            done: false,
            exited: false,
            kill: None,
        }
    }

    /// Gives the stream an awaitable kill: `kill()` is called at most once, by
    /// [`EventStream::kill`], and its future sends the kill and resolves when the backend has
    /// answered. Calling `kill()` must also stop the adapter's drop-time kill from being sent a
    /// second time.
    #[must_use]
    pub fn with_kill<F, Fut>(mut self, kill: F) -> EventStream
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), Error>> + Send + 'static,
    {
        let f: KillFn = Box::new(move || Box::pin(kill()));
        self.kill = Some(Arc::new(Mutex::new(Some(f))));
        self
    }

    /// Wraps this stream in another (a layer's), keeping its kill: `wrap(|s| MyStream { s })`.
    pub fn wrap<S>(self, f: impl FnOnce(EventStream) -> S) -> EventStream
    where
        S: Stream<Item = Result<Event, Error>> + Send + 'static,
    {
        let kill = self.kill.clone();
        let mut outer = EventStream::new(f(self));
        outer.kill = kill;
        outer
    }

    /// True if [`EventStream::kill`] can wait for a confirmed kill.
    pub fn can_confirm_kill(&self) -> bool {
        self.exited
            || self
                .kill
                .as_ref()
                .is_some_and(|k| k.lock().map(|k| k.is_some()).unwrap_or(false))
    }

    /// Abandons the command and kills it, waiting for the adapter's kill to be answered.
    ///
    /// `Ok(true)`: the command is known not to run any more (the kill was answered, or the
    /// exit was already seen). `Ok(false)`: this stream has no awaitable kill, so dropping it
    /// was the only signal (see [`Capabilities::remote_kill`]). `Err`: the kill failed.
    /// Callers bound the wait themselves (`tokio::time::timeout`).
    pub async fn kill(mut self) -> Result<bool, Error> {
        if self.exited {
            return Ok(true);
        }
        let kill = self
            .kill
            .take()
            .and_then(|k| k.lock().ok().and_then(|mut k| k.take()));
        let Some(kill) = kill else {
            return Ok(false);
        };
        let sent = kill();
        drop(self);
        sent.await.map(|()| true)
    }

    /// The next event, or `None` at the end.
    pub async fn next(&mut self) -> Option<Result<Event, Error>> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }

    /// Collects the stream into an [`Output`], enforcing the stream contract: a stream that ends
    /// without an exit, or yields anything after it, is a [`Protocol`](crate::ErrorKind::Protocol)
    /// error carrying what was collected, never an `Ok`.
    pub async fn collect(mut self) -> Result<Output, Error> {
        let mut stdout = BytesMut::new();
        let mut stderr = BytesMut::new();
        loop {
            match self.next().await {
                Some(Ok(Event::Stdout(b))) => stdout.extend_from_slice(&b),
                Some(Ok(Event::Stderr(b))) => stderr.extend_from_slice(&b),
                Some(Ok(Event::Exit(exit))) => {
                    if let Some(extra) = self.next().await {
                        let what = match extra {
                            Ok(e) => format!("{e:?}"),
                            Err(e) => e.to_string(),
                        };
                        return Err(Error::protocol(format!("event after the exit: {what}"))
                            .with_partial(PartialOutput {
                                stdout: stdout.freeze(),
                                stderr: stderr.freeze(),
                            }));
                    }
                    return Ok(Output::new(stdout.freeze(), stderr.freeze(), exit));
                }
                Some(Err(mut e)) => {
                    if e.partial().is_none() {
                        e = e.with_partial(PartialOutput {
                            stdout: stdout.freeze(),
                            stderr: stderr.freeze(),
                        });
                    }
                    return Err(e);
                }
                None => {
                    return Err(Error::protocol("the stream ended without an exit status")
                        .with_partial(PartialOutput {
                            stdout: stdout.freeze(),
                            stderr: stderr.freeze(),
                        }));
                }
            }
        }
    }
}

impl Stream for EventStream {
    type Item = Result<Event, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        let item = self.inner.as_mut().poll_next(cx);
        match &item {
            Poll::Ready(None) => self.done = true,
            Poll::Ready(Some(Ok(Event::Exit(_)))) => self.exited = true,
            _ => {}
        }
        item
    }
}

impl fmt::Debug for EventStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventStream").finish_non_exhaustive()
    }
}

forward_pointers!(Exec {
    fn provider(&self) -> &str;
    fn capabilities(&self) -> Capabilities;
    fn exec(&self, command: Command) -> BoxFuture<'_, Result<Output, Error>>;
    fn streaming(&self) -> Option<&dyn ExecStream>;
    fn processes(&self) -> Option<Box<dyn Processes + '_>>;
});

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    fn stream(items: Vec<Result<Event, Error>>) -> EventStream {
        struct Iter(std::vec::IntoIter<Result<Event, Error>>);
        impl Stream for Iter {
            type Item = Result<Event, Error>;
            fn poll_next(
                mut self: Pin<&mut Self>,
                _: &mut Context<'_>,
            ) -> Poll<Option<Self::Item>> {
                Poll::Ready(self.0.next())
            }
        }
        EventStream::new(Iter(items.into_iter()))
    }

    fn block<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
    }

    #[test]
    fn collect_concatenates_in_order() {
        let out = block(
            stream(vec![
                Ok(Event::Stdout(Bytes::from_static(b"a"))),
                Ok(Event::Stderr(Bytes::from_static(b"x"))),
                Ok(Event::Stdout(Bytes::from_static(b"b"))),
                Ok(Event::Exit(Exit::Code(4))),
            ])
            .collect(),
        )
        .unwrap();
        assert_eq!(out, Output::new("ab", "x", Exit::Code(4)));
    }

    #[test]
    fn a_stream_without_exit_is_a_protocol_error_with_partial_output() {
        let err = block(stream(vec![Ok(Event::Stdout(Bytes::from_static(b"so far")))]).collect())
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Protocol);
        assert_eq!(err.partial().unwrap().stdout.as_ref(), b"so far");
    }

    #[test]
    fn anything_after_the_exit_is_a_protocol_error() {
        let err = block(
            stream(vec![
                Ok(Event::Exit(Exit::Code(0))),
                Ok(Event::Exit(Exit::Code(1))),
            ])
            .collect(),
        )
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Protocol);
    }

    #[test]
    fn an_error_item_keeps_what_came_before() {
        let err = block(
            stream(vec![
                Ok(Event::Stderr(Bytes::from_static(b"e"))),
                Err(Error::new(ErrorKind::Unavailable, "lost")),
            ])
            .collect(),
        )
        .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable);
        assert_eq!(err.partial().unwrap().stderr.as_ref(), b"e");
    }

    #[test]
    fn kill_waits_for_the_adapters_kill_and_survives_wrapping() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let kills = Arc::new(AtomicUsize::new(0));
        let k = kills.clone();
        let s = stream(vec![Ok(Event::Stdout(Bytes::from_static(b"a")))]).with_kill(
            move || async move {
                k.fetch_add(1, Ordering::SeqCst);
                Ok(())
            },
        );
        assert!(s.can_confirm_kill());
        let wrapped = s.wrap(|inner| inner);
        assert!(block(wrapped.kill()).unwrap());
        assert_eq!(kills.load(Ordering::SeqCst), 1);

        // No kill: dropping is all there is.
        assert!(!block(stream(vec![]).kill()).unwrap());
        // After the exit there is nothing to kill.
        let mut done = stream(vec![Ok(Event::Exit(Exit::Code(0)))])
            .with_kill(|| async { Err(Error::new(ErrorKind::Internal, "must not be called")) });
        assert!(block(done.next()).is_some());
        assert!(block(done.kill()).unwrap());
    }

    #[test]
    fn exec_is_dyn_compatible_through_every_pointer() {
        struct Nop;
        impl Exec for Nop {
            fn provider(&self) -> &str {
                "nop"
            }
            fn capabilities(&self) -> Capabilities {
                Capabilities::FULL
            }
            fn exec(&self, _: Command) -> BoxFuture<'_, Result<Output, Error>> {
                Box::pin(async { Ok(Output::new("", "", Exit::Code(0))) })
            }
        }
        let a: Arc<dyn Exec> = Arc::new(Nop);
        let b: Box<dyn Exec> = Box::new(Nop);
        let c: &dyn Exec = &Nop;
        for e in [&a as &dyn Exec, &b as &dyn Exec, &c as &dyn Exec] {
            assert_eq!(e.provider(), "nop");
            assert!(e.streaming().is_none());
            assert!(e.processes().is_none());
        }
    }
}
