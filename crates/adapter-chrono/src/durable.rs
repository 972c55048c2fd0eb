//! The typed durable client for Chrono's asynchronous `/executions` contract, and the reconcile
//! loop that follows Aevatar's rules (seed 004, "Durable workflow execution"; Aevatar
//! `NyxIdCodeExecutionPort.Durable.cs`):
//!
//! - every exchange is bounded ([`DurablePolicy::exchange_timeout`], 15 s);
//! - `Retry-After` is honoured and capped ([`DurablePolicy::retry_after_cap`], 30 s; 2 s when
//!   absent; values ≤ 0 are 0);
//! - `If-None-Match` is sent whenever an ETag is known; a `304` must carry an ETag;
//! - a lost submit response is retried **only with the same key** (the operation converges);
//! - status, result and cancel paths are rebuilt from the operation id (receipt URLs ignored);
//! - once an operation id is known, a 404 is terminal ([`Terminal::NotFound`]): never resubmit;
//! - 409 `IDEMPOTENCY_KEY_REUSE`, 410, `cancelled` and `outcome_uncertain` are typed terminal
//!   outcomes; a result-side 409 `OPERATION_NOT_TERMINAL` is still pending;
//! - after `succeeded`/`failed` the result is fetched; unknown enum values are malformed.
//!
//! The loop is a state machine ([`Operation`] + [`DurableClient::step`]): one bounded exchange
//! per step, returning the delay before the next. A host that persists the [`Operation`] between
//! steps (an actor, a job queue) gets Aevatar's "one bounded exchange per callback" shape; a
//! host that does not just calls [`DurableClient::run`].

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use execseam_core::{BoxFuture, Error, ErrorKind, Retry, WireStatus};

use crate::config::{ChronoConfig, DurablePolicy};
use crate::error::{CANCEL, EXECUTE, RESULT, STATUS, SUBMIT, from_status, protocol};
use crate::http::{Answer, Exchange, HttpTransport, Method, Transport};
use crate::wire::{
    self, CANCEL_BODY, Completion, ErrorBody, ExecOutput, ExecuteRequest, IDEMPOTENCY_KEY_HEADER,
    Receipt, Snapshot, Status, codes,
};
use execseam_adapter_kit::retry::Call;

/// How the loop waits between exchanges (a tokio sleep by default; tests record the delays).
pub trait Sleep: Send + Sync {
    /// Waits `d`.
    fn sleep(&self, d: Duration) -> BoxFuture<'static, ()>;
}

/// [`Sleep`] with `tokio::time::sleep`.
#[derive(Clone, Copy, Debug, Default)]
pub struct TokioSleep;

impl Sleep for TokioSleep {
    fn sleep(&self, d: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(d))
    }
}

/// A 202 answer to `POST /executions`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accepted {
    /// The receipt (its URLs are metadata; paths are rebuilt from the id).
    pub receipt: Receipt,
    /// `Location`, as sent (metadata too).
    pub location: Option<String>,
    /// `Retry-After`, uncapped.
    pub retry_after: Option<Duration>,
}

/// An answer to `GET /executions/{id}`.
// One value per exchange: boxing would only cost an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StatusAnswer {
    /// 200: the current snapshot and its ETag.
    Snapshot {
        /// The snapshot.
        snapshot: Snapshot,
        /// Its ETag (required).
        etag: String,
        /// `Retry-After` (sent while not terminal), uncapped.
        retry_after: Option<Duration>,
    },
    /// 304: unchanged since the ETag sent.
    NotModified {
        /// The ETag (required on a 304).
        etag: String,
        /// `Retry-After`, uncapped.
        retry_after: Option<Duration>,
    },
}

/// An answer to `GET /executions/{id}/result`.
// One value per exchange: boxing would only cost an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ResultAnswer {
    /// 200: the `/execute`-shaped result.
    Ready(Completion),
    /// 409 `OPERATION_NOT_TERMINAL`: still running.
    Pending {
        /// `Retry-After`, uncapped.
        retry_after: Option<Duration>,
    },
}

