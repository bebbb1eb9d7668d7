//! The request log: one JSON line per completion request, for measurements.
//!
//! A measurement wants to know what the model had to re-read on each call (bytes, user
//! messages, the facts it saw, what a prompt cache could have served, whether the call was a
//! conversation turn or one the adapter made on its own) without parsing adapter output. The
//! record format is ours, so it is read back strictly (`deny_unknown_fields`).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::prompt::RequestKind;

/// What the fake did with a completion request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Answered with a completion.
    Answered,
    /// Rejected: the prompt's estimated tokens exceed the model's window.
    ContextOverflow,
}

/// One completion request as the log records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestRecord {
    /// The request path (without the query string).
    pub path: String,
    /// The `model` field of the request, if any.
    pub model: Option<String>,
    /// Size of the request body in bytes: what the model had to read.
    pub bytes: usize,
    /// User messages in the request's conversation.
    pub user_messages: usize,
    /// `word-1234` tokens in the request, sorted.
    pub nonces: Vec<String>,
    /// Whether the request asked for a stream.
    pub stream: bool,
    /// Conversation turn (the request offers tools) or background call (it offers none).
    pub kind: RequestKind,
    /// The fake clock when the request arrived, in milliseconds since the server started.
    pub at_ms: u64,
    /// Bytes of the prompt laid out in cache order ([`crate::prompt::Prompt`]): what the
    /// token counts and cache figures are made of.
    pub prompt_bytes: usize,
    /// Of those, bytes a prompt cache with a 5-minute lifetime could have served.
    pub cached_bytes_5m: usize,
    /// Of those, bytes a prompt cache with a 1-hour lifetime could have served.
    pub cached_bytes_1h: usize,
    /// Estimated input tokens of the prompt (bytes / 4).
    pub input_tokens: u64,
    /// Input tokens the answer reported as read from cache.
    pub cache_read_tokens: u64,
    /// Output tokens the answer reported (0 when rejected).
    pub output_tokens: u64,
    /// The window of the request's model, in tokens.
    pub context_limit_tokens: u64,
    /// Answered, or rejected for context overflow.
    pub outcome: Outcome,
}

/// Why the log could not be opened, written or read.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// Opening or writing failed.
    #[error("request log {}: {source}", path.display())]
    Io {
        /// The log file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A line is not a [`RequestRecord`].
    #[error("request log {} line {line}: {source}", path.display())]
    Malformed {
        /// The log file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The cause.
        source: serde_json::Error,
    },
}

/// An append-only JSONL file shared by every connection (a std mutex: nothing awaits while it
/// is held, and each record is one small write).
#[derive(Debug)]
pub struct RequestLog {
    path: PathBuf,
    file: Mutex<std::fs::File>,
}

impl RequestLog {
    /// Opens (creating if needed) `path` for appending.
    ///
    /// # Errors
    ///
    /// [`LogError::Io`] when the file cannot be opened.
    pub fn open(path: &Path) -> Result<Self, LogError> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|source| LogError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(Self {
            path: path.to_path_buf(),
            file: Mutex::new(file),
        })
    }

    /// Appends one record as a single line.
    ///
    /// # Errors
    ///
    /// [`LogError::Io`] when the write fails.
    pub fn append(&self, record: &RequestRecord) -> Result<(), LogError> {
        let mut line = serde_json::to_vec(record).map_err(|e| LogError::Io {
            path: self.path.clone(),
            source: std::io::Error::other(e),
        })?;
        line.push(b'\n');
        // A poisoned lock only means another writer panicked mid-call; the file is still usable.
        let mut file = self
            .file
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        file.write_all(&line).map_err(|source| LogError::Io {
            path: self.path.clone(),
            source,
        })
    }
}

/// Reads every record of a log written by [`RequestLog`]. A missing file is an empty log.
///
/// # Errors
///
/// [`LogError`] when the file cannot be read or a line is not a record.
pub fn read_log(path: &Path) -> Result<Vec<RequestRecord>, LogError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(LogError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            serde_json::from_str(l).map_err(|source| LogError::Malformed {
                path: path.to_path_buf(),
                line: i + 1,
                source,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_and_reads_back_strictly() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.jsonl");
        assert!(read_log(&path).unwrap().is_empty());
        let log = RequestLog::open(&path).unwrap();
        let record = RequestRecord {
            path: "/v1/messages".into(),
            model: Some("m".into()),
            bytes: 42,
            user_messages: 2,
            nonces: vec!["alpha-7301".into()],
            stream: true,
            kind: RequestKind::Turn,
            at_ms: 60_000,
            prompt_bytes: 40,
            cached_bytes_5m: 20,
            cached_bytes_1h: 30,
            input_tokens: 10,
            cache_read_tokens: 5,
            output_tokens: 3,
            context_limit_tokens: 200_000,
            outcome: Outcome::Answered,
        };
        log.append(&record).unwrap();
        log.append(&record).unwrap();
        assert_eq!(read_log(&path).unwrap(), [record.clone(), record]);
        std::fs::write(&path, "{\"path\":\"/x\",\"extra\":1}\n").unwrap();
        let err = read_log(&path).unwrap_err().to_string();
        assert!(err.contains("line 1"), "{err}");
    }
}
