//! Validation before any I/O, for adapter authors: [`Checks`] (a [`SandboxSpec`] or a
//! [`ListFilter`] against a provider's [`LifecycleCapabilities`]) and [`StateChecks`] (a state
//! operation against its [`StateCapabilities`]). Import them as `use execseam_adapter_kit::{Checks
//! as _, StateChecks as _};` and call `spec.check(PROVIDER, &LIFECYCLE)?` or
//! `LIFECYCLE.state.check_snapshot(PROVIDER, &request)?` first thing in each operation.
//!
//! They refuse an operation the provider does not have, a field or kind it cannot take, a
//! destructive snapshot the caller did not opt into, and a port outside the provider's rule:
//! [`Unsupported`](execseam_core::ErrorKind::Unsupported) or
//! [`InvalidConfig`](execseam_core::ErrorKind::InvalidConfig), with the provider and operation
//! set.
//!
//! ```
//! use execseam_adapter_kit::StateChecks as _;
//! use execseam_core::{Kept, SnapshotRequest, SourceAfter, StateCapabilities, SnapshotSupport, Scope};
//!
//! const STATE: StateCapabilities = StateCapabilities {
//!     snapshot: Some(SnapshotSupport {
//!         kinds: &[Kept::Filesystem],
//!         scope: Scope::Root,
//!         source_after: SourceAfter::Stopped,
//!         ..SnapshotSupport::FILESYSTEM
//!     }),
//!     ..StateCapabilities::NONE
//! };
//! // A snapshot that stops the sandbox is refused unless the caller opts in.
//! let e = STATE.check_snapshot("p", &SnapshotRequest::new()).unwrap_err();
//! assert_eq!(e.kind(), execseam_core::ErrorKind::Unsupported);
//! assert_eq!(STATE.check_snapshot("p", &SnapshotRequest::new().allow_stop(true)).unwrap(), Kept::Filesystem);
//! ```

use std::time::Duration;

use execseam_core::{
    Error, ExposeSupport, ForkSupport, Kept, LifecycleCapabilities, ListFilter, SandboxSpec,
    SnapshotRequest, StateCapabilities,
};

/// A [`SandboxSpec`] or a [`ListFilter`] checked against what a provider supports, before any
/// I/O (what [`Provider::create`](execseam_core::Provider::create) and
/// [`Provider::list`](execseam_core::Provider::list) do first).
pub trait Checks {
    /// Checks the spec against what `provider` supports, before any I/O: a field it does not
    /// honour is [`Unsupported`](execseam_core::ErrorKind::Unsupported), naming the field; an
    /// unknown option, an env key or label that is not well formed, or a zero size is
    /// [`InvalidConfig`](execseam_core::ErrorKind::InvalidConfig).
    ///
    /// Label keys are 1 to 63 bytes of ASCII letters, digits and `-_./`; values are at most 255
    /// bytes with no control characters (the intersection of what the providers accept).
    ///
    /// For a [`ListFilter`]: the provider lists, has labels if the filter names any, and each
    /// label is well formed as in a spec ([`Unsupported`](execseam_core::ErrorKind::Unsupported)
    /// or [`InvalidConfig`](execseam_core::ErrorKind::InvalidConfig), operation `list`).
    fn check(&self, provider: &str, lifecycle: &LifecycleCapabilities) -> Result<(), Error>;
}

