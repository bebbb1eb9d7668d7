//! The lease across machines, as a state machine without I/O: which harness of a (relay, agent
//! key) serves, when it must stop, and whether it may publish right now.
//!
//! The store (PostgreSQL, shared by the machines) keeps one row per (relay, agent key): who holds
//! it, its fencing token (raised at each change of holder) and until when, by the database's own
//! clock. This machine never reads a clock and never talks to the store: its shell feeds it what
//! the store answered ([`Input`]) and the time ([`FencedLease::handle_timeout`]), and carries out
//! what it asks ([`Effect`]): ask for the lease, renew it, start serving, stop serving.
//!
//! **Why a frozen or cut-off holder never answers after its lease.** Every grant and renewal is
//! counted from the moment the request was *sent* (`asked_at`), which is no later than the moment
//! the store stamped it, so this machine's idea of the lease's end is never later than the
//! store's (two monotonic clocks run at the same rate to within parts per million). The harness
//! serves, and may start a publish, only until that end minus [`LeaseSettings::margin`]; the
//! margin covers the longest publish attempt, so an attempt started in time is over before the
//! store could give the lease to another. A process stopped (SIGSTOP) or cut off from the store
//! finds, when it next looks, that its time is up: it stops serving before it publishes anything.
//! Receipt writes are fenced in the store itself by the token.
//!
//! **What remains.** The relay does not know the lease. A request whose bytes left before the end
//! but that the relay processes only after another harness took over (a relay slower than the
//! margin), or a process frozen exactly between its last check and its send, can land one answer
//! late; the harness that took over reads back what was answered before answering, so a
//! duplicate needs that late answer to land after its read-back too.

use std::time::{Duration, Instant};

/// The store's fencing token: raised each time the lease changes hands. Writes carry it, and the
/// store refuses those of an older one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Token(pub u64);

/// How long a lease lasts and how it is kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseSettings {
    /// How long a grant or a renewal holds, by the store's clock.
    pub lifetime: Duration,
    /// How often the holder renews.
    pub renew_every: Duration,
    /// How long before the lease's end the holder stops serving: at least the longest publish
    /// attempt (the relay's request timeout).
    pub margin: Duration,
    /// How often a standby, or a holder whose renewal failed, asks again.
    pub retry_every: Duration,
}

impl Default for LeaseSettings {
    /// A 30 s lease renewed every 5 s, serving stopped 10 s before its end (the relay client's
    /// request timeout), a standby asking every 2 s: a holder that dies is replaced within about
    /// 32 s.
    fn default() -> Self {
        Self {
            lifetime: Duration::from_secs(30),
            renew_every: Duration::from_secs(5),
            margin: Duration::from_secs(10),
            retry_every: Duration::from_secs(2),
        }
    }
}

/// Settings that cannot keep a lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SettingsError {
    /// The margin leaves no time to serve.
    #[error("the lease's margin ({margin:?}) must be shorter than its lifetime ({lifetime:?})")]
    MarginNotBelowLifetime {
        /// The margin.
        margin: Duration,
        /// The lifetime.
        lifetime: Duration,
    },
    /// The holder would stop serving before it renews.
    #[error(
        "the lease must be renewed (every {renew_every:?}) before its holder stops serving \
         (lifetime {lifetime:?} less margin {margin:?})"
    )]
    RenewalTooLate {
        /// How often it renews.
        renew_every: Duration,
        /// The lifetime.
        lifetime: Duration,
        /// The margin.
        margin: Duration,
    },
    /// A period of zero would ask the store without pause.
    #[error("the lease's renewal and retry periods must be longer than zero")]
    ZeroPeriod,
}

impl LeaseSettings {
    /// Checks that a holder renews in time to keep serving.
    ///
    /// # Errors
    /// The first rule the settings break.
    pub fn validate(self) -> Result<Self, SettingsError> {
        if self.renew_every.is_zero() || self.retry_every.is_zero() {
            return Err(SettingsError::ZeroPeriod);
        }
        let Some(serving) = self
            .lifetime
            .checked_sub(self.margin)
            .filter(|d| !d.is_zero())
        else {
            return Err(SettingsError::MarginNotBelowLifetime {
                margin: self.margin,
                lifetime: self.lifetime,
            });
        };
        if self.renew_every >= serving {
            return Err(SettingsError::RenewalTooLate {
                renew_every: self.renew_every,
                lifetime: self.lifetime,
                margin: self.margin,
            });
        }
        Ok(self)
    }

    /// How long after a confirmation the holder may serve.
    fn serving_time(self) -> Duration {
        self.lifetime.saturating_sub(self.margin)
    }
}

