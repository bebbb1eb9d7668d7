//! The receipt store at scale and under contention: the old JSON file and each `ReceiptStore`
//! backend side by side, in one run (`scripts/measure store`).
//!
//! * **scale**: one store per size, seeded with N receipts (100 / 1k / 10k / 100k, each with a
//!   16-id delivery ledger), then timed writes as the harness makes them (nine turn commits on
//!   random existing threads for every new thread), round-robin across the sizes so that
//!   background load falls on every size alike. Reports p50/p99, what the store still holds, its
//!   size on disk, and commits reported as written whose ids are not in the store afterwards.
//! * **contention**: P processes start together and each makes W writes (a new thread, then a
//!   commit on it); reports refusals, writes lost (acknowledged but not found afterwards) and
//!   latency percentiles over all writes.
//! * **kill -9**: R times, a writer process is killed with SIGKILL at a random point; afterwards
//!   every acknowledged write must be present, the store must pass its consistency check, and no
//!   files other than the store's own may be left behind.
//!
//! Output: one JSON object per line on stdout as results come, then readable tables. Nothing here
//! asserts a speed: these are measurements, compared side by side in the same run.

mod subject;
mod worker;

use std::collections::HashSet;
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use buzz_bench::{BenchError, ctx};
use buzz_session_store::{KeyScheme, SessionRecord, SqliteStore};
use clap::{Parser, Subcommand};
use serde_json::json;

use subject::{
    Handle, Kind, Place, Wrote, event_id, key, scope, seeded_record, session_id, splitmix,
};

#[derive(Debug, Parser)]
struct Cli {
    #[command(subcommand)]
    command: Option<Sub>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Debug, Subcommand)]
enum Sub {
    /// Internal: one writer process of the contention and kill scenarios.
    Worker(worker::WorkerArgs),
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// Stores to measure, comma separated (sqlite, postgres).
    #[arg(long, value_delimiter = ',', default_value = "sqlite,postgres")]
    stores: Vec<Kind>,
    /// Store sizes for the scale table.
    #[arg(long, value_delimiter = ',', default_value = "100,1000,10000,100000")]
    scales: Vec<u64>,
    /// Timed writes per size (SQLite, PostgreSQL).
    #[arg(long, default_value_t = 300)]
    samples: u64,
    /// Writer processes in the contention scenario.
    #[arg(long, default_value_t = 4)]
    processes: u64,
    /// Writes per process in the contention scenario.
    #[arg(long, default_value_t = 500)]
    writes: u64,
    /// Kill -9 rounds.
    #[arg(long, default_value_t = 50)]
    kills: u64,
    /// PostgreSQL server (else `BUZZ_TEST_POSTGRES_URL`).
    #[arg(long, env = "BUZZ_TEST_POSTGRES_URL", hide_env_values = true)]
    pg_url: Option<String>,
}

fn main() -> Result<(), BenchError> {
    let cli = Cli::parse();
    match cli.command {
        Some(Sub::Worker(args)) => worker::run(&args),
        None => run(&cli.run),
    }
}

/// A fresh place for one measurement; for PostgreSQL a schema of its own, dropped by the guard.
struct Fresh {
    place: Place,
    _dir: tempfile::TempDir,
    drop_schema: Option<(String, String)>,
}

impl Drop for Fresh {
    fn drop(&mut self) {
        if let Some((url, schema)) = self.drop_schema.take()
            && let Ok(mut admin) = postgres::Client::connect(&url, postgres::NoTls)
        {
            let _ = admin.batch_execute(&format!("DROP SCHEMA {schema} CASCADE"));
        }
    }
}

