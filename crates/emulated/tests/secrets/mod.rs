//! No planted secret in any trace line, error or result, checked on the conformance run itself.
//!
//! Each target's conformance run (its child process) runs under a `tracing` subscriber at TRACE
//! that sees every span and event of every crate (the adapter, its SDK and HTTP/gRPC stacks, the
//! tools, the layers, the emulator in this process), with planted secrets: the API key the
//! emulator is started with ([`TOKEN`]) and every credential it exports, env values, stdin, file
//! contents written through the tools (`write`, `edit`, `apply_patch`, a failing `write`), a
//! sandbox-wide env value in a created sandbox's spec. Before the suite, [`planted`] makes the
//! calls that carry them (keeping every error's and result's `Display` and `Debug`); the suite
//! then runs whole (its env, stdin, argv, tool and lifecycle cases among them); after it,
//! [`Watch::check`] fails the run if a captured line or a kept string holds a secret, or if no
//! `exec` span of the adapter was captured. A canary (a secret traced on purpose) proves the
//! capture and the scan live on every run.

use std::sync::{Arc, Mutex};

use execseam::{Command, Error, ErrorKind, Exec, Provider, SandboxSpec};
use execseam_emulated::Emulated;
use execseam_tools::{ReadRange, Tools, WriteOptions};

/// The API key every emulator is started with.
pub const TOKEN: &str = "tok-PLANTED-conf-7a6b5c4d3e";
const ENV_SECRET: &str = "env-PLANTED-conf-2b3c4d5e";
const SPEC_ENV_SECRET: &str = "spec-PLANTED-conf-8d7c6b5a";
const STDIN_SECRET: &str = "stdin-PLANTED-conf-6f7a8b9c";
const FILE_SECRET: &str = "file-PLANTED-conf-0d1e2f3a";
const EDIT_SECRET: &str = "edit-PLANTED-conf-4b5c6d7e";
const PATCH_SECRET: &str = "patch-PLANTED-conf-8f9a0b1c";
/// Traced on purpose after the run: the check must find it.
const CANARY: &str = "canary-PLANTED-conf-5e6f7a8b";

#[derive(Default)]
struct State {
    /// `None` until [`Watch::arm`]: lines are kept until the emulator's credentials are known.
    secrets: Option<Vec<String>>,
    pending: Vec<String>,
    /// The first lines that held a secret.
    leaks: Vec<String>,
    leaked: usize,
    /// The canary's line was captured.
    canary: bool,
    bytes: usize,
    /// The adapter's `exec` span was seen (`exec{provider="<adapter>"`).
    exec_span: bool,
    exec_needle: String,
    /// Every error's and result's `Display`/`Debug` from the planted calls.
    seen: Vec<String>,
}

impl State {
    fn scan(&mut self, line: String) {
        self.bytes += line.len();
        if !self.exec_span && line.contains(&self.exec_needle) {
            self.exec_span = true;
        }
        match &self.secrets {
            None => self.pending.push(line),
            Some(_) if line.contains(CANARY) => self.canary = true,
            Some(secrets) => {
                if secrets.iter().any(|s| line.contains(s.as_str())) {
                    self.leaked += 1;
                    if self.leaks.len() < 5 {
                        self.leaks.push(line);
                    }
                }
            }
        }
    }
}

/// The process's subscriber: every span's and event's fields at TRACE, formatted as the `fmt`
/// layer would (`name{field=value …}` for a span, `field=value …` for an event) and scanned; none
/// is kept once armed. (No timestamps and no span chain repeated on every event: the same values,
/// a fraction of the text.)
#[derive(Clone)]
pub struct Watch(Arc<Mutex<State>>);

/// Formats the fields it visits as `name=value`, Debug-quoted like `fmt`'s.
struct Fields(String);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write as _;
        let _ = write!(self.0, " {}={value:?}", field.name());
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Watch {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut f = Fields(String::new());
        attrs.record(&mut f);
        self.scan(format!(
            "{}{{{}}}",
            attrs.metadata().name(),
            f.0.trim_start()
        ));
    }

    fn on_record(
        &self,
        _: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut f = Fields(String::new());
        values.record(&mut f);
        self.scan(f.0);
    }

    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let mut f = Fields(String::new());
        event.record(&mut f);
        self.scan(f.0);
    }
}

