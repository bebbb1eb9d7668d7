//! Turns that need their thread's receipt while the PostgreSQL store does not answer: the patched
//! harness on a private PostgreSQL server (crate `pg-fixture`), frozen with SIGSTOP of the
//! postmaster and its backends (connections are accepted and nothing answers, the worst kind of
//! outage for a client), as in `store-outage-latency`.
//!
//! `store-outage-latency` shows that a hot follow-up does not wait for the store. But a turn that
//! would continue or reopen the thread's session reads the thread's receipt first while the
//! harness believes the store answers (the receipt may name another session by now), and that
//! read waits at most `--session-store-wait-secs` (10 s by default); a harness that restarts
//! knows the thread's session only from its receipt. Two measurements, each a subcommand:
//!
//! * **`after-freeze`: the first follow-up after a freeze.** A long-running harness; its thread
//!   answered a root and two follow-ups (its session is live and resident). Before each timed
//!   pair of follow-ups the run waits until the thread's receipt in the store records the last
//!   follow-up as delivered (every write the harness queued has landed), then a quiet pause
//!   (`--quiet-ms`, 1 s). Then two follow-ups, the second posted 50 ms after the first's reply:
//!   with the database up, or with it frozen right before the first is posted and thawed once
//!   the second is answered. The two sides alternate on the same harness and thread, pair by
//!   pair, and runs take turns at which side goes first, so neither the thread's history nor
//!   the order favours a side. Rows: the first and the second follow-up of each side, each
//!   against the same follow-up of the up side (ratio of the medians; goal for the first
//!   follow-up after the freeze: at most 1.2×). Every follow-up is checked for how it was
//!   served: the up side and the second follow-up after the freeze must have been served hot
//!   (no `session/new`, `session/load` or `session/resume` on the wire) or the run is an error;
//!   the first follow-up after the freeze is reported as it was served (hot, or in a new
//!   session) and with the notices the harness posted about it.
//! * **`restart`: a restart during an outage.** A thread answered a root and one follow-up under
//!   one harness, and its receipt is in the store. The harness is stopped (SIGTERM, and the run
//!   waits for its exit), the database frozen, a harness started again on the same state, and a
//!   follow-up posted in the thread right away; the database is thawed D seconds after the
//!   follow-up was posted (`--outages`, default 5, 20, 60), whether or not it was answered by
//!   then, and the run waits until the store records the follow-up as delivered. A baseline row
//!   restarts with the database up (D = 0). For each D: the time from the mention to the reply
//!   (it includes the harness's start, the same on every row), how the turn was served —
//!   "restored" when its `session/prompt` went to the thread's stored session (reopened with
//!   `session/load` or `session/resume`), "new session" otherwise —, the reply's `turns=N` (the
//!   test agent counts the user turns its session holds: 3 for the stored session, 1 for a new
//!   one), whether the harness posted a notice about the follow-up (an agent event quoting it
//!   with a `q` tag), and which session the thread's receipt names once the store caught up.
//!   Every case is a fresh thread (its own scenario, relay and store scope) on one server; runs
//!   take turns at which D goes first.
//!
//! A follow-up is timed from appending it to the relay until its reply is visible there (the
//! harness polls the relay every 2 ms, the timer every 1 ms); the harness's pick-up is the time
//! until the agent read its `session/prompt` (the wire log's wall clock).
//!
//! ```sh
//! store-outage-reads --harness target/patched/buzz-acp --agent target/debug/acp-test-agent \
//!     after-freeze --runs 4 --pairs 3
//! store-outage-reads --harness target/patched/buzz-acp --agent target/debug/acp-test-agent \
//!     restart --runs 2 --outages 5,20,60
//! ```

use std::path::Path;
use std::time::{Duration, Instant};

use acp_test_agent::harness::WireFrame;
use buzz_acp::relay::Event;
use buzz_acp::testing::{Running, Scenario, reply_turns};
use buzz_bench::{
    BenchError, Binaries, Subject, ctx, median, ms, quantile, reply, scenario, session_setups,
    start, store_scope, unix_ms, wait_delivered, wire,
};
use buzz_session_store::StoreScope;
use clap::{Parser, Subcommand};
use pg_fixture::{Options, PgServer};

