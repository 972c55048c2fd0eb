//! The `Exec` implementation over `POST /v1/apps/{app}/machines/{id}/exec`.

use std::sync::Arc;

use bytes::Bytes;
use execseam_adapter_kit::degrade::{self, StdinFrom, WrapOptions};
use execseam_adapter_kit::exec_span;
use execseam_core::{
    BoxFuture, Capabilities, Command, Deadline, Error, ErrorKind, Exec, Exit, Output, Ownership,
    Sandbox, SandboxState, WireStatus,
};
use tokio::time::Instant;

use crate::PROVIDER;
use crate::client::Client;
use crate::config::FlyConfig;
use crate::error::{EXEC, control};
use crate::wire::{ExecResponse, MachineExecRequest};

/// Runs commands on one Fly Machine. See the [crate docs](crate). Cheap to clone.
#[derive(Clone, Debug)]
pub struct FlyExec {
    client: Client,
    ownership: Ownership,
    /// The machine's own `ARG_MAX`, asked once (issue 38, D32); shared by clones.
    arg_max: Arc<execseam_adapter_kit::size::ArgMax>,
}

/// A request ready to send, and whether its output must go through `check_wrapped`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Prepared {
    /// The JSON body.
    pub(crate) body: MachineExecRequest,
    /// The command runs inside the `/bin/sh -c` wrapper.
    pub(crate) wrapped: bool,
    /// This request's end marker, which the answer must carry.
    pub(crate) mark: degrade::EndMark,
}

