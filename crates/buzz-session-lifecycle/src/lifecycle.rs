//! The state machine: one owner for the lifecycle of every scope.
//!
//! Per scope it holds the ordered pending input, the running turn (its start number, worker,
//! plan and the input it carries), the resident session, the resume-retry streak and the
//! one-shot fresh-session request. It is synchronous and clock-free: every input carries the
//! time it happened at, and every decision comes back as data — [`Target`]s to dispatch,
//! [`Effect`]s for the harness, [`Persist`]s for the store. The harness executes; nothing here
//! performs I/O, so every rule is tested without processes.
//!
//! The life of one message:
//!
//! ```text
//! admit ──► pending (ordered by admission) ──► plan: where it can run (resident's worker,
//!   a free worker, a spawn, or wait) ──► start: take the batch, decide hot / warm / cold
//!   ──► opened (session created or restored: receipt written at once) ──► turn_end:
//!   answered | cancelled | rotated (done) · requeued | failed | worker lost | restore
//!   undecided (back into pending, in front of newer input) ──► settled: ledger committed
//! ```
//!
//! Invariants (pinned by the table tests and the interleaving property test in `tests/`):
//! per-scope order — a message admitted later is never dispatched before an earlier one; at most
//! one turn in flight per scope; each resident is disposed exactly once; every admitted message
//! ends in exactly one answered turn or one dead-letter.

use std::collections::{BTreeMap, HashMap};

use buzz_session_store::SessionRecord;

use crate::clock::Moment;
use crate::effect::{Effect, Notice, Persist, Record};
use crate::notice;
use crate::pending::{Batch, Pending, Seq};
use crate::plan::{ColdReason, Plan, SessionConfig, SlotView, Target, Via};
use crate::report::{Delivered, Opened, TurnOutcome};
use crate::residents::{DisposeReason, Resident, Residents};
use crate::retry::{AfterFailure, RetryPolicy, Streak};
use crate::scope::{Input, Scope};

/// How the lifecycle behaves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LifecycleConfig {
    /// Reopen stored sessions (receipts) instead of always creating new ones.
    pub resume: bool,
    /// Live sessions kept resident for hot follow-ups (0: upstream routing, no residency).
    pub max_residents: usize,
    /// Bounded retries of a restore that failed without a definitive answer.
    pub retry: RetryPolicy,
    /// An owner is configured (notices may mention `!rotate`).
    pub owner_configured: bool,
}

impl Default for LifecycleConfig {
    fn default() -> Self {
        LifecycleConfig {
            resume: true,
            max_residents: 8,
            retry: RetryPolicy::default(),
            owner_configured: false,
        }
    }
}

/// What [`Lifecycle::route_running`] did with input for a scope.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "input handed back must be queued by the caller"]
pub enum RunningRoute<I> {
    /// No turn of the scope is running: the input is handed back (queue it normally).
    NotRunning(I),
    /// Queued for the scope's next turn, which continues on the same session.
    Queued,
    /// Tracked as steered into the running turn: send it to the turn. If the turn ends without
    /// absorbing it (it completed first), it is queued for the next turn, never lost.
    Steer,
    /// Already known (pending or running): dropped.
    Duplicate,
}

#[derive(Debug)]
struct Running<I> {
    slot: usize,
    plan: Plan,
    inputs: Vec<(Seq, I)>,
    steered: Vec<(Seq, I)>,
    session_id: Option<String>,
    cancel_requested: bool,
    /// The scope was abandoned while this turn ran: whatever session the turn ends on is not
    /// kept, not recorded as the scope's receipt, and released.
    abandoned: bool,
    config: SessionConfig,
    window: Vec<String>,
}

#[derive(Debug)]
struct ScopeState<I> {
    pending: Pending<I>,
    running: Option<Running<I>>,
    retry: Option<Streak>,
    fresh: bool,
    restore_abandoned: bool,
    releasing: Vec<String>,
    waiting: bool,
    settle: Option<Settle>,
}

/// A successful turn whose ledger is committed once its reply is published.
#[derive(Debug)]
struct Settle {
    slot: usize,
    window: Vec<String>,
    triggers: Vec<String>,
    reply: Option<String>,
}

