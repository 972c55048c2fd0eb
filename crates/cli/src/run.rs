//! `execseam run`, `execseam adapters`, `execseam emulate`.

use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use execseam_core::{Command, Delivery, Error, ErrorKind, Exec, Output};
use execseam_layers::ExecExt;
use serde_json::{Value, json};

use crate::{INFRA_FAILURE, registry};

#[derive(Args)]
pub struct RunArgs {
    /// The adapter to run through.
    #[arg(long, default_value = "local")]
    adapter: String,
    /// Run in this existing sandbox (left running); without it a sandbox is created and
    /// destroyed before exiting.
    #[arg(long, env = "EXECSEAM_SANDBOX")]
    sandbox: Option<String>,
    /// Absolute working directory in the sandbox.
    #[arg(long)]
    workdir: Option<String>,
    /// An environment variable, KEY=VALUE (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// Feed this file to stdin (`-` for this process's stdin). Without it stdin is at EOF.
    #[arg(long, value_name = "FILE|-")]
    stdin: Option<String>,
    /// Kill the command after this many seconds (a host-side deadline; 0: none). A finite
    /// number: `inf`, `nan` and negative values are usage errors; one too large for a
    /// deadline means none. An adapter whose provider kills at a per-exec timeout (Modal, Fly)
    /// gets it there, rounded up to whole seconds.
    #[arg(long, value_name = "SECS", value_parser = parse_timeout)]
    timeout: Option<f64>,
    /// Print the whole result (or error) as one JSON object.
    #[arg(long)]
    json: bool,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "ARGV")]
    argv: Vec<String>,
}

#[derive(Args)]
pub struct EmulateArgs {
    /// The provider to emulate.
    provider: String,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: std::net::SocketAddr,
    /// A fault rule, `[ROUTE=]FAULT[@N|@always]` (repeatable): 429[:secs], 500, 503, reset, cut,
    /// malformed, latency:<ms>, auth, vanish.
    #[arg(long = "fault", value_name = "RULE")]
    faults: Vec<String>,
    /// The token the emulator accepts (default: any non-empty token).
    #[arg(long)]
    token: Option<String>,
    /// Bind a host directory (or file) into every sandbox at SANDBOX, read-only with `:ro`
    /// (repeatable): for a repository you want inside. Nothing of the host is visible otherwise.
    #[arg(long = "mount", value_name = "HOST:SANDBOX[:ro]")]
    mounts: Vec<String>,
    /// Where the sandboxes' state (their upper layers) lives (default: the system temp dir).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<std::path::PathBuf>,
    /// Put the chaos proxy in front of the emulator with this rule (repeatable; the language of
    /// `execseam chaos --rule`): `--listen` is then the proxy's address, and the printed
    /// environment points at the proxy.
    #[arg(long = "chaos", value_name = "RULE")]
    chaos: Vec<String>,
    /// Where to write the certificate its own TLS endpoints present (Modal's tunnels:
    /// `Tunnel.url`), followed by this system's root certificates; printed as `SSL_CERT_FILE`
    /// (default: a file beside the sandboxes' state, removed at exit). Emulators without TLS
    /// endpoints of their own write nothing.
    #[arg(long, value_name = "FILE")]
    ca_file: Option<std::path::PathBuf>,
}

/// Reads `--stdin` (`-` for this process's stdin): at most `max` bytes (the adapter's
/// `max_stdin`), so a larger stdin is refused having read one byte more than the adapter
/// takes, before any request. The contract holds stdin as bytes (`Command::stdin`), so an
/// adapter without a cap gets the whole of it in memory, once (streaming it would need a
/// stdin that is a reader in the contract, which an exec that may be retried or made durable
/// cannot re-read).
fn read_stdin(source: &str, max: Option<u64>) -> Result<Vec<u8>, Error> {
    let (reader, size, what): (Box<dyn Read>, u64, String) = if source == "-" {
        (Box::new(std::io::stdin()), 0, "stdin".to_owned())
    } else {
        let what = format!("--stdin {source}");
        let file = std::fs::File::open(source)
            .map_err(|e| Error::new(ErrorKind::InvalidCommand, format!("{what}: {e}")))?;
        let size = file.metadata().map_or(0, |m| m.len());
        (Box::new(file), size, what)
    };
    let most = max.map_or(u64::MAX, |m| m.saturating_add(1));
    let mut buf = Vec::with_capacity(usize::try_from(size.min(most)).unwrap_or(0));
    reader
        .take(most)
        .read_to_end(&mut buf)
        .map_err(|e| Error::new(ErrorKind::InvalidCommand, format!("reading {what}: {e}")))?;
    match max {
        Some(m) if buf.len() as u64 > m => Err(Error::new(
            ErrorKind::InvalidCommand,
            format!("{what} is more than {m} bytes, the most this adapter accepts (its max_stdin)"),
        )),
        _ => Ok(buf),
    }
}

