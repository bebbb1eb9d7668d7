//! Classifying what an agent says when it cannot reopen a stored session.
//!
//! A failed `session/load` or `session/resume` means one of three things, and the harness must
//! act differently on each:
//!
//! - [`Verdict::Gone`]: the agent no longer has that session. Forgetting the receipt and
//!   opening a fresh session (with the whole context window and a notice) is safe right away.
//! - [`Verdict::Unsupported`]: the agent cannot reopen sessions this way at all (`-32601`).
//!   Retrying is pointless; so is sending the method again to this agent.
//! - [`Verdict::Indeterminate`]: anything else (auth errors, service failures, signals nobody
//!   has seen). The session may still exist, so the receipt is kept and the attempt retried,
//!   within the bound the lifecycle sets.
//!
//! ACP v1 has no normative "session not found" code. Adapters are converging on `-32002`
//! (resource not found), but several answer with a generic code whose meaning only shows in
//! the message, the `data`, or who is speaking. So the verdict is taken from everything the
//! agent said ([`AgentFailure`]: code, message, data) plus its identity from `initialize`
//! ([`AgentIdentity`]: `agentInfo` name and version). Pure: no I/O, no clock.
//!
//! # Known signals
//!
//! Rules apply in this order; the first match decides. "Observed" rows were seen offline
//! against the real adapter (docs/REAL_ADAPTERS.md, "Observed facts", with the adapter
//! versions pinned in tools/adapters/package.json); "reported" rows come from reports of other
//! users and are not reproduced here. The agent's whole answer (code, message, data) is kept in
//! [`AgentFailure`] so a new row can be added from what an adapter really said.
//!
//! | # | Agent | Answer | Verdict | Source |
//! |---|---|---|---|---|
//! | 1 | any (claude-agent-acp 0.101.0 answers it to `session/load` under v2) | `-32601` method not found | Unsupported | JSON-RPC; observed 2026-12-01 |
//! | 2 | any (codex-acp 0.16.0, claude-agent-acp 0.101.0, acp-test-agent) | `-32002` resource not found, with or without `data.sessionId` | Gone | observed 2026-11-30 (unknown id, deleted storage; claude also after its subprocess died); re-observed 2026-12-01 for `session/resume` and `session/load`, UUID and non-UUID ids (codex: no `data`), claude under v1 and v2 (UUID: `data.sessionId`) |
//! | 3 | opencode (`agentInfo.name` "OpenCode"; 1.18.33) | `-32603`, message contains "OpenCode service failure", `data.service` = "session" | Gone | observed 2026-11-30 (unknown id, deleted storage); re-observed 2026-12-01 on `session/resume` and `session/load`, UUID and non-UUID ids |
//! | 4 | claude-agent-acp (`@agentclientprotocol/claude-agent-acp`, `@zed-industries/claude-agent-acp`) | `-32603`, `data.details` says `--resume requires a valid session ID` | Gone | observed 0.101.0 (an id that is not a UUID), on `session/resume` and `session/load`, v1 and v2 (2026-12-01) |
//! | 5 | any (claude-agent-acp before `-32002`, cursor-agent, opencode elsewhere) | `-32602` or `-32603` whose message or any `data` string contains "session not found" | Gone | reported |
//! | 6 | goose, gemini-cli | no distinctive signal known: rows 1, 2 and 5 apply | — | — |
//! | 7 | any | anything else (`-32000` auth required, other `-32603`, `-32602` without the text, …) | Indeterminate | — |
//!
//! Row 3 needs the identity: a `-32603` from an unknown agent is an ordinary internal error. It
//! is opencode's answer to every missing session we could produce, and a false "gone" costs
//! the thread only its earlier context (it is answered from the whole window, with a notice).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// JSON-RPC "method not found".
const METHOD_NOT_FOUND: i32 = -32601;
/// JSON-RPC "invalid params".
const INVALID_PARAMS: i32 = -32602;
/// JSON-RPC "internal error".
const INTERNAL_ERROR: i32 = -32603;
/// ACP "resource not found": the convergent "session is gone" code.
const RESOURCE_NOT_FOUND: i32 = -32002;

