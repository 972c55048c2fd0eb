//! One HTTP exchange with Chrono, behind a [`Transport`] trait so the durable client can be
//! driven by a scripted transport in tests (or by a server's own client).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use execseam_core::{BoxFuture, Error, ErrorKind};
use secrecy::ExposeSecret;

use crate::PROVIDER;
use crate::config::ChronoConfig;
use execseam_adapter_kit::http::{self, BodyError, ClientOptions};
use execseam_adapter_kit::retry::Call;

/// The HTTP method of an exchange.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// GET.
    Get,
    /// POST.
    Post,
}

/// One request: a path relative to the service root, extra headers, an optional JSON body.
#[derive(Clone)]
pub struct Exchange {
    /// The method.
    pub method: Method,
    /// The path (`/executions/op_…`), built from validated ids only.
    pub path: String,
    /// Extra headers (`Idempotency-Key`, `If-None-Match`). Credentials are the transport's.
    pub headers: Vec<(&'static str, String)>,
    /// A JSON body.
    pub body: Option<Vec<u8>>,
    /// The upper bound of the whole exchange.
    pub timeout: Duration,
    /// What the exchange is, for error classification.
    pub op: Call,
}

impl std::fmt::Debug for Exchange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Neither the body (source code) nor header values (the idempotency key) are shown.
        f.debug_struct("Exchange")
            .field("method", &self.method)
            .field("path", &self.path)
            .field(
                "headers",
                &self.headers.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
            )
            .field("body_len", &self.body.as_ref().map(Vec::len))
            .field("timeout", &self.timeout)
            .field("op", &self.op)
            .finish()
    }
}

/// One answer: status, the headers the contract uses (lower-case names), and the body.
#[derive(Clone, Debug, Default)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// Headers, lower-case names; values that are not UTF-8 are dropped.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Bytes,
}

impl Answer {
    /// The first value of header `name` (lower-case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// `Retry-After`, parsed ([`parse_retry_after`]).
    pub fn retry_delay(&self) -> Option<Duration> {
        self.header("retry-after").and_then(parse_retry_after)
    }
}

/// Sends one exchange. A transport failure is an `Err` classified by [`Exchange::op`] (nothing
/// sent: `Retry::SAFE`; maybe sent: the op's class); any HTTP answer is an `Ok(Answer)`.
pub trait Transport: Send + Sync {
    /// Sends `exchange`.
    fn send(&self, exchange: Exchange) -> BoxFuture<'_, Result<Answer, Error>>;
}

/// The reqwest transport: the configured root, `?_nyxid_via=`, bearer and delegation tokens.
/// reqwest's own retries are off: nothing is ever re-sent behind the caller's back.
#[derive(Clone)]
pub struct HttpTransport {
    http: reqwest::Client,
    config: Arc<ChronoConfig>,
}

execseam_adapter_kit::debug_fields!(self => HttpTransport { config: self.config });

impl HttpTransport {
    /// A transport for `config` (no request is made).
    pub fn new(config: Arc<ChronoConfig>) -> Result<HttpTransport, Error> {
        config.validate()?;
        let http = http::client(PROVIDER, ClientOptions::new(config.connect_timeout))?;
        Ok(HttpTransport { http, config })
    }

    /// The configuration.
    pub fn config(&self) -> &ChronoConfig {
        &self.config
    }

    pub(crate) fn url(&self, path: &str) -> String {
        match &self.config.via {
            Some(via) => format!(
                "{}{path}?_nyxid_via={}",
                self.config.base_url,
                execseam_adapter_kit::text::escape_path_segment(via)
            ),
            None => format!("{}{path}", self.config.base_url),
        }
    }

    pub(crate) fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let m = match method {
            Method::Get => reqwest::Method::GET,
            Method::Post => reqwest::Method::POST,
        };
        let mut r = self.http.request(m, self.url(path));
        if let Some(t) = &self.config.token {
            r = r.bearer_auth(t.expose_secret());
        }
        if let Some(t) = &self.config.delegation_token {
            r = r.header("x-nyxid-delegation-token", t.expose_secret());
        }
        r
    }

    /// Sends and reads the whole answer, at most `max_response_bytes` of body.
    pub(crate) async fn exchange(&self, ex: Exchange) -> Result<Answer, Error> {
        let op = ex.op;
        let mut r = self.request(ex.method, &ex.path).timeout(ex.timeout);
        for (k, v) in &ex.headers {
            r = r.header(*k, v);
        }
        if let Some(body) = ex.body {
            r = r
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body);
        }
        let resp = r.send().await.map_err(|e| http::transport_error(op, e))?;
        let status = resp.status().as_u16();
        let headers = resp
            .headers()
            .iter()
            .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned())))
            .collect();
        let max = self.config.max_response_bytes;
        // Error answers too: bounded in size and ended by the exchange's deadline.
        let body = http::read_body(resp, max, ex.timeout)
            .await
            .map_err(|e| match e {
                BodyError::TooLarge { .. } => op
                    .error(
                        ErrorKind::OutputLimit,
                        format!(
                            "the answer is larger than {max} bytes (ChronoConfig::max_response_bytes)"
                        ),
                    )
                    .with_retry(execseam_core::Retry::Unsafe),
                other => other.into_error(op),
            })?;
        Ok(Answer {
            status,
            headers,
            body,
        })
    }
}

impl Transport for HttpTransport {
    fn send(&self, exchange: Exchange) -> BoxFuture<'_, Result<Answer, Error>> {
        Box::pin(self.exchange(exchange))
    }
}

/// `Retry-After` as delta-seconds (the form Chrono sends); negative values become 0 (Aevatar).
/// The HTTP-date and fractional forms are read too
/// ([`execseam_adapter_kit::retry::parse_retry_after`]). `None` when unreadable.
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let v = value.trim();
    if v.parse::<i64>().is_ok_and(|s| s < 0) {
        return Some(Duration::ZERO);
    }
    execseam_adapter_kit::retry::parse_retry_after(v, std::time::SystemTime::now())
}

#[cfg(test)]
mod retry_after_tests {
    use std::time::Duration;

    use super::parse_retry_after;

    #[test]
    fn retry_after_values() {
        assert_eq!(parse_retry_after("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse_retry_after(" 3600 "), Some(Duration::from_secs(3600)));
        assert_eq!(
            parse_retry_after("-5"),
            Some(Duration::ZERO),
            "Aevatar: <= 0 becomes 0"
        );
        assert_eq!(parse_retry_after("0.5"), Some(Duration::from_millis(500)));
        assert_eq!(
            parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon"), None);
    }
}
