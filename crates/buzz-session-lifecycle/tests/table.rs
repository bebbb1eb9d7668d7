//! The lifecycle's rules, one table test each, without processes or clocks.

use buzz_session_lifecycle::testing::{Msg, TestScope};
use buzz_session_lifecycle::{
    Batch, ColdReason, Delivered, DisposeReason, Effect, Lifecycle, LifecycleConfig, Moment,
    Opened, Persist, Plan, Record, RestoreMethod, RunningRoute, SessionConfig, SlotView, Target,
    TurnOutcome, Via,
};
use buzz_session_store::SessionRecord;

type L = Lifecycle<TestScope, Msg>;

fn a() -> TestScope {
    TestScope::thread("c1", "aaaa")
}
fn b() -> TestScope {
    TestScope::thread("c1", "bbbb")
}
fn c() -> TestScope {
    TestScope::thread("c2", "cccc")
}

fn cfg() -> SessionConfig {
    SessionConfig {
        fingerprint: 1,
        requested_model: None,
        requested_permission_mode: Some("bypassPermissions".into()),
    }
}

fn lifecycle(max_residents: usize) -> L {
    Lifecycle::new(LifecycleConfig {
        max_residents,
        ..LifecycleConfig::default()
    })
}

fn batch(ids: &[&str]) -> Batch<Msg> {
    Batch {
        inputs: ids.iter().map(|id| Msg::new(id)).collect(),
        attempts: 0,
        steered: false,
    }
}

fn ids(b: &Batch<Msg>) -> Vec<&str> {
    b.inputs.iter().map(|m| m.0.as_str()).collect()
}

fn admit(l: &mut L, scope: &TestScope, msgs: &[&str]) {
    l.admit(scope, batch(msgs));
    l.end_of_inbox();
}

fn no_receipt() -> Result<Option<SessionRecord>, String> {
    Ok(None)
}

fn receipt(id: &str) -> SessionRecord {
    let mut r = SessionRecord::new(id);
    r.requested_permission_mode = Some("bypassPermissions".into());
    r
}

/// Starts `scope` on `slot`, asserting it starts, and returns its batch ids.
fn start(l: &mut L, scope: &TestScope, slot: usize) -> Vec<String> {
    let b = l
        .start(scope, slot, &cfg(), no_receipt)
        .unwrap_or_else(|| panic!("{scope:?} did not start"));
    ids(&b).into_iter().map(str::to_string).collect()
}

fn replied(l: &mut L, scope: &TestScope, session: &str) {
    l.opened(scope, created(session));
    l.turn_end(
        scope,
        TurnOutcome::Replied {
            session_id: session.into(),
            rotated: false,
        },
        Moment(0),
    );
    l.settled(scope, None);
}

fn created(session: &str) -> Opened {
    Opened::Created {
        session_id: session.into(),
        model: None,
        permission_mode: Some("bypassPermissions".into()),
    }
}

fn end(l: &mut L, scope: &TestScope, outcome: TurnOutcome, at: u64) {
    l.turn_end(scope, outcome, Moment(at));
}

fn records(l: &mut L) -> Vec<Record> {
    l.take_effects()
        .into_iter()
        .filter_map(|e| match e {
            Effect::Record(r) => Some(r),
            _ => None,
        })
        .collect()
}

fn releases(effects: &[Effect<TestScope, Msg>]) -> Vec<(usize, String)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Release {
                slot, session_id, ..
            } => Some((*slot, session_id.clone())),
            _ => None,
        })
        .collect()
}

fn notices(effects: &[Effect<TestScope, Msg>]) -> Vec<(String, String)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Notice(n) => Some((n.trigger.0.clone(), n.text.clone())),
            _ => None,
        })
        .collect()
}

const IDLE2: [SlotView; 2] = [SlotView::Idle, SlotView::Idle];

#[test]
fn scopes_are_served_oldest_input_first_and_a_batch_takes_everything_pending() {
    let mut l = lifecycle(0);
    admit(&mut l, &b(), &["b1"]);
    admit(&mut l, &a(), &["a1", "a2"]);
    admit(&mut l, &b(), &["b2"]);
    let plan = l.plan(&IDLE2, &cfg(), Moment(0));
    assert_eq!(plan, [(b(), Target::Any), (a(), Target::Any)]);
    assert_eq!(start(&mut l, &b(), 0), ["b1", "b2"]);
    assert_eq!(start(&mut l, &a(), 1), ["a1", "a2"]);
}

