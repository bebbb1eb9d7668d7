//! Guards of patch `resident-background-controllers`: after a successful
//! turn the scope's live session stays resident, so a follow-up continues hot
//! on the same session (no `session/load`, no `session/new`); the finishing
//! window is closed; residency counts against capacity; disposal happens once
//! per trigger and leaves the receipt for a warm resume.
//!
//! Every scenario runs over the test relay (`RelayWorld`): the owner writes, and
//! the harness runs throughout each scenario. A turn is held open with the test
//! agent's `!gate:NAME` until the test opens the gate.

use buzz_acp_fork_tests::relay::RelayWorld;
use buzz_acp_fork_tests::*;

/// The methods one agent process received, in order.
fn methods_of(frames: &[WireFrame], pid: u32) -> Vec<String> {
    frames
        .iter()
        .filter(|f| f.pid == pid)
        .filter_map(|f| f.method.clone())
        .collect()
}

/// A follow-up to a completed thread continues hot on its resident session,
/// even while another thread is busy: the other thread gets its own worker
/// (residency counts against capacity) instead of taking the resident's.
#[test]
fn a_follow_up_continues_hot_on_the_resident_session() {
    let w = RelayWorld::new();
    let harness = w.start(&[], &["--agents", "2", "--lazy-pool"]);
    let a = w.post_top("thread A: remember alpha-7301");
    let ra = w.wait_for_reply(&a.id, WAIT).expect("A is answered");
    // B's turn is held open until the test lets it go.
    let b = w.post_top("thread B is slow !gate:b");
    wait_until(WAIT, || {
        (w.s.observer_records("prompt_context_delivery").len() == 2).then_some(())
    })
    .expect("B dispatched");
    let qa = w.post_reply(&a, &ra, "A again");
    let ra2 = w.wait_for_reply(&qa.id, WAIT);
    let b_answered_first = w.reply_to(&b.id).is_some();
    w.s.open_gate("b").expect("the gate opens");
    let rb = w.wait_for_reply(&b.id, WAIT);
    harness.stop().expect("the harness stops");

    let ra2 = ra2.expect("A's follow-up is answered while B runs");
    assert!(!b_answered_first, "A was answered while B still ran");
    assert!(rb.is_some(), "B is answered once its gate opens");
    let frames = wire(&w.s);
    assert_eq!(count_method(&frames, "session/load"), 0);
    assert_eq!(
        count_method(&frames, "session/new"),
        2,
        "A and B, nothing more"
    );
    let prompts = prompt_texts(&frames);
    let a_session = &prompts[0].0;
    assert_eq!(&prompts[2].0, a_session, "the follow-up ran on A's session");
    assert_eq!(turns(&ra2), 2);
    assert_eq!(served_as(&frames, &a.id), ["new", "continued"]);
    let a_worker = frames[0].pid;
    insta::assert_json_snapshot!("hot_worker_methods", methods_of(&frames, a_worker));
}

/// With `--multiple-event-handling queue`, a message that arrives while its
/// thread's turn runs waits for that turn and continues on the same session:
/// both messages are answered, in order, and the running turn is not
/// cancelled.
#[test]
fn a_follow_up_during_a_turn_is_queued_for_the_same_session() {
    let w = RelayWorld::new();
    let harness = w.start(&[], &["--multiple-event-handling", "queue"]);
    // The first turn is held open until the second message has been admitted.
    let root = w.post_top("long question !gate:first");
    wait_until(WAIT, || {
        (!w.s.observer_records("prompt_context_delivery").is_empty()).then_some(())
    })
    .expect("turn running");
    let q = w.post_reply(&root, &root, "and one more thing");
    w.wait_read_by_harness(&q)
        .expect("the second message is admitted mid-turn");
    w.s.open_gate("first").expect("the gate opens");
    let r1 = w.wait_for_reply(&root.id, WAIT);
    let r2 = w.wait_for_reply(&q.id, WAIT);
    harness.stop().expect("the harness stops");

    let r1 = r1.expect("the first message is answered");
    let r2 = r2.expect("the second message is answered");
    let frames = wire(&w.s);
    assert_eq!(
        count_method(&frames, "session/cancel"),
        0,
        "nothing was cancelled"
    );
    assert_eq!(count_method(&frames, "session/new"), 1);
    let p = prompt_texts(&frames);
    assert_eq!(p.len(), 2);
    assert_eq!(p[0].0, p[1].0, "one session");
    assert_eq!((turns(&r1), turns(&r2)), (1, 2));
    assert_eq!(served_as(&frames, &root.id), ["new", "continued"]);
    assert!(r1.created_at <= r2.created_at);
}

/// Rotate, an agent exit and shutdown each free the affected resident exactly once: the rotated
/// session and the resident left at shutdown are closed once each (the agent advertises
/// `session/close`), the session that died with its agent is never closed, and after the exit
/// the thread resumes warm on a new agent.
#[test]
fn rotate_exit_and_shutdown_free_each_resident_exactly_once() {
    let w = RelayWorld::new();
    // Each agent process exits on its fourth prompt.
    let agent_args = [
        "--session-close",
        "--exit-on-method",
        "session/prompt",
        "--exit-on-request",
        "4",
    ];
    let harness = w.start(&agent_args, &[]);
    let a = w.post_top("thread A");
    let ra = w.wait_for_reply(&a.id, WAIT).expect("A is answered");
    // The owner's command (`post_reply` writes as the owner).
    let rot = w.post_reply(&a, &ra, "!rotate");
    w.wait_for_reply(&rot.id, WAIT).expect("the rotate notice");
    let b = w.post_top("thread B");
    let rb = w.wait_for_reply(&b.id, WAIT).expect("B is answered");
    let qb = w.post_reply(&b, &rb, "B again");
    let rb2 = w
        .wait_for_reply(&qb.id, WAIT)
        .expect("B's follow-up is answered");
    // The fourth prompt of this process kills it; the thread is answered by the next one.
    let qb2 = w.post_reply(&b, &rb2, "B once more");
    let rb3 = w.wait_for_reply(&qb2.id, WAIT);
    harness.stop().expect("the harness stops");

    let rb3 = rb3.expect("answered after the respawn");
    let frames = wire(&w.s);
    let order = session_order(&frames);
    let (a_session, b_session) = (order[0].clone(), order[1].clone());
    let first = frames[0].pid;
    let second = frames.last().expect("frames").pid;
    assert_ne!(first, second, "the agent was respawned");
    assert_eq!(
        closes(&frames),
        [(first, a_session), (second, b_session)],
        "the rotated session once; B's resident once, at shutdown, on the live agent"
    );
    // B: its first turn, the hot follow-up, the prompt the agent died on, and the same prompt
    // again after a warm restore on the new agent.
    assert_eq!(
        served_as(&frames, &b.id),
        ["new", "continued", "continued", "restored"]
    );
    assert_eq!((turns(&rb2), turns(&rb3)), (2, 3));
}
