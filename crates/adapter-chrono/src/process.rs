//! Process handles ([`Processes`]) over Chrono's durable `/executions` contract.
//!
//! - **start** is a keyed submit: the [`StartKey`] becomes the `Idempotency-Key` (hashed with
//!   this service's namespace, [`idempotency_key`]), and the payload is a function of the
//!   command and a nonce recorded before the submit, so a retried start (its answer lost, or
//!   its process gone) sends the same key with the same payload and the service converges on
//!   one operation: it runs once.
//! - The **handle** is `chrono:<ns>:<key>` (`ns`: 12 hex of SHA-256 over the service root and
//!   NyxID route; nothing secret). Chrono has no lookup by key, so the adapter records, per
//!   handle, the operation id and the nonce in a small file in its state directory
//!   ([`ChronoConfig::state_dir`](crate::ChronoConfig::state_dir), `CHRONO_STATE_DIR`): any
//!   `execseam` process on the same host with the same configuration finds the command again
//!   from the handle alone. A host without the record answers [`NotFound`](ErrorKind::NotFound).
//! - **Output exists only at the end**: Chrono returns an execution's output in its result.
//!   The program captures the command's stdout and stderr into files in the execution's own
//!   sandbox and ends by printing them as a frame (a header with this start's tag, the exit
//!   status and both lengths; both streams base64; an end line): the bytes are exact (Chrono's
//!   result is JSON text), and a truncated, forged or malformed result is a
//!   [`Protocol`](ErrorKind::Protocol) error, never an exit. While the operation runs, `read`
//!   answers `Running` with zero bytes and `attach` yields nothing until the result.
//! - **wait** polls the status with the durable client's rules (`If-None-Match`, `Retry-After`
//!   capped); `cancelled`, `outcome_uncertain`, a result without output, 404 and 410 are typed
//!   errors ([`ProcessInfo::state`] `Unknown` for the first three), never an exit.
//! - **signal**: `KILL` is `POST /executions/{id}/cancel`; the service ends the execution and
//!   removes its sandbox, the command gets no chance to handle anything, and its output is lost
//!   (the operation ends `cancelled`). Any other signal is [`Unsupported`](ErrorKind::Unsupported)
//!   before any request: cancel is no signal the command could catch.
//! - stdin after the start, list and terminals are not there (typed, before any request);
//!   **release** forgets the local record.

use std::collections::{HashMap, VecDeque};
use std::io::Write as _;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use execseam_adapter_kit::degrade;
use execseam_adapter_kit::{id, size};
use execseam_core::{
    BoxFuture, Command, Deadline, Error, ErrorKind, Exit, Mechanism, Output, ProcessCapabilities,
    ProcessEvent, ProcessHandle, ProcessInfo, ProcessRead, ProcessState, ProcessStream, Processes,
    Retry, Signal, StartKey, StartRequest, Started, StdinMode, StdinState, StdinWrite,
    StreamOffsets, Waited,
};
use futures_core::Stream;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::PROVIDER;
use crate::config::{ChronoConfig, DurablePolicy};
use crate::durable::{DurableClient, Operation, Progress, ResultAnswer, StatusAnswer, Terminal};
use crate::error::{CANCEL, RESULT, STATUS, SUBMIT};
use crate::exec::no_output_error;
use crate::wire::{self, Completion, ExecOutput, ExecuteRequest, Language, Status, codes};

/// What Chrono's process handles can do (see the [module docs](self)).
pub const PROCESS_CAPABILITIES: ProcessCapabilities = ProcessCapabilities {
    mechanism: Mechanism::Native,
    idempotent_start: true,
    stdin: false,
    signals: &[Signal::Kill],
    // The result can be fetched again until the operation expires (`expires_at`; 410 after).
    replay: true,
    retention: None,
    list: false,
    exact_signal_exit: false,
    terminal: false,
    terminal_reattach: false,
};

/// Consecutive transient failures (reset, 429, 503, a stalled exchange) a process call rides
/// out before it answers the last one.
pub const MAX_TRANSIENT_FAILURES: u32 = 2;

/// The most bytes per stream one [`Processes::read`] returns.
pub const READ_MAX: usize = 1 << 20;

const HANDLE_PREFIX: &str = "chrono:";

/// The `Idempotency-Key` a start under `key` sends for the service namespace `ns`.
pub fn idempotency_key(ns: &str, key: &StartKey) -> String {
    wire::operation_key(&[
        b"execseam-chrono/process",
        ns.as_bytes(),
        key.as_str().as_bytes(),
    ])
}

/// The namespace of a configuration: 12 hex of SHA-256 over its root and NyxID route.
pub(crate) fn namespace(config: &ChronoConfig) -> String {
    let mut h = Sha256::new();
    h.update(config.base_url.as_bytes());
    h.update([0]);
    h.update(config.via.as_deref().unwrap_or_default().as_bytes());
    h.finalize()[..6]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The default state directory: `$XDG_STATE_HOME/execseam/chrono`, else
/// `$HOME/.local/state/execseam/chrono`, else the temporary directory's `execseam-chrono`.
pub(crate) fn default_state_dir() -> PathBuf {
    let nonempty = |v: &str| std::env::var_os(v).filter(|s| !s.is_empty());
    if let Some(d) = nonempty("XDG_STATE_HOME") {
        PathBuf::from(d).join("execseam").join("chrono")
    } else if let Some(h) = nonempty("HOME") {
        PathBuf::from(h).join(".local/state/execseam/chrono")
    } else {
        std::env::temp_dir().join("execseam-chrono")
    }
}

/// What one start recorded (a file per handle). No secret: the operation id is readable only
/// with the owner's credentials, and the nonce only names this start's frame and stdin file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Record {
    /// The nonce of the start (32 of `[0-9a-z]`).
    nonce: String,
    /// The operation, once a receipt was read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    operation_id: Option<String>,
    /// The command was wrapped (workdir, env or stdin): its own failures are typed errors.
    wrapped: bool,
}

/// An exited command's whole output.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Ended {
    stdout: Bytes,
    stderr: Bytes,
    exit: Exit,
}

/// Where an operation is, as one look found it.
enum Look {
    Running,
    Ended(Arc<Ended>),
}

/// The adapter's local state for process handles, shared by the clones of one `ChronoExec`.
pub(crate) struct Local {
    ns: String,
    dir: PathBuf,
    starting: tokio::sync::Mutex<()>,
    ended: Mutex<HashMap<String, Arc<Ended>>>,
}

execseam_adapter_kit::debug_fields!(self => Local { ns: self.ns, dir: self.dir });

impl Local {
    pub(crate) fn new(config: &ChronoConfig) -> Local {
        let ns = namespace(config);
        let root = config.state_dir.clone().unwrap_or_else(default_state_dir);
        Local {
            dir: root.join(&ns),
            ns,
            starting: tokio::sync::Mutex::new(()),
            ended: Mutex::new(HashMap::new()),
        }
    }

    fn path(&self, key: &StartKey) -> PathBuf {
        self.dir.join(format!("{}.json", key.as_str()))
    }

    fn io_error(&self, what: &str, e: std::io::Error) -> Error {
        Error::new(
            ErrorKind::Internal,
            format!("the process record in {}: {what}: {e}", self.dir.display()),
        )
        .with_provider(PROVIDER)
    }

