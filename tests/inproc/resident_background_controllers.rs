//! Guards of patch `resident-background-controllers` that depend on timing, run on tokio's
//! paused clock: the harness and its agents live in this process, so a 30-second turn or a
//! 20-second idle sleep passes instantly and always in the same order.

use std::time::Duration;

use buzz_acp::Harness;
use buzz_acp_fork_tests::inproc::{agent_starting_in, config, reply, start, wait_for};
use buzz_acp_fork_tests::*;

const WITHIN: Duration = Duration::from_secs(600);

/// Whether thread `root`'s turn has started (its prompt reached the agent).
fn prompted(s: &Scenario, root: &buzz_acp::relay::Event) -> Option<()> {
    (!served_as(&wire(s), &root.id).is_empty()).then_some(())
}

/// Both workers hold a resident (threads A and C), so a new thread B takes A's worker; A's
/// follow-up then waits for that worker (a capacity wait) and continues hot on its own session,
/// although C's worker is idle: it neither forks onto the idle worker with a restore nor opens a
/// cold session there. (Without residency the follow-up is placed on any idle worker, or, as
/// upstream does, on another one after ten seconds: a second copy of A's session.)
#[tokio::test(start_paused = true)]
async fn a_follow_up_waits_for_its_busy_resident_worker_then_continues_hot() {
    let (_dir, mut s) = scenario();
    let harness = start(&s, &[], &["--agents", "2", "--exit-after-inactivity", "60"]);
    let a = s.post_top("thread A").unwrap();
    let ra = reply(&s, &a, WITHIN).await;
    let c = s.post_top("thread C").unwrap();
    reply(&s, &c, WITHIN).await;
    let b = s.post_top("thread B is slow !delay:30000").unwrap();
    wait_for(WITHIN, || prompted(&s, &b)).await.expect("B runs");
    let qa = s.post_reply(&a, &ra, "A again").unwrap();
    let ra2 = reply(&s, &qa, WITHIN).await;
    reply(&s, &b, WITHIN).await;
    harness.await.unwrap().unwrap();

    let frames = wire(&s);
    assert_eq!(served_as(&frames, &a.id), ["new", "continued"]);
    assert_eq!(count_method(&frames, "session/load"), 0);
    assert_eq!(count_method(&frames, "session/new"), 3, "A, C and B");
    assert_eq!(turns(&ra2), 2);
    assert!(ra2.created_at >= s.reply_to(&b.id).unwrap().created_at);
}

/// Threads that arrive while a worker is still starting: the first is served by that worker,
/// and the next starts a worker of its own at once (an empty slot, none other on its way),
/// instead of waiting for the first start to finish.
#[tokio::test(start_paused = true)]
async fn a_thread_arriving_while_a_worker_starts_starts_its_own_worker_at_once() {
    let (_dir, mut s) = scenario();
    let startup = Duration::from_secs(5);
    let command = agent_starting_in(&s, &[], startup);
    let extra = [
        "--agents",
        "2",
        "--lazy-pool",
        "--exit-after-inactivity",
        "60",
    ];
    let harness = tokio::spawn(Harness::open(config(&s, &command, &extra)).unwrap().run());
    let posted = tokio::time::Instant::now();
    let a = s.post_top("thread A").unwrap();
    wait_for(WITHIN, || {
        (s.observer_records("agent_spawn").len() == 1).then_some(())
    })
    .await
    .expect("A's worker starts");
    let b = s.post_top("thread B").unwrap();
    wait_for(WITHIN, || {
        (s.observer_records("agent_spawn").len() == 2).then_some(())
    })
    .await
    .expect("B's worker starts");
    assert!(
        posted.elapsed() < startup,
        "B's worker started while A's was still starting: {:?}",
        posted.elapsed()
    );
    reply(&s, &a, WITHIN).await;
    reply(&s, &b, WITHIN).await;
    harness.await.unwrap().unwrap();
    let slots: Vec<u64> = s
        .observer_records("agent_spawn")
        .iter()
        .map(|r| r["slot"].as_u64().unwrap())
        .collect();
    assert_eq!(slots, [0, 1]);
}

/// #6378 / #7171: the idle-sleep clock restarts when a turn ends, so a follow-up a few seconds
/// after a long turn still finds its session live (hot), however long the turn took.
#[tokio::test(start_paused = true)]
async fn no_idle_sleep_right_after_a_long_turn() {
    let (_dir, mut s) = scenario();
    let extra = [
        "--lazy-pool",
        "--idle-pool-sleep",
        "10",
        "--exit-after-inactivity",
        "60",
    ];
    let harness = start(&s, &[], &extra);
    let root = s.post_top("a long task !delay:30000").unwrap();
    let r1 = reply(&s, &root, WITHIN).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let q = s.post_reply(&root, &r1, "quick follow-up").unwrap();
    let r2 = reply(&s, &q, WITHIN).await;
    harness.await.unwrap().unwrap();

    let frames = wire(&s);
    assert_eq!(count_method(&frames, "session/load"), 0, "continued hot");
    assert_eq!(
        count_method(&frames, "initialize"),
        1,
        "the worker was not torn down"
    );
    assert_eq!(turns(&r2), 2);
    assert_eq!(served_as(&frames, &root.id), ["new", "continued"]);
}

