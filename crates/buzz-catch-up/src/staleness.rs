//! Mentions too old to answer: their thread is told, once.
//!
//! A mention the harness missed is answered when it comes back, unless it is older than the
//! configured age (`--missed-mention-max-age`, [`crate::DEFAULT_MAX_AGE`]): then the thread has
//! likely moved on, and an agent that runs tools should not act on it unasked. Such a mention is
//! not answered and not dropped in silence: its thread gets one notice per run, however many of
//! its mentions are too old, and the person can ask again.

use std::collections::HashSet;
use std::time::Duration;

/// What to do with one addressed message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Young enough: answer it.
    Fresh,
    /// Too old: do not answer. `tell` is the notice for its thread, the first time only.
    Stale {
        /// The notice to post in the thread, unless it was told already.
        tell: Option<String>,
    },
}

/// Judges messages by age and remembers which threads were told.
#[derive(Debug, Clone)]
pub struct Staleness {
    max_age: Duration,
    told: HashSet<String>,
}

impl Staleness {
    /// Messages older than `max_age` are stale.
    pub fn new(max_age: Duration) -> Self {
        Self {
            max_age,
            told: HashSet::new(),
        }
    }

    /// The age limit.
    pub fn max_age(&self) -> Duration {
        self.max_age
    }

    /// Judges a message of thread `thread` created at `created_at` (unix seconds) at `now`.
    pub fn judge(&mut self, thread: &str, created_at: u64, now: u64) -> Verdict {
        if now.saturating_sub(created_at) <= self.max_age.as_secs() {
            return Verdict::Fresh;
        }
        let first = self.told.insert(thread.to_owned());
        Verdict::Stale {
            tell: first.then(|| notice(self.max_age)),
        }
    }
}

/// The notice a thread gets for its mentions that were too old to answer.
pub fn notice(max_age: Duration) -> String {
    format!(
        "I was away when this was posted. I did not answer it, nor any other message here older \
         than {}: the thread has likely moved on. Mention me again if you still need an answer.",
        humantime::format_duration(max_age)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000;

    #[test]
    fn young_messages_are_answered_and_old_ones_told_once_per_thread() {
        let mut staleness = Staleness::new(Duration::from_secs(3600));
        assert_eq!(staleness.judge("t1", NOW - 3600, NOW), Verdict::Fresh);
        let told = staleness.judge("t1", NOW - 3601, NOW);
        assert_eq!(
            told,
            Verdict::Stale {
                tell: Some(notice(Duration::from_secs(3600)))
            }
        );
        assert_eq!(
            staleness.judge("t1", NOW - 7200, NOW),
            Verdict::Stale { tell: None }
        );
        assert!(matches!(
            staleness.judge("t2", NOW - 7200, NOW),
            Verdict::Stale { tell: Some(_) }
        ));
    }

    #[test]
    fn the_notice_names_the_age() {
        assert!(notice(Duration::from_secs(3600)).contains("older than 1h:"));
        assert!(notice(Duration::from_secs(90 * 60)).contains("older than 1h 30m:"));
    }
}
