//! The ordered input of one scope.
//!
//! Every admitted message gets a [`Seq`] the first time the lifecycle sees it and keeps it through
//! every requeue and retry. Pending input is kept sorted by it, so a batch that comes back after a
//! failed attempt, a steer or a resume retry goes in front of anything admitted after it: a message
//! admitted later is never answered before an earlier one of the same scope.

use crate::scope::Input;

/// Admission order across the whole harness.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Seq(pub(crate) u64);

impl Seq {
    /// The raw order number (for telemetry and tests).
    pub fn get(self) -> u64 {
        self.0
    }
}

/// The triggering inputs of one turn, oldest first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch<I> {
    /// The inputs, in admission order.
    pub inputs: Vec<I>,
    /// How many earlier attempts of this input failed (the harness's dead-letter counter).
    pub attempts: u32,
    /// Some of the input arrived while an earlier turn of the scope was running.
    pub steered: bool,
}

impl<I> Batch<I> {
    /// A batch of `inputs` after `attempts` failed attempts.
    pub fn new(inputs: Vec<I>, attempts: u32, steered: bool) -> Self {
        Batch {
            inputs,
            attempts,
            steered,
        }
    }
}

/// Input waiting for the scope's next turn.
#[derive(Debug)]
pub(crate) struct Pending<I> {
    items: Vec<(Seq, I)>,
    attempts: u32,
    steered: bool,
}

impl<I> Default for Pending<I> {
    fn default() -> Self {
        Pending {
            items: Vec::new(),
            attempts: 0,
            steered: false,
        }
    }
}

impl<I: Input> Pending<I> {
    /// Inserts `input` at its place in admission order. Returns false (and drops it) when an input
    /// with the same id is already pending.
    pub(crate) fn insert(&mut self, seq: Seq, input: I) -> bool {
        if self.contains(input.id()) {
            return false;
        }
        let at = self.items.partition_point(|(s, _)| *s < seq);
        self.items.insert(at, (seq, input));
        true
    }

    /// Folds a returning batch's counters in: the highest attempt count wins, steering sticks.
    pub(crate) fn absorb(&mut self, attempts: u32, steered: bool) {
        self.attempts = self.attempts.max(attempts);
        self.steered |= steered;
    }

    pub(crate) fn contains(&self, id: &str) -> bool {
        self.items.iter().any(|(_, i)| i.id() == id)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// The admission order of the oldest pending input.
    pub(crate) fn front(&self) -> Option<Seq> {
        self.items.first().map(|(s, _)| *s)
    }

    /// Takes everything as one batch, with the order numbers of its inputs.
    pub(crate) fn take(&mut self) -> (Batch<I>, Vec<(Seq, I)>) {
        let items = std::mem::take(&mut self.items);
        let batch = Batch {
            inputs: items.iter().map(|(_, i)| i.clone()).collect(),
            attempts: std::mem::take(&mut self.attempts),
            steered: std::mem::take(&mut self.steered),
        };
        (batch, items)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::Msg;

    #[test]
    fn inserts_keep_admission_order_and_drop_duplicates() {
        let mut p = Pending::default();
        assert!(p.insert(Seq(5), Msg::new("e5")));
        assert!(p.insert(Seq(2), Msg::new("e2")));
        assert!(p.insert(Seq(9), Msg::new("e9")));
        assert!(!p.insert(Seq(7), Msg::new("e2")), "same id twice");
        p.absorb(2, true);
        p.absorb(1, false);
        assert_eq!(p.front(), Some(Seq(2)));
        let (batch, items) = p.take();
        let ids: Vec<_> = batch.inputs.iter().map(|m| m.id().to_string()).collect();
        assert_eq!(ids, ["e2", "e5", "e9"]);
        assert_eq!((batch.attempts, batch.steered), (2, true));
        assert_eq!(items.len(), 3);
        assert!(p.is_empty());
        let (empty, _) = p.take();
        assert_eq!(
            (empty.attempts, empty.steered),
            (0, false),
            "counters reset"
        );
    }
}
