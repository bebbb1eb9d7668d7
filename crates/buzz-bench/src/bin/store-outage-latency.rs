//! What a store outage costs a hot follow-up: the patched harness on a private PostgreSQL
//! server (crate `pg-fixture`), hot follow-ups timed while the database answers and while it is
//! frozen (SIGSTOP of the postmaster and its backends: connections are accepted and nothing
//! answers, the worst kind of outage for a client), side by side in one run.
//!
//! Every store call of the patched harness runs off its event loop, so a follow-up that continues
//! its live session should not notice the outage at all; the goal is a frozen/up ratio of the
//! medians of at most 1.2×.
//!
//! Each run is a fresh scenario and harness process: a thread's root and three follow-ups warm it
//! up (their receipt and ledger commits reach the store), then `--follow-ups` hot follow-ups are
//! timed in each of three states: the database up; just frozen (the first follow-up's ledger
//! commit is stuck in flight, the next ones queue behind it); and frozen for longer than a store
//! call's 10 s deadline (the run waits until the harness has recorded the store as down, so its
//! writes have failed and are waiting for their replay). Even runs time the up block first, odd
//! runs the frozen blocks first, so a drift over the run (a longer transcript, a busier machine)
//! falls on every state alike; after the frozen blocks the database thaws and the run waits until
//! the harness's queued writes have reached the store before it times anything with the store up. A follow-up is timed from appending it to the relay until its
//! reply is visible there (the harness polls the relay every 2 ms, the timer every 1 ms). Every
//! timed follow-up must have been served hot (no `session/new`, `session/load` or
//! `session/resume` on the wire), or the run is an error.
//!
//! ```sh
//! store-outage-latency --harness target/patched/buzz-acp --agent target/debug/acp-test-agent
//! ```

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use buzz_acp::relay::Event;
use buzz_acp::testing::{AGENT, Scenario, wait_until_every};
use buzz_bench::{BenchError, Subject, WAIT, ctx, median, ms, reply, scenario, start, wire};
use buzz_session_store::{KeyScheme, PgStore, ReceiptStore, StoreScope};
use clap::Parser;
use pg_fixture::{Options, PgServer};

#[derive(Debug, Parser)]
struct Args {
    /// The patched buzz-acp binary.
    #[arg(long)]
    harness: PathBuf,
    /// The acp-test-agent binary.
    #[arg(long)]
    agent: PathBuf,
    /// Runs (fresh scenario and harness each).
    #[arg(long, default_value_t = 6)]
    runs: usize,
    /// Timed follow-ups per state and run.
    #[arg(long, default_value_t = 10)]
    follow_ups: usize,
}

/// The state of the database while a block is timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Store {
    /// Answering.
    Up,
    /// Frozen a moment ago: a write may be stuck in flight.
    Frozen,
    /// Frozen, and the harness has seen its writes fail (it recorded the store as down).
    Down,
}

/// Follow-up times per state.
#[derive(Debug, Default)]
struct Times {
    up: Vec<Duration>,
    frozen: Vec<Duration>,
    down: Vec<Duration>,
}

impl Times {
    fn of(&mut self, store: Store) -> &mut Vec<Duration> {
        match store {
            Store::Up => &mut self.up,
            Store::Frozen => &mut self.frozen,
            Store::Down => &mut self.down,
        }
    }
}

/// How long the run waits for the harness's queued writes after a thaw: a write in flight when
/// the database froze first runs into its 10 s deadline, and replays back off up to 30 s.
const CATCH_UP: Duration = Duration::from_secs(120);

/// One thread of one harness, with the follow-ups timed so far.
struct Thread<'a> {
    s: Scenario,
    url: &'a str,
    root: Event,
    last: Event,
    asked: usize,
    times: Times,
}

