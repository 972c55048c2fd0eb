//! The adapter over TLS (the `tls` feature, which this crate's dev-dependency on itself enables
//! for its tests), against a rustls server that requires a client certificate signed by its CA,
//! as `dockerd --tlsverify` does (Docker docs, "Protect the Docker daemon socket": the daemon
//! trusts only clients with a certificate from that CA; the client checks the daemon's against
//! `ca.pem`). No engine speaks TLS on these machines; the server answers what the adapter asks
//! (`/_ping`, then the container list) as the Engine API documents them.
//!
//! The fixtures in `tests/tls/` are a test CA (`ca.pem`), the server's certificate for
//! `localhost` and `127.0.0.1`, and two `DOCKER_CERT_PATH` directories: `good/` (the client's
//! certificate from that CA) and `wrong-ca/` (the same client, a `ca.pem` of another CA).

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use execseam_core::{ErrorKind, ListFilter};
use execseam_docker::{DockerConfig, DockerProvider};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/tls")
        .join(name)
}

/// What the server answers to a container list.
#[derive(Clone, Copy)]
enum List {
    Empty,
    Endless,
}

/// A TLS engine on 127.0.0.1: counts the requests it read (each after a handshake that
/// presented a client certificate).
struct Engine {
    port: u16,
    requests: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn engine(list: List) -> Engine {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(fixture("ca.pem")).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .unwrap();
    let chain = CertificateDer::pem_file_iter(fixture("server.pem"))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(fixture("server-key.pem")).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let requests = Arc::new(AtomicUsize::new(0));
    let counted = requests.clone();
    let task = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, counted) = (acceptor.clone(), counted.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                assert!(tls.get_ref().1.peer_certificates().is_some());
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if tls.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                counted.fetch_add(1, Ordering::SeqCst);
                let line = String::from_utf8_lossy(&head);
                let path = line.split(' ').nth(1).unwrap_or("").to_owned();
                if path.ends_with("/_ping") {
                    let _ = tls
                        .write_all(b"HTTP/1.1 200 OK\r\nAPI-Version: 1.41\r\nContent-Length: 2\r\nConnection: close\r\n\r\nOK")
                        .await;
                } else if path.contains("/containers/json") {
                    match list {
                        List::Empty => {
                            let _ = tls
                                .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n[]")
                                .await;
                        }
                        List::Endless => {
                            let head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n[";
                            if tls.write_all(head).await.is_err() {
                                return;
                            }
                            let spaces = [b' '; 16 * 1024];
                            while tls.write_all(&spaces).await.is_ok() {}
                        }
                    }
                } else {
                    let _ = tls
                        .write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                        .await;
                }
                let _ = tls.shutdown().await;
            });
        }
    });
    Engine {
        port,
        requests,
        task,
    }
}

fn provider(engine: &Engine, certs: &str) -> Result<DockerProvider, execseam_core::Error> {
    DockerProvider::new(
        DockerConfig::new("unused:latest")
            .host(format!("tcp://127.0.0.1:{}", engine.port))
            .tls_verify(true)
            .cert_path(fixture(certs).to_string_lossy())
            .max_answer_bytes(64 * 1024)
            .request_timeout(Duration::from_secs(20)),
    )
}

#[tokio::test]
async fn the_engine_is_reached_over_tls_with_the_client_certificate() {
    let engine = engine(List::Empty).await;
    let listed = provider(&engine, "good")
        .unwrap()
        .list(&ListFilter::default())
        .await
        .unwrap();
    assert!(listed.is_empty());
    // `/_ping` (the version), then the list: both over TLS, each with the client certificate.
    assert_eq!(engine.requests.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn an_endless_answer_over_tls_ends_on_the_answer_cap() {
    let engine = engine(List::Endless).await;
    let provider = provider(&engine, "good").unwrap();
    let err = tokio::time::timeout(
        Duration::from_secs(30),
        provider.list(&ListFilter::default()),
    )
    .await
    .expect("the cap ends the answer, not a timeout")
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Protocol, "{err}");
    assert!(err.to_string().contains("larger than 65536 bytes"), "{err}");
}

#[tokio::test]
async fn an_engine_certificate_from_another_ca_is_refused() {
    let engine = engine(List::Empty).await;
    let err = provider(&engine, "wrong-ca")
        .unwrap()
        .list(&ListFilter::default())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.to_string().contains("certificate"), "{err}");
    assert_eq!(engine.requests.load(Ordering::SeqCst), 0, "no request sent");
}

#[tokio::test]
async fn missing_or_bad_certificates_are_invalid_config_before_any_connection() {
    let engine = engine(List::Empty).await;
    let empty = tempfile::tempdir().unwrap();
    let err = DockerProvider::new(
        DockerConfig::new("unused:latest")
            .host(format!("tcp://127.0.0.1:{}", engine.port))
            .tls_verify(true)
            .cert_path(empty.path().to_string_lossy()),
    )
    .expect_err("no ca.pem");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(err.to_string().contains("ca.pem"), "{err}");
    // A key that is not one.
    for name in ["ca.pem", "cert.pem"] {
        std::fs::copy(fixture("good").join(name), empty.path().join(name)).unwrap();
    }
    std::fs::write(empty.path().join("key.pem"), "not a key").unwrap();
    let err = DockerProvider::new(
        DockerConfig::new("unused:latest")
            .host(format!("https://127.0.0.1:{}", engine.port))
            .cert_path(empty.path().to_string_lossy()),
    )
    .expect_err("a bad key.pem");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
    assert!(err.to_string().contains("key.pem"), "{err}");
    assert_eq!(engine.requests.load(Ordering::SeqCst), 0);
}
