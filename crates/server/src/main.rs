#![doc = include_str!("../README.md")]
//!
//! The `execseam-server` binary: `execseam-server serve …` is `execseam serve …`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "execseam-server",
    about = "The Chrono contract served over any execseam adapter"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve /execute and /executions.
    Serve(Box<execseam_server::ServeArgs>),
    /// Print the hash of the token read from stdin (for the --tokens file).
    HashToken,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    match cli.cmd {
        Cmd::HashToken => execseam_server::hash_token_stdin(),
        Cmd::Serve(args) => match tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt.block_on(execseam_server::serve(*args)),
            Err(e) => {
                eprintln!("execseam serve: {e}");
                ExitCode::FAILURE
            }
        },
    }
}
