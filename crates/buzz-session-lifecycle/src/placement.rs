//! Placement on workers: which scope runs now, and where.
//!
//! [`Lifecycle::place`] is a pure function of the lifecycle's state and the pool's slots: it
//! returns what should happen to each scope that has input waiting, and changes nothing. The
//! dispatcher (`dispatch.rs`) then acts on each answer and reports back.
//!
//! Scopes are served in the order the harness's queue lists them (oldest input first). A scope
//! waits while a turn of it runs, while it settles, while a restore retry is not yet due, while
//! one of its sessions is being released, and while its receipt is being read. A scope's receipt
//! is read before a turn that would reopen or replace its session, so the store is never read on
//! the event loop and a turn never holds a worker while it waits for the store.
//!
//! A turn that continues a live session (resident, or held by an idle worker) never waits for the
//! store: it starts at once, and the receipt is *checked* beside it ([`Placed::RunChecked`]).
//! The check is how an operator's `forget` (`buzz-receipts forget`, docs/STORE.md) reaches a
//! session this harness keeps live: when it finds the receipt gone, that turn keeps its answer,
//! the session is released after it and the thread's next turn opens a new one (see
//! [`Lifecycle::forgotten`]). A frozen store therefore costs a hot follow-up nothing; a forget
//! takes effect from the turn after the one that saw it. While the store is known to be down, or
//! a check of the scope is still in flight, no further check is asked for.

use crate::behaviours::Behaviour;
use crate::clock::Moment;
use crate::lifecycle::Lifecycle;
use crate::phase::Phase;
use crate::receipt_view::Freshness;
use crate::scope::{Input, Scope};

/// The state of one worker slot, as the pool reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotView {
    /// No worker (lazy pool, after an idle sleep, or a respawn that may start now).
    Empty,
    /// A worker is being spawned.
    Spawning,
    /// An idle worker.
    Idle,
    /// The worker is checked out for a turn.
    Busy,
    /// The worker died; the slot waits before respawning.
    Backoff,
}

/// What the driver knows of the receipt store's health when it places scopes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreHealth {
    /// It answers (or nothing says otherwise yet).
    Answering,
    /// Its last operation failed and none has succeeded since: a live session is continued
    /// without checking its receipt, rather than wait for a read that will not answer.
    Down,
}

/// Where a scope's turn should run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// Claim this idle worker.
    Slot(usize),
    /// Spawn a worker into this empty slot; the scope runs once it is up.
    Spawn(usize),
    /// Let the pool choose (upstream's routing: owner affinity, the busy-owner hold, any idle
    /// worker). Used without residency.
    Any,
}

/// A scope with input waiting in the harness's queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ready<K> {
    /// The scope.
    pub scope: K,
    /// Some idle worker holds a live session of the scope (upstream's routing will pick it): it
    /// runs at once, with its receipt checked beside the turn ([`Placed::RunChecked`]).
    pub held: bool,
}

/// What should happen to a scope now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placed<K> {
    /// Run its turn there.
    Run(K, Target),
    /// Read its receipt first; it is placed again once the read answered or timed out.
    Read(K),
    /// Run its turn there, continuing its live session, and check beside the turn that its
    /// receipt still exists (an operator may have forgotten it): the turn does not wait for the
    /// check. Never asked for while the store is down (the live session then goes on unchecked).
    RunChecked(K, Target),
    /// Its resident's worker is busy: wait for it (with residency).
    WaitForResident(K, usize),
    /// Dispose its resident first (it can no longer be continued); placed again afterwards
    /// (with residency).
    Dispose(K, crate::residents::DisposeReason),
}

