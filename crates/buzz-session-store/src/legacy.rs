//! The JSON receipt file of the first store, as far as the one-time import reads it.
//!
//! Before the SQL backends, receipts lived in one JSON document per agent key, which every write
//! re-read and rewrote whole:
//!
//! ```text
//! <state_dir>/sessions-<agent_pubkey>.json        the document (0600)
//! <state_dir>/sessions-<agent_pubkey>.json.lock   its writers' lock (0600, never deleted)
//!
//! {"version": 1|2, "scope": {"relay": "...", "agentPubkey": "..."}, "sessions": {"<storage key>": LegacyRecord}}
//! ```
//!
//! Nothing writes this format any more; [`crate::migrate`] imports such a file once. Decoding runs
//! its checks from "whose file is this?" to "is it well formed?": the version and the scope are
//! probed before the strict parse, so a newer harness's or another community's file with a shape
//! this version does not know is recognised as *theirs* (left alone) rather than as malformed.
//!
//! The format has no watermark (it predates it, see [`crate::ReceiptStore::watermark`]), and this
//! module is no store: it reads receipts only. An import therefore leaves the store's watermark
//! as it is, none for a new store, so the harness resumes its subscription as it would with no
//! watermark recorded; inventing one from the receipts' times would claim that mentions were
//! settled when nothing says they were.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use crate::fsio;
use crate::key::{KeyError, KeyScheme, ScopeKey, StoreScope};
use crate::record::{DeliveryRecord, SessionRecord};

/// Largest JSON file the import reads (4 MiB, the old store's own cap: it never wrote a larger
/// one).
pub(crate) const MAX_STORE_BYTES: usize = 4 * 1024 * 1024;

/// The JSON file of `agent_pubkey` in `state_dir` and its writers' lock, or `None` when the key
/// cannot name a file (the old store required non-empty ASCII alphanumerics, and so never wrote
/// one for any other key).
pub(crate) fn json_store_paths(state_dir: &Path, agent_pubkey: &str) -> Option<(PathBuf, PathBuf)> {
    let usable =
        !agent_pubkey.is_empty() && agent_pubkey.bytes().all(|b| b.is_ascii_alphanumeric());
    usable.then(|| {
        let path = state_dir.join(format!("sessions-{agent_pubkey}.json"));
        let lock_path = fsio::with_suffix(&path, ".lock");
        (path, lock_path)
    })
}

/// The strict shape of a store file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StoreFile {
    /// Format version; see [`KeyScheme::format_version`].
    version: u32,
    /// Whose receipts these are: already parsed and compared by the probe in [`decode`], which
    /// must run first, so the strict parse only needs to accept the field.
    #[serde(rename = "scope")]
    _scope: serde::de::IgnoredAny,
    /// Receipts by storage key.
    sessions: BTreeMap<String, LegacyRecord>,
}

/// One receipt as the JSON store wrote it: exactly these fields, nothing newer.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct LegacyRecord {
    session_id: String,
    model: Option<String>,
    permission_mode: Option<String>,
    #[serde(default)]
    requested_model: Option<String>,
    #[serde(default)]
    requested_permission_mode: Option<String>,
    #[serde(default)]
    delivery: Option<LegacyDelivery>,
}

/// The delivery ledger as the JSON store wrote it.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct LegacyDelivery {
    standing_context_sent: bool,
    delivered_event_ids: Vec<String>,
}

impl LegacyRecord {
    /// The receipt it describes. `predates_requested`: the record names neither requested field
    /// (see [`records_without_requested_fields`]).
    fn into_record(self, predates_requested: bool) -> SessionRecord {
        let mut record = SessionRecord::new(self.session_id);
        record.requested_model = if predates_requested {
            self.model.clone()
        } else {
            self.requested_model
        };
        record.requested_permission_mode = if predates_requested {
            self.permission_mode.clone()
        } else {
            self.requested_permission_mode
        };
        record.model = self.model;
        record.permission_mode = self.permission_mode;
        record.delivery = self.delivery.map(|d| DeliveryRecord {
            standing_context_sent: d.standing_context_sent,
            delivered_event_ids: d.delivered_event_ids,
        });
        record.normalized()
    }
}

