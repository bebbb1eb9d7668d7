//! The lifecycle's rules, one table-style test each, driving [`Lifecycle`] directly: no runtime,
//! no store, no clock (every moment is written out).
//!
//! Each test names the rule it pins in its first comment. A rule that holds whatever the series
//! carries is tested with none of the series' behaviours and with all of them; a rule that only
//! exists with a patch of the series (the delta context, residency, the capability gate) is
//! tested with that patch's behaviour alone and with the whole series, and a rule of its absence
//! with none and with every other behaviour.

use buzz_session_lifecycle::decision::{Command, Notice, NoticeCause, StoreOp};
use buzz_session_lifecycle::lifecycle::Outbox;
use buzz_session_lifecycle::receipt_view::{Belief, Expect};
use buzz_session_lifecycle::store_io::OpKind;
use buzz_session_lifecycle::test_values::none_and_all;
use buzz_session_lifecycle::testing::{Msg, TestScope};
use buzz_session_lifecycle::{
    AgentCaps, Behaviour, Behaviours, ColdReason, Lifecycle, LifecycleConfig, Moment, Opened,
    Placed, Plan, Reach, ReachKind, Ready, Record, RestoreMethod, RetryPolicy, SessionConfig,
    SlotView, StoreHealth, Target, TurnOutcome,
};
use buzz_session_store::SessionRecord;

type L = Lifecycle<TestScope, Msg>;
type Out = Outbox<TestScope, Msg>;

const MODE: &str = "bypassPermissions";

fn a() -> TestScope {
    TestScope::thread("c1", "aa")
}
fn b() -> TestScope {
    TestScope::thread("c1", "bb")
}
fn c() -> TestScope {
    TestScope::conversation("c2")
}

fn t(ms: u64) -> Moment {
    Moment(ms)
}

/// Builds with `behaviour` on: it alone, and the whole series.
fn with(behaviour: Behaviour) -> [Behaviours; 2] {
    [Behaviours::of(&[behaviour]), Behaviours::all()]
}

/// Builds with `behaviour` off: none of the series, and the series without it.
fn without(behaviour: Behaviour) -> [Behaviours; 2] {
    [Behaviours::default(), Behaviours::all().without(behaviour)]
}

/// The configuration new sessions get in these tests (no model requested).
fn cfg(behaviours: Behaviours) -> SessionConfig {
    SessionConfig::new(behaviours, &["/srv", "[]"], None, Some(MODE))
}

/// Another configuration: the permission mode changed. (A model change is another
/// configuration only without in-place changes: with `ConfigInPlace` a session takes a new model
/// at its next turn.)
fn other_mode(behaviours: Behaviours) -> SessionConfig {
    SessionConfig::new(behaviours, &["/srv", "[]"], None, Some("default"))
}

/// Resume on, no resident sessions (upstream's routing), with `behaviours`.
fn plain(behaviours: Behaviours) -> LifecycleConfig {
    LifecycleConfig {
        max_residents: 0,
        ..LifecycleConfig::with_behaviours(behaviours)
    }
}

fn lifecycle(config: LifecycleConfig) -> L {
    let session = cfg(config.behaviours);
    let mut l = Lifecycle::new(config);
    l.configure_sessions(session);
    l
}

/// An agent that advertised `session/load` and `session/close`.
fn caps() -> Option<AgentCaps> {
    Some(AgentCaps {
        load: true,
        close: true,
        ..AgentCaps::default()
    })
}

/// A receipt written under [`cfg`].
fn receipt(session: &str) -> SessionRecord {
    let mut r = SessionRecord::new(session);
    r.requested_permission_mode = Some(MODE.into());
    r
}

fn msgs(ids: &[&str]) -> Vec<Msg> {
    ids.iter().map(|id| Msg::new(id)).collect()
}

fn ready(scopes: &[TestScope]) -> Vec<Ready<TestScope>> {
    scopes
        .iter()
        .map(|scope| Ready {
            scope: scope.clone(),
            held: false,
        })
        .collect()
}

const IDLE2: [SlotView; 2] = [SlotView::Idle, SlotView::Idle];

fn place(l: &L, scopes: &[TestScope], now: u64) -> Vec<Placed<TestScope>> {
    l.place(&ready(scopes), &IDLE2, StoreHealth::Answering, t(now))
}

fn run_any(scope: TestScope) -> Placed<TestScope> {
    Placed::Run(scope, Target::Any)
}

/// The scope's receipt is read and answers `record`.
fn read(l: &mut L, scope: &TestScope, record: Option<SessionRecord>, now: u64) {
    l.read_receipt(scope, t(now));
    l.read_done(scope, Ok(record));
}

/// Starts `scope`'s turn on `slot` with inputs `ids` and the worker's live session `live`.
fn start(l: &mut L, scope: &TestScope, slot: usize, ids: &[&str], live: Option<&str>) -> Plan {
    l.start(
        scope,
        slot,
        msgs(ids),
        live.map(str::to_string),
        caps(),
        t(0),
    )
}

/// The receipt written for a session [`created`] under [`cfg`] by a lifecycle with `behaviours`.
fn created_record(behaviours: Behaviours, session: &str) -> SessionRecord {
    let mut r = receipt(session);
    r.permission_mode = Some(MODE.into());
    // With continuity the receipt counts the session's turns from its creation.
    if behaviours.has(Behaviour::Continuity) {
        r.turns = Some(0);
    }
    r
}

fn created(session: &str) -> Opened {
    Opened::Created {
        session_id: session.into(),
        model: None,
        permission_mode: Some(MODE.into()),
    }
}

fn replied_with(session: &str) -> TurnOutcome {
    TurnOutcome::Replied {
        session_id: session.into(),
        rotated: false,
    }
}

/// A successful turn on `session`, published and settled without a ledger.
fn reply(l: &mut L, scope: &TestScope, session: &str) {
    l.turn_end(scope, replied_with(session), t(0));
    l.replied(scope, &format!("reply-{session}"));
    l.settled(scope, None, t(0));
}

/// A cold turn of `scope` on `slot` that creates `session` and answers.
fn cold_turn(l: &mut L, scope: &TestScope, slot: usize, ids: &[&str], session: &str) {
    let plan = start(l, scope, slot, ids, None);
    assert_eq!(plan.reach.kind(), ReachKind::Cold, "{plan:?}");
    l.opened(scope, created(session), t(0));
    reply(l, scope, session);
}

fn notices(out: &Out) -> Vec<&Notice<TestScope, Msg>> {
    out.commands
        .iter()
        .filter_map(|c| match c {
            Command::Notice(n) => Some(n),
            Command::Release { .. } => None,
        })
        .collect()
}

fn releases(out: &Out) -> Vec<(usize, String)> {
    out.commands
        .iter()
        .filter_map(|c| match c {
            Command::Release {
                slot, session_id, ..
            } => Some((*slot, session_id.clone())),
            Command::Notice(_) => None,
        })
        .collect()
}

fn cold(reason: ColdReason) -> Reach {
    Reach::Cold { reason }
}

fn undecided(l: &mut L, scope: &TestScope, now: u64) -> Out {
    l.restore_undecided(
        scope,
        RestoreMethod::Load,
        "agent error -32603: service failure".into(),
    );
    let after = l.turn_end(scope, TurnOutcome::Failed { failure: None }, t(now));
    assert!(
        after.requeue_without_attempt,
        "a restore retry is no attempt"
    );
    l.take_outbox()
}

// ----- placement ---------------------------------------------------------------------------

