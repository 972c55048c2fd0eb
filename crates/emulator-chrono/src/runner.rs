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
use execseam_chrono_contract::wire::{
    self, ExecOutput, ExecuteRequest, Language, OutputType, RetrievedFile,
};
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

/// Where Python dependencies are installed (`pip --target`; on the program's `PYTHONPATH`).
const PYTHON_DEPS: &str = "/tmp/.chrono-deps/python";
/// The program's directory: npm installs beside it, so `require` and `import` find the packages.
const PROGRAM_DIR: &str = "/tmp/.chrono-program";
/// How long a dependency install may take (Chrono's `DEPENDENCY_INSTALL_TIMEOUT_SECS`; its value
/// is not published: chosen).
const INSTALL_TIMEOUT: Duration = Duration::from_secs(300);
/// The largest retrieved file, and all of them together (Chrono's `MAX_OUTPUT_FILE_SIZE_BYTES`
/// and `MAX_OUTPUT_TOTAL_SIZE_BYTES`; values not published: chosen).
const MAX_FILE_BYTES: u64 = 10 << 20;
const MAX_FILES_BYTES: u64 = 32 << 20;

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
        let mut sandbox_spec = spec(&id);
        if req.network_enabled == Some(false) {
            sandbox_spec = sandbox_spec.without_network();
        }
        let sandbox = match Sandbox::create(id.clone(), sandbox_spec, &self.sandboxing) {
            Ok(s) => s,
            Err(e) if e.kind() == std::io::ErrorKind::Unsupported => {
                return RunEnd::Invalid(format!("network_enabled=false: {e}"));
            }
            Err(e) => return RunEnd::CreationFailed(e.to_string()),
        };
        let (ext, source) = self.runtimes.program(req);
        let program = format!("{PROGRAM_DIR}/main.{ext}");
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
        tokio::pin!(cancel);
        if !req.dependencies.is_empty() {
            let install = self.install(&sandbox, req);
            let failed = tokio::select! {
                r = install => r,
                () = &mut cancel => Err(RunEnd::Cancelled),
            };
            if let Err(end) = failed {
                sandbox.destroy();
                return end;
            }
        }
        let mut argv: Vec<String> = prefix.to_vec();
        argv.push(sandbox.visible_path(&program));
        // The server owns NYXID_*: callers cannot set them (seed 004).
        let mut env: Vec<(String, String)> = req
            .env
            .iter()
            .filter(|(k, _)| !wire::SERVER_OWNED_ENV.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if req.language == Language::Python && !req.dependencies.is_empty() {
            env.retain(|(k, _)| k != "PYTHONPATH");
            env.push(("PYTHONPATH".into(), sandbox.visible_path(PYTHON_DEPS)));
        }
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
                    files: if req.output_type == Some(OutputType::File) {
                        Some(retrieve(&sandbox, &req.retrieve_files).await)
                    } else {
                        None
                    },
                    stdout: String::from_utf8_lossy(&stdout).into_owned(),
                    stderr: String::from_utf8_lossy(&stderr).into_owned(),
                    exit_code: match exit {
                        Exit::Code(c) => c,
                        Exit::Signal(s) => 128 + s,
                    },
                    execution_time_ms: Some(t0.elapsed().as_millis() as u64),
                    display_data: None,
                }),
                Err(e) => RunEnd::CreationFailed(e.to_string()),
            },
            () = tokio::time::sleep(timeout) => RunEnd::TimedOut,
            () = &mut cancel => RunEnd::Cancelled,
            () = vanish => RunEnd::Uncertain("the sandbox disappeared while the program ran".into()),
        };
        // Dropping the exec future killed the process group; this removes the root.
        sandbox.destroy();
        end
    }
}