#[derive(Debug, Parser)]
struct Args {
    #[command(flatten)]
    binaries: Binaries,
    #[command(subcommand)]
    measure: Measure,
}

#[derive(Debug, Subcommand)]
enum Measure {
    /// The first and second follow-up after the database froze, against the same follow-ups
    /// with it up (one long-running harness per run).
    AfterFreeze {
        /// Runs (fresh scenario, harness and thread each).
        #[arg(long, default_value_t = 4)]
        runs: usize,
        /// Timed pairs per side in a run (each pair: a first and a second follow-up).
        #[arg(long, default_value_t = 3)]
        pairs: usize,
        /// The quiet pause after the thread's writes landed, before a pair (milliseconds).
        #[arg(long, default_value_t = 1000)]
        quiet_ms: u64,
    },
    /// A restart with the database frozen, thawed D seconds after the follow-up was posted, and
    /// a restart with it up (D = 0).
    Restart {
        /// Runs (each D once per run, every case a fresh thread).
        #[arg(long, default_value_t = 2)]
        runs: usize,
        /// The outages D, in seconds, comma-separated.
        #[arg(long, value_delimiter = ',', default_values_t = [5, 20, 60])]
        outages: Vec<u64>,
    },
}

/// How long a follow-up may take (a receipt read waits at most 10 s by default; a restarted
/// harness may wait for the store longer).
const REPLY_WAIT: Duration = Duration::from_secs(120);

/// How long the run waits for the harness's queued writes after a thaw: a write in flight when
/// the database froze first runs into its 10 s deadline, and replays back off up to 30 s.
const CATCH_UP: Duration = Duration::from_secs(120);

/// The pause after each follow-up before the next one is posted (as in `store-outage-latency`).
const SETTLE: Duration = Duration::from_millis(50);

/// How often the run looks for a reply.
const POLL: Duration = Duration::from_millis(1);

/// One follow-up and how it was answered.
struct Answered {
    question: Event,
    answer: Event,
    /// From appending the follow-up to the relay until its reply was visible there.
    wall: Duration,
    /// From appending it until the agent read a `session/prompt` (wire log clock), if it did.
    pickup_ms: Option<u64>,
    /// Every wire frame since the index the caller gave.
    frames: Vec<WireFrame>,
}

impl Answered {
    /// The methods of the session setup requests among the frames, in order.
    fn setups(&self) -> Vec<String> {
        session_setups(&self.frames)
            .iter()
            .filter_map(|f| f.method.clone())
            .collect()
    }

    /// The sessions the agent was prompted in.
    fn prompted_sessions(&self) -> Vec<String> {
        self.frames
            .iter()
            .filter(|f| f.method.as_deref() == Some("session/prompt"))
            .filter_map(|f| f.params["sessionId"].as_str().map(str::to_string))
            .collect()
    }
}

/// Posts a follow-up in `root`'s thread (to `parent`) and waits at most `limit` for its reply,
/// calling `tick` with the time since posting between polls. `since` is the wire log index from
/// which frames count as the follow-up's.
fn ask(
    s: &mut Scenario,
    root: &Event,
    parent: &Event,
    text: &str,
    since: usize,
    limit: Duration,
    mut tick: impl FnMut(Duration) -> Result<(), BenchError>,
) -> Result<Answered, BenchError> {
    let posted_ms = unix_ms();
    let t = Instant::now();
    let question = ctx(s.post_reply(root, parent, text), "posting a follow-up")?;
    let answer = loop {
        if let Some(answer) = s.reply_to(&question.id) {
            break answer;
        }
        let elapsed = t.elapsed();
        if elapsed >= limit {
            return Err(BenchError(format!("no reply to {text:?} within {limit:?}")));
        }
        tick(elapsed)?;
        std::thread::sleep(POLL);
    };
    let wall = t.elapsed();
    let frames: Vec<WireFrame> = wire(s)?.into_iter().skip(since).collect();
    let pickup_ms = frames
        .iter()
        .find(|f| f.method.as_deref() == Some("session/prompt"))
        .map(|f| f.ts_ms.saturating_sub(posted_ms));
    Ok(Answered {
        question,
        answer,
        wall,
        pickup_ms,
        frames,
    })
}

