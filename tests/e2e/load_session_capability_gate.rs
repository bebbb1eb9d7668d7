//! Guards of patch `load-session-capability-gate`: the harness sends a
//! session method only when the agent advertised it at `initialize`.
//!
//! * `session/load` only with `agentCapabilities.loadSession`; otherwise the
//!   harness behaves as upstream (`session/new` + the whole window) and the
//!   new session replaces the stored receipt;
//! * `session/resume` (no history replay) is preferred when
//!   `sessionCapabilities.resume` is advertised;
//! * `session/close` releases an abandoned session only when
//!   `sessionCapabilities.close` is advertised.
//!
//! Every scenario runs over the test relay (`RelayWorld`): the owner writes, and
//! a restart is the harness stopped and started again (it hears only what is
//! posted while it runs, and reads the thread's history from the relay when it
//! starts).

use buzz_acp::relay::Event;
use buzz_acp_fork_tests::relay::RelayWorld;
use buzz_acp_fork_tests::*;

/// Starts the harness (test-agent flags `agent_args`, harness flags `extra`), lets `post` post
/// one mention, waits for its answer and stops the harness: one run of it, as many restarts
/// are. Returns the mention and its answer (`None` when it was never answered).
fn one_run(
    w: &RelayWorld,
    agent_args: &[&str],
    extra: &[&str],
    post: impl FnOnce() -> Event,
) -> (Event, Option<Event>) {
    let harness = w.start(agent_args, extra);
    let mention = post();
    let answer = w.wait_for_reply(&mention.id, WAIT);
    harness.stop().expect("the harness stops");
    (mention, answer)
}

/// An agent without `loadSession`: no `session/load` on the wire, a fresh
/// session with the whole window, and its receipt replaces the old one.
#[test]
fn without_load_session_no_session_load_is_ever_sent() {
    let w = RelayWorld::new();
    let agent_args = ["--no-load-session"];
    let (root, r1) = one_run(&w, &agent_args, &[], || w.post_top("remember alpha-7301"));
    let r1 = r1.expect("the root is answered");
    let first = stored_sessions(&w);

    let (_, r2) = one_run(&w, &agent_args, &[], || w.post_reply(&root, &r1, "again"));
    let r2 = r2.expect("the reply is answered");

    let frames = wire(&w.s);
    assert_eq!(count_method(&frames, "session/load"), 0);
    assert_eq!(count_method(&frames, "session/new"), 2);
    assert_eq!(turns(&r2), 1);
    assert_eq!(
        context_entries(&prompts(&frames)[1]),
        2,
        "the whole window, as upstream"
    );
    let second = stored_sessions(&w);
    assert_eq!(second.len(), 1);
    assert_ne!(second, first, "the new session replaced the receipt");
    insta::assert_json_snapshot!("no_load_session_wire_log", w.wire_view_without_digests());
}

/// An agent advertising `sessionCapabilities.resume` is resumed with
/// `session/resume`: the same session, no history replayed over the wire.
#[test]
fn advertised_resume_is_preferred_over_load() {
    let w = RelayWorld::new();
    let agent_args = ["--session-resume"];
    let (root, r1) = one_run(&w, &agent_args, &[], || w.post_top("remember alpha-7301"));
    let r1 = r1.expect("the root is answered");
    let (_, r2) = one_run(&w, &agent_args, &[], || w.post_reply(&root, &r1, "again"));
    let r2 = r2.expect("the reply is answered");

    let frames = wire(&w.s);
    assert_eq!(count_method(&frames, "session/load"), 0);
    assert_eq!(count_method(&frames, "session/resume"), 1);
    assert_eq!(count_method(&frames, "session/new"), 1);
    assert_eq!(turns(&r2), 2);
}

