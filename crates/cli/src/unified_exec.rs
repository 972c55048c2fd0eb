//! Unified exec for `execseam mcp`, as Codex's harness shapes it and under its names, so a model
//! trained on Codex drives it as it is: `exec_command` starts a command (on a terminal with
//! `tty`) and returns what it printed within the yield time, plus a `session_id` while it runs or
//! its `exit_code` once it ended; `write_stdin` types characters into that session (empty:
//! poll) and returns the new output. Sources (openai/codex, `codex-rs/core`):
//! `tools/spec.rs` (the two tools' parameters, required `cmd` and `session_id`, `tty` default
//! false), `tools/handlers/unified_exec.rs` (default yields: 10 000 ms for `exec_command`, 250
//! ms for `write_stdin`; `session_id` a number), `unified_exec/mod.rs` (yields clamped to 250 ..
//! 30 000 ms, an empty `write_stdin` waits at least 5 000 ms, 10 000 output tokens by default,
//! at most 64 sessions, output over the budget kept head and tail).
//!
//! Each session is a process handle of the sandbox (`Exec::processes`): the result also carries
//! the durable `handle`, so `execseam process …` or another client can reattach. Output is
//! bounded per call (`max_output_tokens`, 4 bytes a token as Codex counts): what is cut from the
//! middle is counted in `dropped_bytes`. Without a terminal stdout and stderr stay apart
//! (`output`, `stderr`); a terminal has one stream (`output`). A `tty` session on an adapter
//! without terminals is refused (`unsupported`), never run on pipes. Where the adapter's
//! terminals cannot be attached again (`ProcessCapabilities::terminal_reattach` false: Docker), a
//! `tty` session's result has no `handle` but a `note` saying the terminal lives only in this
//! server.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use execseam::{Command, Error, ErrorKind, Exec};
use execseam_core::{
    ProcessHandle, ProcessState, Processes, StartKey, StartRequest, StdinWrite, StreamOffsets,
    TerminalSize,
};
use execseam_tools::ToolError;
use rmcp::schemars;
use serde::Deserialize;
use serde_json::{Value, json};

/// Codex's bounds (`unified_exec/mod.rs`).
const MIN_YIELD_MS: u64 = 250;
const MAX_YIELD_MS: u64 = 30_000;
const MIN_EMPTY_YIELD_MS: u64 = 5_000;
const EXEC_YIELD_MS: u64 = 10_000;
const WRITE_YIELD_MS: u64 = 250;
const DEFAULT_MAX_OUTPUT_TOKENS: u64 = 10_000;
const BYTES_PER_TOKEN: u64 = 4;
const MAX_SESSIONS: usize = 64;
/// A `tty` session's note where its terminal cannot be attached again.
const NOT_SHARED: &str = "this adapter's terminals cannot be attached again: this one lives only \
     in this server's session (write_stdin), and ends with it";
/// The terminal a `tty` session gets.
const SIZE: TerminalSize = TerminalSize { cols: 80, rows: 24 };

/// `exec_command`'s arguments (Codex's names).
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExecCommandArgs {
    /// Shell command to execute.
    pub cmd: String,
    /// The working directory (absolute, or relative to the server's root; default: the root).
    #[serde(default)]
    pub workdir: Option<String>,
    /// The shell to run `cmd` with (default: bash where the sandbox has it, else sh).
    #[serde(default)]
    pub shell: Option<String>,
    /// Run the shell as a login shell (`-l`; default true, as Codex).
    #[serde(default)]
    pub login: Option<bool>,
    /// Run on a terminal (PTY) instead of plain pipes (default false).
    #[serde(default)]
    pub tty: Option<bool>,
    /// How long to wait for output before returning, in ms (default 10000; 250..=30000).
    #[serde(default)]
    pub yield_time_ms: Option<u64>,
    /// The most output to return, in tokens of about 4 bytes (default 10000).
    #[serde(default)]
    pub max_output_tokens: Option<u64>,
}

/// `write_stdin`'s arguments (Codex's names).
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteStdinArgs {
    /// The session `exec_command` returned.
    pub session_id: i32,
    /// Characters to type (default empty: only read new output).
    #[serde(default)]
    pub chars: String,
    /// How long to wait for output before returning, in ms (default 250; 250..=30000; an empty
    /// write waits at least 5000).
    #[serde(default)]
    pub yield_time_ms: Option<u64>,
    /// The most output to return, in tokens of about 4 bytes (default 10000).
    #[serde(default)]
    pub max_output_tokens: Option<u64>,
}

#[derive(Clone)]
struct Session {
    handle: ProcessHandle,
    read: StreamOffsets,
    tty: bool,
    /// Another client can attach to the handle (false: a terminal held by this server only).
    shared: bool,
}

/// The sessions of one MCP server: small numbers (what the model is trained on) for handles.
pub struct Sessions {
    next: AtomicI32,
    map: Mutex<HashMap<i32, Session>>,
}