    fn load(&self, key: &StartKey) -> Result<Option<Record>, Error> {
        match std::fs::read(self.path(key)) {
            Ok(b) => serde_json::from_slice(&b).map(Some).map_err(|e| {
                Error::new(
                    ErrorKind::Internal,
                    format!("an unreadable process record for key {key}: {e}"),
                )
                .with_provider(PROVIDER)
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.io_error("read", e)),
        }
    }

    fn ensure_dir(&self) -> Result<(), Error> {
        let mut b = std::fs::DirBuilder::new();
        b.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
        b.create(&self.dir).map_err(|e| self.io_error("mkdir", e))
    }

    fn temp(&self, r: &Record) -> Result<PathBuf, Error> {
        self.ensure_dir()?;
        let tmp = self.dir.join(format!(".tmp-{}", id::random_id(16)));
        let mut f = std::fs::File::create(&tmp).map_err(|e| self.io_error("create", e))?;
        f.write_all(&serde_json::to_vec(r).expect("a record serialises"))
            .and_then(|()| f.sync_all())
            .map_err(|e| self.io_error("write", e))?;
        Ok(tmp)
    }

    /// Writes `r` for `key` only if there is no record yet: `Ok(false)` when one exists.
    fn create(&self, key: &StartKey, r: &Record) -> Result<bool, Error> {
        let tmp = self.temp(r)?;
        let linked = std::fs::hard_link(&tmp, self.path(key));
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(self.io_error("link", e)),
        }
    }

    /// Replaces the record of `key` with `r` (atomically).
    fn store(&self, key: &StartKey, r: &Record) -> Result<(), Error> {
        let tmp = self.temp(r)?;
        std::fs::rename(&tmp, self.path(key)).map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            self.io_error("rename", e)
        })
    }

    fn forget(&self, key: &StartKey) -> Result<(), Error> {
        self.ended.lock().expect("ended").remove(key.as_str());
        match std::fs::remove_file(self.path(key)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(self.io_error("remove", e)),
        }
    }
}

/// The program a start sends for `cmd`: the command's stdout and stderr to files in the
/// execution's sandbox, then the frame [`parse_frame`] reads. Deterministic in `cmd`, `nonce`
/// and the configuration, so a retried start sends the same payload.
pub(crate) fn prepare(
    config: &ChronoConfig,
    cmd: &Command,
    nonce: &str,
) -> Result<(ExecuteRequest, bool), Error> {
    size::check_size(PROVIDER, cmd, &crate::SIZE_LIMIT)?;
    let stdin = crate::exec::stdin_parts(
        config,
        cmd,
        (&SUBMIT, "start"),
        format!(".execseam-stdin-{nonce}"),
    )?;
    let tag = tag(nonce);
    let script = format!(
        "{}d=$(mktemp -d) || exit 125\n\
         ( {}\n) >\"$d/o\" 2>\"$d/e\"; s=$?\n\
         printf '%s %s %s %s\\n' {tag} \"$s\" \"$(wc -c <\"$d/o\")\" \"$(wc -c <\"$d/e\")\"\n\
         base64 <\"$d/o\" | tr -d '\\n'; printf '\\n'\n\
         base64 <\"$d/e\" | tr -d '\\n'; printf '\\n'\n\
         printf '%s\\n' {tag}-end\n\
         rm -rf -- \"$d\"\n\
         exit \"$s\"\n",
        stdin.redirect, stdin.program
    );
    size::check_wire(PROVIDER, &[&script], &crate::SIZE_LIMIT)?;
    let request = ExecuteRequest {
        timeout_secs: Some(config.timeout_secs),
        input_files: stdin.input_files,
        ..ExecuteRequest::new(Language::Bash, script, config.timeout_secs)
    };
    Ok((request, stdin.wrapped))
}

fn tag(nonce: &str) -> String {
    format!("execseam-chrono-process-{nonce}")
}

/// Reads a result's frame: the command's exact stdout, stderr and exit. Anything else (no
/// frame, another start's tag, a cut, a length or status that does not match) is `Err`.
fn parse_frame(o: &ExecOutput, nonce: &str) -> Result<Ended, String> {
    let tag = tag(nonce);
    let text = o.stdout.as_str();
    let mut lines = text.split('\n');
    let header = lines.next().unwrap_or_default();
    let Some(rest) = header.strip_prefix(&tag).and_then(|r| r.strip_prefix(' ')) else {
        return Err(if text.contains("execseam-chrono-process-") {
            "the result carries another start's frame".to_owned()
        } else {
            format!(
                "the result has no process frame (exit_code {}, stderr {:?})",
                o.exit_code,
                o.stderr.chars().take(200).collect::<String>()
            )
        });
    };
    let nums: Vec<&str> = rest.split(' ').filter(|s| !s.is_empty()).collect();
    let [status, out_len, err_len] = nums[..] else {
        return Err(format!("a malformed frame header {header:?}"));
    };
    let num = |s: &str| {
        s.parse::<u64>()
            .map_err(|_| format!("{s:?} is not a number"))
    };
    let (status, out_len, err_len) = (num(status)?, num(out_len)?, num(err_len)?);
    let b64 = base64::engine::general_purpose::STANDARD;
    let stdout = b64
        .decode(lines.next().ok_or("the frame is cut before stdout")?)
        .map_err(|e| format!("stdout is not base64: {e}"))?;
    let stderr = b64
        .decode(lines.next().ok_or("the frame is cut before stderr")?)
        .map_err(|e| format!("stderr is not base64: {e}"))?;
    if lines.next() != Some(&format!("{tag}-end"))
        || lines.next() != Some("")
        || lines.next().is_some()
    {
        return Err("the frame is cut or has trailing data".to_owned());
    }
    if stdout.len() as u64 != out_len || stderr.len() as u64 != err_len {
        return Err(format!(
            "the frame says {out_len}/{err_len} bytes, carries {}/{}",
            stdout.len(),
            stderr.len()
        ));
    }
    if i64::from(o.exit_code) != status as i64 {
        return Err(format!(
            "the frame says status {status}, the result exit_code {}",
            o.exit_code
        ));
    }
    let exit = i32::try_from(status)
        .map(Exit::Code)
        .map_err(|_| format!("status {status} out of range"))?;
    Ok(Ended {
        stdout: stdout.into(),
        stderr: stderr.into(),
        exit,
    })
}

