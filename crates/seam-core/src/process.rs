//! Process handles: commands that outlive one call ([`Processes`], discovered through
//! [`Exec::processes`](crate::Exec::processes)).
//!
//! A command is **started detached** under a caller-chosen [`StartKey`] and named by a durable
//! [`ProcessHandle`]; any process holding the handle and a connection to the same sandbox can
//! then [`attach`](Processes::attach) from byte offsets per stream, write its stdin, signal its
//! process group, wait for its exit, list and release it. The rules, which the conformance suite
//! checks against every adapter that declares [`Capabilities::processes`](crate::Capabilities):
//!
//! - **Start once.** Starting twice under one key runs the command once (the second call says
//!   [`Started::fresh`] `false`), also when the first answer was lost. An adapter whose provider
//!   cannot make a start idempotent says so ([`ProcessCapabilities::idempotent_start`]) and a
//!   start that failed after it was sent is then [`Retry::Unsafe`](crate::Retry::Unsafe).
//! - **Exact bytes from any offset.** stdout and stderr are each byte-exact and addressed by
//!   absolute offsets from the command's start; the same offsets give the same bytes from
//!   another process, after a disconnect or after the host restarted. Output the sandbox no
//!   longer keeps is [`ErrorKind::Expired`] carrying the first
//!   offsets still available ([`Error::retained_from`](crate::Error::retained_from)): never a
//!   silent gap. The order **between** the two streams is not promised across a reattach.
//! - **One exit, never guessed.** A followed stream ends with exactly one [`ProcessEvent::Exit`];
//!   an exit recorded while nobody was attached is the same exit. A process whose supervisor is
//!   gone without recording an exit is [`ProcessState::Unknown`], and following it is an error,
//!   never an exit.
//! - **Dropping detaches.** Dropping a [`ProcessStream`] never kills; [`Processes::signal`] does.
//! - **Signals reach the group.** [`Signal`]s go to the command's process group, so its children
//!   get them too.
//! - **Typed handles.** A handle from another sandbox or another adapter, or a garbage token, is
//!   [`ErrorKind::InvalidCommand`] before any I/O; a
//!   well-formed handle with nothing behind it is [`NotFound`](crate::ErrorKind::NotFound).
//!   Neither is ever an exit.
//! - **Terminals.** A start with [`StartRequest::terminal`] runs the command on a terminal of
//!   that size (its `TERM` is the command's `TERM`, else `xterm-256color`), stdin kept open.
//!   A terminal merges what the command writes to stdout and stderr by nature, so its output is
//!   **one stream**, reported as stdout (stderr stays empty): the one exception to the contract's
//!   separate streams. Keystrokes are [`Processes::write_stdin`] (a Ctrl-C byte, `0x03`, is the
//!   terminal's SIGINT to its foreground process group, as typed), [`Processes::resize`]
//!   changes its size (the foreground job gets SIGWINCH), and attach from an offset replays
//!   what the sandbox retains, exactly. Taking a terminal over from another client needs
//!   nothing more: stdin is exactly-once by offset, so a new client reads the accepted count
//!   ([`ProcessInfo::stdin`]) and writes from there, and the old client's next write is a
//!   [`Conflict`](crate::ErrorKind::Conflict). Adapters without terminals
//!   ([`ProcessCapabilities::terminal`] false) refuse such a start with
//!   [`Unsupported`](crate::ErrorKind::Unsupported): never a pipe pretending to be a terminal.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::{Bytes, BytesMut};
use futures_core::Stream;

use crate::command::Command;
use crate::error::{Error, ErrorKind};
use crate::exec::BoxFuture;
use crate::output::{Exit, Output, PartialOutput};

/// A caller-chosen idempotency key for a start: 1 to 64 of `[A-Za-z0-9_-]`, checked when made.
///
/// A start retried under the same key (its answer was lost, the caller crashed) finds the first
/// one and starts nothing. Choose it from something the caller stores before starting (an
/// operation id), or [`StartKey::random`].
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StartKey(String);

impl StartKey {
    /// The longest key.
    pub const MAX_LEN: usize = 64;

    /// A key from `key`, or [`InvalidCommand`](ErrorKind::InvalidCommand) naming what is wrong.
    pub fn new(key: impl Into<String>) -> Result<StartKey, Error> {
        let key = key.into();
        let ok = !key.is_empty()
            && key.len() <= StartKey::MAX_LEN
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        if ok {
            Ok(StartKey(key))
        } else {
            Err(Error::new(
                ErrorKind::InvalidCommand,
                "a start key is 1 to 64 of [A-Za-z0-9_-]",
            ))
        }
    }

