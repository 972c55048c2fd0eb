//! Glob patterns, matched by the library against paths relative to the walk root.
//!
//! Syntax (matched per `/`-separated component, on raw bytes; `?` and classes match one UTF-8
//! character, or one byte that is not valid UTF-8):
//!
//! | pattern    | matches                                                                   |
//! |------------|---------------------------------------------------------------------------|
//! | `*`        | any run of characters within one component (including none and a leading `.`) |
//! | `?`        | exactly one character, not `/`                                            |
//! | `[abc]`, `[a-z]`, `[!a]`, `[^a]` | one character in (not in) the set               |
//! | `**`       | as a whole component: zero or more components (`**/x`, `a/**/b`); trailing (`a/**`), one or more |
//! | `{a,b}`    | either alternative (nesting allowed)                                      |
//! | `\c`       | the character `c` literally                                               |
//!
//! A pattern is relative: it may not be empty, start with `/`, end with `/`, or hold an empty,
//! `.` or `..` component.

use crate::error::ToolError;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Token {
    Byte(u8),
    Star,
    Any,
    Class {
        negated: bool,
        ranges: Vec<(u32, u32)>,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Segment {
    /// `**`
    AnyPath,
    Component(Vec<Token>),
}

/// A compiled glob pattern.
#[derive(Clone, Debug)]
pub struct Glob {
    source: String,
    alternatives: Vec<Vec<Segment>>,
}

/// What the walk can narrow on before the library matches exactly.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Prefilter {
    /// Literal leading directories (`""` = the root).
    pub start: String,
    /// A `find -name` pattern (literal characters and `*`) every match's last component matches.
    pub name: Option<String>,
}

fn bad(pattern: &str, message: impl Into<String>) -> ToolError {
    ToolError::InvalidPattern {
        pattern: pattern.to_owned(),
        message: message.into(),
    }
}

/// Expands `{a,b}` alternation (nested, escapes respected) into plain patterns.
fn expand_braces(p: &str, whole: &str) -> Result<Vec<String>, ToolError> {
    let b = p.as_bytes();
    let mut i = 0;
    let mut open = None;
    let mut in_class = false;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 1,
            b'[' if !in_class => in_class = true,
            b']' if in_class => in_class = false,
            b'{' if !in_class => {
                open = Some(i);
                break;
            }
            b'}' if !in_class => return Err(bad(whole, "a `}` without its `{`")),
            _ => {}
        }
        i += 1;
    }
    let Some(start) = open else {
        return Ok(vec![p.to_owned()]);
    };
    // Find the matching close brace and the top-level commas.
    let mut depth = 0;
    let mut commas = Vec::new();
    let mut end = None;
    let mut j = start + 1;
    let mut in_class = false;
    while j < b.len() {
        match b[j] {
            b'\\' => j += 1,
            b'[' if !in_class => in_class = true,
            b']' if in_class => in_class = false,
            b'{' if !in_class => depth += 1,
            b'}' if !in_class && depth == 0 => {
                end = Some(j);
                break;
            }
            b'}' if !in_class => depth -= 1,
            b',' if !in_class && depth == 0 => commas.push(j),
            _ => {}
        }
        j += 1;
    }
    let end = end.ok_or_else(|| bad(whole, "a `{` without its `}`"))?;
    let (head, tail) = (&p[..start], &p[end + 1..]);
    let mut bounds = vec![start];
    bounds.extend(commas);
    bounds.push(end);
    let mut out = Vec::new();
    for w in bounds.windows(2) {
        let alt = &p[w[0] + 1..w[1]];
        for expanded in expand_braces(&format!("{head}{alt}{tail}"), whole)? {
            out.push(expanded);
        }
        if out.len() > 4096 {
            return Err(bad(whole, "more than 4096 alternatives"));
        }
    }
    Ok(out)
}

