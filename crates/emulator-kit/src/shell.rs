//! The shell every provider emulator shares, and the one trait a provider implements.
//!
//! A provider emulator is a [`Provider`]: its name, its fault table, the credential it
//! advertises, what its sandbox registry holds, its routes and its environment. Everything else
//! is written once here and is the same for every provider:
//!
//! - [`EmulatorOptions`] (where to listen, `--fault` rules, the accepted credential, how
//!   sandboxes are made) and [`Emulator::start`];
//! - the credential check ([`Token`]);
//! - the fault handle, built from the provider's [`Provider::FAULTS`] table, which refuses any
//!   rule outside it (at start and later);
//! - the sandbox registry ([`Sandboxes`]) with the live count the conformance suite's "nothing
//!   left behind" check reads ([`Emulator::sandbox_counter`]), the lifetime reaper (entries whose
//!   [`SandboxEntry::expired`] says so are destroyed) and the teardown of every sandbox when the
//!   emulator is dropped;
//! - the request log ([`RequestLog`]: method, path and headers of every request, credentials
//!   redacted);
//! - [`Emulator::env`] (what the official SDK and the adapter need to reach it), and the untyped
//!   [`AnyEmulator`] the CLI's `execseam emulate` table holds ([`Entry`]).

use std::borrow::Borrow;
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::Response;
use tokio::time::Instant;

use crate::{FaultHandle, FaultRule, Rendered, Sandboxing, Server};

/// How to start an emulator.
#[derive(Clone, Debug)]
pub struct EmulatorOptions {
    /// Where to listen (port 0 picks a free port).
    pub listen: SocketAddr,
    /// Faults armed from the start (`execseam emulate --fault`); each must be in the provider's
    /// [`Provider::FAULTS`] table, or the start fails.
    pub faults: Vec<FaultRule>,
    /// The credential the emulator accepts; `None` accepts any non-empty one.
    pub token: Option<String>,
    /// How sandboxes are made on this host (isolation, bound host paths, state directory).
    pub sandboxing: Sandboxing,
}

impl EmulatorOptions {
    /// The defaults, accepting only `token`.
    pub fn with_token(token: impl Into<String>) -> EmulatorOptions {
        EmulatorOptions {
            token: Some(token.into()),
            ..EmulatorOptions::default()
        }
    }
}

impl Default for EmulatorOptions {
    fn default() -> Self {
        EmulatorOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            faults: Vec::new(),
            token: None,
            sandboxing: Sandboxing::default(),
        }
    }
}

/// One provider's emulator: what differs between providers. The rest is the kit's
/// ([module docs](self)).
///
/// Adding emulator N+1: implement this (routes, fault rendering, the sandbox registry's entry),
/// then add one line to the emulators' table (`execseam-emulators`).
pub trait Provider: Sized + Send + Sync + 'static {
    /// The provider's name: `execseam emulate <NAME>`, and its adapter's name.
    const NAME: &'static str;
    /// Every fault route and the faults ([`Fault::name`](crate::Fault::name)) each renders;
    /// `exec` is the request that submits a command. A rule outside this table is refused.
    const FAULTS: Rendered;
    /// The credential [`Emulator::env`] advertises when the emulator accepts any
    /// ([`EmulatorOptions::token`] is `None`).
    const PLACEHOLDER_TOKEN: &'static str;
    /// A directory inside a sandbox where a client's files belong (under the provider's home or
    /// working directory): where the conformance suite writes.
    const SCRATCH: &'static str;
    /// A well-formed id of a sandbox this provider never issued (its ids' form, where the
    /// provider checks it first): what a handle on a vanished sandbox names.
    const MISSING_SANDBOX_ID: &'static str = "execseamnosuchsandbox0";
    /// Provider-specific switches ([`Emulator::start`] takes their `Default`).
    type Options: Default + Send + 'static;
    /// What the registry holds: one entry per sandbox (machine, sprite, session…).
    type Sandbox: SandboxEntry;
    /// The registry's key (usually the sandbox id).
    type Key: Ord + Clone + fmt::Debug + Send + Sync + 'static;

    /// Builds the provider's state over its shell (the base URL is known: the port is bound)
    /// and returns its routes.
    fn start(
        shell: Arc<Shell<Self>>,
        options: Self::Options,
    ) -> impl Future<Output = io::Result<(Self, Router)>> + Send;

    /// The environment the official SDK and the adapter's `from_env` need to reach the emulator.
    fn env(&self, shell: &Shell<Self>) -> Vec<(String, String)>;

    /// The certificate (PEM) of TLS endpoints it serves with a certificate of its own (Modal's
    /// tunnels), which a client must trust to reach them; `None` when it serves none.
    fn tls_ca_pem(&self) -> Option<String> {
        None
    }

    /// Called when the emulator is dropped, before the registry's sandboxes are destroyed (for
    /// what the provider keeps outside the registry).
    fn shutdown(&self) {}
}

