//! Process handles for any sandbox that runs `sh`: the **spool**, written once.
//!
//! [`Spool`] implements the contract's [`Processes`] over an adapter's ordinary
//! [`Exec`]: the command's streams go to files in the sandbox, a supervisor shell records its
//! exit by rename, and every operation (read from offsets, stdin, signals, status, list,
//! release) is one short exec of a fixed script. An adapter gets process handles with
//!
//! ```ignore
//! fn processes(&self) -> Option<Box<dyn Processes + '_>> {
//!     Some(Box::new(Spool::new(self, self.id())))
//! }
//! ```
//!
//! and declares [`SPOOLED`] in its `Capabilities::processes`. Where the provider has a native
//! way to start a process that outlives the call (E2B `Start`, Docker detached exec), the
//! adapter passes a [`Launch`] ([`Spool::launch`]) and declares [`HYBRID`]: the spool then only
//! prepares the directory through exec, and the provider runs the supervisor.
//!
//! # Layout (`<root>/<key>/`, mode 700)
//!
//! | file | written by | meaning |
//! |---|---|---|
//! | the directory | the start (`mkdir`, atomic) | the start lock: it exists, so this key was started |
//! | `out`, `err` | the command (`>>`) | stdout and stderr, byte-exact; offsets are file offsets |
//! | `in.log`, `in.closed`, `in` (FIFO), `wake` (FIFO) | the start, stdin writes | every accepted stdin byte; closed; the pump's FIFO to the command and its wake-up |
//! | `ready` | the start | the directory is complete |
//! | `run` | the supervisor (`ln -s <its pid>`, atomic with its content) | the supervisor lock: at most one supervisor runs a key; the link's target is its pid |
//! | `pid` | the command, before `exec` (by rename) | the command's pid = its process group and session |
//! | `exit` | the supervisor, by rename | `<status> <stdout bytes> <stderr bytes>`: the shell's status and the final sizes |
//! | `out.base`, `err.base` | a read over the retention limit | the first offset still retained |
//!
//! # Why this shape
//!
//! - The command runs in the supervisor's **foreground** under `setsid`: its own session and
//!   process group (so a signal to `-pgid` reaches its children, and none of the provider's own
//!   group kills reach it by accident), and SIGINT/SIGQUIT not ignored (an `&` list would start
//!   it with both ignored).
//! - Its redirections are made inside it, after `setsid`, so the supervisor's own messages never
//!   land in `err`.
//! - The supervisor records the sizes with the status: output written after the exit by
//!   leftover children is not part of the command's output, and every attach agrees on where
//!   the output ends.
//! - Stdin is exactly-once by offset: `in.log` is the truth, a write is appended under a lock
//!   only at the accepted count, and a pump forwards `in.log` to the FIFO once.
//! - A signal death is the shell's `128 + n` ([`ProcessCapabilities::exact_signal_exit`] false).
//!
//! # Terminals: the recorder
//!
//! Where the adapter declares [`ProcessCapabilities::terminal`] (the sandbox has util-linux
//! `script(1)` and `stty`), a start with [`StartRequest::terminal`] runs the command under
//! `script -qefc … /dev/null`: a real PTY whose master side `script` copies to its stdout,
//! which is `out` (so offsets, replay and retention are the spool's; `-q` keeps `script`'s
//! header and trailer out of its stdout, they only go to the discarded log file), with its stdin
//! from the spool's FIFO (keystrokes are stdin writes; `0x03` is the line discipline's SIGINT to
//! the foreground group) and `-e` giving the child's status (`128 + n` for a signal death). Inside
//! the PTY a small wrapper sets the size (`stty rows R cols C`; a PTY made without a terminal on
//! `script`'s stdin is 0x0), records the slave's path in `tty` and its own pid in `pid` (the
//! command's session and process group), sets `TERM` (`xterm-256color` unless the command has
//! one), and `exec`s the command. A resize is `stty -F <tty> rows R cols C` from another exec:
//! the kernel sends SIGWINCH to the terminal's foreground group. `term` marks a terminal spool;
//! `tty.err` holds `script`'s own complaints (never part of the output). util-linux 2.38:
//! `script -e` returns the child's status, `128 + n` for a signal death; echo stays on when its
//! stdin is not a terminal (`--echo auto`).
//!
//! # Following
//!
//! An attach reads again after a delay that doubles from `poll`'s min to its max while nothing
//! comes. A stdin write through any spool of the same process brings the next read of that
//! handle's followers in this process forward to `poll`'s min after the write, and starts the
//! doubling again: a terminal's echo comes right after its key, when a follower that had waited
//! long would sleep up to the max (a key every few seconds would otherwise wait about 500 ms for
//! its echo). Writes from other processes are not seen: their followers keep the backoff.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use execseam_core::{
    BoxFuture, Command, Error, ErrorKind, Exec, Exit, Mechanism, ProcessCapabilities, ProcessEvent,
    ProcessHandle, ProcessInfo, ProcessRead, ProcessState, ProcessStream, Processes, Retry, Signal,
    StartKey, StartRequest, Started, StdinMode, StdinState, StdinWrite, StreamOffsets,
    TerminalSize, Waited,
};

/// What the spool gives an adapter that runs everything through exec.
pub const SPOOLED: ProcessCapabilities = ProcessCapabilities {
    mechanism: Mechanism::Spooled,
    idempotent_start: true,
    stdin: true,
    signals: Signal::ALL,
    replay: true,
    retention: None,
    list: true,
    exact_signal_exit: false,
    terminal: false,
    terminal_reattach: false,
};

/// [`SPOOLED`] with terminals through the recorder (the sandbox has util-linux `script(1)`).
pub const SPOOLED_TERMINAL: ProcessCapabilities = ProcessCapabilities {
    terminal: true,
    // The recording lives in the sandbox: any handle can read it again.
    terminal_reattach: true,
    ..SPOOLED
};

/// [`SPOOLED`] with the supervisor started by the provider ([`Launch`]).
pub const HYBRID: ProcessCapabilities = ProcessCapabilities {
    mechanism: Mechanism::Hybrid,
    ..SPOOLED
};

/// [`HYBRID`] with terminals through the recorder.
pub const HYBRID_TERMINAL: ProcessCapabilities = ProcessCapabilities {
    mechanism: Mechanism::Hybrid,
    ..SPOOLED_TERMINAL
};

/// Where spools live by default: in the sandbox's `/tmp`.
pub const DEFAULT_ROOT: &str = "/tmp/.execseam/p";

/// The most bytes of each stream one read returns, by default.
pub const DEFAULT_READ_MAX: u64 = 1 << 20;

/// Runs the shell `script` (as `sh -c script <name>-script args…`) through `exec` with `stdin`
/// and returns its stdout: what a process-handle implementation over exec does for each small
/// operation. A non-zero exit is an `Internal` error naming `operation` and `what`.
pub async fn run_script(
    exec: &dyn Exec,
    operation: &'static str,
    what: &str,
    script: &str,
    args: &[&str],
    stdin: Bytes,
) -> Result<Bytes, Error> {
    let mut argv = vec![
        "sh".to_owned(),
        "-c".to_owned(),
        script.to_owned(),
        format!("execseam-{what}"),
    ];
    argv.extend(args.iter().map(|a| (*a).to_owned()));
    let out = exec
        .exec(Command::builder(argv).stdin(stdin).build()?)
        .await
        .map_err(|e| e.or_context(exec.provider().to_owned(), operation))?;
    if !out.exit.success() {
        return Err(Error::new(
            ErrorKind::Internal,
            format!(
                "the {what} {operation} script failed ({:?}): {}",
                out.exit,
                String::from_utf8_lossy(&out.stderr[..out.stderr.len().min(300)])
            ),
        )
        .with_provider(exec.provider().to_owned())
        .with_operation(operation));
    }
    Ok(out.stdout)
}

/// A provider's own way to run the supervisor so that it outlives the call (E2B `Start`
/// without a timeout, Docker's detached exec, a Sprites session kept after disconnect).
pub trait Launch: Send + Sync {
    /// Runs `supervisor` (a complete command: `sh -c …`, with the started command's workdir and
    /// env) detached; `Ok` once the provider holds it. It must not wait for its end, and its
    /// output is never read.
    fn launch(&self, supervisor: Command) -> BoxFuture<'_, Result<(), Error>>;

    /// Waits up to `within` for the end of the supervisor this provider runs for the spool
    /// directory `dir` (find it with [`supervised_dir`]), where the provider can block on a
    /// command's end (Vercel `GET …/cmd/{id}?wait=true`): `true` once it ended, `false` when it
    /// still runs at `within` or the provider cannot tell. The spool's files stay the truth
    /// (the supervisor records the exit before it ends); this only spares the polling. The
    /// default cannot tell.
    fn wait_supervisor<'a>(
        &'a self,
        _dir: &'a str,
        _within: Duration,
    ) -> BoxFuture<'a, Result<bool, Error>> {
        Box::pin(std::future::ready(Ok(false)))
    }

    /// Forgets what the provider keeps for the supervisor of the spool directory `dir` (its
    /// command has ended: a running handle is not released), after the spool released it.
    /// Best effort: a failure is logged, the release stands. The default keeps nothing.
    fn released<'a>(&'a self, _dir: &'a str) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(std::future::ready(Ok(())))
    }
}