impl Checks for SandboxSpec {
    fn check(&self, provider: &str, lifecycle: &LifecycleCapabilities) -> Result<(), Error> {
        let s = &lifecycle.spec;
        let unsupported = |field: &str| {
            Err(
                Error::unsupported(format!("{provider} does not support {field} on create"))
                    .with_provider(provider.to_owned())
                    .with_operation("create"),
            )
        };
        let invalid = |message: String| {
            Err(Error::invalid_config(message)
                .with_provider(provider.to_owned())
                .with_operation("create"))
        };
        if !lifecycle.create {
            return Err(
                Error::unsupported(format!("{provider} cannot create sandboxes"))
                    .with_provider(provider.to_owned())
                    .with_operation("create"),
            );
        }
        if self.image().is_some() && !s.image {
            return unsupported("an image");
        }
        if !self.env().is_empty() && !s.env {
            return unsupported("sandbox-wide env");
        }
        if !self.labels().is_empty() && !s.labels {
            return unsupported("labels");
        }
        if self.lifetime().is_some() && !s.lifetime {
            return unsupported("a lifetime");
        }
        if self.idle_timeout().is_some() && !s.idle_timeout {
            return unsupported("an idle timeout");
        }
        if self.cpu_millis().is_some() && !s.cpu {
            return unsupported("a CPU size");
        }
        if self.memory_mib().is_some() && !s.memory {
            return unsupported("a memory size");
        }
        if self.disk_mib().is_some() && !s.disk {
            return unsupported("a disk size");
        }
        if let Some(snapshot) = self.snapshot() {
            if !lifecycle.state.snapshot.is_some_and(|s| s.create_from) {
                return unsupported("a snapshot to start from");
            }
            if self.image().is_some() {
                return invalid(
                    "a sandbox starts from an image or a snapshot, not both".to_owned(),
                );
            }
            check_snapshot_id(provider, "create", snapshot)?;
        }
        for port in self.ports() {
            check_spec_port(&lifecycle.state, provider, *port)?;
        }
        if let Some(image) = self
            .image()
            .filter(|i| i.is_empty() || i.contains(['\0', '\n']))
        {
            return invalid(format!("image {image:?} is not a name"));
        }
        for key in self.env().keys() {
            if key.is_empty() || key.contains(['=', '\0']) {
                return invalid(format!("env key {key:?} is not a variable name"));
            }
        }
        for value in self.env().values() {
            if value.contains('\0') {
                return invalid("an env value contains NUL".to_owned());
            }
        }
        for (key, value) in self.labels() {
            check_label(key, value).or_else(invalid)?;
        }
        if self.cpu_millis() == Some(0)
            || self.memory_mib() == Some(0)
            || self.disk_mib() == Some(0)
        {
            return invalid("a resource size of zero".to_owned());
        }
        if self.lifetime() == Some(Duration::ZERO) || self.idle_timeout() == Some(Duration::ZERO) {
            return invalid("a timeout of zero".to_owned());
        }
        if let Some(key) = self
            .options()
            .keys()
            .find(|k| !lifecycle.options.contains(&k.as_str()))
        {
            let known = if lifecycle.options.is_empty() {
                "none".to_owned()
            } else {
                lifecycle.options.join(", ")
            };
            return invalid(format!(
                "unknown {provider} option {key:?} (known: {known})"
            ));
        }
        Ok(())
    }
}

impl Checks for ListFilter {
    fn check(&self, provider: &str, lifecycle: &LifecycleCapabilities) -> Result<(), Error> {
        let fail = |e: Error| Err(e.with_provider(provider.to_owned()).with_operation("list"));
        if !lifecycle.list {
            return fail(Error::unsupported(format!(
                "{provider} cannot list sandboxes"
            )));
        }
        if !self.labels().is_empty() && !lifecycle.spec.labels {
            return fail(Error::unsupported(format!("{provider} has no labels")));
        }
        for (key, value) in self.labels() {
            if let Err(m) = check_label(key, value) {
                return fail(Error::invalid_config(m));
            }
        }
        Ok(())
    }
}

/// Checks one label: see [`Checks::check`].
fn check_label(key: &str, value: &str) -> Result<(), String> {
    let key_ok = (1..=63).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/'));
    if !key_ok {
        return Err(format!(
            "label key {key:?} must be 1-63 ASCII letters, digits or -_./"
        ));
    }
    if value.len() > 255 || value.chars().any(char::is_control) {
        return Err(format!(
            "label {key:?}: the value must be at most 255 bytes without control characters"
        ));
    }
    Ok(())
}

