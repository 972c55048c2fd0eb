//! The cases. Each is a plain `async fn(&Target) -> CaseResult`; [`all`] lists them in run order.

use std::fmt::Write as _;

use execseam_core::{BoxFuture, Command, Error, ErrorKind, Output, Retry};

use crate::{Case, CaseResult, Outcome, Target};

mod code;
mod exec;
mod faults;
mod lifecycle;
mod process;
mod state;
mod tools;

/// Builds the case list, giving each async fn a boxed wrapper.
macro_rules! cases {
    ($($name:literal => $f:path : $about:literal),* $(,)?) => {
        vec![$({
            fn run(t: &Target) -> BoxFuture<'_, CaseResult> {
                Box::pin($f(t))
            }
            Case { name: $name, about: $about, run }
        }),*]
    };
}

/// Every case, in run order. `fault-sandbox-vanishes` destroys the sandbox, so it runs last.
pub fn all() -> Vec<Case> {
    let mut v = exec_cases();
    v.extend(tool_cases());
    v.extend(process_cases());
    v.extend(lifecycle_cases());
    v.extend(state_cases());
    v.extend(fault_cases());
    v.extend(cases![
        "lifecycle-nothing-left" => lifecycle::nothing_left:
            "after the suite, no sandbox it created is left (the emulator's count, and the list)",
    ]);
    v
}

/// Process handles, gated on `Capabilities::processes`.
pub fn process_cases() -> Vec<Case> {
    cases![
        "process-declared" => process::declared:
            "Capabilities::processes matches Exec::processes(); a terminal start without terminals is Unsupported",
        "process-attach-from-offsets" => process::attach_from_offsets:
            "started detached, nobody attached: attach from 0 and from mid offsets, from another client, gives each stream byte-exact and one exit",
        "process-stdin-pieces" => process::stdin_pieces:
            "stdin written in pieces by offset (a retried write is a no-op, a stale one Conflict), then closed: the command reads exactly that",
        "process-signal-kills-group" => process::signal_kills_group:
            "TERM to a handle ends the command and its background child (checked by pid in the sandbox)",
        "process-wait-and-late-exit" => process::wait_and_late_exit:
            "wait gives Running at its deadline, then the exit recorded while nobody was attached",
        "process-list-states" => process::list_states:
            "list shows a running and an exited handle with their states, ordered; release refuses a running one, forgets an exited one",
        "process-start-idempotent" => process::start_idempotent:
            "two concurrent starts and a late one under one key run the command once; exactly one is fresh",
        "process-retention-expired" => process::retention:
            "output past the retention limit is Err(Expired) with the first retained offset, from which the rest reads exactly",
        "process-typed-handles" => process::typed_handles:
            "a garbage handle, another sandbox's handle and one never started are typed errors (InvalidCommand, NotFound), never an exit",
        "terminal-is-a-tty" => process::terminal_is_a_tty:
            "gated on terminals: `test -t 0 -a -t 1` is true on a terminal handle and false in a plain exec",
        "terminal-size-follows-resize" => process::terminal_size_follows_resize:
            "`stty size` on the terminal is the requested 24x80, then 40x100 after a resize",
        "terminal-ctrl-c" => process::terminal_ctrl_c:
            "a Ctrl-C byte typed on the terminal ends `sleep` with the status of a SIGINT death (130)",
        "terminal-echo" => process::terminal_echo:
            "a line typed into `cat` is echoed by the terminal then printed; Ctrl-D ends it with 0",
        "terminal-replay-and-exit" => process::terminal_replay:
            "detach, output while nobody is attached, reattach from an offset: exact replay of the one stream; `exit 7` is 7; another client (a fresh provider's handle, where the target has one) takes it over if terminal_reattach, else gets NotFound",
    ]
}

/// The sandbox lifecycle, gated on the provider's `LifecycleCapabilities`.
pub fn lifecycle_cases() -> Vec<Case> {
    cases![
        "lifecycle-declared" => lifecycle::declared:
            "operations declared unsupported fail with Unsupported; connecting to an unknown id is NotFound",
        "lifecycle-create-exec-destroy" => lifecycle::create_exec_destroy:
            "create, exec, close (owned: destroys), then exec is Err(NotFound), never Ok or an exit code",
        "lifecycle-list-by-label" => lifecycle::list_by_label:
            "a sandbox created with a label is in the list filtered by it, not in one filtered by another value",
        "lifecycle-connect-sees-files" => lifecycle::connect_sees_files:
            "connect by id sees files written through the first handle; closing it (not owned) leaves the sandbox",
        "lifecycle-destroy-idempotent" => lifecycle::destroy_idempotent:
            "destroying twice, through the handle and the provider, is Ok; then exec is NotFound",
        "lifecycle-unsupported-spec-field" => lifecycle::unsupported_spec_field:
            "a spec field the provider does not honour is refused (Unsupported) before anything is created",
    ]
}