/// Everything the agent said in its JSON-RPC error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentFailure {
    /// The JSON-RPC error code.
    pub code: i32,
    /// The error message.
    pub message: String,
    /// The error's `data`, verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

/// Who the agent says it is (`agentInfo` of its `initialize` answer).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentIdentity {
    /// `agentInfo.name`, if the agent sent one.
    #[serde(default)]
    pub name: Option<String>,
    /// `agentInfo.version`, if the agent sent one.
    #[serde(default)]
    pub version: Option<String>,
}

impl AgentIdentity {
    /// Whether the agent's name is one of `names` (compared case-insensitively).
    fn is_any_of(&self, names: &[&str]) -> bool {
        self.name
            .as_deref()
            .is_some_and(|n| names.iter().any(|k| n.trim().eq_ignore_ascii_case(k)))
    }
}

/// Which known signal matched: a row of the table in the module docs. Logged and recorded so
/// an operator can see why a receipt was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Signal {
    /// Row 1: `-32601`.
    MethodNotFound,
    /// Row 2: `-32002`.
    ResourceNotFound,
    /// Row 3: opencode's session-service failure.
    OpencodeSessionServiceFailure,
    /// Row 4: claude-agent-acp rejecting the id given to `--resume`.
    ClaudeResumeRejectsId,
    /// Row 5: "session not found" in the message or data of a `-32602`/`-32603`.
    SessionNotFoundText,
}

/// What a failed `session/load` / `session/resume` means for the receipt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", content = "signal", rename_all = "snake_case")]
pub enum Verdict {
    /// The agent no longer has the session: drop the receipt, open a fresh session now.
    Gone(Signal),
    /// The agent cannot reopen sessions with this method at all.
    Unsupported(Signal),
    /// Unknown: keep the receipt and retry within the lifecycle's bound.
    Indeterminate,
}

impl AgentFailure {
    /// A failure with these parts.
    pub fn new(code: i32, message: &str, data: Option<&Value>) -> Self {
        AgentFailure {
            code,
            message: message.to_string(),
            data: data.cloned(),
        }
    }
}

/// Agent names claude-agent-acp has been published under.
const CLAUDE_AGENT_NAMES: &[&str] = &[
    "@agentclientprotocol/claude-agent-acp",
    "@zed-industries/claude-agent-acp",
    "claude-agent-acp",
];

/// Classifies a failed `session/load` or `session/resume` (see the module docs for the table).
#[must_use]
pub fn classify(failure: &AgentFailure, agent: &AgentIdentity) -> Verdict {
    match failure.code {
        METHOD_NOT_FOUND => return Verdict::Unsupported(Signal::MethodNotFound),
        RESOURCE_NOT_FOUND => return Verdict::Gone(Signal::ResourceNotFound),
        _ => {}
    }
    if failure.code == INTERNAL_ERROR
        && agent.is_any_of(&["OpenCode", "opencode"])
        && failure.message.contains("OpenCode service failure")
        && data_field(failure, "service") == Some("session")
    {
        return Verdict::Gone(Signal::OpencodeSessionServiceFailure);
    }
    if failure.code == INTERNAL_ERROR
        && agent.is_any_of(CLAUDE_AGENT_NAMES)
        && data_field(failure, "details")
            .is_some_and(|d| d.contains("--resume requires a valid session ID"))
    {
        return Verdict::Gone(Signal::ClaudeResumeRejectsId);
    }
    if matches!(failure.code, INVALID_PARAMS | INTERNAL_ERROR) && says_session_not_found(failure) {
        return Verdict::Gone(Signal::SessionNotFoundText);
    }
    Verdict::Indeterminate
}

/// A string field of an object `data`.
fn data_field<'a>(failure: &'a AgentFailure, field: &str) -> Option<&'a str> {
    failure.data.as_ref()?.get(field)?.as_str()
}

