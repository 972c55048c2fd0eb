//! Ids and tokens in the shapes the 1.6.4 client dispatches on.
//!
//! - V1 objects (`sb-`, `ta-`, `ap-`, `im-`, `en-`): the prefix, `-`, and 22 characters of
//!   `[0-9A-Za-z]`. The client routes a sandbox id of exactly that shape to the V1 backend
//!   (`modal/sandbox/_common.py` `_is_v1_sandbox_id`), every other id to V2.
//! - V2 sandboxes: `sb-` and a 26-character ULID (Crockford base32), the shape Modal's own test
//!   servicer uses for a V2 id (`sb-01ARZ3NDEKTSV4RRFFQ69G5FAV`, `py/test/conftest.py`).
//! - V2 tasks: `ta-`, a ULID, and the marker `V` the client tests for
//!   (`_task_command_router_client.py` `_is_v2_task_id`: starts with `ta-`, ends with `V`). The
//!   part between is inferred.
//! - Tokens: JWTs whose payload is base64url JSON with `exp` (the client decodes them without
//!   verifying, `_utils/auth_token_manager.py` `_decode_jwt`); the signature is random bytes, and
//!   the emulator accepts only tokens it issued.

use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

const BASE62: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
const CROCKFORD: &[u8] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// 64 random bits.
pub fn random_u64() -> u64 {
    execseam_emulator_kit::clock::random_u64()
}

/// `n` random bytes.
pub fn random_bytes(n: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(n + 8);
    while out.len() < n {
        out.extend_from_slice(&random_u64().to_le_bytes());
    }
    out.truncate(n);
    out
}

fn random_from(alphabet: &[u8], n: usize) -> String {
    (0..n)
        .map(|_| alphabet[(random_u64() % alphabet.len() as u64) as usize] as char)
        .collect()
}

/// A V1-shaped object id: `<prefix>-` and 22 base62 characters.
pub fn v1(prefix: &str) -> String {
    format!("{prefix}-{}", random_from(BASE62, 22))
}

/// A V1 task id that the client can never mistake for a V2 one (it does not end in `V`).
pub fn v1_task() -> String {
    loop {
        let id = v1("ta");
        if !id.ends_with('V') {
            return id;
        }
    }
}

/// A deterministic V1-shaped id for content (`im-` for an image definition).
pub fn v1_for(prefix: &str, content: &[u8]) -> String {
    // FNV-1a, widened: stable across runs, which `RandomState` is not.
    let mut out = String::from(prefix);
    out.push('-');
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for round in 0..4u8 {
        for b in content.iter().chain(std::iter::once(&round)) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        let mut x = h;
        for _ in 0..6 {
            if out.len() == prefix.len() + 1 + 22 {
                break;
            }
            out.push(BASE62[(x % 62) as usize] as char);
            x /= 62;
        }
    }
    out
}

/// A ULID: 48 bits of milliseconds and 80 random bits, 26 Crockford base32 characters.
pub fn ulid() -> String {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0);
    let rand = (u128::from(random_u64()) << 16) ^ u128::from(random_u64() & 0xffff);
    let v: u128 = (ms << 80) | (rand & ((1u128 << 80) - 1));
    (0..26)
        .rev()
        .map(|i| CROCKFORD[((v >> (i * 5)) & 31) as usize] as char)
        .collect()
}

/// A V2 sandbox id.
pub fn v2_sandbox() -> String {
    format!("sb-{}", ulid())
}

/// A V2 task id.
pub fn v2_task() -> String {
    format!("ta-{}V", ulid())
}

/// An unsigned-looking JWT with `claims` (a JSON object's members, without braces) and `exp`.
pub fn jwt(claims: &str, exp: u64) -> String {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
    let sep = if claims.is_empty() { "" } else { "," };
    let payload = URL_SAFE_NO_PAD.encode(format!("{{{claims}{sep}\"exp\":{exp}}}"));
    let sig = URL_SAFE_NO_PAD.encode(random_bytes(32));
    format!("{header}.{payload}.{sig}")
}

/// Seconds since the epoch, as a float (Modal's timestamps).
pub fn now_f64() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_v1_sandbox(id: &str) -> bool {
        // modal/sandbox/_common.py _is_v1_sandbox_id, transcribed.
        match id.split_once('-') {
            Some(("sb", rest)) => rest.len() == 22 && rest.bytes().all(|b| BASE62.contains(&b)),
            _ => false,
        }
    }

    #[test]
    fn ids_have_the_shapes_the_client_dispatches_on() {
        for _ in 0..200 {
            assert!(is_v1_sandbox(&v1("sb")));
            assert!(!is_v1_sandbox(&v2_sandbox()));
            let t = v2_task();
            assert!(t.starts_with("ta-") && t.ends_with('V'), "{t}");
            let t = v1_task();
            assert!(t.starts_with("ta-") && !t.ends_with('V'), "{t}");
        }
        assert_eq!(v2_sandbox().len(), 3 + 26);
        assert_eq!(v1_for("im", b"x"), v1_for("im", b"x"));
        assert_ne!(v1_for("im", b"x"), v1_for("im", b"y"));
        assert_eq!(v1_for("im", b"x").len(), 3 + 22);
    }

    #[test]
    fn a_jwt_payload_decodes_to_its_claims() {
        let t = jwt(r#""sub":"ta-1""#, 42);
        let parts: Vec<&str> = t.split('.').collect();
        assert_eq!(parts.len(), 3);
        let payload = URL_SAFE_NO_PAD.decode(parts[1]).unwrap();
        assert_eq!(payload, br#"{"sub":"ta-1","exp":42}"#);
    }
}
