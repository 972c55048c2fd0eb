//! Server side of the Connect protocol with the JSON codec, as envd (connect-go) answers it:
//! unary errors with a mapped HTTP status and `{"code","message"}`, streams in HTTP 200 with
//! 5-byte envelopes and an end-stream envelope (flag 0x02) that always ends them.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Value, json};

/// Envelope flag of the end-stream message.
pub const END_STREAM: u8 = 0x02;

/// A Connect error: a code (wire spelling) and a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RpcError {
    /// `not_found`, `invalid_argument`, …
    pub code: &'static str,
    /// The message.
    pub message: String,
}

impl RpcError {
    pub fn new(code: &'static str, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
        }
    }

    /// connect-go's HTTP status for a unary error.
    pub fn http_status(&self) -> StatusCode {
        let s = match self.code {
            "canceled" => 499,
            "invalid_argument" | "failed_precondition" | "out_of_range" => 400,
            "deadline_exceeded" => 504,
            "not_found" => 404,
            "already_exists" | "aborted" => 409,
            "permission_denied" => 403,
            "resource_exhausted" => 429,
            "unimplemented" => 501,
            "unavailable" => 503,
            "unauthenticated" => 401,
            _ => 500, // unknown, internal, data_loss
        };
        StatusCode::from_u16(s).expect("a valid status")
    }

    fn json(&self) -> Value {
        json!({"code": self.code, "message": self.message})
    }

    /// The unary error answer.
    pub fn unary_response(&self) -> Response {
        (
            self.http_status(),
            [(header::CONTENT_TYPE, "application/json")],
            self.json().to_string(),
        )
            .into_response()
    }
}

/// A unary call's answer: 200 with the JSON result, or the error.
pub fn unary_json(r: Result<Value, RpcError>) -> Response {
    match r {
        Ok(v) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            v.to_string(),
        )
            .into_response(),
        Err(e) => e.unary_response(),
    }
}

/// A unary call's whole body (`invalid_argument` when it cannot be read).
pub async fn unary_body(body: Body) -> Result<Bytes, Response> {
    axum::body::to_bytes(body, usize::MAX)
        .await
        .map_err(|e| RpcError::new("invalid_argument", e.to_string()).unary_response())
}

/// A unary call's whole body with the JSON codec: connect-go's 415 for another Content-Type.
pub async fn json_unary_body(headers: &HeaderMap, body: Body) -> Result<Bytes, Response> {
    if content_type(headers) != "application/json" {
        return Err(unsupported_media_type("application/json"));
    }
    unary_body(body).await
}

/// Encodes one envelope.
pub fn envelope(flags: u8, payload: &[u8]) -> Bytes {
    let mut v = Vec::with_capacity(5 + payload.len());
    v.push(flags);
    v.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    v.extend_from_slice(payload);
    Bytes::from(v)
}

/// An envelope carrying a JSON message.
pub fn message(v: &Value) -> Bytes {
    envelope(0, v.to_string().as_bytes())
}

/// The end-stream envelope: `{}` on success, `{"error":{…}}` on failure.
pub fn end_stream(error: Option<&RpcError>) -> Bytes {
    let v = match error {
        None => json!({}),
        Some(e) => json!({"error": e.json()}),
    };
    envelope(END_STREAM, v.to_string().as_bytes())
}

/// Splits a request body into its envelopes' payloads (client-to-server streams).
pub fn envelopes(body: &[u8]) -> Result<Vec<Bytes>, RpcError> {
    let mut reader = EnvelopeReader::default();
    reader.push(body);
    let mut out = Vec::new();
    while let Some(m) = reader.next_message()? {
        out.push(m);
    }
    reader.finish()?;
    Ok(out)
}

/// The largest message of a client stream read (128 MiB, the emulator's bound on a whole
/// request elsewhere). envd sets no read limit (connect-go's default: none), but holds each
/// message whole too; the SDKs send 64 KiB of stdin per message.
pub const MAX_STREAM_MESSAGE: usize = execseam_emulator_kit::server::MAX_REQUEST_BODY;

/// Splits a client stream into its envelopes' payloads as its bytes arrive (connect-go's
/// `ClientStream.Receive`: one message at a time), holding at most one message and the piece
/// that completes it.
#[derive(Debug, Default)]
pub struct EnvelopeReader {
    buf: bytes::BytesMut,
}

impl EnvelopeReader {
    /// Adds bytes of the stream.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole message's payload, once it has come (end-stream envelopes are skipped).
    pub fn next_message(&mut self) -> Result<Option<Bytes>, RpcError> {
        loop {
            let Some(head) = self.buf.get(..5) else {
                return Ok(None);
            };
            let flags = head[0];
            let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
            if flags & 0x01 != 0 {
                return Err(RpcError::new(
                    "internal",
                    "protocol error: sent compressed message without compression support",
                ));
            }
            if len > MAX_STREAM_MESSAGE {
                return Err(RpcError::new(
                    "resource_exhausted",
                    format!(
                        "message size {len} is larger than configured max {MAX_STREAM_MESSAGE}"
                    ),
                ));
            }
            if self.buf.len() < 5 + len {
                return Ok(None);
            }
            let envelope = self.buf.split_to(5 + len).freeze();
            if flags & END_STREAM == 0 {
                return Ok(Some(envelope.slice(5..)));
            }
        }
    }

