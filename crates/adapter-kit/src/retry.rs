//! Retry classes, decided once for every adapter.
//!
//! Whether a failed request may be retried depends on how far the exec had got ([`Stage`]), how
//! far the request got ([`Sent`]) and, for an answer, whether the provider's edge gave it before
//! forwarding the request ([`Edge`], per provider, from evidence):
//!
//! | | [`Sent::No`] (never left: connect refused, DNS, TLS) | [`Sent::Maybe`] (may have reached the server) |
//! |---|---|---|
//! | [`Stage::Before`] (a read, a kill, an overwrite, a delete, before or outside a command) | `Safe` | `Safe` |
//! | [`Stage::Submit`] (submitting a command, creating a sandbox, sending stdin) | `Safe` | `Unsafe`: it may have run |
//! | [`Stage::After`] (following the output, polling, reading the exit) | `Unsafe` | `Unsafe` |
//!
//! **After the submit, nothing is `Safe`.** Once the request that submits a command may have
//! reached the server, every later failure of that exec (following its log, polling its status,
//! reading its exit, a 429 on any of them) means the command may be running: retrying the exec
//! would run it twice. [`Stage::After`] says so; [`after_submit`] applies it to an error.
//!
//! [`http_status`], [`grpc_status`] and [`no_answer`] give the default kind and class; an adapter
//! overrides them only where its provider documents something else, and says so in its docs.
//!
//! `Retry-After`: [`parse_retry_after`] reads it (seconds, fractional seconds or an HTTP-date);
//! [`within_cap`] decides whether an adapter may wait for it on its own (at most
//! [`MAX_RETRY_AFTER`]) or must fail at once with the delay in the error for the caller.

use std::time::{Duration, SystemTime};

use execseam_core::{Deadline, Error, ErrorKind, Retry};

/// What repeating a request could do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Effect {
    /// Nothing new: a read, a signal, closing stdin, overwriting a file, a delete.
    Idempotent,
    /// Something again: submitting a command (it may run twice), creating a sandbox, sending
    /// stdin bytes.
    NonIdempotent,
}

/// How far a failed request got.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Sent {
    /// It never left this host: the connection was refused or never made.
    No,
    /// It may have reached the server (a timeout, a reset, a cut or malformed answer, an error
    /// status after acceptance).
    Maybe,
}

/// Where a request stands relative to the command it serves: the one "where did it fail"
/// vocabulary of every adapter (see the [module docs](self) for the retry class each gives).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    /// Before the command is submitted, or outside any command, with a request that is safe to
    /// repeat: a lookup, a read, a kill, an overwrite, a delete. Nothing new runs if it is sent
    /// twice.
    Before,
    /// The request that submits a command (or creates a sandbox, or sends stdin bytes): once it
    /// may have reached the server, repeating it could do it twice.
    Submit,
    /// After the submit: following the output, polling the status, reading the exit, stdin. The
    /// command may be running whatever this request did, so no failure is `Safe`.
    After,
}

impl Stage {
    /// What repeating the request itself could do.
    pub fn effect(self) -> Effect {
        match self {
            Stage::Before => Effect::Idempotent,
            Stage::Submit | Stage::After => Effect::NonIdempotent,
        }
    }

    /// The retry class of a request at this stage that got no answer (see the
    /// [module docs](self)).
    pub fn retry(self, sent: Sent) -> Retry {
        self.settle(retry_class(self.effect(), sent))
    }

    /// `retry` as it stands at this stage: after the submit, `Safe` becomes `Unsafe`.
    pub fn settle(self, retry: Retry) -> Retry {
        match self {
            Stage::After => after_submit_class(retry),
            Stage::Before | Stage::Submit => retry,
        }
    }

    /// True once the command may have been submitted (a failure can mean it ran).
    pub fn submitted(self) -> bool {
        !matches!(self, Stage::Before)
    }
}

impl From<Effect> for Stage {
    fn from(effect: Effect) -> Stage {
        match effect {
            Effect::Idempotent => Stage::Before,
            Effect::NonIdempotent => Stage::Submit,
        }
    }
}

