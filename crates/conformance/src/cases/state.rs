//! Sandbox state (pause and resume, snapshots, forks, exposed ports), gated on the provider's
//! `StateCapabilities`: what a capability says an operation keeps or destroys is what the case
//! checks. Every sandbox a case makes is recorded and closed by it; every snapshot it takes is
//! deleted where the provider deletes snapshots.

use std::time::Duration;

use execseam_core::{
    ErrorKind, Exec, LifecycleCapabilities, PortsWhen, Sandbox, SandboxSpec, SandboxState, Scope,
    SnapshotRequest, SourceAfter, StateCapabilities, WhilePaused,
};

use super::lifecycle::{
    create_recorded as create, provider, refused, refused_create, spec, unsupported,
};
use super::{fail, na, sh, show};
use crate::{CaseResult, Outcome, Target};

/// A relative path: the sandbox's default working directory, on every provider.
const FILE: &str = "execseam-state";

async fn out(what: &str, s: &dyn Exec, script: &str) -> Result<String, Outcome> {
    match tokio::time::timeout(Duration::from_secs(60), s.exec(sh(script))).await {
        Err(_) => fail(format!("{what}: no answer within 60 s")),
        Ok(Ok(o)) if o.exit.success() => Ok(String::from_utf8_lossy(&o.stdout).into_owned()),
        Ok(Ok(o)) => fail(format!(
            "{what}: {script:?} exited {:?}, stderr {}",
            o.exit,
            show(&o.stderr)
        )),
        Ok(Err(e)) => fail(format!("{what}: {script:?} failed: {e}")),
    }
}

async fn content(what: &str, s: &dyn Exec) -> Result<String, Outcome> {
    out(what, s, &format!("cat {FILE}")).await
}

/// Runs the block with `$v` the sandbox's handle (as `&dyn Sandbox`), then closes it whatever
/// happened; a `return` in the block ends the block, not the case.
macro_rules! with {
    ($s:ident, |$v:ident| $body:block) => {{
        let r: CaseResult = {
            let $v: &dyn Sandbox = $s.as_ref();
            async { $body }.await
        };
        finish($s, r).await
    }};
}

async fn finish(s: Box<dyn Sandbox>, r: CaseResult) -> CaseResult {
    let closed = s.close().await;
    r?;
    closed.or_else(|e| fail(format!("close failed: {e}")))
}

fn state_of(l: &LifecycleCapabilities) -> StateCapabilities {
    l.state
}

/// Every operation declared absent is `Unsupported`, and a port outside any rule is refused,
/// before anything is sent (the id named is one that does not exist).
pub(crate) async fn declared(t: &Target) -> CaseResult {
    let (p, l) = provider(t)?;
    let s = state_of(&l);
    let id = t.missing_sandbox_id.as_str();
    if s.pause.is_none() {
        unsupported("pause", p.pause(id, None).await.map(drop))?;
        unsupported("resume", p.resume(id).await)?;
    }
    if s.snapshot.is_none() {
        unsupported(
            "snapshot",
            p.snapshot(id, SnapshotRequest::new().allow_stop(true))
                .await
                .map(drop),
        )?;
        unsupported("list_snapshots", p.list_snapshots(None).await.map(drop))?;
        unsupported(
            "delete_snapshot",
            p.delete_snapshot("execseam-no-such-snapshot").await,
        )?;
        if l.create {
            refused_create(
                t,
                p,
                SandboxSpec::new().with_snapshot("execseam-no-such-snapshot"),
                &[ErrorKind::Unsupported],
                "a create from a snapshot on a provider without snapshots",
            )
            .await?;
        }
    } else if let Some(snap) = s.snapshot {
        if !snap.restore_in_place {
            unsupported("restore", p.restore(id, "execseam-no-such-snapshot").await)?;
        }
        if !snap.list {
            unsupported("list_snapshots", p.list_snapshots(None).await.map(drop))?;
        }
        if !snap.delete {
            unsupported(
                "delete_snapshot",
                p.delete_snapshot("execseam-no-such-snapshot").await,
            )?;
        }
        if !snap.never_expires {
            unsupported(
                "a snapshot that never expires",
                p.snapshot(id, SnapshotRequest::new().never_expires().allow_stop(true))
                    .await
                    .map(drop),
            )?;
        }
        if snap.source_after.is_destructive() {
            unsupported(
                "a destructive snapshot without allow_stop",
                p.snapshot(id, SnapshotRequest::new()).await.map(drop),
            )?;
        }
    }
    if s.fork.is_none() {
        let what = "fork, declared unsupported,";
        refused(t, p.fork(id).await, &[ErrorKind::Unsupported], what).await?;
    }
    match s.expose {
        None => {
            unsupported("expose", p.expose(id, 8080).await.map(drop))?;
            unsupported("exposed", p.exposed(id).await.map(drop))?;
            unsupported("unexpose", p.unexpose(id, 8080).await)?;
        }
        Some(e) => {
            match p.expose(id, 0).await {
                Err(err) if err.kind() == ErrorKind::InvalidConfig => {}
                Err(err) => {
                    return fail(format!(
                        "exposing port 0 failed with {:?} instead of InvalidConfig: {err}",
                        err.kind()
                    ));
                }
                Ok(x) => return fail(format!("exposing port 0 gave {}", x.url)),
            }
            if !e.list {
                unsupported("exposed", p.exposed(id).await.map(drop))?;
            }
            if !e.unexpose {
                unsupported("unexpose", p.unexpose(id, e.only.unwrap_or(8080)).await)?;
            }
        }
    }
    Ok(())
}

