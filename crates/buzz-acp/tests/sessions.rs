//! The baseline's session behaviour within one live process.

mod common;

use common::*;

/// Several mentions in one thread share one session, and each later turn is
/// sent only what the session has not seen: the root was the first trigger,
/// the agent wrote its own replies, so only new chatter appears as context.
#[test]
fn mentions_in_one_thread_share_one_session_and_later_turns_get_only_the_delta() {
    let (_dir, mut s) = scenario();
    let running = s.start(&harness_bin(), &agent(&s, &[]), &[]).unwrap();

    let root = s.post_top("Plan the release. remember alpha-7301").unwrap();
    let r1 = s.wait_for_reply(&root.id, WAIT).expect("reply to root");
    let q2 = s.post_reply(&root, &r1, "What is step one?").unwrap();
    let r2 = s.wait_for_reply(&q2.id, WAIT).expect("reply to q2");
    let chatter = s
        .post_chatter(&root, &r2, "fyi: freeze is on friday")
        .unwrap();
    let q3 = s.post_reply(&root, &chatter, "And step two?").unwrap();
    let r3 = s.wait_for_reply(&q3.id, WAIT).expect("reply to q3");
    running.stop().unwrap();

    assert_eq!([turns(&r1), turns(&r2), turns(&r3)], [1, 2, 3]);
    let frames = wire(&s);
    assert_eq!(count(&frames, "session/new"), 1);
    assert_eq!(count(&frames, "session/load"), 0);
    let p = prompts(&frames);
    assert_eq!(p.len(), 3);
    assert_eq!(context_entries(&p[0]), 0, "a root mention has no history");
    assert_eq!(
        context_entries(&p[1]),
        0,
        "everything before q2 was delivered"
    );
    assert!(p[1].contains("already delivered to this session"));
    assert_eq!(context_entries(&p[2]), 1, "only the chatter is new");
    assert!(p[2].contains("freeze is on friday"));
    insta::assert_json_snapshot!("one_thread_one_session", wire_view(&s));
}

/// Two threads of one channel get two sessions; a DM is one conversation.
#[test]
fn threads_get_their_own_sessions() {
    let (_dir, mut s) = scenario();
    let a = s.post_top("thread A").unwrap();
    let b = s.post_top("thread B").unwrap();
    run_once(&s, &[], &[]);
    let frames = wire(&s);
    assert_eq!(count(&frames, "session/new"), 2);
    assert!(s.reply_to(&a.id).is_some() && s.reply_to(&b.id).is_some());
}

/// `--session-policy channel` collapses threads into one conversation session.
#[test]
fn channel_policy_shares_one_session_across_threads() {
    let (_dir, mut s) = scenario();
    let running = s
        .start(
            &harness_bin(),
            &agent(&s, &[]),
            &["--session-policy", "channel"],
        )
        .unwrap();
    let a = s.post_top("thread A").unwrap();
    s.wait_for_reply(&a.id, WAIT).expect("reply to A");
    let b = s.post_top("thread B").unwrap();
    let reply = s.wait_for_reply(&b.id, WAIT).expect("reply to B");
    running.stop().unwrap();
    assert_eq!(count(&wire(&s), "session/new"), 1);
    assert_eq!(turns(&reply), 2);
}

/// The owner's `!rotate` drops the thread's session; the next mention starts
/// a fresh one.
#[test]
fn owner_rotate_drops_the_session() {
    let (_dir, mut s) = scenario();
    let running = s.start(&harness_bin(), &agent(&s, &[]), &[]).unwrap();
    let root = s.post_top("start").unwrap();
    let r1 = s.wait_for_reply(&root.id, WAIT).unwrap();
    let rot = s
        .post_reply_as(buzz_acp::testing::OWNER, &root, &r1, "!rotate")
        .unwrap();
    s.wait_for_reply(&rot.id, WAIT).expect("rotate notice");
    let q = s.post_reply(&root, &r1, "again").unwrap();
    let r2 = s.wait_for_reply(&q.id, WAIT).unwrap();
    running.stop().unwrap();
    assert_eq!(turns(&r2), 1);
    assert_eq!(count(&wire(&s), "session/new"), 2);
}