/// How an operation ended, as the reconcile loop saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Terminal {
    /// The program ran; `error` is set for a completed-with-failure result (non-zero exit).
    Ran {
        /// The operation.
        operation_id: String,
        /// Its output.
        output: ExecOutput,
        /// `EXECUTION_FAILED`, `DEPENDENCY_INSTALL_FAILED`, … when the exit code is not 0.
        error: Option<ErrorBody>,
    },
    /// Terminal without output and neither cancelled nor uncertain (`SANDBOX_TIMEOUT`, …).
    Failed {
        /// The operation.
        operation_id: String,
        /// The error object of the result.
        error: ErrorBody,
    },
    /// `cancelled` (status or result).
    Cancelled {
        /// The operation.
        operation_id: String,
        /// The last snapshot, if one was read.
        snapshot: Option<Snapshot>,
    },
    /// `outcome_uncertain`: the service cannot tell whether the program ran.
    OutcomeUncertain {
        /// The operation.
        operation_id: String,
        /// The last snapshot, if one was read.
        snapshot: Option<Snapshot>,
    },
    /// 410: the operation and its result expired.
    Expired {
        /// The operation.
        operation_id: String,
    },
    /// 404 after the id was known: unknown to the service, or owned by someone else (a restart
    /// of Chrono's ephemeral store does this). Never resubmitted.
    NotFound {
        /// The operation.
        operation_id: String,
    },
    /// 409 `IDEMPOTENCY_KEY_REUSE`: the key was used with another payload.
    KeyReused,
}

/// Where the loop is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Submitting (again, with the same key, while the outcome is unknown).
    Submit,
    /// Reading the status.
    Status,
    /// Fetching the result.
    Result,
}

/// What one step concluded.
// One value per exchange: boxing would only cost an allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Progress {
    /// Not terminal yet: step again after this delay (already capped).
    Wait(Duration),
    /// Terminal.
    Done(Terminal),
}

/// Counters of one operation's exchanges (for tests, metrics and logs; no secrets).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Exchanges sent.
    pub exchanges: u64,
    /// Of which submits.
    pub submits: u64,
    /// Status reads answered 304.
    pub not_modified: u64,
    /// Status reads sent with `If-None-Match`.
    pub conditional: u64,
    /// Exchanges that hit the exchange bound.
    pub timeouts: u64,
    /// The longest exchange.
    pub longest_exchange: Duration,
    /// Every delay the loop chose, in order (capped).
    pub waits: Vec<Duration>,
    /// Consecutive transient failures so far.
    pub transient_failures: u32,
}

/// The reconcile state of one operation: everything the loop needs to continue, so it can be
/// persisted between steps. `Debug` shows neither the key nor the source.
#[derive(Clone)]
pub struct Operation {
    key: String,
    request: ExecuteRequest,
    /// The provider operation id, once a receipt was read.
    pub operation_id: Option<String>,
    /// The last ETag.
    pub etag: Option<String>,
    /// The last snapshot read.
    pub snapshot: Option<Snapshot>,
    /// The stage.
    pub stage: Stage,
    /// A cancel is wanted (set by [`Operation::request_cancel`]).
    pub cancel_wanted: bool,
    /// The cancel was accepted by the service.
    pub cancel_sent: bool,
    /// Counters.
    pub stats: Stats,
}

execseam_adapter_kit::debug_fields!(self => Operation {
    operation_id: self.operation_id,
    etag: self.etag,
    stage: self.stage,
    cancel_wanted: self.cancel_wanted,
    cancel_sent: self.cancel_sent,
    request: self.request,
    stats: self.stats,
});