impl<I> Default for ScopeState<I> {
    fn default() -> Self {
        ScopeState {
            pending: Pending::default(),
            running: None,
            retry: None,
            fresh: false,
            restore_abandoned: false,
            releasing: Vec::new(),
            waiting: false,
            settle: None,
        }
    }
}

impl<I: Input> ScopeState<I> {
    fn knows(&self, id: &str) -> bool {
        self.pending.contains(id)
            || self
                .running
                .as_ref()
                .is_some_and(|r| r.inputs.iter().chain(&r.steered).any(|(_, i)| i.id() == id))
    }

    /// Nothing worth remembering: the entry can go (keeps memory bounded at many threads).
    fn is_bare(&self) -> bool {
        self.pending.is_empty()
            && self.running.is_none()
            && self.retry.is_none()
            && !self.fresh
            && !self.restore_abandoned
            && self.releasing.is_empty()
            && self.settle.is_none()
    }
}

/// The lifecycle of every scope.
#[derive(Debug)]
pub struct Lifecycle<K, I> {
    config: LifecycleConfig,
    scopes: BTreeMap<K, ScopeState<I>>,
    residents: Residents<K>,
    next_seq: u64,
    next_start: u64,
    /// Inputs of turns that ended without being done, by id: when the harness hands them back,
    /// they keep their place in admission order.
    returning: HashMap<String, Seq>,
    fingerprint: u64,
    effects: Vec<Effect<K, I>>,
    persists: Vec<Persist<K>>,
}

impl<K: Scope, I: Input> Lifecycle<K, I> {
    /// An empty lifecycle.
    pub fn new(config: LifecycleConfig) -> Self {
        Lifecycle {
            residents: Residents::new(config.max_residents),
            config,
            scopes: BTreeMap::new(),
            next_seq: 0,
            next_start: 0,
            returning: HashMap::new(),
            fingerprint: 0,
            effects: Vec::new(),
            persists: Vec::new(),
        }
    }

    fn seq(&mut self) -> Seq {
        self.next_seq += 1;
        Seq(self.next_seq)
    }

    fn state(&mut self, scope: &K) -> &mut ScopeState<I> {
        self.scopes.entry(scope.clone()).or_default()
    }

    fn forget_if_bare(&mut self, scope: &K) {
        if self.scopes.get(scope).is_some_and(ScopeState::is_bare) {
            self.scopes.remove(scope);
        }
    }

    // ----- input -------------------------------------------------------------------------

    /// Admits a batch of input for `scope`: new input goes behind everything admitted before;
    /// input of an earlier turn that the harness hands back keeps its place.
    pub fn admit(&mut self, scope: &K, batch: Batch<I>) {
        for input in batch.inputs {
            if self.scopes.get(scope).is_some_and(|s| s.knows(input.id())) {
                continue;
            }
            let seq = match self.returning.remove(input.id()) {
                Some(seq) => seq,
                None => self.seq(),
            };
            self.state(scope).pending.insert(seq, input);
        }
        if let Some(state) = self.scopes.get_mut(scope) {
            state.pending.absorb(batch.attempts, batch.steered);
        }
    }

    /// The harness has handed back everything it was going to: input of ended turns that did not
    /// come back was dead-lettered or answered, and its admission order is forgotten.
    pub fn end_of_inbox(&mut self) {
        self.returning.clear();
    }

    /// Routes input that arrives for a scope while one of its turns may be running (with
    /// residency; without it, everything is handed back).
    ///
    /// `steer`: the operator asked for mid-turn input to be steered into the running turn
    /// (`--multiple-event-handling steer`); otherwise it waits for the next turn, which continues
    /// on the same session.
    pub fn route_running(&mut self, scope: &K, input: I, steer: bool) -> RunningRoute<I> {
        let running = self.scopes.get(scope).is_some_and(|s| s.running.is_some());
        // Without residency the harness routes as upstream does.
        if !running || !self.residents.enabled() {
            return RunningRoute::NotRunning(input);
        }
        if self.scopes.get(scope).is_some_and(|s| s.knows(input.id())) {
            return RunningRoute::Duplicate;
        }
        let seq = self.seq();
        let state = self.state(scope);
        match (&mut state.running, steer) {
            (Some(running), true) => {
                running.steered.push((seq, input));
                RunningRoute::Steer
            }
            _ => {
                state.pending.insert(seq, input);
                RunningRoute::Queued
            }
        }
    }

