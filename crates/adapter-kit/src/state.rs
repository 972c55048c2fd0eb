//! [`forward_snapshots!`](crate::forward_snapshots): the snapshot methods of
//! [`Provider`](execseam_core::Provider) written once, for a provider whose operations are
//! inherent `async fn`s.

/// Inside an `impl Provider for $ty` block: `snapshot`, `list_snapshots` and `delete_snapshot`,
/// each forwarded to the inherent `async fn` of `$ty` with the same name and arguments (boxing
/// the future). With `, no_list`, `list_snapshots` keeps the trait's default (`Unsupported`).
#[macro_export]
macro_rules! forward_snapshots {
    ($ty:ty $(, $no_list:ident)?) => {
        fn snapshot<'a>(
            &'a self,
            id: &'a str,
            request: ::execseam_core::SnapshotRequest,
        ) -> ::execseam_core::BoxFuture<'a, Result<::execseam_core::SnapshotOutcome, ::execseam_core::Error>> {
            Box::pin(<$ty>::snapshot(self, id, request))
        }

        fn delete_snapshot<'a>(
            &'a self,
            snapshot: &'a str,
        ) -> ::execseam_core::BoxFuture<'a, Result<(), ::execseam_core::Error>> {
            Box::pin(<$ty>::delete_snapshot(self, snapshot))
        }

        $crate::forward_snapshots!(@list $ty $(, $no_list)?);
    };
    (@list $ty:ty) => {
        fn list_snapshots<'a>(
            &'a self,
            source: Option<&'a str>,
        ) -> ::execseam_core::BoxFuture<'a, Result<Vec<::execseam_core::SnapshotInfo>, ::execseam_core::Error>> {
            Box::pin(<$ty>::list_snapshots(self, source))
        }
    };
    (@list $ty:ty, no_list) => {};
}
