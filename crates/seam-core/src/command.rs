use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

use bytes::Bytes;

use crate::error::{Error, ErrorKind};

/// The builtin tool a [`Command`] serves.
///
/// Only for routing and telemetry: no backend has an equivalent field, and an adapter must not
/// change the meaning of argv because of it. An adapter may recognise a tool to serve it natively
/// (a listing API instead of `find`), provided it returns the same bytes the command would.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tool(Cow<'static, str>);

impl Tool {
    /// A plain command (the default).
    pub const EXEC: Tool = Tool(Cow::Borrowed("exec"));
    /// A shell script.
    pub const BASH: Tool = Tool(Cow::Borrowed("bash"));
    /// Reading a file.
    pub const READ: Tool = Tool(Cow::Borrowed("read"));
    /// Writing a file.
    pub const WRITE: Tool = Tool(Cow::Borrowed("write"));
    /// Matching paths against a pattern.
    pub const GLOB: Tool = Tool(Cow::Borrowed("glob"));
    /// Searching file contents.
    pub const GREP: Tool = Tool(Cow::Borrowed("grep"));
    /// Listing a directory tree.
    pub const LIST: Tool = Tool(Cow::Borrowed("list"));
    /// Applying a patch.
    pub const APPLY_PATCH: Tool = Tool(Cow::Borrowed("apply_patch"));
    /// Running an exact source program (the tools protocol's `code`).
    pub const CODE: Tool = Tool(Cow::Borrowed("code"));

    /// A custom tool name. Validated when the command is built (non-empty, no NUL).
    pub fn custom(name: impl Into<String>) -> Tool {
        Tool(Cow::Owned(name.into()))
    }

    /// The tool's name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Default for Tool {
    fn default() -> Self {
        Tool::EXEC
    }
}

impl fmt::Debug for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A command to run in a sandbox: a pure description of the work.
///
/// Every `Command` is valid by construction: [`CommandBuilder::build`] rejects an empty argv, an
/// empty program name, NUL bytes in argv, workdir, env or tool, an empty env key or one containing
/// `=`, and a relative workdir, with [`ErrorKind::InvalidCommand`], before any I/O.
///
/// There is deliberately no timeout, output limit or budget here: policy lives on the host side
/// (adapter configuration and host-side layers, `execseam-layers`).
///
/// `Debug` prints argv and env keys, never env values or stdin (they often carry credentials).
#[derive(Clone, PartialEq, Eq)]
pub struct Command {
    tool: Tool,
    argv: Vec<String>,
    workdir: Option<String>,
    env: BTreeMap<String, String>,
    stdin: Bytes,
}

impl Command {
    /// Starts a command from its argv (`argv[0]` is the program).
    pub fn builder<I, S>(argv: I) -> CommandBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        CommandBuilder {
            tool: Tool::EXEC,
            argv: argv.into_iter().map(Into::into).collect(),
            workdir: None,
            env: BTreeMap::new(),
            stdin: Bytes::new(),
        }
    }

    /// Shorthand for `Command::builder(argv).build()`.
    pub fn new<I, S>(argv: I) -> Result<Command, Error>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Command::builder(argv).build()
    }

    /// `argv[0]`.
    pub fn program(&self) -> &str {
        &self.argv[0]
    }

    /// `argv[1..]`.
    pub fn args(&self) -> &[String] {
        &self.argv[1..]
    }

    /// Turns the command back into a builder, to derive a changed command (it is re-validated).
    pub fn into_builder(self) -> CommandBuilder {
        CommandBuilder {
            tool: self.tool,
            argv: self.argv,
            workdir: self.workdir,
            env: self.env,
            stdin: self.stdin,
        }
    }
}

getters!(Command {
    /// The tool this command serves.
    tool -> &Tool = ref(tool);
    /// The full argv; never empty.
    argv -> &[String] = ref(argv);
    /// The absolute working directory, if one was asked for.
    workdir -> Option<&str> = deref(workdir);
    /// Environment variables added to the backend's base environment.
    env -> &BTreeMap<String, String> = ref(env);
    /// Bytes fed to stdin; empty means stdin is at EOF immediately (never inherited).
    stdin -> &Bytes = ref(stdin);
});

impl fmt::Debug for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Command")
            .field("tool", &self.tool)
            .field("argv", &self.argv)
            .field("workdir", &self.workdir)
            .field("env", &RedactedEnv(&self.env))
            .field("stdin", &format_args!("<{} bytes>", self.stdin.len()))
            .finish()
    }
}

struct RedactedEnv<'a>(&'a BTreeMap<String, String>);

impl fmt::Debug for RedactedEnv<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.keys().map(|k| (k, format_args!("<redacted>"))))
            .finish()
    }
}

/// Builds a validated [`Command`].
#[derive(Clone)]
#[must_use]
pub struct CommandBuilder {
    tool: Tool,
    argv: Vec<String>,
    workdir: Option<String>,
    env: BTreeMap<String, String>,
    stdin: Bytes,
}

impl CommandBuilder {
    /// Sets the tool being served.
    pub fn tool(mut self, tool: Tool) -> Self {
        self.tool = tool;
        self
    }

