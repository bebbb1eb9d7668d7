//! What a follow-up costs with a REAL adapter when the patched harness serves it hot (the
//! resident live session), warm (`session/resume`/`session/load` of the receipt in a fresh
//! agent process after an idle pool sleep) or cold (`session/new` plus the re-injected context
//! window after the same sleep), and what a rotation costs when the retired session hands off
//! to its successor (patch `continuity-handoff`) rather than the thread restarting cold, in time
//! and in what the model has to read.
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
//! | cold rotation | the **baseline** harness as hot, with `--max-turns-per-session 4`: upstream rotates after the fourth turn, the follow-up opens a new session with the context window | 1 minute |
//! | handoff, resident | the patched harness as hot, with `--max-turns-per-session 4`: the fourth turn retired the session; the follow-up asks the live old session for its handoff, then a new session gets it | 1 minute |
//! | handoff after an idle sleep | as warm, with `--max-turns-per-session 4`: the follow-up resumes the retired session for its handoff, then a new session gets it | 15 minutes |
//!
//! The harness itself only waits two real seconds for its pool to sleep; the fake clock is what
//! makes the gap 15 minutes for the cache. A handoff is the cost of a rotation that keeps what
//! the thread knew; a cold restart of the same thread is what it replaces: upstream's rotation
//! at the same turn limit after the same minute (cold rotation), and a new session with the
//! context window after the same idle sleep (cold). The third table sets each handoff against
//! the cold restart with its gap.
//!
//! The follow-up is timed from its append to the relay until the reply is visible there (relay
//! polled every 2 ms). What the model read comes from the fake LLM's request log for the
//! follow-up's window (from a quiet log before it, to a quiet log after its reply, so the
//! adapter's own title and suggestion calls belong to the turn that caused them): the calls,
//! their bytes, and per call how much of its prompt a provider's cache could have served under
//! a 5-minute and a 1-hour lifetime ([`fake_llm::cache`]). Calls the adapter makes on its own
//! (titles, suggestions, summaries; [`fake_llm::RequestKind::Background`]) are counted apart.
//! In a handoff, the old session is prompted first, so the first conversation call of the
//! window is the handoff's (the run checks on the wire that the old session was asked, and that
//! the follow-up went to a new session). Medians over `--runs`, each column on its own; wall
//! times also with their minimum and maximum.
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
use real_adapters::binaries::{baseline_harness, patched_harness};
use real_adapters::llm::Llm;
use real_adapters::procs::kill_processes_with_home;
use real_adapters::wire::Wire;
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
/// The measured follow-up.
const FOLLOW_UP: &str = "so, are we ready to ship?";

#[derive(Debug, Parser)]
#[command(
    about = "Hot / warm / cold follow-ups and handoffs with real adapters, against cold restarts"
)]
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
    /// The baseline at the turn limit: upstream's rotation, a new session with the window.
    ColdRotation,
    /// The session reached the turn limit; the follow-up asks it (still resident) for a handoff.
    HandoffResident,
    /// The same after an idle sleep: the retired session is resumed for its handoff.
    HandoffIdle,
}

impl Mode {
    const ALL: [Mode; 6] = [
        Mode::Hot,
        Mode::Warm,
        Mode::Cold,
        Mode::ColdRotation,
        Mode::HandoffResident,
        Mode::HandoffIdle,
    ];

