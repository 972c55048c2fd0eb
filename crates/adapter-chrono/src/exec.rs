//! The `Exec` implementation: a `Command` becomes a `bash` program for `POST /execute` (or for
//! the durable `/executions` contract).

use execseam_adapter_kit::exec_span;
use execseam_adapter_kit::id;
use execseam_adapter_kit::size;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use execseam_adapter_kit::degrade::{self, StdinFrom, WRAPPER_MARK, WRAPPER_STATUS, WrapOptions};
use execseam_core::{
    BoxFuture, Capabilities, Command, Deadline, Error, ErrorKind, Exec, Exit, Output, Ownership,
    Retry, Sandbox,
};
use execseam_tools_protocol::code::CodeRequest;

use crate::config::ChronoConfig;
use crate::durable::{DurableClient, Operation, Progress, Terminal};
use crate::error::{EXECUTE, RESULT, STATUS, SUBMIT, from_status, protocol};
use crate::http::{Exchange, HttpTransport, Method};
use crate::wire::{
    self, Completion, ErrorBody, ExecOutput, ExecuteRequest, InputFile, Language, RetrievedFile,
    codes,
};
use crate::{CAPABILITIES, PROVIDER};
use execseam_adapter_kit::retry::Call;

/// A handle on Chrono Sandbox: runs commands (each in a fresh sandbox of the service). See the
/// [crate docs](crate).
#[derive(Clone, Debug)]
pub struct ChronoExec {
    http: HttpTransport,
    durable: DurableClient,
    id: String,
    ownership: Arc<Ownership>,
    local: Arc<crate::process::Local>,
}

/// A request ready to send, and whether its output must go through `check_wrapped`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prepared {
    /// The body.
    pub request: ExecuteRequest,
    /// The program runs the degrade wrapper (workdir, env or stdin), whose own failures are
    /// turned back into typed errors.
    pub wrapped: bool,
    /// The program ends by writing this request's end marker ([`degrade::EndMark`]), which the
    /// answer must carry: a forged or replaced success (`exit_code: 0`, empty output) lacks it,
    /// and cannot copy it from another answer (issue 38, D22). The `code` tool's native
    /// programs are sent exactly and carry none.
    pub mark: Option<degrade::EndMark>,
}

impl ChronoExec {
    /// An adapter with this configuration (validated; no request is made).
    pub fn new(config: ChronoConfig) -> Result<ChronoExec, Error> {
        config.validate()?;
        let policy = config.policy;
        let http = HttpTransport::new(Arc::new(config))?;
        let durable = DurableClient::with_transport(Arc::new(http.clone()), policy);
        let local = Arc::new(crate::process::Local::new(http.config()));
        Ok(ChronoExec {
            local,
            http,
            durable,
            id: format!("chrono-{}", id::random_id(16)),
            ownership: Arc::new(Ownership::created()),
        })
    }

    /// An adapter configured from the environment ([`ChronoConfig::from_env`]).
    pub fn from_env() -> Result<ChronoExec, Error> {
        ChronoExec::new(ChronoConfig::from_env()?)
    }

    /// The configuration.
    pub fn config(&self) -> &ChronoConfig {
        self.http.config()
    }

    /// The durable client this adapter uses (same root, tokens and policy).
    pub fn durable_client(&self) -> &DurableClient {
        &self.durable
    }

    /// The capabilities of a configuration.
    pub fn capabilities_of(config: &ChronoConfig) -> Capabilities {
        Capabilities {
            // Through `/executions` a dropped exec is cancelled (`POST …/cancel`).
            remote_kill: config.durable,
            max_stdin: Some(config.max_stdin),
            ..CAPABILITIES
        }
    }

    /// Builds the request for `command` without sending it.
    pub fn prepare(&self, command: &Command) -> Result<Prepared, Error> {
        prepare(self.config(), command)
    }

    /// Runs a program through `POST /execute` exactly as given (the `code` tool's native path).
    /// A failed dependency install is `Err` with code `DEPENDENCY_INSTALL_FAILED` (the program
    /// did not run); [`run`](Self::run) keeps the installer's output and the retrieved files.
    pub async fn execute(&self, request: &ExecuteRequest) -> Result<Output, Error> {
        match self.run(request).await? {
            Executed::Ran { output, .. } => Ok(output),
            Executed::DependenciesFailed { message, .. } => Err(dependencies_failed(&message)),
        }
    }

