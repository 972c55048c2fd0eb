//! The HTTP calls: exec, get, start, wait.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use execseam_core::{Error, ErrorKind};
use reqwest::{Method, RequestBuilder};
use secrecy::ExposeSecret;

use execseam_adapter_kit::http::{self, ClientOptions, Refusal};
use execseam_adapter_kit::retry::Call;

use crate::config::FlyConfig;
use crate::error::{CREATE, EXEC, control, from_status};
use crate::wire::{Machine, MachineExecRequest, WaitResponse};

/// The most of a machine or lease answer read.
const MAX_JSON_BODY: usize = 4 << 20;

/// A Machines API client for one app (and one machine for the machine calls). reqwest's own retries are disabled: an exec POST that
/// may have reached the machine is never sent twice (fly-go's transport would re-send it on
/// 502/503; this one does not).
#[derive(Clone, Debug)]
pub(crate) struct Client {
    http: reqwest::Client,
    config: Arc<FlyConfig>,
    machine: String,
}

/// Percent-encodes one path segment (app names and machine ids are plain, but never trust that).
fn segment(s: &str) -> String {
    execseam_adapter_kit::text::escape_path_segment(s)
}

impl Client {
    pub(crate) fn new(config: Arc<FlyConfig>) -> Result<Client, Error> {
        let http = http::client(crate::PROVIDER, ClientOptions::new(config.connect_timeout))?;
        Ok(Client {
            http,
            config,
            machine: String::new(),
        })
    }

    /// The same client for machine `id`.
    pub(crate) fn for_machine(&self, id: &str) -> Client {
        Client {
            http: self.http.clone(),
            config: self.config.clone(),
            machine: id.to_owned(),
        }
    }

    pub(crate) fn config(&self) -> &FlyConfig {
        &self.config
    }

    pub(crate) fn machine_id(&self) -> &str {
        &self.machine
    }

    fn app_url(&self) -> String {
        format!(
            "{}/v1/apps/{}/machines",
            self.config.base_url,
            segment(&self.config.app)
        )
    }

    fn url(&self, suffix: &str) -> String {
        format!("{}/{}{suffix}", self.app_url(), segment(&self.machine))
    }

    fn request(&self, method: Method, suffix: &str) -> RequestBuilder {
        self.request_to(method, self.url(suffix))
    }

    fn request_to(&self, method: Method, url: String) -> RequestBuilder {
        let mut r = self
            .http
            .request(method, url)
            .header(reqwest::header::AUTHORIZATION, self.config.authorization());
        if let Some(nonce) = &self.config.lease_nonce {
            r = r.header("fly-machine-lease-nonce", nonce.expose_secret());
        }
        r
    }

    /// Sends a request that must be answered within `timeout` (body included) and returns the
    /// body of a 2xx answer, bounded: an exec answer holds at most max_output per stream,
    /// JSON-escaped (up to six bytes per byte); anything else is small. Any other answer is
    /// mapped to an error.
    async fn send(
        &self,
        req: RequestBuilder,
        call: Call,
        timeout: Duration,
    ) -> Result<Bytes, Error> {
        let resp = req
            .timeout(timeout)
            .send()
            .await
            .map_err(|e| http::transport_error(call, e))?;
        if !resp.status().is_success() {
            let r = Refusal::read(resp, timeout).await;
            return Err(from_status(r.status, &r.headers, &r.body, call));
        }
        let limit = if call == EXEC {
            self.config.max_answer_bytes
        } else {
            MAX_JSON_BODY.min(self.config.max_answer_bytes)
        };
        http::read_body(resp, limit, timeout)
            .await
            .map_err(|e| e.into_error(call))
    }

    /// `POST …/exec`: the raw body of the 200 answer.
    pub(crate) async fn exec(&self, body: &MachineExecRequest) -> Result<Bytes, Error> {
        let json = serde_json::to_vec(body).map_err(|e| {
            EXEC.error(
                ErrorKind::InvalidCommand,
                format!("cannot encode the request: {e}"),
            )
        })?;
        let req = self
            .request(Method::POST, "/exec")
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(json);
        self.send(
            req,
            EXEC,
            self.config.exec_timeout + self.config.request_slack,
        )
        .await
    }

