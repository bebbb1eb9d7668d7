//! Which of the series' behaviours a harness carries.
//!
//! The patches of the series that add behaviour to the lifecycle (receipts keyed by scope, the
//! capability gate, resident sessions, handoffs, in-place model switches, …) each switch theirs
//! on with one line in the harness's glue (`crates/buzz-acp/src/session_lifecycle.rs`,
//! `BEHAVIOURS`), which the harness hands to [`crate::args::SessionArgs::lifecycle_config`]. So
//! retiring a patch switches its behaviour off, and the mutation check proves each patch's guards
//! by removing its line. The code of every behaviour is always compiled, linted and tested: the
//! lifecycle consults the [`Behaviours`] of its [`crate::LifecycleConfig`] at run time.

/// One behaviour a patch of the series adds to the lifecycle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Behaviour {
    /// `store-key-session-scope`: receipts keyed by the full scope (else by channel, as
    /// block/buzz#6088 keys them).
    ScopeKeys,
    /// `load-session-capability-gate`: restore and close only with the methods the agent
    /// advertised (else `session/load` for every receipt and no `session/close`, as #6088).
    CapabilityGate,
    /// `delta-context-delivery`: the delivery ledger is persisted with the receipt and seeds a
    /// reopened session (else a reopened session is shown the whole window again).
    DeltaContext,
    /// `resident-background-controllers`: finished sessions stay resident for hot follow-ups.
    Residency,
    /// `continuity-handoff`: turn counts survive restores; retired sessions hand off to their
    /// successors; exhausted or lost sessions are replaced by one that gets the whole thread.
    Continuity,
    /// `model-switch-in-place`: the owner's model switch is applied to each thread's session in
    /// place at its next turn. Brings [`Behaviour::Continuity`] (a session that cannot take the
    /// switch is retired with a handoff).
    ConfigInPlace,
    /// `operator-metrics`: the lifecycle's telemetry and the store worker's operations as
    /// Prometheus metrics on the opt-in `--metrics-listen` address.
    Metrics,
    /// `mentions-while-away`: mentions posted while no harness of the (relay, agent key)
    /// listened are answered once when one is back (crate `buzz-catch-up`, the harness's glue).
    /// The lifecycle itself is unchanged; the behaviour names the patch the catch-up flags need.
    CatchUp,
    /// `one-harness-per-agent`: a harness takes a lease on its (relay, agent key) before it
    /// connects, and a second one for the same pair refuses to start (crate `buzz-lease`, the
    /// harness's glue). The lifecycle is unchanged; the behaviour names the patch its flag needs.
    OneHarness,
}

impl Behaviour {
    /// Every behaviour, in series order.
    pub const ALL: [Behaviour; 9] = [
        Behaviour::ScopeKeys,
        Behaviour::CapabilityGate,
        Behaviour::DeltaContext,
        Behaviour::Residency,
        Behaviour::Continuity,
        Behaviour::ConfigInPlace,
        Behaviour::Metrics,
        Behaviour::CatchUp,
        Behaviour::OneHarness,
    ];

    /// The id of the patch that switches this behaviour on.
    pub fn patch(self) -> &'static str {
        match self {
            Behaviour::ScopeKeys => "store-key-session-scope",
            Behaviour::CapabilityGate => "load-session-capability-gate",
            Behaviour::DeltaContext => "delta-context-delivery",
            Behaviour::Residency => "resident-background-controllers",
            Behaviour::Continuity => "continuity-handoff",
            Behaviour::ConfigInPlace => "model-switch-in-place",
            Behaviour::Metrics => "operator-metrics",
            Behaviour::CatchUp => "mentions-while-away",
            Behaviour::OneHarness => "one-harness-per-agent",
        }
    }

    /// The behaviours this one cannot work without.
    fn requires(self) -> &'static [Behaviour] {
        match self {
            Behaviour::ConfigInPlace => &[Behaviour::Continuity],
            _ => &[],
        }
    }

    fn bit(self) -> u16 {
        1 << (self as u16)
    }
}

/// A set of behaviours: the ones switched on. `Behaviours::default()` is none of them — the
/// port of block/buzz#6088 alone. A set always holds what its behaviours require.
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Behaviours(u16);

impl Behaviours {
    /// Every behaviour on (the whole series).
    pub fn all() -> Self {
        Self::of(&Behaviour::ALL)
    }

    /// The set of `behaviours`, with what each requires.
    pub fn of(behaviours: &[Behaviour]) -> Self {
        behaviours
            .iter()
            .fold(Behaviours::default(), |set, b| set.with(*b))
    }

    /// This set with `behaviour` (and what it requires) switched on.
    #[must_use]
    pub fn with(self, behaviour: Behaviour) -> Self {
        let required = behaviour
            .requires()
            .iter()
            .fold(self, |set, b| set.with(*b));
        Behaviours(required.0 | behaviour.bit())
    }

    /// This set with `behaviour` switched off, and every behaviour that requires it.
    #[must_use]
    pub fn without(self, behaviour: Behaviour) -> Self {
        let rest = Behaviours(self.0 & !behaviour.bit());
        Behaviour::ALL
            .into_iter()
            .filter(|b| b.requires().contains(&behaviour))
            .fold(rest, |set, b| set.without(b))
    }

    /// Whether `behaviour` is on.
    pub fn has(self, behaviour: Behaviour) -> bool {
        self.0 & behaviour.bit() != 0
    }

    /// The behaviours that are on, in series order.
    pub fn iter(self) -> impl Iterator<Item = Behaviour> {
        Behaviour::ALL.into_iter().filter(move |b| self.has(*b))
    }
}

impl std::fmt::Debug for Behaviours {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_behaviour_brings_what_it_requires_and_takes_what_requires_it() {
        let set = Behaviours::default().with(Behaviour::ConfigInPlace);
        assert!(set.has(Behaviour::ConfigInPlace));
        assert!(set.has(Behaviour::Continuity));
        assert!(!set.has(Behaviour::Residency));
        assert_eq!(
            set.iter().collect::<Vec<_>>(),
            [Behaviour::Continuity, Behaviour::ConfigInPlace]
        );
        let without = Behaviours::all().without(Behaviour::Continuity);
        assert!(!without.has(Behaviour::Continuity));
        assert!(
            !without.has(Behaviour::ConfigInPlace),
            "it needs continuity"
        );
        assert!(without.has(Behaviour::Metrics));
        let without = Behaviours::all().without(Behaviour::ConfigInPlace);
        assert!(without.has(Behaviour::Continuity));
        assert!(!without.has(Behaviour::ConfigInPlace));
    }

    #[test]
    fn none_and_all() {
        assert_eq!(Behaviours::default().iter().count(), 0);
        assert_eq!(Behaviours::all().iter().collect::<Vec<_>>(), Behaviour::ALL);
        for b in Behaviour::ALL {
            assert!(!Behaviours::default().has(b));
            assert!(Behaviours::all().has(b));
            assert_eq!(Behaviours::of(&[b]).iter().last(), Some(b));
        }
        assert_eq!(
            format!("{:?}", Behaviours::of(&[Behaviour::Residency])),
            "{Residency}"
        );
    }

    #[test]
    fn every_behaviour_names_its_own_patch() {
        let patches: std::collections::BTreeSet<_> =
            Behaviour::ALL.iter().map(|b| b.patch()).collect();
        assert_eq!(patches.len(), Behaviour::ALL.len());
    }
}
