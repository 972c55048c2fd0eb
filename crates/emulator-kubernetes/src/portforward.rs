//! `pods/portforward` over WebSocket, as the API server proxies it to the kubelet's WebSocket
//! port-forward server (kubernetes `pkg/kubelet/cri/streaming/portforward/websocket.go`; the
//! `ports` option of `PodPortForwardOptions` becomes the kubelet's `port` query,
//! `pkg/registry/core/pod/strategy.go` `streamParams`):
//!
//! - before the upgrade: the pod missing (404), not scheduled (400), no port or a port that is
//!   not a number in 1..=65535 (400, `NewV4Options`' texts);
//! - the protocol `v4.channel.k8s.io` (binary channels; the base64 variant is not served);
//! - two channels per port, in the order asked: data (`2i`) and error (`2i + 1`); the first
//!   message on each is the port, 2 bytes little-endian, and nothing else (the official Python
//!   client's `PortForward._proxy` raises on any other first frame);
//! - data frames carry the bytes of one connection to `localhost:<port>` in the pod;
//! - a port nothing in the pod listens on: the text `error forwarding port <p> to pod <id>, uid
//!   : <runtime error>` on its error channel (`websocketStreamHandler.portForward`), then both
//!   channels end;
//! - the WebSocket closes once every port's connection has ended, or when the client goes away
//!   (the connections in the pod then see their peer close).
//!
//! What listens in a pod (no image runs, so the emulator knows its services): the legacy
//! runtime model on 8888 (in every pod, as the router already assumes), and sandboxd's
//! `ProcessService` on 9090 (its `--grpc-port` default) in a pod with a sandboxd container.

use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_websockets::Message;

use crate::cluster::Cluster;
use crate::exec::{Ws, handshake, upgraded};
use crate::pods::PodRun;
use crate::schema::PODS;
use crate::status;

/// The protocol the kubelet's WebSocket port-forward serves (its binary variant).
pub const PROTOCOL: &str = "v4.channel.k8s.io";

/// The ports of `ports` (repeated, each comma-separated), as `NewV4Options` parses them.
fn ports_of(q: &[(String, String)]) -> Result<Vec<u16>, String> {
    let values: Vec<&str> = q
        .iter()
        .filter(|(k, _)| k == "ports" || k == "port")
        .map(|(_, v)| v.as_str())
        .collect();
    if values.is_empty() {
        return Err("query parameter \"port\" is required".into());
    }
    let mut ports = Vec::new();
    for value in values {
        if value.is_empty() {
            return Err("query parameter \"port\" cannot be empty".into());
        }
        for p in value.split(',') {
            match p.parse::<u16>() {
                Ok(0) => return Err(format!("port \"{value}\" must be > 0")),
                Ok(n) => ports.push(n),
                Err(e) => return Err(format!("unable to parse \"{value}\" as a port: {e}")),
            }
        }
    }
    Ok(ports)
}

/// Serves one `pods/portforward` request on the pod `ns/name`.
pub async fn serve(
    cluster: Arc<Cluster>,
    pod: (&str, &str),
    q: &[(String, String)],
    mut request: Request,
) -> Response {
    let (ns, name) = pod;
    let Some(pod) = cluster.store.get(&PODS, ns, name) else {
        return status::not_found(&PODS, name).into_response();
    };
    if pod["spec"]["nodeName"].as_str().is_none_or(str::is_empty) {
        return status::bad_request(format!("pod {name} does not have a host assigned"))
            .into_response();
    }
    let ports = match ports_of(q) {
        Ok(p) => p,
        Err(e) => return status::bad_request(e).into_response(),
    };
    let (_, on_upgrade, answer) = match handshake(&mut request, &[PROTOCOL]) {
        Ok(h) => h,
        Err(r) => return r,
    };
    let run = cluster.pod(ns, name);
    tokio::spawn(async move {
        if let Some(ws) = upgraded(on_upgrade).await {
            forward(ws, run, ports).await;
        }
    });
    answer
}

fn frame(channel: usize, data: &[u8]) -> Message {
    let mut f = Vec::with_capacity(data.len() + 1);
    f.push(channel as u8);
    f.extend_from_slice(data);
    Message::binary(f)
}

