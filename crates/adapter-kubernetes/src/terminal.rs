//! Terminals, as `EXECSEAM_KUBERNETES_TERMINAL` says. By default ([`TerminalMode::Recorder`](crate::TerminalMode::Recorder))
//! the adapter kit's recorder: `script(1)` in the pod, its output spooled to files, so a
//! terminal is a process handle like any other (it outlives this client, any handle replays it
//! from any offset, its exit is kept). The API server keeps nothing of an exec once its stream
//! ends, so its own `tty=true` exec cannot give that; it is used, through the kit's
//! [`Attached`](execseam_adapter_kit::attached::Attached) terminals (held by the sandbox handle that started them, not reattachable),
//! where the image has no `script` or `stty` ([`TerminalMode::Auto`](crate::TerminalMode::Auto): the recorder answers
//! `Unsupported` before anything starts), or always ([`TerminalMode::Attached`](crate::TerminalMode::Attached)).
//!
//! The `tty` exec: `pods/exec?…&stdin=true&stdout=true&stderr=false&tty=true` (the kubelet
//! drops stderr on a terminal), keystrokes on channel 0, resizes on channel 4 as
//! `{"Width":…,"Height":…}` (client-go `tools/remotecommand/resize.go`, `TerminalSize`
//! encoded by `json.Encoder`), the exit from the status on channel 3 as for every exec. Pod exec
//! has neither a workdir nor an environment, and a terminal echoes what it is typed: the workdir
//! is a `cd` in front, the environment goes to a 0600 file by an ordinary exec
//! ([`env_through_file`]), never into the URL or the terminal. With remote kill on, the command
//! carries the exec's tag, and a terminal dropped before its exit (its sandbox handle gone) is
//! killed by a second exec, as an abandoned exec is.

use std::sync::{Arc, Mutex};

use execseam_adapter_kit::attached::{OpenTerminal, Opened, TerminalControl, env_through_file};
use execseam_adapter_kit::degrade::{EXEC_TAG_VAR, WRAPPER_MARK, WRAPPER_STATUS};
use execseam_adapter_kit::retry::after_submit;
use execseam_adapter_kit::spool::Spool;
use execseam_adapter_kit::{id, size};
use execseam_core::{
    BoxFuture, Command, Error, ErrorKind, Exit, Processes, Retry, Sandbox, TerminalSize,
};
use futures_util::StreamExt;
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;

use crate::channel::{self, ExecRequest, Frame, Opened as Upgrade, Protocol, Session};
use crate::client::adapter;
use crate::error::exec_refused;
use crate::exec::{Cleanup, Kill, KubernetesExec};
use crate::{PROVIDER, script};

/// `$1` the workdir, then argv: `cd` there (a failure is the kit's wrapper failure), run argv.
const CD: &str = r#"cd -- "$1" 2>/dev/null || { printf '%s%s\n' "$2" "$1" >&2; exit "$3"; }
shift 3
exec "$@""#;

/// The sandbox handle's process handles: the spool, with terminals as configured.
pub(crate) fn processes(exec: &KubernetesExec) -> Box<dyn Processes + '_> {
    let spool = Spool::new(exec, Sandbox::id(exec));
    exec.shared()
        .api
        .config()
        .terminal
        .processes(spool, exec, exec, exec.terminals())
}

/// One `tty` exec's resize channel and its exit.
struct PodTerminal {
    frames: mpsc::Sender<Vec<u8>>,
    exit: Arc<Mutex<Option<Exit>>>,
    /// Kills the command by its tag if the terminal goes before its exit.
    cleanup: Mutex<Cleanup>,
}

impl TerminalControl for PodTerminal {
    fn resize(&self, size: TerminalSize) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            let mut frame = vec![channel::RESIZE];
            frame.extend_from_slice(
                format!(r#"{{"Width":{},"Height":{}}}"#, size.cols, size.rows).as_bytes(),
            );
            self.frames.send(frame).await.map_err(|_| {
                adapter(
                    ErrorKind::Conflict,
                    Retry::Never,
                    "resize",
                    "the terminal's exec has ended",
                )
            })
        })
    }

    fn exit(&self) -> BoxFuture<'_, Result<Exit, Error>> {
        let exit = self.exit.lock().expect("terminal exit").take();
        if exit.is_some() {
            self.cleanup.lock().expect("terminal cleanup").disarm();
        }
        let exit = exit.ok_or_else(|| {
            adapter(
                ErrorKind::Protocol,
                Retry::Unsafe,
                "terminal",
                "the terminal's output ended without an exit status",
            )
        });
        Box::pin(std::future::ready(exit))
    }
}

