//! The `events.jsonl` log as bytes: lines, torn tails, and positions that can
//! be checked later.
//!
//! Pure functions, no I/O; [`crate::relay::FileRelay`] feeds them what it read.
//!
//! * **Lines.** A line ends at `\n`. A trailing line without one is still being
//!   written and is left for the next read. A writer that died mid-line leaves
//!   a *torn* fragment; when another writer appended an event right after it,
//!   the reader splits the event back out instead of losing both.
//! * **Positions.** A byte offset alone means nothing once the file is rotated
//!   or rewritten. A [`LogPosition`] therefore carries the file's identity
//!   (device and inode) and a hash of the bytes just before the offset, so a
//!   later reader can tell whether the offset still describes this file
//!   ([`verify`]) and, when it does not, where the same bytes are now
//!   ([`find_anchor`]).

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::relay::{Event, MAX_EVENT_LINE_BYTES, is_event_id};

/// How many bytes before a position its check covers. Enough to identify an
/// event line (ids, signature-sized content), cheap to re-read on every poll.
pub const TAIL_CHECK_BYTES: usize = 256;

/// How many `{"` starts a torn line is searched for before it is given up as
/// malformed: a torn fragment holds at most one, the event after it one more.
const MAX_TORN_CANDIDATES: usize = 8;

/// Device and inode of the events file: a rotated file has a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FileIdentity {
    /// `st_dev`.
    pub device: u64,
    /// `st_ino`.
    pub inode: u64,
}

/// A hash of the last bytes before a position.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TailCheck {
    /// How many bytes it covers (up to [`TAIL_CHECK_BYTES`]).
    pub len: u64,
    /// Their sha256, lowercase hex.
    pub sha256: String,
}

impl TailCheck {
    /// The check of the bytes that end `before`: its last
    /// [`TAIL_CHECK_BYTES`] bytes. `None` for an empty slice.
    pub fn of(before: &[u8]) -> Option<Self> {
        let start = before.len().saturating_sub(TAIL_CHECK_BYTES);
        let tail = &before[start..];
        (!tail.is_empty()).then(|| TailCheck {
            len: tail.len() as u64,
            sha256: hex::encode(Sha256::digest(tail)),
        })
    }

    /// Whether `tail` holds exactly the bytes this check was taken of.
    pub fn matches(&self, tail: &[u8]) -> bool {
        tail.len() as u64 == self.len && hex::encode(Sha256::digest(tail)) == self.sha256
    }
}

/// How far a reader got in the events file, in a form a later reader can
/// check against the file it finds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LogPosition {
    /// The file the offset belongs to; `None` when it was not recorded (a
    /// cursor from before 0.10, or a platform without inodes).
    pub file: Option<FileIdentity>,
    /// Every line that ends at or before this offset was read.
    pub offset: u64,
    /// The bytes just before `offset`; `None` when `offset` is 0 or the
    /// position was not recorded with one.
    pub tail: Option<TailCheck>,
}

/// Why the events file no longer matches a position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "reason")]
pub enum Divergence {
    /// Another file now sits at the path (rotated, or replaced).
    Replaced,
    /// The file holds fewer bytes than the position (truncated, or the
    /// position is past its end).
    Shorter {
        /// The file's length now.
        len: u64,
    },
    /// The bytes before the position changed (rewritten in place).
    Rewritten,
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Divergence::Replaced => f.write_str("another file now sits at its path"),
            Divergence::Shorter { len } => write!(f, "it holds only {len} bytes"),
            Divergence::Rewritten => f.write_str("the bytes before the position changed"),
        }
    }
}

/// Checks `position` against the file now at the path: its identity, its
/// length, and `whole` (the file's content from offset 0, or at least up to
/// the position).
pub fn verify(
    position: &LogPosition,
    identity: Option<FileIdentity>,
    len: u64,
    whole: &[u8],
) -> Result<(), Divergence> {
    if position.offset == 0 {
        return Ok(());
    }
    if let (Some(then), Some(now)) = (position.file, identity)
        && then != now
    {
        return Err(Divergence::Replaced);
    }
    if len < position.offset {
        return Err(Divergence::Shorter { len });
    }
    let Some(tail) = &position.tail else {
        return Ok(());
    };
    let end = usize::try_from(position.offset).map_err(|_| Divergence::Rewritten)?;
    let start = end
        .checked_sub(usize::try_from(tail.len).map_err(|_| Divergence::Rewritten)?)
        .ok_or(Divergence::Rewritten)?;
    match whole.get(start..end) {
        Some(bytes) if tail.matches(bytes) => Ok(()),
        _ => Err(Divergence::Rewritten),
    }
}