/// One call to a provider, as its errors name it: the provider, the operation (`"exec"`,
/// `"create"`, …) and the [`Stage`] it stands at. Every adapter's "where did it fail" context.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Call {
    /// The provider's name.
    pub provider: &'static str,
    /// The operation.
    pub operation: &'static str,
    /// Where it stands.
    pub stage: Stage,
}

impl Call {
    /// `operation` of `provider` at `stage`.
    pub const fn new(provider: &'static str, operation: &'static str, stage: Stage) -> Call {
        Call {
            provider,
            operation,
            stage,
        }
    }

    /// The same call at another stage.
    #[must_use]
    pub const fn at(self, stage: Stage) -> Call {
        Call { stage, ..self }
    }

    /// An error of this call, with [`Retry::Never`] (set the class with `with_retry`).
    pub fn error(&self, kind: ErrorKind, message: impl Into<String>) -> Error {
        Error::new(kind, message)
            .with_provider(self.provider)
            .with_operation(self.operation)
    }

    /// An answer body over `limit` bytes: [`ErrorKind::OutputLimit`], `Never` before the submit
    /// (repeating gets the same answer), `Unsafe` from it on.
    pub fn body_too_large(&self, limit: usize) -> Error {
        self.error(
            ErrorKind::OutputLimit,
            format!("the answer exceeds the {limit}-byte limit"),
        )
        .with_retry(if self.stage.submitted() {
            Retry::Unsafe
        } else {
            Retry::Never
        })
    }

    /// An answer body that did not end within `within`: [`NoAnswer::Timeout`].
    pub fn body_too_late(&self, within: Duration) -> Error {
        self.no_answer(
            NoAnswer::Timeout,
            format!("the answer did not end within {}ms", within.as_millis()),
        )
    }

    /// A malformed or truncated answer to this call: [`ErrorKind::Protocol`], `Unsafe` as
    /// [`Error::protocol`] (a malformed answer says nothing about what ran; an adapter whose
    /// provider proves otherwise sets the class).
    pub fn protocol(&self, message: impl Into<String>) -> Error {
        Error::protocol(message)
            .with_provider(self.provider)
            .with_operation(self.operation)
    }

    /// This call got no answer: [`no_answer`]'s kind and class, and `message`.
    pub fn no_answer(&self, what: NoAnswer, message: impl Into<String>) -> Error {
        let (kind, retry) = no_answer(what, self.stage);
        self.error(kind, message).with_retry(retry)
    }

    /// This call's configuration was wrong: [`ErrorKind::InvalidConfig`].
    pub fn invalid_config(&self, message: impl Into<String>) -> Error {
        self.error(ErrorKind::InvalidConfig, message)
    }
}

/// The retry class of a failure, from [`Effect`] and [`Sent`] (see the [module docs](self)).
pub fn retry_class(effect: Effect, sent: Sent) -> Retry {
    match (sent, effect) {
        (Sent::No, _) | (Sent::Maybe, Effect::Idempotent) => Retry::SAFE,
        (Sent::Maybe, Effect::NonIdempotent) => Retry::Unsafe,
    }
}

/// The retry class of a failure after the command was (maybe) submitted: `Safe` becomes
/// `Unsafe` (the command may be running, so repeating the exec could run it twice); `Never`
/// and `Unsafe` stay.
pub fn after_submit_class(retry: Retry) -> Retry {
    match retry {
        Retry::Safe { .. } => Retry::Unsafe,
        other => other,
    }
}

/// `error` with its retry class passed through [`after_submit_class`]: for every failure of an
/// exec after its submit request may have reached the server (log follow, status poll, exit
/// read, stdin), whatever the failed request itself was.
pub fn after_submit(error: Error) -> Error {
    let retry = after_submit_class(error.retry());
    error.with_retry(retry)
}

/// `error` of a request that is idempotent by construction (a lock in the sandbox, a write by
/// offset, an id the caller chose): `Unsafe` becomes `Safe`, as repeating it cannot run
/// anything twice; `Never` and `Safe` stay.
pub fn repeatable(error: Error) -> Error {
    if error.retry() == Retry::Unsafe {
        error.with_retry(Retry::SAFE)
    } else {
        error
    }
}

/// True if a failure of a request with this `effect` could mean the command ran.
pub fn may_have_run(effect: Effect, sent: Sent) -> bool {
    retry_class(effect, sent) == Retry::Unsafe
}

