//! The statements and the query context they run in.
//!
//! A [`Db`] is one query context: a client (a read) or a transaction (a write), with the
//! connection's cache of prepared statements (each statement is prepared once per connection).
//! Its methods are the row-level steps the operations are made of: lock the scope's counter,
//! read what is stored under a key, upsert, delete, leave a tombstone, evict over the cap. Every
//! PostgreSQL error leaves it as a [`StoreError::Postgres`] naming the server and the operation.
//! [`read_row`] maps a selected row onto the functional core's [`Row`].

use std::collections::HashMap;

use tokio_postgres::types::ToSql;
use tokio_postgres::{GenericClient, Statement};

use crate::error::StoreError;
use crate::fence::{self, LeaseRow};
use crate::receipt_store::UnixMillis;
use crate::row::{self, CommitColumns, LedgerColumns, Row, State};
use crate::schema::{receipt_columns, replace_on_conflict};

/// One live receipt by key (the columns [`read_row`] reads), at revision 1.
pub(super) const SELECT_ONE: &str = "SELECT r.scope_key, r.session_id, r.model, r.permission_mode,
         r.requested_model, r.requested_permission_mode, r.standing_context_sent,
         r.delivered_event_ids, r.last_used_ms, r.ext
     FROM buzz_receipts r
     WHERE r.scope_id = $1 AND r.scope_key = $2 AND NOT EXISTS (
         SELECT 1 FROM buzz_receipt_forgets f WHERE f.scope_id = r.scope_id
             AND f.scope_key = r.scope_key AND f.forgotten_ms >= r.last_used_ms)";

/// Every live receipt of a scope, at revision 1.
pub(super) const SELECT_ALL: &str = "SELECT r.scope_key, r.session_id, r.model, r.permission_mode,
         r.requested_model, r.requested_permission_mode, r.standing_context_sent,
         r.delivered_event_ids, r.last_used_ms, r.ext
     FROM buzz_receipts r
     WHERE r.scope_id = $1 AND NOT EXISTS (
         SELECT 1 FROM buzz_receipt_forgets f WHERE f.scope_id = r.scope_id
             AND f.scope_key = r.scope_key AND f.forgotten_ms >= r.last_used_ms)
     ORDER BY r.scope_key";

/// One receipt by key in a database still at revision 0 (read-only stores only).
pub(super) const SELECT_ONE_R0: &str = "SELECT scope_key, session_id, model, permission_mode,
         requested_model, requested_permission_mode, standing_context_sent,
         delivered_event_ids, last_used_ms, NULL::text
     FROM buzz_receipts WHERE scope_id = $1 AND scope_key = $2";

/// Every receipt of a scope in a database still at revision 0 (read-only stores only).
pub(super) const SELECT_ALL_R0: &str = "SELECT scope_key, session_id, model, permission_mode,
         requested_model, requested_permission_mode, standing_context_sent,
         delivered_event_ids, last_used_ms, NULL::text
     FROM buzz_receipts WHERE scope_id = $1 ORDER BY scope_key";

/// Writes one receipt over whatever row its key has.
const UPSERT: &str = concat!(
    receipt_columns!(),
    "\n     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)\n     ",
    replace_on_conflict!()
);

/// One query context: a client or a transaction, with the statement cache.
pub(super) struct Db<'a, C: GenericClient> {
    pub(super) client: &'a C,
    pub(super) statements: &'a mut HashMap<&'static str, Statement>,
    pub(super) target: &'a str,
    pub(super) op: &'static str,
    pub(super) scope_id: Option<i64>,
}

impl<C: GenericClient + Sync> Db<'_, C> {
    pub(super) fn error(&self) -> impl Fn(tokio_postgres::Error) -> StoreError + use<'_, C> {
        pg_err(self.target, self.op)
    }

    /// The scope id of a registered scope (every writer's, and a reader's that found one).
    pub(super) fn scope(&self) -> Result<i64, StoreError> {
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

    pub(super) async fn execute(
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

    pub(super) async fn query(
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

    pub(super) async fn query_opt(
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

    pub(super) async fn query_one(
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

    /// Reads the agent's lease `FOR SHARE` (a takeover waits for this transaction) and refuses
    /// the write unless it is `token`'s and live ([`crate::fence::refusal`]).
    pub(super) async fn check_lease(&mut self, token: Option<u64>) -> Result<(), StoreError> {
        let scope_id = self.scope()?;
        let row = self
            .query_opt(
                "SELECT holder, token, expires_at > clock_timestamp() FROM buzz_receipt_leases
                 WHERE scope_id = $1 FOR SHARE",
                &[&scope_id],
            )
            .await?;
        let lease = row
            .map(|row| -> Result<LeaseRow, tokio_postgres::Error> {
                Ok(LeaseRow {
                    holder: row.try_get(0)?,
                    token: u64::try_from(row.try_get::<_, i64>(1)?).unwrap_or(0),
                    live: row.try_get(2)?,
                })
            })
            .transpose()
            .map_err(self.error())?;
        match fence::refusal(token, lease.as_ref()) {
            None => Ok(()),
            Some(reason) => {
                metrics::counter!(fence::FENCED_WRITES).increment(1);
                Err(StoreError::Fenced {
                    target: self.target.to_owned(),
                    op: self.op,
                    reason,
                })
            }
        }
    }

    /// Locks the scope's counter row (first lock of every add/delete) and returns the count.
    pub(super) async fn lock_count(&mut self) -> Result<i64, StoreError> {
        let scope_id = self.scope()?;
        let row = self
            .query_one(
                "SELECT receipts FROM buzz_receipt_scopes WHERE id = $1 FOR UPDATE",
                &[&scope_id],
            )
            .await?;
        row.try_get(0).map_err(self.error())
    }

    pub(super) async fn set_count(&mut self, count: i64) -> Result<(), StoreError> {
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
    pub(super) async fn evict(
        &mut self,
        count: i64,
        cap: usize,
        keep: &str,
    ) -> Result<i64, StoreError> {
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
    pub(super) async fn current(&mut self, storage_key: &str) -> Result<Current, StoreError> {
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
    pub(super) async fn upsert(&mut self, row: &Row) -> Result<(), StoreError> {
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

    pub(super) async fn delete_row(&mut self, storage_key: &str) -> Result<u64, StoreError> {
        let scope_id = self.scope()?;
        self.execute(
            "DELETE FROM buzz_receipts WHERE scope_id = $1 AND scope_key = $2",
            &[&scope_id, &storage_key],
        )
        .await
    }

    pub(super) async fn tombstone(
        &mut self,
        storage_key: &str,
        now: UnixMillis,
    ) -> Result<(), StoreError> {
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
pub(super) struct Current {
    pub(super) row_exists: bool,
    pub(super) state: State,
    pub(super) columns: Option<CommitColumns>,
}

pub(super) fn read_row(r: &tokio_postgres::Row) -> Result<Row, tokio_postgres::Error> {
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
pub(super) fn pg_err<'a>(
    target: &'a str,
    op: &'static str,
) -> impl Fn(tokio_postgres::Error) -> StoreError + 'a {
    move |source| StoreError::Postgres {
        target: target.to_owned(),
        op,
        source,
    }
}
