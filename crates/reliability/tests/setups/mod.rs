//! Every adapter the reliability suite and the benchmark suite (`benches/suite.rs`) drive: how to
//! start its emulator and reach one sandbox in it, directly and through any base URL. One place,
//! shared by both targets (`mod setups;`, `#[path]` from the bench).

use std::sync::Arc;
use std::time::Duration;

use execseam_core::{BoxFuture, Error, ErrorKind, Exec, Sandbox, SandboxSpec};
use execseam_reliability::{Adapter, Knobs, Setup, Through};

/// Every adapter the suite drives. Local has no network, so no proxy can stand in front of it.
pub const ADAPTERS: &[Adapter] = &[
    Adapter {
        name: "agentcore",
        setup: agentcore,
        children_end: None,
        parallel: None,
        chunk_framed: None,
    },
    Adapter {
        name: "ax",
        setup: ax,
        children_end: None,
        parallel: None,
        chunk_framed: None,
    },
    Adapter {
        name: "cloudflare",
        setup: cloudflare,
        children_end: None,
        parallel: None,
        chunk_framed: None,
    },
    Adapter {
        name: "daytona",
        setup: daytona,
        children_end: None,
        parallel: None,
        chunk_framed: None,
    },
    Adapter {
        name: "e2b",
        setup: e2b,
        children_end: None,
        parallel: None,
        chunk_framed: None,
    },
    Adapter {
        name: "fly",
        setup: fly,
        children_end: None,
        parallel: None,
        chunk_framed: None,
    },
    Adapter {
        name: "sprites",
        setup: sprites,
        children_end: None,
        parallel: None,
        chunk_framed: None,
    },
    Adapter {
        name: "sprites-http",
        setup: sprites_http,
        children_end: None,
        parallel: None,
        chunk_framed: Some(
            "the POST /exec body's frames have no lengths: each HTTP chunk is one frame (docs/adapters/sprites.md); re-chunked, it is Err(Protocol)",
        ),
    },
    Adapter {
        name: "modal",
        setup: modal,
        children_end: None,
        parallel: None,
        chunk_framed: None,
    },
    Adapter {
        name: "chrono",
        setup: chrono,
        children_end: Some(
            "Chrono runs every execution in a fresh sandbox removed when it ends; the background-child-detached conformance case checks the child is gone",
        ),
        parallel: None,
        chunk_framed: None,
    },
    Adapter {
        name: "vercel",
        setup: vercel,
        children_end: None,
        parallel: None,
        chunk_framed: None,
    },
    Adapter {
        name: "northflank",
        setup: northflank,
        children_end: None,
        parallel: None,
        chunk_framed: None,
    },
    Adapter {
        name: "kubernetes",
        setup: kubernetes,
        children_end: None,
        parallel: None,
        chunk_framed: None,
    },
    Adapter {
        name: "docker",
        setup: docker,
        children_end: None,
        // Every exec is a conmon and a runc on this host: more at once than this and podman's
        // answers take longer than the bare cases' 2 s request timeout.
        parallel: Some(4),
        chunk_framed: None,
    },
];

/// A [`Through`] from a function that builds a handle (without a request) for a base URL.
fn through<F>(f: F) -> Through
where
    F: Fn(&str, Duration) -> Result<Arc<dyn Exec>, Error> + Send + Sync + 'static,
{
    let f = Arc::new(f);
    Arc::new(move |url: String, idle: Duration| {
        let f = f.clone();
        Box::pin(async move { f(&url, idle) })
    })
}

fn agentcore(knobs: Knobs) -> BoxFuture<'static, Result<Setup, Error>> {
    use execseam_agentcore::{AgentCoreConfig, AgentCoreProvider};
    use execseam_emulators::EmulatorOptions;
    use execseam_emulators::agentcore::AgentCoreEmulator;
    Box::pin(async move {
        let emulator = AgentCoreEmulator::start(EmulatorOptions::default())
            .await
            .map_err(internal)?;
        let config = |url: &str, idle: Duration| {
            AgentCoreConfig::new("us-east-1", "AKIDEXAMPLE", "not-verified")
                .endpoint_url(url)
                .idle_timeout(idle)
        };
        let upstream = emulator.base_url();
        let direct = AgentCoreProvider::new(config(&upstream, knobs.idle_timeout))?
            .create(SandboxSpec::new())
            .await?;
        let id = direct.id().to_owned();
        Ok(Setup {
            upstream,
            scratch: "/tmp".into(),
            direct: Arc::new(direct),
            through: through(move |url, idle| {
                let _ = idle;
                Ok(
                    Arc::new(AgentCoreProvider::new(config(url, idle))?.attach(&id)?)
                        as Arc<dyn Exec>,
                )
            }),
            guard: Box::new(emulator),
        })
    })
}

