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
/// same name and arguments (boxing the future); the others keep the trait's default
/// (`Unsupported`). `forward_snapshots!(MyProvider: snapshot, list_snapshots)`.
#[macro_export]
macro_rules! forward_snapshots {
    ($ty:ty: $($method:ident),+ $(,)?) => {
        $( $crate::forward_snapshots!(@ $method $ty); )+
    };
    (@ snapshot $ty:ty) => {
        fn snapshot<'a>(
            &'a self,
            id: &'a str,
            request: ::execseam_core::SnapshotRequest,
        ) -> ::execseam_core::BoxFuture<'a, Result<::execseam_core::SnapshotOutcome, ::execseam_core::Error>> {
            Box::pin(<$ty>::snapshot(self, id, request))
        }
    };
    (@ restore $ty:ty) => {
        fn restore<'a>(
            &'a self,
            id: &'a str,
            snapshot: &'a str,
        ) -> ::execseam_core::BoxFuture<'a, Result<(), ::execseam_core::Error>> {
            Box::pin(<$ty>::restore(self, id, snapshot))
        }
    };
    (@ delete_snapshot $ty:ty) => {
        fn delete_snapshot<'a>(
            &'a self,
            snapshot: &'a str,
        ) -> ::execseam_core::BoxFuture<'a, Result<(), ::execseam_core::Error>> {
            Box::pin(<$ty>::delete_snapshot(self, snapshot))
        }
    };
    (@ list_snapshots $ty:ty) => {
        fn list_snapshots<'a>(
            &'a self,
            source: Option<&'a str>,
        ) -> ::execseam_core::BoxFuture<'a, Result<Vec<::execseam_core::SnapshotInfo>, ::execseam_core::Error>> {
            Box::pin(<$ty>::list_snapshots(self, source))
        }
    };
}
