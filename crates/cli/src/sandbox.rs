//! `execseam sandbox create|connect|list|destroy`: the lifecycle, through the facade.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use execseam::{Error, ListFilter, Sandbox, SandboxInfo, SandboxSpec};
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
        /// The image, template or snapshot.
        #[arg(long)]
        image: Option<String>,
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
}

fn pairs(what: &str, kvs: &[String]) -> Result<Vec<(String, String)>, String> {
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
                println!(
                    "{}",
                    json!({ "error": { "kind": format!("{:?}", e.kind()), "message": e.to_string() } })
                );
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
            if j {
                let v: Vec<_> = listed.iter().map(info_json).collect();
                println!("{}", serde_json::Value::Array(v));
            } else {
                for i in &listed {
                    let labels: Vec<_> = i.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                    println!("{}\t{}\t{}", i.id, i.state, labels.join(","));
                }
            }
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
    }
}
