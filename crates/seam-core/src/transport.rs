//! Transport helpers shared by every adapter: pure functions over status codes, header values
//! and flags, so each adapter decides retry classes, parses `Retry-After`, flattens and redacts
//! errors, escapes paths and makes ids the same way. No HTTP or gRPC library types appear here.
//!
//! # Retry classes, decided once
//!
//! Whether a failed request may be retried depends on two facts only (as in `object_store`):
//! what repeating it could do ([`Effect`]) and how far it got ([`Sent`]):
//!
//! | | [`Sent::No`] (never left: connect refused, DNS, TLS) | [`Sent::Maybe`] (may have reached the server) |
//! |---|---|---|
//! | [`Effect::Idempotent`] (a read, a kill, an overwrite, a delete) | `Safe` | `Safe` |
//! | [`Effect::NonIdempotent`] (submitting a command, creating a sandbox, sending stdin) | `Safe` | `Unsafe`: the command may have run |
//!
//! [`http_status`], [`grpc_status`] and [`failure`] give the default kind and class for an
//! answer; an adapter overrides them only where its provider documents something else.
//!
//! **After the submit, nothing is `Safe`.** Once the request that submits a command may have
//! reached the server, every later failure of that exec (following its log, polling its status,
//! reading its exit, a 429 on any of them) means the command may be running: retrying the exec
//! would run it twice. Pass those errors through [`after_submit`].
//!
//! # Sizes
//!
//! [`check_size`] rejects a command too large for the provider ([`SizeLimit`]) before any I/O,
//! with [`ErrorKind::InvalidCommand`] and [`Retry::Never`] (retrying fails the same way), and a
//! message naming the limit, never quoting the command.

use std::error::Error as StdError;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::command::Command;
use crate::error::{Deadline, Error, ErrorKind, Retry};

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

/// True if a failure of a request with this `effect` could mean the command ran.
pub fn may_have_run(effect: Effect, sent: Sent) -> bool {
    retry_class(effect, sent) == Retry::Unsafe
}

/// The default kind and retry class of an HTTP error status. `retry_after` is the parsed
/// `Retry-After` ([`parse_retry_after`]).
///
/// Rejections (4xx) were refused before anything ran: `Never` (a 408 or 429 may be retried).
/// Server failures (5xx) depend on the effect: a non-idempotent request may have run.
pub fn http_status(
    status: u16,
    effect: Effect,
    retry_after: Option<Duration>,
) -> (ErrorKind, Retry) {
    let sent = |after: Option<Duration>| match retry_class(effect, Sent::Maybe) {
        Retry::Safe { .. } => Retry::Safe { after },
        other => other,
    };
    match status {
        400 | 413 | 414 | 422 => (ErrorKind::InvalidCommand, Retry::Never),
        401 => (ErrorKind::Unauthenticated, Retry::Never),
        403 => (ErrorKind::PermissionDenied, Retry::Never),
        404 | 410 => (ErrorKind::NotFound, Retry::Never),
        405 | 501 => (ErrorKind::Unsupported, Retry::Never),
        408 => (ErrorKind::Timeout(Deadline::Request), sent(retry_after)),
        409 | 412 | 423 => (ErrorKind::Conflict, Retry::Never),
        429 => (ErrorKind::RateLimited, Retry::Safe { after: retry_after }),
        502 | 503 => (ErrorKind::Unavailable, sent(retry_after)),
        504 => (ErrorKind::Timeout(Deadline::Unknown), sent(retry_after)),
        500..=599 => (ErrorKind::Internal, sent(retry_after)),
        _ => (ErrorKind::Internal, Retry::Never),
    }
}

