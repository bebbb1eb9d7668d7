//! Durable session receipts for the buzz-acp fork.
//!
//! Upstream buzz-acp only ever calls `session/new`, so every live session dies when the worker pool
//! sleeps or the process restarts (#5342, #6381). A receipt records which agent session served a
//! scope, so the harness can reopen it instead. This crate is the durable half: what a receipt is
//! and where it lives. When a receipt is written, read, kept or removed is decided by the session
//! lifecycle (crate `buzz-session-lifecycle`), which calls the store from the harness's event loop.
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
//! | [`store`] | [`SessionStore`]: the old locked, atomic, owner-only JSON file, read by the import (and measured by the benchmark) |
//! | [`delivery`] | [`bound_delivered`]: keep the persisted delivery ledger small |
//!
//! Receipts hold only ids, model and permission-mode names and event ids: never prompts, message
//! text or key material. Heartbeat sessions are never stored ([`ScopeKey`] has no heartbeat
//! variant): they are ephemeral by design (#2633 item 17).
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
pub mod key;
pub mod migrate;
pub mod pg;
pub mod receipt_store;
pub mod record;
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
pub use key::{KeyError, KeyScheme, ScopeKey};
pub use migrate::Migration;
pub use pg::PgStore;
pub use receipt_store::{
    BackendKind, ChannelRemoval, CommitOutcome, ImportOutcome, PutOutcome, ReceiptStore, Removal,
    StoredReceipt, UnixMillis, WriteRefusal,
};
pub use record::{DeliveryRecord, SessionRecord};
pub use sqlite::SqliteStore;
pub use store::{MAX_STORE_BYTES, SessionStore, StoreScope, StoreStatus};