impl Operation {
    /// A new operation to submit under `key` (validated: [`wire::check_idempotency_key`]) with
    /// `request` (validated: [`ExecuteRequest::validate`]). Fails before any I/O.
    pub fn new(key: impl Into<String>, request: ExecuteRequest) -> Result<Operation, Error> {
        let key = key.into();
        wire::check_idempotency_key(&key).map_err(|m| {
            SUBMIT
                .error(ErrorKind::InvalidCommand, m)
                .with_retry(Retry::Never)
        })?;
        request.validate().map_err(|m| {
            SUBMIT
                .error(ErrorKind::InvalidCommand, m)
                .with_retry(Retry::Never)
        })?;
        Ok(Operation {
            key,
            request,
            operation_id: None,
            etag: None,
            snapshot: None,
            stage: Stage::Submit,
            cancel_wanted: false,
            cancel_sent: false,
            stats: Stats::default(),
        })
    }

    /// Resumes an operation whose id is known (for example from persisted state): the loop starts
    /// with a status read and never submits.
    pub fn resume(
        key: impl Into<String>,
        request: ExecuteRequest,
        operation_id: impl Into<String>,
        etag: Option<String>,
    ) -> Result<Operation, Error> {
        let mut op = Operation::new(key, request)?;
        let id = operation_id.into();
        if !wire::valid_operation_id(&id) {
            return Err(STATUS.error(
                ErrorKind::InvalidCommand,
                format!("{id:?} is not an operation id"),
            ));
        }
        op.operation_id = Some(id);
        op.etag = etag;
        op.stage = Stage::Status;
        Ok(op)
    }

    /// The idempotency key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The request.
    pub fn request(&self) -> &ExecuteRequest {
        &self.request
    }

    /// Asks the loop to cancel the operation at its next step.
    pub fn request_cancel(&mut self) {
        self.cancel_wanted = true;
    }
}

/// The durable client. Cheap to clone.
#[derive(Clone)]
pub struct DurableClient {
    transport: Arc<dyn Transport>,
    sleep: Arc<dyn Sleep>,
    policy: DurablePolicy,
}

execseam_adapter_kit::debug_fields!(self => DurableClient { policy: self.policy });

fn exchange_error(op: Call, e: &Error) -> bool {
    e.kind() == ErrorKind::Timeout(execseam_core::Deadline::Request)
        && e.operation() == op.operation
}

impl DurableClient {
    /// A client over HTTP for `config` (its root, tokens and [`DurablePolicy`]).
    pub fn new(config: ChronoConfig) -> Result<DurableClient, Error> {
        let policy = config.policy;
        let transport = HttpTransport::new(Arc::new(config))?;
        Ok(DurableClient::with_transport(Arc::new(transport), policy))
    }

    /// A client over any transport.
    pub fn with_transport(transport: Arc<dyn Transport>, policy: DurablePolicy) -> DurableClient {
        DurableClient {
            transport,
            sleep: Arc::new(TokioSleep),
            policy,
        }
    }

    /// Replaces how the loop waits.
    #[must_use]
    pub fn with_sleep(mut self, sleep: Arc<dyn Sleep>) -> DurableClient {
        self.sleep = sleep;
        self
    }

    /// The same client with other timing rules.
    #[must_use]
    pub fn with_policy(mut self, policy: DurablePolicy) -> DurableClient {
        self.policy = policy;
        self
    }

    /// The timing rules.
    pub fn policy(&self) -> DurablePolicy {
        self.policy
    }

    async fn send(&self, ex: Exchange, stats: Option<&mut Stats>) -> Result<Answer, Error> {
        let op = ex.op;
        let started = Instant::now();
        let bound = ex.timeout;
        // The transport bounds the exchange too; this bound holds whatever the transport does.
        let r = match tokio::time::timeout(bound, self.transport.send(ex)).await {
            Ok(r) => r,
            Err(_) => Err(op
                .error(
                    ErrorKind::Timeout(execseam_core::Deadline::Request),
                    format!("the exchange took longer than {bound:?}"),
                )
                .with_retry(if op == EXECUTE {
                    Retry::Unsafe
                } else {
                    Retry::SAFE
                })),
        };
        if let Some(s) = stats {
            s.exchanges += 1;
            s.longest_exchange = s.longest_exchange.max(started.elapsed());
            if let Err(e) = &r
                && exchange_error(op, e)
            {
                s.timeouts += 1;
            }
        }
        r
    }

