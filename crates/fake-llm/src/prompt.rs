//! What a completion request puts in front of the model, as a provider's prompt cache sees it,
//! and the token estimate every count of this crate uses. Pure.
//!
//! A provider caches *prefixes*: a request whose prompt starts with the same tokens as an
//! earlier one can have that prefix served from cache. To compare prompts, [`Prompt::of`] lays a
//! request out as a sequence of segments in cache order, each the compact JSON of one piece:
//!
//! | API | order |
//! |---|---|
//! | Anthropic Messages | `tools`, each `system` block, then each message: its role, then each content block |
//! | OpenAI Responses | `tools`, `instructions`, then each `input` item |
//! | Chat Completions | `tools`, then each message |
//!
//! Anthropic documents this order for its cache (tools, then system, then messages). OpenAI
//! documents only that the prefix is cached; putting tools first there too is our choice, and
//! it only matters when tools change while instructions stay (they never do in our runs).
//! `cache_control` markers are left out of the segments, because Claude Code moves its marker
//! to the newest message on every turn and the cached text does not change with it; where the
//! last marker sits is kept apart ([`Prompt::breakpoint_end`]). For the same reason an
//! Anthropic content (or `system`) given as a plain string is laid out as the one text block it
//! stands for: Claude Code sends a message as blocks while it carries the marker and as a
//! string afterwards, and the model reads the same tokens. Segments are joined by a newline,
//! which compact JSON never contains, so two different segmentations cannot produce the same
//! bytes, and prefixes are compared in whole segments ([`shared_prefix`]).
//!
//! Tokens are estimated as bytes / 4, rounded up ([`tokens`]): a documented, deterministic rule
//! of thumb for English text and JSON, with no tokenizer to ship.

use serde_json::Value;

/// Bytes per token of the estimate.
pub const BYTES_PER_TOKEN: u64 = 4;

/// Tokens estimated for `bytes` bytes: `ceil(bytes / 4)`.
#[must_use]
pub fn tokens(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(BYTES_PER_TOKEN)
}

/// The API a request was made to; each lays out its prompt differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// Anthropic Messages.
    Anthropic,
    /// OpenAI Responses.
    Responses,
    /// OpenAI Chat Completions.
    Chat,
}

/// How long a provider keeps a cached prefix after its last use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Lifetime {
    /// Anthropic's default (`cache_control: {"type": "ephemeral"}`) and OpenAI's in-memory
    /// retention (5 to 10 minutes of inactivity).
    FiveMinutes,
    /// Anthropic's `"ttl": "1h"` and OpenAI's extended retention (`prompt_cache_retention`).
    OneHour,
}

impl Lifetime {
    /// Both lifetimes, shortest first.
    pub const ALL: [Lifetime; 2] = [Lifetime::FiveMinutes, Lifetime::OneHour];

    /// The lifetime as a duration.
    #[must_use]
    pub fn duration(self) -> std::time::Duration {
        match self {
            Self::FiveMinutes => std::time::Duration::from_secs(5 * 60),
            Self::OneHour => std::time::Duration::from_secs(60 * 60),
        }
    }
}

/// How the last user message of a background request that does offer tools opens. Claude
/// Code (2.1.318, bundled in claude-agent-acp 0.101.0) keeps the tool list on two calls of its
/// own so that they share the conversation's cached prefix, and only their last message tells
/// them apart: the prompt suggestion after a turn (what might the user type next) and the
/// compaction summary.
pub const BACKGROUND_OPENINGS: &[&str] = &[
    "[SUGGESTION MODE:",
    "CRITICAL: Respond with TEXT ONLY. Do NOT call any tools.",
];

/// Whether the model call belongs to the conversation or is one an adapter makes on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestKind {
    /// A turn of the conversation: the request offers the agent's tools.
    Turn,
    /// Title generation, summaries, suggestions, probes: the request offers no tools (every
    /// agent of the tier sends its tool list on every conversation turn, and none on its title
    /// and summary calls), or its last user message opens with one of
    /// [`BACKGROUND_OPENINGS`].
    Background,
}

/// A request's prompt laid out for prefix comparison.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prompt {
    /// The segments in cache order, joined by `\n`.
    pub text: Vec<u8>,
    /// Where the last segment carrying a `cache_control` marker ends, in [`Prompt::text`]
    /// (Anthropic writes the cache up to there). `None` without markers.
    pub breakpoint_end: Option<usize>,
    /// The lifetime the request asks its cache entries to have.
    pub lifetime: Lifetime,
    /// Conversation turn or background call.
    pub kind: RequestKind,
}

