//! The real-adapter tier: codex-acp, opencode and claude-agent-acp, offline against the fake
//! LLM, driven through the real buzz-acp binaries over a real Nostr relay.
//!
//! Run with `scripts/real-adapters` (it installs the adapters, builds both harnesses and runs
//! these ignored tests). Every scenario starts the fork's test relay in the test's process
//! ([`relay_rig`]): the harness connects to it as the agent (`--relay-url`, its key in
//! `BUZZ_PRIVATE_KEY`), the owner and someone else post signed events through its REST side,
//! and what the agent published (answers, notices) is read back from it. Like upstream's, the
//! harness hears only what is posted while it is subscribed: a restart is stop, then start, then
//! the next message; what a `--once` run did on the file relay is a run of its own
//! ([`Rig::one_turn`]: start, post, wait for the answer, stop); replies that mention nobody may
//! be posted while the harness is stopped (it reads them as history when it starts). Every
//! scenario proves what the MODEL received, from the tag the fake LLM puts in each reply
//! (`[fake-llm user_messages=N nonces=…]`), and what crossed the wire (the observer log):
//!
//! - `*_resumes_after_restart`: a fact told early in a thread, far outside the context window
//!   (`--context-message-limit 3`), reaches the model after a restart on the patched harness;
//!   the baseline's fresh session has lost it (side by side).
//! - `*_resumes_after_idle_pool_sleep`: the same across an idle pool sleep of a running harness
//!   (`--lazy-pool --idle-pool-sleep 1`), baseline side by side, each side's path checked on the
//!   wire (why this cell once failed over the relay: [`idle_sleep_scenario`]).
//! - `*_continues_hot`: a follow-up on a running harness continues the live session: no
//!   `session/new`, `session/load` or `session/resume` for it.
//! - [`continuity`]: a lost transcript, a turn-limit rotation across a restart, a model switch
//!   in place (and a model the agent does not offer) and a context overflow, proven on the wire,
//!   in what the fake LLM received and in the notices on the relay.
//!
//! Modules: [`rig`] (one scenario's fake LLM, harness files, agent home and readings),
//! [`relay_rig`] (the relay, posting and reading there, running the harness on it),
//! [`continuity`].
//! After every harness exit, no process of the agent's throw-away home may be left.

use buzz_acp::testing::wait_until;
use std::path::Path;

use fake_llm::Observation;
use real_adapters::Adapter;
use real_adapters::binaries::{baseline_harness, patched_harness};
use real_adapters::wire::Wire;

mod continuity;
mod relay_rig;
mod rig;

use continuity::{
    lost_transcript_gets_the_whole_thread, switches_model_in_place,
    turn_limit_rotates_with_a_handoff_across_a_restart,
};
use relay_rig::RelaySide;
use rig::{REPLY, Result, Rig, fact_for, fail, last_prompted_session};

/// The context window of the restore scenarios: the root plus the last three replies.
const WINDOW: &[&str] = &["--context-message-limit", "3"];

/// Over a real Nostr relay: teaches a fact in a thread to a running harness, stops it, buries the
/// fact under chatter written meanwhile, starts the harness again for a question, and returns
/// what the model saw when answering it.
fn restart_scenario(adapter: Adapter, harness: &Path, fact: &str) -> Result<Observation> {
    let rig = Rig::new(adapter)?;
    let side = RelaySide::start()?;
    let live = rig.live_on_relay(&side, harness, WINDOW)?;
    let root = side.say(&side.owner, "We are planning the storage migration.", None)?;
    let (r0, _) = rig.relay_reply_to(&side, &root, REPLY)?;
    let told = side.say(
        &side.owner,
        &format!("Remember the code word {fact}."),
        Some((&root, &r0)),
    )?;
    let (r1, seen) = rig.relay_reply_to(&side, &told, REPLY)?;
    if !seen.nonces.contains(fact) {
        return Err(fail(format!("the model never received {fact}: {seen:?}")));
    }
    live.stop()?;
    rig.assert_no_agent_left()?;
    let mut last = r1;
    for i in 0..4 {
        let text = format!("chatter {i}: nothing to remember here");
        last = side.say(&side.someone, &text, Some((&root, &last)))?;
    }
    let live = rig.live_on_relay(&side, harness, WINDOW)?;
    let question = side.say(&side.owner, "What was the code word?", Some((&root, &last)))?;
    let (_, seen) = rig.relay_reply_to(&side, &question, REPLY)?;
    live.stop()?;
    rig.assert_no_agent_left()?;
    Ok(seen)
}