    /// Runs a request with every field of Chrono's contract (dependencies, input and retrieved
    /// files, env, network) through `POST /execute`: the program's run with the files
    /// `retrieve_files` named, or a dependency install that failed, with its output, so the
    /// one is never mistaken for the other.
    pub async fn run(&self, request: &ExecuteRequest) -> Result<Executed, Error> {
        request
            .validate()
            .map_err(|m| EXECUTE.error(ErrorKind::InvalidCommand, m))?;
        executed(self.send(request).await?, EXECUTE)
    }

    async fn send_execute(
        &self,
        request: &ExecuteRequest,
        wrapped: bool,
        mark: Option<&degrade::EndMark>,
    ) -> Result<Output, Error> {
        match self.send(request).await? {
            Completion::Ran { error: Some(e), .. }
                if e.code == codes::DEPENDENCY_INSTALL_FAILED =>
            {
                Err(dependencies_failed(
                    e.message.as_deref().unwrap_or_default(),
                ))
            }
            Completion::Ran { output, .. } => output_of(output, wrapped, mark, EXECUTE),
            Completion::NoOutput { error, .. } => Err(no_output_error(error, EXECUTE)),
        }
    }

    async fn send(&self, request: &ExecuteRequest) -> Result<Completion, Error> {
        let secs = request.timeout_secs.unwrap_or(wire::DEFAULT_TIMEOUT_SECS);
        let ex = Exchange {
            method: Method::Post,
            path: wire::path::EXECUTE.to_owned(),
            headers: Vec::new(),
            body: Some(request.to_json()),
            timeout: Duration::from_secs(u64::from(secs)) + self.config().request_slack,
            op: EXECUTE,
        };
        let a = self.http.exchange(ex).await?;
        if a.status != 200 {
            return Err(from_status(a.status, a.retry_delay(), &a.body, EXECUTE));
        }
        wire::parse_completion(&a.body)
            .map_err(|m| protocol(EXECUTE, format!("a malformed /execute answer: {m}")))
    }

    async fn run_durable(
        &self,
        request: ExecuteRequest,
        wrapped: bool,
        mark: Option<&degrade::EndMark>,
    ) -> Result<Output, Error> {
        // A key per exec attempt: retries inside this attempt (a lost submit response) converge
        // on one operation; a new exec is a new operation.
        let nonce = id::random_id(32);
        let hash = request.payload_hash();
        let key =
            wire::operation_key(&[b"execseam-chrono/exec", nonce.as_bytes(), hash.as_bytes()]);
        let mut op = Operation::new(key, request)?;
        let mut guard = CancelOnDrop {
            client: self.durable.clone(),
            id: Arc::new(Mutex::new(None)),
        };
        let terminal = loop {
            let step = self.durable.step(&mut op).await;
            *guard.id.lock().expect("id") = op.operation_id.clone();
            match step {
                Ok(Progress::Done(t)) => break t,
                Ok(Progress::Wait(d)) => {
                    if !d.is_zero() {
                        tokio::time::sleep(d).await;
                    }
                }
                Err(e) => {
                    guard.disarm();
                    return Err(durable_exec_error(e, op.operation_id.is_some()));
                }
            }
        };
        guard.disarm();
        match terminal {
            Terminal::Ran { error: Some(e), .. } if e.code == codes::DEPENDENCY_INSTALL_FAILED => {
                Err(dependencies_failed(e.message.as_deref().unwrap_or_default()))
            }
            Terminal::Ran { output, .. } => output_of(output, wrapped, mark, RESULT),
            Terminal::Failed { error, .. } => Err(no_output_error(error, RESULT)),
            Terminal::Cancelled { operation_id, .. } => Err(STATUS.error(ErrorKind::Cancelled, format!("operation {operation_id} was cancelled"))
            .with_retry(Retry::Unsafe)
            .with_code(codes::EXECUTION_CANCELLED)),
            Terminal::OutcomeUncertain { operation_id, .. } => Err(STATUS.error(ErrorKind::Internal, format!("the service cannot tell whether operation {operation_id} ran"))
            .with_retry(Retry::Unsafe)
            .with_code(codes::OUTCOME_UNCERTAIN)),
            Terminal::Expired { operation_id } => Err(STATUS.error(ErrorKind::NotFound, format!("operation {operation_id} expired"))
            .with_retry(Retry::Unsafe)
            .with_code(codes::OPERATION_EXPIRED)),
            Terminal::NotFound { operation_id } => Err(STATUS.error(ErrorKind::NotFound, format!("operation {operation_id} is unknown to the service (restarted, or another owner's)"))
            .with_retry(Retry::Unsafe)
            .with_code(codes::OPERATION_NOT_FOUND)),
            Terminal::KeyReused => Err(SUBMIT.error(ErrorKind::Conflict, "the idempotency key was used with another payload")
            .with_retry(Retry::Never)
            .with_code(codes::IDEMPOTENCY_KEY_REUSE)),
        }
    }
}

