//! The embedded default backend: one SQLite database per state directory, one row per receipt.
//!
//! ```text
//! <state_dir>/sessions.sqlite3        the database (0600), shared by every (relay, agent key)
//! <state_dir>/sessions.sqlite3-wal    write-ahead log, present while a process has it open
//! <state_dir>/sessions.sqlite3-shm    WAL index, likewise
//! ```
//!
//! Why SQLite (see docs/STORE.md for the measurements): a write touches one row and a few index
//! pages, so its cost does not grow with the number of receipts, unlike the JSON document that was
//! rewritten whole; WAL mode lets readers run beside the one writer and makes every commit atomic
//! and crash-safe (a killed process leaves a log that the next open replays, never a torn file);
//! several processes on one machine (a rolling deploy) share it through SQLite's own file locks,
//! waiting on a busy timeout instead of failing. `synchronous=FULL` fsyncs the log on every commit,
//! so a receipt reported written survives a power loss, as the JSON store's fsync did. It is
//! compiled from the bundled sources (the `bundled` feature), so nothing is installed.
//!
//! Writes run in `BEGIN IMMEDIATE` transactions: the write lock is taken up front, so two
//! processes never deadlock upgrading read locks. The per-scope receipt count lives in
//! `buzz_receipt_scopes.receipts`, updated in the same transaction as every insert and delete, so
//! the cap check is one row read, not a count over the table.

use std::collections::HashSet;
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
use crate::key::{KeyScheme, ScopeKey};
use crate::receipt_store::{
    BackendKind, ChannelRemoval, CommitOutcome, ImportOutcome, PutOutcome, ReceiptStore, Removal,
    StoredReceipt, UnixMillis,
};
use crate::record::SessionRecord;
use crate::row::{self, LedgerColumns, Row};
use crate::store::StoreScope;

/// The database file name inside a state directory.
pub const DEFAULT_FILE_NAME: &str = "sessions.sqlite3";

/// Newest schema this build reads and writes (`PRAGMA user_version`).
const SCHEMA_VERSION: i64 = 1;

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

/// Schema version 1. A rowid table with a unique key index rather than `WITHOUT ROWID`: a
/// receipt with its ledger is over a kilobyte, and such rows pack far better into rowid leaves
/// (measured: about 1.6 KB per receipt instead of 4.8 KB).
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

/// Writes one receipt, replacing the key's previous one (`put`); bound by
/// [`SqliteStore::insert_row`].
const UPSERT: &str = "INSERT INTO buzz_receipts (scope_id, scope_key, session_id, model,
         permission_mode, requested_model, requested_permission_mode, standing_context_sent,
         delivered_event_ids, last_used_ms)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
     ON CONFLICT (scope_id, scope_key) DO UPDATE SET
         session_id = excluded.session_id, model = excluded.model,
         permission_mode = excluded.permission_mode,
         requested_model = excluded.requested_model,
         requested_permission_mode = excluded.requested_permission_mode,
         standing_context_sent = excluded.standing_context_sent,
         delivered_event_ids = excluded.delivered_event_ids,
         last_used_ms = excluded.last_used_ms";

/// Writes one receipt only where the key has none (`import`: existing receipts are newer); bound
/// by [`SqliteStore::insert_row`].
const INSERT_NEW: &str = "INSERT INTO buzz_receipts (scope_id, scope_key, session_id, model,
         permission_mode, requested_model, requested_permission_mode, standing_context_sent,
         delivered_event_ids, last_used_ms)
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
     ON CONFLICT (scope_id, scope_key) DO NOTHING";

const SELECT_COLUMNS: &str = "scope_key, session_id, model, permission_mode, requested_model, \
     requested_permission_mode, standing_context_sent, delivered_event_ids, last_used_ms";

