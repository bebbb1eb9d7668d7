//! The controller table: per-scope turn state plus the residency table, behind one mutex.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Debug;
use std::hash::Hash;
use std::mem;
use std::sync::{Mutex, MutexGuard, PoisonError};

use tracing::{debug, warn};

use crate::ids::{Fingerprint, HandleId, StartId};
use crate::outcome::{
    BeginError, Continuation, DisposeReason, Fallback, Finish, Keep, NotResidentReason, Resident,
    Route, TurnEnd, TurnStatus, continue_outcome,
};
use crate::stats::TableStats;

/// How many scopes with nothing live (no turn, no resident, nothing held) [`ControllerTable::new`]
/// remembers before forgetting the least recently used ones. Without a bound the table would
/// grow by one entry per thread ever answered.
pub const DEFAULT_RETAINED_STATUSES: usize = 1024;

/// Per-scope turn state and residency, shared by the harness's event loop and its turn tasks.
///
/// # Locking
///
/// All state sits behind one `std::sync::Mutex`. Every method is a short synchronous critical
/// section and the table performs no I/O (logging happens after the lock is released), so a
/// std mutex is the right tool and the methods are safe to call from async code. Share the
/// table as `Arc<ControllerTable<K, I>>`.
///
/// The only caller code that runs under the lock is the `slot_busy` closure of
/// [`route`](Self::route) and the predicate of [`dispose_where`](Self::dispose_where); they
/// must be cheap and must not call back into the table (that would deadlock). Both run before
/// any mutation, so a panicking closure leaves the state untouched; that is also why a
/// poisoned lock is recovered instead of propagated.
///
/// # Ownership of inputs
///
/// An input passed to [`route`](Self::route) is never dropped: it is either returned at once
/// (`Continue`, `CapacityWait`, `Fallback`) or held by the table (`Queued`, `WaitFinishing`)
/// until a later call returns it (`Finish::Claimed`, `Finish::Failed`/`Cancelled` `requeue`,
/// or [`settle`](Self::settle)).
pub struct ControllerTable<K, I> {
    state: Mutex<State<K, I>>,
}

/// Everything the mutex protects.
struct State<K, I> {
    /// Upper bound on registered residents; 0 disables residency.
    max_residents: usize,
    /// How many "bare" scopes (see [`Entry::is_bare`]) are remembered.
    retained_statuses: usize,
    /// A `BTreeMap` so bulk disposals return keys in a deterministic order and LRU ties break
    /// by key order without extra sorting.
    entries: BTreeMap<K, Entry<I>>,
    /// Next raw [`StartId`]; only ever incremented, so ids are never reused.
    next_start: u64,
    /// Next raw [`HandleId`]; only ever incremented, so ids are never reused.
    next_handle: u64,
    /// Logical clock for LRU ordering; bumped on every start and completion.
    clock: u64,
    /// Counters; the derived fields (`running`, `residents`, …) are filled in by `stats()`.
    counters: TableStats,
}

/// One scope's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry<I> {
    /// The latest turn's status; `Running` means `start` has no terminal yet.
    pub(crate) status: TurnStatus,
    /// The latest start; reports naming any other start are stale.
    pub(crate) start: StartId,
    /// Completed but not yet settled: new inputs go to `waiting`, not to a session.
    pub(crate) finishing: bool,
    /// A disposal arrived while running: the running turn must not leave a resident and must
    /// not claim more input on the session being torn down.
    pub(crate) dispose_requested: bool,
    /// Inputs for the running turn, oldest first; empty whenever the scope is not running.
    pub(crate) queue: VecDeque<I>,
    /// Inputs that arrived while finishing; handed back by `settle`.
    pub(crate) waiting: Vec<I>,
    /// The live session kept for the scope, if any.
    pub(crate) resident: Option<Resident>,
    /// LRU timestamp from `State::clock`.
    pub(crate) last_used: u64,
}

impl<I> Entry<I> {
    fn running(start: StartId, now: u64) -> Self {
        Entry {
            status: TurnStatus::Running,
            start,
            finishing: false,
            dispose_requested: false,
            queue: VecDeque::new(),
            waiting: Vec::new(),
            resident: None,
            last_used: now,
        }
    }

