//! Native process handles: the task command router's own execs, addressed by an `exec_id`
//! derived from the caller's key.
//!
//! What Modal gives (modal 1.6.4, `modal/sandbox/_common.py` `exec_via_tcr`,
//! `modal/sandbox/_task_command_router_client.py`, `modal/io_streams.py`; the proto's comments in
//! modal-labs/modal-client `modal_proto/task_command_router.proto`):
//!
//! - `TaskExecStart` is idempotent on `exec_id`: the client picks it ("a combination of
//!   idempotency key/process identifier") and repeats the call with it on transient errors. Here
//!   it is a UUID-shaped hash of the sandbox and the key, so a retried start (its answer lost,
//!   the caller restarted) is one exec.
//! - `TaskExecStdioRead{offset}` per stream: byte-exact, from any offset (the client resumes at
//!   the bytes it has, `_stream_stdio_with_retries`), live, and after the exit; the stream ends OK
//!   at the end of the output. Exec output carries no `starting_offset` (unlike the sandbox's own
//!   stdio) and Modal documents no limit ("all streams are buffered in memory, waiting to be
//!   consumed", modal.com/docs/guide/sandbox-spawn): retention is declared `None`.
//! - `TaskExecStdinWrite{offset, data, eof}`: exactly once by offset; `TaskExecStdinStatus`
//!   the bytes accepted and whether it is closed.
//! - `TaskExecWait`/`TaskExecPoll`: a code or a signal, exact ([`Exit::Signal`]).
//! - No list, signal or kill RPC, and no way to learn whether a start was the first. So a tiny
//!   registry in the sandbox (`/tmp/.execseam/m/<key>/`, made by `mkdir`, atomic, through an
//!   ordinary exec) says which start was fresh and what [`Processes::list`] lists; the command
//!   runs under a one-line `sh` that records its pid there and `exec`s it as the leader of its
//!   own process group (`setsid` when the router did not make it one), and a signal is `kill`
//!   to that group through another exec.
//!
//! Terminals are Modal's own: `TaskExecStart` with `pty_info` (what modal 1.6.4's
//! `Sandbox.exec(pty=True)` sends, `default_pty_info()` in `modal/sandbox/_common.py`: the size,
//! `TERM`, `PTY_TYPE_SHELL`, `no_terminate_on_idle_stdin`), so the output is the exec's stdout
//! by offset like any handle's: replay from any offset and attach from any client or process
//! (`terminal_reattach`), not the recorder. Modal has no resize RPC: a resize is `stty -F` on the
//! command's terminal (`/proc/<pid>/fd/0`) through another exec, which sends the foreground job
//! SIGWINCH as any window change does.
//!
//! Release forgets the registry entry (status and list say `NotFound`); Modal keeps the exec
//! itself (no call deletes one), so a key once used in a sandbox cannot start a new command
//! there: such a start is [`Conflict`](ErrorKind::Conflict).

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use execseam_adapter_kit::registry::{Known, Native, OffsetEvents, Registry, StdinOf};
use execseam_adapter_kit::retry::Stage;
use execseam_core::{
    Command, Error, ErrorKind, Exec, Exit, Mechanism, ProcessCapabilities, ProcessHandle,
    ProcessInfo, ProcessRead, ProcessState, ProcessStream, Sandbox, Signal, StartKey, StartRequest,
    Started, StdinMode, StdinState, StdinWrite, StreamOffsets, TerminalSize, Waited,
};
use tonic::Code;

use crate::PROVIDER;
use crate::error::{self, from_status};
use crate::exec::ModalExec;
use crate::wire::tcr;

/// What Modal's native handles do: see the [module docs](self).
pub const PROCESSES: ProcessCapabilities = ProcessCapabilities {
    mechanism: Mechanism::Native,
    // The router's `TaskExecWait` tells a signal from a code.
    exact_signal_exit: true,
    // Modal's own PTY execs, read by offset like any exec.
    terminal: true,
    terminal_reattach: true,
    // Otherwise what the spool gives: idempotent start, stdin, every signal to the group,
    // replay, no declared retention, list.
    ..execseam_adapter_kit::spool::SPOOLED
};

