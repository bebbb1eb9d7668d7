//! Identities the table hands out and compares: turn starts, resident handles and
//! configuration fingerprints.

use std::fmt;

/// Identifies one turn start (a cold/warm `begin` or a hot `Continue`).
///
/// Every terminal report (`finish`) and every `settle` names the start it belongs to, so a
/// late report from a superseded turn can be recognised and ignored instead of clobbering the
/// newer turn's state. Ids are issued from a per-table counter and never reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StartId(pub(crate) u64);

impl StartId {
    /// The raw counter value, for logs and metrics only.
    #[must_use]
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for StartId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "start#{}", self.0)
    }
}

/// Identifies one registration of a live session as a scope's resident.
///
/// Disposal can be guarded by this id: a caller that remembers the handle it saw can ask to
/// dispose "that one" and the table refuses if the scope has since been given another
/// resident. A hot continuation keeps the handle; only a new session gets a new one. Ids are
/// never reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HandleId(pub(crate) u64);

impl HandleId {
    /// The raw counter value, for logs and metrics only.
    #[must_use]
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for HandleId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "resident#{}", self.0)
    }
}

/// A hash of the configuration an ACP session was created with (cwd, MCP servers, model,
/// permission mode).
///
/// Those settings are fixed at `session/new`, so a resident session is only reusable while the
/// scope's current configuration still hashes to the same value. Build it with
/// [`fingerprint_of`] so both sides hash the same way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint(pub u64);

const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// Terminates every part. `0xFF` never occurs in UTF-8, so `["ab"]`, `["a", "b"]` and
/// `["ab", ""]` all hash differently.
const PART_TERMINATOR: u8 = 0xFF;

fn fnv1a_extend(mut hash: u64, bytes: &[u8]) -> u64 {
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(FNV_PRIME);
    }
    hash
}

/// Fingerprints a session configuration from its parts (FNV-1a 64, each part terminated by a
/// byte that cannot occur in UTF-8).
///
/// The value is stable across processes, platforms and releases, unlike `std`'s randomly
/// seeded hashers, so it could be logged or persisted next to a session id. It is **not**
/// cryptographic: it only detects accidental configuration drift, and anyone who controls the
/// parts can construct collisions. Callers should pass the parts in a fixed order (and sort
/// unordered collections such as MCP server lists first).
#[must_use]
pub fn fingerprint_of(parts: &[&str]) -> Fingerprint {
    let hash = parts.iter().fold(FNV_OFFSET_BASIS, |hash, part| {
        fnv1a_extend(fnv1a_extend(hash, part.as_bytes()), &[PART_TERMINATOR])
    });
    Fingerprint(hash)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_reference_vectors() {
        // Published FNV-1a 64 test vectors: if these drift, persisted fingerprints would too.
        for (input, expected) in [
            ("", 0xcbf2_9ce4_8422_2325_u64),
            ("a", 0xaf63_dc4c_8601_ec8c),
            ("foobar", 0x8594_4171_f739_67e8),
        ] {
            assert_eq!(
                fnv1a_extend(FNV_OFFSET_BASIS, input.as_bytes()),
                expected,
                "{input:?}"
            );
        }
    }

    #[test]
    fn fingerprint_separates_parts() {
        let cases: [&[&str]; 5] = [&[], &["ab"], &["a", "b"], &["ab", ""], &["", "ab"]];
        for (i, a) in cases.iter().enumerate() {
            for (j, b) in cases.iter().enumerate() {
                assert_eq!(
                    fingerprint_of(a) == fingerprint_of(b),
                    i == j,
                    "{a:?} vs {b:?}"
                );
            }
        }
        assert_eq!(fingerprint_of(&[]), Fingerprint(FNV_OFFSET_BASIS));
        assert_eq!(
            fingerprint_of(&["a"]),
            Fingerprint(fnv1a_extend(FNV_OFFSET_BASIS, b"a\xff"))
        );
    }

    #[test]
    fn fingerprint_is_deterministic() {
        let parts = ["/work/repo", "mcp:fs", "model:x", "mode:ask"];
        assert_eq!(fingerprint_of(&parts), fingerprint_of(&parts));
    }
}
