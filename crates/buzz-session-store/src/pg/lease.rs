//! The agent's lease across machines, kept in the database so that its clock is the only one
//! that decides: one row of `buzz_receipt_leases` per (relay, agent key), naming the holder, its
//! fencing token and when the lease expires.
//!
//! * A grant succeeds when the lease has expired (or was never granted), or when the asker
//!   already holds it; it raises the token either way, so a write of any earlier grant is refused
//!   from then on (see [`crate::fence`]).
//! * A renewal extends the lease only while the row still names the asker and its token; it does
//!   not raise the token.
//! * A release (a harness that stops cleanly) ends the lease now, so a standby need not wait for
//!   it to expire.
//!
//! Each is one statement on that row, in a transaction the fence does not check. The time
//! handling (when to ask, when to stop serving) is the lease keeper's, in crate `buzz-lease`.

use super::connection::Link;
use super::sql::Db;
use crate::error::StoreError;

/// What the database answered a request for the lease, or a renewal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseAnswer {
    /// The asker holds the lease with this token until its lifetime from now.
    Held {
        /// The fencing token.
        token: u64,
    },
    /// Another holder has the lease (or a later grant to the same holder: the asker's token is
    /// no longer current).
    HeldBy {
        /// Who.
        holder: String,
        /// With which token.
        token: u64,
    },
}

/// A grant (`token` none) or a renewal of `holder`'s lease for `secs` from the database's now,
/// then who holds the lease if the asker does not.
pub(super) async fn grant_or_renew(
    link: &mut Link,
    op: &'static str,
    holder: String,
    token: Option<u64>,
    secs: f64,
) -> Result<LeaseAnswer, StoreError> {
    let token = token.map(sql_token);
    link.write_exempt(op, async |db| {
        let scope_id = db.scope()?;
        let granted = match token {
            None => {
                db.query_opt(
                    "INSERT INTO buzz_receipt_leases AS l (scope_id, holder, token, expires_at)
                     VALUES ($1, $2, 1, clock_timestamp() + make_interval(secs => $3))
                     ON CONFLICT (scope_id) DO UPDATE
                     SET holder = excluded.holder, token = l.token + 1,
                         expires_at = excluded.expires_at
                     WHERE l.expires_at <= clock_timestamp() OR l.holder = excluded.holder
                     RETURNING token",
                    &[&scope_id, &holder, &secs],
                )
                .await?
            }
            Some(token) => {
                db.query_opt(
                    "UPDATE buzz_receipt_leases
                     SET expires_at = clock_timestamp() + make_interval(secs => $4)
                     WHERE scope_id = $1 AND holder = $2 AND token = $3
                     RETURNING token",
                    &[&scope_id, &holder, &token, &secs],
                )
                .await?
            }
        };
        match granted {
            Some(row) => Ok(LeaseAnswer::Held {
                token: row_token(db, &row, 0)?,
            }),
            None => current_holder(db).await,
        }
    })
    .await
}

/// Ends `holder`'s lease with `token` now; `false` when it was not theirs any more.
pub(super) async fn release(
    link: &mut Link,
    holder: String,
    token: u64,
) -> Result<bool, StoreError> {
    let token = sql_token(token);
    link.write_exempt("release lease", async |db| {
        let scope_id = db.scope()?;
        let n = db
            .execute(
                "UPDATE buzz_receipt_leases SET expires_at = clock_timestamp()
                 WHERE scope_id = $1 AND holder = $2 AND token = $3",
                &[&scope_id, &holder, &token],
            )
            .await?;
        Ok(n == 1)
    })
    .await
}

/// Who holds the lease (asked after a grant or renewal was not the asker's).
async fn current_holder<C: tokio_postgres::GenericClient + Sync>(
    db: &mut Db<'_, C>,
) -> Result<LeaseAnswer, StoreError> {
    let scope_id = db.scope()?;
    let row = db
        .query_one(
            "SELECT holder, token FROM buzz_receipt_leases WHERE scope_id = $1",
            &[&scope_id],
        )
        .await?;
    Ok(LeaseAnswer::HeldBy {
        holder: row.try_get(0).map_err(db.error())?,
        token: row_token(db, &row, 1)?,
    })
}

fn row_token<C: tokio_postgres::GenericClient + Sync>(
    db: &Db<'_, C>,
    row: &tokio_postgres::Row,
    index: usize,
) -> Result<u64, StoreError> {
    let token: i64 = row.try_get(index).map_err(db.error())?;
    Ok(u64::try_from(token).unwrap_or(0))
}

fn sql_token(token: u64) -> i64 {
    i64::try_from(token).unwrap_or(i64::MAX)
}