/// A state operation checked against a provider's [`StateCapabilities`], before any I/O: an
/// operation the provider does not declare is
/// [`Unsupported`](execseam_core::ErrorKind::Unsupported).
pub trait StateChecks {
    /// Checks a pause asking to keep `keep` (the default kind when `None`); returns the kind.
    fn check_pause(&self, provider: &str, keep: Option<Kept>) -> Result<Kept, Error>;

    /// Checks a resume.
    fn check_resume(&self, provider: &str) -> Result<(), Error>;

    /// Checks a snapshot request; returns the kind it takes.
    fn check_snapshot(&self, provider: &str, request: &SnapshotRequest) -> Result<Kept, Error>;

    /// Checks a restore in place.
    fn check_restore(&self, provider: &str) -> Result<(), Error>;

    /// Checks a snapshot listing.
    fn check_list_snapshots(&self, provider: &str) -> Result<(), Error>;

    /// Checks a snapshot deletion.
    fn check_delete_snapshot(&self, provider: &str, snapshot: &str) -> Result<(), Error>;

    /// Checks a fork.
    fn check_fork(&self, provider: &str) -> Result<ForkSupport, Error>;

    /// Checks exposing `port`: the operation exists and the port is within the provider's rule
    /// ([`InvalidConfig`](execseam_core::ErrorKind::InvalidConfig) otherwise).
    fn check_expose(&self, provider: &str, port: u16) -> Result<ExposeSupport, Error>;

    /// Checks listing exposed ports.
    fn check_exposed(&self, provider: &str) -> Result<(), Error>;

    /// Checks unexposing `port`.
    fn check_unexpose(&self, provider: &str, port: u16) -> Result<(), Error>;
}

impl StateChecks for StateCapabilities {
    fn check_pause(&self, provider: &str, keep: Option<Kept>) -> Result<Kept, Error> {
        let p = self.pause.ok_or_else(|| missing(provider, "pause"))?;
        kind_of(provider, "pause", p.kinds, keep)
    }

    fn check_resume(&self, provider: &str) -> Result<(), Error> {
        self.pause
            .map(drop)
            .ok_or_else(|| missing(provider, "resume"))
    }

    fn check_snapshot(&self, provider: &str, request: &SnapshotRequest) -> Result<Kept, Error> {
        const OP: &str = "snapshot";
        let s = self.snapshot.ok_or_else(|| missing(provider, OP))?;
        let kind = kind_of(provider, OP, s.kinds, request.kind)?;
        if request.name.is_some() && !s.named {
            return Err(refused(provider, OP, "does not name snapshots"));
        }
        if let Some(name) = &request.name
            && (name.is_empty() || name.len() > 255 || name.chars().any(char::is_control))
        {
            return Err(Error::invalid_config(format!(
                "snapshot name {name:?} must be 1-255 bytes without control characters"
            ))
            .with_provider(provider.to_owned())
            .with_operation(OP));
        }
        if request.ttl.is_some() && !s.ttl {
            return Err(refused(provider, OP, "does not take a snapshot ttl"));
        }
        if request.never_expires && !s.never_expires {
            return Err(refused(provider, OP, "cannot keep a snapshot forever"));
        }
        if request.never_expires && request.ttl.is_some() {
            return Err(
                Error::invalid_config("a snapshot ttl and never_expires together")
                    .with_provider(provider.to_owned())
                    .with_operation(OP),
            );
        }
        if request.ttl == Some(Duration::ZERO) {
            return Err(Error::invalid_config("a snapshot ttl of zero")
                .with_provider(provider.to_owned())
                .with_operation(OP));
        }
        if s.source_after.is_destructive() && !request.allow_stop {
            return Err(refused(
                provider,
                OP,
                &format!(
                    "cannot snapshot without ending the sandbox's processes ({:?}); ask with allow_stop",
                    s.source_after
                ),
            ));
        }
        Ok(kind)
    }