fn fresh(kind: Kind, pg_url: Option<&str>, tag: &str) -> Result<Fresh, BenchError> {
    let dir = ctx(tempfile::tempdir(), "creating a temporary directory")?;
    let mut place = Place {
        kind,
        dir: dir.path().to_path_buf(),
        pg_url: None,
    };
    let mut drop_schema = None;
    if kind == Kind::Postgres {
        let url = pg_url.ok_or_else(|| {
            BenchError(
                "postgres: no server (--pg-url or BUZZ_TEST_POSTGRES_URL; scripts/pg start)".into(),
            )
        })?;
        let schema = format!("bench_{tag}_{}", std::process::id());
        let mut admin = ctx(
            postgres::Client::connect(url, postgres::NoTls),
            "connecting to PostgreSQL",
        )?;
        ctx(
            admin.batch_execute(&format!(
                "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"
            )),
            "creating a schema",
        )?;
        let sep = if url.contains('?') { '&' } else { '?' };
        place.pg_url = Some(format!("{url}{sep}options=-csearch_path%3D{schema}"));
        drop_schema = Some((url.to_owned(), schema));
    }
    Ok(Fresh {
        place,
        _dir: dir,
        drop_schema,
    })
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0 * 100.0).round() / 100.0
}

fn emit(value: &serde_json::Value) {
    println!("{value}");
}

fn run(args: &RunArgs) -> Result<(), BenchError> {
    let mut scale_rows = Vec::new();
    let mut contention_rows = Vec::new();
    let mut kill_rows = Vec::new();
    for &kind in &args.stores {
        let mut base_p50 = None;
        for row in scale(kind, args)? {
            emit(&row);
            let n = row["scopes"].as_u64().unwrap_or(0);
            let p50 = row["write_p50_ms"].as_f64().unwrap_or(0.0);
            if base_p50.is_none() {
                base_p50 = Some((n, p50));
            }
            scale_rows.push((row, base_p50));
        }
        let row = contention(kind, args)?;
        emit(&row);
        contention_rows.push(row);
        let row = kill9(kind, args)?;
        emit(&row);
        kill_rows.push(row);
    }
    print_tables(&scale_rows, &contention_rows, &kill_rows);
    Ok(())
}

/// One store seeded with `n` receipts, and what its timed writes saw.
struct Sized {
    n: u64,
    fresh: Fresh,
    handle: Handle,
    held: u64,
    rng: u64,
    times: Vec<Duration>,
    refused: u64,
    silently_dropped: u64,
    first_refusal: Option<String>,
}

impl Sized {
    fn seed(kind: Kind, n: u64, args: &RunArgs) -> Result<Self, BenchError> {
        let fresh = fresh(kind, args.pg_url.as_deref(), &format!("scale{n}"))?;
        let handle = Handle::open(&fresh.place)?;
        let records: Vec<_> = (0..n).map(|i| (key(i), seeded_record(i))).collect();
        handle.seed(&fresh.place, &records)?;
        let held = handle.all()?.len() as u64;
        Ok(Self {
            n,
            fresh,
            handle,
            held,
            rng: 0x5eed_u64 ^ n,
            times: Vec::new(),
            refused: 0,
            silently_dropped: 0,
            first_refusal: None,
        })
    }

    /// Write number `i`: every tenth a new thread, the others a turn commit on a random thread.
    fn write(&mut self, i: u64) {
        let now = 1_000 + i;
        let started = Instant::now();
        let wrote = if i % 10 == 9 {
            let fresh_key = self.n + 1 + i;
            let wrote = self.handle.put(
                &key(fresh_key),
                &SessionRecord::new(session_id(fresh_key)),
                now,
            );
            self.times.push(started.elapsed());
            wrote
        } else {
            self.rng = splitmix(self.rng);
            let k = self.rng % self.held.max(1);
            let new_ids = vec![event_id(k, 1_000 + i)];
            let window: HashSet<String> = (0..subject::LEDGER_IDS as u64)
                .map(|j| event_id(k, j))
                .chain(new_ids.iter().cloned())
                .collect();
            let wrote = self
                .handle
                .commit(&key(k), &session_id(k), &new_ids, &window, now);
            self.times.push(started.elapsed());
            // Outside the timing: did a commit reported as written really land?
            let landed = self.handle.get(&key(k)).is_some_and(|r| {
                r.delivery
                    .is_some_and(|d| d.delivered_event_ids.contains(&new_ids[0]))
            });
            if wrote == Wrote::Yes && !landed {
                self.silently_dropped += 1;
            }
            wrote
        };
        if let Wrote::Refused(why) = wrote {
            self.refused += 1;
            self.first_refusal.get_or_insert(why);
        }
    }

