//! What a follow-up costs with a REAL adapter when the patched harness serves it hot (the
//! resident live session), warm (`session/resume`/`session/load` of the receipt in a fresh
//! agent process after an idle pool sleep) or cold (`session/new` plus the re-injected context
//! window after the same sleep), in time and in what the model has to read.
//!
//! For each adapter and mode, a thread runs four turns on a fresh scenario and its own fake
//! LLM. Then comes a realistic pause, simulated on the fake LLM's clock (the provider's time,
//! which decides what its prompt cache still holds):
//!
//! | follow-up | harness | gap on the fake clock |
//! |---|---|---|
//! | hot | `--lazy-pool --idle-pool-sleep 600`: the session stays resident | 1 minute |
//! | warm | `--lazy-pool --idle-pool-sleep 2`: the pool sleeps, the follow-up resumes the receipt | 15 minutes (upstream's idle pool sleep) |
//! | cold | the same with `--no-resume-sessions`: a new session with the context window | 15 minutes |
//! | handoff | not measured yet (a row is left for it) | — |
//!
//! The harness itself only waits two real seconds for its pool to sleep; the fake clock is what
//! makes the gap 15 minutes for the cache.
//!
//! The follow-up is timed from its append to the relay until the reply is visible there (relay
//! polled every 2 ms). What the model read comes from the fake LLM's request log for the
//! follow-up's window (from a quiet log before it, to a quiet log after its reply, so the
//! adapter's own title and suggestion calls belong to the turn that caused them): the calls,
//! their bytes, and per call how much of its prompt a provider's cache could have served under
//! a 5-minute and a 1-hour lifetime ([`fake_llm::cache`]). Calls the adapter makes on its own
//! (titles, suggestions, summaries; [`fake_llm::RequestKind::Background`]) are counted apart.
//! Medians over `--runs`, each column on its own.
//!
//! ```sh
//! scripts/measure real-adapters [--runs N] [--adapter NAME]...
//! ```

use std::time::{Duration, Instant};

use buzz_acp::relay::Event;
use buzz_acp::testing::{Scenario, wait_until_every};
use clap::Parser;
use fake_llm::{RequestKind, RequestRecord};
use real_adapters::adapter::{create_agent_cwd, install_dir};
use real_adapters::binaries::patched_harness;
use real_adapters::llm::Llm;
use real_adapters::procs::kill_processes_with_home;
use real_adapters::{Adapter, AgentHome, TierError};

/// How long one reply may take (a cold start of a real adapter included).
const REPLY: Duration = Duration::from_secs(90);
/// How long the pool may take to go to sleep after the last turn.
const SLEEP: Duration = Duration::from_secs(60);
/// The request log counts as quiet when nothing arrived for this long.
const QUIET: Duration = Duration::from_secs(1);
/// How long to wait for a quiet request log at most.
const QUIET_BOUND: Duration = Duration::from_secs(15);
/// Turns in the thread before the measured follow-up.
const TURNS: usize = 4;
/// A hot follow-up's pause.
const HOT_GAP: Duration = Duration::from_secs(60);
/// The pause before a warm or cold follow-up: upstream's idle pool sleep (15 minutes).
const IDLE_GAP: Duration = Duration::from_secs(15 * 60);

#[derive(Debug, Parser)]
#[command(about = "Hot / warm / cold follow-up cost with real adapters (patched harness)")]
struct Args {
    /// Repetitions per adapter and mode.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Adapters to measure (default: all).
    #[arg(long, value_parser = parse_adapter)]
    adapter: Vec<Adapter>,
}

fn parse_adapter(name: &str) -> Result<Adapter, String> {
    Adapter::from_name(name)
        .ok_or_else(|| format!("unknown adapter {name:?} (codex-acp, opencode, claude-agent-acp)"))
}

/// How the follow-up is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Hot,
    Warm,
    Cold,
    /// The owner's handoff: listed in the tables, not measured yet.
    Handoff,
}

impl Mode {
    const ALL: [Mode; 4] = [Mode::Hot, Mode::Warm, Mode::Cold, Mode::Handoff];

    /// Harness flags, or `None` for a mode that is not measured yet.
    fn flags(self) -> Option<&'static [&'static str]> {
        match self {
            Self::Hot => Some(&["--lazy-pool", "--idle-pool-sleep", "600"]),
            Self::Warm => Some(&["--lazy-pool", "--idle-pool-sleep", "2"]),
            Self::Cold => Some(&[
                "--lazy-pool",
                "--idle-pool-sleep",
                "2",
                "--no-resume-sessions",
            ]),
            Self::Handoff => None,
        }
    }

    /// Whether the pool goes to sleep before the follow-up.
    fn sleeps(self) -> bool {
        matches!(self, Self::Warm | Self::Cold)
    }

    /// The pause on the fake clock before the follow-up.
    fn gap(self) -> Duration {
        match self {
            Self::Hot => HOT_GAP,
            Self::Warm | Self::Cold | Self::Handoff => IDLE_GAP,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Hot => "hot (resident session)",
            Self::Warm => "warm (resume/load after an idle sleep)",
            Self::Cold => "cold (session/new + context after an idle sleep)",
            Self::Handoff => "handoff",
        }
    }
}