#[test]
fn at_most_one_turn_per_scope_and_later_input_waits_for_it() {
    let mut l = lifecycle(0);
    admit(&mut l, &a(), &["a1"]);
    start(&mut l, &a(), 0);
    admit(&mut l, &a(), &["a2"]);
    assert!(l.plan(&IDLE2, &cfg(), Moment(0)).is_empty(), "a is running");
    assert!(l.start(&a(), 1, &cfg(), no_receipt).is_none());
    replied(&mut l, &a(), "s1");
    assert_eq!(start(&mut l, &a(), 0), ["a2"]);
}

#[test]
fn a_batch_handed_back_goes_in_front_of_newer_input() {
    let mut l = lifecycle(0);
    admit(&mut l, &a(), &["a1", "a2"]);
    start(&mut l, &a(), 0);
    admit(&mut l, &a(), &["a3"]);
    end(&mut l, &a(), TurnOutcome::Failed, 0);
    // The harness hands the failed batch back after newer input was admitted.
    l.admit(
        &a(),
        Batch {
            inputs: vec![Msg::new("a1"), Msg::new("a2")],
            attempts: 1,
            steered: false,
        },
    );
    l.end_of_inbox();
    let b = l.start(&a(), 0, &cfg(), no_receipt).unwrap();
    assert_eq!(ids(&b), ["a1", "a2", "a3"]);
    assert_eq!(b.attempts, 1);
}

#[test]
fn input_that_does_not_come_back_is_forgotten_at_the_end_of_the_inbox() {
    let mut l = lifecycle(0);
    admit(&mut l, &a(), &["a1"]);
    start(&mut l, &a(), 0);
    end(&mut l, &a(), TurnOutcome::Failed, 0);
    l.end_of_inbox(); // the harness dead-lettered it
    admit(&mut l, &a(), &["a2"]);
    admit(&mut l, &b(), &["b1"]);
    // a1 re-admitted now (a new delivery of the same id) is new input, behind a2 and b1.
    admit(&mut l, &a(), &["a1"]);
    assert_eq!(start(&mut l, &a(), 0), ["a2", "a1"]);
}

#[test]
fn warm_or_cold_is_decided_from_the_receipt_and_the_configuration() {
    let warm = |record: SessionRecord| {
        let mut l = lifecycle(0);
        admit(&mut l, &a(), &["a1"]);
        l.start(&a(), 0, &cfg(), || Ok(Some(record))).unwrap();
        l.plan_for(&a(), Vec::new()).via
    };
    assert_eq!(
        warm(receipt("s1")),
        Via::Warm {
            record: receipt("s1")
        }
    );
    let mut other_model = receipt("s1");
    other_model.requested_model = Some("big".into());
    assert_eq!(
        warm(other_model),
        Via::Cold {
            reason: ColdReason::ModelChanged
        }
    );
    let mut other_mode = receipt("s1");
    other_mode.requested_permission_mode = None;
    assert_eq!(
        warm(other_mode),
        Via::Cold {
            reason: ColdReason::PermissionModeChanged
        }
    );
    let mut l = lifecycle(0);
    admit(&mut l, &a(), &["a1"]);
    l.start(&a(), 0, &cfg(), || Err("database is down".into()))
        .unwrap();
    assert_eq!(
        l.plan_for(&a(), Vec::new()).via,
        Via::Cold {
            reason: ColdReason::StoreUnavailable
        }
    );
    // With resume off the store is never read.
    let mut l = Lifecycle::new(LifecycleConfig {
        resume: false,
        ..LifecycleConfig::default()
    });
    admit(&mut l, &a(), &["a1"]);
    l.start(&a(), 0, &cfg(), || panic!("read the store"))
        .unwrap();
    assert_eq!(
        l.plan_for(&a(), Vec::new()).via,
        Via::Cold {
            reason: ColdReason::ResumeOff
        }
    );
}

