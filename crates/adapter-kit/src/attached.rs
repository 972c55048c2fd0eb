//! Terminals on a provider's own TTY exec, held by this client: written once for every
//! provider whose exec allocates a pseudo-terminal but cannot be attached to again (Docker's
//! `Tty` exec: no exec attach, and podman KILLs an attached exec when its client goes;
//! Kubernetes' `tty=true` exec).
//!
//! [`Attached`] implements [`Processes`]: a start with [`StartRequest::terminal`] opens the
//! provider's TTY exec ([`OpenTerminal`]) and keeps it in this client's [`Terminals`]; every
//! other handle is the [`Spool`]'s. What a terminal handle promises, exactly:
//!
//! - Its output (one stream, the terminal's) is kept in this client's memory: `read` and
//!   `attach` replay it from any offset, byte-exact, for as long as the sandbox handle that
//!   started it lives. Another client (another process, a handle connected later) does not
//!   find it: [`NotFound`](ErrorKind::NotFound), saying why. When this client goes, the
//!   provider ends or orphans the command (podman kills it; Docker lets it run unattached).
//! - Keystrokes are stdin writes at the accepted count, exactly once ([`Conflict`](ErrorKind::Conflict)
//!   at another offset); `0x03` is the line discipline's SIGINT to the foreground group.
//! - Resize is the provider's ([`TerminalControl::resize`]); signals go to the command's
//!   process group (its session, led by the wrapper's pid, which the wrapper records in the
//!   sandbox) through one ordinary exec, or are refused ([`Unsupported`](ErrorKind::Unsupported),
//!   before any request) where the provider says no group is the command's
//!   ([`TerminalControl::signals`]).
//! - The exit is the provider's status once the output ended ([`TerminalControl::exit`]); a
//!   broken connection is the typed error the provider gave, never an exit.
//!
//! Which of the two a provider's terminals use is the user's choice, one enum for every adapter
//! that has a TTY exec: [`TerminalMode`] (the spool's recorder, reattachable from anywhere; this
//! module's terminals; or the recorder where the sandbox has `script(1)`).
//!
//! The command runs under a small wrapper inside the terminal: it records its pid, sets the
//! size (`stty rows R cols C`: the provider's terminal may start at 0x0 until its first
//! resize) and `exec`s the command, with `TERM` `xterm-256color` unless the command sets one.

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use execseam_core::{
    BoxFuture, Command, Error, ErrorKind, Exec, Exit, ProcessCapabilities, ProcessEvent,
    ProcessHandle, ProcessInfo, ProcessRead, ProcessState, ProcessStream, Processes, Retry, Signal,
    StartRequest, Started, StdinState, StdinWrite, StreamOffsets, TerminalSize, Waited,
};
use futures_util::{Stream, StreamExt};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::watch;

use crate::spool::{DEFAULT_READ_MAX, Spool};

/// Where the wrappers record their pids (in the sandbox).
pub const PID_ROOT: &str = "/tmp/.execseam/t";

/// The output of a provider's TTY exec: the terminal's bytes, then the end (`None`) or the
/// error that cut it.
pub type TerminalOutput = Pin<Box<dyn Stream<Item = Result<Bytes, Error>> + Send>>;

/// The terminal's input: keystrokes.
pub type TerminalInput = Pin<Box<dyn AsyncWrite + Send>>;

/// What a provider does to a terminal it opened.
pub trait TerminalControl: Send + Sync {
    /// Sets the terminal's size (the kernel sends SIGWINCH to its foreground group).
    fn resize(&self, size: TerminalSize) -> BoxFuture<'_, Result<(), Error>>;

    /// The command's exit, asked once its output ended.
    fn exit(&self) -> BoxFuture<'_, Result<Exit, Error>>;

    /// Whether the wrapper's pid leads the command's process group, so that a signal can reach
    /// the command; where it does not (the provider runs the command under a script of its
    /// own), `signal` refuses with [`Unsupported`](ErrorKind::Unsupported) before any request.
    fn signals(&self) -> bool {
        true
    }
}

/// Where a provider's reader of a TTY exec puts the exit it saw, for
/// [`TerminalControl::exit`] to take once the output ended; clones share it.
#[derive(Clone, Debug, Default)]
pub struct ExitSlot(Arc<Mutex<Option<Exit>>>);

impl ExitSlot {
    /// The command's exit, seen.
    pub fn set(&self, exit: Exit) {
        *self.0.lock().expect("terminal exit") = Some(exit);
    }

    /// The exit seen, or `missing()` (the output ended without one).
    pub fn take_or(
        &self,
        missing: impl FnOnce() -> Error,
    ) -> BoxFuture<'static, Result<Exit, Error>> {
        let exit = self
            .0
            .lock()
            .expect("terminal exit")
            .take()
            .ok_or_else(missing);
        Box::pin(std::future::ready(exit))
    }
}

/// A provider reader's channel as a terminal's output.
pub fn output_of(rx: tokio::sync::mpsc::Receiver<Result<Bytes, Error>>) -> TerminalOutput {
    Box::pin(futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    }))
}

