//! [`forward_processes!`](crate::forward_processes): the [`Processes`](execseam_core::Processes)
//! impl written once, for any type whose operations are inherent `async fn`s.

/// Implements [`Processes`](execseam_core::Processes) for `$ty` by forwarding each method to an
/// inherent method of `$ty` (boxing the futures): `caps()`, `handle_of(key)`, `start_one(request)`,
/// `read_at(handle, from)`, `attach_at(handle, from)`, `write_at(handle, write)`,
/// `send(handle, signal)`, `wait_for(handle, within)`, `status_of(handle)`, `list_all()`,
/// `release_one(handle)`, and with `, resize` also `resize_to(handle, size)` (without it, the
/// trait's default: `Unsupported`). The futures must be `Send`.
#[macro_export]
macro_rules! forward_processes {
    ($ty:ty $(, $resize:ident)?) => {
        impl ::execseam_core::Processes for $ty {
            fn process_capabilities(&self) -> ::execseam_core::ProcessCapabilities {
                self.caps()
            }

            fn handle_for(&self, key: &::execseam_core::StartKey) -> ::execseam_core::ProcessHandle {
                self.handle_of(key)
            }

            fn start(
                &self,
                request: ::execseam_core::StartRequest,
            ) -> ::execseam_core::BoxFuture<'_, Result<::execseam_core::Started, ::execseam_core::Error>> {
                Box::pin(self.start_one(request))
            }

            fn read<'s>(
                &'s self,
                handle: &'s ::execseam_core::ProcessHandle,
                from: ::execseam_core::StreamOffsets,
            ) -> ::execseam_core::BoxFuture<'s, Result<::execseam_core::ProcessRead, ::execseam_core::Error>> {
                Box::pin(self.read_at(handle, from))
            }

            fn attach<'s>(
                &'s self,
                handle: &'s ::execseam_core::ProcessHandle,
                from: ::execseam_core::StreamOffsets,
            ) -> ::execseam_core::BoxFuture<'s, Result<::execseam_core::ProcessStream<'s>, ::execseam_core::Error>> {
                Box::pin(self.attach_at(handle, from))
            }

            fn write_stdin<'s>(
                &'s self,
                handle: &'s ::execseam_core::ProcessHandle,
                write: ::execseam_core::StdinWrite,
            ) -> ::execseam_core::BoxFuture<'s, Result<::execseam_core::StdinState, ::execseam_core::Error>> {
                Box::pin(self.write_at(handle, write))
            }

            fn signal<'s>(
                &'s self,
                handle: &'s ::execseam_core::ProcessHandle,
                signal: ::execseam_core::Signal,
            ) -> ::execseam_core::BoxFuture<'s, Result<(), ::execseam_core::Error>> {
                Box::pin(self.send(handle, signal))
            }

            fn wait<'s>(
                &'s self,
                handle: &'s ::execseam_core::ProcessHandle,
                within: ::std::time::Duration,
            ) -> ::execseam_core::BoxFuture<'s, Result<::execseam_core::Waited, ::execseam_core::Error>> {
                Box::pin(self.wait_for(handle, within))
            }

            fn status<'s>(
                &'s self,
                handle: &'s ::execseam_core::ProcessHandle,
            ) -> ::execseam_core::BoxFuture<'s, Result<::execseam_core::ProcessInfo, ::execseam_core::Error>> {
                Box::pin(self.status_of(handle))
            }

            fn list(
                &self,
            ) -> ::execseam_core::BoxFuture<'_, Result<Vec<::execseam_core::ProcessInfo>, ::execseam_core::Error>> {
                Box::pin(self.list_all())
            }

            fn release<'s>(
                &'s self,
                handle: &'s ::execseam_core::ProcessHandle,
            ) -> ::execseam_core::BoxFuture<'s, Result<(), ::execseam_core::Error>> {
                Box::pin(self.release_one(handle))
            }

            $(
                fn $resize<'s>(
                    &'s self,
                    handle: &'s ::execseam_core::ProcessHandle,
                    size: ::execseam_core::TerminalSize,
                ) -> ::execseam_core::BoxFuture<'s, Result<(), ::execseam_core::Error>> {
                    Box::pin(self.resize_to(handle, size))
                }
            )?
        }
    };
}