/// A file this store may use.
#[derive(Debug)]
pub(crate) struct Decoded {
    /// The usable receipts.
    pub(crate) sessions: BTreeMap<ScopeKey, SessionRecord>,
    /// Entries that were present but not usable; they are not imported.
    pub(crate) dropped: Vec<Dropped>,
}

/// Why one entry was dropped while the rest of the file was kept.
#[derive(Debug)]
pub(crate) enum Dropped {
    /// The storage key is not canonical.
    BadKey(KeyError),
    /// A version-1 file can only hold channel keys.
    ThreadInVersion1 {
        /// The key as found.
        key: String,
    },
    /// A record without a session id is a malformed binding: dropped, not resumed.
    EmptySessionId {
        /// The key as found.
        key: String,
    },
}

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::BadKey(e) => write!(f, "{e}"),
            Self::ThreadInVersion1 { key } => {
                write!(
                    f,
                    "storage key {key:?}: a thread key in a version-1 (per channel) file"
                )
            }
            Self::EmptySessionId { key } => write!(f, "storage key {key:?}: empty session id"),
        }
    }
}

/// Why a whole file is not imported.
#[derive(Debug)]
pub(crate) enum Problem {
    /// Not JSON, or not the expected shape.
    Malformed(String),
    /// Written in a newer format than this scheme reads: someone else's.
    Future {
        /// The version found.
        version: u64,
    },
    /// Written for another relay or agent: someone else's.
    Foreign {
        /// Whose it is.
        found: StoreScope,
    },
}

/// Decodes a store file for `expected` under `scheme`.
pub(crate) fn decode(
    bytes: &[u8],
    expected: &StoreScope,
    scheme: KeyScheme,
) -> Result<Decoded, Problem> {
    let value: Value =
        serde_json::from_slice(bytes).map_err(|e| Problem::Malformed(e.to_string()))?;
    let version = value
        .get("version")
        .and_then(Value::as_u64)
        .ok_or_else(|| Problem::Malformed("no numeric \"version\" field".into()))?;
    if version > u64::from(scheme.format_version()) {
        return Err(Problem::Future { version });
    }
    if version == 0 {
        return Err(Problem::Malformed("version 0 does not exist".into()));
    }
    let scope = value
        .get("scope")
        .cloned()
        .ok_or_else(|| Problem::Malformed("no \"scope\" field".into()))?;
    let found: StoreScope =
        serde_json::from_value(scope).map_err(|e| Problem::Malformed(format!("scope: {e}")))?;
    if found != *expected {
        return Err(Problem::Foreign { found });
    }
    let predates_requested = records_without_requested_fields(&value);
    let file: StoreFile =
        serde_json::from_value(value).map_err(|e| Problem::Malformed(e.to_string()))?;

    let mut sessions = BTreeMap::new();
    let mut dropped = Vec::new();
    for (raw_key, record) in file.sessions {
        let key = match ScopeKey::parse_storage_key(&raw_key) {
            Ok(key) => key,
            Err(e) => {
                dropped.push(Dropped::BadKey(e));
                continue;
            }
        };
        if file.version == 1 && key.is_thread() {
            dropped.push(Dropped::ThreadInVersion1 { key: raw_key });
        } else if record.session_id.trim().is_empty() {
            dropped.push(Dropped::EmptySessionId { key: raw_key });
        } else {
            let predates = predates_requested.contains(&raw_key);
            sessions.insert(key, record.into_record(predates));
        }
    }
    Ok(Decoded { sessions, dropped })
}

