//! Guards of patch `session-store-resume` (port of block/buzz#6088 with the
//! corrections of #6990, #2633 and #6103).
//!
//! After a restart, a scope with a durable receipt is resumed with
//! `session/load` instead of a second `session/new`; definitive and
//! indeterminate load failures are told apart; replayed history never reaches
//! the observer or the relay; every in-process decision to abandon a session
//! removes its receipt, while agent death keeps it.
//!
//! Every scenario runs over the test relay (`RelayWorld`): the owner writes, and
//! a restart is the harness stopped (SIGTERM) and started again. Like upstream,
//! the harness hears only what is posted while it runs, so each run is: start,
//! post the mentions, wait for the answers, stop.

use buzz_acp_fork_tests::relay::{RELAY_CHANNEL, RelayWorld};
use buzz_acp_fork_tests::*;

/// run → stop → restart → mention: the second process loads the first
/// session, opens no second session, and the agent remembers the earlier turn.
#[test]
fn restart_resumes_the_stored_session() {
    let w = RelayWorld::new();
    let harness = w.start(&[], &[]);
    let root = w.post_top("Plan the release. remember alpha-7301");
    let r1 = w.wait_for_reply(&root.id, WAIT).expect("first reply");
    harness.stop().expect("the harness stops");
    let first = session_order(&wire(&w.s));
    assert_eq!(first.len(), 1);

    let harness = w.start(&[], &[]);
    let q = w.post_reply(&root, &r1, "What did I ask you to remember?");
    let r2 = w.wait_for_reply(&q.id, WAIT);
    harness.stop().expect("the harness stops");
    assert!(r2.is_some(), "the follow-up after the restart is answered");
    let r2 = r2.expect("checked above");

    let frames = wire(&w.s);
    assert_eq!(
        count_method(&frames, "session/new"),
        1,
        "no second session/new"
    );
    let loads = requests_of(&frames, "session/load");
    assert_eq!(loads.len(), 1);
    assert_eq!(loads[0].params["sessionId"], first[0].as_str());
    assert_eq!(turns(&r2), 2, "the loaded session remembers the first turn");
    assert!(r2.content.contains("alpha-7301"), "{}", r2.content);
    insta::assert_json_snapshot!("restart_wire_log", w.redacted(wire_shape(&w.s)));
    insta::assert_json_snapshot!("restart_receipts", receipt_view(&w));
}

/// The agent no longer knows the stored session (-32002): the receipt is
/// forgotten and a fresh session replaces it in the same turn.
#[test]
fn session_gone_falls_back_to_session_new_and_replaces_the_receipt() {
    let w = RelayWorld::new();
    let harness = w.start(&[], &[]);
    let root = w.post_top("first");
    let r1 = w.wait_for_reply(&root.id, WAIT).expect("first reply");
    harness.stop().expect("the harness stops");
    let before = stored_sessions(&w);

    let harness = w.start(&["--load-error", "-32002"], &[]);
    let q = w.post_reply(&root, &r1, "second");
    let r2 = w.wait_for_reply(&q.id, WAIT);
    harness.stop().expect("the harness stops");
    assert!(r2.is_some(), "the turn is not lost");

    let frames = wire(&w.s);
    assert_eq!(count_method(&frames, "session/load"), 1);
    assert_eq!(count_method(&frames, "session/new"), 2);
    assert_eq!(turns(&r2.expect("checked above")), 1);
    let after = stored_sessions(&w);
    assert_eq!(after.len(), 1);
    assert_ne!(
        after.values().next(),
        before.values().next(),
        "receipt replaced"
    );
}

