//! [`forward_snapshots!`](crate::forward_snapshots): the snapshot methods of
//! [`Provider`](execseam_core::Provider) written once, for a provider whose operations are
//! inherent `async fn`s; [`declared_port`] for a provider whose ports are declared at create.

use execseam_core::{Error, ExposedPort};

/// `expose(id, port)` of a provider that opens only the ports declared at create: `port`'s
/// entry in `exposed` (what its list answered for `id`); a port not declared is
/// `InvalidConfig`.
pub fn declared_port(
    provider: &'static str,
    id: &str,
    port: u16,
    exposed: Vec<ExposedPort>,
) -> Result<ExposedPort, Error> {
    exposed.into_iter().find(|e| e.port == port).ok_or_else(|| {
        Error::invalid_config(format!(
            "port {port} of sandbox {id} is not exposed: {provider} exposes only the ports declared at create (SandboxSpec::with_port)"
        ))
        .with_provider(provider)
        .with_operation("expose")
    })
}

/// Inside an `impl Provider for $ty` block: each named method of `snapshot`, `restore`,
/// `list_snapshots` and `delete_snapshot` forwarded to the inherent `async fn` of `$ty` with the
/// same name and arguments (boxing the future), as
/// [`forward_lifecycle!`](crate::forward_lifecycle) does; the others keep the trait's default
/// (`Unsupported`). `forward_snapshots!(MyProvider: snapshot, list_snapshots)`.
#[macro_export]
macro_rules! forward_snapshots {
    ($ty:ty: $($method:ident),+ $(,)?) => {
        $crate::forward_lifecycle!($ty: $($method),+);
    };
}