    /// Nothing live hangs off the entry: forgetting it only loses the informational status,
    /// and routing an unknown scope gives the same `Fallback` as routing this one.
    fn is_bare(&self) -> bool {
        self.status != TurnStatus::Running
            && !self.finishing
            && self.resident.is_none()
            && self.queue.is_empty()
            && self.waiting.is_empty()
    }

    /// An idle completed resident: the only kind LRU eviction and idle sleep may take, since
    /// disposing a running or finishing scope's session would pull it from under its turn.
    fn is_idle_resident(&self) -> bool {
        self.resident.is_some() && self.status == TurnStatus::Completed && !self.finishing
    }
}

fn bump(counter: &mut u64) -> u64 {
    let value = *counter;
    *counter += 1;
    value
}

/// What the internal `begin` did, so the public wrapper can log after unlocking.
struct Begun {
    start: StartId,
    replaced: Option<Resident>,
    superseded: Option<StartId>,
}

impl<K: Clone + Ord, I> State<K, I> {
    /// Refuses a checked begin while a turn is running or its completion is unsettled.
    fn check_startable(&self, key: &K) -> Result<(), BeginError> {
        match self.entries.get(key) {
            Some(entry) if entry.status == TurnStatus::Running => Err(BeginError::Running),
            Some(entry) if entry.finishing => Err(BeginError::Finishing),
            _ => Ok(()),
        }
    }

    fn begin(&mut self, key: &K) -> Begun {
        // Checked before any mutation so that a tripped assertion leaves the state intact.
        debug_assert!(
            self.entries
                .get(key)
                .is_none_or(|e| e.queue.is_empty() || e.status == TurnStatus::Running),
            "idle scope with queued input"
        );
        let start = StartId(bump(&mut self.next_start));
        let now = bump(&mut self.clock);
        self.counters.starts += 1;
        let Some(entry) = self.entries.get_mut(key) else {
            self.entries.insert(key.clone(), Entry::running(start, now));
            return Begun {
                start,
                replaced: None,
                superseded: None,
            };
        };
        let mut superseded = None;
        if entry.status == TurnStatus::Running {
            // Only reachable through the unchecked `begin`: the old start can no longer report,
            // so it takes its one terminal here to keep `starts == terminals + running`.
            superseded = Some(entry.start);
            self.counters.terminals += 1;
            self.counters.superseded += 1;
        }
        if entry.finishing {
            // Only reachable through the unchecked `begin`: inputs parked for the unsettled turn
            // ride on the new one instead of waiting for a settle that will now be stale.
            entry.finishing = false;
            let waiting = mem::take(&mut entry.waiting);
            entry.queue.extend(waiting);
        }
        let replaced = entry.resident.take();
        entry.status = TurnStatus::Running;
        entry.start = start;
        entry.dispose_requested = false;
        entry.last_used = now;
        if replaced.is_some() {
            self.counters.count_disposal(DisposeReason::Replaced);
        }
        Begun {
            start,
            replaced,
            superseded,
        }
    }

