#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! Cloudflare Sandbox, as reached from outside Cloudflare: the **sandbox bridge** Worker's HTTP
//! API (`@cloudflare/sandbox/bridge` 0.12.10, whose OpenAPI document is served at
//! `/v1/openapi.json` and checked against this emulator by schemathesis).
//!
//! What is reproduced, from the bridge's source:
//! - the route table under `/v1` (and `/health`), Hono's `404 Not Found` for anything else under
//!   it and the worker's `Not Found` outside it;
//! - the first middleware: a sandbox id in the path must match `^[a-z2-7]{1,128}$` (400
//!   `invalid_request`, checked before auth), then `Authorization: Bearer` (case-insensitive
//!   scheme on `/v1/sandbox*`, exact `Bearer ` on `/v1/pool/*` and `/v1/openapi*`, which also
//!   take `?token=`), 401 `unauthorized`;
//! - `POST /v1/sandbox` mints 16 random bytes as 26 lowercase base32 characters and assigns no
//!   container; like the bridge's warm pool, any well-formed id gets a fresh sandbox on first
//!   use, and an id whose sandbox was destroyed gets a new, empty one;
//! - exec: `{argv, timeout_ms, cwd}`, `argv` shell-quoted with the bridge's `shellQuote` and run
//!   as `bash -c` in `/workspace` (or the resolved `cwd`; 403 outside `/workspace`), answered
//!   `200 text/event-stream` with `event: stdout|stderr` (base64 of the UTF-8 re-encoding of
//!   the output decoded as text, so invalid bytes become U+FFFD, as with the real SDK), a
//!   terminal `event: exit` `{"exit_code":N}` or `event: error` `{"error","code"}`;
//! - `timeout_ms`: sessionless, the command is killed and the exit is 124 with
//!   `Command timed out after Nms\n` on stderr (no newline inserted before it); not applied to
//!   session targets;
//! - sessions: `Session-Id` (validated, 400) scopes exec to a session, run as the real bridge
//!   runs it (the container's streaming, background path): the session's creation-time cwd and
//!   env apply, `cd`/`export`/functions do not persist between commands, stdin is `/dev/null`,
//!   and output is re-emitted line by line with `\n` (a final partial line gains one); a session
//!   created without an id is `session-<ms>`; without the header a command runs sessionless;
//! - files: `GET`/`PUT /v1/sandbox/{id}/file/<path>` with `/workspace` containment (403), 404
//!   `workspace_read_not_found`, 413 `payload_too_large` above 32 MiB, parents created on write;
//! - `running`, `persist`/`hydrate` (tar of `/workspace`), `session` create/delete, `DELETE`
//!   (204, also for unknown ids), pool statistics, `/health`, the OpenAPI document.
//!
//! - the terminal WebSocket `GET /v1/sandbox/{id}/pty`: one shell per session on a real
//!   pseudo-terminal, replay, `ready`, binary I/O, `resize`, `error` status messages, and no
//!   `exit` frame, as the released container (`pty`).
//!
//! - tunnels (`tunnel`): `POST /v1/sandbox/{id}/tunnel/{port}` records an ephemeral tunnel whose
//!   URL is `http://{port}-{random}.trycloudflare.localhost:<emulator port>` (the service's
//!   `https://<random>.trycloudflare.com` cannot resolve offline), forwarded to the sandbox's
//!   port; `DELETE` removes it.
//!
//! Deliberate deviations (listed in `docs/adapters/cloudflare.md`): named tunnels and bucket
//! mounts answer with their documented 502 errors (the emulator has no Cloudflare zone or s3fs); a timed-out command is killed at once (no 5 s grace between SIGTERM and SIGKILL);
//! a signal death is reported as 128+n.
//!
//! Faults (route `exec`, at the top of the exec handler): 429 with `Retry-After` (as Cloudflare's
//! edge answers: `error code: 1015`), 500 after running the command (Hono's `Internal Server
//! Error`), 503 `capacity_exceeded`, a reset before the response, a stream cut before `exit`, a
//! `stdout` event whose data is not base64, latency, 401 `unauthorized`, and the sandbox destroyed
//! mid-command (an `exec_error` event; its id then gets a fresh sandbox, as on the real bridge).
#![warn(missing_docs)]
// Handlers return `Result<_, Response>` (axum's idiom) or `Result<_, tonic::Status>`.
#![allow(clippy::result_large_err)]

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use axum::Router;