    /// `GET …/{id}`.
    pub(crate) async fn machine(&self) -> Result<Machine, Error> {
        let call = control("get_machine");
        let req = self.request(Method::GET, "");
        let body = self.send(req, call, Duration::from_secs(30)).await?;
        serde_json::from_slice(&body).map_err(|e| {
            Error::protocol(format!("the machine is not valid JSON: {e}"))
                .with_provider(crate::PROVIDER)
                .with_operation("get_machine")
        })
    }

    /// `POST /v1/apps/{app}/machines`: creates (and starts) a machine.
    pub(crate) async fn create_machine(
        &self,
        body: &crate::wire::CreateMachine,
    ) -> Result<Machine, Error> {
        let call = CREATE;
        let json = serde_json::to_vec(body)
            .map_err(|e| call.invalid_config(format!("cannot encode the request: {e}")))?;
        let req = self
            .request_to(Method::POST, self.app_url())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(json);
        let body = self.send(req, call, self.config.create_timeout).await?;
        parse(&body, "create")
    }

    /// `GET /v1/apps/{app}/machines`.
    pub(crate) async fn list_machines(&self) -> Result<Vec<Machine>, Error> {
        let req = self.request_to(Method::GET, self.app_url());
        let body = self
            .send(req, control("list"), Duration::from_secs(30))
            .await?;
        parse(&body, "list")
    }

    /// `DELETE …/{id}?kill=true` (fly-go's `Destroy` with `Kill`): stops and destroys.
    pub(crate) async fn destroy(&self) -> Result<(), Error> {
        let req = self.request(Method::DELETE, "?kill=true");
        self.send(req, control("destroy"), Duration::from_secs(60))
            .await
            .map(drop)
    }

    /// `POST …/start`.
    pub(crate) async fn start(&self) -> Result<(), Error> {
        let req = self.request(Method::POST, "/start");
        self.send(req, control("start"), Duration::from_secs(60))
            .await
            .map(drop)
    }

    /// `POST …/suspend`: a memory snapshot of the machine; `start` resumes it
    /// (fly.io/docs/reference/suspend-resume).
    pub(crate) async fn suspend(&self) -> Result<(), Error> {
        let req = self.request(Method::POST, "/suspend");
        self.send(req, control("suspend"), Duration::from_secs(60))
            .await
            .map(drop)
    }

    /// `GET …/wait?state=S&timeout=N`: true once `state` (`started`, `suspended`) is reached,
    /// false on the API's 408 (call again).
    pub(crate) async fn wait_for(&self, state: &str, timeout_secs: u64) -> Result<bool, Error> {
        let secs = timeout_secs.clamp(1, 60);
        let req = self.request(Method::GET, &format!("/wait?state={state}&timeout={secs}"));
        match self
            .send(req, control("wait"), Duration::from_secs(secs + 15))
            .await
        {
            Ok(body) => {
                let w: WaitResponse = serde_json::from_slice(&body).map_err(|e| {
                    Error::protocol(format!("the wait answer is not valid JSON: {e}"))
                        .with_provider(crate::PROVIDER)
                        .with_operation("wait")
                })?;
                Ok(w.ok)
            }
            Err(e) if e.status() == Some(execseam_core::WireStatus::Http(408)) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8], op: &'static str) -> Result<T, Error> {
    serde_json::from_slice(body).map_err(|e| {
        Error::protocol(format!("the answer is not valid JSON: {e}"))
            .with_provider(crate::PROVIDER)
            .with_operation(op)
    })
}

#[cfg(test)]
mod tests {
    use super::segment;

    #[test]
    fn segments_are_escaped() {
        assert_eq!(segment("my-app_1"), "my-app_1");
        assert_eq!(segment("a/b c"), "a%2Fb%20c");
    }
}