/// What [`ChronoExec::run`] got back.
#[derive(Debug)]
#[non_exhaustive]
pub enum Executed {
    /// The program ran (any exit code), with the files `retrieve_files` named (empty unless
    /// `output_type` was `file`).
    Ran {
        /// stdout, stderr and the exit code.
        output: Output,
        /// `output.files`, in the service's order.
        files: Vec<RetrievedFile>,
    },
    /// The dependencies did not install (`DEPENDENCY_INSTALL_FAILED`): the program did not run.
    DependenciesFailed {
        /// The installer's output and exit code.
        log: Output,
        /// The service's message.
        message: String,
    },
}

fn executed(c: Completion, op: Call) -> Result<Executed, Error> {
    match c {
        Completion::Ran { output, error, .. } => {
            let files = output.files.clone().unwrap_or_default();
            let out = output_of(output, false, None, op)?;
            Ok(match error {
                Some(e) if e.code == codes::DEPENDENCY_INSTALL_FAILED => {
                    Executed::DependenciesFailed {
                        log: out,
                        message: e.message.unwrap_or(e.code),
                    }
                }
                _ => Executed::Ran { output: out, files },
            })
        }
        Completion::NoOutput { error, .. } => Err(no_output_error(error, op)),
    }
}

/// A failed dependency install where only an `Output` can be answered: the installer's exit is
/// not the program's, so it is an error (never retried: the same request fails the same way).
fn dependencies_failed(message: &str) -> Error {
    EXECUTE
        .error(ErrorKind::InvalidCommand, message.to_owned())
        .with_retry(Retry::Never)
        .with_code(codes::DEPENDENCY_INSTALL_FAILED)
}

/// Cancels the operation (in the background) if the exec is dropped before it is terminal.
struct CancelOnDrop {
    client: DurableClient,
    id: Arc<Mutex<Option<String>>>,
}

impl CancelOnDrop {
    fn disarm(&mut self) {
        self.id.lock().expect("id").take();
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.id.lock().expect("id").take() else {
            return;
        };
        let client = self.client.clone();
        execseam_adapter_kit::reaper::spawn(PROVIDER, "cancel", async move {
            client.cancel(&id).await.map(|_| ())
        });
    }
}

/// Errors of the durable loop, as an exec reports them: once a submit may have reached the
/// service, the program may have run, so nothing is safe to retry with a *new* key.
fn durable_exec_error(e: Error, submitted: bool) -> Error {
    let never_reached = !submitted
        && e.status().is_none()
        && e.kind() == ErrorKind::Unavailable
        && e.message()
            .starts_with(execseam_adapter_kit::retry::NoAnswer::Connect.describe());
    if never_reached || e.retry() == Retry::Never {
        e
    } else {
        e.with_retry(Retry::Unsafe)
    }
}

pub(crate) fn no_output_error(e: ErrorBody, op: Call) -> Error {
    let msg = match &e.message {
        Some(m) => format!("{}: {m}", e.code),
        None => e.code.clone(),
    };
    let kind = match e.code.as_str() {
        codes::SANDBOX_TIMEOUT => ErrorKind::Timeout(Deadline::Command),
        codes::EXECUTION_CANCELLED => ErrorKind::Cancelled,
        _ => ErrorKind::Internal,
    };
    op.error(kind, msg)
        .with_retry(Retry::Unsafe)
        .with_code(e.code)
}

