//! The [`Exec`] and [`ExecStream`] implementation.
//!
//! One exec is: the size check ([`crate::SIZE_LIMIT`], before any I/O) → `StartProcess{command:
//! [`detached`] argv, cwd, env, stdin}` → (if stdin) `WriteProcessInput` in the background →
//! `StreamProcessOutput{follow}` from byte offsets until its `exit` message.
//!
//! - A stream that fails (reset, truncated, UNAVAILABLE) is resumed from the bytes received so
//!   far, per stream, up to [`AxConfig::max_resumes`] times in a row without progress.
//! - A stream that ends cleanly without the exit message (the documented `follow=false` shape,
//!   or a guest that closes early) is followed by polling `GetProcess` (50 ms, backing off to
//!   1 s, bounded by [`AxConfig::exit_poll_timeout`]) until the process exited, then by a new
//!   stream from the offsets, which drains the rest and ends with the exit message. The exit
//!   code is only ever the one the guest sent: a process that cannot be observed is an `Err`.
//! - Dropping the returned future or stream before the exit sends `SignalProcess{SIGNAL_KILL}`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use execseam_adapter_kit::exec_by::ChannelEvents;
use execseam_adapter_kit::reaper;
use execseam_core::{
    BoxFuture, Capabilities, Command, Error, ErrorKind, Event, EventStream, Exec, Exit, Ownership,
    Retry, Sandbox,
};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tonic::{Code, Status};

use crate::client::Guest;
use crate::config::AxConfig;
use crate::error::{self, Origin, PROVIDER, from_status};
use crate::wire::{Process, ProcessState, Signal, StartProcessRequest, process_output};
use execseam_adapter_kit::retry::Stage;

/// Runs commands in one agent-substrate guest. See the [crate docs](crate).
#[derive(Clone, Debug)]
pub struct AxExec {
    config: Arc<AxConfig>,
    /// `http://host:port`.
    endpoint: String,
    /// The address as given to connect (the sandbox's id).
    id: String,
    /// The guest's one gRPC channel, made on first use and shared by every call and every clone
    /// of this handle (tonic multiplexes calls over it and reconnects it when it breaks), as AX's
    /// own client keeps one `grpc.ClientConn` per guest.
    guest: Arc<OnceLock<Guest>>,
    /// Never owned: a guest ends with its task.
    ownership: Ownership,
    /// What the guest's `execve` takes, asked for the first large command (shared by clones).
    arg_max: Arc<execseam_adapter_kit::size::ArgMax>,
    /// Process ids of handles this client started or found (shared by clones): the way back to
    /// a running handle when the guest's 10 running processes leave no slot for the registry's
    /// exec (`process.rs`, `id_of`).
    pub(crate) known_ids: Arc<Mutex<HashMap<execseam_core::StartKey, String>>>,
}

impl AxExec {
    pub(crate) fn new(config: Arc<AxConfig>, endpoint: String, id: String) -> AxExec {
        AxExec {
            config,
            endpoint,
            id,
            guest: Arc::new(OnceLock::new()),
            ownership: Ownership::never_owned(),
            arg_max: Arc::default(),
            known_ids: Arc::default(),
        }
    }

    /// The guest's endpoint URL (`http://host:port`).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The configuration.
    pub fn config(&self) -> &AxConfig {
        &self.config
    }

    fn guest(&self, op: &'static str) -> Result<Guest, Error> {
        if let Some(g) = self.guest.get() {
            return Ok(g.clone());
        }
        let g = Guest::connect(&self.config, &self.endpoint)
            .map_err(|s| from_status(s, op, Stage::Before))?;
        Ok(self.guest.get_or_init(|| g).clone())
    }

    /// Reads a whole file through `FileSystemService.ReadFile` (a missing file is `NotFound`;
    /// the guest resolves relative paths against its workspace and may confine paths to it).
    pub async fn read_file(&self, path: &str) -> Result<Bytes, Error> {
        let guest = self.guest("read_file")?;
        guest
            .read_file(path)
            .await
            .map_err(|s| from_status(s, "read_file", Stage::Before))
    }