#[test]
fn placement_serves_ready_scopes_in_queue_order_and_waits_for_what_blocks_a_scope() {
    for behaviours in none_and_all() {
        // Rule: scopes are placed in the order the harness's queue lists them; a scope waits while a
        // turn of it runs, while it settles, while its restore retry is not due, while one of its
        // sessions is being released and while its receipt is being read. `place` changes nothing.
        let mut l = lifecycle(plain(behaviours));
        for scope in [a(), b(), c()] {
            read(&mut l, &scope, None, 0);
        }
        let order = place(&l, &[b(), c(), a()], 0);
        assert_eq!(order, [run_any(b()), run_any(c()), run_any(a())]);
        assert_eq!(place(&l, &[b(), c(), a()], 0), order, "placing is pure");

        // (what blocks scope a, how it is released, what placement then says)
        type Step = fn(&mut L);
        let cases: Vec<(&str, Step, Step, Vec<Placed<TestScope>>)> = vec![
            (
                "running",
                |l| {
                    start(l, &a(), 0, &["a1"], None);
                },
                |l| {
                    l.turn_end(&a(), TurnOutcome::Failed { failure: None }, t(0));
                },
                vec![Placed::Read(a())],
            ),
            (
                "settling",
                |l| {
                    start(l, &a(), 0, &["a1"], None);
                    l.opened(&a(), created("s1"), t(0));
                    l.turn_end(&a(), replied_with("s1"), t(0));
                    assert_eq!(l.settling(), [(a(), 0)]);
                },
                |l| l.settled(&a(), None, t(0)),
                vec![Placed::Read(a())],
            ),
            (
                "releasing",
                |l| l.abandon(&a(), vec![(1, "s0".into())], t(0)),
                |l| l.released(&a(), "s0"),
                // Abandoned: the next session is new, so there is nothing to read.
                vec![run_any(a())],
            ),
            (
                "reading",
                |l| l.read_receipt(&a(), t(0)),
                |l| l.read_done(&a(), Ok(None)),
                vec![run_any(a())],
            ),
        ];
        for (name, block, unblock, then) in cases {
            let mut l = lifecycle(plain(behaviours));
            read(&mut l, &a(), None, 0);
            block(&mut l);
            assert!(place(&l, &[a()], 0).is_empty(), "{name}: a waits");
            assert_eq!(
                place(&l, &[b()], 0),
                [Placed::Read(b())],
                "{name}: b does not"
            );
            unblock(&mut l);
            assert_eq!(place(&l, &[a()], 0), then, "{name}: then");
        }

        // A restore retry waits until it is due.
        let mut l = lifecycle(plain(behaviours));
        read(&mut l, &a(), Some(receipt("s1")), 0);
        start(&mut l, &a(), 0, &["a1"], None);
        undecided(&mut l, &a(), 1_000);
        assert!(place(&l, &[a()], 15_999).is_empty(), "retry not due");
        assert_eq!(place(&l, &[a()], 16_000), [Placed::Read(a())]);
    }
}

#[test]
fn a_turn_that_cannot_continue_a_live_session_reads_its_receipt_first() {
    for behaviours in none_and_all() {
        // Rule: before a turn that cannot continue a live session, the scope's receipt is read
        // (never on the event loop, never while holding a worker); a read answers for one start
        // only. A scope whose live session an idle worker holds is continued at once, with its
        // receipt checked beside the turn (an operator may have forgotten it), unless the store is
        // down; without resume nothing is read.
        let mut l = lifecycle(plain(behaviours));
        assert_eq!(place(&l, &[a()], 0), [Placed::Read(a())]);
        l.read_receipt(&a(), t(0));
        let out = l.take_outbox();
        assert_eq!(out.store, [StoreOp::Read { scope: a() }]);
        assert_eq!(l.read_started(&a()), Some(t(0)));
        l.read_done(&a(), Ok(Some(receipt("s1"))));
        assert_eq!(place(&l, &[a()], 0), [run_any(a())]);
        start(&mut l, &a(), 0, &["a1"], None);
        l.turn_end(&a(), TurnOutcome::Failed { failure: None }, t(0));
        assert_eq!(place(&l, &[a()], 0), [Placed::Read(a())], "read again");

        let held = [Ready {
            scope: b(),
            held: true,
        }];
        assert_eq!(
            l.place(&held, &IDLE2, StoreHealth::Answering, t(0)),
            [Placed::RunChecked(b(), Target::Any)]
        );
        assert_eq!(
            l.place(&held, &IDLE2, StoreHealth::Down, t(0)),
            [run_any(b())],
            "the store is down: continued without a check"
        );

        let l = lifecycle(LifecycleConfig {
            resume: false,
            ..plain(behaviours)
        });
        assert_eq!(place(&l, &[a()], 0), [run_any(a())]);
    }
}

#[test]
fn a_held_copy_that_will_not_be_continued_does_not_spare_the_read() {
    for behaviours in none_and_all() {
        // Rule: a scope an idle worker holds a live session of is continued with its receipt checked
        // beside the turn, and when the store is down the check is skipped; but a copy
        // opened under another configuration is discarded at start, so the receipt decides and is
        // read first whatever the store's health — else an unknown belief would answer "the store is
        // unavailable" although nothing failed.
        let mut l = lifecycle(plain(behaviours));
        read(&mut l, &a(), None, 0);
        cold_turn(&mut l, &a(), 0, &["a1"], "s1");
        l.conflict(&a(), OpKind::Commit, Some("other".into()));
        let held = [Ready {
            scope: a(),
            held: true,
        }];
        assert_eq!(
            l.place(&held, &IDLE2, StoreHealth::Answering, t(0)),
            [Placed::RunChecked(a(), Target::Any)],
            "continued, checked beside the turn"
        );
        assert_eq!(
            l.place(&held, &IDLE2, StoreHealth::Down, t(0)),
            [run_any(a())],
            "continued: the store is down"
        );
        l.configure_sessions(other_mode(behaviours));
        for health in [StoreHealth::Answering, StoreHealth::Down] {
            assert_eq!(
                l.place(&held, &IDLE2, health, t(0)),
                [Placed::Read(a())],
                "{health:?}"
            );
        }
        read(&mut l, &a(), Some(receipt("s1")), 0);
        l.take_outbox();
        let plan = start(&mut l, &a(), 0, &["a2"], Some("s1"));
        assert_eq!(plan.discard.as_deref(), Some("s1"));
        assert_eq!(plan.reach, cold(ColdReason::PermissionModeChanged));
        assert!(notices(&l.take_outbox()).is_empty());
    }
}

#[test]
fn a_thread_root_starts_without_a_read() {
    for behaviours in none_and_all() {
        // Rule: a message that is its own thread's root starts a thread this harness has never
        // seen: nothing can be stored for it, so its first turn needs no read (`admitted`). Not for
        // other messages, not for conversations, and not over a read already in flight.
        let mut l = lifecycle(plain(behaviours));
        l.admitted(&a(), &Msg::new("aa"));
        assert_eq!(place(&l, &[a()], 0), [run_any(a())]);
        assert_eq!(l.belief(&a()), Some(&Belief::Absent));
        let plan = start(&mut l, &a(), 0, &["aa"], None);
        assert_eq!(plan.reach, cold(ColdReason::NoReceipt));

        let cases = [
            (b(), "b1", false, "a reply in the thread"),
            (c(), "c2", false, "a conversation"),
            (b(), "bb", true, "the root while a read is in flight"),
        ];
        for (scope, id, reading, name) in cases {
            let mut l = lifecycle(plain(behaviours));
            if reading {
                l.read_receipt(&scope, t(0));
            }
            l.admitted(&scope, &Msg::new(id));
            let want = if reading {
                vec![]
            } else {
                vec![Placed::Read(scope.clone())]
            };
            assert_eq!(place(&l, std::slice::from_ref(&scope), 0), want, "{name}");
        }
    }
}

// ----- reach -------------------------------------------------------------------------------

#[test]
fn the_reach_is_decided_once_at_start_from_facts() {
    for behaviours in none_and_all() {
        // Rule: `start` decides hot / warm / cold once, from the worker's live session, the
        // receipt, the configuration, what the agent allows and whether the session was abandoned;
        // each cold turn says why. Recorded as `turn_started`.
        let warm = |record: SessionRecord| Reach::Warm {
            record,
            method: RestoreMethod::Load,
        };
        type Setup = fn(&mut L);
        // (name, setup, live session on the worker, expected reach, expected fresh)
        let cases: Vec<(&str, Setup, Option<&str>, Reach, bool)> = vec![
            (
                "hot",
                |_| {},
                Some("live"),
                Reach::Hot {
                    session_id: "live".into(),
                },
                false,
            ),
            (
                "warm",
                |l| read(l, &a(), Some(receipt("s1")), 0),
                None,
                warm(receipt("s1")),
                false,
            ),
            (
                "no receipt",
                |l| read(l, &a(), None, 0),
                None,
                cold(ColdReason::NoReceipt),
                false,
            ),
            (
                "model changed",
                |l| read(l, &a(), Some(receipt_with_model("big")), 0),
                None,
                // With in-place changes the session is reopened and takes the model at this turn.
                if behaviours.has(Behaviour::ConfigInPlace) {
                    Reach::Warm {
                        record: receipt_with_model("big"),
                        method: RestoreMethod::Load,
                    }
                } else {
                    cold(ColdReason::ModelChanged)
                },
                false,
            ),
            (
                "permission mode changed",
                |l| read(l, &a(), Some(receipt_without_mode()), 0),
                None,
                cold(ColdReason::PermissionModeChanged),
                false,
            ),
            (
                "abandoned",
                |l| l.abandon(&a(), vec![], t(0)),
                None,
                cold(ColdReason::Abandoned),
                true,
            ),
            (
                "store unavailable",
                |l| {
                    l.read_receipt(&a(), t(0));
                    l.read_done(&a(), Err(std::time::Duration::from_secs(10)));
                },
                None,
                cold(ColdReason::StoreUnavailable),
                false,
            ),
        ];
        for (name, setup, live, want, fresh) in cases {
            let mut l = lifecycle(plain(behaviours));
            setup(&mut l);
            l.take_outbox();
            let plan = start(&mut l, &a(), 1, &["a1"], live);
            assert_eq!(plan.reach, want, "{name}");
            assert_eq!(plan.fresh, fresh, "{name}");
            assert_eq!(plan.discard, None, "{name}");
            assert_eq!(
                l.running_plan(&a()).map(|p| &p.reach),
                Some(&want),
                "{name}"
            );
            let cold_reason = match want {
                Reach::Cold { reason } => Some(reason),
                _ => None,
            };
            let started = Record::TurnStarted {
                scope: "thread:aa".into(),
                start: 1,
                slot: 1,
                via: want.kind(),
                cold_reason,
            };
            assert!(l.take_outbox().records.contains(&started), "{name}");
        }

        // Without resume every turn is cold.
        let mut l = lifecycle(LifecycleConfig {
            resume: false,
            ..plain(behaviours)
        });
        let plan = start(&mut l, &a(), 0, &["a1"], None);
        assert_eq!(plan.reach, cold(ColdReason::ResumeOff));
    }
}