fn parse_component(c: &str, whole: &str) -> Result<Segment, ToolError> {
    if c == "**" {
        return Ok(Segment::AnyPath);
    }
    let chars: Vec<char> = c.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    let push_char = |tokens: &mut Vec<Token>, ch: char| {
        let mut buf = [0u8; 4];
        for &byte in ch.encode_utf8(&mut buf).as_bytes() {
            tokens.push(Token::Byte(byte));
        }
    };
    while i < chars.len() {
        match chars[i] {
            '\\' => {
                let ch = *chars
                    .get(i + 1)
                    .ok_or_else(|| bad(whole, "a trailing `\\` escapes nothing"))?;
                push_char(&mut tokens, ch);
                i += 2;
            }
            '*' => {
                if tokens.last() != Some(&Token::Star) {
                    tokens.push(Token::Star);
                }
                i += 1;
            }
            '?' => {
                tokens.push(Token::Any);
                i += 1;
            }
            '[' => {
                let mut j = i + 1;
                let negated = matches!(chars.get(j), Some('!' | '^'));
                if negated {
                    j += 1;
                }
                let mut ranges = Vec::new();
                let mut first = true;
                loop {
                    let Some(&ch) = chars.get(j) else {
                        return Err(bad(whole, "a `[` without its `]`"));
                    };
                    if ch == ']' && !first {
                        j += 1;
                        break;
                    }
                    first = false;
                    let lo = if ch == '\\' {
                        j += 1;
                        *chars
                            .get(j)
                            .ok_or_else(|| bad(whole, "a `[` without its `]`"))?
                    } else {
                        ch
                    };
                    j += 1;
                    let hi = if chars.get(j) == Some(&'-')
                        && chars.get(j + 1).is_some_and(|&c| c != ']')
                    {
                        let mut h = chars[j + 1];
                        j += 2;
                        if h == '\\' {
                            h = *chars
                                .get(j)
                                .ok_or_else(|| bad(whole, "a `[` without its `]`"))?;
                            j += 1;
                        }
                        h
                    } else {
                        lo
                    };
                    if hi < lo {
                        return Err(bad(whole, format!("the range `{lo}-{hi}` is reversed")));
                    }
                    ranges.push((lo as u32, hi as u32));
                }
                tokens.push(Token::Class { negated, ranges });
                i = j;
            }
            ch => {
                push_char(&mut tokens, ch);
                i += 1;
            }
        }
    }
    Ok(Segment::Component(tokens))
}

