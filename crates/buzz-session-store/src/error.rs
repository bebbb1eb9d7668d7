//! The one error type of every store in this crate.
//!
//! A `StoreError` always means "this operation did not happen, or it is unknown whether it
//! happened" (a timeout): outcomes that did happen, including refusals such as the stale-commit
//! guard, are typed results, not errors. Each variant carries what an operator needs to find the
//! problem (path, operation, key), because the harness only logs these and carries on.
//!
//! # Transient and permanent refusals
//!
//! Most failures pass: a server restarting, a network partition, a frozen database, a busy
//! SQLite file. A few will not, however long the caller waits: the server's certificate does not
//! verify, the password is wrong, the database or the role does not exist, the state directory
//! may not be written. Those need an operator, and a caller that retries them forever only hides
//! them. [`StoreError::healing`] tells the two apart ([`Healing`], with a [`PermanentReason`]).
//!
//! It classifies from typed sources only: the SQLSTATE the server sent
//! ([`tokio_postgres::Error::code`]), a [`rustls::Error::InvalidCertificate`] found among the
//! error's causes, [`std::io::ErrorKind::PermissionDenied`], and SQLite's extended code
//! `SQLITE_READONLY_DIRECTORY`. It never reads message text, which changes with the server's
//! version and language. What it does not recognise is
//! [`Healing::Transient`]: retrying something permanent costs a log line per attempt, while
//! giving up on something transient would switch resume off until a restart.

use std::error::Error;
use std::fmt;
use std::io;
use std::path::PathBuf;

use tokio_postgres::error::SqlState;

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
        /// The underlying error (its text names a TLS certificate problem, if that was it;
        /// [`StoreError::healing`] reads its SQLSTATE and causes).
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
    /// A write of a harness that does not hold its agent's lease (PostgreSQL, with a
    /// [`crate::Fence`]): the lease is another's, has expired, or was never granted. Nothing was
    /// written, and nothing this harness writes will be until it holds the lease again.
    #[error("session store: {op} on PostgreSQL {target} refused: {reason}")]
    Fenced {
        /// Server and database without credentials.
        target: String,
        /// The operation refused.
        op: &'static str,
        /// Whose lease it is, or why this harness's token does not count.
        reason: String,
    },
    /// The store refused a harness that is starting, for a reason that lasts ([`Healing`]):
    /// the harness does not start, rather than run without the sessions it was asked to keep.
    #[error(
        "session store refuses this harness and will until its configuration is fixed: {reason}; {source}"
    )]
    Refused {
        /// What was refused.
        reason: PermanentReason,
        /// The refusal as the store reported it.
        #[source]
        source: Box<StoreError>,
    },
}

impl StoreError {
    /// Whether waiting can make the operation succeed: [`Healing::Permanent`] when the store
    /// refused for a reason that lasts until someone changes the configuration, the server or
    /// the file system (see the module docs for what is recognised), [`Healing::Transient`]
    /// otherwise.
    ///
    /// An open ([`crate::PgStore::open`], [`crate::SqliteStore::open`], [`crate::open`]) returns
    /// the error of the connection or file operation that failed, with its causes, so this works
    /// on what an open returns as on what any later call returns (a reconnect meets the same
    /// refusals).
    pub fn healing(&self) -> Healing {
        let permanent = match self {
            Self::Postgres { source, .. } => postgres_refusal(source),
            Self::Io { source, .. } => io_refusal(source),
            Self::Sqlite { source, .. } => sqlite_refusal(source),
            // Not a refusal by the store: bad input, a timeout, an unreadable row, a missing or
            // newer store, a configuration this process was given. None of these is one of the
            // refusals a server or the file system makes.
            Self::Encode(_)
            | Self::Invalid { .. }
            | Self::Unavailable { .. }
            | Self::CorruptRow { .. }
            | Self::NotFound { .. }
            | Self::SchemaTooNew { .. }
            | Self::Config { .. } => None,
            Self::Fenced { .. } => Some(PermanentReason::NotLeaseHolder),
            Self::Refused { reason, .. } => Some(*reason),
        };
        match permanent {
            Some(reason) => Healing::Permanent { reason },
            None => Healing::Transient,
        }
    }
}

/// Whether waiting can make a failed store operation succeed ([`StoreError::healing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Healing {
    /// Nothing shows that waiting will not help: an outage, a timeout, a lost connection, a busy
    /// database, or a failure this crate does not recognise as permanent. Trying again later may
    /// succeed.
    Transient,
    /// The store refused for a reason that lasts until someone changes something; trying again
    /// unchanged fails the same way.
    Permanent {
        /// What was refused, and so what has to change.
        reason: PermanentReason,
    },
}

