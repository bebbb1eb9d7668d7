//! Upstream defects this baseline keeps on purpose, because the fork's patch
//! series exists to fix them. Each test pins one; `scripts/fork verify`
//! expects it to FAIL once the patch that fixes it is applied
//! (`fixes_defects` in patches.json).
//!
//! The defects: only `session/new` is ever sent; the session map lives in
//! worker memory and dies with the worker (idle pool sleep, process restart,
//! agent crash); and the fresh session gets the whole context window again.

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

/// The idle-pool-sleep clock runs from the last incoming message (#6378,
/// #7171): a turn longer than the bound ends, and the pool is torn down at
/// once, so an immediate follow-up finds no live session.
#[test]
fn idle_sleep_fires_right_after_a_long_turn() {
    let (_dir, mut s) = scenario();
    let running = s
        .start(
            &harness_bin(),
            &agent(&s, &[]),
            &["--lazy-pool", "--idle-pool-sleep", "1"],
        )
        .unwrap();
    let root = s.post_top("a long task !delay:1500").unwrap();
    let r1 = s.wait_for_reply(&root.id, WAIT).expect("first reply");
    let q = s.post_reply(&root, &r1, "quick follow-up").unwrap();
    let r2 = s.wait_for_reply(&q.id, WAIT).expect("second reply");
    running.stop().unwrap();

    let kinds = observer_kinds(&s);
    let first_sleep = kinds
        .iter()
        .position(|k| k == "pool_sleep")
        .expect("a sleep");
    let second_turn = kinds
        .iter()
        .enumerate()
        .filter(|(_, k)| *k == "prompt_context_delivery")
        .nth(1)
        .map(|(i, _)| i)
        .expect("two turns");
    assert!(first_sleep < second_turn, "torn down between the turns");
    assert!(s.reply_to(&q.id).is_some() && turns(&r2) >= 1);
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
    // Thread B takes the only live worker, A's owner, and keeps it busy.
    let b = s.post_top("thread B is slow !delay:12000").unwrap();
    buzz_acp::testing::wait_until(WAIT, || {
        (s.observer_records("prompt_context_delivery").len() == 2).then_some(())
    })
    .expect("B dispatched");
    let qa = s.post_reply(&a, &ra, "A again").unwrap();
    let ra2 = s.wait_for_reply(&qa.id, WAIT).expect("reply A again");
    assert!(s.reply_to(&b.id).is_none(), "A forked while B still ran");
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

/// The `type` of every observer record, in order.
fn observer_kinds(s: &buzz_acp::testing::Scenario) -> Vec<String> {
    std::fs::read_to_string(&s.observer_log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["type"].as_str().map(str::to_string))
        .collect()
}
