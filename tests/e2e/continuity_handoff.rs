//! Guards of patch `continuity-handoff`: no session change the harness did not ask for costs a
//! thread what its agent knew.
//!
//! Every scenario builds the same thread: a root, a reply that tells the agent a code word, then
//! fourteen replies that do not mention the agent — so the code word is older than upstream's
//! context window (the root and the last 12 replies) and only the agent's session can still know
//! it. Then something replaces or threatens the session, and the question comes. The test agent's
//! reply lists every nonce its session has seen (`nonces=…`): the code word must be among them.
//!
//! Every scenario runs over the test relay (`RelayWorld`): the owner writes, a colleague writes
//! the fillers without mentioning the agent, and a restart is the harness stopped and started
//! again (it hears only what is posted while it runs, and reads the thread's history from the
//! relay when it starts).

use buzz_acp::relay::Event;
use buzz_acp_fork_tests::relay::RelayWorld;
use buzz_acp_fork_tests::*;

/// The code word (a nonce for the test agent).
const CODE: &str = "zulu-4242";

/// A thread whose code word has left upstream's context window.
struct CodeWordThread {
    root: Event,
    /// The last filler, which the question replies to.
    last: Event,
}

/// Who answers the thread's two mentions (the root and the code word).
#[derive(Clone, Copy)]
enum Answering<'a> {
    /// The harness the test started and keeps running.
    Running,
    /// A harness started for each mention with these flags, and stopped once it answered: a
    /// restart before every message.
    RestartEach(&'a [&'a str]),
}

/// Posts the thread. The fillers come last; with [`Answering::RestartEach`] no harness runs
/// then, and the next one reads them from the relay's history.
fn code_word_thread(w: &RelayWorld, answering: Answering<'_>) -> CodeWordThread {
    // Posts a mention with `post` and waits for its answer: (the mention, the answer).
    let answered = |post: &dyn Fn() -> Event| -> (Event, Event) {
        let harness = match answering {
            Answering::Running => None,
            Answering::RestartEach(extra) => Some(w.start(&[], extra)),
        };
        let mention = post();
        let answer = w.wait_for_reply(&mention.id, WAIT);
        if let Some(harness) = harness {
            harness.stop().expect("the harness stops");
        }
        let answer = answer.unwrap_or_else(|| panic!("no answer to {:?}", mention.content));
        (mention, answer)
    };
    let (root, r1) = answered(&|| w.post_top("a long thread starts here"));
    let (_, mut last) =
        answered(&|| w.post_reply(&root, &r1, &format!("remember the code word {CODE}")));
    for i in 1..=14 {
        last = w.post_chatter(&root, &last, &format!("filler message number {i}"));
    }
    CodeWordThread { root, last }
}

/// The code word, if the session that wrote `reply` had seen it.
fn code_seen(reply: &Event) -> Option<String> {
    reply_nonces(reply).into_iter().find(|n| n == CODE)
}

/// The turn limit holds across restarts, and the rotation hands the code word on: with
/// `--max-turns-per-session 2` and a restart before every message, the session that answered the
/// root and the code word (two turns) is retired; the question is answered by a new session whose
/// first prompt carries the old session's handoff — and that handoff was never published.
#[test]
fn the_turn_limit_holds_across_restarts_and_the_rotation_hands_off() {
    let w = RelayWorld::new();
    let limit = ["--max-turns-per-session", "2"];
    let t = code_word_thread(&w, Answering::RestartEach(&limit));
    let harness = w.start(&[], &limit);
    let question = w.post_reply(&t.root, &t.last, "what was the code word?");
    let answer = w.wait_for_reply(&question.id, WAIT);
    harness.stop().expect("the harness stops");

    let answer = answer.expect("the question is answered");
    assert_eq!(
        turns(&answer),
        1,
        "a new session answered: {}",
        answer.content
    );
    assert_eq!(
        code_seen(&answer).as_deref(),
        Some(CODE),
        "the handoff carried the code word: {}",
        answer.content
    );
    let frames = wire(&w.s);
    let order = session_order(&frames);
    assert_eq!(order.len(), 2, "one rotation: {order:?}");
    let texts = prompts(&frames);
    let handoff_asks: Vec<&String> = texts
        .iter()
        .filter(|t| t.starts_with("This conversation is about to continue in a fresh session"))
        .collect();
    assert_eq!(handoff_asks.len(), 1, "the old session is asked once");
    let first_of_new = texts.last().expect("the new session's prompt");
    assert!(
        first_of_new.contains("<handoff from-session="),
        "{first_of_new}"
    );
    // Only the three answers and one notice were published: never the handoff itself.
    let published: Vec<String> = w.replies().iter().map(|r| r.content.clone()).collect();
    assert!(
        published.iter().all(|p| !p.contains("Write a handoff")),
        "{published:?}"
    );
    assert_eq!(
        published.len(),
        4,
        "three answers and a notice: {published:?}"
    );
    let notices = w.notices_about(&question.id);
    assert_eq!(notices.len(), 1, "the thread is told once");
    assert!(
        notices[0].content.contains("limit of 2 turns"),
        "{}",
        notices[0].content
    );
    insta::assert_json_snapshot!("turn_limit_rotation_wire", w.redacted(wire_shape(&w.s)));
    let receipt = receipts(&w).into_iter().next().expect("a receipt");
    assert_eq!(receipt.record.session_id, order[1]);
    assert_eq!(
        receipt.record.turns,
        Some(1),
        "the count is carried with the receipt"
    );
    assert!(receipt.record.handoff.is_none(), "delivered, so forgotten");
}

