//! Stable names of the contract's values, and (feature `serde`, off by default) their wire form.
//!
//! The names are part of the contract: [`ErrorKind::as_str`] (`not-found`, `timeout-command`,
//! …), [`Deadline::as_str`] and [`Retry::class`] never change for an existing value. With the
//! `serde` feature, [`Output`](crate::Output), [`Exit`](crate::Exit),
//! [`Truncated`](crate::Truncated), [`PartialOutput`](crate::PartialOutput), [`ErrorKind`],
//! [`Deadline`], [`Retry`], [`WireStatus`](crate::WireStatus) and [`Error`](crate::Error)
//! implement `serde::Serialize` (all but `Error` and `PartialOutput` also `Deserialize`) in these
//! shapes:
//!
//! | type | JSON |
//! |---|---|
//! | `ErrorKind` | `"not-found"`, `"timeout-command"`, … ([`ErrorKind::as_str`]) |
//! | `Deadline` | `"request"`, `"command"`, `"sandbox-lifetime"`, `"unknown"` |
//! | `Retry` | `{"class": "never"}`, `{"class": "safe", "after_ms": 1500}` (or `null`), `{"class": "unsafe"}` |
//! | `Exit` | `{"code": 0}` or `{"signal": 9}` |
//! | `WireStatus` | `{"http": 503}` or `{"grpc": 14}` |
//! | `Truncated` | `{"stdout": 0, "stderr": 0}` |
//! | `Output` | `{"stdout": "…" or null, "stdout_base64": "…", "stderr", "stderr_base64", "exit", "ambiguous_kill", "truncated"}` |
//! | `PartialOutput` | `{"stdout", "stdout_base64", "stderr", "stderr_base64"}` |
//! | `Error` | `{"kind", "retry", "provider", "operation", "status", "code", "message", "display", "partial", "retained_from"}` (`retained_from`: `{"stdout": N, "stderr": N}` or `null`, for `expired`) |
//!
//! Bytes are exact in the `_base64` fields (standard alphabet, padded); the plain field is the
//! same bytes as a string when they are UTF-8, else `null`. Deserializing an `Output` reads the
//! `_base64` fields. `Error` has no `Deserialize`: its source chain does not travel.

use crate::error::{Deadline, ErrorKind, Retry};

impl ErrorKind {
    /// The stable kebab-case name (`invalid-command`, `timeout-command`, …), for logs and wire
    /// formats.
    pub fn as_str(&self) -> &'static str {
        match self {
            ErrorKind::InvalidCommand => "invalid-command",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::InvalidConfig => "invalid-config",
            ErrorKind::Unauthenticated => "unauthenticated",
            ErrorKind::PermissionDenied => "permission-denied",
            ErrorKind::NotFound => "not-found",
            ErrorKind::Conflict => "conflict",
            ErrorKind::RateLimited => "rate-limited",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Timeout(Deadline::Request) => "timeout-request",
            ErrorKind::Timeout(Deadline::Command) => "timeout-command",
            ErrorKind::Timeout(Deadline::SandboxLifetime) => "timeout-sandbox-lifetime",
            ErrorKind::Timeout(Deadline::Unknown) => "timeout-unknown",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::Protocol => "protocol",
            ErrorKind::OutputLimit => "output-limit",
            ErrorKind::Expired => "expired",
            ErrorKind::Internal => "internal",
        }
    }

    /// The kind named by [`ErrorKind::as_str`].
    pub fn from_name(name: &str) -> Option<ErrorKind> {
        ALL_KINDS.iter().copied().find(|k| k.as_str() == name)
    }
}

/// Every kind, for [`ErrorKind::from_name`].
const ALL_KINDS: [ErrorKind; 18] = [
    ErrorKind::InvalidCommand,
    ErrorKind::Unsupported,
    ErrorKind::InvalidConfig,
    ErrorKind::Unauthenticated,
    ErrorKind::PermissionDenied,
    ErrorKind::NotFound,
    ErrorKind::Conflict,
    ErrorKind::RateLimited,
    ErrorKind::Unavailable,
    ErrorKind::Timeout(Deadline::Request),
    ErrorKind::Timeout(Deadline::Command),
    ErrorKind::Timeout(Deadline::SandboxLifetime),
    ErrorKind::Timeout(Deadline::Unknown),
    ErrorKind::Cancelled,
    ErrorKind::Protocol,
    ErrorKind::OutputLimit,
    ErrorKind::Expired,
    ErrorKind::Internal,
];

