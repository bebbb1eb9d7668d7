//! Guards of patch `store-key-session-scope`: receipts are keyed by the full
//! `SessionScope` — `Conversation{channel}` or `Thread{channel, root}` — so
//! every thread of a channel comes back to its own session.

use buzz_acp::testing::GENERAL;
use buzz_acp_fork_tests::*;
use serde_json::json;

/// Two threads of one channel, a restart, a follow-up in each: each thread
/// loads its own session and no session is created.
#[test]
fn each_thread_of_a_channel_resumes_its_own_session() {
    let (_dir, mut s) = scenario();
    let a = s.post_top("thread A: remember alpha-1111").unwrap();
    let b = s.post_top("thread B: remember bravo-2222").unwrap();
    run_once(&s, &[], &[]);
    let (ra, rb) = (s.reply_to(&a.id).unwrap(), s.reply_to(&b.id).unwrap());
    assert_eq!(count_method(&wire(&s), "session/new"), 2);
    assert_eq!(stored_sessions(&s).len(), 2, "one receipt per thread");

    let qa = s.post_reply(&a, &ra, "A again").unwrap();
    let qb = s.post_reply(&b, &rb, "B again").unwrap();
    run_once(&s, &[], &[]);
    let (ra2, rb2) = (s.reply_to(&qa.id).unwrap(), s.reply_to(&qb.id).unwrap());

    let frames = wire(&s);
    assert_eq!(
        count_method(&frames, "session/new"),
        2,
        "nothing new after the restart"
    );
    assert_eq!(count_method(&frames, "session/load"), 2);
    assert_eq!((turns(&ra2), turns(&rb2)), (2, 2));
    assert!(ra2.content.contains("alpha-1111") && !ra2.content.contains("bravo-2222"));
    assert!(rb2.content.contains("bravo-2222") && !rb2.content.contains("alpha-1111"));
}

/// The lazy-pool teardown path: after an idle pool sleep rebuilds the pool
/// from empty slots, the next dispatch in each of two threads of one channel
/// calls `session/load` with that thread's stored id, never `session/new`.
#[test]
fn after_an_idle_pool_sleep_each_thread_loads_its_own_session() {
    let (_dir, mut s) = scenario();
    let running = start(&s, &[], &["--lazy-pool", "--idle-pool-sleep", "1"]);
    // Both threads at once, so the pool cannot sleep between them; then wait for the sleep
    // that follows both.
    let a = s.post_top("thread A").unwrap();
    let b = s.post_top("thread B").unwrap();
    let ra = s.wait_for_reply(&a.id, WAIT).unwrap();
    let rb = s.wait_for_reply(&b.id, WAIT).unwrap();
    wait_until(WAIT, || {
        (!s.observer_records("pool_sleep").is_empty()).then_some(())
    })
    .expect("the pool sleeps");
    let receipts = stored_sessions_once(&s, 2);
    // Both follow-ups at once: the one worker serves A, then B, with no quiet second between
    // them in which the pool could sleep again.
    let qa = s.post_reply(&a, &ra, "A after the sleep").unwrap();
    let qb = s.post_reply(&b, &rb, "B after the sleep").unwrap();
    let ra2 = s.wait_for_reply(&qa.id, WAIT).unwrap();
    let rb2 = s.wait_for_reply(&qb.id, WAIT).unwrap();
    running.stop().unwrap();

    let frames = wire(&s);
    assert_eq!(
        count_method(&frames, "session/new"),
        2,
        "only before the sleep"
    );
    let loaded: Vec<String> = requests_of(&frames, "session/load")
        .iter()
        .map(|f| f.params["sessionId"].as_str().unwrap().to_string())
        .collect();
    let key = |root: &str| format!("{}/{root}", buzz_acp::testing::GENERAL);
    assert_eq!(
        loaded,
        vec![receipts[&key(&a.id)].clone(), receipts[&key(&b.id)].clone()]
    );
    assert_eq!((turns(&ra2), turns(&rb2)), (2, 2));
    insta::assert_json_snapshot!("idle_sleep_two_threads_wire_log", wire_shape(&s));
}

