//! E2B's failures, mapped to [`ErrorKind`] + [`Retry`].
//!
//! Three sources: HTTP answers that are not Connect errors (the control plane's
//! `{"code":<int>,"message":…}`, the edge proxy's `502 {"sandboxId","message","code":502}`, envd's
//! plain `/files` and auth errors), Connect errors (a unary error body or an end-stream error in an
//! HTTP 200), and the transport. The E2B SDK folds four different timeouts into one
//! `TimeoutException` (e2b-dev/E2B#463); here they are told apart:
//!
//! | what happened | kind |
//! |---|---|
//! | our own per-request timer, a unary `deadline_exceeded` for the deadline we sent, `canceled` (E2B documents it as "request timeout exceeded") | `Timeout(Request)` |
//! | `deadline_exceeded` ending a `process.Start` stream for the `Connect-Timeout-Ms` we sent ([`E2bConfig::command_timeout`](crate::E2bConfig::command_timeout)): envd killed the command | `Timeout(Command)` |
//! | the sandbox is gone (`502 "… was not found"`, or a `/health` probe says so) after the lifetime we asked for ran out | `Timeout(SandboxLifetime)` |
//! | a `deadline_exceeded` we did not ask for (a proxy's), HTTP 504 | `Timeout(Unknown)` |
//!
//! A sandbox that is gone before its lifetime ran out (killed, or never existed) is `NotFound`
//! with [`Retry::Never`].

use execseam_adapter_kit::http;
use execseam_adapter_kit::retry::{self, Call, NoAnswer, Sent, Stage};
use execseam_adapter_kit::text;
use std::time::Duration;

use execseam_core::{Deadline, Error, ErrorKind, Retry, WireStatus};

use crate::connect::{CallError, Code, RpcError};

pub(crate) use crate::PROVIDER;

/// The substring of the edge proxy's answer for a sandbox that does not exist any more
/// (`SANDBOX_NOT_FOUND_MESSAGE` in the SDK).
pub(crate) const SANDBOX_NOT_FOUND: &str = "was not found";
/// The substring of the edge proxy's answer for a running sandbox whose envd port is closed.
pub(crate) const PORT_NOT_OPEN: &str = "port is not open";

/// What the caller knows about the call that failed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ctx {
    /// The operation (`exec`, `create_sandbox`, `list_dir`, …).
    pub op: &'static str,
    /// Where it failed (the kit's stage: a call safe to repeat, a submit, after the submit).
    pub stage: Stage,
    /// A command's own stream (`process.Start` and what follows it), not a call around it:
    /// envd's answers there speak of the command.
    pub exec: bool,
    /// The deadline we sent with the call (`Connect-Timeout-Ms`), and what it means.
    pub deadline: Option<Deadline>,
    /// The sandbox is known to be gone (the proxy said so, or a probe did).
    pub gone: bool,
    /// The lifetime we asked for has run out.
    pub lifetime_over: bool,
}

impl Ctx {
    pub(crate) fn new(op: &'static str, stage: Stage) -> Ctx {
        Ctx {
            op,
            stage,
            exec: false,
            deadline: None,
            gone: false,
            lifetime_over: false,
        }
    }

    /// A command's stream at `stage` ([`Stage::Submit`] until its start event, then
    /// [`Stage::After`]).
    pub(crate) fn exec(op: &'static str, stage: Stage) -> Ctx {
        Ctx {
            exec: true,
            ..Ctx::new(op, stage)
        }
    }

    fn call(&self) -> Call {
        Call::new(PROVIDER, self.op, self.stage)
    }

    /// The retry class of a failure whose request reached the server (or may have).
    fn after_send(&self) -> Retry {
        self.stage.retry(Sent::Maybe)
    }
}

/// Whether a failure says the sandbox is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gone {
    /// It says so (`502 "The sandbox was not found"`, or an `unavailable` with that text).
    Yes,
    /// It cannot tell (a cut connection, an `unavailable` without the proxy's text): probe
    /// `/health` to find out, as the SDK does.
    Maybe,
    /// Nothing to do with the sandbox's existence.
    No,
}

