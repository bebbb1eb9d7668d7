//! The shared backend: receipts in PostgreSQL, so harnesses on several machines (replicas, or a
//! pod rescheduled to another node) see the same receipts.
//!
//! Same tables as the SQLite backend (`buzz_receipt_scopes`, `buzz_receipts`,
//! `buzz_receipt_forgets`) plus `buzz_receipt_schema` (the schema line and revision, see
//! [`crate::schema`]), created or migrated on start under an advisory lock so that harnesses
//! starting together do not race. Every operation is a short transaction on single rows.
//!
//! * Conditional writes read the key's receipt row `FOR UPDATE` (and its tombstone), decide in the
//!   functional core (`row.rs`), and write guarded by the session id.
//! * Operations that add or delete receipts lock the scope's counter row first, so they serialise
//!   per (relay, agent key) and always take locks in the same order (counter, then receipts): no
//!   deadlock between them. A per-turn commit locks only its own row. A serialization failure
//!   or detected deadlock (rolled back by the server, so nothing happened) is retried.
//!
//! # Time bounds
//!
//! The connection lives on a thread of its own, which runs `tokio-postgres` on a private
//! current-thread runtime (the harness's runtime is never entered). A caller sends a job and waits
//! for its answer. Every job runs under a client-side deadline ([`PgOptions::call_timeout`]):
//! when it passes (a frozen or unreachable server, whose kernel may still acknowledge every
//! packet), the connection is dropped, the caller gets [`StoreError::Unavailable`] (a write may or
//! may not have happened), and the next call connects afresh. A job whose caller has already given
//! up is never started. So neither the caller nor the connection thread waits on the server for
//! longer than the deadline. Server-side `statement_timeout` and `lock_timeout` (5 s) bound what
//! the server itself waits for.
//!
//! TLS follows libpq's `sslmode` meanings (see [`crate::pg_tls`]).

use std::collections::HashMap;
use std::fmt;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use tokio::runtime::Runtime;
use tokio::task::JoinHandle;
use tokio_postgres::config::Host;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Config, GenericClient, Statement, Transaction};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::error::StoreError;
use crate::key::{KeyScheme, ScopeKey, StoreScope};
use crate::pg_tls;
use crate::receipt_store::{
    BackendKind, ChannelRemoval, CommitOutcome, Expect, ForgetOutcome, ImportOutcome, PutOutcome,
    ReceiptStore, Removal, StoredReceipt, TurnCommit, UnixMillis, WriteRefusal,
};
use crate::record::SessionRecord;
use crate::row::{self, CommitColumns, CommitPlan, ImportSkip, LedgerColumns, Row, State};
use crate::schema::{self, Access};

/// Advisory lock key that serialises schema creation and migration ("buzzrcpt").
const SCHEMA_LOCK: i64 = 0x6275_7a7a_7263_7074;

/// Connection attempt limit when the URL sets none.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Server-side limits per statement and per lock wait.
const STATEMENT_TIMEOUT_MS: u32 = 5_000;

/// The default client-side deadline of one call (a connect, the statements, one retry).
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The deadline of an import, which may insert many thousands of receipts in one transaction.
const IMPORT_TIMEOUT: Duration = Duration::from_secs(120);

/// How much longer than a job's deadline its caller waits for the answer (the job ends by its
/// deadline; this only covers handing the answer over).
const ANSWER_GRACE: Duration = Duration::from_secs(1);

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

/// Revision 1, additive (see [`crate::schema`]).
const REVISION_1: &str = r#"
ALTER TABLE buzz_receipt_schema ADD COLUMN IF NOT EXISTS revision BIGINT NOT NULL DEFAULT 0;
ALTER TABLE buzz_receipts ADD COLUMN IF NOT EXISTS ext TEXT;
CREATE TABLE IF NOT EXISTS buzz_receipt_forgets (
    scope_id     BIGINT NOT NULL REFERENCES buzz_receipt_scopes (id),
    scope_key    TEXT COLLATE "C" NOT NULL,
    forgotten_ms BIGINT NOT NULL,
    PRIMARY KEY (scope_id, scope_key)
);
UPDATE buzz_receipt_schema SET revision = 1;
"#;

/// One live receipt by key (the columns [`read_row`] reads), at revision 1.
const SELECT_ONE: &str = "SELECT r.scope_key, r.session_id, r.model, r.permission_mode,
         r.requested_model, r.requested_permission_mode, r.standing_context_sent,
         r.delivered_event_ids, r.last_used_ms, r.ext
     FROM buzz_receipts r
     WHERE r.scope_id = $1 AND r.scope_key = $2 AND NOT EXISTS (
         SELECT 1 FROM buzz_receipt_forgets f WHERE f.scope_id = r.scope_id
             AND f.scope_key = r.scope_key AND f.forgotten_ms >= r.last_used_ms)";

/// Every live receipt of a scope, at revision 1.
const SELECT_ALL: &str = "SELECT r.scope_key, r.session_id, r.model, r.permission_mode,
         r.requested_model, r.requested_permission_mode, r.standing_context_sent,
         r.delivered_event_ids, r.last_used_ms, r.ext
     FROM buzz_receipts r
     WHERE r.scope_id = $1 AND NOT EXISTS (
         SELECT 1 FROM buzz_receipt_forgets f WHERE f.scope_id = r.scope_id
             AND f.scope_key = r.scope_key AND f.forgotten_ms >= r.last_used_ms)
     ORDER BY r.scope_key";

/// One receipt by key in a database still at revision 0 (read-only stores only).
const SELECT_ONE_R0: &str = "SELECT scope_key, session_id, model, permission_mode,
         requested_model, requested_permission_mode, standing_context_sent,
         delivered_event_ids, last_used_ms, NULL::text
     FROM buzz_receipts WHERE scope_id = $1 AND scope_key = $2";

