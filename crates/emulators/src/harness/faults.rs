//! Deterministic fault injection: "fail the Nth request of route R with F".
//!
//! Each emulator names its routes (`"exec"` is always the request that submits a command) and
//! calls [`FaultHandle::take`] at the top of each handler; the handler then renders the fault in
//! its provider's wire format (status codes, error bodies, cut streams, bad frames).
//!
//! Each emulator also declares which faults each of its routes renders ([`Rendered`]), and
//! [`check_rules`] refuses a rule naming an unknown route or a fault its route does not render,
//! when the emulator starts: a rule is never accepted and then silently ignored. A rule on `*`
//! applies wherever the fault is rendered (at least one route must render it).

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A fault to inject.
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// HTTP 429 (or the protocol's equivalent) with `Retry-After: <secs>`.
    RateLimited {
        /// The retry-after to send, in seconds.
        retry_after_secs: u64,
    },
    /// HTTP 500. On an exec route the command runs first (it "may have run").
    ServerError,
    /// HTTP 503 (or gRPC UNAVAILABLE).
    Unavailable,
    /// Reset the connection before any response byte.
    ResetBeforeResponse,
    /// Cut the response stream before its exit frame.
    CutBeforeExit,
    /// Send a malformed body or frame.
    MalformedBody,
    /// Delay the response, then serve it normally.
    Latency(Duration),
    /// Reject the credentials.
    AuthFailure,
    /// Destroy the sandbox while the command runs.
    SandboxVanishes,
}

impl Fault {
    /// The fault's name in rules, without its argument (`"429"`, `"latency"`, …; one of
    /// [`FAULT_NAMES`]).
    pub fn name(&self) -> &'static str {
        match self {
            Fault::RateLimited { .. } => "429",
            Fault::ServerError => "500",
            Fault::Unavailable => "503",
            Fault::ResetBeforeResponse => "reset",
            Fault::CutBeforeExit => "cut",
            Fault::MalformedBody => "malformed",
            Fault::Latency(_) => "latency",
            Fault::AuthFailure => "auth",
            Fault::SandboxVanishes => "vanish",
        }
    }
}

/// Every fault's name ([`Fault::name`]).
pub const FAULT_NAMES: &[&str] = &[
    "429",
    "500",
    "503",
    "reset",
    "cut",
    "malformed",
    "latency",
    "auth",
    "vanish",
];

/// What an emulator renders: each route, with the names of the faults it renders there.
pub type Rendered = &'static [(&'static str, &'static [&'static str])];

/// Refuses a rule for a route the emulator does not have, or a fault that route does not
/// render (see the [module docs](self)).
pub fn check_rules(provider: &str, rules: &[FaultRule], rendered: Rendered) -> Result<(), String> {
    for rule in rules {
        let name = rule.fault.name();
        if rule.route == "*" {
            if !rendered.iter().any(|(_, faults)| faults.contains(&name)) {
                return Err(format!(
                    "the {provider} emulator renders fault {name:?} on no route (rule {rule})"
                ));
            }
            continue;
        }
        let Some((_, faults)) = rendered.iter().find(|(r, _)| *r == rule.route) else {
            let routes: Vec<&str> = rendered.iter().map(|(r, _)| *r).collect();
            return Err(format!(
                "the {provider} emulator has no fault route {:?} (rule {rule}): its routes are {}",
                rule.route,
                routes.join(", ")
            ));
        };
        if !faults.contains(&name) {
            return Err(format!(
                "the {provider} emulator does not render fault {name:?} on route {:?} (rule {rule}): it renders {}",
                rule.route,
                faults.join(", ")
            ));
        }
    }
    Ok(())
}

/// Checks `rules` ([`check_rules`]) and adds them to `faults`: what an emulator's `start` does
/// with its options' faults. The error is `InvalidInput`.
pub fn arm_checked(
    faults: &FaultHandle,
    provider: &str,
    rules: &[FaultRule],
    rendered: Rendered,
) -> std::io::Result<()> {
    check_rules(provider, rules, rendered)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    for rule in rules {
        faults.add(rule.clone());
    }
    Ok(())
}

