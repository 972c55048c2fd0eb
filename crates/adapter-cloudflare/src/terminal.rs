//! Terminals on the bridge's terminal WebSocket (`GET /v1/sandbox/{id}/pty`), through the
//! adapter kit's [`Attached`](execseam_adapter_kit::attached::Attached) terminals, where
//! `EXECSEAM_CLOUDFLARE_TERMINAL` is `attached` (or `auto` and the image has no `script`); the
//! default is the kit's recorder, reattachable from any handle.
//!
//! What the service offers (bridge `@cloudflare/sandbox` `src/bridge/routes.ts`
//! `/sandbox/:id/pty`; container `handlers/pty-ws-handler.ts`, `pty.ts`,
//! `services/session-manager.ts` `getPty`, cloudflare/sandbox-sdk @ 6abf639): **one** terminal
//! per session, whose program is `shell` (`Bun.spawn([shell])`: a path, no arguments), binary
//! frames both ways, `{"type":"resize","cols":C,"rows":R}` text frames, `{"type":"ready"}` once
//! attached, and **no exit**: the `exit` status message is declared (`packages/shared/src/
//! pty-types.ts`) but no handler sends it, and the socket stays open after the program ends.
//!
//! So each terminal gets a session of its own (`?session=execseam-t-<random>`), and its program
//! is a small script written into the container first by an ordinary exec (in the command's
//! workdir: a missing one is that exec's `NotFound`): it runs the kit's wrapper and the command,
//! trapping INT and QUIT so that a typed `^C`/`^\` ends the command and not the script, then
//! records the status in a file (and its own pid, so that a killed script is an error, not a
//! wait forever). The command is not a process-group leader there (`set -m` does not hand a job
//! the terminal in a script, and `setsid -c` would have to take the terminal from the script's
//! session: `TIOCSCTTY` then needs `CAP_SYS_ADMIN`), so such a terminal's `signal` is refused,
//! `Unsupported`, before any request (the kit's [`TerminalControl::signals`]): a typed `^C` or
//! `^\` reaches it, and the default recorder's terminals take signals. The exit is read from
//! that file by ordinary execs that wait for it in the container (at most 5 s each); the output
//! then ends once the socket has been quiet for 100 ms (at most 1 s), as the terminal's last
//! bytes may still be on their way. The environment goes through a 0600 file
//! ([`env_through_file`]), never into the script or the terminal.
//!
//! What it cannot give: another handle finds nothing (`NotFound`; `terminal_reattach: false`):
//! the container replays its last 256 KiB to a new connection without any offset, so no exact
//! reattach can be built on it. The socket's close does not end a terminal (`pty-ws-handler.ts`
//! `onClose`), so one whose handle goes has its session deleted, which kills it.

use std::time::Duration;

use bytes::Bytes;
use execseam_adapter_kit::attached::{
    ExitSlot, OpenTerminal, Opened, TerminalControl, env_through_file, output_of,
};
use execseam_adapter_kit::degrade::quote;
use execseam_adapter_kit::retry::Stage;
use execseam_adapter_kit::spool::Spool;
use execseam_core::{
    BoxFuture, Command, Error, ErrorKind, Exec, Exit, Processes, Retry, Sandbox, TerminalSize,
};
use futures_util::{SinkExt, StreamExt};
use tokio::io::AsyncReadExt;
use tokio::sync::{mpsc, oneshot};
use tokio_websockets::{CloseCode, Message};

use crate::client::BridgeClient;
use crate::error::{call, protocol};
use crate::exec::CloudflareExec;

/// Where the terminals' scripts and exit files live in the container.
const ROOT: &str = "/tmp/.execseam/c";

/// Stores stdin as the executable script `$1`.
const STORE: &str = r#"umask 077 && mkdir -p "${1%/*}" && cat >"$1" && chmod 700 "$1""#;

/// Waits up to 5 s for the exit file of script `$1`: prints its status (and removes the files),
/// or `running`.
const WAIT: &str = r#"i=0
while [ ! -e "$1.exit" ]; do
  p=$(cat "$1.pid" 2>/dev/null) && ! kill -0 "$p" 2>/dev/null && [ ! -e "$1.exit" ] && { echo gone; exit 0; }
  i=$((i+1)); [ "$i" -gt 100 ] && { echo running; exit 0; }
  sleep 0.05
done
cat "$1.exit" && rm -f -- "$1" "$1.pid" "$1.exit""#;

/// The sandbox handle's process handles: the spool, with terminals where the configured mode
/// puts them (the recorder, the bridge's WebSocket, or the recorder first).
pub(crate) fn processes(exec: &CloudflareExec) -> Option<Box<dyn Processes + '_>> {
    let spool = Spool::new(exec, Sandbox::id(exec));
    Some(
        exec.terminal_mode()
            .processes(spool, exec, exec, exec.terminals()),
    )
}

