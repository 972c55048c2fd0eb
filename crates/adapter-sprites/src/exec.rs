//! The `Exec` and `ExecStream` implementation.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use execseam_adapter_kit::exec_span;
use execseam_core::{
    BoxFuture, Capabilities, Command, Error, ErrorKind, Event, EventStream, Exec, ExecStream, Exit,
    Output, Ownership, Retry, Sandbox,
};
use futures_util::{SinkExt, StreamExt};
use tokio::sync::{OnceCell, mpsc, oneshot};
use tokio::time::Instant;
use tokio_websockets::{CloseCode, Message};

use crate::PROVIDER;
use crate::client::{Client, Connected};
use crate::config::{BaseEnv, SpritesConfig, Transport};
use crate::error::{EXEC, control, lost};
use crate::wire::{self, EXIT, Frame, STDERR, STDIN, STDIN_EOF, STDOUT, Text};

/// Runs commands on one sprite. See the [crate docs](crate).
#[derive(Clone, Debug)]
pub struct SpritesExec {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) client: Client,
    discovered: OnceCell<BTreeMap<String, String>>,
    ownership: Ownership,
    /// The terminals this handle opened (Sprites' TTY exec; see `terminal.rs`).
    pub(crate) terminals: execseam_adapter_kit::attached::Terminals,
}

impl Drop for Inner {
    /// The safety net: an owned sprite nobody closed is deleted on the runtime, if there is one.
    fn drop(&mut self) {
        if !self.ownership.destroy_on_drop() {
            return;
        }
        let client = self.client.clone();
        execseam_adapter_kit::reaper::spawn(PROVIDER, "delete the sprite", async move {
            client.delete_sprite().await
        });
    }
}

/// Variables of the discovered environment that describe the discovering process, not the sprite.
const NOT_BASE: &[&str] = &["PWD", "OLDPWD", "SHLVL", "_"];