impl Runner {
    /// Installs the request's dependencies in the sandbox, with the sandbox's network: pip into
    /// [`PYTHON_DEPS`] for Python, npm beside the program for JavaScript and TypeScript (bash
    /// has none: `check_fields` refused it). `Err` ends the run: `DependenciesFailed` with the
    /// installer's output (exit 124 when it ran out of time), or `Invalid`.
    async fn install(&self, sandbox: &Arc<Sandbox>, req: &ExecuteRequest) -> Result<(), RunEnd> {
        let (installer, mut argv): (&str, Vec<String>) = match req.language {
            Language::Python => {
                let Some(python) = self.runtimes.python.as_deref() else {
                    return Err(RunEnd::Invalid(
                        "dependencies: python is not available in this sandbox image".into(),
                    ));
                };
                let mut argv = python.to_vec();
                argv.extend(
                    [
                        "-m",
                        "pip",
                        "install",
                        "--no-input",
                        "--disable-pip-version-check",
                        "--no-cache-dir",
                        "--target",
                        &sandbox.visible_path(PYTHON_DEPS),
                    ]
                    .map(str::to_owned),
                );
                ("pip", argv)
            }
            Language::Javascript | Language::Typescript => (
                "npm",
                [
                    "npm",
                    "install",
                    "--no-audit",
                    "--no-fund",
                    "--no-save",
                    "--no-package-lock",
                    "--prefix",
                    &sandbox.visible_path(PROGRAM_DIR),
                ]
                .map(str::to_owned)
                .to_vec(),
            ),
            Language::Bash => {
                return Err(RunEnd::Invalid(
                    "dependencies: bash has no package manager".into(),
                ));
            }
        };
        // `--`: a dependency is never read as an installer option.
        argv.push("--".into());
        argv.extend(req.dependencies.iter().cloned());
        let cmd = Command::builder(argv)
            .workdir(sandbox.visible_path(WORKDIR))
            .build()
            .map_err(|e| RunEnd::Invalid(format!("dependencies: {e}")))?;
        let t0 = Instant::now();
        let (stdout, stderr, exit) =
            match tokio::time::timeout(INSTALL_TIMEOUT, collect(sandbox, cmd, None)).await {
                Ok(Ok(r)) => r,
                Ok(Err(e)) if e.kind() == execseam_core::ErrorKind::NotFound => {
                    return Err(RunEnd::Invalid(format!(
                        "dependencies: {installer} is not available in this sandbox image"
                    )));
                }
                Ok(Err(e)) => return Err(RunEnd::CreationFailed(e.to_string())),
                Err(_) => (
                    Vec::new(),
                    format!(
                        "{installer} did not finish within {} s\n",
                        INSTALL_TIMEOUT.as_secs()
                    )
                    .into_bytes(),
                    Exit::Code(124),
                ),
            };
        let exit_code = match exit {
            Exit::Code(0) => return Ok(()),
            Exit::Code(c) => c,
            Exit::Signal(s) => 128 + s,
        };
        Err(RunEnd::DependenciesFailed {
            installer: installer.to_owned(),
            output: ExecOutput {
                stdout: String::from_utf8_lossy(&stdout).into_owned(),
                stderr: String::from_utf8_lossy(&stderr).into_owned(),
                exit_code,
                execution_time_ms: Some(t0.elapsed().as_millis() as u64),
                display_data: None,
                files: None,
            },
        })
    }
}

/// The files `patterns` name, relative to [`WORKDIR`], read inside the sandbox: one entry per
/// matching file, sorted by path (`*`, `?` and `[…]` match within one path component; a hidden
/// name only when the pattern's component starts with `.`); a pattern that matches nothing is
/// one entry with its text as `path` and `error: "no such file"`; a directory or a file over
/// [`MAX_FILE_BYTES`] (or past [`MAX_FILES_BYTES`] in all) has `error` and no `content`.
async fn retrieve(sandbox: &Arc<Sandbox>, patterns: &[String]) -> Vec<RetrievedFile> {
    let patterns = patterns.to_vec();
    let listed = sandbox
        .fs(move |fs| {
            let mut found: BTreeMap<String, RetrievedFile> = BTreeMap::new();
            let mut missing = Vec::new();
            for pattern in &patterns {
                let rel = pattern
                    .strip_prefix(&format!("{WORKDIR}/"))
                    .unwrap_or(pattern)
                    .trim_start_matches("./");
                let matches = expand(fs, rel);
                if matches.is_empty() {
                    missing.push(RetrievedFile {
                        path: pattern.clone(),
                        content: None,
                        size: None,
                        error: Some("no such file".into()),
                    });
                }
                for m in matches {
                    found.entry(m.clone()).or_insert(RetrievedFile {
                        path: m,
                        content: None,
                        size: None,
                        error: None,
                    });
                }
            }
            let mut total = 0u64;
            for f in found.values_mut() {
                let path = fs.path(&format!("{WORKDIR}/{}", f.path));
                let meta = match std::fs::metadata(&path) {
                    Ok(m) => m,
                    Err(e) => {
                        f.error = Some(e.to_string());
                        continue;
                    }
                };
                if meta.is_dir() {
                    f.error = Some("is a directory".into());
                    continue;
                }
                f.size = Some(meta.len());
                if meta.len() > MAX_FILE_BYTES {
                    f.error = Some(format!("larger than {MAX_FILE_BYTES} bytes"));
                    continue;
                }
                if total + meta.len() > MAX_FILES_BYTES {
                    f.error = Some(format!(
                        "the retrieved files exceed {MAX_FILES_BYTES} bytes in all"
                    ));
                    continue;
                }
                match std::fs::read(&path) {
                    Ok(bytes) => {
                        total += bytes.len() as u64;
                        f.size = Some(bytes.len() as u64);
                        f.content = Some(base64::engine::general_purpose::STANDARD.encode(bytes));
                    }
                    Err(e) => f.error = Some(e.to_string()),
                }
            }
            let mut out: Vec<RetrievedFile> = found.into_values().collect();
            out.extend(missing);
            Ok(out)
        })
        .await;
    listed.unwrap_or_else(|e| {
        vec![RetrievedFile {
            path: String::new(),
            content: None,
            size: None,
            error: Some(format!("the files could not be read: {e}")),
        }]
    })
}