impl Default for Sessions {
    fn default() -> Sessions {
        Sessions {
            next: AtomicI32::new(1000),
            map: Mutex::new(HashMap::new()),
        }
    }
}

fn invalid(message: impl Into<String>) -> ToolError {
    ToolError::InvalidArgument {
        message: message.into(),
    }
}

fn processes(exec: &dyn Exec) -> Result<Box<dyn Processes + '_>, ToolError> {
    exec.processes().ok_or_else(|| {
        ToolError::Exec(
            Error::new(
                ErrorKind::Unsupported,
                "this adapter has no process handles: unified exec needs them",
            )
            .with_provider(exec.provider().to_owned()),
        )
    })
}

fn yield_time(ms: Option<u64>, default: u64) -> Duration {
    Duration::from_millis(ms.unwrap_or(default).clamp(MIN_YIELD_MS, MAX_YIELD_MS))
}

/// At most `max` bytes: the first half and the last half, with the count cut from the middle.
struct HeadTail {
    max: usize,
    head: Vec<u8>,
    tail: std::collections::VecDeque<u8>,
    dropped: u64,
}

impl HeadTail {
    fn new(max: usize) -> HeadTail {
        HeadTail {
            max,
            head: Vec::new(),
            tail: Default::default(),
            dropped: 0,
        }
    }

    fn push(&mut self, mut data: &[u8]) {
        let head_room = (self.max / 2).saturating_sub(self.head.len());
        let n = head_room.min(data.len());
        self.head.extend_from_slice(&data[..n]);
        data = &data[n..];
        self.tail.extend(data);
        let tail_max = self.max - self.max / 2;
        if self.tail.len() > tail_max {
            let cut = self.tail.len() - tail_max;
            self.tail.drain(..cut);
            self.dropped += cut as u64;
        }
    }

    fn text(&self) -> String {
        let mut b = self.head.clone();
        if self.dropped > 0 {
            b.extend_from_slice(format!("\n[… {} bytes dropped …]\n", self.dropped).as_bytes());
        }
        b.extend(self.tail.iter());
        String::from_utf8_lossy(&b).into_owned()
    }
}

/// Waits up to `within` for the exit, then reads everything written since `from`, bounded.
async fn collect(
    p: &dyn Processes,
    h: &ProcessHandle,
    from: StreamOffsets,
    within: Duration,
    max_tokens: Option<u64>,
) -> Result<(HeadTail, HeadTail, StreamOffsets, ProcessState), Error> {
    let max = usize::try_from(
        max_tokens
            .unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS)
            .saturating_mul(BYTES_PER_TOKEN),
    )
    .unwrap_or(usize::MAX)
    .max(1);
    // Returns at the exit or at the deadline; either way the output so far is the answer.
    let _ = p.wait(h, within).await?;
    let (mut out, mut err) = (HeadTail::new(max), HeadTail::new(max));
    let mut at = from;
    loop {
        let r = p.read(h, at).await?;
        out.push(&r.stdout);
        err.push(&r.stderr);
        at = r.next();
        let more = at != r.written;
        if !more || (r.stdout.is_empty() && r.stderr.is_empty()) {
            return Ok((out, err, at, r.state));
        }
    }
}

fn result(out: &HeadTail, err: &HeadTail, session: &Session, started: Instant) -> Value {
    let mut v = json!({
        "wall_time_seconds": (started.elapsed().as_secs_f64() * 1e4).round() / 1e4,
        "output": out.text(),
        "dropped_bytes": out.dropped,
    });
    if session.shared {
        v["handle"] = Value::String(session.handle.as_str().to_owned());
    } else {
        v["note"] = Value::String(NOT_SHARED.to_owned());
    }
    if !session.tty {
        v["stderr"] = Value::String(err.text());
        v["stderr_dropped_bytes"] = json!(err.dropped);
    }
    v
}

impl Sessions {
    fn count(&self) -> usize {
        self.map.lock().map_or(0, |m| m.len())
    }

    fn get(&self, id: i32) -> Option<Session> {
        self.map.lock().ok()?.get(&id).cloned()
    }

    fn put(&self, id: i32, s: Session) {
        if let Ok(mut m) = self.map.lock() {
            m.insert(id, s);
        }
    }

    fn forget(&self, id: i32) {
        if let Ok(mut m) = self.map.lock() {
            m.remove(&id);
        }
    }

    /// The end of a call: the exit (the handle released) or the session to come back to.
    async fn finish(
        &self,
        p: &dyn Processes,
        id: Option<i32>,
        mut session: Session,
        collected: (HeadTail, HeadTail, StreamOffsets, ProcessState),
        started: Instant,
    ) -> Result<Value, ToolError> {
        let (out, err, at, state) = collected;
        let mut v = result(&out, &err, &session, started);
        match state {
            ProcessState::Exited(exit) => {
                if let Some(id) = id {
                    self.forget(id);
                }
                let _ = p.release(&session.handle).await;
                v["exit_code"] = json!(exit.shell_status());
            }
            ProcessState::Running => {
                let id = id.unwrap_or_else(|| self.next.fetch_add(1, Ordering::Relaxed));
                session.read = at;
                self.put(id, session);
                v["session_id"] = json!(id);
            }
            ProcessState::Unknown => {
                return Err(ToolError::Exec(
                    Error::protocol("the session's supervisor is gone and left no exit")
                        .with_retry(execseam::Retry::Never),
                ));
            }
        }
        Ok(v)
    }

