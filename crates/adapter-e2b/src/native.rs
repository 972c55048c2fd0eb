//! The tools' listings served by envd's `filesystem.Filesystem/ListDir` (with `depth`) instead of
//! running `find` (see [`execseam_core::native`]).
//!
//! The native answer must be byte-for-byte what the script would print, so it is given only when
//! that is certain, and the script runs otherwise:
//!
//! - envd's filesystem calls run as root while commands run as the sandbox user: every directory
//!   `find` would have to read (the root, and each directory above the depth limit), and every
//!   directory above the root, must be readable and searchable by the user according to the
//!   owner, group and mode bits `ListDir`/`Stat` report (the user's supplementary groups are not
//!   known, so only a grant that holds without them counts);
//! - a root (or glob start) that is a symlink (the script's `find -H` follows a symlinked root;
//!   whether envd's `ListDir` reports the entries under the same path is not certain), a path
//!   `ListDir` reports outside the root, or any `ListDir` error other than
//!   not-found/not-a-directory sends the command to the script;
//! - a directory entry is a `FILE_TYPE_DIRECTORY` that is not a symlink (envd ≤ 0.6 reports
//!   symlinks as `FILE_TYPE_SYMLINK`, newer envd the target's type with `isSymlink`), as
//!   `find -type d` sees it.
//!
//! Grep has no envd equivalent and always runs its script.

use execseam_core::Output;
use execseam_tools_protocol::native::{self, Failure, ListOutput, NativeRequest};

use crate::connect::{CallError, Code, RpcError};
use crate::wire::{EntryInfo, FileType};

/// `ListDir`'s depth for "every level" (envd converts it to a Go `int`).
const ALL_LEVELS: u32 = i32::MAX as u32;

/// What the native path concluded.
pub(crate) enum Native {
    /// The output the script would have produced.
    Output(Output),
    /// Not provably identical: run the script.
    RunScript,
}

/// The checks need the user's name (owner and group names are compared with it).
pub(crate) struct Who<'a> {
    pub user: &'a str,
}

impl Who<'_> {
    /// May the user list and enter this directory, without counting supplementary groups?
    pub(crate) fn can_read_dir(&self, e: &EntryInfo) -> bool {
        self.allows(e, 0o5)
    }

    /// May the user enter (search) this directory?
    fn can_search(&self, e: &EntryInfo) -> bool {
        self.allows(e, 0o1)
    }

    fn allows(&self, e: &EntryInfo, bits: u32) -> bool {
        if self.user == "root" {
            return true;
        }
        let m = e.mode;
        let owner = (m >> 6) & bits == bits;
        let group = (m >> 3) & bits == bits;
        let other = m & bits == bits;
        if e.owner == self.user {
            owner
        } else if e.group == self.user {
            group
        } else {
            // Not the owner; a supplementary group could apply: count only what both grant.
            group && other
        }
    }
}

fn is_dir(e: &EntryInfo) -> bool {
    e.file_type == FileType::Directory && !e.is_symlink && e.symlink_target.is_none()
}

fn not_found(e: &CallError) -> bool {
    matches!(
        e,
        CallError::Rpc {
            error: RpcError {
                code: Code::NotFound,
                ..
            },
            ..
        }
    )
}

fn not_a_directory(e: &CallError) -> bool {
    matches!(
        e,
        CallError::Rpc {
            error: RpcError {
                code: Code::InvalidArgument,
                message,
            },
            ..
        } if message.starts_with("path is not a directory")
    )
}

/// A transport-level or service failure (an `Err` of the exec), as opposed to an answer about
/// the path (which decides between a typed tool failure and the script).
pub(crate) fn is_infrastructure(e: &CallError) -> bool {
    match e {
        CallError::Rpc {
            error: RpcError { code, .. },
            ..
        } => matches!(
            code,
            Code::Unavailable
                | Code::Unauthenticated
                | Code::ResourceExhausted
                | Code::DeadlineExceeded
                | Code::Canceled
        ),
        CallError::Http { status, .. } => *status == 401 || *status == 429 || *status >= 500,
        _ => true,
    }
}

