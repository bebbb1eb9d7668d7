//! The continuity matrix (docs/CONTINUITY.md), one test per cell: after each cause of a reset,
//! does the thread's agent still know what it was told beyond upstream's context window, and
//! what is the thread told?
//!
//! Each cell is played by [`buzz_acp_fork_tests::matrix::play`] — a thread root, a reply telling
//! the agent a code word, fourteen replies that push it out of the 12-reply window, the cause,
//! then the question — against the harness of the tree under test. The assertions read what the
//! model received (the test agent's answer lists the nonces its session has seen, and the wire
//! log shows how the code word reached the session after the cause) and what the thread was
//! told: exactly one notice for an involuntary discontinuity, none for a resumed or hot
//! continuation, "the setting changed" for an in-place change; a notice never answers the message
//! it is about and is never repeated.
//!
//! The same cells, played against the baseline binary, all read "lost": `scripts/demo` prints
//! both side by side, and the mutation check (`scripts/fork verify --mutation`) runs each guard
//! here without the patch it guards, where it fails by its `kept` assertion.

use buzz_acp::relay::Event;
use buzz_acp_fork_tests::matrix::{Build, CODE, Cause, Knows, Played, play};
use buzz_acp_fork_tests::*;

fn played(cause: Cause) -> Played {
    play(&Build::under_test(), cause).unwrap_or_else(|e| panic!("{cause}: {e}"))
}

/// The question is answered once, by a session that had received the code word after the cause
/// (the wire shows it reach the agent), and its answer says it knows it.
fn assert_kept(p: &Played) -> Event {
    let answer = p.answer().expect("the question is answered");
    assert_eq!(
        p.knows(),
        Knows::Kept,
        "{}: the model knows {CODE}: {}",
        p.cause,
        answer.content
    );
    assert!(
        p.code_reached_after_cause(),
        "{}: the wire shows {CODE} reach the agent after the cause",
        p.cause
    );
    assert_eq!(p.answers_to(&p.question.id), 1, "answered once");
    answer
}

/// Nothing was posted about the question, nor anywhere in the thread.
fn assert_told_nothing(p: &Played) {
    let notices: Vec<String> = p.thread_notices().into_iter().map(|n| n.content).collect();
    assert!(
        notices.is_empty(),
        "{}: nothing to tell: {notices:?}",
        p.cause
    );
}

/// Exactly one notice is about the question; it says `words`, and it does not answer the
/// question. No two notices in the thread are about the same message.
fn assert_told_once(p: &Played, words: &str) -> Event {
    let notices = p.notices();
    let texts: Vec<&str> = notices.iter().map(|n| n.content.as_str()).collect();
    assert_eq!(notices.len(), 1, "{}: one notice: {texts:?}", p.cause);
    let notice = notices[0].clone();
    assert!(
        notice.content.contains(words),
        "{}: {}",
        p.cause,
        notice.content
    );
    assert_not_repeated(p);
    notice
}

/// No notice answers the message it is about, and none is repeated (the same words about the
/// same message).
fn assert_not_repeated(p: &Played) {
    let mut seen: Vec<(String, String)> = Vec::new();
    for notice in p.thread_notices() {
        let quoted = notice
            .tag_values("q")
            .next()
            .unwrap_or_default()
            .to_string();
        assert_ne!(
            notice.thread_refs().reply.as_deref(),
            Some(quoted.as_str()),
            "a notice is not a reply to its trigger: {}",
            notice.content
        );
        assert!(
            !notice.answered_ids().contains(&quoted),
            "a notice does not answer its trigger: {}",
            notice.content
        );
        let key = (quoted, notice.content.clone());
        assert!(
            !seen.contains(&key),
            "{}: the same notice twice: {}",
            p.cause,
            notice.content
        );
        seen.push(key);
    }
}

/// The `session/set_config_option` requests for `model`, as (session, value).
fn model_switches(frames: &[WireFrame]) -> Vec<(String, String)> {
    requests_of(frames, "session/set_config_option")
        .into_iter()
        .filter(|f| f.params["configId"] == "model")
        .map(|f| {
            let session = f.params["sessionId"].as_str().unwrap_or_default();
            let value = f.params["value"].as_str().unwrap_or_default();
            (session.to_string(), value.to_string())
        })
        .collect()
}

/// Restart (stopped, then started again on the same state directory): the stored session is reopened, and the
/// thread is told nothing.
#[test]
fn restart_keeps_the_code_word() {
    let p = played(Cause::Restart);
    assert_kept(&p);
    assert_eq!(p.question_served_as(), Some("restored"));
    assert_told_nothing(&p);
}

/// Mention while stopped: the question is posted while the harness is stopped. Once it is back it
/// reads back what it missed and answers the question from the thread's reopened session; the
/// thread is told nothing.
#[test]
fn a_mention_while_stopped_is_answered_from_the_reopened_session() {
    let p = played(Cause::MentionWhileStopped);
    assert_kept(&p);
    assert_eq!(p.question_served_as(), Some("restored"));
    assert_told_nothing(&p);
}

