//! Configuration variables: what an adapter reads ([`Var`], declared once in
//! [`Adapter::VARS`](crate::Adapter::VARS)) and one parser for them ([`Vars`]), with one
//! [`config_error`].
//!
//! An unset variable and an empty one (or one of only white space) are the same: unset, the
//! default applies. A value that does not parse is [`InvalidConfig`](execseam_core::ErrorKind::InvalidConfig)
//! naming the variable (and the value, unless the variable is a secret). Nothing here does I/O.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use execseam_core::Error;
use secrecy::SecretString;

/// What a configuration variable holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VarKind {
    /// Free text (a name, an id, a path).
    Text,
    /// A credential: read, never printed, never in an error.
    Secret,
    /// An endpoint's URL (what a test points at a dead port to take the endpoint away).
    Url,
    /// A whole number of seconds.
    Seconds,
    /// A number.
    Number,
    /// On or off (`1`, `true`, `yes`, `on` / `0`, `false`, `no`, `off`).
    Flag,
    /// One of the listed words.
    Choice(&'static [&'static str]),
}

/// One configuration variable an adapter reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Var {
    /// Its name (`E2B_API_KEY`).
    pub name: &'static str,
    /// What it holds.
    pub kind: VarKind,
    /// Whether the adapter cannot be configured without it.
    pub required: bool,
}

impl Var {
    const fn new(name: &'static str, kind: VarKind) -> Var {
        Var {
            name,
            kind,
            required: false,
        }
    }

    /// Free text.
    pub const fn text(name: &'static str) -> Var {
        Var::new(name, VarKind::Text)
    }

    /// A credential.
    pub const fn secret(name: &'static str) -> Var {
        Var::new(name, VarKind::Secret)
    }

    /// An endpoint's URL.
    pub const fn url(name: &'static str) -> Var {
        Var::new(name, VarKind::Url)
    }

    /// Whole seconds.
    pub const fn seconds(name: &'static str) -> Var {
        Var::new(name, VarKind::Seconds)
    }

    /// Whole seconds after which the provider itself kills each command, read as
    /// [`VarKind::Seconds`]: the host's deadline reaches such a timeout through
    /// [`deadline::provider_timeout`](crate::deadline::provider_timeout), not through the
    /// variable.
    pub const fn exec_timeout(name: &'static str) -> Var {
        Var::seconds(name)
    }

    /// A number.
    pub const fn number(name: &'static str) -> Var {
        Var::new(name, VarKind::Number)
    }

    /// On or off.
    pub const fn flag(name: &'static str) -> Var {
        Var::new(name, VarKind::Flag)
    }

    /// One of `choices`.
    pub const fn choice(name: &'static str, choices: &'static [&'static str]) -> Var {
        Var::new(name, VarKind::Choice(choices))
    }

    /// The same, required.
    #[must_use]
    pub const fn required(mut self) -> Var {
        self.required = true;
        self
    }
}

/// The names of `vars`, in order.
pub fn names(vars: &[Var]) -> Vec<&'static str> {
    vars.iter().map(|v| v.name).collect()
}

/// A configuration error of `provider`: [`ErrorKind::InvalidConfig`], operation `config`.
pub fn config_error(provider: &'static str, message: impl Into<String>) -> Error {
    Error::invalid_config(message).with_provider(provider)
}

/// How an adapter reads its variables: from a map, the process environment, or any lookup.
/// Each reader checks the variable is declared (a variable read but not declared is a bug: it
/// would be missing from the docs and the CLI's listing), trims nothing but treats empty as
/// unset, and reports a bad value with [`config_error`].
pub struct Vars<'a> {
    provider: &'static str,
    declared: &'static [Var],
    get: &'a dyn Fn(&str) -> Option<String>,
}

impl fmt::Debug for Vars<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Vars")
            .field("provider", &self.provider)
            .field("declared", &names(self.declared))
            .finish_non_exhaustive()
    }
}

/// The process environment, as a lookup.
pub fn env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