/// The service listening on `port` in the pod, if any.
fn listener(run: &Arc<PodRun>, port: u16) -> Option<Router> {
    match port {
        crate::runtime::PORT => Some(crate::runtime::http(run.clone())),
        crate::sandboxd::GRPC_PORT if run.containers.iter().any(|c| c.sandboxd) => {
            Some(crate::sandboxd::grpc(run.clone()))
        }
        _ => None,
    }
}

/// The runtime's refusal of a port nothing listens on (containerd's CRI port-forward dials
/// `localhost:<port>` in the pod's network namespace), as the kubelet wraps it.
fn refused(run: Option<&PodRun>, port: u16) -> String {
    let id = run.map_or("", |r| r.uid.as_str());
    format!(
        "error forwarding port {port} to pod {id}, uid : failed to execute portforward in network namespace \"/var/run/netns/cni-{id}\": failed to connect to localhost:{port} inside namespace \"{id}\", IPv4: dial tcp4 127.0.0.1:{port}: connect: connection refused IPv6 dial tcp6 [::1]:{port}: connect: connection refused "
    )
}

async fn forward(ws: Ws, run: Option<Arc<PodRun>>, ports: Vec<u16>) {
    let (mut tx, mut rx) = ws.split();
    for (i, port) in ports.iter().enumerate() {
        for channel in [2 * i, 2 * i + 1] {
            if tx.send(frame(channel, &port.to_le_bytes())).await.is_err() {
                return;
            }
        }
    }
    let (ftx, mut frx) = tokio::sync::mpsc::channel::<Message>(16);
    let mut writers = Vec::new();
    let mut readers = tokio::task::JoinSet::new();
    for (i, &port) in ports.iter().enumerate() {
        let Some(router) = run.as_ref().and_then(|r| listener(r, port)) else {
            writers.push(None);
            let text = refused(run.as_deref(), port);
            if tx.send(frame(2 * i + 1, text.as_bytes())).await.is_err() {
                return;
            }
            continue;
        };
        let (ours, theirs) = tokio::io::duplex(64 << 10);
        tokio::spawn(execseam_emulator_kit::serve_stream(theirs, router));
        let (mut r, w) = tokio::io::split(ours);
        writers.push(Some(w));
        let ftx = ftx.clone();
        readers.spawn(async move {
            let mut buf = vec![0u8; 32 << 10];
            while let Ok(n @ 1..) = r.read(&mut buf).await {
                if ftx.send(frame(2 * i, &buf[..n])).await.is_err() {
                    return;
                }
            }
        });
    }
    drop(ftx);
    loop {
        tokio::select! {
            m = rx.next() => match m {
                Some(Ok(m)) if m.is_binary() || m.is_text() => {
                    let p: Bytes = m.into_payload().into();
                    let Some((&channel, data)) = p.split_first() else { continue };
                    let channel = usize::from(channel);
                    if channel % 2 == 0
                        && let Some(slot) = writers.get_mut(channel / 2)
                        && let Some(w) = slot.as_mut()
                        && w.write_all(data).await.is_err()
                    {
                        *slot = None;
                    }
                }
                Some(Ok(_)) => {}
                // The client went away: the connections in the pod end with it.
                _ => break,
            },
            f = frx.recv() => match f {
                Some(f) => {
                    if tx.send(f).await.is_err() {
                        break;
                    }
                }
                // Every port's connection has ended.
                None => break,
            },
        }
    }
    drop(writers);
    readers.shutdown().await;
    let _ = tx.close().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn ports_parse_as_the_kubelet_parses_them() {
        assert_eq!(
            ports_of(&q(&[("ports", "9090,8888")])),
            Ok(vec![9090, 8888])
        );
        assert_eq!(
            ports_of(&q(&[("ports", "1"), ("ports", "2")])),
            Ok(vec![1, 2])
        );
        assert!(ports_of(&q(&[])).unwrap_err().contains("is required"));
        assert!(
            ports_of(&q(&[("ports", "")]))
                .unwrap_err()
                .contains("cannot be empty")
        );
        assert!(
            ports_of(&q(&[("ports", "0")]))
                .unwrap_err()
                .contains("must be > 0")
        );
        assert!(
            ports_of(&q(&[("ports", "70000")]))
                .unwrap_err()
                .contains("unable to parse")
        );
    }
}
