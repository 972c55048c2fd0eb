//! Command sizes, checked before any I/O against what the sandbox's `execve` accepts.

#[cfg(doc)]
use execseam_core::Retry;
use execseam_core::{Command, Error, ErrorKind};

/// Linux's `MAX_ARG_STRLEN`: the longest single argv string or environment entry `execve(2)`
/// takes, its NUL included (32 pages).
pub const MAX_ARG_STRLEN: usize = 32 * 4096;

/// Linux's `_STK_LIM`: the default stack limit (8 MiB), what a sandbox's processes run with
/// unless their provider, engine or image sets another.
pub const LINUX_DEFAULT_STACK: usize = 8 << 20;

/// Linux's `ARG_MAX` floor (32 pages): the least `execve(2)` takes whatever the stack limit.
const ARG_MAX_FLOOR: usize = 32 * 4096;

/// What Linux's `execve(2)` takes for argv, envp and the filename together (each string with
/// its NUL, plus a pointer per argv and envp entry) under a stack limit of `stack` bytes:
/// `fs/exec.c` `bprm_stack_limits` takes a quarter of the stack limit, at most 3/4 of
/// `_STK_LIM` (6 MiB, also with an unlimited stack), at least `ARG_MAX` (128 KiB). 2 MiB at
/// the default stack.
pub const fn linux_arg_max(stack: usize) -> usize {
    let cap = LINUX_DEFAULT_STACK / 4 * 3;
    let quarter = stack / 4;
    let limit = if quarter < cap { quarter } else { cap };
    if limit < ARG_MAX_FLOOR {
        ARG_MAX_FLOOR
    } else {
        limit
    }
}

/// A command a Linux container `execve`s at the default stack, as Docker's containers and
/// Kubernetes' pods run them: [`SizeLimit::linux`] at [`LINUX_DEFAULT_STACK`].
pub const CONTAINER: SizeLimit = SizeLimit::linux(
    LINUX_DEFAULT_STACK,
    "execve in the container: 128 KiB per string, 1.75 MiB in all (Linux at the default stack, less 256 KiB for the sandbox's own env)",
);

/// What a remote sandbox's own side adds to every `execve`'s environment (the provider's daemon
/// and image env, the wrapper's variables), kept out of [`SizeLimit::linux`]'s total: the
/// adapter cannot see it, and it counts against the same limit.
pub const SANDBOX_ENV_RESERVE: usize = 256 << 10;

/// A provider's limit on the size of a command's argv and env, checked by [`check_size`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SizeLimit {
    /// argv and env together, in bytes: each string with its NUL (env entries as `KEY=VALUE`),
    /// plus [`SizeLimit::overhead`] per string.
    pub total: usize,
    /// The longest single argv string or env entry (`KEY=VALUE`), its NUL included.
    pub string: usize,
    /// Bytes counted per string on top of its own (`execve`: its 8-byte pointer).
    pub overhead: usize,
    /// Where the limit comes from, quoted in the error (`"Linux execve in the sandbox"`).
    pub source: &'static str,
}

impl SizeLimit {
    /// `execve(2)` on Linux: each string at most [`MAX_ARG_STRLEN`], and `total` in all,
    /// pointers included (the kernel's `ARG_MAX` is a quarter of the stack limit, 2 MiB by
    /// default, shared with the environment the provider's own daemon adds: pass what is
    /// left).
    pub const fn execve(total: usize, source: &'static str) -> SizeLimit {
        SizeLimit {
            total,
            string: MAX_ARG_STRLEN,
            overhead: 8,
            source,
        }
    }
}

impl SizeLimit {
    /// `execve(2)` in a Linux sandbox whose processes have a stack limit of `stack` bytes
    /// ([`LINUX_DEFAULT_STACK`] unless the adapter knows another): [`linux_arg_max`] less
    /// [`SANDBOX_ENV_RESERVE`] in all, [`MAX_ARG_STRLEN`] per string. Issue 38 (D32): a fixed
    /// 1 MiB refused commands a real `execve` runs (16 × 64 KiB arguments).
    pub const fn linux(stack: usize, source: &'static str) -> SizeLimit {
        SizeLimit::execve(linux_arg_max(stack) - SANDBOX_ENV_RESERVE, source)
    }

