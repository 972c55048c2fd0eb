//! [`SecretEnv`]: environment variables kept in a configuration whose values never reach
//! `Debug` output or a log, so the configuration can derive `Debug`.

use std::collections::BTreeMap;
use std::fmt;

use secrecy::{ExposeSecret, SecretString};

/// Environment variables (name to value) whose values are secrets: `Debug` shows the names with
/// `<redacted>` for each value. The values are read only through [`SecretEnv::exposed`], where a
/// request is built.
#[derive(Clone, Default)]
pub struct SecretEnv(BTreeMap<String, SecretString>);

impl SecretEnv {
    /// Sets `key` to `value` (a later value for the same key replaces the earlier one).
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<String>) {
        self.0.insert(key.into(), SecretString::from(value.into()));
    }

    /// The variables with their values, for the request that sends them.
    pub fn exposed(&self) -> BTreeMap<String, String> {
        self.0
            .iter()
            .map(|(k, v)| (k.clone(), v.expose_secret().to_owned()))
            .collect()
    }

    /// The names, in order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// Whether no variable is set.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for SecretEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.keys().map(|k| (k, format_args!("<redacted>"))))
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_the_names_and_never_a_value() {
        let mut env = SecretEnv::default();
        env.insert("TOKEN", "hunter2");
        env.insert("MODE", "fast");
        env.insert("TOKEN", "hunter3");
        for d in [format!("{env:?}"), format!("{env:#?}")] {
            assert!(d.contains("TOKEN") && d.contains("MODE"), "{d}");
            assert!(!d.contains("hunter") && !d.contains("fast"), "{d}");
        }
        let exposed = env.exposed();
        assert_eq!(exposed["TOKEN"], "hunter3");
        assert_eq!(exposed["MODE"], "fast");
        assert!(!env.is_empty() && SecretEnv::default().is_empty());
        assert_eq!(env.keys().collect::<Vec<_>>(), ["MODE", "TOKEN"]);
    }
}