impl<'a> Vars<'a> {
    /// The variables `declared` by `provider`, looked up with `get`.
    pub fn new(
        provider: &'static str,
        declared: &'static [Var],
        get: &'a dyn Fn(&str) -> Option<String>,
    ) -> Vars<'a> {
        Vars {
            provider,
            declared,
            get,
        }
    }

    /// The provider's name (for errors).
    pub fn provider(&self) -> &'static str {
        self.provider
    }

    fn declared(&self, name: &str) -> &'static Var {
        self.declared
            .iter()
            .find(|v| v.name == name)
            .unwrap_or_else(|| {
                panic!(
                    "{}: variable {name} is read but not declared",
                    self.provider
                )
            })
    }

    /// The raw value, `None` when unset or empty (or only white space).
    pub fn get(&self, name: &str) -> Option<String> {
        self.declared(name);
        (self.get)(name).filter(|v| !v.trim().is_empty())
    }

    /// A configuration error of this provider.
    pub fn error(&self, message: impl Into<String>) -> Error {
        config_error(self.provider, message)
    }

    fn bad(&self, name: &str, value: &str, want: &str) -> Error {
        if self.declared(name).kind == VarKind::Secret {
            self.error(format!("{name} is not {want}"))
        } else {
            self.error(format!("{name}={value:?} is not {want}"))
        }
    }

    /// A text value.
    pub fn text(&self, name: &str) -> Option<String> {
        self.get(name)
    }

    /// A value that must be set: `{name} is not set ({why})` otherwise.
    pub fn required(&self, name: &str, why: &str) -> Result<String, Error> {
        self.get(name).ok_or_else(|| {
            if why.is_empty() {
                self.error(format!("{name} is not set"))
            } else {
                self.error(format!("{name} is not set ({why})"))
            }
        })
    }

    /// A secret.
    pub fn secret(&self, name: &str) -> Option<SecretString> {
        self.get(name).map(SecretString::from)
    }

    /// A secret that must be set.
    pub fn required_secret(&self, name: &str, why: &str) -> Result<SecretString, Error> {
        self.required(name, why).map(SecretString::from)
    }

    /// A number of type `T` (`what` names it in the error: `a number of bytes`).
    pub fn number<T: FromStr>(&self, name: &str, what: &str) -> Result<Option<T>, Error> {
        self.get(name)
            .map(|v| v.trim().parse::<T>().map_err(|_| self.bad(name, &v, what)))
            .transpose()
    }

    /// Whole seconds.
    pub fn seconds(&self, name: &str) -> Result<Option<Duration>, Error> {
        Ok(self
            .number::<u64>(name, "a number of seconds")?
            .map(Duration::from_secs))
    }

    /// On or off.
    pub fn flag(&self, name: &str) -> Result<Option<bool>, Error> {
        self.get(name)
            .map(|v| match v.trim().to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => Ok(true),
                "0" | "false" | "no" | "off" => Ok(false),
                _ => Err(self.bad(name, &v, "on or off (1, true, yes, on / 0, false, no, off)")),
            })
            .transpose()
    }

    /// One of `choices` (word, value).
    pub fn choice<T: Copy>(&self, name: &str, choices: &[(&str, T)]) -> Result<Option<T>, Error> {
        self.get(name)
            .map(|v| {
                choices
                    .iter()
                    .find(|(word, _)| *word == v.trim())
                    .map(|(_, t)| *t)
                    .ok_or_else(|| {
                        let words: Vec<&str> = choices.iter().map(|(w, _)| *w).collect();
                        self.error(format!("{name}={v:?}: want one of {}", words.join(", ")))
                    })
            })
            .transpose()
    }

    /// A URL with one of `schemes` (`["http", "https"]`).
    #[cfg(feature = "url")]
    pub fn url(&self, name: &str, schemes: &[&str]) -> Result<Option<url::Url>, Error> {
        self.get(name)
            .map(|v| parse_url(self.provider, name, v.trim(), schemes))
            .transpose()
    }
}

/// Parses `value` as a URL with one of `schemes`, for setting `what` of `provider`: a parse
/// failure or another scheme is [`InvalidConfig`](execseam_core::ErrorKind::InvalidConfig).
#[cfg(feature = "url")]
pub fn parse_url(
    provider: &'static str,
    what: &str,
    value: &str,
    schemes: &[&str],
) -> Result<url::Url, Error> {
    let url = url::Url::parse(value)
        .map_err(|e| config_error(provider, format!("{what} {value:?} is not a URL: {e}")))?;
    if !schemes.contains(&url.scheme()) {
        return Err(config_error(
            provider,
            format!("{what} {value:?} is not {}", schemes.join(" or ")),
        ));
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use execseam_core::ErrorKind;

    use super::*;

    const DECLARED: &[Var] = &[
        Var::secret("KEY").required(),
        Var::seconds("T"),
        Var::flag("F"),
        Var::choice("MODE", &["a", "b"]),
        Var::number("N"),
        Var::url("URL"),
    ];

    fn with<R>(pairs: &[(&str, &str)], f: impl FnOnce(&Vars<'_>) -> R) -> R {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let get = move |k: &str| map.get(k).cloned();
        f(&Vars::new("p", DECLARED, &get))
    }

    #[test]
    fn values_parse_and_empty_is_unset() {
        with(
            &[
                ("T", "7"),
                ("F", "yes"),
                ("MODE", "b"),
                ("N", " 3 "),
                ("KEY", " "),
            ],
            |v| {
                assert_eq!(v.seconds("T").unwrap(), Some(Duration::from_secs(7)));
                assert_eq!(v.flag("F").unwrap(), Some(true));
                assert_eq!(v.choice("MODE", &[("a", 1), ("b", 2)]).unwrap(), Some(2));
                assert_eq!(v.number::<u8>("N", "a count").unwrap(), Some(3));
                assert!(v.secret("KEY").is_none());
            },
        );
    }

    #[test]
    fn bad_values_are_invalid_config_and_secrets_stay_out() {
        with(
            &[("T", "soon"), ("F", "maybe"), ("MODE", "c"), ("KEY", "")],
            |v| {
                let e = v.seconds("T").unwrap_err();
                assert_eq!(e.kind(), ErrorKind::InvalidConfig);
                assert_eq!(e.provider(), "p");
                assert!(
                    e.message()
                        .contains("T=\"soon\" is not a number of seconds"),
                    "{e}"
                );
                assert!(v.flag("F").is_err());
                assert!(
                    v.choice("MODE", &[("a", 1)])
                        .unwrap_err()
                        .message()
                        .contains("want one of a")
                );
                let e = v.required_secret("KEY", "the API key").unwrap_err();
                assert_eq!(e.message(), "KEY is not set (the API key)");
            },
        );
        with(&[("KEY", "hunter2")], |v| {
            let e = v.number::<u8>("KEY", "a number").unwrap_err();
            assert!(!e.to_string().contains("hunter2"), "{e}");
        });
    }

    #[test]
    #[should_panic(expected = "read but not declared")]
    fn undeclared_variables_are_a_bug() {
        with(&[], |v| v.text("OTHER"));
    }
}
