//! Guards of patch `session-store-resume` that depend on time, run on tokio's paused clock: a
//! stored session the agent cannot reopen, and will not say why, is retried for a bounded time
//! (minutes, not forever); then the thread is told and answered from a new session.

use std::time::Duration;

use buzz_acp_fork_tests::inproc::{reply, start};
use buzz_acp_fork_tests::*;

/// The agent answers every `session/load` with -32000 (nothing says the session is gone). The
/// receipt is kept and the load retried with back-off, with one notice; at the bound the harness
/// gives up, says so, and answers from a new session with the whole window; `--once` ends.
#[tokio::test(start_paused = true)]
async fn an_undecided_restore_is_retried_for_a_bounded_time_then_answered_fresh() {
    let (_dir, mut s) = scenario();
    let root = s.post_top("remember alpha-7301").unwrap();
    start(&s, &[], &["--once"]).await.unwrap().unwrap();
    let r1 = reply(&s, &root, Duration::ZERO).await;
    let receipt = stored_sessions(&s);

    let q = s.post_reply(&root, &r1, "still there?").unwrap();
    let started = tokio::time::Instant::now();
    let stats = start(&s, &["--load-error", "-32000"], &["--once"])
        .await
        .unwrap()
        .unwrap();
    let waited = started.elapsed();

    let notices: Vec<String> = notices_about(&s, &q.id)
        .into_iter()
        .map(|n| n.content)
        .collect();
    assert_eq!(
        notices.len(),
        2,
        "retry notice, give-up notice: {notices:?}"
    );
    assert!(notices[0].contains("keep trying"), "{}", notices[0]);
    assert!(notices[1].contains("could not restore"), "{}", notices[1]);
    assert_eq!(s.answers_to(&q.id), 1, "one answer, the notices are none");
    let answer = s.reply_to(&q.id).expect("the answer");
    assert_eq!(reply_turns(&answer), Some(1), "a new session answers");
    assert!(
        answer.content.contains("alpha-7301"),
        "with the whole window: {}",
        answer.content
    );
    assert_eq!(stats.replies, 1);

    let frames = wire(&s);
    assert_eq!(
        requests_of(&frames, "session/load").len(),
        4,
        "the default bound"
    );
    assert_eq!(count_method(&frames, "session/new"), 2);
    assert!(
        waited >= Duration::from_secs(105) && waited < Duration::from_secs(180),
        "{waited:?}"
    );
    assert_ne!(
        stored_sessions(&s),
        receipt,
        "the new session's receipt replaced the old one"
    );
}
