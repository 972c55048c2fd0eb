#![doc = include_str!("../README.md")]
//!
//! # Modules
//!
//! - [`http`]: the routes; [`store`]: the SQL store; [`node`]: a replica's loops;
//!   [`runner`]: one execution through the adapter; [`auth`]: hashed bearer tokens;
//!   [`metrics`]: `/metrics`; [`config`]: the flags; [`listen`]: the accept loop (header
//!   timeout, connection limit).
#![warn(missing_docs)]

pub mod auth;
pub mod config;
pub mod http;
pub mod listen;
pub mod metrics;
pub mod node;
pub mod runner;
pub mod store;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;

pub use config::{Config, ServeArgs};
use execseam::Provider;

/// A running replica.
pub struct Server {
    addr: SocketAddr,
    node: Arc<node::Node>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Starts a replica with the adapter `config.adapter` from the registry, configured from
    /// this process's environment.
    pub async fn start(config: Config) -> Result<Server, String> {
        let provider = execseam::provider(&config.adapter).map_err(|e| e.to_string())?;
        Server::start_with(config, provider).await
    }

    /// Starts a replica over `provider`.
    pub async fn start_with(config: Config, provider: Box<dyn Provider>) -> Result<Server, String> {
        let metrics = Arc::new(metrics::Metrics::default());
        let store = store::Store::open(&config.store, metrics.clone())
            .await
            .map_err(|e| e.to_string())?;
        let runner = runner::Runner::new(
            provider,
            config.sandbox.clone(),
            config.max_output_bytes,
            metrics.clone(),
        );
        let listener = tokio::net::TcpListener::bind(config.listen)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let node = Arc::new(node::Node::new(config, store, runner, metrics));
        node.start().await.map_err(|e| e.to_string())?;
        let app = http::router(node.clone());
        let task = tokio::spawn(listen::serve(
            listener,
            app,
            node.connections.clone(),
            node.config.header_timeout,
        ));
        Ok(Server { addr, node, task })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The replica.
    pub fn node(&self) -> &Arc<node::Node> {
        &self.node
    }

    /// Stops listening and stops the loops.
    pub async fn stop(self) {
        self.node.stop();
        self.task.abort();
        let _ = self.task.await;
        self.node.store.close().await;
    }
}

/// `execseam serve`: runs until SIGINT or SIGTERM. Prints one line when listening:
/// `execseam serve: listening on http://ADDR (…)`.
pub async fn serve(args: ServeArgs) -> ExitCode {
    let config = match Config::from_args(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("execseam serve: {e}");
            return ExitCode::from(2);
        }
    };
    let line = format!(
        "adapter {}, store {}, replica {}",
        config.adapter,
        config.store_display(),
        config.replica_id
    );
    let server = match Server::start(config).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("execseam serve: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "execseam serve: listening on {} ({line})",
        server.base_url()
    );
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("execseam serve: {e}");
            return ExitCode::FAILURE;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    server.stop().await;
    ExitCode::SUCCESS
}

/// `hash-token`: the hash of the token on stdin, for the token file.
pub fn hash_token_stdin() -> ExitCode {
    let mut line = String::new();
    if std::io::stdin().read_line(&mut line).is_err() || line.trim().is_empty() {
        eprintln!("execseam serve hash-token: give the token on stdin");
        return ExitCode::from(2);
    }
    let token = secrecy::SecretString::from(line.trim().to_owned());
    println!("{}", auth::hash_token(&token));
    ExitCode::SUCCESS
}
