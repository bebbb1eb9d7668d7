//! Residency (patch `resident-background-controllers`, feature `residency`): finished sessions
//! stay live on their workers, and follow-ups continue on them hot.
//!
//! After a successful turn the scope's live session stays *resident* on its worker: the next
//! follow-up continues on it with no `session/load` and no `session/new`. If that worker is busy
//! (another scope's turn), the follow-up waits for it instead of forking onto a cold session
//! elsewhere; other scopes take a worker that hosts no resident, or spawn one, before they take
//! a resident's. A resident is a description (worker slot, session id, configuration
//! fingerprint), not an owner; whoever disposes one must free the session.
//!
//! Rules (the invariants the tests pin):
//! * **At most one resident per scope**; keeping a new one replaces (and disposes) the old.
//! * **Bounded**: more than `cap` residents evicts the least recently used idle ones.
//! * **Disposal happens exactly once**: the entry is removed before it is returned, so a second
//!   disposal of the same resident finds nothing.
//! * Mid-turn input steered into a turn is tracked until the turn absorbs it; a turn that ends
//!   without it (it completed first) hands it back to the queue, never loses it.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::lifecycle::Lifecycle;
use crate::outcome::TurnOutcome;
use crate::phase::{Phase, Running};
use crate::placement::{Placed, SlotView, Target};
use crate::scope::{Input, Scope};
use crate::telemetry::Record;

/// A live session kept on a worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resident {
    /// The worker slot holding the session.
    pub slot: usize,
    /// The ACP session id.
    pub session_id: String,
    /// The configuration the session was opened under.
    pub fingerprint: u64,
}

/// Why a resident was disposed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DisposeReason {
    /// A turn on it failed.
    TurnFailed,
    /// The owner cancelled its turn.
    Cancelled,
    /// A cancel arrived but the turn completed first: the answer stands, but nothing continues a
    /// session the owner stopped.
    CancelLostRace,
    /// `!rotate`, a model switch, removal from the channel, or a rotation after a limit.
    Abandoned,
    /// The configuration a new session would get changed (e.g. the model).
    ConfigChanged,
    /// More residents than the bound: the least recently used one goes.
    Evicted,
    /// Replaced by another session of the same scope.
    Replaced,
    /// Its worker process ended (or no longer holds the session).
    AgentExit,
    /// The idle pool sleep tore the workers down.
    IdleSleep,
    /// The harness is shutting down.
    Shutdown,
    /// An operator forgot the scope's receipt.
    Forgotten,
}

impl DisposeReason {
    /// Whether the session is still live on a running worker and must be released. A dead or
    /// sleeping worker's sessions die with its process.
    pub fn worker_alive(self) -> bool {
        !matches!(self, DisposeReason::AgentExit | DisposeReason::IdleSleep)
    }
}

#[derive(Debug)]
struct Entry {
    resident: Resident,
    used: u64,
}

/// The resident table.
#[derive(Debug)]
pub(crate) struct Residents<K> {
    cap: usize,
    entries: BTreeMap<K, Entry>,
    clock: u64,
}

impl<K: Ord + Clone> Residents<K> {
    pub(crate) fn new(cap: usize) -> Self {
        Residents {
            cap,
            entries: BTreeMap::new(),
            clock: 0,
        }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.cap > 0
    }

