//! Fault injection against emulators: every fault gives a typed error with the right retry class,
//! and a cut or malformed answer is never an `Ok`.

use std::time::{Duration, Instant};

use execseam_core::{Command, Error, ErrorKind, Output, Retry};

use super::{expect_err, fail, na, run_ok, same, sh};
use crate::{CaseResult, Fault, Faults, Outcome, Target};

/// Disarms the injector however the case ends.
struct Armed<'a>(&'a dyn Faults);

impl Drop for Armed<'_> {
    fn drop(&mut self) {
        self.0.clear();
    }
}

fn injector(t: &Target) -> Result<&dyn Faults, Outcome> {
    match &t.faults {
        Some(f) => Ok(f.as_ref()),
        None if t.live => na("live run: faults cannot be injected into the real provider"),
        None => na("the target has no fault injector (no emulator)"),
    }
}

/// Injects `fault`, runs `command`, and returns what the adapter said.
async fn under(
    t: &Target,
    fault: Fault,
    command: Command,
) -> Result<Result<Output, Error>, Outcome> {
    let f = injector(t)?;
    if let Err(why) = f.inject(fault) {
        return na(why);
    }
    let _armed = Armed(f);
    tokio::time::timeout(Duration::from_secs(90), t.exec.exec(command))
        .await
        .or_else(|_| fail(format!("no answer within 90 s under {fault:?}")))
}

const ECHO: &str = "printf ran";

pub(crate) async fn rate_limited(t: &Target) -> CaseResult {
    let r = under(
        t,
        Fault::RateLimited {
            retry_after_secs: 3,
        },
        sh(ECHO),
    )
    .await?;
    // Safe with the delay only where the adapter recognises the provider's own refusal before
    // forwarding; a 429 it cannot tell from a gateway's that forwarded first is Unsafe on an
    // exec (issue 38, docs/reliability.md). Never `Never`, never Safe without the delay.
    let want = Retry::Safe {
        after: Some(Duration::from_secs(3)),
    };
    expect_err("429", r, &[ErrorKind::RateLimited], &[want, Retry::Unsafe]).map(drop)
}

pub(crate) async fn server_error(t: &Target) -> CaseResult {
    let r = under(t, Fault::ServerError, sh(ECHO)).await?;
    expect_err(
        "500",
        r,
        &[ErrorKind::Internal, ErrorKind::Unavailable],
        &[Retry::Unsafe],
    )
    .map(drop)
}

pub(crate) async fn unavailable(t: &Target) -> CaseResult {
    let r = under(t, Fault::Unavailable, sh(ECHO)).await?;
    expect_err(
        "503",
        r,
        &[ErrorKind::Unavailable],
        &[Retry::SAFE, Retry::Unsafe],
    )
    .map(drop)
}

pub(crate) async fn reset(t: &Target) -> CaseResult {
    let r = under(t, Fault::ResetBeforeResponse, sh(ECHO)).await?;
    expect_err(
        "connection reset",
        r,
        &[ErrorKind::Unavailable, ErrorKind::Protocol],
        &[Retry::Unsafe],
    )
    .map(drop)
}

pub(crate) async fn stream_cut(t: &Target) -> CaseResult {
    let r = under(
        t,
        Fault::CutBeforeExit,
        sh("printf before; sleep 1; printf after"),
    )
    .await?;
    expect_err(
        "stream cut before the exit",
        r,
        &[ErrorKind::Protocol, ErrorKind::Unavailable],
        &[Retry::Unsafe],
    )
    .map(drop)
}

pub(crate) async fn malformed(t: &Target) -> CaseResult {
    let r = under(t, Fault::MalformedBody, sh(ECHO)).await?;
    expect_err(
        "malformed body",
        r,
        &[ErrorKind::Protocol],
        &[Retry::Unsafe, Retry::Never],
    )
    .map(drop)
}

pub(crate) async fn latency(t: &Target) -> CaseResult {
    let started = Instant::now();
    let delay = Duration::from_millis(700);
    let r = under(
        t,
        Fault::Latency(delay),
        sh("printf slow; printf e >&2; exit 4"),
    )
    .await?;
    let o = r.or_else(|e| fail(format!("a slow answer became an error: {e}")))?;
    same("stdout", &o.stdout, b"slow")?;
    same("stderr", &o.stderr, b"e")?;
    if o.exit != execseam_core::Exit::Code(4) {
        return fail(format!("exit {:?}, want Code(4)", o.exit));
    }
    if started.elapsed() < delay {
        return fail("the latency fault was not applied (answered too fast)");
    }
    Ok(())
}

pub(crate) async fn auth(t: &Target) -> CaseResult {
    let r = under(t, Fault::AuthFailure, sh(ECHO)).await?;
    expect_err(
        "auth failure",
        r,
        &[ErrorKind::Unauthenticated],
        &[Retry::Never],
    )
    .map(drop)
}

pub(crate) async fn no_duplicate(t: &Target) -> CaseResult {
    let f = injector(t)?;
    let Some(before) = f.exec_requests() else {
        return na("the emulator does not count exec requests");
    };
    let marker = t.path("duplicate-marker");
    let r = under(t, Fault::ServerError, sh(&format!("echo x >> '{marker}'"))).await?;
    expect_err(
        "500",
        r,
        &[ErrorKind::Internal, ErrorKind::Unavailable],
        &[Retry::Unsafe],
    )?;
    let after = f.exec_requests().unwrap_or(before);
    if after != before + 1 {
        return fail(format!(
            "{} exec requests reached the emulator for one exec (a retry re-submitted it)",
            after - before
        ));
    }
    let o = run_ok(t, sh(&format!("cat '{marker}' 2>/dev/null; true"))).await?;
    if o.stdout.len() > 2 {
        return fail(format!("the command ran {} times", o.stdout.len() / 2));
    }
    Ok(())
}

pub(crate) async fn sandbox_vanishes(t: &Target) -> CaseResult {
    let r = under(
        t,
        Fault::SandboxVanishes,
        sh("printf start; sleep 5; printf end"),
    )
    .await?;
    expect_err(
        "sandbox vanished mid-command",
        r,
        &[
            ErrorKind::NotFound,
            ErrorKind::Unavailable,
            ErrorKind::Protocol,
        ],
        &[Retry::Unsafe, Retry::Never],
    )
    .map(drop)
}