fn resumes_after_restart(adapter: Adapter) -> Result<()> {
    let fact = fact_for(adapter, 1);
    let patched = restart_scenario(adapter, &patched_harness()?, &fact)?;
    let baseline = restart_scenario(adapter, &baseline_harness()?, &fact)?;
    assert!(
        patched.nonces.contains(&fact),
        "{adapter}: after a restart the patched harness's model must still receive {fact}: {patched:?}"
    );
    assert!(
        !baseline.nonces.contains(&fact),
        "{adapter}: the baseline's fresh session cannot know {fact} (it is outside the window): {baseline:?}"
    );
    Ok(())
}

/// What the question after an idle pool sleep met.
struct AfterSleep {
    /// What the model received when answering it.
    seen: Observation,
    /// The session the fact was told in.
    fact_session: String,
    /// What the harness exchanged with the agent from the question on.
    wire: Wire,
}

/// Over a real Nostr relay: teaches a fact to a running harness, buries it under chatter, waits
/// for the pool to sleep, asks, and returns what the question met.
///
/// The event to wait for is the pool's sleep after the fact's turn: the observer's last pool
/// record is a `pool_sleep` once the fact is answered. Any earlier sleep was followed by a spawn
/// (the fact's turn needed a worker, and a sleep takes them all), so the last record can only
/// be a sleep when no worker has lived since. Both harnesses sleep on their own clock (the
/// baseline counts from the last admitted message, so after a first turn longer than the bound
/// it sleeps at once, block/buzz#6378; the patched one from the end of the last turn); the
/// record is what they share.
///
/// Why the baseline's side was not settled over the relay before (codex-acp answered the
/// question with the code word, `user_messages=2`): the question did run in a fresh session
/// after the sleep (`user_messages=2` is what codex-acp reports for a fresh session: its
/// environment context is a user message too), but the window handed to it held the code word.
/// The harness dates its reply a second after its trigger when it answers within that second,
/// and the chatter, written right after that reply, was dated a second earlier; the model of
/// upstream up to 0.11.5 sorted the relay's history by `created_at` (ties by depth in the reply
/// chain), so both of the agent's own replies sorted after the chatter into the window's last
/// three, and the answer to the fact echoes it (`nonces=walrus-7302` in the fake LLM's tag).
/// Seen on the wire of the 0.11.5 baseline (14 runs of 15 on 2026-12-05: the question's
/// `session/new` prompt showed `chatter 3` before both replies); fixed by 0.11.6, which sorts
/// by the latest `created_at` along the reply chain. The scenario now also checks each side's
/// path on the wire: the baseline answers in a new session whose prompt does not carry the fact,
/// the patched harness in the fact's session, restored.
fn idle_sleep_scenario(adapter: Adapter, harness: &Path, fact: &str) -> Result<AfterSleep> {
    let rig = Rig::new(adapter)?;
    let side = RelaySide::start()?;
    let mut flags = WINDOW.to_vec();
    flags.extend(["--lazy-pool", "--idle-pool-sleep", "1"]);
    let live = rig.live_on_relay(&side, harness, &flags)?;
    let owner = &side.owner;
    let root = side.say(owner, "We are planning the storage migration.", None)?;
    let (r0, _) = rig.relay_reply_to(&side, &root, REPLY)?;
    let text = format!("Remember the code word {fact}.");
    let told = side.say(owner, &text, Some((&root, &r0)))?;
    let (r1, _) = rig.relay_reply_to(&side, &told, REPLY)?;
    let fact_session = last_prompted_session(&rig.wire()?)?;
    let last = side.chatter(&root, r1, 4)?;
    wait_until(REPLY, || rig.pool_is_asleep().then_some(()))
        .ok_or_else(|| fail(format!("{adapter}: the pool never went to sleep")))?;
    let mark = rig.wire()?.len();
    let question = side.say(owner, "What was the code word?", Some((&root, &last)))?;
    let (_, seen) = rig.relay_reply_to(&side, &question, REPLY)?;
    live.stop()?;
    rig.assert_no_agent_left()?;
    Ok(AfterSleep {
        seen,
        fact_session,
        wire: rig.wire()?.since(mark),
    })
}