    fn exchange(&self, op: Call, method: Method, path: String) -> Exchange {
        Exchange {
            method,
            path,
            headers: Vec::new(),
            body: None,
            timeout: self.policy.exchange_timeout,
            op,
        }
    }

    /// `POST /executions` once, with `Idempotency-Key: key`. Validates the key and the request
    /// first (no I/O on failure). An error's retry class describes a resend **with the same
    /// key**: safe whenever the outcome is unknown.
    pub async fn submit(&self, key: &str, request: &ExecuteRequest) -> Result<Accepted, Error> {
        let op = Operation::new(key, request.clone())?;
        self.submit_with(&op.key, &op.request, None).await
    }

    async fn submit_with(
        &self,
        key: &str,
        request: &ExecuteRequest,
        stats: Option<&mut Stats>,
    ) -> Result<Accepted, Error> {
        let mut ex = self.exchange(SUBMIT, Method::Post, wire::path::EXECUTIONS.to_owned());
        ex.headers.push((IDEMPOTENCY_KEY_HEADER, key.to_owned()));
        ex.body = Some(request.to_json());
        let a = self.send(ex, stats).await?;
        if a.status != 202 {
            return Err(from_status(a.status, a.retry_delay(), &a.body, SUBMIT));
        }
        let receipt = wire::parse_receipt(&a.body)
            .map_err(|m| protocol(SUBMIT, format!("an unreadable 202 receipt: {m}")))?;
        Ok(Accepted {
            receipt,
            location: a.header("location").map(str::to_owned),
            retry_after: a.retry_delay(),
        })
    }

    /// `GET /executions/{id}` once, with `If-None-Match` when `etag` is given.
    pub async fn status(
        &self,
        operation_id: &str,
        etag: Option<&str>,
    ) -> Result<StatusAnswer, Error> {
        self.status_with(operation_id, etag, None).await
    }

    async fn status_with(
        &self,
        operation_id: &str,
        etag: Option<&str>,
        stats: Option<&mut Stats>,
    ) -> Result<StatusAnswer, Error> {
        check_id(operation_id, STATUS)?;
        let mut ex = self.exchange(STATUS, Method::Get, wire::path::status(operation_id));
        if let Some(tag) = etag {
            ex.headers.push(("If-None-Match", tag.to_owned()));
        }
        let a = self.send(ex, stats).await?;
        let etag_of = |a: &Answer, what: &str| -> Result<String, Error> {
            match a.header("etag") {
                Some(t) if wire::valid_etag(t) => Ok(t.to_owned()),
                Some(t) => Err(protocol(
                    STATUS,
                    format!("{what} with an invalid ETag {t:?}"),
                )),
                None => Err(protocol(STATUS, format!("{what} without an ETag"))),
            }
        };
        match a.status {
            200 => {
                let snapshot = wire::parse_snapshot(&a.body, operation_id)
                    .map_err(|m| protocol(STATUS, format!("a malformed status: {m}")))?;
                Ok(StatusAnswer::Snapshot {
                    etag: etag_of(&a, "a status")?,
                    retry_after: a.retry_delay(),
                    snapshot,
                })
            }
            304 => Ok(StatusAnswer::NotModified {
                etag: etag_of(&a, "a 304")?,
                retry_after: a.retry_delay(),
            }),
            s => Err(from_status(s, a.retry_delay(), &a.body, STATUS)),
        }
    }

    /// `GET /executions/{id}/result` once.
    pub async fn result(&self, operation_id: &str) -> Result<ResultAnswer, Error> {
        self.result_with(operation_id, None).await
    }