impl<K: Scope, I: Input> Lifecycle<K, I> {
    /// Decides what happens now to each scope in `ready` (queue order), given the pool's slots
    /// and the store's health. Pure: the caller acts on the answers.
    pub fn place(
        &self,
        ready: &[Ready<K>],
        view: &[SlotView],
        store: StoreHealth,
        now: Moment,
    ) -> Vec<Placed<K>> {
        let mut taken = vec![false; view.len()];
        let mut spawning = view.iter().filter(|v| **v == SlotView::Spawning).count();
        let mut out = Vec::new();
        for Ready { scope, held } in ready {
            if !self.may_start(scope, now) {
                continue;
            }
            if self.has(Behaviour::Residency)
                && let Some(placed) = self.place_resident(scope, view, store, &mut taken)
            {
                out.push(placed);
                continue;
            }
            if self.needs_read(scope) && !(*held && self.continues_held(scope)) {
                out.push(Placed::Read(scope.clone()));
                continue;
            }
            let check = *held && self.needs_check(scope, store);
            let run = |target| match check {
                true => Placed::RunChecked(scope.clone(), target),
                false => Placed::Run(scope.clone(), target),
            };
            if !self.residency_enabled() {
                out.push(run(Target::Any));
                continue;
            }
            let idle = |i: usize, taken: &[bool]| view[i] == SlotView::Idle && !taken[i];
            let free = (0..view.len()).find(|&i| idle(i, &taken) && !self.hosts_resident(i));
            if let Some(i) = free {
                taken[i] = true;
                out.push(run(Target::Slot(i)));
            } else if spawning > 0 {
                // A worker on its way will serve this scope.
                spawning -= 1;
            } else if let Some(j) =
                (0..view.len()).find(|&j| view[j] == SlotView::Empty && !taken[j])
            {
                taken[j] = true;
                out.push(run(Target::Spawn(j)));
            } else if let Some(i) = (0..view.len()).find(|&i| idle(i, &taken)) {
                // Residency counts against capacity, but a resident never blocks the pool:
                // when nothing else is free, another scope takes a resident's worker.
                taken[i] = true;
                out.push(run(Target::Slot(i)));
            }
        }
        out
    }

    /// Whether `scope` may start a turn now (phases that wait, releases in flight).
    fn may_start(&self, scope: &K, now: Moment) -> bool {
        let Some(state) = self.scopes.get(scope) else {
            return true;
        };
        if !state.releasing.is_empty() {
            return false;
        }
        // A read blocks the start it is for; a check never blocks a start.
        if matches!(state.receipt.freshness, Freshness::Reading { .. }) {
            return false;
        }
        match state.phase() {
            Phase::Idle => true,
            Phase::WaitingForResident { .. } => true,
            Phase::RetryWait { streak } => streak.next_at <= now,
            Phase::Running(_) | Phase::Settling(_) => false,
        }
    }

    /// Whether a live session an idle worker holds for `scope` would be continued at start: one
    /// opened under the current configuration, or one the lifecycle never saw opened (upstream
    /// kept it). A copy under another configuration is discarded, and the receipt decides.
    fn continues_held(&self, scope: &K) -> bool {
        self.scopes
            .get(scope)
            .and_then(|s| s.known.as_ref())
            .is_none_or(|known| known.fingerprint == self.session.fingerprint)
    }

    pub(crate) fn residency_enabled(&self) -> bool {
        self.has(Behaviour::Residency) && self.residents.enabled()
    }

    fn hosts_resident(&self, slot: usize) -> bool {
        self.has(Behaviour::Residency) && self.residents.hosts(slot)
    }

    // ----- what the dispatcher reports back ------------------------------------------------

    /// When the read or check of `scope`'s receipt in flight started.
    pub fn read_started(&self, scope: &K) -> Option<Moment> {
        match self.scopes.get(scope)?.receipt.freshness {
            Freshness::Reading { since } | Freshness::Checking { since } => Some(since),
            _ => None,
        }
    }

    /// `scope`'s receipt is gone: an operator forgot it (the store refused a write decided before
    /// that, or a read found no receipt for a session this harness opened). The scope starts
    /// over: its resident is disposed (and released), a turn running now keeps its answer but its
    /// session is released after it and never committed, and the next session is new (asking
    /// for a fresh conversation, as after `!rotate`). Nothing is written: the forget already
    /// removed the receipt, and the next session's receipt is written as new.
    pub fn forgotten(&mut self, scope: &K) {
        if self.has(Behaviour::Residency) {
            self.dispose(scope, crate::residents::DisposeReason::Forgotten);
        }
        // A turn running now continues the forgotten session or opens one under the old receipt:
        // its answer stands, but its session is released, never kept.
        self.mark_abandoned(scope);
        let state = self.state(scope);
        state.receipt.belief = crate::receipt_view::Belief::Absent;
        state.receipt.freshness = Freshness::Stale;
        self.record(crate::telemetry::Record::ReceiptForgotten {
            scope: scope.label(),
        });
    }

