#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

use std::fmt;
use std::path::Path;

use oxc_allocator::Allocator;
use oxc_codegen::Codegen;
use oxc_diagnostics::{GraphicalReportHandler, GraphicalTheme, NamedSource, OxcDiagnostic};
use oxc_parser::Parser;
use oxc_semantic::SemanticBuilder;
use oxc_span::SourceType;
use oxc_transformer::{TransformOptions, Transformer};

use execseam_core::{Command, Error};
use execseam_tools_protocol::code;

/// The JavaScript a TypeScript program compiles to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Javascript {
    /// The program with its types removed (and TypeScript-only constructs such as `enum` and
    /// `namespace` lowered); everything else as written, no down-levelling.
    pub code: String,
    /// It has `import`/`export` statements: run it as an ES module (`node --input-type=module`);
    /// otherwise as a script (where `require` exists).
    pub module: bool,
}

/// Why a program does not compile: the compiler's messages, rendered as text with the line,
/// the column and the source around them (no colours).
#[derive(Clone, PartialEq, Eq)]
pub struct Diagnostics(String);

impl Diagnostics {
    /// The rendered messages.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Shows the messages, which quote the source: a caller that must not log sources must not log
/// these either.
impl fmt::Debug for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Diagnostics")
            .field(&format_args!("<{} bytes>", self.0.len()))
            .finish()
    }
}

impl std::error::Error for Diagnostics {}

/// Compiles a TypeScript program (`main.ts`, an ES module source) to JavaScript. Type errors are
/// not checked (as tsx, esbuild and Node's own type stripping do not); syntax errors are
/// [`Diagnostics`].
pub fn to_javascript(source: &str) -> Result<Javascript, Diagnostics> {
    let allocator = Allocator::default();
    let parsed = Parser::new(&allocator, source, SourceType::ts()).parse();
    if !parsed.errors.is_empty() || parsed.panicked {
        return Err(render(source, parsed.errors));
    }
    let module = parsed.module_record.has_module_syntax;
    let mut program = parsed.program;
    let scoping = SemanticBuilder::new()
        .build(&program)
        .semantic
        .into_scoping();
    let options = TransformOptions::default();
    let transformed = Transformer::new(&allocator, Path::new("main.ts"), &options)
        .build_with_scoping(scoping, &mut program);
    if !transformed.errors.is_empty() {
        return Err(render(source, transformed.errors));
    }
    Ok(Javascript {
        code: Codegen::new().build(&program).code,
        module,
    })
}

/// The `code` tool's command for a TypeScript program, for a sandbox with only `node`: the
/// program compiled here and run as JavaScript ([`code::javascript_command`]). A program that
/// does not compile runs as a one-line JavaScript program that writes the [`Diagnostics`] to
/// stderr and exits 1, as tsx does: a syntax error is the program's failure, and a sandbox
/// without `node` still reports its missing runtime ([`code::check_output`]). Fails with
/// `InvalidCommand` only for a NUL byte in the source.
pub fn command(source: &str) -> Result<Command, Error> {
    match to_javascript(source) {
        Ok(js) => code::javascript_command(&js.code, js.module),
        Err(d) => code::javascript_command(&d.reporter(), false),
    }
}

impl Diagnostics {
    /// A JavaScript program that writes these messages to stderr and exits 1.
    pub fn reporter(&self) -> String {
        format!(
            "process.stderr.write({});process.exitCode=1;",
            js_string(&self.0)
        )
    }
}

