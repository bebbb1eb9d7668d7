//! The relay: where chat events come from and where replies go.
//!
//! Upstream talks to a Nostr relay over a websocket and its REST side
//! ([`crate::nostr_relay`], [`crate::rest`]). This model also embeds a **file relay**: a
//! directory whose `events.jsonl` holds one NIP-01-shaped event per line and whose optional
//! `channels.json` describes the channels (name, stream or DM). The harness reads
//! `events.jsonl` both as its subscription (new lines) and as its history (context windows),
//! and appends its own replies to it. The format is documented in `docs/RELAY.md`. It stays for
//! tests that drive time (an in-process agent on tokio's paused clock cannot wait on a socket)
//! and for the scenarios written before the Nostr transport.
//!
//! Everything the event loop needs from a relay is behind the [`Relay`] trait.

use std::collections::HashMap;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::future::Future;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::event_index::EventIndex;
use crate::eventlog::{self, LogLine, TAIL_CHECK_BYTES, TailCheck};
pub use crate::eventlog::{Divergence, FileIdentity, LogPosition};

/// Kind of a channel (stream) message.
pub const KIND_STREAM_MESSAGE: u32 = 9;
/// Kind of an edit of an earlier message.
pub const KIND_EDIT: u32 = 40003;
/// Kind of a membership removal (NIP-29 style): the `p` tag names the member
/// removed from the `h` channel.
pub const KIND_REMOVE_MEMBER: u32 = 9001;

/// Largest `events.jsonl` line the relay accepts (a hostile or broken writer
/// cannot make the harness buffer without bound).
pub const MAX_EVENT_LINE_BYTES: usize = 1024 * 1024;

/// Errors of the relay layer.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// The relay directory is missing or not a directory.
    #[error("relay directory {path} is not a readable directory")]
    MissingDir {
        /// The configured directory.
        path: PathBuf,
    },
    /// An I/O failure on a relay file.
    #[error("relay file {path}: {source}")]
    Io {
        /// The file involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The network relay cannot be reached or read.
    #[error("relay: {what}: {reason}")]
    Network {
        /// What the harness was doing.
        what: String,
        /// What failed.
        reason: String,
    },
    /// The relay refused the agent's AUTH (NIP-42): its key is not allowed there.
    #[error("the relay refused the agent's authentication: {message}")]
    AuthRefused {
        /// The relay's `OK false` message.
        message: String,
    },
    /// The relay's REST side refused the agent's request (401 or 403: its key or its owner's
    /// attestation is not allowed there).
    #[error("relay: {what}: refused ({status}): {message}")]
    AccessRefused {
        /// What the harness was doing.
        what: String,
        /// The HTTP status.
        status: u16,
        /// The relay's error message.
        message: String,
    },
    /// `channels.json` does not parse.
    #[error("relay channel file {path} is malformed: {message}")]
    BadChannels {
        /// The file involved.
        path: PathBuf,
        /// What serde said.
        message: String,
    },
}

/// A channel id: a UUID in canonical lowercase form.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ChannelId(String);

/// A string that is not a UUID was given as a channel id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid channel id {0:?}: expected a UUID like 0b8e2d4c-1f3a-4c5e-9d7b-2a6f8e1c3b5d")]
pub struct InvalidChannelId(pub String);

impl ChannelId {
    /// Parses and lowercases a UUID-shaped channel id.
    pub fn parse(raw: &str) -> Result<Self, InvalidChannelId> {
        let lower = raw.trim().to_ascii_lowercase();
        let groups: Vec<&str> = lower.split('-').collect();
        let shape_ok = groups.len() == 5
            && groups
                .iter()
                .zip([8usize, 4, 4, 4, 12])
                .all(|(g, n)| g.len() == n && g.bytes().all(|b| b.is_ascii_hexdigit()));
        if shape_ok {
            Ok(ChannelId(lower))
        } else {
            Err(InvalidChannelId(raw.to_string()))
        }
    }

    /// The canonical string form.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ChannelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for ChannelId {
    type Error = InvalidChannelId;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        ChannelId::parse(&value)
    }
}

impl From<ChannelId> for String {
    fn from(value: ChannelId) -> Self {
        value.0
    }
}