/// `!rotate` releases the abandoned session with `session/close` when the
/// agent advertises it, and sends nothing when it does not.
#[test]
fn rotate_closes_the_abandoned_session_only_when_advertised() {
    for (agent_args, expect_close) in [(&["--session-close"][..], true), (&[][..], false)] {
        let w = RelayWorld::new();
        let harness = w.start(agent_args, &[]);
        let root = w.post_top("start");
        let r1 = w.wait_for_reply(&root.id, WAIT).expect("answered");
        let abandoned = stored_sessions_once(&w, 1)
            .into_values()
            .next()
            .expect("the thread's session");
        let rot = w.post_reply(&root, &r1, "!rotate");
        w.wait_for_reply(&rot.id, WAIT).expect("rotate notice");
        let q = w.post_reply(&root, &r1, "again");
        w.wait_for_reply(&q.id, WAIT).expect("answered");
        harness.stop().expect("the harness stops");

        let frames = wire(&w.s);
        let closes: Vec<String> = requests_of(&frames, "session/close")
            .iter()
            .map(|f| {
                f.params["sessionId"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect();
        if expect_close {
            // The abandoned session is released first (later patches may also
            // release live sessions at shutdown).
            assert_eq!(closes.first(), Some(&abandoned), "{closes:?}");
        } else {
            assert!(closes.is_empty(), "close sent without the capability");
        }
    }
}

/// An agent answering protocol version 2 with `capabilities.session` has `session/close` as a
/// required method (RFD "v2 Required Session Methods"): the session a rotation abandons is
/// closed without any per-method marker; without `capabilities.session` nothing is closed.
#[test]
fn a_v2_agent_has_its_abandoned_sessions_closed() {
    for (flags, closes_expected) in [
        (&["--protocol", "v2"][..], true),
        (
            &["--protocol", "v2", "--session-capability", "absent"][..],
            false,
        ),
    ] {
        let w = RelayWorld::new();
        let (_, answer) = one_run(&w, flags, &["--max-turns-per-session", "1"], || {
            w.post_top("one")
        });
        assert!(answer.is_some(), "{flags:?}: the message is answered");
        let frames = wire(&w.s);
        let created = session_order(&frames);
        let closes = requests_of(&frames, "session/close");
        if closes_expected {
            // The abandoned session is released first (later patches may also release live
            // sessions at shutdown).
            assert_eq!(
                closes.first().map(|f| f.params["sessionId"].clone()),
                Some(created[0].as_str().into()),
                "{flags:?}"
            );
        } else {
            assert!(
                closes.is_empty(),
                "{flags:?}: close sent without the capability"
            );
        }
    }
}

/// A rotation decided inside a turn (`--max-turns-per-session`) also closes
/// the abandoned session when the agent advertises `close`.
#[test]
fn rotation_inside_a_turn_closes_when_advertised() {
    let w = RelayWorld::new();
    let (_, answer) = one_run(
        &w,
        &["--session-close"],
        &["--max-turns-per-session", "1"],
        || w.post_top("one"),
    );
    assert!(answer.is_some(), "the message is answered");
    let frames = wire(&w.s);
    let created = session_order(&frames);
    let closes = requests_of(&frames, "session/close");
    assert_eq!(closes.len(), 1);
    assert_eq!(closes[0].params["sessionId"], created[0].as_str());
}

/// The gate reads the capabilities of the version the agent answered at `initialize`. The
/// harness asks for protocol version 2: an agent supporting v2 answers 2 and is read in the v2
/// layout, where a session comes back with `session/resume` (without `replayFrom`: no replay)
/// and never `session/load`, which v2 does not have; an agent supporting only v1 answers 1 and
/// is read in the v1 layout.
#[test]
fn the_gate_reads_the_negotiated_versions_layout() {
    // (--protocol, extra agent flags, method expected after the restart)
    let cases: [(&str, &[&str], Option<&str>); 6] = [
        ("both", &[], Some("session/resume")),
        ("v2", &[], Some("session/resume")),
        ("v2", &["--session-capability", "absent"], None),
        ("v1", &[], Some("session/load")),
        ("v1", &["--session-resume"], Some("session/resume")),
        ("v1", &["--no-load-session"], None),
    ];
    for (protocol, flags, expected) in cases {
        let mut agent_args = vec!["--protocol", protocol];
        agent_args.extend_from_slice(flags);
        let w = RelayWorld::new();
        let (root, r1) = one_run(&w, &agent_args, &[], || w.post_top("one"));
        let r1 = r1.expect("the root is answered");
        let (_, r2) = one_run(&w, &agent_args, &[], || w.post_reply(&root, &r1, "two"));
        let r2 = r2.expect("the reply is answered");
        let frames = wire(&w.s);
        let restores =
            count_method(&frames, "session/load") + count_method(&frames, "session/resume");
        match expected {
            Some(method) => {
                assert_eq!(count_method(&frames, method), 1, "{protocol} {flags:?}");
                assert_eq!(restores, 1, "{protocol} {flags:?}");
                assert_eq!(turns(&r2), 2, "{protocol} {flags:?}: the session came back");
            }
            None => {
                assert_eq!(
                    restores, 0,
                    "{protocol} {flags:?}: nothing not advertised is sent"
                );
                assert_eq!(turns(&r2), 1, "{protocol} {flags:?}");
            }
        }
    }
}
