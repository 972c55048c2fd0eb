//! The `/executions` contract as a server keeps it, separate from any store or HTTP stack: the
//! operation [`Record`] and its transitions (every change bumps `version`, and the ETag is
//! `"v{version}"`), the idempotency decision by (owner, key, payload hash), and the reply of each
//! route as a neutral [`Reply`] (status, headers, body).
//!
//! The rules, with their sources (`research/ax-agentcore-chrono.md` §3.4–3.6, Aevatar
//! `NyxIdCodeExecutionPort.Durable.cs` and its tests, seed 004):
//!
//! - submit: no key → 400 `IDEMPOTENCY_KEY_MISSING` (before the body is looked at); same owner,
//!   key and payload → 202 with the same receipt (production: "converged on the same
//!   operation"); same key, other payload → 409 `IDEMPOTENCY_KEY_REUSE`; 202 carries `Location`
//!   and `Retry-After`;
//! - status: 200 with `ETag` (and `Retry-After` while not terminal); `If-None-Match` matching the
//!   current ETag → 304 with an empty body, `ETag` and `Retry-After`;
//! - result: 409 `OPERATION_NOT_TERMINAL` with `Retry-After` while not terminal; then the
//!   `/execute`-shaped body, or `{"success": false, "error": {"code", "phase"}}` without output
//!   for `cancelled`, `outcome_uncertain` and failures that produced none;
//! - cancel: 200 with the snapshot and `ETag` once terminal, 202 while the cancel is under way;
//! - status, result and cancel: another owner's or an unknown id → 404 `OPERATION_NOT_FOUND`; an
//!   expired operation → 410 `OPERATION_EXPIRED`.
//!
//! Used by the Chrono emulator (in memory) and by `execseam serve` (`execseam-server`, over a
//! durable store); both answer through these functions (and end their runs through
//! [`crate::run`]), so they cannot drift apart.

use std::time::{Duration, SystemTime};

use crate::wire::{
    self, CleanupStatus, ErrorBody, ExecuteResponse, Failure, Phase, Receipt, Snapshot, Status,
    codes,
};

/// One operation, as a store keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct Record {
    /// `op_` + 32 characters.
    pub id: String,
    /// Who submitted it (keys are scoped by owner).
    pub owner: String,
    /// SHA-256 of the idempotency key (the raw key is not kept).
    pub key_hash: String,
    /// [`wire::ExecuteRequest::payload_hash`] of the submitted body.
    pub payload_hash: String,
    /// The status.
    pub status: Status,
    /// The phase.
    pub phase: Phase,
    /// The cleanup status.
    pub cleanup: CleanupStatus,
    /// Bumped on every change.
    pub version: i64,
    /// A cancel was requested.
    pub cancel_requested: bool,
    /// Created.
    pub created: SystemTime,
    /// Last change.
    pub updated: SystemTime,
    /// After this, status/result/cancel answer 410.
    pub expires: SystemTime,
    /// When it became terminal.
    pub terminal_at: Option<SystemTime>,
    /// First program event (start).
    pub first_event_at: Option<SystemTime>,
    /// Last program event.
    pub last_event_at: Option<SystemTime>,
    /// Why it failed or was cancelled.
    pub failure: Option<Failure>,
    /// The result body, once terminal with one.
    pub result: Option<ExecuteResponse>,
}

impl Record {
    /// A queued operation (version 1).
    pub fn new(
        id: String,
        owner: String,
        key: &str,
        payload_hash: String,
        now: SystemTime,
        retention: Duration,
    ) -> Record {
        Record {
            id,
            owner,
            key_hash: wire::sha256_hex(key.as_bytes()),
            payload_hash,
            status: Status::Queued,
            phase: Phase::Queued,
            cleanup: CleanupStatus::NotStarted,
            version: 1,
            cancel_requested: false,
            created: now,
            updated: now,
            expires: now + retention,
            terminal_at: None,
            first_event_at: None,
            last_event_at: None,
            failure: None,
            result: None,
        }
    }

    /// The strong ETag of the current version.
    pub fn etag(&self) -> String {
        wire::etag_for_version(self.version)
    }

    /// Moves to `status`/`phase` (a no-op once terminal: a terminal record never changes, except
    /// for its cleanup).
    pub fn advance(&mut self, status: Status, phase: Phase, now: SystemTime) {
        if self.status.is_terminal() || (self.status == status && self.phase == phase) {
            return;
        }
        if status == Status::Running && self.first_event_at.is_none() {
            self.first_event_at = Some(now);
        }
        self.status = status;
        self.phase = phase;
        self.touch(now);
    }