/// An indeterminate failure (here: the agent says authentication is required,
/// -32000, while its transcripts are out of its reach) keeps the receipt,
/// opens no competing session, tells the channel what happened, and retries
/// the event later: once the agent can load again, it is answered on the
/// original session.
#[test]
fn indeterminate_load_failure_keeps_the_receipt_and_retries_later() {
    let w = RelayWorld::new();
    let harness = w.start(&[], &[]);
    let root = w.post_top("remember alpha-7301");
    let r1 = w.wait_for_reply(&root.id, WAIT).expect("first reply");
    harness.stop().expect("the harness stops");
    let receipt = stored_sessions(&w);

    // The agent cannot reach its transcripts, and says so as an authentication failure: an
    // answer that does not say the session is gone.
    let transcripts = w.s.agent_state_dir.join("sessions");
    let away = w.s.agent_state_dir.join("sessions-unreachable");
    std::fs::rename(&transcripts, &away).expect("the transcripts move out of reach");
    let auth = r#"{"code":-32000,"message":"Authentication required"}"#;
    // The first retry a second after the failure, and no giving up while the test looks (a
    // harness without the patch ignores the variables).
    let retry = [
        ("BUZZ_ACP_RESUME_RETRY_SECS", "1"),
        ("BUZZ_ACP_RESUME_MAX_ATTEMPTS", "1000"),
        ("BUZZ_ACP_RESUME_GIVE_UP_SECS", "3600"),
    ];
    let harness = w.start_env(&["--missing-session", auth], &[], &retry);
    let q = w.post_reply(&root, &r1, "still there?");
    let notice = wait_until(WAIT, || w.notices_about(&q.id).into_iter().next());
    assert!(notice.is_some(), "an actionable notice about {}", q.id);
    let notice = notice.expect("checked above");
    assert!(notice.content.contains("keep trying"), "{}", notice.content);
    assert_eq!(reply_turns(&notice), None, "a notice, not an answer");
    assert_eq!(
        w.answers_to(&q.id),
        0,
        "the notice does not count as q's answer"
    );
    assert_eq!(
        count_method(&wire(&w.s), "session/new"),
        1,
        "no competing session"
    );
    assert_eq!(stored_sessions(&w), receipt, "receipt kept");

    // The agent can load again: a retry answers the event, not lost.
    if transcripts.exists() {
        std::fs::remove_dir(&transcripts).expect("an empty directory the agent made");
    }
    std::fs::rename(&away, &transcripts).expect("the transcripts are back");
    let answer = wait_until(WAIT, || {
        w.replies()
            .into_iter()
            .filter(|r| r.thread_refs().reply.as_deref() == Some(q.id.as_str()))
            .find(|r| reply_turns(r).is_some())
    });
    harness.stop().expect("the harness stops");
    assert!(answer.is_some(), "the retried event is answered");
    assert_eq!(turns(&answer.expect("checked above")), 2);
    assert_eq!(count_method(&wire(&w.s), "session/new"), 1);
    assert_eq!(w.notices_about(&q.id).len(), 1, "the thread is told once");
}

/// The history an agent replays while loading is consumed: it reaches neither
/// the observer log nor the relay (#2633).
#[test]
fn replayed_history_never_reaches_the_observer_or_the_relay() {
    let w = RelayWorld::new();
    let harness = w.start(&[], &[]);
    let root = w.post_top("one");
    let r1 = w.wait_for_reply(&root.id, WAIT).expect("answered");
    harness.stop().expect("the harness stops");

    let harness = w.start(&[], &[]);
    let q = w.post_reply(&root, &r1, "two");
    let r2 = w.wait_for_reply(&q.id, WAIT).expect("answered");
    harness.stop().expect("the harness stops");
    let events_before = w.events_in(RELAY_CHANNEL).len();

    let harness = w.start(&[], &[]);
    let q3 = w.post_reply(&root, &r2, "three");
    let r3 = w.wait_for_reply(&q3.id, WAIT);
    harness.stop().expect("the harness stops");
    assert!(r3.is_some(), "answered");

    // Two loads replayed 1 and 2 earlier turns: their user chunks never show.
    assert_eq!(count_method(&wire(&w.s), "session/load"), 2);
    assert_eq!(observed_updates(&w.s, "user_message_chunk"), 0);
    // The live turns' own agent chunks are observed as usual.
    assert!(observed_updates(&w.s, "agent_message_chunk") >= 6);
    // Only the question and its answer were added to the relay.
    assert_eq!(w.events_in(RELAY_CHANNEL).len(), events_before + 2);
}

