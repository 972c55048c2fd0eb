//! Chrono Sandbox's wire contract: request and response bodies, the status enumerations, the
//! error-code table, the idempotency-key rule, ETags, `Retry-After` and timestamps.
//!
//! Everything here is usable by a client and by a server (`execseam serve` serves this contract).
//! No public Chrono server exists: the contract is reconstructed from its clients, Aevatar's
//! `NyxIdCodeExecutionPort{,.Durable}.cs` and their tests, Ornn's `sandboxClient.ts`, and
//! Aevatar's `docs/canon/sandbox-execution.md` (seed 004). Each item cites its source
//! (`research/ax-agentcore-chrono.md` §3 has the details).
//!
//! Parsing is strict where Aevatar is strict (unknown enum values, booleans as strings, a
//! `success:true` with a non-zero exit are all malformed) and lenient about unknown fields.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// `timeout_secs` when the caller gives none (Aevatar always sends it: default 180).
pub const DEFAULT_TIMEOUT_SECS: u32 = 180;
/// The smallest accepted `timeout_secs` (Aevatar rejects others before dispatch).
pub const MIN_TIMEOUT_SECS: u32 = 1;
/// The largest accepted `timeout_secs`.
pub const MAX_TIMEOUT_SECS: u32 = 600;
/// Aevatar's response size limit: a larger answer is `response_too_large`.
pub const MAX_RESPONSE_BYTES: usize = 1_048_576;
/// The request header carrying the idempotency key of `POST /executions`.
pub const IDEMPOTENCY_KEY_HEADER: &str = "Idempotency-Key";
/// The prefix of Aevatar's operation keys (`tool:v1:operation:<64 lowercase hex>`).
pub const OPERATION_KEY_PREFIX: &str = "tool:v1:operation:";
/// The body of `POST /executions/{id}/cancel`: exactly `{}` (Durable.cs `DurableCancelBody`).
pub const CANCEL_BODY: &str = "{}";

/// The paths, relative to the service root (directly `{base}`, through NyxID
/// `{nyxid}/api/v1/proxy/s/{slug}`). Status, result and cancel paths are always rebuilt from the
/// operation id, never taken from a receipt's URLs (Aevatar test
/// `SubmitAsync_UsesPublicApiAndBuildsCanonicalPathsFromOperationId`).
pub mod path {
    /// `POST`: synchronous execution.
    pub const EXECUTE: &str = "/execute";
    /// `POST`: synchronous execution, answered as Server-Sent Events (Ornn).
    pub const EXECUTE_STREAM: &str = "/execute/stream";
    /// `POST`: submit an asynchronous execution.
    pub const EXECUTIONS: &str = "/executions";

    /// `GET`: the status of an operation.
    pub fn status(operation_id: &str) -> String {
        format!("/executions/{operation_id}")
    }

    /// `GET`: the result of an operation.
    pub fn result(operation_id: &str) -> String {
        format!("/executions/{operation_id}/result")
    }

    /// `POST` (body `{}`): cancel an operation.
    pub fn cancel(operation_id: &str) -> String {
        format!("/executions/{operation_id}/cancel")
    }
}

// ---------------------------------------------------------------------------------------------
// Requests

/// The language of a program (Aevatar's `code_execute` enum).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    /// Python 3.
    Python,
    /// JavaScript (Node.js).
    Javascript,
    /// TypeScript.
    Typescript,
    /// Bash.
    Bash,
}

impl Language {
    /// Every language, in the order of the enum.
    pub const ALL: [Language; 4] = [
        Language::Python,
        Language::Javascript,
        Language::Typescript,
        Language::Bash,
    ];

    /// The wire name (`python`, `javascript`, `typescript`, `bash`).
    pub fn as_str(&self) -> &'static str {
        match self {
            Language::Python => "python",
            Language::Javascript => "javascript",
            Language::Typescript => "typescript",
            Language::Bash => "bash",
        }
    }
}

impl fmt::Display for Language {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Language {
    type Err = String;

    /// The wire names; `js`, `ts`, `py` and `sh` are not accepted (the enum is closed).
    fn from_str(s: &str) -> Result<Language, String> {
        Language::ALL
            .into_iter()
            .find(|l| l.as_str() == s)
            .ok_or_else(|| {
                format!("unknown language {s:?}: want python, javascript, typescript or bash")
            })
    }
}

/// A file placed in the sandbox before the program runs (Ornn's `input_files`).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputFile {
    /// The path, relative to the program's working directory or absolute.
    pub path: String,
    /// The bytes, standard base64.
    pub content: String,
}

impl fmt::Debug for InputFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InputFile")
            .field("path", &self.path)
            .field(
                "content",
                &format_args!("<{} base64 chars>", self.content.len()),
            )
            .finish()
    }
}