    /// Ends the operation: `succeeded`/`failed` from the result's `success`, or the given
    /// status (`cancelled`, `outcome_uncertain`, `failed` without output) with a failure code.
    pub fn finish(&mut self, end: End, now: SystemTime) {
        if self.status.is_terminal() {
            return;
        }
        let failed_phase = self.phase;
        match end {
            End::Result(r) => {
                self.status = if r.success {
                    Status::Succeeded
                } else {
                    Status::Failed
                };
                self.failure = r.error.as_ref().map(|e| Failure {
                    code: e.code.clone(),
                    message: e.message.clone(),
                });
                self.result = Some(r);
            }
            End::Without {
                status,
                code,
                message,
            } => {
                self.status = status;
                self.failure = Some(Failure {
                    code: code.to_owned(),
                    message: Some(message.clone()),
                });
                let mut e = ErrorBody::new(code, message);
                e.phase = Some(failed_phase);
                self.result = Some(ExecuteResponse::error(e, None));
            }
        }
        self.phase = Phase::Complete;
        self.cleanup = CleanupStatus::Complete;
        self.terminal_at = Some(now);
        self.last_event_at = Some(now);
        self.touch(now);
    }

    /// Records a cancel request; true if it changed the record (not terminal, not yet asked).
    pub fn request_cancel(&mut self, now: SystemTime) -> bool {
        if self.status.is_terminal() || self.cancel_requested {
            return false;
        }
        self.cancel_requested = true;
        self.touch(now);
        true
    }

    fn touch(&mut self, now: SystemTime) {
        self.version += 1;
        self.updated = now;
    }

    /// Expired at `now`.
    pub fn is_expired(&self, now: SystemTime) -> bool {
        now >= self.expires
    }

    /// The status body.
    pub fn snapshot(&self) -> Snapshot {
        let t = |t: SystemTime| wire::format_rfc3339(t);
        Snapshot {
            operation_id: self.id.clone(),
            status: self.status,
            phase: self.phase,
            cleanup_status: self.cleanup,
            version: self.version,
            cancel_requested: self.cancel_requested,
            result_available: self.status.is_terminal() && self.result.is_some(),
            created_at: t(self.created),
            updated_at: t(self.updated),
            expires_at: t(self.expires),
            terminal_at: self.terminal_at.map(t),
            first_event_at: self.first_event_at.map(t),
            last_event_at: self.last_event_at.map(t),
            timings: Some(serde_json::json!({})),
            failure: self.failure.clone(),
        }
    }

    /// The 202 body. `base` is the public root the URLs are built on (metadata for clients).
    pub fn receipt(&self, base: &str) -> Receipt {
        Receipt {
            operation_id: self.id.clone(),
            status: self.status,
            status_url: Some(format!("{base}{}", wire::path::status(&self.id))),
            result_url: Some(format!("{base}{}", wire::path::result(&self.id))),
            cancel_url: Some(format!("{base}{}", wire::path::cancel(&self.id))),
            created_at: wire::format_rfc3339(self.created),
            expires_at: wire::format_rfc3339(self.expires),
        }
    }
}

/// How an operation ended.
// One value per operation: boxing would only cost an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub enum End {
    /// The program ran (or its result is an `/execute` error body with output).
    Result(ExecuteResponse),
    /// Terminal without output.
    Without {
        /// `cancelled`, `outcome_uncertain` or `failed`.
        status: Status,
        /// `EXECUTION_CANCELLED`, `OUTCOME_UNCERTAIN`, `SANDBOX_TIMEOUT`, …
        code: &'static str,
        /// Text.
        message: String,
    },
}

/// What a submit does with the record already stored under (owner, key), if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SubmitDecision {
    /// No record: create one.
    Create,
    /// The same payload: answer with this operation's receipt.
    Replay(String),
    /// Another payload: 409 `IDEMPOTENCY_KEY_REUSE`.
    Conflict,
}

/// The idempotency decision. An expired record under the key no longer binds it.
pub fn decide_submit(
    existing: Option<&Record>,
    payload_hash: &str,
    now: SystemTime,
) -> SubmitDecision {
    match existing {
        None => SubmitDecision::Create,
        Some(r) if r.is_expired(now) => SubmitDecision::Create,
        Some(r) if r.payload_hash == payload_hash => SubmitDecision::Replay(r.id.clone()),
        Some(_) => SubmitDecision::Conflict,
    }
}