/// Rotation after `BUZZ_ACP_MAX_TURNS_PER_SESSION` turns, and on `max_tokens`.
#[test]
fn sessions_rotate_after_max_turns_and_on_max_tokens() {
    let (_dir, mut s) = scenario();
    let running = s
        .start(
            &harness_bin(),
            &agent(&s, &[]),
            &["--max-turns-per-session", "2"],
        )
        .unwrap();
    let root = s.post_top("one").unwrap();
    let r1 = s.wait_for_reply(&root.id, WAIT).unwrap();
    let q2 = s.post_reply(&root, &r1, "two").unwrap();
    let r2 = s.wait_for_reply(&q2.id, WAIT).unwrap();
    let q3 = s.post_reply(&root, &r2, "three !stop:max_tokens").unwrap();
    let r3 = s.wait_for_reply(&q3.id, WAIT).unwrap();
    let q4 = s.post_reply(&root, &r3, "four").unwrap();
    let r4 = s.wait_for_reply(&q4.id, WAIT).unwrap();
    running.stop().unwrap();
    assert_eq!(
        [turns(&r1), turns(&r2), turns(&r3), turns(&r4)],
        [1, 2, 1, 1]
    );
    assert_eq!(count(&wire(&s), "session/new"), 3);
}

/// Model and permission mode are applied after `session/new`; the agent's
/// permission requests are answered with `allow_once`; the system prompt
/// reaches an agent without the capability as standing context, once.
#[test]
fn new_sessions_get_model_mode_and_standing_context_once() {
    let (_dir, mut s) = scenario();
    let root = s.post_top("hi !perm").unwrap();
    run_once(
        &s,
        &[],
        &["--model", "test-large", "--system-prompt", "Be terse."],
    );
    let frames = wire(&s);
    let sets: Vec<_> = acp_test_agent::harness::requests_of(&frames, "session/set_config_option")
        .iter()
        .map(|f| (f.params["configId"].clone(), f.params["value"].clone()))
        .collect();
    assert_eq!(
        sets,
        vec![
            (serde_json::json!("model"), serde_json::json!("test-large")),
            (
                serde_json::json!("mode"),
                serde_json::json!("bypassPermissions")
            ),
        ]
    );
    let reply = s.reply_to(&root.id).unwrap();
    assert!(
        reply.content.ends_with("permission=allow"),
        "{}",
        reply.content
    );
    let p = prompts(&frames);
    assert!(p[0].starts_with("<standing-context>\nBe terse."));
}

/// A malformed relay line is skipped with a warning and never blocks the rest.
#[test]
fn malformed_relay_lines_are_skipped() {
    let (_dir, mut s) = scenario();
    std::fs::write(s.relay_dir.join("events.jsonl"), "{broken\n").unwrap();
    let root = s.post_top("after the broken line").unwrap();
    run_once(&s, &[], &[]);
    assert!(s.reply_to(&root.id).is_some());
}

/// Events that do not mention the agent, and the agent's own events, are not
/// answered; a restart does not answer handled events again.
#[test]
fn admission_and_the_cursor_prevent_double_answers() {
    let (_dir, mut s) = scenario();
    let root = s.post_top("first").unwrap();
    let r1 = {
        run_once(&s, &[], &[]);
        s.reply_to(&root.id).unwrap()
    };
    s.post_chatter(&root, &r1, "not for the agent").unwrap();
    run_once(&s, &[], &[]);
    assert_eq!(s.replies().len(), 1);
    assert_eq!(count(&wire(&s), "session/prompt"), 1);
}

/// Removing the agent from a channel drops every session of that channel.
#[test]
fn removal_from_a_channel_drops_all_its_sessions() {
    let (_dir, mut s) = scenario();
    let running = s.start(&harness_bin(), &agent(&s, &[]), &[]).unwrap();
    let a = s.post_top("thread A").unwrap();
    let ra = s.wait_for_reply(&a.id, WAIT).unwrap();
    let b = s.post_top("thread B").unwrap();
    let rb = s.wait_for_reply(&b.id, WAIT).unwrap();
    s.post_removal().unwrap();
    buzz_acp::testing::wait_until(WAIT, || {
        (!s.observer_records("channel_removed").is_empty()).then_some(())
    })
    .expect("removal seen");
    let qa = s.post_reply(&a, &ra, "A again").unwrap();
    let ra2 = s.wait_for_reply(&qa.id, WAIT).unwrap();
    let qb = s.post_reply(&b, &rb, "B again").unwrap();
    let rb2 = s.wait_for_reply(&qb.id, WAIT).unwrap();
    running.stop().unwrap();
    assert_eq!((turns(&ra2), turns(&rb2)), (1, 1));
    assert_eq!(count(&wire(&s), "session/new"), 4);
}
