//! Durable session receipts for the buzz-acp fork.
//!
//! Upstream buzz-acp only ever calls `session/new`, so every live session dies when the worker pool
//! sleeps or the process restarts (#5342, #6381). This crate holds the logic that lets the harness
//! restore the previous session instead; the buzz-acp patches stay small and call it.
//!
//! | module | job |
//! |---|---|
//! | [`key`] | [`ScopeKey`] (channel or thread) and [`KeyScheme`] (per channel as upstream #6088, or per scope) |
//! | [`record`] | [`SessionRecord`]: session id, applied and requested configuration, delivery ledger |
//! | [`receipt_store`] | [`ReceiptStore`]: the store interface (sync, object-safe) and its typed outcomes |
//! | [`sqlite`] | [`SqliteStore`]: the embedded default, one row per receipt in `<state-dir>/sessions.sqlite3` |
//! | [`pg`] | [`PgStore`]: PostgreSQL, shared by harnesses on several machines |
//! | [`disabled`] | [`DisabledStore`]: resume switched off; every write says it was not written |
//! | [`config`] | [`StoreArgs`] (flags), [`StoreConfig`] and [`open`]: choose, open, import the old JSON file |
//! | [`migrate`] | the one-time import of a JSON store (format 1 or 2), kept as a backup |
//! | [`error`] | [`StoreError`], shared by every store |
//! | [`store`] | [`SessionStore`]: the old locked, atomic, owner-only JSON file (kept until the harness switches to [`open`]; then only the import reads it) |
//! | [`resume`] | [`plan_resume`] and [`classify_load_failure`]: the restart lifecycle contract |
//! | [`fresh`] | [`FreshRequests`]: one-shot `_meta.freshSession` after `!rotate` (#6103) |
//! | [`gate`] | [`restore_method`] / [`may_close`]: never call a method the agent did not advertise |
//! | [`delivery`] | [`bound_delivered`]: keep the persisted delivery ledger small |
//!
//! # Lifecycle contract (what the harness does with a receipt)
//!
//! * **Write** after `session/new` succeeds: the id, the model and permission mode actually
//!   applied, and the ones requested. Commit the delivery ledger after each successful turn with
//!   [`SessionStore::commit_delivery`], which ignores late commits for a replaced session.
//! * **Restore** before `session/new` when [`plan_resume`] says [`ResumePlan::Load`] and
//!   [`restore_method`] allows it. A restored session gets a fresh delivery state, no zero-usage
//!   baseline, and no re-applied model. Replayed `session/update` lines must stay out of the
//!   observer / relay-publish path during the load window (#2633 item 12).
//! * **Remove** on every in-process decision to abandon a session (`!rotate` busy or idle, model
//!   switch, max-turns or max-tokens rotation), in the same seam that drops the live session, so
//!   memory and disk change together (#6088 item 2); and on a [`LoadVerdict::Gone`] failure —
//!   with [`SessionStore::remove_if_session`] when another process may have written a newer one.
//!   A rotation also calls [`FreshRequests::request`] (#6103).
//! * **Keep** on agent death (exit, hard timeout) and on a [`LoadVerdict::Indeterminate`] failure:
//!   death and uncertainty are not decisions to start over. A receipt the harness decided to keep
//!   must not be overwritten by a `put` a few statements later (#2633 item 13): an indeterminate
//!   failure opens no session at all.
//! * **Never store** heartbeat sessions: they are ephemeral by design (#2633 item 17), and
//!   [`ScopeKey`] has no heartbeat variant to store them under.
//!
//! The state directory must be on persistent storage (a mounted volume on an ephemeral pod), or
//! the receipts die with the container exactly like the live sessions did (#6088 item 6).
//!
//! The store is an optimisation: no store problem may prevent a turn. A [`ReceiptStore`] read
//! returns `Ok(None)` for "no receipt" and an `Err` when the store could not be asked; every write
//! returns a typed outcome (written, unchanged, refused by the stale-commit guard, no receipt,
//! not writable) or a [`StoreError`] that the caller logs and carries on from. Calls block briefly
//! (one transaction; at most a few seconds waiting for another writer or the server) and never
//! enter the caller's async runtime, so the event loop may call them directly. See
//! `docs/STORE.md` for the backends, the migration and the measurements.

pub mod config;
pub mod delivery;
pub mod disabled;
pub mod error;
pub mod fresh;
pub mod gate;
pub mod key;
pub mod migrate;
pub mod pg;
pub mod receipt_store;
pub mod record;
pub mod resume;
pub mod sqlite;
pub mod store;

mod format;
mod fsio;
mod row;

#[cfg(test)]
mod test_support;

pub use config::{
    Backend, DEFAULT_MAX_RECEIPTS, Opened, StoreArgs, StoreConfig, open, open_with_report,
};
pub use delivery::{MAX_DELIVERED_IDS_PER_SCOPE, bound_delivered};
pub use disabled::DisabledStore;
pub use error::StoreError;
pub use fresh::FreshRequests;
pub use gate::{AgentCaps, RestoreMethod, may_close, restore_method};
pub use key::{KeyError, KeyScheme, ScopeKey};
pub use migrate::Migration;
pub use pg::PgStore;
pub use receipt_store::{
    BackendKind, ChannelRemoval, CommitOutcome, ImportOutcome, PutOutcome, ReceiptStore, Removal,
    StoredReceipt, UnixMillis, WriteRefusal,
};
pub use record::{DeliveryRecord, SessionRecord};
pub use resume::{
    Compat, FreshReason, LoadVerdict, ResumePlan, classify_load_failure, indeterminate_notice,
    plan_resume,
};
pub use sqlite::SqliteStore;
pub use store::{MAX_STORE_BYTES, SessionStore, StoreScope, StoreStatus};