/// The spool directory a supervisor started through [`Launch`] runs, from its whole argv as
/// the provider lists it (`sh -c <supervisor> sh <dir> <mode> argv…`); `None` for any other
/// command.
pub fn supervised_dir(argv: &[String]) -> Option<&str> {
    match argv {
        [sh, c, script, name, dir, ..]
            if sh == "sh" && c == "-c" && script == SUPERVISOR && name == "sh" =>
        {
            Some(dir)
        }
        _ => None,
    }
}

/// The shell functions every script starts with. `alive PID`: the process exists and is not
/// a zombie (a sandbox's init may be slow to reap). `gkill SIG PGID`: signals a process group
/// once: dash needs `--` before a negative pid, BusyBox's `kill` refuses `--` (it signals, then
/// fails), so the form is chosen by a harmless `kill -s 0` to the script itself. `state DIR`
/// (the order matters: the lock is looked at before the liveness, the liveness before the exit)
/// sets `S` (`running`, `exited`, `prepared`, `unknown`), `C` (the status or `-`), `O` and `E`
/// (bytes written).
const PRELUDE: &str = r#"alive() {
  kill -0 "$1" 2>/dev/null || return 1
  [ -r "/proc/$1/stat" ] || return 0
  z=$(sed 's/^.*) //; s/ .*//' "/proc/$1/stat" 2>/dev/null)
  [ "$z" != Z ]
}
gkill() {
  if kill -s 0 -- "$$" 2>/dev/null; then kill -s "$1" -- "-$2"; else kill -s "$1" "-$2"; fi
}
stdin_state() {
  printf '%s %s' "$(wc -c <"$1/in.log")" "$([ -e "$1/in.closed" ] && echo 1 || echo 0)"
}
state() {
  a=0 l=0
  [ -L "$1/run" ] && l=1
  if p=$(cat "$1/pid" 2>/dev/null) && alive "$p"; then a=1
  elif p=$(readlink "$1/run" 2>/dev/null) && alive "$p"; then a=1; fi
  if [ -e "$1/exit" ]; then read -r C O E <"$1/exit"; S=exited
  else C=-; O=$(wc -c <"$1/out"); E=$(wc -c <"$1/err")
    if [ "$a" = 1 ]; then S=running
    elif [ "$l" = 0 ]; then S=prepared
    else S=unknown; fi
  fi
}
"#;

/// The supervisor: `$1` the spool directory, `$2` the stdin mode, then argv.
const SUPERVISOR: &str = r#"d=$1 m=$2; shift 2
[ -e "$d/ready" ] || exit 0
ln -s "$$" "$d/run" 2>/dev/null || exit 0
p=
if [ "$m" != closed ]; then
  setsid sh -c 'd=$1; exec 3<>"$d/in" 4<>"$d/wake"; s=0
    while :; do n=$(wc -c <"$d/in.log")
      if [ "$n" -gt "$s" ]; then tail -c +$((s+1)) "$d/in.log" | head -c $((n-s)) >&3 || exit 0; s=$n; continue; fi
      if [ -e "$d/in.closed" ]; then [ "$(wc -c <"$d/in.log")" -gt "$s" ] && continue; exit 0; fi
      read -r _ <&4 || exit 0
    done' sh "$d" </dev/null >/dev/null 2>&1 &
  p=$!
  i=$d/in
else i=$d/in.log; fi
if [ "$m" = tty ]; then
  setsid sh -c 'd=$1 i=$2; [ -n "${SHELL+x}" ] && { EXECSEAM_SHELL=$SHELL; export EXECSEAM_SHELL; }; SHELL=/bin/sh; export SHELL; exec script -qefc "$3" /dev/null <"$i" >>"$d/out" 2>>"$d/tty.err"' sh "$d" "$i" "$1"
else
  setsid sh -c 'd=$1 i=$2; shift 2; printf "%s\n" "$$" >"$d/pid.tmp" && mv -f "$d/pid.tmp" "$d/pid" && exec "$@" <"$i" >>"$d/out" 2>>"$d/err"' sh "$d" "$i" "$@"
fi
s=$?
[ -n "$p" ] && { kill -s TERM -- "-$p" || kill -s TERM "-$p"; } 2>/dev/null
printf '%s %s %s\n' "$s" "$(wc -c <"$d/out")" "$(wc -c <"$d/err")" >"$d/exit.tmp" && mv -f "$d/exit.tmp" "$d/exit"
exit "$s""#;

/// The start: `$1` root, `$2` key, `$3` stdin mode (`closed`, `open`, `tty`), `$4` whether stdin bytes
/// come on the exec's stdin (`1`, `0`), `$5` what to do (`detach`: run the supervisor with
/// `setsid` twice, below; `prepare`: only the directory, a [`Launch`] runs it), then argv.
/// Detaching: `setsid -f` is util-linux only (BusyBox's `setsid` has no `-f`), so the first
/// `setsid` (of a child that leads no group) makes a session leader that `exec`s the second, which,
/// being a group leader, forks (util-linux and BusyBox alike), returns at once, and the fork
/// leads a new session: the supervisor, with no signal ignored (an `&` list would ignore INT).
/// The supervisor does not inherit the start exec's kill tag (`EXECSEAM_EXEC`, see
/// [`crate::degrade::EXEC_TAG_VAR`]): a start exec dropped after the detach must not kill it.
/// Prints `spool:started <1 if this call made the directory>`, `spool:exists`,
/// `spool:nosetsid` or `spool:noscript`.
const START: &str = r#"r=$1 k=$2 m=$3 h=$4 ph=$5; shift 5
command -v setsid >/dev/null 2>&1 || { echo spool:nosetsid; exit 0; }
if [ "$m" = tty ]; then command -v script >/dev/null 2>&1 && command -v stty >/dev/null 2>&1 || { echo spool:noscript; exit 0; }; fi
d=$r/$k
umask 077
mkdir -p -- "$r" || exit 125
if mkdir -- "$d" 2>/dev/null; then
  f=1
  : >"$d/out" && : >"$d/err" || exit 125
  if [ "$h" = 1 ]; then cat >"$d/in.log" || exit 125; else : >"$d/in.log" || exit 125; fi
  if [ "$m" = closed ]; then : >"$d/in.closed"; else mkfifo "$d/in" "$d/wake" || exit 125; fi
  if [ "$m" = tty ]; then : >"$d/term" || exit 125; fi
  : >"$d/ready"
else
  f=0
  [ -L "$d/run" ] && { echo spool:exists; exit 0; }
  n=0
  while [ ! -e "$d/ready" ]; do
    n=$((n+1)); [ "$n" -gt 200 ] && { echo spool:exists; exit 0; }; sleep 0.05
  done
fi
if [ "$ph" = detach ]; then
  unset EXECSEAM_EXEC
  setsid sh -c 'exec setsid "$@"' sh sh -c "$SUPERVISOR" sh "$d" "$m" "$@" </dev/null >/dev/null 2>&1 || exit 125
fi
echo "spool:started $f""#;

/// A read: `$1` dir, `$2`/`$3` offsets, `$4` the most bytes per stream, `$5` encoding (`raw`,
/// `b64`), `$6` the retention limit per stream (`-`: none). Prints
/// `spool:read S C O E BO BE NO NE` then the bytes (raw: NO then NE bytes; b64: two lines).
const READ: &str = r#"d=$1 oo=$2 oe=$3 mx=$4 enc=$5 ret=$6
[ -d "$d" ] || { echo spool:none; exit 0; }
state "$d"
bo=$(cat "$d/out.base" 2>/dev/null || echo 0); be=$(cat "$d/err.base" 2>/dev/null || echo 0)
if [ "$ret" != - ]; then
  if [ $((O-bo)) -gt "$ret" ]; then bo=$((O-ret)); fallocate -p -o 0 -l "$bo" "$d/out" 2>/dev/null; echo "$bo" >"$d/out.base"; fi
  if [ $((E-be)) -gt "$ret" ]; then be=$((E-ret)); fallocate -p -o 0 -l "$be" "$d/err" 2>/dev/null; echo "$be" >"$d/err.base"; fi
fi
no=0 ne=0
[ "$oo" -ge "$bo" ] && [ "$oo" -le "$O" ] && no=$((O-oo))
[ "$oe" -ge "$be" ] && [ "$oe" -le "$E" ] && ne=$((E-oe))
[ "$no" -gt "$mx" ] && no=$mx
[ "$ne" -gt "$mx" ] && ne=$mx
echo "spool:read $S $C $O $E $bo $be $no $ne"
if [ "$enc" = b64 ]; then
  tail -c +$((oo+1)) "$d/out" 2>/dev/null | head -c "$no" | base64 | tr -d '\n'; echo
  tail -c +$((oe+1)) "$d/err" 2>/dev/null | head -c "$ne" | base64 | tr -d '\n'; echo
else
  tail -c +$((oo+1)) "$d/out" 2>/dev/null | head -c "$no"
  tail -c +$((oe+1)) "$d/err" 2>/dev/null | head -c "$ne"