/// What a provider's edge (its gateway, rate limiter or proxy) answers **before** it forwards a
/// request: a status listed here proves that the request never reached the sandbox, so even a
/// submit that got it may be retried (`Safe`, with the `Retry-After`). Any other status at
/// [`Stage::Submit`] means the command may have run.
///
/// Per provider, as data, with the evidence: a gateway that forwards and then answers 429 or 503
/// (some do) must not be listed, or a retrying caller runs the command twice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Edge {
    /// The statuses the edge answers only before forwarding.
    pub before_forwarding: &'static [u16],
    /// Where that comes from (a document, an SDK's source, an observation), or why it is
    /// assumed.
    pub evidence: &'static str,
}

impl Edge {
    /// A 429 is answered before anything runs. Only for an answer whose evidence is known: the
    /// provider's own signed refusal (its body or headers recognised), or a request that
    /// cannot run anything by construction (Northflank's upgrade: the command travels after
    /// the 101). A bare 429 proves nothing: a gateway may forward and then answer it
    /// (issue 38).
    pub const RATE_LIMIT_FIRST: Edge = Edge {
        before_forwarding: &[429],
        evidence: "the answer is the provider's own refusal, or nothing could have run",
    };

    /// Nothing is known to be answered before forwarding.
    pub const NONE: Edge = Edge {
        before_forwarding: &[],
        evidence: "none",
    };

    /// True if `status` proves the request was not forwarded.
    pub fn refused_before_forwarding(&self, status: u16) -> bool {
        self.before_forwarding.contains(&status)
    }
}

/// The default kind and retry class of an HTTP error status at `stage`, with no evidence
/// about the edge ([`Edge::NONE`]); see [`http_status_at`]. A 429 or 503 at
/// [`Stage::Submit`] is `Unsafe`: a gateway may have forwarded the command and then answered
/// it. An adapter that recognises its provider's own pre-forward refusal passes the edge
/// that says so to [`http_status_at`] (or [`signed`]).
pub fn http_status(
    status: u16,
    stage: impl Into<Stage>,
    retry_after: Option<Duration>,
) -> (ErrorKind, Retry) {
    http_status_at(status, stage.into(), retry_after, &Edge::NONE)
}

/// [`http_status_at`] for an answer that the adapter recognised (`yes`) as its provider's own
/// refusal before forwarding (a body or header only that edge writes), or not.
pub fn signed(
    status: u16,
    stage: impl Into<Stage>,
    retry_after: Option<Duration>,
    yes: bool,
) -> (ErrorKind, Retry) {
    let edge = Edge {
        before_forwarding: if yes { &[429, 502, 503] } else { &[] },
        evidence: "the provider's own refusal, recognised in the answer",
    };
    http_status_at(status, stage.into(), retry_after, &edge)
}

/// The default kind and retry class of an HTTP error status. `retry_after` is the parsed
/// `Retry-After` ([`parse_retry_after`]).
///
/// Rejections (4xx) were refused before anything ran: `Never` (a 408 may be retried). A status
/// the provider's `edge` answers before forwarding is `Safe` at any stage but
/// [`Stage::After`]; server failures (5xx), 408 and a 429 without that evidence depend on the
/// stage: a submit may have run.
pub fn http_status_at(
    status: u16,
    stage: Stage,
    retry_after: Option<Duration>,
    edge: &Edge,
) -> (ErrorKind, Retry) {
    let kind = match status {
        400 | 413 | 414 | 422 => ErrorKind::InvalidCommand,
        401 => ErrorKind::Unauthenticated,
        403 => ErrorKind::PermissionDenied,
        404 | 410 => ErrorKind::NotFound,
        405 | 501 => ErrorKind::Unsupported,
        408 => ErrorKind::Timeout(Deadline::Request),
        409 | 412 | 423 => ErrorKind::Conflict,
        429 => ErrorKind::RateLimited,
        502 | 503 => ErrorKind::Unavailable,
        504 => ErrorKind::Timeout(Deadline::Unknown),
        _ => ErrorKind::Internal,
    };
    let with_after = |retry: Retry| match retry {
        Retry::Safe { .. } => Retry::Safe { after: retry_after },
        other => other,
    };
    let retry = if edge.refused_before_forwarding(status) {
        stage.settle(Retry::Safe { after: retry_after })
    } else {
        match status {
            408 | 429 | 500..=599 if !matches!(status, 501) => with_after(stage.retry(Sent::Maybe)),
            _ => Retry::Never,
        }
    };
    (kind, retry)
}

