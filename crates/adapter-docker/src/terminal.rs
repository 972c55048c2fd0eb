//! Terminals: the engine's own `Tty` exec (Engine API `POST /containers/{id}/exec` with
//! `"Tty": true`, `POST /exec/{id}/start` attached with `"Tty": true`, `POST
//! /exec/{id}/resize?h=&w=`, `GET /exec/{id}/json` for the `ExitCode`), held by this client
//! through the kit's [`Attached`](execseam_adapter_kit::attached) terminals. The engine has no
//! exec attach, so a terminal lives with the sandbox handle that started it (podman KILLs an
//! attached exec when its client goes; Docker leaves it running unattached): replay from any
//! offset within that handle, `NotFound` elsewhere. No `script(1)` is needed in the image.

use bollard::exec::{CreateExecOptions, ResizeExecOptions, StartExecOptions, StartExecResults};
use bollard::{Docker, container::LogOutput};
use execseam_adapter_kit::attached::{OpenTerminal, Opened, TerminalControl};
use execseam_adapter_kit::degrade::EXEC_TAG_VAR;
use execseam_core::{BoxFuture, Command, Error, ErrorKind, Exit, Retry, TerminalSize};
use futures_util::StreamExt;
use std::time::Duration;

use crate::error::{adapter, engine};
use crate::exec::{DockerExec, Target};
use execseam_adapter_kit::retry::Stage;

/// The engine's answer to resize and inspect of one `Tty` exec.
struct EngineTerminal {
    docker: Docker,
    exec_id: String,
    timeout: Duration,
}

impl TerminalControl for EngineTerminal {
    fn resize(&self, size: TerminalSize) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            let options = ResizeExecOptions {
                height: size.rows,
                width: size.cols,
            };
            crate::client::bounded(
                self.timeout,
                self.docker.resize_exec(&self.exec_id, options),
            )
            .await
            .map_err(|e| engine("resize exec", Stage::Before, e))
        })
    }

    /// The exit once the output ended: the engine may still say `Running` for a moment after
    /// the stream closed; a status that never comes is a protocol error, never an exit.
    fn exit(&self) -> BoxFuture<'_, Result<Exit, Error>> {
        Box::pin(async move {
            for _ in 0..100 {
                let inspect =
                    crate::client::bounded(self.timeout, self.docker.inspect_exec(&self.exec_id))
                        .await
                        .map_err(|e| engine("inspect exec", Stage::After, e))?;
                if inspect.running != Some(true)
                    && let Some(code) = inspect.exit_code
                {
                    return Ok(Exit::Code(code as i32));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(adapter(
                ErrorKind::Protocol,
                Retry::Unsafe,
                "inspect exec",
                "the terminal's output ended but the engine gives no exit code",
            ))
        })
    }
}

impl OpenTerminal for DockerExec {
    fn open(&self, command: Command, size: TerminalSize) -> BoxFuture<'_, Result<Opened, Error>> {
        Box::pin(async move {
            let Target::Container(container) = &self.inner.target else {
                return Err(adapter(
                    ErrorKind::Unsupported,
                    Retry::Never,
                    "terminal",
                    "per-call mode has no process handles",
                ));
            };
            let config = &self.inner.config;
            let docker = self.inner.client.get().await?.clone();
            // Env values never go into an engine request (see exec.rs): they go to a file by
            // an ordinary exec (whose stdin carries them), which the terminal's shell reads and
            // removes. `TERM` (not secret) is the exec's own unless the command sets one.
            let entries = config.env_for(command.env());
            let mut env = vec![format!(
                "{EXEC_TAG_VAR}={}",
                execseam_adapter_kit::id::random_id(32)
            )];
            if !entries.contains_key("TERM") {
                env.push("TERM=xterm-256color".to_owned());
            }
            let mut argv = command.argv().to_vec();
            if !entries.is_empty() {
                let mut wrapped = execseam_adapter_kit::attached::env_through_file(
                    self,
                    &entries,
                    &config.temp_dir,
                )
                .await?;
                wrapped.append(&mut argv);
                argv = wrapped;
            }
            let options = CreateExecOptions {
                attach_stdin: Some(true),
                attach_stdout: Some(true),
                attach_stderr: Some(true),
                tty: Some(true),
                env: Some(env),
                cmd: Some(argv),
                user: config.user.clone(),
                working_dir: command
                    .workdir()
                    .or(config.default_workdir())
                    .map(str::to_owned),
                ..Default::default()
            };
            let timeout = config.request_timeout;
            let created = crate::client::bounded(timeout, docker.create_exec(container, options))
                .await
                .map_err(|e| engine("create exec", Stage::Before, e))?;
            let started = crate::client::bounded(
                timeout,
                docker.start_exec(
                    &created.id,
                    Some(StartExecOptions {
                        detach: false,
                        tty: true,
                        output_capacity: None,
                    }),
                ),
            )
            .await
            .map_err(|e| engine("start exec", Stage::After, e))?;
            let StartExecResults::Attached { output, input } = started else {
                return Err(adapter(
                    ErrorKind::Protocol,
                    Retry::Unsafe,
                    "start exec",
                    "the engine detached an exec that was started attached",
                ));
            };
            let control = EngineTerminal {
                docker,
                exec_id: created.id,
                timeout,
            };
            // The size is set inside, by the kit's wrapper (`stty`): a resize sent while podman
            // is still starting the exec session can race its start.
            let _ = size;
            let output = output.map(|frame| match frame {
                Ok(
                    LogOutput::Console { message }
                    | LogOutput::StdOut { message }
                    | LogOutput::StdErr { message },
                ) => Ok(message),
                Ok(LogOutput::StdIn { .. }) => Ok(bytes::Bytes::new()),
                Err(e) => Err(engine("terminal output", Stage::After, e)),
            });
            Ok(Opened {
                output: Box::pin(output),
                input,
                control: Box::new(control),
            })
        })
    }
}
