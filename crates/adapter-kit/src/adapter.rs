//! [`Adapter`]: the shape of an adapter crate, as a type. Every adapter crate has one unit type
//! implementing it (`execseam_fly::Fly`); the `execseam` facade's registry is a list of those
//! types, and the conformance harness builds targets from them.

use std::fmt;

use execseam_core::{Capabilities, Error, LifecycleCapabilities, Provider};

use crate::vars::{Var, Vars};

/// One adapter: its name, its configuration variables, what it can do, and how its provider is
/// built. Everything here is synchronous and does no I/O (a provider over gRPC makes its channel
/// lazily, but on the current Tokio runtime: build providers inside one); the first I/O is a
/// call on the provider (or on a handle from [`Provider::attach`]).
///
/// A capability the next adapters all need (process handles, snapshots, terminals) is added here
/// or on the contract's traits once, with a default, and overridden only by the adapters whose
/// provider differs.
pub trait Adapter: Send + Sync + 'static {
    /// The short name (`"e2b"`): the registry's key, the provider name in every error.
    const NAME: &'static str;
    /// One line for listings.
    const ABOUT: &'static str;
    /// The configuration variables [`config`](Adapter::config) reads.
    const VARS: &'static [Var];
    /// What its sandboxes can do with the default configuration.
    const CAPABILITIES: Capabilities;
    /// Which lifecycle operations it has with the default configuration.
    const LIFECYCLE: LifecycleCapabilities;
    /// How a create whose answer was lost is found, or why nothing can be lost (issue 38,
    /// D17): by the kit's create tag unless the adapter says otherwise.
    const LOST_CREATE: crate::guard::LostCreate = crate::guard::LostCreate::Tagged;

    /// The configuration (`Debug` never shows a secret).
    type Config: Clone + fmt::Debug + Send + Sync + 'static;
    /// The provider built from it.
    type Provider: Provider + 'static;

    /// The configuration from variables. A missing or malformed one is
    /// [`InvalidConfig`](execseam_core::ErrorKind::InvalidConfig).
    fn config(vars: &Vars<'_>) -> Result<Self::Config, Error>;

    /// What sandboxes do with `config` (default: [`CAPABILITIES`](Adapter::CAPABILITIES)).
    fn capabilities(config: &Self::Config) -> Capabilities {
        let _ = config;
        Self::CAPABILITIES
    }

    /// Which lifecycle operations `config` gives (default: [`LIFECYCLE`](Adapter::LIFECYCLE)).
    fn lifecycle(config: &Self::Config) -> LifecycleCapabilities {
        let _ = config;
        Self::LIFECYCLE
    }

    /// The provider for `config`; what is wrong in it is
    /// [`InvalidConfig`](execseam_core::ErrorKind::InvalidConfig).
    fn provider(config: Self::Config) -> Result<Self::Provider, Error>;

    /// The configuration from `get` (a map, the environment, …).
    fn config_from(get: &dyn Fn(&str) -> Option<String>) -> Result<Self::Config, Error> {
        Self::config(&Vars::new(Self::NAME, Self::VARS, get))
    }

    /// The provider configured from `get`.
    fn provider_from(get: &dyn Fn(&str) -> Option<String>) -> Result<Self::Provider, Error> {
        Self::provider(Self::config_from(get)?)
    }

    /// The provider configured from this process's environment.
    fn provider_from_env() -> Result<Self::Provider, Error> {
        Self::provider_from(&crate::vars::env)
    }
}

/// Declares an adapter crate's unit type and its [`Adapter`] implementation from the crate's
/// `PROVIDER`, `VARS`, `CAPABILITIES` and `LIFECYCLE` constants: the configuration from
/// `<Config>::from_vars(vars)` (or the function after `=>`), the provider from
/// `<Provider>::new(config)`. Methods after the struct go into the impl: `capabilities` or
/// `lifecycle` where the configuration changes them.
///
/// ```text
/// execseam_adapter_kit::adapter! {
///     /// The adapter (see [`Adapter`]): what the `execseam` facade's registry lists.
///     pub struct Fly {
///         about: "Fly Machines through the Machines API exec endpoint",
///         config: FlyConfig,
///         provider: FlyProvider,
///     }
///
///     fn capabilities(config: &FlyConfig) -> Capabilities {
///         FlyExec::capabilities_of(config)
///     }
/// }
/// ```
#[macro_export]
macro_rules! adapter {
    (
        $(#[$attr:meta])*
        $vis:vis struct $name:ident {
            about: $about:expr,
            config: $config:ty,
            provider: $provider:ty $(,)?
        }
        $($method:tt)*
    ) => {
        $crate::adapter! {
            $(#[$attr])*
            $vis struct $name {
                about: $about,
                config: $config => <$config>::from_vars,
                provider: $provider,
            }
            $($method)*
        }
    };
    (
        $(#[$attr:meta])*
        $vis:vis struct $name:ident {
            about: $about:expr,
            config: $config:ty => $from_vars:expr,
            provider: $provider:ty $(,)?
        }
        $($method:tt)*
    ) => {
        $(#[$attr])*
        #[derive(Clone, Copy, Debug, Default)]
        $vis struct $name;

        impl $crate::Adapter for $name {
            const NAME: &'static str = PROVIDER;
            const ABOUT: &'static str = $about;
            const VARS: &'static [$crate::Var] = VARS;
            const CAPABILITIES: $crate::__private::Capabilities = CAPABILITIES;
            const LIFECYCLE: $crate::__private::LifecycleCapabilities = LIFECYCLE;

            type Config = $config;
            type Provider = $provider;

            fn config(
                vars: &$crate::Vars<'_>,
            ) -> ::std::result::Result<$config, $crate::__private::Error> {
                let from_vars: fn(&$crate::Vars<'_>) -> ::std::result::Result<$config, $crate::__private::Error> = $from_vars;
                from_vars(vars)
            }

            fn provider(
                config: $config,
            ) -> ::std::result::Result<$provider, $crate::__private::Error> {
                <$provider>::new(config)
            }

            $($method)*
        }
    };
}
