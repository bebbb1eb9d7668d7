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
