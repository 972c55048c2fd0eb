//! Starting a session's terminal: the shell on a pseudo-terminal in the sandbox (the harness's
//! PTY primitive), and the task that moves bytes between it and the [`Terminal`].

use std::sync::Arc;

use tokio::sync::mpsc;

use super::Entry;
use super::pty::{Control, Launch, Terminal};

/// Starts `launch.shell` on a pseudo-terminal and drives it until it exits.
pub(crate) async fn start(
    entry: &Arc<Entry>,
    terminal: Arc<Terminal>,
    control: mpsc::UnboundedReceiver<Control>,
    launch: Launch,
) -> std::io::Result<()> {
    let _ = (entry, terminal, control, launch);
    Err(std::io::Error::other("the harness PTY primitive is not merged yet"))
}
