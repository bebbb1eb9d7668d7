//! What answering the mentions posted while no harness listened costs (patch
//! `mentions-while-away`): the patched harness catching up after a stop, against the same mentions
//! arriving live on the patched harness and on the baseline, in one run.
//!
//! For each size N the mentions are spread over N/10 threads: each thread is a root mention by the
//! owner (the harness's `--agent-owner`) and nine replies in it mentioning the agent. Every
//! measurement runs in a fresh test relay (in this process) and a fresh state directory:
//!
//! * **catch-up** (patched): the harness starts, answers one mention (which records its
//!   watermark; the bench waits until the receipt store holds it) and is stopped with SIGTERM. The
//!   N mentions are posted while it is stopped; once the wall clock's second has changed (Nostr
//!   dates events to the second, and the live subscription starts at the harness's start) it is
//!   started again. Timed from that start: until it says it is subscribed, until the first of the
//!   N is answered, until every one of them is. Then, as a control, the baseline starts on the
//!   same relay (the same channel history, a state directory of its own) and is timed until it
//!   is subscribed: both builds read the channel's last 500 events as they subscribe, and the
//!   patched one checks each one's id and signature.
//! * **live** (patched, baseline): the harness starts and subscribes, then the same N mentions
//!   are posted; timed from the first post until every one is answered.
//!
//! "Answered": an event the agent published names the mention in an `e` tag marked `reply`, or
//! `mention` when one answer served several (`Event::answered_ids`). An observer subscribed to
//! the agent's chat events over its own websocket timestamps each answer as it arrives. After
//! the last one (and a second's pause) the harness is stopped and the relay read back over
//! `POST /query`: the table reports mentions answered more than once and mentions never answered,
//! summed over the runs. A wait ends when every mention is answered or after 30 s without a new
//! answer; a run that left some unanswered reports the time to its last answer, and the ratios
//! built on it are marked. The builds' order alternates between runs.
//!
//! ```sh
//! catch-up-cost --baseline target/debug/buzz-acp --patched target/patched/buzz-acp \
//!     --agent target/debug/acp-test-agent --sizes 10,100,1000 --runs 3
//! ```

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use buzz_acp::relay::Event;
use buzz_acp::testing::{Scenario, agent_messages};
use buzz_bench::observer::{harness_on_relay, post_mention, relay_with_agent, subscribe_to_agent};
use buzz_bench::{BenchError, ctx, median, ms, scenario, wait_subscribed};
use buzz_session_store::{KeyScheme, ReceiptStore, SqliteStore, StoreScope};
use buzz_test_relay::TestRelay;
use clap::Parser;
use futures::StreamExt as _;
use nostr::{JsonUtil as _, Keys, RelayMessage};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

const CHANNEL: &str = "0b8e2d4c-1f3a-4c5e-9d7b-2a6f8e1c3b5d";
/// Mentions per thread: the root and nine replies.
const PER_THREAD: usize = 10;
/// How long to wait for the harness to subscribe, for the seeding answer, for the watermark.
const WAIT: Duration = Duration::from_secs(30);
/// A wait for answers gives up after this long without a new one.
const STALL: Duration = Duration::from_secs(30);
/// Without an answer on the observer for this long, the relay is read back over REST (an answer
/// the observer's subscription did not carry still counts, at the time it was found).
const QUIET: Duration = Duration::from_secs(2);

#[derive(Debug, Parser)]
struct Args {
    /// The baseline buzz-acp binary.
    #[arg(long)]
    baseline: PathBuf,
    /// The patched buzz-acp binary.
    #[arg(long)]
    patched: PathBuf,
    /// The acp-test-agent binary.
    #[arg(long)]
    agent: PathBuf,
    /// How many mentions, comma-separated (ten per thread).
    #[arg(long, value_delimiter = ',', default_value = "10,100,1000")]
    sizes: Vec<usize>,
    /// Repetitions per size and build.
    #[arg(long, default_value_t = 3)]
    runs: usize,
}

