//! [`Reattach`] for Sprites: a command started detached (`max_run_after_disconnect=0`) with its
//! output and exit spooled in the sprite, found again through the session list and attached to
//! by session id (`GET /exec/{id}`) to wait for its end.
//!
//! # Why a spool, and not the attach replay
//!
//! Sprites keeps a command running after its socket closes for `max_run_after_disconnect` (a Go
//! duration; `0` is forever: API reference, research/fly-sprites.md §B.2) and lets a client attach
//! to the session again; on attach the server may send "historical output" before
//! `session_info`, but its size and semantics are **not documented** (the 2025 in-VM server kept
//! the last 5 KiB of stdout of detachable sessions only; §B.4), stdout and stderr may not be told
//! apart in it, and an ended session is gone from the list (a kill answers 410). So the replay
//! cannot prove an output, and nothing proves an exit once the session ended.
//!
//! The adapter therefore runs the command under `/bin/sh` with stdout and stderr redirected to
//! files in `/tmp/execseam-reattach/<tag>/` and the status written to `exit` by rename, and names
//! it by that tag: the handle (`sprites1:<tag>`) exists before the start, and the session is
//! found by the tag in its command line. `attach` waits through the session's WebSocket (the
//! replay and any output are ignored: everything is in the spool), then reads the three files
//! with `GET /fs/read`: byte-exact per stream, complete whether or not anybody was attached. No
//! `exit` file and no session is an `Err(NotFound)`, never a guessed exit.
//!
//! As with E2B: stdout and stderr come at the end (their interleaving is not kept), a signal is
//! the shell's `128 + n`, a missing program the shell's 127; a spooled stream larger than 16 MiB
//! is an `Err(OutputLimit)`.

use bytes::Bytes;
use execseam_core::{
    BoxFuture, Command, Error, ErrorKind, Event, EventStream, Exit, ProcessHandle, Reattach,
};
use futures_util::{SinkExt as _, StreamExt as _};
use tokio_websockets::{CloseCode, Message};

use crate::PROVIDER;
use crate::error::{control, lost};
use crate::exec::SpritesExec;
use crate::wire::{self, Frame, Text};

const SPOOL_ROOT: &str = "/tmp/execseam-reattach";
const PREFIX: &str = "sprites1:";

/// The wrapper: `$1` is the spool directory, the rest is argv.
const WRAPPER: &str = r#"d=$1; shift
mkdir -p -- "$d" || exit 125
if [ -e "$d/stdin" ]; then i=$d/stdin; else i=/dev/null; fi
"$@" <"$i" >"$d/stdout" 2>"$d/stderr"
s=$?
printf '%s\n' "$s" >"$d/exit.tmp" && mv -f -- "$d/exit.tmp" "$d/exit"
exit "$s""#;

fn invalid_handle() -> Error {
    control("attach")
        .error(
            ErrorKind::InvalidCommand,
            "not a Sprites process handle (sprites1:execseam-…)",
        )
        .with_retry(execseam_core::Retry::Never)
}

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

fn gone(message: &str) -> Error {
    control("attach")
        .error(ErrorKind::NotFound, message)
        .with_retry(execseam_core::Retry::Never)
}

