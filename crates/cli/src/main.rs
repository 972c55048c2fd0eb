//! `execseam`: run commands and builtin tools through any adapter, list adapters, run emulators.
//!
//! Exit status of `execseam run`: the command's own exit code; 128+n when it was killed by
//! signal n; **125** when the infrastructure failed (one typed line on stderr, or a JSON `error`
//! object with `--json`); 2 for a usage error. A command that itself exits 125 is told apart by
//! `--json`.

mod registry;
mod run;

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
    /// Run a command through an adapter.
    Run(run::RunArgs),
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
    Emulate(run::EmulateArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
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
    rt.block_on(async move {
        match cli.command {
            Cmd::Run(args) => run::run(args).await,
            Cmd::Adapters { json, markdown } => run::adapters(json, markdown),
            Cmd::Emulate(args) => run::emulate(args).await,
        }
    })
}