/// A relay where the agent belongs to [`CHANNEL`], the agent's and owner's keys, and a state
/// directory for the harness.
struct World {
    relay: TestRelay,
    agent: Keys,
    owner: Keys,
    s: Scenario,
    starts: usize,
    _dir: tempfile::TempDir,
}

impl World {
    async fn new() -> Result<Self, BenchError> {
        let (relay, agent, owner) = relay_with_agent(CHANNEL).await?;
        let (dir, mut s) = scenario()?;
        // Poll the event queue often, as relay-latency does, so polling does not drown what is
        // measured.
        s.poll_ms = 2;
        Ok(World {
            relay,
            agent,
            owner,
            s,
            starts: 0,
            _dir: dir,
        })
    }

    /// Starts `harness` on the relay as the agent (its stderr in `harness-N.log`); not waiting.
    fn start(&mut self, harness: &Path, agent_bin: &Path) -> Result<Harness, BenchError> {
        self.starts += 1;
        let log = self.s.root.join(format!("harness-{}.log", self.starts));
        let mut cmd = harness_on_relay(
            &self.s,
            harness,
            agent_bin,
            &self.relay,
            &self.agent,
            &self.owner,
            &log,
        )?;
        let started = Instant::now();
        let child = ctx(cmd.spawn(), "starting buzz-acp")?;
        Ok(Harness {
            child: Some(child),
            log,
            started,
        })
    }

    /// The owner's mention of the agent, `thread` = (root, parent).
    async fn mention(
        &self,
        text: &str,
        thread: Option<(&str, &str)>,
    ) -> Result<nostr::Event, BenchError> {
        post_mention(&self.relay, &self.owner, &self.agent, CHANNEL, text, thread).await
    }

    /// Posts `n` mentions, [`PER_THREAD`] per thread (a root, then replies each answering the
    /// one before): their ids, when the first post began and how long posting took.
    async fn post_threads(&self, n: usize) -> Result<(Vec<String>, Instant, Duration), BenchError> {
        let mut ids = Vec::with_capacity(n);
        let began = Instant::now();
        let mut thread = 0;
        while ids.len() < n {
            thread += 1;
            let root = self
                .mention(&format!("thread {thread}: plan step 1"), None)
                .await?;
            let root_id = root.id.to_hex();
            ids.push(root_id.clone());
            let mut parent = root_id.clone();
            for step in 2..=PER_THREAD {
                if ids.len() >= n {
                    break;
                }
                let text = format!("thread {thread}: and step {step}?");
                let reply = self.mention(&text, Some((&root_id, &parent))).await?;
                parent = reply.id.to_hex();
                ids.push(parent.clone());
            }
        }
        Ok((ids, began, began.elapsed()))
    }

    /// A new state directory (and agent files) for the next harness, on the same relay.
    fn fresh_state(&mut self) -> Result<(), BenchError> {
        let (dir, mut s) = scenario()?;
        s.poll_ms = self.s.poll_ms;
        self.s = s;
        self._dir = dir;
        Ok(())
    }

    /// The agent's chat events as the relay holds them.
    async fn published(&self) -> Result<Vec<Event>, BenchError> {
        ctx(
            agent_messages(&self.relay.ws_url(), &self.owner, self.agent.public_key()).await,
            "reading the agent's messages",
        )
    }

    /// The watermark the harness recorded in its receipt store, if any.
    fn watermark(&self) -> Option<u64> {
        let scope = StoreScope {
            relay: self.relay.ws_url().trim_end_matches('/').to_owned(),
            agent_pubkey: self.agent.public_key().to_hex(),
        };
        let path = self.s.state_dir.join("sessions.sqlite3");
        let store = SqliteStore::open_read_only(&path, scope, KeyScheme::Scope).ok()?;
        store.watermark().ok().flatten()
    }

