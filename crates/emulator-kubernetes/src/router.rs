//! A model of the agent-sandbox router (`clients/python/agentic-sandbox-client/sandbox-router/
//! sandbox_router.py`, the one the `k8s-agent-sandbox` 1.0.8 sdist ships): bearer auth
//! (`ROUTER_AUTH_TOKEN`; checked before the routing headers), the routing headers and their
//! 400s, the timeout (`X-Sandbox-Timeout`, capped at 180 s), the 502/504/500 bodies, the raw path
//! forwarded. The backend is the pod whose IP `X-Sandbox-Pod-IP` names (pods' IPs are never
//! dialled: the router maps them to pods in memory); only port 8888, the runtime model's, answers.
//! Without a pod IP the router would dial the Sandbox's Service DNS name: Services are not
//! modelled, so that is the 502 of a name that does not resolve.
//!
//! The WebSocket route is not modelled (the SDK's commands and files do not use it).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::cluster::Cluster;

/// The router's state.
pub struct RouterState {
    pub(crate) cluster: Arc<Cluster>,
    /// `ROUTER_AUTH_TOKEN`.
    pub(crate) token: String,
}

/// The router's routes.
pub fn router(state: Arc<RouterState>) -> Router {
    Router::new().fallback(serve).with_state(state)
}

fn detail(code: u16, text: &str) -> Response {
    let mut r = (
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        json!({"detail": text}).to_string(),
    )
        .into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// Percent-encodes `s` (RFC 3986 unreserved kept).
pub fn quote(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn is_dns_label(s: &str) -> bool {
    crate::schema::is_dns_label(s)
}

/// `_check_router_auth`.
fn check_auth(headers: &HeaderMap, token: &str) -> Result<(), Response> {
    let Some(h) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return Err(detail(401, "Missing or invalid Authorization header."));
    };
    let parts: Vec<&str> = h.split_whitespace().collect();
    if parts.len() != 2 || !parts[0].eq_ignore_ascii_case("bearer") {
        return Err(detail(401, "Missing or invalid Authorization header."));
    }
    if parts[1] != token {
        return Err(detail(401, "Invalid token."));
    }
    Ok(())
}

struct Target {
    sandbox_id: String,
    namespace: String,
    port: u16,
    pod_ip: Option<IpAddr>,
}

/// `_resolve_target`.
fn resolve(headers: &HeaderMap) -> Result<Target, &'static str> {
    let get = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    let id = get("x-sandbox-id")
        .filter(|v| !v.is_empty())
        .ok_or("X-Sandbox-ID header is required.")?;
    if !is_dns_label(id) {
        return Err("Invalid sandbox ID format.");
    }
    let ns = get("x-sandbox-namespace").unwrap_or("default");
    if !is_dns_label(ns) {
        return Err("Invalid namespace format.");
    }
    let port = match get("x-sandbox-port") {
        None => 8888,
        Some(p) => p
            .trim()
            .parse::<i64>()
            .ok()
            .filter(|p| (1..=65535).contains(p))
            .map(|p| p as u16)
            .ok_or("Invalid port format.")?,
    };
    let pod_ip = match get("x-sandbox-pod-ip").filter(|v| !v.is_empty()) {
        None => None,
        Some(v) => {
            let ip: IpAddr = v.parse().map_err(|_| "Invalid target IP address format.")?;
            let bad = ip.is_loopback()
                || ip.is_multicast()
                || ip.is_unspecified()
                || match ip {
                    IpAddr::V4(v4) => v4.is_link_local(),
                    IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) == 0xfe80,
                };
            if bad {
                return Err("Invalid target IP address.");
            }
            Some(ip)
        }
    };
    Ok(Target {
        sandbox_id: id.to_owned(),
        namespace: ns.to_owned(),
        port,
        pod_ip,
    })
}