/// A TTY exec the provider opened.
pub struct Opened {
    /// Its output.
    pub output: TerminalOutput,
    /// Its input.
    pub input: TerminalInput,
    /// Resize and exit.
    pub control: Box<dyn TerminalControl>,
}

/// A provider's TTY exec.
pub trait OpenTerminal: Send + Sync {
    /// Runs `command` (argv already wrapped; its own env and workdir to honour) on a new
    /// pseudo-terminal of `size`, attached.
    fn open(&self, command: Command, size: TerminalSize) -> BoxFuture<'_, Result<Opened, Error>>;
}

/// One terminal this client holds.
struct Live {
    key: execseam_core::StartKey,
    state: Mutex<LiveState>,
    changed: watch::Sender<u64>,
    input: tokio::sync::Mutex<TerminalInput>,
    control: Arc<dyn TerminalControl>,
    pid_file: String,
    pump: tokio::task::AbortHandle,
}

/// The same error again, for every reader of a terminal's end.
fn again(e: &Error) -> Error {
    let mut copy = Error::new(e.kind(), e.message().to_owned())
        .with_retry(e.retry())
        .with_provider(e.provider().to_owned())
        .with_operation(e.operation().to_owned());
    if let Some(status) = e.status() {
        copy = copy.with_status(status);
    }
    copy
}

fn end_of(end: &Result<Exit, Error>) -> Result<Exit, Error> {
    end.as_ref().map(|e| *e).map_err(again)
}

#[derive(Default)]
struct LiveState {
    out: Vec<u8>,
    end: Option<Result<Exit, Error>>,
    stdin: StdinState,
}

impl Drop for Live {
    fn drop(&mut self) {
        self.pump.abort();
    }
}

impl Live {
    fn process_state(&self) -> ProcessState {
        match &self.state.lock().expect("terminal state").end {
            None => ProcessState::Running,
            Some(Ok(exit)) => ProcessState::Exited(*exit),
            Some(Err(_)) => ProcessState::Unknown,
        }
    }

    fn info(&self, handle: &ProcessHandle) -> ProcessInfo {
        let state = self.process_state();
        let s = self.state.lock().expect("terminal state");
        ProcessInfo {
            handle: handle.clone(),
            key: self.key.clone(),
            state,
            written: Some(StreamOffsets::new(s.out.len() as u64, 0)),
            stdin: Some(s.stdin),
        }
    }
}

/// The terminals a sandbox handle holds; keep one per sandbox handle (its clones share it).
#[derive(Default)]
pub struct Terminals {
    live: Mutex<BTreeMap<String, Arc<Live>>>,
    starting: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Terminals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.live.lock().map(|m| m.len()).unwrap_or(0);
        f.debug_struct("Terminals").field("held", &n).finish()
    }
}

impl Terminals {
    fn get(&self, handle: &ProcessHandle) -> Option<Arc<Live>> {
        self.live
            .lock()
            .expect("terminals")
            .get(handle.as_str())
            .cloned()
    }
}

/// The wrapper inside the terminal: `$1` the pid file, `$2` rows, `$3` columns, then argv.
const WRAPPER: &str = r#"f=$1 r=$2 c=$3; shift 3
mkdir -p "${f%/*}" && printf '%s\n' "$$" >"$f.tmp" && mv -f "$f.tmp" "$f" || exit 125
stty rows "$r" cols "$c" 2>/dev/null
[ -n "${TERM:-}" ] || { TERM=xterm-256color; export TERM; }
exec "$@""#;

/// A signal to the group the pid file names (BusyBox's `kill` refuses `--`: the form is chosen
/// by a harmless `kill -s 0` first, as the spool does): prints `gone` when the program has ended.
/// A terminal just opened may not have written its pid yet: waited for (2 s), then exit 3, so a
/// signal is never reported sent when nothing was signalled.
const SIGNAL: &str = r#"i=0; while [ ! -s "$1" ] && [ "$i" -lt 40 ]; do sleep 0.05; i=$((i+1)); done
p=$(cat "$1" 2>/dev/null) && [ -n "$p" ] || exit 3
kill -0 "$p" 2>/dev/null || { echo gone; exit 0; }
if kill -s 0 -- "$$" 2>/dev/null; then kill -s "$2" -- "-$p"; else kill -s "$2" "-$p"; fi"#;

/// Reads the env file `$1` (one [`env_line`](crate::degrade::env_line)), removes it, exports
/// its entries (in a function, whose positional parameters the line sets), then runs the rest
/// of argv.
const ENV_FROM_FILE: &str = r#"f=$1; shift
e() { IFS= read -r l <"$f" || exit 125; rm -f -- "$f"; eval "$l"; for kv; do export "$kv"; done; }
e
exec "$@""#;