    /// Waits until the receipt store holds a watermark of at least `at`.
    async fn wait_watermark(&self, at: u64) -> Result<u64, BenchError> {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(w) = self.watermark().filter(|w| *w >= at) {
                return Ok(w);
            }
            if Instant::now() > deadline {
                return Err(BenchError(format!(
                    "no watermark of at least {at} in the receipt store within {WAIT:?} (it holds {:?})",
                    self.watermark()
                )));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A running harness; killed when dropped.
struct Harness {
    child: Option<Child>,
    log: PathBuf,
    started: Instant,
}

impl Harness {
    /// SIGTERM, then waits for it to exit (SIGKILL after [`WAIT`]).
    async fn stop(mut self) -> Result<(), BenchError> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let term = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        if !term.is_ok_and(|s| s.success()) {
            let _ = child.kill();
        }
        let deadline = Instant::now() + WAIT;
        loop {
            if ctx(child.try_wait(), "waiting for buzz-acp")?.is_some() {
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(BenchError(format!(
                    "buzz-acp did not stop within {WAIT:?} of SIGTERM"
                )));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Whether it exited (then its log, for the error).
    fn exited(&mut self) -> Option<String> {
        let child = self.child.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => Some(format!(
                "buzz-acp exited ({status}):\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            )),
            _ => None,
        }
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The agent's chat events as they reach a websocket subscribed to them (NIP-42 authenticated as
/// the owner), each with the moment it arrived.
struct Observer {
    events: mpsc::UnboundedReceiver<(Instant, nostr::Event)>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Observer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Observer {
    /// Subscribes (from now on) and starts reading beside the caller.
    async fn subscribe(world: &World) -> Result<Self, BenchError> {
        let relay_url = world.relay.ws_url();
        let mut socket = subscribe_to_agent(&relay_url, &world.owner, &world.agent).await?;
        let (tx, events) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            while let Some(Ok(frame)) = socket.next().await {
                let Message::Text(text) = frame else { continue };
                if let Ok(RelayMessage::Event { event, .. }) =
                    RelayMessage::from_json(text.as_str())
                {
                    let _ = tx.send((Instant::now(), event.into_owned()));
                }
            }
        });
        Ok(Observer { events, task })
    }
}

/// When the mentions were answered, as far as the wait went.
#[derive(Debug, Default)]
struct Answered {
    /// When the first of them was answered.
    first: Option<Instant>,
    /// When the last of them was, if every one was.
    all: Option<Instant>,
    /// When the last answer to one of them came, however many were answered.
    last: Option<Instant>,
    /// Answers the observer did not carry, found on the relay over REST.
    missed_by_observer: usize,
}

/// Waits until every one of `targets` is answered, or no new answer came for [`STALL`], or the
/// harness exited.
async fn wait_answered(
    world: &World,
    observer: &mut Observer,
    harness: &mut Harness,
    targets: &[String],
) -> Result<Answered, BenchError> {
    let mut at: HashMap<&str, Option<Instant>> =
        targets.iter().map(|id| (id.as_str(), None)).collect();
    let mut left = at.len();
    let mut out = Answered::default();
    let mut progress = Instant::now();
    let mut mark = |id: &str, when: Instant, out: &mut Answered, left: &mut usize| -> bool {
        match at.get_mut(id) {
            Some(slot @ None) => {
                *slot = Some(when);
                *left -= 1;
                out.first = Some(out.first.map_or(when, |f| f.min(when)));
                out.last = Some(out.last.map_or(when, |l| l.max(when)));
                if *left == 0 {
                    out.all = Some(when);
                }
                true
            }
            _ => false,
        }
    };
    while left > 0 {
        match tokio::time::timeout(QUIET, observer.events.recv()).await {
            Ok(Some((when, event))) => {
                for id in Event::from(&event).answered_ids() {
                    if mark(&id, when, &mut out, &mut left) {
                        progress = Instant::now();
                    }
                }
            }
            Ok(None) => return Err(BenchError("observer: the relay closed the socket".into())),
            Err(_) => {
                if let Some(exited) = harness.exited() {
                    return Err(BenchError(exited));
                }
                let now = Instant::now();
                for event in world.published().await? {
                    for id in event.answered_ids() {
                        if mark(&id, now, &mut out, &mut left) {
                            out.missed_by_observer += 1;
                            progress = now;
                        }
                    }
                }
                if progress.elapsed() > STALL {
                    break;
                }
            }
        }
    }
    Ok(out)
}

/// What the relay holds once the harness stopped: (answered more than once, never answered,
/// the agent's events that answer any of them).
async fn check(world: &World, targets: &[String]) -> Result<(usize, usize, usize), BenchError> {
    let mut count: HashMap<&str, usize> = targets.iter().map(|id| (id.as_str(), 0)).collect();
    let mut answers = 0;
    for event in world.published().await? {
        let mut answers_one = false;
        for id in event.answered_ids() {
            if let Some(n) = count.get_mut(id.as_str()) {
                *n += 1;
                answers_one = true;
            }
        }
        answers += usize::from(answers_one);
    }
    let twice = count.values().filter(|n| **n > 1).count();
    let never = count.values().filter(|n| **n == 0).count();
    Ok((twice, never, answers))
}

/// One measurement's figures.
#[derive(Debug, Default, Clone)]
struct Sample {
    /// Start → subscribed (catch-up only).
    subscribed: Option<Duration>,
    /// The baseline's start → subscribed on the same relay afterwards (catch-up only).
    baseline_subscribed: Option<Duration>,
    /// Start → first missed mention answered (catch-up only).
    first: Option<Duration>,
    /// Start (catch-up) or first post (live) → every mention answered.
    all: Option<Duration>,
    /// The same → the last answer to one of them (= `all` when none is left).
    last: Option<Duration>,
    /// Posting the N mentions.
    posting: Duration,
    twice: usize,
    never: usize,
    /// The agent's events that answer any of the N.
    answers: usize,
    missed_by_observer: usize,
    /// The whole measurement, set-up included.
    took: Duration,
}

/// The next second of the wall clock has begun.
async fn next_second() {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let rest =
        Duration::from_secs(1).saturating_sub(Duration::from_nanos(u64::from(now.subsec_nanos())));
    tokio::time::sleep(rest + Duration::from_millis(20)).await;
}

/// The patched harness catching up on `n` mentions posted while it was stopped.
async fn catch_up(
    patched: &Path,
    baseline: &Path,
    agent_bin: &Path,
    n: usize,
) -> Result<Sample, BenchError> {
    let began = Instant::now();
    let mut world = World::new().await?;

    // A first run answers one mention: its watermark is recorded.
    let mut observer = Observer::subscribe(&world).await?;
    let mut harness = world.start(patched, agent_bin)?;
    wait_subscribed(&harness.log, WAIT).await?;
    let seed = world
        .mention("before the stop: plan the release", None)
        .await?;
    let seeded = wait_answered(&world, &mut observer, &mut harness, &[seed.id.to_hex()]).await?;
    if seeded.all.is_none() {
        return Err(BenchError(
            "the mention before the stop was not answered".into(),
        ));
    }
    world.wait_watermark(seed.created_at.as_secs()).await?;
    harness.stop().await?;
    drop(observer);

    // The mentions posted while it is stopped.
    let (targets, _, posting) = world.post_threads(n).await?;
    next_second().await;

    let mut observer = Observer::subscribe(&world).await?;
    let mut harness = world.start(patched, agent_bin)?;
    let started = harness.started;
    wait_subscribed(&harness.log, WAIT).await?;
    let subscribed = started.elapsed();
    let answered = wait_answered(&world, &mut observer, &mut harness, &targets).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    harness.stop().await?;
    let (twice, never, answers) = check(&world, &targets).await?;

    // The control: the baseline starting on the same relay (the same channel history), with a
    // state directory of its own.
    world.fresh_state()?;
    let control = world.start(baseline, agent_bin)?;
    wait_subscribed(&control.log, WAIT).await?;
    let baseline_subscribed = control.started.elapsed();
    control.stop().await?;
    Ok(Sample {
        subscribed: Some(subscribed),
        baseline_subscribed: Some(baseline_subscribed),
        first: answered.first.map(|t| t - started),
        all: answered.all.map(|t| t - started),
        last: answered.last.map(|t| t - started),
        posting,
        twice,
        never,
        answers,
        missed_by_observer: answered.missed_by_observer,
        took: began.elapsed(),
    })
}

/// `harness` subscribed, then `n` mentions posted: first post → every one answered.
async fn live(harness_bin: &Path, agent_bin: &Path, n: usize) -> Result<Sample, BenchError> {
    let began = Instant::now();
    let mut world = World::new().await?;
    let mut harness = world.start(harness_bin, agent_bin)?;
    wait_subscribed(&harness.log, WAIT).await?;
    let mut observer = Observer::subscribe(&world).await?;
    let (targets, first_post, posting) = world.post_threads(n).await?;
    let answered = wait_answered(&world, &mut observer, &mut harness, &targets).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    harness.stop().await?;
    let (twice, never, answers) = check(&world, &targets).await?;
    Ok(Sample {
        all: answered.all.map(|t| t - first_post),
        last: answered.last.map(|t| t - first_post),
        first: answered.first.map(|t| t - first_post),
        posting,
        twice,
        never,
        answers,
        missed_by_observer: answered.missed_by_observer,
        took: began.elapsed(),
        ..Sample::default()
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    CatchUp,
    LivePatched,
    LiveBaseline,
}

impl Mode {
    fn label(self) -> &'static str {
        match self {
            Mode::CatchUp => "catch-up (patched)",
            Mode::LivePatched => "live (patched)",
            Mode::LiveBaseline => "live (baseline)",
        }
    }
}

/// The median of what was measured, with how many runs measured it when some did not.
fn med(
    samples: &[Sample],
    get: impl Fn(&Sample) -> Option<Duration>,
) -> (String, Option<Duration>) {
    let got: Vec<Duration> = samples.iter().filter_map(get).collect();
    if got.is_empty() {
        return ("—".into(), None);
    }
    let m = median(got.clone());
    let text = if got.len() < samples.len() {
        format!("{} ({} of {} runs)", ms(m), got.len(), samples.len())
    } else {
        ms(m)
    };
    (text, Some(m))
}

/// Time until every mention was answered: the median, or, when a run left some unanswered, the
/// median time to the last answer (flagged: the ratios built on it get a `*`).
fn all_answered(samples: &[Sample]) -> (String, Option<Duration>, bool) {
    if samples.iter().all(|s| s.all.is_some()) {
        let (text, m) = med(samples, |s| s.all);
        return (text, m, false);
    }
    let never: usize = samples.iter().map(|s| s.never).sum();
    let (last, m) = med(samples, |s| s.last);
    (
        format!("never all: {never} left; last answer {last}"),
        m,
        true,
    )
}

fn ratio(a: (Option<Duration>, bool), b: (Option<Duration>, bool)) -> String {
    match (a.0, b.0) {
        (Some(x), Some(y)) => format!(
            "{:.2}{}",
            x.as_secs_f64() / y.as_secs_f64().max(1e-9),
            if a.1 || b.1 { "*" } else { "" }
        ),
        _ => "—".into(),
    }
}

fn checks(samples: &[Sample]) -> String {
    let twice: usize = samples.iter().map(|s| s.twice).sum();
    let never: usize = samples.iter().map(|s| s.never).sum();
    format!("{twice}/{never}")
}

#[tokio::main]
async fn main() -> Result<(), BenchError> {
    let args = Args::parse();
    let mut results: Vec<(usize, HashMap<&'static str, Vec<Sample>>)> = Vec::new();
    for &n in &args.sizes {
        let mut by_mode: HashMap<&'static str, Vec<Sample>> = HashMap::new();
        for run in 0..args.runs {
            let order = if run % 2 == 0 {
                [Mode::CatchUp, Mode::LivePatched, Mode::LiveBaseline]
            } else {
                [Mode::LiveBaseline, Mode::LivePatched, Mode::CatchUp]
            };
            for mode in order {
                let sample = match mode {
                    Mode::CatchUp => {
                        catch_up(&args.patched, &args.baseline, &args.agent, n).await?
                    }
                    Mode::LivePatched => live(&args.patched, &args.agent, n).await?,
                    Mode::LiveBaseline => live(&args.baseline, &args.agent, n).await?,
                };
                let show = |d: Option<Duration>| d.map_or("—".into(), ms);
                eprintln!(
                    "N={n} run {}: {}: subscribed {} (baseline {}) first {} all {} last {} ms; posting {} ms; \
                     twice {} never {}; {} answer events; {} missed by the observer; took {:.1} s",
                    run + 1,
                    mode.label(),
                    show(sample.subscribed),
                    show(sample.baseline_subscribed),
                    show(sample.first),
                    show(sample.all),
                    show(sample.last),
                    ms(sample.posting),
                    sample.twice,
                    sample.never,
                    sample.answers,
                    sample.missed_by_observer,
                    sample.took.as_secs_f64(),
                );
                by_mode.entry(mode.label()).or_default().push(sample);
            }
        }
        results.push((n, by_mode));
    }

    println!(
        "| N | threads | catch-up: start → subscribed | catch-up: start → first | \
         catch-up: start → all | live patched: first post → all | \
         live baseline: first post → all | catch-up all / live patched all | \
         live patched / live baseline | answered twice / never (catch-up · live p · live b) |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    let empty = Vec::new();
    let mut flagged = false;
    for (n, by_mode) in &results {
        let get = |mode: Mode| by_mode.get(mode.label()).unwrap_or(&empty);
        let (cu, lp, lb) = (
            get(Mode::CatchUp),
            get(Mode::LivePatched),
            get(Mode::LiveBaseline),
        );
        let (sub, _) = med(cu, |s| s.subscribed);
        let (first, _) = med(cu, |s| s.first);
        let (cu_all, cu_d, cu_x) = all_answered(cu);
        let (lp_all, lp_d, lp_x) = all_answered(lp);
        let (lb_all, lb_d, lb_x) = all_answered(lb);
        flagged |= cu_x || lp_x || lb_x;
        println!(
            "| {n} | {} | {sub} | {first} | {cu_all} | {lp_all} | {lb_all} | {} | {} | {} · {} · {} |",
            n.div_ceil(PER_THREAD),
            ratio((cu_d, cu_x), (lp_d, lp_x)),
            ratio((lp_d, lp_x), (lb_d, lb_x)),
            checks(cu),
            checks(lp),
            checks(lb),
        );
    }
    println!();
    println!(
        "Times in ms, medians over {} runs; each measurement in a fresh relay and state directory; \
         \"never\" and \"left\" are totals over the runs.",
        args.runs
    );
    if flagged {
        println!(
            "* A run left mentions unanswered ({}s without a new answer): its time is to the \
             last answer, not to all.",
            STALL.as_secs()
        );
    }
    println!();
    println!(
        "| N | mode | posting the N mentions (median ms) | answer events (median) | answers the observer missed (total) | start → subscribed on the same relay afterwards, baseline (median ms) |"
    );
    println!("|---:|---|---:|---:|---:|---:|");
    for (n, by_mode) in &results {
        for mode in [Mode::CatchUp, Mode::LivePatched, Mode::LiveBaseline] {
            let samples = by_mode.get(mode.label()).unwrap_or(&empty);
            let posting = median(samples.iter().map(|s| s.posting).collect());
            let mut answers: Vec<usize> = samples.iter().map(|s| s.answers).collect();
            answers.sort_unstable();
            let answers = answers.get(answers.len() / 2).copied().unwrap_or_default();
            let missed: usize = samples.iter().map(|s| s.missed_by_observer).sum();
            let (control, _) = med(samples, |s| s.baseline_subscribed);
            println!(
                "| {n} | {} | {} | {answers} | {missed} | {control} |",
                mode.label(),
                ms(posting)
            );
        }
    }
    Ok(())
}
