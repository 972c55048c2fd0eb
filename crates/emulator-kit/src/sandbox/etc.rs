//! The sandbox's own account files (`/etc/passwd`, `group`, `shadow`, `gshadow`) and host names
//! (`/etc/hostname`, `hosts`), written into its upper layer before it starts.
//!
//! The host's system accounts (uid/gid below 1000, and `nobody`) are kept, so the host's own
//! files in the lower layer keep their owners' names; the host's regular users are dropped (the
//! host's uid 1000 is not the provider's `user`), and the provider's accounts are added. The
//! shadow files are fresh (no password anywhere): the host's hashes never reach a sandbox.

use super::spec::User;

/// A system account or group id on a Debian-like host.
fn is_system(id: u32) -> bool {
    id < 1000 || id == 65534
}

fn field(line: &str, n: usize) -> Option<&str> {
    line.split(':').nth(n)
}

fn id_of(line: &str) -> Option<u32> {
    field(line, 2)?.parse().ok()
}

/// `/etc/passwd`: the host's system accounts without those a provider account replaces (same
/// name or uid), then the provider's accounts.
pub(crate) fn passwd(host: &str, users: &[&User]) -> String {
    let mut out = String::new();
    for line in host.lines() {
        let (Some(name), Some(uid)) = (field(line, 0), id_of(line)) else {
            continue;
        };
        let replaced = users.iter().any(|u| u.name == name || u.uid == uid);
        if is_system(uid) && !(replaced && name != "root") {
            out.push_str(line);
            out.push('\n');
        }
    }
    for u in users.iter().filter(|u| !u.is_root()) {
        out.push_str(&format!(
            "{}:x:{}:{}::{}:{}\n",
            u.name, u.uid, u.gid, u.home, u.shell
        ));
    }
    out
}

/// `/etc/group`: the host's system groups (members filtered to accounts that exist), the
/// provider users added to their supplementary groups, and one primary group per provider user.
pub(crate) fn group(host: &str, users: &[&User], passwd: &str) -> String {
    let exists = |name: &str| passwd.lines().any(|l| field(l, 0) == Some(name));
    let mut out = String::new();
    for line in host.lines() {
        let (Some(name), Some(gid)) = (field(line, 0), id_of(line)) else {
            continue;
        };
        let primary = users
            .iter()
            .any(|u| !u.is_root() && (u.name == name || u.gid == gid));
        if !is_system(gid) || primary {
            continue;
        }
        let mut members: Vec<&str> = field(line, 3)
            .unwrap_or("")
            .split(',')
            .filter(|m| !m.is_empty() && exists(m))
            .collect();
        for u in users {
            if u.groups.iter().any(|g| g == name) && !members.contains(&u.name.as_str()) {
                members.push(&u.name);
            }
        }
        out.push_str(&format!("{name}:x:{gid}:{}\n", members.join(",")));
    }
    for u in users.iter().filter(|u| !u.is_root()) {
        out.push_str(&format!("{}:x:{}:\n", u.name, u.gid));
    }
    out
}

/// `/etc/shadow` or `/etc/gshadow` for these entries: locked, no hash.
pub(crate) fn shadow(entries: &str, gshadow: bool) -> String {
    entries
        .lines()
        .filter_map(|l| field(l, 0))
        .map(|name| {
            if gshadow {
                format!("{name}:*::\n")
            } else {
                format!("{name}:*:19000:0:99999:7:::\n")
            }
        })
        .collect()
}

/// `/etc/hosts` naming the sandbox's hostname.
pub(crate) fn hosts(hostname: &str) -> String {
    format!(
        "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t{hostname}\n"
    )
}

/// The gid of a group in a `/etc/group` text.
pub(crate) fn gid_of(group: &str, name: &str) -> Option<u32> {
    group
        .lines()
        .find(|l| field(l, 0) == Some(name))
        .and_then(id_of)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST_PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\n\
daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n\
cloudsdk:x:1000:1000::/home/cloudsdk:/bin/bash\n\
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n\
genesis:x:992:992::/x:/bin/sh\n";
    const HOST_GROUP: &str = "root:x:0:\nsudo:x:27:cloudsdk\nusers:x:100:\n\
cloudsdk:x:1000:\nnogroup:x:65534:\nold992:x:992:\n";

    #[test]
    fn provider_accounts_replace_host_users_and_keep_system_ones() {
        let user = User::new("user", 1000, "/home/user").groups(["sudo", "missing"]);
        let root = User::root();
        let users = [&user, &root];
        let p = passwd(HOST_PASSWD, &users);
        assert_eq!(
            p,
            "root:x:0:0:root:/root:/bin/bash\n\
daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n\
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n\
genesis:x:992:992::/x:/bin/sh\n\
user:x:1000:1000::/home/user:/bin/bash\n"
        );
        let g = group(HOST_GROUP, &users, &p);
        assert_eq!(
            g,
            "root:x:0:\nsudo:x:27:user\nusers:x:100:\nnogroup:x:65534:\nold992:x:992:\nuser:x:1000:\n"
        );
        assert_eq!(gid_of(&g, "sudo"), Some(27));
        assert_eq!(shadow("root:x:0:\n", true), "root:*::\n");
    }

    #[test]
    fn a_provider_uid_below_1000_replaces_the_host_account_with_that_uid() {
        let tools = User::new("genesis1ptools", 992, "/opt/x");
        let p = passwd(HOST_PASSWD, &[&tools]);
        assert!(!p.contains("genesis:x"), "{p}");
        assert!(
            p.ends_with("genesis1ptools:x:992:992::/opt/x:/bin/bash\n"),
            "{p}"
        );
        let g = group(HOST_GROUP, &[&tools], &p);
        assert!(!g.contains("old992"), "{g}");
        assert!(g.ends_with("genesis1ptools:x:992:\n"), "{g}");
    }
}