/// The default kind and retry class of a gRPC (or Connect) status code number at `stage`.
/// `RESOURCE_EXHAUSTED` (8) is taken as the edge's refusal before forwarding.
pub fn grpc_status(code: i32, stage: impl Into<Stage>) -> (ErrorKind, Retry) {
    let stage = stage.into();
    let sent = stage.retry(Sent::Maybe);
    match code {
        1 => (ErrorKind::Cancelled, sent),
        3 | 11 => (ErrorKind::InvalidCommand, Retry::Never),
        4 => (ErrorKind::Timeout(Deadline::Unknown), sent),
        5 => (ErrorKind::NotFound, Retry::Never),
        6 | 9 => (ErrorKind::Conflict, Retry::Never),
        7 => (ErrorKind::PermissionDenied, Retry::Never),
        8 => (ErrorKind::RateLimited, stage.settle(Retry::SAFE)),
        10 => (ErrorKind::Conflict, sent),
        12 => (ErrorKind::Unsupported, Retry::Never),
        14 => (ErrorKind::Unavailable, sent),
        15 => (ErrorKind::Protocol, Retry::Unsafe),
        16 => (ErrorKind::Unauthenticated, Retry::Never),
        _ => (ErrorKind::Internal, sent),
    }
}

/// A request that got no (usable) answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NoAnswer {
    /// The connection could not be made: nothing was sent.
    Connect,
    /// Our own request timer fired.
    Timeout,
    /// The connection broke, or the answer (body, stream) was cut.
    Cut,
    /// The answer could not be decoded.
    Malformed,
    /// Anything else after the connection was made.
    Other,
}

impl NoAnswer {
    /// How far the request got.
    pub fn sent(self) -> Sent {
        match self {
            NoAnswer::Connect => Sent::No,
            _ => Sent::Maybe,
        }
    }

    /// The start of a message for it (`cannot connect`, …).
    pub fn describe(self) -> &'static str {
        match self {
            NoAnswer::Connect => "cannot connect",
            NoAnswer::Timeout => "the request timed out",
            NoAnswer::Cut => "the answer was cut off",
            NoAnswer::Malformed => "the answer is malformed",
            NoAnswer::Other => "the connection failed",
        }
    }
}

/// The default kind and retry class of a request that got no answer, at `stage`.
pub fn no_answer(what: NoAnswer, stage: impl Into<Stage>) -> (ErrorKind, Retry) {
    let retry = stage.into().retry(what.sent());
    let kind = match what {
        NoAnswer::Connect | NoAnswer::Cut | NoAnswer::Other => ErrorKind::Unavailable,
        NoAnswer::Timeout => ErrorKind::Timeout(Deadline::Request),
        // A malformed answer says nothing about whether a command ran.
        NoAnswer::Malformed => ErrorKind::Protocol,
    };
    (kind, retry)
}

/// The longest `Retry-After` an adapter waits for on its own (inside one call: a create that
/// the provider asks to repeat later, say). A longer one is not slept: the call fails at once
/// with [`ErrorKind::RateLimited`] and the delay in its [`Retry`], for the caller to decide.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);

/// `Some(after)` if an adapter may wait `after` on its own (at most `cap`); `None` if it must fail
/// at once instead (see [`MAX_RETRY_AFTER`]).
pub fn within_cap(after: Duration, cap: Duration) -> Option<Duration> {
    (after <= cap).then_some(after)
}

/// How long an adapter waits before it repeats a call **on its own** (inside one call: a create
/// the provider asked to repeat later, a transient failure of an idempotent request): the
/// server's `requested` delay when it gave one within [`MAX_RETRY_AFTER`], else `fallback`;
/// `None` when the server asked for longer than the cap: the call must fail at once, its error
/// carrying the delay (`Retry::Safe { after }`) for the caller to decide. Never a clamp: a
/// server that says "in a day" is not asked again in 30 s (issue 38: Modal waited a
/// `retry_after_secs` of 86,400 s in full, Cloudflare slept 3 × 30 s before failing).
pub fn own_retry_wait(requested: Option<Duration>, fallback: Duration) -> Option<Duration> {
    match requested {
        Some(d) => within_cap(d, MAX_RETRY_AFTER),
        None => Some(fallback),
    }
}

