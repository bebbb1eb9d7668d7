//! Errors that stop the agent process.

use std::io;
use std::path::PathBuf;

/// Why [`run`](crate::run) failed. Per-request failures never end up here: they are answered as
/// JSON-RPC errors and the agent keeps serving.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// `--models` was given an empty list.
    #[error("--models must name at least one model")]
    NoModels,
    /// The state directory could not be created.
    #[error("creating state dir {}: {source}", path.display())]
    StateDir {
        /// The directory.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The wire log could not be opened for appending.
    #[error("opening wire log {}: {source}", path.display())]
    WireLog {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// A flag that needs an agent process was given to an in-process agent.
    #[error("in-process agent: {0}")]
    InProcess(&'static str),
    /// The pid file could not be written.
    #[error("writing pid file {}: {source}", path.display())]
    PidFile {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The `--spawn-helper` process could not be started.
    #[error("starting the helper process: {0}")]
    Helper(io::Error),
    /// The ACP connection failed.
    #[error("ACP connection failed: {0}")]
    Protocol(#[from] agent_client_protocol::Error),
}
