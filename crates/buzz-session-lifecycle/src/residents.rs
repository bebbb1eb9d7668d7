//! The resident table (patch `resident-background-controllers`, behaviour `Residency`): which
//! finished sessions stay live on which worker, in least-recently-used order, and why one left.
//!
//! Plain data with no knowledge of the lifecycle that consults it (see [`crate::residency`] for
//! the rules that keep and dispose residents).

use std::collections::BTreeMap;

use serde::Serialize;

/// A live session kept on a worker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resident {
    /// The worker slot holding the session.
    pub slot: usize,
    /// The ACP session id.
    pub session_id: String,
    /// The configuration the session was opened under.
    pub fingerprint: u64,
}

/// Why a resident was disposed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DisposeReason {
    /// A turn on it failed.
    TurnFailed,
    /// The owner cancelled its turn.
    Cancelled,
    /// A cancel arrived but the turn completed first: the answer stands, but nothing continues a
    /// session the owner stopped.
    CancelLostRace,
    /// `!rotate`, a model switch, removal from the channel, or a rotation after a limit.
    Abandoned,
    /// The configuration a new session would get changed (e.g. the model).
    ConfigChanged,
    /// More residents than the bound: the least recently used one goes.
    Evicted,
    /// Replaced by another session of the same scope.
    Replaced,
    /// Its worker process ended (or no longer holds the session).
    AgentExit,
    /// The idle pool sleep tore the workers down.
    IdleSleep,
    /// The harness is shutting down.
    Shutdown,
    /// An operator forgot the scope's receipt.
    Forgotten,
}

impl DisposeReason {
    /// Whether the session is still live on a running worker and must be released. A dead or
    /// sleeping worker's sessions die with its process.
    pub fn worker_alive(self) -> bool {
        !matches!(self, DisposeReason::AgentExit | DisposeReason::IdleSleep)
    }
}

#[derive(Debug)]
struct Entry {
    resident: Resident,
    used: u64,
}

/// The resident table.
#[derive(Debug)]
pub(crate) struct Residents<K> {
    cap: usize,
    entries: BTreeMap<K, Entry>,
    clock: u64,
}

impl<K: Ord + Clone> Residents<K> {
    pub(crate) fn new(cap: usize) -> Self {
        Residents {
            cap,
            entries: BTreeMap::new(),
            clock: 0,
        }
    }

    pub(crate) fn enabled(&self) -> bool {
        self.cap > 0
    }

    pub(crate) fn get(&self, scope: &K) -> Option<&Resident> {
        self.entries.get(scope).map(|e| &e.resident)
    }

    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether worker `slot` holds any resident.
    pub(crate) fn hosts(&self, slot: usize) -> bool {
        self.entries.values().any(|e| e.resident.slot == slot)
    }

    /// Marks `scope`'s resident as just used (LRU order).
    pub(crate) fn touch(&mut self, scope: &K) {
        self.clock += 1;
        if let Some(e) = self.entries.get_mut(scope) {
            e.used = self.clock;
        }
    }