/// How many events the harness posted about `event_id`: notices quote the event with a `q` tag
/// and are never its answer.
fn notices_about(s: &Scenario, event_id: &str) -> usize {
    s.replies()
        .iter()
        .filter(|e| e.tag_values("q").any(|q| q == event_id))
        .count()
}

/// The database frozen until [`Frozen::thaw`], or until dropped (on an error).
struct Frozen<'a> {
    pg: &'a PgServer,
    frozen: bool,
}

impl<'a> Frozen<'a> {
    fn freeze(pg: &'a PgServer) -> Result<Self, BenchError> {
        ctx(pg.freeze(), "freezing the database")?;
        Ok(Frozen { pg, frozen: true })
    }

    fn thaw(&mut self) -> Result<(), BenchError> {
        if self.frozen {
            self.frozen = false;
            ctx(self.pg.thaw(), "thawing the database")?;
        }
        Ok(())
    }
}

impl Drop for Frozen<'_> {
    fn drop(&mut self) {
        if self.frozen {
            let _ = self.pg.thaw();
        }
    }
}

/// Counts of labels, in order of first appearance: "new session ×2, restored ×1".
fn tally<'a>(labels: impl IntoIterator<Item = &'a str>) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for label in labels {
        match counts.iter_mut().find(|(l, _)| *l == label) {
            Some((_, n)) => *n += 1,
            None => counts.push((label, 1)),
        }
    }
    counts
        .iter()
        .map(|(l, n)| format!("{l} ×{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

// ----- after-freeze ---------------------------------------------------------------------------

/// One timed follow-up of the after-freeze measurement.
#[derive(Debug, Clone)]
struct Sample {
    wall: Duration,
    pickup_ms: u64,
    /// Session setup requests on the wire for it (none: served hot).
    setups: Vec<String>,
    /// The follow-up's id (its notices are counted at the end of the run).
    question: String,
    /// Notices the harness posted about it.
    notices: usize,
}

/// Every sample of the after-freeze measurement.
#[derive(Debug, Default)]
struct AfterFreeze {
    up_first: Vec<Sample>,
    up_second: Vec<Sample>,
    frozen_first: Vec<Sample>,
    frozen_second: Vec<Sample>,
}

impl AfterFreeze {
    fn extend(&mut self, other: AfterFreeze) {
        self.up_first.extend(other.up_first);
        self.up_second.extend(other.up_second);
        self.frozen_first.extend(other.frozen_first);
        self.frozen_second.extend(other.frozen_second);
    }

    fn all_mut(&mut self) -> impl Iterator<Item = &mut Sample> {
        self.up_first
            .iter_mut()
            .chain(&mut self.up_second)
            .chain(&mut self.frozen_first)
            .chain(&mut self.frozen_second)
    }
}

/// One long-running harness's thread.
struct Thread<'a> {
    /// The scenario's temporary directory, deleted with the thread.
    _dir: tempfile::TempDir,
    s: Scenario,
    pg: &'a PgServer,
    scope: StoreScope,
    root: Event,
    last: Event,
    asked: usize,
}

impl<'a> Thread<'a> {
    /// A fresh scenario and harness on `pg`; the thread answered a root and two follow-ups.
    fn start(
        pg: &'a PgServer,
        subject: &Subject,
        agent: &Path,
    ) -> Result<(Self, Running), BenchError> {
        let (dir, mut s) = scenario()?;
        s.poll_ms = 2;
        let url = pg.url();
        let scope = store_scope(&s)?;
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
            scope,
            root,
            last,
            asked: 0,
        };
        for _ in 0..2 {
            thread.follow_up()?;
        }
        Ok((thread, running))
    }

    /// Posts one follow-up, waits for its reply, then pauses [`SETTLE`].
    fn follow_up(&mut self) -> Result<Sample, BenchError> {
        self.asked += 1;
        let text = format!("step {}: what do we check next?", self.asked);
        let since = wire(&self.s)?.len();
        let answered = ask(
            &mut self.s,
            &self.root,
            &self.last,
            &text,
            since,
            REPLY_WAIT,
            |_| Ok(()),
        )?;
        let sample = Sample {
            wall: answered.wall,
            pickup_ms: answered
                .pickup_ms
                .ok_or_else(|| BenchError(format!("no session/prompt for {text:?}")))?,
            setups: answered.setups(),
            question: answered.question.id.clone(),
            notices: 0,
        };
        self.last = answered.answer;
        std::thread::sleep(SETTLE);
        Ok(sample)
    }

    /// Waits until the thread's receipt records the last follow-up as delivered, then `quiet`.
    fn settle(&self, quiet: Duration) -> Result<(), BenchError> {
        let trigger = self
            .last
            .thread_refs()
            .reply
            .ok_or_else(|| BenchError("the last reply names no trigger".into()))?;
        wait_delivered(&self.pg.url(), &self.scope, &trigger, CATCH_UP)?;
        std::thread::sleep(quiet);
        Ok(())
    }

    /// A first and a second follow-up with the database up.
    fn up_pair(&mut self, samples: &mut AfterFreeze) -> Result<(), BenchError> {
        let first = hot(self.follow_up()?, "the first follow-up with the store up")?;
        let second = hot(self.follow_up()?, "the second follow-up with the store up")?;
        samples.up_first.push(first);
        samples.up_second.push(second);
        Ok(())
    }

    /// A first and a second follow-up with the database frozen right before the first is posted
    /// until the second is answered. The first is reported however it was served.
    fn frozen_pair(&mut self, samples: &mut AfterFreeze) -> Result<(), BenchError> {
        let mut frozen = Frozen::freeze(self.pg)?;
        let first = self.follow_up()?;
        let second = hot(
            self.follow_up()?,
            "the second follow-up after the database froze",
        )?;
        frozen.thaw()?;
        samples.frozen_first.push(first);
        samples.frozen_second.push(second);
        Ok(())
    }
}