impl Prompt {
    /// Lays out a checked request body of `api`.
    #[must_use]
    pub fn of(api: Api, body: &Value) -> Self {
        let mut layout = Layout::default();
        let tools = body.get("tools").and_then(Value::as_array);
        for tool in tools.into_iter().flatten() {
            layout.push(tool);
        }
        match api {
            Api::Anthropic => {
                if let Some(system) = body.get("system") {
                    layout.push_blocks(system);
                }
                let messages = body.get("messages").and_then(Value::as_array);
                for message in messages.into_iter().flatten() {
                    layout.push(&serde_json::json!({"role": message.get("role")}));
                    if let Some(content) = message.get("content") {
                        layout.push_blocks(content);
                    }
                }
            }
            Api::Responses => {
                if let Some(instructions) = body.get("instructions") {
                    layout.push(instructions);
                }
                match body.get("input") {
                    Some(Value::Array(items)) => items.iter().for_each(|i| layout.push(i)),
                    Some(input) => layout.push(input),
                    None => {}
                }
            }
            Api::Chat => {
                let messages = body.get("messages").and_then(Value::as_array);
                messages.into_iter().flatten().for_each(|m| layout.push(m));
            }
        }
        let offers_tools = tools.is_some_and(|t| !t.is_empty());
        let marked_background = BACKGROUND_OPENINGS
            .iter()
            .any(|opening| last_user_text(body).trim_start().starts_with(opening));
        let kind = if offers_tools && !marked_background {
            RequestKind::Turn
        } else {
            RequestKind::Background
        };
        Self {
            text: layout.text,
            breakpoint_end: layout.breakpoint_end,
            lifetime: requested_lifetime(api, body),
            kind,
        }
    }

    /// Estimated input tokens of the whole prompt.
    #[must_use]
    pub fn tokens(&self) -> u64 {
        tokens(self.text.len())
    }
}

/// Segments being joined.
#[derive(Debug, Default)]
struct Layout {
    text: Vec<u8>,
    breakpoint_end: Option<usize>,
}

impl Layout {
    /// Anthropic content: each block of a list, or a string as the text block it stands for.
    fn push_blocks(&mut self, content: &Value) {
        match content {
            Value::Array(blocks) => blocks.iter().for_each(|b| self.push(b)),
            Value::String(text) => self.push(&serde_json::json!({"type": "text", "text": text})),
            other => self.push(other),
        }
    }

    fn push(&mut self, segment: &Value) {
        let mut clean = segment.clone();
        let marked = strip_cache_control(&mut clean);
        if !self.text.is_empty() {
            self.text.push(b'\n');
        }
        self.text.extend_from_slice(clean.to_string().as_bytes());
        if marked {
            self.breakpoint_end = Some(self.text.len());
        }
    }
}

/// Removes every `cache_control` key from `value`; whether there was one.
fn strip_cache_control(value: &mut Value) -> bool {
    match value {
        Value::Object(map) => {
            let mut found = map.remove("cache_control").is_some();
            for v in map.values_mut() {
                found |= strip_cache_control(v);
            }
            found
        }
        Value::Array(items) => items
            .iter_mut()
            .fold(false, |found, v| strip_cache_control(v) | found),
        _ => false,
    }
}

/// The cache lifetime a request asks for: Anthropic's `cache_control.ttl` of `"1h"` anywhere, or
/// OpenAI's `prompt_cache_retention` (any value other than in-memory); otherwise five minutes.
fn requested_lifetime(api: Api, body: &Value) -> Lifetime {
    let long = match api {
        Api::Anthropic => any_one_hour_marker(body),
        Api::Responses | Api::Chat => body
            .get("prompt_cache_retention")
            .and_then(Value::as_str)
            .is_some_and(|r| r != "in_memory" && r != "in-memory"),
    };
    if long {
        Lifetime::OneHour
    } else {
        Lifetime::FiveMinutes
    }
}

fn any_one_hour_marker(value: &Value) -> bool {
    match value {
        Value::Object(map) => {
            let here = map
                .get("cache_control")
                .and_then(|c| c.get("ttl"))
                .and_then(Value::as_str)
                == Some("1h");
            here || map.values().any(any_one_hour_marker)
        }
        Value::Array(items) => items.iter().any(any_one_hour_marker),
        _ => false,
    }
}

/// Length in bytes of the longest run of whole leading segments that the prompt texts `a` and
/// `b` share (a provider caches at block and token boundaries; comparing whole segments keeps
/// chance matches such as a shared `{"` out of the figures).
#[must_use]
pub fn shared_prefix(a: &[u8], b: &[u8]) -> usize {
    let equal = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let ends_segment = |text: &[u8], at: usize| at == text.len() || text[at] == b'\n';
    if ends_segment(a, equal) && ends_segment(b, equal) {
        return equal;
    }
    // Both texts are equal up to `equal`, so a separator before it is in both.
    a[..equal].iter().rposition(|&c| c == b'\n').unwrap_or(0)
}