#[test]
fn created_sessions_are_persisted_at_once_and_settled_ledgers_keep_only_what_can_come_back() {
    let mut l = lifecycle(0);
    admit(&mut l, &a(), &["t1"]);
    start(&mut l, &a(), 0);
    let plan = l.plan_for(&a(), vec!["root".into(), "r1".into(), "r2".into()]);
    assert_eq!(
        plan,
        Plan {
            via: Via::Cold {
                reason: ColdReason::NoReceipt
            },
            fresh: false
        }
    );
    l.opened(&a(), created("s1"));
    let persists = l.take_persists();
    assert!(
        matches!(&persists[..], [Persist::Put { record, .. }] if record.session_id == "s1"),
        "{persists:?}"
    );
    end(
        &mut l,
        &a(),
        TurnOutcome::Replied {
            session_id: "s1".into(),
            rotated: false,
        },
        0,
    );
    l.replied(&a(), "reply1");
    l.settled(
        &a(),
        Some(Delivered {
            session_id: "s1".into(),
            standing_context_sent: false,
            // "old" fell out of every window: it can never be re-sent.
            event_ids: ["old", "root", "r1", "r2", "t1", "reply1"]
                .map(String::from)
                .to_vec(),
        }),
    );
    assert_eq!(
        l.take_persists(),
        [Persist::Commit {
            scope: a(),
            session_id: "s1".into(),
            standing_context_sent: false,
            event_ids: ["root", "r1", "r2", "t1", "reply1"]
                .map(String::from)
                .to_vec(),
        }]
    );
    assert_eq!(l.tracked_scopes(), 0, "nothing left to remember");
}

#[test]
fn an_undecided_restore_retries_with_one_notice_then_gives_up_on_the_receipt() {
    let mut l = lifecycle(0);
    let undecided = || TurnOutcome::RestoreUndecided {
        method: RestoreMethod::Load,
        detail: "agent error -32603: service failure".into(),
    };
    admit(&mut l, &a(), &["a1"]);
    l.start(&a(), 0, &cfg(), || Ok(Some(receipt("s1"))))
        .unwrap();
    end(&mut l, &a(), undecided(), 1_000);
    let effects = l.take_effects();
    let n = notices(&effects);
    assert_eq!(n.len(), 1, "the thread is told once");
    assert_eq!(n[0].0, "a1");
    assert!(
        n[0].1.contains("service failure") && !n[0].1.contains("!rotate"),
        "{}",
        n[0].1
    );
    admit(&mut l, &a(), &["a1"]); // handed back by the harness
    admit(&mut l, &a(), &["a2"]);
    assert!(
        l.plan(&IDLE2, &cfg(), Moment(15_999)).is_empty(),
        "retry not due"
    );
    assert_eq!(l.plan(&IDLE2, &cfg(), Moment(16_000)).len(), 1);
    // Attempts 2 and 3 fail silently; the fourth gives up.
    let mut at = 16_000;
    for _ in 0..2 {
        let b = l
            .start(&a(), 0, &cfg(), || Ok(Some(receipt("s1"))))
            .unwrap();
        assert_eq!(ids(&b), ["a1", "a2"]);
        end(&mut l, &a(), undecided(), at);
        assert!(notices(&l.take_effects()).is_empty());
        admit(&mut l, &a(), &["a1", "a2"]);
        at += 60_000;
    }
    l.start(&a(), 0, &cfg(), || Ok(Some(receipt("s1"))))
        .unwrap();
    end(&mut l, &a(), undecided(), at);
    let effects = l.take_effects();
    let n = notices(&effects);
    assert_eq!(n.len(), 1);
    assert!(n[0].1.contains("new session"), "{}", n[0].1);
    assert!(effects.iter().any(|e| matches!(
        e,
        Effect::Record(Record::RestoreAbandoned { attempts: 4, .. })
    )));
    admit(&mut l, &a(), &["a1", "a2"]);
    assert_eq!(
        l.plan(&IDLE2, &cfg(), Moment(at)).len(),
        1,
        "no more waiting"
    );
    l.start(&a(), 0, &cfg(), || panic!("the receipt is not read again"))
        .unwrap();
    assert_eq!(
        l.plan_for(&a(), Vec::new()).via,
        Via::Cold {
            reason: ColdReason::RestoreAbandoned
        }
    );
    replied(&mut l, &a(), "s2");
    admit(&mut l, &a(), &["a3"]);
    l.start(&a(), 0, &cfg(), || Ok(Some(receipt("s2"))))
        .unwrap();
    assert!(
        matches!(l.plan_for(&a(), Vec::new()).via, Via::Warm { .. }),
        "a new session resets the streak"
    );
}

#[test]
fn the_retry_notice_names_rotate_only_when_an_owner_is_configured() {
    let mut l: L = Lifecycle::new(LifecycleConfig {
        owner_configured: true,
        ..LifecycleConfig::default()
    });
    admit(&mut l, &a(), &["a1"]);
    l.start(&a(), 0, &cfg(), || Ok(Some(receipt("s1"))))
        .unwrap();
    end(
        &mut l,
        &a(),
        TurnOutcome::RestoreUndecided {
            method: RestoreMethod::Resume,
            detail: "timeout".into(),
        },
        0,
    );
    assert!(notices(&l.take_effects())[0].1.contains("!rotate"));
}