/// What the model read for one follow-up, from the fake LLM's request log.
#[derive(Debug, Clone, Copy, Default)]
struct Reading {
    calls: usize,
    /// Bytes of the request bodies.
    body_bytes: usize,
    /// Bytes of the prompts as laid out for the cache.
    prompt_bytes: usize,
    cached_5m: usize,
    cached_1h: usize,
}

impl Reading {
    fn of<'a>(records: impl IntoIterator<Item = &'a RequestRecord>) -> Self {
        records.into_iter().fold(Self::default(), |sum, r| Self {
            calls: sum.calls + 1,
            body_bytes: sum.body_bytes + r.bytes,
            prompt_bytes: sum.prompt_bytes + r.prompt_bytes,
            cached_5m: sum.cached_5m + r.cached_bytes_5m,
            cached_1h: sum.cached_1h + r.cached_bytes_1h,
        })
    }

    fn fresh_5m(&self) -> usize {
        self.prompt_bytes - self.cached_5m
    }

    fn fresh_1h(&self) -> usize {
        self.prompt_bytes - self.cached_1h
    }
}

/// One measured follow-up.
struct Sample {
    elapsed: Duration,
    turn: Reading,
    background: Reading,
    methods: Vec<String>,
}

fn fail(msg: impl Into<String>) -> TierError {
    TierError::Scenario(msg.into())
}

fn reply(s: &Scenario, event: &Event) -> Result<Event, TierError> {
    s.wait_for_reply_every(&event.id, REPLY, Duration::from_millis(2))
        .ok_or_else(|| fail(format!("no reply to {:?}", event.content)))
}

/// Waits until the fake LLM has received nothing for [`QUIET`] (at most [`QUIET_BOUND`]), so
/// calls an adapter makes after a reply (titles, suggestions) are not counted for the next
/// thing. Returns the number of requests so far.
fn quiet_log(llm: &Llm) -> Result<usize, TierError> {
    let started = Instant::now();
    let mut count = llm.requests()?.len();
    let mut since = Instant::now();
    while started.elapsed() < QUIET_BOUND {
        std::thread::sleep(Duration::from_millis(50));
        let now = llm.requests()?.len();
        if now != count {
            count = now;
            since = Instant::now();
        } else if since.elapsed() >= QUIET {
            break;
        }
    }
    Ok(count)
}

/// Whether the observer's last pool event is a sleep (no agent spawned since).
fn pool_is_asleep(s: &Scenario) -> bool {
    let log = std::fs::read_to_string(&s.observer_log).unwrap_or_default();
    let last = log
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|r| r["type"].as_str().map(str::to_owned))
        .rfind(|t| t == "pool_sleep" || t == "agent_spawn");
    last.as_deref() == Some("pool_sleep")
}