/// `s` as a JavaScript string literal.
fn js_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\u{2028}' | '\u{2029}' => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if c < ' ' => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn render(source: &str, errors: Vec<OxcDiagnostic>) -> Diagnostics {
    let handler = GraphicalReportHandler::new_themed(GraphicalTheme::unicode_nocolor());
    let mut out = String::new();
    for e in errors {
        let report = e.with_source_code(NamedSource::new("main.ts", source.to_owned()));
        if handler.render_report(&mut out, report.as_ref()).is_err() {
            out.push_str(&report.to_string());
            out.push('\n');
        }
    }
    if out.is_empty() {
        out.push_str("main.ts: the TypeScript compiler stopped without a message\n");
    }
    Diagnostics(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_are_stripped_and_the_rest_is_kept() {
        let js = to_javascript("const x: number = 6*7; console.log(x)").unwrap();
        assert!(!js.module);
        assert!(!js.code.contains("number"), "{}", js.code);
        assert!(js.code.contains("console.log(x)"), "{}", js.code);
        let js = to_javascript(
            "interface P { x: number }\nfunction f(p: P): string { return `${p.x}` }\nconsole.log(f({ x: 1 } as P));",
        )
        .unwrap();
        assert!(!js.code.contains("interface"), "{}", js.code);
        assert!(
            js.code.contains("`${p.x}`"),
            "template literals are not lowered: {}",
            js.code
        );
    }

    #[test]
    fn enums_and_namespaces_are_lowered() {
        let js = to_javascript(
            "enum E { A = 1, B }\nnamespace N { export const v = E.B }\nconsole.log(N.v)",
        )
        .unwrap();
        assert!(!js.code.contains("enum E"), "{}", js.code);
        assert!(!js.code.contains("namespace"), "{}", js.code);
    }

    #[test]
    fn imports_and_exports_make_a_module() {
        let js = to_javascript(
            "import { readFileSync } from 'node:fs';\nconsole.log(typeof readFileSync)",
        )
        .unwrap();
        assert!(js.module);
        // A type-only import leaves nothing behind.
        let js =
            to_javascript("import type { X } from './x';\nconst y: X = 1 as X;\nconsole.log(y)")
                .unwrap();
        assert!(!js.code.contains("import"), "{}", js.code);
    }

    #[test]
    fn strings_are_javascript_literals() {
        assert_eq!(
            js_string("a\"b\\c\nd\te\u{2028}"),
            r#""a\"b\\c\nd\u0009e\u2028""#
        );
    }

    #[test]
    fn syntax_errors_are_diagnostics_with_the_place() {
        let e = to_javascript("const x: = 1;\n").unwrap_err();
        let text = e.to_string();
        assert!(text.contains("main.ts"), "{text}");
        assert!(text.contains("1:"), "line and column: {text}");
        assert!(
            !format!("{e:?}").contains("const x"),
            "Debug hides the source"
        );
    }

    /// Runs a command with `/bin/sh` and this machine's `node` (CI installs Node 20).
    fn run(cmd: &Command) -> (Option<i32>, String, String) {
        use std::io::Write;
        let mut child = std::process::Command::new("/bin/sh")
            .args(&cmd.argv()[1..])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(cmd.stdin()).unwrap();
        let out = child.wait_with_output().unwrap();
        let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
        (out.status.code(), text(out.stdout), text(out.stderr))
    }

    #[test]
    fn the_command_runs_on_plain_node() {
        let (code, out, err) = run(&command("const x: number = 6*7; console.log(x)").unwrap());
        assert_eq!((code, out.as_str()), (Some(0), "42\n"), "{err}");
        // An ES module, on Node versions without module detection too.
        let src = "import { basename } from 'node:path';\nconst n: string = basename('/a/b.ts');\nconsole.log(n);";
        let (code, out, err) = run(&command(src).unwrap());
        assert_eq!((code, out.as_str()), (Some(0), "b.ts\n"), "{err}");
        // Above one argument's size, the program goes on stdin.
        let big = format!(
            "{}\nconsole.log('big' as string)",
            "// pad\n".repeat(20_000)
        );
        let cmd = command(&big).unwrap();
        assert_eq!(cmd.argv().len(), 4, "on stdin");
        let (code, out, err) = run(&cmd);
        assert_eq!((code, out.as_str()), (Some(0), "big\n"), "{err}");
    }

    #[test]
    fn a_syntax_error_is_the_programs_failure_with_the_diagnostic() {
        let (code, out, err) = run(&command("const x: = 1;").unwrap());
        assert_eq!(code, Some(1));
        assert_eq!(out, "");
        assert!(
            err.contains("Unexpected token") && err.contains("main.ts:1:"),
            "{err}"
        );
    }
}