/// What a sandbox registry entry tells the shell.
pub trait SandboxEntry: Send + Sync + 'static {
    /// Whether it counts as a live sandbox ([`Emulator::sandbox_counter`]); a stopped one
    /// that the provider still lists may not.
    fn is_live(&self) -> bool {
        true
    }
    /// Whether its lifetime is over: the reaper destroys it.
    fn expired(&self, _now: Instant) -> bool {
        false
    }
    /// Ends it: kills its processes and removes its root. Called once, when the entry is
    /// destroyed ([`Sandboxes::destroy`]), by the reaper or when the emulator is dropped.
    fn teardown(&self);
}

/// The registry entry of a provider that keeps no sandboxes between requests (Chrono: each
/// execution's sandbox lives exactly as long as its program).
#[derive(Debug)]
pub enum Unregistered {}

impl SandboxEntry for Unregistered {
    fn teardown(&self) {
        match *self {}
    }
}

/// What every emulator's handlers share: the base URL, the credential, the faults, how
/// sandboxes are made, the sandbox registry and the request log.
pub struct Shell<P: Provider> {
    base_url: String,
    token: Token,
    faults: FaultHandle,
    sandboxing: Sandboxing,
    sandboxes: Sandboxes<P::Key, P::Sandbox>,
    log: RequestLog,
}

impl<P: Provider> fmt::Debug for Shell<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shell")
            .field("provider", &P::NAME)
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

impl<P: Provider> Shell<P> {
    /// `http://127.0.0.1:<port>`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }
    /// The credential check.
    pub fn token(&self) -> &Token {
        &self.token
    }
    /// The faults (checked against [`Provider::FAULTS`]).
    pub fn faults(&self) -> &FaultHandle {
        &self.faults
    }
    /// How sandboxes are made.
    pub fn sandboxing(&self) -> &Sandboxing {
        &self.sandboxing
    }
    /// The sandbox registry.
    pub fn sandboxes(&self) -> &Sandboxes<P::Key, P::Sandbox> {
        &self.sandboxes
    }
    /// The request log.
    pub fn log(&self) -> &RequestLog {
        &self.log
    }
}

/// The credential an emulator accepts: the configured one exactly, or any non-empty one.
#[derive(Clone)]
pub struct Token {
    accepted: Option<String>,
    advertised: String,
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Token")
            .field("configured", &self.accepted.is_some())
            .finish_non_exhaustive()
    }
}

impl Token {
    /// Accepts `accepted` only, or (with `None`) any non-empty credential; advertises
    /// `accepted` or `placeholder`.
    pub fn new(accepted: Option<String>, placeholder: &str) -> Token {
        let advertised = accepted.clone().unwrap_or_else(|| placeholder.to_owned());
        Token {
            accepted,
            advertised,
        }
    }
    /// Whether `presented` is accepted.
    pub fn accepts(&self, presented: &str) -> bool {
        match &self.accepted {
            Some(t) => t == presented,
            None => !presented.is_empty(),
        }
    }
    /// Whether `Authorization: Bearer <credential>` carries an accepted credential (the
    /// scheme's case as the header spells it: `Bearer `).
    pub fn accepts_bearer(&self, headers: &HeaderMap) -> bool {
        bearer(headers).is_some_and(|t| self.accepts(t))
    }
    /// What [`Emulator::env`] gives clients: the configured credential or the placeholder.
    pub fn advertised(&self) -> &str {
        &self.advertised
    }
}

