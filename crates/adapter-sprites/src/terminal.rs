//! Terminals on Sprites' own TTY exec: `GET /exec?…&tty=true&rows=R&cols=C` upgraded to a
//! WebSocket whose binary messages are the terminal's raw bytes both ways (no stream prefix,
//! stderr merged), `{"type":"resize","cols":C,"rows":R}` text messages resize it, and the
//! exit comes as `{"type":"exit","exit_code":N}` (sprites-go `exec.go`/`websocket.go`
//! `Resize`, sprites-py 0.7.2 `websocket.py`, the API reference's exec WebSocket: ResizeMessage,
//! ExitMessage; ../shared/research/fly-sprites.md §B.3.2).
//!
//! Used where `EXECSEAM_SPRITES_TERMINAL` is `attached` (or `auto` and the sprite has no
//! `script`); the default is the kit's recorder, reattachable from any handle.
//!
//! Held through the adapter kit's [`Attached`](execseam_adapter_kit::attached::Attached) terminals: output is replayed byte-exact from any
//! offset by the sandbox handle that started the terminal, never by another. Sprites can attach
//! to a running session again (`/exec/{id}`), but what it replays then is a bounded scrollback
//! without offsets (the in-VM server kept the last 5 KiB, `limitedBuffer(5*1024)`; the current
//! size is not documented), so an exact reattach from an offset is refused
//! (`terminal_reattach: false`) rather than approximated. A terminal whose handle goes is
//! killed (`POST /exec/{id}/kill`), and one whose socket breaks ends on the server after
//! `max_run_after_disconnect` ([`TTY_MAX_RUN_AFTER_DISCONNECT`](crate::wire::TTY_MAX_RUN_AFTER_DISCONNECT)).
//!
//! The POST fallback has no TTY (the server refuses `tty` there): its terminals stay on the
//! kit's recorder (`script(1)` in the sprite).

use bytes::Bytes;
use execseam_adapter_kit::attached::{ExitSlot, OpenTerminal, Opened, TerminalControl, output_of};
use execseam_adapter_kit::spool::Spool;
use execseam_core::{
    BoxFuture, Command, Error, ErrorKind, Exit, Processes, Retry, Sandbox, TerminalSize,
};
use futures_util::StreamExt;
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_websockets::{CloseCode, Message};

use crate::client::Client;
use crate::error::{EXEC, lost};
use crate::exec::{SpritesExec, finish_writer, kill, split};
use crate::wire::{self, Text};

/// The sandbox handle's process handles: the spool, with terminals where the configured mode
/// puts them (the HTTP transport allows only the recorder: its config says so).
pub(crate) fn processes(exec: &SpritesExec) -> Option<Box<dyn Processes + '_>> {
    let spool = Spool::new(exec, Sandbox::id(exec));
    Some(
        exec.config()
            .terminal
            .processes(spool, exec, exec, &exec.inner.terminals),
    )
}

/// One TTY exec's resize messages and its exit.
struct SpritesTerminal {
    outgoing: mpsc::Sender<Message>,
    exit: ExitSlot,
}

impl TerminalControl for SpritesTerminal {
    fn resize(&self, size: TerminalSize) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            let message = Message::text(wire::resize_message(size.rows, size.cols));
            self.outgoing.send(message).await.map_err(|_| {
                EXEC.error(ErrorKind::Conflict, "the terminal's socket has closed")
                    .with_operation("resize")
                    .with_retry(Retry::Never)
            })
        })
    }

    fn exit(&self) -> BoxFuture<'_, Result<Exit, Error>> {
        let what = "the terminal's output ended without an exit message";
        self.exit
            .take_or(|| EXEC.protocol(what).with_operation("terminal"))
    }
}

impl OpenTerminal for SpritesExec {
    /// The size goes in the query (`rows`, `cols`); the kit's wrapper sets it again inside.
    fn open(&self, command: Command, size: TerminalSize) -> BoxFuture<'_, Result<Opened, Error>> {
        Box::pin(self.open_tty(command, size))
    }
}

impl SpritesExec {
    async fn open_tty(&self, command: Command, size: TerminalSize) -> Result<Opened, Error> {
        self.fits(&command)?;
        let env = self.env_for(&command).await?;
        let mut query = wire::exec_query(&command, env.as_ref(), true);
        query.extend(wire::tty_query(size.rows, size.cols));
        let conn = self.inner.client.connect(&query).await?;
        let config = self.inner.client.config_arc();
        let (outgoing, writer, stream) = split(conn.ws, &config);
        let (input, keys) = tokio::io::duplex(32 << 10);
        tokio::spawn(forward_keys(
            keys,
            outgoing.clone(),
            config.ws_buffers.stdin_chunk,
        ));
        let (tx, rx) = mpsc::channel(32);
        let exit = ExitSlot::default();
        let reader = Reader {
            client: self.inner.client.clone(),
            outgoing: outgoing.clone(),
            signal_capable: conn.signal_capable,
            workdir: command.workdir().map(str::to_owned),
            exit: exit.clone(),
        };
        tokio::spawn(reader.run(stream, writer, tx));
        Ok(Opened {
            output: output_of(rx),
            input: Box::pin(input),
            control: Box::new(SpritesTerminal { outgoing, exit }),
        })
    }
}