/// `output_type` (Ornn): `text`, the default, or `file`: the files `retrieve_files` names come
/// back in `output.files`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputType {
    /// stdout and stderr only.
    Text,
    /// Also the files `retrieve_files` names.
    File,
}

/// The environment variables the server owns (seed 004: "Caller-authored environment values
/// cannot override either server-owned NyxID variable"): a caller's values for these never reach
/// the program.
pub const SERVER_OWNED_ENV: [&str; 2] = ["NYXID_API_KEY", "NYXID_BASE_URL"];

/// The most `dependencies` one request may name (Chrono's `MAX_DEPENDENCIES` knob; its value
/// is not published: chosen).
pub const MAX_DEPENDENCIES: usize = 64;

/// The body of `POST /execute`, `POST /execute/stream` and `POST /executions`.
///
/// Serialised in Aevatar's key order (`language`, `script`, `timeout_secs`), then Ornn's optional
/// fields when set. `Debug` never shows the script, env values or file contents.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecuteRequest {
    /// The language.
    pub language: Language,
    /// The exact program source.
    pub script: String,
    /// Server-side time limit in seconds, 1..=600. Aevatar always sends it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u32>,
    /// Environment variables (Ornn). They cannot override `NYXID_API_KEY`/`NYXID_BASE_URL`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Files written before the program runs (Ornn).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub input_files: Vec<InputFile>,
    /// Packages installed before the program runs (Ornn): pip requirements for Python, npm
    /// package specs for JavaScript and TypeScript. A failed install is
    /// `DEPENDENCY_INSTALL_FAILED` with the installer's output, and the program does not run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dependencies: Vec<String>,
    /// `text` (the default when absent) or `file` (Ornn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_type: Option<OutputType>,
    /// Glob patterns, relative to the working directory (`/workspace`), of the files to return
    /// in `output.files`; only with `output_type: "file"` (Ornn).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retrieve_files: Vec<String>,
    /// Whether the program may reach the network (Ornn's client sends `true` by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_enabled: Option<bool>,
    /// `{"cpu", "memory"}` limits (Ornn), kept as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<serde_json::Value>,
    /// A custom sandbox image (Ornn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
}

impl fmt::Debug for ExecuteRequest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecuteRequest")
            .field("language", &self.language)
            .field("script", &format_args!("<{} bytes>", self.script.len()))
            .field("timeout_secs", &self.timeout_secs)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("input_files", &self.input_files)
            .field("dependencies", &self.dependencies)
            .field("output_type", &self.output_type)
            .field("retrieve_files", &self.retrieve_files)
            .field("network_enabled", &self.network_enabled)
            .field("resources", &self.resources)
            .field("image", &self.image)
            .finish()
    }
}

impl ExecuteRequest {
    /// Aevatar's request: `{"language", "script", "timeout_secs"}`.
    pub fn new(language: Language, script: impl Into<String>, timeout_secs: u32) -> ExecuteRequest {
        ExecuteRequest {
            language,
            script: script.into(),
            timeout_secs: Some(timeout_secs),
            env: BTreeMap::new(),
            input_files: Vec::new(),
            dependencies: Vec::new(),
            output_type: None,
            retrieve_files: Vec::new(),
            network_enabled: None,
            resources: None,
            image: None,
        }
    }

    /// What a server checks besides the timeout ([`validate`](Self::validate), whose range a
    /// server may configure) before anything runs (the emulator and `execseam serve` share
    /// it): at most [`MAX_DEPENDENCIES`] dependencies, each
    /// non-empty, on one line and not starting with `-` (it would be an installer option, as
    /// `--index-url=…` or `-r FILE`); none for `bash`, which has no package manager;
    /// `retrieve_files` only with `output_type: "file"` (the contract: files are retrieved
    /// "only when output_type='file'"); `resources` and `image` are refused, since no execseam
    /// server can honour them. The message names the field.
    pub fn check_fields(&self) -> Result<(), String> {
        if self.dependencies.len() > MAX_DEPENDENCIES {
            return Err(format!(
                "dependencies: {} named, at most {MAX_DEPENDENCIES}",
                self.dependencies.len()
            ));
        }
        for d in &self.dependencies {
            if d.trim().is_empty() || d.starts_with('-') || d.contains(['\0', '\n', '\r']) {
                return Err(format!(
                    "dependencies: {d:?} is not a package specification"
                ));
            }
        }
        if !self.dependencies.is_empty() && self.language == Language::Bash {
            return Err("dependencies: bash has no package manager".into());
        }
        if !self.retrieve_files.is_empty() && self.output_type != Some(OutputType::File) {
            return Err("retrieve_files: only with output_type \"file\"".into());
        }
        if self.resources.is_some() {
            return Err("resources: CPU and memory limits are not emulated".into());
        }
        if self.image.is_some() {
            return Err("image: custom sandbox images are not emulated".into());
        }
        Ok(())
    }

