//! The receipt file: one JSON document per agent key, shared by every harness process using it.
//!
//! ```text
//! <state_dir>/sessions-<agent_pubkey>.json        the store (0600, pretty JSON, trailing newline)
//! <state_dir>/sessions-<agent_pubkey>.json.lock   writer lock (0600, never deleted)
//! ```
//!
//! Every write takes the lock, re-reads the file, applies ONE operation and atomically replaces
//! the file, so overlapping processes (a rolling deploy) never lose each other's records (#6088
//! item 4); the last writer wins per key. Reads take no lock: the rename makes them atomic.
//!
//! A file that cannot be used reads as empty, with one warning per kind per store instance:
//! * malformed or oversize: corrupt. It stays writable, but is first moved aside to
//!   `<file>.corrupt-<unix seconds>` so replacing it loses nothing;
//! * a newer format version (including a version-2 file under the `Channel` scheme, i.e. a
//!   downgrade) or another relay's or agent's scope: someone else's. The store turns
//!   [`StoreStatus::ReadOnly`] and never writes it, because overwriting would destroy another
//!   harness's or a newer version's records;
//! * a symlink at the store path: not followed; a write replaces the link, never its target.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use crate::error::StoreError;

use crate::delivery::bound_delivered;
use crate::format::{self, Dropped, Problem};
use crate::fsio::{self, Raw};
use crate::key::{KeyScheme, ScopeKey};
use crate::record::{DeliveryRecord, SessionRecord};
use crate::row;

/// Largest store file that is parsed (4 MiB). A larger file is treated as corrupt, and a write that
/// would produce one sheds delivery ledgers first or is refused, so the store never writes a file
/// it would then refuse to read.
pub const MAX_STORE_BYTES: usize = 4 * 1024 * 1024;

/// How long a write waits for another writer's lock before giving up on this write.
const LOCK_TIMEOUT: Duration = Duration::from_secs(5);

/// Whose receipts a file holds. `session/load` sends only an opaque id, so a file written for
/// another relay (community) or agent key must never be read, even if a channel UUID collides
/// (#6088 item 1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StoreScope {
    /// Relay URL, compared exactly (callers should pass one canonical spelling).
    pub relay: String,
    /// The agent's public key; also part of the file name, so it must be ASCII alphanumeric.
    pub agent_pubkey: String,
}

/// What the store will do with the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreStatus {
    /// No store configured (or an unusable configuration): remembers nothing.
    Disabled,
    /// Reads and writes.
    Enabled,
    /// The file belongs to someone else (newer version, other scope): it is not read and never
    /// written for the rest of this store's life.
    ReadOnly {
        /// Why, for logs and diagnostics.
        reason: String,
    },
}

/// Durable receipts for one (relay, agent key). Send + Sync; every method is short and blocking.
#[derive(Debug)]
pub struct SessionStore {
    /// Key mapping and format version.
    scheme: KeyScheme,
    /// `None` for a disabled store.
    file: Option<FileStore>,
}

/// The parts of an enabled store.
#[derive(Debug)]
struct FileStore {
    /// `<state_dir>/sessions-<agent_pubkey>.json`.
    path: PathBuf,
    /// `<path>.lock`.
    lock_path: PathBuf,
    /// The state directory, re-created if it disappears.
    dir: PathBuf,
    /// Whose receipts these are.
    scope: StoreScope,
    /// Parse cap; [`MAX_STORE_BYTES`] except in tests.
    limit: usize,
    /// Status and warned-once flags; never held across file I/O.
    shared: Mutex<Shared>,
}

#[derive(Debug)]
struct Shared {
    /// Starts `Enabled`; becomes `ReadOnly` (for good) once the file is seen to be someone else's.
    status: StoreStatus,
    /// Kinds already warned about: a store read on every turn must not log on every turn.
    warned: HashSet<Warning>,
}

/// One warning kind, logged at most once per store instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Warning {
    DirCreate,
    Unreadable,
    Symlink,
    Oversize,
    Malformed,
    NotOurs,
    BadKey,
    EmptySessionId,
    ReadOnlyWrite,
    Shed,
}