fn build_command(args: &RunArgs) -> Result<Command, Error> {
    let mut b = Command::builder(args.argv.clone());
    if let Some(dir) = &args.workdir {
        b = b.workdir(dir.clone());
    }
    for kv in &args.env {
        let Some((k, v)) = kv.split_once('=') else {
            return Err(Error::new(
                ErrorKind::InvalidCommand,
                format!("--env {kv:?} is not KEY=VALUE"),
            ));
        };
        b = b.env(k, v);
    }
    if let Some(source) = args.stdin.as_deref() {
        let max = registry::all()
            .into_iter()
            .find(|a| a.name == args.adapter)
            .and_then(|a| registry::capabilities(&a).max_stdin);
        b = b.stdin(read_stdin(source, max)?);
    }
    b.build()
}

/// The status of a usage error (clap's convention): bad arguments, an unknown adapter, a
/// configuration that cannot work. Infrastructure failures are [`INFRA_FAILURE`].
pub const USAGE: u8 = 2;

/// The exit status for an error: usage errors (found before any I/O) are 2, the rest 125.
pub fn error_status(e: &Error) -> ExitCode {
    match e.kind() {
        ErrorKind::InvalidConfig | ErrorKind::InvalidCommand if e.status().is_none() => {
            ExitCode::from(USAGE)
        }
        _ => ExitCode::from(INFRA_FAILURE),
    }
}

/// SIGINT and SIGTERM, caught from the moment [`Signals::listen`] returns (not from the first
/// poll): a signal during a create must reach the code that undoes it, not kill the process.
pub struct Signals {
    int: Option<tokio::signal::unix::Signal>,
    term: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    pub fn listen() -> Signals {
        use tokio::signal::unix::{SignalKind, signal};
        Signals {
            int: signal(SignalKind::interrupt()).ok(),
            term: signal(SignalKind::terminate()).ok(),
        }
    }

    /// The exit status of the next signal: 130 for SIGINT, 143 for SIGTERM.
    pub async fn recv(&mut self) -> u8 {
        async fn next(s: Option<&mut tokio::signal::unix::Signal>) {
            match s {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending().await,
            }
        }
        tokio::select! {
            () = next(self.int.as_mut()) => 130,
            () = next(self.term.as_mut()) => 143,
        }
    }
}

/// How long an exit waits for the kills and deletes that dropped handles started (the kit's
/// reaper): each is one request bounded by its adapter's request timeout.
pub const DRAIN: Duration = Duration::from_secs(10);

/// The one line of an interrupted run, after the kills it started were awaited and what it
/// created was removed: which of those failed, if any.
pub(crate) async fn interrupted_exit(sig: u8, sandbox: Option<&dyn execseam::Sandbox>) -> ExitCode {
    let drained = execseam_adapter_kit::reaper::drain(DRAIN).await;
    let mut not_done = drained.describe();
    if let Some(s) = sandbox
        && let Err(e) = s.close().await
    {
        let what = if s.owned() {
            "removing the sandbox this run created"
        } else {
            "releasing the sandbox"
        };
        if !not_done.is_empty() {
            not_done.push_str("; ");
        }
        not_done.push_str(&format!("{what} failed: {e}"));
    }
    if not_done.is_empty() {
        eprintln!(
            "execseam: interrupted; the command was killed and what this run created removed"
        );
    } else {
        eprintln!("execseam: interrupted; {not_done}");
    }
    ExitCode::from(sig)
}

