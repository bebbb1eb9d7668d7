//! Continuity across session changes with real adapters (patches `continuity-handoff` and
//! `model-switch-in-place`), on the patched harness, over the test relay ([`crate::relay_rig`]):
//! the owner posts, the harness answers as the agent, and everything is read back from the relay.
//! Where a scenario needs a restart, each message is answered by a run of its own
//! ([`Rig::one_turn`]: start, post, wait for the answer, stop), and the replies that bury the
//! fact are posted while the harness is stopped (history it reads at its next start).
//!
//! Each scenario builds the thread the continuity guards use: a root, a reply that tells the
//! agent a fact, then [`BURY`] replies that do not mention the agent, so the fact is older than
//! upstream's default window (the root and the last 12 replies) and only the agent's session,
//! a handoff or the whole thread can still carry it. Then the session is lost, retired or
//! reconfigured, and the question comes. What is proven, and from where:
//!
//! - the wire (the harness's observer log, [`real_adapters::wire`]): which requests went to
//!   which session and what the agent answered;
//! - what the model received: the fake LLM's tag in the answer and its request log;
//! - the thread on the relay: the answer, and the notices the harness posted about the question
//!   (agent messages that quote it), counted once everything the harness published is there
//!   ([`RelaySide::all_published`]).
//!
//! | Scenario | Adapters | Proves |
//! |---|---|---|
//! | `*_lost_transcript_gets_the_whole_thread` | all three | the stored session was asked for and refused; exactly one new session, whose prompt carries the whole thread; the fact reaches the model; one notice |
//! | `*_turn_limit_rotates_with_a_handoff_across_a_restart` | all three | `--max-turns-per-session 2` with one turn per run of the harness: the session restored for its second turn is retired, and the next run asks it (not a new session) for the handoff, once; a new session gets that handoff in its first prompt; the fact reaches the model through it; the handoff is never published; one notice |
//! | `*_switches_model_in_place` | all three (each offers a `model` select) | `!model X` on a running harness: `session/set_config_option` `model` = X on the live session, answered with a result; the question goes to the same session (no new, load or resume); the model requests name X; the model still has the fact, which the prompt did not repeat |
//! | `*_unoffered_model_switch_keeps_the_session` | opencode (a name without its provider), claude-agent-acp (a name sharing no word with its options); codex-acp takes any name in place, so it has no such case | the agent answers the switch with an error and does not list the model: the session goes on (no new session, no handoff), the fact reaches the model; one notice that the model is not offered. No adapter refuses a model it lists, so rotation after a refused switch is proven on the test agent only (`--model-fixed-after-prompt`, tests/e2e/continuity_matrix.rs) |
//! | `*_context_overflow_is_answered` | all three | the thread outgrows the model's window (set on the fake LLM): the question is answered with the fact; the old session gets it once, never again; a session the agent gave up on is replaced by one with the whole thread within the budget and one notice, a session the agent compacted on its own goes on without one |

use buzz_acp::relay::Event;
use fake_llm::RequestKind;
use real_adapters::Adapter;
use real_adapters::binaries::patched_harness;

use crate::relay_rig::{LiveHarness, RelaySide};
use crate::rig::{LOST_SESSION_BOUND, REPLY, Result, Rig, fact_for, fail, last_prompted_session};

/// Replies after the fact: more than upstream's default window of 12.
const BURY: usize = 14;
/// Words of the patched harness's default handoff instruction (`--handoff-prompt`), which the
/// fake LLM echoes at the start of its answer.
const HANDOFF_ASK: &str = "Write a handoff";
/// How the patched harness labels a handoff in the new session's first prompt.
const HANDOFF_LABEL: &str = "<handoff from-session=";
/// The question at the end of every thread.
const QUESTION: &str = "What was the code word?";

/// A thread whose fact has left upstream's window.
struct Buried {
    root: Event,
    last: Event,
}