/// Eviction (one resident at most here) and the idle pool sleep each dispose a resident exactly
/// once: each evicted session is closed once (the agent advertises `session/close`), the one the
/// idle sleep tears down dies with its agent and is not closed; the evicted thread's next
/// follow-up resumes warm from its receipt, and the reopened session is resident again (the one
/// after that continues it).
#[tokio::test(start_paused = true)]
async fn eviction_and_idle_sleep_dispose_once_and_the_next_follow_up_resumes_warm() {
    let (_dir, mut s) = scenario();
    let extra = [
        "--max-resident-sessions",
        "1",
        "--lazy-pool",
        "--idle-pool-sleep",
        "20",
        "--exit-after-inactivity",
        "120",
    ];
    let harness = start(&s, &["--session-close"], &extra);
    let a = s.post_top("thread A").unwrap();
    let ra = reply(&s, &a, WITHIN).await;
    let b = s.post_top("thread B").unwrap();
    reply(&s, &b, WITHIN).await;
    let qa = s.post_reply(&a, &ra, "A after eviction").unwrap();
    let ra2 = reply(&s, &qa, WITHIN).await;
    let qa3 = s.post_reply(&a, &ra2, "A again, hot").unwrap();
    let ra3 = reply(&s, &qa3, WITHIN).await;
    wait_for(WITHIN, || {
        (!s.observer_records("pool_sleep").is_empty()).then_some(())
    })
    .await
    .expect("the pool sleeps");
    harness.await.unwrap().unwrap();

    let frames = wire(&s);
    assert_eq!(served_as(&frames, &a.id), ["new", "restored", "continued"]);
    assert_eq!(requests_of(&frames, "session/load").len(), 1);
    assert_eq!((turns(&ra2), turns(&ra3)), (2, 3));
    let order = session_order(&frames);
    let closed: Vec<String> = closes(&frames).into_iter().map(|(_, id)| id).collect();
    assert_eq!(
        closed,
        [order[0].clone(), order[1].clone()],
        "A's session evicted by B, B's evicted by A's return, each closed once; A's live \
         session at the idle sleep is not closed"
    );
}

/// A tiny deterministic PRNG (xorshift) for reproducible schedules.
fn next(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

/// Block/buzz#7720 ("Race 1"), with steering on (upstream's default): follow-ups posted at
/// seeded moments of virtual time around turn ends are never lost — not even one handed to a
/// turn just as its prompt completes — and each is answered at most once, all on one session.
/// (Steering re-runs a turn with the new message merged in, so the agent may see a message in a
/// cancelled prompt too; what must hold is that the session's completed turns contain every
/// message.)
#[tokio::test(start_paused = true)]
async fn follow_ups_around_turn_ends_are_never_lost() {
    for round in 0..6u64 {
        let (_dir, mut s) = scenario();
        let harness = start(&s, &[], &["--exit-after-inactivity", "60"]);
        let mut seed = 0x9e37_79b9_7f4a_7c15 ^ round;
        let root = s.post_top("root word-1000 !delay:150").unwrap();
        let mut posted = vec![root.clone()];
        let mut parent = root.clone();
        for i in 1..=12 {
            let pause = 20 + next(&mut seed) % 240;
            tokio::time::sleep(Duration::from_millis(pause)).await;
            let delay = 40 + next(&mut seed) % 200;
            let text = format!("follow-up word-{} !delay:{delay}", 1000 + i);
            parent = s.post_reply(&root, &parent, &text).unwrap();
            posted.push(parent.clone());
        }
        let last = posted.last().unwrap().clone();
        let answer = reply(&s, &last, WITHIN).await;
        harness.await.unwrap().unwrap();

        for i in 0..=12 {
            let nonce = format!("word-{}", 1000 + i);
            assert!(
                answer.content.contains(&nonce),
                "round {round}: {nonce} never reached a completed turn: {}",
                answer.content
            );
        }
        // The harness has exited: the relay no longer changes.
        let replies = s.replies();
        for event in &posted {
            let answers = replies
                .iter()
                .filter(|r| r.thread_refs().reply.as_deref() == Some(event.id.as_str()))
                .count();
            assert!(
                answers <= 1,
                "round {round}: {:?} answered {answers} times",
                event.content
            );
        }
        assert_eq!(count_method(&wire(&s), "session/new"), 1, "round {round}");
    }
}
