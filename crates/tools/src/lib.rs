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

mod context;
mod envelope;
mod error;
mod file;
mod glob;
mod listing;
mod patch;
mod path;
#[cfg(feature = "serde")]
pub mod wire;

use bytes::Bytes;
use execseam_adapter_kit::degrade::temp_path;
use execseam_tools_protocol::native::{self, Failure, GrepRequest, NativeRequest};
use std::time::Duration;

use execseam_core::{Command, Deadline, Error, ErrorKind, Exec, Exit, Output, Retry, Tool};
pub use execseam_tools_protocol::code::{self, CodeRequest, Language};

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
    /// Lines of context before each match ([`Match::before`]; `grep -B`).
    pub before: usize,
    /// Lines of context after each match ([`Match::after`]; `grep -A`).
    pub after: usize,
}

/// Options of [`Tools::write_with`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteOptions {
    /// Create missing parent directories (`mkdir -p`), the default; `false` refuses with
    /// [`ToolError::NotFound`] (the missing directory's path) instead.
    pub create_parents: bool,
}

impl Default for WriteOptions {
    fn default() -> WriteOptions {
        WriteOptions {
            create_parents: true,
        }
    }
}

/// How many lines of one file matched ([`Tools::grep_count`]).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FileCount {
    /// The file, relative to the search root.
    pub path: RelPath,
    /// How many of its lines matched (at least 1).
    pub count: u64,
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

impl Change {
    /// The stable name: `created`, `modified`, `deleted`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Change::Created => "created",
            Change::Modified => "modified",
            Change::Deleted => "deleted",
        }
    }
}

/// One file touched by [`Tools::apply_patch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PatchedFile {
    /// Relative to the root, as named by the patch (prefixes dropped).
    pub path: String,
    /// What happened to it.
    pub change: Change,
}

/// One file of a patch being applied: where, whether it existed, its content so far (`None`:
/// absent or deleted).
struct PatchState {
    rel: String,
    abs: String,
    existed: bool,
    content: Option<Vec<u8>>,
}

/// The tools, over one adapter.
#[derive(Clone, Copy)]
pub struct Tools<'a> {
    exec: &'a dyn Exec,
    stream: bool,
    confine: Option<&'a str>,
}

impl std::fmt::Debug for Tools<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tools")
            .field("provider", &self.exec.provider())
            .field("stream", &self.stream)
            .field("confine", &self.confine)
            .finish()
    }
}