fn resumes_after_idle_pool_sleep(adapter: Adapter) -> Result<()> {
    let fact = fact_for(adapter, 2);
    let patched = idle_sleep_scenario(adapter, &patched_harness()?, &fact)?;
    let baseline = idle_sleep_scenario(adapter, &baseline_harness()?, &fact)?;
    assert!(
        patched.seen.nonces.contains(&fact),
        "{adapter}: after an idle pool sleep the patched harness's model must still receive {fact}: {:?}",
        patched.seen
    );
    let restored = ["session/resume", "session/load"]
        .iter()
        .flat_map(|m| patched.wire.exchanges(m))
        .any(|e| e.request.session_id() == Some(patched.fact_session.as_str()) && e.succeeded());
    let prompted: Vec<String> = patched.wire.prompts().into_iter().map(|p| p.1).collect();
    assert!(
        restored && prompted == [patched.fact_session.clone()],
        "{adapter}: the patched harness must restore the fact's session {} for the question: {:?}, prompts to {prompted:?}",
        patched.fact_session,
        patched.wire.methods_sent()
    );
    let opened = baseline.wire.sessions_opened();
    let prompts = baseline.wire.prompts();
    assert!(
        opened.len() == 1 && prompts.len() == 1 && prompts[0].1 == opened[0],
        "{adapter}: the baseline answers in a new session: {:?}",
        baseline.wire.methods_sent()
    );
    assert!(
        !prompts[0].2.contains(&fact),
        "{adapter}: the baseline's window (the root and the last three replies) must not carry {fact}: {}",
        prompts[0].2
    );
    assert!(
        !baseline.seen.nonces.contains(&fact),
        "{adapter}: the baseline's session died with the pool: {:?}",
        baseline.seen
    );
    Ok(())
}

fn continues_hot(adapter: Adapter) -> Result<()> {
    let harness = patched_harness()?;
    let fact = fact_for(adapter, 4);
    let rig = Rig::new(adapter)?;
    let side = RelaySide::start()?;
    let live = rig.live_on_relay(&side, &harness, WINDOW)?;
    let root = side.say(
        &side.owner,
        &format!("Remember the code word {fact}."),
        None,
    )?;
    let (r0, _) = rig.relay_reply_to(&side, &root, REPLY)?;
    let before = rig.methods_sent();
    let requests_before = rig.llm.requests()?.len();
    let follow_up = side.say(
        &side.owner,
        "And what was the code word?",
        Some((&root, &r0)),
    )?;
    let (_, seen) = rig.relay_reply_to(&side, &follow_up, REPLY)?;
    live.stop()?;
    let after = rig.methods_sent();
    let for_follow_up = &after[before.len()..];
    assert!(
        for_follow_up.iter().all(|m| !matches!(
            m.as_str(),
            "session/new" | "session/load" | "session/resume" | "initialize"
        )),
        "{adapter}: a hot follow-up must continue the live session: {for_follow_up:?}"
    );
    assert!(
        for_follow_up.iter().any(|m| m == "session/prompt"),
        "{adapter}: {for_follow_up:?}"
    );
    assert!(seen.nonces.contains(&fact), "{adapter}: {seen:?}");
    assert!(rig.llm.requests()?.len() > requests_before);
    rig.assert_no_agent_left()?;
    Ok(())
}