/// The registry in the sandbox (the kit's: one directory per key).
const REGISTRY: Registry = Registry {
    root: "/tmp/.execseam/m",
    prefix: "modal1:",
    provider: PROVIDER,
};

/// The most bytes of each stream one [`Processes::read`] returns.
const READ_MAX: usize = 1 << 20;

/// How long a read of a running command waits for more output before it answers.
const READ_QUIET: Duration = Duration::from_millis(100);

/// The command's wrapper: `$1` the entry, then argv. Records its pid, then becomes the command
/// as the leader of a process group (it already is one when the router made it one).
const WRAP: &str = r#"d=$1; shift
if [ -t 0 ]; then : >"$d/tty" || exit 125; fi
printf '%s\n' "$$" >"$d/pid.tmp" && mv -f -- "$d/pid.tmp" "$d/pid" || exit 125
g=$(sed 's/^.*) //' "/proc/$$/stat" | cut -d' ' -f3)
if [ "$g" != "$$" ] && command -v setsid >/dev/null 2>&1; then exec setsid "$@"; fi
exec "$@""#;

/// A signal: `$1` the entry, `$2` the signal name. Prints `modal:sent` or `modal:none`.
const SIGNAL: &str = r#"p=$(cat "$1/pid" 2>/dev/null) || { echo modal:none; exit 0; }
g=$(sed 's/^.*) //' "/proc/$p/stat" 2>/dev/null | cut -d' ' -f3)
if [ "$g" = "$p" ]; then kill -s "$2" -- "-$p" 2>/dev/null || kill -s "$2" "-$p" 2>/dev/null
else kill -s "$2" "$p" 2>/dev/null; fi
echo modal:sent"#;

/// A resize: `$1` the entry, `$2` rows, `$3` columns. Prints `modal:sized`, `modal:gone` (it
/// exited), `modal:notty` or `modal:none` (no such entry). Waits briefly for the wrapper to
/// record the pid of a command just started.
const RESIZE: &str = r#"[ -d "$1" ] || { echo modal:none; exit 0; }
i=0; while [ ! -e "$1/pid" ] && [ $i -lt 40 ]; do sleep 0.05; i=$((i+1)); done
[ -e "$1/tty" ] || { echo modal:notty; exit 0; }
p=$(cat "$1/pid") && t=$(readlink "/proc/$p/fd/0" 2>/dev/null) && [ -c "$t" ] &&
  stty -F "$t" rows "$2" cols "$3" 2>/dev/null && { echo modal:sized; exit 0; }
echo modal:gone"#;

/// A stable 128-bit FNV-1a of `parts`, shaped as a version-8 UUID (RFC 9562 "custom").
fn exec_id(sandbox: &str, key: &StartKey) -> String {
    let hash = |seed: u64| {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed;
        for b in sandbox.bytes().chain([0]).chain(key.as_str().bytes()) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        h
    };
    let (a, b) = (hash(0x6d6f_6461_6c31), hash(0x6578_6563_7365_616d));
    let a = (a & !0xf000) | 0x8000; // version 8
    let b = (b & !(0b11 << 62)) | (0b10 << 62); // variant 10
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}

/// Modal's native [`Processes`] for one sandbox.
pub struct ModalProcesses<'a> {
    exec: &'a ModalExec,
}