    /// Checks what Aevatar checks before any network call: `timeout_secs` in 1..=600.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(t) = self.timeout_secs {
            check_timeout(t)?;
        }
        Ok(())
    }

    /// The JSON body.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("an ExecuteRequest always serialises")
    }

    /// The payload hash a server compares for idempotency: SHA-256 (lowercase hex) of the
    /// canonical body, i.e. this request re-serialised in its fixed key order, so key order and
    /// whitespace of the submitted JSON do not matter but every value does.
    pub fn payload_hash(&self) -> String {
        sha256_hex(&self.to_json())
    }
}

/// `timeout_secs` must be in 1..=600 (Aevatar: invalid values fail before network dispatch).
pub fn check_timeout(secs: u32) -> Result<(), String> {
    if (MIN_TIMEOUT_SECS..=MAX_TIMEOUT_SECS).contains(&secs) {
        Ok(())
    } else {
        Err(format!(
            "timeout_secs {secs} is outside {MIN_TIMEOUT_SECS}..={MAX_TIMEOUT_SECS}"
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// Responses of /execute and /executions/{id}/result

/// `output` of an execution (all of `stdout`, `stderr`, `exit_code` are required when present).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecOutput {
    /// The program's stdout (text).
    pub stdout: String,
    /// The program's stderr (text).
    pub stderr: String,
    /// The exit code (int32).
    pub exit_code: i32,
    /// Wall time of the execution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub execution_time_ms: Option<u64>,
    /// Rich display data (Ornn); kept as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_data: Option<serde_json::Value>,
    /// The files `retrieve_files` named (Ornn), with `output_type: "file"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub files: Option<Vec<RetrievedFile>>,
}

/// One entry of `output.files` (Ornn's `RetrievedFile`: every field but `path` optional, and
/// absent rather than `null`): a file's bytes, or why it could not be retrieved.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetrievedFile {
    /// The path, relative to the working directory (the pattern itself when nothing matched).
    pub path: String,
    /// The bytes, standard base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// The size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Why there is no content (`no such file`, `is a directory`, `larger than N bytes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl fmt::Debug for RetrievedFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetrievedFile")
            .field("path", &self.path)
            .field(
                "content",
                &self
                    .content
                    .as_ref()
                    .map(|c| format!("<{} base64 chars>", c.len())),
            )
            .field("size", &self.size)
            .field("error", &self.error)
            .finish()
    }
}

/// `error` of a response: `{"code", "message"}`, plus `phase` on a terminal result without
/// output and Ornn's `details` (`ename`, `evalue`, `traceback`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// UPPER_SNAKE code (see [`codes`]).
    pub code: String,
    /// Human-readable text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The phase the operation ended in (terminal result without output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// Ornn's `details`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
}

impl ErrorBody {
    /// `{"code", "message"}`.
    pub fn new(code: &str, message: impl Into<String>) -> ErrorBody {
        ErrorBody {
            code: code.to_owned(),
            message: Some(message.into()),
            phase: None,
            details: None,
        }
    }
}

/// The body of `/execute` answers (200 and errors) and of `GET /executions/{id}/result`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecuteResponse {
    /// True only for a completed execution with exit code 0.
    pub success: bool,
    /// The program's output, when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<ExecOutput>,
    /// Why it did not succeed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
    /// A diagnostic id for support (`[A-Za-z0-9_.:-]{1,128}`, else ignored by clients).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diagnostic_id: Option<String>,
}

impl ExecuteResponse {
    /// The answer for a program that ran: `success` iff exit 0; otherwise `EXECUTION_FAILED`.
    pub fn completed(output: ExecOutput, diagnostic_id: Option<String>) -> ExecuteResponse {
        let success = output.exit_code == 0;
        let error = (!success).then(|| {
            ErrorBody::new(
                codes::EXECUTION_FAILED,
                format!("the program exited with code {}", output.exit_code),
            )
        });
        ExecuteResponse {
            success,
            output: Some(output),
            error,
            diagnostic_id,
        }
    }

    /// The answer for a failed dependency install (Aevatar's `ParseResponse` requires the
    /// output on every 200): `success:false`, the installer's output and non-zero exit code,
    /// `DEPENDENCY_INSTALL_FAILED`. The program did not run.
    pub fn dependencies_failed(
        installer: &str,
        output: ExecOutput,
        diagnostic_id: Option<String>,
    ) -> ExecuteResponse {
        let message = format!(
            "dependency installation failed ({installer} exited {})",
            output.exit_code
        );
        ExecuteResponse {
            success: false,
            output: Some(output),
            error: Some(ErrorBody::new(codes::DEPENDENCY_INSTALL_FAILED, message)),
            diagnostic_id,
        }
    }