/// The directories above `root` (`/`, `/a`, … for `/a/b`), which must be searchable.
fn ancestors(root: &str) -> Vec<String> {
    let mut out = Vec::new();
    if root == "/" {
        return out;
    }
    out.push("/".to_owned());
    let parts: Vec<&str> = root[1..].split('/').collect();
    for i in 1..parts.len() {
        out.push(format!("/{}", parts[..i].join("/")));
    }
    out
}

/// The path of an entry relative to `root`, if `ListDir` reported it under the root.
fn rel<'a>(root: &str, e: &'a EntryInfo) -> Option<&'a str> {
    native::relative(root, e.path.as_bytes()).and_then(|r| std::str::from_utf8(r).ok())
}

/// The depth of a relative path (1 for a child of the root).
fn depth_of(rel: &str) -> u32 {
    rel.split('/').count() as u32
}

/// Answers a `List` or `Glob` from `Stat`/`ListDir` results, given `stat(path)` and
/// `list(path, depth)` (the envd calls, injected for tests).
pub(crate) async fn serve<S, SF, L, LF>(
    req: &NativeRequest,
    who: &Who<'_>,
    stat: S,
    list: L,
) -> Result<Native, CallError>
where
    S: Fn(String) -> SF,
    SF: Future<Output = Result<EntryInfo, CallError>>,
    L: Fn(String, u32) -> LF,
    LF: Future<Output = Result<Vec<EntryInfo>, CallError>>,
{
    let root = req.root().to_owned();
    // Every directory above the root must be searchable, or the script fails differently.
    let above = futures_util::future::join_all(ancestors(&root).into_iter().map(&stat)).await;
    for a in above {
        match a {
            Ok(e) if is_dir(&e) && who.can_search(&e) => {}
            Ok(_) => return Ok(Native::RunScript),
            Err(e) if is_infrastructure(&e) => return Err(e),
            Err(_) => return Ok(Native::RunScript),
        }
    }
    let root_entry = match stat(root.clone()).await {
        Ok(e) => e,
        Err(e) if not_found(&e) => {
            return Ok(Native::Output(native::failure(Failure::NotFound, &root)));
        }
        Err(e) if is_infrastructure(&e) => return Err(e),
        Err(_) => return Ok(Native::RunScript),
    };
    if root_entry.symlink_target.is_some() || root_entry.is_symlink {
        return Ok(Native::RunScript);
    }
    if root_entry.file_type != FileType::Directory {
        return Ok(match root_entry.file_type {
            FileType::File => Native::Output(native::failure(Failure::NotADirectory, &root)),
            _ => Native::RunScript,
        });
    }
    if !who.can_read_dir(&root_entry) {
        return Ok(Native::RunScript);
    }
    match req {
        NativeRequest::List(l) => {
            let entries = match list(root.clone(), l.depth.unwrap_or(ALL_LEVELS)).await {
                Ok(v) => v,
                Err(e) if is_infrastructure(&e) => return Err(e),
                Err(_) => return Ok(Native::RunScript),
            };
            let mut out = ListOutput::new(&root);
            for e in &entries {
                let Some(r) = rel(&root, e) else {
                    return Ok(Native::RunScript);
                };
                let dir = is_dir(e);
                // `find` reads every directory above the depth limit.
                if dir && l.depth.is_none_or(|d| depth_of(r) < d) && !who.can_read_dir(e) {
                    return Ok(Native::RunScript);
                }
                out.entry(r.as_bytes(), dir);
            }
            Ok(Native::Output(out.finish()))
        }
        NativeRequest::Glob(g) => {
            let start = if g.start.is_empty() {
                root.clone()
            } else {
                format!("{}/{}", root.trim_end_matches('/'), g.start)
            };
            if !g.start.is_empty() {
                // `[ -d "$s" ] || exit 0`; the directories between the root and the start must
                // be searchable, and the start readable.
                let mut path = root.trim_end_matches('/').to_owned();
                let parts: Vec<&str> = g.start.split('/').collect();
                for (i, part) in parts.iter().enumerate() {
                    path = format!("{path}/{part}");
                    match stat(path.clone()).await {
                        Ok(e) if e.symlink_target.is_some() || e.is_symlink => {
                            return Ok(Native::RunScript);
                        }
                        Ok(e) if !is_dir(&e) => {
                            return Ok(Native::Output(ListOutput::new(&root).finish()));
                        }
                        Ok(e) => {
                            let last = i + 1 == parts.len();
                            let ok = if last {
                                who.can_read_dir(&e)
                            } else {
                                who.can_search(&e)
                            };
                            if !ok {
                                return Ok(Native::RunScript);
                            }
                        }
                        Err(e) if not_found(&e) => {
                            return Ok(Native::Output(ListOutput::new(&root).finish()));
                        }
                        Err(e) if is_infrastructure(&e) => return Err(e),
                        Err(_) => return Ok(Native::RunScript),
                    }
                }
            }
            let entries = match list(start.clone(), ALL_LEVELS).await {
                Ok(v) => v,
                Err(e) if is_infrastructure(&e) => return Err(e),
                Err(e) if not_found(&e) || not_a_directory(&e) => {
                    return Ok(Native::Output(ListOutput::new(&root).finish()));
                }
                Err(_) => return Ok(Native::RunScript),
            };
            let mut out = ListOutput::new(&root);
            for e in &entries {
                if native::relative(&start, e.path.as_bytes()).is_none() {
                    return Ok(Native::RunScript);
                }
                let Some(r) = rel(&root, e) else {
                    return Ok(Native::RunScript);
                };
                if is_dir(e) {
                    if !who.can_read_dir(e) {
                        return Ok(Native::RunScript);
                    }
                    continue;
                }
                if g.matches_name(e.name.as_bytes()) {
                    out.entry(r.as_bytes(), false);
                }
            }
            Ok(Native::Output(out.finish()))
        }
        _ => Ok(Native::RunScript),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str, t: FileType, mode: u32, owner: &str) -> EntryInfo {
        EntryInfo {
            name: path.rsplit('/').next().unwrap().to_owned(),
            file_type: t,
            path: path.to_owned(),
            mode,
            owner: owner.to_owned(),
            group: owner.to_owned(),
            ..EntryInfo::default()
        }
    }

    #[test]
    fn permissions_are_judged_without_supplementary_groups() {
        let who = Who { user: "user" };
        assert!(who.can_read_dir(&entry("/a", FileType::Directory, 0o700, "user")));
        assert!(!who.can_read_dir(&entry("/a", FileType::Directory, 0o300, "user")));
        assert!(who.can_read_dir(&entry("/a", FileType::Directory, 0o755, "root")));
        assert!(!who.can_read_dir(&entry("/a", FileType::Directory, 0o750, "root")));
        // Other grants but a group the user may be in denies: not certain.
        assert!(!who.can_read_dir(&entry("/a", FileType::Directory, 0o705, "root")));
        assert!(who.can_search(&entry("/a", FileType::Directory, 0o711, "root")));
        assert!(Who { user: "root" }.can_read_dir(&entry("/a", FileType::Directory, 0, "x")));
    }

    #[test]
    fn ancestors_of_a_root() {
        assert_eq!(ancestors("/"), Vec::<String>::new());
        assert_eq!(ancestors("/a"), vec!["/"]);
        assert_eq!(ancestors("/a/b/c"), vec!["/", "/a", "/a/b"]);
    }

    #[test]
    fn symlinks_are_never_directories() {
        let mut e = entry("/r/l", FileType::Directory, 0o777, "user");
        e.is_symlink = true;
        assert!(!is_dir(&e));
        assert!(!is_dir(&entry("/r/l", FileType::Symlink, 0o777, "user")));
        assert!(is_dir(&entry("/r/d", FileType::Directory, 0o755, "user")));
    }
}