    fn route(
        &mut self,
        key: &K,
        input: I,
        current: Fingerprint,
        slot_busy: &dyn Fn(usize) -> bool,
    ) -> Route<I> {
        let Some(entry) = self.entries.get_mut(key) else {
            self.counters.fallbacks += 1;
            return Route::Fallback(Fallback {
                inputs: vec![input],
                disposed: None,
            });
        };
        if entry.finishing {
            entry.waiting.push(input);
            self.counters.waited_finishing += 1;
            return Route::WaitFinishing;
        }
        match entry.status {
            TurnStatus::Running => {
                entry.queue.push_back(input);
                self.counters.queued += 1;
                Route::Queued
            }
            TurnStatus::Failed | TurnStatus::Cancelled => {
                self.counters.fallbacks += 1;
                Route::Fallback(Fallback {
                    inputs: vec![input],
                    disposed: None,
                })
            }
            TurnStatus::Completed => {
                let Some(resident) = entry.resident.as_ref() else {
                    self.counters.fallbacks += 1;
                    return Route::Fallback(Fallback {
                        inputs: vec![input],
                        disposed: None,
                    });
                };
                if resident.fingerprint != current {
                    // The session's tool surface and cwd were fixed at creation; continuing it
                    // under another configuration would silently run the old one.
                    let disposed = entry.resident.take();
                    self.counters.count_disposal(DisposeReason::ConfigChanged);
                    self.counters.fallbacks += 1;
                    return Route::Fallback(Fallback {
                        inputs: vec![input],
                        disposed,
                    });
                }
                if slot_busy(resident.slot) {
                    // No mutation at all: the caller retries, and a cold session here would
                    // fork the conversation away from the resident one.
                    self.counters.capacity_waits += 1;
                    return Route::CapacityWait(input);
                }
                // The queue is empty whenever a scope is not running (every terminal path
                // drains it). The drain below still delivers anything found there in release
                // builds; debug builds (and the tests) trip over the broken invariant first.
                debug_assert!(entry.queue.is_empty(), "completed scope with queued input");
                let resident = resident.clone();
                let start = StartId(bump(&mut self.next_start));
                entry.status = TurnStatus::Running;
                entry.start = start;
                entry.dispose_requested = false;
                entry.last_used = bump(&mut self.clock);
                let mut inputs: Vec<I> = entry.queue.drain(..).collect();
                inputs.push(input);
                self.counters.starts += 1;
                self.counters.continued += 1;
                Route::Continue(Continuation {
                    start,
                    resident,
                    inputs,
                })
            }
        }
    }

    fn finish(&mut self, key: &K, start: StartId, end: TurnEnd) -> Finish<K, I> {
        let max_residents = self.max_residents;
        let Some(entry) = self.entries.get_mut(key) else {
            self.counters.stale_finishes += 1;
            return Finish::Stale;
        };
        if entry.start != start || entry.status != TurnStatus::Running {
            self.counters.stale_finishes += 1;
            return Finish::Stale;
        }
        let (slot, session_id, fingerprint, keep) = match end {
            TurnEnd::Failed => {
                entry.status = TurnStatus::Failed;
                entry.dispose_requested = false;
                entry.last_used = bump(&mut self.clock);
                let dispose = entry.resident.take();
                let requeue: Vec<I> = entry.queue.drain(..).collect();
                self.counters.terminals += 1;
                self.counters.handed_back += requeue.len() as u64;
                if dispose.is_some() {
                    self.counters.count_disposal(DisposeReason::TurnFailed);
                }
                return Finish::Failed { dispose, requeue };
            }
            TurnEnd::Cancelled => {
                entry.status = TurnStatus::Cancelled;
                entry.dispose_requested = false;
                entry.last_used = bump(&mut self.clock);
                let disposed = entry.resident.take();
                let requeue: Vec<I> = entry.queue.drain(..).collect();
                self.counters.terminals += 1;
                self.counters.handed_back += requeue.len() as u64;
                if disposed.is_some() {
                    self.counters.count_disposal(DisposeReason::Cancelled);
                }
                return Finish::Cancelled { disposed, requeue };
            }
            TurnEnd::Succeeded {
                slot,
                session_id,
                fingerprint,
                keep,
            } => (slot, session_id, fingerprint, keep),
        };

        if !entry.dispose_requested && !entry.queue.is_empty() {
            // The final atomic claim: anything queued so far rides on this same session and
            // start before any completion is published, so no input is acknowledged as queued
            // and then stranded.
            let claimed: Vec<I> = entry.queue.drain(..).collect();
            self.counters.claimed += claimed.len() as u64;
            return Finish::Claimed(claimed);
        }

        // From here the scope is completed. A disposal request also stops the claim above:
        // the session is being torn down, so queued inputs wait for `settle` and re-route.
        let handback: Vec<I> = entry.queue.drain(..).collect();
        entry.waiting.extend(handback);
        entry.status = TurnStatus::Completed;
        entry.finishing = true;
        entry.last_used = bump(&mut self.clock);
        self.counters.terminals += 1;
        let keep = if entry.dispose_requested {
            Keep::No(NotResidentReason::DisposeRequested)
        } else if max_residents == 0 {
            Keep::No(NotResidentReason::ResidencyDisabled)
        } else {
            keep
        };
        entry.dispose_requested = false;

        let mut evicted = Vec::new();
        let previous = entry.resident.take();
        let same_session = previous
            .as_ref()
            .is_some_and(|r| r.slot == slot && r.session_id == session_id);
        let kept_handle = match (previous, keep) {
            (Some(previous), Keep::Yes) if same_session => Some(previous.handle),
            (Some(_), _) if same_session => {
                // A hot session that may no longer stay: the caller frees the session it ran
                // the turn on (`resident: None`), so it is not returned a second time here.
                self.counters.count_disposal(DisposeReason::ConfigChanged);
                None
            }
            (Some(previous), _) => {
                // Defensive: the turn ran on a different session than the registered one.
                self.counters.count_disposal(DisposeReason::Replaced);
                evicted.push((key.clone(), previous));
                None
            }
            (None, _) => None,
        };
        if keep != Keep::Yes {
            return Finish::Completed {
                resident: None,
                evicted,
            };
        }
        if kept_handle.is_none() && !self.make_room(key, &mut evicted) {
            self.counters.not_kept_at_capacity += 1;
            return Finish::Completed {
                resident: None,
                evicted,
            };
        }
        let handle = kept_handle.unwrap_or_else(|| HandleId(bump(&mut self.next_handle)));
        let resident = Resident {
            handle,
            slot,
            session_id,
            fingerprint,
        };
        if let Some(entry) = self.entries.get_mut(key) {
            entry.resident = Some(resident.clone());
        }
        Finish::Completed {
            resident: Some(resident),
            evicted,
        }
    }

