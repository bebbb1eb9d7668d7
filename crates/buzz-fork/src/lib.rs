//! Maintenance tool for the buzz-acp fork's patch series.
//!
//! The repository carries a pristine upstream baseline (`crates/buzz-acp`),
//! a registry (`patches.json`) and a series of `git format-patch` files
//! (`patches/*.patch`). This crate applies, checks, verifies, refreshes,
//! re-targets (sync) and retires them, and runs fork CI on a new upstream
//! (`ci`).
//!
//! Components:
//! * [`cli`] – the clap command line; [`cmd`] – one module per subcommand.
//! * [`registry`] – the typed, strictly parsed registry.
//! * [`patchfile`] – patch parsing, DEP-3 message rendering, content snapshots.
//! * [`exact`] – strict in-process application (exact context, zero offset).
//! * [`guards`] – required symbols and invocation seams, parsed with syn.
//! * [`surface`] – how much of upstream the series touches (lines in
//!   upstream files, glue modules), with [`modgraph`] for import cycles.
//! * [`git`] – every git subprocess, isolated and deterministic.
//! * [`workarea`] – the scratch repository and state record under
//!   `target/fork-work/`; [`tree`] – the generated patched workspace.
//! * [`cargo`] – cargo runs against a patched tree.
//! * [`render`] – `FORK_PATCHES.md`; [`ui`] – all printing.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod analysis;
pub mod cargo;
pub mod checks;
pub mod classify;
pub mod cli;
pub mod cmd;
pub mod context;
pub mod dates;
pub mod enclosing;
pub mod error;
pub mod exact;
pub mod fsutil;
pub mod git;
pub mod guards;
pub mod libtest;
pub mod modgraph;
pub mod mutation;
pub mod patchfile;
pub mod postgres;
pub mod registry;
pub mod render;
pub mod services;
pub mod surface;
pub mod tree;
pub mod ui;
pub mod upstream_run;
pub mod workarea;

pub use context::{Context, Outcome};
pub use error::{Error, Result};

/// Runs a parsed command line and returns the process exit code.
#[must_use]
pub fn run(cli: &cli::Cli) -> u8 {
    match cmd::dispatch(cli) {
        Ok(outcome) => outcome.exit_code(),
        Err(err) => {
            ui::error(&err);
            err.exit_code()
        }
    }
}