#[test]
fn abandoning_removes_the_receipt_and_asks_for_a_fresh_session_until_one_is_created() {
    let mut l = lifecycle(0);
    // An idle worker still holds the scope's session: it is released (closed) too.
    l.abandon(&a(), vec![(1, "s0".to_string())]);
    assert_eq!(l.take_persists(), [Persist::Remove { scope: a() }]);
    assert_eq!(releases(&l.take_effects()), [(1, "s0".to_string())]);
    admit(&mut l, &a(), &["a0"]);
    assert!(
        l.plan(&IDLE2, &cfg(), Moment(0)).is_empty(),
        "waits for the release"
    );
    l.released(&a(), "s0");
    l.take_effects();
    assert_eq!(start(&mut l, &a(), 0), ["a0"]);
    end(&mut l, &a(), TurnOutcome::Cancelled, 0);
    admit(&mut l, &a(), &["a1"]);
    l.start(&a(), 0, &cfg(), || {
        panic!("no receipt lookup after an abandonment")
    })
    .unwrap();
    let plan = l.plan_for(&a(), Vec::new());
    assert!(plan.fresh);
    assert_eq!(
        plan.via,
        Via::Cold {
            reason: ColdReason::Abandoned
        }
    );
    // session/new failed: the request is not consumed.
    end(&mut l, &a(), TurnOutcome::Failed, 0);
    admit(&mut l, &a(), &["a1"]);
    l.start(&a(), 0, &cfg(), no_receipt).unwrap();
    assert!(
        l.plan_for(&a(), Vec::new()).fresh,
        "still fresh after a failed session/new"
    );
    replied(&mut l, &a(), "s9");
    admit(&mut l, &a(), &["a2"]);
    l.start(&a(), 0, &cfg(), no_receipt).unwrap();
    assert!(
        !l.plan_for(&a(), Vec::new()).fresh,
        "consumed by the created session"
    );
}

#[test]
fn a_successful_turn_stays_resident_and_the_follow_up_continues_hot_or_waits() {
    let mut l = lifecycle(8);
    admit(&mut l, &a(), &["a1"]);
    assert_eq!(l.plan(&IDLE2, &cfg(), Moment(0)), [(a(), Target::Slot(0))]);
    start(&mut l, &a(), 0);
    replied(&mut l, &a(), "sa");
    assert_eq!(l.resident(&a()).unwrap().session_id, "sa");
    admit(&mut l, &a(), &["a2"]);
    // Its worker is busy with another scope: wait, once recorded, never fork.
    let busy0 = [SlotView::Busy, SlotView::Idle];
    assert!(l.plan(&busy0, &cfg(), Moment(0)).is_empty());
    assert!(l.plan(&busy0, &cfg(), Moment(1)).is_empty());
    let waits = records(&mut l)
        .into_iter()
        .filter(|r| matches!(r, Record::CapacityWait { .. }))
        .count();
    assert_eq!(waits, 1);
    assert_eq!(l.plan(&IDLE2, &cfg(), Moment(2)), [(a(), Target::Slot(0))]);
    l.start(&a(), 0, &cfg(), || panic!("a hot turn reads no receipt"))
        .unwrap();
    assert_eq!(
        l.plan_for(&a(), Vec::new()).via,
        Via::Hot {
            session_id: "sa".into()
        }
    );
}

#[test]
fn residency_counts_against_capacity() {
    let mut l = lifecycle(8);
    admit(&mut l, &a(), &["a1"]);
    start(&mut l, &a(), 0);
    replied(&mut l, &a(), "sa");
    admit(&mut l, &b(), &["b1"]);
    // Another scope takes a worker that hosts no resident…
    assert_eq!(l.plan(&IDLE2, &cfg(), Moment(0)), [(b(), Target::Slot(1))]);
    // …or spawns one rather than take the resident's…
    let lazy = [SlotView::Idle, SlotView::Empty];
    assert_eq!(l.plan(&lazy, &cfg(), Moment(0)), [(b(), Target::Spawn(1))]);
    // …waits for a spawn on its way…
    let spawning = [SlotView::Idle, SlotView::Spawning];
    assert!(l.plan(&spawning, &cfg(), Moment(0)).is_empty());
    // …and takes the resident's worker only when nothing else exists.
    assert_eq!(
        l.plan(&[SlotView::Idle], &cfg(), Moment(0)),
        [(b(), Target::Slot(0))]
    );
}

