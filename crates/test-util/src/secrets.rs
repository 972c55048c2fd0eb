//! The planted secrets of the adapters' "no secret reaches any log" tests, and the command
//! that carries them through an exec both ways.

use execseam_core::{Command, Exec, Output};
use execseam_emulator_kit::{Emulator, EmulatorOptions, Provider};

use crate::capture::Captured;

/// An adapter's token and the env value, stdin and output a test plants, each named after the
/// adapter so a hit says whose it is.
#[derive(Debug, Clone)]
pub struct Planted {
    /// The API token the adapter sends.
    pub token: &'static str,
    /// The command's env value (`S`).
    pub env: String,
    /// The command's stdin.
    pub stdin: String,
    /// What the command prints to stderr (from its argv).
    pub output: String,
}

impl Planted {
    /// The secrets of `adapter`'s test, with its `token`.
    pub fn new(adapter: &str, token: &'static str) -> Planted {
        Planted {
            token,
            env: format!("s3cr3t-env-value-{adapter}"),
            stdin: format!("s3cr3t-stdin-bytes-{adapter}"),
            output: format!("s3cr3t-output-text-{adapter}"),
        }
    }

    /// Installs the capture of every log record ([`crate::capture::install`]) and plants
    /// `adapter`'s secrets with its `token`: the capture, then the secrets.
    pub fn capture(adapter: &str, token: &'static str) -> (Captured, Planted) {
        (crate::capture::install(), Planted::new(adapter, token))
    }

    /// An emulator's options whose API token is the planted token.
    pub fn emulator_options(&self) -> EmulatorOptions {
        EmulatorOptions {
            token: Some(self.token.into()),
            ..EmulatorOptions::default()
        }
    }

    /// A command that copies its stdin to stdout, then prints its env value `S` to stdout and
    /// its first argument (the output secret) to stderr.
    pub fn command(&self) -> Command {
        Command::builder([
            "sh",
            "-c",
            "cat; printf '%s' \"$S\"; printf '%s' \"$1\" >&2",
            "sh",
            self.output.as_str(),
        ])
        .env("S", &self.env)
        .stdin(self.stdin.as_bytes().to_vec())
        .build()
        .expect("a valid command")
    }

    /// Runs [`Planted::command`] through `exec`, then through its stream where it streams:
    /// the exec's output (its stdout starts with the stdin) and the stream's, collected.
    pub async fn run_both_ways<E: Exec + ?Sized>(&self, exec: &E) -> (Output, Option<Output>) {
        let out = exec.exec(self.command()).await.expect("the exec");
        assert!(out.stdout.starts_with(self.stdin.as_bytes()), "{out:?}");
        let streamed = match exec.streaming() {
            Some(s) => Some(
                s.exec_stream(self.command())
                    .await
                    .expect("the stream")
                    .collect()
                    .await
                    .expect("the streamed output"),
            ),
            None => None,
        };
        (out, streamed)
    }

    /// Asserts `out` is exactly what [`Planted::command`] prints: the stdin and the env value on
    /// stdout, the output secret on stderr.
    pub fn assert_exact(&self, out: &Output) {
        assert_eq!(
            out.stdout,
            format!("{}{}", self.stdin, self.env).as_bytes(),
            "{out:?}"
        );
        assert_eq!(out.stderr, self.output.as_bytes(), "{out:?}");
    }

    /// The token, env value, stdin and output, with `more` (a file's content, …).
    pub fn all<'a>(&'a self, more: &[&'a str]) -> Vec<&'a str> {
        let mut all = vec![self.token, &self.env, &self.stdin, &self.output];
        all.extend_from_slice(more);
        all
    }
}

/// The capture installed and `adapter`'s secrets planted ([`Planted::capture`]), and the
/// provider's emulator started with the planted token: the capture, the secrets, the emulator.
pub async fn start<P: Provider>(
    adapter: &str,
    token: &'static str,
) -> (Captured, Planted, Emulator<P>) {
    let (log, planted) = Planted::capture(adapter, token);
    let emu = Emulator::<P>::start(planted.emulator_options())
        .await
        .expect("the emulator starts");
    assert_eq!(emu.token(), token);
    (log, planted, emu)
}

/// Panics with the line where any of `secrets` reached `log` (as text, hex or base64), or when
/// `log` holds nothing (a capture that saw no record proves nothing).
pub fn assert_not_logged(log: &Captured, secrets: &[&str]) {
    assert!(!log.is_empty(), "the capture sees records");
    for secret in secrets {
        if let Some(line) = log.find(secret.as_bytes()) {
            panic!("{secret:?} reached a log: {line}");
        }
    }
}
