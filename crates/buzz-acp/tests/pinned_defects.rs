//! Upstream defects this baseline keeps on purpose, because the fork's patch
//! series exists to fix them. Each test pins one; `scripts/fork verify`
//! expects it to FAIL once the patch that fixes it is applied
//! (`fixes_defects` in patches.json).
//!
//! The defects: only `session/new` is ever sent; the session map lives in
//! worker memory and dies with the worker (idle pool sleep, process restart,
//! agent crash); the fresh session gets the whole context window again; and a
//! thread whose owning worker is busy forks onto another worker.
//!
//! Each test waits for events (a reply, an observer record, a gated turn the
//! test releases), never for a guess at how long something takes. The
//! idle-pool-sleep clock running from the last incoming message (#6378) is a
//! defect about time itself; with real processes it could only be shown by
//! racing the harness's maintenance tick, so it is not pinned here.

mod common;

use common::*;

/// After a restart the next mention opens a second session and re-sends the
/// thread: the agent has forgotten the earlier turns (`turns=1`).
#[test]
fn restart_opens_a_second_session_new_and_resends_the_window() {
    let (_dir, mut s) = scenario();
    let root = s.post_top("Plan the release. remember alpha-7301").unwrap();
    run_once(&s, &[], &[]);
    let r1 = s.reply_to(&root.id).expect("first reply");

    let q = s
        .post_reply(&root, &r1, "What did I ask you to remember?")
        .unwrap();
    run_once(&s, &[], &[]);
    let r2 = s.reply_to(&q.id).expect("second reply");

    let frames = wire(&s);
    assert_eq!(
        count(&frames, "session/load"),
        0,
        "only session/new is ever sent"
    );
    assert_eq!(count(&frames, "session/new"), 2);
    assert_eq!(turns(&r2), 1, "the second process's session has no memory");
    let p = prompts(&frames);
    assert_eq!(
        context_entries(&p[1]),
        2,
        "root and first reply are re-sent"
    );
    insta::assert_json_snapshot!("restart_wire_log", wire_view(&s));
}

/// An idle pool sleep tears the workers down; the next mention starts over.
#[test]
fn idle_pool_sleep_loses_the_session() {
    let (_dir, mut s) = scenario();
    let running = s
        .start(
            &harness_bin(),
            &agent(&s, &[]),
            &["--lazy-pool", "--idle-pool-sleep", "1"],
        )
        .unwrap();
    let root = s.post_top("remember alpha-7301").unwrap();
    let r1 = s.wait_for_reply(&root.id, WAIT).expect("first reply");
    buzz_acp::testing::wait_until(WAIT, || {
        (!s.observer_records("pool_sleep").is_empty()).then_some(())
    })
    .expect("the pool sleeps");
    let q = s.post_reply(&root, &r1, "still there?").unwrap();
    let r2 = s.wait_for_reply(&q.id, WAIT).expect("second reply");
    running.stop().unwrap();

    let frames = wire(&s);
    assert_eq!(count(&frames, "session/load"), 0);
    assert_eq!(count(&frames, "session/new"), 2);
    assert_eq!(turns(&r2), 1);
    assert_eq!(context_entries(&prompts(&frames)[1]), 2);
    insta::assert_json_snapshot!("idle_sleep_wire_log", wire_view(&s));
}

/// A crashed agent is respawned with an empty session map.
#[test]
fn agent_crash_loses_the_session() {
    let (_dir, mut s) = scenario();
    // Each agent process exits when it receives its second prompt.
    let agent_args = [
        "--exit-on-method",
        "session/prompt",
        "--exit-on-request",
        "2",
    ];
    let running = s
        .start(&harness_bin(), &agent(&s, &agent_args), &[])
        .unwrap();
    let root = s.post_top("remember alpha-7301").unwrap();
    let r1 = s.wait_for_reply(&root.id, WAIT).expect("first reply");
    let q = s.post_reply(&root, &r1, "still there?").unwrap();
    let r2 = s.wait_for_reply(&q.id, WAIT).expect("reply after respawn");
    running.stop().unwrap();

    let frames = wire(&s);
    assert_eq!(count(&frames, "session/load"), 0);
    assert_eq!(count(&frames, "session/new"), 2);
    assert_eq!(turns(&r2), 1);
}

/// A thread whose owning worker is busy with another thread waits 10 s, then
/// forks onto another worker with a fresh session: two sessions of one thread.
#[test]
fn busy_owner_makes_the_thread_fork_after_ten_seconds() {
    let (_dir, mut s) = scenario();
    let running = s
        .start(
            &harness_bin(),
            &agent(&s, &[]),
            &["--agents", "2", "--lazy-pool"],
        )
        .unwrap();
    let a = s.post_top("thread A").unwrap();
    let ra = s.wait_for_reply(&a.id, WAIT).expect("reply A");
    // Thread B takes the only live worker, A's owner, and keeps it busy until
    // the test opens its gate.
    let b = s.post_top("thread B is slow !gate:b").unwrap();
    buzz_acp::testing::wait_until(WAIT, || {
        (s.observer_records("prompt_context_delivery").len() == 2).then_some(())
    })
    .expect("B dispatched");
    let qa = s.post_reply(&a, &ra, "A again").unwrap();
    let ra2 = s.wait_for_reply(&qa.id, WAIT).expect("reply A again");
    assert!(s.reply_to(&b.id).is_none(), "A forked while B still ran");
    s.open_gate("b").unwrap();
    s.wait_for_reply(&b.id, WAIT).expect("reply B");
    running.stop().unwrap();

    let slots: Vec<u64> = s
        .observer_records("prompt_context_delivery")
        .iter()
        .map(|d| d["slot"].as_u64().unwrap())
        .collect();
    assert_eq!(slots[0], slots[1], "B took A's owner");
    assert_ne!(slots[2], slots[0], "A forked onto the other worker");
    // Whatever the fork's session is (new, or a second copy of A's), it is not
    // the live one on A's owner: its turns are not continued there.
    assert!(turns(&ra2) >= 1);
}