/// What the store answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// The lease is this harness's, with `token`; the request was sent at `asked_at`.
    Granted {
        /// The fencing token.
        token: Token,
        /// When the request left.
        asked_at: Instant,
    },
    /// The store confirmed that this harness still holds `token` (a renewal sent at `asked_at`).
    Confirmed {
        /// The fencing token.
        token: Token,
        /// When the request left.
        asked_at: Instant,
    },
    /// Another harness holds the lease.
    HeldByAnother {
        /// Who (the store's record of it).
        holder: String,
    },
    /// The store did not answer in time, or could not be reached.
    StoreFailed,
}

/// What the shell must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Ask the store for the lease (a standby).
    Acquire,
    /// Ask the store to renew `token`.
    Renew(Token),
    /// Start serving with `token`: restore the threads, catch up from the watermark.
    Serve(Token),
    /// Stop serving (answer nothing more) and say why.
    StopServing(StopReason),
}

/// Why a holder stopped serving.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// No confirmation came in time (the store is unreachable, or this process was frozen).
    Expired,
    /// Another harness holds the lease now.
    TakenOver {
        /// Who.
        by: String,
    },
}

/// Where this harness stands.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for the lease.
    Standby {
        /// When to ask the store next.
        next_ask: Instant,
        /// A request is on its way.
        asking: bool,
    },
    /// Holding the lease and serving.
    Holding {
        token: Token,
        /// When the last grant or renewal that the store confirmed was sent.
        confirmed_at: Instant,
        /// When to renew next.
        next_renewal: Instant,
        /// A renewal is on its way.
        asking: bool,
    },
}

/// One harness's side of the lease on its (relay, agent key).
#[derive(Debug)]
pub struct FencedLease {
    settings: LeaseSettings,
    phase: Phase,
    effects: Vec<Effect>,
}

impl FencedLease {
    /// A standby that asks for the lease at `now`.
    pub fn new(settings: LeaseSettings, now: Instant) -> Self {
        Self {
            settings,
            phase: Phase::Standby {
                next_ask: now,
                asking: false,
            },
            effects: Vec::new(),
        }
    }

    /// The store's answer, at `now`.
    pub fn handle(&mut self, input: Input, now: Instant) {
        let retry = now + self.settings.retry_every;
        match (&mut self.phase, input) {
            (Phase::Standby { .. }, Input::Granted { token, asked_at }) => {
                self.phase = Phase::Holding {
                    token,
                    confirmed_at: asked_at,
                    next_renewal: asked_at + self.settings.renew_every,
                    asking: false,
                };
                self.effects.push(Effect::Serve(token));
                // A grant that took longer than the serving time is over already.
                self.handle_timeout(now);
            }
            (
                Phase::Holding {
                    token: held,
                    confirmed_at,
                    next_renewal,
                    asking,
                },
                Input::Confirmed { token, asked_at } | Input::Granted { token, asked_at },
            ) if token == *held => {
                *confirmed_at = (*confirmed_at).max(asked_at);
                *next_renewal = asked_at + self.settings.renew_every;
                *asking = false;
                self.handle_timeout(now);
            }
            (Phase::Holding { .. }, Input::HeldByAnother { holder }) => {
                self.stop(StopReason::TakenOver { by: holder }, retry, now);
            }
            (Phase::Holding { .. }, Input::Confirmed { .. } | Input::Granted { .. }) => {
                // Another token for this holder: the lease changed hands meanwhile.
                self.stop(
                    StopReason::TakenOver {
                        by: "a later grant".to_owned(),
                    },
                    now,
                    now,
                );
            }
            (
                Phase::Holding {
                    next_renewal,
                    asking,
                    ..
                },
                Input::StoreFailed,
            ) => {
                *asking = false;
                *next_renewal = retry;
                self.handle_timeout(now);
            }
            (Phase::Standby { next_ask, asking }, _) => {
                *asking = false;
                *next_ask = retry;
            }
        }
    }

    /// The time has come to `now`: stop serving when the lease may have ended, ask the store
    /// when it is time.
    pub fn handle_timeout(&mut self, now: Instant) {
        let serving = self.settings.serving_time();
        match &mut self.phase {
            Phase::Holding { confirmed_at, .. } if now >= *confirmed_at + serving => {
                self.stop(StopReason::Expired, now, now);
            }
            Phase::Holding {
                token,
                next_renewal,
                asking,
                ..
            } => {
                if !*asking && now >= *next_renewal {
                    *asking = true;
                    self.effects.push(Effect::Renew(*token));
                }
            }
            Phase::Standby { next_ask, asking } => {
                if !*asking && now >= *next_ask {
                    *asking = true;
                    self.effects.push(Effect::Acquire);
                }
            }
        }
    }

