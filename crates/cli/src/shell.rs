//! `execseam shell`: an interactive terminal in a sandbox from the user's own terminal, like
//! `docker exec -it`, on a process handle started with a terminal (docs/processes.md,
//! "Terminals").
//!
//! The local terminal goes raw while attached (every key, Ctrl-C included, is typed into the
//! remote terminal) and is restored on every way out: the command's exit, a detach, an error or
//! a dropped connection, SIGTERM, SIGHUP or SIGINT sent to this process (a guard restores it on
//! drop, so a panic restores it too). Window-size changes (SIGWINCH) are forwarded as resizes.
//!
//! Exit status: the remote command's (128+n for a signal death); 0 after a detach (Ctrl-P
//! Ctrl-Q, as `docker attach`: the command keeps running, and a sandbox this run created is
//! kept). Where the adapter's terminals cannot be attached again
//! (`ProcessCapabilities::terminal_reattach` false: Docker's `Tty` exec ends with its client),
//! the detach keys are refused with a line saying so, and `--attach` is a usage error; 125 for an infrastructure failure (a dropped connection); 2 for a usage error (an
//! adapter without terminals); 143, 129 or 130 when this process is sent SIGTERM, SIGHUP or
//! SIGINT (the remote command keeps running, unless it lives in a sandbox this run created).

use std::io::{Read, Write};
use std::process::ExitCode;

use bytes::Bytes;
use clap::Args;
use execseam_core::{
    Command, Error, ErrorKind, Exit, ProcessEvent, ProcessHandle, Processes, Sandbox, Signal,
    StartKey, StartRequest, StdinWrite, StreamOffsets, TerminalSize,
};
use tokio::signal::unix::{SignalKind, signal};

use crate::registry;
use crate::run::{USAGE, error_status};

#[derive(Args)]
pub struct ShellArgs {
    /// The adapter.
    #[arg(long, default_value = "local")]
    adapter: String,
    /// The sandbox (left running); default: one created for this shell and destroyed when it
    /// ends (kept after a detach).
    #[arg(long, env = "EXECSEAM_SANDBOX")]
    sandbox: Option<String>,
    /// Attach to a terminal started earlier (the handle a detach printed) instead of starting
    /// one; its screen is replayed from `--from`.
    #[arg(
        long,
        value_name = "HANDLE",
        requires = "sandbox",
        conflicts_with = "argv"
    )]
    attach: Option<String>,
    /// With `--attach`: the output byte offset the replay starts at.
    #[arg(long, value_name = "N", default_value_t = 0)]
    from: u64,
    /// The start's idempotency key (1 to 64 of A-Z a-z 0-9 _ -); random when absent.
    #[arg(long)]
    key: Option<String>,
    /// Absolute working directory in the sandbox.
    #[arg(long)]
    workdir: Option<String>,
    /// An environment variable, KEY=VALUE (repeatable). `TERM` is this terminal's unless given.
    #[arg(long = "env", value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// The command and its arguments (default: bash where the sandbox has it, else sh).
    #[arg(last = true, value_name = "ARGV")]
    argv: Vec<String>,
}

/// The default program: an interactive shell.
const DEFAULT_SHELL: &str = "command -v bash >/dev/null 2>&1 && exec bash; exec sh";

/// Ctrl-P then Ctrl-Q detaches (docker's default detach keys).
const DETACH: [u8; 2] = [0x10, 0x11];

fn build(args: &ShellArgs) -> Result<Command, Error> {
    let argv = if args.argv.is_empty() {
        vec!["sh".to_owned(), "-c".to_owned(), DEFAULT_SHELL.to_owned()]
    } else {
        args.argv.clone()
    };
    let mut b = Command::builder(argv);
    let mut has_term = false;
    for kv in &args.env {
        let Some((k, v)) = kv.split_once('=') else {
            return Err(Error::new(
                ErrorKind::InvalidCommand,
                format!("--env {kv:?}: want KEY=VALUE"),
            ));
        };
        has_term |= k == "TERM";
        b = b.env(k, v);
    }
    if !has_term && let Ok(term) = std::env::var("TERM") {
        b = b.env("TERM", term);
    }
    if let Some(w) = &args.workdir {
        b = b.workdir(w);
    }
    b.build()
}