impl SpritesExec {
    pub(crate) fn new(client: Client, ownership: Ownership) -> SpritesExec {
        SpritesExec {
            inner: Arc::new(Inner {
                client,
                discovered: OnceCell::new(),
                ownership,
                terminals: execseam_adapter_kit::attached::Terminals::default(),
            }),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &SpritesConfig {
        self.inner.client.config()
    }

    /// The capabilities of a configuration.
    pub fn capabilities_of(config: &SpritesConfig) -> Capabilities {
        match config.transport {
            Transport::WebSocket => Capabilities {
                processes: Some(
                    config
                        .terminal
                        .capabilities(execseam_adapter_kit::spool::SPOOLED),
                ),
                ..crate::CAPABILITIES
            },
            Transport::Http => crate::HTTP_CAPABILITIES,
        }
    }

    /// Refuses, before any request (the environment discovery included), a command that is too
    /// large for the sprite or for the exec URL with its own argv and env alone.
    pub(crate) fn fits(&self, cmd: &Command) -> Result<(), Error> {
        execseam_adapter_kit::size::check_size(PROVIDER, cmd, &crate::SIZE_LIMIT)?;
        let env: BTreeMap<String, String> = cmd.env().clone();
        let query = wire::exec_query(
            cmd,
            (!env.is_empty()).then_some(&env),
            !cmd.stdin().is_empty(),
        );
        self.inner.client.exec_url(&query).map(drop)
    }

    /// The environment sent with a command that sets variables: the base (see [`BaseEnv`]) with
    /// `Command::env` on top; `None` for a command without env (the sprite's default applies).
    pub(crate) async fn env_for(
        &self,
        cmd: &Command,
    ) -> Result<Option<BTreeMap<String, String>>, Error> {
        if cmd.env().is_empty() {
            return Ok(None);
        }
        let mut env = match &self.config().base_env {
            BaseEnv::Server => BTreeMap::new(),
            BaseEnv::Fixed(m) => m.clone(),
            BaseEnv::Discover => self
                .inner
                .discovered
                .get_or_try_init(|| self.discover())
                .await?
                .clone(),
        };
        env.extend(cmd.env().iter().map(|(k, v)| (k.clone(), v.clone())));
        Ok(Some(env))
    }

    /// Runs `env -0` without `env` parameters and reads the sprite's default environment.
    async fn discover(&self) -> Result<BTreeMap<String, String>, Error> {
        let cmd = Command::new(["env", "-0"]).expect("a valid command");
        let out = self.run(cmd, None).await.map_err(|e| {
            control("discover_env")
                .error(
                    e.kind(),
                    format!("cannot read the sprite's environment: {}", e.message()),
                )
                .with_retry(Retry::SAFE)
        })?;
        if !out.exit.success() {
            return Err(control("discover_env").error(
                ErrorKind::Internal,
                format!(
                    "`env -0` exited {:?}: {}",
                    out.exit,
                    String::from_utf8_lossy(&out.stderr)
                ),
            ));
        }
        Ok(out
            .stdout
            .split(|b| *b == 0)
            .filter_map(|kv| {
                let kv = std::str::from_utf8(kv).ok()?;
                let (k, v) = kv.split_once('=')?;
                (!k.is_empty() && !NOT_BASE.contains(&k)).then(|| (k.to_owned(), v.to_owned()))
            })
            .collect())
    }

    /// Runs a command to its end with the configured transport.
    async fn run(
        &self,
        cmd: Command,
        env: Option<BTreeMap<String, String>>,
    ) -> Result<Output, Error> {
        match self.config().transport {
            Transport::WebSocket => self.stream(cmd, env).await?.collect().await,
            Transport::Http => self.post(cmd, env).await,
        }
    }

    /// Starts a command over a WebSocket (checked by [`fits`](Self::fits) before).
    async fn stream(
        &self,
        cmd: Command,
        env: Option<BTreeMap<String, String>>,
    ) -> Result<EventStream, Error> {
        let stdin = cmd.stdin().clone();
        let query = wire::exec_query(&cmd, env.as_ref(), !stdin.is_empty());
        let conn = self.inner.client.connect(&query).await?;
        let (tx, rx) = mpsc::channel(32);
        let (kill_tx, kill_rx) = mpsc::channel::<oneshot::Sender<Result<(), Error>>>(1);
        // Counted by the kit's reaper: a dropped stream leaves the driver to kill the command,
        // and the front end's drain must wait for that.
        let driver = drive(
            self.inner.clone(),
            conn,
            stdin,
            cmd.workdir().map(str::to_owned),
            tx,
            kill_rx,
        );
        execseam_adapter_kit::reaper::spawn(PROVIDER, "kill", async move {
            driver.await;
            Ok(())
        });
        Ok(
            EventStream::new(futures_util::stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|item| (item, rx))
            }))
            .with_kill(move || async move {
                // Asks the driver to kill and waits for the kill route's answer.
                let (reply, answer) = oneshot::channel();
                if kill_tx.send(reply).await.is_err() {
                    return Ok(()); // the driver ended: the command is over
                }
                answer.await.unwrap_or(Ok(()))
            }),
        )
    }

    /// Runs a command with `POST /exec` (checked by [`fits`](Self::fits) before).
    async fn post(
        &self,
        cmd: Command,
        env: Option<BTreeMap<String, String>>,
    ) -> Result<Output, Error> {
        let stdin = cmd.stdin().clone();
        let query = wire::exec_query(&cmd, env.as_ref(), !stdin.is_empty());
        let resp = match self.inner.client.post_exec(&query, stdin).await {
            Ok(r) => r,
            Err(e) => {
                // The server answers a process it cannot start (its dir is missing) with a 500.
                if e.kind() == ErrorKind::Internal
                    && let Some(dir) = cmd.workdir()
                    && let Some(why) = self.inner.client.dir_missing(dir).await
                {
                    return Err(EXEC.error(ErrorKind::NotFound, why));
                }
                return Err(e);
            }
        };
        parse_http_body(resp.bytes_stream()).await
    }
}

/// The ids that start an HTTP body's frames, never inside an output payload.
const FRAME_IDS: [u8; 3] = [STDOUT, STDERR, EXIT];

