//! [`Reattach`] for E2B: a command started detached under a process tag, its output and exit
//! kept in a spool directory in the sandbox, and `process.Process/Connect` by tag to wait for it.
//!
//! # Why a spool, and not envd's own buffers
//!
//! envd can reconnect to a process (`process.Process/Connect` by pid or tag, e2b-dev/infra
//! `packages/envd/internal/services/process/connect.go`), but what it gives back is not enough to
//! prove a result:
//!
//! - **Output written while nobody is attached is dropped** by the fan-out of the envd versions
//!   in service (`handler/multiplex.go`: `MultiplexedChannel.run` delivers each value to the
//!   subscribers present and to nobody else). A later envd (`handler/multiplex/channel.go`,
//!   `ConnectRequest.replay`) keeps unconsumed items in memory for the first fork that asks for a
//!   replay; which envd a template runs is not known to the client, and the queue lives in
//!   envd's memory only.
//! - **An exited process is forgotten**: envd removes it from its table once it ended
//!   (`start.go`), so `Connect` answers `not_found` "process with tag … not found", whatever
//!   its exit was.
//!
//! So the adapter does not rely on either: the command runs under `/bin/sh` with its stdout and
//! stderr redirected to files in `/tmp/execseam-reattach/<tag>/` and its status written to
//! `exit` (through a rename, so it is whole or absent) when it ends. `attach` connects by tag to
//! wait for the end (or finds the process gone), then reads the three files with `GET /files`:
//! the output is byte-exact and complete whether or not anybody was attached, and the exit is
//! the one the shell saw. No `exit` file and no process is an `Err(NotFound)`: the command never
//! started, or the sandbox lost its files; never a guessed exit.
//!
//! What differs from [`Exec::exec`](execseam_core::Exec::exec): the output arrives once the
//! command ended (stdout first, then stderr: their interleaving is not kept); a program that is
//! not found is the shell's exit 127 with its message on stderr; a command killed by a signal is
//! the shell's status `128 + n` as an [`Exit::Code`] (the command is the shell's child), except
//! when the wrapper itself was killed while attached (a cancel kills the whole process group),
//! which is the end event's [`Exit::Signal`]. `E2bConfig::command_timeout` is not sent with a
//! detached start (envd would kill the wrapper only, leaving the command orphaned): the caller
//! bounds it and kills it through the attach stream.

use bytes::Bytes;
use execseam_core::{
    BoxFuture, Command, Error, ErrorKind, Event, EventStream, Exit, ProcessHandle, Reattach,
};
use futures_util::StreamExt as _;

use crate::connect::{CallError, Code, RpcError};
use crate::error::{Ctx, PROVIDER};
use crate::exec::{E2bExec, deliverable};
use crate::wire::{self, ProcessSelector};
use execseam_adapter_kit::retry::Stage;

/// Where the spools live in the sandbox (world-writable on every template).
pub(crate) const SPOOL_ROOT: &str = "/tmp/execseam-reattach";
const PREFIX: &str = "e2b1:";

/// The wrapper: `$1` is the spool directory, the rest is argv.
const WRAPPER: &str = r#"d=$1; shift
mkdir -p -- "$d" || exit 125
if [ -e "$d/stdin" ]; then i=$d/stdin; else i=/dev/null; fi
"$@" <"$i" >"$d/stdout" 2>"$d/stderr"
s=$?
printf '%s\n' "$s" >"$d/exit.tmp" && mv -f -- "$d/exit.tmp" "$d/exit"
exit "$s""#;

fn invalid_handle() -> Error {
    Error::new(
        ErrorKind::InvalidCommand,
        "not an E2B process handle (e2b1:execseam-…)",
    )
    .with_provider(PROVIDER)
    .with_operation("attach")
}

/// The tag in a handle, checked (it becomes a path and a tag).
fn tag_of(handle: &ProcessHandle) -> Result<&str, Error> {
    let tag = handle
        .as_str()
        .strip_prefix(PREFIX)
        .ok_or_else(invalid_handle)?;
    let ok = tag.starts_with("execseam-")
        && tag.len() <= 64
        && tag.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if ok { Ok(tag) } else { Err(invalid_handle()) }
}

fn spool(tag: &str) -> String {
    format!("{SPOOL_ROOT}/{tag}")
}

fn gone(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::NotFound, message)
        .with_provider(PROVIDER)
        .with_operation("attach")
}

