//! Guards of patch `session-store-resume` (port of block/buzz#6088 with the
//! corrections of #6990, #2633 and #6103).
//!
//! After a restart, a scope with a durable receipt is resumed with
//! `session/load` instead of a second `session/new`; definitive and
//! indeterminate load failures are told apart; replayed history never reaches
//! the observer or the relay; every in-process decision to abandon a session
//! removes its receipt, while agent death keeps it.

use buzz_acp_fork_tests::relay::RelayWorld;
use buzz_acp_fork_tests::*;

/// run → stop → restart → mention: the second process loads the first
/// session, opens no second session, and the agent remembers the earlier turn.
#[test]
fn restart_resumes_the_stored_session() {
    let (_dir, mut s) = scenario();
    let root = s.post_top("Plan the release. remember alpha-7301").unwrap();
    run_once(&s, &[], &[]);
    let r1 = s.reply_to(&root.id).expect("first reply");
    let first = session_order(&wire(&s));
    assert_eq!(first.len(), 1);

    let q = s
        .post_reply(&root, &r1, "What did I ask you to remember?")
        .unwrap();
    run_once(&s, &[], &[]);
    let r2 = s.reply_to(&q.id).expect("reply after restart");

    let frames = wire(&s);
    assert_eq!(
        count_method(&frames, "session/new"),
        1,
        "no second session/new"
    );
    let loads = requests_of(&frames, "session/load");
    assert_eq!(loads.len(), 1);
    assert_eq!(loads[0].params["sessionId"], first[0].as_str());
    assert_eq!(turns(&r2), 2, "the loaded session remembers the first turn");
    assert!(r2.content.contains("alpha-7301"));
    insta::assert_json_snapshot!("restart_wire_log", wire_shape(&s));
    insta::assert_json_snapshot!("restart_receipts", receipt_view(&s));
}

/// The same over a real Nostr relay: the owner's mention is answered, the harness is stopped
/// (SIGTERM) and started again, and the follow-up in the thread is answered on the first
/// session, loaded, which remembers the first turn.
#[test]
fn over_a_relay_a_restart_resumes_the_threads_session() {
    let w = RelayWorld::new();
    let harness = w.start(&[], &[]);
    let root = w.say(&w.owner, "Plan the release. remember alpha-7301", None);
    let r1 = w.answer_to(&root);
    harness.stop().expect("the harness stops");
    let first = session_order(&wire(&w.s));
    assert_eq!(first.len(), 1);

    let harness = w.start(&[], &[]);
    let root_id = root.id.to_hex();
    let q = w.say(
        &w.owner,
        "What did I ask you to remember?",
        Some((&root_id, &r1.id)),
    );
    let r2 = w.answer_to(&q);
    harness.stop().expect("the harness stops");

    let frames = wire(&w.s);
    assert_eq!(count_method(&frames, "session/new"), 1, "no second session/new");
    let loads = requests_of(&frames, "session/load");
    assert_eq!(loads.len(), 1);
    assert_eq!(loads[0].params["sessionId"], first[0].as_str());
    assert_eq!(turns(&r2), 2, "the loaded session remembers the first turn");
    assert!(r2.content.contains("alpha-7301"), "{}", r2.content);
}

/// The agent no longer knows the stored session (-32002): the receipt is
/// forgotten and a fresh session replaces it in the same turn.
#[test]
fn session_gone_falls_back_to_session_new_and_replaces_the_receipt() {
    let (_dir, mut s) = scenario();
    let root = s.post_top("first").unwrap();
    run_once(&s, &[], &[]);
    let r1 = s.reply_to(&root.id).unwrap();
    let before = stored_sessions(&s);

    let q = s.post_reply(&root, &r1, "second").unwrap();
    run_once(&s, &["--load-error", "-32002"], &[]);
    let r2 = s.reply_to(&q.id).expect("the turn is not lost");

    let frames = wire(&s);
    assert_eq!(count_method(&frames, "session/load"), 1);
    assert_eq!(count_method(&frames, "session/new"), 2);
    assert_eq!(turns(&r2), 1);
    let after = stored_sessions(&s);
    assert_eq!(after.len(), 1);
    assert_ne!(
        after.values().next(),
        before.values().next(),
        "receipt replaced"
    );
}

