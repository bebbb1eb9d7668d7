//! Durable session receipts for the buzz-acp fork.
//!
//! Upstream buzz-acp only ever calls `session/new`, so every live session dies when the worker pool
//! sleeps or the process restarts. A receipt records which agent session served a scope (a channel
//! conversation or one thread of it), so the harness can reopen it instead (`session/load` or
//! `session/resume`). This crate is the durable half: what a receipt is and where it lives. When a
//! receipt is written, read, kept or removed is decided by the session lifecycle (crate
//! `buzz-session-lifecycle`), which calls the store from a worker of its own, off the harness's
//! event loop.
//!
//! | module | job |
//! |---|---|
//! | [`key`] | [`StoreScope`] (relay, agent key), [`ScopeKey`] (channel or thread) and [`KeyScheme`] |
//! | [`record`] | [`SessionRecord`]: session id, configuration, ledger, turns, usage, handoff, retirement |
//! | [`receipt_store`] | [`ReceiptStore`]: the store interface (sync, object-safe), [`Expect`] and the typed outcomes, and the per-(relay, agent key) watermark |
//! | [`rules`] | the store's rules as pure functions: admission of a conditional write, the turn-commit merge and fold |
//! | [`sqlite`] | [`SqliteStore`]: the embedded default, one row per receipt in `<state-dir>/sessions.sqlite3` |
//! | [`pg`] | [`PgStore`]: PostgreSQL, shared by harnesses on several machines, with client-side deadlines |
//! | [`pg_tls`] | how a PostgreSQL URL is read, and TLS with libpq's `sslmode` meanings |
//! | [`disabled`] | [`DisabledStore`]: resume switched off; every write says it was not written |
//! | [`config`] | [`StoreArgs`] (flags), [`StoreConfig`] and [`open`]; [`open_backend`] for operators' tools |
//! | [`migrate`] | the one-time import of the old JSON file, kept as a backup |
//! | [`fence`] | [`Fence`]: the lease token a PostgreSQL store's writes must carry, shared with the lease's keeper |
//! | [`error`] | [`StoreError`], shared by every store, and [`StoreError::healing`]: whether a failure will pass or needs an operator ([`Healing`], [`PermanentReason`]) |
//!
//! Private: `row` (the functional core of the SQL backends: rows, and the rules applied to their
//! columns), `schema` (the schema line and its additive revisions), `legacy` (the old JSON format,
//! decode only), `fsio` (file-system primitives).
//!
//! Receipts hold ids, configuration names, event ids and counters, plus one bounded piece of model
//! text: the handoff a retired session leaves its successor ([`MAX_HANDOFF_TEXT_BYTES`]). Never
//! prompts, replies or key material. Heartbeat sessions are never stored ([`ScopeKey`] has no
//! heartbeat variant).
//!
//! The state directory must be on persistent storage (a mounted volume on an ephemeral pod), or
//! the receipts die with the container exactly like the live sessions did.
//!
//! The store is an optimisation: no store problem may prevent a turn. A [`ReceiptStore`] read
//! returns `Ok(None)` for "no receipt" and an `Err` when the store could not be asked; every write
//! is conditional ([`Expect`]) and returns a typed outcome (written, unchanged, conflict, forgotten,
//! not writable) or a [`StoreError`] that the caller logs and carries on from. Calls block for a
//! bounded time and never enter the caller's async runtime. See `docs/STORE.md` for the backends,
//! the schema revisions, TLS and the measurements.

pub mod config;
pub mod disabled;
pub mod error;
pub mod fence;
pub mod key;
pub mod migrate;
pub mod pg;
pub mod pg_tls;
pub mod receipt_store;
pub mod record;
pub mod rules;
pub mod sqlite;

mod fsio;
mod legacy;
mod row;
mod schema;

pub use config::{
    Backend, DEFAULT_MAX_RECEIPTS, OpenMode, Opened, StoreArgs, StoreConfig, open, open_backend,
    open_with_report, store_scopes,
};
pub use disabled::DisabledStore;
pub use error::{Healing, PermanentReason, StoreError};
pub use fence::Fence;
pub use key::{KeyError, KeyScheme, ScopeKey, StoreScope};
pub use migrate::Migration;
pub use pg::{DEFAULT_CALL_TIMEOUT, LeaseAnswer, PgOptions, PgStore};
pub use pg_tls::{RootSource, TlsMode};
pub use receipt_store::{
    BackendKind, ChannelRemoval, CommitOutcome, Expect, ForgetOutcome, ImportOutcome, PutOutcome,
    ReceiptStore, Removal, StoredReceipt, TurnCommit, UnixMillis, WatermarkOutcome, WriteRefusal,
};
pub use record::{
    DeliveryRecord, Handoff, MAX_HANDOFF_TEXT_BYTES, MAX_LEDGER_IDS, MAX_REASON_BYTES, Retirement,
    SessionRecord, Usage,
};
pub use row::TOMBSTONE_RETENTION;
pub use sqlite::SqliteStore;
