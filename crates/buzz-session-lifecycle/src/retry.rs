//! Bounded retries of a stored session that could not be reopened.
//!
//! When `session/load` (or `session/resume`) fails and the agent's answer does not say the session
//! is gone, the receipt is kept and no competing session is opened (#6990): the scope's input
//! waits and the restore is tried again. Unbounded, that strands the thread for good when the
//! agent never gives a definitive answer (real adapters answer an unknown session with codes the
//! harness cannot recognise, and huge transcripts time out). So the wait is bounded: after
//! [`RetryPolicy::max_attempts`] failed attempts, or once [`RetryPolicy::give_up_after`] has
//! passed since the first failure, the harness gives up on the receipt, answers from a new session
//! with the whole context window, and says so in the thread.

use std::time::Duration;

use crate::clock::Moment;

/// How long and how often a failed restore is retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Delay before the first retry; each further retry doubles it.
    pub first_delay: Duration,
    /// Longest delay between two attempts.
    pub max_delay: Duration,
    /// Failed attempts (the first one included) after which the harness gives up.
    pub max_attempts: u32,
    /// Time since the first failure after which the harness gives up.
    pub give_up_after: Duration,
}

impl Default for RetryPolicy {
    /// About two minutes at most: 15 s, 30 s, 60 s, then a fresh session. Long enough to ride out
    /// an agent restart or a short outage; short enough that nobody gives up on the thread first.
    fn default() -> Self {
        RetryPolicy {
            first_delay: Duration::from_secs(15),
            max_delay: Duration::from_secs(60),
            max_attempts: 4,
            give_up_after: Duration::from_secs(180),
        }
    }
}

/// The failures of one scope's restore since the last success.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Streak {
    /// Failed attempts so far.
    pub(crate) attempts: u32,
    /// When the first one failed.
    pub(crate) first_at: Moment,
    /// Not before this moment may the scope try again.
    pub(crate) next_at: Moment,
}

/// What to do after a failed restore.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AfterFailure {
    /// Try the same receipt again at `next_at`; `first` is true for the first failure of a
    /// streak (the thread is told once, not at every attempt).
    Retry { streak: Streak, first: bool },
    /// Stop trying: open a new session.
    GiveUp { attempts: u32, waited: Duration },
}

impl RetryPolicy {
    pub(crate) fn after_failure(&self, streak: Option<Streak>, now: Moment) -> AfterFailure {
        let (attempts, first_at) = match streak {
            Some(s) => (s.attempts + 1, s.first_at),
            None => (1, now),
        };
        let waited = now.since(first_at);
        if attempts >= self.max_attempts.max(1) || waited >= self.give_up_after {
            return AfterFailure::GiveUp { attempts, waited };
        }
        let shift = (attempts - 1).min(16);
        let delay = self
            .first_delay
            .checked_mul(1 << shift)
            .unwrap_or(self.max_delay)
            .min(self.max_delay);
        AfterFailure::Retry {
            streak: Streak {
                attempts,
                first_at,
                next_at: now.after(delay),
            },
            first: streak.is_none(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retry(a: AfterFailure) -> (Streak, bool) {
        match a {
            AfterFailure::Retry { streak, first } => (streak, first),
            other => panic!("expected a retry, got {other:?}"),
        }
    }

    #[test]
    fn backs_off_then_gives_up_after_max_attempts() {
        let p = RetryPolicy::default();
        let (s1, first) = retry(p.after_failure(None, Moment(0)));
        assert!(first);
        assert_eq!(s1.next_at, Moment(15_000));
        let (s2, first) = retry(p.after_failure(Some(s1), Moment(15_000)));
        assert!(!first);
        assert_eq!(s2.next_at, Moment(45_000));
        let (s3, _) = retry(p.after_failure(Some(s2), Moment(45_000)));
        assert_eq!(s3.next_at, Moment(105_000), "capped at 60 s");
        assert_eq!(
            p.after_failure(Some(s3), Moment(105_000)),
            AfterFailure::GiveUp {
                attempts: 4,
                waited: Duration::from_secs(105)
            }
        );
    }

    #[test]
    fn gives_up_on_time_even_with_attempts_left() {
        let p = RetryPolicy {
            max_attempts: 100,
            ..RetryPolicy::default()
        };
        let (s, _) = retry(p.after_failure(None, Moment(0)));
        assert!(matches!(
            p.after_failure(Some(s), Moment(180_000)),
            AfterFailure::GiveUp { attempts: 2, .. }
        ));
    }

    #[test]
    fn one_attempt_policy_gives_up_at_once() {
        let p = RetryPolicy {
            max_attempts: 0,
            ..RetryPolicy::default()
        };
        assert!(matches!(
            p.after_failure(None, Moment(0)),
            AfterFailure::GiveUp { attempts: 1, .. }
        ));
    }
}
