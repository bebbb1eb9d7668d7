//! The `fake-llm` binary: serve the fake LLM on 127.0.0.1 until killed.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

use fake_llm::FakeLlm;

/// A loopback-only fake LLM (Anthropic Messages, OpenAI Responses, Chat Completions) whose
/// replies report what each request contained.
#[derive(Debug, Parser)]
#[command(name = "fake-llm", version, about, long_about = None)]
struct Args {
    /// Port on 127.0.0.1; 0 picks a free one (see --port-file).
    #[arg(long, default_value_t = 0)]
    port: u16,

    /// Write the bound port to this file (atomically, once listening), for scripts to wait on.
    #[arg(long, value_name = "FILE")]
    port_file: Option<PathBuf>,

    /// Append one JSON line per completion request (path, model, bytes, user_messages, nonces).
    #[arg(long, value_name = "FILE", env = "FAKE_LLM_LOG")]
    log: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let server = match FakeLlm::bind(args.port, args.log.as_deref()).await {
        Ok(server) => server,
        Err(e) => {
            tracing::error!(error = %e, "fake-llm cannot start");
            return ExitCode::FAILURE;
        }
    };
    let addr = match server.local_addr() {
        Ok(addr) => addr,
        Err(e) => {
            tracing::error!(error = %e, "fake-llm has no address");
            return ExitCode::FAILURE;
        }
    };
    if let Some(path) = &args.port_file
        && let Err(e) = write_port_file(path, addr.port())
    {
        tracing::error!(path = %path.display(), error = %e, "cannot write the port file");
        return ExitCode::FAILURE;
    }
    println!("fake-llm listening on http://{addr}");
    server.serve().await;
    ExitCode::SUCCESS
}

/// Writes the port to a temporary sibling and renames it, so a reader never sees a partial file.
fn write_port_file(path: &std::path::Path, port: u16) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{port}\n"))?;
    std::fs::rename(&tmp, path)
}
