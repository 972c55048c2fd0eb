//! The engine connection: bollard over `DOCKER_HOST`, with the API version negotiated once.

use execseam_adapter_kit::vars;
use std::collections::HashMap;

use std::sync::{Arc, Mutex};

use bollard::{API_DEFAULT_VERSION, ClientVersion, Docker};
use execseam_core::Error;
use tokio::sync::OnceCell;

use crate::config::DockerConfig;
use crate::error::engine;
use execseam_adapter_kit::retry::Stage;

/// Marks every container this adapter creates (value `true`).
pub const LABEL_MANAGED: &str = "io.execseam.managed";
/// The mode a container was created for (`warm` or `per-call`).
pub const LABEL_MODE: &str = "io.execseam.mode";
/// Per call: the sandbox (handle) id a container serves, so destroying the handle can remove the
/// containers of its running commands.
pub const LABEL_SANDBOX: &str = "io.execseam.sandbox";
/// A create's own random label: finds its container when the create's answer was lost.
pub const LABEL_CREATE: &str = "io.execseam.create";

/// A bollard client, built and version-negotiated on first use (so a configuration naming an
/// engine that is down is accepted, and the first request reports `Unavailable`).
pub(crate) struct Client {
    pub(crate) host: String,
    tls: Option<capped::Tls>,
    timeout: u64,
    max_answer: usize,
    negotiated: OnceCell<Docker>,
}

