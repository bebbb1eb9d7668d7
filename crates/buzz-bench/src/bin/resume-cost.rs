//! What a resume costs: the context re-sent on the first turn after each
//! restart and idle pool sleep, on the baseline and on the patched harness,
//! side by side.
//!
//! One thread of 31 events (a root and six rounds of four chatter messages
//! plus a mention) is played against each harness. A first process answers
//! the root; then three harness processes run in turn, and in each the first
//! mention comes right after a restart and the second right after an idle
//! pool sleep (lazy pool, 1 s bound). For the
//! first prompt after each of the six resumes the table shows how many
//! history events its `<thread-context>` re-sent and how many bytes the
//! `session/prompt` frame held.
//!
//! ```sh
//! resume-cost --harness baseline=target/debug/buzz-acp \
//!             --harness patched=target/patched/buzz-acp \
//!             --agent target/debug/acp-test-agent
//! ```

use std::path::PathBuf;

use buzz_bench::{BenchError, Subject, prompt_costs, reply, scenario, start, wire};
use clap::Parser;

#[derive(Debug, Parser)]
struct Args {
    /// LABEL=PATH of a buzz-acp binary; repeat to compare.
    #[arg(long = "harness", required = true)]
    harnesses: Vec<String>,
    /// The acp-test-agent binary.
    #[arg(long)]
    agent: PathBuf,
}

/// Per resume: (kind, context events, prompt bytes); and totals.
struct Run {
    resumes: Vec<(String, usize, u64)>,
    total_bytes: u64,
    total_context: usize,
    prompts: usize,
}

fn play(subject: &Subject, agent: &std::path::Path) -> Result<Run, BenchError> {
    let (_dir, mut s) = scenario()?;
    let flags = ["--lazy-pool", "--idle-pool-sleep", "1"];
    let err = |e: buzz_acp::relay::RelayError| BenchError(e.to_string());
    let root = s
        .post_top("Plan the release for the storage service")
        .map_err(err)?;
    // The first process only answers the root: that turn is not a resume.
    let first = start(&s, subject, agent, &flags)?;
    reply(&s, &root)?;
    first.stop().map_err(|e| BenchError(e.to_string()))?;
    let mut parent = root.clone();
    let mut first_after: Vec<(String, usize)> = Vec::new();
    let mut round = 0;
    for _process in 0..3 {
        let running = start(&s, subject, agent, &flags)?;
        for kind in ["restart", "idle pool sleep"] {
            if kind == "idle pool sleep" {
                let sleeps = s.observer_records("pool_sleep").len();
                buzz_acp::testing::wait_until(buzz_bench::WAIT, || {
                    (s.observer_records("pool_sleep").len() > sleeps).then_some(())
                })
                .ok_or_else(|| BenchError("the pool never slept".into()))?;
            }
            for i in 0..4 {
                parent = s
                    .post_chatter(
                        &root,
                        &parent,
                        &format!("round {round} note {i}: details of step {round}"),
                    )
                    .map_err(err)?;
            }
            let before = prompt_costs(&wire(&s)?).len();
            let q = s
                .post_reply(&root, &parent, &format!("round {round}: what next?"))
                .map_err(err)?;
            parent = reply(&s, &q)?;
            first_after.push((kind.to_string(), before));
            round += 1;
        }
        running.stop().map_err(|e| BenchError(e.to_string()))?;
    }
    let costs = prompt_costs(&wire(&s)?);
    let resumes = first_after
        .into_iter()
        .map(|(kind, i)| {
            let c = &costs[i];
            (kind, c.context_events, c.bytes)
        })
        .collect();
    Ok(Run {
        resumes,
        total_bytes: costs.iter().map(|c| c.bytes).sum(),
        total_context: costs.iter().map(|c| c.context_events).sum(),
        prompts: costs.len(),
    })
}

fn main() -> Result<(), BenchError> {
    let args = Args::parse();
    let subjects: Vec<Subject> = args
        .harnesses
        .iter()
        .map(|h| {
            let (label, path) = h
                .split_once('=')
                .ok_or_else(|| BenchError(format!("--harness {h:?}: expected LABEL=PATH")))?;
            Ok(Subject {
                label: label.to_string(),
                harness: PathBuf::from(path),
            })
        })
        .collect::<Result<_, BenchError>>()?;
    let runs: Vec<Run> = subjects
        .iter()
        .map(|s| play(s, &args.agent))
        .collect::<Result<_, _>>()?;

    let mut header = String::from("| resume | after |");
    let mut rule = String::from("|---|---|");
    for s in &subjects {
        header.push_str(&format!(
            " {0} context events | {0} prompt bytes |",
            s.label
        ));
        rule.push_str("---:|---:|");
    }
    println!("{header}\n{rule}");
    for (i, (kind, _, _)) in runs[0].resumes.iter().enumerate() {
        let mut line = format!("| {} | {kind} |", i + 1);
        for run in &runs {
            let (_, events, bytes) = &run.resumes[i];
            line.push_str(&format!(" {events} | {bytes} |"));
        }
        println!("{line}");
    }
    let mut sums = String::from("| **sum of the 6** | |");
    for run in &runs {
        let events: usize = run.resumes.iter().map(|r| r.1).sum();
        let bytes: u64 = run.resumes.iter().map(|r| r.2).sum();
        sums.push_str(&format!(" **{events}** | **{bytes}** |"));
    }
    println!("{sums}");
    let mut totals = String::from("| all prompts of the run | |");
    for run in &runs {
        totals.push_str(&format!(
            " {} in {} prompts | {} |",
            run.total_context, run.prompts, run.total_bytes
        ));
    }
    println!("{totals}");
    Ok(())
}