    /// A command that reaches the sandbox as one shell script (`sh -c SCRIPT`, a single
    /// `execve` string). What counts is the script as sent, after the wrapper and the quoting
    /// ([`check_wire`] on it: at most [`MAX_ARG_STRLEN`] with its NUL); on the raw command
    /// [`check_size`] is a fast lower bound (quoting only adds bytes), so `total` is
    /// [`MAX_ARG_STRLEN`]` - 1` for an exact check, never a guessed allowance for the quoting.
    pub const fn script(total: usize, source: &'static str) -> SizeLimit {
        SizeLimit {
            total,
            string: total,
            overhead: 0,
            source,
        }
    }
}

/// The size of a command's argv and env.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommandSize {
    /// The bytes of every string with its NUL (env entries as `KEY=VALUE`).
    pub bytes: usize,
    /// How many strings (argv and env entries).
    pub strings: usize,
    /// The longest one, its NUL included.
    pub longest: usize,
}

/// The size of `command`'s argv and env.
pub fn command_size(command: &Command) -> CommandSize {
    let argv = command.argv().iter().map(|a| a.len() + 1);
    let env = command.env().iter().map(|(k, v)| k.len() + 1 + v.len() + 1);
    argv.chain(env).fold(
        CommandSize {
            bytes: 0,
            strings: 0,
            longest: 0,
        },
        |s, n| CommandSize {
            bytes: s.bytes + n,
            strings: s.strings + 1,
            longest: s.longest.max(n),
        },
    )
}

/// Rejects a command whose argv and env exceed `limit`, before any I/O:
/// [`ErrorKind::InvalidCommand`], [`Retry::Never`], a message with the sizes and the limit
/// (never the command's content).
pub fn check_size(
    provider: &'static str,
    command: &Command,
    limit: &SizeLimit,
) -> Result<(), Error> {
    let size = command_size(command);
    let total = size.bytes + size.strings * limit.overhead;
    refuse_over(
        provider,
        limit,
        ("one argv string or env entry takes", "argv and env take"),
        (size.longest, limit.string),
        Some(total),
    )
}

/// The refusal of [`check_size`] and [`check_wire`]: the longest string over `string_max`, or
/// the `total` (where the limit counts one) over the limit's; `what` names one string and all
/// of them in the message.
fn refuse_over(
    provider: &'static str,
    limit: &SizeLimit,
    (one, all): (&str, &str),
    (longest, string_max): (usize, usize),
    total: Option<usize>,
) -> Result<(), Error> {
    let what = match total {
        _ if longest > string_max => format!(
            "{one} {longest} bytes, more than the {string_max} allowed ({})",
            limit.source
        ),
        Some(total) if total > limit.total => format!(
            "{all} {total} bytes, more than the {} allowed ({})",
            limit.total, limit.source
        ),
        _ => return Ok(()),
    };
    Err(Error::new(
        ErrorKind::InvalidCommand,
        format!("the command is too large: {what}"),
    )
    .with_provider(provider)
    .with_operation("exec"))
}

/// Rejects a command by what the sandbox will `execve`, after the adapter's wrapping and every
/// layer of quoting (the strings as sent: a wrapper script, or the whole argv), before any I/O:
/// each string at most [`MAX_ARG_STRLEN`] with its NUL, and all of them (with
/// [`SizeLimit::overhead`] each) at most [`SizeLimit::total`] where the limit is an `execve`
/// one. [`ErrorKind::InvalidCommand`], [`Retry::Never`], the sizes and the limit in the message,
/// never the content.
pub fn check_wire<S: AsRef<str>>(
    provider: &'static str,
    strings: &[S],
    limit: &SizeLimit,
) -> Result<(), Error> {
    let longest = strings
        .iter()
        .map(|s| s.as_ref().len() + 1)
        .max()
        .unwrap_or(0);
    let total: usize = strings
        .iter()
        .map(|s| s.as_ref().len() + 1 + limit.overhead)
        .sum();
    refuse_over(
        provider,
        limit,
        (
            "after wrapping and quoting, one string the sandbox runs takes",
            "after wrapping and quoting, the strings the sandbox runs take",
        ),
        (longest, MAX_ARG_STRLEN),
        (limit.overhead > 0).then_some(total),
    )
}

/// The command that asks a sandbox what its `execve` takes: its `ARG_MAX` (`getconf`, from
/// its stack limit), then the lines and bytes of the environment its commands start with.
pub const ARG_MAX_PROBE: [&str; 3] = ["sh", "-c", "getconf ARG_MAX && env | wc -lc"];

