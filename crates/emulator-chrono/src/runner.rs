//! Runs one program in a fresh sandbox (Chrono is a one-shot code runtime: one sandbox per
//! execution, removed afterwards), with the server-side timeout, cancel, and the sandbox
//! vanishing on demand.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine as _;
use execseam_chrono_contract::RunEnd;
use execseam_chrono_contract::wire::{ExecOutput, ExecuteRequest, Language};
use execseam_core::{Command, Event, Exec, Exit};
use tokio::sync::mpsc;

use execseam_emulator_kit::clock::hex_id;
use execseam_emulator_kit::sandbox::{Dir, Mount, User};
use execseam_emulator_kit::{Sandbox, SandboxSpec, Sandboxing};

/// The program's working directory (and `HOME`) inside the sandbox.
pub const WORKDIR: &str = "/workspace";

/// How each language is run: an argv prefix, to which the program file's path is appended.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Runtimes {
    /// `python`.
    pub python: Option<Vec<String>>,
    /// `javascript`.
    pub javascript: Option<Vec<String>>,
    /// `typescript`: a runtime that runs a `.ts` file. When `None`, TypeScript runs on the
    /// `javascript` runtime with its types stripped by the emulator (`execseam-typescript`).
    pub typescript: Option<Vec<String>>,
    /// `bash`.
    pub bash: Option<Vec<String>>,
}

impl Runtimes {
    /// What this machine has: the real `python3` binary (not a pyenv shim, which needs the
    /// host's HOME), `node`, `bash`, and for TypeScript `EXECSEAM_CHRONO_TYPESCRIPT` (an argv
    /// prefix, space-separated) if set, else `node` with the types stripped here.
    pub fn detect() -> Runtimes {
        static DETECTED: OnceLock<Runtimes> = OnceLock::new();
        DETECTED
            .get_or_init(|| {
                let python = probe("python3", &["-c", "import sys; print(sys.executable)"])
                    .filter(|p| !p.is_empty())
                    .map(|p| vec![p]);
                let javascript = which("node").map(|p| vec![p]);
                let bash = which("bash").map(|p| vec![p]);
                let typescript = std::env::var("EXECSEAM_CHRONO_TYPESCRIPT")
                    .ok()
                    .filter(|v| !v.trim().is_empty())
                    .map(|v| v.split_whitespace().map(str::to_owned).collect());
                Runtimes {
                    python,
                    javascript,
                    typescript,
                    bash,
                }
            })
            .clone()
    }

    /// Read-only mounts that make the interpreters visible inside a sandbox, whose root hides
    /// the host's `/root`, `/home`, `/tmp` and the checkout: for each absolute path of a prefix
    /// outside the system directories, its installation (the directory holding `node_modules`,
    /// or the parent of a `bin` directory, or the file's directory).
    pub fn mounts(&self) -> Vec<Mount> {
        const SYSTEM: [&str; 6] = ["/usr/", "/bin/", "/sbin/", "/lib", "/opt/", "/etc/"];
        let mut out: Vec<Mount> = Vec::new();
        let all = [&self.python, &self.javascript, &self.typescript, &self.bash];
        for arg in all.into_iter().flatten().flatten() {
            if !arg.starts_with('/') || SYSTEM.iter().any(|s| arg.starts_with(s)) {
                continue;
            }
            let path = std::path::Path::new(arg);
            let install = if let Some(i) = arg.find("/node_modules/") {
                std::path::PathBuf::from(&arg[..i])
            } else {
                match path.parent() {
                    Some(bin) if bin.ends_with("bin") => bin.parent().unwrap_or(bin).to_path_buf(),
                    Some(dir) => dir.to_path_buf(),
                    None => continue,
                }
            };
            let sandbox = install.to_string_lossy().into_owned();
            if !out.iter().any(|m| m.sandbox == sandbox) {
                out.push(Mount {
                    host: install,
                    sandbox,
                    read_only: true,
                });
            }
        }
        out
    }

    /// The prefix for `language` (TypeScript: its own runtime, else `node`).
    pub fn get(&self, language: Language) -> Option<&[String]> {
        match language {
            Language::Python => self.python.as_deref(),
            Language::Javascript => self.javascript.as_deref(),
            Language::Typescript => self.typescript.as_deref().or(self.javascript.as_deref()),
            Language::Bash => self.bash.as_deref(),
        }
    }