fn receipt_with_model(model: &str) -> SessionRecord {
    let mut r = receipt("s1");
    r.requested_model = Some(model.into());
    r
}

fn receipt_without_mode() -> SessionRecord {
    let mut r = receipt("s1");
    r.requested_permission_mode = None;
    r
}

#[test]
fn only_an_advertised_restore_method_is_planned() {
    for behaviours in with(Behaviour::CapabilityGate) {
        // Rule (capability gate): a receipt is reopened only with a method the agent advertised,
        // `session/resume` before `session/load`; an agent that advertised neither gets a new
        // session.
        let cases = [
            (None, cold(ColdReason::CannotRestore)),
            (Some(AgentCaps::default()), cold(ColdReason::CannotRestore)),
            (
                caps(),
                Reach::Warm {
                    record: receipt("s1"),
                    method: RestoreMethod::Load,
                },
            ),
            (
                Some(AgentCaps {
                    load: true,
                    resume: true,
                    ..AgentCaps::default()
                }),
                Reach::Warm {
                    record: receipt("s1"),
                    method: RestoreMethod::Resume,
                },
            ),
        ];
        for (caps, want) in cases {
            let mut l = lifecycle(plain(behaviours));
            read(&mut l, &a(), Some(receipt("s1")), 0);
            let plan = l.start(&a(), 0, msgs(&["a1"]), None, caps, t(0));
            assert_eq!(plan.reach, want, "{caps:?}");
        }
    }
}

#[test]
fn without_the_capability_gate_every_receipt_is_loaded() {
    for behaviours in without(Behaviour::CapabilityGate) {
        // Rule (without the gate, as block/buzz#6088): `session/load` for every receipt, whatever
        // the agent advertised, and no `session/close`.
        let mut l = lifecycle(plain(behaviours));
        read(&mut l, &a(), Some(receipt("s1")), 0);
        let plan = l.start(&a(), 0, msgs(&["a1"]), None, None, t(0));
        assert_eq!(
            plan.reach,
            Reach::Warm {
                record: receipt("s1"),
                method: RestoreMethod::Load,
            }
        );
        assert!(!l.close_allowed(caps()));
    }
}

#[test]
fn a_live_copy_under_another_configuration_is_discarded_and_released() {
    for behaviours in none_and_all() {
        // Rule: a live session opened under another configuration (here the permission mode
        // changed) is not continued: the plan discards it from the worker, the lifecycle releases
        // it, and the receipt decides (here: written under the old mode, so cold). The scope does not
        // start again before the release finished.
        let mut l = lifecycle(plain(behaviours));
        cold_turn(&mut l, &a(), 0, &["a1"], "s1");
        l.configure_sessions(other_mode(behaviours));
        read(&mut l, &a(), Some(receipt("s1")), 0);
        l.take_outbox();
        let plan = start(&mut l, &a(), 0, &["a2"], Some("s1"));
        assert_eq!(plan.discard.as_deref(), Some("s1"));
        assert_eq!(plan.reach, cold(ColdReason::PermissionModeChanged));
        assert_eq!(releases(&l.take_outbox()), [(0, "s1".to_string())]);
        l.turn_end(&a(), TurnOutcome::Failed { failure: None }, t(0));
        read(&mut l, &a(), None, 0);
        assert!(place(&l, &[a()], 0).is_empty(), "waits for the release");
        l.released(&a(), "s1");
        assert_eq!(place(&l, &[a()], 0), [run_any(a())]);

        // A live copy the lifecycle never saw opened is trusted (upstream kept it): hot.
        let mut l = lifecycle(plain(behaviours));
        let plan = start(&mut l, &a(), 0, &["a1"], Some("old"));
        assert_eq!(plan.hot_session(), Some("old"));
    }
}

// ----- restore retries ---------------------------------------------------------------------

#[test]
fn an_undecided_restore_retries_then_gives_up_with_one_notice_per_streak() {
    for behaviours in none_and_all() {
        // Rule: a restore that fails without a definitive answer keeps the receipt and is retried
        // (15 s doubling to 60 s) without counting an attempt; the thread is told once per streak;
        // after 4 failures the harness gives up, says so, and answers from a new session. A worker
        // lost during a retry keeps the streak; a reopened session ends it.
        let mut l = lifecycle(plain(behaviours));
        read(&mut l, &a(), Some(receipt("s1")), 0);
        let plan = start(&mut l, &a(), 0, &["a1", "a2"], None);
        assert!(matches!(plan.reach, Reach::Warm { .. }));
        let out = undecided(&mut l, &a(), 1_000);
        let told = notices(&out);
        assert_eq!(told.len(), 1);
        assert_eq!(told[0].trigger, Msg::new("a2"), "about the newest input");
        assert_eq!(told[0].cause, NoticeCause::RestoreRetrying);
        assert!(told[0].text.contains("service failure"), "{}", told[0].text);
        assert!(!told[0].text.contains("!rotate"), "no owner configured");
        assert!(out.records.contains(&Record::RestoreRetry {
            scope: "thread:aa".into(),
            method: RestoreMethod::Load,
            attempts: 1,
            retry_in_ms: 15_000,
        }));

        // Attempt 2 is lost with its worker: the streak stands, the next failure continues it.
        read(&mut l, &a(), Some(receipt("s1")), 16_000);
        start(&mut l, &a(), 0, &["a1", "a2"], None);
        l.turn_end(&a(), TurnOutcome::WorkerLost, t(17_000));
        assert_eq!(place(&l, &[a()], 17_000), [Placed::Read(a())], "still due");
        let mut now = 17_000;
        for (attempts, delay) in [(2, 30_000), (3, 60_000)] {
            read(&mut l, &a(), Some(receipt("s1")), now);
            start(&mut l, &a(), 0, &["a1", "a2"], None);
            let out = undecided(&mut l, &a(), now);
            assert!(notices(&out).is_empty(), "told once per streak");
            let retry = out.records.iter().find_map(|r| match r {
                Record::RestoreRetry {
                    attempts,
                    retry_in_ms,
                    ..
                } => Some((*attempts, *retry_in_ms)),
                _ => None,
            });
            assert_eq!(retry, Some((attempts, delay)));
            now += delay;
        }
        read(&mut l, &a(), Some(receipt("s1")), now);
        start(&mut l, &a(), 0, &["a1", "a2"], None);
        let out = undecided(&mut l, &a(), now);
        let told = notices(&out);
        assert_eq!(told.len(), 1);
        assert_eq!(told[0].cause, NoticeCause::RestoreAbandoned);
        assert!(told[0].text.contains("new session"), "{}", told[0].text);
        assert!(
            out.records
                .iter()
                .any(|r| matches!(r, Record::RestoreAbandoned { attempts: 4, .. }))
        );

        // No more waiting and no read: a new session answers, and replaces the receipt.
        assert_eq!(place(&l, &[a()], now), [run_any(a())]);
        let plan = start(&mut l, &a(), 0, &["a1", "a2"], None);
        assert_eq!(plan.reach, cold(ColdReason::RestoreAbandoned));
        assert!(!plan.fresh);
        l.opened(&a(), created("s2"), t(now));
        let out = l.take_outbox();
        assert!(matches!(
            &out.store[..],
            [StoreOp::Put { record, expect: Expect::Session(old), .. }]
                if record.session_id == "s2" && old == "s1"
        ));
        reply(&mut l, &a(), "s2");

        // A new streak after a success is told again.
        read(&mut l, &a(), Some(receipt("s2")), now);
        start(&mut l, &a(), 0, &["a3"], None);
        assert_eq!(notices(&undecided(&mut l, &a(), now)).len(), 1);
    }
}

