//! Process-tree faults: a pid file and a detached helper child.
//!
//! Real adapters (codex-acp, …) spawn native children and some ignore end of input. A client must
//! end that whole tree when it goes away, even when it is killed. `--pid-file` tells a test which
//! processes to watch; `--spawn-helper` adds a child that has left the agent's process group, so a
//! client that only signals the group it spawned cannot reach it.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::error::AgentError;

/// How long a helper lives when nobody kills it: long enough for any test that watches it, short
/// enough that a client which leaks it does not leave it behind for good.
pub const HELPER_LIFETIME: Duration = Duration::from_secs(300);

/// Appends `<role> <pid>` to the pid file (one line per process, appended whole).
///
/// # Errors
///
/// The file cannot be opened or written.
pub fn record_pid(pid_file: &Path, role: &str, pid: u32) -> Result<(), AgentError> {
    let io = |source| AgentError::PidFile {
        path: pid_file.to_path_buf(),
        source,
    };
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(pid_file)
        .map_err(io)?;
    file.write_all(format!("{role} {pid}\n").as_bytes())
        .map_err(io)
}

/// Starts this binary again as a helper in a process group of its own, with no stdio, and
/// returns its pid. The helper is not waited for: it belongs to whoever ends the agent's tree.
///
/// # Errors
///
/// The binary cannot be located or started.
pub fn spawn_helper(state_dir: &Path) -> Result<u32, AgentError> {
    let exe = std::env::current_exe().map_err(AgentError::Helper)?;
    let child = Command::new(exe)
        .arg("--state-dir")
        .arg(state_dir)
        .arg("--helper")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(AgentError::Helper)?;
    Ok(child.id())
}

/// The helper's whole life: sleep, then exit.
pub async fn run_helper() {
    tokio::time::sleep(HELPER_LIFETIME).await;
}
