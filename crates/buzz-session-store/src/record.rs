//! What one receipt remembers about a session.
//!
//! A receipt is what the harness needs to reopen a session (`session/load` or `session/resume`)
//! and to decide whether doing so is still right: the opaque session id, the configuration that
//! was applied and requested, the delivery ledger, how far the session has come (turns, the last
//! usage the agent reported), and, around a rotation, whether the session was retired and what it
//! hands over to its successor.
//!
//! A receipt holds ids, model and permission-mode names, event ids and counters, and one piece of
//! model text: the [`Handoff`] a retired session leaves for the next one, bounded by
//! [`MAX_HANDOFF_TEXT_BYTES`]. It never holds prompts, replies or key material. The handoff is
//! the one exception, and it exists so that a rotation survives a restart: without it the
//! successor would start with nothing from its predecessor.

use serde::{Deserialize, Serialize};

use crate::error::StoreError;

/// Largest handoff text a receipt holds (16 KiB of UTF-8). A larger one is refused
/// ([`StoreError::Invalid`]), not cut: the lifecycle that writes it decides how to shorten it.
pub const MAX_HANDOFF_TEXT_BYTES: usize = 16 * 1024;

/// Largest handoff reason or retirement reason (a short label such as `"context-full"`).
pub const MAX_REASON_BYTES: usize = 256;

/// Most event ids a delivery ledger may hold. This is a check on input, not a retention policy:
/// the lifecycle decides which ids to keep (the ids still inside its context window, at most a
/// hundred or so) and the store stores exactly those. A ledger over this limit can only come from
/// a bug, and is refused ([`StoreError::Invalid`]) rather than silently cut, so the store never
/// makes a second, different choice of ids.
pub const MAX_LEDGER_IDS: usize = 4096;

/// One stored receipt: a session the harness created and may reopen later.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionRecord {
    /// The agent's opaque session id, as returned by `session/new`.
    pub session_id: String,
    /// The model actually APPLIED to the session. `None` = the agent's default, which is also how
    /// a rejected or unsupported model request is recorded: the receipt must not claim a
    /// configuration the session never had. An in-place model change rewrites it.
    pub model: Option<String>,
    /// The permission mode actually applied; `None` = the agent's default (same rule as `model`).
    pub permission_mode: Option<String>,
    /// The model the harness was configured to ask for. Compatibility compares this, not `model`:
    /// the operator's configuration is what must not have changed, while a request the agent
    /// rejected would simply be rejected again.
    pub requested_model: Option<String>,
    /// The permission mode the harness was configured to ask for (see `requested_model`).
    pub requested_permission_mode: Option<String>,
    /// What has already been delivered into this session, so a reopened session is not sent the
    /// same standing context and history again. Absent until the first turn is committed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<DeliveryRecord>,
    /// Completed turns of this session. `None`: unknown (a receipt written before receipts
    /// counted turns, or rewritten by such a harness since).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turns: Option<u32>,
    /// The last usage the agent reported for this session (ACP `usage_update`). `None`: unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// A handoff from a retired session. On a live receipt it is for THIS receipt's session, to be
    /// given at its next prompt (cleared by the commit that reports it delivered); on a retired
    /// receipt it is for the session that replaces this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<Handoff>,
    /// Set when the harness retired this receipt's session (a rotation): the next turn must open
    /// a new session, not reopen this one, and give it the handoff.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired: Option<Retirement>,
}

/// The delivery ledger of one session.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeliveryRecord {
    /// Legacy agents: the standing context (base prompt etc.) has been sent into this session.
    pub standing_context_sent: bool,
    /// Event ids already shown to this session. Sorted and unique when written; at most
    /// [`MAX_LEDGER_IDS`].
    pub delivered_event_ids: Vec<String>,
}

/// Token usage as the agent last reported it (ACP `usage_update`: `used` and `size`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Usage {
    /// Tokens in the session's context (`used`).
    pub used_tokens: u64,
    /// The context window's size (`size`), when the agent said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_tokens: Option<u64>,
}

