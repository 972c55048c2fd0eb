//! Terminals on Daytona's own PTY sessions, where `EXECSEAM_DAYTONA_TERMINAL` is `attached` (or
//! `auto` and the image has no `script`; the default is the kit's recorder, reattachable from any
//! process) (daemon `apps/daemon/pkg/toolbox/process/pty` at
//! v0.190.0: `controller.go`, `session.go`, `websocket.go`, `types.go`), held by this client
//! through the kit's [`Attached`](execseam_adapter_kit::attached) terminals.
//!
//! A PTY session runs the sandbox user's shell (`zsh`, `bash` or `sh`, with `-i -l`) on a
//! pseudo-terminal; it takes no command. So a start stores a small script in the sandbox (an
//! ordinary exec whose stdin carries it), creates the session (`POST /process/pty` with the
//! size, and the workdir as `cwd`), connects (`GET /process/pty/{id}/connect`), waits for
//! `{"type":"control","status":"connected"}` and types one short line into the shell:
//! ` exec sh FILE`. The script removes itself, prints a fresh mark (only the script holds it, so
//! the echo of the typed line never does), turns job control on (`set -m`), runs the command
//! (the kit's wrapper, then argv) as a job of its own, the terminal's foreground group, and
//! exits with its status (trapping SIGINT: dash raises a job's SIGINT death on itself, `jobs.c`
//! `waitforjob`). Everything up to the mark's line (motd, prompt, the typed line's
//! echo) is dropped; the command's terminal follows. Argv is never typed: tabs and control
//! bytes would reach the line editor.
//!
//! Why a job and not `exec`: the daemon reports the session process's end as Go's `ExitCode()`
//! (`childreap.Reap`), -1 for any signal death; the job's shell reports 128+N as every shell
//! does, so Ctrl-C is 130 and a kill 137, exactly. After a death by a signal other than
//! SIGINT or SIGPIPE the shell prints its job line (`Terminated`, `Killed`) on the terminal, as
//! at a prompt.
//!
//! Reattach: the daemon keeps no scrollback (a client that connects gets the output from then
//! on: `attachWebSocket`), so the output lives in this client's memory: replay from any offset
//! within the sandbox handle that started it, `NotFound` from any other (`terminal_reattach:
//! false`). When that handle goes with the command still running, the session is deleted (the
//! daemon kills its process tree): nobody could read it again. The exit is the close frame's
//! `{"exitCode":N}`; a socket that ends without one is an error, never an exit. Env values go
//! through a 0600 file ([`env_through_file`]): the daemon lists a session's `envs` to anyone.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use execseam_adapter_kit::attached::{OpenTerminal, Opened, TerminalControl, env_through_file};
use execseam_adapter_kit::degrade;
use execseam_adapter_kit::retry::Stage;
use execseam_core::{
    BoxFuture, Command, Error, ErrorKind, Exec, Exit, Retry, Sandbox, TerminalSize,
};
use futures_util::{SinkExt, StreamExt};
use tokio::io::AsyncReadExt;
use tokio_websockets::Message;

use crate::PROVIDER;
use crate::client::{Toolbox, Ws};
use crate::error;
use crate::exec::DaytonaExec;
use crate::wire;

const OP: &str = "terminal";

/// The daemon's limit on a side of the terminal (`CreatePTYSession`).
const MAX_SIDE: u16 = 1000;

/// The most typed into the terminal in one frame: the daemon reads frames of at most 64 KiB
/// (`readLimit`).
const MAX_INPUT_FRAME: usize = 32 << 10;

fn refuse(kind: ErrorKind, retry: Retry, msg: impl Into<String>) -> Error {
    Error::new(kind, msg.into())
        .with_retry(retry)
        .with_provider(PROVIDER)
        .with_operation(OP)
}

