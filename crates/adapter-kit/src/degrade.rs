//! Degradations shared by every adapter whose backend lacks a [`Command`] field.
//!
//! - [`quote`] / [`join`]: exact POSIX shell quoting, for backends that take one command string
//!   (Daytona, AgentCore). `sh -c "$(join argv)"` runs exactly `argv`.
//! - [`wrap`]: a `/bin/sh -c` script that synthesises the workdir, the environment and a stdin
//!   redirect for backends without those fields (Fly Machines has neither workdir nor env).
//! - [`check_wrapped`]: turns the wrapper's own failures (a missing workdir, a missing stdin file)
//!   back into typed errors, so they are never reported as the command's exit code;
//!   [`StderrGate`] does the same for a stream (it holds back stderr while it may still be the
//!   wrapper's line).
//! - [`Leftovers`]: temporary files a wrapper leaves behind, removed in batches by a later
//!   command rather than by a program started for every exec ([`Leftovers::track`]).
//! - [`base64_encode`]: standard base64 (padded, unwrapped), as `base64 -d` reads it.
//! - [`env_line`] / [`set_line`]: an environment (or any words) as one line of shell for the
//!   start of stdin, for backends whose requests are logged or audited (Docker's engine client
//!   logs request bodies; Kubernetes' API server audits exec URLs): values never travel in a
//!   request.
//! - [`EXEC_TAG_VAR`], [`KILL_SCRIPT`], [`kill_argv`]: a command tagged through its environment,
//!   and the exec that kills every process carrying the tag, for backends whose exec has no
//!   kill of its own (Docker, Kubernetes).
//!
//! The wrapper stops *the library* from interpreting argv; it does not stop the backend from
//! running a shell. Every construct used works in dash, bash (also as `sh`) and busybox ash.

use std::borrow::Cow;
use std::fmt::Write as _;

use bytes::Bytes;

use execseam_core::{Command, Error, ErrorKind, Exit, Output, Retry};

/// Quotes one argument for a POSIX shell, byte-exactly.
///
/// Words made only of `[A-Za-z0-9_@%+:,./-]` are left as they are; everything else (including
/// the empty string and words containing `=` or a leading `~`) is single-quoted, with each `'`
/// written as `'\''`.
pub fn quote(arg: &str) -> Cow<'_, str> {
    let plain = !arg.is_empty()
        && arg.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b'_' | b'@' | b'%' | b'+' | b':' | b',' | b'.' | b'/' | b'-'
                )
        });
    if plain {
        return Cow::Borrowed(arg);
    }
    let mut out = String::with_capacity(arg.len() + 2);
    out.push('\'');
    for c in arg.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    Cow::Owned(out)
}

/// Quotes and joins argv into one shell command line.
pub fn join<S: AsRef<str>>(argv: &[S]) -> String {
    let mut out = String::new();
    for (i, a) in argv.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(&quote(a.as_ref()));
    }
    out
}

/// Where a wrapped command's stdin comes from.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum StdinFrom {
    /// Leave stdin as the backend delivers it.
    #[default]
    Backend,
    /// A file the adapter uploaded to this absolute path; the wrapper opens it, removes it, then
    /// runs the command with it as stdin.
    File(String),
    /// The backend's (text-only) stdin carries the bytes base64-encoded; the wrapper decodes them
    /// to this absolute temporary path, opens it, removes it, and runs the command with it as
    /// stdin. Pair with [`base64_encode`].
    Base64(String),
}

/// What [`wrap`] synthesises. Build it with `..WrapOptions::default()` for the fields you do not
/// set, so that a field added later does not break you.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WrapOptions {
    /// `cd` into [`Command::workdir`] first.
    pub workdir: bool,
    /// Set [`Command::env`] with `env --`.
    pub env: bool,
    /// Redirect stdin.
    pub stdin: StdinFrom,
    /// The prefix of the line the wrapper writes to stderr when it fails itself (default
    /// [`WRAPPER_MARK`]).
    ///
    /// A wrapper that runs commands which may themselves be wrapped (the local adapter's
    /// launcher runs commands that may be another adapter's wrapped ones) must use a marker of
    /// its own, so that it never mistakes the inner wrapper's failure, which is the command's
    /// output, for its own. Check its output with [`WrapOptions::check`] or a [`StderrGate`]
    /// made from the same options.
    pub marker: &'static str,
}