/// Keystrokes as raw binary messages (TTY mode has no stream prefix and no EOF frame).
async fn forward_keys(
    mut keys: tokio::io::DuplexStream,
    outgoing: mpsc::Sender<Message>,
    chunk: usize,
) {
    let mut buf = vec![0u8; chunk.max(1)];
    while let Ok(n @ 1..) = keys.read(&mut buf).await {
        if outgoing
            .send(Message::binary(Bytes::copy_from_slice(&buf[..n])))
            .await
            .is_err()
        {
            return;
        }
    }
}

/// Reads one TTY exec's socket into the terminal's output.
struct Reader {
    /// Not the sandbox handle: it holds the terminal, whose end this reader waits for.
    client: Client,
    outgoing: mpsc::Sender<Message>,
    signal_capable: bool,
    workdir: Option<String>,
    exit: ExitSlot,
}

impl Reader {
    /// Forwards output until the exit message (then closes the socket: the server would linger)
    /// or an error; kills the session when the terminal's holder goes first.
    async fn run(
        self,
        mut stream: futures_util::stream::SplitStream<crate::client::Ws>,
        writer: tokio::task::JoinHandle<()>,
        tx: mpsc::Sender<Result<Bytes, Error>>,
    ) {
        let config = self.client.config_arc();
        let mut session: Option<String> = None;
        let mut got_output = false;
        let mut last_rx = Instant::now();
        let mut ping =
            tokio::time::interval_at(Instant::now() + config.ping_interval, config.ping_interval);
        let end: Result<(), Error> = loop {
            tokio::select! {
                biased;
                msg = stream.next() => {
                    last_rx = Instant::now();
                    match msg {
                        Some(Ok(m)) if m.is_binary() => {
                            got_output = true;
                            if tx.send(Ok(Bytes::copy_from_slice(m.as_payload()))).await.is_err() {
                                break self.abandon(session.as_deref(), writer).await;
                            }
                            last_rx = Instant::now();
                        }
                        Some(Ok(m)) if m.is_text() => match wire::parse_text(m.as_text().unwrap_or_default()) {
                            Text::SessionInfo { session_id } => session = session_id,
                            Text::Exit(code) => match i32::try_from(code) {
                                Ok(c) if c >= 0 => {
                                    self.exit.set(Exit::Code(c));
                                    break Ok(());
                                }
                                _ => break Err(EXEC.protocol(format!("exit message with exit_code {code}"))),
                            },
                            Text::Other => {}
                        },
                        Some(Ok(m)) if m.is_close() => {
                            break Err(EXEC.protocol("the server closed the terminal's socket before the exit message"));
                        }
                        Some(Ok(_)) => {}
                        Some(Err(e)) => break Err(crate::error::ws_read(&e)),
                        None => break Err(lost("the terminal's socket ended")),
                    }
                }
                () = tx.closed() => break self.abandon(session.as_deref(), writer).await,
                _ = ping.tick() => {
                    if last_rx.elapsed() > config.pong_timeout {
                        break Err(lost(format!("no frame for {:?}", config.pong_timeout)));
                    }
                    let _ = self.outgoing.send(Message::ping(Bytes::new())).await;
                }
            }
        };
        let _ = self
            .outgoing
            .send(Message::close(Some(CloseCode::NORMAL_CLOSURE), ""))
            .await;
        if let Err(e) = end {
            // A workdir that does not exist: the server drops the socket before any output.
            let missing = match (&self.workdir, got_output) {
                (Some(dir), false) => self.client.dir_missing(dir).await,
                _ => None,
            };
            let e = match missing {
                Some(why) => EXEC.error(ErrorKind::NotFound, why),
                None => e.with_operation("terminal"),
            };
            let _ = tx.send(Err(e)).await;
        }
    }

    /// Nobody holds the terminal any more: kill its session (an `Ok` end: nobody reads it).
    async fn abandon(
        &self,
        session: Option<&str>,
        writer: tokio::task::JoinHandle<()>,
    ) -> Result<(), Error> {
        let _ = kill(&self.client, session, &self.outgoing, self.signal_capable).await;
        finish_writer(writer).await;
        Ok(())
    }
}