    // ----- dispatch ----------------------------------------------------------------------

    /// Decides where each scope that can start a turn now should run.
    ///
    /// Scopes are served oldest input first. A scope waits while a turn of it runs, while a
    /// restore retry is not yet due, and while one of its sessions is being released. A scope
    /// with a resident runs on the resident's worker or waits for it (never forking onto a cold
    /// session); a resident whose configuration changed is disposed first. Other scopes take a
    /// worker that hosts no resident, else a spawn, else (only then) a resident's worker:
    /// residency counts against capacity.
    pub fn plan(
        &mut self,
        view: &[SlotView],
        config: &SessionConfig,
        now: Moment,
    ) -> Vec<(K, Target)> {
        self.fingerprint = config.fingerprint;
        let mut ready: Vec<(Seq, K)> = self
            .scopes
            .iter()
            .filter(|(_, s)| {
                s.running.is_none()
                    && s.releasing.is_empty()
                    && s.retry.is_none_or(|r| r.next_at <= now)
            })
            .filter_map(|(k, s)| s.pending.front().map(|seq| (seq, k.clone())))
            .collect();
        ready.sort();
        let mut taken = vec![false; view.len()];
        let mut spawning = view.iter().filter(|v| **v == SlotView::Spawning).count();
        let mut out = Vec::new();
        for (_, scope) in ready {
            if let Some(r) = self.residents.get(&scope).cloned() {
                if r.fingerprint != config.fingerprint {
                    self.dispose(&scope, DisposeReason::ConfigChanged);
                    continue;
                }
                match view.get(r.slot) {
                    Some(SlotView::Idle) if !taken[r.slot] => {
                        taken[r.slot] = true;
                        self.state(&scope).waiting = false;
                        out.push((scope, Target::Slot(r.slot)));
                        continue;
                    }
                    Some(SlotView::Idle | SlotView::Busy) => {
                        let state = self.state(&scope);
                        if !state.waiting {
                            state.waiting = true;
                            let label = scope.label();
                            self.record(Record::CapacityWait {
                                scope: label,
                                slot: r.slot,
                            });
                        }
                        continue;
                    }
                    // The worker is gone: so is the session.
                    _ => self.dispose(&scope, DisposeReason::AgentExit),
                }
            }
            if !self.residents.enabled() {
                out.push((scope, Target::Any));
                continue;
            }
            let idle = |i: usize| view[i] == SlotView::Idle && !taken[i];
            if let Some(i) = (0..view.len()).find(|&i| idle(i) && !self.residents.hosts(i)) {
                taken[i] = true;
                out.push((scope, Target::Slot(i)));
            } else if spawning > 0 {
                // A worker on its way will serve this scope.
                spawning -= 1;
            } else if let Some(j) =
                (0..view.len()).find(|&j| view[j] == SlotView::Empty && !taken[j])
            {
                taken[j] = true;
                out.push((scope, Target::Spawn(j)));
            } else if let Some(i) = (0..view.len()).find(|&i| idle(i)) {
                taken[i] = true;
                out.push((scope, Target::Slot(i)));
            }
        }
        out
    }