#[test]
fn a_reopened_session_ends_the_streak_and_the_retry_notice_names_rotate_only_with_an_owner() {
    for behaviours in none_and_all() {
        // Rule: `Opened::Restored` ends a retry streak (the next failure starts a new one and is
        // told); `!rotate` is mentioned only when an owner is configured.
        let mut l = lifecycle(LifecycleConfig {
            owner_configured: true,
            ..plain(behaviours)
        });
        read(&mut l, &a(), Some(receipt("s1")), 0);
        start(&mut l, &a(), 0, &["a1"], None);
        let out = undecided(&mut l, &a(), 0);
        assert!(notices(&out)[0].text.contains("!rotate"));
        read(&mut l, &a(), Some(receipt("s1")), 15_000);
        start(&mut l, &a(), 0, &["a1"], None);
        l.opened(
            &a(),
            Opened::Restored {
                session_id: "s1".into(),
                method: RestoreMethod::Load,
            },
            t(15_000),
        );
        l.turn_end(&a(), TurnOutcome::Failed { failure: None }, t(15_000));
        read(&mut l, &a(), Some(receipt("s1")), 15_000);
        start(&mut l, &a(), 0, &["a1"], None);
        assert_eq!(notices(&undecided(&mut l, &a(), 15_000)).len(), 1);

        // A one-attempt policy gives up at once.
        let mut l = lifecycle(LifecycleConfig {
            retry: RetryPolicy {
                max_attempts: 1,
                ..RetryPolicy::default()
            },
            ..plain(behaviours)
        });
        read(&mut l, &a(), Some(receipt("s1")), 0);
        start(&mut l, &a(), 0, &["a1"], None);
        let out = undecided(&mut l, &a(), 0);
        assert_eq!(notices(&out)[0].cause, NoticeCause::RestoreAbandoned);
        let plan = start(&mut l, &a(), 0, &["a1"], None);
        assert_eq!(plan.reach, cold(ColdReason::RestoreAbandoned));
    }
}

#[test]
fn a_lost_session_is_told_to_the_thread_and_replaced_by_the_new_one() {
    for behaviours in none_and_all() {
        // Rule: the agent answering that it no longer has the stored session is definitive: the
        // thread is told (about the newest input), the turn goes on in a new session, and that
        // session's receipt replaces the lost one (conditional on the lost one).
        let mut l = lifecycle(plain(behaviours));
        read(&mut l, &a(), Some(receipt("s1")), 0);
        start(&mut l, &a(), 0, &["a1", "a2"], None);
        l.take_outbox();
        l.opened(
            &a(),
            Opened::Lost {
                session_id: "s1".into(),
                method: RestoreMethod::Resume,
                detail: "agent error -32002: Resource not found".into(),
            },
            t(0),
        );
        l.opened(&a(), created("s2"), t(0));
        let out = l.take_outbox();
        let told = notices(&out);
        assert_eq!(told.len(), 1);
        assert_eq!(told[0].trigger, Msg::new("a2"));
        assert_eq!(told[0].cause, NoticeCause::SessionLost);
        assert!(told[0].text.contains("-32002"), "{}", told[0].text);
        assert!(out.records.contains(&Record::SessionLost {
            scope: "thread:aa".into(),
            session_id: "s1".into(),
            method: RestoreMethod::Resume,
        }));
        let put = StoreOp::Put {
            scope: a(),
            record: created_record(behaviours, "s2"),
            expect: Expect::Session("s1".into()),
        };
        assert_eq!(out.store, [put]);
    }
}

#[test]
fn a_stale_plan_is_handed_back_without_an_attempt() {
    for behaviours in none_and_all() {
        // Rule: when the worker no longer holds the session the plan continues, the task reports it;
        // the input comes back without counting an attempt and the lifecycle decides again.
        let mut l = lifecycle(plain(behaviours));
        start(&mut l, &a(), 0, &["a1"], Some("s1"));
        l.take_outbox();
        l.plan_stale(&a());
        let after = l.turn_end(&a(), TurnOutcome::Requeued { extra: vec![] }, t(0));
        assert!(after.requeue_without_attempt);
        assert!(l.take_outbox().records.contains(&Record::PlanStale {
            scope: "thread:aa".into(),
            session_id: "s1".into(),
        }));
        assert!(!l.is_running(&a()));
        // Ordinary failures count; a turn end for a scope that does not run changes nothing.
        start(&mut l, &a(), 0, &["a1"], None);
        assert!(
            !l.turn_end(&a(), TurnOutcome::Failed { failure: None }, t(0))
                .requeue_without_attempt
        );
        assert!(
            !l.turn_end(&a(), TurnOutcome::Failed { failure: None }, t(0))
                .requeue_without_attempt
        );
    }
}

// ----- abandonment -------------------------------------------------------------------------

#[test]
fn abandoning_removes_the_receipt_under_the_belief_it_was_decided_with() {
    for behaviours in none_and_all() {
        // Rule: an abandonment removes the receipt in the same step, conditional on what the
        // lifecycle believed: the session it names, no receipt, or — unread — nothing written since
        // the decision. Idle workers' copies are released.
        type Setup = fn(&mut L);
        let cases: Vec<(&str, Setup, Expect)> = vec![
            (
                "present",
                |l| read(l, &a(), Some(receipt("s1")), 0),
                Expect::Session("s1".into()),
            ),
            ("absent", |l| read(l, &a(), None, 0), Expect::Absent),
            ("unknown", |_| {}, Expect::UnchangedSince(t(7_000))),
        ];
        for (name, setup, expect) in cases {
            let mut l = lifecycle(plain(behaviours));
            setup(&mut l);
            l.take_outbox();
            l.abandon(&a(), vec![(1, "s0".into())], t(7_000));
            let out = l.take_outbox();
            assert_eq!(
                out.store,
                [StoreOp::Remove { scope: a(), expect }],
                "{name}"
            );
            assert_eq!(releases(&out), [(1, "s0".to_string())], "{name}");
            assert_eq!(l.belief(&a()), Some(&Belief::Absent), "{name}");
        }
    }
}

#[test]
fn an_abandoned_scope_asks_for_a_fresh_session_until_one_is_created() {
    for behaviours in none_and_all() {
        // Rule: after an abandonment the next session is new and asks for a fresh conversation
        // (`freshSession`) until a `session/new` succeeds; a failed attempt keeps the request. The
        // new session's receipt is written expecting none.
        let mut l = lifecycle(plain(behaviours));
        l.abandon(&a(), vec![], t(0));
        assert_eq!(place(&l, &[a()], 0), [run_any(a())], "nothing to read");
        let plan = start(&mut l, &a(), 0, &["a1"], None);
        assert!(plan.fresh);
        assert_eq!(plan.reach, cold(ColdReason::Abandoned));
        l.turn_end(&a(), TurnOutcome::Failed { failure: None }, t(0));
        let plan = start(&mut l, &a(), 0, &["a1"], None);
        assert!(plan.fresh, "still fresh after a failed session/new");
        l.take_outbox();
        l.opened(&a(), created("s9"), t(0));
        let out = l.take_outbox();
        assert!(matches!(
            &out.store[..],
            [StoreOp::Put { expect: Expect::Absent, record, .. }] if record.session_id == "s9"
        ));
        reply(&mut l, &a(), "s9");
        read(&mut l, &a(), Some(receipt("s9")), 0);
        let plan = start(&mut l, &a(), 0, &["a2"], None);
        assert!(!plan.fresh, "consumed by the created session");
        assert!(matches!(plan.reach, Reach::Warm { .. }));
    }
}

#[test]
fn a_session_opened_by_a_turn_the_owner_abandoned_never_becomes_the_receipt() {
    for behaviours in none_and_all() {
        // Rule: abandoning a running scope marks its turn: the session it opens is not written as
        // the receipt, is not settled, and is released when the turn ends; the fresh request
        // stands. An abandonment also ends a pending restore retry.
        let mut l = lifecycle(plain(behaviours));
        read(&mut l, &a(), None, 0);
        start(&mut l, &a(), 1, &["a1"], None);
        l.abandon(&a(), vec![], t(0));
        l.take_outbox();
        l.opened(&a(), created("s5"), t(0));
        assert!(l.take_outbox().store.is_empty(), "no receipt for s5");
        l.turn_end(&a(), replied_with("s5"), t(0));
        assert!(l.settling().is_empty());
        assert_eq!(releases(&l.take_outbox()), [(1, "s5".to_string())]);
        l.released(&a(), "s5");
        let plan = start(&mut l, &a(), 0, &["a2"], None);
        assert!(plan.fresh);

        let mut l = lifecycle(plain(behaviours));
        read(&mut l, &a(), Some(receipt("s1")), 0);
        start(&mut l, &a(), 0, &["a1"], None);
        undecided(&mut l, &a(), 0);
        assert!(place(&l, &[a()], 1).is_empty(), "retry not due");
        l.abandon(&a(), vec![], t(1));
        assert_eq!(
            place(&l, &[a()], 1),
            [run_any(a())],
            "no retry after !rotate"
        );
    }
}

