//! [`entry_setters!`](crate::entry_setters): builder setters that add one entry to a map.

/// Builder setters (`#[must_use] pub fn name(mut self, key, value) -> Self`) that insert
/// `key`/`value` (each `impl Into<String>`) into a map field, each with its own docs:
/// `name => field` (a later value for the same key replaces the earlier one). The field is
/// anything with `insert(String, String)`: a `BTreeMap<String, String>`, or a
/// [`SecretEnv`](crate::secret_env::SecretEnv).
///
/// ```
/// use std::collections::BTreeMap;
///
/// #[derive(Default)]
/// pub struct Config {
///     labels: BTreeMap<String, String>,
/// }
///
/// impl Config {
///     execseam_adapter_kit::entry_setters! {
///         /// A label of new sandboxes.
///         label => labels,
///     }
/// }
///
/// let c = Config::default().label("team", "a").label("team", "b");
/// assert_eq!(c.labels["team"], "b");
/// ```
#[macro_export]
macro_rules! entry_setters {
    () => {};
    ($(#[$doc:meta])* $name:ident => $field:ident $(, $($rest:tt)*)?) => {
        $(#[$doc])*
        #[must_use]
        pub fn $name(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
            self.$field.insert(key.into(), value.into());
            self
        }
        $crate::entry_setters!($($($rest)*)?);
    };
}
