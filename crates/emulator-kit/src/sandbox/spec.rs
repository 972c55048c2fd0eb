//! What a provider's sandbox looks like from inside (its users, hostname, directories and
//! environment), and how this host makes sandboxes ([`Sandboxing`]: the isolation in force, the
//! host directories bound in on purpose, where the sandboxes' state lives).

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::Isolation;

/// An account inside the sandbox (a line of its own `/etc/passwd`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    /// Login name (`user`, `daytona`, `root`).
    pub name: String,
    /// Numeric uid, as the provider's image assigns it.
    pub uid: u32,
    /// Primary gid (a group of the same name is created).
    pub gid: u32,
    /// Home directory, created owned by the user (`/home/user`; `/root` for root).
    pub home: String,
    /// Login shell.
    pub shell: String,
    /// Supplementary groups by name (`sudo`, `users`); groups this host lacks are skipped.
    pub groups: Vec<String>,
}

impl User {
    /// An unprivileged user with a group of the same name and id, `/bin/bash` as shell.
    pub fn new(name: &str, uid: u32, home: &str) -> User {
        User {
            name: name.to_owned(),
            uid,
            gid: uid,
            home: home.to_owned(),
            shell: "/bin/bash".to_owned(),
            groups: Vec::new(),
        }
    }

    /// `root` (uid 0), home `/root`.
    pub fn root() -> User {
        User {
            shell: "/bin/bash".to_owned(),
            ..User::new("root", 0, "/root")
        }
    }

    /// With these supplementary groups.
    #[must_use]
    pub fn groups<I: IntoIterator<Item = S>, S: Into<String>>(mut self, groups: I) -> User {
        self.groups = groups.into_iter().map(Into::into).collect();
        self
    }

    /// True for uid 0.
    pub fn is_root(&self) -> bool {
        self.uid == 0
    }
}

/// A directory that exists when the sandbox starts, with its owner and mode (`/workspace` owned
/// by root, `/tmp` world-writable and sticky).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dir {
    /// Absolute path inside the sandbox.
    pub path: String,
    /// Owner uid.
    pub uid: u32,
    /// Owner gid.
    pub gid: u32,
    /// Permission bits (`0o755`, `0o1777`).
    pub mode: u32,
}

impl Dir {
    /// A directory owned by `user` with `mode`.
    pub fn owned(path: &str, user: &User, mode: u32) -> Dir {
        Dir {
            path: path.to_owned(),
            uid: user.uid,
            gid: user.gid,
            mode,
        }
    }

    /// A directory owned by root, mode 0755.
    pub fn root(path: &str) -> Dir {
        Dir {
            path: path.to_owned(),
            uid: 0,
            gid: 0,
            mode: 0o755,
        }
    }
}

/// What a provider's sandbox looks like from inside.
#[derive(Clone, Debug)]
pub struct SandboxSpec {
    /// Short provider name; prefixes the sandboxes' state directories on the host.
    pub name: String,
    /// The hostname commands see (`hostname`, `uname -n`).
    pub hostname: String,
    /// The user commands run as by default; its home is created and owned by it.
    pub user: User,
    /// More accounts that exist in the sandbox (root always exists).
    pub other_users: Vec<User>,
    /// Directories that exist at start besides the users' homes and `/tmp`.
    pub dirs: Vec<Dir>,
    /// The provider's default environment (PATH, LANG, …). HOME, USER and LOGNAME come from the
    /// user a command runs as unless set here.
    pub env: BTreeMap<String, String>,
    /// The host's network (the default), or, when false, a network namespace of its own with
    /// loopback only ([`without_network`](Self::without_network)).
    pub network: bool,
}

impl SandboxSpec {
    /// A spec with the provider's name, hostname and user, no extra directories, and `env`.
    pub fn new<I, K, V>(name: &str, hostname: &str, user: User, env: I) -> SandboxSpec
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        SandboxSpec {
            name: name.to_owned(),
            hostname: hostname.to_owned(),
            user,
            other_users: Vec::new(),
            dirs: Vec::new(),
            env: env.into_iter().map(|(k, v)| (k.into(), v.into())).collect(),
            network: true,
        }
    }

    /// A hostname-safe form of a sandbox's id or name: ASCII letters and digits lowercased,
    /// anything else `-`, at most 63 characters (empty for an empty `id`).
    pub fn hostname_of(id: &str) -> String {
        id.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '-'
                }
            })
            .take(63)
            .collect()
    }

    /// With a network namespace of its own: loopback only, nothing else reachable (needs
    /// [`Isolation::Namespaces`](super::Isolation::Namespaces); `Sandbox::create` refuses it
    /// otherwise with `Unsupported`).
    #[must_use]
    pub fn without_network(mut self) -> SandboxSpec {
        self.network = false;
        self
    }

    /// With these directories at start.
    #[must_use]
    pub fn dirs<I: IntoIterator<Item = Dir>>(mut self, dirs: I) -> SandboxSpec {
        self.dirs.extend(dirs);
        self
    }

    /// With these accounts besides the default user and root.
    #[must_use]
    pub fn other_users<I: IntoIterator<Item = User>>(mut self, users: I) -> SandboxSpec {
        self.other_users.extend(users);
        self
    }

    /// The accounts the spec lists: the default user first, then the others (root exists in
    /// every sandbox whether listed or not).
    pub fn users(&self) -> Vec<&User> {
        let mut all: Vec<&User> = std::iter::once(&self.user)
            .chain(&self.other_users)
            .collect();
        let mut seen = std::collections::BTreeSet::new();
        all.retain(|u| seen.insert(u.name.clone()));
        all
    }

    /// The account named `name`, if it exists in the sandbox.
    pub fn user_named(&self, name: &str) -> Option<&User> {
        self.users().into_iter().find(|u| u.name == name)
    }

    /// The paths a sandbox owns privately in [`Isolation::Translate`] (where the rest of the
    /// filesystem is the host's): the homes, `/tmp`, the extra directories, sorted and unique.
    pub fn private_paths(&self) -> Vec<String> {
        let mut paths: Vec<String> = self
            .users()
            .iter()
            .map(|u| u.home.clone())
            .chain(std::iter::once("/tmp".to_owned()))
            .chain(self.dirs.iter().map(|d| d.path.clone()))
            .collect();
        paths.sort();
        paths.dedup();
        paths
    }
}

