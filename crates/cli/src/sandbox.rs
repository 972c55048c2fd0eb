//! `execseam sandbox create|connect|list|destroy`: the lifecycle, and
//! `pause|resume|snapshot|snapshots|delete-snapshot|fork|expose|exposed`: sandbox state, through
//! the facade. What each adapter keeps and destroys is its `StateCapabilities`; what it cannot do
//! is a typed `Unsupported` before any request.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use execseam::{
    Error, ExposedPort, Kept, ListFilter, Provider, Sandbox, SandboxInfo, SandboxSpec,
    SnapshotInfo, SnapshotRequest,
};
use serde_json::json;

use crate::registry;
use crate::run::{USAGE, error_status};

#[derive(Args)]
pub struct SandboxArgs {
    #[command(subcommand)]
    command: SandboxCmd,
}

#[derive(Args)]
struct Common {
    /// The adapter.
    #[arg(long, default_value = "local")]
    adapter: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
enum SandboxCmd {
    /// Create a sandbox and print its id; it keeps running until `destroy`.
    Create {
        #[command(flatten)]
        common: Common,
        /// A label, KEY=VALUE (repeatable).
        #[arg(long = "label", value_name = "KEY=VALUE")]
        labels: Vec<String>,
        /// The image or template.
        #[arg(long, conflicts_with = "from_snapshot")]
        image: Option<String>,
        /// Start from this snapshot (an id `execseam sandbox snapshot` printed).
        #[arg(long, value_name = "SNAPSHOT")]
        from_snapshot: Option<String>,
        /// A port to expose (repeatable; adapters that publish ports only at create need it).
        #[arg(long = "port", value_name = "PORT")]
        ports: Vec<u16>,
        /// A sandbox-wide environment variable, KEY=VALUE (repeatable).
        #[arg(long = "env", value_name = "KEY=VALUE")]
        env: Vec<String>,
        /// The sandbox's lifetime in seconds.
        #[arg(long, value_name = "SECS")]
        lifetime: Option<u64>,
        /// A provider-specific option, KEY=VALUE (repeatable).
        #[arg(long = "option", value_name = "KEY=VALUE")]
        options: Vec<String>,
    },
    /// Check that a sandbox exists and print its id.
    Connect {
        #[command(flatten)]
        common: Common,
        /// The sandbox id.
        id: String,
    },
    /// List sandboxes (those carrying every `--label` given).
    List {
        #[command(flatten)]
        common: Common,
        /// A label to filter on, KEY=VALUE (repeatable).
        #[arg(long = "label", value_name = "KEY=VALUE")]
        labels: Vec<String>,
    },
    /// Destroy a sandbox (a sandbox that is already gone is fine).
    Destroy {
        #[command(flatten)]
        common: Common,
        /// The sandbox id.
        id: String,
    },
    /// Pause a sandbox and print the state it is in (paused, or stopped where the provider's
    /// pause is a stop).
    Pause {
        #[command(flatten)]
        common: Common,
        /// The sandbox id.
        id: String,
        /// What to keep: `filesystem` or `filesystem+memory` (the adapter's default if absent).
        #[arg(long, value_name = "KIND")]
        keep: Option<String>,
    },
    /// Resume a paused sandbox.
    Resume {
        #[command(flatten)]
        common: Common,
        /// The sandbox id.
        id: String,
    },
    /// Snapshot a sandbox and print the snapshot id.
    Snapshot {
        #[command(flatten)]
        common: Common,
        /// The sandbox id.
        id: String,
        /// What to keep: `filesystem` or `filesystem+memory` (the adapter's default if absent).
        #[arg(long, value_name = "KIND")]
        kind: Option<String>,
        /// A name for the snapshot, where the adapter names snapshots.
        #[arg(long)]
        name: Option<String>,
        /// How long the provider keeps it, in seconds, where the adapter takes a ttl.
        #[arg(long, value_name = "SECS")]
        ttl: Option<u64>,
        /// Keep it until it is deleted, where the adapter can (refused otherwise).
        #[arg(long, conflicts_with = "ttl")]
        never_expires: bool,
        /// Allow a snapshot that stops the sandbox or ends its processes (refused otherwise).
        #[arg(long)]
        allow_stop: bool,
    },
    /// List snapshots (of one sandbox with --source).
    Snapshots {
        #[command(flatten)]
        common: Common,
        /// Only the snapshots of this sandbox.
        #[arg(long)]
        source: Option<String>,
    },
    /// Delete a snapshot (one already gone is fine).
    DeleteSnapshot {
        #[command(flatten)]
        common: Common,
        /// The snapshot id.
        snapshot: String,
    },
    /// Fork a sandbox and print the new sandbox's id (it keeps running until `destroy`).
    Fork {
        #[command(flatten)]
        common: Common,
        /// The sandbox id.
        id: String,
    },
    /// Expose a port of a sandbox and print its URL (and, with --json, the headers a client
    /// sends).
    Expose {
        #[command(flatten)]
        common: Common,
        /// The sandbox id.
        id: String,
        /// The port inside the sandbox.
        port: u16,
    },
    /// List the exposed ports of a sandbox.
    Exposed {
        #[command(flatten)]
        common: Common,
        /// The sandbox id.
        id: String,
    },
}

fn kept(what: &str, v: Option<String>) -> Result<Option<Kept>, String> {
    match v.as_deref() {
        None => Ok(None),
        Some("filesystem") => Ok(Some(Kept::Filesystem)),
        Some("filesystem+memory") => Ok(Some(Kept::FilesystemAndMemory)),
        Some(other) => Err(format!(
            "--{what} {other:?}: expected filesystem or filesystem+memory"
        )),
    }
}

fn secs(t: Option<std::time::SystemTime>) -> Option<u64> {
    t.and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|d| d.as_secs())
}

