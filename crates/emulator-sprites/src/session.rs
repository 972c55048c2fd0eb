//! Exec sessions: one running command, its output ring for attach, the clients attached to it,
//! and its lifetime after they leave.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use execseam_core::{Event, EventStream, Exit};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::SignalExit;
use execseam_emulator_kit::PtyMaster;

/// Keystrokes for a TTY session's terminal (`None` items are ignored there).
pub(crate) type TtyInput = mpsc::UnboundedSender<Option<Bytes>>;

/// What a session tells its clients.
#[derive(Clone, Debug)]
pub(crate) enum Out {
    Stdout(Bytes),
    Stderr(Bytes),
    /// The exit code byte.
    Exit(u8),
    /// The command could not be started (its `dir` does not exist).
    StartFailed,
    /// The sprite went away under the command.
    Lost,
}

struct Inner {
    ring: VecDeque<Out>,
    ring_bytes: usize,
    subscribers: Vec<mpsc::Sender<Out>>,
    last_activity: SystemTime,
    bytes_total: u64,
    done: bool,
}

/// One running command.
pub struct Session {
    pub(crate) id: u64,
    pub(crate) command: String,
    pub(crate) workdir: String,
    pub(crate) tty: bool,
    pub(crate) created: SystemTime,
    replay_bytes: usize,
    inner: Mutex<Inner>,
    kill: watch::Sender<Option<String>>,
    /// TTY mode: the terminal (for resizes) and its input (for every attached client).
    pty: Mutex<Option<(PtyMaster, Option<TtyInput>)>>,
}

execseam_emulator_kit::debug_fields!(Session: id, command);

impl Session {
    pub(crate) fn new(
        id: u64,
        command: String,
        workdir: String,
        tty: bool,
        replay_bytes: usize,
    ) -> Arc<Session> {
        let (kill, _) = watch::channel(None);
        let now = SystemTime::now();
        Arc::new(Session {
            id,
            command,
            workdir,
            tty,
            created: now,
            replay_bytes,
            inner: Mutex::new(Inner {
                ring: VecDeque::new(),
                ring_bytes: 0,
                subscribers: Vec::new(),
                last_activity: now,
                bytes_total: 0,
                done: false,
            }),
            kill,
            pty: Mutex::new(None),
        })
    }

    /// TTY mode: the session's terminal and the input typed into it (`None`: `stdin=false`).
    pub(crate) fn set_pty(&self, master: PtyMaster, input: Option<TtyInput>) {
        *self.pty.lock().expect("pty") = Some((master, input));
    }

    /// Forgets the terminal once the command ended (the driver's stream closed its end).
    pub(crate) fn clear_pty(&self) {
        self.pty.lock().expect("pty").take();
    }

    /// The session's terminal (TTY mode).
    pub(crate) fn pty(&self) -> Option<PtyMaster> {
        self.pty
            .lock()
            .expect("pty")
            .as_ref()
            .map(|(m, _)| m.clone())
    }

    /// Where an attached client's keystrokes go (TTY mode with stdin).
    pub(crate) fn tty_input(&self) -> Option<TtyInput> {
        self.pty
            .lock()
            .expect("pty")
            .as_ref()
            .and_then(|(_, i)| i.clone())
    }

    /// The session id (what `session_info` and the session list report).
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The command line.
    pub fn command(&self) -> &str {
        &self.command
    }

    /// True while a client is attached.
    pub fn is_active(&self) -> bool {
        let mut inner = self.inner.lock().expect("session");
        inner.subscribers.retain(|s| !s.is_closed());
        !inner.subscribers.is_empty()
    }

    pub(crate) fn last_activity(&self) -> SystemTime {
        self.inner.lock().expect("session").last_activity
    }

    pub(crate) fn bytes_per_second(&self) -> f64 {
        let inner = self.inner.lock().expect("session");
        let secs = inner
            .last_activity
            .duration_since(self.created)
            .unwrap_or_default()
            .as_secs_f64()
            .max(1.0);
        inner.bytes_total as f64 / secs
    }

    /// A new client: the replayable output so far, and a receiver for what follows. `None` if
    /// the session already ended.
    pub(crate) fn subscribe(&self) -> Option<(Vec<Out>, mpsc::Receiver<Out>)> {
        let mut inner = self.inner.lock().expect("session");
        if inner.done {
            return None;
        }
        let (tx, rx) = mpsc::channel(64);
        inner.subscribers.push(tx);
        Some((inner.ring.iter().cloned().collect(), rx))
    }