/// The script the session's shell runs in place of itself: `$0` is its file.
fn script(mark: &str, argv: &[String]) -> String {
    format!(
        "rm -f -- \"$0\"\n(set -m) 2>/dev/null && set -m\ntrap : INT\nprintf '%s:go\\n' {mark}\n{}\nexit $?\n",
        degrade::join(argv)
    )
}

/// What the session's socket gave: output, its end with the exit, or the error that cut it.
enum Frame {
    Output(Bytes),
    Control(wire::PtyControl),
    Exit(i32),
}

/// Reads one frame; `None` when the socket ended without a close frame.
async fn next_frame(
    ws: &mut futures_util::stream::SplitStream<Ws>,
) -> Option<Result<Frame, Error>> {
    loop {
        let m = match ws.next().await? {
            Ok(m) => m,
            Err(e) => {
                return Some(Err(execseam_adapter_kit::ws::frame_error(
                    error::call(OP, Stage::After),
                    &e,
                )));
            }
        };
        if m.is_binary() {
            return Some(Ok(Frame::Output(Bytes::copy_from_slice(m.as_payload()))));
        }
        if let Some(text) = m.as_text() {
            // The daemon's output is binary; its text messages are control messages.
            return Some(match serde_json::from_str::<wire::PtyControl>(text) {
                Ok(c) if c.kind == "control" => Ok(Frame::Control(c)),
                _ => Ok(Frame::Output(Bytes::copy_from_slice(text.as_bytes()))),
            });
        }
        if let Some((code, reason)) = m.as_close() {
            return Some(match serde_json::from_str::<wire::PtyExit>(reason) {
                Ok(exit) => Ok(Frame::Exit(exit.exit_code)),
                Err(_) => Err(refuse(
                    ErrorKind::Unavailable,
                    Retry::Unsafe,
                    format!(
                        "the PTY session's socket closed with {} {reason:?} and no exit code",
                        u16::from(code)
                    ),
                )),
            });
        }
    }
}

fn exit_of(code: i32) -> Result<Exit, Error> {
    if code < 0 {
        // Only the session's own process dies unnamed (a kill of the job's shell itself).
        return Err(refuse(
            ErrorKind::Protocol,
            Retry::Unsafe,
            "the PTY session's process died by a signal Daytona does not name (exitCode -1)",
        ));
    }
    Ok(Exit::Code(code))
}

/// The end a session's socket gave: the exit (taken once), and whether it came at all.
#[derive(Default)]
struct End {
    exit: Mutex<Option<Result<Exit, Error>>>,
    ended: std::sync::atomic::AtomicBool,
}

/// One session this client opened: resize, its exit, its deletion when dropped unfinished.
struct Session {
    toolbox: Toolbox,
    id: String,
    end: Arc<End>,
}

impl TerminalControl for Session {
    fn resize(&self, size: TerminalSize) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            check_size(size)?;
            self.toolbox.resize_pty(&self.id, pty_size(size)).await
        })
    }

    fn exit(&self) -> BoxFuture<'_, Result<Exit, Error>> {
        let exit = self.end.exit.lock().expect("terminal exit").take();
        Box::pin(std::future::ready(exit.unwrap_or_else(|| {
            Err(refuse(
                ErrorKind::Protocol,
                Retry::Unsafe,
                "the PTY session's socket ended without an exit code",
            ))
        })))
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if self.end.ended.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        let (toolbox, id) = (self.toolbox.clone(), std::mem::take(&mut self.id));
        execseam_adapter_kit::reaper::spawn(PROVIDER, "delete a PTY session", async move {
            match toolbox.delete_pty(&id).await {
                Err(e) if e.kind() != ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            }
        });
    }
}

fn pty_size(size: TerminalSize) -> wire::PtySize {
    wire::PtySize {
        cols: size.cols,
        rows: size.rows,
    }
}

