//! Native process handles: the guest's own processes (`ateenv.v1alpha.ProcessService`), found
//! again by the caller's key through the adapter kit's [`Registry`] in the guest.
//!
//! What the guest gives (the proto's comments, `crates/proto-ax/proto/ateenv/v1alpha/guest.proto`;
//! agent-substrate/env `guest/process` as the research note process-handles §2.6 reads it):
//!
//! - `StartProcess` mints the id (`proc-<24 hex>`): a start is not idempotent, and there is no
//!   list RPC. So the first start under a key makes its registry entry (`mkdir`, atomic), starts
//!   the process and records its id there; a retry (or a concurrent start) finds the entry and
//!   the id, and starts nothing. The command waits at the wrapper's gate until its id is
//!   recorded, so it never runs unrecorded. A start whose answer was lost left an entry without
//!   an id: nothing can find the process (gated, it runs nothing, but that cannot be told from
//!   here), so every later start under that key is `Unsafe`, and status and list say `Unknown`.
//! - The guest runs 10 processes at most, the registry's execs included: a handle whose record
//!   finds no slot is ended at its gate and the start is `RateLimited` (see `withdraw`).
//! - `StreamProcessOutput{stdout_offset, stderr_offset, follow}`: byte offsets per stream, live,
//!   and after the exit; the exit message comes last. A read is one stream without `follow`; an
//!   attach is the exec's own follower (resumes a cut stream from the bytes it has), started at
//!   the offsets asked for and detaching, not killing, when dropped.
//! - Each stream is kept up to 10 MiB, then the guest writes its marker and drops the rest: a
//!   *truncation*, not a rolling window. Reading past the limit is `OutputLimit` (no retention
//!   is declared: nothing older is ever dropped).
//! - The guest forgets an exited process after 1 h, or beyond the 100 most recent: a handle whose
//!   process it no longer knows is `Expired` (nothing is left, so no retained offsets).
//! - `WriteProcessInput{process_id, data, close}` answers `bytes_written` but takes no offset,
//!   so exactly-once by offset is kept in the registry: `in` holds the accepted count and
//!   whether stdin is closed, and a write holds the lock directory `in.w` from before it is sent
//!   until its count is recorded. A write whose answer was lost leaves the lock: later writes
//!   are `Conflict` saying so (the bytes may or may not have arrived; never sent twice).
//! - `SignalProcess` signals the process group (every signal of [`Signal::ALL`]); `GetProcess`
//!   the state; a signal death is the guest's `128 + n` code.
//!
//! The command runs under the exec's [`detached`](crate::detached) wrapper, so its exit is its
//! own even when a background child keeps its output open (the guest waits for its output
//! copiers before it records an exit). The guest's watchdog SIGKILLs it at
//! [`AxConfig::process_timeout`](crate::AxConfig::process_timeout): `wait` and `attach` say
//! `Timeout(Command)` then, not 137 ([`watchdog_end`]).

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use execseam_adapter_kit::registry::{Known, Native, OffsetEvents, Registry, StdinOf};
use execseam_adapter_kit::retry::Stage;
use execseam_core::{
    Error, ErrorKind, Exec, Exit, Mechanism, ProcessCapabilities, ProcessHandle, ProcessInfo,
    ProcessRead, ProcessState, ProcessStream, Retry, Signal, StartKey, StartRequest, Started,
    StdinMode, StdinState, StdinWrite, StreamOffsets, Waited,
};
use tonic::Code;

use crate::PROVIDER;
use crate::client::Guest;
use crate::error::from_status;
use crate::exec::{AxExec, start_process, start_request, watchdog_end};
use crate::wire::{self, process_output};

/// What the guest's native handles do: see the [module docs](self).
pub const PROCESSES: ProcessCapabilities = ProcessCapabilities {
    mechanism: Mechanism::Native,
    ..execseam_adapter_kit::spool::SPOOLED
};

