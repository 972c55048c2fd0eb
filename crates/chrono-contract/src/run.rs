//! How a program's run ended, and the one mapping from that end to each of the contract's
//! answers: the synchronous `/execute` reply, the `/execute/stream` final event, and the durable
//! operation's end. The emulator and `execseam serve` both end their runs here.

use serde_json::{Value, json};

use crate::contract::{self, End, Reply, error_reply};
use crate::wire::{ExecOutput, ExecuteResponse, Status, codes};

/// How a run ended.
#[derive(Clone, Debug)]
pub enum RunEnd {
    /// The program exited (any code).
    Exited(ExecOutput),
    /// `timeout_secs` passed; the program was killed.
    TimedOut,
    /// Cancelled; the program was killed.
    Cancelled,
    /// No sandbox could be had.
    CreationFailed(String),
    /// The request cannot run here (a language without its runtime, a bad input file).
    Invalid(String),
    /// The program may have run, and nothing can say how it ended: its sandbox vanished, or the
    /// backend failed after the start.
    Uncertain(String),
}

impl RunEnd {
    /// The synchronous `/execute` answer: 200 with the output (a non-zero exit is still a 200:
    /// `success:false`, `EXECUTION_FAILED`), 504 `SANDBOX_TIMEOUT`, 502
    /// `SANDBOX_CREATION_FAILED`, 400 `INVALID_REQUEST`, 503 `SANDBOX_UNREACHABLE` for an
    /// uncertain end, 500 `INTERNAL_ERROR` for a cancel (a synchronous run has none to ask for).
    pub fn reply(self) -> Reply {
        match self {
            RunEnd::Exited(out) => Reply::json(
                200,
                &ExecuteResponse::completed(out, Some(contract::diagnostic_id())),
            ),
            RunEnd::TimedOut => error_reply(
                504,
                codes::SANDBOX_TIMEOUT,
                "the program exceeded timeout_secs and was killed",
                None,
            ),
            RunEnd::CreationFailed(m) => error_reply(502, codes::SANDBOX_CREATION_FAILED, &m, None),
            RunEnd::Invalid(m) => error_reply(400, codes::INVALID_REQUEST, &m, None),
            RunEnd::Uncertain(m) => error_reply(503, codes::SANDBOX_UNREACHABLE, &m, None),
            RunEnd::Cancelled => error_reply(500, codes::INTERNAL_ERROR, "cancelled", None),
        }
    }

    /// The `/execute/stream` final event's JSON: `{"type":"complete","exit_code",
    /// "execution_time_ms"}` after an exit, else `{"type":"error","ename","evalue","traceback"}`.
    pub fn stream_event(self) -> Value {
        let (code, text) = match self {
            RunEnd::Exited(out) => {
                return json!({
                    "type": "complete",
                    "exit_code": out.exit_code,
                    "execution_time_ms": out.execution_time_ms.unwrap_or(0),
                });
            }
            RunEnd::TimedOut => (
                codes::SANDBOX_TIMEOUT,
                "the program exceeded timeout_secs".to_owned(),
            ),
            RunEnd::CreationFailed(m) => (codes::SANDBOX_CREATION_FAILED, m),
            RunEnd::Invalid(m) => (codes::INVALID_REQUEST, m),
            RunEnd::Uncertain(m) => (codes::SANDBOX_UNREACHABLE, m),
            RunEnd::Cancelled => (codes::INTERNAL_ERROR, "internal".to_owned()),
        };
        json!({"type": "error", "ename": code, "evalue": text, "traceback": []})
    }

    /// The durable operation's end: `complete` with the result, or terminal without output
    /// (`failed`, `cancelled`, `outcome_uncertain`) with its code.
    pub fn end(self) -> End {
        let without = |status, code, message: String| End::Without {
            status,
            code,
            message,
        };
        match self {
            RunEnd::Exited(out) => End::Result(ExecuteResponse::completed(
                out,
                Some(contract::diagnostic_id()),
            )),
            RunEnd::TimedOut => without(
                Status::Failed,
                codes::SANDBOX_TIMEOUT,
                "the program exceeded timeout_secs and was killed".into(),
            ),
            RunEnd::Cancelled => without(
                Status::Cancelled,
                codes::EXECUTION_CANCELLED,
                "cancelled".into(),
            ),
            RunEnd::CreationFailed(m) => without(Status::Failed, codes::SANDBOX_CREATION_FAILED, m),
            RunEnd::Invalid(m) => without(Status::Failed, codes::INVALID_REQUEST, m),
            RunEnd::Uncertain(m) => without(Status::OutcomeUncertain, codes::OUTCOME_UNCERTAIN, m),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output(code: i32) -> ExecOutput {
        ExecOutput {
            stdout: "o".into(),
            stderr: "e".into(),
            exit_code: code,
            execution_time_ms: Some(7),
            display_data: None,
            files: None,
        }
    }

    #[test]
    fn every_end_has_one_answer_per_surface() {
        let r = RunEnd::Exited(output(3)).reply();
        assert_eq!(r.status, 200);
        assert_eq!(
            RunEnd::Exited(output(3)).stream_event(),
            json!({"type": "complete", "exit_code": 3, "execution_time_ms": 7})
        );
        // An uncertain end: 503 SANDBOX_UNREACHABLE in place, OUTCOME_UNCERTAIN durably.
        let r = RunEnd::Uncertain("gone".into()).reply();
        assert_eq!(
            (r.status, crate::wire::error_code(&r.body).as_deref()),
            (503, Some(codes::SANDBOX_UNREACHABLE))
        );
        assert_eq!(
            RunEnd::Uncertain("gone".into()).stream_event()["ename"],
            codes::SANDBOX_UNREACHABLE
        );
        match RunEnd::Uncertain("gone".into()).end() {
            End::Without { status, code, .. } => {
                assert_eq!(
                    (status, code),
                    (Status::OutcomeUncertain, codes::OUTCOME_UNCERTAIN)
                );
            }
            End::Result(_) => panic!("an uncertain end has no result"),
        }
        assert_eq!(RunEnd::TimedOut.reply().status, 504);
        assert_eq!(RunEnd::Invalid("x".into()).reply().status, 400);
        assert_eq!(RunEnd::CreationFailed("x".into()).reply().status, 502);
        assert_eq!(RunEnd::Cancelled.reply().status, 500);
    }
}
