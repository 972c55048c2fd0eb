//! Every adapter the CLI knows: its name, capabilities, configuration and how to connect.
//!
//! Each adapter crate provides its capabilities and a `from_env` constructor; this table is the
//! only place the CLI names them.

use std::sync::{Arc, Mutex};

use execseam_core::{BoxFuture, Capabilities, Error, Exec};

/// A clean-up: removes a sandbox or session.
type Cleanup = BoxFuture<'static, Result<(), Error>>;

/// Connects an adapter from the environment.
type Connect = fn() -> BoxFuture<'static, Result<Arc<dyn Exec>, Error>>;

/// Clean-ups to run before the CLI exits: sandboxes and sessions this run created.
static CLOSERS: Mutex<Vec<(&'static str, Cleanup)>> = Mutex::new(Vec::new());

/// Registers `cleanup` to run when the command is done (whatever its result).
fn on_exit(adapter: &'static str, cleanup: Cleanup) {
    CLOSERS.lock().expect("closers").push((adapter, cleanup));
}

/// True when `var` names no existing sandbox, so this run creates one (and must remove it).
fn creates(var: &str) -> bool {
    std::env::var(var).map_or(true, |v| v.is_empty())
}

/// Runs every registered clean-up; a failure is reported on stderr, never hidden.
pub async fn close_all() {
    let closers = std::mem::take(&mut *CLOSERS.lock().expect("closers"));
    for (adapter, cleanup) in closers {
        if let Err(e) = cleanup.await {
            eprintln!("execseam: {adapter}: cleaning up the sandbox this run created failed: {e}");
        }
    }
}

/// One adapter.
pub struct Adapter {
    /// `--adapter` name.
    pub name: &'static str,
    /// One line.
    pub about: &'static str,
    /// Environment variables read by `from_env` (secrets are read, never printed).
    pub env: &'static [&'static str],
    /// Its capabilities (as configured by default).
    pub capabilities: fn() -> Capabilities,
    /// Connects using the environment.
    pub connect: Connect,
}