fn protocol(message: impl Into<String>) -> Error {
    Error::protocol(message)
        .with_provider(PROVIDER)
        .with_operation("attach")
}

impl E2bExec {
    /// A file of the spool, `None` if it does not exist.
    async fn spool_file(&self, path: &str) -> Result<Option<Bytes>, Error> {
        match self.read_file(path).await {
            Ok(b) => Ok(Some(b)),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Runs a short helper command (`rm -rf` of a spool) to its end.
    async fn helper(&self, argv: Vec<String>) -> Result<(), Error> {
        let cmd = Command::builder(argv).build()?;
        let out = execseam_core::Exec::exec(self, cmd).await?;
        if out.exit.success() {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::Internal,
                format!("a spool helper failed with {:?}", out.exit),
            )
            .with_provider(PROVIDER)
            .with_operation("release"))
        }
    }

    async fn start_detached(&self, handle: &ProcessHandle, cmd: Command) -> Result<(), Error> {
        execseam_adapter_kit::size::check_size(PROVIDER, &cmd, &crate::SIZE_LIMIT)?;
        let tag = tag_of(handle)?.to_owned();
        let dir = spool(&tag);
        let inner = &self.inner;
        if !cmd.stdin().is_empty() {
            self.write_file(&format!("{dir}/stdin"), cmd.stdin().clone())
                .await?;
        }
        let (argv, envs) = deliverable(&cmd)?;
        let mut args = vec![
            "-c".to_owned(),
            WRAPPER.to_owned(),
            "execseam-detached".to_owned(),
            dir,
        ];
        args.extend(argv);
        let req = wire::StartRequest {
            process: wire::ProcessConfig {
                cmd: "/bin/sh".into(),
                args,
                envs,
                cwd: cmd.workdir().map(str::to_owned),
            },
            tag: Some(tag),
            stdin: false,
        };
        tracing::debug!(provider = PROVIDER, sandbox = %inner.sandbox_id, tool = %cmd.tool(), program = %cmd.program(), "start detached");
        let ctx = Ctx::exec("start", Stage::Submit);
        let mut stream = match inner.envd.start(&req, None).await {
            Ok(s) => s,
            Err(e) => return Err(inner.fail(e, ctx).await),
        };
        // The start event: envd registered the process under its tag. Closing the stream then
        // does not kill it (envd never does: e2b-dev/E2B#500).
        match stream.message::<wire::StartResponse>().await {
            Ok(Some(wire::StartResponse {
                event: Some(wire::ProcessEvent { start: Some(_), .. }),
            })) => Ok(()),
            Ok(_) => Err(protocol("process.Start did not begin with a start event")),
            Err(e) => Err(inner.fail(e, ctx).await),
        }
    }

