//! Recognising a session that cannot go on because its context is full (patch
//! `continuity-handoff`, behaviour `Continuity`).
//!
//! A prompt that a session refuses as too long will be refused again: sending it once more into
//! the same session only burns a model call and leaves the thread unanswered. So a turn whose
//! failure says "the context is full" ends that session; the thread continues in a new one that
//! gets the whole thread (within a byte budget) instead of the old session's context.
//!
//! No adapter answers an overflow with a stop reason (`max_tokens`, `refusal`): each reports it
//! as an error, in its own words. The rows, first match decides; each was observed against the
//! real adapter driven offline into overflow by the fake LLM (docs/REAL_ADAPTERS.md, "Usage,
//! models, context overflow and compaction", 2026-12-01):
//!
//! | # | Agent | Answer | Observed |
//! |---|---|---|---|
//! | 1 | codex-acp 0.16.0 | `-32603`, `data.codex_error_info` = `context_window_exceeded` (and `data.message` "Codex ran out of room in the model's context window…") | overflow of the Responses API, streamed |
//! | 2 | claude-agent-acp 0.101.0 | `-32603` "Internal error: Prompt is too long" (no `data`) | when reactive compaction cannot make the prompt fit |
//! | 3 | any | a `-32603`/`-32602` whose message or `data` text names a provider's overflow: `context_length_exceeded`, "prompt is too long", "context window", "maximum context length" | provider error bodies passed through (OpenAI, Anthropic) |
//!
//! opencode 1.18.33 never surfaces an overflow: it compacts and re-sends the turn, answering
//! `end_turn`. So do the others before a hard overflow once they know the window; recognising
//! the errors above is the last line, not the first.
//!
//! Stop reasons are not exhaustion: `max_tokens` means the *answer* hit the output limit and
//! `max_turn_requests` that the agent hit its per-turn request cap. Neither says the context is
//! full, so neither ends the session (upstream rotates on both; the fork does not).

use serde_json::Value;

use crate::classify::{AgentFailure, AgentIdentity};

/// JSON-RPC "invalid params".
const INVALID_PARAMS: i32 = -32602;
/// JSON-RPC "internal error".
const INTERNAL_ERROR: i32 = -32603;

/// Provider wording of a context overflow, lower case.
const OVERFLOW_TEXT: [&str; 5] = [
    "context_length_exceeded",
    "context_window_exceeded",
    "prompt is too long",
    "maximum context length",
    "context window",
];

/// Whether the failure says the session's context is full.
pub fn is_exhausted(failure: &AgentFailure, _agent: &AgentIdentity) -> bool {
    if failure.code != INTERNAL_ERROR && failure.code != INVALID_PARAMS {
        return false;
    }
    if failure
        .data
        .as_ref()
        .and_then(|d| d.get("codex_error_info"))
        .and_then(Value::as_str)
        == Some("context_window_exceeded")
    {
        return true;
    }
    let mentions = |text: &str| {
        let lower = text.to_lowercase();
        OVERFLOW_TEXT.iter().any(|t| lower.contains(t))
    };
    mentions(&failure.message)
        || failure
            .data
            .as_ref()
            .is_some_and(|d| strings(d).any(mentions))
}

/// Every string inside a JSON value.
fn strings(value: &Value) -> Box<dyn Iterator<Item = &str> + '_> {
    match value {
        Value::String(s) => Box::new(std::iter::once(s.as_str())),
        Value::Array(items) => Box::new(items.iter().flat_map(strings)),
        Value::Object(map) => Box::new(map.values().flat_map(strings)),
        _ => Box::new(std::iter::empty()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn failure(code: i32, message: &str, data: Option<Value>) -> AgentFailure {
        AgentFailure::new(code, message, data.as_ref())
    }

    #[test]
    fn the_exhaustion_table() {
        let anyone = AgentIdentity::default();
        let rows = [
            (
                failure(
                    -32603,
                    "Internal error",
                    Some(json!({
                "message": "Codex ran out of room in the model's context window. Start a new thread or clear earlier history before retrying.",
                "codex_error_info": "context_window_exceeded"})),
                ),
                true,
            ),
            (
                failure(-32603, "Internal error: Prompt is too long", None),
                true,
            ),
            (
                failure(
                    -32603,
                    "Internal error",
                    Some(
                        json!({"details": "400 {\"error\":{\"code\":\"context_length_exceeded\"}}"}),
                    ),
                ),
                true,
            ),
            (
                failure(
                    -32602,
                    "This model's maximum context length is 8192 tokens",
                    None,
                ),
                true,
            ),
            // Not exhaustion: other internal errors, other codes, the same words elsewhere.
            (
                failure(
                    -32603,
                    "Internal error: OpenCode service failure",
                    Some(json!({"service": "session"})),
                ),
                false,
            ),
            (failure(-32002, "prompt is too long", None), false),
            (failure(-32000, "Authentication required", None), false),
        ];
        for (i, (f, want)) in rows.into_iter().enumerate() {
            assert_eq!(is_exhausted(&f, &anyone), want, "row {i}: {f:?}");
        }
    }
}