/// Reads a `POST /exec` body: frames with the WebSocket ids but no lengths. Each HTTP chunk is
/// taken as one frame (what the server writes and what every client assumes); the exit is a
/// `[0x03, code]` chunk. A body that ends without one (an exit merged into a data chunk
/// included), a frame with an unknown id, or a cut body is an `Err`, never a guessed exit.
///
/// HTTP does not keep chunk boundaries: an intermediary (or the reader) may merge or split
/// chunks. A payload holding a frame id (0x01 to 0x03) is therefore refused (`Protocol`): merged
/// frames always hold the next frame's id, and a split frame's second piece starts with a byte
/// of output, which is not an id unless the output itself holds one. The cost: output holding
/// those bytes is refused on this transport (unless a split lands right before one), never
/// attributed by guess. The WebSocket transport (the default) frames every message and has no
/// such gap; this one reports `binary_output: false`.
pub async fn parse_http_body<S>(mut chunks: S) -> Result<Output, Error>
where
    S: futures_util::Stream<Item = reqwest::Result<Bytes>> + Unpin,
{
    let (mut out, mut err) = (BytesMut::new(), BytesMut::new());
    let mut exit: Option<i32> = None;
    let mut exit_pending = false; // an `[0x03]` chunk whose code byte is in the next chunk
    let partial = |out: &BytesMut, err: &BytesMut| execseam_core::PartialOutput {
        stdout: out.clone().freeze(),
        stderr: err.clone().freeze(),
    };
    while let Some(chunk) = chunks.next().await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) => {
                return Err(lost(execseam_adapter_kit::text::error_chain(&e))
                    .with_partial(partial(&out, &err)));
            }
        };
        if chunk.is_empty() {
            continue;
        }
        if exit.is_some() {
            return Err(EXEC
                .protocol("data after the exit frame")
                .with_partial(partial(&out, &err)));
        }
        if exit_pending {
            if chunk.len() == 1 {
                exit = Some(i32::from(chunk[0]));
                exit_pending = false;
                continue;
            }
            return Err(EXEC
                .protocol("an exit frame without its code")
                .with_partial(partial(&out, &err)));
        }
        if matches!(chunk[0], STDOUT | STDERR) && chunk[1..].iter().any(|b| FRAME_IDS.contains(b)) {
            return Err(EXEC
                .protocol(
                    "a frame id (0x01 to 0x03) inside an output frame: chunks were merged on the \
                     way, or the output holds bytes this transport cannot carry (use the \
                     WebSocket transport)",
                )
                .with_partial(partial(&out, &err)));
        }
        match chunk[0] {
            STDOUT => {
                out.extend_from_slice(&chunk[1..]);
            }
            STDERR => {
                err.extend_from_slice(&chunk[1..]);
            }
            EXIT => match chunk.len() {
                2 => exit = Some(i32::from(chunk[1])),
                1 => exit_pending = true,
                n => {
                    return Err(EXEC
                        .protocol(format!("an exit frame of {n} bytes"))
                        .with_partial(partial(&out, &err)));
                }
            },
            other => {
                return Err(EXEC
                    .protocol(format!(
                        "a frame with unknown stream id 0x{other:02x} (chunk boundaries lost?)"
                    ))
                    .with_partial(partial(&out, &err)));
            }
        }
    }
    // No guessing: an exit merged into a data chunk (chunk boundaries lost on the way) is
    // indistinguishable from output that ends in 0x03 X.
    match exit {
        Some(code) => Ok(Output::new(out.freeze(), err.freeze(), Exit::Code(code))),
        None => Err(EXEC
            .protocol("the body ended without an exit frame")
            .with_partial(partial(&out, &err))),
    }
}