#[test]
fn an_abandoned_turn_releases_its_session_however_it_ends() {
    for behaviours in none_and_all() {
        // Rule: the session of a turn whose scope was abandoned while it ran (`!rotate`, `!model`)
        // is released when the turn ends, whether it answered, was rotated, or was handed back to
        // run again (a model switch, or a steered message it took first): the worker may still
        // hold it, and nothing may continue it.
        let cases = [
            replied_with("s1"),
            TurnOutcome::Rotated,
            TurnOutcome::Requeued { extra: vec![] },
            TurnOutcome::Requeued {
                extra: vec!["a2".into()],
            },
        ];
        for outcome in cases {
            let mut l = lifecycle(plain(behaviours));
            read(&mut l, &a(), None, 0);
            start(&mut l, &a(), 1, &["a1"], None);
            l.opened(&a(), created("s1"), t(0));
            l.abandon(&a(), vec![], t(0));
            l.take_outbox();
            let name = format!("{outcome:?}");
            l.turn_end(&a(), outcome, t(0));
            assert_eq!(
                releases(&l.take_outbox()),
                [(1, "s1".to_string())],
                "{name}"
            );
            assert!(
                place(&l, &[a()], 0).is_empty(),
                "{name}: waits for the release"
            );
        }
    }
}

#[test]
fn removal_from_a_channel_abandons_every_scope_of_it() {
    for behaviours in none_and_all() {
        // Rule: the agent removed from a channel forgets every receipt of the channel (one store
        // operation) and every known scope there starts fresh; other channels are untouched.
        let mut l = lifecycle(plain(behaviours));
        for scope in [a(), b(), c()] {
            read(&mut l, &scope, Some(receipt("s1")), 0);
        }
        l.take_outbox();
        l.abandon_channel("c1");
        let out = l.take_outbox();
        assert_eq!(
            out.store,
            [StoreOp::RemoveChannel {
                channel: "c1".into()
            }]
        );
        for scope in [a(), b()] {
            assert_eq!(l.belief(&scope), Some(&Belief::Absent));
            let plan = start(&mut l, &scope, 0, &["x"], None);
            assert!(plan.fresh);
            assert_eq!(plan.reach, cold(ColdReason::Abandoned));
        }
        let plan = start(&mut l, &c(), 1, &["c1"], None);
        assert!(matches!(plan.reach, Reach::Warm { .. }));
    }
}

// ----- settlement --------------------------------------------------------------------------

#[test]
fn settlement_commits_a_ledger_bounded_to_what_can_come_back() {
    for behaviours in with(Behaviour::DeltaContext) {
        // Rule (delta-context): after a successful turn's reply is published, what its session was
        // shown is committed — only the ids that can still appear in a window (its window, its
        // triggers, its reply), sorted — while the receipt names that session. A ledger read from
        // another session, or none, commits nothing; the reopened session is seeded with it.
        use buzz_session_lifecycle::Delivered;
        let mut l = lifecycle(plain(behaviours));
        read(&mut l, &a(), None, 0);
        start(&mut l, &a(), 0, &["t1"], None);
        l.window(&a(), vec!["root".into(), "r1".into(), "r2".into()]);
        l.opened(&a(), created("s1"), t(0));
        l.turn_end(&a(), replied_with("s1"), t(0));
        assert_eq!(l.settling(), [(a(), 0)]);
        l.replied(&a(), "reply1");
        l.take_outbox();
        let shown = ["old", "root", "r1", "r2", "t1", "reply1", "r1"];
        l.settled(
            &a(),
            Some(Delivered {
                session_id: "s1".into(),
                standing_context_sent: true,
                event_ids: shown.map(String::from).to_vec(),
                usage: None,
            }),
            t(0),
        );
        let out = l.take_outbox();
        let [StoreOp::Commit { scope, commit }] = &out.store[..] else {
            panic!("one commit: {:?}", out.store)
        };
        assert_eq!(scope, &a());
        assert_eq!(commit.session_id, "s1");
        assert!(commit.standing_context_sent);
        assert_eq!(
            commit.delivered_event_ids,
            ["r1", "r2", "reply1", "root", "t1"]
        );
        let seeded = l
            .belief(&a())
            .and_then(Belief::record)
            .and_then(|r| r.delivery.clone());
        assert_eq!(
            seeded.map(|d| d.delivered_event_ids),
            Some(commit.delivered_event_ids.clone())
        );

        for delivered in [
            None,
            Some(Delivered {
                session_id: "other".into(),
                ..Delivered::default()
            }),
        ] {
            start(&mut l, &a(), 0, &["t2"], Some("s1"));
            l.turn_end(&a(), replied_with("s1"), t(0));
            l.take_outbox();
            l.settled(&a(), delivered.clone(), t(0));
            assert!(l.take_outbox().store.is_empty(), "{delivered:?}");
        }

        // The reopened session is seeded with the persisted ledger.
        let mut record = receipt("s1");
        record.delivery = Some(buzz_session_store::DeliveryRecord {
            standing_context_sent: false,
            delivered_event_ids: vec!["e1".into()],
        });
        read(&mut l, &a(), Some(record.clone()), 0);
        let plan = start(&mut l, &a(), 0, &["t3"], None);
        assert_eq!(
            plan.reach,
            Reach::Warm {
                record,
                method: RestoreMethod::Load,
            }
        );
    }
}

#[test]
fn after_a_commit_the_lifecycle_believes_the_receipt_the_store_merges() {
    for behaviours in [
        Behaviours::of(&[Behaviour::DeltaContext]),
        Behaviours::of(&[Behaviour::Continuity]),
        Behaviours::all(),
    ] {
        // Rule: a settled turn's commit is merged into the believed receipt exactly as the store
        // merges it into the stored one (`buzz_session_store::rules::apply_commit`: ledger, standing
        // context, turns and usage — `None` included — and the handoff), so a receipt this process
        // writes later from its belief (a retirement, a model switch) carries what the store holds.
        use buzz_session_lifecycle::Delivered;
        let mut l = lifecycle(plain(behaviours));
        read(&mut l, &a(), None, 0);
        start(&mut l, &a(), 0, &["t1"], None);
        l.opened(&a(), created("s1"), t(0));
        l.turn_end(&a(), replied_with("s1"), t(0));
        l.replied(&a(), "reply1");
        l.take_outbox();
        let before = l.belief(&a()).and_then(Belief::record).cloned();
        let before = before.expect("the created receipt is believed");
        l.settled(
            &a(),
            Some(Delivered {
                session_id: "s1".into(),
                standing_context_sent: true,
                event_ids: vec!["t1".into(), "reply1".into()],
                usage: Some(buzz_session_store::Usage {
                    used_tokens: 10,
                    context_tokens: Some(1000),
                }),
            }),
            t(0),
        );
        let commit = l
            .take_outbox()
            .store
            .into_iter()
            .find_map(|op| match op {
                StoreOp::Commit { commit, .. } => Some(commit),
                _ => None,
            })
            .expect("the turn is committed");
        let mut merged = before;
        buzz_session_store::rules::apply_commit(&mut merged, &commit);
        assert_eq!(l.belief(&a()).and_then(Belief::record), Some(&merged));
    }
}

#[test]
fn without_delta_context_nothing_is_committed_and_a_reopened_session_sees_everything() {
    for behaviours in without(Behaviour::DeltaContext) {
        // Rule (without delta-context): no ledger is persisted, and a reopened session is not
        // seeded with a stored one (it is shown the whole window again).
        use buzz_session_lifecycle::Delivered;
        let mut l = lifecycle(plain(behaviours));
        read(&mut l, &a(), None, 0);
        start(&mut l, &a(), 0, &["t1"], None);
        l.opened(&a(), created("s1"), t(0));
        l.turn_end(&a(), replied_with("s1"), t(0));
        l.replied(&a(), "reply1");
        l.take_outbox();
        l.settled(
            &a(),
            Some(Delivered {
                session_id: "s1".into(),
                standing_context_sent: false,
                event_ids: vec!["t1".into()],
                usage: None,
            }),
            t(0),
        );
        // No ledger goes to the store (with continuity the turn count still does).
        for op in l.take_outbox().store {
            match op {
                StoreOp::Commit { commit, .. } => {
                    assert!(commit.delivered_event_ids.is_empty(), "{commit:?}");
                    assert!(!commit.standing_context_sent);
                }
                other => panic!("nothing but a turn count is written: {other:?}"),
            }
        }
        let mut record = receipt("s1");
        record.delivery = Some(buzz_session_store::DeliveryRecord {
            standing_context_sent: false,
            delivered_event_ids: vec!["e1".into()],
        });
        read(&mut l, &a(), Some(record), 0);
        let plan = start(&mut l, &a(), 0, &["t2"], None);
        assert_eq!(
            plan.reach,
            Reach::Warm {
                record: receipt("s1"),
                method: RestoreMethod::Load,
            }
        );
    }
}

