//! Measurement scenarios for the fork's patch series.
//!
//! Both binaries drive real `buzz-acp` binaries (the baseline build and the
//! patched build, given by path) against the real test agent through the same
//! scripted scenario, and read what crossed the wire from the agent's wire
//! log. They compare the two side by side in one run; nothing here asserts a
//! speed (these are measurements, not tests).

pub mod observer;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use acp_test_agent::harness::{WireFrame, read_wire_log};
use buzz_acp::relay::Event;
use buzz_acp::testing::{AGENT, Running, Scenario, context_entries, wait_until_every};
use buzz_session_store::{KeyScheme, PgStore, ReceiptStore, StoreScope, StoredReceipt};

/// The binaries a measurement of the patched harness drives (`--harness`, `--agent`).
#[derive(Debug, clap::Args)]
pub struct Binaries {
    /// The patched buzz-acp binary.
    #[arg(long)]
    pub harness: PathBuf,
    /// The acp-test-agent binary.
    #[arg(long)]
    pub agent: PathBuf,
}

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

/// The requests among `frames` that open or reopen a session (`session/new`, `session/load`,
/// `session/resume`), in wire order: none for a turn served hot, on the live session.
pub fn session_setups(frames: &[WireFrame]) -> Vec<&WireFrame> {
    frames
        .iter()
        .filter(|f| {
            matches!(
                f.method.as_deref(),
                Some("session/new" | "session/load" | "session/resume")
            )
        })
        .collect()
}

/// The wall clock in milliseconds since the Unix epoch (the wire log's clock).
pub fn unix_ms() -> u64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

/// The receipt store scope of a scenario's harness: its relay's identity and the agent's key.
pub fn store_scope(s: &Scenario) -> Result<StoreScope, BenchError> {
    let relay = ctx(
        buzz_acp::relay::FileRelay::open(&s.relay_dir),
        "opening the relay",
    )?;
    Ok(StoreScope {
        relay: buzz_acp::relay::Relay::identity(&relay).to_string(),
        agent_pubkey: AGENT.to_string(),
    })
}

/// Waits (reading the PostgreSQL store at `url` every 100 ms, at most `timeout`) until a receipt
/// of `scope` records `trigger` as delivered: the commit of the turn that answered it, and every
/// write the harness queued before it, has landed. Returns that receipt.
pub fn wait_delivered(
    url: &str,
    scope: &StoreScope,
    trigger: &str,
    timeout: Duration,
) -> Result<StoredReceipt, BenchError> {
    let landed = || -> Option<StoredReceipt> {
        let store = PgStore::open_read_only(url, scope.clone(), KeyScheme::Scope).ok()?;
        store.receipts().ok()?.into_iter().find(|r| {
            r.record
                .delivery
                .as_ref()
                .is_some_and(|d| d.delivered_event_ids.iter().any(|id| id == trigger))
        })
    };
    wait_until_every(timeout, Duration::from_millis(100), landed).ok_or_else(|| {
        BenchError(format!(
            "no receipt in the store recorded {trigger} as delivered within {timeout:?}"
        ))
    })
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

/// The `q` quantile of some durations (the nearest rank: 0.5 is the upper median, 0.9 the p90).
pub fn quantile(mut v: Vec<Duration>, q: f64) -> Duration {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    v.get(i).copied().unwrap_or_default()
}

/// Times `f`.
pub fn timed<T>(f: impl FnOnce() -> Result<T, BenchError>) -> Result<(T, Duration), BenchError> {
    let t = Instant::now();
    let v = f()?;
    Ok((v, t.elapsed()))
}

/// What the harness logs once it is connected to a Nostr relay, authenticated and subscribed:
/// from then on a mention posted there reaches it.
pub const SUBSCRIBED: &str = "connected, authenticated and subscribed";

/// Waits, up to `timeout`, until the harness logging to `log` says it is [`SUBSCRIBED`]; the
/// error carries its log.
pub async fn wait_subscribed(log: &Path, timeout: Duration) -> Result<(), BenchError> {
    let deadline = Instant::now() + timeout;
    loop {
        if std::fs::read_to_string(log).is_ok_and(|l| l.contains(SUBSCRIBED)) {
            return Ok(());
        }
        if Instant::now() > deadline {
            let log = std::fs::read_to_string(log).unwrap_or_default();
            return Err(BenchError(format!("the harness did not subscribe:\n{log}")));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
