//! `execseam chaos`: the chaos proxy ([`execseam_chaos`]) in front of any plain-HTTP endpoint (an
//! emulator, or a service of your own), so an agent can be tested against cut streams, stalls,
//! resets and endless bodies; `execseam emulate P --chaos RULE…` puts one in front of an
//! emulator. The rule language is the chaos crate's (`execseam_chaos::Rule`).

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;

use execseam_chaos::{ChaosProxy, Rule, parse_rules};

use crate::INFRA_FAILURE;
use crate::run::USAGE;

#[derive(clap::Args, Debug)]
pub struct ChaosArgs {
    /// The endpoint to forward to, `http://HOST:PORT` (plain HTTP/1.1, h2c or WebSocket).
    #[arg(long, value_name = "URL")]
    upstream: String,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// A rule, `[METHOD ]PATH[#NTH]=ACTION` (repeatable; the first rule whose count selects a
    /// request fires): e.g. `POST /execute=truncate:40`, `*=stall`, `GET /logs#2=reset`.
    #[arg(long = "rule", value_name = "RULE")]
    rules: Vec<String>,
    /// Rules separated by `;` (the same language; after the `--rule`s).
    #[arg(long = "rules", value_name = "RULES")]
    rule_lists: Vec<String>,
    /// Do not print a line per request a rule fired on.
    #[arg(long)]
    quiet: bool,
}

/// Every rule of `--rule` and `--rules`, parsed before anything starts; a bad one is a usage
/// error naming it.
pub fn rules(one: &[String], lists: &[String]) -> Result<Vec<Rule>, String> {
    let mut out = Vec::new();
    for r in one {
        out.push(r.parse::<Rule>()?);
    }
    for l in lists {
        out.extend(parse_rules(l)?);
    }
    Ok(out)
}

/// Starts the proxy and prints where it listens and its rules.
pub async fn start(
    listen: SocketAddr,
    upstream: &str,
    rules: Vec<Rule>,
) -> Result<ChaosProxy, ExitCode> {
    let shown: Vec<String> = rules.iter().map(ToString::to_string).collect();
    let proxy = ChaosProxy::start(listen, upstream, rules)
        .await
        .map_err(|e| {
            eprintln!("execseam: cannot start the chaos proxy: {e}");
            if e.kind() == std::io::ErrorKind::InvalidInput {
                ExitCode::from(USAGE)
            } else {
                ExitCode::from(INFRA_FAILURE)
            }
        })?;
    println!(
        "chaos proxy listening on {} -> {upstream}",
        proxy.base_url()
    );
    for r in &shown {
        println!("# rule: {r}");
    }
    if shown.is_empty() {
        println!("# no rules: every request passes through untouched");
    }
    Ok(proxy)
}

/// Prints one stderr line per request a rule fires on, until the proxy stops.
pub fn log_fired(proxy: &ChaosProxy) {
    let mut fired = proxy.subscribe();
    tokio::spawn(async move {
        use tokio::sync::broadcast::error::RecvError;
        loop {
            match fired.recv().await {
                Ok(s) => {
                    let action = s.fired.map(|a| a.to_string()).unwrap_or_default();
                    eprintln!("chaos: {} {} -> {action}", s.method, s.path);
                }
                Err(RecvError::Lagged(n)) => eprintln!("chaos: {n} more requests fired rules"),
                Err(RecvError::Closed) => return,
            }
        }
    });
}

/// Waits for SIGINT or SIGTERM.
pub async fn interrupted() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
    }
}

/// `execseam chaos`: runs until interrupted. Exit 2 for a bad rule or upstream (before anything
/// listens), 125 when the address cannot be bound.
pub async fn chaos(a: ChaosArgs) -> ExitCode {
    let rules = match rules(&a.rules, &a.rule_lists) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("execseam: {e}");
            return ExitCode::from(USAGE);
        }
    };
    let proxy = match start(a.listen, &a.upstream, rules).await {
        Ok(p) => p,
        Err(code) => return code,
    };
    let _ = std::io::stdout().flush();
    if !a.quiet {
        log_fired(&proxy);
    }
    interrupted().await;
    proxy.shutdown().await;
    ExitCode::SUCCESS
}