/// Write a file, snapshot, change the file, create from the snapshot: the old content; the
/// source keeps the new one (or is in the state the capability says).
pub(crate) async fn snapshot_restores_files(t: &Target) -> CaseResult {
    let (p, l) = provider(t)?;
    let Some(snap) = l.state.snapshot else {
        return na("state.snapshot = None");
    };
    if !snap.create_from {
        return na("state.snapshot.create_from = false");
    }
    let src = create(t, p, spec(t, &l)).await?;
    with!(src, |src| {
        out(
            "writing in the source",
            src,
            &format!("printf before > {FILE}"),
        )
        .await?;
        // Kept until deleted where the provider can (the case deletes it, or it is the suite's).
        let mut request = SnapshotRequest::new().allow_stop(true);
        if snap.never_expires {
            request = request.never_expires();
        }
        let taken = p
            .snapshot(src.id(), request)
            .await
            .or_else(|e| fail(format!("snapshot failed: {e}")))?;
        let id = taken.snapshot.id.clone();
        let result = async {
            if let Some(at) = taken.snapshot.expires.filter(|_| snap.never_expires) {
                return fail(format!(
                    "a snapshot asked to never expire expires at {at:?}"
                ));
            }
            if taken.snapshot.kind != snap.kinds[0] {
                return fail(format!(
                    "the snapshot is of kind {}, the declared default is {}",
                    taken.snapshot.kind, snap.kinds[0]
                ));
            }
            let want_state = match snap.source_after {
                SourceAfter::Stopped => SandboxState::Stopped,
                _ => SandboxState::Running,
            };
            if taken.source_state != want_state {
                return fail(format!(
                    "after a snapshot declared {:?} the source is {} (want {want_state})",
                    snap.source_after, taken.source_state
                ));
            }
            if !snap.source_after.is_destructive() {
                out(
                    "changing the file in the source",
                    src,
                    &format!("printf after > {FILE}"),
                )
                .await?;
            }
            let restored = create(t, p, spec(t, &l).with_snapshot(id.clone())).await?;
            with!(restored, |r| {
                let got = content("reading in the sandbox made from the snapshot", r).await?;
                if got != "before" {
                    return fail(format!(
                        "the sandbox made from the snapshot has {got:?}, want \"before\""
                    ));
                }
                Ok(())
            })?;
            if !snap.source_after.is_destructive() {
                let got = content("reading in the source", src).await?;
                if got != "after" {
                    return fail(format!(
                        "the source has {got:?} after creating from its snapshot, want \"after\""
                    ));
                }
            }
            Ok(())
        }
        .await;
        if snap.delete {
            let _ = p.delete_snapshot(&id).await;
        }
        result
    })
}

/// Where the restore case puts a file outside the working directory when the snapshot holds the
/// whole root (`/var/tmp` is kept on disk, FHS 3.0 5.15).
const OUTSIDE: &str = "/var/tmp/execseam-state";

