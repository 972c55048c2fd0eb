//! Every adapter the reliability suite and the benchmark suite (`benches/suite.rs`) drive: one
//! table. An emulated adapter's row starts its target on the one emulated path
//! ([`execseam_emulated::Emulated`]: its emulator, the adapter configured from the emulator's
//! environment through the facade, the suite's sandbox) and says only what the suite tunes: the
//! adapter's own timeouts and answer limits, through any base URL (the chaos proxy's). Shared by
//! both targets (`mod setups;`, `#[path]` from the bench).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use execseam::kit::Adapter as KitAdapter;
use execseam_core::{
    BoxFuture, Error, ErrorKind, Exec, ListFilter, Provider, Sandbox, SandboxSpec,
};
use execseam_emulated::{Emulated, Endpoints, StartHook};
use execseam_reliability::{Adapter, Creates, Knobs, Setup, Through};

/// A row of an emulated adapter, with nothing special.
const fn row(
    name: &'static str,
    setup: fn(Knobs) -> BoxFuture<'static, Result<Setup, Error>>,
) -> Adapter {
    Adapter {
        name,
        setup,
        children_end: None,
        parallel: None,
        chunk_framed: None,
        one_string: None,
    }
}

/// Why Inspect's 16 x 64 KiB argv cannot run where the provider takes the command as one
/// `bash -c` script: a single `execve` string is at most 128 KiB (`MAX_ARG_STRLEN`).
const BASH_C: Option<&str> = Some(
    "the provider takes the command as one bash -c script, and one execve string is at most 128 KiB (MAX_ARG_STRLEN)",
);

/// Sprites: argv and env travel in the exec URL's query, which front ends cap (60 KiB).
const EXEC_URL: Option<&str> =
    Some("argv and env travel in the exec URL's query, at most 60 KiB (client::MAX_EXEC_URL)");

/// Every adapter the suite drives. Local has no network, so no proxy can stand in front of it.
pub const ADAPTERS: &[Adapter] = &[
    Adapter {
        one_string: BASH_C,
        ..row("agentcore", agentcore)
    },
    row("ax", ax),
    Adapter {
        one_string: BASH_C,
        ..row("cloudflare", cloudflare)
    },
    Adapter {
        one_string: Some(
            "process/execute takes one shell line, and the kit's wrapper script (argv quoted in it) is one execve string of at most 128 KiB (MAX_ARG_STRLEN)",
        ),
        ..row("daytona", daytona)
    },
    row("e2b", e2b),
    row("fly", fly),
    Adapter {
        one_string: EXEC_URL,
        ..row("sprites", sprites)
    },
    Adapter {
        chunk_framed: Some(
            "the POST /exec body's frames have no lengths: each HTTP chunk is one frame (docs/adapters/sprites.md); re-chunked, it is Err(Protocol)",
        ),
        one_string: EXEC_URL,
        ..row("sprites-http", sprites_http)
    },
    row("modal", modal),
    Adapter {
        children_end: Some(
            "Chrono runs every execution in a fresh sandbox removed when it ends; the background-child-detached conformance case checks the child is gone",
        ),
        one_string: BASH_C,
        ..row("chrono", chrono)
    },
    row("vercel", vercel),
    row("northflank", northflank),
    row("kubernetes", kubernetes),
    Adapter {
        // Every exec is a conmon and a runc on this host: more at once than this and podman's
        // answers take longer than the bare cases' 2 s request timeout.
        parallel: Some(4),
        ..row("docker", docker)
    },
];

/// The answer limit the setups declare where the adapter has one to set (the defaults are
/// 16 to 64 MiB: on this shared machine at a high load an endless answer through the proxy
/// can take longer than the 2 s idle timeout to reach them, and the case then measures the
/// machine, not the bound). The commands' answers are far smaller.
const ANSWER_LIMIT: usize = 1 << 20;

