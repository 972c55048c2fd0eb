//! `execseam glob|list|grep|read|write|patch`: the builtin tools through any adapter.
//!
//! Paths are relative to `--root` (default: this process's working directory, which only means
//! something for the local adapter; pass `--root` for a remote sandbox). Listings are ordered and
//! truncated by the library (`execseam-tools`), never by the sandbox.
//!
//! Exit status: 0 on success; **1** for a typed error about the request (not found, not a
//! directory, permission denied, invalid pattern, a patch that does not apply: one line on
//! stderr, or `{"error": …}` with `--json`); **125** for an infrastructure failure (or a tool
//! command that failed in a way no typed error describes); 2 for a usage error.
//!
//! `--json` shapes: glob and list print `{"paths": [...], "omitted": N}` (paths relative to the
//! root; list marks directories with a trailing `/`), plus `"skipped": [...]` when the walk could
//! not read something and `"undecodable_base64": [...]` for names that are not UTF-8; grep prints
//! `{"matches": [{"path", "line", "text", "before", "after"}], "omitted": N, "skipped": [...]}`
//! (`-l`: `{"files": [...]}`, `-c`: `{"counts": [{"path", "count"}]}`; a path or text that is not
//! UTF-8 is `{"base64": …}`); edit prints `{"path", "replacements"}`; errors print
//! `{"error": {"code", "message", "path", "retry": {"class", …}, "kind"?}}`; read prints `{"content",
//! "content_base64"}`; write prints `{"path", "bytes"}`; patch prints `{"files": [{"path",
//! "change"}]}`.

use std::io::{Read, Write};
use std::process::ExitCode;

use clap::Args;
use execseam_adapter_kit::degrade::base64_encode;
use execseam_core::{Error, Exec};
use execseam_tools::{
    Change, GrepOptions, Listing, ReadRange, RelPath, ToolError, Tools, WriteOptions, escape,
};
use serde_json::{Value, json};

use crate::{INFRA_FAILURE, registry};

