//! The shared backend: receipts in PostgreSQL, so harnesses on several machines (replicas, or a
//! pod rescheduled to another node) see the same receipts.
//!
//! Same tables as the SQLite backend (`buzz_receipt_scopes`, `buzz_receipts`) plus
//! `buzz_receipt_schema` (the schema version), created or migrated on start under an advisory
//! lock so that harnesses starting together do not race. Every operation is a short transaction
//! on single rows: no document is read and rewritten.
//!
//! * The stale-commit guard is a conditional `UPDATE … WHERE session_id = $expected`, after the
//!   row is read `FOR UPDATE` to compute the bounded ledger.
//! * Operations that add or delete receipts lock the scope's counter row first, so they serialise
//!   per (relay, agent key) and always take locks in the same order (counter, then receipts): no
//!   deadlock between them. A per-turn `commit_delivery` locks only its own row. A serialization
//!   failure or detected deadlock (rolled back by the server, so nothing happened) is retried.
//!
//! The synchronous `postgres` client runs its own async runtime internally, which must not be
//! entered from inside the harness's tokio runtime. So the connection lives on a thread of its
//! own; callers send it a job and block on the answer, bounded by a timeout. A lost connection is
//! reopened on the next operation; an operation interrupted by a lost connection is reported as
//! an error (it may or may not have committed) and is never retried blindly.
//!
//! TLS is not built in: use a unix socket, a private network or a local TLS-terminating proxy.
//! A URL that requires TLS (`sslmode=require`) is refused at open with a clear error.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use postgres::config::{Host, SslMode};
use postgres::error::SqlState;
use postgres::types::ToSql;
use postgres::{Client, Config, GenericClient, NoTls, Statement, Transaction};

use crate::error::StoreError;
use crate::key::{KeyScheme, ScopeKey};
use crate::receipt_store::{
    BackendKind, ChannelRemoval, CommitOutcome, ImportOutcome, PutOutcome, ReceiptStore, Removal,
    StoredReceipt, UnixMillis,
};
use crate::record::SessionRecord;
use crate::row::{self, LedgerColumns, Row};
use crate::store::StoreScope;

/// Newest schema this build reads and writes.
const SCHEMA_VERSION: i64 = 1;

/// Advisory lock key that serialises schema creation and migration ("buzzrcpt").
const SCHEMA_LOCK: i64 = 0x6275_7a7a_7263_7074;

/// Connection attempt limit when the URL sets none.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Server-side limits per statement and per lock wait, so no call can hang a turn.
const STATEMENT_TIMEOUT_MS: u32 = 5_000;

/// How long a caller waits for the connection thread's answer (covers a reconnect, the statement
/// and lock timeouts, and one retry).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(20);

/// Attempts for a transaction the server rolled back as a serialization failure or deadlock.
const MAX_ATTEMPTS: usize = 3;

/// Rows per `INSERT … SELECT FROM unnest(…)` statement of an import.
const IMPORT_BATCH: usize = 2_000;

const SCHEMA_V1: &str = r#"
CREATE TABLE buzz_receipt_scopes (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    relay        TEXT   NOT NULL,
    agent_pubkey TEXT   NOT NULL,
    receipts     BIGINT NOT NULL DEFAULT 0,
    UNIQUE (relay, agent_pubkey)
);
CREATE TABLE buzz_receipts (
    scope_id                  BIGINT  NOT NULL REFERENCES buzz_receipt_scopes (id),
    scope_key                 TEXT COLLATE "C" NOT NULL,
    session_id                TEXT    NOT NULL,
    model                     TEXT,
    permission_mode           TEXT,
    requested_model           TEXT,
    requested_permission_mode TEXT,
    standing_context_sent     BOOLEAN NOT NULL DEFAULT FALSE,
    delivered_event_ids       TEXT,
    last_used_ms              BIGINT  NOT NULL,
    PRIMARY KEY (scope_id, scope_key)
);
CREATE INDEX buzz_receipts_lru ON buzz_receipts (scope_id, last_used_ms, scope_key);
"#;

/// One receipt by key (the columns [`read_row`] reads).
const SELECT_ONE: &str = "SELECT scope_key, session_id, model, permission_mode, requested_model,
         requested_permission_mode, standing_context_sent, delivered_event_ids, last_used_ms
     FROM buzz_receipts WHERE scope_id = $1 AND scope_key = $2";