impl fmt::Display for Healing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Transient => f.write_str("transient: trying again later may succeed"),
            Self::Permanent { reason } => write!(
                f,
                "permanent: {reason}; trying again will not help until that is changed"
            ),
        }
    }
}

/// Why a store refusal will not heal by waiting. Its text is for an operator: what was refused
/// and where to look. The [`StoreError`] itself names the server or the file and carries the
/// underlying message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PermanentReason {
    /// The PostgreSQL server's TLS certificate failed verification (`sslmode=verify-ca` or
    /// `verify-full`, or `require` with `sslrootcert`): a CA in `sslrootcert` that did not sign
    /// it, a host name it does not name, an expired certificate.
    CertificateRejected,
    /// The server rejected the credentials (SQLSTATE 28P01, `invalid_password`): a wrong
    /// password, or, under password authentication, a user name the server does not know (the
    /// server does not say which, on purpose).
    AuthenticationFailed,
    /// The server does not let this role connect (SQLSTATE 28000,
    /// `invalid_authorization_specification`): the role does not exist (reported this way
    /// where no password is asked, e.g. `trust` or `peer`), it may not log in (`NOLOGIN`), or
    /// `pg_hba.conf` has no entry that admits this connection, or one that rejects it.
    RoleNotAdmitted,
    /// The database named in the URL does not exist on the server (SQLSTATE 3D000,
    /// `invalid_catalog_name`).
    DatabaseMissing,
    /// The file system denies this process the store's directory or file (permission denied):
    /// the state directory cannot be created, or the database file or its log cannot be created
    /// or opened for writing by this process's user, given the owners and modes along the path.
    FilePermissionDenied,
    /// This harness does not hold its agent's lease across machines: another harness serves the
    /// agent, or this one was cut off from the database for longer than the lease.
    NotLeaseHolder,
}

impl PermanentReason {
    /// A short stable name, for metrics labels and structured records.
    pub fn code(self) -> &'static str {
        match self {
            Self::CertificateRejected => "certificate_rejected",
            Self::AuthenticationFailed => "authentication_failed",
            Self::RoleNotAdmitted => "role_not_admitted",
            Self::DatabaseMissing => "database_missing",
            Self::FilePermissionDenied => "file_permission_denied",
            Self::NotLeaseHolder => "not_lease_holder",
        }
    }
}

impl fmt::Display for PermanentReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::CertificateRejected => {
                "the PostgreSQL server's TLS certificate failed verification (check that sslrootcert names the CA that signed it, that the URL's host name is one the certificate names, and that it has not expired)"
            }
            Self::AuthenticationFailed => {
                "the PostgreSQL server rejected the user name or password in the store URL (SQLSTATE 28P01)"
            }
            Self::RoleNotAdmitted => {
                "the PostgreSQL server does not let the URL's role connect (SQLSTATE 28000): the role does not exist or may not log in, or no pg_hba.conf entry admits this connection"
            }
            Self::DatabaseMissing => {
                "the database named in the store URL does not exist on the PostgreSQL server (SQLSTATE 3D000); create it, or correct the URL"
            }
            Self::NotLeaseHolder => {
                "this harness does not hold its agent's lease: another harness serves the agent now (or this one lost the database for longer than the lease), so it writes nothing"
            }
            Self::FilePermissionDenied => {
                "permission denied on the store's directory or file: the process's user may not create or write it (check the owner and mode of the state directory)"
            }
        })
    }
}

/// The permanent refusal a PostgreSQL error stands for, if it is one: the server's SQLSTATE when
/// it sent one, else a certificate rejected by this client during the TLS handshake.
fn postgres_refusal(error: &tokio_postgres::Error) -> Option<PermanentReason> {
    match error.code() {
        Some(code) => sqlstate_refusal(code),
        None => certificate_rejected_in(error).then_some(PermanentReason::CertificateRejected),
    }
}

/// The SQLSTATEs that mean "not without a change on the server or in the URL". They arrive
/// during the startup handshake, so an open and every reconnect meet them.
fn sqlstate_refusal(code: &SqlState) -> Option<PermanentReason> {
    if *code == SqlState::INVALID_PASSWORD {
        Some(PermanentReason::AuthenticationFailed)
    } else if *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION {
        Some(PermanentReason::RoleNotAdmitted)
    } else if *code == SqlState::INVALID_CATALOG_NAME {
        Some(PermanentReason::DatabaseMissing)
    } else {
        None
    }
}