/// Posts the root and the fact, each answered by a run of its own of the patched harness with
/// `flags` ([`Rig::one_turn`]), then, with the harness stopped, buries the fact under [`BURY`]
/// replies (history the next run reads when it starts).
fn tell_and_bury(rig: &Rig, side: &RelaySide, flags: &[&str], fact: &str) -> Result<Buried> {
    let harness = patched_harness()?;
    let opening = "We are planning the storage migration.";
    let root = rig.one_turn(side, &harness, flags, opening, None, REPLY)?;
    let text = format!("Remember the code word {fact}.");
    let thread = Some((&root.asked, &root.answer));
    let told = rig.one_turn(side, &harness, flags, &text, thread, REPLY)?;
    if !told.seen.nonces.contains(fact) {
        return Err(fail(format!(
            "the model never received {fact}: {:?}",
            told.seen
        )));
    }
    let last = side.chatter(&root.asked, told.answer, BURY)?;
    Ok(Buried {
        root: root.asked,
        last,
    })
}

/// Turn requests (the adapter's own conversation calls, not its titles or summaries) the fake
/// LLM received from position `from` of its log on.
fn turn_requests(rig: &Rig, from: usize) -> Result<Vec<fake_llm::RequestRecord>> {
    Ok(rig
        .llm
        .requests()?
        .into_iter()
        .skip(from)
        .filter(|r| r.kind == RequestKind::Turn)
        .collect())
}

/// Restores and session changes the wire shows.
const OPENINGS: [&str; 3] = ["session/new", "session/load", "session/resume"];

pub fn lost_transcript_gets_the_whole_thread(adapter: Adapter) -> Result<()> {
    let harness = patched_harness()?;
    let fact = fact_for(adapter, 5);
    let rig = Rig::new(adapter)?;
    let side = RelaySide::start()?;
    let t = tell_and_bury(&rig, &side, &[], &fact)?;
    let stored = last_prompted_session(&rig.wire()?)?;
    let removed = rig.agent.lose_all_sessions()?;
    assert!(removed > 0, "{adapter}: no session storage found to delete");
    let mark = rig.wire()?.len();
    let calls = rig.llm.requests()?.len();
    let thread = Some((&t.root, &t.last));
    let asked = rig.one_turn(&side, &harness, &[], QUESTION, thread, LOST_SESSION_BOUND)?;
    let (question, seen) = (asked.asked, asked.seen);

    let wire = rig.wire()?.since(mark);
    let reopened: Vec<_> = ["session/load", "session/resume"]
        .iter()
        .flat_map(|m| wire.exchanges(m))
        .filter(|e| e.request.session_id() == Some(stored.as_str()))
        .collect();
    assert!(
        !reopened.is_empty(),
        "{adapter}: the harness never asked the agent for its stored session {stored}: {:?}",
        wire.methods_sent()
    );
    assert!(
        reopened.iter().all(|e| e.failed()),
        "{adapter}: the agent was expected to refuse the lost session: {:?}",
        reopened.iter().map(|e| e.answer).collect::<Vec<_>>()
    );
    let opened = wire.sessions_opened();
    assert_eq!(
        opened.len(),
        1,
        "{adapter}: exactly one new session: {:?}",
        wire.methods_sent()
    );
    let prompts = wire.prompts();
    assert_eq!(prompts.len(), 1, "{adapter}: one prompt: {prompts:?}");
    let (_, session, text) = &prompts[0];
    assert_eq!(session, &opened[0], "{adapter}: the new session answers");
    assert!(
        text.contains(&fact) && text.contains(QUESTION),
        "{adapter}: the new session's prompt must carry the whole thread, the fact included: {text}"
    );
    assert!(
        seen.nonces.contains(&fact),
        "{adapter}: the model answering the question must have received {fact}: {seen:?}"
    );
    let turns = turn_requests(&rig, calls)?;
    assert!(
        turns.iter().any(|r| r.nonces.contains(&fact)),
        "{adapter}: the fake LLM's log shows no turn request with {fact}"
    );
    let notices = side.notices_about(&question)?;
    assert_eq!(
        notices.len(),
        1,
        "{adapter}: the thread is told once: {notices:?}"
    );
    eprintln!(
        "{adapter}: lost transcript: {}; requests to the agent: {:?}; notice: {:?}",
        reopened
            .iter()
            .filter_map(|e| e.answer.and_then(|a| a.error()))
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        wire.methods_sent(),
        notices[0].content
    );
    Ok(())
}