pub(crate) fn failure_error(failure: Failure, detail: String, pattern: Option<&str>) -> ToolError {
    match failure {
        Failure::NotFound => ToolError::NotFound { path: detail },
        Failure::NotADirectory => ToolError::NotADirectory { path: detail },
        Failure::IsADirectory => ToolError::IsADirectory { path: detail },
        Failure::PermissionDenied => ToolError::PermissionDenied { path: detail },
        Failure::OutsideRoot => ToolError::OutsideRoot { path: detail },
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
            confine: None,
        }
    }

    /// Every path the tools take must be `root` or below it, reached through no symlink: read,
    /// write, edit and `apply_patch`'s files (their directories walked from `root`, a symlink on
    /// the way refused; a read's last component too), the roots of glob, list and grep (checked
    /// by one more command first), and the `workdir` of bash and code (below `root`, checked
    /// the same way; what a command then does is not confined). Anything else is
    /// [`ToolError::OutsideRoot`]. `apply_patch` is always confined to its own root.
    #[must_use]
    pub fn confined(mut self, root: &'a str) -> Tools<'a> {
        self.confine = Some(root);
        self
    }

    /// The confinement root, normalised.
    fn confinement(&self) -> Result<Option<String>, ToolError> {
        self.confine
            .map(|r| normalize_absolute("the confinement root", r))
            .transpose()
    }

    /// `path` (normalised) is `root` or lexically below it.
    fn lexically_beneath(path: &str, root: &str) -> Result<(), ToolError> {
        let inside = root == "/"
            || path == root
            || path
                .strip_prefix(root)
                .is_some_and(|rest| rest.starts_with('/'));
        if inside {
            Ok(())
        } else {
            Err(ToolError::OutsideRoot {
                path: path.to_owned(),
            })
        }
    }

    /// Under confinement ([`Tools::confined`]), checks that `path` (absolute) is the root or
    /// below it through no symlink, the last component included (one command, tagged `tool`):
    /// for a front end's own `workdir`. Without confinement: `Ok`.
    pub async fn check_beneath(&self, tool: Tool, path: &str) -> Result<(), ToolError> {
        let path = normalize_absolute("path", path)?;
        self.check_confined(tool, &path, true).await.map(|_| ())
    }

    /// Under confinement: `path` is beneath the root lexically; with `walk`, also through no
    /// symlink (one command). Returns the confinement root.
    async fn check_confined(
        &self,
        tool: Tool,
        path: &str,
        walk: bool,
    ) -> Result<Option<String>, ToolError> {
        let Some(root) = self.confinement()? else {
            return Ok(None);
        };
        Self::lexically_beneath(path, &root)?;
        if walk {
            let out = self
                .run(file::check_command(tool.clone(), path, &root)?)
                .await?;
            check_file_output(&tool, &out)?;
        }
        Ok(Some(root))
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

    pub(crate) async fn run(&self, cmd: Command) -> Result<Output, ToolError> {
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
        self.check_confined(Tool::GLOB, &root, true).await?;
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
        self.check_confined(Tool::LIST, &root, true).await?;
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
    /// With [`GrepOptions::before`] / [`GrepOptions::after`], each kept match carries up to that
    /// many neighbouring lines of its file ([`Match::before`], [`Match::after`]), read by one
    /// further command after the search (a file changed in between gives the new lines).
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
        let (req, filter, out) = self.grep_run(root, regex, options).await?;
        let mut l = listing::grep_output(self.exec.provider(), &req, filter.as_ref(), &out, limit)?;
        if (options.before > 0 || options.after > 0) && !l.items.is_empty() {
            context::fill(self, &req.root, &mut l.items, options.before, options.after).await?;
        }
        Ok(l)
    }

    /// The files with at least one line matching `regex` (`grep -l`), as [`Tools::grep`] searches
    /// them, sorted by path, the first `limit` kept ([`Listing::omitted`] counts files).
    pub async fn grep_files(
        &self,
        root: &str,
        regex: &str,
        options: &GrepOptions,
        limit: usize,
    ) -> Result<Listing<RelPath>, ToolError> {
        let counts = self.grep_count(root, regex, options, usize::MAX).await?;
        let total = counts.items.len();
        let items: Vec<RelPath> = counts
            .items
            .into_iter()
            .take(limit)
            .map(|c| c.path)
            .collect();
        Ok(Listing {
            omitted: total - items.len(),
            items,
            skipped: counts.skipped,
        })
    }

    /// How many lines match `regex` in each file that has any (`grep -c`, files without a match
    /// left out), as [`Tools::grep`] searches them, sorted by path, the first `limit` kept
    /// ([`Listing::omitted`] counts files). Every match is counted, whatever `limit`.
    pub async fn grep_count(
        &self,
        root: &str,
        regex: &str,
        options: &GrepOptions,
        limit: usize,
    ) -> Result<Listing<FileCount>, ToolError> {
        let (req, filter, out) = self.grep_run(root, regex, options).await?;
        let all = listing::grep_output(
            self.exec.provider(),
            &req,
            filter.as_ref(),
            &out,
            usize::MAX,
        )?;
        let mut counts: Vec<FileCount> = Vec::new();
        for m in all.items {
            match counts.last_mut() {
                Some(c) if c.path == m.path => c.count += 1,
                _ => counts.push(FileCount {
                    path: m.path,
                    count: 1,
                }),
            }
        }
        let total = counts.len();
        counts.truncate(limit);
        Ok(Listing {
            omitted: total - counts.len(),
            items: counts,
            skipped: all.skipped,
        })
    }

    async fn grep_run(
        &self,
        root: &str,
        regex: &str,
        options: &GrepOptions,
    ) -> Result<(GrepRequest, Option<Glob>, Output), ToolError> {
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
        self.check_confined(Tool::GREP, &root, true).await?;
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
        Ok((req, filter, out))
    }

    /// The bytes of the file at `path` (absolute), or the part `range` selects.
    ///
    /// Errors: missing ([`ToolError::NotFound`]), a directory ([`ToolError::IsADirectory`]),
    /// unreadable ([`ToolError::PermissionDenied`]).
    ///
    /// Through an adapter whose output is text (`capabilities().binary_output == false`: it
    /// would replace bytes that are not UTF-8), the bytes travel encoded (`base64`, or POSIX
    /// `od` where the sandbox has no `base64`) and are decoded here: exact either way.
    pub async fn read(&self, path: &str, range: ReadRange) -> Result<Bytes, ToolError> {
        let path = normalize_absolute("path", path)?;
        let root = self.check_confined(Tool::READ, &path, false).await?;
        self.read_beneath(&path, range, root.as_deref()).await
    }

    async fn read_beneath(
        &self,
        path: &str,
        range: ReadRange,
        root: Option<&str>,
    ) -> Result<Bytes, ToolError> {
        let carry = if self.exec.capabilities().binary_output {
            file::Carry::Bytes
        } else {
            file::Carry::Text
        };
        let out = self
            .run(file::read_command(path, range, root, carry)?)
            .await?;
        check_file_output(&Tool::READ, &out)?;
        file::decode_read(out.stdout, carry)
            .map_err(|m| ToolError::protocol(self.exec.provider(), &Tool::READ, m))
    }

    /// Writes `content` to the file at `path` (absolute), atomically: through stdin into a
    /// temporary file in the same directory, then renamed over the path. Missing parent
    /// directories are created (refuse with [`Tools::write_with`] and
    /// `WriteOptions { create_parents: false }`). An existing file's mode is kept; a symlink at
    /// the path is replaced, not followed.
    ///
    /// Errors: a parent is not a directory ([`ToolError::NotADirectory`]), the directory is
    /// missing and `create_parents` is off ([`ToolError::NotFound`] with the directory's path), the
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
        let root = self.check_confined(Tool::WRITE, &path, false).await?;
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
            root.as_deref(),
            content,
        )?;
        let out = self.run(cmd).await?;
        check_file_output(&Tool::WRITE, &out)
    }

    /// Replaces the exact text `old` with `new` in the file at `path` (absolute): the one
    /// occurrence of `old`, or every (non-overlapping) occurrence with `replace_all`. Returns how
    /// many were replaced. The file is read, changed in memory and written back atomically as by
    /// [`Tools::write`] (mode kept); it is not a compare-and-swap: a concurrent writer between the
    /// read and the rename loses its change.
    ///
    /// Errors, with nothing written: `old` is empty ([`ToolError::InvalidArgument`]), absent
    /// ([`ToolError::NoMatch`]), or found more than once without `replace_all`
    /// ([`ToolError::NotUnique`] with the count); and those of [`Tools::read`] (a missing file is
    /// [`ToolError::NotFound`]; `edit` never creates one).
    pub async fn edit(
        &self,
        path: &str,
        old: &str,
        new: &str,
        replace_all: bool,
    ) -> Result<usize, ToolError> {
        let path = normalize_absolute("path", path)?;
        if old.is_empty() {
            return Err(ToolError::invalid("the text to replace is empty"));
        }
        let content = self.read(&path, ReadRange::All).await?;
        let (changed, count) = replace_exact(&content, old.as_bytes(), new.as_bytes());
        match count {
            0 => return Err(ToolError::NoMatch { path }),
            n if n > 1 && !replace_all => return Err(ToolError::NotUnique { path, count: n }),
            _ => {}
        }
        self.write_with(
            &path,
            changed,
            WriteOptions {
                create_parents: false,
            },
        )
        .await?;
        Ok(count)
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

    /// Applies a patch to files below `root`: a unified diff (see the `patch` module docs for what
    /// is accepted) or the `*** Begin Patch` format coding models emit (see the `envelope` module
    /// docs; it may also rename with `*** Move to:`). Every target is read, every hunk applied in
    /// memory, and only if all apply are the new contents written — each staged to a temporary
    /// file in its directory, then all renamed (and deleted files removed) by one final command.
    /// A hunk that does not apply is [`ToolError::PatchConflict`] and nothing is written; a
    /// creation over an existing file is [`ToolError::AlreadyExists`]; an update or deletion of a
    /// missing file is [`ToolError::NotFound`].
    pub async fn apply_patch(
        &self,
        root: &str,
        patch: &str,
    ) -> Result<Vec<PatchedFile>, ToolError> {
        let root = normalize_absolute("root", root)?;
        self.check_confined(Tool::APPLY_PATCH, &root, true).await?;
        let mut files: Vec<PatchState> = Vec::new();
        if envelope::is_envelope(patch) {
            for (idx, op) in envelope::parse(patch)?.into_iter().enumerate() {
                let section = idx + 1;
                match op {
                    envelope::Op::Add { path, content } => {
                        let i = self.patch_slot(&mut files, &root, &path, section).await?;
                        if files[i].content.is_some() {
                            return Err(ToolError::AlreadyExists {
                                path: files[i].abs.clone(),
                            });
                        }
                        files[i].content = Some(content);
                    }
                    envelope::Op::Delete { path } => {
                        let i = self.patch_slot(&mut files, &root, &path, section).await?;
                        if files[i].content.take().is_none() {
                            return Err(ToolError::NotFound {
                                path: files[i].abs.clone(),
                            });
                        }
                    }
                    envelope::Op::Update {
                        path,
                        move_to,
                        chunks,
                    } => {
                        let i = self.patch_slot(&mut files, &root, &path, section).await?;
                        let Some(current) = &files[i].content else {
                            return Err(ToolError::NotFound {
                                path: files[i].abs.clone(),
                            });
                        };
                        let applied =
                            envelope::apply(current, &chunks).map_err(|(hunk, message)| {
                                ToolError::PatchConflict {
                                    path: files[i].abs.clone(),
                                    hunk,
                                    message,
                                }
                            })?;
                        match move_to {
                            Some(dest) => {
                                let j = self.patch_slot(&mut files, &root, &dest, section).await?;
                                if j != i {
                                    if files[j].content.is_some() {
                                        return Err(ToolError::AlreadyExists {
                                            path: files[j].abs.clone(),
                                        });
                                    }
                                    files[i].content = None;
                                }
                                files[j].content = Some(applied);
                            }
                            None => files[i].content = Some(applied),
                        }
                    }
                }
            }
        } else {
            for (idx, sec) in patch::parse(patch)?.iter().enumerate() {
                if let (Some(o), Some(n)) = (&sec.old, &sec.new)
                    && path::normalize_relative(o).ok() != path::normalize_relative(n).ok()
                {
                    return Err(ToolError::InvalidPatch {
                        line: 0,
                        message: format!("{o:?} → {n:?}: renames are not supported"),
                    });
                }
                let i = self
                    .patch_slot(&mut files, &root, sec.path(), idx + 1)
                    .await?;
                let abs = files[i].abs.clone();
                match (&sec.old, files[i].content.as_ref()) {
                    (None, Some(_)) => return Err(ToolError::AlreadyExists { path: abs }),
                    (Some(_), None) => return Err(ToolError::NotFound { path: abs }),
                    _ => {}
                }
                let base = files[i].content.clone().unwrap_or_default();
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
                    files[i].content = None;
                } else {
                    files[i].content = Some(applied);
                }
            }
        }
        self.commit_patch(&root, files).await
    }

    /// The index in `files` of the file `rel` names below `root`, read the first time.
    async fn patch_slot(
        &self,
        files: &mut Vec<PatchState>,
        root: &str,
        rel: &str,
        section: usize,
    ) -> Result<usize, ToolError> {
        // An absolute path below the root is taken as relative to it (models write those).
        let under = rel
            .strip_prefix(root)
            .and_then(|r| r.strip_prefix('/'))
            .filter(|_| root != "/")
            .or_else(|| (root == "/").then(|| rel.strip_prefix('/')).flatten())
            .unwrap_or(rel);
        let rel = path::normalize_relative(under).map_err(|m| ToolError::InvalidPatch {
            line: 0,
            message: format!("file section {section}: {m}"),
        })?;
        if let Some(i) = files.iter().position(|f| f.rel == rel) {
            return Ok(i);
        }
        let abs = path::join(root, &rel);
        // Beneath the patch's root through no symlink (a link inside it to /etc is refused).
        let content = match self.read_beneath(&abs, ReadRange::All, Some(root)).await {
            Ok(b) => Some(b.to_vec()),
            Err(ToolError::NotFound { .. }) => None,
            Err(e) => return Err(e),
        };
        files.push(PatchState {
            rel,
            abs,
            existed: content.is_some(),
            content,
        });
        Ok(files.len() - 1)
    }

    /// Stages every new content, then commits in one command; cleans up on failure.
    async fn commit_patch(
        &self,
        root: &str,
        files: Vec<PatchState>,
    ) -> Result<Vec<PatchedFile>, ToolError> {
        let mut staged: Vec<String> = Vec::new();
        let mut steps = Vec::new();
        let mut report = Vec::new();
        for PatchState {
            rel,
            abs,
            existed,
            content,
        } in files
        {
            match content {
                Some(bytes) => {
                    if let Err(e) = self.check_stdin(bytes.len()) {
                        self.cleanup(&staged).await;
                        return Err(e);
                    }
                    let temp = temp_path(parent(&abs));
                    let cmd = file::write_command(
                        Tool::APPLY_PATCH,
                        &abs,
                        &temp,
                        !existed,
                        true,
                        Some(root),
                        Bytes::from(bytes),
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
                    steps.push(file::Step::Rename { temp, path: abs });
                    report.push(PatchedFile {
                        path: rel,
                        change: if existed {
                            Change::Modified
                        } else {
                            Change::Created
                        },
                    });
                }
                None if existed => {
                    steps.push(file::Step::Remove { path: abs });
                    report.push(PatchedFile {
                        path: rel,
                        change: Change::Deleted,
                    });
                }
                None => {} // created then deleted within the patch
            }
        }
        if steps.is_empty() {
            return Ok(report);
        }
        let out = match self.run(file::commit_command(&steps, root)?).await {
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
        let workdir = match (workdir, self.confine) {
            (Some(dir), Some(_)) => {
                let dir = normalize_absolute("workdir", dir)?;
                self.check_confined(Tool::BASH, &dir, true).await?;
                Some(dir)
            }
            (None, Some(_)) => self.confinement()?,
            (dir, None) => dir.map(str::to_owned),
        };
        if let Some(dir) = workdir {
            b = b.workdir(dir);
        }
        self.run(b.build()?).await
    }

    /// Runs an exact source program (Aevatar's `code_execute`): `python3 -c`, `node -e` or
    /// `bash -c`, as [`execseam_tools_protocol::code`] builds it, with [`Tool::CODE`] so an
    /// adapter with a native code runtime (Chrono) serves it in its own language. TypeScript
    /// (feature `typescript`, on by default) has its types stripped here and runs as JavaScript
    /// on the sandbox's `node` (a syntax error is the program's exit 1 with the diagnostic on
    /// stderr); without the feature, or on an adapter with a native code runtime, it is sent
    /// as is (`tsx --eval` in a sandbox). stdout, stderr and the exit code come back exactly;
    /// a non-zero exit is `Ok`. A sandbox without the language's interpreter is
    /// `Err(ToolError::Exec)` with kind `Unsupported` and code `RUNTIME_MISSING`, never an exit
    /// code.
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
        let native = self.exec.capabilities().native_tools.contains(&Tool::CODE);
        let cmd = match language {
            // Types stripped here, JavaScript on the sandbox's node (an adapter with a native
            // code runtime gets the TypeScript itself).
            #[cfg(feature = "typescript")]
            Language::Typescript if !native => execseam_typescript::command(source),
            _ => CodeRequest::new(language, source).command(),
        }
        .map_err(|e| ToolError::InvalidArgument {
            message: e.message().to_owned(),
        })?;
        #[cfg(not(feature = "typescript"))]
        let _ = native;
        let provider = self.exec.provider().to_owned();
        // The deadline reaches the adapter (a provider with a per-exec timeout of its own kills
        // the program there: issue 38, D29).
        let at = tokio::time::Instant::now() + timeout;
        let taken = execseam_adapter_kit::deadline::Taken::default();
        match execseam_adapter_kit::deadline::until(at, &taken, self.run(cmd)).await {
            Some(r) => r.and_then(|out| {
                code::check_output(out)
                    .map_err(|e| ToolError::Exec(e.with_provider(provider).with_operation("code")))
            }),
            None => Err(ToolError::Exec(
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

/// `haystack` with every non-overlapping `old` (from the start) replaced by `new`, and the count.
fn replace_exact(haystack: &[u8], old: &[u8], new: &[u8]) -> (Vec<u8>, usize) {
    let mut out = Vec::with_capacity(haystack.len());
    let mut count = 0;
    let mut i = 0;
    while i + old.len() <= haystack.len() {
        if &haystack[i..i + old.len()] == old {
            out.extend_from_slice(new);
            i += old.len();
            count += 1;
        } else {
            out.push(haystack[i]);
            i += 1;
        }
    }
    out.extend_from_slice(&haystack[i..]);
    (out, count)
}

/// The directory of an absolute, normalised path (`/` for a top-level entry).
fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}