/// Starts `target`'s emulated target (with `start` instead of its own start, if given) and
/// makes its [`Setup`]: the suite's sandbox is the target's; `through` builds the handle on it
/// through a base URL, from the adapter's variables moved there and the sandbox's id.
fn emulated<F, Fut>(
    target: &'static str,
    start: Option<StartHook>,
    through: F,
) -> BoxFuture<'static, Result<Setup, Error>>
where
    F: Fn(Endpoints, String, String, Duration) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Arc<dyn Exec>, Error>> + Send + 'static,
{
    emulated_creating(target, start, through, None)
}

/// The emulator's count of its live sandboxes.
type Live = Arc<dyn Fn() -> usize + Send + Sync>;

/// Makes the `creates` phase's [`Creates`] from the target's endpoints, its sandbox's id and
/// the emulator's count of live sandboxes.
type CreatesOf = fn(Endpoints, String, Live) -> Creates;

/// [`emulated`], with the adapter's creates for the `creates` phase.
fn emulated_creating<F, Fut>(
    target: &'static str,
    start: Option<StartHook>,
    through: F,
    creates: Option<CreatesOf>,
) -> BoxFuture<'static, Result<Setup, Error>>
where
    F: Fn(Endpoints, String, String, Duration) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<Arc<dyn Exec>, Error>> + Send + 'static,
{
    Box::pin(async move {
        let mut spec = execseam_emulated::targets()
            .into_iter()
            .find(|s| s.name == target)
            .ok_or_else(|| internal(format!("no emulated target {target}")))?;
        if start.is_some() {
            spec.start = start;
        }
        let t = Emulated::start(spec, Default::default()).await?;
        let (endpoints, id) = (t.endpoints(), t.sandbox.id().to_owned());
        let through = Arc::new(through);
        let through: Through = Arc::new(move |url: String, idle: Duration| {
            let (through, endpoints, id) = (through.clone(), endpoints.clone(), id.clone());
            Box::pin(async move { through(endpoints, url, id, idle).await })
        });
        Ok(Setup {
            upstream: t.emulator.base_url.clone(),
            scratch: t.scratch.clone(),
            direct: t.sandbox.clone(),
            through,
            creates: creates.map(|c| {
                let live = t.emulator.live_sandboxes.clone();
                c(t.endpoints(), t.sandbox.id().to_owned(), live)
            }),
            guard: Box::new(t),
        })
    })
}

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

/// Boxes a handle as the suite's `Exec`.
fn exec(e: impl Exec + 'static) -> Arc<dyn Exec> {
    Arc::new(e)
}

fn agentcore(_: Knobs) -> BoxFuture<'static, Result<Setup, Error>> {
    attached_creating::<execseam::agentcore::AgentCore>(
        "agentcore",
        agentcore_timeouts,
        agentcore_creates,
    )
}

/// AgentCore's idle timeout set to `idle`.
fn agentcore_timeouts(
    c: execseam::agentcore::AgentCoreConfig,
    idle: Duration,
) -> execseam::agentcore::AgentCoreConfig {
    c.idle_timeout(idle)
}

/// AgentCore's session calls (issue 38, D1): StartCodeInterpreterSession, then the
/// GetCodeInterpreterSession of a connect to it. Sessions have no labels: the guard names each
/// create, and what is left is every `READY` session but the suite's own.
fn agentcore_creates(at: Endpoints, own: String, _: Live) -> Creates {
    let routes = &[
        ("PUT /code-interpreters/*/sessions/start", false),
        ("GET /code-interpreters/*/sessions/get", true),
    ];
    use execseam::agentcore::AgentCore;
    kit_creates::<AgentCore>(at, agentcore_timeouts, true, routes, Counted::AllBut(own))
}

/// The provider as the facade's registry builds it: its creates guarded by the kit
/// (`guard::GuardedCreate`: an answer nobody received is destroyed; a lost answer's sandbox is
/// found by its create tag or name, as the adapter's `LOST_CREATE` says).
fn guarded<A: KitAdapter>(provider: A::Provider) -> Box<dyn Provider> {
    execseam_adapter_kit::guard::guard(A::NAME, A::LOST_CREATE, Box::new(provider))
}