    /// A receipt write was refused: the store holds something else than the lifecycle believed
    /// (`stored`: the session it names). The lifecycle no longer knows what is stored, so the
    /// scope's next start reads it again.
    pub fn conflict(&mut self, scope: &K, op: crate::decision::OpKind, stored: Option<String>) {
        let state = self.state(scope);
        state.receipt.belief = crate::receipt_view::Belief::Unknown;
        state.receipt.freshness = Freshness::Stale;
        self.record(crate::telemetry::Record::ReceiptConflict {
            scope: scope.label(),
            op,
            stored_session_id: stored,
        });
    }

    /// The read or check of `scope`'s receipt answered: `Ok(record)`, or `Err` (the store could
    /// not be asked, or did not answer within the bound, after `waited`). A read's answer is for
    /// the start that waits for it; a check's answer only tells whether the receipt is gone, and
    /// the scope's next start checks again.
    pub fn read_done(
        &mut self,
        scope: &K,
        result: Result<Option<buzz_session_store::SessionRecord>, std::time::Duration>,
    ) {
        let resume = self.config.resume;
        let state = self.state(scope);
        let checking = match state.receipt.freshness {
            Freshness::Reading { .. } => false,
            Freshness::Checking { .. } => true,
            Freshness::Stale | Freshness::Fresh | Freshness::Unreadable => {
                // A late answer to a read that already timed out, after the start it was for has
                // been decided. The store answers a scope's read before the writes queued after it,
                // so the answer may predate what the lifecycle did since (its own receipt writes, a
                // session it abandoned): it fills a belief only where the lifecycle has none. A
                // belief it keeps is read again before the next start that needs it.
                if let (Ok(record), crate::receipt_view::Belief::Unknown) =
                    (result, &state.receipt.belief)
                {
                    state.receipt.belief = crate::receipt_view::Belief::from(record);
                }
                return;
            }
        };
        match result {
            Ok(record) => {
                // No receipt for a session this harness opened (and did not give up itself):
                // someone removed it — an operator's forget, or another harness.
                let gone = record.is_none() && resume && state.known.is_some();
                state.receipt.belief = crate::receipt_view::Belief::from(record);
                state.receipt.freshness = match checking {
                    true => Freshness::Stale,
                    false => Freshness::Fresh,
                };
                state.told_unreadable = None;
                if gone {
                    self.forgotten(scope);
                }
            }
            Err(waited) => {
                // A check that did not answer decides nothing: the turn it was beside went on,
                // and the next start checks again (unless the store is known down by then).
                state.receipt.freshness = match checking {
                    true => Freshness::Stale,
                    false => Freshness::Unreadable,
                };
                self.record(crate::telemetry::Record::ReceiptUnreadable {
                    scope: scope.label(),
                    waited_ms: u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
                });
            }
        }
    }

