//! Sandbox lifecycle, gated on the provider's `LifecycleCapabilities`, and background children.
//!
//! Every sandbox a case creates carries the label `execseam-suite` = a value unique to the run,
//! is recorded, and is destroyed by the case; `lifecycle-nothing-left` (the last case) asks the
//! emulator that none is left.

use std::time::{Duration, Instant};

use execseam_core::{
    ErrorKind, Exec, LifecycleCapabilities, ListFilter, Provider, Sandbox, SandboxSpec,
};

use super::{fail, na, sh, show};
use crate::{CaseResult, Outcome, Target};

/// The label every sandbox the suite creates carries.
pub(crate) const SUITE_LABEL: &str = "execseam-suite";

/// The target's provider and its lifecycle capabilities; n.a. without a provider.
pub(super) fn provider(t: &Target) -> Result<(&dyn Provider, LifecycleCapabilities), Outcome> {
    match &t.provider {
        Some(p) => Ok((p.as_ref(), p.lifecycle())),
        None => na("the target has no provider (lifecycle not wired)"),
    }
}

fn need(l: &LifecycleCapabilities, ops: &[&str]) -> CaseResult {
    for op in ops {
        let has = match *op {
            "create" => l.create,
            "connect" => l.connect,
            "list" => l.list,
            "destroy" => l.destroy,
            "labels" => l.spec.labels,
            _ => unreachable!("{op}"),
        };
        if !has {
            let field = if *op == "labels" {
                "lifecycle.spec.labels".to_owned()
            } else {
                format!("lifecycle.{op}")
            };
            return na(format!("{field} = false"));
        }
    }
    Ok(())
}

/// A spec with the suite's label (when the provider has labels).
pub(super) fn spec(t: &Target, l: &LifecycleCapabilities) -> SandboxSpec {
    let spec = SandboxSpec::new();
    if l.spec.labels {
        spec.with_label(SUITE_LABEL, t.suite_id())
    } else {
        spec
    }
}

/// Creates a sandbox from `spec` (failing after 120 s without an answer) and records it.
pub(super) async fn create_recorded(
    t: &Target,
    p: &dyn Provider,
    spec: SandboxSpec,
) -> Result<Box<dyn Sandbox>, Outcome> {
    let s = tokio::time::timeout(Duration::from_secs(120), p.create(spec))
        .await
        .or_else(|_| fail("create did not answer within 120 s"))?
        .or_else(|e| fail(format!("create failed: {e}")))?;
    t.record_created(s.id());
    Ok(s)
}

/// [`create_recorded`], and the sandbox must be owned (the handle that created it closes it).
async fn create(
    t: &Target,
    p: &dyn Provider,
    spec: SandboxSpec,
) -> Result<Box<dyn Sandbox>, Outcome> {
    let s = create_recorded(t, p, spec).await?;
    if !s.owned() {
        return fail(format!("a created sandbox ({}) is not owned", s.id()));
    }
    Ok(s)
}

async fn out_of(what: &str, s: &dyn Exec, script: &str) -> Result<Vec<u8>, Outcome> {
    match s.exec(sh(script)).await {
        Ok(o) if o.exit.success() => Ok(o.stdout.to_vec()),
        Ok(o) => fail(format!(
            "{what}: {script:?} exited {:?}, stderr {}",
            o.exit,
            show(&o.stderr)
        )),
        Err(e) => fail(format!("{what}: {script:?} failed: {e}")),
    }
}

/// An exec in a destroyed sandbox must be a typed NotFound, never Ok and never an exit code.
async fn gone(what: &str, s: &dyn Exec) -> CaseResult {
    let r = tokio::time::timeout(Duration::from_secs(60), s.exec(sh("true")))
        .await
        .or_else(|_| fail(format!("{what}: no answer within 60 s")))?;
    match r {
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => fail(format!(
            "{what}: Err({:?}) instead of NotFound: {e}",
            e.kind()
        )),
        Ok(o) => fail(format!("{what}: Ok({:?}) instead of Err(NotFound)", o.exit)),
    }
}

/// `r`, of an operation (`what`) declared unsupported, must be `Unsupported`.
pub(super) fn unsupported(what: &str, r: Result<(), execseam_core::Error>) -> CaseResult {
    match r {
        Err(e) if e.kind() == ErrorKind::Unsupported => Ok(()),
        Err(e) => fail(format!(
            "{what} is declared unsupported but failed with {:?}: {e}",
            e.kind()
        )),
        Ok(()) => fail(format!("{what} is declared unsupported but succeeded")),
    }
}