/// Where the bytes a position's tail check describes end in `whole`, if they
/// end a line somewhere in it: the file was rewritten or copied, but kept what
/// was read before. The first such line end wins.
pub fn find_anchor(whole: &[u8], tail: &TailCheck) -> Option<u64> {
    let len = usize::try_from(tail.len).ok()?;
    whole
        .iter()
        .enumerate()
        .filter(|&(_, b)| *b == b'\n')
        .map(|(i, _)| i + 1)
        .filter(|&end| end >= len)
        .find(|&end| tail.matches(&whole[end - len..end]))
        .map(|end| end as u64)
}

/// One line of the log, located and parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// Byte offset of its first byte.
    pub offset: u64,
    /// Byte offset just past it (past its newline, for a complete line).
    pub end: u64,
    /// The event, or why the bytes are not one.
    pub event: Result<Event, String>,
}

/// Splits `buf` (read from `base`) into lines. Returns them and how many
/// bytes they consumed; an unterminated tail is left unconsumed unless it is
/// already longer than any event may be.
pub fn split_lines(buf: &[u8], base: u64) -> (Vec<LogLine>, usize) {
    let mut out = Vec::new();
    let mut start = 0usize;
    while let Some(pos) = buf[start..].iter().position(|&b| b == b'\n') {
        let line = &buf[start..start + pos];
        let offset = base + start as u64;
        let end = offset + pos as u64 + 1;
        start += pos + 1;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        out.extend(parse_line(line, offset, end));
    }
    let tail = buf.len() - start;
    if tail > MAX_EVENT_LINE_BYTES {
        out.push(LogLine {
            offset: base + start as u64,
            end: base + buf.len() as u64,
            event: Err(format!(
                "unterminated line of {tail} bytes exceeds {MAX_EVENT_LINE_BYTES}"
            )),
        });
        start = buf.len();
    }
    (out, start)
}

/// Parses one complete line. A line that is not an event but ends in one is
/// a torn fragment followed by a whole event: both are reported, so the event
/// is never swallowed.
fn parse_line(line: &[u8], offset: u64, end: u64) -> Vec<LogLine> {
    let whole = parse_event_line(line);
    if whole.is_ok() {
        return vec![LogLine {
            offset,
            end,
            event: whole,
        }];
    }
    if let Some((at, event)) = split_torn(line) {
        let split = offset + at as u64;
        return vec![
            LogLine {
                offset,
                end: split,
                event: Err(format!(
                    "torn line: {at} bytes a writer left unfinished before the next event"
                )),
            },
            LogLine {
                offset: split,
                end,
                event: Ok(event),
            },
        ];
    }
    vec![LogLine {
        offset,
        end,
        event: whole,
    }]
}

/// The first `{"` after the start of `line` from which the rest of the line
/// is a whole event. Inside JSON strings a quote is always escaped, so a raw
/// `{"` can only start an object.
fn split_torn(line: &[u8]) -> Option<(usize, Event)> {
    line.windows(2)
        .enumerate()
        .skip(1)
        .filter(|(_, w)| w == b"{\"")
        .take(MAX_TORN_CANDIDATES)
        .find_map(|(at, _)| parse_event_line(&line[at..]).ok().map(|e| (at, e)))
}