impl OpenTerminal for KubernetesExec {
    /// The size is set inside, by the kit's wrapper (`stty`), before the command runs.
    fn open(&self, command: Command, _size: TerminalSize) -> BoxFuture<'_, Result<Opened, Error>> {
        Box::pin(self.open_tty(command))
    }
}

impl KubernetesExec {
    async fn open_tty(&self, command: Command) -> Result<Opened, Error> {
        self.admit(&command)
            .await
            .map_err(|e| e.with_operation("terminal"))?;
        let shared = self.shared().clone();
        let config = shared.api.config();
        let target = self.target().await?;
        let tag = config.remote_kill.then(|| id::random_id(32));
        let mut argv = Vec::new();
        if let Some(t) = &tag {
            argv.extend(["env".to_owned(), format!("{EXEC_TAG_VAR}={t}")]);
        }
        if let Some(dir) = command.workdir() {
            argv.extend([
                "/bin/sh".to_owned(),
                "-c".to_owned(),
                CD.to_owned(),
                "sh".to_owned(),
                dir.to_owned(),
                format!("{WRAPPER_MARK}workdir does not exist: "),
                WRAPPER_STATUS.to_string(),
            ]);
        }
        if !command.env().is_empty() {
            argv.extend(env_through_file(self, command.env(), &config.temp_dir).await?);
        }
        argv.extend(command.argv().iter().cloned());
        size::check_wire(PROVIDER, &argv, &self.wire_limit())?;
        let path = ExecRequest {
            namespace: &target.namespace,
            pod: &target.pod,
            container: target.container.as_deref(),
            argv: &argv,
            stdin: true,
            tty: true,
        }
        .path();
        if path.len() > script::MAX_URL {
            return Err(adapter(
                ErrorKind::InvalidCommand,
                Retry::Never,
                "terminal",
                format!(
                    "a terminal's command goes in the exec URL, which would be {} bytes (at most {})",
                    path.len(),
                    script::MAX_URL
                ),
            ));
        }
        // Armed before the upgrade, as for every exec (the command starts when the server
        // upgrades); disarmed when nothing ran.
        let mut cleanup = Cleanup::new(tag.map(|tag| Kill {
            shared: shared.clone(),
            target: target.clone(),
            tag,
        }));
        let socket = match channel::open(
            &shared.api,
            &path,
            &[Protocol::V5, Protocol::V4],
            "terminal",
        )
        .await
        {
            Ok(Upgrade::Socket(socket)) => socket,
            Ok(Upgrade::Refused(answer)) => {
                cleanup.disarm();
                return Err(exec_refused(&answer, &target.pod));
            }
            Err(e) => return Err(cleanup.upgrade_failed(e).await),
        };
        let protocol = socket.protocol;
        let (session, frames) = Session::interactive(socket, config.idle_timeout);
        let (input, keys) = tokio::io::duplex(32 << 10);
        tokio::spawn(forward_keys(keys, frames.clone(), protocol));
        let exit = Arc::new(Mutex::new(None));
        let seen = exit.clone();
        let output = futures_util::stream::unfold(Some(session), move |state| {
            let seen = seen.clone();
            async move {
                let mut session = state?;
                match session.next("terminal").await {
                    Ok(Frame::Stdout(b) | Frame::Stderr(b)) => Some((Ok(b), Some(session))),
                    Ok(Frame::Exit(e)) => {
                        *seen.lock().expect("terminal exit") = Some(e);
                        None
                    }
                    Err(e) => Some((Err(after_submit(e)), None)),
                }
            }
        });
        Ok(Opened {
            output: output.boxed(),
            input: Box::pin(input),
            control: Box::new(PodTerminal {
                frames,
                exit,
                cleanup: Mutex::new(cleanup),
            }),
        })
    }
}

/// Keystrokes to channel 0 until the input is shut down, then (v5) the close signal for stdin.
async fn forward_keys(
    mut keys: tokio::io::DuplexStream,
    frames: mpsc::Sender<Vec<u8>>,
    protocol: Protocol,
) {
    let mut buf = vec![0u8; 32 << 10];
    loop {
        match keys.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let mut frame = Vec::with_capacity(n + 1);
                frame.push(channel::STDIN);
                frame.extend_from_slice(&buf[..n]);
                if frames.send(frame).await.is_err() {
                    return;
                }
            }
        }
    }
    if protocol == Protocol::V5 {
        let _ = frames.send(vec![channel::CLOSE, channel::STDIN]).await;
    }
}
