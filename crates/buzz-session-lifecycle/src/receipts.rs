//! The receipt store as the lifecycle uses it: three operations (read, write, forget a channel)
//! behind one small interface, implemented over the store crate's [`ReceiptStore`]. This module
//! is the only one that knows the store crate's call shapes.

use std::sync::Arc;

use buzz_session_store::{
    CommitOutcome, Expect as StoreExpect, KeyScheme, PutOutcome, ReceiptStore, Removal, ScopeKey,
    SessionRecord, StoreError, UnixMillis,
};

use crate::scope::Scope;
use crate::write_queue::ReceiptChange;

/// The condition of a write, in the store's terms (`None`: a turn commit, whose condition is its
/// session).
pub type Condition = Option<StoreExpect>;

/// What a write did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Written {
    /// The receipt is what the write asked for (or the store does not keep receipts).
    Done,
    /// The store held something else than the condition expected; nothing changed.
    Conflict {
        /// The session the store names now (`None`: no receipt).
        stored: Option<String>,
    },
    /// An operator forgot the receipt after the write was decided; nothing changed.
    Forgotten,
}

/// The receipt store, as the lifecycle uses it. Calls block (they run on blocking threads, never
/// on the event loop).
pub trait Receipts: Send + Sync + std::fmt::Debug {
    /// The receipt of `key`.
    ///
    /// # Errors
    /// The store could not be asked.
    fn read(&self, key: &ScopeKey) -> Result<Option<SessionRecord>, StoreError>;

    /// Makes `key`'s receipt `target` if the store satisfies `condition`; `decided` is when the
    /// harness decided the write.
    ///
    /// # Errors
    /// The write did not happen, or it is unknown whether it did.
    fn write(
        &self,
        key: &ScopeKey,
        condition: &Condition,
        target: &ReceiptChange,
        decided: UnixMillis,
    ) -> Result<Written, StoreError>;

    /// Forgets every receipt of `channel` (decided at `decided`).
    ///
    /// # Errors
    /// The write did not happen, or it is unknown whether it did.
    fn remove_channel(&self, channel: &str, decided: UnixMillis) -> Result<(), StoreError>;

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

impl Receipts for Arc<dyn ReceiptStore> {
    fn read(&self, key: &ScopeKey) -> Result<Option<SessionRecord>, StoreError> {
        self.get(key)
    }

    fn write(
        &self,
        key: &ScopeKey,
        condition: &Condition,
        target: &ReceiptChange,
        decided: UnixMillis,
    ) -> Result<Written, StoreError> {
        let any = StoreExpect::NotWrittenSince(decided);
        let expect = condition.as_ref().unwrap_or(&any);
        Ok(match target {
            ReceiptChange::Put(record) => match self.put(key, record, expect, decided)? {
                PutOutcome::Written { .. } | PutOutcome::NotWritable(_) => Written::Done,
                PutOutcome::Conflict { stored } => Written::Conflict { stored },
                PutOutcome::Forgotten { .. } => Written::Forgotten,
            },
            ReceiptChange::Commit(commit) => match self.commit_turn(key, commit, decided)? {
                CommitOutcome::Written
                | CommitOutcome::Unchanged
                | CommitOutcome::NotWritable(_) => Written::Done,
                CommitOutcome::Conflict { stored } => Written::Conflict { stored },
                CommitOutcome::Forgotten { .. } => Written::Forgotten,
            },
            ReceiptChange::Remove => match self.remove(key, expect)? {
                Removal::Removed { .. } | Removal::Absent | Removal::NotWritable(_) => {
                    Written::Done
                }
                Removal::Conflict { stored_session_id } => Written::Conflict {
                    stored: Some(stored_session_id),
                },
            },
        })
    }

    fn remove_channel(&self, channel: &str, decided: UnixMillis) -> Result<(), StoreError> {
        ReceiptStore::remove_channel(self.as_ref(), channel, decided).map(|_| ())
    }

    fn scheme(&self) -> KeyScheme {
        ReceiptStore::scheme(self.as_ref())
    }

    fn location(&self) -> String {
        ReceiptStore::location(self.as_ref())
    }
}
