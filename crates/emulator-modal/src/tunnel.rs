//! Tunnels: the ports a sandbox declares at create (`Sandbox.create(encrypted_ports=,
//! h2_ports=, unencrypted_ports=)`, the definition's `open_ports`), each reachable from the host.
//!
//! Modal's tunnel is TCP, not an HTTP route: its edge terminates TLS on `host:port` (443 on
//! `*.modal.host`) and passes the bytes to the container's port; an unencrypted port also gets
//! a raw TCP socket, `unencrypted_host:unencrypted_port` (modal 1.6.4 `_tunnel.py`: `Tunnel.url`
//! is `https://{host}[:{port}]`, `tcp_socket` is the unencrypted pair; `forward(unencrypted=
//! True)` "also exposes the TCP socket without encryption on a random port number").
//!
//! Offline, each endpoint is a listener on `127.0.0.1:<ephemeral>`: the TLS one presents a
//! certificate for `localhost` and `127.0.0.1` made when the emulator starts
//! ([`TunnelTls::ca_pem`], which a client trusts, e.g. Python's `SSL_CERT_FILE`), advertising
//! `h2` for an `h2_ports` port; the unencrypted one passes bytes as they are. Each connection is
//! passed on by the kit's [`ports::connect`] (the sandbox's own listener only; a paused sandbox
//! or a closed port closes the connection, after the TLS handshake, as an edge that accepted it
//! would). The listeners close when the sandbox finishes.

use std::net::SocketAddr;
use std::sync::Arc;

use execseam_emulator_kit::Sandbox;
use execseam_emulator_kit::ports;
use execseam_modal_proto::api;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;
use tokio_rustls::TlsAcceptor;

/// The loopback name both endpoints are advertised under.
const HOST: &str = "127.0.0.1";

/// The certificate the TLS endpoints present (one per emulator).
pub struct TunnelTls {
    ca_pem: String,
    http1: TlsAcceptor,
    h2: TlsAcceptor,
}

impl TunnelTls {
    /// A new self-signed certificate for `localhost` and `127.0.0.1`.
    pub(crate) fn generate() -> std::io::Result<TunnelTls> {
        let made = rcgen::generate_simple_self_signed(vec!["localhost".into(), HOST.into()])
            .map_err(std::io::Error::other)?;
        let cert = made.cert.der().clone();
        let key = rustls::pki_types::PrivateKeyDer::try_from(made.key_pair.serialize_der())
            .map_err(std::io::Error::other)?;
        let config = |alpn: &[&[u8]]| -> std::io::Result<TlsAcceptor> {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut c = rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(std::io::Error::other)?
                .with_no_client_auth()
                .with_single_cert(vec![cert.clone()], key.clone_key())
                .map_err(std::io::Error::other)?;
            c.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
            Ok(TlsAcceptor::from(Arc::new(c)))
        };
        Ok(TunnelTls {
            ca_pem: made.cert.pem(),
            http1: config(&[])?,
            h2: config(&[b"h2", b"http/1.1"])?,
        })
    }

    /// The certificate, PEM: what a client trusts to reach the TLS endpoints.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }
}

/// One open port of a sandbox.
pub(crate) struct Tunnel {
    container_port: u32,
    tls: SocketAddr,
    tcp: Option<SocketAddr>,
    tasks: Vec<AbortHandle>,
}

impl Tunnel {
    /// Opens the endpoints `spec` asks for, passing to `sandbox`'s port.
    pub(crate) async fn open(
        sandbox: &Arc<Sandbox>,
        spec: &api::PortSpec,
        tls: &TunnelTls,
    ) -> std::io::Result<Tunnel> {
        let port = u16::try_from(spec.port)
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| {
                std::io::Error::other(format!("port {} is not a TCP port", spec.port))
            })?;
        let h2 = spec.tunnel_type == Some(api::TunnelType::H2 as i32);
        let acceptor = if h2 { &tls.h2 } else { &tls.http1 };
        let mut tasks = Vec::new();
        let (tls_addr, task) = listen(sandbox, port, Some(acceptor.clone())).await?;
        tasks.push(task);
        let tcp = if spec.unencrypted {
            let (addr, task) = listen(sandbox, port, None).await?;
            tasks.push(task);
            Some(addr)
        } else {
            None
        };
        Ok(Tunnel {
            container_port: spec.port,
            tls: tls_addr,
            tcp,
            tasks,
        })
    }

    /// As `SandboxGetTunnels*` answers it; `with_tcp` false leaves the unencrypted endpoint
    /// out (the create answer: "Unencrypted tunnel endpoints are not known at create time",
    /// modal 1.6.4 `sandbox/_impl_v2.py`).
    pub(crate) fn data(&self, with_tcp: bool) -> api::TunnelData {
        let tcp = self.tcp.filter(|_| with_tcp);
        api::TunnelData {
            host: HOST.to_owned(),
            port: u32::from(self.tls.port()),
            unencrypted_host: tcp.map(|_| HOST.to_owned()),
            unencrypted_port: tcp.map(|a| u32::from(a.port())),
            container_port: self.container_port,
        }
    }

    /// True when its whole answer is known at create (no unencrypted endpoint).
    pub(crate) fn encrypted_only(&self) -> bool {
        self.tcp.is_none()
    }

    /// Closes its listeners and every connection through them.
    pub(crate) fn close(&self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// A listener on loopback passing each connection (through `tls` first, if any) to `port` of
/// `sandbox`.
async fn listen(
    sandbox: &Arc<Sandbox>,
    port: u16,
    tls: Option<TlsAcceptor>,
) -> std::io::Result<(SocketAddr, AbortHandle)> {
    let listener = TcpListener::bind((HOST, 0)).await?;
    let addr = listener.local_addr()?;
    let sandbox = sandbox.clone();
    let task = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        while let Ok((conn, _)) = listener.accept().await {
            conns.spawn(pass(sandbox.clone(), port, tls.clone(), conn));
            while conns.try_join_next().is_some() {}
        }
    });
    Ok((addr, task.abort_handle()))
}

async fn pass(sandbox: Arc<Sandbox>, port: u16, tls: Option<TlsAcceptor>, conn: TcpStream) {
    match tls {
        Some(tls) => {
            if let Ok(conn) = tls.accept(conn).await {
                splice(&sandbox, port, conn).await;
            }
        }
        None => splice(&sandbox, port, conn).await,
    }
}

async fn splice(sandbox: &Sandbox, port: u16, mut conn: impl AsyncRead + AsyncWrite + Unpin) {
    if let Ok(mut up) = ports::connect(sandbox, port).await {
        let _ = tokio::io::copy_bidirectional(&mut conn, &mut up).await;
    }
}