impl Default for WrapOptions {
    fn default() -> WrapOptions {
        WrapOptions {
            workdir: false,
            env: false,
            stdin: StdinFrom::Backend,
            marker: WRAPPER_MARK,
        }
    }
}

impl WrapOptions {
    /// [`check_wrapped`] for a wrapper built with these options (their [`marker`](Self::marker)).
    pub fn check(&self, output: Output) -> Result<Output, Error> {
        check_marked(output, self.marker)
    }
}

/// The prefix of the line the wrapper writes to stderr when it fails itself.
pub const WRAPPER_MARK: &str = "execseam-wrapper: ";
/// The exit status the wrapper uses for its own failures (with a marker line on stderr).
pub const WRAPPER_STATUS: i32 = 125;

/// Builds the `/bin/sh -c` script that runs `cmd` with the requested parts synthesised.
///
/// Fails with [`ErrorKind::Unsupported`] only for a program name that no shell construct can run
/// exactly: one that starts with `-` and contains `=`.
pub fn script(cmd: &Command, opts: &WrapOptions) -> Result<String, Error> {
    let marker = opts.marker;
    let mut s = String::new();
    let fail = |what: &str| {
        format!(
            "{{ printf '%s\\n' {} >&2; exit {WRAPPER_STATUS}; }}",
            quote(&format!("{marker}{what}"))
        )
    };
    match &opts.stdin {
        StdinFrom::Backend => {}
        StdinFrom::File(path) | StdinFrom::Base64(path) => {
            let q = quote(path);
            if matches!(opts.stdin, StdinFrom::Base64(_)) {
                // A subshell, so the umask does not leak into the command.
                let _ = writeln!(
                    s,
                    "(umask 077 && base64 -d > {q}) || {}",
                    fail("cannot decode stdin")
                );
            }
            // `exec 0<` on a missing file would exit the shell without our marker: test first.
            let _ = writeln!(s, "[ -r {q} ] || {}", fail("stdin file is missing"));
            let _ = writeln!(s, "exec 0< {q}");
            let _ = writeln!(s, "rm -f -- {q}");
        }
    }
    if opts.workdir
        && let Some(dir) = cmd.workdir()
    {
        let _ = writeln!(
            s,
            "cd -- {} 2>/dev/null || {}",
            quote(dir),
            fail(&format!("workdir does not exist: {dir}"))
        );
    }
    let program = cmd.program();
    let rest = join(cmd.args());
    let sep = if rest.is_empty() { "" } else { " " };
    let env: Vec<String> = if opts.env {
        cmd.env()
            .iter()
            .map(|(k, v)| quote(&format!("{k}={v}")).into_owned())
            .collect()
    } else {
        Vec::new()
    };
    let dash = program.starts_with('-');
    let eq = program.contains('=');
    if dash && eq {
        return Err(Error::unsupported(format!(
            "argv[0] {program:?} starts with '-' and contains '=': no shell construct runs it exactly"
        ))
        .with_provider("core")
        .with_operation("wrap"));
    }
    if env.is_empty() {
        if dash {
            // bash parses options of `exec`; env stops at `--` and runs the rest literally.
            let _ = write!(s, "exec env -- {}{sep}{rest}", quote(program));
        } else {
            let _ = write!(s, "exec {}{sep}{rest}", quote(program));
        }
    } else if eq {
        // env would take `a=b` as an assignment: let an inner shell exec it as a word.
        let _ = write!(
            s,
            "exec env -- {} /bin/sh -c 'exec \"$0\" \"$@\"' {}{sep}{rest}",
            env.join(" "),
            quote(program)
        );
    } else {
        let _ = write!(
            s,
            "exec env -- {} {}{sep}{rest}",
            env.join(" "),
            quote(program)
        );
    }
    Ok(s)
}

/// The argv that runs [`script`]: `["/bin/sh", "-c", script]`.
pub fn wrap(cmd: &Command, opts: &WrapOptions) -> Result<Vec<String>, Error> {
    Ok(vec!["/bin/sh".into(), "-c".into(), script(cmd, opts)?])
}