/// `_get_request_timeout`: absent, invalid or not positive is 180; more is capped at 180.
fn timeout(headers: &HeaderMap) -> Duration {
    let max = 180.0;
    let v = headers
        .get("x-sandbox-timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|v| v.is_finite() && *v > 0.0)
        .map_or(max, |v| v.min(max));
    Duration::from_secs_f64(v)
}

async fn serve(State(state): State<Arc<RouterState>>, request: Request) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    if path == "/healthz" && method == Method::GET {
        let mut r = (StatusCode::OK, json!({"status": "ok"}).to_string()).into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        return r;
    }
    if !matches!(
        method,
        Method::GET | Method::POST | Method::PUT | Method::DELETE | Method::PATCH
    ) {
        return detail(405, "Method Not Allowed");
    }
    if let Err(r) = check_auth(request.headers(), &state.token) {
        return r;
    }
    let target = match resolve(request.headers()) {
        Ok(t) => t,
        Err(m) => return detail(400, m),
    };
    let unreachable = || {
        detail(
            502,
            &format!(
                "Could not connect to the backend sandbox: {}",
                target.sandbox_id
            ),
        )
    };
    // The raw path and query, as the client sent them (`scope["raw_path"]`).
    let raw = request
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| path.clone());
    let run = match target.pod_ip {
        Some(ip) => state.cluster.pod_by_ip(&ip.to_string()),
        None => None,
    };
    let _ = &target.namespace;
    let Some(run) = run else {
        return unreachable();
    };
    if target.port != crate::runtime::PORT {
        return unreachable();
    }
    let limit = timeout(request.headers());
    let headers = request.headers().clone();
    let body = match axum::body::to_bytes(request.into_body(), 512 << 20).await {
        Ok(b) => b,
        Err(_) => return detail(500, "An internal error occurred in the proxy."),
    };
    match tokio::time::timeout(
        limit,
        crate::runtime::handle(run, method, &raw, &headers, body),
    )
    .await
    {
        Ok(mut r) => {
            // Hop-by-hop headers are not passed back.
            for h in ["connection", "keep-alive", "transfer-encoding"] {
                r.headers_mut().remove(h);
            }
            r
        }
        Err(_) => detail(
            504,
            &format!(
                "Timed out waiting for the backend sandbox: {}",
                target.sandbox_id
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn routing_headers_as_the_router_checks_them() {
        let r = |p: &[(&str, &str)]| resolve(&headers(p)).err();
        assert_eq!(r(&[]), Some("X-Sandbox-ID header is required."));
        assert_eq!(
            r(&[("x-sandbox-id", "Bad_ID")]),
            Some("Invalid sandbox ID format.")
        );
        assert_eq!(
            r(&[("x-sandbox-id", "a"), ("x-sandbox-port", "0")]),
            Some("Invalid port format.")
        );
        assert_eq!(
            r(&[("x-sandbox-id", "a"), ("x-sandbox-pod-ip", "127.0.0.1")]),
            Some("Invalid target IP address.")
        );
        assert_eq!(
            r(&[("x-sandbox-id", "a"), ("x-sandbox-pod-ip", "nope")]),
            Some("Invalid target IP address format.")
        );
        assert!(r(&[("x-sandbox-id", "a"), ("x-sandbox-pod-ip", "10.244.0.3")]).is_none());
        assert_eq!(
            timeout(&headers(&[("x-sandbox-timeout", "999")])),
            Duration::from_secs(180)
        );
        assert_eq!(
            timeout(&headers(&[("x-sandbox-timeout", "60")])),
            Duration::from_secs(60)
        );
        assert_eq!(
            timeout(&headers(&[("x-sandbox-timeout", "-1")])),
            Duration::from_secs(180)
        );
        assert!(check_auth(&headers(&[("authorization", "bearer tok")]), "tok").is_ok());
        assert!(check_auth(&headers(&[("authorization", "Bearer no")]), "tok").is_err());
    }
}