pub async fn shell(args: ShellArgs) -> ExitCode {
    // Bad arguments are refused before anything is created.
    let command = match build(&args) {
        Ok(c) => c,
        Err(e) => return failed(&e),
    };
    let key = match args.key.as_deref().map(StartKey::new).transpose() {
        Ok(k) => k.unwrap_or_else(StartKey::random),
        Err(e) => return failed(&e),
    };
    let sandbox = match registry::open(&args.adapter, args.sandbox.as_deref()).await {
        Ok(s) => s,
        Err(e) => return failed(&e),
    };
    let code = match sandbox.processes() {
        Some(p) if p.process_capabilities().terminal => {
            if args.attach.is_some() && !p.process_capabilities().terminal_reattach {
                eprintln!("execseam: {}", no_reattach(sandbox.provider()));
                ExitCode::from(USAGE)
            } else {
                session(&*p, &*sandbox, &args, key, command).await
            }
        }
        _ => {
            eprintln!(
                "execseam: adapter {} has no terminals (see docs/processes.md)",
                sandbox.provider()
            );
            ExitCode::from(USAGE)
        }
    };
    registry::close(&*sandbox).await;
    code
}

/// Why a terminal of `provider` cannot be detached or attached again.
fn no_reattach(provider: &str) -> String {
    format!(
        "adapter {provider}'s terminals cannot be attached again: a terminal ends with the client \
         that started it (see docs/processes.md); type `exit` to leave"
    )
}

/// The detach keys in what is typed. Ctrl-P held at the end of a read waits for the next.
struct DetachKeys {
    held_ctrl_p: bool,
    /// The terminal can be attached again (else the detach keys are refused).
    allowed: bool,
}

/// What the detach keys make of a read: the keys to send first, then what to do.
#[derive(Debug, PartialEq)]
enum Typed {
    Keys,
    Detach,
    Refused,
}

impl DetachKeys {
    /// The keys to send, then what the read asks (the keys after a detach sequence dropped).
    fn filter(&mut self, keys: Vec<u8>) -> (Vec<u8>, Typed) {
        let mut k = if self.held_ctrl_p {
            [&[DETACH[0]][..], &keys[..]].concat()
        } else {
            keys
        };
        self.held_ctrl_p = false;
        let detach = k.windows(2).position(|w| w == DETACH);
        if let Some(i) = detach {
            k.truncate(i);
        } else if k.last() == Some(&DETACH[0]) {
            k.pop();
            self.held_ctrl_p = true;
        }
        let typed = match detach {
            None => Typed::Keys,
            Some(_) if self.allowed => Typed::Detach,
            Some(_) => Typed::Refused,
        };
        (k, typed)
    }
}

fn failed(e: &Error) -> ExitCode {
    eprintln!("execseam: {e}");
    error_status(e)
}

/// How an attached session ended.
enum End {
    Exit(Exit),
    Detach,
    Failed(Error),
    Signalled(u8),
}

