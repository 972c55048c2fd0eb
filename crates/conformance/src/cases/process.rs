//! Process handles ([`Processes`]), gated on `Capabilities::processes`: start detached, attach
//! from offsets, stdin, signals to the group, wait, list, idempotent start, retention, typed
//! handles. Every case releases what it started.

use std::time::Duration;

use bytes::Bytes;
use execseam_core::{
    Command, ErrorKind, Exit, ProcessCapabilities, ProcessEvent, ProcessHandle, ProcessState,
    Processes, Signal, StartKey, StartRequest, StdinState, StdinWrite, StreamOffsets, TerminalSize,
    Waited,
};

use super::{fail, na, run_ok, same, sh};
use crate::{CaseResult, Outcome, Target};

/// The adapter's processes and their declared capabilities; the declaration and the interface
/// must agree.
fn processes(t: &Target) -> Result<(Box<dyn Processes + '_>, ProcessCapabilities), Outcome> {
    match (t.exec.capabilities().processes, t.exec.processes()) {
        (None, None) => na("capabilities.processes = None"),
        (Some(_), None) => fail("capabilities.processes is declared but Exec::processes() is None"),
        (None, Some(_)) => fail("Exec::processes() is Some but capabilities.processes is None"),
        (Some(caps), Some(p)) => {
            if p.process_capabilities() != caps {
                return fail(format!(
                    "Processes::process_capabilities() {:?} differs from Capabilities::processes {caps:?}",
                    p.process_capabilities()
                ));
            }
            Ok((p, caps))
        }
    }
}

/// A key unique to this run and case.
fn key(t: &Target, case: &str) -> StartKey {
    StartKey::new(format!("{}-{case}", t.suite_id())).expect("a valid key")
}

/// Starts `command` under `case`'s key; the start must be fresh.
async fn start(
    p: &dyn Processes,
    t: &Target,
    case: &str,
    request: impl FnOnce(StartRequest) -> StartRequest,
    command: Command,
) -> Result<ProcessHandle, Outcome> {
    let req = request(StartRequest::new(key(t, case), command));
    match p.start(req).await {
        Ok(s) if s.fresh => Ok(s.handle),
        Ok(_) => fail(format!("the first start under {case}'s key was not fresh")),
        Err(e) => fail(format!("start: {e}")),
    }
}

async fn wait_exit(
    p: &dyn Processes,
    h: &ProcessHandle,
    within: Duration,
) -> Result<Exit, Outcome> {
    match p.wait(h, within).await {
        Ok(Waited::Exited(exit)) => Ok(exit),
        Ok(Waited::Running) => fail(format!("still running after {within:?}")),
        Err(e) => fail(format!("wait: {e}")),
    }
}

/// Best effort: kill and forget (a case's failure must not leave its process behind).
async fn cleanup(p: &dyn Processes, h: &ProcessHandle) {
    if let Ok(info) = p.status(h).await
        && info.state == ProcessState::Running
    {
        let _ = p.signal(h, Signal::Kill).await;
        let _ = p.wait(h, Duration::from_secs(10)).await;
    }
    let _ = p.release(h).await;
}

/// Follows from `from` to the exit, checking that each stream's chunks are contiguous.
async fn follow(
    p: &dyn Processes,
    h: &ProcessHandle,
    from: StreamOffsets,
) -> Result<(Vec<u8>, Vec<u8>, Exit), Outcome> {
    let mut s = match p.attach(h, from).await {
        Ok(s) => s,
        Err(e) => return fail(format!("attach from {from:?}: {e}")),
    };
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut exit = None;
    let follow = async {
        while let Some(ev) = s.next().await {
            match ev {
                Ok(ProcessEvent::Stdout { at, data }) => {
                    if at != from.stdout + out.len() as u64 {
                        return fail(format!(
                            "stdout chunk at {at}, want {}",
                            from.stdout + out.len() as u64
                        ));
                    }
                    out.extend_from_slice(&data);
                }
                Ok(ProcessEvent::Stderr { at, data }) => {
                    if at != from.stderr + err.len() as u64 {
                        return fail(format!(
                            "stderr chunk at {at}, want {}",
                            from.stderr + err.len() as u64
                        ));
                    }
                    err.extend_from_slice(&data);
                }
                Ok(ProcessEvent::Exit(e)) => {
                    if exit.replace(e).is_some() {
                        return fail("two exits");
                    }
                }
                Err(e) => return fail(format!("the attach stream failed: {e}")),
            }
        }
        Ok(())
    };
    match tokio::time::timeout(Duration::from_secs(60), follow).await {
        Ok(r) => r?,
        Err(_) => return fail("the attach did not end within 60 s"),
    }
    match exit {
        Some(e) => Ok((out, err, e)),
        None => fail("the attach stream ended without an exit"),
    }
}

