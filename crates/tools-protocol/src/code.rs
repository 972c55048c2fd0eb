//! The `code` tool's commands: an exact source program in Python, JavaScript, TypeScript or Bash
//! (Aevatar's `code_execute`), built as one fixed argv per language so that any adapter can run
//! it, and an adapter with a native code runtime (Chrono's `/execute`, AgentCore's
//! `executeCode`) can recognise it with [`CodeRequest::parse`] and serve it natively.
//!
//! Every form is a `sh -c` launcher that first checks the interpreter is on `PATH`: a sandbox
//! without it answers exit [`MISSING_RUNTIME_STATUS`] with one stderr line starting with
//! [`MISSING_RUNTIME`], which [`check_output`] turns into a typed error (`Unsupported`, code
//! [`RUNTIME_MISSING`]), never an exit code the program did not produce.
//!
//! | language | runs | needs in the sandbox |
//! |---|---|---|
//! | python | `python3 -c SOURCE` (larger sources: `python3 -` with the source on stdin) | `python3` |
//! | javascript | `node -e SOURCE` (larger: `node -` with the source on stdin) | `node` |
//! | typescript | `tsx --eval SOURCE` | `tsx` (on Node.js) |
//! | typescript, stripped on the host ([`javascript_command`], what `execseam-typescript` builds) | `node [--input-type=module] -e JS` (larger: on stdin) | `node` |
//! | bash | `bash -c SOURCE` | `bash` |
//!
//! Sources longer than [`MAX_ARG_SOURCE`] bytes cannot be one argument (Linux limits each
//! argument to 128 KiB); Python and JavaScript then read the program from stdin (the program's
//! own stdin is at EOF), TypeScript (through `tsx`) and Bash are rejected with `InvalidCommand`.
//! Residual risk, as for every marker convention: a program that itself exits 125 with a first
//! stderr line starting with [`MISSING_RUNTIME`] is read as a missing runtime.

use std::fmt;
use std::str::FromStr;

use bytes::Bytes;

use execseam_core::{Command, Exit, Output, Retry, Tool};
use execseam_core::{Error, ErrorKind};

/// The largest source passed as an argument (`-c`/`-e`); Linux's per-argument limit is 128 KiB.
pub const MAX_ARG_SOURCE: usize = 100 * 1024;

/// The start of the launcher's stderr line when the sandbox lacks the language's runtime
/// (`execseam-code: no python runtime (python3 is not on PATH)`).
pub const MISSING_RUNTIME: &str = "execseam-code: no ";

/// The launcher's exit status when the runtime is missing (with a [`MISSING_RUNTIME`] line).
pub const MISSING_RUNTIME_STATUS: i32 = 125;

/// The error code of a missing runtime ([`check_output`]).
pub const RUNTIME_MISSING: &str = "RUNTIME_MISSING";

/// `$0` of every launcher.
const ARG0: &str = "execseam-code";

/// A launcher: `exec <run>` when `program` is on `PATH`, else the missing-runtime line and 125.
macro_rules! launcher {
    ($program:literal, $language:literal, $run:literal) => {
        concat!(
            "command -v ",
            $program,
            " >/dev/null 2>&1 || { printf '%s\\n' 'execseam-code: no ",
            $language,
            " runtime (",
            $program,
            " is not on PATH)' >&2; exit 125; }; exec ",
            $run
        )
    };
}

/// Python, the source in `$1`.
pub const PYTHON_LAUNCHER: &str = launcher!("python3", "python", "python3 -c \"$1\"");
/// Python, the source on stdin.
pub const PYTHON_STDIN_LAUNCHER: &str = launcher!("python3", "python", "python3 -");
/// JavaScript, the source in `$1`.
pub const NODE_LAUNCHER: &str = launcher!("node", "javascript", "node -e \"$1\"");
/// JavaScript, the source on stdin.
pub const NODE_STDIN_LAUNCHER: &str = launcher!("node", "javascript", "node -");
/// An ES module, the source in `$1`.
pub const NODE_MODULE_LAUNCHER: &str =
    launcher!("node", "javascript", "node --input-type=module -e \"$1\"");
