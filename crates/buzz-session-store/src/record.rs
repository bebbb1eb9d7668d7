//! What one receipt remembers about a session.
//!
//! A receipt is the minimum needed to call `session/load` again and to decide whether doing so is
//! still right: the opaque session id, what configuration was applied and requested, and the
//! delivery ledger. It never holds prompts, message text or key material — only ids, model and
//! permission-mode names, and event ids — because the file lives in operator-chosen storage.

use serde::{Deserialize, Serialize};

/// One stored receipt: a session the harness created and may load again after a restart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionRecord {
    /// The agent's opaque session id, as returned by `session/new`.
    pub session_id: String,
    /// The model actually APPLIED to the session. `None` = the agent's default, which is also how
    /// a rejected or unsupported model request is recorded (#6990 item 9): the receipt must not
    /// claim a configuration the session never had.
    pub model: Option<String>,
    /// The permission mode actually applied; `None` = the agent's default (same rule as `model`).
    pub permission_mode: Option<String>,
    /// The model the harness was configured to ask for when it created the session. Compatibility
    /// compares this, not `model`: the operator's configuration is what must not have changed,
    /// while a request the agent rejected would simply be rejected again. A record imported from a
    /// JSON file that predates this field takes the applied value (see `format::decode`).
    pub requested_model: Option<String>,
    /// The permission mode the harness was configured to ask for (see `requested_model`).
    pub requested_permission_mode: Option<String>,
    /// What has already been delivered into this session, so a loaded session is not sent the same
    /// standing context and history again. Absent until the first successful turn is committed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<DeliveryRecord>,
}

/// The delivery ledger of one session (upstream `ChannelDeliveryState`, #5423).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeliveryRecord {
    /// Legacy agents: the standing context (base prompt etc.) has been sent into this session.
    pub standing_context_sent: bool,
    /// Event ids already shown to this session. Sorted and unique when written, so the file is
    /// stable and diffs stay small; bounded by [`crate::delivery::bound_delivered`].
    pub delivered_event_ids: Vec<String>,
}

impl SessionRecord {
    /// A record for a freshly created session with no delivery ledger yet.
    pub fn new(session_id: impl Into<String>) -> Self {
        Self {
            session_id: session_id.into(),
            model: None,
            permission_mode: None,
            requested_model: None,
            requested_permission_mode: None,
            delivery: None,
        }
    }

    /// The canonical form that is written: delivery ids sorted, unique and non-empty.
    pub(crate) fn normalized(mut self) -> Self {
        if let Some(delivery) = self.delivery.as_mut() {
            delivery.normalize();
        }
        self
    }
}

impl DeliveryRecord {
    /// Sorts and de-duplicates the ids and drops empty ones (an empty id is never treated as
    /// delivered upstream, so remembering it is useless).
    pub(crate) fn normalize(&mut self) {
        self.delivered_event_ids.retain(|id| !id.is_empty());
        self.delivered_event_ids.sort_unstable();
        self.delivered_event_ids.dedup();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn serializes_camel_case_and_omits_an_absent_ledger() {
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
        let value = serde_json::to_value(&record).unwrap();
        assert_eq!(
            value["delivery"],
            json!({"standingContextSent": true, "deliveredEventIds": ["e1"]})
        );
        assert_eq!(
            serde_json::from_value::<SessionRecord>(value).unwrap(),
            record
        );
    }

    #[test]
    fn unknown_fields_are_rejected_at_every_level() {
        let extra_top = json!({"sessionId": "s", "prompt": "secret"});
        assert!(serde_json::from_value::<SessionRecord>(extra_top).is_err());
        let extra_delivery = json!({
            "sessionId": "s",
            "delivery": {"standingContextSent": false, "deliveredEventIds": [], "text": "x"},
        });
        assert!(serde_json::from_value::<SessionRecord>(extra_delivery).is_err());
    }

    #[test]
    fn missing_optional_fields_read_as_agent_default() {
        let record: SessionRecord = serde_json::from_value(json!({"sessionId": "s"})).unwrap();
        assert_eq!(record, SessionRecord::new("s"));
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
}
