//! What a follow-up costs with a REAL adapter when the patched harness serves it hot (the
//! resident live session), warm (`session/resume`/`session/load` of the receipt in a fresh
//! agent process) or cold (`session/new` plus the re-injected context window).
//!
//! For each adapter and mode, a thread runs four turns on a fresh scenario; warm and cold then
//! evict the thread's resident session (`--max-resident-sessions 1` and one turn in another
//! thread; cold also `--no-resume-sessions`). The follow-up is timed from its append to the
//! relay until the reply is visible there (relay polled every 2 ms), and the fake LLM's request
//! log gives what the model had to read for it: the completion requests it caused and their
//! bytes. Medians over `--runs`.
//!
//! ```sh
//! scripts/measure real-adapters [--runs N] [--adapter NAME]...
//! ```

use std::time::{Duration, Instant};

use buzz_acp::relay::Event;
use buzz_acp::testing::{Scenario, wait_until_every};
use clap::Parser;
use real_adapters::adapter::{create_agent_cwd, install_dir};
use real_adapters::binaries::patched_harness;
use real_adapters::llm::Llm;
use real_adapters::procs::kill_processes_with_home;
use real_adapters::{Adapter, AgentHome, TierError};

/// How long one reply may take (a cold start of a real adapter included).
const REPLY: Duration = Duration::from_secs(90);
/// How long the release of an evicted session may take before the follow-up is measured anyway
/// (an adapter without `session/close` sends none).
const RELEASE: Duration = Duration::from_secs(10);
/// Turns in the thread before the measured follow-up.
const TURNS: usize = 4;

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

#[derive(Debug, Clone, Copy)]
enum Mode {
    Hot,
    Warm,
    Cold,
}

impl Mode {
    fn flags(self) -> &'static [&'static str] {
        match self {
            Self::Hot => &[],
            Self::Warm => &["--max-resident-sessions", "1"],
            Self::Cold => &["--max-resident-sessions", "1", "--no-resume-sessions"],
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Hot => "hot (resident session)",
            Self::Warm => "warm (resume/load of the receipt)",
            Self::Cold => "cold (session/new + context)",
        }
    }
}

/// One measured follow-up.
struct Sample {
    elapsed: Duration,
    model_calls: usize,
    model_bytes: usize,
    methods: Vec<String>,
}

fn fail(msg: impl Into<String>) -> TierError {
    TierError::Scenario(msg.into())
}

fn reply(s: &Scenario, event: &Event) -> Result<Event, TierError> {
    s.wait_for_reply_every(&event.id, REPLY, Duration::from_millis(2))
        .ok_or_else(|| fail(format!("no reply to {:?}", event.content)))
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
        .start(&patched_harness()?, &agent.command(), mode.flags())
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
    if !matches!(mode, Mode::Hot) {
        let other = s.post_top("an unrelated question").map_err(err)?;
        reply(&s, &other)?;
        // That turn evicted the thread's resident; its release (`session/close`, where the
        // adapter advertises it) goes out right after the reply is published. It belongs to the
        // eviction, not to the follow-up: let it finish before the measured window opens.
        let closed = || {
            let writes = s.observer_records("acp_write");
            let close = writes
                .iter()
                .find(|r| r["frame"]["method"] == "session/close")?;
            let id = &close["frame"]["id"];
            let reads = s.observer_records("acp_read");
            reads
                .iter()
                .any(|r| r["frame"]["id"] == *id && r["frame"]["method"].is_null())
                .then_some(())
        };
        let _ = wait_until_every(RELEASE, Duration::from_millis(2), closed);
    }
    let calls_before = llm.requests()?.len();
    let frames_before = s.observer_records("acp_write").len();
    let t = Instant::now();
    let q = s
        .post_reply(&root, &last, "so, are we ready to ship?")
        .map_err(err)?;
    reply(&s, &q)?;
    let elapsed = t.elapsed();
    // The follow-up's requests end with its prompt; anything after it (the release of a session
    // this turn evicted) is the next thing's cost.
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
        model_calls: follow_up.len(),
        model_bytes: follow_up.iter().map(|r| r.bytes).sum(),
        methods,
    })
}

fn median<T: Ord + Copy + Default>(mut v: Vec<T>) -> T {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn main() -> Result<(), TierError> {
    let args = Args::parse();
    create_agent_cwd()?;
    let adapters = if args.adapter.is_empty() {
        Adapter::ALL.to_vec()
    } else {
        args.adapter.clone()
    };
    println!(
        "| adapter | follow-up served | median wall time (ms) | min–max (ms) | model calls | bytes the model read | requests to the agent |"
    );
    println!("|---|---|---:|---:|---:|---:|---|");
    for adapter in adapters {
        for mode in [Mode::Hot, Mode::Warm, Mode::Cold] {
            let samples: Vec<Sample> = (0..args.runs.max(1))
                .map(|_| sample(adapter, mode))
                .collect::<Result<_, _>>()?;
            let times: Vec<Duration> = samples.iter().map(|s| s.elapsed).collect();
            let lo = times.iter().min().copied().unwrap_or_default();
            let hi = times.iter().max().copied().unwrap_or_default();
            println!(
                "| {adapter} | {} | {} | {}–{} | {} | {} | {} |",
                mode.label(),
                median(times).as_millis(),
                lo.as_millis(),
                hi.as_millis(),
                median(samples.iter().map(|s| s.model_calls).collect()),
                median(samples.iter().map(|s| s.model_bytes).collect()),
                samples[0].methods.join(", ")
            );
        }
    }
    Ok(())
}
