//! Typing indicators for running turns.
//!
//! A Buzz client shows a typing indicator (kind 20002) for a few seconds after its
//! `created_at` and nothing ends one early but the typist's next message. So the harness says
//! one when a turn starts and again every [`TYPING_INTERVAL`] while the turn runs; when the turn
//! ends it stops, and the answer (or the clients' time limit) takes the indicator down.
//!
//! This module only decides *when*; the event loop says it through the relay
//! ([`crate::relay::Relay::typing`]), which sends it over the socket without waiting.

use std::collections::HashMap;
use std::time::Duration;

use tokio::task::Id as TaskId;
use tokio::time::Instant;

/// How often a running turn's indicator is said again: well inside the six to eight seconds
/// Buzz's clients show one for (the model's choice; upstream-facts §10 names no interval).
pub const TYPING_INTERVAL: Duration = Duration::from_secs(3);

/// When each running turn's indicator was last said.
#[derive(Debug, Default)]
pub struct TypingClock {
    said: HashMap<TaskId, Instant>,
}

impl TypingClock {
    /// The turns among `running` whose indicator is due at `now` (never said, or said at least
    /// [`TYPING_INTERVAL`] ago), remembered as said now. Turns no longer running are forgotten.
    pub fn due(&mut self, running: impl IntoIterator<Item = TaskId>, now: Instant) -> Vec<TaskId> {
        let running: Vec<TaskId> = running.into_iter().collect();
        self.said.retain(|id, _| running.contains(id));
        let mut due = Vec::new();
        for id in running {
            let is_due = self
                .said
                .get(&id)
                .is_none_or(|at| now.duration_since(*at) >= TYPING_INTERVAL);
            if is_due {
                self.said.insert(id, now);
                due.push(id);
            }
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two task ids of real (finished) tasks: `Id` has no public constructor.
    async fn two_ids() -> (TaskId, TaskId) {
        let a = tokio::spawn(async {});
        let b = tokio::spawn(async {});
        let ids = (a.id(), b.id());
        let _ = (a.await, b.await);
        ids
    }

    #[tokio::test(start_paused = true)]
    async fn a_turn_is_announced_at_once_then_every_interval_while_it_runs() {
        let (a, b) = two_ids().await;
        let mut clock = TypingClock::default();
        let start = Instant::now();
        assert_eq!(clock.due([a], start), [a], "a new turn at once");
        assert!(clock.due([a], start + Duration::from_secs(1)).is_empty());
        assert_eq!(
            clock.due([a, b], start + Duration::from_secs(2)),
            [b],
            "a turn started meanwhile at once, the first not yet"
        );
        assert_eq!(clock.due([a, b], start + TYPING_INTERVAL), [a]);
        assert_eq!(
            clock.due([b], start + Duration::from_secs(5)),
            [b],
            "the second three seconds after its own"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_ended_turn_is_forgotten_and_a_new_one_with_its_id_starts_afresh() {
        let (a, _) = two_ids().await;
        let mut clock = TypingClock::default();
        let start = Instant::now();
        assert_eq!(clock.due([a], start), [a]);
        assert!(clock.due([], start + Duration::from_secs(1)).is_empty());
        assert_eq!(
            clock.due([a], start + Duration::from_secs(2)),
            [a],
            "forgotten when it ended"
        );
    }
}
