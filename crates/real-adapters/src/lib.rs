//! The real-adapter tier: third-party ACP adapters (codex-acp, opencode, claude-agent-acp),
//! installed by `scripts/install-adapters`, run fully offline against [`fake_llm`] and driven
//! through the real buzz-acp binaries (baseline and patched) by the file relay of
//! `buzz_acp::testing::Scenario`.
//!
//! Modules:
//! - [`adapter`]: which adapters exist, where they are installed, and a throw-away home per
//!   agent with the configuration that points it at the fake LLM.
//! - [`llm`]: the fake LLM on a background runtime, for synchronous tests and tools.
//! - [`procs`]: finding the processes started for one agent home (to prove none is left).
//! - [`binaries`]: where the baseline and patched harness binaries are.
//! - [`workspace`]: where this workspace is on disk.
//!
//! The scenarios are in `tests/real.rs` (ignored by a plain `cargo test`; run them with
//! `scripts/real-adapters`), the measurement in `src/bin/real-follow-ups.rs`.

pub mod adapter;
pub mod binaries;
pub mod llm;
pub mod procs;
pub mod workspace;

pub use adapter::{Adapter, AgentHome, TierError};