    /// The bytes held.
    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.buf.len()
    }

    /// The stream ended: a partial envelope is an error.
    pub fn finish(&self) -> Result<(), RpcError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(RpcError::new("invalid_argument", "truncated envelope"))
        }
    }
}

/// The media type of a request, without parameters.
pub fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// connect-go's answer to a request whose Content-Type it does not serve.
pub fn unsupported_media_type(accept: &'static str) -> Response {
    let mut r = StatusCode::UNSUPPORTED_MEDIA_TYPE.into_response();
    r.headers_mut()
        .insert("accept-post", HeaderValue::from_static(accept));
    r
}

/// A stream answer whose body is fully known (a start-up error, a client stream's reply).
pub fn stream_response(body: Vec<Bytes>) -> Response {
    let mut all = Vec::new();
    for b in body {
        all.extend_from_slice(&b);
    }
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/connect+json")],
        Body::from(all),
    )
        .into_response()
}

/// Parses a JSON message, the way protojson with `DiscardUnknown` would reject it.
pub fn parse(payload: &[u8]) -> Result<Value, RpcError> {
    let v: Value = serde_json::from_slice(payload)
        .map_err(|e| RpcError::new("invalid_argument", format!("unmarshal message: {e}")))?;
    if !v.is_object() {
        return Err(RpcError::new(
            "invalid_argument",
            "unmarshal message: not a JSON object",
        ));
    }
    Ok(v)
}

/// A field by its JSON name or its proto (snake_case) name.
pub fn field<'a>(v: &'a Value, json_name: &str, proto_name: &str) -> Option<&'a Value> {
    v.get(json_name)
        .or_else(|| v.get(proto_name))
        .filter(|v| !v.is_null())
}

/// An integer field given as a number or a string (protojson accepts both).
pub fn int_field(v: &Value, json_name: &str, proto_name: &str) -> Result<Option<i64>, RpcError> {
    match field(v, json_name, proto_name) {
        None => Ok(None),
        Some(Value::Number(n)) => n.as_i64().map(Some).ok_or_else(|| {
            RpcError::new("invalid_argument", format!("{json_name}: not an integer"))
        }),
        Some(Value::String(s)) => s
            .parse()
            .map(Some)
            .map_err(|_| RpcError::new("invalid_argument", format!("{json_name}: not an integer"))),
        Some(_) => Err(RpcError::new(
            "invalid_argument",
            format!("{json_name}: not an integer"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn framing_round_trips() {
        let mut body = envelope(0, b"{\"a\":1}").to_vec();
        body.extend_from_slice(&envelope(0, b"{}"));
        assert_eq!(
            envelopes(&body).unwrap(),
            vec![Bytes::from_static(b"{\"a\":1}"), Bytes::from_static(b"{}")]
        );
        assert!(envelopes(&body[..body.len() - 1]).is_err());
        assert_eq!(
            &end_stream(None)[..],
            &[2, 0, 0, 0, 2, b'{', b'}'][..],
            "a successful end-stream is exactly `02 00 00 00 02 {{}}`"
        );
        let e = RpcError::new("deadline_exceeded", "context deadline exceeded");
        assert_eq!(e.http_status(), StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(
            &end_stream(Some(&e))[5..],
            br#"{"error":{"code":"deadline_exceeded","message":"context deadline exceeded"}}"#
        );
    }

    /// D5 (issue 38): a client stream is split as it arrives, holding at most one message and
    /// the piece that completes it, whatever the stream's length (16 MiB here, in the SDK's
    /// 64 KiB messages, arriving in pieces of odd sizes); the code before held the whole body.
    #[test]
    fn a_client_stream_is_split_holding_one_message() {
        let message = envelope(0, &vec![b'a'; 64 << 10]);
        let mut stream = Vec::new();
        for _ in 0..256 {
            stream.extend_from_slice(&message);
        }
        stream.extend_from_slice(&end_stream(None));
        let mut reader = EnvelopeReader::default();
        let (mut got, mut most) = (0, 0);
        for piece in stream.chunks(7 << 10).chain(std::iter::once(&[][..])) {
            reader.push(piece);
            most = most.max(reader.held());
            while let Some(m) = reader.next_message().unwrap() {
                assert_eq!(m.len(), 64 << 10);
                got += 1;
            }
        }
        reader.finish().unwrap();
        assert_eq!(got, 256);
        assert!(most <= message.len() + (7 << 10), "held {most}");
        // A partial envelope at the end, a compressed one, an oversized one: errors.
        let mut cut = EnvelopeReader::default();
        cut.push(&message[..100]);
        assert!(cut.next_message().unwrap().is_none());
        assert!(cut.finish().is_err());
        let mut compressed = EnvelopeReader::default();
        compressed.push(&envelope(1, b"{}"));
        assert!(compressed.next_message().is_err());
        let mut huge = EnvelopeReader::default();
        huge.push(&[0, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(huge.next_message().unwrap_err().code, "resource_exhausted");
    }
}