/// Every receipt of a scope (the columns [`read_row`] reads).
const SELECT_ALL: &str = "SELECT scope_key, session_id, model, permission_mode, requested_model,
         requested_permission_mode, standing_context_sent, delivered_event_ids, last_used_ms
     FROM buzz_receipts WHERE scope_id = $1 ORDER BY scope_key";

/// A unit of work for the connection thread.
type Job = Box<dyn FnOnce(&mut Link) + Send>;

/// Receipts of one (relay, agent key) in a PostgreSQL database.
pub struct PgStore {
    /// Server and database without credentials, for logs and errors.
    target: String,
    scope: StoreScope,
    scheme: KeyScheme,
    max_receipts: usize,
    /// To the connection thread; `None` only while dropping.
    jobs: Option<mpsc::Sender<Job>>,
    worker: Option<thread::JoinHandle<()>>,
}

impl fmt::Debug for PgStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgStore")
            .field("target", &self.target)
            .field("scope", &self.scope)
            .field("scheme", &self.scheme)
            .field("max_receipts", &self.max_receipts)
            .finish_non_exhaustive()
    }
}

impl PgStore {
    /// Connects to the database at `url` (`postgres://…` or `postgresql://…`), creates or checks
    /// the schema, and registers `scope`.
    ///
    /// # Errors
    /// [`StoreError::Config`] for an unparsable URL, a TLS requirement or a zero cap;
    /// [`StoreError::SchemaTooNew`] for a database of a newer harness; otherwise the connection
    /// or SQL failure.
    pub fn open(
        url: &str,
        scope: StoreScope,
        scheme: KeyScheme,
        max_receipts: usize,
    ) -> Result<Self, StoreError> {
        row::check_cap(max_receipts)?;
        let mut config: Config = url.parse().map_err(|e| StoreError::Config {
            reason: format!("unparsable PostgreSQL URL: {e}"),
        })?;
        if config.get_ssl_mode() == SslMode::Require {
            return Err(StoreError::Config {
                reason: "the PostgreSQL URL requires TLS (sslmode=require), which this build does not include; use a unix socket, a private network or a local TLS proxy".into(),
            });
        }
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("buzz-acp session store");
        }
        let target = describe(&config);
        let (jobs, inbox) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = mpsc::sync_channel(1);
        let mut link = Link {
            config,
            target: target.clone(),
            client: None,
            statements: HashMap::new(),
            scope_id: 0,
        };
        let thread_scope = scope.clone();
        let worker = thread::Builder::new()
            .name("buzz-receipts-pg".into())
            .spawn(move || {
                let ready = link.initialise(&thread_scope);
                let ok = ready.is_ok();
                // The opener may have given up waiting; then there is nobody to serve.
                if ready_tx.send(ready).is_err() || !ok {
                    return;
                }
                for job in inbox {
                    job(&mut link);
                }
            })
            .map_err(|source| StoreError::Unavailable {
                target: target.clone(),
                op: "open",
                reason: format!("cannot start the connection thread: {source}"),
            })?;
        match ready_rx.recv_timeout(ANSWER_TIMEOUT) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                // The thread has returned already.
                let _ = worker.join();
                return Err(e);
            }
            Err(_) => {
                return Err(StoreError::Unavailable {
                    target,
                    op: "open",
                    reason: format!("no answer within {ANSWER_TIMEOUT:?}"),
                });
            }
        }
        tracing::info!(target = %target, relay = %scope.relay, scheme = ?scheme, max_receipts, "session store opened (postgres)");
        Ok(Self {
            target,
            scope,
            scheme,
            max_receipts,
            jobs: Some(jobs),
            worker: Some(worker),
        })
    }

    /// Runs `work` on the connection thread and waits for its answer.
    fn call<T: Send + 'static>(
        &self,
        op: &'static str,
        work: impl FnOnce(&mut Link) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let unavailable = |reason: String| StoreError::Unavailable {
            target: self.target.clone(),
            op,
            reason,
        };
        let (answer_tx, answer_rx) = mpsc::sync_channel(1);
        let job: Job = Box::new(move |link| {
            // The caller may have timed out; its answer is then dropped.
            let _ = answer_tx.send(work(link));
        });
        let jobs = self
            .jobs
            .as_ref()
            .ok_or_else(|| unavailable("the store is closing".into()))?;
        jobs.send(job)
            .map_err(|_| unavailable("the connection thread has stopped".into()))?;
        match answer_rx.recv_timeout(ANSWER_TIMEOUT) {
            Ok(answer) => answer,
            Err(mpsc::RecvTimeoutError::Timeout) => Err(unavailable(format!(
                "no answer within {ANSWER_TIMEOUT:?}; a write may or may not have happened"
            ))),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                Err(unavailable("the connection thread has stopped".into()))
            }
        }
    }
}

