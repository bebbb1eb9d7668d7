//! The processed-event cursor: what an earlier run already handled.
//!
//! An event is *handled* once it was filtered out, or once the turn it
//! triggered ended for good (answered, cancelled or dead-lettered). Work that
//! was queued or in flight when the process stopped is not handled, so a
//! restart picks it up again; handled work is not redone.
//!
//! The cursor holds:
//! * the relay **position** the harness had read up to, bound to the file it
//!   describes (device and inode) and to the bytes just before it (see
//!   [`LogPosition`]). Lines before it are handled, unless pending;
//! * the ids of **pending** events: admitted but not yet handled. It never
//!   lists handled lines, so it stays as small as the work in progress;
//! * the ids of the most recently handled addressed events (at most
//!   [`RECENT_HANDLED_LIMIT`]), so that when the file no longer matches the
//!   position (rotated, truncated, rewritten) events are still recognised by
//!   id. The relay's own replies, which name their triggers, cover the rest.
//!
//! It lives in `<state-dir>/cursor-<pubkey>-<relay hash>.json` and is replaced
//! atomically.

use std::collections::{BTreeSet, HashSet, VecDeque};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::relay::{Incoming, LogPosition};

/// The current file format.
const CURSOR_VERSION: u32 = 2;

/// How many handled event ids the cursor remembers.
pub const RECENT_HANDLED_LIMIT: usize = 256;

/// Errors of the cursor file.
#[derive(Debug, thiserror::Error)]
pub enum CursorError {
    /// Reading or writing the file failed.
    #[error("cursor file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file exists but cannot be trusted. Starting anyway would either
    /// answer every old event again or skip unanswered ones, so the harness
    /// refuses and says how to recover.
    #[error(
        "cursor file {path} is unreadable ({message}); fix it, or delete it to re-check every \
         event in the relay by id (answered ones are recognised by their replies)"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// Only the version, to choose the format before a strict parse.
#[derive(Deserialize)]
struct VersionProbe {
    version: u32,
}

/// Format 2 (0.10): position bound to the file, pending ids, recent ids.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct CursorFileV2 {
    version: u32,
    relay: String,
    position: Option<LogPosition>,
    pending: Vec<String>,
    recent: Vec<String>,
}

/// Format 1 (0.9): a byte watermark and offsets handled beyond it. Only
/// the watermark carries over (see [`Cursor::load`]).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CursorFileV1 {
    #[serde(rename = "version")]
    _version: u32,
    relay: String,
    watermark: u64,
    #[serde(rename = "handled")]
    _handled: Vec<u64>,
}

/// Where the cursor of `agent_pubkey` on `relay_identity` lives:
/// `<state-dir>/cursor-<pubkey>-<first 12 hex of sha256(relay identity)>.json`.
pub fn cursor_path(state_dir: &Path, agent_pubkey: &str, relay_identity: &str) -> PathBuf {
    let relay_hash = hex::encode(Sha256::digest(relay_identity.as_bytes()));
    state_dir.join(format!("cursor-{agent_pubkey}-{}.json", &relay_hash[..12]))
}

/// What an earlier run handled, and what this run has in progress.
#[derive(Debug)]
pub struct Cursor {
    path: PathBuf,
    relay: String,
    /// How far the relay has been read (persisted as is).
    position: Option<LogPosition>,
    /// Events an earlier run admitted but did not finish.
    resumed_pending: HashSet<String>,
    /// Events this run admitted and has not finished.
    pending: BTreeSet<String>,
    /// Recently handled addressed events, oldest first.
    recent: VecDeque<String>,
    recent_index: HashSet<String>,
    /// The file was written by an older format (reported once at startup).
    upgraded_from: Option<u32>,
}