    pub(crate) fn get(&self, scope: &K) -> Option<&Resident> {
        self.entries.get(scope).map(|e| &e.resident)
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether worker `slot` holds any resident.
    pub(crate) fn hosts(&self, slot: usize) -> bool {
        self.entries.values().any(|e| e.resident.slot == slot)
    }

    /// Marks `scope`'s resident as just used (LRU order).
    pub(crate) fn touch(&mut self, scope: &K) {
        self.clock += 1;
        if let Some(e) = self.entries.get_mut(scope) {
            e.used = self.clock;
        }
    }

    /// Keeps a live session for `scope`. Returns whether this is a new resident (not the same
    /// session kept again) and what left the table: the scope's previous resident if it was
    /// another session, and the least recently used residents beyond the cap (never `scope`
    /// itself, and never a scope in `busy`).
    pub(crate) fn keep(
        &mut self,
        scope: &K,
        resident: Resident,
        busy: impl Fn(&K) -> bool,
    ) -> (bool, Vec<(K, Resident, DisposeReason)>) {
        let mut gone = Vec::new();
        if self.cap == 0 {
            return (false, gone);
        }
        self.clock += 1;
        let same = self.entries.get(scope).is_some_and(|e| {
            e.resident.slot == resident.slot && e.resident.session_id == resident.session_id
        });
        let entry = Entry {
            resident,
            used: self.clock,
        };
        if let Some(old) = self.entries.insert(scope.clone(), entry)
            && !same
        {
            gone.push((scope.clone(), old.resident, DisposeReason::Replaced));
        }
        while self.entries.len() > self.cap {
            let victim = self
                .entries
                .iter()
                .filter(|(k, _)| *k != scope && !busy(k))
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| k.clone());
            let Some(victim) = victim else { break };
            if let Some(e) = self.entries.remove(&victim) {
                gone.push((victim, e.resident, DisposeReason::Evicted));
            }
        }
        (!same, gone)
    }

    /// Disposes `scope`'s resident, whichever it is.
    pub(crate) fn dispose(&mut self, scope: &K) -> Option<Resident> {
        self.entries.remove(scope).map(|e| e.resident)
    }

    /// Disposes every resident for which `pick` holds.
    pub(crate) fn dispose_where(
        &mut self,
        pick: impl Fn(&K, &Resident) -> bool,
    ) -> Vec<(K, Resident)> {
        let scopes: Vec<K> = self
            .entries
            .iter()
            .filter(|(k, e)| pick(k, &e.resident))
            .map(|(k, _)| k.clone())
            .collect();
        scopes
            .into_iter()
            .filter_map(|k| self.dispose(&k).map(|r| (k, r)))
            .collect()
    }
}

impl<K: Scope, I: Input> Lifecycle<K, I> {
    // ----- placement -----------------------------------------------------------------------

    /// Placement of a scope that has a resident: `None` when it has none (general placement
    /// applies); `Some(None)` when it must simply wait this round.
    pub(crate) fn place_resident(
        &self,
        scope: &K,
        view: &[SlotView],
        taken: &mut [bool],
    ) -> Option<Option<Placed<K>>> {
        let resident = self.residents.get(scope)?;
        if resident.fingerprint != self.session.fingerprint {
            return Some(Some(Placed::Dispose(
                scope.clone(),
                DisposeReason::ConfigChanged,
            )));
        }
        let slot = resident.slot;
        let placed = match view.get(slot) {
            Some(SlotView::Idle) if !taken[slot] => {
                taken[slot] = true;
                Placed::Run(scope.clone(), Target::Slot(slot))
            }
            Some(SlotView::Idle | SlotView::Busy) => Placed::WaitForResident(scope.clone(), slot),
            // The worker is gone: so is the session.
            _ => Placed::Dispose(scope.clone(), DisposeReason::AgentExit),
        };
        Some(Some(placed))
    }

    /// `scope` waits for its resident's busy worker `slot` (recorded once per wait).
    pub fn waiting_for_resident(&mut self, scope: &K, slot: usize) {
        let state = self.state(scope);
        if matches!(state.phase, Phase::WaitingForResident { slot: waited } if waited == slot) {
            return;
        }
        state.phase = Phase::WaitingForResident { slot };
        self.record(Record::CapacityWait {
            scope: scope.label(),
            slot,
        });
    }

    /// Disposes `scope`'s resident for `reason` (placement found it can no longer continue).
    pub fn dispose_resident(&mut self, scope: &K, reason: DisposeReason) {
        self.dispose(scope, reason);
    }

    /// A turn of `scope` starts on worker `slot`, whose live session of the scope is `live`: a
    /// resident elsewhere is replaced, the one here is touched.
    pub(crate) fn leaving_resident(&mut self, scope: &K, slot: usize, live: Option<&str>) {
        let Some(resident) = self.residents.get(scope).cloned() else {
            return;
        };
        if resident.slot == slot && live == Some(resident.session_id.as_str()) {
            self.residents.touch(scope);
        } else {
            self.dispose(scope, DisposeReason::Replaced);
        }
    }