/// The text of the last user message (string content or its last text block), for telling
/// background calls apart.
fn last_user_text(body: &Value) -> &str {
    let conversation = body.get("messages").or_else(|| body.get("input"));
    let Some(Value::Array(items)) = conversation else {
        return "";
    };
    let Some(last_user) = items
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
    else {
        return "";
    };
    match last_user.get("content") {
        Some(Value::String(text)) => text,
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .next_back()
            .unwrap_or_default(),
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn estimates_a_token_per_four_bytes_rounded_up() {
        assert_eq!(tokens(0), 0);
        assert_eq!(tokens(1), 1);
        assert_eq!(tokens(4), 1);
        assert_eq!(tokens(5), 2);
        assert_eq!(tokens(4000), 1000);
    }

    #[test]
    fn anthropic_layout_ignores_where_the_marker_moved() {
        let tools = json!([{"name": "Read", "input_schema": {}}]);
        let first = json!({"model": "m", "tools": tools, "system": [{"type": "text", "text": "sys"}],
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": "q1", "cache_control": {"type": "ephemeral"}}]}]});
        let second = json!({"model": "m", "tools": tools, "system": [{"type": "text", "text": "sys"}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "q1"}]},
                {"role": "assistant", "content": "a1"},
                {"role": "user", "content": [
                    {"type": "text", "text": "q2", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}]});
        let a = Prompt::of(Api::Anthropic, &first);
        let b = Prompt::of(Api::Anthropic, &second);
        assert!(
            b.text.starts_with(&a.text),
            "the first prompt is a prefix of the second"
        );
        assert_eq!(a.breakpoint_end, Some(a.text.len()));
        assert_eq!(b.breakpoint_end, Some(b.text.len()));
        assert_eq!(a.lifetime, Lifetime::FiveMinutes);
        assert_eq!(b.lifetime, Lifetime::OneHour);
        assert_eq!(a.kind, RequestKind::Turn);
        let text = String::from_utf8(b.text).unwrap();
        assert!(!text.contains("cache_control"), "{text}");
        let first_tool = json!({"name": "Read", "input_schema": {}}).to_string();
        assert!(text.starts_with(&format!("{first_tool}\n")), "{text}");
    }

    #[test]
    fn requests_without_tools_are_background() {
        let title = json!({"model": "m", "system": "write a title",
            "messages": [{"role": "user", "content": "hello"}]});
        assert_eq!(
            Prompt::of(Api::Anthropic, &title).kind,
            RequestKind::Background
        );
        let empty = json!({"model": "m", "tools": [], "messages": []});
        assert_eq!(Prompt::of(Api::Chat, &empty).kind, RequestKind::Background);
        let responses = json!({"tools": [{"type": "function", "name": "shell"}],
            "instructions": "be brief", "input": "hi", "prompt_cache_retention": "24h"});
        let p = Prompt::of(Api::Responses, &responses);
        assert_eq!(p.kind, RequestKind::Turn);
        assert_eq!(p.lifetime, Lifetime::OneHour);
        assert_eq!(p.breakpoint_end, None);
        let tool = json!({"type": "function", "name": "shell"}).to_string();
        assert_eq!(
            String::from_utf8(p.text).unwrap(),
            format!("{tool}\n\"be brief\"\n\"hi\"")
        );
    }

    #[test]
    fn shared_prefix_counts_whole_segments() {
        assert_eq!(shared_prefix(b"ab\ncd\nef", b"ab\ncd\nxy"), 5);
        assert_eq!(shared_prefix(b"ab\ncd", b"ab\ncd\nef"), 5);
        assert_eq!(shared_prefix(b"ab\ncd", b"ab\ncdef"), 2);
        assert_eq!(shared_prefix(b"ab\ncd", b"ab\ncd"), 5);
        assert_eq!(shared_prefix(b"{\"a\"", b"{\"b\""), 0);
        assert_eq!(shared_prefix(b"", b"abc"), 0);
    }

    #[test]
    fn string_content_reads_like_its_text_block() {
        let blocks = json!({"system": [{"type": "text", "text": "sys"}], "messages": [
            {"role": "user", "content": [{"type": "text", "text": "q1",
                "cache_control": {"type": "ephemeral"}}]}]});
        let strings = json!({"system": "sys", "messages": [{"role": "user", "content": "q1"}]});
        assert_eq!(
            Prompt::of(Api::Anthropic, &blocks).text,
            Prompt::of(Api::Anthropic, &strings).text
        );
    }

    #[test]
    fn a_compaction_request_is_background_despite_its_tools() {
        let body = json!({"tools": [{"name": "Read"}], "messages": [
            {"role": "user", "content": "do it"},
            {"role": "user", "content": [{"type": "text",
                "text": "CRITICAL: Respond with TEXT ONLY. Do NOT call any tools.\n- Summarize."}]}]});
        assert_eq!(
            Prompt::of(Api::Anthropic, &body).kind,
            RequestKind::Background
        );
    }

    #[test]
    fn a_suggestion_request_is_background_despite_its_tools() {
        let body = json!({"tools": [{"name": "Read"}], "messages": [
            {"role": "user", "content": "do it"},
            {"role": "assistant", "content": "done"},
            {"role": "user", "content": [{"type": "text",
                "text": "[SUGGESTION MODE: Suggest what the user might type next.]"}]}]});
        assert_eq!(
            Prompt::of(Api::Anthropic, &body).kind,
            RequestKind::Background
        );
    }
}
