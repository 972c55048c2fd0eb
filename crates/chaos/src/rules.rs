//! The chaos proxy's rule grammar (see the [module docs](super) for the reference).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Which requests a rule's count selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Nth {
    /// Every matching request.
    Every,
    /// Only the Nth matching request (1-based).
    Only(u64),
    /// The Nth matching request and every later one.
    From(u64),
    /// The Nth to the Mth matching request, both included.
    Range(u64, u64),
}

impl Nth {
    fn selects(self, n: u64) -> bool {
        match self {
            Nth::Every => true,
            Nth::Only(k) => n == k,
            Nth::From(k) => n >= k,
            Nth::Range(a, b) => (a..=b).contains(&n),
        }
    }
}

/// What a rule does to a request it fires on.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Answer with this status without forwarding the request (a gateway or rate limiter in
    /// front of the service), with `Retry-After: <secs>` when given.
    Status {
        /// The HTTP status.
        code: u16,
        /// The `Retry-After` seconds to send, if any.
        retry_after: Option<u64>,
    },
    /// Forward the request, then answer with this status instead of the upstream's answer
    /// (the service ran it; the answer was lost behind a failing gateway), with
    /// `Retry-After: <secs>` when given (so an adapter's cap is tested on a lie too).
    StatusAfter {
        /// The HTTP status.
        code: u16,
        /// The `Retry-After` seconds to send, if any.
        retry_after: Option<u64>,
    },
    /// Forward the request, then answer with this status and `Content-Type` (the upstream's
    /// other headers kept) and the upstream's body: a 200 of the wrong type.
    Head {
        /// The HTTP status.
        code: u16,
        /// The `Content-Type` to send.
        content_type: String,
    },
    /// Forward the request, buffer the upstream's whole answer, and send it this much later;
    /// `None` (`hold:0`): never, while the client waits (an answer in flight when the client is
    /// interrupted: the service did the work).
    Hold(Option<Duration>),
    /// A head action (`status`, `status-after`, `head`) whose body (its own, or the
    /// upstream's for `head`) goes through a body action (`stall`, `trickle`, `endless`,
    /// `truncate`, `rechunk`, `drop-last`, `garbage`, `body`): written `HEAD+BODY`.
    Then {
        /// The head action.
        head: Box<Action>,
        /// The body action.
        body: Box<Action>,
    },
    /// Close the connection (HTTP/2: reset the stream) without forwarding or answering.
    Reset,
    /// Forward the request, then close the connection (reset the stream) instead of answering.
    ResetAfter,
    /// Wait this long, then forward normally.
    Delay(Duration),
    /// Never answer (and never forward).
    Hang,
    /// Forward; send the upstream's status and headers, then no body byte ever.
    Stall,
    /// Forward; send the body `bytes` at a time, one piece every `every`.
    Trickle {
        /// The pause between pieces.
        every: Duration,
        /// The bytes per piece.
        bytes: usize,
    },
    /// Forward; send the upstream's status and headers, then an endless body of `x` bytes
    /// (never a newline). On a WebSocket: one frame announcing 2^40 bytes, then endless `x`.
    Endless,
    /// Forward; pass the first N body bytes, then cut the connection (reset the stream).
    Truncate(u64),
    /// Forward; re-chunk the body into pieces of N bytes (legal HTTP: the answer must not
    /// change). On a WebSocket, the byte stream is written N bytes at a time.
    Rechunk(usize),
    /// Forward; drop the body's final piece and its trailers and end the body cleanly. On a
    /// WebSocket: drop the last data frame before the server's close frame (or the end).
    DropLast,
    /// Forward; send the upstream's status and headers, then N pseudo-random bytes instead of
    /// its body, then a clean end.
    Garbage(usize),
    /// Forward; send the upstream's status and headers, then this text instead of its body (a
    /// well-formed but empty answer: `body:{}`).
    Body(String),
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Status {
                code,
                retry_after: None,
            } => write!(f, "status:{code}"),
            Action::Status {
                code,
                retry_after: Some(s),
            } => write!(f, "status:{code}:{s}"),
            Action::StatusAfter {
                code,
                retry_after: None,
            } => write!(f, "status-after:{code}"),
            Action::StatusAfter {
                code,
                retry_after: Some(s),
            } => write!(f, "status-after:{code}:{s}"),
            Action::Head { code, content_type } => write!(f, "head:{code}:{content_type}"),
            Action::Hold(None) => f.write_str("hold:0"),
            Action::Hold(Some(d)) => write!(f, "hold:{}", d.as_millis()),
            Action::Then { head, body } => write!(f, "{head}+{body}"),
            Action::Reset => f.write_str("reset"),
            Action::ResetAfter => f.write_str("reset-after"),
            Action::Delay(d) => write!(f, "delay:{}", d.as_millis()),
            Action::Hang => f.write_str("hang"),
            Action::Stall => f.write_str("stall"),
            Action::Trickle { every, bytes } => write!(f, "trickle:{}:{bytes}", every.as_millis()),
            Action::Endless => f.write_str("endless"),
            Action::Truncate(n) => write!(f, "truncate:{n}"),
            Action::Rechunk(n) => write!(f, "rechunk:{n}"),
            Action::DropLast => f.write_str("drop-last"),
            Action::Garbage(n) => write!(f, "garbage:{n}"),
            Action::Body(text) => write!(f, "body:{text}"),
        }
    }
}

