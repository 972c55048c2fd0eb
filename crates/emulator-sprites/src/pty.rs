//! TTY mode (`tty=true`): the command runs on a real pseudo-terminal of the sprite
//! ([`Sandbox::spawn_pty`]), as the Sprites server runs it on a PTY: binary frames carry the
//! terminal's raw output (stdout and stderr merged by the terminal), client binary frames are
//! typed into it, and `{"type":"resize","cols":C,"rows":R}` resizes it (the foreground job gets
//! SIGWINCH). Here the process becomes an [`EventStream`] for the session driver: the terminal's
//! output as stdout, then the exit; dropping the stream kills the process group.

use std::os::unix::process::ExitStatusExt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use execseam_core::{Event, EventStream, Exit};
use tokio::process::Child;
use tokio::sync::mpsc;
use tokio::time::Instant;

use execseam_emulator_kit::{PtyChild, PtyMaster, Sandbox};

/// The most one output chunk carries (the frames are split again at `MAX_FRAME`).
const CHUNK: usize = 32 << 10;
/// How long the terminal is still read after the process exited (a background child may keep
/// it open); then it is closed, which hangs such a child up.
const DRAIN: Duration = Duration::from_secs(1);

struct Run {
    sandbox: Arc<Sandbox>,
    child: Child,
    master: PtyMaster,
    host_pid: u32,
    buf: Vec<u8>,
    /// Set once the process is reaped.
    status: Option<Result<std::process::ExitStatus, String>>,
    open: bool,
    drain_until: Option<Instant>,
    done: bool,
}

impl Drop for Run {
    fn drop(&mut self) {
        // Not reaped yet: the process group still exists and is this command's.
        if self.status.is_none() {
            let _ = self.sandbox.signal_group(self.host_pid, libc::SIGKILL);
        }
    }
}

fn exit_of(
    status: &Result<std::process::ExitStatus, String>,
) -> Result<Exit, execseam_core::Error> {
    let s = status.as_ref().map_err(|e| {
        execseam_core::Error::new(
            execseam_core::ErrorKind::Unavailable,
            format!("waiting for the tty command: {e}"),
        )
    })?;
    Ok(match (s.code(), s.signal()) {
        (Some(c), _) => Exit::Code(c),
        (None, Some(sig)) => Exit::Signal(sig),
        (None, None) => Exit::Code(255),
    })
}

/// The terminal's output, then the exit, as the session driver reads a command.
pub(crate) fn stream(sandbox: Arc<Sandbox>, p: PtyChild) -> EventStream {
    let run = Run {
        sandbox,
        child: p.child,
        master: p.master,
        host_pid: p.host_pid,
        buf: vec![0u8; CHUNK],
        status: None,
        open: true,
        drain_until: None,
        done: false,
    };
    EventStream::new(futures_util::stream::unfold(run, |mut r| async move {
        if r.done {
            return None;
        }
        loop {
            if !r.open
                && let Some(status) = &r.status
            {
                let exit = exit_of(status);
                r.done = true;
                return Some((exit.map(Event::Exit), r));
            }
            let drain = async {
                match r.drain_until {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                n = r.master.read(&mut r.buf), if r.open => match n {
                    Ok(n) if n > 0 => {
                        let chunk = Bytes::copy_from_slice(&r.buf[..n]);
                        return Some((Ok(Event::Stdout(chunk)), r));
                    }
                    _ => r.open = false,
                },
                st = r.child.wait(), if r.status.is_none() => {
                    r.status = Some(st.map_err(|e| e.to_string()));
                    r.drain_until = Some(Instant::now() + DRAIN);
                }
                () = drain => r.open = false,
            }
        }
    }))
}

/// Types what the clients send into the terminal, in order (a slow terminal does not hold up
/// the socket's output). `None` (an EOF request) means nothing on a terminal: ^D is a byte.
pub(crate) fn input(master: PtyMaster) -> mpsc::UnboundedSender<Option<Bytes>> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Option<Bytes>>();
    tokio::spawn(async move {
        while let Some(item) = rx.recv().await {
            if let Some(b) = item
                && master.write_all(&b).await.is_err()
            {
                break;
            }
        }
    });
    tx
}