    async fn result_with(
        &self,
        operation_id: &str,
        stats: Option<&mut Stats>,
    ) -> Result<ResultAnswer, Error> {
        check_id(operation_id, RESULT)?;
        let ex = self.exchange(RESULT, Method::Get, wire::path::result(operation_id));
        let a = self.send(ex, stats).await?;
        match a.status {
            200 => wire::parse_completion(&a.body)
                .map(ResultAnswer::Ready)
                .map_err(|m| protocol(RESULT, format!("a malformed result: {m}"))),
            409 if wire::error_code(&a.body).as_deref() == Some(codes::OPERATION_NOT_TERMINAL) => {
                Ok(ResultAnswer::Pending {
                    retry_after: a.retry_delay(),
                })
            }
            s => Err(from_status(s, a.retry_delay(), &a.body, RESULT)),
        }
    }

    /// `POST /executions/{id}/cancel` once (body `{}`): the snapshot and ETag of the answer.
    pub async fn cancel(&self, operation_id: &str) -> Result<(Snapshot, String), Error> {
        self.cancel_with(operation_id, None).await
    }

    async fn cancel_with(
        &self,
        operation_id: &str,
        stats: Option<&mut Stats>,
    ) -> Result<(Snapshot, String), Error> {
        check_id(operation_id, CANCEL)?;
        let mut ex = self.exchange(CANCEL, Method::Post, wire::path::cancel(operation_id));
        ex.body = Some(CANCEL_BODY.as_bytes().to_vec());
        let a = self.send(ex, stats).await?;
        match a.status {
            200 | 202 => {
                let snapshot = wire::parse_snapshot(&a.body, operation_id)
                    .map_err(|m| protocol(CANCEL, format!("a malformed cancel answer: {m}")))?;
                let etag = a
                    .header("etag")
                    .filter(|t| wire::valid_etag(t))
                    .ok_or_else(|| protocol(CANCEL, "a cancel answer without a valid ETag"))?
                    .to_owned();
                Ok((snapshot, etag))
            }
            s => Err(from_status(s, a.retry_delay(), &a.body, CANCEL)),
        }
    }

    /// One step of the reconcile loop: at most one exchange (a pending cancel first), then the
    /// delay before the next step or the terminal outcome. `Err` is a definitive failure
    /// (rejected credentials, a malformed status, too many transient failures in a row).
    pub async fn step(&self, op: &mut Operation) -> Result<Progress, Error> {
        if op.cancel_wanted
            && !op.cancel_sent
            && let Some(id) = op.operation_id.clone()
        {
            return match self.cancel_with(&id, Some(&mut op.stats)).await {
                Ok((snapshot, etag)) => {
                    op.cancel_sent = true;
                    op.etag = Some(etag);
                    self.after_snapshot(op, snapshot, None)
                }
                Err(e) => self.failed(op, e),
            };
        }
        match op.stage {
            Stage::Submit => {
                op.stats.submits += 1;
                match self
                    .submit_with(&op.key, &op.request, Some(&mut op.stats))
                    .await
                {
                    Ok(a) => {
                        op.operation_id = Some(a.receipt.operation_id);
                        op.stage = Stage::Status;
                        op.stats.transient_failures = 0;
                        Ok(self.wait(op, a.retry_after))
                    }
                    Err(e) => self.failed(op, e),
                }
            }
            Stage::Status => {
                let id = op.operation_id.clone().expect("an id in the status stage");
                let etag = op.etag.clone();
                if etag.is_some() {
                    op.stats.conditional += 1;
                }
                match self
                    .status_with(&id, etag.as_deref(), Some(&mut op.stats))
                    .await
                {
                    Ok(StatusAnswer::Snapshot {
                        snapshot,
                        etag,
                        retry_after,
                    }) => {
                        op.etag = Some(etag);
                        op.stats.transient_failures = 0;
                        self.after_snapshot(op, snapshot, retry_after)
                    }
                    Ok(StatusAnswer::NotModified { etag, retry_after }) => {
                        op.etag = Some(etag);
                        op.stats.not_modified += 1;
                        op.stats.transient_failures = 0;
                        Ok(self.wait(op, retry_after))
                    }
                    Err(e) => self.failed(op, e),
                }
            }
            Stage::Result => {
                let id = op.operation_id.clone().expect("an id in the result stage");
                match self.result_with(&id, Some(&mut op.stats)).await {
                    Ok(ResultAnswer::Ready(c)) => Ok(Progress::Done(terminal_of(id, c, op))),
                    Ok(ResultAnswer::Pending { retry_after }) => {
                        op.stage = Stage::Status;
                        op.stats.transient_failures = 0;
                        Ok(self.wait(op, retry_after))
                    }
                    Err(e) => self.failed(op, e),
                }
            }
        }
    }

