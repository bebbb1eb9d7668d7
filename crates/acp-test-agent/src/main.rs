//! The `acp-test-agent` binary: parse flags, log to stderr, serve ACP on stdio.

use std::process::ExitCode;

use clap::Parser;

use acp_test_agent::{Args, run};

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    // stdout carries the protocol, so every diagnostic goes to stderr. RUST_LOG overrides the
    // default level.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    match run(args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "acp-test-agent failed");
            ExitCode::FAILURE
        }
    }
}