/// Parses a `Retry-After` value: delay-seconds (`120`) or an HTTP-date (RFC 9110 §10.2.3),
/// relative to `now`. A date in the past is zero; anything else is `None`. Also takes fractional
/// seconds (`1.5`), which some providers send.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let v = value.trim();
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        return v.parse::<u64>().ok().map(Duration::from_secs);
    }
    if let Ok(secs) = v.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;

    #[test]
    fn an_adapter_waits_only_within_the_cap() {
        let s = Duration::from_secs;
        assert_eq!(own_retry_wait(None, s(1)), Some(s(1)));
        assert_eq!(own_retry_wait(Some(s(3)), s(1)), Some(s(3)));
        assert_eq!(own_retry_wait(Some(s(30)), s(1)), Some(s(30)));
        assert_eq!(own_retry_wait(Some(s(40)), s(1)), None);
        assert_eq!(own_retry_wait(Some(s(86_400)), s(1)), None);
    }

    #[test]
    fn retry_classes() {
        assert_eq!(retry_class(Effect::NonIdempotent, Sent::No), Retry::SAFE);
        assert_eq!(
            retry_class(Effect::NonIdempotent, Sent::Maybe),
            Retry::Unsafe
        );
        assert_eq!(retry_class(Effect::Idempotent, Sent::Maybe), Retry::SAFE);
        assert!(may_have_run(Effect::NonIdempotent, Sent::Maybe));
        assert!(!may_have_run(Effect::Idempotent, Sent::Maybe));
    }

    #[test]
    fn stages_give_the_table() {
        use Stage::*;
        let table = [
            (Before, Sent::No, Retry::SAFE),
            (Before, Sent::Maybe, Retry::SAFE),
            (Submit, Sent::No, Retry::SAFE),
            (Submit, Sent::Maybe, Retry::Unsafe),
            (After, Sent::No, Retry::Unsafe),
            (After, Sent::Maybe, Retry::Unsafe),
        ];
        for (stage, sent, want) in table {
            assert_eq!(stage.retry(sent), want, "{stage:?} {sent:?}");
        }
        assert_eq!(Stage::from(Effect::Idempotent), Before);
        assert_eq!(Stage::from(Effect::NonIdempotent), Submit);
        assert_eq!(After.settle(Retry::Never), Retry::Never);
        assert!(!Before.submitted() && Submit.submitted() && After.submitted());
    }

    #[test]
    fn http_statuses() {
        use Effect::*;
        let after = Some(Duration::from_secs(2));
        // A bare 429 on a submit may follow a forwarded command (issue 38); on a read it is
        // safe to repeat.
        assert_eq!(
            http_status(429, NonIdempotent, after),
            (ErrorKind::RateLimited, Retry::Unsafe)
        );
        assert_eq!(
            http_status(429, Idempotent, after),
            (ErrorKind::RateLimited, Retry::Safe { after })
        );
        assert_eq!(
            signed(429, NonIdempotent, after, true),
            (ErrorKind::RateLimited, Retry::Safe { after })
        );
        assert_eq!(
            signed(503, Stage::Submit, after, true).1,
            Retry::Safe { after }
        );
        assert_eq!(signed(503, Stage::Submit, after, false).1, Retry::Unsafe);
        assert_eq!(signed(429, Stage::After, after, true).1, Retry::Unsafe);
        assert_eq!(
            http_status(503, NonIdempotent, after),
            (ErrorKind::Unavailable, Retry::Unsafe)
        );
        assert_eq!(
            http_status(503, Idempotent, after),
            (ErrorKind::Unavailable, Retry::Safe { after })
        );
        assert_eq!(http_status(404, Idempotent, None).0, ErrorKind::NotFound);
        assert_eq!(
            http_status(401, Idempotent, None),
            (ErrorKind::Unauthenticated, Retry::Never)
        );
        assert_eq!(
            http_status(500, NonIdempotent, None),
            (ErrorKind::Internal, Retry::Unsafe)
        );
        assert_eq!(
            http_status(501, Idempotent, None),
            (ErrorKind::Unsupported, Retry::Never)
        );
        assert_eq!(http_status(302, Idempotent, None).1, Retry::Never);
        // After the submit a 429 is no proof that nothing ran.
        assert_eq!(http_status(429, Stage::After, after).1, Retry::Unsafe);
    }

    #[test]
    fn the_edge_decides_what_a_submit_may_retry() {
        let after = Some(Duration::from_secs(1));
        let edge = Edge {
            before_forwarding: &[429, 503],
            evidence: "test",
        };
        assert_eq!(
            http_status_at(503, Stage::Submit, after, &edge).1,
            Retry::Safe { after }
        );
        assert_eq!(
            http_status_at(429, Stage::Submit, after, &Edge::NONE),
            (ErrorKind::RateLimited, Retry::Unsafe)
        );
        assert_eq!(
            http_status_at(503, Stage::After, after, &edge).1,
            Retry::Unsafe
        );
    }

    #[test]
    fn grpc_and_no_answers() {
        assert_eq!(
            grpc_status(14, Effect::NonIdempotent),
            (ErrorKind::Unavailable, Retry::Unsafe)
        );
        assert_eq!(grpc_status(5, Effect::Idempotent).0, ErrorKind::NotFound);
        assert_eq!(
            grpc_status(16, Effect::Idempotent).0,
            ErrorKind::Unauthenticated
        );
        assert_eq!(grpc_status(8, Stage::After).1, Retry::Unsafe);
        assert_eq!(
            no_answer(NoAnswer::Connect, Effect::NonIdempotent),
            (ErrorKind::Unavailable, Retry::SAFE)
        );
        assert_eq!(
            no_answer(NoAnswer::Connect, Stage::After),
            (ErrorKind::Unavailable, Retry::Unsafe)
        );
        assert_eq!(
            no_answer(NoAnswer::Cut, Effect::NonIdempotent),
            (ErrorKind::Unavailable, Retry::Unsafe)
        );
        assert_eq!(
            no_answer(NoAnswer::Malformed, Effect::NonIdempotent).0,
            ErrorKind::Protocol
        );
    }

    #[test]
    fn retry_after_seconds_and_dates() {
        let now = UNIX_EPOCH + Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
        assert_eq!(
            parse_retry_after(" 120 ", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("1.5", now),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:50:07 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(
            parse_retry_after("Thu, 29 Feb 2024 00:00:00 GMT", UNIX_EPOCH),
            Some(Duration::from_secs(1_709_164_800))
        );
        for bad in [
            "",
            "-1",
            "soon",
            "NaN",
            "inf",
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 32 Nov 1994 08:49:37 GMT",
        ] {
            assert_eq!(parse_retry_after(bad, now), None, "{bad:?}");
        }
    }

    #[test]
    fn waits_are_capped() {
        assert_eq!(
            within_cap(Duration::from_secs(3), MAX_RETRY_AFTER),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            within_cap(Duration::from_secs(86_400), MAX_RETRY_AFTER),
            None
        );
    }

    #[test]
    fn calls_name_their_errors() {
        let call = Call::new("p", "exec", Stage::Submit);
        let e = call.protocol("cut");
        assert_eq!(
            (e.provider(), e.operation(), e.kind(), e.retry()),
            ("p", "exec", ErrorKind::Protocol, Retry::Unsafe)
        );
        assert_eq!(call.at(Stage::Before).protocol("x").retry(), Retry::Unsafe);
        let e = call.no_answer(NoAnswer::Connect, "refused");
        assert_eq!((e.kind(), e.retry()), (ErrorKind::Unavailable, Retry::SAFE));
    }

    #[test]
    fn after_the_submit_nothing_is_safe() {
        let e = Error::new(ErrorKind::RateLimited, "429").with_retry(Retry::Safe {
            after: Some(Duration::from_secs(1)),
        });
        assert_eq!(after_submit(e).retry(), Retry::Unsafe);
        assert_eq!(after_submit_class(Retry::Never), Retry::Never);
        assert_eq!(after_submit_class(Retry::Unsafe), Retry::Unsafe);
    }
}