/// The typed error of a terminal that is no exit.
fn terminal_error(t: Terminal) -> Error {
    match t {
        Terminal::Ran { .. } => unreachable!("a result with output is no error"),
        Terminal::Failed { error, .. } => no_output_error(error, RESULT),
        Terminal::Cancelled { operation_id, .. } => STATUS
            .error(
                ErrorKind::Cancelled,
                format!("operation {operation_id} was cancelled: the command's output and exit are gone"),
            )
            .with_retry(Retry::Never)
            .with_code(codes::EXECUTION_CANCELLED),
        Terminal::OutcomeUncertain { operation_id, .. } => STATUS
            .error(
                ErrorKind::Internal,
                format!("the service cannot tell whether operation {operation_id} ran"),
            )
            .with_retry(Retry::Never)
            .with_code(codes::OUTCOME_UNCERTAIN),
        Terminal::Expired { operation_id } => STATUS
            .error(
                ErrorKind::Expired,
                format!("operation {operation_id} and its result expired (410)"),
            )
            .with_retry(Retry::Never)
            .with_code(codes::OPERATION_EXPIRED),
        Terminal::NotFound { operation_id } => STATUS
            .error(
                ErrorKind::NotFound,
                format!("operation {operation_id} is unknown to the service (restarted, or another owner's)"),
            )
            .with_retry(Retry::Never)
            .with_code(codes::OPERATION_NOT_FOUND),
        Terminal::KeyReused => SUBMIT
            .error(
                ErrorKind::Conflict,
                "the start key was used with another command (or before a release)",
            )
            .with_retry(Retry::Never)
            .with_code(codes::IDEMPOTENCY_KEY_REUSE),
    }
}

/// A status or result error, with 404 and 410 typed as the reconcile loop types them.
fn read_error(e: Error, operation_id: &str) -> Error {
    match e.status() {
        Some(execseam_core::WireStatus::Http(404)) => terminal_error(Terminal::NotFound {
            operation_id: operation_id.to_owned(),
        }),
        Some(execseam_core::WireStatus::Http(410)) => terminal_error(Terminal::Expired {
            operation_id: operation_id.to_owned(),
        }),
        _ => e,
    }
}

/// Chrono's process handles: see the [module docs](self).
pub struct ChronoProcesses<'a> {
    config: &'a ChronoConfig,
    durable: DurableClient,
    local: &'a Local,
}