    /// Keeps a live session for `scope`. Returns whether this is a new resident (not the same
    /// session kept again) and what left the table: the scope's previous resident if it was
    /// another session, and the least recently used residents beyond the cap (never `scope`
    /// itself, and never a scope in `busy`).
    pub(crate) fn keep(
        &mut self,
        scope: &K,
        resident: Resident,
        busy: impl Fn(&K) -> bool,
    ) -> (bool, Vec<(K, Resident, DisposeReason)>) {
        let mut gone = Vec::new();
        if self.cap == 0 {
            return (false, gone);
        }
        self.clock += 1;
        let same = self.entries.get(scope).is_some_and(|e| {
            e.resident.slot == resident.slot && e.resident.session_id == resident.session_id
        });
        let entry = Entry {
            resident,
            used: self.clock,
        };
        if let Some(old) = self.entries.insert(scope.clone(), entry)
            && !same
        {
            gone.push((scope.clone(), old.resident, DisposeReason::Replaced));
        }
        while self.entries.len() > self.cap {
            let victim = self
                .entries
                .iter()
                .filter(|(k, _)| *k != scope && !busy(k))
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| k.clone());
            let Some(victim) = victim else { break };
            if let Some(e) = self.entries.remove(&victim) {
                gone.push((victim, e.resident, DisposeReason::Evicted));
            }
        }
        (!same, gone)
    }

    /// Disposes `scope`'s resident, whichever it is.
    pub(crate) fn dispose(&mut self, scope: &K) -> Option<Resident> {
        self.entries.remove(scope).map(|e| e.resident)
    }

    /// Disposes every resident for which `pick` holds.
    pub(crate) fn dispose_where(
        &mut self,
        pick: impl Fn(&K, &Resident) -> bool,
    ) -> Vec<(K, Resident)> {
        let scopes: Vec<K> = self
            .entries
            .iter()
            .filter(|(k, e)| pick(k, &e.resident))
            .map(|(k, _)| k.clone())
            .collect();
        scopes
            .into_iter()
            .filter_map(|k| self.dispose(&k).map(|r| (k, r)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn never(_: &&'static str) -> bool {
        false
    }

    fn r(slot: usize, session: &str, fingerprint: u64) -> Resident {
        Resident {
            slot,
            session_id: session.into(),
            fingerprint,
        }
    }

    #[test]
    fn keeping_the_same_session_is_a_touch_and_another_replaces_it_once() {
        let mut t = Residents::new(4);
        assert_eq!(t.keep(&"a", r(0, "s1", 7), never), (true, vec![]));
        assert_eq!(t.keep(&"a", r(0, "s1", 8), never), (false, vec![]));
        assert_eq!(t.get(&"a").unwrap().fingerprint, 8);
        let (new, gone) = t.keep(&"a", r(1, "s2", 7), never);
        assert!(new);
        assert_eq!(gone, vec![("a", r(0, "s1", 8), DisposeReason::Replaced)]);
        assert_eq!(t.dispose(&"a").unwrap().session_id, "s2");
        assert!(t.dispose(&"a").is_none(), "disposal happens once");
    }

    #[test]
    fn eviction_takes_the_least_recently_used_idle_resident() {
        let mut t = Residents::new(2);
        t.keep(&"a", r(0, "sa", 1), never);
        t.keep(&"b", r(1, "sb", 1), never);
        t.touch(&"a");
        let (_, gone) = t.keep(&"c", r(2, "sc", 1), never);
        assert_eq!(gone.len(), 1);
        assert_eq!((gone[0].0, gone[0].2), ("b", DisposeReason::Evicted));
        // A busy scope is never evicted, even when it is the oldest.
        let (_, gone) = t.keep(&"d", r(3, "sd", 1), |k| *k == "a");
        assert_eq!(gone[0].0, "c");
        assert_eq!(t.len(), 2);
        assert!(t.hosts(0) && t.hosts(3) && !t.hosts(2));
    }

    #[test]
    fn zero_cap_keeps_nothing() {
        let mut t = Residents::new(0);
        assert!(!t.enabled());
        assert_eq!(t.keep(&"a", r(0, "s", 1), never), (false, vec![]));
        assert!(t.get(&"a").is_none());
    }

    #[test]
    fn dispose_where_selects_by_predicate_and_reasons_say_whether_to_release() {
        let mut t = Residents::new(8);
        t.keep(&"a", r(0, "sa", 1), never);
        t.keep(&"b", r(1, "sb", 1), never);
        t.keep(&"c", r(0, "sc", 1), never);
        let mut gone: Vec<_> = t
            .dispose_where(|_, r| r.slot == 0)
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        gone.sort();
        assert_eq!(gone, ["a", "c"]);
        assert!(t.get(&"b").is_some());
        assert!(DisposeReason::Evicted.worker_alive());
        assert!(!DisposeReason::AgentExit.worker_alive());
        assert!(!DisposeReason::IdleSleep.worker_alive());
    }
}
