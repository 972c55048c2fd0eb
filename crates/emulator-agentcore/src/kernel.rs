//! `executeCode`'s interpreter contexts: one long-lived interpreter per session and language, so
//! that variables, functions and imports of one call are there in the next (the service keeps an
//! interpreter context per session; `clearContext: true` resets it: research note
//! `cf-vercel-modal-nf.md`, correction "AWS AgentCore Code Interpreter behaviour", and the model's
//! `ToolArguments.clearContext`, "Whether to clear the context for the tool").
//!
//! Each interpreter is a process of the session's sandbox, run as the session's user in its
//! working directory, driven over its stdin/stdout with one JSON line per cell each way; a cell's
//! own output is captured at the file-descriptor level (so `os.system`'s output is captured too).
//! Python runs in `python3` (`exec` of each cell in one `__main__` namespace); JavaScript in Node.js
//! (`vm.runInContext` in one context, the `nodejs` runtime of the model's `LanguageRuntime`);
//! TypeScript in Node.js too, each cell's types stripped by esbuild (`transformSync`, loader `ts`,
//! emitted as CommonJS, so `import` becomes `require`) before it runs in the session's TypeScript
//! context. The service documents `nodejs` and `deno` for both and defaults to `deno` (the
//! model's `ToolArguments.runtime`); the emulator has no Deno and ignores `runtime`.

use std::process::Stdio;
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::{SESSION_ROOT, Session, State};

/// The Python driver: reads `{"code"}` lines, answers `{"stdout","stderr","exitCode"}` lines.
const PYTHON_DRIVER: &str = r#"
import json, os, sys, tempfile, traceback
pin = os.fdopen(os.dup(0), "rb")
pout = os.fdopen(os.dup(1), "wb")
nul = os.open(os.devnull, os.O_RDONLY)
os.dup2(nul, 0)
os.close(nul)
ns = {"__name__": "__main__", "__builtins__": __builtins__}
while True:
    line = pin.readline()
    if not line:
        break
    req = json.loads(line)
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    sys.stdout.flush(); sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    os.dup2(out.fileno(), 1); os.dup2(err.fileno(), 2)
    code = 0
    try:
        exec(compile(req["code"], "<string>", "exec"), ns)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException as e:
        traceback.print_exception(type(e), e, e.__traceback__.tb_next)
        code = 1
    finally:
        try:
            sys.stdout.flush(); sys.stderr.flush()
        except BaseException:
            pass
        os.dup2(saved[0], 1); os.dup2(saved[1], 2)
        os.close(saved[0]); os.close(saved[1])
    out.seek(0); err.seek(0)
    reply = {"stdout": out.read().decode("utf-8", "replace"),
             "stderr": err.read().decode("utf-8", "replace"), "exitCode": code}
    out.close(); err.close()
    pout.write(json.dumps(reply).encode() + b"\n")
    pout.flush()
"#;

/// The JavaScript driver (Node.js): one `vm` context for the session; `console` writes into the
/// cell's output; an uncaught error is printed to stderr with exit code 1.
const NODE_DRIVER: &str = r#"
const vm = require('vm'), readline = require('readline'), { Console } = require('console');
let out = [], err = [];
const { Writable } = require('stream');
const sink = (buf) => new Writable({ write(chunk, _enc, cb) { buf.push(chunk.toString()); cb(); } });
const cons = new Console({ stdout: sink(out), stderr: sink(err) });
const esbuildPath = process.env.EXECSEAM_ESBUILD;
delete process.env.EXECSEAM_ESBUILD;
const esbuild = esbuildPath ? require(esbuildPath) : null;
const globals = { console: cons, require, process, Buffer, setTimeout, clearTimeout,
  setInterval, clearInterval, URL, TextEncoder, TextDecoder };
if (esbuild) { globals.module = { exports: {} }; globals.exports = globals.module.exports; }
const ctx = vm.createContext(globals);
const proto = process.stdout;
const rl = readline.createInterface({ input: process.stdin });
rl.on('line', (line) => {
  const req = JSON.parse(line);
  out.length = 0; err.length = 0;
  let code = 0;
  try {
    let src = req.code;
    if (esbuild) src = esbuild.transformSync(src, { loader: 'ts', format: 'cjs', sourcefile: 'cell.ts' }).code;
    vm.runInContext(src, ctx, { filename: 'evalmachine' });
  }
  catch (e) { cons.error(e && e.stack ? e.stack : String(e)); code = 1; }
  proto.write(JSON.stringify({ stdout: out.join(''), stderr: err.join(''), exitCode: code }) + '\n');
});
"#;

