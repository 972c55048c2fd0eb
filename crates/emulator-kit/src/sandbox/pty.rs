//! Processes on a real pseudo-terminal inside a sandbox ([`Sandbox::spawn_pty`]): what E2B's
//! `pty.create`, Sprites' `tty=True`, Daytona's PTY sessions and Cloudflare's terminal give a
//! command. The pty pair is opened on the launcher thread, inside the sandbox, from the
//! sandbox's own `devpts` instance (mounted `newinstance` on its `/dev/pts`, `/dev/ptmx` pointing
//! at it): the process sees `/dev/pts/0`, `/dev/pts/1`, … of its sandbox only, never the host's
//! terminals. The slave is given to the process's user (group `tty`, mode 0620, as `grantpt`
//! leaves it), becomes its stdin, stdout and stderr, and its controlling terminal (`setsid` then
//! `TIOCSCTTY`), so `test -t 0`, `stty`, job control, `^C` and SIGWINCH work as on a login
//! terminal. The emulator keeps the master, non-blocking on the runtime ([`PtyMaster`]).
//!
//! In [`Isolation::Translate`](super::Isolation::Translate) the pair comes from the host's
//! `/dev/ptmx` (there is no sandbox to open it in).

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::process::Stdio;
use std::sync::Arc;

use execseam_spawn::SpawnError;
use tokio::io::unix::AsyncFd;

use super::{Sandbox, User, ns};
use crate::sys;

/// A terminal's window size in character cells.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PtySize {
    /// Lines.
    pub rows: u16,
    /// Columns.
    pub cols: u16,
}

impl PtySize {
    /// `rows` lines of `cols` columns.
    pub fn new(rows: u16, cols: u16) -> PtySize {
        PtySize { rows, cols }
    }
}

/// The emulator's end of a pseudo-terminal: what it reads is the terminal's output (the
/// process's stdout and stderr, merged, with the line discipline's echo and `\r\n`), what it
/// writes is typed into the terminal (input: `\x03` is ^C for the foreground group, `\x04` ^D).
/// Cheap to clone (one fd shared), so a reader task and a writer can each hold one.
#[derive(Clone, Debug)]
pub struct PtyMaster {
    fd: Arc<AsyncFd<File>>,
}

impl PtyMaster {
    fn new(fd: OwnedFd) -> io::Result<PtyMaster> {
        sys::set_nonblocking(&fd)?;
        Ok(PtyMaster {
            fd: Arc::new(sys::async_fd(File::from(fd))?),
        })
    }

    /// Reads the terminal's next output into `buf`. `Ok(0)` means the terminal is closed: every
    /// process holding the slave is gone (the kernel answers EIO then; that is not an error
    /// here). A background child that keeps the slave open keeps it open, so after the process's
    /// exit a caller drains with a bound in time.
    pub async fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            let mut guard = self.fd.readable().await?;
            match guard.try_io(|f| f.get_ref().read(buf)) {
                Ok(Ok(n)) => return Ok(n),
                Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => return Ok(0),
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
    }

    /// Types `data` into the terminal (all of it; waits while the terminal's input queue is
    /// full). Fails with EIO once the terminal is closed.
    pub async fn write_all(&self, mut data: &[u8]) -> io::Result<()> {
        while !data.is_empty() {
            let mut guard = self.fd.writable().await?;
            match guard.try_io(|f| f.get_ref().write(data)) {
                Ok(Ok(0)) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(Ok(n)) => data = &data[n..],
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => continue,
            }
        }
        Ok(())
    }

    /// Sets the window size (TIOCSWINSZ); the terminal's foreground process group gets SIGWINCH
    /// if it changed.
    pub fn resize(&self, size: PtySize) -> io::Result<()> {
        sys::set_winsize(self.fd.get_ref(), size.rows, size.cols)
    }

    /// The current window size (TIOCGWINSZ).
    pub fn size(&self) -> io::Result<PtySize> {
        let (rows, cols) = sys::get_winsize(self.fd.get_ref())?;
        Ok(PtySize { rows, cols })
    }
}

/// A process started with [`Sandbox::spawn_pty`].
#[derive(Debug)]
pub struct PtyChild {
    /// The process (a child of this process; it leads its own session and process group, whose
    /// controlling terminal is the pty). Wait on it for the exit status.
    pub child: tokio::process::Child,
    /// Its pid on the host (and its process group there: signal it with
    /// [`Sandbox::signal_group`]).
    pub host_pid: u32,
    /// Its pid inside the sandbox (what `echo $$` prints there); the host pid in `Translate`.
    pub pid: u32,
    /// The terminal's master end.
    pub master: PtyMaster,
}

impl Sandbox {
    /// Starts `command` in the sandbox as `user` in `workdir` (a sandbox path that must be a
    /// directory there) on a new pseudo-terminal of the sandbox, `size` big: the terminal comes from the
    /// sandbox's own devpts instance, so the process sees only the sandbox's terminals. The caller sets the program, arguments and environment
    /// (`TERM` included: the harness adds none); the harness sets stdin, stdout and stderr to
    /// the terminal, makes it the controlling terminal of a new session led by the process, and
    /// adds the namespaces, the user and the bounding set. Kill it with
    /// [`signal_group`](Self::signal_group)`(host_pid, …)`; `kill_on_drop` is the caller's choice.
    pub async fn spawn_pty(
        &self,
        mut command: tokio::process::Command,
        user: &User,
        workdir: &str,
        size: PtySize,
    ) -> Result<PtyChild, SpawnError> {
        execseam_spawn::restore_default_signals(&mut command);
        sys::controlling_tty_in_child(&mut command);
        let (uid, tty_gid) = (user.uid, self.tty_gid());
        // Runs where the pty must be opened: inside the sandbox (its devpts), or on the host.
        let open = move |cmd: &mut tokio::process::Command| -> io::Result<OwnedFd> {
            let (master, slave) = sys::open_pty()?;
            sys::set_winsize(&master, size.rows, size.cols)?;
            if let Some(gid) = tty_gid {
                std::os::unix::fs::fchown(&slave, Some(uid), Some(gid))?;
            }
            cmd.stdin(Stdio::from(slave.try_clone()?))
                .stdout(Stdio::from(slave.try_clone()?))
                .stderr(Stdio::from(slave));
            Ok(master)
        };
        let (child, master) = match self.ns() {
            Some(ns) => {
                let creds = ns::creds(user, &ns.group_file);
                ns.spawn_with(command, creds, workdir.to_owned(), open)
                    .await?
            }
            None => {
                self.host_workdir(&mut command, workdir)?;
                let master = open(&mut command).map_err(SpawnError::Io)?;
                let child = command.spawn().map_err(SpawnError::Io)?;
                // The slave's copies in `command` close here, so the master sees the end.
                drop(command);
                (child, master)
            }
        };
        let master = PtyMaster::new(master).map_err(SpawnError::Io)?;
        let (host_pid, pid) = self.pids(&child)?;
        Ok(PtyChild {
            child,
            host_pid,
            pid,
            master,
        })
    }

    /// The `tty` group's gid in the sandbox (the slave's group, as `grantpt` sets it); `None` in
    /// `Translate` (this process cannot give files away there).
    fn tty_gid(&self) -> Option<u32> {
        let ns = self.ns()?;
        Some(super::etc::gid_of(&ns.group_file, "tty").unwrap_or(5))
    }
}
