//! What happened, as records: the lifecycle returns them instead of logging, and the driver
//! writes each to the harness's observer stream and to the log. Serialized with serde names
//! (`{"type": "turn_started", …}`), never `Debug` text, so dashboards and tests do not break
//! when a Rust name changes.

use serde::Serialize;
use serde_json::Value;

use crate::gate::RestoreMethod;
use crate::reach::{ColdReason, ReachKind};
use crate::residents::DisposeReason;

/// A telemetry record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum Record {
    /// A turn was dispatched, with how its session is reached.
    TurnStarted {
        /// Scope label.
        scope: String,
        /// The lifecycle's start number.
        start: u64,
        /// The worker slot.
        slot: usize,
        /// Hot, warm or cold.
        via: ReachKind,
        /// For cold turns: why no session is continued or reopened.
        #[serde(skip_serializing_if = "Option::is_none")]
        cold_reason: Option<ColdReason>,
    },
    /// The turn task found the worker no longer holds the session its plan continues; the input
    /// goes back and the lifecycle decides again.
    PlanStale {
        /// Scope label.
        scope: String,
        /// The session the plan named.
        session_id: String,
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
    /// The scope's receipt could not be read in time; its turn goes on without it.
    ReceiptUnreadable {
        /// Scope label.
        scope: String,
        /// How long the turn waited for the store.
        waited_ms: u64,
    },
    /// A receipt write was refused because the store held something else than the lifecycle
    /// believed (another harness or an operator wrote since).
    ReceiptConflict {
        /// Scope label.
        scope: String,
        /// The operation (`put`, `commit`, `remove`).
        op: crate::decision::OpKind,
        /// The session the store names now, if any.
        #[serde(skip_serializing_if = "Option::is_none")]
        stored_session_id: Option<String>,
    },
    /// An operator forgot the scope's receipt: its live session is dropped and its next session
    /// is new.
    ReceiptForgotten {
        /// Scope label.
        scope: String,
    },
    /// The harness retired a session (its next turn asks it for a handoff).
    SessionRetired {
        /// Scope label.
        scope: String,
        /// The session.
        session_id: String,
        /// Why.
        reason: crate::retirement::RetireReason,
    },
    /// A retiring session handed off to its successor.
    HandoffTaken {
        /// Scope label.
        scope: String,
        /// The retired session.
        from_session_id: String,
        /// Size of the handoff.
        bytes: usize,
    },
    /// A retiring session could not answer the handoff; its successor gets the whole thread.
    HandoffUnavailable {
        /// Scope label.
        scope: String,
        /// The retired session.
        from_session_id: String,
    },
    /// A session refused a prompt as too long.
    SessionExhausted {
        /// Scope label.
        scope: String,
        /// The session.
        session_id: String,
    },
    /// A session took a model switch in place.
    ModelSwitched {
        /// Scope label.
        scope: String,
        /// The model.
        model: String,
    },
    /// A session could not take a model switch in place.
    ModelNotSwitched {
        /// Scope label.
        scope: String,
        /// The model.
        model: String,
        /// What the agent said.
        detail: String,
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
}

/// How loudly the driver logs a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    /// Routine.
    Debug,
    /// Worth a line in the log.
    Info,
    /// Something went wrong for a thread.
    Warn,
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

    /// How loudly to log it.
    pub fn level(&self) -> Level {
        match self {
            Record::RestoreRetry { .. }
            | Record::ReceiptForgotten { .. }
            | Record::RestoreAbandoned { .. }
            | Record::ReceiptUnreadable { .. }
            | Record::ReceiptConflict { .. } => Level::Warn,
            Record::TurnStarted { .. } => Level::Debug,
            _ => Level::Info,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn records_serialize_with_serde_names() {
        let r = Record::TurnStarted {
            scope: "conversation".into(),
            start: 3,
            slot: 0,
            via: ReachKind::Cold,
            cold_reason: Some(ColdReason::NoReceipt),
        };
        let (kind, fields) = r.observer_event();
        assert_eq!(kind, "turn_started");
        assert_eq!(
            fields,
            json!({"scope": "conversation", "start": 3, "slot": 0, "via": "cold",
                   "coldReason": "no_receipt"})
        );
        let r = Record::ReceiptConflict {
            scope: "thread:aaaaaaaa".into(),
            op: crate::decision::OpKind::Put,
            stored_session_id: None,
        };
        assert_eq!(r.observer_event().0, "receipt_conflict");
        assert_eq!(r.level(), Level::Warn);
    }
}
