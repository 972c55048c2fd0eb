//! The smallest HTTP/1.1 client the suite needs to fetch an exposed port's URL: `GET` with the
//! headers the provider asked for, over plain TCP, answering the status and the body.
//!
//! A host under `.localhost` (and `localhost` itself) is loopback, as RFC 6761 §6.3 lets a
//! resolver decide without asking DNS (curl and browsers do; glibc here does not): the emulators
//! serve their providers' URL schemes under `*.localhost` names. `https` URLs are refused (an
//! offline emulator serves plain HTTP; a live provider's TLS URL needs a real client).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `GET url` with `headers`: the status and the body (chunked bodies decoded), within 10 s.
pub async fn get(url: &str, headers: &[(String, String)]) -> Result<(u16, Vec<u8>), String> {
    tokio::time::timeout(Duration::from_secs(10), fetch(url, headers))
        .await
        .map_err(|_| format!("GET {url}: no answer within 10 s"))?
}

async fn fetch(url: &str, headers: &[(String, String)]) -> Result<(u16, Vec<u8>), String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url}: only http:// URLs are fetched offline"))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => (
            h,
            p.parse::<u16>()
                .map_err(|_| format!("{url}: bad port {p:?}"))?,
        ),
        _ => (authority, 80),
    };
    let host_ip = host.trim_start_matches('[').trim_end_matches(']');
    let connect_to = if host_ip == "localhost" || host_ip.ends_with(".localhost") {
        "127.0.0.1".to_owned()
    } else {
        host_ip.to_owned()
    };
    let mut stream = tokio::net::TcpStream::connect((connect_to.as_str(), port))
        .await
        .map_err(|e| format!("connecting to {authority}: {e}"))?;
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    stream
        .write_all(req.as_bytes())
        .await
        .map_err(|e| format!("sending to {authority}: {e}"))?;
    let mut raw = Vec::new();
    stream
        .take(16 << 20)
        .read_to_end(&mut raw)
        .await
        .map_err(|e| format!("reading from {authority}: {e}"))?;
    parse(&raw)
}

fn parse(raw: &[u8]) -> Result<(u16, Vec<u8>), String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("the answer has no end of headers")?;
    let head = String::from_utf8_lossy(&raw[..end]);
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or("the answer has no status line")?;
    let chunked = lines.any(|l| {
        l.split_once(':').is_some_and(|(k, v)| {
            k.eq_ignore_ascii_case("transfer-encoding") && v.trim().eq_ignore_ascii_case("chunked")
        })
    });
    let body = &raw[end + 4..];
    if !chunked {
        return Ok((status, body.to_vec()));
    }
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        let line_end = body[at..]
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("a chunk without a size line")?;
        let size = std::str::from_utf8(&body[at..at + line_end])
            .ok()
            .and_then(|s| usize::from_str_radix(s.split(';').next()?.trim(), 16).ok())
            .ok_or("a bad chunk size")?;
        at += line_end + 2;
        if size == 0 {
            return Ok((status, out));
        }
        let chunk = body.get(at..at + size).ok_or("a cut chunk")?;
        out.extend_from_slice(chunk);
        at += size + 2;
    }
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn plain_and_chunked_bodies() {
        assert_eq!(
            parse(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi").unwrap(),
            (200, b"hi".to_vec())
        );
        assert_eq!(
            parse(b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
                .unwrap(),
            (404, b"abcde".to_vec())
        );
        assert!(parse(b"HTTP/1.1 200 OK\r\n").is_err());
    }
}
