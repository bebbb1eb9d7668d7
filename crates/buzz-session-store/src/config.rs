//! Choosing and opening a receipt store from the harness's configuration.
//!
//! The harness flattens [`StoreArgs`] into its own flags (`#[command(flatten)]`), turns them into a
//! [`StoreConfig`] with its relay, agent key and state directory, and calls [`open`]:
//!
//! ```text
//! --session-store-url URL     BUZZ_ACP_SESSION_STORE_URL     postgres://… | postgresql://…  → PostgreSQL
//!                                                             sqlite:PATH | PATH              → SQLite at PATH
//!                                                             (unset)     → SQLite at <state-dir>/sessions.sqlite3
//! --max-session-receipts N    BUZZ_ACP_MAX_SESSION_RECEIPTS  LRU cap per (relay, agent key), default 50000
//! ```
//!
//! A relative SQLite path is resolved against the state directory, not the working directory, so a
//! daemon started from anywhere finds the same file.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::error::StoreError;
use crate::fence::Fence;
use crate::key::{KeyScheme, StoreScope};
use crate::migrate::{self, Migration};
use crate::pg::{PgOptions, PgStore};
use crate::receipt_store::{ReceiptStore, UnixMillis};
use crate::sqlite::{self, SqliteStore};

/// Default least-recently-used cap per (relay, agent key). A receipt with a full ledger takes
/// about 1.6 KB on disk (measured, see docs/STORE.md), so the default bounds a scope to roughly
/// 80 MB, while a thread is only forgotten after 50,000 other threads were active since it was.
pub const DEFAULT_MAX_RECEIPTS: usize = 50_000;

/// The store flags, for `#[command(flatten)]` into the harness's command line.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct StoreArgs {
    /// Where session receipts live: `postgres://…` (or `postgresql://…`) for a PostgreSQL
    /// database shared by several harnesses, `sqlite:PATH` or a plain PATH for the embedded
    /// store (relative paths are inside the state directory). Default: SQLite at
    /// `<state-dir>/sessions.sqlite3`.
    #[arg(
        long = "session-store-url",
        env = "BUZZ_ACP_SESSION_STORE_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    pub session_store_url: Option<String>,

    /// Most session receipts kept per (relay, agent key). Beyond it the least recently used are
    /// evicted; a new thread is never refused.
    #[arg(
        long = "max-session-receipts",
        env = "BUZZ_ACP_MAX_SESSION_RECEIPTS",
        value_name = "N",
        default_value_t = DEFAULT_MAX_RECEIPTS,
        value_parser = parse_cap
    )]
    pub max_session_receipts: usize,

    /// The lease token this harness's writes must carry (PostgreSQL only): set at run time by
    /// the lease's keeper, never from the command line. `None`: writes are not fenced.
    #[arg(skip)]
    pub fence: Option<Fence>,
}

impl StoreArgs {
    /// The backend these flags select for a harness whose state directory is `state_dir`.
    ///
    /// # Errors
    /// [`StoreError::Config`] for a URL of an unsupported kind.
    pub fn backend(&self, state_dir: &Path) -> Result<Backend, StoreError> {
        Backend::from_url(self.session_store_url.as_deref(), state_dir)
    }
}

fn parse_cap(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(format!("not a number of receipts: {e}")),
    }
}

/// Which backend, and where.
#[derive(Clone, PartialEq, Eq)]
pub enum Backend {
    /// The embedded SQLite database at this path.
    Sqlite {
        /// The database file.
        path: PathBuf,
    },
    /// A PostgreSQL database.
    Postgres {
        /// The connection URL (may hold a password: never logged, see the `Debug` impl).
        url: String,
    },
}

impl Backend {
    /// Parses a store URL (see the module docs); `None` or blank means the default SQLite file.
    ///
    /// # Errors
    /// [`StoreError::Config`] for a URL with another scheme (e.g. `mysql://`).
    pub fn from_url(url: Option<&str>, state_dir: &Path) -> Result<Backend, StoreError> {
        let url = url.map(str::trim).filter(|u| !u.is_empty());
        let Some(url) = url else {
            return Ok(Backend::Sqlite {
                path: state_dir.join(sqlite::DEFAULT_FILE_NAME),
            });
        };
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            return Ok(Backend::Postgres {
                url: url.to_owned(),
            });
        }
        let path = match url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
        {
            Some(path) => path,
            None if url.contains("://") => {
                let scheme = url.split("://").next().unwrap_or_default();
                return Err(StoreError::Config {
                    reason: format!(
                        "unsupported session store URL scheme {scheme:?}: use postgres://, postgresql://, sqlite:PATH or a file path"
                    ),
                });
            }
            None => url,
        };
        if path.is_empty() {
            return Err(StoreError::Config {
                reason: "the sqlite: URL names no file".into(),
            });
        }
        Ok(Backend::Sqlite {
            path: state_dir.join(path),
        })
    }
}