impl Thread<'_> {
    /// Posts one follow-up and waits for its reply; returns how long that took.
    fn follow_up(&mut self) -> Result<Duration, BenchError> {
        self.asked += 1;
        let text = format!("step {}: what do we check next?", self.asked);
        let frames_before = wire(&self.s)?.len();
        let t = Instant::now();
        let q = ctx(
            self.s.post_reply(&self.root, &self.last, &text),
            "posting a follow-up",
        )?;
        let answer = self
            .s
            .wait_for_reply_every(&q.id, WAIT, Duration::from_millis(1))
            .ok_or_else(|| BenchError(format!("no reply to {text:?} within {WAIT:?}")))?;
        let elapsed = t.elapsed();
        let frames = wire(&self.s)?;
        let setups = frames[frames_before..]
            .iter()
            .filter_map(|f| f.method.as_deref())
            .filter(|m| matches!(*m, "session/new" | "session/load" | "session/resume"))
            .count();
        if setups > 0 {
            return Err(BenchError(format!(
                "follow-up {text:?} was not served hot ({setups} session setup requests)"
            )));
        }
        self.last = answer;
        Ok(elapsed)
    }

    /// Times `n` follow-ups with the database in `store`.
    fn block(&mut self, store: Store, n: usize) -> Result<(), BenchError> {
        for _ in 0..n {
            let elapsed = self.follow_up()?;
            self.times.of(store).push(elapsed);
        }
        Ok(())
    }

    /// Waits until the harness has recorded the store as unavailable (a write ran into its
    /// deadline).
    fn store_down(&self) -> Result<(), BenchError> {
        let down = || {
            self.s
                .observer_records("store_health")
                .iter()
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
        let scope = StoreScope {
            relay: relay_identity(&self.s)?,
            agent_pubkey: AGENT.to_string(),
        };
        let trigger = self
            .last
            .thread_refs()
            .reply
            .ok_or_else(|| BenchError("the last reply names no trigger".into()))?;
        let landed = || -> Option<()> {
            let store = PgStore::open_read_only(self.url, scope.clone(), KeyScheme::Scope).ok()?;
            let receipts = store.receipts().ok()?;
            receipts
                .iter()
                .filter_map(|r| r.record.delivery.as_ref())
                .any(|d| d.delivered_event_ids.contains(&trigger))
                .then_some(())
        };
        wait_until_every(CATCH_UP, Duration::from_millis(100), landed).ok_or_else(|| {
            BenchError(format!(
                "the harness's writes did not reach the store within {CATCH_UP:?} after the thaw"
            ))
        })
    }
}

fn relay_identity(s: &Scenario) -> Result<String, BenchError> {
    let relay = ctx(
        buzz_acp::relay::FileRelay::open(&s.relay_dir),
        "opening the relay",
    )?;
    Ok(buzz_acp::relay::Relay::identity(&relay).to_string())
}

/// One run: a fresh scenario and harness, both blocks in the given order.
fn run(
    pg: &PgServer,
    subject: &Subject,
    agent: &Path,
    up_first: bool,
    follow_ups: usize,
) -> Result<Times, BenchError> {
    let (_dir, mut s) = scenario()?;
    s.poll_ms = 2;
    let url = pg.url();
    let running = start(&s, subject, agent, &["--session-store-url", &url])?;
    let root = ctx(
        s.post_top("Plan the release of the storage service"),
        "posting the root",
    )?;
    let last = reply(&s, &root)?;
    let mut thread = Thread {
        s,
        url: &url,
        root,
        last,
        asked: 0,
        times: Times::default(),
    };
    for _ in 0..3 {
        thread.follow_up()?;
    }
    thread.caught_up()?;
    if up_first {
        thread.block(Store::Up, follow_ups)?;
    }
    ctx(pg.freeze(), "freezing the database")?;
    let timed = thread
        .block(Store::Frozen, follow_ups)
        .and_then(|()| thread.store_down())
        .and_then(|()| thread.block(Store::Down, follow_ups));
    ctx(pg.thaw(), "thawing the database")?;
    timed?;
    thread.caught_up()?;
    if !up_first {
        thread.block(Store::Up, follow_ups)?;
    }
    ctx(running.stop(), "stopping buzz-acp")?;
    Ok(thread.times)
}

fn quantile(mut v: Vec<Duration>, q: f64) -> Duration {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    v.get(i).copied().unwrap_or_default()
}

fn main() -> Result<(), BenchError> {
    let args = Args::parse();
    let subject = Subject {
        label: "patched".into(),
        harness: args.harness,
    };
    let pg = ctx(
        PgServer::start(Options::default()),
        "starting a PostgreSQL server",
    )?;
    let mut all = Times::default();
    for i in 0..args.runs.max(1) {
        let times = run(
            &pg,
            &subject,
            &args.agent,
            i % 2 == 0,
            args.follow_ups.max(1),
        )?;
        all.up.extend(times.up);
        all.frozen.extend(times.frozen);
        all.down.extend(times.down);
    }
    println!(
        "| receipt store | hot follow-ups | median wall time (ms) | p90 (ms) | min–max (ms) | vs up (medians) |"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    let up_median = median(all.up.clone());
    for (name, times) in [
        ("up (PostgreSQL answering)", all.up),
        ("frozen, a write stuck in flight", all.frozen),
        (
            "frozen past the 10 s call deadline (recorded down)",
            all.down,
        ),
    ] {
        let lo = times.iter().min().copied().unwrap_or_default();
        let hi = times.iter().max().copied().unwrap_or_default();
        let m = median(times.clone());
        println!(
            "| {name} | {} | {} | {} | {}–{} | {:.2}× |",
            times.len(),
            ms(m),
            ms(quantile(times, 0.9)),
            ms(lo),
            ms(hi),
            m.as_secs_f64() / up_median.as_secs_f64().max(f64::EPSILON)
        );
    }
    Ok(())
}
