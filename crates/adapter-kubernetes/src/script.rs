//! What an exec sends: the argv in the URL and the bytes on stdin, for a backend whose exec has
//! argv and stdin but neither a workdir nor an environment.
//!
//! - Nothing to synthesise: argv as given (behind `env EXECSEAM_EXEC=<tag>` when remote kill is
//!   on, so a second exec can find the command and its children).
//! - A workdir, an environment, or (on `v4.channel.k8s.io`) stdin: a `/bin/sh -c` wrapper. The
//!   environment never goes into the URL, which the API server's audit log and every proxy see:
//!   it travels as the first line of stdin, printf-escaped, and the wrapper reads it with
//!   `read -r` (a shell reads a pipe a byte at a time, so the command's own stdin is left whole).
//!   On v4, which cannot close stdin, the wrapper stores exactly the stdin's length with
//!   `head -c` and runs the command on that file.
//!
//! The wrapper's own failures are the kit's marker line and status 125, checked with the kit's
//! `StderrGate` and `WrapOptions::check`.
//!
//! The env-on-stdin line and the tag-kill script are the kit's (`degrade::set_line`,
//! `degrade::env_line`, `degrade::kill_argv`), shared with the Docker adapter.

use std::fmt::Write as _;

use bytes::{Bytes, BytesMut};
pub use execseam_adapter_kit::degrade::EXEC_TAG_VAR;
pub(crate) use execseam_adapter_kit::degrade::kill_argv;
use execseam_adapter_kit::degrade::{
    self, WRAPPER_MARK, WRAPPER_STATUS, env_line, quote, set_line,
};
use execseam_core::{Command, Error};

use crate::channel::Protocol;

/// The longest exec path and query sent: the `http` crate's URIs stop at 64 KiB (far below the
/// 1 MiB of headers the API server reads); a longer command goes through stdin
/// ([`plan_as`]).
pub(crate) const MAX_URL: usize = 60_000;

/// What one exec sends.
#[derive(Debug)]
pub(crate) struct Plan {
    /// The argv in the URL.
    pub argv: Vec<String>,
    /// The bytes on channel 0 (`None`: stdin is not attached, the command reads EOF).
    pub stdin: Option<Bytes>,
    /// A wrapper runs first: its failures are on stderr behind the kit's marker.
    pub wrapped: bool,
}

/// Plans `cmd` for a server speaking `protocol` (the wrapper for v4 also works on v5).
pub(crate) fn plan(
    cmd: &Command,
    protocol: Protocol,
    tag: Option<&str>,
    temp_dir: &str,
) -> Result<Plan, Error> {
    plan_as(cmd, protocol, tag, temp_dir, false)
}

