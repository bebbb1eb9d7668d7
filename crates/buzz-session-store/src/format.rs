//! The on-disk document: decoding with every check in a fixed order, and encoding.
//!
//! ```text
//! {"version": 1|2, "scope": {"relay": "...", "agentPubkey": "..."}, "sessions": {"<storage key>": SessionRecord}}
//! ```
//!
//! Checks run from "whose file is this?" to "is it well formed?": the version and the scope are
//! probed before the strict parse, so a newer harness's or another community's file with a shape
//! this version does not know is recognised as *theirs* (left alone) rather than as corrupt
//! (which would be moved aside and replaced).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::key::{KeyError, KeyScheme, ScopeKey};
use crate::record::SessionRecord;
use crate::store::StoreScope;

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
    sessions: BTreeMap<String, SessionRecord>,
}

/// Borrowed twin of [`StoreFile`] for writing, so encoding does not clone every record.
#[derive(Serialize)]
struct StoreFileRef<'a> {
    version: u32,
    scope: &'a StoreScope,
    sessions: BTreeMap<String, &'a SessionRecord>,
}

/// A file this store may use.
#[derive(Debug)]
pub(crate) struct Decoded {
    /// The usable receipts.
    pub(crate) sessions: BTreeMap<ScopeKey, SessionRecord>,
    /// Entries that were present but not usable; they disappear on the next write.
    pub(crate) dropped: Vec<Dropped>,
}

/// Why one entry was dropped while the rest of the file was kept.
#[derive(Debug)]
pub(crate) enum Dropped {
    /// The storage key is not canonical.
    BadKey(KeyError),
    /// A version-1 file can only hold channel keys.
    ThreadInVersion1 { key: String },
    /// A record without a session id is a malformed binding: deleted, not resumed.
    EmptySessionId { key: String },
}

/// Why a whole file reads as empty.
#[derive(Debug)]
pub(crate) enum Problem {
    /// Not JSON, or not the expected shape: corrupt, may be replaced after quarantine.
    Malformed(String),
    /// Written by a newer format than this scheme reads: someone else's, never written.
    Future { version: u64 },
    /// Written for another relay or agent: someone else's, never written.
    Foreign { found: StoreScope },
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
            let mut record = record.normalized();
            if predates_requested.contains(&raw_key) {
                record.requested_model = record.model.clone();
                record.requested_permission_mode = record.permission_mode.clone();
            }
            sessions.insert(key, record);
        }
    }
    Ok(Decoded { sessions, dropped })
}

/// Keys of records written before receipts carried the requested configuration (the #6088 port
/// recorded only what was applied). What was applied is what had been requested, unless the agent
/// rejected the request, and then the applied value is the agent's default (`None`). Reading the
/// requested values from the applied ones therefore keeps every upgraded receipt that matches
/// today's configuration resumable; a rejected request reads as a change once, which opens a new
/// session, the safe direction. A record that names the fields (even as `null`) is taken as is.
fn records_without_requested_fields(value: &Value) -> std::collections::HashSet<String> {
    let Some(records) = value.get("sessions").and_then(Value::as_object) else {
        return Default::default();
    };
    records
        .iter()
        .filter(|(_, r)| {
            r.get("requestedModel").is_none() && r.get("requestedPermissionMode").is_none()
        })
        .map(|(key, _)| key.clone())
        .collect()
}

/// Encodes the document as pretty JSON with a trailing newline, in the scheme's format version
/// (which is how a version-1 file becomes version 2 on its first write under `Scope`).
pub(crate) fn encode(
    scope: &StoreScope,
    scheme: KeyScheme,
    sessions: &BTreeMap<ScopeKey, SessionRecord>,
) -> Result<Vec<u8>, serde_json::Error> {
    let file = StoreFileRef {
        version: scheme.format_version(),
        scope,
        sessions: sessions
            .iter()
            .map(|(key, record)| (key.to_storage_key(), record))
            .collect(),
    };
    let mut bytes = serde_json::to_vec_pretty(&file)?;
    bytes.push(b'\n');
    Ok(bytes)
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
