//! The frame tap: what the harness learns from the raw JSON-RPC lines it exchanges with an agent.
//!
//! The harness taps every line for its observer (upstream republishes the stream to owners).
//! Two things need the raw lines rather than the SDK's typed values:
//!
//! * **Replayed history stays private.** While a `session/load` is in flight the agent replays
//!   the whole conversation as `session/update` notifications. They must not reach the observer
//!   (and so the relay): it would republish the entire prior conversation on every restart
//!   (#2633). A `session/resume` without `replayFrom` must not replay (ACP v2 draft, "Session
//!   Setup": "When `replayFrom` is omitted or `null`, the Agent MUST NOT replay the
//!   conversation history"; v1 "resume" restores without replay), but an agent may replay
//!   anyway, or send updates for the session while it restores it. So [`WireWatch::hide`]
//!   tracks every restore request (`session/load` and `session/resume`) and its answer by
//!   JSON-RPC id, and hides every `session/update` of exactly that session in between. Updates
//!   of other sessions, and of the session after the answer, pass.
//! * **Capabilities by the negotiated version.** The typed `initialize` answer drops fields
//!   its version does not know, such as the ACP v2 draft's `capabilities.session`. The tap keeps
//!   the raw result and reads it with [`AgentCaps::from_initialize`], which looks at the
//!   answer's `protocolVersion` first ([`crate::gate`]).
//! * **The models a session offers** (for in-place model switches). A session's configuration
//!   options come in the answers to `session/new`, `session/load` and `session/resume` and in
//!   `config_option_update` notifications (ACP "Session Config Options"). The watch keeps the
//!   values of each session's `model` option, so a session that refuses a model switch can be
//!   told apart from one that does not offer the model at all ([`WireWatch::offers_model`]).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use buzz_session_store::Usage;

use serde_json::Value;

use crate::classify::AgentIdentity;
use crate::gate::AgentCaps;

/// The quoted method names that open a window in which the session's updates are hidden.
const RESTORE_METHODS: [&str; 2] = ["\"session/load\"", "\"session/resume\""];

#[derive(Debug, Default)]
struct Watch {
    /// The id of the `initialize` request, until its answer arrives.
    initialize: Option<Value>,
    /// The session capabilities of the `initialize` answer (read by its negotiated version),
    /// once it arrived.
    caps: Option<AgentCaps>,
    /// Who the agent said it is at `initialize`.
    identity: AgentIdentity,
    /// Restores in flight (`session/load`, `session/resume`): (request id, session id).
    restoring: Vec<(Value, String)>,
    /// The last usage each session reported (`usage_update`: `used`, `size`).
    usage: HashMap<String, Usage>,
    /// Sessions whose permission requests are refused (while the harness prompts them on its
    /// own, e.g. for a handoff).
    refusing: Vec<String>,
    /// `session/new` requests in flight (their answers name the new session).
    creating: Vec<Value>,
    /// The values of each session's `model` option, as last offered.
    models: HashMap<String, Vec<String>>,
}

/// Watches one agent connection's lines. Cheap for ordinary traffic: a line is parsed only when
/// it may matter (a request the watch cares about, or any incoming line while one is pending).
#[derive(Debug, Default)]
pub struct WireWatch {
    state: Mutex<Watch>,
}

impl WireWatch {
    fn lock(&self) -> MutexGuard<'_, Watch> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sees one line; returns whether it must be hidden from the observer. `outgoing` is true for
    /// lines the harness writes to the agent.
    pub fn hide(&self, line: &str, outgoing: bool) -> bool {
        if outgoing {
            if RESTORE_METHODS.iter().any(|m| line.contains(m))
                || line.contains("\"initialize\"")
                || line.contains("\"session/new\"")
            {
                self.outgoing(line);
            }
            return false;
        }
        if line.contains("\"usage_update\"") {
            self.usage_update(line);
        }
        if line.contains("\"config_option_update\"") {
            self.config_option_update(line);
        }
        let mut watch = self.lock();
        let creating = !watch.creating.is_empty();
        if watch.initialize.is_none() && watch.restoring.is_empty() && !creating {
            return false;
        }
        let Ok(frame) = serde_json::from_str::<Value>(line) else {
            return false;
        };
        if frame.get("method").is_none() {
            // A response: does it end something we wait for?
            let id = frame.get("id").cloned().unwrap_or(Value::Null);
            if watch.initialize.as_ref() == Some(&id) {
                watch.initialize = None;
                if let Some(result) = frame.get("result") {
                    watch.caps = Some(AgentCaps::from_initialize(result));
                    watch.identity = identity_of(result);
                }
            }
            watch.session_opened(&id, &frame);
            watch.restoring.retain(|(request_id, _)| *request_id != id);
            return false;
        }
        frame["method"] == "session/update"
            && frame["params"]["sessionId"]
                .as_str()
                .is_some_and(|sid| watch.restoring.iter().any(|(_, s)| s == sid))
    }