/// Keys of records written before receipts carried the requested configuration (the first port
/// recorded only what was applied). What was applied is what had been requested, unless the agent
/// rejected the request, and then the applied value is the agent's default (`None`). Reading the
/// requested values from the applied ones therefore keeps every upgraded receipt that matches
/// today's configuration resumable; a rejected request reads as a change once, which opens a new
/// session, the safe direction. A record that names the fields (even as `null`) is taken as is.
fn records_without_requested_fields(value: &Value) -> HashSet<String> {
    let Some(records) = value.get("sessions").and_then(Value::as_object) else {
        return HashSet::new();
    };
    records
        .iter()
        .filter(|(_, r)| {
            r.get("requestedModel").is_none() && r.get("requestedPermissionMode").is_none()
        })
        .map(|(key, _)| key.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const CHANNEL: &str = "0b9f3a52-6c1e-4d2a-9f00-1234567890ab";

    fn scope() -> StoreScope {
        StoreScope {
            relay: "wss://relay.example".into(),
            agent_pubkey: "ab".repeat(32),
        }
    }

    fn decode_value(value: &Value, scheme: KeyScheme) -> Result<Decoded, Problem> {
        decode(&serde_json::to_vec(value).unwrap(), &scope(), scheme)
    }

    #[test]
    fn ownership_is_decided_before_shape() {
        // A newer harness's file with fields this version does not know: theirs, not corrupt.
        let future = json!({"version": 3, "scope": scope(), "sessions": {}, "extra": 1});
        assert!(matches!(
            decode_value(&future, KeyScheme::Scope),
            Err(Problem::Future { version: 3 })
        ));
        let mut other = scope();
        other.relay = "wss://other.example".into();
        let foreign = json!({"version": 2, "scope": other, "sessions": {"x": 1}});
        assert!(matches!(
            decode_value(&foreign, KeyScheme::Scope),
            Err(Problem::Foreign { found }) if found == other
        ));
        let ours_but_odd = json!({"version": 2, "scope": scope(), "sessions": {}, "extra": 1});
        assert!(matches!(
            decode_value(&ours_but_odd, KeyScheme::Scope),
            Err(Problem::Malformed(_))
        ));
    }

    #[test]
    fn malformed_inputs() {
        for bytes in [
            &b""[..],
            b"not json",
            b"[]",
            b"{\"version\":\"2\"}",
            b"{\"version\":0}",
        ] {
            assert!(
                matches!(
                    decode(bytes, &scope(), KeyScheme::Scope),
                    Err(Problem::Malformed(_))
                ),
                "{}",
                String::from_utf8_lossy(bytes)
            );
        }
        let no_scope = json!({"version": 2, "sessions": {}});
        assert!(matches!(
            decode_value(&no_scope, KeyScheme::Scope),
            Err(Problem::Malformed(_))
        ));
    }

    #[test]
    fn records_that_predate_the_requested_fields_read_them_from_the_applied_ones() {
        let other = "1c9f3a52-6c1e-4d2a-9f00-1234567890ab";
        let v1 = json!({"version": 1, "scope": scope(), "sessions": {
            CHANNEL: {"sessionId": "a", "model": "opus", "permissionMode": "plan"},
            other: {"sessionId": "b", "model": "opus", "permissionMode": null,
                    "requestedModel": null, "requestedPermissionMode": null},
        }});
        let decoded = decode_value(&v1, KeyScheme::Scope).unwrap();
        let old = &decoded.sessions[&ScopeKey::parse_storage_key(CHANNEL).unwrap()];
        assert_eq!(old.requested_model.as_deref(), Some("opus"));
        assert_eq!(old.requested_permission_mode.as_deref(), Some("plan"));
        let named = &decoded.sessions[&ScopeKey::parse_storage_key(other).unwrap()];
        assert_eq!(
            named.requested_model, None,
            "named fields are taken as written"
        );
        assert_eq!(named.requested_permission_mode, None);
    }

    #[test]
    fn version_one_holds_channel_keys_only() {
        let thread_key = format!("{CHANNEL}/{}", "cd".repeat(32));
        let v1 = json!({"version": 1, "scope": scope(), "sessions": {
            CHANNEL: {"sessionId": "a"},
            thread_key.clone(): {"sessionId": "b"},
        }});
        let decoded = decode_value(&v1, KeyScheme::Scope).unwrap();
        assert_eq!(decoded.sessions.len(), 1);
        assert!(
            matches!(&decoded.dropped[..], [Dropped::ThreadInVersion1 { key }] if *key == thread_key)
        );
    }
}
