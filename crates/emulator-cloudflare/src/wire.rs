//! The bridge's helpers, reproduced from `@cloudflare/sandbox` 0.12.10 `src/bridge/helpers.ts`:
//! error bodies, base32 ids, `shellQuote`, `resolveWorkspacePath`, session id validation, the
//! exec SSE framing, and the streaming UTF-8 decode the SDK applies to command output.

use axum::body::Body;
use axum::http::{HeaderValue, Response, StatusCode, header};

/// `{"error":…,"code":…}` in the bridge's key order (`JSON.stringify({error, code})`).
pub fn error_body(error: &str, code: &str) -> String {
    format!(
        "{{\"error\":{},\"code\":{}}}",
        serde_json::Value::from(error),
        serde_json::Value::from(code)
    )
}

/// `{"error": …, "code": …}` with a status (`errorJson`).
pub fn error_json(error: &str, code: &str, status: u16) -> Response<Body> {
    let body = error_body(error, code);
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// `c.json(value)` (Hono: `application/json`, status 200 unless given).
pub fn json(value: &serde_json::Value, status: u16) -> Response<Body> {
    let mut r = Response::new(Body::from(value.to_string()));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

/// A plain text answer (Hono's `404 Not Found`, its default `Internal Server Error`, …).
pub fn text(body: &'static str, status: u16) -> Response<Body> {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=UTF-8"),
    );
    r
}

/// An empty answer with this status (204).
pub fn empty(status: u16) -> Response<Body> {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::NO_CONTENT);
    r
}

/// RFC 4648 base32, lowercase, no padding (`base32Encode`): 16 bytes give 26 characters.
pub fn base32(data: &[u8]) -> String {
    const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
    let mut out = String::new();
    let (mut bits, mut value) = (0u32, 0u32);
    for &b in data {
        value = (value << 8) | u32::from(b);
        bits += 8;
        while bits >= 5 {
            out.push(ALPHABET[((value >> (bits - 5)) & 31) as usize] as char);
            bits -= 5;
        }
        value &= (1 << bits) - 1;
    }
    if bits > 0 {
        out.push(ALPHABET[((value << (5 - bits)) & 31) as usize] as char);
    }
    out
}

/// The sandbox id rule of the bridge's first middleware: `^[a-z2-7]{1,128}$`.
pub fn valid_sandbox_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || (b'2'..=b'7').contains(&b))
}

/// `validateSessionId`: `^[a-zA-Z0-9._-]{1,128}$` and no `..`.
pub fn valid_session_id(id: &str) -> bool {
    (1..=128).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && !id.contains("..")
}

/// `shellQuote`: plain words unchanged, everything else in ANSI-C `$'…'` with `\\`, `'`, `\n`,
/// `\r`, `\t` escaped (other control characters pass through raw).
pub fn shell_quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b'@' | b'%' | b'+' | b'=' | b':' | b',' | b'.' | b'/' | b'-'
                )
        });
    if plain {
        return arg.to_owned();
    }
    let escaped = arg
        .replace('\\', "\\\\")
        .replace('\'', "\\'")
        .replace('\n', "\\n")
        .replace('\r', "\\r")
        .replace('\t', "\\t");
    format!("$'{escaped}'")
}

/// `resolveWorkspacePath`: relative paths are under `/workspace/`, `.`/`..` are resolved
/// lexically, and the result must be `/workspace` or below it (symlinks are not resolved).
pub fn resolve_workspace_path(user_path: &str) -> Option<String> {
    let abs = if user_path.starts_with('/') {
        user_path.to_owned()
    } else {
        format!("/workspace/{user_path}")
    };
    let resolved = execseam_emulator_kit::util::clean_path(&abs);
    (resolved == "/workspace" || resolved.starts_with("/workspace/")).then_some(resolved)
}

/// What Hono's `c.req.path` gives for a path with `%` escapes: `decodeURI`, which leaves the
/// escapes of reserved characters (`; / ? : @ & = + $ , #`) encoded; a malformed escape is
/// kept as it is.
pub fn decode_uri(path: &str) -> String {
    decode(path, b";/?:@&=+$,#")
}