    /// A fresh key (`k` and 26 characters from a per-process random seed, the time and a
    /// counter): unique, not secret.
    pub fn random() -> StartKey {
        use std::hash::{BuildHasher, Hasher};
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let mut out = String::from("k");
        for part in 0..2u8 {
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u8(part);
            h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
            h.write_u32(std::process::id());
            h.write_u128(
                SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0),
            );
            let mut v = h.finish();
            for _ in 0..13 {
                out.push(char::from(
                    b"0123456789abcdefghijklmnopqrstuv"[(v & 31) as usize],
                ));
                v >>= 5;
            }
        }
        StartKey(out)
    }

    /// The key.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for StartKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StartKey({:?})", self.0)
    }
}

impl fmt::Display for StartKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A durable, serialisable name for a started command: a short ASCII token chosen by the
/// adapter, meaningful together with the sandbox it was started in (the adapter checks that it
/// belongs to its sandbox before any I/O).
///
/// It carries no secret by contract; its `Debug` still prints only its length.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcessHandle(String);

impl ProcessHandle {
    /// A handle from its token (as stored by [`ProcessHandle::as_str`]).
    pub fn new(token: impl Into<String>) -> ProcessHandle {
        ProcessHandle(token.into())
    }

    /// The token, to store.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ProcessHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ProcessHandle({} bytes)", self.0.len())
    }
}

/// What happens to the command's stdin after the bytes of [`Command::stdin`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StdinMode {
    /// End of input after the command's stdin bytes (the default, as [`Exec::exec`](crate::Exec::exec)).
    #[default]
    Closed,
    /// Kept open for [`Processes::write_stdin`] until a write closes it.
    Open,
}

/// The size of a command's terminal ([`StartRequest::terminal`], [`Processes::resize`]).
/// Adapters without terminals refuse a start that asks for one with
/// [`Unsupported`](ErrorKind::Unsupported).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TerminalSize {
    /// Columns.
    pub cols: u16,
    /// Rows.
    pub rows: u16,
}

/// What to start: the command, under a key, with its stdin mode.
#[non_exhaustive]
#[derive(Clone, Debug)]
pub struct StartRequest {
    /// The idempotency key.
    pub key: StartKey,
    /// The command: argv, workdir, env as for `exec`; its stdin bytes are the first input.
    pub command: Command,
    /// Whether stdin stays open after the command's stdin bytes.
    pub stdin: StdinMode,
    /// A terminal of this size instead of pipes (`None`: pipes). A terminal's stdin is always
    /// open, and its output is one stream, on stdout.
    pub terminal: Option<TerminalSize>,
}

impl StartRequest {
    /// A start of `command` under `key`, stdin closed after the command's bytes, no terminal.
    pub fn new(key: StartKey, command: Command) -> StartRequest {
        StartRequest {
            key,
            command,
            stdin: StdinMode::Closed,
            terminal: None,
        }
    }
}

setters!(StartRequest {
    /// Keeps stdin open for [`Processes::write_stdin`].
    open_stdin() => stdin = StdinMode::Open;
    /// Asks for a terminal of `size` (refused until the adapter has terminals).
    terminal(size: TerminalSize) => terminal = Some(size);
});

/// The answer to a start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Started {
    /// The handle (the same as [`Processes::handle_for`] of the key).
    pub handle: ProcessHandle,
    /// True if this call started it; false if an earlier start under the key had.
    pub fresh: bool,
}

/// Byte offsets into the command's two streams, absolute from its start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct StreamOffsets {
    /// Bytes of stdout.
    pub stdout: u64,
    /// Bytes of stderr.
    pub stderr: u64,
}

impl StreamOffsets {
    /// The start of both streams.
    pub const ZERO: StreamOffsets = StreamOffsets {
        stdout: 0,
        stderr: 0,
    };

    /// Offsets `stdout` and `stderr`.
    pub fn new(stdout: u64, stderr: u64) -> StreamOffsets {
        StreamOffsets { stdout, stderr }
    }
}