/// What the file currently holds, as far as this store may use it.
enum View {
    /// Usable records (none for a missing file or a symlink).
    Records(BTreeMap<ScopeKey, SessionRecord>),
    /// Malformed or oversize: reads as empty, moved aside before it is replaced.
    Corrupt,
    /// Someone else's file: reads as empty, never written.
    NotOurs,
    /// Could not be read: reads as empty; a write refuses rather than replace unknown content.
    Unreadable(StoreError),
}

/// The JSON store file of `agent_pubkey` in `state_dir` and its writer lock, or `None` when the key
/// cannot name a file (it must be non-empty ASCII alphanumeric). The store and the one-time import
/// must agree on these names, or the import would read one file while an old harness writes
/// another.
pub(crate) fn json_store_paths(state_dir: &Path, agent_pubkey: &str) -> Option<(PathBuf, PathBuf)> {
    let usable =
        !agent_pubkey.is_empty() && agent_pubkey.bytes().all(|b| b.is_ascii_alphanumeric());
    usable.then(|| {
        let path = state_dir.join(format!("sessions-{agent_pubkey}.json"));
        let lock_path = fsio::with_suffix(&path, ".lock");
        (path, lock_path)
    })
}

impl SessionStore {
    /// Opens (never fails) the store for `scope` in `state_dir`.
    ///
    /// Creates a missing state directory with mode 0700 and reads the file once to decide the
    /// status and warn about problems. A `scope.agent_pubkey` that is not a non-empty ASCII
    /// alphanumeric string (it becomes part of a file name) yields a disabled store.
    pub fn open(state_dir: &Path, scope: StoreScope, scheme: KeyScheme) -> SessionStore {
        let Some((path, lock_path)) = json_store_paths(state_dir, &scope.agent_pubkey) else {
            tracing::warn!(
                agent_pubkey = %scope.agent_pubkey,
                "session store disabled: the agent key is not usable in a file name"
            );
            return Self { scheme, file: None };
        };
        let store = Self {
            scheme,
            file: Some(FileStore {
                lock_path,
                path,
                dir: state_dir.to_path_buf(),
                scope,
                limit: MAX_STORE_BYTES,
                shared: Mutex::new(Shared {
                    status: StoreStatus::Enabled,
                    warned: HashSet::new(),
                }),
            }),
        };
        if let Some(file) = &store.file {
            if let Err(e) = fsio::ensure_dir(&file.dir) {
                file.warn_once(Warning::DirCreate, || {
                    tracing::warn!(error = %e, "session store: cannot create the state directory; writes will fail");
                });
            }
            // Decides the status (ReadOnly) and logs the first warning of each kind.
            drop(store.view(file));
            tracing::info!(
                path = %file.path.display(),
                scheme = ?scheme,
                status = ?file.status(),
                "session store opened"
            );
        }
        store
    }

    /// A store that remembers nothing; every operation is a no-op returning `Ok`/`None`.
    pub fn disabled() -> SessionStore {
        Self {
            scheme: KeyScheme::Scope,
            file: None,
        }
    }

    /// The store file, `None` when disabled.
    pub fn path(&self) -> Option<&Path> {
        self.file.as_ref().map(|f| f.path.as_path())
    }

    /// Current status; `ReadOnly` once the file has been seen to belong to someone else.
    pub fn status(&self) -> StoreStatus {
        self.file
            .as_ref()
            .map_or(StoreStatus::Disabled, FileStore::status)
    }

    /// The key scheme (`Scope` for [`SessionStore::disabled`]).
    pub fn scheme(&self) -> KeyScheme {
        self.scheme
    }

    /// The receipt for `key`, read fresh from disk (another process may have written since).
    pub fn get(&self, key: &ScopeKey) -> Option<SessionRecord> {
        let file = self.file.as_ref()?;
        match self.view(file) {
            View::Records(mut sessions) => sessions.remove(&self.scheme.map(key)),
            View::Corrupt | View::NotOurs | View::Unreadable(_) => None,
        }
    }

    /// Every usable receipt, sorted by key (for tests and diagnostics).
    pub fn records(&self) -> Vec<(ScopeKey, SessionRecord)> {
        match self.file.as_ref().map(|file| self.view(file)) {
            Some(View::Records(sessions)) => sessions.into_iter().collect(),
            _ => Vec::new(),
        }
    }

