//! `acp-test-agent`: a deterministic ACP agent (v1, and the v2 draft by flag) for tests and demos, plus the test harness
//! other crates use to drive it.
//!
//! The binary serves ACP over its own stdin/stdout (see [`Args`] for the flags) with the real
//! `agent-client-protocol` SDK, so clients under test talk to it exactly as they would to a real
//! agent. What makes it useful in tests:
//!
//! - **Replies prove memory.** Each reply is
//!   `turns=N digest=XXXXXXXX nonces=a-1234,b-5678 | echo: <last prose line>`, computed from every user
//!   turn of the session ([`reply`]). After a restart and `session/load`, the numbers show whether
//!   the history really came back.
//! - **Sessions survive restarts.** Transcripts live in `<state-dir>/sessions/<id>.json`
//!   ([`transcript`]), written atomically and shareable by a pool of agent processes.
//! - **Faults on demand.** Prompt and load delays, injected load errors, ignored cancels, a crash
//!   on the Nth request, ignoring stdin EOF, a prompt held until a gate file exists (`!gate:NAME`),
//!   and a detached helper child (`--spawn-helper`) with a pid file to watch the process tree.
//! - **A wire log.** `--wire-log` records every message the agent received; [`harness`] reads it
//!   back and normalizes it for snapshots.
//!
//! Modules:
//! - [`cli`]: the flags; [`run`]: serve until stdin closes.
//! - [`reply`]: the pure reply computation.
//! - [`transcript`]: the on-disk session format.
//! - [`harness`]: wire-log reading and normalization, binary lookup for other crates' tests.
//! - [`protocol`]: version negotiation (`--protocol v1|v2|both`) and the ACP v2 draft served by
//!   a translating front (`--session-capability`).
//! - [`mimic`]: real adapters' "no such session" answers (`--missing-session`, `--agent-name`).

pub mod cli;
pub mod harness;
pub mod mimic;
pub mod protocol;
pub mod reply;
pub mod transcript;

mod agent;
mod error;
mod processes;
mod sessions;
mod wire;

pub use agent::{InProcessLines, run, serve_in_process};
pub use cli::Args;
pub use error::AgentError;
pub use reply::StopReasonName;