impl fmt::Display for FaultRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.route, self.fault)?;
        match self.when {
            When::Nth(1) => Ok(()),
            When::Nth(n) => write!(f, "@{n}"),
            When::Always => f.write_str("@always"),
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::RateLimited { retry_after_secs } => write!(f, "rate-limited:{retry_after_secs}"),
            Fault::ServerError => f.write_str("500"),
            Fault::Unavailable => f.write_str("503"),
            Fault::ResetBeforeResponse => f.write_str("reset"),
            Fault::CutBeforeExit => f.write_str("cut"),
            Fault::MalformedBody => f.write_str("malformed"),
            Fault::Latency(d) => write!(f, "latency:{}", d.as_millis()),
            Fault::AuthFailure => f.write_str("auth"),
            Fault::SandboxVanishes => f.write_str("vanish"),
        }
    }
}

impl FromStr for Fault {
    type Err = String;

    /// `429[:secs]`/`rate-limited[:secs]`, `500`/`server-error`, `503`/`unavailable`, `reset`,
    /// `cut`, `malformed`, `latency:<ms>`, `auth`, `vanish`.
    fn from_str(s: &str) -> Result<Fault, String> {
        let (name, arg) = match s.split_once(':') {
            Some((n, a)) => (n, Some(a)),
            None => (s, None),
        };
        let num = |default: u64| -> Result<u64, String> {
            arg.map_or(Ok(default), |a| {
                a.trim_end_matches("ms")
                    .parse()
                    .map_err(|_| format!("bad number {a:?} in fault {s:?}"))
            })
        };
        Ok(match name {
            "429" | "rate-limited" => Fault::RateLimited {
                retry_after_secs: num(1)?,
            },
            "500" | "server-error" => Fault::ServerError,
            "503" | "unavailable" => Fault::Unavailable,
            "reset" => Fault::ResetBeforeResponse,
            "cut" => Fault::CutBeforeExit,
            "malformed" => Fault::MalformedBody,
            "latency" => Fault::Latency(Duration::from_millis(num(500)?)),
            "auth" => Fault::AuthFailure,
            "vanish" => Fault::SandboxVanishes,
            _ => {
                return Err(format!(
                    "unknown fault {s:?}: want 429[:secs], 500, 503, reset, cut, malformed, latency:<ms>, auth or vanish"
                ));
            }
        })
    }
}

/// When a rule fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum When {
    /// On the Nth request of the route (1-based, counted from when the rule was added).
    Nth(u64),
    /// On every request of the route.
    Always,
}

/// One rule: on `route`, `when`, inject `fault`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultRule {
    /// The route name (`"exec"`, `"create"`, …; `"*"` matches every route).
    pub route: String,
    /// When it fires.
    pub when: When,
    /// What it injects.
    pub fault: Fault,
}

impl FromStr for FaultRule {
    type Err = String;

    /// `[ROUTE=]FAULT[@N|@always]`, for example `500`, `exec=cut`, `create=429:2@3`. The route
    /// defaults to `exec`; N defaults to 1 (the next request).
    fn from_str(s: &str) -> Result<FaultRule, String> {
        let (route, rest) = match s.split_once('=') {
            Some((r, rest)) => (r.to_owned(), rest),
            None => ("exec".to_owned(), s),
        };
        let (fault, when) = match rest.rsplit_once('@') {
            Some((f, "always")) => (f, When::Always),
            Some((f, n)) => (
                f,
                When::Nth(n.parse().map_err(|_| format!("bad count {n:?} in {s:?}"))?),
            ),
            None => (rest, When::Nth(1)),
        };
        Ok(FaultRule {
            route,
            when,
            fault: fault.parse()?,
        })
    }
}

#[derive(Default)]
struct Plan {
    rules: Vec<(FaultRule, u64)>, // rule, requests of its route seen since it was added
    counts: HashMap<String, u64>,
}

/// A shared, cloneable handle on an emulator's faults.
#[derive(Clone, Default)]
pub struct FaultHandle(Arc<Mutex<Plan>>);

impl fmt::Debug for FaultHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plan = self.0.lock().expect("fault plan");
        f.debug_struct("FaultHandle")
            .field(
                "rules",
                &plan.rules.iter().map(|(r, _)| r).collect::<Vec<_>>(),
            )
            .field("counts", &plan.counts)
            .finish()
    }
}

impl FaultHandle {
    /// A handle with no rules.
    pub fn new() -> FaultHandle {
        FaultHandle::default()
    }

    /// Adds a rule.
    pub fn add(&self, rule: FaultRule) {
        self.0.lock().expect("fault plan").rules.push((rule, 0));
    }

    /// Injects `fault` into the next request of `route`.
    pub fn arm(&self, route: &str, fault: Fault) {
        self.add(FaultRule {
            route: route.to_owned(),
            when: When::Nth(1),
            fault,
        });
    }

    /// Removes every rule (counts are kept).
    pub fn clear(&self) {
        self.0.lock().expect("fault plan").rules.clear();
    }