pub async fn run(args: RunArgs) -> ExitCode {
    // A bad command is refused before anything is created.
    let cmd = match build_command(&args) {
        Ok(c) => c,
        Err(e) => return report(&args, Err(e)),
    };
    let mut signals = Signals::listen();
    // Interrupted during the create: the kit's guard destroys the sandbox when its answer
    // arrives (drained before exiting).
    let deadline = args.timeout.and_then(deadline_of);
    let sandbox = tokio::select! {
        s = registry::open(&args.adapter, args.sandbox.as_deref()) => match s {
            Ok(s) => s,
            Err(e) => return report(&args, Err(e)),
        },
        sig = signals.recv() => return interrupted_exit(sig, None).await,
    };
    // Interrupted: the exec is dropped (adapters with remote kill kill the command through the
    // kit's reaper), the kills are awaited, and what this run created is destroyed.
    let result = tokio::select! {
        r = run_inner(&args, cmd, sandbox.clone(), deadline) => r,
        sig = signals.recv() => return interrupted_exit(sig, Some(&*sandbox)).await,
    };
    registry::close(&*sandbox).await;
    report(&args, result)
}

/// Prints the result (or the error) and gives the exit status.
fn report(args: &RunArgs, result: Result<Output, Error>) -> ExitCode {
    match result {
        Ok(output) => {
            if args.json {
                println!("{}", output_json(&output));
            } else if !output.stdout.is_empty() || !output.stderr.is_empty() {
                // Not streamed (the adapter cannot): everything at the end.
                let _ = std::io::stdout().write_all(&output.stdout);
                let _ = std::io::stdout().flush();
                let _ = std::io::stderr().write_all(&output.stderr);
            }
            ExitCode::from(output.exit.shell_status().clamp(0, 255) as u8)
        }
        Err(e) => {
            if args.json {
                println!("{}", json!({ "error": error_json(&e) }));
            } else {
                // Whatever the command wrote before the failure still reaches the streams.
                if let Some(p) = e.partial() {
                    let _ = std::io::stdout().write_all(&p.stdout);
                    let _ = std::io::stdout().flush();
                    let _ = std::io::stderr().write_all(&p.stderr);
                }
                eprintln!("execseam: {e}");
            }
            error_status(&e)
        }
    }
}

/// Runs the command. In text mode on an adapter that streams, chunks are written as they
/// arrive and the returned output holds only the exit (its bytes are already out); otherwise the
/// whole output is returned.
async fn run_inner(
    args: &RunArgs,
    cmd: Command,
    sandbox: std::sync::Arc<dyn execseam::Sandbox>,
    deadline: Option<Duration>,
) -> Result<Output, Error> {
    let exec: std::sync::Arc<dyn Exec> = sandbox;
    let exec: std::sync::Arc<dyn Exec> = match deadline {
        Some(d) => std::sync::Arc::new(exec.with_deadline(d)),
        None => exec,
    };
    let streaming = if args.json { None } else { exec.streaming() };
    let Some(streaming) = streaming else {
        return exec.exec(cmd).await;
    };
    let mut events = streaming.exec_stream(cmd).await?;
    let (mut out, mut err) = (std::io::stdout(), std::io::stderr());
    loop {
        match events.next().await {
            Some(Ok(execseam_core::Event::Stdout(b))) => {
                let _ = out.write_all(&b);
                let _ = out.flush();
            }
            Some(Ok(execseam_core::Event::Stderr(b))) => {
                let _ = err.write_all(&b);
            }
            Some(Ok(execseam_core::Event::Exit(exit))) => {
                return Ok(Output::new(Vec::new(), Vec::new(), exit));
            }
            // Already written: the error carries no partial output to print again.
            Some(Err(mut e)) => {
                let _ = e.take_partial();
                return Err(e);
            }
            None => {
                return Err(Error::protocol("the stream ended without an exit status"));
            }
        }
    }
}

/// The result as JSON: `stdout`/`stderr` as strings when they are UTF-8 (NUL bytes included,
/// escaped by JSON), `null` otherwise, and always `stdout_base64`/`stderr_base64`.
pub fn output_json(o: &Output) -> Value {
    serde_json::to_value(o).unwrap_or(Value::Null)
}