/// Options shared by every tool command.
#[derive(Args)]
pub struct Common {
    /// The adapter to run through.
    #[arg(long, default_value = "local")]
    adapter: String,
    /// Work in this existing sandbox (left running); without it a sandbox is created and
    /// destroyed before exiting.
    #[arg(long, env = "EXECSEAM_SANDBOX")]
    sandbox: Option<String>,
    /// The absolute directory paths are relative to (default: the current directory).
    #[arg(long, value_name = "DIR")]
    root: Option<String>,
    /// Print one JSON object.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct GlobArgs {
    /// The glob, relative to the root (`**/*.rs`, `src/{a,b}/*.md`).
    pattern: String,
    /// Keep at most this many paths (the rest are counted as omitted).
    #[arg(long, default_value_t = 1000)]
    limit: usize,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
pub struct ListArgs {
    /// The directory to list, relative to the root (default: the root).
    dir: Option<String>,
    /// How many levels below the directory (default: all).
    #[arg(long)]
    depth: Option<u32>,
    /// Keep at most this many entries.
    #[arg(long, default_value_t = 1000)]
    limit: usize,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
pub struct GrepArgs {
    /// A POSIX extended regular expression (a plain string with --fixed).
    regex: String,
    /// Only files matching this glob (without `/`: the file name at any depth).
    #[arg(long)]
    glob: Option<String>,
    /// The pattern is a plain string.
    #[arg(long, short = 'F')]
    fixed: bool,
    /// ASCII case-insensitive.
    #[arg(long, short = 'i')]
    ignore_case: bool,
    /// Lines of context before each match.
    #[arg(long, short = 'B', value_name = "N", default_value_t = 0)]
    before: usize,
    /// Lines of context after each match.
    #[arg(long, short = 'A', value_name = "N", default_value_t = 0)]
    after: usize,
    /// Lines of context before and after each match (overrides -A/-B).
    #[arg(long, short = 'C', value_name = "N")]
    context: Option<usize>,
    /// Print only the files with a match (the limit counts files).
    #[arg(long, short = 'l', conflicts_with = "count")]
    files_with_matches: bool,
    /// Print how many lines match in each file with a match (the limit counts files).
    #[arg(long, short = 'c')]
    count: bool,
    /// Keep at most this many matches (or files with -l/-c).
    #[arg(long, default_value_t = 1000)]
    limit: usize,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
pub struct ReadArgs {
    /// The file, relative to the root or absolute.
    path: String,
    /// Lines FIRST[:COUNT] (1-based).
    #[arg(long, value_name = "FIRST[:COUNT]", conflicts_with = "bytes")]
    lines: Option<String>,
    /// Bytes OFFSET[:LEN] (0-based).
    #[arg(long, value_name = "OFFSET[:LEN]")]
    bytes: Option<String>,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
pub struct WriteArgs {
    /// The file, relative to the root or absolute.
    path: String,
    /// Read the content from this file (default: this process's stdin).
    #[arg(long, value_name = "FILE")]
    from: Option<String>,
    /// Fail when the parent directory is missing (by default missing parents are created).
    #[arg(long)]
    no_create_parents: bool,
    #[command(flatten)]
    common: Common,
}

#[derive(Args)]
pub struct PatchArgs {
    /// The unified diff (default, or `-`: this process's stdin).
    file: Option<String>,
    #[command(flatten)]
    common: Common,
}

/// The root as an absolute path.
fn root(c: &Common) -> Result<String, ToolError> {
    match &c.root {
        Some(r) => Ok(r.clone()),
        None => std::env::current_dir()
            .ok()
            .and_then(|d| d.to_str().map(str::to_owned))
            .ok_or_else(|| ToolError::InvalidArgument {
                message: "the current directory is not UTF-8; pass --root".into(),
            }),
    }
}

fn under(root: &str, p: &str) -> String {
    if p.starts_with('/') {
        p.to_owned()
    } else if root == "/" {
        format!("/{p}")
    } else {
        format!("{root}/{p}")
    }
}

/// Runs `f` in a sandbox of `c`'s adapter, then closes it (one this run created is destroyed),
/// whatever `f` gave.
async fn with_sandbox<T>(
    c: &Common,
    f: impl AsyncFnOnce(&dyn Exec) -> Result<T, ToolError>,
) -> Result<T, ToolError> {
    let sandbox = registry::open(&c.adapter, c.sandbox.as_deref()).await?;
    let r = f(&*sandbox).await;
    registry::close(&*sandbox).await;
    r
}

/// The error as JSON: `execseam_tools::wire`'s shape (`code`, `message`, `path`, `retry` as
/// `{"class", "after_ms"}`, and `kind` for an infrastructure failure).
fn error_json(e: &ToolError) -> Value {
    serde_json::to_value(e).unwrap_or(Value::Null)
}

/// Prints the outcome and picks the exit status.
fn finish(json: bool, r: Result<(), ToolError>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if json {
                println!("{}", json!({ "error": error_json(&e) }));
            } else {
                eprintln!("execseam: {e}");
            }
            match e {
                ToolError::Exec(_) | ToolError::Failed { .. } => ExitCode::from(INFRA_FAILURE),
                _ => ExitCode::from(1),
            }
        }
    }
}

fn paths_json(
    paths: impl Iterator<Item = (RelPath, bool)>,
    omitted: usize,
    skipped: &[String],
) -> Value {
    let mut utf8 = Vec::new();
    let mut raw = Vec::new();
    for (p, dir) in paths {
        let slash = if dir { "/" } else { "" };
        match p.as_str() {
            Some(s) => utf8.push(Value::String(format!("{s}{slash}"))),
            None => {
                let mut b = p.as_bytes().to_vec();
                b.extend_from_slice(slash.as_bytes());
                raw.push(Value::String(base64_encode(&b)));
            }
        }
    }
    let mut v = json!({ "paths": utf8, "omitted": omitted });
    if !skipped.is_empty() {
        v["skipped"] = json!(skipped);
    }
    if !raw.is_empty() {
        v["undecodable_base64"] = Value::Array(raw);
    }
    v
}

fn print_notes<T>(l: &Listing<T>) {
    for s in &l.skipped {
        eprintln!("execseam: skipped: {s}");
    }
    if l.omitted > 0 {
        eprintln!("execseam: {} more omitted (raise --limit)", l.omitted);
    }
}

pub async fn glob(a: GlobArgs) -> ExitCode {
    let json = a.common.json;
    let r = with_sandbox(&a.common, async |exec| {
        let l = Tools::new(exec)
            .glob(&root(&a.common)?, &a.pattern, a.limit)
            .await?;
        if json {
            let items = l.items.iter().map(|p| (p.clone(), false));
            println!("{}", paths_json(items, l.omitted, &l.skipped));
        } else {
            let mut out = std::io::stdout().lock();
            for p in &l.items {
                let _ = writeln!(out, "{p}");
            }
            print_notes(&l);
        }
        Ok(())
    })
    .await;
    finish(json, r)
}

pub async fn list(a: ListArgs) -> ExitCode {
    let json = a.common.json;
    let r = with_sandbox(&a.common, async |exec| {
        let root = root(&a.common)?;
        let dir = a.dir.as_deref().map_or(root.clone(), |d| under(&root, d));
        let l = Tools::new(exec).list(&dir, a.depth, a.limit).await?;
        if json {
            let items = l.items.iter().map(|e| (e.path.clone(), e.is_dir));
            println!("{}", paths_json(items, l.omitted, &l.skipped));
        } else {
            let mut out = std::io::stdout().lock();
            for e in &l.items {
                let _ = writeln!(out, "{}{}", e.path, if e.is_dir { "/" } else { "" });
            }
            print_notes(&l);
        }
        Ok(())
    })
    .await;
    finish(json, r)
}

pub async fn grep(a: GrepArgs) -> ExitCode {
    let json = a.common.json;
    let r = with_sandbox(&a.common, async |exec| {
        let options = GrepOptions {
            glob: a.glob.clone(),
            fixed: a.fixed,
            ignore_case: a.ignore_case,
            before: a.context.unwrap_or(a.before),
            after: a.context.unwrap_or(a.after),
        };
        let tools = Tools::new(exec);
        let root = root(&a.common)?;
        if a.files_with_matches {
            let l = tools.grep_files(&root, &a.regex, &options, a.limit).await?;
            if json {
                println!(
                    "{}",
                    json!({ "files": l.items, "omitted": l.omitted, "skipped": l.skipped })
                );
            } else {
                let mut out = std::io::stdout().lock();
                for p in &l.items {
                    let _ = writeln!(out, "{p}");
                }
                print_notes(&l);
            }
            return Ok(());
        }
        if a.count {
            let l = tools.grep_count(&root, &a.regex, &options, a.limit).await?;
            if json {
                println!(
                    "{}",
                    json!({ "counts": l.items, "omitted": l.omitted, "skipped": l.skipped })
                );
            } else {
                let mut out = std::io::stdout().lock();
                for c in &l.items {
                    let _ = writeln!(out, "{}:{}", c.path, c.count);
                }
                print_notes(&l);
            }
            return Ok(());
        }
        let l = tools.grep(&root, &a.regex, &options, a.limit).await?;
        if json {
            println!(
                "{}",
                json!({ "matches": l.items, "omitted": l.omitted, "skipped": l.skipped })
            );
        } else {
            let mut out = std::io::stdout().lock();
            for m in &l.items {
                let first = m.line - m.before.len() as u64;
                for (i, b) in m.before.iter().enumerate() {
                    let _ = writeln!(out, "{}-{}-{}", m.path, first + i as u64, escape(b));
                }
                let _ = writeln!(out, "{}:{}:{}", m.path, m.line, escape(&m.text));
                for (i, b) in m.after.iter().enumerate() {
                    let _ = writeln!(out, "{}-{}-{}", m.path, m.line + 1 + i as u64, escape(b));
                }
            }
            print_notes(&l);
        }
        Ok(())
    })
    .await;
    finish(json, r)
}

#[derive(Args)]
pub struct EditArgs {
    /// The file, relative to the root or absolute.
    path: String,
    /// The exact text to replace (it must occur once unless --all).
    #[arg(long)]
    old: String,
    /// The replacement.
    #[arg(long)]
    new: String,
    /// Replace every occurrence.
    #[arg(long)]
    all: bool,
    #[command(flatten)]
    common: Common,
}

/// `execseam edit`: exact replacement; exit 1 when the text is absent or not unique.
pub async fn edit(a: EditArgs) -> ExitCode {
    let json = a.common.json;
    let r = with_sandbox(&a.common, async |exec| {
        let path = under(&root(&a.common)?, &a.path);
        let n = Tools::new(exec).edit(&path, &a.old, &a.new, a.all).await?;
        if json {
            println!("{}", json!({ "path": path, "replacements": n }));
        }
        Ok(())
    })
    .await;
    finish(json, r)
}

fn parse_pair(what: &str, s: &str) -> Result<(u64, Option<u64>), ToolError> {
    let bad = || ToolError::InvalidArgument {
        message: format!("--{what} {s:?}: want N or N:COUNT"),
    };
    let (a, b) = match s.split_once(':') {
        Some((a, b)) => (a, Some(b)),
        None => (s, None),
    };
    let a = a.parse().map_err(|_| bad())?;
    let b = b.map(|b| b.parse().map_err(|_| bad())).transpose()?;
    Ok((a, b))
}

pub async fn read(a: ReadArgs) -> ExitCode {
    let json = a.common.json;
    let r = async {
        let range = match (&a.lines, &a.bytes) {
            (Some(l), _) => {
                let (first, count) = parse_pair("lines", l)?;
                ReadRange::Lines { first, count }
            }
            (None, Some(b)) => {
                let (offset, len) = parse_pair("bytes", b)?;
                ReadRange::Bytes { offset, len }
            }
            (None, None) => ReadRange::All,
        };
        with_sandbox(&a.common, async |exec| {
            let path = under(&root(&a.common)?, &a.path);
            let b = Tools::new(exec).read(&path, range).await?;
            if json {
                let content = std::str::from_utf8(&b).ok();
                println!(
                    "{}",
                    json!({ "content": content, "content_base64": base64_encode(&b) })
                );
            } else {
                let mut out = std::io::stdout().lock();
                let _ = out.write_all(&b);
                let _ = out.flush();
            }
            Ok(())
        })
        .await
    }
    .await;
    finish(json, r)
}

fn input(from: Option<&str>) -> Result<Vec<u8>, ToolError> {
    let mut buf = Vec::new();
    match from {
        None | Some("-") => std::io::stdin()
            .read_to_end(&mut buf)
            .map(drop)
            .map_err(|e| ToolError::InvalidArgument {
                message: format!("reading stdin: {e}"),
            })?,
        Some(f) => {
            buf = std::fs::read(f).map_err(|e| ToolError::InvalidArgument {
                message: format!("{f}: {e}"),
            })?
        }
    }
    Ok(buf)
}

pub async fn write(a: WriteArgs) -> ExitCode {
    let json = a.common.json;
    let r = async {
        let content = input(a.from.as_deref())?;
        with_sandbox(&a.common, async |exec| {
            let path = under(&root(&a.common)?, &a.path);
            let n = content.len();
            Tools::new(exec)
                .write_with(
                    &path,
                    content,
                    WriteOptions {
                        create_parents: !a.no_create_parents,
                    },
                )
                .await?;
            if json {
                println!("{}", json!({ "path": path, "bytes": n }));
            }
            Ok(())
        })
        .await
    }
    .await;
    finish(json, r)
}

pub async fn patch(a: PatchArgs) -> ExitCode {
    let json = a.common.json;
    let r = async {
        let text = input(a.file.as_deref())?;
        let text = String::from_utf8(text).map_err(|_| ToolError::InvalidArgument {
            message: "the patch is not UTF-8".into(),
        })?;
        with_sandbox(&a.common, async |exec| {
            let files = Tools::new(exec)
                .apply_patch(&root(&a.common)?, &text)
                .await?;
            let tag = |c: Change| match c {
                Change::Created => "created",
                Change::Modified => "modified",
                Change::Deleted => "deleted",
            };
            if json {
                let files: Vec<Value> = files
                    .iter()
                    .map(|f| json!({ "path": f.path, "change": tag(f.change) }))
                    .collect();
                println!("{}", json!({ "files": files }));
            } else {
                for f in &files {
                    println!("{} {}", tag(f.change), f.path);
                }
            }
            Ok(())
        })
        .await
    }
    .await;
    finish(json, r)
}

#[derive(Args)]
pub struct CodeArgs {
    /// python, javascript, typescript or bash.
    #[arg(long)]
    language: String,
    /// The adapter to run through.
    #[arg(long, default_value = "local")]
    adapter: String,
    /// Run in this existing sandbox (left running); without it a sandbox is created and
    /// destroyed before exiting.
    #[arg(long, env = "EXECSEAM_SANDBOX")]
    sandbox: Option<String>,
    /// Seconds, 1..=600 (default 180).
    #[arg(long, value_name = "SECS")]
    timeout: Option<u64>,
    /// Print the whole result (or error) as one JSON object, as `execseam run --json`.
    #[arg(long)]
    json: bool,
    /// The program's source file, or `-` for this process's stdin.
    #[arg(value_name = "FILE|-")]
    file: String,
}

/// `execseam code`: runs an exact source program; exits with the program's status (128+n for a
/// signal), 1 for a bad request (language, timeout, unreadable file), 125 for an infrastructure
/// failure.
pub async fn code(a: CodeArgs) -> ExitCode {
    let r = async {
        let language: execseam_tools::Language =
            a.language
                .parse()
                .map_err(|e: Error| ToolError::InvalidArgument {
                    message: e.message().to_owned(),
                })?;
        let mut source = Vec::new();
        let read = if a.file == "-" {
            std::io::stdin().read_to_end(&mut source).map(|_| ())
        } else {
            std::fs::read(&a.file).map(|b| source = b)
        };
        read.map_err(|e| ToolError::InvalidArgument {
            message: format!("reading {}: {e}", a.file),
        })?;
        let source = String::from_utf8(source).map_err(|_| ToolError::InvalidArgument {
            message: format!("{} is not UTF-8 source", a.file),
        })?;
        with_sandbox(
            &Common {
                adapter: a.adapter.clone(),
                sandbox: a.sandbox.clone(),
                root: None,
                json: a.json,
            },
            async |exec| {
                Tools::new(exec)
                    .code(
                        language,
                        &source,
                        a.timeout.map(std::time::Duration::from_secs),
                    )
                    .await
            },
        )
        .await
    }
    .await;
    match r {
        Ok(out) => {
            if a.json {
                println!("{}", crate::run::output_json(&out));
            } else {
                let _ = std::io::stdout().write_all(&out.stdout);
                let _ = std::io::stderr().write_all(&out.stderr);
                let _ = std::io::stdout().flush();
            }
            ExitCode::from(out.exit.shell_status().clamp(0, 255) as u8)
        }
        Err(e) => finish(a.json, Err(e)),
    }
}