/// For a TTY exec that cannot carry an environment privately (its request is logged, or it has
/// none): stores `env` in a 0600 file under `temp_dir` by an ordinary exec of `exec` (the values
/// ride on its stdin), and answers the argv prefix that reads the file, removes it and exports
/// the entries before it runs the rest of argv. Never type the values into the terminal: it
/// echoes them.
pub async fn env_through_file(
    exec: &dyn Exec,
    env: &BTreeMap<String, String>,
    temp_dir: &str,
) -> Result<Vec<String>, Error> {
    let file = crate::degrade::temp_path(temp_dir);
    let store = Command::builder(["sh", "-c", "umask 077 && cat >\"$1\"", "sh", &file])
        .stdin(crate::degrade::env_line(env))
        .build()?;
    let stored = exec.exec(store).await?;
    if stored.exit != Exit::Code(0) {
        return Err(Error::new(
            ErrorKind::Internal,
            format!(
                "storing the terminal's environment under {temp_dir} failed: {}",
                String::from_utf8_lossy(&stored.stderr).trim()
            ),
        )
        .with_retry(Retry::Never)
        .with_provider(exec.provider().to_owned())
        .with_operation("terminal"));
    }
    Ok(vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        ENV_FROM_FILE.to_owned(),
        "sh".to_owned(),
        file,
    ])
}

/// Where a provider's terminals run: the one choice every adapter with its own TTY exec offers
/// (`EXECSEAM_<PROVIDER>_TERMINAL`: `recorder`, `auto`, `attached`), read by
/// [`TerminalMode::from_vars`] and turned into process handles by [`TerminalMode::processes`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TerminalMode {
    /// The spool's recorder (`script(1)` in the sandbox, its output in files): a terminal
    /// outlives this client, any handle (another process too) replays it from any offset,
    /// types into it and reads its exit (`terminal_reattach: true`). A sandbox without
    /// `script` or `stty` answers `Unsupported` before anything starts.
    #[default]
    Recorder,
    /// The recorder where the sandbox has `script` and `stty`, else the provider's TTY exec
    /// ([`Attached`](TerminalMode::Attached)): terminals everywhere, but none is promised to be
    /// reattachable (`terminal_reattach: false`: which one a terminal gets is known at its start).
    Auto,
    /// Always the provider's TTY exec ([`Attached`]), held by the sandbox handle that started it:
    /// replayed only within that handle, ended with it (`terminal_reattach: false`). Needs
    /// nothing in the image.
    Attached,
}

impl TerminalMode {
    /// The words the variable takes, in the order of the variants.
    pub const WORDS: &'static [&'static str] = &["recorder", "auto", "attached"];

    /// The mode `name` says in `vars` (`None`: unset); another word is `InvalidConfig`.
    pub fn from_vars(vars: &crate::Vars<'_>, name: &str) -> Result<Option<TerminalMode>, Error> {
        vars.choice(
            name,
            &[
                (Self::WORDS[0], TerminalMode::Recorder),
                (Self::WORDS[1], TerminalMode::Auto),
                (Self::WORDS[2], TerminalMode::Attached),
            ],
        )
    }

    /// `base` (spooled handles) with this mode's terminals: `terminal_reattach` true only for
    /// the recorder.
    #[must_use]
    pub const fn capabilities(self, base: ProcessCapabilities) -> ProcessCapabilities {
        ProcessCapabilities {
            terminal: true,
            terminal_reattach: matches!(self, TerminalMode::Recorder),
            ..base
        }
    }

    /// The sandbox handle's process handles in this mode: `spool`'s, with terminals on its
    /// recorder, on the provider's TTY exec (`open`, held in `terminals`; `exec` runs the signal
    /// script), or the recorder first.
    pub fn processes<'a>(
        self,
        spool: Spool<'a>,
        exec: &'a dyn Exec,
        open: &'a dyn OpenTerminal,
        terminals: &'a Terminals,
    ) -> Box<dyn Processes + 'a> {
        let base = spool.process_capabilities();
        let recorder = TerminalMode::Recorder.capabilities(base);
        match self {
            TerminalMode::Recorder => Box::new(spool.capabilities(recorder)),
            TerminalMode::Auto => Box::new(
                Attached::new(spool.capabilities(recorder), exec, open, terminals).recorder_first(),
            ),
            TerminalMode::Attached => Box::new(Attached::new(
                spool.capabilities(ProcessCapabilities {
                    terminal: false,
                    terminal_reattach: false,
                    ..base
                }),
                exec,
                open,
                terminals,
            )),
        }
    }
}

/// Process handles with terminals on the provider's TTY exec; see the [module docs](self).
pub struct Attached<'a> {
    spool: Spool<'a>,
    exec: &'a dyn Exec,
    open: &'a dyn OpenTerminal,
    terminals: &'a Terminals,
    capabilities: ProcessCapabilities,
    recorder_first: bool,
}

