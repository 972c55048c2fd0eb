//! A key → process directory in the sandbox, for native process handles whose provider mints
//! its own ids or cannot say whether a start was the first (Modal's router execs, AX's guest
//! processes).
//!
//! [`Processes::handle_for`](execseam_core::Processes::handle_for) does no I/O, so a handle
//! names the caller's key (`<prefix><sandbox>:<key>`), and the provider's own name for the
//! command is found again in the sandbox: one directory per key under a root (`mkdir`, atomic:
//! the first start's lock), holding whatever small files the adapter records there (AX: the
//! guest's `process_id`; Modal: the command's pid). Every operation is one short script run
//! through the adapter's ordinary exec ([`run_script`](crate::spool::run_script)).
//!
//! [`OffsetEvents`] turns an exec's event channel into the offset-stamped events of an attach.

use bytes::Bytes;
use execseam_core::{
    BoxFuture, Error, ErrorKind, Event, Exec, ProcessEvent, ProcessHandle, ProcessInfo,
    ProcessState, StartKey, StartRequest, StdinState, StdinWrite, StreamOffsets,
};

use crate::size::SizeLimit;

/// Creates the entry: `$1` root, `$2` key. Prints `registry:fresh` or `registry:exists`.
const REGISTER: &str = r#"umask 077; mkdir -p -- "$1" || exit 125
if mkdir -- "$1/$2" 2>/dev/null; then echo registry:fresh; else echo registry:exists; fi"#;

/// The registry's keys, one a line (`$1` root).
const KEYS: &str = r#"cd -- "$1" 2>/dev/null || exit 0
for k in *; do [ -d "$k" ] && printf '%s\n' "$k"; done; exit 0"#;

/// Records `$3` in the entry `$1`'s file `$2`, by rename (a reader sees all of it or nothing).
/// Prints `registry:set`, or `registry:none` without the entry.
const SET: &str = r#"[ -d "$1" ] || { echo registry:none; exit 0; }
printf '%s' "$3" >"$1/$2.tmp" && mv -f -- "$1/$2.tmp" "$1/$2" && echo registry:set"#;

/// The entry `$1`'s file `$2`: `registry:none` without the entry, `registry:empty` without the
/// file, else `registry:value` and its content on the next lines.
const GET: &str = r#"[ -d "$1" ] || { echo registry:none; exit 0; }
[ -f "$1/$2" ] || { echo registry:empty; exit 0; }
echo registry:value; cat -- "$1/$2""#;

/// What a native adapter tells its [`Registry`] about one key: the provider's side of
/// [`Registry::status`] and [`Registry::list`].
pub trait Native: Send + Sync {
    /// The exec the registry's scripts run through.
    fn exec(&self) -> &dyn Exec;

    /// The sandbox the handles name.
    fn sandbox(&self) -> &str;

    /// The state of `key`'s process: `None` when `key` has no entry (`registered`: the caller
    /// just listed it), [`ProcessState::Unknown`] when the provider does not know the process.
    fn state<'s>(&'s self, key: &'s StartKey, op: &'static str, registered: bool) -> Known<'s>;

    /// stdin's state of `key`'s process, which the provider knows.
    fn stdin<'s>(&'s self, key: &'s StartKey, op: &'static str) -> StdinOf<'s>;
}

/// What [`Native::state`] answers.
pub type Known<'s> = BoxFuture<'s, Result<Option<ProcessState>, Error>>;

/// What [`Native::stdin`] answers.
pub type StdinOf<'s> = BoxFuture<'s, Result<Option<StdinState>, Error>>;

/// A process registry in the sandbox: see the [module docs](self).
#[derive(Clone, Copy, Debug)]
pub struct Registry {
    /// The directory that holds one entry per key (created on first use, mode 700).
    pub root: &'static str,
    /// The handles' prefix (`"modal1:"`): it names the adapter and the handle's version.
    pub prefix: &'static str,
    /// The provider, in errors.
    pub provider: &'static str,
}

impl Registry {
    /// The handle of `key` in `sandbox`; no I/O.
    pub fn handle(&self, sandbox: &str, key: &StartKey) -> ProcessHandle {
        ProcessHandle::new(format!("{}{sandbox}:{}", self.prefix, key.as_str()))
    }

    /// The key of `handle` if it is one of `sandbox`'s; [`ErrorKind::InvalidCommand`] before any
    /// I/O otherwise (a garbage handle, another adapter's, another sandbox's).
    pub fn key_of(
        &self,
        sandbox: &str,
        handle: &ProcessHandle,
        op: &'static str,
    ) -> Result<StartKey, Error> {
        let parsed = handle
            .as_str()
            .strip_prefix(self.prefix)
            .and_then(|rest| rest.rsplit_once(':'))
            .and_then(|(sandbox, key)| Some((sandbox, StartKey::new(key).ok()?)));
        match parsed {
            Some((s, key)) if s == sandbox => Ok(key),
            Some(_) => Err(self.error(
                ErrorKind::InvalidCommand,
                op,
                "the handle belongs to another sandbox",
            )),
            None => Err(self.error(
                ErrorKind::InvalidCommand,
                op,
                format!("not a {} process handle", self.provider),
            )),
        }
    }