    /// An error answer: `{"success": false, "error": {...}, "diagnostic_id"}`.
    pub fn error(error: ErrorBody, diagnostic_id: Option<String>) -> ExecuteResponse {
        ExecuteResponse {
            success: false,
            output: None,
            error: Some(error),
            diagnostic_id,
        }
    }
}

/// A validated `/execute` (or result) answer, read as Aevatar's `ParseResponse` reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Completion {
    /// The program ran. `success` iff `exit_code == 0`; a failure carries `EXECUTION_FAILED` or
    /// `DEPENDENCY_INSTALL_FAILED` (or another code) in `error`.
    Ran {
        /// The output.
        output: ExecOutput,
        /// The error object of a completed-with-failure answer.
        error: Option<ErrorBody>,
        /// A valid diagnostic id, if one was sent.
        diagnostic_id: Option<String>,
    },
    /// A terminal operation without output: `EXECUTION_CANCELLED`, `OUTCOME_UNCERTAIN`,
    /// `SANDBOX_TIMEOUT`, …
    NoOutput {
        /// The error object.
        error: ErrorBody,
        /// A valid diagnostic id, if one was sent.
        diagnostic_id: Option<String>,
    },
}

/// Parses a 200 answer of `/execute` or `/executions/{id}/result`, enforcing Aevatar's
/// invariants (`NyxIdCodeExecutionPort.ParseResponse`): `success:true` requires exit code 0 and
/// no `error`; `success:false` with `output` requires a non-zero exit code and an `error`
/// object; `success:false` without `output` requires an `error` (terminal without output).
pub fn parse_completion(body: &[u8]) -> Result<Completion, String> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("not valid JSON ({e})"))?;
    let obj = value
        .as_object()
        .ok_or_else(|| format!("not a JSON object: {}", clip(&value.to_string())))?;
    if obj.get("success").is_some_and(|v| !v.is_boolean()) {
        return Err("`success` is not a JSON boolean".into());
    }
    let r: ExecuteResponse =
        serde_json::from_value(value).map_err(|e| format!("a field has the wrong shape: {e}"))?;
    let diagnostic_id = r.diagnostic_id.filter(|d| valid_diagnostic_id(d));
    match (r.success, r.output, r.error) {
        (true, Some(output), None) if output.exit_code == 0 => Ok(Completion::Ran {
            output,
            error: None,
            diagnostic_id,
        }),
        (true, Some(output), None) => Err(format!(
            "`success:true` with exit code {}",
            output.exit_code
        )),
        (true, _, Some(e)) => Err(format!("`success:true` with an error {:?}", e.code)),
        (true, None, None) => Err("`success:true` without an output".into()),
        (false, Some(output), Some(error)) if output.exit_code != 0 => Ok(Completion::Ran {
            output,
            error: Some(error),
            diagnostic_id,
        }),
        (false, Some(_), Some(_)) => Err("`success:false` with exit code 0".into()),
        (false, Some(_), None) => Err("`success:false` with an output but no error".into()),
        (false, None, Some(error)) => Ok(Completion::NoOutput {
            error,
            diagnostic_id,
        }),
        (false, None, None) => Err("`success:false` without an output or an error".into()),
    }
}

// ---------------------------------------------------------------------------------------------
// Asynchronous executions

/// `status` of an operation (Durable.cs; unknown values are malformed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Accepted, not started.
    Queued,
    /// A sandbox is being created.
    Provisioning,
    /// Inputs and dependencies are being prepared.
    Preparing,
    /// The program runs.
    Running,
    /// Output is being collected.
    Collecting,
    /// Terminal: the program ran and exited 0.
    Succeeded,
    /// Terminal: the program ran and failed, or the execution failed.
    Failed,
    /// Terminal: cancelled.
    Cancelled,
    /// Terminal: the service cannot tell whether the program ran.
    OutcomeUncertain,
}

impl Status {
    /// Every status, in the order of the enum.
    pub const ALL: [Status; 9] = [
        Status::Queued,
        Status::Provisioning,
        Status::Preparing,
        Status::Running,
        Status::Collecting,
        Status::Succeeded,
        Status::Failed,
        Status::Cancelled,
        Status::OutcomeUncertain,
    ];

    /// `succeeded`, `failed`, `cancelled`, `outcome_uncertain`.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            Status::Succeeded | Status::Failed | Status::Cancelled | Status::OutcomeUncertain
        )
    }

    /// Terminal with a result worth fetching (`succeeded`, `failed`); `cancelled` and
    /// `outcome_uncertain` are typed outcomes without a fetch (seed 004, rule 4).
    pub fn has_result(&self) -> bool {
        matches!(self, Status::Succeeded | Status::Failed)
    }

    /// The wire name.
    pub fn as_str(&self) -> &'static str {
        match self {
            Status::Queued => "queued",
            Status::Provisioning => "provisioning",
            Status::Preparing => "preparing",
            Status::Running => "running",
            Status::Collecting => "collecting",
            Status::Succeeded => "succeeded",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
            Status::OutcomeUncertain => "outcome_uncertain",
        }
    }
}

