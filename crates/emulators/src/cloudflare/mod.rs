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
//! Deliberate deviations (listed in `docs/adapters/cloudflare.md`): tunnels and bucket mounts
//! answer with their documented 502 errors (the emulator has no cloudflared or s3fs); a timed-out command is killed at once (no 5 s grace between SIGTERM and SIGKILL);
//! a signal death is reported as 128+n.
//!
//! Faults (route `exec`, at the top of the exec handler): 429 with `Retry-After` (as Cloudflare's
//! edge answers: `error code: 1015`), 500 after running the command (Hono's `Internal Server
//! Error`), 503 `capacity_exceeded`, a reset before the response, a stream cut before `exit`, a
//! `stdout` event whose data is not base64, latency, 401 `unauthorized`, and the sandbox destroyed
//! mid-command (an `exec_error` event; its id then gets a fresh sandbox, as on the real bridge).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use axum::Router;

use crate::harness::{Dir, FaultHandle, Sandbox, SandboxSpec, Sandboxing, Server, User};
use crate::{Emulator, EmulatorOptions};

mod exec;
mod pty;
mod pty_spawn;
mod routes;
pub mod wire;

/// The fault routes and what each renders (`--fault ROUTE=FAULT`): the bridge renders every fault on `exec` only.
pub const FAULTS: crate::harness::Rendered = &[("exec", crate::harness::FAULT_NAMES)];

/// The bridge's OpenAPI document (from `@cloudflare/sandbox` 0.12.10), served at
/// `/v1/openapi.json` and used by the schema check.
pub const OPENAPI: &str = include_str!("../../interop/cloudflare/openapi-0.12.10.json");

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
    let h: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(63)
        .collect();
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

/// One sandbox behind an id.
pub(crate) struct Entry {
    pub(crate) sandbox: Arc<Sandbox>,
    pub(crate) sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// The terminals (`/pty`), one per session.
    pub(crate) terminals: pty::Terminals,
}

/// The emulator's state.
pub(crate) struct State {
    pub(crate) token: Option<String>,
    pub(crate) sandboxing: Sandboxing,
    pub(crate) faults: FaultHandle,
    pub(crate) sandboxes: Mutex<HashMap<String, Arc<Entry>>>,
}

impl State {
    /// The warm pool's `getContainer`: the sandbox behind `id`, created on first use.
    pub(crate) fn get_or_create(&self, id: &str) -> std::io::Result<Arc<Entry>> {
        let mut map = self.sandboxes.lock().expect("sandboxes");
        if let Some(e) = map.get(id)
            && e.sandbox.is_alive()
        {
            return Ok(e.clone());
        }
        let sandbox = Sandbox::create(id, spec(id), &self.sandboxing)?;
        let entry = Arc::new(Entry {
            sandbox,
            sessions: Mutex::new(HashMap::new()),
            terminals: pty::Terminals::default(),
        });
        map.insert(id.to_owned(), entry.clone());
        Ok(entry)
    }

    /// Destroys the sandbox behind `id` (its processes are killed); true if there was one.
    pub(crate) fn destroy(&self, id: &str) -> bool {
        let entry = self.sandboxes.lock().expect("sandboxes").remove(id);
        match entry {
            Some(e) => {
                e.sandbox.destroy();
                true
            }
            None => false,
        }
    }
}

/// A running bridge emulator, with typed access for tests.
pub struct CloudflareEmulator {
    server: Server,
    state: Arc<State>,
}

impl std::fmt::Debug for CloudflareEmulator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CloudflareEmulator")
            .field("base_url", &self.server.base_url())
            .finish_non_exhaustive()
    }
}

/// The token placed in [`CloudflareEmulator::env`] when the emulator accepts any token.
pub const ANY_TOKEN: &str = "execseam-emulator-token";

impl CloudflareEmulator {
    /// Starts the emulator.
    pub async fn start(options: EmulatorOptions) -> std::io::Result<CloudflareEmulator> {
        let faults = FaultHandle::new();
        crate::harness::arm_checked(&faults, "cloudflare", &options.faults, FAULTS)?;
        let state = Arc::new(State {
            token: options.token.clone(),
            sandboxing: options.sandboxing,
            faults,
            sandboxes: Mutex::new(HashMap::new()),
        });
        let router = Router::new()
            .fallback(routes::handle)
            .with_state(state.clone());
        let server = Server::start(options.listen, router).await?;
        Ok(CloudflareEmulator { server, state })
    }

    /// `http://127.0.0.1:<port>` (the bridge Worker's URL; the API is under `/v1`).
    pub fn base_url(&self) -> String {
        self.server.base_url()
    }

    /// The token clients should send.
    pub fn token(&self) -> &str {
        self.state.token.as_deref().unwrap_or(ANY_TOKEN)
    }

    /// `CLOUDFLARE_SANDBOX_WORKER_URL` and `CLOUDFLARE_SANDBOX_API_KEY` (what our adapter's
    /// `from_env` reads; the OpenAI Agents SDK reads the key from the same variable and takes
    /// the URL as `worker_url`).
    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("CLOUDFLARE_SANDBOX_WORKER_URL".into(), self.base_url()),
            ("CLOUDFLARE_SANDBOX_API_KEY".into(), self.token().to_owned()),
        ]
    }

    /// The fault injector (route `exec`).
    pub fn faults(&self) -> &FaultHandle {
        &self.state.faults
    }

    /// The sandbox behind `id`, if it has one now.
    pub fn sandbox(&self, id: &str) -> Option<Arc<Sandbox>> {
        self.state
            .sandboxes
            .lock()
            .expect("sandboxes")
            .get(id)
            .map(|e| e.sandbox.clone())
    }

    /// A counter of the ids that have a container now, that outlives this handle (for the
    /// conformance suite's "nothing left behind" check).
    pub fn sandbox_counter(&self) -> impl Fn() -> usize + Send + Sync + 'static {
        let state = Arc::downgrade(&self.state);
        move || {
            state
                .upgrade()
                .map_or(0, |s| s.sandboxes.lock().expect("sandboxes").len())
        }
    }

    /// The ids of the sandboxes that have a container.
    pub fn sandbox_ids(&self) -> Vec<String> {
        let mut v: Vec<_> = self
            .state
            .sandboxes
            .lock()
            .expect("sandboxes")
            .keys()
            .cloned()
            .collect();
        v.sort();
        v
    }

    /// Destroys the sandbox behind `id` (as `DELETE /v1/sandbox/{id}` does); true if it had one.
    pub fn destroy_sandbox(&self, id: &str) -> bool {
        self.state.destroy(id)
    }

    /// The CLI's view: base URL, environment, faults, and a guard keeping everything alive.
    pub fn into_emulator(self) -> Emulator {
        Emulator {
            provider: "cloudflare",
            base_url: self.base_url(),
            env: self.env(),
            faults: self.state.faults.clone(),
            guard: Box::new(self),
        }
    }
}

impl Drop for CloudflareEmulator {
    fn drop(&mut self) {
        for (_, e) in self.state.sandboxes.lock().expect("sandboxes").drain() {
            e.sandbox.destroy();
        }
    }
}

/// Starts the bridge emulator (the registry's entry point).
pub async fn start(options: EmulatorOptions) -> std::io::Result<Emulator> {
    Ok(CloudflareEmulator::start(options).await?.into_emulator())
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn emulator() -> (CloudflareEmulator, reqwest::Client) {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let emu = CloudflareEmulator::start(EmulatorOptions {
            token: Some("k".into()),
            ..EmulatorOptions::default()
        })
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