    fn wait(&self, op: &mut Operation, retry_after: Option<Duration>) -> Progress {
        let d = self.policy.delay(retry_after);
        op.stats.waits.push(d);
        Progress::Wait(d)
    }

    fn after_snapshot(
        &self,
        op: &mut Operation,
        snapshot: Snapshot,
        retry_after: Option<Duration>,
    ) -> Result<Progress, Error> {
        let id = snapshot.operation_id.clone();
        let status = snapshot.status;
        op.snapshot = Some(snapshot);
        Ok(match status {
            Status::Succeeded | Status::Failed => {
                op.stage = Stage::Result;
                Progress::Wait(Duration::ZERO)
            }
            Status::Cancelled => Progress::Done(Terminal::Cancelled {
                operation_id: id,
                snapshot: op.snapshot.clone(),
            }),
            Status::OutcomeUncertain => Progress::Done(Terminal::OutcomeUncertain {
                operation_id: id,
                snapshot: op.snapshot.clone(),
            }),
            _ => {
                op.stage = Stage::Status;
                self.wait(op, retry_after)
            }
        })
    }

    /// Classifies a failed exchange: a typed terminal, a transient failure (wait and step again),
    /// or a definitive error.
    fn failed(&self, op: &mut Operation, e: Error) -> Result<Progress, Error> {
        let status = match e.status() {
            Some(WireStatus::Http(s)) => Some(s),
            _ => None,
        };
        if e.code() == Some(codes::IDEMPOTENCY_KEY_REUSE) {
            return Ok(Progress::Done(Terminal::KeyReused));
        }
        if let Some(id) = op.operation_id.clone() {
            if status == Some(410) || e.code() == Some(codes::OPERATION_EXPIRED) {
                return Ok(Progress::Done(Terminal::Expired { operation_id: id }));
            }
            if status == Some(404) {
                return Ok(Progress::Done(Terminal::NotFound { operation_id: id }));
            }
        }
        // Nothing ever reached the service: report it rather than knock on a dead door.
        if op.operation_id.is_none()
            && op.stats.submits == 1
            && e.status().is_none()
            && e.message()
                .starts_with(execseam_adapter_kit::retry::NoAnswer::Connect.describe())
        {
            return Err(e);
        }
        // A malformed status or result is definitive; an unreadable receipt is not (the submit
        // outcome is unknown: resend with the same key).
        let malformed = e.kind() == ErrorKind::Protocol && e.operation() != SUBMIT.operation;
        if malformed || !e.retry().is_safe() {
            return Err(e);
        }
        op.stats.transient_failures += 1;
        if op.stats.transient_failures > self.policy.max_transient_failures {
            return Err(e);
        }
        tracing::debug!(
            provider = crate::PROVIDER,
            operation = e.operation(),
            kind = ?e.kind(),
            failures = op.stats.transient_failures,
            "transient durable failure, rescheduling"
        );
        Ok(self.wait(op, e.retry().after()))
    }

    /// Submits `request` under `key` and reconciles until the operation is terminal.
    pub async fn run(&self, key: &str, request: &ExecuteRequest) -> Result<Terminal, Error> {
        let mut op = Operation::new(key, request.clone())?;
        self.run_operation(&mut op, std::future::pending()).await
    }