/// The script the container runs on the terminal: the command as a foreground job, then its
/// status into `<script>.exit`.
fn script(path: &str, argv: &[String], workdir: Option<&str>) -> String {
    let words: Vec<_> = argv.iter().map(|a| quote(a)).collect();
    let cd = workdir.map_or_else(String::new, |d| format!("cd -- {} && ", quote(d)));
    let q = quote(path);
    format!(
        "#!/bin/sh\nprintf '%s\\n' \"$$\" >{q}.pid\ntrap : INT QUIT\ns=125\n{cd}{{ {}; s=$?; }}\nprintf '%s\\n' \"$s\" >{q}.tmp && mv -f {q}.tmp {q}.exit\n",
        words.join(" ")
    )
}

/// One terminal's resize messages and its exit; its session (`client`, sandbox, session id) is
/// deleted when the terminal goes.
struct BridgeTerminal {
    outgoing: mpsc::Sender<Message>,
    exit: ExitSlot,
    session: (BridgeClient, String, String),
    /// The task that asks for the exit.
    waiter: tokio::task::AbortHandle,
}

impl Drop for BridgeTerminal {
    /// Closing the socket does not end the terminal (`pty-ws-handler.ts` `onClose`), and nobody
    /// can reach it again: delete its session, which kills the program and closes the terminal
    /// (and ends the session's own shell, which would otherwise live as long as the container).
    fn drop(&mut self) {
        self.waiter.abort();
        let (client, id, sid) = self.session.clone();
        execseam_adapter_kit::reaper::spawn(
            crate::PROVIDER,
            "delete a terminal's session",
            async move {
                match client.delete_session(&id, &sid).await {
                    Err(e) if e.kind() != ErrorKind::NotFound => Err(e),
                    _ => Ok(()),
                }
            },
        );
    }
}

impl TerminalControl for BridgeTerminal {
    fn resize(&self, size: TerminalSize) -> BoxFuture<'_, Result<(), Error>> {
        let text = format!(
            r#"{{"type":"resize","cols":{},"rows":{}}}"#,
            size.cols, size.rows
        );
        Box::pin(async move {
            self.outgoing.send(Message::text(text)).await.map_err(|_| {
                call("resize", Stage::Before)
                    .error(ErrorKind::Conflict, "the terminal's socket has closed")
                    .with_retry(Retry::Never)
            })
        })
    }

    fn exit(&self) -> BoxFuture<'_, Result<Exit, Error>> {
        let what = "the terminal's output ended without its exit";
        self.exit
            .take_or(|| protocol(what, "terminal", Stage::After))
    }

    /// The command runs under the status-recording script, in the script's process group:
    /// no signal reaches it alone (see the module doc).
    fn signals(&self) -> bool {
        false
    }
}

impl OpenTerminal for CloudflareExec {
    fn open(&self, command: Command, size: TerminalSize) -> BoxFuture<'_, Result<Opened, Error>> {
        Box::pin(open_tty(self, command, size))
    }
}

/// Writes the terminal's script, then opens its socket: the size goes in the query (`cols`,
/// `rows`), and the kit's wrapper sets it again inside.
async fn open_tty(
    exec: &CloudflareExec,
    command: Command,
    size: TerminalSize,
) -> Result<Opened, Error> {
    execseam_adapter_kit::size::check_size(crate::PROVIDER, &command, &crate::SIZE_LIMIT)?;
    let name = execseam_adapter_kit::id::random_id(16);
    let path = format!("{ROOT}/{name}");
    let mut argv = Vec::new();
    if !command.env().is_empty() {
        argv.extend(env_through_file(exec, command.env(), "/tmp").await?);
    }
    argv.extend(command.argv().iter().cloned());
    let mut store = Command::builder(["sh", "-c", STORE, "sh", &path]).stdin(script(
        &path,
        &argv,
        command.workdir(),
    ));
    if let Some(dir) = command.workdir() {
        store = store.workdir(dir);
    }
    let stored = exec.exec(store.build()?).await?;
    if !stored.exit.success() {
        return Err(call("terminal", Stage::Before).error(
            ErrorKind::Internal,
            format!(
                "could not write the terminal's script: {}",
                String::from_utf8_lossy(&stored.stderr).trim()
            ),
        ));
    }
    let sid = format!("execseam-t-{name}");
    let socket = exec
        .client()
        .pty(Sandbox::id(exec), &sid, &path, size.rows, size.cols)
        .await?;
    let (outgoing, outgoing_rx) = mpsc::channel(32);
    let (input, keys) = tokio::io::duplex(32 << 10);
    tokio::spawn(forward_keys(keys, outgoing.clone()));
    let exit = ExitSlot::default();
    let (exited_tx, exited) = oneshot::channel();
    let waiter = tokio::spawn(wait_exit(exec.sibling(), path, exited_tx)).abort_handle();
    let (tx, rx) = mpsc::channel(32);
    tokio::spawn(pump(socket, outgoing_rx, exited, exit.clone(), tx));
    Ok(Opened {
        output: output_of(rx),
        input: Box::pin(input),
        control: Box::new(BridgeTerminal {
            outgoing,
            exit,
            session: (exec.client().clone(), Sandbox::id(exec).to_owned(), sid),
            waiter,
        }),
    })
}

