//! Which conversation a receipt belongs to, and how that key is spelled on disk.
//!
//! [`ScopeKey`] mirrors buzz-acp's `SessionScope` without depending on it (buzz-acp depends on this
//! crate, not the other way round): a whole channel (`Conversation`) or one canonical NIP-10 thread
//! (`Thread`). The channel stays the authorization boundary, so every key carries it.
//!
//! [`KeyScheme`] decides how finely receipts are keyed. `Channel` is the faithful port of the
//! upstream pull request (one receipt per channel, file format 1); `Scope` is the fork's extension that follows
//! the session scope (threads of one channel resume their own sessions, format 2).
//!
//! [`StoreScope`] is the outer part of every key: whose receipts these are (a relay and an agent
//! key). Every row of every backend is keyed by it, so two relays or two agents can share one
//! database without seeing each other's receipts.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Whose receipts a store holds. `session/load` sends only an opaque id, so a receipt written for
/// another relay (community) or agent key must never be used, even if a channel UUID collides.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StoreScope {
    /// The relay's identity, compared exactly (callers pass one canonical spelling).
    pub relay: String,
    /// The agent's public key.
    pub agent_pubkey: String,
}

/// The key of one stored receipt: a channel conversation or one thread inside a channel.
///
/// Ids are lowercase: upstream lowercases thread roots at admission so that `AB…` and `ab…` share
/// one session, and the storage form must agree with that or two spellings would get two receipts.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ScopeKey {
    /// The whole channel is one session (DMs, and every event under the `channel` policy).
    Conversation {
        /// Channel UUID, lowercase hyphenated.
        channel_id: String,
    },
    /// One session per canonical thread root inside a channel.
    Thread {
        /// Channel UUID, lowercase hyphenated.
        channel_id: String,
        /// Canonical NIP-10 thread root: 64 lowercase hex characters.
        root_event_id: String,
    },
}

/// A storage key that is not the canonical spelling of a [`ScopeKey`].
///
/// Every variant names the offending key, because the only place these surface is a warning about
/// a hand-edited or foreign store file, and the operator needs to find the entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The channel part is not a lowercase 8-4-4-4-12 hex UUID.
    #[error("storage key {key:?}: channel id is not a lowercase UUID (8-4-4-4-12 hex)")]
    Channel {
        /// The whole key as found.
        key: String,
    },
    /// The thread root is not 64 lowercase hex characters.
    #[error("storage key {key:?}: thread root is not 64 lowercase hex characters")]
    Root {
        /// The whole key as found.
        key: String,
    },
}

impl ScopeKey {
    /// A conversation key for `channel_id`, lowercased so every spelling maps to one receipt.
    pub fn conversation(channel_id: impl AsRef<str>) -> Self {
        Self::Conversation {
            channel_id: channel_id.as_ref().to_ascii_lowercase(),
        }
    }

    /// A thread key; both ids are lowercased (upstream canonicalises roots the same way).
    pub fn thread(channel_id: impl AsRef<str>, root_event_id: impl AsRef<str>) -> Self {
        Self::Thread {
            channel_id: channel_id.as_ref().to_ascii_lowercase(),
            root_event_id: root_event_id.as_ref().to_ascii_lowercase(),
        }
    }

    /// The channel, always present: it is the authorization boundary for every scope.
    pub fn channel_id(&self) -> &str {
        match self {
            Self::Conversation { channel_id } | Self::Thread { channel_id, .. } => channel_id,
        }
    }

    /// The thread root, for thread keys only.
    pub fn root_event_id(&self) -> Option<&str> {
        match self {
            Self::Conversation { .. } => None,
            Self::Thread { root_event_id, .. } => Some(root_event_id),
        }
    }

    /// Whether this key names one thread rather than a whole channel.
    pub fn is_thread(&self) -> bool {
        matches!(self, Self::Thread { .. })
    }

    /// The conversation key of this key's channel (what upstream #6088 keys every receipt by).
    pub fn to_channel_key(&self) -> ScopeKey {
        Self::Conversation {
            channel_id: self.channel_id().to_owned(),
        }
    }

    /// The canonical string used as the JSON map key: `"<channel>"` or `"<channel>/<root>"`.
    ///
    /// `/` cannot occur in a UUID or a hex root, so the split back is unambiguous.
    pub fn to_storage_key(&self) -> String {
        match self {
            Self::Conversation { channel_id } => channel_id.clone(),
            Self::Thread {
                channel_id,
                root_event_id,
            } => format!("{channel_id}/{root_event_id}"),
        }
    }

    /// Parses a storage key strictly: only the exact canonical spelling is accepted.
    ///
    /// Strictness is what lets the store drop a hand-edited or corrupted entry instead of resuming
    /// a session under a key that the harness would never derive.
    ///
    /// # Errors
    /// [`KeyError`] naming the key when the channel is not a lowercase UUID or the root is not 64
    /// lowercase hex characters (this includes empty parts and extra `/` separators).
    pub fn parse_storage_key(s: &str) -> Result<ScopeKey, KeyError> {
        let (channel, root) = match s.split_once('/') {
            Some((channel, root)) => (channel, Some(root)),
            None => (s, None),
        };
        if !is_lowercase_uuid(channel) {
            return Err(KeyError::Channel { key: s.to_owned() });
        }
        match root {
            None => Ok(Self::Conversation {
                channel_id: channel.to_owned(),
            }),
            Some(root) if is_lowercase_hex(root, 64) => Ok(Self::Thread {
                channel_id: channel.to_owned(),
                root_event_id: root.to_owned(),
            }),
            Some(_) => Err(KeyError::Root { key: s.to_owned() }),
        }
    }