/// A [`Creates::left`] by label: the sandboxes carrying it, removed when asked.
async fn labelled_left(
    provider: &dyn Provider,
    (key, value): (&str, &str),
    remove: bool,
) -> Result<usize, Error> {
    let left = provider
        .list(&ListFilter::new().with_label(key, value))
        .await?;
    destroyed_if(provider, &left, remove).await
}

/// How many of `left` there are, destroyed first when asked.
async fn destroyed_if(
    provider: &dyn Provider,
    left: &[execseam_core::SandboxInfo],
    remove: bool,
) -> Result<usize, Error> {
    if remove {
        for s in left {
            provider.destroy(&s.id).await?;
        }
    }
    Ok(left.len())
}

/// A create followed by a connect to what it made (whose answer a case tampers with): the
/// connect's error, once what the create made is destroyed (a connect makes nothing to leak;
/// the case checks the error, the time and the memory).
async fn connected(
    made: Box<dyn Sandbox>,
    connect: Result<(), Error>,
) -> Result<Arc<dyn Sandbox>, Error> {
    match connect {
        Ok(()) => Ok(Arc::from(made)),
        Err(e) => {
            let _ = made.destroy().await;
            Err(e)
        }
    }
}

fn ax(_: Knobs) -> BoxFuture<'static, Result<Setup, Error>> {
    use execseam::ax::{Ax, AxProvider};
    emulated("ax", None, |at, url, _id, idle| async move {
        // The guest's address is the sandbox's id: through the proxy, it is the proxy's.
        let config = at
            .config::<Ax>(&url)?
            .request_timeout(idle)
            .idle_timeout(idle);
        Ok(exec(
            AxProvider::new(config)?.attach(url.trim_start_matches("http://"))?,
        ))
    })
}

/// Cloudflare's create: `POST /v1/sandbox` (an id minted, nothing made), then the marker write
/// (`PUT …/file/…`) that assigns the id a container; the bridge has no list route, so what is
/// left is counted by the emulator (its live sandboxes).
fn cloudflare(_: Knobs) -> BoxFuture<'static, Result<Setup, Error>> {
    use execseam::cloudflare::Cloudflare;
    attached_creating::<Cloudflare>("cloudflare", cloudflare_timeouts, |at, _own, live| {
        let routes = &[("POST /*sandbox", false), ("PUT /*/file/*", true)];
        kit_creates::<Cloudflare>(at, cloudflare_timeouts, false, routes, Counted::Live(live))
    })
}

/// Cloudflare's request and stream idle timeouts set to `idle`, and a small declared answer
/// limit: an endless answer must end on it, at any speed of this (shared) machine, long before
/// the idle timeout.
fn cloudflare_timeouts(
    c: execseam::cloudflare::CloudflareConfig,
    idle: Duration,
) -> execseam::cloudflare::CloudflareConfig {
    c.request_timeout(idle)
        .stream_idle_timeout(idle)
        .max_answer_bytes(ANSWER_LIMIT)
}

fn daytona(_: Knobs) -> BoxFuture<'static, Result<Setup, Error>> {
    use execseam::daytona::{Daytona, DaytonaProvider};
    emulated_creating(
        "daytona",
        None,
        |at, url, id, idle| async move {
            // The toolbox through the same base URL, as the API would name it (no lookup).
            // Small declared limits (a log answer is read up to 3 x max_output + 1 MiB): an
            // endless answer must end on them, at any speed of this machine, long before the
            // idle timeout.
            let config = daytona_timeouts(at.config::<Daytona>(&url)?, idle)
                .toolbox_url(format!("{url}/toolbox"))
                .max_output(256 << 10);
            Ok(exec(DaytonaProvider::new(config)?.attach(&id)?))
        },
        Some(daytona_creates),
    )
}

fn fly(_: Knobs) -> BoxFuture<'static, Result<Setup, Error>> {
    attached_creating::<execseam::fly::Fly>("fly", fly_timeouts, fly_creates)
}

/// Fly's exec answer comes when the command ends: its request is bounded by the command's
/// timeout plus a slack; the create's by its own timeout. A small declared answer limit: an
/// endless answer must end on it, at any speed of this machine, long before the request timeout.
fn fly_timeouts(c: execseam::fly::FlyConfig, idle: Duration) -> execseam::fly::FlyConfig {
    c.exec_timeout(idle)
        .request_slack(idle)
        .create_timeout(idle)
        .max_answer_bytes(ANSWER_LIMIT)
}