    fn check_restore(&self, provider: &str) -> Result<(), Error> {
        match self.snapshot {
            Some(s) if s.restore_in_place => Ok(()),
            _ => Err(missing(provider, "restore")),
        }
    }

    fn check_list_snapshots(&self, provider: &str) -> Result<(), Error> {
        match self.snapshot {
            Some(s) if s.list => Ok(()),
            _ => Err(missing(provider, "list_snapshots")),
        }
    }

    fn check_delete_snapshot(&self, provider: &str, snapshot: &str) -> Result<(), Error> {
        match self.snapshot {
            Some(s) if s.delete => check_snapshot_id(provider, "delete_snapshot", snapshot),
            _ => Err(missing(provider, "delete_snapshot")),
        }
    }

    fn check_fork(&self, provider: &str) -> Result<ForkSupport, Error> {
        self.fork.ok_or_else(|| missing(provider, "fork"))
    }

    fn check_expose(&self, provider: &str, port: u16) -> Result<ExposeSupport, Error> {
        let e = self.expose.ok_or_else(|| missing(provider, "expose"))?;
        check_port(provider, "expose", &e, port)?;
        Ok(e)
    }

    fn check_exposed(&self, provider: &str) -> Result<(), Error> {
        match self.expose {
            Some(e) if e.list => Ok(()),
            _ => Err(missing(provider, "exposed")),
        }
    }

    fn check_unexpose(&self, provider: &str, port: u16) -> Result<(), Error> {
        match self.expose {
            Some(e) if e.unexpose => check_port(provider, "unexpose", &e, port),
            _ => Err(missing(provider, "unexpose")),
        }
    }
}

/// Checks the ports a spec declares at create (see [`Checks::check`]).
fn check_spec_port(state: &StateCapabilities, provider: &str, port: u16) -> Result<(), Error> {
    let e = state
        .expose
        .ok_or_else(|| refused(provider, "create", "does not expose ports"))?;
    check_port(provider, "create", &e, port)
}

fn missing(provider: &str, operation: &'static str) -> Error {
    Error::unsupported(format!("{provider} has no {operation}"))
        .with_provider(provider.to_owned())
        .with_operation(operation)
}

fn refused(provider: &str, operation: &'static str, why: &str) -> Error {
    Error::unsupported(format!("{provider} {why}"))
        .with_provider(provider.to_owned())
        .with_operation(operation)
}