    /// Checks that this key survives a storage round trip, i.e. that a receipt written under it
    /// could ever be read back. Keys built by the constructors from real ids always do.
    ///
    /// # Errors
    /// The [`KeyError`] that [`ScopeKey::parse_storage_key`] reports for the storage form.
    pub fn validate(&self) -> Result<(), KeyError> {
        Self::parse_storage_key(&self.to_storage_key()).map(|_| ())
    }
}

/// Displays the storage form, which is also what tracing fields show.
impl fmt::Display for ScopeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_storage_key())
    }
}

/// How finely receipts are keyed, which also fixes the on-disk format version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyScheme {
    /// Faithful port of upstream #6088: format version 1, one receipt per channel. Two threads of
    /// one channel share (and overwrite) one record, exactly as upstream would.
    Channel,
    /// The fork's extension: format version 2, one receipt per session scope. A version-1 file is
    /// read as conversation records and rewritten as version 2 on the next write.
    Scope,
}

impl KeyScheme {
    /// The file format version this scheme writes, and the newest it can read.
    pub fn format_version(self) -> u32 {
        match self {
            Self::Channel => 1,
            Self::Scope => 2,
        }
    }

    /// The key a receipt for `key` is stored under in this scheme.
    pub fn map(self, key: &ScopeKey) -> ScopeKey {
        match self {
            Self::Channel => key.to_channel_key(),
            Self::Scope => key.clone(),
        }
    }
}

/// Lowercase hyphenated UUID: 8-4-4-4-12 hex digits.
fn is_lowercase_uuid(s: &str) -> bool {
    let mut groups = s.split('-');
    let ok = [8, 4, 4, 4, 12]
        .iter()
        .all(|&len| groups.next().is_some_and(|g| is_lowercase_hex(g, len)));
    ok && groups.next().is_none()
}

fn is_lowercase_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHANNEL: &str = "0b9f3a52-6c1e-4d2a-9f00-1234567890ab";
    const ROOT: &str = "ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12cd34ef56ab12";

    #[test]
    fn storage_keys_round_trip() {
        for key in [
            ScopeKey::conversation(CHANNEL),
            ScopeKey::thread(CHANNEL, ROOT),
        ] {
            let stored = key.to_storage_key();
            assert_eq!(ScopeKey::parse_storage_key(&stored), Ok(key.clone()));
            assert_eq!(key.to_string(), stored);
            assert_eq!(key.validate(), Ok(()));
        }
        assert_eq!(ScopeKey::conversation(CHANNEL).to_storage_key(), CHANNEL);
        assert_eq!(
            ScopeKey::thread(CHANNEL, ROOT).to_storage_key(),
            format!("{CHANNEL}/{ROOT}")
        );
    }

    #[test]
    fn constructors_lowercase_so_spellings_share_one_key() {
        let upper = ScopeKey::thread(CHANNEL.to_uppercase(), ROOT.to_uppercase());
        assert_eq!(upper, ScopeKey::thread(CHANNEL, ROOT));
        assert_eq!(
            ScopeKey::conversation(CHANNEL.to_uppercase()),
            ScopeKey::conversation(CHANNEL)
        );
    }

    #[test]
    fn non_canonical_storage_keys_are_rejected_and_named() {
        let bad_channels = [
            String::new(),
            "not-a-uuid".to_owned(),
            CHANNEL.to_uppercase(),
            CHANNEL.replace('-', ""),
            format!("{CHANNEL}-0"),
            format!("{}g", &CHANNEL[..35]),
            format!("/{ROOT}"),
        ];
        for key in bad_channels {
            assert_eq!(
                ScopeKey::parse_storage_key(&key),
                Err(KeyError::Channel { key: key.clone() }),
                "{key:?}"
            );
        }
        let bad_roots = [
            format!("{CHANNEL}/"),
            format!("{CHANNEL}/{}", &ROOT[..63]),
            format!("{CHANNEL}/{ROOT}0"),
            format!("{CHANNEL}/{}", ROOT.to_uppercase()),
            format!("{CHANNEL}/{ROOT}/{ROOT}"),
        ];
        for key in bad_roots {
            let err = ScopeKey::parse_storage_key(&key).unwrap_err();
            assert_eq!(err, KeyError::Root { key: key.clone() });
            assert!(err.to_string().contains(&key), "{err}");
        }
        assert!(ScopeKey::conversation("general").validate().is_err());
    }

    #[test]
    fn accessors() {
        let thread = ScopeKey::thread(CHANNEL, ROOT);
        assert_eq!(thread.channel_id(), CHANNEL);
        assert_eq!(thread.root_event_id(), Some(ROOT));
        assert!(thread.is_thread());
        assert_eq!(thread.to_channel_key(), ScopeKey::conversation(CHANNEL));
        let conversation = ScopeKey::conversation(CHANNEL);
        assert_eq!(conversation.root_event_id(), None);
        assert!(!conversation.is_thread());
        assert_eq!(conversation.to_channel_key(), conversation);
    }

    #[test]
    fn scheme_mapping_and_versions() {
        let thread = ScopeKey::thread(CHANNEL, ROOT);
        let conversation = ScopeKey::conversation(CHANNEL);
        assert_eq!(KeyScheme::Channel.format_version(), 1);
        assert_eq!(KeyScheme::Scope.format_version(), 2);
        assert_eq!(KeyScheme::Channel.map(&thread), conversation);
        assert_eq!(KeyScheme::Channel.map(&conversation), conversation);
        assert_eq!(KeyScheme::Scope.map(&thread), thread);
        assert_eq!(KeyScheme::Scope.map(&conversation), conversation);
    }
}