/// A command at most this large (strings, NULs and pointers) fits any Linux sandbox: `ARG_MAX`
/// is never below 128 KiB, and this leaves half of it to the sandbox's own environment. Larger
/// ones are checked against the sandbox's [`ArgMax`].
pub const SURELY_FITS: usize = 64 << 10;

/// What one sandbox's `execve` takes, asked once ([`ARG_MAX_PROBE`]) when the first command
/// larger than [`SURELY_FITS`] comes, and kept: the kernel takes a quarter of the stack limit
/// (`fs/exec.c` `bprm_stack_limits`, at most 6 MiB), which the sandbox's provider, engine or
/// image may set to anything, and the sandbox's own environment counts against it. Issue 38
/// (D32): a fixed 8 MiB stack sent what a smaller one's `execve` refused.
#[derive(Debug, Default)]
pub struct ArgMax {
    limit: tokio::sync::OnceCell<SizeLimit>,
}

impl ArgMax {
    /// An unasked limit.
    pub fn new() -> ArgMax {
        ArgMax::default()
    }

    /// The limit once asked.
    pub fn known(&self) -> Option<SizeLimit> {
        self.limit.get().copied()
    }

    /// The limit to check what the adapter sends after wrapping the command ([`check_wire`]):
    /// the sandbox's once asked, else `fallback`. The wrapped form of a command over
    /// [`SURELY_FITS`] is checked after [`ArgMax::check`] asked; a smaller one wrapped stays far
    /// below any `ARG_MAX`, so `fallback` only bounds its strings.
    pub fn limit_or(&self, fallback: &SizeLimit) -> SizeLimit {
        self.known().unwrap_or(*fallback)
    }

    /// Rejects `command` as [`check_size`] does, against this sandbox's limit: asked through
    /// `probe` (which runs [`ARG_MAX_PROBE`] in the sandbox) the first time a command is larger
    /// than [`SURELY_FITS`]. A probe that fails (no answer) is asked again next time, and this
    /// command is checked against `fallback`; a sandbox without `getconf` keeps `fallback`.
    pub async fn check<F, Fut>(
        &self,
        provider: &'static str,
        command: &Command,
        fallback: &SizeLimit,
        probe: F,
    ) -> Result<(), Error>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<execseam_core::Output, Error>>,
    {
        let size = command_size(command);
        // One string over its limit is refused without asking; a small command fits.
        if size.longest > fallback.string
            || size.bytes + size.strings * fallback.overhead <= SURELY_FITS
        {
            return check_size(provider, command, fallback);
        }
        let asked = self
            .limit
            .get_or_try_init(|| async {
                let out = probe().await?;
                let told = String::from_utf8_lossy(&out.stdout).into_owned();
                Ok::<_, Error>(
                    out.exit
                        .success()
                        .then(|| probed_limit(&told))
                        .flatten()
                        .unwrap_or(*fallback),
                )
            })
            .await;
        match asked {
            Ok(limit) => check_size(provider, command, limit),
            Err(e) => {
                tracing::debug!(provider, error = %e, "the sandbox's ARG_MAX could not be asked");
                check_size(provider, command, fallback)
            }
        }
    }
}

impl ArgMax {
    /// [`ArgMax::check`] where the probe is [`ARG_MAX_PROBE`] run by `sandbox` itself (the
    /// adapter's own `exec`, whose start calls this again with the small probe, which fits):
    /// the one call an adapter whose command reaches the sandbox as an argv makes before any
    /// request.
    pub async fn check_in<E: execseam_core::Exec + ?Sized>(
        &self,
        provider: &'static str,
        command: &Command,
        fallback: &SizeLimit,
        sandbox: &E,
    ) -> Result<(), Error> {
        self.check(provider, command, fallback, || {
            sandbox.exec(Command::new(ARG_MAX_PROBE).expect("a valid probe"))
        })
        .await
    }
}

/// The limit [`ARG_MAX_PROBE`]'s answer gives (`ARG_MAX`, then the environment's lines and
/// bytes): `ARG_MAX` (at most the kernel's 6 MiB) less the environment (each line a string
/// and its pointer) and 4 KiB for the filename and the kernel's own words.
pub fn probed_limit(told: &str) -> Option<SizeLimit> {
    let mut n = told.split_whitespace().map(|w| w.parse::<usize>().ok());
    let (arg_max, lines, bytes) = (n.next()??, n.next()??, n.next()??);
    if n.next().is_some() {
        return None;
    }
    let total = arg_max
        .min(linux_arg_max(usize::MAX))
        .saturating_sub(bytes + lines * 8 + 4096);
    Some(SizeLimit::execve(
        total,
        "the sandbox's execve: 128 KiB per string, its ARG_MAX less its own environment in all",
    ))
}