fi"#;

/// A stdin write: `$1` dir, `$2` offset, `$3` close (`1`, `0`); the bytes on stdin. Prints
/// `spool:stdin ok|at|closed|exited|busy|none N`.
const WRITE: &str = r#"d=$1 at=$2 cl=$3
[ -d "$d" ] || { cat >/dev/null; echo spool:none 0; exit 0; }
n=0
until mkdir "$d/in.lock" 2>/dev/null; do
  n=$((n+1)); [ "$n" -gt 500 ] && { cat >/dev/null; echo spool:stdin busy 0; exit 0; }; sleep 0.01
done
c=$(wc -c <"$d/in.log")
if [ -e "$d/in.closed" ]; then r=closed
elif [ -e "$d/exit" ]; then r=exited
elif [ "$c" -ne "$at" ]; then r=at
else
  cat >>"$d/in.log"; [ "$cl" = 1 ] && : >"$d/in.closed"
  c=$(wc -c <"$d/in.log"); r=ok
fi
rmdir "$d/in.lock"
if [ "$r" = ok ]; then
  [ -p "$d/wake" ] && { exec 5<>"$d/wake"; echo >&5; exec 5>&-; }
else cat >/dev/null; fi
[ -e "$d/in.closed" ] && r="$r-closed"
echo "spool:stdin $r $c""#;

/// A signal: `$1` dir, `$2` signal name. Prints `spool:signal sent|exited|none|gone`.
const SIGNAL: &str = r#"d=$1 sig=$2
[ -d "$d" ] || { echo spool:signal none; exit 0; }
n=0
while [ ! -e "$d/pid" ] && [ ! -e "$d/exit" ]; do
  n=$((n+1)); [ "$n" -gt 200 ] && { echo spool:signal gone; exit 0; }; sleep 0.02
done
[ -e "$d/exit" ] && { echo spool:signal exited; exit 0; }
p=$(cat "$d/pid")
if gkill "$sig" "$p" 2>/dev/null; then echo spool:signal sent
elif [ -e "$d/exit" ]; then echo spool:signal exited
else echo spool:signal gone; fi"#;

/// A listing: `$1` root. One line per key: `KEY S C O E I K` (`I` stdin bytes accepted, `K`
/// 1 when stdin is closed).
const LIST: &str = r#"r=$1
[ -d "$r" ] || exit 0
for d in "$r"/*; do
  [ -e "$d/ready" ] || continue
  state "$d"
  echo "${d##*/} $S $C $O $E $(stdin_state "$d")"
done"#;

/// A release: `$1` dir. Prints `spool:release done|running`.
const RELEASE: &str = r#"d=$1
[ -d "$d" ] || { echo spool:release done; exit 0; }
if [ -e "$d/ready" ]; then state "$d"; [ "$S" = running ] && { echo spool:release running; exit 0; }; fi
rm -rf -- "$d" && echo spool:release done"#;

/// The recorder's wrapper, run inside the PTY by `script`'s `sh -c`: `$1` dir, `$2` rows, `$3`
/// columns, then argv. See the module docs.
const TTY_WRAP: &str = r#"d=$1; stty rows "$2" cols "$3" 2>/dev/null
tty >"$d/tty.tmp" && mv -f "$d/tty.tmp" "$d/tty"
if [ -n "${EXECSEAM_SHELL+x}" ]; then SHELL=$EXECSEAM_SHELL; export SHELL; unset EXECSEAM_SHELL; else unset SHELL; fi
[ -n "${TERM-}" ] || { TERM=xterm-256color; export TERM; }
printf '%s\n' "$$" >"$d/pid.tmp" && mv -f "$d/pid.tmp" "$d/pid"
shift 3
exec "$@""#;

/// A resize: `$1` dir, `$2` rows, `$3` columns. Prints `spool:resize ok|exited|none|notty|gone|failed`.
const RESIZE: &str = r#"d=$1 r=$2 c=$3
[ -d "$d" ] || { echo spool:resize none; exit 0; }
[ -e "$d/term" ] || { echo spool:resize notty; exit 0; }
n=0
while [ ! -e "$d/tty" ] && [ ! -e "$d/exit" ]; do
  n=$((n+1)); [ "$n" -gt 200 ] && { echo spool:resize gone; exit 0; }; sleep 0.02
done
[ -e "$d/exit" ] && { echo spool:resize exited; exit 0; }
if stty -F "$(cat "$d/tty")" rows "$r" cols "$c" 2>/dev/null; then echo spool:resize ok
elif [ -e "$d/exit" ]; then echo spool:resize exited
else echo spool:resize failed; fi"#;

/// FNV-1a, for the sandbox part of a handle (not a secret, not a security boundary: it only
/// makes a handle from another sandbox a typed error before any I/O).
fn digest(s: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{:012x}", h >> 16)
}

/// The handles followed in this process, each with the channel its stdin writes wake its
/// followers on (see "Following" in the [module docs](self)).
static FOLLOWED: Mutex<BTreeMap<String, Weak<tokio::sync::watch::Sender<()>>>> =
    Mutex::new(BTreeMap::new());

/// A follower's end of [`FOLLOWED`]: while it lives, stdin writes to its handle wake it.
struct Woken {
    _channel: Arc<tokio::sync::watch::Sender<()>>,
    written: tokio::sync::watch::Receiver<()>,
}

impl Woken {
    fn follow(handle: &ProcessHandle) -> Woken {
        let mut followed = FOLLOWED.lock().unwrap_or_else(|p| p.into_inner());
        followed.retain(|_, c| c.strong_count() > 0);
        let channel = match followed.get(handle.as_str()).and_then(Weak::upgrade) {
            Some(c) => c,
            None => {
                let c = Arc::new(tokio::sync::watch::Sender::new(()));
                followed.insert(handle.as_str().to_owned(), Arc::downgrade(&c));
                c
            }
        };
        Woken {
            written: channel.subscribe(),
            _channel: channel,
        }
    }

    /// A stdin write to `handle` landed: its followers in this process read soon.
    fn written(handle: &ProcessHandle) {
        let followed = FOLLOWED.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = followed.get(handle.as_str()).and_then(Weak::upgrade) {
            c.send_replace(());
        }
    }
}

/// Process handles over an adapter's exec; see the [module docs](self).
pub struct Spool<'a> {
    exec: &'a dyn Exec,
    sandbox: String,
    root: Cow<'a, str>,
    launch: Option<&'a dyn Launch>,
    capabilities: ProcessCapabilities,
    read_max: u64,
    text: bool,
    poll: (Duration, Duration),
}

impl std::fmt::Debug for Spool<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Spool")
            .field("provider", &self.exec.provider())
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

/// The spool of `sandbox` under [`DEFAULT_ROOT`], as [`Exec::processes`] returns it: the process
/// handles of every adapter whose provider has no process API of its own.
pub fn processes<'a, S: Exec + execseam_core::Sandbox>(
    sandbox: &'a S,
) -> Option<Box<dyn Processes + 'a>> {
    Some(Box::new(Spool::new(sandbox, sandbox.id())))
}

/// [`processes`] with the supervisor started by the provider itself ([`Launch`]): an adapter
/// that declares [`HYBRID`] or [`HYBRID_TERMINAL`].
pub fn hybrid<'a, S: Exec + execseam_core::Sandbox + Launch>(
    sandbox: &'a S,
) -> Option<Box<dyn Processes + 'a>> {
    Some(Box::new(Spool::new(sandbox, sandbox.id()).launch(sandbox)))
}

/// What a start script said.
enum StartAnswer {
    Started { fresh: bool },
    Exists,
}

impl<'a> Spool<'a> {
    /// Spools of the sandbox `sandbox_id` under [`DEFAULT_ROOT`], through `exec`. Reads are
    /// base64 where `exec` does not return bytes exactly (`Capabilities::binary_output`), and
    /// at most [`DEFAULT_READ_MAX`] per stream (less where the backend caps its output).
    pub fn new(exec: &'a dyn Exec, sandbox_id: &str) -> Spool<'a> {
        let caps = exec.capabilities();
        let text = !caps.binary_output;
        let mut read_max = DEFAULT_READ_MAX;
        if let Some(max) = caps.max_output {
            // Both streams and a header in one answer, base64 growing it by a third.
            let room = max.saturating_sub(256) / 2;
            read_max = read_max.min(if text { room / 4 * 3 } else { room }).max(1);
        }
        Spool {
            exec,
            sandbox: digest(sandbox_id),
            root: Cow::Borrowed(DEFAULT_ROOT),
            launch: None,
            capabilities: caps.processes.unwrap_or(SPOOLED),
            read_max,
            text,
            poll: (Duration::from_millis(20), Duration::from_millis(500)),
        }
    }

    /// Spools under `root` (an absolute path in the sandbox; a volume where the root
    /// filesystem does not survive a stop).
    #[must_use]
    pub fn root(mut self, root: impl Into<Cow<'a, str>>) -> Spool<'a> {
        self.root = root.into();
        self
    }

    /// The provider runs the supervisor ([`Launch`]).
    #[must_use]
    pub fn launch(mut self, launch: &'a dyn Launch) -> Spool<'a> {
        self.launch = Some(launch);
        self
    }

    /// What these handles declare (default: the exec's `Capabilities::processes`, or
    /// [`SPOOLED`]); its `retention` is applied to every read.
    #[must_use]
    pub fn capabilities(mut self, capabilities: ProcessCapabilities) -> Spool<'a> {
        self.capabilities = capabilities;
        self
    }

    /// At most `bytes` of each stream per read.
    #[must_use]
    pub fn read_max(mut self, bytes: u64) -> Spool<'a> {
        self.read_max = bytes.max(1);
        self
    }

    /// How long a follower waits between reads when nothing new came: from `min`, doubling up
    /// to `max` (one exec per read: Fly allows about one a second).
    #[must_use]
    pub fn poll(mut self, min: Duration, max: Duration) -> Spool<'a> {
        self.poll = (min, max.max(min));
        self
    }