    /// Asks the driver to kill the command.
    pub(crate) fn kill(&self, signal: &str) {
        self.kill.send_replace(Some(signal.to_owned()));
    }

    /// The sprite is gone: every client's channel closes without an exit.
    pub(crate) fn lose(&self) {
        let mut inner = self.inner.lock().expect("session");
        inner.done = true;
        for s in inner.subscribers.drain(..) {
            let _ = s.try_send(Out::Lost);
        }
        drop(inner);
        self.kill("KILL");
    }

    async fn publish(&self, out: Out) {
        let subs = {
            let mut inner = self.inner.lock().expect("session");
            if inner.done {
                return;
            }
            inner.last_activity = SystemTime::now();
            if let Out::Stdout(b) | Out::Stderr(b) = &out {
                inner.bytes_total += b.len() as u64;
                inner.ring_bytes += b.len();
                inner.ring.push_back(out.clone());
                while inner.ring_bytes > self.replay_bytes {
                    match inner.ring.pop_front() {
                        Some(Out::Stdout(b) | Out::Stderr(b)) => inner.ring_bytes -= b.len(),
                        Some(_) => {}
                        None => break,
                    }
                }
            }
            inner.subscribers.retain(|s| !s.is_closed());
            inner.subscribers.clone()
        };
        for s in subs {
            // Back-pressure: a slow client slows the command down, as a socket would.
            let _ = s.send(out.clone()).await;
        }
    }

    async fn finish(&self, out: Out) {
        let subs = {
            let mut inner = self.inner.lock().expect("session");
            if inner.done {
                return;
            }
            inner.done = true;
            inner.last_activity = SystemTime::now();
            std::mem::take(&mut inner.subscribers)
        };
        for s in subs {
            let _ = s.send(out.clone()).await;
        }
    }

    fn orphaned(&self) -> bool {
        let mut inner = self.inner.lock().expect("session");
        inner.subscribers.retain(|s| !s.is_closed());
        inner.subscribers.is_empty()
    }
}

/// The exit byte of the wire protocol: the code (out of range → 255), or for a signal 128+n or 255.
pub(crate) fn exit_byte(exit: Exit, mode: SignalExit) -> u8 {
    match exit {
        Exit::Code(c) => u8::try_from(c).unwrap_or(255),
        Exit::Signal(s) => match mode {
            SignalExit::ShellStyle => u8::try_from(128 + s).unwrap_or(255),
            SignalExit::Raw255 => 255,
        },
    }
}

/// Runs the command's events into the session until it exits, is killed, or has been without a
/// client for `max_orphan` (`None`: forever). Returns the exit byte, if the command ended.
pub(crate) async fn drive(
    session: Arc<Session>,
    mut stream: EventStream,
    max_orphan: Option<Duration>,
    mode: SignalExit,
) -> Option<u8> {
    let mut kill = session.kill.subscribe();
    let mut orphan_since: Option<Instant> = None;
    let mut published = false;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tokio::select! {
            ev = stream.next() => match ev {
                Some(Ok(Event::Stdout(b))) => {
                    published = true;
                    session.publish(Out::Stdout(b)).await;
                }
                Some(Ok(Event::Stderr(b))) => {
                    published = true;
                    session.publish(Out::Stderr(b)).await;
                }
                Some(Ok(Event::Exit(exit))) => {
                    let code = exit_byte(exit, mode);
                    session.finish(Out::Exit(code)).await;
                    return Some(code);
                }
                Some(Err(e)) if !published && e.kind() == execseam_core::ErrorKind::NotFound => {
                    session.finish(Out::StartFailed).await;
                    return None;
                }
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "sprite command failed");
                    session.finish(Out::Lost).await;
                    return None;
                }
                None => {
                    session.finish(Out::Lost).await;
                    return None;
                }
            },
            r = kill.changed() => {
                if r.is_err() || kill.borrow().is_some() {
                    drop(stream); // kills the process group
                    let code = exit_byte(Exit::Signal(9), mode);
                    session.finish(Out::Exit(code)).await;
                    return Some(code);
                }
            }
            _ = tick.tick() => {
                if session.orphaned() {
                    let since = *orphan_since.get_or_insert_with(Instant::now);
                    if max_orphan.is_some_and(|max| since.elapsed() >= max) {
                        tracing::debug!(session = session.id, "no client left: killing the command");
                        drop(stream);
                        let code = exit_byte(Exit::Signal(9), mode);
                        session.finish(Out::Exit(code)).await;
                        return Some(code);
                    }
                } else {
                    orphan_since = None;
                }
            }
        }
    }
}