execseam_adapter_kit::debug_fields!(self => ChronoProcesses<'_> { local: self.local });

/// One resolved handle.
struct Target {
    key: StartKey,
    record: Record,
}

impl<'a> ChronoProcesses<'a> {
    pub(crate) fn new(
        config: &'a ChronoConfig,
        durable: &'a DurableClient,
        local: &'a Local,
    ) -> ChronoProcesses<'a> {
        // A process call answers for itself: a few transient failures in a row (a reset, a
        // 429, a stalled exchange) end it with that error, typed and safe to retry (the start
        // too: it converges), rather than the reconcile loop's long patience.
        let policy = DurablePolicy {
            max_transient_failures: durable
                .policy()
                .max_transient_failures
                .min(MAX_TRANSIENT_FAILURES),
            ..durable.policy()
        };
        ChronoProcesses {
            config,
            durable: durable.clone().with_policy(policy),
            local,
        }
    }

    /// The key of `handle`, or `InvalidCommand` (another adapter's, another service's, garbage).
    fn key_of(&self, handle: &ProcessHandle, op: &'static str) -> Result<StartKey, Error> {
        let bad = |why: &str| {
            Error::new(
                ErrorKind::InvalidCommand,
                format!("not a process handle of this Chrono service: {why}"),
            )
            .with_provider(PROVIDER)
            .with_operation(op)
            .with_retry(Retry::Never)
        };
        let rest = handle
            .as_str()
            .strip_prefix(HANDLE_PREFIX)
            .ok_or_else(|| bad("no `chrono:` prefix"))?;
        let (ns, key) = rest.split_once(':').ok_or_else(|| bad("no namespace"))?;
        if ns != self.local.ns {
            return Err(bad("it names another service root or NyxID route"));
        }
        StartKey::new(key).map_err(|_| bad("its key is malformed"))
    }

    /// The key and record of `handle`: `InvalidCommand` or `NotFound` before any request.
    fn target(&self, handle: &ProcessHandle, op: &'static str) -> Result<Target, Error> {
        let key = self.key_of(handle, op)?;
        match self.local.load(&key)? {
            Some(record) => Ok(Target { key, record }),
            None => Err(Error::new(
                ErrorKind::NotFound,
                format!(
                    "no process was started under key {key} here (records: {})",
                    self.local.dir.display()
                ),
            )
            .with_provider(PROVIDER)
            .with_operation(op)
            .with_retry(Retry::Never)),
        }
    }

    fn operation_id(t: &Target, op: &'static str) -> Result<String, Error> {
        t.record.operation_id.clone().ok_or_else(|| {
            Error::new(
                ErrorKind::Unavailable,
                format!(
                    "the start under key {} has not read its receipt yet: start again with the same key",
                    t.key
                ),
            )
            .with_provider(PROVIDER)
            .with_operation(op)
            .with_retry(Retry::SAFE)
        })
    }

    fn cached(&self, key: &StartKey) -> Option<Arc<Ended>> {
        self.local
            .ended
            .lock()
            .expect("ended")
            .get(key.as_str())
            .cloned()
    }

    /// The output of a result, checked; cached (it never changes).
    fn ended(&self, t: &Target, output: &ExecOutput) -> Result<Arc<Ended>, Error> {
        let ended = parse_frame(output, &t.record.nonce).map_err(|m| {
            crate::error::protocol(
                RESULT,
                format!("a truncated or malformed process result: {m}"),
            )
        })?;
        let ended = if t.record.wrapped {
            let out = degrade::check_wrapped(Output::new(ended.stdout, ended.stderr, ended.exit))
                .map_err(|e| e.or_context(PROVIDER, "result"))?;
            Ended {
                stdout: out.stdout,
                stderr: out.stderr,
                exit: out.exit,
            }
        } else {
            ended
        };
        let ended = Arc::new(ended);
        self.local
            .ended
            .lock()
            .expect("ended")
            .insert(t.key.as_str().to_owned(), ended.clone());
        Ok(ended)
    }

    fn completion(&self, t: &Target, id: &str, c: Completion) -> Result<Arc<Ended>, Error> {
        match c {
            Completion::Ran { output, .. } => self.ended(t, &output),
            Completion::NoOutput { error, .. } => Err(match error.code.as_str() {
                codes::EXECUTION_CANCELLED => terminal_error(Terminal::Cancelled {
                    operation_id: id.to_owned(),
                    snapshot: None,
                }),
                codes::OUTCOME_UNCERTAIN => terminal_error(Terminal::OutcomeUncertain {
                    operation_id: id.to_owned(),
                    snapshot: None,
                }),
                _ => no_output_error(error, RESULT),
            }),
        }
    }

    /// One look, without waiting: a status read, and the result once it is terminal.
    async fn look(&self, t: &Target) -> Result<Look, Error> {
        if let Some(e) = self.cached(&t.key) {
            return Ok(Look::Ended(e));
        }
        let Some(id) = t.record.operation_id.clone() else {
            // The start that wrote the record has not read its receipt (yet): nothing ran
            // that could be shown.
            return Ok(Look::Running);
        };
        let snapshot = match self.durable.status(&id, None).await {
            Ok(StatusAnswer::Snapshot { snapshot, .. }) => snapshot,
            Ok(StatusAnswer::NotModified { .. }) => {
                return Err(crate::error::protocol(
                    STATUS,
                    "a 304 to a status read without If-None-Match",
                ));
            }
            Err(e) => return Err(read_error(e, &id)),
        };
        match snapshot.status {
            Status::Succeeded | Status::Failed => match self.durable.result(&id).await {
                Ok(ResultAnswer::Ready(c)) => self.completion(t, &id, c).map(Look::Ended),
                Ok(ResultAnswer::Pending { .. }) => Ok(Look::Running),
                Err(e) => Err(read_error(e, &id)),
            },
            Status::Cancelled => Err(terminal_error(Terminal::Cancelled {
                operation_id: id,
                snapshot: None,
            })),
            Status::OutcomeUncertain => Err(terminal_error(Terminal::OutcomeUncertain {
                operation_id: id,
                snapshot: None,
            })),
            _ => Ok(Look::Running),
        }
    }

    /// Reconciles with the durable loop (ETags, `Retry-After`) until the result or `within`.
    async fn settle(&self, t: &Target, within: Option<Duration>) -> Result<Look, Error> {
        if let Some(e) = self.cached(&t.key) {
            return Ok(Look::Ended(e));
        }
        let deadline = within.map(|w| tokio::time::Instant::now() + w);
        let id = match t.record.operation_id.clone() {
            Some(id) => id,
            None if deadline.is_none() => return Err(Self::operation_id(t, "attach").unwrap_err()),
            None => {
                // No receipt recorded (a start under way elsewhere, or one that died before
                // its receipt): nothing to poll but the record, until the deadline.
                loop {
                    if let Some(r) = self.local.load(&t.key)?
                        && r.operation_id.is_some()
                    {
                        let t = Target {
                            key: t.key.clone(),
                            record: r,
                        };
                        let left = deadline
                            .map(|d| d.saturating_duration_since(tokio::time::Instant::now()));
                        return Box::pin(self.settle(&t, left)).await;
                    }
                    match deadline {
                        Some(d) if tokio::time::Instant::now() >= d => return Ok(Look::Running),
                        _ => tokio::time::sleep(Duration::from_millis(200)).await,
                    }
                }
            }
        };
        let placeholder = ExecuteRequest::new(Language::Bash, "", self.config.timeout_secs);
        let mut op = Operation::resume(
            idempotency_key(&self.local.ns, &t.key),
            placeholder,
            id.clone(),
            None,
        )?;
        loop {
            let step = match deadline {
                Some(d) => match tokio::time::timeout_at(d, self.durable.step(&mut op)).await {
                    Ok(s) => s,
                    Err(_) => return Ok(Look::Running),
                },
                None => self.durable.step(&mut op).await,
            };
            match step.map_err(|e| read_error(e, &id))? {
                Progress::Done(Terminal::Ran { output, .. }) => {
                    return self.ended(t, &output).map(Look::Ended);
                }
                Progress::Done(other) => return Err(terminal_error(other)),
                Progress::Wait(d) if d.is_zero() => {}
                Progress::Wait(d) => match deadline {
                    Some(end) => {
                        let now = tokio::time::Instant::now();
                        if now >= end {
                            return Ok(Look::Running);
                        }
                        tokio::time::sleep(d.min(end - now)).await;
                        if d >= end - now {
                            return Ok(Look::Running);
                        }
                    }
                    None => tokio::time::sleep(d).await,
                },
            }
        }
    }

    async fn start_inner(&self, request: StartRequest) -> Result<Started, Error> {
        if request.terminal.is_some() {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "Chrono's process handles have no terminals",
            )
            .with_provider(PROVIDER)
            .with_operation("start"));
        }
        if request.stdin == StdinMode::Open {
            return Err(Error::new(
                ErrorKind::Unsupported,
                "Chrono's executions take their stdin in the request only (input_files): stdin cannot stay open",
            )
            .with_provider(PROVIDER)
            .with_operation("start"));
        }
        let key = request.key;
        let handle = self.handle_for(&key);
        // Checked before anything is recorded or sent.
        let nonce = id::random_id(32);
        let (req, wrapped) = prepare(self.config, &request.command, &nonce)?;
        let _one = self.local.starting.lock().await;
        let (record, req, fresh) = match self.local.load(&key)? {
            Some(r) if r.operation_id.is_some() => {
                return Ok(Started {
                    handle,
                    fresh: false,
                });
            }
            Some(r) => {
                let (req, _) = prepare(self.config, &request.command, &r.nonce)?;
                (r, req, false)
            }
            None => {
                let r = Record {
                    nonce,
                    operation_id: None,
                    wrapped,
                };
                if self.local.create(&key, &r)? {
                    (r, req, true)
                } else {
                    // Another process recorded it first: send its payload (the service converges).
                    match self.local.load(&key)? {
                        Some(r) if r.operation_id.is_some() => {
                            return Ok(Started {
                                handle,
                                fresh: false,
                            });
                        }
                        Some(r) => {
                            let (req, _) = prepare(self.config, &request.command, &r.nonce)?;
                            (r, req, false)
                        }
                        None => return Err(Error::new(
                            ErrorKind::Conflict,
                            "the process record vanished during the start (a concurrent release)",
                        )
                        .with_provider(PROVIDER)
                        .with_operation("start")),
                    }
                }
            }
        };
        let mut op = Operation::new(idempotency_key(&self.local.ns, &key), req)?;
        // Submit until the receipt is read: a lost answer is sent again with the same key and
        // payload (the durable loop's rule), which converges on the same operation.
        loop {
            match self.durable.step(&mut op).await {
                Ok(Progress::Done(t)) => return Err(terminal_error(t)),
                Ok(Progress::Wait(d)) => {
                    if let Some(id) = op.operation_id.clone() {
                        self.local.store(
                            &key,
                            &Record {
                                operation_id: Some(id),
                                ..record
                            },
                        )?;
                        tracing::debug!(provider = PROVIDER, fresh, "process started");
                        return Ok(Started { handle, fresh });
                    }
                    tokio::time::sleep(d).await;
                }
                // The record stays: a start retried under the key sends the same payload.
                Err(e) => {
                    let retry = if e.retry() == Retry::Never {
                        Retry::Never
                    } else {
                        Retry::SAFE
                    };
                    return Err(e.with_retry(retry));
                }
            }
        }
    }
}

fn unsupported(what: &str, op: &'static str) -> Error {
    Error::new(ErrorKind::Unsupported, what.to_owned())
        .with_provider(PROVIDER)
        .with_operation(op)
        .with_retry(Retry::Never)
}

/// Slices `data` from `at`; past the end is `InvalidCommand`.
fn from(data: &Bytes, at: u64, stream: &str, max: usize) -> Result<Bytes, Error> {
    let len = data.len() as u64;
    if at > len {
        return Err(Error::new(
            ErrorKind::InvalidCommand,
            format!("{stream} offset {at} is past its end ({len} bytes)"),
        )
        .with_provider(PROVIDER)
        .with_retry(Retry::Never));
    }
    let at = at as usize;
    Ok(data.slice(at..data.len().min(at.saturating_add(max))))
}

/// A stream that waits for one future, then yields its events.
struct Deferred<'a> {
    fut: Option<BoxFuture<'a, Vec<Result<ProcessEvent, Error>>>>,
    queue: VecDeque<Result<ProcessEvent, Error>>,
}

impl Stream for Deferred<'_> {
    type Item = Result<ProcessEvent, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(fut) = self.fut.as_mut() {
            match fut.as_mut().poll(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(events) => {
                    self.fut = None;
                    self.queue.extend(events);
                }
            }
        }
        Poll::Ready(self.queue.pop_front())
    }
}

