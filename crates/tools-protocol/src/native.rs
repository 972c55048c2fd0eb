//! The native-tool extension point: how an adapter recognises a listing command built by
//! `execseam-tools` and serves it with the backend's own API (E2B `ListDir`, Daytona `find_files`
//! / `search_files`) instead of running it.
//!
//! `execseam-tools` builds every listing ([`Tool::LIST`], [`Tool::GLOB`], [`Tool::GREP`]) as one
//! fixed `sh -c` script over `find` and `grep`, through [`NativeRequest::command`]. An adapter that
//! declares the tool in [`Capabilities::native_tools`](execseam_core::Capabilities::native_tools) may, in
//! its `exec`, call [`NativeRequest::parse`] on the command; on `Some(request)` it may answer from
//! its own API instead of running the script, **provided it returns an [`Output`] the library reads
//! exactly as it reads the script's**. The helpers here build that output:
//!
//! ```
//! use execseam_tools_protocol::native::{ListOutput, NativeRequest};
//! use execseam_core::Tool;
//!
//! let cmd = NativeRequest::list("/work", Some(2)).command().unwrap();
//! assert_eq!(cmd.tool(), &Tool::LIST);
//! // In the adapter's exec():
//! let Some(NativeRequest::List(req)) = NativeRequest::parse(&cmd) else { unreachable!() };
//! assert_eq!((req.root.as_str(), req.depth), ("/work", Some(2)));
//! let mut out = ListOutput::new(&req.root);
//! for (relative_path, is_dir) in [("src", true), ("src/lib.rs", false)] {
//!     // ... entries from the backend's ListDir(path, depth), in any order
//!     out.entry(relative_path.as_bytes(), is_dir);
//! }
//! let output = out.finish(); // Ok(output) from exec()
//! assert_eq!(&output.stdout[..], b"/work/src\0/work/src\0/work/src/lib.rs\0");
//! ```
//!
//! # What the library does with the bytes
//!
//! Whatever comes back (from the script or from a native API) is only *collected*: the library
//! sorts every record by its path relative to the root, in plain byte order, and only then
//! truncates at the caller's limit. An adapter must therefore return **every** entry, never a
//! page, and never needs to sort. Order is irrelevant; completeness is everything.
//!
//! # The wire format (stdout), per tool
//!
//! Every path is absolute: the request's `root`, a `/`, then the path relative to the root (for the
//! root `/`, just `/` and the relative path). Paths are raw bytes: anything but NUL, newlines
//! included, not necessarily UTF-8.
//!
//! - **List** (`find -H ROOT -mindepth 1 [-maxdepth DEPTH]`): one record `PATH\0` per entry below
//!   the root (the root itself excluded) down to `depth` levels (all levels when `None`). The root
//!   is followed if it is a symlink; nothing below it is (a symlink is an entry, never descended). A **directory** is written **twice**
//!   (`PATH\0PATH\0`, adjacent or not); every other entry once. Build it with [`ListOutput`].
//! - **Glob** (`find ROOT[/START] -mindepth 1 ! -type d [-name NAME]`): one record `PATH\0` per
//!   entry that is not a directory (files, symlinks, others), anywhere below `ROOT/START`, symlinks
//!   not followed, whose last component matches `name` (see [`name_matches`]). A `START` with a
//!   component that is missing, not a directory or a symlink gives no records, not an error (the
//!   walk from the root would not reach below it either). Extra records are harmless (the library matches the exact
//!   glob afterwards); missing ones are a bug. Build it with [`ListOutput`] (`is_dir = false`).
//! - **Grep**: for each match, `PATH\0LINE:TEXT\n`, where `PATH` is a regular file (`-type f`, not
//!   through a symlink) below `ROOT/START` whose name matches `name`, `LINE` the 1-based decimal line
//!   number and `TEXT` the matching line without its `\n` (it may hold any other byte, NUL
//!   included; a last line without `\n` still ends the record with one). Lines of one file may
//!   also follow a single `PATH\0` (`PATH\0L1:T1\nL2:T2\n`), and a `PATH\0` with no lines is
//!   allowed: a record starting with a digit is a line of the last path, one starting with `/` is
//!   a new path. Matching is POSIX ERE as `grep -E` in the C locale (`fixed`: a plain string, as
//!   `grep -F`; `ignore_case`: ASCII case folding, as `grep -i`), over every line (no binary-file
//!   detection). Build it with [`GrepHits`].
//!
//! # Exit status and stderr
//!
//! - `Exit::Code(0)` (or `1`) with the records above is a result. stderr lines are the walk's
//!   complaints about entries it could not read (`find: '/r/x': Permission denied`); the library
//!   reports them, sorted, next to the result. A native implementation that skipped nothing
//!   returns an empty stderr.
//! - A failure about the request itself is [`Exit::Code(STATUS)`](STATUS) with one stderr line
//!   `execseam-tools: <code>: <detail>` ([`Failure`]); build it with [`failure`]. The script checks
//!   the root first: missing → `not-found`, not a directory → `not-a-directory`, not listable →
//!   `permission-denied`; an invalid grep regex → `invalid-pattern`.
//! - An infrastructure failure is still an `Err`, as for any command.
//!
//! The command sets `LC_ALL=C` and nothing else: no workdir, no stdin.

use std::fmt;

use bytes::Bytes;

use execseam_core::{Command, Tool};
use execseam_core::{Error, ErrorKind};
use execseam_core::{Exit, Output};

/// The exit status of a typed tool failure (with a [`MARK`] line on stderr).
pub const STATUS: i32 = 3;
/// The prefix of the stderr line that carries a typed tool failure.
pub const MARK: &str = "execseam-tools: ";
/// The one environment variable every tool command sets.
pub const ENV: (&str, &str) = ("LC_ALL", "C");

