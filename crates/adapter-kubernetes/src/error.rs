//! Errors: every answer of the API server, every transport failure and every exec status maps to
//! an [`ErrorKind`] and a [`Retry`] here.
//!
//! | what | kind | retry |
//! |---|---|---|
//! | no cluster configuration, a kubeconfig that does not parse, an unreadable CA | `InvalidConfig` | `Never` |
//! | an exec credential plugin or token file that fails | `Unauthenticated` | `Never` |
//! | HTTP answers with a `Status` body | the kit's `http_status_at` (404 `NotFound`, 409 `Conflict`, 401, 403, 422, …), the `Status` reason as the error's code | the API server's own 429 (the filters' text, or a `Status` with reason `TooManyRequests`) `Safe` at any stage before the command; a bare 429 as a 5xx; 5xx `Safe` for reads and deletes, `Unsafe` for a create |
//! | connection refused (nothing sent) | `Unavailable` | `Safe` |
//! | a reset, a cut or malformed answer | `Unavailable` / `Protocol` | `Safe` for reads, `Unsafe` for a create |
//! | exec refused before the upgrade (any answer but 101) | as the `Status` says (a pod that is gone `NotFound`; a container to name `InvalidConfig`; an unscheduled pod `Unavailable`) | 429 and 5xx `Unsafe` (the API server runs nothing before it upgrades and its filters never throttle an exec, a long-running request; a proxy in front of it may have forwarded the upgrade) |
//! | an exec socket silent past the idle timeout, heartbeat pongs included | `Timeout(Request)` | `Unsafe` |
//! | exec status `Success` / `NonZeroExitCode` | an `Ok` [`Output`](execseam_core::Output) with the exit code, never an error | — |
//! | exec status `InternalError` for a missing executable | `NotFound` | `Never` |
//! | any other exec status failure (`InternalError`: the runtime failed, the container went away) | `Internal` | `Unsafe` |
//! | an exec socket that ends without a status, a status that does not parse | `Unavailable` / `Protocol` | `Unsafe` |
//! | the claim's terminal conditions (`WarmPoolNotFound`, `TemplateNotFound`, …) | see [`claim_failure`] | `Never` |

use execseam_adapter_kit::retry::{self, Edge, NoAnswer, Stage};
use execseam_adapter_kit::text;
use execseam_core::{Error, ErrorKind, Retry, WireStatus};
use std::time::SystemTime;

use crate::PROVIDER;
use crate::client::{Answer, EDGE};
use crate::wire::Status;

/// An error of this adapter.
pub(crate) fn adapter(
    kind: ErrorKind,
    retry: Retry,
    op: &'static str,
    message: impl Into<String>,
) -> Error {
    Error::new(kind, message)
        .with_retry(retry)
        .with_provider(PROVIDER)
        .with_operation(op)
}

/// A request that got no usable answer.
pub(crate) fn no_answer(what: NoAnswer, op: &'static str, stage: Stage, detail: String) -> Error {
    let (kind, retry) = retry::no_answer(what, stage);
    adapter(kind, retry, op, format!("{}: {detail}", what.describe()))
}

/// A failure of kube's client (connect, TLS, auth plugin, a broken connection).
pub(crate) fn transport(e: kube::Error, op: &'static str, stage: Stage) -> Error {
    let detail = text::error_chain(&e);
    match &e {
        kube::Error::Auth(_) => adapter(
            ErrorKind::Unauthenticated,
            Retry::Never,
            op,
            format!("cannot get credentials: {detail}"),
        ),
        kube::Error::HyperError(h) if h.is_timeout() => {
            no_answer(NoAnswer::Timeout, op, stage, detail)
        }
        kube::Error::HyperError(_) => no_answer(NoAnswer::Other, op, stage, detail),
        kube::Error::Service(inner) => {
            let connect = inner
                .downcast_ref::<hyper_util::client::legacy::Error>()
                .is_some_and(hyper_util::client::legacy::Error::is_connect);
            let what = if connect {
                NoAnswer::Connect
            } else {
                NoAnswer::Other
            };
            no_answer(what, op, stage, detail)
        }
        _ => no_answer(NoAnswer::Other, op, stage, detail),
    }
}