    /// The checks of a start before any I/O: the terminal (`no_terminal`: why the provider has
    /// none, [`ErrorKind::Unsupported`]) and the command's size; the key and its handle.
    pub fn admit(
        &self,
        sandbox: &str,
        request: &StartRequest,
        limit: &SizeLimit,
        no_terminal: Option<&'static str>,
    ) -> Result<(StartKey, ProcessHandle), Error> {
        if let (Some(_), Some(why)) = (request.terminal, no_terminal) {
            return Err(self.error(ErrorKind::Unsupported, "start", why));
        }
        crate::size::check_size(self.provider, &request.command, limit)?;
        Ok((request.key.clone(), self.handle(sandbox, &request.key)))
    }

    /// The error of a handle whose key has no entry.
    pub fn not_started(&self, op: &'static str) -> Error {
        self.error(
            ErrorKind::NotFound,
            op,
            "no process was started (or it was released) under this handle",
        )
    }

    /// What `native` knows of `key`: `None` without an entry; stdin's state unless the
    /// provider does not know the process.
    pub async fn info(
        &self,
        native: &dyn Native,
        key: StartKey,
        op: &'static str,
        registered: bool,
    ) -> Result<Option<ProcessInfo>, Error> {
        let Some(state) = native.state(&key, op, registered).await? else {
            return Ok(None);
        };
        let stdin = match state {
            ProcessState::Unknown => None,
            _ => native.stdin(&key, op).await?,
        };
        Ok(Some(ProcessInfo {
            handle: self.handle(native.sandbox(), &key),
            key,
            state,
            written: None,
            stdin,
        }))
    }

    /// [`Processes::status`](execseam_core::Processes::status) of a native adapter.
    pub async fn status(
        &self,
        native: &dyn Native,
        handle: &ProcessHandle,
    ) -> Result<ProcessInfo, Error> {
        let op = "status";
        let key = self.key_of(native.sandbox(), handle, op)?;
        self.info(native, key, op, false)
            .await?
            .ok_or_else(|| self.not_started(op))
    }

    /// [`Processes::list`](execseam_core::Processes::list) of a native adapter: every key with
    /// an entry, sorted.
    pub async fn list(&self, native: &dyn Native) -> Result<Vec<ProcessInfo>, Error> {
        let op = "list";
        let mut out = Vec::new();
        for key in self.keys(native.exec(), op).await? {
            out.extend(self.info(native, key, op, true).await?);
        }
        Ok(out)
    }

    /// The entry's directory in the sandbox.
    pub fn entry(&self, key: &StartKey) -> String {
        format!("{}/{}", self.root, key.as_str())
    }

    /// An error of this provider and operation.
    pub fn error(&self, kind: ErrorKind, op: &'static str, message: impl Into<String>) -> Error {
        Error::new(kind, message)
            .with_provider(self.provider)
            .with_operation(op)
    }

    fn protocol(&self, op: &'static str, message: &str) -> Error {
        Error::protocol(format!("the process registry's {message}"))
            .with_provider(self.provider)
            .with_operation(op)
    }

    /// Runs `script` with `args` through `exec`; its stdout, trailing newlines trimmed.
    pub async fn run(
        &self,
        exec: &dyn Exec,
        op: &'static str,
        script: &str,
        args: &[&str],
    ) -> Result<String, Error> {
        let out =
            crate::spool::run_script(exec, op, "registry", script, args, Bytes::new()).await?;
        String::from_utf8(out.to_vec())
            .map(|s| s.trim_end_matches('\n').to_owned())
            .map_err(|_| self.protocol(op, "answer is not UTF-8"))
    }

    /// Runs `script` with `args` through `exec` and maps its one-line answer by `answers`; any
    /// other answer is a protocol error.
    pub async fn ask<T: Copy>(
        &self,
        exec: &dyn Exec,
        op: &'static str,
        script: &str,
        args: &[&str],
        answers: &[(&str, T)],
    ) -> Result<T, Error> {
        let answer = self.run(exec, op, script, args).await?;
        answers
            .iter()
            .find(|(a, _)| *a == answer)
            .map(|(_, t)| *t)
            .ok_or_else(|| {
                let known: Vec<&str> = answers.iter().map(|(a, _)| *a).collect();
                self.protocol(
                    op,
                    &format!("{op} script gave none of its answers {known:?}"),
                )
            })
    }

    /// Creates `key`'s entry: true if this call created it (the first start), false if it
    /// existed. The entry is the start's lock, so a failure here is safe to retry.
    pub async fn register(
        &self,
        exec: &dyn Exec,
        op: &'static str,
        key: &StartKey,
    ) -> Result<bool, Error> {
        let answers = [("registry:fresh", true), ("registry:exists", false)];
        self.ask(exec, op, REGISTER, &[self.root, key.as_str()], &answers)
            .await
            .map_err(crate::retry::repeatable)
    }

