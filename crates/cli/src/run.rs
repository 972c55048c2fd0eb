//! `execseam run`, `execseam adapters`, `execseam emulate`.

use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use execseam_core::degrade::base64_encode;
use execseam_core::{Command, Delivery, Error, ErrorKind, Exec, Exit, Output, Retry, WireStatus};
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
    /// Kill the command after this many seconds (a host-side deadline).
    #[arg(long, value_name = "SECS")]
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
    match args.stdin.as_deref() {
        None => {}
        Some("-") => {
            let mut buf = Vec::new();
            std::io::stdin().read_to_end(&mut buf).map_err(|e| {
                Error::new(ErrorKind::InvalidCommand, format!("reading stdin: {e}"))
            })?;
            b = b.stdin(buf);
        }
        Some(path) => {
            let buf = std::fs::read(path).map_err(|e| {
                Error::new(ErrorKind::InvalidCommand, format!("--stdin {path}: {e}"))
            })?;
            b = b.stdin(buf);
        }
    }
    b.build()
}

pub async fn run(args: RunArgs) -> ExitCode {
    let result = run_inner(&args).await;
    match result {
        Ok(output) => {
            if args.json {
                println!("{}", output_json(&output));
            } else {
                let _ = std::io::stdout().write_all(&output.stdout);
                let _ = std::io::stderr().write_all(&output.stderr);
                let _ = std::io::stdout().flush();
            }
            ExitCode::from(output.exit.shell_status().clamp(0, 255) as u8)
        }
        Err(e) => {
            if args.json {
                println!("{}", json!({ "error": error_json(&e) }));
            } else {
                eprintln!("execseam: {e}");
            }
            ExitCode::from(INFRA_FAILURE)
        }
    }
}

async fn run_inner(args: &RunArgs) -> Result<Output, Error> {
    let cmd = build_command(args)?;
    let exec = registry::open(&args.adapter, args.sandbox.as_deref()).await?;
    match args.timeout {
        Some(secs) if secs > 0.0 => {
            exec.with_deadline(Duration::from_secs_f64(secs))
                .exec(cmd)
                .await
        }
        _ => exec.exec(cmd).await,
    }
}

fn bytes_json(prefix: &str, b: &[u8], obj: &mut serde_json::Map<String, Value>) {
    obj.insert(
        prefix.to_owned(),
        std::str::from_utf8(b).map_or(Value::Null, |s| Value::String(s.to_owned())),
    );
    obj.insert(format!("{prefix}_base64"), Value::String(base64_encode(b)));
}

fn exit_json(exit: Exit) -> Value {
    match exit {
        Exit::Code(c) => json!({ "code": c }),
        Exit::Signal(s) => json!({ "signal": s }),
    }
}

/// The result as JSON: `stdout`/`stderr` as strings when they are UTF-8 (NUL bytes included,
/// escaped by JSON), `null` otherwise, and always `stdout_base64`/`stderr_base64`.
pub fn output_json(o: &Output) -> Value {
    let mut obj = serde_json::Map::new();
    bytes_json("stdout", &o.stdout, &mut obj);
    bytes_json("stderr", &o.stderr, &mut obj);
    obj.insert("exit".into(), exit_json(o.exit));
    obj.insert(
        "ambiguous_kill".into(),
        Value::Bool(o.exit.is_ambiguous_kill()),
    );
    obj.insert(
        "truncated".into(),
        json!({ "stdout": o.truncated.stdout, "stderr": o.truncated.stderr }),
    );
    Value::Object(obj)
}

fn error_json(e: &Error) -> Value {
    let retry = match e.retry() {
        Retry::Never => json!({ "class": "never" }),
        Retry::Safe { after } => {
            json!({ "class": "safe", "after_ms": after.map(|d| d.as_millis() as u64) })
        }
        Retry::Unsafe => json!({ "class": "unsafe" }),
    };
    let status = match e.status() {
        Some(WireStatus::Http(s)) => json!({ "http": s }),
        Some(WireStatus::Grpc(c)) => json!({ "grpc": c }),
        Some(other) => json!({ "other": format!("{other:?}") }),
        None => Value::Null,
    };
    let partial = e.partial().map(|p| {
        let mut obj = serde_json::Map::new();
        bytes_json("stdout", &p.stdout, &mut obj);
        bytes_json("stderr", &p.stderr, &mut obj);
        Value::Object(obj)
    });
    json!({
        "kind": format!("{:?}", e.kind()),
        "retry": retry,
        "provider": e.provider(),
        "operation": e.operation(),
        "status": status,
        "code": e.code(),
        "message": e.message(),
        "display": e.to_string(),
        "partial": partial,
    })
}

fn delivery(d: Delivery) -> &'static str {
    match d {
        Delivery::Native => "native",
        Delivery::ShellWrapped => "shell-wrapped",
        Delivery::TempFile => "temp-file",
        Delivery::Unsupported => "unsupported",
    }
}

/// The README's adapter table (checked by `tests/readme.rs`).
pub fn markdown_table() -> String {
    let yn = |b: bool| if b { "yes" } else { "no" };
    let mut s = String::from(
        "| adapter | argv | stdin | workdir | env | streaming | remote kill | binary output |\n|---|---|---|---|---|---|---|---|\n",
    );
    for a in registry::all() {
        let c = registry::capabilities(&a);
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
            a.name,
            delivery(c.argv),
            delivery(c.stdin),
            delivery(c.workdir),
            delivery(c.env),
            yn(c.streaming),
            yn(c.remote_kill),
            yn(c.binary_output)
        ));
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
                let c = registry::capabilities(&a);
                json!({
                    "name": a.name,
                    "about": a.about,
                    "env": a.env,
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
    println!(
        "{:<11} {:<13} {:<13} {:<13} {:<13} {:<6} {:<5} {:<6} about",
        "adapter", "argv", "stdin", "workdir", "env", "stream", "kill", "binary"
    );
    for a in &all {
        let c = registry::capabilities(&a);
        let yn = |b: bool| if b { "yes" } else { "no" };
        println!(
            "{:<11} {:<13} {:<13} {:<13} {:<13} {:<6} {:<5} {:<6} {}",
            a.name,
            delivery(c.argv),
            delivery(c.stdin),
            delivery(c.workdir),
            delivery(c.env),
            yn(c.streaming),
            yn(c.remote_kill),
            yn(c.binary_output),
            a.about
        );
        if !a.env.is_empty() {
            println!("{:<11} configured by: {}", "", a.env.join(", "));
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
    for rule in &args.faults {
        match rule.parse() {
            Ok(r) => options.faults.push(r),
            Err(e) => {
                eprintln!("execseam: --fault {rule}: {e}");
                return ExitCode::from(2);
            }
        }
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
    println!(
        "# point an official SDK (or `execseam run --adapter {}`) at it:",
        emulator.provider
    );
    for (k, v) in &emulator.env {
        println!("export {k}={}", execseam_core::degrade::quote(v));
    }
    let _ = std::io::stdout().flush();
    // Until interrupted or terminated; dropping the emulator removes its sandboxes.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
    }
    drop(emulator);
    ExitCode::SUCCESS
}
