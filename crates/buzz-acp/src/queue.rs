//! The per-scope event queue (upstream's `EventQueue`): at most one turn in
//! flight per scope.
//!
//! Admitted events wait in a FIFO partition per [`SessionScope`]. When a scope
//! has no turn in flight, everything pending for it is flushed as one
//! [`FlushBatch`]. A failed batch goes back to the *front* of its partition, ahead of
//! anything that arrived meanwhile, so ordering inside a scope is preserved.

use std::collections::{HashMap, HashSet, VecDeque};

use crate::relay::{ChannelId, Event};
use crate::scope::SessionScope;

/// The triggering events of one turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlushBatch {
    /// The scope every event of the batch belongs to.
    pub scope: SessionScope,
    /// The triggering events, oldest first.
    pub events: Vec<Event>,
    /// How many times this batch was attempted before.
    pub attempts: u32,
    /// The events arrived while an earlier turn of the scope was running.
    pub steered: bool,
}

impl FlushBatch {
    /// The channel of the batch.
    pub fn channel_id(&self) -> &ChannelId {
        self.scope.channel_id()
    }

    /// Ids of the triggering events.
    pub fn event_ids(&self) -> Vec<String> {
        self.events.iter().map(|e| e.id.clone()).collect()
    }

    /// The newest trigger (replies answer it).
    pub fn last_event(&self) -> Option<&Event> {
        self.events.last()
    }
}

#[derive(Debug, Default)]
struct Partition {
    events: VecDeque<Event>,
    attempts: u32,
    steered: bool,
}

/// Pending work, partitioned by scope.
#[derive(Debug, Default)]
pub struct EventQueue {
    partitions: HashMap<SessionScope, Partition>,
    /// Scopes with pending work, in the order they first became pending.
    order: VecDeque<SessionScope>,
    in_flight: HashSet<SessionScope>,
}

impl EventQueue {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues an event for its scope.
    pub fn push(&mut self, scope: SessionScope, event: Event) {
        let partition = self.partitions.entry(scope.clone()).or_default();
        if partition.events.iter().any(|e| e.id == event.id) {
            return;
        }
        if partition.events.is_empty() {
            self.order.push_back(scope);
        }
        partition.events.push_back(event);
    }

    /// Puts a batch back at the front of its partition (after a failure or a
    /// steer), keeping its attempt count.
    pub fn requeue_front(&mut self, batch: FlushBatch) {
        let partition = self.partitions.entry(batch.scope.clone()).or_default();
        if partition.events.is_empty() {
            self.order.push_front(batch.scope.clone());
        }
        for event in batch.events.into_iter().rev() {
            if !partition.events.iter().any(|e| e.id == event.id) {
                partition.events.push_front(event);
            }
        }
        partition.attempts = partition.attempts.max(batch.attempts);
        partition.steered |= batch.steered;
    }

    /// Scopes that have pending work and no turn in flight, in queue order.
    pub fn ready_scopes(&self) -> Vec<SessionScope> {
        self.order
            .iter()
            .filter(|s| !self.in_flight.contains(*s))
            .cloned()
            .collect()
    }

    /// Takes everything pending for `scope` as one batch and marks the scope
    /// in flight. `None` when nothing is pending or a turn is in flight.
    pub fn take_batch(&mut self, scope: &SessionScope) -> Option<FlushBatch> {
        if self.in_flight.contains(scope) {
            return None;
        }
        let partition = self.partitions.remove(scope)?;
        self.order.retain(|s| s != scope);
        if partition.events.is_empty() {
            return None;
        }
        self.in_flight.insert(scope.clone());
        Some(FlushBatch {
            scope: scope.clone(),
            events: partition.events.into(),
            attempts: partition.attempts,
            steered: partition.steered,
        })
    }

    /// The turn of `scope` ended (whatever its outcome).
    pub fn finish(&mut self, scope: &SessionScope) {
        self.in_flight.remove(scope);
    }

    /// Whether `scope` has a turn in flight.
    pub fn is_in_flight(&self, scope: &SessionScope) -> bool {
        self.in_flight.contains(scope)
    }

    /// Number of turns in flight.
    pub fn in_flight_count(&self) -> usize {
        self.in_flight.len()
    }

    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Number of pending events across scopes.
    pub fn pending_events(&self) -> usize {
        self.partitions.values().map(|p| p.events.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::EventBuilder;

    const ALICE: &str = "b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2";

    fn ch() -> ChannelId {
        ChannelId::parse("0b8e2d4c-1f3a-4c5e-9d7b-2a6f8e1c3b5d").unwrap()
    }

    fn ev(text: &str, at: u64) -> Event {
        EventBuilder::message(ALICE, &ch(), text)
            .created_at(at)
            .build()
    }

    fn scope(root: &str) -> SessionScope {
        SessionScope::Thread {
            channel_id: ch(),
            root_event_id: root.to_string(),
        }
    }

    #[test]
    fn one_batch_per_scope_and_no_second_batch_while_in_flight() {
        let mut q = EventQueue::new();
        let a = scope("a");
        q.push(a.clone(), ev("1", 1));
        q.push(a.clone(), ev("2", 2));
        let batch = q.take_batch(&a).unwrap();
        assert_eq!(batch.events.len(), 2);
        q.push(a.clone(), ev("3", 3));
        assert!(q.take_batch(&a).is_none(), "scope is in flight");
        assert!(q.ready_scopes().is_empty());
        q.finish(&a);
        assert_eq!(q.take_batch(&a).unwrap().events[0].content, "3");
    }

    #[test]
    fn requeued_batch_goes_first_and_keeps_attempts() {
        let mut q = EventQueue::new();
        let a = scope("a");
        q.push(a.clone(), ev("1", 1));
        let mut batch = q.take_batch(&a).unwrap();
        q.push(a.clone(), ev("2", 2));
        q.finish(&a);
        batch.attempts += 1;
        q.requeue_front(batch);
        let again = q.take_batch(&a).unwrap();
        assert_eq!(
            again
                .events
                .iter()
                .map(|e| e.content.as_str())
                .collect::<Vec<_>>(),
            ["1", "2"]
        );
        assert_eq!(again.attempts, 1);
    }

    #[test]
    fn scopes_are_independent_and_fifo() {
        let mut q = EventQueue::new();
        q.push(scope("a"), ev("a1", 1));
        q.push(scope("b"), ev("b1", 2));
        assert_eq!(q.ready_scopes(), vec![scope("a"), scope("b")]);
        let _ = q.take_batch(&scope("a"));
        assert_eq!(q.ready_scopes(), vec![scope("b")]);
        assert_eq!(q.pending_events(), 1);
    }

    #[test]
    fn duplicate_events_are_queued_once() {
        let mut q = EventQueue::new();
        let e = ev("x", 1);
        q.push(scope("a"), e.clone());
        q.push(scope("a"), e);
        assert_eq!(q.pending_events(), 1);
    }
}
