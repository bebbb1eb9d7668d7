//! Guards of patch `delta-context-delivery`: the record of what a session has
//! been shown (`delivered_event_ids`, `standing_context_sent`) is persisted
//! with its receipt, so after a resume the first prompt carries only the
//! events the loaded session has not seen.

use buzz_acp_fork_tests::relay::RelayWorld;
use buzz_acp_fork_tests::*;

/// Two turns and some chatter, a restart, one new message: the first prompt
/// after `session/load` holds only that message (as context) and the trigger,
/// never the thread root or the earlier replies again.
#[test]
fn after_a_restart_the_first_prompt_holds_only_the_new_events() {
    let (_dir, mut s) = scenario();
    let root = s.post_top("Plan the release").unwrap();
    run_once(&s, &[], &[]);
    let r1 = s.reply_to(&root.id).unwrap();
    let q2 = s.post_reply(&root, &r1, "step one?").unwrap();
    run_once(&s, &[], &[]);
    let r2 = s.reply_to(&q2.id).unwrap();

    let chatter = s
        .post_chatter(&root, &r2, "fyi: freeze is on friday")
        .unwrap();
    let q3 = s.post_reply(&root, &chatter, "step two?").unwrap();
    run_once(&s, &[], &[]);
    let r3 = s.reply_to(&q3.id).unwrap();

    let frames = wire(&s);
    assert_eq!(count_method(&frames, "session/load"), 2);
    assert_eq!(count_method(&frames, "session/new"), 1);
    let p = prompts(&frames);
    assert_eq!(
        context_entries(&p[1]),
        0,
        "everything before q2 was delivered"
    );
    assert!(p[1].contains("already delivered to this session"));
    assert_eq!(context_entries(&p[2]), 1, "only the chatter is new");
    assert!(p[2].contains("freeze is on friday"));
    assert!(
        !p[2].contains("Plan the release"),
        "the root is not re-sent"
    );
    assert_eq!(turns(&r3), 3);
    insta::assert_json_snapshot!("restart_delta_wire_log", wire_view(&s));
}

/// The same over a real Nostr relay: while the harness is stopped, someone else writes in the
/// thread; after the restart the owner's follow-up is answered on the loaded session, whose first
/// prompt carries only that message (fetched from the relay), not the root it already had.
#[test]
fn over_a_relay_after_a_restart_the_first_prompt_holds_only_the_new_events() {
    let w = RelayWorld::new();
    let harness = w.start(&[], &[]);
    let root = w.say(&w.owner, "Plan the release", None);
    let r1 = w.answer_to(&root);
    harness.stop().expect("the harness stops");

    let root_id = root.id.to_hex();
    let someone = nostr::Keys::generate();
    let chatter = w.say(&someone, "fyi: freeze is on friday", Some((&root_id, &r1.id)));
    let harness = w.start(&[], &[]);
    let chatter_id = chatter.id.to_hex();
    let q = w.say(&w.owner, "step two?", Some((&root_id, &chatter_id)));
    let answer = w.answer_to(&q);
    harness.stop().expect("the harness stops");

    let frames = wire(&w.s);
    assert_eq!(count_method(&frames, "session/new"), 1);
    let p = prompts(&frames);
    assert_eq!(p.len(), 2);
    assert_eq!(context_entries(&p[1]), 1, "only the chatter is new: {}", p[1]);
    assert!(p[1].contains("freeze is on friday"), "{}", p[1]);
    assert!(!p[1].contains("Plan the release"), "the root is not re-sent: {}", p[1]);
    assert_eq!(turns(&answer), 2);
}

/// The same after an idle pool sleep: the reloaded session gets the delta.
#[test]
fn after_an_idle_pool_sleep_the_reloaded_session_gets_only_the_delta() {
    let (_dir, mut s) = scenario();
    let running = start(&s, &[], &["--lazy-pool", "--idle-pool-sleep", "1"]);
    let root = s.post_top("a thread").unwrap();
    let r1 = s.wait_for_reply(&root.id, WAIT).unwrap();
    wait_until(WAIT, || {
        (!s.observer_records("pool_sleep").is_empty()).then_some(())
    })
    .expect("the pool sleeps");
    let q = s.post_reply(&root, &r1, "after the sleep").unwrap();
    let r2 = s.wait_for_reply(&q.id, WAIT).unwrap();
    running.stop().unwrap();

    let frames = wire(&s);
    assert_eq!(count_method(&frames, "session/load"), 1);
    assert_eq!(context_entries(&prompts(&frames)[1]), 0);
    assert_eq!(turns(&r2), 2);
}

/// When the stored session cannot be loaded (-32002), the fresh session gets
/// the whole window, and the receipt's delivery state starts from that
/// fresh session's own turn (nothing inherited from the lost one).
#[test]
fn a_fresh_session_after_a_failed_load_gets_the_whole_window_and_a_new_ledger() {
    let (_dir, mut s) = scenario();
    let root = s.post_top("root").unwrap();
    run_once(&s, &[], &[]);
    let r1 = s.reply_to(&root.id).unwrap();
    let q = s.post_reply(&root, &r1, "again").unwrap();
    run_once(&s, &["--load-error", "-32002"], &[]);
    let r2 = s.reply_to(&q.id).unwrap();

    let frames = wire(&s);
    let p = prompts(&frames);
    assert_eq!(
        context_entries(&p[1]),
        2,
        "root and first reply, as upstream"
    );
    let stored = receipts(&s);
    assert_eq!(stored.len(), 1);
    let ledger = stored[0]
        .record
        .delivery
        .clone()
        .expect("the ledger is persisted");
    let ids = ledger.delivered_event_ids;
    let mut expected = vec![root.id.clone(), r1.id.clone(), q.id.clone(), r2.id.clone()];
    expected.sort();
    assert_eq!(ids, expected, "context, trigger and the agent's reply");
    assert_eq!(turns(&r2), 1);
}

/// A long thread: the persisted ledger keeps only ids that can still appear
/// in a context window, so the store file does not grow with the thread.
#[test]
fn the_persisted_ledger_stays_bounded_in_long_threads() {
    let (_dir, mut s) = scenario();
    let root = s.post_top("a long thread").unwrap();
    let mut parent = root.clone();
    for i in 0..30 {
        parent = s
            .post_chatter(&root, &parent, &format!("message {i}"))
            .unwrap();
    }
    let q = s.post_reply(&root, &parent, "summarise").unwrap();
    run_once(&s, &[], &["--context-message-limit", "5"]);
    assert!(s.reply_to(&q.id).is_some());

    let stored = receipts(&s);
    let ledger = stored[0]
        .record
        .delivery
        .clone()
        .expect("the ledger is persisted");
    let ids = ledger.delivered_event_ids.len();
    // root + 5 replies of the window + the two triggers + the reply, at most.
    assert!(ids <= 9, "{ids} ids stored for a window of 5");
    assert!(ids >= 7);
    insta::assert_json_snapshot!("bounded_store_file", store_view(&s));
}
