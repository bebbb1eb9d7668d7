//! The configuration a session is opened under, as a comparable value.
//!
//! A live session is continued, and a stored one reopened, only while the configuration the
//! harness would give a new session is the one the session was opened under. The parts fixed at
//! `session/new` (working directory, MCP servers) and the requested model and permission mode are
//! folded into one fingerprint; the requested model and permission mode are also kept as names,
//! because a receipt stores them and is compared by them.

use crate::behaviours::{Behaviour, Behaviours};

/// The configuration a new session would get now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SessionConfig {
    /// A digest of everything fixed at `session/new` (cwd, MCP servers, model, permission mode).
    pub fingerprint: u64,
    /// The model the harness asks for now (`None`: the agent's default).
    pub requested_model: Option<String>,
    /// The permission mode the harness asks for now (`None`: the agent's default).
    pub requested_permission_mode: Option<String>,
}

impl SessionConfig {
    /// The configuration of a session created now: `fixed` holds what else is fixed at
    /// `session/new` (cwd, MCP servers, …); the requested model and permission mode are part of
    /// the fingerprint too.
    ///
    /// With in-place configuration changes ([`Behaviour::ConfigInPlace`] among `behaviours`)
    /// the model is not part of the fingerprint: a session opened under another model is
    /// switched, not replaced.
    pub fn new(
        behaviours: Behaviours,
        fixed: &[&str],
        model: Option<&str>,
        permission_mode: Option<&str>,
    ) -> Self {
        let mut parts = fixed.to_vec();
        if !behaviours.has(Behaviour::ConfigInPlace) {
            parts.push(model.unwrap_or(""));
        }
        parts.push(permission_mode.unwrap_or(""));
        SessionConfig {
            fingerprint: fingerprint_of(&parts),
            requested_model: model.map(str::to_string),
            requested_permission_mode: permission_mode.map(str::to_string),
        }
    }
}

/// A stable 64-bit digest of configuration parts (FNV-1a; each part is length-prefixed so
/// `["ab", "c"]` and `["a", "bc"]` differ). Stable across processes and releases, unlike
/// `std`'s hasher.
pub fn fingerprint_of(parts: &[&str]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash = OFFSET;
    let mut feed = |bytes: &[u8]| {
        for b in bytes {
            hash ^= u64::from(*b);
            hash = hash.wrapping_mul(PRIME);
        }
    };
    for part in parts {
        feed(&(part.len() as u64).to_le_bytes());
        feed(part.as_bytes());
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_are_stable_and_separate_parts() {
        assert_eq!(fingerprint_of(&["a", "b"]), fingerprint_of(&["a", "b"]));
        assert_ne!(fingerprint_of(&["ab", "c"]), fingerprint_of(&["a", "bc"]));
        assert_ne!(fingerprint_of(&[]), fingerprint_of(&[""]));
        for behaviours in [
            Behaviours::all().without(Behaviour::ConfigInPlace),
            Behaviours::of(&[Behaviour::ConfigInPlace]),
        ] {
            let m1 = SessionConfig::new(behaviours, &["/srv", "[]"], Some("m1"), None);
            let m2 = SessionConfig::new(behaviours, &["/srv", "[]"], Some("m2"), None);
            assert_eq!(
                m1.fingerprint == m2.fingerprint,
                behaviours.has(Behaviour::ConfigInPlace),
                "the model is switched in place, or part of what a session is: {behaviours:?}"
            );
            assert_eq!(m1.requested_model.as_deref(), Some("m1"));
        }
    }
}