    fn report(mut self, kind: Kind) -> Result<serde_json::Value, BenchError> {
        self.times.sort();
        let all = self.handle.all()?;
        let ledgers = all.iter().filter(|(_, r)| r.delivery.is_some()).count();
        let bytes = settled_bytes(&self.fresh.place, self.handle)?;
        Ok(json!({
            "bench": "scale",
            "store": kind.to_string(),
            "scopes": self.n,
            "held": all.len(),
            "ledgers": ledgers,
            "bytes": bytes,
            "writes": self.times.len(),
            "write_p50_ms": ms(percentile(&self.times, 50.0)),
            "write_p99_ms": ms(percentile(&self.times, 99.0)),
            "refused": self.refused,
            "reported_written_but_not": self.silently_dropped,
            "refused_at_seeding": self.n - self.held.min(self.n),
            "first_refusal": self.first_refusal,
        }))
    }
}

/// The scale measurement for one store: every size is seeded first, then the timed writes go
/// round-robin across the sizes, so background load on the machine falls on all sizes alike and
/// the ratios between them hold even when absolute times drift.
fn scale(kind: Kind, args: &RunArgs) -> Result<Vec<serde_json::Value>, BenchError> {
    let mut sized = args
        .scales
        .iter()
        .map(|&n| Sized::seed(kind, n, args))
        .collect::<Result<Vec<_>, _>>()?;
    for i in 0..args.samples {
        for s in &mut sized {
            s.write(i);
        }
    }
    sized.into_iter().map(|s| s.report(kind)).collect()
}

/// Size on disk once the store is closed: for SQLite the last close checkpoints the write-ahead
/// log into the database and removes it, so this is the data itself, not the log's high-water mark.
fn settled_bytes(place: &Place, handle: Handle) -> Result<u64, BenchError> {
    if place.kind != Kind::Sqlite {
        return handle.bytes();
    }
    drop(handle);
    let mut total = 0;
    for entry in ctx(fs::read_dir(&place.dir), "listing the state directory")? {
        let entry = ctx(entry, "listing the state directory")?;
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with("sessions.sqlite3")
        {
            total += entry.metadata().map_or(0, |m| m.len());
        }
    }
    Ok(total)
}

