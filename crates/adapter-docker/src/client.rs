//! The engine connection: bollard over `DOCKER_HOST`, with the API version negotiated once.

use std::collections::HashMap;

use std::sync::{Arc, Mutex};

use bollard::{API_DEFAULT_VERSION, ClientVersion, Docker};
use execseam_core::Error;
use tokio::sync::OnceCell;

use crate::config::{DockerConfig, config_error};
use crate::error::{Stage, engine};

/// Marks every container this adapter creates (value `true`).
pub const LABEL_MANAGED: &str = "io.execseam.managed";
/// The mode a container was created for (`warm` or `per-call`).
pub const LABEL_MODE: &str = "io.execseam.mode";
/// Per call: the sandbox (handle) id a container serves, so destroying the handle can remove the
/// containers of its running commands.
pub const LABEL_SANDBOX: &str = "io.execseam.sandbox";

/// A bollard client, built and version-negotiated on first use (so a configuration naming an
/// engine that is down is accepted, and the first request reports `Unavailable`).
pub(crate) struct Client {
    pub(crate) host: String,
    tls: Option<std::path::PathBuf>,
    timeout: u64,
    max_answer: usize,
    negotiated: OnceCell<Docker>,
}

impl Client {
    pub(crate) fn new(config: &DockerConfig) -> Result<Client, Error> {
        let host = config.host.clone();
        let tls = host.starts_with("https://") || (host.starts_with("tcp://") && config.tls_verify);
        if tls && !cfg!(feature = "tls") {
            return Err(config_error(format!(
                "engine address {host:?} needs TLS: build execseam-docker with the `tls` feature"
            )));
        }
        let cert_dir = || {
            config
                .cert_path
                .clone()
                .map(std::path::PathBuf::from)
                .or_else(|| std::env::home_dir().map(|h| h.join(".docker")))
                .unwrap_or_default()
        };
        Ok(Client {
            host,
            tls: tls.then(cert_dir),
            timeout: config.request_timeout.as_secs().max(1),
            max_answer: config.max_answer,
            negotiated: OnceCell::new(),
        })
    }

    /// The client, after asking the engine which API version it speaks (a newer Docker refuses
    /// a client version above its own; podman 4.3 speaks 1.41).
    ///
    /// Asked with `GET /_ping`, whose answer carries the engine's version in its `API-Version`
    /// header (Engine API docs, `SystemPing`: "API-Version: Max API Version the server
    /// supports"), not with bollard's `negotiate_version` (`GET /version`): podman builds its
    /// `/version` answer from the runtime's and conmon's versions, which took 1.8 s here under
    /// load against 0.13 s for `/_ping`, and more than a 2 s request timeout in the reliability
    /// suite. Without the header (or over TLS, bollard's own connector) `/version` is asked.
    pub(crate) async fn get(&self) -> Result<&Docker, Error> {
        self.negotiated
            .get_or_try_init(|| async {
                let fail = |e| engine("version", Stage::Idempotent, e);
                let seen = Arc::new(Mutex::new(None));
                let docker = self
                    .connect(API_DEFAULT_VERSION, Some(seen.clone()))
                    .map_err(|e| engine("connect", Stage::Idempotent, e))?;
                if self.tls.is_none() {
                    bounded(self.timeout(), docker.ping()).await.map_err(fail)?;
                    let header = seen.lock().expect("api version").take();
                    if let Some(server) = header.as_deref().and_then(parse_version) {
                        let ours = API_DEFAULT_VERSION;
                        if (server.major_version, server.minor_version)
                            >= (ours.major_version, ours.minor_version)
                        {
                            return Ok(docker);
                        }
                        return self
                            .connect(&server, None)
                            .map_err(|e| engine("connect", Stage::Idempotent, e));
                    }
                }
                // bollard's own timeout ends at the answer's head; the body is bounded here.
                bounded(self.timeout(), docker.negotiate_version())
                    .await
                    .map_err(fail)
            })
            .await
    }

    /// The per-request timeout.
    pub(crate) fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.timeout)
    }

    /// bollard over the adapter's own connector ([`capped`]), whose connections fail a read past
    /// `max_answer` bytes of one answer; TLS is bollard's own connector (not capped).
    ///
    /// With `seen`, each answer's `API-Version` header is stored there.
    fn connect(
        &self,
        version: &ClientVersion,
        seen: Option<Arc<Mutex<Option<String>>>>,
    ) -> Result<Docker, bollard::errors::Error> {
        let (host, timeout) = (self.host.as_str(), self.timeout);
        if let Some(dir) = &self.tls {
            return tls(host, dir, timeout);
        }
        let (target, addr) = if let Some(path) = host.strip_prefix("unix://") {
            if !std::path::Path::new(path).exists() {
                return Err(bollard::errors::Error::SocketNotFoundError(path.to_owned()));
            }
            // The authority is not used: every connection goes to the socket.
            (
                capped::Target::Unix(path.into()),
                "http://localhost".to_owned(),
            )
        } else {
            let authority = host
                .strip_prefix("tcp://")
                .or_else(|| host.strip_prefix("http://"))
                .unwrap_or(host)
                .trim_end_matches('/')
                .to_owned();
            let addr = format!("http://{authority}");
            (capped::Target::Tcp(authority), addr)
        };
        let client =
            Arc::new(capped::builder().build(capped::Connector::new(target, self.max_answer)));
        Docker::connect_with_custom_transport(
            move |req: bollard::BollardRequest| {
                let (client, seen) = (client.clone(), seen.clone());
                async move {
                    let resp = client
                        .request(req)
                        .await
                        .map_err(bollard::errors::Error::from)?;
                    if let Some(seen) = seen
                        && let Some(v) = resp.headers().get("api-version")
                        && let Ok(v) = v.to_str()
                    {
                        *seen.lock().expect("api version") = Some(v.to_owned());
                    }
                    Ok(resp)
                }
            },
            Some(addr),
            timeout,
            version,
        )
    }
}