impl<'a> ModalProcesses<'a> {
    pub(crate) fn new(exec: &'a ModalExec) -> ModalProcesses<'a> {
        ModalProcesses { exec }
    }

    fn caps(&self) -> ProcessCapabilities {
        PROCESSES
    }

    fn handle_of(&self, key: &StartKey) -> ProcessHandle {
        REGISTRY.handle(Sandbox::id(self.exec), key)
    }

    fn error(&self, kind: ErrorKind, op: &'static str, message: impl Into<String>) -> Error {
        REGISTRY.error(kind, op, message)
    }

    fn key_of(&self, handle: &ProcessHandle, op: &'static str) -> Result<StartKey, Error> {
        REGISTRY.key_of(Sandbox::id(self.exec), handle, op)
    }

    fn entry(key: &StartKey) -> String {
        REGISTRY.entry(key)
    }

    /// Runs `script` with `args` through an ordinary exec; its stdout.
    async fn script(&self, op: &'static str, script: &str, args: &[&str]) -> Result<String, Error> {
        REGISTRY.run(self.exec, op, script, args).await
    }

    /// Runs `script` with `args` through an ordinary exec; its answer mapped by `answers`.
    async fn ask<T: Copy>(
        &self,
        op: &'static str,
        script: &str,
        args: &[String],
        answers: &[(&str, T)],
    ) -> Result<T, Error> {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        REGISTRY.ask(self.exec, op, script, &args, answers).await
    }

    /// The router, the task id and the exec id of `key`.
    async fn target(
        &self,
        key: &StartKey,
        op: &'static str,
    ) -> Result<(std::sync::Arc<crate::client::Router>, String, String), Error> {
        let router = self.exec.router(op).await?;
        let task = self.exec.task_id().unwrap_or_default().to_owned();
        Ok((router, task, exec_id(Sandbox::id(self.exec), key)))
    }

    /// `TaskExecPoll`: the state (`NotFound` for an exec the router does not know).
    async fn poll(&self, key: &StartKey, op: &'static str) -> Result<ProcessState, Error> {
        use tcr::task_exec_poll_response::ExitStatus as P;
        let (router, task, id) = self.target(key, op).await?;
        let p = router
            .poll(&task, &id)
            .await
            .map_err(|s| from_status(s, op, Stage::Before))?;
        Ok(match p.exit_status {
            None => ProcessState::Running,
            Some(P::Code(c)) => ProcessState::Exited(Exit::Code(c)),
            Some(P::Signal(n)) => ProcessState::Exited(Exit::Signal(n)),
        })
    }

    async fn start_one(&self, request: StartRequest) -> Result<Started, Error> {
        let op = "start";
        let (key, handle) =
            REGISTRY.admit(Sandbox::id(self.exec), &request, &crate::SIZE_LIMIT, None)?;
        let command = request.command;
        let entry = Self::entry(&key);
        // A retry finds the entry (any failure of a start may be retried).
        let safe = execseam_adapter_kit::retry::repeatable;
        // Whether Modal already knows this key's exec id, asked BEFORE registering: a concurrent
        // start under the same key registers after this one and only then starts the (same)
        // exec, so a fresh registration never mistakes that start for an earlier run.
        let ran_before = match self.poll(&key, op).await {
            Err(e) if e.kind() == ErrorKind::NotFound => false,
            Err(e) => return Err(e),
            Ok(_) => true,
        };
        let fresh = REGISTRY.register(self.exec, op, &key).await?;
        if fresh && ran_before {
            let _ = self.script(op, "rmdir -- \"$1\"", &[&entry]).await;
            return Err(self.error(
                ErrorKind::Conflict,
                op,
                "this key already ran a command in this sandbox (Modal keeps every exec id): start under a new key",
            ));
        }
        let mut argv = vec![
            "sh".to_owned(),
            "-c".to_owned(),
            WRAP.to_owned(),
            "execseam-modal".to_owned(),
            entry,
        ];
        argv.extend(command.argv().iter().cloned());
        let mut b = Command::builder(argv)
            .tool(command.tool().clone())
            .envs(command.env().iter().map(|(k, v)| (k.clone(), v.clone())));
        if let Some(w) = command.workdir() {
            b = b.workdir(w);
        }
        let (router, _, id) = self.target(&key, op).await?;
        let mut start = self.exec.start_request(id.clone(), &b.build()?, None);
        if let Some(size) = request.terminal {
            let term = command.env().iter().find(|(k, _)| k.as_str() == "TERM");
            start.pty_info = Some(crate::wire::api::PtyInfo {
                enabled: true,
                winsz_rows: u32::from(size.rows),
                winsz_cols: u32::from(size.cols),
                env_term: term
                    .map_or("xterm-256color", |(_, v)| v.as_str())
                    .to_owned(),
                pty_type: crate::wire::api::pty_info::PtyType::Shell as i32,
                no_terminate_on_idle_stdin: true,
                ..Default::default()
            });
        }
        // Idempotent on exec_id: a start whose answer was lost is safe to repeat.
        self.exec
            .exec_start(&router, start, op)
            .await
            .map_err(safe)?;
        // The first stdin bytes (again on a retried start: the router drops the overlap).
        let close = request.stdin == StdinMode::Closed && request.terminal.is_none();
        if !command.stdin().is_empty() || close {
            let write = StdinWrite {
                at: 0,
                data: command.stdin().clone(),
                close,
            };
            match self.stdin_at(&key, write).await {
                Ok(()) => {}
                // Already closed or exited: an earlier start delivered it, or nobody reads.
                Err(e) if e.kind() == ErrorKind::Conflict => {}
                Err(e) => return Err(safe(e)),
            }
        }
        Ok(Started { handle, fresh })
    }

    /// `TaskExecStdinWrite` at `write.at`; a closed or exited stdin is `Conflict`.
    async fn stdin_at(&self, key: &StartKey, write: StdinWrite) -> Result<(), Error> {
        let op = "write_stdin";
        let (router, task, id) = self.target(key, op).await?;
        let req = tcr::TaskExecStdinWriteRequest {
            task_id: task,
            exec_id: id,
            offset: write.at,
            data: write.data,
            eof: write.close,
        };
        let mut failures = 0;
        loop {
            match router.stdin_write(req.clone()).await {
                Ok(()) => return Ok(()),
                Err(s) if s.code() == Code::FailedPrecondition => {
                    return Err(self.error(
                        ErrorKind::Conflict,
                        op,
                        format!("stdin is closed or the process exited: {}", s.message()),
                    ));
                }
                // Offset-addressed: repeating a write is safe (the router drops the overlap).
                Err(s) if failures < 3 && error::transient(&s) => {
                    failures += 1;
                    tokio::time::sleep(Duration::from_millis(20 << failures)).await;
                }
                Err(s) => return Err(from_status(s, op, Stage::Before)),
            }
        }
    }

    async fn stdin_state(&self, key: &StartKey, op: &'static str) -> Result<StdinState, Error> {
        let (router, task, id) = self.target(key, op).await?;
        let st = router
            .stdin_status(&task, &id)
            .await
            .map_err(|s| from_status(s, op, Stage::Before))?;
        Ok(StdinState {
            accepted: st.num_bytes_written,
            closed: st.closed,
        })
    }

    async fn write_at(&self, handle: &ProcessHandle, w: StdinWrite) -> Result<StdinState, Error> {
        let op = "write_stdin";
        let key = self.key_of(handle, op)?;
        let st = self.stdin_state(&key, op).await?;
        let len = w.data.len() as u64;
        if w.at == st.accepted && !st.closed {
            self.stdin_at(&key, w.clone()).await?;
            return Ok(StdinState {
                accepted: w.at + len,
                closed: w.close,
            });
        }
        REGISTRY.stale_write(st, &w, op)
    }

    /// One stream from `from`: at most [`READ_MAX`] bytes kept, and the offset where it was
    /// left. `to_end`: read to the stream's end (counting bytes past the cap); otherwise stop
    /// after [`READ_QUIET`] without a message.
    async fn drain(
        &self,
        key: &StartKey,
        fd: tcr::TaskExecStdioFileDescriptor,
        from: u64,
        to_end: bool,
    ) -> Result<(Bytes, u64), Error> {
        let op = "read";
        let (router, task, id) = self.target(key, op).await?;
        router
            .refresh_if_due()
            .await
            .map_err(|s| from_status(s, op, Stage::Before))?;
        let msg = tcr::TaskExecStdioReadRequest {
            task_id: task,
            exec_id: id,
            offset: from,
            file_descriptor: fd as i32,
        };
        let mut stream = router
            .stdio_read(msg)
            .await
            .map_err(|s| from_status(s, op, Stage::Before))?;
        let (mut kept, mut end) = (BytesMut::new(), from);
        loop {
            let next = if to_end {
                stream.message().await
            } else {
                match tokio::time::timeout(READ_QUIET, stream.message()).await {
                    Ok(n) => n,
                    Err(_) => return Ok((kept.freeze(), end)),
                }
            };
            match next {
                Ok(Some(m)) => {
                    end += m.data.len() as u64;
                    let room = READ_MAX.saturating_sub(kept.len());
                    kept.extend_from_slice(&m.data[..m.data.len().min(room)]);
                    if !to_end && kept.len() >= READ_MAX {
                        return Ok((kept.freeze(), end));
                    }
                }
                Ok(None) => return Ok((kept.freeze(), end)),
                Err(s) => return Err(from_status(s, op, Stage::Before)),
            }
        }
    }

    async fn read_at(
        &self,
        handle: &ProcessHandle,
        from: StreamOffsets,
    ) -> Result<ProcessRead, Error> {
        let op = "read";
        let key = self.key_of(handle, op)?;
        let state = self.poll(&key, op).await?;
        let to_end = matches!(state, ProcessState::Exited(_));
        use tcr::TaskExecStdioFileDescriptor as Fd;
        let (out, err) = tokio::join!(
            self.drain(&key, Fd::Stdout, from.stdout, to_end),
            self.drain(&key, Fd::Stderr, from.stderr, to_end)
        );
        let ((stdout, out_end), (stderr, err_end)) = (out?, err?);
        Ok(ProcessRead {
            from,
            stdout,
            stderr,
            state,
            written: StreamOffsets::new(out_end, err_end),
        })
    }

    async fn attach_at<'s>(
        &'s self,
        handle: &ProcessHandle,
        from: StreamOffsets,
    ) -> Result<ProcessStream<'s>, Error> {
        let key = self.key_of(handle, "attach")?;
        let (router, _, id) = self.target(&key, "attach").await?;
        let rx = self
            .exec
            .follow(router, id, [from.stdout, from.stderr], None, None);
        Ok(ProcessStream::new(OffsetEvents::new(rx, from)))
    }

    async fn wait_for(&self, handle: &ProcessHandle, within: Duration) -> Result<Waited, Error> {
        let op = "wait";
        let key = self.key_of(handle, op)?;
        let (router, task, id) = self.target(&key, op).await?;
        let deadline = tokio::time::Instant::now() + within;
        let mut failures = 0;
        loop {
            let answer = tokio::time::timeout_at(deadline, router.wait(&task, &id)).await;
            use tcr::task_exec_wait_response::ExitStatus as W;
            match answer {
                Err(_) => {
                    // The deadline: one poll decides (an exit at the deadline is an exit).
                    return match self.poll(&key, op).await? {
                        ProcessState::Exited(exit) => Ok(Waited::Exited(exit)),
                        _ => Ok(Waited::Running),
                    };
                }
                Ok(Ok(r)) => {
                    return match r.exit_status {
                        Some(W::Code(c)) => Ok(Waited::Exited(Exit::Code(c))),
                        Some(W::Signal(n)) => Ok(Waited::Exited(Exit::Signal(n))),
                        None => Err(error::protocol(
                            op,
                            "TaskExecWait answered without a code or a signal",
                        )),
                    };
                }
                Ok(Err(s)) if failures < 3 && error::resumable(&s) => {
                    failures += 1;
                    tokio::time::sleep(Duration::from_millis(50 << failures)).await;
                }
                Ok(Err(s)) => return Err(from_status(s, op, Stage::Before)),
            }
        }
    }

    async fn send(&self, handle: &ProcessHandle, signal: Signal) -> Result<(), Error> {
        let op = "signal";
        let key = self.key_of(handle, op)?;
        if let ProcessState::Exited(_) = self.poll(&key, op).await? {
            return Ok(());
        }
        let args = [Self::entry(&key), signal.name().to_owned()];
        let answers = [("modal:sent", true), ("modal:none", false)];
        if self.ask(op, SIGNAL, &args, &answers).await? {
            return Ok(());
        }
        Err(self.error(
            ErrorKind::NotFound,
            op,
            "no process is registered under this handle (released?)",
        ))
    }

    async fn status_of(&self, handle: &ProcessHandle) -> Result<ProcessInfo, Error> {
        REGISTRY.status(self, handle).await
    }

    async fn resize_to(&self, handle: &ProcessHandle, size: TerminalSize) -> Result<(), Error> {
        let op = "resize";
        let key = self.key_of(handle, op)?;
        let (rows, cols) = (size.rows.to_string(), size.cols.to_string());
        let entry = Self::entry(&key);
        // `Some(true)`: sized (or exited); `Some(false)`: no terminal; `None`: no entry.
        let answers = [
            ("modal:sized", Some(true)),
            ("modal:gone", Some(true)),
            ("modal:notty", Some(false)),
            ("modal:none", None),
        ];
        match self.ask(op, RESIZE, &[entry, rows, cols], &answers).await? {
            Some(true) => Ok(()),
            Some(false) => Err(self.error(
                ErrorKind::InvalidCommand,
                op,
                "the process was started without a terminal",
            )),
            None => Err(REGISTRY.not_started(op)),
        }
    }

    async fn list_all(&self) -> Result<Vec<ProcessInfo>, Error> {
        REGISTRY.list(self).await
    }

    async fn release_one(&self, handle: &ProcessHandle) -> Result<(), Error> {
        let op = "release";
        let key = self.key_of(handle, op)?;
        let state = match self.poll(&key, op).await {
            Ok(s) => Some(s),
            Err(e) if e.kind() == ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        REGISTRY.release(self.exec, op, &key, state).await
    }
}

