//! Text for errors and URLs: flattened, redacted error chains, quoted bodies, escaped path
//! segments.

use std::error::Error as StdError;

/// An error and its sources on one line (`a: b: c`), a source whose text its parent already
/// contains left out, URLs removed ([`strip_urls`]): transport errors name hosts, sandbox ids and
/// sometimes query strings with argv or env values.
pub fn error_chain(error: &(dyn StdError + 'static)) -> String {
    let mut s = error.to_string();
    let mut cur = error.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !m.is_empty() && !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        cur = c.source();
    }
    strip_urls(&s)
}

/// Replaces every URL (`scheme://…` up to whitespace, a quote or a closing bracket) with
/// `<url>`.
pub fn strip_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        // The scheme: the letters (and + - .) right before "://".
        let start = rest[..i]
            .char_indices()
            .rev()
            .take_while(|(_, c)| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
            .last()
            .map_or(i, |(j, _)| j);
        if start == i {
            out.push_str(&rest[..i + 3]);
            rest = &rest[i + 3..];
            continue;
        }
        out.push_str(&rest[..start]);
        let tail = &rest[i + 3..];
        let end = tail
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | ')' | ']' | '>' | '`'))
            .unwrap_or(tail.len());
        out.push_str("<url>");
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

/// Percent-encodes `segment` for one URL path segment (or a query value): every byte but the
/// RFC 3986 unreserved ones (`A-Z a-z 0-9 - . _ ~`) is escaped, `/` included.
pub fn escape_path_segment(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// At most `max` bytes of a provider's body, as text for an error message: invalid UTF-8
/// replaced, control characters escaped, and how much was cut said.
pub fn quote_body(body: &[u8], max: usize) -> String {
    let cut = body.len().min(max);
    let text = String::from_utf8_lossy(&body[..cut]);
    let mut out: String = text.chars().flat_map(char::escape_debug).collect();
    if body.len() > cut {
        out.push_str(&format!("… ({} more bytes)", body.len() - cut));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_stripped() {
        assert_eq!(
            strip_urls("error sending request for url (https://h:1/p?argv=secret): reset"),
            "error sending request for url (<url>): reset"
        );
        assert_eq!(
            strip_urls("ws://a/b and wss://c \"http://d/e\" x://"),
            "<url> and <url> \"<url>\" <url>"
        );
        assert_eq!(strip_urls("no scheme ://here"), "no scheme ://here");
    }

    #[test]
    fn error_chains_are_flat_deduplicated_and_redacted() {
        #[derive(Debug)]
        struct E(&'static str, Option<Box<E>>);
        impl std::fmt::Display for E {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.0)
            }
        }
        impl StdError for E {
            fn source(&self) -> Option<&(dyn StdError + 'static)> {
                self.1.as_deref().map(|e| e as _)
            }
        }
        let e = E(
            "request to http://x/y failed",
            Some(Box::new(E(
                "failed",
                Some(Box::new(E("connection reset", None))),
            ))),
        );
        assert_eq!(error_chain(&e), "request to <url> failed: connection reset");
    }

    #[test]
    fn path_segments_escape_everything_reserved() {
        assert_eq!(
            escape_path_segment("a b/c%d~e.f_g-h"),
            "a%20b%2Fc%25d~e.f_g-h"
        );
        assert_eq!(escape_path_segment("é"), "%C3%A9");
    }

    #[test]
    fn bodies_are_quoted_bounded() {
        assert_eq!(quote_body(b"ab\ncd", 10), "ab\\ncd");
        assert_eq!(quote_body("é\u{1}".as_bytes(), 10), "é\\u{1}");
        assert_eq!(quote_body(&[b'x'; 100], 3), "xxx… (97 more bytes)");
    }
}