pub(crate) async fn declared(t: &Target) -> CaseResult {
    let (p, l) = provider(t)?;
    if p.provider() != t.exec.provider() {
        return fail(format!(
            "the provider is {:?} but the target's adapter is {:?}",
            p.provider(),
            t.exec.provider()
        ));
    }
    if !l.create {
        unsupported("create", p.create(SandboxSpec::new()).await.map(drop))?;
    }
    if !l.connect {
        unsupported(
            "connect",
            p.connect("execseam-no-such-sandbox").await.map(drop),
        )?;
    }
    if !l.list {
        unsupported("list", p.list(&ListFilter::new()).await.map(drop))?;
    }
    if !l.destroy {
        unsupported("destroy", p.destroy("execseam-no-such-sandbox").await)?;
    }
    if l.connect {
        match p.connect(&t.missing_sandbox_id).await {
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => {
                return fail(format!(
                    "connecting to a sandbox that does not exist: {:?} instead of NotFound: {e}",
                    e.kind()
                ));
            }
            // A provider that only connects takes addresses as ids and may not look before
            // the first call (AX: a guest is an address): then that call must fail.
            Ok(s) if !l.create => match s.exec(sh("true")).await {
                Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::Unavailable) => {}
                Err(e) => {
                    return fail(format!(
                        "an exec in a sandbox that does not exist: {:?} instead of NotFound or Unavailable: {e}",
                        e.kind()
                    ));
                }
                Ok(o) => {
                    return fail(format!(
                        "an exec in a sandbox that does not exist gave Ok({:?})",
                        o.exit
                    ));
                }
            },
            Ok(s) => {
                return fail(format!(
                    "connecting to a sandbox that does not exist succeeded ({})",
                    s.id()
                ));
            }
        }
    }
    Ok(())
}

pub(crate) async fn create_exec_destroy(t: &Target) -> CaseResult {
    let (p, l) = provider(t)?;
    need(&l, &["create", "destroy"])?;
    let s = create(t, p, spec(t, &l)).await?;
    let out = out_of("in the new sandbox", s.as_ref(), "printf ok").await?;
    if out != b"ok" {
        return fail(format!("printf ok gave {}", show(&out)));
    }
    s.close()
        .await
        .or_else(|e| fail(format!("close (owned: destroys) failed: {e}")))?;
    gone("exec after destroy", s.as_ref()).await
}

pub(crate) async fn list_by_label(t: &Target) -> CaseResult {
    let (p, l) = provider(t)?;
    need(&l, &["create", "list", "labels", "destroy"])?;
    let s = create(t, p, spec(t, &l)).await?;
    let result = async {
        let mine = p
            .list(&ListFilter::new().with_label(SUITE_LABEL, t.suite_id()))
            .await
            .or_else(|e| fail(format!("list by the suite's label failed: {e}")))?;
        if !mine.iter().any(|i| i.id == s.id()) {
            let ids: Vec<_> = mine.iter().map(|i| i.id.as_str()).collect();
            return fail(format!(
                "sandbox {} (label {SUITE_LABEL}={}) is not in the filtered list {ids:?}",
                s.id(),
                t.suite_id()
            ));
        }
        if let Some(i) = mine.iter().find(|i| i.id == s.id())
            && i.labels.get(SUITE_LABEL).map(String::as_str) != Some(t.suite_id())
        {
            return fail(format!("the listed labels are {:?}", i.labels));
        }
        let other = p
            .list(&ListFilter::new().with_label(SUITE_LABEL, "execseam-another-run"))
            .await
            .or_else(|e| fail(format!("list by another label failed: {e}")))?;
        if other.iter().any(|i| i.id == s.id()) {
            return fail(format!(
                "sandbox {} is listed under a label value it does not carry",
                s.id()
            ));
        }
        Ok(())
    }
    .await;
    let closed = s.close().await;
    result?;
    closed.or_else(|e| fail(format!("close failed: {e}")))
}

