//! Label and field selectors (`k8s.io/apimachinery/pkg/labels/selector.go`,
//! `pkg/fields/selector.go`).

use serde_json::Value;

use crate::schema::Resource;
use crate::status::{ApiError, bad_request};

/// One label requirement.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Req {
    Exists(String),
    NotExists(String),
    Eq(String, String),
    NotEq(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
}

/// A parsed label selector (requirements ANDed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LabelSelector(Vec<Req>);

fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 316
        && k.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/'))
}

fn valid_value(v: &str) -> bool {
    v.len() <= 63
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

impl LabelSelector {
    /// Parses `labelSelector`; an error is the API server's 400.
    pub fn parse(s: &str) -> Result<LabelSelector, ApiError> {
        let s = s.trim();
        if s.is_empty() {
            return Ok(LabelSelector::default());
        }
        let bad = |part: &str, why: &str| {
            bad_request(format!("unable to parse requirement: {why}: {part:?}"))
        };
        let mut reqs = Vec::new();
        for part in split_top(s) {
            let p = part.trim();
            if p.is_empty() {
                return Err(bad(part, "found '', expected: identifier"));
            }
            let req = if let Some(k) = p.strip_prefix('!') {
                Req::NotExists(k.trim().to_owned())
            } else if let Some((k, v)) = p.split_once("!=") {
                Req::NotEq(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, v)) = p.split_once("==") {
                Req::Eq(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, v)) = p.split_once('=') {
                Req::Eq(k.trim().to_owned(), v.trim().to_owned())
            } else if let Some((k, rest)) = split_set(p, " notin ") {
                Req::NotIn(k, set(rest).ok_or_else(|| bad(part, "malformed set"))?)
            } else if let Some((k, rest)) = split_set(p, " in ") {
                Req::In(k, set(rest).ok_or_else(|| bad(part, "malformed set"))?)
            } else {
                Req::Exists(p.to_owned())
            };
            let (key, values): (&str, Vec<&str>) = match &req {
                Req::Exists(k) | Req::NotExists(k) => (k, vec![]),
                Req::Eq(k, v) | Req::NotEq(k, v) => (k, vec![v.as_str()]),
                Req::In(k, vs) | Req::NotIn(k, vs) => (k, vs.iter().map(String::as_str).collect()),
            };
            if !valid_key(key) {
                return Err(bad(part, "invalid label key"));
            }
            if values.iter().any(|v| !valid_value(v)) {
                return Err(bad(part, "invalid label value"));
            }
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    /// Whether `labels` (an object's `metadata.labels`) match.
    pub fn matches(&self, labels: &Value) -> bool {
        let get = |k: &str| labels.get(k).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Req::Exists(k) => get(k).is_some(),
            Req::NotExists(k) => get(k).is_none(),
            Req::Eq(k, v) => get(k) == Some(v.as_str()),
            Req::NotEq(k, v) => get(k) != Some(v.as_str()),
            Req::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Req::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
        })
    }
}

fn split_set(p: &str, op: &str) -> Option<(String, String)> {
    let i = p.find(op)?;
    Some((
        p[..i].trim().to_owned(),
        p[i + op.len()..].trim().to_owned(),
    ))
}

fn set(s: String) -> Option<Vec<String>> {
    let inner = s.strip_prefix('(')?.strip_suffix(')')?;
    Some(
        inner
            .split(',')
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .collect(),
    )
}

/// A parsed field selector.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

/// The fields `res` can be selected on (`customresource/strategy.go objectMetaFieldsSet`,
/// `pod/strategy.go ToSelectableFields`).
fn selectable(res: &Resource) -> &'static [&'static str] {
    match res.kind {
        "Pod" => &[
            "metadata.name",
            "metadata.namespace",
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        "Namespace" => &["metadata.name", "status.phase"],
        _ => &["metadata.name", "metadata.namespace"],
    }
}

fn field_value(obj: &Value, field: &str) -> String {
    let mut v = obj;
    for part in field.split('.') {
        v = &v[part];
    }
    match v {
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Null if field == "spec.hostNetwork" => "false".into(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

impl FieldSelector {
    /// Parses `fieldSelector` for `res`; an unknown field is the API server's 400.
    pub fn parse(res: &Resource, s: &str) -> Result<FieldSelector, ApiError> {
        let s = s.trim();
        let mut out = Vec::new();
        if s.is_empty() {
            return Ok(FieldSelector(out));
        }
        for part in s.split(',') {
            let (field, eq, value) = if let Some((f, v)) = part.split_once("!=") {
                (f, false, v)
            } else if let Some((f, v)) = part.split_once("==") {
                (f, true, v)
            } else if let Some((f, v)) = part.split_once('=') {
                (f, true, v)
            } else {
                return Err(bad_request(format!(
                    "invalid selector: '{s}'; can't understand '{part}'"
                )));
            };
            let field = field.trim();
            if !selectable(res).contains(&field) {
                return Err(bad_request(format!("field label not supported: {field}")));
            }
            out.push((field.to_owned(), eq, value.trim().to_owned()));
        }
        Ok(FieldSelector(out))
    }

    /// Whether `obj` matches.
    pub fn matches(&self, obj: &Value) -> bool {
        self.0
            .iter()
            .all(|(f, eq, v)| (field_value(obj, f) == *v) == *eq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema;
    use serde_json::json;

    #[test]
    fn label_grammar() {
        let labels = json!({"app": "web", "tier": "front", "x": ""});
        for (sel, want) in [
            ("app=web", true),
            ("app==web,tier=front", true),
            ("app!=web", false),
            ("app in (web, api)", true),
            ("tier notin (back)", true),
            ("missing", false),
            ("!missing", true),
            ("app,!x", false),
            ("", true),
        ] {
            assert_eq!(
                LabelSelector::parse(sel).unwrap().matches(&labels),
                want,
                "{sel}"
            );
        }
        assert!(LabelSelector::parse("a=b c").is_err());
        assert!(LabelSelector::parse("a in b").is_err());
    }

    #[test]
    fn field_selectors_per_resource() {
        let pod =
            json!({"metadata": {"name": "p", "namespace": "d"}, "status": {"phase": "Running"}});
        let f =
            FieldSelector::parse(&schema::PODS, "status.phase=Running,metadata.name=p").unwrap();
        assert!(f.matches(&pod));
        assert!(FieldSelector::parse(&schema::CLAIMS, "status.phase=Running").is_err());
        assert!(
            !FieldSelector::parse(&schema::PODS, "status.phase!=Running")
                .unwrap()
                .matches(&pod)
        );
    }
}