impl Client {
    pub(crate) fn new(config: &DockerConfig) -> Result<Client, Error> {
        let host = config.host.clone();
        let tls = host.starts_with("https://") || (host.starts_with("tcp://") && config.tls_verify);
        if tls && !cfg!(feature = "tls") {
            return Err(vars::config_error(
                crate::PROVIDER,
                format!(
                    "engine address {host:?} needs TLS: build execseam-docker with the `tls` feature"
                ),
            ));
        }
        let tls = if tls {
            let dir = config
                .cert_path
                .clone()
                .map(std::path::PathBuf::from)
                .or_else(|| std::env::home_dir().map(|h| h.join(".docker")))
                .unwrap_or_default();
            Some(
                capped::Tls::load(&dir, authority(&host))
                    .map_err(|m| vars::config_error(crate::PROVIDER, m))?,
            )
        } else {
            None
        };
        Ok(Client {
            host,
            tls,
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
    /// suite. Without the header `/version` is asked.
    pub(crate) async fn get(&self) -> Result<&Docker, Error> {
        self.negotiated
            .get_or_try_init(|| async {
                let fail = |e| engine("version", Stage::Before, e);
                let seen = Arc::new(Mutex::new(None));
                let docker = self
                    .connect(API_DEFAULT_VERSION, Some(seen.clone()))
                    .map_err(|e| engine("connect", Stage::Before, e))?;
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
                        .map_err(|e| engine("connect", Stage::Before, e));
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

    /// bollard over the adapter's own connector ([`capped`]: a Unix socket, TCP, or TLS over TCP),
    /// whose connections fail a read past `max_answer` bytes of one answer.
    ///
    /// With `seen`, each answer's `API-Version` header is stored there.
    fn connect(
        &self,
        version: &ClientVersion,
        seen: Option<Arc<Mutex<Option<String>>>>,
    ) -> Result<Docker, bollard::errors::Error> {
        let (host, timeout) = (self.host.as_str(), self.timeout);
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
            let authority = authority(host).to_owned();
            let addr = format!("http://{authority}");
            match &self.tls {
                Some(tls) => (tls.target(authority), addr),
                None => (capped::Target::Tcp(authority), addr),
            }
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

/// `host:port` of a `tcp://`, `http://` or `https://` engine address.
fn authority(host: &str) -> &str {
    host.strip_prefix("tcp://")
        .or_else(|| host.strip_prefix("http://"))
        .or_else(|| host.strip_prefix("https://"))
        .unwrap_or(host)
        .trim_end_matches('/')
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
/// exec start (`POST …/exec/{id}/start`, hijacked for the attached streams) is not capped as a
/// whole: its bytes are the command's output, which the adapter passes on as it comes. But
/// bollard's frame decoder (`NewlineLogOutputDecoder`, bollard 0.21.1 `src/read.rs`) buffers a
/// whole frame of the length its 8-byte header announces, so after the `101` head [`Frames`]
/// reads each header as the decoder will and fails a frame announced over the cap, and a stream
/// that is not frames. A TTY exec's start (a terminal: `"Tty":true` in its body) is raw bytes,
/// passed on uncapped.
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
        /// TLS over TCP to `host:port`.
        #[cfg(feature = "tls")]
        Tls(String, Tls),
    }

    /// TLS as the docker CLI has it with `DOCKER_TLS_VERIFY`: the engine's certificate checked
    /// against `ca.pem` of the certificate directory, the client's `cert.pem` and `key.pem`
    /// presented (rustls with ring).
    #[cfg(feature = "tls")]
    #[derive(Clone)]
    pub(crate) struct Tls {
        config: std::sync::Arc<rustls::ClientConfig>,
        name: rustls_pki_types::ServerName<'static>,
    }

    /// Without the `tls` feature there is none (the configuration is refused first).
    #[cfg(not(feature = "tls"))]
    #[derive(Clone, Debug)]
    pub(crate) enum Tls {}

    #[cfg(not(feature = "tls"))]
    impl Tls {
        pub(crate) fn load(_dir: &std::path::Path, _authority: &str) -> Result<Tls, String> {
            Err("TLS needs the `tls` feature".into())
        }

        pub(crate) fn target(&self, _authority: String) -> Target {
            match *self {}
        }
    }

    #[cfg(feature = "tls")]
    impl std::fmt::Debug for Tls {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Tls").field("name", &self.name).finish()
        }
    }

    #[cfg(feature = "tls")]
    impl Tls {
        /// Where connections to `authority` go with this configuration.
        pub(crate) fn target(&self, authority: String) -> Target {
            Target::Tls(authority, self.clone())
        }

        /// The client configuration from `dir` for the engine at `authority` (`host:port`).
        /// Only `ca.pem` is trusted (not the system's roots): an engine's certificate is
        /// issued by the CA its clients are given.
        pub(crate) fn load(dir: &std::path::Path, authority: &str) -> Result<Tls, String> {
            use rustls_pki_types::pem::PemObject;
            use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName};
            let read = |name: &str| {
                let path = dir.join(name);
                std::fs::read(&path)
                    .map_err(|e| {
                        format!(
                            "TLS: cannot read {} ({e}; DOCKER_CERT_PATH)",
                            path.display()
                        )
                    })
                    .map(|bytes| (path, bytes))
            };
            let bad = |path: &std::path::Path, what: &str| {
                format!("TLS: {} is not {what}", path.display())
            };
            let (path, ca) = read("ca.pem")?;
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(&ca) {
                let cert = cert.map_err(|_| bad(&path, "PEM certificates"))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("TLS: a certificate of {}: {e}", path.display()))?;
            }
            if roots.is_empty() {
                return Err(bad(&path, "a CA certificate (none found)"));
            }
            let (path, cert) = read("cert.pem")?;
            let chain = CertificateDer::pem_slice_iter(&cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| bad(&path, "PEM certificates"))?;
            if chain.is_empty() {
                return Err(bad(&path, "a client certificate (none found)"));
            }
            let (path, key) = read("key.pem")?;
            let key =
                PrivateKeyDer::from_pem_slice(&key).map_err(|_| bad(&path, "a private key"))?;
            let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| format!("TLS: {e}"))?
                .with_root_certificates(roots)
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("TLS: the client certificate and key: {e}"))?;
            let host = match authority.strip_prefix('[') {
                Some(v6) => v6.split(']').next().unwrap_or(v6),
                None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
            };
            let name = ServerName::try_from(host.to_owned())
                .map_err(|_| format!("TLS: {host:?} is not a host name or address"))?;
            Ok(Tls {
                config: std::sync::Arc::new(config),
                name,
            })
        }
    }

    /// The error a capped read fails with (found in the error's source chain).
    #[derive(Debug)]
    pub(crate) enum AnswerTooLarge {
        /// One answer passed the cap.
        Answer(usize),
        /// An exec stream's frame header announced more than the cap.
        Frame { announced: u64, cap: usize },
        /// An exec stream's head passed the cap before it ended.
        Head(usize),
        /// An exec stream's bytes are not stdout/stderr frames.
        Unframed(u8),
    }

    impl std::fmt::Display for AnswerTooLarge {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            match self {
                AnswerTooLarge::Answer(cap) => write!(
                    f,
                    "the engine's answer is larger than {cap} bytes (DockerConfig::max_answer_bytes)"
                ),
                AnswerTooLarge::Frame { announced, cap } => write!(
                    f,
                    "an exec output frame announces {announced} bytes, more than {cap} (DockerConfig::max_answer_bytes)"
                ),
                AnswerTooLarge::Head(cap) => write!(
                    f,
                    "the exec start's answer head is larger than {cap} bytes (DockerConfig::max_answer_bytes)"
                ),
                AnswerTooLarge::Unframed(b) => write!(
                    f,
                    "the exec stream is not multiplexed stdout/stderr frames (a header starts with byte {b})"
                ),
            }
        }
    }

    impl std::error::Error for AnswerTooLarge {}

    /// The frames of an exec stream (Docker's `stdcopy`: `[stream, 0, 0, 0, len u32 BE]`, then
    /// `len` bytes), read as bollard's decoder reads them: only the length matters to it.
    #[derive(Debug, Default)]
    pub(crate) struct Frames {
        header: [u8; 8],
        got: usize,
        left: u64,
    }

    impl Frames {
        /// Follows `data`; fails on a frame announced over `cap` or a header that is not one.
        pub(crate) fn feed(&mut self, mut data: &[u8], cap: usize) -> Result<(), AnswerTooLarge> {
            while !data.is_empty() {
                if self.left > 0 {
                    let n = data
                        .len()
                        .min(usize::try_from(self.left).unwrap_or(usize::MAX));
                    self.left -= n as u64;
                    data = &data[n..];
                    continue;
                }
                let b = data[0];
                data = &data[1..];
                // bollard treats a first byte over 2 as unframed output (a TTY's).
                if self.got == 0 && b > 2 {
                    return Err(AnswerTooLarge::Unframed(b));
                }
                self.header[self.got] = b;
                self.got += 1;
                if self.got == 8 {
                    self.got = 0;
                    let h = self.header;
                    let len = u64::from(u32::from_be_bytes([h[4], h[5], h[6], h[7]]));
                    if len > cap as u64 {
                        return Err(AnswerTooLarge::Frame {
                            announced: len,
                            cap,
                        });
                    }
                    self.left = len;
                }
            }
            Ok(())
        }
    }

    /// Where a hijacked connection's answer is.
    #[derive(Debug)]
    enum Hijack {
        /// Not an exec start (or its answer was not the upgrade): capped as any answer.
        No,
        /// The answer's head so far.
        Head(Vec<u8>),
        /// After a `101` head: frames, not capped as a whole.
        Frames(Frames),
        /// After a `101` head to a TTY exec start (`"Tty":true`): the terminal's raw bytes, not
        /// capped (bollard passes them on as they come: `NewlineLogOutputDecoder::new(true)`).
        Raw,
    }

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
                    #[cfg(feature = "tls")]
                    Target::Tls(addr, tls) => {
                        let s = tokio::net::TcpStream::connect(addr).await?;
                        s.set_nodelay(true)?;
                        let connector = tokio_rustls::TlsConnector::from(tls.config);
                        Io::Tls(Box::new(connector.connect(tls.name, s).await?))
                    }
                };
                Ok(TokioIo::new(Capped::new(io, cap)))
            })
        }
    }

    pub(crate) enum Io {
        Unix(tokio::net::UnixStream),
        Tcp(tokio::net::TcpStream),
        #[cfg(feature = "tls")]
        Tls(Box<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>),
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
        /// The connection carried an exec start: its answer is followed as frames.
        hijack: Hijack,
    }

    impl Capped {
        fn new(io: Io, cap: usize) -> Capped {
            Capped {
                io,
                cap,
                read: 0,
                reading: false,
                head: Vec::new(),
                hijack: Hijack::No,
            }
        }

        fn wrote(&mut self, data: &[u8]) {
            if matches!(self.hijack, Hijack::Head(_)) && self.head.len() < 512 {
                // The start's body (`{"Detach":false,"Tty":…}`) follows its head.
                let n = data.len().min(512 - self.head.len());
                self.head.extend_from_slice(&data[..n]);
            }
            if !matches!(self.hijack, Hijack::No) {
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
                if is_exec_start(&self.head) {
                    self.hijack = Hijack::Head(Vec::new());
                }
            }
        }

        /// Follows what was read; `Err` fails the read.
        fn follow(&mut self, data: &[u8]) -> Result<(), AnswerTooLarge> {
            self.read += data.len();
            match &mut self.hijack {
                Hijack::No if self.read > self.cap => Err(AnswerTooLarge::Answer(self.cap)),
                Hijack::No => Ok(()),
                Hijack::Frames(frames) => frames.feed(data, self.cap),
                Hijack::Raw => Ok(()),
                Hijack::Head(head) => {
                    let from = head.len().saturating_sub(3);
                    head.extend_from_slice(data);
                    let Some(end) = head[from..].windows(4).position(|w| w == b"\r\n\r\n") else {
                        return if head.len() > self.cap {
                            Err(AnswerTooLarge::Head(self.cap))
                        } else {
                            Ok(())
                        };
                    };
                    let end = from + end + 4;
                    // hyper upgrades only a `101`; any other answer (an error) is capped whole.
                    if (head.starts_with(b"HTTP/1.1 101 ") || head.starts_with(b"HTTP/1.0 101 "))
                        && self.head.windows(10).any(|w| w == b"\"Tty\":true")
                    {
                        self.hijack = Hijack::Raw;
                        Ok(())
                    } else if head.starts_with(b"HTTP/1.1 101 ")
                        || head.starts_with(b"HTTP/1.0 101 ")
                    {
                        let rest = head.split_off(end);
                        let mut frames = Frames::default();
                        frames.feed(&rest, self.cap)?;
                        self.hijack = Hijack::Frames(frames);
                        Ok(())
                    } else {
                        self.hijack = Hijack::No;
                        self.follow(&[])
                    }
                }
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
                #[cfg(feature = "tls")]
                Io::Tls(s) => Pin::new(s).poll_read(cx, buf),
            };
            if let Poll::Ready(Ok(())) = &r {
                this.reading = true;
                if let Err(e) = this.follow(&buf.filled()[before..]) {
                    return Poll::Ready(Err(io::Error::other(e)));
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
                #[cfg(feature = "tls")]
                Io::Tls(s) => Pin::new(s).poll_write(cx, data),
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
                #[cfg(feature = "tls")]
                Io::Tls(s) => Pin::new(s).poll_flush(cx),
            }
        }

        fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            match &mut self.io {
                Io::Unix(s) => Pin::new(s).poll_shutdown(cx),
                Io::Tcp(s) => Pin::new(s).poll_shutdown(cx),
                #[cfg(feature = "tls")]
                Io::Tls(s) => Pin::new(s).poll_shutdown(cx),
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

        fn frame(stream: u8, payload: &[u8]) -> Vec<u8> {
            let mut f = vec![stream, 0, 0, 0];
            f.extend_from_slice(&(payload.len() as u32).to_be_bytes());
            f.extend_from_slice(payload);
            f
        }

        /// Writes `request` through a [`Capped`] connection (cap `cap`), the peer answers
        /// `answer`, and the connection is read to its end: the bytes read, or the cap's error.
        async fn exchange(request: &str, answer: Vec<u8>, cap: usize) -> Result<usize, String> {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let (ours, mut peer) = tokio::net::UnixStream::pair().unwrap();
            let mut capped = Capped::new(Io::Unix(ours), cap);
            capped.write_all(request.as_bytes()).await.unwrap();
            let mut got = vec![0; request.len()];
            peer.read_exact(&mut got).await.unwrap();
            let writer = tokio::spawn(async move {
                // In small pieces: a header split over reads is still read as one.
                for piece in answer.chunks(5) {
                    if peer.write_all(piece).await.is_err() {
                        return;
                    }
                }
            });
            let mut total = 0;
            let mut buf = [0u8; 3];
            let result = loop {
                match capped.read(&mut buf).await {
                    Ok(0) => break Ok(total),
                    Ok(n) => total += n,
                    Err(e) => {
                        let refused = e.get_ref().and_then(|i| i.downcast_ref::<AnswerTooLarge>());
                        break Err(refused.map_or_else(|| e.to_string(), |r| r.to_string()));
                    }
                }
            };
            drop(capped);
            let _ = writer.await;
            result
        }

        const START: &str = "POST /v1.41/exec/abc/start HTTP/1.1\r\nhost: x\r\n\r\n{}";
        const UPGRADED: &[u8] = b"HTTP/1.1 101 UPGRADED\r\nContent-Type: application/vnd.docker.raw-stream\r\nConnection: Upgrade\r\nUpgrade: tcp\r\n\r\n";

        #[tokio::test]
        async fn an_exec_stream_is_not_capped_as_a_whole_but_per_frame() {
            // 40 frames of 10 bytes: 480 bytes (and a 109-byte head) through a 128-byte cap.
            let mut answer = UPGRADED.to_vec();
            for i in 0..40u8 {
                answer.extend(frame(1 + i % 2, b"0123456789"));
            }
            let len = answer.len();
            assert_eq!(exchange(START, answer, 128).await, Ok(len));
        }

        #[tokio::test]
        async fn a_frame_announced_over_the_cap_fails_at_its_header() {
            let mut answer = UPGRADED.to_vec();
            answer.extend(frame(1, b"ok"));
            answer.extend([1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]);
            answer.extend(std::iter::repeat_n(b'x', 4096));
            let err = exchange(START, answer, 128).await.unwrap_err();
            assert!(
                err.contains("announces 4294967295 bytes, more than 128"),
                "{err}"
            );
            // At the cap exactly it is a frame.
            let mut answer = UPGRADED.to_vec();
            answer.extend(frame(2, &[b'e'; 128]));
            let len = answer.len();
            assert_eq!(exchange(START, answer, 128).await, Ok(len));
        }

        #[tokio::test]
        async fn unframed_bytes_in_an_exec_stream_fail() {
            let mut answer = UPGRADED.to_vec();
            answer.extend(frame(1, b"ok"));
            answer.extend(b"raw text, as a TTY would send");
            let err = exchange(START, answer, 1 << 20).await.unwrap_err();
            assert!(err.contains("not multiplexed"), "{err}");
        }

        #[tokio::test]
        async fn an_exec_start_answered_without_the_upgrade_is_capped_whole() {
            let mut answer =
                b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n\r\n".to_vec();
            answer.extend(std::iter::repeat_n(b' ', 200));
            let err = exchange(START, answer, 64).await.unwrap_err();
            assert!(err.contains("answer is larger than 64 bytes"), "{err}");
            // And a head that never ends is capped too.
            let answer = std::iter::repeat_n(b'h', 200).collect();
            let err = exchange(START, answer, 64).await.unwrap_err();
            assert!(err.contains("answer head is larger than 64"), "{err}");
        }

        #[tokio::test]
        async fn other_answers_are_capped_whole() {
            let request = "GET /v1.41/containers/abc/json HTTP/1.1\r\n\r\n";
            let mut answer = UPGRADED.to_vec();
            answer.extend(std::iter::repeat_n(b'x', 200));
            let err = exchange(request, answer, 64).await.unwrap_err();
            assert!(err.contains("answer is larger than 64 bytes"), "{err}");
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
