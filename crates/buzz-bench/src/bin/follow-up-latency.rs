//! What a follow-up costs when it is served hot (the resident session),
//! warm (`session/load` of the receipt) or cold (`session/new` plus the
//! re-injected context window), side by side against the same agent.
//!
//! A thread first runs eight turns. Then, for each mode, one follow-up is
//! measured: the wall time from appending it to the relay until the reply is
//! visible there (the harness polls the relay every 2 ms, the timer every
//! 1 ms); the agent-side time from the follow-up's first request to its
//! `session/prompt`, read from the wire log's millisecond clock (what getting
//! a session cost before the prompt); and the bytes the harness sent to the
//! agent for it. Warm and cold evict the thread's resident first
//! (`--max-resident-sessions 1` and one turn in another thread); cold also
//! runs with `--no-resume-sessions`. Each mode repeats `--runs` times on fresh
//! scenarios; the table shows medians.
//!
//! ```sh
//! follow-up-latency --harness target/patched/buzz-acp --agent target/debug/acp-test-agent
//! ```

use std::path::Path;
use std::time::{Duration, Instant};

use buzz_bench::{BenchError, Binaries, Subject, median, ms, reply, scenario, start, wire};
use clap::Parser;

#[derive(Debug, Parser)]
struct Args {
    #[command(flatten)]
    binaries: Binaries,
    /// Repetitions per mode.
    #[arg(long, default_value_t = 7)]
    runs: usize,
}

#[derive(Debug, Clone, Copy)]
enum Mode {
    Hot,
    Warm,
    Cold,
}

struct Sample {
    elapsed: Duration,
    setup_ms: u64,
    bytes: u64,
    methods: Vec<String>,
}

fn median_u64(mut v: Vec<u64>) -> u64 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn sample(mode: Mode, subject: &Subject, agent: &Path) -> Result<Sample, BenchError> {
    let (_dir, mut s) = scenario()?;
    // Poll the relay often, so polling does not drown what is measured.
    s.poll_ms = 2;
    let err = |e: buzz_acp::relay::RelayError| BenchError(e.to_string());
    let flags: &[&str] = match mode {
        Mode::Hot => &[],
        Mode::Warm => &["--max-resident-sessions", "1"],
        Mode::Cold => &["--max-resident-sessions", "1", "--no-resume-sessions"],
    };
    let running = start(&s, subject, agent, flags)?;
    let root = s
        .post_top("Plan the release of the storage service")
        .map_err(err)?;
    let mut last = reply(&s, &root)?;
    for i in 0..7 {
        let q = s
            .post_reply(&root, &last, &format!("step {i}: what do we check next?"))
            .map_err(err)?;
        last = reply(&s, &q)?;
    }
    if !matches!(mode, Mode::Hot) {
        // Another thread's turn evicts this thread's resident session.
        let other = s.post_top("an unrelated question").map_err(err)?;
        reply(&s, &other)?;
    }
    let frames_before = wire(&s)?.len();
    let t = Instant::now();
    let q = s
        .post_reply(&root, &last, "so, are we ready to ship?")
        .map_err(err)?;
    s.wait_for_reply_every(&q.id, buzz_bench::WAIT, Duration::from_millis(1))
        .ok_or_else(|| BenchError("no reply to the follow-up".into()))?;
    let elapsed = t.elapsed();
    running.stop().map_err(|e| BenchError(e.to_string()))?;
    let frames = wire(&s)?;
    let follow_up = &frames[frames_before..];
    let first = follow_up.first().map(|f| f.ts_ms).unwrap_or_default();
    let prompt = follow_up
        .iter()
        .find(|f| f.method.as_deref() == Some("session/prompt"))
        .map_or(first, |f| f.ts_ms);
    Ok(Sample {
        elapsed,
        setup_ms: prompt.saturating_sub(first),
        bytes: follow_up.iter().map(|f| f.bytes).sum(),
        methods: follow_up.iter().filter_map(|f| f.method.clone()).collect(),
    })
}

fn main() -> Result<(), BenchError> {
    let args = Args::parse();
    let subject = Subject {
        label: "patched".into(),
        harness: args.binaries.harness,
    };
    println!(
        "| follow-up served | median wall time (ms) | min–max (ms) | session setup before the prompt (ms, agent clock) | bytes sent to the agent | requests |"
    );
    println!("|---|---:|---:|---:|---:|---|");
    for (mode, name) in [
        (Mode::Hot, "hot (resident session)"),
        (Mode::Warm, "warm (session/load)"),
        (Mode::Cold, "cold (session/new + context)"),
    ] {
        let samples: Vec<Sample> = (0..args.runs.max(1))
            .map(|_| sample(mode, &subject, &args.binaries.agent))
            .collect::<Result<_, _>>()?;
        let times: Vec<Duration> = samples.iter().map(|s| s.elapsed).collect();
        let lo = times.iter().min().copied().unwrap_or_default();
        let hi = times.iter().max().copied().unwrap_or_default();
        println!(
            "| {name} | {} | {}–{} | {} | {} | {} |",
            ms(median(times)),
            ms(lo),
            ms(hi),
            median_u64(samples.iter().map(|s| s.setup_ms).collect()),
            median_u64(samples.iter().map(|s| s.bytes).collect()),
            samples[0].methods.join(", ")
        );
    }
    Ok(())
}
