//! The continuity matrix's cells that take time, with the harness's default settings, on tokio's
//! paused clock (the harness and its agents live in this process, so fifteen idle minutes or
//! three minutes of restore retries pass instantly and always in the same order).
//!
//! The thread is the matrix's (`buzz_acp_fork_tests::matrix`): a root, a reply telling the agent
//! a code word, fourteen replies that push it out of the 12-reply window; then the cause; then
//! the question. `e2e/continuity_matrix.rs` plays the same cells with real processes and short
//! settings.

use std::time::Duration;

use buzz_acp::relay::Event;
use buzz_acp_fork_tests::inproc::{reply, start, wait_for};
use buzz_acp_fork_tests::matrix::{CODE, FILLERS, QUESTION};
use buzz_acp_fork_tests::*;

/// Longer than any default bound involved (the 15-minute idle sleep, the 3-minute give-up).
const WITHIN: Duration = Duration::from_secs(3600);

/// The thread's root and its last message.
struct Thread {
    root: Event,
    last: Event,
}

/// Posts the fillers after the code word's answer.
fn fillers(s: &mut Scenario, root: &Event, mut last: Event) -> Event {
    for i in 1..=FILLERS {
        last = s
            .post_chatter(root, &last, &format!("filler message number {i}"))
            .unwrap();
    }
    last
}

/// The thread, answered by a harness that is already running.
async fn live_thread(s: &mut Scenario) -> Thread {
    let root = s.post_top("a long thread starts here").unwrap();
    let first = reply(s, &root, WITHIN).await;
    let code = s
        .post_reply(&root, &first, &format!("remember the code word {CODE}"))
        .unwrap();
    let answer = reply(s, &code, WITHIN).await;
    let last = fillers(s, &root, answer);
    Thread { root, last }
}

/// The thread, with a `--once` run of the harness after each mention.
async fn once_thread(s: &mut Scenario) -> Thread {
    let root = s.post_top("a long thread starts here").unwrap();
    start(s, &[], &["--once"]).await.unwrap().unwrap();
    let first = s.reply_to(&root.id).expect("the root is answered");
    let code = s
        .post_reply(&root, &first, &format!("remember the code word {CODE}"))
        .unwrap();
    start(s, &[], &["--once"]).await.unwrap().unwrap();
    let answer = s.reply_to(&code.id).expect("the code word is answered");
    let last = fillers(s, &root, answer);
    Thread { root, last }
}

fn knows_code(reply: &Event) -> bool {
    reply_nonces(reply).iter().any(|n| n == CODE)
}

/// The platform's idle pool sleep (15 quiet minutes, `--lazy-pool --idle-pool-sleep 900`): the
/// pool sleeps after the code word's turn; the question reopens the thread's session, which still
/// knows the code word, and the thread is told nothing.
#[tokio::test(start_paused = true)]
async fn after_fifteen_idle_minutes_the_agent_still_knows_the_code_word() {
    let (_dir, mut s) = scenario();
    // The harness polls the relay; a quarter second keeps a quarter hour of virtual time cheap.
    s.poll_ms = 250;
    let extra = [
        "--lazy-pool",
        "--idle-pool-sleep",
        "900",
        "--exit-after-inactivity",
        "960",
    ];
    let harness = start(&s, &[], &extra);
    let t = live_thread(&mut s).await;
    // Fifteen quiet minutes pass (virtual time), then the pool's sleep is awaited as an event.
    tokio::time::sleep(Duration::from_secs(900)).await;
    wait_for(WITHIN, || {
        (!s.observer_records("pool_sleep").is_empty()).then_some(())
    })
    .await
    .expect("the pool sleeps");
    let question = s.post_reply(&t.root, &t.last, QUESTION).unwrap();
    let answer = reply(&s, &question, WITHIN).await;
    harness.await.unwrap().unwrap();

    assert!(knows_code(&answer), "{}", answer.content);
    assert_eq!(turns(&answer), 3, "the same session: {}", answer.content);
    let frames = wire(&s);
    assert_eq!(
        served_as(&frames, &t.root.id),
        ["new", "continued", "restored"]
    );
    assert!(
        notices_about(&s, &question.id).is_empty(),
        "nothing to tell"
    );
}

/// Every restore fails without a definitive answer (`-32000`), with the default bounds: the
/// thread is told once that the harness keeps trying and once that it gave up, within minutes;
/// the question is answered from a new session that got the whole thread, so the code word is
/// still known.
#[tokio::test(start_paused = true)]
async fn a_restore_given_up_after_the_default_bound_keeps_the_code_word() {
    let (_dir, mut s) = scenario();
    let t = once_thread(&mut s).await;
    let question = s.post_reply(&t.root, &t.last, QUESTION).unwrap();
    let started = tokio::time::Instant::now();
    start(&s, &["--load-error", "-32000"], &["--once"])
        .await
        .unwrap()
        .unwrap();
    let waited = started.elapsed();

    let answer = s.reply_to(&question.id).expect("answered");
    assert!(knows_code(&answer), "the whole thread: {}", answer.content);
    assert_eq!(turns(&answer), 1, "a new session: {}", answer.content);
    let notices: Vec<String> = notices_about(&s, &question.id)
        .into_iter()
        .map(|n| n.content)
        .collect();
    assert_eq!(notices.len(), 2, "keep trying, then gave up: {notices:?}");
    assert!(notices[0].contains("keep trying"), "{}", notices[0]);
    assert!(notices[0].contains("the whole thread"), "{}", notices[0]);
    assert!(notices[1].contains("the whole thread"), "{}", notices[1]);
    assert_eq!(s.answers_to(&question.id), 1, "the notices are not answers");
    assert!(waited < Duration::from_secs(240), "bounded: {waited:?}");
}