/// Keystrokes as binary frames.
async fn forward_keys(mut keys: tokio::io::DuplexStream, outgoing: mpsc::Sender<Message>) {
    let mut buf = vec![0u8; 16 << 10];
    while let Ok(n @ 1..) = keys.read(&mut buf).await {
        let frame = Message::binary(Bytes::copy_from_slice(&buf[..n]));
        if outgoing.send(frame).await.is_err() {
            return;
        }
    }
}

/// Asks the container for the script's exit until it is there, on a sibling handle (never the
/// terminal's own, which the terminal's drop must not wait for); aborted when the terminal goes.
async fn wait_exit(
    exec: CloudflareExec,
    path: String,
    exited: oneshot::Sender<Result<Exit, Error>>,
) {
    let answer = loop {
        let ask = Command::new(["sh", "-c", WAIT, "sh", &path]).expect("a valid command");
        let out = match exec.exec(ask).await {
            Ok(out) => out,
            Err(e) => break Err(e.with_operation("terminal")),
        };
        let text = String::from_utf8_lossy(&out.stdout);
        match text.trim() {
            "running" => continue,
            "gone" => {
                break Err(protocol(
                    "the terminal's program ended without recording its status (killed?)",
                    "terminal",
                    Stage::After,
                ));
            }
            code => match code.parse::<i32>() {
                Ok(c) => break Ok(Exit::Code(c)),
                Err(_) => {
                    break Err(protocol(
                        format!("the terminal's exit file holds {code:?}"),
                        "terminal",
                        Stage::After,
                    ));
                }
            },
        }
    };
    let _ = exited.send(answer);
}

/// Drives the socket: output to `tx`, keystrokes and resizes from `outgoing`; once the exit is
/// known, the output ends after 100 ms of quiet (1 s at most).
async fn pump(
    mut ws: execseam_adapter_kit::ws::Socket,
    mut outgoing: mpsc::Receiver<Message>,
    mut exited: oneshot::Receiver<Result<Exit, Error>>,
    exit: ExitSlot,
    tx: mpsc::Sender<Result<Bytes, Error>>,
) {
    const QUIET: Duration = Duration::from_millis(100);
    let mut ready = false;
    let mut drain: Option<tokio::time::Instant> = None;
    let end: Result<(), Error> = loop {
        let quiet = tokio::time::sleep(QUIET);
        tokio::select! {
            biased;
            msg = ws.next() => match msg {
                Some(Ok(m)) if m.is_binary() => {
                    if tx.send(Ok(Bytes::copy_from_slice(m.as_payload()))).await.is_err() {
                        break Ok(());
                    }
                }
                Some(Ok(m)) if m.is_text() => {
                    let v: serde_json::Value = serde_json::from_str(m.as_text().unwrap_or_default()).unwrap_or_default();
                    match v["type"].as_str() {
                        Some("ready") => ready = true,
                        // Declared, never sent by a released container; taken if one does.
                        Some("exit") => if let Some(c) = v["code"].as_i64().and_then(|c| i32::try_from(c).ok()) {
                            exit.set(Exit::Code(c));
                            break Ok(());
                        },
                        Some("error") if !ready => {
                            break Err(call("terminal", Stage::Submit).error(
                                ErrorKind::Unavailable,
                                format!("the terminal did not start: {}", v["message"].as_str().unwrap_or_default()),
                            ));
                        }
                        _ => tracing::debug!(provider = crate::PROVIDER, "terminal status: {v}"),
                    }
                }
                Some(Ok(m)) if m.is_close() => {
                    break Err(protocol("the bridge closed the terminal's socket", "terminal", Stage::After));
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => break Err(protocol(format!("the terminal's socket: {e}"), "terminal", Stage::After)),
                None => break Err(protocol("the terminal's socket ended", "terminal", Stage::After)),
            },
            Some(out) = outgoing.recv() => {
                if ws.send(out).await.is_err() {
                    break Err(protocol("the terminal's socket broke", "terminal", Stage::After));
                }
            }
            answer = &mut exited, if drain.is_none() => match answer {
                Ok(Ok(code)) => {
                    exit.set(code);
                    drain = Some(tokio::time::Instant::now() + Duration::from_secs(1));
                }
                Ok(Err(e)) => break Err(e),
                Err(_) => break Ok(()), // the sandbox handle went
            },
            () = quiet, if drain.is_some() => break Ok(()),
            () = tx.closed() => break Ok(()),
        }
        if drain.is_some_and(|d| tokio::time::Instant::now() >= d) {
            break Ok(());
        }
    };
    let _ = ws
        .send(Message::close(Some(CloseCode::NORMAL_CLOSURE), ""))
        .await;
    if let Err(e) = end {
        let _ = tx.send(Err(e)).await;
    }
}
