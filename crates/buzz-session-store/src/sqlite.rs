//! The embedded default backend: one SQLite database per state directory, one row per receipt.
//!
//! ```text
//! <state_dir>/sessions.sqlite3        the database (0600), shared by every (relay, agent key)
//! <state_dir>/sessions.sqlite3-wal    write-ahead log, present while a process has it open
//! <state_dir>/sessions.sqlite3-shm    WAL index, likewise
//! ```
//!
//! Why SQLite (see docs/STORE.md for the measurements): a write touches one row and a few index
//! pages, so its cost does not grow with the number of receipts; WAL mode lets readers run beside
//! the one writer and makes every commit atomic and crash-safe (a killed process leaves a log that
//! the next open replays, never a torn file); several processes on one machine (a rolling deploy)
//! share it through SQLite's own file locks, waiting on a busy timeout instead of failing.
//! `synchronous=FULL` fsyncs the log on every commit, so a receipt reported written survives a
//! power loss. It is compiled from the bundled sources (the `bundled` feature), so nothing is
//! installed.
//!
//! Writes run in `BEGIN IMMEDIATE` transactions: the write lock is taken up front, so two
//! processes never deadlock upgrading read locks. The per-scope receipt count lives in
//! `buzz_receipt_scopes.receipts`, updated in the same transaction as every insert and delete, so
//! the cap check is one row read, not a count over the table.
//!
//! Schema: `PRAGMA user_version` 1 is the schema line every harness of this series reads; an
//! additive revision (see [`crate::schema`]) is recorded in `buzz_receipt_revision` and never
//! changes `user_version`, so a harness that predates it keeps opening the database. The
//! watermark (revision 2) is a column of the scope's row, `buzz_receipt_scopes.watermark_s`,
//! written in the same `BEGIN IMMEDIATE` transactions as receipts.

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rusqlite::{
    Connection, OpenFlags, OptionalExtension, Transaction, TransactionBehavior, params,
};

use crate::error::StoreError;
use crate::fsio;
use crate::key::{KeyScheme, ScopeKey, StoreScope};
use crate::receipt_store::{
    BackendKind, ChannelRemoval, CommitOutcome, Expect, ForgetOutcome, ImportOutcome, PutOutcome,
    ReceiptStore, Removal, StoredReceipt, TurnCommit, UnixMillis, WatermarkOutcome, WriteRefusal,
};
use crate::record::SessionRecord;
use crate::row::{self, CommitColumns, CommitPlan, ImportSkip, LedgerColumns, Row, State};
use crate::schema::{self, Access, receipt_columns, replace_on_conflict};

/// The database file name inside a state directory.
pub const DEFAULT_FILE_NAME: &str = "sessions.sqlite3";

/// How long a write waits for another process's write lock before giving up on this write.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How often a waiting writer retries the lock. SQLite's own busy handler backs off to 100 ms
/// sleeps, and a writer asleep that long keeps losing the lock to writers that retry sooner: under
/// four busy processes some writes starved for the whole timeout. Retrying every ~1 ms (jittered
/// per process, so waiters do not retry in lockstep) keeps every waiter in the race.
const BUSY_RETRY: Duration = Duration::from_millis(1);

/// Bytes the write-ahead log is truncated to after a checkpoint (SQLite checkpoints it
/// automatically every 1000 pages, about 4 MB).
const WAL_SIZE_LIMIT: i64 = 4 * 1024 * 1024;

/// Schema line 1. A rowid table with a unique key index rather than `WITHOUT ROWID`: a receipt
/// with its ledger is over a kilobyte, and such rows pack far better into rowid leaves (measured:
/// about 1.6 KB per receipt instead of 4.8 KB).
const SCHEMA_V1: &str = "
CREATE TABLE buzz_receipt_scopes (
    id           INTEGER PRIMARY KEY,
    relay        TEXT    NOT NULL,
    agent_pubkey TEXT    NOT NULL,
    receipts     INTEGER NOT NULL DEFAULT 0,
    UNIQUE (relay, agent_pubkey)
);
CREATE TABLE buzz_receipts (
    id                        INTEGER PRIMARY KEY,
    scope_id                  INTEGER NOT NULL REFERENCES buzz_receipt_scopes (id),
    scope_key                 TEXT    NOT NULL,
    session_id                TEXT    NOT NULL,
    model                     TEXT,
    permission_mode           TEXT,
    requested_model           TEXT,
    requested_permission_mode TEXT,
    standing_context_sent     INTEGER NOT NULL DEFAULT 0,
    delivered_event_ids       TEXT,
    last_used_ms              INTEGER NOT NULL,
    UNIQUE (scope_id, scope_key)
);
CREATE INDEX buzz_receipts_lru ON buzz_receipts (scope_id, last_used_ms, scope_key);
";