/// Maps a validated output. Exit codes are int32: a negative one is read as a signal (`-9`), a
/// value that is neither is malformed. A `marked` program's answer must carry its end marker.
pub(crate) fn output_of(
    o: ExecOutput,
    wrapped: bool,
    mark: Option<&degrade::EndMark>,
    op: Call,
) -> Result<Output, Error> {
    let exit = match o.exit_code {
        c if c >= 0 => Exit::Code(c),
        c if (-64..=-1).contains(&c) => Exit::Signal(-c),
        c => {
            return Err(protocol(
                op,
                format!("exit_code {c} is neither a code nor a signal"),
            ));
        }
    };
    let mut out = Output::new(o.stdout, o.stderr, exit);
    if let Some(mark) = mark {
        out = mark.strip(out).map_err(|m| protocol(op, m))?;
    }
    if wrapped {
        degrade::check_wrapped(out).map_err(|e| e.or_context(PROVIDER, op.operation))
    } else {
        Ok(out)
    }
}

/// The stdin file's name, relative to the program's working directory (`input_files`).
fn stdin_name() -> String {
    format!(".execseam-stdin-{}", id::random_id(16))
}

/// The parts of a bash request that every Chrono program shares: the command as one shell
/// program (the degrade wrapper when it has a workdir or env), and its stdin as the uploaded
/// file `name` (opened, then removed; a missing file is the wrapper's failure), else EOF.
pub(crate) struct StdinParts {
    /// The command as one shell program.
    pub(crate) program: String,
    /// The script's first line: stdin from the uploaded file, else `/dev/null`.
    pub(crate) redirect: String,
    /// The stdin file, when there is stdin.
    pub(crate) input_files: Vec<InputFile>,
    /// The program runs the degrade wrapper or reads the stdin file (see [`Prepared::wrapped`]).
    pub(crate) wrapped: bool,
}

/// [`StdinParts`] for `cmd`, its stdin checked against `config.max_stdin` first (typed as
/// `call`'s invalid command; a wrapper refusal is in `context`).
pub(crate) fn stdin_parts(
    config: &ChronoConfig,
    cmd: &Command,
    (call, context): (&Call, &'static str),
    name: String,
) -> Result<StdinParts, Error> {
    let len = cmd.stdin().len() as u64;
    if len > config.max_stdin {
        return Err(call.error(
            ErrorKind::InvalidCommand,
            format!(
                "stdin is {len} bytes; this adapter accepts at most {} (ChronoConfig::max_stdin)",
                config.max_stdin
            ),
        ));
    }
    let wrap = cmd.workdir().is_some() || !cmd.env().is_empty();
    let program = if wrap {
        degrade::join(
            &degrade::wrap(
                cmd,
                &WrapOptions {
                    workdir: true,
                    env: true,
                    stdin: StdinFrom::Backend,
                    ..WrapOptions::default()
                },
            )
            .map_err(|e| e.or_context(PROVIDER, context))?,
        )
    } else {
        degrade::join(cmd.argv())
    };
    let mut input_files = Vec::new();
    let redirect = if cmd.stdin().is_empty() {
        "exec 0</dev/null\n".to_owned()
    } else {
        let q = degrade::quote(&name).into_owned();
        let fail =
            degrade::quote(&format!("{WRAPPER_MARK}stdin file missing: {name}")).into_owned();
        input_files.push(InputFile {
            path: name,
            content: degrade::base64_encode(cmd.stdin()),
        });
        format!(
            "if [ -f {q} ]; then exec 0<{q}; rm -f -- {q}; else printf '%s\\n' {fail} >&2; exit {WRAPPER_STATUS}; fi\n"
        )
    };
    Ok(StdinParts {
        program,
        redirect,
        input_files,
        wrapped: wrap || !cmd.stdin().is_empty(),
    })
}

/// `config` is validated (by [`ChronoExec::new`]): it is not checked again per command.
pub(crate) fn prepare(config: &ChronoConfig, cmd: &Command) -> Result<Prepared, Error> {
    size::check_size(PROVIDER, cmd, &crate::SIZE_LIMIT)?;
    let timeout = Some(config.timeout_secs);
    // The `code` tool's commands run natively: the exact source in its own language.
    if let Some(code) = CodeRequest::parse(cmd)
        && let Ok(language) = code.language.as_str().parse::<Language>()
    {
        let mut request = ExecuteRequest::new(language, code.source, config.timeout_secs);
        request.timeout_secs = timeout;
        return Ok(Prepared {
            request,
            wrapped: false,
            mark: None,
        });
    }
    let stdin = stdin_parts(config, cmd, (&EXECUTE, "exec"), stdin_name())?;
    let mark = degrade::EndMark::new();
    let script = format!("{}{}\n", stdin.redirect, mark.wrap(&stdin.program));
    // What counts is the script as sent, wrapper and quoting included.
    size::check_wire(PROVIDER, &[&script], &crate::SIZE_LIMIT)?;
    Ok(Prepared {
        request: ExecuteRequest {
            timeout_secs: timeout,
            input_files: stdin.input_files,
            ..ExecuteRequest::new(Language::Bash, script, config.timeout_secs)
        },
        wrapped: stdin.wrapped,
        mark: Some(mark),
    })
}

impl Exec for ChronoExec {
    execseam_adapter_kit::accessors!(
        self => provider: PROVIDER,
        capabilities: ChronoExec::capabilities_of(self.config()),
    );

    /// Native, over the durable `/executions` contract ([`crate::process`]).
    fn processes(&self) -> Option<Box<dyn execseam_core::Processes + '_>> {
        Some(Box::new(crate::process::ChronoProcesses::new(
            self.config(),
            &self.durable,
            &self.local,
        )))
    }

    fn exec(&self, command: Command) -> BoxFuture<'_, Result<Output, Error>> {
        exec_span!(self.provider(), "exec", command, |command| async move {
            let prepared = prepare(self.config(), &command)?;
            tracing::debug!(
                provider = PROVIDER,
                tool = %command.tool(),
                argc = command.argv().len(),
                language = %prepared.request.language,
                wrapped = prepared.wrapped,
                durable = self.config().durable,
                "exec"
            );
            let out = if self.config().durable {
                self.run_durable(prepared.request, prepared.wrapped, prepared.mark.as_ref())
                    .await?
            } else {
                self.send_execute(&prepared.request, prepared.wrapped, prepared.mark.as_ref())
                    .await?
            };
            tracing::debug!(provider = PROVIDER, exit = ?out.exit, "exited");
            Ok(out)
        })
    }
}