    fn provider(&self) -> &str {
        self.exec.provider()
    }

    fn error(&self, kind: ErrorKind, operation: &'static str, message: impl Into<String>) -> Error {
        Error::new(kind, message)
            .with_provider(self.provider().to_owned())
            .with_operation(operation)
    }

    fn caps(&self) -> ProcessCapabilities {
        self.capabilities
    }

    fn handle_of(&self, key: &StartKey) -> ProcessHandle {
        ProcessHandle::new(format!("{}{}", self.prefix(), key.as_str()))
    }

    fn prefix(&self) -> String {
        format!("sp1:{}:{}:", self.provider(), self.sandbox)
    }

    /// The key in `handle`, checked to be this adapter's and this sandbox's.
    fn key_of(&self, handle: &ProcessHandle, operation: &'static str) -> Result<StartKey, Error> {
        let token = handle.as_str();
        let Some(rest) = token.strip_prefix("sp1:") else {
            return Err(self.error(
                ErrorKind::InvalidCommand,
                operation,
                "not a process handle of the spool (sp1:…)",
            ));
        };
        let mut parts = rest.splitn(3, ':');
        let (provider, sandbox, key) = (parts.next(), parts.next(), parts.next());
        if provider != Some(self.provider()) {
            return Err(self.error(
                ErrorKind::InvalidCommand,
                operation,
                format!(
                    "a process handle of another adapter, not {}",
                    self.provider()
                ),
            ));
        }
        if sandbox != Some(self.sandbox.as_str()) {
            return Err(self.error(
                ErrorKind::InvalidCommand,
                operation,
                "a process handle of another sandbox",
            ));
        }
        StartKey::new(key.unwrap_or_default()).map_err(|_| {
            self.error(
                ErrorKind::InvalidCommand,
                operation,
                "a process handle with a malformed key",
            )
        })
    }

    fn dir(&self, key: &StartKey) -> String {
        format!("{}/{}", self.root.trim_end_matches('/'), key.as_str())
    }

    /// Runs `script` (after the prelude) with `args`, `stdin`, and returns its stdout; a
    /// non-zero exit is an `Internal` error naming the operation.
    async fn run(
        &self,
        operation: &'static str,
        script: &str,
        args: &[&str],
        stdin: Bytes,
    ) -> Result<Bytes, Error> {
        run_script(
            self.exec,
            operation,
            "spool",
            &format!("{PRELUDE}{script}"),
            args,
            stdin,
        )
        .await
    }

    fn malformed(&self, operation: &'static str, what: &str) -> Error {
        self.error(
            ErrorKind::Protocol,
            operation,
            format!("the spool's {operation} script answered something else: {what}"),
        )
        .with_retry(Retry::Never)
    }

    async fn start_one(&self, request: StartRequest) -> Result<Started, Error> {
        if request.terminal.is_some() && !self.capabilities.terminal {
            return Err(self.error(
                ErrorKind::Unsupported,
                "start",
                "terminals are not implemented by this adapter's process handles",
            ));
        }
        let key = request.key;
        let handle = self.handle_for(&key);
        let command = request.command;
        let dir = self.dir(&key);
        let (mode, run_argv) = match (request.terminal, request.stdin) {
            // The recorder: one `sh -c` line for `script -c` (see the module docs).
            (Some(size), _) => {
                let mut inner = vec![
                    "sh".to_owned(),
                    "-c".to_owned(),
                    TTY_WRAP.to_owned(),
                    "sh".to_owned(),
                    dir.clone(),
                    size.rows.to_string(),
                    size.cols.to_string(),
                ];
                inner.extend(command.argv().iter().cloned());
                (
                    "tty",
                    vec![format!("exec {}", crate::degrade::join(&inner))],
                )
            }
            (None, StdinMode::Closed) => ("closed", command.argv().to_vec()),
            (None, StdinMode::Open) => ("open", command.argv().to_vec()),
        };
        let has_stdin = if command.stdin().is_empty() { "0" } else { "1" };
        let phase = if self.launch.is_some() {
            "prepare"
        } else {
            "detach"
        };
        let script = format!(
            "SUPERVISOR='{}'\n{START}",
            SUPERVISOR.replace('\'', r"'\''")
        );
        let mut args: Vec<&str> = vec![&self.root, key.as_str(), mode, has_stdin, phase];
        args.extend(run_argv.iter().map(String::as_str));
        // The start's env and workdir are the command's: the supervisor and the command inherit
        // them (through the provider's own delivery of both).
        let mut argv = vec![
            "sh".to_owned(),
            "-c".to_owned(),
            format!("{PRELUDE}{script}"),
            "execseam-spool".to_owned(),
        ];
        argv.extend(args.iter().map(|a| (*a).to_owned()));
        let mut b = Command::builder(argv)
            .tool(command.tool().clone())
            .envs(command.env().iter().map(|(k, v)| (k.clone(), v.clone())))
            .stdin(command.stdin().clone());
        if let Some(w) = command.workdir() {
            b = b.workdir(w);
        }
        let out = self.exec.exec(b.build()?).await.map_err(|e| {
            // A start that failed after it was sent: retrying under the same key is safe (the
            // directory is the lock), so an `Unsafe` answer becomes `Safe`.
            let e = e.or_context(self.provider().to_owned(), "start");
            crate::retry::repeatable(e)
        })?;
        if !out.exit.success() {
            return Err(self.error(
                ErrorKind::Internal,
                "start",
                format!(
                    "the spool's start failed ({:?}): {}",
                    out.exit,
                    String::from_utf8_lossy(&out.stderr[..out.stderr.len().min(300)])
                ),
            ));
        }
        let answer = match std::str::from_utf8(&out.stdout).map(str::trim) {
            Ok("spool:started 1") => StartAnswer::Started { fresh: true },
            Ok("spool:started 0") => StartAnswer::Started { fresh: false },
            Ok("spool:exists") => StartAnswer::Exists,
            Ok("spool:nosetsid") => {
                return Err(self.error(
                    ErrorKind::Unsupported,
                    "start",
                    "the sandbox has no setsid(1): the spool cannot detach a command",
                ));
            }
            Ok("spool:noscript") => {
                return Err(self.error(
                    ErrorKind::Unsupported,
                    "start",
                    "the sandbox has no script(1) or stty(1): the spool cannot record a terminal",
                ));
            }
            _ => return Err(self.malformed("start", "no spool:started line")),
        };
        match answer {
            StartAnswer::Exists => Ok(Started {
                handle,
                fresh: false,
            }),
            StartAnswer::Started { fresh } => {
                if let Some(launch) = self.launch {
                    let mut sv = vec![
                        "sh".to_owned(),
                        "-c".to_owned(),
                        SUPERVISOR.to_owned(),
                        "sh".to_owned(),
                        dir,
                        mode.to_owned(),
                    ];
                    sv.extend(run_argv.iter().cloned());
                    let mut b = Command::builder(sv)
                        .tool(command.tool().clone())
                        .envs(command.env().iter().map(|(k, v)| (k.clone(), v.clone())));
                    if let Some(w) = command.workdir() {
                        b = b.workdir(w);
                    }
                    launch.launch(b.build()?).await.map_err(|e| {
                        let e = e.or_context(self.provider().to_owned(), "start");
                        // The supervisor takes a lock: a second one starts nothing.
                        crate::retry::repeatable(e)
                    })?;
                }
                Ok(Started { handle, fresh })
            }
        }
    }

