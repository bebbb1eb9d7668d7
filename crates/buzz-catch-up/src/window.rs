//! Where a catch-up starts and ends.
//!
//! The live subscription starts when the harness connects (upstream's `since` = now). Whatever
//! was posted before that and after the watermark was posted while no harness of this (relay,
//! agent key) was listening: the catch-up reads it. The window starts [`SINCE_SKEW_SECS`] before
//! the watermark, as upstream's resubscriptions start before the last event seen (clients' clocks
//! differ and `created_at` has a resolution of one second), and never more than
//! [`LOOK_BACK_LIMIT`] ago.

use std::time::Duration;

/// How far before the watermark a catch-up reads: upstream's resubscription skew.
pub const SINCE_SKEW_SECS: u64 = 5;

/// The farthest back a catch-up reads, however old the watermark: a week. A harness away longer
/// than that starts a week back (and says so): the relays the series meets keep their history,
/// but a thread a week old has moved on, and every mention in that week is older than any sensible
/// `--missed-mention-max-age`, so each of its threads is told rather than answered.
pub const LOOK_BACK_LIMIT: Duration = Duration::from_secs(7 * 24 * 3600);

/// Mentions older than this when the harness comes back are not answered; their thread is told
/// (`--missed-mention-max-age`). An hour covers a restart, a deploy, a crash and its fix, a relay
/// outage: the person who asked is most likely still there and the request still stands. After
/// longer (a machine closed overnight), the thread has usually moved on and an agent that runs
/// tools should not act on it unasked: the person is told and can ask again.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(3600);

/// What the receipt store said about the watermark when the harness started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// A harness of this (relay, agent key) recorded this watermark (unix seconds).
    Recorded(u64),
    /// None was ever recorded: the first run with the patch (or a fresh store).
    NeverRecorded,
    /// The store did not answer in time or failed.
    Unreadable,
}

/// The part of the relay's history a catch-up reads: `created_at` from `since` to `until`, both
/// included (NIP-01's bounds), in unix seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CatchUpWindow {
    /// The oldest `created_at` read.
    pub since: u64,
    /// The newest `created_at` read: the second the harness noted as the live subscription's
    /// start. The subscription's own `since` is taken a moment later, in that second or the
    /// next: both may read that second (an id seen on both is delivered once), and no second
    /// is left to neither.
    pub until: u64,
}

impl CatchUpWindow {
    /// The window of a harness whose live subscription starts at `live_since` (unix seconds),
    /// given what the store said.
    ///
    /// * A recorded watermark: from [`SINCE_SKEW_SECS`] before it, at most [`LOOK_BACK_LIMIT`]
    ///   back.
    /// * None recorded: no catch-up. Without a record the harness cannot tell a mention an
    ///   earlier, unpatched run answered in a way the relay does not show (by a notice, or in a
    ///   batch) from one nobody answered; it starts where upstream does, and from then on keeps
    ///   the record.
    /// * An unreadable store: `max_age` back (the mentions it would answer anyway); those already
    ///   answered are recognised by their answers.
    pub fn at_start(start: Start, live_since: u64, max_age: Duration) -> Option<Self> {
        let oldest = live_since.saturating_sub(LOOK_BACK_LIMIT.as_secs());
        let since = match start {
            Start::Recorded(watermark) => watermark.saturating_sub(SINCE_SKEW_SECS).max(oldest),
            Start::NeverRecorded => return None,
            Start::Unreadable => live_since.saturating_sub(max_age.as_secs()).max(oldest),
        };
        let until = live_since;
        (since <= until).then_some(Self { since, until })
    }

    /// Whether `created_at` falls in the window.
    pub fn contains(&self, created_at: u64) -> bool {
        (self.since..=self.until).contains(&created_at)
    }

    /// Whether the watermark was older than [`LOOK_BACK_LIMIT`], so the window was cut.
    pub fn was_cut(start: Start, live_since: u64) -> bool {
        matches!(start, Start::Recorded(w)
            if w.saturating_sub(SINCE_SKEW_SECS) < live_since.saturating_sub(LOOK_BACK_LIMIT.as_secs()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000;
    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn a_recorded_watermark_is_read_from_just_before_it_to_the_live_subscriptions_start() {
        let window = CatchUpWindow::at_start(Start::Recorded(NOW - 600), NOW, HOUR);
        assert_eq!(
            window,
            Some(CatchUpWindow {
                since: NOW - 605,
                until: NOW
            })
        );
        let window = window.expect("a window");
        assert!(window.contains(NOW - 605) && window.contains(NOW));
        assert!(!window.contains(NOW - 606) && !window.contains(NOW + 1));
    }

    #[test]
    fn a_week_is_the_farthest_back() {
        let year_ago = NOW - 365 * 24 * 3600;
        let window = CatchUpWindow::at_start(Start::Recorded(year_ago), NOW, HOUR).expect("window");
        assert_eq!(window.since, NOW - LOOK_BACK_LIMIT.as_secs());
        assert!(CatchUpWindow::was_cut(Start::Recorded(year_ago), NOW));
        assert!(!CatchUpWindow::was_cut(Start::Recorded(NOW - 60), NOW));
    }

    #[test]
    fn without_a_record_nothing_is_caught_up_and_an_unreadable_store_looks_back_max_age() {
        assert_eq!(
            CatchUpWindow::at_start(Start::NeverRecorded, NOW, HOUR),
            None
        );
        let window = CatchUpWindow::at_start(Start::Unreadable, NOW, HOUR).expect("window");
        assert_eq!((window.since, window.until), (NOW - 3600, NOW));
    }

    #[test]
    fn a_watermark_at_or_past_the_start_leaves_a_window_of_the_skew_or_none() {
        // A watermark from a clock ahead of this machine's: the skew is still read.
        let window = CatchUpWindow::at_start(Start::Recorded(NOW), NOW, HOUR).expect("window");
        assert_eq!((window.since, window.until), (NOW - 5, NOW));
        assert_eq!(
            CatchUpWindow::at_start(Start::Recorded(NOW + 60), NOW, HOUR),
            None
        );
    }
}