    /// Reconciles `op` until it is terminal. When `cancel` completes, the next step sends a
    /// cancel and the loop goes on until the service reports the terminal state.
    pub async fn run_operation(
        &self,
        op: &mut Operation,
        cancel: impl Future<Output = ()>,
    ) -> Result<Terminal, Error> {
        let mut cancel = std::pin::pin!(cancel);
        let mut cancel_fired = false;
        loop {
            match self.step(op).await? {
                Progress::Done(t) => return Ok(t),
                Progress::Wait(d) if d.is_zero() => {}
                Progress::Wait(d) => {
                    if cancel_fired {
                        self.sleep.sleep(d).await;
                        continue;
                    }
                    tokio::select! {
                        () = self.sleep.sleep(d) => {}
                        () = &mut cancel => {
                            cancel_fired = true;
                            op.request_cancel();
                        }
                    }
                }
            }
        }
    }
}

fn terminal_of(id: String, c: Completion, op: &Operation) -> Terminal {
    match c {
        Completion::Ran { output, error, .. } => Terminal::Ran {
            operation_id: id,
            output,
            error,
        },
        Completion::NoOutput { error, .. } => match error.code.as_str() {
            codes::EXECUTION_CANCELLED => Terminal::Cancelled {
                operation_id: id,
                snapshot: op.snapshot.clone(),
            },
            codes::OUTCOME_UNCERTAIN => Terminal::OutcomeUncertain {
                operation_id: id,
                snapshot: op.snapshot.clone(),
            },
            _ => Terminal::Failed {
                operation_id: id,
                error,
            },
        },
    }
}