fn ax(knobs: Knobs) -> BoxFuture<'static, Result<Setup, Error>> {
    use execseam_ax::{AxConfig, AxProvider};
    use execseam_emulators::EmulatorOptions;
    use execseam_emulators::ax::{AxEmulator, PRIMARY_ACTOR};
    Box::pin(async move {
        let emulator = AxEmulator::start(EmulatorOptions::default())
            .await
            .map_err(internal)?;
        let provider = |idle: Duration| {
            AxProvider::new(
                AxConfig::new()
                    .target_actor(PRIMARY_ACTOR)
                    .request_timeout(idle)
                    .idle_timeout(idle),
            )
        };
        let endpoint = emulator.endpoint();
        let direct = provider(knobs.idle_timeout)?.connect(&endpoint).await?;
        let upstream = if endpoint.starts_with("http://") {
            endpoint.clone()
        } else {
            format!("http://{endpoint}")
        };
        Ok(Setup {
            upstream,
            scratch: "/tmp".into(),
            direct: Arc::new(direct),
            through: through(move |url, idle| {
                let address = url.trim_start_matches("http://");
                Ok(Arc::new(provider(idle)?.attach(address)?) as Arc<dyn Exec>)
            }),
            guard: Box::new(emulator),
        })
    })
}

/// The answer limit the setups declare where the adapter has one to set (the defaults are
/// 16 to 64 MiB: on this shared machine at a high load an endless answer through the proxy
/// can take longer than the 2 s idle timeout to reach them, and the case then measures the
/// machine, not the bound). The commands' answers are far smaller.
const ANSWER_LIMIT: usize = 1 << 20;

fn cloudflare(knobs: Knobs) -> BoxFuture<'static, Result<Setup, Error>> {
    use execseam_cloudflare::{CloudflareConfig, CloudflareProvider};
    use execseam_emulators::EmulatorOptions;
    use execseam_emulators::cloudflare::CloudflareEmulator;
    Box::pin(async move {
        let emulator = CloudflareEmulator::start(EmulatorOptions::default())
            .await
            .map_err(internal)?;
        let token = emulator.token().to_owned();
        let config = move |url: &str, idle: Duration| {
            // A small declared answer limit: an endless answer must end on it, at any speed
            // of this (shared) machine, long before the idle timeout.
            CloudflareConfig::new(url)
                .api_key(token.clone())
                .request_timeout(idle)
                .stream_idle_timeout(idle)
                .max_answer_bytes(ANSWER_LIMIT)
        };
        let upstream = emulator.base_url();
        let direct = CloudflareProvider::new(config(&upstream, knobs.idle_timeout))?
            .create(SandboxSpec::new())
            .await?;
        let id = direct.id().to_owned();
        Ok(Setup {
            upstream,
            scratch: "/workspace".into(),
            direct: Arc::new(direct),
            through: through(move |url, idle| {
                let _ = idle;
                Ok(
                    Arc::new(CloudflareProvider::new(config(url, idle))?.attach(&id)?)
                        as Arc<dyn Exec>,
                )
            }),
            guard: Box::new(emulator),
        })
    })
}

fn daytona(knobs: Knobs) -> BoxFuture<'static, Result<Setup, Error>> {
    use execseam_daytona::{DaytonaConfig, DaytonaProvider};
    use execseam_emulators::EmulatorOptions;
    use execseam_emulators::daytona::DaytonaEmulator;
    Box::pin(async move {
        let emulator = DaytonaEmulator::start(EmulatorOptions::default())
            .await
            .map_err(internal)?;
        let token = emulator.token().to_owned();
        let config = move |url: &str, idle: Duration| {
            DaytonaConfig::new(token.clone())
                .api_url(format!("{url}/api"))
                .request_timeout(idle)
                .idle_timeout(idle)
                // Small declared limits (a log answer is read up to 3 x max_output + 1 MiB): an
                // endless answer must end on them, at any speed of this machine, long before
                // the idle timeout.
                .max_output(256 << 10)
                .max_answer_bytes(ANSWER_LIMIT)
        };
        let upstream = emulator.base_url();
        let direct = DaytonaProvider::new(config(&upstream, knobs.idle_timeout))?
            .create(SandboxSpec::new())
            .await?;
        let id = direct.id().to_owned();
        Ok(Setup {
            upstream,
            scratch: "/tmp".into(),
            direct: Arc::new(direct),
            through: through(move |url, idle| {
                let config = config(url, idle).toolbox_url(format!("{url}/toolbox"));
                Ok(Arc::new(DaytonaProvider::new(config)?.attach(&id)?) as Arc<dyn Exec>)
            }),
            guard: Box::new(emulator),
        })
    })
}