    /// Reads in flight that started at or before `deadline`.
    pub fn reads_started_by(&self, deadline: Moment) -> Vec<(K, Moment)> {
        self.scopes
            .iter()
            .filter_map(|(k, s)| match s.receipt.freshness {
                Freshness::Reading { since } | Freshness::Checking { since }
                    if since <= deadline =>
                {
                    Some((k.clone(), since))
                }
                _ => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use buzz_session_store::SessionRecord;

    use super::*;
    use crate::behaviours::Behaviours;
    use crate::decision::{Command, StoreOp};
    use crate::lifecycle::LifecycleConfig;
    use crate::mailbox::Opened;
    use crate::outcome::TurnOutcome;
    use crate::reach::{ColdReason, Plan, Reach};
    use crate::receipt_view::Expect;
    use crate::telemetry::Record;
    use crate::test_values::{Msg, TestScope, none_and_all};

    type Life = Lifecycle<TestScope, Msg>;

    fn thread() -> TestScope {
        TestScope::thread("c1", "root")
    }

    fn place(life: &Life, held: bool, store: StoreHealth) -> Vec<Placed<TestScope>> {
        let ready = [Ready {
            scope: thread(),
            held,
        }];
        life.place(&ready, &[SlotView::Idle], store, Moment(0))
    }

    /// Starts a turn of the thread on worker 0, which holds `live` for it; a turn that does not
    /// continue a session opens `opens`.
    fn start(life: &mut Life, live: Option<&str>, opens: &str) -> (Plan, String) {
        let inputs = vec![Msg::new("m")];
        let live = live.map(str::to_string);
        let plan = life.start(&thread(), 0, inputs, live, None, Moment(1));
        let session = match plan.hot_session() {
            Some(session) => session.to_string(),
            None => {
                let created = Opened::Created {
                    session_id: opens.into(),
                    model: None,
                    permission_mode: None,
                };
                life.opened(&thread(), created, Moment(2));
                opens.to_string()
            }
        };
        (plan, session)
    }

    fn answered(life: &mut Life, session: &str) {
        let replied = TurnOutcome::Replied {
            session_id: session.into(),
            rotated: false,
        };
        life.turn_end(&thread(), replied, Moment(3));
    }

    /// The thread's first turn opened `s1` and answered; its session stays live on worker 0.
    fn answered_once(behaviours: Behaviours) -> Life {
        let mut life = Lifecycle::new(LifecycleConfig::with_behaviours(behaviours));
        life.admitted(&thread(), &Msg::new("root"));
        let (_, session) = start(&mut life, None, "s1");
        answered(&mut life, &session);
        life.settled(&thread(), None, Moment(4));
        life.take_outbox();
        life
    }

    fn forgotten_recorded(records: &[Record]) -> bool {
        records
            .iter()
            .any(|r| matches!(r, Record::ReceiptForgotten { .. }))
    }

    #[test]
    fn a_live_session_is_continued_at_once_and_its_receipt_checked_beside_the_turn() {
        for behaviours in none_and_all() {
            let mut life = answered_once(behaviours);
            let placed = place(&life, true, StoreHealth::Answering);
            assert!(
                matches!(placed.as_slice(), [Placed::RunChecked(..)]),
                "a live session is continued without waiting for its receipt: {placed:?}"
            );
            let (plan, _) = start(&mut life, Some("s1"), "unused");
            assert_eq!(plan.hot_session(), Some("s1"));
            life.check_receipt(&thread(), Moment(1));
            let out = life.take_outbox();
            assert!(
                out.store
                    .iter()
                    .any(|op| matches!(op, StoreOp::Read { scope } if *scope == thread())),
                "the check reads the receipt: {:?}",
                out.store
            );
            // The check has not answered (a frozen store) when the turn ends and the next message
            // comes: that one is continued at once too, and asks for no second check.
            answered(&mut life, "s1");
            life.settled(&thread(), None, Moment(4));
            assert!(
                life.take_outbox()
                    .store
                    .iter()
                    .all(|op| !matches!(op, StoreOp::Read { .. }))
            );
            let placed = place(&life, true, StoreHealth::Answering);
            assert!(
                matches!(placed.as_slice(), [Placed::Run(..)]),
                "a check in flight neither blocks a start nor is asked for again: {placed:?}"
            );
            let (plan, _) = start(&mut life, Some("s1"), "unused");
            assert_eq!(plan.hot_session(), Some("s1"));
        }
    }

    #[test]
    fn a_check_that_finds_the_receipt_gone_ends_the_session_after_its_turn() {
        for behaviours in none_and_all() {
            let mut life = answered_once(behaviours);
            let (plan, _) = start(&mut life, Some("s1"), "unused");
            assert_eq!(plan.hot_session(), Some("s1"));
            life.check_receipt(&thread(), Moment(1));
            life.take_outbox();
            // An operator forgot the thread; the check beside its turn finds no receipt.
            life.read_done(&thread(), Ok(None));
            let seen = life.take_outbox();
            assert!(forgotten_recorded(&seen.records), "{:?}", seen.records);
            // The turn keeps its answer; its session is never committed and is released after it.
            answered(&mut life, "s1");
            life.settled(&thread(), None, Moment(4));
            let out = life.take_outbox();
            assert!(
                out.store
                    .iter()
                    .all(|op| !matches!(op, StoreOp::Put { .. } | StoreOp::Commit { .. })),
                "nothing brings the forgotten receipt back: {:?}",
                out.store
            );
            // Released once: as a resident when the check answers, else after the turn.
            let release = Command::Release {
                scope: thread(),
                slot: 0,
                session_id: "s1".into(),
            };
            let commands: Vec<_> = seen.commands.iter().chain(&out.commands).collect();
            assert_eq!(commands, [&release]);
            life.released(&thread(), "s1");
            assert!(
                matches!(
                    place(&life, true, StoreHealth::Answering).as_slice(),
                    [Placed::Run(..)]
                ),
                "the next session is new: nothing left to read or check"
            );
            let (plan, _) = start(&mut life, None, "s2");
            assert_eq!(
                plan.reach,
                Reach::Cold {
                    reason: ColdReason::Abandoned
                }
            );
            assert!(plan.fresh, "a gateway is asked for a fresh conversation");
            let out = life.take_outbox();
            let put = out.store.iter().find_map(|op| match op {
                StoreOp::Put { record, expect, .. } => Some((record.session_id.clone(), expect)),
                _ => None,
            });
            assert_eq!(
                put,
                Some(("s2".to_string(), &Expect::Absent)),
                "the new session's receipt is written as new"
            );
        }
    }

    #[test]
    fn a_check_that_does_not_answer_decides_nothing_and_the_next_start_checks_again() {
        for behaviours in none_and_all() {
            let mut life = answered_once(behaviours);
            let (plan, _) = start(&mut life, Some("s1"), "unused");
            assert_eq!(plan.hot_session(), Some("s1"));
            life.check_receipt(&thread(), Moment(1));
            life.read_done(&thread(), Err(std::time::Duration::from_secs(10)));
            answered(&mut life, "s1");
            life.settled(&thread(), None, Moment(4));
            let out = life.take_outbox();
            assert!(!forgotten_recorded(&out.records), "{:?}", out.records);
            assert!(
                out.commands
                    .iter()
                    .all(|c| !matches!(c, Command::Notice(..))),
                "a hot turn tells the thread nothing: {:?}",
                out.commands
            );
            assert!(matches!(
                place(&life, true, StoreHealth::Answering).as_slice(),
                [Placed::RunChecked(..)]
            ));
            assert!(
                matches!(
                    place(&life, true, StoreHealth::Down).as_slice(),
                    [Placed::Run(..)]
                ),
                "no check while the store is known down"
            );
        }
    }

    #[test]
    fn a_live_session_whose_receipt_is_there_is_continued_hot() {
        for behaviours in none_and_all() {
            let mut life = answered_once(behaviours);
            life.read_receipt(&thread(), Moment(5));
            life.read_done(&thread(), Ok(Some(SessionRecord::new("s1"))));
            assert!(matches!(
                place(&life, true, StoreHealth::Answering).as_slice(),
                [Placed::Run(..)]
            ));
            let (plan, _) = start(&mut life, Some("s1"), "unused");
            assert_eq!(plan.hot_session(), Some("s1"));
            assert!(!forgotten_recorded(&life.take_outbox().records));
        }
    }

    #[test]
    fn a_late_empty_answer_to_a_timed_out_check_drops_nothing() {
        for behaviours in none_and_all() {
            let mut life = answered_once(behaviours);
            life.read_receipt(&thread(), Moment(5));
            life.read_done(&thread(), Err(std::time::Duration::from_secs(10)));
            let (plan, _) = start(&mut life, Some("s1"), "unused");
            assert_eq!(
                plan.hot_session(),
                Some("s1"),
                "unreadable: the live session goes on"
            );
            // The read's answer arrives after the start it was for: it cannot say anything about
            // writes the turn decided since.
            life.read_done(&thread(), Ok(None));
            assert!(!forgotten_recorded(&life.take_outbox().records));
        }
    }

    /// A read that timed out answers after the thread moved on to a new session: the answer
    /// names the session the thread left, and must not bring it back when the next read cannot
    /// be answered (a property-test case: the late answer replaced the belief, and a restore
    /// reopened the abandoned session).
    #[test]
    fn a_late_answer_never_brings_back_a_session_the_thread_left() {
        for behaviours in none_and_all() {
            let mut life = answered_once(behaviours);
            life.read_receipt(&thread(), Moment(5));
            life.read_done(&thread(), Err(std::time::Duration::from_secs(10)));
            // The thread leaves s1 (an operator's forget), and its next turn answers from s2, whose
            // receipt the lifecycle writes.
            life.forgotten(&thread());
            life.take_outbox();
            if behaviours.has(Behaviour::Residency) {
                life.released(&thread(), "s1");
            }
            let (plan, session) = start(&mut life, None, "s2");
            assert_eq!(plan.hot_session(), None);
            answered(&mut life, &session);
            life.settled(&thread(), None, Moment(6));
            life.take_outbox();
            // The timed-out read answers now, with what the store held before.
            life.read_done(&thread(), Ok(Some(SessionRecord::new("s1"))));
            // The next start cannot read the store: it decides from what the lifecycle believes.
            life.read_receipt(&thread(), Moment(7));
            life.read_done(&thread(), Err(std::time::Duration::from_secs(10)));
            let (plan, _) = start(&mut life, None, "s3");
            let reopened = match &plan.reach {
                Reach::Warm { record, .. } => Some(record.session_id.clone()),
                Reach::Hot { session_id } => Some(session_id.clone()),
                Reach::Cold { .. } => None,
            };
            assert_ne!(
                reopened.as_deref(),
                Some("s1"),
                "the thread's abandoned session came back: {plan:?}"
            );
        }
    }

    #[test]
    fn while_the_store_is_down_a_live_session_is_continued_unchecked() {
        for behaviours in none_and_all() {
            let mut life = answered_once(behaviours);
            assert!(matches!(
                place(&life, true, StoreHealth::Down).as_slice(),
                [Placed::Run(..)]
            ));
            let (plan, _) = start(&mut life, Some("s1"), "unused");
            assert_eq!(plan.hot_session(), Some("s1"));
        }
    }

    #[test]
    fn without_resume_nothing_is_checked() {
        for behaviours in none_and_all() {
            let config = LifecycleConfig {
                resume: false,
                ..LifecycleConfig::with_behaviours(behaviours)
            };
            let mut life = Lifecycle::new(config);
            let (_, session) = start(&mut life, None, "s1");
            answered(&mut life, &session);
            life.settled(&thread(), None, Moment(4));
            assert!(matches!(
                place(&life, true, StoreHealth::Answering).as_slice(),
                [Placed::Run(..)]
            ));
        }
    }

    #[test]
    fn a_forget_seen_during_a_turn_keeps_its_answer_and_releases_its_session_after_it() {
        for behaviours in none_and_all() {
            let mut life = answered_once(behaviours);
            life.read_receipt(&thread(), Moment(5));
            life.read_done(&thread(), Ok(Some(SessionRecord::new("s1"))));
            let (plan, session) = start(&mut life, Some("s1"), "unused");
            assert_eq!(plan.hot_session(), Some("s1"));
            // A write the turn queued was refused: an operator forgot the receipt meanwhile.
            life.forgotten(&thread());
            let out = life.take_outbox();
            assert!(forgotten_recorded(&out.records));
            if behaviours.has(Behaviour::Residency) {
                // The running resident's worker is busy: its release waits for the turn's end.
                assert_eq!(out.commands.len(), 1, "{:?}", out.commands);
                life.released(&thread(), "s1");
            }
            answered(&mut life, &session);
            assert!(life.settling().is_empty(), "nothing of it is committed");
            let out = life.take_outbox();
            if !behaviours.has(Behaviour::Residency) {
                let release = Command::Release {
                    scope: thread(),
                    slot: 0,
                    session_id: "s1".into(),
                };
                assert_eq!(out.commands, [release], "released after its answer");
                life.released(&thread(), "s1");
            }
            assert!(out.store.is_empty(), "{:?}", out.store);
            let (plan, _) = start(&mut life, None, "s2");
            assert_eq!(
                plan.reach,
                Reach::Cold {
                    reason: ColdReason::Abandoned
                }
            );
        }
    }
}
