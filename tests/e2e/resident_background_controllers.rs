//! Guards of patch `resident-background-controllers`: after a successful
//! turn the scope's live session stays resident, so a follow-up continues hot
//! on the same session (no `session/load`, no `session/new`); the finishing
//! window is closed; residency counts against capacity; disposal happens once
//! per trigger and leaves the receipt for a warm resume.

use std::collections::HashMap;

use buzz_acp_fork_tests::*;

/// `resident_route` outcomes recorded for a scope label, in order.
fn routes(s: &Scenario, label: &str) -> Vec<String> {
    s.observer_records("resident_route")
        .iter()
        .filter(|r| r["scope"] == label)
        .map(|r| r["outcome"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// `resident_disposed` records as (scope label, reason).
fn disposals(s: &Scenario) -> Vec<(String, String)> {
    s.observer_records("resident_disposed")
        .iter()
        .map(|r| {
            (
                r["scope"].as_str().unwrap_or_default().to_string(),
                r["reason"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn label(root: &buzz_acp::relay::Event) -> String {
    format!("thread:{}", &root.id[..8])
}

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
    let (_dir, mut s) = scenario();
    let running = start(&s, &[], &["--agents", "2", "--lazy-pool"]);
    let a = s.post_top("thread A: remember alpha-7301").unwrap();
    let ra = s.wait_for_reply(&a.id, WAIT).unwrap();
    let b = s.post_top("thread B is slow !delay:2000").unwrap();
    wait_until(WAIT, || (s.observer_records("prompt_context_delivery").len() == 2).then_some(()))
        .expect("B dispatched");
    let qa = s.post_reply(&a, &ra, "A again").unwrap();
    let ra2 = s.wait_for_reply(&qa.id, WAIT).unwrap();
    assert!(s.reply_to(&b.id).is_none(), "A was answered while B still ran");
    s.wait_for_reply(&b.id, WAIT).unwrap();
    running.stop().unwrap();

    let frames = wire(&s);
    assert_eq!(count_method(&frames, "session/load"), 0);
    assert_eq!(count_method(&frames, "session/new"), 2, "A and B, nothing more");
    let prompts = prompt_texts(&frames);
    let a_session = &prompts[0].0;
    assert_eq!(&prompts[2].0, a_session, "the follow-up ran on A's session");
    assert_eq!(turns(&ra2), 2);
    assert_eq!(routes(&s, &label(&a)).last().map(String::as_str), Some("Continued"));
    let a_worker = frames[0].pid;
    insta::assert_json_snapshot!("hot_worker_methods", methods_of(&frames, a_worker));
}

/// A message that arrives while its thread's turn runs is queued for the same
/// session and claimed when the prompt ends: both messages are answered, in
/// order, on one session, and the running turn is not cancelled.
#[test]
fn a_follow_up_during_a_turn_is_claimed_for_the_same_session() {
    let (_dir, mut s) = scenario();
    let running = start(&s, &[], &[]);
    let root = s.post_top("long question !delay:1500").unwrap();
    wait_until(WAIT, || (!s.observer_records("prompt_context_delivery").is_empty()).then_some(()))
        .expect("turn running");
    let q = s.post_reply(&root, &root, "and one more thing").unwrap();
    let r1 = s.wait_for_reply(&root.id, WAIT).expect("the first message is answered");
    let r2 = s.wait_for_reply(&q.id, WAIT).expect("the second message is answered");
    running.stop().unwrap();

    let frames = wire(&s);
    assert_eq!(count_method(&frames, "session/cancel"), 0, "nothing was cancelled");
    assert_eq!(count_method(&frames, "session/new"), 1);
    let p = prompt_texts(&frames);
    assert_eq!(p.len(), 2);
    assert_eq!(p[0].0, p[1].0, "one session");
    assert_eq!((turns(&r1), turns(&r2)), (1, 2));
    assert!(r1.created_at <= r2.created_at);
}

/// When the resident's worker is busy with another thread, a follow-up waits
/// for it (capacity wait) instead of opening a cold session elsewhere.
#[test]
fn a_follow_up_waits_for_a_busy_resident_worker_instead_of_going_cold() {
    let (_dir, mut s) = scenario();
    let running = start(&s, &[], &["--agents", "1"]);
    let a = s.post_top("thread A").unwrap();
    let ra = s.wait_for_reply(&a.id, WAIT).unwrap();
    let b = s.post_top("thread B is slow !delay:1500").unwrap();
    wait_until(WAIT, || (s.observer_records("prompt_context_delivery").len() == 2).then_some(()))
        .expect("B dispatched");
    let qa = s.post_reply(&a, &ra, "A again").unwrap();
    let ra2 = s.wait_for_reply(&qa.id, WAIT).unwrap();
    s.wait_for_reply(&b.id, WAIT).unwrap();
    running.stop().unwrap();

    let r = routes(&s, &label(&a));
    let wait = r.iter().position(|o| o == "CapacityWait").expect("a capacity wait");
    assert_eq!(
        r[wait + 1..].first().map(String::as_str),
        Some("Continued"),
        "then continued on the same session: {r:?}"
    );
    let frames = wire(&s);
    assert_eq!(count_method(&frames, "session/load"), 0);
    assert_eq!(count_method(&frames, "session/new"), 2);
    assert_eq!(turns(&ra2), 2);
}

/// The idle pool sleep never tears a session down right after a long turn:
/// the quiet clock restarts when the turn ends, so an immediate follow-up is
/// hot (#6378, #7171).
#[test]
fn no_idle_sleep_right_after_a_long_turn() {
    let (_dir, mut s) = scenario();
    let running = start(&s, &[], &["--lazy-pool", "--idle-pool-sleep", "1"]);
    let root = s.post_top("a long task !delay:1500").unwrap();
    let r1 = s.wait_for_reply(&root.id, WAIT).unwrap();
    // Well inside the 1 s bound counted from the end of the turn, and long
    // enough for a clock counted from the last incoming message to fire.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let q = s.post_reply(&root, &r1, "quick follow-up").unwrap();
    let r2 = s.wait_for_reply(&q.id, WAIT).unwrap();
    running.stop().unwrap();

    let frames = wire(&s);
    assert_eq!(count_method(&frames, "session/load"), 0, "continued hot");
    assert_eq!(count_method(&frames, "initialize"), 1, "the worker was not torn down");
    assert_eq!(turns(&r2), 2);
}

/// Eviction (at most one resident here) and idle pool sleep each dispose a
/// resident exactly once; a disposed scope's next follow-up resumes warm from
/// its receipt (`session/load`), and the revived session becomes resident.
#[test]
fn eviction_and_idle_sleep_dispose_once_and_the_next_follow_up_resumes_warm() {
    let (_dir, mut s) = scenario();
    let running = start(
        &s,
        &[],
        &["--max-resident-sessions", "1", "--lazy-pool", "--idle-pool-sleep", "2"],
    );
    let a = s.post_top("thread A").unwrap();
    let ra = s.wait_for_reply(&a.id, WAIT).unwrap();
    let b = s.post_top("thread B").unwrap();
    s.wait_for_reply(&b.id, WAIT).unwrap();
    // B's completion evicted A (one resident at most).
    let qa = s.post_reply(&a, &ra, "A after eviction").unwrap();
    let ra2 = s.wait_for_reply(&qa.id, WAIT).unwrap();
    let qa3 = s.post_reply(&a, &ra2, "A again, hot").unwrap();
    let ra3 = s.wait_for_reply(&qa3.id, WAIT).unwrap();
    wait_until(WAIT, || (!s.observer_records("pool_sleep").is_empty()).then_some(()))
        .expect("the pool sleeps");
    running.stop().unwrap();

    let frames = wire(&s);
    let loads = requests_of(&frames, "session/load");
    assert_eq!(loads.len(), 1, "A resumed warm once after its eviction");
    assert_eq!(prompt_texts(&frames)[0].0, loads[0].params["sessionId"].as_str().unwrap());
    assert_eq!((turns(&ra2), turns(&ra3)), (2, 3));
    let d = disposals(&s);
    let mut counts: HashMap<(String, String), usize> = HashMap::new();
    for key in &d {
        *counts.entry(key.clone()).or_default() += 1;
    }
    assert!(counts.values().all(|&n| n == 1), "each disposal once: {d:?}");
    assert!(d.contains(&(label(&a), "Evicted".into())), "{d:?}");
    assert!(d.contains(&(label(&b), "Evicted".into())), "{d:?}");
    assert!(d.contains(&(label(&a), "IdlePoolSleep".into())), "{d:?}");
}

/// Rotate, a model change and an agent exit each dispose the affected
/// resident exactly once; shutdown disposes the rest.
#[test]
fn rotate_model_change_exit_and_shutdown_dispose_exactly_once() {
    let (_dir, mut s) = scenario();
    // Each agent process exits on its fourth prompt.
    let agent_args = ["--exit-on-method", "session/prompt", "--exit-on-request", "4"];
    let running = start(&s, &agent_args, &[]);
    let a = s.post_top("thread A").unwrap();
    let ra = s.wait_for_reply(&a.id, WAIT).unwrap();
    let rot = s.post_reply_as(OWNER, &a, &ra, "!rotate").unwrap();
    s.wait_for_reply(&rot.id, WAIT).unwrap();

    let b = s.post_top("thread B").unwrap();
    let rb = s.wait_for_reply(&b.id, WAIT).unwrap();
    let model = s.post_reply_as(OWNER, &a, &ra, "!model test-large").unwrap();
    s.wait_for_reply(&model.id, WAIT).unwrap();
    // B's resident was created under the old model: its follow-up is not hot.
    let qb = s.post_reply(&b, &rb, "B under the new model").unwrap();
    let rb2 = s.wait_for_reply(&qb.id, WAIT).unwrap();
    // Three prompts so far on this process; the fourth kills the agent.
    let qb2 = s.post_reply(&b, &rb2, "B again").unwrap();
    s.wait_for_reply(&qb2.id, WAIT).expect("answered after the respawn");
    running.stop().unwrap();

    let d = disposals(&s);
    let reasons: Vec<&str> = d.iter().map(|(_, r)| r.as_str()).collect();
    assert_eq!(
        reasons.iter().filter(|r| **r == "Rotate").count(),
        1,
        "rotate once: {d:?}"
    );
    assert!(d.contains(&(label(&b), "ConfigChanged".into())), "{d:?}");
    assert!(d.contains(&(label(&b), "AgentExit".into())), "{d:?}");
    assert!(d.contains(&(label(&b), "Shutdown".into())), "{d:?}");
    let mut seen: HashMap<&(String, String), usize> = HashMap::new();
    for key in &d {
        *seen.entry(key).or_default() += 1;
    }
    assert!(seen.values().all(|&n| n == 1), "{d:?}");
    assert_eq!(turns(&rb2), 1, "a new model means a new session");
}

/// A tiny deterministic PRNG (xorshift) for reproducible schedules.
fn next(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

/// Block/buzz#7720 ("Race 1"): follow-ups posted at random moments around
/// turn ends are each delivered to the agent exactly once: none lost in the
/// finishing window, none sent twice by a cancel-and-merge.
#[test]
fn follow_ups_around_turn_ends_are_delivered_exactly_once() {
    for round in 0..3u64 {
        let (_dir, mut s) = scenario();
        let running = start(&s, &[], &[]);
        let mut seed = 0x9e37_79b9_7f4a_7c15 ^ round;
        let root = s.post_top("root !delay:150").unwrap();
        let mut posted = vec![root.clone()];
        let mut parent = root.clone();
        for i in 0..10 {
            let pause = 40 + next(&mut seed) % 220;
            std::thread::sleep(std::time::Duration::from_millis(pause));
            let delay = 50 + next(&mut seed) % 200;
            parent = s
                .post_reply(&root, &parent, &format!("follow-up {i} !delay:{delay}"))
                .unwrap();
            posted.push(parent.clone());
        }
        let last = posted.last().unwrap().id.clone();
        s.wait_for_reply(&last, WAIT).expect("the last follow-up is answered");
        running.stop().unwrap();

        let frames = wire(&s);
        let mut delivered: HashMap<String, usize> = HashMap::new();
        for (_, text) in prompt_texts(&frames) {
            for event in &posted {
                if text.contains(&format!("<buzz-event id=\"{}\"", event.id)) {
                    *delivered.entry(event.id.clone()).or_default() += 1;
                }
            }
        }
        for event in &posted {
            assert_eq!(
                delivered.get(&event.id).copied().unwrap_or(0),
                1,
                "round {round}: {:?} delivered {:?} times",
                event.content,
                delivered.get(&event.id)
            );
        }
        assert_eq!(count_method(&frames, "session/new"), 1, "round {round}");
    }
}