    // ----- admission and turn ends ---------------------------------------------------------

    /// Mid-turn input for a running scope, steered into the turn by the harness
    /// (`--multiple-event-handling steer`): tracked until the turn absorbs it.
    pub(crate) fn steered_in(&mut self, scope: &K, input: &I) {
        // Tracked whatever the bound: the harness steers (and keeps the input pending) with
        // `--max-resident-sessions 0` too; only routing goes back to upstream's there.
        if !self.config.steer {
            return;
        }
        if let Some(running) = self.scopes.get_mut(scope).and_then(|s| s.running_mut())
            && !running.steered.iter().any(|i| i.id() == input.id())
            && !running.inputs.iter().any(|i| i.id() == input.id())
        {
            running.steered.push(input.clone());
        }
    }

    /// The owner asked to cancel `scope`'s running turn: if the turn completes anyway, its
    /// session is not continued.
    pub fn cancel_requested(&mut self, scope: &K) {
        if let Some(running) = self.scopes.get_mut(scope).and_then(|s| s.running_mut()) {
            running.cancel_requested = true;
        }
    }

    /// Steered input the ended turn did not absorb.
    pub(crate) fn unabsorbed(&self, outcome: &TurnOutcome, running: &Running<I>) -> Vec<I> {
        let absorbed: &[String] = match outcome {
            TurnOutcome::Requeued { extra } => extra,
            _ => &[],
        };
        running
            .steered
            .iter()
            .filter(|i| !absorbed.iter().any(|id| id == i.id()))
            .cloned()
            .collect()
    }

    /// After a successful turn: keep the session resident, unless the owner cancelled the turn
    /// or the configuration changed while it ran.
    pub(crate) fn after_success(&mut self, scope: &K, running: &Running<I>, session_id: &str) {
        if !self.residents.enabled() {
            return;
        }
        let slot = running.slot;
        if running.cancel_requested {
            self.drop_live(scope, slot, session_id, DisposeReason::CancelLostRace);
        } else if running.config.fingerprint != self.session.fingerprint {
            self.drop_live(scope, slot, session_id, DisposeReason::ConfigChanged);
        } else {
            let resident = Resident {
                slot,
                session_id: session_id.to_string(),
                fingerprint: running.config.fingerprint,
            };
            self.keep(scope, resident);
        }
    }

    // ----- disposal ------------------------------------------------------------------------

    /// Worker `slot`'s process ended: its sessions died with it (receipts stay).
    pub fn worker_lost(&mut self, slot: usize) {
        self.dispose_all(|r| r.slot == slot, DisposeReason::AgentExit);
    }

    /// The idle pool sleep tore every worker down.
    pub fn pool_slept(&mut self) {
        self.dispose_all(|_| true, DisposeReason::IdleSleep);
    }

    /// The harness is stopping: every resident is released.
    pub fn shutdown(&mut self) {
        self.dispose_all(|_| true, DisposeReason::Shutdown);
    }

    /// Number of residents.
    pub fn residents(&self) -> usize {
        self.residents.len()
    }

    /// `scope`'s resident.
    pub fn resident(&self, scope: &K) -> Option<&Resident> {
        self.residents.get(scope)
    }

    pub(crate) fn dispose_channel(&mut self, channel: &str) {
        for (scope, resident) in self.residents.dispose_where(|k, _| k.channel() == channel) {
            self.disposed(&scope, resident, DisposeReason::Abandoned);
        }
    }

    fn dispose_all(&mut self, pick: impl Fn(&Resident) -> bool, reason: DisposeReason) {
        for (scope, resident) in self.residents.dispose_where(|_, r| pick(r)) {
            self.disposed(&scope, resident, reason);
        }
    }

    pub(crate) fn dispose(&mut self, scope: &K, reason: DisposeReason) {
        if let Some(resident) = self.residents.dispose(scope) {
            self.disposed(scope, resident, reason);
        }
    }