/// `$0` of each script: names the tool in the sandbox's own error messages.
const LIST_NAME: &str = "execseam-list";
const GLOB_NAME: &str = "execseam-glob";
const GREP_NAME: &str = "execseam-grep";

/// Checks the root (`$1`) and defines `f CODE DETAIL` (a typed failure).
const PRELUDE: &str = r#"f() { printf 'execseam-tools: %s: %s\n' "$1" "$2" >&2; exit 3; }
r=$1
if [ ! -d "$r" ]; then
  [ -e "$r" ] && f not-a-directory "$r"
  case $(ls -d -- "$r" 2>&1) in *'ermission denied'*) f permission-denied "$r";; esac
  f not-found "$r"
fi
[ -r "$r" ] && [ -x "$r" ] || f permission-denied "$r"
"#;

const LIST_BODY: &str = r#"if [ -n "$2" ]; then exec find -H "$r" -mindepth 1 -maxdepth "$2" \( -type d -print0 -print0 \) -o -print0; fi
exec find -H "$r" -mindepth 1 \( -type d -print0 -print0 \) -o -print0
"#;

/// Sets `s` to `ROOT/START`, or exits with no records when a component of START is missing, not a
/// directory, or a symlink (the walk from the root would not descend into it either).
const START: &str = r#"s=$r
if [ -n "$START" ]; then
  set -f; ifs=$IFS; IFS=/
  for c in $START; do s=${s%/}/$c; if [ -L "$s" ] || [ ! -d "$s" ]; then exit 0; fi; done
  IFS=$ifs; set +f
fi
"#;

const GLOB_BODY: &str = r#"if [ -n "$3" ]; then exec find -H "$s" -mindepth 1 ! -type d -name "$3" -print0; fi
exec find -H "$s" -mindepth 1 ! -type d -print0
"#;

/// GNU grep (`-Z`) runs once per batch of files; any other grep (busybox) once per file, after
/// the shell prints the file's path.
const GREP_BODY: &str = r#"e=$2; o=-E
case $5 in *F*) o=-F;; esac
case $5 in *i*) o="$o -i";; esac
m=$(printf '\n' | grep $o -e "$e" 2>&1 >/dev/null)
[ $? -le 1 ] || f invalid-pattern "$m"
START=$3
"#;

const GREP_WALK: &str = r#"n=$4
set -- -H "$s" -type f
[ -z "$n" ] || set -- "$@" -name "$n"
if printf 'x\n' | grep -Z -e x >/dev/null 2>&1; then
  exec find "$@" -exec grep -Z -n -H -a $o -e "$e" -- {} +
fi
exec find "$@" -exec sh -c 'e=$1; shift; for p do printf "%s\0" "$p"; grep -n '"$o"' -e "$e" -- "$p"; done' sh "$e" {} +
"#;

fn list_script() -> String {
    format!("{PRELUDE}{LIST_BODY}")
}

fn glob_script() -> String {
    format!("{PRELUDE}START=$2\n{START}{GLOB_BODY}")
}

fn grep_script() -> String {
    format!("{PRELUDE}{GREP_BODY}{START}{GREP_WALK}")
}

/// A listing command built by `execseam-tools`, recognised by [`NativeRequest::parse`].
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NativeRequest {
    /// List a directory tree.
    List(ListRequest),
    /// Find entries whose path matches a glob (the library matches the glob exactly; the request
    /// carries the part the walk can narrow on).
    Glob(GlobRequest),
    /// Search file contents.
    Grep(GrepRequest),
}

/// Every entry below `root`, down to `depth` levels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListRequest {
    /// The absolute, normalised root (see [`check_root`]).
    pub root: String,
    /// How many levels below the root (1 = the root's children); `None` = all.
    pub depth: Option<u32>,
}

/// Every non-directory entry below `root/start` whose name matches `name`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GlobRequest {
    /// The absolute, normalised root; records are relative to it.
    pub root: String,
    /// A relative directory below the root where the walk starts (`""` = the root itself).
    pub start: String,
    /// A pattern the last path component must match, if any (see [`name_matches`]).
    pub name: Option<String>,
}

/// Every matching line of every regular file below `root/start` whose name matches `name`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrepRequest {
    /// The absolute, normalised root; paths are relative to it.
    pub root: String,
    /// A POSIX extended regular expression (or a plain string when `fixed`).
    pub pattern: String,
    /// A relative directory below the root where the walk starts (`""` = the root itself).
    pub start: String,
    /// A pattern the file name must match, if any (see [`name_matches`]).
    pub name: Option<String>,
    /// `pattern` is a plain string (`grep -F`).
    pub fixed: bool,
    /// ASCII case-insensitive matching (`grep -i`).
    pub ignore_case: bool,
}

fn invalid(message: String) -> Error {
    Error::new(ErrorKind::InvalidCommand, message)
        .with_provider("core")
        .with_operation("native")
}

/// Checks that `root` is absolute and normalised: starts with `/`, no empty, `.` or `..`
/// component, no trailing `/` (except the root `/` itself), no NUL.
pub fn check_root(root: &str) -> Result<(), Error> {
    if !root.starts_with('/') {
        return Err(invalid(format!("root {root:?} is not absolute")));
    }
    if root != "/" {
        check_relative("root", &root[1..])?;
    }
    Ok(())
}

fn check_relative(what: &str, rel: &str) -> Result<(), Error> {
    if rel.contains('\0') {
        return Err(invalid(format!("{what} contains a NUL byte")));
    }
    if rel
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Err(invalid(format!(
            "{what} {rel:?} is not normalised (empty, `.` or `..` component, or a trailing `/`)"
        )));
    }
    Ok(())
}