/// Rotating one thread removes only that thread's receipt.
#[test]
fn rotating_one_thread_leaves_its_siblings_intact() {
    let (_dir, mut s) = scenario();
    let running = start(&s, &[], &[]);
    let a = s.post_top("thread A").unwrap();
    let ra = s.wait_for_reply(&a.id, WAIT).unwrap();
    let b = s.post_top("thread B").unwrap();
    s.wait_for_reply(&b.id, WAIT).unwrap();
    let rot = s.post_reply_as(OWNER, &a, &ra, "!rotate").unwrap();
    s.wait_for_reply(&rot.id, WAIT).expect("rotate notice");
    running.stop().unwrap();

    let keys: Vec<String> = stored_sessions(&s).into_keys().collect();
    assert_eq!(
        keys,
        vec![format!("{}/{}", buzz_acp::testing::GENERAL, b.id)]
    );
}

/// Removing the agent from a channel forgets every receipt of that channel
/// (upstream's `invalidate_channel`), and only that channel's.
#[test]
fn removal_from_a_channel_forgets_every_thread_of_it() {
    let (_dir, mut s) = scenario();
    let running = start(&s, &[], &[]);
    let a = s.post_top("thread A").unwrap();
    s.wait_for_reply(&a.id, WAIT).unwrap();
    let b = s.post_top("thread B").unwrap();
    s.wait_for_reply(&b.id, WAIT).unwrap();
    let dm = s
        .post_with(|at| {
            buzz_acp::relay::EventBuilder::message(USER, &buzz_acp::testing::direct(), "hi in DM")
                .created_at(at)
                .mention(AGENT)
                .build()
        })
        .unwrap();
    s.wait_for_reply(&dm.id, WAIT).unwrap();
    stored_sessions_once(&s, 3);
    s.post_removal().unwrap();
    wait_until(WAIT, || (stored_sessions(&s).len() == 1).then_some(()))
        .expect("the channel's receipts are removed");
    running.stop().unwrap();
    let keys: Vec<String> = stored_sessions(&s).into_keys().collect();
    assert_eq!(keys, vec![buzz_acp::testing::DIRECT.to_string()]);
}

/// Receipts keyed by channel — written by `session-store-resume` alone, or in the JSON file of
/// the older store (format 1) — are read as conversation scopes: the JSON file is imported on
/// first open and kept as a backup, its conversation receipt keeps resuming, and each thread gets
/// its own receipt beside it.
#[test]
fn channel_keyed_receipts_migrate_as_conversation_scopes() {
    let (_dir, mut s) = scenario();
    let first = s.post_top("channel-wide: remember alpha-7301").unwrap();
    run_once(&s, &[], &["--session-policy", "channel"]);
    let r1 = s.reply_to(&first.id).unwrap();
    let conversation = stored_sessions(&s)[GENERAL].clone();

    // Leave only the JSON file of the older store (format 1, keyed by channel).
    std::fs::remove_file(store_path(&s)).unwrap();
    let receipt = json!({"sessionId": conversation, "model": null,
        "permissionMode": "bypassPermissions", "requestedModel": null,
        "requestedPermissionMode": "bypassPermissions"});
    let v1 = json!({"version": 1, "scope": {"relay": relay_identity(&s), "agentPubkey": AGENT},
        "sessions": {GENERAL: receipt}});
    let legacy = s.state_dir.join(format!("sessions-{AGENT}.json"));
    std::fs::write(&legacy, serde_json::to_string_pretty(&v1).unwrap()).unwrap();

    // A thread under the thread policy gets its own receipt; the imported conversation receipt
    // stays.
    let t = s.post_top("a new thread").unwrap();
    run_once(&s, &[], &[]);
    assert_eq!(turns(&s.reply_to(&t.id).unwrap()), 1);
    assert!(!legacy.exists(), "imported once");
    assert!(
        legacy.with_extension("json.migrated").exists(),
        "and kept as a backup"
    );
    let receipts = stored_sessions(&s);
    assert_eq!(receipts.len(), 2);
    assert_eq!(receipts[GENERAL], conversation);

    // The conversation still resumes its own session.
    let q = s.post_reply(&first, &r1, "what did I say?").unwrap();
    run_once(&s, &[], &["--session-policy", "channel"]);
    let r2 = s.reply_to(&q.id).unwrap();
    assert_eq!(turns(&r2), 2);
    assert!(r2.content.contains("alpha-7301"));
    let mut migrated = store_view(&s);
    // The ledger of later patches is not this patch's concern.
    for record in migrated["sessions"].as_object_mut().unwrap().values_mut() {
        record.as_object_mut().unwrap().remove("delivery");
    }
    insta::assert_json_snapshot!("migrated_store_file", migrated);
}
