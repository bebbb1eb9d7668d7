//! The imperative shell around [`Lifecycle`]: the clock, the receipt store and the mailbox.
//!
//! The harness's event loop owns one [`Driver`]. Turn tasks never touch it: they only post to
//! its [`Mailbox`] when they open a session. Every store write happens here, in the event loop,
//! once per event: a receipt when a session is created, the delivery ledger once per successful
//! turn, a removal when a session is abandoned.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use buzz_session_store::{
    CommitOutcome, Expect, KeyScheme, ReceiptStore, ScopeKey, TurnCommit, UnixMillis,
};
use serde_json::Value;
use tokio::time::Instant;

use crate::clock::Moment;
use crate::effect::{Effect, Notice, Persist};
use crate::gate::RestoreMethod;
use crate::lifecycle::{Lifecycle, LifecycleConfig, RunningRoute};
use crate::pending::Batch;
use crate::plan::{Plan, SessionConfig, SlotView, Target};
use crate::report::{Delivered, Opened, TurnOutcome};
use crate::scope::{Input, Scope};

/// Where turn tasks report the sessions they open. Cheap to clone; shared by the event loop
/// (which drains it) and every turn task (which posts).
#[derive(Debug)]
pub struct Mailbox<K>(Arc<Mutex<Vec<(K, Opened)>>>);

impl<K> Clone for Mailbox<K> {
    fn clone(&self) -> Self {
        Mailbox(Arc::clone(&self.0))
    }
}

impl<K> Default for Mailbox<K> {
    fn default() -> Self {
        Mailbox(Arc::new(Mutex::new(Vec::new())))
    }
}

impl<K> Mailbox<K> {
    fn lock(&self) -> MutexGuard<'_, Vec<(K, Opened)>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reports that a session of `scope` was opened.
    fn post(&self, scope: K, opened: Opened) {
        self.lock().push((scope, opened));
    }

    /// Reports that `scope`'s stored session `session_id` was reopened with `method`.
    pub fn restored(&self, scope: &K, session_id: &str, method: RestoreMethod)
    where
        K: Clone,
    {
        let session_id = session_id.to_string();
        self.post(scope.clone(), Opened::Restored { session_id, method });
    }

    /// Reports that the agent answered `method` with `detail`: it no longer has `session_id`.
    pub fn lost(&self, scope: &K, session_id: &str, method: RestoreMethod, detail: String)
    where
        K: Clone,
    {
        let session_id = session_id.to_string();
        self.post(
            scope.clone(),
            Opened::Lost {
                session_id,
                method,
                detail,
            },
        );
    }

    /// Reports that `session/new` created `session_id` for `scope`, with the model and permission
    /// mode actually applied (`None`: the agent's default).
    pub fn created(
        &self,
        scope: &K,
        session_id: &str,
        model: &Option<String>,
        permission_mode: &Option<String>,
    ) where
        K: Clone,
    {
        let opened = Opened::Created {
            session_id: session_id.to_string(),
            model: model.clone(),
            permission_mode: permission_mode.clone(),
        };
        self.post(scope.clone(), opened);
    }

    fn drain(&self) -> Vec<(K, Opened)> {
        std::mem::take(&mut *self.lock())
    }
}

/// The store key of a scope under a key scheme.
fn store_key<K: Scope>(scope: &K, scheme: KeyScheme) -> ScopeKey {
    let key = match scope.thread_root() {
        Some(root) => ScopeKey::thread(scope.channel(), root),
        None => ScopeKey::conversation(scope.channel()),
    };
    scheme.map(&key)
}

/// Where telemetry records go: the harness's observer (`kind`, fields).
pub type RecordSink = Box<dyn Fn(&str, Value) + Send>;

/// The lifecycle, driven from the harness's event loop.
pub struct Driver<K, I> {
    lifecycle: Lifecycle<K, I>,
    deferred: Vec<Effect<K, I>>,
    notices: Vec<Notice<K, I>>,
    store: Box<dyn ReceiptStore>,
    mailbox: Mailbox<K>,
    records: RecordSink,
    origin: Instant,
    session: SessionConfig,
    fixed: Vec<String>,
}