/// Reads a socket to its exit (frame or text), ignoring output; closes it.
async fn wait_exit(conn: crate::client::Connected) -> Result<(), Error> {
    let (mut sink, mut stream) = conn.ws.split();
    let r = loop {
        match stream.next().await {
            Some(Ok(m)) if m.is_binary() => {
                match wire::parse_binary(&Bytes::copy_from_slice(m.as_payload())) {
                    Ok(Some(Frame::Exit(_))) => break Ok(()),
                    Ok(_) => {}
                    Err(why) => break Err(control("attach").protocol(why)),
                }
            }
            Some(Ok(m)) if m.is_text() => {
                if let Text::Exit(_) = wire::parse_text(m.as_text().unwrap_or_default()) {
                    break Ok(());
                }
            }
            Some(Ok(m)) if m.is_close() => {
                break Err(lost("the server closed the attach socket before the exit"));
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => break Err(crate::error::ws_read(&e)),
            None => break Err(lost("the attach socket ended before the exit")),
        }
    };
    let _ = sink
        .send(Message::close(Some(CloseCode::NORMAL_CLOSURE), ""))
        .await;
    r
}

impl SpritesExec {
    /// The session running the command of `tag`, if the sprite lists one.
    async fn session_of(&self, tag: &str) -> Result<Option<String>, Error> {
        let dir = spool(tag);
        Ok(self
            .inner
            .client
            .sessions()
            .await?
            .into_iter()
            .find(|(_, command)| command.contains(&dir))
            .map(|(id, _)| id))
    }

    async fn start_detached(&self, handle: &ProcessHandle, cmd: Command) -> Result<(), Error> {
        let tag = tag_of(handle)?.to_owned();
        let dir = spool(&tag);
        let mut argv = vec![
            "/bin/sh".to_owned(),
            "-c".to_owned(),
            WRAPPER.to_owned(),
            "execseam-detached".to_owned(),
            dir.clone(),
        ];
        argv.extend(cmd.argv().iter().cloned());
        let mut b = Command::builder(argv)
            .tool(cmd.tool().clone())
            .envs(cmd.env().iter().map(|(k, v)| (k.clone(), v.clone())));
        if let Some(w) = cmd.workdir() {
            b = b.workdir(w);
        }
        let wrapped = b.build()?;
        self.fits(&wrapped)?;
        if !cmd.stdin().is_empty() {
            self.inner
                .client
                .write_file(&format!("{dir}/stdin"), cmd.stdin().clone())
                .await?;
        }
        let env = self.env_for(&wrapped).await?;
        let mut query = wire::exec_query(&wrapped, env.as_ref(), false);
        // Forever: the caller ends it (kill) or it ends by itself.
        query.push(("max_run_after_disconnect".to_owned(), "0".to_owned()));
        tracing::debug!(provider = PROVIDER, sprite = %self.inner.client.sprite(), tool = %cmd.tool(), program = %cmd.program(), "start detached");
        let conn = self.inner.client.connect(&query).await?;
        let (mut sink, mut stream) = conn.ws.split();
        // Wait for `session_info` (the server runs it), or the exit of a quick command.
        let r = loop {
            match stream.next().await {
                Some(Ok(m)) if m.is_text() => {
                    match wire::parse_text(m.as_text().unwrap_or_default()) {
                        Text::SessionInfo { .. } | Text::Exit(_) => break Ok(()),
                        Text::Other => {}
                    }
                }
                Some(Ok(m)) if m.is_binary() => {
                    if let Ok(Some(Frame::Exit(_))) =
                        wire::parse_binary(&Bytes::copy_from_slice(m.as_payload()))
                    {
                        break Ok(());
                    }
                }
                Some(Ok(m)) if m.is_close() => {
                    break Err(lost(
                        "the server closed the socket before naming the session",
                    ));
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => break Err(crate::error::ws_read(&e)),
                None => break Err(lost("the socket ended before the server named the session")),
            }
        };
        let _ = sink
            .send(Message::close(Some(CloseCode::NORMAL_CLOSURE), ""))
            .await;
        r
    }

    async fn attach_detached(&self, handle: &ProcessHandle) -> Result<EventStream, Error> {
        let tag = tag_of(handle)?.to_owned();
        let live = match self.session_of(&tag).await? {
            Some(id) => match self.inner.client.attach(&id).await {
                Ok(conn) => Some((id, conn)),
                // Ended between the list and the attach.
                Err(e) if e.kind() == ErrorKind::NotFound => None,
                Err(e) => return Err(e),
            },
            None => None,
        };
        let session = live.as_ref().map(|(id, _)| id.clone());
        let me = self.clone();
        let wait = async move {
            if let Some((_, conn)) = live {
                wait_exit(conn).await?;
            }
            let dir = spool(&tag);
            let client = &me.inner.client;
            let exit = match client.read_file(&format!("{dir}/exit")).await? {
                Some(b) => {
                    let text = String::from_utf8_lossy(&b);
                    let code: i32 = text.trim().parse().map_err(|_| {
                        control("attach")
                            .protocol(format!("the spooled exit status {text:?} is not a number"))
                    })?;
                    Exit::Code(code)
                }
                None => {
                    return Err(gone(
                        "the detached command is gone and left no exit status (it never \
                         started, was killed, or the sprite lost its spool): its outcome is unknown",
                    ));
                }
            };
            let stdout = client.read_file(&format!("{dir}/stdout")).await?;
            let stderr = client.read_file(&format!("{dir}/stderr")).await?;
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
        let client = self.inner.client.clone();
        Ok(EventStream::new(events).with_kill(move || async move {
            match session {
                // The kill route signals the session's process group and waits for its end
                // (410: it already exited).
                Some(id) => client.kill(&id).await,
                None => Ok(()),
            }
        }))
    }
}

impl Reattach for SpritesExec {
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
            let cmd = Command::new(["rm", "-rf", "--", dir.as_str()])?;
            let out = execseam_core::Exec::exec(self, cmd).await?;
            if out.exit.success() {
                Ok(())
            } else {
                Err(control("release").error(
                    ErrorKind::Internal,
                    format!("removing the spool failed with {:?}", out.exit),
                ))
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_checked_before_they_become_paths() {
        assert_eq!(
            tag_of(&ProcessHandle::new("sprites1:execseam-x1")).unwrap(),
            "execseam-x1"
        );
        for bad in ["e2b1:execseam-x", "sprites1:../x", "sprites1:execseam-a/b"] {
            assert_eq!(
                tag_of(&ProcessHandle::new(bad)).unwrap_err().kind(),
                ErrorKind::InvalidCommand
            );
        }
    }
}
