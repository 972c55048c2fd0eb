//! The `code` tool's commands: an exact source program in Python, JavaScript, TypeScript or Bash
//! (Aevatar's `code_execute`), built as one fixed argv per language so that any adapter can run
//! it, and an adapter with a native code runtime (Chrono's `/execute`, AgentCore's
//! `executeCode`) can recognise it with [`CodeRequest::parse`] and serve it natively.
//!
//! | language | argv | needs in the sandbox |
//! |---|---|---|
//! | python | `python3 -c SOURCE` (larger sources: `python3 -` with the source on stdin) | `python3` |
//! | javascript | `node -e SOURCE` (larger: `node -` with the source on stdin) | `node` |
//! | typescript | `sh -c LAUNCHER execseam-code SOURCE`: runs `tsx --eval SOURCE` | `tsx` (on Node.js) |
//! | bash | `bash -c SOURCE` | `bash` |
//!
//! Sources longer than [`MAX_ARG_SOURCE`] bytes cannot be one argument (Linux limits each
//! argument to 128 KiB); Python and JavaScript then read the program from stdin (the program's
//! own stdin is at EOF), TypeScript and Bash are rejected with `InvalidCommand`.
//! When the TypeScript runtime is missing the launcher exits 127 with a line starting with
//! [`MISSING_RUNTIME`] on stderr.

use std::fmt;
use std::str::FromStr;

use bytes::Bytes;

use execseam_core::{Command, Tool};
use execseam_core::{Error, ErrorKind};

/// The largest source passed as an argument (`-c`/`-e`); Linux's per-argument limit is 128 KiB.
pub const MAX_ARG_SOURCE: usize = 100 * 1024;

/// The start of the launcher's stderr line when the sandbox has no TypeScript runtime.
pub const MISSING_RUNTIME: &str = "execseam-code: no TypeScript runtime";

/// The TypeScript launcher (`sh -c`, the source is `$1`).
pub const TYPESCRIPT_LAUNCHER: &str = "if command -v tsx >/dev/null 2>&1; then exec tsx --eval \"$1\"; fi; printf '%s\\n' 'execseam-code: no TypeScript runtime on PATH (tsx)' >&2; exit 127";

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
        let (argv, stdin): (Vec<&str>, Option<&str>) = match (self.language, big) {
            (Language::Python, false) => (vec!["python3", "-c", src], None),
            (Language::Python, true) => (vec!["python3", "-"], Some(src)),
            (Language::Javascript, false) => (vec!["node", "-e", src], None),
            (Language::Javascript, true) => (vec!["node", "-"], Some(src)),
            (Language::Typescript, false) => (
                vec!["sh", "-c", TYPESCRIPT_LAUNCHER, "execseam-code", src],
                None,
            ),
            (Language::Bash, false) => (vec!["bash", "-c", src], None),
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
        let mut b = Command::builder(argv).tool(Tool::CODE);
        if let Some(s) = stdin {
            b = b.stdin(Bytes::copy_from_slice(s.as_bytes()));
        }
        b.build()
    }

    /// The program a command built by [`command`](Self::command) runs, if it is one: tool
    /// [`Tool::CODE`], no workdir, no env, and exactly one of the argv forms above.
    pub fn parse(cmd: &Command) -> Option<CodeRequest> {
        if cmd.tool() != &Tool::CODE || cmd.workdir().is_some() || !cmd.env().is_empty() {
            return None;
        }
        let a: Vec<&str> = cmd.argv().iter().map(String::as_str).collect();
        let stdin = cmd.stdin();
        let (language, source) = match a.as_slice() {
            ["python3", "-c", s] if stdin.is_empty() => (Language::Python, s.to_string()),
            ["node", "-e", s] if stdin.is_empty() => (Language::Javascript, s.to_string()),
            ["bash", "-c", s] if stdin.is_empty() => (Language::Bash, s.to_string()),
            ["sh", "-c", l, "execseam-code", s]
                if *l == TYPESCRIPT_LAUNCHER && stdin.is_empty() =>
            {
                (Language::Typescript, s.to_string())
            }
            ["python3", "-"] => (Language::Python, String::from_utf8(stdin.to_vec()).ok()?),
            ["node", "-"] => (
                Language::Javascript,
                String::from_utf8(stdin.to_vec()).ok()?,
            ),
            _ => return None,
        };
        Some(CodeRequest { language, source })
    }
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
        assert_eq!(c.argv(), ["python3", "-c", "print(1)"]);
    }

    #[test]
    fn large_sources_go_on_stdin_or_are_rejected() {
        let big = "x".repeat(MAX_ARG_SOURCE + 1);
        let c = CodeRequest::new(Language::Python, big.clone())
            .command()
            .unwrap();
        assert_eq!(c.argv(), ["python3", "-"]);
        assert_eq!(c.stdin().len(), big.len());
        assert_eq!(CodeRequest::parse(&c).unwrap().source, big);
        for l in [Language::Bash, Language::Typescript] {
            let e = CodeRequest::new(l, big.clone()).command().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidCommand);
        }
    }

    #[test]
    fn other_commands_are_not_code() {
        let c = Command::new(["python3", "-c", "x"]).unwrap();
        assert_eq!(CodeRequest::parse(&c), None, "the tool must be CODE");
        let c = Command::builder(["python3", "-c", "x"])
            .tool(Tool::CODE)
            .workdir("/w")
            .build()
            .unwrap();
        assert_eq!(CodeRequest::parse(&c), None, "no workdir");
        assert!("ruby".parse::<Language>().is_err());
        let d = format!("{:?}", CodeRequest::new(Language::Bash, "SECRET"));
        assert!(!d.contains("SECRET"), "{d}");
    }
}