    /// Evicts least-recently-used idle residents (ties by key order; the clock is strictly
    /// monotonic, so ties are only a defensive guarantee) until one more fits.
    /// Returns false when every resident belongs to a running or finishing scope: then the
    /// newcomer is not kept, so the bound holds without pulling a session from under a turn.
    fn make_room(&mut self, newcomer: &K, evicted: &mut Vec<(K, Resident)>) -> bool {
        loop {
            let registered = self
                .entries
                .values()
                .filter(|e| e.resident.is_some())
                .count();
            if registered < self.max_residents {
                return true;
            }
            let victim = self
                .entries
                .iter()
                .filter(|(k, e)| *k != newcomer && e.is_idle_resident())
                .min_by(|(ka, a), (kb, b)| a.last_used.cmp(&b.last_used).then_with(|| ka.cmp(kb)))
                .map(|(k, _)| k.clone());
            let Some(victim) = victim else {
                return false;
            };
            if let Some(resident) = self
                .entries
                .get_mut(&victim)
                .and_then(|e| e.resident.take())
            {
                self.counters.count_disposal(DisposeReason::Evicted);
                evicted.push((victim, resident));
            }
        }
    }

    fn settle(&mut self, key: &K, start: StartId) -> Vec<I> {
        let Some(entry) = self.entries.get_mut(key) else {
            return Vec::new();
        };
        if entry.start != start || !entry.finishing {
            return Vec::new();
        }
        entry.finishing = false;
        let handed = mem::take(&mut entry.waiting);
        self.counters.handed_back += handed.len() as u64;
        handed
    }

    fn dispose(
        &mut self,
        key: &K,
        handle: Option<HandleId>,
        reason: DisposeReason,
    ) -> Option<Resident> {
        let entry = self.entries.get_mut(key)?;
        if let Some(handle) = handle
            && entry.resident.as_ref().map(|r| r.handle) != Some(handle)
        {
            // Identity guard: the caller is holding an outdated handle (or none is
            // registered); whatever the scope holds now is not the caller's to dispose.
            return None;
        }
        if entry.status == TurnStatus::Running {
            entry.dispose_requested = true;
        }
        let resident = entry.resident.take();
        if resident.is_some() {
            self.counters.count_disposal(reason);
        }
        resident
    }

    /// Disposes the residents of every scope `select` picks. Selection runs over the whole
    /// table before anything changes, so a panicking caller predicate mutates nothing.
    fn dispose_selected(
        &mut self,
        reason: DisposeReason,
        select: impl Fn(&K, &Entry<I>) -> bool,
    ) -> Vec<(K, Resident)> {
        let keys: Vec<K> = self
            .entries
            .iter()
            .filter(|(k, e)| select(k, e))
            .map(|(k, _)| k.clone())
            .collect();
        let mut disposed = Vec::new();
        for key in keys {
            let Some(entry) = self.entries.get_mut(&key) else {
                continue;
            };
            if entry.status == TurnStatus::Running {
                entry.dispose_requested = true;
            }
            if let Some(resident) = entry.resident.take() {
                self.counters.count_disposal(reason);
                disposed.push((key, resident));
            }
        }
        disposed
    }