pub fn turn_limit_rotates_with_a_handoff_across_a_restart(adapter: Adapter) -> Result<()> {
    let harness = patched_harness()?;
    let limit = ["--max-turns-per-session", "2"];
    let fact = fact_for(adapter, 6);
    let rig = Rig::new(adapter)?;
    let side = RelaySide::start()?;
    let t = tell_and_bury(&rig, &side, &limit, &fact)?;
    let before = rig.wire()?;
    let old = last_prompted_session(&before)?;
    // Each run did one turn: the session was restored for its second one (so a count kept in
    // memory would be at one, not two).
    let restores: Vec<_> = ["session/load", "session/resume"]
        .iter()
        .flat_map(|m| before.exchanges(m))
        .filter(|e| e.request.session_id() == Some(old.as_str()) && e.succeeded())
        .collect();
    assert_eq!(
        restores.len(),
        1,
        "{adapter}: the fact's turn must run on the restored session: {:?}",
        before.methods_sent()
    );
    assert_eq!(before.sessions_opened(), std::slice::from_ref(&old));
    // The harness asks for protocol version 2; claude-agent-acp answers 2, the others 1
    // (docs/REAL_ADAPTERS.md). In v2 a session comes back with `session/resume` only: v2 has no
    // `session/load`.
    let negotiated: Vec<_> = before
        .exchanges("initialize")
        .iter()
        .filter_map(|e| e.answer)
        .map(|a| a.body["result"]["protocolVersion"].clone())
        .collect();
    let expected = match adapter {
        Adapter::Claude => 2,
        Adapter::Codex | Adapter::Opencode => 1,
    };
    assert!(
        !negotiated.is_empty() && negotiated.iter().all(|v| *v == expected),
        "{adapter}: the protocol version answered to initialize: {negotiated:?}"
    );
    if expected == 2 {
        assert!(
            before.exchanges("session/load").is_empty(),
            "{adapter}: v2 has no session/load: {:?}",
            before.methods_sent()
        );
    }

    let mark = before.len();
    let thread = Some((&t.root, &t.last));
    let asked = rig.one_turn(&side, &harness, &limit, QUESTION, thread, REPLY)?;
    let (question, seen) = (asked.asked, asked.seen);
    let wire = rig.wire()?.since(mark);

    let asks: Vec<_> = wire
        .exchanges("session/prompt")
        .into_iter()
        .filter(|e| e.request.session_id() == Some(old.as_str()))
        .collect();
    assert_eq!(
        asks.len(),
        1,
        "{adapter}: the retired session is prompted once, for its handoff: {:?}",
        wire.prompts()
    );
    let ask = &asks[0];
    let asked = ask.request.prompt_text();
    assert!(
        asked.contains(HANDOFF_ASK) && !asked.contains(QUESTION),
        "{adapter}: the retired session must be asked for a handoff, not the question: {asked}"
    );
    assert!(ask.succeeded(), "{adapter}: the handoff turn failed");
    let handoff = wire.agent_text(ask);
    assert!(
        handoff.contains(&fact),
        "{adapter}: the old session's handoff should carry {fact} (its model had it): {handoff}"
    );
    let opened = wire.sessions_opened();
    assert_eq!(
        opened.len(),
        1,
        "{adapter}: one new session: {:?}",
        wire.methods_sent()
    );
    let new = &opened[0];
    let to_new: Vec<_> = wire
        .prompts()
        .into_iter()
        .filter(|(_, s, _)| s == new)
        .collect();
    assert_eq!(to_new.len(), 1, "{adapter}: {to_new:?}");
    let (at, _, first) = &to_new[0];
    assert!(
        *at > ask.at,
        "{adapter}: the handoff comes before the new session's turn"
    );
    assert!(
        first.contains(&format!("{HANDOFF_LABEL}\"{old}\""))
            && first.contains(handoff.trim())
            && first.contains(QUESTION),
        "{adapter}: the new session's first prompt must carry the old session's handoff: {first}"
    );
    assert!(
        seen.nonces.contains(&fact),
        "{adapter}: the model answering the question must have received {fact}: {seen:?}"
    );
    // Everything the agent's key published (the people wrote the rest of the thread).
    let published: Vec<String> = side
        .agent_events()?
        .into_iter()
        .map(|e| e.content)
        .collect();
    assert!(
        published.iter().all(|p| !p.contains(HANDOFF_ASK)),
        "{adapter}: the handoff must never be published: {published:?}"
    );
    // Every adapter of the tier has `session/close` (advertised in v1, required in v2): the
    // retired session is released.
    let closed: Vec<_> = wire
        .exchanges("session/close")
        .into_iter()
        .filter(|e| e.request.session_id() == Some(old.as_str()))
        .collect();
    assert!(
        closed.len() == 1 && closed[0].succeeded(),
        "{adapter}: the retired session is closed once: {:?}",
        wire.methods_sent()
    );
    let notices = side.notices_about(&question)?;
    assert_eq!(notices.len(), 1, "{adapter}: told once: {notices:?}");
    eprintln!(
        "{adapter}: rotation with a handoff of {} bytes; requests to the agent: {:?}; notice: {:?}",
        handoff.len(),
        wire.methods_sent(),
        notices[0].content
    );
    Ok(())
}