/// Every action name, for error messages.
pub const ACTIONS: &str = "status:CODE[:RETRY_AFTER_SECS], status-after:CODE[:RETRY_AFTER_SECS], \
     head:CODE:CONTENT_TYPE, hold:MS, reset, reset-after, delay:MS, hang, stall, trickle:MS[:BYTES], \
     endless, truncate:BYTES, rechunk:BYTES, drop-last, garbage[:BYTES], body:TEXT, and \
     HEAD+BODY (status, status-after or head, then one of the body actions)";

impl Action {
    /// True for an action that can stand before a `+` (it makes the answer's head).
    pub fn is_head(&self) -> bool {
        matches!(
            self,
            Action::Status { .. } | Action::StatusAfter { .. } | Action::Head { .. }
        )
    }

    /// True for an action that can stand after a `+` (it changes a body).
    pub fn is_body(&self) -> bool {
        matches!(
            self,
            Action::Stall
                | Action::Trickle { .. }
                | Action::Endless
                | Action::Truncate(_)
                | Action::Rechunk(_)
                | Action::DropLast
                | Action::Garbage(_)
                | Action::Body(_)
        )
    }

    /// The head and body parts (`status:503+stall` is `status:503` and `stall`).
    pub fn split(&self) -> (&Action, Option<&Action>) {
        match self {
            Action::Then { head, body } => (head, Some(body)),
            other => (other, None),
        }
    }
}

impl FromStr for Action {
    type Err = String;

    fn from_str(s: &str) -> Result<Action, String> {
        // `HEAD+BODY`: at the first '+' where both sides parse (a content type may hold a '+',
        // `application/problem+json`, and so may `body:TEXT`).
        if !s.starts_with("body:") {
            for (i, _) in s.match_indices('+') {
                let (h, b) = (&s[..i], &s[i + 1..]);
                if let (Ok(head), Ok(body)) = (simple(h), simple(b))
                    && head.is_head()
                    && body.is_body()
                {
                    return Ok(Action::Then {
                        head: Box::new(head),
                        body: Box::new(body),
                    });
                }
            }
        }
        simple(s)
    }
}

