#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! Fly Sprites: the Sprites API's exec surface (WebSocket and HTTP POST), sessions, filesystem,
//! and the sprite CRUD an SDK needs.
//!
//! Under `/v1/sprites/{name}` (every request `Authorization: Bearer <token>`; failure
//! `401 {"error":"authentication failed"}`; an unknown sprite is the observed
//! `500 {"error":"failed to retrieve sprite"}` or, with [`UnknownSprite::NotFound`], a 404):
//!
//! - `GET /exec` with a WebSocket upgrade: a new command. Query `cmd` (repeated: argv), `path`
//!   (the executable, default `cmd[0]`, else `bash`), `dir` (default `/home/sprite`), `env`
//!   (repeated `K=V`; replaces the default environment, see [`EnvMode`]), `stdin` (non-TTY:
//!   forwarded only with `stdin=true`), `tty`, `rows`, `cols`, `max_run_after_disconnect`. No
//!   `cmd` → `400 No command specified`. The server sends the text `session_info`, then binary
//!   frames `0x01`+stdout, `0x02`+stderr (≤ 32 KiB each), and `[0x03, code]` at the exit; it
//!   keeps the socket open [`SpritesOptions::linger`] (5 s, as production does) before closing
//!   with 1000, so a client must close first. Client frames: `0x00`+stdin, exactly `[0x04]` =
//!   stdin EOF, text `{"type":"signal","signal":"TERM"}`. TTY mode (`tty=true`, `rows`, `cols`):
//!   the command runs on a real pseudo-terminal of the sprite (`pty.rs`); binary frames are the
//!   terminal's raw output (stderr merged by the terminal), client binary frames are typed into it,
//!   text `{"type":"resize","cols":C,"rows":R}` resizes it (SIGWINCH to the foreground job), and
//!   the end is text `{"type":"exit","exit_code":N}` then close.
//!   A command that cannot be started (its `dir` does not exist) gets its connection dropped
//!   without an exit frame, as the 2025 server code does. After a client disconnects, the command
//!   keeps running for `max_run_after_disconnect` (non-TTY default 10 s) and can be re-attached.
//! - `GET /exec/{id}` and `GET /exec?id={id}` (WebSocket): attach; `session_info` with
//!   `is_owner:false`, the last 64 KiB of output, then live output.
//! - `GET /exec` (no upgrade): `{"sessions":[{id,command,workdir,created,bytes_per_second,
//!   is_active,last_activity,tty}],"count":N}`; `HEAD /exec`: 200.
//! - `POST /exec/{id}/kill` (`signal`/`timeout` in the query or a JSON body): NDJSON
//!   `signal` → `killed` → `complete{exit_code}`; 410 for a session that already exited.
//! - `POST /exec`: the HTTP fallback; the same query (`tty`→400, `id`/`detachable`/`cc`→400),
//!   stdin = the body when `stdin=true`; `200 application/octet-stream`, each frame its own chunk,
//!   `[0x03, code]` last; a command that cannot start is `500 failed to start process`.
//! - `GET /control`: `404 {"error":"not found"}`, so every SDK uses direct WebSockets.
//! - `/fs/read|write|list|delete|rename|copy|chmod|chown` (see `fs.rs`).
//! - `GET|POST /v1/sprites`, `GET|PUT|DELETE /v1/sprites/{name}` (`url_settings.auth` and
//!   `private_access` at create and by `PUT`; `private_access` kept and answered, not acted on).
//! - The sprite URL, `http://{name}.sprites.localhost:<port>` (`url.rs`): HTTP to a running
//!   service's `http_port`, else 8080; the token unless `url_settings.auth` is `public`.
//! - `/services…` and `/policy/network` (see `services.rs`; the policy is kept, not enforced).
//!
//! Faults (route `exec`, on the request that submits a command: the WebSocket upgrade or the
//! POST) are rendered in this wire format: an HTTP status before the upgrade (429 with
//! `Retry-After`, 500 after the command ran, 503, 401), a reset before any response, the socket
//! dropped after the first output frame (cut), an exit frame without its code byte (malformed),
//! the sprite destroyed mid-command (vanish: the socket drops without an exit).
//!
//! Each sprite is a [`Sandbox`] with `/home/sprite` and `/tmp` private; default environment
//! `HOME=/home/sprite`, `USER=sprite`, `LOGNAME=sprite`, `SHELL=/bin/bash`, a standard `PATH`;
//! default cwd `/home/sprite`. A signal death is reported as 128+n ([`SignalExit`]).
#![warn(missing_docs)]
// Handlers return `Result<_, Response>` (axum's idiom) or `Result<_, tonic::Status>`.
#![allow(clippy::result_large_err)]

