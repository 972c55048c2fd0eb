//! [`E2bExec`]: one E2B sandbox, its commands (`process.Start`) and its files.

use std::collections::BTreeMap;
use std::fmt;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use execseam_adapter_kit::degrade::{self, WrapOptions};
use execseam_adapter_kit::exec_span;
use execseam_core::{
    BoxFuture, Capabilities, Command, Deadline, Error, ErrorKind, Event, EventStream, Exec,
    ExecStream, Exit, Output, Ownership, Sandbox,
};
use execseam_tools_protocol::native::NativeRequest;
use secrecy::SecretString;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::client::{ControlPlane, Envd, Health, NewSandbox};
use crate::config::E2bConfig;
use crate::connect::{CallError, Code, RpcError, ServerStream};
use crate::error::{self, Ctx, Gone, PROVIDER};
use crate::native::{self, Native, Who};
use crate::wire::{self, ProcessSelector};
use execseam_adapter_kit::retry::Stage;
use execseam_adapter_kit::size;

/// stdin up to this size goes in one `SendInput`; more goes through `StreamInput` in chunks of
/// this size.
const STDIN_CHUNK: usize = 64 << 10;
/// A sandbox whose lifetime ends within this margin is taken as expired when it is found gone.
const LIFETIME_SLACK: Duration = Duration::from_secs(2);

/// An envd version, `major.minor.patch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct EnvdVersion(pub u32, pub u32, pub u32);

impl EnvdVersion {
    /// `CloseStdin` exists (`ENVD_ENVD_CLOSE`).
    pub const CLOSE_STDIN: EnvdVersion = EnvdVersion(0, 5, 2);
    /// `stdin: false` is honoured (`ENVD_COMMANDS_STDIN`).
    pub const STDIN_FLAG: EnvdVersion = EnvdVersion(0, 3, 0);
    /// A default user exists (`ENVD_DEFAULT_USER`); older envd needs `user`.
    pub const DEFAULT_USER: EnvdVersion = EnvdVersion(0, 4, 0);
    /// `POST /files` takes `application/octet-stream`.
    pub const OCTET_STREAM_UPLOAD: EnvdVersion = EnvdVersion(0, 5, 7);

    /// The envd a sandbox is taken to run when nothing says otherwise (an attach by id): the
    /// version of `packages/envd/pkg/version.go` in e2b-dev/infra that this adapter was checked
    /// against.
    pub const CURRENT: EnvdVersion = EnvdVersion(0, 6, 13);

    /// Parses `0.6.13` (a pre-release or build suffix is ignored).
    pub fn parse(s: &str) -> Option<EnvdVersion> {
        let core = s.trim().trim_start_matches('v').split(['-', '+']).next()?;
        let mut it = core.split('.');
        let major = it.next()?.parse().ok()?;
        let minor = it.next().unwrap_or("0").parse().ok()?;
        let patch = it.next().unwrap_or("0").parse().ok()?;
        Some(EnvdVersion(major, minor, patch))
    }
}

impl fmt::Display for EnvdVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// What identifies a running sandbox to envd, for [`E2bProvider::attach_with`](crate::E2bProvider::attach_with)
/// (no control-plane call).
#[derive(Clone)]
pub struct Attach {
    /// The sandbox id.
    pub sandbox_id: String,
    /// Its `envdAccessToken`, if it is a secure sandbox.
    pub envd_access_token: Option<SecretString>,
    /// Its envd version, as the control plane reported it.
    pub envd_version: String,
    /// Its domain, as the control plane reported it (`None`: the configured domain).
    pub domain: Option<String>,
}

impl fmt::Debug for Attach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Attach")
            .field("sandbox_id", &self.sandbox_id)
            .field(
                "envd_access_token",
                &self.envd_access_token.as_ref().map(|_| "<redacted>"),
            )
            .field("envd_version", &self.envd_version)
            .field("domain", &self.domain)
            .finish()
    }
}

pub(crate) struct Inner {
    pub(crate) config: E2bConfig,
    http: reqwest::Client,
    /// The control plane's base URL, parsed once.
    api: reqwest::Url,
    pub(crate) sandbox_id: String,
    pub(crate) envd_version: EnvdVersion,
    pub(crate) envd: Envd,
    /// The user sent to envd (explicit, or `user` for envd < 0.4.0).
    pub(crate) user: Option<String>,
    /// Who ends the sandbox: created by us (close kills it) or connected to.
    ownership: Ownership,
    /// When the lifetime we asked for ends, if we asked.
    end_at: Mutex<Option<Instant>>,
    /// What the sandbox's `execve` takes, asked for the first large command.
    arg_max: size::ArgMax,
}