fn spawn_worker(
    place: &Place,
    id: u64,
    writes: u64,
    go: Option<&Path>,
    ack: bool,
) -> Result<std::process::Child, BenchError> {
    let exe = ctx(std::env::current_exe(), "finding this binary")?;
    let mut cmd = Command::new(exe);
    cmd.arg("worker")
        .arg("--kind")
        .arg(place.kind.to_string())
        .arg("--dir")
        .arg(&place.dir)
        .arg("--id")
        .arg(id.to_string())
        .arg("--writes")
        .arg(writes.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if let Some(url) = &place.pg_url {
        cmd.env("BENCH_WORKER_PG_URL", url);
    }
    if let Some(go) = go {
        cmd.arg("--go").arg(go);
    }
    if ack {
        cmd.arg("--ack");
    }
    ctx(cmd.spawn(), "starting a writer process")
}

/// P processes × W writes on one store.
fn contention(kind: Kind, args: &RunArgs) -> Result<serde_json::Value, BenchError> {
    let fresh = fresh(kind, args.pg_url.as_deref(), "contention")?;
    let place = &fresh.place;
    drop(Handle::open(place)?);
    let go = place.dir.join("go");
    let children = (0..args.processes)
        .map(|id| spawn_worker(place, id, args.writes, Some(&go), false))
        .collect::<Result<Vec<_>, _>>()?;
    let started = Instant::now();
    ctx(fs::write(&go, b""), "starting the writers")?;
    let mut times = Vec::new();
    let mut refused = 0u64;
    let mut acked = Vec::new();
    let mut first_refusal = None;
    for child in children {
        let out = ctx(child.wait_with_output(), "waiting for a writer")?;
        let text = String::from_utf8_lossy(&out.stdout);
        for line in text.lines() {
            let report: worker::Report =
                ctx(serde_json::from_str(line), "reading a writer's report")?;
            times.extend(
                report
                    .latencies_us
                    .iter()
                    .map(|&us| Duration::from_micros(us)),
            );
            refused += report.refused;
            acked.extend(report.acked);
            if first_refusal.is_none() {
                first_refusal = report.first_refusal;
            }
        }
    }
    let wall = started.elapsed();
    let lost = count_lost(place, &acked)?;
    times.sort();
    Ok(json!({
        "bench": "contention",
        "store": kind.to_string(),
        "processes": args.processes,
        "writes_each": args.writes,
        "writes": times.len(),
        "refused": refused,
        "lost": lost,
        "p50_ms": ms(percentile(&times, 50.0)),
        "p99_ms": ms(percentile(&times, 99.0)),
        "max_ms": ms(times.last().copied().unwrap_or_default()),
        "wall_s": (wall.as_secs_f64() * 100.0).round() / 100.0,
        "first_refusal": first_refusal,
    }))
}

/// Acknowledged writes whose effect is not in the store.
fn count_lost(place: &Place, acked: &[worker::Ack]) -> Result<u64, BenchError> {
    let handle = Handle::open(place)?;
    let all: std::collections::HashMap<String, SessionRecord> = handle
        .all()?
        .into_iter()
        .map(|(k, r)| (k.to_storage_key(), r))
        .collect();
    let mut lost = 0;
    for ack in acked {
        let found = all.get(&key(ack.n).to_storage_key());
        let ok = match ack.op {
            worker::Op::Put => found.is_some_and(|r| r.session_id == session_id(ack.n)),
            worker::Op::Commit => found.is_some_and(|r| {
                r.delivery
                    .as_ref()
                    .is_some_and(|d| d.delivered_event_ids.contains(&worker::commit_id(ack.n)))
            }),
        };
        if !ok {
            lost += 1;
        }
    }
    Ok(lost)
}

/// R writer processes killed with SIGKILL mid-stream.
fn kill9(kind: Kind, args: &RunArgs) -> Result<serde_json::Value, BenchError> {
    let fresh = fresh(kind, args.pg_url.as_deref(), "kill")?;
    let place = &fresh.place;
    drop(Handle::open(place)?);
    let mut acked = Vec::new();
    let mut rng = 0x0dd_u64;
    for round in 0..args.kills {
        rng = splitmix(rng);
        let wanted = 1 + rng % 30;
        let mut child = spawn_worker(place, round, 1_000_000, None, true)?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| BenchError("no stdout from a writer".into()))?;
        let mut lines = BufReader::new(stdout).lines();
        let mut got = 0;
        while got < wanted {
            let Some(line) = lines.next() else { break };
            let line = ctx(line, "reading a writer's acknowledgements")?;
            if let Ok(ack) = serde_json::from_str::<worker::Ack>(&line) {
                acked.push(ack);
                got += 1;
            }
        }
        ctx(child.kill(), "killing a writer")?;
        ctx(child.wait(), "reaping a writer")?;
        // Acknowledgements already in the pipe when the signal landed still count.
        for line in lines.map_while(Result::ok) {
            if let Ok(ack) = serde_json::from_str::<worker::Ack>(&line) {
                acked.push(ack);
            }
        }
    }
    let lost = count_lost(place, &acked)?;
    let corrupt = match kind {
        Kind::Sqlite => {
            let store = ctx(
                SqliteStore::open(
                    &place.dir.join("sessions.sqlite3"),
                    scope(),
                    KeyScheme::Scope,
                    10_000_000,
                ),
                "reopening",
            )?;
            u64::from(store.integrity_check().is_err())
        }
        Kind::Postgres => u64::from(Handle::open(place)?.all().is_err()),
    };
    let (debris, debris_bytes) = debris(kind, &place.dir)?;
    Ok(json!({
        "bench": "kill9",
        "store": kind.to_string(),
        "rounds": args.kills,
        "acked_writes": acked.len(),
        "lost_committed": lost,
        "corrupt": corrupt,
        "debris_files": debris,
        "debris_bytes": debris_bytes,
    }))
}