macro_rules! tier {
    ($($name:ident => $scenario:ident($adapter:expr);)*) => {$(
        #[test]
        #[ignore = "real adapters: run scripts/real-adapters"]
        fn $name() -> Result<()> {
            $scenario($adapter)
        }
    )*};
}

tier! {
    codex_resumes_after_restart => resumes_after_restart(Adapter::Codex);
    opencode_resumes_after_restart => resumes_after_restart(Adapter::Opencode);
    claude_resumes_after_restart => resumes_after_restart(Adapter::Claude);
    codex_resumes_after_idle_pool_sleep => resumes_after_idle_pool_sleep(Adapter::Codex);
    opencode_resumes_after_idle_pool_sleep => resumes_after_idle_pool_sleep(Adapter::Opencode);
    claude_resumes_after_idle_pool_sleep => resumes_after_idle_pool_sleep(Adapter::Claude);
    codex_continues_hot => continues_hot(Adapter::Codex);
    opencode_continues_hot => continues_hot(Adapter::Opencode);
    claude_continues_hot => continues_hot(Adapter::Claude);
    codex_lost_transcript_gets_the_whole_thread => lost_transcript_gets_the_whole_thread(Adapter::Codex);
    opencode_lost_transcript_gets_the_whole_thread => lost_transcript_gets_the_whole_thread(Adapter::Opencode);
    claude_lost_transcript_gets_the_whole_thread => lost_transcript_gets_the_whole_thread(Adapter::Claude);
    codex_turn_limit_rotates_with_a_handoff_across_a_restart => turn_limit_rotates_with_a_handoff_across_a_restart(Adapter::Codex);
    opencode_turn_limit_rotates_with_a_handoff_across_a_restart => turn_limit_rotates_with_a_handoff_across_a_restart(Adapter::Opencode);
    claude_turn_limit_rotates_with_a_handoff_across_a_restart => turn_limit_rotates_with_a_handoff_across_a_restart(Adapter::Claude);
    codex_switches_model_in_place => switches_model_in_place(Adapter::Codex);
    opencode_switches_model_in_place => switches_model_in_place(Adapter::Opencode);
    claude_switches_model_in_place => switches_model_in_place(Adapter::Claude);
}

#[test]
#[ignore = "real adapters: run scripts/real-adapters"]
fn claude_unoffered_model_switch_keeps_the_session() -> Result<()> {
    // claude-agent-acp refuses a model value that neither is in its select nor shares a word
    // with one (it resolves "test-unlisted" to "test-large").
    continuity::unoffered_model_switch_keeps_the_session(Adapter::Claude, "gpt-4o")
}

#[test]
#[ignore = "real adapters: run scripts/real-adapters"]
fn opencode_unoffered_model_switch_keeps_the_session() -> Result<()> {
    // opencode names its models `provider/model`: the bare name is not one of them.
    continuity::unoffered_model_switch_keeps_the_session(Adapter::Opencode, "test-large")
}

#[test]
#[ignore = "real adapters: run scripts/real-adapters"]
fn codex_context_overflow_is_answered() -> Result<()> {
    continuity::context_overflow_is_answered(Adapter::Codex).map(drop)
}

#[test]
#[ignore = "real adapters: run scripts/real-adapters"]
fn opencode_context_overflow_is_answered() -> Result<()> {
    continuity::context_overflow_is_answered(Adapter::Opencode).map(drop)
}

#[test]
#[ignore = "real adapters: run scripts/real-adapters"]
fn claude_context_overflow_is_answered() -> Result<()> {
    continuity::context_overflow_is_answered(Adapter::Claude).map(drop)
}