/// A running interpreter.
pub(crate) struct Kernel {
    child: Child,
    host_pid: u32,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

/// What one cell produced.
pub(crate) struct Cell {
    pub(crate) stdout: String,
    pub(crate) stderr: String,
    pub(crate) exit_code: i64,
}

/// The languages `executeCode` serves, with their interpreter's argv (`typescript` only with
/// esbuild: [`AgentCoreOptions::esbuild`](super::AgentCoreOptions::esbuild)).
pub(crate) fn argv(language: &str, esbuild: Option<&str>) -> Option<Vec<String>> {
    match language {
        "python" => Some(vec![
            "python3".into(),
            "-u".into(),
            "-c".into(),
            PYTHON_DRIVER.into(),
        ]),
        "javascript" => Some(vec!["node".into(), "-e".into(), NODE_DRIVER.into()]),
        "typescript" if esbuild.is_some() => {
            Some(vec!["node".into(), "-e".into(), NODE_DRIVER.into()])
        }
        _ => None,
    }
}

impl Kernel {
    async fn start(session: &Session, language: &str) -> Result<Kernel, String> {
        let esbuild = session.esbuild.as_deref();
        let argv = argv(language, esbuild)
            .ok_or_else(|| format!("language {language:?} is not served"))?;
        let spec = State::spec();
        let user = session.sandbox.user().clone();
        let mut cmd = tokio::process::Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .env_clear()
            .envs(&spec.env)
            .env("HOME", &user.home)
            .env("USER", &user.name)
            .env("LOGNAME", &user.name)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .envs(
                esbuild
                    .filter(|_| language == "typescript")
                    .map(|e| ("EXECSEAM_ESBUILD", e)),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        let mut child = session
            .sandbox
            .spawn(cmd, &user, SESSION_ROOT)
            .await
            .map_err(|e| format!("could not start the {language} interpreter: {e:?}"))?;
        let stdin = child.child.stdin.take().ok_or("no stdin")?;
        let stdout = child.child.stdout.take().ok_or("no stdout")?;
        Ok(Kernel {
            host_pid: child.host_pid,
            child: child.child,
            stdin,
            stdout: BufReader::new(stdout),
        })
    }

    async fn run(&mut self, code: &str) -> Option<Cell> {
        let mut line = serde_json::to_vec(&json!({ "code": code })).ok()?;
        line.push(b'\n');
        self.stdin.write_all(&line).await.ok()?;
        self.stdin.flush().await.ok()?;
        let mut reply = String::new();
        if self.stdout.read_line(&mut reply).await.ok()? == 0 {
            return None;
        }
        let v: Value = serde_json::from_str(&reply).ok()?;
        Some(Cell {
            stdout: v["stdout"].as_str().unwrap_or_default().to_owned(),
            stderr: v["stderr"].as_str().unwrap_or_default().to_owned(),
            exit_code: v["exitCode"].as_i64().unwrap_or(1),
        })
    }

    /// Kills the interpreter's process group.
    pub(crate) fn kill(&mut self) {
        let _ = execseam_emulator_kit::sys::kill(-(self.host_pid as i32), libc::SIGKILL);
        let _ = self.child.start_kill();
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs one cell in the session's context for `language` (started on first use; with `clear`,
/// a fresh context first). `Err` when the interpreter could not be started or died in the cell
/// (its context is gone; the next call starts a fresh one, as a restarted kernel would).
pub(crate) async fn execute(
    session: &Arc<Session>,
    language: &str,
    code: &str,
    clear: bool,
) -> Result<Cell, String> {
    let slot = session
        .kernels
        .lock()
        .expect("kernels")
        .entry(language.to_owned())
        .or_default()
        .clone();
    let mut guard = slot.lock().await;
    if clear {
        *guard = None;
    }
    if guard.is_none() {
        *guard = Some(Kernel::start(session, language).await?);
    }
    let kernel = guard.as_mut().expect("started");
    match kernel.run(code).await {
        Some(cell) => Ok(cell),
        None => {
            *guard = None;
            Err(format!(
                "The {language} interpreter exited while running the code; its context was lost"
            ))
        }
    }
}