    /// Starts `scope`'s turn on worker `slot` (the harness claimed it): takes every pending input
    /// as one batch and decides how the session is reached. `lookup` reads the scope's receipt;
    /// it is called only when a stored session may be reopened. Returns `None` when the scope
    /// has nothing to start (the harness then hands the worker back).
    pub fn start(
        &mut self,
        scope: &K,
        slot: usize,
        config: &SessionConfig,
        lookup: impl FnOnce() -> Result<Option<SessionRecord>, String>,
    ) -> Option<Batch<I>> {
        self.fingerprint = config.fingerprint;
        let state = self.scopes.get(scope)?;
        if state.running.is_some() || state.pending.is_empty() {
            return None;
        }
        let via = match self.residents.get(scope).cloned() {
            Some(r) if r.slot == slot => {
                self.residents.touch(scope);
                Via::Hot {
                    session_id: r.session_id,
                }
            }
            resident => {
                if resident.is_some() {
                    self.dispose(scope, DisposeReason::Replaced);
                }
                self.warm_or_cold(scope, config, lookup)
            }
        };
        self.next_start += 1;
        let start = self.next_start;
        let state = self.state(scope);
        let (batch, inputs) = state.pending.take();
        state.waiting = false;
        let session_id = match &via {
            Via::Hot { session_id } => Some(session_id.clone()),
            _ => None,
        };
        let cold_reason = match &via {
            Via::Cold { reason } => Some(*reason),
            _ => None,
        };
        let kind = via.kind();
        state.running = Some(Running {
            slot,
            plan: Plan {
                via,
                fresh: state.fresh,
            },
            inputs,
            steered: Vec::new(),
            session_id,
            cancel_requested: false,
            abandoned: false,
            config: config.clone(),
            window: Vec::new(),
        });
        self.record(Record::TurnStarted {
            scope: scope.label(),
            start,
            slot,
            via: kind,
            cold_reason,
        });
        Some(batch)
    }

    fn warm_or_cold(
        &mut self,
        scope: &K,
        config: &SessionConfig,
        lookup: impl FnOnce() -> Result<Option<SessionRecord>, String>,
    ) -> Via {
        let state = self.state(scope);
        let reason = if state.fresh {
            ColdReason::Abandoned
        } else if state.restore_abandoned {
            ColdReason::RestoreAbandoned
        } else if !self.config.resume {
            ColdReason::ResumeOff
        } else {
            match lookup() {
                Err(e) => {
                    tracing::warn!(scope = %scope.label(), error = %e, "receipt store unreadable; opening a new session");
                    ColdReason::StoreUnavailable
                }
                Ok(None) => ColdReason::NoReceipt,
                Ok(Some(record)) => {
                    if record.requested_model != config.requested_model {
                        ColdReason::ModelChanged
                    } else if record.requested_permission_mode != config.requested_permission_mode {
                        ColdReason::PermissionModeChanged
                    } else {
                        return Via::Warm { record };
                    }
                }
            }
        };
        Via::Cold { reason }
    }

    /// The plan of `scope`'s running turn, for its task; records the ids of the turn's context
    /// window (what the persisted ledger may keep). Upstream's plan when nothing is running.
    pub fn plan_for(&mut self, scope: &K, window: Vec<String>) -> Plan {
        match self.scopes.get_mut(scope).and_then(|s| s.running.as_mut()) {
            Some(running) => {
                running.window = window;
                running.plan.clone()
            }
            None => Plan::default(),
        }
    }

    // ----- reports -----------------------------------------------------------------------

    /// A turn task opened `scope`'s session.
    pub fn opened(&mut self, scope: &K, opened: Opened) {
        match &opened {
            Opened::Restored { session_id, method } => {
                let record = Record::SessionRestored {
                    scope: scope.label(),
                    session_id: session_id.clone(),
                    method: *method,
                };
                self.record(record);
            }
            Opened::Lost {
                session_id,
                method,
                detail,
            } => {
                let record = Record::SessionLost {
                    scope: scope.label(),
                    session_id: session_id.clone(),
                    method: *method,
                };
                self.record(record);
                let trigger = self.scopes.get(scope).and_then(|s| s.running.as_ref());
                if let Some((_, trigger)) = trigger.and_then(|r| r.inputs.last()).cloned() {
                    self.notice(scope, trigger, notice::restore_lost(detail));
                }
                return;
            }
            Opened::Created { .. } => {}
        }
        let resume = self.config.resume;
        let state = self.state(scope);
        let mut abandoned = false;
        let mut requested = SessionConfig::default();
        if let Some(running) = state.running.as_mut() {
            running.session_id = Some(opened.session_id().to_string());
            abandoned = running.abandoned;
            requested = running.config.clone();
        }
        state.retry = None;
        if abandoned {
            // Opened by a turn that started before the scope was abandoned: it must not become
            // the scope's receipt, and the fresh-session request still stands.
            return;
        }
        if let Opened::Created {
            session_id,
            model,
            permission_mode,
        } = opened
        {
            state.fresh = false;
            state.restore_abandoned = false;
            if resume {
                let mut record = SessionRecord::new(session_id);
                record.model = model;
                record.permission_mode = permission_mode;
                record.requested_model = requested.requested_model;
                record.requested_permission_mode = requested.requested_permission_mode;
                self.persists.push(Persist::Put {
                    scope: scope.clone(),
                    record,
                });
            }
        }
    }