/// The registry in the guest.
const REGISTRY: Registry = Registry {
    root: "/tmp/.execseam/ax",
    prefix: "ax1:",
    provider: PROVIDER,
};

/// The most bytes of each stream one [`Processes::read`](execseam_core::Processes::read)
/// returns (the rest is counted in `written`): the spool's.
const READ_MAX: usize = execseam_adapter_kit::spool::DEFAULT_READ_MAX as usize;

/// How long a start that finds another start's entry waits for its process id.
const START_WAIT: Duration = Duration::from_secs(10);

/// Records a started process: `$1` entry, `$2` process id, `$3` stdin state `<accepted>
/// <closed>`, `$4` non-empty: take the stdin lock (the first bytes are being written).
const RECORD: &str = r#"cd -- "$1" || exit 125
[ -z "$4" ] || mkdir in.w || exit 125
printf '%s' "$3" >in && printf '%s' "$2" >id.tmp && mv -f id.tmp id && echo ax:recorded"#;

/// Before a stdin write at `$2` to the entry `$1`: `ax:go` (the lock is taken), `ax:state A C`
/// (another offset, or closed: not taken), `ax:busy A C` (a write holds the lock), `ax:none`.
const STDIN_BEGIN: &str = r#"[ -d "$1" ] || { echo ax:none; exit 0; }
s=$(cat "$1/in" 2>/dev/null) || s="0 0"
mkdir "$1/in.w" 2>/dev/null || { echo "ax:busy $s"; exit 0; }
e=$1; a=$2; set -- $s
if [ "$a" = "$1" ] && [ "$2" = 0 ]; then echo ax:go; else rmdir "$e/in.w"; echo "ax:state $s"; fi"#;

/// After a stdin write to the entry `$1`: records `$2` (`<accepted> <closed>`, empty: nothing
/// was written) and releases the lock.
const STDIN_END: &str = r#"if [ -n "$2" ]; then printf '%s' "$2" >"$1/in.tmp" && mv -f -- "$1/in.tmp" "$1/in" || exit 125; fi
rmdir "$1/in.w""#;

/// AX's native [`Processes`](execseam_core::Processes) for one guest.
pub struct AxProcesses<'a> {
    exec: &'a AxExec,
    /// The handles' sandbox: the address, and the actor behind a Substrate router.
    sandbox: String,
}

/// What the registry knows of a key.
enum Entry {
    /// No entry: never started, or released.
    None,
    /// An entry without a process id: a start in progress, or one whose answer was lost.
    Lost,
    /// The guest's process id.
    Id(String),
}

impl<'a> AxProcesses<'a> {
    pub(crate) fn new(exec: &'a AxExec, sandbox: String) -> AxProcesses<'a> {
        AxProcesses { exec, sandbox }
    }

    fn caps(&self) -> ProcessCapabilities {
        PROCESSES
    }

    fn handle_of(&self, key: &StartKey) -> ProcessHandle {
        REGISTRY.handle(&self.sandbox, key)
    }

    fn key_of(&self, handle: &ProcessHandle, op: &'static str) -> Result<StartKey, Error> {
        REGISTRY.key_of(&self.sandbox, handle, op)
    }

    fn guest(&self, op: &'static str) -> Result<Guest, Error> {
        self.exec.channel(op)
    }

    async fn entry(&self, key: &StartKey, op: &'static str) -> Result<Entry, Error> {
        Ok(match REGISTRY.get(self.exec, op, key, "id").await? {
            None => Entry::None,
            Some(None) => Entry::Lost,
            Some(Some(id)) if !id.is_empty() => Entry::Id(id),
            Some(Some(_)) => Entry::Lost,
        })
    }

    /// The process id of `key`: `NotFound` without an entry, `Protocol` (never retried) for a
    /// start whose answer was lost. The registry is read by an exec, which the guest refuses
    /// while 10 processes run (`RESOURCE_EXHAUSTED`): then a running process this client
    /// started or found under `key` is still `key`'s (a running process cannot be released, so
    /// its key cannot have started another), and its handle can still be signalled, read and
    /// waited on. Anything else stays the guest's refusal (`RateLimited`).
    async fn id_of(&self, key: &StartKey, op: &'static str) -> Result<String, Error> {
        let entry = match self.entry(key, op).await {
            Ok(entry) => entry,
            Err(e) if e.kind() == ErrorKind::RateLimited => {
                let known = self.known_ids().get(key).cloned();
                return match known {
                    Some(id) if self.state(&id, op).await? == ProcessState::Running => Ok(id),
                    _ => Err(e),
                };
            }
            Err(e) => return Err(e),
        };
        match entry {
            Entry::Id(id) => {
                self.known_ids().insert(key.clone(), id.clone());
                Ok(id)
            }
            Entry::None => Err(REGISTRY.not_started(op)),
            Entry::Lost => Err(lost(op)),
        }
    }

    fn known_ids(&self) -> std::sync::MutexGuard<'_, std::collections::HashMap<StartKey, String>> {
        self.exec.known_ids.lock().expect("known ids")
    }