/// Sandbox state (pause, snapshots, forks, exposed ports), gated on the provider's
/// `StateCapabilities`.
pub fn state_cases() -> Vec<Case> {
    cases![
        "state-declared" => state::declared:
            "state operations declared absent are Unsupported; a destructive snapshot without allow_stop and port 0 are refused before any I/O",
        "state-snapshot-restores-files" => state::snapshot_restores_files:
            "write, snapshot, change: a sandbox created from the snapshot has the old content, the source the new",
        "state-snapshot-source-after" => state::snapshot_source_after:
            "after a snapshot the source is as declared: running with its processes, stopped, or its processes killed",
        "state-snapshot-delete" => state::snapshot_delete:
            "a deleted snapshot is gone from the list, deleting it again is Ok, creating from it is NotFound",
        "state-restore-in-place" => state::restore_in_place:
            "write, snapshot, change, restore in place: the same sandbox has the snapshot's files (the whole root where declared) and its processes as the kind keeps them",
        "state-fork-independent" => state::fork_independent:
            "a fork has the source's files (or its last snapshot's, as declared) and the two change independently",
        "state-pause-resume" => state::pause_resume:
            "pause and resume keep the files, and a background process exactly where the kind keeps memory; an exec while paused resumes or is Conflict, as declared",
        "state-expose-port" => state::expose_port:
            "a port where an HTTP server listens in the sandbox, exposed, answers through its URL from this host",
    ]
}

/// The cases about exec behaviour.
pub fn exec_cases() -> Vec<Case> {
    cases![
        "command-validation" => exec::command_validation:
            "invalid commands are rejected with InvalidCommand before any I/O",
        "exit-code-is-a-result" => exec::exit_codes:
            "exit codes 0..=255 round-trip exactly and are Ok results (property)",
        "stdout-stderr-separate" => exec::separate_streams:
            "`printf o; printf e >&2; exit 3` gives stdout o, stderr e, code 3 (snapshot)",
        "fast-failure-keeps-stderr" => exec::fast_failure:
            "a command that fails at once keeps all of its stderr",
        "missing-program" => exec::missing_program:
            "a program that does not exist is exit 127 with a message, or Err(NotFound)",
        "binary-output-exact" => exec::binary_output:
            "NUL and 0xFF bytes on stdout and stderr arrive exactly",
        "large-output-both-streams" => exec::large_output:
            "8 MiB on stdout and stderr at once completes byte-exact, no deadlock",
        "stdin-roundtrip" => exec::stdin_roundtrip:
            "arbitrary bytes on stdin come back from cat byte-exact (property)",
        "no-stdin-is-eof" => exec::no_stdin:
            "without stdin, cat sees EOF at once",
        "argv-roundtrip" => exec::argv_roundtrip:
            "arbitrary argv comes back exactly through printf '%s\\0' (property)",
        "workdir-honoured" => exec::workdir:
            "the command runs in the workdir asked for",
        "workdir-missing" => exec::workdir_missing:
            "a workdir that does not exist is Err(NotFound), not an exit code",
        "env-honoured" => exec::env:
            "env values (spaces, quotes, newlines, empty) and odd keys reach the command",
        "env-baseline" => exec::env_baseline:
            "the base environment has a PATH, and Command.env overrides it",
        "background-child-detached" => lifecycle::background_child:
            "`sleep 5 & echo started` returns started, exit 0, well under 5 s; the child keeps running (or is gone, where each execution has a sandbox of its own)",
        "kill-is-ambiguous" => exec::kill_signals:
            "kill -9/-15 $$ give 137/143 or Signal(9/15), classified ambiguous",
        "concurrent-execs-isolated" => exec::concurrent:
            "concurrent commands get their own output",
        "dead-endpoint-is-an-error" => exec::dead_endpoint:
            "an endpoint where nothing listens gives Err(Unavailable), never Ok",
        "vanished-sandbox-is-an-error" => exec::vanished_sandbox:
            "a sandbox that does not exist gives Err(NotFound), never Ok",
        "streaming-declared" => exec::streaming_declared:
            "Capabilities::streaming matches Exec::streaming()",
        "streaming-matches-buffered" => exec::streaming_matches:
            "streamed chunks concatenate to the buffered result; exactly one exit, last",
        "deadline-keeps-partial-and-kills" => exec::deadline:
            "the host deadline gives Err(Timeout(Command)) with partial output; the process is gone",
        "output-cap-records-truncation" => exec::output_cap:
            "the host output cap keeps N bytes and records what it dropped",
    ]
}