pub(crate) async fn connect_sees_files(t: &Target) -> CaseResult {
    let (p, l) = provider(t)?;
    need(&l, &["create", "connect", "destroy"])?;
    let s = create(t, p, spec(t, &l)).await?;
    // A relative path: the default working directory, which a connected handle shares.
    let marker = format!("written-by-the-first-handle-{}", t.suite_id());
    if let Err(o) = out_of(
        "writing through the first handle",
        s.as_ref(),
        &format!("printf %s '{marker}' > execseam-connect"),
    )
    .await
    {
        let _ = s.close().await;
        return Err(o);
    }
    let second = match p.connect(s.id()).await {
        Ok(c) => c,
        Err(e) => {
            let _ = s.close().await;
            return fail(format!("connect({}) failed: {e}", s.id()));
        }
    };
    let check = async {
        if second.owned() {
            return fail("a connected handle is owned (close would destroy the sandbox)");
        }
        if second.id() != s.id() {
            return fail(format!("connect({}) gave id {}", s.id(), second.id()));
        }
        let got = out_of(
            "reading through the connected handle",
            second.as_ref(),
            "cat execseam-connect",
        )
        .await?;
        if got != marker.as_bytes() {
            return fail(format!("the connected handle read {}", show(&got)));
        }
        second
            .close()
            .await
            .or_else(|e| fail(format!("closing the connected handle failed: {e}")))?;
        // Closing a handle that does not own the sandbox leaves it running.
        let again = out_of(
            "the first handle after the connected one closed",
            s.as_ref(),
            "cat execseam-connect",
        )
        .await?;
        if again != marker.as_bytes() {
            return fail("the file is gone after closing the connected handle");
        }
        Ok(())
    }
    .await;
    let closed = s.close().await;
    check?;
    closed.or_else(|e| fail(format!("close failed: {e}")))
}

pub(crate) async fn destroy_idempotent(t: &Target) -> CaseResult {
    let (p, l) = provider(t)?;
    need(&l, &["create", "destroy"])?;
    let s = create(t, p, spec(t, &l)).await?;
    let id = s.id().to_owned();
    for (what, r) in [
        ("the first Sandbox::destroy", s.destroy().await),
        ("a second Sandbox::destroy", s.destroy().await),
        (
            "Provider::destroy of a destroyed sandbox",
            p.destroy(&id).await,
        ),
        ("close after destroy", s.close().await),
    ] {
        if let Err(e) = r {
            return fail(format!("{what} failed: {e}"));
        }
    }
    gone("exec after destroy", s.as_ref()).await
}

pub(crate) async fn unsupported_spec_field(t: &Target) -> CaseResult {
    let (p, l) = provider(t)?;
    need(&l, &["create"])?;
    let s = l.spec;
    let (field, spec) = if !s.idle_timeout {
        (
            "idle_timeout",
            SandboxSpec::new().with_idle_timeout(Duration::from_secs(60)),
        )
    } else if !s.lifetime {
        (
            "lifetime",
            SandboxSpec::new().with_lifetime(Duration::from_secs(600)),
        )
    } else if !s.disk {
        ("disk_mib", SandboxSpec::new().with_disk_mib(1024))
    } else if !s.cpu {
        ("cpu_millis", SandboxSpec::new().with_cpu_millis(1000))
    } else if !s.memory {
        ("memory_mib", SandboxSpec::new().with_memory_mib(512))
    } else if !s.labels {
        ("labels", SandboxSpec::new().with_label("a", "b"))
    } else if !s.env {
        ("env", SandboxSpec::new().with_env("A", "b"))
    } else if !s.image {
        ("image", SandboxSpec::new().with_image("execseam-test"))
    } else {
        // Everything portable is honoured: an unknown provider option must still be refused.
        (
            "an unknown option",
            SandboxSpec::new().with_option("execseam.no-such-option", "x"),
        )
    };
    refused_create(
        t,
        p,
        spec,
        &[ErrorKind::Unsupported, ErrorKind::InvalidConfig],
        &format!("a spec with {field}, which the provider does not honour,"),
    )
    .await
}

/// `made` must be an error of one of `kinds` (`what` made it, in the messages); a sandbox it
/// made anyway is recorded and closed.
pub(super) async fn refused(
    t: &Target,
    made: Result<Box<dyn Sandbox>, execseam_core::Error>,
    kinds: &[ErrorKind],
    what: &str,
) -> CaseResult {
    match made {
        Err(e) if kinds.contains(&e.kind()) => Ok(()),
        Err(e) => fail(format!(
            "{what} failed with {:?} instead of {kinds:?}: {e}",
            e.kind()
        )),
        Ok(s) => {
            t.record_created(s.id());
            let _ = s.close().await;
            fail(format!("{what} made a sandbox"))
        }
    }
}

