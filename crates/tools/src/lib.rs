#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! The builtin tools of an agent host — glob, list, grep, read, write, apply_patch, bash and code — over
//! any execseam adapter (`&dyn Exec`).
//!
//! Each tool builds one [`Command`] with its [`Tool`] set and runs it through the seam, relying
//! only on POSIX tools present in minimal images (`sh`, `find`, `grep`, `cat`, `tail`, `head`,
//! `ls`, `cp`, `mv`, `mkdir`, `rm`; GNU or busybox). Listings come back NUL-delimited, so any
//! byte but NUL may appear in a name.
//!
//! # Ordering and truncation belong to the library
//!
//! No sandbox documents an order, a cursor or a cap for any listing, and `find`'s order depends on
//! the filesystem. So [`Tools::glob`], [`Tools::list`] and [`Tools::grep`] **collect every
//! record, sort by path relative to the walk root in plain byte order (then by line number for
//! grep), and only then truncate** at `limit`; the [`Listing`] says how many items were omitted.
//! This happens in one place (`listing.rs`), for every adapter, whether the backend ran the
//! command or served it natively (see [`execseam_core::native`]). The conformance suite proves it
//! with a hostile adapter that shuffles records and splits output into random chunks.
//!
//! # Names that are not UTF-8
//!
//! Listed as they are: a [`RelPath`] holds the raw bytes and sorts by them; [`RelPath::as_str`] is
//! `None` for such a name. Such a path cannot be passed back to [`Tools::read`] or
//! [`Tools::write`] (argv is UTF-8); use [`Tools::bash`] with a glob for those.
//!
//! # Errors
//!
//! [`ToolError`]: typed failures about the request (a missing file, a missing directory to write
//! into, permission denied, an invalid regex or glob, a patch that does not apply), and
//! [`ToolError::Exec`] wrapping the seam's [`execseam_core::Error`] for infrastructure failures.
//! A tool never turns a failure into an empty success.
//!
//! ```no_run
//! # async fn demo(exec: &dyn execseam_core::Exec) -> Result<(), execseam_tools::ToolError> {
//! use execseam_tools::{ReadRange, Tools};
//!
//! let tools = Tools::new(exec);
//! let rs = tools.glob("/work", "src/**/*.rs", 100).await?;
//! for p in &rs.items {
//!     println!("{p}");
//! }
//! if rs.omitted > 0 {
//!     println!("… and {} more", rs.omitted);
//! }
//! let head = tools.read("/work/README.md", ReadRange::Lines { first: 1, count: Some(20) }).await?;
//! tools.write("/work/notes.txt", "hello\n").await?;
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

mod error;
mod file;
mod glob;
mod listing;
mod patch;
mod path;

use bytes::Bytes;
use execseam_core::degrade::temp_path;
use execseam_core::native::{self, Failure, GrepRequest, NativeRequest};
use std::time::Duration;

pub use execseam_core::code::{CodeRequest, Language};
use execseam_core::{Command, Deadline, Error, ErrorKind, Exec, Exit, Output, Retry, Tool};

pub use error::ToolError;
pub use file::ReadRange;
pub use glob::Glob;
pub use listing::{Entry, Listing, Match};
pub use path::{RelPath, escape, normalize_absolute};

/// Options of [`Tools::grep`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GrepOptions {
    /// Only files whose path relative to the root matches this glob. A glob without `/` matches
    /// the file name at any depth (`*.rs` is `**/*.rs`), as ripgrep's `--glob` does.
    pub glob: Option<String>,
    /// The pattern is a plain string, not a regular expression (`grep -F`).
    pub fixed: bool,
    /// ASCII case-insensitive matching (`grep -i`).
    pub ignore_case: bool,
}

/// Options of [`Tools::write_with`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteOptions {
    /// Create missing parent directories (`mkdir -p`) instead of failing with
    /// [`ToolError::NotFound`].
    pub create_parents: bool,
}

/// What [`Tools::apply_patch`] did to one file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// The file was created.
    Created,
    /// The file was modified.
    Modified,
    /// The file was deleted.
    Deleted,
}

/// One file touched by [`Tools::apply_patch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PatchedFile {
    /// Relative to the root, as named by the patch (prefixes dropped).
    pub path: String,
    /// What happened to it.
    pub change: Change,
}