/// Fly's create (`POST /v1/apps/{app}/machines`: the machine, started, in one answer).
fn fly_creates(at: Endpoints, _own: String, _: Live) -> Creates {
    let routes = &[("POST /*/machines", false)];
    tagged_creates::<execseam::fly::Fly>(at, fly_timeouts, false, routes)
}

fn sprites(_: Knobs) -> BoxFuture<'static, Result<Setup, Error>> {
    sprites_on(
        execseam::sprites::Transport::WebSocket,
        Some(sprites_creates),
    )
}

/// Sprites over its HTTP exec transport (`POST …/exec`, the framed body); its creates are the
/// WebSocket row's.
fn sprites_http(_: Knobs) -> BoxFuture<'static, Result<Setup, Error>> {
    sprites_on(execseam::sprites::Transport::Http, None)
}

fn sprites_on(
    transport: execseam::sprites::Transport,
    creates: Option<CreatesOf>,
) -> BoxFuture<'static, Result<Setup, Error>> {
    use execseam::sprites::{Sprites, SpritesProvider};
    emulated_creating(
        "sprites",
        None,
        move |at, url, id, idle| async move {
            let config = sprites_timeouts(at.config::<Sprites>(&url)?, idle).transport(transport);
            Ok(exec(SpritesProvider::new(config)?.attach(&id)?))
        },
        creates,
    )
}

/// Sprites' request timeout, keepalive and HTTP idle timeout set from `idle`.
fn sprites_timeouts(
    c: execseam::sprites::SpritesConfig,
    idle: Duration,
) -> execseam::sprites::SpritesConfig {
    c.request_timeout(idle)
        .keepalive(idle / 4, idle)
        .http_idle_timeout(idle)
}

/// Sprites' create (`POST /v1/sprites {"name"}`): no labels to find a lost answer's sprite by,
/// but the guard names it (a sprite's name is its id); what is left is every sprite but the
/// suite's own.
fn sprites_creates(at: Endpoints, own: String, _: Live) -> Creates {
    let routes = &[("POST /v1/sprites", false)];
    use execseam::sprites::Sprites;
    kit_creates::<Sprites>(at, sprites_timeouts, false, routes, Counted::AllBut(own))
}

fn modal(_: Knobs) -> BoxFuture<'static, Result<Setup, Error>> {
    // The router's URL comes from the control plane: through the proxy, the emulator answers
    // with the proxy's address (x-forwarded-host), so router calls go through it.
    attached_creating::<execseam::modal::Modal>("modal", modal_timeouts, modal_creates)
}

/// Modal's request, stream idle and connect timeouts set to `idle`.
fn modal_timeouts(c: execseam::modal::ModalConfig, idle: Duration) -> execseam::modal::ModalConfig {
    c.request_timeout(idle)
        .stream_idle_timeout(idle)
        .connect_timeout(idle)
        // A stream that cannot be opened is reopened up to max_resumes times, each bounded by
        // the request timeout: a bare answer comes within their product.
        .max_resumes(3)
}

/// Modal's create (`SandboxCreateV2`: the sandbox id and its first router access in one answer;
/// the app and image lookups before it make nothing).
fn modal_creates(at: Endpoints, _own: String, _: Live) -> Creates {
    let routes = &[("POST /*/SandboxCreateV2", false)];
    Creates {
        plain_429: Some("Modal throttles with gRPC's RESOURCE_EXHAUSTED, not an HTTP 429"),
        ..tagged_creates::<execseam::modal::Modal>(at, modal_timeouts, false, routes)
    }
}

/// Chrono as its conformance target starts it (a host directory mounted into every execution's
/// sandbox), with room for the suite's parallel cases.
fn chrono_start(
    options: execseam_emulators::EmulatorOptions,
) -> BoxFuture<'static, std::io::Result<execseam_emulated::Started>> {
    let chrono = execseam_emulators::chrono::ChronoOptions {
        max_concurrent: 64,
        ..Default::default()
    };
    Box::pin(execseam_emulated::start_chrono_with(options, chrono))
}