/// Write (a file to change, one to delete, one outside the working directory where the snapshot
/// holds the root), start a background process, snapshot, change all of it, restore in place:
/// the same sandbox has the snapshot's files again, a file made since is gone, and the process
/// runs exactly where the snapshot's kind keeps processes.
pub(crate) async fn restore_in_place(t: &Target) -> CaseResult {
    let (p, l) = provider(t)?;
    let Some(snap) = l.state.snapshot else {
        return na("state.snapshot = None");
    };
    if !snap.restore_in_place {
        return na("state.snapshot.restore_in_place = false");
    }
    let root = snap.scope == Scope::Root;
    let s = create(t, p, spec(t, &l)).await?;
    with!(s, |s| {
        let mut write = format!("printf before > {FILE} && printf kept > {FILE}.gone");
        let mut change =
            format!("printf after > {FILE} && rm {FILE}.gone && printf new > {FILE}.new");
        let mut read = format!("cat {FILE} {FILE}.gone");
        if root {
            write += &format!(" && printf outside > {OUTSIDE}");
            change += &format!(" && rm {OUTSIDE}");
            read += &format!(" {OUTSIDE}");
        }
        out("writing", s, &write).await?;
        let pid = out(
            "starting a background process",
            s,
            "sleep 300 >/dev/null 2>&1 </dev/null & echo $!",
        )
        .await?;
        // By its whole command line: a restored sandbox may number its processes anew, so the
        // pid alone may be this check's own shell.
        let probe = format!(
            "[ \"$(tr '\\0' ' ' < /proc/{}/cmdline 2>/dev/null)\" = 'sleep 300 ' ] && echo alive || echo gone",
            pid.trim()
        );
        if out("checking the background process", s, &probe)
            .await?
            .trim()
            != "alive"
        {
            return na("the background process cannot be found by its command line here");
        }
        let taken = p
            .snapshot(s.id(), SnapshotRequest::new().allow_stop(true))
            .await
            .or_else(|e| fail(format!("snapshot failed: {e}")))?;
        let id = taken.snapshot.id.clone();
        let result = async {
            out("changing the files", s, &change).await?;
            p.restore(s.id(), &id)
                .await
                .or_else(|e| fail(format!("restore failed: {e}")))?;
            let got = out(
                "reading after the restore",
                s,
                &format!(
                    "{read}; if test -e {FILE}.new; then echo ' (made since, still there)'; fi"
                ),
            )
            .await?;
            let want = if root {
                "beforekeptoutside"
            } else {
                "beforekept"
            };
            if got != want {
                return fail(format!(
                    "after the restore the files read {got:?}, want {want:?}"
                ));
            }
            let alive = out("checking the background process", s, &probe).await?;
            let want = if taken.snapshot.kind.keeps_processes() {
                "alive"
            } else {
                "gone"
            };
            if alive.trim() != want {
                return fail(format!(
                    "after restoring a {} snapshot the background process is {}, want {want}",
                    taken.snapshot.kind,
                    alive.trim()
                ));
            }
            Ok(())
        }
        .await;
        if snap.delete {
            let _ = p.delete_snapshot(&id).await;
        }
        result
    })
}

/// A fork and its source change independently.
pub(crate) async fn fork_independent(t: &Target) -> CaseResult {
    let (p, l) = provider(t)?;
    let Some(fork) = l.state.fork else {
        return na("state.fork = None");
    };
    let src = create(t, p, spec(t, &l)).await?;
    with!(src, |src| {
        out(
            "writing in the source",
            src,
            &format!("printf base > {FILE}"),
        )
        .await?;
        let mut saved = None;
        if !fork.includes_unsaved {
            // The fork restores the source's last snapshot: take one, then change the file.
            let s = p
                .snapshot(src.id(), SnapshotRequest::new().allow_stop(true))
                .await
                .or_else(|e| fail(format!("snapshot before the fork failed: {e}")))?;
            saved = Some(s.snapshot.id);
            out(
                "changing the source after its snapshot",
                src,
                &format!("printf unsaved > {FILE}"),
            )
            .await?;
        }
        let forked = p
            .fork(src.id())
            .await
            .or_else(|e| fail(format!("fork failed: {e}")))?;
        t.record_created(forked.id());
        let r = with!(forked, |f| {
            if !f.owned() {
                return fail("the fork's handle does not own it (close would leave it running)");
            }
            if f.id() == src.id() {
                return fail("the fork has the source's id");
            }
            let got = content("reading in the fork", f).await?;
            if got != "base" {
                return fail(format!(
                    "the fork has {got:?}, want \"base\" ({})",
                    if fork.includes_unsaved {
                        "the source's content"
                    } else {
                        "the source's last snapshot"
                    }
                ));
            }
            out("writing in the fork", f, &format!("printf fork > {FILE}")).await?;
            out(
                "writing in the source",
                src,
                &format!("printf source > {FILE}"),
            )
            .await?;
            let (a, b) = (
                content("the fork", f).await?,
                content("the source", src).await?,
            );
            if fork.independent && (a != "fork" || b != "source") {
                return fail(format!(
                    "after writing on both sides the fork has {a:?} and the source {b:?}"
                ));
            }
            Ok(())
        });
        if let Some(id) = saved
            && l.state.snapshot.is_some_and(|s| s.delete)
        {
            let _ = p.delete_snapshot(&id).await;
        }
        r
    })
}