/// The tools, over one adapter.
#[derive(Clone, Copy)]
pub struct Tools<'a> {
    exec: &'a dyn Exec,
    stream: bool,
}

impl std::fmt::Debug for Tools<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tools")
            .field("provider", &self.exec.provider())
            .field("stream", &self.stream)
            .finish()
    }
}

pub(crate) fn failure_error(failure: Failure, detail: String, pattern: Option<&str>) -> ToolError {
    match failure {
        Failure::NotFound => ToolError::NotFound { path: detail },
        Failure::NotADirectory => ToolError::NotADirectory { path: detail },
        Failure::IsADirectory => ToolError::IsADirectory { path: detail },
        Failure::PermissionDenied => ToolError::PermissionDenied { path: detail },
        Failure::InvalidPattern => ToolError::InvalidPattern {
            pattern: pattern.unwrap_or_default().to_owned(),
            message: detail,
        },
        // `Failure` is non-exhaustive: a code this library does not know yet.
        #[allow(unreachable_patterns)]
        other => ToolError::Failed {
            tool: Tool::EXEC,
            exit: Exit::Code(native::STATUS),
            stderr: format!("{other}: {detail}"),
        },
    }
}

pub(crate) fn failed(tool: &Tool, out: &Output) -> ToolError {
    let n = out.stderr.len().min(4096);
    ToolError::Failed {
        tool: tool.clone(),
        exit: out.exit,
        stderr: String::from_utf8_lossy(&out.stderr[..n]).into_owned(),
    }
}

/// Checks a file command's output (read, write, stage, commit): `Ok` on exit 0.
fn check_file_output(tool: &Tool, out: &Output) -> Result<(), ToolError> {
    if let Some((failure, detail)) = Failure::from_output(out) {
        return Err(failure_error(failure, detail, None));
    }
    if out.exit.success() {
        Ok(())
    } else {
        Err(failed(tool, out))
    }
}

impl<'a> Tools<'a> {
    /// The tools over `exec`.
    pub fn new(exec: &'a dyn Exec) -> Tools<'a> {
        Tools {
            exec,
            stream: false,
        }
    }

    /// Collect every command's output through the adapter's streaming interface when it has one
    /// ([`EventStream::collect`](execseam_core::EventStream::collect)), instead of `exec`. The
    /// results are identical; this exists to prove it.
    #[must_use]
    pub fn streaming(mut self, yes: bool) -> Tools<'a> {
        self.stream = yes;
        self
    }

