//! The deterministic reply: pure functions from a session's user turns to the text the agent answers.
//!
//! Everything here is synchronous and free of I/O so the "proof of memory" format can be unit-tested
//! without a runtime. The reply is
//! `turns=N digest=XXXXXXXX nonces=a-1234,b-5678 | echo: <last prose line, 120 chars max>`, where every
//! field is derived from *all* user turns the session holds, so a client that restarts the agent and
//! loads the session can tell whether the history really survived.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

/// How many characters of the last user line the reply echoes. Long enough to identify a prompt,
/// short enough to keep snapshots readable.
const ECHO_CHARS: usize = 120;

/// Marker that lets a single prompt choose its own stop reason (`!stop:max_tokens`).
const STOP_TOKEN: &str = "!stop:";

/// The stop reasons a prompt can be told to end with (everything but `cancelled`, which only a
/// `session/cancel` produces).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReasonName {
    /// `end_turn`: the normal end of a turn.
    EndTurn,
    /// `max_tokens`: the model ran out of output tokens.
    MaxTokens,
    /// `max_turn_requests`: the agent hit its per-turn request limit.
    MaxTurnRequests,
    /// `refusal`: the model refused to answer.
    Refusal,
}

impl StopReasonName {
    /// The wire spelling, which is also what the CLI and the `!stop:` token accept.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::EndTurn => "end_turn",
            Self::MaxTokens => "max_tokens",
            Self::MaxTurnRequests => "max_turn_requests",
            Self::Refusal => "refusal",
        }
    }
}

impl fmt::Display for StopReasonName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A stop reason name that is not one of the four accepted spellings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown stop reason {0:?} (expected end_turn, max_tokens, max_turn_requests or refusal)")]
pub struct UnknownStopReason(pub String);

impl FromStr for StopReasonName {
    type Err = UnknownStopReason;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "end_turn" => Ok(Self::EndTurn),
            "max_tokens" => Ok(Self::MaxTokens),
            "max_turn_requests" => Ok(Self::MaxTurnRequests),
            "refusal" => Ok(Self::Refusal),
            other => Err(UnknownStopReason(other.to_owned())),
        }
    }
}

/// The first `!stop:<reason>` token in the last prose line of `text` (see [`last_prose_line`]) naming a
/// known reason, if any. Only the last line counts: a client that repeats earlier messages as
/// context must not make every later prompt stop the same way.
///
/// The reason is read up to the first character that cannot be part of a name, so
/// `!stop:max_tokens.` works and `!stop:max_tokensX` does not match anything.
#[must_use]
pub fn stop_override(text: &str) -> Option<StopReasonName> {
    let line = last_prose_line(text);
    line.match_indices(STOP_TOKEN).find_map(|(at, _)| {
        let rest = &line[at + STOP_TOKEN.len()..];
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        rest[..end].parse().ok()
    })
}

/// Token asking the agent to wait `<ms>` before answering this prompt.
pub const DELAY_TOKEN: &str = "!delay:";

/// The `!delay:<ms>` token in the last prose line of `text`, if any (same scoping as
/// [`stop_override`]). Lets one test prompt be slow while the others are fast.
#[must_use]
pub fn delay_override(text: &str) -> Option<std::time::Duration> {
    let line = last_prose_line(text);
    let at = line.find(DELAY_TOKEN)?;
    let digits: String = line[at + DELAY_TOKEN.len()..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok().map(std::time::Duration::from_millis)
}

/// Token asking the agent to hold its answer until a gate file exists (`!gate:<name>`).
pub const GATE_TOKEN: &str = "!gate:";

/// The `!gate:<name>` token in the last prose line of `text`, if any (same scoping as
/// [`stop_override`]). The name is read up to the first character outside `[A-Za-z0-9_-]`, so it
/// can never climb out of the gate directory. Lets a test hold one turn open until it has done
/// something at a precise point (a turn in flight), instead of racing a delay.
#[must_use]
pub fn gate_override(text: &str) -> Option<&str> {
    let line = last_prose_line(text);
    let at = line.find(GATE_TOKEN)?;
    let rest = &line[at + GATE_TOKEN.len()..];
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-'))
        .unwrap_or(rest.len());
    (end > 0).then(|| &rest[..end])
}

/// Marker that makes a prompt overflow a session that already holds turns (`!full`).
const FULL_TOKEN: &str = "!full";

/// Whether the last prose line of `text` says `!full`: the prompt does not fit a session that
/// already holds turns (it is refused as too long), but fits a fresh one. Lets a test drive a
/// session into exhaustion without sizing its history.
#[must_use]
pub fn full_override(text: &str) -> bool {
    last_prose_line(text).contains(FULL_TOKEN)
}

/// A streaming 32-bit FNV-1a hasher.
///
/// Implemented here rather than pulled in: it is a handful of lines, and the digest it produces
/// is part of the reply format, so it must never change under us with a dependency update.
struct Fnv1a32(u32);

impl Fnv1a32 {
    const OFFSET_BASIS: u32 = 0x811c_9dc5;
    const PRIME: u32 = 0x0100_0193;

    fn new() -> Self {
        Self(Self::OFFSET_BASIS)
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 ^= u32::from(byte);
            self.0 = self.0.wrapping_mul(Self::PRIME);
        }
    }
}