/// The builtin tools (`execseam-tools`) through the adapter, and the hostile-order proof.
pub fn tool_cases() -> Vec<Case> {
    cases![
        "tools-commands-carry-tool" => tools::commands_carry_their_tool:
            "every tool's command carries its Tool (glob, list, grep, read, bash)",
        "tools-glob-snapshot" => tools::glob:
            "glob on the fixture tree: sorted by relative path in byte order, then truncated (snapshot)",
        "tools-list-snapshot" => tools::list:
            "list on the fixture tree at several depths, directories marked (snapshot)",
        "tools-grep-snapshot" => tools::grep:
            "grep on the fixture tree: regex, fixed, ignore-case, path filter, limit (snapshot)",
        "tools-read-snapshot" => tools::read:
            "read whole files, line ranges and byte ranges, bytes exact (snapshot)",
        "tools-write-atomic" => tools::write:
            "write round-trips every byte value (a text-only output too), keeps an existing file's mode, leaves no temporary file",
        "tools-apply-patch" => tools::apply_patch:
            "a multi-file unified diff applies (snapshot); a conflicting hunk writes nothing",
        "tools-apply-patch-symlink" => tools::apply_patch_symlink:
            "apply_patch refuses a path through a symlink out of its root (OutsideRoot), writing and reading nothing there",
        "tools-edit" => tools::edit:
            "edit: a unique match replaced with the bytes around it kept exactly (CRLF, no final newline, mode); absent, not unique, missing file: typed errors, nothing written (snapshot)",
        "tools-apply-patch-envelope" => tools::apply_patch_envelope:
            "a `*** Begin Patch` patch adds, updates, moves and deletes in one go (snapshot); a failing chunk, add, delete or move writes nothing",
        "tools-bash" => tools::bash:
            "bash keeps stdout, stderr and the exit code apart; workdir honoured (snapshot)",
        "tools-errors-typed" => tools::errors:
            "missing file, missing directory, directory, invalid regex/glob: typed errors, never empty results",
        "tools-permission-denied" => tools::permission_denied:
            "unreadable and unwritable paths give PermissionDenied; a walk names what it skipped",
        "tools-non-utf8-names" => tools::non_utf8_names:
            "a name that is not UTF-8 is listed with its raw bytes, sorted by them (snapshot)",
        "tools-hostile-fixture" => tools::hostile_fixture:
            "every tool's fixture output is byte-identical through shuffled records and random chunks",
        "tools-code-validation" => code::validation:
            "code: a timeout outside 1..=600 s or an oversized source is InvalidArgument, before any I/O",
        "tools-code-python" => code::python:
            "code(python): the exact source runs; stdout, stderr and exit 3 come back exactly",
        "tools-code-javascript" => code::javascript:
            "code(javascript): the exact source runs; stdout, stderr and exit 3 come back exactly",
        "tools-code-typescript" => code::typescript:
            "code(typescript): the exact source runs; stdout, stderr and exit 3 come back exactly",
        "tools-code-bash" => code::bash:
            "code(bash): the exact source runs; stdout, stderr and exit 3 come back exactly",
        "tools-hostile-order" => tools::hostile_order:
            "random trees (odd names, deep, empty dirs): list/glob/grep/read match an oracle, directly and through the hostile adapter (property)",
    ]
}

/// The fault-injection cases (emulated runs).
pub fn fault_cases() -> Vec<Case> {
    cases![
        "fault-rate-limited" => faults::rate_limited:
            "429 with Retry-After is Err(RateLimited), retry safe after the given delay (the provider's own refusal) or unsafe (not known to precede the command)",
        "fault-server-error" => faults::server_error:
            "500 on the exec is Err(Internal|Unavailable), retry unsafe (it may have run)",
        "fault-unavailable" => faults::unavailable:
            "503 is Err(Unavailable) with a retry class other than never",
        "fault-connection-reset" => faults::reset:
            "a connection reset before the response is Err(Unavailable|Protocol), retry unsafe",
        "fault-stream-cut" => faults::stream_cut:
            "a response cut before its exit is an Err, never Ok",
        "fault-malformed-body" => faults::malformed:
            "a malformed response is Err(Protocol)",
        "fault-latency" => faults::latency:
            "a slow response still gives the exact result",
        "fault-auth" => faults::auth:
            "rejected credentials are Err(Unauthenticated), retry never",
        "fault-no-duplicate-execution" => faults::no_duplicate:
            "a 500 on the exec does not make the adapter or its SDK submit it again",
        "fault-sandbox-vanishes" => faults::sandbox_vanishes:
            "a sandbox that disappears mid-command gives an Err, never Ok",
    ]
}