/// Files left in the state directory that are not the store itself, after every process closed it.
fn debris(kind: Kind, dir: &Path) -> Result<(u64, u64), BenchError> {
    let own: Vec<String> = match kind {
        Kind::Sqlite => vec!["sessions.sqlite3".into()],
        Kind::Postgres => vec![],
    };
    let mut files = 0;
    let mut bytes = 0;
    for entry in ctx(fs::read_dir(dir), "listing the state directory")? {
        let entry = ctx(entry, "listing the state directory")?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if own.contains(&name) {
            continue;
        }
        files += 1;
        bytes += entry.metadata().map_or(0, |m| m.len());
    }
    Ok((files, bytes))
}

fn print_tables(
    scale: &[(serde_json::Value, Option<(u64, f64)>)],
    contention: &[serde_json::Value],
    kill: &[serde_json::Value],
) {
    println!();
    println!("## Scale: one write (9 turn commits : 1 new thread), by receipts in the store");
    println!();
    println!(
        "| store | scopes | held | with ledger | size on disk | write p50 (ms) | write p99 (ms) | p50 vs smallest | refused | reported written, not written |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (row, base) in scale {
        let ratio = match base {
            Some((_, b)) if *b > 0.0 => {
                format!("{:.2}×", row["write_p50_ms"].as_f64().unwrap_or(0.0) / b)
            }
            _ => "–".into(),
        };
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {}/{} | {} |",
            row["store"].as_str().unwrap_or(""),
            row["scopes"],
            row["held"],
            row["ledgers"],
            human_bytes(row["bytes"].as_u64().unwrap_or(0)),
            row["write_p50_ms"],
            row["write_p99_ms"],
            ratio,
            row["refused"],
            row["writes"],
            row["reported_written_but_not"],
        );
    }
    println!();
    println!("## Contention: processes writing at once (each: new thread, then a commit on it)");
    println!();
    println!(
        "| store | processes × writes | refused | lost | p50 (ms) | p99 (ms) | max (ms) | wall (s) |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    for row in contention {
        println!(
            "| {} | {} × {} | {} | {} | {} | {} | {} | {} |",
            row["store"].as_str().unwrap_or(""),
            row["processes"],
            row["writes_each"],
            row["refused"],
            row["lost"],
            row["p50_ms"],
            row["p99_ms"],
            row["max_ms"],
            row["wall_s"],
        );
    }
    println!();
    println!("## kill -9 during writes");
    println!();
    println!(
        "| store | kills | acknowledged writes | lost | corrupt | debris files | debris size |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for row in kill {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} |",
            row["store"].as_str().unwrap_or(""),
            row["rounds"],
            row["acked_writes"],
            row["lost_committed"],
            row["corrupt"],
            row["debris_files"],
            human_bytes(row["debris_bytes"].as_u64().unwrap_or(0)),
        );
    }
}

fn human_bytes(b: u64) -> String {
    const KB: f64 = 1000.0;
    let b = b as f64;
    if b >= KB * KB {
        format!("{:.2} MB", b / KB / KB)
    } else if b >= KB {
        format!("{:.0} KB", b / KB)
    } else {
        format!("{b} B")
    }
}