    /// Stores `record` for `key`, replacing any previous receipt (last writer wins).
    ///
    /// # Errors
    /// [`StoreError::Invalid`] for a key that could never be read back or an empty session id;
    /// otherwise any I/O or size failure of the write.
    pub fn put(&self, key: &ScopeKey, record: SessionRecord) -> Result<(), StoreError> {
        if self.file.is_none() {
            return Ok(());
        }
        let key = self.scheme.map(key);
        row::check_put(&key, &record)?;
        let record = record.normalized();
        self.mutate("put", &key, |sessions| {
            if sessions.get(&key) == Some(&record) {
                return ((), false);
            }
            sessions.insert(key.clone(), record);
            ((), true)
        })
    }

    /// Forgets the receipt for `key` and returns it.
    ///
    /// # Errors
    /// Any I/O or size failure of the write.
    pub fn remove(&self, key: &ScopeKey) -> Result<Option<SessionRecord>, StoreError> {
        let key = self.scheme.map(key);
        self.mutate("remove", &key, |sessions| {
            let removed = sessions.remove(&key);
            let changed = removed.is_some();
            (removed, changed)
        })
    }

    /// Forgets the receipt for `key` only if it still names `session_id`; another process may
    /// have stored a newer session there since this one was loaded (#2633 item 16).
    ///
    /// # Errors
    /// Any I/O or size failure of the write.
    pub fn remove_if_session(&self, key: &ScopeKey, session_id: &str) -> Result<bool, StoreError> {
        let key = self.scheme.map(key);
        self.mutate("remove_if_session", &key, |sessions| {
            let matches = sessions
                .get(&key)
                .is_some_and(|r| r.session_id == session_id);
            if matches {
                sessions.remove(&key);
            }
            (matches, matches)
        })
    }

    /// Forgets every receipt of a channel: its conversation and all its threads. Returns how many.
    ///
    /// # Errors
    /// Any I/O or size failure of the write.
    pub fn remove_channel(&self, channel_id: &str) -> Result<usize, StoreError> {
        let channel = channel_id.to_ascii_lowercase();
        let key = ScopeKey::conversation(&channel);
        self.mutate("remove_channel", &key, |sessions| {
            let before = sessions.len();
            sessions.retain(|k, _| k.channel_id() != channel);
            let removed = before - sessions.len();
            (removed, removed > 0)
        })
    }

    /// Commits a successful turn's deliveries into the receipt, but only while the receipt still
    /// names `session_id`: a late commit from a replaced session must not pollute its successor.
    ///
    /// ORs in `standing_sent` and sets the ids to [`bound_delivered`]`(existing, new_ids,
    /// live_window)`. Returns `true` when the receipt names the session and now reflects the commit
    /// (written only if something changed), `false` when the guard refused it or the store does not
    /// write (disabled, read-only).
    ///
    /// # Errors
    /// Any I/O or size failure of the write.
    pub fn commit_delivery(
        &self,
        key: &ScopeKey,
        session_id: &str,
        standing_sent: bool,
        new_ids: &[String],
        live_window: &HashSet<String>,
    ) -> Result<bool, StoreError> {
        let key = self.scheme.map(key);
        self.mutate("commit_delivery", &key, |sessions| {
            let Some(record) = sessions.get_mut(&key) else {
                return (false, false);
            };
            if record.session_id != session_id {
                return (false, false);
            }
            let old = record.delivery.clone().unwrap_or_default();
            let new = DeliveryRecord {
                standing_context_sent: old.standing_context_sent || standing_sent,
                delivered_event_ids: bound_delivered(
                    &old.delivered_event_ids,
                    new_ids,
                    live_window,
                ),
            };
            let changed = record.delivery.as_ref() != Some(&new);
            record.delivery = Some(new);
            (true, changed)
        })
    }

