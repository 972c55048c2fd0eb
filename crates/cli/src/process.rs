//! `execseam process start|list|logs|write|kill|wait`: process handles from the command line.
//!
//! Each subcommand connects to the sandbox (`--sandbox`, left running) and does one operation,
//! so each works from a different `execseam` process than the one that started the command:
//! the handle printed by `start` is all another process needs (with the adapter and sandbox).
//!
//! Exit status: `wait` and `logs --follow` exit with the command's status (128+n for a signal
//! death), **124** when `wait` reaches `--timeout` with the command still running, **125** on an
//! infrastructure failure (one typed line on stderr), **2** for a usage error (bad arguments, an
//! adapter without process handles, a handle that is not this sandbox's).

use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use bytes::Bytes;
use clap::{Args, Subcommand};
use execseam_core::{
    Command, Error, ErrorKind, Exit, ProcessEvent, ProcessHandle, ProcessInfo, ProcessState,
    Processes, Signal, StartKey, StartRequest, StdinWrite, StreamOffsets, Waited,
};
use serde_json::json;

use crate::registry;
use crate::run::{USAGE, error_status};

/// The status `wait` exits with when the command is still running at its deadline (as
/// `timeout(1)`).
pub const STILL_RUNNING: u8 = 124;

#[derive(Args)]
pub struct ProcessArgs {
    #[command(subcommand)]
    command: ProcessCmd,
}

#[derive(Args)]
struct Target {
    /// The adapter.
    #[arg(long, default_value = "local")]
    adapter: String,
    /// The sandbox the command runs in (it is left running).
    #[arg(long, env = "EXECSEAM_SANDBOX")]
    sandbox: String,
}

