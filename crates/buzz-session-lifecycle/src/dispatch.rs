//! Dispatch: from the harness's queue to turns on workers, through the lifecycle.
//!
//! The harness implements [`Workers`] for its pool and [`Inbox`] for its queue (thin adapters in
//! its glue); [`Driver::dispatch`] is the one place that goes from "input is waiting" to "this
//! batch runs on this worker with this plan". The property tests drive the same function with
//! model workers and a model queue, so what they prove is what the harness runs.

use crate::driver::Driver;
use crate::gate::AgentCaps;
use crate::placement::{Placed, Ready, SlotView, StoreHealth, Target};
use crate::reach::{Plan, ReachKind};
use crate::scope::{Input, Scope};

/// What a claim of a worker for a scope gave.
#[derive(Debug)]
pub enum Claimed<W> {
    /// This worker, checked out for the scope's turn.
    Worker(W),
    /// No idle worker, but this empty slot may spawn one.
    Spawn(usize),
    /// Nothing now (the pool holds the scope for its busy owner, or has no capacity).
    Wait,
}

/// The harness's worker pool, as dispatch uses it.
pub trait Workers<K> {
    /// A checked-out worker.
    type Worker;
    /// Every slot's state.
    fn view(&self) -> Vec<SlotView>;
    /// Whether some idle worker holds a live session of `scope`.
    fn held(&self, scope: &K) -> bool;
    /// Checks out a worker for `scope` as `target` says (`Target::Any`: the pool's own routing).
    fn claim(&mut self, target: Target, scope: &K) -> Claimed<Self::Worker>;
    /// The slot of a checked-out worker.
    fn slot(&self, worker: &Self::Worker) -> usize;
    /// The live session `worker` holds for `scope`.
    fn live(&self, worker: &Self::Worker, scope: &K) -> Option<String>;
    /// What `worker`'s agent advertised at `initialize`.
    fn caps(&self, worker: &Self::Worker) -> Option<AgentCaps>;
    /// Hands an unused worker back.
    fn give_back(&mut self, worker: Self::Worker);
    /// Slots whose worker is being spawned.
    fn spawning(&self) -> usize;
    /// Marks `slot` as spawning (the harness starts the spawn for each [`Step::Spawn`]).
    fn begin_spawn(&mut self, slot: usize);
}

/// The harness's queue, as dispatch uses it.
pub trait Inbox<K, I> {
    /// One turn's batch of input.
    type Batch;
    /// Scopes with input waiting and no turn running, oldest input first.
    fn ready(&self) -> Vec<K>;
    /// Takes everything waiting for `scope` as one batch.
    fn take(&mut self, scope: &K) -> Option<Self::Batch>;
    /// The inputs of a batch, in order.
    fn inputs(batch: &Self::Batch) -> Vec<I>;
}

/// What the harness must start.
#[allow(clippy::large_enum_variant)] // a receipt (with `continuity`) is large; moved once per turn or store call, never kept in bulk
#[derive(Debug)]
pub enum Step<W, B> {
    /// Spawn a worker into this slot (already marked spawning).
    Spawn(usize),
    /// Run this batch on this worker, reaching the session as planned.
    Turn {
        /// The worker.
        worker: W,
        /// The batch.
        batch: B,
        /// How the session is reached.
        plan: Plan,
    },
}

impl<K: Scope + Send + Sync + 'static, I: Input> Driver<K, I> {
    /// Decides which waiting scopes run now and where, claims their workers, takes their
    /// batches and plans how each reaches its session. Returns what the harness must start.
    pub fn dispatch<P, Q>(
        &mut self,
        workers: &mut P,
        inbox: &mut Q,
    ) -> Vec<Step<P::Worker, Q::Batch>>
    where
        P: Workers<K>,
        Q: Inbox<K, I>,
    {
        self.take_in();
        let now = self.now();
        let ready: Vec<Ready<K>> = inbox
            .ready()
            .into_iter()
            .map(|scope| Ready {
                held: workers.held(&scope),
                scope,
            })
            .collect();
        let store = if self.store_down() {
            StoreHealth::Down
        } else {
            StoreHealth::Answering
        };
        let placed = self.lifecycle.place(&ready, &workers.view(), store, now);
        let mut steps = Vec::new();
        let mut spawning = workers.spawning();
        let mut waiting = 0;
        for placed in placed {
            let (scope, target, check) = match placed {
                Placed::Read(scope) => {
                    self.lifecycle.read_receipt(&scope, now);
                    continue;
                }
                Placed::WaitForResident(scope, slot) => {
                    self.lifecycle.waiting_for_resident(&scope, slot);
                    continue;
                }
                Placed::Dispose(scope, reason) => {
                    self.lifecycle.dispose_resident(&scope, reason);
                    continue;
                }
                Placed::Run(scope, target) => (scope, target, false),
                Placed::RunChecked(scope, target) => (scope, target, true),
            };
            match workers.claim(target, &scope) {
                Claimed::Worker(worker) => {
                    let live = workers.live(&worker, &scope);
                    if live.is_none() && self.lifecycle.needs_read(&scope) {
                        // Placed without a read because an idle worker held the scope's live
                        // session, but the pool handed out another worker: the turn cannot
                        // continue the session, so the receipt is read first.
                        workers.give_back(worker);
                        self.lifecycle.read_receipt(&scope, now);
                        continue;
                    }
                    let Some(batch) = inbox.take(&scope) else {
                        workers.give_back(worker);
                        continue;
                    };
                    let slot = workers.slot(&worker);
                    let caps = workers.caps(&worker);
                    let inputs = Q::inputs(&batch);
                    let mut plan = self.lifecycle.start(&scope, slot, inputs, live, caps, now);
                    if check && plan.reach.kind() == ReachKind::Hot {
                        // The turn continues the live session without waiting for the store.
                        self.lifecycle.check_receipt(&scope, now);
                    }
                    plan.report = self.mailbox().reporter(&scope);
                    steps.push(Step::Turn {
                        worker,
                        batch,
                        plan,
                    });
                }
                Claimed::Spawn(slot) => {
                    // A planned spawn already counts the workers on their way; the pool's own
                    // routing spawns at most one worker per scope waiting for one.
                    waiting += 1;
                    if matches!(target, Target::Spawn(_)) || spawning < waiting {
                        workers.begin_spawn(slot);
                        spawning += 1;
                        steps.push(Step::Spawn(slot));
                    }
                }
                Claimed::Wait => {}
            }
        }
        self.take_out();
        steps
    }
}