/// Revision 1, additive: the extension column, the tombstones, and the revision record itself.
const REVISION_1: &str = "
ALTER TABLE buzz_receipts ADD COLUMN ext TEXT;
CREATE TABLE buzz_receipt_forgets (
    scope_id     INTEGER NOT NULL REFERENCES buzz_receipt_scopes (id),
    scope_key    TEXT    NOT NULL,
    forgotten_ms INTEGER NOT NULL,
    PRIMARY KEY (scope_id, scope_key)
);
CREATE TABLE buzz_receipt_revision (
    singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
    revision  INTEGER NOT NULL
);
INSERT INTO buzz_receipt_revision (singleton, revision) VALUES (1, 1);
";

/// Revision 2, additive: the watermark of each (relay, agent key).
const REVISION_2: &str = "
ALTER TABLE buzz_receipt_scopes ADD COLUMN watermark_s INTEGER;
UPDATE buzz_receipt_revision SET revision = 2;
";

/// Revision 3 adds the lease table on PostgreSQL; here it is recorded and adds nothing (the
/// embedded store's harness holds a lock file on its host instead).
const REVISION_3: &str = "
UPDATE buzz_receipt_revision SET revision = 3;
";

/// The additive revisions in order, each with the operation its errors name: entry `n - 1`
/// brings a database from revision `n - 1` to `n`. Its length is [`schema::REVISION`].
const REVISIONS: [(&str, &str); schema::REVISION as usize] = [
    (REVISION_1, "apply schema revision 1"),
    (REVISION_2, "apply schema revision 2"),
    (REVISION_3, "apply schema revision 3"),
];

/// Writes one receipt over whatever row the key has (`put`, and `import` over a row that is not
/// live); bound by [`SqliteStore::upsert`].
const UPSERT: &str = concat!(
    receipt_columns!(),
    "\n     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)\n     ",
    replace_on_conflict!()
);

/// The live receipts matching `filter` (a condition on `r`), in key order, for the columns
/// [`read_row`] reads. A database still at revision 0 (opened read-only) has no extension column
/// and no tombstones.
fn select_live(revision: i64, filter: &str) -> String {
    if revision >= 1 {
        format!(
            "SELECT r.scope_key, r.session_id, r.model, r.permission_mode, r.requested_model,
                 r.requested_permission_mode, r.standing_context_sent, r.delivered_event_ids,
                 r.last_used_ms, r.ext
             FROM buzz_receipts r
             WHERE {filter} AND NOT EXISTS (
                 SELECT 1 FROM buzz_receipt_forgets f
                 WHERE f.scope_id = r.scope_id AND f.scope_key = r.scope_key
                   AND f.forgotten_ms >= r.last_used_ms)
             ORDER BY r.scope_key"
        )
    } else {
        format!(
            "SELECT r.scope_key, r.session_id, r.model, r.permission_mode, r.requested_model,
                 r.requested_permission_mode, r.standing_context_sent, r.delivered_event_ids,
                 r.last_used_ms, NULL
             FROM buzz_receipts r WHERE {filter} ORDER BY r.scope_key"
        )
    }
}

/// Receipts of one (relay, agent key) in an SQLite database.
#[derive(Debug)]
pub struct SqliteStore {
    path: PathBuf,
    scope: StoreScope,
    scheme: KeyScheme,
    max_receipts: usize,
    access: Access,
    /// The schema revision found (or made) at open.
    revision: i64,
    /// `buzz_receipt_scopes.id` of `scope`; `None` only for a read-only store whose scope has
    /// never written a receipt.
    scope_id: Option<i64>,
    /// One connection per store; SQLite serialises writers across processes, this mutex across
    /// the threads of this one. Never held across anything but the database call.
    conn: Mutex<Connection>,
}

