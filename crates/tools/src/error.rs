use std::fmt;

use execseam_core::{Error, ErrorKind, Exit, Retry, Tool};

/// Why a tool failed.
///
/// Two families:
///
/// - **About the request** (the path, the pattern, the patch): [`NotFound`](ToolError::NotFound),
///   [`NotADirectory`](ToolError::NotADirectory), [`IsADirectory`](ToolError::IsADirectory),
///   [`PermissionDenied`](ToolError::PermissionDenied), [`OutsideRoot`](ToolError::OutsideRoot),
///   [`InvalidPattern`](ToolError::InvalidPattern), [`InvalidArgument`](ToolError::InvalidArgument),
///   [`AlreadyExists`](ToolError::AlreadyExists), [`InvalidPatch`](ToolError::InvalidPatch),
///   [`PatchConflict`](ToolError::PatchConflict), [`NoMatch`](ToolError::NoMatch),
///   [`NotUnique`](ToolError::NotUnique). Retrying the same request fails the same way.
/// - **About the infrastructure**: [`Exec`](ToolError::Exec) wraps the seam's
///   [`execseam_core::Error`] unchanged (its kind and retry class are the adapter's), including
///   [`ErrorKind::Protocol`] when the sandbox's answer does not follow the tool's wire format and
///   [`ErrorKind::Unsupported`] when the adapter cannot deliver stdin to `write`; and
///   [`Failed`](ToolError::Failed): the tool's command ended in a way no other variant describes
///   (disk full, killed, `find` missing), with its exit and stderr.
#[non_exhaustive]
#[derive(Debug)]
pub enum ToolError {
    /// The seam failed: an infrastructure error, exactly as the adapter reported it.
    Exec(Error),
    /// The path (or the walk root, or a parent directory) does not exist.
    NotFound {
        /// The absolute path.
        path: String,
    },
    /// A directory was needed (a walk root, a parent) and the path is something else.
    NotADirectory {
        /// The absolute path.
        path: String,
    },
    /// A file was needed (read, write) and the path is a directory.
    IsADirectory {
        /// The absolute path.
        path: String,
    },
    /// The sandbox user may not read (or write, or list) the path.
    PermissionDenied {
        /// The absolute path.
        path: String,
    },
    /// A glob (library-side) or a regular expression (the sandbox's `grep`) is malformed; never an
    /// empty result.
    InvalidPattern {
        /// The pattern.
        pattern: String,
        /// What is wrong, as the library or the sandbox's `grep` says it.
        message: String,
    },
    /// The request is malformed before anything runs: a relative or `..` path, an empty range.
    InvalidArgument {
        /// What is wrong.
        message: String,
    },
    /// The path is outside the root the tools are confined to ([`Tools::confined`], and
    /// `apply_patch`'s root), or reached through a symlink below it; nothing was read or
    /// written.
    ///
    /// [`Tools::confined`]: crate::Tools::confined
    OutsideRoot {
        /// The absolute path (the symlink's, when one was on the way).
        path: String,
    },
    /// A patch creates a file that already exists.
    AlreadyExists {
        /// The absolute path.
        path: String,
    },
    /// The patch text is not a unified diff this library applies.
    InvalidPatch {
        /// 1-based line of the patch text.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A hunk does not apply to the file as it is; nothing was written.
    PatchConflict {
        /// The absolute path of the file.
        path: String,
        /// 1-based index of the hunk within that file's section.
        hunk: usize,
        /// What did not match.
        message: String,
    },
    /// `edit`: the text to replace is not in the file; nothing was written.
    NoMatch {
        /// The absolute path of the file.
        path: String,
    },
    /// `edit` without `replace_all`: the text to replace occurs more than once; nothing was
    /// written.
    NotUnique {
        /// The absolute path of the file.
        path: String,
        /// How many times it occurs (non-overlapping, from the start).
        count: usize,
    },
    /// The tool's command ended in a way the tool does not recognise (its exit and stderr).
    Failed {
        /// The tool.
        tool: Tool,
        /// How it ended.
        exit: Exit,
        /// Its stderr (lossily decoded, at most 4 KiB).
        stderr: String,
    },
}

impl ToolError {
    /// The path the error is about, if it is about one.
    pub fn path(&self) -> Option<&str> {
        match self {
            ToolError::NotFound { path }
            | ToolError::NotADirectory { path }
            | ToolError::IsADirectory { path }
            | ToolError::PermissionDenied { path }
            | ToolError::OutsideRoot { path }
            | ToolError::AlreadyExists { path }
            | ToolError::PatchConflict { path, .. }
            | ToolError::NoMatch { path }
            | ToolError::NotUnique { path, .. } => Some(path),
            _ => None,
        }
    }