/// The default kind and retry class of a gRPC (or Connect) status code number.
pub fn grpc_status(code: i32, effect: Effect) -> (ErrorKind, Retry) {
    let sent = retry_class(effect, Sent::Maybe);
    match code {
        1 => (ErrorKind::Cancelled, sent),
        3 | 11 => (ErrorKind::InvalidCommand, Retry::Never),
        4 => (ErrorKind::Timeout(Deadline::Unknown), sent),
        5 => (ErrorKind::NotFound, Retry::Never),
        6 | 9 => (ErrorKind::Conflict, Retry::Never),
        7 => (ErrorKind::PermissionDenied, Retry::Never),
        8 => (ErrorKind::RateLimited, Retry::SAFE),
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
pub enum Failure {
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

/// The default kind and retry class of a [`Failure`].
pub fn failure(failure: Failure, effect: Effect) -> (ErrorKind, Retry) {
    let sent = retry_class(effect, Sent::Maybe);
    match failure {
        Failure::Connect => (ErrorKind::Unavailable, retry_class(effect, Sent::No)),
        Failure::Timeout => (ErrorKind::Timeout(Deadline::Request), sent),
        Failure::Cut | Failure::Other => (ErrorKind::Unavailable, sent),
        // A malformed answer says nothing about whether a command ran.
        Failure::Malformed => (ErrorKind::Protocol, sent),
    }
}

/// Parses a `Retry-After` value: delay-seconds (`120`) or an HTTP-date in the IMF-fixdate form
/// (`Sun, 06 Nov 1994 08:49:37 GMT`), relative to `now`. A date in the past is zero; anything
/// else is `None`. Also takes fractional seconds (`1.5`), which some providers send.
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let v = value.trim();
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        return v.parse::<u64>().ok().map(Duration::from_secs);
    }
    if let Ok(secs) = v.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let at = parse_http_date(v)?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// IMF-fixdate (RFC 9110 §5.6.7): `Sun, 06 Nov 1994 08:49:37 GMT`.
fn parse_http_date(s: &str) -> Option<SystemTime> {
    let (_, rest) = s.split_once(", ")?;
    let mut it = rest.split(' ');
    let day: u64 = it.next()?.parse().ok()?;
    let month = match it.next()? {
        "Jan" => 1,
        "Feb" => 2,
        "Mar" => 3,
        "Apr" => 4,
        "May" => 5,
        "Jun" => 6,
        "Jul" => 7,
        "Aug" => 8,
        "Sep" => 9,
        "Oct" => 10,
        "Nov" => 11,
        "Dec" => 12,
        _ => return None,
    };
    let year: i64 = it.next()?.parse().ok()?;
    let mut hms = it.next()?.split(':');
    let h: u64 = hms.next()?.parse().ok()?;
    let m: u64 = hms.next()?.parse().ok()?;
    let sec: u64 = hms.next()?.parse().ok()?;
    if it.next()? != "GMT" || it.next().is_some() || h > 23 || m > 59 || sec > 60 {
        return None;
    }
    if !(1..=31).contains(&day) {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let (y, mo) = if month <= 2 {
        (year - 1, month + 9)
    } else {
        (year, month - 3)
    };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * mo as i64 + 2) / 5 + day as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = u64::try_from(days).ok()? * 86_400 + h * 3600 + m * 60 + sec;
    UNIX_EPOCH.checked_add(Duration::from_secs(secs))
}

/// An error and its sources on one line (`a: b: c`), a source whose text its parent already
/// contains left out, URLs removed ([`strip_urls`]): transport errors name hosts, sandbox ids and
/// sometimes query strings with argv or env values.
pub fn error_chain(error: &(dyn StdError + 'static)) -> String {
    let mut s = error.to_string();
    let mut cur = error.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !m.is_empty() && !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    strip_urls(&s)
}

/// Replaces every URL (`scheme://…` up to whitespace, a quote or a closing bracket) with
/// `<url>`.
pub fn strip_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        // The scheme: the letters (and + - .) right before "://".
        let start = rest[..i]
            .char_indices()
            .rev()
            .take_while(|(_, c)| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
            .last()
            .map_or(i, |(j, _)| j);
        if start == i {
            out.push_str(&rest[..i + 3]);
            rest = &rest[i + 3..];
            continue;
        }
        out.push_str(&rest[..start]);
        let tail = &rest[i + 3..];
        let end = tail
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ')' | ']' | '>' | '`'))
            .unwrap_or(tail.len());
        out.push_str("<url>");
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// Percent-encodes `segment` for one URL path segment (or a query value): every byte but the
/// RFC 3986 unreserved ones (`A-Z a-z 0-9 - . _ ~`) is escaped, `/` included.
pub fn escape_path_segment(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Linux's `MAX_ARG_STRLEN`: the longest single argv string or environment entry `execve(2)`
/// takes, its NUL included (32 pages).
pub const MAX_ARG_STRLEN: usize = 32 * 4096;

/// A provider's limit on the size of a command's argv and env, checked by [`check_size`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SizeLimit {
    /// argv and env together, in bytes: each string with its NUL (env entries as `KEY=VALUE`),
    /// plus [`SizeLimit::overhead`] per string.
    pub total: usize,
    /// The longest single argv string or env entry (`KEY=VALUE`), its NUL included.
    pub string: usize,
    /// Bytes counted per string on top of its own (`execve`: its 8-byte pointer).
    pub overhead: usize,
    /// Where the limit comes from, quoted in the error (`"Linux execve in the sandbox"`).
    pub source: &'static str,
}

impl SizeLimit {
    /// `execve(2)` on Linux: each string at most [`MAX_ARG_STRLEN`], and `total` in all,
    /// pointers included (the kernel's `ARG_MAX` is a quarter of the stack limit, 2 MiB by
    /// default, shared with the environment the provider's own daemon adds: pass what is
    /// left).
    pub const fn execve(total: usize, source: &'static str) -> SizeLimit {
        SizeLimit {
            total,
            string: MAX_ARG_STRLEN,
            overhead: 8,
            source,
        }
    }
}

impl SizeLimit {
    /// A command that reaches the sandbox as one shell script (`sh -c SCRIPT`, a single
    /// `execve` string). What counts is the script as sent, after the wrapper and the quoting
    /// ([`check_wire`] on it: at most [`MAX_ARG_STRLEN`] with its NUL); on the raw command
    /// [`check_size`] is a fast lower bound (quoting only adds bytes), so `total` is
    /// [`MAX_ARG_STRLEN`]` - 1` for an exact check, never a guessed allowance for the quoting.
    pub const fn script(total: usize, source: &'static str) -> SizeLimit {
        SizeLimit {
            total,
            string: total,
            overhead: 0,
            source,
        }
    }
}

/// The size of a command's argv and env.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommandSize {
    /// The bytes of every string with its NUL (env entries as `KEY=VALUE`).
    pub bytes: usize,
    /// How many strings (argv and env entries).
    pub strings: usize,
    /// The longest one, its NUL included.
    pub longest: usize,
}

/// The size of `command`'s argv and env.
pub fn command_size(command: &Command) -> CommandSize {
    let argv = command.argv().iter().map(|a| a.len() + 1);
    let env = command.env().iter().map(|(k, v)| k.len() + 1 + v.len() + 1);
    argv.chain(env).fold(
        CommandSize {
            bytes: 0,
            strings: 0,
            longest: 0,
        },
        |s, n| CommandSize {
            bytes: s.bytes + n,
            strings: s.strings + 1,
            longest: s.longest.max(n),
        },
    )
}

/// Rejects a command whose argv and env exceed `limit`, before any I/O:
/// [`ErrorKind::InvalidCommand`], [`Retry::Never`], a message with the sizes and the limit
/// (never the command's content).
pub fn check_size(
    provider: &'static str,
    command: &Command,
    limit: &SizeLimit,
) -> Result<(), Error> {
    let size = command_size(command);
    let total = size.bytes + size.strings * limit.overhead;
    let what = if size.longest > limit.string {
        format!(
            "one argv string or env entry takes {} bytes, more than the {} allowed ({})",
            size.longest, limit.string, limit.source
        )
    } else if total > limit.total {
        format!(
            "argv and env take {total} bytes, more than the {} allowed ({})",
            limit.total, limit.source
        )
    } else {
        return Ok(());
    };
    Err(Error::new(
        ErrorKind::InvalidCommand,
        format!("the command is too large: {what}"),
    )
    .with_provider(provider)
    .with_operation("exec"))
}

/// Rejects a command by what the sandbox will `execve`, after the adapter's wrapping and every
/// layer of quoting (the strings as sent: a wrapper script, or the whole argv), before any I/O:
/// each string at most [`MAX_ARG_STRLEN`] with its NUL, and all of them (with
/// [`SizeLimit::overhead`] each) at most [`SizeLimit::total`] where the limit is an `execve`
/// one. [`ErrorKind::InvalidCommand`], [`Retry::Never`], the sizes and the limit in the message,
/// never the content.
pub fn check_wire<S: AsRef<str>>(
    provider: &'static str,
    strings: &[S],
    limit: &SizeLimit,
) -> Result<(), Error> {
    let longest = strings
        .iter()
        .map(|s| s.as_ref().len() + 1)
        .max()
        .unwrap_or(0);
    let total: usize = strings
        .iter()
        .map(|s| s.as_ref().len() + 1 + limit.overhead)
        .sum();
    let what = if longest > MAX_ARG_STRLEN {
        format!(
            "after wrapping and quoting, one string the sandbox runs takes {longest} bytes, more than the {MAX_ARG_STRLEN} allowed ({})",
            limit.source
        )
    } else if limit.overhead > 0 && total > limit.total {
        format!(
            "after wrapping and quoting, the strings the sandbox runs take {total} bytes, more than the {} allowed ({})",
            limit.total, limit.source
        )
    } else {
        return Ok(());
    };
    Err(Error::new(
        ErrorKind::InvalidCommand,
        format!("the command is too large: {what}"),
    )
    .with_provider(provider)
    .with_operation("exec"))
}

/// At most `max` bytes of a provider's body, as text for an error message: invalid UTF-8
/// replaced, control characters escaped, and how much was cut said.
pub fn quote_body(body: &[u8], max: usize) -> String {
    let cut = body.len().min(max);
    let text = String::from_utf8_lossy(&body[..cut]);
    let mut out: String = text.chars().flat_map(char::escape_debug).collect();
    if body.len() > cut {
        out.push_str(&format!("… ({} more bytes)", body.len() - cut));
    }
    out
}

/// 64 unpredictable bits without an RNG dependency: std's randomly keyed hasher over a process
/// counter, the pid and the clock. Good for ids that must not collide (sessions, temp files,
/// idempotency keys), not for secrets.
pub fn random_u64() -> u64 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut h = RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    h.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

/// A random lowercase hex id of `len` characters (see [`random_u64`]).
pub fn random_id(len: usize) -> String {
    let mut s = String::with_capacity(len + 16);
    while s.len() < len {
        s.push_str(&format!("{:016x}", random_u64()));
    }
    s.truncate(len);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn http_statuses() {
        use Effect::*;
        let after = Some(Duration::from_secs(2));
        assert_eq!(
            http_status(429, NonIdempotent, after),
            (ErrorKind::RateLimited, Retry::Safe { after })
        );
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
        assert_eq!(http_status(302, Idempotent, None).1, Retry::Never);
    }

    #[test]
    fn grpc_and_failures() {
        assert_eq!(
            grpc_status(14, Effect::NonIdempotent),
            (ErrorKind::Unavailable, Retry::Unsafe)
        );
        assert_eq!(grpc_status(5, Effect::Idempotent).0, ErrorKind::NotFound);
        assert_eq!(
            grpc_status(16, Effect::Idempotent).0,
            ErrorKind::Unauthenticated
        );
        assert_eq!(
            failure(Failure::Connect, Effect::NonIdempotent),
            (ErrorKind::Unavailable, Retry::SAFE)
        );
        assert_eq!(
            failure(Failure::Cut, Effect::NonIdempotent),
            (ErrorKind::Unavailable, Retry::Unsafe)
        );
        assert_eq!(
            failure(Failure::Malformed, Effect::NonIdempotent).0,
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
            "Sun, 06 Nov 1994 08:49:37 UTC",
            "Sun, 32 Nov 1994 08:49:37 GMT",
        ] {
            assert_eq!(parse_retry_after(bad, now), None, "{bad:?}");
        }
    }

    #[test]
    fn urls_are_stripped() {
        assert_eq!(
            strip_urls("error sending request for url (https://h:1/p?argv=secret): reset"),
            "error sending request for url (<url>): reset"
        );
        assert_eq!(
            strip_urls("ws://a/b and wss://c \"http://d/e\" x://"),
            "<url> and <url> \"<url>\" <url>"
        );
        assert_eq!(strip_urls("no scheme ://here"), "no scheme ://here");
    }

    #[test]
    fn error_chains_are_flat_deduplicated_and_redacted() {
        #[derive(Debug)]
        struct E(&'static str, Option<Box<E>>);
        impl std::fmt::Display for E {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.0)
            }
        }
        impl StdError for E {
            fn source(&self) -> Option<&(dyn StdError + 'static)> {
                self.1.as_deref().map(|e| e as _)
            }
        }
        let e = E(
            "request to http://x/y failed",
            Some(Box::new(E(
                "failed",
                Some(Box::new(E("connection reset", None))),
            ))),
        );
        assert_eq!(error_chain(&e), "request to <url> failed: connection reset");
    }

    #[test]
    fn path_segments_escape_everything_reserved() {
        assert_eq!(
            escape_path_segment("a b/c%d~e.f_g-h"),
            "a%20b%2Fc%25d~e.f_g-h"
        );
        assert_eq!(escape_path_segment("é"), "%C3%A9");
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

    #[test]
    fn sizes_are_checked_without_quoting_the_command() {
        let limit = SizeLimit::execve(64, "test");
        let ok = Command::builder(["echo", "hi"])
            .env("A", "b")
            .build()
            .unwrap();
        assert_eq!(
            command_size(&ok),
            CommandSize {
                bytes: 5 + 3 + 4,
                strings: 3,
                longest: 5
            }
        );
        assert!(
            check_size("p", &ok, &limit).is_ok(),
            "12 bytes + 3 pointers"
        );
        let many = Command::new(vec!["a"; 5]).unwrap();
        assert!(check_size("p", &many, &limit).is_ok(), "10 + 40");
        let many = Command::new(vec!["a"; 7]).unwrap();
        assert!(
            check_size("p", &many, &limit).is_err(),
            "14 + 56: the pointers count"
        );
        let big = Command::new(["echo", &"secret".repeat(20)]).unwrap();
        let e = check_size("p", &big, &limit).unwrap_err();
        assert_eq!(
            (e.kind(), e.retry()),
            (ErrorKind::InvalidCommand, Retry::Never)
        );
        assert!(!e.message().contains("secret"), "{e}");
        assert!(e.message().contains("64"), "{e}");
        let long = Command::new(["x".repeat(MAX_ARG_STRLEN)]).unwrap();
        let e = check_size("p", &long, &SizeLimit::execve(usize::MAX, "t")).unwrap_err();
        assert!(e.message().contains("one argv string"), "{e}");
    }

    #[test]
    fn the_wire_check_counts_what_is_sent_after_quoting() {
        let script = SizeLimit::script(MAX_ARG_STRLEN - 1, "one sh -c script");
        // 40 KiB of quotes pass the raw check; quoted ('\'' each) they are 160 KiB.
        let quotes = "'".repeat(40 * 1024);
        let cmd = Command::new(["echo", quotes.as_str()]).unwrap();
        check_size("p", &cmd, &script).unwrap();
        let sent = crate::degrade::join(cmd.argv());
        let e = check_wire("p", &[sent], &script).unwrap_err();
        assert_eq!(
            (e.kind(), e.retry()),
            (ErrorKind::InvalidCommand, Retry::Never)
        );
        assert!(e.message().contains("after wrapping and quoting"), "{e}");
        assert!(
            !e.message().contains("''"),
            "the command is not quoted: {e}"
        );
        // 100 KiB of plain text is more than the old 96 KiB allowance, and fits one string.
        let plain = "a".repeat(100 * 1024);
        let cmd = Command::new(["echo", plain.as_str()]).unwrap();
        check_size("p", &cmd, &script).unwrap();
        check_wire("p", &[crate::degrade::join(cmd.argv())], &script).unwrap();
        // An execve limit also bounds the total.
        let execve = SizeLimit::execve(1000, "t");
        let many = vec!["x".repeat(100); 20];
        let e = check_wire("p", &many, &execve).unwrap_err();
        assert!(e.message().contains("more than the 1000 allowed"), "{e}");
    }

    #[test]
    fn bodies_are_quoted_bounded() {
        assert_eq!(quote_body(b"ab\ncd", 10), "ab\\ncd");
        assert_eq!(quote_body("é\u{1}".as_bytes(), 10), "é\\u{1}");
        assert_eq!(quote_body(&[b'x'; 100], 3), "xxx… (97 more bytes)");
    }

    #[test]
    fn random_ids_differ() {
        let a = random_id(20);
        let b = random_id(20);
        assert_eq!(a.len(), 20);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
