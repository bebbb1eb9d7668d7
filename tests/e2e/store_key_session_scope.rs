//! Guards of patch `store-key-session-scope`: receipts are keyed by the full
//! `SessionScope` — `Conversation{channel}` or `Thread{channel, root}` — so
//! every thread of a channel comes back to its own session.
//!
//! Every scenario runs over the test relay (`RelayWorld`): the owner writes, and
//! a restart is the harness stopped (SIGTERM) and started again. Like upstream,
//! the harness hears only what is posted while it runs, so each run is: start,
//! post the mentions, wait for the answers, stop.

use std::collections::HashMap;

use buzz_acp_fork_tests::relay::{DM_CHANNEL, RELAY_CHANNEL, RelayWorld};
use buzz_acp_fork_tests::*;
use serde_json::json;

/// The store's sessions once it holds `n` receipts (a running harness writes them beside its
/// event loop), or `None` after [`WAIT`].
fn receipts_once(w: &RelayWorld, n: usize) -> Option<HashMap<String, String>> {
    wait_until(WAIT, || {
        let stored = stored_sessions(w);
        (stored.len() == n).then_some(stored)
    })
}

/// Two threads of one channel, a restart, a follow-up in each: each thread
/// loads its own session and no session is created.
#[test]
fn each_thread_of_a_channel_resumes_its_own_session() {
    let w = RelayWorld::new();
    let harness = w.start(&[], &[]);
    let a = w.post_top("thread A: remember alpha-1111");
    let b = w.post_top("thread B: remember bravo-2222");
    let ra = w.wait_for_reply(&a.id, WAIT).expect("A answered");
    let rb = w.wait_for_reply(&b.id, WAIT).expect("B answered");
    harness.stop().expect("the harness stops");
    assert_eq!(count_method(&wire(&w.s), "session/new"), 2);
    assert_eq!(stored_sessions(&w).len(), 2, "one receipt per thread");

    let harness = w.start(&[], &[]);
    let qa = w.post_reply(&a, &ra, "A again");
    let qb = w.post_reply(&b, &rb, "B again");
    let ra2 = w.wait_for_reply(&qa.id, WAIT).expect("A answered again");
    let rb2 = w.wait_for_reply(&qb.id, WAIT).expect("B answered again");
    harness.stop().expect("the harness stops");

    let frames = wire(&w.s);
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
    let w = RelayWorld::new();
    let harness = w.start(&[], &["--lazy-pool", "--idle-pool-sleep", "1"]);
    // Both threads at once, so the pool cannot sleep between them; then wait for the sleep
    // that follows both.
    let a = w.post_top("thread A");
    let b = w.post_top("thread B");
    let ra = w.wait_for_reply(&a.id, WAIT).expect("A answered");
    let rb = w.wait_for_reply(&b.id, WAIT).expect("B answered");
    wait_until(WAIT, || {
        (!w.s.observer_records("pool_sleep").is_empty()).then_some(())
    })
    .expect("the pool sleeps");
    let receipts = receipts_once(&w, 2);
    assert!(
        receipts.is_some(),
        "one receipt per thread: {:?}",
        stored_sessions(&w)
    );
    let receipts = receipts.expect("checked above");
    // Both follow-ups at once: the one worker serves A, then B, with no quiet second between
    // them in which the pool could sleep again.
    let qa = w.post_reply(&a, &ra, "A after the sleep");
    let qb = w.post_reply(&b, &rb, "B after the sleep");
    let ra2 = w.wait_for_reply(&qa.id, WAIT).expect("A answered again");
    let rb2 = w.wait_for_reply(&qb.id, WAIT).expect("B answered again");
    harness.stop().expect("the harness stops");

    let frames = wire(&w.s);
    assert_eq!(
        count_method(&frames, "session/new"),
        2,
        "only before the sleep"
    );
    let loaded: Vec<String> = requests_of(&frames, "session/load")
        .iter()
        .map(|f| {
            f.params["sessionId"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    let key = |root: &str| format!("{RELAY_CHANNEL}/{root}");
    assert_eq!(
        loaded,
        vec![receipts[&key(&a.id)].clone(), receipts[&key(&b.id)].clone()]
    );
    assert_eq!((turns(&ra2), turns(&rb2)), (2, 2));
    insta::assert_json_snapshot!(
        "idle_sleep_two_threads_wire_log",
        w.redacted(wire_shape(&w.s))
    );
}

/// Rotating one thread removes only that thread's receipt.
#[test]
fn rotating_one_thread_leaves_its_siblings_intact() {
    let w = RelayWorld::new();
    let harness = w.start(&[], &[]);
    let a = w.post_top("thread A");
    let ra = w.wait_for_reply(&a.id, WAIT).expect("A answered");
    let b = w.post_top("thread B");
    w.wait_for_reply(&b.id, WAIT).expect("B answered");
    let rot = w.post_reply(&a, &ra, "!rotate");
    w.wait_for_reply(&rot.id, WAIT).expect("rotate notice");
    harness.stop().expect("the harness stops");

    let keys: Vec<String> = stored_sessions(&w).into_keys().collect();
    assert_eq!(keys, vec![format!("{RELAY_CHANNEL}/{}", b.id)]);
}

/// Removing the agent from a channel forgets every receipt of that channel
/// (upstream's `invalidate_channel`), and only that channel's. The relay does
/// what a Buzz relay does: it publishes the removal (kind 9001, signed with its
/// own key, naming the channel and the agent) and drops the agent from the
/// channel's members list.
#[test]
fn removal_from_a_channel_forgets_every_thread_of_it() {
    let w = RelayWorld::new();
    let harness = w.start(&[], &[]);
    let a = w.post_top("thread A");
    w.wait_for_reply(&a.id, WAIT).expect("A answered");
    let b = w.post_top("thread B");
    w.wait_for_reply(&b.id, WAIT).expect("B answered");
    let dm = w.post_dm("hi in DM");
    w.wait_for_reply(&dm.id, WAIT).expect("the DM answered");
    let before = receipts_once(&w, 3);
    assert!(
        before.is_some(),
        "two threads and the DM have receipts: {:?}",
        stored_sessions(&w)
    );
    w.block_on(w.relay.remove_member(RELAY_CHANNEL, w.agent.public_key()))
        .expect("the relay removes the agent from the channel");
    let after = receipts_once(&w, 1);
    harness.stop().expect("the harness stops");
    assert!(
        after.is_some(),
        "the channel's receipts are removed: {:?}",
        stored_sessions(&w)
    );
    let keys: Vec<String> = stored_sessions(&w).into_keys().collect();
    assert_eq!(keys, vec![DM_CHANNEL.to_string()]);
}

/// Receipts keyed by channel — written by `session-store-resume` alone, or in the JSON file of
/// the older store (format 1) — are read as conversation scopes: the JSON file is imported on
/// first open and kept as a backup, its conversation receipt keeps resuming, and each thread gets
/// its own receipt beside it.
#[test]
fn channel_keyed_receipts_migrate_as_conversation_scopes() {
    let w = RelayWorld::new();
    let channel_policy = ["--session-policy", "channel"];
    let harness = w.start(&[], &channel_policy);
    let first = w.post_top("channel-wide: remember alpha-7301");
    let r1 = w.wait_for_reply(&first.id, WAIT).expect("answered");
    harness.stop().expect("the harness stops");
    let conversation = stored_sessions(&w)[RELAY_CHANNEL].clone();

    // Leave only the JSON file of the older store (format 1, keyed by channel), under the
    // scope the harness keys its receipts by: the relay's URL and the agent's key.
    std::fs::remove_file(store_path(&w)).expect("the store file is removed");
    let scope = w.store_scope();
    let receipt = json!({"sessionId": conversation, "model": null,
        "permissionMode": "bypassPermissions", "requestedModel": null,
        "requestedPermissionMode": "bypassPermissions"});
    let v1 = json!({"version": 1,
        "scope": {"relay": scope.relay, "agentPubkey": scope.agent_pubkey},
        "sessions": {RELAY_CHANNEL: receipt}});
    let legacy =
        w.s.state_dir
            .join(format!("sessions-{}.json", scope.agent_pubkey));
    let text = serde_json::to_string_pretty(&v1).expect("the old store is JSON");
    std::fs::write(&legacy, text).expect("the old store is written");

    // A thread under the thread policy gets its own receipt; the imported conversation receipt
    // stays.
    let harness = w.start(&[], &[]);
    let t = w.post_top("a new thread");
    let rt = w.wait_for_reply(&t.id, WAIT).expect("answered");
    harness.stop().expect("the harness stops");
    assert_eq!(turns(&rt), 1);
    assert!(!legacy.exists(), "imported once");
    assert!(
        legacy.with_extension("json.migrated").exists(),
        "and kept as a backup"
    );
    let receipts = stored_sessions(&w);
    assert_eq!(receipts.len(), 2);
    assert_eq!(receipts[RELAY_CHANNEL], conversation);

    // The conversation still resumes its own session.
    let harness = w.start(&[], &channel_policy);
    let q = w.post_reply(&first, &r1, "what did I say?");
    let r2 = w.wait_for_reply(&q.id, WAIT).expect("answered");
    harness.stop().expect("the harness stops");
    assert_eq!(turns(&r2), 2);
    assert!(r2.content.contains("alpha-7301"));
    let mut migrated = w.store_view();
    // The ledger of later patches is not this patch's concern.
    if let Some(records) = migrated["sessions"].as_object_mut() {
        for record in records.values_mut() {
            if let Some(fields) = record.as_object_mut() {
                fields.remove("delivery");
            }
        }
    }
    insta::assert_json_snapshot!("migrated_store_file", migrated);
}