fn chrono(_: Knobs) -> BoxFuture<'static, Result<Setup, Error>> {
    use execseam::chrono::{Chrono, ChronoExec};
    emulated_creating(
        "chrono",
        Some(chrono_start),
        |at, url, _id, idle| async move {
            Ok(exec(ChronoExec::new(chrono_timeouts(
                at.config::<Chrono>(&url)?,
                idle,
            ))?))
        },
        Some(chrono_creates),
    )
}

/// A synchronous /execute answers when the command ends: the request is bounded by the
/// command's timeout plus the slack. Aevatar's own response limit (1 MiB) rather than the
/// adapter's 64 MiB default: an endless answer must end on it, at any speed of this machine,
/// long before the request timeout.
fn chrono_timeouts(
    c: execseam::chrono::ChronoConfig,
    idle: Duration,
) -> execseam::chrono::ChronoConfig {
    let secs = u32::try_from(idle.as_secs().max(1)).unwrap_or(u32::MAX);
    c.timeout_secs(secs)
        .request_slack(idle)
        .connect_timeout(idle)
        .max_response_bytes(execseam_chrono_contract::wire::MAX_RESPONSE_BYTES)
        // The durable exchanges (process handles) bounded like the rest, so a stalled status
        // read ends in time.
        .policy(execseam::chrono::DurablePolicy {
            exchange_timeout: idle,
            ..Default::default()
        })
}

/// Chrono's create sends no request (its `LOST_CREATE` says why): checked, then not applicable.
fn chrono_creates(at: Endpoints, _own: String, _: Live) -> Creates {
    kit_creates::<execseam::chrono::Chrono>(at, chrono_timeouts, false, &[], Counted::Nothing)
}

fn e2b(_: Knobs) -> BoxFuture<'static, Result<Setup, Error>> {
    use execseam::e2b::{E2b, E2bProvider};
    emulated_creating(
        "e2b",
        None,
        |at, url, id, idle| async move {
            let config = e2b_timeouts(at.config::<E2b>(&url)?, idle);
            // `connect` (not `attach`): it learns the sandbox's envd access token.
            Ok(exec(E2bProvider::new(config)?.connect(&id).await?))
        },
        Some(e2b_creates),
    )
}

/// E2B's control plane (issue 38, D3): the create, then a connect to what it made.
fn e2b_creates(at: Endpoints, _own: String, _: Live) -> Creates {
    let routes = &[
        ("POST /*sandboxes", false),
        ("POST /*sandboxes/*/connect", true),
    ];
    tagged_creates::<execseam::e2b::E2b>(at, e2b_timeouts, true, routes)
}

/// E2B's stream idle and request timeouts set to `idle`.
fn e2b_timeouts(c: execseam::e2b::E2bConfig, idle: Duration) -> execseam::e2b::E2bConfig {
    c.stream_idle_timeout(idle).request_timeout(idle)
}

/// Daytona's request and idle timeouts set to `idle`, and the suite's answer limit.
fn daytona_timeouts(
    c: execseam::daytona::DaytonaConfig,
    idle: Duration,
) -> execseam::daytona::DaytonaConfig {
    c.request_timeout(idle)
        .idle_timeout(idle)
        .max_answer_bytes(ANSWER_LIMIT)
}

/// Daytona's create (`POST /sandbox`, then the state it polls until `started`).
fn daytona_creates(at: Endpoints, _own: String, _: Live) -> Creates {
    let routes = &[("POST /*sandbox", false)];
    tagged_creates::<execseam::daytona::Daytona>(at, daytona_timeouts, false, routes)
}

/// Vercel's create (`POST /v3/sandboxes`: the sandbox and its session in one answer).
fn vercel_creates(at: Endpoints, _own: String, _: Live) -> Creates {
    let routes = &[("POST /*sandboxes", false)];
    tagged_creates::<execseam::vercel::Vercel>(at, vercel_timeouts, false, routes)
}

