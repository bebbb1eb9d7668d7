//! What a store outage costs a hot follow-up: the patched harness on a private PostgreSQL
//! server (crate `pg-fixture`), hot follow-ups timed while the database answers and while it is
//! frozen (SIGSTOP of the postmaster and its backends: connections are accepted and nothing
//! answers, the worst kind of outage for a client), side by side in one run.
//!
//! Every store call of the patched harness runs off its event loop, so a follow-up that continues
//! its live session should not notice the outage at all; the goal is a frozen/up ratio of the
//! medians of at most 1.2×.
//!
//! Each run starts two harnesses, each with a thread of its own and a PostgreSQL server of its
//! own; a root and three follow-ups warm each thread up (their receipt and ledger commits reach
//! the store). Then two comparisons, each made of sides measured under the same conditions,
//! because on a shared machine what else runs at the moment, the order of blocks and a pause
//! before a block move the figures more than the store does:
//!
//! * **Up vs just frozen**, on each harness in turn, alternating follow-up by follow-up: the
//!   harness's database is frozen right before every second follow-up is posted and thawed once
//!   it is answered, so that follow-up's ledger commit (or the previous one's) is stuck in
//!   flight while it runs.
//! * **Up vs frozen past the deadline**, across the two harnesses, alternating follow-up by
//!   follow-up: one harness's database is frozen until that harness has recorded the store as
//!   down (a write ran into its 10 s call deadline; its writes now wait for their replay), while
//!   the other's stays up. After the thaw the run waits until the queued writes have reached the
//!   store.
//!
//! Each comparison starts with two untimed follow-ups per harness. Runs take turns at which
//! harness goes down and at which side goes first in a pair, so neither harness's history nor
//! the order favours a side. A follow-up is timed from appending it to the relay until
//! its reply is visible there (the harness polls the relay every 2 ms, the timer every 1 ms); the
//! harness's pick-up is the time from appending it until the agent read its `session/prompt`
//! (the wire log's wall clock). After each follow-up the run pauses 50 ms, so a receipt write
//! of the up side has landed before the other side is timed. Every timed follow-up must have
//! been served hot (no `session/new`, `session/load` or `session/resume` on the wire), or the
//! run is an error.
//!
//! ```sh
//! store-outage-latency --harness target/patched/buzz-acp --agent target/debug/acp-test-agent
//! ```

use std::path::Path;
use std::time::{Duration, Instant};

use buzz_acp::relay::Event;
use buzz_acp::testing::{Running, Scenario, wait_until_every};
use buzz_bench::{
    BenchError, Binaries, Subject, WAIT, ctx, median, ms, quantile, reply, scenario,
    session_setups, start, store_scope, unix_ms, wait_delivered, wire,
};
use clap::Parser;
use pg_fixture::{Options, PgServer};

#[derive(Debug, Parser)]
struct Args {
    #[command(flatten)]
    binaries: Binaries,
    /// Runs (fresh scenario and harness each).
    #[arg(long, default_value_t = 8)]
    runs: usize,
    /// Timed pairs per harness and comparison in a run.
    #[arg(long, default_value_t = 10)]
    follow_ups: usize,
}

/// How long the run waits for the harness's queued writes after a thaw: a write in flight when
/// the database froze first runs into its 10 s deadline, and replays back off up to 30 s.
const CATCH_UP: Duration = Duration::from_secs(120);

/// The pause after each follow-up (a receipt write to a server that answers takes a few
/// milliseconds).
const SETTLE: Duration = Duration::from_millis(50);

/// Untimed follow-ups before each timed block.
const WARM_UP: usize = 2;

/// One timed follow-up.
#[derive(Debug, Clone, Copy)]
struct Sample {
    /// From appending the follow-up to the relay until its reply was visible there.
    wall: Duration,
    /// From appending it until the agent read its `session/prompt` (wall clock in
    /// milliseconds, the wire log's clock): the harness's part before the agent works.
    pickup_ms: u64,
}

/// Every sample of a run or of the whole measurement.
#[derive(Debug, Default)]
struct Samples {
    /// Database up, alternating with `frozen` (the same harness).
    up: Vec<Sample>,
    /// Database frozen right before the follow-up, alternating with `up`.
    frozen: Vec<Sample>,
    /// Database up, alternating with `down` (another harness).
    up_beside_down: Vec<Sample>,
    /// Database frozen until the harness recorded the store as down.
    down: Vec<Sample>,
}

impl Samples {
    fn extend(&mut self, other: Samples) {
        self.up.extend(other.up);
        self.frozen.extend(other.frozen);
        self.up_beside_down.extend(other.up_beside_down);
        self.down.extend(other.down);
    }
}

/// One thread of one harness.
struct Thread<'a> {
    /// The scenario's temporary directory, deleted with the thread.
    _dir: tempfile::TempDir,
    s: Scenario,
    pg: &'a PgServer,
    root: Event,
    last: Event,
    asked: usize,
}

