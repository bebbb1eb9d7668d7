//! `acp-schema-check [--assume v1|v2] [--open] WIRE_LOG…`: checks `acp-test-agent` wire logs
//! against the ACP schemas and prints every frame outside them. Exit status 0: all valid; 1:
//! violations; 2: a log could not be read.

use std::path::PathBuf;
use std::process::ExitCode;

use acp_schema_check::{Checker, Closure, Version, check_wire_log};
use clap::Parser;

/// Checks acp-test-agent wire logs against the ACP v1 and v2 JSON schemas.
#[derive(Debug, Parser)]
#[command(name = "acp-schema-check", version, about)]
struct Args {
    /// The version to check by when a log does not show the agent's `initialize` answer
    /// (a log written without `--wire-log-sent`).
    #[arg(long = "assume", value_name = "v1|v2", value_parser = parse_version)]
    assume: Option<Version>,
    /// Accept unknown fields (check only what the generated schemas say).
    #[arg(long)]
    open: bool,
    /// Print the violations as JSON lines.
    #[arg(long)]
    json: bool,
    /// The wire logs.
    #[arg(required = true)]
    logs: Vec<PathBuf>,
}

fn parse_version(s: &str) -> Result<Version, String> {
    match s {
        "v1" | "1" => Ok(Version::V1),
        "v2" | "2" => Ok(Version::V2),
        other => Err(format!("unknown version {other:?} (v1 or v2)")),
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let closure = if args.open {
        Closure::Open
    } else {
        Closure::Closed
    };
    let checker = match Checker::new(closure) {
        Ok(checker) => checker,
        Err(e) => {
            eprintln!("acp-schema-check: {e}");
            return ExitCode::from(2);
        }
    };
    let mut bad = false;
    for path in &args.logs {
        let frames = match acp_test_agent::harness::read_wire_log(path) {
            Ok(frames) => frames,
            Err(e) => {
                eprintln!("acp-schema-check: {e}");
                return ExitCode::from(2);
            }
        };
        let report = check_wire_log(&checker, &frames, args.assume);
        for violation in &report.violations {
            if args.json {
                println!("{}", serde_json::to_string(violation).unwrap_or_default());
            } else {
                println!("{}: {violation}", path.display());
            }
        }
        eprintln!(
            "{}: {} frames checked, {} violations, {} unmatched responses",
            path.display(),
            report.checked,
            report.violations.len(),
            report.unmatched
        );
        bad |= !report.violations.is_empty();
    }
    if bad {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