/// What a retired session hands over to its successor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Handoff {
    /// The text given to the successor at its first prompt (at most
    /// [`MAX_HANDOFF_TEXT_BYTES`]).
    pub text: String,
    /// Why the predecessor was retired (at most [`MAX_REASON_BYTES`]).
    pub reason: String,
    /// The retired session the text comes from.
    pub from_session_id: String,
}

/// Why a receipt's session was retired.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Retirement {
    /// A short label (at most [`MAX_REASON_BYTES`]).
    pub reason: String,
}

impl SessionRecord {
    /// A record for a freshly created session: no ledger, no turns, nothing handed over.
    pub fn new(session_id: impl Into<String>) -> Self {
        Self {
            session_id: session_id.into(),
            model: None,
            permission_mode: None,
            requested_model: None,
            requested_permission_mode: None,
            delivery: None,
            turns: None,
            usage: None,
            handoff: None,
            retired: None,
        }
    }

    /// The canonical form a store writes and reads back: delivery ids sorted, unique and
    /// non-empty. A model of the store stores this form too, so it answers reads as a store does.
    #[must_use]
    pub fn normalized(mut self) -> Self {
        if let Some(delivery) = self.delivery.as_mut() {
            delivery.normalize();
        }
        self
    }

    /// Refuses what a store must not hold: an empty session id, an oversize ledger, handoff or
    /// reason. `key` names the receipt in the error.
    pub(crate) fn check(&self, key: &str) -> Result<(), StoreError> {
        if self.session_id.trim().is_empty() {
            return Err(invalid(key, "empty session id".into()));
        }
        if let Some(delivery) = &self.delivery {
            check_ledger(key, &delivery.delivered_event_ids)?;
        }
        if let Some(handoff) = &self.handoff {
            check_handoff(key, handoff)?;
        }
        if let Some(retired) = &self.retired {
            check_reason(key, "retirement reason", &retired.reason)?;
        }
        Ok(())
    }
}

impl DeliveryRecord {
    /// Sorts and de-duplicates the ids and drops empty ones (an empty id is never treated as
    /// delivered, so remembering it is useless).
    pub(crate) fn normalize(&mut self) {
        self.delivered_event_ids.retain(|id| !id.is_empty());
        self.delivered_event_ids.sort_unstable();
        self.delivered_event_ids.dedup();
    }
}

/// Refuses a ledger over [`MAX_LEDGER_IDS`].
pub(crate) fn check_ledger(key: &str, ids: &[String]) -> Result<(), StoreError> {
    if ids.len() > MAX_LEDGER_IDS {
        return Err(invalid(
            key,
            format!(
                "a delivery ledger of {} ids (at most {MAX_LEDGER_IDS})",
                ids.len()
            ),
        ));
    }
    Ok(())
}

/// Refuses a handoff whose text or reason is over its limit.
pub(crate) fn check_handoff(key: &str, handoff: &Handoff) -> Result<(), StoreError> {
    if handoff.text.len() > MAX_HANDOFF_TEXT_BYTES {
        return Err(invalid(
            key,
            format!(
                "a handoff text of {} bytes (at most {MAX_HANDOFF_TEXT_BYTES})",
                handoff.text.len()
            ),
        ));
    }
    check_reason(key, "handoff reason", &handoff.reason)
}

fn check_reason(key: &str, what: &str, reason: &str) -> Result<(), StoreError> {
    if reason.len() > MAX_REASON_BYTES {
        return Err(invalid(
            key,
            format!(
                "a {what} of {} bytes (at most {MAX_REASON_BYTES})",
                reason.len()
            ),
        ));
    }
    Ok(())
}

