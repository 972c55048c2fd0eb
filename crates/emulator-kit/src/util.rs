//! Small helpers shared by the fly and sprites emulators: RFC 3339 timestamps without a date-time
//! dependency, and ids.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::clock::{self, Fraction};

/// Seconds since the Unix epoch.
pub fn unix(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    }
}

/// `2026-01-05T10:30:00Z` (UTC, whole seconds).
pub fn rfc3339(t: SystemTime) -> String {
    clock::rfc3339(t, Fraction::None)
}

/// A fresh lowercase hex id of `len` characters (not cryptographic; ids only need to differ).
pub fn hex_id(len: usize) -> String {
    clock::hex_id(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_767_609_000);
        assert_eq!(rfc3339(t), "2026-01-05T10:30:00Z");
        let t = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339(t), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn ids_differ() {
        let (a, b) = (hex_id(14), hex_id(14));
        assert_eq!(a.len(), 14);
        assert_ne!(a, b);
    }
}