    /// The program file's extension and contents for `req`: TypeScript without its own
    /// runtime is compiled here (an ES module as `.mjs`; a program that does not compile
    /// becomes one that reports the diagnostics on stderr and exits 1, as tsx does).
    fn program(&self, req: &ExecuteRequest) -> (&'static str, String) {
        match req.language {
            Language::Python => ("py", req.script.clone()),
            Language::Javascript => ("js", req.script.clone()),
            Language::Typescript if self.typescript.is_some() => ("ts", req.script.clone()),
            Language::Typescript => match execseam_typescript::to_javascript(&req.script) {
                Ok(js) if js.module => ("mjs", js.code),
                Ok(js) => ("js", js.code),
                Err(d) => ("js", d.reporter()),
            },
            Language::Bash => ("sh", req.script.clone()),
        }
    }
}

fn probe(program: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn which(program: &str) -> Option<String> {
    probe("sh", &["-c", &format!("command -v {program}")]).filter(|p| p.starts_with('/'))
}

/// A chunk for `/execute/stream`.
#[derive(Debug)]
pub enum Chunk {
    /// stdout text.
    Stdout(String),
    /// stderr text.
    Stderr(String),
}

/// Runs programs; counts them.
#[derive(Debug)]
pub struct Runner {
    pub(crate) runtimes: Runtimes,
    pub(crate) sandboxing: Sandboxing,
    executions: AtomicU64,
    running: AtomicUsize,
}

/// Decrements the running count when a run ends (also when its future is dropped).
struct Running<'a>(&'a AtomicUsize);

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn spec(id: &str) -> SandboxSpec {
    let env: BTreeMap<String, String> = [("LANG", "C.UTF-8"), ("PYTHONUNBUFFERED", "1")]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    // The user Chrono runs programs as is undocumented; root, as the other code runtimes here.
    SandboxSpec::new("chrono", id, User::root(), env).dirs([Dir::root(WORKDIR)])
}

impl Runner {
    pub(crate) fn new(runtimes: Runtimes, sandboxing: Sandboxing) -> Runner {
        Runner {
            runtimes,
            sandboxing,
            executions: AtomicU64::new(0),
            running: AtomicUsize::new(0),
        }
    }

    /// Programs started so far (a process was spawned).
    pub fn executions(&self) -> u64 {
        self.executions.load(Ordering::SeqCst)
    }

