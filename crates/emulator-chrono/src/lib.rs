#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! Chrono Sandbox: the synchronous `POST /execute` (and its SSE form `POST /execute/stream`) and
//! the durable `/executions` contract, as Aevatar's and Ornn's clients use them
//! (`research/ax-agentcore-chrono.md` §3; seed 004).
//!
//! Routes (JSON; `Authorization: Bearer <token>`, the token names the owner; the NyxID proxy
//! prefix is not emulated: point clients at the emulator's root):
//!
//! | route | answer | fault route |
//! |---|---|---|
//! | `POST /execute` | 200 `{success, output{stdout, stderr, exit_code, execution_time_ms}, error?, diagnostic_id}` (a non-zero exit is `success:false` + `EXECUTION_FAILED` on 200); 504 `SANDBOX_TIMEOUT`; 429; 413; 400 `INVALID_REQUEST` | `exec` |
//! | `POST /execute/stream` | SSE `data: {"type":"stdout"\|"stderr","text"}` …, then `{"type":"complete","exit_code","execution_time_ms"}` or `{"type":"error","ename","evalue","traceback"}` | `exec` |
//! | `POST /executions` | 202 receipt + `Location` + `Retry-After`; replay → same receipt; 400 `IDEMPOTENCY_KEY_MISSING`; 409 `IDEMPOTENCY_KEY_REUSE`; 503 `ASYNC_EXECUTION_UNAVAILABLE`; 429; 413 | `exec` |
//! | `GET /executions/{id}` | 200 snapshot + `ETag` (+ `Retry-After` while active); 304 on `If-None-Match`; 404; 410 | `status` |
//! | `GET /executions/{id}/result` | 200 `/execute` body, or terminal without output; 409 `OPERATION_NOT_TERMINAL` + `Retry-After` | `result` |
//! | `POST /executions/{id}/cancel` | 200 (terminal) or 202 snapshot + `ETag` | `cancel` |
//!
//! Each execution gets a fresh [`Sandbox`](execseam_emulator_kit::Sandbox) (its own root filesystem,
//! pid and mount namespaces; programs run as root in `/workspace`), removed when it ends. Languages: `python`
//! (`python3`), `javascript` (`node`), `typescript` (on `node`, its types stripped by the emulator; see [`Runtimes::detect`]), `bash`;
//! the program is written to a file and run by the interpreter. A language without a runtime is
//! 400 `INVALID_REQUEST`. A signal death is reported as exit code 128+n.
//!
//! Phases: `queued` → `provisioning/sandbox_create` → `running/execute` →
//! `collecting/collect` → terminal (`complete`), each change a new version. Faults (all routes):
//! 429, 503, auth and latency before any work; on `exec` a 500, reset, cut or malformed answer
//! come **after** the program ran or the operation was created (a lost response); `vanish`
//! kills the sandbox mid-run (sync: 503 `SANDBOX_UNREACHABLE`; async: `outcome_uncertain`); a
//! malformed 304 is one without its `ETag`.
//!
//! State is in memory and lost on restart, like Chrono's single-replica ephemeral store.
#![warn(missing_docs)]
// Handlers return `Result<_, Response>` (axum's idiom) or `Result<_, tonic::Status>`.
#![allow(clippy::result_large_err)]

pub use execseam_chrono_contract::contract;
mod routes;
pub mod runner;
pub mod store;

use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use execseam_emulator_kit::{Emulator, FAULT_NAMES, Provider, Rendered, Shell, Unregistered};

pub use runner::Runtimes;

/// The token put in [`Emulator::env`] when the emulator accepts any token.
pub const PLACEHOLDER_TOKEN: &str = "chrono-emulator-token";