/// Vercel's request, connect and stream idle timeouts, all set to `idle`.
fn vercel_timeouts(
    c: execseam::vercel::VercelConfig,
    idle: Duration,
) -> execseam::vercel::VercelConfig {
    c.request_timeout(idle)
        .connect_timeout(idle)
        .stream_idle_timeout(idle)
}

/// Adapter `A`'s emulated target, its sandbox attached to through the proxy (its configuration
/// tuned there), with its creates for the `creates` phase.
fn attached_creating<A: KitAdapter>(
    target: &'static str,
    tune: fn(A::Config, Duration) -> A::Config,
    creates: CreatesOf,
) -> BoxFuture<'static, Result<Setup, Error>> {
    emulated_creating(
        target,
        None,
        move |at, url, id, idle| async move {
            let provider = provider_at::<A>(&at, Some((&url, idle)), tune)?;
            let sandbox: Arc<dyn Sandbox> = Arc::from(provider.attach(&id)?);
            Ok(sandbox as Arc<dyn Exec>)
        },
        Some(creates),
    )
}

/// Adapter `A`'s provider through a base URL, its configuration tuned there (its timeouts set
/// to the duration), or (`None`) directly at its emulator.
fn provider_at<A: KitAdapter>(
    at: &Endpoints,
    through: Option<(&str, Duration)>,
    tune: fn(A::Config, Duration) -> A::Config,
) -> Result<A::Provider, Error> {
    A::provider(match through {
        Some((url, idle)) => tune(at.config::<A>(url)?, idle),
        None => at.config_here::<A>()?,
    })
}

/// The [`Creates`] of adapter `A`, whose sandboxes keep labels (so the kit's create tag finds a
/// sandbox whose answer was cut): see [`kit_creates`]; counted by the suite's own label.
fn tagged_creates<A: KitAdapter>(
    at: Endpoints,
    tune: fn(A::Config, Duration) -> A::Config,
    connect: bool,
    routes: &'static [(&'static str, bool)],
) -> Creates {
    kit_creates::<A>(at, tune, connect, routes, Counted::Label)
}

/// The label the suite's labelled creates carry (and are counted by).
const LABEL: (&str, &str) = ("execseam-test", "reliability-creates");

/// How a [`Creates::left`] counts what the creates made.
enum Counted {
    /// By the suite's [`LABEL`] (the create carries it).
    Label,
    /// Everything the provider lists but the suite's own sandbox.
    AllBut(String),
    /// The emulator's live sandboxes beyond those when the setup ended (they cannot be
    /// removed from here: a leftover stays counted as known once reported).
    Live(Live),
    /// Nothing: the create makes nothing remote.
    Nothing,
}

/// The [`Creates`] of adapter `A`: the create through the kit's guard as the facade builds it
/// (`A::LOST_CREATE`), then (`connect`) a connect to what it made; counted as `counted` says.
fn kit_creates<A: KitAdapter>(
    at: Endpoints,
    tune: fn(A::Config, Duration) -> A::Config,
    connect: bool,
    routes: &'static [(&'static str, bool)],
    counted: Counted,
) -> Creates {
    use execseam_adapter_kit::guard::LostCreate;
    let labelled = matches!(counted, Counted::Label);
    let here = at.clone();
    let known = Arc::new(std::sync::atomic::AtomicUsize::new(match &counted {
        Counted::Live(live) => live(),
        _ => 0,
    }));
    let counted = Arc::new(counted);
    Creates {
        create: Arc::new(move |url: String, idle: Duration| {
            let at = at.clone();
            Box::pin(async move {
                let provider = guarded::<A>(provider_at::<A>(&at, Some((&url, idle)), tune)?);
                let mut spec = SandboxSpec::new();
                if labelled {
                    spec = spec.with_label(LABEL.0, LABEL.1);
                }
                let made = provider.create(spec).await?;
                if !connect {
                    return Ok(Arc::from(made));
                }
                let connect = provider.connect(made.id()).await.map(drop);
                connected(made, connect).await
            })
        }),
        left: Arc::new(move |remove: bool| {
            let (at, counted, known) = (here.clone(), counted.clone(), known.clone());
            Box::pin(async move {
                // Directly at the emulator, in the create's configuration (its mode), with
                // room for the list's answer.
                let provider =
                    || A::provider(tune(at.config_here::<A>()?, Duration::from_secs(10)));
                match &*counted {
                    Counted::Label => labelled_left(&provider()?, LABEL, remove).await,
                    Counted::AllBut(own) => {
                        let provider = provider()?;
                        let mut left = provider.list(&ListFilter::new()).await?;
                        left.retain(|s| s.id != *own);
                        destroyed_if(&provider, &left, remove).await
                    }
                    Counted::Live(live) => {
                        let left = live().saturating_sub(known.load(Ordering::SeqCst));
                        if remove {
                            known.fetch_add(left, Ordering::SeqCst);
                        }
                        Ok(left)
                    }
                    Counted::Nothing => Ok(0),
                }
            })
        }),
        routes,
        nothing_made: match A::LOST_CREATE {
            LostCreate::NothingMade(why) => Some(why),
            _ => None,
        },
        plain_429: None,
        then: None,
    }
}

