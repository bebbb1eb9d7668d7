//! The processed-event cursor: which relay lines are fully handled.
//!
//! A line is *handled* once it was filtered out, or once the turn it triggered
//! ended for good (answered, cancelled or dead-lettered). Work that was queued
//! or in flight when the process stopped is not handled, so a restart picks it
//! up again; handled work is never redone.
//!
//! The cursor is a byte watermark (every line before it is handled) plus the
//! offsets of lines handled out of order beyond it. It lives in
//! `<state-dir>/cursor-<pubkey>-<relay hash>.json` and is replaced atomically.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

const CURSOR_VERSION: u32 = 1;

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
        "cursor file {path} is unreadable ({message}); fix it, or delete it to re-answer \
         every event in the relay"
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CursorFile {
    version: u32,
    relay: String,
    watermark: u64,
    handled: Vec<u64>,
}

/// Which relay lines are handled.
#[derive(Debug)]
pub struct Cursor {
    path: PathBuf,
    relay: String,
    watermark: u64,
    handled: BTreeSet<u64>,
    pending: BTreeMap<u64, u64>,
    seen_end: u64,
}

impl Cursor {
    /// Loads (or starts) the cursor of `agent_pubkey` on `relay_identity`.
    pub fn load(
        state_dir: &Path,
        agent_pubkey: &str,
        relay_identity: &str,
    ) -> Result<Self, CursorError> {
        let relay_hash = hex::encode(Sha256::digest(relay_identity.as_bytes()));
        let path = state_dir.join(format!("cursor-{agent_pubkey}-{}.json", &relay_hash[..12]));
        let mut cursor = Cursor {
            path,
            relay: relay_identity.to_string(),
            watermark: 0,
            handled: BTreeSet::new(),
            pending: BTreeMap::new(),
            seen_end: 0,
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
        let file: CursorFile = serde_json::from_slice(&raw).map_err(|e| corrupt(e.to_string()))?;
        if file.version != CURSOR_VERSION {
            return Err(corrupt(format!("unsupported version {}", file.version)));
        }
        if file.relay != relay_identity {
            return Err(corrupt(format!("written for relay {}", file.relay)));
        }
        cursor.watermark = file.watermark;
        cursor.seen_end = file.watermark;
        cursor.handled = file
            .handled
            .into_iter()
            .filter(|o| *o >= file.watermark)
            .collect();
        Ok(cursor)
    }

    /// Where the cursor is stored.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the line at `offset` was handled in this or an earlier run.
    pub fn is_handled(&self, offset: u64) -> bool {
        offset < self.watermark || self.handled.contains(&offset)
    }

    /// Notes a line that still needs handling.
    pub fn track(&mut self, offset: u64, end: u64) {
        self.seen_end = self.seen_end.max(end);
        if !self.is_handled(offset) {
            self.pending.insert(offset, end);
        }
    }

    /// Marks a line handled (idempotent) and advances the watermark. The
    /// caller persists with [`Cursor::save`].
    pub fn mark_handled(&mut self, offset: u64, end: u64) {
        self.seen_end = self.seen_end.max(end);
        self.pending.remove(&offset);
        if offset >= self.watermark {
            self.handled.insert(offset);
        }
        let new_watermark = self
            .pending
            .first_key_value()
            .map(|(o, _)| *o)
            .unwrap_or(self.seen_end);
        if new_watermark > self.watermark {
            self.watermark = new_watermark;
            self.handled = self.handled.split_off(&new_watermark);
        }
    }

    /// Number of lines known but not yet handled.
    pub fn pending_count(&self) -> usize {
        self.pending.len()
    }

    /// Writes the cursor atomically (temp file, fsync, rename).
    pub fn save(&self) -> Result<(), CursorError> {
        let io = |source| CursorError::Io {
            path: self.path.clone(),
            source,
        };
        if let Some(dir) = self.path.parent() {
            fs::create_dir_all(dir).map_err(io)?;
        }
        let body = serde_json::to_vec_pretty(&CursorFile {
            version: CURSOR_VERSION,
            relay: self.relay.clone(),
            watermark: self.watermark,
            handled: self.handled.iter().copied().collect(),
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

    const PK: &str = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1";

    #[test]
    fn watermark_advances_over_contiguous_handled_lines_only() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Cursor::load(dir.path(), PK, "file:///r").unwrap();
        c.track(0, 10);
        c.track(10, 20);
        c.track(20, 30);
        c.mark_handled(10, 20);
        assert!(c.is_handled(10) && !c.is_handled(0) && !c.is_handled(20));
        c.mark_handled(0, 10);
        assert!(c.is_handled(0) && c.is_handled(10));
        assert_eq!(c.pending_count(), 1);
        c.mark_handled(20, 30);
        assert_eq!(c.pending_count(), 0);
        c.save().unwrap();

        let again = Cursor::load(dir.path(), PK, "file:///r").unwrap();
        assert!(again.is_handled(0) && again.is_handled(20) && !again.is_handled(30));
    }

    #[test]
    fn out_of_order_handled_lines_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = Cursor::load(dir.path(), PK, "file:///r").unwrap();
        c.track(0, 10);
        c.track(10, 20);
        c.mark_handled(10, 20);
        c.save().unwrap();
        let again = Cursor::load(dir.path(), PK, "file:///r").unwrap();
        assert!(
            !again.is_handled(0),
            "unfinished work is redone after a restart"
        );
        assert!(again.is_handled(10), "finished work is not");
    }

    #[test]
    fn corrupt_or_foreign_cursor_is_refused_with_a_way_out() {
        let dir = tempfile::tempdir().unwrap();
        let c = Cursor::load(dir.path(), PK, "file:///r").unwrap();
        fs::write(c.path(), b"{garbage").unwrap();
        let err = Cursor::load(dir.path(), PK, "file:///r").unwrap_err();
        assert!(err.to_string().contains("delete it"), "{err}");

        let mut other = Cursor::load(tempfile::tempdir().unwrap().path(), PK, "file:///r").unwrap();
        other.mark_handled(0, 5);
        let foreign = CursorFile {
            version: 1,
            relay: "file:///elsewhere".into(),
            watermark: 5,
            handled: vec![],
        };
        fs::write(c.path(), serde_json::to_vec(&foreign).unwrap()).unwrap();
        assert!(Cursor::load(dir.path(), PK, "file:///r").is_err());
    }
}
