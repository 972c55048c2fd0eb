//! Tunnels: `POST /v1/sandbox/{id}/tunnel/{port}` creates (or returns the one already recorded
//! for the port) an ephemeral tunnel, `DELETE` removes it, and a request whose `Host` is the
//! tunnel's hostname goes to that port of the sandbox.
//!
//! The bridge (`packages/sandbox/src/bridge/routes.ts`, `tunnel_create`/`tunnel_destroy`) answers
//! `sandbox.tunnels.get(port, options)`: the document's `Tunnel {id, port, url, hostname,
//! createdAt, name?}` ("Create or reuse a tunnel for a sandbox port"; "Omit `name` for an
//! ephemeral `*.trycloudflare.com` tunnel"). The service's URL is
//! `https://<random>.trycloudflare.com`, which cannot resolve offline; here it is
//! `http://{port}-{random}.trycloudflare.localhost:<emulator port>` (RFC 6761: `*.localhost` is
//! loopback), forwarded by the kit's `ports::forward` to the sandbox's own listener only. A
//! tunnel is public, as a quick tunnel is (no token). A named tunnel needs a Cloudflare zone:
//! it stays the documented 502 `tunnel_error`. Inferred: a 502 from the tunnel when nothing
//! listens on the port, or after the tunnel is deleted (a 404 then: no such hostname).

use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Body;
use axum::http::{Method, Request, Response, header};
use execseam_emulator_kit::clock::hex_id;
use execseam_emulator_kit::ports;
use execseam_emulator_kit::util::rfc3339;

use super::routes::{MAX_BODY, read_body};
use super::wire::{empty, error_json, json};
use super::{Entry, State};

/// The domain of the emulator's tunnel hostnames.
pub(crate) const TUNNEL_DOMAIN: &str = "trycloudflare.localhost";

/// One tunnel of a sandbox.
#[derive(Clone, Debug)]
pub(crate) struct Tunnel {
    id: String,
    hostname: String,
    created: SystemTime,
}

/// `POST`/`DELETE /v1/sandbox/{id}/tunnel/{port}` (the port already checked).
pub(crate) async fn route(
    state: &State,
    entry: Arc<Entry>,
    req: Request<Body>,
    port: u16,
) -> Response<Body> {
    if req.method() == Method::DELETE {
        // "deleted or already absent": 204 either way.
        entry.tunnels.lock().expect("tunnels").remove(&port);
        return empty(204);
    }
    let raw = read_body(req, MAX_BODY).await.unwrap_or_default();
    let text = String::from_utf8_lossy(&raw);
    let mut named = false;
    if !text.trim().is_empty() {
        match serde_json::from_str::<serde_json::Value>(&text) {
            Err(_) => return error_json("Invalid JSON body", "invalid_request", 400),
            Ok(v) => match v.as_object().and_then(|o| o.get("name")) {
                Some(serde_json::Value::String(_)) => named = true,
                Some(_) => {
                    return error_json(
                        "name must be a string when provided",
                        "invalid_request",
                        400,
                    );
                }
                None => {}
            },
        }
    }
    if named {
        return error_json(
            "tunnel failed: named tunnels need a Cloudflare zone, which the emulator does not have",
            "tunnel_error",
            502,
        );
    }
    let t = entry
        .tunnels
        .lock()
        .expect("tunnels")
        .entry(port)
        .or_insert_with(|| {
            let id = hex_id(16);
            Tunnel {
                hostname: format!("{port}-{id}.{TUNNEL_DOMAIN}"),
                id,
                created: SystemTime::now(),
            }
        })
        .clone();
    let base = state.shell.base_url();
    let emulator_port = base.rsplit_once(':').map_or("80", |(_, p)| p);
    json(
        &serde_json::json!({
            "id": t.id,
            "port": port,
            "url": format!("http://{}:{emulator_port}", t.hostname),
            "hostname": t.hostname,
            "createdAt": rfc3339(t.created),
        }),
        200,
    )
}

/// A request to a tunnel's hostname, forwarded to its sandbox's port; `None` for any other host.
pub(crate) async fn proxy(
    state: &State,
    req: Request<Body>,
) -> Result<Response<Body>, Request<Body>> {
    let target = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| ports::port_host(h, TUNNEL_DOMAIN))
        .map(|(port, id)| (port, format!("{port}-{id}.{TUNNEL_DOMAIN}")));
    let Some((port, hostname)) = target else {
        return Err(req);
    };
    let entries: Vec<Arc<Entry>> = state.shell.sandboxes().lock().values().cloned().collect();
    let Some(entry) = entries.into_iter().find(|e| {
        e.tunnels
            .lock()
            .expect("tunnels")
            .get(&port)
            .is_some_and(|t| t.hostname == hostname)
    }) else {
        return Ok(error_json("no such tunnel", "tunnel_error", 404));
    };
    Ok(match ports::forward(&entry.sandbox, port, req).await {
        Ok(r) => r,
        Err(e) => error_json(&format!("tunnel: {e}"), "tunnel_error", 502),
    })
}