async fn session(
    p: &dyn Processes,
    sandbox: &dyn Sandbox,
    args: &ShellArgs,
    key: StartKey,
    command: Command,
) -> ExitCode {
    let size = local_size().unwrap_or(TerminalSize { cols: 80, rows: 24 });
    let (handle, from) = match &args.attach {
        Some(h) => {
            let h = ProcessHandle::new(h.clone());
            // The screen may have been another size: this one's from now on.
            if let Err(e) = p.resize(&h, size).await {
                return failed(&e);
            }
            (h, args.from)
        }
        None => match p
            .start(StartRequest::new(key, command).terminal(size))
            .await
        {
            Ok(s) => (s.handle, 0),
            Err(e) => return failed(&e),
        },
    };
    // Keys go where stdin has accepted up to (taking over from any other client).
    let mut at = match p.status(&handle).await {
        Ok(i) => i.stdin.map_or(0, |s| s.accepted),
        Err(e) => return failed(&e),
    };
    let mut stream = match p.attach(&handle, StreamOffsets::new(from, 0)).await {
        Ok(s) => s,
        Err(e) => return failed(&e),
    };
    let raw = RawMode::enter();
    let (tx, mut keys) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    // A blocking reader of this process's stdin; it dies with the process.
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        loop {
            match std::io::stdin().read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if tx.blocking_send(buf[..n].to_vec()).is_err() {
                        break;
                    }
                }
            }
        }
    });
    let mut winch = signal(SignalKind::window_change()).ok();
    let mut term = signal(SignalKind::terminate()).ok();
    let mut hup = signal(SignalKind::hangup()).ok();
    let mut int = signal(SignalKind::interrupt()).ok();
    let mut typing = true;
    let reattach = p.process_capabilities().terminal_reattach;
    let mut detach_keys = DetachKeys {
        held_ctrl_p: false,
        allowed: reattach,
    };
    let mut warned = false;
    let end = loop {
        tokio::select! {
            ev = stream.next() => match ev {
                Some(Ok(ProcessEvent::Stdout { data, .. } | ProcessEvent::Stderr { data, .. })) => {
                    let mut out = std::io::stdout().lock();
                    if out.write_all(&data).and_then(|()| out.flush()).is_err() {
                        break End::Failed(Error::new(ErrorKind::Internal, "this terminal is gone"));
                    }
                }
                Some(Ok(ProcessEvent::Exit(exit))) => break End::Exit(exit),
                Some(Err(e)) => break End::Failed(e),
                None => break End::Failed(Error::protocol("the terminal's stream ended without an exit")),
            },
            k = keys.recv(), if typing => match k {
                Some(k) => {
                    let (k, typed) = detach_keys.filter(k);
                    if !k.is_empty()
                        && let Err(e) = type_keys(p, &handle, &mut at, Bytes::from(k)).await
                        && !warned
                    {
                        // The exit (or the stream's error) follows; say why keys are lost once.
                        warned = true;
                        eprint!("\r\nexecseam: typing failed: {e}\r\n");
                    }
                    match typed {
                        Typed::Detach => break End::Detach,
                        // The terminal would end with this client: say so, stay attached.
                        Typed::Refused => eprint!(
                            "\r\nexecseam: not detached: {}\r\n",
                            no_reattach(sandbox.provider())
                        ),
                        Typed::Keys => {}
                    }
                }
                // This process's stdin ended (not a terminal): keep showing the output.
                None => typing = false,
            },
            Some(()) = recv(&mut winch) => {
                if let Some(size) = local_size() {
                    let _ = p.resize(&handle, size).await;
                }
            }
            Some(()) = recv(&mut term) => break End::Signalled(143),
            Some(()) = recv(&mut hup) => break End::Signalled(129),
            Some(()) = recv(&mut int) => break End::Signalled(130),
        }
    };
    drop(stream);
    drop(raw);
    if matches!(end, End::Failed(_) | End::Signalled(_)) && sandbox.owned() {
        // The sandbox this run created goes; its command goes first (best effort).
        let _ = p.signal(&handle, Signal::Kill).await;
    }
    let attach_hint = |sandbox: &dyn Sandbox| {
        format!(
            "execseam shell --adapter {} --sandbox {} --attach {}",
            args.adapter,
            sandbox.id(),
            handle.as_str()
        )
    };
    match end {
        End::Exit(exit) => ExitCode::from(exit.shell_status().clamp(0, 255) as u8),
        End::Detach => {
            // Keep what this run created: the command runs on in it.
            sandbox.set_owned(false);
            eprintln!(
                "\nexecseam: detached; reattach with: {}",
                attach_hint(sandbox)
            );
            ExitCode::SUCCESS
        }
        End::Failed(e) => {
            eprintln!("\nexecseam: {e}");
            if !sandbox.owned() && reattach {
                eprintln!("execseam: reattach with: {}", attach_hint(sandbox));
            }
            error_status(&e)
        }
        End::Signalled(code) => {
            if !sandbox.owned() && reattach {
                eprintln!(
                    "\nexecseam: signalled; the command runs on: {}",
                    attach_hint(sandbox)
                );
            }
            ExitCode::from(code)
        }
    }
}