/// Every receipt of a scope in a database still at revision 0 (read-only stores only).
const SELECT_ALL_R0: &str = "SELECT scope_key, session_id, model, permission_mode,
         requested_model, requested_permission_mode, standing_context_sent,
         delivered_event_ids, last_used_ms, NULL::text
     FROM buzz_receipts WHERE scope_id = $1 ORDER BY scope_key";

/// Writes one receipt over whatever row its key has.
const UPSERT: &str = "INSERT INTO buzz_receipts (scope_id, scope_key, session_id, model,
         permission_mode, requested_model, requested_permission_mode,
         standing_context_sent, delivered_event_ids, last_used_ms, ext)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
     ON CONFLICT (scope_id, scope_key) DO UPDATE SET
         session_id = excluded.session_id, model = excluded.model,
         permission_mode = excluded.permission_mode,
         requested_model = excluded.requested_model,
         requested_permission_mode = excluded.requested_permission_mode,
         standing_context_sent = excluded.standing_context_sent,
         delivered_event_ids = excluded.delivered_event_ids,
         last_used_ms = excluded.last_used_ms, ext = excluded.ext";

/// Client-side limits of a [`PgStore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PgOptions {
    /// The longest one call waits for the server (connecting included) before it is answered
    /// [`StoreError::Unavailable`] and the connection is dropped.
    pub call_timeout: Duration,
}

impl Default for PgOptions {
    fn default() -> Self {
        Self {
            call_timeout: DEFAULT_CALL_TIMEOUT,
        }
    }
}

/// The body of a job: runs on the connection thread's runtime within the time left.
type Work = Box<dyn FnOnce(&Runtime, &mut Link, Duration) + Send>;

/// A unit of work for the connection thread, with the instant its caller gives up.
struct Job {
    expires: Instant,
    run: Work,
}

/// Receipts of one (relay, agent key) in a PostgreSQL database.
pub struct PgStore {
    /// Server and database without credentials, for logs and errors.
    target: String,
    scope: StoreScope,
    scheme: KeyScheme,
    max_receipts: usize,
    access: Access,
    revision: i64,
    options: PgOptions,
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
            .field("access", &self.access)
            .finish_non_exhaustive()
    }
}

/// What the connection thread learnt at open.
struct Opening {
    revision: i64,
}

impl PgStore {
    /// Connects to the database at `url` (`postgres://…` or `postgresql://…`), creates or
    /// migrates the schema, and registers `scope`, with the default [`PgOptions`].
    ///
    /// # Errors
    /// [`StoreError::Config`] for an unusable URL or TLS setting or a zero cap;
    /// [`StoreError::SchemaTooNew`] for a database of another schema line; otherwise the
    /// connection or SQL failure.
    pub fn open(
        url: &str,
        scope: StoreScope,
        scheme: KeyScheme,
        max_receipts: usize,
    ) -> Result<Self, StoreError> {
        Self::open_with(url, scope, scheme, max_receipts, PgOptions::default())
    }

    /// [`PgStore::open`] with explicit client-side limits.
    ///
    /// # Errors
    /// As [`PgStore::open`].
    pub fn open_with(
        url: &str,
        scope: StoreScope,
        scheme: KeyScheme,
        max_receipts: usize,
        options: PgOptions,
    ) -> Result<Self, StoreError> {
        row::check_cap(max_receipts)?;
        Self::start(url, scope, scheme, max_receipts, Access::ReadWrite, options)
    }

    /// Opens the database read-only: nothing is created, migrated or registered, the session is
    /// `default_transaction_read_only`, and every write answers `NotWritable(ReadOnly)`.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] when the database has no receipt tables; otherwise as
    /// [`PgStore::open`].
    pub fn open_read_only(
        url: &str,
        scope: StoreScope,
        scheme: KeyScheme,
    ) -> Result<Self, StoreError> {
        Self::start(
            url,
            scope,
            scheme,
            usize::MAX,
            Access::ReadOnly,
            PgOptions::default(),
        )
    }

    /// Every store scope registered in the database at `url`, with its receipt count, read-only.
    ///
    /// # Errors
    /// As [`PgStore::open_read_only`].
    pub fn scopes_at(url: &str) -> Result<Vec<(StoreScope, usize)>, StoreError> {
        let probe = StoreScope {
            relay: String::new(),
            agent_pubkey: String::new(),
        };
        let store = Self::start(
            url,
            probe,
            KeyScheme::Scope,
            usize::MAX,
            Access::ReadOnly,
            PgOptions::default(),
        )?;
        store.call(
            "list scopes",
            store.options.call_timeout,
            async |link: &mut Link| {
                link.read("list scopes", async |db| {
                    let rows = db
                        .query(
                            "SELECT relay, agent_pubkey, receipts FROM buzz_receipt_scopes
                         ORDER BY relay, agent_pubkey",
                            &[],
                        )
                        .await?;
                    rows.iter()
                        .map(|r| {
                            let count: i64 = r.try_get(2)?;
                            Ok((
                                StoreScope {
                                    relay: r.try_get(0)?,
                                    agent_pubkey: r.try_get(1)?,
                                },
                                usize::try_from(count).unwrap_or(0),
                            ))
                        })
                        .collect::<Result<Vec<_>, tokio_postgres::Error>>()
                        .map_err(db.error())
                })
                .await
            },
        )
    }

    /// The schema revision of the database (as found or made at open).
    pub fn revision(&self) -> i64 {
        self.revision
    }

