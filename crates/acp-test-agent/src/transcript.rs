//! The on-disk session transcript: `<state-dir>/sessions/<session-id>.json`.
//!
//! The file is the only thing that survives an agent restart, so it is the source of truth for
//! `session/load` and `session/resume`. It is versioned and parsed with `deny_unknown_fields` so a
//! format drift fails loudly instead of silently dropping history. Writes go to a unique temporary
//! file in the same directory, are synced, and then renamed over the target, so a reader (another
//! agent process sharing the state dir) never sees a half-written transcript.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// The transcript format version this crate writes and accepts.
pub const TRANSCRIPT_VERSION: u32 = 1;

/// One prompt turn: what the user sent and what the agent answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Turn {
    /// The prompt's text blocks joined with `\n`.
    pub user: String,
    /// The full reply text; empty when the turn was cancelled before the agent answered.
    pub agent: String,
}

/// Everything the agent knows about one session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Transcript {
    /// Format version, always [`TRANSCRIPT_VERSION`] for files this crate writes.
    pub version: u32,
    /// The session id, repeated inside the file so a copied file is still self-describing.
    pub session_id: String,
    /// The working directory `session/new` was given.
    pub cwd: PathBuf,
    /// The `mcpServers` array `session/new` was given, kept verbatim (the agent never connects).
    pub mcp_servers: serde_json::Value,
    /// The `_meta` object `session/new` was given (sessionTitle, channelId, ...), kept opaque so
    /// tests can check what the client sent.
    pub meta: Option<serde_json::Value>,
    /// Current value of the `model` config option.
    pub model: String,
    /// Current value of the `mode` config option.
    pub mode: String,
    /// The prompt turns, oldest first.
    pub turns: Vec<Turn>,
}

/// Why a transcript could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum TranscriptError {
    /// No transcript exists for that session id.
    #[error("no transcript at {}", path.display())]
    NotFound {
        /// The path that was looked up.
        path: PathBuf,
    },
    /// Reading, writing or renaming the file failed.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was being done ("reading", "writing", "renaming to").
        action: &'static str,
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// The file is not a valid transcript.
    #[error("parsing {}: {source}", path.display())]
    Parse {
        /// The file involved.
        path: PathBuf,
        /// The JSON error, which names the offending field or line.
        source: serde_json::Error,
    },
    /// The transcript could not be encoded as JSON (not expected: every field is plain data).
    #[error("encoding {}: {source}", path.display())]
    Encode {
        /// The file that was to be written.
        path: PathBuf,
        /// The JSON error.
        source: serde_json::Error,
    },
    /// The file has a `version` this crate does not understand.
    #[error("{}: unsupported transcript version {found} (expected {TRANSCRIPT_VERSION})", path.display())]
    Version {
        /// The file involved.
        path: PathBuf,
        /// The version found in the file.
        found: u32,
    },
}

impl Transcript {
    /// The directory holding every transcript of a state dir.
    #[must_use]
    pub fn dir(state_dir: &Path) -> PathBuf {
        state_dir.join("sessions")
    }

    /// Where the transcript of `session_id` lives.
    #[must_use]
    pub fn path(state_dir: &Path, session_id: &str) -> PathBuf {
        Self::dir(state_dir).join(format!("{session_id}.json"))
    }