    /// The adapter.
    pub fn exec(&self) -> &'a dyn Exec {
        self.exec
    }

    async fn run(&self, cmd: Command) -> Result<Output, ToolError> {
        if self.stream
            && let Some(s) = self.exec.streaming()
        {
            return Ok(s.exec_stream(cmd).await?.collect().await?);
        }
        Ok(self.exec.exec(cmd).await?)
    }

    /// Every entry below `root` that is not a directory and whose path relative to `root` matches
    /// `pattern` (see [`Glob`] for the syntax), sorted by that path in byte order, the first
    /// `limit` kept.
    ///
    /// The walk never follows symlinks and narrows on the pattern's literal leading directories;
    /// a missing one matches nothing. Errors: `root` missing ([`ToolError::NotFound`]), not a
    /// directory, not listable ([`ToolError::PermissionDenied`]); a malformed pattern
    /// ([`ToolError::InvalidPattern`], before anything runs).
    pub async fn glob(
        &self,
        root: &str,
        pattern: &str,
        limit: usize,
    ) -> Result<Listing<RelPath>, ToolError> {
        let root = normalize_absolute("root", root)?;
        let glob = Glob::new(pattern)?;
        let req = listing::glob_request(&root, &glob);
        let NativeRequest::Glob(greq) = &req else {
            unreachable!("glob_request builds a glob request")
        };
        let out = self.run(req.command()?).await?;
        listing::glob_output(self.exec.provider(), greq, &glob, &out, limit)
    }

    /// Every entry below `dir`, down to `depth` levels (1 = its children; `None` = all), sorted by
    /// path relative to `dir` in byte order, the first `limit` kept. Directories are marked
    /// ([`Entry::is_dir`]); symlinks are entries, never followed.
    pub async fn list(
        &self,
        dir: &str,
        depth: Option<u32>,
        limit: usize,
    ) -> Result<Listing<Entry>, ToolError> {
        let root = normalize_absolute("dir", dir)?;
        if depth == Some(0) {
            return Err(ToolError::invalid("depth 0 lists nothing; use 1 or more"));
        }
        let out = self
            .run(NativeRequest::list(root.clone(), depth).command()?)
            .await?;
        listing::list_output(self.exec.provider(), &root, &out, limit)
    }

    /// Every line matching `regex` (POSIX ERE, as `grep -E` in the C locale) in every regular file
    /// below `root` (filtered by [`GrepOptions::glob`]), sorted by path then line number, the first
    /// `limit` kept. Binary files are searched as text (every line, NUL bytes included in
    /// [`Match::text`]).
    ///
    /// An invalid regular expression is [`ToolError::InvalidPattern`] (with the sandbox `grep`'s
    /// message), never an empty result. Files the sandbox user cannot read are reported in
    /// [`Listing::skipped`].
    pub async fn grep(
        &self,
        root: &str,
        regex: &str,
        options: &GrepOptions,
        limit: usize,
    ) -> Result<Listing<Match>, ToolError> {
        let root = normalize_absolute("root", root)?;
        if regex.contains(['\n', '\0']) {
            return Err(ToolError::InvalidPattern {
                pattern: regex.to_owned(),
                message: "a pattern cannot hold a newline or NUL byte".into(),
            });
        }
        let filter = match &options.glob {
            None => None,
            Some(g) if g.contains('/') => Some(Glob::new(g)?),
            Some(g) => {
                Glob::new(g)?; // report errors against the pattern as written
                Some(Glob::new(&format!("**/{g}"))?)
            }
        };
        let pf = filter.as_ref().map(Glob::prefilter);
        let req = GrepRequest {
            root: root.clone(),
            pattern: regex.to_owned(),
            start: pf.as_ref().map(|p| p.start.clone()).unwrap_or_default(),
            name: pf.and_then(|p| p.name),
            fixed: options.fixed,
            ignore_case: options.ignore_case,
        };
        let out = self
            .run(NativeRequest::Grep(req.clone()).command()?)
            .await?;
        if let Some((Failure::InvalidPattern, message)) = Failure::from_output(&out) {
            return Err(ToolError::InvalidPattern {
                pattern: regex.to_owned(),
                message,
            });
        }
        listing::grep_output(self.exec.provider(), &req, filter.as_ref(), &out, limit)
    }

    /// The bytes of the file at `path` (absolute), or the part `range` selects.
    ///
    /// Errors: missing ([`ToolError::NotFound`]), a directory ([`ToolError::IsADirectory`]),
    /// unreadable ([`ToolError::PermissionDenied`]).
    pub async fn read(&self, path: &str, range: ReadRange) -> Result<Bytes, ToolError> {
        let path = normalize_absolute("path", path)?;
        let out = self.run(file::read_command(&path, range)?).await?;
        check_file_output(&Tool::READ, &out)?;
        Ok(out.stdout)
    }

    /// Writes `content` to the file at `path` (absolute), atomically: through stdin into a
    /// temporary file in the same directory, then renamed over the path. An existing file's mode
    /// is kept; a symlink at the path is replaced, not followed.
    ///
    /// Errors: the directory is missing ([`ToolError::NotFound`] with the directory's path), the
    /// path is a directory ([`ToolError::IsADirectory`]), the directory or the file is not
    /// writable ([`ToolError::PermissionDenied`]); an adapter without stdin gives
    /// [`ToolError::Exec`] of kind `Unsupported`.
    pub async fn write(&self, path: &str, content: impl Into<Bytes>) -> Result<(), ToolError> {
        self.write_with(path, content, WriteOptions::default())
            .await
    }

    /// [`Tools::write`] with options.
    pub async fn write_with(
        &self,
        path: &str,
        content: impl Into<Bytes>,
        options: WriteOptions,
    ) -> Result<(), ToolError> {
        let path = normalize_absolute("path", path)?;
        if path == "/" {
            return Err(ToolError::IsADirectory { path });
        }
        let content = content.into();
        self.check_stdin(content.len())?;
        let dir = parent(&path);
        let temp = temp_path(dir);
        let cmd = file::write_command(
            Tool::WRITE,
            &path,
            &temp,
            options.create_parents,
            false,
            content,
        )?;
        let out = self.run(cmd).await?;
        check_file_output(&Tool::WRITE, &out)
    }

    fn check_stdin(&self, len: usize) -> Result<(), ToolError> {
        let caps = self.exec.capabilities();
        if !caps.stdin.is_supported() {
            return Err(error::stdin_unsupported(self.exec.provider()));
        }
        if let Some(max) = caps.max_stdin
            && len as u64 > max
        {
            return Err(ToolError::Exec(
                Error::unsupported(format!(
                    "{len} bytes exceed this adapter's stdin limit of {max} bytes"
                ))
                .with_provider(self.exec.provider().to_owned())
                .with_operation("write"),
            ));
        }
        Ok(())
    }

    /// Applies a unified diff (see the `patch` module docs for what is accepted) to files below
    /// `root`: every target is read, every hunk applied in memory, and only if all apply are the
    /// new contents written — each staged to a temporary file in its directory, then all renamed
    /// (and deleted files removed) by one final command. A hunk that does not apply is
    /// [`ToolError::PatchConflict`] and nothing is written; a creation over an existing file is
    /// [`ToolError::AlreadyExists`].
    pub async fn apply_patch(
        &self,
        root: &str,
        patch: &str,
    ) -> Result<Vec<PatchedFile>, ToolError> {
        let root = normalize_absolute("root", root)?;
        let sections = patch::parse(patch)?;
        // path -> (absolute path, original existed, current content)
        let mut files: Vec<(String, String, bool, Option<Vec<u8>>)> = Vec::new();
        for (idx, sec) in sections.iter().enumerate() {
            let rel =
                path::normalize_relative(sec.path()).map_err(|m| ToolError::InvalidPatch {
                    line: 0,
                    message: format!("file section {}: {m}", idx + 1),
                })?;
            if let (Some(o), Some(n)) = (&sec.old, &sec.new)
                && path::normalize_relative(o).ok() != path::normalize_relative(n).ok()
            {
                return Err(ToolError::InvalidPatch {
                    line: 0,
                    message: format!("{o:?} → {n:?}: renames are not supported"),
                });
            }
            let abs = path::join(&root, &rel);
            let slot = match files.iter().position(|f| f.0 == rel) {
                Some(i) => i,
                None => {
                    let current = match self.read(&abs, ReadRange::All).await {
                        Ok(b) => Some(b.to_vec()),
                        Err(ToolError::NotFound { .. }) if sec.old.is_none() => None,
                        Err(e) => return Err(e),
                    };
                    let existed = current.is_some();
                    files.push((rel.clone(), abs.clone(), existed, current));
                    files.len() - 1
                }
            };
            let current = &mut files[slot].3;
            match (&sec.old, &sec.new, current.as_ref()) {
                (None, _, Some(_)) => return Err(ToolError::AlreadyExists { path: abs }),
                (Some(_), _, None) => return Err(ToolError::NotFound { path: abs }),
                _ => {}
            }
            let base = current.clone().unwrap_or_default();
            let applied = patch::apply(&base, &sec.hunks).map_err(|(hunk, message)| {
                ToolError::PatchConflict {
                    path: abs.clone(),
                    hunk,
                    message,
                }
            })?;
            if sec.new.is_none() {
                if !applied.is_empty() {
                    return Err(ToolError::PatchConflict {
                        path: abs,
                        hunk: sec.hunks.len(),
                        message: "the file has lines the deletion does not remove".into(),
                    });
                }
                *current = None;
            } else {
                *current = Some(applied);
            }
        }
        // Stage every new content, then commit in one command.
        let mut staged: Vec<String> = Vec::new();
        let mut steps = Vec::new();
        let mut report = Vec::new();
        for (rel, abs, existed, content) in &files {
            match content {
                Some(bytes) => {
                    if let Err(e) = self.check_stdin(bytes.len()) {
                        self.cleanup(&staged).await;
                        return Err(e);
                    }
                    let temp = temp_path(parent(abs));
                    let cmd = file::write_command(
                        Tool::APPLY_PATCH,
                        abs,
                        &temp,
                        !existed,
                        true,
                        Bytes::from(bytes.clone()),
                    )?;
                    let r = match self.run(cmd).await {
                        Ok(out) => check_file_output(&Tool::APPLY_PATCH, &out),
                        Err(e) => Err(e),
                    };
                    if let Err(e) = r {
                        // The failed stage may have left its own temporary file too.
                        staged.push(temp);
                        self.cleanup(&staged).await;
                        return Err(e);
                    }
                    staged.push(temp.clone());
                    steps.push(file::Step::Rename {
                        temp,
                        path: abs.clone(),
                    });
                    report.push(PatchedFile {
                        path: rel.clone(),
                        change: if *existed {
                            Change::Modified
                        } else {
                            Change::Created
                        },
                    });
                }
                None if *existed => {
                    steps.push(file::Step::Remove { path: abs.clone() });
                    report.push(PatchedFile {
                        path: rel.clone(),
                        change: Change::Deleted,
                    });
                }
                None => {} // created then deleted within the patch
            }
        }
        if steps.is_empty() {
            return Ok(report);
        }
        let out = match self.run(file::commit_command(&steps)?).await {
            Ok(out) => out,
            Err(e) => {
                self.cleanup(&staged).await;
                return Err(e);
            }
        };
        if let Err(e) = check_file_output(&Tool::APPLY_PATCH, &out) {
            self.cleanup(&staged).await;
            return Err(e);
        }
        Ok(report)
    }

    /// Best-effort removal of staged temporary files after a failure.
    async fn cleanup(&self, temps: &[String]) {
        if temps.is_empty() {
            return;
        }
        if let Ok(cmd) = file::cleanup_command(temps) {
            let _ = self.run(cmd).await;
        }
    }

    /// Runs `script` with `bash -c` where the sandbox has bash, else `sh -c`, in `workdir` if
    /// given. Whatever the exit status, the result is `Ok(Output)`; only infrastructure
    /// failures are errors.
    pub async fn bash(&self, script: &str, workdir: Option<&str>) -> Result<Output, ToolError> {
        let mut b = Command::builder([
            "sh",
            "-c",
            "if command -v bash >/dev/null 2>&1; then exec bash -c \"$1\"; fi; exec sh -c \"$1\"",
            "execseam-bash",
            script,
        ])
        .tool(Tool::BASH);
        if let Some(dir) = workdir {
            b = b.workdir(dir);
        }
        self.run(b.build()?).await
    }

    /// Runs an exact source program (Aevatar's `code_execute`): `python3 -c`, `node -e`, `tsx
    /// --eval` or `bash -c`, as [`execseam_core::code`] builds it, with [`Tool::CODE`] so an
    /// adapter with a native code runtime (Chrono) serves it in its own language. stdout, stderr
    /// and the exit code come back exactly; a non-zero exit is `Ok`.
    ///
    /// `timeout` is 1..=600 s ([`CODE_DEFAULT_TIMEOUT`] when `None`), checked before any I/O
    /// like Aevatar's typed request; it is a host-side deadline (dropping the exec, which kills
    /// the program where the adapter can), reported as `Timeout(Command)`.
    pub async fn code(
        &self,
        language: Language,
        source: &str,
        timeout: Option<Duration>,
    ) -> Result<Output, ToolError> {
        let timeout = timeout.unwrap_or(CODE_DEFAULT_TIMEOUT);
        if timeout < Duration::from_secs(1) || timeout > CODE_MAX_TIMEOUT {
            return Err(ToolError::InvalidArgument {
                message: format!("timeout {timeout:?} is outside 1..=600 s"),
            });
        }
        let cmd = CodeRequest::new(language, source).command().map_err(|e| {
            ToolError::InvalidArgument {
                message: e.message().to_owned(),
            }
        })?;
        match tokio::time::timeout(timeout, self.run(cmd)).await {
            Ok(r) => r,
            Err(_) => Err(ToolError::Exec(
                Error::new(
                    ErrorKind::Timeout(Deadline::Command),
                    format!("the {language} program ran longer than {timeout:?}"),
                )
                .with_provider(self.exec.provider().to_owned())
                .with_operation("code")
                .with_retry(Retry::Unsafe),
            )),
        }
    }
}

/// The `code` tool's timeout when none is given (Aevatar's default).
pub const CODE_DEFAULT_TIMEOUT: Duration = Duration::from_secs(180);
/// The largest `code` timeout.
pub const CODE_MAX_TIMEOUT: Duration = Duration::from_secs(600);

/// The directory of an absolute, normalised path (`/` for a top-level entry).
fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}