pub(crate) async fn declared(t: &Target) -> CaseResult {
    let (p, caps) = processes(t)?;
    if caps.terminal {
        return Ok(());
    }
    let r = p
        .start(
            StartRequest::new(key(t, "tty"), sh("true"))
                .terminal(TerminalSize { cols: 80, rows: 24 }),
        )
        .await;
    match r {
        Err(e) if e.kind() == ErrorKind::Unsupported => Ok(()),
        Err(e) => fail(format!(
            "a terminal start without terminals: {e}, want Unsupported"
        )),
        Ok(s) => {
            cleanup(&*p, &s.handle).await;
            fail("a terminal start was accepted by an adapter that declares no terminals")
        }
    }
}

/// Start, nobody attached while it runs, then attach from 0 and from mid offsets.
pub(crate) async fn attach_from_offsets(t: &Target) -> CaseResult {
    let (p, _) = processes(t)?;
    let h = start(
        &*p,
        t,
        "attach",
        |r| r,
        sh("printf 'a\\000b\\377'; printf E1 >&2; sleep 1; printf tail; printf E2 >&2; exit 5"),
    )
    .await?;
    let r = attach_checks(t, &*p, &h).await;
    cleanup(&*p, &h).await;
    r
}

async fn attach_checks(t: &Target, p: &dyn Processes, h: &ProcessHandle) -> CaseResult {
    // Another client: a fresh interface and a handle parsed from the stored token.
    let other = t.exec.processes().expect("declared");
    let stored = ProcessHandle::new(h.as_str().to_owned());
    let (out, err, exit) = follow(&*other, &stored, StreamOffsets::ZERO).await?;
    same("stdout from 0", &out, b"a\0b\xfftail")?;
    same("stderr from 0", &err, b"E1E2")?;
    if exit != Exit::Code(5) {
        return fail(format!("exit {exit:?}, want Code(5)"));
    }
    let (out, err, exit) = follow(p, h, StreamOffsets::new(3, 1)).await?;
    same("stdout from 3", &out, b"\xfftail")?;
    same("stderr from 1", &err, b"1E2")?;
    if exit != Exit::Code(5) {
        return fail(format!("exit from mid offsets {exit:?}, want Code(5)"));
    }
    let (out, err, _) = follow(p, h, StreamOffsets::new(8, 4)).await?;
    if !out.is_empty() || !err.is_empty() {
        return fail("a follow from the end yielded output");
    }
    Ok(())
}

pub(crate) async fn stdin_pieces(t: &Target) -> CaseResult {
    let (p, caps) = processes(t)?;
    if !caps.stdin {
        return na("process capabilities: stdin = false");
    }
    let c = Command::builder([
        "sh",
        "-c",
        "while IFS= read -r l; do printf 'got:%s\\n' \"$l\"; done; echo end",
    ])
    .stdin("zero\n")
    .build()
    .expect("valid");
    let h = start(&*p, t, "stdin", StartRequest::open_stdin, c).await?;
    let r = stdin_checks(&*p, &h).await;
    cleanup(&*p, &h).await;
    r
}

