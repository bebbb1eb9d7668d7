//! The store interface every receipt backend implements, and the outcomes it reports.
//!
//! The harness calls it synchronously from its event loop, once per turn, inside a tokio runtime
//! (in tests a current-thread runtime with paused time). So every backend is plain blocking code
//! that never enters an async runtime of the caller's: SQLite is a library call, and the
//! PostgreSQL backend talks to its server from a thread of its own.
//!
//! Every operation says truthfully what it did: a write that happened is `Written`/`Removed`, a
//! refusal names its reason (`OtherSession`, `NoReceipt`, `NotWritable`), and an `Err` means it did
//! not happen or its effect is unknown. A read distinguishes "no receipt" (`Ok(None)`) from "the
//! store could not be asked" (`Err`).

use std::collections::HashSet;
use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::StoreError;
use crate::key::{KeyScheme, ScopeKey};
use crate::record::SessionRecord;

/// Wall-clock time in milliseconds since the Unix epoch. Passed in by the caller wherever recency is
/// recorded, so tests decide what "now" is and eviction order is deterministic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UnixMillis(pub u64);

impl UnixMillis {
    /// The system clock (a clock before 1970 reads as 0). For the imperative shell only.
    pub fn now() -> Self {
        let millis = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        Self(u64::try_from(millis).unwrap_or(u64::MAX))
    }

    /// The value as stored in an `INTEGER`/`BIGINT` column (saturating at `i64::MAX`).
    pub(crate) fn to_sql(self) -> i64 {
        i64::try_from(self.0).unwrap_or(i64::MAX)
    }

    /// A stored value; a negative one (never written by this crate) reads as 0.
    pub(crate) fn from_sql(value: i64) -> Self {
        Self(u64::try_from(value).unwrap_or(0))
    }
}

/// Why a store does not write at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteRefusal {
    /// Resume is switched off (`--no-resume-sessions`): the store remembers nothing.
    Disabled,
}

/// What [`ReceiptStore::put`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutOutcome {
    /// The receipt is stored with recency `now`.
    Written {
        /// `true` when the key had no receipt before (a new thread).
        created: bool,
        /// Least recently used receipts removed to stay within the cap.
        evicted: usize,
    },
    /// Nothing was written.
    NotWritable(WriteRefusal),
}

/// What [`ReceiptStore::commit_delivery`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitOutcome {
    /// The receipt's delivery ledger now reflects the commit, and its recency is `now`.
    Written,
    /// The ledger already reflected the commit; only the recency was refreshed to `now`.
    Unchanged,
    /// The receipt names another session (a newer one replaced it): the late commit is refused and
    /// nothing changed.
    OtherSession {
        /// The session the receipt names now.
        stored_session_id: String,
    },
    /// There is no receipt for the key (never written, removed or evicted): nothing changed.
    NoReceipt,
    /// Nothing was written.
    NotWritable(WriteRefusal),
}

/// What [`ReceiptStore::remove`] and [`ReceiptStore::remove_if_session`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removal {
    /// The receipt was removed; it named this session (so the caller can close it).
    Removed {
        /// The session the removed receipt named.
        session_id: String,
    },
    /// There was no receipt for the key.
    Absent,
    /// `remove_if_session` only: the receipt names another session and was kept.
    OtherSession {
        /// The session the receipt names.
        stored_session_id: String,
    },
    /// Nothing was written.
    NotWritable(WriteRefusal),
}

/// What [`ReceiptStore::remove_channel`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelRemoval {
    /// This many receipts (the conversation and every thread of the channel) were removed.
    Removed(usize),
    /// Nothing was written.
    NotWritable(WriteRefusal),
}

/// What [`ReceiptStore::import`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImportOutcome {
    /// Receipts were inserted where the key had none; existing receipts were left as they are.
    Imported {
        /// Receipts inserted.
        inserted: usize,
        /// Keys skipped because they already had a receipt (newer than the import source).
        kept_existing: usize,
        /// Least recently used receipts removed to stay within the cap.
        evicted: usize,
    },
    /// Nothing was written.
    NotWritable(WriteRefusal),
}

/// One stored receipt with its recency, for listings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredReceipt {
    /// The key it is stored under (already mapped by the store's [`KeyScheme`]).
    pub key: ScopeKey,
    /// The receipt.
    pub record: SessionRecord,
    /// When it was last written (`put`, `commit_delivery` or import).
    pub last_used: UnixMillis,
}

/// Which backend a store is, for logs and the benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackendKind {
    /// The embedded SQLite database.
    Sqlite,
    /// A PostgreSQL server.
    Postgres,
    /// Resume switched off.
    Disabled,
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
            Self::Disabled => "disabled",
        })
    }
}

