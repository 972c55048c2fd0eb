//! [`sandbox_fields!`](crate::sandbox_fields) and [`exec_stream_by!`](crate::exec_stream_by):
//! the parts of a sandbox handle's trait impls that only read a field or call one method,
//! written once.

/// Inside an `impl Sandbox for $ty` block: `id` and `ownership` answered from the handle's
/// fields (paths below `self`); `end` and the rest stay the adapter's.
/// `sandbox_fields!(id: inner.sandbox_id, ownership: inner.ownership)`.
#[macro_export]
macro_rules! sandbox_fields {
    (id: $($id:ident).+, ownership: $($ownership:ident).+ $(,)?) => {
        fn id(&self) -> &str {
            &self.$($id).+
        }

        fn ownership(&self) -> &::execseam_core::Ownership {
            &self.$($ownership).+
        }
    };
}

/// `impl ExecStream for $ty` whose `exec_stream` is `$ty`'s inherent `$method(command)` (an
/// `async fn` answering the [`EventStream`](execseam_core::EventStream)) in the
/// [`exec_span!`](crate::exec_span) of the calling adapter. `exec_stream_by!(MyExec: start)`.
#[macro_export]
macro_rules! exec_stream_by {
    ($ty:ty: $method:ident) => {
        impl ::execseam_core::ExecStream for $ty {
            fn exec_stream(
                &self,
                command: ::execseam_core::Command,
            ) -> ::execseam_core::BoxFuture<
                '_,
                ::std::result::Result<::execseam_core::EventStream, ::execseam_core::Error>,
            > {
                $crate::exec_span!(
                    ::execseam_core::Exec::provider(self),
                    "exec_stream",
                    command,
                    |command| { <$ty>::$method(self, command) }
                )
            }
        }
    };
}