/// A reply, independent of the HTTP stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// Headers (`ETag`, `Retry-After`, `Location`, `Content-Type`).
    pub headers: Vec<(&'static str, String)>,
    /// The body (empty for 304).
    pub body: Vec<u8>,
}

impl Reply {
    /// A JSON reply.
    pub fn json(status: u16, body: &impl serde::Serialize) -> Reply {
        Reply {
            status,
            headers: vec![("content-type", "application/json".into())],
            body: serde_json::to_vec(body).expect("serialisable"),
        }
    }

    /// Adds a header.
    #[must_use]
    pub fn with(mut self, name: &'static str, value: String) -> Reply {
        self.headers.push((name, value));
        self
    }

    /// The value of a header.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// An error reply: `{"success": false, "error": {"code", "message"}, "diagnostic_id"}`, with
/// `Retry-After` when given.
pub fn error_reply(status: u16, code: &str, message: &str, retry_after: Option<u64>) -> Reply {
    let body = ExecuteResponse::error(ErrorBody::new(code, message), Some(diagnostic_id()));
    let r = Reply::json(status, &body);
    match retry_after {
        Some(s) => r.with("retry-after", s.to_string()),
        None => r,
    }
}

/// A fresh diagnostic id (`diag-` + 16 hex).
pub fn diagnostic_id() -> String {
    format!("diag-{}", random_hex(16))
}

/// A fresh operation id: `op_` + 32 lowercase hex characters ([`wire::valid_operation_id`]).
pub fn operation_id() -> String {
    format!("op_{}", random_hex(32))
}

/// `len` lowercase hex characters: ids that differ, not secrets.
pub fn random_hex(len: usize) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    (0..len)
        .map(|_| HEX[fastrand::usize(..16)] as char)
        .collect()
}

/// The 202 of a submit (fresh or replayed).
pub fn submit_reply(r: &Record, base: &str, retry_after: u64) -> Reply {
    Reply::json(202, &r.receipt(base))
        .with("location", format!("{base}{}", wire::path::status(&r.id)))
        .with("retry-after", retry_after.to_string())
}

/// 404 `OPERATION_NOT_FOUND` or 410 `OPERATION_EXPIRED` when `r` is not readable by `owner` at
/// `now`; `None` when it is.
pub fn lookup_failure(r: Option<&Record>, owner: &str, now: SystemTime) -> Option<Reply> {
    match r {
        Some(r) if r.owner == owner && !r.is_expired(now) => None,
        Some(r) if r.owner == owner => Some(error_reply(
            410,
            codes::OPERATION_EXPIRED,
            "the operation and its result have expired",
            None,
        )),
        _ => Some(error_reply(
            404,
            codes::OPERATION_NOT_FOUND,
            "no such operation",
            None,
        )),
    }
}

/// `GET /executions/{id}` for a readable record.
pub fn status_reply(r: &Record, if_none_match: Option<&str>, retry_after: u64) -> Reply {
    let etag = r.etag();
    let pending = !r.status.is_terminal();
    let reply = if if_none_match.is_some_and(|inm| wire::if_none_match_matches(inm, &etag)) {
        Reply {
            status: 304,
            headers: Vec::new(),
            body: Vec::new(),
        }
        .with("retry-after", retry_after.to_string())
    } else {
        let r = Reply::json(200, &r.snapshot());
        if pending {
            r.with("retry-after", retry_after.to_string())
        } else {
            r
        }
    };
    reply.with("etag", etag)
}

/// `GET /executions/{id}/result` for a readable record.
pub fn result_reply(r: &Record, retry_after: u64) -> Reply {
    match (&r.result, r.status.is_terminal()) {
        (Some(body), true) => Reply::json(200, body),
        _ => error_reply(
            409,
            codes::OPERATION_NOT_TERMINAL,
            "the operation is not terminal yet",
            Some(retry_after),
        ),
    }
}