/// Shows the backend without any password.
impl fmt::Debug for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Sqlite { path } => f.debug_struct("Sqlite").field("path", path).finish(),
            Self::Postgres { url } => f
                .debug_struct("Postgres")
                .field("url", &redact(url))
                .finish(),
        }
    }
}

/// `postgres://user:***@host/db` for a URL with a password; the URL itself otherwise.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) if userinfo.contains(':') => {
            let user = userinfo.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:***@{host}{tail}")
        }
        _ => url.to_owned(),
    }
}

/// Everything [`open`] needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// Which backend.
    pub backend: Backend,
    /// Whose receipts: the relay URL and the agent key (rows are keyed by both).
    pub scope: StoreScope,
    /// How finely receipts are keyed.
    pub scheme: KeyScheme,
    /// The LRU cap per scope (at least 1).
    pub max_receipts: usize,
    /// The harness's state directory, searched for an old JSON store to import.
    pub state_dir: PathBuf,
    /// The lease token every write must carry (PostgreSQL only; see [`crate::fence`]).
    pub fence: Option<Fence>,
}

impl StoreConfig {
    /// The configuration from the flags plus the harness's own identity.
    ///
    /// # Errors
    /// [`StoreError::Config`] for a URL of an unsupported kind.
    pub fn from_args(
        args: &StoreArgs,
        scope: StoreScope,
        scheme: KeyScheme,
        state_dir: &Path,
    ) -> Result<Self, StoreError> {
        Ok(Self {
            backend: args.backend(state_dir)?,
            scope,
            scheme,
            max_receipts: args.max_session_receipts,
            state_dir: state_dir.to_path_buf(),
            fence: args.fence.clone(),
        })
    }
}

/// Opens the configured store and imports an old JSON store from the state directory (once).
///
/// A failed import is logged and leaves the JSON file as it is; it never prevents the open.
///
/// # Errors
/// [`StoreError::Config`] for an empty agent key or relay or a zero cap; otherwise whatever
/// prevented the backend from opening. The harness logs it and runs without resume.
pub fn open(config: &StoreConfig) -> Result<Box<dyn ReceiptStore>, StoreError> {
    open_with_report(config, UnixMillis::now()).map(|opened| opened.store)
}

/// An opened store and what its JSON import did.
#[derive(Debug)]
pub struct Opened {
    /// The store.
    pub store: Box<dyn ReceiptStore>,
    /// The import of an old JSON store (already logged); an error left the file as it was.
    pub migration: Result<Migration, StoreError>,
}

/// [`open`], also returning what the JSON import did; `now` stamps imported receipts.
///
/// # Errors
/// As [`open`].
pub fn open_with_report(config: &StoreConfig, now: UnixMillis) -> Result<Opened, StoreError> {
    if config.scope.agent_pubkey.trim().is_empty() || config.scope.relay.trim().is_empty() {
        return Err(StoreError::Config {
            reason: format!(
                "receipts are keyed by relay and agent key, and one is empty (relay {:?}, agent key {:?})",
                config.scope.relay, config.scope.agent_pubkey
            ),
        });
    }
    let store: Box<dyn ReceiptStore> = match &config.backend {
        Backend::Sqlite { path } => Box::new(SqliteStore::open(
            path,
            config.scope.clone(),
            config.scheme,
            config.max_receipts,
        )?),
        Backend::Postgres { url } => Box::new(PgStore::open_with(
            url,
            config.scope.clone(),
            config.scheme,
            config.max_receipts,
            PgOptions {
                fence: config.fence.clone(),
                ..PgOptions::default()
            },
        )?),
    };
    let migration = migrate::import_json_store(
        &config.state_dir,
        &config.scope,
        config.scheme,
        store.as_ref(),
        now,
    );
    match &migration {
        Ok(Migration::Skipped { path, reason }) => {
            tracing::warn!(path = %path.display(), %reason, "session store: left the old JSON receipt file as it is (not imported)");
        }
        Err(e) => {
            tracing::warn!(error = %e, "session store: importing the old JSON receipt file failed; it is left as it is and retried on the next start");
        }
        Ok(Migration::NoLegacyFile | Migration::Imported { .. }) => {}
    }
    Ok(Opened { store, migration })
}

/// How an operator's tool opens a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Reads only: the store must exist; no schema migration, no registration, no JSON import.
    ReadOnly,
    /// Reads and writes: the schema is created or migrated as the harness would, but no JSON
    /// file is imported (that is the harness's job at its start).
    ReadWrite,
}