/// The credential of `Authorization: Bearer <credential>`, if the header has that form.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
}

/// An emulator's sandboxes, by key.
pub struct Sandboxes<K, S> {
    map: Mutex<BTreeMap<K, Arc<S>>>,
}

impl<K: Ord + Clone, S: SandboxEntry> Sandboxes<K, S> {
    fn new() -> Sandboxes<K, S> {
        Sandboxes {
            map: Mutex::new(BTreeMap::new()),
        }
    }

    /// The map itself, for lookups and listings the helpers below do not cover.
    pub fn lock(&self) -> MutexGuard<'_, BTreeMap<K, Arc<S>>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a sandbox (replacing any under the same key).
    pub fn insert(&self, key: K, sandbox: Arc<S>) {
        self.lock().insert(key, sandbox);
    }

    /// The sandbox under `key`.
    pub fn get<Q: Ord + ?Sized>(&self, key: &Q) -> Option<Arc<S>>
    where
        K: Borrow<Q>,
    {
        self.lock().get(key).cloned()
    }

    /// Forgets the sandbox under `key` without ending it (the caller owns what it returns).
    pub fn remove<Q: Ord + ?Sized>(&self, key: &Q) -> Option<Arc<S>>
    where
        K: Borrow<Q>,
    {
        self.lock().remove(key)
    }

    /// Removes the sandbox under `key` and ends it ([`SandboxEntry::teardown`]); false if there
    /// was none.
    pub fn destroy<Q: Ord + ?Sized>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        let removed = self.remove(key);
        match removed {
            Some(s) => {
                s.teardown();
                true
            }
            None => false,
        }
    }

    /// Removes and ends every sandbox.
    pub fn destroy_all(&self) {
        let all: Vec<Arc<S>> = std::mem::take(&mut *self.lock()).into_values().collect();
        for s in all {
            s.teardown();
        }
    }

    /// The keys, in order.
    pub fn keys(&self) -> Vec<K> {
        self.lock().keys().cloned().collect()
    }

    /// Every sandbox, in key order.
    pub fn values(&self) -> Vec<Arc<S>> {
        self.lock().values().cloned().collect()
    }

    /// How many sandboxes are live ([`SandboxEntry::is_live`]).
    pub fn live(&self) -> usize {
        self.lock().values().filter(|s| s.is_live()).count()
    }

    /// Destroys every sandbox whose lifetime is over.
    pub fn reap(&self, now: Instant)
    where
        K: fmt::Debug,
    {
        let expired: Vec<K> = self
            .lock()
            .iter()
            .filter(|(_, s)| s.expired(now))
            .map(|(k, _)| k.clone())
            .collect();
        for key in expired {
            tracing::debug!(sandbox = ?key, "sandbox reached its timeout");
            self.destroy(&key);
        }
    }
}

/// One request as an emulator received it (for wire assertions in tests).
#[derive(Clone, Debug)]
pub struct RecordedRequest {
    /// The method.
    pub method: String,
    /// The path.
    pub path: String,
    /// Headers, lowercased names; credential headers' values (`authorization`, `x-api-key`,
    /// `x-access-token`, `cookie`, …) are replaced by `<present>`.
    pub headers: BTreeMap<String, String>,
}

/// The last [`RequestLog::CAPACITY`] requests an emulator received.
#[derive(Debug, Default)]
pub struct RequestLog {
    requests: Mutex<VecDeque<RecordedRequest>>,
}

/// Headers whose values are credentials: never kept.
const CREDENTIAL_HEADERS: &[&str] = &[
    "authorization",
    "x-api-key",
    "x-access-token",
    "cookie",
    "proxy-authorization",
    "x-amz-security-token",
];

impl RequestLog {
    /// How many requests are kept.
    pub const CAPACITY: usize = 2000;