/// `POST /executions/{id}/cancel` for a readable record, after the cancel was requested (and,
/// where the store can, waited for): 200 once terminal, 202 while still under way.
pub fn cancel_reply(r: &Record) -> Reply {
    let status = if r.status.is_terminal() { 200 } else { 202 };
    Reply::json(status, &r.snapshot()).with("etag", r.etag())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ExecOutput;

    fn rec() -> Record {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_786_701_600);
        Record::new(
            "op_0123456789abcdefghijklmnopqrstuv".into(),
            "alice".into(),
            "k1",
            "h1".into(),
            now,
            Duration::from_secs(86_400),
        )
    }

    #[test]
    fn versions_and_etags_change_on_every_transition() {
        let mut r = rec();
        let t = r.created;
        assert_eq!((r.version, r.etag().as_str()), (1, "\"v1\""));
        r.advance(Status::Provisioning, Phase::SandboxCreate, t);
        r.advance(Status::Running, Phase::Execute, t);
        r.advance(Status::Running, Phase::Execute, t); // no change, no bump
        assert_eq!(r.version, 3);
        let out = ExecOutput {
            stdout: "42\n".into(),
            stderr: String::new(),
            exit_code: 0,
            execution_time_ms: Some(5),
            display_data: None,
            files: None,
        };
        r.finish(End::Result(ExecuteResponse::completed(out, None)), t);
        assert_eq!(
            (r.status, r.phase, r.cleanup, r.version),
            (
                Status::Succeeded,
                Phase::Complete,
                CleanupStatus::Complete,
                4
            )
        );
        let s = r.snapshot();
        assert!(s.result_available && s.terminal_at.is_some());
        // Terminal records never change again.
        r.advance(Status::Running, Phase::Execute, t);
        assert!(!r.request_cancel(t));
        assert_eq!(r.version, 4);
        // The snapshot parses with the client's strict parser.
        let body = serde_json::to_vec(&s).unwrap();
        wire::parse_snapshot(&body, &r.id).unwrap();
    }

    #[test]
    fn idempotency_by_key_and_payload() {
        let r = rec();
        let now = r.created;
        assert_eq!(decide_submit(None, "h1", now), SubmitDecision::Create);
        assert_eq!(
            decide_submit(Some(&r), "h1", now),
            SubmitDecision::Replay(r.id.clone())
        );
        assert_eq!(decide_submit(Some(&r), "h2", now), SubmitDecision::Conflict);
        assert_eq!(
            decide_submit(Some(&r), "h2", r.expires),
            SubmitDecision::Create
        );
    }

    #[test]
    fn conditional_status_and_pending_results() {
        let mut r = rec();
        let full = status_reply(&r, None, 1);
        assert_eq!((full.status, full.header("etag")), (200, Some("\"v1\"")));
        assert_eq!(full.header("retry-after"), Some("1"));
        let same = status_reply(&r, Some("\"v1\""), 1);
        assert_eq!((same.status, same.body.len()), (304, 0));
        assert_eq!(same.header("etag"), Some("\"v1\""));
        assert_eq!(status_reply(&r, Some("\"v0\""), 1).status, 200);
        let p = result_reply(&r, 2);
        assert_eq!((p.status, p.header("retry-after")), (409, Some("2")));
        assert_eq!(
            wire::error_code(&p.body).as_deref(),
            Some(codes::OPERATION_NOT_TERMINAL)
        );
        let t = r.created;
        r.advance(Status::Running, Phase::Execute, t);
        assert!(r.request_cancel(t));
        assert_eq!(cancel_reply(&r).status, 202);
        r.finish(
            End::Without {
                status: Status::Cancelled,
                code: codes::EXECUTION_CANCELLED,
                message: "cancelled".into(),
            },
            t,
        );
        let c = cancel_reply(&r);
        assert_eq!(c.status, 200);
        let res = result_reply(&r, 1);
        let wire::Completion::NoOutput { error, .. } = wire::parse_completion(&res.body).unwrap()
        else {
            panic!()
        };
        assert_eq!(
            (error.code.as_str(), error.phase),
            (codes::EXECUTION_CANCELLED, Some(Phase::Execute))
        );
        // A terminal status has no Retry-After.
        assert_eq!(status_reply(&r, None, 1).header("retry-after"), None);
    }

    #[test]
    fn owners_and_expiry() {
        let r = rec();
        assert!(lookup_failure(Some(&r), "alice", r.created).is_none());
        assert_eq!(
            lookup_failure(Some(&r), "bob", r.created).unwrap().status,
            404
        );
        assert_eq!(
            lookup_failure(Some(&r), "alice", r.expires).unwrap().status,
            410
        );
        assert_eq!(
            lookup_failure(None, "alice", r.created).unwrap().status,
            404
        );
    }
}
