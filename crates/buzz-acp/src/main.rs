//! `buzz-acp`: the harness binary. Parses flags and environment, sets up
//! logging on stderr, and runs the event loop.
//!
//! Started as `buzz-acp __agent-guard …` it is instead the agent guard the
//! harness puts between itself and each agent (see `buzz_acp::guard`). That
//! check comes first, before any thread exists: the guard relies on
//! single-threaded signal handling.

use std::process::ExitCode;

use buzz_acp::config::{CliArgs, Config};
use buzz_acp::guard;
use clap::Parser;

fn main() -> ExitCode {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(invocation) = guard::invocation(&argv) {
        return match invocation {
            Ok(invocation) => guard::run(invocation),
            Err(e) => {
                eprintln!("buzz-acp: {e}");
                ExitCode::from(2)
            }
        };
    }
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("BUZZ_ACP_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let mut config = match Config::from_args(CliArgs::parse_from(argv)) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("buzz-acp: {e}");
            return ExitCode::from(2);
        }
    };
    config.agent_guard = guard::guard_executable();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("buzz-acp: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(buzz_acp::tokio_main(config)) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("buzz-acp: {e}");
            ExitCode::FAILURE
        }
    }
}