    /// Harness flags.
    fn flags(self) -> &'static [&'static str] {
        match self {
            Self::Hot => &["--lazy-pool", "--idle-pool-sleep", "600"],
            Self::Warm => &["--lazy-pool", "--idle-pool-sleep", "2"],
            Self::Cold => &[
                "--lazy-pool",
                "--idle-pool-sleep",
                "2",
                "--no-resume-sessions",
            ],
            // The limit is the thread's turn count before the follow-up ([`TURNS`]).
            Self::ColdRotation | Self::HandoffResident => &[
                "--lazy-pool",
                "--idle-pool-sleep",
                "600",
                "--max-turns-per-session",
                "4",
            ],
            Self::HandoffIdle => &[
                "--lazy-pool",
                "--idle-pool-sleep",
                "2",
                "--max-turns-per-session",
                "4",
            ],
        }
    }

    /// The harness that serves it: the baseline only for upstream's rotation.
    fn harness(self) -> Result<std::path::PathBuf, TierError> {
        match self {
            Self::ColdRotation => baseline_harness(),
            _ => patched_harness(),
        }
    }

    /// Whether the pool goes to sleep before the follow-up.
    fn sleeps(self) -> bool {
        matches!(self, Self::Warm | Self::Cold | Self::HandoffIdle)
    }

    /// Whether the follow-up starts with a handoff.
    fn hands_off(self) -> bool {
        matches!(self, Self::HandoffResident | Self::HandoffIdle)
    }

    /// The pause on the fake clock before the follow-up.
    fn gap(self) -> Duration {
        match self {
            Self::Hot | Self::ColdRotation | Self::HandoffResident => HOT_GAP,
            Self::Warm | Self::Cold | Self::HandoffIdle => IDLE_GAP,
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Hot => "hot (resident session)",
            Self::Warm => "warm (resume/load after an idle sleep)",
            Self::Cold => "cold (session/new + context after an idle sleep)",
            Self::ColdRotation => {
                "cold rotation (baseline at the turn limit: session/new + context)"
            }
            Self::HandoffResident => {
                "handoff, resident (turn limit: the live old session hands off)"
            }
            Self::HandoffIdle => {
                "handoff after an idle sleep (turn limit: the resumed old session hands off)"
            }
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
    /// Every conversation call of the follow-up, the handoff's included.
    turn: Reading,
    /// Of those, the handoff call (the old session's answer to the handoff instruction).
    handoff: Reading,
    /// Bytes of the handoff text the old session wrote (0 without a handoff).
    handoff_text: usize,
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

fn sample(adapter: Adapter, mode: Mode) -> Result<Sample, TierError> {
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
        .start(&mode.harness()?, &agent.command(), mode.flags())
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
    let frames_before = Wire::read(&s.observer_log)?.len();
    let t = Instant::now();
    let q = s.post_reply(&root, &last, FOLLOW_UP).map_err(err)?;
    reply(&s, &q)?;
    let elapsed = t.elapsed();
    quiet_log(&llm)?;
    let wire = Wire::read(&s.observer_log)?.since(frames_before);
    let handoff_text = handed_off(&wire, mode, adapter)?;
    let calls = llm.requests()?;
    let follow_up = &calls[calls_before..];
    running.stop().map_err(|e| fail(e.to_string()))?;
    // Never leave an agent behind, even if the harness did (the tier reports that case).
    kill_processes_with_home(&agent.home);
    let turns: Vec<&RequestRecord> = follow_up
        .iter()
        .filter(|r| r.kind == RequestKind::Turn)
        .collect();
    let handoff_calls = usize::from(mode.hands_off());
    Ok(Sample {
        elapsed,
        turn: Reading::of(turns.iter().copied()),
        handoff: Reading::of(turns.iter().copied().take(handoff_calls)),
        handoff_text,
        background: Reading::of(
            follow_up
                .iter()
                .filter(|r| r.kind == RequestKind::Background),
        ),
        methods: requests_for_follow_up(&wire),
    })
}

/// The requests the harness sent for the follow-up, up to the prompt that carries it (anything
/// after it is the next thing's).
fn requests_for_follow_up(wire: &Wire) -> Vec<String> {
    let end = wire
        .prompts()
        .into_iter()
        .find(|(_, _, text)| text.contains(FOLLOW_UP))
        .map_or(wire.len(), |(at, _, _)| at + 1);
    wire.frames()[..end]
        .iter()
        .filter(|f| {
            f.direction == real_adapters::wire::Direction::Sent && f.body.get("id").is_some()
        })
        .filter_map(|f| f.method().map(str::to_owned))
        .collect()
}

/// For a handoff mode: checks on the wire that the follow-up went to a new session after the
/// old one was prompted for its handoff, and returns the handoff's length in bytes. For the
/// other modes: checks that no session was prompted before the follow-up, and returns 0.
fn handed_off(wire: &Wire, mode: Mode, adapter: Adapter) -> Result<usize, TierError> {
    let prompts = wire.exchanges("session/prompt");
    let Some(follow_up) = prompts
        .iter()
        .position(|e| e.request.prompt_text().contains(FOLLOW_UP))
    else {
        return Err(fail(format!("{adapter}: the follow-up was never prompted")));
    };
    let before = &prompts[..follow_up];
    match (mode.hands_off(), before) {
        (false, []) => Ok(0),
        (true, [ask]) => {
            let new_session = prompts[follow_up].request.session_id();
            if ask.request.session_id() == new_session || !ask.succeeded() {
                return Err(fail(format!(
                    "{adapter}: {mode:?}: the follow-up did not move to a new session after a handoff"
                )));
            }
            Ok(wire.agent_text(ask).len())
        }
        _ => Err(fail(format!(
            "{adapter}: {mode:?}: {} prompt(s) before the follow-up",
            before.len()
        ))),
    }
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
            let samples: Vec<Sample> = (0..args.runs.max(1))
                .map(|_| sample(adapter, mode))
                .collect::<Result<_, _>>()?;
            measured.push((adapter, mode, samples));
        }
    }

    println!(
        "| adapter | follow-up served | median wall time (ms) | min–max (ms) | model calls | bytes the model read | requests to the agent |"
    );
    println!("|---|---|---:|---:|---:|---:|---|");
    for (adapter, mode, samples) in &measured {
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

    println!();
    print_handoff_table(&measured);
    Ok(())
}

/// The handoffs set against a cold restart of the same thread after the same gap: what the
/// model read in all (conversation and background calls), fresh under each cache, the handoff
/// call's share, and the wall time, with the ratio to the cold restart.
fn print_handoff_table(measured: &[(Adapter, Mode, Vec<Sample>)]) {
    println!(
        "| adapter | gap (fake clock) | follow-up | model calls | prompt bytes, all calls | fresh, 5-min cache | fresh, 1-h cache | handoff call: prompt bytes | handoff call: fresh, 5-min | handoff text (bytes) | median wall time (ms) | vs cold: prompt bytes | vs cold: fresh, 5-min | vs cold: fresh, 1-h | vs cold: wall time |"
    );
    println!("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let all = |s: &Sample| Reading {
        calls: s.turn.calls + s.background.calls,
        body_bytes: s.turn.body_bytes + s.background.body_bytes,
        prompt_bytes: s.turn.prompt_bytes + s.background.prompt_bytes,
        cached_5m: s.turn.cached_5m + s.background.cached_5m,
        cached_1h: s.turn.cached_1h + s.background.cached_1h,
    };
    let mut adapters: Vec<Adapter> = Vec::new();
    for (adapter, _, _) in measured {
        if !adapters.contains(adapter) {
            adapters.push(*adapter);
        }
    }
    for adapter in adapters {
        let of = |mode: Mode| {
            measured
                .iter()
                .find(|(a, m, _)| *a == adapter && *m == mode)
                .map(|(_, _, samples)| samples.as_slice())
                .unwrap_or_default()
        };
        for (cold_mode, handoff_mode) in [
            (Mode::ColdRotation, Mode::HandoffResident),
            (Mode::Cold, Mode::HandoffIdle),
        ] {
            let cold = of(cold_mode);
            let cold_prompt = col(cold, |s| all(s).prompt_bytes);
            let cold_fresh_5m = col(cold, |s| all(s).fresh_5m());
            let cold_fresh_1h = col(cold, |s| all(s).fresh_1h());
            let cold_wall = median(cold.iter().map(|s| s.elapsed).collect());
            for mode in [cold_mode, handoff_mode] {
                let samples = of(mode);
                if samples.is_empty() {
                    continue;
                }
                let wall = median(samples.iter().map(|s| s.elapsed).collect());
                let prompt = col(samples, |s| all(s).prompt_bytes);
                let fresh_5m = col(samples, |s| all(s).fresh_5m());
                let fresh_1h = col(samples, |s| all(s).fresh_1h());
                let versus = if mode == cold_mode || cold.is_empty() {
                    "— | — | — | —".to_owned()
                } else {
                    format!(
                        "{} | {} | {} | {}",
                        ratio(prompt, cold_prompt),
                        ratio(fresh_5m, cold_fresh_5m),
                        ratio(fresh_1h, cold_fresh_1h),
                        ratio_f(wall.as_secs_f64(), cold_wall.as_secs_f64()),
                    )
                };
                println!(
                    "| {adapter} | {} min | {} | {} | {prompt} | {fresh_5m} | {fresh_1h} | {} | {} | {} | {} | {versus} |",
                    minutes(mode.gap()),
                    mode.label(),
                    col(samples, |s| all(s).calls),
                    col(samples, |s| s.handoff.prompt_bytes),
                    col(samples, |s| s.handoff.fresh_5m()),
                    col(samples, |s| s.handoff_text),
                    wall.as_millis(),
                );
            }
        }
    }
}

/// `a / b` as "×1.23" (or "—" when `b` is zero).
fn ratio(a: usize, b: usize) -> String {
    // Byte counts here stay far below 2^52: the conversion is exact.
    #[allow(clippy::cast_precision_loss)]
    ratio_f(a as f64, b as f64)
}

fn ratio_f(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("×{:.2}", a / b)
    } else {
        "—".to_owned()
    }
}