/// Pause then resume, for each kind the provider pauses with: files kept, a background process
/// still running exactly where the kind keeps memory; `list` says paused; an exec while paused
/// resumes or is a typed error, as declared, never a hang.
pub(crate) async fn pause_resume(t: &Target) -> CaseResult {
    let (p, l) = provider(t)?;
    let Some(pause) = l.state.pause else {
        return na("state.pause = None");
    };
    let s = create(t, p, spec(t, &l)).await?;
    with!(s, |s| {
        for &kind in pause.kinds {
            out("writing", s, &format!("printf kept > {FILE}")).await?;
            let pid = out(
                "starting a background process",
                s,
                "sleep 300 >/dev/null 2>&1 </dev/null & echo $!",
            )
            .await?;
            let pid = pid.trim().to_owned();
            let state = p
                .pause(s.id(), Some(kind))
                .await
                .or_else(|e| fail(format!("pause keeping {kind} failed: {e}")))?;
            if !matches!(state, SandboxState::Paused | SandboxState::Stopped) {
                return fail(format!("pause keeping {kind} left the sandbox {state}"));
            }
            p.pause(s.id(), Some(kind))
                .await
                .or_else(|e| fail(format!("pausing a paused sandbox failed: {e}")))?;
            if l.list {
                let listed = p
                    .list(&execseam_core::ListFilter::new())
                    .await
                    .or_else(|e| fail(format!("list failed: {e}")))?;
                match listed.iter().find(|i| i.id == s.id()) {
                    Some(i) if i.state == state => {}
                    Some(i) => {
                        return fail(format!(
                            "list says {} for a sandbox paused as {state}",
                            i.state
                        ));
                    }
                    None => return fail("the paused sandbox is not listed"),
                }
            }
            match pause.while_paused {
                WhilePaused::Refused => {
                    let r = tokio::time::timeout(Duration::from_secs(30), s.exec(sh("true")))
                        .await
                        .or_else(|_| {
                            fail("an exec on a paused sandbox did not answer within 30 s")
                        })?;
                    match r {
                        Err(e)
                            if e.kind() == ErrorKind::Conflict
                                && e.sandbox_state() == Some(state) => {}
                        Err(e) => {
                            return fail(format!(
                                "an exec on a paused sandbox: {:?} (state {:?}) instead of Conflict with the sandbox's state: {e}",
                                e.kind(),
                                e.sandbox_state()
                            ));
                        }
                        Ok(o) => {
                            return fail(format!(
                                "an exec on a paused sandbox gave Ok({:?})",
                                o.exit
                            ));
                        }
                    }
                    p.resume(s.id())
                        .await
                        .or_else(|e| fail(format!("resume failed: {e}")))?;
                }
                WhilePaused::Resumes => {
                    // The exec resumes the sandbox; resume after is a no-op.
                    out("an exec on a paused sandbox (it resumes)", s, "true").await?;
                    p.resume(s.id())
                        .await
                        .or_else(|e| fail(format!("resume of a resumed sandbox failed: {e}")))?;
                }
            }
            // `Scope::Volumes` keeps only the provider's volumes, where the suite cannot put a
            // file (Kubernetes: the template's `volumeClaimTemplates`, if any).
            if pause.scope != Scope::Volumes {
                let got = content("reading after resume", s).await?;
                if got != "kept" {
                    return fail(format!(
                        "after pause ({kind}) and resume the file has {got:?}"
                    ));
                }
            }
            let alive = out(
                "checking the background process",
                s,
                &format!("kill -0 {pid} 2>/dev/null && echo alive || echo gone"),
            )
            .await?;
            let want = if kind.keeps_processes() {
                "alive"
            } else {
                "gone"
            };
            if alive.trim() != want {
                return fail(format!(
                    "after pause keeping {kind} and resume the background process is {}, want {want}",
                    alive.trim()
                ));
            }
            let _ = out(
                "ending the background process",
                s,
                &format!("kill {pid} 2>/dev/null; true"),
            )
            .await;
        }
        Ok(())
    })
}