    /// Replaces a file through `FileSystemService.WriteFile` (parents are created; `mode` 0 means
    /// the guest's 0644). Returns the bytes written, checked against `data`.
    pub async fn write_file(
        &self,
        path: &str,
        data: impl Into<Bytes>,
        mode: u32,
    ) -> Result<u64, Error> {
        let data = data.into();
        let len = data.len() as u64;
        let guest = self.guest("write_file")?;
        let written = guest
            .write_file(path, data, mode)
            .await
            .map_err(|s| from_status(s, "write_file", Stage::Before))?;
        if u64::try_from(written).ok() != Some(len) {
            return Err(Error::protocol(format!(
                "the guest reports {written} bytes written, {len} were sent"
            ))
            .with_provider(PROVIDER)
            .with_operation("write_file"));
        }
        Ok(len)
    }

    async fn start(&self, command: Command) -> Result<EventStream, Error> {
        tracing::debug!(provider = PROVIDER, tool = %command.tool(), program = %command.program(), argc = command.argv().len(), "exec");
        // The guest `execve`s the argv: its limit, asked.
        self.arg_max
            .check_in(PROVIDER, &command, &crate::SIZE_LIMIT, self)
            .await?;
        let guest = self.guest("exec")?;
        let stdin = command.stdin().clone();
        let request = start_request(&command, !stdin.is_empty(), None, &self.config);
        let id = start_process(&guest, request, "exec").await?;
        let (rx, kill) = self.follow(guest, id, [0, 0], true, stdin);
        Ok(EventStream::new(ChannelEvents(rx)).with_kill(kill))
    }

    /// Follows process `id` from `offsets` to its exit message, resuming cut streams: an exec's
    /// events. `kill_on_drop`: a consumer that goes away before the exit kills the process
    /// group (an exec); otherwise it only detaches (an attach). `stdin` is fed first, then closed.
    pub(crate) fn follow(
        &self,
        guest: Guest,
        id: String,
        offsets: [i64; 2],
        kill_on_drop: bool,
        stdin: Bytes,
    ) -> (mpsc::Receiver<Result<Event, Error>>, Kill) {
        let (tx, rx) = mpsc::channel(16);
        let driver = Driver {
            guest,
            id,
            config: self.config.clone(),
            tx,
            offsets,
            tails: [Vec::new(), Vec::new()],
            stdin_error: Arc::new(Mutex::new(None)),
        };
        // An attach only detaches: its guard is never armed.
        let kill = if kill_on_drop {
            kill_guard(driver.guest.clone(), driver.id.clone())
        } else {
            reaper::OnDrop::new(PROVIDER)
        };
        let awaitable = kill.kill();
        // Counted by the kit's reaper: a consumer that drops the stream leaves the driver to
        // notice and kill (its guard), and the front end's drain must wait for that.
        reaper::spawn(PROVIDER, "kill", async move {
            driver.run(stdin, kill).await;
            Ok(())
        });
        (rx, Box::new(awaitable))
    }

    /// The guest's channel (made on first use).
    pub(crate) fn channel(&self, op: &'static str) -> Result<Guest, Error> {
        self.guest(op)
    }
}

/// The `StartProcess` of `command` under the [`detached`] wrapper (`stdin`: a pipe for
/// `WriteProcessInput`; `gate`: behind [`GATE`] on that directory), with the configured
/// watchdog ([`AxConfig::process_timeout`]).
pub(crate) fn start_request(
    command: &Command,
    stdin: bool,
    gate: Option<&str>,
    config: &AxConfig,
) -> StartProcessRequest {
    let timeout = config.process_timeout;
    StartProcessRequest {
        command: wrapped(command.argv(), command.env(), gate),
        cwd: command.workdir().unwrap_or_default().to_owned(),
        env: command
            .env()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect::<HashMap<_, _>>(),
        stdin,
        timeout: Some(crate::wire::google::protobuf::Duration {
            seconds: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
            nanos: timeout.subsec_nanos() as i32,
        }),
    }
}