mod exec;
mod fs;
mod lifecycle;
mod pty;
mod query;
mod services;
mod session;
mod url;
pub mod wire;

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use axum::Router;
use execseam_emulator_kit::util::hex_id;
use execseam_emulator_kit::{
    Emulator, FAULT_NAMES, FaultHandle, Provider, Rendered, Sandbox, SandboxEntry, SandboxSpec,
    Shell, User,
};

pub use session::Session;

/// The sprite created at start.
pub const DEFAULT_SPRITE: &str = "execseam";
/// The token put in [`Emulator::env`] when the emulator accepts any token.
pub const PLACEHOLDER_TOKEN: &str = "sprites-emulator-token";
/// The home directory and default cwd.
pub const HOME: &str = "/home/sprite";
/// The `sprite` user's uid.
pub const SPRITE_UID: u32 = 1001;
/// The `Sprite-Version` header sent on every response.
pub const SPRITE_VERSION: &str = "v0.0.1-rc46";
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// How an unknown sprite is answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnknownSprite {
    /// `500 {"error":"failed to retrieve sprite"}` (observed in real captures).
    Observed500,
    /// `404 {"error":"sprite not found"}` (what first-party code expects).
    NotFound,
}

/// What `env` query parameters do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EnvMode {
    /// They replace the default environment (the API reference).
    Replace,
    /// They are merged over it (the 2025 container code path).
    Merge,
}

/// The exit code reported for a command killed by a signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignalExit {
    /// 128 + the signal, as a container runtime reports it.
    ShellStyle,
    /// 255, as the 2025 server's `WriteExit(-1)` does.
    Raw255,
}

/// Behaviour switches.
#[derive(Clone, Debug)]
pub struct SpritesOptions {
    /// How an unknown sprite is answered (default: the observed 500).
    pub unknown_sprite: UnknownSprite,
    /// What `env` does (default: replace).
    pub env_mode: EnvMode,
    /// Signal deaths (default: 128+n).
    pub signal_exit: SignalExit,
    /// How long the server keeps the socket open after the exit frame (default 5 s).
    pub linger: Duration,
    /// How long a non-TTY command survives its client's disconnect (default 10 s).
    pub max_run_after_disconnect: Duration,
    /// `session_id` as a JSON string instead of an integer (default false: integer, as the docs).
    pub session_id_string: bool,
    /// Output kept for attach replay, per session (default 64 KiB).
    pub replay_bytes: usize,
}

impl Default for SpritesOptions {
    fn default() -> Self {
        SpritesOptions {
            unknown_sprite: UnknownSprite::Observed500,
            env_mode: EnvMode::Replace,
            signal_exit: SignalExit::ShellStyle,
            linger: Duration::from_secs(5),
            max_run_after_disconnect: Duration::from_secs(10),
            session_id_string: false,
            replay_bytes: 64 * 1024,
        }
    }
}

/// One emulated sprite.
pub struct Sprite {
    name: String,
    id: String,
    created: SystemTime,
    sandbox: Arc<Sandbox>,
    sessions: Mutex<BTreeMap<u64, Arc<Session>>>,
    finished: Mutex<BTreeMap<u64, u8>>,
    alive: AtomicBool,
    labels: Mutex<Vec<String>>,
    checkpoints: Mutex<Vec<lifecycle::Checkpoint>>,
    services: Mutex<BTreeMap<String, Arc<services::Service>>>,
    /// The network policy's rules (`/policy/network`), kept, not enforced.
    policy: Mutex<Vec<serde_json::Value>>,
    /// Its URL (offline: `http://{name}.sprites.localhost:<port>`, see `url.rs`).
    url: String,
    /// `url_settings.auth` is `public` (else `sprite`).
    url_public: AtomicBool,
    /// `url_settings.private_access`, as last set (see `url.rs`).
    private_access: Mutex<Option<String>>,
}

