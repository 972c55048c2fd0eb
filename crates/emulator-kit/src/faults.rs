//! Deterministic fault injection: "fail the Nth request of route R with F".
//!
//! Each emulator names its routes (`"exec"` is always the request that submits a command) and
//! calls [`FaultHandle::take`] at the top of each handler; the handler then renders the fault in
//! its provider's wire format (status codes, error bodies, cut streams, bad frames). The faults
//! themselves are the conformance suite's vocabulary ([`Fault`]).
//!
//! Each emulator declares which faults each of its routes renders ([`Rendered`], the
//! [`Provider::FAULTS`](crate::Provider::FAULTS) constant), and its [`FaultHandle`] holds that
//! table: a rule naming an unknown route, or a fault its route does not render, is refused (at
//! start, from `--fault`, or when a test arms it), so a rule is never accepted and then silently
//! ignored. A rule on `*` applies wherever the fault is rendered (at least one route must render
//! it).

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, Mutex};

pub use execseam_conformance::{FAULT_NAMES, Fault, Faults};

/// Every fault but `vanish`: what a route renders when its request takes effect before the
/// answer (the early faults, then the late ones on the answer), with no command to lose its
/// sandbox in the middle of.
pub const FAULTS_BUT_VANISH: &[&str] = &[
    "429",
    "503",
    "auth",
    "latency",
    "500",
    "reset",
    "cut",
    "malformed",
];

/// What an emulator renders: each route, with the names ([`Fault::name`]) of the faults it
/// renders there.
pub type Rendered = &'static [(&'static str, &'static [&'static str])];

/// Refuses a rule for a route the emulator does not have, or a fault that route does not
/// render (see the [module docs](self)).
pub fn check_rule(provider: &str, rule: &FaultRule, rendered: Rendered) -> Result<(), String> {
    let name = rule.fault.name();
    if rule.route == "*" {
        if !rendered.iter().any(|(_, faults)| faults.contains(&name)) {
            return Err(format!(
                "the {provider} emulator renders fault {name:?} on no route (rule {rule})"
            ));
        }
        return Ok(());
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

struct Plan {
    provider: &'static str,
    rendered: Rendered,
    rules: Vec<(FaultRule, u64)>, // rule, requests of its route seen since it was added
    counts: HashMap<String, u64>,
}

/// A shared, cloneable handle on an emulator's faults. It holds the emulator's fault table and
/// refuses any rule outside it.
#[derive(Clone)]
pub struct FaultHandle(Arc<Mutex<Plan>>);

impl fmt::Debug for FaultHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let plan = self.0.lock().expect("fault plan");
        f.debug_struct("FaultHandle")
            .field("provider", &plan.provider)
            .field(
                "rules",
                &plan.rules.iter().map(|(r, _)| r).collect::<Vec<_>>(),
            )
            .field("counts", &plan.counts)
            .finish()
    }
}

impl FaultHandle {
    /// A handle on the fault table `rendered` of `provider`'s emulator, armed with `rules`; the
    /// first rule outside the table is refused with an `InvalidInput` error that names the
    /// emulator, the rule and what the route renders.
    pub fn new(
        provider: &'static str,
        rendered: Rendered,
        rules: &[FaultRule],
    ) -> std::io::Result<FaultHandle> {
        let handle = FaultHandle(Arc::new(Mutex::new(Plan {
            provider,
            rendered,
            rules: Vec::new(),
            counts: HashMap::new(),
        })));
        for rule in rules {
            handle
                .try_add(rule.clone())
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        }
        Ok(handle)
    }

    /// The emulator's fault table.
    pub fn rendered(&self) -> Rendered {
        self.0.lock().expect("fault plan").rendered
    }

    /// Adds a rule, or says why the emulator cannot render it.
    pub fn try_add(&self, rule: FaultRule) -> Result<(), String> {
        let mut plan = self.0.lock().expect("fault plan");
        check_rule(plan.provider, &rule, plan.rendered)?;
        plan.rules.push((rule, 0));
        Ok(())
    }

    /// Adds a rule.
    ///
    /// # Panics
    ///
    /// If the emulator does not render it (a test's mistake: the rule would never fire).
    pub fn add(&self, rule: FaultRule) {
        if let Err(e) = self.try_add(rule) {
            panic!("{e}");
        }
    }

    /// Injects `fault` into the next request of `route`.
    ///
    /// # Panics
    ///
    /// If the emulator does not render `fault` on `route`.
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

/// The conformance suite's injector: a fault on the next `exec`, if the emulator's table has it
/// (else the case is not applicable, with the table's reason).
impl Faults for FaultHandle {
    fn inject(&self, fault: Fault) -> Result<(), String> {
        self.try_add(FaultRule {
            route: "exec".into(),
            when: When::Nth(1),
            fault,
        })
    }

    fn clear(&self) {
        FaultHandle::clear(self);
    }

    fn exec_requests(&self) -> Option<u64> {
        Some(self.count("exec"))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const ALL: Rendered = &[
        ("exec", FAULT_NAMES),
        ("files", FAULT_NAMES),
        ("a", FAULT_NAMES),
        ("b", FAULT_NAMES),
    ];

    fn handle() -> FaultHandle {
        FaultHandle::new("p", ALL, &[]).unwrap()
    }

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
        let h = handle();
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
        let rule = |s: &str| -> FaultRule { s.parse().unwrap() };
        assert!(check_rule("p", &rule("exec=cut"), RENDERED).is_ok());
        assert!(check_rule("p", &rule("create=429:3@2"), RENDERED).is_ok());
        assert!(check_rule("p", &rule("*=500@always"), RENDERED).is_ok());
        let e = check_rule("p", &rule("create=malformed"), RENDERED).unwrap_err();
        assert!(
            e.contains("does not render") && e.contains("429, 500"),
            "{e}"
        );
        let e = check_rule("p", &rule("nope=500"), RENDERED).unwrap_err();
        assert!(
            e.contains("no fault route") && e.contains("exec, create"),
            "{e}"
        );
        const NARROW: Rendered = &[("exec", &["500"])];
        assert!(check_rule("p", &rule("*=cut"), NARROW).is_err());
        // A handle refuses at construction, and later.
        let e =
            FaultHandle::new("p", RENDERED, &[rule("create=500"), rule("create=cut")]).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("the p emulator"), "{e}");
        let h = FaultHandle::new("p", RENDERED, &[rule("create=500@2")]).unwrap();
        assert!(h.try_add(rule("create=cut")).is_err());
        assert!(
            Faults::inject(
                &FaultHandle::new("p", NARROW, &[]).unwrap(),
                Fault::CutBeforeExit
            )
            .is_err(),
            "the suite's injector consults the table"
        );
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
    #[should_panic(expected = "does not render")]
    fn arming_an_unrendered_fault_panics() {
        FaultHandle::new("p", &[("exec", &["500"])], &[])
            .unwrap()
            .arm("exec", Fault::CutBeforeExit);
    }

    #[test]
    fn always_rules_fire_until_cleared() {
        let h = handle();
        h.add("*=503@always".parse().unwrap());
        assert_eq!(h.take("a"), Some(Fault::Unavailable));
        assert_eq!(h.take("b"), Some(Fault::Unavailable));
        h.clear();
        assert_eq!(h.take("a"), None);
    }
}
