//! Starting a session's terminal: the shell on a real pseudo-terminal of the sandbox
//! ([`Sandbox::spawn_pty`](execseam_emulator_kit::Sandbox::spawn_pty)), and the tasks that move bytes
//! between it and the [`Terminal`].

use std::sync::Arc;

use tokio::sync::mpsc;

use super::Entry;
use super::pty::{Control, Launch, Terminal};
use execseam_emulator_kit::PtySize;

/// Clears the terminal's connections if its reader task is dropped before the shell ended (the
/// sandbox was destroyed): their sockets then close instead of waiting forever.
struct Gone {
    terminal: Arc<Terminal>,
    ended: bool,
}

impl Drop for Gone {
    fn drop(&mut self) {
        self.terminal.close();
        if !self.ended {
            self.terminal.detach_all();
        }
    }
}

/// signal(7): what Bun's `subprocess.kill()` sends by default.
const SIGTERM: i32 = 15;

/// Starts `launch.shell` on a pseudo-terminal of the sandbox and drives it until it exits.
pub(crate) async fn start(
    entry: &Arc<Entry>,
    terminal: Arc<Terminal>,
    mut control: mpsc::UnboundedReceiver<Control>,
    launch: Launch,
) -> std::io::Result<()> {
    let sandbox = &entry.sandbox;
    let user = sandbox.user().clone();
    let mut cmd = tokio::process::Command::new(&launch.shell);
    // `pty.ts`: `{...process.env, ...sessionEnv, TERM, PROMPT_COMMAND}` (the session's env is
    // what its shell's `env -0` printed: the container's plus the session's own).
    cmd.env_clear()
        .envs(&sandbox.spec().env)
        .env("HOME", &user.home)
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .env("TERM", "xterm-256color")
        .env("PROMPT_COMMAND", "clear; unset PROMPT_COMMAND")
        .kill_on_drop(true);
    let child = sandbox
        .spawn_pty(
            cmd,
            &user,
            &launch.cwd,
            PtySize::new(launch.rows, launch.cols),
        )
        .await
        .map_err(|e| std::io::Error::other(format!("{e:?}")))?;
    let mut process = child.child;
    let pid = process.id();
    let master = child.master;
    let reader = {
        let master = master.clone();
        tokio::spawn(async move {
            let mut gone = Gone {
                terminal: terminal.clone(),
                ended: false,
            };
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                match master.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => terminal.output(&buf[..n]),
                }
            }
            let _ = process.wait().await;
            gone.ended = true;
        })
    };
    let writer = tokio::spawn(async move {
        while let Some(c) = control.recv().await {
            match c {
                // The container's `pty.write` throws once the shell is gone: input is dropped.
                Control::Write(data) => {
                    let _ = master.write_all(&data).await;
                }
                Control::Resize(cols, rows) => {
                    let _ = master.resize(PtySize::new(rows, cols));
                }
                // The writer's end of the terminal goes with this task; the reader sees the
                // program's end.
                Control::Destroy => {
                    if let Some(pid) = pid.and_then(|p| i32::try_from(p).ok()) {
                        let _ = execseam_emulator_kit::sys::kill(pid, SIGTERM);
                    }
                    break;
                }
            }
        }
    });
    sandbox.track(reader.abort_handle());
    sandbox.track(writer.abort_handle());
    Ok(())
}
