//! The `fake-llm` binary: serve the fake LLM on 127.0.0.1 until killed.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

use fake_llm::models::{Catalogue, DEFAULT_CONTEXT_TOKENS};
use fake_llm::{FakeLlm, Options};

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

    /// Append one JSON line per completion request (path, model, bytes, user_messages, nonces,
    /// kind, the fake clock, tokens and what a prompt cache could have served).
    #[arg(long, value_name = "FILE", env = "FAKE_LLM_LOG")]
    log: Option<PathBuf>,

    /// The context window, in estimated tokens (bytes / 4), of every model without one of its
    /// own (`fake-model` and any unlisted model). A prompt over it is answered with the
    /// provider's context-overflow error.
    #[arg(long, value_name = "N", env = "FAKE_LLM_CONTEXT_LIMIT_TOKENS", default_value_t = DEFAULT_CONTEXT_TOKENS)]
    context_limit_tokens: u64,

    /// A model and its own context window, `MODEL=TOKENS` (repeatable); the model is listed by
    /// `GET /v1/models`. `test-large` has 1000000 unless given here.
    #[arg(long = "model-limit", value_name = "MODEL=TOKENS", value_parser = parse_model_limit)]
    model_limits: Vec<(String, u64)>,

    /// Write every completion request body to this directory (`NNNNNN.json`), to see what an
    /// adapter really sends.
    #[arg(long, value_name = "DIR", env = "FAKE_LLM_CAPTURE_DIR")]
    capture_dir: Option<PathBuf>,
}

fn parse_model_limit(text: &str) -> Result<(String, u64), String> {
    let (model, tokens) = text
        .split_once('=')
        .ok_or_else(|| format!("expected MODEL=TOKENS, got {text:?}"))?;
    if model.is_empty() {
        return Err(format!("no model name in {text:?}"));
    }
    let tokens = tokens
        .parse()
        .map_err(|e| format!("bad token count in {text:?}: {e}"))?;
    Ok((model.to_owned(), tokens))
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
    let mut catalogue = Catalogue::new(args.context_limit_tokens);
    for (model, tokens) in &args.model_limits {
        catalogue.set_limit(model, *tokens);
    }
    let options = Options {
        log: args.log,
        capture_dir: args.capture_dir,
        catalogue,
    };
    let server = match FakeLlm::bind_with(args.port, options).await {
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