    /// Whether `key` has an entry.
    pub async fn exists(
        &self,
        exec: &dyn Exec,
        op: &'static str,
        key: &StartKey,
    ) -> Result<bool, Error> {
        let script = "[ -d \"$1\" ] && echo yes || echo no";
        let answers = [("yes", true), ("no", false)];
        self.ask(exec, op, script, &[&self.entry(key)], &answers)
            .await
    }

    /// Records `value` as the entry's file `name` (atomic); `NotFound` without the entry.
    pub async fn set(
        &self,
        exec: &dyn Exec,
        op: &'static str,
        key: &StartKey,
        name: &str,
        value: &str,
    ) -> Result<(), Error> {
        let answers = [("registry:set", true), ("registry:none", false)];
        if self
            .ask(exec, op, SET, &[&self.entry(key), name, value], &answers)
            .await?
        {
            return Ok(());
        }
        Err(self.error(
            ErrorKind::NotFound,
            op,
            "no process is registered under this key",
        ))
    }

    /// The entry's file `name`: `None` for the entry, `Some(None)` for the file when missing.
    pub async fn get(
        &self,
        exec: &dyn Exec,
        op: &'static str,
        key: &StartKey,
        name: &str,
    ) -> Result<Option<Option<String>>, Error> {
        let answer = self.run(exec, op, GET, &[&self.entry(key), name]).await?;
        match answer.split_once('\n').unwrap_or((answer.as_str(), "")) {
            ("registry:none", _) => Ok(None),
            ("registry:empty", _) => Ok(Some(None)),
            ("registry:value", v) => Ok(Some(Some(v.to_owned()))),
            _ => Err(self.protocol(op, "read script gave no answer")),
        }
    }

    /// The keys with an entry, sorted.
    pub async fn keys(&self, exec: &dyn Exec, op: &'static str) -> Result<Vec<StartKey>, Error> {
        let keys = self.run(exec, op, KEYS, &[self.root]).await?;
        let mut keys: Vec<StartKey> = keys.lines().filter_map(|k| StartKey::new(k).ok()).collect();
        keys.sort();
        Ok(keys)
    }

    /// The answer to a stdin write that is not at the accepted count (`st`): `Ok(st)` for the
    /// retry of a write that landed, [`ErrorKind::Conflict`] (saying where to write) otherwise.
    pub fn stale_write(
        &self,
        st: StdinState,
        write: &StdinWrite,
        op: &'static str,
    ) -> Result<StdinState, Error> {
        let len = write.data.len() as u64;
        if write.at + len == st.accepted && (st.closed || !write.close) {
            return Ok(st);
        }
        Err(self.error(
            ErrorKind::Conflict,
            op,
            if st.closed {
                format!("stdin is closed (after {} bytes)", st.accepted)
            } else {
                format!(
                    "stdin has accepted {} bytes, not {}: write from {}",
                    st.accepted, write.at, st.accepted
                )
            },
        ))
    }

    /// Releases `key`: its entry is removed unless `state` (`None`: the provider no longer knows
    /// the process) says it runs, which is [`ErrorKind::Conflict`].
    pub async fn release(
        &self,
        exec: &dyn Exec,
        op: &'static str,
        key: &StartKey,
        state: Option<ProcessState>,
    ) -> Result<(), Error> {
        if state == Some(ProcessState::Running) {
            return Err(self.error(
                ErrorKind::Conflict,
                op,
                "the process is running: signal it first",
            ));
        }
        self.forget(exec, op, key).await
    }

    /// Removes `key`'s entry (nothing if it has none).
    pub async fn forget(
        &self,
        exec: &dyn Exec,
        op: &'static str,
        key: &StartKey,
    ) -> Result<(), Error> {
        self.run(exec, op, "rm -rf -- \"$1\"", &[&self.entry(key)])
            .await
            .map(drop)
    }
}

/// An exec's events (`Stdout`/`Stderr` chunks, then `Exit`) as an attach's
/// [`ProcessEvent`]s, each chunk stamped with its stream offset, counted from where the
/// attach started.
pub struct OffsetEvents {
    rx: tokio::sync::mpsc::Receiver<Result<Event, Error>>,
    at: [u64; 2],
}

impl OffsetEvents {
    /// The events of `rx`, whose output starts at `from`.
    pub fn new(
        rx: tokio::sync::mpsc::Receiver<Result<Event, Error>>,
        from: StreamOffsets,
    ) -> OffsetEvents {
        OffsetEvents {
            rx,
            at: [from.stdout, from.stderr],
        }
    }
}

impl futures_util::Stream for OffsetEvents {
    type Item = Result<ProcessEvent, Error>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx).map(|item| {
            item.map(|r| {
                r.map(|event| match event {
                    Event::Stdout(data) => {
                        let at = self.at[0];
                        self.at[0] += data.len() as u64;
                        ProcessEvent::Stdout { at, data }
                    }
                    Event::Stderr(data) => {
                        let at = self.at[1];
                        self.at[1] += data.len() as u64;
                        ProcessEvent::Stderr { at, data }
                    }
                    Event::Exit(exit) => ProcessEvent::Exit(exit),
                })
            })
        })
    }
}
