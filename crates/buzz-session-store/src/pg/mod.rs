//! The shared backend: receipts in PostgreSQL, so harnesses on several machines (replicas, or a
//! pod rescheduled to another node) see the same receipts.
//!
//! Same tables as the SQLite backend (`buzz_receipt_scopes`, `buzz_receipts`,
//! `buzz_receipt_forgets`) plus `buzz_receipt_schema` (the schema line and revision, see
//! [`crate::schema`]), created or migrated at open under an advisory lock so that harnesses
//! starting together do not race. Every operation is a short transaction on single rows.
//!
//! * Conditional writes read the key's receipt row `FOR UPDATE` (and its tombstone), decide in the
//!   functional core (`row.rs`), and write guarded by the session id.
//! * With a [`Fence`] ([`PgOptions::fence`]), every write transaction first reads the agent's
//!   lease row `FOR SHARE` and goes on only while it names the fence's token and has not expired
//!   by the database's clock ([`StoreError::Fenced`] otherwise): a harness that lost its lease
//!   writes nothing, and a takeover (an `UPDATE` of that row) waits for writes in flight.
//! * The watermark is a column of the scope's row (`watermark_s`, schema revision 2): an advance
//!   is one `UPDATE … GREATEST(…) RETURNING`, so concurrent advances keep the largest.
//! * Operations that add or delete receipts lock the scope's counter row first, so they serialise
//!   per (relay, agent key) and always take locks in the same order (counter, then receipts): no
//!   deadlock between them. A per-turn commit locks only its own row. A serialization failure
//!   or detected deadlock (rolled back by the server, so nothing happened) is retried.
//!
//! # Time bounds
//!
//! Every call runs under a client-side deadline ([`PgOptions::call_timeout`]; an import 120 s).
//! When it passes (a frozen or unreachable server, whose kernel may still acknowledge every
//! packet), the connection is dropped, the caller gets [`StoreError::Unavailable`] (a write may
//! or may not have happened), and the next call connects afresh. A call whose caller has already
//! given up is never started. The caller's async runtime is never entered: the connection lives
//! on a thread of the store's own, which runs `tokio-postgres` on a private runtime. Server-side
//! `statement_timeout` and `lock_timeout` (5 s) bound what the server itself waits for.
//!
//! TLS follows libpq's `sslmode` meanings (see [`crate::pg_tls`]).
//!
//! # Layout
//!
//! | file | concept |
//! |---|---|
//! | `mod.rs` | [`PgStore`] and [`PgOptions`]: opening, and each [`ReceiptStore`] operation as the statements it runs |
//! | `connection.rs` | the connection thread: jobs and their deadlines, (re)connecting, transactions and their retry |
//! | `schema.rs` | what an open does in the database: the schema created, checked or migrated, the scope registered |
//! | `sql.rs` | one query context (`sql::Db`): prepared statements, the row-level helpers, rows mapped to `Row` |
//! | `lease.rs` | the agent's lease across machines: acquire, renew, release, by the database's clock |
//! | `import.rs` | the bulk import: batched reads, the core's decisions, one `unnest` insert per batch |
//!
//! A `ReceiptStore` method sends the connection thread a job (an async closure over the
//! connection's state, `connection::Link`); the job asks for a read (`Link::read`) or a
//! transaction (`Link::write`) and gets a `sql::Db` to run its statements through.

mod connection;
mod import;
mod lease;
mod schema;
mod sql;

pub use lease::LeaseAnswer;

use std::fmt;
use std::time::Duration;

use crate::error::StoreError;
use crate::fence::Fence;
use crate::key::{KeyScheme, ScopeKey, StoreScope};
use crate::receipt_store::{
    BackendKind, ChannelRemoval, CommitOutcome, Expect, ForgetOutcome, ImportOutcome, PutOutcome,
    ReceiptStore, Removal, StoredReceipt, TurnCommit, UnixMillis, WatermarkOutcome, WriteRefusal,
};
use crate::record::SessionRecord;
use crate::row::{self, CommitPlan, Row};
use crate::schema::{Access, LEASE_REVISION, WATERMARK_REVISION};

use connection::{Connection, Link};
use import::import_rows;
use sql::{SELECT_ALL, SELECT_ALL_R0, SELECT_ONE, SELECT_ONE_R0, read_row};

/// The default client-side deadline of one call (a connect, the statements, one retry).
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The deadline of an import, which may insert many thousands of receipts in one transaction.
const IMPORT_TIMEOUT: Duration = Duration::from_secs(120);

/// Client-side limits of a [`PgStore`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgOptions {
    /// The longest one call waits for the server (connecting included) before it is answered
    /// [`StoreError::Unavailable`] and the connection is dropped.
    pub call_timeout: Duration,
    /// The lease token every write must carry (see [`crate::fence`]); `None`: writes are not
    /// fenced (one harness per database, an operator's tool).
    pub fence: Option<Fence>,
}