    fn outgoing(&self, line: &str) {
        let Ok(frame) = serde_json::from_str::<Value>(line) else {
            return;
        };
        let Some(id) = frame.get("id").cloned() else {
            return;
        };
        let mut watch = self.lock();
        match frame["method"].as_str() {
            Some("initialize") => watch.initialize = Some(id),
            Some("session/load" | "session/resume") => {
                if let Some(sid) = frame["params"]["sessionId"].as_str() {
                    watch.restoring.push((id, sid.to_string()));
                }
            }
            Some("session/new") => watch.creating.push(id),
            _ => {}
        }
    }

    /// The session capabilities from the raw `initialize` answer, read by the version it
    /// negotiated, once it arrived.
    pub fn caps(&self) -> Option<AgentCaps> {
        self.lock().caps
    }

    /// Refuses (or stops refusing) the permission requests of `session_id`.
    pub fn refuse_permissions(&self, session_id: &str, refuse: bool) {
        let mut watch = self.lock();
        watch.refusing.retain(|s| s != session_id);
        if refuse {
            watch.refusing.push(session_id.to_string());
        }
    }

    /// Whether the permission requests of `session_id` are refused.
    pub fn refuses_permissions(&self, session_id: &str) -> bool {
        self.lock().refusing.iter().any(|s| s == session_id)
    }

    /// The last usage session `session_id` reported (`usage_update`), if any.
    pub fn usage(&self, session_id: &str) -> Option<Usage> {
        self.lock().usage.get(session_id).cloned()
    }

    fn usage_update(&self, line: &str) {
        let Ok(frame) = serde_json::from_str::<Value>(line) else {
            return;
        };
        let params = &frame["params"];
        let update = &params["update"];
        if update["sessionUpdate"] != "usage_update" {
            return;
        }
        let (Some(session_id), Some(used)) =
            (params["sessionId"].as_str(), update["used"].as_u64())
        else {
            return;
        };
        let usage = Usage {
            used_tokens: used,
            context_tokens: update["size"].as_u64(),
        };
        self.lock().usage.insert(session_id.to_string(), usage);
    }

    /// Who the agent said it is at `initialize`.
    pub fn identity(&self) -> AgentIdentity {
        self.lock().identity.clone()
    }

    /// Whether `session_id`'s `model` option offers `model`: `None` when the watch never saw the
    /// session's options.
    pub fn offers_model(&self, session_id: &str, model: &str) -> Option<bool> {
        let watch = self.lock();
        let offered = watch.models.get(session_id)?;
        Some(offered.iter().any(|m| m == model))
    }

    fn config_option_update(&self, line: &str) {
        let Ok(frame) = serde_json::from_str::<Value>(line) else {
            return;
        };
        let params = &frame["params"];
        let update = &params["update"];
        if update["sessionUpdate"] != "config_option_update" {
            return;
        }
        if let Some(session_id) = params["sessionId"].as_str() {
            self.lock()
                .learn_models(session_id, &update["configOptions"]);
        }
    }
}

impl Watch {
    /// The answer `id` to a `session/new`, `session/load` or `session/resume`: the session's
    /// configuration options.
    fn session_opened(&mut self, id: &Value, frame: &Value) {
        let result = &frame["result"];
        let created = self.creating.iter().position(|r| r == id);
        let session_id = match created {
            Some(i) => {
                self.creating.remove(i);
                result["sessionId"].as_str().map(str::to_string)
            }
            None => self
                .restoring
                .iter()
                .find(|(r, _)| r == id)
                .map(|(_, session)| session.clone()),
        };
        if let Some(session_id) = session_id {
            self.learn_models(&session_id, &result["configOptions"]);
        }
    }