/// [`plan`], with argv on stdin too (`argv_on_stdin`): for a command whose URL would be longer
/// than the HTTP stack takes ([`MAX_URL`]), the URL carries a fixed wrapper and the whole
/// command (the tag, the env entries and argv) is the first line of stdin.
pub(crate) fn plan_as(
    cmd: &Command,
    protocol: Protocol,
    tag: Option<&str>,
    temp_dir: &str,
    argv_on_stdin: bool,
) -> Result<Plan, Error> {
    let env = cmd.env();
    let stdin = cmd.stdin();
    let line_first = argv_on_stdin || !env.is_empty();
    let bounded_stdin = protocol == Protocol::V4 && (!stdin.is_empty() || line_first);
    let program = cmd.program();
    let plain = !program.starts_with('-') && !program.contains('=');
    if cmd.workdir().is_none() && !line_first && !bounded_stdin && plain {
        let mut argv = Vec::with_capacity(cmd.argv().len() + 2);
        if let Some(t) = tag {
            argv.push("env".to_owned());
            argv.push(format!("{EXEC_TAG_VAR}={t}"));
        }
        argv.extend(cmd.argv().iter().cloned());
        return Ok(Plan {
            argv,
            stdin: (!stdin.is_empty()).then(|| stdin.clone()),
            wrapped: false,
        });
    }
    if program.starts_with('-') && program.contains('=') {
        return Err(Error::unsupported(format!(
            "argv[0] {program:?} starts with '-' and contains '=': no shell construct runs it exactly"
        ))
        .with_provider(crate::PROVIDER)
        .with_operation("exec"));
    }
    let mut s = String::new();
    if line_first {
        let _ = writeln!(
            s,
            "IFS= read -r __execseam_env || {}",
            fail("cannot read the env line")
        );
        s.push_str("eval \"$__execseam_env\"; unset __execseam_env\n");
    }
    if bounded_stdin {
        if stdin.is_empty() {
            s.push_str("exec 0</dev/null\n");
        } else {
            let path = degrade::temp_path(temp_dir);
            let q = quote(&path);
            let _ = writeln!(
                s,
                "(umask 077 && head -c {} > {q}) || {{ rm -f -- {q}; {}; }}",
                stdin.len(),
                fail_inner(&format!("cannot store stdin under {temp_dir}"))
            );
            let _ = writeln!(s, "[ -r {q} ] || {}", fail("stdin file is missing"));
            let _ = writeln!(s, "exec 0< {q}");
            let _ = writeln!(s, "rm -f -- {q}");
        }
    }
    if let Some(dir) = cmd.workdir() {
        let _ = writeln!(
            s,
            "cd -- {} 2>/dev/null || {}",
            quote(dir),
            fail(&format!("workdir does not exist: {dir}"))
        );
    }
    if argv_on_stdin {
        // Everything is in "$@": the tag, the env entries, then argv (behind an inner shell
        // for a program name env would take as an assignment).
        s.push_str("exec env -- \"$@\"");
        let mut words: Vec<String> = Vec::new();
        if let Some(t) = tag {
            words.push(format!("{EXEC_TAG_VAR}={t}"));
        }
        words.extend(env.iter().map(|(k, v)| format!("{k}={v}")));
        if program.contains('=') {
            words.extend(["/bin/sh".into(), "-c".into(), "exec \"$0\" \"$@\"".into()]);
        }
        words.extend(cmd.argv().iter().cloned());
        let mut input = BytesMut::from(&set_line(words.iter().map(String::as_str))[..]);
        input.extend_from_slice(stdin);
        return Ok(Plan {
            argv: vec!["/bin/sh".into(), "-c".into(), s],
            stdin: Some(input.freeze()),
            wrapped: true,
        });
    }
    let mut assignments = Vec::new();
    if !env.is_empty() {
        assignments.push("\"$@\"".to_owned());
    }
    if let Some(t) = tag {
        assignments.push(quote(&format!("{EXEC_TAG_VAR}={t}")).into_owned());
    }
    let rest = degrade::join(cmd.args());
    let sep = if rest.is_empty() { "" } else { " " };
    let prog = quote(program);
    if assignments.is_empty() {
        if program.starts_with('-') {
            let _ = write!(s, "exec env -- {prog}{sep}{rest}");
        } else {
            let _ = write!(s, "exec {prog}{sep}{rest}");
        }
    } else if program.contains('=') {
        // env would take `a=b` as an assignment: an inner shell execs it as a word.
        let _ = write!(
            s,
            "exec env -- {} /bin/sh -c 'exec \"$0\" \"$@\"' {prog}{sep}{rest}",
            assignments.join(" ")
        );
    } else {
        let _ = write!(s, "exec env -- {} {prog}{sep}{rest}", assignments.join(" "));
    }
    let mut input = BytesMut::new();
    if !env.is_empty() {
        input.extend_from_slice(&env_line(env));
    }
    input.extend_from_slice(stdin);
    Ok(Plan {
        argv: vec!["/bin/sh".into(), "-c".into(), s],
        stdin: (!input.is_empty()).then(|| input.freeze()),
        wrapped: true,
    })
}

fn fail_inner(what: &str) -> String {
    format!(
        "printf '%s\\n' {} >&2; exit {WRAPPER_STATUS}",
        quote(&format!("{WRAPPER_MARK}{what}"))
    )
}

