#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! Vercel Sandbox: the REST API that `@vercel/sandbox` 3.5.0 and `vercel-sandbox` 0.10.0 call,
//! under `/v2/sandboxes` and `/v3/sandboxes` (also served under `/api`, the SDKs' default base
//! `https://vercel.com/api`).
//!
//! Sources: the TS SDK (`src/api-client/api-client.ts`, `validators.ts`, `file-writer.ts`,
//! recovered from the npm package's source maps), the Python SDK (`_internal/api_client.py`,
//! `process_stdin.py`, `service.py`), Vercel's official in-memory mock
//! (`vercel/sandbox` `packages/vercel-sandbox-mock/src/server/mock-server.ts`, `payloads.ts`) and
//! the docs' system specifications (commands run as `vercel-sandbox`, cwd `/vercel/sandbox`,
//! `sudo` available). Details and what is inferred: `docs/adapters/vercel.md`.
//!
//! Every request needs `Authorization: Bearer <token>` (else `403 {"error":{"code":"forbidden",
//! …}}`); `teamId` is accepted in the query. Errors are `{"error":{"code","message"}}`.
//!
//! - Sandboxes: `POST /v3/sandboxes` (and `/v2/sandboxes`, the TS SDK's route when a runtime is
//!   given) → `{sandbox, session, routes, resumed}`; `GET /v2/sandboxes?project=` →
//!   `{sandboxes, pagination}`; `GET /v2/sandboxes/{name}?resume=` (a stopped sandbox resumes in
//!   a new session that keeps its filesystem when `persistent`, the default, and starts from a
//!   fresh one otherwise); `DELETE /v2/sandboxes/{name}`.
//! - Routes: each port declared at create (`ports`) has a route
//!   `http://{name}-{port}.vercel.localhost:<emulator port>` (the service's
//!   `https://{subdomain}.vercel.run` cannot resolve offline); a request with that `Host` goes
//!   to the sandbox's own listener on the port (the kit's `ports::forward`), without a token.
//! - Sessions: `GET /v2/sandboxes/sessions[/{id}]`, `POST …/{id}/stop`, `POST …/{id}/extend-timeout`.
//!   A session stops by itself when its `timeout` (ms) expires. Commands and files on a stopped
//!   session: `410 {"error":{"code":"sandbox_stopped"}}`.
//! - Commands: `POST …/{id}/cmd` (`command` + `args`, exec'd without a shell; `cwd`, `env`,
//!   `sudo`, `timeout` (ms, then SIGKILL → 137), `attachStdin`); detached → `{command}`; with
//!   `wait` (body or query) an `application/x-ndjson` stream: `{command}` (exitCode null), then
//!   `{"stream":"stdout"|"stderr","data"}` lines as the output arrives (with `logs`), then the
//!   finished `{command}` (exitCode, durationMs). `GET …/cmd`, `GET …/cmd/{cid}[?wait=true]`,
//!   `GET …/cmd/{cid}/logs` (NDJSON from the start, live until the command ends),
//!   `POST …/cmd/{cid}/kill {signal}` (a signal death is 128+n), `POST …/cmd/{cid}/stdin
//!   {data (base64), offset, close}` → `{bytesWritten}` (the Python SDK's resumable stdin).
//! - Snapshots: `POST …/{id}/snapshot {expiration?}` stops the session and copies its filesystem
//!   (the kit's `Sandbox::snapshot`) → `{snapshot, session}`; `GET /v2/sandboxes/snapshots`,
//!   `GET|DELETE /v2/sandboxes/snapshots/{id}`; a create with `source: {type: "snapshot",
//!   snapshotId}` starts over that copy (a deleted or expired one is a 404). Retention
//!   (`keepLastSnapshots`) is refused with a 400, not ignored.
//! - Files: `POST …/fs/write` (a gzip'd tar, `x-cwd` = the extract dir; extracted by the sandbox
//!   user, modes kept), `POST …/fs/read {path, cwd}` (`application/octet-stream`; missing →
//!   `404 {"error":{"code":"file_not_found"}}`), `POST …/fs/mkdir {path, cwd, recursive}`.
//!
//! Output `data` is text: bytes are decoded as UTF-8 per stream (split sequences joined across
//! chunks, invalid bytes as U+FFFD), as a JSON string can carry nothing else.
//!
//! Faults on route `"exec"` (the `POST …/cmd`), rendered in this API's shapes: 429 with
//! `Retry-After`, 500 (after the command ran), 503, a reset, an NDJSON stream cut before the final
//! `{command}`, a malformed line, latency, 403, and the sandbox stopping mid-command (an in-band
//! `{"stream":"error","data":{"code":"sandbox_stopped"}}` line). Route `"create"` takes the
//! status faults too.
#![warn(missing_docs)]
// Handlers return `Result<_, Response>` (axum's idiom) or `Result<_, tonic::Status>`.
#![allow(clippy::result_large_err)]

