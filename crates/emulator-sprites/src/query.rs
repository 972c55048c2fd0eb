//! `application/x-www-form-urlencoded` query strings with repeated keys (`cmd=a&cmd=b`), as Go's
//! `url.Values` reads them.

/// The decoded pairs, in order.
#[derive(Clone, Debug, Default)]
pub(crate) struct Query(Vec<(String, String)>);

impl Query {
    pub(crate) fn parse(raw: Option<&str>) -> Query {
        Query(execseam_emulator_kit::util::form_pairs(raw.unwrap_or("")))
    }

    /// The first value of `key` (Go's `Get`: "" when absent).
    pub(crate) fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Every value of `key`.
    pub(crate) fn all(&self, key: &str) -> Vec<String> {
        self.0
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, v)| v.clone())
            .collect()
    }

    pub(crate) fn has(&self, key: &str) -> bool {
        self.0.iter().any(|(k, _)| k == key)
    }

    /// `key` is exactly `true`.
    pub(crate) fn flag(&self, key: &str) -> bool {
        self.get(key) == Some("true")
    }
}

/// A request's query and its JSON body, either of which may carry a parameter (the SDKs send
/// kill's `signal` and delete's `path` one way or the other); the query wins, and a body that is
/// not JSON (or is longer than 1 MiB) counts as none.
pub(crate) struct Params {
    query: Query,
    body: serde_json::Value,
}

impl Params {
    pub(crate) async fn read(req: axum::extract::Request) -> Params {
        let query = Query::parse(req.uri().query());
        let body = axum::body::to_bytes(req.into_body(), 1 << 20)
            .await
            .unwrap_or_default();
        let body = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
        Params { query, body }
    }

    /// `key` from the query, else the body's string `key`.
    pub(crate) fn get(&self, key: &str) -> Option<String> {
        self.query
            .get(key)
            .map(str::to_owned)
            .or_else(|| self.body[key].as_str().map(str::to_owned))
    }

    /// `key=true` in the query or `"key": true` in the body.
    pub(crate) fn flag(&self, key: &str) -> bool {
        self.query.flag(key) || self.body[key].as_bool() == Some(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeated_keys_and_escapes() {
        let q = Query::parse(Some(
            "cmd=sh&cmd=-c&cmd=echo+%22a%26b%22&env=K%3DV%3D1&stdin=true&x",
        ));
        assert_eq!(q.all("cmd"), ["sh", "-c", "echo \"a&b\""]);
        assert_eq!(q.get("env"), Some("K=V=1"));
        assert!(q.flag("stdin"));
        assert!(q.has("x"));
        let q = Query::parse(Some("a=%zz%4&b=%C3%A9"));
        assert_eq!((q.get("a"), q.get("b")), (Some("%zz%4"), Some("é")));
    }
}