/// The value of `!model` that selects the fake LLM's second model on `adapter`: opencode names
/// models `provider/model`.
fn large_model_value(adapter: Adapter) -> String {
    match adapter {
        Adapter::Opencode => format!("fake/{}", real_adapters::adapter::LARGE_MODEL),
        Adapter::Codex | Adapter::Claude => real_adapters::adapter::LARGE_MODEL.to_owned(),
    }
}

/// A thread told a fact on a running patched harness, then switched by the owner's `!model`.
struct Switched {
    // Dropped first: the harness, then its relay and the rig.
    live: LiveHarness,
    side: RelaySide,
    rig: Rig,
    fact: String,
    question: Event,
    /// The session that answered before the switch.
    session: String,
    /// Wire frames and fake-LLM requests before the question.
    wire_mark: usize,
    llm_mark: usize,
}

fn switch_model(adapter: Adapter, value: &str, salt: u32) -> Result<Switched> {
    let harness = patched_harness()?;
    let fact = fact_for(adapter, salt);
    let rig = Rig::new(adapter)?;
    let side = RelaySide::start()?;
    let live = rig.live_on_relay(&side, &harness, &[])?;
    let owner = &side.owner;
    let root = side.say(owner, "We are planning the storage migration.", None)?;
    let (r0, _) = rig.relay_reply_to(&side, &root, REPLY)?;
    let text = format!("Remember the code word {fact}.");
    let told = side.say(owner, &text, Some((&root, &r0)))?;
    let (r1, _) = rig.relay_reply_to(&side, &told, REPLY)?;
    let session = last_prompted_session(&rig.wire()?)?;
    let switch = side.say(owner, &format!("!model {value}"), Some((&root, &r1)))?;
    side.harness_reply_to(&switch, REPLY)?;
    let wire_mark = rig.wire()?.len();
    let llm_mark = rig.llm.requests()?.len();
    let question = side.say(owner, QUESTION, Some((&root, &r1)))?;
    Ok(Switched {
        live,
        side,
        rig,
        fact,
        question,
        session,
        wire_mark,
        llm_mark,
    })
}