/// An ES module, the source on stdin.
pub const NODE_MODULE_STDIN_LAUNCHER: &str =
    launcher!("node", "javascript", "node --input-type=module -");
/// TypeScript through `tsx`, the source in `$1`.
pub const TYPESCRIPT_LAUNCHER: &str = launcher!("tsx", "typescript", "tsx --eval \"$1\"");
/// Bash, the source in `$1`.
pub const BASH_LAUNCHER: &str = launcher!("bash", "bash", "bash -c \"$1\"");

/// The languages of the `code` tool (Aevatar's `code_execute` enum).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Language {
    /// Python 3 (`python3`).
    Python,
    /// JavaScript (`node`).
    Javascript,
    /// TypeScript (`tsx`).
    Typescript,
    /// Bash.
    Bash,
}

impl Language {
    /// Every language.
    pub const ALL: [Language; 4] = [
        Language::Python,
        Language::Javascript,
        Language::Typescript,
        Language::Bash,
    ];

    /// `python`, `javascript`, `typescript`, `bash`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Language::Python => "python",
            Language::Javascript => "javascript",
            Language::Typescript => "typescript",
            Language::Bash => "bash",
        }
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Language {
    type Err = Error;

    fn from_str(s: &str) -> Result<Language, Error> {
        Language::ALL
            .into_iter()
            .find(|l| l.as_str() == s)
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::InvalidCommand,
                    format!("unknown language {s:?}: want python, javascript, typescript or bash"),
                )
            })
    }
}

/// One program to run. `Debug` shows the length of the source, never the source.
#[derive(Clone, PartialEq, Eq)]
pub struct CodeRequest {
    /// The language.
    pub language: Language,
    /// The exact source.
    pub source: String,
}

impl fmt::Debug for CodeRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CodeRequest")
            .field("language", &self.language)
            .field("source", &format_args!("<{} bytes>", self.source.len()))
            .finish()
    }
}

impl CodeRequest {
    /// A program.
    pub fn new(language: Language, source: impl Into<String>) -> CodeRequest {
        CodeRequest {
            language,
            source: source.into(),
        }
    }

    /// The command that runs it (tool [`Tool::CODE`], no workdir, no env). Fails with
    /// `InvalidCommand` for a NUL byte in the source, or a TypeScript/Bash source longer than
    /// [`MAX_ARG_SOURCE`].
    pub fn command(&self) -> Result<Command, Error> {
        let src = self.source.as_str();
        let big = src.len() > MAX_ARG_SOURCE;
        let (launcher, in_arg) = match (self.language, big) {
            (Language::Python, false) => (PYTHON_LAUNCHER, true),
            (Language::Python, true) => (PYTHON_STDIN_LAUNCHER, false),
            (Language::Javascript, false) => (NODE_LAUNCHER, true),
            (Language::Javascript, true) => (NODE_STDIN_LAUNCHER, false),
            (Language::Typescript, false) => (TYPESCRIPT_LAUNCHER, true),
            (Language::Bash, false) => (BASH_LAUNCHER, true),
            (l @ (Language::Typescript | Language::Bash), true) => {
                return Err(Error::new(
                    ErrorKind::InvalidCommand,
                    format!(
                        "a {l} source of {} bytes is longer than {MAX_ARG_SOURCE}, the most one argument can carry",
                        src.len()
                    ),
                ));
            }
        };
        launch(launcher, src, in_arg)
    }