async fn recv(s: &mut Option<tokio::signal::unix::Signal>) -> Option<()> {
    match s {
        Some(s) => s.recv().await,
        None => std::future::pending().await,
    }
}

/// Writes `keys` at the accepted count; when another client typed meanwhile (a `Conflict`
/// at our offset while the command runs), takes over from its count.
async fn type_keys(
    p: &dyn Processes,
    h: &ProcessHandle,
    at: &mut u64,
    keys: Bytes,
) -> Result<(), Error> {
    for _ in 0..3 {
        let w = StdinWrite {
            at: *at,
            data: keys.clone(),
            close: false,
        };
        match p.write_stdin(h, w).await {
            Ok(s) => {
                *at = s.accepted;
                return Ok(());
            }
            Err(e) if e.kind() == ErrorKind::Conflict => {
                let now = p.status(h).await?.stdin.map_or(*at, |s| s.accepted);
                if now == *at {
                    return Err(e);
                }
                *at = now;
            }
            Err(e) => return Err(e),
        }
    }
    Err(Error::new(
        ErrorKind::Conflict,
        "another client keeps typing into this terminal",
    ))
}

/// This terminal's size (stdout's, else stdin's), if it is one.
#[allow(unsafe_code)] // one ioctl on a local struct
fn local_size() -> Option<TerminalSize> {
    for fd in [1, 0] {
        // SAFETY: TIOCGWINSZ writes a `winsize` into the struct we own.
        let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
        if unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) } == 0 && ws.ws_col > 0 {
            return Some(TerminalSize {
                cols: ws.ws_col,
                rows: ws.ws_row,
            });
        }
    }
    None
}

/// The local terminal in raw mode until dropped (then as it was).
struct RawMode(libc::termios);

#[allow(unsafe_code)] // tcgetattr/tcsetattr on a local struct
impl RawMode {
    /// Raw mode on stdin, if it is a terminal.
    fn enter() -> Option<RawMode> {
        // SAFETY: plain libc calls on fd 0 with a struct we own.
        unsafe {
            if libc::isatty(0) != 1 {
                return None;
            }
            let mut t: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(0, &mut t) != 0 {
                return None;
            }
            let saved = t;
            libc::cfmakeraw(&mut t);
            if libc::tcsetattr(0, libc::TCSANOW, &t) != 0 {
                return None;
            }
            Some(RawMode(saved))
        }
    }
}

#[allow(unsafe_code)] // tcsetattr on a local struct
impl Drop for RawMode {
    fn drop(&mut self) {
        // SAFETY: restores the attributes read in `enter`.
        unsafe {
            libc::tcsetattr(0, libc::TCSANOW, &self.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_detach_keys_detach_only_where_the_terminal_can_be_attached_again() {
        for (allowed, want) in [(true, Typed::Detach), (false, Typed::Refused)] {
            let mut d = DetachKeys {
                held_ctrl_p: false,
                allowed,
            };
            assert_eq!(d.filter(b"ls\r".to_vec()), (b"ls\r".to_vec(), Typed::Keys));
            // Ctrl-P alone waits for the next read; then Ctrl-Q completes the sequence.
            assert_eq!(d.filter(b"ab\x10".to_vec()), (b"ab".to_vec(), Typed::Keys));
            assert_eq!(d.filter(b"\x11xy".to_vec()), (vec![], want));
            // Ctrl-P then another key is typed as both.
            assert_eq!(d.filter(b"\x10".to_vec()), (vec![], Typed::Keys));
            assert_eq!(d.filter(b"p".to_vec()), (b"\x10p".to_vec(), Typed::Keys));
        }
        let line = no_reattach("docker");
        assert!(
            line.contains("adapter docker's terminals cannot be attached again"),
            "{line}"
        );
    }
}