// ----- what the store said -----------------------------------------------------------------

#[test]
fn a_conflict_or_a_forget_resets_the_belief() {
    for behaviours in none_and_all() {
        // Rule: a refused write means the lifecycle no longer knows what is stored — the next start
        // reads again; an operator's forget means the scope starts over — its live copy is not
        // continued and its next session is new.
        let mut l = lifecycle(plain(behaviours));
        read(&mut l, &a(), Some(receipt("s1")), 0);
        l.conflict(&a(), OpKind::Put, Some("other".into()));
        assert_eq!(l.belief(&a()), Some(&Belief::Unknown));
        assert_eq!(place(&l, &[a()], 0), [Placed::Read(a())]);
        assert!(l.take_outbox().records.contains(&Record::ReceiptConflict {
            scope: "thread:aa".into(),
            op: OpKind::Put,
            stored_session_id: Some("other".into()),
        }));

        let mut l = lifecycle(plain(behaviours));
        read(&mut l, &a(), None, 0);
        cold_turn(&mut l, &a(), 0, &["a1"], "s1");
        l.take_outbox();
        l.forgotten(&a());
        assert_eq!(l.belief(&a()), Some(&Belief::Absent));
        assert!(l.take_outbox().records.contains(&Record::ReceiptForgotten {
            scope: "thread:aa".into()
        }));
        assert_eq!(place(&l, &[a()], 0), [run_any(a())], "nothing to read");
        let plan = start(&mut l, &a(), 0, &["a2"], Some("s1"));
        assert_eq!(plan.discard.as_deref(), Some("s1"));
        assert_eq!(plan.reach, cold(ColdReason::Abandoned));
        assert!(plan.fresh);
    }
}

#[test]
fn an_unreadable_store_answers_cold_tells_once_per_outage_and_writes_unchanged_since() {
    for behaviours in none_and_all() {
        // Rule: when the receipt cannot be read in time, what this harness knew decides: a known
        // receipt is reopened, an unknown one means a new session — the thread is told once per
        // outage, and the new receipt is written only if nothing was written since the decision. A
        // late answer is still taken in.
        use std::time::Duration;
        let unreadable = |l: &mut L, scope: &TestScope| {
            l.read_receipt(scope, t(0));
            l.read_done(scope, Err(Duration::from_secs(10)));
        };
        let mut l = lifecycle(plain(behaviours));
        unreadable(&mut l, &a());
        assert!(
            l.take_outbox()
                .records
                .contains(&Record::ReceiptUnreadable {
                    scope: "thread:aa".into(),
                    waited_ms: 10_000,
                })
        );
        assert_eq!(place(&l, &[a()], 0), [run_any(a())], "goes on without it");
        let plan = start(&mut l, &a(), 0, &["a1"], None);
        assert_eq!(plan.reach, cold(ColdReason::StoreUnavailable));
        let out = l.take_outbox();
        let told = notices(&out);
        assert_eq!(told.len(), 1);
        assert_eq!(told[0].cause, NoticeCause::StoreUnavailable);
        // session/new failed; the store is still unreadable: not told again.
        l.turn_end(&a(), TurnOutcome::Failed { failure: None }, t(0));
        unreadable(&mut l, &a());
        start(&mut l, &a(), 0, &["a1"], None);
        assert!(
            notices(&l.take_outbox()).is_empty(),
            "one notice per outage"
        );
        l.opened(&a(), created("s1"), t(12_000));
        let put = StoreOp::Put {
            scope: a(),
            record: created_record(behaviours, "s1"),
            expect: Expect::UnchangedSince(t(12_000)),
        };
        assert_eq!(l.take_outbox().store, [put]);
        reply(&mut l, &a(), "s1");
        // Next outage: the receipt this harness wrote is reopened, nobody is told.
        unreadable(&mut l, &a());
        let plan = start(&mut l, &a(), 0, &["a2"], None);
        assert!(matches!(plan.reach, Reach::Warm { .. }), "{plan:?}");
        assert!(notices(&l.take_outbox()).is_empty());

        // A read that answers ends the outage; the next one is told again.
        let mut l = lifecycle(plain(behaviours));
        unreadable(&mut l, &b());
        start(&mut l, &b(), 0, &["b1"], None);
        l.turn_end(&b(), TurnOutcome::Failed { failure: None }, t(0));
        read(&mut l, &b(), None, 0);
        l.conflict(&b(), OpKind::Put, None);
        unreadable(&mut l, &b());
        l.take_outbox();
        start(&mut l, &b(), 0, &["b1"], None);
        assert_eq!(notices(&l.take_outbox()).len(), 1, "a new outage");

        // A late answer to a read given up on is the newest word of the store.
        let mut l = lifecycle(plain(behaviours));
        unreadable(&mut l, &c());
        l.read_done(&c(), Ok(Some(receipt("s7"))));
        let plan = start(&mut l, &c(), 0, &["c1"], None);
        assert!(matches!(&plan.reach, Reach::Warm { record, .. } if record.session_id == "s7"));
    }
}

// ----- residency ---------------------------------------------------------------------------

mod residency {
    use buzz_session_lifecycle::residency::{DisposeReason, Resident};

    use super::*;

    /// Resident sessions bounded by `cap`, with `behaviours` (residency among them).
    fn resident(behaviours: Behaviours, cap: usize) -> LifecycleConfig {
        LifecycleConfig {
            max_residents: cap,
            ..LifecycleConfig::with_behaviours(behaviours)
        }
    }

    fn disposed(out: &Out) -> Vec<DisposeReason> {
        out.records
            .iter()
            .filter_map(|r| match r {
                Record::ResidentDisposed { reason, .. } => Some(*reason),
                _ => None,
            })
            .collect()
    }

    /// `a`'s session `sa` resident on slot 0, the outbox emptied.
    fn with_resident(behaviours: Behaviours, cap: usize) -> L {
        let mut l = lifecycle(resident(behaviours, cap));
        read(&mut l, &a(), None, 0);
        cold_turn(&mut l, &a(), 0, &["a1"], "sa");
        l.take_outbox();
        l
    }

    #[test]
    fn a_finished_session_stays_resident_and_its_follow_up_continues_hot_or_waits_for_it() {
        for behaviours in with(Behaviour::Residency) {
            // Rule: after a successful turn the session stays resident on its worker; the
            // follow-up runs there hot once its receipt is checked (the store down: at once);
            // while that worker is busy the follow-up waits for it (recorded once per wait) instead
            // of going cold elsewhere.
            let mut l = lifecycle(resident(behaviours, 8));
            read(&mut l, &a(), None, 0);
            cold_turn(&mut l, &a(), 0, &["a1"], "sa");
            let out = l.take_outbox();
            assert!(out.records.contains(&Record::ResidentKept {
                scope: "thread:aa".into(),
                slot: 0,
                session_id: "sa".into(),
            }));
            let kept = Resident {
                slot: 0,
                session_id: "sa".into(),
                fingerprint: cfg(behaviours).fingerprint,
            };
            assert_eq!(l.resident(&a()), Some(&kept));
            let run_here = [Placed::Run(a(), Target::Slot(0))];
            let down = l.place(&ready(&[a()]), &IDLE2, StoreHealth::Down, t(0));
            assert_eq!(down, run_here);
            assert_eq!(
                place(&l, &[a()], 0),
                [Placed::RunChecked(a(), Target::Slot(0))]
            );
            read(&mut l, &a(), Some(created_record(behaviours, "sa")), 0);
            assert_eq!(place(&l, &[a()], 0), run_here);
            let busy0 = [SlotView::Busy, SlotView::Idle];
            let wait = [Placed::WaitForResident(a(), 0)];
            assert_eq!(
                l.place(&ready(&[a()]), &busy0, StoreHealth::Answering, t(0)),
                wait
            );
            l.waiting_for_resident(&a(), 0);
            l.waiting_for_resident(&a(), 0);
            let waits = l.take_outbox().records;
            assert_eq!(
                waits,
                [Record::CapacityWait {
                    scope: "thread:aa".into(),
                    slot: 0
                }]
            );
            assert_eq!(
                l.place(&ready(&[a()]), &busy0, StoreHealth::Answering, t(0)),
                wait,
                "still waiting"
            );
            let plan = start(&mut l, &a(), 0, &["a2"], Some("sa"));
            assert_eq!(plan.hot_session(), Some("sa"));
            l.turn_end(&a(), replied_with("sa"), t(0));
            l.settled(&a(), None, t(0));
            let out = l.take_outbox();
            assert!(disposed(&out).is_empty(), "the same session is kept again");
            assert!(
                !out.records
                    .iter()
                    .any(|r| matches!(r, Record::ResidentKept { .. }))
            );
        }
    }