/// The error an HTTP answer that is not 2xx stands for: its `Status` body (or the status line).
pub(crate) fn status_error(answer: &Answer, op: &'static str, stage: Stage) -> Error {
    let retry_after = answer
        .headers
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| retry::parse_retry_after(v, SystemTime::now()));
    let status: Option<Status> = serde_json::from_slice(&answer.body).ok();
    let edge = if signed_429(answer, status.as_ref()) {
        &EDGE
    } else {
        &Edge::NONE
    };
    let (kind, retry) = retry::http_status_at(answer.status, stage, retry_after, edge);
    let message = match &status {
        Some(s) => s.describe(),
        None if answer.body.is_empty() => format!("HTTP {}", answer.status),
        None => format!(
            "HTTP {}: {}",
            answer.status,
            text::quote_body(&answer.body, 300)
        ),
    };
    let mut e = adapter(kind, retry, op, text::strip_urls(&message))
        .with_status(WireStatus::Http(answer.status));
    if let Some(reason) = status.and_then(|s| s.reason).filter(|r| !r.is_empty()) {
        e = e.with_code(reason);
    }
    e
}

/// Whether a 429 is the API server's own refusal before its handler: the max-in-flight and APF
/// filters' `http.Error(w, "Too many requests, please try again later.", 429)` (text), or a
/// `Status` with reason `TooManyRequests` (`apierrors.NewTooManyRequests`: admission, the
/// storage's rate limits). Anything else (a proxy's page, an empty body) proves nothing.
pub(crate) fn signed_429(answer: &Answer, status: Option<&Status>) -> bool {
    answer.status == 429
        && (answer.body.trim_ascii() == b"Too many requests, please try again later."
            || status.and_then(|s| s.reason.as_deref()) == Some("TooManyRequests"))
}

/// The error an exec's refused upgrade stands for (the apiserver's `streamLocation` and
/// `validateContainer` in `pkg/registry/core/pod/strategy.go`; authn/authz before them). The API
/// server itself runs nothing before it upgrades, but a proxy in front of it may forward the
/// upgrade and answer an error of its own: the answer is classified as a submit's (5xx
/// `Unsafe`), with the API server's edge (429 `Safe`).
pub(crate) fn exec_refused(answer: &Answer, pod: &str) -> Error {
    let op = "exec";
    let status: Option<Status> = serde_json::from_slice(&answer.body).ok();
    let message = status
        .as_ref()
        .and_then(|s| s.message.clone())
        .unwrap_or_default();
    // The filters exempt long-running requests, exec among them (`maxinflight.go`,
    // `priority-and-fairness.go`: "Skip tracking long running" requests): no 429 on an exec
    // upgrade is the API server's, so none proves that nothing ran.
    let e = if answer.status == 429 {
        let (kind, retry) = retry::http_status_at(429, Stage::Submit, None, &Edge::NONE);
        adapter(
            kind,
            retry,
            op,
            status_error(answer, op, Stage::Submit).message(),
        )
        .with_status(WireStatus::Http(429))
    } else {
        status_error(answer, op, Stage::Submit)
    };
    match answer.status {
        404 => adapter(
            ErrorKind::NotFound,
            Retry::Never,
            op,
            format!(
                "pod {pod} does not exist (the sandbox is gone): {}",
                e.message()
            ),
        )
        .with_status(WireStatus::Http(404)),
        400 if message.contains("a container name must be specified")
            || message.contains("is not valid for pod") =>
        {
            adapter(
                ErrorKind::InvalidConfig,
                Retry::Never,
                op,
                format!("{message} (set EXECSEAM_KUBERNETES_CONTAINER)"),
            )
            .with_status(WireStatus::Http(400))
        }
        400 if message.contains("does not have a host assigned") => adapter(
            ErrorKind::Unavailable,
            Retry::SAFE,
            op,
            format!("the pod is not scheduled yet: {message}"),
        )
        .with_status(WireStatus::Http(400)),
        _ => e,
    }
}