/// A process the guest's watchdog ended: SIGKILL to its group at the requested timeout, which
/// the guest reports as `128 + 9` like any kill (`Tracker.Kill` from the watchdog's
/// `time.AfterFunc`, agent-substrate/env `guest/process/tracker.go`). Told apart by its run
/// time: a kill before the timeout is someone else's.
pub(crate) fn watchdog_end(config: &AxConfig, p: &Process, op: &'static str) -> Option<Error> {
    if p.exit_code != 128 + 9 {
        return None;
    }
    let at = |t: &Option<crate::wire::google::protobuf::Timestamp>| {
        t.as_ref()
            .map(|t| (i128::from(t.seconds) * 1_000_000_000) + i128::from(t.nanos))
    };
    let ran = at(&p.finished_at)? - at(&p.started_at)?;
    if ran < config.process_timeout.as_nanos() as i128 {
        return None;
    }
    Some(
        Error::new(
            ErrorKind::Timeout(execseam_core::Deadline::Command),
            format!(
                "the guest's watchdog SIGKILLed process {} and its group after {:?} (AxConfig::process_timeout); the guest reports it as exit 137",
                p.process_id, config.process_timeout
            ),
        )
        .with_retry(Retry::Never)
        .with_provider(PROVIDER)
        .with_operation(op),
    )
}

/// Kills a followed process's group (for [`EventStream::with_kill`]).
pub(crate) type Kill = Box<dyn FnOnce() -> BoxFuture<'static, Result<(), Error>> + Send>;

/// `StartProcess`, checked: the new process's id. A lost answer is `Unsafe` (the guest mints
/// the id: a retry would start a second process).
pub(crate) async fn start_process(
    guest: &Guest,
    request: StartProcessRequest,
    op: &'static str,
) -> Result<String, Error> {
    let process = guest
        .start(request)
        .await
        .map_err(|s| from_status(s, op, Stage::Submit))?;
    if process.process_id.is_empty() {
        return Err(protocol("StartProcess answered without a process_id").with_operation(op));
    }
    match ProcessState::try_from(process.state) {
        Ok(ProcessState::Running | ProcessState::Exited) => {}
        _ => {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "StartProcess answered process {:?} with state {}: a guest without process states \
                     serves the older ateenv.v1alpha (StreamProcessOutputs/KillProcess), which this adapter does not speak",
                    process.process_id, process.state
                ),
            )
            .with_retry(Retry::Unsafe)
            .with_provider(PROVIDER)
            .with_operation(op));
        }
    }
    tracing::debug!(provider = PROVIDER, process_id = %process.process_id, "started");
    Ok(process.process_id)
}

fn protocol(message: impl Into<String>) -> Error {
    Error::protocol(message)
        .with_provider(PROVIDER)
        .with_operation("exec")
}

/// Runs argv (`"$@"`, each string as given, run with `exec` so a program named like a shell
/// builtin is still the program) with its output through two FIFOs this script reads, so the
/// command's exit is its own. The guest records an exit only after `cmd.Wait`, which also waits
/// for its output copiers (`cmd.Stdout` is a `cappedWriter`, not a file:
/// agent-substrate/env `guest/process/tracker.go`), so a background child still holding the
/// command's stdout (`sleep 60 &`) would hold the exec for as long as it lives, for good with a
/// daemon. Once the command has exited, the readers get at most one second to drain what it
/// wrote; the child keeps running, what it writes after that is not this command's output (as
/// on the local and Daytona adapters), and it stays in the process group the adapter's kill
/// reaches. Without a writable temp directory (or `mkfifo`) the command runs as it is, exactly,
/// only without the detachment. The wrapper's variables are not exported, so the command's
/// environment is the one it asked for.
pub const DETACH: &str = r#"if d=$(mktemp -d "${TMPDIR:-/tmp}/.execseam-detach.XXXXXX" 2>/dev/null) && mkfifo "$d/o" "$d/e" 2>/dev/null; then
  cat <"$d/o" & o=$!
  cat <"$d/e" >&2 & r=$!
  (exec "$@") >"$d/o" 2>"$d/e"
  s=$?
  ( sleep 1; kill "$o" "$r" ) </dev/null >/dev/null 2>&1 & w=$!
  wait "$o" "$r" 2>/dev/null
  kill "$w" 2>/dev/null
  rm -rf "$d"
  exit "$s"
