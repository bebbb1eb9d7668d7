//! Importing the old JSON receipt file into a store, once.
//!
//! The JSON store kept `<state_dir>/sessions-<agent_pubkey>.json` (format 1: per channel, format
//! 2: per scope). On open, the harness's store imports that file if it is ours (same relay and agent key, a
//! format the scheme reads), inserting only receipts for keys the store does not have yet (a
//! shared database may already hold newer ones), and then renames the file to
//! `sessions-<agent_pubkey>.json.migrated` as the backup. The rename is what makes the import
//! happen once; the import is idempotent, so a crash between the two only repeats it.
//!
//! The old writer lock (`….json.lock`) is held while reading and renaming, so an old harness still
//! running during a rolling deploy cannot write between the read and the rename. Any file that is
//! not ours, or not readable, is left exactly as it is and reported.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::StoreError;
use crate::fsio::{self, Raw};
use crate::key::{KeyScheme, StoreScope};
use crate::legacy::{self, MAX_STORE_BYTES, Problem, json_store_paths};
use crate::receipt_store::{ImportOutcome, ReceiptStore, StoredReceipt, UnixMillis};

/// How long the import waits for an old harness's writer lock.
const LOCK_TIMEOUT: Duration = Duration::from_secs(5);

/// What the import found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Migration {
    /// No JSON store for this agent key in the state directory.
    NoLegacyFile,
    /// The file was imported and renamed to `backup`.
    Imported {
        /// The file that was read.
        from: PathBuf,
        /// Where it is now.
        backup: PathBuf,
        /// What the store did with its receipts.
        outcome: ImportOutcome,
        /// Entries of the file that were not usable (bad key, empty session id) and not imported.
        dropped: usize,
    },
    /// The file was left untouched.
    Skipped {
        /// The file.
        path: PathBuf,
        /// Why, e.g. another relay's file, malformed, newer format.
        reason: String,
    },
}

/// Imports the JSON store of `scope` from `state_dir` into `store` (see the module docs).
///
/// # Errors
/// The store's import failed or the file could not be renamed after a successful import (the
/// import is then repeated, harmlessly, on the next open).
pub fn import_json_store(
    state_dir: &Path,
    scope: &StoreScope,
    scheme: KeyScheme,
    store: &dyn ReceiptStore,
    now: UnixMillis,
) -> Result<Migration, StoreError> {
    let Some((path, lock_path)) = json_store_paths(state_dir, &scope.agent_pubkey) else {
        return Ok(Migration::NoLegacyFile);
    };
    if fs::symlink_metadata(&path).is_err() {
        return Ok(Migration::NoLegacyFile);
    }
    let _lock = fsio::lock(&lock_path, LOCK_TIMEOUT)?;
    let skipped = |reason: String| Migration::Skipped {
        path: path.clone(),
        reason,
    };
    let bytes = match fsio::read_capped(&path, MAX_STORE_BYTES) {
        Raw::Missing => return Ok(Migration::NoLegacyFile),
        Raw::Bytes(bytes) => bytes,
        Raw::Oversize => {
            return Ok(skipped(format!(
                "larger than the JSON store's {MAX_STORE_BYTES}-byte cap"
            )));
        }
        Raw::Symlink => return Ok(skipped("a symlink (not followed)".into())),
        Raw::Unreadable(e) => return Ok(skipped(format!("unreadable: {e}"))),
    };
    let decoded = match legacy::decode(&bytes, scope, scheme) {
        Ok(decoded) => decoded,
        Err(Problem::Malformed(e)) => return Ok(skipped(format!("malformed: {e}"))),
        Err(Problem::Future { version }) => {
            return Ok(skipped(format!(
                "format version {version}, newer than the {scheme:?} key scheme reads"
            )));
        }
        Err(Problem::Foreign { found }) => {
            return Ok(skipped(format!(
                "belongs to relay {:?} and agent {:?}",
                found.relay, found.agent_pubkey
            )));
        }
    };
    for dropped in &decoded.dropped {
        tracing::warn!(path = %path.display(), entry = %dropped, "session store: an entry of the old JSON receipt file is not imported");
    }
    let receipts: Vec<StoredReceipt> = decoded
        .sessions
        .into_iter()
        .map(|(key, record)| StoredReceipt {
            key,
            record,
            last_used: now,
        })
        .collect();
    let outcome = store.import(&receipts)?;
    let backup = backup_path(&path);
    fs::rename(&path, &backup)
        .map_err(|source| fsio::io_error(&path, "rename the imported JSON store to", source))?;
    tracing::info!(from = %path.display(), backup = %backup.display(), outcome = ?outcome, dropped = decoded.dropped.len(), "session store: imported the JSON receipt file");
    Ok(Migration::Imported {
        from: path,
        backup,
        outcome,
        dropped: decoded.dropped.len(),
    })
}

/// `<file>.migrated`, or `<file>.migrated-<n>` if an earlier backup exists.
fn backup_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut candidate = path.with_file_name(format!("{name}.migrated"));
    let mut n = 1;
    while fs::symlink_metadata(&candidate).is_ok() {
        candidate = path.with_file_name(format!("{name}.migrated-{n}"));
        n += 1;
    }
    candidate
}