impl Deadline {
    /// The stable name: `request`, `command`, `sandbox-lifetime`, `unknown`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Deadline::Request => "request",
            Deadline::Command => "command",
            Deadline::SandboxLifetime => "sandbox-lifetime",
            Deadline::Unknown => "unknown",
        }
    }
}

impl Retry {
    /// The stable name of the class: `never`, `safe`, `unsafe`.
    pub fn class(&self) -> &'static str {
        match self {
            Retry::Never => "never",
            Retry::Safe { .. } => "safe",
            Retry::Unsafe => "unsafe",
        }
    }
}

#[cfg(feature = "serde")]
mod impls {
    use std::time::Duration;

    use bytes::Bytes;
    use serde::de::{self, Deserializer};
    use serde::ser::{SerializeMap, SerializeStruct, Serializer};
    use serde::{Deserialize, Serialize};

    use crate::error::{Deadline, Error, ErrorKind, Retry};
    use crate::output::{Exit, Output, PartialOutput, Truncated};
    use base64::Engine as _;

    fn base64_encode(data: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(data)
    }

    /// Standard base64 with padding; `None` for anything else.
    fn base64_decode(s: &str) -> Option<Vec<u8>> {
        base64::engine::general_purpose::STANDARD.decode(s).ok()
    }

    impl Serialize for ErrorKind {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_str(self.as_str())
        }
    }

    impl<'de> Deserialize<'de> for ErrorKind {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let name = String::deserialize(d)?;
            ErrorKind::from_name(&name)
                .ok_or_else(|| de::Error::custom(format!("unknown error kind {name:?}")))
        }
    }

    impl Serialize for Deadline {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_str(self.as_str())
        }
    }

    impl<'de> Deserialize<'de> for Deadline {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let name = String::deserialize(d)?;
            [
                Deadline::Request,
                Deadline::Command,
                Deadline::SandboxLifetime,
                Deadline::Unknown,
            ]
            .into_iter()
            .find(|x| x.as_str() == name)
            .ok_or_else(|| de::Error::custom(format!("unknown deadline {name:?}")))
        }
    }

    impl Serialize for Retry {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut m = s.serialize_map(None)?;
            m.serialize_entry("class", self.class())?;
            if let Retry::Safe { after } = self {
                let ms = after.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
                m.serialize_entry("after_ms", &ms)?;
            }
            m.end()
        }
    }

    #[derive(Deserialize)]
    struct RetryWire {
        class: String,
        #[serde(default)]
        after_ms: Option<u64>,
    }

    impl<'de> Deserialize<'de> for Retry {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let w = RetryWire::deserialize(d)?;
            match w.class.as_str() {
                "never" => Ok(Retry::Never),
                "unsafe" => Ok(Retry::Unsafe),
                "safe" => Ok(Retry::Safe {
                    after: w.after_ms.map(Duration::from_millis),
                }),
                other => Err(de::Error::custom(format!("unknown retry class {other:?}"))),
            }
        }
    }

    fn bytes_fields<M: SerializeStruct>(
        m: &mut M,
        names: (&'static str, &'static str),
        b: &Bytes,
    ) -> Result<(), M::Error> {
        m.serialize_field(names.0, &std::str::from_utf8(b).ok())?;
        m.serialize_field(names.1, &base64_encode(b))
    }

    impl Serialize for Output {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut m = s.serialize_struct("Output", 7)?;
            bytes_fields(&mut m, ("stdout", "stdout_base64"), &self.stdout)?;
            bytes_fields(&mut m, ("stderr", "stderr_base64"), &self.stderr)?;
            m.serialize_field("exit", &self.exit)?;
            m.serialize_field("ambiguous_kill", &self.exit.is_ambiguous_kill())?;
            m.serialize_field("truncated", &self.truncated)?;
            m.end()
        }
    }

    #[derive(Deserialize)]
    struct OutputWire {
        stdout_base64: String,
        stderr_base64: String,
        exit: Exit,
        #[serde(default)]
        truncated: Option<Truncated>,
    }

    impl<'de> Deserialize<'de> for Output {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            let w = OutputWire::deserialize(d)?;
            let dec = |s: &str, what: &str| {
                base64_decode(s).ok_or_else(|| de::Error::custom(format!("{what} is not base64")))
            };
            let mut o = Output::new(
                dec(&w.stdout_base64, "stdout_base64")?,
                dec(&w.stderr_base64, "stderr_base64")?,
                w.exit,
            );
            o.truncated = w.truncated.unwrap_or_default();
            Ok(o)
        }
    }

    impl Serialize for PartialOutput {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut m = s.serialize_struct("PartialOutput", 4)?;
            bytes_fields(&mut m, ("stdout", "stdout_base64"), &self.stdout)?;
            bytes_fields(&mut m, ("stderr", "stderr_base64"), &self.stderr)?;
            m.end()
        }
    }

    impl Serialize for Error {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let mut m = s.serialize_struct("Error", 10)?;
            m.serialize_field("kind", &self.kind())?;
            m.serialize_field("retry", &self.retry())?;
            m.serialize_field("provider", self.provider())?;
            m.serialize_field("operation", self.operation())?;
            m.serialize_field("status", &self.status())?;
            m.serialize_field("code", &self.code())?;
            m.serialize_field("message", self.message())?;
            m.serialize_field("display", &self.to_string())?;
            m.serialize_field("partial", &self.partial())?;
            let retained = self.retained_from().map(|o| Truncated {
                stdout: o.stdout,
                stderr: o.stderr,
            });
            m.serialize_field("retained_from", &retained)?;
            m.end()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for k in ALL_KINDS {
            assert!(seen.insert(k.as_str()), "{k:?}");
            assert_eq!(ErrorKind::from_name(k.as_str()), Some(k));
        }
        assert_eq!(ErrorKind::from_name("NotFound"), None);
        assert_eq!(
            ErrorKind::Timeout(Deadline::Command).as_str(),
            "timeout-command"
        );
        assert_eq!(Retry::SAFE.class(), "safe");
    }

    #[cfg(feature = "serde")]
    #[test]
    fn wire_shapes() {
        use crate::{Error, Exit, Output, WireStatus};
        use std::time::Duration;
        let j = |v: &dyn erased::Ser| v.json();
        assert_eq!(
            j(&ErrorKind::Timeout(Deadline::Command)),
            r#""timeout-command""#
        );
        assert_eq!(j(&Retry::Never), r#"{"class":"never"}"#);
        let safe = Retry::Safe {
            after: Some(Duration::from_millis(1500)),
        };
        assert_eq!(j(&safe), r#"{"class":"safe","after_ms":1500}"#);
        assert_eq!(j(&Retry::SAFE), r#"{"class":"safe","after_ms":null}"#);
        assert_eq!(j(&Exit::Signal(9)), r#"{"signal":9}"#);
        assert_eq!(j(&WireStatus::Http(503)), r#"{"http":503}"#);
        let o = Output::new(&b"a\0b"[..], &b"\xff"[..], Exit::Code(137));
        let text = j(&o);
        assert_eq!(
            text,
            r#"{"stdout":"a\u0000b","stdout_base64":"YQBi","stderr":null,"stderr_base64":"/w==","exit":{"code":137},"ambiguous_kill":true,"truncated":{"stdout":0,"stderr":0}}"#
        );
        assert_eq!(serde_json::from_str::<Output>(&text).unwrap(), o);
        for r in [Retry::Never, Retry::Unsafe, safe, Retry::SAFE] {
            assert_eq!(serde_json::from_str::<Retry>(&j(&r)).unwrap(), r);
        }
        for k in ALL_KINDS {
            assert_eq!(serde_json::from_str::<ErrorKind>(&j(&k)).unwrap(), k);
        }
        let e = Error::new(ErrorKind::NotFound, "no sandbox sb-1")
            .with_provider("e2b")
            .with_operation("connect")
            .with_status(WireStatus::Http(404));
        let v: serde_json::Value = serde_json::from_str(&j(&e)).unwrap();
        assert_eq!(v["kind"], "not-found");
        assert_eq!(v["retry"]["class"], "never");
        assert_eq!(v["status"]["http"], 404);
        assert_eq!(v["partial"], serde_json::Value::Null);
        for bad in ["YQ=", "Y===", "YQ==YQ==", "Y!=="] {
            assert!(
                serde_json::from_str::<Output>(&format!(
                    r#"{{"stdout_base64":"{bad}","stderr_base64":"","exit":{{"code":0}}}}"#
                ))
                .is_err(),
                "{bad}"
            );
        }
    }

    #[cfg(feature = "serde")]
    mod erased {
        pub trait Ser {
            fn json(&self) -> String;
        }
        impl<T: serde::Serialize> Ser for T {
            fn json(&self) -> String {
                serde_json::to_string(self).unwrap()
            }
        }
    }
}