/// An indeterminate failure (here: authentication required, -32000) keeps the
/// receipt, opens no competing session, tells the channel what happened, and
/// retries the event later: once the agent can load again, it is answered on
/// the original session.
#[test]
fn indeterminate_load_failure_keeps_the_receipt_and_retries_later() {
    let (_dir, mut s) = scenario();
    let root = s.post_top("remember alpha-7301").unwrap();
    run_once(&s, &[], &[]);
    let r1 = s.reply_to(&root.id).unwrap();
    let receipt = stored_sessions(&s);

    let q = s.post_reply(&root, &r1, "still there?").unwrap();
    let running = start(&s, &["--load-error", "-32000"], &[]);
    let notice = wait_for_notice(&s, &q.id, WAIT).expect("an actionable notice");
    running.stop().unwrap();
    assert!(notice.content.contains("keep trying"), "{}", notice.content);
    assert_eq!(reply_turns(&notice), None, "a notice, not an answer");
    assert_eq!(
        s.answers_to(&q.id),
        0,
        "the notice does not count as q's answer"
    );
    let frames = wire(&s);
    assert_eq!(
        count_method(&frames, "session/new"),
        1,
        "no competing session"
    );
    assert_eq!(stored_sessions(&s), receipt, "receipt kept");

    // The agent can load again: the event is answered, not lost.
    run_once(&s, &[], &[]);
    let answer = s
        .replies()
        .into_iter()
        .filter(|r| r.thread_refs().reply.as_deref() == Some(q.id.as_str()))
        .find(|r| reply_turns(r).is_some())
        .expect("the retried event is answered");
    assert_eq!(turns(&answer), 2);
    assert_eq!(count_method(&wire(&s), "session/new"), 1);
}

/// The history an agent replays while loading is consumed: it reaches neither
/// the observer log nor the relay (#2633).
#[test]
fn replayed_history_never_reaches_the_observer_or_the_relay() {
    let (_dir, mut s) = scenario();
    let root = s.post_top("one").unwrap();
    run_once(&s, &[], &[]);
    let r1 = s.reply_to(&root.id).unwrap();
    let q = s.post_reply(&root, &r1, "two").unwrap();
    run_once(&s, &[], &[]);
    let r2 = s.reply_to(&q.id).unwrap();
    let events_before = s.events().len();
    let q3 = s.post_reply(&root, &r2, "three").unwrap();
    run_once(&s, &[], &[]);
    assert!(s.reply_to(&q3.id).is_some());

    // Two loads replayed 1 and 2 earlier turns: their user chunks never show.
    assert_eq!(count_method(&wire(&s), "session/load"), 2);
    assert_eq!(observed_updates(&s, "user_message_chunk"), 0);
    // The live turns' own agent chunks are observed as usual.
    assert!(observed_updates(&s, "agent_message_chunk") >= 6);
    // Only the question and its answer were added to the relay.
    assert_eq!(s.events().len(), events_before + 2);
}

/// `!rotate` removes the receipt when it drops the session (the store write
/// runs beside the event loop, ahead of any later write of the scope), and the next `session/new` asks channel-keyed gateways for a fresh
/// session exactly once (#6103).
#[test]
fn rotate_forgets_the_receipt_and_requests_a_fresh_session_once() {
    let (_dir, mut s) = scenario();
    let running = start(&s, &[], &[]);
    let root = s.post_top("start").unwrap();
    let r1 = s.wait_for_reply(&root.id, WAIT).unwrap();
    stored_sessions_once(&s, 1);
    let rot = s.post_reply_as(OWNER, &root, &r1, "!rotate").unwrap();
    s.wait_for_reply(&rot.id, WAIT).expect("rotate notice");
    // The removal is written beside the event loop, queued before any later write of the scope.
    stored_sessions_once(&s, 0);
    let q2 = s.post_reply(&root, &r1, "again").unwrap();
    let r2 = s.wait_for_reply(&q2.id, WAIT).unwrap();
    let q3 = s.post_reply(&root, &r2, "and again").unwrap();
    s.wait_for_reply(&q3.id, WAIT).unwrap();
    running.stop().unwrap();

    let news = requests_of(&wire(&s), "session/new")
        .into_iter()
        .map(|f| f.params["_meta"].clone())
        .collect::<Vec<_>>();
    assert_eq!(news.len(), 2);
    assert_eq!(news[0]["freshSession"], serde_json::Value::Null);
    assert_eq!(news[1]["freshSession"], true);
    assert_eq!(news[0]["channelId"], buzz_acp::testing::GENERAL);
    assert_eq!(turns(&r2), 1);
    assert_eq!(
        stored_sessions(&s).len(),
        1,
        "the new session has a receipt"
    );
}