    /// Stops serving for `reason`; as a standby again, asks the store at `next_ask`.
    fn stop(&mut self, reason: StopReason, next_ask: Instant, now: Instant) {
        self.effects.push(Effect::StopServing(reason));
        self.phase = Phase::Standby {
            next_ask,
            asking: false,
        };
        self.handle_timeout(now);
    }

    /// The next thing to do, in the order it was decided.
    pub fn poll_effect(&mut self) -> Option<Effect> {
        (!self.effects.is_empty()).then(|| self.effects.remove(0))
    }

    /// When [`FencedLease::handle_timeout`] is next due (none while only an answer can move it).
    pub fn poll_timeout(&self) -> Option<Instant> {
        match &self.phase {
            Phase::Standby { next_ask, asking } => (!asking).then_some(*next_ask),
            Phase::Holding {
                confirmed_at,
                next_renewal,
                asking,
                ..
            } => {
                let end = *confirmed_at + self.settings.serving_time();
                Some(if *asking { end } else { end.min(*next_renewal) })
            }
        }
    }

    /// The token to publish and write with, if this harness may publish at `now`: it holds the
    /// lease and its serving time is not over. Asked right before every publish attempt.
    pub fn may_publish(&self, now: Instant) -> Option<Token> {
        match &self.phase {
            Phase::Holding { token, .. } if self.serving_until().is_some_and(|end| now < end) => {
                Some(*token)
            }
            _ => None,
        }
    }

    /// Until when this harness may publish, as [`FencedLease::may_publish`] decides it (none:
    /// it does not hold the lease). Moves only when an answer or the time comes in.
    pub fn serving_until(&self) -> Option<Instant> {
        match &self.phase {
            Phase::Holding { confirmed_at, .. } => {
                Some(*confirmed_at + self.settings.serving_time())
            }
            Phase::Standby { .. } => None,
        }
    }

