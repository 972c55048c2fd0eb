//! [`AxProvider`]: guests by address (connect only).

use std::sync::Arc;

use execseam_core::{Error, ErrorKind, Provider};

use crate::config::{AxConfig, parse_endpoint};
use crate::exec::AxExec;
use crate::{LIFECYCLE, PROVIDER};

/// Connects to agent-substrate guests by address. AX tasks are declared elsewhere, so this
/// provider only connects: create, list and destroy are `Unsupported`.
///
/// | operation | what it does |
/// |---|---|
/// | [`connect`](Self::connect) | nothing on the wire: the id is the guest's address (`host:port`, `http://host:port` or a bare host, port 80), and the first call connects |
#[derive(Clone, Debug)]
pub struct AxProvider {
    config: Arc<AxConfig>,
}

impl AxProvider {
    /// A provider with this configuration (a malformed target actor is
    /// [`InvalidConfig`](execseam_core::ErrorKind::InvalidConfig)). No I/O.
    pub fn new(config: AxConfig) -> Result<AxProvider, Error> {
        config.validate()?;
        Ok(AxProvider {
            config: Arc::new(config),
        })
    }

    execseam_adapter_kit::provider_config!(self => AxConfig: &self.config);

    /// A handle on the guest at `address`; not owned (guests end with their task). An address
    /// that is not `host[:port]` or `http://host[:port]` names no guest: `NotFound`.
    pub async fn connect(&self, address: &str) -> Result<AxExec, Error> {
        self.attach(address)
    }

    /// [`connect`](Self::connect) without the `async`: it makes no request either way.
    pub fn attach(&self, address: &str) -> Result<AxExec, Error> {
        let endpoint = parse_endpoint(address).map_err(|m| {
            Error::new(
                ErrorKind::NotFound,
                format!("no guest can be addressed so: {m}"),
            )
            .with_provider(PROVIDER)
            .with_operation("connect")
        })?;
        Ok(AxExec::new(
            self.config.clone(),
            endpoint,
            address.to_owned(),
        ))
    }
}

impl Provider for AxProvider {
    execseam_adapter_kit::accessors!(
        self => provider: PROVIDER,
        capabilities: crate::CAPABILITIES,
        lifecycle: LIFECYCLE,
    );

    execseam_adapter_kit::forward_lifecycle!(AxProvider: connect, attach);
}
