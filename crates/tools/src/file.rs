//! read and write: the commands, and how their outputs are read.

use bytes::Bytes;
use execseam_core::{Command, Error, Tool};
use execseam_tools_protocol::native;

use crate::error::ToolError;

/// Checks the file (`$1`) before reading it.
const READ_SCRIPT: &str = r#"f() { printf 'execseam-tools: %s: %s\n' "$1" "$2" >&2; exit 3; }
p=$1
if [ ! -e "$p" ]; then
  [ -L "$p" ] || case $(ls -d -- "$p" 2>&1) in *'ermission denied'*) f permission-denied "$p";; esac
  f not-found "$p"
fi
[ -d "$p" ] && f is-a-directory "$p"
[ -r "$p" ] || f permission-denied "$p"
case $2 in
bytes) if [ -n "$4" ]; then tail -c "+$3" "$p" | head -c "$4"; exit; fi; exec tail -c "+$3" "$p";;
lines) if [ -n "$4" ]; then tail -n "+$3" "$p" | head -n "$4"; exit; fi; exec tail -n "+$3" "$p";;
esac
exec cat "$p"
"#;

/// Writes stdin to a temporary file `$2` in the target's directory, then renames it over `$1`
/// (`$3 = p`: create missing parents first; `$4 = stage`: leave the temporary file for a later
/// commit). An existing regular file's mode is kept (`cp -p`, then overwritten).
const WRITE_SCRIPT: &str = r#"f() { printf 'execseam-tools: %s: %s\n' "$1" "$2" >&2; exit 3; }
p=$1; t=$2; d=${p%/*}; [ -n "$d" ] || d=/
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
/// `mv TEMP PATH` and `rm PATH` operations in the arguments.
const COMMIT_SCRIPT: &str = r#"while [ $# -gt 0 ]; do
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

pub(crate) fn read_command(path: &str, range: ReadRange) -> Result<Command, ToolError> {
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
        READ_SCRIPT,
        "execseam-read",
        path,
        mode,
        &from,
        &n,
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
    content: Bytes,
) -> Result<Command, ToolError> {
    Ok(Command::builder([
        "sh",
        "-c",
        WRITE_SCRIPT,
        "execseam-write",
        path,
        temp,
        if create_parents { "p" } else { "" },
        if stage { "stage" } else { "" },
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

pub(crate) fn commit_command(steps: &[Step]) -> Result<Command, Error> {
    let mut argv: Vec<String> = vec![
        "sh".into(),
        "-c".into(),
        COMMIT_SCRIPT.into(),
        "execseam-commit".into(),
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