impl Cursor {
    /// Loads (or starts) the cursor of `agent_pubkey` on `relay_identity`.
    pub fn load(
        state_dir: &Path,
        agent_pubkey: &str,
        relay_identity: &str,
    ) -> Result<Self, CursorError> {
        let path = cursor_path(state_dir, agent_pubkey, relay_identity);
        let mut cursor = Cursor {
            path,
            relay: relay_identity.to_string(),
            position: None,
            resumed_pending: HashSet::new(),
            pending: BTreeSet::new(),
            recent: VecDeque::new(),
            recent_index: HashSet::new(),
            upgraded_from: None,
        };
        let raw = match fs::read(&cursor.path) {
            Ok(raw) => raw,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(cursor),
            Err(source) => {
                return Err(CursorError::Io {
                    path: cursor.path,
                    source,
                });
            }
        };
        let corrupt = |message: String| CursorError::Corrupt {
            path: cursor.path.clone(),
            message,
        };
        let probe: VersionProbe =
            serde_json::from_slice(&raw).map_err(|e| corrupt(e.to_string()))?;
        let (relay, position, pending, recent) = match probe.version {
            CURSOR_VERSION => {
                let file: CursorFileV2 =
                    serde_json::from_slice(&raw).map_err(|e| corrupt(e.to_string()))?;
                (file.relay, file.position, file.pending, file.recent)
            }
            1 => {
                // 0.9 recorded neither the file nor its bytes: its watermark
                // is trusted as far as the file is long enough. Lines it had
                // handled out of order beyond the watermark are re-checked by
                // id (answered ones are recognised by their replies).
                let file: CursorFileV1 =
                    serde_json::from_slice(&raw).map_err(|e| corrupt(e.to_string()))?;
                cursor.upgraded_from = Some(1);
                let position = LogPosition {
                    file: None,
                    offset: file.watermark,
                    tail: None,
                };
                (file.relay, Some(position), Vec::new(), Vec::new())
            }
            other => return Err(corrupt(format!("unsupported version {other}"))),
        };
        if relay != relay_identity {
            return Err(corrupt(format!("written for relay {relay}")));
        }
        cursor.position = position;
        cursor.resumed_pending = pending.into_iter().collect();
        for id in recent {
            cursor.remember(id);
        }
        Ok(cursor)
    }

    /// Where the cursor is stored.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The relay position an earlier run had read up to.
    pub fn position(&self) -> Option<&LogPosition> {
        self.position.as_ref()
    }

    /// The format version the file was upgraded from, if it was.
    pub fn upgraded_from(&self) -> Option<u32> {
        self.upgraded_from
    }

    /// Whether `line` was handled before it was read in this run: it lies
    /// before the resume position and was not pending then, or its event is
    /// among the recently handled ones.
    pub fn handled_before(&self, line: &Incoming) -> bool {
        match &line.event {
            Ok(event) => {
                (line.before_resume && !self.resumed_pending.contains(&event.id))
                    || self.recent_index.contains(&event.id)
            }
            Err(_) => line.before_resume,
        }
    }

    /// Notes an admitted event that still needs handling.
    pub fn track(&mut self, event_id: &str) {
        self.pending.insert(event_id.to_string());
    }

    /// Marks an addressed event handled (idempotent). The caller persists
    /// with [`Cursor::save`].
    pub fn mark_handled(&mut self, event_id: &str) {
        self.pending.remove(event_id);
        self.remember(event_id.to_string());
    }

    fn remember(&mut self, id: String) {
        if self.recent_index.contains(&id) {
            return;
        }
        self.recent_index.insert(id.clone());
        self.recent.push_back(id);
        while self.recent.len() > RECENT_HANDLED_LIMIT {
            if let Some(old) = self.recent.pop_front() {
                self.recent_index.remove(&old);
            }
        }
    }

    /// Records how far the relay has been read (saved with the next
    /// [`Cursor::save`]).
    pub fn advance(&mut self, position: Option<LogPosition>) {
        if position.is_some() {
            self.position = position;
        }
    }

    /// Number of events admitted but not yet handled.
    pub fn pending_count(&self) -> usize {
        self.pending.len()
    }