/// `1.41` as a client version.
fn parse_version(v: &str) -> Option<ClientVersion> {
    let (major, minor) = v.trim().split_once('.')?;
    Some(ClientVersion {
        major_version: major.parse().ok()?,
        minor_version: minor.parse().ok()?,
    })
}

/// TLS with the client certificate in `dir`, as the docker CLI does.
#[cfg(feature = "tls")]
fn tls(host: &str, dir: &std::path::Path, timeout: u64) -> Result<Docker, bollard::errors::Error> {
    Docker::connect_with_ssl(
        host,
        &dir.join("key.pem"),
        &dir.join("cert.pem"),
        &dir.join("ca.pem"),
        timeout,
        API_DEFAULT_VERSION,
    )
}

#[cfg(not(feature = "tls"))]
fn tls(
    host: &str,
    _dir: &std::path::Path,
    _timeout: u64,
) -> Result<Docker, bollard::errors::Error> {
    Err(bollard::errors::Error::UnsupportedURISchemeError {
        uri: host.to_owned(),
    })
}

/// The labels of a container created for `config`: its own, the adapter's, and `extra`.
pub(crate) fn labels<'a>(
    config: &'a DockerConfig,
    extra: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> HashMap<String, String> {
    let mut l: HashMap<String, String> = config
        .labels
        .iter()
        .chain(extra)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    l.insert(LABEL_MANAGED.into(), "true".into());
    l.insert(LABEL_MODE.into(), config.mode.as_str().into());
    l
}

/// The list filter for containers carrying every label of `labels`.
pub(crate) fn label_filter(labels: &HashMap<String, String>) -> HashMap<String, Vec<String>> {
    let mut l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    l.sort();
    HashMap::from([("label".to_owned(), l)])
}

/// `request` bounded by `timeout` as a whole, its answer's body included: bollard's own timeout
/// covers the request up to the answer's head, so a stalled or trickling body would hang.
pub(crate) async fn bounded<T>(
    timeout: std::time::Duration,
    request: impl Future<Output = Result<T, bollard::errors::Error>>,
) -> Result<T, bollard::errors::Error> {
    tokio::time::timeout(timeout, request)
        .await
        .unwrap_or(Err(bollard::errors::Error::RequestTimeoutError))
}

/// The adapter's connector: plain TCP or a Unix socket, each connection wrapped in [`Capped`],
/// which fails a read once one answer (everything read after the request was written) passes
/// the cap. bollard collects a whole JSON body (`decode_response`, bollard 0.21.1
/// `src/docker.rs`) before decoding it; with this, an endless or oversized answer ends as an
/// error after `max_answer` bytes instead of taking the memory. A connection that carried an
/// exec start (`POST …/exec/{id}/start`, hijacked for the attached streams) is not capped: its
/// bytes are the command's output, which the adapter passes on as it comes.
pub(crate) mod capped {
    use std::future::Future;
    use std::io;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use hyper_util::client::legacy::Client;
    use hyper_util::client::legacy::connect::{Connected, Connection};
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

    /// Where connections go.
    #[derive(Clone, Debug)]
    pub(crate) enum Target {
        Unix(std::path::PathBuf),
        Tcp(String),
    }

    /// The error a capped read fails with (found in the error's source chain).
    #[derive(Debug)]
    pub(crate) struct AnswerTooLarge(pub(crate) usize);