/// The error as JSON: core's serde shape (`kind` a stable string such as `not-found` or
/// `timeout-command`, `retry` as `{"class", "after_ms"}`).
fn error_json(e: &Error) -> Value {
    serde_json::to_value(e).unwrap_or(Value::Null)
}

fn delivery(d: Delivery) -> &'static str {
    match d {
        Delivery::Native => "native",
        Delivery::ShellWrapped => "shell-wrapped",
        Delivery::TempFile => "temp-file",
        Delivery::Unsupported => "unsupported",
    }
}

/// The lifecycle operations an adapter has, as words.
fn lifecycle(l: &execseam::LifecycleCapabilities) -> String {
    let ops: Vec<&str> = [
        (l.create, "create"),
        (l.connect, "connect"),
        (l.list, "list"),
        (l.destroy, "destroy"),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, n)| *n)
    .collect();
    if ops.is_empty() {
        "none".to_owned()
    } else {
        ops.join(", ")
    }
}

/// An adapter's cells in both tables: its name, how it delivers argv, stdin, workdir and env,
/// and whether it streams, kills remotely and returns binary output.
fn cells(a: &execseam::AdapterInfo) -> [&'static str; 8] {
    let c = registry::capabilities(a);
    let yn = |b: bool| if b { "yes" } else { "no" };
    [
        a.name,
        delivery(c.argv),
        delivery(c.stdin),
        delivery(c.workdir),
        delivery(c.env),
        yn(c.streaming),
        yn(c.remote_kill),
        yn(c.binary_output),
    ]
}

/// The text table's column widths (the columns of [`cells`]).
const WIDTHS: [usize; 8] = [11, 13, 13, 13, 13, 6, 5, 6];

/// The text table's line: `cells` padded to [`WIDTHS`], then `last`.
fn text_line(cells: [&str; 8], last: &str) -> String {
    let mut line = String::new();
    for (cell, width) in cells.iter().zip(WIDTHS) {
        line.push_str(&format!("{cell:<width$} "));
    }
    line + last
}

/// The README's adapter table (checked by `tests/readme.rs`).
pub fn markdown_table() -> String {
    let mut s = String::from(
        "| adapter | argv | stdin | workdir | env | streaming | remote kill | binary output | lifecycle |\n|---|---|---|---|---|---|---|---|---|\n",
    );
    for a in registry::all() {
        let row = cells(&a).join(" | ");
        s.push_str(&format!("| {row} | {} |\n", lifecycle(&a.lifecycle)));
    }
    s
}