execseam_adapter_kit::forward_processes!(ModalProcesses<'_>, resize);

impl Native for ModalProcesses<'_> {
    fn exec(&self) -> &dyn Exec {
        self.exec
    }

    fn sandbox(&self) -> &str {
        Sandbox::id(self.exec)
    }

    /// Registered, but the router does not know it (started nothing, or forgotten): `Unknown`.
    fn state<'s>(&'s self, key: &'s StartKey, op: &'static str, registered: bool) -> Known<'s> {
        Box::pin(async move {
            if !registered && !REGISTRY.exists(self.exec, op, key).await? {
                return Ok(None);
            }
            match self.poll(key, op).await {
                Ok(s) => Ok(Some(s)),
                Err(e) if e.kind() == ErrorKind::NotFound => Ok(Some(ProcessState::Unknown)),
                Err(e) => Err(e),
            }
        })
    }

    fn stdin<'s>(&'s self, key: &'s StartKey, op: &'static str) -> StdinOf<'s> {
        Box::pin(async move { self.stdin_state(key, op).await.map(Some) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_ids_are_stable_uuid_shaped_and_per_sandbox_and_key() {
        let k = StartKey::new("op-1").unwrap();
        let a = exec_id("sb-a", &k);
        assert_eq!(a, exec_id("sb-a", &k), "a pure function of sandbox and key");
        assert_ne!(a, exec_id("sb-b", &k));
        assert_ne!(a, exec_id("sb-a", &StartKey::new("op-2").unwrap()));
        let parts: Vec<&str> = a.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(parts[2].starts_with('8'), "version 8: {a}");
        assert!(
            matches!(&parts[3][..1], "8" | "9" | "a" | "b"),
            "variant: {a}"
        );
    }
}
