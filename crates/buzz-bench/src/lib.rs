//! Measurement scenarios for the fork's patch series.
//!
//! Both binaries drive real `buzz-acp` binaries (the baseline build and the
//! patched build, given by path) against the real test agent through the same
//! scripted scenario, and read what crossed the wire from the agent's wire
//! log. They compare the two side by side in one run; nothing here asserts a
//! speed (these are measurements, not tests).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use acp_test_agent::harness::{WireFrame, read_wire_log};
use buzz_acp::relay::Event;
use buzz_acp::testing::{Running, Scenario, context_entries};

/// Scenario failures (a harness that does not answer, a broken file).
#[derive(Debug)]
pub struct BenchError(pub String);

impl std::fmt::Display for BenchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BenchError {}

/// Wraps any error with what was being done.
pub fn ctx<T, E: std::fmt::Display>(r: Result<T, E>, what: &str) -> Result<T, BenchError> {
    r.map_err(|e| BenchError(format!("{what}: {e}")))
}

/// How long to wait for a reply before giving up.
pub const WAIT: Duration = Duration::from_secs(30);

/// One harness under measurement.
#[derive(Debug, Clone)]
pub struct Subject {
    /// Column label (e.g. "baseline", "patched").
    pub label: String,
    /// The `buzz-acp` binary.
    pub harness: PathBuf,
}

/// A fresh scenario in a temporary directory.
pub fn scenario() -> Result<(tempfile::TempDir, Scenario), BenchError> {
    let dir = ctx(tempfile::tempdir(), "creating a temporary directory")?;
    let s = ctx(Scenario::new(dir.path()), "laying out the scenario")?;
    Ok((dir, s))
}

/// Runs `--once` to completion.
pub fn run_once(
    s: &Scenario,
    subject: &Subject,
    agent: &Path,
    extra: &[&str],
) -> Result<(), BenchError> {
    s.run_once_ok(&subject.harness, &s.agent_command(agent, &[]), extra)
        .map(|_| ())
        .map_err(BenchError)
}

/// Starts the harness in the background.
pub fn start(
    s: &Scenario,
    subject: &Subject,
    agent: &Path,
    extra: &[&str],
) -> Result<Running, BenchError> {
    ctx(
        s.start(&subject.harness, &s.agent_command(agent, &[]), extra),
        "starting buzz-acp",
    )
}

/// Waits for the agent's reply to `event`.
pub fn reply(s: &Scenario, event: &Event) -> Result<Event, BenchError> {
    s.wait_for_reply(&event.id, WAIT)
        .ok_or_else(|| BenchError(format!("no reply to {:?} within {WAIT:?}", event.content)))
}

/// The agent's wire log.
pub fn wire(s: &Scenario) -> Result<Vec<WireFrame>, BenchError> {
    ctx(read_wire_log(&s.wire_log), "reading the wire log")
}

/// A prompt as the agent received it.
#[derive(Debug, Clone)]
pub struct PromptCost {
    /// Bytes of the `session/prompt` frame.
    pub bytes: u64,
    /// History entries re-sent in its `<thread-context>`.
    pub context_events: usize,
}

/// Every `session/prompt` frame in wire order.
pub fn prompt_costs(frames: &[WireFrame]) -> Vec<PromptCost> {
    frames
        .iter()
        .filter(|f| f.method.as_deref() == Some("session/prompt"))
        .map(|f| {
            let text: String = f.params["prompt"]
                .as_array()
                .map(|blocks| {
                    blocks
                        .iter()
                        .filter_map(|b| b["text"].as_str())
                        .collect::<Vec<_>>()
                        .join("\n")
                })
                .unwrap_or_default();
            PromptCost {
                bytes: f.bytes,
                context_events: context_entries(&text),
            }
        })
        .collect()
}

/// Milliseconds with one decimal.
pub fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

/// The median of some durations.
pub fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// Times `f`.
pub fn timed<T>(f: impl FnOnce() -> Result<T, BenchError>) -> Result<(T, Duration), BenchError> {
    let t = Instant::now();
    let v = f()?;
    Ok((v, t.elapsed()))
}