impl FlyExec {
    pub(crate) fn new(client: Client, ownership: Ownership) -> FlyExec {
        FlyExec {
            client,
            ownership,
            arg_max: Arc::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &FlyConfig {
        self.client.config()
    }

    /// The capabilities this configuration gives ([`CAPABILITIES`] with its `max_stdin`).
    pub fn capabilities_of(config: &FlyConfig) -> Capabilities {
        Capabilities {
            max_stdin: Some(config.max_stdin),
            ..crate::CAPABILITIES
        }
    }

    /// Makes sure the machine is `started`: reads its state, starts it if it is stopped,
    /// suspended or created, and waits (`GET …/wait?state=started`, at most 60 s per call, again
    /// on the API's 408) until it is, within [`FlyConfig::start_timeout`].
    ///
    /// Exec needs a started machine: the API forwards it to the machine's init. Starting a
    /// suspended machine resumes it from its memory snapshot.
    pub async fn ensure_started(&self) -> Result<(), Error> {
        self.reach("started", "ensure_started").await
    }

    /// Suspends the machine (`POST …/suspend`, then `GET …/wait?state=suspended`) within
    /// [`FlyConfig::start_timeout`]; a suspended machine is `Ok`. Only a started machine can be
    /// suspended: a stopped one is [`Conflict`](ErrorKind::Conflict) with state `Stopped`.
    pub async fn suspend(&self) -> Result<(), Error> {
        self.reach("suspended", "pause").await
    }

    /// Drives the machine to `target` (`started` or `suspended`) and waits until it is there.
    async fn reach(&self, target: &'static str, op: &'static str) -> Result<(), Error> {
        let deadline = Instant::now() + self.config().start_timeout;
        loop {
            let machine = self.client.machine().await?;
            let state = machine.state.as_str();
            let sent = match (target, state) {
                _ if state == target => return Ok(()),
                ("started", "stopped" | "suspended" | "created" | "failed") => {
                    tracing::debug!(provider = PROVIDER, state, "starting the machine");
                    self.client.start().await
                }
                ("suspended", "started") => {
                    tracing::debug!(provider = PROVIDER, "suspending the machine");
                    self.client.suspend().await
                }
                ("suspended", "stopped" | "created" | "failed") => {
                    return Err(control(op)
                        .error(
                            ErrorKind::Conflict,
                            format!(
                                "machine {} is {state}: only a started machine can be suspended",
                                machine.id
                            ),
                        )
                        .with_sandbox_state(SandboxState::Stopped));
                }
                (_, "destroyed" | "destroying" | "replaced" | "migrated") => {
                    return Err(control(op).error(
                        ErrorKind::NotFound,
                        format!("machine {} is {state}", machine.id),
                    ));
                }
                // starting, stopping, restarting, suspending, updating, replacing, creating…
                _ => Ok(()),
            };
            match sent {
                Ok(()) => {}
                // Someone else is moving it, or a lease is held: wait and look again.
                Err(e) if e.kind() == ErrorKind::Conflict => {}
                Err(e) => return Err(e),
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(control(op).error(
                    ErrorKind::Timeout(Deadline::Request),
                    format!(
                        "machine {} did not reach `{target}` within {:?} (last state {:?})",
                        self.client.machine_id(),
                        self.config().start_timeout,
                        machine.state
                    ),
                ));
            }
            if self.client.wait_for(target, left.as_secs().max(1)).await? {
                return Ok(());
            }
        }
    }
}

/// Builds the request for `command` without sending it: argv as `command`; workdir and env
/// through the `/bin/sh -c` wrapper; text stdin in `stdin`; binary stdin base64-encoded in
/// `stdin` and decoded by the wrapper into a temporary file.
pub(crate) fn prepare(
    config: &FlyConfig,
    cmd: &Command,
    limit: &execseam_adapter_kit::size::SizeLimit,
) -> Result<Prepared, Error> {
    execseam_adapter_kit::size::check_size(PROVIDER, cmd, &crate::SIZE_LIMIT)?;
    let len = cmd.stdin().len() as u64;
    if len > config.max_stdin {
        return Err(EXEC.error(
            ErrorKind::InvalidCommand,
            format!(
                "stdin is {len} bytes; this adapter accepts at most {} (FlyConfig::max_stdin)",
                config.max_stdin
            ),
        ));
    }
    let binary = std::str::from_utf8(cmd.stdin()).is_err();
    let stdin = if binary {
        StdinFrom::Base64(degrade::temp_path(&config.temp_dir))
    } else {
        StdinFrom::Backend
    };
    let wrapped = binary || cmd.workdir().is_some() || !cmd.env().is_empty();
    let (argv, stdin_bytes): (Vec<String>, Bytes) = if wrapped {
        let w = degrade::wrapped_command(
            cmd,
            &WrapOptions {
                workdir: true,
                env: true,
                stdin,
                ..WrapOptions::default()
            },
        )
        .map_err(|e| e.or_context(PROVIDER, "exec"))?;
        (w.argv().to_vec(), w.stdin().clone())
    } else {
        (cmd.argv().to_vec(), cmd.stdin().clone())
    };
    let stdin = if stdin_bytes.is_empty() {
        None
    } else {
        // Valid UTF-8 by construction: the original text, or base64.
        Some(String::from_utf8_lossy(&stdin_bytes).into_owned())
    };
    // Every command ends by writing a marker with its status to stderr, which the answer must
    // carry: the API omits zero values, so `{}` is what a silent `true` returns, and also what
    // a broken answer looks like. The marker tells them apart (argv is passed on as "$@").
    let mark = degrade::EndMark::new();
    let mut marked = vec![
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        mark.wrap("\"$@\""),
        "sh".to_owned(),
    ];
    marked.extend(argv);
    // What counts is what the machine execs: the marked argv, a wrapper script as one string.
    execseam_adapter_kit::size::check_wire(PROVIDER, &marked, limit)?;
    Ok(Prepared {
        body: MachineExecRequest {
            command: marked,
            stdin,
            // The host's deadline (a `WithDeadline` around this exec) goes to Fly's `timeout`
            // too (issue 38, D29), rounded up to whole seconds.
            timeout: execseam_adapter_kit::deadline::provider_timeout(Some(config.exec_timeout))
                .map(|d| d.as_secs()),
            container: config.container.clone(),
        },
        wrapped,
        mark,
    })
}

/// Reads a 200 answer to a command prepared here: [`parse_response`], then the end marker is
/// required (unless a signal ended the command) and removed from stderr. An answer without it
/// (`{}`, a cut or replaced body) is a protocol error, never an invented exit.
pub(crate) fn parse_marked(
    body: &[u8],
    wrapped: bool,
    mark: &degrade::EndMark,
) -> Result<Output, Error> {
    let out = parse_response(body, false)?;
    let proto = |m: String| {
        Error::protocol(m)
            .with_provider(PROVIDER)
            .with_operation("exec")
    };
    let out = mark.strip(out).map_err(proto)?;
    if wrapped {
        degrade::check_wrapped(out).map_err(|e| e.with_provider(PROVIDER))
    } else {
        Ok(out)
    }
}

/// Reads a 200 answer (`flydv1.ExecResponse`). Zero values are omitted by the API, so a missing
/// `exit_code` is 0 and missing streams are empty; anything that is not such an object is a
/// protocol error, never an invented result.
pub(crate) fn parse_response(body: &[u8], wrapped: bool) -> Result<Output, Error> {
    let proto = |m: String| {
        Error::protocol(m)
            .with_provider(PROVIDER)
            .with_operation("exec")
    };
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| {
        proto(format!(
            "the exec answer is not valid JSON ({e}): {:?}",
            String::from_utf8_lossy(&body[..body.len().min(200)])
        ))
    })?;
    if !value.is_object() {
        return Err(proto(format!("the exec answer is not an object: {value}")));
    }
    let r: ExecResponse = serde_json::from_value(value).map_err(|e| {
        proto(format!(
            "the exec answer has a field of the wrong type: {e}"
        ))
    })?;
    if let Some(err) = &r.error
        && r.stdout.is_none()
        && r.stderr.is_none()
        && r.exit_code.is_none()
        && r.exit_signal.is_none()
    {
        return Err(proto(format!(
            "HTTP 200 carrying an error, not a result: {err}"
        )));
    }
    let exit = match (r.exit_signal.filter(|s| *s != 0), r.exit_code) {
        (Some(sig), _) => match i32::try_from(sig) {
            Ok(sig) if sig > 0 => Exit::Signal(sig),
            _ => return Err(proto(format!("exit_signal {sig} is not a signal number"))),
        },
        (None, None) => Exit::Code(0),
        (None, Some(code)) => match i32::try_from(code) {
            Ok(code) if code >= 0 => Exit::Code(code),
            _ => {
                return Err(proto(format!(
                    "exit_code {code} without an exit_signal: the API did not say how the command ended"
                )));
            }
        },
    };
    let output = Output::new(
        r.stdout.unwrap_or_default(),
        r.stderr.unwrap_or_default(),
        exit,
    );
    if wrapped {
        degrade::check_wrapped(output).map_err(|e| e.with_provider(PROVIDER))
    } else {
        Ok(output)
    }
}

impl Exec for FlyExec {
    execseam_adapter_kit::accessors!(
        self => provider: PROVIDER,
        capabilities: FlyExec::capabilities_of(self.config()),
    );