pub fn adapters(as_json: bool, markdown: bool) -> ExitCode {
    if markdown {
        print!("{}", markdown_table());
        return ExitCode::SUCCESS;
    }
    let all = registry::all();
    if as_json {
        let list: Vec<Value> = all
            .iter()
            .map(|a| {
                let c = registry::capabilities(a);
                json!({
                    "name": a.name,
                    "about": a.about,
                    "env": a.env(),
                    "lifecycle": {
                        "create": a.lifecycle.create, "connect": a.lifecycle.connect,
                        "list": a.lifecycle.list, "destroy": a.lifecycle.destroy,
                        "labels": a.lifecycle.spec.labels,
                    },
                    "capabilities": {
                        "argv": delivery(c.argv), "stdin": delivery(c.stdin),
                        "workdir": delivery(c.workdir), "env": delivery(c.env),
                        "streaming": c.streaming, "remote_kill": c.remote_kill,
                        "binary_output": c.binary_output, "max_stdin": c.max_stdin,
                        "max_output": c.max_output,
                        "native_tools": c.native_tools.iter().map(|t| t.as_str()).collect::<Vec<_>>(),
                    }
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(&list).unwrap_or_default()
        );
        return ExitCode::SUCCESS;
    }
    let header = [
        "adapter", "argv", "stdin", "workdir", "env", "stream", "kill", "binary",
    ];
    println!("{}", text_line(header, "about"));
    for a in &all {
        println!("{}", text_line(cells(a), a.about));
        if !a.vars.is_empty() {
            println!("{:<11} configured by: {}", "", a.env().join(", "));
        }
    }
    ExitCode::SUCCESS
}

pub async fn emulate(args: EmulateArgs) -> ExitCode {
    let mut options = execseam_emulators::EmulatorOptions {
        listen: args.listen,
        token: args.token,
        ..Default::default()
    };
    for m in &args.mounts {
        match m.parse() {
            Ok(m) => options.sandboxing.mounts.push(m),
            Err(e) => {
                eprintln!("execseam: --mount {m}: {e}");
                return ExitCode::from(2);
            }
        }
    }
    options.sandboxing.state_dir.clone_from(&args.state_dir);
    let isolation = options.sandboxing.isolation;
    let mounts = options.sandboxing.mounts.clone();
    for rule in &args.faults {
        match rule.parse() {
            Ok(r) => options.faults.push(r),
            Err(e) => {
                eprintln!("execseam: --fault {rule}: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let chaos_rules = match crate::chaos::rules(&args.chaos, &[]) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("execseam: --chaos: {e}");
            return ExitCode::from(USAGE);
        }
    };
    // Behind the proxy, the emulator itself listens on a loopback port of its own.
    if !args.chaos.is_empty() {
        options.listen = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    }
    let emulator = match execseam_emulators::start(&args.provider, options).await {
        Ok(e) => e,
        Err(e) => {
            eprintln!("execseam: cannot start the {} emulator: {e}", args.provider);
            return ExitCode::from(INFRA_FAILURE);
        }
    };
    println!(
        "{} emulator listening on {}",
        emulator.provider, emulator.base_url
    );
    let mut env = emulator.env.clone();
    let proxy = if args.chaos.is_empty() {
        None
    } else {
        let proxy = match crate::chaos::start(args.listen, &emulator.base_url, chaos_rules).await {
            Ok(p) => p,
            Err(code) => return code,
        };
        // Every URL the client is given goes through the proxy (the emulators build the URLs
        // they hand out from `x-forwarded-host`, which the proxy sets).
        env = proxied_env(&env, &emulator.base_url, &proxy.base_url());
        crate::chaos::log_fired(&proxy);
        Some(proxy)
    };
    // What the sandboxes are, on every start (stdout: users read it; stderr too when degraded).
    println!("# {}", isolation.describe());
    for m in &mounts {
        println!(
            "# mounted into every sandbox: {} at {}{}",
            m.host.display(),
            m.sandbox,
            if m.read_only { " (read-only)" } else { "" }
        );
    }
    if isolation == execseam_emulators::Isolation::Translate {
        eprintln!("execseam: warning: {}", isolation.describe());
    }
    let ca_file = match &emulator.tls_ca_pem {
        Some(pem) => match write_ca_file(args.ca_file, args.state_dir, emulator.provider, pem) {
            Ok(written) => {
                println!(
                    "# its TLS endpoints (Modal's Tunnel.url) present a certificate made at start: in {} with this system's roots (SSL_CERT_FILE)",
                    written.0.display()
                );
                env.push(("SSL_CERT_FILE".into(), written.0.display().to_string()));
                Some(written)
            }
            Err(e) => {
                eprintln!("execseam: cannot write the TLS certificate: {e}");
                return ExitCode::from(INFRA_FAILURE);
            }
        },
        None => None,
    };
    println!(
        "# point an official SDK (or `execseam run --adapter {}`) at it:",
        emulator.provider
    );
    for (k, v) in &env {
        println!("export {k}={}", execseam_adapter_kit::degrade::quote(v));
    }
    let _ = std::io::stdout().flush();
    // Until interrupted or terminated; dropping the emulator removes its sandboxes.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
    }
    if let Some(p) = proxy {
        p.shutdown().await;
    }
    drop(emulator);
    if let Some((path, true)) = ca_file {
        let _ = std::fs::remove_file(path);
    }
    // Whatever still holds a sandbox (an open connection's task), kill and remove them all
    // before exiting: no process, mount or state directory is left behind.
    if !execseam_emulators::kit::sandbox::destroy_all(Duration::from_secs(10)).await {
        eprintln!("execseam: some sandboxes were still being torn down at exit");
    }
    ExitCode::SUCCESS
}

/// Writes `pem` followed by this system's root certificates (so that `SSL_CERT_FILE` naming it
/// adds a trust rather than replacing the system's) to `--ca-file`, else to a file of this
/// process beside the sandboxes' state; the path, and whether it is ours to remove at exit.
fn write_ca_file(
    ca_file: Option<std::path::PathBuf>,
    state_dir: Option<std::path::PathBuf>,
    provider: &str,
    pem: &str,
) -> std::io::Result<(std::path::PathBuf, bool)> {
    let (path, ours) = match ca_file {
        Some(p) => (p, false),
        None => {
            let dir = state_dir.unwrap_or_else(std::env::temp_dir);
            let name = format!("execseam-{provider}-{}-ca.pem", std::process::id());
            (dir.join(name), true)
        }
    };
    // The bundle Python's ssl and OpenSSL read by default on this system (Debian's, Red Hat's,
    // a BSD's), or the one SSL_CERT_FILE already names.
    let system = std::env::var_os("SSL_CERT_FILE")
        .map(std::path::PathBuf::from)
        .into_iter()
        .chain(
            [
                "/etc/ssl/certs/ca-certificates.crt",
                "/etc/pki/tls/certs/ca-bundle.crt",
                "/etc/ssl/cert.pem",
            ]
            .map(std::path::PathBuf::from),
        )
        .find_map(|p| std::fs::read_to_string(p).ok())
        .unwrap_or_default();
    std::fs::write(&path, format!("{}\n{system}", pem.trim_end()))?;
    Ok((path, ours))
}

/// `env` with every value that starts with the emulator's `base` URL pointed at `proxy` instead.
fn proxied_env(env: &[(String, String)], base: &str, proxy: &str) -> Vec<(String, String)> {
    env.iter()
        .map(|(k, v)| match v.strip_prefix(base) {
            Some(rest) if rest.is_empty() || rest.starts_with(['/', '?']) => {
                (k.clone(), format!("{proxy}{rest}"))
            }
            _ => (k.clone(), v.clone()),
        })
        .collect()
}

/// `--timeout`: a finite, non-negative number of seconds.
fn parse_timeout(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !v.is_finite() {
        return Err(format!("{s:?} is not a finite number of seconds"));
    }
    if v < 0.0 {
        return Err(format!("{s:?} is negative"));
    }
    Ok(v)
}

/// The deadline for `--timeout SECS`: none for 0, saturated (none) when too large to be one.
fn deadline_of(secs: f64) -> Option<Duration> {
    if secs <= 0.0 {
        return None;
    }
    Some(Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX))
}

#[cfg(test)]
mod timeout_tests {
    use super::*;

    #[test]
    fn proxied_env_points_every_url_of_the_emulator_at_the_proxy() {
        let env = [
            ("A_URL".to_owned(), "http://127.0.0.1:5/v1".to_owned()),
            ("B_URL".to_owned(), "http://127.0.0.1:5".to_owned()),
            ("KEY".to_owned(), "http://127.0.0.1:50".to_owned()),
            ("TOKEN".to_owned(), "secret".to_owned()),
        ];
        let got = proxied_env(&env, "http://127.0.0.1:5", "http://127.0.0.1:9");
        let v: Vec<&str> = got.iter().map(|(_, v)| v.as_str()).collect();
        // `:50` shares the prefix only textually: a different port is not the emulator.
        assert_eq!(
            v,
            [
                "http://127.0.0.1:9/v1",
                "http://127.0.0.1:9",
                "http://127.0.0.1:50",
                "secret"
            ]
        );
    }

    #[test]
    fn timeouts_are_finite_and_saturate() {
        for bad in ["inf", "-inf", "nan", "NaN", "-1", "x", ""] {
            assert!(parse_timeout(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(parse_timeout("1.5"), Ok(1.5));
        assert_eq!(deadline_of(0.0), None);
        assert_eq!(deadline_of(1.5), Some(Duration::from_millis(1500)));
        // 1e19 s is a Duration (the deadline layer saturates the instant); beyond it, none.
        assert_eq!(
            deadline_of(1e19),
            Some(Duration::from_secs(10_000_000_000_000_000_000))
        );
        for huge in [1e20, 1e30, f64::MAX] {
            assert_eq!(deadline_of(huge), Some(Duration::MAX), "{huge}");
        }
    }
}
