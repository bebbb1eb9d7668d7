//! Time, passed in.
//!
//! The lifecycle never reads a clock. Every input that depends on time carries a [`Moment`]: a
//! point on the harness's monotonic clock, in milliseconds since an origin the caller chose. That
//! keeps the state machine deterministic in tests (a test just writes `Moment(30_000)`) and lets
//! the harness drive it from tokio's clock, which tests can pause.

use std::time::Duration;

use serde::Serialize;

/// A point on the caller's monotonic clock, in milliseconds since its origin.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct Moment(pub u64);

impl Moment {
    /// The moment `elapsed` after the origin (saturating at `u64::MAX` milliseconds).
    pub fn from_elapsed(elapsed: Duration) -> Moment {
        Moment(u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
    }

    /// The moment `delay` after this one.
    pub fn after(self, delay: Duration) -> Moment {
        let delay = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        Moment(self.0.saturating_add(delay))
    }

    /// How long after `earlier` this moment is (zero if it is not later).
    pub fn since(self, earlier: Moment) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_instead_of_wrapping() {
        let t = Moment(1_000);
        assert_eq!(t.after(Duration::from_secs(2)), Moment(3_000));
        assert_eq!(Moment(3_000).since(t), Duration::from_secs(2));
        assert_eq!(t.since(Moment(3_000)), Duration::ZERO);
        assert_eq!(
            Moment(u64::MAX).after(Duration::from_secs(1)),
            Moment(u64::MAX)
        );
        assert_eq!(
            Moment::from_elapsed(Duration::from_millis(1_500)),
            Moment(1_500)
        );
    }
}