impl Drop for PgStore {
    fn drop(&mut self) {
        // Closing the job channel ends the thread after the job in progress (bounded by the
        // statement timeout); joining closes the connection cleanly.
        self.jobs = None;
        if let Some(worker) = self.worker.take()
            && worker.join().is_err()
        {
            tracing::warn!(target = %self.target, "session store: the PostgreSQL connection thread panicked");
        }
    }
}

/// The connection thread's state.
struct Link {
    config: Config,
    target: String,
    /// `None` until connected, and again after the connection is lost.
    client: Option<Client>,
    /// Statements prepared on the current connection, by their SQL.
    statements: HashMap<&'static str, Statement>,
    /// `buzz_receipt_scopes.id` of the store's scope.
    scope_id: i64,
}

/// One query context: a client or a transaction, with the statement cache.
struct Db<'a, C: GenericClient> {
    client: &'a mut C,
    statements: &'a mut HashMap<&'static str, Statement>,
    target: &'a str,
    op: &'static str,
    scope_id: i64,
}

impl Link {
    /// The live client, connecting (again) if needed.
    fn connect(&mut self, op: &'static str) -> Result<(), StoreError> {
        if self.client.as_ref().is_some_and(|c| !c.is_closed()) {
            return Ok(());
        }
        self.client = None;
        self.statements.clear();
        let mut client = self
            .config
            .connect(NoTls)
            .map_err(pg_err(&self.target, op))?;
        client
            .batch_execute(&format!(
                "SET statement_timeout = {STATEMENT_TIMEOUT_MS}; \
                 SET lock_timeout = {STATEMENT_TIMEOUT_MS}; \
                 SET idle_in_transaction_session_timeout = {};",
                STATEMENT_TIMEOUT_MS * 2
            ))
            .map_err(pg_err(&self.target, op))?;
        self.client = Some(client);
        Ok(())
    }