#[cfg(test)]
mod linux_tests {
    use super::*;

    #[test]
    fn the_total_follows_the_kernel_formula_and_takes_sixteen_64_kib_arguments() {
        assert_eq!(linux_arg_max(LINUX_DEFAULT_STACK), 2 << 20);
        // Unlimited (or huge) stacks stop at 3/4 of _STK_LIM; tiny ones at ARG_MAX.
        assert_eq!(linux_arg_max(usize::MAX), 6 << 20);
        assert_eq!(linux_arg_max(64 << 10), 128 << 10);
        assert_eq!(linux_arg_max(32 << 20), 6 << 20);
        let limit = SizeLimit::linux(LINUX_DEFAULT_STACK, "t");
        assert_eq!(limit.total, (2 << 20) - (256 << 10));
        // Inspect's case: refused at the old 1 MiB, run by a real execve.
        let arg = "a".repeat(64 << 10);
        let mut argv = vec!["printf".to_owned(), "%.0s".to_owned()];
        argv.extend(std::iter::repeat_n(arg, 16));
        let cmd = Command::builder(argv).env("HOME", "/root").build().unwrap();
        assert!(check_size("p", &cmd, &SizeLimit::execve(1 << 20, "old")).is_err());
        check_size("p", &cmd, &limit).unwrap();
        // Still refused before any request: over the total, or one string over 128 KiB.
        let over = Command::new(vec!["a".repeat(100 << 10); 19]).unwrap();
        assert!(check_size("p", &over, &limit).is_err());
        let long = Command::new(["echo".to_owned(), "a".repeat(MAX_ARG_STRLEN)]).unwrap();
        assert!(check_size("p", &long, &limit).is_err());
    }
}