/// Opens the store of `scope` on `backend` for an operator's tool (never imports a JSON file).
///
/// # Errors
/// [`StoreError::NotFound`] for a read-only open of a store that does not exist; otherwise what
/// prevented the backend from opening.
pub fn open_backend(
    backend: &Backend,
    scope: StoreScope,
    scheme: KeyScheme,
    max_receipts: usize,
    mode: OpenMode,
) -> Result<Box<dyn ReceiptStore>, StoreError> {
    Ok(match (backend, mode) {
        (Backend::Sqlite { path }, OpenMode::ReadOnly) => {
            Box::new(SqliteStore::open_read_only(path, scope, scheme)?)
        }
        (Backend::Sqlite { path }, OpenMode::ReadWrite) => {
            if !path.exists() {
                return Err(StoreError::NotFound {
                    location: path.display().to_string(),
                });
            }
            Box::new(SqliteStore::open(path, scope, scheme, max_receipts)?)
        }
        (Backend::Postgres { url }, OpenMode::ReadOnly) => {
            Box::new(PgStore::open_read_only(url, scope, scheme)?)
        }
        (Backend::Postgres { url }, OpenMode::ReadWrite) => {
            Box::new(PgStore::open(url, scope, scheme, max_receipts)?)
        }
    })
}

/// Every store scope registered on `backend`, with its receipt count (read-only).
///
/// # Errors
/// As [`open_backend`] read-only.
pub fn store_scopes(backend: &Backend) -> Result<Vec<(StoreScope, usize)>, StoreError> {
    match backend {
        Backend::Sqlite { path } => SqliteStore::scopes_at(path),
        Backend::Postgres { url } => PgStore::scopes_at(url),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        store: StoreArgs,
    }

    #[test]
    fn urls_select_the_backend() {
        let dir = Path::new("/var/lib/buzz");
        let sqlite = |p: &str| Backend::Sqlite {
            path: PathBuf::from(p),
        };
        assert_eq!(
            Backend::from_url(None, dir).unwrap(),
            sqlite("/var/lib/buzz/sessions.sqlite3")
        );
        assert_eq!(
            Backend::from_url(Some("  "), dir).unwrap(),
            sqlite("/var/lib/buzz/sessions.sqlite3")
        );
        assert_eq!(
            Backend::from_url(Some("sqlite:/data/r.db"), dir).unwrap(),
            sqlite("/data/r.db")
        );
        assert_eq!(
            Backend::from_url(Some("sqlite:///data/r.db"), dir).unwrap(),
            sqlite("/data/r.db")
        );
        assert_eq!(
            Backend::from_url(Some("receipts.db"), dir).unwrap(),
            sqlite("/var/lib/buzz/receipts.db")
        );
        for url in ["postgres://u@db/buzz", "postgresql:///buzz?host=/run/pg"] {
            assert_eq!(
                Backend::from_url(Some(url), dir).unwrap(),
                Backend::Postgres { url: url.into() }
            );
        }
        for bad in ["mysql://db/buzz", "sqlite:"] {
            let err = Backend::from_url(Some(bad), dir).unwrap_err();
            assert!(matches!(err, StoreError::Config { .. }), "{bad}: {err:?}");
        }
    }

    #[test]
    fn passwords_never_show() {
        let backend = Backend::Postgres {
            url: "postgres://buzz:hunter2@db.internal:5432/receipts?sslmode=disable".into(),
        };
        let shown = format!("{backend:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(
            shown.contains("buzz:***@db.internal:5432/receipts"),
            "{shown}"
        );
        assert_eq!(redact("postgres://u@h/d"), "postgres://u@h/d");
    }

    #[test]
    fn flags_parse_with_defaults_and_reject_a_zero_cap() {
        let cli = Cli::try_parse_from(["x"]).unwrap();
        assert_eq!(cli.store.session_store_url, None);
        assert_eq!(cli.store.max_session_receipts, DEFAULT_MAX_RECEIPTS);
        let cli = Cli::try_parse_from([
            "x",
            "--session-store-url",
            "postgres://db/x",
            "--max-session-receipts",
            "10",
        ])
        .unwrap();
        assert_eq!(
            cli.store.backend(Path::new("/s")).unwrap(),
            Backend::Postgres {
                url: "postgres://db/x".into()
            }
        );
        assert_eq!(cli.store.max_session_receipts, 10);
        assert!(Cli::try_parse_from(["x", "--max-session-receipts", "0"]).is_err());
        assert!(Cli::try_parse_from(["x", "--max-session-receipts", "many"]).is_err());
    }

    #[test]
    fn an_empty_relay_or_agent_key_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        for (relay, agent) in [("", "ab"), ("wss://r", " ")] {
            let config = StoreConfig {
                backend: Backend::from_url(None, dir.path()).unwrap(),
                scope: StoreScope {
                    relay: relay.into(),
                    agent_pubkey: agent.into(),
                },
                scheme: KeyScheme::Scope,
                max_receipts: 10,
                state_dir: dir.path().to_path_buf(),
                fence: None,
            };
            assert!(matches!(open(&config), Err(StoreError::Config { .. })));
        }
    }
}