impl<'a> Attached<'a> {
    /// `spool`'s handles (declaring no terminals itself), with terminals opened by `open` and
    /// held in `terminals`; `exec` runs the signal script. Declares `spool`'s capabilities
    /// with `terminal: true` and `terminal_reattach: false`.
    pub fn new(
        spool: Spool<'a>,
        exec: &'a dyn Exec,
        open: &'a dyn OpenTerminal,
        terminals: &'a Terminals,
    ) -> Attached<'a> {
        let capabilities = ProcessCapabilities {
            terminal: true,
            // The terminal lives in this process's memory and ends with its client.
            terminal_reattach: false,
            ..spool.process_capabilities()
        };
        Attached {
            spool,
            exec,
            open,
            terminals,
            capabilities,
            recorder_first: false,
        }
    }

    /// Terminals through the spool's recorder (`script(1)`: replayed from any handle, outliving
    /// this client) wherever the sandbox has it, and on the provider's TTY exec only where the
    /// recorder answers `Unsupported` (no `script` or `stty` in the image: nothing started).
    /// Resize then goes to whichever holds the terminal. Still declares `terminal_reattach:
    /// false`: which of the two a terminal gets is known only at its start.
    pub fn recorder_first(mut self) -> Attached<'a> {
        self.recorder_first = true;
        self
    }

    fn error(&self, kind: ErrorKind, operation: &'static str, message: &str) -> Error {
        Error::new(kind, message.to_owned())
            .with_provider(self.exec.provider().to_owned())
            .with_operation(operation)
    }

    async fn start_terminal(
        &self,
        request: StartRequest,
        size: TerminalSize,
    ) -> Result<Started, Error> {
        let handle = self.spool.handle_for(&request.key);
        let _one = self.terminals.starting.lock().await;
        if self.terminals.get(&handle).is_some() {
            return Ok(Started {
                handle,
                fresh: false,
            });
        }
        let pid_file = format!("{PID_ROOT}/{}", crate::id::random_id(16));
        let command = &request.command;
        let mut argv = vec![
            "sh".to_owned(),
            "-c".to_owned(),
            WRAPPER.to_owned(),
            "sh".to_owned(),
            pid_file.clone(),
            size.rows.to_string(),
            size.cols.to_string(),
        ];
        argv.extend(command.argv().iter().cloned());
        let mut b = Command::builder(argv).tool(command.tool().clone());
        for (k, v) in command.env() {
            b = b.env(k, v);
        }
        if let Some(w) = command.workdir() {
            b = b.workdir(w);
        }
        let opened = self.open.open(b.build()?, size).await?;
        let (changed, _) = watch::channel(0u64);
        let control: Arc<dyn TerminalControl> = Arc::from(opened.control);
        let live = Arc::new_cyclic(|weak: &std::sync::Weak<Live>| {
            let weak = weak.clone();
            let mut output = opened.output;
            let pump = tokio::spawn(async move {
                let end = loop {
                    let item = output.next().await;
                    let Some(live) = weak.upgrade() else { return };
                    match item {
                        Some(Ok(data)) => {
                            live.state
                                .lock()
                                .expect("terminal state")
                                .out
                                .extend_from_slice(&data);
                            live.changed.send_modify(|n| *n += 1);
                        }
                        Some(Err(e)) => break Err(e),
                        None => break live.control.exit().await,
                    }
                };
                if let Some(live) = weak.upgrade() {
                    live.state.lock().expect("terminal state").end = Some(end);
                    live.changed.send_modify(|n| *n += 1);
                }
            });
            Live {
                key: request.key.clone(),
                state: Mutex::new(LiveState::default()),
                changed,
                input: tokio::sync::Mutex::new(opened.input),
                control,
                pid_file,
                pump: pump.abort_handle(),
            }
        });
        self.terminals
            .live
            .lock()
            .expect("terminals")
            .insert(handle.as_str().to_owned(), live);
        Ok(Started {
            handle,
            fresh: true,
        })
    }

    fn read_live(live: &Live, from: StreamOffsets) -> Result<ProcessRead, Error> {
        let state = live.process_state();
        let s = live.state.lock().expect("terminal state");
        let len = s.out.len() as u64;
        if let Some(Err(e)) = &s.end
            && from.stdout >= len
        {
            // Everything kept was read: what follows is the error that cut the output.
            return Err(again(e));
        }
        let start = from.stdout.min(len);
        let stop = (start + DEFAULT_READ_MAX).min(len);
        Ok(ProcessRead {
            from: StreamOffsets::new(start, 0),
            stdout: Bytes::copy_from_slice(&s.out[start as usize..stop as usize]),
            stderr: Bytes::new(),
            state,
            written: StreamOffsets::new(len, 0),
        })
    }

    async fn write_live(live: &Live, write: StdinWrite) -> Result<StdinState, Error> {
        let mut input = live.input.lock().await;
        let now = live.state.lock().expect("terminal state").stdin;
        let end = write.at + write.data.len() as u64;
        if write.at != now.accepted || now.closed {
            // A retry of bytes already accepted is answered with the state; anything else is
            // a conflict.
            if end <= now.accepted && (!write.close || now.closed) {
                return Ok(now);
            }
            return Err(Error::new(
                ErrorKind::Conflict,
                format!(
                    "stdin has accepted {} bytes{}; a write at {} conflicts",
                    now.accepted,
                    if now.closed { " and is closed" } else { "" },
                    write.at
                ),
            ));
        }
        if live.state.lock().expect("terminal state").end.is_some() {
            return Err(Error::new(
                ErrorKind::Conflict,
                "the terminal's command has exited: nothing reads its input",
            ));
        }
        let io = |e: std::io::Error| {
            Error::new(
                ErrorKind::Unavailable,
                format!("writing to the terminal: {e}"),
            )
            .with_retry(Retry::Unsafe)
        };
        input.write_all(&write.data).await.map_err(io)?;
        input.flush().await.map_err(io)?;
        if write.close {
            input.shutdown().await.map_err(io)?;
        }
        let mut s = live.state.lock().expect("terminal state");
        s.stdin.accepted = end;
        s.stdin.closed |= write.close;
        Ok(s.stdin)
    }

    async fn wait_live(live: &Live, within: Duration) -> Result<Waited, Error> {
        let mut rx = live.changed.subscribe();
        let done = async {
            loop {
                if let Some(end) = &live.state.lock().expect("terminal state").end {
                    return end_of(end).map(Waited::Exited);
                }
                if rx.changed().await.is_err() {
                    return Ok(Waited::Running);
                }
            }
        };
        match tokio::time::timeout(within, done).await {
            Ok(r) => r,
            Err(_) => Ok(Waited::Running),
        }
    }

    async fn signal_live(&self, live: &Live, signal: Signal) -> Result<(), Error> {
        if live.state.lock().expect("terminal state").end.is_some() {
            return Ok(());
        }
        if !live.control.signals() {
            return Err(self.error(
                ErrorKind::Unsupported,
                "signal",
                "this provider's terminal runs the command under a script of its own, where the \
                 command leads no process group, so no signal reaches it alone: type ^C (0x03) \
                 or ^\\ (0x1c) as keystrokes, or start the terminal in the `recorder` mode",
            ));
        }
        let cmd = Command::builder([
            "sh",
            "-c",
            SIGNAL,
            "sh",
            live.pid_file.as_str(),
            signal.name(),
        ])
        .build()?;
        let out = self.exec.exec(cmd).await?;
        if out.exit == Exit::Code(3) && live.state.lock().expect("terminal state").end.is_none() {
            return Err(self
                .error(
                    ErrorKind::Internal,
                    "signal",
                    "the terminal's program has not recorded its pid (its wrapper never ran): \
                     nothing was signalled",
                )
                .with_retry(Retry::SAFE));
        }
        if out.exit == Exit::Code(3) {
            return Ok(());
        }
        if out.exit != Exit::Code(0) {
            return Err(self.error(
                ErrorKind::Internal,
                "signal",
                &format!(
                    "kill failed: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            ));
        }
        Ok(())
    }

    fn not_held(&self, operation: &'static str) -> Error {
        self.error(
            ErrorKind::NotFound,
            operation,
            "no process under this handle here (a terminal lives with the client that started it: \
             this provider's TTY exec cannot be attached to again)",
        )
    }
}

/// The follower of a live terminal: what is there from `at`, then what comes, then the end.
fn follow(live: Arc<Live>, at: u64) -> impl Stream<Item = Result<ProcessEvent, Error>> {
    let rx = live.changed.subscribe();
    futures_util::stream::unfold(Some((live, rx, at)), |state| async move {
        let (live, mut rx, at) = state?;
        loop {
            let (data, end) = {
                let s = live.state.lock().expect("terminal state");
                let from = (at as usize).min(s.out.len());
                (
                    Bytes::copy_from_slice(&s.out[from..]),
                    s.end.as_ref().map(end_of),
                )
            };
            if !data.is_empty() {
                let next = at + data.len() as u64;
                let ev = ProcessEvent::Stdout { at, data };
                return Some((Ok(ev), Some((live, rx, next))));
            }
            match end {
                Some(Ok(exit)) => return Some((Ok(ProcessEvent::Exit(exit)), None)),
                Some(Err(e)) => return Some((Err(e), None)),
                None => {
                    if rx.changed().await.is_err() {
                        return None;
                    }
                }
            }
        }
    })
}

impl Processes for Attached<'_> {
    fn process_capabilities(&self) -> ProcessCapabilities {
        self.capabilities
    }

    fn handle_for(&self, key: &execseam_core::StartKey) -> ProcessHandle {
        self.spool.handle_for(key)
    }

    fn start(&self, request: StartRequest) -> BoxFuture<'_, Result<Started, Error>> {
        match request.terminal {
            Some(size) if self.recorder_first => Box::pin(async move {
                match self.spool.start(request.clone()).await {
                    Err(e) if e.kind() == ErrorKind::Unsupported => {
                        self.start_terminal(request, size).await
                    }
                    recorded => recorded,
                }
            }),
            Some(size) => Box::pin(self.start_terminal(request, size)),
            None => self.spool.start(request),
        }
    }

    fn read<'s>(
        &'s self,
        handle: &'s ProcessHandle,
        from: StreamOffsets,
    ) -> BoxFuture<'s, Result<ProcessRead, Error>> {
        match self.terminals.get(handle) {
            Some(live) => Box::pin(async move { Self::read_live(&live, from) }),
            None => self.spool.read(handle, from),
        }
    }

    fn attach<'s>(
        &'s self,
        handle: &'s ProcessHandle,
        from: StreamOffsets,
    ) -> BoxFuture<'s, Result<ProcessStream<'s>, Error>> {
        match self.terminals.get(handle) {
            Some(live) => {
                Box::pin(async move { Ok(ProcessStream::new(follow(live, from.stdout))) })
            }
            None => self.spool.attach(handle, from),
        }
    }

    fn write_stdin<'s>(
        &'s self,
        handle: &'s ProcessHandle,
        write: StdinWrite,
    ) -> BoxFuture<'s, Result<StdinState, Error>> {
        match self.terminals.get(handle) {
            Some(live) => Box::pin(async move { Self::write_live(&live, write).await }),
            None => self.spool.write_stdin(handle, write),
        }
    }

    fn signal<'s>(
        &'s self,
        handle: &'s ProcessHandle,
        signal: Signal,
    ) -> BoxFuture<'s, Result<(), Error>> {
        match self.terminals.get(handle) {
            Some(live) => Box::pin(async move { self.signal_live(&live, signal).await }),
            None => self.spool.signal(handle, signal),
        }
    }

    fn wait<'s>(
        &'s self,
        handle: &'s ProcessHandle,
        within: Duration,
    ) -> BoxFuture<'s, Result<Waited, Error>> {
        match self.terminals.get(handle) {
            Some(live) => Box::pin(async move { Self::wait_live(&live, within).await }),
            None => self.spool.wait(handle, within),
        }
    }

    fn status<'s>(
        &'s self,
        handle: &'s ProcessHandle,
    ) -> BoxFuture<'s, Result<ProcessInfo, Error>> {
        match self.terminals.get(handle) {
            Some(live) => Box::pin(async move { Ok(live.info(handle)) }),
            None => Box::pin(async move {
                self.spool.status(handle).await.map_err(|e| {
                    if e.kind() == ErrorKind::NotFound {
                        self.not_held("status")
                    } else {
                        e
                    }
                })
            }),
        }
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<ProcessInfo>, Error>> {
        Box::pin(async move {
            let mut all = self.spool.list().await?;
            let live: Vec<(String, Arc<Live>)> = self
                .terminals
                .live
                .lock()
                .expect("terminals")
                .iter()
                .map(|(h, l)| (h.clone(), l.clone()))
                .collect();
            all.extend(
                live.iter()
                    .map(|(h, l)| l.info(&ProcessHandle::new(h.clone()))),
            );
            all.sort_by(|a, b| a.key.as_str().cmp(b.key.as_str()));
            Ok(all)
        })
    }

    fn release<'s>(&'s self, handle: &'s ProcessHandle) -> BoxFuture<'s, Result<(), Error>> {
        match self.terminals.get(handle) {
            Some(live) => Box::pin(async move {
                if live.process_state() == ProcessState::Running {
                    return Err(self.error(
                        ErrorKind::Conflict,
                        "release",
                        "the terminal's command is running: signal it first",
                    ));
                }
                self.terminals
                    .live
                    .lock()
                    .expect("terminals")
                    .remove(handle.as_str());
                let rm = Command::builder(["rm", "-f", "--", live.pid_file.as_str()]).build()?;
                let _ = self.exec.exec(rm).await;
                Ok(())
            }),
            None => self.spool.release(handle),
        }
    }

    fn resize<'s>(
        &'s self,
        handle: &'s ProcessHandle,
        size: TerminalSize,
    ) -> BoxFuture<'s, Result<(), Error>> {
        match self.terminals.get(handle) {
            Some(live) => Box::pin(async move {
                if live.process_state() != ProcessState::Running {
                    return Ok(());
                }
                live.control.resize(size).await
            }),
            None if self.recorder_first => self.spool.resize(handle, size),
            None => Box::pin(async move {
                // A spooled handle has no terminal; one this client does not hold is not found.
                self.spool.status(handle).await.map_err(|e| {
                    if e.kind() == ErrorKind::NotFound {
                        self.not_held("resize")
                    } else {
                        e
                    }
                })?;
                Err(self.error(
                    ErrorKind::InvalidCommand,
                    "resize",
                    "the process was started without a terminal",
                ))
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use execseam_core::StartKey;
    use tokio::io::AsyncReadExt as _;
    use tokio::sync::mpsc;

    use super::*;

    use crate::spool::tests::Host;

    struct Exit7;

    impl TerminalControl for Exit7 {
        fn resize(&self, _: TerminalSize) -> BoxFuture<'_, Result<(), Error>> {
            Box::pin(async { Ok(()) })
        }
        fn exit(&self) -> BoxFuture<'_, Result<Exit, Error>> {
            Box::pin(async { Ok(Exit::Code(7)) })
        }
    }

    /// Hands out prepared terminals, one per open.
    struct Fake(Mutex<Vec<Opened>>);

    impl OpenTerminal for Fake {
        fn open(&self, command: Command, _: TerminalSize) -> BoxFuture<'_, Result<Opened, Error>> {
            assert_eq!(command.argv()[2], WRAPPER, "the kit's wrapper runs first");
            let next = self.0.lock().unwrap().pop().expect("a prepared terminal");
            Box::pin(async move { Ok(next) })
        }
    }

    type Feed = mpsc::UnboundedSender<Result<Bytes, Error>>;

    fn prepared() -> (Opened, Feed, tokio::io::DuplexStream) {
        let (tx, rx) = mpsc::unbounded_channel();
        let (keys, input) = tokio::io::duplex(64);
        let output = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        let opened = Opened {
            output: Box::pin(output),
            input: Box::pin(input),
            control: Box::new(Exit7),
        };
        (opened, tx, keys)
    }

    async fn follow_all(
        p: &Attached<'_>,
        h: &ProcessHandle,
        from: u64,
    ) -> Result<execseam_core::Output, Error> {
        let s = p.attach(h, StreamOffsets::new(from, 0)).await?;
        s.collect().await
    }

    fn text(r: &ProcessRead) -> &str {
        std::str::from_utf8(&r.stdout).unwrap()
    }

    async fn settle(p: &Attached<'_>, h: &ProcessHandle, want: u64) {
        for _ in 0..200 {
            if p.read(h, StreamOffsets::ZERO)
                .await
                .map(|r| r.written.stdout)
                .ok()
                == Some(want)
            {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("the output never reached {want} bytes");
    }

    #[tokio::test]
    async fn a_held_terminal_replays_takes_keys_by_offset_and_a_cut_is_an_error_never_an_exit() {
        let (cut, cut_feed, _cut_keys) = prepared();
        let (ok, feed, mut keys) = prepared();
        let fake = Fake(Mutex::new(vec![cut, ok]));
        let terminals = Terminals::default();
        // The host runs the spool's and the release's scripts (nothing of this test's is there).
        let host = Host { binary: true };
        let p = Attached::new(Spool::new(&host, "attached-test"), &host, &fake, &terminals);
        assert!(p.process_capabilities().terminal);
        let size = TerminalSize { cols: 80, rows: 24 };
        let sh = || Command::builder(["sh"]).build().unwrap();
        let req = |k: &str| StartRequest::new(StartKey::new(k).unwrap(), sh()).terminal(size);
        let s = p.start(req("a")).await.unwrap();
        assert!(s.fresh);
        assert!(
            !p.start(req("a")).await.unwrap().fresh,
            "the same key starts nothing"
        );
        let h = s.handle;

        feed.send(Ok(Bytes::from_static(b"ab"))).unwrap();
        feed.send(Ok(Bytes::from_static(b"cd"))).unwrap();
        settle(&p, &h, 4).await;
        assert_eq!(
            text(&p.read(&h, StreamOffsets::ZERO).await.unwrap()),
            "abcd"
        );
        let r = p.read(&h, StreamOffsets::new(2, 0)).await.unwrap();
        assert_eq!((text(&r), r.state), ("cd", ProcessState::Running));

        // Keys by offset, exactly once.
        let w = |at: u64, d: &'static [u8]| StdinWrite {
            at,
            data: Bytes::from_static(d),
            close: false,
        };
        assert_eq!(p.write_stdin(&h, w(0, b"x\x03")).await.unwrap().accepted, 2);
        assert_eq!(
            p.write_stdin(&h, w(0, b"x\x03")).await.unwrap().accepted,
            2,
            "a retry of accepted bytes"
        );
        let e = p.write_stdin(&h, w(5, b"y")).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Conflict);
        let mut got = [0u8; 2];
        keys.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"x\x03");

        let e = p.release(&h).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Conflict, "a running terminal is kept");
        drop(feed);
        assert_eq!(
            p.wait(&h, Duration::from_secs(5)).await.unwrap(),
            Waited::Exited(Exit::Code(7))
        );
        let out = follow_all(&p, &h, 2).await.unwrap();
        assert_eq!((&out.stdout[..], out.exit), (&b"cd"[..], Exit::Code(7)));
        p.release(&h).await.unwrap();
        let e = p.status(&h).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound, "released: {e}");
        assert!(e.to_string().contains("client that started it"), "{e}");

        // A cut output stream is the typed error, after what was kept.
        let h = p.start(req("b")).await.unwrap().handle;
        cut_feed.send(Ok(Bytes::from_static(b"z"))).unwrap();
        cut_feed
            .send(Err(Error::protocol("the connection broke")))
            .unwrap();
        let e = p.wait(&h, Duration::from_secs(5)).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Protocol);
        assert_eq!(text(&p.read(&h, StreamOffsets::ZERO).await.unwrap()), "z");
        assert!(p.read(&h, StreamOffsets::new(1, 0)).await.is_err());
        let e = follow_all(&p, &h, 0).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Protocol);
        assert_eq!(&e.partial().unwrap().stdout[..], b"z");
        assert_eq!(p.status(&h).await.unwrap().state, ProcessState::Unknown);
    }

    #[tokio::test]
    async fn a_signal_that_reaches_nothing_is_an_error_never_ok() {
        // The fake terminal's wrapper never runs, so no pid is ever recorded: the old script
        // printed `gone` and the signal was reported sent.
        let (opened, _feed, _keys) = prepared();
        let fake = Fake(Mutex::new(vec![opened]));
        let terminals = Terminals::default();
        let host = Host { binary: true };
        let p = Attached::new(
            Spool::new(&host, "attached-signal"),
            &host,
            &fake,
            &terminals,
        );
        let size = TerminalSize { cols: 80, rows: 24 };
        let req = StartRequest::new(
            StartKey::new("s").unwrap(),
            Command::builder(["sh"]).build().unwrap(),
        )
        .terminal(size);
        let h = p.start(req).await.unwrap().handle;
        let e = p.signal(&h, Signal::Term).await.unwrap_err();
        assert_eq!(
            (e.kind(), e.retry()),
            (ErrorKind::Internal, Retry::SAFE),
            "{e}"
        );
        assert!(e.to_string().contains("nothing was signalled"), "{e}");
    }

    /// A sandbox without `script(1)`: the host, with the spool's probe for it failing.
    struct NoScript(Host);

    impl Exec for NoScript {
        fn provider(&self) -> &str {
            "host"
        }
        fn capabilities(&self) -> execseam_core::Capabilities {
            self.0.capabilities()
        }
        fn exec(&self, command: Command) -> BoxFuture<'_, Result<execseam_core::Output, Error>> {
            let argv: Vec<String> = command
                .argv()
                .iter()
                .map(|a| a.replace("command -v script", "command -v no-such-script"))
                .collect();
            let mut b = Command::builder(argv).stdin(command.stdin().clone());
            for (k, v) in command.env() {
                b = b.env(k, v);
            }
            Box::pin(async move { self.0.exec(b.build()?).await })
        }
    }

    #[tokio::test]
    async fn recorder_first_records_where_it_can_and_attaches_where_it_cannot() {
        let size = TerminalSize { cols: 80, rows: 24 };
        let req = |k: &str, script: &str| {
            StartRequest::new(
                StartKey::new(k).unwrap(),
                Command::builder(["sh", "-c", script]).build().unwrap(),
            )
            .terminal(size)
        };
        let terminals = Terminals::default();
        let id = format!("recorder-first-{}", crate::id::random_id(8));
        // With script(1): the recorder; the provider's TTY exec is never opened (the fake has
        // no terminal to hand out and would panic).
        let host = Host { binary: true };
        let none = Fake(Mutex::new(Vec::new()));
        let spool = Spool::new(&host, &id).capabilities(crate::spool::SPOOLED_TERMINAL);
        let p = TerminalMode::Auto.processes(spool, &host, &none, &terminals);
        let caps = p.process_capabilities();
        assert!(
            caps.terminal && !caps.terminal_reattach,
            "auto promises no reattach"
        );
        let h = p
            .start(req("rec", "read x; echo \"got:$x\""))
            .await
            .unwrap()
            .handle;
        p.resize(&h, TerminalSize { cols: 90, rows: 30 })
            .await
            .unwrap();
        let at = p.status(&h).await.unwrap().stdin.map_or(0, |s| s.accepted);
        let w = StdinWrite {
            at,
            data: Bytes::from_static(b"k\r"),
            close: false,
        };
        p.write_stdin(&h, w).await.unwrap();
        assert_eq!(
            p.wait(&h, Duration::from_secs(10)).await.unwrap(),
            Waited::Exited(Exit::Code(0))
        );
        assert!(terminals.get(&h).is_none(), "recorded, not held");
        p.release(&h).await.unwrap();
        // Without: the recorder refuses before starting anything, and the TTY exec opens.
        let (ok, feed, _keys) = prepared();
        let fake = Fake(Mutex::new(vec![ok]));
        let bare = NoScript(Host { binary: true });
        let spool = Spool::new(&bare, &id).capabilities(crate::spool::SPOOLED_TERMINAL);
        let p = TerminalMode::Auto.processes(spool, &bare, &fake, &terminals);
        let h = p.start(req("att", "true")).await.unwrap().handle;
        assert!(terminals.get(&h).is_some(), "held by this client");
        drop(feed);
        assert_eq!(
            p.wait(&h, Duration::from_secs(5)).await.unwrap(),
            Waited::Exited(Exit::Code(7))
        );
    }

    #[test]
    fn the_terminal_mode_is_one_word_and_only_the_recorder_reattaches() {
        const DECLARED: &[crate::Var] = &[crate::Var::choice("T", TerminalMode::WORDS)];
        let read = |value: &'static str| {
            let get = move |_: &str| Some(value.to_owned());
            TerminalMode::from_vars(&crate::Vars::new("p", DECLARED, &get), "T")
        };
        assert_eq!(read("attached").unwrap(), Some(TerminalMode::Attached));
        assert_eq!(read(" auto ").unwrap(), Some(TerminalMode::Auto));
        assert_eq!(read("").unwrap(), None);
        let e = read("tty").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig);
        assert!(e.message().contains("recorder, auto, attached"), "{e}");
        let spooled = crate::spool::SPOOLED;
        assert_eq!(
            TerminalMode::Recorder.capabilities(spooled),
            crate::spool::SPOOLED_TERMINAL
        );
        for mode in [TerminalMode::Auto, TerminalMode::Attached] {
            let caps = mode.capabilities(spooled);
            assert!(caps.terminal && !caps.terminal_reattach, "{mode:?}");
        }
    }
}
