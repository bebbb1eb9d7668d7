//! Guards of patch `continuity-handoff`: no session change the harness did not ask for costs a
//! thread what its agent knew.
//!
//! Every scenario builds the same thread: a root, a reply that tells the agent a code word, then
//! fourteen replies that do not mention the agent — so the code word is older than upstream's
//! context window (the root and the last 12 replies) and only the agent's session can still know
//! it. Then something replaces or threatens the session, and the question comes. The test agent's
//! reply lists every nonce its session has seen (`nonces=…`): the code word must be among them.

use buzz_acp_fork_tests::relay::RelayWorld;
use buzz_acp_fork_tests::*;

/// The code word (a nonce for the test agent).
const CODE: &str = "zulu-4242";

/// A thread whose code word has left upstream's context window.
struct CodeWordThread {
    root: buzz_acp::relay::Event,
    last: buzz_acp::relay::Event,
}

/// Posts the thread; `answer` lets the harness answer what is pending (e.g. one `--once` run).
fn code_word_thread(s: &mut Scenario, answer: impl Fn(&Scenario)) -> CodeWordThread {
    let root = s.post_top("a long thread starts here").unwrap();
    answer(s);
    let r1 = s.reply_to(&root.id).expect("the root is answered");
    let code = s
        .post_reply(&root, &r1, &format!("remember the code word {CODE}"))
        .unwrap();
    answer(s);
    let mut last = s.reply_to(&code.id).expect("the code word is answered");
    for i in 1..=14 {
        last = s
            .post_chatter(&root, &last, &format!("filler message number {i}"))
            .unwrap();
    }
    CodeWordThread { root, last }
}

fn knows_code(reply: &buzz_acp::relay::Event) -> bool {
    reply_nonces(reply).iter().any(|n| n == CODE)
}

/// The turn limit holds across restarts, and the rotation hands the code word on: with
/// `--max-turns-per-session 2` and a restart before every message, the session that answered the
/// root and the code word (two turns) is retired; the question is answered by a new session whose
/// first prompt carries the old session's handoff — and that handoff was never published.
#[test]
fn the_turn_limit_holds_across_restarts_and_the_rotation_hands_off() {
    let (_dir, mut s) = scenario();
    let limit = ["--max-turns-per-session", "2"];
    let once = |s: &Scenario| run_once(s, &[], &limit);
    let t = code_word_thread(&mut s, once);
    let question = s
        .post_reply(&t.root, &t.last, "what was the code word?")
        .unwrap();
    run_once(&s, &[], &limit);

    let answer = s.reply_to(&question.id).expect("the question is answered");
    assert_eq!(
        turns(&answer),
        1,
        "a new session answered: {}",
        answer.content
    );
    assert!(
        knows_code(&answer),
        "the handoff carried the code word: {}",
        answer.content
    );
    let frames = wire(&s);
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
    let published: Vec<String> = s.replies().iter().map(|r| r.content.clone()).collect();
    assert!(
        published.iter().all(|p| !p.contains("Write a handoff")),
        "{published:?}"
    );
    let notices = notices_about(&s, &question.id);
    assert_eq!(notices.len(), 1, "the thread is told once");
    assert!(
        notices[0].content.contains("limit of 2 turns"),
        "{}",
        notices[0].content
    );
    insta::assert_json_snapshot!("turn_limit_rotation_wire", wire_shape(&s));
    let receipt = receipts(&s).into_iter().next().expect("a receipt");
    assert_eq!(receipt.record.session_id, order[1]);
    assert_eq!(
        receipt.record.turns,
        Some(1),
        "the count is carried with the receipt"
    );
    assert!(receipt.record.handoff.is_none(), "delivered, so forgotten");
}

