//! The bulk import (the one-time import of the old JSON file, and `buzz-receipts import`).
//!
//! One transaction, in batches of [`IMPORT_BATCH`] rows: what is stored under the batch's keys is
//! read (receipt rows locked, tombstones too), the functional core decides per row
//! ([`row::plan_import`]: only keys without a live receipt, and none that was forgotten), and
//! the chosen rows are written in one `INSERT … SELECT FROM unnest(…)` statement. Eviction over
//! the cap runs once, at the end.

use std::collections::HashMap;

use tokio_postgres::Transaction;

use super::sql::Db;
use crate::error::StoreError;
use crate::receipt_store::ImportOutcome;
use crate::row::{self, ImportSkip, Row, State};
use crate::schema::{receipt_columns, replace_on_conflict};

/// Rows per `INSERT … SELECT FROM unnest(…)` statement of an import.
const IMPORT_BATCH: usize = 2_000;

/// The import, in batches: what is stored under the batch's keys is read (receipt rows locked),
/// the functional core decides per row, and the chosen rows are written in one statement.
pub(super) async fn import_rows(
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
            concat!(
                receipt_columns!(),
                "\n             SELECT $1, * FROM unnest($2::text[], $3::text[], $4::text[], $5::text[],
                 $6::text[], $7::text[], $8::bool[], $9::text[], $10::int8[], $11::text[])\n             ",
                replace_on_conflict!()
            ),
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
