//! [`under`]: a route's URL below a base URL that has a path of its own (`https://host/api`).

use url::Url;

/// `path` below `base`: the base's path without its trailing `/`, then `/`, then `path` without
/// its leading `/`; no query (the caller adds its own).
pub fn under(base: &Url, path: &str) -> Url {
    let mut u = base.clone();
    let p = format!(
        "{}/{}",
        u.path().trim_end_matches('/'),
        path.trim_start_matches('/')
    );
    u.set_path(&p);
    u.set_query(None);
    u
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_base_path_is_kept_and_slashes_are_not_doubled() {
        for (base, path, want) in [
            ("https://h/api", "v2/x", "https://h/api/v2/x"),
            ("https://h/api/", "/v2/x", "https://h/api/v2/x"),
            ("https://h", "sandboxes/a%2Fb", "https://h/sandboxes/a%2Fb"),
            ("http://127.0.0.1:9/p?q=1", "x", "http://127.0.0.1:9/p/x"),
        ] {
            let base = Url::parse(base).unwrap();
            assert_eq!(under(&base, path).as_str(), want, "{base} + {path}");
        }
    }
}