impl Inner {
    fn control(&self) -> Result<ControlPlane<'_>, Error> {
        Ok(ControlPlane {
            http: &self.http,
            base: self.api.clone(),
            config: &self.config,
        })
    }

    fn lifetime_over(&self) -> bool {
        self.end_at
            .lock()
            .expect("end_at")
            .is_some_and(|end| Instant::now() + LIFETIME_SLACK >= end)
    }

    /// Maps a failed call, probing `/health` when the failure cannot tell whether the sandbox
    /// is gone (as the SDK does).
    pub(crate) async fn fail(&self, call: CallError, mut ctx: Ctx) -> Error {
        match error::gone(&call) {
            Gone::Yes => ctx.gone = true,
            Gone::Maybe if ctx.exec => {
                ctx.gone = self.envd.health().await == Health::Gone;
            }
            _ => {}
        }
        if ctx.gone {
            ctx.lifetime_over = self.lifetime_over();
            // A paused sandbox is not in the proxy's catalog either: the control plane tells.
            if !ctx.lifetime_over
                && let Ok(c) = self.control()
                && c.get(&self.sandbox_id)
                    .await
                    .is_ok_and(|s| s.state == "paused")
            {
                return crate::state::paused(ctx.op);
            }
        }
        error::map(call, &ctx)
    }

    /// SIGKILLs a process and, once its pid is known, its descendants. envd's `SendSignal`
    /// signals the pid only (`handler.go`: `p.cmd.Process.Signal`), and envd gives a non-PTY
    /// process no group of its own (no `Setpgid`/`Setsid` in its `SysProcAttr`,
    /// e2b-dev/infra@54693ff35 `handler.go` lines 223-230: it shares envd's), so background
    /// children and pipeline members would survive and no group kill can name them: the tree is
    /// killed first by [`KILL_TREE`] started next to it. By tag the pid may not be registered
    /// yet, so not_found is retried briefly. `Ok` when the process is gone.
    pub(crate) async fn kill_process(&self, mut target: ProcessSelector) -> Result<(), Error> {
        if let ProcessSelector::Tag(tag) = &target {
            // The start event has not been read: find the pid, for the group.
            for attempt in 0..4 {
                if let Ok(Some(pid)) = self.envd.pid_of_tag(tag).await {
                    target = ProcessSelector::Pid(pid);
                    break;
                }
                if attempt < 3 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        if let ProcessSelector::Pid(pid) = target {
            self.kill_tree(pid).await;
        }
        let by_tag = matches!(target, ProcessSelector::Tag(_));
        for attempt in 0..4 {
            match self.envd.kill(target.clone()).await {
                Ok(()) => {
                    tracing::debug!(provider = PROVIDER, ?target, "killed the process");
                    return Ok(());
                }
                Err(CallError::Rpc {
                    error:
                        RpcError {
                            code: Code::NotFound,
                            ..
                        },
                    ..
                }) if by_tag && attempt < 3 => {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                }
                // Gone already (the group kill took it, or it exited): not_found, or Go's
                // `os.Process.Signal` errors for a dead process (ESRCH, "already finished").
                Err(CallError::Rpc {
                    error: RpcError { code, message },
                    ..
                }) if !by_tag
                    && (code == Code::NotFound
                        || (code == Code::Internal
                            && ["no such process", "process already finished"]
                                .iter()
                                .any(|m| message.to_lowercase().contains(m)))) =>
                {
                    return Ok(());
                }
                Err(e) => {
                    tracing::debug!(provider = PROVIDER, ?target, error = ?e, "kill failed");
                    return Err(error::map(e, &Ctx::new("kill", Stage::Before)));
                }
            }
        }
        Err(Error::new(
            ErrorKind::NotFound,
            "the process to kill was never registered under its tag",
        )
        .with_provider(PROVIDER)
        .with_operation("kill"))
    }

    /// [`KILL_TREE`] of `pid` in the sandbox, waited for boundedly.
    async fn kill_tree(&self, pid: u32) {
        let req = wire::StartRequest {
            process: wire::ProcessConfig {
                cmd: "/bin/sh".into(),
                args: vec!["-c".into(), KILL_TREE.into(), "sh".into(), pid.to_string()],
                envs: BTreeMap::new(),
                cwd: None,
            },
            tag: None,
            stdin: false,
        };
        let run = async {
            let mut stream = self.envd.start(&req, None).await?;
            while stream.message::<wire::StartResponse>().await?.is_some() {}
            Ok::<(), CallError>(())
        };
        match tokio::time::timeout(self.config.request_timeout, run).await {
            Ok(Ok(())) => tracing::debug!(provider = PROVIDER, pid, "killed the process tree"),
            Ok(Err(e)) => {
                tracing::debug!(provider = PROVIDER, pid, error = ?e, "the tree kill failed")
            }
            Err(_) => tracing::debug!(provider = PROVIDER, pid, "the tree kill timed out"),
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if !(self.config.kill_on_drop && self.ownership.destroy_on_drop()) {
            return;
        }
        let http = self.http.clone();
        let config = self.config.clone();
        let id = self.sandbox_id.clone();
        let base = self.api.clone();
        execseam_adapter_kit::reaper::spawn(PROVIDER, "kill the sandbox", async move {
            let cp = ControlPlane {
                http: &http,
                base,
                config: &config,
            };
            cp.kill(&id)
                .await
                .map(|_| ())
                .map_err(|e| error::map(e, &Ctx::new("kill", Stage::Before)))
        });
    }
}

/// Commands and files in one E2B sandbox. Cheap to clone (one shared connection pool).
///
/// See the [crate docs](crate) for what is native and what is not.
#[derive(Clone)]
pub struct E2bExec {
    pub(crate) inner: Arc<Inner>,
}

execseam_adapter_kit::debug_fields!(self => E2bExec {
    sandbox_id: self.inner.sandbox_id,
    envd_version: self.inner.envd_version,
    envd: self.inner.envd,
});

fn setup_error(message: impl Into<String>) -> Error {
    Error::invalid_config(message).with_provider(PROVIDER)
}

impl E2bExec {
    /// Creates a sandbox (`POST /v2/sandboxes`, or the legacy route); the handle owns it.
    pub(crate) async fn create(
        config: E2bConfig,
        http: reqwest::Client,
        api: reqwest::Url,
        new: &NewSandbox,
    ) -> Result<E2bExec, Error> {
        let sandbox = ControlPlane {
            http: &http,
            base: api.clone(),
            config: &config,
        }
        .create(new)
        .await
        .map_err(|e| error::map(e, &Ctx::new("create", Stage::Submit)))?;
        let end = Instant::now() + new.timeout;
        E2bExec::build(config, http, api, sandbox, Ownership::created(), Some(end))
    }

    /// Connects to a running (or paused: it is resumed) sandbox
    /// (`POST /v2/sandboxes/{id}/connect`), setting its lifetime to the configured
    /// `sandbox_timeout` from now; the handle does not own it.
    pub(crate) async fn connect(
        config: E2bConfig,
        http: reqwest::Client,
        api: reqwest::Url,
        sandbox_id: &str,
    ) -> Result<E2bExec, Error> {
        let sandbox = ControlPlane {
            http: &http,
            base: api.clone(),
            config: &config,
        }
        .connect(sandbox_id)
        .await
        .map_err(|e| error::map(e, &Ctx::new("connect", Stage::Before)))?;
        let end = Instant::now() + config.sandbox_timeout;
        E2bExec::build(
            config,
            http,
            api,
            sandbox,
            Ownership::connected(),
            Some(end),
        )
    }

    /// Uses a sandbox whose id, token and envd version are already known, without calling the
    /// control plane. Its lifetime is unknown, so a sandbox found gone is `NotFound`.
    pub(crate) fn attach(
        config: E2bConfig,
        http: reqwest::Client,
        api: reqwest::Url,
        attach: Attach,
    ) -> Result<E2bExec, Error> {
        let sandbox = wire::Sandbox {
            template_id: String::new(),
            sandbox_id: attach.sandbox_id,
            envd_version: attach.envd_version,
            envd_access_token: None,
            domain: attach.domain,
        };
        E2bExec::build_with_token(
            config,
            http,
            api,
            sandbox,
            attach.envd_access_token,
            Ownership::connected(),
            None,
        )
    }

    pub(crate) fn build(
        config: E2bConfig,
        http: reqwest::Client,
        api: reqwest::Url,
        mut sandbox: wire::Sandbox,
        ownership: Ownership,
        end_at: Option<Instant>,
    ) -> Result<E2bExec, Error> {
        let token = sandbox.envd_access_token.take().map(SecretString::from);
        E2bExec::build_with_token(config, http, api, sandbox, token, ownership, end_at)
    }

    fn build_with_token(
        config: E2bConfig,
        http: reqwest::Client,
        api: reqwest::Url,
        sandbox: wire::Sandbox,
        token: Option<SecretString>,
        ownership: Ownership,
        end_at: Option<Instant>,
    ) -> Result<E2bExec, Error> {
        let version = EnvdVersion::parse(&sandbox.envd_version).ok_or_else(|| {
            Error::protocol(format!(
                "envdVersion {:?} is not a version",
                sandbox.envd_version
            ))
            .with_provider(PROVIDER)
            .with_operation("create")
        })?;
        if version < EnvdVersion(0, 1, 0) {
            return Err(Error::unsupported(format!(
                "envd {version} is too old (the SDK requires 0.1.0): rebuild the template"
            ))
            .with_provider(PROVIDER)
            .with_operation("create"));
        }
        let user = config
            .user
            .clone()
            .or_else(|| (version < EnvdVersion::DEFAULT_USER).then(|| "user".to_owned()));
        let base = config.envd_base(&sandbox.sandbox_id, sandbox.domain.as_deref())?;
        let headers = Envd::headers_for(&sandbox.sandbox_id, token.as_ref(), user.as_deref())
            .map_err(setup_error)?;
        let envd = Envd {
            http: http.clone(),
            base,
            headers,
            request_timeout: config.request_timeout,
            keepalive: config.keepalive_interval,
            idle: config.stream_idle_timeout,
            octet_stream_upload: version >= EnvdVersion::OCTET_STREAM_UPLOAD,
        };
        Ok(E2bExec {
            inner: Arc::new(Inner {
                api,
                sandbox_id: sandbox.sandbox_id,
                envd_version: version,
                envd,
                user,
                ownership,
                end_at: Mutex::new(end_at),
                config,
                http,
                arg_max: size::ArgMax::new(),
            }),
        })
    }

    /// The sandbox id.
    pub fn sandbox_id(&self) -> &str {
        &self.inner.sandbox_id
    }

    /// The sandbox's envd version.
    pub fn envd_version(&self) -> EnvdVersion {
        self.inner.envd_version
    }

    /// Kills the sandbox (`DELETE /sandboxes/{id}`): true if it was running, false if it did not
    /// exist ([`Sandbox::destroy`]).
    pub(crate) async fn kill(&self) -> Result<bool, Error> {
        let r = self
            .inner
            .control()?
            .kill(&self.inner.sandbox_id)
            .await
            .map_err(|e| error::map(e, &Ctx::new("destroy", Stage::Before)))?;
        self.inner.ownership.mark_destroyed();
        Ok(r)
    }

    /// Sets the sandbox's remaining lifetime (`POST /sandboxes/{id}/timeout`).
    pub async fn set_timeout(&self, timeout: Duration) -> Result<(), Error> {
        self.inner
            .control()?
            .set_timeout(&self.inner.sandbox_id, timeout)
            .await
            .map_err(|e| error::map(e, &Ctx::new("set_timeout", Stage::Before)))?;
        *self.inner.end_at.lock().expect("end_at") = Some(Instant::now() + timeout);
        Ok(())
    }

    /// Reads a file (`GET /files?path=`).
    pub async fn read_file(&self, path: &str) -> Result<Bytes, Error> {
        let user = self.inner.user.as_deref();
        match self.inner.envd.read_file(path, user).await {
            Ok(b) => Ok(b),
            Err(e) => Err(self
                .inner
                .fail(e, Ctx::new("read_file", Stage::Before))
                .await),
        }
    }

    /// Writes a file, creating its parents (`POST /files?path=`).
    pub async fn write_file(&self, path: &str, data: impl Into<Bytes>) -> Result<(), Error> {
        let user = self.inner.user.as_deref();
        match self.inner.envd.write_file(path, data.into(), user).await {
            Ok(_) => Ok(()),
            Err(e) => Err(self
                .inner
                .fail(e, Ctx::new("write_file", Stage::Before))
                .await),
        }
    }

    /// Lists a directory to `depth` levels (`filesystem.Filesystem/ListDir`), in envd's order
    /// (lexical, depth-first); the caller orders and truncates.
    pub async fn list_dir(&self, path: &str, depth: u32) -> Result<Vec<wire::EntryInfo>, Error> {
        match self.inner.envd.list_dir(path, depth.max(1)).await {
            Ok(v) => Ok(v),
            Err(e) => Err(self
                .inner
                .fail(e, Ctx::new("list_dir", Stage::Before))
                .await),
        }
    }

    /// Stats a path (`filesystem.Filesystem/Stat`, lstat semantics).
    pub async fn stat(&self, path: &str) -> Result<wire::EntryInfo, Error> {
        match self.inner.envd.stat(path).await {
            Ok(v) => Ok(v),
            Err(e) => Err(self.inner.fail(e, Ctx::new("stat", Stage::Before)).await),
        }
    }

    /// Serves a tools listing from `Stat`/`ListDir` when the answer is provably the script's.
    async fn native(&self, req: &NativeRequest) -> Result<Native, Error> {
        let who = Who {
            user: self.inner.user.as_deref().unwrap_or("user"),
        };
        let envd = &self.inner.envd;
        let served = native::serve(
            req,
            &who,
            |p: String| async move { envd.stat(&p).await },
            |p: String, depth| async move { envd.list_dir(&p, depth).await },
        )
        .await;
        match served {
            Ok(n) => {
                if matches!(n, Native::RunScript) {
                    tracing::debug!(provider = PROVIDER, tool = %req.tool(), "native listing not provably exact: running the script");
                }
                Ok(n)
            }
            Err(e) => Err(self.inner.fail(e, Ctx::new("exec", Stage::Before)).await),
        }
    }

    /// The `Start` request for `cmd` under `tag`: its argv and env as envd can deliver them
    /// ([`deliverable`]), checked against the sandbox's `execve` limit (envd starts the program
    /// itself, argv as given).
    async fn start_request(&self, cmd: &Command, tag: &str) -> Result<wire::StartRequest, Error> {
        let inner = &self.inner;
        inner
            .arg_max
            .check_in(PROVIDER, cmd, &crate::SIZE_LIMIT, self)
            .await?;
        let (argv, envs) = deliverable(cmd)?;
        // What envd execs: an env name that is not a shell name moves argv into one wrapper
        // script, which must fit too, against the sandbox's own limit once asked.
        let sent: Vec<String> = (argv.iter().cloned())
            .chain(envs.iter().map(|(k, v)| format!("{k}={v}")))
            .collect();
        size::check_wire(PROVIDER, &sent, &inner.arg_max.limit_or(&crate::SIZE_LIMIT))?;
        Ok(wire::StartRequest {
            process: wire::ProcessConfig {
                cmd: argv[0].clone(),
                args: argv[1..].to_vec(),
                envs,
                cwd: cmd.workdir().map(str::to_owned),
            },
            tag: Some(tag.to_owned()),
            stdin: !cmd.stdin().is_empty(),
        })
    }

    async fn start(&self, cmd: Command) -> Result<EventStream, Error> {
        let tag = format!("execseam-{}", execseam_adapter_kit::id::random_id(16));
        let req = self.start_request(&cmd, &tag).await?;
        let inner = &self.inner;
        let stdin = cmd.stdin().clone();
        if !stdin.is_empty() && inner.envd_version < EnvdVersion::CLOSE_STDIN {
            return Err(Error::unsupported(format!(
                "envd {} cannot close stdin (needs {}): rebuild the template",
                inner.envd_version,
                EnvdVersion::CLOSE_STDIN
            ))
            .with_provider(PROVIDER)
            .with_operation("exec"));
        }
        if stdin.is_empty() && inner.envd_version < EnvdVersion::STDIN_FLAG {
            return Err(Error::unsupported(format!(
                "envd {} always opens stdin and cannot close it: rebuild the template",
                inner.envd_version
            ))
            .with_provider(PROVIDER)
            .with_operation("exec"));
        }
        let deadline = inner.config.command_timeout;
        let mut ctx = Ctx::exec("exec", Stage::Submit);
        ctx.deadline = deadline.map(|_| Deadline::Command);
        tracing::debug!(provider = PROVIDER, sandbox = %inner.sandbox_id, tool = %cmd.tool(), program = %cmd.program(), argc = cmd.argv().len(), "exec");

        // From here a dropped future kills whatever may have started, by tag until the pid is known.
        let mut guard = KillGuard {
            inner: self.inner.clone(),
            target: Arc::new(Mutex::new(Some(ProcessSelector::Tag(tag)))),
        };
        let mut stream = match inner.envd.start(&req, deadline).await {
            Ok(s) => s,
            Err(e) => {
                if !may_have_started(&e) {
                    guard.disarm();
                }
                return Err(inner.fail(e, ctx).await);
            }
        };
        let pid = match start_pid(&mut stream, "exec").await {
            Ok(pid) => pid?,
            Err(e) => {
                // envd answers an in-stream error before the start event only when it did not
                // start the process (a missing cwd, a bad user).
                if matches!(
                    e,
                    CallError::Rpc {
                        in_stream: true,
                        ..
                    }
                ) {
                    guard.disarm();
                }
                return Err(inner.fail(e, ctx).await);
            }
        };
        guard.aim(ProcessSelector::Pid(pid));
        ctx.stage = Stage::After;
        let stdin_task = (!stdin.is_empty()).then(|| {
            let inner = self.inner.clone();
            tokio::spawn(async move { feed_stdin(inner, pid, stdin).await })
        });
        let kill = guard.kill_now();
        let running = Running {
            inner: self.inner.clone(),
            stream,
            guard,
            stdin: stdin_task,
            exit: None,
            done: false,
            ctx,
        };
        Ok(
            EventStream::new(futures_util::stream::unfold(running, |mut r| async move {
                let item = r.next().await?;
                Some((item, r))
            }))
            .with_kill(kill),
        )
    }
}

/// Kills `$1` and its descendants in its session, POSIX `sh` and `/proc` only: stops the process,
/// then generation by generation every process whose parent was stopped (so none forks past the
/// walk), and SIGKILLs them all. A descendant in a session of its own (`setsid`: detached on
/// purpose, as the spool's supervisor is) is left with its subtree. Fields after the command
/// name in `/proc/<pid>/stat`: state, ppid, pgrp, session.
const KILL_TREE: &str = r#"read -r l 2>/dev/null <"/proc/$1/stat" || exit 0
r=$1; set -- ${l##*) }; s=$4
kill -STOP "$r" 2>/dev/null
all=$r gen=" $r "
while [ "$gen" != " " ]; do
  next=" "
  for f in /proc/[0-9]*/stat; do
    read -r l 2>/dev/null <"$f" || continue
    set -- ${l##*) }
    case $gen in *" $2 "*) ;; *) continue ;; esac
    [ "$4" = "$s" ] || continue
    p=${f#/proc/}; p=${p%/stat}
    kill -STOP "$p" 2>/dev/null
    next="$next$p " all="$all $p"
  done
  gen=$next
done
kill -9 $all 2>/dev/null
exit 0"#;

/// The pid in the first event of a `Start` stream; `Ok(Err)` when that event is not a start.
async fn start_pid(
    stream: &mut ServerStream,
    operation: &'static str,
) -> Result<Result<u32, Error>, CallError> {
    let what = match stream.message::<wire::StartResponse>().await? {
        Some(wire::StartResponse {
            event: Some(wire::ProcessEvent {
                start: Some(start), ..
            }),
        }) => return Ok(Ok(start.pid)),
        Some(other) => format!("the first event of process.Start is not a start event: {other:?}"),
        None => "process.Start ended before its start event".to_owned(),
    };
    Ok(Err(Error::protocol(what)
        .with_provider(PROVIDER)
        .with_operation(operation)))
}

pub(crate) fn new_http(config: &E2bConfig) -> Result<reqwest::Client, Error> {
    crate::client::http_client(config)
}

/// True for a name a POSIX shell keeps in the environment it passes on.
fn is_shell_name(key: &str) -> bool {
    let mut b = key.bytes();
    b.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// The argv and `envs` to send. envd starts every process through
/// `/bin/sh -c '… exec nice "$@"'`, and dash (`/bin/sh` on E2B's templates) drops environment
/// variables whose names are not shell identifiers (`A-B.c`). Those are delivered by
/// `env -- KEY=VALUE` inside an exact `/bin/sh -c` wrapper instead ([`degrade::wrap`]); every
/// other variable goes in `envs`, and argv is untouched.
pub(crate) fn deliverable(cmd: &Command) -> Result<(Vec<String>, BTreeMap<String, String>), Error> {
    let (plain, odd): (BTreeMap<_, _>, BTreeMap<_, _>) = cmd
        .env()
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .partition(|(k, _)| is_shell_name(k));
    if odd.is_empty() {
        return Ok((cmd.argv().to_vec(), plain));
    }
    let only_odd = cmd
        .clone()
        .into_builder()
        .clear_env()
        .envs(odd)
        .no_workdir()
        .build()?;
    let opts = WrapOptions {
        env: true,
        ..WrapOptions::default()
    };
    let argv = degrade::wrap(&only_odd, &opts).map_err(|e| e.with_provider(PROVIDER))?;
    Ok((argv, plain))
}

/// Whether a failed `process.Start` may have started the process.
fn may_have_started(e: &CallError) -> bool {
    match e {
        CallError::Connect(_) => false,
        // Refused before envd: a 4xx other than 429, or the proxy's connection-limit 429
        // template. A bare 429, any 502 (its "port is not open" template included: Go's
        // ReverseProxy renders it after a written request too) or a 503 may follow a forwarded
        // start (issue 38): the kill guard stays.
        CallError::Http {
            status: 429,
            signed,
            ..
        } => !signed,
        CallError::Http { status, .. } => !matches!(status, 400..=499),
        CallError::Rpc { .. } => false,
        CallError::Timeout(_)
        | CallError::Idle(_)
        | CallError::Transport(_)
        | CallError::Protocol(_) => true,
    }
}

/// Sends stdin then closes it. A process that exits (or closes stdin) without reading all of it
/// is not an error, as with a local pipe.
async fn feed_stdin(inner: Arc<Inner>, pid: u32, data: Bytes) -> Result<(), Error> {
    let sent = if data.len() <= STDIN_CHUNK {
        inner
            .envd
            .send_input(ProcessSelector::Pid(pid), &data)
            .await
    } else {
        inner
            .envd
            .stream_input(ProcessSelector::Pid(pid), data, STDIN_CHUNK)
            .await
    };
    match sent {
        Ok(()) => {}
        Err(e) if stdin_gone(&e) => return Ok(()),
        Err(e) => {
            return Err(inner.fail(e, Ctx::new("send_stdin", Stage::Submit)).await);
        }
    }
    match inner.envd.close_stdin(ProcessSelector::Pid(pid)).await {
        Ok(()) => Ok(()),
        Err(e) if stdin_gone(&e) => Ok(()),
        Err(e) => Err(inner.fail(e, Ctx::new("close_stdin", Stage::Before)).await),
    }
}

/// envd's answers for a process that is gone or no longer reads its stdin.
fn stdin_gone(e: &CallError) -> bool {
    match e {
        CallError::Rpc {
            error: RpcError { code, message },
            ..
        } => {
            *code == Code::NotFound
                || (matches!(code, Code::Internal | Code::Unknown)
                    && ["broken pipe", "file already closed", "closed pipe"]
                        .iter()
                        .any(|m| message.contains(m)))
        }
        _ => false,
    }
}

/// SIGKILLs the process (and its group) on drop unless disarmed (it ended, or never started),
/// or unless [`KillGuard::kill_now`] took the target first.
struct KillGuard {
    inner: Arc<Inner>,
    target: Arc<Mutex<Option<ProcessSelector>>>,
}

impl KillGuard {
    fn disarm(&mut self) {
        self.target.lock().expect("kill target").take();
    }

    fn aim(&mut self, target: ProcessSelector) {
        *self.target.lock().expect("kill target") = Some(target);
    }

    /// The awaitable kill [`EventStream::with_kill`] takes: it takes the target, so the drop
    /// sends nothing more.
    fn kill_now(&self) -> impl FnOnce() -> BoxFuture<'static, Result<(), Error>> + Send + 'static {
        let (inner, slot) = (self.inner.clone(), self.target.clone());
        move || {
            let target = slot.lock().expect("kill target").take();
            Box::pin(async move {
                match target {
                    Some(t) => inner.kill_process(t).await,
                    None => Ok(()),
                }
            })
        }
    }
}

impl Drop for KillGuard {
    fn drop(&mut self) {
        let Some(target) = self.target.lock().expect("kill target").take() else {
            return;
        };
        let inner = self.inner.clone();
        execseam_adapter_kit::reaper::spawn(PROVIDER, "kill", async move {
            inner.kill_process(target).await
        });
    }
}

/// A running command's event stream.
struct Running {
    inner: Arc<Inner>,
    stream: ServerStream,
    guard: KillGuard,
    stdin: Option<JoinHandle<Result<(), Error>>>,
    /// The end event, held until the end-stream message confirms the stream is complete.
    exit: Option<Exit>,
    done: bool,
    ctx: Ctx,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(t) = self.stdin.take() {
            t.abort();
        }
    }
}

fn protocol(message: impl Into<String>) -> Error {
    Error::protocol(message)
        .with_provider(PROVIDER)
        .with_operation("exec")
}

impl Running {
    async fn next(&mut self) -> Option<Result<Event, Error>> {
        if self.done {
            return None;
        }
        let r = self.step().await;
        if !matches!(r, Ok(Event::Stdout(_) | Event::Stderr(_))) {
            self.done = true;
        }
        if r.is_err() {
            // The command may still run: kill it (and its group) before answering, so that
            // whatever the caller does next (a retry, the next command) never races the kill.
            let _ = self.guard.kill_now()().await;
        }
        Some(r)
    }

    async fn step(&mut self) -> Result<Event, Error> {
        loop {
            let msg = match &mut self.stdin {
                Some(task) => tokio::select! {
                    joined = task => {
                        self.stdin = None;
                        match joined {
                            Ok(Ok(())) => continue,
                            // The command waits for stdin that will never come: the guard kills it.
                            Ok(Err(e)) => return Err(e),
                            Err(join) => return Err(protocol(format!("the stdin task failed: {join}"))),
                        }
                    }
                    m = self.stream.message::<wire::StartResponse>() => m,
                },
                None => self.stream.message::<wire::StartResponse>().await,
            };
            match msg {
                Ok(Some(resp)) => {
                    let Some(event) = resp.event else {
                        return Err(protocol("a stream message without an event"));
                    };
                    if let Some(data) = event.data {
                        if self.exit.is_some() {
                            return Err(protocol("output after the end event"));
                        }
                        let (out, b64) = match (data.stdout, data.stderr, data.pty) {
                            (Some(s), None, None) => (true, s),
                            (None, Some(s), None) => (false, s),
                            other => {
                                return Err(protocol(format!(
                                    "a data event that is not exactly one of stdout/stderr: {other:?}"
                                )));
                            }
                        };
                        let bytes = B64.decode(b64.as_bytes()).map_err(|e| {
                            protocol(format!("a data event that is not base64: {e}"))
                        })?;
                        if bytes.is_empty() {
                            continue;
                        }
                        let bytes = Bytes::from(bytes);
                        return Ok(if out {
                            Event::Stdout(bytes)
                        } else {
                            Event::Stderr(bytes)
                        });
                    } else if let Some(end) = event.end {
                        if self.exit.is_some() {
                            return Err(protocol("a second end event"));
                        }
                        // The process is over: nothing left to kill.
                        self.guard.disarm();
                        self.exit = Some(exit_of(&end).map_err(protocol)?);
                    } else if event.keepalive.is_some() {
                        continue;
                    } else if event.start.is_some() {
                        return Err(protocol("a second start event"));
                    } else {
                        return Err(protocol("an event of an unknown kind"));
                    }
                }
                Ok(None) => {
                    return match self.exit.take() {
                        Some(exit) => {
                            tracing::debug!(provider = PROVIDER, ?exit, "exited");
                            Ok(Event::Exit(exit))
                        }
                        None => Err(protocol(
                            "the stream ended without an end event (no exit status)",
                        )),
                    };
                }
                Err(e) => return Err(self.inner.fail(e, self.ctx).await),
            }
        }
    }
}

/// The exit an end event reports. `exitCode` absent is 0 (proto3 JSON); a process killed by a
/// signal has `exited` false, `exitCode` -1 and Go's `signal: <name>` status.
pub(crate) fn exit_of(end: &wire::EndEvent) -> Result<Exit, String> {
    if end.exited {
        return Ok(Exit::Code(end.exit_code));
    }
    let status = end.status.trim_end_matches(" (core dumped)");
    if let Some(name) = status.strip_prefix("signal: ")
        && let Some(n) = go_signal_number(name)
    {
        return Ok(Exit::Signal(n));
    }
    Err(format!(
        "an end event without an exit status: exited=false, exitCode={}, status={:?}",
        end.exit_code, end.status
    ))
}

/// Linux signal numbers from Go's `syscall.Signal.String()` names.
fn go_signal_number(name: &str) -> Option<i32> {
    const NAMES: [&str; 31] = [
        "hangup",
        "interrupt",
        "quit",
        "illegal instruction",
        "trace/breakpoint trap",
        "aborted",
        "bus error",
        "floating point exception",
        "killed",
        "user defined signal 1",
        "segmentation fault",
        "user defined signal 2",
        "broken pipe",
        "alarm clock",
        "terminated",
        "stack fault",
        "child exited",
        "continued",
        "stopped (signal)",
        "stopped",
        "stopped (tty input)",
        "stopped (tty output)",
        "urgent I/O condition",
        "CPU time limit exceeded",
        "file size limit exceeded",
        "virtual timer expired",
        "profiling timer expired",
        "window changed",
        "I/O possible",
        "power failure",
        "bad system call",
    ];
    if let Some(i) = NAMES.iter().position(|n| *n == name) {
        return Some(i as i32 + 1);
    }
    // Unnamed signals (real-time ones): "signal 34".
    name.strip_prefix("signal ")?.parse().ok()
}

impl Exec for E2bExec {
    execseam_adapter_kit::accessors!(self => provider: PROVIDER);

    fn capabilities(&self) -> Capabilities {
        let mut c = crate::CAPABILITIES;
        if !self.inner.config.native_tools {
            c.native_tools = &[];
        }
        c
    }

    fn exec(&self, command: Command) -> BoxFuture<'_, Result<Output, Error>> {
        exec_span!(self.provider(), "exec", command, |command| async move {
            // The size is checked once, by `start` (a native listing sends no argv).
            if self.inner.config.native_tools
                && let Some(req) = NativeRequest::parse(&command)
                && matches!(req, NativeRequest::List(_) | NativeRequest::Glob(_))
            {
                match self.native(&req).await? {
                    Native::Output(out) => return Ok(out),
                    Native::RunScript => {}
                }
            }
            self.start(command).await?.collect().await
        })
    }

    fn streaming(&self) -> Option<&dyn ExecStream> {
        Some(self)
    }

    /// The adapter kit's spool, in the sandbox's `/tmp` (envd drops output nobody is subscribed
    /// to and keeps an ended process's exit only 30 s, so the output and exit live in files),
    /// its supervisor one of envd's own background processes ([`Launch`](execseam_adapter_kit::spool::Launch) below).
    fn processes(&self) -> Option<Box<dyn execseam_core::Processes + '_>> {
        execseam_adapter_kit::spool::hybrid(self)
    }
}

/// The tag of the supervisor envd runs for the spool directory `dir`.
fn supervisor_tag(dir: &str) -> String {
    format!("execseam-spool:{dir}")
}

/// The spool's supervisor as an envd background process: `Start` without `Connect-Timeout-Ms`
/// (envd runs it under a context of its own, `start.go`, so it outlives the stream, which is
/// closed after the start event), tagged by its spool directory. Its output is never read
/// (envd discards what nobody is subscribed to, `handler.go` #2639): the spool's files are the
/// output.
impl execseam_adapter_kit::spool::Launch for E2bExec {
    /// A start whose answer was lost is looked for by its tag in `List` before it is called
    /// failed (a repeat would start a second supervisor, which the spool's lock turns away).
    fn launch(&self, supervisor: Command) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            let dir = execseam_adapter_kit::spool::supervised_dir(supervisor.argv()).ok_or_else(
                || {
                    Error::new(ErrorKind::InvalidCommand, "not the spool's supervisor")
                        .with_provider(PROVIDER)
                        .with_operation("start")
                },
            )?;
            let tag = supervisor_tag(dir);
            let req = self.start_request(&supervisor, &tag).await?;
            let ctx = Ctx::new("start", Stage::Submit);
            let e = match self.inner.envd.start(&req, None).await {
                Ok(mut stream) => match start_pid(&mut stream, "start").await {
                    Ok(pid) => return pid.map(drop),
                    Err(e) => e,
                },
                Err(e) if !may_have_started(&e) => return Err(self.inner.fail(e, ctx).await),
                Err(e) => e,
            };
            if let Ok(Some(pid)) = self.inner.envd.pid_of_tag(&tag).await {
                tracing::debug!(provider = PROVIDER, pid, error = ?e, "the supervisor's start answer was lost; envd runs it");
                return Ok(());
            }
            Err(self.inner.fail(e, ctx).await)
        })
    }

    /// `Connect` to the supervisor by its tag until its end event (envd's own wait: the SDK's
    /// `CommandHandle.wait`). `false` when envd does not know it (ended more than 30 s ago, or
    /// not started by envd).
    fn wait_supervisor<'a>(
        &'a self,
        dir: &'a str,
        _within: Duration,
    ) -> BoxFuture<'a, Result<bool, Error>> {
        Box::pin(self.connect_until_end(dir))
    }
}