/// 32-bit FNV-1a over every user turn in order.
///
/// Each turn is followed by a 0x00 byte so that `["ab", "c"]` and `["a", "bc"]` hash differently
/// (user text is UTF-8 and never contains NUL in practice).
#[must_use]
pub fn digest<'a>(turns: impl IntoIterator<Item = &'a str>) -> u32 {
    let mut hasher = Fnv1a32::new();
    for turn in turns {
        hasher.write(turn.as_bytes());
        hasher.write(&[0]);
    }
    hasher.0
}

/// Whether `c` counts as a word character for the nonce word boundaries (same notion as a Unicode
/// regex `\b`, so results agree with `shared/tools/mock_llm.py`).
fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Every word shaped like `letters-1234` (`\b[A-Za-z]+-[0-9]{4,}\b`) in `text`, in order of
/// appearance.
#[must_use]
pub fn nonces_in(text: &str) -> Vec<&str> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts_word = i == 0 || !is_word_char(chars[i - 1].1);
        if !(starts_word && chars[i].1.is_ascii_alphabetic()) {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < chars.len() && chars[j].1.is_ascii_alphabetic() {
            j += 1;
        }
        if j < chars.len() && chars[j].1 == '-' {
            let digits_start = j + 1;
            let mut k = digits_start;
            while k < chars.len() && chars[k].1.is_ascii_digit() {
                k += 1;
            }
            let ends_word = k == chars.len() || !is_word_char(chars[k].1);
            if k - digits_start >= 4 && ends_word {
                let end = chars.get(k).map_or(text.len(), |&(at, _)| at);
                found.push(&text[chars[i].0..end]);
                i = k;
                continue;
            }
        }
        i = j.max(i + 1);
    }
    found
}

/// The sorted, de-duplicated nonces of all turns, joined with `,`; `-` when there are none (so the
/// field is never empty and stays easy to grep).
#[must_use]
pub fn nonce_list<'a>(turns: impl IntoIterator<Item = &'a str>) -> String {
    let set: BTreeSet<&str> = turns.into_iter().flat_map(nonces_in).collect();
    if set.is_empty() {
        "-".to_owned()
    } else {
        set.into_iter().collect::<Vec<_>>().join(",")
    }
}

/// The last line of prose in `text`: lines that are only markup (`<tag …>` / `</tag>`) or blank
/// are skipped, so a prompt that wraps its message in tags still yields the message.
#[must_use]
pub fn last_prose_line(text: &str) -> &str {
    let is_markup = |l: &str| {
        let t = l.trim();
        t.is_empty() || (t.starts_with('<') && t.ends_with('>'))
    };
    text.lines().rev().find(|l| !is_markup(l)).unwrap_or("")
}

/// The first 120 characters of [`last_prose_line`] (empty text echoes nothing).
#[must_use]
pub fn echo_of(text: &str) -> String {
    last_prose_line(text).chars().take(ECHO_CHARS).collect()
}