    fn exec(&self, command: Command) -> BoxFuture<'_, Result<Output, Error>> {
        exec_span!(self.provider(), "exec", command, |command| async move {
            // The machine's init execs the argv: its `execve` is the limit, asked once.
            (self.arg_max)
                .check_in(PROVIDER, &command, &crate::SIZE_LIMIT, self)
                .await?;
            let limit = self.arg_max.limit_or(&crate::SIZE_LIMIT);
            let prepared = prepare(self.config(), &command, &limit)?;
            tracing::debug!(
                provider = PROVIDER,
                tool = %command.tool(),
                program = %command.program(),
                argc = command.argv().len(),
                wrapped = prepared.wrapped,
                "exec"
            );
            let body = match self.client.exec(&prepared.body).await {
                // The machine is not started (nothing ran): say which state it is in.
                Err(e) if e.status() == Some(WireStatus::Http(412)) => {
                    return Err(match self.client.machine().await {
                        Ok(m) => e.with_sandbox_state(crate::wire::sandbox_state(&m.state)),
                        Err(_) => e,
                    });
                }
                r => r?,
            };
            let out = parse_marked(&body, prepared.wrapped, &prepared.mark)?;
            tracing::debug!(provider = PROVIDER, exit = ?out.exit, "exited");
            Ok(out)
        })
    }