impl Thread<'_> {
    /// Posts one follow-up and waits for its reply.
    fn follow_up(&mut self) -> Result<Sample, BenchError> {
        self.asked += 1;
        let text = format!("step {}: what do we check next?", self.asked);
        let frames_before = wire(&self.s)?.len();
        let posted_ms = unix_ms();
        let t = Instant::now();
        let q = ctx(
            self.s.post_reply(&self.root, &self.last, &text),
            "posting a follow-up",
        )?;
        let answer = self
            .s
            .wait_for_reply_every(&q.id, WAIT, Duration::from_millis(1))
            .ok_or_else(|| BenchError(format!("no reply to {text:?} within {WAIT:?}")))?;
        let wall = t.elapsed();
        let frames = wire(&self.s)?;
        let after = &frames[frames_before..];
        let setups = session_setups(after).len();
        if setups > 0 {
            return Err(BenchError(format!(
                "follow-up {text:?} was not served hot ({setups} session setup requests)"
            )));
        }
        let prompt_ms = after
            .iter()
            .find(|f| f.method.as_deref() == Some("session/prompt"))
            .map(|f| f.ts_ms)
            .ok_or_else(|| BenchError(format!("no session/prompt for {text:?}")))?;
        self.last = answer;
        // Let the turn's own receipt write finish (with the store up) before anything else is
        // timed, so it does not compete with the next follow-up, whichever side that is.
        std::thread::sleep(SETTLE);
        Ok(Sample {
            wall,
            pickup_ms: prompt_ms.saturating_sub(posted_ms),
        })
    }

    /// Posts one follow-up with the database frozen from just before it is posted until it is
    /// answered.
    fn frozen_follow_up(&mut self) -> Result<Sample, BenchError> {
        ctx(self.pg.freeze(), "freezing the database")?;
        let sample = self.follow_up();
        ctx(self.pg.thaw(), "thawing the database")?;
        sample
    }

    /// [`WARM_UP`] untimed follow-ups.
    fn warm_up(&mut self) -> Result<(), BenchError> {
        for _ in 0..WARM_UP {
            self.follow_up()?;
        }
        Ok(())
    }

    /// One pair: a follow-up with the database up and one frozen (`frozen_first` decides which
    /// comes first).
    fn pair(&mut self, samples: &mut Samples, frozen_first: bool) -> Result<(), BenchError> {
        if frozen_first {
            samples.frozen.push(self.frozen_follow_up()?);
            samples.up.push(self.follow_up()?);
        } else {
            samples.up.push(self.follow_up()?);
            samples.frozen.push(self.frozen_follow_up()?);
        }
        Ok(())
    }

    /// Freezes the database and waits until the harness has recorded the store as down (after
    /// one follow-up, whose ledger commit is the write that runs into the deadline).
    fn freeze_until_down(&mut self) -> Result<(), BenchError> {
        let seen = self.s.observer_records("store_health").len();
        ctx(self.pg.freeze(), "freezing the database")?;
        let down = self.follow_up().and_then(|_| self.recorded_down(seen));
        if down.is_err() {
            ctx(self.pg.thaw(), "thawing the database")?;
        }
        down
    }

    /// Thaws the database and waits for the harness's queued writes.
    fn thaw(&mut self) -> Result<(), BenchError> {
        ctx(self.pg.thaw(), "thawing the database")?;
        self.caught_up()
    }

    /// Waits until the harness has recorded the store as unavailable (a write ran into its
    /// deadline) after its first `seen` health records.
    fn recorded_down(&self, seen: usize) -> Result<(), BenchError> {
        let down = || {
            let records = self.s.observer_records("store_health");
            records
                .iter()
                .skip(seen)
                .any(|r| r["up"] == false)
                .then_some(())
        };
        wait_until_every(CATCH_UP, Duration::from_millis(50), down).ok_or_else(|| {
            BenchError(format!(
                "the harness did not find the frozen store unavailable within {CATCH_UP:?}"
            ))
        })
    }

    /// Waits until the thread's receipt in the store records the last follow-up as delivered:
    /// every write the harness queued for it has landed.
    fn caught_up(&self) -> Result<(), BenchError> {
        let trigger = self
            .last
            .thread_refs()
            .reply
            .ok_or_else(|| BenchError("the last reply names no trigger".into()))?;
        wait_delivered(&self.pg.url(), &store_scope(&self.s)?, &trigger, CATCH_UP).map(|_| ())
    }
}