fn check_start(start: &str) -> Result<(), Error> {
    if start.is_empty() {
        return Ok(());
    }
    if start.starts_with('/') {
        return Err(invalid(format!("start {start:?} is not relative")));
    }
    check_relative("start", start)
}

fn check_name(name: &Option<String>) -> Result<(), Error> {
    match name.as_deref() {
        None => Ok(()),
        Some("") => Err(invalid("name is empty (use None)".into())),
        Some(n) if n.contains(['/', '?', '[', '\\', '\0']) => Err(invalid(format!(
            "name {n:?} may hold only literal characters and `*`"
        ))),
        Some(_) => Ok(()),
    }
}

impl NativeRequest {
    /// A [`NativeRequest::List`].
    pub fn list(root: impl Into<String>, depth: Option<u32>) -> NativeRequest {
        NativeRequest::List(ListRequest {
            root: root.into(),
            depth,
        })
    }

    /// The tool this request serves.
    pub fn tool(&self) -> Tool {
        match self {
            NativeRequest::List(_) => Tool::LIST,
            NativeRequest::Glob(_) => Tool::GLOB,
            NativeRequest::Grep(_) => Tool::GREP,
        }
    }

    /// The root every returned path is under.
    pub fn root(&self) -> &str {
        match self {
            NativeRequest::List(r) => &r.root,
            NativeRequest::Glob(r) => &r.root,
            NativeRequest::Grep(r) => &r.root,
        }
    }

    /// The exact command `execseam-tools` runs for this request.
    ///
    /// Fails with [`ErrorKind::InvalidCommand`] for a root that is not absolute and normalised, a
    /// `start` that is not relative and normalised, a `name` with anything but literal characters
    /// and `*`, a `depth` of 0, or NUL bytes.
    pub fn command(&self) -> Result<Command, Error> {
        check_root(self.root())?;
        let argv: Vec<String> = match self {
            NativeRequest::List(r) => {
                if r.depth == Some(0) {
                    return Err(invalid("depth 0 lists nothing; use 1 or more".into()));
                }
                vec![
                    "sh".into(),
                    "-c".into(),
                    list_script(),
                    LIST_NAME.into(),
                    r.root.clone(),
                    r.depth.map(|d| d.to_string()).unwrap_or_default(),
                ]
            }
            NativeRequest::Glob(r) => {
                check_start(&r.start)?;
                check_name(&r.name)?;
                vec![
                    "sh".into(),
                    "-c".into(),
                    glob_script(),
                    GLOB_NAME.into(),
                    r.root.clone(),
                    r.start.clone(),
                    r.name.clone().unwrap_or_default(),
                ]
            }
            NativeRequest::Grep(r) => {
                check_start(&r.start)?;
                check_name(&r.name)?;
                if r.pattern.contains(['\n', '\0']) {
                    return Err(invalid(
                        "a grep pattern cannot hold a newline or NUL".into(),
                    ));
                }
                let mut flags = String::new();
                if r.fixed {
                    flags.push('F');
                }
                if r.ignore_case {
                    flags.push('i');
                }
                vec![
                    "sh".into(),
                    "-c".into(),
                    grep_script(),
                    GREP_NAME.into(),
                    r.root.clone(),
                    r.pattern.clone(),
                    r.start.clone(),
                    r.name.clone().unwrap_or_default(),
                    flags,
                ]
            }
        };
        Command::builder(argv)
            .tool(self.tool())
            .env(ENV.0, ENV.1)
            .build()
    }

    /// Recognises a command built by [`NativeRequest::command`]: `Some` only when the tool, argv,
    /// environment, workdir and stdin are exactly what `command()` builds for the request found.
    pub fn parse(cmd: &Command) -> Option<NativeRequest> {
        let a = cmd.argv();
        if a.len() < 5 || a[0] != "sh" || a[1] != "-c" {
            return None;
        }
        let opt = |s: &String| (!s.is_empty()).then(|| s.clone());
        let req = match (cmd.tool().as_str(), a.len()) {
            ("list", 6) => NativeRequest::List(ListRequest {
                root: a[4].clone(),
                depth: if a[5].is_empty() {
                    None
                } else {
                    // Only the canonical spelling (no sign, no leading zero) round-trips.
                    Some(a[5].parse().ok().filter(|d: &u32| d.to_string() == a[5])?)
                },
            }),
            ("glob", 7) => NativeRequest::Glob(GlobRequest {
                root: a[4].clone(),
                start: a[5].clone(),
                name: opt(&a[6]),
            }),
            ("grep", 9) => NativeRequest::Grep(GrepRequest {
                root: a[4].clone(),
                pattern: a[5].clone(),
                start: a[6].clone(),
                name: opt(&a[7]),
                fixed: a[8].contains('F'),
                ignore_case: a[8].contains('i'),
            }),
            _ => return None,
        };
        match req.command() {
            Ok(rebuilt) if rebuilt == *cmd => Some(req),
            _ => None,
        }
    }
}

impl GlobRequest {
    /// True if `name` (a last path component) matches [`GlobRequest::name`] (always, without one).
    pub fn matches_name(&self, name: &[u8]) -> bool {
        self.name
            .as_deref()
            .is_none_or(|p| name_matches(p.as_bytes(), name))
    }
}

impl GrepRequest {
    /// True if `name` (a file name) matches [`GrepRequest::name`] (always, without one).
    pub fn matches_name(&self, name: &[u8]) -> bool {
        self.name
            .as_deref()
            .is_none_or(|p| name_matches(p.as_bytes(), name))
    }
}

