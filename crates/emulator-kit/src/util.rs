//! Small helpers shared by the emulators: RFC 3339 timestamps without a date-time dependency, ids,
//! lexical path cleaning, creating missing directories one by one, and
//! `application/x-www-form-urlencoded` query strings.

/// `Debug` for a type some of whose fields are not (or must not be) shown: the named fields,
/// then `..` (`finish_non_exhaustive`). `debug_fields!(Session: id, command);`
#[macro_export]
macro_rules! debug_fields {
    ($ty:ident: $($field:ident),+ $(,)?) => {
        impl ::std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.debug_struct(stringify!($ty))
                    $(.field(stringify!($field), &self.$field))+
                    .finish_non_exhaustive()
            }
        }
    };
}

use std::time::{SystemTime, UNIX_EPOCH};

use crate::clock::{self, Fraction};

/// Seconds since the Unix epoch.
pub fn unix(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    }
}

/// `2026-01-05T10:30:00Z` (UTC, whole seconds).
pub fn rfc3339(t: SystemTime) -> String {
    clock::rfc3339(t, Fraction::None)
}

/// A fresh lowercase hex id of `len` characters (not cryptographic; ids only need to differ).
pub fn hex_id(len: usize) -> String {
    clock::hex_id(len)
}

/// `a/./b/../c` → `/a/c`: a path cleaned lexically as Go's `path.Clean` cleans an absolute one
/// (one leading `/`, no trailing one, `..` never climbs above `/`; symlinks are not resolved).
pub fn clean_path(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for p in path.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

/// Creates the directories of the host path `dir` that `missing` says are missing, one by one
/// from the outermost, calling `created` on each one this call creates (to give it to a user);
/// one that appears meanwhile (`AlreadyExists`) is left as it is.
pub fn create_missing_dirs(
    dir: &std::path::Path,
    missing: impl Fn(&std::path::Path) -> bool,
    mut created: impl FnMut(&std::path::Path) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let mut dirs = Vec::new();
    let mut p = dir;
    while missing(p) {
        dirs.push(p);
        match p.parent() {
            Some(parent) => p = parent,
            None => break,
        }
    }
    for dir in dirs.into_iter().rev() {
        match std::fs::create_dir(dir) {
            Ok(()) => created(dir)?,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `path` against the directory `cwd` (an absolute `path` wins), cleaned by [`clean_path`].
pub fn resolve_path(cwd: &str, path: &str) -> String {
    if path.starts_with('/') {
        clean_path(path)
    } else {
        clean_path(&format!("{}/{path}", cwd.trim_end_matches('/')))
    }
}

/// The pairs of a query string, in order, with repeated keys kept (`cmd=a&cmd=b`), as Go's
/// `url.ParseQuery` reads them: empty pieces are skipped, a piece without `=` has an empty value.
pub fn form_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (form_decode(k), form_decode(v)),
            None => (form_decode(p), String::new()),
        })
        .collect()
}

/// Percent-decoding with `+` as a space (`application/x-www-form-urlencoded`); an invalid escape
/// is kept literally and invalid UTF-8 is replaced.
pub fn form_decode(s: &str) -> String {
    fn hex(b: u8) -> Option<u8> {
        (b as char).to_digit(16).map(|d| d as u8)
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push(h << 4 | l);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn formats_known_instants() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let t = UNIX_EPOCH + Duration::from_secs(1_767_609_000);
        assert_eq!(rfc3339(t), "2026-01-05T10:30:00Z");
        let t = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339(t), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn ids_differ() {
        let (a, b) = (hex_id(14), hex_id(14));
        assert_eq!(a.len(), 14);
        assert_ne!(a, b);
    }

    #[test]
    fn paths_clean_lexically() {
        assert_eq!(clean_path("/a/./b/../c/"), "/a/c");
        assert_eq!(clean_path("/../.."), "/");
        assert_eq!(resolve_path("/home/u/", "x/../y"), "/home/u/y");
        assert_eq!(resolve_path("/home/u", "/etc//hosts"), "/etc/hosts");
    }

    #[test]
    fn queries_decode_as_forms() {
        let q = form_pairs("cmd=sh&cmd=-c&cmd=echo+%22a%26b%22&&x&e=%zz%4&s=%+1%C3%A9");
        let want = [
            ("cmd", "sh"),
            ("cmd", "-c"),
            ("cmd", "echo \"a&b\""),
            ("x", ""),
            ("e", "%zz%4"),
            ("s", "% 1é"),
        ];
        let got: Vec<(&str, &str)> = q.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(got, want);
    }
}