    /// Forgets the least recently used bare scopes beyond `retained_statuses`.
    fn prune(&mut self) {
        if self.entries.len() <= self.retained_statuses {
            return;
        }
        let mut bare: Vec<(u64, K)> = self
            .entries
            .iter()
            .filter(|(_, e)| e.is_bare())
            .map(|(k, e)| (e.last_used, k.clone()))
            .collect();
        if bare.len() <= self.retained_statuses {
            return;
        }
        bare.sort();
        let excess = bare.len() - self.retained_statuses;
        for (_, key) in bare.into_iter().take(excess) {
            self.entries.remove(&key);
        }
    }

    fn stats(&self) -> TableStats {
        let mut stats = self.counters.clone();
        for entry in self.entries.values() {
            stats.running += u64::from(entry.status == TurnStatus::Running);
            stats.finishing += u64::from(entry.finishing);
            stats.residents += u64::from(entry.resident.is_some());
            stats.held_inputs += (entry.queue.len() + entry.waiting.len()) as u64;
        }
        stats.scopes = self.entries.len() as u64;
        stats
    }
}

impl<K, I> ControllerTable<K, I>
where
    K: Clone + Eq + Hash + Ord + Debug,
    I: Clone + Debug,
{
    /// A table keeping at most `max_residents` live sessions (0 disables residency: no
    /// session is ever kept, `Finish::Completed` always carries `resident: None`) and
    /// remembering up to
    /// [`DEFAULT_RETAINED_STATUSES`] finished scopes.
    #[must_use]
    pub fn new(max_residents: usize) -> Self {
        Self::with_retention(max_residents, DEFAULT_RETAINED_STATUSES)
    }

    /// Like [`new`](Self::new), remembering up to `retained_statuses` scopes that have nothing
    /// live (no turn, no resident, no held input). Older ones are forgotten in LRU order;
    /// their [`status`](Self::status) becomes `None` and routing them falls back exactly as
    /// before, so only the informational status is lost.
    #[must_use]
    pub fn with_retention(max_residents: usize, retained_statuses: usize) -> Self {
        ControllerTable {
            state: Mutex::new(State {
                max_residents,
                retained_statuses,
                entries: BTreeMap::new(),
                next_start: 1,
                next_handle: 1,
                clock: 0,
                counters: TableStats::default(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State<K, I>> {
        // Caller code under the lock runs before any mutation (see the type docs), so a
        // poisoned state is still consistent and recovering beats wedging the harness.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A turn starts for `key` on the cold/warm path (the caller dispatches it): status
    /// becomes `Running` under a new [`StartId`].
    ///
    /// A resident left from an older session is disposed (`Replaced`) and returned for
    /// cleanup, because the new turn runs on a different session.
    ///
    /// The harness should only dispatch a scope that is neither running nor finishing (use
    /// [`try_begin`](Self::try_begin) to have the table check). If it does not, the running
    /// start is superseded: it is counted as terminated now, its later reports are
    /// [`Finish::Stale`], and its queued and parked inputs move to the new start; this is
    /// logged as a warning.
    pub fn begin(&self, key: &K) -> (StartId, Option<Resident>) {
        let begun = {
            let mut state = self.lock();
            let begun = state.begin(key);
            state.prune();
            begun
        };
        self.log_begun(key, &begun);
        (begun.start, begun.replaced)
    }

    /// Like [`begin`](Self::begin), but refuses while the scope is running or finishing, in
    /// the same critical section that would start it. Lets a dispatcher that runs concurrently
    /// with [`route`](Self::route) avoid racing a hot `Continue`.
    ///
    /// # Errors
    ///
    /// [`BeginError::Running`] or [`BeginError::Finishing`]; nothing changed.
    pub fn try_begin(&self, key: &K) -> Result<(StartId, Option<Resident>), BeginError> {
        let begun = {
            let mut state = self.lock();
            state.check_startable(key)?;
            let begun = state.begin(key);
            state.prune();
            begun
        };
        self.log_begun(key, &begun);
        Ok((begun.start, begun.replaced))
    }

    fn log_begun(&self, key: &K, begun: &Begun) {
        if let Some(old) = begun.superseded {
            warn!(scope = ?key, superseded = %old, start = %begun.start,
                "begin while a turn was still running; the old start is superseded");
        }
        if let Some(replaced) = &begun.replaced {
            debug!(scope = ?key, handle = %replaced.handle, "resident replaced by a new session");
        }
        debug!(scope = ?key, start = %begun.start, "turn started (cold/warm)");
    }

    /// Routes a follow-up input for `key`; the harness calls this for every admitted message.
    ///
    /// `current` is the fingerprint of the scope's configuration now; `slot_busy` tells whether
    /// a worker slot is currently taken. `slot_busy` runs under the table's lock: keep it
    /// cheap and never call the table from it. See [`Route`] for what each answer obliges the
    /// caller to do.
    pub fn route(
        &self,
        key: &K,
        input: I,
        current: Fingerprint,
        slot_busy: &dyn Fn(usize) -> bool,
    ) -> Route<I> {
        let route = {
            let mut state = self.lock();
            let route = state.route(key, input, current, slot_busy);
            state.prune();
            route
        };
        debug!(scope = ?key, outcome = ?continue_outcome(&route), "follow-up routed");
        route
    }

    /// The turn task reports how its prompt ended; call it before the harness publishes
    /// anything, so inputs queued during the turn are claimed rather than stranded.
    ///
    /// A report for a start that is not the scope's current unfinished one (superseded, or a
    /// second report after a terminal result) returns [`Finish::Stale`] and changes and counts
    /// nothing, so each start has exactly one terminal outcome. A [`Finish::Claimed`] keeps the
    /// start open: report again with the same `start` when the claimed inputs have run.
    pub fn finish(&self, key: &K, start: StartId, end: TurnEnd) -> Finish<K, I> {
        let finish = {
            let mut state = self.lock();
            let finish = state.finish(key, start, end);
            state.prune();
            finish
        };
        match &finish {
            Finish::Stale => debug!(scope = ?key, start = %start, "stale finish ignored"),
            Finish::Claimed(inputs) => {
                debug!(scope = ?key, start = %start, claimed = inputs.len(), "final claim");
            }
            Finish::Completed { resident, evicted } => {
                debug!(scope = ?key, start = %start, kept = resident.is_some(),
                    evicted = evicted.len(), "turn completed");
            }
            Finish::Failed { requeue, .. } => {
                debug!(scope = ?key, start = %start, requeue = requeue.len(), "turn failed");
            }
            Finish::Cancelled { requeue, .. } => {
                debug!(scope = ?key, start = %start, requeue = requeue.len(), "turn cancelled");
            }
        }
        finish
    }

    /// The harness has published the completion and returned the worker: the scope is
    /// settled, and the inputs that waited in the finishing window are handed back, oldest
    /// first. The caller routes them again from scratch, before newer inputs for the scope.
    ///
    /// Settling anything but the current finishing start returns nothing and changes nothing
    /// (a failed or cancelled turn has no finishing window, so settling it is a harmless no-op).
    pub fn settle(&self, key: &K, start: StartId) -> Vec<I> {
        let handed = {
            let mut state = self.lock();
            let handed = state.settle(key, start);
            state.prune();
            handed
        };
        debug!(scope = ?key, start = %start, handed_back = handed.len(), "scope settled");
        handed
    }

    /// Disposes `key`'s resident. With `Some(handle)` it acts only if the table still holds
    /// that handle, so a caller with an outdated view cannot dispose a newer session. The
    /// entry is removed before the resident is returned, so each resident is returned once.
    ///
    /// If the scope is running, the current turn is marked: its successful finish keeps no
    /// resident and claims no more input. The returned resident (if the turn is hot) tells the
    /// caller which session to cancel; the session itself is freed when the turn settles.
    pub fn dispose(
        &self,
        key: &K,
        handle: Option<HandleId>,
        reason: DisposeReason,
    ) -> Option<Resident> {
        let disposed = {
            let mut state = self.lock();
            let disposed = state.dispose(key, handle, reason);
            state.prune();
            disposed
        };
        if let Some(resident) = &disposed {
            debug!(scope = ?key, handle = %resident.handle, ?reason, "resident disposed");
        }
        disposed
    }

    /// Disposes every resident on worker `slot` (its agent process exited).
    pub fn dispose_slot(&self, slot: usize, reason: DisposeReason) -> Vec<(K, Resident)> {
        self.dispose_bulk(reason, |_, e| {
            e.resident.as_ref().is_some_and(|r| r.slot == slot)
        })
    }

    /// Disposes the residents of scopes that are neither running nor finishing (the pool is
    /// putting idle workers to sleep); busy scopes keep theirs.
    pub fn dispose_idle(&self, reason: DisposeReason) -> Vec<(K, Resident)> {
        self.dispose_bulk(reason, |_, e| e.is_idle_resident())
    }

    /// Disposes every resident, including running scopes' (shutdown). Every running scope is
    /// marked, even one without a resident yet, so no turn in flight registers a session
    /// afterwards.
    pub fn dispose_all(&self, reason: DisposeReason) -> Vec<(K, Resident)> {
        self.dispose_bulk(reason, |_, e| {
            e.resident.is_some() || e.status == TurnStatus::Running
        })
    }

    /// Disposes the residents `pred` selects (cwd or MCP change, channel removal). `pred` runs
    /// under the lock: keep it cheap and never call the table from it.
    pub fn dispose_where(
        &self,
        pred: &dyn Fn(&K, &Resident) -> bool,
        reason: DisposeReason,
    ) -> Vec<(K, Resident)> {
        self.dispose_bulk(reason, |k, e| {
            e.resident.as_ref().is_some_and(|r| pred(k, r))
        })
    }

    fn dispose_bulk(
        &self,
        reason: DisposeReason,
        select: impl Fn(&K, &Entry<I>) -> bool,
    ) -> Vec<(K, Resident)> {
        let disposed = {
            let mut state = self.lock();
            let disposed = state.dispose_selected(reason, select);
            state.prune();
            disposed
        };
        if !disposed.is_empty() {
            debug!(?reason, count = disposed.len(), "residents disposed");
        }
        disposed
    }

    /// The resident currently registered for `key`.
    #[must_use]
    pub fn resident(&self, key: &K) -> Option<Resident> {
        self.lock()
            .entries
            .get(key)
            .and_then(|e| e.resident.clone())
    }

    /// Whether worker `slot` holds any scope's resident session (so the pool can spare it
    /// for other scopes while it has spare capacity elsewhere).
    #[must_use]
    pub fn hosts_resident(&self, slot: usize) -> bool {
        self.lock()
            .entries
            .values()
            .any(|e| e.resident.as_ref().is_some_and(|r| r.slot == slot))
    }

    /// The status of `key`'s latest turn; `None` for a scope the table does not remember.
    #[must_use]
    pub fn status(&self, key: &K) -> Option<TurnStatus> {
        self.lock().entries.get(key).map(|e| e.status)
    }

    /// Whether `key` completed and has not been settled yet.
    #[must_use]
    pub fn is_finishing(&self, key: &K) -> bool {
        self.lock().entries.get(key).is_some_and(|e| e.finishing)
    }

    /// A consistent snapshot of the counters.
    #[must_use]
    pub fn stats(&self) -> TableStats {
        self.lock().stats()
    }

    /// A copy of `key`'s whole entry, for tests that compare state before and after a call.
    #[cfg(test)]
    pub(crate) fn entry(&self, key: &K) -> Option<Entry<I>> {
        self.lock().entries.get(key).cloned()
    }
}

/// Shows the configuration and the remembered scopes. Uses `try_lock` so that formatting the
/// table from code that already holds its lock (a `slot_busy` closure, say) cannot deadlock.
impl<K, I> Debug for ControllerTable<K, I>
where
    K: Debug,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = f.debug_struct("ControllerTable");
        match self.state.try_lock() {
            Ok(state) => out
                .field("max_residents", &state.max_residents)
                .field("scopes", &state.entries.keys().collect::<Vec<_>>())
                .finish(),
            Err(_) => out.finish_non_exhaustive(),
        }
    }
}