impl Default for PgOptions {
    fn default() -> Self {
        Self {
            call_timeout: DEFAULT_CALL_TIMEOUT,
            fence: None,
        }
    }
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
    /// The connection thread.
    connection: Connection,
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

impl PgStore {
    /// Starts the connection thread and opens the store within one call deadline.
    fn start(
        url: &str,
        scope: StoreScope,
        scheme: KeyScheme,
        max_receipts: usize,
        access: Access,
        options: PgOptions,
    ) -> Result<Self, StoreError> {
        let opened = Connection::start(
            url,
            &scope,
            access,
            options.call_timeout,
            options.fence.clone(),
        )?;
        if access == Access::ReadWrite {
            tracing::info!(target = %opened.target, relay = %scope.relay, scheme = ?scheme, max_receipts, revision = opened.revision, "session store opened (postgres)");
        }
        Ok(Self {
            target: opened.target,
            scope,
            scheme,
            max_receipts,
            access,
            revision: opened.revision,
            options,
            connection: opened.connection,
        })
    }

    /// Runs `work` on the connection thread within `deadline` and waits for its answer.
    fn call<T: Send + 'static>(
        &self,
        op: &'static str,
        deadline: Duration,
        work: impl AsyncFnOnce(&mut Link) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.connection.call(op, deadline, work)
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
}

impl PgStore {
    /// Asks for the agent's lease across machines for `holder`, for `lifetime` from the
    /// database's now (see `lease.rs`).
    ///
    /// # Errors
    /// As any write; [`StoreError::Config`] on a read-only store or a database without the lease
    /// table (revision 3).
    pub fn acquire_lease(
        &self,
        holder: &str,
        lifetime: Duration,
    ) -> Result<LeaseAnswer, StoreError> {
        self.lease_call("acquire lease", holder, None, lifetime)
    }

    /// Extends `holder`'s lease with `token` for `lifetime` from the database's now.
    ///
    /// # Errors
    /// As [`PgStore::acquire_lease`].
    pub fn renew_lease(
        &self,
        holder: &str,
        token: u64,
        lifetime: Duration,
    ) -> Result<LeaseAnswer, StoreError> {
        self.lease_call("renew lease", holder, Some(token), lifetime)
    }

    /// Ends `holder`'s lease with `token` now; `false` when it was not theirs any more.
    ///
    /// # Errors
    /// As [`PgStore::acquire_lease`].
    pub fn release_lease(&self, holder: &str, token: u64) -> Result<bool, StoreError> {
        self.check_lease_table("release lease")?;
        let holder = holder.to_owned();
        self.call(
            "release lease",
            self.options.call_timeout,
            async move |link: &mut Link| lease::release(link, holder, token).await,
        )
    }

    fn lease_call(
        &self,
        op: &'static str,
        holder: &str,
        token: Option<u64>,
        lifetime: Duration,
    ) -> Result<LeaseAnswer, StoreError> {
        self.check_lease_table(op)?;
        let holder = holder.to_owned();
        let secs = lifetime.as_secs_f64();
        self.call(
            op,
            self.options.call_timeout,
            async move |link: &mut Link| lease::grant_or_renew(link, op, holder, token, secs).await,
        )
    }

    fn check_lease_table(&self, op: &'static str) -> Result<(), StoreError> {
        if self.access == Access::ReadOnly || self.revision < LEASE_REVISION {
            return Err(StoreError::Config {
                reason: format!(
                    "{op}: the store at {} is read-only or at schema revision {} (the lease needs revision {LEASE_REVISION})",
                    self.target, self.revision
                ),
            });
        }
        Ok(())
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

    fn watermark(&self) -> Result<Option<u64>, StoreError> {
        if self.revision < WATERMARK_REVISION {
            return Ok(None);
        }
        let value: Option<i64> = self.call(
            "read watermark",
            self.options.call_timeout,
            async |link: &mut Link| {
                link.read("read watermark", async |db| {
                    let Some(scope_id) = db.scope_id else {
                        return Ok(None);
                    };
                    let row = db
                        .query_one(
                            "SELECT watermark_s FROM buzz_receipt_scopes WHERE id = $1",
                            &[&scope_id],
                        )
                        .await?;
                    row.try_get(0).map_err(db.error())
                })
                .await
            },
        )?;
        row::watermark_from_sql(value)
    }

    fn advance_watermark(&self, secs: u64) -> Result<Option<u64>, StoreError> {
        let secs = row::watermark_to_sql(secs)?;
        let value: Option<i64> =
            self.write_call("advance watermark", None, async move |link: &mut Link| {
                link.write("advance watermark", async |db| {
                    let scope_id = db.scope()?;
                    let row = db
                        .query_one(
                            "UPDATE buzz_receipt_scopes
                             SET watermark_s = GREATEST(COALESCE(watermark_s, $2), $2)
                             WHERE id = $1 RETURNING watermark_s",
                            &[&scope_id, &secs],
                        )
                        .await?;
                    row.try_get(0).map_err(db.error())
                })
                .await
            })?;
        row::watermark_from_sql(value)
    }

    fn set_watermark(&self, secs: Option<u64>) -> Result<WatermarkOutcome, StoreError> {
        let secs = secs.map(row::watermark_to_sql).transpose()?;
        self.write_call(
            "set watermark",
            WatermarkOutcome::NotWritable(WriteRefusal::ReadOnly),
            async move |link: &mut Link| {
                link.write("set watermark", async |db| {
                    let scope_id = db.scope()?;
                    // RETURNING: a scope row that is not there is an error, not a write.
                    db.query_one(
                        "UPDATE buzz_receipt_scopes SET watermark_s = $2 WHERE id = $1
                         RETURNING watermark_s",
                        &[&scope_id, &secs],
                    )
                    .await?;
                    Ok(WatermarkOutcome::Written)
                })
                .await
            },
        )
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
