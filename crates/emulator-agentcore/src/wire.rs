//! JSON shapes, error responses, timestamps and identifiers, as the service spells them.

use std::time::SystemTime;

use axum::body::Body;
use axum::response::Response;
use http::{HeaderValue, StatusCode};
use serde_json::{Value, json};

/// A modelled exception of the code-interpreter operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exception {
    /// 400 `ValidationException` (with `reason`).
    Validation,
    /// **402** `ServiceQuotaExceededException`.
    ServiceQuotaExceeded,
    /// 403 `AccessDeniedException`.
    AccessDenied,
    /// 404 `ResourceNotFoundException`.
    ResourceNotFound,
    /// 409 `ConflictException`.
    Conflict,
    /// 429 `ThrottlingException`.
    Throttling,
    /// 500 `InternalServerException`.
    InternalServer,
}

impl Exception {
    /// The shape name (the `x-amzn-errortype` value).
    pub fn shape(self) -> &'static str {
        match self {
            Exception::Validation => "ValidationException",
            Exception::ServiceQuotaExceeded => "ServiceQuotaExceededException",
            Exception::AccessDenied => "AccessDeniedException",
            Exception::ResourceNotFound => "ResourceNotFoundException",
            Exception::Conflict => "ConflictException",
            Exception::Throttling => "ThrottlingException",
            Exception::InternalServer => "InternalServerException",
        }
    }

    /// The event-stream member name (the `:exception-type` value).
    pub fn member(self) -> &'static str {
        match self {
            Exception::Validation => "validationException",
            Exception::ServiceQuotaExceeded => "serviceQuotaExceededException",
            Exception::AccessDenied => "accessDeniedException",
            Exception::ResourceNotFound => "resourceNotFoundException",
            Exception::Conflict => "conflictException",
            Exception::Throttling => "throttlingException",
            Exception::InternalServer => "internalServerException",
        }
    }

    /// The HTTP status the model gives it.
    pub fn status(self) -> u16 {
        match self {
            Exception::Validation => 400,
            Exception::ServiceQuotaExceeded => 402,
            Exception::AccessDenied => 403,
            Exception::ResourceNotFound => 404,
            Exception::Conflict => 409,
            Exception::Throttling => 429,
            Exception::InternalServer => 500,
        }
    }

    /// The JSON body: `{"message"}`, plus `reason` for a validation error.
    pub fn body(self, message: &str) -> Value {
        match self {
            Exception::Validation => {
                json!({ "message": message, "reason": "FieldValidationFailed" })
            }
            _ => json!({ "message": message }),
        }
    }
}

/// 64 unpredictable bits (no RNG dependency).
pub fn random_u64() -> u64 {
    execseam_emulator_kit::clock::random_u64()
}

/// A session id as the service makes them: 26 characters of `[0-9A-Z]` (a ULID).
pub fn session_id() -> String {
    const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    let mut bits = (u128::from(random_u64()) << 64) | u128::from(random_u64());
    let mut s = String::with_capacity(26);
    for _ in 0..26 {
        s.push(ALPHABET[(bits & 31) as usize] as char);
        bits >>= 5;
        if bits == 0 {
            bits = u128::from(random_u64());
        }
    }
    s
}

/// A version-4 UUID (task ids, request ids).
pub fn uuid() -> String {
    let a = random_u64();
    let b = random_u64();
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0x0fff,
        0x8000 | (b >> 48) & 0x3fff,
        b & 0xffff_ffff_ffff
    )
}

/// `2025-08-01T12:34:56.789Z`.
pub fn iso8601(t: SystemTime) -> String {
    execseam_emulator_kit::clock::rfc3339(t, execseam_emulator_kit::clock::Fraction::Millis)
}

fn with_request_id(mut resp: Response) -> Response {
    if let Ok(v) = HeaderValue::from_str(&uuid()) {
        resp.headers_mut().insert("x-amzn-requestid", v);
    }
    resp
}

/// A JSON 200 response.
pub fn ok_json(value: &Value) -> Response {
    let mut resp = Response::new(Body::from(value.to_string()));
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    with_request_id(resp)
}

/// A restJson1 error: the status, `x-amzn-errortype: <Shape>`, and `{"message"}`.
pub fn error_response(status: u16, shape: &str, body: &Value) -> Response {
    let mut resp = Response::new(Body::from(body.to_string()));
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = resp.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Ok(v) = HeaderValue::from_str(shape) {
        h.insert("x-amzn-errortype", v);
    }
    with_request_id(resp)
}

/// A modelled exception as an HTTP error.
pub fn exception(e: Exception, message: &str) -> Response {
    error_response(e.status(), e.shape(), &e.body(message))
}

/// A `CodeInterpreterResult`.
pub fn result(content: Vec<Value>, structured: Option<Value>, is_error: bool) -> Value {
    let mut v = json!({ "content": content, "isError": is_error });
    if let Some(s) = structured {
        v["structuredContent"] = s;
    }
    v
}

/// A `text` content block.
pub fn text(s: &str) -> Value {
    json!({ "type": "text", "text": s })
}

/// A tool-level failure: a result with `isError: true` and the message as text.
pub fn tool_error(message: &str) -> Value {
    result(vec![text(message)], None, true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use std::time::UNIX_EPOCH;

    #[test]
    fn timestamps_are_iso8601() {
        assert_eq!(iso8601(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        let t = UNIX_EPOCH + Duration::from_millis(1_754_051_696_789);
        assert_eq!(iso8601(t), "2025-08-01T12:34:56.789Z");
        let leap = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(iso8601(leap), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn ids_have_the_service_shapes() {
        let s = session_id();
        assert_eq!(s.len(), 26);
        assert!(
            s.bytes()
                .all(|b| b.is_ascii_digit() || b.is_ascii_uppercase())
        );
        assert_ne!(s, session_id());
        let u = uuid();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
    }
}