/// The error a claim's (or Sandbox's) `Ready=False` condition stands for when the controller
/// gives up: the reasons the official Python SDK 1.0.8 treats as terminal (`k8s_helper.py`
/// `_watch_claim`), from the claim controller's `computeReadyCondition` and the sandbox
/// controller. `None`: keep waiting.
pub(crate) fn claim_failure(reason: &str, message: &str) -> Option<Error> {
    let (kind, why) = match reason {
        "WarmPoolNotFound" | "TemplateNotFound" => (ErrorKind::NotFound, "not found"),
        "InvalidMetadata" | "VolumeClaimTemplatesError" | "InvalidConfiguration" => {
            (ErrorKind::InvalidConfig, "rejected by the controller")
        }
        "EnvVarsInjectionRejected" => (
            ErrorKind::Unsupported,
            "the template's envVarsInjectionPolicy refuses sandbox-wide env",
        ),
        "ClaimExpired" | "SandboxExpired" => (
            ErrorKind::Timeout(execseam_core::Deadline::SandboxLifetime),
            "expired",
        ),
        "PodFailed" | "PodSucceeded" => (ErrorKind::Internal, "the sandbox's pod ended"),
        _ => return None,
    };
    Some(adapter(
        kind,
        Retry::Never,
        "create",
        format!("{why}: {reason}: {message}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    /// An answer with no headers.
    fn answer(status: u16, body: &str) -> Answer {
        Answer {
            status,
            headers: http::HeaderMap::new(),
            body: Bytes::from(body.to_owned()),
        }
    }

    #[test]
    fn statuses_map_with_the_reason_and_the_apiserver_edge() {
        let e = status_error(
            &answer(
                404,
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"sandboxclaims.extensions.agents.x-k8s.io \"x\" not found","reason":"NotFound","details":{"name":"x","group":"extensions.agents.x-k8s.io","kind":"sandboxclaims"},"code":404}"#,
            ),
            "get",
            Stage::Before,
        );
        assert_eq!(e.kind(), ErrorKind::NotFound);
        assert_eq!(e.code(), Some("NotFound"));
        assert!(e.message().contains("\"x\" not found"), "{e}");
        // The filters' 429 is answered before the handler: even a create may be repeated. A
        // bare 429 (a proxy's, the chaos proxy's JSON) may follow a forwarded create.
        for body in [
            "Too many requests, please try again later.\n",
            r#"{"kind":"Status","status":"Failure","message":"Too many requests, please try again later.","reason":"TooManyRequests","code":429}"#,
        ] {
            let e = status_error(&answer(429, body), "create", Stage::Submit);
            assert!(e.retry().is_safe(), "{e:?}");
        }
        for body in ["", r#"{"message":"chaos: injected 429","code":429}"#] {
            let e = status_error(&answer(429, body), "create", Stage::Submit);
            assert_eq!(e.retry(), Retry::Unsafe, "{body}");
            assert_eq!(e.kind(), ErrorKind::RateLimited);
            let e = status_error(&answer(429, body), "get", Stage::Before);
            assert!(e.retry().is_safe(), "{e:?}");
        }
        // A 504 on a create may have created it.
        let e = status_error(&answer(504, "upstream"), "create", Stage::Submit);
        assert_eq!(e.retry(), Retry::Unsafe);
    }

    #[test]
    fn refused_execs() {
        let e = exec_refused(
            &answer(
                404,
                r#"{"kind":"Status","status":"Failure","message":"pods \"p\" not found","reason":"NotFound","code":404}"#,
            ),
            "p",
        );
        assert_eq!(e.kind(), ErrorKind::NotFound);
        let e = exec_refused(
            &answer(
                400,
                r#"{"kind":"Status","status":"Failure","message":"a container name must be specified for pod p, choose one of: [a b]","reason":"BadRequest","code":400}"#,
            ),
            "p",
        );
        assert_eq!(e.kind(), ErrorKind::InvalidConfig);
        // A proxy may have forwarded the upgrade: only the API server's 429 proves nothing ran.
        let e = exec_refused(&answer(503, ""), "p");
        assert_eq!(e.retry(), Retry::Unsafe, "{e:?}");
        // The API server never throttles an exec (long-running): any 429 may follow a forward.
        let e = exec_refused(&answer(429, ""), "p");
        assert_eq!(e.retry(), Retry::Unsafe, "{e:?}");
        assert_eq!(e.kind(), ErrorKind::RateLimited);
        assert!(claim_failure("DependenciesNotReady", "x").is_none());
        assert_eq!(
            claim_failure("WarmPoolNotFound", "SandboxWarmPool \"p\" not found")
                .unwrap()
                .kind(),
            ErrorKind::NotFound
        );
    }
}
