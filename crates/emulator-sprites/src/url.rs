//! The sprite URL: every sprite has one (`url` in `SpriteInfo`, production
//! `https://{name}-{suffix}.sprites.app`), which routes HTTP to the sprite.
//!
//! - Port: the `http_port` of a running service ("HTTP port for proxy routing", the services API
//!   reference; docs.sprites.dev/concepts/services: a service "can receive the HTTP traffic that
//!   hits your Sprite's URL"), else 8080, the port of the networking page's example
//!   (`python -m http.server 8080`, then the URL; inferred: the docs also show the URL with
//!   `:8080` appended, which no SDK does, and say "(say, 3000 or 8080)").
//! - Auth: `url_settings.auth`, `sprite` (the default: "Requires Sprite token", the API's
//!   `Authorization: Bearer`) or `public`; set at create (`CreateSpriteRequest.url_settings`) or
//!   by `PUT /v1/sprites/{name}` (sprites-py `update_url_settings`). Anything else is a 400.
//! - `url_settings.private_access`: a string both SDKs send and read back (sprites-go `types.go`
//!   `URLSettings.PrivateAccess`, `omitempty`; sprites-py `types.py` `URLSettings`, `_utils.py`
//!   `parse_url_settings`), which neither the docs (docs.sprites.dev/reference/configuration
//!   lists `auth` only) nor the SDKs give values or a meaning for. Kept as sent and answered
//!   (absent until set, as `omitempty` serializes it); it changes nothing about the URL here. A
//!   value that is not a string is a 400 (inferred).
//!
//! Offline the URL is `http://{name}.sprites.localhost:<emulator port>`: the emulator's own
//! listener, told apart by the `Host` (RFC 6761 lets `*.localhost` resolve to loopback; a client
//! that does not can connect to the emulator with that `Host`). The request is forwarded by the
//! kit's `ports::forward` (the sprite's own listener only). Status codes for a closed port or a
//! refused token are not documented: 502 and the API's 401 (inferred).

use std::sync::Arc;

use axum::extract::{Request, State as AxState};
use axum::middleware::Next;
use axum::response::Response;
use execseam_emulator_kit::ports;
use http::StatusCode;
use serde_json::Value;

use crate::exec::{check_auth, json_response};
use crate::{State, wire};

/// The domain the offline URLs are under.
pub(crate) const URL_DOMAIN: &str = "sprites.localhost";

/// The port the URL routes to when no running service names an `http_port`.
pub(crate) const DEFAULT_HTTP_PORT: u16 = 8080;

/// What a request body's `url_settings` sets (`None`: left as it is).
#[derive(Default)]
pub(crate) struct UrlSettings {
    /// `auth`: `public` (true) or `sprite`.
    pub(crate) public: Option<bool>,
    /// `private_access`, as sent.
    pub(crate) private_access: Option<String>,
}

/// The `url_settings` of a request body; `Err` for a value the API does not take.
pub(crate) fn requested(req: &Value) -> Result<UrlSettings, Response> {
    let refuse = |why: String| Err(json_response(StatusCode::BAD_REQUEST, &wire::error(&why)));
    let settings = &req["url_settings"];
    let public = match &settings["auth"] {
        Value::Null => None,
        Value::String(a) if a == "sprite" => Some(false),
        Value::String(a) if a == "public" => Some(true),
        other => {
            return refuse(format!(
                "url_settings.auth must be sprite or public, not {other}"
            ));
        }
    };
    let private_access = match &settings["private_access"] {
        Value::Null => None,
        Value::String(p) => Some(p.clone()),
        other => {
            return refuse(format!(
                "url_settings.private_access must be a string, not {other}"
            ));
        }
    };
    Ok(UrlSettings {
        public,
        private_access,
    })
}

/// A request to a sprite's URL, routed to its port; any other request goes on to the API.
pub(crate) async fn route(st: AxState<Arc<State>>, req: Request, next: Next) -> Response {
    let name = req
        .headers()
        .get(http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(|h| h.rsplit_once(':').map_or(h, |(host, _)| host))
        .and_then(|h| h.strip_suffix(URL_DOMAIN)?.strip_suffix('.'))
        .filter(|n| !n.is_empty() && !n.contains('.'))
        .map(str::to_owned);
    let Some(name) = name else {
        return next.run(req).await;
    };
    let Some(sprite) = st.sprite(&name).filter(|s| s.is_alive()) else {
        return json_response(StatusCode::NOT_FOUND, &wire::error("sprite not found"));
    };
    if !sprite.url_public()
        && let Err(r) = check_auth(&st, req.headers())
    {
        return r;
    }
    let port = sprite.http_port().unwrap_or(DEFAULT_HTTP_PORT);
    match ports::forward(sprite.sandbox(), port, req).await {
        Ok(r) => r,
        Err(e) => json_response(
            StatusCode::BAD_GATEWAY,
            &wire::error(&format!("port {port}: {e}")),
        ),
    }
}
