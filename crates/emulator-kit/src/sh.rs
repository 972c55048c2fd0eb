//! POSIX shell quoting, for the scripts emulators hand to a sandbox's shell (what a provider's
//! own service does when it wraps a command). Written here rather than shared with the adapters:
//! the emulators' side of every wire stays independent of the adapters'.

use std::borrow::Cow;

/// `arg` as one shell word: as is when it has only characters no shell treats specially, else
/// in single quotes (a `'` inside becomes `'\''`).
pub fn quote(arg: &str) -> Cow<'_, str> {
    let plain = !arg.is_empty()
        && arg.bytes().all(|b| {
            b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b'_' | b'@' | b'%' | b'+' | b':' | b',' | b'.' | b'/' | b'-'
                )
        });
    if plain {
        return Cow::Borrowed(arg);
    }
    let mut out = String::with_capacity(arg.len() + 2);
    out.push('\'');
    for c in arg.chars() {
        if c == '\'' {
            out.push_str("'\\''");
        } else {
            out.push(c);
        }
    }
    out.push('\'');
    Cow::Owned(out)
}

/// `argv` as one command line: each word [`quote`]d, separated by spaces.
pub fn join<S: AsRef<str>>(argv: &[S]) -> String {
    argv.iter()
        .map(|a| quote(a.as_ref()).into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_what_a_shell_would_split_or_expand() {
        assert_eq!(quote("plain/path-1.txt"), "plain/path-1.txt");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), "'it'\\''s'");
        assert_eq!(quote("$HOME"), "'$HOME'");
        assert_eq!(join(&["printf", "%s\n", "x y"]), "printf '%s\n' 'x y'");
    }
}