/// `!rotate` removes the receipt when it drops the session (the store write
/// runs beside the event loop, ahead of any later write of the scope), and the next `session/new` asks channel-keyed gateways for a fresh
/// session exactly once (#6103).
#[test]
fn rotate_forgets_the_receipt_and_requests_a_fresh_session_once() {
    let w = RelayWorld::new();
    let harness = w.start(&[], &[]);
    let root = w.post_top("start");
    let r1 = w.wait_for_reply(&root.id, WAIT).expect("answered");
    stored_sessions_once(&w, 1);
    let rot = w.post_reply(&root, &r1, "!rotate");
    w.wait_for_reply(&rot.id, WAIT).expect("rotate notice");
    // The removal is written beside the event loop, queued before any later write of the scope.
    stored_sessions_once(&w, 0);
    let q2 = w.post_reply(&root, &r1, "again");
    let r2 = w.wait_for_reply(&q2.id, WAIT).expect("answered");
    let q3 = w.post_reply(&root, &r2, "and again");
    w.wait_for_reply(&q3.id, WAIT).expect("answered");
    harness.stop().expect("the harness stops");

    let news = requests_of(&wire(&w.s), "session/new")
        .into_iter()
        .map(|f| f.params["_meta"].clone())
        .collect::<Vec<_>>();
    assert_eq!(news.len(), 2);
    assert_eq!(news[0]["freshSession"], serde_json::Value::Null);
    assert_eq!(news[1]["freshSession"], true);
    assert_eq!(news[0]["channelId"], RELAY_CHANNEL);
    assert_eq!(turns(&r2), 1);
    assert_eq!(
        stored_sessions(&w).len(),
        1,
        "the new session has a receipt"
    );
}

/// Agent death is not a decision to start over: the receipt stays, and the
/// respawned worker loads the session again.
#[test]
fn agent_death_keeps_the_receipt_and_the_respawn_loads_it() {
    let w = RelayWorld::new();
    let agent_args = [
        "--exit-on-method",
        "session/prompt",
        "--exit-on-request",
        "2",
    ];
    let harness = w.start(&agent_args, &[]);
    let root = w.post_top("remember alpha-7301");
    let r1 = w.wait_for_reply(&root.id, WAIT).expect("answered");
    let q = w.post_reply(&root, &r1, "still there?");
    let r2 = w.wait_for_reply(&q.id, WAIT).expect("reply after respawn");
    harness.stop().expect("the harness stops");
    let frames = wire(&w.s);
    assert_eq!(count_method(&frames, "session/new"), 1);
    assert_eq!(count_method(&frames, "session/load"), 1);
    assert_eq!(turns(&r2), 2);
}

/// `--no-resume-sessions` restores upstream behaviour: no store, no load.
#[test]
fn no_resume_sessions_restores_upstream_behaviour() {
    let w = RelayWorld::new();
    let flags = ["--no-resume-sessions"];
    let harness = w.start(&[], &flags);
    let root = w.post_top("one");
    let r1 = w.wait_for_reply(&root.id, WAIT).expect("answered");
    harness.stop().expect("the harness stops");

    let harness = w.start(&[], &flags);
    let q = w.post_reply(&root, &r1, "two");
    let r2 = w.wait_for_reply(&q.id, WAIT).expect("answered");
    harness.stop().expect("the harness stops");
    let frames = wire(&w.s);
    assert_eq!(count_method(&frames, "session/load"), 0);
    assert_eq!(count_method(&frames, "session/new"), 2);
    assert_eq!(turns(&r2), 1);
    assert!(!store_path(&w).exists(), "nothing is written");
}

/// A loaded session gets no zero-usage baseline and no initial message.
#[test]
fn loaded_sessions_get_no_initial_message_and_no_usage_baseline() {
    let w = RelayWorld::new();
    let flags = ["--initial-message", "Read the repo first."];
    let harness = w.start(&[], &flags);
    let root = w.post_top("one");
    let r1 = w.wait_for_reply(&root.id, WAIT).expect("answered");
    harness.stop().expect("the harness stops");

    let harness = w.start(&[], &flags);
    let q = w.post_reply(&root, &r1, "two");
    let r2 = w.wait_for_reply(&q.id, WAIT);
    harness.stop().expect("the harness stops");
    assert!(r2.is_some(), "answered");

    let p = prompts(&wire(&w.s));
    let initial = p
        .iter()
        .filter(|t| t.as_str() == "Read the repo first.")
        .count();
    assert_eq!(
        initial, 1,
        "only the created session got the initial message"
    );
    let usage: Vec<bool> =
        w.s.observer_records("turn_usage")
            .iter()
            .map(|r| r["deltaReliable"].as_bool().unwrap_or(false))
            .collect();
    assert_eq!(usage, vec![true, false]);
}