    /// A guest error about process `id`: a process the guest no longer knows is `Expired`.
    fn guest_error(&self, status: tonic::Status, op: &'static str, id: &str) -> Error {
        if status.code() == Code::NotFound
            && crate::error::origin(&status) == crate::error::Origin::Peer
        {
            return REGISTRY.error(
                ErrorKind::Expired,
                op,
                format!(
                    "the guest no longer keeps process {id} (it forgets an exited process after 1 h, or beyond the 100 most recent): {}",
                    status.message()
                ),
            );
        }
        from_status(status, op, Stage::Before)
    }

    /// `GetProcess`.
    async fn process(&self, id: &str, op: &'static str) -> Result<wire::Process, Error> {
        self.guest(op)?
            .get(id)
            .await
            .map_err(|s| self.guest_error(s, op, id))
    }

    /// `GetProcess`: the state (a watchdog's kill is the guest's exit 137, as it reports it).
    async fn state(&self, id: &str, op: &'static str) -> Result<ProcessState, Error> {
        state_of(&self.process(id, op).await?, op)
    }

    async fn start_one(&self, request: StartRequest) -> Result<Started, Error> {
        let op = "start";
        let no_terminal = "the guest has no terminals (no PTY in ateenv.v1alpha)";
        let (key, handle) = REGISTRY.admit(
            &self.sandbox,
            &request,
            &crate::SIZE_LIMIT,
            Some(no_terminal),
        )?;
        let command = request.command;
        let guest = self.guest(op)?;
        if !REGISTRY.register(self.exec, op, &key).await? {
            return self.started_elsewhere(key, handle).await;
        }
        let data = command.stdin().clone();
        let close = request.stdin == StdinMode::Closed;
        let native_stdin = !close || !data.is_empty();
        let entry = REGISTRY.entry(&key);
        let start = start_request(&command, native_stdin, Some(&entry), self.exec.config());
        let id = match start_process(&guest, start, op).await {
            Ok(id) => id,
            Err(e) => {
                // Refused for certain (a missing program): the key may start again.
                if e.retry() != Retry::Unsafe {
                    let _ = REGISTRY.forget(self.exec, op, &key).await;
                }
                return Err(e);
            }
        };
        let first_write = native_stdin && (!data.is_empty() || close);
        let stdin_state = if native_stdin { "0 0" } else { "0 1" };
        let mut tries = 0;
        loop {
            let lock = if first_write { "lock" } else { "" };
            match REGISTRY
                .run(
                    self.exec,
                    op,
                    RECORD,
                    &[&REGISTRY.entry(&key), &id, stdin_state, lock],
                )
                .await
            {
                Ok(a) if a == "ax:recorded" => {
                    self.known_ids().insert(key.clone(), id.clone());
                    break;
                }
                // The guest's 10 running processes, this one the 10th: the record's exec is
                // refused, and the command waits at its gate, not run.
                Err(e) if e.kind() == ErrorKind::RateLimited => {
                    return Err(self.withdraw(&guest, &key, &id, e).await);
                }
                Ok(_) | Err(_) if tries < 2 => tries += 1,
                Ok(_) => return Err(unrecorded(op, &id, "no answer".into())),
                Err(e) => return Err(unrecorded(op, &id, e.to_string())),
            }
        }
        if first_write {
            self.send_stdin(&guest, &key, &id, 0, data, close).await?;
        }
        Ok(Started {
            handle,
            fresh: true,
        })
    }