    /// Programs running now.
    pub fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    /// Takes a running slot if fewer than `limit` are taken.
    pub(crate) fn try_reserve(&self, limit: usize) -> bool {
        self.running
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < limit).then_some(n + 1)
            })
            .is_ok()
    }

    /// Gives back a slot reserved with [`try_reserve`](Self::try_reserve) that was not used.
    pub(crate) fn release(&self) {
        self.running.fetch_sub(1, Ordering::SeqCst);
    }

    /// Runs `req` (a running slot must already be reserved; it is released when this ends).
    /// `started` is called once the process is spawned; `chunks` receives output as it comes.
    pub(crate) async fn run(
        &self,
        req: &ExecuteRequest,
        default_timeout: u32,
        cancel: impl Future<Output = ()>,
        vanish_after: Option<Duration>,
        chunks: Option<mpsc::UnboundedSender<Chunk>>,
        started: impl FnOnce(),
    ) -> RunEnd {
        let _slot = Running(&self.running);
        let Some(prefix) = self.runtimes.get(req.language) else {
            return RunEnd::Invalid(format!(
                "language {} is not available in this sandbox image",
                req.language
            ));
        };
        let id = format!("chrono-{}", hex_id(12));
        let sandbox = match Sandbox::create(id.clone(), spec(&id), &self.sandboxing) {
            Ok(s) => s,
            Err(e) => return RunEnd::CreationFailed(e.to_string()),
        };
        let (ext, source) = self.runtimes.program(req);
        let program = format!("/tmp/.chrono-program/main.{ext}");
        let mut files = vec![(program.clone(), source.into_bytes())];
        for f in &req.input_files {
            let Some(path) = input_path(&f.path) else {
                return RunEnd::Invalid(format!("input file path {:?} is not allowed", f.path));
            };
            let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(&f.content) else {
                return RunEnd::Invalid(format!("input file {:?} is not valid base64", f.path));
            };
            files.push((path, bytes));
        }
        if let Err(e) = write(&sandbox, files).await {
            return RunEnd::Invalid(format!("cannot write the program or its input files: {e}"));
        }
        let mut argv: Vec<String> = prefix.to_vec();
        argv.push(sandbox.visible_path(&program));
        // The server owns NYXID_*: callers cannot set them (seed 004).
        let env = req
            .env
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "NYXID_API_KEY" | "NYXID_BASE_URL"));
        let cmd = match Command::builder(argv)
            .workdir(sandbox.visible_path(WORKDIR))
            .envs(env)
            .build()
        {
            Ok(c) => c,
            Err(e) => return RunEnd::Invalid(e.to_string()),
        };
        let timeout = Duration::from_secs(u64::from(req.timeout_secs.unwrap_or(default_timeout)));
        self.executions.fetch_add(1, Ordering::SeqCst);
        started();
        let t0 = Instant::now();
        let run = collect(&sandbox, cmd, chunks);
        let vanish = async {
            match vanish_after {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        let end = tokio::select! {
            r = run => match r {
                Ok((stdout, stderr, exit)) => RunEnd::Exited(ExecOutput {
                    stdout: String::from_utf8_lossy(&stdout).into_owned(),
                    stderr: String::from_utf8_lossy(&stderr).into_owned(),
                    exit_code: match exit {
                        Exit::Code(c) => c,
                        Exit::Signal(s) => 128 + s,
                    },
                    execution_time_ms: Some(t0.elapsed().as_millis() as u64),
                    display_data: None,
                    files: None,
                }),
                Err(e) => RunEnd::CreationFailed(e.to_string()),
            },
            () = tokio::time::sleep(timeout) => RunEnd::TimedOut,
            () = cancel => RunEnd::Cancelled,
            () = vanish => RunEnd::Uncertain("the sandbox disappeared while the program ran".into()),
        };
        // Dropping the exec future killed the process group; this removes the root.
        sandbox.destroy();
        end
    }
}

async fn collect(
    sandbox: &Sandbox,
    cmd: Command,
    chunks: Option<mpsc::UnboundedSender<Chunk>>,
) -> Result<(Vec<u8>, Vec<u8>, Exit), execseam_core::Error> {
    let Some(tx) = chunks else {
        let o = sandbox.exec().exec(cmd).await?;
        return Ok((o.stdout.to_vec(), o.stderr.to_vec(), o.exit));
    };
    let streaming = sandbox
        .exec()
        .streaming()
        .expect("the local adapter streams");
    let mut events = streaming.exec_stream(cmd).await?;
    let (mut out, mut err) = (Vec::new(), Vec::new());
    while let Some(ev) = events.next().await {
        match ev? {
            Event::Stdout(b) => {
                let _ = tx.send(Chunk::Stdout(String::from_utf8_lossy(&b).into_owned()));
                out.extend_from_slice(&b);
            }
            Event::Stderr(b) => {
                let _ = tx.send(Chunk::Stderr(String::from_utf8_lossy(&b).into_owned()));
                err.extend_from_slice(&b);
            }
            Event::Exit(exit) => return Ok((out, err, exit)),
        }
    }
    Err(execseam_core::Error::protocol(
        "the stream ended without an exit",
    ))
}

/// An input file path: relative to the working directory (no `..`), or absolute under it or
/// `/tmp`.
fn input_path(p: &str) -> Option<String> {
    if p.is_empty() || p.split('/').any(|c| c == "..") || p.contains('\0') {
        return None;
    }
    if p.starts_with('/') {
        (p.starts_with(&format!("{WORKDIR}/")) || p.starts_with("/tmp/")).then(|| p.to_owned())
    } else {
        Some(format!("{WORKDIR}/{p}"))
    }
}

async fn write(sandbox: &Arc<Sandbox>, files: Vec<(String, Vec<u8>)>) -> std::io::Result<()> {
    sandbox
        .fs(move |fs| {
            for (path, bytes) in files {
                let p = fs.path(&path);
                if let Some(dir) = p.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                std::fs::write(p, bytes)?;
            }
            Ok(())
        })
        .await
}
