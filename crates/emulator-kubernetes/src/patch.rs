//! Patches: JSON merge patch (RFC 7386), JSON patch (RFC 6902), and a subset of the strategic
//! merge patch for built-in kinds (maps merge, lists of objects with a known merge key merge by
//! that key, other lists are replaced, `null` deletes; the `$patch`/`$retainKeys` directives are
//! not understood).

use serde_json::{Map, Value};

use crate::status::{ApiError, bad_request};

/// RFC 7386.
pub fn merge(target: &mut Value, patch: &Value) {
    match patch {
        Value::Object(p) => {
            if !target.is_object() {
                *target = Value::Object(Map::new());
            }
            let t = target.as_object_mut().expect("an object");
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        other => *target = other.clone(),
    }
}

/// The merge keys of the lists a strategic merge patch merges (`pkg/apis/core/types.go`
/// `patchMergeKey` tags, the ones in a Pod).
fn merge_key(field: &str) -> Option<&'static str> {
    match field {
        "containers"
        | "initContainers"
        | "ephemeralContainers"
        | "env"
        | "volumes"
        | "volumeMounts"
        | "imagePullSecrets" => Some(match field {
            "volumeMounts" => "mountPath",
            _ => "name",
        }),
        "ports" => Some("containerPort"),
        "conditions" => Some("type"),
        "ownerReferences" => Some("uid"),
        _ => None,
    }
}

/// The strategic merge patch subset (see the module docs).
pub fn strategic(target: &mut Value, patch: &Value) {
    let (Value::Object(p), true) = (patch, target.is_object()) else {
        *target = patch.clone();
        return;
    };
    let t = target.as_object_mut().expect("an object");
    for (k, v) in p {
        if v.is_null() {
            t.remove(k);
            continue;
        }
        match (merge_key(k), v, t.get_mut(k)) {
            (Some(key), Value::Array(items), Some(Value::Array(existing))) => {
                for item in items {
                    let id = &item[key];
                    match existing.iter_mut().find(|e| !id.is_null() && &e[key] == id) {
                        Some(e) => strategic(e, item),
                        None => existing.push(item.clone()),
                    }
                }
            }
            (_, Value::Object(_), Some(existing)) if existing.is_object() => strategic(existing, v),
            _ => {
                t.insert(k.clone(), v.clone());
            }
        }
    }
}

fn pointer_tokens(path: &str) -> Result<Vec<String>, ApiError> {
    if path.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = path.strip_prefix('/') else {
        return Err(bad_request(format!("invalid JSON pointer {path:?}")));
    };
    Ok(rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect())
}

fn parent<'a>(doc: &'a mut Value, tokens: &[String]) -> Result<&'a mut Value, ApiError> {
    let mut v = doc;
    for t in tokens {
        v = match v {
            Value::Object(m) => m
                .get_mut(t)
                .ok_or_else(|| bad_request(format!("doc is missing path: {t}")))?,
            Value::Array(a) => {
                let i: usize = t
                    .parse()
                    .map_err(|_| bad_request(format!("invalid array index {t:?}")))?;
                a.get_mut(i)
                    .ok_or_else(|| bad_request(format!("array index {i} out of bounds")))?
            }
            _ => return Err(bad_request(format!("doc is missing path: {t}"))),
        };
    }
    Ok(v)
}

fn add(doc: &mut Value, path: &str, value: Value) -> Result<(), ApiError> {
    let tokens = pointer_tokens(path)?;
    let Some((last, head)) = tokens.split_last() else {
        *doc = value;
        return Ok(());
    };
    match parent(doc, head)? {
        Value::Object(m) => {
            m.insert(last.clone(), value);
        }
        Value::Array(a) => {
            if last == "-" {
                a.push(value);
            } else {
                let i: usize = last
                    .parse()
                    .map_err(|_| bad_request(format!("invalid array index {last:?}")))?;
                if i > a.len() {
                    return Err(bad_request(format!("array index {i} out of bounds")));
                }
                a.insert(i, value);
            }
        }
        _ => return Err(bad_request(format!("doc is missing path: {path}"))),
    }
    Ok(())
}

fn remove(doc: &mut Value, path: &str) -> Result<Value, ApiError> {
    let tokens = pointer_tokens(path)?;
    let Some((last, head)) = tokens.split_last() else {
        return Err(bad_request("cannot remove the whole document"));
    };
    match parent(doc, head)? {
        Value::Object(m) => m.remove(last).ok_or_else(|| {
            bad_request(format!(
                "unable to remove nonexistent key: {last}: missing value"
            ))
        }),
        Value::Array(a) => {
            let i: usize = last
                .parse()
                .map_err(|_| bad_request(format!("invalid array index {last:?}")))?;
            if i >= a.len() {
                return Err(bad_request(format!("array index {i} out of bounds")));
            }
            Ok(a.remove(i))
        }
        _ => Err(bad_request(format!("doc is missing path: {path}"))),
    }
}

/// RFC 6902.
pub fn json_patch(doc: &mut Value, ops: &Value) -> Result<(), ApiError> {
    let Some(ops) = ops.as_array() else {
        return Err(bad_request("the JSON patch is not an array of operations"));
    };
    for op in ops {
        let path = op["path"].as_str().unwrap_or("");
        let from = op["from"].as_str().unwrap_or("");
        match op["op"].as_str().unwrap_or("") {
            "add" => add(doc, path, op["value"].clone())?,
            "remove" => {
                remove(doc, path)?;
            }
            "replace" => {
                remove(doc, path)?;
                add(doc, path, op["value"].clone())?;
            }
            "move" => {
                let v = remove(doc, from)?;
                add(doc, path, v)?;
            }
            "copy" => {
                let v = doc
                    .pointer(from)
                    .cloned()
                    .ok_or_else(|| bad_request(format!("doc is missing from path: {from}")))?;
                add(doc, path, v)?;
            }
            "test" => {
                if doc.pointer(path) != Some(&op["value"]) {
                    return Err(bad_request(format!("testing value {path} failed")));
                }
            }
            other => return Err(bad_request(format!("unexpected kind: {other}"))),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_rfc_7386() {
        let mut t = json!({"a": "b", "c": {"d": "e", "f": "g"}});
        merge(&mut t, &json!({"a": "z", "c": {"f": null}}));
        assert_eq!(t, json!({"a": "z", "c": {"d": "e"}}));
        let mut t = json!({"a": [1, 2]});
        merge(&mut t, &json!({"a": [3]}));
        assert_eq!(t, json!({"a": [3]}));
    }

    #[test]
    fn json_patch_rfc_6902() {
        let mut t = json!({"spec": {"replicas": 1}, "l": [1, 2]});
        json_patch(
            &mut t,
            &json!([{"op": "replace", "path": "/spec/replicas", "value": 3},
                    {"op": "add", "path": "/l/-", "value": 9},
                    {"op": "remove", "path": "/l/0"},
                    {"op": "test", "path": "/spec/replicas", "value": 3}]),
        )
        .unwrap();
        assert_eq!(t, json!({"spec": {"replicas": 3}, "l": [2, 9]}));
        assert!(json_patch(&mut t, &json!([{"op": "remove", "path": "/nope"}])).is_err());
    }

    #[test]
    fn strategic_merges_containers_by_name() {
        let mut t = json!({"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}});
        strategic(
            &mut t,
            &json!({"spec": {"containers": [{"name": "b", "image": "z"}]}}),
        );
        assert_eq!(t["spec"]["containers"][1]["image"], "z");
        assert_eq!(t["spec"]["containers"][0]["image"], "x");
    }
}