/// A new command that runs `cmd` through the wrapper: its argv is [`wrap`]'s, the wrapped parts
/// are removed, the tool is kept; with [`StdinFrom::Base64`] its stdin becomes the base64 text,
/// with [`StdinFrom::File`] its stdin is emptied (the adapter uploads `cmd.stdin()` itself).
pub fn wrapped_command(cmd: &Command, opts: &WrapOptions) -> Result<Command, Error> {
    let mut b = cmd.clone().into_builder().argv(wrap(cmd, opts)?);
    if opts.workdir {
        b = b.no_workdir();
    }
    if opts.env {
        b = b.clear_env();
    }
    b = match &opts.stdin {
        StdinFrom::Backend => b,
        StdinFrom::File(_) => b.stdin(Bytes::new()),
        StdinFrom::Base64(_) => b.stdin(base64_encode(cmd.stdin())),
    };
    b.build()
}

/// The end marker of one request: what [`EndMark::wrap`] has the command write last on stderr,
/// before its status: proof, end to end, that the command ran to its end in this request. An
/// answer without it (`{}`, a forged `exit_code: 0` with empty output, a cut body) is never an
/// exit (issue 38, D22); a per-request nonce (16 random hex digits) means a forged answer
/// cannot carry it either, as it never saw the request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndMark(String);

impl Default for EndMark {
    fn default() -> EndMark {
        EndMark::new()
    }
}

impl EndMark {
    /// A new marker: `\x1eexecseam-end-<nonce>:`.
    pub fn new() -> EndMark {
        EndMark(format!("\x1eexecseam-end-{}:", crate::id::random_id(16)))
    }

    /// The marker's bytes (what precedes the status on stderr).
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    /// The marker as text (`\x1e`, then ASCII).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// A shell line that runs `program` (shell words, `"$@"` for the script's arguments), then
    /// writes the marker and its status to stderr and exits with that status.
    pub fn wrap(&self, program: &str) -> String {
        // After the leading \x1e (written as printf's \036) the marker is hex and ASCII.
        let rest = &self.0[1..];
        format!("{program}; s=$?; printf '\\036{rest}%s' \"$s\" >&2; exit \"$s\"")
    }

    /// Checks and removes the marker [`wrap`](Self::wrap) wrote: its status must be the
    /// answer's exit code; a signal may end the command before it wrote one: a signal exit, or
    /// a backend's 137/143 (128 + SIGKILL/SIGTERM: the whole group killed, by its own OOM or a
    /// host envelope), which stay the contract's ambiguous kill and are never a success. `Err`
    /// says what is wrong, for the caller to type as a protocol error.
    pub fn strip(&self, out: Output) -> Result<Output, String> {
        let mark = self.as_bytes();
        let at = out.stderr.windows(mark.len()).rposition(|w| w == mark);
        let status = at.map(|at| &out.stderr[at + mark.len()..]);
        match (at, status, out.exit) {
            (Some(at), Some(s), Exit::Code(code)) if s == code.to_string().as_bytes() => {
                let stderr = out.stderr.slice(..at);
                Ok(Output::new(out.stdout, stderr, out.exit))
            }
            (Some(at), _, Exit::Signal(_)) => {
                let stderr = out.stderr.slice(..at);
                Ok(Output::new(out.stdout, stderr, out.exit))
            }
            (None, _, Exit::Signal(_)) => Ok(out),
            (None, _, exit) if exit.is_ambiguous_kill() => Ok(out),
            (Some(_), Some(s), exit) => Err(format!(
                "the end marker says status {:?} but the answer says {exit:?}",
                String::from_utf8_lossy(s)
            )),
            _ => {
                Err("the answer lacks this request's end marker: not a complete result".to_owned())
            }
        }
    }
}

/// Maps the wrapper's own failures back to typed errors; any other output passes through.
///
/// A missing workdir becomes [`ErrorKind::NotFound`] ([`Retry::Never`]); a missing or undecodable
/// stdin file becomes [`ErrorKind::Internal`] with [`Retry::SAFE`], since the command never started.
/// For a wrapper with another [`marker`](WrapOptions::marker), use [`WrapOptions::check`].
pub fn check_wrapped(output: Output) -> Result<Output, Error> {
    check_marked(output, WRAPPER_MARK)
}

