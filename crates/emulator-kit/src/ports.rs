//! Exposed ports, served offline: a server on port P of a sandbox listens on the host's network
//! (the sandboxes share it), so an emulator reaches it at `127.0.0.1:P`. What the kit adds is
//! what the provider's edge does before forwarding:
//!
//! - [`port_host`] reads the provider's host scheme, `{port}-{id}.{domain}`, where `domain` is
//!   the emulator's own `*.localhost` name (`e2b.localhost`, `proxy.localhost`): RFC 6761 lets
//!   resolvers send any `*.localhost` name to loopback (curl and browsers do), and a client that
//!   does not can connect to the emulator's address with that `Host` header.
//! - [`forward`] refuses a paused sandbox at once (a TCP connect to a frozen listener would
//!   complete and then hang), refuses a port whose listener is not one of the sandbox's own
//!   processes (otherwise sandbox A's URL could reach sandbox B's server), and then forwards the
//!   HTTP request over a fresh connection to `127.0.0.1:P`.
//!
//! Each emulator maps [`PortError`] to its provider's answer (E2B's 502 "port is not open",
//! Daytona's proxy errors).

use std::io;

use axum::body::Body;
use http::{Request, Response, Uri};

use crate::sandbox::Sandbox;

/// Why a port could not be reached.
#[derive(Debug)]
pub enum PortError {
    /// The sandbox is paused.
    Paused,
    /// Nothing of this sandbox listens on the port.
    NotListening,
    /// The listener did not answer as HTTP (or closed the connection).
    Unreachable(io::Error),
}

impl std::fmt::Display for PortError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PortError::Paused => f.write_str("the sandbox is paused"),
            PortError::NotListening => f.write_str("the sandbox is running but port is not open"),
            PortError::Unreachable(e) => write!(f, "the port did not answer: {e}"),
        }
    }
}

/// Reads `{port}-{rest}.{domain}` (an optional `:port` after the host is ignored): the port and
/// `rest` (a sandbox id, or a token standing for one), or `None` when `host` is not of that form.
pub fn port_host<'a>(host: &'a str, domain: &str) -> Option<(u16, &'a str)> {
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => host,
    };
    let label = name.strip_suffix(domain)?.strip_suffix('.')?;
    let (port, rest) = label.split_once('-')?;
    if rest.is_empty() || rest.contains('.') {
        return None;
    }
    Some((port.parse().ok()?, rest))
}

/// True if a process of `sandbox` holds a socket listening on TCP `port` (IPv4 or IPv6). In
/// [`Isolation::Translate`](crate::Isolation::Translate) (no pid namespace to tell processes
/// by) any listener counts.
pub fn listens(sandbox: &Sandbox, port: u16) -> bool {
    let inodes = listening_inodes(port);
    if inodes.is_empty() {
        return false;
    }
    let Some(pids) = sandbox.processes() else {
        return true;
    };
    pids.into_iter().any(|pid| {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            return false;
        };
        fds.flatten().any(|fd| {
            std::fs::read_link(fd.path()).is_ok_and(|l| {
                l.to_str()
                    .and_then(|l| l.strip_prefix("socket:["))
                    .and_then(|l| l.strip_suffix(']'))
                    .and_then(|i| i.parse::<u64>().ok())
                    .is_some_and(|i| inodes.contains(&i))
            })
        })
    })
}

/// Inodes of the sockets listening on `port`, from `/proc/net/tcp` and `tcp6` (this process's
/// network namespace: the host's, which the sandboxes share).
fn listening_inodes(port: u16) -> Vec<u64> {
    let want = format!(":{port:04X}");
    let mut out = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // sl local rem st tx:rx tr:when retrnsmt uid timeout inode
            if f.len() > 9
                && f[3] == "0A"
                && f[1].ends_with(&want)
                && let Ok(inode) = f[9].parse::<u64>()
            {
                out.push(inode);
            }
        }
    }
    out
}

/// A TCP connection to `port` of `sandbox`, for an edge that forwards bytes rather than HTTP
/// requests (Modal's tunnels): refused while it is paused or when the listener is not its own,
/// like [`forward`].
pub async fn connect(sandbox: &Sandbox, port: u16) -> Result<tokio::net::TcpStream, PortError> {
    if sandbox.is_paused() {
        return Err(PortError::Paused);
    }
    if !listens(sandbox, port) {
        return Err(PortError::NotListening);
    }
    match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
        Ok(s) => Ok(s),
        // A server bound to the IPv6 loopback only.
        Err(_) => tokio::net::TcpStream::connect(("::1", port))
            .await
            .map_err(PortError::Unreachable),
    }
}

/// Forwards `req` to `port` of `sandbox` (see the [module docs](self)): the answer of the
/// sandbox's server, streamed, or why it could not be reached.
pub async fn forward(
    sandbox: &Sandbox,
    port: u16,
    mut req: Request<Body>,
) -> Result<Response<Body>, PortError> {
    let stream = connect(sandbox, port).await?;
    let io = hyper_util::rt::TokioIo::new(stream);
    let (mut send, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| PortError::Unreachable(io::Error::other(e)))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let path = req
        .uri()
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_owned();
    *req.uri_mut() =
        Uri::try_from(path).map_err(|e| PortError::Unreachable(io::Error::other(e)))?;
    let resp = send
        .send_request(req)
        .await
        .map_err(|e| PortError::Unreachable(io::Error::other(e)))?;
    Ok(resp.map(Body::new))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_of_the_provider_scheme_are_read() {
        assert_eq!(
            port_host("8080-abc123.e2b.localhost:41234", "e2b.localhost"),
            Some((8080, "abc123"))
        );
        assert_eq!(
            port_host("3000-sb-1.proxy.localhost", "proxy.localhost"),
            Some((3000, "sb-1"))
        );
        for bad in [
            "e2b.localhost:1",
            "x-abc.e2b.localhost",
            "8080-.e2b.localhost",
            "8080-a.b.e2b.localhost",
            "8080-abc.e2b.localhostx",
            "8080-abcxe2b.localhost",
            "99999-abc.e2b.localhost",
        ] {
            assert_eq!(port_host(bad, "e2b.localhost"), None, "{bad}");
        }
    }
}