    /// Whether this harness holds the lease (it may still have to stop at its next timeout).
    pub fn is_holding(&self) -> bool {
        matches!(self.phase, Phase::Holding { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> LeaseSettings {
        LeaseSettings::default().validate().unwrap()
    }

    fn drain(lease: &mut FencedLease) -> Vec<Effect> {
        std::iter::from_fn(|| lease.poll_effect()).collect()
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    /// A standby that got the lease at `t0` (asked at `t0`).
    fn holder(t0: Instant) -> FencedLease {
        let mut lease = FencedLease::new(settings(), t0);
        lease.handle_timeout(t0);
        assert_eq!(drain(&mut lease), [Effect::Acquire]);
        lease.handle(
            Input::Granted {
                token: Token(7),
                asked_at: t0,
            },
            t0,
        );
        assert_eq!(drain(&mut lease), [Effect::Serve(Token(7))]);
        lease
    }

    #[test]
    fn a_standby_asks_serves_once_granted_and_renews_on_time() {
        let t0 = Instant::now();
        let mut lease = holder(t0);
        assert_eq!(lease.may_publish(t0), Some(Token(7)));
        assert_eq!(lease.poll_timeout(), Some(t0 + secs(5)));
        lease.handle_timeout(t0 + secs(4));
        assert_eq!(drain(&mut lease), [], "not yet");
        lease.handle_timeout(t0 + secs(5));
        assert_eq!(drain(&mut lease), [Effect::Renew(Token(7))]);
        lease.handle_timeout(t0 + secs(6));
        assert_eq!(drain(&mut lease), [], "one renewal on its way at a time");
        lease.handle(
            Input::Confirmed {
                token: Token(7),
                asked_at: t0 + secs(5),
            },
            t0 + secs(6),
        );
        assert_eq!(
            lease.may_publish(t0 + secs(24)),
            Some(Token(7)),
            "serving until the renewal's send + 30 s - 10 s"
        );
        assert_eq!(lease.may_publish(t0 + secs(25)), None);
    }

    #[test]
    fn a_holder_cut_off_from_the_store_serves_until_its_time_is_up_then_stops_and_asks_again() {
        let t0 = Instant::now();
        let mut lease = holder(t0);
        let mut effects = Vec::new();
        let mut now = t0;
        while now < t0 + secs(30) {
            now += Duration::from_millis(500);
            lease.handle_timeout(now);
            for effect in drain(&mut lease) {
                if let Effect::Renew(_) = effect {
                    lease.handle(Input::StoreFailed, now);
                }
                effects.push((now - t0, effect));
            }
        }
        let renewals = effects
            .iter()
            .filter(|(_, e)| matches!(e, Effect::Renew(_)))
            .count();
        assert!(
            renewals >= 5,
            "renewed every 5 s, then every 2 s after a failure: {effects:?}"
        );
        let stop = effects
            .iter()
            .position(|(_, e)| *e == Effect::StopServing(StopReason::Expired))
            .expect("it stops");
        assert_eq!(effects[stop].0, secs(20), "at the grant + 30 s - 10 s");
        assert_eq!(
            effects[stop + 1].1,
            Effect::Acquire,
            "and asks again at once"
        );
        assert_eq!(lease.may_publish(t0 + secs(20)), None);
        assert!(!lease.is_holding());
    }

    #[test]
    fn a_holder_frozen_past_its_lease_stops_before_it_publishes_anything() {
        let t0 = Instant::now();
        let mut lease = holder(t0);
        // SIGSTOP for twice the lease: no input at all, then the first look at the clock.
        let woke = t0 + secs(60);
        assert_eq!(lease.may_publish(woke), None, "no publish after waking");
        lease.handle_timeout(woke);
        assert_eq!(
            drain(&mut lease),
            [Effect::StopServing(StopReason::Expired), Effect::Acquire]
        );
        lease.handle(
            Input::HeldByAnother {
                holder: "standby-b".into(),
            },
            woke,
        );
        assert_eq!(drain(&mut lease), []);
        assert_eq!(lease.poll_timeout(), Some(woke + secs(2)), "a standby now");
    }

    #[test]
    fn a_renewal_that_finds_another_holder_stops_serving_at_once() {
        let t0 = Instant::now();
        let mut lease = holder(t0);
        lease.handle_timeout(t0 + secs(5));
        assert_eq!(drain(&mut lease), [Effect::Renew(Token(7))]);
        lease.handle(
            Input::HeldByAnother {
                holder: "standby-b".into(),
            },
            t0 + secs(6),
        );
        assert_eq!(
            drain(&mut lease),
            [Effect::StopServing(StopReason::TakenOver {
                by: "standby-b".into()
            })]
        );
        assert_eq!(lease.may_publish(t0 + secs(6)), None);
    }

    #[test]
    fn a_confirmation_of_another_token_is_a_takeover() {
        let t0 = Instant::now();
        let mut lease = holder(t0);
        lease.handle(
            Input::Confirmed {
                token: Token(9),
                asked_at: t0 + secs(1),
            },
            t0 + secs(1),
        );
        assert!(matches!(
            drain(&mut lease).first(),
            Some(Effect::StopServing(StopReason::TakenOver { .. }))
        ));
        assert_eq!(lease.may_publish(t0 + secs(1)), None);
    }

    #[test]
    fn a_grant_that_arrives_after_its_serving_time_serves_nothing() {
        let t0 = Instant::now();
        let mut lease = FencedLease::new(settings(), t0);
        lease.handle_timeout(t0);
        assert_eq!(drain(&mut lease), [Effect::Acquire]);
        // The answer took 25 s (a store that stalled): its 20 s of serving are gone.
        lease.handle(
            Input::Granted {
                token: Token(3),
                asked_at: t0,
            },
            t0 + secs(25),
        );
        assert_eq!(
            drain(&mut lease),
            [
                Effect::Serve(Token(3)),
                Effect::StopServing(StopReason::Expired),
                Effect::Acquire
            ]
        );
        assert_eq!(lease.may_publish(t0 + secs(25)), None);
    }

    #[test]
    fn a_standby_refused_asks_again_after_the_retry_period() {
        let t0 = Instant::now();
        let mut lease = FencedLease::new(settings(), t0);
        lease.handle_timeout(t0);
        assert_eq!(drain(&mut lease), [Effect::Acquire]);
        assert_eq!(lease.poll_timeout(), None, "waiting for the answer");
        lease.handle(Input::HeldByAnother { holder: "a".into() }, t0 + secs(1));
        assert_eq!(lease.poll_timeout(), Some(t0 + secs(3)));
        lease.handle_timeout(t0 + secs(2));
        assert_eq!(drain(&mut lease), []);
        lease.handle_timeout(t0 + secs(3));
        assert_eq!(drain(&mut lease), [Effect::Acquire]);
        assert_eq!(lease.may_publish(t0 + secs(3)), None);
    }

    #[test]
    fn settings_that_cannot_keep_a_lease_are_refused() {
        let base = LeaseSettings::default();
        assert!(base.validate().is_ok());
        assert!(matches!(
            LeaseSettings {
                margin: secs(30),
                ..base
            }
            .validate(),
            Err(SettingsError::MarginNotBelowLifetime { .. })
        ));
        assert!(matches!(
            LeaseSettings {
                renew_every: secs(20),
                ..base
            }
            .validate(),
            Err(SettingsError::RenewalTooLate { .. })
        ));
        assert_eq!(
            LeaseSettings {
                retry_every: Duration::ZERO,
                ..base
            }
            .validate(),
            Err(SettingsError::ZeroPeriod)
        );
    }
}
