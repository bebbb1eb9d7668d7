//! The watermark: a time before which every mention was settled.
//!
//! The harness already keeps a record of its progress (upstream's processed-event cursor: the
//! events it admitted and has not finished). The watermark is that record's shared twin, written
//! with the receipts: after each time the harness records its progress, the watermark becomes
//!
//! * the oldest `created_at` among the events still in progress, when there are some (a mention
//!   being answered when the harness stops is read again at the next start), or
//! * the newest `created_at` delivered, when nothing is in progress,
//!
//! never later than now and never earlier than what was already written (it only moves forward;
//! the store keeps it so). While a catch-up is still reading, the watermark is held where it was:
//! the mentions it has not delivered yet are older than anything live.

use std::collections::HashMap;

/// Whether the watermark may move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// A catch-up is reading: what it has not delivered yet must not be passed.
    Holding,
    /// Everything missed has been delivered: the watermark follows the harness's progress.
    Following,
}

/// Derives the watermark from what the harness delivered and what it still has in progress.
#[derive(Debug, Clone)]
pub struct Tracker {
    phase: Phase,
    /// `created_at` of the events delivered since the last settlement, and of those still in
    /// progress after it.
    created: HashMap<String, u64>,
    /// The newest `created_at` delivered.
    newest: Option<u64>,
    /// The last watermark handed out (or read at the start): later ones must be newer.
    written: Option<u64>,
}

impl Tracker {
    /// A tracker that starts from the watermark `recorded` (if any). `catching_up` holds it until
    /// [`Tracker::caught_up`].
    pub fn new(recorded: Option<u64>, catching_up: bool) -> Self {
        Self {
            phase: if catching_up {
                Phase::Holding
            } else {
                Phase::Following
            },
            created: HashMap::new(),
            newest: None,
            written: recorded,
        }
    }

    /// An event was delivered to the harness (live or caught up).
    pub fn observe(&mut self, id: &str, created_at: u64) {
        self.created.insert(id.to_owned(), created_at);
        self.newest = Some(self.newest.map_or(created_at, |n| n.max(created_at)));
    }

    /// The catch-up has delivered everything it read.
    pub fn caught_up(&mut self) {
        self.phase = Phase::Following;
    }

    /// Whether the watermark is held for a catch-up.
    pub fn holding(&self) -> bool {
        self.phase == Phase::Holding
    }

    /// The harness recorded its progress; `in_progress` is what it has admitted and not finished.
    /// Returns the watermark to write when it moved forward. `now` (unix seconds) caps it.
    pub fn settle<'a>(
        &mut self,
        in_progress: impl IntoIterator<Item = &'a str>,
        now: u64,
    ) -> Option<u64> {
        let mut kept = HashMap::new();
        let mut oldest_open: Option<u64> = None;
        for id in in_progress {
            if let Some((id, created_at)) = self.created.remove_entry(id) {
                oldest_open = Some(oldest_open.map_or(created_at, |o| o.min(created_at)));
                kept.insert(id, created_at);
            }
        }
        self.created = kept;
        if self.phase == Phase::Holding {
            return None;
        }
        let candidate = oldest_open.or(self.newest)?.min(now);
        if self.written.is_some_and(|w| candidate <= w) {
            return None;
        }
        self.written = Some(candidate);
        Some(candidate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000;

    #[test]
    fn nothing_in_progress_moves_it_to_the_newest_event_delivered() {
        let mut tracker = Tracker::new(Some(NOW - 100), false);
        tracker.observe("a", NOW - 50);
        tracker.observe("b", NOW - 20);
        assert_eq!(tracker.settle([], NOW), Some(NOW - 20));
        // Nothing new: nothing to write.
        assert_eq!(tracker.settle([], NOW), None);
    }

    #[test]
    fn a_mention_in_progress_holds_it_at_its_time_until_it_is_finished() {
        let mut tracker = Tracker::new(Some(NOW - 100), false);
        tracker.observe("question", NOW - 40);
        tracker.observe("chatter", NOW - 10);
        assert_eq!(tracker.settle(["question"], NOW), Some(NOW - 40));
        tracker.observe("more chatter", NOW - 5);
        assert_eq!(tracker.settle(["question"], NOW), None, "still held");
        assert_eq!(tracker.settle([], NOW), Some(NOW - 5), "answered");
    }

    #[test]
    fn it_never_moves_back_nor_past_now() {
        let mut tracker = Tracker::new(Some(NOW - 10), false);
        tracker.observe("late", NOW - 30);
        assert_eq!(tracker.settle(["late"], NOW), None, "older than the record");
        tracker.observe("from a fast clock", NOW + 600);
        assert_eq!(tracker.settle([], NOW), Some(NOW));
    }

    #[test]
    fn a_catch_up_holds_it_until_everything_missed_was_delivered() {
        let mut tracker = Tracker::new(Some(NOW - 3000), true);
        tracker.observe("live", NOW - 1);
        assert_eq!(
            tracker.settle([], NOW),
            None,
            "missed mentions not delivered yet"
        );
        assert!(tracker.holding());
        tracker.observe("missed", NOW - 2000);
        tracker.caught_up();
        assert_eq!(tracker.settle(["missed"], NOW), Some(NOW - 2000));
        assert_eq!(tracker.settle([], NOW), Some(NOW - 1));
    }

    #[test]
    fn ids_it_never_saw_do_not_count_and_finished_ones_are_forgotten() {
        // Work from an earlier run (its ids are not this run's deliveries) does not hold it:
        // that run held the watermark below them, so the catch-up delivered them again.
        let mut tracker = Tracker::new(None, false);
        tracker.observe("x", NOW - 7);
        assert_eq!(tracker.settle(["unknown"], NOW), Some(NOW - 7));
        assert!(tracker.created.is_empty());
    }
}
