//! The `code` tool (`execseam_tools::Tools::code`) in each language: exact stdout, stderr and
//! exit code, the source reaching the interpreter untouched (quotes, `$`, backticks, backslashes,
//! non-ASCII). A language whose runtime the sandbox image lacks is not applicable, with that
//! reason, when it is reported as the typed error it must be (`RUNTIME_MISSING` from the
//! launcher, or the service refusing the language); an exit 127 is a failure. TypeScript runs
//! on `node` (types stripped on the host) unless the adapter serves `code` natively.

use std::time::Duration;

use execseam_core::Exit;
use execseam_tools::{ToolError, Tools};
use execseam_tools_protocol::code::{Language, RUNTIME_MISSING};

use super::{fail, na, same, show_short};
use crate::{CaseResult, Target};

/// What every program prints: the same bytes in every language.
const STDOUT: &str = "out: caf\u{e9} 'single' \"double\" $HOME `tick` \\ \n";
const STDERR: &str = "err";

fn program(language: Language) -> (&'static str, &'static str) {
    match language {
        Language::Python => (
            "python3",
            "import sys\nsys.stdout.write(\"out: caf\\u00e9 'single' \\\"double\\\" $HOME `tick` \\\\ \\n\")\nsys.stderr.write(\"err\")\nsys.exit(3)\n",
        ),
        Language::Javascript => (
            "node",
            "process.stdout.write(\"out: caf\\u00e9 'single' \\\"double\\\" $HOME `tick` \\\\ \\n\");\nprocess.stderr.write(\"err\");\nprocess.exitCode = 3;\n",
        ),
        Language::Typescript => (
            "node",
            "const code: number = 3;\nconst text: string = \"out: caf\\u00e9 'single' \\\"double\\\" $HOME `tick` \\\\ \\n\";\nprocess.stdout.write(text);\nprocess.stderr.write(\"err\");\nprocess.exitCode = code;\n",
        ),
        _ => (
            "bash",
            "printf '%s\\n' \"out: caf\u{e9} 'single' \\\"double\\\" \\$HOME \\`tick\\` \\\\ \"\nprintf err >&2\nexit 3\n",
        ),
    }
}

async fn check(t: &Target, language: Language) -> CaseResult {
    let (runtime, source) = program(language);
    let tools = Tools::new(&*t.exec);
    let out = match tools
        .code(language, source, Some(Duration::from_secs(120)))
        .await
    {
        Ok(out) => out,
        // A native code runtime without this language refuses it.
        Err(ToolError::Exec(e))
            if e.code() == Some("INVALID_REQUEST") && e.message().contains("not available") =>
        {
            return na(format!(
                "the sandbox image has no {language} runtime (the service refuses the language: {e})"
            ));
        }
        // The launcher found no interpreter.
        Err(ToolError::Exec(e)) if e.code() == Some(RUNTIME_MISSING) => {
            return na(format!(
                "the sandbox image has no {runtime} for {language} ({})",
                e.message()
            ));
        }
        Err(e) => return fail(format!("code({language}) returned Err instead of Ok: {e}")),
    };
    if out.exit != Exit::Code(3) {
        return fail(format!(
            "code({language}) exited {:?}, want Code(3); stderr {}",
            out.exit,
            show_short(&out.stderr, 200)
        ));
    }
    same(
        &format!("code({language}) stdout"),
        &out.stdout,
        STDOUT.as_bytes(),
    )?;
    same(
        &format!("code({language}) stderr"),
        &out.stderr,
        STDERR.as_bytes(),
    )
}

pub(crate) async fn python(t: &Target) -> CaseResult {
    check(t, Language::Python).await
}

pub(crate) async fn javascript(t: &Target) -> CaseResult {
    check(t, Language::Javascript).await
}

pub(crate) async fn typescript(t: &Target) -> CaseResult {
    check(t, Language::Typescript).await
}

pub(crate) async fn bash(t: &Target) -> CaseResult {
    check(t, Language::Bash).await
}

/// Bad requests fail before any I/O, with the tool's typed error.
pub(crate) async fn validation(t: &Target) -> CaseResult {
    let before = t.faults.as_ref().and_then(|f| f.exec_requests());
    let tools = Tools::new(&*t.exec);
    for timeout in [
        Duration::ZERO,
        Duration::from_millis(999),
        Duration::from_secs(601),
    ] {
        match tools
            .code(Language::Python, "print(1)", Some(timeout))
            .await
        {
            Err(ToolError::InvalidArgument { .. }) => {}
            other => {
                return fail(format!(
                    "timeout {timeout:?}: {other:?}, want InvalidArgument"
                ));
            }
        }
    }
    let big = "#".repeat(execseam_tools_protocol::code::MAX_ARG_SOURCE + 1);
    match tools.code(Language::Bash, &big, None).await {
        Err(ToolError::InvalidArgument { .. }) => {}
        other => {
            return fail(format!(
                "an oversized bash source: {other:?}, want InvalidArgument"
            ));
        }
    }
    let after = t.faults.as_ref().and_then(|f| f.exec_requests());
    if before != after {
        return fail(format!("requests were sent: {before:?} -> {after:?}"));
    }
    Ok(())
}