fn check_marked(output: Output, marker: &str) -> Result<Output, Error> {
    if output.exit != Exit::Code(WRAPPER_STATUS) || !output.stderr.starts_with(marker.as_bytes()) {
        return Ok(output);
    }
    let line = String::from_utf8_lossy(&output.stderr[marker.len()..]);
    let line = line.lines().next().unwrap_or_default().to_owned();
    let err = if line.starts_with("workdir does not exist") {
        Error::new(ErrorKind::NotFound, line)
    } else {
        Error::new(ErrorKind::Internal, line).with_retry(Retry::SAFE)
    };
    Err(err.with_operation("exec"))
}

/// The streaming counterpart of [`check_wrapped`]: holds back the start of stderr while it may
/// still be the wrapper's failure line, so that a failure of the wrapper never reaches the
/// consumer as the command's stderr.
///
/// Feed every stderr chunk through [`push`](Self::push) and deliver what it returns; at the
/// exit, [`finish`](Self::finish) gives what is still held, as an [`Output`] to map with
/// [`WrapOptions::check`] (or an adapter's own mapping that ends in it): `Err` is the wrapper's
/// failure, `Ok` carries the stderr to deliver before the exit. At most the marker's length is
/// held unless stderr really starts with the marker.
///
/// ```
/// use bytes::Bytes;
/// use execseam_adapter_kit::degrade::{StderrGate, WrapOptions, WRAPPER_STATUS};
/// use execseam_core::{ErrorKind, Exit};
///
/// let opts = WrapOptions::default();
/// // The command's own stderr passes as soon as it cannot be the marker.
/// let mut gate = StderrGate::new(&opts);
/// assert_eq!(gate.push(Bytes::from_static(b"exec")), None);
/// assert_eq!(gate.push(Bytes::from_static(b"ute me")), Some(Bytes::from_static(b"execute me")));
/// assert_eq!(gate.push(Bytes::from_static(b"!")), Some(Bytes::from_static(b"!")));
/// // The wrapper's own failure becomes a typed error.
/// let mut gate = StderrGate::new(&opts);
/// assert_eq!(gate.push(Bytes::from_static(b"execseam-wrapper: workdir does not exist: /x\n")), None);
/// let err = opts.check(gate.finish(Exit::Code(WRAPPER_STATUS))).unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::NotFound);
/// ```
#[derive(Debug)]
pub struct StderrGate {
    marker: &'static str,
    held: Option<bytes::BytesMut>,
}

impl StderrGate {
    /// A gate for a wrapper built with `opts` (its [`marker`](WrapOptions::marker)).
    pub fn new(opts: &WrapOptions) -> StderrGate {
        StderrGate {
            marker: opts.marker,
            held: Some(bytes::BytesMut::new()),
        }
    }

    /// A gate that holds nothing back (for output that did not go through a wrapper).
    pub fn open() -> StderrGate {
        StderrGate {
            marker: WRAPPER_MARK,
            held: None,
        }
    }

    /// Takes one stderr chunk; returns the bytes to deliver now (`None`: held).
    pub fn push(&mut self, chunk: Bytes) -> Option<Bytes> {
        let Some(held) = self.held.as_mut() else {
            return Some(chunk);
        };
        held.extend_from_slice(&chunk);
        let n = held.len().min(self.marker.len());
        if held[..n] == self.marker.as_bytes()[..n] {
            None
        } else {
            self.held.take().map(bytes::BytesMut::freeze)
        }
    }

    /// At the command's exit: what is held, as an output with no stdout, to map with
    /// [`WrapOptions::check`]. The gate is open afterwards.
    pub fn finish(&mut self, exit: Exit) -> Output {
        Output::new(Bytes::new(), self.take(), exit)
    }

    /// What is held (on an error, to deliver before it); the gate is open afterwards.
    pub fn take(&mut self) -> Bytes {
        self.held
            .take()
            .map(bytes::BytesMut::freeze)
            .unwrap_or_default()
    }
}

/// A fresh path for a temporary file under `dir` (`<dir>/.execseam-<16 hex digits>`).
pub fn temp_path(dir: &str) -> String {
    let dir = dir.trim_end_matches('/');
    format!("{dir}/.execseam-{}", crate::id::random_id(16))
}