fi
[ -n "$d" ] && rm -rf "$d"
exec "$@""#;

/// The argv sent to the guest for a command: [`DETACH`] with the argv as its arguments.
///
/// A shell drops environment variables whose names are not shell identifiers
/// (`EXECSEAM-DASHED.key`) before it runs anything, so those of `env` are given again, through
/// `env --` in front of the argv (the guest still sets them all). A program whose name starts
/// with `-` (a shell's `exec` may read it as an option), or that contains `=` when `env` is
/// needed (env would take it for an assignment), is sent as it is: only it keeps the guest's own
/// wait for background children.
pub fn detached(argv: &[String], env: &std::collections::BTreeMap<String, String>) -> Vec<String> {
    wrapped(argv, env, None)
}

/// Holds a command until its handle's registry entry (`$1`) has the process id: the guest mints
/// the id only in `StartProcess`'s answer, so the command runs only once the adapter recorded
/// it (a start refused afterwards, or whose answer was lost, runs nothing). It looks every
/// 10 ms for a second (the record follows the start's answer at once), then every 100 ms, and
/// gives up after a minute (exit 125, nothing run).
const GATE: &str = r#"e=$1; shift; n=0
until [ -e "$e/id" ]; do
  n=$((n + 1)); [ "$n" -le 700 ] || exit 125
  if [ "$n" -le 100 ]; then t=0.01; else t=0.1; fi
  sleep "$t" 2>/dev/null || sleep 1
done
exec "$@""#;

/// [`detached`], behind [`GATE`] on the registry entry `gate` (inside the wrapper, before the
/// `env --` that restores names a shell drops). The argv sent as it is gets no gate.
fn wrapped(
    argv: &[String],
    env: &std::collections::BTreeMap<String, String>,
    gate: Option<&str>,
) -> Vec<String> {
    let odd: Vec<String> = env
        .iter()
        .filter(|(k, _)| !is_identifier(k))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let Some(program) = argv.first() else {
        return Vec::new();
    };
    if program.starts_with('-') || (!odd.is_empty() && program.contains('=')) {
        return argv.to_vec();
    }
    let mut out = Vec::with_capacity(argv.len() + odd.len() + 11);
    out.extend(["/bin/sh", "-c", DETACH, "sh"].map(str::to_owned));
    if let Some(entry) = gate {
        out.extend(["/bin/sh", "-c", GATE, "execseam-gate", entry].map(str::to_owned));
    }
    if !odd.is_empty() {
        out.extend(["env", "--"].map(str::to_owned));
        out.extend(odd);
    }
    out.extend(argv.iter().cloned());
    out
}

/// A POSIX shell name: `[A-Za-z_][A-Za-z0-9_]*`.
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl Exec for AxExec {
    execseam_adapter_kit::accessors!(self => provider: PROVIDER);

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            max_output: Some(self.config.max_log_bytes),
            ..crate::CAPABILITIES
        }
    }

    execseam_adapter_kit::exec_by!(start);

    /// The guest's own processes, found by key through a registry in the guest's `/tmp`
    /// ([`crate::process`]). Behind a Substrate router the guest is the address *and* the
    /// target actor: both name the handles' sandbox.
    fn processes(&self) -> Option<Box<dyn execseam_core::Processes + '_>> {
        let guest = match self.config.actor() {
            Some(actor) => format!("{} {actor}", self.id),
            None => self.id.clone(),
        };
        Some(Box::new(crate::process::AxProcesses::new(self, guest)))
    }
}

execseam_adapter_kit::exec_stream_by!(AxExec: start);

