//! Transition tests for the controller table, one behaviour of the design checklist per test.

use std::sync::{Arc, Barrier};
use std::thread;

use crate::{
    BeginError, ContinueOutcome, ControllerTable, DisposeReason, Fingerprint, Finish, HandleId,
    Keep, NotResidentReason, Resident, Route, StartId, TableStats, TurnEnd, TurnStatus,
    continue_outcome,
};

type Table = ControllerTable<&'static str, String>;

const FP: Fingerprint = Fingerprint(0xF00D);
const OTHER_FP: Fingerprint = Fingerprint(0xBEEF);

fn free(_: usize) -> bool {
    false
}

fn ok(slot: usize, session: &str) -> TurnEnd {
    ok_keep(slot, session, Keep::Yes)
}

fn ok_keep(slot: usize, session: &str, keep: Keep) -> TurnEnd {
    TurnEnd::Succeeded {
        slot,
        session_id: session.to_owned(),
        fingerprint: FP,
        keep,
    }
}

fn input(text: &str) -> String {
    text.to_owned()
}

fn route(table: &Table, key: &'static str, text: &str) -> Route<String> {
    table.route(&key, input(text), FP, &free)
}

/// `starts == terminals + running` must hold after every operation.
#[track_caller]
fn assert_balanced(table: &Table) -> TableStats {
    let stats = table.stats();
    assert_eq!(
        stats.starts,
        stats.terminals + stats.running,
        "unbalanced: {stats:?}"
    );
    stats
}

