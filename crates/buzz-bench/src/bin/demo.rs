//! Plays the bundled demo thread against one or more harness builds over a Nostr relay (the
//! fork's test relay, started in this process): the harness answers the thread, is stopped and
//! started again (a restart), and answers a follow-up. Then it prints the conversation, the
//! session calls each harness made, and whether the agent that answered the follow-up still
//! knew the facts the thread had told it.
//!
//! The bundled thread tells the agent a code word in a reply, and thirteen more replies follow
//! before the restart: the code word is older than the context window a new session is given
//! (the root and the last 12 replies), so only a session that survived the restart still knows
//! it. The test agent's answer lists every nonce its session has seen (`nonces=…`).
//!
//! The bundle is written as unsigned events of made-up people (`events.jsonl`,
//! `followup.jsonl`, `channels.json`): each person gets a key of their own here, and every
//! message is signed and posted through the relay's REST side as a Buzz client would, its `e`
//! tags pointing at the posted events and its mention at the agent. The thread's author is the
//! agent's owner, the only person the harness answers by default.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use acp_test_agent::reply::nonces_in;
use buzz_acp::relay::Event;
use buzz_acp::testing::{
    ChatMessage, NostrRelayArgs, Scenario, agent_messages, answer_among, post_chat,
};
use buzz_bench::{BenchError, ctx};
use buzz_test_relay::{RelayConfig, TestRelay};
use clap::Parser;
use nostr::{Keys, Timestamp};
use serde::Deserialize;

/// How long the demo waits for the harness to subscribe, or for an answer.
const WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, Parser)]
struct Args {
    /// LABEL=PATH of a buzz-acp binary; repeat to compare.
    #[arg(long = "harness", required = true)]
    harnesses: Vec<String>,
    /// The acp-test-agent binary.
    #[arg(long)]
    agent: PathBuf,
    /// The demo thread's directory (events.jsonl, followup.jsonl, channels.json).
    #[arg(long)]
    relay: PathBuf,
}

/// `channels.json`: the channel the thread is in.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Channels {
    channels: HashMap<String, ChannelInfo>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChannelInfo {
    name: String,
    kind: String,
}

/// The bundled thread: its channel, what is said before the restart, and the follow-up after
/// it (the last message of `followup.jsonl`; the others are said before the restart too).
struct Bundle {
    channel: (String, ChannelInfo),
    before_restart: Vec<Event>,
    follow_up: Event,
}

impl Bundle {
    fn read(dir: &Path) -> Result<Bundle, BenchError> {
        let read = |file: &str| {
            ctx(
                std::fs::read_to_string(dir.join(file)),
                &format!("reading {file}"),
            )
        };
        let channels: Channels = serde_json::from_str(&read("channels.json")?)
            .map_err(|e| BenchError(format!("channels.json: {e}")))?;
        let mut channel = channels.channels.into_iter();
        let channel = match (channel.next(), channel.next()) {
            (Some(only), None) => only,
            _ => {
                return Err(BenchError(
                    "channels.json: expected exactly one channel".into(),
                ));
            }
        };
        let events = |file: &str| -> Result<Vec<Event>, BenchError> {
            read(file)?
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(|l| serde_json::from_str(l).map_err(|e| BenchError(format!("{file}: {e}"))))
                .collect()
        };
        let mut before_restart = events("events.jsonl")?;
        let mut after = events("followup.jsonl")?;
        let follow_up = after
            .pop()
            .ok_or_else(|| BenchError("followup.jsonl is empty".into()))?;
        before_restart.extend(after);
        Ok(Bundle {
            channel,
            before_restart,
            follow_up,
        })
    }
}

/// The demo's relay, its people and what was said, for one harness build.
struct Stage {
    relay: TestRelay,
    agent: Keys,
    owner: Keys,
    /// The bundle's people, by their made-up public key.
    people: HashMap<String, Keys>,
    /// The bundle's made-up pubkey of the agent (what its mentions name).
    bundled_agent: String,
    /// Bundled event id → the id of the event posted for it.
    posted_ids: HashMap<String, String>,
    /// The conversation as it happened: (who, text).
    transcript: Vec<(String, String)>,
    channel: String,
}

impl Stage {
    async fn start(bundle: &Bundle) -> Result<Stage, BenchError> {
        let relay = ctx(
            TestRelay::start(RelayConfig::default()).await,
            "starting the relay",
        )?;
        let agent = Keys::generate();
        let (channel, info) = &bundle.channel;
        ctx(
            relay
                .add_channel(channel, &info.name, &info.kind, &[agent.public_key()])
                .await,
            "seeding the channel",
        )?;
        let root = bundle
            .before_restart
            .first()
            .ok_or_else(|| BenchError("events.jsonl is empty".into()))?;
        let bundled_agent = root
            .tag_values("p")
            .next()
            .ok_or_else(|| BenchError("the thread's root mentions nobody".into()))?
            .to_string();
        let mut people: HashMap<String, Keys> = HashMap::new();
        for event in bundle.before_restart.iter().chain([&bundle.follow_up]) {
            people
                .entry(event.pubkey.clone())
                .or_insert_with(Keys::generate);
        }
        let owner = people[&root.pubkey].clone();
        Ok(Stage {
            relay,
            agent,
            owner,
            people,
            bundled_agent,
            posted_ids: HashMap::new(),
            transcript: Vec::new(),
            channel: channel.clone(),
        })
    }

