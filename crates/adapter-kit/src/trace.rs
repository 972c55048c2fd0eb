//! The span every adapter's exec runs in.

use std::future::Future;

use execseam_core::{BoxFuture, Command, Error};

/// Runs `run(command)` in one `exec` span that names the provider, the entry point
/// (`operation`: `"exec"` or `"exec_stream"`) and the tool: never argv, env or stdin, which may
/// hold secrets.
pub fn exec_span<'a, T, F>(
    provider: &str,
    operation: &'static str,
    command: Command,
    run: impl FnOnce(Command) -> F,
) -> BoxFuture<'a, Result<T, Error>>
where
    F: Future<Output = Result<T, Error>> + Send + 'a,
{
    let span = tracing::debug_span!("exec", provider, operation, tool = %command.tool());
    Box::pin(tracing::Instrument::instrument(run(command), span))
}