/// `phase` of an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Waiting to start.
    Queued,
    /// Creating the sandbox.
    SandboxCreate,
    /// The sandbox is ready.
    SandboxReady,
    /// Writing input files.
    InputWrite,
    /// Installing dependencies.
    DependencyInstall,
    /// Running the program.
    Execute,
    /// Collecting output.
    Collect,
    /// Removing the sandbox.
    CleaningUp,
    /// Done.
    Complete,
}

/// `cleanup_status` of an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CleanupStatus {
    /// Nothing to clean yet.
    NotStarted,
    /// Cleanup is due.
    Pending,
    /// Cleanup runs.
    Running,
    /// Cleanup failed and will be retried.
    Retry,
    /// Cleaned up.
    Complete,
}

/// The 202 body of `POST /executions`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    /// `op_` + 32 × `[A-Za-z0-9_-]` (see [`valid_operation_id`]).
    pub operation_id: String,
    /// `queued` on a fresh operation (a replay reports the current status).
    pub status: Status,
    /// Provider metadata; clients ignore it and rebuild paths from the id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_url: Option<String>,
    /// Provider metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_url: Option<String>,
    /// Provider metadata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_url: Option<String>,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339, not before `created_at`.
    pub expires_at: String,
}

/// `failure` of a snapshot: why the operation failed or was cancelled.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// The code (`EXECUTION_CANCELLED`, `SANDBOX_TIMEOUT`, …).
    pub code: String,
    /// Human-readable text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The body of `GET /executions/{id}` (200) and of the cancel answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// Must equal the id asked for.
    pub operation_id: String,
    /// The status.
    pub status: Status,
    /// The phase.
    pub phase: Phase,
    /// The cleanup status.
    pub cleanup_status: CleanupStatus,
    /// Incremented on every change; the ETag is derived from it (`"v7"`).
    pub version: i64,
    /// A cancel was requested.
    pub cancel_requested: bool,
    /// `GET …/result` has something to return.
    pub result_available: bool,
    /// RFC 3339.
    pub created_at: String,
    /// RFC 3339.
    pub updated_at: String,
    /// RFC 3339.
    pub expires_at: String,
    /// RFC 3339 once terminal.
    #[serde(default)]
    pub terminal_at: Option<String>,
    /// When the first event of the program was seen (fixtures; not read by Aevatar).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_event_at: Option<String>,
    /// When the last event was seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_event_at: Option<String>,
    /// Phase timings (fixtures; shape not specified).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timings: Option<serde_json::Value>,
    /// On failure or cancel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
}

/// Parses a receipt (202 body) as Aevatar validates it: a valid operation id, RFC 3339
/// timestamps, `expires_at >= created_at`. Unknown status values are malformed.
pub fn parse_receipt(body: &[u8]) -> Result<Receipt, String> {
    let r: Receipt = parse_object(body)?;
    if !valid_operation_id(&r.operation_id) {
        return Err(format!(
            "operation_id {:?} is not `op_` + 32 of [A-Za-z0-9_-]",
            clip(&r.operation_id)
        ));
    }
    let created = parse_rfc3339(&r.created_at)
        .ok_or_else(|| format!("created_at {:?} is not RFC 3339", clip(&r.created_at)))?;
    let expires = parse_rfc3339(&r.expires_at)
        .ok_or_else(|| format!("expires_at {:?} is not RFC 3339", clip(&r.expires_at)))?;
    if expires < created {
        return Err("expires_at is before created_at".into());
    }
    Ok(r)
}

/// Parses a status snapshot, requiring every field Aevatar requires, JSON booleans for the two
/// flags, `version >= 0`, and `operation_id == expected`.
pub fn parse_snapshot(body: &[u8], expected_id: &str) -> Result<Snapshot, String> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("not valid JSON ({e})"))?;
    let obj = value
        .as_object()
        .ok_or_else(|| format!("not a JSON object: {}", clip(&value.to_string())))?;
    for field in [
        "operation_id",
        "status",
        "phase",
        "cleanup_status",
        "version",
        "cancel_requested",
        "result_available",
        "created_at",
        "updated_at",
        "expires_at",
    ] {
        if obj.get(field).is_none_or(serde_json::Value::is_null) {
            return Err(format!("required field `{field}` is missing"));
        }
    }
    let s: Snapshot =
        serde_json::from_value(value).map_err(|e| format!("a field has the wrong shape: {e}"))?;
    if s.operation_id != expected_id {
        return Err(format!(
            "operation_id {:?} is not the one asked for",
            clip(&s.operation_id)
        ));
    }
    if s.version < 0 {
        return Err(format!("version {} is negative", s.version));
    }
    for (name, t) in [
        ("created_at", &s.created_at),
        ("updated_at", &s.updated_at),
        ("expires_at", &s.expires_at),
    ] {
        if parse_rfc3339(t).is_none() {
            return Err(format!("{name} {:?} is not RFC 3339", clip(t)));
        }
    }
    Ok(s)
}