fn kind_of(
    provider: &str,
    operation: &'static str,
    kinds: &[Kept],
    asked: Option<Kept>,
) -> Result<Kept, Error> {
    match asked {
        None => kinds
            .first()
            .copied()
            .ok_or_else(|| missing(provider, operation)),
        Some(k) if kinds.contains(&k) => Ok(k),
        Some(k) => Err(refused(
            provider,
            operation,
            &format!(
                "cannot {operation} keeping {k} (it keeps: {})",
                kinds
                    .iter()
                    .map(|k| k.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

fn check_port(
    provider: &str,
    operation: &'static str,
    e: &ExposeSupport,
    port: u16,
) -> Result<(), Error> {
    let bad = |why: String| {
        Err(Error::invalid_config(why)
            .with_provider(provider.to_owned())
            .with_operation(operation))
    };
    if let Some(only) = e.only
        && port != only
    {
        return bad(format!("{provider} exposes port {only} only, not {port}"));
    }
    if port < e.ports.0 || port > e.ports.1 {
        return bad(format!(
            "{provider} exposes ports {} to {}, not {port}",
            e.ports.0, e.ports.1
        ));
    }
    if e.reserved.contains(&port) {
        return bad(format!("{provider} reserves port {port}"));
    }
    Ok(())
}

/// A snapshot id as the operations take it: not empty, no NUL, no line break, at most 1024 bytes.
fn check_snapshot_id(provider: &str, operation: &'static str, id: &str) -> Result<(), Error> {
    if id.is_empty() || id.len() > 1024 || id.contains(['\0', '\n', '\r']) {
        return Err(
            Error::invalid_config(format!("{id:?} is not a snapshot id"))
                .with_provider(provider.to_owned())
                .with_operation(operation),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use execseam_core::{
        ErrorKind, ExposeSupport, PauseSupport, PortAuth, PortsWhen, Scope, SnapshotSupport,
        SourceAfter, SpecSupport, WhilePaused,
    };

    const SOME: LifecycleCapabilities = LifecycleCapabilities {
        spec: SpecSupport {
            image: true,
            labels: true,
            ..SpecSupport::NONE
        },
        options: &["region"],
        ..LifecycleCapabilities::ALL_OPERATIONS
    };

    const ALL: StateCapabilities = StateCapabilities {
        pause: Some(PauseSupport {
            kinds: &[Kept::FilesystemAndMemory, Kept::Filesystem],
            scope: Scope::Root,
            while_paused: WhilePaused::Refused,
            connect_resumes: true,
        }),
        snapshot: Some(SnapshotSupport {
            named: true,
            ..SnapshotSupport::FILESYSTEM
        }),
        fork: None,
        expose: Some(ExposeSupport {
            when: PortsWhen::AnyTime,
            auth: PortAuth::None,
            list: false,
            unexpose: false,
            ports: (1024, 65535),
            reserved: &[3000],
            only: None,
        }),
    };

    #[test]
    fn an_unsupported_field_is_unsupported_and_named() {
        let e = SandboxSpec::new()
            .with_lifetime(Duration::from_secs(5))
            .check("p", &SOME)
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        assert!(e.message().contains("lifetime"), "{e}");
        assert_eq!((e.provider(), e.operation()), ("p", "create"));
        let e = SandboxSpec::new()
            .with_env("A", "1")
            .check("p", &SOME)
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
    }

    #[test]
    fn bad_values_and_unknown_options_are_invalid_config() {
        let bad = [
            SandboxSpec::new().with_label("", "x"),
            SandboxSpec::new().with_label("a=b", "x"),
            SandboxSpec::new().with_label("k", "line\nbreak"),
            SandboxSpec::new().with_image(""),
            SandboxSpec::new().with_option("zone", "x"),
        ];
        for spec in bad {
            let e = spec.check("p", &SOME).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{spec:?}: {e}");
        }
        SandboxSpec::new()
            .with_image("base")
            .with_label("team", "a-b")
            .with_option("region", "iad")
            .check("p", &SOME)
            .unwrap();
    }

    #[test]
    fn no_create_means_unsupported_even_for_an_empty_spec() {
        let e = SandboxSpec::new()
            .check("ax", &LifecycleCapabilities::NONE)
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
    }

    #[test]
    fn snapshots_and_ports_in_a_spec_are_checked_against_the_state_capabilities() {
        let e = SandboxSpec::new()
            .with_snapshot("s1")
            .check("p", &SOME)
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        assert!(e.message().contains("snapshot"), "{e}");
        let e = SandboxSpec::new()
            .with_port(8080)
            .check("p", &SOME)
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        let with_state = LifecycleCapabilities {
            state: StateCapabilities {
                snapshot: Some(SnapshotSupport::FILESYSTEM),
                expose: Some(ExposeSupport::DECLARED_AT_CREATE),
                ..StateCapabilities::NONE
            },
            ..SOME
        };
        SandboxSpec::new()
            .with_snapshot("s1")
            .with_port(8080)
            .check("p", &with_state)
            .unwrap();
        for bad in [
            SandboxSpec::new().with_snapshot("s1").with_image("base"),
            SandboxSpec::new().with_snapshot(""),
            SandboxSpec::new().with_port(0),
        ] {
            let e = bad.check("p", &with_state).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{bad:?}: {e}");
        }
    }

    #[test]
    fn operations_not_declared_are_unsupported() {
        let none = StateCapabilities::NONE;
        for e in [
            none.check_pause("p", None).unwrap_err(),
            none.check_resume("p").unwrap_err(),
            none.check_snapshot("p", &SnapshotRequest::new())
                .unwrap_err(),
            none.check_restore("p").unwrap_err(),
            none.check_list_snapshots("p").unwrap_err(),
            none.check_delete_snapshot("p", "s").unwrap_err(),
            none.check_fork("p").unwrap_err(),
            none.check_expose("p", 8080).unwrap_err(),
            none.check_exposed("p").unwrap_err(),
            none.check_unexpose("p", 8080).unwrap_err(),
            ALL.check_fork("p").unwrap_err(),
            ALL.check_restore("p").unwrap_err(),
            ALL.check_unexpose("p", 8080).unwrap_err(),
        ] {
            assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
            assert_eq!(e.provider(), "p");
        }
    }

    #[test]
    fn kinds_default_to_the_first_and_others_are_refused() {
        assert_eq!(
            ALL.check_pause("p", None).unwrap(),
            Kept::FilesystemAndMemory
        );
        assert_eq!(
            ALL.check_pause("p", Some(Kept::Filesystem)).unwrap(),
            Kept::Filesystem
        );
        let e = ALL
            .check_snapshot("p", &SnapshotRequest::new().kind(Kept::FilesystemAndMemory))
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        assert!(e.message().contains("filesystem+memory"), "{e}");
    }

    #[test]
    fn a_destructive_snapshot_needs_the_opt_in() {
        let vercel = StateCapabilities {
            snapshot: Some(SnapshotSupport {
                source_after: SourceAfter::Stopped,
                ..SnapshotSupport::FILESYSTEM
            }),
            ..StateCapabilities::NONE
        };
        let e = vercel
            .check_snapshot("vercel", &SnapshotRequest::new())
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        assert!(e.message().contains("allow_stop"), "{e}");
        vercel
            .check_snapshot("vercel", &SnapshotRequest::new().allow_stop(true))
            .unwrap();
    }

    #[test]
    fn names_ttls_and_ports_are_checked() {
        let e = ALL
            .check_snapshot("p", &SnapshotRequest::new().ttl(Duration::from_secs(5)))
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        let e = ALL
            .check_snapshot("p", &SnapshotRequest::new().name(""))
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig);
        ALL.check_snapshot("p", &SnapshotRequest::new().name("base"))
            .unwrap();
        // Never expiring: refused where not declared, and with a ttl where it is.
        let e = ALL
            .check_snapshot("p", &SnapshotRequest::new().never_expires())
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
        let forever = StateCapabilities {
            snapshot: Some(SnapshotSupport {
                ttl: true,
                never_expires: true,
                ..SnapshotSupport::FILESYSTEM
            }),
            ..StateCapabilities::NONE
        };
        forever
            .check_snapshot("p", &SnapshotRequest::new().never_expires())
            .unwrap();
        let both = SnapshotRequest::new()
            .never_expires()
            .ttl(Duration::from_secs(86_400));
        let e = forever.check_snapshot("p", &both).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
        for port in [80, 3000] {
            let e = ALL.check_expose("p", port).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{port}: {e}");
        }
        ALL.check_expose("p", 8080).unwrap();
        let e = StateCapabilities::NONE
            .check_delete_snapshot("p", "x")
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        let e = ALL.check_delete_snapshot("p", "a\nb").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig);
    }

    #[test]
    fn a_filter_is_checked_like_a_spec_s_labels() {
        let e = ListFilter::new()
            .with_label("a", "1")
            .check("p", &LifecycleCapabilities::ALL_OPERATIONS)
            .unwrap_err();
        assert_eq!((e.kind(), e.operation()), (ErrorKind::Unsupported, "list"));
        let e = ListFilter::new()
            .with_label("", "1")
            .check("p", &SOME)
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig);
        let e = ListFilter::new()
            .check("p", &LifecycleCapabilities::NONE)
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        ListFilter::new()
            .with_label("team", "a")
            .check("p", &SOME)
            .unwrap();
    }
}
