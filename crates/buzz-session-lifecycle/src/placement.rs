//! Placement on workers: which scope runs now, and where.
//!
//! [`Lifecycle::place`] is a pure function of the lifecycle's state and the pool's slots: it
//! returns what should happen to each scope that has input waiting, and changes nothing. The
//! dispatcher (`dispatch.rs`) then acts on each answer and reports back.
//!
//! Scopes are served in the order the harness's queue lists them (oldest input first). A scope
//! waits while a turn of it runs, while it settles, while a restore retry is not yet due, while
//! one of its sessions is being released, and while its receipt is being read. A scope whose
//! turn cannot continue a live session has its receipt read first, so the store is never read on
//! the event loop and a turn never holds a worker while it waits for the store.

use crate::clock::Moment;
use crate::lifecycle::Lifecycle;
use crate::phase::Phase;
use crate::reach::NextSession;
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
    /// Some idle worker holds a live session of the scope (upstream's routing will pick it).
    pub held: bool,
}

/// What should happen to a scope now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Placed<K> {
    /// Run its turn there.
    Run(K, Target),
    /// Read its receipt first; it is placed again once the read answered or timed out.
    Read(K),
    /// Its resident's worker is busy: wait for it.
    #[cfg(feature = "residency")]
    WaitForResident(K, usize),
    /// Dispose its resident first (it can no longer be continued); placed again afterwards.
    #[cfg(feature = "residency")]
    Dispose(K, crate::residency::DisposeReason),
}