pub fn switches_model_in_place(adapter: Adapter) -> Result<()> {
    let value = large_model_value(adapter);
    let sw = switch_model(adapter, &value, 7)?;
    let (_, seen) = sw.rig.relay_reply_to(&sw.side, &sw.question, REPLY)?;
    sw.side.all_published()?;
    sw.live.stop()?;
    let rig = &sw.rig;
    let wire = rig.wire()?.since(sw.wire_mark);
    let sets = wire.exchanges("session/set_config_option");
    assert_eq!(
        sets.len(),
        1,
        "{adapter}: one switch: {:?}",
        wire.methods_sent()
    );
    let set = &sets[0].request.body["params"];
    assert_eq!(
        set["sessionId"],
        sw.session.as_str(),
        "{adapter}: the live session"
    );
    assert_eq!(set["configId"], "model", "{adapter}");
    assert_eq!(set["value"], value.as_str(), "{adapter}");
    assert!(
        sets[0].succeeded(),
        "{adapter}: the agent refused: {:?}",
        sets[0].answer
    );
    let methods = wire.methods_sent();
    assert!(
        methods.iter().all(|m| !OPENINGS.contains(&m.as_str())),
        "{adapter}: the session must go on, not be replaced or reopened: {methods:?}"
    );
    let prompts = wire.prompts();
    assert_eq!(prompts.len(), 1, "{adapter}: {prompts:?}");
    let (at, session, text) = &prompts[0];
    assert_eq!(session, &sw.session, "{adapter}: the same session id");
    assert!(*at > sets[0].at, "{adapter}: switched before the prompt");
    assert!(
        !text.contains(&sw.fact),
        "{adapter}: the prompt repeats the fact, so the check below proves nothing: {text}"
    );
    assert!(
        seen.nonces.contains(&sw.fact),
        "{adapter}: the session kept its history: the model must still have {}: {seen:?}",
        sw.fact
    );
    let turns = turn_requests(rig, sw.llm_mark)?;
    assert!(
        !turns.is_empty(),
        "{adapter}: no model call after the switch"
    );
    let large = real_adapters::adapter::LARGE_MODEL;
    assert!(
        turns.iter().all(|r| r.model.as_deref() == Some(large)),
        "{adapter}: every turn request after the switch must name {large}: {:?}",
        turns.iter().map(|r| r.model.clone()).collect::<Vec<_>>()
    );
    let notices = sw.side.notices_about(&sw.question)?;
    assert!(
        notices.is_empty(),
        "{adapter}: nothing to tell about the question: {notices:?}"
    );
    rig.assert_no_agent_left()?;
    eprintln!(
        "{adapter}: switched to {value} in place; requests to the agent: {methods:?}; \
         turn requests named {:?}",
        turns.iter().map(|r| r.model.clone()).collect::<Vec<_>>()
    );
    Ok(())
}

