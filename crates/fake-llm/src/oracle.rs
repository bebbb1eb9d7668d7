//! What a request told the model: the pure "oracle" every fake reply carries.
//!
//! A test cannot look inside a real adapter, but it can read the model's answer. So every reply
//! ends with a tag such as `[fake-llm user_messages=3 nonces=alpha-7301,bravo-2212]`: the number
//! of user messages in the request and every `word-1234`-shaped token found in any string of it.
//! Tell an agent "remember alpha-7301", restart it, and the tag of a later reply proves whether
//! the model still received `alpha-7301`.

use std::collections::BTreeSet;

use serde_json::Value;

/// How many characters of the last user text a reply echoes: enough to recognise the prompt,
/// short enough to keep threads readable.
const ECHO_CHARS: usize = 160;

/// The opening of the tag; also how [`Observation::parse`] finds it in a reply.
const TAG_OPEN: &str = "[fake-llm ";

/// What one request contained, as far as a test needs to know.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Observation {
    /// Messages (or input items) with role `user` in the conversation the model was sent.
    pub user_messages: usize,
    /// Every `letters-digits` token (at least four digits) in any string of the request body,
    /// sorted and deduplicated.
    pub nonces: BTreeSet<String>,
}

impl Observation {
    /// Observes a parsed request body of any of the supported APIs.
    #[must_use]
    pub fn of(body: &Value) -> Self {
        let mut nonces = BTreeSet::new();
        visit_strings(body, &mut |s| nonces.extend(find_nonces(s)));
        Self {
            user_messages: user_message_count(body),
            nonces,
        }
    }

    /// The tag appended to every reply.
    #[must_use]
    pub fn tag(&self) -> String {
        let nonces: Vec<&str> = self.nonces.iter().map(String::as_str).collect();
        format!(
            "{TAG_OPEN}user_messages={} nonces={}]",
            self.user_messages,
            nonces.join(",")
        )
    }

    /// Reads the last tag out of a reply text (an adapter may add its own text around it).
    /// `None` when the text carries no well-formed tag.
    #[must_use]
    pub fn parse(reply: &str) -> Option<Self> {
        let start = reply.rfind(TAG_OPEN)? + TAG_OPEN.len();
        let end = start + reply[start..].find(']')?;
        let mut user_messages = None;
        let mut nonces = BTreeSet::new();
        for field in reply[start..end].split_whitespace() {
            if let Some(n) = field.strip_prefix("user_messages=") {
                user_messages = Some(n.parse().ok()?);
            } else if let Some(list) = field.strip_prefix("nonces=") {
                nonces.extend(list.split(',').filter(|n| !n.is_empty()).map(str::to_owned));
            } else {
                return None;
            }
        }
        Some(Self {
            user_messages: user_messages?,
            nonces,
        })
    }
}

/// The reply text for a request: an echo of its last user text plus the tag of `seen`, the
/// request's [`Observation`] (the server has already made it for its log, and observing walks
/// every string of the body).
#[must_use]
pub fn reply_text(body: &Value, seen: &Observation) -> String {
    let echo: String = last_user_text(body).chars().take(ECHO_CHARS).collect();
    let echo = echo.split_whitespace().collect::<Vec<_>>().join(" ");
    format!("fake reply to: {echo} {}", seen.tag())
}

/// Every token shaped `letters-digits` (one or more ASCII letters, a dash, four or more digits)
/// that stands as a word of its own: neither side touches a letter, digit or underscore.
#[must_use]
pub fn find_nonces(text: &str) -> Vec<String> {
    let bytes = text.as_bytes();
    let is_word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = bytes[i].is_ascii_alphabetic() && (i == 0 || !is_word(bytes[i - 1]));
        if !starts_word {
            i += 1;
            continue;
        }
        let letters_end = i + bytes[i..]
            .iter()
            .take_while(|b| b.is_ascii_alphabetic())
            .count();
        if bytes.get(letters_end) == Some(&b'-') {
            let digits_start = letters_end + 1;
            let digits_end = digits_start
                + bytes[digits_start..]
                    .iter()
                    .take_while(|b| b.is_ascii_digit())
                    .count();
            let ends_word = bytes.get(digits_end).is_none_or(|&b| !is_word(b));
            if digits_end - digits_start >= 4 && ends_word {
                found.push(text[i..digits_end].to_owned());
            }
            i = digits_end.max(i + 1);
        } else {
            i = letters_end;
        }
    }
    found
}

/// The conversation of a request: `messages` (Anthropic, Chat Completions) or `input`
/// (Responses; a bare string counts as one user message).
fn conversation(body: &Value) -> Option<&Value> {
    body.get("messages").or_else(|| body.get("input"))
}

