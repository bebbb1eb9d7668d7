//! The store interface every receipt backend implements, and the outcomes it reports.
//!
//! The harness calls it from a worker of its own, off its event loop: every call blocks (one short
//! transaction, bounded in time) and never enters the caller's async runtime. SQLite is a library
//! call; the PostgreSQL backend talks to its server from a thread of its own.
//!
//! # Conditional writes
//!
//! A write may reach the store long after the harness decided it: the worker queues writes while
//! the store is unreachable and replays the latest state of each scope afterwards. Meanwhile
//! another harness may have written a newer receipt, or an operator may have forgotten the scope.
//! So every write the harness makes names what it expects to find ([`Expect`]) and the time it
//! was decided (`now`), and the store writes only while both still hold:
//!
//! * the expectation must match the stored receipt, else the answer is `Conflict` naming the
//!   session stored now (`None`: no live receipt);
//! * a forget (an operator's, or a channel removal) leaves a tombstone with its time; a write
//!   decided at or before that time is refused (`Forgotten`), whatever it expected, so a queued
//!   write never brings a forgotten receipt back. Reads treat a tombstone as no receipt, and a
//!   write decided after it replaces it.
//!
//! Every operation says truthfully what it did: a write that happened is `Written`/`Removed`, a
//! refusal names its reason, and an `Err` means it did not happen or its effect is unknown. A
//! read distinguishes "no receipt" (`Ok(None)`) from "the store could not be asked" (`Err`).
//!
//! # The watermark
//!
//! Beside its receipts, a store scope (relay, agent key) keeps one *watermark*: a unix time in
//! seconds such that every mention created before it was settled by a harness of the pair, so a
//! harness that starts again may resume its relay subscription from there. It is shared like the
//! receipts (every handle of the pair, on every machine that opens the same database, reads the
//! same value). The harness only moves it forward ([`ReceiptStore::advance_watermark`]: two
//! harnesses of the pair cannot undo each other's progress); an operator may set it to any time
//! or clear it ([`ReceiptStore::set_watermark`]).

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::StoreError;
use crate::key::{KeyScheme, ScopeKey};
use crate::record::{SessionRecord, Usage};

/// Wall-clock time in milliseconds since the Unix epoch. Passed in by the caller wherever time is
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

/// What a conditional write expects to find under its key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// No live receipt (nothing stored, or only a tombstone older than the write).
    Absent,
    /// A live receipt that names this session.
    Session(String),
    /// Whatever is stored (a receipt or a tombstone), or nothing, was last written at or before
    /// this time. For a harness that could not read the receipt and decided to replace it anyway:
    /// the bound is the moment it decided, so a receipt another harness wrote since is kept.
    NotWrittenSince(UnixMillis),
}

/// Why a store does not write at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteRefusal {
    /// Resume is switched off (`--no-resume-sessions`): the store remembers nothing.
    Disabled,
    /// The store was opened read-only (an operator's listing).
    ReadOnly,
}

/// What [`ReceiptStore::put`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutOutcome {
    /// The receipt is stored, last written `now`.
    Written {
        /// `true` when the key had no live receipt before (a new thread, or a forgotten one).
        created: bool,
        /// Least recently used receipts removed to stay within the cap.
        evicted: usize,
    },
    /// The expectation did not hold; nothing changed.
    Conflict {
        /// The session the live receipt names now; `None`: there is no live receipt.
        stored: Option<String>,
    },
    /// The scope was forgotten at or after the time the write was decided; nothing changed.
    Forgotten {
        /// When it was forgotten.
        at: UnixMillis,
    },
    /// Nothing was written.
    NotWritable(WriteRefusal),
}

/// One turn's worth of receipt updates, written by [`ReceiptStore::commit_turn`] and merged into
/// the stored receipt as [`crate::rules::apply_commit`] says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnCommit {
    /// The session the turn ran in: the commit is written only while the receipt names it.
    pub session_id: String,
    /// The delivery ledger as the lifecycle keeps it: it REPLACES the stored one (the lifecycle
    /// alone decides which ids to keep). At most [`crate::MAX_LEDGER_IDS`].
    pub delivered_event_ids: Vec<String>,
    /// A legacy agent has been sent its standing context in this session. ORed into the stored
    /// flag: what was sent into a session cannot be unsent.
    pub standing_context_sent: bool,
    /// Completed turns of the session, replacing the stored count (`None`: unknown, and it
    /// replaces a stored count too).
    pub turns: Option<u32>,
    /// The last usage the agent reported, replacing the stored one (`None`: unknown, and it
    /// replaces a stored usage too).
    pub usage: Option<Usage>,
    /// The receipt's pending handoff was given to the session in this turn: it is cleared.
    pub handoff_delivered: bool,
}