fn parse_object<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    let value: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("not valid JSON ({e})"))?;
    if !value.is_object() {
        return Err(format!("not a JSON object: {}", clip(&value.to_string())));
    }
    serde_json::from_value(value).map_err(|e| format!("a field has the wrong shape: {e}"))
}

// ---------------------------------------------------------------------------------------------
// Error codes

/// The error codes clients see (research note §3.5).
pub mod codes {
    /// 400, `POST /executions` without `Idempotency-Key` (checked before the body).
    pub const IDEMPOTENCY_KEY_MISSING: &str = "IDEMPOTENCY_KEY_MISSING";
    /// 409, same key with a different payload.
    pub const IDEMPOTENCY_KEY_REUSE: &str = "IDEMPOTENCY_KEY_REUSE";
    /// 409 on the result route while the operation runs.
    pub const OPERATION_NOT_TERMINAL: &str = "OPERATION_NOT_TERMINAL";
    /// 503, the asynchronous handler is disabled.
    pub const ASYNC_EXECUTION_UNAVAILABLE: &str = "ASYNC_EXECUTION_UNAVAILABLE";
    /// 429, capacity exhausted.
    pub const EXECUTION_CAPACITY_EXCEEDED: &str = "EXECUTION_CAPACITY_EXCEEDED";
    /// 404 on status, result and cancel.
    pub const OPERATION_NOT_FOUND: &str = "OPERATION_NOT_FOUND";
    /// 410 on status, result and cancel.
    pub const OPERATION_EXPIRED: &str = "OPERATION_EXPIRED";
    /// 413 on submit.
    pub const EXECUTION_PAYLOAD_TOO_LARGE: &str = "EXECUTION_PAYLOAD_TOO_LARGE";
    /// 200 `success:false` with output: the program failed.
    pub const EXECUTION_FAILED: &str = "EXECUTION_FAILED";
    /// 200 `success:false` with output: dependency installation failed.
    pub const DEPENDENCY_INSTALL_FAILED: &str = "DEPENDENCY_INSTALL_FAILED";
    /// Terminal without output; also `failure.code` in a snapshot.
    pub const EXECUTION_CANCELLED: &str = "EXECUTION_CANCELLED";
    /// Terminal without output; also `failure.code` in a snapshot.
    pub const OUTCOME_UNCERTAIN: &str = "OUTCOME_UNCERTAIN";
    /// 401.
    pub const UNAUTHENTICATED: &str = "UNAUTHENTICATED";
    /// 403.
    pub const FORBIDDEN: &str = "FORBIDDEN";
    /// 400 (4xx): the body is invalid.
    pub const INVALID_REQUEST: &str = "INVALID_REQUEST";
    /// 504 on `/execute`; `failure.code` of a timed-out operation.
    pub const SANDBOX_TIMEOUT: &str = "SANDBOX_TIMEOUT";
    /// 502.
    pub const SANDBOX_CREATION_FAILED: &str = "SANDBOX_CREATION_FAILED";
    /// 5xx (502 or 503).
    pub const SANDBOX_UNREACHABLE: &str = "SANDBOX_UNREACHABLE";
    /// 500.
    pub const INTERNAL_ERROR: &str = "INTERNAL_ERROR";
}

/// One row of the error-code table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CodeSpec {
    /// The code.
    pub code: &'static str,
    /// The HTTP status a server answers it with (200 for the completed-with-failure codes).
    pub status: u16,
    /// The routes that answer it.
    pub routes: &'static str,
    /// Where the pairing is documented.
    pub source: &'static str,
}