/// User messages in the conversation. Anthropic tool results travel as user messages too, so
/// this counts turns the model saw from the user's side, not prompts a person typed.
#[must_use]
pub fn user_message_count(body: &Value) -> usize {
    match conversation(body) {
        Some(Value::String(_)) => 1,
        Some(Value::Array(items)) => items
            .iter()
            .filter(|m| m.get("role").and_then(Value::as_str) == Some("user"))
            .count(),
        _ => 0,
    }
}

/// The text of the last user message, skipping `<system-reminder>` parts that adapters add.
#[must_use]
pub fn last_user_text(body: &Value) -> String {
    match conversation(body) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(items)) => items
            .iter()
            .rev()
            .filter(|m| m.get("role").and_then(Value::as_str) == Some("user"))
            .find_map(|m| message_text(m.get("content")?))
            .unwrap_or_default(),
        _ => String::new(),
    }
}

/// The last text part of a message's content (a string or a list of typed parts).
fn message_text(content: &Value) -> Option<String> {
    match content {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => parts.iter().rev().find_map(|part| {
            let kind = part.get("type").and_then(Value::as_str)?;
            let text = part.get("text").and_then(Value::as_str)?;
            let is_text = matches!(kind, "text" | "input_text");
            (is_text && !text.starts_with("<system-reminder>")).then(|| text.to_owned())
        }),
        _ => None,
    }
}

/// Calls `f` on every string value (not key) anywhere in `value`.
fn visit_strings(value: &Value, f: &mut impl FnMut(&str)) {
    match value {
        Value::String(s) => f(s),
        Value::Array(items) => items.iter().for_each(|v| visit_strings(v, f)),
        Value::Object(map) => map.values().for_each(|v| visit_strings(v, f)),
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nonces_are_whole_words_with_four_or_more_digits() {
        assert_eq!(
            find_nonces("remember alpha-7301, then (bravo-22120) and x_y-1234 and ab-123"),
            ["alpha-7301", "bravo-22120"]
        );
        assert_eq!(
            find_nonces("zalpha-7301x alpha-73012_ alpha-7301"),
            ["alpha-7301"]
        );
        assert_eq!(find_nonces("ISO-8601 and utf-8"), ["ISO-8601"]);
        assert_eq!(find_nonces("a-b-1234 -1234 é-1234"), ["b-1234"]);
        assert!(find_nonces("").is_empty());
    }

    #[test]
    fn nonces_inside_escaped_json_strings_are_found() {
        // The raw JSON would read `\nalpha-7301`; scanning decoded strings avoids gluing the `n`.
        let body = json!({"messages": [{"role": "user", "content": "x\nalpha-7301"}]});
        assert!(Observation::of(&body).nonces.contains("alpha-7301"));
    }

    #[test]
    fn counts_user_messages_of_each_api() {
        let anthropic = json!({"messages": [
            {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
            {"role": "user", "content": [{"type": "text", "text": "c"}]}]});
        let responses = json!({"input": [
            {"type": "message", "role": "developer", "content": []},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "q"}]}]});
        assert_eq!(user_message_count(&anthropic), 2);
        assert_eq!(user_message_count(&responses), 1);
        assert_eq!(user_message_count(&json!({"input": "hi"})), 1);
        assert_eq!(user_message_count(&json!({"model": "m"})), 0);
    }

    #[test]
    fn echoes_the_last_user_text_without_system_reminders() {
        let body = json!({"messages": [
            {"role": "user", "content": "first"},
            {"role": "user", "content": [
                {"type": "text", "text": "second"},
                {"type": "text", "text": "<system-reminder>ignore</system-reminder>"}]},
            {"role": "assistant", "content": "answer"}]});
        assert_eq!(last_user_text(&body), "second");
        assert_eq!(
            reply_text(&body, &Observation::of(&body)),
            "fake reply to: second [fake-llm user_messages=2 nonces=]"
        );
    }

    #[test]
    fn the_tag_round_trips_and_rejects_garbage() {
        let body =
            json!({"input": [{"role": "user", "content": "remember alpha-7301 bravo-2212"}]});
        let seen = Observation::of(&body);
        let reply = format!("**note** {} trailing", reply_text(&body, &seen));
        assert_eq!(Observation::parse(&reply), Some(seen.clone()));
        assert_eq!(seen.user_messages, 1);
        assert_eq!(
            seen.nonces.iter().map(String::as_str).collect::<Vec<_>>(),
            ["alpha-7301", "bravo-2212"]
        );
        assert_eq!(Observation::parse("no tag"), None);
        assert_eq!(
            Observation::parse("[fake-llm user_messages=x nonces=]"),
            None
        );
        assert_eq!(Observation::parse("[fake-llm nonces=a-1234]"), None);
        assert_eq!(
            Observation::parse("[fake-llm user_messages=1 what=2]"),
            None
        );
    }
}