/// SIGKILLs the process group: the guard that does it on drop, or when the stream's kill asks,
/// unless disarmed (the exec ended, or failed once the process had exited).
fn kill_guard(guest: Guest, id: String) -> reaper::OnDrop {
    let guard = reaper::OnDrop::new(PROVIDER);
    guard.arm("kill", async move {
        match guest.signal(&id, Signal::Kill).await {
            Ok(_) => Ok(()),
            // The process already ended (and was reaped): nothing to kill.
            Err(s) if s.code() == Code::NotFound => Ok(()),
            Err(s) => Err(Error::new(
                ErrorKind::Unavailable,
                format!("signal {id}: {:?}: {}", s.code(), s.message()),
            )
            .with_provider(PROVIDER)),
        }
    });
    guard
}

/// What one output stream ended with.
enum Outcome {
    Exit(Process),
    /// Ended with OK before the exit message.
    Ended,
    Failed(Status),
    /// The consumer went away.
    Dropped,
}

struct Driver {
    guest: Guest,
    id: String,
    config: Arc<AxConfig>,
    tx: mpsc::Sender<Result<Event, Error>>,
    /// Bytes received so far: the offsets to resume from.
    offsets: [i64; 2],
    /// The bytes received at or past the guest's log limit (to recognise its marker).
    tails: [Vec<u8>; 2],
    stdin_error: Arc<Mutex<Option<Error>>>,
}

impl Driver {
    async fn run(mut self, stdin: Bytes, kill: reaper::OnDrop) {
        let stdin_task = (!stdin.is_empty()).then(|| {
            let (guest, id, slot) = (
                self.guest.clone(),
                self.id.clone(),
                self.stdin_error.clone(),
            );
            tokio::spawn(feed_stdin(guest, id, stdin, slot))
        });
        let result = self.follow().await;
        if let Some(t) = stdin_task {
            t.abort();
        }
        let result = match result {
            None => return, // dropped: `kill` fires
            Some(r) => r,
        };
        let stdin_failed = self.stdin_error.lock().expect("stdin slot").take();
        let result = match (result, stdin_failed) {
            (Ok(_), Some(e)) => Err((e, true)),
            (r, _) => r,
        };
        match result {
            Ok(exit) => {
                kill.disarm();
                let _ = self.tx.send(Ok(Event::Exit(exit))).await;
            }
            Err((e, exited)) => {
                if exited {
                    kill.disarm();
                }
                let _ = self.tx.send(Err(e)).await;
            }
        }
    }

    /// Follows the output to the exit. `None` when the consumer went away; `Err((e, exited))`.
    async fn follow(&mut self) -> Option<Result<Exit, (Error, bool)>> {
        let mut failures = 0u32;
        let mut endings = 0u32;
        loop {
            let before = self.offsets;
            let outcome = self.stream_once().await;
            let progressed = self.offsets != before;
            if progressed {
                failures = 0;
                endings = 0;
            }
            match outcome {
                Outcome::Dropped => return None,
                Outcome::Exit(p) => return Some(self.exit_of(p).map_err(|e| (e, true))),
                Outcome::Failed(s) => {
                    if !error::resumable(&s) || failures >= self.config.max_resumes {
                        let e = from_status(s, "exec", Stage::After);
                        let e = if failures > 0 {
                            annotate(e, &format!("after {failures} resumed output streams"))
                        } else {
                            e
                        };
                        return Some(Err((e, false)));
                    }
                    failures += 1;
                    tracing::debug!(provider = PROVIDER, process_id = %self.id, code = %s.code(), failures, "output stream failed; resuming");
                    let backoff = Duration::from_millis(100 << failures.min(4));
                    if !self.sleep(backoff).await {
                        return None;
                    }
                }
                Outcome::Ended => {
                    if endings >= self.config.max_resumes {
                        return Some(Err((
                            protocol(format!(
                                "the guest ended the output stream of {} without the exit message {} times in a row",
                                self.id,
                                endings + 1
                            )),
                            false,
                        )));
                    }
                    endings += 1;
                    match self.poll_until_exited().await? {
                        Ok(()) => {}
                        Err(e) => return Some(Err((e, false))),
                    }
                }
            }
        }
    }