/// Idle pool sleep: the worker pool is torn down after a quiet second; the question reopens the
/// thread's session, and the thread is told nothing.
#[test]
fn idle_pool_sleep_keeps_the_code_word() {
    let p = played(Cause::IdleSleep);
    assert_kept(&p);
    assert_eq!(p.question_served_as(), Some("restored"));
    assert_told_nothing(&p);
}

/// Agent crash: the agent process is killed between turns; the respawned agent reopens the
/// session, and the thread is told nothing.
#[test]
fn agent_crash_between_turns_keeps_the_code_word() {
    let p = played(Cause::AgentCrash);
    assert_kept(&p);
    assert_eq!(p.question_served_as(), Some("restored"));
    assert!(
        count_method(&p.frames(), "initialize") >= 2,
        "a new agent process answered"
    );
    assert_told_nothing(&p);
}

/// The agent lost the stored session (its transcripts are gone): the new session gets the whole
/// thread, and the thread is told once.
#[test]
fn a_lost_transcript_keeps_the_code_word_through_the_whole_thread() {
    let p = played(Cause::TranscriptLost);
    assert_kept(&p);
    assert_eq!(p.question_served_as(), Some("new"));
    let notice = assert_told_once(&p, "gone");
    assert!(
        notice.content.contains("the whole thread"),
        "{}",
        notice.content
    );
}

/// `--max-turns-per-session 1` in a long-running harness: every turn retires its session, and
/// each successor starts from its predecessor's handoff — so the code word travels from session
/// to session. Each rotation is told once, about the message it served.
#[test]
fn a_turn_limit_rotation_keeps_the_code_word_through_the_handoff() {
    let p = played(Cause::TurnLimit);
    assert_kept(&p);
    assert_eq!(p.question_served_as(), Some("new"));
    let notice = assert_told_once(&p, "limit of 1 turn");
    assert!(notice.content.contains("handoff"), "{}", notice.content);
    let first = prompts(&p.frames())
        .into_iter()
        .rfind(|t| t.contains("<handoff from-session="))
        .expect("the new session starts from a handoff");
    assert!(first.contains(CODE), "the handoff carries the code word");
}

/// `--max-turns-per-session 2` with a restart before every message: the count is carried with
/// the receipt, the restored session is retired at its limit, and the handoff carries the code
/// word into the new session.
#[test]
fn a_turn_limit_across_restarts_keeps_the_code_word_through_the_handoff() {
    let p = played(Cause::TurnLimitAcrossRestart);
    let answer = assert_kept(&p);
    assert_eq!(turns(&answer), 1, "a new session: {}", answer.content);
    assert_eq!(p.question_served_as(), Some("new"));
    assert_told_once(&p, "limit of 2 turns");
}

/// A turn that stops with `max_tokens` ends a long answer, not the session: the question
/// continues on it, and the thread is told nothing.
#[test]
fn a_max_tokens_stop_keeps_the_code_word_in_the_same_session() {
    let p = played(Cause::MaxTokens);
    let answer = assert_kept(&p);
    assert_eq!(turns(&answer), 4, "the same session: {}", answer.content);
    assert_eq!(p.question_served_as(), Some("continued"));
    assert_told_nothing(&p);
}

/// The session refuses the question as too long: the question is not sent into it again; a new
/// session gets the whole thread, and the thread is told once.
#[test]
fn an_exhausted_context_keeps_the_code_word_through_the_whole_thread() {
    let p = played(Cause::ContextExhausted);
    assert_kept(&p);
    let frames = p.frames();
    let order = session_order(&frames);
    let into_first = requests_of(&frames, "session/prompt")
        .into_iter()
        .filter(|f| f.params["sessionId"] == order[0].as_str())
        .filter(|f| f.params["prompt"].to_string().contains("!full"))
        .count();
    assert_eq!(into_first, 1, "the refused question is sent once");
    assert_told_once(&p, "ran out of context space");
}

/// The owner's `!model test-large`, and the agent offers the model on its sessions: the thread's
/// session is switched in place and goes on; the thread is told only that the model changed;
/// another thread keeps its session too.
#[test]
fn a_model_switch_in_place_keeps_the_code_word_and_every_session() {
    let p = played(Cause::ModelInPlace);
    let answer = assert_kept(&p);
    assert_eq!(turns(&answer), 3, "the same session: {}", answer.content);
    assert_eq!(p.question_served_as(), Some("continued"));
    let (_, said) = p.command.as_ref().expect("the owner's command");
    let said = said.as_ref().expect("the owner is answered");
    assert_eq!(
        said.content, "Model set to test-large.",
        "only that the setting changed"
    );
    assert_told_nothing(&p);
    let other = p.other_thread.as_ref().expect("another thread");
    let other_answer = p.reply_to(&other.follow_up.id).expect("answered");
    assert_eq!(turns(&other_answer), 2, "the other thread kept its session");
    assert_eq!(
        served_as(&p.frames(), &other.root.id).last(),
        Some(&"continued")
    );
    let frames = p.frames();
    let order = session_order(&frames);
    let switched: Vec<String> = model_switches(&frames)
        .into_iter()
        .filter(|(_, model)| model == "test-large")
        .map(|(session, _)| session)
        .collect();
    assert_eq!(
        switched,
        [order[0].clone(), order[1].clone()],
        "each in place"
    );
}

