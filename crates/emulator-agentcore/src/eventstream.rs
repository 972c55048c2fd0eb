//! The `application/vnd.amazon.eventstream` framing, written by hand (with `crc32fast`) so the
//! official parsers — the Rust SDK's and botocore's — are what proves it.
//!
//! A message is `total_len:u32 | headers_len:u32 | prelude_crc:u32 | headers | payload |
//! message_crc:u32`, big-endian; `prelude_crc` is the CRC-32 (IEEE) of the first 8 bytes and
//! `message_crc` the CRC-32 of everything before it. A header is `name_len:u8 | name |
//! value_type:u8 | value`; the service only uses strings (type 7: `len:u16 | bytes`).

/// A decoded message (used by the tests and by [`decode`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// The string headers, in order.
    pub headers: Vec<(String, String)>,
    /// The payload.
    pub payload: Vec<u8>,
}

impl Message {
    /// The value of header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

const STRING: u8 = 7;

/// Encodes one message with string headers.
pub fn frame(headers: &[(&str, &str)], payload: &[u8]) -> Vec<u8> {
    let mut hb = Vec::new();
    for (name, value) in headers {
        debug_assert!(name.len() <= 255 && value.len() <= i16::MAX as usize);
        hb.push(name.len() as u8);
        hb.extend_from_slice(name.as_bytes());
        hb.push(STRING);
        hb.extend_from_slice(&(value.len() as u16).to_be_bytes());
        hb.extend_from_slice(value.as_bytes());
    }
    let total = 12 + hb.len() + payload.len() + 4;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(&(total as u32).to_be_bytes());
    out.extend_from_slice(&(hb.len() as u32).to_be_bytes());
    let prelude_crc = crc32fast::hash(&out);
    out.extend_from_slice(&prelude_crc.to_be_bytes());
    out.extend_from_slice(&hb);
    out.extend_from_slice(payload);
    let message_crc = crc32fast::hash(&out);
    out.extend_from_slice(&message_crc.to_be_bytes());
    out
}

/// A `result` event carrying a JSON `CodeInterpreterResult`.
pub fn result_event(payload: &[u8]) -> Vec<u8> {
    frame(
        &[
            (":message-type", "event"),
            (":event-type", "result"),
            (":content-type", "application/json"),
        ],
        payload,
    )
}

/// A modelled exception event; `member` is the stream member name (`throttlingException`, …).
pub fn exception_event(member: &str, payload: &[u8]) -> Vec<u8> {
    frame(
        &[
            (":message-type", "exception"),
            (":exception-type", member),
            (":content-type", "application/json"),
        ],
        payload,
    )
}

/// The generic AWS error frame (`:message-type = error`).
pub fn error_message(code: &str, message: &str) -> Vec<u8> {
    frame(
        &[
            (":message-type", "error"),
            (":error-code", code),
            (":error-message", message),
        ],
        b"",
    )
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Decodes a whole body of messages, checking both CRCs of each.
pub fn decode(mut buf: &[u8]) -> Result<Vec<Message>, String> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        if buf.len() < 16 {
            return Err(format!("{} trailing bytes: a cut message", buf.len()));
        }
        let total = u32_at(buf, 0) as usize;
        let hlen = u32_at(buf, 4) as usize;
        if crc32fast::hash(&buf[..8]) != u32_at(buf, 8) {
            return Err("prelude CRC mismatch".into());
        }
        if total < 16 || total > buf.len() || hlen > total - 16 {
            return Err(format!(
                "bad lengths: total {total}, headers {hlen}, have {}",
                buf.len()
            ));
        }
        if crc32fast::hash(&buf[..total - 4]) != u32_at(buf, total - 4) {
            return Err("message CRC mismatch".into());
        }
        let mut h = &buf[12..12 + hlen];
        let mut headers = Vec::new();
        while !h.is_empty() {
            let n = h[0] as usize;
            let name =
                String::from_utf8_lossy(h.get(1..1 + n).ok_or("short header name")?).into_owned();
            h = &h[1 + n..];
            if h.first() != Some(&STRING) || h.len() < 3 {
                return Err(format!("header {name}: only string headers are expected"));
            }
            let len = u16::from_be_bytes([h[1], h[2]]) as usize;
            let value = String::from_utf8_lossy(h.get(3..3 + len).ok_or("short header value")?)
                .into_owned();
            h = &h[3 + len..];
            headers.push((name, value));
        }
        out.push(Message {
            headers,
            payload: buf[12 + hlen..total - 4].to_vec(),
        });
        buf = &buf[total..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_with_valid_crcs() {
        let a = result_event(br#"{"content":[]}"#);
        let b = exception_event("throttlingException", br#"{"message":"slow"}"#);
        let mut body = a.clone();
        body.extend_from_slice(&b);
        let msgs = decode(&body).unwrap();
        assert_eq!(msgs.len(), 2);
        assert_eq!(msgs[0].header(":event-type"), Some("result"));
        assert_eq!(msgs[0].payload, br#"{"content":[]}"#);
        assert_eq!(
            msgs[1].header(":exception-type"),
            Some("throttlingException")
        );
        assert_eq!(u32_at(&a, 0) as usize, a.len());
    }

    #[test]
    fn an_empty_message_matches_zlib_crc32() {
        // An empty message: 16 bytes; the CRCs were computed independently with Python zlib.crc32:
        // prelude 0x05c248eb, message 0x7d98c8ff.
        let m = frame(&[], b"");
        assert_eq!(
            m,
            [
                0, 0, 0, 16, 0, 0, 0, 0, 0x05, 0xc2, 0x48, 0xeb, 0x7d, 0x98, 0xc8, 0xff
            ]
        );
    }

    #[test]
    fn corruption_is_detected() {
        let mut m = result_event(b"{}");
        let last = m.len() - 1;
        m[last] ^= 1;
        assert!(decode(&m).unwrap_err().contains("message CRC"));
        let mut m = result_event(b"{}");
        m[9] ^= 1;
        assert!(decode(&m).unwrap_err().contains("prelude CRC"));
        let m = result_event(b"{}");
        assert!(decode(&m[..m.len() / 2]).is_err());
    }
}
