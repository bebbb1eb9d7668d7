//! Mention → answer over a real Nostr relay: the baseline and the patched harness side by side
//! in one run.
//!
//! Each run starts, for each build in turn (the order alternates between runs), a fresh test
//! relay in this process, the harness on it (`--relay-url`, the agent's key), and an observer
//! that has subscribed to the agent's replies over its own websocket (NIP-42 authenticated).
//! The owner then posts, through the relay's REST side, a mention that opens a thread (served
//! with `session/new`), and after its answer a follow-up in the same thread (hot on both
//! builds: within one process the baseline keeps the session too). The time measured is from
//! the owner's `POST /events` until the observer receives the answer: the whole path a user
//! sees, through the relay both ways. The table shows medians, the 90th percentile and the
//! ratio patched / baseline.
//!
//! ```sh
//! relay-latency --baseline target/debug/buzz-acp --patched target/patched/buzz-acp \
//!     --agent target/debug/acp-test-agent --runs 15
//! ```

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use buzz_acp::testing::{ChatMessage, Scenario, post_chat};
use buzz_bench::observer::{
    Socket, harness_on_relay, next_message, relay_with_agent, subscribe_to_agent,
};
use buzz_bench::{BenchError, ctx, median, ms, quantile, scenario};
use buzz_test_relay::TestRelay;
use clap::Parser;
use nostr::{Keys, RelayMessage, Timestamp};

const CHANNEL: &str = "0b8e2d4c-1f3a-4c5e-9d7b-2a6f8e1c3b5d";
const WAIT: Duration = Duration::from_secs(30);

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
    /// Repetitions per build.
    #[arg(long, default_value_t = 15)]
    runs: usize,
}

/// A websocket subscribed to the agent's chat events.
struct Observer {
    socket: Socket,
}

impl Observer {
    async fn subscribe(relay: &TestRelay, keys: &Keys, agent: &Keys) -> Result<Self, BenchError> {
        let socket = subscribe_to_agent(&relay.ws_url(), keys, agent).await?;
        Ok(Observer { socket })
    }

    /// Waits for the agent's event answering `trigger` (its `e` tag marked `reply`).
    async fn answer_to(&mut self, trigger: &nostr::Event) -> Result<nostr::Event, BenchError> {
        let id = trigger.id.to_hex();
        loop {
            if let RelayMessage::Event { event, .. } = next_message(&mut self.socket).await? {
                let answers = event.tags.iter().any(|t| {
                    let t = t.as_slice();
                    t.first().map(String::as_str) == Some("e")
                        && t.get(1) == Some(&id)
                        && t.get(3).map(String::as_str) == Some("reply")
                });
                if answers {
                    return Ok(event.into_owned());
                }
            }
        }
    }
}

/// The owner's mention in the channel, posted through the relay's REST side and timed from
/// there; `thread` = (root, parent).
async fn mention(
    relay: &TestRelay,
    owner: &Keys,
    agent: &Keys,
    text: &str,
    thread: Option<(&nostr::Event, &nostr::Event)>,
) -> Result<(nostr::Event, Instant), BenchError> {
    let ids = thread.map(|(root, parent)| (root.id.to_hex(), parent.id.to_hex()));
    let message = ChatMessage {
        channel: CHANNEL,
        mention: Some(agent.public_key()),
        text,
        thread: ids.as_ref().map(|(r, p)| (r.as_str(), p.as_str())),
        at: Timestamp::now(),
    };
    let started = Instant::now();
    let event = ctx(post_chat(&relay.ws_url(), owner, message).await, "posting")?;
    Ok((event, started))
}

/// (mention → answer for a new thread, for a hot follow-up).
async fn sample(harness: &Path, agent_bin: &Path) -> Result<(Duration, Duration), BenchError> {
    let (relay, agent, owner) = relay_with_agent(CHANNEL).await?;
    let (_dir, mut s) = scenario()?;
    // Poll the event queue often, so polling does not drown what is measured.
    s.poll_ms = 2;
    let log_path = s.root.join("harness.log");
    let mut harness = start_harness(&s, harness, agent_bin, &relay, &agent, &owner, &log_path)?;
    let subscribed = buzz_bench::wait_subscribed(&log_path, WAIT).await;
    let result = async {
        subscribed?;
        let mut observer = Observer::subscribe(&relay, &owner, &agent).await?;
        let (root, started) = mention(&relay, &owner, &agent, "plan the release", None).await?;
        let first_answer = observer.answer_to(&root).await?;
        let first = started.elapsed();
        let thread = Some((&root, &first_answer));
        let (follow_up, started) = mention(&relay, &owner, &agent, "and then?", thread).await?;
        observer.answer_to(&follow_up).await?;
        Ok((first, started.elapsed()))
    }
    .await;
    let _ = harness.kill();
    let _ = harness.wait();
    result
}

fn start_harness(
    s: &Scenario,
    harness: &Path,
    agent_bin: &Path,
    relay: &TestRelay,
    agent: &Keys,
    owner: &Keys,
    log_path: &Path,
) -> Result<std::process::Child, BenchError> {
    let mut cmd = harness_on_relay(s, harness, agent_bin, relay, agent, owner, log_path)?;
    ctx(cmd.spawn(), "starting buzz-acp")
}

fn ratio(patched: Duration, baseline: Duration) -> String {
    format!(
        "{:.2}",
        patched.as_secs_f64() / baseline.as_secs_f64().max(1e-9)
    )
}

#[tokio::main]
async fn main() -> Result<(), BenchError> {
    let args = Args::parse();
    let mut baseline = (Vec::new(), Vec::new());
    let mut patched = (Vec::new(), Vec::new());
    for run in 0..args.runs {
        let order = if run % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for is_patched in order {
            let (binary, into) = if is_patched {
                (&args.patched, &mut patched)
            } else {
                (&args.baseline, &mut baseline)
            };
            let (first, hot) = sample(binary, &args.agent).await?;
            into.0.push(first);
            into.1.push(hot);
        }
    }
    println!(
        "| over the test relay, {} runs each (ms) | baseline | patched | patched / baseline |",
        args.runs
    );
    println!("|---|---:|---:|---:|");
    for (label, b, p) in [
        (
            "mention → answer, new thread (median)",
            &baseline.0,
            &patched.0,
        ),
        ("hot follow-up → answer (median)", &baseline.1, &patched.1),
    ] {
        let (bm, pm) = (median(b.clone()), median(p.clone()));
        println!("| {label} | {} | {} | {} |", ms(bm), ms(pm), ratio(pm, bm));
    }
    for (label, b, p) in [
        (
            "mention → answer, new thread (p90)",
            &baseline.0,
            &patched.0,
        ),
        ("hot follow-up → answer (p90)", &baseline.1, &patched.1),
    ] {
        let (bq, pq) = (quantile(b.clone(), 0.9), quantile(p.clone(), 0.9));
        println!("| {label} | {} | {} | {} |", ms(bq), ms(pq), ratio(pq, bq));
    }
    Ok(())
}
