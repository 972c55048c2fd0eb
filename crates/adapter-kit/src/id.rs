//! Random ids for sessions, temporary files and idempotency keys (not for secrets).

/// 64 random bits (`fastrand`'s per-thread generator, seeded from the OS's hasher keys): good for
/// ids that must not collide (sessions, temp files, idempotency keys), not for secrets.
pub fn random_u64() -> u64 {
    fastrand::u64(..)
}

/// A random lowercase hex id of `len` characters.
pub fn random_id(len: usize) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    (0..len)
        .map(|_| HEX[fastrand::usize(..16)] as char)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_ids_differ() {
        let a = random_id(20);
        let b = random_id(20);
        assert_eq!(a.len(), 20);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