impl Processes for ChronoProcesses<'_> {
    fn process_capabilities(&self) -> ProcessCapabilities {
        PROCESS_CAPABILITIES
    }

    fn handle_for(&self, key: &StartKey) -> ProcessHandle {
        ProcessHandle::new(format!("{HANDLE_PREFIX}{}:{}", self.local.ns, key.as_str()))
    }

    fn start(&self, request: StartRequest) -> BoxFuture<'_, Result<Started, Error>> {
        Box::pin(self.start_inner(request))
    }

    fn read<'b>(
        &'b self,
        handle: &'b ProcessHandle,
        at: StreamOffsets,
    ) -> BoxFuture<'b, Result<ProcessRead, Error>> {
        Box::pin(async move {
            let t = self.target(handle, "read")?;
            match self.look(&t).await? {
                Look::Running => Ok(ProcessRead {
                    from: at,
                    stdout: Bytes::new(),
                    stderr: Bytes::new(),
                    state: ProcessState::Running,
                    // Nothing is visible before the result.
                    written: at,
                }),
                Look::Ended(e) => Ok(ProcessRead {
                    from: at,
                    stdout: from(&e.stdout, at.stdout, "stdout", READ_MAX)?,
                    stderr: from(&e.stderr, at.stderr, "stderr", READ_MAX)?,
                    state: ProcessState::Exited(e.exit),
                    written: StreamOffsets::new(e.stdout.len() as u64, e.stderr.len() as u64),
                }),
            }
        })
    }

    fn attach<'b>(
        &'b self,
        handle: &'b ProcessHandle,
        at: StreamOffsets,
    ) -> BoxFuture<'b, Result<ProcessStream<'b>, Error>> {
        Box::pin(async move {
            let t = self.target(handle, "attach")?;
            let fut: BoxFuture<'b, Vec<Result<ProcessEvent, Error>>> = Box::pin(async move {
                let e = match self.settle(&t, None).await {
                    Ok(Look::Ended(e)) => e,
                    Ok(Look::Running) => unreachable!("no deadline"),
                    Err(e) => return vec![Err(e)],
                };
                let (out, err) = match (
                    from(&e.stdout, at.stdout, "stdout", usize::MAX),
                    from(&e.stderr, at.stderr, "stderr", usize::MAX),
                ) {
                    (Ok(o), Ok(e)) => (o, e),
                    (Err(x), _) | (_, Err(x)) => return vec![Err(x)],
                };
                let mut events = Vec::new();
                if !out.is_empty() {
                    events.push(Ok(ProcessEvent::Stdout {
                        at: at.stdout,
                        data: out,
                    }));
                }
                if !err.is_empty() {
                    events.push(Ok(ProcessEvent::Stderr {
                        at: at.stderr,
                        data: err,
                    }));
                }
                events.push(Ok(ProcessEvent::Exit(e.exit)));
                events
            });
            Ok(ProcessStream::new(Deferred {
                fut: Some(fut),
                queue: VecDeque::new(),
            }))
        })
    }

    fn write_stdin<'b>(
        &'b self,
        handle: &'b ProcessHandle,
        _write: StdinWrite,
    ) -> BoxFuture<'b, Result<StdinState, Error>> {
        Box::pin(async move {
            self.key_of(handle, "write_stdin")?;
            Err(unsupported(
                "Chrono's executions take their stdin in the request only: nothing can be written after the start",
                "write_stdin",
            ))
        })
    }

    fn signal<'b>(
        &'b self,
        handle: &'b ProcessHandle,
        signal: Signal,
    ) -> BoxFuture<'b, Result<(), Error>> {
        Box::pin(async move {
            let key = self.key_of(handle, "signal")?;
            if signal != Signal::Kill {
                return Err(unsupported(
                    &format!(
                        "Chrono can only cancel an execution (KILL: its sandbox is removed); SIG{} is no signal it can deliver",
                        signal.name()
                    ),
                    "signal",
                ));
            }
            if self.cached(&key).is_some() {
                return Ok(());
            }
            let t = self.target(handle, "signal")?;
            let id = Self::operation_id(&t, "signal")?;
            match self.durable.cancel(&id).await {
                Ok(_) => Ok(()),
                Err(e) => Err(read_error(e, &id).or_context(PROVIDER, CANCEL.operation)),
            }
        })
    }

    fn wait<'b>(
        &'b self,
        handle: &'b ProcessHandle,
        within: Duration,
    ) -> BoxFuture<'b, Result<Waited, Error>> {
        Box::pin(async move {
            let t = self.target(handle, "wait")?;
            Ok(match self.settle(&t, Some(within)).await? {
                Look::Running => Waited::Running,
                Look::Ended(e) => Waited::Exited(e.exit),
            })
        })
    }

    fn status<'b>(
        &'b self,
        handle: &'b ProcessHandle,
    ) -> BoxFuture<'b, Result<ProcessInfo, Error>> {
        Box::pin(async move {
            let t = self.target(handle, "status")?;
            let (state, written) = match self.look(&t).await {
                Ok(Look::Running) => (ProcessState::Running, None),
                Ok(Look::Ended(e)) => (
                    ProcessState::Exited(e.exit),
                    Some(StreamOffsets::new(
                        e.stdout.len() as u64,
                        e.stderr.len() as u64,
                    )),
                ),
                // Ended without an exit the service can show: cancelled, uncertain, failed
                // without output (a sandbox timeout, say).
                Err(e)
                    if matches!(
                        e.kind(),
                        ErrorKind::Cancelled | ErrorKind::Timeout(Deadline::Command)
                    ) || e.code() == Some(codes::OUTCOME_UNCERTAIN) =>
                {
                    (ProcessState::Unknown, None)
                }
                Err(e) => return Err(e),
            };
            Ok(ProcessInfo {
                handle: handle.clone(),
                key: t.key,
                state,
                written,
                stdin: None,
            })
        })
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<ProcessInfo>, Error>> {
        Box::pin(async {
            Err(unsupported(
                "Chrono has no list of executions: keep the handles you start",
                "list",
            ))
        })
    }

    fn release<'b>(&'b self, handle: &'b ProcessHandle) -> BoxFuture<'b, Result<(), Error>> {
        Box::pin(async move {
            let key = self.key_of(handle, "release")?;
            let Some(record) = self.local.load(&key)? else {
                return Ok(());
            };
            if self.cached(&key).is_none() && record.operation_id.is_some() {
                let t = Target {
                    key: key.clone(),
                    record,
                };
                match self.look(&t).await {
                    Ok(Look::Running) => {
                        return Err(Error::new(
                            ErrorKind::Conflict,
                            "the command is still running: KILL it or wait for its exit first",
                        )
                        .with_provider(PROVIDER)
                        .with_operation("release"));
                    }
                    Ok(Look::Ended(_)) => {}
                    // Gone or ended without an exit: nothing left to keep.
                    Err(e) if e.retry() == Retry::Never || e.kind() == ErrorKind::Protocol => {}
                    Err(e) => return Err(e),
                }
            }
            self.local.forget(&key)
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;
    use crate::http::{Answer, Method};
    use crate::script::{ID, Script, answer};

    fn receipt() -> Result<Answer, Error> {
        answer(
            202,
            &[("retry-after", "0")],
            &format!(
                r#"{{"operation_id":"{ID}","status":"queued","status_url":"https://elsewhere.example/x","created_at":"2026-08-14T10:00:00Z","expires_at":"2026-08-15T10:00:00Z"}}"#
            ),
        )
    }

    fn snapshot(status: &str, version: i64, retry: &str) -> Result<Answer, Error> {
        let etag = format!("\"v{version}\"");
        answer(
            200,
            &[("etag", etag.as_str()), ("retry-after", retry)],
            &format!(
                r#"{{"operation_id":"{ID}","status":"{status}","phase":"execute","cleanup_status":"not_started","version":{version},"cancel_requested":false,"result_available":false,"created_at":"2026-08-14T10:00:00Z","updated_at":"2026-08-14T10:00:00Z","expires_at":"2026-08-15T10:00:00Z"}}"#
            ),
        )
    }

    fn result(stdout: &str, stderr: &str, code: i32) -> Result<Answer, Error> {
        answer(
            200,
            &[],
            &serde_json::json!({
                "success": code == 0,
                "output": {"stdout": stdout, "stderr": stderr, "exit_code": code},
                "error": if code == 0 { serde_json::Value::Null } else {
                    serde_json::json!({"code": "EXECUTION_FAILED", "message": "exit"})
                },
            })
            .to_string(),
        )
    }

    /// The frame a program with `nonce` prints for these streams.
    fn frame(nonce: &str, out: &[u8], err: &[u8], status: i32) -> String {
        let b = base64::engine::general_purpose::STANDARD;
        let t = tag(nonce);
        format!(
            "{t} {status} {} {}\n{}\n{}\n{t}-end\n",
            out.len(),
            err.len(),
            b.encode(out),
            b.encode(err)
        )
    }

    static DIRS: AtomicU64 = AtomicU64::new(0);

    /// A state directory of its own (removed at the end of the test).
    struct Dir(PathBuf);
    impl Dir {
        fn new() -> Dir {
            let d = std::env::temp_dir().join(format!(
                "execseam-chrono-proc-test-{}-{}",
                std::process::id(),
                DIRS.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&d);
            Dir(d)
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// One "execseam process": a configuration, a durable client and local state.
    struct Client {
        config: ChronoConfig,
        durable: DurableClient,
        local: Local,
    }

    impl Client {
        fn new(dir: &Dir, script: Arc<Script>) -> Client {
            let config = ChronoConfig::new("http://chrono.test").state_dir(&dir.0);
            let policy = DurablePolicy {
                default_retry_after: Duration::ZERO,
                ..DurablePolicy::default()
            };
            Client {
                local: Local::new(&config),
                durable: DurableClient::with_transport(script, policy),
                config,
            }
        }
        fn p(&self) -> ChronoProcesses<'_> {
            ChronoProcesses::new(&self.config, &self.durable, &self.local)
        }
        fn nonce(&self, key: &StartKey) -> String {
            self.local.load(key).unwrap().unwrap().nonce
        }
    }

    fn key(k: &str) -> StartKey {
        StartKey::new(k).unwrap()
    }

    fn sh(s: &str) -> Command {
        Command::new(["sh", "-c", s]).unwrap()
    }

    fn lost() -> Result<Answer, Error> {
        Err(SUBMIT
            .error(
                ErrorKind::Unavailable,
                "connection reset after the request was sent",
            )
            .with_retry(Retry::SAFE))
    }

    #[tokio::test]
    async fn a_start_whose_answer_was_lost_runs_once_and_another_process_finds_it() {
        let dir = Dir::new();
        let s = Arc::new(Script::default());
        // The first answer is lost (500 after accepting, then a reset): the same key and
        // payload go again and converge on the one operation.
        s.push(answer(500, &[], r#"{"error":{"code":"INTERNAL_ERROR"}}"#));
        s.push(lost());
        s.push(receipt());
        let a = Client::new(&dir, s.clone());
        let k = key("op-1");
        let started = a
            .p()
            .start(StartRequest::new(k.clone(), sh("echo hi")))
            .await
            .unwrap();
        assert!(started.fresh);
        assert_eq!(started.handle, a.p().handle_for(&k));
        assert!(started.handle.as_str().starts_with("chrono:"));
        assert!(started.handle.as_str().ends_with(":op-1"));
        let asked = s.asked.lock().unwrap().clone();
        assert_eq!(asked.len(), 3);
        for (m, path, headers, body) in &asked {
            assert_eq!((*m, path.as_str()), (Method::Post, "/executions"));
            assert_eq!(headers, &asked[0].2);
            assert_eq!(body, &asked[0].3, "the same payload every time");
        }
        assert_eq!(asked[0].2[0].1, idempotency_key(&a.local.ns, &k));

        // The same key again, here and from a fresh adapter instance: nothing is sent.
        let again = a
            .p()
            .start(StartRequest::new(k.clone(), sh("echo hi")))
            .await
            .unwrap();
        assert_eq!(
            (again.handle.clone(), again.fresh),
            (started.handle.clone(), false)
        );
        let b = Client::new(&dir, s.clone());
        let from_b = b
            .p()
            .start(StartRequest::new(k.clone(), sh("echo hi")))
            .await
            .unwrap();
        assert_eq!(
            (from_b.handle, from_b.fresh),
            (started.handle.clone(), false)
        );
        assert_eq!(s.asked.lock().unwrap().len(), 3);

        // The other process reads it from the stored token alone: running, then the exit.
        let nonce = a.nonce(&k);
        s.push(snapshot("running", 2, "0"));
        s.push(snapshot("running", 2, "0"));
        s.push(answer(304, &[("etag", "\"v2\""), ("retry-after", "0")], ""));
        s.push(snapshot("succeeded", 3, "0"));
        s.push(result(&frame(&nonce, b"hi\n", b"", 0), "", 0));
        let h = ProcessHandle::new(started.handle.as_str());
        let r = b.p().read(&h, StreamOffsets::ZERO).await.unwrap();
        assert_eq!(r.state, ProcessState::Running);
        assert!(r.stdout.is_empty() && r.stderr.is_empty());
        let w = b.p().wait(&h, Duration::from_secs(5)).await.unwrap();
        assert_eq!(w, Waited::Exited(Exit::Code(0)));
        let asked = s.asked.lock().unwrap().clone();
        // The conditional read carried the ETag of the snapshot before it.
        assert!(asked[4].2.is_empty());
        assert_eq!(asked[5].2, [("If-None-Match", "\"v2\"".to_owned())]);
        assert_eq!(asked.last().unwrap().1, format!("/executions/{ID}/result"));
        let pb = b.p();
        let out = pb.attach(&h, StreamOffsets::new(1, 0)).await.unwrap();
        let events: Vec<_> = collect(out).await;
        assert_eq!(
            events,
            [
                ProcessEvent::Stdout {
                    at: 1,
                    data: Bytes::from_static(b"i\n")
                },
                ProcessEvent::Exit(Exit::Code(0))
            ]
        );
        // The exited result is kept: no more requests for it.
        assert_eq!(s.asked.lock().unwrap().len(), asked.len());
        b.p().release(&h).await.unwrap();
        assert_eq!(
            b.p().status(&h).await.unwrap_err().kind(),
            ErrorKind::NotFound
        );
    }

    async fn collect(mut s: ProcessStream<'_>) -> Vec<ProcessEvent> {
        let mut v = Vec::new();
        while let Some(e) = s.next().await {
            v.push(e.unwrap());
        }
        v
    }

    #[tokio::test]
    async fn a_start_that_failed_after_sending_is_retried_with_the_same_payload() {
        let dir = Dir::new();
        let s = Arc::new(Script::default());
        s.push(answer(401, &[], r#"{"error":{"code":"UNAUTHORIZED"}}"#));
        let a = Client::new(&dir, s.clone());
        let k = key("op-2");
        let e = a
            .p()
            .start(StartRequest::new(k.clone(), sh("true")))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unauthenticated);
        // Recorded, no receipt yet: running to a read, no exit to wait for, and a follow is
        // refused (nothing to follow until a start reads the receipt); no request is sent.
        let h = a.p().handle_for(&k);
        let r = a.p().read(&h, StreamOffsets::ZERO).await.unwrap();
        assert_eq!(r.state, ProcessState::Running);
        let w = a.p().wait(&h, Duration::from_millis(50)).await.unwrap();
        assert_eq!(w, Waited::Running);
        let pa = a.p();
        let e = pa
            .attach(&h, StreamOffsets::ZERO)
            .await
            .unwrap()
            .collect()
            .await;
        assert_eq!(e.unwrap_err().kind(), ErrorKind::Unavailable);
        assert_eq!(s.asked.lock().unwrap().len(), 1);
        // Another process retries the start: same key, same body; not fresh (the first may
        // have reached the service).
        s.push(receipt());
        let b = Client::new(&dir, s.clone());
        let st = b
            .p()
            .start(StartRequest::new(k.clone(), sh("true")))
            .await
            .unwrap();
        assert!(!st.fresh);
        let asked = s.asked.lock().unwrap().clone();
        assert_eq!((&asked[0].2, &asked[0].3), (&asked[1].2, &asked[1].3));
    }

    #[tokio::test]
    async fn malformed_or_cut_results_are_errors_never_exits() {
        let dir = Dir::new();
        let s = Arc::new(Script::default());
        let a = Client::new(&dir, s.clone());
        let k = key("op-3");
        s.push(receipt());
        let h = a
            .p()
            .start(StartRequest::new(k.clone(), sh("true")))
            .await
            .unwrap()
            .handle;
        let nonce = a.nonce(&k);
        let good = frame(&nonce, b"abc", b"e", 3);
        let other = frame("0123456789abcdef0123456789abcdef", b"", b"", 0);
        for (what, stdout, code) in [
            ("a forged success", String::new(), 0),
            ("cut", good[..good.len() - 5].to_owned(), 3),
            ("no end line", good.replace("-end\n", "\n"), 3),
            ("another start's frame", other, 0),
            ("a wrong status", good.clone(), 0),
            ("a wrong length", good.replace(" 3 3 1\n", " 3 4 1\n"), 3),
            ("not base64", good.replace("YWJj", "Y!Jj"), 3),
            ("trailing data", format!("{good}more"), 3),
        ] {
            s.push(snapshot("failed", 3, "0"));
            s.push(result(&stdout, "", code));
            let e = a.p().wait(&h, Duration::from_secs(5)).await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Protocol, "{what}: {e}");
        }
        s.push(snapshot("failed", 3, "0"));
        s.push(result(&good, "", 3));
        let r = a.p().read(&h, StreamOffsets::new(1, 1)).await.unwrap();
        assert_eq!(
            (r.stdout.as_ref(), r.stderr.as_ref(), r.state),
            (&b"bc"[..], &b""[..], ProcessState::Exited(Exit::Code(3)))
        );
        assert!(r.is_end());
        let past = a.p().read(&h, StreamOffsets::new(4, 0)).await.unwrap_err();
        assert_eq!(past.kind(), ErrorKind::InvalidCommand);
    }

    #[tokio::test]
    async fn cancelled_uncertain_gone_and_expired_are_typed() {
        let dir = Dir::new();
        let s = Arc::new(Script::default());
        let a = Client::new(&dir, s.clone());
        let k = key("op-4");
        s.push(receipt());
        let h = a
            .p()
            .start(StartRequest::new(k.clone(), sh("sleep 9")))
            .await
            .unwrap()
            .handle;
        for (status, kind, state) in [
            ("cancelled", ErrorKind::Cancelled, ProcessState::Unknown),
            (
                "outcome_uncertain",
                ErrorKind::Internal,
                ProcessState::Unknown,
            ),
        ] {
            s.push(snapshot(status, 5, "0"));
            assert_eq!(
                a.p()
                    .wait(&h, Duration::from_secs(5))
                    .await
                    .unwrap_err()
                    .kind(),
                kind
            );
            s.push(snapshot(status, 5, "0"));
            assert_eq!(a.p().status(&h).await.unwrap().state, state);
            s.push(snapshot(status, 5, "0"));
            let pa = a.p();
            let out = pa.attach(&h, StreamOffsets::ZERO).await.unwrap();
            assert_eq!(out.collect().await.unwrap_err().kind(), kind);
        }
        for (code, body, kind) in [
            (
                404,
                r#"{"error":{"code":"OPERATION_NOT_FOUND"}}"#,
                ErrorKind::NotFound,
            ),
            (
                410,
                r#"{"error":{"code":"OPERATION_EXPIRED"}}"#,
                ErrorKind::Expired,
            ),
        ] {
            s.push(answer(code, &[], body));
            assert_eq!(
                a.p()
                    .wait(&h, Duration::from_secs(5))
                    .await
                    .unwrap_err()
                    .kind(),
                kind
            );
            s.push(answer(code, &[], body));
            assert_eq!(
                a.p()
                    .read(&h, StreamOffsets::ZERO)
                    .await
                    .unwrap_err()
                    .kind(),
                kind
            );
            s.push(answer(code, &[], body));
            assert_eq!(
                a.p().signal(&h, Signal::Kill).await.unwrap_err().kind(),
                kind
            );
        }
        // A sandbox timeout: no exit either.
        s.push(snapshot("failed", 6, "0"));
        s.push(answer(
            200,
            &[],
            r#"{"success":false,"error":{"code":"SANDBOX_TIMEOUT","message":"timed out"}}"#,
        ));
        let e = a.p().wait(&h, Duration::from_secs(5)).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Timeout(Deadline::Command), "{e}");
    }

    #[tokio::test]
    async fn wait_answers_running_at_its_deadline_and_kill_is_a_cancel() {
        let dir = Dir::new();
        let s = Arc::new(Script::default());
        let a = Client::new(&dir, s.clone());
        let k = key("op-5");
        s.push(receipt());
        let h = a
            .p()
            .start(StartRequest::new(k.clone(), sh("sleep 9")))
            .await
            .unwrap()
            .handle;
        // Retry-After 1 s, the deadline 300 ms: one read, then Running.
        s.push(snapshot("running", 2, "1"));
        let t = std::time::Instant::now();
        assert_eq!(
            a.p().wait(&h, Duration::from_millis(300)).await.unwrap(),
            Waited::Running
        );
        assert!(t.elapsed() < Duration::from_secs(1));
        assert_eq!(s.asked.lock().unwrap().len(), 2);
        // 429 on the status is waited out, not an exit and not an error.
        s.push(answer(
            429,
            &[("retry-after", "0")],
            r#"{"error":{"code":"RATE_LIMITED"}}"#,
        ));
        s.push(snapshot("running", 2, "5"));
        assert_eq!(
            a.p().wait(&h, Duration::from_millis(200)).await.unwrap(),
            Waited::Running
        );

        // TERM and the others are refused before any request; KILL cancels.
        let before = s.asked.lock().unwrap().len();
        for sig in [Signal::Term, Signal::Int, Signal::Hup] {
            let e = a.p().signal(&h, sig).await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Unsupported);
        }
        assert_eq!(s.asked.lock().unwrap().len(), before);
        s.push(answer(
            202,
            &[("etag", "\"v3\"")],
            std::str::from_utf8(&snapshot("running", 3, "0").unwrap().body).unwrap(),
        ));
        a.p().signal(&h, Signal::Kill).await.unwrap();
        assert_eq!(
            s.paths().last().unwrap(),
            &format!("/executions/{ID}/cancel")
        );
        // A running command is not released.
        s.push(snapshot("running", 3, "0"));
        assert_eq!(
            a.p().release(&h).await.unwrap_err().kind(),
            ErrorKind::Conflict
        );
        s.push(snapshot("cancelled", 4, "0"));
        a.p().release(&h).await.unwrap();
        assert!(a.local.load(&k).unwrap().is_none());
    }

    #[tokio::test]
    async fn refusals_are_typed_before_any_request() {
        let dir = Dir::new();
        let s = Arc::new(Script::default());
        let a = Client::new(&dir, s.clone());
        let p = a.p();
        let k = key("op-6");
        let e = p
            .start(StartRequest::new(k.clone(), sh("cat")).open_stdin())
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        let tty = execseam_core::TerminalSize { cols: 80, rows: 24 };
        let e = p
            .start(StartRequest::new(k.clone(), sh("true")).terminal(tty))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        assert_eq!(p.list().await.unwrap_err().kind(), ErrorKind::Unsupported);
        let w = StdinWrite {
            at: 0,
            data: Bytes::new(),
            close: true,
        };
        assert_eq!(
            p.write_stdin(&p.handle_for(&k), w)
                .await
                .unwrap_err()
                .kind(),
            ErrorKind::Unsupported
        );
        // Garbage, another adapter's, another service's: InvalidCommand; never started: NotFound.
        let other = Client {
            local: Local::new(&ChronoConfig::new("http://elsewhere.test").state_dir(&dir.0)),
            ..Client::new(&dir, s.clone())
        };
        for (h, kind) in [
            (
                ProcessHandle::new("not a handle"),
                ErrorKind::InvalidCommand,
            ),
            (ProcessHandle::new("e2b:abc"), ErrorKind::InvalidCommand),
            (other.p().handle_for(&k), ErrorKind::InvalidCommand),
            (
                ProcessHandle::new(format!("chrono:{}:a/b", a.local.ns)),
                ErrorKind::InvalidCommand,
            ),
            (p.handle_for(&k), ErrorKind::NotFound),
        ] {
            assert_eq!(
                p.read(&h, StreamOffsets::ZERO).await.unwrap_err().kind(),
                kind
            );
            assert_eq!(p.wait(&h, Duration::ZERO).await.unwrap_err().kind(), kind);
            assert_eq!(p.signal(&h, Signal::Kill).await.unwrap_err().kind(), kind);
            assert!(p.attach(&h, StreamOffsets::ZERO).await.is_err());
        }
        assert!(s.asked.lock().unwrap().is_empty());
        assert!(p.release(&p.handle_for(&k)).await.is_ok());
    }

    #[tokio::test]
    async fn hostile_answers_end_a_call_typed_and_a_retried_start_converges() {
        let dir = Dir::new();
        let s = Arc::new(Script::default());
        let a = Client::new(&dir, s.clone());
        let k = key("op-7");
        // Every submit answer lost: the start gives up after a few, safe to retry.
        for _ in 0..=MAX_TRANSIENT_FAILURES {
            s.push(lost());
        }
        let e = a
            .p()
            .start(StartRequest::new(k.clone(), sh("true")))
            .await
            .unwrap_err();
        assert!(e.retry().is_safe(), "{e}");
        s.push(receipt());
        let st = a
            .p()
            .start(StartRequest::new(k.clone(), sh("true")))
            .await
            .unwrap();
        assert!(!st.fresh);
        let asked = s.asked.lock().unwrap().clone();
        assert_eq!(asked.len() as u32, MAX_TRANSIENT_FAILURES + 2);
        assert!(
            asked
                .iter()
                .all(|x| (&x.2, &x.3) == (&asked[0].2, &asked[0].3))
        );
        // 429 on every status read: the attach ends with it, never with an exit.
        for _ in 0..=MAX_TRANSIENT_FAILURES {
            s.push(answer(
                429,
                &[("retry-after", "0")],
                r#"{"error":{"code":"RATE_LIMITED"}}"#,
            ));
        }
        let p = a.p();
        let e = p
            .attach(&st.handle, StreamOffsets::ZERO)
            .await
            .unwrap()
            .collect()
            .await;
        assert_eq!(e.unwrap_err().kind(), ErrorKind::RateLimited);
    }

    /// The program as prepared, run by bash here: its frame gives the exact bytes (NUL and a
    /// byte that is no UTF-8) and the status.
    #[test]
    fn the_program_frames_exact_bytes() {
        let config = ChronoConfig::new("http://chrono.test");
        let nonce = id::random_id(32);
        let c = Command::builder([
            "sh",
            "-c",
            "printf 'a\\000b\\377'; cat; printf E >&2; exit 5",
        ])
        .stdin(&b"in\xfe"[..])
        .env("X", "y")
        .build()
        .unwrap();
        let (req, wrapped) = prepare(&config, &c, &nonce).unwrap();
        assert!(wrapped);
        assert_eq!(
            prepare(&config, &c, &nonce).unwrap().0,
            req,
            "deterministic"
        );
        let dir = Dir::new();
        std::fs::create_dir_all(&dir.0).unwrap();
        for f in &req.input_files {
            let b = base64::engine::general_purpose::STANDARD
                .decode(&f.content)
                .unwrap();
            std::fs::write(dir.0.join(&f.path), b).unwrap();
        }
        let run = std::process::Command::new("bash")
            .args(["-c", &req.script])
            .current_dir(&dir.0)
            .output()
            .unwrap();
        assert_eq!(run.status.code(), Some(5));
        let o = ExecOutput {
            stdout: String::from_utf8(run.stdout).unwrap(),
            stderr: String::from_utf8(run.stderr).unwrap(),
            exit_code: 5,
            execution_time_ms: None,
            display_data: None,
            files: None,
        };
        let e = parse_frame(&o, &nonce).unwrap();
        assert_eq!(e.stdout.as_ref(), b"a\0b\xffin\xfe");
        assert_eq!(e.stderr.as_ref(), b"E");
        assert_eq!(e.exit, Exit::Code(5));
        assert!(parse_frame(&o, &id::random_id(32)).is_err());
    }
}