/// One event of an attached process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProcessEvent {
    /// stdout bytes; `at` is the offset of `data[0]`.
    Stdout {
        /// Offset of the first byte.
        at: u64,
        /// The bytes.
        data: Bytes,
    },
    /// stderr bytes; `at` is the offset of `data[0]`.
    Stderr {
        /// Offset of the first byte.
        at: u64,
        /// The bytes.
        data: Bytes,
    },
    /// The command ended, after all of its output; always the last item.
    Exit(Exit),
}

/// The events of an attached process: stdout and stderr chunks from the offsets asked for (each
/// stream contiguous), then (when following) exactly one [`ProcessEvent::Exit`]; or an `Err`
/// item, after which it ends. Dropping it detaches: the command keeps running. It may borrow
/// the sandbox handle it came from (`'a`).
pub struct ProcessStream<'a> {
    inner: Pin<Box<dyn Stream<Item = Result<ProcessEvent, Error>> + Send + 'a>>,
    done: bool,
}

impl<'a> ProcessStream<'a> {
    /// Wraps a stream of events.
    pub fn new(
        stream: impl Stream<Item = Result<ProcessEvent, Error>> + Send + 'a,
    ) -> ProcessStream<'a> {
        ProcessStream {
            inner: Box::pin(stream),
            done: false,
        }
    }

    /// The next event, or `None` at the end.
    pub async fn next(&mut self) -> Option<Result<ProcessEvent, Error>> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }

    /// Collects a followed stream into an [`Output`]: a stream that ends without an exit, or
    /// yields anything after it, is a [`Protocol`](ErrorKind::Protocol) error carrying what was
    /// collected, never an `Ok`.
    pub async fn collect(mut self) -> Result<Output, Error> {
        let mut out = BytesMut::new();
        let mut err = BytesMut::new();
        let partial = |out: BytesMut, err: BytesMut| PartialOutput {
            stdout: out.freeze(),
            stderr: err.freeze(),
        };
        loop {
            match self.next().await {
                Some(Ok(ProcessEvent::Stdout { data, .. })) => out.extend_from_slice(&data),
                Some(Ok(ProcessEvent::Stderr { data, .. })) => err.extend_from_slice(&data),
                Some(Ok(ProcessEvent::Exit(exit))) => {
                    if self.next().await.is_some() {
                        return Err(Error::protocol("an event after the exit")
                            .with_partial(partial(out, err)));
                    }
                    return Ok(Output::new(out.freeze(), err.freeze(), exit));
                }
                Some(Err(mut e)) => {
                    if e.partial().is_none() {
                        e = e.with_partial(partial(out, err));
                    }
                    return Err(e);
                }
                None => {
                    return Err(Error::protocol("the stream ended without an exit status")
                        .with_partial(partial(out, err)));
                }
            }
        }
    }
}

impl Stream for ProcessStream<'_> {
    type Item = Result<ProcessEvent, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        let item = self.inner.as_mut().poll_next(cx);
        if matches!(item, Poll::Ready(None)) {
            self.done = true;
        }
        item
    }
}

impl fmt::Debug for ProcessStream<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessStream").finish_non_exhaustive()
    }
}

/// What one non-following read returned ([`Processes::read`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessRead {
    /// Where `stdout` and `stderr` start (the offsets asked for).
    pub from: StreamOffsets,
    /// stdout from `from.stdout`, possibly less than was written (a read is bounded).
    pub stdout: Bytes,
    /// stderr from `from.stderr`, likewise.
    pub stderr: Bytes,
    /// The state when read. `Exited` means the two buffers end at the command's final output
    /// only if [`ProcessRead::next`] equals [`ProcessRead::written`].
    pub state: ProcessState,
    /// Bytes written to each stream so far (for an exited command: its whole output).
    pub written: StreamOffsets,
}

impl ProcessRead {
    /// The offsets to read from next.
    pub fn next(&self) -> StreamOffsets {
        StreamOffsets {
            stdout: self.from.stdout + self.stdout.len() as u64,
            stderr: self.from.stderr + self.stderr.len() as u64,
        }
    }

    /// True when everything is read and the command has exited.
    pub fn is_end(&self) -> bool {
        matches!(self.state, ProcessState::Exited(_)) && self.next() == self.written
    }
}

/// A write to the command's stdin at byte offset `at` (the bytes accepted so far).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StdinWrite {
    /// The offset the data starts at: a retry of a write whose answer was lost carries the same
    /// offset and is then a no-op.
    pub at: u64,
    /// The bytes.
    pub data: Bytes,
    /// Close stdin after these bytes.
    pub close: bool,
}