pub(crate) fn gone(e: &CallError) -> Gone {
    // The proxy's answer about the sandbox, as a 502 or as a Connect `unavailable`.
    let proxy = |message: &str| {
        if message.contains(SANDBOX_NOT_FOUND) {
            Gone::Yes
        } else if message.contains(PORT_NOT_OPEN) {
            Gone::No
        } else {
            Gone::Maybe
        }
    };
    match e {
        CallError::Http {
            status: 502,
            message,
            ..
        } => proxy(message),
        CallError::Rpc {
            error:
                RpcError {
                    code: Code::Unavailable,
                    message,
                },
            ..
        } => proxy(message),
        CallError::Transport(_) => Gone::Maybe,
        CallError::Protocol(m) if m.contains("ended") => Gone::Maybe,
        _ => Gone::No,
    }
}

fn err(kind: ErrorKind, retry: Retry, ctx: &Ctx, message: String) -> Error {
    Error::new(kind, message)
        .with_retry(retry)
        .with_provider(PROVIDER)
        .with_operation(ctx.op)
}

fn gone_error(ctx: &Ctx, message: String, status: Option<WireStatus>) -> Error {
    let (kind, text) = if ctx.lifetime_over {
        (
            ErrorKind::Timeout(Deadline::SandboxLifetime),
            format!("the sandbox reached the end of its lifetime: {message}"),
        )
    } else {
        (
            ErrorKind::NotFound,
            format!("the sandbox is not running (killed, or it never existed): {message}"),
        )
    };
    let e = err(kind, Retry::Never, ctx, text).with_code("sandbox_not_found");
    match status {
        Some(s) => e.with_status(s),
        None => e,
    }
}

/// Maps a failed call to an [`Error`].
pub(crate) fn map(call: CallError, ctx: &Ctx) -> Error {
    match call {
        CallError::Connect(e) | CallError::Timeout(e) => http::transport_error(ctx.call(), e),
        CallError::Idle(idle) => {
            let (kind, retry) = retry::no_answer(NoAnswer::Timeout, ctx.stage);
            let m = format!(
                "no complete stream message for {}ms (the stream idle timeout; envd sends keepalives)",
                idle.as_millis()
            );
            err(kind, retry, ctx, m)
        }
        CallError::Transport(e) => {
            let m = format!("the connection broke: {}", text::error_chain(&e));
            if ctx.gone {
                return gone_error(ctx, m, None);
            }
            let (kind, retry) = retry::no_answer(NoAnswer::Cut, ctx.stage);
            err(kind, retry, ctx, m).with_source(e)
        }
        CallError::Protocol(m) => {
            if ctx.gone {
                return gone_error(ctx, m, None);
            }
            let retry = match ctx.stage {
                Stage::Before => Retry::SAFE,
                Stage::Submit | Stage::After => Retry::Unsafe,
            };
            err(ErrorKind::Protocol, retry, ctx, m)
        }
        CallError::Http {
            status,
            signed,
            message,
            retry_after,
        } => map_http(status, signed, message, retry_after, ctx),
        CallError::Rpc {
            error,
            http_status,
            retry_after,
            in_stream,
        } => map_rpc(error, http_status, retry_after, in_stream, ctx),
    }
}

fn map_http(
    status: u16,
    signed: bool,
    message: String,
    retry_after: Option<Duration>,
    ctx: &Ctx,
) -> Error {
    let ws = Some(WireStatus::Http(status));
    if status == 502 && (message.contains(SANDBOX_NOT_FOUND) || ctx.gone) {
        return gone_error(ctx, message, ws);
    }
    let exec = ctx.exec;
    let (kind, retry) = match status {
        400 | 413 => (ErrorKind::InvalidCommand, Retry::Never),
        401 => (ErrorKind::Unauthenticated, Retry::Never),
        403 => (ErrorKind::PermissionDenied, Retry::Never),
        404 => (ErrorKind::NotFound, Retry::Never),
        409 => (ErrorKind::Conflict, Retry::Never),
        // Safe on a submit only as one of the proxy's templates (its 429s are answered in its
        // handler before it forwards: the connection limit, the team's sandbox limit).
        // (No E2B proxy renders a 503 on a sandbox's routes: a 503 is never signed.)
        429 | 503 => retry::signed(status, ctx.stage, retry_after, signed && status == 429),
        499 => (ErrorKind::Cancelled, ctx.after_send()),
        501 | 505 => (ErrorKind::Unsupported, Retry::Never),
        // "The sandbox is running but port is not open": Go's ReverseProxy renders it from its
        // ErrorHandler for any RoundTrip error, one after the request was written included
        // (go `net/http/httputil/reverseproxy.go`), so on a submit the command may have run.
        502 if message.contains(PORT_NOT_OPEN) => (
            ErrorKind::Unavailable,
            match ctx.after_send() {
                Retry::Safe { .. } => Retry::Safe { after: retry_after },
                other => other,
            },
        ),
        502 => (ErrorKind::Unavailable, ctx.after_send()),
        504 => (ErrorKind::Timeout(Deadline::Unknown), ctx.after_send()),
        507 => (ErrorKind::Internal, Retry::Never),
        s if s >= 500 => (
            ErrorKind::Internal,
            if exec {
                Retry::Unsafe
            } else {
                ctx.after_send()
            },
        ),
        _ => (ErrorKind::Internal, Retry::Never),
    };
    let mut e = err(kind, retry, ctx, message)
        .with_status(WireStatus::Http(status))
        .with_code(format!("http_{status}"));
    if status == 507 {
        e = e.with_code("not_enough_space");
    }
    e
}