    /// Records one request.
    pub fn record(&self, method: &str, path: &str, headers: &HeaderMap) {
        let headers = headers
            .iter()
            .map(|(k, v)| {
                let name = k.as_str().to_ascii_lowercase();
                let value = if CREDENTIAL_HEADERS.contains(&name.as_str())
                    || name.ends_with("-token")
                    || name.ends_with("-secret")
                {
                    "<present>".to_owned()
                } else {
                    String::from_utf8_lossy(v.as_bytes()).into_owned()
                };
                (name, value)
            })
            .collect();
        let mut log = self.requests.lock().unwrap_or_else(|p| p.into_inner());
        if log.len() >= Self::CAPACITY {
            log.pop_front();
        }
        log.push_back(RecordedRequest {
            method: method.to_owned(),
            path: path.to_owned(),
            headers,
        });
    }

    /// The requests kept, oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect()
    }
}

async fn record(
    axum::extract::State(shell): axum::extract::State<Weak<dyn Logs>>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(shell) = shell.upgrade() {
        shell.request_log().record(
            request.method().as_str(),
            request.uri().path(),
            request.headers(),
        );
    }
    next.run(request).await
}

/// The request log, whatever the provider (for the logging layer).
trait Logs: Send + Sync {
    fn request_log(&self) -> &RequestLog;
}

impl<P: Provider> Logs for Shell<P> {
    fn request_log(&self) -> &RequestLog {
        &self.log
    }
}

/// A running emulator of provider `P`: its server, its shell and the provider's own state
/// (reached through `Deref`, for the provider's typed test accessors). Dropping it stops the
/// server and destroys every sandbox.
pub struct Emulator<P: Provider> {
    provider: P,
    shell: Arc<Shell<P>>,
    // Dropped after `Drop::drop` ended the sandboxes: in-flight requests see them gone.
    _server: Server,
}

impl<P: Provider> fmt::Debug for Emulator<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Emulator")
            .field("provider", &P::NAME)
            .field("base_url", &self.shell.base_url)
            .finish_non_exhaustive()
    }
}

impl<P: Provider> Emulator<P> {
    /// Starts the emulator with the provider's default options.
    pub async fn start(options: EmulatorOptions) -> io::Result<Emulator<P>> {
        Emulator::start_with(options, P::Options::default()).await
    }

    /// Starts the emulator. Fails (`InvalidInput`) on a `--fault` rule outside
    /// [`Provider::FAULTS`], before anything listens.
    pub async fn start_with(options: EmulatorOptions, provider: P::Options) -> io::Result<Self> {
        let faults = FaultHandle::new(P::NAME, P::FAULTS, &options.faults)?;
        let listener = tokio::net::TcpListener::bind(options.listen).await?;
        let addr = listener.local_addr()?;
        let shell = Arc::new(Shell {
            base_url: format!("http://{addr}"),
            token: Token::new(options.token, P::PLACEHOLDER_TOKEN),
            faults,
            sandboxing: options.sandboxing,
            sandboxes: Sandboxes::new(),
            log: RequestLog::default(),
        });
        let (provider, router) = P::start(shell.clone(), provider).await?;
        let logs: Weak<dyn Logs> = Arc::downgrade(&shell) as Weak<dyn Logs>;
        let router = router.layer(axum::middleware::from_fn_with_state(logs, record));
        let server = Server::serve(listener, router)?;
        tokio::spawn(reaper(Arc::downgrade(&shell)));
        Ok(Emulator {
            provider,
            shell,
            _server: server,
        })
    }

    /// `http://127.0.0.1:<port>`.
    pub fn base_url(&self) -> String {
        self.shell.base_url.clone()
    }

    /// The environment the official SDK and the adapter's `from_env` need.
    pub fn env(&self) -> Vec<(String, String)> {
        self.provider.env(&self.shell)
    }

    /// The faults (routes and faults as [`Provider::FAULTS`] declares).
    pub fn faults(&self) -> &FaultHandle {
        &self.shell.faults
    }

    /// The credential the emulator accepts (the configured one, or its placeholder: any
    /// non-empty credential is accepted then).
    pub fn token(&self) -> String {
        self.shell.token.advertised().to_owned()
    }