#[derive(Subcommand)]
enum ProcessCmd {
    /// Start a command detached and print its handle. Starting again under the same `--key`
    /// starts nothing and prints the same handle.
    Start {
        #[command(flatten)]
        target: Target,
        /// The start's idempotency key (1 to 64 of A-Z a-z 0-9 _ -); random when absent.
        #[arg(long)]
        key: Option<String>,
        /// Keep stdin open for `process write` (otherwise the command sees EOF at once).
        #[arg(long)]
        stdin: bool,
        /// Absolute working directory in the sandbox.
        #[arg(long)]
        workdir: Option<String>,
        /// An environment variable, KEY=VALUE (repeatable).
        #[arg(long = "env", value_name = "KEY=VALUE")]
        env: Vec<String>,
        /// Print JSON (`handle`, `key`, `fresh`).
        #[arg(long)]
        json: bool,
        /// The command and its arguments.
        #[arg(last = true, required = true, value_name = "ARGV")]
        argv: Vec<String>,
    },
    /// List the sandbox's handles with their states, by key.
    List {
        #[command(flatten)]
        target: Target,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print the command's output: stdout to stdout, stderr to stderr, exact bytes.
    Logs {
        #[command(flatten)]
        target: Target,
        /// The handle `start` printed.
        handle: String,
        /// Follow to the exit, then exit with the command's status.
        #[arg(long)]
        follow: bool,
        /// The stdout byte offset to start from.
        #[arg(long, value_name = "N", default_value_t = 0)]
        stdout_from: u64,
        /// The stderr byte offset to start from.
        #[arg(long, value_name = "N", default_value_t = 0)]
        stderr_from: u64,
    },
    /// Write this process's stdin to the command's stdin (started with `--stdin`).
    Write {
        #[command(flatten)]
        target: Target,
        /// The handle `start` printed.
        handle: String,
        /// Close the command's stdin after these bytes.
        #[arg(long)]
        close: bool,
        /// The stdin offset the bytes start at (a retry of a write that landed is then a no-op);
        /// default: the count accepted so far.
        #[arg(long, value_name = "N")]
        at: Option<u64>,
    },
    /// Send a signal to the command's process group.
    Kill {
        #[command(flatten)]
        target: Target,
        /// The handle `start` printed.
        handle: String,
        /// HUP, INT, QUIT, KILL, USR1, USR2 or TERM (or its number).
        #[arg(long, default_value = "TERM")]
        signal: String,
    },
    /// Wait for the command's exit and exit with its status (124 if still running at the
    /// timeout).
    Wait {
        #[command(flatten)]
        target: Target,
        /// The handle `start` printed.
        handle: String,
        /// Give up after this many seconds (default: wait as long as it runs).
        #[arg(long, value_name = "SECS")]
        timeout: Option<f64>,
    },
}

impl ProcessCmd {
    fn target(&self) -> &Target {
        match self {
            ProcessCmd::Start { target, .. }
            | ProcessCmd::List { target, .. }
            | ProcessCmd::Logs { target, .. }
            | ProcessCmd::Write { target, .. }
            | ProcessCmd::Kill { target, .. }
            | ProcessCmd::Wait { target, .. } => target,
        }
    }
}

pub async fn process(args: ProcessArgs) -> ExitCode {
    let target = args.command.target();
    let sandbox = match registry::open(&target.adapter, Some(target.sandbox.as_str())).await {
        Ok(s) => s,
        Err(e) => return failed(&e),
    };
    let code = match sandbox.processes() {
        Some(p) => match run(&*p, args.command).await {
            Ok(code) => code,
            Err(e) => failed(&e),
        },
        None => {
            eprintln!(
                "execseam: adapter {} has no process handles (see docs/processes.md)",
                sandbox.provider()
            );
            ExitCode::from(USAGE)
        }
    };
    registry::close(&*sandbox).await;
    code
}

fn failed(e: &Error) -> ExitCode {
    eprintln!("execseam: {e}");
    if let Some(kept) = e.retained_from() {
        eprintln!(
            "execseam: the first offsets still available: --stdout-from {} --stderr-from {}",
            kept.stdout, kept.stderr
        );
    }
    error_status(e)
}

fn usage(m: String) -> Error {
    Error::new(ErrorKind::InvalidCommand, m)
}

fn exit_status(exit: Exit) -> ExitCode {
    ExitCode::from(exit.shell_status().clamp(0, 255) as u8)
}

fn state_text(s: &ProcessState) -> String {
    match s {
        ProcessState::Running => "running".to_owned(),
        ProcessState::Exited(Exit::Code(c)) => format!("exited {c}"),
        ProcessState::Exited(Exit::Signal(n)) => format!("signal {n}"),
        ProcessState::Unknown => "unknown".to_owned(),
    }
}

fn info_json(i: &ProcessInfo) -> serde_json::Value {
    let (state, code, signal) = match i.state {
        ProcessState::Running => ("running", None, None),
        ProcessState::Exited(Exit::Code(c)) => ("exited", Some(c), None),
        ProcessState::Exited(Exit::Signal(n)) => ("exited", None, Some(n)),
        ProcessState::Unknown => ("unknown", None, None),
    };
    json!({
        "handle": i.handle.as_str(),
        "key": i.key.as_str(),
        "state": state,
        "exit_code": code,
        "signal": signal,
        "stdout_bytes": i.written.map(|w| w.stdout),
        "stderr_bytes": i.written.map(|w| w.stderr),
        "stdin_accepted": i.stdin.map(|s| s.accepted),
        "stdin_closed": i.stdin.map(|s| s.closed),
    })
}

fn write_out(stdout: &[u8], stderr: &[u8]) {
    if !stdout.is_empty() {
        let mut o = std::io::stdout();
        let _ = o.write_all(stdout);
        let _ = o.flush();
    }
    if !stderr.is_empty() {
        let _ = std::io::stderr().write_all(stderr);
    }
}

async fn run(p: &dyn Processes, cmd: ProcessCmd) -> Result<ExitCode, Error> {
    match cmd {
        ProcessCmd::Start {
            key,
            stdin,
            workdir,
            env,
            json,
            argv,
            ..
        } => {
            let key = match key {
                Some(k) => StartKey::new(k)?,
                None => StartKey::random(),
            };
            let mut b = Command::builder(argv);
            if let Some(dir) = workdir {
                b = b.workdir(dir);
            }
            for kv in &env {
                let (k, v) = kv
                    .split_once('=')
                    .ok_or_else(|| usage(format!("--env {kv:?} is not KEY=VALUE")))?;
                b = b.env(k, v);
            }
            let mut request = StartRequest::new(key.clone(), b.build()?);
            if stdin {
                request = request.open_stdin();
            }
            let started = p.start(request).await?;
            if json {
                println!(
                    "{}",
                    json!({ "handle": started.handle.as_str(), "key": key.as_str(), "fresh": started.fresh })
                );
            } else {
                println!("{}", started.handle.as_str());
            }
            Ok(ExitCode::SUCCESS)
        }
        ProcessCmd::List { json, .. } => {
            let listed = p.list().await?;
            crate::out::list(json, &listed, info_json, |i| {
                format!(
                    "{}\t{}\t{}",
                    i.handle.as_str(),
                    i.key.as_str(),
                    state_text(&i.state)
                )
            });
            Ok(ExitCode::SUCCESS)
        }
        ProcessCmd::Logs {
            handle,
            follow,
            stdout_from,
            stderr_from,
            ..
        } => {
            let handle = ProcessHandle::new(handle);
            let from = StreamOffsets::new(stdout_from, stderr_from);
            if follow {
                let mut events = p.attach(&handle, from).await?;
                while let Some(event) = events.next().await {
                    match event? {
                        ProcessEvent::Stdout { data, .. } => write_out(&data, b""),
                        ProcessEvent::Stderr { data, .. } => write_out(b"", &data),
                        ProcessEvent::Exit(exit) => return Ok(exit_status(exit)),
                    }
                }
                return Err(Error::protocol("the output stream ended without an exit"));
            }
            // What is there now: reads are bounded, so read until one brings nothing new.
            let mut at = from;
            loop {
                let read = p.read(&handle, at).await?;
                write_out(&read.stdout, &read.stderr);
                let next = read.next();
                if next == at || next == read.written {
                    return Ok(ExitCode::SUCCESS);
                }
                at = next;
            }
        }
        ProcessCmd::Write {
            handle, close, at, ..
        } => {
            let handle = ProcessHandle::new(handle);
            let mut data = Vec::new();
            std::io::stdin()
                .read_to_end(&mut data)
                .map_err(|e| usage(format!("reading stdin: {e}")))?;
            let at = match at {
                Some(n) => n,
                None => p.status(&handle).await?.stdin.map_or(0, |s| s.accepted),
            };
            let state = p
                .write_stdin(
                    &handle,
                    StdinWrite {
                        at,
                        data: Bytes::from(data),
                        close,
                    },
                )
                .await?;
            println!("{}", state.accepted);
            Ok(ExitCode::SUCCESS)
        }
        ProcessCmd::Kill { handle, signal, .. } => {
            let sig = Signal::parse(&signal)
                .ok_or_else(|| usage(format!("--signal {signal:?}: not a signal this knows")))?;
            p.signal(&ProcessHandle::new(handle), sig).await?;
            Ok(ExitCode::SUCCESS)
        }
        ProcessCmd::Wait {
            handle, timeout, ..
        } => {
            let within = match timeout {
                None => Duration::from_secs(365 * 24 * 3600),
                Some(s) if s.is_finite() && s >= 0.0 => {
                    Duration::try_from_secs_f64(s).unwrap_or(Duration::from_secs(365 * 24 * 3600))
                }
                Some(s) => return Err(usage(format!("--timeout {s}: not a number of seconds"))),
            };
            match p.wait(&ProcessHandle::new(handle), within).await? {
                Waited::Exited(exit) => Ok(exit_status(exit)),
                Waited::Running => {
                    eprintln!("execseam: still running after {within:?}");
                    Ok(ExitCode::from(STILL_RUNNING))
                }
            }
        }
    }
}
