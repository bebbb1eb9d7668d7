//! Maintenance tool for the buzz-acp fork's patch series.
//!
//! The repository carries a pristine upstream baseline (`crates/buzz-acp`),
//! a registry (`patches.json`) and a series of `git format-patch` files
//! (`patches/*.patch`). This crate applies, checks, verifies, refreshes,
//! re-targets (sync) and retires them, and runs fork CI on a new upstream
//! (`ci`).
//!
//! Components:
//! * [`cli`] – the clap command line; [`cmd`] – one thin module per
//!   subcommand; [`context`] – what every command shares.
//! * [`registry`] – the typed, strictly parsed registry.
//! * [`patchfile`] – patch parsing, DEP-3 message rendering, content snapshots.
//! * [`exact`] – strict in-process application (exact context, zero offset).
//! * [`analysis`] – the core every command starts from: the series applied
//!   in process over the baseline, per patch; [`checks`] – the named checks
//!   `check` runs on it.
//! * [`guards`] – required symbols and invocation seams, parsed with syn.
//! * [`surface`] – what of upstream the series touches: the hunks in
//!   upstream files and the items they touch ([`enclosing`]), glue modules
//!   and their owners, import cycles ([`modgraph`]).
//! * [`classify`] – a patch's sync status, decided once from the facts.
//! * [`mutation`] – the mutation check's rule and evidence, read from
//!   libtest's output ([`libtest`]); [`upstream_run`] – upstream's own tests.
//! * [`services`] – what the tests need from outside: a throw-away
//!   PostgreSQL server ([`postgres`]).
//! * [`git`] – every git subprocess, isolated and deterministic.
//! * [`workarea`] – the scratch repository and state record under
//!   `target/fork-work/`; [`tree`] – the generated patched workspace.
//! * [`cargo`] – cargo runs against a patched tree.
//! * [`render`] – `FORK_PATCHES.md`; [`ui`] – all printing; [`dates`].
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
