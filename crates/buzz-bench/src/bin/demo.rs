//! Plays the bundled demo relay against one or more harness builds: first
//! run, then a restart with a follow-up, and prints the conversation, the
//! session calls each harness made, and whether the agent that answered the
//! follow-up still knew the facts the thread had told it.
//!
//! The bundled thread tells the agent a code word in a reply, and thirteen
//! more replies follow before the restart: the code word is older than the
//! context window a new session is given (the root and the last 12 replies),
//! so only a session that survived the restart still knows it. The test
//! agent's answer lists every nonce its session has seen (`nonces=…`).

use std::path::PathBuf;

use acp_test_agent::reply::nonces_in;
use buzz_bench::{BenchError, ctx};
use clap::Parser;

#[derive(Debug, Parser)]
struct Args {
    /// LABEL=PATH of a buzz-acp binary; repeat to compare.
    #[arg(long = "harness", required = true)]
    harnesses: Vec<String>,
    /// The acp-test-agent binary.
    #[arg(long)]
    agent: PathBuf,
    /// The demo relay directory (events.jsonl, followup.jsonl, channels.json).
    #[arg(long)]
    relay: PathBuf,
}

fn main() -> Result<(), BenchError> {
    let args = Args::parse();
    for spec in &args.harnesses {
        let (label, path) = spec
            .split_once('=')
            .ok_or_else(|| BenchError(format!("--harness {spec:?}: expected LABEL=PATH")))?;
        let (_dir, s) = buzz_bench::scenario()?;
        for file in ["events.jsonl", "channels.json"] {
            ctx(
                std::fs::copy(args.relay.join(file), s.relay_dir.join(file)),
                &format!("copying {file}"),
            )?;
        }
        let told: Vec<String> = s
            .events()
            .iter()
            .flat_map(|e| {
                nonces_in(&e.content)
                    .into_iter()
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .collect();
        let agent = s.agent_command(&args.agent, &[]);
        let harness = PathBuf::from(path);
        s.run_once_ok(&harness, &agent, &[]).map_err(BenchError)?;
        let follow_up = ctx(
            std::fs::read_to_string(args.relay.join("followup.jsonl")),
            "reading followup.jsonl",
        )?;
        let events: Vec<buzz_acp::relay::Event> = follow_up
            .lines()
            .map(serde_json::from_str)
            .collect::<Result<_, _>>()
            .map_err(|e| BenchError(format!("followup.jsonl: {e}")))?;
        ctx(
            buzz_acp::relay::append_events(&s.relay_dir, &events),
            "appending the follow-up",
        )?;
        s.run_once_ok(&harness, &agent, &[]).map_err(BenchError)?;

        println!("== {label}: {path}");
        for event in s.events() {
            let who = if event.pubkey == buzz_acp::testing::AGENT {
                "agent"
            } else {
                &event.pubkey[..8]
            };
            let text: String = event.content.chars().take(150).collect();
            println!("  [{who}] {text}");
        }
        let frames = buzz_bench::wire(&s)?;
        let count = |m: &str| acp_test_agent::harness::count_method(&frames, m);
        println!(
            "  session calls across the restart: session/new ×{}, session/load ×{}",
            count("session/new"),
            count("session/load")
        );
        let answer = events
            .last()
            .and_then(|follow_up| s.reply_to(&follow_up.id))
            .ok_or_else(|| BenchError(format!("{label}: the follow-up was not answered")))?;
        let known = acp_test_agent::reply::seen_nonces(&answer.content);
        for fact in &told {
            let verdict = if known.contains(fact) {
                "kept: the agent that answered after the restart knows it"
            } else {
                "lost: the agent that answered after the restart never saw it"
            };
            println!("  {fact}: {verdict}\n");
        }
    }
    Ok(())
}