/// `sample`, if it was served hot; an error naming `what` otherwise.
fn hot(sample: Sample, what: &str) -> Result<Sample, BenchError> {
    if sample.setups.is_empty() {
        Ok(sample)
    } else {
        Err(BenchError(format!(
            "{what} was not served hot: {}",
            sample.setups.join(", ")
        )))
    }
}

/// One after-freeze run: a fresh harness and thread, `pairs` pairs per side.
fn after_freeze_run(
    pg: &PgServer,
    subject: &Subject,
    agent: &Path,
    run: usize,
    pairs: usize,
    quiet: Duration,
) -> Result<AfterFreeze, BenchError> {
    let (mut thread, running) = Thread::start(pg, subject, agent)?;
    let mut samples = AfterFreeze::default();
    for i in 0..pairs {
        let frozen_first = (run + i) % 2 == 1;
        for frozen in [frozen_first, !frozen_first] {
            thread.settle(quiet)?;
            if frozen {
                thread.frozen_pair(&mut samples)?;
            } else {
                thread.up_pair(&mut samples)?;
            }
        }
    }
    thread.settle(Duration::ZERO)?;
    for sample in samples.all_mut() {
        sample.notices = notices_about(&thread.s, &sample.question);
    }
    ctx(running.stop(), "stopping buzz-acp")?;
    Ok(samples)
}