    /// The owner asked to cancel `scope`'s running turn.
    pub fn cancel_requested(&mut self, scope: &K) {
        if let Some(running) = self.scopes.get_mut(scope).and_then(|s| s.running.as_mut()) {
            running.cancel_requested = true;
        }
    }

    /// `scope`'s turn ended.
    pub fn turn_end(&mut self, scope: &K, outcome: TurnOutcome, now: Moment) {
        let Some(running) = self.scopes.get_mut(scope).and_then(|s| s.running.take()) else {
            return;
        };
        let Running {
            slot,
            inputs,
            steered,
            session_id,
            cancel_requested,
            abandoned,
            config,
            window,
            plan: _,
        } = running;
        let fingerprint = config.fingerprint;
        let trigger = inputs.last().map(|(_, i)| i.clone());
        match outcome {
            TurnOutcome::Replied {
                session_id: answered,
                rotated,
            } => {
                self.requeue_direct(scope, steered);
                let state = self.state(scope);
                state.retry = None;
                // An abandoned session's ledger is not committed: its receipt is gone.
                state.settle = (!abandoned).then(|| Settle {
                    slot,
                    window,
                    triggers: inputs.iter().map(|(_, i)| i.id().to_string()).collect(),
                    reply: None,
                });
                if abandoned {
                    self.release(scope, slot, &answered);
                } else if rotated {
                    self.abandon(scope, vec![(slot, answered)]);
                } else if self.residents.enabled() {
                    if cancel_requested {
                        self.drop_live(scope, slot, &answered, DisposeReason::CancelLostRace);
                    } else if fingerprint != self.fingerprint {
                        self.drop_live(scope, slot, &answered, DisposeReason::ConfigChanged);
                    } else {
                        self.keep(scope, slot, &answered, fingerprint);
                    }
                }
            }
            TurnOutcome::Cancelled => {
                self.requeue_direct(scope, steered);
                if let Some(sid) = session_id.filter(|_| self.residents.enabled()) {
                    self.drop_live(scope, slot, &sid, DisposeReason::Cancelled);
                }
            }
            TurnOutcome::Rotated => {
                self.requeue_direct(scope, steered);
                // The owner's `!rotate` already abandoned the scope; the turn's own session,
                // which the task dropped from memory, is closed.
                if let Some(sid) = session_id {
                    self.release(scope, slot, &sid);
                }
            }
            TurnOutcome::Requeued { extra } => {
                self.returning_all(inputs);
                let (absorbed, left): (Vec<_>, Vec<_>) = steered
                    .into_iter()
                    .partition(|(_, i)| extra.iter().any(|id| id == i.id()));
                self.returning_all(absorbed);
                self.requeue_direct(scope, left);
            }
            TurnOutcome::Failed => {
                self.returning_all(inputs);
                self.requeue_direct(scope, steered);
                if let Some(sid) = session_id.filter(|_| self.residents.enabled()) {
                    self.drop_live(scope, slot, &sid, DisposeReason::TurnFailed);
                }
            }
            TurnOutcome::WorkerLost => {
                self.returning_all(inputs);
                self.requeue_direct(scope, steered);
                self.worker_lost(slot);
            }
            TurnOutcome::RestoreUndecided { method, detail } => {
                self.returning_all(inputs);
                self.requeue_direct(scope, steered);
                let streak = self.state(scope).retry;
                match self.config.retry.after_failure(streak, now) {
                    AfterFailure::Retry { streak, first } => {
                        self.state(scope).retry = Some(streak);
                        self.record(Record::RestoreRetry {
                            scope: scope.label(),
                            method,
                            attempts: streak.attempts,
                            retry_in_ms: streak.next_at.since(now).as_millis() as u64,
                        });
                        if first && let Some(trigger) = trigger {
                            let text = notice::restore_retrying(
                                &detail,
                                self.config.retry.give_up_after,
                                self.config.owner_configured,
                            );
                            self.notice(scope, trigger, text);
                        }
                    }
                    AfterFailure::GiveUp { attempts, waited } => {
                        let state = self.state(scope);
                        state.retry = None;
                        state.restore_abandoned = true;
                        self.record(Record::RestoreAbandoned {
                            scope: scope.label(),
                            method,
                            attempts,
                            waited_ms: waited.as_millis() as u64,
                        });
                        if let Some(trigger) = trigger {
                            self.notice(scope, trigger, notice::restore_abandoned(&detail));
                        }
                    }
                }
            }
        }
        self.forget_if_bare(scope);
    }