    /// `exec_command`; `workdir` already resolved against the server's root.
    pub async fn exec_command(
        &self,
        exec: &dyn Exec,
        a: ExecCommandArgs,
        workdir: String,
    ) -> Result<Value, ToolError> {
        let started = Instant::now();
        let p = processes(exec)?;
        let tty = a.tty.unwrap_or(false);
        if tty && !p.process_capabilities().terminal {
            return Err(ToolError::Exec(
                Error::new(
                    ErrorKind::Unsupported,
                    "this adapter has no terminals: `tty: true` is refused rather than run on pipes",
                )
                .with_provider(exec.provider().to_owned()),
            ));
        }
        if self.count() >= MAX_SESSIONS {
            return Err(invalid(format!(
                "{MAX_SESSIONS} sessions are running: end one (write_stdin) first"
            )));
        }
        let login = a.login.unwrap_or(true);
        let argv = match &a.shell {
            Some(shell) => vec![
                shell.clone(),
                if login { "-lc" } else { "-c" }.to_owned(),
                a.cmd.clone(),
            ],
            None => vec![
                "sh".to_owned(),
                "-c".to_owned(),
                format!(
                    "if command -v bash >/dev/null 2>&1; then exec bash {}c \"$1\"; fi; exec sh -c \"$1\"",
                    if login { "-l" } else { "-" }
                ),
                "execseam-exec".to_owned(),
                a.cmd.clone(),
            ],
        };
        let cmd = Command::builder(argv)
            .tool(execseam::Tool::BASH)
            .workdir(workdir)
            .build()
            .map_err(ToolError::Exec)?;
        let mut req = StartRequest::new(StartKey::random(), cmd).open_stdin();
        if tty {
            req = req.terminal(SIZE);
        }
        let s = p.start(req).await.map_err(ToolError::Exec)?;
        let session = Session {
            handle: s.handle,
            read: StreamOffsets::ZERO,
            tty,
            shared: !tty || p.process_capabilities().terminal_reattach,
        };
        let collected = collect(
            &*p,
            &session.handle,
            session.read,
            yield_time(a.yield_time_ms, EXEC_YIELD_MS),
            a.max_output_tokens,
        )
        .await
        .map_err(ToolError::Exec)?;
        self.finish(&*p, None, session, collected, started).await
    }

    /// `write_stdin`.
    pub async fn write_stdin(
        &self,
        exec: &dyn Exec,
        a: WriteStdinArgs,
    ) -> Result<Value, ToolError> {
        let started = Instant::now();
        let p = processes(exec)?;
        let Some(session) = self.get(a.session_id) else {
            return Err(invalid(format!(
                "no session {} (it ended, or was never started by this server)",
                a.session_id
            )));
        };
        if !a.chars.is_empty() {
            // Where stdin has accepted up to, whoever typed last (a takeover from another client).
            let at = p
                .status(&session.handle)
                .await
                .map_err(ToolError::Exec)?
                .stdin
                .map_or(0, |s| s.accepted);
            let w = StdinWrite {
                at,
                data: Bytes::from(a.chars.clone().into_bytes()),
                close: false,
            };
            if let Err(e) = p.write_stdin(&session.handle, w).await {
                // A session that ended meanwhile answers with its exit below.
                if e.kind() != ErrorKind::Conflict {
                    return Err(ToolError::Exec(e));
                }
            }
        }
        let within = if a.chars.is_empty() {
            yield_time(a.yield_time_ms, WRITE_YIELD_MS)
                .max(Duration::from_millis(MIN_EMPTY_YIELD_MS))
        } else {
            yield_time(a.yield_time_ms, WRITE_YIELD_MS)
        };
        let collected = collect(
            &*p,
            &session.handle,
            session.read,
            within,
            a.max_output_tokens,
        )
        .await
        .map_err(ToolError::Exec)?;
        self.finish(&*p, Some(a.session_id), session, collected, started)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminal_that_cannot_be_attached_again_gives_a_note_not_a_handle() {
        let out = HeadTail::new(100);
        let session = |tty, shared| Session {
            handle: ProcessHandle::new("h-1"),
            read: StreamOffsets::ZERO,
            tty,
            shared,
        };
        let v = result(&out, &out, &session(true, false), Instant::now());
        assert_eq!((v.get("handle"), &v["note"]), (None, &json!(NOT_SHARED)));
        let v = result(&out, &out, &session(true, true), Instant::now());
        assert_eq!((&v["handle"], v.get("note")), (&json!("h-1"), None));
    }
}