// ---------------------------------------------------------------------------------------------
// Helpers shared by the cases.

pub(crate) fn fail<T>(msg: impl Into<String>) -> Result<T, Outcome> {
    Err(Outcome::Fail(msg.into()))
}

pub(crate) fn na<T>(why: impl Into<String>) -> Result<T, Outcome> {
    Err(Outcome::NotApplicable(why.into()))
}

pub(crate) fn cmd<const N: usize>(argv: [&str; N]) -> Command {
    Command::new(argv).expect("the suite builds valid commands")
}

pub(crate) fn sh(script: &str) -> Command {
    cmd(["sh", "-c", script])
}

/// Runs a command and requires an `Ok`.
pub(crate) async fn run_ok(t: &Target, c: Command) -> Result<Output, Outcome> {
    let argv = c.argv().to_vec();
    t.exec
        .exec(c)
        .await
        .or_else(|e| fail(format!("{argv:?} returned Err instead of Ok: {e}")))
}

/// Bytes as a readable, lossless string: in quotes, escaped as the tools escape paths
/// ([`execseam_tools::escape`]), a quote escaped too.
pub(crate) fn show(b: &[u8]) -> String {
    format!("\"{}\"", execseam_tools::escape(b).replace('"', "\\\""))
}

/// Shows at most `max` bytes.
pub(crate) fn show_short(b: &[u8], max: usize) -> String {
    if b.len() <= max {
        show(b)
    } else {
        format!("{}… ({} bytes)", show(&b[..max]), b.len())
    }
}

/// A renderable output for snapshots.
pub(crate) fn render(o: &Output) -> String {
    format!(
        "exit: {:?}\nstdout: {}\nstderr: {}\ntruncated: {:?}",
        o.exit,
        show(&o.stdout),
        show(&o.stderr),
        o.truncated
    )
}

/// Requires two byte strings to be equal, reporting the first difference.
pub(crate) fn same(what: &str, got: &[u8], want: &[u8]) -> CaseResult {
    if got == want {
        return Ok(());
    }
    let at = got
        .iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(want.len()));
    let from = at.saturating_sub(16);
    fail(format!(
        "{what} differs at byte {at} (got {} bytes, want {}):\n  got:  {}\n  want: {}",
        got.len(),
        want.len(),
        show_short(&got[from..], 64),
        show_short(&want[from..], 64)
    ))
}

/// A line diff (for records and snapshots): `-` lines are expected, `+` lines are what came.
pub fn diff(want: &str, got: &str) -> String {
    let (w, g): (Vec<_>, Vec<_>) = (want.lines().collect(), got.lines().collect());
    let mut out = String::new();
    let n = w.len().max(g.len());
    for i in 0..n {
        match (w.get(i), g.get(i)) {
            (Some(a), Some(b)) if a == b => {}
            (a, b) => {
                if let Some(a) = a {
                    let _ = writeln!(out, "  -{a}");
                }
                if let Some(b) = b {
                    let _ = writeln!(out, "  +{b}");
                }
            }
        }
    }
    out
}

/// Requires an error of one of `kinds` with one of `retries` (empty = any).
pub(crate) fn expect_err(
    what: &str,
    r: Result<Output, Error>,
    kinds: &[ErrorKind],
    retries: &[Retry],
) -> Result<Error, Outcome> {
    let e = match r {
        Ok(o) => {
            return fail(format!(
                "{what}: got Ok ({:?}, stdout {}) instead of an error",
                o.exit,
                show_short(&o.stdout, 64)
            ));
        }
        Err(e) => e,
    };
    if !kinds.contains(&e.kind()) {
        return fail(format!(
            "{what}: error kind {:?}, want one of {kinds:?}: {e}",
            e.kind()
        ));
    }
    let retry_ok = retries.is_empty()
        || retries.iter().any(|r| match (r, e.retry()) {
            (Retry::Safe { after: None }, Retry::Safe { .. }) => true,
            (a, b) => *a == b,
        });
    if !retry_ok {
        return fail(format!(
            "{what}: retry {:?}, want one of {retries:?}: {e}",
            e.retry()
        ));
    }
    Ok(e)
}