/// `find -name` for the patterns a request carries: literal bytes and `*` (any run of bytes,
/// including none; a leading `.` is not special).
pub fn name_matches(pattern: &[u8], name: &[u8]) -> bool {
    // Classic greedy wildcard matching with one backtrack point.
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some((p, n));
            p += 1;
        } else if p < pattern.len() && pattern[p] == name[n] {
            p += 1;
            n += 1;
        } else if let Some((sp, sn)) = star {
            p = sp + 1;
            n = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// Joins `root` and a relative path as the records spell it.
fn push_path(out: &mut Vec<u8>, root: &str, rel: &[u8]) {
    out.extend_from_slice(root.as_bytes());
    if root != "/" {
        out.push(b'/');
    }
    out.extend_from_slice(rel);
}

/// The path of `record` relative to `root`, or `None` if the record is not below the root.
pub fn relative<'a>(root: &str, record: &'a [u8]) -> Option<&'a [u8]> {
    let rest = record.strip_prefix(root.as_bytes())?;
    let rel = if root == "/" {
        rest
    } else {
        rest.strip_prefix(b"/")?
    };
    (!rel.is_empty()).then_some(rel)
}

/// Splits a List or Glob stdout into its NUL-terminated records (absolute paths).
///
/// Fails with [`ErrorKind::Protocol`] if the last record is not terminated (a cut stream).
pub fn records(stdout: &[u8]) -> Result<impl Iterator<Item = &[u8]>, Error> {
    if !stdout.is_empty() && stdout.last() != Some(&0) {
        return Err(Error::protocol(
            "a listing ends in the middle of a record (no final NUL)",
        ));
    }
    let body = stdout.strip_suffix(b"\0").unwrap_or(stdout);
    let mut parts = (!stdout.is_empty()).then(|| body.split(|&b| b == 0));
    Ok(std::iter::from_fn(move || parts.as_mut()?.next()))
}

/// One matching line of a Grep stdout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GrepRecord<'a> {
    /// The file's absolute path.
    pub path: &'a [u8],
    /// The 1-based line number.
    pub line: u64,
    /// The line, without its `\n`.
    pub text: &'a [u8],
}

/// Parses a Grep stdout (either layout; see the module docs) into its matching lines, in the order
/// they came. Fails with [`ErrorKind::Protocol`] on anything else (a cut record, a line with no
/// path before it, a malformed line number).
pub fn grep_records(stdout: &[u8]) -> Result<Vec<GrepRecord<'_>>, Error> {
    let mut out = Vec::new();
    let mut path: Option<&[u8]> = None;
    let mut rest = stdout;
    while let Some(&first) = rest.first() {
        if first == b'/' {
            let end = rest
                .iter()
                .position(|&b| b == 0)
                .ok_or_else(|| Error::protocol("grep output ends inside a path (no NUL)"))?;
            path = Some(&rest[..end]);
            rest = &rest[end + 1..];
        } else if first.is_ascii_digit() {
            let p =
                path.ok_or_else(|| Error::protocol("grep output has a line before any path"))?;
            let end = rest
                .iter()
                .position(|&b| b == b'\n')
                .ok_or_else(|| Error::protocol("grep output ends inside a line (no newline)"))?;
            let rec = &rest[..end];
            let colon = rec
                .iter()
                .position(|&b| b == b':')
                .ok_or_else(|| Error::protocol("a grep line has no `:` after its number"))?;
            let digits = &rec[..colon];
            let line = std::str::from_utf8(digits)
                .ok()
                .filter(|d| d.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|d| d.parse::<u64>().ok())
                .filter(|&n| n > 0)
                .ok_or_else(|| Error::protocol("a grep line number is malformed"))?;
            out.push(GrepRecord {
                path: p,
                line,
                text: &rec[colon + 1..],
            });
            rest = &rest[end + 1..];
        } else {
            return Err(Error::protocol(format!(
                "grep output has a record starting with byte {first:#04x}, neither a path nor a line"
            )));
        }
    }
    Ok(out)
}

/// Builds the stdout of a List or Glob served natively; see the module docs.
#[derive(Clone, Debug)]
pub struct ListOutput {
    root: String,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

impl ListOutput {
    /// An empty listing of `root` (the request's root, verbatim).
    pub fn new(root: &str) -> ListOutput {
        ListOutput {
            root: root.to_owned(),
            stdout: Vec::new(),
            stderr: Vec::new(),
        }
    }

    /// Adds one entry by its path relative to the root (non-empty, no NUL, no leading `/`). For a
    /// Glob, only non-directories are listed, so `is_dir` is always false there.
    pub fn entry(&mut self, relative: &[u8], is_dir: bool) {
        debug_assert!(!relative.is_empty() && !relative.contains(&0));
        for _ in 0..if is_dir { 2 } else { 1 } {
            push_path(&mut self.stdout, &self.root, relative);
            self.stdout.push(0);
        }
    }

    /// Records an entry the walk could not read (one line of the backend's message).
    pub fn skipped(&mut self, message: &str) {
        self.stderr
            .extend_from_slice(message.replace('\n', " ").as_bytes());
        self.stderr.push(b'\n');
    }

    /// The output to return from `exec`: exit 0, or 1 when something was skipped (as `find`).
    pub fn finish(self) -> Output {
        let exit = Exit::Code(i32::from(!self.stderr.is_empty()));
        Output::new(Bytes::from(self.stdout), Bytes::from(self.stderr), exit)
    }
}

/// Builds the stdout of a Grep served natively; see the module docs.
#[derive(Clone, Debug)]
pub struct GrepHits {
    root: String,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

impl GrepHits {
    /// No hits yet, below `root` (the request's root, verbatim).
    pub fn new(root: &str) -> GrepHits {
        GrepHits {
            root: root.to_owned(),
            stdout: Vec::new(),
            stderr: Vec::new(),
        }
    }