fn fly(knobs: Knobs) -> BoxFuture<'static, Result<Setup, Error>> {
    use execseam_emulators::EmulatorOptions;
    use execseam_emulators::fly::{FlyEmulator, FlyOptions};
    use execseam_fly::{FlyConfig, FlyProvider};
    Box::pin(async move {
        let emulator = FlyEmulator::start(EmulatorOptions::default(), FlyOptions::default())
            .await
            .map_err(internal)?;
        let m = emulator.default_machine();
        let (app, token, id) = (m.app().to_owned(), emulator.token(), m.id().to_owned());
        // Fly's exec answer comes when the command ends: its request is bounded by the
        // command's timeout plus a slack.
        let config = move |url: &str, idle: Duration| {
            FlyConfig::new(app.clone(), token.clone())
                .base_url(url)
                .exec_timeout(idle)
                .request_slack(idle)
                // A small declared answer limit: an endless answer must end on it, at any
                // speed of this machine, long before the request timeout.
                .max_answer_bytes(ANSWER_LIMIT)
        };
        let upstream = emulator.base_url();
        let direct = FlyProvider::new(config(&upstream, knobs.idle_timeout))?
            .connect(&id)
            .await?;
        Ok(Setup {
            upstream,
            scratch: "/tmp".into(),
            direct: Arc::new(direct),
            through: through(move |url, idle| {
                let _ = idle;
                Ok(Arc::new(FlyProvider::new(config(url, idle))?.attach(&id)?) as Arc<dyn Exec>)
            }),
            guard: Box::new(emulator),
        })
    })
}

fn sprites(knobs: Knobs) -> BoxFuture<'static, Result<Setup, Error>> {
    sprites_on(knobs, execseam_sprites::Transport::WebSocket)
}

/// Sprites over its HTTP exec transport (`POST …/exec`, the framed body).
fn sprites_http(knobs: Knobs) -> BoxFuture<'static, Result<Setup, Error>> {
    sprites_on(knobs, execseam_sprites::Transport::Http)
}

fn sprites_on(
    knobs: Knobs,
    transport: execseam_sprites::Transport,
) -> BoxFuture<'static, Result<Setup, Error>> {
    use execseam_emulators::EmulatorOptions;
    use execseam_emulators::sprites::{DEFAULT_SPRITE, SpritesEmulator, SpritesOptions};
    use execseam_sprites::{SpritesConfig, SpritesProvider};
    Box::pin(async move {
        let emulator =
            SpritesEmulator::start(EmulatorOptions::default(), SpritesOptions::default())
                .await
                .map_err(internal)?;
        let token = emulator.token();
        let config = move |url: &str, idle: Duration| {
            SpritesConfig::new(token.clone())
                .base_url(url)
                .request_timeout(idle)
                .keepalive(idle / 4, idle)
                .http_idle_timeout(idle)
                .transport(transport)
        };
        let upstream = emulator.base_url();
        let direct = SpritesProvider::new(config(&upstream, knobs.idle_timeout))?
            .connect(DEFAULT_SPRITE)
            .await?;
        Ok(Setup {
            upstream,
            scratch: "/tmp".into(),
            direct: Arc::new(direct),
            through: through(move |url, idle| {
                let _ = idle;
                Ok(
                    Arc::new(SpritesProvider::new(config(url, idle))?.attach(DEFAULT_SPRITE)?)
                        as Arc<dyn Exec>,
                )
            }),
            guard: Box::new(emulator),
        })
    })
}