impl std::fmt::Debug for Sprite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sprite")
            .field("name", &self.name)
            .field("alive", &self.is_alive())
            .finish_non_exhaustive()
    }
}

impl Sprite {
    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The sandbox behind it.
    pub fn sandbox(&self) -> &Arc<Sandbox> {
        &self.sandbox
    }

    /// A sprite path as its commands see it (see [`Sandbox::visible_path`]).
    pub fn visible_path(&self, path: &str) -> String {
        self.sandbox.visible_path(path)
    }

    /// The running sessions.
    pub fn sessions(&self) -> Vec<Arc<Session>> {
        self.sessions
            .lock()
            .expect("sessions")
            .values()
            .cloned()
            .collect()
    }

    /// Its URL, which routes HTTP to it (see `url.rs`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// True when its URL needs no token (`url_settings.auth: public`).
    pub fn url_public(&self) -> bool {
        self.url_public.load(Ordering::SeqCst)
    }

    /// Applies what a request's `url_settings` set.
    pub(crate) fn set_url_settings(&self, settings: url::UrlSettings) {
        if let Some(public) = settings.public {
            self.url_public.store(public, Ordering::SeqCst);
        }
        if let Some(p) = settings.private_access {
            *self.private_access.lock().expect("private_access") = Some(p);
        }
    }

    /// `url_settings` as `SpriteInfo` answers it.
    pub(crate) fn url_settings(&self) -> serde_json::Value {
        let mut v =
            serde_json::json!({"auth": if self.url_public() { "public" } else { "sprite" }});
        if let Some(p) = &*self.private_access.lock().expect("private_access") {
            v["private_access"] = serde_json::json!(p);
        }
        v
    }

    /// True until destroyed.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    fn spec(name: &str) -> SandboxSpec {
        let env = [("SHELL", "/bin/bash"), ("PATH", PATH)]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect::<BTreeMap<String, String>>();
        let _ = name;
        // superfly/sprites-go `base-env/images/ubuntu-devtools/Dockerfile`: `useradd -u 1001
        // sprite`, passwordless sudo, groups sudo and users, `USER sprite`; its entrypoint names
        // the host `sprite` in /etc/hosts.
        SandboxSpec::new(
            "sprite",
            "sprite",
            User::new("sprite", SPRITE_UID, HOME).groups(["sudo", "users"]),
            env,
        )
        .other_users([User::root()])
    }

    /// Kills every session (their clients see the socket drop) and removes the sandbox.
    pub(crate) fn destroy(&self) {
        if !self.alive.swap(false, Ordering::SeqCst) {
            return;
        }
        let sessions: Vec<_> = std::mem::take(&mut *self.sessions.lock().expect("sessions"))
            .into_values()
            .collect();
        for s in sessions {
            s.lose();
        }
        self.sandbox.destroy();
    }
}

/// Destroying a sprite drops its sessions' sockets and kills its processes.
impl SandboxEntry for Sprite {
    fn teardown(&self) {
        self.destroy();
    }
}

pub(crate) struct State {
    pub(crate) shell: Arc<Shell<Sprites>>,
    pub(crate) faults: FaultHandle,
    pub(crate) options: Mutex<SpritesOptions>,
    pub(crate) next_session: AtomicU64,
}

impl State {
    pub(crate) fn options(&self) -> SpritesOptions {
        self.options.lock().expect("options").clone()
    }

    pub(crate) fn sprite(&self, name: &str) -> Option<Arc<Sprite>> {
        self.shell.sandboxes().lock().get(name).cloned()
    }