/// The nonces an answer of [`reply_text`] says its session has seen (`nonces=a-1234,b-5678`;
/// `-` for none): what the model knew. Empty when the text carries no such field.
#[must_use]
pub fn seen_nonces(answer: &str) -> Vec<String> {
    answer
        .split_whitespace()
        .find_map(|w| w.strip_prefix("nonces="))
        .map(|list| {
            list.split(',')
                .filter(|n| *n != "-")
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The reply for a session whose user turns (including the current one, last) are `turns`.
///
/// `permission` is the outcome of a `!perm` round trip, appended as ` permission=<outcome>`.
#[must_use]
pub fn reply_text(turns: &[&str], permission: Option<&str>) -> String {
    let last = turns.last().copied().unwrap_or("");
    let mut reply = format!(
        "turns={} digest={:08x} nonces={} | echo: {}",
        turns.len(),
        digest(turns.iter().copied()),
        nonce_list(turns.iter().copied()),
        echo_of(last),
    );
    if let Some(outcome) = permission {
        reply.push_str(" permission=");
        reply.push_str(outcome);
    }
    reply
}

/// Splits `text` into two halves at the char boundary nearest the middle character, so the reply
/// can be streamed as exactly two chunks whose concatenation is the reply.
#[must_use]
pub fn split_halves(text: &str) -> (&str, &str) {
    let half = text.chars().count() / 2;
    let at = text
        .char_indices()
        .nth(half)
        .map_or(text.len(), |(at, _)| at);
    text.split_at(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_says_which_nonces_its_session_has_seen() {
        let answer = reply_text(&["remember alpha-7301", "and b-1234?"], None);
        assert_eq!(seen_nonces(&answer), ["alpha-7301", "b-1234"]);
        assert!(seen_nonces(&reply_text(&["nothing here"], None)).is_empty());
        assert!(seen_nonces("no such field").is_empty());
    }

    fn fnv(bytes: &[u8]) -> u32 {
        let mut hasher = Fnv1a32::new();
        hasher.write(bytes);
        hasher.0
    }

    #[test]
    fn fnv1a_matches_reference_vectors() {
        assert_eq!(fnv(b""), 0x811c_9dc5);
        assert_eq!(fnv(b"a"), 0xe40c_292c);
        assert_eq!(fnv(b"foobar"), 0xbf9c_f968);
        assert_eq!(digest(["a", "b"]), fnv(b"a\0b\0"));
        assert_eq!(digest(std::iter::empty()), 0x811c_9dc5);
    }

    #[test]
    fn digest_separates_turns() {
        assert_ne!(digest(["ab", "c"]), digest(["a", "bc"]));
        assert_ne!(digest(["x"]), digest(["x", "x"]));
        assert_eq!(digest(["x", "y"]), digest(["x", "y"]));
    }

    #[test]
    fn nonces_follow_word_boundaries() {
        let text = "remember alpha-7301, beta-12 and Gamma-00042. foo_bar-1234 x-1234y (z-9999)";
        assert_eq!(nonces_in(text), ["alpha-7301", "Gamma-00042", "z-9999"]);
        assert_eq!(nonces_in("é-1234 ab-1234-5678 1x-1234"), ["ab-1234"]);
    }

    #[test]
    fn nonce_list_sorts_and_dedups() {
        assert_eq!(nonce_list(["b-5678 a-1234", "b-5678"]), "a-1234,b-5678");
        assert_eq!(nonce_list(["nothing here"]), "-");
    }

    #[test]
    fn echo_takes_last_line_prefix() {
        assert_eq!(echo_of("first\nsecond line"), "second line");
        assert_eq!(echo_of("<event id=\"x\">\nhello\n</event>\n"), "hello");
        assert_eq!(echo_of("<only-markup/>"), "");
        assert_eq!(echo_of(""), "");
        assert_eq!(echo_of(&"é".repeat(200)).chars().count(), 120);
    }

    #[test]
    fn reply_format() {
        let reply = reply_text(&["keep alpha-7301", "hello\nworld"], Some("allow"));
        let digest = digest(["keep alpha-7301", "hello\nworld"]);
        assert_eq!(
            reply,
            format!("turns=2 digest={digest:08x} nonces=alpha-7301 | echo: world permission=allow")
        );
    }

    #[test]
    fn stop_override_reads_known_names_only() {
        assert_eq!(
            stop_override("x !stop:max_tokens y"),
            Some(StopReasonName::MaxTokens)
        );
        assert_eq!(
            stop_override("!stop:max_turn_requests"),
            Some(StopReasonName::MaxTurnRequests)
        );
        assert_eq!(
            stop_override("!stop:refusal."),
            Some(StopReasonName::Refusal)
        );
        assert_eq!(
            stop_override("!stop:bogus !stop:end_turn"),
            Some(StopReasonName::EndTurn)
        );
        assert_eq!(stop_override("!stop:max_tokensX"), None);
        assert_eq!(stop_override("no token"), None);
        assert_eq!(
            stop_override("old !stop:max_tokens\nnew line"),
            None,
            "only the last prose line counts"
        );
    }

    #[test]
    fn delay_override_reads_the_last_line_only() {
        assert_eq!(
            delay_override("hi !delay:250 there"),
            Some(std::time::Duration::from_millis(250))
        );
        assert_eq!(delay_override("!delay:9\nlater"), None);
        assert_eq!(delay_override("!delay:x"), None);
    }

    #[test]
    fn gate_override_reads_a_safe_name_from_the_last_line() {
        assert_eq!(gate_override("hold !gate:turn-1 please"), Some("turn-1"));
        assert_eq!(gate_override("!gate:../etc"), None);
        assert_eq!(gate_override("!gate:a/b"), Some("a"));
        assert_eq!(
            gate_override("!gate:x\nlater"),
            None,
            "only the last prose line counts"
        );
        assert_eq!(gate_override("no gate"), None);
    }

    #[test]
    fn halves_split_at_char_boundary() {
        let (a, b) = split_halves("héllo wörld");
        assert_eq!(format!("{a}{b}"), "héllo wörld");
        assert_eq!(a.chars().count(), 5);
        assert_eq!(split_halves("x"), ("", "x"));
    }
}