    /// Keeps the values of the `model` option (category `model`, else id `model`) among
    /// `options`. Absent options leave what is known.
    fn learn_models(&mut self, session_id: &str, options: &Value) {
        let Some(options) = options.as_array() else {
            return;
        };
        let model = options
            .iter()
            .find(|o| o["category"] == "model")
            .or_else(|| options.iter().find(|o| o["id"] == "model"));
        let mut values = Vec::new();
        if let Some(model) = model {
            select_values(&model["options"], &mut values);
        }
        self.models.insert(session_id.to_string(), values);
    }
}

/// The `value`s of a select option's choices, flat or grouped (`{group, name, options}`).
fn select_values(choices: &Value, out: &mut Vec<String>) {
    for choice in choices.as_array().into_iter().flatten() {
        match choice["value"].as_str() {
            Some(value) => out.push(value.to_string()),
            None => select_values(&choice["options"], out),
        }
    }
}

/// `agentInfo` (v1) or `info` (the v2 draft) of an `initialize` result.
fn identity_of(result: &Value) -> AgentIdentity {
    let info = result.get("agentInfo").unwrap_or(&result["info"]);
    let field = |name: &str| info[name].as_str().map(str::to_string);
    AgentIdentity {
        name: field("name"),
        version: field("version"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_models_a_session_offers_come_from_its_answers_and_updates() {
        let watch = WireWatch::default();
        assert!(!watch.hide(r#"{"jsonrpc":"2.0","id":3,"method":"session/new","params":{"cwd":"/","mcpServers":[]}}"#, true));
        assert_eq!(watch.offers_model("s1", "big"), None, "nothing seen yet");
        let options = r#"[{"id":"model","name":"Model","category":"model","type":"select","currentValue":"small","options":[{"value":"small","name":"Small"},{"group":"more","name":"More","options":[{"value":"big","name":"Big"}]}]}]"#;
        let answer = format!(
            r#"{{"jsonrpc":"2.0","id":3,"result":{{"sessionId":"s1","configOptions":{options}}}}}"#
        );
        assert!(!watch.hide(&answer, false));
        assert_eq!(watch.offers_model("s1", "big"), Some(true));
        assert_eq!(watch.offers_model("s1", "huge"), Some(false));

        // A reopened session's answer, then an update that drops `big`.
        watch.hide(r#"{"jsonrpc":"2.0","id":4,"method":"session/resume","params":{"sessionId":"s2","cwd":"/"}}"#, true);
        let resumed =
            format!(r#"{{"jsonrpc":"2.0","id":4,"result":{{"configOptions":{options}}}}}"#);
        watch.hide(&resumed, false);
        assert_eq!(watch.offers_model("s2", "big"), Some(true));
        let update = r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s2","update":{"sessionUpdate":"config_option_update","configOptions":[{"id":"model","name":"Model","type":"select","currentValue":"small","options":[{"value":"small","name":"Small"}]}]}}}"#;
        watch.hide(update, false);
        assert_eq!(watch.offers_model("s2", "big"), Some(false));
        assert_eq!(
            watch.offers_model("s1", "big"),
            Some(true),
            "other sessions unchanged"
        );
    }
    use crate::gate::{Negotiated, RestoreMethod};

    #[test]
    fn replay_of_the_loading_session_is_hidden_until_its_answer() {
        let w = WireWatch::default();
        assert!(!w.hide(
            r#"{"jsonrpc":"2.0","id":"a1","method":"session/load","params":{"sessionId":"s1","cwd":"/"}}"#,
            true
        ));
        let replay = r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{}}}"#;
        let other = r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s2","update":{}}}"#;
        assert!(w.hide(replay, false));
        assert!(
            !w.hide(other, false),
            "another session's updates still reach the observer"
        );
        assert!(!w.hide(r#"{"jsonrpc":"2.0","id":"zz","result":{}}"#, false));
        assert!(
            w.hide(replay, false),
            "an unrelated answer does not end the load"
        );
        assert!(!w.hide(r#"{"jsonrpc":"2.0","id":"a1","result":{}}"#, false));
        assert!(
            !w.hide(replay, false),
            "after the load answer, updates are live again"
        );
        assert!(!w.hide("not json", false));
    }

    #[test]
    fn a_failed_load_ends_the_replay_window_too() {
        let w = WireWatch::default();
        w.hide(
            r#"{"id":7,"method":"session/load","params":{"sessionId":"s1"}}"#,
            true,
        );
        w.hide(
            r#"{"id":7,"error":{"code":-32002,"message":"gone"}}"#,
            false,
        );
        assert!(!w.hide(
            r#"{"method":"session/update","params":{"sessionId":"s1"}}"#,
            false
        ));
    }

    #[test]
    fn a_v2_agent_replaying_during_resume_is_hidden_as_a_v1_load_is() {
        let w = WireWatch::default();
        w.hide(
            r#"{"jsonrpc":"2.0","id":"i","method":"initialize","params":{"protocolVersion":2}}"#,
            true,
        );
        w.hide(
            r#"{"jsonrpc":"2.0","id":"i","result":{"protocolVersion":2,"capabilities":{"session":{}},"info":{"name":"n","version":"1"}}}"#,
            false,
        );
        assert!(!w.hide(
            r#"{"jsonrpc":"2.0","id":"r1","method":"session/resume","params":{"sessionId":"s1","cwd":"/"}}"#,
            true
        ));
        let replayed = r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"old"}}}}"#;
        let other = r#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s2","update":{}}}"#;
        assert!(
            w.hide(replayed, false),
            "a replay the client did not ask for"
        );
        assert!(!w.hide(other, false));
        assert!(!w.hide(r#"{"jsonrpc":"2.0","id":"r1","result":{}}"#, false));
        assert!(!w.hide(replayed, false), "live after the resume answer");
    }

    #[test]
    fn a_v1_resume_in_flight_hides_the_sessions_updates_until_its_error() {
        let w = WireWatch::default();
        w.hide(
            r#"{"id":3,"method":"session/resume","params":{"sessionId":"s1","cwd":"/"}}"#,
            true,
        );
        let update = r#"{"method":"session/update","params":{"sessionId":"s1","update":{}}}"#;
        assert!(w.hide(update, false));
        w.hide(
            r#"{"id":3,"error":{"code":-32002,"message":"Resource not found"}}"#,
            false,
        );
        assert!(!w.hide(update, false));
    }

    #[test]
    fn overlapping_restores_each_end_their_own_window() {
        let w = WireWatch::default();
        w.hide(
            r#"{"id":"a","method":"session/load","params":{"sessionId":"s1"}}"#,
            true,
        );
        w.hide(
            r#"{"id":"b","method":"session/resume","params":{"sessionId":"s2"}}"#,
            true,
        );
        let s1 = r#"{"method":"session/update","params":{"sessionId":"s1"}}"#;
        let s2 = r#"{"method":"session/update","params":{"sessionId":"s2"}}"#;
        assert!(w.hide(s1, false) && w.hide(s2, false));
        w.hide(r#"{"id":"b","result":{}}"#, false);
        assert!(w.hide(s1, false), "s1 is still loading");
        assert!(!w.hide(s2, false), "s2 is resumed");
    }

    #[test]
    fn initialize_result_gives_caps_by_version_and_identity() {
        let w = WireWatch::default();
        assert_eq!(w.caps(), None);
        w.hide(
            r#"{"jsonrpc":"2.0","id":"i","method":"initialize","params":{}}"#,
            true,
        );
        w.hide(
            r#"{"jsonrpc":"2.0","id":"i","result":{"protocolVersion":2,"capabilities":{"session":{"delete":{}}},"info":{"name":"opencode","version":"1.18.33"}}}"#,
            false,
        );
        let caps = w.caps().unwrap();
        assert_eq!(caps.negotiated, Negotiated::V2);
        assert_eq!(caps.restore(), Some(RestoreMethod::Resume));
        assert!(caps.may_close() && caps.delete && !caps.load);
        assert_eq!(
            w.identity(),
            AgentIdentity {
                name: Some("opencode".into()),
                version: Some("1.18.33".into())
            }
        );
    }

    #[test]
    fn a_v1_initialize_result_gives_v1_caps_and_agent_info() {
        let w = WireWatch::default();
        w.hide(r#"{"id":0,"method":"initialize","params":{}}"#, true);
        w.hide(
            r#"{"id":0,"result":{"protocolVersion":1,"agentCapabilities":{"loadSession":true},"agentInfo":{"name":"codex-acp","version":"0.16.0"}}}"#,
            false,
        );
        let caps = w.caps().unwrap();
        assert_eq!(caps.negotiated, Negotiated::V1);
        assert_eq!(caps.restore(), Some(RestoreMethod::Load));
        assert!(!caps.may_close());
        assert_eq!(w.identity().name.as_deref(), Some("codex-acp"));
    }
}