fn snapshot_json(s: &SnapshotInfo) -> serde_json::Value {
    json!({
        "id": s.id,
        "kind": s.kind.as_str(),
        "source": s.source,
        "names": s.names,
        "created": secs(s.created),
        "expires": secs(s.expires),
        "size_bytes": s.size_bytes,
    })
}

/// The port, its URL and the headers' names; values (tokens) only with `secrets`.
fn port_json(p: &ExposedPort, secrets: bool) -> serde_json::Value {
    let headers: serde_json::Map<String, serde_json::Value> = p
        .headers
        .iter()
        .map(|(k, v)| {
            let v = if secrets { v.expose() } else { "[redacted]" };
            (k.clone(), json!(v))
        })
        .collect();
    json!({ "port": p.port, "url": p.url, "headers": headers, "expires": secs(p.expires) })
}

/// A handle the command does not own: closing it leaves the sandbox running.
async fn release(sandbox: Box<dyn Sandbox>) -> Result<String, Error> {
    sandbox.set_owned(false);
    let id = sandbox.id().to_owned();
    sandbox.close().await?;
    Ok(id)
}

fn provider(adapter: &str, j: bool) -> Result<Box<dyn Provider>, (bool, Error)> {
    registry::provider(adapter).map_err(|e| (j, e))
}

/// The `KEY=VALUE` arguments of `--{what}`, split.
pub(crate) fn pairs(what: &str, kvs: &[String]) -> Result<Vec<(String, String)>, String> {
    kvs.iter()
        .map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .ok_or_else(|| format!("--{what} {kv:?} is not KEY=VALUE"))
        })
        .collect()
}

fn info_json(i: &SandboxInfo) -> serde_json::Value {
    json!({ "id": i.id, "state": i.state.to_string(), "labels": i.labels, "image": i.image })
}

pub async fn sandbox(args: SandboxArgs) -> ExitCode {
    match run(args).await {
        Ok(code) => code,
        Err((json, e)) => {
            if json {
                println!("{}", json!({ "error": e }));
            } else {
                eprintln!("execseam: {e}");
            }
            error_status(&e)
        }
    }
}