    /// Adds one matching line: the file's path relative to the root, its 1-based number, and its
    /// text without the `\n` (a `\n` inside would be a different line: it is cut there).
    pub fn hit(&mut self, relative: &[u8], line: u64, text: &[u8]) {
        debug_assert!(!relative.is_empty() && !relative.contains(&0) && line > 0);
        push_path(&mut self.stdout, &self.root, relative);
        self.stdout.push(0);
        self.stdout.extend_from_slice(line.to_string().as_bytes());
        self.stdout.push(b':');
        let end = text.iter().position(|&b| b == b'\n').unwrap_or(text.len());
        self.stdout.extend_from_slice(&text[..end]);
        self.stdout.push(b'\n');
    }

    /// Records a file or directory the search could not read (one line of the backend's message).
    pub fn skipped(&mut self, message: &str) {
        self.stderr
            .extend_from_slice(message.replace('\n', " ").as_bytes());
        self.stderr.push(b'\n');
    }

    /// The output to return from `exec`: exit 0 when something matched, else 1 (as `grep`).
    pub fn finish(self) -> Output {
        let exit = Exit::Code(i32::from(self.stdout.is_empty()));
        Output::new(Bytes::from(self.stdout), Bytes::from(self.stderr), exit)
    }
}

/// A typed failure of a tool command about its request (not the infrastructure).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Failure {
    /// The path does not exist (`not-found`).
    NotFound,
    /// The path exists but is not a directory (`not-a-directory`).
    NotADirectory,
    /// The path is a directory where a file is needed (`is-a-directory`).
    IsADirectory,
    /// The sandbox user may not read (or write) the path (`permission-denied`).
    PermissionDenied,
    /// The grep pattern is not a valid regular expression (`invalid-pattern`).
    InvalidPattern,
    /// The path is reached through a symlink below the root it must stay beneath
    /// (`outside-root`).
    OutsideRoot,
}

impl Failure {
    /// Every failure, for exhaustive tests.
    pub const ALL: [Failure; 6] = [
        Failure::NotFound,
        Failure::NotADirectory,
        Failure::IsADirectory,
        Failure::PermissionDenied,
        Failure::InvalidPattern,
        Failure::OutsideRoot,
    ];

    /// The code on the wire.
    pub fn code(&self) -> &'static str {
        match self {
            Failure::NotFound => "not-found",
            Failure::NotADirectory => "not-a-directory",
            Failure::IsADirectory => "is-a-directory",
            Failure::PermissionDenied => "permission-denied",
            Failure::InvalidPattern => "invalid-pattern",
            Failure::OutsideRoot => "outside-root",
        }
    }