    /// Reads and classifies the file, warning once per kind and turning read-only when the file
    /// is someone else's.
    fn view(&self, file: &FileStore) -> View {
        let path = file.path.as_path();
        let bytes = match fsio::read_capped(path, file.limit) {
            Raw::Missing => return View::Records(BTreeMap::new()),
            Raw::Bytes(bytes) => bytes,
            Raw::Symlink => {
                file.warn_once(Warning::Symlink, || {
                    tracing::warn!(path = %path.display(), "session store: the store path is a symlink; not following it, reading as empty (a write replaces the link, not its target)");
                });
                return View::Records(BTreeMap::new());
            }
            Raw::Oversize => {
                file.warn_once(Warning::Oversize, || {
                    tracing::warn!(path = %path.display(), limit = file.limit, "session store: file is over the size cap; reading as empty (it is moved aside before the next write)");
                });
                return View::Corrupt;
            }
            Raw::Unreadable(e) => {
                file.warn_once(Warning::Unreadable, || {
                    tracing::warn!(path = %path.display(), error = %e, "session store: cannot read the store file; reading as empty and not writing over it");
                });
                return View::Unreadable(fsio::io_error(path, "read", e));
            }
        };
        match format::decode(&bytes, &file.scope, self.scheme) {
            Ok(decoded) => {
                for dropped in &decoded.dropped {
                    file.warn_dropped(dropped);
                }
                View::Records(decoded.sessions)
            }
            Err(Problem::Malformed(detail)) => {
                file.warn_once(Warning::Malformed, || {
                    tracing::warn!(path = %path.display(), %detail, "session store: malformed store file; reading as empty (it is moved aside before the next write)");
                });
                View::Corrupt
            }
            Err(Problem::Future { version }) => {
                let reason = format!(
                    "the store file has format version {version}, newer than this harness's {} (written by a newer harness, or this is a downgrade)",
                    self.scheme.format_version()
                );
                file.mark_not_ours(reason);
                View::NotOurs
            }
            Err(Problem::Foreign { found }) => {
                let reason = format!(
                    "the store file belongs to relay {:?} and agent {:?}, not relay {:?} and agent {:?}",
                    found.relay, found.agent_pubkey, file.scope.relay, file.scope.agent_pubkey
                );
                file.mark_not_ours(reason);
                View::NotOurs
            }
        }
    }

    /// The one write path: lock, re-read, apply `op`, write if it changed anything.
    ///
    /// `T::default()` is the "did nothing" answer of every operation (`()`, `None`, `false`, `0`),
    /// returned for a disabled or read-only store.
    fn mutate<T: Default>(
        &self,
        op: &'static str,
        key: &ScopeKey,
        apply: impl FnOnce(&mut BTreeMap<ScopeKey, SessionRecord>) -> (T, bool),
    ) -> Result<T, StoreError> {
        let Some(file) = &self.file else {
            return Ok(T::default());
        };
        if file.refuse_if_read_only(op) {
            return Ok(T::default());
        }
        fsio::ensure_dir(&file.dir)?;
        let _lock = fsio::lock(&file.lock_path, LOCK_TIMEOUT)?;
        let (mut sessions, corrupt) = match self.view(file) {
            View::Records(sessions) => (sessions, false),
            View::Corrupt => (BTreeMap::new(), true),
            View::NotOurs => {
                file.refuse_if_read_only(op);
                return Ok(T::default());
            }
            View::Unreadable(e) => return Err(e),
        };
        let (out, changed) = apply(&mut sessions);
        if !changed {
            return Ok(out);
        }
        if corrupt {
            let moved = fsio::quarantine(&file.path)?;
            tracing::warn!(
                path = %file.path.display(),
                moved_to = %moved.display(),
                "session store: moved the unreadable store file aside before replacing it"
            );
        }
        let bytes = self.encode_within_limit(file, key, &mut sessions)?;
        fsio::write_atomic(&file.path, &bytes)?;
        tracing::debug!(path = %file.path.display(), op, scope = %key, records = sessions.len(), "session store written");
        Ok(out)
    }