/// Agent death is not a decision to start over: the receipt stays, and the
/// respawned worker loads the session again.
#[test]
fn agent_death_keeps_the_receipt_and_the_respawn_loads_it() {
    let (_dir, mut s) = scenario();
    let agent_args = [
        "--exit-on-method",
        "session/prompt",
        "--exit-on-request",
        "2",
    ];
    let running = start(&s, &agent_args, &[]);
    let root = s.post_top("remember alpha-7301").unwrap();
    let r1 = s.wait_for_reply(&root.id, WAIT).unwrap();
    let q = s.post_reply(&root, &r1, "still there?").unwrap();
    let r2 = s.wait_for_reply(&q.id, WAIT).expect("reply after respawn");
    running.stop().unwrap();
    let frames = wire(&s);
    assert_eq!(count_method(&frames, "session/new"), 1);
    assert_eq!(count_method(&frames, "session/load"), 1);
    assert_eq!(turns(&r2), 2);
}

/// `--no-resume-sessions` restores upstream behaviour: no store, no load.
#[test]
fn no_resume_sessions_restores_upstream_behaviour() {
    let (_dir, mut s) = scenario();
    let root = s.post_top("one").unwrap();
    run_once(&s, &[], &["--no-resume-sessions"]);
    let r1 = s.reply_to(&root.id).unwrap();
    let q = s.post_reply(&root, &r1, "two").unwrap();
    run_once(&s, &[], &["--no-resume-sessions"]);
    let frames = wire(&s);
    assert_eq!(count_method(&frames, "session/load"), 0);
    assert_eq!(count_method(&frames, "session/new"), 2);
    assert_eq!(turns(&s.reply_to(&q.id).unwrap()), 1);
    assert!(!store_path(&s).exists(), "nothing is written");
}

/// A loaded session gets no zero-usage baseline and no initial message.
#[test]
fn loaded_sessions_get_no_initial_message_and_no_usage_baseline() {
    let (_dir, mut s) = scenario();
    let flags = ["--initial-message", "Read the repo first."];
    let root = s.post_top("one").unwrap();
    run_once(&s, &[], &flags);
    let r1 = s.reply_to(&root.id).unwrap();
    let q = s.post_reply(&root, &r1, "two").unwrap();
    run_once(&s, &[], &flags);
    assert!(s.reply_to(&q.id).is_some());

    let p = prompts(&wire(&s));
    let initial = p
        .iter()
        .filter(|t| t.as_str() == "Read the repo first.")
        .count();
    assert_eq!(
        initial, 1,
        "only the created session got the initial message"
    );
    let usage: Vec<bool> = s
        .observer_records("turn_usage")
        .iter()
        .map(|r| r["deltaReliable"].as_bool().unwrap_or(false))
        .collect();
    assert_eq!(usage, vec![true, false]);
}