    /// Reads a typed failure off a tool command's output: `Some((failure, detail))` when the exit
    /// is [`STATUS`] and stderr starts with a [`MARK`] line with a known code.
    pub fn from_output(output: &Output) -> Option<(Failure, String)> {
        if output.exit != Exit::Code(STATUS) {
            return None;
        }
        let rest = output.stderr.strip_prefix(MARK.as_bytes())?;
        let text = String::from_utf8_lossy(rest);
        let (code, detail) = text.split_once(": ")?;
        let failure = Failure::ALL.into_iter().find(|f| f.code() == code)?;
        // The detail is the rest of the stderr (a regex message may span lines), trimmed.
        Some((failure, detail.trim_end_matches('\n').to_owned()))
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// The output of a typed failure, as the scripts produce it (`detail` is the path, or the regex
/// engine's message for [`Failure::InvalidPattern`]).
pub fn failure(failure: Failure, detail: &str) -> Output {
    Output::new(
        Bytes::new(),
        Bytes::from(format!("{MARK}{}: {detail}\n", failure.code())),
        Exit::Code(STATUS),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn glob(root: &str, start: &str, name: Option<&str>) -> NativeRequest {
        NativeRequest::Glob(GlobRequest {
            root: root.into(),
            start: start.into(),
            name: name.map(Into::into),
        })
    }

    fn grep(root: &str, pattern: &str, fixed: bool, ignore_case: bool) -> NativeRequest {
        NativeRequest::Grep(GrepRequest {
            root: root.into(),
            pattern: pattern.into(),
            start: String::new(),
            name: None,
            fixed,
            ignore_case,
        })
    }

    #[test]
    fn parse_inverts_command() {
        let reqs = [
            NativeRequest::list("/", None),
            NativeRequest::list("/a b/c", Some(3)),
            glob("/w", "", None),
            glob("/w", "src/x y", Some("*.rs")),
            grep("/w", "-e (a|b)'\"", false, false),
            grep("/", "", true, true),
            grep("/w", "x", false, true),
        ];
        for r in reqs {
            let c = r.command().unwrap();
            assert_eq!(c.tool(), &r.tool());
            assert_eq!(NativeRequest::parse(&c), Some(r.clone()), "{r:?}");
            assert_eq!(c.env().get("LC_ALL").map(String::as_str), Some("C"));
        }
    }

    #[test]
    fn parse_rejects_anything_else() {
        let good = NativeRequest::list("/w", Some(2)).command().unwrap();
        let variants = [
            good.clone()
                .into_builder()
                .tool(Tool::BASH)
                .build()
                .unwrap(),
            good.clone()
                .into_builder()
                .tool(Tool::GLOB)
                .build()
                .unwrap(),
            good.clone().into_builder().arg("x").build().unwrap(),
            good.clone().into_builder().workdir("/").build().unwrap(),
            good.clone().into_builder().env("X", "1").build().unwrap(),
            good.clone().into_builder().stdin("x").build().unwrap(),
            {
                let mut a = good.argv().to_vec();
                a[2].push(' ');
                good.clone().into_builder().argv(a).build().unwrap()
            },
            {
                let mut a = good.argv().to_vec();
                a[5] = "02".into();
                good.clone().into_builder().argv(a).build().unwrap()
            },
            Command::builder(["find", "/w"])
                .tool(Tool::LIST)
                .build()
                .unwrap(),
        ];
        for c in variants {
            assert_eq!(NativeRequest::parse(&c), None, "{c:?}");
        }
    }

    #[test]
    fn command_validates_the_request() {
        let bad = [
            NativeRequest::list("rel", None),
            NativeRequest::list("/a/", None),
            NativeRequest::list("/a//b", None),
            NativeRequest::list("/a/./b", None),
            NativeRequest::list("/a/..", None),
            NativeRequest::list("/a", Some(0)),
            glob("/a", "/abs", None),
            glob("/a", "x/", None),
            glob("/a", "../x", None),
            glob("/a", "", Some("")),
            glob("/a", "", Some("a/b")),
            glob("/a", "", Some("a?")),
            glob("/a", "", Some("[ab]")),
            grep("/a", "x\ny", false, false),
        ];
        for r in bad {
            let e = r.command().expect_err("must be rejected");
            assert_eq!(e.kind(), ErrorKind::InvalidCommand, "{r:?}");
        }
    }

    #[test]
    fn relative_strips_exactly_the_root() {
        assert_eq!(relative("/w", b"/w/a/b"), Some(&b"a/b"[..]));
        assert_eq!(relative("/", b"/a"), Some(&b"a"[..]));
        assert_eq!(relative("/w", b"/wx/a"), None);
        assert_eq!(relative("/w", b"/w"), None);
        assert_eq!(relative("/w", b"/w/"), None);
        assert_eq!(relative("/w", b"/v/a"), None);
    }

    #[test]
    fn records_require_the_final_nul() {
        let r: Vec<_> = records(b"/a\0/b\nc\0").unwrap().collect();
        assert_eq!(r, vec![&b"/a"[..], &b"/b\nc"[..]]);
        assert_eq!(records(b"").unwrap().count(), 0);
        assert_eq!(
            records(b"/a\0/b").err().map(|e| e.kind()),
            Some(ErrorKind::Protocol)
        );
    }

    #[test]
    fn grep_records_read_both_layouts() {
        let gnu = b"/w/a\x001:x\n/w/a\x003:y\0z\n/w/b\nc\x0010:\n";
        let bb = b"/w/a\x001:x\n3:y\0z\n/w/none\0/w/b\nc\x0010:\n";
        for out in [&gnu[..], &bb[..]] {
            let r = grep_records(out).unwrap();
            let got: Vec<_> = r.iter().map(|r| (r.path, r.line, r.text)).collect();
            assert_eq!(
                got,
                vec![
                    (&b"/w/a"[..], 1, &b"x"[..]),
                    (&b"/w/a"[..], 3, &b"y\0z"[..]),
                    (&b"/w/b\nc"[..], 10, &b""[..]),
                ]
            );
        }
        for bad in [
            &b"1:x\n"[..],
            b"/w/a",
            b"/w/a\x001:x",
            b"/w/a\x00x:y\n",
            b"/w/a\x000:y\n",
            b"/w/a\x001y\n",
            b"w/a\x001:y\n",
        ] {
            let e = grep_records(bad).expect_err("malformed");
            assert_eq!(e.kind(), ErrorKind::Protocol, "{bad:?}");
        }
    }

    #[test]
    fn builders_write_the_wire_format() {
        let mut l = ListOutput::new("/w");
        l.entry(b"d", true);
        l.entry(b"d/f\nx", false);
        let o = l.finish();
        assert_eq!(&o.stdout[..], b"/w/d\0/w/d\0/w/d/f\nx\0");
        assert_eq!(o.exit, Exit::Code(0));
        let mut l = ListOutput::new("/");
        l.entry(b"etc", false);
        l.skipped("find: '/root': Permission denied");
        let o = l.finish();
        assert_eq!(&o.stdout[..], b"/etc\0");
        assert_eq!(o.exit, Exit::Code(1));
        assert_eq!(&o.stderr[..], b"find: '/root': Permission denied\n");

        let mut g = GrepHits::new("/w");
        assert_eq!(g.clone().finish().exit, Exit::Code(1));
        g.hit(b"a", 2, b"x\0y");
        g.hit(b"a", 3, b"cut\nhere");
        let o = g.finish();
        assert_eq!(&o.stdout[..], b"/w/a\x002:x\0y\n/w/a\x003:cut\n");
        assert_eq!(grep_records(&o.stdout).unwrap().len(), 2);
    }

    #[test]
    fn failures_round_trip() {
        for f in Failure::ALL {
            let o = failure(f, "/w/x y");
            assert_eq!(Failure::from_output(&o), Some((f, "/w/x y".to_owned())));
        }
        let other = Output::new("", "execseam-tools: bogus: x\n", Exit::Code(STATUS));
        assert_eq!(Failure::from_output(&other), None);
        let wrong_status = Output::new("", "execseam-tools: not-found: x\n", Exit::Code(1));
        assert_eq!(Failure::from_output(&wrong_status), None);
    }

    #[test]
    fn name_matching_is_find_name_with_stars() {
        let cases: &[(&str, &str, bool)] = &[
            ("*.rs", "a.rs", true),
            ("*.rs", ".rs", true),
            ("*.rs", "a.rsx", false),
            ("a*b*c", "abc", true),
            ("a*b*c", "aXbYbZc", true),
            ("a*b*c", "aXbYc d", false),
            ("*", "", true),
            ("lit", "lit", true),
            ("lit", "lot", false),
            ("**", ".hidden", true),
        ];
        for &(p, n, want) in cases {
            assert_eq!(name_matches(p.as_bytes(), n.as_bytes()), want, "{p} {n}");
        }
    }

    // The scripts, run for real by /bin/sh on this host: the wire format, the failures, and the
    // builders' bytes equal to what the command prints (after sorting).
    mod scripts {
        use super::*;
        use std::path::{Path, PathBuf};

        struct Tree(PathBuf);
        impl Drop for Tree {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }

        fn tree(tag: &str) -> Tree {
            let d = std::env::temp_dir()
                .canonicalize()
                .unwrap()
                .join(format!("execseam-native-{tag}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&d);
            for dir in ["src/deep/er", "sp ace", "empty", "-dash"] {
                std::fs::create_dir_all(d.join(dir)).unwrap();
            }
            let files: &[(&str, &[u8])] = &[
                ("src/a.rs", b"hello\nworld hello\n"),
                ("src/deep/er/b.rs", b"nothing\n"),
                ("bin.dat", b"hello\0bin\nhello text"),
                ("sp ace/q'uo\"te\nnl.rs", b"x hello"),
                ("-dash/\u{e9}.txt", "hello \u{e9}\n".as_bytes()),
            ];
            for (p, c) in files {
                std::fs::write(d.join(p), c).unwrap();
            }
            Tree(d)
        }

        /// A directory of busybox applet links, when busybox is installed: every script is also
        /// run by busybox `sh` with busybox `find`/`grep`/`ls` (the tools of Alpine-like images).
        fn busybox_path() -> Option<PathBuf> {
            let bb = std::env::var("PATH")
                .ok()?
                .split(':')
                .map(|d| Path::new(d).join("busybox"))
                .find(|p| p.exists())?;
            let dir = std::env::temp_dir().join(format!("execseam-bb-{}", std::process::id()));
            std::fs::create_dir_all(&dir).ok()?;
            for applet in [
                "sh", "find", "grep", "ls", "printf", "cat", "head", "tail", "rm",
            ] {
                match std::os::unix::fs::symlink(&bb, dir.join(applet)) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(_) => return None,
                }
            }
            Some(dir)
        }

        fn run(cmd: &Command) -> Output {
            let gnu = run_with(
                cmd,
                std::env::var("PATH").unwrap_or_default(),
                cmd.program(),
            );
            match busybox_path() {
                Some(dir) => {
                    let sh = dir.join("sh");
                    let bb = run_with(
                        cmd,
                        dir.to_string_lossy().into_owned(),
                        sh.to_str().unwrap(),
                    );
                    // Same records (in some order) and the same failure from both toolsets.
                    // (grep's exit status is not compared: it is the last batch's.)
                    assert_eq!(
                        Failure::from_output(&gnu).map(|f| f.0),
                        Failure::from_output(&bb).map(|f| f.0),
                        "{cmd:?}: GNU {gnu:?} vs busybox {bb:?}"
                    );
                    if cmd.tool() == &Tool::GREP {
                        let key = |o: &Output| {
                            let mut v: Vec<_> = grep_records(&o.stdout)
                                .unwrap()
                                .into_iter()
                                .map(|r| (r.path.to_vec(), r.line, r.text.to_vec()))
                                .collect();
                            v.sort();
                            v
                        };
                        assert_eq!(key(&gnu), key(&bb), "{cmd:?}");
                    } else {
                        let key = |o: &Output| {
                            let mut v: Vec<_> =
                                records(&o.stdout).unwrap().map(<[u8]>::to_vec).collect();
                            v.sort();
                            v
                        };
                        assert_eq!(key(&gnu), key(&bb), "{cmd:?}");
                    }
                }
                None => eprintln!(
                    "busybox is not installed: the scripts ran with this host's tools only"
                ),
            }
            gnu
        }

        fn run_with(cmd: &Command, path: String, program: &str) -> Output {
            let o = std::process::Command::new(program)
                .args(cmd.args())
                .env_clear()
                .env("PATH", path)
                .envs(cmd.env())
                .output()
                .unwrap();
            let exit = match o.status.code() {
                Some(c) => Exit::Code(c),
                None => {
                    Exit::Signal(std::os::unix::process::ExitStatusExt::signal(&o.status).unwrap())
                }
            };
            Output::new(o.stdout, o.stderr, exit)
        }

        fn root(t: &Tree) -> String {
            t.0.to_str().unwrap().to_owned()
        }

        fn sorted_records(root: &str, stdout: &[u8]) -> Vec<Vec<u8>> {
            let mut v: Vec<Vec<u8>> = records(stdout)
                .unwrap()
                .map(|r| relative(root, r).expect("below the root").to_vec())
                .collect();
            v.sort();
            v
        }

        #[test]
        fn list_prints_directories_twice() {
            let t = tree("list");
            let r = root(&t);
            let o = run(&NativeRequest::list(r.clone(), Some(2)).command().unwrap());
            assert_eq!(o.exit, Exit::Code(0), "{o:?}");
            let got = sorted_records(&r, &o.stdout);
            let mut want = ListOutput::new(&r);
            for (p, d) in [
                ("src", true),
                ("src/a.rs", false),
                ("src/deep", true),
                ("sp ace", true),
                ("sp ace/q'uo\"te\nnl.rs", false),
                ("empty", true),
                ("-dash", true),
                ("-dash/\u{e9}.txt", false),
                ("bin.dat", false),
            ] {
                want.entry(p.as_bytes(), d);
            }
            assert_eq!(got, sorted_records(&r, &want.finish().stdout));
            // Unlimited depth reaches the bottom.
            let o = run(&NativeRequest::list(r.clone(), None).command().unwrap());
            assert!(sorted_records(&r, &o.stdout).contains(&b"src/deep/er/b.rs".to_vec()));
        }

        #[test]
        fn glob_narrows_and_filters_names() {
            let t = tree("glob");
            let r = root(&t);
            let o = run(&glob(&r, "src", Some("*.rs")).command().unwrap());
            assert_eq!(
                sorted_records(&r, &o.stdout),
                vec![b"src/a.rs".to_vec(), b"src/deep/er/b.rs".to_vec()]
            );
            let o = run(&glob(&r, "", None).command().unwrap());
            assert_eq!(sorted_records(&r, &o.stdout).len(), 5, "{o:?}");
            let o = run(&glob(&r, "no/such", None).command().unwrap());
            assert_eq!((o.exit, o.stdout.len()), (Exit::Code(0), 0));
        }

        #[test]
        fn grep_finds_every_line() {
            let t = tree("grep");
            let r = root(&t);
            let o = run(&grep(&r, "hel+o", false, false).command().unwrap());
            let mut got: Vec<(Vec<u8>, u64, Vec<u8>)> = grep_records(&o.stdout)
                .unwrap()
                .into_iter()
                .map(|g| {
                    (
                        relative(&r, g.path).unwrap().to_vec(),
                        g.line,
                        g.text.to_vec(),
                    )
                })
                .collect();
            got.sort();
            let want: Vec<(Vec<u8>, u64, Vec<u8>)> = vec![
                (
                    b"-dash/\xc3\xa9.txt".to_vec(),
                    1,
                    b"hello \xc3\xa9".to_vec(),
                ),
                (b"bin.dat".to_vec(), 1, b"hello\0bin".to_vec()),
                (b"bin.dat".to_vec(), 2, b"hello text".to_vec()),
                (b"sp ace/q'uo\"te\nnl.rs".to_vec(), 1, b"x hello".to_vec()),
                (b"src/a.rs".to_vec(), 1, b"hello".to_vec()),
                (b"src/a.rs".to_vec(), 2, b"world hello".to_vec()),
            ];
            assert_eq!(got, want);
            let o = run(&grep(&r, "HELLO", true, true).command().unwrap());
            assert_eq!(grep_records(&o.stdout).unwrap().len(), 6);
        }

        #[test]
        fn the_root_is_followed_and_nothing_below_it() {
            let t = tree("links");
            let r = root(&t);
            std::os::unix::fs::symlink(t.0.join("src"), t.0.join("link")).unwrap();
            let via = format!("{r}/link");
            let o = run(&NativeRequest::list(via.clone(), Some(1)).command().unwrap());
            assert_eq!(
                sorted_records(&via, &o.stdout),
                vec![b"a.rs".to_vec(), b"deep".to_vec(), b"deep".to_vec()]
            );
            // From the real root, `link` is one entry, not descended.
            let o = run(&NativeRequest::list(r.clone(), None).command().unwrap());
            let all = sorted_records(&r, &o.stdout);
            assert!(
                all.contains(&b"link".to_vec()) && !all.iter().any(|p| p.starts_with(b"link/"))
            );
            // A start through the symlink gives nothing; through the real directory, the files.
            let o = run(&glob(&r, "link/deep", None).command().unwrap());
            assert_eq!((o.exit, o.stdout.len()), (Exit::Code(0), 0));
            let o = run(&grep(&r, "hello", false, false).command().unwrap());
            assert!(
                !grep_records(&o.stdout)
                    .unwrap()
                    .iter()
                    .any(|g| g.path.ends_with(b"link/a.rs"))
            );
            let o = run(&glob(&r, "src/deep", Some("*.rs")).command().unwrap());
            assert_eq!(
                sorted_records(&r, &o.stdout),
                vec![b"src/deep/er/b.rs".to_vec()]
            );
        }

        #[test]
        fn failures_are_typed() {
            let t = tree("fail");
            let r = root(&t);
            let missing = format!("{r}/nope");
            let file = format!("{r}/bin.dat");
            let cases = [
                (
                    NativeRequest::list(missing.clone(), None),
                    Failure::NotFound,
                ),
                (
                    NativeRequest::list(file.clone(), None),
                    Failure::NotADirectory,
                ),
                (glob(&missing, "", None), Failure::NotFound),
                (grep(&file, "x", false, false), Failure::NotADirectory),
                (grep(&r, "(", false, false), Failure::InvalidPattern),
            ];
            for (req, want) in cases {
                let o = run(&req.command().unwrap());
                let got = Failure::from_output(&o).map(|(f, _)| f);
                assert_eq!(got, Some(want), "{req:?}: {o:?}");
            }
            assert!(Path::new(&r).exists());
        }
    }

    proptest! {
        #[test]
        fn parse_inverts_command_for_any_request(
            root in "(/[^/\0]{1,8}){0,3}",
            start in "([a-z .'\n-]{1,6}(/[a-z]{1,3}){0,2})?",
            name in "[a-z*.]{0,5}",
            pattern in "[^\n\0]{0,12}",
            depth in proptest::option::of(1u32..1000),
            flags in (any::<bool>(), any::<bool>()),
        ) {
            let root = if root.is_empty() { "/".to_owned() } else { root };
            prop_assume!(!root.split('/').skip(1).any(|c| c == "." || c == ".."));
            prop_assume!(!start.split('/').any(|c| c == "." || c == ".."));
            let name = (!name.is_empty()).then_some(name);
            let reqs = [
                NativeRequest::list(root.clone(), depth),
                glob(&root, &start, name.as_deref()),
                NativeRequest::Grep(GrepRequest {
                    root: root.clone(), pattern, start, name, fixed: flags.0, ignore_case: flags.1,
                }),
            ];
            for r in reqs {
                let c = r.command().unwrap();
                prop_assert_eq!(NativeRequest::parse(&c), Some(r));
            }
        }
    }
}