/// Temporary paths that execs left in the sandbox, to be removed in batches.
///
/// Removing a file from a shell starts a program (`rm`), which costs about as much as the
/// command itself when the command is small; so a frame that writes a command's streams to files
/// leaves them, [`put`](Self::put)s their paths here once it has answered, and every
/// `batch`-th exec takes them ([`take_batch`](Self::take_batch)) and removes them all with one
/// `rm` in the background. A file still open (a background child of the command writing to it)
/// is unlinked all the same: what it writes later was never read.
#[derive(Debug)]
pub struct Leftovers {
    batch: usize,
    paths: std::sync::Mutex<Vec<String>>,
}

impl Leftovers {
    /// Leftovers removed once at least `batch` paths are waiting (at least 1).
    pub fn new(batch: usize) -> Leftovers {
        Leftovers {
            batch: batch.max(1),
            paths: std::sync::Mutex::new(Vec::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.paths.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds paths to remove later (give them back with this too when the exec that was to remove
    /// them failed before it ran).
    pub fn put(&self, paths: impl IntoIterator<Item = String>) {
        self.lock().extend(paths);
    }

    /// All waiting paths if there are at least `batch` of them, else none.
    pub fn take_batch(&self) -> Vec<String> {
        let mut paths = self.lock();
        if paths.len() >= self.batch {
            std::mem::take(&mut *paths)
        } else {
            Vec::new()
        }
    }

    /// All waiting paths (when the sandbox is kept after the handle is closed).
    pub fn take_all(&self) -> Vec<String> {
        std::mem::take(&mut *self.lock())
    }

    /// Tracks one exec that leaves `files` and carries `batch` (from
    /// [`take_batch`](Self::take_batch)) to remove: when the guard is dropped, however the exec
    /// ended (a cancelled future too), `files` are put back for a later batch, and so is `batch`
    /// unless [`removed`](LeftoverGuard::removed) was called (`rm -f` twice is harmless).
    pub fn track(&self, files: Vec<String>, batch: Vec<String>) -> LeftoverGuard<'_> {
        LeftoverGuard {
            leftovers: self,
            files,
            batch,
        }
    }
}

/// See [`Leftovers::track`].
#[derive(Debug)]
pub struct LeftoverGuard<'a> {
    leftovers: &'a Leftovers,
    files: Vec<String>,
    batch: Vec<String>,
}

impl LeftoverGuard<'_> {
    /// The exec ran its frame, which removed the batch.
    pub fn removed(&mut self) {
        self.batch.clear();
    }
}

impl Drop for LeftoverGuard<'_> {
    fn drop(&mut self) {
        let (files, batch) = (
            std::mem::take(&mut self.files),
            std::mem::take(&mut self.batch),
        );
        self.leftovers.put(files.into_iter().chain(batch));
    }
}

/// Standard base64 (RFC 4648, with padding), as `base64 -d` reads it. Lines are not wrapped.
pub fn base64_encode(data: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(data)
}

/// The variable every tagged command carries, `EXECSEAM_EXEC=<tag>` (a value unique to the
/// exec): what [`KILL_SCRIPT`] finds it, and its children, by.
pub const EXEC_TAG_VAR: &str = "EXECSEAM_EXEC";

/// The environment as one line of shell that sets the positional parameters to `KEY=VALUE`
/// each (see [`set_line`]); the wrapper reads it with `IFS= read -r` and `eval`s it, then runs
/// `exec env -- "$@" …`.
pub fn env_line(env: &std::collections::BTreeMap<String, String>) -> Vec<u8> {
    let entries: Vec<String> = env.iter().map(|(k, v)| format!("{k}={v}")).collect();
    set_line(entries.iter().map(String::as_str))
}

/// One line of shell that sets the positional parameters to `words`: every byte outside
/// `[A-Za-z0-9_=./,:@+-]` (and a leading `-`) as a printf octal escape, so the line holds no
/// newline, quote or `%` whatever the words.
pub fn set_line<'a>(words: impl Iterator<Item = &'a str>) -> Vec<u8> {
    let mut s = String::from("set --");
    for w in words {
        s.push_str(";__execseam_e=$(printf '");
        for (i, b) in w.bytes().enumerate() {
            // A leading `-` would be an option of printf (bash's `-v`).
            if b.is_ascii_alphanumeric() || (b"_=./,:@+-".contains(&b) && !(i == 0 && b == b'-')) {
                s.push(b as char);
            } else {
                let _ = write!(s, "\\{b:03o}");
            }
        }
        // `$(…)` strips trailing newlines: the `x` keeps them and is cut after.
        s.push_str("x');set -- \"$@\" \"${__execseam_e%x}\"");
    }
    s.push_str(";unset __execseam_e\n");
    s.into_bytes()
}