async fn stdin_checks(p: &dyn Processes, h: &ProcessHandle) -> CaseResult {
    let w = |at, d: &'static str, close| StdinWrite {
        at,
        data: Bytes::from_static(d.as_bytes()),
        close,
    };
    match p.write_stdin(h, w(5, "one\ntw", false)).await {
        Ok(StdinState {
            accepted: 11,
            closed: false,
        }) => {}
        other => return fail(format!("first write: {other:?}, want 11 accepted")),
    }
    // The retry of a write that landed changes nothing.
    match p.write_stdin(h, w(5, "one\ntw", false)).await {
        Ok(s) if s.accepted == 11 => {}
        other => return fail(format!("a retried write: {other:?}, want a no-op at 11")),
    }
    match p.write_stdin(h, w(2, "x", false)).await {
        Err(e) if e.kind() == ErrorKind::Conflict => {}
        other => {
            return fail(format!(
                "a write at a stale offset: {other:?}, want Conflict"
            ));
        }
    }
    match p.wait(h, Duration::from_millis(300)).await {
        Ok(Waited::Running) => {}
        other => return fail(format!("before stdin is closed: {other:?}, want Running")),
    }
    match p.write_stdin(h, w(11, "o\n", true)).await {
        Ok(StdinState {
            accepted: 13,
            closed: true,
        }) => {}
        other => {
            return fail(format!(
                "closing write: {other:?}, want 13 accepted, closed"
            ));
        }
    }
    let (out, err, exit) = follow(p, h, StreamOffsets::ZERO).await?;
    same("stdout", &out, b"got:zero\ngot:one\ngot:two\nend\n")?;
    same("stderr", &err, b"")?;
    if exit != Exit::Code(0) {
        return fail(format!("exit {exit:?}, want Code(0)"));
    }
    Ok(())
}

/// A zombie-aware liveness check, inside the sandbox.
const ALIVE: &str = "p=$(cat \"$1\") || exit 2; kill -0 \"$p\" 2>/dev/null || exit 1; \
    [ -r /proc/$p/stat ] || exit 0; z=$(sed 's/^.*) //; s/ .*//' /proc/$p/stat); [ \"$z\" != Z ]";