#[test]
fn residency_off_leaves_routing_to_the_pool() {
    let mut l = lifecycle(0);
    admit(&mut l, &a(), &["a1"]);
    start(&mut l, &a(), 0);
    replied(&mut l, &a(), "sa");
    assert!(l.resident(&a()).is_none());
    assert!(
        l.take_effects()
            .iter()
            .all(|e| !matches!(e, Effect::Release { .. }))
    );
    admit(&mut l, &a(), &["a2"]);
    assert_eq!(l.plan(&IDLE2, &cfg(), Moment(0)), [(a(), Target::Any)]);
}

#[test]
fn a_changed_configuration_disposes_the_resident_and_blocks_the_scope_until_released() {
    let mut l = lifecycle(8);
    admit(&mut l, &a(), &["a1"]);
    start(&mut l, &a(), 0);
    replied(&mut l, &a(), "sa");
    l.take_effects();
    admit(&mut l, &a(), &["a2"]);
    let changed = SessionConfig {
        fingerprint: 2,
        ..cfg()
    };
    assert!(l.plan(&IDLE2, &changed, Moment(0)).is_empty());
    let effects = l.take_effects();
    assert_eq!(releases(&effects), [(0, "sa".to_string())]);
    assert!(effects.iter().any(|e| matches!(
        e,
        Effect::Record(Record::ResidentDisposed {
            reason: DisposeReason::ConfigChanged,
            ..
        })
    )));
    assert!(
        l.plan(&IDLE2, &changed, Moment(0)).is_empty(),
        "release pending"
    );
    l.released(&a(), "sa");
    assert_eq!(
        l.plan(&IDLE2, &changed, Moment(0)),
        [(a(), Target::Slot(0))]
    );
    l.start(&a(), 0, &changed, || Ok(Some(receipt("sa"))))
        .unwrap();
    assert!(matches!(l.plan_for(&a(), Vec::new()).via, Via::Warm { .. }));
}

#[test]
fn every_disposal_trigger_disposes_exactly_once() {
    // (how the resident's scope ends, the reason recorded)
    let cases: Vec<(&str, DisposeReason)> = vec![
        ("fail", DisposeReason::TurnFailed),
        ("cancel", DisposeReason::Cancelled),
        ("cancel-lost-race", DisposeReason::CancelLostRace),
        ("rotate", DisposeReason::Abandoned),
        ("worker-exit", DisposeReason::AgentExit),
        ("idle-sleep", DisposeReason::IdleSleep),
        ("shutdown", DisposeReason::Shutdown),
        ("channel-removed", DisposeReason::Abandoned),
    ];
    for (trigger, reason) in cases {
        let mut l = lifecycle(8);
        admit(&mut l, &a(), &["a1"]);
        start(&mut l, &a(), 0);
        replied(&mut l, &a(), "sa");
        l.take_effects();
        admit(&mut l, &a(), &["a2"]);
        start(&mut l, &a(), 0); // a hot turn
        match trigger {
            "fail" => end(&mut l, &a(), TurnOutcome::Failed, 0),
            "cancel" => end(&mut l, &a(), TurnOutcome::Cancelled, 0),
            "cancel-lost-race" => {
                l.cancel_requested(&a());
                end(
                    &mut l,
                    &a(),
                    TurnOutcome::Replied {
                        session_id: "sa".into(),
                        rotated: false,
                    },
                    0,
                );
            }
            "rotate" => {
                l.abandon(&a(), Vec::new());
                end(&mut l, &a(), TurnOutcome::Rotated, 0);
            }
            "worker-exit" => end(&mut l, &a(), TurnOutcome::WorkerLost, 0),
            "idle-sleep" => {
                end(
                    &mut l,
                    &a(),
                    TurnOutcome::Replied {
                        session_id: "sa".into(),
                        rotated: false,
                    },
                    0,
                );
                l.pool_slept();
                l.pool_slept();
            }
            "shutdown" => {
                end(
                    &mut l,
                    &a(),
                    TurnOutcome::Replied {
                        session_id: "sa".into(),
                        rotated: false,
                    },
                    0,
                );
                l.shutdown();
                l.shutdown();
            }
            "channel-removed" => {
                l.abandon_channel("c1");
                l.abandon_channel("c1");
            }
            _ => unreachable!(),
        }
        let effects = l.take_effects();
        let disposed: Vec<DisposeReason> = effects
            .iter()
            .filter_map(|e| match e {
                Effect::Record(Record::ResidentDisposed { reason, .. }) => Some(*reason),
                _ => None,
            })
            .collect();
        assert_eq!(disposed, [reason], "{trigger}");
        let closes = releases(&effects);
        if reason.worker_alive() {
            assert_eq!(closes, [(0, "sa".to_string())], "{trigger}: released once");
        } else {
            assert!(
                closes.is_empty(),
                "{trigger}: a dead worker's session is not closed"
            );
        }
        assert!(l.resident(&a()).is_none(), "{trigger}");
    }
}

