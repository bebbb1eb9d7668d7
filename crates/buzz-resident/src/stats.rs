//! Counters that make the table's behaviour observable (and its invariants testable).

use std::collections::BTreeMap;

use crate::outcome::DisposeReason;

/// A consistent snapshot of the table's counters, taken under its lock.
///
/// Invariant: `starts == terminals + running` at every snapshot, because each start receives
/// exactly one terminal (a superseded start counts as its terminal when it is superseded).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TableStats {
    /// Turn starts issued (`begin`, `try_begin`, and each `Continue`).
    pub starts: u64,
    /// Terminal outcomes recorded (completed, failed, cancelled, superseded).
    pub terminals: u64,
    /// Scopes whose latest start has no terminal yet.
    pub running: u64,
    /// Scopes that completed and are not settled yet.
    pub finishing: u64,
    /// Residents currently registered.
    pub residents: u64,
    /// Inputs the table holds right now: queued for running turns or waiting in finishing
    /// windows. Every one of them is returned by a later `finish` or `settle`.
    pub held_inputs: u64,
    /// Scopes the table currently remembers.
    pub scopes: u64,
    /// Routes answered with `Continue`.
    pub continued: u64,
    /// Routes answered with `Fallback`.
    pub fallbacks: u64,
    /// Routes answered with `CapacityWait`.
    pub capacity_waits: u64,
    /// Routes answered with `Queued`.
    pub queued: u64,
    /// Routes answered with `WaitFinishing`.
    pub waited_finishing: u64,
    /// Inputs handed to a running turn by `Finish::Claimed`.
    pub claimed: u64,
    /// Inputs handed back by `settle` or by a failed/cancelled finish for re-routing.
    pub handed_back: u64,
    /// `finish` reports ignored as stale.
    pub stale_finishes: u64,
    /// Starts superseded by a forced `begin` while still running (a harness bug; logged).
    pub superseded: u64,
    /// Successful turns whose session could not be kept because every resident slot was held
    /// by a running or finishing scope.
    pub not_kept_at_capacity: u64,
    /// Residents disposed, by reason.
    pub disposals_by_reason: BTreeMap<DisposeReason, u64>,
}

impl TableStats {
    /// How many residents were disposed for `reason`.
    #[must_use]
    pub fn disposals(&self, reason: DisposeReason) -> u64 {
        self.disposals_by_reason.get(&reason).copied().unwrap_or(0)
    }

    /// How many residents were disposed in total.
    #[must_use]
    pub fn total_disposals(&self) -> u64 {
        self.disposals_by_reason.values().sum()
    }

    pub(crate) fn count_disposal(&mut self, reason: DisposeReason) {
        *self.disposals_by_reason.entry(reason).or_insert(0) += 1;
    }
}
