//! API errors as the API server writes them: `metav1.Status` bodies with the HTTP code
//! (k8s.io/apimachinery `pkg/api/errors/errors.go`).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::schema::Resource;

/// One failure: the HTTP code and the `Status` it answers with.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    /// The HTTP status.
    pub code: u16,
    /// `NotFound`, `AlreadyExists`, …
    pub reason: &'static str,
    /// The text.
    pub message: String,
    /// `details`, when the error has them.
    pub details: Option<Value>,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    /// The `Status` object.
    pub fn status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if self.reason.is_empty() {
            s.as_object_mut().expect("an object").remove("reason");
        }
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut r = (
            StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            self.status().to_string(),
        )
            .into_response();
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        r
    }
}

fn details(res: &Resource, name: &str) -> Value {
    let mut d = json!({"name": name, "kind": res.plural});
    if !res.group.is_empty() {
        d["group"] = json!(res.group);
    }
    d
}

/// `404 NotFound`: `sandboxclaims.extensions.agents.x-k8s.io "x" not found`.
pub fn not_found(res: &Resource, name: &str) -> ApiError {
    let message = format!("{} \"{name}\" not found", res.qualified());
    about(res, name, 404, "NotFound", message)
}

/// An error about the object `name` of `res`, with the object's `details`.
fn about(res: &Resource, name: &str, code: u16, reason: &'static str, message: String) -> ApiError {
    ApiError::new(code, reason, message).with_details(details(res, name))
}

/// `404` for a path the server does not serve (the generic handler's text).
pub fn no_route() -> ApiError {
    ApiError::new(
        404,
        "NotFound",
        "the server could not find the requested resource",
    )
    .with_details(json!({}))
}

/// `409 AlreadyExists`.
pub fn already_exists(res: &Resource, name: &str) -> ApiError {
    let message = format!("{} \"{name}\" already exists", res.qualified());
    about(res, name, 409, "AlreadyExists", message)
}

/// `409 Conflict`: the optimistic-lock message of the generic registry (`store.go`).
pub fn conflict(res: &Resource, name: &str) -> ApiError {
    conflict_because(
        res,
        name,
        "the object has been modified; please apply your changes to the latest version and try again",
    )
}

/// `409 Conflict` with a reason of its own.
pub fn conflict_because(res: &Resource, name: &str, why: &str) -> ApiError {
    let message = format!(
        "Operation cannot be fulfilled on {} \"{name}\": {why}",
        res.qualified()
    );
    about(res, name, 409, "Conflict", message)
}

/// One cause of an `Invalid` error.
#[derive(Clone, Debug, PartialEq)]
pub struct Cause {
    /// `FieldValueRequired`, `FieldValueInvalid`, `FieldValueNotSupported`, …
    pub reason: &'static str,
    /// The field path (`spec.warmPoolRef`).
    pub field: String,
    /// The text after the field.
    pub message: String,
}

/// `422 Invalid`: `SandboxClaim.extensions.agents.x-k8s.io "x" is invalid: <field>: <error>, …`.
pub fn invalid(res: &Resource, name: &str, causes: &[Cause]) -> ApiError {
    let text: Vec<String> = causes
        .iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect();
    let kind = if res.group.is_empty() {
        res.kind.to_owned()
    } else {
        format!("{}.{}", res.kind, res.group)
    };
    let message = match text.len() {
        1 => format!("{kind} \"{name}\" is invalid: {}", text[0]),
        _ => format!("{kind} \"{name}\" is invalid: [{}]", text.join(", ")),
    };
    let mut d = json!({"name": name, "kind": res.kind});
    if !res.group.is_empty() {
        d["group"] = json!(res.group);
    }
    d["causes"] = Value::Array(
        causes
            .iter()
            .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
            .collect(),
    );
    let mut e = ApiError::new(422, "Invalid", message);
    e.details = Some(d);
    e
}

/// `400 BadRequest` (no details).
pub fn bad_request(message: impl Into<String>) -> ApiError {
    ApiError::new(400, "BadRequest", message)
}

/// `410 Expired`: a watch from a compacted resource version.
pub fn expired(message: impl Into<String>) -> ApiError {
    ApiError::new(410, "Expired", message)
}

/// `401 Unauthorized`.
pub fn unauthorized() -> ApiError {
    ApiError::new(401, "Unauthorized", "Unauthorized")
}

/// `405 MethodNotAllowed`.
pub fn method_not_allowed(what: &str) -> ApiError {
    ApiError::new(
        405,
        "MethodNotAllowed",
        format!("the server does not allow this method on the requested resource{what}"),
    )
    .with_details(json!({}))
}

/// `415 UnsupportedMediaType` for a patch type the resource does not take (the negotiation
/// error's text).
pub fn unsupported_patch(content_type: &str, accepted: &[&str]) -> ApiError {
    ApiError::new(
        415,
        "UnsupportedMediaType",
        format!(
            "the body of the request was in an unknown format - accepted media types include: {}",
            accepted.join(", ")
        ),
    )
    .with_details(json!({"causes": [{"reason": "", "message": content_type}]}))
}

/// `500 InternalError`: `Internal error occurred: …` with the cause.
pub fn internal(message: impl Into<String>) -> ApiError {
    let m = message.into();
    ApiError::new(
        500,
        "InternalError",
        format!("Internal error occurred: {m}"),
    )
    .with_details(json!({"causes": [{"message": m}]}))
}

/// `503 ServiceUnavailable`.
pub fn unavailable(message: impl Into<String>) -> ApiError {
    ApiError::new(503, "ServiceUnavailable", message)
}

impl ApiError {
    /// The same with `details`.
    pub fn with_details(mut self, d: Value) -> ApiError {
        self.details = Some(d);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema;

    #[test]
    fn texts_as_apimachinery_writes_them() {
        let e = not_found(&schema::CLAIMS, "x");
        assert_eq!(
            e.status()["message"],
            "sandboxclaims.extensions.agents.x-k8s.io \"x\" not found"
        );
        assert_eq!(e.status()["details"]["kind"], "sandboxclaims");
        let e = not_found(&schema::PODS, "p");
        assert_eq!(e.status()["message"], "pods \"p\" not found");
        assert!(e.status()["details"].get("group").is_none());
        let e = invalid(
            &schema::CLAIMS,
            "c",
            &[Cause {
                reason: "FieldValueRequired",
                field: "spec.warmPoolRef".into(),
                message: "Required value".into(),
            }],
        );
        assert_eq!(
            e.status()["message"],
            "SandboxClaim.extensions.agents.x-k8s.io \"c\" is invalid: spec.warmPoolRef: Required value"
        );
    }
}