/// `!model X` where the agent does not offer X: it refuses the switch in place, and a new
/// session would not get X either (the harness applies a model to a new session only when the
/// session offers it), so the thread's session goes on, the question is answered there with the
/// fact, and the thread is told once that the model is not offered.
pub fn unoffered_model_switch_keeps_the_session(adapter: Adapter, value: &str) -> Result<()> {
    let sw = switch_model(adapter, value, 8)?;
    let (_, seen) = sw.rig.relay_reply_to(&sw.side, &sw.question, REPLY)?;
    sw.side.all_published()?;
    sw.live.stop()?;
    let rig = &sw.rig;
    let wire = rig.wire()?.since(sw.wire_mark);
    let sets: Vec<_> = wire
        .exchanges("session/set_config_option")
        .into_iter()
        .filter(|e| e.request.session_id() == Some(sw.session.as_str()))
        .collect();
    assert!(
        sets.len() == 1 && sets[0].failed(),
        "{adapter}: the agent was expected to refuse {value} in place, once: {:?}",
        sets.iter().map(|e| e.answer).collect::<Vec<_>>()
    );
    let opened = wire.sessions_opened();
    assert!(opened.is_empty(), "{adapter}: no new session: {opened:?}");
    let asks: Vec<_> = wire
        .prompts()
        .into_iter()
        .filter(|(_, s, _)| *s == sw.session)
        .collect();
    assert_eq!(
        asks.len(),
        1,
        "{adapter}: the question, on the same session: {asks:?}"
    );
    assert!(!asks[0].2.contains(HANDOFF_ASK), "{adapter}: no handoff");
    assert!(
        seen.nonces.contains(&sw.fact),
        "{adapter}: the session still had the fact: {seen:?}"
    );
    let notices = sw.side.notices_about(&sw.question)?;
    assert_eq!(notices.len(), 1, "{adapter}: {notices:?}");
    assert!(
        notices[0].content.contains("does not offer the model"),
        "{adapter}: {}",
        notices[0].content
    );
    rig.assert_no_agent_left()?;
    eprintln!(
        "{adapter}: refused switch to {value}: {}; notice: {:?}",
        sets[0]
            .answer
            .and_then(|a| a.error())
            .map_or_else(String::new, ToString::to_string),
        notices[0].content
    );
    Ok(())
}

/// Bytes of the build log the exhaustion thread pastes early: enough that the old session's
/// history outgrows a window in which a new session with a small whole-thread budget still fits.
const PASTE_BYTES: usize = 40 * 1024;
/// `--whole-thread-budget-kb` of the exhaustion scenario (the paste does not fit in it).
const EXHAUSTION_BUDGET_KB: usize = 8;
/// Tokens the window leaves above a new session's first request: room for the whole thread
/// within [`EXHAUSTION_BUDGET_KB`] and its framing.
const NEW_SESSION_HEADROOM_TOKENS: u64 = 4_000;

/// A build log without anything shaped like a fact (`word-1234`).
fn build_log() -> String {
    let mut log = String::from("Here is the build log, for the record:\n");
    let mut line = 0;
    while log.len() < PASTE_BYTES {
        line += 1;
        log.push_str(&format!(
            "step {line}: compiled module number {line} without warnings\n"
        ));
    }
    log
}

/// How an adapter dealt with a prompt its session's context could not hold.
#[derive(Debug, PartialEq, Eq)]
pub enum Overflow {
    /// The agent compacted its own context and answered in the same session: the harness saw a
    /// normal end of turn.
    CompactedByTheAgent,
    /// The agent answered the prompt with an error; the harness replaced the session with one
    /// that has the whole thread.
    ReplacedByTheHarness,
}