pub(crate) async fn signal_kills_group(t: &Target) -> CaseResult {
    let (p, caps) = processes(t)?;
    if !caps.signals.contains(&Signal::Term) {
        return na("process capabilities: signals without TERM");
    }
    let kid = t.path(&format!("{}-kid", t.suite_id()));
    run_ok(t, super::cmd(["mkdir", "-p", &t.scratch])).await?;
    let c = Command::builder([
        "sh",
        "-c",
        "sleep 300 & echo $! >\"$1\"; echo up; wait",
        "sh",
        &kid,
    ])
    .build()
    .expect("valid");
    let h = start(&*p, t, "signal", |r| r, c).await?;
    let r = async {
        // Up: its child's pid is written.
        let mut from = StreamOffsets::ZERO;
        for _ in 0..100 {
            match p.read(&h, from).await {
                Ok(r) if !r.stdout.is_empty() => break,
                Ok(r) => from = r.next(),
                Err(e) => return fail(format!("read: {e}")),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if let Err(e) = p.signal(&h, Signal::Term).await {
            return fail(format!("signal TERM: {e}"));
        }
        let exit = wait_exit(&*p, &h, Duration::from_secs(20)).await?;
        if !exit.is_ambiguous_kill() || exit.shell_status() != 143 {
            return fail(format!("exit after TERM {exit:?}, want 143 or Signal(15)"));
        }
        // The background child got it too (checked in the sandbox by its pid).
        for _ in 0..20 {
            let o = run_ok(
                t,
                Command::builder(["sh", "-c", ALIVE, "sh", &kid])
                    .build()
                    .expect("valid"),
            )
            .await?;
            match o.exit {
                Exit::Code(1) => return Ok(()),
                Exit::Code(0) => tokio::time::sleep(Duration::from_millis(100)).await,
                other => return fail(format!("the child's pid file: {other:?}")),
            }
        }
        fail("the command's background child outlived a TERM to the process group")
    }
    .await;
    if r.is_err() {
        let _ = run_ok(
            t,
            Command::builder(["sh", "-c", "kill -9 $(cat \"$1\")", "sh", &kid])
                .build()
                .expect("valid"),
        )
        .await;
    }
    cleanup(&*p, &h).await;
    r
}

pub(crate) async fn wait_and_late_exit(t: &Target) -> CaseResult {
    let (p, _) = processes(t)?;
    let h = start(&*p, t, "wait", |r| r, sh("sleep 2; exit 4")).await?;
    let r = async {
        match p.wait(&h, Duration::from_millis(200)).await {
            Ok(Waited::Running) => {}
            other => return fail(format!("wait 200 ms: {other:?}, want Running")),
        }
        // Nobody attached while it ends.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let exit = wait_exit(&*p, &h, Duration::from_secs(10)).await?;
        if exit != Exit::Code(4) {
            return fail(format!(
                "the exit recorded while nobody was attached: {exit:?}, want Code(4)"
            ));
        }
        match p.status(&h).await {
            Ok(i) if i.state == ProcessState::Exited(Exit::Code(4)) => Ok(()),
            other => fail(format!("status: {other:?}")),
        }
    }
    .await;
    cleanup(&*p, &h).await;
    r
}

pub(crate) async fn list_states(t: &Target) -> CaseResult {
    let (p, caps) = processes(t)?;
    if !caps.list {
        return na("process capabilities: list = false");
    }
    let running = start(&*p, t, "list-running", |r| r, sh("sleep 60")).await?;
    let done = match start(&*p, t, "list-done", |r| r, sh("exit 2")).await {
        Ok(h) => h,
        Err(e) => {
            cleanup(&*p, &running).await;
            return Err(e);
        }
    };
    let r = async {
        wait_exit(&*p, &done, Duration::from_secs(20)).await?;
        let list = match p.list().await {
            Ok(l) => l,
            Err(e) => return fail(format!("list: {e}")),
        };
        let state = |h: &ProcessHandle| list.iter().find(|i| &i.handle == h).map(|i| i.state);
        if state(&running) != Some(ProcessState::Running) {
            return fail(format!("the running handle: {:?}", state(&running)));
        }
        if state(&done) != Some(ProcessState::Exited(Exit::Code(2))) {
            return fail(format!("the exited handle: {:?}", state(&done)));
        }
        let keys: Vec<_> = list.iter().map(|i| i.key.clone()).collect();
        if !keys.is_sorted() {
            return fail("the list is not ordered by key");
        }
        match p.release(&running).await {
            Err(e) if e.kind() == ErrorKind::Conflict => {}
            other => {
                return fail(format!(
                    "releasing a running process: {other:?}, want Conflict"
                ));
            }
        }
        if let Err(e) = p.release(&done).await {
            return fail(format!("release: {e}"));
        }
        match p.status(&done).await {
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            other => return fail(format!("status after release: {other:?}, want NotFound")),
        }
        Ok(())
    }
    .await;
    cleanup(&*p, &running).await;
    cleanup(&*p, &done).await;
    r
}

pub(crate) async fn start_idempotent(t: &Target) -> CaseResult {
    let (p, caps) = processes(t)?;
    if !caps.idempotent_start {
        return na("process capabilities: idempotent_start = false");
    }
    let count = t.path(&format!("{}-count", t.suite_id()));
    run_ok(t, super::cmd(["mkdir", "-p", &t.scratch])).await?;
    let c = Command::builder(["sh", "-c", "echo x >>\"$1\"", "sh", &count])
        .build()
        .expect("valid");
    let k = key(t, "once");
    let (a, b) = tokio::join!(
        p.start(StartRequest::new(k.clone(), c.clone())),
        p.start(StartRequest::new(k.clone(), c.clone()))
    );
    let (a, b) = match (a, b) {
        (Ok(a), Ok(b)) => (a, b),
        (a, b) => return fail(format!("concurrent starts: {a:?} / {b:?}")),
    };
    let r = async {
        if a.handle != b.handle || a.handle != p.handle_for(&k) {
            return fail("starts under one key gave different handles");
        }
        if a.fresh == b.fresh {
            return fail(format!(
                "fresh {} and {}: exactly one start is fresh",
                a.fresh, b.fresh
            ));
        }
        wait_exit(&*p, &a.handle, Duration::from_secs(20)).await?;
        match p.start(StartRequest::new(k.clone(), c)).await {
            Ok(s) if !s.fresh => {}
            other => return fail(format!("a start after the end: {other:?}, want not fresh")),
        }
        let o = run_ok(t, super::cmd(["cat", &count])).await?;
        same("the command's runs", &o.stdout, b"x\n")
    }
    .await;
    cleanup(&*p, &a.handle).await;
    r
}

pub(crate) async fn retention(t: &Target) -> CaseResult {
    let (p, caps) = processes(t)?;
    let Some(limit) = caps.retention else {
        return na("process capabilities: retention = None (the sandbox's disk)");
    };
    if limit > 4 << 20 {
        return na(format!(
            "process capabilities: retention = {limit} bytes, above 4 MiB"
        ));
    }
    let n = limit + 4096;
    let h = start(
        &*p,
        t,
        "retention",
        |r| r,
        sh(&format!("head -c {n} /dev/zero | tr '\\000' x")),
    )
    .await?;
    let r = async {
        wait_exit(&*p, &h, Duration::from_secs(30)).await?;
        let e = match p.read(&h, StreamOffsets::ZERO).await {
            Err(e) => e,
            Ok(r) => {
                return fail(format!(
                    "a read from 0 past the retention gave {} bytes, want Expired",
                    r.stdout.len()
                ));
            }
        };
        if e.kind() != ErrorKind::Expired {
            return fail(format!(
                "a read from 0 past the retention: {e}, want Expired"
            ));
        }
        let Some(first) = e.retained_from() else {
            return fail("Expired without the first retained offsets");
        };
        if first.stdout == 0 || first.stdout > n - limit {
            return fail(format!(
                "first retained stdout offset {}, want in 1..={}",
                first.stdout,
                n - limit
            ));
        }
        let (out, _, _) = follow(&*p, &h, first).await?;
        if out.len() as u64 != n - first.stdout || out.iter().any(|b| *b != b'x') {
            return fail(format!(
                "from the first retained offset: {} bytes",
                out.len()
            ));
        }
        Ok(())
    }
    .await;
    cleanup(&*p, &h).await;
    r
}

pub(crate) async fn typed_handles(t: &Target) -> CaseResult {
    let (p, _) = processes(t)?;
    let garbage = ProcessHandle::new("not a handle");
    let mut checks: Vec<(&str, ProcessHandle, ErrorKind)> =
        vec![("a garbage handle", garbage, ErrorKind::InvalidCommand)];
    // Another sandbox's handle (the vanished sandbox is another id).
    let foreign = t
        .vanished_sandbox
        .as_ref()
        .and_then(|v| v.processes().map(|vp| vp.handle_for(&key(t, "foreign"))));
    if let Some(h) = foreign {
        checks.push(("another sandbox's handle", h, ErrorKind::InvalidCommand));
    }
    checks.push((
        "a handle never started",
        p.handle_for(&key(t, "never")),
        ErrorKind::NotFound,
    ));
    for (what, h, want) in checks {
        match p.read(&h, StreamOffsets::ZERO).await {
            Err(e) if e.kind() == want => {}
            other => return fail(format!("read of {what}: {other:?}, want {want:?}")),
        }
        match p.wait(&h, Duration::from_millis(100)).await {
            Err(e) if e.kind() == want => {}
            other => return fail(format!("wait of {what}: {other:?}, want {want:?}")),
        }
        match p.signal(&h, Signal::Kill).await {
            Err(e) if e.kind() == want => {}
            other => return fail(format!("signal of {what}: {other:?}, want {want:?}")),
        }
    }
    Ok(())
}

/// The adapter's processes if they have terminals.
fn terminals(t: &Target) -> Result<Box<dyn Processes + '_>, Outcome> {
    let (p, caps) = processes(t)?;
    if !caps.terminal {
        return na("process capabilities: terminal = false");
    }
    Ok(p)
}

const SIZE: TerminalSize = TerminalSize { cols: 80, rows: 24 };

/// Starts `script` (a `sh -c` line) on an 80x24 terminal under `case`'s key.
async fn start_tty(
    p: &dyn Processes,
    t: &Target,
    case: &str,
    script: &str,
) -> Result<ProcessHandle, Outcome> {
    start(p, t, case, |r| r.terminal(SIZE), sh(script)).await
}

/// Reads the terminal's output from 0 until it contains `want` (10 s at most).
async fn read_until(p: &dyn Processes, h: &ProcessHandle, want: &str) -> Result<String, Outcome> {
    let mut text = String::new();
    for _ in 0..200 {
        match p.read(h, StreamOffsets::ZERO).await {
            Ok(r) => {
                if !r.stderr.is_empty() {
                    return fail(format!(
                        "a terminal wrote {} bytes to stderr: its output is one stream",
                        r.stderr.len()
                    ));
                }
                text = String::from_utf8_lossy(&r.stdout).into_owned();
                if text.contains(want) {
                    return Ok(text);
                }
                if r.is_end() {
                    break;
                }
            }
            Err(e) => return fail(format!("read: {e}")),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    fail(format!("{want:?} never came; the terminal showed {text:?}"))
}

/// Types `data` at the offset stdin has accepted so far.
async fn keys(p: &dyn Processes, h: &ProcessHandle, data: &'static [u8]) -> CaseResult {
    let at = match p.status(h).await {
        Ok(info) => info.stdin.map_or(0, |s| s.accepted),
        Err(e) => return fail(format!("status: {e}")),
    };
    let w = StdinWrite {
        at,
        data: Bytes::from_static(data),
        close: false,
    };
    match p.write_stdin(h, w).await {
        Ok(_) => Ok(()),
        Err(e) => fail(format!("typing {data:?}: {e}")),
    }
}

/// Runs `body`, then cleans up `h` whatever it returned.
async fn tidy(
    p: &dyn Processes,
    h: &ProcessHandle,
    body: impl Future<Output = CaseResult>,
) -> CaseResult {
    let r = body.await;
    cleanup(p, h).await;
    r
}

/// `test -t 0 -a -t 1` is true on the terminal, false in a plain exec.
pub(crate) async fn terminal_is_a_tty(t: &Target) -> CaseResult {
    let p = terminals(t)?;
    let plain = run_ok(t, sh("test -t 0 -a -t 1")).await?;
    if plain.exit != Exit::Code(1) {
        return fail(format!(
            "`test -t 0 -a -t 1` in a plain exec gave {:?}, want 1 (pipes are no terminal)",
            plain.exit
        ));
    }
    let h = start_tty(
        &*p,
        t,
        "tty-is",
        "if test -t 0 -a -t 1; then echo is-a-tty; else echo not-a-tty; fi",
    )
    .await?;
    tidy(&*p, &h, async {
        let exit = wait_exit(&*p, &h, Duration::from_secs(20)).await?;
        let text = read_until(&*p, &h, "a-tty").await?;
        if !text.contains("is-a-tty") || exit != Exit::Code(0) {
            return fail(format!("on the terminal: {text:?}, {exit:?}"));
        }
        Ok(())
    })
    .await
}

/// `stty size` is the requested size, then the size after a resize.
pub(crate) async fn terminal_size_follows_resize(t: &Target) -> CaseResult {
    let p = terminals(t)?;
    let h = start_tty(
        &*p,
        t,
        "tty-size",
        "echo \"size:$(stty size)\"; read x; echo \"size:$(stty size)\"",
    )
    .await?;
    tidy(&*p, &h, async {
        read_until(&*p, &h, "size:24 80").await?;
        if let Err(e) = p
            .resize(
                &h,
                TerminalSize {
                    cols: 100,
                    rows: 40,
                },
            )
            .await
        {
            return fail(format!("resize: {e}"));
        }
        keys(&*p, &h, b"\r").await?;
        let exit = wait_exit(&*p, &h, Duration::from_secs(20)).await?;
        read_until(&*p, &h, "size:40 100").await?;
        if exit != Exit::Code(0) {
            return fail(format!("exit {exit:?}, want 0"));
        }
        Ok(())
    })
    .await
}

/// Ctrl-C typed on the terminal ends `sleep` with the status of a SIGINT death.
pub(crate) async fn terminal_ctrl_c(t: &Target) -> CaseResult {
    let p = terminals(t)?;
    let exact = p.process_capabilities().exact_signal_exit;
    let h = start_tty(&*p, t, "tty-intr", "echo ready; exec sleep 100").await?;
    tidy(&*p, &h, async {
        read_until(&*p, &h, "ready").await?;
        keys(&*p, &h, b"\x03").await?;
        let exit = wait_exit(&*p, &h, Duration::from_secs(20)).await?;
        let want = if exact {
            Exit::Signal(2)
        } else {
            Exit::Code(130)
        };
        if exit != want {
            return fail(format!("Ctrl-C gave {exit:?}, want {want:?}"));
        }
        Ok(())
    })
    .await
}

/// A line typed into `cat` is echoed by the terminal, then printed by `cat`; Ctrl-D ends it.
pub(crate) async fn terminal_echo(t: &Target) -> CaseResult {
    let p = terminals(t)?;
    let h = start_tty(&*p, t, "tty-echo", "echo ready; exec cat").await?;
    tidy(&*p, &h, async {
        read_until(&*p, &h, "ready").await?;
        keys(&*p, &h, b"hello\r").await?;
        let text = read_until(&*p, &h, "hello\r\nhello\r\n").await?;
        if text != "ready\r\nhello\r\nhello\r\n" {
            return fail(format!("the terminal showed {text:?}"));
        }
        keys(&*p, &h, b"\x04").await?;
        let exit = wait_exit(&*p, &h, Duration::from_secs(20)).await?;
        if exit != Exit::Code(0) {
            return fail(format!("cat after Ctrl-D: {exit:?}, want 0"));
        }
        Ok(())
    })
    .await
}

/// Attach, detach, output while nobody is attached, reattach from an offset: the exact bytes;
/// `exit 7` is 7.
pub(crate) async fn terminal_replay(t: &Target) -> CaseResult {
    let p = terminals(t)?;
    let h = start_tty(
        &*p,
        t,
        "tty-replay",
        "echo first; read x; echo \"second:$x\"; sleep 0.2; echo third; exit 7",
    )
    .await?;
    tidy(&*p, &h, async {
        // Attach, see the first line, detach.
        let mark = {
            let mut s = match p.attach(&h, StreamOffsets::ZERO).await {
                Ok(s) => s,
                Err(e) => return fail(format!("attach: {e}")),
            };
            let mut seen = Vec::new();
            let look = async {
                while let Some(ev) = s.next().await {
                    if let Ok(ProcessEvent::Stdout { data, .. }) = ev {
                        seen.extend_from_slice(&data);
                        if seen.ends_with(b"first\r\n") {
                            return Ok(seen.len() as u64);
                        }
                    } else {
                        return fail(format!("while attached: {ev:?}"));
                    }
                }
                fail("the stream ended before the first line")
            };
            match tokio::time::timeout(Duration::from_secs(20), look).await {
                Ok(r) => r?,
                Err(_) => return fail("the first line never came"),
            }
        };
        // Another client (another process's sandbox handle), where the target has one: it takes
        // the terminal over (types into it, waits, replays it) if reattach is declared, and is
        // refused typed if not.
        let other = t.another_client.as_ref().and_then(|c| c.processes());
        let declared = p.process_capabilities().terminal_reattach;
        let stored = ProcessHandle::new(h.as_str().to_owned());
        let (q, hq): (&dyn Processes, &ProcessHandle) = match &other {
            Some(o) if declared => (&**o, &stored),
            Some(o) => {
                match o.status(&stored).await {
                    Err(e) if e.kind() == ErrorKind::NotFound => {}
                    r => {
                        return fail(format!(
                            "terminal_reattach is false, yet another client's status gave {r:?}, not NotFound"
                        ));
                    }
                }
                (&*p, &h)
            }
            None => (&*p, &h),
        };
        keys(q, hq, b"abc\r").await?;
        let exit = wait_exit(q, hq, Duration::from_secs(20)).await?;
        if exit != Exit::Code(7) {
            return fail(format!("`exit 7` gave {exit:?}"));
        }
        let (all, err, e1) = follow(q, hq, StreamOffsets::ZERO).await?;
        let (tail, _, e2) = follow(&*p, &h, StreamOffsets::new(mark, 0)).await?;
        if !err.is_empty() || e1 != exit || e2 != exit {
            return fail(format!(
                "replay: stderr {} bytes, exits {e1:?} {e2:?}",
                err.len()
            ));
        }
        same(
            "the whole screen",
            &all,
            b"first\r\nabc\r\nsecond:abc\r\nthird\r\n",
        )?;
        same("the replay from the offset", &tail, &all[mark as usize..])
    })
    .await
}