fn modal(knobs: Knobs) -> BoxFuture<'static, Result<Setup, Error>> {
    use execseam_emulators::EmulatorOptions;
    use execseam_emulators::modal::{ModalEmulator, TOKEN_ID};
    use execseam_modal::{ModalConfig, ModalProvider};
    Box::pin(async move {
        let emulator = ModalEmulator::start(EmulatorOptions::default())
            .await
            .map_err(internal)?;
        let secret = emulator.token_secret();
        // The router's URL comes from the control plane: through the proxy, the emulator
        // answers with the proxy's address (x-forwarded-host), so router calls go through it.
        let config = move |url: &str, idle: Duration| {
            ModalConfig::new(TOKEN_ID, secret.clone())
                .server_url(url)
                .sandbox_timeout(Duration::from_secs(3600))
                .request_timeout(idle)
                .stream_idle_timeout(idle)
                .connect_timeout(idle)
                // A stream that cannot be opened is reopened up to max_resumes times, each
                // bounded by the request timeout: a bare answer comes within their product.
                .max_resumes(3)
        };
        let upstream = emulator.url();
        let direct = ModalProvider::new(config(&upstream, knobs.idle_timeout))?
            .create(SandboxSpec::new())
            .await?;
        let id = direct.id().to_owned();
        Ok(Setup {
            upstream,
            scratch: "/tmp".into(),
            direct: Arc::new(direct),
            through: through(move |url, idle| {
                Ok(Arc::new(ModalProvider::new(config(url, idle))?.attach(&id)?) as Arc<dyn Exec>)
            }),
            guard: Box::new(emulator),
        })
    })
}

fn chrono(knobs: Knobs) -> BoxFuture<'static, Result<Setup, Error>> {
    use execseam_chrono::{ChronoConfig, ChronoExec};
    use execseam_emulators::EmulatorOptions;
    use execseam_emulators::chrono::{ChronoEmulator, ChronoOptions};
    use execseam_emulators::harness::sandbox::Mount;
    Box::pin(async move {
        // Every execution is a fresh sandbox: the markers live in a host directory mounted
        // into each of them.
        let scratch = ScratchDir::new("chrono")?;
        let mut options = EmulatorOptions::default();
        options.sandboxing.mounts.push(Mount {
            host: scratch.0.clone(),
            sandbox: "/mnt/execseam-reliability".into(),
            read_only: false,
        });
        let chrono_options = ChronoOptions {
            max_concurrent: 64,
            ..ChronoOptions::default()
        };
        let emulator = ChronoEmulator::start(options, chrono_options)
            .await
            .map_err(internal)?;
        let token = emulator.token();
        let config = move |url: &str, idle: Duration| {
            // A synchronous /execute answers when the command ends: the request is bounded by
            // the command's timeout plus the slack.
            let secs = u32::try_from(idle.as_secs().max(1)).unwrap_or(u32::MAX);
            ChronoConfig::new(url)
                .token(token.clone())
                .timeout_secs(secs)
                .request_slack(idle)
                .connect_timeout(idle)
                // Aevatar's own response limit (1 MiB) rather than the adapter's 64 MiB default:
                // an endless answer must end on it, at any speed of this machine, long before
                // the request timeout.
                .max_response_bytes(execseam_chrono::wire::MAX_RESPONSE_BYTES)
        };
        let upstream = emulator.base_url();
        let direct = ChronoExec::new(config(&upstream, knobs.idle_timeout))?;
        Ok(Setup {
            upstream,
            scratch: "/mnt/execseam-reliability".into(),
            direct: Arc::new(direct),
            through: through(move |url, idle| {
                Ok(Arc::new(ChronoExec::new(config(url, idle))?) as Arc<dyn Exec>)
            }),
            guard: Box::new((emulator, scratch)),
        })
    })
}

/// A host directory, removed when dropped.
struct ScratchDir(std::path::PathBuf);

impl ScratchDir {
    fn new(name: &str) -> Result<ScratchDir, Error> {
        let dir = std::path::Path::new("/var/tmp")
            .canonicalize()
            .map_err(internal)?
            .join(format!(
                "execseam-reliability-{name}-{}-{}",
                std::process::id(),
                execseam_adapter_kit::id::random_id(8)
            ));
        std::fs::create_dir_all(&dir).map_err(internal)?;
        // The sandbox's user may not be root.
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).map_err(internal)?;
        Ok(ScratchDir(dir))
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn internal(e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Internal, e.to_string())
}