/// The error-code table (research note §3.5), one row per code, in the order of [`codes`].
pub const ERROR_CODES: &[CodeSpec] = &[
    CodeSpec {
        code: codes::IDEMPOTENCY_KEY_MISSING,
        status: 400,
        routes: "POST /executions",
        source: "seed 004 production probe",
    },
    CodeSpec {
        code: codes::IDEMPOTENCY_KEY_REUSE,
        status: 409,
        routes: "POST /executions",
        source: "Durable.cs, seed 004",
    },
    CodeSpec {
        code: codes::OPERATION_NOT_TERMINAL,
        status: 409,
        routes: "GET /executions/{id}/result",
        source: "Durable.cs, tests",
    },
    CodeSpec {
        code: codes::ASYNC_EXECUTION_UNAVAILABLE,
        status: 503,
        routes: "/executions*",
        source: "Durable.cs (503 default), seed 004",
    },
    CodeSpec {
        code: codes::EXECUTION_CAPACITY_EXCEEDED,
        status: 429,
        routes: "any",
        source: "Durable.cs (429 default)",
    },
    CodeSpec {
        code: codes::OPERATION_NOT_FOUND,
        status: 404,
        routes: "status, result, cancel",
        source: "Durable tests",
    },
    CodeSpec {
        code: codes::OPERATION_EXPIRED,
        status: 410,
        routes: "status, result, cancel",
        source: "Durable.cs (client-assigned)",
    },
    CodeSpec {
        code: codes::EXECUTION_PAYLOAD_TOO_LARGE,
        status: 413,
        routes: "POST /executions",
        source: "Durable.cs (413 default)",
    },
    CodeSpec {
        code: codes::EXECUTION_FAILED,
        status: 200,
        routes: "/execute, result",
        source: "NyxIdCodeExecutionPort.cs",
    },
    CodeSpec {
        code: codes::DEPENDENCY_INSTALL_FAILED,
        status: 200,
        routes: "/execute, result",
        source: "NyxIdCodeExecutionPort.cs",
    },
    CodeSpec {
        code: codes::EXECUTION_CANCELLED,
        status: 200,
        routes: "result (no output), snapshot failure",
        source: "Durable.cs, tests",
    },
    CodeSpec {
        code: codes::OUTCOME_UNCERTAIN,
        status: 200,
        routes: "result (no output), snapshot failure",
        source: "Durable.cs, tests",
    },
    CodeSpec {
        code: codes::UNAUTHENTICATED,
        status: 401,
        routes: "any",
        source: "NyxIdCodeExecutionPort tests",
    },
    CodeSpec {
        code: codes::FORBIDDEN,
        status: 403,
        routes: "any",
        source: "NyxIdCodeExecutionPort tests",
    },
    CodeSpec {
        code: codes::INVALID_REQUEST,
        status: 400,
        routes: "any",
        source: "NyxIdCodeExecutionPort.cs (4xx; 400 inferred)",
    },
    CodeSpec {
        code: codes::SANDBOX_TIMEOUT,
        status: 504,
        routes: "/execute",
        source: "NyxIdCodeExecutionPort tests",
    },
    CodeSpec {
        code: codes::SANDBOX_CREATION_FAILED,
        status: 502,
        routes: "/execute",
        source: "NyxIdCodeExecutionPort tests",
    },
    CodeSpec {
        code: codes::SANDBOX_UNREACHABLE,
        status: 503,
        routes: "/execute",
        source: "ClassifyProxyFailure (5xx; 503 inferred)",
    },
    CodeSpec {
        code: codes::INTERNAL_ERROR,
        status: 500,
        routes: "any",
        source: "NyxIdCodeExecutionPort tests",
    },
];

/// The table row of `code`, if the code is known.
pub fn code_spec(code: &str) -> Option<&'static CodeSpec> {
    ERROR_CODES.iter().find(|c| c.code == code)
}

/// A well-formed code: 1..=64 of `[A-Za-z0-9_.-]`.
pub fn valid_code(code: &str) -> bool {
    (1..=64).contains(&code.len())
        && code
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// The Chrono error code in an error body, as Aevatar's `ChronoProxyFailureInspector` finds it:
/// `error.code` first, then a top-level `code`; inside a NyxID proxy envelope
/// (`{"error": true, "status": n, "body": "<json>" | {...}}`) one level down. Malformed codes
/// are ignored.
pub fn error_code(body: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    code_in(&value, 0)
}

fn code_in(value: &serde_json::Value, depth: u8) -> Option<String> {
    let obj = value.as_object()?;
    let direct = obj
        .get("error")
        .and_then(|e| e.get("code"))
        .or_else(|| obj.get("code"))
        .and_then(|c| c.as_str())
        .filter(|c| valid_code(c));
    if let Some(c) = direct {
        return Some(c.to_owned());
    }
    if depth > 0 || obj.get("error").and_then(|e| e.as_bool()) != Some(true) {
        return None;
    }
    match obj.get("body")? {
        serde_json::Value::String(s) => code_in(&serde_json::from_str(s).ok()?, 1),
        inner @ serde_json::Value::Object(_) => code_in(inner, 1),
        _ => None,
    }
}

/// The `status` of a NyxID proxy envelope (`{"error": true, "status": n, "body": …}`), if the
/// body is one: the upstream's HTTP status.
pub fn envelope_status(body: &[u8]) -> Option<u16> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let obj = value.as_object()?;
    if obj.get("error")?.as_bool()? {
        obj.get("status")?
            .as_u64()
            .and_then(|s| u16::try_from(s).ok())
    } else {
        None
    }
}