/// The thread outgrows the model's window (set on the fake LLM between two messages): whatever
/// the adapter does, the question is answered, the session that refused it never gets it again,
/// and a replacement (when there is one) has the whole thread within the budget and is
/// announced once.
pub fn context_overflow_is_answered(adapter: Adapter) -> Result<Overflow> {
    let harness = patched_harness()?;
    let fact = fact_for(adapter, 9);
    let rig = Rig::new(adapter)?;
    let side = RelaySide::start()?;
    let budget = EXHAUSTION_BUDGET_KB.to_string();
    let live = rig.live_on_relay(&side, &harness, &["--whole-thread-budget-kb", &budget])?;
    let owner = &side.owner;
    let root = side.say(owner, "We are planning the storage migration.", None)?;
    let (r0, _) = rig.relay_reply_to(&side, &root, REPLY)?;
    let first_turn = turn_requests(&rig, 0)?
        .first()
        .map(|r| r.input_tokens)
        .ok_or_else(|| fail("no turn request for the root"))?;
    let paste = side.say(owner, &build_log(), Some((&root, &r0)))?;
    let (r1, _) = rig.relay_reply_to(&side, &paste, REPLY)?;
    let text = format!("Remember the code word {fact}.");
    let told = side.say(owner, &text, Some((&root, &r1)))?;
    let (r2, _) = rig.relay_reply_to(&side, &told, REPLY)?;
    let session = last_prompted_session(&rig.wire()?)?;
    let last = side.chatter(&root, r2, BURY)?;
    let grown = turn_requests(&rig, 0)?
        .last()
        .map(|r| r.input_tokens)
        .unwrap_or_default();
    let window = first_turn + NEW_SESSION_HEADROOM_TOKENS;
    assert!(
        window < grown,
        "{adapter}: the paste must make the session outgrow the window ({window} >= {grown})"
    );
    rig.llm
        .set_context_limit(Some(real_adapters::adapter::FAKE_MODEL), window);
    let wire_mark = rig.wire()?.len();
    let llm_mark = rig.llm.requests()?.len();
    let question = side.say(owner, QUESTION, Some((&root, &last)))?;
    let (_, seen) = rig.relay_reply_to(&side, &question, REPLY)?;
    side.all_published()?;
    live.stop()?;

    let calls: Vec<_> = rig.llm.requests()?.into_iter().skip(llm_mark).collect();
    assert!(
        calls
            .iter()
            .any(|r| r.outcome == fake_llm::Outcome::ContextOverflow),
        "{adapter}: the fake LLM never refused a prompt as too long"
    );
    let wire = rig.wire()?.since(wire_mark);
    let asked_old = wire
        .exchanges("session/prompt")
        .into_iter()
        .filter(|e| {
            e.request.session_id() == Some(session.as_str())
                && e.request.prompt_text().contains(QUESTION)
        })
        .collect::<Vec<_>>();
    assert_eq!(
        asked_old.len(),
        1,
        "{adapter}: the old session gets the question once, never again: {:?}",
        wire.prompts()
    );
    let opened = wire.sessions_opened();
    let notices = side.notices_about(&question)?;
    let path = if asked_old[0].succeeded() {
        assert!(opened.is_empty(), "{adapter}: {:?}", wire.methods_sent());
        assert!(notices.is_empty(), "{adapter}: {notices:?}");
        Overflow::CompactedByTheAgent
    } else {
        assert_eq!(opened.len(), 1, "{adapter}: {:?}", wire.methods_sent());
        let to_new: Vec<_> = wire
            .prompts()
            .into_iter()
            .filter(|(_, s, _)| *s == opened[0])
            .collect();
        assert_eq!(to_new.len(), 1, "{adapter}: {to_new:?}");
        let text = &to_new[0].2;
        assert!(
            text.contains(&fact) && text.contains(QUESTION),
            "{adapter}: the replacement must have the whole thread within the budget: {text}"
        );
        assert!(
            !text.contains("Here is the build log"),
            "{adapter}: the paste is over the {EXHAUSTION_BUDGET_KB} KB budget"
        );
        assert_eq!(notices.len(), 1, "{adapter}: told once: {notices:?}");
        Overflow::ReplacedByTheHarness
    };
    assert!(
        seen.nonces.contains(&fact),
        "{adapter}: the model answering the question must still have {fact}: {seen:?}"
    );
    rig.assert_no_agent_left()?;
    eprintln!(
        "{adapter}: overflow at a window of {window} tokens (first turn {first_turn}, last {grown}): \
         {path:?}; error: {}; calls after the question: {:?}; notices: {:?}",
        asked_old[0]
            .answer
            .and_then(|a| a.error())
            .map_or_else(String::new, ToString::to_string),
        calls
            .iter()
            .map(|r| format!("{:?}/{:?}/{}", r.kind, r.outcome, r.input_tokens))
            .collect::<Vec<_>>(),
        notices
            .iter()
            .map(|n| n.content.clone())
            .collect::<Vec<_>>()
    );
    Ok(path)
}