    /// Sleeps unless the consumer goes away first (false).
    async fn sleep(&self, d: Duration) -> bool {
        tokio::select! {
            () = tokio::time::sleep(d) => true,
            () = self.tx.closed() => false,
        }
    }

    /// One `StreamProcessOutput{follow: true}` from the current offsets.
    async fn stream_once(&mut self) -> Outcome {
        let tx = self.tx.clone();
        let open = tokio::select! {
            r = self.guest.bounded(
                "StreamProcessOutput",
                self.guest.output(&self.id, self.offsets[0], self.offsets[1], true),
            ) => r,
            () = tx.closed() => return Outcome::Dropped,
        };
        let mut stream = match open {
            Ok(s) => s,
            Err(s) => return Outcome::Failed(s),
        };
        loop {
            // `Streaming::message` is cancel safe: a message cut by the idle timeout goes on
            // where it was.
            let next = tokio::select! {
                r = tokio::time::timeout(self.config.idle_timeout, stream.message()) => r,
                () = tx.closed() => return Outcome::Dropped,
            };
            let Ok(next) = next else {
                // Silence: a command may be silent; a broken stream or peer is not.
                match self.guest.get(&self.id).await {
                    Ok(p) if ProcessState::try_from(p.state) == Ok(ProcessState::Running) => {
                        continue;
                    }
                    // Exited (or another state the poll reports): read again from the offsets.
                    Ok(_) => return Outcome::Ended,
                    Err(s) => return Outcome::Failed(s),
                }
            };
            let output = match next {
                Ok(Some(m)) => m.output,
                Ok(None) => return Outcome::Ended,
                Err(s) => return Outcome::Failed(s),
            };
            let (i, bytes) = match output {
                Some(process_output::Output::Stdout(b)) => (0, b),
                Some(process_output::Output::Stderr(b)) => (1, b),
                Some(process_output::Output::Exit(p)) => return Outcome::Exit(p),
                None => {
                    // An output kind this proto does not know (a newer guest): skipped, as
                    // protobuf readers skip unknown fields.
                    tracing::debug!(
                        provider = PROVIDER,
                        "skipping an unknown ProcessOutput variant"
                    );
                    continue;
                }
            };
            if bytes.is_empty() {
                continue;
            }
            self.note_tail(i, &bytes);
            self.offsets[i] += bytes.len() as i64;
            let event = if i == 0 {
                Event::Stdout(bytes)
            } else {
                Event::Stderr(bytes)
            };
            if tx.send(Ok(event)).await.is_err() {
                return Outcome::Dropped;
            }
        }
    }

    fn note_tail(&mut self, i: usize, bytes: &[u8]) {
        let limit = i64::try_from(self.config.max_log_bytes).unwrap_or(i64::MAX);
        let start = self.offsets[i];
        let end = start + bytes.len() as i64;
        if end <= limit {
            return;
        }
        let skip = usize::try_from((limit - start).max(0)).unwrap_or(0);
        let tail = &mut self.tails[i];
        let room = 256usize.saturating_sub(tail.len());
        tail.extend(bytes[skip..].iter().take(room));
    }

    /// Polls `GetProcess` until the process exited. `None` if the consumer went away.
    async fn poll_until_exited(&mut self) -> Option<Result<(), Error>> {
        let deadline = Instant::now() + self.config.exit_poll_timeout;
        let mut delay = Duration::from_millis(50);
        let mut failures = 0u32;
        loop {
            let tx = self.tx.clone();
            let r = tokio::select! {
                r = self.guest.get(&self.id) => r,
                () = tx.closed() => return None,
            };
            match r {
                Ok(p) => {
                    failures = 0;
                    match ProcessState::try_from(p.state) {
                        Ok(ProcessState::Exited) => return Some(Ok(())),
                        Ok(ProcessState::Running) => {}
                        _ => {
                            return Some(Err(protocol(format!(
                                "GetProcess({}) answered state {}",
                                self.id, p.state
                            ))));
                        }
                    }
                }
                Err(s) if error::resumable(&s) && failures < self.config.max_resumes => {
                    failures += 1;
                }
                Err(s) => return Some(Err(from_status(s, "exec", Stage::After))),
            }
            if Instant::now() + delay > deadline {
                return Some(Err(Error::new(
                    ErrorKind::Timeout(execseam_core::Deadline::Request),
                    format!(
                        "the output stream of {} ended without the exit message and the process still runs after {:?} of polling",
                        self.id, self.config.exit_poll_timeout
                    ),
                )
                .with_retry(Retry::Unsafe)
                .with_provider(PROVIDER)
                .with_operation("exec")));
            }
            if !self.sleep(delay).await {
                return None;
            }
            delay = (delay * 2).min(Duration::from_secs(1));
        }
    }

