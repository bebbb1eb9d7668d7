//! Guards of patch `model-switch-in-place`: a model switch is applied to each thread's session in
//! place, so no thread loses its session over it, and a restart with another model behaves the
//! same way as the owner's `!model`.
//!
//! Every scenario runs over the test relay (`RelayWorld`): the owner writes (and only the owner's
//! `!model` is a command), and a restart is the harness stopped and started again.

use buzz_acp_fork_tests::relay::RelayWorld;
use buzz_acp_fork_tests::*;

/// The `session/set_config_option` requests for `model`, as (session, value).
fn model_switches(frames: &[WireFrame]) -> Vec<(String, String)> {
    requests_of(frames, "session/set_config_option")
        .into_iter()
        .filter(|f| f.params["configId"] == "model")
        .map(|f| {
            let session = f.params["sessionId"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let value = f.params["value"].as_str().unwrap_or_default().to_string();
            (session, value)
        })
        .collect()
}

/// The owner's `!model` in one thread: both threads go on in their own sessions, each switched
/// to the new model in place at its next turn; the receipts record it; the addressed thread is
/// told only that the model changed.
#[test]
fn a_model_switch_is_applied_in_place_and_no_thread_loses_its_session() {
    let w = RelayWorld::new();
    let harness = w.start(&[], &[]);
    let one = w.post_top("thread one");
    let one_r = w.wait_for_reply(&one.id, WAIT).expect("answered");
    let two = w.post_top("thread two");
    let two_r = w.wait_for_reply(&two.id, WAIT).expect("answered");
    // Owner commands are the owner's: `post_reply` writes as `w.owner`.
    let switch = w.post_reply(&one, &one_r, "!model test-large");
    let notice = w.wait_for_reply(&switch.id, WAIT);
    let two_q = w.post_reply(&two, &two_r, "and thread two?");
    let two_a = w.wait_for_reply(&two_q.id, WAIT);
    let one_q = w.post_reply(&one, &one_r, "and thread one?");
    let one_a = w.wait_for_reply(&one_q.id, WAIT);
    harness.stop().expect("the harness stops");

    let notice = notice.expect("the owner is answered");
    let (two_a, one_a) = (two_a.expect("answered"), one_a.expect("answered"));
    assert_eq!(notice.content, "Model set to test-large.");
    assert_eq!(
        turns(&two_a),
        2,
        "thread two kept its session: {}",
        two_a.content
    );
    assert_eq!(
        turns(&one_a),
        2,
        "thread one kept its session: {}",
        one_a.content
    );
    let frames = wire(&w.s);
    assert_eq!(count_method(&frames, "session/new"), 2, "no new session");
    let order = session_order(&frames);
    let switches = model_switches(&frames);
    assert_eq!(
        switches,
        vec![
            (order[1].clone(), "test-large".to_string()),
            (order[0].clone(), "test-large".to_string()),
        ],
        "each session switched in place, in the order the threads spoke"
    );
    let models: Vec<Option<String>> = receipts(&w).into_iter().map(|r| r.record.model).collect();
    assert_eq!(
        models,
        [Some("test-large".into()), Some("test-large".into())]
    );
}

/// A restart with another `--model` reopens the thread's session and switches it in place, as
/// `!model` would: the thread keeps its session.
#[test]
fn a_restart_with_another_model_switches_the_restored_session_in_place() {
    let w = RelayWorld::new();
    let harness = w.start(&[], &["--model", "test-small"]);
    let root = w.post_top("start");
    let r1 = w.wait_for_reply(&root.id, WAIT).expect("answered");
    harness.stop().expect("the harness stops");

    let harness = w.start(&[], &["--model", "test-large"]);
    let q = w.post_reply(&root, &r1, "again, bigger");
    let answer = w.wait_for_reply(&q.id, WAIT);
    harness.stop().expect("the harness stops");

    let answer = answer.expect("answered");
    assert_eq!(turns(&answer), 2, "the same session: {}", answer.content);
    let frames = wire(&w.s);
    assert_eq!(count_method(&frames, "session/new"), 1);
    assert_eq!(count_method(&frames, "session/load"), 1);
    insta::assert_json_snapshot!("restart_switch_wire", w.redacted(wire_shape(&w.s)));
    let order = session_order(&frames);
    assert_eq!(
        model_switches(&frames).last(),
        Some(&(order[0].clone(), "test-large".to_string()))
    );
}