fn map_rpc(
    error: RpcError,
    http_status: u16,
    retry_after: Option<Duration>,
    in_stream: bool,
    ctx: &Ctx,
) -> Error {
    let RpcError { code, message } = error;
    let started = ctx.exec && ctx.stage == Stage::After;
    // Envd rejected the call itself (or the command never started): nothing ran.
    let not_run = !started && (!in_stream || (ctx.exec && ctx.stage == Stage::Submit));
    let may_have_run = ctx.after_send();
    let (kind, retry) = match code {
        Code::Unavailable if message.contains(SANDBOX_NOT_FOUND) || ctx.gone => {
            return gone_error(ctx, message, Some(WireStatus::Grpc(code.grpc())))
                .with_code(code.as_str());
        }
        Code::Unavailable if message.contains(PORT_NOT_OPEN) && !started => {
            (ErrorKind::Unavailable, Retry::Safe { after: retry_after })
        }
        Code::Unavailable => (ErrorKind::Unavailable, may_have_run),
        // envd: `cwd '<resolved>' does not exist`, before anything started.
        Code::InvalidArgument
            if ctx.exec
                && ctx.stage == Stage::Submit
                && message.starts_with("cwd '")
                && message.ends_with("does not exist") =>
        {
            (ErrorKind::NotFound, Retry::Never)
        }
        Code::InvalidArgument | Code::OutOfRange => (ErrorKind::InvalidCommand, Retry::Never),
        Code::NotFound => (ErrorKind::NotFound, Retry::Never),
        Code::AlreadyExists => (ErrorKind::Conflict, Retry::Never),
        Code::FailedPrecondition => (ErrorKind::Conflict, Retry::Never),
        Code::Aborted => (
            ErrorKind::Conflict,
            if not_run { Retry::SAFE } else { may_have_run },
        ),
        Code::PermissionDenied => (ErrorKind::PermissionDenied, Retry::Never),
        Code::Unauthenticated => (ErrorKind::Unauthenticated, Retry::Never),
        Code::ResourceExhausted => (
            ErrorKind::RateLimited,
            if not_run {
                Retry::Safe { after: retry_after }
            } else {
                may_have_run
            },
        ),
        Code::Unimplemented => (ErrorKind::Unsupported, Retry::Never),
        Code::DeadlineExceeded => match ctx.deadline {
            Some(Deadline::Command) => (ErrorKind::Timeout(Deadline::Command), Retry::Unsafe),
            Some(Deadline::Request) => (ErrorKind::Timeout(Deadline::Request), may_have_run),
            _ => (ErrorKind::Timeout(Deadline::Unknown), may_have_run),
        },
        Code::Canceled => (ErrorKind::Timeout(Deadline::Request), may_have_run),
        Code::Unknown | Code::Internal | Code::DataLoss => (
            ErrorKind::Internal,
            if ctx.exec {
                Retry::Unsafe
            } else if not_run {
                Retry::Never
            } else {
                may_have_run
            },
        ),
    };
    let status = if in_stream || http_status == 200 {
        WireStatus::Grpc(code.grpc())
    } else {
        WireStatus::Http(http_status)
    };
    let message = if message.is_empty() {
        code.as_str().to_owned()
    } else {
        message
    };
    err(kind, retry, ctx, message)
        .with_status(status)
        .with_code(code.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderMap;

    fn rpc(code: Code, message: &str, in_stream: bool) -> CallError {
        CallError::Rpc {
            error: RpcError {
                code,
                message: message.into(),
            },
            http_status: if in_stream { 200 } else { 500 },
            retry_after: None,
            in_stream,
        }
    }

    fn http(status: u16, message: &str, after: Option<u64>) -> CallError {
        CallError::Http {
            status,
            signed: false,
            message: message.into(),
            retry_after: after.map(Duration::from_secs),
        }
    }

    #[test]
    fn a_429_on_a_submit_is_safe_only_as_the_proxys_own_template() {
        // e2b-infra packages/shared/pkg/proxy/template/sandbox_too_many_connections.go, as the
        // proxy writes it (JSON for a non-browser client: template.go `HandleError`).
        let template = br#"{"sandboxId":"sbx1","message":"The sandbox has too many concurrent incoming connections (limit: 1000)","code":429,"connectionLimit":1000}"#;
        let mut headers = HeaderMap::new();
        headers.insert(
            reqwest::header::CONTENT_TYPE,
            "application/json; charset=utf-8".parse().unwrap(),
        );
        let after = Some(Duration::from_secs(2));
        let signed = crate::connect::error_of_parts(429, &headers, template, after);
        let e = map(signed, &exec_ctx(Stage::Submit));
        assert_eq!(
            (e.kind(), e.retry()),
            (ErrorKind::RateLimited, Retry::Safe { after })
        );
        // A gateway's 429 or 503 (the chaos proxy's body has no sandboxId): may have run.
        let bare = br#"{"message":"rate limited","code":429}"#;
        for (status, body) in [(429, &bare[..]), (503, &b"busy"[..]), (429, &b""[..])] {
            let e = map(
                crate::connect::error_of_parts(status, &headers, body, after),
                &exec_ctx(Stage::Submit),
            );
            assert_eq!(e.retry(), Retry::Unsafe, "{status}: {e}");
        }
        // Before any command, a read is safe to repeat whoever answered.
        let e = map(
            http(503, "busy", Some(2)),
            &Ctx::new("list_dir", Stage::Before),
        );
        assert_eq!(e.retry(), Retry::Safe { after });
        // "port is not open" may follow a written request (Go's ReverseProxy ErrorHandler).
        let e = map(
            http(502, "The sandbox is running but port is not open", None),
            &exec_ctx(Stage::Submit),
        );
        assert_eq!(e.retry(), Retry::Unsafe);
    }

    fn exec_ctx(stage: Stage) -> Ctx {
        Ctx::exec("exec", stage)
    }

    #[test]
    fn the_four_timeouts_are_told_apart() {
        let mut ctx = exec_ctx(Stage::After);
        ctx.deadline = Some(Deadline::Command);
        let e = map(
            rpc(Code::DeadlineExceeded, "context deadline exceeded", true),
            &ctx,
        );
        assert_eq!(
            (e.kind(), e.retry()),
            (ErrorKind::Timeout(Deadline::Command), Retry::Unsafe)
        );

        // The same code without a deadline of ours: someone else's.
        let e = map(
            rpc(Code::DeadlineExceeded, "context deadline exceeded", true),
            &exec_ctx(Stage::After),
        );
        assert_eq!(e.kind(), ErrorKind::Timeout(Deadline::Unknown));

        let e = map(
            rpc(Code::Canceled, "canceled", true),
            &exec_ctx(Stage::After),
        );
        assert_eq!(
            (e.kind(), e.retry()),
            (ErrorKind::Timeout(Deadline::Request), Retry::Unsafe)
        );

        let mut ctx = exec_ctx(Stage::After);
        ctx.lifetime_over = true;
        let e = map(http(502, "The sandbox was not found", None), &ctx);
        assert_eq!(
            (e.kind(), e.retry()),
            (ErrorKind::Timeout(Deadline::SandboxLifetime), Retry::Never)
        );

        let e = map(http(504, "Gateway Timeout", None), &exec_ctx(Stage::Submit));
        assert_eq!(
            (e.kind(), e.retry()),
            (ErrorKind::Timeout(Deadline::Unknown), Retry::Unsafe)
        );
    }

    #[test]
    fn a_vanished_sandbox_is_not_found_and_never_retried() {
        for call in [
            http(502, "The sandbox was not found", None),
            rpc(Code::Unavailable, "sbx: The sandbox was not found", false),
        ] {
            let e = map(call, &exec_ctx(Stage::Submit));
            assert_eq!((e.kind(), e.retry()), (ErrorKind::NotFound, Retry::Never));
            assert!(e.message().contains("not running"), "{e}");
        }
        // A probe that found the sandbox gone turns an ambiguous cut into the same.
        let mut ctx = exec_ctx(Stage::After);
        ctx.gone = true;
        let e = map(
            rpc(
                Code::Unavailable,
                "the connection to sandbox x ended before the stream completed",
                true,
            ),
            &ctx,
        );
        assert_eq!((e.kind(), e.retry()), (ErrorKind::NotFound, Retry::Never));
        assert_eq!(
            gone(&rpc(
                Code::Unavailable,
                "the connection to sandbox x ended before the stream completed",
                true
            )),
            Gone::Maybe
        );
        assert_eq!(
            gone(&http(502, "The sandbox was not found", None)),
            Gone::Yes
        );
        assert_eq!(
            gone(&http(
                502,
                "The sandbox is running but port is not open",
                None
            )),
            Gone::No
        );
    }

    #[test]
    fn http_faults_map_to_the_contract() {
        let ctx = exec_ctx(Stage::Submit);
        // Bare (not one of the proxy's templates): the command may have run (issue 38).
        let e = map(http(429, "slow down", Some(3)), &ctx);
        assert_eq!(e.kind(), ErrorKind::RateLimited);
        assert_eq!(e.retry(), Retry::Unsafe);
        assert_eq!(e.status(), Some(WireStatus::Http(429)));
        let e = map(http(429, "slow down", Some(3)), &exec_ctx(Stage::Before));
        assert_eq!(
            e.retry(),
            Retry::Safe {
                after: Some(Duration::from_secs(3))
            }
        );
        let e = map(http(500, "boom", None), &ctx);
        assert_eq!((e.kind(), e.retry()), (ErrorKind::Internal, Retry::Unsafe));
        let e = map(http(503, "busy", None), &ctx);
        assert_eq!(
            (e.kind(), e.retry()),
            (ErrorKind::Unavailable, Retry::Unsafe)
        );
        let e = map(http(401, "unauthorized", None), &ctx);
        assert_eq!(
            (e.kind(), e.retry()),
            (ErrorKind::Unauthenticated, Retry::Never)
        );
        let e = map(
            CallError::Protocol("a malformed stream message".into()),
            &exec_ctx(Stage::After),
        );
        assert_eq!((e.kind(), e.retry()), (ErrorKind::Protocol, Retry::Unsafe));
    }

    #[test]
    fn a_missing_cwd_is_not_found_before_the_start() {
        let e = map(
            rpc(
                Code::InvalidArgument,
                "cwd '/home/user/nope' does not exist",
                true,
            ),
            &exec_ctx(Stage::Submit),
        );
        assert_eq!((e.kind(), e.retry()), (ErrorKind::NotFound, Retry::Never));
        assert_eq!(e.status(), Some(WireStatus::Grpc(3)));
        assert_eq!(e.code(), Some("invalid_argument"));
        let e = map(
            rpc(Code::InvalidArgument, "bad", false),
            &exec_ctx(Stage::Submit),
        );
        assert_eq!(e.kind(), ErrorKind::InvalidCommand);
    }

    #[test]
    fn every_connect_code_has_a_kind_and_in_stream_errors_after_start_are_unsafe() {
        for code in Code::ALL {
            let e = map(rpc(code, "m", true), &exec_ctx(Stage::After));
            assert_eq!(e.provider(), "e2b");
            assert_eq!(e.code(), Some(code.as_str()));
            assert_eq!(e.status(), Some(WireStatus::Grpc(code.grpc())));
            let retryable_after_start = matches!(
                code,
                Code::InvalidArgument
                    | Code::OutOfRange
                    | Code::NotFound
                    | Code::AlreadyExists
                    | Code::FailedPrecondition
                    | Code::PermissionDenied
                    | Code::Unauthenticated
                    | Code::Unimplemented
            );
            if !retryable_after_start {
                assert_eq!(e.retry(), Retry::Unsafe, "{code:?} after the start");
            } else {
                assert_eq!(e.retry(), Retry::Never, "{code:?}");
            }
        }
    }
}