/// A fresh scenario and harness on `pg`, with a thread warmed up.
fn thread<'a>(
    pg: &'a PgServer,
    subject: &Subject,
    agent: &Path,
) -> Result<(Thread<'a>, Running), BenchError> {
    let (dir, mut s) = scenario()?;
    s.poll_ms = 2;
    let url = pg.url();
    let running = start(&s, subject, agent, &["--session-store-url", &url])?;
    let root = ctx(
        s.post_top("Plan the release of the storage service"),
        "posting the root",
    )?;
    let last = reply(&s, &root)?;
    let mut thread = Thread {
        _dir: dir,
        s,
        pg,
        root,
        last,
        asked: 0,
    };
    for _ in 0..3 {
        thread.follow_up()?;
    }
    thread.caught_up()?;
    Ok((thread, running))
}

/// How one run arranges its sides.
#[derive(Debug, Clone, Copy)]
struct Arrangement {
    /// Which harness's database is frozen past the deadline (0 or 1).
    down: usize,
    /// The frozen side goes first in every pair.
    frozen_first: bool,
}

/// One run: two fresh harnesses, both comparisons.
fn run(
    servers: &[PgServer; 2],
    subject: &Subject,
    agent: &Path,
    arrangement: Arrangement,
    n: usize,
) -> Result<Samples, BenchError> {
    let (first, first_running) = thread(&servers[0], subject, agent)?;
    let (second, second_running) = thread(&servers[1], subject, agent)?;
    let mut threads = [first, second];
    let mut samples = Samples::default();

    // Up vs just frozen, on both harnesses in turn, so both threads reach the second comparison
    // with as many turns behind them.
    for thread in &mut threads {
        thread.warm_up()?;
    }
    for _ in 0..n {
        for thread in &mut threads {
            thread.pair(&mut samples, arrangement.frozen_first)?;
        }
    }
    for thread in &threads {
        thread.caught_up()?;
    }

    // Up vs frozen past the deadline, across the harnesses.
    let [first, second] = &mut threads;
    let (up, down) = if arrangement.down == 1 {
        (first, second)
    } else {
        (second, first)
    };
    down.freeze_until_down()?;
    let timed = (|| -> Result<(), BenchError> {
        up.warm_up()?;
        down.warm_up()?;
        for _ in 0..n {
            if arrangement.frozen_first {
                samples.down.push(down.follow_up()?);
                samples.up_beside_down.push(up.follow_up()?);
            } else {
                samples.up_beside_down.push(up.follow_up()?);
                samples.down.push(down.follow_up()?);
            }
        }
        Ok(())
    })();
    down.thaw()?;
    timed?;
    ctx(first_running.stop(), "stopping buzz-acp")?;
    ctx(second_running.stop(), "stopping buzz-acp")?;
    Ok(samples)
}

/// One table row: `samples` against the median of `base`.
fn row(name: &str, samples: &[Sample], base: &[Sample]) {
    let walls = |samples: &[Sample]| samples.iter().map(|s| s.wall).collect::<Vec<_>>();
    let times = walls(samples);
    let lo = times.iter().min().copied().unwrap_or_default();
    let hi = times.iter().max().copied().unwrap_or_default();
    let m = median(times.clone());
    let base = median(walls(base));
    let mut pickups: Vec<u64> = samples.iter().map(|s| s.pickup_ms).collect();
    pickups.sort_unstable();
    println!(
        "| {name} | {} | {} | {} | {}–{} | {:.2}× | {} |",
        times.len(),
        ms(m),
        ms(quantile(times, 0.9)),
        ms(lo),
        ms(hi),
        m.as_secs_f64() / base.as_secs_f64().max(f64::EPSILON),
        pickups.get(pickups.len() / 2).copied().unwrap_or_default()
    );
}

fn main() -> Result<(), BenchError> {
    let args = Args::parse();
    let subject = Subject {
        label: "patched".into(),
        harness: args.binaries.harness,
    };
    let server = || {
        ctx(
            PgServer::start(Options::default()),
            "starting a PostgreSQL server",
        )
    };
    let servers = [server()?, server()?];
    let mut all = Samples::default();
    for i in 0..args.runs.max(1) {
        // Every combination of which harness goes down and which side goes first, in turn.
        let arrangement = Arrangement {
            down: i % 2,
            frozen_first: (i / 2) % 2 == 1,
        };
        all.extend(run(
            &servers,
            &subject,
            &args.binaries.agent,
            arrangement,
            args.follow_ups.max(1),
        )?);
    }
    println!(
        "| receipt store | hot follow-ups | median wall time (ms) | p90 (ms) | min–max (ms) | vs its up side (medians) | harness pick-up, median (ms) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    row(
        "up (the same harness, alternating with the next row)",
        &all.up,
        &all.up,
    );
    row("frozen just before it was posted", &all.frozen, &all.up);
    row(
        "up (another harness, alternating with the next row)",
        &all.up_beside_down,
        &all.up_beside_down,
    );
    row(
        "frozen past the 10 s call deadline (recorded down)",
        &all.down,
        &all.up_beside_down,
    );
    Ok(())
}