    /// Reads and validates the transcript of `session_id`.
    ///
    /// # Errors
    ///
    /// [`TranscriptError::NotFound`] if there is none, otherwise I/O, parse or version errors.
    pub fn read(state_dir: &Path, session_id: &str) -> Result<Self, TranscriptError> {
        let path = Self::path(state_dir, session_id);
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(TranscriptError::NotFound { path });
            }
            Err(source) => {
                return Err(TranscriptError::Io {
                    action: "reading",
                    path,
                    source,
                });
            }
        };
        let transcript: Self =
            serde_json::from_str(&text).map_err(|source| TranscriptError::Parse {
                path: path.clone(),
                source,
            })?;
        if transcript.version != TRANSCRIPT_VERSION {
            return Err(TranscriptError::Version {
                path,
                found: transcript.version,
            });
        }
        Ok(transcript)
    }

    /// Writes the transcript atomically (unique temp file, fsync, rename).
    ///
    /// The temp name carries the pid and a process-wide counter so concurrent writers, in this
    /// process or another one sharing the state dir, never clobber each other's temp files.
    ///
    /// # Errors
    ///
    /// I/O errors, naming the file that failed.
    pub fn write(&self, state_dir: &Path) -> Result<(), TranscriptError> {
        static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);
        let dir = Self::dir(state_dir);
        fs::create_dir_all(&dir).map_err(|source| TranscriptError::Io {
            action: "creating",
            path: dir.clone(),
            source,
        })?;
        let target = Self::path(state_dir, &self.session_id);
        let temp = dir.join(format!(
            ".{}.{}.{}.tmp",
            self.session_id,
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let mut bytes =
            serde_json::to_vec_pretty(self).map_err(|source| TranscriptError::Encode {
                path: target.clone(),
                source,
            })?;
        bytes.push(b'\n');
        let write_temp = || -> io::Result<()> {
            let mut file = fs::File::create(&temp)?;
            file.write_all(&bytes)?;
            file.sync_all()
        };
        if let Err(source) = write_temp() {
            // Best effort: a stray temp file is harmless, the error below is what matters.
            let _ = fs::remove_file(&temp);
            return Err(TranscriptError::Io {
                action: "writing",
                path: temp,
                source,
            });
        }
        fs::rename(&temp, &target).map_err(|source| TranscriptError::Io {
            action: "renaming to",
            path: target,
            source,
        })
    }

    /// The user texts of every turn, oldest first.
    pub fn user_texts(&self) -> impl Iterator<Item = &str> {
        self.turns.iter().map(|turn| turn.user.as_str())
    }

    /// Cumulative UTF-8 bytes of all user text, reported as `used` in `usage_update`.
    #[must_use]
    pub fn user_bytes(&self) -> u64 {
        self.turns.iter().map(|turn| turn.user.len() as u64).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(id: &str) -> Transcript {
        Transcript {
            version: TRANSCRIPT_VERSION,
            session_id: id.to_owned(),
            cwd: PathBuf::from("/work"),
            mcp_servers: serde_json::json!([]),
            meta: Some(serde_json::json!({"sessionTitle": "t"})),
            model: "test-small".to_owned(),
            mode: "default".to_owned(),
            turns: vec![Turn {
                user: "hi".to_owned(),
                agent: "yo".to_owned(),
            }],
        }
    }

    #[test]
    fn round_trip_and_no_temp_left() {
        let dir = tempfile::tempdir().unwrap();
        let t = sample("ts-1");
        t.write(dir.path()).unwrap();
        assert_eq!(Transcript::read(dir.path(), "ts-1").unwrap(), t);
        let names: Vec<_> = fs::read_dir(Transcript::dir(dir.path()))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names, ["ts-1.json"]);
    }

    #[test]
    fn missing_unknown_field_and_version_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            Transcript::read(dir.path(), "nope"),
            Err(TranscriptError::NotFound { .. })
        ));
        let mut value = serde_json::to_value(sample("ts-2")).unwrap();
        value["extra"] = serde_json::json!(1);
        fs::create_dir_all(Transcript::dir(dir.path())).unwrap();
        fs::write(Transcript::path(dir.path(), "ts-2"), value.to_string()).unwrap();
        let err = Transcript::read(dir.path(), "ts-2").unwrap_err();
        assert!(err.to_string().contains("extra"), "{err}");

        let mut future = sample("ts-3");
        future.version = 99;
        future.write(dir.path()).unwrap();
        assert!(matches!(
            Transcript::read(dir.path(), "ts-3"),
            Err(TranscriptError::Version { found: 99, .. })
        ));
    }
}