impl Watch {
    /// Installs the process's subscriber: every crate, every level.
    pub fn install(adapter: &str) -> Watch {
        use tracing_subscriber::layer::SubscriberExt as _;
        use tracing_subscriber::util::SubscriberInitExt as _;
        let watch = Watch(Arc::new(Mutex::new(State {
            exec_needle: format!("exec{{provider=\"{adapter}\""),
            ..State::default()
        })));
        tracing_subscriber::registry().with(watch.clone()).init();
        watch
    }

    fn scan(&self, line: String) {
        if let Ok(mut s) = self.0.lock() {
            s.scan(line);
        }
    }

    /// The secrets are known (the planted ones, and the credentials `emulated`'s emulator hands
    /// out, whether or not it took the token): the lines kept so far are scanned.
    pub fn arm(&self, emulated: &Emulated) {
        let mut secrets: Vec<String> = [
            TOKEN,
            ENV_SECRET,
            SPEC_ENV_SECRET,
            STDIN_SECRET,
            FILE_SECRET,
            EDIT_SECRET,
            PATCH_SECRET,
            CANARY,
        ]
        .map(str::to_owned)
        .to_vec();
        let env = &emulated.emulator.env;
        secrets.extend(
            env.iter()
                .filter(|(k, v)| {
                    ["KEY", "TOKEN", "SECRET"].iter().any(|w| k.contains(w)) && v.len() >= 8
                })
                .map(|(_, v)| v.clone()),
        );
        // AWS's access key id is an identifier, not a secret (crates/cli/tests/secrets.rs).
        let public: Vec<&String> = env
            .iter()
            .filter(|(k, _)| k == "AWS_ACCESS_KEY_ID")
            .map(|(_, v)| v)
            .collect();
        secrets.retain(|s| !public.contains(&s));
        let mut s = self.0.lock().expect("watch");
        s.secrets = Some(secrets);
        for line in std::mem::take(&mut s.pending) {
            s.scan(line);
        }
    }

    fn keep(&self, seen: Vec<String>) {
        self.0.lock().expect("watch").seen.extend(seen);
    }

    /// After the run: `Err` naming the leak, or the missing `exec` span; the canary (traced
    /// here) must be found, or the check itself is blind.
    pub fn check(&self, name: &str) -> Result<String, String> {
        tracing::info!(planted = CANARY, "secrets canary");
        let s = self.0.lock().expect("watch");
        let Some(secrets) = &s.secrets else {
            return Err(format!(
                "{name}: the target never started: nothing was checked"
            ));
        };
        if s.leaked > 0 {
            return Err(format!(
                "{name}: {} captured trace line(s) hold a planted secret, the first: {:?}",
                s.leaked, s.leaks
            ));
        }
        let kept: Vec<&String> = s
            .seen
            .iter()
            .filter(|x| secrets.iter().any(|sec| x.contains(sec.as_str())))
            .collect();
        if !kept.is_empty() {
            return Err(format!(
                "{name}: an error or result holds a planted secret: {kept:?}"
            ));
        }
        if !s.canary {
            return Err(format!(
                "{name}: the secrets check is blind: the canary traced after the run was not captured"
            ));
        }
        if !s.exec_span {
            return Err(format!("{name}: no exec span of the adapter was captured"));
        }
        Ok(format!(
            "secrets: {name}: {} bytes traced at TRACE and {} errors/results: no planted secret among {} (the canary found)",
            s.bytes,
            s.seen.len(),
            secrets.len()
        ))
    }
}

fn setup(what: &str, e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::Internal, format!("secrets: {what}: {e}"))
}