    pub(crate) fn create_sprite(&self, name: &str) -> io::Result<(Arc<Sprite>, bool)> {
        let mut all = self.shell.sandboxes().lock();
        if let Some(s) = all.get(name) {
            return Ok((s.clone(), false));
        }
        let sandbox =
            Sandbox::create(name.to_owned(), Sprite::spec(name), self.shell.sandboxing())?;
        let s = Arc::new(Sprite {
            name: name.to_owned(),
            id: format!("sprite-{}", hex_id(32)),
            created: SystemTime::now(),
            sandbox,
            sessions: Mutex::new(BTreeMap::new()),
            finished: Mutex::new(BTreeMap::new()),
            alive: AtomicBool::new(true),
            labels: Mutex::new(Vec::new()),
            checkpoints: Mutex::new(Vec::new()),
            services: Mutex::new(BTreeMap::new()),
            policy: Mutex::new(Vec::new()),
            url: format!(
                "http://{name}.{}:{}",
                url::URL_DOMAIN,
                self.shell.base_url().rsplit(':').next().unwrap_or("80")
            ),
            url_public: AtomicBool::new(false),
            private_access: Mutex::new(None),
        });
        all.insert(name.to_owned(), s.clone());
        Ok((s, true))
    }

    pub(crate) fn destroy_sprite(&self, name: &str) -> bool {
        self.shell.sandboxes().destroy(name)
    }
}

/// The Sprites provider emulator ([`Provider`]); its typed test accessors are reached through
/// [`SpritesEmulator`] (`Deref`).
pub struct Sprites {
    state: Arc<State>,
}

/// A running Sprites emulator.
pub type SpritesEmulator = Emulator<Sprites>;

impl Provider for Sprites {
    const NAME: &'static str = "sprites";
    /// Every fault on `exec`; `kill` answers a 500 or a 503.
    const FAULTS: Rendered = &[("exec", FAULT_NAMES), ("kill", &["500", "503"])];
    const PLACEHOLDER_TOKEN: &'static str = PLACEHOLDER_TOKEN;
    const SCRATCH: &'static str = "/home/sprite/execseam-conformance";
    const MISSING_SANDBOX_ID: &'static str = "no-such-sprite";
    type Options = SpritesOptions;
    type Sandbox = Sprite;
    /// The sprite's name.
    type Key = String;

    /// One sprite, [`DEFAULT_SPRITE`], exists from the start.
    async fn start(
        shell: Arc<Shell<Sprites>>,
        sprites: SpritesOptions,
    ) -> io::Result<(Sprites, Router)> {
        let state = Arc::new(State {
            faults: shell.faults().clone(),
            shell,
            options: Mutex::new(sprites),
            next_session: AtomicU64::new(1000),
        });
        state.create_sprite(DEFAULT_SPRITE)?;
        let router = exec::router(state.clone());
        Ok((Sprites { state }, router))
    }

    /// The environment the Sprites CLI (`SPRITES_API_URL`, `SPRITE_TOKEN`) and the adapter's
    /// `SpritesConfig::from_env` read, and the default sprite as the sandbox `execseam run`
    /// connects to (`EXECSEAM_SANDBOX`). The SDKs read nothing: pass these to
    /// `SpritesClient(token, base_url=…)`.
    fn env(&self, shell: &Shell<Sprites>) -> Vec<(String, String)> {
        vec![
            ("SPRITES_API_URL".into(), shell.base_url().to_owned()),
            ("SPRITE_TOKEN".into(), shell.token().advertised().to_owned()),
            ("EXECSEAM_SANDBOX".into(), DEFAULT_SPRITE.into()),
        ]
    }
}

impl Sprites {
    /// A sprite by name.
    pub fn sprite(&self, name: &str) -> Option<Arc<Sprite>> {
        self.state.sprite(name)
    }

    /// Creates a sprite (or returns the existing one).
    pub fn create_sprite(&self, name: &str) -> io::Result<Arc<Sprite>> {
        Ok(self.state.create_sprite(name)?.0)
    }

    /// Destroys a sprite: its sessions' sockets drop, its processes are killed.
    pub fn destroy_sprite(&self, name: &str) -> bool {
        self.state.destroy_sprite(name)
    }

    /// Changes the behaviour switches.
    pub fn set_options(&self, f: impl FnOnce(&mut SpritesOptions)) {
        f(&mut self.state.options.lock().expect("options"));
    }

    /// How many command-submitting requests arrived (WebSocket upgrades and POSTs of `/exec`).
    pub fn exec_requests(&self) -> u64 {
        self.state.faults.count("exec")
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<Sprite>();
    is::<State>();
}