impl E2bExec {
    /// [`wait_supervisor`](execseam_adapter_kit::spool::Launch::wait_supervisor)'s `Connect`.
    async fn connect_until_end(&self, dir: &str) -> Result<bool, Error> {
        let ctx = || Ctx::new("wait", Stage::Before);
        let selector = ProcessSelector::Tag(supervisor_tag(dir));
        let mut stream = match self.inner.envd.connect(selector).await {
            Ok(s) => s,
            Err(e) => return Err(self.inner.fail(e, ctx()).await),
        };
        loop {
            match stream.message::<wire::StartResponse>().await {
                Ok(Some(r)) if r.event.as_ref().is_some_and(|e| e.end.is_some()) => {
                    return Ok(true);
                }
                Ok(Some(_)) => {}
                Ok(None) => {
                    return Err(
                        Error::protocol("process.Connect ended before its end event")
                            .with_provider(PROVIDER)
                            .with_operation("wait"),
                    );
                }
                Err(CallError::Rpc {
                    error:
                        RpcError {
                            code: Code::NotFound,
                            ..
                        },
                    ..
                }) => return Ok(false),
                Err(e) => return Err(self.inner.fail(e, ctx()).await),
            }
        }
    }
}

execseam_adapter_kit::exec_stream_by!(E2bExec: start);