impl<K: Scope, I: Input> Lifecycle<K, I> {
    /// Decides what happens now to each scope in `ready` (queue order), given the pool's slots.
    /// Pure: the caller acts on the answers.
    pub fn place(&self, ready: &[Ready<K>], view: &[SlotView], now: Moment) -> Vec<Placed<K>> {
        let mut taken = vec![false; view.len()];
        let mut spawning = view.iter().filter(|v| **v == SlotView::Spawning).count();
        let mut out = Vec::new();
        for Ready { scope, held } in ready {
            if !self.may_start(scope, now) {
                continue;
            }
            #[cfg(feature = "residency")]
            if let Some(placed) = self.place_resident(scope, view, &mut taken) {
                if let Some(placed) = placed {
                    out.push(placed);
                }
                continue;
            }
            if self.needs_read(scope) && !(*held && self.continues_held(scope)) {
                out.push(Placed::Read(scope.clone()));
                continue;
            }
            if !self.residency_enabled() {
                out.push(Placed::Run(scope.clone(), Target::Any));
                continue;
            }
            let idle = |i: usize, taken: &[bool]| view[i] == SlotView::Idle && !taken[i];
            let free = (0..view.len()).find(|&i| idle(i, &taken) && !self.hosts_resident(i));
            if let Some(i) = free {
                taken[i] = true;
                out.push(Placed::Run(scope.clone(), Target::Slot(i)));
            } else if spawning > 0 {
                // A worker on its way will serve this scope.
                spawning -= 1;
            } else if let Some(j) =
                (0..view.len()).find(|&j| view[j] == SlotView::Empty && !taken[j])
            {
                taken[j] = true;
                out.push(Placed::Run(scope.clone(), Target::Spawn(j)));
            } else if let Some(i) = (0..view.len()).find(|&i| idle(i, &taken)) {
                // Residency counts against capacity, but a resident never blocks the pool:
                // when nothing else is free, another scope takes a resident's worker.
                taken[i] = true;
                out.push(Placed::Run(scope.clone(), Target::Slot(i)));
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
        if matches!(state.receipt.freshness, Freshness::Reading { .. }) {
            return false;
        }
        match &state.phase {
            Phase::Idle => true,
            #[cfg(feature = "residency")]
            Phase::WaitingForResident { .. } => true,
            Phase::RetryWait { streak } => streak.next_at <= now,
            Phase::Running(_) | Phase::Settling(_) => false,
        }
    }

    /// Whether `scope`'s next start needs its receipt read first.
    pub(crate) fn needs_read(&self, scope: &K) -> bool {
        if !self.config.resume {
            return false;
        }
        match self.scopes.get(scope) {
            None => true,
            Some(state) => state.next == NextSession::Continue && !state.receipt.ready_for_start(),
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
        #[cfg(feature = "residency")]
        {
            self.residents.enabled()
        }
        #[cfg(not(feature = "residency"))]
        {
            false
        }
    }

    fn hosts_resident(&self, slot: usize) -> bool {
        #[cfg(feature = "residency")]
        {
            self.residents.hosts(slot)
        }
        #[cfg(not(feature = "residency"))]
        {
            let _ = slot;
            false
        }
    }

    // ----- what the dispatcher reports back ------------------------------------------------

    /// Reads `scope`'s receipt (placement asked for it): the scope waits until the read answers
    /// or the driver gives up on it.
    pub fn read_receipt(&mut self, scope: &K, now: Moment) {
        self.state(scope).receipt.freshness = Freshness::Reading { since: now };
        self.store(crate::decision::StoreOp::Read {
            scope: scope.clone(),
        });
    }

    /// When the read of `scope`'s receipt in flight started.
    pub fn read_started(&self, scope: &K) -> Option<Moment> {
        match self.scopes.get(scope)?.receipt.freshness {
            Freshness::Reading { since } => Some(since),
            _ => None,
        }
    }

    /// An operator forgot `scope`'s receipt (the store refused a write decided before that): the
    /// scope starts over — its live session is not continued, and its next session is new.
    pub fn forgotten(&mut self, scope: &K) {
        #[cfg(feature = "residency")]
        self.dispose(scope, crate::residency::DisposeReason::Forgotten);
        let state = self.state(scope);
        if let Some(running) = state.running_mut() {
            // A turn running now continues the forgotten session or opens one under the old
            // receipt: its answer stands, but its session is released, never kept.
            running.abandoned = true;
        }
        state.receipt.belief = crate::receipt_view::Belief::Absent;
        state.receipt.freshness = Freshness::Stale;
        state.next = crate::reach::NextSession::Fresh;
        state.known = None;
        self.record(crate::telemetry::Record::ReceiptForgotten {
            scope: scope.label(),
        });
    }

    /// A receipt write was refused: the store holds something else than the lifecycle believed
    /// (`stored`: the session it names). The lifecycle no longer knows what is stored, so the
    /// scope's next start reads it again.
    pub fn conflict(&mut self, scope: &K, op: &'static str, stored: Option<String>) {
        let state = self.state(scope);
        state.receipt.belief = crate::receipt_view::Belief::Unknown;
        state.receipt.freshness = Freshness::Stale;
        self.record(crate::telemetry::Record::ReceiptConflict {
            scope: scope.label(),
            op,
            stored_session_id: stored,
        });
    }

    /// The read of `scope`'s receipt answered: `Ok(record)`, or `Err` (the store could not be
    /// asked, or did not answer within the bound, after `waited`).
    pub fn read_done(
        &mut self,
        scope: &K,
        result: Result<Option<buzz_session_store::SessionRecord>, std::time::Duration>,
    ) {
        let state = self.state(scope);
        if !matches!(state.receipt.freshness, Freshness::Reading { .. }) {
            // A late answer to a read that already timed out: what it says is the newest word
            // of the store, but the start it was for has been decided.
            if let Ok(record) = result {
                state.receipt.belief = crate::receipt_view::Belief::from(record);
            }
            return;
        }
        match result {
            Ok(record) => {
                state.receipt.belief = crate::receipt_view::Belief::from(record);
                state.receipt.freshness = Freshness::Fresh;
                state.told_unreadable = None;
            }
            Err(waited) => {
                state.receipt.freshness = Freshness::Unreadable;
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
                Freshness::Reading { since } if since <= deadline => Some((k.clone(), since)),
                _ => None,
            })
            .collect()
    }
}