impl<K: std::fmt::Debug, I: std::fmt::Debug> std::fmt::Debug for Driver<K, I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Driver")
            .field("lifecycle", &self.lifecycle)
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl<K: Scope, I: Input> Driver<K, I> {
    /// A driver over `store` (keyed by its scheme), reading session reports from `mailbox` and
    /// writing telemetry to `records`.
    pub fn new(
        config: LifecycleConfig,
        store: Box<dyn ReceiptStore>,
        mailbox: Mailbox<K>,
        records: RecordSink,
    ) -> Self {
        Driver {
            lifecycle: Lifecycle::new(config),
            deferred: Vec::new(),
            notices: Vec::new(),
            store,
            mailbox,
            records,
            origin: Instant::now(),
            session: SessionConfig::default(),
            fixed: Vec::new(),
        }
    }

    /// Now, on the lifecycle's clock (tokio's, so tests can pause it).
    pub fn now(&self) -> Moment {
        Moment::from_elapsed(Instant::now().duration_since(self.origin))
    }

    /// The configuration a new session gets: `fixed` is everything set at `session/new` that
    /// does not change at runtime (cwd, MCP servers); the model and permission mode are the
    /// requested ones.
    pub fn configure_sessions(
        &mut self,
        fixed: &[&str],
        model: Option<&str>,
        permission_mode: Option<&str>,
    ) {
        self.fixed = fixed.iter().map(|s| s.to_string()).collect();
        self.session = SessionConfig::new(fixed, model, permission_mode);
    }

    /// The owner switched the model (`!model`): new sessions get it, and residents created under
    /// the old model are not continued. (The scope the command came from is abandoned
    /// separately.)
    pub fn set_model(&mut self, model: &str) {
        let fixed: Vec<&str> = self.fixed.iter().map(String::as_str).collect();
        let mode = self.session.requested_permission_mode.clone();
        self.session = SessionConfig::new(&fixed, Some(model), mode.as_deref());
    }

    /// Admits input the harness queued (new, or handed back by an ended turn).
    pub fn admit(&mut self, batches: impl IntoIterator<Item = (K, Batch<I>)>) {
        for (scope, batch) in batches {
            self.lifecycle.admit(&scope, batch);
        }
        self.lifecycle.end_of_inbox();
    }

    /// See [`Lifecycle::route_running`].
    pub fn route_running(&mut self, scope: &K, input: I, steer: bool) -> RunningRoute<I> {
        self.lifecycle.route_running(scope, input, steer)
    }

    /// See [`Lifecycle::plan`].
    pub fn plan(&mut self, view: &[SlotView]) -> Vec<(K, Target)> {
        self.collect_mail();
        let now = self.now();
        let targets = self.lifecycle.plan(view, &self.session, now);
        self.flush();
        targets
    }

    /// See [`Lifecycle::start`]; reads the receipt when a stored session may be reopened.
    pub fn start(&mut self, scope: &K, slot: usize) -> Option<Batch<I>> {
        let store = &self.store;
        // Only a scope that may reopen a stored session reads its receipt.
        let lookup = || {
            let key = store_key(scope, store.scheme());
            store.get(&key).map_err(|e| e.to_string())
        };
        let batch = self.lifecycle.start(scope, slot, &self.session, lookup);
        self.flush();
        batch
    }

    /// See [`Lifecycle::plan_for`].
    pub fn plan_for(&mut self, scope: &K, window: impl IntoIterator<Item = String>) -> Plan {
        self.lifecycle.plan_for(scope, window.into_iter().collect())
    }

    /// See [`Lifecycle::turn_end`]: `scope`'s turn ended with `outcome`.
    pub fn turn_end(&mut self, scope: &K, outcome: TurnOutcome) {
        self.collect_mail();
        let now = self.now();
        self.lifecycle.turn_end(scope, outcome, now);
        self.flush();
    }

    /// See [`Lifecycle::replied`].
    pub fn replied(&mut self, scope: &K, reply_id: &str) {
        self.lifecycle.replied(scope, reply_id);
    }

    /// See [`Lifecycle::settled`].
    pub fn settled(&mut self, scope: &K, delivered: Option<Delivered>) {
        self.lifecycle.settled(scope, delivered);
        self.flush();
    }

    /// See [`Lifecycle::released`].
    pub fn released(&mut self, scope: &K, session_id: &str) {
        self.lifecycle.released(scope, session_id);
    }

    /// See [`Lifecycle::cancel_requested`].
    pub fn cancel_requested(&mut self, scope: &K) {
        self.lifecycle.cancel_requested(scope);
    }

    /// See [`Lifecycle::abandon`].
    pub fn abandon(&mut self, scope: &K, live: Vec<(usize, String)>) {
        self.lifecycle.abandon(scope, live);
        self.flush();
    }

    /// See [`Lifecycle::abandon_channel`].
    pub fn abandon_channel(&mut self, channel: &str) {
        self.lifecycle.abandon_channel(channel);
        self.flush();
    }

    /// See [`Lifecycle::pool_slept`].
    pub fn pool_slept(&mut self) {
        self.lifecycle.pool_slept();
    }

    /// See [`Lifecycle::shutdown`]; also writes any receipt still in the mailbox.
    pub fn shutdown(&mut self) {
        self.collect_mail();
        self.lifecycle.shutdown();
    }

    /// Input the lifecycle holds for a later turn (waiting for a worker or a restore retry).
    /// Upstream's queue is empty between dispatches, so whatever asks "is work waiting?" (the
    /// idle pool sleep, the inactivity exit, `--once` giving up on agents) must count this too.
    pub fn waiting(&self) -> usize {
        self.lifecycle.pending_total()
    }

    /// See [`Lifecycle::settling`].
    pub fn settling(&self) -> Vec<(K, usize)> {
        self.lifecycle.settling()
    }

    /// Effects for the harness decided so far (after taking in the mailbox), notices aside.
    pub fn take_effects(&mut self) -> Vec<Effect<K, I>> {
        self.sort_effects();
        std::mem::take(&mut self.deferred)
    }

    /// Notices decided so far, in order, to be posted in their threads (never part of
    /// [`Driver::take_effects`]; posted where the harness publishes).
    ///
    /// A notice is about a message that is still waiting for its answer. Where replies are
    /// exactly-once (an agent event that names a message as the one it replies to *is* that
    /// message's answer), a notice must not name its trigger that way, or the real answer would
    /// never be published and a restart would skip the message.
    pub fn take_notices(&mut self) -> Vec<Notice<K, I>> {
        self.sort_effects();
        std::mem::take(&mut self.notices)
    }

    /// Takes in the mailbox, then sorts the lifecycle's new effects: telemetry records go
    /// straight to the record sink, notices to [`Driver::take_notices`], everything else, in
    /// order, behind what is already waiting for [`Driver::take_effects`].
    fn sort_effects(&mut self) {
        self.collect_mail();
        for effect in self.lifecycle.take_effects() {
            match effect {
                Effect::Record(record) => {
                    let (kind, fields) = record.observer_event();
                    (self.records)(&kind, fields);
                }
                Effect::Notice(notice) => self.notices.push(notice),
                other => self.deferred.push(other),
            }
        }
    }

    /// Hands an effect back that cannot run yet (a release whose worker is busy): it comes out of
    /// the next [`Driver::take_effects`] again, first.
    pub fn defer(&mut self, effect: Effect<K, I>) {
        self.deferred.push(effect);
    }

    /// Takes in the sessions turn tasks opened and writes their receipts.
    fn collect_mail(&mut self) {
        for (scope, opened) in self.mailbox.drain() {
            self.lifecycle.opened(&scope, opened);
        }
        self.flush();
    }

    /// Executes the store writes the lifecycle decided. The store is an optimisation: a failed
    /// write is logged and never stops a turn.
    fn flush(&mut self) {
        for persist in self.lifecycle.take_persists() {
            self.persist(persist);
        }
    }

    fn persist(&self, persist: Persist<K>) {
        let now = UnixMillis::now();
        let scheme = self.store.scheme();
        match persist {
            Persist::Put { scope, record } => {
                let key = store_key(&scope, scheme);
                // Replaces whatever is stored, as before conditional writes existed.
                match self
                    .store
                    .put(&key, &record, &Expect::NotWrittenSince(now), now)
                {
                    Ok(outcome) => {
                        tracing::debug!(scope = %scope.label(), session_id = %record.session_id, ?outcome, "receipt written")
                    }
                    Err(e) => {
                        tracing::warn!(scope = %scope.label(), session_id = %record.session_id, error = %e, "could not write the session receipt")
                    }
                }
            }
            Persist::Commit {
                scope,
                session_id,
                standing_context_sent,
                event_ids,
            } => {
                let key = store_key(&scope, scheme);
                // The stored ledger becomes exactly `event_ids`.
                let commit = TurnCommit {
                    session_id: session_id.clone(),
                    delivered_event_ids: event_ids,
                    standing_context_sent,
                    turns: None,
                    usage: None,
                    handoff_delivered: false,
                };
                let stored = self.store.commit_turn(&key, &commit, now);
                match stored {
                    Ok(CommitOutcome::Written | CommitOutcome::Unchanged) => {
                        tracing::debug!(scope = %scope.label(), %session_id, "delivery ledger committed");
                    }
                    Ok(outcome) => {
                        tracing::info!(scope = %scope.label(), %session_id, ?outcome, "delivery ledger not committed")
                    }
                    Err(e) => {
                        tracing::warn!(scope = %scope.label(), %session_id, error = %e, "could not commit the delivery ledger")
                    }
                }
            }
            Persist::Remove { scope } => {
                let key = store_key(&scope, scheme);
                if let Err(e) = self.store.remove(&key, &Expect::NotWrittenSince(now)) {
                    tracing::warn!(scope = %scope.label(), error = %e, "could not remove the session receipt");
                }
            }
            Persist::RemoveChannel { channel } => {
                if let Err(e) = self.store.remove_channel(&channel, now) {
                    tracing::warn!(%channel, error = %e, "could not remove the channel's session receipts");
                }
            }
        }
    }
}