#[cfg(test)]
mod arg_max_tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use execseam_core::{Exit, Output};

    use super::*;

    fn sixteen_64_kib() -> Command {
        Command::new(vec!["a".repeat(64 << 10); 16]).unwrap()
    }

    #[tokio::test]
    async fn the_sandbox_is_asked_once_and_only_for_large_commands() {
        let asked = AtomicUsize::new(0);
        let fallback = SizeLimit::linux(LINUX_DEFAULT_STACK, "default");
        // A sandbox with a 2 MiB stack: ARG_MAX 512 KiB, 10 variables of 1 KiB.
        let probe = || async {
            asked.fetch_add(1, Ordering::SeqCst);
            Ok(Output::new("524288\n     10   10240\n", "", Exit::Code(0)))
        };
        let arg_max = ArgMax::new();
        let small = Command::new(["echo", "hi"]).unwrap();
        arg_max.check("p", &small, &fallback, probe).await.unwrap();
        assert_eq!(
            asked.load(Ordering::SeqCst),
            0,
            "a small command asks nothing"
        );
        // Fits the default stack's limit, not this sandbox's: refused before any request.
        check_size("p", &sixteen_64_kib(), &fallback).unwrap();
        let e = arg_max
            .check("p", &sixteen_64_kib(), &fallback, probe)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidCommand, "{e}");
        assert!(e.message().contains("ARG_MAX"), "{e}");
        let fits = Command::new(vec!["a".repeat(64 << 10); 6]).unwrap();
        arg_max.check("p", &fits, &fallback, probe).await.unwrap();
        assert_eq!(asked.load(Ordering::SeqCst), 1, "asked once");
        assert_eq!(
            arg_max.known().unwrap().total,
            (512 << 10) - 10240 - 80 - 4096
        );
        // A wrapped form is checked against the sandbox's limit once asked (Northflank, E2B,
        // Docker, Kubernetes): 7 strings of 80 KiB fit the default, not this sandbox.
        let wrapped = vec!["a".repeat(80 << 10); 7];
        check_wire("p", &wrapped, &fallback).unwrap();
        assert!(check_wire("p", &wrapped, &arg_max.limit_or(&fallback)).is_err());
        assert_eq!(ArgMax::new().limit_or(&fallback), fallback, "unasked");
        // One string over 128 KiB is refused without asking.
        let long = Command::new(["echo".to_owned(), "a".repeat(MAX_ARG_STRLEN)]).unwrap();
        let fresh = ArgMax::new();
        assert!(fresh.check("p", &long, &fallback, probe).await.is_err());
        assert_eq!(asked.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn without_getconf_or_an_answer_the_default_rule_holds() {
        let fallback = SizeLimit::linux(LINUX_DEFAULT_STACK, "default");
        let arg_max = ArgMax::new();
        let failed = || async { Err(Error::new(ErrorKind::Unavailable, "no answer")) };
        arg_max
            .check("p", &sixteen_64_kib(), &fallback, failed)
            .await
            .unwrap();
        assert!(arg_max.known().is_none(), "a failed probe is asked again");
        let missing = || async { Ok(Output::new("", "sh: getconf: not found\n", Exit::Code(127))) };
        arg_max
            .check("p", &sixteen_64_kib(), &fallback, missing)
            .await
            .unwrap();
        assert_eq!(arg_max.known(), Some(fallback));
        assert!(probed_limit("2097152 garbage").is_none());
        // An unlimited stack: getconf says a quarter of it, the kernel stops at 6 MiB.
        assert_eq!(
            probed_limit("4611686018427387903\n 1 10\n").unwrap().total,
            (6 << 20) - 10 - 8 - 4096
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use execseam_core::Retry;

    #[test]
    fn sizes_are_checked_without_quoting_the_command() {
        let limit = SizeLimit::execve(64, "test");
        let ok = Command::builder(["echo", "hi"])
            .env("A", "b")
            .build()
            .unwrap();
        assert_eq!(
            command_size(&ok),
            CommandSize {
                bytes: 5 + 3 + 4,
                strings: 3,
                longest: 5
            }
        );
        assert!(
            check_size("p", &ok, &limit).is_ok(),
            "12 bytes + 3 pointers"
        );
        let many = Command::new(vec!["a"; 5]).unwrap();
        assert!(check_size("p", &many, &limit).is_ok(), "10 + 40");
        let many = Command::new(vec!["a"; 7]).unwrap();
        assert!(
            check_size("p", &many, &limit).is_err(),
            "14 + 56: the pointers count"
        );
        let big = Command::new(["echo", &"secret".repeat(20)]).unwrap();
        let e = check_size("p", &big, &limit).unwrap_err();
        assert_eq!(
            (e.kind(), e.retry()),
            (ErrorKind::InvalidCommand, Retry::Never)
        );
        assert!(!e.message().contains("secret"), "{e}");
        assert!(e.message().contains("64"), "{e}");
        let long = Command::new(["x".repeat(MAX_ARG_STRLEN)]).unwrap();
        let e = check_size("p", &long, &SizeLimit::execve(usize::MAX, "t")).unwrap_err();
        assert!(e.message().contains("one argv string"), "{e}");
    }

    #[test]
    fn the_wire_check_counts_what_is_sent_after_quoting() {
        let script = SizeLimit::script(MAX_ARG_STRLEN - 1, "one sh -c script");
        // 40 KiB of quotes pass the raw check; quoted ('\'' each) they are 160 KiB.
        let quotes = "'".repeat(40 * 1024);
        let cmd = Command::new(["echo", quotes.as_str()]).unwrap();
        check_size("p", &cmd, &script).unwrap();
        let sent = crate::degrade::join(cmd.argv());
        let e = check_wire("p", &[sent], &script).unwrap_err();
        assert_eq!(
            (e.kind(), e.retry()),
            (ErrorKind::InvalidCommand, Retry::Never)
        );
        assert!(e.message().contains("after wrapping and quoting"), "{e}");
        assert!(
            !e.message().contains("''"),
            "the command is not quoted: {e}"
        );
        // 100 KiB of plain text is more than the old 96 KiB allowance, and fits one string.
        let plain = "a".repeat(100 * 1024);
        let cmd = Command::new(["echo", plain.as_str()]).unwrap();
        check_size("p", &cmd, &script).unwrap();
        check_wire("p", &[crate::degrade::join(cmd.argv())], &script).unwrap();
        // An execve limit also bounds the total.
        let execve = SizeLimit::execve(1000, "t");
        let many = vec!["x".repeat(100); 20];
        let e = check_wire("p", &many, &execve).unwrap_err();
        assert!(e.message().contains("more than the 1000 allowed"), "{e}");
    }
}