pub fn all() -> Vec<Adapter> {
    vec![
        Adapter {
            name: "local",
            about: "runs commands on this host (the embedded default)",
            env: &[],
            capabilities: || execseam_local::LocalExec::new().capabilities(),
            connect: || {
                Box::pin(async { Ok(Arc::new(execseam_local::LocalExec::new()) as Arc<dyn Exec>) })
            },
        },
        // @adapters: each adapter adds one entry here.
        Adapter {
            name: "fly",
            about: "Fly Machines through the Machines API exec endpoint (the machine is started first if it is stopped)",
            env: &[
                "FLY_API_TOKEN",
                "FLY_APP_NAME",
                "FLY_MACHINE_ID",
                "FLY_FLAPS_BASE_URL",
                "FLY_EXEC_TIMEOUT",
                "FLY_EXEC_CONTAINER",
            ],
            capabilities: || execseam_fly::CAPABILITIES,
            connect: || {
                Box::pin(async {
                    let fly = execseam_fly::FlyExec::from_env()?;
                    fly.ensure_started().await?;
                    Ok(Arc::new(fly) as Arc<dyn Exec>)
                })
            },
        },
        Adapter {
            name: "sprites",
            about: "Fly Sprites over the exec WebSocket (SPRITES_EXEC_TRANSPORT=http for the POST fallback)",
            env: &[
                "SPRITE_TOKEN",
                "SPRITE_NAME",
                "SPRITES_API_URL",
                "SPRITES_EXEC_TRANSPORT",
            ],
            capabilities: || execseam_sprites::CAPABILITIES,
            connect: || {
                Box::pin(async {
                    Ok(Arc::new(execseam_sprites::SpritesExec::from_env()?) as Arc<dyn Exec>)
                })
            },
        },
        Adapter {
            name: "e2b",
            about: "E2B sandboxes: control plane plus envd over Connect (E2B_SANDBOX_ID, or a new sandbox that ends with E2B_SANDBOX_TIMEOUT)",
            env: execseam_e2b::ENV_VARS,
            capabilities: || execseam_e2b::CAPABILITIES,
            connect: || {
                Box::pin(async {
                    use execseam_core::Sandbox;
                    let provider = execseam_e2b::E2bProvider::from_env()?;
                    let e2b = match std::env::var("E2B_SANDBOX_ID")
                        .ok()
                        .filter(|s| !s.is_empty())
                    {
                        Some(id) => provider.connect(&id).await?,
                        None => provider.create(execseam_core::SandboxSpec::new()).await?,
                    };
                    if creates("E2B_SANDBOX_ID") {
                        let owned = e2b.clone();
                        on_exit("e2b", Box::pin(async move { owned.close().await }));
                    }
                    Ok(Arc::new(e2b) as Arc<dyn Exec>)
                })
            },
        },
        Adapter {
            name: "ax",
            about: "agent-substrate guest services as google/ax serves them (ateenv.v1alpha over plain-text gRPC)",
            env: &[execseam_ax::ENV_ENDPOINT, execseam_ax::ENV_TARGET_ACTOR],
            capabilities: || execseam_ax::CAPABILITIES,
            connect: || {
                Box::pin(async { Ok(Arc::new(execseam_ax::AxExec::from_env()?) as Arc<dyn Exec>) })
            },
        },
        Adapter {
            name: "cloudflare",
            about: "Cloudflare Sandbox through the sandbox bridge Worker (CLOUDFLARE_SANDBOX_ID or a new sandbox; EXECSEAM_CLOUDFLARE_MODE=exact for byte-exact output)",
            env: execseam_cloudflare::ENV_VARS,
            capabilities: || {
                let mode = std::env::var("EXECSEAM_CLOUDFLARE_MODE")
                    .ok()
                    .and_then(|m| m.parse().ok())
                    .unwrap_or_default();
                execseam_cloudflare::CloudflareExec::capabilities_of(mode)
            },
            connect: || {
                Box::pin(async {
                    let cf = execseam_cloudflare::CloudflareExec::from_env().await?;
                    if creates("CLOUDFLARE_SANDBOX_ID") {
                        let owned = cf.clone();
                        on_exit("cloudflare", Box::pin(async move { owned.destroy().await }));
                    }
                    Ok(Arc::new(cf) as Arc<dyn Exec>)
                })
            },
        },
        Adapter {
            name: "daytona",
            about: "Daytona sandboxes (each command in its own session; DAYTONA_SANDBOX_ID or a new sandbox)",
            env: &[
                "DAYTONA_API_KEY",
                "DAYTONA_JWT_TOKEN",
                "DAYTONA_ORGANIZATION_ID",
                "DAYTONA_API_URL",
                "DAYTONA_TARGET",
                "DAYTONA_SANDBOX_ID",
                "DAYTONA_SNAPSHOT",
                "EXECSEAM_DAYTONA_TEMP_DIR",
            ],
            capabilities: || execseam_daytona::CAPABILITIES,
            connect: || {
                Box::pin(async {
                    let config = execseam_daytona::DaytonaConfig::from_env()?;
                    let daytona = execseam_daytona::DaytonaExec::connect(config).await?;
                    if creates("DAYTONA_SANDBOX_ID") {
                        let owned = daytona.clone();
                        on_exit(
                            "daytona",
                            Box::pin(async move { owned.delete_sandbox().await }),
                        );
                    }
                    Ok(Arc::new(daytona) as Arc<dyn Exec>)
                })
            },
        },
        Adapter {
            name: "agentcore",
            about: "AWS Bedrock AgentCore Code Interpreter (a session per run unless AGENTCORE_SESSION_ID is set)",
            env: execseam_agentcore::AgentCoreConfig::ENV,
            capabilities: || {
                execseam_agentcore::AgentCoreConfig::from_env()
                    .map(|c| {
                        execseam_agentcore::capabilities_for(c.exec_mode(), c.is_exact_output())
                    })
                    .unwrap_or(execseam_agentcore::CAPABILITIES)
            },
            connect: || {
                Box::pin(async {
                    let agentcore = execseam_agentcore::AgentCoreExec::from_env().await?;
                    // close() stops only a session this adapter started.
                    let owned = agentcore.clone();
                    on_exit("agentcore", Box::pin(async move { owned.close().await }));
                    Ok(Arc::new(agentcore) as Arc<dyn Exec>)
                })
            },
        },
        Adapter {
            name: "modal",
            about: "Modal Sandboxes over gRPC: the control plane and the task command router (EXECSEAM_MODAL_SANDBOX_ID, or a new sandbox)",
            env: execseam_modal::ENV_VARS,
            capabilities: || execseam_modal::CAPABILITIES,
            connect: || {
                Box::pin(async {
                    use execseam_core::Sandbox;
                    let provider = execseam_modal::ModalProvider::from_env()?;
                    let modal = match std::env::var("EXECSEAM_MODAL_SANDBOX_ID")
                        .ok()
                        .filter(|s| !s.is_empty())
                    {
                        Some(id) => provider.connect(&id).await?,
                        None => provider.create(execseam_core::SandboxSpec::new()).await?,
                    };
                    if creates("EXECSEAM_MODAL_SANDBOX_ID") {
                        let owned = modal.clone();
                        on_exit("modal", Box::pin(async move { owned.close().await }));
                    }
                    Ok(Arc::new(modal) as Arc<dyn Exec>)
                })
            },
        },
        Adapter {
            name: "chrono",
            about: "Chrono Sandbox through POST /execute (CHRONO_DURABLE=1: the durable /executions contract)",
            env: &[
                "CHRONO_BASE_URL",
                "CHRONO_TOKEN",
                "CHRONO_DELEGATION_TOKEN",
                "CHRONO_VIA",
                "CHRONO_TIMEOUT_SECS",
                "CHRONO_DURABLE",
            ],
            capabilities: || {
                execseam_chrono::ChronoConfig::from_env()
                    .map(|c| execseam_chrono::ChronoExec::capabilities_of(&c))
                    .unwrap_or(execseam_chrono::CAPABILITIES)
            },
            connect: || {
                Box::pin(async {
                    Ok(Arc::new(execseam_chrono::ChronoExec::from_env()?) as Arc<dyn Exec>)
                })
            },
        },
        Adapter {
            name: "vercel",
            about: "Vercel Sandbox over its REST API (VERCEL_SANDBOX_NAME, or a new sandbox deleted when the run ends)",
            env: execseam_vercel::ENV_VARS,
            capabilities: || execseam_vercel::CAPABILITIES,
            connect: || {
                Box::pin(async {
                    use execseam_core::Sandbox;
                    let provider = execseam_vercel::VercelProvider::from_env()?;
                    let sb = match std::env::var("VERCEL_SANDBOX_NAME")
                        .ok()
                        .filter(|s| !s.is_empty())
                    {
                        Some(name) => provider.connect(&name).await?,
                        None => provider.create(execseam_core::SandboxSpec::new()).await?,
                    };
                    if creates("VERCEL_SANDBOX_NAME") {
                        let owned = sb.clone();
                        on_exit("vercel", Box::pin(async move { owned.close().await }));
                    }
                    Ok(Arc::new(sb) as Arc<dyn Exec>)
                })
            },
        },
        Adapter {
            name: "northflank",
            about: "a Northflank service's container over the exec WebSocket (NORTHFLANK_SERVICE_ID; connect-only)",
            env: execseam_northflank::ENV_VARS,
            capabilities: || execseam_northflank::CAPABILITIES,
            connect: || {
                Box::pin(async {
                    let provider = execseam_northflank::NorthflankProvider::from_env()?;
                    let id = std::env::var("NORTHFLANK_SERVICE_ID")
                        .ok()
                        .filter(|s| !s.is_empty())
                        .ok_or_else(|| {
                            Error::invalid_config(
                                "NORTHFLANK_SERVICE_ID names the service (or jobs/<id>) to run in",
                            )
                        })?;
                    Ok(Arc::new(provider.connect(&id).await?) as Arc<dyn Exec>)
                })
            },
        },
    ]
}

pub fn find(name: &str) -> Result<Adapter, String> {
    let all = all();
    let names: Vec<_> = all.iter().map(|a| a.name).collect();
    all.into_iter()
        .find(|a| a.name == name)
        .ok_or_else(|| format!("unknown adapter {name:?}; known: {}", names.join(", ")))
}