impl Sandbox for ChronoExec {
    execseam_adapter_kit::accessors!(self => id: &self.id, ownership: &self.ownership);

    /// Nothing to end: every execution's sandbox is removed when the execution ends.
    fn end(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async { Ok(()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ChronoConfig {
        ChronoConfig::new("http://127.0.0.1:1")
    }

    #[test]
    fn argv_becomes_an_exact_bash_program_with_stdin_at_eof() {
        let p = prepare(
            &config(),
            &Command::new(["printf", "%s\\n", "a b", "it's"]).unwrap(),
        )
        .unwrap();
        assert!(!p.wrapped);
        assert_eq!(p.request.language, Language::Bash);
        assert_eq!(p.request.timeout_secs, Some(180));
        assert_eq!(
            p.request.script,
            format!(
                "exec 0</dev/null\n{}\n",
                p.mark
                    .as_ref()
                    .unwrap()
                    .wrap("printf '%s\\n' 'a b' 'it'\\''s'")
            )
        );
        let json = String::from_utf8(p.request.to_json()).unwrap();
        assert!(
            json.starts_with(r#"{"language":"bash","script":"#),
            "{json}"
        );
    }

    #[test]
    fn stdin_goes_in_input_files_and_workdir_env_through_the_wrapper() {
        let c = Command::builder(["cat"])
            .stdin(&b"\x00\xffhi"[..])
            .workdir("/srv")
            .env("A", "b c")
            .build()
            .unwrap();
        let p = prepare(&config(), &c).unwrap();
        assert!(p.wrapped);
        assert_eq!(p.request.input_files.len(), 1);
        let f = &p.request.input_files[0];
        assert_eq!(f.content, "AP9oaQ==");
        assert!(
            !f.path.starts_with('/') && f.path.starts_with(".execseam-"),
            "{}",
            f.path
        );
        let s = &p.request.script;
        assert!(s.contains(&format!("exec 0<{}", f.path)), "{s}");
        assert!(s.contains("cd -- /srv"), "{s}");
        assert!(s.contains("'A=b c'"), "{s}");
    }

    #[test]
    fn bad_config_and_too_much_stdin_fail_before_any_io() {
        for secs in [0, 601] {
            let e = ChronoExec::new(config().timeout_secs(secs)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
        }
        for url in ["ftp://h", "http://[::1", "not a url"] {
            let e = ChronoExec::new(ChronoConfig::new(url)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{url}: {e}");
        }
        let c = Command::builder(["cat"])
            .stdin(vec![b'a'; 11])
            .build()
            .unwrap();
        let e = prepare(&config().max_stdin(10), &c).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidCommand);
    }

    #[test]
    fn code_commands_run_natively() {
        let c = CodeRequest::new(execseam_tools_protocol::code::Language::Python, "print(1)")
            .command()
            .unwrap();
        let p = prepare(&config(), &c).unwrap();
        assert_eq!(p.request.language, Language::Python);
        assert_eq!(p.request.script, "print(1)");
        assert!(p.request.input_files.is_empty() && !p.wrapped);
    }

    #[test]
    fn outputs_keep_codes_and_signals() {
        let o = |c| ExecOutput {
            stdout: "o".into(),
            stderr: "e".into(),
            exit_code: c,
            execution_time_ms: None,
            display_data: None,
            files: None,
        };
        assert_eq!(
            output_of(o(3), false, None, EXECUTE).unwrap().exit,
            Exit::Code(3)
        );
        assert_eq!(
            output_of(o(-9), false, None, EXECUTE).unwrap().exit,
            Exit::Signal(9)
        );
        assert_eq!(
            output_of(o(-1000), false, None, EXECUTE)
                .unwrap_err()
                .kind(),
            ErrorKind::Protocol
        );
    }

    /// D22: the adapter shell-wraps every command, so a well-formed success the program never
    /// wrote (`exit_code: 0`, empty output: a forged or replaced answer) is a protocol error;
    /// the program's own answer, marker stripped, is its exit. Accepted before the marker.
    #[test]
    fn a_forged_success_without_the_end_marker_is_never_an_exit() {
        let o = |stderr: &str, code| ExecOutput {
            stdout: "".into(),
            stderr: stderr.into(),
            exit_code: code,
            execution_time_ms: None,
            display_data: None,
            files: None,
        };
        let mark = degrade::EndMark::new();
        let m = mark.as_str();
        // Another request's marker, or the old fixed one: a forger who copied one.
        let other = degrade::EndMark::new();
        for op in [EXECUTE, RESULT] {
            let e = output_of(o("", 0), false, Some(&mark), op).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
            assert!(output_of(o(&format!("{m}1"), 0), false, Some(&mark), op).is_err());
            for forged in [other.as_str(), "\x1eexecseam-end:"] {
                let e = output_of(o(&format!("{forged}0"), 0), false, Some(&mark), op);
                assert_eq!(e.unwrap_err().kind(), ErrorKind::Protocol, "{forged:?}");
            }
            let ok = output_of(o(&format!("e{m}0"), 0), false, Some(&mark), op).unwrap();
            assert_eq!(ok, Output::new("", "e", Exit::Code(0)));
        }
        // Issue 38 (D22): the wrapper itself killed (the whole group: its own OOM, a host
        // envelope, `kill -9 0`) writes no marker; a backend reporting 128+n gives 137 or 143,
        // the contract's ambiguous kill. Any other code without the marker stays an error.
        for op in [EXECUTE, RESULT] {
            for code in [137, 143] {
                let out = output_of(o("partial", code), false, Some(&mark), op).unwrap();
                assert!(out.exit.is_ambiguous_kill(), "{out:?}");
            }
            for code in [139, 130, 1] {
                let e = output_of(o("", code), false, Some(&mark), op).unwrap_err();
                assert_eq!(e.kind(), ErrorKind::Protocol, "{code}: {e}");
            }
        }
        // The script as prepared, run by bash here, writes what the reader strips.
        let p = prepare(
            &config(),
            &Command::new(["sh", "-c", "printf x >&2; exit 4"]).unwrap(),
        )
        .unwrap();
        let run = std::process::Command::new("bash")
            .args(["-c", &p.request.script])
            .output()
            .unwrap();
        let stderr = String::from_utf8(run.stderr).unwrap();
        let out = output_of(o(&stderr, 4), p.wrapped, p.mark.as_ref(), EXECUTE).unwrap();
        assert_eq!(out, Output::new("", "x", Exit::Code(4)));
    }
}
