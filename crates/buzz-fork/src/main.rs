//! `buzz-fork`: the fork maintenance tool (`scripts/fork <command>`).

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = buzz_fork::cli::Cli::parse();
    ExitCode::from(buzz_fork::run(&cli))
}