    /// Ends process `id`, held at its gate (it ran nothing), and forgets `key`'s entry once
    /// the guest has a slot again for the exec that does it: the start is then `RateLimited`
    /// and safe to retry.
    async fn withdraw(&self, guest: &Guest, key: &StartKey, id: &str, refused: Error) -> Error {
        let op = "start";
        let _ = guest.signal(id, wire::Signal::Kill).await;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            match REGISTRY.forget(self.exec, op, key).await {
                Ok(_) => {
                    return REGISTRY
                        .error(
                            ErrorKind::RateLimited,
                            op,
                            format!(
                                "the guest runs 10 processes, its limit, with this one: recording it needs one more, so it was ended before it ran ({refused})"
                            ),
                        )
                        .with_retry(Retry::SAFE);
                }
                Err(e)
                    if e.kind() == ErrorKind::RateLimited
                        && tokio::time::Instant::now() < deadline =>
                {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => {
                    return REGISTRY.error(
                        ErrorKind::RateLimited,
                        op,
                        format!(
                            "the guest runs 10 processes, its limit: this one was ended before it ran, but its key could not be freed ({e}); release it to start again"
                        ),
                    );
                }
            }
        }
    }

    /// A start that found `key`'s entry: the first start's process, once it recorded its id.
    async fn started_elsewhere(
        &self,
        key: StartKey,
        handle: ProcessHandle,
    ) -> Result<Started, Error> {
        let op = "start";
        let deadline = tokio::time::Instant::now() + START_WAIT;
        loop {
            match self.entry(&key, op).await? {
                Entry::Id(_) => {
                    return Ok(Started {
                        handle,
                        fresh: false,
                    });
                }
                // Released between the two looks: the caller may start again.
                Entry::None => {
                    return Err(REGISTRY.error(
                        ErrorKind::Conflict,
                        op,
                        "the process under this key was released while it was being started again",
                    ));
                }
                Entry::Lost if tokio::time::Instant::now() >= deadline => {
                    return Err(lost(op).with_retry(Retry::Unsafe));
                }
                Entry::Lost => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    /// Sends `data` (then `close`) as the write at `at`, whose lock the caller holds, and
    /// records the new count.
    async fn send_stdin(
        &self,
        guest: &Guest,
        key: &StartKey,
        id: &str,
        at: u64,
        data: Bytes,
        close: bool,
    ) -> Result<StdinState, Error> {
        let op = "write_stdin";
        let entry = REGISTRY.entry(key);
        let len = data.len() as u64;
        match guest.write_input(id, data, close).await {
            Ok(n) if u64::try_from(n).ok() == Some(len) => {
                let state = StdinState {
                    accepted: at + len,
                    closed: close,
                };
                let record = format!("{} {}", state.accepted, u8::from(close));
                REGISTRY
                    .run(self.exec, op, STDIN_END, &[&entry, &record])
                    .await?;
                Ok(state)
            }
            Ok(n) => Err(Error::protocol(format!(
                "the guest wrote {n} of {len} stdin bytes of {id}; stdin's state is now unknown"
            ))
            .with_provider(PROVIDER)
            .with_operation(op)),
            // Refused (exited, closed, no stdin): nothing was written.
            Err(s) if s.code() == Code::FailedPrecondition => {
                let _ = REGISTRY.run(self.exec, op, STDIN_END, &[&entry, ""]).await;
                Err(REGISTRY.error(
                    ErrorKind::Conflict,
                    op,
                    format!("stdin is closed or the process exited: {}", s.message()),
                ))
            }
            // Refused with an answer (or never connected): nothing was written, the lock goes.
            // Lost on the way: the bytes may have arrived, so the lock stays (see the module
            // docs) and the write is `Unsafe`, whatever the transport error says.
            Err(s) => {
                use crate::error::{Origin, origin};
                let answered = matches!(origin(&s), Origin::Peer | Origin::Connect);
                let e = self.guest_error(s, op, id);
                if e.kind() == ErrorKind::Expired || (answered && e.retry() != Retry::Unsafe) {
                    let _ = REGISTRY.run(self.exec, op, STDIN_END, &[&entry, ""]).await;
                    return Err(e);
                }
                Err(e.with_retry(Retry::Unsafe))
            }
        }
    }

    /// The recorded stdin state of `key` (`None` without an entry).
    async fn stdin_state(
        &self,
        key: &StartKey,
        op: &'static str,
    ) -> Result<Option<StdinState>, Error> {
        Ok(match REGISTRY.get(self.exec, op, key, "in").await? {
            Some(Some(s)) => parse_stdin(&s),
            _ => None,
        })
    }

    async fn write_at(&self, handle: &ProcessHandle, w: StdinWrite) -> Result<StdinState, Error> {
        let op = "write_stdin";
        let key = self.key_of(handle, op)?;
        let id = self.id_of(&key, op).await?;
        let at = w.at.to_string();
        let answer = REGISTRY
            .run(self.exec, op, STDIN_BEGIN, &[&REGISTRY.entry(&key), &at])
            .await?;
        let (verb, rest) = answer.split_once(' ').unwrap_or((answer.as_str(), ""));
        match verb {
            "ax:go" => {
                let guest = self.guest(op)?;
                return self
                    .send_stdin(&guest, &key, &id, w.at, w.data, w.close)
                    .await;
            }
            "ax:none" => {
                return Err(REGISTRY.error(ErrorKind::NotFound, op, "released while writing"));
            }
            "ax:busy" => {
                return Err(REGISTRY.error(
                    ErrorKind::Conflict,
                    op,
                    "another stdin write holds this process's stdin (or its answer was lost: whether its bytes arrived is unknown)",
                ));
            }
            "ax:state" => {}
            _ => {
                return Err(Error::protocol("the stdin script gave no answer")
                    .with_provider(PROVIDER)
                    .with_operation(op));
            }
        }
        let Some(st) = parse_stdin(rest) else {
            return Err(Error::protocol("a malformed stdin record")
                .with_provider(PROVIDER)
                .with_operation(op));
        };
        REGISTRY.stale_write(st, &w, op)
    }

    async fn read_at(
        &self,
        handle: &ProcessHandle,
        from: StreamOffsets,
    ) -> Result<ProcessRead, Error> {
        let op = "read";
        let key = self.key_of(handle, op)?;
        let id = self.id_of(&key, op).await?;
        let guest = self.guest(op)?;
        let limit = self.exec.config().max_log_bytes;
        let at = [from.stdout, from.stderr].map(|o| i64::try_from(o).unwrap_or(i64::MAX));
        let mut stream = guest
            .bounded(
                "StreamProcessOutput",
                guest.output(&id, at[0], at[1], false),
            )
            .await
            .map_err(|s| self.guest_error(s, op, &id))?;
        let mut kept = [BytesMut::new(), BytesMut::new()];
        // Where each stream's next byte is (the guest's count, its marker included).
        let mut end = [from.stdout, from.stderr];
        let mut exit = None;
        loop {
            let next = tokio::time::timeout(self.exec.config().idle_timeout, stream.message())
                .await
                .map_err(|_| {
                    Error::new(
                        ErrorKind::Timeout(execseam_core::Deadline::Request),
                        "StreamProcessOutput without follow did not end",
                    )
                    .with_provider(PROVIDER)
                    .with_operation(op)
                })?
                .map_err(|s| self.guest_error(s, op, &id))?;
            let Some(message) = next else { break };
            let (i, data) = match message.output {
                Some(process_output::Output::Stdout(b)) => (0, b),
                Some(process_output::Output::Stderr(b)) => (1, b),
                Some(process_output::Output::Exit(p)) => {
                    exit = Some(p);
                    continue;
                }
                None => continue,
            };
            // Past the guest's limit comes only its marker, never output: a read from there is
            // `OutputLimit`; a read that reaches it stops before it (`written` counts the
            // marker, so the reader knows there is more and reads again from the limit).
            if data.is_empty() {
                continue;
            }
            if end[i] >= limit {
                return Err(truncated(op, i, limit));
            }
            let room = limit.saturating_sub(end[i]).min(data.len() as u64) as usize;
            if kept[i].len() as u64 + from_of(from, i) == end[i] {
                let keep = room.min(READ_MAX.saturating_sub(kept[i].len()));
                kept[i].extend_from_slice(&data[..keep]);
            }
            end[i] += data.len() as u64;
        }
        let state = match exit {
            Some(p) => state_of(&p, op)?,
            None => ProcessState::Running,
        };
        let [stdout, stderr] = kept.map(BytesMut::freeze);
        Ok(ProcessRead {
            from,
            stdout,
            stderr,
            state,
            written: StreamOffsets::new(end[0], end[1]),
        })
    }

    async fn attach_at<'s>(
        &'s self,
        handle: &ProcessHandle,
        from: StreamOffsets,
    ) -> Result<ProcessStream<'s>, Error> {
        let op = "attach";
        let key = self.key_of(handle, op)?;
        let id = self.id_of(&key, op).await?;
        // Known to the guest (an expired process is a typed error, before any stream).
        self.state(&id, op).await?;
        let guest = self.guest(op)?;
        let at = [from.stdout, from.stderr].map(|o| i64::try_from(o).unwrap_or(i64::MAX));
        let (rx, _) = self.exec.follow(guest, id, at, false, Bytes::new());
        Ok(ProcessStream::new(OffsetEvents::new(rx, from)))
    }

    async fn wait_for(&self, handle: &ProcessHandle, within: Duration) -> Result<Waited, Error> {
        let op = "wait";
        let key = self.key_of(handle, op)?;
        let id = self.id_of(&key, op).await?;
        let deadline = tokio::time::Instant::now() + within;
        let mut delay = Duration::from_millis(50);
        loop {
            let p = self.process(&id, op).await?;
            if let Some(e) = watchdog_end(self.exec.config(), &p, op) {
                return Err(e);
            }
            if let ProcessState::Exited(exit) = state_of(&p, op)? {
                return Ok(Waited::Exited(exit));
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(Waited::Running);
            }
            tokio::time::sleep(delay.min(deadline - now)).await;
            delay = (delay * 2).min(Duration::from_millis(500));
        }
    }

    async fn send(&self, handle: &ProcessHandle, signal: Signal) -> Result<(), Error> {
        let op = "signal";
        let key = self.key_of(handle, op)?;
        let id = self.id_of(&key, op).await?;
        let sig = wire::Signal::try_from(signal.number()).map_err(|_| {
            REGISTRY.error(
                ErrorKind::Unsupported,
                op,
                format!("the guest has no signal {}", signal.name()),
            )
        })?;
        match self.guest(op)?.signal(&id, sig).await {
            Ok(_) => Ok(()),
            // It already exited: nothing to signal.
            Err(s) if s.code() == Code::FailedPrecondition => Ok(()),
            Err(s) => Err(self.guest_error(s, op, &id)),
        }
    }

    async fn status_of(&self, handle: &ProcessHandle) -> Result<ProcessInfo, Error> {
        REGISTRY.status(self, handle).await
    }

    async fn list_all(&self) -> Result<Vec<ProcessInfo>, Error> {
        REGISTRY.list(self).await
    }

    async fn release_one(&self, handle: &ProcessHandle) -> Result<(), Error> {
        let op = "release";
        let key = self.key_of(handle, op)?;
        let state = match self.entry(&key, op).await? {
            Entry::Id(id) => match self.state(&id, op).await {
                Ok(s) => Some(s),
                Err(e) if e.kind() == ErrorKind::Expired => None,
                Err(e) => return Err(e),
            },
            Entry::None | Entry::Lost => None,
        };
        REGISTRY.release(self.exec, op, &key, state).await?;
        self.known_ids().remove(&key);
        Ok(())
    }
}

execseam_adapter_kit::forward_processes!(AxProcesses<'_>);

impl Native for AxProcesses<'_> {
    fn exec(&self) -> &dyn Exec {
        self.exec
    }

    fn sandbox(&self) -> &str {
        &self.sandbox
    }

    /// A start whose answer was lost, or a process the guest forgot: `Unknown`.
    fn state<'s>(&'s self, key: &'s StartKey, op: &'static str, _registered: bool) -> Known<'s> {
        Box::pin(async move {
            Ok(Some(match self.entry(key, op).await? {
                Entry::None => return Ok(None),
                Entry::Lost => ProcessState::Unknown,
                Entry::Id(id) => match self.state(&id, op).await {
                    Ok(s) => s,
                    Err(e) if e.kind() == ErrorKind::Expired => ProcessState::Unknown,
                    Err(e) => return Err(e),
                },
            }))
        })
    }

    fn stdin<'s>(&'s self, key: &'s StartKey, op: &'static str) -> StdinOf<'s> {
        Box::pin(self.stdin_state(key, op))
    }
}