    /// Appends one argument.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.argv.push(arg.into());
        self
    }

    /// Appends arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.argv.extend(args.into_iter().map(Into::into));
        self
    }

    /// Sets the working directory; it must be absolute.
    pub fn workdir(mut self, dir: impl Into<String>) -> Self {
        self.workdir = Some(dir.into());
        self
    }

    /// Clears the working directory (the backend's default is used).
    pub fn no_workdir(mut self) -> Self {
        self.workdir = None;
        self
    }

    /// Sets one environment variable.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(key.into(), value.into());
        self
    }

    /// Sets several environment variables.
    pub fn envs<I, K, V>(mut self, vars: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        self.env
            .extend(vars.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    /// Removes every environment variable set so far.
    pub fn clear_env(mut self) -> Self {
        self.env.clear();
        self
    }

    /// Sets the bytes fed to stdin.
    pub fn stdin(mut self, stdin: impl Into<Bytes>) -> Self {
        self.stdin = stdin.into();
        self
    }

    /// Replaces argv entirely.
    pub fn argv<I, S>(mut self, argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.argv = argv.into_iter().map(Into::into).collect();
        self
    }

    /// Validates and builds the command.
    pub fn build(self) -> Result<Command, Error> {
        validate(&self)?;
        Ok(Command {
            tool: self.tool,
            argv: self.argv,
            workdir: self.workdir,
            env: self.env,
            stdin: self.stdin,
        })
    }
}

fn invalid(message: String) -> Error {
    Error::new(ErrorKind::InvalidCommand, message)
        .with_provider("core")
        .with_operation("validate")
}

fn validate(b: &CommandBuilder) -> Result<(), Error> {
    let tool = b.tool.as_str();
    if tool.is_empty() {
        return Err(invalid("tool name is empty".into()));
    }
    if tool.contains('\0') {
        return Err(invalid("tool name contains a NUL byte".into()));
    }
    if b.argv.is_empty() {
        return Err(invalid("argv is empty".into()));
    }
    if b.argv[0].is_empty() {
        return Err(invalid("argv[0] (the program) is empty".into()));
    }
    if let Some(i) = b.argv.iter().position(|a| a.contains('\0')) {
        return Err(invalid(format!("argv[{i}] contains a NUL byte")));
    }
    if let Some(dir) = &b.workdir {
        if dir.contains('\0') {
            return Err(invalid("workdir contains a NUL byte".into()));
        }
        if !dir.starts_with('/') {
            return Err(invalid(format!("workdir {dir:?} is not absolute")));
        }
    }
    for (key, value) in &b.env {
        if key.is_empty() {
            return Err(invalid("an env key is empty".into()));
        }
        if key.contains('=') {
            return Err(invalid(format!("env key {key:?} contains '='")));
        }
        if key.contains('\0') {
            return Err(invalid(format!("env key {key:?} contains a NUL byte")));
        }
        // The value is never printed: it may be a credential.
        if value.contains('\0') {
            return Err(invalid(format!(
                "the value of env key {key:?} contains a NUL byte"
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(r: Result<Command, Error>) -> (ErrorKind, String) {
        let e = r.expect_err("must be rejected");
        (e.kind(), e.message().to_owned())
    }

    #[test]
    fn rejects_each_invalid_shape_with_a_typed_error() {
        let cases: Vec<(CommandBuilder, &str)> = vec![
            (Command::builder(Vec::<String>::new()), "argv is empty"),
            (Command::builder([""]), "argv[0]"),
            (Command::builder(["echo", "a\0b"]), "argv[1] contains a NUL"),
            (Command::builder(["echo"]).workdir("tmp"), "not absolute"),
            (Command::builder(["echo"]).workdir(""), "not absolute"),
            (
                Command::builder(["echo"]).workdir("/t\0"),
                "workdir contains a NUL",
            ),
            (Command::builder(["echo"]).env("", "v"), "env key is empty"),
            (Command::builder(["echo"]).env("A=B", "v"), "contains '='"),
            (Command::builder(["echo"]).env("A\0", "v"), "NUL"),
            (
                Command::builder(["echo"]).env("A", "v\0"),
                "value of env key",
            ),
            (
                Command::builder(["echo"]).tool(Tool::custom("")),
                "tool name is empty",
            ),
        ];
        for (builder, needle) in cases {
            let (k, msg) = kind(builder.build());
            assert_eq!(k, ErrorKind::InvalidCommand);
            assert!(msg.contains(needle), "{msg:?} should mention {needle:?}");
        }
    }

    #[test]
    fn accepts_what_the_contract_allows() {
        let cmd = Command::builder(["printf", "%s", "", "-n", "a b", "é"])
            .workdir("/")
            .env("my-key", "")
            .env("PATH", "/bin")
            .stdin(&b"\0\xff"[..])
            .build()
            .unwrap();
        assert_eq!(cmd.args().len(), 5);
        assert_eq!(cmd.stdin().as_ref(), b"\0\xff");
    }

    #[test]
    fn debug_never_shows_env_values_or_stdin() {
        let cmd = Command::builder(["true"])
            .env("TOKEN", "s3cr3t-value")
            .stdin("stdin-secret")
            .build()
            .unwrap();
        let dbg = format!("{cmd:?}");
        assert!(!dbg.contains("s3cr3t-value"), "{dbg}");
        assert!(!dbg.contains("stdin-secret"), "{dbg}");
        assert!(dbg.contains("TOKEN"), "{dbg}");
        assert!(dbg.contains("<12 bytes>"), "{dbg}");
        let alt = format!("{cmd:#?}");
        assert!(!alt.contains("s3cr3t-value") && !alt.contains("stdin-secret"));
    }

    #[test]
    fn value_never_appears_in_the_validation_error() {
        let err = Command::builder(["true"])
            .env("TOKEN", "hunter2\0")
            .build()
            .unwrap_err();
        assert!(!err.to_string().contains("hunter2"));
        assert!(!format!("{err:?}").contains("hunter2"));
    }
}
