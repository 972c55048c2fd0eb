//! The reliability suite (`cargo test -p execseam-reliability`): every adapter in [`ADAPTERS`]
//! against every chaos action on every request of an exec, bare and layered. See
//! `docs/reliability.md`; to add an adapter, add a `setup` function and a table entry.

use std::sync::Arc;
use std::time::Duration;

use execseam_core::{BoxFuture, Error, ErrorKind, Exec, Sandbox, SandboxSpec};
use execseam_reliability::{Adapter, Expect, Knobs, Options, Setup, Through, orphans, run};

/// Every adapter the suite drives. Local has no network, so no proxy can stand in front of it.
const ADAPTERS: &[Adapter] = &[
    Adapter {
        name: "agentcore",
        setup: agentcore,
    },
    Adapter {
        name: "ax",
        setup: ax,
    },
    Adapter {
        name: "cloudflare",
        setup: cloudflare,
    },
    Adapter {
        name: "daytona",
        setup: daytona,
    },
    Adapter {
        name: "e2b",
        setup: e2b,
    },
    Adapter {
        name: "fly",
        setup: fly,
    },
    Adapter {
        name: "sprites",
        setup: sprites,
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
                    Arc::new(AgentCoreProvider::new(config(url, idle))?.attach(&id))
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
        let _ = knobs;
        let provider = || AxProvider::new(AxConfig::new().target_actor(PRIMARY_ACTOR));
        let endpoint = emulator.endpoint();
        let direct = provider()?.connect(&endpoint).await?;
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
                let _ = idle;
                let address = url.trim_start_matches("http://");
                Ok(Arc::new(provider()?.attach(address)?) as Arc<dyn Exec>)
            }),
            guard: Box::new(emulator),
        })
    })
}

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
            CloudflareConfig::new(url)
                .api_key(token.clone())
                .request_timeout(idle)
                .stream_idle_timeout(idle)
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
                    Arc::new(CloudflareProvider::new(config(url, idle))?.attach(&id))
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
                let toolbox = format!("{url}/toolbox");
                Ok(
                    Arc::new(DaytonaProvider::new(config(url, idle))?.attach(&toolbox, &id))
                        as Arc<dyn Exec>,
                )
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
                Ok(Arc::new(FlyProvider::new(config(url, idle))?.attach(&id)) as Arc<dyn Exec>)
            }),
            guard: Box::new(emulator),
        })
    })
}

fn sprites(knobs: Knobs) -> BoxFuture<'static, Result<Setup, Error>> {
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
                    Arc::new(SpritesProvider::new(config(url, idle))?.attach(DEFAULT_SPRITE))
                        as Arc<dyn Exec>,
                )
            }),
            guard: Box::new(emulator),
        })
    })
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

fn options() -> Options {
    use Expect::*;
    Options {
        actions: vec![
            ("status:429", Invariants),
            ("status:429:86400", Invariants),
            ("status:503", Invariants),
            ("status-after:502", Invariants),
            ("reset", Invariants),
            ("reset-after", Invariants),
            ("hang", Invariants),
            ("stall", Invariants),
            ("trickle:100:1", Invariants),
            ("endless", Invariants),
            ("truncate:20", Invariants),
            ("drop-last", Invariants),
            ("garbage:4096", Invariants),
            ("body:{}", Invariants),
            ("delay:200", Correct),
            ("rechunk:1", Correct),
            ("rechunk:65536", Correct),
        ],
        deadline: Duration::from_secs(3),
        idle_timeout: Duration::from_secs(2),
        layered_idle_timeout: Duration::from_secs(10),
        bare_bound: Duration::from_secs(15),
        parallel: 12,
        rss_limit: 1 << 30,
    }
}

fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let options = options();
    let only = std::env::var("EXECSEAM_RELIABILITY_ONLY").ok();
    let adapters: Vec<Adapter> = ADAPTERS
        .iter()
        .filter(|a| only.as_deref().is_none_or(|o| o == a.name))
        .map(|a| Adapter {
            name: a.name,
            setup: a.setup,
        })
        .collect();
    let summary = runtime.block_on(run(&adapters, &options));
    let (orphan_cases, orphan_failures, orphan_na) = runtime.block_on(orphans(&adapters, &options));
    for n in &orphan_na {
        println!("{n}");
    }
    for f in summary
        .setup_failures
        .iter()
        .chain(&summary.failures)
        .chain(&orphan_failures)
    {
        println!("FAIL {f}");
    }
    println!("{}", summary.line(&options));
    println!(
        "orphans: {orphan_cases} cases ({} adapters x {{sandbox destroyed, emulator stopped}}): {} passed, {} not applicable, {} failed",
        adapters.len(),
        orphan_cases - orphan_failures.len() - orphan_na.len(),
        orphan_na.len(),
        orphan_failures.len()
    );
    let over = summary.peak_rss > options.rss_limit;
    if over {
        println!("FAIL the peak RSS is over the limit");
    }
    runtime.shutdown_timeout(Duration::from_secs(2));
    if over
        || !summary.failures.is_empty()
        || !summary.setup_failures.is_empty()
        || !orphan_failures.is_empty()
    {
        std::process::exit(1);
    }
}