    /// The exit the guest reported, checked.
    fn exit_of(&self, p: Process) -> Result<Exit, Error> {
        if !p.process_id.is_empty() && p.process_id != self.id {
            return Err(protocol(format!(
                "the exit message names process {:?}, not {:?}",
                p.process_id, self.id
            )));
        }
        if ProcessState::try_from(p.state) != Ok(ProcessState::Exited) {
            return Err(protocol(format!(
                "the exit message of {} has state {}, not EXITED",
                self.id, p.state
            )));
        }
        if p.exit_code < 0 {
            return Err(protocol(format!(
                "the guest could not determine how {} ended (exit_code {})",
                self.id, p.exit_code
            )));
        }
        if let Some(e) = watchdog_end(&self.config, &p, "exec") {
            return Err(e);
        }
        for (i, name) in [(0, "stdout"), (1, "stderr")] {
            if self.tails[i].starts_with(crate::TRUNCATION_MARKER) {
                return Err(Error::new(
                    ErrorKind::OutputLimit,
                    format!(
                        "the guest truncated {name} at its {} byte log limit (the command exited with {})",
                        self.config.max_log_bytes, p.exit_code
                    ),
                )
                .with_provider(PROVIDER)
                .with_operation("exec"));
            }
        }
        tracing::debug!(provider = PROVIDER, process_id = %self.id, exit_code = p.exit_code, "exited");
        Ok(Exit::Code(p.exit_code))
    }
}

fn annotate(e: Error, what: &str) -> Error {
    let message = format!("{} ({what})", e.message());
    let mut out = Error::new(e.kind(), message)
        .with_retry(e.retry())
        .with_provider(PROVIDER)
        .with_operation("exec");
    if let Some(s) = e.status() {
        out = out.with_status(s);
    }
    if let Some(c) = e.code() {
        out = out.with_code(c.to_owned());
    }
    out
}

/// Feeds stdin, then closes it. The guest answers FAILED_PRECONDITION once the process exited
/// or closed its stdin (a command that does not read all of its input): that is not a failure.
/// Any other failure leaves the process waiting for input that will never come, so it is
/// recorded (the exec becomes an `Err`) and the process is killed.
async fn feed_stdin(guest: Guest, id: String, data: Bytes, slot: Arc<Mutex<Option<Error>>>) {
    let len = data.len();
    match guest.write_input(&id, data, true).await {
        Ok(n) if usize::try_from(n).ok() == Some(len) => {}
        Ok(n) => {
            tracing::debug!(provider = PROVIDER, process_id = %id, written = n, len, "stdin partly written");
        }
        Err(s) if s.code() == Code::FailedPrecondition && error::origin(&s) == Origin::Peer => {
            tracing::debug!(provider = PROVIDER, process_id = %id, "stdin not fully read: {}", s.message());
        }
        Err(s) => {
            let e = from_status(s, "write_input", Stage::After);
            let e = annotate(e, "stdin could not be delivered; the process was killed");
            *slot.lock().expect("stdin slot") = Some(e);
            let _ = guest.signal(&id, Signal::Kill).await;
        }
    }
}
impl Sandbox for AxExec {
    execseam_adapter_kit::accessors!(self => id: &self.id, ownership: &self.ownership);

    fn end(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async {
            Err(Error::unsupported(
                "an agent-substrate guest is ended by its task, not through its guest services",
            )
            .with_provider(PROVIDER)
            .with_operation("destroy"))
        })
    }
}
