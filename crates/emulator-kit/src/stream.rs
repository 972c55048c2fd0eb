//! Pieces the streaming emulators (Vercel, Northflank) share: a process started in a sandbox
//! whose stdin, output and signals the emulator drives itself, and incremental UTF-8 decoding of
//! its output.

use std::collections::BTreeMap;
use std::process::Stdio;

use bytes::Bytes;
use execseam_spawn::SpawnError;
use tokio::io::AsyncReadExt;
use tokio::process::ChildStdin;
use tokio::sync::mpsc;

use crate::{Sandbox, User};

/// What a running process produced.
#[derive(Debug)]
pub enum Out {
    /// Bytes on stdout.
    Stdout(Bytes),
    /// Bytes on stderr.
    Stderr(Bytes),
    /// The exit: the code, or 128+n for signal n (a container runtime's convention).
    Exit(i32),
}

/// A process started with [`start`].
pub struct Running {
    /// Its process group on the host (for [`Sandbox::signal_group`]).
    pub host_pid: u32,
    /// Its stdin, if asked for.
    pub stdin: Option<ChildStdin>,
    /// Output as it comes, then the exit.
    pub events: mpsc::Receiver<Out>,
}

/// Starts `argv` (exec'd as given, no shell) in `sandbox` as `user` in `workdir`, with exactly
/// `env` over the sandbox's environment and the user's `HOME`, `USER`, `LOGNAME`; stdin piped
/// when `stdin`, else empty. A program that does not exist is a process that printed why and
/// exited 127 (126: not executable), as a shell reports it.
///
/// `drain`: how the exit relates to the output pipes. `None`: the exit is reported once both
/// pipes are closed by every process holding them (a background child that keeps stdout open
/// delays it), as a container runtime's exec does. `Some(d)`: once the process itself has exited,
/// what is still in the pipes is read for at most `d`, then the exit is reported (a background
/// child neither delays it by more than `d` nor is killed).
pub async fn start(
    sandbox: &Sandbox,
    user: &User,
    argv: &[String],
    env: &BTreeMap<String, String>,
    workdir: &str,
    stdin: bool,
    drain: Option<std::time::Duration>,
) -> Result<Running, SpawnError> {
    let mut full: BTreeMap<String, String> = sandbox.spec().env.clone();
    full.insert("HOME".into(), user.home.clone());
    full.insert("USER".into(), user.name.clone());
    full.insert("LOGNAME".into(), user.name.clone());
    full.extend(env.iter().map(|(k, v)| (k.clone(), v.clone())));
    let mut cmd = tokio::process::Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .env_clear()
        .envs(&full)
        .stdin(if stdin { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let (tx, events) = mpsc::channel(64);
    let mut child = match sandbox.spawn(cmd, user, workdir).await {
        Ok(c) => c,
        Err(SpawnError::Io(e))
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied
            ) =>
        {
            let (code, why) = if e.kind() == std::io::ErrorKind::NotFound {
                (127, "command not found")
            } else {
                (126, "permission denied")
            };
            let _ = tx
                .send(Out::Stderr(Bytes::from(format!("{}: {why}\n", argv[0]))))
                .await;
            let _ = tx.send(Out::Exit(code)).await;
            return Ok(Running {
                host_pid: 0,
                stdin: None,
                events,
            });
        }
        Err(e) => return Err(e),
    };
    let host_pid = child.host_pid;
    let stdin = child.child.stdin.take();
    let mut out = child.child.stdout.take().expect("piped");
    let mut err = child.child.stderr.take().expect("piped");
    tokio::spawn(async move {
        let (mut ob, mut eb) = (vec![0u8; 32 * 1024], vec![0u8; 32 * 1024]);
        let (mut out_open, mut err_open) = (true, true);
        let mut status = None;
        let deadline = tokio::time::sleep(std::time::Duration::MAX / 4);
        tokio::pin!(deadline);
        while out_open || err_open {
            tokio::select! {
                r = child.child.wait(), if drain.is_some() && status.is_none() => {
                    status = Some(r);
                    if let Some(d) = drain {
                        deadline.as_mut().reset(tokio::time::Instant::now() + d);
                    }
                }
                () = &mut deadline => break,
                r = out.read(&mut ob), if out_open => match r {
                    Ok(0) | Err(_) => out_open = false,
                    Ok(n) => {
                        let _ = tx.send(Out::Stdout(Bytes::copy_from_slice(&ob[..n]))).await;
                    }
                },
                r = err.read(&mut eb), if err_open => match r {
                    Ok(0) | Err(_) => err_open = false,
                    Ok(n) => {
                        let _ = tx.send(Out::Stderr(Bytes::copy_from_slice(&eb[..n]))).await;
                    }
                },
            }
        }
        let status = match status {
            Some(s) => s,
            None => child.child.wait().await,
        };
        let code = match status {
            Ok(status) => {
                use std::os::unix::process::ExitStatusExt;
                status
                    .code()
                    .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
            }
            Err(_) => 255,
        };
        let _ = tx.send(Out::Exit(code)).await;
    });
    Ok(Running {
        host_pid,
        stdin,
        events,
    })
}

/// Incremental UTF-8 decoding: a sequence split across chunks is joined; invalid bytes become
/// U+FFFD (what a text-only wire can carry).
#[derive(Default)]
pub struct Utf8 {
    pending: Vec<u8>,
}

impl Utf8 {
    /// Decodes `chunk` after what is pending; keeps an incomplete sequence at its end.
    pub fn push(&mut self, chunk: &[u8]) -> String {
        let mut buf = std::mem::take(&mut self.pending);
        buf.extend_from_slice(chunk);
        let mut out = String::new();
        let mut rest: &[u8] = &buf;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    return out;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    out.push_str(std::str::from_utf8(valid).expect("valid prefix"));
                    match e.error_len() {
                        Some(n) => {
                            out.push('\u{FFFD}');
                            rest = &after[n..];
                        }
                        None => {
                            self.pending = after.to_vec();
                            return out;
                        }
                    }
                }
            }
        }
    }

    /// The end of the stream: an unfinished sequence becomes one U+FFFD.
    pub fn finish(&mut self) -> String {
        if self.pending.is_empty() {
            String::new()
        } else {
            self.pending.clear();
            "\u{FFFD}".to_owned()
        }
    }
}