/// The agent no longer has the stored session and says so the way each real adapter does
/// (codex-acp and claude-agent-acp: -32002; opencode: -32603 "OpenCode service failure" with
/// `data.service` "session"; cursor-agent style: -32602 "Session not found"). Each answer is
/// definitive: the thread is told its earlier context is gone, answered from one new session
/// with the whole window, and the receipt replaced.
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
        let w = RelayWorld::new();
        let harness = w.start(agent_args, &[]);
        let root = w.post_top("remember alpha-7301");
        let r1 = w.wait_for_reply(&root.id, WAIT).expect("answered");
        harness.stop().expect("the harness stops");
        let lost = stored_sessions(&w).into_values().next();
        assert!(lost.is_some(), "{adapter}: the first session has a receipt");
        // The agent loses its storage.
        std::fs::remove_dir_all(w.s.agent_state_dir.join("sessions"))
            .expect("the agent's sessions are removed");

        let harness = w.start(agent_args, &[]);
        let q = w.post_reply(&root, &r1, "what did I say?");
        let answer = w.wait_for_reply(&q.id, WAIT);
        wait_until(WAIT, || w.notices_about(&q.id).into_iter().next());
        harness.stop().expect("the harness stops");
        let notices: Vec<String> = w
            .notices_about(&q.id)
            .into_iter()
            .map(|n| n.content)
            .collect();
        assert_eq!(notices.len(), 1, "{adapter}: one notice: {notices:?}");
        let notice = &notices[0];
        assert!(notice.contains("gone"), "{adapter}: {notice}");
        assert!(notice.contains("new session"), "{adapter}: {notice}");
        assert_eq!(w.answers_to(&q.id), 1, "{adapter}: one answer");
        let answer = answer.expect("the answer").content;
        assert!(
            answer.starts_with("turns=1 "),
            "{adapter}: a new session: {answer}"
        );
        assert!(
            answer.contains("alpha-7301"),
            "{adapter}: the whole window: {answer}"
        );
        let frames = wire(&w.s);
        assert_eq!(
            requests_of(&frames, "session/load").len(),
            1,
            "{adapter}: one attempt"
        );
        assert_eq!(count_method(&frames, "session/new"), 2, "{adapter}");
        let now = stored_sessions(&w).into_values().next();
        assert_ne!(now, lost, "{adapter}: the receipt names the new session");
    }
}

/// Receipts in a shared PostgreSQL database follow a thread across machines: harness A answers a
/// thread and stops; harness B, with its own state directory (another machine, or a pod
/// rescheduled elsewhere) and the same database, reopens that thread's session.
#[test]
fn a_shared_database_lets_another_harness_resume_the_thread() {
    let Some(url) = postgres_url() else { return };
    let mut w = RelayWorld::new();
    // The variable, not the flag: a harness without the store ignores it.
    let store = [("BUZZ_ACP_SESSION_STORE_URL", url.as_str())];
    let machine_a = w.s.state_dir.clone();
    let harness = w.start_env(&[], &[], &store);
    let root = w.post_top("remember alpha-7301");
    let r1 = w.wait_for_reply(&root.id, WAIT).expect("answered");
    harness.stop().expect("the harness stops");

    // Harness B: another machine, with an empty state directory (no receipts). It reads the
    // thread's history from the relay; only q, posted while it runs, gets a turn.
    w.s.state_dir = w.s.root.join("machine-b");
    std::fs::create_dir_all(&w.s.state_dir).expect("machine B's state directory");
    let harness = w.start_env(&[], &[], &store);
    let q = w.post_reply(&root, &r1, "what did I say?");
    let r2 = w.wait_for_reply(&q.id, WAIT).expect("answered");
    harness.stop().expect("the harness stops");

    assert_eq!(turns(&r2), 2, "harness B continued A's session");
    assert_eq!(w.answers_to(&root.id), 1, "B did not answer the root again");
    assert!(r2.content.contains("alpha-7301"));
    let frames = wire(&w.s);
    assert_eq!(count_method(&frames, "session/new"), 1);
    assert_eq!(count_method(&frames, "session/load"), 1);
    assert!(
        !machine_a.join("sessions.sqlite3").exists(),
        "no local receipts"
    );
}