/// Kills every process whose environment holds `$1` (`EXECSEAM_EXEC=<tag>`), in two passes (a
/// child forked between them is caught by the second), skipping itself. Needs `sh`, `tr`,
/// `grep` and `kill`; `tr` because busybox `grep -F` stops comparing at a NUL.
pub const KILL_SCRIPT: &str = r#"self=$$; for pass in 1 2; do for d in /proc/[0-9]*; do p=${d#/proc/}; [ "$p" = "$self" ] && continue; if tr '\0' '\n' 2>/dev/null < "$d/environ" | grep -qxF -e "$1"; then kill -9 "$p" 2>/dev/null; fi; done; done; exit 0"#;

/// The argv of the exec that kills the command tagged `tag` ([`KILL_SCRIPT`]).
pub fn kill_argv(tag: &str) -> Vec<String> {
    vec![
        "/bin/sh".into(),
        "-c".into(),
        KILL_SCRIPT.into(),
        "execseam-kill".into(),
        format!("{EXEC_TAG_VAR}={tag}"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::process::{Command as Proc, Stdio};

    #[test]
    fn leftovers_come_back_in_batches() {
        let l = Leftovers::new(3);
        l.put(["a".to_owned(), "b".to_owned()]);
        assert!(l.take_batch().is_empty(), "two of three: not yet");
        l.put(["c".to_owned()]);
        assert_eq!(l.take_batch(), ["a", "b", "c"]);
        assert!(l.take_batch().is_empty(), "taken once");
        l.put(["d".to_owned()]);
        assert_eq!(l.take_all(), ["d"]);
        assert!(l.take_all().is_empty());
        // A tracked exec puts its files back, and its batch unless it removed it.
        drop(l.track(vec!["f".into()], vec!["old".into()]));
        assert_eq!(l.take_all(), ["f", "old"]);
        let mut g = l.track(vec!["f".into()], vec!["old".into()]);
        g.removed();
        drop(g);
        assert_eq!(l.take_all(), ["f"]);
    }

    /// The shells the quoting must hold for. busybox is used when installed.
    fn shells() -> Vec<Vec<&'static str>> {
        let mut v = vec![
            vec!["/bin/sh", "-c"],
            vec!["bash", "--posix", "-c"],
            vec!["bash", "-c"],
        ];
        if Proc::new("busybox")
            .arg("true")
            .status()
            .is_ok_and(|s| s.success())
        {
            v.push(vec!["busybox", "sh", "-c"]);
        }
        v
    }

    fn run(shell: &[&str], script: &str, stdin: &[u8]) -> std::process::Output {
        use std::io::Write;
        let mut child = Proc::new(shell[0])
            .args(&shell[1..])
            .arg(script)
            .env_clear()
            .env("PATH", "/usr/local/bin:/usr/bin:/bin")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(stdin).unwrap();
        child.wait_with_output().unwrap()
    }

    fn nul_joined(args: &[String]) -> Vec<u8> {
        let mut v = Vec::new();
        for a in args {
            v.extend_from_slice(a.as_bytes());
            v.push(0);
        }
        v
    }

    /// Strings that stress a shell: quotes, `$`, backticks, backslashes, newlines, globs, `=`,
    /// `~`, leading dashes, unicode, empty.
    fn nasty() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            Just("'".to_string()),
            Just("\"".to_string()),
            Just("$HOME".to_string()),
            Just("`id`".to_string()),
            Just("$(id)".to_string()),
            Just("\\".to_string()),
            Just("\n".to_string()),
            Just(" ".to_string()),
            Just("*".to_string()),
            Just("~".to_string()),
            Just("=".to_string()),
            Just("-".to_string()),
            Just("--".to_string()),
            Just("!".to_string()),
            Just("é✓".to_string()),
            Just("%s".to_string()),
            "[^\u{0}]{0,3}",
        ];
        prop::collection::vec(piece, 0..6).prop_map(|v| v.concat())
    }

    #[test]
    fn quote_leaves_plain_words_and_quotes_the_rest() {
        assert_eq!(quote("abc-1.2/x_y"), "abc-1.2/x_y");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), "'it'\\''s'");
        assert_eq!(quote("A=b"), "'A=b'");
        assert_eq!(quote("~"), "'~'");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn sh_c_of_join_reproduces_argv(args in prop::collection::vec(nasty(), 0..5)) {
            let mut argv = vec!["printf".to_string(), "%s\\0".to_string()];
            argv.extend(args.iter().cloned());
            let line = join(&argv);
            // printf with no operands prints the format once: expect one empty field then.
            let want = if args.is_empty() { vec![0u8] } else { nul_joined(&args) };
            for shell in shells() {
                let out = run(&shell, &line, b"");
                prop_assert_eq!(&out.stdout, &want, "shell {:?} line {:?}", shell, line);
            }
        }

        #[test]
        fn wrapper_synthesises_workdir_env_and_stdin(
            args in prop::collection::vec(nasty(), 0..4),
            value in nasty(),
            stdin in prop::collection::vec(any::<u8>(), 0..300),
        ) {
            let dir = std::env::temp_dir().canonicalize().unwrap();
            let mut b = Command::builder(["sh", "-c", "printf '%s\\0' \"$(pwd)\" \"$EXECSEAM_V\" \"$@\"; cat", "sh"])
                .args(args.iter().cloned())
                .workdir(dir.to_str().unwrap())
                .env("EXECSEAM_V", value.clone());
            b = b.stdin(stdin.clone());
            let cmd = b.build().unwrap();
            let tmp = temp_path(dir.to_str().unwrap());
            let opts = WrapOptions { workdir: true, env: true, stdin: StdinFrom::Base64(tmp.clone()), ..WrapOptions::default() };
            let wrapped = wrapped_command(&cmd, &opts).unwrap();
            let mut want = nul_joined(&[dir.to_str().unwrap().to_string(), value.clone()]);
            want.extend(nul_joined(&args));
            want.extend_from_slice(&stdin);
            for shell in shells() {
                let out = run(&shell, &wrapped.argv()[2], wrapped.stdin());
                prop_assert_eq!(&out.stdout, &want, "shell {:?}: {}", shell, String::from_utf8_lossy(&out.stderr));
                prop_assert!(!std::path::Path::new(&tmp).exists(), "temp file left behind");
            }
        }
    }

    #[test]
    fn program_names_with_dash_or_equals_run_literally() {
        let dir = tempdir();
        for name in ["-dash", "a=b", "plain"] {
            let path = format!("{dir}/{name}");
            std::fs::write(
                &path,
                "#!/bin/sh\nprintf 'ran %s:%s' \"$0\" \"$EXECSEAM_X\"\n",
            )
            .unwrap();
            set_exec(&path);
            for with_env in [false, true] {
                let mut b = Command::builder([name]).workdir(&dir);
                if with_env {
                    b = b.env("EXECSEAM_X", "y");
                }
                let cmd = b.build().unwrap();
                let opts = WrapOptions {
                    workdir: true,
                    env: true,
                    stdin: StdinFrom::Backend,
                    ..WrapOptions::default()
                };
                let script = script(&cmd, &opts).unwrap();
                for shell in shells() {
                    let out = run(&shell, &format!("PATH=\"{dir}:$PATH\"\n{script}"), b"");
                    let got = String::from_utf8_lossy(&out.stdout).into_owned();
                    assert!(
                        got.starts_with("ran "),
                        "{shell:?} {name} env={with_env}: {got:?} {}",
                        String::from_utf8_lossy(&out.stderr)
                    );
                    assert!(got.ends_with(if with_env { ":y" } else { ":" }), "{got}");
                }
            }
        }
        let bad = Command::new(["-a=b"]).unwrap();
        let err = script(&bad, &WrapOptions::default()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unsupported);
    }

    #[test]
    fn wrapper_failures_become_typed_errors() {
        let cmd = Command::builder(["true"])
            .workdir("/nonexistent/execseam")
            .build()
            .unwrap();
        let opts = WrapOptions {
            workdir: true,
            ..Default::default()
        };
        let s = script(&cmd, &opts).unwrap();
        let out = run(&["/bin/sh", "-c"], &s, b"");
        let output = Output::new(
            out.stdout,
            out.stderr,
            Exit::Code(out.status.code().unwrap()),
        );
        let err = check_wrapped(output).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::NotFound);
        assert!(err.message().contains("/nonexistent/execseam"));

        let cmd = Command::new(["cat"]).unwrap();
        let opts = WrapOptions {
            stdin: StdinFrom::File("/nonexistent/stdin".into()),
            ..Default::default()
        };
        let out = run(&["/bin/sh", "-c"], &script(&cmd, &opts).unwrap(), b"");
        let output = Output::new(
            out.stdout,
            out.stderr,
            Exit::Code(out.status.code().unwrap()),
        );
        let err = check_wrapped(output).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Internal);
        assert!(err.retry().is_safe());

        // A command's own 125 without the marker is its result.
        let own = Output::new("", "boom\n", Exit::Code(125));
        assert_eq!(check_wrapped(own.clone()).unwrap(), own);
    }

    #[test]
    fn an_outer_wrapper_with_its_own_marker_passes_the_inner_failure_through() {
        let inner = Command::builder(["true"])
            .workdir("/nonexistent/inner")
            .build()
            .unwrap();
        let opts = WrapOptions {
            workdir: true,
            ..Default::default()
        };
        let inner = wrapped_command(&inner, &opts).unwrap();
        let outer = inner.into_builder().workdir("/").build().unwrap();
        let outer_opts = WrapOptions {
            marker: "outer: ",
            ..opts.clone()
        };
        let s = script(&outer, &outer_opts).unwrap();
        let out = run(&["/bin/sh", "-c"], &s, b"");
        let output = Output::new(
            out.stdout,
            out.stderr,
            Exit::Code(out.status.code().unwrap()),
        );
        // The outer check sees the command's own output...
        let output = outer_opts.check(output).unwrap();
        // ...and the inner check types it.
        assert_eq!(
            check_wrapped(output).unwrap_err().kind(),
            ErrorKind::NotFound
        );
    }

    #[test]
    fn missing_program_is_127_like_every_shell() {
        let cmd = Command::builder(["/nonexistent/prog"])
            .env("A", "b")
            .build()
            .unwrap();
        for env in [false, true] {
            let opts = WrapOptions {
                env,
                ..Default::default()
            };
            let out = run(&["/bin/sh", "-c"], &script(&cmd, &opts).unwrap(), b"");
            assert_eq!(out.status.code(), Some(127));
            assert!(!out.stderr.is_empty());
        }
    }

    #[test]
    fn base64_matches_the_rfc_vectors() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64_encode(i.as_bytes()), o);
        }
    }

    #[test]
    fn temp_paths_are_distinct() {
        let a = temp_path("/tmp/");
        let b = temp_path("/tmp");
        assert_ne!(a, b);
        assert!(a.starts_with("/tmp/.execseam-"));
    }

    fn tempdir() -> String {
        let p = temp_path(
            std::env::temp_dir()
                .canonicalize()
                .unwrap()
                .to_str()
                .unwrap(),
        );
        std::fs::create_dir(&p).unwrap();
        p
    }

    fn set_exec(path: &str) {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn the_kill_script_kills_only_tagged_processes() {
        let tag = format!("{EXEC_TAG_VAR}=k{}", crate::id::random_id(12));
        let spawn = |tagged: bool| {
            let mut c = std::process::Command::new("sleep");
            c.arg("30");
            if tagged {
                let (k, v) = tag.split_once('=').unwrap();
                c.env(k, v);
            }
            c.spawn().unwrap()
        };
        let mut tagged = spawn(true);
        let mut plain = spawn(false);
        let argv = kill_argv(tag.split_once('=').unwrap().1);
        let status = std::process::Command::new(&argv[0])
            .args(&argv[1..])
            .status()
            .unwrap();
        assert!(status.success());
        let killed = tagged.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&killed),
            Some(9)
        );
        assert!(plain.try_wait().unwrap().is_none());
        plain.kill().unwrap();
        plain.wait().unwrap();
    }
}