/// What Hono's `c.req.query(name)` gives for a query value: `decodeURIComponent` (every valid
/// escape decoded, `/` included; hono `src/utils/url.ts` `_getQueryParam`), after `+` became a
/// space; a malformed escape is kept as it is.
pub fn decode_uri_component(value: &str) -> String {
    decode(value, b"")
}

/// Decodes the `%` escapes of `path` except those of the bytes in `keep`.
fn decode(path: &str, keep: &[u8]) -> String {
    if !path.contains('%') {
        return path.to_owned();
    }
    let b = path.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2]))
        {
            let v = h * 16 + l;
            if keep.contains(&v) {
                out.extend_from_slice(&b[i..i + 3]);
            } else {
                out.push(v);
            }
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| path.to_owned())
}

fn hex(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// One SSE event as the bridge's `writeSSE` frames it: `event: <name>\n` then one `data: ` line
/// per line of the payload, then a blank line.
pub fn sse_event(event: &str, data: &str) -> String {
    let payload: Vec<String> = data.split('\n').map(|l| format!("data: {l}")).collect();
    format!("event: {event}\n{}\n\n", payload.join("\n"))
}

/// Standard base64 with padding (`btoa`).
pub fn base64(data: &[u8]) -> String {
    base64::Engine::encode(&base64::engine::general_purpose::STANDARD, data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_26_base32_characters() {
        let id = base32(&[0xffu8; 16]);
        assert_eq!(id.len(), 26);
        assert!(valid_sandbox_id(&id));
        // RFC 4648 vectors, lowercased and unpadded.
        assert_eq!(base32(b"foobar"), "mzxw6ytboi");
        assert_eq!(base32(b"f"), "my");
        assert_eq!(base32(b"fo"), "mzxq");
    }

    #[test]
    fn shell_quote_matches_the_bridge() {
        assert_eq!(shell_quote("ls"), "ls");
        assert_eq!(shell_quote("a=b"), "a=b");
        assert_eq!(shell_quote(""), "$''");
        assert_eq!(shell_quote("it's"), "$'it\\'s'");
        assert_eq!(shell_quote("a\nb\\"), "$'a\\nb\\\\'");
        assert_eq!(shell_quote("~"), "$'~'");
    }

    #[test]
    fn workspace_paths() {
        assert_eq!(resolve_workspace_path("a/b").unwrap(), "/workspace/a/b");
        assert_eq!(
            resolve_workspace_path("/workspace/./x/../y").unwrap(),
            "/workspace/y"
        );
        assert_eq!(resolve_workspace_path("/workspace").unwrap(), "/workspace");
        assert!(resolve_workspace_path("/workspace/../etc").is_none());
        assert!(resolve_workspace_path("/workspacex").is_none());
        assert!(resolve_workspace_path("/tmp").is_none());
    }

    #[test]
    fn decode_uri_keeps_reserved_escapes() {
        assert_eq!(decode_uri("/a%20b/%C3%A9"), "/a b/é");
        assert_eq!(decode_uri("/a%2Fb%3F"), "/a%2Fb%3F");
        assert_eq!(decode_uri("/plain"), "/plain");
        assert_eq!(decode_uri_component("%2Ftmp%2Fa%2Cb%20c"), "/tmp/a,b c");
    }

    #[test]
    fn streaming_utf8_keeps_split_sequences_and_replaces_invalid_bytes() {
        // The output is decoded as `TextDecoder` with `{stream: true}` decodes it before the
        // bridge re-encodes it.
        use execseam_emulator_kit::stream::Utf8;
        let crab = "🦀".as_bytes();
        let mut d = Utf8::default();
        let mut s = d.push(&[b'a', crab[0], crab[1]]);
        s += &d.push(&[crab[2], crab[3], 0xff, b'b', 0xe2]);
        s += &d.finish();
        assert_eq!(s, "a🦀\u{FFFD}b\u{FFFD}");
        let mut d = Utf8::default();
        assert_eq!(d.push(b"a\0b\xffc\n"), "a\0b\u{FFFD}c\n");
    }

    #[test]
    fn sse_framing() {
        assert_eq!(
            sse_event("exit", "{\"exit_code\":0}"),
            "event: exit\ndata: {\"exit_code\":0}\n\n"
        );
        assert_eq!(sse_event("x", "a\nb"), "event: x\ndata: a\ndata: b\n\n");
    }
}