/// A host path bound into every sandbox on purpose (`--mount HOST:SANDBOX[:ro]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    /// The directory (or file) on the host; made absolute when parsed.
    pub host: PathBuf,
    /// Where it appears inside the sandbox (absolute).
    pub sandbox: String,
    /// Mounted read-only.
    pub read_only: bool,
}

impl std::str::FromStr for Mount {
    type Err = String;

    /// `HOST:SANDBOX` or `HOST:SANDBOX:ro` (`:rw` is accepted and is the default).
    fn from_str(s: &str) -> Result<Mount, String> {
        let parts: Vec<&str> = s.split(':').collect();
        let (host, sandbox, read_only) = match parts.as_slice() {
            [h, t] => (*h, *t, false),
            [h, t, "ro"] => (*h, *t, true),
            [h, t, "rw"] => (*h, *t, false),
            [_, _, o] => return Err(format!("unknown mount option {o:?} (want ro or rw)")),
            _ => return Err("want HOST:SANDBOX[:ro]".to_owned()),
        };
        if host.is_empty() || sandbox.is_empty() {
            return Err("want HOST:SANDBOX[:ro]".to_owned());
        }
        if !sandbox.starts_with('/') || sandbox == "/" || sandbox.split('/').any(|c| c == "..") {
            return Err(format!(
                "the sandbox path {sandbox:?} must be absolute, not `/`, without `..`"
            ));
        }
        let host = std::path::Path::new(host);
        let host = std::path::absolute(host).map_err(|e| format!("{}: {e}", host.display()))?;
        if !host.exists() {
            return Err(format!("{} does not exist", host.display()));
        }
        Ok(Mount {
            host,
            sandbox: sandbox.trim_end_matches('/').to_owned(),
            read_only,
        })
    }
}

/// How this host makes sandboxes: shared by every sandbox of an emulator.
#[derive(Clone, Debug)]
pub struct Sandboxing {
    /// The isolation in force.
    pub isolation: Isolation,
    /// Host paths bound into every sandbox.
    pub mounts: Vec<Mount>,
    /// Where the sandboxes' state directories are created (default: the system temp dir).
    pub state_dir: Option<PathBuf>,
}

impl Default for Sandboxing {
    fn default() -> Self {
        Sandboxing {
            isolation: Isolation::detect(),
            mounts: Vec::new(),
            state_dir: None,
        }
    }
}

impl Sandboxing {
    /// The default (detected isolation, no mounts, the system temp dir) with this isolation.
    pub fn with_isolation(isolation: Isolation) -> Sandboxing {
        Sandboxing {
            isolation,
            ..Sandboxing::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_flags_parse_and_bad_ones_are_refused() {
        let m: Mount = "/tmp:/home/user/repo:ro".parse().unwrap();
        assert_eq!(m.host, PathBuf::from("/tmp"));
        assert_eq!(m.sandbox, "/home/user/repo");
        assert!(m.read_only);
        let m: Mount = "/tmp:/repo/".parse().unwrap();
        assert!(!m.read_only);
        assert_eq!(m.sandbox, "/repo");
        for bad in [
            "/tmp",
            "/tmp:repo",
            "/tmp:/",
            "/tmp:/a/../b",
            "/tmp:/a:rx",
            "/nonexistent-execseam:/a",
            ":/a",
        ] {
            assert!(bad.parse::<Mount>().is_err(), "{bad}");
        }
    }

    #[test]
    fn users_lists_each_account_once() {
        let spec = SandboxSpec::new("t", "h", User::new("u", 1000, "/home/u"), [("A", "b")])
            .other_users([User::root(), User::new("u", 1000, "/home/u")]);
        let names: Vec<_> = spec.users().iter().map(|u| u.name.clone()).collect();
        assert_eq!(names, ["u", "root"]);
        assert_eq!(spec.private_paths(), ["/home/u", "/root", "/tmp"]);
    }
}