/// Whether this client rejected the server's certificate somewhere among `error`'s causes.
///
/// `tokio-postgres` keeps the TLS failure as its error's source; `tokio-rustls` reports a failed
/// handshake as an [`io::Error`] wrapping the [`rustls::Error`]. `io::Error::source` skips the
/// error it wraps (it returns that error's own source), so each `io::Error` in the chain is
/// also opened with [`io::Error::get_ref`].
fn certificate_rejected_in(error: &(dyn Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(e) = cause {
        let wrapped = e.downcast_ref::<io::Error>().and_then(io::Error::get_ref);
        if is_certificate_rejection(e)
            || wrapped.is_some_and(|inner| certificate_rejected_in(inner))
        {
            return true;
        }
        cause = e.source();
    }
    false
}

/// A rustls verification failure of the peer's certificate (any [`rustls::CertificateError`]:
/// unknown issuer, wrong name, expired, …).
fn is_certificate_rejection(error: &(dyn Error + 'static)) -> bool {
    matches!(
        error.downcast_ref::<rustls::Error>(),
        Some(rustls::Error::InvalidCertificate(_))
    )
}

/// A file-system refusal that lasts: permission denied.
fn io_refusal(error: &io::Error) -> Option<PermanentReason> {
    (error.kind() == io::ErrorKind::PermissionDenied)
        .then_some(PermanentReason::FilePermissionDenied)
}

/// An SQLite refusal that lasts: the database's directory may not be written, so its log
/// (`-wal`, `-shm`) cannot be created next to it.
///
/// The opens of this crate create the directory and the database file with std first, so a
/// permission problem with either arrives as [`StoreError::Io`]; this is the one that arrives
/// later, from SQLite, when the file is there and the directory is not writable. SQLite's
/// other codes for a file it cannot open or write (`SQLITE_CANTOPEN`, `SQLITE_READONLY`) do
/// not say why (a permission, a read-only mount, a full disk, a journal another process must
/// recover first), and the errno behind them is not in the error, so they stay transient.
fn sqlite_refusal(error: &rusqlite::Error) -> Option<PermanentReason> {
    // SQLite returns this extended code only when creating a journal or log failed with EACCES.
    error
        .sqlite_error()
        .is_some_and(|e| e.extended_code == rusqlite::ffi::SQLITE_READONLY_DIRECTORY)
        .then_some(PermanentReason::FilePermissionDenied)
}

/// An error and its causes, `: `-separated: `tokio-postgres` keeps the reason (a certificate
/// problem, the server's message) in the cause, not in its own text.
fn with_causes(error: &dyn Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        text.push_str(": ");
        text.push_str(&e.to_string());
        cause = e.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io_store_error(kind: io::ErrorKind) -> StoreError {
        StoreError::Io {
            path: PathBuf::from("/var/lib/buzz/sessions.sqlite3"),
            op: "create database file",
            source: io::Error::from(kind),
        }
    }

    /// An error that only says "see my source", as an application wrapper would.
    #[derive(Debug)]
    struct Wrapper(io::Error);

    impl fmt::Display for Wrapper {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("error performing TLS handshake")
        }
    }

    impl Error for Wrapper {
        fn source(&self) -> Option<&(dyn Error + 'static)> {
            Some(&self.0)
        }
    }

    /// What `tokio-rustls` returns when rustls refuses the handshake with `error`.
    fn handshake_failure(error: rustls::Error) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, error)
    }

    #[test]
    fn the_refusing_sqlstates_are_permanent_and_others_are_not() {
        assert_eq!(
            sqlstate_refusal(&SqlState::INVALID_PASSWORD),
            Some(PermanentReason::AuthenticationFailed)
        );
        assert_eq!(
            sqlstate_refusal(&SqlState::INVALID_AUTHORIZATION_SPECIFICATION),
            Some(PermanentReason::RoleNotAdmitted)
        );
        assert_eq!(
            sqlstate_refusal(&SqlState::INVALID_CATALOG_NAME),
            Some(PermanentReason::DatabaseMissing)
        );
        // What a restart, a failover, an overload or a contended row looks like: all pass.
        for passing in [
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CANNOT_CONNECT_NOW,
            SqlState::TOO_MANY_CONNECTIONS,
            SqlState::QUERY_CANCELED,
            SqlState::T_R_SERIALIZATION_FAILURE,
            SqlState::T_R_DEADLOCK_DETECTED,
            SqlState::LOCK_NOT_AVAILABLE,
            SqlState::READ_ONLY_SQL_TRANSACTION,
        ] {
            assert_eq!(sqlstate_refusal(&passing), None, "{}", passing.code());
        }
    }

    #[test]
    fn a_rejected_certificate_is_found_inside_the_io_error_that_carries_it() {
        for rejection in [
            rustls::CertificateError::UnknownIssuer,
            rustls::CertificateError::NotValidForName,
            rustls::CertificateError::Expired,
        ] {
            let carried = handshake_failure(rustls::Error::InvalidCertificate(rejection.clone()));
            assert!(certificate_rejected_in(&carried), "{rejection:?}");
            // One level further down, behind an error that only names its source.
            assert!(
                certificate_rejected_in(&Wrapper(handshake_failure(
                    rustls::Error::InvalidCertificate(rejection.clone())
                ))),
                "{rejection:?} behind a wrapper"
            );
            // The rustls error itself, not wrapped.
            let bare = rustls::Error::InvalidCertificate(rejection);
            assert!(certificate_rejected_in(&bare));
        }
    }

    #[test]
    fn other_handshake_and_connection_failures_are_not_certificate_rejections() {
        let not_certificates: Vec<Box<dyn Error>> = vec![
            Box::new(handshake_failure(rustls::Error::AlertReceived(
                rustls::AlertDescription::HandshakeFailure,
            ))),
            Box::new(Wrapper(io::Error::from(io::ErrorKind::ConnectionRefused))),
            Box::new(Wrapper(io::Error::from(io::ErrorKind::ConnectionReset))),
            Box::new(io::Error::other("invalid peer certificate: UnknownIssuer")),
        ];
        for error in &not_certificates {
            assert!(!certificate_rejected_in(error.as_ref()), "{error}");
        }
    }

    #[test]
    fn permission_denied_on_the_store_files_is_permanent_other_io_failures_pass() {
        assert_eq!(
            io_store_error(io::ErrorKind::PermissionDenied).healing(),
            Healing::Permanent {
                reason: PermanentReason::FilePermissionDenied
            }
        );
        for passing in [
            io::ErrorKind::TimedOut,
            io::ErrorKind::NotFound,
            io::ErrorKind::Interrupted,
            io::ErrorKind::StorageFull,
        ] {
            assert_eq!(
                io_store_error(passing).healing(),
                Healing::Transient,
                "{passing:?}"
            );
        }
    }

    fn sqlite_store_error(extended_code: i32) -> StoreError {
        StoreError::Sqlite {
            path: PathBuf::from("/var/lib/buzz/sessions.sqlite3"),
            op: "enable WAL",
            source: rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(extended_code), None),
        }
    }

    #[test]
    fn only_a_directory_sqlite_may_not_write_in_is_a_permanent_sqlite_refusal() {
        assert_eq!(
            sqlite_store_error(rusqlite::ffi::SQLITE_READONLY_DIRECTORY).healing(),
            Healing::Permanent {
                reason: PermanentReason::FilePermissionDenied
            }
        );
        // Codes that do not say why: a permission, a full disk, a busy or locked file.
        for passing in [
            rusqlite::ffi::SQLITE_CANTOPEN,
            rusqlite::ffi::SQLITE_READONLY,
            rusqlite::ffi::SQLITE_READONLY_RECOVERY,
            rusqlite::ffi::SQLITE_BUSY,
            rusqlite::ffi::SQLITE_FULL,
            rusqlite::ffi::SQLITE_IOERR,
        ] {
            assert_eq!(
                sqlite_store_error(passing).healing(),
                Healing::Transient,
                "{passing}"
            );
        }
    }

    #[test]
    fn errors_that_are_not_refusals_are_transient() {
        let errors = [
            StoreError::Unavailable {
                target: "postgres://buzz@db:5432/buzz".into(),
                op: "get",
                reason: "no answer within 10s".into(),
            },
            StoreError::Config {
                reason: "unknown sslmode".into(),
            },
            StoreError::NotFound {
                location: "/nowhere".into(),
            },
        ];
        for error in errors {
            assert_eq!(error.healing(), Healing::Transient, "{error}");
        }
    }

    #[test]
    fn every_reason_reads_as_an_operator_instruction() {
        let reasons = [
            (PermanentReason::CertificateRejected, "sslrootcert"),
            (PermanentReason::AuthenticationFailed, "password"),
            (PermanentReason::RoleNotAdmitted, "pg_hba.conf"),
            (PermanentReason::DatabaseMissing, "does not exist"),
            (PermanentReason::FilePermissionDenied, "permission denied"),
        ];
        for (reason, says) in reasons {
            assert!(reason.to_string().contains(says), "{reason:?}: {reason}");
            let healing = Healing::Permanent { reason }.to_string();
            assert!(
                healing.starts_with("permanent: ") && healing.contains(&reason.to_string()),
                "{healing}"
            );
        }
        assert!(Healing::Transient.to_string().starts_with("transient"));
    }
}