/// What the command's stdin has accepted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StdinState {
    /// Bytes accepted (the offset of the next write).
    pub accepted: u64,
    /// Stdin is closed.
    pub closed: bool,
}

/// A signal, always sent to the command's whole process group.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Signal {
    /// SIGHUP (1).
    Hup,
    /// SIGINT (2). A command's own background children (`cmd &` in a script) ignore it.
    Int,
    /// SIGQUIT (3).
    Quit,
    /// SIGKILL (9).
    Kill,
    /// SIGUSR1 (10).
    Usr1,
    /// SIGUSR2 (12).
    Usr2,
    /// SIGTERM (15).
    Term,
}

impl Signal {
    /// Every signal, in number order.
    pub const ALL: &'static [Signal] = &[
        Signal::Hup,
        Signal::Int,
        Signal::Quit,
        Signal::Kill,
        Signal::Usr1,
        Signal::Usr2,
        Signal::Term,
    ];

    /// The Linux signal number.
    pub fn number(&self) -> i32 {
        match self {
            Signal::Hup => 1,
            Signal::Int => 2,
            Signal::Quit => 3,
            Signal::Kill => 9,
            Signal::Usr1 => 10,
            Signal::Usr2 => 12,
            Signal::Term => 15,
        }
    }

    /// The name without `SIG` (`TERM`), as `kill -s` takes it.
    pub fn name(&self) -> &'static str {
        match self {
            Signal::Hup => "HUP",
            Signal::Int => "INT",
            Signal::Quit => "QUIT",
            Signal::Kill => "KILL",
            Signal::Usr1 => "USR1",
            Signal::Usr2 => "USR2",
            Signal::Term => "TERM",
        }
    }

    /// The signal named `name` (`TERM`, `SIGTERM`, `term`) or numbered `name` (`15`).
    pub fn parse(name: &str) -> Option<Signal> {
        let upper = name.to_ascii_uppercase();
        let bare = upper.strip_prefix("SIG").unwrap_or(&upper);
        Signal::ALL
            .iter()
            .copied()
            .find(|s| s.name() == bare || s.number().to_string() == bare)
    }
}

/// What [`Processes::wait`] found by its deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Waited {
    /// The command exited.
    Exited(Exit),
    /// Still running at the deadline.
    Running,
}

/// The state of a started command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessState {
    /// Running (or being started).
    Running,
    /// Exited; its exit was recorded.
    Exited(Exit),
    /// Its supervisor is gone and left no exit: the outcome is unknown (it may have run).
    Unknown,
}

/// One started command, as [`Processes::status`] and [`Processes::list`] see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessInfo {
    /// The handle.
    pub handle: ProcessHandle,
    /// The key it was started under.
    pub key: StartKey,
    /// Its state.
    pub state: ProcessState,
    /// Bytes written to each stream so far, where known.
    pub written: Option<StreamOffsets>,
    /// What its stdin has accepted (the offset of the next [`Processes::write_stdin`]) and
    /// whether it is closed, where known.
    pub stdin: Option<StdinState>,
}

/// How an adapter implements process handles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mechanism {
    /// The provider's own process API does everything.
    Native,
    /// The adapter kit's spool (files in the sandbox, written by a supervisor shell) over
    /// ordinary execs.
    Spooled,
    /// The provider starts (and where it can, wakes, feeds, signals) the spool's supervisor
    /// natively; output, exit and offsets come from the spool.
    Hybrid,
}

/// What an adapter's process handles can do: a literal per adapter, read by the conformance
/// suite to decide which process cases apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessCapabilities {
    /// How it is implemented.
    pub mechanism: Mechanism,
    /// A start retried under the same key starts nothing.
    pub idempotent_start: bool,
    /// stdin can be written after the start and closed, exactly once by offset.
    pub stdin: bool,
    /// The signals [`Processes::signal`] sends (to the process group).
    pub signals: &'static [Signal],
    /// Output can be read again from any retained offset (false: only what comes next).
    pub replay: bool,
    /// The most bytes per stream kept before the oldest are dropped (`None`: no limit but the
    /// sandbox's disk).
    pub retention: Option<u64>,
    /// [`Processes::list`] works.
    pub list: bool,
    /// A signal death is reported as [`Exit::Signal`] (false: as the shell's `128 + n` code).
    pub exact_signal_exit: bool,
    /// Terminals ([`StartRequest::terminal`], [`Processes::resize`]); false: a terminal start
    /// is [`Unsupported`](ErrorKind::Unsupported).
    pub terminal: bool,
    /// A terminal can be attached again from another sandbox handle or process (a detached
    /// `execseam shell` comes back with `--attach`). False: only the handle that started it
    /// reaches it, and it ends with that client (Docker's `Tty` exec): a client must not detach.
    pub terminal_reattach: bool,
}

