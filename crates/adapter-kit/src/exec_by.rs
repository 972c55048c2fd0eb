//! [`exec_by!`](crate::exec_by) and [`ChannelEvents`]: the `Exec` half of an adapter whose one
//! way to run a command is a stream (an inherent `async fn` answering an
//! [`EventStream`](execseam_core::EventStream)), written once.

use execseam_core::{BoxFuture, Error, Output};

/// What `Exec::exec` answers.
pub type Collected<'a> = BoxFuture<'a, Result<Output, Error>>;

/// Inside an `impl Exec for $ty` block: `exec` collects the [`EventStream`](execseam_core::EventStream)
/// of `$ty`'s inherent `$method(command)` (the output at the exit, or the error with what came
/// before it) in the [`exec_span!`](crate::exec_span) of the calling adapter, and `streaming`
/// answers `Some(self)` (the `ExecStream` impl is [`exec_stream_by!`](crate::exec_stream_by) or
/// the adapter's). `exec_by!(start)`.
#[macro_export]
macro_rules! exec_by {
    ($method:ident) => {
        fn exec(&self, command: ::execseam_core::Command) -> $crate::exec_by::Collected<'_> {
            $crate::exec_span!(
                ::execseam_core::Exec::provider(self),
                "exec",
                command,
                |command| { async move { self.$method(command).await?.collect().await } }
            )
        }

        fn streaming(&self) -> ::std::option::Option<&dyn ::execseam_core::ExecStream> {
            ::std::option::Option::Some(self)
        }
    };
}

#[cfg(feature = "spool")]
pub use channel::ChannelEvents;

#[cfg(feature = "spool")]
mod channel {
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use execseam_core::{Error, Event};
    use tokio::sync::mpsc;

    /// The events a task sends on a channel, as a stream: what an
    /// [`EventStream`](execseam_core::EventStream) is made of when the adapter's reader runs
    /// apart.
    #[derive(Debug)]
    pub struct ChannelEvents(pub mpsc::Receiver<Result<Event, Error>>);

    impl futures_util::Stream for ChannelEvents {
        type Item = Result<Event, Error>;
        fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
            self.0.poll_recv(cx)
        }
    }
}