/// Whether `s` is a 64-character hex event id (either case).
pub fn is_event_id(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A NIP-01-shaped event as stored in `events.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// 64 hex characters; for events the harness creates, the NIP-01 hash.
    pub id: String,
    /// Author public key, 64 hex characters.
    pub pubkey: String,
    /// Unix seconds.
    pub created_at: u64,
    /// Event kind ([`KIND_STREAM_MESSAGE`], [`KIND_EDIT`], …).
    pub kind: u32,
    /// Tags: `h` channel, `e` thread markers, `p` mentions.
    pub tags: Vec<Vec<String>>,
    /// Message text.
    pub content: String,
}

/// NIP-10 thread markers of an event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ThreadRefs {
    /// Id carried by the `root` marker.
    pub root: Option<String>,
    /// Id carried by the `reply` marker.
    pub reply: Option<String>,
}

impl Event {
    /// The channel named by the first `h` tag, if it is a valid channel id.
    pub fn channel_id(&self) -> Option<ChannelId> {
        self.tag_values("h")
            .next()
            .and_then(|v| ChannelId::parse(v).ok())
    }

    /// Whether a `p` tag mentions `pubkey`.
    pub fn mentions(&self, pubkey: &str) -> bool {
        self.tag_values("p").any(|p| p.eq_ignore_ascii_case(pubkey))
    }

    /// The NIP-10 root and reply markers. Markers whose id is not a 64-hex id
    /// are ignored (a malformed marker must not redirect a conversation).
    pub fn thread_refs(&self) -> ThreadRefs {
        let mut refs = ThreadRefs::default();
        for tag in &self.tags {
            if tag.first().map(String::as_str) != Some("e") {
                continue;
            }
            let (Some(id), Some(marker)) = (tag.get(1), tag.get(3)) else {
                continue;
            };
            if !is_event_id(id) {
                continue;
            }
            match marker.as_str() {
                "root" if refs.root.is_none() => refs.root = Some(id.to_ascii_lowercase()),
                "reply" if refs.reply.is_none() => refs.reply = Some(id.to_ascii_lowercase()),
                _ => {}
            }
        }
        refs
    }

    /// For an edit event: the id of the message it edits.
    pub fn edit_target(&self) -> Option<&str> {
        if self.kind != KIND_EDIT {
            return None;
        }
        self.tags
            .iter()
            .find(|t| {
                t.first().map(String::as_str) == Some("e")
                    && t.get(3).map(String::as_str) == Some("edit")
            })
            .and_then(|t| t.get(1))
            .map(String::as_str)
            .filter(|id| is_event_id(id))
    }

    /// Values of every tag named `name` (second element).
    pub fn tag_values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.tags
            .iter()
            .filter(move |t| t.first().map(String::as_str) == Some(name))
            .filter_map(|t| t.get(1).map(String::as_str))
    }

    /// Ids of the events this one answers: its `reply` marker and every
    /// `mention` marker (a reply that answers several triggers at once names
    /// the newest as `reply` and the others as `mention`). Lowercased; markers
    /// whose id is not 64 hex characters are ignored.
    pub fn answered_ids(&self) -> Vec<String> {
        self.tags
            .iter()
            .filter(|t| t.first().map(String::as_str) == Some("e"))
            .filter(|t| matches!(t.get(3).map(String::as_str), Some("reply" | "mention")))
            .filter_map(|t| t.get(1))
            .filter(|id| is_event_id(id))
            .map(|id| id.to_ascii_lowercase())
            .collect()
    }

    /// Whether this event removes `pubkey` from its channel.
    pub fn removes_member(&self, pubkey: &str) -> bool {
        self.kind == KIND_REMOVE_MEMBER && self.mentions(pubkey)
    }

    /// Whether this event is a chat message the harness may answer.
    pub fn is_message(&self) -> bool {
        self.kind == KIND_STREAM_MESSAGE || self.kind == KIND_EDIT
    }
}

/// NIP-01 event id: sha256 over `[0, pubkey, created_at, kind, tags, content]`.
pub fn compute_event_id(
    pubkey: &str,
    created_at: u64,
    kind: u32,
    tags: &[Vec<String>],
    content: &str,
) -> String {
    let canonical = serde_json::json!([0, pubkey, created_at, kind, tags, content]);
    let digest = Sha256::digest(canonical.to_string().as_bytes());
    hex::encode(digest)
}

/// Builds events with a correct NIP-01 id (used for replies, tests and demos).
#[derive(Debug, Clone)]
pub struct EventBuilder {
    pubkey: String,
    created_at: u64,
    kind: u32,
    tags: Vec<Vec<String>>,
    content: String,
}

impl EventBuilder {
    /// An event of `kind` in `channel`.
    pub fn new(kind: u32, pubkey: &str, channel: &ChannelId, content: &str) -> Self {
        EventBuilder {
            pubkey: pubkey.to_ascii_lowercase(),
            created_at: 0,
            kind,
            tags: vec![vec!["h".to_string(), channel.to_string()]],
            content: content.to_string(),
        }
    }

    /// A stream message in `channel`.
    pub fn message(pubkey: &str, channel: &ChannelId, content: &str) -> Self {
        Self::new(KIND_STREAM_MESSAGE, pubkey, channel, content)
    }

    /// Sets the creation time (unix seconds).
    pub fn created_at(mut self, at: u64) -> Self {
        self.created_at = at;
        self
    }

    /// Adds NIP-10 root and reply markers.
    pub fn thread(self, root: &str, parent: &str) -> Self {
        self.tag(&["e", root, "", "root"])
            .tag(&["e", parent, "", "reply"])
    }

    /// Names one more event this one answers (an `e` tag marked `mention`),
    /// for a reply that answers several triggers at once.
    pub fn also_answers(self, event_id: &str) -> Self {
        self.tag(&["e", event_id, "", "mention"])
    }

    /// Mentions `pubkey`.
    pub fn mention(self, pubkey: &str) -> Self {
        self.tag(&["p", pubkey])
    }

    /// Adds a raw tag.
    pub fn tag(mut self, tag: &[&str]) -> Self {
        self.tags.push(tag.iter().map(|s| s.to_string()).collect());
        self
    }

    /// Finishes the event, computing its id.
    pub fn build(self) -> Event {
        let id = compute_event_id(
            &self.pubkey,
            self.created_at,
            self.kind,
            &self.tags,
            &self.content,
        );
        Event {
            id,
            pubkey: self.pubkey,
            created_at: self.created_at,
            kind: self.kind,
            tags: self.tags,
            content: self.content,
        }
    }
}

/// What the harness knows about a channel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelInfo {
    /// Human name, e.g. `general`.
    pub name: String,
    /// Stream or DM.
    pub kind: ChannelKind,
}

/// Stream channels may split sessions per thread; DMs never do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChannelKind {
    /// A shared channel.
    Stream,
    /// A direct-message channel.
    Dm,
}

impl ChannelInfo {
    /// What an unresolved channel is treated as: a DM, failing closed (no
    /// thread split, conversation scope), as upstream does.
    pub fn unresolved() -> Self {
        ChannelInfo {
            name: String::new(),
            kind: ChannelKind::Dm,
        }
    }

    /// Whether the channel is a DM.
    pub fn is_dm(&self) -> bool {
        self.kind == ChannelKind::Dm
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ChannelsFile {
    channels: HashMap<ChannelId, ChannelInfo>,
}

/// One line read from the relay: where it sits and what it held.
#[derive(Debug, Clone)]
pub struct Incoming {
    /// Byte offset of the line's first byte.
    pub offset: u64,
    /// Byte offset just past the line's newline.
    pub end: u64,
    /// The parsed event, or why the line was rejected.
    pub event: Result<Event, String>,
    /// The relay already delivered an event with this id in this run: a
    /// duplicate line, or a line read again after the log was truncated or
    /// replaced.
    pub replayed: bool,
    /// The line lies before the position the subscription resumed from (see
    /// [`Relay::resume_from`]): an earlier run read it.
    pub before_resume: bool,
}

/// The log stopped matching what was read before, and was read again from
/// its start; events are then told apart by id, not by offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reset {
    /// What changed.
    pub divergence: Divergence,
    /// Found against the resume position at startup (else: while running).
    pub at_startup: bool,
    /// At startup: the bytes read before were found again in the file, and
    /// the lines up to them count as read before.
    pub anchored: bool,
}

/// What one poll read.
#[derive(Debug, Default)]
pub struct Poll {
    /// New lines, in log order.
    pub lines: Vec<Incoming>,
    /// Set when the log had to be read again from its start.
    pub reset: Option<Reset>,
}

/// The relay operations the event loop needs.
pub trait Relay: Send {
    /// Tells the subscription where an earlier run stopped reading (from the
    /// processed-event cursor), before the first poll. Lines before it come
    /// back with [`Incoming::before_resume`] set, when the log still matches.
    fn resume_from(&mut self, position: Option<LogPosition>);
    /// Reads events that arrived since the last poll (the subscription).
    fn poll(&mut self) -> impl Future<Output = Result<Poll, RelayError>> + Send;
    /// How far the subscription has read, to be persisted with the cursor.
    fn position(&self) -> Option<LogPosition>;
    /// Publishes an event authored by the harness.
    fn publish(&mut self, event: &Event) -> impl Future<Output = Result<(), RelayError>> + Send;
    /// Every known event of a channel, oldest first (the history for context).
    fn history(&self, channel: &ChannelId) -> Vec<&Event>;
    /// Looks up one event by id.
    fn find(&self, id: &str) -> Option<&Event>;
    /// An event by `author` that answers `trigger_id` (names it with an `e`
    /// tag marked `reply` or `mention`), if the relay holds one.
    fn reply_by(&self, author: &str, trigger_id: &str) -> Option<&Event>;
    /// Channel metadata; [`ChannelInfo::unresolved`] when unknown.
    fn channel_info(&self, channel: &ChannelId) -> ChannelInfo;
    /// A stable identity of this relay (durable state is scoped by it).
    fn identity(&self) -> &str;
    /// Shows the channel that the agent is at work on an answer in a thread: a typing
    /// indicator, which relays pass on and never keep. Best effort: it never waits, and one that
    /// cannot go out now is dropped (it is said again while the turn runs).
    fn typing(&mut self, typing: &Typing);
}

/// Where the agent is typing: the thread of a running turn, as its answer will sit in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Typing {
    /// The channel.
    pub channel: ChannelId,
    /// The thread's root event.
    pub root: String,
    /// The event being answered (the root itself for a thread's first mention).
    pub parent: String,
}

/// The embedded file relay.
#[derive(Debug)]
pub struct FileRelay {
    dir: PathBuf,
    identity: String,
    events_path: PathBuf,
    channels_path: PathBuf,
    /// Bytes of the events file consumed so far (complete lines only).
    read_offset: u64,
    /// Whether the events file was opened in this run (the fields below
    /// describe it).
    opened: bool,
    /// Identity of the file `read_offset` belongs to.
    file: Option<FileIdentity>,
    /// The last bytes consumed (at most [`TAIL_CHECK_BYTES`]): compared with
    /// the file before every read, so a rewrite is noticed even when the file
    /// grew back past `read_offset`.
    tail: Vec<u8>,
    /// Where an earlier run stopped; consumed by the first read.
    resume: Option<LogPosition>,
    /// Every event read or published, for history, lookups and answers.
    index: EventIndex,
    channels: HashMap<ChannelId, ChannelInfo>,
    channels_mtime: Option<std::time::SystemTime>,
}

impl FileRelay {
    /// Opens a relay directory. Nothing is read until the first [`Relay::poll`].
    pub fn open(dir: &Path) -> Result<Self, RelayError> {
        let canonical = fs::canonicalize(dir).map_err(|_| RelayError::MissingDir {
            path: dir.to_path_buf(),
        })?;
        if !canonical.is_dir() {
            return Err(RelayError::MissingDir {
                path: dir.to_path_buf(),
            });
        }
        let mut relay = FileRelay {
            identity: format!("file://{}", canonical.display()),
            events_path: canonical.join("events.jsonl"),
            channels_path: canonical.join("channels.json"),
            dir: canonical,
            read_offset: 0,
            opened: false,
            file: None,
            tail: Vec::new(),
            resume: None,
            index: EventIndex::default(),
            channels: HashMap::new(),
            channels_mtime: None,
        };
        relay.reload_channels()?;
        Ok(relay)
    }

    /// The relay directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn reload_channels(&mut self) -> Result<(), RelayError> {
        let mtime = match fs::metadata(&self.channels_path) {
            Ok(meta) => meta.modified().ok(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                self.channels.clear();
                self.channels_mtime = None;
                return Ok(());
            }
            Err(source) => {
                return Err(RelayError::Io {
                    path: self.channels_path.clone(),
                    source,
                });
            }
        };
        if mtime.is_some() && mtime == self.channels_mtime {
            return Ok(());
        }
        let raw = fs::read_to_string(&self.channels_path).map_err(|source| RelayError::Io {
            path: self.channels_path.clone(),
            source,
        })?;
        let parsed: ChannelsFile =
            serde_json::from_str(&raw).map_err(|e| RelayError::BadChannels {
                path: self.channels_path.clone(),
                message: e.to_string(),
            })?;
        self.channels = parsed.channels;
        self.channels_mtime = mtime;
        Ok(())
    }

    /// Reads complete lines appended since the last read. When the file no
    /// longer holds what was read from it (rotated, truncated, rewritten), it
    /// is read again from its start and the reset is reported.
    fn read_new_lines(&mut self) -> Result<(Vec<Incoming>, Option<Reset>), RelayError> {
        let io = |source| RelayError::Io {
            path: self.events_path.clone(),
            source,
        };
        let mut file = match File::open(&self.events_path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), None)),
            Err(e) => return Err(io(e)),
        };
        let meta = file.metadata().map_err(io)?;
        let identity = file_identity(&meta);
        let mut reset = None;
        if self.opened
            && let Some(divergence) = self
                .divergence(&mut file, identity, meta.len())
                .map_err(io)?
        {
            reset = Some(Reset {
                divergence,
                at_startup: false,
                anchored: false,
            });
            self.read_offset = 0;
            self.tail.clear();
        }
        self.opened = true;
        self.file = identity;

        file.seek(SeekFrom::Start(self.read_offset)).map_err(io)?;
        let mut buf = Vec::new();
        file.read_to_end(&mut buf).map_err(io)?;
        let resume = if self.read_offset == 0 {
            self.resume.take()
        } else {
            None
        };
        let read_before = match resume {
            None => None,
            Some(position) => match eventlog::verify(&position, identity, buf.len() as u64, &buf) {
                Ok(()) => Some(position.offset),
                Err(divergence) => {
                    let anchor = position
                        .tail
                        .as_ref()
                        .and_then(|tail| eventlog::find_anchor(&buf, tail));
                    reset = Some(Reset {
                        divergence,
                        at_startup: true,
                        anchored: anchor.is_some(),
                    });
                    anchor
                }
            },
        };
        let (lines, consumed) = eventlog::split_lines(&buf, self.read_offset);
        self.tail.extend_from_slice(&buf[..consumed]);
        let excess = self.tail.len().saturating_sub(TAIL_CHECK_BYTES);
        self.tail.drain(..excess);
        self.read_offset += consumed as u64;
        let incoming = lines
            .into_iter()
            .map(|LogLine { offset, end, event }| Incoming {
                offset,
                end,
                event,
                replayed: false,
                before_resume: read_before.is_some_and(|until| end <= until),
            })
            .collect();
        Ok((incoming, reset))
    }

    /// What changed, if the file now at the path no longer holds what was
    /// read from it.
    fn divergence(
        &self,
        file: &mut File,
        identity: Option<FileIdentity>,
        len: u64,
    ) -> std::io::Result<Option<Divergence>> {
        if let (Some(then), Some(now)) = (self.file, identity)
            && then != now
        {
            return Ok(Some(Divergence::Replaced));
        }
        if len < self.read_offset {
            return Ok(Some(Divergence::Shorter { len }));
        }
        if self.tail.is_empty() {
            return Ok(None);
        }
        let mut now = vec![0u8; self.tail.len()];
        file.seek(SeekFrom::Start(self.read_offset - self.tail.len() as u64))?;
        file.read_exact(&mut now)?;
        Ok((now != self.tail).then_some(Divergence::Rewritten))
    }

    /// Indexes an event; returns false when its id was already known.
    fn index(&mut self, event: &Event) -> bool {
        self.index.insert(event.clone())
    }
}

/// Device and inode of the events file.
#[cfg(unix)]
fn file_identity(meta: &fs::Metadata) -> Option<FileIdentity> {
    use std::os::unix::fs::MetadataExt as _;
    Some(FileIdentity {
        device: meta.dev(),
        inode: meta.ino(),
    })
}

/// No inodes here: rotation is detected by length and content only.
#[cfg(not(unix))]
fn file_identity(_meta: &fs::Metadata) -> Option<FileIdentity> {
    None
}

/// Appends whole lines to `path` under its exclusive lock. A file that does
/// not end in a newline holds a line its writer left unfinished (writers hold
/// the lock for a whole write, so that writer died mid-line): a newline is
/// written first, so the new lines never merge into the torn one.
fn append_lines(path: &Path, lines: &[u8]) -> std::io::Result<()> {
    let mut file = OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .open(path)?;
    file.lock()?;
    let result = (|| {
        let len = file.metadata()?.len();
        if len > 0 {
            let mut last = [0u8; 1];
            file.seek(SeekFrom::Start(len - 1))?;
            file.read_exact(&mut last)?;
            if last[0] != b'\n' {
                file.write_all(b"\n")?;
            }
        }
        file.write_all(lines)?;
        file.flush()
    })();
    let unlock = file.unlock();
    result?;
    unlock
}

impl Relay for FileRelay {
    fn resume_from(&mut self, position: Option<LogPosition>) {
        self.resume = position;
    }

    async fn poll(&mut self) -> Result<Poll, RelayError> {
        if let Err(e) = self.reload_channels() {
            // A broken channels.json must not stop the subscription: keep the
            // last good metadata and say so.
            tracing::warn!(error = %e, "keeping previous channel metadata");
        }
        let (mut lines, reset) = self.read_new_lines()?;
        for line in &mut lines {
            if let Ok(event) = &line.event {
                line.replayed = !self.index(event);
            }
        }
        Ok(Poll { lines, reset })
    }

    fn position(&self) -> Option<LogPosition> {
        if !self.opened {
            return self.resume.clone();
        }
        Some(LogPosition {
            file: self.file,
            offset: self.read_offset,
            tail: TailCheck::of(&self.tail),
        })
    }

    async fn publish(&mut self, event: &Event) -> Result<(), RelayError> {
        let io = |source| RelayError::Io {
            path: self.events_path.clone(),
            source,
        };
        let mut line = serde_json::to_string(event).map_err(|e| io(std::io::Error::other(e)))?;
        line.push('\n');
        // Writers (other harnesses, test drivers) take the same lock, so lines
        // never interleave.
        append_lines(&self.events_path, line.as_bytes()).map_err(io)
    }

    fn reply_by(&self, author: &str, trigger_id: &str) -> Option<&Event> {
        self.index.reply_by(author, trigger_id)
    }

    fn history(&self, channel: &ChannelId) -> Vec<&Event> {
        self.index.channel(channel)
    }

    fn find(&self, id: &str) -> Option<&Event> {
        self.index.find(id)
    }

    fn channel_info(&self, channel: &ChannelId) -> ChannelInfo {
        self.channels
            .get(channel)
            .cloned()
            .unwrap_or_else(ChannelInfo::unresolved)
    }

    fn identity(&self) -> &str {
        &self.identity
    }

    /// The file relay has no live readers to show it to, and keeps only what is meant to last.
    fn typing(&mut self, _typing: &Typing) {}
}

/// Appends events to a relay directory's `events.jsonl` under its lock: the
/// way tests, demos and other writers add events while a harness runs.
pub fn append_events(dir: &Path, events: &[Event]) -> Result<(), RelayError> {
    let path = dir.join("events.jsonl");
    let io = |source| RelayError::Io {
        path: path.clone(),
        source,
    };
    let mut buf = String::new();
    for event in events {
        buf.push_str(&serde_json::to_string(event).map_err(|e| io(std::io::Error::other(e)))?);
        buf.push('\n');
    }
    append_lines(&path, buf.as_bytes()).map_err(io)
}

/// Writes a relay directory's `channels.json`.
pub fn write_channels(dir: &Path, channels: &[(ChannelId, ChannelInfo)]) -> Result<(), RelayError> {
    let path = dir.join("channels.json");
    let map: serde_json::Map<String, serde_json::Value> = channels
        .iter()
        .map(|(id, info)| {
            (
                id.to_string(),
                serde_json::json!({"name": info.name, "kind": info.kind}),
            )
        })
        .collect();
    let body =
        serde_json::to_string_pretty(&serde_json::json!({ "channels": map })).map_err(|e| {
            RelayError::BadChannels {
                path: path.clone(),
                message: e.to_string(),
            }
        })?;
    fs::write(&path, body + "\n").map_err(|source| RelayError::Io { path, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALICE: &str = "b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2";

    fn channel() -> ChannelId {
        ChannelId::parse("0B8E2D4C-1F3A-4C5E-9D7B-2A6F8E1C3B5D").unwrap()
    }

    #[test]
    fn channel_ids_are_validated_and_lowercased() {
        assert_eq!(channel().as_str(), "0b8e2d4c-1f3a-4c5e-9d7b-2a6f8e1c3b5d");
        for bad in [
            "",
            "general",
            "0b8e2d4c1f3a4c5e9d7b2a6f8e1c3b5d",
            "0b8e2d4c-1f3a-4c5e-9d7b-2a6f8e1c3b5z",
        ] {
            assert!(ChannelId::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn event_ids_follow_nip01() {
        let e = EventBuilder::message(ALICE, &channel(), "hi")
            .created_at(5)
            .build();
        assert_eq!(e.id, compute_event_id(&e.pubkey, 5, e.kind, &e.tags, "hi"));
        let e2 = EventBuilder::message(ALICE, &channel(), "hi!")
            .created_at(5)
            .build();
        assert_ne!(e.id, e2.id);
        assert!(is_event_id(&e.id));
    }

    #[tokio::test]
    async fn file_relay_reads_appends_and_skips_partial_and_bad_lines() {
        let dir = tempfile::tempdir().unwrap();
        let a = EventBuilder::message(ALICE, &channel(), "one")
            .created_at(1)
            .build();
        append_events(dir.path(), std::slice::from_ref(&a)).unwrap();
        // A malformed line and a partial (still being written) line.
        let path = dir.path().join("events.jsonl");
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{not json}\n{\"id\":").unwrap();
        drop(f);

        let mut relay = FileRelay::open(dir.path()).unwrap();
        let first = relay.poll().await.unwrap().lines;
        assert_eq!(first.len(), 2);
        assert_eq!(first[0].event.as_ref().unwrap(), &a);
        assert!(first[1].event.is_err());
        assert_eq!(first[1].offset, first[0].end);

        // Complete the partial line with garbage + newline, then a good event.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"\"x\"}\n").unwrap();
        drop(f);
        let b = EventBuilder::message(ALICE, &channel(), "two")
            .created_at(2)
            .build();
        relay.publish(&b).await.unwrap();
        let second = relay.poll().await.unwrap().lines;
        assert_eq!(second.len(), 2);
        assert!(second[0].event.is_err(), "completed partial line is bad id");
        assert_eq!(second[1].event.as_ref().unwrap(), &b);
        assert_eq!(relay.history(&channel()).len(), 2);
        assert_eq!(relay.find(&b.id).unwrap().content, "two");
    }

    fn msg(text: &str, at: u64) -> Event {
        EventBuilder::message(ALICE, &channel(), text)
            .created_at(at)
            .build()
    }

    fn ids(lines: &[Incoming]) -> Vec<String> {
        lines
            .iter()
            .filter_map(|l| l.event.as_ref().ok().map(|e| e.content.clone()))
            .collect()
    }

    #[tokio::test]
    async fn a_rotated_truncated_or_rewritten_log_is_read_again_and_known_events_are_replays() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        append_events(dir.path(), &[msg("a", 1), msg("b", 2)]).unwrap();
        let mut relay = FileRelay::open(dir.path()).unwrap();
        let first = relay.poll().await.unwrap();
        assert_eq!((ids(&first.lines).len(), first.reset), (2, None));

        // Rotation: a new file at the path, with one old and one new event.
        fs::rename(&path, dir.path().join("events.jsonl.1")).unwrap();
        append_events(dir.path(), &[msg("b", 2), msg("c", 3)]).unwrap();
        let rotated = relay.poll().await.unwrap();
        assert_eq!(
            rotated.reset.map(|r| r.divergence),
            Some(Divergence::Replaced)
        );
        let replayed: Vec<bool> = rotated.lines.iter().map(|l| l.replayed).collect();
        assert_eq!(replayed, [true, false], "b was seen before, c is new");
        assert!(relay.poll().await.unwrap().reset.is_none(), "reported once");

        // Truncation, then more appended than was there before.
        fs::write(&path, b"").unwrap();
        append_events(dir.path(), &[msg("d", 4)]).unwrap();
        let truncated = relay.poll().await.unwrap();
        assert!(matches!(
            truncated.reset.map(|r| r.divergence),
            Some(Divergence::Shorter { .. })
        ));
        assert_eq!(ids(&truncated.lines), ["d"]);

        // Rewritten in place to a longer file: same inode, new bytes.
        let rewritten: String = [msg("e", 5), msg("f", 6), msg("g", 7)]
            .iter()
            .map(|e| serde_json::to_string(e).unwrap() + "\n")
            .collect();
        let mut f = OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all(rewritten.as_bytes()).unwrap();
        drop(f);
        let again = relay.poll().await.unwrap();
        assert_eq!(
            again.reset.map(|r| r.divergence),
            Some(Divergence::Rewritten)
        );
        assert_eq!(ids(&again.lines), ["e", "f", "g"]);
    }

    #[tokio::test]
    async fn a_resume_position_covers_what_was_read_only_while_the_log_matches_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        append_events(dir.path(), &[msg("a", 1), msg("b", 2)]).unwrap();
        let mut first = FileRelay::open(dir.path()).unwrap();
        first.poll().await.unwrap();
        let position = first.position().unwrap();
        append_events(dir.path(), &[msg("c", 3)]).unwrap();

        let mut same = FileRelay::open(dir.path()).unwrap();
        same.resume_from(Some(position.clone()));
        let poll = same.poll().await.unwrap();
        assert_eq!(poll.reset, None);
        let before: Vec<bool> = poll.lines.iter().map(|l| l.before_resume).collect();
        assert_eq!(before, [true, true, false]);

        // The position is past the end of a shorter file: nothing is covered.
        fs::write(&path, b"").unwrap();
        append_events(dir.path(), &[msg("x", 9)]).unwrap();
        let mut shorter = FileRelay::open(dir.path()).unwrap();
        shorter.resume_from(Some(position.clone()));
        let poll = shorter.poll().await.unwrap();
        let reset = poll.reset.unwrap();
        assert!(reset.at_startup && !reset.anchored);
        assert!(matches!(reset.divergence, Divergence::Shorter { .. }));
        assert!(poll.lines.iter().all(|l| !l.before_resume));

        // A copy keeps what was read, after a new prefix: the anchor covers it.
        let copy: String = [msg("new", 0), msg("a", 1), msg("b", 2), msg("c", 3)]
            .iter()
            .map(|e| serde_json::to_string(e).unwrap() + "\n")
            .collect();
        fs::remove_file(&path).unwrap();
        fs::write(&path, copy).unwrap();
        let mut copied = FileRelay::open(dir.path()).unwrap();
        copied.resume_from(Some(position));
        let poll = copied.poll().await.unwrap();
        let reset = poll.reset.unwrap();
        assert!(reset.anchored, "{reset:?}");
        let before: Vec<bool> = poll.lines.iter().map(|l| l.before_resume).collect();
        assert_eq!(before, [true, true, true, false]);
    }

    #[tokio::test]
    async fn writers_start_a_new_line_after_a_torn_one_and_replies_are_indexed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let a = msg("a", 1);
        append_events(dir.path(), std::slice::from_ref(&a)).unwrap();
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(b"{\"id\":\"dead writer").unwrap();
        drop(f);
        let mut relay = FileRelay::open(dir.path()).unwrap();
        assert_eq!(ids(&relay.poll().await.unwrap().lines), ["a"]);

        let answer = EventBuilder::message(ALICE, &channel(), "done")
            .created_at(2)
            .thread(&a.id, &a.id)
            .also_answers(&"f".repeat(64))
            .build();
        relay.publish(&answer).await.unwrap();
        let lines = relay.poll().await.unwrap().lines;
        assert_eq!(lines.len(), 2);
        assert!(lines[0].event.is_err(), "the torn fragment is its own line");
        assert_eq!(lines[1].event.as_ref().unwrap(), &answer);
        assert_eq!(relay.reply_by(ALICE, &a.id), Some(&answer));
        assert_eq!(relay.reply_by(ALICE, &"F".repeat(64)), Some(&answer));
        assert_eq!(relay.reply_by(&"c".repeat(64), &a.id), None);
    }

    #[test]
    fn unknown_channels_fail_closed_as_dm() {
        let dir = tempfile::tempdir().unwrap();
        write_channels(
            dir.path(),
            &[(
                channel(),
                ChannelInfo {
                    name: "general".into(),
                    kind: ChannelKind::Stream,
                },
            )],
        )
        .unwrap();
        let relay = FileRelay::open(dir.path()).unwrap();
        assert!(!relay.channel_info(&channel()).is_dm());
        let other = ChannelId::parse("7c1d9e2f-3a4b-4c5d-8e6f-9a0b1c2d3e4f").unwrap();
        assert!(relay.channel_info(&other).is_dm());
    }

    #[test]
    fn missing_relay_dir_is_a_clear_error() {
        let err = FileRelay::open(Path::new("/nonexistent/relay")).unwrap_err();
        assert!(matches!(err, RelayError::MissingDir { .. }));
    }

    #[test]
    fn thread_refs_ignore_malformed_markers() {
        let root = EventBuilder::message(ALICE, &channel(), "r").build();
        let e = EventBuilder::message(ALICE, &channel(), "x")
            .tag(&["e", "zz", "", "root"])
            .tag(&["e", &root.id.to_ascii_uppercase(), "", "reply"])
            .build();
        let refs = e.thread_refs();
        assert_eq!(refs.root, None);
        assert_eq!(refs.reply.as_deref(), Some(root.id.as_str()));
    }
}
