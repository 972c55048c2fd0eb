//! read and write: the commands, and how their outputs are read.

use bytes::Bytes;
use execseam_core::{Command, Error, Tool};
use execseam_tools_protocol::native;

use crate::error::ToolError;

/// `b ROOT PATH` (a shell function every file script starts with): with a `ROOT`, refuses
/// (`outside-root`) a `PATH` below it that is reached through a symlink. From `ROOT` (itself
/// followed), each existing directory on the way is entered with `cd -P`; a symlink among them
/// is refused (also one pointing inside the root: simplest, and what Codex's patch rule
/// implies), and so is the last component when `L` is set (a read, a walk's start: `cat` and
/// `find -H` would follow it); the walk stops at the first missing component (`mkdir -p`
/// creates real directories). The physical directory reached must be below `ROOT`'s. A writer
/// inside the sandbox that swaps a directory for a symlink between this check and the use can
/// still race it: it can already run commands there.
const BENEATH: &str = r#"f() { printf 'execseam-tools: %s: %s\n' "$1" "$2" >&2; exit 3; }
b() { [ -n "$1" ] || return 0
  s=${1%/}; r=${2#"$s"}; r=${r#/}
  cd -P -- "$1" 2>/dev/null || return 0
  R=$(pwd -P)
  set -f; o=$IFS; IFS=/; set -- $r; IFS=$o; set +f
  while [ $# -gt 0 ]; do
    [ -n "$1" ] || { shift; continue; }
    s=$s/$1
    if [ -L "$1" ]; then { [ $# -gt 1 ] || [ -n "$L" ]; } && f outside-root "$s"; break; fi
    [ $# -gt 1 ] && [ -d "$1" ] || break
    cd -P -- "$1" 2>/dev/null || break
    shift
  done
  case $(pwd -P)/ in "${R%/}"/*) ;; *) f outside-root "$s";; esac
  cd /
}
"#;

/// Checks the file (`$1`) before reading it (`$5`: the root it must be beneath; `$6 = enc`:
/// the bytes as text, `b64` or `hex` then the encoding, for adapters whose output is text).
const READ_SCRIPT: &str = r#"p=$1; L=1; b "$5" "$p"; E=$6
e() { if command -v base64 >/dev/null 2>&1; then echo b64; base64; else echo hex; od -An -v -tx1; fi; }
o() { if [ -n "$E" ]; then "$@" | e; else "$@"; fi; }
if [ ! -e "$p" ]; then
  [ -L "$p" ] || case $(ls -d -- "$p" 2>&1) in *'ermission denied'*) f permission-denied "$p";; esac
  f not-found "$p"
fi
[ -d "$p" ] && f is-a-directory "$p"
[ -r "$p" ] || f permission-denied "$p"
case $2 in
bytes) if [ -n "$4" ]; then tail -c "+$3" "$p" | o head -c "$4"; exit; fi; o tail -c "+$3" "$p"; exit;;
lines) if [ -n "$4" ]; then tail -n "+$3" "$p" | o head -n "$4"; exit; fi; o tail -n "+$3" "$p"; exit;;
esac
o cat "$p"
"#;

/// Writes stdin to a temporary file `$2` in the target's directory, then renames it over `$1`
/// (`$3 = p`: create missing parents first; `$4 = stage`: leave the temporary file for a later
/// commit; `$5`: the root it must be beneath). An existing regular file's mode is kept (`cp -p`,
/// then overwritten); a symlink at the path is replaced, not followed.
const WRITE_SCRIPT: &str = r#"p=$1; t=$2; d=${p%/*}; [ -n "$d" ] || d=/; b "$5" "$p"
if [ -n "$3" ] && [ ! -d "$d" ]; then
  m=$(mkdir -p "$d" 2>&1) || case $m in
  *'ermission denied'*) f permission-denied "$d";;
  *'ot a directory'*|*'ile exists'*) f not-a-directory "$d";;
  esac
fi
if [ ! -d "$d" ]; then
  [ -e "$d" ] && f not-a-directory "$d"
  case $(ls -d -- "$d" 2>&1) in *'ermission denied'*) f permission-denied "$d";; esac
  f not-found "$d"
fi
[ -d "$p" ] && f is-a-directory "$p"
[ -w "$d" ] && [ -x "$d" ] || f permission-denied "$d"
[ ! -e "$p" ] || [ -w "$p" ] || f permission-denied "$p"
if [ -f "$p" ] && [ ! -L "$p" ]; then cp -p "$p" "$t" 2>/dev/null || rm -f "$t"; fi
cat > "$t" || { rm -f "$t"; exit 1; }
[ -z "$4" ] || exit 0
mv -f "$t" "$p" || { rm -f "$t"; exit 1; }
"#;

/// Renames staged files over their targets and removes deleted ones, in one command:
/// `mv TEMP PATH` and `rm PATH` operations in the arguments after the root (`$1`) every path is
/// checked beneath again (a directory swapped for a symlink since the stage).
const COMMIT_SCRIPT: &str = r#"root=$1; shift
for a in "$@"; do case $a in /*) b "$root" "$a";; esac; done
while [ $# -gt 0 ]; do
  case $1 in
  mv) mv -f "$2" "$3" || exit 1; shift 3;;
  rm) rm -f "$2" || exit 1; shift 2;;
  *) exit 2;;
  esac
done
"#;

/// Which part of a file to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ReadRange {
    /// The whole file.
    #[default]
    All,
    /// `len` bytes (all the rest when `None`) from byte `offset` (0-based).
    Bytes {
        /// 0-based first byte.
        offset: u64,
        /// How many bytes at most.
        len: Option<u64>,
    },
    /// `count` lines (all the rest when `None`) from line `first` (1-based); each line keeps its
    /// `\n` (the last one may have none).
    Lines {
        /// 1-based first line.
        first: u64,
        /// How many lines at most.
        count: Option<u64>,
    },
}

/// `$1` beneath `$2`, the last component included: a walk's start, a workdir.
const CHECK_SCRIPT: &str = r#"L=1; b "$2" "$1"
"#;

fn script(body: &str) -> String {
    format!("{BENEATH}{body}")
}

/// The command that checks `path` is beneath `root` through no symlink.
pub(crate) fn check_command(tool: Tool, path: &str, root: &str) -> Result<Command, ToolError> {
    Ok(Command::builder([
        "sh",
        "-c",
        &script(CHECK_SCRIPT),
        "execseam-check",
        path,
        root,
    ])
    .tool(tool)
    .env(native::ENV.0, native::ENV.1)
    .build()?)
}

/// How a read's bytes travel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Carry {
    /// As they are.
    Bytes,
    /// Encoded as text (`b64` or `hex` on the first line), for an output that is text.
    Text,
}

/// The bytes of a read's output.
pub(crate) fn decode_read(stdout: Bytes, carry: Carry) -> Result<Bytes, String> {
    if carry == Carry::Bytes {
        return Ok(stdout);
    }
    let text: Vec<u8> = stdout.to_vec();
    let (how, rest) = match text.iter().position(|&b| b == b'\n') {
        Some(i) => (&text[..i], &text[i + 1..]),
        None => return Err("the encoded read has no header line".into()),
    };
    let body: Vec<u8> = rest
        .iter()
        .copied()
        .filter(|b| !b.is_ascii_whitespace())
        .collect();
    match how {
        b"b64" => {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD
                .decode(&body)
                .map(Bytes::from)
                .map_err(|e| format!("the base64 read is malformed: {e}"))
        }
        b"hex" => {
            if !body.len().is_multiple_of(2) {
                return Err("the hex read has an odd length".into());
            }
            body.chunks(2)
                .map(|p| {
                    std::str::from_utf8(p)
                        .ok()
                        .and_then(|h| u8::from_str_radix(h, 16).ok())
                        .ok_or_else(|| "the hex read is malformed".to_owned())
                })
                .collect::<Result<Vec<u8>, String>>()
                .map(Bytes::from)
        }
        other => Err(format!(
            "unknown read encoding {:?}",
            String::from_utf8_lossy(other)
        )),
    }
}

pub(crate) fn read_command(
    path: &str,
    range: ReadRange,
    root: Option<&str>,
    carry: Carry,
) -> Result<Command, ToolError> {
    let (mode, from, n) = match range {
        ReadRange::All => ("", String::new(), None),
        ReadRange::Bytes { offset, len } => ("bytes", (offset.saturating_add(1)).to_string(), len),
        ReadRange::Lines { first, count } => {
            if first == 0 {
                return Err(ToolError::invalid("lines are numbered from 1"));
            }
            ("lines", first.to_string(), count)
        }
    };
    if n == Some(0) {
        return Err(ToolError::invalid("an empty range reads nothing"));
    }
    let n = n.map(|n| n.to_string()).unwrap_or_default();
    Ok(Command::builder([
        "sh",
        "-c",
        &script(READ_SCRIPT),
        "execseam-read",
        path,
        mode,
        &from,
        &n,
        root.unwrap_or_default(),
        if carry == Carry::Text { "enc" } else { "" },
    ])
    .tool(Tool::READ)
    .env(native::ENV.0, native::ENV.1)
    .build()?)
}

pub(crate) fn write_command(
    tool: Tool,
    path: &str,
    temp: &str,
    create_parents: bool,
    stage: bool,
    root: Option<&str>,
    content: Bytes,
) -> Result<Command, ToolError> {
    Ok(Command::builder([
        "sh",
        "-c",
        &script(WRITE_SCRIPT),
        "execseam-write",
        path,
        temp,
        if create_parents { "p" } else { "" },
        if stage { "stage" } else { "" },
        root.unwrap_or_default(),
    ])
    .tool(tool)
    .env(native::ENV.0, native::ENV.1)
    .stdin(content)
    .build()?)
}

/// One step of a commit.
pub(crate) enum Step {
    Rename { temp: String, path: String },
    Remove { path: String },
}

pub(crate) fn commit_command(steps: &[Step], root: &str) -> Result<Command, Error> {
    let mut argv: Vec<String> = vec![
        "sh".into(),
        "-c".into(),
        script(COMMIT_SCRIPT),
        "execseam-commit".into(),
        root.into(),
    ];
    for s in steps {
        match s {
            Step::Rename { temp, path } => argv.extend(["mv".into(), temp.clone(), path.clone()]),
            Step::Remove { path } => argv.extend(["rm".into(), path.clone()]),
        }
    }
    Command::builder(argv)
        .tool(Tool::APPLY_PATCH)
        .env(native::ENV.0, native::ENV.1)
        .build()
}

pub(crate) fn cleanup_command(temps: &[String]) -> Result<Command, Error> {
    Command::builder(["rm", "-f", "--"])
        .args(temps.iter().cloned())
        .tool(Tool::APPLY_PATCH)
        .build()
}