fn fail(what: &str) -> String {
    format!("{{ {}; }}", fail_inner(what))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;
    use std::process::Stdio;

    /// Runs a plan on this host the way the kubelet would: argv exec'd, stdin written then
    /// closed (v5) or left open until the command is done (v4).
    fn run(plan: &Plan, close: bool) -> std::process::Output {
        let mut c = std::process::Command::new(&plan.argv[0]);
        c.args(&plan.argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        if let Some(b) = &plan.stdin {
            stdin.write_all(b).unwrap();
        }
        let keep = if close {
            drop(stdin);
            None
        } else {
            Some(stdin)
        };
        let out = child.wait_with_output().unwrap();
        drop(keep);
        out
    }

    fn cmd(argv: &[&str]) -> execseam_core::CommandBuilder {
        Command::builder(argv.iter().copied())
    }

    #[test]
    fn plain_commands_are_argv_with_the_tag() {
        let p = plan(
            &cmd(&["printf", "%s", "a b"]).build().unwrap(),
            Protocol::V5,
            Some("t1"),
            "/tmp",
        )
        .unwrap();
        assert_eq!(p.argv, ["env", "EXECSEAM_EXEC=t1", "printf", "%s", "a b"]);
        assert!(p.stdin.is_none() && !p.wrapped);
        let out = run(&p, true);
        assert_eq!(out.stdout, b"a b");
        let p = plan(
            &cmd(&["cat"]).stdin(&b"in"[..]).build().unwrap(),
            Protocol::V5,
            None,
            "/tmp",
        )
        .unwrap();
        assert_eq!(p.argv, ["cat"]);
        assert_eq!(p.stdin.as_deref(), Some(&b"in"[..]));
    }

    /// The run's stdout is `want` (its stderr shown where it is not).
    fn assert_stdout(out: &std::process::Output, want: &str, protocol: Protocol) {
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            want,
            "{protocol:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn env_travels_on_stdin_and_reaches_the_command_exactly() {
        let nasty = "a'b\"c $HOME `x` %s\\n\nline2\n\n";
        let c = cmd(&[
            "sh",
            "-c",
            "printf '%s|' \"$V\" \"$W\"; cat; printf '%s' \"$EXECSEAM_EXEC\"",
        ])
        .env("V", nasty)
        .env("W", "")
        .stdin(&b"rest\nof\0stdin"[..])
        .build()
        .unwrap();
        for (protocol, close) in [(Protocol::V5, true), (Protocol::V4, false)] {
            let p = plan(&c, protocol, Some("tag9"), "/tmp").unwrap();
            assert!(p.wrapped);
            let url = p.argv.join(" ");
            assert!(
                !url.contains("line2") && !url.contains("a'b"),
                "env in argv: {url}"
            );
            assert_stdout(
                &run(&p, close),
                &format!("{nasty}||rest\nof\0stdintag9"),
                protocol,
            );
        }
    }

    #[test]
    fn argv_on_stdin_runs_exactly() {
        let big = "q'\"$`\\ ".repeat(10_000);
        let c = cmd(&["sh", "-c", "printf '%s|%s|' \"$1\" \"$V\"; cat", "sh", &big])
            .env("V", "-v x")
            .stdin(&b"in"[..])
            .build()
            .unwrap();
        for (protocol, close) in [(Protocol::V5, true), (Protocol::V4, false)] {
            let p = plan_as(&c, protocol, Some("t"), "/tmp", true).unwrap();
            assert!(
                p.argv.iter().map(String::len).sum::<usize>() < 2_000,
                "{:?}",
                p.argv
            );
            assert_stdout(&run(&p, close), &format!("{big}|-v x|in"), protocol);
        }
    }

    #[test]
    fn workdir_and_the_wrappers_own_failures() {
        let c = cmd(&["pwd"]).workdir("/").build().unwrap();
        let p = plan(&c, Protocol::V5, None, "/tmp").unwrap();
        assert_eq!(run(&p, true).stdout, b"/\n");
        let c = cmd(&["pwd"]).workdir("/no/such/dir").build().unwrap();
        let p = plan(&c, Protocol::V5, None, "/tmp").unwrap();
        let out = run(&p, true);
        assert_eq!(out.status.code(), Some(WRAPPER_STATUS));
        assert!(out.stderr.starts_with(WRAPPER_MARK.as_bytes()));
    }

    #[test]
    fn v4_stdin_is_read_by_length_without_a_close() {
        let c = cmd(&["wc", "-c"])
            .stdin(vec![7u8; 100_000])
            .build()
            .unwrap();
        let p = plan(&c, Protocol::V4, None, "/tmp").unwrap();
        let out = run(&p, false);
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "100000");
        // Env without stdin: the command reads EOF, not the open channel.
        let c = cmd(&["cat"]).env("A", "1").build().unwrap();
        let p = plan(&c, Protocol::V4, None, "/tmp").unwrap();
        assert!(run(&p, false).stdout.is_empty());
    }

    #[test]
    fn odd_program_names_run_exactly() {
        let dir = std::env::temp_dir().join(format!("execseam-k8s-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let prog = dir.join("a=b");
        std::fs::write(&prog, "#!/bin/sh\necho ran \"$@\"\n").unwrap();
        std::fs::set_permissions(&prog, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let c = Command::new([prog.to_str().unwrap(), "x"]).unwrap();
        let p = plan(&c, Protocol::V5, Some("t"), "/tmp").unwrap();
        assert!(p.wrapped);
        assert_eq!(run(&p, true).stdout, b"ran x\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