/// Process handles: see the [module docs](self). Discovered through
/// [`Exec::processes`](crate::Exec::processes).
pub trait Processes: Send + Sync {
    /// What these handles can do.
    fn process_capabilities(&self) -> ProcessCapabilities;

    /// The handle a start under `key` gives in this sandbox; no I/O.
    fn handle_for(&self, key: &StartKey) -> ProcessHandle;

    /// Starts the command detached, or finds the start made under the same key.
    fn start(&self, request: StartRequest) -> BoxFuture<'_, Result<Started, Error>>;

    /// Reads once, without waiting: the output from `from` (bounded), the state and the sizes.
    fn read<'a>(
        &'a self,
        handle: &'a ProcessHandle,
        from: StreamOffsets,
    ) -> BoxFuture<'a, Result<ProcessRead, Error>>;

    /// Follows the command from `from`: its output as it is written, then its exit.
    fn attach<'a>(
        &'a self,
        handle: &'a ProcessHandle,
        from: StreamOffsets,
    ) -> BoxFuture<'a, Result<ProcessStream<'a>, Error>>;

    /// Writes to stdin at `write.at`; a write at another offset than the accepted count is
    /// [`Conflict`](ErrorKind::Conflict) (a stale retry whose bytes were already accepted is
    /// `Ok` with the current state).
    fn write_stdin<'a>(
        &'a self,
        handle: &'a ProcessHandle,
        write: StdinWrite,
    ) -> BoxFuture<'a, Result<StdinState, Error>>;

    /// Sends `signal` to the command's process group.
    fn signal<'a>(
        &'a self,
        handle: &'a ProcessHandle,
        signal: Signal,
    ) -> BoxFuture<'a, Result<(), Error>>;

    /// Waits up to `within` for the exit.
    fn wait<'a>(
        &'a self,
        handle: &'a ProcessHandle,
        within: Duration,
    ) -> BoxFuture<'a, Result<Waited, Error>>;

    /// The command's state.
    fn status<'a>(&'a self, handle: &'a ProcessHandle)
    -> BoxFuture<'a, Result<ProcessInfo, Error>>;

    /// Every command started in this sandbox and not released, ordered by key.
    fn list(&self) -> BoxFuture<'_, Result<Vec<ProcessInfo>, Error>>;

    /// Forgets the command (its output and exit); a running one is
    /// [`Conflict`](ErrorKind::Conflict). A handle with nothing left is `Ok`.
    fn release<'a>(&'a self, handle: &'a ProcessHandle) -> BoxFuture<'a, Result<(), Error>>;

    /// Resizes the command's terminal (its foreground job gets SIGWINCH); `Ok` when it has
    /// already exited. A command started without a terminal is
    /// [`InvalidCommand`](ErrorKind::InvalidCommand); adapters without terminals answer
    /// [`Unsupported`](ErrorKind::Unsupported) (the default).
    fn resize<'a>(
        &'a self,
        handle: &'a ProcessHandle,
        size: TerminalSize,
    ) -> BoxFuture<'a, Result<(), Error>> {
        let _ = (handle, size);
        Box::pin(async {
            Err(Error::new(
                ErrorKind::Unsupported,
                "this adapter's process handles have no terminals",
            )
            .with_operation("resize"))
        })
    }
}

