#![doc = include_str!("../README.md")]
//!
//! # Details
//!
//! `execseam`: run commands and builtin tools through any adapter, list adapters, run emulators.
//!
//! Exit status of `execseam run`: the command's own exit code; 128+n when it was killed by
//! signal n; **125** when the infrastructure failed (one typed line on stderr, or a JSON `error`
//! object with `--json`); **2** for a usage error (bad arguments, an unknown adapter, a
//! configuration that cannot work, found before any I/O); 130/143 when interrupted by
//! SIGINT/SIGTERM (the command is killed and what the run created is destroyed first). A command
//! that itself exits 125 is told apart by `--json`.

// Every `println!`/`print!` of this crate goes through `out::write` (these shadow std's): a
// closed stdout ends the process with 141 instead of a panic.
macro_rules! println {
    () => {
        $crate::out::write(format_args!(""), true)
    };
    ($($arg:tt)*) => {
        $crate::out::write(format_args!($($arg)*), true)
    };
}
macro_rules! print {
    ($($arg:tt)*) => {
        $crate::out::write(format_args!($($arg)*), false)
    };
}

mod chaos;
mod mcp;
mod mcp_stdio;
mod out;
mod process;
mod registry;
mod run;
mod sandbox;
mod shell;
mod tools;
mod unified_exec;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The status for an infrastructure failure.
pub const INFRA_FAILURE: u8 = 125;

#[derive(Parser)]
#[command(
    name = "execseam",
    version,
    about = "Run agent tools in any sandbox, through one strict seam"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run a command through an adapter (in `--sandbox ID`, or in a sandbox created for it and
    /// destroyed before exiting).
    Run(run::RunArgs),
    /// Create, connect to, list and destroy sandboxes.
    Sandbox(sandbox::SandboxArgs),
    /// Commands that outlive one call: start detached, list, logs from byte offsets, write
    /// stdin, signal, wait (docs/processes.md).
    Process(process::ProcessArgs),
    /// An interactive terminal in a sandbox (like `docker exec -it`): raw mode, window-size
    /// changes forwarded, the remote exit status as this one's; Ctrl-P Ctrl-Q detaches and
    /// `--attach HANDLE` comes back with the screen replayed (docs/processes.md).
    Shell(shell::ShellArgs),
    /// List every adapter with its capabilities.
    Adapters {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Print the README's markdown table.
        #[arg(long, conflicts_with = "json")]
        markdown: bool,
    },
    /// Run a provider emulator on loopback until interrupted.
    ///
    /// Each emulated sandbox is a real sandbox on this machine's kernel (not a VM): as root, its
    /// own pid, mount, UTS and IPC namespaces, a root filesystem that is an overlay over this
    /// host's / (writes stay in the sandbox; host homes, /tmp and the checkout are hidden), the
    /// provider's user and hostname; the network is the host's. Without root the emulator runs
    /// in a degraded mode (commands run directly on this host, paths translated) and says so.
    /// `--mount HOST:SANDBOX[:ro]` binds a host directory into every sandbox on purpose.
    Emulate(run::EmulateArgs),
    /// Run the chaos proxy in front of a plain-HTTP endpoint until interrupted: cut streams,
    /// stalls, resets, endless bodies by rule (docs/reliability.md).
    Chaos(chaos::ChaosArgs),
    /// Paths below the root matching a glob, sorted, truncated (builtin tool).
    Glob(tools::GlobArgs),
    /// Entries below a directory, sorted, truncated (builtin tool).
    List(tools::ListArgs),
    /// Lines matching a regular expression, sorted by path and line (builtin tool).
    Grep(tools::GrepArgs),
    /// Print a file, or a line or byte range of it (builtin tool).
    Read(tools::ReadArgs),
    /// Write stdin (or a file) to a path atomically (builtin tool).
    Write(tools::WriteArgs),
    /// Replace exact text in a file, atomically (builtin tool).
    Edit(tools::EditArgs),
    /// Apply a unified diff or a `*** Begin Patch` patch below the root, all or nothing (builtin
    /// tool).
    Patch(tools::PatchArgs),
    /// Run an exact Python, JavaScript, TypeScript or Bash program (builtin tool).
    Code(tools::CodeArgs),
    /// Serve Chrono's /execute and durable /executions contract over an adapter, on SQLite or
    /// PostgreSQL (docs/server.md).
    Serve(Box<execseam_server::ServeArgs>),
    /// Serve the builtin tools over the Model Context Protocol (stdio) on one sandbox, created at
    /// start (or attached with --sandbox) and destroyed at exit.
    Mcp(mcp::McpArgs),
}

/// Installs a subscriber honouring `RUST_LOG` (default `warn`), writing to stderr only: stdout
/// carries a command's output, JSON or the MCP protocol, never a log line.
///
/// `rmcp` is capped at `info` whatever `RUST_LOG` says: at `debug` and `trace` it logs whole
/// JSON-RPC messages, that is tool arguments (env values, stdin, file contents) and results
/// (`tests/secrets.rs` caught it).
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"))
        .add_directive("rmcp=info".parse().expect("a valid directive"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        // A span's close line carries its duration (time.busy, time.idle).
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE)
        .try_init();
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing();
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("execseam: cannot start a runtime: {e}");
            return ExitCode::from(INFRA_FAILURE);
        }
    };
    let code = rt.block_on(async move {
        let code = match cli.command {
            Cmd::Run(args) => run::run(args).await,
            Cmd::Sandbox(args) => sandbox::sandbox(args).await,
            Cmd::Process(args) => process::process(args).await,
            Cmd::Shell(args) => shell::shell(args).await,
            Cmd::Adapters { json, markdown } => run::adapters(json, markdown),
            Cmd::Emulate(args) => run::emulate(args).await,
            Cmd::Chaos(args) => chaos::chaos(args).await,
            Cmd::Glob(args) => tools::glob(args).await,
            Cmd::List(args) => tools::list(args).await,
            Cmd::Grep(args) => tools::grep(args).await,
            Cmd::Read(args) => tools::read(args).await,
            Cmd::Write(args) => tools::write(args).await,
            Cmd::Edit(args) => tools::edit(args).await,
            Cmd::Patch(args) => tools::patch(args).await,
            Cmd::Code(args) => tools::code(args).await,
            Cmd::Serve(args) => execseam_server::serve(*args).await,
            Cmd::Mcp(args) => mcp::mcp(args).await,
        };
        // The kills and deletes that dropped handles started (a deadline, a dropped stream, a
        // sandbox nobody closed) leave the host before the runtime ends (issue 38, D15).
        let drained = execseam_adapter_kit::reaper::drain(run::DRAIN).await;
        if !drained.clean() {
            eprintln!("execseam: clean-up at exit: {}", drained.describe());
        }
        code
    });
    // A pending read of stdin (the MCP transport) must not hold the exit.
    rt.shutdown_timeout(std::time::Duration::from_millis(200));
    code
}
