//! Kubernetes names and labels, checked before any request (the API server's 422 would come
//! after a round trip, and for a label on a create, after nothing was made).

/// An RFC 1123 DNS label: 1-63 of `[a-z0-9-]`, starting and ending alphanumeric (namespaces,
/// pods' hostnames, container names, the agent-sandbox objects this adapter names).
pub(crate) fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=63).contains(&b.len())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// An RFC 1123 subdomain: dot-separated DNS labels, at most 253 (object names).
pub(crate) fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// A label name part, or a label value when non-empty: at most 63 of `[A-Za-z0-9_.-]`, starting
/// and ending alphanumeric.
fn is_label_word(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=63).contains(&b.len())
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

/// Checks a label as the API server validates it (`IsQualifiedName` for the key, `IsValidLabelValue`
/// for the value): the message names the label, never more.
pub(crate) fn check_label(key: &str, value: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let key_ok = is_label_word(name) && prefix.is_none_or(is_dns_subdomain);
    if !key_ok {
        return Err(format!(
            "label key {key:?} is not a Kubernetes label name ([prefix/]name, the name 1-63 of A-Z a-z 0-9 - _ . starting and ending alphanumeric)"
        ));
    }
    if !(value.is_empty() || is_label_word(value)) {
        return Err(format!(
            "label {key:?}: the value is not a Kubernetes label value (at most 63 of A-Z a-z 0-9 - _ . starting and ending alphanumeric)"
        ));
    }
    Ok(())
}

/// A fresh object name: `execseam-` and 12 characters of `[a-z0-9]` (a DNS label, so it can be a
/// Pod's name and hostname too).
pub(crate) fn new_name() -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let tail: String = (0..12)
        .map(|_| ALPHABET[fastrand_index(ALPHABET.len())] as char)
        .collect();
    format!("execseam-{tail}")
}

/// agent-sandbox's `NameHash`: FNV-1a (32 bits) of the name, 8 lower-case hex digits.
pub(crate) fn fnv1a_hex(s: &str) -> String {
    let mut h: u32 = 0x811c_9dc5;
    for b in s.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    format!("{h:08x}")
}

fn fastrand_index(n: usize) -> usize {
    (execseam_adapter_kit::id::random_u64() % n as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_names() {
        assert!(is_dns_label("python-sandbox-pool"));
        for bad in ["", "-a", "a-", "A", "a_b", &"a".repeat(64)] {
            assert!(!is_dns_label(bad), "{bad:?}");
        }
        assert!(check_label("app.kubernetes.io/managed-by", "execseam").is_ok());
        assert!(check_label("execseam-suite", "").is_ok());
        assert!(check_label("team", "a-b_c.d").is_ok());
        for (k, v) in [
            ("", "x"),
            ("a/", "x"),
            ("Bad_Prefix/x", "x"),
            ("k", "-x"),
            ("k", "a b"),
            ("k", &"v".repeat(64)),
        ] {
            assert!(check_label(k, v).is_err(), "{k:?}={v:?}");
        }
        // The research note's vectors (a plain FNV-1a).
        assert_eq!(fnv1a_hex(""), "811c9dc5");
        assert_eq!(fnv1a_hex("a"), "e40c292c");
        assert_eq!(fnv1a_hex("python-sandbox-pool"), "00375482");
        let n = new_name();
        assert!(n.starts_with("execseam-") && is_dns_label(&n), "{n}");
        assert_ne!(n, new_name());
    }
}