    fn disposed(&mut self, scope: &K, resident: Resident, reason: DisposeReason) {
        self.record(Record::ResidentDisposed {
            scope: scope.label(),
            slot: resident.slot,
            session_id: resident.session_id.clone(),
            reason,
        });
        if reason.worker_alive() {
            self.release(scope, resident.slot, &resident.session_id);
        }
        if let Some(state) = self.scopes.get_mut(scope)
            && let Phase::WaitingForResident { .. } = state.phase
        {
            state.phase = Phase::Idle;
        }
    }

    /// A live session that is not (or no longer) kept: dispose its resident, or release it.
    pub(crate) fn drop_live(
        &mut self,
        scope: &K,
        slot: usize,
        session_id: &str,
        reason: DisposeReason,
    ) {
        let resident = self.residents.get(scope).cloned();
        match resident {
            Some(r) if r.session_id == session_id => self.dispose(scope, reason),
            _ if reason.worker_alive() => self.release(scope, slot, session_id),
            _ => {}
        }
    }

    fn keep(&mut self, scope: &K, resident: Resident) {
        let scopes = &self.scopes;
        let busy = |k: &K| scopes.get(k).is_some_and(|s| s.running().is_some());
        let slot = resident.slot;
        let session_id = resident.session_id.clone();
        let (new, gone) = self.residents.keep(scope, resident, busy);
        for (other, resident, reason) in gone {
            self.disposed(&other, resident, reason);
        }
        if new {
            self.record(Record::ResidentKept {
                scope: scope.label(),
                slot,
                session_id,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn never(_: &&'static str) -> bool {
        false
    }

    fn r(slot: usize, session: &str, fingerprint: u64) -> Resident {
        Resident {
            slot,
            session_id: session.into(),
            fingerprint,
        }
    }

    #[test]
    fn keeping_the_same_session_is_a_touch_and_another_replaces_it_once() {
        let mut t = Residents::new(4);
        assert_eq!(t.keep(&"a", r(0, "s1", 7), never), (true, vec![]));
        assert_eq!(t.keep(&"a", r(0, "s1", 8), never), (false, vec![]));
        assert_eq!(t.get(&"a").unwrap().fingerprint, 8);
        let (new, gone) = t.keep(&"a", r(1, "s2", 7), never);
        assert!(new);
        assert_eq!(gone, vec![("a", r(0, "s1", 8), DisposeReason::Replaced)]);
        assert_eq!(t.dispose(&"a").unwrap().session_id, "s2");
        assert!(t.dispose(&"a").is_none(), "disposal happens once");
    }

    #[test]
    fn eviction_takes_the_least_recently_used_idle_resident() {
        let mut t = Residents::new(2);
        t.keep(&"a", r(0, "sa", 1), never);
        t.keep(&"b", r(1, "sb", 1), never);
        t.touch(&"a");
        let (_, gone) = t.keep(&"c", r(2, "sc", 1), never);
        assert_eq!(gone.len(), 1);
        assert_eq!((gone[0].0, gone[0].2), ("b", DisposeReason::Evicted));
        // A busy scope is never evicted, even when it is the oldest.
        let (_, gone) = t.keep(&"d", r(3, "sd", 1), |k| *k == "a");
        assert_eq!(gone[0].0, "c");
        assert_eq!(t.len(), 2);
        assert!(t.hosts(0) && t.hosts(3) && !t.hosts(2));
    }

    #[test]
    fn zero_cap_keeps_nothing() {
        let mut t = Residents::new(0);
        assert!(!t.enabled());
        assert_eq!(t.keep(&"a", r(0, "s", 1), never), (false, vec![]));
        assert!(t.get(&"a").is_none());
    }

    #[test]
    fn dispose_where_selects_by_predicate_and_reasons_say_whether_to_release() {
        let mut t = Residents::new(8);
        t.keep(&"a", r(0, "sa", 1), never);
        t.keep(&"b", r(1, "sb", 1), never);
        t.keep(&"c", r(0, "sc", 1), never);
        let mut gone: Vec<_> = t
            .dispose_where(|_, r| r.slot == 0)
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        gone.sort();
        assert_eq!(gone, ["a", "c"]);
        assert!(t.get(&"b").is_some());
        assert!(DisposeReason::Evicted.worker_alive());
        assert!(!DisposeReason::AgentExit.worker_alive());
        assert!(!DisposeReason::IdleSleep.worker_alive());
    }
}