    /// The program a command built by [`command`](Self::command) or [`javascript_command`]
    /// runs, if it is one: tool [`Tool::CODE`], no workdir, no env, and exactly one of the
    /// launchers above. An ES module built by [`javascript_command`] is `javascript`.
    pub fn parse(cmd: &Command) -> Option<CodeRequest> {
        if cmd.tool() != &Tool::CODE || cmd.workdir().is_some() || !cmd.env().is_empty() {
            return None;
        }
        let a: Vec<&str> = cmd.argv().iter().map(String::as_str).collect();
        let stdin = cmd.stdin();
        let (launcher, source) = match a.as_slice() {
            ["sh", "-c", l, ARG0, s] if stdin.is_empty() => (*l, s.to_string()),
            ["sh", "-c", l, ARG0] => (*l, String::from_utf8(stdin.to_vec()).ok()?),
            _ => return None,
        };
        let in_arg = a.len() == 5;
        let language = [
            (PYTHON_LAUNCHER, true, Language::Python),
            (PYTHON_STDIN_LAUNCHER, false, Language::Python),
            (NODE_LAUNCHER, true, Language::Javascript),
            (NODE_STDIN_LAUNCHER, false, Language::Javascript),
            (NODE_MODULE_LAUNCHER, true, Language::Javascript),
            (NODE_MODULE_STDIN_LAUNCHER, false, Language::Javascript),
            (TYPESCRIPT_LAUNCHER, true, Language::Typescript),
            (BASH_LAUNCHER, true, Language::Bash),
        ]
        .into_iter()
        .find(|(l, arg, _)| *l == launcher && *arg == in_arg)?
        .2;
        Some(CodeRequest { language, source })
    }
}

/// The command that runs a JavaScript program on `node`, as an ES module when `module` (the
/// form TypeScript takes once its types are stripped on the host): tool [`Tool::CODE`], the
/// source in one argument, or on stdin above [`MAX_ARG_SOURCE`]. Fails with `InvalidCommand`
/// for a NUL byte in the source.
pub fn javascript_command(source: &str, module: bool) -> Result<Command, Error> {
    let big = source.len() > MAX_ARG_SOURCE;
    let launcher = match (module, big) {
        (false, false) => NODE_LAUNCHER,
        (false, true) => NODE_STDIN_LAUNCHER,
        (true, false) => NODE_MODULE_LAUNCHER,
        (true, true) => NODE_MODULE_STDIN_LAUNCHER,
    };
    launch(launcher, source, !big)
}

fn launch(launcher: &str, source: &str, in_arg: bool) -> Result<Command, Error> {
    let b = if in_arg {
        Command::builder(["sh", "-c", launcher, ARG0, source])
    } else {
        Command::builder(["sh", "-c", launcher, ARG0])
            .stdin(Bytes::copy_from_slice(source.as_bytes()))
    };
    b.tool(Tool::CODE).build()
}

