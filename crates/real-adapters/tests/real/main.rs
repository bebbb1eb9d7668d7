//! The real-adapter tier: codex-acp, opencode and claude-agent-acp, offline against the fake
//! LLM, driven through the real buzz-acp binaries by the file relay.
//!
//! Run with `scripts/real-adapters` (it installs the adapters, builds both harnesses and runs
//! these ignored tests). Every scenario proves what the MODEL received, from the tag the fake
//! LLM puts in each reply (`[fake-llm user_messages=N nonces=…]`):
//!
//! - `*_resumes_after_restart`, over a real Nostr relay ([`relay_rig`]): a fact told early in a
//!   thread, far outside the context window (`--context-message-limit 3`), reaches the model
//!   after a restart on the patched harness; the baseline's fresh session has lost it (side by
//!   side).
//! - `*_resumes_after_idle_pool_sleep`: the same across an idle pool sleep of a running harness
//!   (`--lazy-pool --idle-pool-sleep 1`), baseline side by side. Still on the file relay: moved
//!   to the relay, the baseline with codex-acp once answered the question in the session that
//!   had the fact (`user_messages=2`), so the baseline's side of this cell is not settled there
//!   yet (its early sleep after a long first turn, block/buzz#6378, is the likely cause).
//! - `*_continues_hot`, over the relay: a follow-up on a running harness continues the live
//!   session: no `session/new`, `session/load` or `session/resume` for it.
//! - [`continuity`]: a lost transcript, a turn-limit rotation across a restart and a model
//!   switch in place (and, where the agent refuses it, a rotation with a handoff), proven on the
//!   wire and in what the fake LLM received.
//!
//! Modules: [`rig`] (one scenario's fake LLM, relay, agent home and readings), [`relay_rig`] (the
//! same over the test relay), [`continuity`].
//! After every harness exit, no process of the agent's throw-away home may be left.

use buzz_acp::testing::wait_until;
use std::path::Path;

use fake_llm::Observation;
use real_adapters::Adapter;
use real_adapters::binaries::{baseline_harness, patched_harness};

mod continuity;
mod relay_rig;
mod rig;

use continuity::{
    lost_transcript_gets_the_whole_thread, switches_model_in_place,
    turn_limit_rotates_with_a_handoff_across_a_restart,
};
use relay_rig::RelaySide;
use rig::{REPLY, Result, Rig, fact_for, fail};

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

/// Teaches a fact to a running harness, lets the pool sleep, asks, and returns what the model
/// saw when answering.
fn idle_sleep_scenario(adapter: Adapter, harness: &Path, fact: &str) -> Result<Observation> {
    let mut rig = Rig::new(adapter)?;
    let mut flags = WINDOW.to_vec();
    flags.extend(["--lazy-pool", "--idle-pool-sleep", "1"]);
    let running = rig
        .s
        .start(harness, &rig.agent.command(), &flags)
        .map_err(|e| fail(e.to_string()))?;
    let root = rig.post_top("We are planning the storage migration.")?;
    let (r0, _) = rig.reply_to(&root, REPLY)?;
    let told = rig.post_reply(&root, &r0, &format!("Remember the code word {fact}."))?;
    let (r1, _) = rig.reply_to(&told, REPLY)?;
    let last = rig.post_chatter(&root, r1, 4)?;
    // The pool must be asleep now: a sleep recorded after the last spawn. (A sleep seen
    // earlier proves nothing: the baseline may sleep right after a long first turn and spawn
    // a fresh agent for the fact, #6378.)
    wait_until(REPLY, || rig.pool_is_asleep().then_some(()))
        .ok_or_else(|| fail(format!("{adapter}: the pool never went to sleep")))?;
    let question = rig.post_reply(&root, &last, "What was the code word?")?;
    let (_, seen) = rig.reply_to(&question, REPLY)?;
    running.stop().map_err(|e| fail(e.to_string()))?;
    rig.assert_no_agent_left()?;
    Ok(seen)
}

fn resumes_after_idle_pool_sleep(adapter: Adapter) -> Result<()> {
    let fact = fact_for(adapter, 2);
    let patched = idle_sleep_scenario(adapter, &patched_harness()?, &fact)?;
    let baseline = idle_sleep_scenario(adapter, &baseline_harness()?, &fact)?;
    assert!(
        patched.nonces.contains(&fact),
        "{adapter}: after an idle pool sleep the patched harness's model must still receive {fact}: {patched:?}"
    );
    assert!(
        !baseline.nonces.contains(&fact),
        "{adapter}: the baseline's session died with the pool: {baseline:?}"
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
