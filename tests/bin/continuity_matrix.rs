//! `continuity-matrix`: plays every cell of the continuity matrix (docs/CONTINUITY.md) against a
//! baseline and a patched `buzz-acp` binary, on the test agent, and prints one table: per cause,
//! whether each build's agent still knew the code word when it answered the question ("kept") or
//! not ("lost"), and what the patched build told the thread.
//!
//! With `--check` it exits non-zero when a cell reads otherwise than docs/CONTINUITY.md says:
//! every patched cell "kept" except the owner's `!rotate` (a clean slate by design), every
//! baseline cell "lost". `scripts/demo` runs it after the bundled thread.
//!
//! The two builds are played side by side (one thread each); the cells of one build run in turn.

use std::path::PathBuf;
use std::process::ExitCode;

use buzz_acp_fork_tests::matrix::{Build, Cause, CellError, Knows, Played, play};
use clap::Parser;

/// Plays the continuity matrix against two harness builds.
#[derive(Debug, Parser)]
#[command(name = "continuity-matrix")]
struct Args {
    /// The baseline `buzz-acp` binary.
    #[arg(long, value_name = "PATH")]
    baseline: PathBuf,
    /// The patched `buzz-acp` binary.
    #[arg(long, value_name = "PATH")]
    patched: PathBuf,
    /// The `acp-test-agent` binary.
    #[arg(long, value_name = "PATH")]
    agent: PathBuf,
    /// Exit with status 1 when a cell differs from what docs/CONTINUITY.md says.
    #[arg(long)]
    check: bool,
    /// Play only this row (repeatable); every row by default.
    #[arg(long, value_enum, value_name = "CAUSE")]
    cause: Vec<Cause>,
}

/// One build's result in one cell.
#[derive(Debug)]
enum Cell {
    /// The cell was played: what the agent knew, and what the thread was told.
    Played { knows: Knows, told: String },
    /// The cell needs PostgreSQL, which is not installed here.
    NoPostgres,
    /// The cell could not be played.
    Failed(String),
}

impl Cell {
    fn of(result: Result<Played, CellError>) -> Cell {
        match result {
            Ok(played) => Cell::Played {
                knows: played.knows(),
                told: played.told(),
            },
            Err(CellError::Postgres(pg_fixture::FixtureError::NoBinaries)) => Cell::NoPostgres,
            Err(e) => Cell::Failed(e.to_string()),
        }
    }

    fn label(&self) -> String {
        match self {
            Cell::Played { knows, .. } => knows.to_string(),
            Cell::NoPostgres => "n/a (no PostgreSQL)".to_string(),
            Cell::Failed(_) => "FAILED".to_string(),
        }
    }

    /// Whether the cell reads as expected; a cell that could not run here is not a mismatch.
    fn as_expected(&self, expected: Knows) -> bool {
        match self {
            Cell::Played { knows, .. } => *knows == expected,
            Cell::NoPostgres => true,
            Cell::Failed(_) => false,
        }
    }
}

/// Plays the cells of `causes` against `build`, in turn.
fn play_all(build: &Build, causes: &[Cause]) -> Vec<Cell> {
    causes
        .iter()
        .map(|cause| Cell::of(play(build, *cause)))
        .collect()
}

/// `text` without the agent's details that notices quote in parentheses (`(session/load: agent
/// error -32002: …)`), which say more to an operator than to a reader of the table.
fn without_details(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find(" (") {
        let (before, after) = rest.split_at(open);
        out.push_str(before);
        match closing(&after[1..]).filter(|_| !after.starts_with(" (up to")) {
            Some(close) => rest = &after[1 + close + 1..],
            None => {
                out.push_str(" (");
                rest = &after[2..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The byte offset of the `)` that closes the `(` that `text` starts with.
fn closing(text: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (at, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(at);
                }
            }
            _ => {}
        }
    }
    None
}

fn main() -> ExitCode {
    let args = Args::parse();
    let causes: Vec<Cause> = if args.cause.is_empty() {
        Cause::ALL.to_vec()
    } else {
        Cause::ALL
            .into_iter()
            .filter(|c| args.cause.contains(c))
            .collect()
    };
    let started = std::time::Instant::now();
    let baseline = Build {
        harness: args.baseline,
        agent: args.agent.clone(),
    };
    let patched = Build {
        harness: args.patched,
        agent: args.agent,
    };
    let (baseline_cells, patched_cells) = std::thread::scope(|scope| {
        let baseline_run = scope.spawn(|| play_all(&baseline, &causes));
        let patched_cells = play_all(&patched, &causes);
        let baseline_cells = baseline_run.join().unwrap_or_else(|_| {
            causes
                .iter()
                .map(|_| Cell::Failed("the baseline's thread panicked".into()))
                .collect()
        });
        (baseline_cells, patched_cells)
    });

    println!("The continuity matrix: does the agent still know the code word after the cause?");
    println!();
    println!("| cause | baseline | patched |");
    println!("|---|---|---|");
    let mut mismatches = Vec::new();
    for ((cause, base), fork) in causes.iter().zip(&baseline_cells).zip(&patched_cells) {
        println!("| {} | {} | {} |", cause.row(), base.label(), fork.label());
        if !base.as_expected(Knows::Lost) {
            mismatches.push(format!(
                "baseline, {cause}: {} (expected lost)",
                base.label()
            ));
        }
        if !fork.as_expected(cause.patched_knows()) {
            mismatches.push(format!(
                "patched, {cause}: {} (expected {})",
                fork.label(),
                cause.patched_knows()
            ));
        }
    }
    println!();
    println!("What the patched harness told each thread:");
    for (cause, fork) in causes.iter().zip(&patched_cells) {
        if let Cell::Played { told, .. } = fork {
            println!("  {}: {}", cause.row(), without_details(told));
        }
    }
    for (label, cells) in [("baseline", &baseline_cells), ("patched", &patched_cells)] {
        for (cause, cell) in causes.iter().zip(cells) {
            if let Cell::Failed(e) = cell {
                eprintln!("{label}, {cause}: {e}");
            }
        }
    }
    println!(
        "\n{} cells played in {:.0?}",
        2 * causes.len(),
        started.elapsed()
    );
    if !args.check {
        return ExitCode::SUCCESS;
    }
    if mismatches.is_empty() {
        println!("\ncheck: every cell reads as docs/CONTINUITY.md says");
        ExitCode::SUCCESS
    } else {
        for m in &mismatches {
            eprintln!("check: {m}");
        }
        ExitCode::FAILURE
    }
}
