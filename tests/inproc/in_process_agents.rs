//! Guard of patch `in-process-agents`: the harness reaches an agent served inside its own
//! process (agent command `in-process:NAME`) over in-memory lines that are tapped exactly like a
//! process's stdio, so whole scenarios run on tokio's paused clock.

use std::time::Duration;

use buzz_acp_fork_tests::inproc::{reply, start};
use buzz_acp_fork_tests::*;

/// A turn through an in-process agent: answered, the same ACP exchange in the agent's wire log
/// and in the harness's observer, and the agent's 5-second prompt delay passed on the virtual
/// clock.
#[tokio::test(start_paused = true)]
async fn the_harness_answers_through_an_in_process_agent() {
    let (_dir, mut s) = scenario();
    let root = s.post_top("hello !delay:5000").unwrap();
    let started = tokio::time::Instant::now();
    let stats = start(&s, &[], &["--once"]).await.unwrap().unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(5),
        "the delay ran on tokio's clock"
    );
    assert_eq!(stats.replies, 1);
    let answer = reply(&s, &root, Duration::ZERO).await;
    assert_eq!(turns(&answer), 1);

    let frames = wire(&s);
    let written: Vec<String> = s
        .observer_records("acp_write")
        .iter()
        .filter_map(|r| r["frame"]["method"].as_str().map(str::to_string))
        .collect();
    let received: Vec<String> = frames.iter().filter_map(|f| f.method.clone()).collect();
    assert_eq!(written, received, "the observer taps the in-process lines");
    assert!(
        frames.iter().all(|f| f.pid == frames[0].pid),
        "one agent instance"
    );
    // The exchange; later patches change what the requests carry, not which are sent.
    insta::assert_json_snapshot!("in_process_exchange", received);
}
