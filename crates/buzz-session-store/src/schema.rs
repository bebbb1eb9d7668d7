//! Schema versions shared by the SQL backends, and the rule that keeps upgrades rolling.
//!
//! A database carries two numbers:
//!
//! * the **schema line** ([`LINE`]): SQLite `PRAGMA user_version`, PostgreSQL
//!   `buzz_receipt_schema.version`. Every harness of the series refuses a database of another line
//!   ([`crate::StoreError::SchemaTooNew`]). A change that an older harness would misread starts a
//!   new line, and then two harness versions cannot share the database.
//! * the **revision** ([`REVISION`]) within the line: SQLite `buzz_receipt_revision.revision`,
//!   PostgreSQL `buzz_receipt_schema.revision`. A revision only ADDS (nullable columns, new
//!   tables), so a harness that predates it keeps working on the database: its statements name
//!   their columns and never see the new ones. A harness finding a newer revision than its own
//!   uses the database as it is.
//!
//! Revision 1 adds the `ext` column (turns, usage, handoff, retirement, bound to the session they
//! belong to, see `row.rs`) and the tombstone table `buzz_receipt_forgets`. The harness that
//! predates it (line 1, revision 0) only accepts exactly line 1: bumping the line would make it
//! refuse to start during a rolling upgrade, which is why the revision is a separate number.
//!
//! Revision 2 adds the nullable column `buzz_receipt_scopes.watermark_s` (SQLite `INTEGER`,
//! PostgreSQL `BIGINT`): the watermark of the (relay, agent key), a unix time in seconds before
//! which every mention was settled by a harness of the pair (see
//! [`crate::ReceiptStore::watermark`]). NULL: none recorded. A harness at revision 1 never names
//! the column, so it keeps registering its scope and writing receipts on a revision-2 database.
//!
//! Revision 3 adds, on PostgreSQL only, the table `buzz_receipt_leases`: which harness of a
//! (relay, agent key) serves it across machines, its fencing token and until when (see
//! [`crate::fence`]). The embedded store records the revision and adds nothing: its harness's lease
//! is a lock file on its host. A harness at revision 2 never names the table.
//!
//! A migration applies each missing revision in turn (0 → 1 → 2 → 3), in the transaction that holds
//! the schema lock, and records the last one.

/// The schema line this build reads and writes.
pub(crate) const LINE: i64 = 1;

/// The newest revision of [`LINE`] this build creates.
pub(crate) const REVISION: i64 = 3;

/// The first revision that has `buzz_receipt_scopes.watermark_s`.
pub(crate) const WATERMARK_REVISION: i64 = 2;

/// The first revision that has `buzz_receipt_leases` (PostgreSQL).
pub(crate) const LEASE_REVISION: i64 = 3;

/// Whether a store may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Migrates at open, registers its scope, writes.
    ReadWrite,
    /// Reads only: no migration, no registration, every write answers `NotWritable(ReadOnly)`.
    ReadOnly,
}

// The SQL both backends write receipts with (their placeholders differ, so each adds its own
// `VALUES`).

/// The columns of a receipt row, in the order every insert gives them.
macro_rules! receipt_columns {
    () => {
        "INSERT INTO buzz_receipts (scope_id, scope_key, session_id, model,
         permission_mode, requested_model, requested_permission_mode,
         standing_context_sent, delivered_event_ids, last_used_ms, ext)"
    };
}
pub(crate) use receipt_columns;

/// What an insert does to the row its key already has: the new receipt replaces it.
macro_rules! replace_on_conflict {
    () => {
        "ON CONFLICT (scope_id, scope_key) DO UPDATE SET
         session_id = excluded.session_id, model = excluded.model,
         permission_mode = excluded.permission_mode,
         requested_model = excluded.requested_model,
         requested_permission_mode = excluded.requested_permission_mode,
         standing_context_sent = excluded.standing_context_sent,
         delivered_event_ids = excluded.delivered_event_ids,
         last_used_ms = excluded.last_used_ms, ext = excluded.ext"
    };
}
pub(crate) use replace_on_conflict;
