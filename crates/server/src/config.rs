//! The server's configuration: the `execseam serve` flags ([`ServeArgs`]) and the checked
//! [`Config`] they become.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use execseam_chrono_contract::wire;

use crate::auth::Tokens;

/// `execseam serve` (also `execseam-server serve`).
#[derive(Clone, Debug, clap::Args)]
pub struct ServeArgs {
    /// The adapter commands run through (any compiled in; `execseam adapters` lists them),
    /// configured from its environment variables.
    #[arg(long, default_value = "local")]
    pub adapter: String,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8787")]
    pub listen: SocketAddr,
    /// The store: `sqlite://PATH` (one node) or `postgres://USER@HOST:PORT/DB` (several
    /// replicas).
    #[arg(long, default_value = "sqlite://execseam-serve.db")]
    pub store: String,
    /// Run every operation in this existing sandbox (connect) instead of a fresh sandbox each.
    #[arg(long)]
    pub sandbox: Option<String>,
    /// Bearer tokens: a file of `OWNER SHA256-HEX` lines (`execseam-server hash-token` prints
    /// the hash; `#` starts a comment). Required unless --no-auth.
    #[arg(long)]
    pub tokens: Option<PathBuf>,
    /// Accept any request without a token (one owner, `anonymous`); for a loopback test only.
    #[arg(long)]
    pub no_auth: bool,
    /// This replica's id in leases; a restarted replica with the same id reconciles what it held
    /// at once instead of waiting for its leases to expire. Default: random per process.
    #[arg(long)]
    pub replica_id: Option<String>,
    /// Operations not yet terminal, over all replicas (429 + Retry-After beyond).
    #[arg(long, default_value_t = 256)]
    pub max_operations: usize,
    /// Commands this replica runs at once (more operations wait queued; sync calls get 429).
    #[arg(long, default_value_t = 16)]
    pub max_running: usize,
    /// Largest request body in bytes (413 beyond).
    #[arg(long, default_value_t = 10 << 20)]
    pub max_payload_bytes: usize,
    /// stdout and stderr kept per execution, each, in bytes (the rest is dropped).
    #[arg(long, default_value_t = 256 << 10)]
    pub max_output_bytes: usize,
    /// `timeout_secs` when a request has none.
    #[arg(long, default_value_t = wire::DEFAULT_TIMEOUT_SECS)]
    pub default_timeout_secs: u32,
    /// The largest `timeout_secs` accepted (at most 600).
    #[arg(long, default_value_t = wire::MAX_TIMEOUT_SECS)]
    pub max_timeout_secs: u32,
    /// How long an operation and its result are kept (410 after).
    #[arg(long, default_value_t = 86_400)]
    pub retention_secs: u64,
    /// `Retry-After` on 202, 304, 409 and active statuses.
    #[arg(long, default_value_t = 1)]
    pub retry_after_secs: u64,
    /// Lease of a running operation; a replica renews it every third of it. An operation whose
    /// lease expired is reconciled by any replica.
    #[arg(long, default_value_t = 10)]
    pub lease_secs: u64,
    /// Absolute cancel deadline, from the first cancel: past it, an operation whose command was
    /// not confirmed stopped ends `outcome_uncertain`.
    #[arg(long, default_value_t = 60)]
    pub cancel_deadline_secs: u64,
    /// How long a cancel request waits for the operation to end before answering 202.
    #[arg(long, default_value_t = 2000)]
    pub cancel_wait_ms: u64,
    /// Answer `/executions*` with 503 ASYNC_EXECUTION_UNAVAILABLE.
    #[arg(long)]
    pub no_async: bool,
}

/// The checked configuration. `Debug` shows the store URL without its password.
#[derive(Clone)]
pub struct Config {
    /// Adapter name.
    pub adapter: String,
    /// Listen address.
    pub listen: SocketAddr,
    /// Store URL (may carry a password: never printed; see [`Config::store_display`]).
    pub store: String,
    /// A shared sandbox to connect to.
    pub sandbox: Option<String>,
    /// Accepted tokens (hashed).
    pub tokens: Option<Tokens>,
    /// Replica id.
    pub replica_id: String,
    /// The restarted replica keeps its id.
    pub stable_replica_id: bool,
    /// See [`ServeArgs`].
    pub max_operations: usize,
    /// See [`ServeArgs`].
    pub max_running: usize,
    /// See [`ServeArgs`].
    pub max_payload_bytes: usize,
    /// See [`ServeArgs`].
    pub max_output_bytes: usize,
    /// See [`ServeArgs`].
    pub default_timeout_secs: u32,
    /// See [`ServeArgs`].
    pub max_timeout_secs: u32,
    /// See [`ServeArgs`].
    pub retention: Duration,
    /// See [`ServeArgs`].
    pub retry_after_secs: u64,
    /// See [`ServeArgs`].
    pub lease: Duration,
    /// See [`ServeArgs`].
    pub cancel_deadline: Duration,
    /// See [`ServeArgs`].
    pub cancel_wait: Duration,
    /// See [`ServeArgs`].
    pub async_enabled: bool,
    /// How often a replica looks for queued work, cancels and expired leases.
    pub tick: Duration,
}