/// Drives one exec WebSocket: feeds stdin, forwards output, ends at the exit (closing the socket
/// itself: the server would keep it open ~5 s), and kills the command if the consumer goes away
/// first.
async fn drive(
    inner: Arc<Inner>,
    conn: Connected,
    stdin: Bytes,
    workdir: Option<String>,
    tx: mpsc::Sender<Result<Event, Error>>,
    mut kill_rx: mpsc::Receiver<oneshot::Sender<Result<(), Error>>>,
) {
    let config = inner.client.config_arc();
    let signal_capable = conn.signal_capable;
    let (wtx, writer, mut stream) = split(conn.ws, &config);
    // stdin, then the EOF frame (also without stdin, as sprites-go does).
    let feeder = {
        let wtx = wtx.clone();
        let chunk = config.ws_buffers.stdin_chunk.max(1);
        tokio::spawn(async move {
            for part in stdin.chunks(chunk) {
                let mut m = Vec::with_capacity(part.len() + 1);
                m.push(STDIN);
                m.extend_from_slice(part);
                if wtx.send(Message::binary(m)).await.is_err() {
                    return;
                }
            }
            let _ = wtx.send(Message::binary(vec![STDIN_EOF])).await;
        })
    };
    let mut session_id: Option<String> = None;
    let mut got_output = false;
    let mut last_rx = Instant::now();
    let mut ping =
        tokio::time::interval_at(Instant::now() + config.ping_interval, config.ping_interval);
    let close = || Message::close(Some(CloseCode::NORMAL_CLOSURE), "");
    let outcome: Result<Exit, Error> = loop {
        tokio::select! {
            // Frames first: a ping tick must never win over data already waiting.
            biased;
            msg = stream.next() => {
                last_rx = Instant::now();
                match msg {
                    Some(Ok(m)) if m.is_binary() => match wire::parse_binary(&Bytes::copy_from_slice(m.as_payload())) {
                        Ok(None) => {}
                        Ok(Some(frame)) => {
                            let event = match frame {
                                Frame::Exit(code) => break Ok(Exit::Code(code)),
                                Frame::Stdout(b) => Event::Stdout(b),
                                Frame::Stderr(b) => Event::Stderr(b),
                            };
                            got_output = true;
                            if tx.send(Ok(event)).await.is_err() {
                                let _ = kill(&inner.client, session_id.as_deref(), &wtx, signal_capable).await;
                                feeder.abort();
                                finish_writer(writer).await;
                                return;
                            }
                            // Waiting on a slow consumer is not silence on the socket.
                            last_rx = Instant::now();
                        }
                        Err(why) => break Err(EXEC.protocol(why)),
                    },
                    Some(Ok(m)) if m.is_text() => match wire::parse_text(m.as_text().unwrap_or_default()) {
                        Text::SessionInfo { session_id: id } => session_id = id,
                        Text::Exit(code) => match i32::try_from(code) {
                            Ok(c) if c >= 0 => break Ok(Exit::Code(c)),
                            _ => break Err(EXEC.protocol(format!("exit message with exit_code {code}"))),
                        },
                        Text::Other => {}
                    },
                    Some(Ok(m)) if m.is_close() => {
                        let why = m.as_close().map_or_else(|| "no close code".to_owned(), |(c, _)| format!("close code {}", u16::from(c)));
                        break Err(EXEC.protocol(format!("the server closed the socket before the exit frame ({why})")));
                    }
                    Some(Ok(_)) => {} // ping, pong
                    Some(Err(e)) => break Err(crate::error::ws_read(&e)),
                    None => break Err(lost("the socket ended")),
                }
            }
            Some(reply) = kill_rx.recv() => {
                // An awaited kill (EventStream::kill): answer it once the kill route has.
                let r = kill(&inner.client, session_id.as_deref(), &wtx, signal_capable).await;
                let _ = reply.send(r);
                feeder.abort();
                finish_writer(writer).await;
                return;
            }
            () = tx.closed() => {
                // The consumer dropped the stream (a deadline, a cancel): kill the command.
                let _ = kill(&inner.client, session_id.as_deref(), &wtx, signal_capable).await;
                feeder.abort();
                finish_writer(writer).await;
                return;
            }
            _ = ping.tick() => {
                if last_rx.elapsed() > config.pong_timeout {
                    break Err(lost(format!("no frame for {:?}", config.pong_timeout)));
                }
                let _ = wtx.send(Message::ping(Bytes::new())).await;
            }
        }
    };
    feeder.abort();
    // Close at once: the server lingers after the exit and would make every exec wait for it.
    let _ = wtx.send(close()).await;
    drop(wtx);
    let item = match outcome {
        Ok(exit) => Ok(Event::Exit(exit)),
        Err(e) => {
            // A command whose workdir does not exist is never started: the server drops the
            // socket. Ask the filesystem API whether that is what happened.
            let missing = match (&workdir, got_output) {
                (Some(dir), false) => inner.client.dir_missing(dir).await,
                _ => None,
            };
            match missing {
                Some(why) => Err(EXEC.error(ErrorKind::NotFound, why)),
                None => Err(e),
            }
        }
    };
    let _ = tx.send(item).await;
    finish_writer(writer).await;
}