/// What is stored under one key, read inside a write transaction.
struct Current {
    /// A receipt row exists (live or not): an insert replaces it, a delete decrements the count.
    row_exists: bool,
    state: State,
    /// The columns a commit rewrites, when the receipt is live.
    columns: Option<CommitColumns>,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` for `scope`, bringing its schema to this
    /// build's revision.
    ///
    /// A missing parent directory is created 0700 and a new database file 0600. A file that is not
    /// an SQLite database is moved aside to `<file>.corrupt-<unix seconds>` (nothing is deleted)
    /// and a new database is created. A symlink at `path` is refused.
    ///
    /// # Errors
    /// [`StoreError::Config`] for a zero cap, [`StoreError::SchemaTooNew`] for a database of an
    /// incompatible newer schema line, otherwise the I/O or SQLite failure that prevented opening.
    pub fn open(
        path: &Path,
        scope: StoreScope,
        scheme: KeyScheme,
        max_receipts: usize,
    ) -> Result<Self, StoreError> {
        row::check_cap(max_receipts)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            fsio::ensure_dir(dir)?;
        }
        let mut conn = match connect(path) {
            Err(StoreError::Sqlite { source, .. }) if is_not_a_database(&source) => {
                let moved = quarantine(path)?;
                tracing::warn!(path = %path.display(), moved_to = %moved.display(), error = %source, "session store: the file is not an SQLite database; moved it aside and started a new one");
                connect(path)?
            }
            other => other?,
        };
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(sqlite_err(path, "begin schema migration"))?;
        let revision = migrate_schema(&tx, path)?;
        let scope_id = register_scope(&tx, &scope).map_err(sqlite_err(path, "register scope"))?;
        tx.commit()
            .map_err(sqlite_err(path, "commit schema migration"))?;
        let store = Self {
            path: path.to_path_buf(),
            scope,
            scheme,
            max_receipts,
            access: Access::ReadWrite,
            revision,
            scope_id: Some(scope_id),
            conn: Mutex::new(conn),
        };
        tracing::info!(path = %path.display(), relay = %store.scope.relay, scheme = ?scheme, max_receipts, "session store opened (sqlite)");
        Ok(store)
    }

    /// Opens an existing database read-only: nothing is created, migrated or registered, and every
    /// write answers `NotWritable(ReadOnly)`. For an operator's listing beside running harnesses.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] when there is no database at `path`; [`StoreError::SchemaTooNew`]
    /// for an incompatible newer schema line; otherwise the SQLite failure.
    pub fn open_read_only(
        path: &Path,
        scope: StoreScope,
        scheme: KeyScheme,
    ) -> Result<Self, StoreError> {
        let conn = connect_read_only(path)?;
        let revision = read_schema(&conn, path)?;
        let scope_id = conn
            .query_row(
                "SELECT id FROM buzz_receipt_scopes WHERE relay = ?1 AND agent_pubkey = ?2",
                params![scope.relay, scope.agent_pubkey],
                |r| r.get(0),
            )
            .optional()
            .map_err(sqlite_err(path, "look up scope"))?;
        Ok(Self {
            path: path.to_path_buf(),
            scope,
            scheme,
            max_receipts: usize::MAX,
            access: Access::ReadOnly,
            revision,
            scope_id,
            conn: Mutex::new(conn),
        })
    }

    /// Every store scope that has ever written to the database at `path`, with its receipt count,
    /// read-only.
    ///
    /// # Errors
    /// As [`SqliteStore::open_read_only`].
    pub fn scopes_at(path: &Path) -> Result<Vec<(StoreScope, usize)>, StoreError> {
        let conn = connect_read_only(path)?;
        read_schema(&conn, path)?;
        let mut stmt = conn
            .prepare(
                "SELECT relay, agent_pubkey, receipts FROM buzz_receipt_scopes
                 ORDER BY relay, agent_pubkey",
            )
            .map_err(sqlite_err(path, "list scopes"))?;
        let rows = stmt
            .query_map([], |r| {
                let count: i64 = r.get(2)?;
                Ok((
                    StoreScope {
                        relay: r.get(0)?,
                        agent_pubkey: r.get(1)?,
                    },
                    usize::try_from(count).unwrap_or(0),
                ))
            })
            .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(sqlite_err(path, "list scopes"))?;
        Ok(rows)
    }

    /// The schema revision of the database (as found or made at open).
    pub fn revision(&self) -> i64 {
        self.revision
    }

    /// Runs SQLite's own consistency check (`PRAGMA integrity_check`) on the whole database.
    ///
    /// # Errors
    /// The check could not run, or it found a problem (the report is in the error).
    pub fn integrity_check(&self) -> Result<(), StoreError> {
        let report: String = self
            .conn()
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .map_err(self.err("integrity check"))?;
        if report == "ok" {
            Ok(())
        } else {
            Err(StoreError::CorruptRow {
                key: self.path.display().to_string(),
                reason: report,
            })
        }
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        // A panic inside a call drops its transaction, which rolls back: the connection is fine.
        self.conn.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn err(&self, op: &'static str) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        sqlite_err(&self.path, op)
    }

    /// The scope id of a writable store (always registered at open).
    fn writable_scope(&self) -> Option<i64> {
        match self.access {
            Access::ReadWrite => self.scope_id,
            Access::ReadOnly => None,
        }
    }

    /// Runs `body` in one `BEGIN IMMEDIATE` transaction with the scope id and commits it; any
    /// error rolls back. `Ok(None)` for a read-only store (nothing is run).
    fn write<T>(
        &self,
        op: &'static str,
        body: impl FnOnce(&Transaction<'_>, i64) -> Result<T, StoreError>,
    ) -> Result<Option<T>, StoreError> {
        let Some(scope_id) = self.writable_scope() else {
            return Ok(None);
        };
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.err(op))?;
        let out = body(&tx, scope_id)?;
        tx.commit().map_err(self.err(op))?;
        Ok(Some(out))
    }

    /// Adds `delta` to the scope's receipt count.
    fn count_add(&self, tx: &Transaction<'_>, scope_id: i64, delta: i64) -> Result<(), StoreError> {
        if delta != 0 {
            tx.prepare_cached(
                "UPDATE buzz_receipt_scopes SET receipts = receipts + ?2 WHERE id = ?1",
            )
            .and_then(|mut s| s.execute(params![scope_id, delta]))
            .map_err(self.err("count receipts"))?;
        }
        Ok(())
    }

    /// Evicts least recently used receipts (never `keep`) until the scope is within the cap.
    fn evict_over_cap(
        &self,
        tx: &Transaction<'_>,
        scope_id: i64,
        keep: &str,
    ) -> Result<usize, StoreError> {
        let count: i64 = tx
            .prepare_cached("SELECT receipts FROM buzz_receipt_scopes WHERE id = ?1")
            .and_then(|mut s| s.query_row(params![scope_id], |r| r.get(0)))
            .map_err(self.err("count receipts"))?;
        let Some(excess) = row::excess_over_cap(count, self.max_receipts) else {
            return Ok(0);
        };
        let evicted = tx
            .prepare_cached(
                "DELETE FROM buzz_receipts WHERE scope_id = ?1 AND scope_key IN (
                     SELECT scope_key FROM buzz_receipts
                     WHERE scope_id = ?1 AND scope_key <> ?2
                     ORDER BY last_used_ms, scope_key LIMIT ?3)",
            )
            .and_then(|mut s| s.execute(params![scope_id, keep, excess]))
            .map_err(self.err("evict"))?;
        self.count_add(tx, scope_id, -i64::try_from(evicted).unwrap_or(i64::MAX))?;
        if evicted > 0 {
            tracing::debug!(path = %self.path.display(), evicted, cap = self.max_receipts, "session store: evicted least recently used receipts");
        }
        Ok(evicted)
    }

    /// Writes `row` over whatever row its key has, and drops the key's tombstone (the row is
    /// newer).
    fn upsert(
        &self,
        tx: &Transaction<'_>,
        scope_id: i64,
        op: &'static str,
        row: &Row,
    ) -> Result<(), StoreError> {
        tx.prepare_cached(UPSERT)
            .and_then(|mut s| {
                s.execute(params![
                    scope_id,
                    row.scope_key,
                    row.session_id,
                    row.model,
                    row.permission_mode,
                    row.requested_model,
                    row.requested_permission_mode,
                    row.standing_context_sent,
                    row.delivered_event_ids,
                    row.last_used_ms,
                    row.ext,
                ])
            })
            .map_err(self.err(op))?;
        tx.prepare_cached(
            "DELETE FROM buzz_receipt_forgets WHERE scope_id = ?1 AND scope_key = ?2",
        )
        .and_then(|mut s| s.execute(params![scope_id, row.scope_key]))
        .map_err(self.err(op))?;
        Ok(())
    }

    /// Reads what is stored under `storage_key`: the receipt row and the tombstone.
    fn current(
        &self,
        tx: &Transaction<'_>,
        scope_id: i64,
        op: &'static str,
        storage_key: &str,
    ) -> Result<Current, StoreError> {
        let receipt = tx
            .prepare_cached(
                "SELECT session_id, last_used_ms, standing_context_sent, delivered_event_ids, ext
                 FROM buzz_receipts WHERE scope_id = ?1 AND scope_key = ?2",
            )
            .and_then(|mut s| {
                s.query_row(params![scope_id, storage_key], |r| {
                    let session: String = r.get(0)?;
                    let used: i64 = r.get(1)?;
                    let columns = CommitColumns {
                        ledger: LedgerColumns {
                            standing_context_sent: r.get(2)?,
                            delivered_event_ids: r.get(3)?,
                        },
                        ext: r.get(4)?,
                    };
                    Ok((session, used, columns))
                })
                .optional()
            })
            .map_err(self.err(op))?;
        let forgotten: Option<i64> = tx
            .prepare_cached(
                "SELECT forgotten_ms FROM buzz_receipt_forgets WHERE scope_id = ?1 AND scope_key = ?2",
            )
            .and_then(|mut s| {
                s.query_row(params![scope_id, storage_key], |r| r.get(0))
                    .optional()
            })
            .map_err(self.err(op))?;
        let row_exists = receipt.is_some();
        let (identity, columns) = match receipt {
            Some((session, used, columns)) => (Some((session, used)), Some(columns)),
            None => (None, None),
        };
        let state = State::of(identity, forgotten);
        let columns = columns.filter(|_| state.is_live());
        Ok(Current {
            row_exists,
            state,
            columns,
        })
    }

    /// Deletes the receipt row of `storage_key`, keeping the count.
    fn delete_row(
        &self,
        tx: &Transaction<'_>,
        scope_id: i64,
        op: &'static str,
        storage_key: &str,
    ) -> Result<(), StoreError> {
        let deleted = tx
            .prepare_cached("DELETE FROM buzz_receipts WHERE scope_id = ?1 AND scope_key = ?2")
            .and_then(|mut s| s.execute(params![scope_id, storage_key]))
            .map_err(self.err(op))?;
        self.count_add(tx, scope_id, -i64::try_from(deleted).unwrap_or(i64::MAX))
    }

    /// Sets the tombstone of `storage_key` to `now` (never earlier than it was).
    fn tombstone(
        &self,
        tx: &Transaction<'_>,
        scope_id: i64,
        op: &'static str,
        storage_key: &str,
        now: UnixMillis,
    ) -> Result<(), StoreError> {
        tx.prepare_cached(
            "INSERT INTO buzz_receipt_forgets (scope_id, scope_key, forgotten_ms) VALUES (?1, ?2, ?3)
             ON CONFLICT (scope_id, scope_key)
             DO UPDATE SET forgotten_ms = max(forgotten_ms, excluded.forgotten_ms)",
        )
        .and_then(|mut s| s.execute(params![scope_id, storage_key, now.to_sql()]))
        .map_err(self.err(op))?;
        Ok(())
    }

    fn read_live(&self, filter: &str, key: Option<&str>) -> Result<Vec<Row>, StoreError> {
        let Some(scope_id) = self.scope_id else {
            return Ok(Vec::new());
        };
        let conn = self.conn();
        let mut stmt = conn
            .prepare_cached(&select_live(self.revision, filter))
            .map_err(self.err("read"))?;
        let rows = match key {
            Some(key) => stmt.query_map(params![scope_id, key], read_row),
            None => stmt.query_map(params![scope_id], read_row),
        };
        rows.and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
            .map_err(self.err("read"))
    }
}

impl ReceiptStore for SqliteStore {
    fn kind(&self) -> BackendKind {
        BackendKind::Sqlite
    }

    fn location(&self) -> String {
        self.path.display().to_string()
    }

    fn scheme(&self) -> KeyScheme {
        self.scheme
    }

    fn get(&self, key: &ScopeKey) -> Result<Option<SessionRecord>, StoreError> {
        let storage_key = self.scheme.map(key).to_storage_key();
        let rows = self.read_live("r.scope_id = ?1 AND r.scope_key = ?2", Some(&storage_key))?;
        rows.into_iter()
            .next()
            .map(|row| row.into_receipt().map(|r| r.record))
            .transpose()
    }

    fn put(
        &self,
        key: &ScopeKey,
        record: &SessionRecord,
        expect: &Expect,
        now: UnixMillis,
    ) -> Result<PutOutcome, StoreError> {
        let row = row::put_row(self.scheme, key, record, now)?;
        let outcome = self.write("put", |tx, scope_id| {
            let current = self.current(tx, scope_id, "put", &row.scope_key)?;
            if let Err(refusal) = row::admit(&current.state, expect, now) {
                return Ok(row::put_refused(refusal));
            }
            self.upsert(tx, scope_id, "put", &row)?;
            let evicted = if current.row_exists {
                0
            } else {
                self.count_add(tx, scope_id, 1)?;
                self.evict_over_cap(tx, scope_id, &row.scope_key)?
            };
            Ok(PutOutcome::Written {
                created: !current.state.is_live(),
                evicted,
            })
        })?;
        Ok(outcome.unwrap_or(PutOutcome::NotWritable(WriteRefusal::ReadOnly)))
    }

    fn commit_turn(
        &self,
        key: &ScopeKey,
        commit: &TurnCommit,
        now: UnixMillis,
    ) -> Result<CommitOutcome, StoreError> {
        let storage_key = self.scheme.map(key).to_storage_key();
        let outcome = self.write("commit_turn", |tx, scope_id| {
            let current = self.current(tx, scope_id, "commit_turn", &storage_key)?;
            let plan =
                row::plan_commit(&storage_key, &current.state, current.columns, commit, now)?;
            let (outcome, columns) = match plan {
                CommitPlan::Refuse(answer) => return Ok(answer),
                CommitPlan::Unchanged => (CommitOutcome::Unchanged, None),
                CommitPlan::Write(columns) => (CommitOutcome::Written, Some(columns)),
            };
            // Guarded by the session id in the UPDATE itself, inside the write lock.
            let updated = match columns {
                Some(c) => tx
                    .prepare_cached(
                        "UPDATE buzz_receipts SET standing_context_sent = ?4,
                             delivered_event_ids = ?5, ext = ?6, last_used_ms = ?7
                         WHERE scope_id = ?1 AND scope_key = ?2 AND session_id = ?3",
                    )
                    .and_then(|mut s| {
                        s.execute(params![
                            scope_id,
                            storage_key,
                            commit.session_id,
                            c.ledger.standing_context_sent,
                            c.ledger.delivered_event_ids,
                            c.ext,
                            now.to_sql()
                        ])
                    }),
                None => tx
                    .prepare_cached(
                        "UPDATE buzz_receipts SET last_used_ms = ?4
                         WHERE scope_id = ?1 AND scope_key = ?2 AND session_id = ?3",
                    )
                    .and_then(|mut s| {
                        s.execute(params![
                            scope_id,
                            storage_key,
                            commit.session_id,
                            now.to_sql()
                        ])
                    }),
            }
            .map_err(self.err("commit_turn"))?;
            Ok(if updated == 1 {
                outcome
            } else {
                CommitOutcome::Conflict { stored: None }
            })
        })?;
        Ok(outcome.unwrap_or(CommitOutcome::NotWritable(WriteRefusal::ReadOnly)))
    }

    fn remove(&self, key: &ScopeKey, expect: &Expect) -> Result<Removal, StoreError> {
        let storage_key = self.scheme.map(key).to_storage_key();
        let outcome = self.write("remove", |tx, scope_id| {
            let current = self.current(tx, scope_id, "remove", &storage_key)?;
            let session_id = match row::plan_removal(current.state, expect) {
                Ok(session_id) => session_id,
                Err(answer) => return Ok(answer),
            };
            self.delete_row(tx, scope_id, "remove", &storage_key)?;
            Ok(Removal::Removed { session_id })
        })?;
        Ok(outcome.unwrap_or(Removal::NotWritable(WriteRefusal::ReadOnly)))
    }

    fn remove_channel(
        &self,
        channel_id: &str,
        now: UnixMillis,
    ) -> Result<ChannelRemoval, StoreError> {
        let (exact, lower, upper) = row::channel_key_range(channel_id);
        let outcome = self.write("remove_channel", |tx, scope_id| {
            tx.prepare_cached(
                "INSERT INTO buzz_receipt_forgets (scope_id, scope_key, forgotten_ms)
                 SELECT scope_id, scope_key, ?5 FROM buzz_receipts WHERE scope_id = ?1
                     AND (scope_key = ?2 OR (scope_key >= ?3 AND scope_key < ?4))
                 ON CONFLICT (scope_id, scope_key)
                 DO UPDATE SET forgotten_ms = max(forgotten_ms, excluded.forgotten_ms)",
            )
            .and_then(|mut s| s.execute(params![scope_id, exact, lower, upper, now.to_sql()]))
            .map_err(self.err("remove_channel"))?;
            let removed = tx
                .prepare_cached(
                    "DELETE FROM buzz_receipts WHERE scope_id = ?1
                     AND (scope_key = ?2 OR (scope_key >= ?3 AND scope_key < ?4))",
                )
                .and_then(|mut s| s.execute(params![scope_id, exact, lower, upper]))
                .map_err(self.err("remove_channel"))?;
            self.count_add(tx, scope_id, -i64::try_from(removed).unwrap_or(i64::MAX))?;
            Ok(ChannelRemoval::Removed(removed))
        })?;
        Ok(outcome.unwrap_or(ChannelRemoval::NotWritable(WriteRefusal::ReadOnly)))
    }

    fn forget(
        &self,
        key: &ScopeKey,
        expect: &Expect,
        now: UnixMillis,
    ) -> Result<ForgetOutcome, StoreError> {
        let key = self.scheme.map(key);
        row::check_key(&key)?;
        let storage_key = key.to_storage_key();
        let outcome = self.write("forget", |tx, scope_id| {
            let current = self.current(tx, scope_id, "forget", &storage_key)?;
            let session_id = match row::plan_forget(current.state, expect) {
                Ok(session_id) => session_id,
                Err(answer) => return Ok(answer),
            };
            if current.row_exists {
                self.delete_row(tx, scope_id, "forget", &storage_key)?;
            }
            self.tombstone(tx, scope_id, "forget", &storage_key, now)?;
            tx.prepare_cached(
                "DELETE FROM buzz_receipt_forgets WHERE scope_id = ?1 AND forgotten_ms < ?2",
            )
            .and_then(|mut s| s.execute(params![scope_id, row::tombstone_purge_before(now)]))
            .map_err(self.err("forget"))?;
            Ok(ForgetOutcome::Forgotten { session_id })
        })?;
        Ok(outcome.unwrap_or(ForgetOutcome::NotWritable(WriteRefusal::ReadOnly)))
    }

    fn import(&self, receipts: &[StoredReceipt]) -> Result<ImportOutcome, StoreError> {
        let rows = row::import_rows(self.scheme, receipts)?;
        let outcome = self.write("import", |tx, scope_id| {
            let mut inserted = 0usize;
            let mut kept_existing = 0usize;
            let mut forgotten = 0usize;
            for row in &rows {
                let current = self.current(tx, scope_id, "import", &row.scope_key)?;
                match row::plan_import(row, &current.state) {
                    Ok(()) => {
                        self.upsert(tx, scope_id, "import", row)?;
                        if !current.row_exists {
                            self.count_add(tx, scope_id, 1)?;
                        }
                        inserted += 1;
                    }
                    Err(ImportSkip::Existing) => kept_existing += 1,
                    Err(ImportSkip::Forgotten) => forgotten += 1,
                }
            }
            let evicted = self.evict_over_cap(tx, scope_id, "")?;
            Ok(ImportOutcome::Imported {
                inserted,
                kept_existing,
                forgotten,
                evicted,
            })
        })?;
        Ok(outcome.unwrap_or(ImportOutcome::NotWritable(WriteRefusal::ReadOnly)))
    }

    fn receipts(&self) -> Result<Vec<StoredReceipt>, StoreError> {
        self.read_live("r.scope_id = ?1", None)?
            .into_iter()
            .map(Row::into_receipt)
            .collect()
    }

    fn len(&self) -> Result<usize, StoreError> {
        let Some(scope_id) = self.scope_id else {
            return Ok(0);
        };
        let count: i64 = self
            .conn()
            .prepare_cached("SELECT receipts FROM buzz_receipt_scopes WHERE id = ?1")
            .and_then(|mut s| s.query_row(params![scope_id], |r| r.get(0)))
            .map_err(self.err("count receipts"))?;
        Ok(usize::try_from(count).unwrap_or(0))
    }

    fn watermark(&self) -> Result<Option<u64>, StoreError> {
        let Some(scope_id) = self.scope_id else {
            return Ok(None);
        };
        if self.revision < schema::WATERMARK_REVISION {
            return Ok(None);
        }
        let value: Option<i64> = self
            .conn()
            .prepare_cached("SELECT watermark_s FROM buzz_receipt_scopes WHERE id = ?1")
            .and_then(|mut s| s.query_row(params![scope_id], |r| r.get(0)))
            .map_err(self.err("read watermark"))?;
        row::watermark_from_sql(value)
    }

    fn advance_watermark(&self, secs: u64) -> Result<Option<u64>, StoreError> {
        let secs = row::watermark_to_sql(secs)?;
        let stored = self.write("advance watermark", |tx, scope_id| {
            let value: Option<i64> = tx
                .prepare_cached(
                    "UPDATE buzz_receipt_scopes SET watermark_s = max(coalesce(watermark_s, ?2), ?2)
                     WHERE id = ?1 RETURNING watermark_s",
                )
                .and_then(|mut s| s.query_row(params![scope_id, secs], |r| r.get(0)))
                .map_err(self.err("advance watermark"))?;
            row::watermark_from_sql(value)
        })?;
        Ok(stored.flatten())
    }

    fn set_watermark(&self, secs: Option<u64>) -> Result<WatermarkOutcome, StoreError> {
        let secs = secs.map(row::watermark_to_sql).transpose()?;
        let written = self.write("set watermark", |tx, scope_id| {
            // RETURNING: a scope row that is not there is an error, not a write.
            tx.prepare_cached(
                "UPDATE buzz_receipt_scopes SET watermark_s = ?2 WHERE id = ?1
                 RETURNING watermark_s",
            )
            .and_then(|mut s| s.query_row(params![scope_id, secs], |r| r.get::<_, Option<i64>>(0)))
            .map_err(self.err("set watermark"))?;
            Ok(WatermarkOutcome::Written)
        })?;
        Ok(written.unwrap_or(WatermarkOutcome::NotWritable(WriteRefusal::ReadOnly)))
    }

    fn storage_bytes(&self) -> Result<u64, StoreError> {
        let mut total = 0;
        for suffix in ["", "-wal", "-shm"] {
            match fs::metadata(fsio::with_suffix(&self.path, suffix)) {
                Ok(meta) => total += meta.len(),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(source) => return Err(fsio::io_error(&self.path, "stat", source)),
            }
        }
        Ok(total)
    }
}

fn read_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Row> {
    Ok(Row {
        scope_key: r.get(0)?,
        session_id: r.get(1)?,
        model: r.get(2)?,
        permission_mode: r.get(3)?,
        requested_model: r.get(4)?,
        requested_permission_mode: r.get(5)?,
        standing_context_sent: r.get(6)?,
        delivered_event_ids: r.get(7)?,
        last_used_ms: r.get(8)?,
        ext: r.get(9)?,
    })
}

/// Opens the connection and sets WAL, durability and the busy timeout. Creates the file 0600
/// first (SQLite would create it with the umask's mode) and never follows a symlink.
fn connect(path: &Path) -> Result<Connection, StoreError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|source| fsio::io_error(path, "create database file", source))?;
    let err = |op| sqlite_err(path, op);
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_NOFOLLOW;
    let mut conn = Connection::open_with_flags(path, flags).map_err(err("open"))?;
    conn.busy_handler(Some(busy_wait()))
        .map_err(err("set busy handler"))?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))
        .map_err(err("enable WAL"))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Config {
            reason: format!(
                "{}: SQLite refused WAL mode (journal mode is {mode:?}); the file system may not support shared memory",
                path.display()
            ),
        });
    }
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(err("set synchronous"))?;
    // After a checkpoint, shrink a log that a large transaction (an import) grew.
    conn.pragma_update(None, "journal_size_limit", WAL_SIZE_LIMIT)
        .map_err(err("set journal size limit"))?;
    Ok(conn)
}

/// Opens an existing database without creating, writing or following a symlink.
fn connect_read_only(path: &Path) -> Result<Connection, StoreError> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.is_file() => {}
        Ok(_) => {
            return Err(StoreError::Config {
                reason: format!("{} is not a regular file", path.display()),
            });
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(StoreError::NotFound {
                location: path.display().to_string(),
            });
        }
        Err(source) => return Err(fsio::io_error(path, "stat", source)),
    }
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_NOFOLLOW;
    let mut conn = Connection::open_with_flags(path, flags).map_err(sqlite_err(path, "open"))?;
    conn.busy_handler(Some(busy_wait()))
        .map_err(sqlite_err(path, "set busy handler"))?;
    Ok(conn)
}

/// The schema revision of an existing database, checked for a compatible schema line (read-only).
fn read_schema(conn: &Connection, path: &Path) -> Result<i64, StoreError> {
    let err = |op| sqlite_err(path, op);
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(err("read schema version"))?;
    match version {
        0 => Err(StoreError::NotFound {
            location: format!("{} (a database without receipt tables)", path.display()),
        }),
        schema::LINE => revision_of(conn).map_err(err("read schema revision")),
        found => Err(StoreError::SchemaTooNew {
            location: path.display().to_string(),
            found,
            supported: schema::LINE,
        }),
    }
}

/// The recorded revision; 0 for a database that predates revisions.
fn revision_of(conn: &Connection) -> rusqlite::Result<i64> {
    let has_table: bool = conn.query_row(
        "SELECT EXISTS (SELECT 1 FROM sqlite_master
                        WHERE type = 'table' AND name = 'buzz_receipt_revision')",
        [],
        |r| r.get(0),
    )?;
    if !has_table {
        return Ok(0);
    }
    conn.query_row("SELECT revision FROM buzz_receipt_revision", [], |r| {
        r.get(0)
    })
}

/// Creates the schema in a new database, brings an older revision of the same line up to this
/// build's, or refuses a newer line. Returns the revision the database is at afterwards (a newer
/// revision of the same line is additive, and used as it is).
fn migrate_schema(tx: &Transaction<'_>, path: &Path) -> Result<i64, StoreError> {
    let err = |op| sqlite_err(path, op);
    let version: i64 = tx
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(err("read schema version"))?;
    match version {
        0 => {
            tx.execute_batch(SCHEMA_V1).map_err(err("create schema"))?;
            tx.pragma_update(None, "user_version", schema::LINE)
                .map_err(err("write schema version"))?;
            tracing::info!(path = %path.display(), version = schema::LINE, "session store: created the database schema");
        }
        schema::LINE => {}
        found => {
            return Err(StoreError::SchemaTooNew {
                location: path.display().to_string(),
                found,
                supported: schema::LINE,
            });
        }
    }
    let found = revision_of(tx).map_err(err("read schema revision"))?;
    let mut revision = found;
    for (step, (sql, op)) in (1..).zip(REVISIONS) {
        if revision < step {
            tx.execute_batch(sql).map_err(err(op))?;
            revision = step;
        }
    }
    if revision > found {
        tracing::info!(path = %path.display(), from = found, revision, "session store: applied additive schema revisions");
    }
    Ok(revision)
}

/// The scope's id, registering it on first use, with its receipt count re-derived from the rows
/// (a cheap self-check: the count is only ever changed in the same transaction as the rows).
fn register_scope(tx: &Transaction<'_>, scope: &StoreScope) -> rusqlite::Result<i64> {
    tx.execute(
        "INSERT INTO buzz_receipt_scopes (relay, agent_pubkey) VALUES (?1, ?2)
         ON CONFLICT (relay, agent_pubkey) DO NOTHING",
        params![scope.relay, scope.agent_pubkey],
    )?;
    let id: i64 = tx.query_row(
        "SELECT id FROM buzz_receipt_scopes WHERE relay = ?1 AND agent_pubkey = ?2",
        params![scope.relay, scope.agent_pubkey],
        |r| r.get(0),
    )?;
    tx.execute(
        "UPDATE buzz_receipt_scopes
         SET receipts = (SELECT count(*) FROM buzz_receipts WHERE scope_id = ?1) WHERE id = ?1",
        params![id],
    )?;
    Ok(id)
}

/// The busy handler: retry about every millisecond until [`BUSY_TIMEOUT`] has passed since the
/// first retry of this lock attempt (SQLite passes the number of retries so far).
fn busy_wait() -> impl FnMut(i32) -> bool + Send + 'static {
    let jitter = u64::from(std::process::id() % 7) * 100;
    let mut since = Instant::now();
    move |retries| {
        if retries == 0 {
            since = Instant::now();
        }
        if since.elapsed() >= BUSY_TIMEOUT {
            return false;
        }
        let spread = u64::try_from(retries).unwrap_or(0) % 5 * 100;
        std::thread::sleep(BUSY_RETRY + Duration::from_micros(jitter + spread));
        true
    }
}

/// Maps a rusqlite error of `op` on the database at `path` (built in one place so every error
/// names the file and the operation the same way).
fn sqlite_err<'a>(path: &'a Path, op: &'static str) -> impl Fn(rusqlite::Error) -> StoreError + 'a {
    move |source| StoreError::Sqlite {
        path: path.to_path_buf(),
        op,
        source,
    }
}

fn is_not_a_database(e: &rusqlite::Error) -> bool {
    e.sqlite_error_code() == Some(rusqlite::ErrorCode::NotADatabase)
}

/// Moves a file that is not a database aside, with any log beside it.
fn quarantine(path: &Path) -> Result<PathBuf, StoreError> {
    let moved = fsio::quarantine(path)?;
    for suffix in ["-wal", "-shm"] {
        let side = fsio::with_suffix(path, suffix);
        if fs::symlink_metadata(&side).is_ok() {
            fs::rename(&side, fsio::with_suffix(&moved, suffix))
                .map_err(|source| fsio::io_error(&side, "quarantine", source))?;
        }
    }
    Ok(moved)
}