impl Sandbox for E2bExec {
    execseam_adapter_kit::sandbox_fields!(id: inner.sandbox_id, ownership: inner.ownership);

    /// `DELETE /sandboxes/{id}`.
    fn end(&self) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move { self.kill().await.map(drop) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end(exit_code: i32, exited: bool, status: &str) -> wire::EndEvent {
        wire::EndEvent {
            exit_code,
            exited,
            status: status.into(),
            error: None,
        }
    }

    #[test]
    fn exits_are_reported_exactly() {
        assert_eq!(exit_of(&end(0, true, "exit status 0")), Ok(Exit::Code(0)));
        assert_eq!(exit_of(&end(3, true, "exit status 3")), Ok(Exit::Code(3)));
        assert_eq!(
            exit_of(&end(-1, false, "signal: killed")),
            Ok(Exit::Signal(9))
        );
        assert_eq!(
            exit_of(&end(-1, false, "signal: terminated")),
            Ok(Exit::Signal(15))
        );
        assert_eq!(
            exit_of(&end(-1, false, "signal: segmentation fault (core dumped)")),
            Ok(Exit::Signal(11))
        );
        assert_eq!(
            exit_of(&end(-1, false, "signal: signal 34")),
            Ok(Exit::Signal(34))
        );
        // Never an invented code: an end event that says neither is a protocol error.
        assert!(exit_of(&end(0, false, "")).is_err());
        assert!(exit_of(&end(-1, false, "signal: mystery")).is_err());
    }

    #[test]
    fn env_names_dash_would_drop_go_through_env_and_the_rest_stays_native() {
        let c = Command::builder(["printenv", "A-B.c"])
            .env("A-B.c", "v=1")
            .env("PLAIN_1", "p")
            .build()
            .unwrap();
        let (argv, envs) = deliverable(&c).unwrap();
        assert_eq!(&argv[..2], ["/bin/sh", "-c"]);
        assert_eq!(argv[2], "exec env -- 'A-B.c=v=1' printenv A-B.c");
        assert_eq!(
            envs,
            BTreeMap::from([("PLAIN_1".to_owned(), "p".to_owned())])
        );
        let c = Command::builder(["printenv"])
            .env("_ok9", "x")
            .build()
            .unwrap();
        let (argv, envs) = deliverable(&c).unwrap();
        assert_eq!(argv, ["printenv"]);
        assert_eq!(envs.len(), 1);
        assert!(!is_shell_name("9a") && !is_shell_name("") && is_shell_name("_"));
    }

    #[test]
    fn the_kill_guard_stays_armed_unless_the_start_was_refused_before_envd() {
        let http = |status, signed| CallError::Http {
            status,
            signed,
            message: String::new(),
            retry_after: None,
        };
        // The proxy's connection-limit template, a 4xx refusal: nothing started.
        assert!(!may_have_started(&http(429, true)));
        assert!(!may_have_started(&http(400, false)));
        // A bare 429, a 502 (even the signed "port is not open") or a 503 after a forwarded
        // start (issue 38): it may be running.
        for (status, signed) in [(429, false), (502, true), (502, false), (503, false)] {
            assert!(may_have_started(&http(status, signed)), "{status} {signed}");
        }
    }

    #[test]
    fn versions_parse_and_gate_features() {
        assert_eq!(EnvdVersion::parse("0.6.13"), Some(EnvdVersion(0, 6, 13)));
        assert_eq!(
            EnvdVersion::parse("v0.5.2-beta"),
            Some(EnvdVersion(0, 5, 2))
        );
        assert_eq!(
            EnvdVersion::parse("99.99.99"),
            Some(EnvdVersion(99, 99, 99))
        );
        assert_eq!(EnvdVersion::parse("x"), None);
        assert!(EnvdVersion(0, 5, 1) < EnvdVersion::CLOSE_STDIN);
        assert!(EnvdVersion(0, 6, 13) >= EnvdVersion::OCTET_STREAM_UPLOAD);
    }

    #[test]
    fn only_a_gone_process_or_closed_pipe_is_a_benign_stdin_failure() {
        let rpc = |code, m: &str| CallError::Rpc {
            error: RpcError {
                code,
                message: m.into(),
            },
            http_status: 500,
            retry_after: None,
            in_stream: false,
        };
        assert!(stdin_gone(&rpc(
            Code::NotFound,
            "process with pid 4 not found"
        )));
        assert!(stdin_gone(&rpc(
            Code::Internal,
            "error writing to stdin of process '4': write |1: broken pipe"
        )));
        assert!(!stdin_gone(&rpc(Code::Internal, "disk on fire")));
        assert!(!stdin_gone(&rpc(Code::Unauthenticated, "broken pipe")));
        assert!(!stdin_gone(&CallError::Protocol("x".into())));
    }
}