    fn start(
        url: &str,
        scope: StoreScope,
        scheme: KeyScheme,
        max_receipts: usize,
        access: Access,
        options: PgOptions,
    ) -> Result<Self, StoreError> {
        let target_spec = pg_tls::parse_url(url)?;
        let tls = pg_tls::connector(&target_spec)?;
        let mut config = target_spec.config;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        if config.get_application_name().is_none() {
            config.application_name("buzz-acp session store");
        }
        let target = describe(&config);
        let unavailable = |reason: String| StoreError::Unavailable {
            target: target.clone(),
            op: "open",
            reason,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| unavailable(format!("cannot start the connection runtime: {e}")))?;
        let (jobs, inbox) = mpsc::channel::<Job>();
        let (ready_tx, ready_rx) = mpsc::sync_channel(1);
        let mut link = Link {
            config,
            tls,
            target: target.clone(),
            conn: None,
            scope_id: None,
            access,
            revision: 0,
        };
        let thread_scope = scope.clone();
        let deadline = options.call_timeout;
        let worker = thread::Builder::new()
            .name("buzz-receipts-pg".into())
            .spawn(move || {
                let ready = runtime.block_on(async {
                    match tokio::time::timeout(deadline, link.initialise(&thread_scope)).await {
                        Ok(answer) => answer,
                        Err(_) => Err(StoreError::Unavailable {
                            target: link.target.clone(),
                            op: "open",
                            reason: format!("no answer within {deadline:?}"),
                        }),
                    }
                });
                let ok = ready.is_ok();
                // The opener may have given up waiting; then there is nobody to serve.
                if ready_tx.send(ready).is_err() || !ok {
                    return;
                }
                for job in inbox {
                    let left = job.expires.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        // Its caller has given up: an operation nobody waits for never starts.
                        continue;
                    }
                    (job.run)(&runtime, &mut link, left);
                }
            })
            .map_err(|source| {
                unavailable(format!("cannot start the connection thread: {source}"))
            })?;
        let opening = match ready_rx.recv_timeout(deadline + ANSWER_GRACE) {
            Ok(Ok(opening)) => opening,
            Ok(Err(e)) => {
                // The thread has returned already.
                let _ = worker.join();
                return Err(e);
            }
            Err(_) => return Err(unavailable(format!("no answer within {deadline:?}"))),
        };
        if access == Access::ReadWrite {
            tracing::info!(target = %target, relay = %scope.relay, scheme = ?scheme, max_receipts, revision = opening.revision, "session store opened (postgres)");
        }
        Ok(Self {
            target,
            scope,
            scheme,
            max_receipts,
            access,
            revision: opening.revision,
            options,
            jobs: Some(jobs),
            worker: Some(worker),
        })
    }

    /// Runs `work` on the connection thread within `deadline` and waits for its answer.
    fn call<T: Send + 'static>(
        &self,
        op: &'static str,
        deadline: Duration,
        work: impl AsyncFnOnce(&mut Link) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let unavailable = |reason: String| StoreError::Unavailable {
            target: self.target.clone(),
            op,
            reason,
        };
        let (answer_tx, answer_rx) = mpsc::sync_channel(1);
        let expires = Instant::now() + deadline;
        let run = Box::new(move |runtime: &Runtime, link: &mut Link, left: Duration| {
            let answer = runtime.block_on(async {
                match tokio::time::timeout(left, work(link)).await {
                    Ok(answer) => answer,
                    Err(_) => {
                        link.reset();
                        Err(StoreError::Unavailable {
                            target: link.target.clone(),
                            op,
                            reason: format!(
                                "no answer within {deadline:?}; the connection was dropped, and a write may or may not have happened"
                            ),
                        })
                    }
                }
            });
            // The caller may have given up; its answer is then dropped.
            let _ = answer_tx.send(answer);
        });
        let jobs = self
            .jobs
            .as_ref()
            .ok_or_else(|| unavailable("the store is closing".into()))?;
        jobs.send(Job { expires, run })
            .map_err(|_| unavailable("the connection thread has stopped".into()))?;
        match answer_rx.recv_timeout(deadline + ANSWER_GRACE) {
            Ok(answer) => answer,
            Err(mpsc::RecvTimeoutError::Timeout) => Err(unavailable(format!(
                "no answer within {deadline:?} (the connection is busy with an earlier call); this call was not started"
            ))),
            Err(mpsc::RecvTimeoutError::Disconnected) => Err(unavailable(
                "no answer: the call was not started before its deadline, or the connection thread stopped".into(),
            )),
        }
    }

    /// A call that writes: `NotWritable(ReadOnly)` (via `refused`) on a read-only store.
    fn write_call<T: Send + 'static>(
        &self,
        op: &'static str,
        refused: T,
        work: impl AsyncFnOnce(&mut Link) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        match self.access {
            Access::ReadOnly => Ok(refused),
            Access::ReadWrite => self.call(op, self.options.call_timeout, work),
        }
    }
}

impl Drop for PgStore {
    fn drop(&mut self) {
        // Closing the job channel ends the thread after the job in progress (bounded by its
        // deadline); joining closes the connection cleanly.
        self.jobs = None;
        if let Some(worker) = self.worker.take()
            && worker.join().is_err()
        {
            tracing::warn!(target = %self.target, "session store: the PostgreSQL connection thread panicked");
        }
    }
}

/// A live connection: the client, the task driving its socket, and its prepared statements.
struct Conn {
    client: Client,
    task: JoinHandle<()>,
    statements: HashMap<&'static str, Statement>,
}

impl Drop for Conn {
    fn drop(&mut self) {
        // Closes the socket even when the server never answers.
        self.task.abort();
    }
}

/// The connection thread's state.
struct Link {
    config: Config,
    tls: MakeRustlsConnect,
    target: String,
    /// `None` until connected, and again after the connection is lost or dropped.
    conn: Option<Conn>,
    /// `buzz_receipt_scopes.id` of the store's scope (`None`: a read-only store whose scope has
    /// never written).
    scope_id: Option<i64>,
    access: Access,
    revision: i64,
}

/// One query context: a client or a transaction, with the statement cache.
struct Db<'a, C: GenericClient> {
    client: &'a C,
    statements: &'a mut HashMap<&'static str, Statement>,
    target: &'a str,
    op: &'static str,
    scope_id: Option<i64>,
}

