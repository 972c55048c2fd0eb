//! [`forward_lifecycle!`](crate::forward_lifecycle): the lifecycle methods of
//! [`Provider`](execseam_core::Provider) written once, for a provider whose operations are
//! inherent methods of the same name; [`accessors!`](crate::accessors): the one-expression
//! accessors of `Exec`, `Sandbox` and `Provider` (`provider`, `capabilities`, `lifecycle`, `id`,
//! `ownership`).

/// Inside an `impl Provider for $ty` block: each named lifecycle method forwarded to the
/// inherent method of `$ty` with the same name and arguments (an `async fn`, its future boxed;
/// `attach` is synchronous); `create`, `connect`, `attach` and `fork` box the sandbox they
/// return. The methods not named keep the trait's default (`Unsupported`).
/// `forward_lifecycle!(MyProvider: create, connect, attach, list, destroy)`.
#[macro_export]
macro_rules! forward_lifecycle {
    ($ty:ty: $($method:ident),+ $(,)?) => {
        $( $crate::forward_lifecycle!(@ $method $ty); )+
    };
    (@ create $ty:ty) => {
        fn create(
            &self,
            spec: ::execseam_core::SandboxSpec,
        ) -> ::execseam_core::BoxFuture<'_, Result<Box<dyn ::execseam_core::Sandbox>, ::execseam_core::Error>> {
            Box::pin(async move { Ok(Box::new(<$ty>::create(self, spec).await?) as _) })
        }
    };
    (@ attach $ty:ty) => {
        fn attach(
            &self,
            id: &str,
        ) -> Result<Box<dyn ::execseam_core::Sandbox>, ::execseam_core::Error> {
            Ok(Box::new(<$ty>::attach(self, id)?))
        }
    };
    (@ connect $ty:ty) => { $crate::forward_lifecycle!(@ sandbox $ty, connect); };
    (@ fork $ty:ty) => { $crate::forward_lifecycle!(@ sandbox $ty, fork); };
    (@ list $ty:ty) => {
        $crate::forward_lifecycle!(@ $ty, list(filter: &'a ::execseam_core::ListFilter) -> Vec<::execseam_core::SandboxInfo>);
    };
    (@ destroy $ty:ty) => { $crate::forward_lifecycle!(@ $ty, destroy(id: &'a str) -> ()); };
    (@ pause $ty:ty) => {
        $crate::forward_lifecycle!(@ $ty, pause(id: &'a str, keep: Option<::execseam_core::Kept>) -> ::execseam_core::SandboxState);
    };
    (@ resume $ty:ty) => { $crate::forward_lifecycle!(@ $ty, resume(id: &'a str) -> ()); };
    (@ snapshot $ty:ty) => {
        $crate::forward_lifecycle!(@ $ty, snapshot(id: &'a str, request: ::execseam_core::SnapshotRequest) -> ::execseam_core::SnapshotOutcome);
    };
    (@ restore $ty:ty) => {
        $crate::forward_lifecycle!(@ $ty, restore(id: &'a str, snapshot: &'a str) -> ());
    };
    (@ list_snapshots $ty:ty) => {
        $crate::forward_lifecycle!(@ $ty, list_snapshots(source: Option<&'a str>) -> Vec<::execseam_core::SnapshotInfo>);
    };
    (@ delete_snapshot $ty:ty) => {
        $crate::forward_lifecycle!(@ $ty, delete_snapshot(snapshot: &'a str) -> ());
    };
    (@ expose $ty:ty) => {
        $crate::forward_lifecycle!(@ $ty, expose(id: &'a str, port: u16) -> ::execseam_core::ExposedPort);
    };
    (@ exposed $ty:ty) => {
        $crate::forward_lifecycle!(@ $ty, exposed(id: &'a str) -> Vec<::execseam_core::ExposedPort>);
    };
    (@ unexpose $ty:ty) => {
        $crate::forward_lifecycle!(@ $ty, unexpose(id: &'a str, port: u16) -> ());
    };
    // An operation on a sandbox id that answers a new handle to box.
    (@ sandbox $ty:ty, $method:ident) => {
        fn $method<'a>(
            &'a self,
            id: &'a str,
        ) -> ::execseam_core::BoxFuture<'a, Result<Box<dyn ::execseam_core::Sandbox>, ::execseam_core::Error>> {
            Box::pin(async move { Ok(Box::new(<$ty>::$method(self, id).await?) as _) })
        }
    };
    // Any other operation: the inherent `async fn`'s future, boxed.
    (@ $ty:ty, $method:ident($($arg:ident: $arg_ty:ty),*) -> $out:ty) => {
        fn $method<'a>(
            &'a self,
            $($arg: $arg_ty),*
        ) -> ::execseam_core::BoxFuture<'a, Result<$out, ::execseam_core::Error>> {
            Box::pin(<$ty>::$method(self, $($arg),*))
        }
    };
}

/// Inside an `impl` of [`Exec`](execseam_core::Exec), [`Sandbox`](execseam_core::Sandbox) or
/// [`Provider`](execseam_core::Provider): the accessors every adapter writes, each from an
/// expression over the `self` named first. Keys: `provider` (`&str`), `capabilities`,
/// `lifecycle`, `id` (`&str`), `ownership` (`&Ownership`), in any order:
/// `accessors!(self => provider: PROVIDER, capabilities: CAPABILITIES)`,
/// `accessors!(self => id: &self.inner.id, ownership: &self.inner.ownership)`.
#[macro_export]
macro_rules! accessors {
    ($this:ident => $($key:ident: $value:expr),+ $(,)?) => {
        $( $crate::accessors!(@ $this $key $value); )+
    };
    (@ $this:ident provider $value:expr) => {
        fn provider(&$this) -> &str {
            $value
        }
    };
    (@ $this:ident capabilities $value:expr) => {
        fn capabilities(&$this) -> ::execseam_core::Capabilities {
            $value
        }
    };
    (@ $this:ident lifecycle $value:expr) => {
        fn lifecycle(&$this) -> ::execseam_core::LifecycleCapabilities {
            $value
        }
    };
    (@ $this:ident id $value:expr) => {
        fn id(&$this) -> &str {
            $value
        }
    };
    (@ $this:ident ownership $value:expr) => {
        fn ownership(&$this) -> &::execseam_core::Ownership {
            $value
        }
    };
}