/// The source is in the state the capability declares after a snapshot: running (a background
/// process still there) for `Running`/`PausedBriefly`, stopped for `Stopped`, processes gone for
/// `ProcessesKilled`.
pub(crate) async fn snapshot_source_after(t: &Target) -> CaseResult {
    let (p, l) = provider(t)?;
    let Some(snap) = l.state.snapshot else {
        return na("state.snapshot = None");
    };
    let s = create(t, p, spec(t, &l)).await?;
    with!(s, |s| {
        let pid = out(
            "starting a background process",
            s,
            "sleep 300 >/dev/null 2>&1 </dev/null & echo $!",
        )
        .await?;
        let pid = pid.trim().to_owned();
        let taken = p
            .snapshot(s.id(), SnapshotRequest::new().allow_stop(true))
            .await
            .or_else(|e| fail(format!("snapshot failed: {e}")))?;
        let r = async {
            match snap.source_after {
                SourceAfter::Stopped => {
                    if taken.source_state != SandboxState::Stopped {
                        return fail(format!(
                            "declared Stopped, the snapshot reports {}",
                            taken.source_state
                        ));
                    }
                    if l.list {
                        let listed = p
                            .list(&execseam_core::ListFilter::new())
                            .await
                            .or_else(|e| fail(format!("list failed: {e}")))?;
                        if let Some(i) = listed.iter().find(|i| i.id == s.id())
                            && i.state != SandboxState::Stopped
                        {
                            return fail(format!("declared Stopped, list says {}", i.state));
                        }
                    }
                    Ok(())
                }
                after => {
                    let alive = out(
                        "checking the background process",
                        s,
                        &format!("kill -0 {pid} 2>/dev/null && echo alive || echo gone"),
                    )
                    .await?;
                    let want = if after == SourceAfter::ProcessesKilled {
                        "gone"
                    } else {
                        "alive"
                    };
                    if alive.trim() != want {
                        return fail(format!(
                            "declared {after:?}, the background process is {}",
                            alive.trim()
                        ));
                    }
                    Ok(())
                }
            }
        }
        .await;
        if snap.delete {
            let _ = p.delete_snapshot(&taken.snapshot.id).await;
        }
        let _ = s.exec(sh(&format!("kill {pid} 2>/dev/null; true"))).await;
        r
    })
}

/// Delete a snapshot: a second delete is `Ok`, it is no longer listed, and creating from it is
/// a typed `NotFound`.
pub(crate) async fn snapshot_delete(t: &Target) -> CaseResult {
    let (p, l) = provider(t)?;
    let Some(snap) = l.state.snapshot else {
        return na("state.snapshot = None");
    };
    if !snap.delete {
        return na("state.snapshot.delete = false");
    }
    let s = create(t, p, spec(t, &l)).await?;
    with!(s, |s| {
        out("writing", s, &format!("printf x > {FILE}")).await?;
        let taken = p
            .snapshot(s.id(), SnapshotRequest::new().allow_stop(true))
            .await
            .or_else(|e| fail(format!("snapshot failed: {e}")))?;
        let id = taken.snapshot.id;
        if snap.list {
            let listed = p
                .list_snapshots(Some(s.id()))
                .await
                .or_else(|e| fail(format!("list_snapshots failed: {e}")))?;
            if !listed.iter().any(|i| i.id == id) {
                let ids: Vec<_> = listed.iter().map(|i| i.id.as_str()).collect();
                return fail(format!(
                    "snapshot {id} is not in list_snapshots of its source: {ids:?}"
                ));
            }
        }
        for what in ["delete", "a second delete"] {
            p.delete_snapshot(&id)
                .await
                .or_else(|e| fail(format!("{what} of snapshot {id} failed: {e}")))?;
        }
        if snap.list {
            let listed = p
                .list_snapshots(None)
                .await
                .or_else(|e| fail(format!("list_snapshots failed: {e}")))?;
            if listed.iter().any(|i| i.id == id) {
                return fail(format!("deleted snapshot {id} is still listed"));
            }
        }
        if snap.create_from {
            match p.create(spec(t, &l).with_snapshot(id.clone())).await {
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => {
                    return fail(format!(
                        "create from a deleted snapshot: {:?} instead of NotFound: {e}",
                        e.kind()
                    ));
                }
                Ok(sb) => {
                    t.record_created(sb.id());
                    let _ = sb.close().await;
                    return fail("create from a deleted snapshot succeeded");
                }
            }
        }
        Ok(())
    })
}

