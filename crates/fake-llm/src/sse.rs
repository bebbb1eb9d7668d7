//! Server-sent events: the framing every streaming API here uses.
//!
//! An event is an optional `event:` line, one `data:` line per line of payload, and a blank line.
//! [`decode`] is the inverse, used by tests (and by anyone checking a captured stream) to prove the
//! framing is what a client parser expects.

/// One event of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` name (Anthropic and Responses name every event; Chat Completions does not).
    pub event: Option<String>,
    /// The payload; a multi-line payload is sent as several `data:` lines.
    pub data: String,
}

impl SseEvent {
    /// A named event whose payload is `data` serialized as compact JSON.
    #[must_use]
    pub fn named(event: &str, data: &serde_json::Value) -> Self {
        Self {
            event: Some(event.to_owned()),
            data: data.to_string(),
        }
    }

    /// An unnamed event with a JSON payload.
    #[must_use]
    pub fn unnamed(data: &serde_json::Value) -> Self {
        Self {
            event: None,
            data: data.to_string(),
        }
    }

    /// An unnamed event with a raw text payload (Chat Completions' final `[DONE]`).
    #[must_use]
    pub fn raw(data: &str) -> Self {
        Self {
            event: None,
            data: data.to_owned(),
        }
    }
}

/// The wire text of a sequence of events.
#[must_use]
pub fn encode(events: &[SseEvent]) -> String {
    let mut out = String::new();
    for event in events {
        if let Some(name) = &event.event {
            out.push_str("event: ");
            out.push_str(name);
            out.push('\n');
        }
        for line in event.data.split('\n') {
            out.push_str("data: ");
            out.push_str(line);
            out.push('\n');
        }
        out.push('\n');
    }
    out
}

/// Parses a complete stream back into events, following the SSE rules a client applies:
/// `\n`, `\r\n` or `\r` line ends, comments (`:`) ignored, one optional space after the colon,
/// `data` lines joined with `\n`, and an event dispatched at each blank line (an event without
/// `data` is dropped). Text after the last blank line is incomplete and ignored.
#[must_use]
pub fn decode(stream: &str) -> Vec<SseEvent> {
    let normalized = stream.replace("\r\n", "\n").replace('\r', "\n");
    let mut events = Vec::new();
    let mut name: Option<String> = None;
    let mut data: Option<String> = None;
    let mut lines = normalized.split('\n').peekable();
    while let Some(line) = lines.next() {
        if lines.peek().is_none() {
            break; // the text after the last line end is an unterminated line
        }
        if line.is_empty() {
            if let Some(payload) = data.take() {
                events.push(SseEvent {
                    event: name.take(),
                    data: payload,
                });
            }
            name = None;
            continue;
        }
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => name = Some(value.to_owned()),
            "data" => match &mut data {
                Some(existing) => {
                    existing.push('\n');
                    existing.push_str(value);
                }
                None => data = Some(value.to_owned()),
            },
            _ => {}
        }
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn encodes_named_unnamed_and_multiline_events() {
        let events = [
            SseEvent::named("message_start", &json!({"a": 1})),
            SseEvent::unnamed(&json!({"b": "x"})),
            SseEvent::raw("line1\nline2"),
            SseEvent::raw("[DONE]"),
        ];
        let wire = encode(&events);
        assert_eq!(
            wire,
            "event: message_start\ndata: {\"a\":1}\n\ndata: {\"b\":\"x\"}\n\n\
             data: line1\ndata: line2\n\ndata: [DONE]\n\n"
        );
        assert_eq!(decode(&wire), events);
    }

    #[test]
    fn decodes_like_a_client() {
        let wire = ": comment\r\nevent: e\r\ndata:no-space\r\n\r\nevent: lonely\n\ndata: tail";
        assert_eq!(
            decode(wire),
            [SseEvent {
                event: Some("e".into()),
                data: "no-space".into()
            }]
        );
    }
}