/// Parses one line as an event: valid JSON, 64-hex id and pubkey (both
/// lowercased), at most [`MAX_EVENT_LINE_BYTES`].
pub fn parse_event_line(line: &[u8]) -> Result<Event, String> {
    if line.len() > MAX_EVENT_LINE_BYTES {
        return Err(format!(
            "line of {} bytes exceeds {MAX_EVENT_LINE_BYTES}",
            line.len()
        ));
    }
    let event: Event = serde_json::from_slice(line).map_err(|e| format!("not an event: {e}"))?;
    if !is_event_id(&event.id) {
        return Err(format!("event id {:?} is not 64 hex characters", event.id));
    }
    if !is_event_id(&event.pubkey) {
        return Err(format!(
            "pubkey {:?} is not 64 hex characters",
            event.pubkey
        ));
    }
    Ok(Event {
        id: event.id.to_ascii_lowercase(),
        pubkey: event.pubkey.to_ascii_lowercase(),
        ..event
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::{ChannelId, EventBuilder};

    const ALICE: &str = "b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2";

    fn event(text: &str) -> Event {
        let ch = ChannelId::parse("0b8e2d4c-1f3a-4c5e-9d7b-2a6f8e1c3b5d").unwrap();
        EventBuilder::message(ALICE, &ch, text)
            .created_at(7)
            .build()
    }

    fn line(e: &Event) -> String {
        serde_json::to_string(e).unwrap() + "\n"
    }

    fn position_at(buf: &[u8], offset: usize, file: Option<FileIdentity>) -> LogPosition {
        LogPosition {
            file,
            offset: offset as u64,
            tail: TailCheck::of(&buf[..offset]),
        }
    }

    #[test]
    fn lines_are_split_and_the_unterminated_tail_is_left() {
        let (a, b) = (event("a"), event("b"));
        let buf = format!("{}\n  \n{}{{\"id\":", line(&a), line(&b));
        let (lines, consumed) = split_lines(buf.as_bytes(), 100);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].offset, 100);
        assert_eq!(lines[0].event.as_ref().unwrap(), &a);
        assert_eq!(lines[1].event.as_ref().unwrap(), &b);
        assert_eq!(lines[1].end, 100 + consumed as u64);
        assert_eq!(&buf[consumed..], "{\"id\":");
    }

    #[test]
    fn a_torn_fragment_never_swallows_the_event_appended_after_it() {
        let b = event("after the tear");
        let buf = format!("{{\"id\":\"abc\",\"content\":\"half{}", line(&b));
        let (lines, consumed) = split_lines(buf.as_bytes(), 0);
        assert_eq!(consumed, buf.len());
        assert_eq!(lines.len(), 2);
        assert!(lines[0].event.as_ref().unwrap_err().contains("torn line"));
        assert_eq!(lines[1].event.as_ref().unwrap(), &b);
        assert_eq!(lines[0].end, lines[1].offset);
        assert_eq!(lines[1].end, buf.len() as u64);
    }

    #[test]
    fn a_line_that_is_garbage_throughout_stays_one_malformed_line() {
        let (lines, _) = split_lines(b"{not json} {\"also\": \"not an event\"}\n", 0);
        assert_eq!(lines.len(), 1);
        assert!(lines[0].event.is_err());
    }

    #[test]
    fn positions_verify_against_the_same_bytes_only() {
        let id = Some(FileIdentity {
            device: 1,
            inode: 2,
        });
        let buf = format!("{}{}", line(&event("a")), line(&event("b")));
        let bytes = buf.as_bytes();
        let pos = position_at(bytes, bytes.len(), id);
        let len = bytes.len() as u64;
        assert_eq!(verify(&pos, id, len, bytes), Ok(()));
        let more = format!("{buf}{}", line(&event("c")));
        assert_eq!(
            verify(&pos, id, more.len() as u64, more.as_bytes()),
            Ok(()),
            "appending keeps the position valid"
        );
        let other = Some(FileIdentity {
            device: 1,
            inode: 3,
        });
        assert_eq!(verify(&pos, other, len, bytes), Err(Divergence::Replaced));
        let short = &bytes[..10];
        assert_eq!(
            verify(&pos, id, 10, short),
            Err(Divergence::Shorter { len: 10 })
        );
        let rewritten = format!("{}{}", line(&event("x")), line(&event("y")));
        assert_eq!(
            verify(&pos, id, rewritten.len() as u64, rewritten.as_bytes()),
            Err(Divergence::Rewritten)
        );
        let unrecorded = LogPosition {
            file: None,
            offset: len,
            tail: None,
        };
        assert_eq!(verify(&unrecorded, id, len, bytes), Ok(()));
    }

    #[test]
    fn the_anchor_is_found_where_the_read_bytes_now_end() {
        let (a, b, c) = (line(&event("a")), line(&event("b")), line(&event("c")));
        let old = format!("{a}{b}");
        let pos = position_at(old.as_bytes(), old.len(), None);
        let tail = pos.tail.unwrap();
        let copied = format!("{c}{a}{b}{c}");
        assert_eq!(
            find_anchor(copied.as_bytes(), &tail),
            Some((c.len() + a.len() + b.len()) as u64)
        );
        assert_eq!(find_anchor(format!("{a}{c}").as_bytes(), &tail), None);
    }
}