// ---------------------------------------------------------------------------------------------
// Identifiers, keys, ETags, Retry-After

/// The idempotency-key rule, enforced client-side (Durable.cs): 1..=128 characters, each a
/// printable ASCII character `!`..=`~`, and no comma.
pub fn check_idempotency_key(key: &str) -> Result<(), String> {
    if key.is_empty() || key.len() > 128 {
        return Err(format!(
            "an idempotency key has 1..=128 characters, not {}",
            key.len()
        ));
    }
    if let Some(c) = key.chars().find(|c| !('!'..='~').contains(c) || *c == ',') {
        return Err(format!(
            "an idempotency key is printable ASCII without commas; it contains {c:?}"
        ));
    }
    Ok(())
}

/// An Aevatar-style key, `tool:v1:operation:<sha256 hex>`, over `parts` (each length-prefixed,
/// so different splits never collide).
pub fn operation_key(parts: &[&[u8]]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p);
    }
    format!("{OPERATION_KEY_PREFIX}{}", hex(&h.finalize()))
}

/// `op_` followed by exactly 32 of `[A-Za-z0-9_-]` (35 characters).
pub fn valid_operation_id(id: &str) -> bool {
    id.len() == 35
        && id.starts_with("op_")
        && id[3..]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `[A-Za-z0-9_.:-]{1,128}`; others are ignored by clients.
pub fn valid_diagnostic_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b':' | b'-'))
}

/// An ETag as Aevatar accepts it: 1..=512 characters, no surrounding whitespace, no control
/// characters.
pub fn valid_etag(etag: &str) -> bool {
    (1..=512).contains(&etag.len()) && etag.trim() == etag && !etag.chars().any(|c| c.is_control())
}

/// The ETag of a version, as in the fixtures: `"v7"` (a strong tag, quotes included).
pub fn etag_for_version(version: i64) -> String {
    format!("\"v{version}\"")
}

/// `If-None-Match` matches `etag`: one of its comma-separated tags equals it (weak or strong:
/// `W/` prefixes are ignored, as for a GET), or it is `*`.
pub fn if_none_match_matches(if_none_match: &str, etag: &str) -> bool {
    let bare = |t: &str| t.trim().trim_start_matches("W/").to_owned();
    let want = bare(etag);
    if_none_match
        .split(',')
        .any(|t| t.trim() == "*" || bare(t) == want)
}

// ---------------------------------------------------------------------------------------------
// Time

/// Milliseconds since the Unix epoch of an RFC 3339 timestamp (`2026-08-14T10:00:00Z`,
/// `…T10:00:00.123+02:00`); `None` if it is not one.
pub fn parse_rfc3339(s: &str) -> Option<i128> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        t.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.parse().ok())?
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, min, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return None;
    }
    if hour > 23 || min > 59 || sec > 60 {
        return None;
    }
    let mut i = 19;
    let mut millis = 0i64;
    if b.get(i) == Some(&b'.') {
        let start = i + 1;
        i = start;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return None;
        }
        let frac = &s[start..i.min(start + 3)];
        millis = format!("{frac:0<3}").parse().ok()?;
    }
    let offset_min = match b.get(i)? {
        b'Z' | b'z' if i + 1 == b.len() => 0,
        c @ (b'+' | b'-') if i + 6 == b.len() && b[i + 3] == b':' => {
            let h = num(i + 1..i + 3)?;
            let m = num(i + 4..i + 6)?;
            if h > 23 || m > 59 {
                return None;
            }
            let o = h * 60 + m;
            if *c == b'+' { o } else { -o }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    let secs = days * 86_400 + hour * 3600 + min * 60 + sec - offset_min * 60;
    Some(i128::from(secs) * 1000 + i128::from(millis))
}

/// `2026-08-14T10:00:00Z` (UTC, whole seconds), as the fixtures write timestamps.
pub fn format_rfc3339(t: SystemTime) -> String {
    let secs = match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64) - i64::from(e.duration().subsec_nanos() > 0),
    };
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        sod / 3600,
        sod / 60 % 60,
        sod % 60
    )
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

// Howard Hinnant's algorithms.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

// ---------------------------------------------------------------------------------------------

/// SHA-256 as lowercase hex.
pub fn sha256_hex(data: &[u8]) -> String {
    hex(&Sha256::digest(data))
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(b"0123456789abcdef"[usize::from(b >> 4)]));
        s.push(char::from(b"0123456789abcdef"[usize::from(b & 15)]));
    }
    s
}

fn clip(s: &str) -> String {
    match s.char_indices().nth(80) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

#[cfg(test)]
mod tests;