    /// Encodes the document; if it would exceed the cap, drops delivery ledgers until it fits:
    /// other scopes' first, largest first, and `current` (the scope just written, whose ledger is
    /// the freshest) last. Losing a ledger only means re-sending one history window once.
    fn encode_within_limit(
        &self,
        file: &FileStore,
        current: &ScopeKey,
        sessions: &mut BTreeMap<ScopeKey, SessionRecord>,
    ) -> Result<Vec<u8>, StoreError> {
        let mut bytes = format::encode(&file.scope, self.scheme, sessions)?;
        if bytes.len() <= file.limit {
            return Ok(bytes);
        }
        let mut ledgers: Vec<(usize, ScopeKey)> = sessions
            .iter()
            .filter_map(|(key, record)| {
                let delivery = record.delivery.as_ref()?;
                let size = serde_json::to_vec_pretty(delivery).map_or(0, |v| v.len());
                Some((size, key.clone()))
            })
            .collect();
        ledgers.sort_by_key(|(size, key)| (key == current, std::cmp::Reverse(*size)));
        let mut ledgers = ledgers.into_iter();
        let mut shed = 0usize;
        while bytes.len() > file.limit {
            // Estimates only undercount the saving (nesting adds indentation), so this rarely loops.
            let overflow = bytes.len() - file.limit;
            let mut saved = 0;
            let mut shed_now = 0;
            while saved < overflow {
                let Some((size, key)) = ledgers.next() else {
                    break;
                };
                if let Some(record) = sessions.get_mut(&key) {
                    record.delivery = None;
                }
                saved += size;
                shed_now += 1;
            }
            if shed_now == 0 {
                return Err(StoreError::TooLarge {
                    path: file.path.clone(),
                    bytes: bytes.len(),
                    limit: file.limit,
                });
            }
            shed += shed_now;
            bytes = format::encode(&file.scope, self.scheme, sessions)?;
        }
        file.warn_once(Warning::Shed, || {
            tracing::warn!(path = %file.path.display(), shed, "session store: file reached the size cap; dropped delivery ledgers (those sessions re-send their history window once)");
        });
        Ok(bytes)
    }

    /// Lowers the parse cap so size handling can be tested without multi-megabyte documents.
    #[cfg(test)]
    fn with_limit(mut self, limit: usize) -> Self {
        if let Some(file) = self.file.as_mut() {
            file.limit = limit;
        }
        self
    }
}

impl FileStore {
    fn shared(&self) -> MutexGuard<'_, Shared> {
        // Shared holds flags only; a panic elsewhere cannot leave them inconsistent.
        self.shared.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn status(&self) -> StoreStatus {
        self.shared().status.clone()
    }

    /// Runs `log` the first time `kind` happens in this store instance.
    fn warn_once(&self, kind: Warning, log: impl FnOnce()) {
        let first = self.shared().warned.insert(kind);
        if first {
            log();
        }
    }

    /// The file is someone else's: read-only for good, with one warning.
    fn mark_not_ours(&self, reason: String) {
        let newly = {
            let mut shared = self.shared();
            let newly = shared.status == StoreStatus::Enabled;
            if newly {
                shared.status = StoreStatus::ReadOnly {
                    reason: reason.clone(),
                };
            }
            newly && shared.warned.insert(Warning::NotOurs)
        };
        if newly {
            tracing::warn!(path = %self.path.display(), %reason, "session store is read-only: not reading or writing a file that belongs to someone else");
        }
    }

    /// `true` (after one warning) when the store must not write.
    fn refuse_if_read_only(&self, op: &'static str) -> bool {
        let StoreStatus::ReadOnly { reason } = self.status() else {
            return false;
        };
        self.warn_once(Warning::ReadOnlyWrite, || {
            tracing::warn!(path = %self.path.display(), op, %reason, "session store is read-only: receipts are not being saved");
        });
        true
    }

    fn warn_dropped(&self, dropped: &Dropped) {
        let path = self.path.display();
        match dropped {
            Dropped::BadKey(e) => self.warn_once(Warning::BadKey, || {
                tracing::warn!(path = %path, error = %e, "session store: dropping an entry with an invalid key");
            }),
            Dropped::ThreadInVersion1 { key } => self.warn_once(Warning::BadKey, || {
                tracing::warn!(path = %path, key = %key, "session store: dropping a thread key from a version-1 file (version 1 is per channel)");
            }),
            Dropped::EmptySessionId { key } => self.warn_once(Warning::EmptySessionId, || {
                tracing::warn!(path = %path, key = %key, "session store: dropping a receipt without a session id (a malformed binding is deleted, not resumed)");
            }),
        }
    }
}

#[cfg(test)]
mod tests;