fn vercel(_: Knobs) -> BoxFuture<'static, Result<Setup, Error>> {
    use execseam::vercel::{Vercel, VercelProvider};
    emulated_creating(
        "vercel",
        None,
        |at, url, id, idle| async move {
            let config = vercel_timeouts(at.config::<Vercel>(&url)?, idle);
            // The session is looked up directly (not through the proxy): the suite's requests are
            // the exec's own.
            let direct = at.config_here::<Vercel>()?;
            let session = VercelProvider::new(direct)?
                .connect(&id)
                .await?
                .session_id();
            Ok(exec(
                VercelProvider::new(config)?.attach_session(&id, &session),
            ))
        },
        Some(vercel_creates),
    )
}

fn northflank(_: Knobs) -> BoxFuture<'static, Result<Setup, Error>> {
    use execseam::northflank::{Northflank, NorthflankProvider};
    emulated_creating(
        "northflank",
        None,
        |at, url, id, idle| async move {
            let config = at
                .config::<Northflank>(&url)?
                .request_timeout(idle)
                .connect_timeout(idle)
                .idle_timeout(idle);
            Ok(exec(NorthflankProvider::new(config)?.attach(&id)?))
        },
        Some(northflank_creates),
    )
}

/// Northflank creates nothing (connect-only): its connect, the service GET (issue 38, D4),
/// to the suite's own service; nothing can be left.
fn northflank_creates(at: Endpoints, own: String, _: Live) -> Creates {
    use execseam::northflank::{Northflank, NorthflankProvider};
    Creates {
        create: Arc::new(move |url: String, idle: Duration| {
            let (at, own) = (at.clone(), own.clone());
            Box::pin(async move {
                let config = at
                    .config::<Northflank>(&url)?
                    .request_timeout(idle)
                    .connect_timeout(idle)
                    .idle_timeout(idle);
                let handle = NorthflankProvider::new(config)?.connect(&own).await?;
                // Connected (not owned): destroying the handle ends nothing of the service.
                Ok(Arc::new(handle) as Arc<dyn Sandbox>)
            })
        }),
        left: Arc::new(|_| Box::pin(async { Ok(0) })),
        routes: &[("GET /*services/*", true)],
        nothing_made: None,
        plain_429: None,
        then: None,
    }
}

/// Through the proxy, every request of an exec goes through it: a fresh handle's lookups of the
/// claim, its Sandbox and its pod, the exec upgrade and its socket, the kill.
fn kubernetes(_: Knobs) -> BoxFuture<'static, Result<Setup, Error>> {
    attached_creating::<execseam::kubernetes::Kubernetes>(
        "kubernetes",
        kubernetes_timeouts,
        kubernetes_creates,
    )
}

/// Kubernetes' request and idle timeouts set to `idle`.
fn kubernetes_timeouts(
    c: execseam::kubernetes::KubernetesConfig,
    idle: Duration,
) -> execseam::kubernetes::KubernetesConfig {
    c.request_timeout(idle).idle_timeout(idle)
}