fn simple(s: &str) -> Result<Action, String> {
    if let Some(text) = s.strip_prefix("body:") {
        return Ok(Action::Body(text.to_owned()));
    }
    let mut parts = s.split(':');
    let name = parts.next().unwrap_or_default();
    let args: Vec<&str> = parts.collect();
    let bad = |why: &str| format!("bad chaos action {s:?}: {why}");
    let num = |i: usize| -> Result<Option<u64>, String> {
        args.get(i)
            .map(|a| {
                a.trim_end_matches("ms")
                    .parse::<u64>()
                    .map_err(|_| bad(&format!("{a:?} is not a number")))
            })
            .transpose()
    };
    let need = |i: usize, what: &str| -> Result<u64, String> {
        num(i)?.ok_or_else(|| bad(&format!("needs {what}")))
    };
    let arity = |max: usize| -> Result<(), String> {
        if args.len() > max {
            Err(bad("too many arguments"))
        } else {
            Ok(())
        }
    };
    let code = |i: usize| -> Result<u16, String> {
        let c = need(i, "a status code")?;
        if (100..=599).contains(&c) {
            Ok(c as u16)
        } else {
            Err(bad("a status code is 100 to 599"))
        }
    };
    let positive = |v: u64, what: &str| -> Result<u64, String> {
        if v == 0 {
            Err(bad(&format!("{what} must be at least 1")))
        } else {
            Ok(v)
        }
    };
    let action = match name {
        "status" => {
            arity(2)?;
            Action::Status {
                code: code(0)?,
                retry_after: num(1)?,
            }
        }
        "status-after" => {
            arity(2)?;
            Action::StatusAfter {
                code: code(0)?,
                retry_after: num(1)?,
            }
        }
        "head" => {
            // The content type may hold ':' (`text/plain;a=b:c`): everything after CODE.
            let mut it = s.splitn(3, ':');
            let (_, c, t) = (it.next(), it.next(), it.next());
            let c: u16 = c
                .and_then(|c| c.parse().ok())
                .filter(|c| (100..=599).contains(c))
                .ok_or_else(|| bad("needs a status code 100 to 599"))?;
            let t = t
                .filter(|t| !t.is_empty() && t.bytes().all(|b| b.is_ascii_graphic() || b == b' '))
                .ok_or_else(|| bad("needs a content type"))?;
            Action::Head {
                code: c,
                content_type: t.to_owned(),
            }
        }
        "hold" => {
            arity(1)?;
            let ms = need(0, "milliseconds (0: never)")?;
            Action::Hold((ms > 0).then(|| Duration::from_millis(ms)))
        }
        "reset" => {
            arity(0)?;
            Action::Reset
        }
        "reset-after" => {
            arity(0)?;
            Action::ResetAfter
        }
        "delay" => {
            arity(1)?;
            Action::Delay(Duration::from_millis(need(0, "milliseconds")?))
        }
        "hang" => {
            arity(0)?;
            Action::Hang
        }
        "stall" => {
            arity(0)?;
            Action::Stall
        }
        "trickle" => {
            arity(2)?;
            Action::Trickle {
                every: Duration::from_millis(need(0, "milliseconds")?),
                bytes: positive(num(1)?.unwrap_or(1), "bytes")? as usize,
            }
        }
        "endless" => {
            arity(0)?;
            Action::Endless
        }
        "truncate" => {
            arity(1)?;
            Action::Truncate(need(0, "a byte count")?)
        }
        "rechunk" => {
            arity(1)?;
            Action::Rechunk(positive(need(0, "a byte count")?, "bytes")? as usize)
        }
        "drop-last" => {
            arity(0)?;
            Action::DropLast
        }
        "garbage" => {
            arity(1)?;
            Action::Garbage(num(0)?.unwrap_or(4096) as usize)
        }
        _ => return Err(format!("unknown chaos action {s:?}: want one of {ACTIONS}")),
    };
    Ok(action)
}

/// One rule: `[METHOD ]PATH[#NTH]=ACTION`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// The method it matches (`None`: any).
    pub method: Option<String>,
    /// The path glob (`*` matches any run of characters, `/` included).
    pub path: String,
    /// Which of the matching requests it fires on.
    pub nth: Nth,
    /// What it does.
    pub action: Action,
}

const METHODS: &[&str] = &[
    "GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "CONNECT", "TRACE",
];

impl Rule {
    /// True if the request's method and path match (its count is not looked at).
    pub fn matches(&self, method: &str, path: &str) -> bool {
        self.method.as_deref().is_none_or(|m| m == method) && glob(&self.path, path)
    }

    /// True if this rule fires on the `n`th request it matched.
    pub fn fires_on(&self, n: u64) -> bool {
        self.nth.selects(n)
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(m) = &self.method {
            write!(f, "{m} ")?;
        }
        f.write_str(&self.path)?;
        match self.nth {
            Nth::Every => {}
            Nth::Only(n) => write!(f, "#{n}")?,
            Nth::From(n) => write!(f, "#{n}+")?,
            Nth::Range(a, b) => write!(f, "#{a}-{b}")?,
        }
        write!(f, "={}", self.action)
    }
}

impl FromStr for Rule {
    type Err = String;

    fn from_str(s: &str) -> Result<Rule, String> {
        let s = s.trim();
        let (matcher, action) = s
            .split_once('=')
            .ok_or_else(|| format!("bad chaos rule {s:?}: want [METHOD ]PATH[#NTH]=ACTION"))?;
        let action: Action = action.trim().parse()?;
        let matcher = matcher.trim();
        let (method, rest) = match matcher.split_once(' ') {
            Some((m, rest)) => {
                let m = m.trim();
                if m != "*" && !METHODS.contains(&m) {
                    return Err(format!(
                        "bad chaos rule {s:?}: unknown method {m:?} (want {} or *)",
                        METHODS.join(", ")
                    ));
                }
                ((m != "*").then(|| m.to_owned()), rest.trim())
            }
            None => (None, matcher),
        };
        let (path, nth) = match rest.split_once('#') {
            Some((p, n)) => (
                p,
                parse_nth(n).map_err(|e| format!("bad chaos rule {s:?}: {e}"))?,
            ),
            None => (rest, Nth::Every),
        };
        if path != "*" && !path.starts_with('/') {
            return Err(format!(
                "bad chaos rule {s:?}: the path {path:?} must start with / (or be *)"
            ));
        }
        Ok(Rule {
            method,
            path: path.to_owned(),
            nth,
            action,
        })
    }
}

