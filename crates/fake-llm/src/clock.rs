//! The fake LLM's own clock: real time since the server started, plus however far a test has
//! pushed it forward.
//!
//! Prompt caches expire (5 minutes or 1 hour after a prefix was last used), and what a resume
//! saves depends on the gap before it: a hot follow-up a minute later, a warm one after an idle
//! pool sleep of 15 minutes. A measurement cannot wait 15 minutes, so it advances this clock
//! instead (through [`RunningFakeLlm::advance_clock`](crate::server::RunningFakeLlm) or the
//! `POST /fake/clock` control request). The clock never goes backwards.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Monotonic time as the fake provider sees it.
#[derive(Debug)]
pub struct FakeClock {
    /// When the server started: the zero of [`FakeClock::now`].
    started: Instant,
    /// How far the clock has been pushed ahead of real time (a std mutex: held for a read or an
    /// add, never across an await).
    skipped: Mutex<Duration>,
}

impl FakeClock {
    /// A clock reading zero now.
    #[must_use]
    pub fn new() -> Self {
        Self {
            started: Instant::now(),
            skipped: Mutex::new(Duration::ZERO),
        }
    }

    /// Time since the start: real time elapsed plus every advance so far.
    #[must_use]
    pub fn now(&self) -> Duration {
        self.started.elapsed() + self.skipped()
    }

    /// Pushes the clock ahead by `by`, as if that much idle time had passed, and returns the new
    /// reading.
    pub fn advance(&self, by: Duration) -> Duration {
        let mut skipped = self
            .skipped
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *skipped = skipped.saturating_add(by);
        let total = *skipped;
        drop(skipped);
        self.started.elapsed() + total
    }

    /// The sum of every advance so far.
    #[must_use]
    pub fn skipped(&self) -> Duration {
        *self
            .skipped
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Default for FakeClock {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advances_add_up_and_never_go_back() {
        let clock = FakeClock::new();
        let before = clock.now();
        let after = clock.advance(Duration::from_secs(900));
        assert!(after >= before + Duration::from_secs(900));
        clock.advance(Duration::from_secs(60));
        assert_eq!(clock.skipped(), Duration::from_secs(960));
        assert!(clock.now() >= after + Duration::from_secs(60));
    }
}
