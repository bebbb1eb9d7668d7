//! What the lifecycle asks the harness to do.
//!
//! The lifecycle decides; the harness executes. Effects that need the harness's own types (a
//! worker, the relay, the observer) are [`Effect`]s; writes to the receipt store are
//! [`Persist`]s, which the [`crate::Driver`] executes itself so the harness never touches the
//! store.

use buzz_session_store::SessionRecord;
use serde::Serialize;
use serde_json::Value;

use crate::gate::RestoreMethod;
use crate::plan::{ColdReason, ViaKind};
use crate::residents::DisposeReason;

/// Something the harness must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect<K, I> {
    /// Free a disposed session: drop it from worker `slot`'s memory (now if the worker is idle,
    /// when it comes back otherwise; only if the worker still holds *this* session) and, when the
    /// agent advertises it, send `session/close`. (A dead worker's sessions died with it: they
    /// are never released.) Then report
    /// [`crate::Lifecycle::released`]: the scope does not start again before that, so a later
    /// reopen of the same session can never be closed behind its back.
    Release {
        /// The scope.
        scope: K,
        /// The worker.
        slot: usize,
        /// The session.
        session_id: String,
    },
    /// Post a notice in the scope's thread (handed out by [`crate::Driver::take_notices`]).
    Notice(Notice<K, I>),
    /// Record a telemetry event (the observer stream).
    Record(Record),
}

/// A notice to post in a scope's thread, about `trigger`. A notice is never the answer to
/// `trigger`: the message still waits for one, so the notice must not be published in a way that
/// marks it answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice<K, I> {
    /// The scope.
    pub scope: K,
    /// The message the notice is about (not yet answered).
    pub trigger: I,
    /// The text.
    pub text: String,
}

/// A write to the receipt store.
#[derive(Clone, Debug, PartialEq, Eq)]
#[allow(
    clippy::large_enum_variant,
    reason = "SessionRecord grew with the receipt fields of schema revision 1; left for the lifecycle rewrite"
)]
pub enum Persist<K> {
    /// A session was created: its receipt replaces any previous one.
    Put {
        /// The scope.
        scope: K,
        /// The receipt.
        record: SessionRecord,
    },
    /// After a successful turn: what the session has been shown (only while the receipt still
    /// names `session_id`; a late commit must not pollute a newer session's receipt).
    Commit {
        /// The scope.
        scope: K,
        /// The session the ledger belongs to.
        session_id: String,
        /// A legacy agent got its standing context.
        standing_context_sent: bool,
        /// What the session has been shown that can still appear in a context window: the
        /// ledger replaces the stored one (older ids can never be re-sent).
        event_ids: Vec<String>,
    },
    /// The session was abandoned on purpose.
    Remove {
        /// The scope.
        scope: K,
    },
    /// The agent was removed from a channel: forget every receipt of it.
    RemoveChannel {
        /// The channel id.
        channel: String,
    },
}

/// A telemetry record. Serialized with serde names (`{"type": "turn_started", …}`), never `Debug`
/// text, so dashboards and tests do not break when a Rust name changes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum Record {
    /// A turn was dispatched.
    TurnStarted {
        /// Scope label.
        scope: String,
        /// The lifecycle's start number.
        start: u64,
        /// The worker slot.
        slot: usize,
        /// Hot, warm or cold.
        via: ViaKind,
        /// For cold turns: why no stored session is reopened.
        #[serde(skip_serializing_if = "Option::is_none")]
        cold_reason: Option<ColdReason>,
    },
    /// A stored session was reopened.
    SessionRestored {
        /// Scope label.
        scope: String,
        /// The session.
        session_id: String,
        /// The method actually sent.
        method: RestoreMethod,
    },
    /// The agent no longer has a stored session; a new one replaces it.
    SessionLost {
        /// Scope label.
        scope: String,
        /// The stored session.
        session_id: String,
        /// The method that was sent.
        method: RestoreMethod,
    },
    /// A follow-up waits for its resident's busy worker instead of going cold elsewhere.
    CapacityWait {
        /// Scope label.
        scope: String,
        /// The busy worker.
        slot: usize,
    },
    /// A live session stays resident after a successful turn.
    ResidentKept {
        /// Scope label.
        scope: String,
        /// The worker.
        slot: usize,
        /// The session.
        session_id: String,
    },
    /// A resident was disposed (exactly once per resident).
    ResidentDisposed {
        /// Scope label.
        scope: String,
        /// The worker.
        slot: usize,
        /// The session.
        session_id: String,
        /// Why.
        reason: DisposeReason,
    },
    /// Reopening a stored session failed without a definitive answer; it is retried later.
    RestoreRetry {
        /// Scope label.
        scope: String,
        /// The method that was sent.
        method: RestoreMethod,
        /// Failed attempts so far.
        attempts: u32,
        /// Delay before the next attempt.
        retry_in_ms: u64,
    },
    /// The harness gave up reopening a stored session and continues in a new one.
    RestoreAbandoned {
        /// Scope label.
        scope: String,
        /// The method that was sent.
        method: RestoreMethod,
        /// Failed attempts.
        attempts: u32,
        /// Time since the first failure.
        waited_ms: u64,
    },
}

impl Record {
    /// The observer event: its kind (the serde tag) and its other fields.
    pub fn observer_event(&self) -> (String, Value) {
        let mut value = serde_json::to_value(self).unwrap_or(Value::Null);
        let kind = value
            .as_object_mut()
            .and_then(|o| o.remove("type"))
            .and_then(|t| t.as_str().map(str::to_string))
            .unwrap_or_else(|| "lifecycle".to_string());
        (kind, value)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn records_serialize_with_serde_names() {
        let r = Record::ResidentDisposed {
            scope: "thread:aaaaaaaa".into(),
            slot: 1,
            session_id: "s1".into(),
            reason: DisposeReason::CancelLostRace,
        };
        let (kind, fields) = r.observer_event();
        assert_eq!(kind, "resident_disposed");
        assert_eq!(
            fields,
            json!({"scope": "thread:aaaaaaaa", "slot": 1, "sessionId": "s1",
                   "reason": "cancel_lost_race"})
        );
        let r = Record::TurnStarted {
            scope: "conversation".into(),
            start: 3,
            slot: 0,
            via: ViaKind::Cold,
            cold_reason: Some(ColdReason::NoReceipt),
        };
        let (kind, fields) = r.observer_event();
        assert_eq!(kind, "turn_started");
        assert_eq!(fields["via"], "cold");
        assert_eq!(fields["coldReason"], "no_receipt");
    }
}