fn sample(adapter: Adapter, mode: Mode, flags: &[&str]) -> Result<Sample, TierError> {
    let dir = tempfile::tempdir().map_err(|e| fail(e.to_string()))?;
    let llm = Llm::start(&dir.path().join("llm.jsonl"))?;
    let mut s = Scenario::new(&dir.path().join("scenario")).map_err(|e| fail(e.to_string()))?;
    s.poll_ms = 2;
    let agent = AgentHome::prepare(
        adapter,
        &install_dir(),
        &dir.path().join("agent"),
        &llm.base_url(),
    )?;
    let err = |e: buzz_acp::relay::RelayError| fail(e.to_string());
    let running = s
        .start(&patched_harness()?, &agent.command(), flags)
        .map_err(|e| fail(e.to_string()))?;
    let root = s
        .post_top("Plan the release of the storage service")
        .map_err(err)?;
    let mut last = reply(&s, &root)?;
    for i in 1..TURNS {
        let q = s
            .post_reply(&root, &last, &format!("step {i}: what do we check next?"))
            .map_err(err)?;
        last = reply(&s, &q)?;
    }
    if mode.sleeps() {
        wait_until_every(SLEEP, Duration::from_millis(20), || {
            pool_is_asleep(&s).then_some(())
        })
        .ok_or_else(|| fail(format!("{adapter}: the pool never went to sleep")))?;
    }
    let calls_before = quiet_log(&llm)?;
    llm.advance_clock(mode.gap());
    let frames_before = s.observer_records("acp_write").len();
    let t = Instant::now();
    let q = s
        .post_reply(&root, &last, "so, are we ready to ship?")
        .map_err(err)?;
    reply(&s, &q)?;
    let elapsed = t.elapsed();
    quiet_log(&llm)?;
    // The follow-up's requests end with its prompt; anything after it is the next thing's.
    let mut methods: Vec<String> = s.observer_records("acp_write")[frames_before..]
        .iter()
        .filter_map(|r| r["frame"]["method"].as_str().map(str::to_owned))
        .collect();
    if let Some(prompt) = methods.iter().position(|m| m == "session/prompt") {
        methods.truncate(prompt + 1);
    }
    let calls = llm.requests()?;
    let follow_up = &calls[calls_before..];
    running.stop().map_err(|e| fail(e.to_string()))?;
    // Never leave an agent behind, even if the harness did (the tier reports that case).
    kill_processes_with_home(&agent.home);
    Ok(Sample {
        elapsed,
        turn: Reading::of(follow_up.iter().filter(|r| r.kind == RequestKind::Turn)),
        background: Reading::of(
            follow_up
                .iter()
                .filter(|r| r.kind == RequestKind::Background),
        ),
        methods,
    })
}

fn median<T: Ord + Copy + Default>(mut v: Vec<T>) -> T {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// The median of one column over the samples.
fn col(samples: &[Sample], pick: impl Fn(&Sample) -> usize) -> usize {
    median(samples.iter().map(pick).collect())
}

/// Minutes of a gap, for the table.
fn minutes(d: Duration) -> u64 {
    d.as_secs() / 60
}

fn main() -> Result<(), TierError> {
    let args = Args::parse();
    create_agent_cwd()?;
    let adapters = if args.adapter.is_empty() {
        Adapter::ALL.to_vec()
    } else {
        args.adapter.clone()
    };
    let mut measured: Vec<(Adapter, Mode, Vec<Sample>)> = Vec::new();
    for &adapter in &adapters {
        for mode in Mode::ALL {
            let Some(flags) = mode.flags() else {
                measured.push((adapter, mode, Vec::new()));
                continue;
            };
            let samples: Vec<Sample> = (0..args.runs.max(1))
                .map(|_| sample(adapter, mode, flags))
                .collect::<Result<_, _>>()?;
            measured.push((adapter, mode, samples));
        }
    }

    println!(
        "| adapter | follow-up served | median wall time (ms) | min–max (ms) | model calls | bytes the model read | requests to the agent |"
    );
    println!("|---|---|---:|---:|---:|---:|---|");
    for (adapter, mode, samples) in &measured {
        if samples.is_empty() {
            println!(
                "| {adapter} | {} | — | — | — | — | not measured yet |",
                mode.label()
            );
            continue;
        }
        let times: Vec<Duration> = samples.iter().map(|s| s.elapsed).collect();
        let lo = times.iter().min().copied().unwrap_or_default();
        let hi = times.iter().max().copied().unwrap_or_default();
        println!(
            "| {adapter} | {} | {} | {}–{} | {} | {} | {} |",
            mode.label(),
            median(times).as_millis(),
            lo.as_millis(),
            hi.as_millis(),
            col(samples, |s| s.turn.calls + s.background.calls),
            col(samples, |s| s.turn.body_bytes + s.background.body_bytes),
            samples[0].methods.join(", ")
        );
    }

    println!();
    println!(
        "| adapter | follow-up | gap (fake clock) | turn calls | prompt bytes | cacheable, 5-min cache | fresh, 5-min cache | cacheable, 1-h cache | fresh, 1-h cache | background calls | background bytes | background fresh, 5-min |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (adapter, mode, samples) in &measured {
        let gap = format!("{} min", minutes(mode.gap()));
        if samples.is_empty() {
            println!(
                "| {adapter} | {} | — | — | — | — | — | — | — | — | — | — |",
                mode.label()
            );
            continue;
        }
        println!(
            "| {adapter} | {} | {gap} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            mode.label(),
            col(samples, |s| s.turn.calls),
            col(samples, |s| s.turn.prompt_bytes),
            col(samples, |s| s.turn.cached_5m),
            col(samples, |s| s.turn.fresh_5m()),
            col(samples, |s| s.turn.cached_1h),
            col(samples, |s| s.turn.fresh_1h()),
            col(samples, |s| s.background.calls),
            col(samples, |s| s.background.prompt_bytes),
            col(samples, |s| s.background.fresh_5m()),
        );
    }
    Ok(())
}