/// Whether the message or any string anywhere in `data` says "session not found".
fn says_session_not_found(failure: &AgentFailure) -> bool {
    let hit = |s: &str| s.to_ascii_lowercase().contains("session not found");
    hit(&failure.message) || failure.data.as_ref().is_some_and(|d| any_string(d, &hit))
}

/// Whether `pred` holds for any string value inside `value`.
fn any_string(value: &Value, pred: &impl Fn(&str) -> bool) -> bool {
    match value {
        Value::String(s) => pred(s),
        Value::Array(items) => items.iter().any(|v| any_string(v, pred)),
        Value::Object(map) => map.values().any(|v| any_string(v, pred)),
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn failure(code: i32, message: &str, data: Option<Value>) -> AgentFailure {
        AgentFailure {
            code,
            message: message.to_owned(),
            data,
        }
    }

    fn agent(name: &str, version: &str) -> AgentIdentity {
        AgentIdentity {
            name: Some(name.to_owned()),
            version: Some(version.to_owned()),
        }
    }

    fn anonymous() -> AgentIdentity {
        AgentIdentity::default()
    }

    #[test]
    fn row1_method_not_found_is_unsupported() {
        let f = failure(
            -32601,
            "Method not found",
            Some(json!({"method": "session/resume"})),
        );
        assert_eq!(
            classify(&f, &anonymous()),
            Verdict::Unsupported(Signal::MethodNotFound)
        );
    }

    #[test]
    fn row1_claude_agent_acp_v2_has_no_session_load() {
        // Observed 2026-12-01: claude-agent-acp 0.101.0 under protocol version 2.
        let f = failure(
            -32601,
            "\"Method not found\": session/load",
            Some(json!({"method": "session/load"})),
        );
        assert_eq!(
            classify(
                &f,
                &agent("@agentclientprotocol/claude-agent-acp", "0.101.0")
            ),
            Verdict::Unsupported(Signal::MethodNotFound)
        );
    }

    #[test]
    fn row2_codex_acp_resource_not_found_without_data_is_gone() {
        // Observed: codex-acp 0.16.0, unknown id and deleted rollouts, load and resume alike.
        let f = failure(-32002, "Resource not found", None);
        assert_eq!(
            classify(&f, &agent("codex-acp", "0.16.0")),
            Verdict::Gone(Signal::ResourceNotFound)
        );
    }

    #[test]
    fn row2_claude_agent_acp_resource_not_found_with_session_id_is_gone() {
        // Observed: claude-agent-acp 0.101.0, unknown UUID, deleted transcripts, dead subprocess.
        let f = failure(
            -32002,
            "Resource not found",
            Some(json!({"sessionId": "e35ce60b-885e-4c0b-98c9-9a98c64c65fe"})),
        );
        assert_eq!(
            classify(
                &f,
                &agent("@agentclientprotocol/claude-agent-acp", "0.101.0")
            ),
            Verdict::Gone(Signal::ResourceNotFound)
        );
        assert_eq!(
            classify(&f, &anonymous()),
            Verdict::Gone(Signal::ResourceNotFound)
        );
    }

    #[test]
    fn row3_opencode_session_service_failure_is_gone_only_from_opencode() {
        // Observed: opencode 1.18.33, unknown id and deleted storage.
        let f = failure(
            -32603,
            "Internal error: OpenCode service failure",
            Some(json!({"service": "session"})),
        );
        assert_eq!(
            classify(&f, &agent("OpenCode", "1.18.33")),
            Verdict::Gone(Signal::OpencodeSessionServiceFailure)
        );
        assert_eq!(classify(&f, &anonymous()), Verdict::Indeterminate);
        assert_eq!(
            classify(&f, &agent("codex-acp", "0.16.0")),
            Verdict::Indeterminate
        );
        // Another of opencode's services failing says nothing about the session.
        let other = failure(
            -32603,
            "Internal error: OpenCode service failure",
            Some(json!({"service": "provider"})),
        );
        assert_eq!(
            classify(&other, &agent("OpenCode", "1.18.33")),
            Verdict::Indeterminate
        );
    }

    #[test]
    fn row4_claude_agent_acp_rejecting_the_resume_id_is_gone() {
        // Observed: claude-agent-acp 0.101.0 given an id that is not a UUID.
        let f = failure(
            -32603,
            "Internal error",
            Some(
                json!({"details": "Claude Code returned an error result: Error: --resume requires a valid session ID or session title when used with --print."}),
            ),
        );
        assert_eq!(
            classify(
                &f,
                &agent("@agentclientprotocol/claude-agent-acp", "0.101.0")
            ),
            Verdict::Gone(Signal::ClaudeResumeRejectsId)
        );
        assert_eq!(classify(&f, &anonymous()), Verdict::Indeterminate);
    }

    #[test]
    fn row5_older_claude_agent_acp_session_not_found_details_is_gone() {
        // Reported: older claude-agent-acp, -32603 with data.details "Session not found".
        let f = failure(
            -32603,
            "Internal error",
            Some(json!({"details": "Session not found"})),
        );
        assert_eq!(
            classify(&f, &agent("@zed-industries/claude-agent-acp", "0.23.1")),
            Verdict::Gone(Signal::SessionNotFoundText)
        );
    }

    #[test]
    fn row5_cursor_agent_and_opencode_invalid_params_session_not_found_is_gone() {
        // Reported: cursor-agent and opencode elsewhere, -32602 with the text in data.
        let cursor = failure(-32602, "Invalid params", Some(json!("Session not found")));
        let opencode = failure(
            -32602,
            "Invalid params",
            Some(json!({"error": "Session not found: ses_123"})),
        );
        assert_eq!(
            classify(&cursor, &agent("cursor-agent", "1.0")),
            Verdict::Gone(Signal::SessionNotFoundText)
        );
        assert_eq!(
            classify(&opencode, &agent("OpenCode", "1.0.0")),
            Verdict::Gone(Signal::SessionNotFoundText)
        );
        let in_message = failure(-32602, "session not found: abc", None);
        assert_eq!(
            classify(&in_message, &anonymous()),
            Verdict::Gone(Signal::SessionNotFoundText)
        );
    }

    #[test]
    fn row6_goose_and_gemini_follow_the_generic_rows() {
        for name in ["goose", "gemini-cli"] {
            let id = agent(name, "1.0.0");
            assert_eq!(
                classify(&failure(-32002, "not found", None), &id),
                Verdict::Gone(Signal::ResourceNotFound)
            );
            assert_eq!(
                classify(&failure(-32603, "Internal error", None), &id),
                Verdict::Indeterminate
            );
        }
    }

    #[test]
    fn row7_unknown_signals_are_indeterminate() {
        let cases = [
            failure(-32000, "Authentication required", None),
            failure(
                -32603,
                "Internal error",
                Some(json!({"details": "rate limited"})),
            ),
            failure(-32602, "Invalid params", Some(json!({"field": "cwd"}))),
            failure(-32800, "Request cancelled", None),
            failure(1, "weird", Some(json!([1, {"x": null}]))),
            // The text alone does not make a non-params/internal code definitive.
            failure(-32000, "Session not found", None),
        ];
        for f in &cases {
            assert_eq!(
                classify(f, &agent("some-agent", "9.9")),
                Verdict::Indeterminate,
                "{f:?}"
            );
        }
    }

    #[test]
    fn verdicts_and_failures_have_stable_serde_names() {
        assert_eq!(
            serde_json::to_value(Verdict::Gone(Signal::OpencodeSessionServiceFailure)).ok(),
            Some(json!({"verdict": "gone", "signal": "opencode_session_service_failure"}))
        );
        assert_eq!(
            serde_json::to_value(Verdict::Indeterminate).ok(),
            Some(json!({"verdict": "indeterminate"}))
        );
        let parsed: Result<AgentFailure, _> =
            serde_json::from_value(json!({"code": -32002, "message": "m", "extra": 1}));
        assert!(parsed.is_err());
    }
}