#[test]
fn eviction_keeps_the_bound_and_spares_running_scopes() {
    let mut l = lifecycle(1);
    admit(&mut l, &a(), &["a1"]);
    start(&mut l, &a(), 0);
    replied(&mut l, &a(), "sa");
    admit(&mut l, &b(), &["b1"]);
    start(&mut l, &b(), 1);
    replied(&mut l, &b(), "sb");
    let effects = l.take_effects();
    assert_eq!(releases(&effects), [(0, "sa".to_string())]);
    assert_eq!(l.residents(), 1);
    assert!(l.resident(&b()).is_some());
    // A running scope is not evicted even when it is the least recently used.
    admit(&mut l, &b(), &["b2"]);
    start(&mut l, &b(), 1);
    admit(&mut l, &c(), &["c1"]);
    start(&mut l, &c(), 0);
    replied(&mut l, &c(), "sc");
    assert!(l.resident(&b()).is_some(), "b runs: kept");
    assert_eq!(l.residents(), 2, "over the bound until b settles");
}

#[test]
fn steered_input_is_never_lost_whether_or_not_the_turn_absorbed_it() {
    let mut l = lifecycle(8);
    admit(&mut l, &a(), &["a1"]);
    assert_eq!(
        l.route_running(&a(), Msg::new("x"), true),
        RunningRoute::NotRunning(Msg::new("x"))
    );
    start(&mut l, &a(), 0);
    assert_eq!(
        l.route_running(&a(), Msg::new("a2"), true),
        RunningRoute::Steer
    );
    assert_eq!(
        l.route_running(&a(), Msg::new("a2"), true),
        RunningRoute::Duplicate
    );
    // Race 1: the turn completed before it saw the steer. a2 is answered next, hot.
    replied(&mut l, &a(), "sa");
    assert_eq!(start(&mut l, &a(), 0), ["a2"]);
    assert_eq!(
        l.route_running(&a(), Msg::new("a3"), true),
        RunningRoute::Steer
    );
    assert_eq!(
        l.route_running(&a(), Msg::new("a4"), false),
        RunningRoute::Queued
    );
    // The turn absorbed a3 (cancel and merge): a2 and a3 come back through the harness.
    end(
        &mut l,
        &a(),
        TurnOutcome::Requeued {
            extra: vec!["a3".into()],
        },
        0,
    );
    l.admit(&a(), batch(&["a2", "a3"]));
    l.end_of_inbox();
    assert_eq!(start(&mut l, &a(), 0), ["a2", "a3", "a4"]);
}

#[test]
fn a_lost_session_is_told_to_the_thread_and_replaced_by_the_new_one() {
    let mut l = lifecycle(0);
    admit(&mut l, &a(), &["a1", "a2"]);
    l.start(&a(), 0, &cfg(), || Ok(Some(receipt("s1"))))
        .unwrap();
    l.opened(
        &a(),
        Opened::Lost {
            session_id: "s1".into(),
            method: RestoreMethod::Resume,
            detail: "agent error -32002: Resource not found".into(),
        },
    );
    l.opened(&a(), created("s2"));
    let effects = l.take_effects();
    let n = notices(&effects);
    assert_eq!(n.len(), 1);
    assert_eq!(
        n[0].0, "a2",
        "the notice answers the newest message of the turn"
    );
    assert!(n[0].1.contains("-32002"), "{}", n[0].1);
    assert!(effects.iter().any(|e| matches!(
        e,
        Effect::Record(Record::SessionLost {
            method: RestoreMethod::Resume,
            ..
        })
    )));
    assert!(
        matches!(&l.take_persists()[..], [Persist::Put { record, .. }] if record.session_id == "s2"),
        "the new session's receipt replaces the lost one"
    );
}