/// A create from `spec` (`what`, in the messages) must fail with one of `kinds`, and leave the
/// emulator's sandbox count as it was; a sandbox it made anyway is recorded and closed.
pub(super) async fn refused_create(
    t: &Target,
    p: &dyn Provider,
    spec: SandboxSpec,
    kinds: &[ErrorKind],
    what: &str,
) -> CaseResult {
    let before = t.live_sandboxes.as_ref().map(|c| c());
    refused(t, p.create(spec).await, kinds, what).await?;
    let after = t.live_sandboxes.as_ref().map(|c| c());
    if before != after {
        return fail(format!(
            "the refused create changed the emulator's sandbox count ({before:?} -> {after:?})"
        ));
    }
    Ok(())
}

pub(crate) async fn background_child(t: &Target) -> CaseResult {
    if let Some(why) = &t.exit_waits_for_children {
        return na(format!(
            "the provider's exit waits for the output's holders: {why}"
        ));
    }
    let pidfile = t.path("execseam-background.pid");
    let script = format!("sleep 5 & echo $! > '{pidfile}'; echo started");
    let start = Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(30), t.exec.exec(sh(&script)))
        .await
        .or_else(|_| fail("no answer within 30 s"))?;
    let took = start.elapsed();
    let out = r.or_else(|e| fail(format!("Err instead of Ok: {e}")))?;
    if out.exit != execseam_core::Exit::Code(0) || out.stdout.as_ref() != b"started\n" {
        return fail(format!(
            "got exit {:?}, stdout {}, stderr {}; want exit 0 and \"started\\n\"",
            out.exit,
            show(&out.stdout),
            show(&out.stderr)
        ));
    }
    if took >= Duration::from_millis(3500) {
        return fail(format!(
            "took {} ms: the exit waited for the background child (its exit is the command's own)",
            took.as_millis()
        ));
    }
    if t.children_end_with_the_command.is_some() {
        // Each execution has a sandbox of its own: the child must be gone with it.
        let check = format!(
            "p=$(cat '{pidfile}' 2>/dev/null) || exit 0; rm -f '{pidfile}'; ! kill -0 \"$p\" 2>/dev/null"
        );
        return match t.exec.exec(sh(&check)).await {
            Ok(o) if o.exit.success() => Ok(()),
            Ok(o) => fail(format!(
                "the background child outlived its execution, which was declared to end it (exit {:?})",
                o.exit
            )),
            Err(e) => fail(format!("checking the background child failed: {e}")),
        };
    }
    // The child keeps running (the command's exit does not kill it); then kill it.
    let check = format!(
        "p=$(cat '{pidfile}') && kill -0 \"$p\" && kill \"$p\"; r=$?; rm -f '{pidfile}'; exit $r"
    );
    match t.exec.exec(sh(&check)).await {
        Ok(o) if o.exit.success() => Ok(()),
        Ok(o) => fail(format!(
            "the background child is not running after the command returned (exit {:?}, stderr {})",
            o.exit,
            show(&o.stderr)
        )),
        Err(e) => fail(format!("checking the background child failed: {e}")),
    }
}

pub(crate) async fn nothing_left(t: &Target) -> CaseResult {
    let created = t.created();
    if created.is_empty() {
        return na("the suite created no sandbox (no create capability, or no provider)");
    }
    let (p, l) = provider(t)?;
    if let Some(count) = &t.live_sandboxes
        && let Some(baseline) = t.baseline()
    {
        let now = count();
        if now > baseline {
            return fail(format!(
                "the emulator holds {now} sandboxes, {baseline} before the suite's own (created: {created:?})"
            ));
        }
    }
    if l.list {
        let filter = if l.spec.labels {
            ListFilter::new().with_label(SUITE_LABEL, t.suite_id())
        } else {
            ListFilter::new()
        };
        let listed = p
            .list(&filter)
            .await
            .or_else(|e| fail(format!("list failed: {e}")))?;
        let left: Vec<_> = listed
            .iter()
            .filter(|i| created.contains(&i.id))
            .map(|i| i.id.clone())
            .collect();
        if !left.is_empty() {
            return fail(format!(
                "sandboxes the suite created are still listed: {left:?}"
            ));
        }
    } else if t.live_sandboxes.is_none() {
        return na("neither list nor an emulator count can tell what is left");
    }
    Ok(())
}
