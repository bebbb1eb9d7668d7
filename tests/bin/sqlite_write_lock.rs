//! `sqlite-write-lock DB`: holds the write lock of a SQLite database from another process, the
//! way a second harness mid-write holds it during a rolling deploy, until told to let go.
//!
//! It opens `DB`, begins an exclusive transaction (in WAL mode: the one write lock; readers go on
//! reading), prints `locked` on stdout, and waits for a line (or the end) on stdin. Then it rolls
//! the transaction back, prints `released` and exits. The store-outage scenarios
//! (`e2e/store_outage.rs`) drive it; SQLite's file locks are per process, so another thread of
//! the test process could not stand in for it.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// Holds a SQLite database's write lock until stdin says so.
#[derive(Debug, Parser)]
struct Args {
    /// The database file (it must exist).
    db: PathBuf,
}

/// What went wrong, with what was being done.
#[derive(Debug, thiserror::Error)]
enum LockError {
    #[error("{what} {}: {source}", db.display())]
    Sqlite {
        what: &'static str,
        db: PathBuf,
        #[source]
        source: rusqlite::Error,
    },
    #[error("talking to the test: {0}")]
    Io(#[from] std::io::Error),
}

fn hold(db: PathBuf) -> Result<(), LockError> {
    let sqlite = |what: &'static str, db: &PathBuf| {
        let db = db.clone();
        move |source| LockError::Sqlite { what, db, source }
    };
    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE;
    let conn = rusqlite::Connection::open_with_flags(&db, flags).map_err(sqlite("open", &db))?;
    conn.execute_batch("BEGIN EXCLUSIVE")
        .map_err(sqlite("begin an exclusive transaction on", &db))?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "locked")?;
    stdout.flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    conn.execute_batch("ROLLBACK")
        .map_err(sqlite("roll back the transaction on", &db))?;
    writeln!(stdout, "released")?;
    stdout.flush()?;
    Ok(())
}

fn main() -> ExitCode {
    let args = Args::parse();
    match hold(args.db) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sqlite-write-lock: {e}");
            ExitCode::FAILURE
        }
    }
}