    #[test]
    fn residency_counts_against_capacity_but_never_blocks_the_pool() {
        for behaviours in with(Behaviour::Residency) {
            // Rule: another scope takes a worker that hosts no resident, or spawns one, or waits
            // for a spawn on its way, before it takes a resident's worker — and takes it when
            // nothing else exists.
            let mut l = with_resident(behaviours, 8);
            read(&mut l, &b(), None, 0);
            let b_on =
                |view: &[SlotView]| l.place(&ready(&[b()]), view, StoreHealth::Answering, t(0));
            use SlotView::{Busy, Empty, Idle, Spawning};
            assert_eq!(b_on(&[Idle, Idle]), [Placed::Run(b(), Target::Slot(1))]);
            assert_eq!(b_on(&[Idle, Empty]), [Placed::Run(b(), Target::Spawn(1))]);
            assert!(b_on(&[Idle, Spawning]).is_empty());
            assert_eq!(b_on(&[Idle]), [Placed::Run(b(), Target::Slot(0))]);
            assert!(b_on(&[Busy, SlotView::Backoff]).is_empty());
            // Two scopes, one spawn on its way: the first waits for it, the second spawns.
            read(&mut l, &c(), None, 0);
            let both = l.place(
                &ready(&[b(), c()]),
                &[Idle, Spawning, Empty],
                StoreHealth::Answering,
                t(0),
            );
            assert_eq!(both, [Placed::Run(c(), Target::Spawn(2))]);
        }
    }

    #[test]
    fn without_residency_routing_is_the_pools() {
        for behaviours in with(Behaviour::Residency) {
            // Rule: `--max-resident-sessions 0` keeps nothing resident and lets the pool route.
            let mut l = lifecycle(resident(behaviours, 0));
            read(&mut l, &a(), None, 0);
            cold_turn(&mut l, &a(), 0, &["a1"], "sa");
            assert!(l.resident(&a()).is_none());
            assert!(releases(&l.take_outbox()).is_empty());
            read(&mut l, &a(), None, 0);
            assert_eq!(place(&l, &[a()], 0), [run_any(a())]);
        }
    }

    #[test]
    fn a_changed_configuration_disposes_the_resident_before_the_scope_runs_again() {
        for behaviours in with(Behaviour::Residency) {
            // Rule: a resident opened under another configuration is disposed at placement and
            // released; the scope waits for the release, then reads its receipt.
            let mut l = with_resident(behaviours, 8);
            l.configure_sessions(other_mode(behaviours));
            let placed = place(&l, &[a()], 0);
            assert_eq!(placed, [Placed::Dispose(a(), DisposeReason::ConfigChanged)]);
            l.dispose_resident(&a(), DisposeReason::ConfigChanged);
            let out = l.take_outbox();
            assert_eq!(disposed(&out), [DisposeReason::ConfigChanged]);
            assert_eq!(releases(&out), [(0, "sa".to_string())]);
            assert!(place(&l, &[a()], 0).is_empty(), "release pending");
            l.released(&a(), "sa");
            assert_eq!(place(&l, &[a()], 0), [Placed::Read(a())]);
        }
    }

    #[test]
    fn every_disposal_trigger_disposes_exactly_once() {
        for behaviours in with(Behaviour::Residency) {
            // Rule: a resident is disposed exactly once, whatever ends it, with its reason; it is
            // released (closed) when its worker lives, never when the worker died or slept.
            type Trigger = fn(&mut L);
            let cases: Vec<(&str, Trigger, DisposeReason)> = vec![
                (
                    "turn failed",
                    |l| {
                        start(l, &a(), 0, &["a2"], Some("sa"));
                        l.turn_end(&a(), TurnOutcome::Failed { failure: None }, t(0));
                    },
                    DisposeReason::TurnFailed,
                ),
                (
                    "cancelled",
                    |l| {
                        start(l, &a(), 0, &["a2"], Some("sa"));
                        l.turn_end(&a(), TurnOutcome::Cancelled, t(0));
                    },
                    DisposeReason::Cancelled,
                ),
                (
                    "cancel lost the race",
                    |l| {
                        start(l, &a(), 0, &["a2"], Some("sa"));
                        l.cancel_requested(&a());
                        l.turn_end(&a(), replied_with("sa"), t(0));
                    },
                    DisposeReason::CancelLostRace,
                ),
                (
                    "rotate",
                    |l| {
                        start(l, &a(), 0, &["a2"], Some("sa"));
                        l.abandon(&a(), vec![], t(0));
                        l.turn_end(&a(), TurnOutcome::Rotated, t(0));
                    },
                    DisposeReason::Abandoned,
                ),
                (
                    "rotation after a limit",
                    |l| {
                        start(l, &a(), 0, &["a2"], Some("sa"));
                        let rotated = TurnOutcome::Replied {
                            session_id: "sa".into(),
                            rotated: true,
                        };
                        l.turn_end(&a(), rotated, t(0));
                    },
                    DisposeReason::Abandoned,
                ),
                (
                    "configuration changed during the turn",
                    |l| {
                        start(l, &a(), 0, &["a2"], Some("sa"));
                        l.configure_sessions(other_mode(l.behaviours()));
                        l.turn_end(&a(), replied_with("sa"), t(0));
                    },
                    DisposeReason::ConfigChanged,
                ),
                (
                    "evicted",
                    |l| {
                        read(l, &b(), None, 0);
                        cold_turn(l, &b(), 1, &["b1"], "sb");
                    },
                    DisposeReason::Evicted,
                ),
                (
                    "replaced",
                    |l| {
                        start(l, &a(), 1, &["a2"], None);
                    },
                    DisposeReason::Replaced,
                ),
                (
                    "worker lost in a turn",
                    |l| {
                        start(l, &a(), 0, &["a2"], Some("sa"));
                        l.turn_end(&a(), TurnOutcome::WorkerLost, t(0));
                    },
                    DisposeReason::AgentExit,
                ),
                (
                    "worker lost",
                    |l| {
                        l.worker_lost(0);
                        l.worker_lost(0);
                    },
                    DisposeReason::AgentExit,
                ),
                (
                    "worker gone at placement",
                    |l| {
                        let view = [SlotView::Backoff, SlotView::Idle];
                        let placed = l.place(&ready(&[a()]), &view, StoreHealth::Answering, t(0));
                        assert_eq!(placed, [Placed::Dispose(a(), DisposeReason::AgentExit)]);
                        l.dispose_resident(&a(), DisposeReason::AgentExit);
                        l.dispose_resident(&a(), DisposeReason::AgentExit);
                    },
                    DisposeReason::AgentExit,
                ),
                (
                    "stale plan",
                    |l| {
                        start(l, &a(), 0, &["a2"], Some("sa"));
                        l.plan_stale(&a());
                        l.turn_end(&a(), TurnOutcome::Requeued { extra: vec![] }, t(0));
                    },
                    DisposeReason::AgentExit,
                ),
                (
                    "idle pool sleep",
                    |l| {
                        l.pool_slept();
                        l.pool_slept();
                    },
                    DisposeReason::IdleSleep,
                ),
                (
                    "shutdown",
                    |l| {
                        l.shutdown();
                        l.shutdown();
                    },
                    DisposeReason::Shutdown,
                ),
                (
                    "forgotten",
                    |l| {
                        l.forgotten(&a());
                        l.forgotten(&a());
                    },
                    DisposeReason::Forgotten,
                ),
                (
                    "removed from the channel",
                    |l| {
                        l.abandon_channel("c1");
                        l.abandon_channel("c1");
                    },
                    DisposeReason::Abandoned,
                ),
            ];
            for (name, trigger, reason) in cases {
                let cap = if name == "evicted" { 1 } else { 8 };
                let mut l = with_resident(behaviours, cap);
                trigger(&mut l);
                let out = l.take_outbox();
                assert_eq!(disposed(&out), [reason], "{name}");
                let closed: Vec<(usize, String)> = releases(&out)
                    .into_iter()
                    .filter(|(_, session)| session == "sa")
                    .collect();
                if reason.worker_alive() {
                    assert_eq!(closed, [(0, "sa".to_string())], "{name}: released once");
                } else {
                    assert!(closed.is_empty(), "{name}: died with its worker");
                }
                assert!(l.resident(&a()).is_none(), "{name}");
            }
        }
    }