/// The paths below [`WORKDIR`] (relative, `/`-separated) that `pattern` matches, sorted.
fn expand(fs: &execseam_emulator_kit::sandbox::Fs, pattern: &str) -> Vec<String> {
    let mut current = vec![String::new()];
    for component in pattern.split('/').filter(|c| !c.is_empty() && *c != ".") {
        let mut next = Vec::new();
        for dir in &current {
            let join = |name: &str| {
                if dir.is_empty() {
                    name.to_owned()
                } else {
                    format!("{dir}/{name}")
                }
            };
            if !component.contains(['*', '?', '[']) {
                let p = join(component);
                if std::fs::symlink_metadata(fs.path(&format!("{WORKDIR}/{p}"))).is_ok() {
                    next.push(p);
                }
                continue;
            }
            let Ok(entries) = std::fs::read_dir(fs.path(&format!("{WORKDIR}/{dir}"))) else {
                continue;
            };
            for e in entries.flatten() {
                let Some(name) = e.file_name().to_str().map(str::to_owned) else {
                    continue;
                };
                if name.starts_with('.') && !component.starts_with('.') {
                    continue;
                }
                if glob_match(component.as_bytes(), name.as_bytes()) {
                    next.push(join(&name));
                }
            }
        }
        current = next;
    }
    current.retain(|p| !p.is_empty());
    current.sort();
    current
}

/// `*`, `?` and `[…]` (with `!` or `^` to negate, and ranges) against one path component.
fn glob_match(p: &[u8], s: &[u8]) -> bool {
    match p.first() {
        None => s.is_empty(),
        Some(b'*') => (0..=s.len()).any(|i| glob_match(&p[1..], &s[i..])),
        Some(b'?') => !s.is_empty() && glob_match(&p[1..], &s[1..]),
        Some(b'[') => {
            let Some(close) = p.iter().skip(2).position(|&b| b == b']').map(|i| i + 2) else {
                return !s.is_empty() && s[0] == b'[' && glob_match(&p[1..], &s[1..]);
            };
            let Some(&c) = s.first() else { return false };
            let mut set = &p[1..close];
            let negate = matches!(set.first(), Some(b'!' | b'^'));
            if negate {
                set = &set[1..];
            }
            let mut hit = false;
            let mut i = 0;
            while i < set.len() {
                if i + 2 < set.len() && set[i + 1] == b'-' {
                    hit |= set[i] <= c && c <= set[i + 2];
                    i += 3;
                } else {
                    hit |= set[i] == c;
                    i += 1;
                }
            }
            hit != negate && glob_match(&p[close + 1..], &s[1..])
        }
        Some(&b) => s.first() == Some(&b) && glob_match(&p[1..], &s[1..]),
    }
}

/// A `retrieve_files` pattern: relative to the working directory, or absolute under it; no `..`.
pub(crate) fn retrieve_pattern_ok(p: &str) -> bool {
    !p.is_empty()
        && !p.contains('\0')
        && !p.split('/').any(|c| c == "..")
        && (!p.starts_with('/') || p.starts_with(&format!("{WORKDIR}/")))
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