    async fn read_at(
        &self,
        handle: &ProcessHandle,
        from: StreamOffsets,
    ) -> Result<ProcessRead, Error> {
        let key = self.key_of(handle, "read")?;
        let dir = self.dir(&key);
        let (oo, oe, mx) = (
            from.stdout.to_string(),
            from.stderr.to_string(),
            self.read_max.to_string(),
        );
        let ret = self
            .capabilities
            .retention
            .map_or_else(|| "-".to_owned(), |r| r.to_string());
        let enc = if self.text { "b64" } else { "raw" };
        let out = self
            .run(
                "read",
                READ,
                &[&dir, &oo, &oe, &mx, enc, &ret],
                Bytes::new(),
            )
            .await?;
        let nl = out
            .iter()
            .position(|b| *b == b'\n')
            .ok_or_else(|| self.malformed("read", "no header"))?;
        let header =
            std::str::from_utf8(&out[..nl]).map_err(|_| self.malformed("read", "header"))?;
        if header == "spool:none" {
            return Err(self.error(
                ErrorKind::NotFound,
                "read",
                "no process under this handle in this sandbox (never started, or released)",
            ));
        }
        let f: Vec<&str> = header.split(' ').collect();
        if f.len() != 9 || f[0] != "spool:read" {
            return Err(self.malformed("read", "header"));
        }
        let num = |s: &str| {
            s.parse::<u64>()
                .map_err(|_| self.malformed("read", "a number"))
        };
        let written = StreamOffsets::new(num(f[3])?, num(f[4])?);
        let base = StreamOffsets::new(num(f[5])?, num(f[6])?);
        let (no, ne) = (num(f[7])?, num(f[8])?);
        let state = self.state(f[1], f[2], "read")?;
        if from.stdout < base.stdout || from.stderr < base.stderr {
            return Err(self
                .error(
                    ErrorKind::Expired,
                    "read",
                    format!(
                        "output before offsets stdout {} / stderr {} is no longer retained",
                        base.stdout, base.stderr
                    ),
                )
                .with_retained_from(base));
        }
        if from.stdout > written.stdout || from.stderr > written.stderr {
            return Err(self.error(
                ErrorKind::InvalidCommand,
                "read",
                format!(
                    "offsets past the output written so far (stdout {}, stderr {})",
                    written.stdout, written.stderr
                ),
            ));
        }
        let body = out.slice(nl + 1..);
        let (stdout, stderr) = if self.text {
            use base64::Engine as _;
            let text = std::str::from_utf8(&body).map_err(|_| self.malformed("read", "base64"))?;
            let mut lines = text.split('\n');
            let mut dec = |len: u64| -> Result<Bytes, Error> {
                let line = lines
                    .next()
                    .ok_or_else(|| self.malformed("read", "a line"))?;
                let b = base64::engine::general_purpose::STANDARD
                    .decode(line.trim_end_matches('\r'))
                    .map_err(|_| self.malformed("read", "base64"))?;
                if b.len() as u64 != len {
                    return Err(self.malformed("read", "a short read"));
                }
                Ok(Bytes::from(b))
            };
            (dec(no)?, dec(ne)?)
        } else {
            let total = usize::try_from(no + ne).unwrap_or(usize::MAX);
            if body.len() != total {
                return Err(self.malformed("read", "a short read"));
            }
            let no = usize::try_from(no).unwrap_or(0);
            (body.slice(..no), body.slice(no..))
        };
        Ok(ProcessRead {
            from,
            stdout,
            stderr,
            state,
            written,
        })
    }

    fn state(&self, s: &str, code: &str, operation: &'static str) -> Result<ProcessState, Error> {
        match s {
            "running" | "prepared" => Ok(ProcessState::Running),
            "unknown" => Ok(ProcessState::Unknown),
            "exited" => {
                let c: i32 = code
                    .parse()
                    .map_err(|_| self.malformed(operation, "an exit status"))?;
                Ok(ProcessState::Exited(Exit::Code(c)))
            }
            _ => Err(self.malformed(operation, "a state")),
        }
    }

    fn unknown(&self, operation: &'static str) -> Error {
        self.error(
            ErrorKind::Protocol,
            operation,
            "the process's supervisor is gone and left no exit: the outcome is unknown",
        )
        .with_retry(Retry::Never)
    }