/// What [`ReceiptStore::commit_turn`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitOutcome {
    /// The receipt now reflects the commit, last written `now`.
    Written,
    /// The receipt already reflected the commit; only its time was refreshed to `now`.
    Unchanged,
    /// The live receipt names another session (a newer one replaced it), or there is none: the
    /// late commit is refused and nothing changed.
    Conflict {
        /// The session the live receipt names now; `None`: there is no live receipt.
        stored: Option<String>,
    },
    /// The scope was forgotten (at or after the commit was decided, or since the receipt was
    /// written): nothing changed. The harness should drop the live session.
    Forgotten {
        /// When it was forgotten.
        at: UnixMillis,
    },
    /// Nothing was written.
    NotWritable(WriteRefusal),
}

/// What [`ReceiptStore::remove`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removal {
    /// The receipt was removed; it named this session (so the caller can close it).
    Removed {
        /// The session the removed receipt named.
        session_id: String,
    },
    /// There was no live receipt for the key.
    Absent,
    /// The expectation did not hold; the receipt was kept.
    Conflict {
        /// The session the receipt names.
        stored_session_id: String,
    },
    /// Nothing was written.
    NotWritable(WriteRefusal),
}

/// What [`ReceiptStore::forget`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ForgetOutcome {
    /// A tombstone now stands for the key; the live receipt it replaced named this session
    /// (`None`: there was none).
    Forgotten {
        /// The session the removed receipt named.
        session_id: Option<String>,
    },
    /// The expectation did not hold (the receipt was written since the operator looked); kept.
    Conflict {
        /// The session the receipt names.
        stored_session_id: String,
    },
    /// Nothing was written.
    NotWritable(WriteRefusal),
}

/// What [`ReceiptStore::remove_channel`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChannelRemoval {
    /// This many receipts (the conversation and every thread of the channel) were removed, each
    /// leaving a tombstone.
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
        /// Keys skipped because they already had a live receipt (newer than the import source).
        kept_existing: usize,
        /// Keys skipped because they were forgotten after the imported receipt was last written.
        forgotten: usize,
        /// Least recently used receipts removed to stay within the cap.
        evicted: usize,
    },
    /// Nothing was written.
    NotWritable(WriteRefusal),
}

/// What [`ReceiptStore::set_watermark`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatermarkOutcome {
    /// The watermark is now the value asked for (or none, for a clear).
    Written,
    /// Nothing was written.
    NotWritable(WriteRefusal),
}

/// One stored receipt with its key and the time it was last written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredReceipt {
    /// The key it is stored under (already mapped by the store's [`KeyScheme`]).
    pub key: ScopeKey,
    /// The receipt.
    pub record: SessionRecord,
    /// When it was last written (`put`, `commit_turn` or import): its recency for eviction.
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

/// Receipts of one store scope (relay, agent key): durable, shared by every harness process that
/// opens the same database for the same scope, and bounded by a least-recently-used cap.
///
/// Keys are mapped by the store's [`KeyScheme`] before use. All methods block briefly (bounded in
/// time) and are safe to call from inside a tokio runtime (they never enter the caller's runtime).
/// `now` is always the time the caller DECIDED the operation, which for a queued write is earlier
/// than the time it reaches the store.
pub trait ReceiptStore: Send + Sync + fmt::Debug {
    /// Which backend this is.
    fn kind(&self) -> BackendKind;

    /// Where the receipts live (a path, or a PostgreSQL target without credentials).
    fn location(&self) -> String;

    /// How keys are mapped.
    fn scheme(&self) -> KeyScheme;

    /// The live receipt for `key`, read fresh (another process may have written since). A
    /// tombstone reads as no receipt. Does not change recency.
    ///
    /// # Errors
    /// The store could not be read, or the stored row is unreadable ([`StoreError::CorruptRow`]).
    fn get(&self, key: &ScopeKey) -> Result<Option<SessionRecord>, StoreError>;

    /// Stores `record` for `key` if `expect` holds and the key was not forgotten at or after
    /// `now`, last written `now`. A new key never fails for lack of room: least recently used
    /// receipts are evicted.
    ///
    /// # Errors
    /// [`StoreError::Invalid`] for a key that could never be read back, an empty session id or an
    /// oversize part (see [`SessionRecord`]); otherwise the write did not happen (or, for
    /// [`StoreError::Unavailable`], may have).
    fn put(
        &self,
        key: &ScopeKey,
        record: &SessionRecord,
        expect: &Expect,
        now: UnixMillis,
    ) -> Result<PutOutcome, StoreError>;

    /// Commits a turn into the receipt while it still names `commit.session_id` and the key was
    /// not forgotten at or after `now`, and refreshes its recency to `now` (see [`TurnCommit`] for
    /// what is replaced and what is merged).
    ///
    /// # Errors
    /// [`StoreError::Invalid`] for an oversize ledger; otherwise the write did not happen (or, for
    /// [`StoreError::Unavailable`], may have).
    fn commit_turn(
        &self,
        key: &ScopeKey,
        commit: &TurnCommit,
        now: UnixMillis,
    ) -> Result<CommitOutcome, StoreError>;