    /// Posts the bundled `event` as its author, now; waits for the agent's answer when it
    /// mentions the agent.
    async fn say(&mut self, event: &Event) -> Result<(), BenchError> {
        let refs = event.thread_refs();
        let posted = |id: Option<String>| -> Result<Option<String>, BenchError> {
            id.map(|id| {
                self.posted_ids
                    .get(&id)
                    .cloned()
                    .ok_or_else(|| BenchError(format!("{}: answers an unknown event", event.id)))
            })
            .transpose()
        };
        let (root, parent) = (posted(refs.root)?, posted(refs.reply)?);
        let mentions = event.tag_values("p").any(|p| p == self.bundled_agent);
        let message = ChatMessage {
            channel: &self.channel,
            mention: mentions.then(|| self.agent.public_key()),
            text: &event.content,
            thread: root.as_deref().zip(parent.as_deref()),
            at: Timestamp::now(),
        };
        let author = &self.people[&event.pubkey];
        let sent = ctx(
            post_chat(&self.relay.ws_url(), author, message).await,
            "posting",
        )?;
        self.posted_ids.insert(event.id.clone(), sent.id.to_hex());
        self.transcript
            .push((event.pubkey[..8].to_string(), event.content.clone()));
        if mentions {
            let answer = self.answer_to(&sent.id.to_hex()).await?;
            self.transcript.push(("agent".into(), answer.content));
        }
        Ok(())
    }

    /// Waits for the agent's answer to the event `id`.
    async fn answer_to(&self, id: &str) -> Result<Event, BenchError> {
        let deadline = Instant::now() + WAIT;
        loop {
            let published = ctx(
                agent_messages(&self.relay.ws_url(), &self.owner, self.agent.public_key()).await,
                "reading the agent's messages",
            )?;
            if let Some(answer) = answer_among(published, id) {
                return Ok(answer);
            }
            if Instant::now() > deadline {
                return Err(BenchError(format!("no answer to {id} within {WAIT:?}")));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The harness on the stage's relay, subscribed; killed when dropped.
struct Harness(std::process::Child);

impl Harness {
    async fn start(
        s: &Scenario,
        binary: &Path,
        agent: &Path,
        stage: &Stage,
        log: &Path,
    ) -> Result<Harness, BenchError> {
        let file = ctx(std::fs::File::create(log), "creating the harness log")?;
        let (url, secret, owner) = (
            stage.relay.ws_url(),
            stage.agent.secret_key().to_secret_hex(),
            stage.owner.public_key().to_hex(),
        );
        let relay = NostrRelayArgs {
            url: &url,
            secret_key_hex: &secret,
            owner_hex: &owner,
        };
        let mut cmd = s.nostr_harness_command(binary, &s.agent_command(agent, &[]), relay, &[]);
        // The patched harness's host-wide lease (`one-harness-per-agent`) stays in the scenario.
        cmd.env("BUZZ_ACP_LEASE_DIR", s.root.join("leases"));
        cmd.stdout(std::process::Stdio::null()).stderr(file);
        let harness = Harness(ctx(cmd.spawn(), "starting buzz-acp")?);
        buzz_bench::wait_subscribed(log, WAIT).await?;
        Ok(harness)
    }

    /// Asks the harness to stop (SIGTERM) and waits for it.
    fn stop(mut self) -> Result<(), BenchError> {
        let pid = self.0.id().to_string();
        let term = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status();
        if !term.is_ok_and(|s| s.success()) {
            ctx(self.0.kill(), "killing buzz-acp")?;
        }
        ctx(self.0.wait(), "waiting for buzz-acp")?;
        Ok(())
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn play(label: &str, path: &Path, args: &Args, bundle: &Bundle) -> Result<(), BenchError> {
    let (_dir, s) = buzz_bench::scenario()?;
    let mut stage = Stage::start(bundle).await?;
    let harness = PathBuf::from(path);

    let first =
        Harness::start(&s, &harness, &args.agent, &stage, &s.root.join("first.log")).await?;
    for event in &bundle.before_restart {
        stage.say(event).await?;
    }
    first.stop()?;
    let second = Harness::start(
        &s,
        &harness,
        &args.agent,
        &stage,
        &s.root.join("second.log"),
    )
    .await?;
    stage.say(&bundle.follow_up).await?;
    second.stop()?;

    println!("== {label}: {path:?}");
    for (who, text) in &stage.transcript {
        let text: String = text.chars().take(150).collect();
        println!("  [{who}] {text}");
    }
    let frames = buzz_bench::wire(&s)?;
    let count = |m: &str| acp_test_agent::harness::count_method(&frames, m);
    println!(
        "  session calls across the restart: session/new ×{}, session/load ×{}",
        count("session/new"),
        count("session/load")
    );
    let (_, answer) = stage
        .transcript
        .last()
        .filter(|(who, _)| who == "agent")
        .ok_or_else(|| BenchError(format!("{label}: the follow-up was not answered")))?;
    let known = acp_test_agent::reply::seen_nonces(answer);
    let told: Vec<&str> = bundle
        .before_restart
        .iter()
        .flat_map(|e| nonces_in(&e.content))
        .collect();
    for fact in told {
        let verdict = if known.iter().any(|k| k == fact) {
            "kept: the agent that answered after the restart knows it"
        } else {
            "lost: the agent that answered after the restart never saw it"
        };
        println!("  {fact}: {verdict}\n");
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), BenchError> {
    let args = Args::parse();
    let bundle = Bundle::read(&args.relay)?;
    for spec in &args.harnesses {
        let (label, path) = spec
            .split_once('=')
            .ok_or_else(|| BenchError(format!("--harness {spec:?}: expected LABEL=PATH")))?;
        play(label, Path::new(path), &args, &bundle).await?;
    }
    Ok(())
}