#[track_caller]
fn expect_completed(
    finish: Finish<&'static str, String>,
) -> (Option<Resident>, Vec<(&'static str, Resident)>) {
    match finish {
        Finish::Completed { resident, evicted } => (resident, evicted),
        other => panic!("expected Completed, got {other:?}"),
    }
}

#[track_caller]
fn expect_continue(route: Route<String>) -> (StartId, Resident, Vec<String>) {
    match route {
        Route::Continue(c) => (c.start, c.resident, c.inputs),
        other => panic!("expected Continue, got {other:?}"),
    }
}

#[track_caller]
fn expect_fallback(route: Route<String>) -> (Vec<String>, Option<Resident>) {
    match route {
        Route::Fallback(f) => (f.inputs, f.disposed),
        other => panic!("expected Fallback, got {other:?}"),
    }
}

/// A cold turn on `slot`/`session` that completes, is kept, and is settled.
#[track_caller]
fn cold_resident(table: &Table, key: &'static str, slot: usize, session: &str) -> Resident {
    let (start, _) = table.begin(&key);
    let (resident, _) = expect_completed(table.finish(&key, start, ok(slot, session)));
    assert!(table.settle(&key, start).is_empty());
    resident.expect("a compatible successful turn is kept")
}

/// A hot turn on `key`'s resident that is left running.
#[track_caller]
fn hot_running(table: &Table, key: &'static str) -> (StartId, Resident) {
    let (start, resident, _) = expect_continue(route(table, key, "hot"));
    (start, resident)
}

#[test]
fn continue_requires_completed_and_dispose_is_identity_guarded() {
    let table = Table::new(4);
    let (start, replaced) = table.begin(&"a");
    assert_eq!(replaced, None);

    let queued = route(&table, "a", "x");
    assert_eq!(continue_outcome(&queued), ContinueOutcome::NotCompleted);
    assert_eq!(queued, Route::Queued);

    assert_eq!(
        table.finish(&"a", start, ok(0, "s1")),
        Finish::Claimed(vec![input("x")])
    );
    let (resident, evicted) = expect_completed(table.finish(&"a", start, ok(0, "s1")));
    let resident = resident.expect("kept");
    assert!(evicted.is_empty());
    assert_eq!((resident.slot, resident.session_id.as_str()), (0, "s1"));

    let waiting = route(&table, "a", "y");
    assert_eq!(continue_outcome(&waiting), ContinueOutcome::NotCompleted);
    assert_eq!(waiting, Route::WaitFinishing);
    let handed = table.settle(&"a", start);
    assert_eq!(handed, vec![input("y")]);

    let rerouted = route(&table, "a", &handed[0]);
    assert_eq!(continue_outcome(&rerouted), ContinueOutcome::Continued);
    let (hot, same, inputs) = expect_continue(rerouted);
    assert_ne!(hot, start);
    assert_eq!(same, resident);
    assert_eq!(inputs, vec![input("y")]);
    let (after_hot, _) = expect_completed(table.finish(&"a", hot, ok(0, "s1")));
    assert_eq!(
        after_hot.as_ref(),
        Some(&resident),
        "a hot turn keeps its handle"
    );
    assert!(table.settle(&"a", hot).is_empty());

    let stale = HandleId(resident.handle.get() + 100);
    assert_eq!(
        table.dispose(&"a", Some(stale), DisposeReason::Rotate),
        None
    );
    assert_eq!(table.resident(&"a").as_ref(), Some(&resident));
    assert_eq!(
        table.dispose(&"a", Some(resident.handle), DisposeReason::Rotate),
        Some(resident.clone())
    );
    assert_eq!(table.resident(&"a"), None, "removed before being returned");
    assert_eq!(
        table.dispose(&"a", Some(resident.handle), DisposeReason::Rotate),
        None
    );
    assert_eq!(table.dispose(&"a", None, DisposeReason::Rotate), None);

    let fallback = route(&table, "a", "z");
    assert_eq!(continue_outcome(&fallback), ContinueOutcome::Fallback);
    assert_eq!(expect_fallback(fallback), (vec![input("z")], None));
    let stats = assert_balanced(&table);
    assert_eq!(stats.disposals(DisposeReason::Rotate), 1);
    assert_eq!(stats.total_disposals(), 1);
}

#[test]
fn begin_replaces_older_session_and_stale_handle_cannot_remove_new() {
    let table = Table::new(4);
    let first = cold_resident(&table, "a", 0, "s1");

    // Cold re-dispatch (e.g. after `session/load`): the old session's resident is replaced.
    let (start, replaced) = table.begin(&"a");
    assert_eq!(replaced.as_ref(), Some(&first));
    assert_eq!(table.resident(&"a"), None);
    let (second, _) = expect_completed(table.finish(&"a", start, ok(1, "s2")));
    let second = second.expect("kept");
    assert_ne!(second.handle, first.handle, "handles are never reused");
    assert_eq!(table.stats().disposals(DisposeReason::Replaced), 1);
    assert!(table.settle(&"a", start).is_empty());

    assert_eq!(
        table.dispose(&"a", Some(first.handle), DisposeReason::Rotate),
        None
    );
    assert_eq!(table.resident(&"a").as_ref(), Some(&second));
    assert_eq!(
        table.dispose(&"a", Some(second.handle), DisposeReason::Rotate),
        Some(second.clone())
    );
    assert_eq!(
        table.dispose(&"a", Some(second.handle), DisposeReason::Rotate),
        None
    );
    let stats = assert_balanced(&table);
    assert_eq!(stats.disposals(DisposeReason::Replaced), 1);
    assert_eq!(stats.disposals(DisposeReason::Rotate), 1);
}

#[test]
fn hot_turn_ending_on_another_session_returns_the_old_one_once() {
    let table = Table::new(4);
    let first = cold_resident(&table, "a", 0, "s1");
    let (start, _) = hot_running(&table, "a");
    let (kept, evicted) = expect_completed(table.finish(&"a", start, ok(0, "s9")));
    let kept = kept.expect("kept");
    assert_eq!(kept.session_id, "s9");
    assert_ne!(kept.handle, first.handle);
    assert_eq!(evicted, vec![("a", first)]);
    assert_eq!(table.stats().disposals(DisposeReason::Replaced), 1);
}

#[test]
fn capacity_wait_performs_no_mutation() {
    let table = Table::new(4);
    let resident = cold_resident(&table, "a", 3, "s1");
    let before = table.entry(&"a").expect("entry");
    let stats_before = table.stats();

    let slot_three_busy = |slot: usize| slot == 3;
    let wait = table.route(&"a", input("m"), FP, &slot_three_busy);
    assert_eq!(continue_outcome(&wait), ContinueOutcome::CapacityWait);
    assert_eq!(
        wait,
        Route::CapacityWait(input("m")),
        "the input comes back"
    );

    assert_eq!(table.entry(&"a").as_ref(), Some(&before));
    assert_eq!(table.status(&"a"), Some(TurnStatus::Completed));
    let mut expected = stats_before;
    expected.capacity_waits += 1;
    assert_eq!(table.stats(), expected);

    // Only the resident's own slot matters.
    let other_busy = |slot: usize| slot != 3;
    let (_, same, _) = expect_continue(table.route(&"a", input("m"), FP, &other_busy));
    assert_eq!(same, resident);
    assert_balanced(&table);
}

#[test]
fn success_stays_resident_failure_and_cancel_dispose_exactly_once() {
    struct Case {
        name: &'static str,
        hot: bool,
        end: TurnEnd,
        status: TurnStatus,
        disposed_reason: Option<DisposeReason>,
    }
    let cases = [
        Case {
            name: "hot success",
            hot: true,
            end: ok(0, "s"),
            status: TurnStatus::Completed,
            disposed_reason: None,
        },
        Case {
            name: "hot failure",
            hot: true,
            end: TurnEnd::Failed,
            status: TurnStatus::Failed,
            disposed_reason: Some(DisposeReason::TurnFailed),
        },
        Case {
            name: "hot cancel",
            hot: true,
            end: TurnEnd::Cancelled,
            status: TurnStatus::Cancelled,
            disposed_reason: Some(DisposeReason::Cancelled),
        },
        Case {
            name: "cold failure",
            hot: false,
            end: TurnEnd::Failed,
            status: TurnStatus::Failed,
            disposed_reason: None,
        },
        Case {
            name: "cold cancel",
            hot: false,
            end: TurnEnd::Cancelled,
            status: TurnStatus::Cancelled,
            disposed_reason: None,
        },
    ];
    for case in cases {
        let table = Table::new(4);
        let (start, resident) = if case.hot {
            cold_resident(&table, "a", 0, "s");
            let (start, resident) = hot_running(&table, "a");
            (start, Some(resident))
        } else {
            (table.begin(&"a").0, None)
        };
        assert_eq!(route(&table, "a", "q"), Route::Queued, "{}", case.name);
        let before = table.stats().total_disposals();
        let finish = table.finish(&"a", start, case.end.clone());
        let returned = match finish {
            Finish::Completed { resident: kept, .. } => {
                // The queued input was claimed first; the second report completes.
                panic!(
                    "{}: queued input must be claimed, got kept={kept:?}",
                    case.name
                )
            }
            Finish::Claimed(claimed) => {
                assert_eq!(claimed, vec![input("q")], "{}", case.name);
                let (kept, _) = expect_completed(table.finish(&"a", start, case.end.clone()));
                assert_eq!(kept, resident, "{}", case.name);
                None
            }
            Finish::Failed { dispose, requeue } => {
                assert_eq!(requeue, vec![input("q")], "{}", case.name);
                dispose
            }
            Finish::Cancelled { disposed, requeue } => {
                assert_eq!(requeue, vec![input("q")], "{}", case.name);
                disposed
            }
            Finish::Stale => panic!("{}: unexpected stale", case.name),
        };
        assert_eq!(table.status(&"a"), Some(case.status), "{}", case.name);
        let stats = assert_balanced(&table);
        match case.disposed_reason {
            Some(reason) => {
                assert_eq!(returned, resident, "{}", case.name);
                assert_eq!(table.resident(&"a"), None, "{}", case.name);
                assert_eq!(stats.disposals(reason), 1, "{}", case.name);
                assert_eq!(stats.total_disposals(), before + 1, "{}", case.name);
            }
            None => assert_eq!(stats.total_disposals(), before, "{}", case.name),
        }
        // A late second report is stale and disposes nothing more.
        assert_eq!(
            table.finish(&"a", start, case.end),
            Finish::Stale,
            "{}",
            case.name
        );
        assert_eq!(
            table.dispose(&"a", None, DisposeReason::Rotate).is_some(),
            case.disposed_reason.is_none() && case.hot
        );
    }
}

#[test]
fn cancel_that_lost_the_race_to_completion_falls_back() {
    for route_before_settle in [false, true] {
        let table = Table::new(4);
        let (start, _) = table.begin(&"a");
        let (kept, _) = expect_completed(table.finish(&"a", start, ok(0, "s1")));
        let kept = kept.expect("kept");
        // The harness disposes before publishing the completion.
        assert_eq!(
            table.dispose(&"a", Some(kept.handle), DisposeReason::CancelLostRace),
            Some(kept.clone())
        );
        let pending = if route_before_settle {
            assert_eq!(route(&table, "a", "m"), Route::WaitFinishing);
            table.settle(&"a", start)
        } else {
            assert!(table.settle(&"a", start).is_empty());
            vec![input("m")]
        };
        assert_eq!(pending, vec![input("m")]);
        let (inputs, disposed) = expect_fallback(route(&table, "a", &pending[0]));
        assert_eq!((inputs, disposed), (vec![input("m")], None));
        let stats = assert_balanced(&table);
        assert_eq!(stats.disposals(DisposeReason::CancelLostRace), 1);
        assert_eq!(stats.continued, 0);
    }
}

/// Four scopes: `a` idle resident, `b` hot and running, `c` cold and running, `d` completed
/// but unsettled. Returns the starts of `b`, `c` and `d`.
fn mixed_table() -> (Table, [StartId; 3]) {
    let table = Table::new(8);
    cold_resident(&table, "a", 0, "sa");
    cold_resident(&table, "b", 1, "sb");
    let (b, _) = hot_running(&table, "b");
    let (c, _) = table.begin(&"c");
    let (d, _) = table.begin(&"d");
    expect_completed(table.finish(&"d", d, ok(3, "sd")));
    (table, [b, c, d])
}

#[test]
fn shutdown_disposes_every_resident_and_marks_running_turns() {
    let (table, [b, c, d]) = mixed_table();
    let disposed: Vec<_> = table
        .dispose_all(DisposeReason::Shutdown)
        .into_iter()
        .map(|(k, r)| (k, r.session_id))
        .collect();
    assert_eq!(
        disposed,
        vec![
            ("a", "sa".to_owned()),
            ("b", "sb".to_owned()),
            ("d", "sd".to_owned())
        ]
    );
    // Running turns (hot and cold) end without registering a resident.
    assert_eq!(expect_completed(table.finish(&"b", b, ok(1, "sb"))).0, None);
    assert_eq!(expect_completed(table.finish(&"c", c, ok(2, "sc"))).0, None);
    assert!(table.settle(&"d", d).is_empty());
    let stats = assert_balanced(&table);
    assert_eq!(stats.residents, 0);
    assert_eq!(stats.disposals(DisposeReason::Shutdown), 3);
    assert!(
        table.dispose_all(DisposeReason::Shutdown).is_empty(),
        "exactly once"
    );
}

#[test]
fn idle_sleep_disposes_only_settled_completed_residents() {
    let (table, [b, _, d]) = mixed_table();
    let disposed = table.dispose_idle(DisposeReason::IdlePoolSleep);
    assert_eq!(disposed.len(), 1);
    assert_eq!(disposed[0].0, "a");
    assert!(table.resident(&"b").is_some());
    assert!(table.resident(&"d").is_some());
    // The running hot turn is not marked: it stays resident.
    assert!(
        expect_completed(table.finish(&"b", b, ok(1, "sb")))
            .0
            .is_some()
    );
    assert!(table.settle(&"d", d).is_empty());
    // Once settled, `d` (and `b` after its own settle) become eligible.
    let disposed: Vec<_> = table
        .dispose_idle(DisposeReason::IdlePoolSleep)
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    assert_eq!(disposed, vec!["d"]);
    assert!(table.settle(&"b", b).is_empty());
    assert_eq!(table.dispose_idle(DisposeReason::IdlePoolSleep).len(), 1);
    assert_eq!(table.stats().disposals(DisposeReason::IdlePoolSleep), 3);
}

#[test]
fn follow_up_during_finishing_waits_then_reroutes_from_scratch() {
    let table = Table::new(4);
    let (start, _) = table.begin(&"a");
    let (kept, _) = expect_completed(table.finish(&"a", start, ok(0, "s1")));
    assert!(kept.is_some());
    assert!(table.is_finishing(&"a"));
    assert_eq!(table.status(&"a"), Some(TurnStatus::Completed));
    assert_eq!(table.try_begin(&"a"), Err(BeginError::Finishing));

    assert_eq!(route(&table, "a", "x"), Route::WaitFinishing);
    assert_eq!(route(&table, "a", "y"), Route::WaitFinishing);
    assert!(
        table.settle(&"a", StartId(start.get() + 1)).is_empty(),
        "wrong start"
    );
    assert!(table.is_finishing(&"a"));

    let handed = table.settle(&"a", start);
    assert_eq!(handed, vec![input("x"), input("y")]);
    assert!(!table.is_finishing(&"a"));
    assert!(table.settle(&"a", start).is_empty(), "handed back once");

    let (hot, _, inputs) = expect_continue(route(&table, "a", &handed[0]));
    assert_eq!(inputs, vec![input("x")]);
    assert_eq!(route(&table, "a", &handed[1]), Route::Queued);
    assert_eq!(
        table.finish(&"a", hot, ok(0, "s1")),
        Finish::Claimed(vec![input("y")])
    );
    let stats = assert_balanced(&table);
    assert_eq!(
        (stats.waited_finishing, stats.handed_back, stats.claimed),
        (2, 2, 1)
    );
}

#[test]
fn follow_up_to_running_turn_is_queued_fifo_and_claimed_in_the_same_start() {
    let table = Table::new(4);
    let (start, _) = table.begin(&"a");
    for text in ["a", "b", "c"] {
        assert_eq!(route(&table, "a", text), Route::Queued);
    }
    assert_eq!(
        table.finish(&"a", start, ok(0, "s")),
        Finish::Claimed(vec![input("a"), input("b"), input("c")])
    );
    assert_eq!(table.status(&"a"), Some(TurnStatus::Running));
    assert!(!table.is_finishing(&"a"));
    assert_eq!(route(&table, "a", "d"), Route::Queued);
    assert_eq!(
        table.finish(&"a", start, ok(0, "s")),
        Finish::Claimed(vec![input("d")])
    );
    let (kept, _) = expect_completed(table.finish(&"a", start, ok(0, "s")));
    assert!(kept.is_some());
    let stats = assert_balanced(&table);
    assert_eq!((stats.starts, stats.terminals), (1, 1));
    assert_eq!((stats.queued, stats.claimed), (4, 4));
}

#[test]
fn cancelled_and_failed_scopes_fall_back_with_their_queue() {
    for end in [TurnEnd::Failed, TurnEnd::Cancelled] {
        let table = Table::new(4);
        let (start, _) = table.begin(&"a");
        assert_eq!(route(&table, "a", "q1"), Route::Queued);
        assert_eq!(route(&table, "a", "q2"), Route::Queued);
        let requeue = match table.finish(&"a", start, end.clone()) {
            Finish::Failed { requeue, .. } | Finish::Cancelled { requeue, .. } => requeue,
            other => panic!("{end:?}: {other:?}"),
        };
        assert_eq!(requeue, vec![input("q1"), input("q2")]);
        assert!(
            !table.is_finishing(&"a"),
            "no finishing window after {end:?}"
        );
        for text in requeue {
            let (inputs, disposed) = expect_fallback(route(&table, "a", &text));
            assert_eq!((inputs, disposed), (vec![text], None));
        }
        let stats = assert_balanced(&table);
        assert_eq!((stats.fallbacks, stats.handed_back), (2, 2));
    }
}

#[test]
fn config_change_at_continue_disposes_and_falls_back() {
    let table = Table::new(4);
    let resident = cold_resident(&table, "a", 0, "s1");
    let route = table.route(&"a", input("m"), OTHER_FP, &free);
    assert_eq!(continue_outcome(&route), ContinueOutcome::Fallback);
    assert_eq!(expect_fallback(route), (vec![input("m")], Some(resident)));
    assert_eq!(table.resident(&"a"), None);
    // Once disposed, it is gone for the old configuration too.
    let (_, disposed) = expect_fallback(table.route(&"a", input("n"), FP, &free));
    assert_eq!(disposed, None);
    let stats = assert_balanced(&table);
    assert_eq!(stats.disposals(DisposeReason::ConfigChanged), 1);
    assert_eq!(stats.fallbacks, 2);
}

#[test]
fn completion_keeps_only_what_the_caller_and_table_allow() {
    struct Case {
        name: &'static str,
        max_residents: usize,
        hot: bool,
        keep: Keep,
        kept: bool,
        config_disposals: u64,
    }
    let no = |reason| Keep::No(reason);
    let cases = [
        Case {
            name: "cold yes",
            max_residents: 2,
            hot: false,
            keep: Keep::Yes,
            kept: true,
            config_disposals: 0,
        },
        Case {
            name: "cold elevated",
            max_residents: 2,
            hot: false,
            keep: no(NotResidentReason::ElevatedPermission),
            kept: false,
            config_disposals: 0,
        },
        Case {
            name: "cold per-turn cwd",
            max_residents: 2,
            hot: false,
            keep: no(NotResidentReason::PerTurnCwd),
            kept: false,
            config_disposals: 0,
        },
        Case {
            name: "cold disabled",
            max_residents: 0,
            hot: false,
            keep: Keep::Yes,
            kept: false,
            config_disposals: 0,
        },
        Case {
            name: "hot yes",
            max_residents: 2,
            hot: true,
            keep: Keep::Yes,
            kept: true,
            config_disposals: 0,
        },
        // The caller frees the session it ran on; the table only drops its registration.
        Case {
            name: "hot config changed",
            max_residents: 2,
            hot: true,
            keep: no(NotResidentReason::ConfigChanged),
            kept: false,
            config_disposals: 1,
        },
    ];
    for case in cases {
        let table = Table::new(case.max_residents);
        let start = if case.hot {
            cold_resident(&table, "a", 0, "s");
            hot_running(&table, "a").0
        } else {
            table.begin(&"a").0
        };
        let (kept, evicted) =
            expect_completed(table.finish(&"a", start, ok_keep(0, "s", case.keep)));
        assert_eq!(kept.is_some(), case.kept, "{}", case.name);
        assert!(evicted.is_empty(), "{}", case.name);
        assert_eq!(table.resident(&"a"), kept, "{}", case.name);
        let stats = assert_balanced(&table);
        assert_eq!(
            stats.disposals(DisposeReason::ConfigChanged),
            case.config_disposals,
            "{}",
            case.name
        );
    }
}

#[test]
fn lru_eviction_takes_the_least_recently_used_idle_resident() {
    let table = Table::new(2);
    let a = cold_resident(&table, "a", 0, "sa");
    let b = cold_resident(&table, "b", 1, "sb");
    // A hot turn on `a` makes `b` the least recently used.
    let (hot, _) = hot_running(&table, "a");
    assert_eq!(
        expect_completed(table.finish(&"a", hot, ok(0, "sa")))
            .0
            .as_ref(),
        Some(&a)
    );
    assert!(table.settle(&"a", hot).is_empty());

    let (start, _) = table.begin(&"c");
    let (kept, evicted) = expect_completed(table.finish(&"c", start, ok(2, "sc")));
    assert!(kept.is_some());
    assert_eq!(evicted, vec![("b", b)]);
    assert!(table.settle(&"c", start).is_empty());

    // Next in line is `a` (used before `c`).
    let (start, _) = table.begin(&"d");
    let (_, evicted) = expect_completed(table.finish(&"d", start, ok(3, "sd")));
    assert_eq!(evicted, vec![("a", a)]);
    let stats = assert_balanced(&table);
    assert_eq!(stats.residents, 2);
    assert_eq!(stats.disposals(DisposeReason::Evicted), 2);
}

#[test]
fn lru_eviction_never_takes_a_running_or_finishing_scope() {
    // `a` is running hot and `b` is finishing: neither may lose its session, so the newcomer
    // `c` is not kept and the bound still holds.
    let table = Table::new(2);
    let a = cold_resident(&table, "a", 0, "sa");
    let (hot, _) = hot_running(&table, "a");
    let (b_start, _) = table.begin(&"b");
    let b = expect_completed(table.finish(&"b", b_start, ok(1, "sb"))).0;
    assert!(b.is_some());

    let (start, _) = table.begin(&"c");
    let (kept, evicted) = expect_completed(table.finish(&"c", start, ok(2, "sc")));
    assert_eq!((kept, evicted), (None, vec![]));
    assert_eq!(table.resident(&"a").as_ref(), Some(&a));
    assert_eq!(table.resident(&"b"), b);
    let stats = assert_balanced(&table);
    assert_eq!(stats.not_kept_at_capacity, 1);
    assert_eq!(stats.disposals(DisposeReason::Evicted), 0);

    // Once `b` settles it is idle and evictable.
    assert!(table.settle(&"b", b_start).is_empty());
    assert!(table.settle(&"c", start).is_empty());
    let (start, _) = table.begin(&"c");
    let (kept, evicted) = expect_completed(table.finish(&"c", start, ok(2, "sc")));
    assert!(kept.is_some());
    assert_eq!(
        evicted.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
        vec!["b"]
    );
    assert!(
        expect_completed(table.finish(&"a", hot, ok(0, "sa")))
            .0
            .is_some()
    );
}

#[test]
fn exactly_one_terminal_per_start() {
    let table = Table::new(4);
    assert_eq!(
        table.finish(&"nobody", StartId(1), TurnEnd::Failed),
        Finish::Stale
    );

    let (first, _) = table.begin(&"a");
    assert_eq!(table.try_begin(&"a"), Err(BeginError::Running));
    assert!(matches!(
        table.finish(&"a", first, TurnEnd::Cancelled),
        Finish::Cancelled { .. }
    ));
    assert_eq!(
        table.finish(&"a", first, ok(0, "s")),
        Finish::Stale,
        "second report"
    );
    assert_balanced(&table);

    let (second, _) = table.try_begin(&"a").expect("startable after cancel");
    assert_eq!(
        table.finish(&"a", first, ok(0, "s")),
        Finish::Stale,
        "older start"
    );
    assert_eq!(table.status(&"a"), Some(TurnStatus::Running));
    expect_completed(table.finish(&"a", second, ok(0, "s")));
    assert_eq!(table.finish(&"a", second, TurnEnd::Failed), Finish::Stale);
    assert_eq!(
        table.status(&"a"),
        Some(TurnStatus::Completed),
        "stale reports change nothing"
    );
    assert!(table.settle(&"a", second).is_empty());

    // An unchecked begin over a running start supersedes it: its terminal is counted once.
    let (third, _) = table.begin(&"a");
    assert_eq!(route(&table, "a", "q"), Route::Queued);
    let (fourth, _) = table.begin(&"a");
    assert_eq!(table.finish(&"a", third, TurnEnd::Failed), Finish::Stale);
    assert_eq!(
        table.finish(&"a", fourth, ok(1, "s2")),
        Finish::Claimed(vec![input("q")]),
        "queued input moves to the new start"
    );
    let stats = assert_balanced(&table);
    assert_eq!(
        (
            stats.starts,
            stats.terminals,
            stats.running,
            stats.superseded,
            stats.stale_finishes
        ),
        (4, 3, 1, 1, 5)
    );
}

#[test]
fn disposal_while_running_keeps_no_resident_and_hands_queue_back() {
    // Hot: the caller learns which session to cancel; the turn frees it when it settles.
    let table = Table::new(4);
    let resident = cold_resident(&table, "a", 0, "s1");
    let (hot, _) = hot_running(&table, "a");
    assert_eq!(route(&table, "a", "q"), Route::Queued);
    assert_eq!(
        table.dispose(&"a", None, DisposeReason::Rotate),
        Some(resident)
    );
    assert_eq!(table.dispose(&"a", None, DisposeReason::Rotate), None);
    let (kept, evicted) = expect_completed(table.finish(&"a", hot, ok(0, "s1")));
    assert_eq!(
        (kept, evicted),
        (None, vec![]),
        "no claim on a session being torn down"
    );
    assert_eq!(route(&table, "a", "z"), Route::WaitFinishing);
    let handed = table.settle(&"a", hot);
    assert_eq!(handed, vec![input("q"), input("z")]);
    for text in handed {
        expect_fallback(route(&table, "a", &text));
    }
    let stats = assert_balanced(&table);
    assert_eq!(stats.disposals(DisposeReason::Rotate), 1);
    assert_eq!(stats.claimed, 0);

    // Cold: nothing registered yet, but the mark still stops registration.
    let (cold, replaced) = table.begin(&"b");
    assert_eq!(replaced, None);
    assert_eq!(
        table.dispose(&"b", None, DisposeReason::ConfigChanged),
        None
    );
    assert_eq!(
        expect_completed(table.finish(&"b", cold, ok(1, "s2"))).0,
        None
    );

    // A handle-guarded dispose of a cold turn has nothing to match and marks nothing.
    let (cold, _) = table.begin(&"c");
    assert_eq!(
        table.dispose(&"c", Some(HandleId(1)), DisposeReason::Rotate),
        None
    );
    assert!(
        expect_completed(table.finish(&"c", cold, ok(2, "s3")))
            .0
            .is_some()
    );

    // The mark belongs to one start: the next turn may stay resident again.
    assert!(table.settle(&"b", cold).is_empty());
    let (next, _) = table.begin(&"b");
    assert!(
        expect_completed(table.finish(&"b", next, ok(1, "s4")))
            .0
            .is_some()
    );
}

#[test]
fn agent_exit_and_predicate_disposal_select_their_residents() {
    let table = Table::new(8);
    cold_resident(&table, "a", 0, "sa");
    cold_resident(&table, "b", 0, "sb");
    cold_resident(&table, "c", 1, "sc");
    let (hot, _) = hot_running(&table, "c");

    let exited: Vec<_> = table
        .dispose_slot(0, DisposeReason::AgentExit)
        .into_iter()
        .map(|(k, r)| (k, r.slot))
        .collect();
    assert_eq!(exited, vec![("a", 0), ("b", 0)]);
    assert!(table.dispose_slot(0, DisposeReason::AgentExit).is_empty());

    let removed = table.dispose_where(
        &|key, r| *key == "c" && r.session_id == "sc",
        DisposeReason::ConfigChanged,
    );
    assert_eq!(removed.len(), 1);
    // `c` was running hot: its turn must not re-register the session.
    assert_eq!(
        expect_completed(table.finish(&"c", hot, ok(1, "sc"))).0,
        None
    );
    let stats = assert_balanced(&table);
    assert_eq!(stats.disposals(DisposeReason::AgentExit), 2);
    assert_eq!(stats.disposals(DisposeReason::ConfigChanged), 1);
    assert_eq!(stats.residents, 0);
}

#[test]
fn stats_count_each_kind_of_route() {
    let table = Table::new(4);
    expect_fallback(route(&table, "a", "1")); // unknown scope
    cold_resident(&table, "a", 0, "s");
    let busy = |_: usize| true;
    assert!(matches!(
        table.route(&"a", input("2"), FP, &busy),
        Route::CapacityWait(_)
    ));
    let (hot, _, _) = expect_continue(route(&table, "a", "3"));
    assert_eq!(route(&table, "a", "4"), Route::Queued);
    assert!(matches!(
        table.finish(&"a", hot, ok(0, "s")),
        Finish::Claimed(_)
    ));
    expect_completed(table.finish(&"a", hot, ok(0, "s")));
    assert_eq!(route(&table, "a", "5"), Route::WaitFinishing);
    assert_eq!(table.settle(&"a", hot).len(), 1);

    let stats = assert_balanced(&table);
    let expected = TableStats {
        starts: 2,
        terminals: 2,
        running: 0,
        finishing: 0,
        residents: 1,
        held_inputs: 0,
        scopes: 1,
        continued: 1,
        fallbacks: 1,
        capacity_waits: 1,
        queued: 1,
        waited_finishing: 1,
        claimed: 1,
        handed_back: 1,
        stale_finishes: 0,
        superseded: 0,
        not_kept_at_capacity: 0,
        disposals_by_reason: Default::default(),
    };
    assert_eq!(stats, expected);
}

#[test]
fn concurrent_routes_start_exactly_one_continuation() {
    const ROUTERS: usize = 8;
    for _ in 0..50 {
        let table = Arc::new(Table::new(4));
        cold_resident(&table, "a", 0, "s");
        let barrier = Arc::new(Barrier::new(ROUTERS));
        let handles: Vec<_> = (0..ROUTERS)
            .map(|i| {
                let table = Arc::clone(&table);
                let barrier = Arc::clone(&barrier);
                thread::spawn(move || {
                    barrier.wait();
                    continue_outcome(&table.route(&"a", format!("m{i}"), FP, &free))
                })
            })
            .collect();
        let outcomes: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().expect("router thread"))
            .collect();
        let continued = outcomes
            .iter()
            .filter(|o| **o == ContinueOutcome::Continued)
            .count();
        let queued = outcomes
            .iter()
            .filter(|o| **o == ContinueOutcome::NotCompleted)
            .count();
        assert_eq!((continued, queued), (1, ROUTERS - 1), "{outcomes:?}");
        assert_balanced(&table);
    }
}