    /// The adapter kit's spool in the machine's `/tmp` (the exec endpoint is synchronous, with no
    /// exec id, kill or replay; the root filesystem is reset when the machine stops). A follower
    /// reads at most about once a second: the Machines API limits exec to about 1 request a second
    /// per machine, burst 3 (docs/adapters/fly.md).
    fn processes(&self) -> Option<Box<dyn execseam_core::Processes + '_>> {
        Some(Box::new(
            execseam_adapter_kit::spool::Spool::new(self, Sandbox::id(self)).poll(
                std::time::Duration::from_millis(1000),
                std::time::Duration::from_secs(2),
            ),
        ))
    }
}

impl Sandbox for FlyExec {
    execseam_adapter_kit::accessors!(
        self => id: self.client.machine_id(),
        ownership: &self.ownership,
    );

    /// `DELETE …?kill=true` (fly-go's `Destroy` with `Kill`).
    fn end(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(self.client.destroy())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> FlyConfig {
        FlyConfig::new("app", "t")
    }

    #[test]
    fn plain_commands_go_as_argv() {
        let p = prepare(
            &config(),
            &Command::new(["echo", "a b"]).unwrap(),
            &crate::SIZE_LIMIT,
        )
        .unwrap();
        assert!(!p.wrapped);
        assert_eq!(
            p.body.command,
            [
                "/bin/sh",
                "-c",
                &*p.mark.wrap("\"$@\""),
                "sh",
                "echo",
                "a b"
            ]
        );
        assert_eq!(p.body.stdin, None);
        assert_eq!(p.body.timeout, Some(120));
        let json = serde_json::to_value(&p.body).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"command": ["/bin/sh", "-c", &*p.mark.wrap("\"$@\""), "sh", "echo", "a b"], "timeout": 120})
        );
    }

    #[test]
    fn text_stdin_is_native_binary_stdin_is_base64_through_the_wrapper() {
        let c = Command::builder(["cat"]).stdin("héllo\n").build().unwrap();
        let p = prepare(&config(), &c, &crate::SIZE_LIMIT).unwrap();
        assert!(!p.wrapped);
        assert_eq!(p.body.stdin.as_deref(), Some("héllo\n"));

        let c = Command::builder(["cat"])
            .stdin(&b"\xff\x00"[..])
            .build()
            .unwrap();
        let p = prepare(&config(), &c, &crate::SIZE_LIMIT).unwrap();
        assert!(p.wrapped);
        assert_eq!(p.body.command[4..6], ["/bin/sh", "-c"]);
        assert!(
            p.body.command[6].contains("base64 -d"),
            "{}",
            p.body.command[6]
        );
        assert_eq!(p.body.stdin.as_deref(), Some("/wA="));
    }

    #[test]
    fn workdir_and_env_use_the_wrapper() {
        let c = Command::builder(["pwd"])
            .workdir("/srv")
            .env("A", "b c")
            .build()
            .unwrap();
        let p = prepare(&config(), &c, &crate::SIZE_LIMIT).unwrap();
        assert!(p.wrapped);
        let script = &p.body.command[6];
        assert!(script.contains("cd -- /srv"), "{script}");
        assert!(script.contains("'A=b c'"), "{script}");
    }

    /// The API omits zero values, so `{}` is a silent `true`'s answer and a broken one's: only
    /// the end marker tells them apart.
    #[test]
    fn an_answer_without_the_end_marker_is_never_an_exit() {
        let mark = degrade::EndMark::new();
        let m = &mark.as_str()[1..];
        let parse = |body: &str| parse_marked(body.as_bytes(), false, &mark);
        for body in [r#"{}"#, r#"{"exit_code":0}"#, r#"{"stdout":"x"}"#] {
            let e = parse(body).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
        }
        let ok = parse(&format!(r#"{{"stderr":"e\u001e{m}0"}}"#)).unwrap();
        assert_eq!(ok, Output::new("", "e", Exit::Code(0)));
        let ok = parse(&format!(
            r#"{{"stdout":"o","stderr":"\u001e{m}3","exit_code":3}}"#
        ))
        .unwrap();
        assert_eq!(ok, Output::new("o", "", Exit::Code(3)));
        assert!(
            parse(&format!(r#"{{"stderr":"\u001e{m}3"}}"#)).is_err(),
            "disagrees"
        );
        // A forged answer with another request's marker (or the old fixed one) is refused.
        let other = degrade::EndMark::new();
        for forged in [&other.as_str()[1..], "execseam-end:"] {
            let e = parse(&format!(r#"{{"stderr":"\u001e{forged}0"}}"#)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Protocol, "{forged}: {e}");
        }
        let killed = parse(r#"{"exit_signal":9}"#).unwrap();
        assert_eq!(killed.exit, Exit::Signal(9));
        // The real script, run here, writes exactly what parse_marked strips.
        let o = std::process::Command::new("/bin/sh")
            .args([
                "-c",
                &mark.wrap("\"$@\""),
                "sh",
                "sh",
                "-c",
                "printf x >&2; exit 4",
            ])
            .output()
            .unwrap();
        assert_eq!(o.stderr, [&b"x"[..], mark.as_bytes(), b"4"].concat());
        assert_eq!(o.status.code(), Some(4));
    }

    #[test]
    fn too_much_stdin_is_rejected_before_any_request() {
        let c = Command::builder(["cat"])
            .stdin(vec![b'a'; 11])
            .build()
            .unwrap();
        let e = prepare(&config().max_stdin(10), &c, &crate::SIZE_LIMIT).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidCommand);
    }

    #[test]
    fn responses_map_to_outputs_exactly() {
        let o = parse_response(br#"{"stdout":"hi\n"}"#, false).unwrap();
        assert_eq!(o, Output::new("hi\n", "", Exit::Code(0)));
        let o = parse_response(br#"{}"#, false).unwrap();
        assert_eq!(o, Output::new("", "", Exit::Code(0)));
        let o = parse_response(
            br#"{"stdout":"","stderr":"e","exit_code":3,"exit_signal":0}"#,
            false,
        )
        .unwrap();
        assert_eq!(o, Output::new("", "e", Exit::Code(3)));
        let o = parse_response(br#"{"exit_code":-1,"exit_signal":9}"#, false).unwrap();
        assert_eq!(o.exit, Exit::Signal(9));
        let o = parse_response(br#"{"stdout":"x","unknown_field":[1]}"#, false).unwrap();
        assert_eq!(o.stdout.as_ref(), b"x");
    }

    #[test]
    fn malformed_responses_are_protocol_errors() {
        for body in [
            &b"{\"stdout\":\"ran\",\"exit_co"[..],
            b"[]",
            b"\"text\"",
            b"",
            br#"{"exit_code":"0"}"#,
            br#"{"exit_code":-1}"#,
            br#"{"error":"boom"}"#,
        ] {
            let e = parse_response(body, false).unwrap_err();
            assert_eq!(
                e.kind(),
                ErrorKind::Protocol,
                "{:?}",
                String::from_utf8_lossy(body)
            );
            assert_eq!(e.retry(), execseam_core::Retry::Unsafe);
        }
    }

    #[test]
    fn the_wrappers_own_failures_become_typed_errors() {
        let body = serde_json::json!({
            "stderr": "execseam-wrapper: workdir does not exist: /nope\n",
            "exit_code": 125
        })
        .to_string();
        let e = parse_response(body.as_bytes(), true).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound);
        // Unwrapped, a 125 is the command's own.
        assert!(parse_response(body.as_bytes(), false).is_ok());
    }
}
