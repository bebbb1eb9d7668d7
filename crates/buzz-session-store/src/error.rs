//! The one error type of every store in this crate.
//!
//! A `StoreError` always means "this operation did not happen, or it is unknown whether it
//! happened" (a timeout): outcomes that did happen, including refusals such as the stale-commit
//! guard, are typed results, not errors. Each variant carries what an operator needs to find the
//! problem (path, operation, key), because the harness only logs these and carries on.

use std::path::PathBuf;

/// A store operation that did not happen (or whose effect is unknown). Callers log it and carry on.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A file-system operation failed.
    #[error("session store: {op} {}: {source}", path.display())]
    Io {
        /// The file or directory the operation was on.
        path: PathBuf,
        /// What was being done, e.g. "lock", "rename temp file over".
        op: &'static str,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A receipt's ledger or extension could not be encoded.
    #[error("session store: encoding a receipt: {0}")]
    Encode(#[from] serde_json::Error),
    /// The key or record could never be read back, so it is not written (caller bug).
    #[error("session store: refusing to store {key:?}: {reason}")]
    Invalid {
        /// The key's storage form.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// An SQLite call failed (busy beyond the timeout, disk full, not a database, …).
    #[error("session store: {op} on SQLite database {}: {source}", path.display())]
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// What was being done, e.g. "begin write", "put".
        op: &'static str,
        /// The underlying error.
        #[source]
        source: rusqlite::Error,
    },
    /// A PostgreSQL call failed (connection refused, statement timeout, …).
    #[error("session store: {op} on PostgreSQL {target}: {}", with_causes(source))]
    Postgres {
        /// The server and database, without credentials.
        target: String,
        /// What was being done, e.g. "connect", "commit_delivery".
        op: &'static str,
        /// The underlying error (its text names a TLS certificate problem, if that was it).
        #[source]
        source: tokio_postgres::Error,
    },
    /// The PostgreSQL connection thread did not answer in time or has stopped. For a write, whether
    /// it happened is unknown.
    #[error("session store: PostgreSQL {target} unavailable during {op}: {reason}")]
    Unavailable {
        /// The server and database, without credentials.
        target: String,
        /// The operation that was not answered.
        op: &'static str,
        /// Why, e.g. "no answer within 10s".
        reason: String,
    },
    /// A stored row cannot be decoded (edited by hand or by a foreign tool). It is left as it is; a
    /// `put` for the same key replaces it.
    #[error("session store: the receipt for {key} is unreadable: {reason}")]
    CorruptRow {
        /// The row's storage key.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// There is no receipt store where one was expected (a read-only open never creates one).
    #[error("session store: no receipt store at {location}")]
    NotFound {
        /// Where it was looked for, without credentials.
        location: String,
    },
    /// The database was created or migrated by a newer harness; this one does not touch it.
    #[error(
        "session store: {location} has schema version {found}, newer than this harness supports ({supported}); not using it"
    )]
    SchemaTooNew {
        /// The database, without credentials.
        location: String,
        /// The version found.
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },
    /// The store configuration cannot be used (unparsable URL, unusable agent key, …).
    #[error("session store: invalid configuration: {reason}")]
    Config {
        /// What is wrong, naming the offending value.
        reason: String,
    },
}

/// An error and its causes, `: `-separated: `tokio-postgres` keeps the reason (a certificate
/// problem, the server's message) in the cause, not in its own text.
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        text.push_str(": ");
        text.push_str(&e.to_string());
        cause = e.source();
    }
    text
}