/// Receipts of one (relay, agent key): durable, shared by every harness process that opens the
/// same database for the same scope, and bounded by a least-recently-used cap.
///
/// Keys are mapped by the store's [`KeyScheme`] before use. All methods block briefly and are safe
/// to call from inside a tokio runtime (they never enter the caller's runtime).
pub trait ReceiptStore: Send + Sync + fmt::Debug {
    /// Which backend this is.
    fn kind(&self) -> BackendKind;

    /// Where the receipts live (a path, or a PostgreSQL target without credentials).
    fn location(&self) -> String;

    /// How keys are mapped.
    fn scheme(&self) -> KeyScheme;

    /// The receipt for `key`, read fresh (another process may have written since). Does not
    /// change recency.
    ///
    /// # Errors
    /// The store could not be read, or the stored row is unreadable ([`StoreError::CorruptRow`]).
    fn get(&self, key: &ScopeKey) -> Result<Option<SessionRecord>, StoreError>;

    /// Stores `record` for `key`, replacing any previous receipt (last writer wins), with recency
    /// `now`. A new key never fails for lack of room: least recently used receipts are evicted.
    ///
    /// # Errors
    /// [`StoreError::Invalid`] for a key that could never be read back or an empty session id;
    /// otherwise the write did not happen (or, for [`StoreError::Unavailable`], may have).
    fn put(
        &self,
        key: &ScopeKey,
        record: &SessionRecord,
        now: UnixMillis,
    ) -> Result<PutOutcome, StoreError>;

    /// Forgets the receipt for `key`.
    ///
    /// # Errors
    /// The write did not happen (or, for [`StoreError::Unavailable`], may have).
    fn remove(&self, key: &ScopeKey) -> Result<Removal, StoreError>;

    /// Forgets the receipt for `key` only while it still names `session_id`: another process may
    /// have stored a newer session there since this one was loaded (#2633 item 16).
    ///
    /// # Errors
    /// The write did not happen (or, for [`StoreError::Unavailable`], may have).
    fn remove_if_session(&self, key: &ScopeKey, session_id: &str) -> Result<Removal, StoreError>;

    /// Forgets every receipt of a channel: its conversation and all its threads.
    ///
    /// # Errors
    /// The write did not happen (or, for [`StoreError::Unavailable`], may have).
    fn remove_channel(&self, channel_id: &str) -> Result<ChannelRemoval, StoreError>;

    /// Commits a successful turn's deliveries into the receipt, only while it still names
    /// `session_id` (the stale-commit guard: a late commit from a replaced session must not
    /// pollute its successor), and refreshes its recency to `now`.
    ///
    /// ORs in `standing_sent` and sets the ids to [`crate::bound_delivered`]`(existing, new_ids,
    /// live_window)`, so the ledger stays bounded per scope.
    ///
    /// # Errors
    /// The write did not happen (or, for [`StoreError::Unavailable`], may have).
    fn commit_delivery(
        &self,
        key: &ScopeKey,
        session_id: &str,
        standing_sent: bool,
        new_ids: &[String],
        live_window: &HashSet<String>,
        now: UnixMillis,
    ) -> Result<CommitOutcome, StoreError>;

    /// Inserts receipts for keys that have none, all with recency `now`, in one transaction; keys
    /// that already have a receipt keep it. Used to migrate an old JSON store.
    ///
    /// # Errors
    /// [`StoreError::Invalid`] (nothing written) when any record could not be stored; otherwise the
    /// write did not happen.
    fn import(
        &self,
        records: &[(ScopeKey, SessionRecord)],
        now: UnixMillis,
    ) -> Result<ImportOutcome, StoreError>;

    /// Every receipt of the scope, sorted by key (diagnostics and tests).
    ///
    /// # Errors
    /// The store could not be read, or a row is unreadable.
    fn receipts(&self) -> Result<Vec<StoredReceipt>, StoreError>;

    /// How many receipts the scope holds (the counter eviction uses).
    ///
    /// # Errors
    /// The store could not be read.
    fn len(&self) -> Result<usize, StoreError>;

    /// Whether the scope holds no receipt.
    ///
    /// # Errors
    /// The store could not be read.
    fn is_empty(&self) -> Result<bool, StoreError> {
        self.len().map(|n| n == 0)
    }

    /// Bytes the backing medium occupies (files, or the tables on the server) for every scope it
    /// holds. For diagnostics and the benchmark.
    ///
    /// # Errors
    /// The size could not be determined.
    fn storage_bytes(&self) -> Result<u64, StoreError>;
}
