//! Guards of patch `delta-context-delivery`: the record of what a session has
//! been shown (`delivered_event_ids`, `standing_context_sent`) is persisted
//! with its receipt, so after a resume the first prompt carries only the
//! events the loaded session has not seen.
//!
//! Every scenario runs over the test relay (`RelayWorld`): the owner writes, a
//! colleague chats without mentioning the agent, and a restart is the harness
//! stopped and started again (it hears only what is posted while it runs, and
//! reads the thread's history from the relay when it starts).

use buzz_acp_fork_tests::relay::RelayWorld;
use buzz_acp_fork_tests::*;

/// Two turns, a restart, chatter while the harness is stopped, a restart, one
/// new message: the first prompt after each `session/load` holds only what
/// the loaded session has not seen (the chatter, fetched from the relay's
/// history) and the trigger, never the thread root or the earlier replies
/// again.
#[test]
fn after_a_restart_the_first_prompt_holds_only_the_new_events() {
    let w = RelayWorld::new();
    let harness = w.start(&[], &[]);
    let root = w.post_top("Plan the release");
    let r1 = w.wait_for_reply(&root.id, WAIT).expect("answered");
    harness.stop().expect("the harness stops");

    let harness = w.start(&[], &[]);
    let q2 = w.post_reply(&root, &r1, "step one?");
    let r2 = w.wait_for_reply(&q2.id, WAIT).expect("answered");
    harness.stop().expect("the harness stops");

    let chatter = w.post_chatter(&root, &r2, "fyi: freeze is on friday");
    let harness = w.start(&[], &[]);
    let q3 = w.post_reply(&root, &chatter, "step two?");
    let r3 = w.wait_for_reply(&q3.id, WAIT).expect("answered");
    harness.stop().expect("the harness stops");

    let frames = wire(&w.s);
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
    insta::assert_json_snapshot!("restart_delta_wire_log", w.wire_view());
}

/// The same after an idle pool sleep: the reloaded session gets the delta.
#[test]
fn after_an_idle_pool_sleep_the_reloaded_session_gets_only_the_delta() {
    let w = RelayWorld::new();
    let harness = w.start(&[], &["--lazy-pool", "--idle-pool-sleep", "1"]);
    let root = w.post_top("a thread");
    let r1 = w.wait_for_reply(&root.id, WAIT).expect("answered");
    wait_until(WAIT, || {
        (!w.s.observer_records("pool_sleep").is_empty()).then_some(())
    })
    .expect("the pool sleeps");
    let q = w.post_reply(&root, &r1, "after the sleep");
    let r2 = w.wait_for_reply(&q.id, WAIT).expect("answered");
    harness.stop().expect("the harness stops");

    let frames = wire(&w.s);
    assert_eq!(count_method(&frames, "session/load"), 1);
    assert_eq!(context_entries(&prompts(&frames)[1]), 0);
    assert_eq!(turns(&r2), 2);
}

/// When the stored session cannot be loaded (-32002), the fresh session gets
/// the whole window, and the receipt's delivery state starts from that
/// fresh session's own turn (nothing inherited from the lost one).
#[test]
fn a_fresh_session_after_a_failed_load_gets_the_whole_window_and_a_new_ledger() {
    let w = RelayWorld::new();
    let harness = w.start(&[], &[]);
    let root = w.post_top("root");
    let r1 = w.wait_for_reply(&root.id, WAIT).expect("answered");
    harness.stop().expect("the harness stops");

    let harness = w.start(&["--load-error", "-32002"], &[]);
    let q = w.post_reply(&root, &r1, "again");
    let r2 = w.wait_for_reply(&q.id, WAIT).expect("answered");
    harness.stop().expect("the harness stops");

    let frames = wire(&w.s);
    let p = prompts(&frames);
    assert_eq!(
        context_entries(&p[1]),
        2,
        "root and first reply, as upstream"
    );
    let stored = receipts(&w);
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
    let w = RelayWorld::new();
    let root = w.post_top("a long thread");
    let mut parent = root.clone();
    for i in 0..30 {
        parent = w.post_chatter(&root, &parent, &format!("message {i}"));
    }
    let harness = w.start(&[], &["--context-message-limit", "5"]);
    let q = w.post_reply(&root, &parent, "summarise");
    assert!(w.wait_for_reply(&q.id, WAIT).is_some());
    harness.stop().expect("the harness stops");

    let stored = receipts(&w);
    let ledger = stored[0]
        .record
        .delivery
        .clone()
        .expect("the ledger is persisted");
    let ids = ledger.delivered_event_ids.len();
    // root + 5 replies of the window + the two triggers + the reply, at most.
    assert!(ids <= 9, "{ids} ids stored for a window of 5");
    assert!(ids >= 7);
    insta::assert_json_snapshot!("bounded_store_file", w.store_view());
}