    impl std::fmt::Display for AnswerTooLarge {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(
                f,
                "the engine's answer is larger than {} bytes (DockerConfig::max_answer_bytes)",
                self.0
            )
        }
    }

    impl std::error::Error for AnswerTooLarge {}

    /// The client builder, as bollard's own connectors have it: no idle connection kept.
    pub(crate) fn builder() -> hyper_util::client::legacy::Builder {
        let mut builder = Client::builder(TokioExecutor::new());
        builder.pool_max_idle_per_host(0);
        builder
    }

    #[derive(Clone, Debug)]
    pub(crate) struct Connector {
        target: Target,
        cap: usize,
    }

    impl Connector {
        pub(crate) fn new(target: Target, cap: usize) -> Connector {
            Connector { target, cap }
        }
    }

    impl tower_service::Service<hyper::Uri> for Connector {
        type Response = TokioIo<Capped>;
        type Error = io::Error;
        type Future = Pin<Box<dyn Future<Output = io::Result<TokioIo<Capped>>> + Send>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: hyper::Uri) -> Self::Future {
            let (target, cap) = (self.target.clone(), self.cap);
            Box::pin(async move {
                let io = match target {
                    Target::Unix(path) => Io::Unix(tokio::net::UnixStream::connect(path).await?),
                    Target::Tcp(addr) => {
                        let s = tokio::net::TcpStream::connect(addr).await?;
                        s.set_nodelay(true)?;
                        Io::Tcp(s)
                    }
                };
                Ok(TokioIo::new(Capped::new(io, cap)))
            })
        }
    }

    pub(crate) enum Io {
        Unix(tokio::net::UnixStream),
        Tcp(tokio::net::TcpStream),
    }

    /// One connection: counts what is read since the last request was written.
    pub(crate) struct Capped {
        io: Io,
        cap: usize,
        read: usize,
        /// The last call was a read: the next write starts a new request.
        reading: bool,
        /// The first bytes of the request being written (its request line).
        head: Vec<u8>,
        /// The connection carried an exec start: never capped again.
        hijacked: bool,
    }

    impl Capped {
        fn new(io: Io, cap: usize) -> Capped {
            Capped {
                io,
                cap,
                read: 0,
                reading: false,
                head: Vec::new(),
                hijacked: false,
            }
        }

        fn wrote(&mut self, data: &[u8]) {
            if self.hijacked {
                return;
            }
            if self.reading {
                self.reading = false;
                self.read = 0;
                self.head.clear();
            }
            if self.head.len() < 512 {
                let n = data.len().min(512 - self.head.len());
                self.head.extend_from_slice(&data[..n]);
                self.hijacked = is_exec_start(&self.head);
            }
        }
    }

    /// `POST /v1.41/exec/{id}/start HTTP/1.1`: the request line of an exec start.
    fn is_exec_start(head: &[u8]) -> bool {
        let Some(end) = head.iter().position(|&b| b == b'\r') else {
            return false;
        };
        let line = String::from_utf8_lossy(&head[..end]);
        let mut parts = line.split(' ');
        let (Some("POST"), Some(target)) = (parts.next(), parts.next()) else {
            return false;
        };
        let path = target.split('?').next().unwrap_or(target);
        let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        segs.len() >= 3 && segs[segs.len() - 3] == "exec" && segs[segs.len() - 1] == "start"
    }

    impl Connection for Capped {
        fn connected(&self) -> Connected {
            Connected::new()
        }
    }

    impl AsyncRead for Capped {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let before = buf.filled().len();
            let this = &mut *self;
            let r = match &mut this.io {
                Io::Unix(s) => Pin::new(s).poll_read(cx, buf),
                Io::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            };
            if let Poll::Ready(Ok(())) = &r {
                this.reading = true;
                this.read += buf.filled().len() - before;
                if !this.hijacked && this.read > this.cap {
                    return Poll::Ready(Err(io::Error::other(AnswerTooLarge(this.cap))));
                }
            }
            r
        }
    }

    impl AsyncWrite for Capped {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            data: &[u8],
        ) -> Poll<io::Result<usize>> {
            let this = &mut *self;
            let r = match &mut this.io {
                Io::Unix(s) => Pin::new(s).poll_write(cx, data),
                Io::Tcp(s) => Pin::new(s).poll_write(cx, data),
            };
            if let Poll::Ready(Ok(n)) = &r {
                this.wrote(&data[..*n]);
            }
            r
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            match &mut self.io {
                Io::Unix(s) => Pin::new(s).poll_flush(cx),
                Io::Tcp(s) => Pin::new(s).poll_flush(cx),
            }
        }

        fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            match &mut self.io {
                Io::Unix(s) => Pin::new(s).poll_shutdown(cx),
                Io::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn only_an_exec_start_is_hijacked() {
            for (line, yes) in [
                ("POST /v1.41/exec/abc/start HTTP/1.1\r\n", true),
                ("POST /exec/abc/start?x=1 HTTP/1.1\r\n", true),
                ("POST /v1.41/containers/abc/start HTTP/1.1\r\n", false),
                ("GET /v1.41/exec/abc/json HTTP/1.1\r\n", false),
                ("POST /v1.41/exec/abc/start", false),
            ] {
                assert_eq!(is_exec_start(line.as_bytes()), yes, "{line}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_version;

    #[test]
    fn the_ping_header_parses_as_a_version() {
        let v = parse_version("1.41").unwrap();
        assert_eq!((v.major_version, v.minor_version), (1, 41));
        assert!(parse_version("").is_none());
        assert!(parse_version("1").is_none());
        assert!(parse_version("x.41").is_none());
    }
}