/// Kubernetes' creates in its three modes: the claim (`POST …/sandboxclaims`, then the waits
/// for its Sandbox and pod: the claim is named by then, and deleted on a failure), a Sandbox
/// from the emulator's template (`POST …/sandboxes`) and a plain pod (`POST …/pods`).
fn kubernetes_creates(at: Endpoints, _own: String, _: Live) -> Creates {
    use execseam::kubernetes::{Kubernetes, Mode};
    use execseam_emulators::kubernetes::TEMPLATE;
    let pods = |c, idle| {
        kubernetes_timeouts(c, idle)
            .mode(Mode::Pod)
            .image("python:3.12")
    };
    let sandboxes = |c, idle| {
        kubernetes_timeouts(c, idle)
            .mode(Mode::Sandbox)
            .template(TEMPLATE)
    };
    let pod = tagged_creates::<Kubernetes>(at.clone(), pods, false, &[("POST /*/pods", false)]);
    let sandbox = Creates {
        then: Some(Box::new(pod)),
        ..tagged_creates::<Kubernetes>(
            at.clone(),
            sandboxes,
            false,
            &[("POST /*/sandboxes", false)],
        )
    };
    let claims = &[("POST /*/sandboxclaims", false)];
    Creates {
        then: Some(Box::new(sandbox)),
        ..tagged_creates::<Kubernetes>(at, kubernetes_timeouts, false, claims)
    }
}

fn internal(e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Internal, e.to_string())
}

/// Docker has no emulator: the engine is the machine's (`DOCKER_HOST` a Unix socket) or the
/// repository's podman, which the suite starts itself (`execseam_test_util::fixtures::podman`).
/// The chaos proxy forwards to a TCP upstream, so a relay on 127.0.0.1 passes each connection to
/// the engine's socket, and the adapter reaches it as `tcp://` (plain HTTP).
fn docker(_knobs: Knobs) -> BoxFuture<'static, Result<Setup, Error>> {
    use execseam::docker::{Docker, DockerProvider};
    use execseam_adapter_kit::Adapter as _;
    Box::pin(async move {
        let engine = execseam_test_util::fixtures::podman();
        let base = Docker::config_from(&|k| engine.var(k))
            .map_err(|e| internal(format!("{e}: the docker entry needs a container engine")))?;
        let host = engine.var("DOCKER_HOST").unwrap_or_default();
        let socket = host.strip_prefix("unix://").ok_or_else(|| {
            internal(format!(
                "DOCKER_HOST {host:?} is not a unix:// socket (the relay forwards to one)"
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
            creates: Some(docker_creates(base)),
        })
    })
}

/// Docker's creates (issue 38, D18): the create, the start and the inspect that follows it
/// (warm mode: the container must run); the last two come after the container exists, so a
/// tampered answer there must not leave it. Counted by their own label on the engine's socket.
fn docker_creates(base: execseam::docker::DockerConfig) -> Creates {
    use execseam::docker::DockerProvider;
    const LABEL: (&str, &str) = ("io.execseam.test", "reliability-creates");
    let direct = base.clone().label(LABEL.0, LABEL.1);
    Creates {
        create: Arc::new(move |url: String, idle: Duration| {
            let config = base
                .clone()
                .host(format!("tcp://{}", url.trim_start_matches("http://")))
                .request_timeout(idle)
                .idle_timeout(idle)
                .label(LABEL.0, LABEL.1);
            Box::pin(async move {
                let made = guarded::<execseam::docker::Docker>(DockerProvider::new(config)?)
                    .create(SandboxSpec::new())
                    .await?;
                Ok(Arc::from(made))
            })
        }),
        left: Arc::new(move |remove: bool| {
            let direct = direct.clone();
            Box::pin(
                async move { labelled_left(&DockerProvider::new(direct)?, LABEL, remove).await },
            )
        }),
        routes: &[
            ("POST /*containers/create", false),
            ("POST /*containers/*/start", true),
            ("GET /*containers/*/json", true),
        ],
        nothing_made: None,
        plain_429: None,
        then: None,
    }
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
