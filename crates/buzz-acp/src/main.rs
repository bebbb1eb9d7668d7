//! `buzz-acp`: the harness binary. Parses flags and environment, sets up
//! logging on stderr, and runs the event loop.

use std::process::ExitCode;

use buzz_acp::Harness;
use buzz_acp::config::{CliArgs, Config};
use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("BUZZ_ACP_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let config = match Config::from_args(CliArgs::parse()) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("buzz-acp: {e}");
            return ExitCode::from(2);
        }
    };
    let harness = match Harness::open(config) {
        Ok(harness) => harness,
        Err(e) => {
            eprintln!("buzz-acp: {e}");
            return ExitCode::FAILURE;
        }
    };
    match harness.run().await {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("buzz-acp: {e}");
            ExitCode::FAILURE
        }
    }
}