    /// Removes the live receipt for `key` if `expect` holds (an abandoned session). It leaves no
    /// tombstone: this is the harness tidying up after itself, not a forget. A forgotten key has
    /// no live receipt (`Absent`).
    ///
    /// # Errors
    /// The write did not happen (or, for [`StoreError::Unavailable`], may have).
    fn remove(&self, key: &ScopeKey, expect: &Expect) -> Result<Removal, StoreError>;

    /// Forgets every receipt of a channel (its conversation and all its threads), unconditionally;
    /// each removed receipt leaves a tombstone at `now`, so no write decided earlier brings it
    /// back. For an agent removed from the channel.
    ///
    /// # Errors
    /// The write did not happen (or, for [`StoreError::Unavailable`], may have).
    fn remove_channel(
        &self,
        channel_id: &str,
        now: UnixMillis,
    ) -> Result<ChannelRemoval, StoreError>;

    /// An operator's forget: removes the receipt for `key` if `expect` holds and leaves a
    /// tombstone at `now` (also where there was no receipt), so no write decided at or before
    /// `now` brings it back. Tombstones older than [`crate::TOMBSTONE_RETENTION`] are purged.
    ///
    /// # Errors
    /// [`StoreError::Invalid`] for a key that could never be stored; otherwise the write did not
    /// happen (or, for [`StoreError::Unavailable`], may have).
    fn forget(
        &self,
        key: &ScopeKey,
        expect: &Expect,
        now: UnixMillis,
    ) -> Result<ForgetOutcome, StoreError>;

    /// Inserts receipts for keys that have no live receipt, each with its own `last_used`, in one
    /// transaction; keys with a live receipt keep it, and keys forgotten after the receipt's
    /// `last_used` stay forgotten. Used to migrate an old JSON store and to move receipts between
    /// backends.
    ///
    /// # Errors
    /// [`StoreError::Invalid`] (nothing written) when any record could not be stored; otherwise the
    /// write did not happen.
    fn import(&self, receipts: &[StoredReceipt]) -> Result<ImportOutcome, StoreError>;

    /// Every live receipt of the store scope, sorted by key (the operator's listing and export).
    ///
    /// # Errors
    /// The store could not be read, or a row is unreadable.
    fn receipts(&self) -> Result<Vec<StoredReceipt>, StoreError>;

    /// How many receipts the store scope holds (the counter eviction uses).
    ///
    /// # Errors
    /// The store could not be read.
    fn len(&self) -> Result<usize, StoreError>;

    /// Whether the store scope holds no receipt.
    ///
    /// # Errors
    /// The store could not be read.
    fn is_empty(&self) -> Result<bool, StoreError> {
        self.len().map(|n| n == 0)
    }

    /// The watermark of this store's (relay, agent key): every mention created before it (unix
    /// seconds) was settled by a harness of the pair. `None` when none was recorded, and from a
    /// read-only store of a database older than the watermark (schema revision 2) or of a pair
    /// that never wrote.
    ///
    /// # Errors
    /// The store could not be read, or the stored value is unreadable
    /// ([`StoreError::CorruptRow`]: negative).
    fn watermark(&self) -> Result<Option<u64>, StoreError>;

    /// Moves the watermark forward to `secs`; never back (a smaller value leaves it as it is, so
    /// two harnesses of the pair cannot undo each other). One conditional statement, so
    /// concurrent advances keep the largest. Returns the watermark stored after the call; `None`
    /// from a store that cannot write (read-only, disabled).
    ///
    /// # Errors
    /// [`StoreError::Invalid`] (nothing written) for `secs` past `i64::MAX`, which the column
    /// cannot hold; otherwise the write did not happen (or, for [`StoreError::Unavailable`], may
    /// have).
    fn advance_watermark(&self, secs: u64) -> Result<Option<u64>, StoreError>;

    /// Sets the watermark to `secs`, or clears it (`None`), whatever it was: the operator's
    /// command, not the harness's (an earlier time makes the next harness of the pair resume from
    /// there; a clear, from wherever it would without one).
    ///
    /// # Errors
    /// [`StoreError::Invalid`] (nothing written) for `secs` past `i64::MAX`; otherwise the write
    /// did not happen (or, for [`StoreError::Unavailable`], may have).
    fn set_watermark(&self, secs: Option<u64>) -> Result<WatermarkOutcome, StoreError>;

    /// Bytes the backing medium occupies (files, or the tables on the server) for every scope it
    /// holds. For the benchmark.
    ///
    /// # Errors
    /// The size could not be determined.
    fn storage_bytes(&self) -> Result<u64, StoreError>;
}