fn e2b(knobs: Knobs) -> BoxFuture<'static, Result<Setup, Error>> {
    use execseam_e2b::{E2bConfig, E2bProvider};
    use execseam_emulators::EmulatorOptions;
    use execseam_emulators::e2b::E2bEmulator;
    Box::pin(async move {
        let emulator = E2bEmulator::start(EmulatorOptions::default())
            .await
            .map_err(internal)?;
        let key = emulator.api_key().to_owned();
        let config = move |url: &str, idle: Duration| {
            E2bConfig::new(key.clone())
                .api_url(url)
                .sandbox_url(url)
                .sandbox_timeout(Duration::from_secs(3600))
                .stream_idle_timeout(idle)
                .request_timeout(idle)
        };
        let upstream = emulator.base_url();
        let direct = E2bProvider::new(config(&upstream, knobs.idle_timeout))?
            .create(SandboxSpec::new())
            .await?;
        let id = direct.id().to_owned();
        let through: Through = Arc::new(move |url: String, idle: Duration| {
            let (config, id) = (config(&url, idle), id.clone());
            Box::pin(async move {
                let exec = E2bProvider::new(config)?.connect(&id).await?;
                Ok(Arc::new(exec) as Arc<dyn Exec>)
            })
        });
        Ok(Setup {
            upstream,
            scratch: "/home/user".into(),
            direct: Arc::new(direct),
            through,
            guard: Box::new(emulator),
        })
    })
}

fn vercel(knobs: Knobs) -> BoxFuture<'static, Result<Setup, Error>> {
    use execseam_emulators::EmulatorOptions;
    use execseam_emulators::vercel::{PROJECT_ID, TEAM_ID, VercelEmulator, VercelOptions};
    use execseam_vercel::{VercelConfig, VercelProvider};
    Box::pin(async move {
        let emulator = VercelEmulator::start(EmulatorOptions::default(), VercelOptions::default())
            .await
            .map_err(internal)?;
        let token = emulator.token();
        let config = move |url: &str, idle: Duration| {
            VercelConfig::new(token.clone(), TEAM_ID, PROJECT_ID)
                .api_url(url)
                .sandbox_timeout(Duration::from_secs(3600))
                .request_timeout(idle)
                .connect_timeout(idle)
                .stream_idle_timeout(idle)
        };
        let upstream = emulator.base_url();
        let direct = VercelProvider::new(config(&upstream, knobs.idle_timeout))?
            .create(SandboxSpec::new())
            .await?;
        let (name, session) = (direct.name().to_owned(), direct.session_id());
        Ok(Setup {
            upstream,
            scratch: "/tmp".into(),
            direct: Arc::new(direct),
            through: through(move |url, idle| {
                Ok(
                    Arc::new(
                        VercelProvider::new(config(url, idle))?.attach_session(&name, &session),
                    ) as Arc<dyn Exec>,
                )
            }),
            guard: Box::new(emulator),
        })
    })
}

fn northflank(knobs: Knobs) -> BoxFuture<'static, Result<Setup, Error>> {
    use execseam_emulators::EmulatorOptions;
    use execseam_emulators::northflank::{
        NorthflankEmulator, NorthflankOptions, PROJECT_ID, SERVICE_ID,
    };
    use execseam_northflank::{NorthflankConfig, NorthflankProvider};
    Box::pin(async move {
        let emulator =
            NorthflankEmulator::start(EmulatorOptions::default(), NorthflankOptions::default())
                .await
                .map_err(internal)?;
        let token = emulator.token();
        let config = move |url: &str, idle: Duration| {
            NorthflankConfig::new(token.clone(), PROJECT_ID)
                .api_url(url)
                .request_timeout(idle)
                .connect_timeout(idle)
                .idle_timeout(idle)
        };
        let upstream = emulator.base_url();
        let direct = NorthflankProvider::new(config(&upstream, knobs.idle_timeout))?
            .connect(SERVICE_ID)
            .await?;
        Ok(Setup {
            upstream,
            scratch: "/tmp".into(),
            direct: Arc::new(direct),
            through: through(move |url, idle| {
                Ok(
                    Arc::new(NorthflankProvider::new(config(url, idle))?.attach(SERVICE_ID)?)
                        as Arc<dyn Exec>,
                )
            }),
            guard: Box::new(emulator),
        })
    })
}