    async fn attach_at<'s>(
        &'s self,
        handle: &'s ProcessHandle,
        from: StreamOffsets,
    ) -> Result<ProcessStream<'s>, Error> {
        // The first read checks the handle, the offsets and the retention before returning.
        let first = self.read_at(handle, from).await?;
        struct Follow {
            at: StreamOffsets,
            pending: Option<ProcessRead>,
            delay: Duration,
            woken: Woken,
            queue: std::collections::VecDeque<ProcessEvent>,
            done: bool,
        }
        let state = Follow {
            at: from,
            pending: Some(first),
            delay: self.poll.0,
            woken: Woken::follow(handle),
            queue: Default::default(),
            done: false,
        };
        let stream = futures_util::stream::unfold(state, move |mut st| async move {
            loop {
                if let Some(ev) = st.queue.pop_front() {
                    return Some((Ok(ev), st));
                }
                if st.done {
                    return None;
                }
                let read = match st.pending.take() {
                    Some(r) => r,
                    None => {
                        let next = tokio::time::sleep(st.delay);
                        tokio::pin!(next);
                        loop {
                            tokio::select! {
                                () = &mut next => break,
                                Ok(()) = st.woken.written.changed() => {
                                    // A stdin write: read soon, and back off from the start.
                                    let soon = tokio::time::Instant::now() + self.poll.0;
                                    if soon < next.deadline() {
                                        next.as_mut().reset(soon);
                                    }
                                    st.delay = self.poll.0 / 2;
                                }
                            }
                        }
                        match self.read_at(handle, st.at).await {
                            Ok(r) => r,
                            Err(e) => {
                                st.done = true;
                                return Some((Err(e), st));
                            }
                        }
                    }
                };
                let got = !read.stdout.is_empty() || !read.stderr.is_empty();
                if !read.stdout.is_empty() {
                    st.queue.push_back(ProcessEvent::Stdout {
                        at: read.from.stdout,
                        data: read.stdout.clone(),
                    });
                }
                if !read.stderr.is_empty() {
                    st.queue.push_back(ProcessEvent::Stderr {
                        at: read.from.stderr,
                        data: read.stderr.clone(),
                    });
                }
                st.at = read.next();
                if read.is_end() {
                    if let ProcessState::Exited(exit) = read.state {
                        st.queue.push_back(ProcessEvent::Exit(exit));
                    }
                    st.done = true;
                } else if read.state == ProcessState::Unknown && !got {
                    st.done = true;
                    st.queue.clear();
                    return Some((Err(self.unknown("attach")), st));
                }
                st.delay = if got {
                    self.poll.0
                } else {
                    (st.delay * 2).min(self.poll.1)
                };
            }
        });
        Ok(ProcessStream::new(stream))
    }

    async fn write_at(&self, handle: &ProcessHandle, w: StdinWrite) -> Result<StdinState, Error> {
        let key = self.key_of(handle, "write_stdin")?;
        let dir = self.dir(&key);
        let at = w.at.to_string();
        let len = w.data.len() as u64;
        let out = self
            .run(
                "write_stdin",
                WRITE,
                &[&dir, &at, if w.close { "1" } else { "0" }],
                w.data,
            )
            .await
            // A write whose answer was lost is retried at the same offset: a no-op if it landed.
            .map_err(crate::retry::repeatable)?;
        Woken::written(handle);
        let line = std::str::from_utf8(&out).map(str::trim).unwrap_or("");
        let mut f = line.split(' ');
        if f.next() == Some("spool:none") {
            return Err(self.error(
                ErrorKind::NotFound,
                "write_stdin",
                "no process under this handle in this sandbox",
            ));
        }
        let what = f.next().unwrap_or("");
        let n: u64 = f
            .next()
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| self.malformed("write_stdin", line))?;
        let (what, closed) = match what.strip_suffix("-closed") {
            Some(w) => (w, true),
            None => (what, false),
        };
        let state = StdinState {
            accepted: n,
            closed,
        };
        let conflict = |m: String| {
            Err(self
                .error(ErrorKind::Conflict, "write_stdin", m)
                .with_code(format!("accepted={n}")))
        };
        match what {
            "ok" => Ok(state),
            // A retry of a write that landed: the same end, nothing more to do.
            "at" | "closed" if w.at + len == n && (closed || !w.close) => Ok(state),
            "at" => conflict(format!(
                "stdin has accepted {n} bytes, not {}: write from {n}",
                w.at
            )),
            "closed" => conflict(format!("stdin is closed (after {n} bytes)")),
            "exited" => conflict("the process has exited: its stdin is gone".to_owned()),
            "busy" => Err(self
                .error(
                    ErrorKind::Unavailable,
                    "write_stdin",
                    "another stdin write holds the lock",
                )
                .with_retry(Retry::SAFE)),
            _ => Err(self.malformed("write_stdin", line)),
        }
    }

    async fn send(&self, handle: &ProcessHandle, signal: Signal) -> Result<(), Error> {
        let key = self.key_of(handle, "signal")?;
        if !self.capabilities.signals.contains(&signal) {
            return Err(self.error(
                ErrorKind::Unsupported,
                "signal",
                format!("SIG{} is not sent by this adapter", signal.name()),
            ));
        }
        let dir = self.dir(&key);
        let out = self
            .run("signal", SIGNAL, &[&dir, signal.name()], Bytes::new())
            .await?;
        match std::str::from_utf8(&out).map(str::trim) {
            Ok("spool:signal sent" | "spool:signal exited") => Ok(()),
            Ok("spool:signal none") => Err(self.error(
                ErrorKind::NotFound,
                "signal",
                "no process under this handle in this sandbox",
            )),
            Ok("spool:signal gone") => Err(self.unknown("signal")),
            _ => Err(self.malformed("signal", "no spool:signal line")),
        }
    }

    async fn wait_for(&self, handle: &ProcessHandle, within: Duration) -> Result<Waited, Error> {
        let deadline = tokio::time::Instant::now() + within;
        let mut delay = self.poll.0;
        // The provider's own wait for the supervisor's end, once; then (or without one) polls.
        let mut native = self.launch;
        loop {
            let info = self.status_of(handle).await?;
            match info.state {
                ProcessState::Exited(exit) => return Ok(Waited::Exited(exit)),
                ProcessState::Unknown => return Err(self.unknown("wait")),
                ProcessState::Running => {}
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Ok(Waited::Running);
            }
            if let Some(launch) = native.take() {
                let dir = self.dir(&self.key_of(handle, "wait")?);
                // Bounded here whatever the provider does (a stalled answer must not outlast
                // the deadline).
                let left = deadline - now;
                match tokio::time::timeout(left, launch.wait_supervisor(&dir, left)).await {
                    Ok(Ok(true)) => continue,
                    Ok(Ok(false)) | Err(_) => {}
                    // The files are the truth: a failed wait of the provider's only costs polls.
                    Ok(Err(e)) => tracing::debug!(error = %e, "spool: the provider's wait failed"),
                }
            }
            let now = tokio::time::Instant::now();
            if now >= deadline {
                continue;
            }
            tokio::time::sleep(delay.min(deadline - now)).await;
            delay = (delay * 2).min(self.poll.1);
        }
    }

    async fn status_of(&self, handle: &ProcessHandle) -> Result<ProcessInfo, Error> {
        let key = self.key_of(handle, "status")?;
        let out = self
            .run(
                "status",
                "r=$1; d=$1/$2; [ -e \"$d/ready\" ] || { echo spool:none; exit 0; }; state \"$d\"; echo \"$2 $S $C $O $E $(stdin_state \"$d\")\"",
                &[&self.root, key.as_str()],
                Bytes::new(),
            )
            .await?;
        let line = std::str::from_utf8(&out).map(str::trim).unwrap_or("");
        if line == "spool:none" {
            return Err(self.error(
                ErrorKind::NotFound,
                "status",
                "no process under this handle in this sandbox",
            ));
        }
        let mut infos = self.parse_list(line)?;
        match infos.pop() {
            Some(i) if i.handle == *handle => Ok(i),
            _ => Err(self.malformed("status", line)),
        }
    }

    fn parse_list(&self, text: &str) -> Result<Vec<ProcessInfo>, Error> {
        let mut out = Vec::new();
        for line in text.lines().filter(|l| !l.is_empty()) {
            let f: Vec<&str> = line.split(' ').collect();
            if f.len() != 7 {
                return Err(self.malformed("list", line));
            }
            let Ok(key) = StartKey::new(f[0]) else {
                continue; // not a spool of ours (the root is shared with nothing else, but be safe)
            };
            let num = |s: &str| s.parse::<u64>().map_err(|_| self.malformed("list", line));
            out.push(ProcessInfo {
                handle: self.handle_for(&key),
                key,
                state: self.state(f[1], f[2], "list")?,
                written: Some(StreamOffsets::new(num(f[3])?, num(f[4])?)),
                stdin: Some(StdinState {
                    accepted: num(f[5])?,
                    closed: match f[6] {
                        "1" => true,
                        "0" => false,
                        _ => return Err(self.malformed("list", line)),
                    },
                }),
            });
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    async fn list_all(&self) -> Result<Vec<ProcessInfo>, Error> {
        let out = self.run("list", LIST, &[&self.root], Bytes::new()).await?;
        let text = std::str::from_utf8(&out).map_err(|_| self.malformed("list", "text"))?;
        self.parse_list(text)
    }

    async fn resize_to(&self, handle: &ProcessHandle, size: TerminalSize) -> Result<(), Error> {
        let key = self.key_of(handle, "resize")?;
        if !self.capabilities.terminal {
            return Err(self.error(
                ErrorKind::Unsupported,
                "resize",
                "terminals are not implemented by this adapter's process handles",
            ));
        }
        let dir = self.dir(&key);
        let (rows, cols) = (size.rows.to_string(), size.cols.to_string());
        let out = self
            .run("resize", RESIZE, &[&dir, &rows, &cols], Bytes::new())
            .await?;
        match std::str::from_utf8(&out).map(str::trim) {
            Ok("spool:resize ok" | "spool:resize exited") => Ok(()),
            Ok("spool:resize none") => Err(self.error(
                ErrorKind::NotFound,
                "resize",
                "no process under this handle in this sandbox",
            )),
            Ok("spool:resize notty") => Err(self.error(
                ErrorKind::InvalidCommand,
                "resize",
                "the process was started without a terminal",
            )),
            Ok("spool:resize gone") => Err(self.unknown("resize")),
            Ok("spool:resize failed") => Err(self.error(
                ErrorKind::Internal,
                "resize",
                "stty could not resize the process's terminal",
            )),
            _ => Err(self.malformed("resize", "no spool:resize line")),
        }
    }

    async fn release_one(&self, handle: &ProcessHandle) -> Result<(), Error> {
        let key = self.key_of(handle, "release")?;
        let dir = self.dir(&key);
        let out = self.run("release", RELEASE, &[&dir], Bytes::new()).await?;
        match std::str::from_utf8(&out).map(str::trim) {
            Ok("spool:release done") => {
                if let Some(launch) = self.launch
                    && let Err(e) = launch.released(&dir).await
                {
                    tracing::debug!(error = %e, "spool: the provider kept the released supervisor's state");
                }
                Ok(())
            }
            Ok("spool:release running") => Err(self.error(
                ErrorKind::Conflict,
                "release",
                "the process is still running: signal it first",
            )),
            _ => Err(self.malformed("release", "no spool:release line")),
        }
    }
}

crate::forward_processes!(Spool<'_>, resize);

#[cfg(test)]
pub(crate) mod tests {
    use std::process::Stdio;
    use std::sync::atomic::{AtomicBool, Ordering};

    use execseam_core::{Capabilities, Output};
    use tokio::io::AsyncWriteExt as _;

    use super::*;

    /// The spool's reads through [`Host`], by the handle's directory.
    static READS: Mutex<BTreeMap<String, usize>> = Mutex::new(BTreeMap::new());

    /// Runs commands on this host (what an adapter's exec would do in its sandbox).
    pub(crate) struct Host {
        pub(crate) binary: bool,
    }

    impl Exec for Host {
        fn provider(&self) -> &str {
            "host"
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities {
                binary_output: self.binary,
                ..Capabilities::FULL
            }
        }
        fn exec(&self, command: Command) -> BoxFuture<'_, Result<Output, Error>> {
            if let [_, _, script, _, dir, ..] = command.argv()
                && script.contains(READ)
            {
                let mut reads = READS.lock().unwrap();
                *reads.entry(dir.clone()).or_default() += 1;
            }
            Box::pin(async move {
                let mut c = tokio::process::Command::new(&command.argv()[0]);
                c.args(&command.argv()[1..])
                    .envs(command.env().iter())
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped());
                if let Some(w) = command.workdir() {
                    c.current_dir(w);
                }
                let mut child = c
                    .spawn()
                    .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?;
                let mut stdin = child.stdin.take().expect("stdin");
                let data = command.stdin().clone();
                tokio::spawn(async move {
                    let _ = stdin.write_all(&data).await;
                });
                let out = child
                    .wait_with_output()
                    .await
                    .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?;
                let exit = match out.status.code() {
                    Some(c) => Exit::Code(c),
                    None => Exit::Signal(9),
                };
                Ok(Output::new(out.stdout, out.stderr, exit))
            })
        }
    }

    fn root() -> String {
        let d =
            std::env::temp_dir().join(format!("execseam-spool-test-{}", crate::id::random_id(12)));
        d.to_string_lossy().into_owned()
    }

    fn sh(script: &str) -> Command {
        Command::builder(["sh", "-c", script]).build().unwrap()
    }

    fn key(k: &str) -> StartKey {
        StartKey::new(k).unwrap()
    }

    /// The whole output and exit, followed from the start.
    async fn whole(spool: &Spool<'_>, handle: &ProcessHandle) -> Output {
        let stream = spool.attach(handle, StreamOffsets::ZERO).await.unwrap();
        stream.collect().await.unwrap()
    }

    #[tokio::test]
    async fn output_is_exact_per_stream_from_any_offset_and_the_exit_is_recorded() {
        let host = Host { binary: true };
        let root = root();
        let spool = Spool::new(&host, "sbx").root(root.as_str());
        let started = spool
            .start(StartRequest::new(
                key("a"),
                sh("printf 'a\\000b'; printf E1 >&2; sleep 0.2; printf tail; exit 7"),
            ))
            .await
            .unwrap();
        assert!(started.fresh);
        let out = spool
            .attach(&started.handle, StreamOffsets::ZERO)
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        assert_eq!(out, Output::new(&b"a\0btail"[..], "E1", Exit::Code(7)));
        let mid = spool
            .attach(&started.handle, StreamOffsets::new(2, 1))
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        assert_eq!(mid, Output::new("btail", "1", Exit::Code(7)));
        // The same from a read, and base64 over a text-only exec.
        let text = Host { binary: false };
        let tspool = Spool::new(&text, "sbx").root(root.as_str());
        let r = tspool
            .read(&started.handle, StreamOffsets::new(1, 0))
            .await
            .unwrap();
        assert_eq!(
            (&r.stdout[..], &r.stderr[..]),
            (&b"\0btail"[..], &b"E1"[..])
        );
        assert!(r.is_end());
        assert_eq!(r.state, ProcessState::Exited(Exit::Code(7)));
        // Past the end: a typed error, never an exit.
        let past = spool
            .read(&started.handle, StreamOffsets::new(99, 0))
            .await
            .unwrap_err();
        assert_eq!(past.kind(), ErrorKind::InvalidCommand);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[tokio::test]
    async fn a_start_retried_under_its_key_runs_once() {
        let host = Host { binary: true };
        let root = root();
        std::fs::create_dir_all(&root).unwrap();
        let spool = Spool::new(&host, "sbx").root(root.as_str());
        let count = format!("{root}/count");
        let cmd = Command::builder(["sh", "-c", "echo x >>\"$1\"", "sh", &count])
            .build()
            .unwrap();
        let (a, b) = tokio::join!(
            spool.start(StartRequest::new(key("once"), cmd.clone())),
            spool.start(StartRequest::new(key("once"), cmd.clone())),
        );
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!(a.handle, b.handle);
        assert!(a.fresh != b.fresh, "exactly one call made it");
        let again = spool
            .start(StartRequest::new(key("once"), cmd))
            .await
            .unwrap();
        assert!(!again.fresh);
        assert_eq!(
            spool.wait(&a.handle, Duration::from_secs(5)).await.unwrap(),
            Waited::Exited(Exit::Code(0))
        );
        assert_eq!(std::fs::read_to_string(&count).unwrap(), "x\n");
        let _ = std::fs::remove_dir_all(&root);
    }

    #[tokio::test]
    async fn stdin_is_written_in_pieces_exactly_once_and_closed() {
        let host = Host { binary: true };
        let root = root();
        let spool = Spool::new(&host, "sbx").root(root.as_str());
        let cmd = Command::builder([
            "sh",
            "-c",
            "while IFS= read -r l; do echo \"got:$l\"; done; echo end",
        ])
        .stdin("zero\n")
        .build()
        .unwrap();
        let s = spool
            .start(StartRequest::new(key("in"), cmd).open_stdin())
            .await
            .unwrap();
        let h = &s.handle;
        let w = |at, d: &'static str, close| StdinWrite {
            at,
            data: Bytes::from_static(d.as_bytes()),
            close,
        };
        assert_eq!(
            spool.write_stdin(h, w(5, "one\ntw", false)).await.unwrap(),
            StdinState {
                accepted: 11,
                closed: false
            }
        );
        // The retry of a write that landed is a no-op; a write from elsewhere is a conflict.
        assert_eq!(
            spool
                .write_stdin(h, w(5, "one\ntw", false))
                .await
                .unwrap()
                .accepted,
            11
        );
        let e = spool.write_stdin(h, w(3, "x", false)).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Conflict);
        // The status says where the next write goes (a writer that lost count starts there).
        assert_eq!(
            spool.status(h).await.unwrap().stdin,
            Some(StdinState {
                accepted: 11,
                closed: false
            })
        );
        assert_eq!(
            spool.wait(h, Duration::from_millis(300)).await.unwrap(),
            Waited::Running
        );
        assert_eq!(
            spool.write_stdin(h, w(11, "o\n", true)).await.unwrap(),
            StdinState {
                accepted: 13,
                closed: true
            }
        );
        let out = spool
            .attach(h, StreamOffsets::ZERO)
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        assert_eq!(
            out,
            Output::new("got:zero\ngot:one\ngot:two\nend\n", "", Exit::Code(0))
        );
        assert_eq!(
            spool.list().await.unwrap()[0].stdin,
            Some(StdinState {
                accepted: 13,
                closed: true
            })
        );
        let after = spool
            .write_stdin(h, w(13, "late", false))
            .await
            .unwrap_err();
        assert_eq!(after.kind(), ErrorKind::Conflict);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[tokio::test]
    async fn signals_reach_the_group_and_list_and_release_follow_the_state() {
        let host = Host { binary: true };
        let root = root();
        std::fs::create_dir_all(&root).unwrap();
        let spool = Spool::new(&host, "sbx").root(root.as_str());
        let kid = format!("{root}/kid");
        let cmd = Command::builder([
            "sh",
            "-c",
            "sleep 100 & echo $! >\"$1\"; sleep 100",
            "sh",
            &kid,
        ])
        .build()
        .unwrap();
        let s = spool
            .start(StartRequest::new(key("sig"), cmd))
            .await
            .unwrap();
        let done = spool
            .start(StartRequest::new(key("done"), sh("exit 3")))
            .await
            .unwrap();
        assert_eq!(
            spool
                .wait(&done.handle, Duration::from_secs(5))
                .await
                .unwrap(),
            Waited::Exited(Exit::Code(3))
        );
        let mut tries = 0;
        while !std::path::Path::new(&kid).exists() && tries < 100 {
            tokio::time::sleep(Duration::from_millis(20)).await;
            tries += 1;
        }
        let list = spool.list().await.unwrap();
        let states: Vec<_> = list
            .iter()
            .map(|i| (i.key.as_str().to_owned(), i.state))
            .collect();
        assert_eq!(
            states,
            [
                ("done".to_owned(), ProcessState::Exited(Exit::Code(3))),
                ("sig".to_owned(), ProcessState::Running)
            ]
        );
        assert_eq!(
            spool.release(&s.handle).await.unwrap_err().kind(),
            ErrorKind::Conflict
        );
        spool.signal(&s.handle, Signal::Term).await.unwrap();
        assert_eq!(
            spool.wait(&s.handle, Duration::from_secs(5)).await.unwrap(),
            Waited::Exited(Exit::Code(143))
        );
        let pid = std::fs::read_to_string(&kid).unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        let check = format!("{PRELUDE}alive {}", pid.trim());
        let alive = std::process::Command::new("sh")
            .args(["-c", &check])
            .status()
            .unwrap();
        assert!(
            !alive.success(),
            "the background child outlived the group signal"
        );
        spool.release(&s.handle).await.unwrap();
        spool.release(&s.handle).await.unwrap();
        assert_eq!(
            spool
                .read(&s.handle, StreamOffsets::ZERO)
                .await
                .unwrap_err()
                .kind(),
            ErrorKind::NotFound
        );
        assert_eq!(
            spool.status(&s.handle).await.unwrap_err().kind(),
            ErrorKind::NotFound
        );
        let _ = std::fs::remove_dir_all(&root);
    }

    #[tokio::test]
    async fn foreign_and_garbage_handles_are_typed_errors_before_any_io() {
        struct NoIo;
        impl Exec for NoIo {
            fn provider(&self) -> &str {
                "host"
            }
            fn capabilities(&self) -> Capabilities {
                Capabilities::FULL
            }
            fn exec(&self, _: Command) -> BoxFuture<'_, Result<Output, Error>> {
                panic!("no I/O for a bad handle")
            }
        }
        let spool = Spool::new(&NoIo, "sbx-a");
        let other = Spool::new(&NoIo, "sbx-b").handle_for(&key("k"));
        for h in [
            other,
            ProcessHandle::new("garbage"),
            ProcessHandle::new("sp1:fly:x:k"),
            ProcessHandle::new(format!("{}../x", spool.prefix())),
        ] {
            let e = spool.read(&h, StreamOffsets::ZERO).await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidCommand, "{e}");
            assert_eq!(
                spool.signal(&h, Signal::Kill).await.unwrap_err().kind(),
                ErrorKind::InvalidCommand
            );
        }
        let e = spool
            .start(
                StartRequest::new(key("t"), sh("true"))
                    .terminal(TerminalSize { cols: 80, rows: 24 }),
            )
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
    }

    /// Reads until `want` is in the output (or fails after 10 s); the output so far.
    async fn read_until(spool: &Spool<'_>, h: &ProcessHandle, want: &str) -> String {
        for _ in 0..500 {
            let r = spool.read(h, StreamOffsets::ZERO).await.unwrap();
            let text = String::from_utf8_lossy(&r.stdout).into_owned();
            if text.contains(want) {
                return text;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("{want:?} never came");
    }

    #[tokio::test]
    async fn a_terminal_is_a_tty_of_its_size_follows_a_resize_and_merges_its_output() {
        let host = Host { binary: true };
        let root = root();
        let spool = Spool::new(&host, "sbx")
            .root(root.as_str())
            .capabilities(SPOOLED_TERMINAL);
        // An empty TERM counts as none: the recorder's default.
        let cmd = Command::builder([
            "sh",
            "-c",
            "test -t 0 -a -t 1 && echo tty; echo \"term:$TERM\"; stty size; echo err >&2; \
             read x; stty size; echo \"got:$x\"; exit 7",
        ])
        .env("TERM", "")
        .build()
        .unwrap();
        let s = spool
            .start(StartRequest::new(key("t"), cmd).terminal(TerminalSize { cols: 80, rows: 24 }))
            .await
            .unwrap();
        read_until(&spool, &s.handle, "err").await;
        spool
            .resize(
                &s.handle,
                TerminalSize {
                    cols: 100,
                    rows: 40,
                },
            )
            .await
            .unwrap();
        spool
            .write_stdin(
                &s.handle,
                StdinWrite {
                    at: 0,
                    data: Bytes::from_static(b"hi\r"),
                    close: false,
                },
            )
            .await
            .unwrap();
        let out = spool
            .attach(&s.handle, StreamOffsets::ZERO)
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        assert_eq!(out.exit, Exit::Code(7));
        assert!(out.stderr.is_empty(), "a terminal is one stream");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "tty\r\nterm:xterm-256color\r\n24 80\r\nerr\r\nhi\r\n40 100\r\ngot:hi\r\n"
        );
        // After the exit a resize is a no-op; a handle without a terminal is refused.
        spool
            .resize(&s.handle, TerminalSize { cols: 1, rows: 1 })
            .await
            .unwrap();
        let plain = spool
            .start(StartRequest::new(key("p"), sh("true")))
            .await
            .unwrap();
        let e = spool
            .resize(&plain.handle, TerminalSize { cols: 1, rows: 1 })
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidCommand);
        let _ = std::fs::remove_dir_all(&root);
    }

    #[tokio::test]
    async fn output_past_the_retention_is_expired_with_the_first_offset_kept() {
        let host = Host { binary: true };
        let root = root();
        let spool =
            Spool::new(&host, "sbx")
                .root(root.as_str())
                .capabilities(ProcessCapabilities {
                    retention: Some(10),
                    ..SPOOLED
                });
        let s = spool
            .start(StartRequest::new(
                key("r"),
                sh("printf 0123456789abcdefghij"),
            ))
            .await
            .unwrap();
        spool.wait(&s.handle, Duration::from_secs(5)).await.unwrap();
        let e = spool
            .read(&s.handle, StreamOffsets::ZERO)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Expired);
        assert_eq!(e.retained_from(), Some(StreamOffsets::new(10, 0)));
        let out = spool
            .attach(&s.handle, StreamOffsets::new(10, 0))
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        assert_eq!(out.stdout, "abcdefghij");
        let _ = std::fs::remove_dir_all(&root);
    }

    #[tokio::test]
    async fn a_supervisor_gone_without_an_exit_is_unknown_never_an_exit() {
        let host = Host { binary: true };
        let root = root();
        let spool = Spool::new(&host, "sbx").root(root.as_str());
        let s = spool
            .start(StartRequest::new(key("lost"), sh("sleep 100")))
            .await
            .unwrap();
        let dir = format!("{root}/lost");
        tokio::time::sleep(Duration::from_millis(200)).await;
        let kill = format!("kill -9 $(readlink {dir}/run); kill -9 -$(cat {dir}/pid)");
        assert!(
            std::process::Command::new("sh")
                .args(["-c", &kill])
                .status()
                .unwrap()
                .success()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            spool.status(&s.handle).await.unwrap().state,
            ProcessState::Unknown
        );
        let e = spool
            .wait(&s.handle, Duration::from_secs(1))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Protocol);
        let e = spool
            .attach(&s.handle, StreamOffsets::ZERO)
            .await
            .unwrap()
            .collect()
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Protocol);
        spool.release(&s.handle).await.unwrap();
        let _ = std::fs::remove_dir_all(&root);
    }

    #[tokio::test]
    async fn a_start_exec_killed_by_its_tag_after_the_detach_leaves_the_command_running() {
        // What the docker adapter does to an exec whose call was dropped: kill every process
        // carrying the exec's tag. The spool's supervisor and command must not carry it.
        let host = Host { binary: true };
        let root = root();
        let spool = Spool::new(&host, "sbx").root(root.as_str());
        let tag = format!("t{}", crate::id::random_id(12));
        let cmd = Command::builder(["sh", "-c", "sleep 0.3; printf \"[$EXECSEAM_EXEC]\""])
            .env(crate::degrade::EXEC_TAG_VAR, tag.as_str())
            .build()
            .unwrap();
        let s = spool
            .start(StartRequest::new(key("tagged"), cmd))
            .await
            .unwrap();
        let kill = Command::builder(crate::degrade::kill_argv(&tag)).build();
        assert!(host.exec(kill.unwrap()).await.unwrap().exit.success());
        assert_eq!(
            whole(&spool, &s.handle).await,
            Output::new("[]", "", Exit::Code(0))
        );
        let _ = std::fs::remove_dir_all(&root);
    }

    #[tokio::test]
    async fn a_launch_runs_the_supervisor_and_the_spool_only_prepares() {
        struct Detach(Host, AtomicBool);
        impl Launch for Detach {
            fn launch(&self, supervisor: Command) -> BoxFuture<'_, Result<(), Error>> {
                let dir = supervised_dir(supervisor.argv()).expect("the supervisor's directory");
                assert!(std::path::Path::new(dir).join("ready").exists(), "{dir}");
                self.1.store(true, Ordering::SeqCst);
                let mut argv = vec!["setsid".to_owned(), "-f".to_owned()];
                argv.extend(supervisor.argv().iter().cloned());
                let cmd = Command::builder(argv).build().unwrap();
                Box::pin(async move { self.0.exec(cmd).await.map(|_| ()) })
            }
            // A provider that knows when its command ended: the supervisor's pid is gone.
            fn wait_supervisor<'a>(
                &'a self,
                dir: &'a str,
                within: Duration,
            ) -> BoxFuture<'a, Result<bool, Error>> {
                Box::pin(async move {
                    let gone = || {
                        std::fs::read_link(format!("{dir}/run")).is_ok_and(|pid| {
                            std::fs::read_to_string(format!("/proc/{}/stat", pid.display()))
                                .map_or(true, |st| {
                                    st.rsplit(") ").next().unwrap_or("").starts_with('Z')
                                })
                        })
                    };
                    let deadline = tokio::time::Instant::now() + within;
                    while !gone() {
                        if tokio::time::Instant::now() >= deadline {
                            return Ok(false);
                        }
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    Ok(true)
                })
            }
        }
        let host = Host { binary: true };
        let launch = Detach(Host { binary: true }, AtomicBool::new(false));
        let root = root();
        let spool = Spool::new(&host, "sbx").root(root.as_str()).launch(&launch);
        let s = spool
            .start(StartRequest::new(key("l"), sh("echo hi")))
            .await
            .unwrap();
        assert!(launch.1.load(Ordering::SeqCst));
        assert_eq!(
            whole(&spool, &s.handle).await,
            Output::new("hi\n", "", Exit::Code(0))
        );
        // The wait rides on the provider's: with polls a minute apart it still ends at once.
        let slow = Spool::new(&host, "sbx")
            .root(root.as_str())
            .launch(&launch)
            .poll(Duration::from_secs(60), Duration::from_secs(60));
        let s = slow
            .start(StartRequest::new(key("l2"), sh("sleep 0.3; exit 3")))
            .await
            .unwrap();
        let started = std::time::Instant::now();
        let waited = slow.wait(&s.handle, Duration::from_secs(30)).await.unwrap();
        assert_eq!(waited, Waited::Exited(Exit::Code(3)));
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{:?}",
            started.elapsed()
        );
        let _ = std::fs::remove_dir_all(&root);
    }

    /// A stdin write brings the next read of a follower that backed off forward ("Following"
    /// in the module docs): without it the echo below waits out a 1.28 s sleep.
    #[tokio::test]
    async fn a_stdin_write_brings_a_backed_off_followers_next_read_forward() {
        let (root, host) = (root(), Host { binary: true });
        let poll = (Duration::from_millis(10), Duration::from_secs(60));
        let spool = Spool::new(&host, "sbx")
            .root(root.as_str())
            .poll(poll.0, poll.1);
        let s = spool
            .start(StartRequest::new(key("wake"), sh("exec cat")).open_stdin())
            .await
            .unwrap();
        let h = &s.handle;
        let mut stream = spool.attach(h, StreamOffsets::ZERO).await.unwrap();
        let write = async {
            // The attach's read, then reads after 10, 20, ..., 640 ms: the next sleep is 1.28 s.
            let dir = spool.dir(&key("wake"));
            while READS.lock().unwrap().get(&dir).copied().unwrap_or(0) < 8 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let data = Bytes::from_static(b"k");
            let w = StdinWrite {
                at: 0,
                data,
                close: false,
            };
            spool.write_stdin(h, w).await.unwrap();
            std::time::Instant::now()
        };
        let (echo, written) = tokio::join!(stream.next(), write);
        let after = written.elapsed();
        assert!(
            matches!(echo, Some(Ok(ProcessEvent::Stdout { at: 0, ref data })) if data == "k"),
            "{echo:?}"
        );
        assert!(after < Duration::from_secs(1), "{after:?}");
        drop(stream);
        let close = StdinWrite {
            at: 1,
            data: Bytes::new(),
            close: true,
        };
        spool.write_stdin(h, close).await.unwrap();
        assert_eq!(
            spool.wait(h, Duration::from_secs(30)).await.unwrap(),
            Waited::Exited(Exit::Code(0))
        );
        let _ = std::fs::remove_dir_all(&root);
    }
}