mod cmd;
mod fs;
mod routes;
mod snapshot;
mod state;

pub use state::{SANDBOX_UID, VercelOptions, VercelSandbox};

use std::io;
use std::sync::Arc;

use axum::Router;
use execseam_emulator_kit::{Emulator, FAULT_NAMES, Provider, Rendered, Shell};

use state::State;

/// The token put in [`Emulator::env`] when the emulator accepts any token (not a JWT, so the
/// SDKs never try an OIDC refresh).
pub const PLACEHOLDER_TOKEN: &str = "vercel-emulator-token";
/// The team id advertised in [`Emulator::env`].
pub const TEAM_ID: &str = "team_execseam";
/// The project id advertised in [`Emulator::env`].
pub const PROJECT_ID: &str = "prj_execseam";
/// A session's working directory.
pub const CWD: &str = "/vercel/sandbox";
/// The user commands run as (`sudo: true` runs them as root).
pub const USER: &str = "vercel-sandbox";
/// The user's home.
pub const HOME: &str = "/home/vercel-sandbox";

/// The Vercel Sandbox provider emulator ([`Provider`]); its typed test accessors are reached
/// through [`VercelEmulator`] (`Deref`).
pub struct Vercel {
    state: Arc<State>,
}

/// A running Vercel Sandbox emulator.
pub type VercelEmulator = Emulator<Vercel>;

impl Provider for Vercel {
    const NAME: &'static str = "vercel";
    /// Every fault on `exec` (the `POST …/cmd`); the status faults on `create`.
    const FAULTS: Rendered = &[
        ("exec", FAULT_NAMES),
        ("create", &["429", "503", "auth", "reset", "latency"]),
    ];
    const PLACEHOLDER_TOKEN: &'static str = PLACEHOLDER_TOKEN;
    const SCRATCH: &'static str = "/vercel/sandbox/execseam-conformance";
    const MISSING_SANDBOX_ID: &'static str = "no-such-sandbox";
    type Options = VercelOptions;
    type Sandbox = VercelSandbox;
    /// The sandbox's name.
    type Key = String;

    /// No sandbox exists until one is created.
    async fn start(
        shell: Arc<Shell<Vercel>>,
        vercel: VercelOptions,
    ) -> io::Result<(Vercel, Router)> {
        let state = Arc::new(State::new(shell, vercel));
        let router = routes::router(state.clone());
        Ok((Vercel { state }, router))
    }

    /// The environment the adapter's `from_env` reads (`VERCEL_API_URL`, `VERCEL_TOKEN`,
    /// `VERCEL_TEAM_ID`, `VERCEL_PROJECT_ID`). The SDKs read no URL from the environment: pass
    /// the base URL as `SandboxServiceOptions(base_url=…)` (for the TS SDK, rewrite
    /// `https://vercel.com/api` to it in the `fetch` option).
    fn env(&self, shell: &Shell<Vercel>) -> Vec<(String, String)> {
        vec![
            ("VERCEL_API_URL".into(), shell.base_url().to_owned()),
            ("VERCEL_TOKEN".into(), shell.token().advertised().to_owned()),
            ("VERCEL_TEAM_ID".into(), TEAM_ID.into()),
            ("VERCEL_PROJECT_ID".into(), PROJECT_ID.into()),
        ]
    }

    fn shutdown(&self) {
        self.state.stop_sessions();
    }
}

impl Vercel {
    /// A sandbox by name.
    pub fn sandbox(&self, name: &str) -> Option<Arc<VercelSandbox>> {
        self.state.sandbox(name)
    }

    /// The names of the sandboxes that exist (created and not deleted).
    pub fn sandbox_names(&self) -> Vec<String> {
        self.state.names()
    }

    /// How many command-submitting requests arrived.
    pub fn exec_requests(&self) -> u64 {
        self.state.faults.count("exec")
    }
}
