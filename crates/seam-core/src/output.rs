use bytes::Bytes;

/// How a command ended, exactly as the backend reported it.
///
/// There is no "unknown" variant: an adapter that cannot tell how a command ended returns an
/// [`Error`](crate::Error) of kind [`Protocol`](crate::ErrorKind::Protocol), never a guess.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case", deny_unknown_fields)
)]
pub enum Exit {
    /// The command exited with this status (0..=255 on POSIX; some backends report 128+n for a
    /// signal, which stays a code).
    Code(i32),
    /// The command was terminated by this signal number.
    Signal(i32),
}

/// A coarse reading of an [`Exit`], for hosts that branch on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExitClass {
    /// Exit code 0.
    Success,
    /// A non-zero exit code that is not a kill.
    Failure,
    /// 137/143 or SIGKILL/SIGTERM: the command's own OOM or a host envelope. Only the host that
    /// set the envelope may decide which.
    AmbiguousKill,
    /// Any other signal.
    Signaled,
}

impl Exit {
    /// SIGKILL.
    pub const SIGKILL: i32 = 9;
    /// SIGTERM.
    pub const SIGTERM: i32 = 15;

    /// True for `Code(0)`.
    pub fn success(&self) -> bool {
        matches!(self, Exit::Code(0))
    }

    /// The exit code, if the command exited.
    pub fn code(&self) -> Option<i32> {
        match self {
            Exit::Code(c) => Some(*c),
            Exit::Signal(_) => None,
        }
    }

    /// The signal, if the command was terminated by one.
    pub fn signal(&self) -> Option<i32> {
        match self {
            Exit::Signal(s) => Some(*s),
            Exit::Code(_) => None,
        }
    }

    /// The status a POSIX shell would report: the code, or 128 + signal.
    pub fn shell_status(&self) -> i32 {
        match self {
            Exit::Code(c) => *c,
            Exit::Signal(s) => 128 + *s,
        }
    }

    /// True for exit 137/143 and for SIGKILL/SIGTERM.
    ///
    /// The library never decides between "the command ran out of memory" and "a host envelope
    /// (memory limit, deadline) killed it": every sandbox reports an OOM kill on the command
    /// channel, so only the host that set the envelope can classify it.
    pub fn is_ambiguous_kill(&self) -> bool {
        matches!(
            self,
            Exit::Code(137)
                | Exit::Code(143)
                | Exit::Signal(Exit::SIGKILL)
                | Exit::Signal(Exit::SIGTERM)
        )
    }

    /// Classifies the exit; see [`ExitClass`].
    pub fn class(&self) -> ExitClass {
        if self.success() {
            ExitClass::Success
        } else if self.is_ambiguous_kill() {
            ExitClass::AmbiguousKill
        } else if self.signal().is_some() {
            ExitClass::Signaled
        } else {
            ExitClass::Failure
        }
    }
}

/// Bytes dropped from each stream by a host-side output cap (0 when nothing was dropped).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Truncated {
    /// Bytes of stdout dropped.
    pub stdout: u64,
    /// Bytes of stderr dropped.
    pub stderr: u64,
}

impl Truncated {
    /// True if anything was dropped.
    pub fn any(&self) -> bool {
        self.stdout > 0 || self.stderr > 0
    }
}

/// The result of a command that ran to an exit, whatever its status.
#[non_exhaustive]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Output {
    /// Everything the command wrote to stdout (after any host-side cap).
    pub stdout: Bytes,
    /// Everything the command wrote to stderr, never merged into stdout.
    pub stderr: Bytes,
    /// How it ended.
    pub exit: Exit,
    /// What a host-side cap dropped, if anything.
    pub truncated: Truncated,
}

impl Output {
    /// An output with nothing truncated.
    pub fn new(stdout: impl Into<Bytes>, stderr: impl Into<Bytes>, exit: Exit) -> Output {
        Output {
            stdout: stdout.into(),
            stderr: stderr.into(),
            exit,
            truncated: Truncated::default(),
        }
    }

    /// Records what a cap dropped.
    #[must_use]
    pub fn with_truncated(mut self, truncated: Truncated) -> Output {
        self.truncated = truncated;
        self
    }
}

/// Output collected before a failure (a deadline, a cut stream), carried by the
/// [`Error`](crate::Error).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PartialOutput {
    /// stdout seen so far.
    pub stdout: Bytes,
    /// stderr seen so far.
    pub stderr: Bytes,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ambiguous_kills_are_exactly_these() {
        for e in [
            Exit::Code(137),
            Exit::Code(143),
            Exit::Signal(9),
            Exit::Signal(15),
        ] {
            assert!(e.is_ambiguous_kill(), "{e:?}");
            assert_eq!(e.class(), ExitClass::AmbiguousKill);
        }
        for e in [
            Exit::Code(0),
            Exit::Code(1),
            Exit::Code(136),
            Exit::Code(138),
            Exit::Signal(2),
        ] {
            assert!(!e.is_ambiguous_kill(), "{e:?}");
        }
        assert_eq!(Exit::Signal(2).class(), ExitClass::Signaled);
        assert_eq!(Exit::Code(3).class(), ExitClass::Failure);
        assert_eq!(Exit::Code(0).class(), ExitClass::Success);
    }

    #[test]
    fn shell_status() {
        assert_eq!(Exit::Signal(9).shell_status(), 137);
        assert_eq!(Exit::Code(7).shell_status(), 7);
    }
}