    /// The retry class: the adapter's for [`ToolError::Exec`], [`Retry::Never`] otherwise (the
    /// same request fails the same way until the sandbox changes).
    pub fn retry(&self) -> Retry {
        match self {
            ToolError::Exec(e) => e.retry(),
            _ => Retry::Never,
        }
    }

    /// The infrastructure error, if this is one.
    pub fn as_exec(&self) -> Option<&Error> {
        match self {
            ToolError::Exec(e) => Some(e),
            _ => None,
        }
    }

    /// A short stable name of the variant (`not-found`, `exec`, …), for JSON and logs.
    pub fn code(&self) -> &'static str {
        match self {
            ToolError::Exec(_) => "exec",
            ToolError::NotFound { .. } => "not-found",
            ToolError::NotADirectory { .. } => "not-a-directory",
            ToolError::IsADirectory { .. } => "is-a-directory",
            ToolError::PermissionDenied { .. } => "permission-denied",
            ToolError::OutsideRoot { .. } => "outside-root",
            ToolError::InvalidPattern { .. } => "invalid-pattern",
            ToolError::InvalidArgument { .. } => "invalid-argument",
            ToolError::AlreadyExists { .. } => "already-exists",
            ToolError::InvalidPatch { .. } => "invalid-patch",
            ToolError::PatchConflict { .. } => "patch-conflict",
            ToolError::NoMatch { .. } => "no-match",
            ToolError::NotUnique { .. } => "not-unique",
            ToolError::Failed { .. } => "failed",
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> ToolError {
        ToolError::InvalidArgument {
            message: message.into(),
        }
    }

    pub(crate) fn protocol(
        exec_provider: &str,
        tool: &Tool,
        message: impl Into<String>,
    ) -> ToolError {
        ToolError::Exec(
            Error::protocol(message)
                .with_provider(exec_provider.to_owned())
                .with_operation(tool.as_str().to_owned()),
        )
    }
}

impl From<Error> for ToolError {
    fn from(e: Error) -> ToolError {
        ToolError::Exec(e)
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolError::Exec(e) => write!(f, "{e}"),
            ToolError::NotFound { path } => write!(f, "not found: {path}"),
            ToolError::NotADirectory { path } => write!(f, "not a directory: {path}"),
            ToolError::IsADirectory { path } => write!(f, "is a directory: {path}"),
            ToolError::PermissionDenied { path } => write!(f, "permission denied: {path}"),
            ToolError::OutsideRoot { path } => {
                write!(f, "outside the root (or through a symlink): {path}")
            }
            ToolError::InvalidPattern { pattern, message } => {
                write!(f, "invalid pattern {pattern:?}: {message}")
            }
            ToolError::InvalidArgument { message } => write!(f, "invalid argument: {message}"),
            ToolError::AlreadyExists { path } => write!(f, "already exists: {path}"),
            ToolError::InvalidPatch { line, message } => {
                write!(f, "invalid patch (line {line}): {message}")
            }
            ToolError::PatchConflict {
                path,
                hunk,
                message,
            } => write!(f, "patch does not apply to {path} (hunk {hunk}): {message}"),
            ToolError::NoMatch { path } => write!(f, "the text to replace is not in {path}"),
            ToolError::NotUnique { path, count } => write!(
                f,
                "the text to replace occurs {count} times in {path}; give more context or replace_all"
            ),
            ToolError::Failed { tool, exit, stderr } => {
                let stderr = stderr.trim_end().replace('\n', "\\n");
                write!(f, "{tool} failed ({exit:?}): {stderr}")
            }
        }
    }
}

impl std::error::Error for ToolError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ToolError::Exec(e) => Some(e),
            _ => None,
        }
    }
}

/// `Unsupported` when stdin cannot reach the sandbox.
pub(crate) fn stdin_unsupported(provider: &str) -> ToolError {
    ToolError::Exec(
        Error::new(
            ErrorKind::Unsupported,
            "this adapter cannot deliver stdin (capabilities.stdin = Unsupported), which write needs",
        )
        .with_provider(provider.to_owned())
        .with_operation("write"),
    )
}