    /// The reply to `scope`'s successful turn was published as event `reply_id`. It belongs to
    /// the session that wrote it and must never come back to it as context.
    pub fn replied(&mut self, scope: &K, reply_id: &str) {
        if let Some(settle) = self.scopes.get_mut(scope).and_then(|s| s.settle.as_mut()) {
            settle.reply = Some(reply_id.to_string());
        }
    }

    /// After a successful turn was published and marked handled: commit what the session has been
    /// shown (`delivered`, read from the worker). Only ids that can still come back in a context
    /// window are kept: the turn's window, its triggers and its reply. Older ids can never be
    /// re-sent, so remembering them would only grow the receipt. No-op for other outcomes.
    pub fn settled(&mut self, scope: &K, delivered: Option<Delivered>) {
        let settle = self.scopes.get_mut(scope).and_then(|s| s.settle.take());
        if let (true, Some(settle), Some(d)) = (self.config.resume, settle, delivered) {
            let keep: Vec<String> = d
                .event_ids
                .into_iter()
                .filter(|id| {
                    settle.window.contains(id)
                        || settle.triggers.contains(id)
                        || settle.reply.as_deref() == Some(id.as_str())
                })
                .collect();
            self.persists.push(Persist::Commit {
                scope: scope.clone(),
                session_id: d.session_id,
                standing_context_sent: d.standing_context_sent,
                event_ids: keep,
            });
        }
        self.forget_if_bare(scope);
    }

    /// Successful turns waiting for [`Lifecycle::settled`], with their worker slots.
    pub fn settling(&self) -> Vec<(K, usize)> {
        self.scopes
            .iter()
            .filter_map(|(k, s)| s.settle.as_ref().map(|settle| (k.clone(), settle.slot)))
            .collect()
    }

    /// A [`Effect::Release`] of `scope` finished (or was given up because the worker is gone).
    pub fn released(&mut self, scope: &K, session_id: &str) {
        if let Some(state) = self.scopes.get_mut(scope) {
            state.releasing.retain(|s| s != session_id);
        }
        self.forget_if_bare(scope);
    }

    // ----- decisions from outside a turn -------------------------------------------------

    /// An in-process decision to abandon `scope`'s session (`!rotate`, a model switch, a
    /// rotation after a limit): the resident goes, the receipt goes in the same step, and the
    /// next `session/new` asks for a fresh session. `live` lists the scope's sessions idle
    /// workers still hold (worker slot, session id): they are released too. Agent death is not
    /// such a decision.
    pub fn abandon(&mut self, scope: &K, live: Vec<(usize, String)>) {
        self.dispose(scope, DisposeReason::Abandoned);
        for (slot, session_id) in live {
            self.release(scope, slot, &session_id);
        }
        self.mark_abandoned(scope);
        self.persists.push(Persist::Remove {
            scope: scope.clone(),
        });
    }

    /// The agent was removed from `channel`: every session there is abandoned (residents are
    /// released; the harness drops the other sessions of the channel from its workers).
    pub fn abandon_channel(&mut self, channel: &str) {
        let scopes: Vec<K> = self
            .scopes
            .keys()
            .filter(|k| k.channel() == channel)
            .cloned()
            .collect();
        for (scope, resident) in self.residents.dispose_where(|k, _| k.channel() == channel) {
            self.disposed(&scope, resident, DisposeReason::Abandoned);
        }
        for scope in scopes {
            self.mark_abandoned(&scope);
        }
        self.persists.push(Persist::RemoveChannel {
            channel: channel.to_string(),
        });
    }

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

