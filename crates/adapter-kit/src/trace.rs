//! The span every adapter's exec runs in.

use execseam_core::BoxFuture;

/// Runs `$run(command)` (a closure taking the [`Command`](execseam_core::Command)) in one
/// `exec` span that names the provider, the entry point (`"exec"` or `"exec_stream"`) and the
/// tool: never argv, env or stdin, which may hold secrets. A macro so that the span's target is
/// the calling adapter's module (what `RUST_LOG=execseam_e2b=debug` selects).
#[macro_export]
macro_rules! exec_span {
    ($provider:expr, $operation:literal, $command:expr, $run:expr $(,)?) => {{
        let command: $crate::__private::Command = $command;
        let span = $crate::__private::tracing::debug_span!(
            "exec",
            provider = $provider,
            operation = $operation,
            tool = %command.tool()
        );
        $crate::trace::instrumented(span, $crate::trace::run(command, $run))
    }};
}

/// `fut` in `span`, boxed: what [`exec_span!`](crate::exec_span) returns.
pub fn instrumented<'a, T>(
    span: tracing::Span,
    fut: impl Future<Output = T> + Send + 'a,
) -> BoxFuture<'a, T> {
    Box::pin(tracing::Instrument::instrument(fut, span))
}

/// `run(command)`: names the closure's argument type for [`exec_span!`](crate::exec_span).
pub fn run<R>(command: execseam_core::Command, run: impl FnOnce(execseam_core::Command) -> R) -> R {
    run(command)
}