/// The same over a real Nostr relay, with a restart between the code word and the question:
/// the session that answered two turns is retired, and the question is answered by a new
/// session that knows the code word from the old one's handoff. The thread is told once; the
/// handoff itself is never published.
#[test]
fn over_a_relay_the_turn_limit_rotation_hands_the_code_word_on() {
    let w = RelayWorld::new();
    let limit = ["--max-turns-per-session", "2"];
    let harness = w.start(&[], &limit);
    let root = w.say(&w.owner, "a long thread starts here", None);
    let r1 = w.answer_to(&root);
    let root_id = root.id.to_hex();
    let code = w.say(&w.owner, &format!("remember the code word {CODE}"), Some((&root_id, &r1.id)));
    let mut last = w.answer_to(&code).id;
    harness.stop().expect("the harness stops");
    let someone = nostr::Keys::generate();
    for i in 1..=14 {
        last = w
            .say(&someone, &format!("filler message number {i}"), Some((&root_id, &last)))
            .id
            .to_hex();
    }

    let harness = w.start(&[], &limit);
    let question = w.say(&w.owner, "what was the code word?", Some((&root_id, &last)));
    let answer = w.answer_to(&question);
    harness.stop().expect("the harness stops");

    assert_eq!(turns(&answer), 1, "a new session answered: {}", answer.content);
    assert!(knows_code(&answer), "the handoff carried the code word: {}", answer.content);
    let frames = wire(&w.s);
    assert_eq!(session_order(&frames).len(), 2, "one rotation");
    let published: Vec<String> = w.agent_events().into_iter().map(|e| e.content).collect();
    assert!(published.iter().all(|p| !p.contains("Write a handoff")), "{published:?}");
    let told = published.iter().filter(|p| p.contains("limit of 2 turns")).count();
    assert_eq!(told, 1, "the thread is told once: {published:?}");
}

/// A turn that stops with `max_tokens` ends a long answer, not the session: the thread goes on
/// in the same session and the code word is still known.
#[test]
fn a_max_tokens_stop_keeps_the_session() {
    let (_dir, mut s) = scenario();
    let running = start(&s, &[], &[]);
    let wait = |s: &Scenario| {
        let last = s.events().into_iter().rfind(|e| e.pubkey != AGENT).unwrap();
        s.wait_for_reply(&last.id, WAIT).expect("answered");
    };
    let t = code_word_thread(&mut s, wait);
    let long = s
        .post_reply(&t.root, &t.last, "write a lot !stop:max_tokens")
        .unwrap();
    let long_answer = s.wait_for_reply(&long.id, WAIT).expect("answered");
    let question = s
        .post_reply(&t.root, &long_answer, "what was the code word?")
        .unwrap();
    let answer = s.wait_for_reply(&question.id, WAIT).expect("answered");
    running.stop().unwrap();
    assert_eq!(turns(&answer), 4, "the same session: {}", answer.content);
    assert!(knows_code(&answer), "{}", answer.content);
    assert_eq!(count_method(&wire(&s), "session/new"), 1);
    assert!(
        notices_about(&s, &question.id).is_empty(),
        "nothing to tell"
    );
}

/// The agent lost the stored session (its transcript is gone): the new session gets the whole
/// thread, not only the last messages, and the thread is told so once.
#[test]
fn a_lost_session_is_replaced_by_one_that_has_the_whole_thread() {
    let (_dir, mut s) = scenario();
    let once = |s: &Scenario| run_once(s, &[], &[]);
    let t = code_word_thread(&mut s, once);
    std::fs::remove_dir_all(s.agent_state_dir.join("sessions")).expect("forget the transcripts");
    let question = s
        .post_reply(&t.root, &t.last, "what was the code word?")
        .unwrap();
    run_once(&s, &[], &[]);

    let answer = s.reply_to(&question.id).expect("answered");
    assert_eq!(turns(&answer), 1, "a new session: {}", answer.content);
    assert!(knows_code(&answer), "the whole thread: {}", answer.content);
    let frames = wire(&s);
    assert_eq!(
        count_method(&frames, "session/load"),
        2,
        "one load per restart"
    );
    assert_eq!(count_method(&frames, "session/new"), 2);
    let notices = notices_about(&s, &question.id);
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
    let (_dir, mut s) = scenario();
    let running = start(&s, &[], &[]);
    let wait = |s: &Scenario| {
        let last = s.events().into_iter().rfind(|e| e.pubkey != AGENT).unwrap();
        s.wait_for_reply(&last.id, WAIT).expect("answered");
    };
    let t = code_word_thread(&mut s, wait);
    let question = s
        .post_reply(&t.root, &t.last, "what was the code word? !full")
        .unwrap();
    let answer = s.wait_for_reply(&question.id, WAIT).expect("answered");
    running.stop().unwrap();
    assert_eq!(turns(&answer), 1, "a new session: {}", answer.content);
    assert!(knows_code(&answer), "{}", answer.content);
    let frames = wire(&s);
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
    let notices = notices_about(&s, &question.id);
    assert_eq!(notices.len(), 1, "{notices:?}");
    assert!(
        notices[0].content.contains("ran out of context space"),
        "{}",
        notices[0].content
    );
}