/// The socket's reading half, and its writing half as a task fed by the returned sender: every
/// outgoing message goes through that one task, so reading never waits on it.
pub(crate) fn split(
    ws: crate::client::Ws,
    config: &SpritesConfig,
) -> (
    mpsc::Sender<Message>,
    tokio::task::JoinHandle<()>,
    futures_util::stream::SplitStream<crate::client::Ws>,
) {
    let (mut sink, stream) = ws.split();
    let (wtx, mut wrx) = mpsc::channel::<Message>(config.ws_buffers.outgoing.max(1));
    let writer = tokio::spawn(async move {
        while let Some(m) = wrx.recv().await {
            let close = m.is_close();
            if sink.send(m).await.is_err() || close {
                break;
            }
        }
        let _ = sink.flush().await;
    });
    (wtx, writer, stream)
}

/// Lets the writer send what is queued (the close frame) for a moment, then gives up on it.
pub(crate) async fn finish_writer(mut writer: tokio::task::JoinHandle<()>) {
    if tokio::time::timeout(Duration::from_secs(2), &mut writer)
        .await
        .is_err()
    {
        writer.abort();
    }
}

/// Kills the session: a signal message on the socket when the server takes them, then the kill
/// route with the id from `session_info` (which waits for the process to end), then a close.
/// Nothing here waits on the socket's writer.
pub(crate) async fn kill(
    client: &Client,
    session_id: Option<&str>,
    wtx: &mpsc::Sender<Message>,
    signal_capable: bool,
) -> Result<(), Error> {
    if signal_capable {
        let _ = wtx.try_send(Message::text(r#"{"type":"signal","signal":"KILL"}"#));
    }
    let result = match session_id {
        Some(id) => client.kill(id).await.inspect_err(|e| {
            tracing::debug!(provider = PROVIDER, session = id, error = %e, "could not kill the dropped command");
        }),
        None => {
            tracing::debug!(
                provider = PROVIDER,
                "dropped before session_info: the command is left to the server's max_run_after_disconnect"
            );
            Err(control("kill").error(ErrorKind::Unavailable, "the command was dropped before the server named its session: it cannot be killed"))
        }
    };
    let _ = wtx.try_send(Message::close(Some(CloseCode::NORMAL_CLOSURE), ""));
    result
}

impl Exec for SpritesExec {
    execseam_adapter_kit::accessors!(
        self => provider: PROVIDER,
        capabilities: SpritesExec::capabilities_of(self.config()),
    );

    fn exec(&self, command: Command) -> BoxFuture<'_, Result<Output, Error>> {
        exec_span!(self.provider(), "exec", command, |command| async move {
            tracing::debug!(provider = PROVIDER, tool = %command.tool(), program = %command.program(), argc = command.argv().len(), "exec");
            self.fits(&command)?;
            let env = self.env_for(&command).await?;
            let out = self.run(command, env).await?;
            tracing::debug!(provider = PROVIDER, exit = ?out.exit, "exited");
            Ok(out)
        })
    }

    /// The adapter kit's spool, in the sprite's `/tmp` (the attach replay of a session is a
    /// bounded scrollback without offsets, so the output and exit live in files); terminals on
    /// Sprites' own TTY exec over the WebSocket (`terminal.rs`), on the kit's recorder over the
    /// POST fallback (which has no TTY).
    fn processes(&self) -> Option<Box<dyn execseam_core::Processes + '_>> {
        crate::terminal::processes(self)
    }

    fn streaming(&self) -> Option<&dyn ExecStream> {
        match self.config().transport {
            Transport::WebSocket => Some(self),
            Transport::Http => None,
        }
    }
}

execseam_adapter_kit::exec_stream_by!(SpritesExec: open_stream);

impl SpritesExec {
    /// The stream of `command` (the WebSocket transport only).
    async fn open_stream(&self, command: Command) -> Result<EventStream, Error> {
        if self.config().transport == Transport::Http {
            return Err(Error::unsupported(
                "streaming needs the WebSocket transport (configured: HTTP POST)",
            )
            .with_provider(PROVIDER)
            .with_operation("exec_stream"));
        }
        tracing::debug!(provider = PROVIDER, tool = %command.tool(), program = %command.program(), argc = command.argv().len(), "exec_stream");
        self.fits(&command)?;
        let env = self.env_for(&command).await?;
        self.stream(command, env).await
    }
}
impl Sandbox for SpritesExec {
    execseam_adapter_kit::accessors!(
        self => id: self.inner.client.sprite(),
        ownership: &self.inner.ownership,
    );

    /// `DELETE /v1/sprites/{name}`.
    fn end(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(self.inner.client.delete_sprite())
    }
}