/// One row of the after-freeze table: `samples` against the median of `base`.
fn after_freeze_row(store: &str, which: &str, samples: &[Sample], base: &[Sample]) {
    let walls = |samples: &[Sample]| samples.iter().map(|s| s.wall).collect::<Vec<_>>();
    let times = walls(samples);
    let lo = times.iter().min().copied().unwrap_or_default();
    let hi = times.iter().max().copied().unwrap_or_default();
    let m = median(times.clone());
    let base = median(walls(base));
    let mut pickups: Vec<u64> = samples.iter().map(|s| s.pickup_ms).collect();
    pickups.sort_unstable();
    let hot = samples.iter().filter(|s| s.setups.is_empty()).count();
    let not_hot: Vec<String> = samples
        .iter()
        .filter(|s| !s.setups.is_empty())
        .map(|s| s.setups.join(" + "))
        .collect();
    let served = if not_hot.is_empty() {
        format!("hot {hot}/{}", samples.len())
    } else {
        format!(
            "hot {hot}/{}; {}",
            samples.len(),
            tally(not_hot.iter().map(String::as_str))
        )
    };
    let notices: usize = samples.iter().map(|s| s.notices).sum();
    println!(
        "| {store} | {which} | {} | {} | {} | {}–{} | {:.2}× | {} | {served} | {notices} |",
        times.len(),
        ms(m),
        ms(quantile(times, 0.9)),
        ms(lo),
        ms(hi),
        m.as_secs_f64() / base.as_secs_f64().max(f64::EPSILON),
        pickups.get(pickups.len() / 2).copied().unwrap_or_default(),
    );
}

fn after_freeze(
    pg: &PgServer,
    subject: &Subject,
    agent: &Path,
    runs: usize,
    pairs: usize,
    quiet: Duration,
) -> Result<(), BenchError> {
    let mut all = AfterFreeze::default();
    for run in 0..runs {
        all.extend(after_freeze_run(pg, subject, agent, run, pairs, quiet)?);
    }
    println!(
        "| receipt store | follow-up | n | median wall time (ms) | p90 (ms) | min–max (ms) | vs the same follow-up, store up (medians) | harness pick-up, median (ms) | served | notices |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---|---:|");
    let quiet_ms = quiet.as_millis();
    after_freeze_row(
        "up",
        &format!("first after a {quiet_ms} ms quiet pause"),
        &all.up_first,
        &all.up_first,
    );
    after_freeze_row(
        "frozen right before it",
        &format!("first after a {quiet_ms} ms quiet pause"),
        &all.frozen_first,
        &all.up_first,
    );
    after_freeze_row(
        "up",
        "second (50 ms after the first's reply)",
        &all.up_second,
        &all.up_second,
    );
    after_freeze_row(
        "still frozen",
        "second (50 ms after the first's reply)",
        &all.frozen_second,
        &all.up_second,
    );
    Ok(())
}

// ----- restart --------------------------------------------------------------------------------

/// One restart case.
#[derive(Debug)]
struct Restarted {
    /// From appending the follow-up until its reply was visible.
    wall: Duration,
    /// "restored" or "new session", with the setup requests.
    served: String,
    /// The reply's `turns=N`.
    turns: Option<u32>,
    /// Notices the harness posted about the follow-up.
    notices: usize,
    /// Which session the thread's receipt names once the store caught up.
    stored: &'static str,
}