fn check_id(id: &str, op: Call) -> Result<(), Error> {
    if wire::valid_operation_id(id) {
        Ok(())
    } else {
        Err(op
            .error(
                ErrorKind::InvalidCommand,
                format!(
                    "{:?} is not an operation id (`op_` + 32 of [A-Za-z0-9_-])",
                    id.chars().take(40).collect::<String>()
                ),
            )
            .with_retry(Retry::Never))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::{ID, Script, answer};
    use crate::wire::Language;

    fn receipt() -> String {
        format!(
            r#"{{"operation_id":"{ID}","status":"queued","status_url":"https://elsewhere.example/x","created_at":"2026-08-14T10:00:00Z","expires_at":"2026-08-15T10:00:00Z"}}"#
        )
    }

    fn snapshot(status: &str, version: i64) -> String {
        format!(
            r#"{{"operation_id":"{ID}","status":"{status}","phase":"execute","cleanup_status":"not_started","version":{version},"cancel_requested":false,"result_available":false,"created_at":"2026-08-14T10:00:00Z","updated_at":"2026-08-14T10:00:00Z","expires_at":"2026-08-15T10:00:00Z"}}"#
        )
    }

    fn client(script: Arc<Script>) -> DurableClient {
        DurableClient::with_transport(script, DurablePolicy::default())
    }

    fn op() -> Operation {
        Operation::new(
            "tool:v1:operation:k",
            ExecuteRequest::new(Language::Python, "print(1)", 5),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn paths_come_from_the_id_and_etags_are_sent_back() {
        // Aevatar test SubmitAsync_UsesPublicApiAndBuildsCanonicalPathsFromOperationId.
        let s = Arc::new(Script::default());
        s.answers.lock().unwrap().extend([
            answer(
                202,
                &[
                    ("location", "https://elsewhere.example/x"),
                    ("retry-after", "0"),
                ],
                &receipt(),
            ),
            answer(
                200,
                &[("etag", "\"v2\""), ("retry-after", "3600")],
                &snapshot("running", 2),
            ),
            answer(304, &[("etag", "\"v2\"")], ""),
            answer(200, &[("etag", "\"v3\"")], &snapshot("succeeded", 3)),
            answer(
                200,
                &[],
                r#"{"success":true,"output":{"stdout":"1\n","stderr":"","exit_code":0}}"#,
            ),
        ]);
        let c = client(s.clone());
        let mut o = op();
        let mut waits = Vec::new();
        let t = loop {
            match c.step(&mut o).await.unwrap() {
                Progress::Wait(d) => waits.push(d),
                Progress::Done(t) => break t,
            }
        };
        assert!(matches!(t, Terminal::Ran { ref output, .. } if output.stdout == "1\n"));
        let asked = s.asked.lock().unwrap();
        let paths: Vec<&str> = asked.iter().map(|(_, p, _, _)| p.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/executions",
                &format!("/executions/{ID}"),
                &format!("/executions/{ID}"),
                &format!("/executions/{ID}"),
                &format!("/executions/{ID}/result")
            ]
        );
        assert_eq!(
            asked[0].2,
            [("Idempotency-Key", "tool:v1:operation:k".to_owned())]
        );
        assert!(asked[1].2.is_empty(), "no ETag known yet");
        assert_eq!(asked[2].2, [("If-None-Match", "\"v2\"".to_owned())]);
        // 0 from the receipt, 3600 capped to 30, 2 s default on the 304 without Retry-After.
        assert_eq!(
            waits,
            [
                Duration::ZERO,
                Duration::from_secs(30),
                Duration::from_secs(2),
                Duration::ZERO
            ]
        );
        assert_eq!(o.stats.not_modified, 1);
    }

    #[tokio::test]
    async fn an_unreadable_receipt_is_resubmitted_with_the_same_key_a_404_before_an_id_is_not() {
        let s = Arc::new(Script::default());
        s.answers.lock().unwrap().extend([
            answer(202, &[], "{\"operation_id\": \"op_"),
            answer(202, &[], &receipt()),
        ]);
        let c = client(s.clone());
        let mut o = op();
        assert!(matches!(c.step(&mut o).await.unwrap(), Progress::Wait(_)));
        assert!(o.operation_id.is_none());
        c.step(&mut o).await.unwrap();
        assert_eq!(o.operation_id.as_deref(), Some(ID));
        let keys: Vec<String> = s
            .asked
            .lock()
            .unwrap()
            .iter()
            .map(|(_, _, h, _)| h[0].1.clone())
            .collect();
        assert_eq!(keys, ["tool:v1:operation:k", "tool:v1:operation:k"]);

        // No id yet: a 404 (unknown route) is an error, not Terminal::NotFound.
        let s = Arc::new(Script::default());
        s.answers
            .lock()
            .unwrap()
            .push_back(answer(404, &[], r#"{"error":{"code":"NOT_FOUND"}}"#));
        let e = client(s).step(&mut op()).await.unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound);
    }

    #[tokio::test]
    async fn unknown_statuses_and_missing_etags_are_malformed() {
        for (status, headers, body) in [
            (200, vec![("etag", "\"v1\"")], snapshot("paused", 1)),
            (200, vec![], snapshot("running", 1)),
            (304, vec![], String::new()),
        ] {
            let s = Arc::new(Script::default());
            s.answers
                .lock()
                .unwrap()
                .push_back(answer(status, &headers, &body));
            let mut o = Operation::resume(
                "k",
                ExecuteRequest::new(Language::Bash, "", 5),
                ID,
                Some("\"v1\"".into()),
            )
            .unwrap();
            let e = client(s).step(&mut o).await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Protocol, "{status} {body}");
        }
    }

    #[tokio::test]
    async fn exchanges_are_bounded_and_a_slow_one_is_transient() {
        struct Slow;
        impl Transport for Slow {
            fn send(&self, _: Exchange) -> BoxFuture<'_, Result<Answer, Error>> {
                Box::pin(async {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    unreachable!()
                })
            }
        }
        let policy = DurablePolicy {
            exchange_timeout: Duration::from_millis(50),
            ..DurablePolicy::default()
        };
        let c = DurableClient::with_transport(Arc::new(Slow), policy);
        let mut o =
            Operation::resume("k", ExecuteRequest::new(Language::Bash, "", 5), ID, None).unwrap();
        let p = c.step(&mut o).await.unwrap();
        assert_eq!(p, Progress::Wait(Duration::from_secs(2)));
        assert_eq!((o.stats.timeouts, o.stats.transient_failures), (1, 1));
    }
}