    /// Disposes every resident `pick` selects, for `reason`.
    fn dispose_all(&mut self, pick: impl Fn(&Resident) -> bool, reason: DisposeReason) {
        for (scope, resident) in self.residents.dispose_where(|_, r| pick(r)) {
            self.disposed(&scope, resident, reason);
        }
    }

    /// The bookkeeping of an abandonment: a running turn's session will not be kept, the next
    /// `session/new` asks for a fresh session, and no restore is pending or given up on.
    fn mark_abandoned(&mut self, scope: &K) {
        let state = self.state(scope);
        if let Some(running) = state.running.as_mut() {
            running.abandoned = true;
        }
        state.fresh = true;
        state.restore_abandoned = false;
        state.retry = None;
    }

    // ----- output ------------------------------------------------------------------------

    /// Effects decided since the last call, in order.
    pub fn take_effects(&mut self) -> Vec<Effect<K, I>> {
        std::mem::take(&mut self.effects)
    }

    /// Store writes decided since the last call, in order.
    pub fn take_persists(&mut self) -> Vec<Persist<K>> {
        std::mem::take(&mut self.persists)
    }

    // ----- queries -----------------------------------------------------------------------

    /// Pending input across scopes.
    pub fn pending_total(&self) -> usize {
        self.scopes.values().map(|s| s.pending.len()).sum()
    }

    /// `scope`'s resident.
    pub fn resident(&self, scope: &K) -> Option<&Resident> {
        self.residents.get(scope)
    }

    /// Number of residents.
    pub fn residents(&self) -> usize {
        self.residents.len()
    }

    /// Scopes the lifecycle currently remembers anything about.
    pub fn tracked_scopes(&self) -> usize {
        self.scopes.len()
    }

    // ----- internals ---------------------------------------------------------------------

    fn record(&mut self, record: Record) {
        self.effects.push(Effect::Record(record));
    }

    fn notice(&mut self, scope: &K, trigger: I, text: String) {
        self.effects.push(Effect::Notice(Notice {
            scope: scope.clone(),
            trigger,
            text,
        }));
    }

    fn returning_all(&mut self, inputs: Vec<(Seq, I)>) {
        for (seq, input) in inputs {
            self.returning.insert(input.id().to_string(), seq);
        }
    }

    fn requeue_direct(&mut self, scope: &K, inputs: Vec<(Seq, I)>) {
        for (seq, input) in inputs {
            self.state(scope).pending.insert(seq, input);
        }
    }

    /// Asks the harness to free a session, once: a session already being released (e.g. a
    /// resident disposed by `!rotate` whose turn then ends rotated) is not released again.
    fn release(&mut self, scope: &K, slot: usize, session_id: &str) {
        let releasing = &mut self.state(scope).releasing;
        if releasing.iter().any(|s| s == session_id) {
            return;
        }
        releasing.push(session_id.to_string());
        self.effects.push(Effect::Release {
            scope: scope.clone(),
            slot,
            session_id: session_id.to_string(),
        });
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
    }

    fn dispose(&mut self, scope: &K, reason: DisposeReason) {
        if let Some(resident) = self.residents.dispose(scope) {
            self.disposed(scope, resident, reason);
        }
    }

    /// A live session that is not (or no longer) kept: dispose its resident, or release it.
    fn drop_live(&mut self, scope: &K, slot: usize, session_id: &str, reason: DisposeReason) {
        let resident = self.residents.get(scope).cloned();
        match resident {
            Some(r) if r.session_id == session_id => self.dispose(scope, reason),
            _ => self.release(scope, slot, session_id),
        }
    }

    fn keep(&mut self, scope: &K, slot: usize, session_id: &str, fingerprint: u64) {
        let scopes = &self.scopes;
        let busy = |k: &K| scopes.get(k).is_some_and(|s| s.running.is_some());
        let (new, gone) = self
            .residents
            .keep(scope, slot, session_id, fingerprint, busy);
        for (other, resident, reason) in gone {
            self.disposed(&other, resident, reason);
        }
        if new {
            self.record(Record::ResidentKept {
                scope: scope.label(),
                slot,
                session_id: session_id.to_string(),
            });
        }
    }
}