/// The agent no longer has the stored session and says so the way each real adapter does
/// (codex-acp and claude-agent-acp: -32002; opencode: -32603 "OpenCode service failure" with
/// `data.service` "session"; cursor-agent style: -32602 "Session not found"). Each answer is
/// definitive: the thread is told its earlier context is gone, answered from one new session
/// with the whole window, the receipt replaced, and `--once` ends.
#[test]
fn a_lost_session_is_answered_from_a_new_session_with_a_notice() {
    let cursor = r#"{"code":-32602,"message":"Invalid params","data":"Session not found"}"#;
    let adapters: [(&str, &[&str]); 4] = [
        (
            "codex-acp",
            &[
                "--missing-session",
                "codex-acp",
                "--agent-name",
                "codex-acp",
            ],
        ),
        ("claude", &["--missing-session", "claude-agent-acp"]),
        (
            "opencode",
            &["--missing-session", "opencode", "--agent-name", "OpenCode"],
        ),
        ("cursor", &["--missing-session", cursor]),
    ];
    for (adapter, agent_args) in adapters {
        let (_dir, mut s) = scenario();
        let root = s.post_top("remember alpha-7301").unwrap();
        run_once(&s, agent_args, &[]);
        let r1 = s.reply_to(&root.id).unwrap();
        let lost = stored_sessions(&s).into_values().next().unwrap();
        // The agent loses its storage.
        std::fs::remove_dir_all(s.agent_state_dir.join("sessions")).unwrap();

        let q = s.post_reply(&root, &r1, "what did I say?").unwrap();
        run_once(&s, agent_args, &[]);
        let notices: Vec<String> = notices_about(&s, &q.id)
            .into_iter()
            .map(|n| n.content)
            .collect();
        assert_eq!(notices.len(), 1, "{adapter}: one notice: {notices:?}");
        let notice = &notices[0];
        assert!(notice.contains("gone"), "{adapter}: {notice}");
        assert!(notice.contains("new session"), "{adapter}: {notice}");
        assert_eq!(s.answers_to(&q.id), 1, "{adapter}: one answer");
        let answer = s.reply_to(&q.id).expect("the answer").content;
        assert!(
            answer.starts_with("turns=1 "),
            "{adapter}: a new session: {answer}"
        );
        assert!(
            answer.contains("alpha-7301"),
            "{adapter}: the whole window: {answer}"
        );
        let frames = wire(&s);
        assert_eq!(
            requests_of(&frames, "session/load").len(),
            1,
            "{adapter}: one attempt"
        );
        assert_eq!(count_method(&frames, "session/new"), 2, "{adapter}");
        let now = stored_sessions(&s).into_values().next().unwrap();
        assert_ne!(now, lost, "{adapter}: the receipt names the new session");
    }
}

/// Receipts in a shared PostgreSQL database follow a thread across machines: harness A answers a
/// thread and stops; harness B, with its own state directory (another machine, or a pod
/// rescheduled elsewhere) and the same database, reopens that thread's session.
#[test]
fn a_shared_database_lets_another_harness_resume_the_thread() {
    let Some(url) = postgres_url() else { return };
    let (_dir, mut s) = scenario();
    // The variable, not the flag: a harness without the store ignores it.
    let store = [("BUZZ_ACP_SESSION_STORE_URL", url.as_str())];
    let machine_a = s.state_dir.clone();
    let root = s.post_top("remember alpha-7301").unwrap();
    run_once_env(&s, &[], &[], &store);
    let r1 = s.reply_to(&root.id).unwrap();

    // Harness B: another machine, with an empty state directory (no cursor, no receipts). It
    // reads the relay from the start; the root is already answered, so only q gets a turn.
    s.state_dir = s.root.join("machine-b");
    std::fs::create_dir_all(&s.state_dir).unwrap();
    let q = s.post_reply(&root, &r1, "what did I say?").unwrap();
    run_once_env(&s, &[], &[], &store);
    let r2 = s.reply_to(&q.id).unwrap();

    assert_eq!(turns(&r2), 2, "harness B continued A's session");
    assert_eq!(s.answers_to(&root.id), 1, "B did not answer the root again");
    assert!(r2.content.contains("alpha-7301"));
    let frames = wire(&s);
    assert_eq!(count_method(&frames, "session/new"), 1);
    assert_eq!(count_method(&frames, "session/load"), 1);
    assert!(
        !machine_a.join("sessions.sqlite3").exists(),
        "no local receipts"
    );
}