impl Link {
    /// Drops the connection (a timed-out call): its socket is closed, the next call reconnects.
    fn reset(&mut self) {
        self.conn = None;
    }

    /// The live client, connecting (again) if needed.
    async fn connect(&mut self, op: &'static str) -> Result<&mut Conn, StoreError> {
        if self.conn.as_ref().is_some_and(|c| c.client.is_closed()) {
            self.conn = None;
        }
        if self.conn.is_none() {
            let (client, connection) = self
                .config
                .connect(self.tls.clone())
                .await
                .map_err(pg_err(&self.target, op))?;
            let target = self.target.clone();
            let task = tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(target = %target, error = %e, "session store: PostgreSQL connection ended");
                }
            });
            let read_only = match self.access {
                Access::ReadOnly => "SET default_transaction_read_only = on;",
                Access::ReadWrite => "",
            };
            client
                .batch_execute(&format!(
                    "SET statement_timeout = {STATEMENT_TIMEOUT_MS}; \
                     SET lock_timeout = {STATEMENT_TIMEOUT_MS}; \
                     SET idle_in_transaction_session_timeout = {}; {read_only}",
                    STATEMENT_TIMEOUT_MS * 2
                ))
                .await
                .map_err(pg_err(&self.target, op))?;
            self.conn = Some(Conn {
                client,
                task,
                statements: HashMap::new(),
            });
        }
        self.conn.as_mut().ok_or_else(|| StoreError::Unavailable {
            target: self.target.clone(),
            op,
            reason: "not connected".into(),
        })
    }

    /// Connects, creates or checks the schema, and registers the scope (read-write), or looks
    /// the scope up (read-only).
    async fn initialise(&mut self, scope: &StoreScope) -> Result<Opening, StoreError> {
        let target = self.target.clone();
        let revision = match self.access {
            Access::ReadWrite => {
                self.write("open", async |db| migrate_schema(db, &target).await)
                    .await?
            }
            Access::ReadOnly => {
                self.read("open", async |db| read_schema(db, &target).await)
                    .await?
            }
        };
        self.revision = revision;
        let relay = scope.relay.clone();
        let agent = scope.agent_pubkey.clone();
        self.scope_id = match self.access {
            Access::ReadWrite => Some(
                self.write("open", async |db| {
                    db.execute(
                        "INSERT INTO buzz_receipt_scopes (relay, agent_pubkey) VALUES ($1, $2)
                         ON CONFLICT (relay, agent_pubkey) DO NOTHING",
                        &[&relay, &agent],
                    )
                    .await?;
                    let row = db
                        .query_one(
                            "SELECT id FROM buzz_receipt_scopes WHERE relay = $1 AND agent_pubkey = $2",
                            &[&relay, &agent],
                        )
                        .await?;
                    row.try_get(0).map_err(db.error())
                })
                .await?,
            ),
            Access::ReadOnly => {
                self.read("open", async |db| {
                    let row = db
                        .query_opt(
                            "SELECT id FROM buzz_receipt_scopes WHERE relay = $1 AND agent_pubkey = $2",
                            &[&relay, &agent],
                        )
                        .await?;
                    row.map(|r| r.try_get(0)).transpose().map_err(db.error())
                })
                .await?
            }
        };
        Ok(Opening { revision })
    }

    /// Runs `body` in a transaction and commits it, retrying what the server rolled back as a
    /// serialization failure or deadlock.
    async fn write<T>(
        &mut self,
        op: &'static str,
        mut body: impl AsyncFnMut(&mut Db<'_, Transaction<'_>>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let mut attempt = 1;
        loop {
            let scope_id = self.scope_id;
            let target = self.target.clone();
            let conn = self.connect(op).await?;
            let tx = conn
                .client
                .transaction()
                .await
                .map_err(pg_err(&target, op))?;
            let mut db = Db {
                client: &tx,
                statements: &mut conn.statements,
                target: &target,
                op,
                scope_id,
            };
            let result = body(&mut db).await;
            let result = match result {
                Ok(out) => tx.commit().await.map(|()| out).map_err(pg_err(&target, op)),
                Err(e) => Err(e),
            };
            match result {
                Err(StoreError::Postgres { ref source, .. })
                    if is_retryable(source) && attempt < MAX_ATTEMPTS =>
                {
                    tracing::debug!(target = %target, op, attempt, error = %source, "session store: retrying a rolled-back transaction");
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// Runs a read outside a transaction.
    async fn read<T>(
        &mut self,
        op: &'static str,
        body: impl AsyncFnOnce(&mut Db<'_, Client>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let scope_id = self.scope_id;
        let target = self.target.clone();
        let conn = self.connect(op).await?;
        let mut db = Db {
            client: &conn.client,
            statements: &mut conn.statements,
            target: &target,
            op,
            scope_id,
        };
        body(&mut db).await
    }
}

impl<C: GenericClient + Sync> Db<'_, C> {
    fn error(&self) -> impl Fn(tokio_postgres::Error) -> StoreError + use<'_, C> {
        pg_err(self.target, self.op)
    }

    /// The scope id of a registered scope (every writer's, and a reader's that found one).
    fn scope(&self) -> Result<i64, StoreError> {
        self.scope_id.ok_or_else(|| StoreError::Unavailable {
            target: self.target.to_owned(),
            op: self.op,
            reason: "the store scope is not registered".into(),
        })
    }

    async fn statement(&mut self, sql: &'static str) -> Result<Statement, StoreError> {
        if let Some(statement) = self.statements.get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare(sql).await.map_err(self.error())?;
        self.statements.insert(sql, statement.clone());
        Ok(statement)
    }

    async fn execute(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, StoreError> {
        let statement = self.statement(sql).await?;
        self.client
            .execute(&statement, params)
            .await
            .map_err(self.error())
    }

    async fn query(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, StoreError> {
        let statement = self.statement(sql).await?;
        self.client
            .query(&statement, params)
            .await
            .map_err(self.error())
    }

    async fn query_opt(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<tokio_postgres::Row>, StoreError> {
        let statement = self.statement(sql).await?;
        self.client
            .query_opt(&statement, params)
            .await
            .map_err(self.error())
    }

    async fn query_one(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<tokio_postgres::Row, StoreError> {
        let statement = self.statement(sql).await?;
        self.client
            .query_one(&statement, params)
            .await
            .map_err(self.error())
    }

    /// Locks the scope's counter row (first lock of every add/delete) and returns the count.
    async fn lock_count(&mut self) -> Result<i64, StoreError> {
        let scope_id = self.scope()?;
        let row = self
            .query_one(
                "SELECT receipts FROM buzz_receipt_scopes WHERE id = $1 FOR UPDATE",
                &[&scope_id],
            )
            .await?;
        row.try_get(0).map_err(self.error())
    }

    async fn set_count(&mut self, count: i64) -> Result<(), StoreError> {
        let scope_id = self.scope()?;
        self.execute(
            "UPDATE buzz_receipt_scopes SET receipts = $2 WHERE id = $1",
            &[&scope_id, &count],
        )
        .await?;
        Ok(())
    }

    /// Evicts least recently used receipts (never `keep`) so that `count` fits the cap; the
    /// counter row must be locked. Returns how many were removed.
    async fn evict(&mut self, count: i64, cap: usize, keep: &str) -> Result<i64, StoreError> {
        let Some(excess) = row::excess_over_cap(count, cap) else {
            return Ok(0);
        };
        let scope_id = self.scope()?;
        let evicted = self
            .execute(
                "DELETE FROM buzz_receipts WHERE scope_id = $1 AND scope_key IN (
                     SELECT scope_key FROM buzz_receipts
                     WHERE scope_id = $1 AND scope_key <> $2
                     ORDER BY last_used_ms, scope_key LIMIT $3)",
                &[&scope_id, &keep, &excess],
            )
            .await?;
        Ok(i64::try_from(evicted).unwrap_or(i64::MAX))
    }

    /// What is stored under `storage_key`, its receipt row locked for the transaction.
    async fn current(&mut self, storage_key: &str) -> Result<Current, StoreError> {
        let scope_id = self.scope()?;
        let receipt = self
            .query_opt(
                "SELECT session_id, last_used_ms, standing_context_sent, delivered_event_ids, ext
                 FROM buzz_receipts WHERE scope_id = $1 AND scope_key = $2 FOR UPDATE",
                &[&scope_id, &storage_key],
            )
            .await?;
        let forgotten: Option<i64> = self
            .query_opt(
                "SELECT forgotten_ms FROM buzz_receipt_forgets WHERE scope_id = $1 AND scope_key = $2",
                &[&scope_id, &storage_key],
            )
            .await?
            .map(|r| r.try_get(0))
            .transpose()
            .map_err(self.error())?;
        let receipt = receipt
            .map(|r| {
                let columns = CommitColumns {
                    ledger: LedgerColumns {
                        standing_context_sent: r.try_get(2)?,
                        delivered_event_ids: r.try_get(3)?,
                    },
                    ext: r.try_get(4)?,
                };
                Ok::<_, tokio_postgres::Error>((
                    r.try_get::<_, String>(0)?,
                    r.try_get::<_, i64>(1)?,
                    columns,
                ))
            })
            .transpose()
            .map_err(self.error())?;
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

    /// Writes `row` over whatever row its key has and drops the key's tombstone.
    async fn upsert(&mut self, row: &Row) -> Result<(), StoreError> {
        let scope_id = self.scope()?;
        self.execute(
            UPSERT,
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
                &row.ext,
            ],
        )
        .await?;
        self.execute(
            "DELETE FROM buzz_receipt_forgets WHERE scope_id = $1 AND scope_key = $2",
            &[&scope_id, &row.scope_key],
        )
        .await?;
        Ok(())
    }

    async fn delete_row(&mut self, storage_key: &str) -> Result<u64, StoreError> {
        let scope_id = self.scope()?;
        self.execute(
            "DELETE FROM buzz_receipts WHERE scope_id = $1 AND scope_key = $2",
            &[&scope_id, &storage_key],
        )
        .await
    }

    async fn tombstone(&mut self, storage_key: &str, now: UnixMillis) -> Result<(), StoreError> {
        let scope_id = self.scope()?;
        let now = now.to_sql();
        self.execute(
            "INSERT INTO buzz_receipt_forgets (scope_id, scope_key, forgotten_ms) VALUES ($1, $2, $3)
             ON CONFLICT (scope_id, scope_key) DO UPDATE
             SET forgotten_ms = GREATEST(buzz_receipt_forgets.forgotten_ms, excluded.forgotten_ms)",
            &[&scope_id, &storage_key, &now],
        )
        .await?;
        Ok(())
    }
}

/// What is stored under one key, read inside a write transaction.
struct Current {
    row_exists: bool,
    state: State,
    columns: Option<CommitColumns>,
}

/// Creates or checks the schema line and brings the revision up to this build's. Runs in the
/// transaction that holds the schema advisory lock.
async fn migrate_schema(db: &mut Db<'_, Transaction<'_>>, target: &str) -> Result<i64, StoreError> {
    db.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
        .await?;
    db.client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS buzz_receipt_schema (
                 singleton BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (singleton),
                 version   BIGINT  NOT NULL)",
        )
        .await
        .map_err(db.error())?;
    let version: Option<i64> = db
        .query_opt("SELECT version FROM buzz_receipt_schema", &[])
        .await?
        .map(|r| r.try_get(0))
        .transpose()
        .map_err(db.error())?;
    match version {
        None => {
            db.client
                .batch_execute(SCHEMA_V1)
                .await
                .map_err(db.error())?;
            db.execute(
                "INSERT INTO buzz_receipt_schema (version) VALUES ($1)",
                &[&schema::LINE],
            )
            .await?;
            tracing::info!(target = %target, version = schema::LINE, "session store: created the database schema");
        }
        Some(schema::LINE) => {}
        Some(found) => {
            return Err(StoreError::SchemaTooNew {
                location: target.to_owned(),
                found,
                supported: schema::LINE,
            });
        }
    }
    let revision = revision_of(db).await?;
    if revision < schema::REVISION {
        db.client
            .batch_execute(REVISION_1)
            .await
            .map_err(db.error())?;
        tracing::info!(target = %target, revision = schema::REVISION, "session store: applied an additive schema revision");
        return Ok(schema::REVISION);
    }
    Ok(revision)
}

/// The schema revision of an existing database, checked for a compatible line (read-only).
async fn read_schema(db: &mut Db<'_, Client>, target: &str) -> Result<i64, StoreError> {
    let exists: bool = db
        .query_one("SELECT to_regclass('buzz_receipt_schema') IS NOT NULL", &[])
        .await?
        .try_get(0)
        .map_err(db.error())?;
    if !exists {
        return Err(StoreError::NotFound {
            location: format!("{target} (no receipt tables in this database and search path)"),
        });
    }
    let version: i64 = db
        .query_one("SELECT version FROM buzz_receipt_schema", &[])
        .await?
        .try_get(0)
        .map_err(db.error())?;
    if version != schema::LINE {
        return Err(StoreError::SchemaTooNew {
            location: target.to_owned(),
            found: version,
            supported: schema::LINE,
        });
    }
    revision_of(db).await
}

/// The recorded revision; 0 for a database that predates revisions.
async fn revision_of<C: GenericClient + Sync>(db: &mut Db<'_, C>) -> Result<i64, StoreError> {
    let has_column: bool = db
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM information_schema.columns
                 WHERE table_schema = current_schema() AND table_name = 'buzz_receipt_schema'
                   AND column_name = 'revision')",
            &[],
        )
        .await?
        .try_get(0)
        .map_err(db.error())?;
    if !has_column {
        return Ok(0);
    }
    db.query_one("SELECT revision FROM buzz_receipt_schema", &[])
        .await?
        .try_get(0)
        .map_err(db.error())
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
        let sql = if self.revision >= 1 {
            SELECT_ONE
        } else {
            SELECT_ONE_R0
        };
        let row = self.call(
            "get",
            self.options.call_timeout,
            async move |link: &mut Link| {
                link.read("get", async |db| {
                    let Some(scope_id) = db.scope_id else {
                        return Ok(None);
                    };
                    let row = db.query_opt(sql, &[&scope_id, &storage_key]).await?;
                    row.map(|r| read_row(&r).map_err(db.error())).transpose()
                })
                .await
            },
        )?;
        row.map(|row| row.into_receipt().map(|r| r.record))
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
        let cap = self.max_receipts;
        let expect = expect.clone();
        self.write_call(
            "put",
            PutOutcome::NotWritable(WriteRefusal::ReadOnly),
            async move |link: &mut Link| {
                link.write("put", async |db| {
                    let count = db.lock_count().await?;
                    let current = db.current(&row.scope_key).await?;
                    if let Err(refusal) = row::admit(&current.state, &expect, now) {
                        return Ok(row::put_refused(refusal));
                    }
                    db.upsert(&row).await?;
                    let created = !current.state.is_live();
                    if current.row_exists {
                        return Ok(PutOutcome::Written {
                            created,
                            evicted: 0,
                        });
                    }
                    let evicted = db.evict(count + 1, cap, &row.scope_key).await?;
                    db.set_count(count + 1 - evicted).await?;
                    Ok(PutOutcome::Written {
                        created,
                        evicted: usize::try_from(evicted).unwrap_or(0),
                    })
                })
                .await
            },
        )
    }

    fn commit_turn(
        &self,
        key: &ScopeKey,
        commit: &TurnCommit,
        now: UnixMillis,
    ) -> Result<CommitOutcome, StoreError> {
        let storage_key = self.scheme.map(key).to_storage_key();
        let commit = commit.clone();
        self.write_call(
            "commit_turn",
            CommitOutcome::NotWritable(WriteRefusal::ReadOnly),
            async move |link: &mut Link| {
                link.write("commit_turn", async |db| {
                    let current = db.current(&storage_key).await?;
                    let plan = row::plan_commit(
                        &storage_key,
                        &current.state,
                        current.columns,
                        &commit,
                        now,
                    )?;
                    let scope_id = db.scope()?;
                    let now = now.to_sql();
                    let updated = match plan {
                        CommitPlan::Refuse(answer) => return Ok(answer),
                        CommitPlan::Unchanged => {
                            let n = db
                                .execute(
                                    "UPDATE buzz_receipts SET last_used_ms = $4
                                     WHERE scope_id = $1 AND scope_key = $2 AND session_id = $3",
                                    &[&scope_id, &storage_key, &commit.session_id, &now],
                                )
                                .await?;
                            (CommitOutcome::Unchanged, n)
                        }
                        CommitPlan::Write(c) => {
                            let n = db
                                .execute(
                                    "UPDATE buzz_receipts SET standing_context_sent = $4,
                                         delivered_event_ids = $5, ext = $6, last_used_ms = $7
                                     WHERE scope_id = $1 AND scope_key = $2 AND session_id = $3",
                                    &[
                                        &scope_id,
                                        &storage_key,
                                        &commit.session_id,
                                        &c.ledger.standing_context_sent,
                                        &c.ledger.delivered_event_ids,
                                        &c.ext,
                                        &now,
                                    ],
                                )
                                .await?;
                            (CommitOutcome::Written, n)
                        }
                    };
                    // The row is locked since the read, so the guarded UPDATE matches it.
                    Ok(match updated {
                        (outcome, 1) => outcome,
                        _ => CommitOutcome::Conflict { stored: None },
                    })
                })
                .await
            },
        )
    }

    fn remove(&self, key: &ScopeKey, expect: &Expect) -> Result<Removal, StoreError> {
        let storage_key = self.scheme.map(key).to_storage_key();
        let expect = expect.clone();
        self.write_call(
            "remove",
            Removal::NotWritable(WriteRefusal::ReadOnly),
            async move |link: &mut Link| {
                link.write("remove", async |db| {
                    let count = db.lock_count().await?;
                    let current = db.current(&storage_key).await?;
                    let session_id = match row::plan_removal(current.state, &expect) {
                        Ok(session_id) => session_id,
                        Err(answer) => return Ok(answer),
                    };
                    let deleted = db.delete_row(&storage_key).await?;
                    db.set_count(count - i64::try_from(deleted).unwrap_or(0))
                        .await?;
                    Ok(Removal::Removed { session_id })
                })
                .await
            },
        )
    }

    fn remove_channel(
        &self,
        channel_id: &str,
        now: UnixMillis,
    ) -> Result<ChannelRemoval, StoreError> {
        let (exact, lower, upper) = row::channel_key_range(channel_id);
        self.write_call(
            "remove_channel",
            ChannelRemoval::NotWritable(WriteRefusal::ReadOnly),
            async move |link: &mut Link| {
                link.write("remove_channel", async |db| {
                    let count = db.lock_count().await?;
                    let scope_id = db.scope()?;
                    let now = now.to_sql();
                    db.execute(
                        "INSERT INTO buzz_receipt_forgets (scope_id, scope_key, forgotten_ms)
                         SELECT scope_id, scope_key, $5 FROM buzz_receipts WHERE scope_id = $1
                             AND (scope_key = $2 OR (scope_key >= $3 AND scope_key < $4))
                         ON CONFLICT (scope_id, scope_key) DO UPDATE SET forgotten_ms =
                             GREATEST(buzz_receipt_forgets.forgotten_ms, excluded.forgotten_ms)",
                        &[&scope_id, &exact, &lower, &upper, &now],
                    )
                    .await?;
                    let removed = db
                        .execute(
                            "DELETE FROM buzz_receipts WHERE scope_id = $1
                             AND (scope_key = $2 OR (scope_key >= $3 AND scope_key < $4))",
                            &[&scope_id, &exact, &lower, &upper],
                        )
                        .await?;
                    if removed > 0 {
                        db.set_count(count - i64::try_from(removed).unwrap_or(i64::MAX))
                            .await?;
                    }
                    Ok(ChannelRemoval::Removed(
                        usize::try_from(removed).unwrap_or(usize::MAX),
                    ))
                })
                .await
            },
        )
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
        let expect = expect.clone();
        self.write_call(
            "forget",
            ForgetOutcome::NotWritable(WriteRefusal::ReadOnly),
            async move |link: &mut Link| {
                link.write("forget", async |db| {
                    let count = db.lock_count().await?;
                    let current = db.current(&storage_key).await?;
                    let session_id = match row::plan_forget(current.state, &expect) {
                        Ok(session_id) => session_id,
                        Err(answer) => return Ok(answer),
                    };
                    if current.row_exists {
                        let deleted = db.delete_row(&storage_key).await?;
                        db.set_count(count - i64::try_from(deleted).unwrap_or(0))
                            .await?;
                    }
                    db.tombstone(&storage_key, now).await?;
                    let scope_id = db.scope()?;
                    let before = row::tombstone_purge_before(now);
                    db.execute(
                        "DELETE FROM buzz_receipt_forgets WHERE scope_id = $1 AND forgotten_ms < $2",
                        &[&scope_id, &before],
                    )
                    .await?;
                    Ok(ForgetOutcome::Forgotten { session_id })
                })
                .await
            },
        )
    }

    fn import(&self, receipts: &[StoredReceipt]) -> Result<ImportOutcome, StoreError> {
        let rows = row::import_rows(self.scheme, receipts)?;
        let cap = self.max_receipts;
        if self.access == Access::ReadOnly {
            return Ok(ImportOutcome::NotWritable(WriteRefusal::ReadOnly));
        }
        self.call("import", IMPORT_TIMEOUT, async move |link: &mut Link| {
            link.write("import", async |db| import_rows(db, &rows, cap).await)
                .await
        })
    }

    fn receipts(&self) -> Result<Vec<StoredReceipt>, StoreError> {
        let sql = if self.revision >= 1 {
            SELECT_ALL
        } else {
            SELECT_ALL_R0
        };
        let rows = self.call("list", IMPORT_TIMEOUT, async move |link: &mut Link| {
            link.read("list", async |db| {
                let Some(scope_id) = db.scope_id else {
                    return Ok(Vec::new());
                };
                let rows = db.query(sql, &[&scope_id]).await?;
                rows.iter()
                    .map(|r| read_row(r).map_err(db.error()))
                    .collect::<Result<Vec<_>, _>>()
            })
            .await
        })?;
        rows.into_iter().map(Row::into_receipt).collect()
    }

    fn len(&self) -> Result<usize, StoreError> {
        let count: i64 = self.call(
            "count receipts",
            self.options.call_timeout,
            async |link: &mut Link| {
                link.read("count receipts", async |db| {
                    let Some(scope_id) = db.scope_id else {
                        return Ok(0);
                    };
                    let row = db
                        .query_one(
                            "SELECT receipts FROM buzz_receipt_scopes WHERE id = $1",
                            &[&scope_id],
                        )
                        .await?;
                    row.try_get(0).map_err(db.error())
                })
                .await
            },
        )?;
        Ok(usize::try_from(count).unwrap_or(0))
    }

    fn storage_bytes(&self) -> Result<u64, StoreError> {
        let bytes: i64 = self.call("size", self.options.call_timeout, async |link: &mut Link| {
            link.read("size", async |db| {
                let row = db
                    .query_one(
                        "SELECT (pg_total_relation_size('buzz_receipts')
                               + pg_total_relation_size('buzz_receipt_scopes')
                               + COALESCE(pg_total_relation_size(to_regclass('buzz_receipt_forgets')), 0))::int8",
                        &[],
                    )
                    .await?;
                row.try_get(0).map_err(db.error())
            })
            .await
        })?;
        Ok(u64::try_from(bytes).unwrap_or(0))
    }
}

/// The import, in batches: what is stored under the batch's keys is read (receipt rows locked),
/// the functional core decides per row, and the chosen rows are written in one statement.
async fn import_rows(
    db: &mut Db<'_, Transaction<'_>>,
    rows: &[Row],
    cap: usize,
) -> Result<ImportOutcome, StoreError> {
    let count = db.lock_count().await?;
    let scope_id = db.scope()?;
    let mut inserted = 0usize;
    let mut new_rows = 0i64;
    let mut kept_existing = 0usize;
    let mut forgotten = 0usize;
    for batch in rows.chunks(IMPORT_BATCH) {
        let keys: Vec<&str> = batch.iter().map(|r| r.scope_key.as_str()).collect();
        let stored = db
            .query(
                "SELECT scope_key, session_id, last_used_ms FROM buzz_receipts
                 WHERE scope_id = $1 AND scope_key = ANY($2) FOR UPDATE",
                &[&scope_id, &keys],
            )
            .await?;
        let mut receipts: HashMap<String, (String, i64)> = HashMap::new();
        for r in &stored {
            let key: String = r.try_get(0).map_err(db.error())?;
            let identity = (
                r.try_get(1).map_err(db.error())?,
                r.try_get(2).map_err(db.error())?,
            );
            receipts.insert(key, identity);
        }
        let tombstones = db
            .query(
                "SELECT scope_key, forgotten_ms FROM buzz_receipt_forgets
                 WHERE scope_id = $1 AND scope_key = ANY($2)",
                &[&scope_id, &keys],
            )
            .await?;
        let mut forgets: HashMap<String, i64> = HashMap::new();
        for r in &tombstones {
            forgets.insert(
                r.try_get(0).map_err(db.error())?,
                r.try_get(1).map_err(db.error())?,
            );
        }
        let mut chosen = Vec::new();
        for row in batch {
            let receipt = receipts.get(&row.scope_key).cloned();
            let row_exists = receipt.is_some();
            let state = State::of(receipt, forgets.get(&row.scope_key).copied());
            match row::plan_import(row, &state) {
                Ok(()) => {
                    if !row_exists {
                        new_rows += 1;
                    }
                    chosen.push(row);
                }
                Err(ImportSkip::Existing) => kept_existing += 1,
                Err(ImportSkip::Forgotten) => forgotten += 1,
            }
        }
        if chosen.is_empty() {
            continue;
        }
        let column = |f: fn(&Row) -> Option<String>| -> Vec<Option<String>> {
            chosen.iter().map(|r| f(r)).collect()
        };
        let keys = column(|r| Some(r.scope_key.clone()));
        let sessions = column(|r| Some(r.session_id.clone()));
        let models = column(|r| r.model.clone());
        let modes = column(|r| r.permission_mode.clone());
        let requested_models = column(|r| r.requested_model.clone());
        let requested_modes = column(|r| r.requested_permission_mode.clone());
        let ledgers = column(|r| r.delivered_event_ids.clone());
        let exts = column(|r| r.ext.clone());
        let standing: Vec<bool> = chosen.iter().map(|r| r.standing_context_sent).collect();
        let used: Vec<i64> = chosen.iter().map(|r| r.last_used_ms).collect();
        db.execute(
            "INSERT INTO buzz_receipts (scope_id, scope_key, session_id, model,
                 permission_mode, requested_model, requested_permission_mode,
                 standing_context_sent, delivered_event_ids, last_used_ms, ext)
             SELECT $1, * FROM unnest($2::text[], $3::text[], $4::text[], $5::text[],
                 $6::text[], $7::text[], $8::bool[], $9::text[], $10::int8[], $11::text[])
             ON CONFLICT (scope_id, scope_key) DO UPDATE SET
                 session_id = excluded.session_id, model = excluded.model,
                 permission_mode = excluded.permission_mode,
                 requested_model = excluded.requested_model,
                 requested_permission_mode = excluded.requested_permission_mode,
                 standing_context_sent = excluded.standing_context_sent,
                 delivered_event_ids = excluded.delivered_event_ids,
                 last_used_ms = excluded.last_used_ms, ext = excluded.ext",
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
                &exts,
            ],
        )
        .await?;
        db.execute(
            "DELETE FROM buzz_receipt_forgets WHERE scope_id = $1 AND scope_key = ANY($2)",
            &[&scope_id, &keys],
        )
        .await?;
        inserted += chosen.len();
    }
    let evicted = db.evict(count + new_rows, cap, "").await?;
    db.set_count(count + new_rows - evicted).await?;
    Ok(ImportOutcome::Imported {
        inserted,
        kept_existing,
        forgotten,
        evicted: usize::try_from(evicted).unwrap_or(0),
    })
}

fn read_row(r: &tokio_postgres::Row) -> Result<Row, tokio_postgres::Error> {
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
        ext: r.try_get(9)?,
    })
}

/// Maps a PostgreSQL error of `op` on `target` (built in one place so every error names the
/// server and the operation the same way).
fn pg_err<'a>(
    target: &'a str,
    op: &'static str,
) -> impl Fn(tokio_postgres::Error) -> StoreError + 'a {
    move |source| StoreError::Postgres {
        target: target.to_owned(),
        op,
        source,
    }
}

/// Whether the server rolled the transaction back in a way that is safe to retry.
fn is_retryable(e: &tokio_postgres::Error) -> bool {
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
