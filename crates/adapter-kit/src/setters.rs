//! Builder setters for configuration types, written once.

/// Builder setters (`#[must_use] pub fn field(mut self, value) -> Self`) for fields of the
/// same name, each with its own docs. A field's entry says how the value is stored:
///
/// - `name: T` stores the `T` as given;
/// - `name: into T` takes `impl Into<T>`;
/// - `name: some T` stores `Some(value)` in an `Option<T>`;
/// - `name: some into T` takes `impl Into<T>` and stores `Some(value.into())`;
/// - `name: T => .method(args)` stores `value.method(args)` (a floor: `=> .max(1)`).
///
/// ```
/// use std::time::Duration;
///
/// #[derive(Default)]
/// pub struct Config {
///     host: String,
///     user: Option<String>,
///     limit: Option<u64>,
///     chunk: usize,
///     timeout: Duration,
/// }
///
/// impl Config {
///     execseam_adapter_kit::setters! {
///         /// The host.
///         host: into String,
///         /// The user commands run as.
///         user: some into String,
///         /// A limit.
///         limit: some u64,
///         /// At least one byte.
///         chunk: usize => .max(1),
///         /// The request timeout.
///         timeout: Duration,
///     }
/// }
///
/// let c = Config::default().host("h").user("u").limit(3).chunk(0).timeout(Duration::ZERO);
/// assert_eq!((c.host.as_str(), c.user.as_deref(), c.limit, c.chunk), ("h", Some("u"), Some(3), 1));
/// ```
#[macro_export]
macro_rules! setters {
    () => {};
    ($(#[$doc:meta])* $name:ident: some into $ty:ty $(, $($rest:tt)*)?) => {
        $(#[$doc])*
        #[must_use]
        pub fn $name(mut self, value: impl Into<$ty>) -> Self {
            self.$name = Some(value.into());
            self
        }
        $crate::setters!($($($rest)*)?);
    };
    ($(#[$doc:meta])* $name:ident: some $ty:ty $(, $($rest:tt)*)?) => {
        $(#[$doc])*
        #[must_use]
        pub fn $name(mut self, value: $ty) -> Self {
            self.$name = Some(value);
            self
        }
        $crate::setters!($($($rest)*)?);
    };
    ($(#[$doc:meta])* $name:ident: into $ty:ty $(, $($rest:tt)*)?) => {
        $(#[$doc])*
        #[must_use]
        pub fn $name(mut self, value: impl Into<$ty>) -> Self {
            self.$name = value.into();
            self
        }
        $crate::setters!($($($rest)*)?);
    };
    ($(#[$doc:meta])* $name:ident: $ty:ty => .$method:ident($($arg:tt)*) $(, $($rest:tt)*)?) => {
        $(#[$doc])*
        #[must_use]
        pub fn $name(mut self, value: $ty) -> Self {
            self.$name = value.$method($($arg)*);
            self
        }
        $crate::setters!($($($rest)*)?);
    };
    ($(#[$doc:meta])* $name:ident: $ty:ty $(, $($rest:tt)*)?) => {
        $(#[$doc])*
        #[must_use]
        pub fn $name(mut self, value: $ty) -> Self {
            self.$name = value;
            self
        }
        $crate::setters!($($($rest)*)?);
    };
}