/// The result of a `code` command: a missing runtime (exit [`MISSING_RUNTIME_STATUS`] with a
/// first stderr line starting with [`MISSING_RUNTIME`]) is `Err(Unsupported)`, code
/// [`RUNTIME_MISSING`], retry `Never`, the line as its message; anything else is the program's
/// own result.
pub fn check_output(output: Output) -> Result<Output, Error> {
    if output.exit != Exit::Code(MISSING_RUNTIME_STATUS)
        || !output.stderr.starts_with(MISSING_RUNTIME.as_bytes())
    {
        return Ok(output);
    }
    let text = String::from_utf8_lossy(&output.stderr);
    let line = text.lines().next().unwrap_or_default();
    let message = line.strip_prefix("execseam-code: ").unwrap_or(line);
    Err(Error::new(ErrorKind::Unsupported, message.to_owned())
        .with_code(RUNTIME_MISSING)
        .with_retry(Retry::Never))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_language_round_trips_through_its_command() {
        for l in Language::ALL {
            for src in ["print(1)", "", "a'b\"c\n$x `y`", "-x"] {
                let r = CodeRequest::new(l, src);
                let c = r.command().unwrap();
                assert_eq!(c.tool(), &Tool::CODE);
                assert_eq!(CodeRequest::parse(&c), Some(r), "{l} {src:?}");
            }
        }
        let c = CodeRequest::new(Language::Python, "print(1)")
            .command()
            .unwrap();
        assert_eq!(c.argv(), ["sh", "-c", PYTHON_LAUNCHER, ARG0, "print(1)"]);
        for module in [false, true] {
            let c = javascript_command("console.log(1)", module).unwrap();
            let r = CodeRequest::parse(&c).unwrap();
            assert_eq!(
                (r.language, r.source.as_str()),
                (Language::Javascript, "console.log(1)")
            );
        }
    }

    #[test]
    fn large_sources_go_on_stdin_or_are_rejected() {
        let big = "x".repeat(MAX_ARG_SOURCE + 1);
        let c = CodeRequest::new(Language::Python, big.clone())
            .command()
            .unwrap();
        assert_eq!(c.argv(), ["sh", "-c", PYTHON_STDIN_LAUNCHER, ARG0]);
        assert_eq!(c.stdin().len(), big.len());
        assert_eq!(CodeRequest::parse(&c).unwrap().source, big);
        let c = javascript_command(&big, true).unwrap();
        assert_eq!(c.argv(), ["sh", "-c", NODE_MODULE_STDIN_LAUNCHER, ARG0]);
        for l in [Language::Bash, Language::Typescript] {
            let e = CodeRequest::new(l, big.clone()).command().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidCommand);
        }
    }

    #[test]
    fn other_commands_are_not_code() {
        let c = Command::new(["python3", "-c", "x"]).unwrap();
        assert_eq!(CodeRequest::parse(&c), None, "not a launcher");
        let c = CodeRequest::new(Language::Python, "x").command().unwrap();
        let c = c.into_builder().tool(Tool::BASH).build().unwrap();
        assert_eq!(CodeRequest::parse(&c), None, "the tool must be CODE");
        let c = CodeRequest::new(Language::Python, "x").command().unwrap();
        let c = c.into_builder().workdir("/w").build().unwrap();
        assert_eq!(CodeRequest::parse(&c), None, "no workdir");
        let c = Command::builder(["sh", "-c", "exec python3 -c \"$1\"", ARG0, "x"])
            .tool(Tool::CODE)
            .build()
            .unwrap();
        assert_eq!(CodeRequest::parse(&c), None, "an unknown launcher");
        assert!("ruby".parse::<Language>().is_err());
        let d = format!("{:?}", CodeRequest::new(Language::Bash, "SECRET"));
        assert!(!d.contains("SECRET"), "{d}");
    }

    /// Runs a launcher with `sh` and a PATH of `path`.
    fn run(cmd: &Command, path: &str) -> Output {
        use std::io::Write;
        let mut child = std::process::Command::new("/bin/sh")
            .args(&cmd.argv()[1..])
            .env_clear()
            .env("PATH", path)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(cmd.stdin()).unwrap();
        let out = child.wait_with_output().unwrap();
        Output::new(
            out.stdout,
            out.stderr,
            Exit::Code(out.status.code().unwrap()),
        )
    }

    #[test]
    fn a_missing_runtime_is_a_typed_error_not_the_programs_exit() {
        // No interpreter on this PATH (sh itself is run by absolute path).
        let dir = std::env::temp_dir().join(format!("execseam-code-empty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let empty = dir.to_str().unwrap();
        for (l, name) in [
            (Language::Python, "python3"),
            (Language::Javascript, "node"),
            (Language::Typescript, "tsx"),
            (Language::Bash, "bash"),
        ] {
            let out = run(&CodeRequest::new(l, "x").command().unwrap(), empty);
            assert_eq!(out.exit, Exit::Code(MISSING_RUNTIME_STATUS), "{l}");
            let e = check_output(out).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Unsupported);
            assert_eq!(e.code(), Some(RUNTIME_MISSING));
            assert_eq!(e.retry(), Retry::Never);
            assert_eq!(
                e.message(),
                format!("no {l} runtime ({name} is not on PATH)")
            );
        }
        let out = run(&javascript_command("x", true).unwrap(), empty);
        assert!(check_output(out).is_err());
    }

    #[test]
    fn a_present_runtime_runs_the_source_exactly() {
        let path = std::env::var("PATH").unwrap();
        let src = "printf '%s|' \"$0\" 'a b' \"$HOME\"; echo; printf err >&2; exit 3";
        let out = run(
            &CodeRequest::new(Language::Bash, src).command().unwrap(),
            &path,
        );
        assert_eq!(out.exit, Exit::Code(3));
        assert_eq!(&out.stdout[..], b"bash|a b||\n");
        let out = check_output(out).unwrap();
        assert_eq!(&out.stderr[..], b"err");
        // A program's own 125 without the marker line stays its result.
        let out = run(
            &CodeRequest::new(Language::Bash, "echo oops >&2; exit 125")
                .command()
                .unwrap(),
            &path,
        );
        assert_eq!(check_output(out).unwrap().exit, Exit::Code(125));
    }
}