/// A thread answered under one harness; the harness stopped, the database frozen (for `outage`,
/// counted from the follow-up's posting; up for `None`), a harness started again and a
/// follow-up posted.
fn restart_case(
    pg: &PgServer,
    subject: &Subject,
    agent: &Path,
    outage: Option<Duration>,
) -> Result<Restarted, BenchError> {
    let (_dir, mut s) = scenario()?;
    s.poll_ms = 2;
    let url = pg.url();
    let scope = store_scope(&s)?;
    let store_args = ["--session-store-url", url.as_str()];

    let first = start(&s, subject, agent, &store_args)?;
    let root = ctx(
        s.post_top("Plan the release of the storage service"),
        "posting the root",
    )?;
    let r1 = reply(&s, &root)?;
    let q1 = ctx(
        s.post_reply(&root, &r1, "step 1: what do we check first?"),
        "posting a follow-up",
    )?;
    let r2 = reply(&s, &q1)?;
    let session = wait_delivered(&url, &scope, &q1.id, CATCH_UP)?
        .record
        .session_id;
    ctx(first.stop(), "stopping buzz-acp")?;

    let mut frozen = match outage {
        Some(_) => Some(Frozen::freeze(pg)?),
        None => None,
    };
    let since = wire(&s)?.len();
    let second = start(&s, subject, agent, &store_args)?;
    let mut thaw_due = |elapsed: Duration| -> Result<(), BenchError> {
        match (&mut frozen, outage) {
            (Some(f), Some(d)) if elapsed >= d => f.thaw(),
            _ => Ok(()),
        }
    };
    let limit = outage.unwrap_or_default() + REPLY_WAIT;
    let answered = ask(
        &mut s,
        &root,
        &r2,
        "step 2: where were we?",
        since,
        limit,
        &mut thaw_due,
    )?;
    // Answered before the thaw: the outage still lasts its D.
    if let Some(d) = outage {
        std::thread::sleep(d.saturating_sub(answered.wall));
        thaw_due(d)?;
    }
    let stored = wait_delivered(&url, &scope, &answered.question.id, CATCH_UP)?
        .record
        .session_id;
    let notices = notices_about(&s, &answered.question.id);
    ctx(second.stop(), "stopping buzz-acp")?;

    let restored = answered.prompted_sessions().contains(&session);
    let setups = answered.setups();
    let how = if restored { "restored" } else { "new session" };
    let served = if setups.is_empty() {
        how.to_string()
    } else {
        format!("{how} ({})", setups.join(" + "))
    };
    Ok(Restarted {
        wall: answered.wall,
        served,
        turns: reply_turns(&answered.answer),
        notices,
        stored: if stored == session {
            "the thread's session"
        } else {
            "another session"
        },
    })
}

fn restart(
    pg: &PgServer,
    subject: &Subject,
    agent: &Path,
    runs: usize,
    outages: &[u64],
) -> Result<(), BenchError> {
    let mut cases: Vec<u64> = vec![0];
    cases.extend(outages.iter().copied().filter(|d| *d > 0));
    let mut results: Vec<Vec<Restarted>> = cases.iter().map(|_| Vec::new()).collect();
    for run in 0..runs {
        for k in 0..cases.len() {
            let i = (run + k) % cases.len();
            let outage = (cases[i] > 0).then(|| Duration::from_secs(cases[i]));
            results[i].push(restart_case(pg, subject, agent, outage)?);
        }
    }
    println!(
        "| database during the restart | runs | mention → reply, median (ms) | min–max (ms) | served | reply's turns=N | notices about the follow-up | receipt after the thaw names |"
    );
    println!("|---|---:|---:|---:|---|---|---|---|");
    for (d, results) in cases.iter().zip(&results) {
        let times: Vec<Duration> = results.iter().map(|r| r.wall).collect();
        let lo = times.iter().min().copied().unwrap_or_default();
        let hi = times.iter().max().copied().unwrap_or_default();
        let name = if *d == 0 {
            "up (D = 0)".to_string()
        } else {
            format!("frozen, thawed {d} s after the mention")
        };
        let turns: Vec<String> = results
            .iter()
            .map(|r| r.turns.map_or("?".into(), |t| t.to_string()))
            .collect();
        println!(
            "| {name} | {} | {} | {}–{} | {} | {} | {} | {} |",
            results.len(),
            ms(median(times)),
            ms(lo),
            ms(hi),
            tally(results.iter().map(|r| r.served.as_str())),
            turns.join(", "),
            results
                .iter()
                .map(|r| r.notices.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            tally(results.iter().map(|r| r.stored)),
        );
    }
    Ok(())
}

fn main() -> Result<(), BenchError> {
    let args = Args::parse();
    let subject = Subject {
        label: "patched".into(),
        harness: args.binaries.harness,
    };
    let pg = ctx(
        PgServer::start(Options::default()),
        "starting a PostgreSQL server",
    )?;
    match args.measure {
        Measure::AfterFreeze {
            runs,
            pairs,
            quiet_ms,
        } => after_freeze(
            &pg,
            &subject,
            &args.binaries.agent,
            runs.max(1),
            pairs.max(1),
            Duration::from_millis(quiet_ms),
        ),
        Measure::Restart { runs, outages } => {
            restart(&pg, &subject, &args.binaries.agent, runs.max(1), &outages)
        }
    }
}