impl std::fmt::Debug for Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Config")
            .field("adapter", &self.adapter)
            .field("listen", &self.listen)
            .field("store", &self.store_display())
            .field("tokens", &self.tokens)
            .field("replica_id", &self.replica_id)
            .finish_non_exhaustive()
    }
}

impl Config {
    /// The defaults of [`ServeArgs`], with no authentication (tests).
    pub fn new(store: impl Into<String>) -> Config {
        use clap::Parser as _;
        #[derive(clap::Parser)]
        struct P {
            #[command(flatten)]
            a: ServeArgs,
        }
        let p = P::try_parse_from(["serve", "--no-auth"]).expect("the defaults parse");
        let mut c = Config::from_args(p.a).expect("the defaults are valid");
        c.store = store.into();
        c
    }

    /// Checks the flags and reads the token file.
    pub fn from_args(a: ServeArgs) -> Result<Config, String> {
        if !(wire::MIN_TIMEOUT_SECS..=wire::MAX_TIMEOUT_SECS).contains(&a.max_timeout_secs) {
            return Err(format!(
                "--max-timeout-secs must be in 1..=600, not {}",
                a.max_timeout_secs
            ));
        }
        if !(1..=a.max_timeout_secs).contains(&a.default_timeout_secs) {
            return Err(format!(
                "--default-timeout-secs must be in 1..={}, not {}",
                a.max_timeout_secs, a.default_timeout_secs
            ));
        }
        if a.max_running == 0 || a.max_operations == 0 {
            return Err("--max-running and --max-operations must be at least 1".into());
        }
        if a.lease_secs == 0 || a.retention_secs == 0 {
            return Err("--lease-secs and --retention-secs must be at least 1".into());
        }
        let tokens = match (&a.tokens, a.no_auth) {
            (Some(_), true) => return Err("--tokens and --no-auth exclude each other".into()),
            (None, false) => {
                return Err("--tokens FILE is required (or --no-auth for a loopback test)".into());
            }
            (Some(path), false) => Some(Tokens::load(path)?),
            (None, true) => None,
        };
        let lease = Duration::from_secs(a.lease_secs);
        Ok(Config {
            adapter: a.adapter,
            listen: a.listen,
            store: a.store,
            sandbox: a.sandbox,
            tokens,
            stable_replica_id: a.replica_id.is_some(),
            replica_id: a.replica_id.unwrap_or_else(|| {
                format!(
                    "replica-{}",
                    execseam_chrono_contract::contract::random_hex(12)
                )
            }),
            max_operations: a.max_operations,
            max_running: a.max_running,
            max_payload_bytes: a.max_payload_bytes,
            max_output_bytes: a.max_output_bytes,
            default_timeout_secs: a.default_timeout_secs,
            max_timeout_secs: a.max_timeout_secs,
            retention: Duration::from_secs(a.retention_secs),
            retry_after_secs: a.retry_after_secs,
            lease,
            cancel_deadline: Duration::from_secs(a.cancel_deadline_secs),
            cancel_wait: Duration::from_millis(a.cancel_wait_ms),
            async_enabled: !a.no_async,
            tick: (lease / 10).clamp(Duration::from_millis(50), Duration::from_millis(250)),
        })
    }

    /// The store URL without its password.
    pub fn store_display(&self) -> String {
        redact_url(&self.store)
    }
}

/// `scheme://user:password@host/…` → `scheme://user:***@host/…`.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (auth, tail) = match rest.find('@') {
        Some(i) if !rest[..i].contains('/') => (&rest[..i], &rest[i..]),
        _ => return url.to_owned(),
    };
    match auth.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***{tail}"),
        None => url.to_owned(),
    }
}
