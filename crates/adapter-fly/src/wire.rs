//! The Machines API's JSON, named as the API spells it.
//!
//! Sources: the Machines OpenAPI spec (`MachineExecRequest`, `flydv1.ExecResponse`,
//! `ErrorResponse`), fly-go `machine_types.go` and `flaps/flaps.go`, and the Machines API docs
//! (`machines-resource`: start, wait). Unknown fields are ignored everywhere.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `MachineExecRequest`: the body of `POST /v1/apps/{app}/machines/{id}/exec`.
///
/// `command` is argv (the deprecated `cmd` string is never sent); `stdin` is the whole of stdin
/// as one JSON string; `timeout` is in seconds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineExecRequest {
    /// argv; `command[0]` is the program.
    pub command: Vec<String>,
    /// The whole of stdin (text).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub stdin: Option<String>,
    /// The server-side deadline, in seconds.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub timeout: Option<u64>,
    /// The container of a multi-container machine.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub container: Option<String>,
}

/// `flydv1.ExecResponse`: every field is optional in the spec, and zero values are omitted by the
/// server's protobuf-style JSON encoding (`{"stdout":"hi\n"}` is a successful `echo hi`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct ExecResponse {
    /// What the command wrote to stdout, as a JSON string.
    #[serde(default)]
    pub stdout: Option<String>,
    /// What it wrote to stderr.
    #[serde(default)]
    pub stderr: Option<String>,
    /// The exit code (absent means 0).
    #[serde(default)]
    pub exit_code: Option<i64>,
    /// The signal that ended the command (absent or 0: none). fly-go drops this field.
    #[serde(default)]
    pub exit_signal: Option<i64>,
    /// Present only in error bodies; a 200 carrying it is not an exec result.
    #[serde(default)]
    pub error: Option<serde_json::Value>,
}

/// The error bodies seen from the Machines API: the spec's `ErrorResponse`
/// (`{"error","status","details"}`), and `{"status":"error","message":…}` (lease conflicts).
/// fly-go prefers `message` over `error`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct ErrorBody {
    /// The error text (`deadline_exceeded: …`, `machine not found`, …).
    #[serde(default)]
    pub error: Option<String>,
    /// The message, when present (wins over `error`, as in fly-go).
    #[serde(default)]
    pub message: Option<String>,
    /// `unknown`, `insufficient_capacity`, `name_taken`, or `error`.
    #[serde(default)]
    pub status: Option<String>,
}

/// The fields of a `Machine` the adapter reads (`GET /v1/apps/{app}/machines/{id}`).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Machine {
    /// The machine id.
    #[serde(default)]
    pub id: String,
    /// `created`, `started`, `stopped`, `suspended`, … (see the machine-states docs).
    #[serde(default)]
    pub state: String,
    /// The configuration (its image and metadata are read by list).
    #[serde(default)]
    pub config: Option<MachineConfigView>,
}

/// What the adapter reads of a machine's `config`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct MachineConfigView {
    /// The image.
    #[serde(default)]
    pub image: Option<String>,
    /// Metadata.
    #[serde(default)]
    pub metadata: Option<BTreeMap<String, String>>,
}

/// `POST /v1/apps/{app}/machines`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CreateMachine {
    /// The region, if not the API's choice.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// The machine's configuration.
    pub config: CreateMachineConfig,
}

/// `MachineConfig`, what the adapter sets of it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct CreateMachineConfig {
    /// The image.
    pub image: String,
    /// Environment variables.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Metadata (the labels).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
    /// CPUs and memory, if asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guest: Option<Guest>,
    /// The machine is destroyed when it exits (it is ours).
    pub auto_destroy: bool,
}

/// `MachineGuest`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Guest {
    /// `shared` or `performance`.
    pub cpu_kind: String,
    /// CPUs.
    pub cpus: u32,
    /// Memory in MB.
    pub memory_mb: u64,
}

/// The contract's state of a machine state (fly.io/docs/machines/machine-states).
pub(crate) fn sandbox_state(state: &str) -> execseam_core::SandboxState {
    use execseam_core::SandboxState;
    match state {
        "started" => SandboxState::Running,
        "created" | "starting" => SandboxState::Starting,
        "suspended" | "suspending" => SandboxState::Paused,
        "stopped" | "stopping" => SandboxState::Stopped,
        _ => SandboxState::Unknown,
    }
}

/// The answer of `GET …/wait`: `{"ok": true}`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct WaitResponse {
    /// True once the state was reached.
    #[serde(default)]
    pub ok: bool,
}
