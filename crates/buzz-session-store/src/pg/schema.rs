//! What an open does in the database, before the store serves its first call.
//!
//! A read-write open creates the tables (or checks and migrates them) in one transaction that
//! holds an advisory lock, so harnesses starting together do not race, and registers the store's
//! scope (its `buzz_receipt_scopes` row). A read-only open creates, migrates and registers
//! nothing: it checks the schema line, reads the revision, and looks the scope up. The schema
//! line and its revisions are defined in [`crate::schema`]; this file holds their PostgreSQL
//! form.

use tokio_postgres::{Client, GenericClient, Transaction};

use super::connection::Link;
use super::sql::Db;
use crate::error::StoreError;
use crate::key::StoreScope;
use crate::schema::{self, Access};

/// Advisory lock key that serialises schema creation and migration ("buzzrcpt").
const SCHEMA_LOCK: i64 = 0x6275_7a7a_7263_7074;

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

/// Revision 2, additive (see [`crate::schema`]): the watermark of each (relay, agent key).
const REVISION_2: &str = r#"
ALTER TABLE buzz_receipt_scopes ADD COLUMN IF NOT EXISTS watermark_s BIGINT;
UPDATE buzz_receipt_schema SET revision = 2;
"#;

/// Revision 3, additive (see [`crate::schema`]): the lease of each (relay, agent key) across
/// machines. `token` is raised at each grant, so it only grows; `expires_at` is the database's
/// clock.
const REVISION_3: &str = r#"
CREATE TABLE IF NOT EXISTS buzz_receipt_leases (
    scope_id   BIGINT      PRIMARY KEY REFERENCES buzz_receipt_scopes (id),
    holder     TEXT        NOT NULL,
    token      BIGINT      NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
UPDATE buzz_receipt_schema SET revision = 3;
"#;

/// The additive revisions in order: entry `n - 1` brings a database from revision `n - 1` to
/// `n`. Its length is [`schema::REVISION`].
const REVISIONS: [&str; schema::REVISION as usize] = [REVISION_1, REVISION_2, REVISION_3];

/// What the connection thread learnt at open.
pub(super) struct Opening {
    pub(super) revision: i64,
}

impl Link {
    /// Connects, creates or checks the schema, and registers the scope (read-write), or looks
    /// the scope up (read-only).
    pub(super) async fn initialise(&mut self, scope: &StoreScope) -> Result<Opening, StoreError> {
        let target = self.target.clone();
        let revision = match self.access {
            Access::ReadWrite => {
                self.write_exempt("open", async |db| migrate_schema(db, &target).await)
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
                self.write_exempt("open", async |db| {
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
    let found = revision_of(db).await?;
    let mut revision = found;
    for (step, sql) in (1..).zip(REVISIONS) {
        if revision < step {
            db.client.batch_execute(sql).await.map_err(db.error())?;
            revision = step;
        }
    }
    if revision > found {
        tracing::info!(target = %target, from = found, revision, "session store: applied additive schema revisions");
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