/// Behaviour switches.
#[derive(Clone, Debug)]
pub struct ChronoOptions {
    /// The `/executions` handler is on (off: 503 `ASYNC_EXECUTION_UNAVAILABLE`).
    pub async_enabled: bool,
    /// Programs running at once (sync: 429 beyond; async: queued) and active operations
    /// (async: 429 beyond).
    pub max_concurrent: usize,
    /// Largest request body (413 beyond). Default 10 MiB.
    pub max_payload_bytes: usize,
    /// `expires_at - created_at`. Default 24 h, as the fixtures.
    pub retention: Duration,
    /// `Retry-After` on 202, 304, 409 and active statuses. Default 1 s.
    pub retry_after_secs: u64,
    /// `timeout_secs` when a request has none (Chrono's value is undocumented). Default 60 s.
    pub default_timeout_secs: u32,
    /// Time spent in `provisioning` before the program starts. Default 50 ms.
    pub phase_delay: Duration,
    /// How long a cancel waits for the program to stop before answering 202. Default 2 s.
    pub cancel_wait: Duration,
    /// The interpreters.
    pub runtimes: Runtimes,
}

impl Default for ChronoOptions {
    fn default() -> Self {
        ChronoOptions {
            async_enabled: true,
            max_concurrent: 16,
            max_payload_bytes: 10 << 20,
            retention: Duration::from_secs(86_400),
            retry_after_secs: 1,
            default_timeout_secs: 60,
            phase_delay: Duration::from_millis(50),
            cancel_wait: Duration::from_secs(2),
            runtimes: Runtimes::detect(),
        }
    }
}

/// The Chrono Sandbox provider emulator ([`Provider`]); its typed test accessors are reached
/// through [`ChronoEmulator`] (`Deref`).
pub struct Chrono {
    shared: Arc<routes::Shared>,
}

/// A running Chrono emulator.
pub type ChronoEmulator = Emulator<Chrono>;

/// What the read routes render: the early faults, and the late ones on their answer.
const READ_FAULTS: &[&str] = execseam_emulator_kit::FAULTS_BUT_VANISH;

impl Provider for Chrono {
    const NAME: &'static str = "chrono";
    /// Every fault on `exec` (`/execute`, `/execute/stream`, `POST /executions`); on the read
    /// routes `status`, `result` and `cancel`, every fault but `vanish`.
    const FAULTS: Rendered = &[
        ("exec", FAULT_NAMES),
        ("status", READ_FAULTS),
        ("result", READ_FAULTS),
        ("cancel", READ_FAULTS),
    ];
    const PLACEHOLDER_TOKEN: &'static str = PLACEHOLDER_TOKEN;
    const SCRATCH: &'static str = "/mnt/execseam-conformance";
    type Options = ChronoOptions;
    /// Each execution's sandbox lives exactly as long as its program.
    type Sandbox = Unregistered;
    type Key = String;

    async fn start(
        shell: Arc<Shell<Chrono>>,
        chrono: ChronoOptions,
    ) -> io::Result<(Chrono, Router)> {
        let shared = Arc::new(routes::Shared {
            runner: Arc::new(runner::Runner::new(chrono.runtimes.clone(), {
                // The interpreters must be visible inside each sandbox's root.
                let mut s = shell.sandboxing().clone();
                s.mounts.extend(chrono.runtimes.mounts());
                s
            })),
            options: chrono,
            store: store::MemoryStore::new(),
            faults: shell.faults().clone(),
            shell,
        });
        let router = routes::router(shared.clone());
        Ok((Chrono { shared }, router))
    }

    /// `CHRONO_BASE_URL` and `CHRONO_TOKEN` (what the adapter's `from_env` reads).
    fn env(&self, shell: &Shell<Chrono>) -> Vec<(String, String)> {
        vec![
            ("CHRONO_BASE_URL".to_owned(), shell.base_url().to_owned()),
            (
                "CHRONO_TOKEN".to_owned(),
                shell.token().advertised().to_owned(),
            ),
        ]
    }
}

impl Chrono {
    /// Programs started so far (each is one process in a fresh sandbox).
    pub fn executions(&self) -> u64 {
        self.shared.runner.executions()
    }

    /// Programs running now.
    pub fn running(&self) -> usize {
        self.shared.runner.running()
    }

    /// The operation store.
    pub fn store(&self) -> &store::MemoryStore {
        &self.shared.store
    }

    /// The options in force.
    pub fn options(&self) -> &ChronoOptions {
        &self.shared.options
    }
}