    /// Writes the cursor atomically (temp file, fsync, rename).
    pub fn save(&self) -> Result<(), CursorError> {
        let io = |source| CursorError::Io {
            path: self.path.clone(),
            source,
        };
        let body = serde_json::to_vec_pretty(&CursorFileV2 {
            version: CURSOR_VERSION,
            relay: self.relay.clone(),
            position: self.position.clone(),
            pending: self.pending.iter().cloned().collect(),
            recent: self.recent.iter().cloned().collect(),
        })
        .map_err(|e| io(std::io::Error::other(e)))?;
        let tmp = self
            .path
            .with_extension(format!("json.tmp-{}", std::process::id()));
        let result = (|| {
            let mut f = fs::File::create(&tmp)?;
            f.write_all(&body)?;
            f.sync_all()?;
            fs::rename(&tmp, &self.path)
        })();
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result.map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::{ChannelId, Event, EventBuilder, FileIdentity};

    const PK: &str = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1";

    fn event(n: u64) -> Event {
        let ch = ChannelId::parse("0b8e2d4c-1f3a-4c5e-9d7b-2a6f8e1c3b5d").unwrap();
        EventBuilder::message(PK, &ch, "x").created_at(n).build()
    }

    fn line(event: &Event, before_resume: bool) -> Incoming {
        Incoming {
            offset: 0,
            end: 1,
            event: Ok(event.clone()),
            replayed: false,
            before_resume,
        }
    }

    fn position(offset: u64) -> Option<LogPosition> {
        Some(LogPosition {
            file: Some(FileIdentity {
                device: 1,
                inode: 2,
            }),
            offset,
            tail: None,
        })
    }

    #[test]
    fn pending_work_survives_a_restart_and_handled_work_does_not_come_back() {
        let dir = tempfile::tempdir().unwrap();
        let (done, open) = (event(1), event(2));
        let mut c = Cursor::load(dir.path(), PK, "file:///r").unwrap();
        c.track(&done.id);
        c.track(&open.id);
        c.mark_handled(&done.id);
        c.advance(position(100));
        assert_eq!(c.pending_count(), 1);
        c.save().unwrap();

        let again = Cursor::load(dir.path(), PK, "file:///r").unwrap();
        assert_eq!(again.position(), position(100).as_ref());
        assert!(again.handled_before(&line(&done, true)));
        assert!(
            !again.handled_before(&line(&open, true)),
            "unfinished work is redone after a restart"
        );
        assert!(
            again.handled_before(&line(&done, false)),
            "handled events are recognised by id even when the position no longer covers them"
        );
        assert!(!again.handled_before(&line(&event(3), false)));
    }

    #[test]
    fn the_file_lists_pending_and_a_bounded_set_of_handled_ids_never_every_line() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Cursor::load(dir.path(), PK, "file:///r").unwrap();
        let stuck = event(0);
        c.track(&stuck.id);
        for n in 1..=(RECENT_HANDLED_LIMIT as u64 * 4) {
            let e = event(n);
            c.track(&e.id);
            c.mark_handled(&e.id);
        }
        c.save().unwrap();
        let file: CursorFileV2 = serde_json::from_slice(&fs::read(c.path()).unwrap()).unwrap();
        assert_eq!(file.pending, vec![stuck.id.clone()]);
        assert_eq!(file.recent.len(), RECENT_HANDLED_LIMIT);
        assert_eq!(
            file.recent.last(),
            Some(&event(RECENT_HANDLED_LIMIT as u64 * 4).id)
        );
    }

    #[test]
    fn a_version_one_cursor_is_upgraded_to_a_position_without_identity() {
        let dir = tempfile::tempdir().unwrap();
        let path = Cursor::load(dir.path(), PK, "file:///r")
            .unwrap()
            .path()
            .to_path_buf();
        fs::write(
            &path,
            r#"{"version":1,"relay":"file:///r","watermark":420,"handled":[500]}"#,
        )
        .unwrap();
        let c = Cursor::load(dir.path(), PK, "file:///r").unwrap();
        assert_eq!(c.upgraded_from(), Some(1));
        assert_eq!(
            c.position(),
            Some(&LogPosition {
                file: None,
                offset: 420,
                tail: None
            })
        );
    }

    #[test]
    fn corrupt_foreign_or_future_cursors_are_refused_with_a_way_out() {
        let dir = tempfile::tempdir().unwrap();
        let c = Cursor::load(dir.path(), PK, "file:///r").unwrap();
        fs::write(c.path(), b"{garbage").unwrap();
        let err = Cursor::load(dir.path(), PK, "file:///r").unwrap_err();
        assert!(err.to_string().contains("delete it"), "{err}");

        let foreign = CursorFileV2 {
            version: 2,
            relay: "file:///elsewhere".into(),
            position: None,
            pending: vec![],
            recent: vec![],
        };
        fs::write(c.path(), serde_json::to_vec(&foreign).unwrap()).unwrap();
        assert!(Cursor::load(dir.path(), PK, "file:///r").is_err());

        fs::write(c.path(), br#"{"version":3}"#).unwrap();
        let err = Cursor::load(dir.path(), PK, "file:///r").unwrap_err();
        assert!(err.to_string().contains("unsupported version 3"), "{err}");

        fs::write(
            c.path(),
            br#"{"version":2,"relay":"file:///r","position":null,"pending":[],"recent":[],"x":1}"#,
        )
        .unwrap();
        assert!(
            Cursor::load(dir.path(), PK, "file:///r").is_err(),
            "unknown fields are refused"
        );
    }
}