/// The state of a guest `Process`; a signalled process is the guest's `128 + n` code.
fn state_of(p: &wire::Process, op: &'static str) -> Result<ProcessState, Error> {
    match wire::ProcessState::try_from(p.state) {
        Ok(wire::ProcessState::Running) => Ok(ProcessState::Running),
        Ok(wire::ProcessState::Exited) if p.exit_code >= 0 => {
            Ok(ProcessState::Exited(Exit::Code(p.exit_code)))
        }
        _ => Err(Error::protocol(format!(
            "process {} has state {} and exit code {}",
            p.process_id, p.state, p.exit_code
        ))
        .with_provider(PROVIDER)
        .with_operation(op)),
    }
}

fn from_of(from: StreamOffsets, i: usize) -> u64 {
    if i == 0 { from.stdout } else { from.stderr }
}

/// `<accepted> <closed 0|1>`.
fn parse_stdin(s: &str) -> Option<StdinState> {
    let (a, c) = s.trim().split_once(' ')?;
    Some(StdinState {
        accepted: a.parse().ok()?,
        closed: c == "1",
    })
}

fn lost(op: &'static str) -> Error {
    Error::protocol(
        "a start under this key did not record the guest's process id (its answer was lost): the command may have run, and the guest has no list to find it",
    )
    .with_retry(Retry::Never)
    .with_provider(PROVIDER)
    .with_operation(op)
}

fn unrecorded(op: &'static str, id: &str, why: String) -> Error {
    Error::new(
        ErrorKind::Unavailable,
        format!("process {id} started but its id could not be recorded in the guest: {why}"),
    )
    .with_retry(Retry::Unsafe)
    .with_provider(PROVIDER)
    .with_operation(op)
}

fn truncated(op: &'static str, stream: usize, limit: u64) -> Error {
    Error::new(
        ErrorKind::OutputLimit,
        format!(
            "the guest truncated {} at its {limit} byte log limit",
            ["stdout", "stderr"][stream]
        ),
    )
    .with_provider(PROVIDER)
    .with_operation(op)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdin_records_parse() {
        assert_eq!(
            parse_stdin("13 1"),
            Some(StdinState {
                accepted: 13,
                closed: true
            })
        );
        assert_eq!(parse_stdin("garbage"), None);
    }
}