async fn run(args: SandboxArgs) -> Result<ExitCode, (bool, Error)> {
    let usage = |m: String| -> Result<ExitCode, (bool, Error)> {
        eprintln!("execseam: {m}");
        Ok(ExitCode::from(USAGE))
    };
    match args.command {
        SandboxCmd::Create {
            common,
            labels,
            image,
            from_snapshot,
            ports,
            env,
            lifetime,
            options,
        } => {
            let j = common.json;
            let (labels, env, options) = match (
                pairs("label", &labels),
                pairs("env", &env),
                pairs("option", &options),
            ) {
                (Ok(l), Ok(e), Ok(o)) => (l, e, o),
                (Err(m), _, _) | (_, Err(m), _) | (_, _, Err(m)) => return usage(m),
            };
            let mut spec = SandboxSpec::new();
            for (k, v) in labels {
                spec = spec.with_label(k, v);
            }
            for (k, v) in env {
                spec = spec.with_env(k, v);
            }
            for (k, v) in options {
                spec = spec.with_option(k, v);
            }
            if let Some(i) = image {
                spec = spec.with_image(i);
            }
            if let Some(snap) = from_snapshot {
                spec = spec.with_snapshot(snap);
            }
            for p in ports {
                spec = spec.with_port(p);
            }
            if let Some(secs) = lifetime {
                spec = spec.with_lifetime(std::time::Duration::from_secs(secs));
            }
            let provider = registry::provider(&common.adapter).map_err(|e| (j, e))?;
            let sandbox = provider.create(spec).await.map_err(|e| (j, e))?;
            // It outlives this command: closing the handle must not destroy it.
            sandbox.set_owned(false);
            let id = sandbox.id().to_owned();
            sandbox.close().await.map_err(|e| (j, e))?;
            if j {
                println!("{}", json!({ "adapter": common.adapter, "id": id }));
            } else {
                println!("{id}");
            }
            Ok(ExitCode::SUCCESS)
        }
        SandboxCmd::Connect { common, id } => {
            let j = common.json;
            let provider = registry::provider(&common.adapter).map_err(|e| (j, e))?;
            let sandbox = provider.connect(&id).await.map_err(|e| (j, e))?;
            sandbox.close().await.map_err(|e| (j, e))?;
            if j {
                println!(
                    "{}",
                    json!({ "adapter": common.adapter, "id": sandbox.id() })
                );
            } else {
                println!("{}", sandbox.id());
            }
            Ok(ExitCode::SUCCESS)
        }
        SandboxCmd::List { common, labels } => {
            let j = common.json;
            let labels = match pairs("label", &labels) {
                Ok(l) => l,
                Err(m) => return usage(m),
            };
            let mut filter = ListFilter::new();
            for (k, v) in labels {
                filter = filter.with_label(k, v);
            }
            let provider = registry::provider(&common.adapter).map_err(|e| (j, e))?;
            let mut listed = provider.list(&filter).await.map_err(|e| (j, e))?;
            // The provider's order is not trusted: by id.
            listed.sort_by(|a, b| a.id.cmp(&b.id));
            crate::out::list(j, &listed, info_json, |i| {
                let labels: Vec<_> = i.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                format!("{}\t{}\t{}", i.id, i.state, labels.join(","))
            });
            Ok(ExitCode::SUCCESS)
        }
        SandboxCmd::Destroy { common, id } => {
            let j = common.json;
            let provider = registry::provider(&common.adapter).map_err(|e| (j, e))?;
            provider.destroy(&id).await.map_err(|e| (j, e))?;
            if j {
                println!(
                    "{}",
                    json!({ "adapter": common.adapter, "id": id, "destroyed": true })
                );
            } else {
                println!("{id}");
            }
            Ok(ExitCode::SUCCESS)
        }
        SandboxCmd::Pause { common, id, keep } => {
            let j = common.json;
            let keep = match kept("keep", keep) {
                Ok(k) => k,
                Err(m) => return usage(m),
            };
            let p = provider(&common.adapter, j)?;
            let state = p.pause(&id, keep).await.map_err(|e| (j, e))?;
            if j {
                println!(
                    "{}",
                    json!({ "adapter": common.adapter, "id": id, "state": state.to_string() })
                );
            } else {
                println!("{state}");
            }
            Ok(ExitCode::SUCCESS)
        }
        SandboxCmd::Resume { common, id } => {
            let j = common.json;
            let p = provider(&common.adapter, j)?;
            p.resume(&id).await.map_err(|e| (j, e))?;
            if j {
                println!(
                    "{}",
                    json!({ "adapter": common.adapter, "id": id, "state": "running" })
                );
            } else {
                println!("{id}");
            }
            Ok(ExitCode::SUCCESS)
        }
        SandboxCmd::Snapshot {
            common,
            id,
            kind,
            name,
            ttl,
            never_expires,
            allow_stop,
        } => {
            let j = common.json;
            let mut request = SnapshotRequest::new().allow_stop(allow_stop);
            match kept("kind", kind) {
                Ok(Some(k)) => request = request.kind(k),
                Ok(None) => {}
                Err(m) => return usage(m),
            }
            if let Some(n) = name {
                request = request.name(n);
            }
            if let Some(t) = ttl {
                request = request.ttl(std::time::Duration::from_secs(t));
            }
            if never_expires {
                request = request.never_expires();
            }
            let p = provider(&common.adapter, j)?;
            let taken = p.snapshot(&id, request).await.map_err(|e| (j, e))?;
            if j {
                println!(
                    "{}",
                    json!({
                        "adapter": common.adapter,
                        "snapshot": snapshot_json(&taken.snapshot),
                        "source_state": taken.source_state.to_string(),
                    })
                );
            } else {
                println!("{}", taken.snapshot.id);
            }
            Ok(ExitCode::SUCCESS)
        }
        SandboxCmd::Snapshots { common, source } => {
            let j = common.json;
            let p = provider(&common.adapter, j)?;
            let mut listed = p
                .list_snapshots(source.as_deref())
                .await
                .map_err(|e| (j, e))?;
            listed.sort_by(|a, b| a.id.cmp(&b.id));
            crate::out::list(j, &listed, snapshot_json, |s| {
                format!(
                    "{}\t{}\t{}\t{}",
                    s.id,
                    s.kind,
                    s.source.as_deref().unwrap_or("-"),
                    s.names.join(",")
                )
            });
            Ok(ExitCode::SUCCESS)
        }
        SandboxCmd::DeleteSnapshot { common, snapshot } => {
            let j = common.json;
            let p = provider(&common.adapter, j)?;
            p.delete_snapshot(&snapshot).await.map_err(|e| (j, e))?;
            if j {
                println!(
                    "{}",
                    json!({ "adapter": common.adapter, "snapshot": snapshot, "deleted": true })
                );
            } else {
                println!("{snapshot}");
            }
            Ok(ExitCode::SUCCESS)
        }
        SandboxCmd::Fork { common, id } => {
            let j = common.json;
            let p = provider(&common.adapter, j)?;
            let native = p.lifecycle().state.fork.is_some_and(|f| f.native);
            let forked = p.fork(&id).await.map_err(|e| (j, e))?;
            let new = release(forked).await.map_err(|e| (j, e))?;
            if j {
                println!(
                    "{}",
                    json!({ "adapter": common.adapter, "source": id, "id": new, "native": native })
                );
            } else {
                println!("{new}");
            }
            Ok(ExitCode::SUCCESS)
        }
        SandboxCmd::Expose { common, id, port } => {
            let j = common.json;
            let p = provider(&common.adapter, j)?;
            let exposed = p.expose(&id, port).await.map_err(|e| (j, e))?;
            if j {
                // The caller asked for the URL to use it: the headers' values are printed.
                println!("{}", port_json(&exposed, true));
            } else {
                println!("{}", exposed.url);
                for (k, _) in &exposed.headers {
                    eprintln!("execseam: send header {k} (its value: --json)");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        SandboxCmd::Exposed { common, id } => {
            let j = common.json;
            let p = provider(&common.adapter, j)?;
            let listed = p.exposed(&id).await.map_err(|e| (j, e))?;
            crate::out::list(
                j,
                &listed,
                |x| port_json(x, false),
                |x| format!("{}\t{}", x.port, x.url),
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}