/// Expose a port where a small HTTP server listens in the sandbox and fetch it through the URL
/// from this host; unexpose where the provider has it.
pub(crate) async fn expose_port(t: &Target) -> CaseResult {
    let (p, l) = provider(t)?;
    let Some(e) = l.state.expose else {
        return na("state.expose = None");
    };
    let port = match e.only {
        Some(p) => p,
        None => free_port(e.ports)?,
    };
    let mut sp = spec(t, &l);
    if matches!(e.when, PortsWhen::AtCreate | PortsWhen::AtCreateOrUpdate) {
        sp = sp.with_port(port);
    }
    let s = create(t, p, sp).await?;
    with!(s, |s| {
        let marker = format!("served-{}", t.suite_id());
        out(
            "writing the page",
            s,
            &format!("mkdir -p execseam-www && printf %s '{marker}' > execseam-www/index.html"),
        )
        .await?;
        // nohup where the image has it (busybox images often do not).
        let server = format!(
            "cd execseam-www && n=$(command -v nohup || true) && \
             if command -v python3 >/dev/null; then $n python3 -m http.server {port} >/dev/null 2>&1 </dev/null & \
             elif command -v busybox >/dev/null; then $n busybox httpd -f -p {port} >/dev/null 2>&1 </dev/null & \
             else echo none; fi"
        );
        if out("starting an HTTP server", s, &server).await?.trim() == "none" {
            return na("no python3 or busybox in the sandbox to serve HTTP");
        }
        let exposed = p
            .expose(s.id(), port)
            .await
            .or_else(|err| fail(format!("expose({port}) failed: {err}")))?;
        if exposed.port != port {
            return fail(format!("expose({port}) answered port {}", exposed.port));
        }
        let headers: Vec<(String, String)> = exposed
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), v.expose().to_owned()))
            .collect();
        // The server needs a moment to listen.
        let mut last = String::new();
        let mut body = None;
        for _ in 0..100 {
            match crate::http::get(&exposed.url, &headers).await {
                Ok((200, b)) => {
                    body = Some(b);
                    break;
                }
                Ok((status, b)) => {
                    last = format!("HTTP {status}: {}", show(&b[..b.len().min(200)]))
                }
                Err(err) => last = err,
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let Some(body) = body else {
            return fail(format!("GET {} never answered 200: {last}", exposed.url));
        };
        if body != marker.as_bytes() {
            return fail(format!("GET {} gave {}", exposed.url, show(&body)));
        }
        if e.list {
            let listed = p
                .exposed(s.id())
                .await
                .or_else(|err| fail(format!("exposed failed: {err}")))?;
            if !listed.iter().any(|x| x.port == port) {
                return fail(format!("port {port} is not in the exposed list"));
            }
        }
        if e.unexpose {
            p.unexpose(s.id(), port)
                .await
                .or_else(|err| fail(format!("unexpose failed: {err}")))?;
            p.unexpose(s.id(), port)
                .await
                .or_else(|err| fail(format!("a second unexpose failed: {err}")))?;
            if let Ok((200, _)) = crate::http::get(&exposed.url, &headers).await {
                return fail(format!(
                    "GET {} still answers 200 after unexpose",
                    exposed.url
                ));
            }
        }
        let _ = s
            .exec(sh(
                "pkill -f 'http.server' 2>/dev/null; pkill -f 'busybox httpd' 2>/dev/null; true",
            ))
            .await;
        Ok(())
    })
}

/// A port in `range` that nothing on this host listens on now (the emulated sandboxes and the
/// local adapter share this host's network).
fn free_port(range: (u16, u16)) -> Result<u16, Outcome> {
    for _ in 0..50 {
        let l = std::net::TcpListener::bind("127.0.0.1:0")
            .or_else(|e| fail(format!("cannot pick a free port: {e}")))?;
        let port = l.local_addr().map(|a| a.port()).unwrap_or(0);
        if port >= range.0 && port <= range.1 {
            return Ok(port);
        }
    }
    na(format!(
        "no free port of this host in {}..={}",
        range.0, range.1
    ))
}
