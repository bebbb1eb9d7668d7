//! Mimicking real adapters: the exact error a given adapter answers when asked to reopen a
//! session it does not have (observed answers: docs/REAL_ADAPTERS.md). The default is `-32002`
//! plus `data.sessionId`, as SDK agents answer.

use std::fmt;
use std::str::FromStr;

use serde::Deserialize;
use serde_json::{Value, json};

/// The deprecated `--capabilities-layout` values (see `--protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum CapabilitiesLayout {
    /// ACP v1 (no change).
    #[default]
    V1,
    /// Now `--protocol v2`: the real v2 answer (`protocolVersion: 2`, `capabilities.session`).
    V2,
}

/// The error answered to `session/load` / `session/resume` of a session the agent does not
/// have. A `data` string `$SESSION_ID` (anywhere in `data`) becomes the requested id.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MissingSessionAnswer {
    /// JSON-RPC error code.
    pub code: i32,
    /// Error message.
    pub message: String,
    /// Error data, if any.
    #[serde(default)]
    pub data: Option<Value>,
}

/// Placeholder in `data` for the requested session id.
const SESSION_ID_PLACEHOLDER: &str = "$SESSION_ID";

/// The adapters whose answers are built in (see [`MissingSessionAnswer::preset`]).
pub const PRESET_NAMES: &[&str] = &["codex-acp", "claude-agent-acp", "opencode"];

impl MissingSessionAnswer {
    /// The answer of a built-in preset, as observed:
    /// * codex-acp 0.16.0: `-32002` "Resource not found", no data;
    /// * claude-agent-acp 0.101.0: `-32002` "Resource not found", `data.sessionId`;
    /// * opencode 1.18.33: `-32603` "Internal error: OpenCode service failure",
    ///   `data.service` "session".
    #[must_use]
    pub fn preset(name: &str) -> Option<Self> {
        let answer = |code, message: &str, data| Self {
            code,
            message: message.to_owned(),
            data,
        };
        match name {
            "codex-acp" => Some(answer(-32002, "Resource not found", None)),
            "claude-agent-acp" => Some(answer(
                -32002,
                "Resource not found",
                Some(json!({"sessionId": SESSION_ID_PLACEHOLDER})),
            )),
            "opencode" => Some(answer(
                -32603,
                "Internal error: OpenCode service failure",
                Some(json!({"service": "session"})),
            )),
            _ => None,
        }
    }

    /// The JSON-RPC error for `session_id`.
    #[must_use]
    pub fn to_error(&self, session_id: &str) -> agent_client_protocol::Error {
        let error = agent_client_protocol::Error::new(self.code, self.message.clone());
        match &self.data {
            Some(data) => error.data(substitute(data, session_id)),
            None => error,
        }
    }
}

/// `data` with every `$SESSION_ID` string replaced by the id.
fn substitute(data: &Value, session_id: &str) -> Value {
    match data {
        Value::String(s) if s == SESSION_ID_PLACEHOLDER => Value::String(session_id.to_owned()),
        Value::Array(items) => {
            Value::Array(items.iter().map(|v| substitute(v, session_id)).collect())
        }
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), substitute(v, session_id)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// A `--missing-session` value that is neither a preset nor a valid JSON answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "expected a preset ({presets}) or a JSON object {{\"code\", \"message\", \"data\"?}}: {reason}"
)]
pub struct BadMissingSessionAnswer {
    presets: String,
    reason: String,
}

impl FromStr for MissingSessionAnswer {
    type Err = BadMissingSessionAnswer;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let presets = PRESET_NAMES.join(", ");
        let s = s.trim();
        if s.starts_with('{') {
            serde_json::from_str(s).map_err(|e| BadMissingSessionAnswer {
                presets,
                reason: e.to_string(),
            })
        } else {
            Self::preset(s).ok_or_else(|| BadMissingSessionAnswer {
                presets,
                reason: format!("unknown preset {s:?}"),
            })
        }
    }
}

impl fmt::Display for MissingSessionAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?}", self.code, self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_and_json_answers_parse() {
        let opencode: MissingSessionAnswer = "opencode".parse().unwrap();
        assert_eq!(opencode.code, -32603);
        let claude: MissingSessionAnswer = "claude-agent-acp".parse().unwrap();
        let err = claude.to_error("abc");
        assert_eq!(err.code.value(), -32002);
        assert_eq!(err.data, Some(json!({"sessionId": "abc"})));
        let custom: MissingSessionAnswer =
            r#"{"code": -32602, "message": "Invalid params", "data": ["Session not found: $SESSION_ID", "$SESSION_ID"]}"#
                .parse()
                .unwrap();
        assert_eq!(
            custom.to_error("s1").data,
            Some(json!(["Session not found: $SESSION_ID", "s1"]))
        );
        assert!("nobody".parse::<MissingSessionAnswer>().is_err());
        assert!(r#"{"code": 1}"#.parse::<MissingSessionAnswer>().is_err());
        assert!(r#"{"code": 1, "message": "m", "x": 2}"#.parse::<MissingSessionAnswer>().is_err());
    }
}