impl Glob {
    /// Compiles `pattern`; a malformed one is [`ToolError::InvalidPattern`].
    pub fn new(pattern: &str) -> Result<Glob, ToolError> {
        if pattern.is_empty() {
            return Err(bad(pattern, "the pattern is empty"));
        }
        if pattern.contains('\0') {
            return Err(bad(pattern, "the pattern contains a NUL byte"));
        }
        let mut alternatives = Vec::new();
        for alt in expand_braces(pattern, pattern)? {
            if alt.starts_with('/') {
                return Err(bad(
                    pattern,
                    "the pattern is absolute; it must be relative to the root",
                ));
            }
            let mut segments = Vec::new();
            for c in alt.split('/') {
                match c {
                    "" => {
                        return Err(bad(
                            pattern,
                            "the pattern has an empty component (a `//` or a trailing `/`)",
                        ));
                    }
                    "." | ".." => {
                        return Err(bad(pattern, format!("the pattern has a `{c}` component")));
                    }
                    _ => {}
                }
                let seg = parse_component(c, pattern)?;
                if seg == Segment::AnyPath && segments.last() == Some(&Segment::AnyPath) {
                    continue;
                }
                segments.push(seg);
            }
            alternatives.push(segments);
        }
        Ok(Glob {
            source: pattern.to_owned(),
            alternatives,
        })
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// True if the relative path `path` matches.
    pub fn matches(&self, path: &[u8]) -> bool {
        let comps: Vec<&[u8]> = path.split(|&b| b == b'/').collect();
        self.alternatives
            .iter()
            .any(|segs| match_segments(segs, &comps))
    }

    /// True if the pattern matches every path (`**`).
    pub(crate) fn matches_everything(&self) -> bool {
        self.alternatives
            .iter()
            .any(|s| s.as_slice() == [Segment::AnyPath])
    }

    /// The literal leading directories and a `find -name` pattern, shared by every alternative.
    pub(crate) fn prefilter(&self) -> Prefilter {
        let per_alt: Vec<(Vec<String>, Option<String>)> = self
            .alternatives
            .iter()
            .map(|segs| {
                let mut start = Vec::new();
                for seg in &segs[..segs.len() - 1] {
                    match literal(seg) {
                        Some(l) => start.push(l),
                        None => break,
                    }
                }
                (start, name_filter(&segs[segs.len() - 1]))
            })
            .collect();
        let first = &per_alt[0];
        let mut common = first.0.len();
        for (start, _) in &per_alt[1..] {
            common = common.min(
                start
                    .iter()
                    .zip(&first.0)
                    .take_while(|(a, b)| a == b)
                    .count(),
            );
        }
        let name = if per_alt.iter().all(|(_, n)| n == &first.1) {
            first.1.clone()
        } else {
            None
        };
        Prefilter {
            start: first.0[..common].join("/"),
            name,
        }
    }
}

/// A component made only of literal bytes, as UTF-8 text.
fn literal(seg: &Segment) -> Option<String> {
    let Segment::Component(tokens) = seg else {
        return None;
    };
    let bytes: Option<Vec<u8>> = tokens
        .iter()
        .map(|t| match t {
            Token::Byte(b) => Some(*b),
            _ => None,
        })
        .collect();
    String::from_utf8(bytes?).ok()
}

/// The `find -name` superset of a last component: literal bytes and `*` (for `*` and `?`);
/// `None` where a class or `**` makes a superset useless or unsafe (fnmatch differs in details).
fn name_filter(seg: &Segment) -> Option<String> {
    let Segment::Component(tokens) = seg else {
        return None;
    };
    let mut out = Vec::new();
    for t in tokens {
        match t {
            Token::Byte(b'*' | b'?' | b'[' | b'\\') => return None,
            Token::Byte(b) => out.push(*b),
            Token::Star | Token::Any => {
                if out.last() != Some(&b'*') {
                    out.push(b'*');
                }
            }
            Token::Class { .. } => return None,
        }
    }
    if out == b"*" {
        return None;
    }
    String::from_utf8(out).ok()
}

fn match_segments(segs: &[Segment], comps: &[&[u8]]) -> bool {
    match segs.split_first() {
        None => comps.is_empty(),
        // A trailing `**` needs at least one component (`a/**` is what is inside `a`).
        Some((Segment::AnyPath, [])) => !comps.is_empty(),
        Some((Segment::AnyPath, rest)) => {
            (0..=comps.len()).any(|skip| match_segments(rest, &comps[skip..]))
        }
        Some((Segment::Component(tokens), rest)) => match comps.split_first() {
            Some((c, more)) => match_tokens(tokens, c) && match_segments(rest, more),
            None => false,
        },
    }
}

/// One character at the start of `s`: its code point (or 0x110000 + the byte for a byte that is
/// not valid UTF-8) and its length.
fn next_char(s: &[u8]) -> (u32, usize) {
    let len = match s[0] {
        0x00..=0x7f => 1,
        0xc2..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf4 => 4,
        _ => 0,
    };
    if len > 0
        && s.len() >= len
        && let Ok(st) = std::str::from_utf8(&s[..len])
        && let Some(ch) = st.chars().next()
    {
        return (ch as u32, len);
    }
    (0x11_0000 + u32::from(s[0]), 1)
}

fn match_tokens(tokens: &[Token], name: &[u8]) -> bool {
    // Iterative matching with backtracking to the last star.
    let (mut t, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    loop {
        if t < tokens.len() {
            match &tokens[t] {
                Token::Star => {
                    star = Some((t, n));
                    t += 1;
                    continue;
                }
                Token::Byte(b) if n < name.len() && name[n] == *b => {
                    t += 1;
                    n += 1;
                    continue;
                }
                Token::Any if n < name.len() => {
                    n += next_char(&name[n..]).1;
                    t += 1;
                    continue;
                }
                Token::Class { negated, ranges } if n < name.len() => {
                    let (ch, len) = next_char(&name[n..]);
                    let inside = ranges.iter().any(|&(lo, hi)| lo <= ch && ch <= hi);
                    if inside != *negated {
                        n += len;
                        t += 1;
                        continue;
                    }
                }
                _ => {}
            }
        } else if n == name.len() {
            return true;
        }
        // Mismatch: let the last star take one more character.
        match star {
            Some((st, sn)) if sn < name.len() => {
                let adv = next_char(&name[sn..]).1;
                star = Some((st, sn + adv));
                t = st + 1;
                n = sn + adv;
            }
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, path: &str) -> bool {
        Glob::new(p).unwrap().matches(path.as_bytes())
    }

    #[test]
    fn components_and_stars() {
        assert!(m("*.rs", "a.rs"));
        assert!(m("*.rs", ".hidden.rs"));
        assert!(!m("*.rs", "src/a.rs"));
        assert!(m("src/*.rs", "src/a.rs"));
        assert!(!m("src/*.rs", "src/x/a.rs"));
        assert!(m("**/*.rs", "a.rs"));
        assert!(m("**/*.rs", "x/y/a.rs"));
        assert!(m("src/**", "src/a/b"));
        assert!(!m("src/**", "src"));
        assert!(m("src/**/b", "src/b"));
        assert!(m("src/**/b", "src/x/y/b"));
        assert!(m("**", "anything/at/all"));
        assert!(m("a**b", "aXYb"));
        assert!(!m("a**b", "aX/Yb"));
        assert!(m("a*b*c", "aXbYbZc"));
    }

    #[test]
    fn characters_classes_braces_escapes() {
        assert!(m("caf?", "café"));
        assert!(!m("caf?", "caf"));
        assert!(m("[a-c]x", "bx"));
        assert!(!m("[!a-c]x", "bx"));
        assert!(m("[^a-c]x", "dx"));
        assert!(m("[é]", "é"));
        assert!(m("[]]", "]"));
        assert!(m("[a-]", "-"));
        assert!(m("{a,b/c}.rs", "b/c.rs"));
        assert!(m("{a,{b,c}}", "c"));
        assert!(!m("{a,b}", "ab"));
        assert!(m("\\*", "*"));
        assert!(!m("\\*", "x"));
        assert!(m("[*]", "*"));
        assert!(m("?", "\u{1F980}"));
        // A byte that is not UTF-8 is one character.
        assert!(Glob::new("a?b").unwrap().matches(b"a\xffb"));
        assert!(Glob::new("a*").unwrap().matches(b"a\xff\xfe"));
        assert!(Glob::new("-*").unwrap().matches(b"-dash"));
    }

    #[test]
    fn malformed_patterns_are_typed() {
        for p in [
            "", "/abs", "a//b", "a/", "./a", "a/../b", "[ab", "{a,b", "a}", "x\\", "[b-a]",
        ] {
            match Glob::new(p) {
                Err(ToolError::InvalidPattern { pattern, .. }) => assert_eq!(pattern, p),
                other => panic!("{p:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn prefilters_are_supersets() {
        let pf = |p: &str| Glob::new(p).unwrap().prefilter();
        assert_eq!(
            pf("src/**/*.rs"),
            Prefilter {
                start: "src".into(),
                name: Some("*.rs".into())
            }
        );
        assert_eq!(
            pf("a/b/c?.txt"),
            Prefilter {
                start: "a/b".into(),
                name: Some("c*.txt".into())
            }
        );
        assert_eq!(
            pf("**"),
            Prefilter {
                start: "".into(),
                name: None
            }
        );
        assert_eq!(pf("a/[xy].rs").name, None);
        assert_eq!(pf("a/\\*.rs").name, None);
        assert_eq!(
            pf("{a/x,a/y}/*.rs"),
            Prefilter {
                start: "a".into(),
                name: Some("*.rs".into())
            }
        );
        assert_eq!(pf("{a,b}/*.{rs,md}").name, None);
        assert_eq!(pf("{a,b}/*.{rs,md}").start, "");
        assert_eq!(pf("x/*").name, None);
    }
}