    /// The shell (for the provider's own tests).
    pub fn shell(&self) -> &Arc<Shell<P>> {
        &self.shell
    }

    /// How many live sandboxes the emulator holds.
    pub fn sandbox_count(&self) -> usize {
        self.shell.sandboxes.live()
    }

    /// A count of the live sandboxes that outlives this handle (the conformance suite's
    /// "nothing left behind" check): 0 once the emulator is gone.
    pub fn sandbox_counter(&self) -> impl Fn() -> usize + Send + Sync + 'static {
        let shell = Arc::downgrade(&self.shell);
        move || shell.upgrade().map_or(0, |s| s.sandboxes.live())
    }

    /// The requests received so far (the last [`RequestLog::CAPACITY`]).
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shell.log.requests()
    }

    /// The untyped view (for tables of every provider, such as the CLI's).
    pub fn into_any(self) -> AnyEmulator {
        AnyEmulator {
            provider: P::NAME,
            base_url: self.base_url(),
            env: self.env(),
            faults: self.shell.faults.clone(),
            live_sandboxes: Arc::new(self.sandbox_counter()),
            tls_ca_pem: self.provider.tls_ca_pem(),
            guard: Box::new(self),
        }
    }
}

impl<P: Provider> Deref for Emulator<P> {
    type Target = P;
    fn deref(&self) -> &P {
        &self.provider
    }
}

impl<P: Provider> Drop for Emulator<P> {
    fn drop(&mut self) {
        self.provider.shutdown();
        self.shell.sandboxes.destroy_all();
    }
}

async fn reaper<P: Provider>(shell: Weak<Shell<P>>) {
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        match shell.upgrade() {
            Some(s) => s.sandboxes.reap(Instant::now()),
            None => return,
        }
    }
}

/// A running emulator of any provider.
pub struct AnyEmulator {
    /// The provider's name.
    pub provider: &'static str,
    /// The base URL the emulator serves.
    pub base_url: String,
    /// Environment variables an official SDK (and the adapter's `from_env`) needs to reach it.
    pub env: Vec<(String, String)>,
    /// Its faults.
    pub faults: FaultHandle,
    /// Its count of live sandboxes ([`Emulator::sandbox_counter`]).
    pub live_sandboxes: Arc<dyn Fn() -> usize + Send + Sync>,
    /// [`Provider::tls_ca_pem`].
    pub tls_ca_pem: Option<String>,
    /// Keeps the server and the provider's state alive.
    pub guard: Box<dyn std::any::Any + Send + Sync>,
}

crate::debug_fields!(AnyEmulator: provider, base_url);

/// How [`Entry::start`] starts an emulator.
pub type StartFn =
    fn(EmulatorOptions) -> Pin<Box<dyn Future<Output = io::Result<AnyEmulator>> + Send>>;

/// One row of a table of emulators: a provider's name, its fault table, its conventions and how
/// to start it.
#[derive(Clone, Copy)]
pub struct Entry {
    /// [`Provider::NAME`].
    pub name: &'static str,
    /// [`Provider::FAULTS`].
    pub faults: Rendered,
    /// [`Provider::SCRATCH`].
    pub scratch: &'static str,
    /// [`Provider::MISSING_SANDBOX_ID`].
    pub missing_sandbox_id: &'static str,
    /// Starts it with the provider's default options.
    pub start: StartFn,
}

impl fmt::Debug for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Entry").field("name", &self.name).finish()
    }
}

impl Entry {
    /// The row of provider `P`.
    pub const fn of<P: Provider>() -> Entry
    where
        P::Options: Default,
    {
        Entry {
            name: P::NAME,
            faults: P::FAULTS,
            scratch: P::SCRATCH,
            missing_sandbox_id: P::MISSING_SANDBOX_ID,
            start: start_any::<P>,
        }
    }
}

fn start_any<P: Provider>(
    options: EmulatorOptions,
) -> Pin<Box<dyn Future<Output = io::Result<AnyEmulator>> + Send>> {
    Box::pin(async move { Ok(Emulator::<P>::start(options).await?.into_any()) })
}