fn invalid(key: &str, reason: String) -> StoreError {
    StoreError::Invalid {
        key: key.to_owned(),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn serializes_camel_case_and_omits_what_is_unknown() {
        let mut record = SessionRecord::new("sess-1");
        record.requested_model = Some("opus".into());
        assert_eq!(
            serde_json::to_value(&record).unwrap(),
            json!({
                "sessionId": "sess-1",
                "model": null,
                "permissionMode": null,
                "requestedModel": "opus",
                "requestedPermissionMode": null,
            })
        );
        record.delivery = Some(DeliveryRecord {
            standing_context_sent: true,
            delivered_event_ids: vec!["e1".into()],
        });
        record.turns = Some(3);
        record.usage = Some(Usage {
            used_tokens: 1200,
            context_tokens: Some(200_000),
        });
        record.handoff = Some(Handoff {
            text: "we were fixing the parser".into(),
            reason: "context-full".into(),
            from_session_id: "sess-0".into(),
        });
        record.retired = Some(Retirement {
            reason: "rotation".into(),
        });
        let value = serde_json::to_value(&record).unwrap();
        assert_eq!(
            value["delivery"],
            json!({"standingContextSent": true, "deliveredEventIds": ["e1"]})
        );
        assert_eq!(value["turns"], json!(3));
        assert_eq!(
            value["usage"],
            json!({"usedTokens": 1200, "contextTokens": 200_000})
        );
        assert_eq!(value["handoff"]["fromSessionId"], json!("sess-0"));
        assert_eq!(value["retired"], json!({"reason": "rotation"}));
        assert_eq!(
            serde_json::from_value::<SessionRecord>(value).unwrap(),
            record
        );
    }

    #[test]
    fn unknown_fields_are_rejected_at_every_level() {
        let extra_top = json!({"sessionId": "s", "model": null, "permissionMode": null,
            "requestedModel": null, "requestedPermissionMode": null, "prompt": "secret"});
        assert!(serde_json::from_value::<SessionRecord>(extra_top).is_err());
        let extra_usage = json!({"sessionId": "s", "model": null, "permissionMode": null,
            "requestedModel": null, "requestedPermissionMode": null,
            "usage": {"usedTokens": 1, "cost": 2}});
        assert!(serde_json::from_value::<SessionRecord>(extra_usage).is_err());
    }

    #[test]
    fn normalization_sorts_dedups_and_drops_empty_ids() {
        let mut record = SessionRecord::new("s");
        record.delivery = Some(DeliveryRecord {
            standing_context_sent: false,
            delivered_event_ids: vec!["b".into(), String::new(), "a".into(), "b".into()],
        });
        let ids = record.normalized().delivery.unwrap().delivered_event_ids;
        assert_eq!(ids, ["a", "b"]);
    }

    #[test]
    fn oversize_parts_are_refused_naming_the_key() {
        let mut record = SessionRecord::new("s");
        assert!(record.check("k").is_ok());
        record.handoff = Some(Handoff {
            text: "x".repeat(MAX_HANDOFF_TEXT_BYTES),
            reason: "r".into(),
            from_session_id: "old".into(),
        });
        assert!(record.check("k").is_ok(), "the limit itself is allowed");
        record.handoff.as_mut().unwrap().text.push('x');
        let err = record.check("k").unwrap_err();
        assert!(
            matches!(&err, StoreError::Invalid { key, reason } if key == "k" && reason.contains("16384")),
            "{err:?}"
        );
        let mut record = SessionRecord::new("s");
        record.delivery = Some(DeliveryRecord {
            standing_context_sent: false,
            delivered_event_ids: (0..=MAX_LEDGER_IDS).map(|i| format!("e{i}")).collect(),
        });
        assert!(matches!(record.check("k"), Err(StoreError::Invalid { .. })));
        let mut record = SessionRecord::new("s");
        record.retired = Some(Retirement {
            reason: "r".repeat(MAX_REASON_BYTES + 1),
        });
        assert!(matches!(record.check("k"), Err(StoreError::Invalid { .. })));
        assert!(matches!(
            SessionRecord::new(" ").check("k"),
            Err(StoreError::Invalid { .. })
        ));
    }
}