/// The planted calls, in a directory of the scratch removed afterwards: env, stdin, file
/// contents through every writing tool, failures carrying them; and, where the provider declares
/// `create` with a spec env, a sandbox created with a planted env value (which must reach its
/// commands; the sandbox is destroyed). Every error's and result's `Display`/`Debug` is kept for
/// the check.
pub async fn planted(watch: &Watch, emulated: &Emulated) -> Result<(), Error> {
    let name = emulated.spec.name;
    let exec: &dyn Exec = &*emulated.sandbox;
    let dir = format!("{}/secrets-planted", emulated.scratch);
    let made = exec
        .exec(Command::new(["mkdir", "-p", "--", &dir])?)
        .await?;
    if !made.exit.success() {
        return Err(setup(&format!("mkdir {dir}"), format!("{made:?}")));
    }
    let mut seen = Vec::new();
    let tools = Tools::new(exec);
    let c = Command::builder(["sh", "-c", "printf %s \"$K\" | wc -c; wc -c"])
        .env("K", ENV_SECRET)
        .stdin(STDIN_SECRET)
        .build()?;
    match exec.exec(c).await {
        Ok(o) => seen.push(format!("{:?}", o.exit)),
        Err(e) => seen.push(format!("{e} {e:?}")),
    }
    // A failing exec carrying the env value and stdin (a workdir that does not exist).
    let c = Command::builder(["cat"])
        .env("K", ENV_SECRET)
        .stdin(STDIN_SECRET)
        .workdir("/no/such/execseam/dir")
        .build()?;
    if let Err(e) = exec.exec(c).await {
        seen.push(format!("{e} {e:?}"));
    }
    if exec.capabilities().stdin.is_supported() {
        let f = format!("{dir}/planted.txt");
        let r = tools.write(&f, FILE_SECRET).await;
        seen.push(format!("{r:?}"));
        let r = tools.edit(&f, FILE_SECRET, EDIT_SECRET, false).await;
        seen.push(format!("{r:?}"));
        // Absent now: a typed error that must not quote the text it looked for.
        if let Err(e) = tools.edit(&f, FILE_SECRET, EDIT_SECRET, false).await {
            seen.push(format!("{e} {e:?}"));
        }
        let patch = format!(
            "*** Begin Patch\n*** Add File: planted-patch.txt\n+{PATCH_SECRET}\n*** Update File: planted.txt\n-{EDIT_SECRET}\n+{PATCH_SECRET}\n*** End Patch\n"
        );
        let r = tools.apply_patch(&dir, &patch).await;
        seen.push(format!("{r:?}"));
        // A failing patch and a failing write, both carrying file contents.
        let bad = format!(
            "*** Begin Patch\n*** Update File: planted.txt\n-not there\n+{PATCH_SECRET}\n*** End Patch\n"
        );
        if let Err(e) = tools.apply_patch(&dir, &bad).await {
            seen.push(format!("{e} {e:?}"));
        }
        let r = tools
            .write_with(
                "/proc/execseam-no/x",
                FILE_SECRET,
                WriteOptions {
                    create_parents: false,
                },
            )
            .await;
        if let Err(e) = r {
            seen.push(format!("{e} {e:?}"));
        }
        let back = tools.read(&f, ReadRange::All).await;
        if back.as_deref().ok() != Some(PATCH_SECRET.as_bytes()) {
            return Err(setup(
                name,
                "the planted file did not go through write, edit and apply_patch",
            ));
        }
    }
    let _ = exec.exec(Command::new(["rm", "-rf", "--", &dir])?).await;
    seen.extend(planted_spec_env(name, &*emulated.provider).await?);
    watch.keep(seen);
    Ok(())
}

/// Targets whose lifecycle declares a spec env that the emulated service's default set-up
/// refuses (`Unsupported`), with the reason.
const REFUSES_SPEC_ENV: &[(&str, &str)] = &[(
    "kubernetes",
    "a claim's env needs its SandboxTemplate's envVarsInjectionPolicy to allow it, and the \
     emulator's default template keeps the default, Disallowed",
)];

/// A sandbox created with a planted sandbox-wide env value, where the provider declares both.
async fn planted_spec_env(name: &str, provider: &dyn Provider) -> Result<Vec<String>, Error> {
    let lifecycle = provider.lifecycle();
    let refused = REFUSES_SPEC_ENV.iter().any(|(n, _)| *n == name);
    let declared = lifecycle.create && lifecycle.spec.env;
    let mut seen = Vec::new();
    match provider
        .create(SandboxSpec::new().with_env("K", SPEC_ENV_SECRET))
        .await
    {
        Ok(sandbox) => {
            let o = sandbox
                .exec(Command::new(["sh", "-c", "printf %s \"$K\" | wc -c"])?)
                .await;
            seen.push(format!("{o:?}"));
            seen.push(format!("{:?}", sandbox.destroy().await));
            let o = o?;
            if String::from_utf8_lossy(&o.stdout).trim() != SPEC_ENV_SECRET.len().to_string() {
                return Err(setup(
                    name,
                    "the spec's env value did not reach the command",
                ));
            }
            if !declared {
                return Err(setup(
                    name,
                    "created a sandbox with an env its lifecycle does not declare",
                ));
            }
        }
        Err(e) => {
            seen.push(format!("{e} {e:?}"));
            if declared && !(refused && e.kind() == ErrorKind::Unsupported) {
                return Err(setup(
                    name,
                    format!("the lifecycle declares create with env, but: {}", e.kind()),
                ));
            }
        }
    }
    Ok(seen)
}