forward_pointers!(Processes {
    fn process_capabilities(&self) -> ProcessCapabilities;
    fn handle_for(&self, key: &StartKey) -> ProcessHandle;
    fn start(&self, request: StartRequest) -> BoxFuture<'_, Result<Started, Error>>;
    fn read<'a>(&'a self, handle: &'a ProcessHandle, from: StreamOffsets)
        -> BoxFuture<'a, Result<ProcessRead, Error>>;
    fn attach<'a>(&'a self, handle: &'a ProcessHandle, from: StreamOffsets)
        -> BoxFuture<'a, Result<ProcessStream<'a>, Error>>;
    fn write_stdin<'a>(&'a self, handle: &'a ProcessHandle, write: StdinWrite)
        -> BoxFuture<'a, Result<StdinState, Error>>;
    fn signal<'a>(&'a self, handle: &'a ProcessHandle, signal: Signal)
        -> BoxFuture<'a, Result<(), Error>>;
    fn wait<'a>(&'a self, handle: &'a ProcessHandle, within: Duration)
        -> BoxFuture<'a, Result<Waited, Error>>;
    fn status<'a>(&'a self, handle: &'a ProcessHandle) -> BoxFuture<'a, Result<ProcessInfo, Error>>;
    fn list(&self) -> BoxFuture<'_, Result<Vec<ProcessInfo>, Error>>;
    fn release<'a>(&'a self, handle: &'a ProcessHandle) -> BoxFuture<'a, Result<(), Error>>;
    fn resize<'a>(&'a self, handle: &'a ProcessHandle, size: TerminalSize)
        -> BoxFuture<'a, Result<(), Error>>;
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_checked() {
        assert!(StartKey::new("op-12_AB").is_ok());
        for bad in ["", "a/b", "a b", "ä", &"x".repeat(65), "..", "a\0"] {
            let e = StartKey::new(bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidCommand, "{bad:?}");
        }
        let a = StartKey::random();
        let b = StartKey::random();
        assert_ne!(a, b);
        assert_eq!(a.as_str().len(), 27);
        assert!(StartKey::new(a.as_str()).is_ok());
    }

    #[test]
    fn signals_parse_by_name_and_number() {
        assert_eq!(Signal::parse("TERM"), Some(Signal::Term));
        assert_eq!(Signal::parse("sigkill"), Some(Signal::Kill));
        assert_eq!(Signal::parse("2"), Some(Signal::Int));
        assert_eq!(Signal::parse("WINCH"), None);
        for s in Signal::ALL {
            assert_eq!(Signal::parse(s.name()), Some(*s));
        }
    }

    #[test]
    fn a_read_knows_its_end() {
        let r = ProcessRead {
            from: StreamOffsets::new(2, 0),
            stdout: Bytes::from_static(b"abc"),
            stderr: Bytes::new(),
            state: ProcessState::Exited(Exit::Code(0)),
            written: StreamOffsets::new(5, 0),
        };
        assert_eq!(r.next(), StreamOffsets::new(5, 0));
        assert!(r.is_end());
        let more = ProcessRead {
            written: StreamOffsets::new(6, 0),
            ..r.clone()
        };
        assert!(!more.is_end());
    }

    #[test]
    fn a_handle_round_trips_and_its_debug_prints_no_token() {
        let h = ProcessHandle::new("e2b:execseam-secretish");
        assert_eq!(ProcessHandle::new(h.as_str()), h);
        assert_eq!(format!("{h:?}"), "ProcessHandle(22 bytes)");
    }

    #[test]
    fn collect_needs_the_exit() {
        struct Iter(std::vec::IntoIter<Result<ProcessEvent, Error>>);
        impl Stream for Iter {
            type Item = Result<ProcessEvent, Error>;
            fn poll_next(
                mut self: Pin<&mut Self>,
                _: &mut Context<'_>,
            ) -> Poll<Option<Self::Item>> {
                Poll::Ready(self.0.next())
            }
        }
        let block = |s: ProcessStream<'static>| {
            tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap()
                .block_on(s.collect())
        };
        let out = |at, d: &'static [u8]| {
            Ok(ProcessEvent::Stdout {
                at,
                data: Bytes::from_static(d),
            })
        };
        let ok = block(ProcessStream::new(Iter(
            vec![
                out(0, b"a"),
                out(1, b"b"),
                Ok(ProcessEvent::Exit(Exit::Code(3))),
            ]
            .into_iter(),
        )))
        .unwrap();
        assert_eq!(ok, Output::new("ab", "", Exit::Code(3)));
        let cut = block(ProcessStream::new(Iter(vec![out(0, b"a")].into_iter()))).unwrap_err();
        assert_eq!(cut.kind(), ErrorKind::Protocol);
        assert_eq!(cut.partial().unwrap().stdout.as_ref(), b"a");
    }
}