/// The owner's `!model test-large`; the agent offers it, but a prompted session cannot take it in
/// place: only the addressed thread's session is replaced, retired with a handoff that carries
/// the code word; the thread is told once; the other thread keeps its session.
#[test]
fn a_model_switch_that_needs_a_new_session_keeps_the_code_word_through_the_handoff() {
    let p = played(Cause::ModelNotInPlace);
    assert_kept(&p);
    assert_eq!(p.question_served_as(), Some("new"));
    assert_told_once(&p, "cannot switch models in place");
    let other = p.other_thread.as_ref().expect("another thread");
    let other_answer = p.reply_to(&other.follow_up.id).expect("answered");
    assert_eq!(turns(&other_answer), 2, "the other thread kept its session");
}

/// The owner asks for a model the agent does not offer: a new session would not get it either,
/// so the thread's session goes on (hot, the code word kept) and the thread is told once that
/// the model is not offered.
#[test]
fn a_model_the_agent_does_not_offer_keeps_the_session_and_says_so() {
    let p = played(Cause::ModelNotOffered);
    assert_kept(&p);
    assert_eq!(p.question_served_as(), Some("continued"));
    assert_told_once(&p, "does not offer the model test-large");
    let other = p.other_thread.as_ref().expect("another thread");
    let other_answer = p.reply_to(&other.follow_up.id).expect("answered");
    assert_eq!(turns(&other_answer), 2, "the other thread kept its session");
}

/// Every restore fails without a definitive answer: the thread is told once that the harness
/// keeps trying, and once when it gives up; the new session gets the whole thread. (Nostr dates
/// messages to the second and the harness dates a notice at least a second after its trigger,
/// so the two notices may share a second and the relay may hand them back in either order: each
/// is found by what it says.)
#[test]
fn a_restore_given_up_keeps_the_code_word_through_the_whole_thread() {
    let p = played(Cause::RestoreGivenUp);
    assert_kept(&p);
    assert_eq!(p.question_served_as(), Some("new"));
    let notices: Vec<String> = p.notices().into_iter().map(|n| n.content).collect();
    assert_eq!(notices.len(), 2, "keep trying, then gave up: {notices:?}");
    let keep_trying = notices.iter().find(|n| n.contains("keep trying"));
    let gave_up = notices.iter().find(|n| n.contains("could not restore"));
    let (Some(keep_trying), Some(gave_up)) = (keep_trying, gave_up) else {
        panic!("one notice says it keeps trying, the other that it gave up: {notices:?}");
    };
    assert!(
        keep_trying.contains("the whole thread"),
        "it says what a new session would get: {keep_trying}"
    );
    assert!(gave_up.contains("the whole thread"), "{gave_up}");
    assert_not_repeated(&p);
}

/// The PostgreSQL receipt store is stopped across a restart: the question waits for its receipt
/// for the configured second, then goes on in a new session that gets the whole thread; the
/// thread is told once.
#[test]
fn a_store_outage_keeps_the_code_word_through_the_whole_thread() {
    if skip_postgres() {
        return;
    }
    let p = played(Cause::StoreOutage);
    assert_kept(&p);
    assert_eq!(p.question_served_as(), Some("new"));
    let notice = assert_told_once(&p, "session store is unavailable");
    assert!(
        notice.content.contains("the whole thread"),
        "{}",
        notice.content
    );
}

/// The owner's `!rotate` is a clean slate by design: the new session does not get the code word,
/// and the thread was told so in the answer to the command.
#[test]
fn the_owners_rotate_is_a_clean_slate() {
    let p = played(Cause::OwnerRotate);
    let answer = p.answer().expect("the question is answered");
    assert_eq!(p.knows(), Knows::Lost, "{}", answer.content);
    assert!(!p.code_reached_after_cause(), "no handoff, no whole thread");
    assert_eq!(p.question_served_as(), Some("new"));
    let (_, said) = p.command.as_ref().expect("the owner's command");
    let said = said.as_ref().expect("the owner is answered");
    assert!(said.content.contains("fresh session"), "{}", said.content);
    assert_told_nothing(&p);
}

/// Whether the caller asked to skip the tests that need PostgreSQL (`BUZZ_TEST_SKIP_POSTGRES`).
/// Otherwise the store-outage cell starts a server of its own (`pg-fixture`), and fails, saying
/// what to install, where PostgreSQL is missing: it never passes untested.
fn skip_postgres() -> bool {
    std::env::var_os("BUZZ_TEST_SKIP_POSTGRES").is_some()
}
