//! Residency (patch `resident-background-controllers`, behaviour `Residency`): finished sessions
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

use crate::lifecycle::Lifecycle;
use crate::outcome::TurnOutcome;
use crate::phase::Running;
use crate::placement::{Placed, SlotView, Target};
pub use crate::residents::{DisposeReason, Resident};
use crate::scope::{Input, Scope};
use crate::telemetry::Record;

impl<K: Scope, I: Input> Lifecycle<K, I> {
    // ----- placement -----------------------------------------------------------------------

    /// Placement of a scope that has a resident: `None` when it has none (general placement
    /// applies). Once the resident's worker is idle, the resident is continued there, with the
    /// scope's receipt checked beside the turn (an operator may have forgotten it).
    pub(crate) fn place_resident(
        &self,
        scope: &K,
        view: &[SlotView],
        store: crate::placement::StoreHealth,
        taken: &mut [bool],
    ) -> Option<Placed<K>> {
        let resident = self.residents.get(scope)?;
        if resident.fingerprint != self.session.fingerprint {
            return Some(Placed::Dispose(scope.clone(), DisposeReason::ConfigChanged));
        }
        let slot = resident.slot;
        let placed = match view.get(slot) {
            Some(SlotView::Idle) if !taken[slot] => {
                taken[slot] = true;
                match self.needs_check(scope, store) {
                    true => Placed::RunChecked(scope.clone(), Target::Slot(slot)),
                    false => Placed::Run(scope.clone(), Target::Slot(slot)),
                }
            }
            Some(SlotView::Idle | SlotView::Busy) => Placed::WaitForResident(scope.clone(), slot),
            // The worker is gone: so is the session.
            _ => Placed::Dispose(scope.clone(), DisposeReason::AgentExit),
        };
        Some(placed)
    }

    /// `scope` waits for its resident's busy worker `slot` (recorded once per wait).
    pub fn waiting_for_resident(&mut self, scope: &K, slot: usize) {
        let state = self.state(scope);
        if !state.wait_for_resident(slot) {
            return;
        }
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
        if let Some(state) = self.scopes.get_mut(scope) {
            state.stop_waiting_for_resident();
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