    /// Called by a handler for each request of `route`: counts it and returns the fault to
    /// inject, if a rule fires. A rule that fired on its Nth request is removed.
    pub fn take(&self, route: &str) -> Option<Fault> {
        let mut plan = self.0.lock().expect("fault plan");
        *plan.counts.entry(route.to_owned()).or_default() += 1;
        let mut fired = None;
        let mut spent = None;
        for (i, (rule, seen)) in plan.rules.iter_mut().enumerate() {
            if rule.route != route && rule.route != "*" {
                continue;
            }
            *seen += 1;
            if fired.is_some() {
                continue;
            }
            match rule.when {
                When::Always => fired = Some(rule.fault),
                When::Nth(n) if *seen == n => {
                    fired = Some(rule.fault);
                    spent = Some(i);
                }
                When::Nth(_) => {}
            }
        }
        if let Some(i) = spent {
            plan.rules.remove(i);
        }
        fired
    }

    /// How many requests of `route` were seen.
    pub fn count(&self, route: &str) -> u64 {
        self.0
            .lock()
            .expect("fault plan")
            .counts
            .get(route)
            .copied()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rules() {
        let r: FaultRule = "500".parse().unwrap();
        assert_eq!(
            (r.route.as_str(), r.when, r.fault),
            ("exec", When::Nth(1), Fault::ServerError)
        );
        let r: FaultRule = "create=429:2@3".parse().unwrap();
        assert_eq!(
            r.fault,
            Fault::RateLimited {
                retry_after_secs: 2
            }
        );
        assert_eq!((r.route.as_str(), r.when), ("create", When::Nth(3)));
        let r: FaultRule = "latency:250@always".parse().unwrap();
        assert_eq!(
            (r.fault, r.when),
            (Fault::Latency(Duration::from_millis(250)), When::Always)
        );
        assert!("nope".parse::<FaultRule>().is_err());
        assert!("500@x".parse::<FaultRule>().is_err());
    }

    #[test]
    fn fires_on_the_nth_request_of_its_route_only() {
        let h = FaultHandle::new();
        h.add("exec=cut@2".parse().unwrap());
        assert_eq!(h.take("files"), None);
        assert_eq!(h.take("exec"), None);
        assert_eq!(h.take("exec"), Some(Fault::CutBeforeExit));
        assert_eq!(h.take("exec"), None, "a spent rule is removed");
        assert_eq!(h.count("exec"), 3);
        assert_eq!(h.count("files"), 1);
    }

    #[test]
    fn rules_are_checked_against_what_the_emulator_renders() {
        const RENDERED: Rendered = &[("exec", FAULT_NAMES), ("create", &["429", "500"])];
        let rules = |s: &str| -> Vec<FaultRule> { vec![s.parse().unwrap()] };
        assert!(check_rules("p", &rules("exec=cut"), RENDERED).is_ok());
        assert!(check_rules("p", &rules("create=429:3@2"), RENDERED).is_ok());
        assert!(check_rules("p", &rules("*=500@always"), RENDERED).is_ok());
        let e = check_rules("p", &rules("create=malformed"), RENDERED).unwrap_err();
        assert!(
            e.contains("does not render") && e.contains("429, 500"),
            "{e}"
        );
        let e = check_rules("p", &rules("nope=500"), RENDERED).unwrap_err();
        assert!(
            e.contains("no fault route") && e.contains("exec, create"),
            "{e}"
        );
        const NARROW: Rendered = &[("exec", &["500"])];
        assert!(check_rules("p", &rules("*=cut"), NARROW).is_err());
        let h = FaultHandle::new();
        assert!(arm_checked(&h, "p", &rules("create=cut"), RENDERED).is_err());
        assert_eq!(h.take("create"), None, "nothing armed from a refused list");
        arm_checked(&h, "p", &rules("create=500@2"), RENDERED).unwrap();
        assert_eq!(
            (h.take("create"), h.take("create")),
            (None, Some(Fault::ServerError))
        );
        assert_eq!(
            "create=500@2".parse::<FaultRule>().unwrap().to_string(),
            "create=500@2"
        );
    }

    #[test]
    fn always_rules_fire_until_cleared() {
        let h = FaultHandle::new();
        h.add("*=503@always".parse().unwrap());
        assert_eq!(h.take("a"), Some(Fault::Unavailable));
        assert_eq!(h.take("b"), Some(Fault::Unavailable));
        h.clear();
        assert_eq!(h.take("a"), None);
    }
}