    /// Connects, creates or checks the schema, and registers the scope.
    fn initialise(&mut self, scope: &StoreScope) -> Result<(), StoreError> {
        let target = self.target.clone();
        self.write("open", |db| {
            db.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])?;
            db.client
                .batch_execute(
                    "CREATE TABLE IF NOT EXISTS buzz_receipt_schema (
                         singleton BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (singleton),
                         version   BIGINT  NOT NULL)",
                )
                .map_err(db.error())?;
            let version: Option<i64> = db
                .query_opt("SELECT version FROM buzz_receipt_schema", &[])?
                .map(|r| r.try_get(0))
                .transpose()
                .map_err(db.error())?;
            match version {
                None => {
                    db.client.batch_execute(SCHEMA_V1).map_err(db.error())?;
                    db.execute(
                        "INSERT INTO buzz_receipt_schema (version) VALUES ($1)",
                        &[&SCHEMA_VERSION],
                    )?;
                    tracing::info!(target = %target, version = SCHEMA_VERSION, "session store: created the database schema");
                }
                Some(SCHEMA_VERSION) => {}
                Some(found) => {
                    return Err(StoreError::SchemaTooNew {
                        location: target.clone(),
                        found,
                        supported: SCHEMA_VERSION,
                    });
                }
            }
            Ok(())
        })?;
        self.scope_id = self.write("open", |db| {
            db.execute(
                "INSERT INTO buzz_receipt_scopes (relay, agent_pubkey) VALUES ($1, $2)
                 ON CONFLICT (relay, agent_pubkey) DO NOTHING",
                &[&scope.relay, &scope.agent_pubkey],
            )?;
            let row = db.query_one(
                "SELECT id FROM buzz_receipt_scopes WHERE relay = $1 AND agent_pubkey = $2",
                &[&scope.relay, &scope.agent_pubkey],
            )?;
            row.try_get(0).map_err(db.error())
        })?;
        Ok(())
    }

    /// Runs `body` in a transaction and commits it, retrying what the server rolled back as a
    /// serialization failure or deadlock.
    fn write<T>(
        &mut self,
        op: &'static str,
        mut body: impl FnMut(&mut Db<'_, Transaction<'_>>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut attempt = 1;
        loop {
            self.connect(op)?;
            let result = self.try_write(op, &mut body);
            match result {
                Err(StoreError::Postgres { ref source, .. })
                    if is_retryable(source) && attempt < MAX_ATTEMPTS =>
                {
                    tracing::debug!(target = %self.target, op, attempt, error = %source, "session store: retrying a rolled-back transaction");
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    fn try_write<T>(
        &mut self,
        op: &'static str,
        body: &mut impl FnMut(&mut Db<'_, Transaction<'_>>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let Db {
            client,
            statements,
            target,
            op,
            scope_id,
        } = self.db(op)?;
        let mut tx = client.transaction().map_err(pg_err(target, op))?;
        let out = body(&mut Db {
            client: &mut tx,
            statements,
            target,
            op,
            scope_id,
        })?;
        tx.commit().map_err(pg_err(target, op))?;
        Ok(out)
    }

    /// Runs a read outside a transaction.
    fn read<T>(
        &mut self,
        op: &'static str,
        body: impl FnOnce(&mut Db<'_, Client>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.connect(op)?;
        body(&mut self.db(op)?)
    }

    /// A query context on the live client; `Unavailable` if [`Link::connect`] did not leave one.
    fn db(&mut self, op: &'static str) -> Result<Db<'_, Client>, StoreError> {
        let Some(client) = self.client.as_mut() else {
            return Err(StoreError::Unavailable {
                target: self.target.clone(),
                op,
                reason: "not connected".into(),
            });
        };
        Ok(Db {
            client,
            statements: &mut self.statements,
            target: &self.target,
            op,
            scope_id: self.scope_id,
        })
    }
}

impl<C: GenericClient> Db<'_, C> {
    fn error(&self) -> impl Fn(postgres::Error) -> StoreError + use<'_, C> {
        pg_err(self.target, self.op)
    }

    fn statement(&mut self, sql: &'static str) -> Result<Statement, StoreError> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare(sql).map_err(self.error())?;
        self.statements.insert(sql, statement.clone());
        Ok(statement)
    }

    fn execute(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, StoreError> {
        let statement = self.statement(sql)?;
        self.client
            .execute(&statement, params)
            .map_err(self.error())
    }

    fn query(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<postgres::Row>, StoreError> {
        let statement = self.statement(sql)?;
        self.client.query(&statement, params).map_err(self.error())
    }

    fn query_opt(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<postgres::Row>, StoreError> {
        let statement = self.statement(sql)?;
        self.client
            .query_opt(&statement, params)
            .map_err(self.error())
    }

    fn query_one(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<postgres::Row, StoreError> {
        let statement = self.statement(sql)?;
        self.client
            .query_one(&statement, params)
            .map_err(self.error())
    }

    /// Locks the scope's counter row (first lock of every add/delete) and returns the count.
    fn lock_count(&mut self) -> Result<i64, StoreError> {
        let scope_id = self.scope_id;
        let row = self.query_one(
            "SELECT receipts FROM buzz_receipt_scopes WHERE id = $1 FOR UPDATE",
            &[&scope_id],
        )?;
        row.try_get(0).map_err(self.error())
    }

    fn set_count(&mut self, count: i64) -> Result<(), StoreError> {
        let scope_id = self.scope_id;
        self.execute(
            "UPDATE buzz_receipt_scopes SET receipts = $2 WHERE id = $1",
            &[&scope_id, &count],
        )?;
        Ok(())
    }

    /// Evicts least recently used receipts (never `keep`) so that `count` fits the cap; the
    /// counter row must be locked. Returns how many were removed.
    fn evict(&mut self, count: i64, cap: usize, keep: &str) -> Result<i64, StoreError> {
        let Some(excess) = row::excess_over_cap(count, cap) else {
            return Ok(0);
        };
        let scope_id = self.scope_id;
        let evicted = self.execute(
            "DELETE FROM buzz_receipts WHERE scope_id = $1 AND scope_key IN (
                 SELECT scope_key FROM buzz_receipts
                 WHERE scope_id = $1 AND scope_key <> $2
                 ORDER BY last_used_ms, scope_key LIMIT $3)",
            &[&scope_id, &keep, &excess],
        )?;
        Ok(i64::try_from(evicted).unwrap_or(i64::MAX))
    }
}

impl ReceiptStore for PgStore {
    fn kind(&self) -> BackendKind {
        BackendKind::Postgres
    }

    fn location(&self) -> String {
        self.target.clone()
    }

    fn scheme(&self) -> KeyScheme {
        self.scheme
    }

    fn get(&self, key: &ScopeKey) -> Result<Option<SessionRecord>, StoreError> {
        let storage_key = self.scheme.map(key).to_storage_key();
        let row = self.call("get", move |link| {
            link.read("get", |db| {
                let scope_id = db.scope_id;
                let row = db.query_opt(SELECT_ONE, &[&scope_id, &storage_key])?;
                row.map(|r| read_row(&r).map_err(db.error())).transpose()
            })
        })?;
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
        let cap = self.max_receipts;
        self.call("put", move |link| {
            link.write("put", |db| {
                let count = db.lock_count()?;
                let scope_id = db.scope_id;
                let existed = db
                    .query_opt(
                        "SELECT 1 FROM buzz_receipts WHERE scope_id = $1 AND scope_key = $2",
                        &[&scope_id, &row.scope_key],
                    )?
                    .is_some();
                db.execute(
                    "INSERT INTO buzz_receipts (scope_id, scope_key, session_id, model,
                         permission_mode, requested_model, requested_permission_mode,
                         standing_context_sent, delivered_event_ids, last_used_ms)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
                     ON CONFLICT (scope_id, scope_key) DO UPDATE SET
                         session_id = excluded.session_id, model = excluded.model,
                         permission_mode = excluded.permission_mode,
                         requested_model = excluded.requested_model,
                         requested_permission_mode = excluded.requested_permission_mode,
                         standing_context_sent = excluded.standing_context_sent,
                         delivered_event_ids = excluded.delivered_event_ids,
                         last_used_ms = excluded.last_used_ms",
                    &[
                        &scope_id,
                        &row.scope_key,
                        &row.session_id,
                        &row.model,
                        &row.permission_mode,
                        &row.requested_model,
                        &row.requested_permission_mode,
                        &row.standing_context_sent,
                        &row.delivered_event_ids,
                        &row.last_used_ms,
                    ],
                )?;
                if existed {
                    return Ok(PutOutcome::Written {
                        created: false,
                        evicted: 0,
                    });
                }
                let evicted = db.evict(count + 1, cap, &row.scope_key)?;
                db.set_count(count + 1 - evicted)?;
                Ok(PutOutcome::Written {
                    created: true,
                    evicted: usize::try_from(evicted).unwrap_or(0),
                })
            })
        })
    }

    fn remove(&self, key: &ScopeKey) -> Result<Removal, StoreError> {
        let storage_key = self.scheme.map(key).to_storage_key();
        self.call("remove", move |link| {
            link.write("remove", |db| delete_one(db, &storage_key, None))
        })
    }

    fn remove_if_session(&self, key: &ScopeKey, session_id: &str) -> Result<Removal, StoreError> {
        let storage_key = self.scheme.map(key).to_storage_key();
        let session_id = session_id.to_owned();
        self.call("remove_if_session", move |link| {
            link.write("remove_if_session", |db| {
                delete_one(db, &storage_key, Some(&session_id))
            })
        })
    }

    fn remove_channel(&self, channel_id: &str) -> Result<ChannelRemoval, StoreError> {
        let (exact, lower, upper) = row::channel_key_range(channel_id);
        self.call("remove_channel", move |link| {
            link.write("remove_channel", |db| {
                let count = db.lock_count()?;
                let scope_id = db.scope_id;
                let removed = db.execute(
                    "DELETE FROM buzz_receipts WHERE scope_id = $1
                     AND (scope_key = $2 OR (scope_key >= $3 AND scope_key < $4))",
                    &[&scope_id, &exact, &lower, &upper],
                )?;
                let removed_i64 = i64::try_from(removed).unwrap_or(i64::MAX);
                if removed > 0 {
                    db.set_count(count - removed_i64)?;
                }
                Ok(ChannelRemoval::Removed(
                    usize::try_from(removed).unwrap_or(usize::MAX),
                ))
            })
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
        let session_id = session_id.to_owned();
        let new_ids = new_ids.to_vec();
        let live_window = live_window.clone();
        self.call("commit_delivery", move |link| {
            link.write("commit_delivery", |db| {
                let scope_id = db.scope_id;
                let stored = db.query_opt(
                    "SELECT session_id, standing_context_sent, delivered_event_ids
                     FROM buzz_receipts WHERE scope_id = $1 AND scope_key = $2 FOR UPDATE",
                    &[&scope_id, &storage_key],
                )?;
                let stored = stored
                    .map(|r| {
                        let ledger = LedgerColumns {
                            standing_context_sent: r.try_get(1)?,
                            delivered_event_ids: r.try_get(2)?,
                        };
                        Ok((r.try_get(0)?, ledger))
                    })
                    .transpose()
                    .map_err(db.error())?;
                let plan = row::plan_commit_row(
                    &storage_key,
                    stored,
                    &session_id,
                    standing_sent,
                    &new_ids,
                    &live_window,
                )?;
                let (outcome, ledger) = match plan.into_update() {
                    Ok(update) => update,
                    Err(answer) => return Ok(answer),
                };
                let now = now.to_sql();
                let updated = match ledger {
                    None => db.execute(
                        "UPDATE buzz_receipts SET last_used_ms = $4
                         WHERE scope_id = $1 AND scope_key = $2 AND session_id = $3",
                        &[&scope_id, &storage_key, &session_id, &now],
                    )?,
                    Some(ledger) => db.execute(
                        "UPDATE buzz_receipts SET standing_context_sent = $4,
                             delivered_event_ids = $5, last_used_ms = $6
                         WHERE scope_id = $1 AND scope_key = $2 AND session_id = $3",
                        &[
                            &scope_id,
                            &storage_key,
                            &session_id,
                            &ledger.standing_context_sent,
                            &ledger.delivered_event_ids,
                            &now,
                        ],
                    )?,
                };
                // The row is locked since the read, so the guarded UPDATE matches it.
                Ok(row::guarded_outcome(outcome, updated))
            })
        })
    }

    fn import(
        &self,
        records: &[(ScopeKey, SessionRecord)],
        now: UnixMillis,
    ) -> Result<ImportOutcome, StoreError> {
        let rows = row::prepare_import(self.scheme, records, now)?;
        let cap = self.max_receipts;
        self.call("import", move |link| {
            link.write("import", |db| {
                let count = db.lock_count()?;
                let scope_id = db.scope_id;
                let mut inserted = 0i64;
                for batch in rows.chunks(IMPORT_BATCH) {
                    let column = |f: fn(&Row) -> Option<String>| -> Vec<Option<String>> {
                        batch.iter().map(f).collect()
                    };
                    let keys = column(|r| Some(r.scope_key.clone()));
                    let sessions = column(|r| Some(r.session_id.clone()));
                    let models = column(|r| r.model.clone());
                    let modes = column(|r| r.permission_mode.clone());
                    let requested_models = column(|r| r.requested_model.clone());
                    let requested_modes = column(|r| r.requested_permission_mode.clone());
                    let ledgers = column(|r| r.delivered_event_ids.clone());
                    let standing: Vec<bool> =
                        batch.iter().map(|r| r.standing_context_sent).collect();
                    let used: Vec<i64> = batch.iter().map(|r| r.last_used_ms).collect();
                    let n = db.execute(
                        "INSERT INTO buzz_receipts (scope_id, scope_key, session_id, model,
                             permission_mode, requested_model, requested_permission_mode,
                             standing_context_sent, delivered_event_ids, last_used_ms)
                         SELECT $1, * FROM unnest($2::text[], $3::text[], $4::text[], $5::text[],
                             $6::text[], $7::text[], $8::bool[], $9::text[], $10::int8[])
                         ON CONFLICT (scope_id, scope_key) DO NOTHING",
                        &[
                            &scope_id,
                            &keys,
                            &sessions,
                            &models,
                            &modes,
                            &requested_models,
                            &requested_modes,
                            &standing,
                            &ledgers,
                            &used,
                        ],
                    )?;
                    inserted += i64::try_from(n).unwrap_or(i64::MAX);
                }
                let evicted = db.evict(count + inserted, cap, "")?;
                db.set_count(count + inserted - evicted)?;
                let inserted = usize::try_from(inserted).unwrap_or(0);
                Ok(ImportOutcome::Imported {
                    inserted,
                    kept_existing: rows.len() - inserted,
                    evicted: usize::try_from(evicted).unwrap_or(0),
                })
            })
        })
    }

    fn receipts(&self) -> Result<Vec<StoredReceipt>, StoreError> {
        let rows = self.call("list", |link| {
            link.read("list", |db| {
                let scope_id = db.scope_id;
                let rows = db.query(SELECT_ALL, &[&scope_id])?;
                rows.iter()
                    .map(|r| read_row(r).map_err(db.error()))
                    .collect::<Result<Vec<_>, _>>()
            })
        })?;
        rows.into_iter().map(Row::into_receipt).collect()
    }

    fn len(&self) -> Result<usize, StoreError> {
        let count: i64 = self.call("count receipts", |link| {
            link.read("count receipts", |db| {
                let scope_id = db.scope_id;
                let row = db.query_one(
                    "SELECT receipts FROM buzz_receipt_scopes WHERE id = $1",
                    &[&scope_id],
                )?;
                row.try_get(0).map_err(db.error())
            })
        })?;
        Ok(usize::try_from(count).unwrap_or(0))
    }

    fn storage_bytes(&self) -> Result<u64, StoreError> {
        let bytes: i64 = self.call("size", |link| {
            link.read("size", |db| {
                let row = db.query_one(
                    "SELECT (pg_total_relation_size('buzz_receipts')
                           + pg_total_relation_size('buzz_receipt_scopes'))::int8",
                    &[],
                )?;
                row.try_get(0).map_err(db.error())
            })
        })?;
        Ok(u64::try_from(bytes).unwrap_or(0))
    }
}

/// Deletes one row (optionally only while it names `only_session`), keeping the count.
fn delete_one(
    db: &mut Db<'_, Transaction<'_>>,
    storage_key: &str,
    only_session: Option<&str>,
) -> Result<Removal, StoreError> {
    let count = db.lock_count()?;
    let scope_id = db.scope_id;
    let stored = db
        .query_opt(
            "SELECT session_id FROM buzz_receipts WHERE scope_id = $1 AND scope_key = $2",
            &[&scope_id, &storage_key],
        )?
        .map(|r| r.try_get(0))
        .transpose()
        .map_err(db.error())?;
    let session_id = match row::plan_removal(stored, only_session) {
        Ok(session_id) => session_id,
        Err(answer) => return Ok(answer),
    };
    db.execute(
        "DELETE FROM buzz_receipts WHERE scope_id = $1 AND scope_key = $2",
        &[&scope_id, &storage_key],
    )?;
    db.set_count(count - 1)?;
    Ok(Removal::Removed { session_id })
}

fn read_row(r: &postgres::Row) -> Result<Row, postgres::Error> {
    Ok(Row {
        scope_key: r.try_get(0)?,
        session_id: r.try_get(1)?,
        model: r.try_get(2)?,
        permission_mode: r.try_get(3)?,
        requested_model: r.try_get(4)?,
        requested_permission_mode: r.try_get(5)?,
        standing_context_sent: r.try_get(6)?,
        delivered_event_ids: r.try_get(7)?,
        last_used_ms: r.try_get(8)?,
    })
}

/// Maps a PostgreSQL error of `op` on `target` (built in one place so every error names the
/// server and the operation the same way).
fn pg_err<'a>(target: &'a str, op: &'static str) -> impl Fn(postgres::Error) -> StoreError + 'a {
    move |source| StoreError::Postgres {
        target: target.to_owned(),
        op,
        source,
    }
}

/// Whether the server rolled the transaction back in a way that is safe to retry.
fn is_retryable(e: &postgres::Error) -> bool {
    matches!(
        e.code(),
        Some(code) if *code == SqlState::T_R_SERIALIZATION_FAILURE
            || *code == SqlState::T_R_DEADLOCK_DETECTED
    )
}

/// `user@host[,host]:port/dbname`, never the password.
fn describe(config: &Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            Host::Tcp(name) => name.clone(),
            Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    let ports: Vec<String> = config.get_ports().iter().map(u16::to_string).collect();
    format!(
        "postgres://{}@{}:{}/{}",
        config.get_user().unwrap_or(""),
        hosts.join(","),
        if ports.is_empty() {
            "5432".to_owned()
        } else {
            ports.join(",")
        },
        config.get_dbname().unwrap_or("")
    )
}
