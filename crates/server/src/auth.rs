//! Bearer tokens, hashed at rest: the token file holds `OWNER SHA256-HEX` lines, a request's
//! token is hashed and looked up, and its owner scopes every idempotency key and operation id.
//! A token is never kept, logged or compared in clear. Tokens are meant to be long random
//! strings (`openssl rand -hex 32`), for which an unsalted SHA-256 is a sufficient hash.

use std::collections::BTreeMap;
use std::path::Path;

use execseam_chrono_contract::wire;
use secrecy::{ExposeSecret, SecretString};

/// The hash stored for a token: SHA-256, lowercase hex.
pub fn hash_token(token: &SecretString) -> String {
    wire::sha256_hex(token.expose_secret().as_bytes())
}

/// Accepted token hashes and their owners.
#[derive(Clone, Default)]
pub struct Tokens {
    by_hash: BTreeMap<String, String>,
}

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field("owners", &self.by_hash.len())
            .finish()
    }
}

impl Tokens {
    /// No tokens.
    pub fn new() -> Tokens {
        Tokens::default()
    }

    /// Adds `owner` with the token whose [`hash_token`] is `hash`.
    pub fn insert_hash(&mut self, owner: &str, hash: &str) -> Result<(), String> {
        let h = hash
            .trim()
            .trim_start_matches("sha256:")
            .to_ascii_lowercase();
        if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(format!("the hash for owner {owner:?} is not 64 hex digits"));
        }
        if owner.is_empty() || owner.len() > 128 || !owner.bytes().all(|b| b.is_ascii_graphic()) {
            return Err("an owner is 1..=128 printable ASCII characters".into());
        }
        self.by_hash.insert(h, owner.to_owned());
        Ok(())
    }

    /// Adds `owner` with `token` (hashed here; the token is not kept).
    pub fn insert_token(&mut self, owner: &str, token: &SecretString) -> Result<(), String> {
        self.insert_hash(owner, &hash_token(token))
    }

    /// Reads a token file.
    pub fn load(path: &Path) -> Result<Tokens, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the token file {}: {e}", path.display()))?;
        let mut t = Tokens::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let mut parts = line.split_whitespace();
            let (Some(owner), Some(hash), None) = (parts.next(), parts.next(), parts.next()) else {
                return Err(format!(
                    "{}:{}: want `OWNER SHA256-HEX`",
                    path.display(),
                    n + 1
                ));
            };
            t.insert_hash(owner, hash)
                .map_err(|e| format!("{}:{}: {e}", path.display(), n + 1))?;
        }
        if t.by_hash.is_empty() {
            return Err(format!("the token file {} has no token", path.display()));
        }
        Ok(t)
    }

    /// The owner of `token`, if it is accepted.
    pub fn owner(&self, token: &SecretString) -> Option<&str> {
        self.by_hash.get(&hash_token(token)).map(String::as_str)
    }
}
