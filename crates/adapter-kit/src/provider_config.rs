//! [`provider_config!`](crate::provider_config): a provider's `from_env` and `config`, the two
//! associated functions every adapter's provider writes the same way, written once.

/// Inside an `impl $Provider` block whose `new($config) -> Result<Self, Error>` validates:
/// `from_env` (the configuration from the process environment, then `new`) and `config` (the
/// expression over the `self` named first).
/// `provider_config!(self => FlyConfig: self.client.config())`.
#[macro_export]
macro_rules! provider_config {
    ($this:ident => $config:ident: $value:expr) => {
        #[doc = ::std::concat!("[`", ::std::stringify!($config), "::from_env`], then [`new`](Self::new).")]
        pub fn from_env() -> ::std::result::Result<Self, ::execseam_core::Error> {
            Self::new($config::from_env()?)
        }

        /// The configuration.
        pub fn config(&$this) -> &$config {
            $value
        }
    };
}