    #[test]
    fn a_session_forgotten_while_its_turn_runs_is_not_kept() {
        for behaviours in with(Behaviour::Residency) {
            // Rule: an operator's forget means the scope's live session is not continued — also
            // when it arrives while a turn runs on that session: the turn's answer stands, but its
            // session is released when it ends, not kept resident again (the release of the old
            // resident, deferred while the worker was busy, would close it under the new one).
            let mut l = with_resident(behaviours, 8);
            start(&mut l, &a(), 0, &["a2"], Some("sa"));
            l.forgotten(&a());
            let out = l.take_outbox();
            assert_eq!(disposed(&out), [DisposeReason::Forgotten]);
            assert_eq!(releases(&out), [(0, "sa".to_string())]);
            l.turn_end(&a(), replied_with("sa"), t(0));
            l.settled(&a(), None, t(0));
            let out = l.take_outbox();
            assert!(l.resident(&a()).is_none(), "kept again: {:?}", out.records);
            assert!(l.settling().is_empty());
            l.released(&a(), "sa");
            let plan = start(&mut l, &a(), 0, &["a3"], None);
            assert!(plan.fresh);
            assert_eq!(plan.reach, cold(ColdReason::Abandoned));
        }
    }

    #[test]
    fn eviction_takes_the_least_recently_used_and_spares_running_scopes() {
        for behaviours in with(Behaviour::Residency) {
            // Rule: beyond the bound the least recently used idle resident goes; a scope whose turn
            // runs is never evicted (the table stays over the bound until it ends).
            let mut l = with_resident(behaviours, 2);
            read(&mut l, &b(), None, 0);
            cold_turn(&mut l, &b(), 1, &["b1"], "sb");
            start(&mut l, &a(), 0, &["a2"], Some("sa"));
            reply(&mut l, &a(), "sa"); // a is now more recent than b
            read(&mut l, &c(), None, 0);
            cold_turn(&mut l, &c(), 2, &["c1"], "sc");
            let out = l.take_outbox();
            assert_eq!(disposed(&out), [DisposeReason::Evicted]);
            assert_eq!(releases(&out), [(1, "sb".to_string())]);
            assert_eq!(l.residents(), 2);

            // a runs (the least recently used now), b's new session arrives: c goes, a stays.
            start(&mut l, &a(), 0, &["a3"], Some("sa"));
            read(&mut l, &b(), None, 0);
            cold_turn(&mut l, &b(), 1, &["b2"], "sb2");
            let out = l.take_outbox();
            assert_eq!(releases(&out), [(2, "sc".to_string())]);
            assert!(l.resident(&a()).is_some(), "running: kept");
            // Only running scopes left to evict: over the bound until they end.
            read(&mut l, &c(), None, 0);
            start(&mut l, &b(), 1, &["b3"], Some("sb2"));
            cold_turn(&mut l, &c(), 2, &["c2"], "sc2");
            assert_eq!(l.residents(), 3);
            assert!(disposed(&l.take_outbox()).is_empty());
        }
    }

    #[test]
    fn steered_input_is_handed_back_unless_the_turn_absorbed_it() {
        for behaviours in with(Behaviour::Residency) {
            // Rule: input steered into a running turn is tracked until the turn absorbs it; a turn
            // that ends any other way hands it back to the front of the queue (never lost, never
            // twice). Queue mode steers nothing.
            let cases: Vec<(TurnOutcome, Vec<&str>)> = vec![
                (replied_with("s1"), vec!["a2", "a3"]),
                (
                    TurnOutcome::Requeued {
                        extra: vec!["a2".into()],
                    },
                    vec!["a3"],
                ),
                (
                    TurnOutcome::Requeued {
                        extra: vec!["a2".into(), "a3".into()],
                    },
                    vec![],
                ),
                (TurnOutcome::Requeued { extra: vec![] }, vec!["a2", "a3"]),
                (TurnOutcome::Failed { failure: None }, vec!["a2", "a3"]),
                (TurnOutcome::Cancelled, vec!["a2", "a3"]),
                (TurnOutcome::Rotated, vec!["a2", "a3"]),
                (TurnOutcome::WorkerLost, vec!["a2", "a3"]),
            ];
            for (outcome, back) in cases {
                let mut l = lifecycle(resident(behaviours, 8));
                l.admitted(&a(), &Msg::new("a0")); // not running: not steered
                read(&mut l, &a(), None, 0);
                start(&mut l, &a(), 0, &["a1"], None);
                l.opened(&a(), created("s1"), t(0));
                for id in ["a2", "a2", "a1", "a3"] {
                    l.admitted(&a(), &Msg::new(id));
                }
                let name = format!("{outcome:?}");
                let after = l.turn_end(&a(), outcome, t(0));
                assert_eq!(after.requeue_front, msgs(&back), "{name}");
            }

            let mut l = lifecycle(LifecycleConfig {
                steer: false,
                ..resident(behaviours, 8)
            });
            read(&mut l, &a(), None, 0);
            start(&mut l, &a(), 0, &["a1"], None);
            l.admitted(&a(), &Msg::new("a2"));
            let after = l.turn_end(&a(), TurnOutcome::Failed { failure: None }, t(0));
            assert!(
                after.requeue_front.is_empty(),
                "queue mode: a2 waits in the queue"
            );
        }
    }

    #[test]
    fn a_turn_run_again_after_a_steer_continues_hot_on_its_session() {
        for behaviours in with(Behaviour::Residency) {
            // Rule: a steered message merged into a running turn (cancel and run again) continues
            // on the turn's live session: it stays resident, so the re-run is placed on its worker
            // and goes hot — never warm or cold on another worker, which would leave a stale copy
            // behind on this one.
            let mut l = with_resident(behaviours, 8);
            read(&mut l, &b(), None, 0);
            start(&mut l, &b(), 1, &["b1"], None);
            l.opened(&b(), created("sb"), t(0));
            l.admitted(&b(), &Msg::new("b2"));
            let after = l.turn_end(
                &b(),
                TurnOutcome::Requeued {
                    extra: vec!["b2".into()],
                },
                t(0),
            );
            assert!(after.requeue_front.is_empty());
            assert_eq!(
                l.resident(&b()).map(|r| (r.slot, r.session_id.as_str())),
                Some((1, "sb"))
            );
            assert_eq!(
                place(&l, &[b()], 0),
                [Placed::RunChecked(b(), Target::Slot(1))]
            );
            read(&mut l, &b(), Some(created_record(behaviours, "sb")), 0);
            assert_eq!(place(&l, &[b()], 0), [Placed::Run(b(), Target::Slot(1))]);
            let plan = start(&mut l, &b(), 1, &["b1", "b2"], Some("sb"));
            assert_eq!(plan.hot_session(), Some("sb"));
            let out = l.take_outbox();
            assert!(releases(&out).is_empty(), "{:?}", out.commands);
            assert!(disposed(&out).is_empty());
        }
    }

    #[test]
    fn steered_input_is_handed_back_without_residents_too() {
        for behaviours in with(Behaviour::Residency) {
            // Rule: with `--max-resident-sessions 0` (upstream's routing) and steering on, input
            // steered into a turn that completed without it is still handed back, not lost: the
            // harness steers it (and keeps it pending in its cursor) whatever the bound.
            let mut l = lifecycle(resident(behaviours, 0));
            read(&mut l, &a(), None, 0);
            start(&mut l, &a(), 0, &["a1"], None);
            l.opened(&a(), created("s1"), t(0));
            l.admitted(&a(), &Msg::new("a2"));
            let after = l.turn_end(&a(), replied_with("s1"), t(0));
            assert_eq!(after.requeue_front, msgs(&["a2"]));
        }
    }

    #[test]
    fn a_session_whose_turn_was_cancelled_is_not_continued() {
        for behaviours in with(Behaviour::Residency) {
            // Rule: a cancelled turn's session is released; a cancel that lost the race to the
            // turn's completion keeps the answer but not the session.
            for (cancel_first, outcome) in
                [(false, TurnOutcome::Cancelled), (true, replied_with("s1"))]
            {
                let mut l = lifecycle(resident(behaviours, 8));
                read(&mut l, &a(), None, 0);
                start(&mut l, &a(), 1, &["a1"], None);
                l.opened(&a(), created("s1"), t(0));
                if cancel_first {
                    l.cancel_requested(&a());
                }
                l.take_outbox();
                l.turn_end(&a(), outcome, t(0));
                l.settled(&a(), None, t(0));
                let out = l.take_outbox();
                assert_eq!(releases(&out), [(1, "s1".to_string())], "{cancel_first}");
                assert!(l.resident(&a()).is_none());
            }
        }
    }
}