fn check_size(size: TerminalSize) -> Result<(), Error> {
    if size.cols > MAX_SIDE || size.rows > MAX_SIDE {
        return Err(refuse(
            ErrorKind::InvalidCommand,
            Retry::Never,
            format!(
                "a Daytona terminal is at most {MAX_SIDE}x{MAX_SIDE}; asked {}x{}",
                size.rows, size.cols
            ),
        ));
    }
    Ok(())
}

/// Reads the socket until the mark's line (a control message other than `connected`, or the
/// session's end, is an error); answers what followed it in the same frame.
async fn until_mark(
    ws: &mut futures_util::stream::SplitStream<Ws>,
    mark: &str,
) -> Result<Bytes, Error> {
    let needle = format!("{mark}:go");
    let mut seen: Vec<u8> = Vec::new();
    loop {
        let (kind, msg) = match next_frame(ws).await {
            Some(Ok(Frame::Output(b))) => {
                seen.extend_from_slice(&b);
                (None, String::new())
            }
            Some(Ok(Frame::Control(c))) if c.status == "connected" => continue,
            Some(Ok(Frame::Control(c))) => (
                Some(ErrorKind::Unavailable),
                format!(
                    "the PTY session answered {:?}: {}",
                    c.status,
                    c.error.unwrap_or_default()
                ),
            ),
            Some(Ok(Frame::Exit(code))) => (
                Some(ErrorKind::Internal),
                format!(
                    "the PTY session's shell ended (exit code {code}) before the command started: {}",
                    String::from_utf8_lossy(&seen[seen.len().saturating_sub(512)..]).trim()
                ),
            ),
            Some(Err(e)) => return Err(e),
            None => (
                Some(ErrorKind::Unavailable),
                "the PTY session's socket ended before the command started".to_owned(),
            ),
        };
        if let Some(kind) = kind {
            return Err(refuse(kind, Retry::Unsafe, msg));
        }
        let Some(at) = seen
            .windows(needle.len())
            .position(|w| w == needle.as_bytes())
        else {
            continue;
        };
        let rest = &seen[at + needle.len()..];
        let skip = match rest {
            [b'\r', b'\n', ..] => 2,
            [b'\n', ..] => 1,
            [] | [b'\r'] => continue,
            _ => 0,
        };
        return Ok(Bytes::copy_from_slice(&rest[skip..]));
    }
}

