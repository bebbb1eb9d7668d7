//! The receipt store as the lifecycle uses it: three operations (read, write, forget a channel)
//! behind one small interface, implemented over the store crate's [`ReceiptStore`]. This module
//! is the only one that knows the store crate's call shapes.

use std::sync::Arc;

use buzz_session_store::{
    CommitOutcome, KeyScheme, ReceiptStore, Removal, ScopeKey, SessionRecord, StoreError,
    UnixMillis,
};

use crate::scope::Scope;
use crate::write_queue::{Target, Write};

/// The condition of a write, in the store's time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Condition {
    /// No receipt is stored.
    Absent,
    /// The stored receipt names this session.
    Session(String),
    /// Whatever is stored was written no later than this.
    UnchangedSince(UnixMillis),
    /// No condition (a ledger commit: its condition is its session).
    None,
}

/// What a write did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Written {
    /// The receipt is what the write asked for.
    Done,
    /// The store held something else than the condition expected; nothing changed.
    Conflict {
        /// The session the store names now (`None`: no receipt).
        stored: Option<String>,
    },
}

/// The receipt store, as the lifecycle uses it. Calls block (they run on blocking threads, never
/// on the event loop).
pub trait Receipts: Send + Sync + std::fmt::Debug {
    /// The receipt of `key`.
    ///
    /// # Errors
    /// The store could not be asked.
    fn read(&self, key: &ScopeKey) -> Result<Option<SessionRecord>, StoreError>;

    /// Makes `key`'s receipt `target` if the store satisfies `condition`.
    ///
    /// # Errors
    /// The write did not happen, or it is unknown whether it did.
    fn write(
        &self,
        key: &ScopeKey,
        condition: &Condition,
        target: &Target,
        now: UnixMillis,
    ) -> Result<Written, StoreError>;

    /// Forgets every receipt of `channel`.
    ///
    /// # Errors
    /// The write did not happen, or it is unknown whether it did.
    fn remove_channel(&self, channel: &str) -> Result<(), StoreError>;

    /// How scopes map to keys.
    fn scheme(&self) -> KeyScheme;

    /// Where the receipts live, for logs.
    fn location(&self) -> String;
}

/// The store key of `scope` under `scheme`.
pub fn store_key<K: Scope>(scope: &K, scheme: KeyScheme) -> ScopeKey {
    let key = match scope.thread_root() {
        Some(root) => ScopeKey::thread(scope.channel(), root),
        None => ScopeKey::conversation(scope.channel()),
    };
    scheme.map(&key)
}

/// A folded write as the store is asked for it.
pub fn condition_of(write: &Write, to_store_time: impl Fn(crate::clock::Moment) -> UnixMillis) -> Condition {
    match &write.expect {
        Some(crate::receipt_view::Expect::Absent) => Condition::Absent,
        Some(crate::receipt_view::Expect::Session(id)) => Condition::Session(id.clone()),
        Some(crate::receipt_view::Expect::UnchangedSince(at)) => {
            Condition::UnchangedSince(to_store_time(*at))
        }
        None => Condition::None,
    }
}

impl Receipts for Arc<dyn ReceiptStore> {
    fn read(&self, key: &ScopeKey) -> Result<Option<SessionRecord>, StoreError> {
        self.get(key)
    }

    fn write(
        &self,
        key: &ScopeKey,
        condition: &Condition,
        target: &Target,
        now: UnixMillis,
    ) -> Result<Written, StoreError> {
        let stored = |key: &ScopeKey| -> Result<Option<String>, StoreError> {
            Ok(self.get(key)?.map(|r| r.session_id))
        };
        let satisfied = |current: &Option<String>| match condition {
            Condition::Absent => current.is_none(),
            Condition::Session(id) => current.as_deref() == Some(id.as_str()),
            Condition::UnchangedSince(_) | Condition::None => true,
        };
        match target {
            Target::Record(record) => {
                let current = stored(key)?;
                if !satisfied(&current) && current.as_deref() != Some(&record.session_id) {
                    return Ok(Written::Conflict { stored: current });
                }
                self.put(key, record, now)?;
                Ok(Written::Done)
            }
            Target::Ledger { session_id, ledger } => {
                let window = ledger.delivered_event_ids.iter().cloned().collect();
                let outcome = self.commit_delivery(
                    key,
                    session_id,
                    ledger.standing_context_sent,
                    &ledger.delivered_event_ids,
                    &window,
                    now,
                )?;
                Ok(match outcome {
                    CommitOutcome::Written
                    | CommitOutcome::Unchanged
                    | CommitOutcome::NotWritable(_) => Written::Done,
                    CommitOutcome::OtherSession { stored_session_id } => Written::Conflict {
                        stored: Some(stored_session_id),
                    },
                    CommitOutcome::NoReceipt => Written::Conflict { stored: None },
                })
            }
            Target::Absent => {
                let removal = match condition {
                    Condition::Session(id) => self.remove_if_session(key, id)?,
                    _ => self.remove(key)?,
                };
                Ok(match removal {
                    Removal::OtherSession { stored_session_id } => Written::Conflict {
                        stored: Some(stored_session_id),
                    },
                    Removal::Removed { .. } | Removal::Absent | Removal::NotWritable(_) => {
                        Written::Done
                    }
                })
            }
        }
    }

    fn remove_channel(&self, channel: &str) -> Result<(), StoreError> {
        ReceiptStore::remove_channel(self.as_ref(), channel).map(|_| ())
    }

    fn scheme(&self) -> KeyScheme {
        ReceiptStore::scheme(self.as_ref())
    }

    fn location(&self) -> String {
        ReceiptStore::location(self.as_ref())
    }
}