#[test]
fn bare_scopes_beyond_retention_are_forgotten_oldest_first() {
    let table = Table::with_retention(4, 2);
    cold_resident(&table, "live", 0, "s");
    for key in ["f1", "f2", "f3", "f4"] {
        let (start, _) = table.begin(&key);
        assert!(matches!(
            table.finish(&key, start, TurnEnd::Failed),
            Finish::Failed { .. }
        ));
    }
    let (running, _) = table.begin(&"run");
    // Only bare scopes are forgotten, and only the oldest beyond the bound.
    assert_eq!(table.status(&"f1"), None);
    assert_eq!(table.status(&"f2"), None);
    assert_eq!(table.status(&"f3"), Some(TurnStatus::Failed));
    assert_eq!(table.status(&"f4"), Some(TurnStatus::Failed));
    assert!(table.resident(&"live").is_some());
    assert_eq!(table.status(&"run"), Some(TurnStatus::Running));
    expect_fallback(route(&table, "f1", "m"));
    assert!(
        expect_completed(table.finish(&"run", running, ok(1, "r")))
            .0
            .is_some()
    );
    let stats = assert_balanced(&table);
    assert_eq!(stats.scopes, 4);
}

#[test]
fn hosts_resident_reports_the_slots_that_hold_residents() {
    let table = Table::new(4);
    assert!(!table.hosts_resident(0));
    cold_resident(&table, "a", 0, "s1");
    cold_resident(&table, "b", 2, "s2");
    assert!(table.hosts_resident(0) && table.hosts_resident(2));
    assert!(!table.hosts_resident(1));
    let _ = table.dispose(&"a", None, DisposeReason::Rotate);
    assert!(!table.hosts_resident(0));
}
