//! Guards of patch `model-switch-in-place`: a model switch is applied to each thread's session in
//! place, so no thread loses its session over it, and a restart with another model behaves the
//! same way as the owner's `!model`.

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
    let (_dir, mut s) = scenario();
    let running = start(&s, &[], &[]);
    let one = s.post_top("thread one").unwrap();
    let one_r = s.wait_for_reply(&one.id, WAIT).expect("answered");
    let two = s.post_top("thread two").unwrap();
    let two_r = s.wait_for_reply(&two.id, WAIT).expect("answered");
    let switch = s
        .post_reply_as(OWNER, &one, &one_r, "!model test-large")
        .unwrap();
    let notice = s
        .wait_for_reply(&switch.id, WAIT)
        .expect("the owner is answered");
    let two_q = s.post_reply(&two, &two_r, "and thread two?").unwrap();
    let two_a = s.wait_for_reply(&two_q.id, WAIT).expect("answered");
    let one_q = s.post_reply(&one, &one_r, "and thread one?").unwrap();
    let one_a = s.wait_for_reply(&one_q.id, WAIT).expect("answered");
    running.stop().unwrap();

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
    let frames = wire(&s);
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
    let models: Vec<Option<String>> = receipts(&s).into_iter().map(|r| r.record.model).collect();
    assert_eq!(
        models,
        [Some("test-large".into()), Some("test-large".into())]
    );
}

/// Over a real Nostr relay: the owner's `!model` is answered with the notice, and the thread's
/// next turn runs on its own session, switched in place.
#[test]
fn over_a_relay_the_owners_model_switch_keeps_the_threads_session() {
    let w = RelayWorld::new();
    let harness = w.start(&[], &[]);
    let one = w.say(&w.owner, "thread one", None);
    let answered = w.answer_to(&one);
    let one_id = one.id.to_hex();
    let switch = w.say(&w.owner, "!model test-large", Some((&one_id, &answered.id)));
    let notice = w.answer_to(&switch);
    let q = w.say(&w.owner, "and thread one?", Some((&one_id, &notice.id)));
    let a = w.answer_to(&q);
    harness.stop().expect("the harness stops");

    assert_eq!(notice.content, "Model set to test-large.");
    assert_eq!(turns(&a), 2, "the thread kept its session: {}", a.content);
    let frames = wire(&w.s);
    assert_eq!(count_method(&frames, "session/new"), 1, "no new session");
    let order = session_order(&frames);
    assert_eq!(model_switches(&frames), vec![(order[0].clone(), "test-large".to_string())]);
}

/// A restart with another `--model` reopens the thread's session and switches it in place, as
/// `!model` would: the thread keeps its session.
#[test]
fn a_restart_with_another_model_switches_the_restored_session_in_place() {
    let (_dir, mut s) = scenario();
    let root = s.post_top("start").unwrap();
    run_once(&s, &[], &["--model", "test-small"]);
    let r1 = s.reply_to(&root.id).expect("answered");
    let q = s.post_reply(&root, &r1, "again, bigger").unwrap();
    run_once(&s, &[], &["--model", "test-large"]);
    let answer = s.reply_to(&q.id).expect("answered");
    assert_eq!(turns(&answer), 2, "the same session: {}", answer.content);
    let frames = wire(&s);
    assert_eq!(count_method(&frames, "session/new"), 1);
    assert_eq!(count_method(&frames, "session/load"), 1);
    insta::assert_json_snapshot!("restart_switch_wire", wire_shape(&s));
    let order = session_order(&frames);
    assert_eq!(
        model_switches(&frames).last(),
        Some(&(order[0].clone(), "test-large".to_string()))
    );
}