use execseam_emulator_kit::{
    Dir, Emulator, FAULT_NAMES, FaultHandle, Provider, Rendered, Sandbox, SandboxEntry,
    SandboxSpec, Shell, User,
};

mod exec;
mod pty;
mod pty_spawn;
mod routes;
mod tunnel;
pub mod wire;

/// The bridge's OpenAPI document (from `@cloudflare/sandbox` 0.12.10), served at
/// `/v1/openapi.json` and used by the schema check.
pub const OPENAPI: &str = include_str!("../interop/openapi-0.12.10.json");

/// The container's default working directory, and the only tree the files API reaches.
pub const WORKSPACE: &str = "/workspace";

/// The environment of the `cloudflare/sandbox` image (Ubuntu 22.04, running as root).
pub fn default_env() -> BTreeMap<String, String> {
    [
        ("HOME", "/root"),
        (
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        ),
        ("SANDBOX_VERSION", "0.12.10"),
        ("LANG", "C.UTF-8"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

fn spec(id: &str) -> SandboxSpec {
    // The container runs as root; its hostname is not documented (a container's id here).
    let mut env = default_env();
    env.remove("HOME");
    SandboxSpec::new("cloudflare", &hostname(id), User::root(), env).dirs([Dir::root(WORKSPACE)])
}

/// A hostname-safe form of a sandbox id (at most 63 characters of `[a-z0-9-]`).
fn hostname(id: &str) -> String {
    let h = SandboxSpec::hostname_of(id);
    if h.is_empty() { "sandbox".into() } else { h }
}

/// A bridge session: its creation-time working directory and environment (files under the
/// sandbox's `/tmp`), applied to each of its commands; nothing a command does persists.
pub(crate) struct Session {
    pub(crate) dir: String,
    /// The creation-time working directory (a sandbox path) and environment, for the terminal.
    pub(crate) cwd: String,
    pub(crate) env: Vec<(String, String)>,
}

/// One sandbox behind an id: the registry's entry.
pub struct Entry {
    pub(crate) sandbox: Arc<Sandbox>,
    pub(crate) sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// The terminals (`/pty`), one per session.
    pub(crate) terminals: pty::Terminals,
    /// Its tunnels, by port.
    pub(crate) tunnels: Mutex<BTreeMap<u16, tunnel::Tunnel>>,
}

impl SandboxEntry for Entry {
    fn teardown(&self) {
        self.sandbox.destroy();
    }
}

/// The emulator's state.
pub(crate) struct State {
    pub(crate) shell: Arc<Shell<Cloudflare>>,
    pub(crate) faults: FaultHandle,
}

impl State {
    /// The warm pool's `getContainer`: the sandbox behind `id`, created on first use.
    pub(crate) fn get_or_create(&self, id: &str) -> std::io::Result<Arc<Entry>> {
        let mut map = self.shell.sandboxes().lock();
        if let Some(e) = map.get(id)
            && e.sandbox.is_alive()
        {
            return Ok(e.clone());
        }
        let sandbox = Sandbox::create(id, spec(id), self.shell.sandboxing())?;
        let entry = Arc::new(Entry {
            sandbox,
            sessions: Mutex::new(HashMap::new()),
            terminals: pty::Terminals::default(),
            tunnels: Mutex::new(BTreeMap::new()),
        });
        map.insert(id.to_owned(), entry.clone());
        Ok(entry)
    }

    /// Destroys the sandbox behind `id` (its processes are killed); true if there was one.
    pub(crate) fn destroy(&self, id: &str) -> bool {
        self.shell.sandboxes().destroy(id)
    }
}

/// The Cloudflare Sandbox bridge emulator ([`Provider`]); its typed test accessors are reached
/// through [`CloudflareEmulator`] (`Deref`).
pub struct Cloudflare {
    state: Arc<State>,
}

/// A running bridge emulator.
pub type CloudflareEmulator = Emulator<Cloudflare>;

/// The token placed in [`Emulator::env`] when the emulator accepts any token.
pub const ANY_TOKEN: &str = "execseam-emulator-token";

impl Provider for Cloudflare {
    const NAME: &'static str = "cloudflare";
    /// The bridge renders every fault on `exec` only.
    const FAULTS: Rendered = &[("exec", FAULT_NAMES)];
    const PLACEHOLDER_TOKEN: &'static str = ANY_TOKEN;
    const SCRATCH: &'static str = "/workspace/execseam-conformance";
    type Options = ();
    type Sandbox = Entry;
    type Key = String;

    async fn start(shell: Arc<Shell<Cloudflare>>, (): ()) -> std::io::Result<(Cloudflare, Router)> {
        let state = Arc::new(State {
            faults: shell.faults().clone(),
            shell,
        });
        let router = Router::new()
            .fallback(routes::handle)
            .with_state(state.clone());
        Ok((Cloudflare { state }, router))
    }

    /// `CLOUDFLARE_SANDBOX_WORKER_URL` and `CLOUDFLARE_SANDBOX_API_KEY` (what our adapter's
    /// `from_env` reads; the OpenAI Agents SDK reads the key from the same variable and takes
    /// the URL as `worker_url`).
    fn env(&self, shell: &Shell<Cloudflare>) -> Vec<(String, String)> {
        vec![
            (
                "CLOUDFLARE_SANDBOX_WORKER_URL".into(),
                shell.base_url().to_owned(),
            ),
            (
                "CLOUDFLARE_SANDBOX_API_KEY".into(),
                shell.token().advertised().to_owned(),
            ),
        ]
    }
}

impl Cloudflare {
    /// The sandbox behind `id`, if it has one now.
    pub fn sandbox(&self, id: &str) -> Option<Arc<Sandbox>> {
        self.state
            .shell
            .sandboxes()
            .get(id)
            .map(|e| e.sandbox.clone())
    }

    /// The ids of the sandboxes that have a container.
    pub fn sandbox_ids(&self) -> Vec<String> {
        self.state.shell.sandboxes().keys()
    }

    /// Destroys the sandbox behind `id` (as `DELETE /v1/sandbox/{id}` does); true if it had one.
    pub fn destroy_sandbox(&self, id: &str) -> bool {
        self.state.destroy(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use execseam_emulator_kit::EmulatorOptions;

    async fn emulator() -> (CloudflareEmulator, reqwest::Client) {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let emu = CloudflareEmulator::start(EmulatorOptions::with_token("k"))
            .await
            .expect("emulator");
        (emu, reqwest::Client::new())
    }

    async fn status_body(r: reqwest::RequestBuilder) -> (u16, String) {
        let resp = r.send().await.expect("request");
        let status = resp.status().as_u16();
        (status, resp.text().await.expect("body"))
    }

    #[tokio::test]
    async fn routing_auth_and_error_shapes_follow_the_bridge() {
        let (emu, http) = emulator().await;
        let base = emu.base_url();
        // The id is checked before auth, on every sandbox route.
        let (s, b) = status_body(http.get(format!("{base}/v1/sandbox/NOT-base32/running"))).await;
        assert_eq!(
            (s, b.as_str()),
            (
                400,
                r#"{"error":"Invalid sandbox ID format","code":"invalid_request"}"#
            )
        );
        let (s, b) = status_body(http.post(format!("{base}/v1/sandbox"))).await;
        assert_eq!(
            (s, b.as_str()),
            (401, r#"{"error":"Unauthorized","code":"unauthorized"}"#)
        );
        // Case-insensitive scheme on /v1/sandbox*, exact on /v1/pool/*.
        let (s, b) = status_body(
            http.post(format!("{base}/v1/sandbox"))
                .header("authorization", "bearer k"),
        )
        .await;
        assert_eq!(s, 200, "{b}");
        let id: serde_json::Value = serde_json::from_str(&b).unwrap();
        let id = id["id"].as_str().unwrap().to_owned();
        assert!(id.len() == 26 && wire::valid_sandbox_id(&id), "{id}");
        assert!(
            emu.sandbox_ids().is_empty(),
            "minting an id assigns no container"
        );
        let (s, _) = status_body(
            http.get(format!("{base}/v1/pool/stats"))
                .header("authorization", "bearer k"),
        )
        .await;
        assert_eq!(s, 401);
        let (s, _) = status_body(http.get(format!("{base}/v1/pool/stats")).bearer_auth("k")).await;
        assert_eq!(s, 200);
        let (s, _) = status_body(http.get(format!("{base}/v1/openapi.json?token=k"))).await;
        assert_eq!(s, 200);
        assert_eq!(
            status_body(http.get(format!("{base}/health"))).await,
            (200, r#"{"ok":true}"#.into())
        );
        assert_eq!(
            status_body(http.get(format!("{base}/elsewhere"))).await,
            (404, "Not Found".into())
        );
        assert_eq!(
            status_body(http.get(format!("{base}/v1/nope")).bearer_auth("k")).await,
            (404, "404 Not Found".into())
        );
        // DELETE of an id that never had a container: 204, and still none.
        let (s, _) = status_body(
            http.delete(format!("{base}/v1/sandbox/{id}"))
                .bearer_auth("k"),
        )
        .await;
        assert_eq!(s, 204);
        assert!(emu.sandbox_ids().is_empty());
    }

    #[tokio::test]
    async fn exec_sse_bytes_sessions_and_containment() {
        let (emu, http) = emulator().await;
        let base = emu.base_url();
        let exec = format!("{base}/v1/sandbox/abc/exec");
        let (s, b) = status_body(
            http.post(&exec)
                .bearer_auth("k")
                .json(&serde_json::json!({"argv": ["printf", "hi"]})),
        )
        .await;
        assert_eq!(s, 200);
        assert_eq!(
            b,
            "event: stdout\ndata: aGk=\n\nevent: exit\ndata: {\"exit_code\":0}\n\n"
        );
        let (s, b) = status_body(
            http.post(&exec)
                .bearer_auth("k")
                .header("session-id", "a..b")
                .json(&serde_json::json!({"argv": ["true"]})),
        )
        .await;
        assert_eq!(
            (s, b.as_str()),
            (
                400,
                r#"{"error":"Invalid session ID format","code":"invalid_request"}"#
            )
        );
        let (s, b) = status_body(
            http.post(&exec)
                .bearer_auth("k")
                .json(&serde_json::json!({"argv": ["true"], "cwd": "../etc"})),
        )
        .await;
        assert_eq!(
            (s, b.as_str()),
            (
                403,
                r#"{"error":"cwd must resolve to a location within /workspace","code":"invalid_request"}"#
            )
        );
        let (s, b) = status_body(http.post(&exec).bearer_auth("k").body("{nope")).await;
        assert_eq!(
            (s, b.as_str()),
            (
                400,
                r#"{"error":"Invalid JSON body","code":"invalid_request"}"#
            )
        );
        // Two sandboxes do not share /workspace.
        let (s, _) = status_body(
            http.put(format!("{base}/v1/sandbox/abc/file/workspace/x/f"))
                .bearer_auth("k")
                .body("A"),
        )
        .await;
        assert_eq!(s, 200);
        let (s, b) = status_body(
            http.get(format!("{base}/v1/sandbox/abd/file/workspace/x/f"))
                .bearer_auth("k"),
        )
        .await;
        assert_eq!(
            (s, b.as_str()),
            (
                404,
                r#"{"error":"File not found: /workspace/x/f","code":"workspace_read_not_found"}"#
            )
        );
        assert_eq!(
            status_body(
                http.get(format!("{base}/v1/sandbox/abc/file/workspace/x/f"))
                    .bearer_auth("k")
            )
            .await,
            (200, "A".into())
        );
    }

    #[tokio::test]
    async fn a_client_that_goes_away_does_not_stop_the_command_but_destroying_the_sandbox_does() {
        let (emu, http) = emulator().await;
        let base = emu.base_url();
        let exec = format!("{base}/v1/sandbox/abc/exec");
        let resp = http
            .post(&exec)
            .bearer_auth("k")
            .json(&serde_json::json!({"argv": ["sh", "-c", "sleep 1; echo done > /workspace/f"]}))
            .send()
            .await
            .unwrap();
        drop(resp);
        tokio::time::sleep(std::time::Duration::from_millis(1800)).await;
        assert_eq!(
            status_body(
                http.get(format!("{base}/v1/sandbox/abc/file/workspace/f"))
                    .bearer_auth("k")
            )
            .await,
            (200, "done\n".into())
        );
        // Destroyed mid-command: an SSE error event, and the id comes back with a fresh sandbox.
        let emu = Arc::new(emu);
        let killer = {
            let emu = emu.clone();
            tokio::spawn(async move {
                tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                emu.destroy_sandbox("abc")
            })
        };
        let (s, b) = status_body(
            http.post(&exec)
                .bearer_auth("k")
                .json(&serde_json::json!({"argv": ["sleep", "30"]})),
        )
        .await;
        assert!(killer.await.unwrap());
        assert_eq!(s, 200);
        assert!(
            b.starts_with("event: error\ndata: {") && b.contains("\"code\":\"exec_error\""),
            "{b}"
        );
        let (s, _) = status_body(
            http.get(format!("{base}/v1/sandbox/abc/file/workspace/f"))
                .bearer_auth("k"),
        )
        .await;
        assert_eq!(s, 404, "a fresh, empty workspace");
    }
}