    async fn attach_detached(&self, handle: &ProcessHandle) -> Result<EventStream, Error> {
        let tag = tag_of(handle)?.to_owned();
        let inner = self.inner.clone();
        let ctx = Ctx::new("attach", Stage::Before);
        let live = match inner
            .envd
            .connect_process(ProcessSelector::Tag(tag.clone()))
            .await
        {
            Ok(mut stream) => match stream.message::<wire::StartResponse>().await {
                Ok(Some(wire::StartResponse {
                    event:
                        Some(wire::ProcessEvent {
                            start: Some(start), ..
                        }),
                })) => Some((stream, start.pid)),
                Ok(_) => return Err(protocol("process.Connect did not begin with a start event")),
                Err(CallError::Rpc {
                    error:
                        RpcError {
                            code: Code::NotFound,
                            ..
                        },
                    ..
                }) => None,
                Err(e) => return Err(inner.fail(e, ctx).await),
            },
            // Exited and forgotten by envd, or never started: the spool tells which.
            Err(CallError::Rpc {
                error:
                    RpcError {
                        code: Code::NotFound,
                        ..
                    },
                ..
            }) => None,
            Err(e) => return Err(inner.fail(e, ctx).await),
        };
        let target = match &live {
            Some((_, pid)) => ProcessSelector::Pid(*pid),
            None => ProcessSelector::Tag(tag.clone()),
        };
        let me = self.clone();
        let wait = async move {
            let mut wrapper_exit = None;
            if let Some((mut stream, _)) = live {
                loop {
                    match stream.message::<wire::StartResponse>().await {
                        Ok(Some(resp)) => {
                            let Some(event) = resp.event else {
                                return Err(protocol("a stream message without an event"));
                            };
                            if let Some(end) = event.end {
                                wrapper_exit = Some(crate::exec::exit_of(&end).map_err(protocol)?);
                            }
                            // Data (none: the wrapper redirects everything) and keepalives.
                        }
                        Ok(None) => break,
                        Err(e) => {
                            return Err(me.inner.fail(e, Ctx::exec("attach", Stage::After)).await);
                        }
                    }
                }
                if wrapper_exit.is_none() {
                    return Err(protocol(
                        "process.Connect ended without an end event (no exit status)",
                    ));
                }
            }
            let dir = spool(&tag);
            let exit = match me.spool_file(&format!("{dir}/exit")).await? {
                Some(b) => {
                    let text = String::from_utf8_lossy(&b);
                    let code: i32 = text.trim().parse().map_err(|_| {
                        protocol(format!("the spooled exit status {text:?} is not a number"))
                    })?;
                    Exit::Code(code)
                }
                None => match wrapper_exit {
                    // The wrapper itself was killed (a cancel kills its whole group) while we
                    // watched: that is the exit.
                    Some(x @ Exit::Signal(_)) => x,
                    _ => {
                        return Err(gone(
                            "the detached command is gone and left no exit status (it never \
                             started, or the sandbox lost its spool): its outcome is unknown",
                        ));
                    }
                },
            };
            let stdout = me.spool_file(&format!("{dir}/stdout")).await?;
            let stderr = me.spool_file(&format!("{dir}/stderr")).await?;
            let (Some(stdout), Some(stderr)) = (stdout, stderr) else {
                return Err(gone(
                    "the detached command's spooled output is gone: its output is unknown",
                ));
            };
            Ok([
                Event::Stdout(stdout),
                Event::Stderr(stderr),
                Event::Exit(exit),
            ])
        };
        let events = futures_util::stream::once(wait).flat_map(|r| {
            let items: Vec<Result<Event, Error>> = match r {
                Ok(evs) => evs
                    .into_iter()
                    .filter(|e| !matches!(e, Event::Stdout(b) | Event::Stderr(b) if b.is_empty()))
                    .map(Ok)
                    .collect(),
                Err(e) => vec![Err(e)],
            };
            futures_util::stream::iter(items)
        });
        let killer = self.inner.clone();
        Ok(EventStream::new(events).with_kill(move || async move {
            match killer.kill_process(target).await {
                // Never registered under its tag: nothing runs.
                Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
                r => r,
            }
        }))
    }
}

impl Reattach for E2bExec {
    fn new_handle(&self) -> ProcessHandle {
        ProcessHandle::new(format!(
            "{PREFIX}execseam-{}",
            execseam_adapter_kit::id::random_id(16)
        ))
    }

    fn start(&self, handle: &ProcessHandle, command: Command) -> BoxFuture<'_, Result<(), Error>> {
        let handle = handle.clone();
        let span = tracing::debug_span!("exec", provider = PROVIDER, operation = "start_detached", tool = %command.tool());
        Box::pin(tracing::Instrument::instrument(
            async move { self.start_detached(&handle, command).await },
            span,
        ))
    }

    fn attach(&self, handle: &ProcessHandle) -> BoxFuture<'_, Result<EventStream, Error>> {
        let handle = handle.clone();
        Box::pin(async move { self.attach_detached(&handle).await })
    }

    fn release(&self, handle: &ProcessHandle) -> BoxFuture<'_, Result<(), Error>> {
        let handle = handle.clone();
        Box::pin(async move {
            let dir = spool(tag_of(&handle)?);
            self.helper(vec!["rm".into(), "-rf".into(), "--".into(), dir])
                .await
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_checked_before_they_become_paths() {
        let ok = ProcessHandle::new("e2b1:execseam-abc123");
        assert_eq!(tag_of(&ok).unwrap(), "execseam-abc123");
        for bad in [
            "execseam-abc",
            "e2b1:../../etc",
            "e2b1:execseam-a/b",
            "e2b1:other-tag",
            "e2b1:execseam-a b",
        ] {
            assert_eq!(
                tag_of(&ProcessHandle::new(bad)).unwrap_err().kind(),
                ErrorKind::InvalidCommand,
                "{bad}"
            );
        }
    }
}