fn parse_nth(n: &str) -> Result<Nth, String> {
    let num = |x: &str| -> Result<u64, String> {
        match x.parse::<u64>() {
            Ok(0) | Err(_) => Err(format!("{x:?} is not a count (1, 2, …)")),
            Ok(v) => Ok(v),
        }
    };
    Ok(if n == "*" {
        Nth::Every
    } else if let Some(from) = n.strip_suffix('+') {
        Nth::From(num(from)?)
    } else if let Some((a, b)) = n.split_once('-') {
        let (a, b) = (num(a)?, num(b)?);
        if a > b {
            return Err(format!("the range {n:?} is empty"));
        }
        Nth::Range(a, b)
    } else {
        Nth::Only(num(n)?)
    })
}

/// Parses a rule list: rules separated by `;` (empty pieces ignored).
pub fn parse_rules(s: &str) -> Result<Vec<Rule>, String> {
    s.split(';')
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(str::parse)
        .collect()
}

/// `*` matches any run of characters, `/` included; everything else is literal.
fn glob(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_action_and_round_trips() {
        for r in [
            "*=status:429:86400",
            "POST /process.Process/Start#1=reset",
            "GET /toolbox/*/logs#2+=stall",
            "*#2-3=trickle:5000:1",
            "/v1/*=delay:250",
            "*=hang",
            "*=reset-after",
            "*=status-after:502",
            "*=endless",
            "*=truncate:10",
            "*=rechunk:1",
            "*=drop-last",
            "*=garbage:100",
            "POST /x=body:{\"a\":1}",
            "*=status-after:429:86400",
            "*=status:503+stall",
            "*=status-after:503+trickle:5000:1",
            "*=head:200:text/plain+stall",
            "*=head:200:application/problem+json+endless",
            "*=head:200:application/json",
            "POST /v2/sandboxes#1=hold:0",
            "*=hold:3000",
            "*=status:200+body:a+b",
        ] {
            let rule: Rule = r.parse().unwrap_or_else(|e| panic!("{r}: {e}"));
            assert_eq!(rule.to_string(), r);
        }
        assert_eq!(
            "* =garbage".parse::<Rule>().unwrap().action,
            Action::Garbage(4096)
        );
        assert_eq!(
            "*=trickle:10".parse::<Rule>().unwrap().action,
            Action::Trickle {
                every: Duration::from_millis(10),
                bytes: 1
            }
        );
    }

    #[test]
    fn rejects_unknown_or_malformed_rules() {
        for bad in [
            "",
            "*",
            "*=explode",
            "*=status",
            "*=status:99",
            "*=status:abc",
            "*=reset:1",
            "*#0=reset",
            "*#x=reset",
            "*#3-2=reset",
            "FETCH /x=reset",
            "x/y=reset",
            "*=rechunk:0",
            "*=trickle",
            "*=stall+status:503",
            "*=status:503+reset",
            "*=hold+stall",
            "*=head:200",
            "*=head:x:text/plain",
            "*=hold",
        ] {
            assert!(bad.parse::<Rule>().is_err(), "{bad:?} accepted");
        }
        assert!(parse_rules("*=reset; *=nope").is_err());
        assert_eq!(parse_rules("*=reset; ;GET /a=stall").unwrap().len(), 2);
    }

    #[test]
    fn a_head_and_a_body_compose() {
        let a: Action = "head:200:application/problem+json+stall".parse().unwrap();
        assert_eq!(
            a.split(),
            (
                &Action::Head {
                    code: 200,
                    content_type: "application/problem+json".into()
                },
                Some(&Action::Stall)
            )
        );
        let a: Action = "status:503+body:x+y".parse().unwrap();
        assert_eq!(a.split().1, Some(&Action::Body("x+y".into())));
        assert_eq!("hold:0".parse::<Action>().unwrap(), Action::Hold(None));
    }

    #[test]
    fn matches_method_path_and_count() {
        let r: Rule = "POST /a/*/c#2=reset".parse().unwrap();
        assert!(r.matches("POST", "/a/b/c"));
        assert!(r.matches("POST", "/a/b/x/c"));
        assert!(!r.matches("GET", "/a/b/c"));
        assert!(!r.matches("POST", "/a/b/cd"));
        assert!(!r.fires_on(1) && r.fires_on(2) && !r.fires_on(3));
        let any: Rule = "*#2+=stall".parse().unwrap();
        assert!(any.matches("DELETE", "/anything?x") && any.fires_on(5) && !any.fires_on(1));
        assert!(glob("*", ""));
        assert!(glob("/x*", "/x"));
        assert!(!glob("/x", "/xy"));
    }
}