impl DaytonaExec {
    async fn open_terminal(&self, command: Command, size: TerminalSize) -> Result<Opened, Error> {
        check_size(size)?;
        crate::check_size(&command)?;
        let toolbox = self.toolbox().clone();
        let mut argv = Vec::new();
        if !command.env().is_empty() {
            argv.extend(env_through_file(self, command.env(), self.temp_dir()).await?);
        }
        argv.extend(command.argv().iter().cloned());
        let mark = execseam_adapter_kit::id::random_id(24);
        let file = degrade::temp_path(self.temp_dir());
        let store = Command::builder(["sh", "-c", "umask 077 && cat >\"$1\"", "sh", &file])
            .stdin(script(&mark, &argv))
            .build()?;
        let stored = self.exec(store).await?;
        if stored.exit != Exit::Code(0) {
            return Err(refuse(
                ErrorKind::Internal,
                Retry::Never,
                format!(
                    "storing the terminal's script under {} failed: {}",
                    self.temp_dir(),
                    String::from_utf8_lossy(&stored.stderr).trim()
                ),
            ));
        }
        let id = format!("execseam-{}", execseam_adapter_kit::id::random_id(16));
        toolbox
            .create_pty(&wire::PtyCreateRequest {
                id: &id,
                cwd: command.workdir(),
                size: pty_size(size),
            })
            .await?;
        let end = Arc::new(End::default());
        // From here on a failure leaves nothing behind: the session is deleted with `control`.
        let control = Session {
            toolbox: toolbox.clone(),
            id: id.clone(),
            end: end.clone(),
        };
        let started = async {
            // The daemon reads a client's frames once it said `connected`, which `until_mark`
            // checks: the line can go at once.
            let (mut sink, mut stream) = toolbox.connect_pty(&id).await?.split();
            let line = format!(" exec sh {}\r", degrade::quote(&file));
            sink.send(Message::binary(Bytes::from(line.into_bytes())))
                .await
                .map_err(|e| {
                    execseam_adapter_kit::ws::frame_error(error::call(OP, Stage::After), &e)
                })?;
            let first = until_mark(&mut stream, &mark).await?;
            Ok::<_, Error>((sink, stream, first))
        };
        let (mut sink, stream, first) =
            match tokio::time::timeout(self.request_timeout(), started).await {
                Ok(r) => r?,
                Err(_) => {
                    return Err(refuse(
                        ErrorKind::Timeout(execseam_core::Deadline::Request),
                        Retry::Unsafe,
                        format!(
                            "the terminal's command did not start within {} ms",
                            self.request_timeout().as_millis()
                        ),
                    ));
                }
            };
        // Keystrokes: a pipe this client writes, forwarded in frames the daemon accepts.
        let (input, mut keys) = tokio::io::duplex(MAX_INPUT_FRAME);
        tokio::spawn(async move {
            let mut buf = vec![0u8; MAX_INPUT_FRAME];
            while let Ok(n) = keys.read(&mut buf).await {
                if n == 0
                    || sink
                        .send(Message::binary(Bytes::copy_from_slice(&buf[..n])))
                        .await
                        .is_err()
                {
                    break;
                }
            }
        });
        let seen = end;
        let rest = futures_util::stream::unfold(Some(stream), move |state| {
            let seen = seen.clone();
            async move {
                let mut stream = state?;
                loop {
                    match next_frame(&mut stream).await {
                        Some(Ok(Frame::Output(b))) => return Some((Ok(b), Some(stream))),
                        Some(Ok(Frame::Control(_))) => {}
                        Some(Ok(Frame::Exit(code))) => {
                            *seen.exit.lock().expect("terminal exit") = Some(exit_of(code));
                            seen.ended.store(true, std::sync::atomic::Ordering::Release);
                            return None;
                        }
                        Some(Err(e)) => return Some((Err(e), None)),
                        None => return None,
                    }
                }
            }
        });
        let output =
            futures_util::stream::iter((!first.is_empty()).then_some(Ok(first))).chain(rest);
        Ok(Opened {
            output: output.boxed(),
            input: Box::pin(input),
            control: Box::new(control),
        })
    }
}

impl OpenTerminal for DaytonaExec {
    fn open(&self, command: Command, size: TerminalSize) -> BoxFuture<'_, Result<Opened, Error>> {
        Box::pin(self.open_terminal(command, size))
    }
}

/// The process handles: the kit's spool, with terminals where the configured mode puts them
/// (the recorder, PTY sessions, or the recorder first).
pub(crate) fn processes(exec: &DaytonaExec) -> Box<dyn execseam_core::Processes + '_> {
    let spool = execseam_adapter_kit::spool::Spool::new(exec, Sandbox::id(exec)).launch(exec);
    exec.terminal_mode()
        .processes(spool, exec, exec, exec.terminals())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_removes_itself_marks_then_runs_argv_as_a_job() {
        let s = script("m1", &["printf".into(), "%s\t\n".into(), "a b".into()]);
        assert_eq!(
            s,
            "rm -f -- \"$0\"\n(set -m) 2>/dev/null && set -m\ntrap : INT\nprintf '%s:go\\n' m1\nprintf '%s\t\n' 'a b'\nexit $?\n"
        );
    }

    #[test]
    fn sizes_over_the_daemons_limit_are_refused_before_any_request() {
        assert!(
            check_size(TerminalSize {
                cols: 1000,
                rows: 1000
            })
            .is_ok()
        );
        let e = check_size(TerminalSize {
            cols: 1001,
            rows: 24,
        })
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidCommand);
    }
}