/// A turn that stops with `max_tokens` ends a long answer, not the session: the thread goes on
/// in the same session and the code word is still known.
#[test]
fn a_max_tokens_stop_keeps_the_session() {
    let w = RelayWorld::new();
    let harness = w.start(&[], &[]);
    let t = code_word_thread(&w, Answering::Running);
    let long = w.post_reply(&t.root, &t.last, "write a lot !stop:max_tokens");
    let long_answer = w.wait_for_reply(&long.id, WAIT).expect("answered");
    let question = w.post_reply(&t.root, &long_answer, "what was the code word?");
    let answer = w.wait_for_reply(&question.id, WAIT);
    harness.stop().expect("the harness stops");

    let answer = answer.expect("the question is answered");
    assert_eq!(turns(&answer), 4, "the same session: {}", answer.content);
    assert_eq!(
        code_seen(&answer).as_deref(),
        Some(CODE),
        "{}",
        answer.content
    );
    assert_eq!(count_method(&wire(&w.s), "session/new"), 1);
    assert!(w.notices_about(&question.id).is_empty(), "nothing to tell");
}

/// The agent lost the stored session (its transcript is gone): the new session gets the whole
/// thread, not only the last messages, and the thread is told so once.
#[test]
fn a_lost_session_is_replaced_by_one_that_has_the_whole_thread() {
    let w = RelayWorld::new();
    let t = code_word_thread(&w, Answering::RestartEach(&[]));
    std::fs::remove_dir_all(w.s.agent_state_dir.join("sessions")).expect("forget the transcripts");
    let harness = w.start(&[], &[]);
    let question = w.post_reply(&t.root, &t.last, "what was the code word?");
    let answer = w.wait_for_reply(&question.id, WAIT);
    harness.stop().expect("the harness stops");

    let answer = answer.expect("the question is answered");
    assert_eq!(turns(&answer), 1, "a new session: {}", answer.content);
    assert_eq!(
        code_seen(&answer).as_deref(),
        Some(CODE),
        "the whole thread: {}",
        answer.content
    );
    let frames = wire(&w.s);
    assert_eq!(
        count_method(&frames, "session/load"),
        2,
        "one load per restart"
    );
    assert_eq!(count_method(&frames, "session/new"), 2);
    let notices = w.notices_about(&question.id);
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(
        notices[0].content.contains("the whole thread"),
        "{}",
        notices[0].content
    );
}

/// A session that refuses the prompt as too long is not sent it again: the thread goes on in a
/// new session that gets the whole thread, and the question is answered.
#[test]
fn an_exhausted_session_is_replaced_by_one_that_has_the_whole_thread() {
    let w = RelayWorld::new();
    let harness = w.start(&[], &[]);
    let t = code_word_thread(&w, Answering::Running);
    let question = w.post_reply(&t.root, &t.last, "what was the code word? !full");
    let answer = w.wait_for_reply(&question.id, WAIT);
    harness.stop().expect("the harness stops");

    let answer = answer.expect("the question is answered");
    assert_eq!(
        reply_turns(&answer),
        Some(1),
        "a new session: {}",
        answer.content
    );
    assert_eq!(
        code_seen(&answer).as_deref(),
        Some(CODE),
        "{}",
        answer.content
    );
    let frames = wire(&w.s);
    let order = session_order(&frames);
    let refused: Vec<_> = requests_of(&frames, "session/prompt")
        .into_iter()
        .filter(|f| f.params["sessionId"] == order[0].as_str())
        .collect();
    assert_eq!(
        refused.len(),
        3,
        "root, code word, and the refused question once"
    );
    let notices = w.notices_about(&question.id);
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(
        notices[0].content.contains("ran out of context space"),
        "{}",
        notices[0].content
    );
}
