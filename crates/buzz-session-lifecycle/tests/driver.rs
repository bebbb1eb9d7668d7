//! The driver's hand-off to the harness: notices come out on their own, apart from the effects
//! the harness executes, so the harness can post them in a way that never marks their trigger
//! answered.

use std::sync::{Arc, Mutex};

use buzz_session_lifecycle::store::{DisabledStore, KeyScheme, StoreScope};
use buzz_session_lifecycle::testing::{Msg, TestScope};
use buzz_session_lifecycle::{
    Batch, Driver, Effect, LifecycleConfig, Mailbox, Notice, RestoreMethod, SlotView, Target,
    TurnOutcome,
};

type Records = Arc<Mutex<Vec<String>>>;

fn driver() -> (Driver<TestScope, Msg>, Records) {
    let scope = StoreScope {
        relay: "wss://relay.test".to_string(),
        agent_pubkey: "agent".to_string(),
    };
    let store = Box::new(DisabledStore::new(scope, KeyScheme::Scope));
    let records: Records = Arc::default();
    let sink = Arc::clone(&records);
    let config = LifecycleConfig {
        max_residents: 0,
        ..LifecycleConfig::default()
    };
    let driver = Driver::new(
        config,
        store,
        Mailbox::default(),
        Box::new(move |kind: &str, _| sink.lock().unwrap().push(kind.to_string())),
    );
    (driver, records)
}

/// Runs one turn of `scope` on worker 0 for message `id` and ends it with `outcome`.
fn one_turn(d: &mut Driver<TestScope, Msg>, scope: &TestScope, id: &str, outcome: TurnOutcome) {
    d.admit([(scope.clone(), Batch::new(vec![Msg::new(id)], 0, false))]);
    let planned = d.plan(&[SlotView::Idle]);
    assert_eq!(planned, vec![(scope.clone(), Target::Any)]);
    d.start(scope, 0).expect("a batch to start");
    d.turn_end(scope, outcome);
}

#[test]
fn notices_are_handed_out_apart_from_effects_and_never_twice() {
    let (mut d, records) = driver();
    let scope = TestScope::thread("c", "root");
    let undecided = TurnOutcome::RestoreUndecided {
        method: RestoreMethod::Load,
        detail: "agent error -32000".to_string(),
    };
    one_turn(&mut d, &scope, "q", undecided);

    let notices = d.take_notices();
    assert_eq!(notices.len(), 1, "{notices:?}");
    let Notice {
        scope: about,
        trigger,
        text,
    } = &notices[0];
    assert_eq!((about, trigger), (&scope, &Msg::new("q")));
    assert!(text.contains("keep trying"), "{text}");
    assert!(d.take_notices().is_empty(), "a notice is handed out once");
    assert!(
        d.take_effects()
            .iter()
            .all(|e| !matches!(e, Effect::Notice(_))),
        "take_effects never carries a notice"
    );
    assert!(
        records
            .lock()
            .unwrap()
            .contains(&"restore_retry".to_string())
    );
}

#[test]
fn taking_notices_keeps_the_other_effects_for_the_harness() {
    let (mut d, _) = driver();
    let scope = TestScope::thread("c", "root");
    let undecided = TurnOutcome::RestoreUndecided {
        method: RestoreMethod::Load,
        detail: "timeout".to_string(),
    };
    one_turn(&mut d, &scope, "q", undecided);
    // The owner abandons the scope while an idle worker still holds an old session of it.
    d.abandon(&scope, vec![(0, "s-old".to_string())]);

    assert_eq!(d.take_notices().len(), 1);
    let effects = d.take_effects();
    let releases: Vec<_> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::Release { session_id, .. } => Some(session_id.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(releases, ["s-old"], "the release waits for the harness");
}
