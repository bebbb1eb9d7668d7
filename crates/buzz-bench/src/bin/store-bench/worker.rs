//! One writer process: new threads and commits on them, timed, with each successful write
//! acknowledged (kill scenario) or summarised at the end (contention scenario).

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use buzz_bench::{BenchError, ctx};
use buzz_session_store::SessionRecord;
use serde::{Deserialize, Serialize};

use crate::subject::{Handle, Kind, Place, Wrote, event_id, key, session_id};

#[derive(Debug, clap::Args)]
pub struct WorkerArgs {
    #[arg(long)]
    kind: Kind,
    #[arg(long)]
    dir: PathBuf,
    #[arg(long)]
    id: u64,
    #[arg(long)]
    writes: u64,
    /// Start when this file appears (so all writers start together).
    #[arg(long)]
    go: Option<PathBuf>,
    /// Print an acknowledgement line after every successful write.
    #[arg(long)]
    ack: bool,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    Put,
    Commit,
}

/// One write the store reported as done.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ack {
    pub op: Op,
    pub n: u64,
}

/// A contention writer's summary.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Report {
    pub latencies_us: Vec<u64>,
    pub refused: u64,
    pub first_refusal: Option<String>,
    pub acked: Vec<Ack>,
}

/// The event id a commit on thread `n` delivers.
pub fn commit_id(n: u64) -> String {
    event_id(n, 999_999)
}

pub fn run(args: &WorkerArgs) -> Result<(), BenchError> {
    let place = Place {
        kind: args.kind,
        dir: args.dir.clone(),
        pg_url: std::env::var("BENCH_WORKER_PG_URL").ok(),
    };
    let handle = Handle::open(&place)?;
    if let Some(go) = &args.go {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !go.exists() {
            if Instant::now() > deadline {
                return Err(BenchError("the start signal never came".into()));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let base = (args.id + 1) * 10_000_000;
    let mut stdout = std::io::stdout().lock();
    let mut report = Report {
        latencies_us: Vec::new(),
        refused: 0,
        first_refusal: None,
        acked: Vec::new(),
    };
    for i in 0..args.writes {
        let n = base + i / 2;
        let op = if i % 2 == 0 { Op::Put } else { Op::Commit };
        let started = Instant::now();
        let wrote = match op {
            Op::Put => handle.put(&key(n), &SessionRecord::new(session_id(n)), 1 + i),
            Op::Commit => {
                let id = vec![commit_id(n)];
                let window = id.iter().cloned().collect();
                handle.commit(&key(n), &session_id(n), &id, &window, 1 + i)
            }
        };
        let elapsed = started.elapsed();
        match wrote {
            Wrote::Yes => {
                let ack = Ack { op, n };
                if args.ack {
                    let line = ctx(serde_json::to_string(&ack), "encoding")?;
                    ctx(
                        writeln!(stdout, "{line}").and_then(|()| stdout.flush()),
                        "acknowledging",
                    )?;
                } else {
                    report.acked.push(ack);
                }
            }
            Wrote::Refused(why) => {
                report.refused += 1;
                report.first_refusal.get_or_insert(why);
            }
        }
        report
            .latencies_us
            .push(u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX));
    }
    if !args.ack {
        let line = ctx(serde_json::to_string(&report), "encoding the report")?;
        ctx(writeln!(stdout, "{line}"), "writing the report")?;
    }
    Ok(())
}