/// Receipts of one (relay, agent key) in an SQLite database.
#[derive(Debug)]
pub struct SqliteStore {
    path: PathBuf,
    scope: StoreScope,
    scheme: KeyScheme,
    max_receipts: usize,
    /// `buzz_receipt_scopes.id` of `scope`.
    scope_id: i64,
    /// One connection per store; SQLite serialises writers across processes, this mutex across
    /// the threads of this one. Never held across anything but the database call.
    conn: Mutex<Connection>,
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` for `scope`.
    ///
    /// A missing parent directory is created 0700 and a new database file 0600. A file that is not
    /// an SQLite database is moved aside to `<file>.corrupt-<unix seconds>` (nothing is deleted)
    /// and a new database is created. A symlink at `path` is refused.
    ///
    /// # Errors
    /// [`StoreError::Config`] for a zero cap, [`StoreError::SchemaTooNew`] for a database of a
    /// newer harness, otherwise the I/O or SQLite failure that prevented opening.
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
        migrate_schema(&tx, path)?;
        let scope_id = register_scope(&tx, &scope).map_err(sqlite_err(path, "register scope"))?;
        tx.commit()
            .map_err(sqlite_err(path, "commit schema migration"))?;
        let store = Self {
            path: path.to_path_buf(),
            scope,
            scheme,
            max_receipts,
            scope_id,
            conn: Mutex::new(conn),
        };
        tracing::info!(path = %path.display(), relay = %store.scope.relay, scheme = ?scheme, max_receipts, "session store opened (sqlite)");
        Ok(store)
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

    /// Runs `body` in one `BEGIN IMMEDIATE` transaction and commits it; any error rolls back.
    fn write<T>(
        &self,
        op: &'static str,
        body: impl FnOnce(&Transaction<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.err(op))?;
        let out = body(&tx)?;
        tx.commit().map_err(self.err(op))?;
        Ok(out)
    }

    /// Adds `delta` to the scope's receipt count.
    fn count_add(&self, tx: &Transaction<'_>, delta: i64) -> Result<(), StoreError> {
        if delta != 0 {
            tx.prepare_cached(
                "UPDATE buzz_receipt_scopes SET receipts = receipts + ?2 WHERE id = ?1",
            )
            .and_then(|mut s| s.execute(params![self.scope_id, delta]))
            .map_err(self.err("count receipts"))?;
        }
        Ok(())
    }

    /// Evicts least recently used receipts (never `keep`) until the scope is within the cap.
    fn evict_over_cap(&self, tx: &Transaction<'_>, keep: &str) -> Result<usize, StoreError> {
        let count: i64 = tx
            .prepare_cached("SELECT receipts FROM buzz_receipt_scopes WHERE id = ?1")
            .and_then(|mut s| s.query_row(params![self.scope_id], |r| r.get(0)))
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
            .and_then(|mut s| s.execute(params![self.scope_id, keep, excess]))
            .map_err(self.err("evict"))?;
        self.count_add(tx, -i64::try_from(evicted).unwrap_or(i64::MAX))?;
        if evicted > 0 {
            tracing::debug!(path = %self.path.display(), evicted, cap = self.max_receipts, "session store: evicted least recently used receipts");
        }
        Ok(evicted)
    }

    /// Runs `sql`, an `INSERT` of one receipt's columns as `?1`…`?10` (the scope and the row in
    /// [`Row`] order), so `put` and `import` bind the row the same way. Returns the rows inserted.
    fn insert_row(
        &self,
        tx: &Transaction<'_>,
        op: &'static str,
        sql: &'static str,
        row: &Row,
    ) -> Result<usize, StoreError> {
        tx.prepare_cached(sql)
            .and_then(|mut s| {
                s.execute(params![
                    self.scope_id,
                    row.scope_key,
                    row.session_id,
                    row.model,
                    row.permission_mode,
                    row.requested_model,
                    row.requested_permission_mode,
                    row.standing_context_sent,
                    row.delivered_event_ids,
                    row.last_used_ms,
                ])
            })
            .map_err(self.err(op))
    }

    fn exists(&self, tx: &Transaction<'_>, storage_key: &str) -> Result<bool, StoreError> {
        tx.prepare_cached(
            "SELECT EXISTS (SELECT 1 FROM buzz_receipts WHERE scope_id = ?1 AND scope_key = ?2)",
        )
        .and_then(|mut s| s.query_row(params![self.scope_id, storage_key], |r| r.get(0)))
        .map_err(self.err("look up"))
    }

    /// Deletes one row (optionally only while it names `session_id`), keeping the count.
    fn delete(
        &self,
        op: &'static str,
        key: &ScopeKey,
        only_session: Option<&str>,
    ) -> Result<Removal, StoreError> {
        let storage_key = self.scheme.map(key).to_storage_key();
        self.write(op, |tx| {
            let stored: Option<String> = tx
                .prepare_cached(
                    "SELECT session_id FROM buzz_receipts WHERE scope_id = ?1 AND scope_key = ?2",
                )
                .and_then(|mut s| {
                    s.query_row(params![self.scope_id, storage_key], |r| r.get(0))
                        .optional()
                })
                .map_err(self.err(op))?;
            let session_id = match row::plan_removal(stored, only_session) {
                Ok(session_id) => session_id,
                Err(answer) => return Ok(answer),
            };
            tx.prepare_cached("DELETE FROM buzz_receipts WHERE scope_id = ?1 AND scope_key = ?2")
                .and_then(|mut s| s.execute(params![self.scope_id, storage_key]))
                .map_err(self.err(op))?;
            self.count_add(tx, -1)?;
            Ok(Removal::Removed { session_id })
        })
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
        let row = self
            .conn()
            .prepare_cached(&format!(
                "SELECT {SELECT_COLUMNS} FROM buzz_receipts WHERE scope_id = ?1 AND scope_key = ?2"
            ))
            .and_then(|mut s| {
                s.query_row(params![self.scope_id, storage_key], read_row)
                    .optional()
            })
            .map_err(self.err("get"))?;
        row.map(|row| row.into_receipt().map(|r| r.record))
            .transpose()
    }

    fn put(
        &self,
        key: &ScopeKey,
        record: &SessionRecord,
        now: UnixMillis,
    ) -> Result<PutOutcome, StoreError> {
        let row = row::put_row(self.scheme, key, record, now)?;
        self.write("put", |tx| {
            let created = !self.exists(tx, &row.scope_key)?;
            self.insert_row(tx, "put", UPSERT, &row)?;
            let evicted = if created {
                self.count_add(tx, 1)?;
                self.evict_over_cap(tx, &row.scope_key)?
            } else {
                0
            };
            Ok(PutOutcome::Written { created, evicted })
        })
    }

    fn remove(&self, key: &ScopeKey) -> Result<Removal, StoreError> {
        self.delete("remove", key, None)
    }

    fn remove_if_session(&self, key: &ScopeKey, session_id: &str) -> Result<Removal, StoreError> {
        self.delete("remove_if_session", key, Some(session_id))
    }

    fn remove_channel(&self, channel_id: &str) -> Result<ChannelRemoval, StoreError> {
        let (exact, lower, upper) = row::channel_key_range(channel_id);
        self.write("remove_channel", |tx| {
            let removed = tx
                .prepare_cached(
                    "DELETE FROM buzz_receipts WHERE scope_id = ?1
                     AND (scope_key = ?2 OR (scope_key >= ?3 AND scope_key < ?4))",
                )
                .and_then(|mut s| s.execute(params![self.scope_id, exact, lower, upper]))
                .map_err(self.err("remove_channel"))?;
            self.count_add(tx, -i64::try_from(removed).unwrap_or(i64::MAX))?;
            Ok(ChannelRemoval::Removed(removed))
        })
    }

    fn commit_delivery(
        &self,
        key: &ScopeKey,
        session_id: &str,
        standing_sent: bool,
        new_ids: &[String],
        live_window: &HashSet<String>,
        now: UnixMillis,
    ) -> Result<CommitOutcome, StoreError> {
        let storage_key = self.scheme.map(key).to_storage_key();
        self.write("commit_delivery", |tx| {
            let stored = tx
                .prepare_cached(
                    "SELECT session_id, standing_context_sent, delivered_event_ids
                     FROM buzz_receipts WHERE scope_id = ?1 AND scope_key = ?2",
                )
                .and_then(|mut s| {
                    s.query_row(params![self.scope_id, storage_key], |r| {
                        let ledger = LedgerColumns {
                            standing_context_sent: r.get(1)?,
                            delivered_event_ids: r.get(2)?,
                        };
                        Ok((r.get(0)?, ledger))
                    })
                    .optional()
                })
                .map_err(self.err("commit_delivery"))?;
            let plan = row::plan_commit_row(
                &storage_key,
                stored,
                session_id,
                standing_sent,
                new_ids,
                live_window,
            )?;
            let (outcome, ledger) = match plan.into_update() {
                Ok(update) => update,
                Err(answer) => return Ok(answer),
            };
            // The guard is in the UPDATE itself: it only touches the row naming this session.
            let updated = match ledger {
                Some(ledger) => tx.prepare_cached(
                    "UPDATE buzz_receipts SET standing_context_sent = ?4, delivered_event_ids = ?5,
                         last_used_ms = ?6
                     WHERE scope_id = ?1 AND scope_key = ?2 AND session_id = ?3",
                )
                .and_then(|mut s| {
                    s.execute(params![
                        self.scope_id,
                        storage_key,
                        session_id,
                        ledger.standing_context_sent,
                        ledger.delivered_event_ids,
                        now.to_sql()
                    ])
                }),
                None => tx
                    .prepare_cached(
                        "UPDATE buzz_receipts SET last_used_ms = ?4
                         WHERE scope_id = ?1 AND scope_key = ?2 AND session_id = ?3",
                    )
                    .and_then(|mut s| {
                        s.execute(params![self.scope_id, storage_key, session_id, now.to_sql()])
                    }),
            }
            .map_err(self.err("commit_delivery"))?;
            // Inside the write lock the row read above cannot have changed.
            Ok(row::guarded_outcome(
                outcome,
                u64::try_from(updated).unwrap_or(u64::MAX),
            ))
        })
    }

    fn import(
        &self,
        records: &[(ScopeKey, SessionRecord)],
        now: UnixMillis,
    ) -> Result<ImportOutcome, StoreError> {
        let rows = row::prepare_import(self.scheme, records, now)?;
        self.write("import", |tx| {
            let mut inserted = 0usize;
            for row in &rows {
                inserted += self.insert_row(tx, "import", INSERT_NEW, row)?;
            }
            self.count_add(tx, i64::try_from(inserted).unwrap_or(i64::MAX))?;
            let evicted = self.evict_over_cap(tx, "")?;
            Ok(ImportOutcome::Imported {
                inserted,
                kept_existing: rows.len() - inserted,
                evicted,
            })
        })
    }

    fn receipts(&self) -> Result<Vec<StoredReceipt>, StoreError> {
        let rows = {
            let conn = self.conn();
            let mut stmt = conn
                .prepare_cached(&format!(
                    "SELECT {SELECT_COLUMNS} FROM buzz_receipts WHERE scope_id = ?1 ORDER BY scope_key"
                ))
                .map_err(self.err("list"))?;
            stmt.query_map(params![self.scope_id], read_row)
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .map_err(self.err("list"))?
        };
        rows.into_iter().map(Row::into_receipt).collect()
    }

    fn len(&self) -> Result<usize, StoreError> {
        let count: i64 = self
            .conn()
            .prepare_cached("SELECT receipts FROM buzz_receipt_scopes WHERE id = ?1")
            .and_then(|mut s| s.query_row(params![self.scope_id], |r| r.get(0)))
            .map_err(self.err("count receipts"))?;
        Ok(usize::try_from(count).unwrap_or(0))
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

/// Creates the schema in a new database, or checks that an existing one is not newer.
fn migrate_schema(tx: &Transaction<'_>, path: &Path) -> Result<(), StoreError> {
    let err = |op| sqlite_err(path, op);
    let version: i64 = tx
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(err("read schema version"))?;
    match version {
        0 => {
            tx.execute_batch(SCHEMA_V1).map_err(err("create schema"))?;
            tx.pragma_update(None, "user_version", SCHEMA_VERSION)
                .map_err(err("write schema version"))?;
            tracing::info!(path = %path.display(), version = SCHEMA_VERSION, "session store: created the database schema");
            Ok(())
        }
        SCHEMA_VERSION => Ok(()),
        found => Err(StoreError::SchemaTooNew {
            location: path.display().to_string(),
            found,
            supported: SCHEMA_VERSION,
        }),
    }
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