/// A claim on the emulator's warm pool; through the proxy, every request of an exec (the claim,
/// Sandbox and pod lookups of a fresh handle, the exec upgrade and its socket, the kill) goes
/// through it.
fn kubernetes(knobs: Knobs) -> BoxFuture<'static, Result<Setup, Error>> {
    use execseam_emulator_kubernetes::{KubernetesEmulator, NAMESPACE, WARM_POOL};
    use execseam_emulators::EmulatorOptions;
    use execseam_kubernetes::{KubernetesConfig, KubernetesProvider};
    Box::pin(async move {
        let emulator = KubernetesEmulator::start(EmulatorOptions::default())
            .await
            .map_err(internal)?;
        let token = emulator.token().to_owned();
        let config = move |url: &str, idle: Duration| {
            KubernetesConfig::new()
                .server(url)
                .token(token.clone())
                .namespace(NAMESPACE)
                .warm_pool(WARM_POOL)
                .request_timeout(idle)
                .idle_timeout(idle)
        };
        let upstream = emulator.base_url();
        let direct = KubernetesProvider::new(config(&upstream, knobs.idle_timeout))?
            .create(SandboxSpec::new())
            .await?;
        let id = direct.id().to_owned();
        Ok(Setup {
            upstream,
            scratch: "/tmp".into(),
            direct: Arc::new(direct),
            through: through(move |url, idle| {
                Ok(Arc::new(KubernetesProvider::new(config(url, idle))?.attach(&id)?) as Arc<dyn Exec>)
            }),
            guard: Box::new(emulator),
        })
    })
}

/// Docker has no emulator: the engine is podman (`.ci/podman start`, `DOCKER_HOST` a Unix
/// socket). The chaos proxy forwards to a TCP upstream, so a relay on 127.0.0.1 passes each
/// connection to the engine's socket, and the adapter reaches it as `tcp://` (plain HTTP).
fn docker(_knobs: Knobs) -> BoxFuture<'static, Result<Setup, Error>> {
    use execseam_docker::{DockerConfig, DockerProvider};
    Box::pin(async move {
        let base = DockerConfig::from_env().map_err(|e| {
            internal(format!(
                "{e}: the docker entry needs the engine of `.ci/podman start` (source target/podman/env)"
            ))
        })?;
        let host = std::env::var("DOCKER_HOST").unwrap_or_default();
        let socket = host.strip_prefix("unix://").ok_or_else(|| {
            internal(format!(
                "DOCKER_HOST {host:?} is not a unix:// socket (start `.ci/podman`)"
            ))
        })?;
        let relay = UnixRelay::start(socket.into()).await?;
        let upstream = format!("http://{}", relay.addr);
        let through_base = base.clone();
        let config = move |url: &str, idle: Duration| {
            through_base
                .clone()
                .host(format!("tcp://{}", url.trim_start_matches("http://")))
                .request_timeout(idle)
                .idle_timeout(idle)
                .label("io.execseam.test", "reliability")
        };
        // The direct handle (the marker counts, the orphan check) is not under test: it talks
        // to the engine's socket itself, with the default request timeout (a loaded engine is
        // slow), and removes its container when dropped even after the relay has gone.
        let direct = DockerProvider::new(base.clone().label("io.execseam.test", "reliability"))?
            .create(SandboxSpec::new())
            .await?;
        let id = direct.id().to_owned();
        Ok(Setup {
            upstream,
            scratch: "/tmp".into(),
            direct: Arc::new(direct),
            through: through(move |url, idle| {
                Ok(Arc::new(DockerProvider::new(config(url, idle))?.attach(&id)?) as Arc<dyn Exec>)
            }),
            guard: Box::new(relay),
        })
    })
}

/// Accepts TCP connections on 127.0.0.1 and relays each to a Unix socket; stops when dropped.
struct UnixRelay {
    addr: std::net::SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl UnixRelay {
    async fn start(socket: std::path::PathBuf) -> Result<UnixRelay, Error> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(internal)?;
        let addr = listener.local_addr().map_err(internal)?;
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((mut tcp, _)) = listener.accept().await {
                let socket = socket.clone();
                conns.spawn(async move {
                    if let Ok(mut unix) = tokio::net::UnixStream::connect(&socket).await {
                        let _ = tokio::io::copy_bidirectional(&mut tcp, &mut unix).await;
                    }
                });
            }
        });
        Ok(UnixRelay { addr, task })
    }
}

impl Drop for UnixRelay {
    fn drop(&mut self) {
        // Aborting the accept loop drops its JoinSet, which aborts every relayed connection.
        self.task.abort();
    }
}
