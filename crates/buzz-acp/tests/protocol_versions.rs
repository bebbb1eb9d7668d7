//! `initialize` asks for protocol version 2, and the harness speaks whichever version the agent
//! answers: v1 on the same process, v2 with its prompt lifecycle, and v1 on a new process when
//! the agent refuses the request outright.

mod common;

use acp_test_agent::harness::{FrameKind, WireFrame};
use common::*;

/// The `initialize` requests the agents received, in order, with the agent process each went to.
fn initializes(frames: &[WireFrame]) -> Vec<(u32, serde_json::Value)> {
    frames
        .iter()
        .filter(|f| f.kind == FrameKind::Request && f.method.as_deref() == Some("initialize"))
        .map(|f| (f.pid, f.params.clone()))
        .collect()
}

fn pids(frames: &[WireFrame]) -> Vec<u32> {
    let mut pids: Vec<u32> = frames.iter().map(|f| f.pid).collect();
    pids.dedup();
    pids
}

/// A v1 agent answers a request for 2 with 1 (ACP "Initialization", version negotiation). The
/// harness goes on in v1 on the same process: the agent is started once and asked once.
#[test]
fn a_v1_agent_is_asked_for_2_and_served_in_1_on_the_same_process() {
    let (_dir, mut s) = scenario();
    let root = s.post_top("hello").unwrap();
    run_once(&s, &[], &[]);

    let reply = s.reply_to(&root.id).expect("the mention is answered");
    assert_eq!(turns(&reply), 1);
    let frames = wire(&s);
    let init = initializes(&frames);
    assert_eq!(init.len(), 1, "asked once: {init:?}");
    assert_eq!(init[0].1["protocolVersion"], 2);
    assert_eq!(
        init[0].1["info"]["name"], "buzz-acp",
        "the v2 request shape"
    );
    assert_eq!(pids(&frames).len(), 1, "one agent process");
    assert_eq!(count(&frames, "session/prompt"), 1);
}

/// An agent supporting v2 is spoken to in v2: the prompt's answer only accepts it, and the turn
/// ends when the session goes idle (v2 "Prompt Lifecycle"). Two mentions of one thread are two
/// turns of one session, and each answer carries that turn's text.
#[test]
fn a_v2_agent_is_served_in_v2_and_its_turns_end_when_the_session_goes_idle() {
    for protocol in ["v2", "both"] {
        let (_dir, mut s) = scenario();
        let running = s
            .start(&harness_bin(), &agent(&s, &["--protocol", protocol]), &[])
            .unwrap();
        let root = s.post_top("Plan the release. remember alpha-7301").unwrap();
        let r1 = s.wait_for_reply(&root.id, WAIT).expect("reply to root");
        let q2 = s
            .post_reply(&root, &r1, "What did I ask you to remember?")
            .unwrap();
        let r2 = s.wait_for_reply(&q2.id, WAIT).expect("reply to q2");
        running.stop().unwrap();

        assert_eq!([turns(&r1), turns(&r2)], [1, 2], "{protocol}: one session");
        assert!(
            r2.content.contains("alpha-7301"),
            "{protocol}: the second turn's text is the agent's answer: {:?}",
            r2.content
        );
        let frames = wire(&s);
        let init = initializes(&frames);
        assert_eq!(init.len(), 1, "{protocol}: {init:?}");
        assert_eq!(count(&frames, "session/new"), 1, "{protocol}");
        assert_eq!(count(&frames, "session/prompt"), 2, "{protocol}");
    }
}

/// An agent that refuses the request for 2 with an error (as claude-agent-acp 0.101.0 refuses a
/// request it cannot read) is started again and asked for 1, and then serves the mention.
#[test]
fn an_agent_refusing_version_2_is_started_again_and_asked_for_1() {
    let (_dir, mut s) = scenario();
    let root = s.post_top("hello").unwrap();
    run_once(&s, &["--protocol", "v1-refusing"], &[]);

    let reply = s.reply_to(&root.id).expect("the mention is answered");
    assert_eq!(turns(&reply), 1);
    let frames = wire(&s);
    let init = initializes(&frames);
    let versions: Vec<_> = init
        .iter()
        .map(|(_, p)| p["protocolVersion"].clone())
        .collect();
    assert_eq!(versions, [2, 1], "{init:?}");
    assert_ne!(
        init[0].0, init[1].0,
        "the second request goes to a new process"
    );
    assert_eq!(count(&frames, "session/prompt"), 1);
}
