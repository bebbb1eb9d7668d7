//! Pool lifecycle decisions as pure functions: respawn backoff with a circuit
//! breaker, idle pool sleep and inactivity exit. The event loop feeds them the
//! clock and its counters; nothing here does I/O.

use std::time::Duration;

use tokio::time::Instant;

/// Crashes within [`CRASH_WINDOW`] that open a slot's circuit.
pub const CRASHES_TO_OPEN: usize = 3;
/// The window crashes are counted in.
pub const CRASH_WINDOW: Duration = Duration::from_secs(60);
/// How long an open circuit keeps a slot empty.
pub const CIRCUIT_COOLDOWN: Duration = Duration::from_secs(300);
/// First respawn delay; doubles per consecutive crash.
pub const BACKOFF_BASE: Duration = Duration::from_secs(1);
/// Respawn delay ceiling.
pub const BACKOFF_CAP: Duration = Duration::from_secs(30);

/// Crash history of one pool slot.
#[derive(Debug, Clone, Default)]
pub struct SlotCircuit {
    crashes: Vec<Instant>,
    consecutive: u32,
    /// The circuit opened and the slot has not yet completed a turn since:
    /// the next crash re-opens it at once.
    half_open: bool,
}

impl SlotCircuit {
    /// Records a crash at `now` and returns when the slot may respawn.
    pub fn record_crash(&mut self, now: Instant) -> Instant {
        self.crashes
            .retain(|t| now.duration_since(*t) < CRASH_WINDOW);
        self.crashes.push(now);
        self.consecutive = self.consecutive.saturating_add(1);
        if self.half_open || self.crashes.len() >= CRASHES_TO_OPEN {
            self.half_open = true;
            self.crashes.clear();
            return now + CIRCUIT_COOLDOWN;
        }
        now + backoff(self.consecutive)
    }

    /// Whether the circuit opened (the slot used up its quick attempts) and
    /// no turn has completed on the slot since.
    pub fn is_open(&self) -> bool {
        self.half_open
    }

    /// A spawned worker completed a turn: the slot is healthy again.
    pub fn record_success(&mut self) {
        self.consecutive = 0;
        self.half_open = false;
    }
}

/// Respawn delay after `n` consecutive crashes: 1 s × 2^(n−1), capped.
pub fn backoff(n: u32) -> Duration {
    let exp = n.saturating_sub(1).min(16);
    BACKOFF_BASE.saturating_mul(1u32 << exp).min(BACKOFF_CAP)
}

/// What the idle-pool-sleep gate looks at.
#[derive(Debug, Clone, Copy)]
pub struct SleepInputs {
    /// The configured bound (None = never sleep).
    pub bound: Option<Duration>,
    /// The pool has live workers (it was woken since it last slept).
    pub woken: bool,
    /// Turns in flight.
    pub turns_in_flight: usize,
    /// Events waiting in the queue.
    pub queued_events: usize,
    /// Worker spawns in flight.
    pub spawns_in_flight: usize,
    /// Time since the last admitted event.
    pub quiet_for: Duration,
}

/// Whether a woken lazy pool should be torn back to empty slots now.
pub fn idle_pool_sleep_due(i: SleepInputs) -> bool {
    let Some(bound) = i.bound else { return false };
    i.woken
        && i.turns_in_flight == 0
        && i.queued_events == 0
        && i.spawns_in_flight == 0
        && i.quiet_for >= bound
}

/// Whether the process should exit for inactivity.
pub fn inactivity_expired(
    bound: Option<Duration>,
    turns_in_flight: usize,
    quiet_for: Duration,
) -> bool {
    matches!(bound, Some(b) if turns_in_flight == 0 && quiet_for >= b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready() -> SleepInputs {
        SleepInputs {
            bound: Some(Duration::from_secs(900)),
            woken: true,
            turns_in_flight: 0,
            queued_events: 0,
            spawns_in_flight: 0,
            quiet_for: Duration::from_secs(900),
        }
    }

    #[test]
    fn sleeps_when_ready_idle_and_quiet() {
        assert!(idle_pool_sleep_due(ready()));
    }

    #[test]
    fn zero_bound_never_sleeps_and_unwoken_pool_never_sleeps() {
        assert!(!idle_pool_sleep_due(SleepInputs {
            bound: None,
            ..ready()
        }));
        assert!(!idle_pool_sleep_due(SleepInputs {
            woken: false,
            ..ready()
        }));
    }

    #[test]
    fn any_activity_defers_sleep() {
        assert!(!idle_pool_sleep_due(SleepInputs {
            turns_in_flight: 1,
            ..ready()
        }));
        assert!(!idle_pool_sleep_due(SleepInputs {
            queued_events: 1,
            ..ready()
        }));
        assert!(!idle_pool_sleep_due(SleepInputs {
            spawns_in_flight: 1,
            ..ready()
        }));
        assert!(!idle_pool_sleep_due(SleepInputs {
            quiet_for: Duration::from_secs(899),
            ..ready()
        }));
    }

    #[test]
    fn backoff_doubles_and_caps() {
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(2), Duration::from_secs(2));
        assert_eq!(backoff(5), Duration::from_secs(16));
        assert_eq!(backoff(6), Duration::from_secs(30));
        assert_eq!(backoff(60), Duration::from_secs(30));
    }

    #[tokio::test(start_paused = true)]
    async fn three_quick_crashes_open_the_circuit_and_the_probe_reopens_it() {
        let mut c = SlotCircuit::default();
        let t0 = Instant::now();
        assert_eq!(c.record_crash(t0), t0 + Duration::from_secs(1));
        assert_eq!(c.record_crash(t0), t0 + Duration::from_secs(2));
        assert_eq!(c.record_crash(t0), t0 + CIRCUIT_COOLDOWN);
        let probe = t0 + CIRCUIT_COOLDOWN;
        assert_eq!(
            c.record_crash(probe),
            probe + CIRCUIT_COOLDOWN,
            "half-open probe failed"
        );
        c.record_success();
        let later = probe + Duration::from_secs(600);
        assert_eq!(c.record_crash(later), later + Duration::from_secs(1));
    }

    #[test]
    fn inactivity_needs_a_bound_and_no_turns() {
        let b = Some(Duration::from_secs(10));
        assert!(inactivity_expired(b, 0, Duration::from_secs(10)));
        assert!(!inactivity_expired(b, 1, Duration::from_secs(10)));
        assert!(!inactivity_expired(None, 0, Duration::from_secs(1000)));
    }
}
