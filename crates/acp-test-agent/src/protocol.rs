//! Version negotiation, and the ACP v2 draft served as a translating front on the v1 agent.
//!
//! `--protocol` says which versions the agent supports: `v1` (the default, and the only mode in
//! which no front runs), `v2`, or `both`. At `initialize` the agent answers the requested
//! version if it supports it, else the latest version it supports (ACP v1 "Initialization",
//! "Version Negotiation": <https://agentclientprotocol.com/protocol/v1/initialization>). A client
//! that does not support the answer should close the connection; the agent does not refuse.
//! The one exception is `v1-refusing`, a mimic of an adapter that deviates: it refuses a
//! request for any version but 1 with `-32602`, so a client's fallback can be tested.
//!
//! With v2 negotiated, the front translates between the client's v2 frames and the v1 agent
//! behind it (the same handlers, transcripts, replies and faults), following the v2 draft
//! ("Session Setup", <https://agentclientprotocol.com/protocol/v2/draft/session-setup>; RFDs "v2
//! Required Session Methods" and "v2 Session Resume Replay", revision of 2026-07-02; the SDK's
//! schema 1.17.0 `v2` module):
//!
//! | v2 from the client | to the v1 agent | back to the client |
//! |---|---|---|
//! | `initialize` | a v1 `initialize` of its own (answer swallowed) | `protocolVersion: 2`, `info`, `capabilities.session` (`{}`, or absent with `--session-capability absent`) |
//! | `session/load` | — | `-32601`: v2 has no `session/load` |
//! | `session/resume` without `replayFrom` | `session/resume` | a `state_update` idle snapshot, then the answer |
//! | `session/resume`, `replayFrom: {"type": "start"}` | `session/load` | the replay as full `user_message` / `agent_message` updates with ids, the snapshot, the answer |
//! | `session/resume`, another cursor | — | `-32602` |
//! | `session/prompt` | `session/prompt` | `state_update` running, chunks with `messageId`, `state_update` idle with the stop reason, then the answer `{messageId}` |
//! | (the agent asks) | `session/request_permission` with `toolCall` | the same request with `title` and `subject: {type: "tool_call", toolCall}` |
//! | `session/resume`, `session/close`, `session/list` without the session capability | — | `-32601` |
//!
//! Message ids are `<session>/user/<turn>` and `<session>/agent/<turn>`: the same for a live
//! turn and for its replay, as v2 requires. The v1 agent names the turn in the `_meta` key
//! [`TURN_META`] of its chunks and prompt answers; the front reads and removes it.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::{Map, Value, json};

/// `_meta` key in which the v1 agent names the transcript turn a chunk or prompt answer belongs
/// to.
pub const TURN_META: &str = "acpTestAgent/turn";

/// The id of the front's own v1 `initialize` to the agent behind it.
const INNER_INITIALIZE_ID: &str = "acp-test-agent/v2-front-initialize";

/// The versions the agent supports (`--protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Protocol {
    /// ACP v1 only.
    #[default]
    V1,
    /// The ACP v2 draft only.
    V2,
    /// Both; v2 is the latest.
    Both,
    /// ACP v1 only, and a request for any other version is refused with `-32602` instead of
    /// answered with 1. Not what the specification asks; it mimics claude-agent-acp 0.101.0,
    /// which refuses a request for version 2 whose body it cannot read
    /// (docs/REAL_ADAPTERS.md, "Re-observed 2026-12-01"), so a client's fallback can be tested.
    V1Refusing,
}

/// The version the agent answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Negotiated {
    /// ACP v1.
    V1,
    /// The ACP v2 draft.
    V2,
}

impl Protocol {
    /// The requested version if supported, else the latest supported one.
    #[must_use]
    pub fn negotiate(self, requested: Option<u64>) -> Negotiated {
        match (self, requested) {
            (Protocol::V1 | Protocol::V1Refusing, _) => Negotiated::V1,
            (Protocol::V2, _) => Negotiated::V2,
            (Protocol::Both, Some(1)) => Negotiated::V1,
            (Protocol::Both, _) => Negotiated::V2,
        }
    }
}

/// Whether a v2 `initialize` answer includes `capabilities.session` (`--session-capability`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum SessionCapability {
    /// `capabilities.session: {}`: the required baseline session methods.
    #[default]
    Present,
    /// No `capabilities.session`: creating and prompting only.
    Absent,
}

/// What the front remembers about a request in flight.
#[derive(Debug, Clone)]
enum Pending {
    /// A prompt of this session.
    Prompt { session_id: String },
    /// A resume of this session; `replay` when it was turned into a v1 load.
    Resume { session_id: String, replay: bool },
}

#[derive(Debug, Default)]
struct State {
    negotiated: Option<Negotiated>,
    pending: HashMap<String, Pending>,
}

/// Where a line goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// To the v1 agent.
    Agent(String),
    /// To the client.
    Client(String),
}

/// The front of one connection.
#[derive(Debug)]
pub struct Front {
    protocol: Protocol,
    session: SessionCapability,
    name: String,
    version: String,
    state: Mutex<State>,
    /// Signalled when the agent behind answered the front's own `initialize`: the agent
    /// refuses every other request until then, so the client's next lines wait for it.
    inner_ready: tokio::sync::Notify,
}

impl Front {
    /// A front supporting `protocol`, presenting the agent as `name`/`version`.
    #[must_use]
    pub fn new(protocol: Protocol, session: SessionCapability, name: &str, version: &str) -> Self {
        Front {
            protocol,
            session,
            name: name.to_owned(),
            version: version.to_owned(),
            state: Mutex::default(),
            inner_ready: tokio::sync::Notify::new(),
        }
    }

    /// Whether `routes` hold the front's own `initialize` to the agent behind.
    #[must_use]
    pub fn initializes_inner(routes: &[Route]) -> bool {
        routes
            .iter()
            .any(|r| matches!(r, Route::Agent(line) if line.contains(INNER_INITIALIZE_ID)))
    }

    /// Waits until the agent behind answered the front's own `initialize`.
    pub async fn inner_initialized(&self) {
        self.inner_ready.notified().await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether v2 was negotiated on this connection.
    #[must_use]
    pub fn is_v2(&self) -> bool {
        self.lock().negotiated == Some(Negotiated::V2)
    }

    /// Routes one line the client wrote.
    pub fn from_client(&self, line: String) -> Vec<Route> {
        let Ok(Value::Object(mut frame)) = serde_json::from_str::<Value>(&line) else {
            return vec![Route::Agent(line)];
        };
        let method = frame
            .get("method")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let id = frame.get("id").cloned();
        let mut state = self.lock();
        if method.as_deref() == Some("initialize") {
            let requested = frame["params"]["protocolVersion"].as_u64();
            if self.protocol == Protocol::V1Refusing && requested != Some(1) {
                return vec![Route::Client(error(
                    id,
                    -32602,
                    "Invalid params",
                    json!("invalid initialize params: only protocol version 1 is read"),
                ))];
            }
            let negotiated = self.protocol.negotiate(requested);
            state.negotiated = Some(negotiated);
            if negotiated == Negotiated::V1 {
                return vec![Route::Agent(line)];
            }
            let inner = json!({"jsonrpc": "2.0", "id": INNER_INITIALIZE_ID, "method": "initialize",
                "params": {"protocolVersion": 1, "clientCapabilities": {}}});
            return vec![
                Route::Agent(inner.to_string()),
                Route::Client(response(id, self.v2_initialize_result())),
            ];
        }
        if state.negotiated != Some(Negotiated::V2) {
            return vec![Route::Agent(line)];
        }
        let Some(method) = method else {
            return vec![Route::Agent(line)];
        };
        let session_id = frame["params"]["sessionId"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let baseline = matches!(
            method.as_str(),
            "session/resume" | "session/close" | "session/list"
        );
        if method == "session/load" || (baseline && self.session == SessionCapability::Absent) {
            return vec![Route::Client(error(
                id,
                -32601,
                "Method not found",
                json!({"method": method}),
            ))];
        }
        let params = frame
            .entry("params")
            .or_insert_with(|| Value::Object(Map::new()));
        match method.as_str() {
            "session/new" => {
                if let Value::Object(params) = params {
                    params.entry("mcpServers").or_insert_with(|| json!([]));
                }
            }
            "session/resume" => {
                let replay_from = params
                    .as_object_mut()
                    .and_then(|p| p.remove("replayFrom"))
                    .unwrap_or(Value::Null);
                let replay = match &replay_from {
                    Value::Null => false,
                    cursor if cursor["type"] == "start" => true,
                    cursor => {
                        return vec![Route::Client(error(
                            id,
                            -32602,
                            "Invalid params: unsupported replayFrom cursor",
                            json!({"replayFrom": cursor}),
                        ))];
                    }
                };
                if let Value::Object(params) = params {
                    params.entry("mcpServers").or_insert_with(|| json!([]));
                }
                if replay {
                    frame.insert("method".into(), Value::from("session/load"));
                }
                if let Some(id) = &id {
                    state
                        .pending
                        .insert(id.to_string(), Pending::Resume { session_id, replay });
                }
            }
            "session/prompt" => {
                if let Some(id) = &id {
                    state.pending.insert(
                        id.to_string(),
                        Pending::Prompt {
                            session_id: session_id.clone(),
                        },
                    );
                }
                let running = update(
                    &session_id,
                    json!({"sessionUpdate": "state_update", "state": "running"}),
                );
                return vec![
                    Route::Client(running),
                    Route::Agent(Value::Object(frame).to_string()),
                ];
            }
            _ => return vec![Route::Agent(line)],
        }
        vec![Route::Agent(Value::Object(frame).to_string())]
    }

    /// The lines to write to the client for one line the v1 agent wrote.
    pub fn from_agent(&self, line: String) -> Vec<String> {
        let Ok(Value::Object(mut frame)) = serde_json::from_str::<Value>(&line) else {
            return vec![line];
        };
        let mut state = self.lock();
        if frame.get("id").and_then(Value::as_str) == Some(INNER_INITIALIZE_ID) {
            self.inner_ready.notify_one();
            return Vec::new();
        }
        if state.negotiated != Some(Negotiated::V2) {
            return vec![line];
        }
        let method = frame
            .get("method")
            .and_then(Value::as_str)
            .map(str::to_owned);
        match method.as_deref() {
            Some("session/update") => {
                let replaying = {
                    let sid = frame["params"]["sessionId"].as_str().unwrap_or_default();
                    state.pending.values().any(|p| {
                        matches!(p, Pending::Resume { session_id, replay: true } if session_id == sid)
                    })
                };
                if let Some(params) = frame.get_mut("params") {
                    v2_update(params, replaying);
                }
                vec![Value::Object(frame).to_string()]
            }
            Some("session/request_permission") => {
                if let Some(params) = frame.get_mut("params") {
                    v2_permission_request(params);
                }
                vec![Value::Object(frame).to_string()]
            }
            Some(_) => vec![line],
            None => {
                if let Some(Value::Array(options)) = frame
                    .get_mut("result")
                    .and_then(|r| r.get_mut("configOptions"))
                {
                    options.iter_mut().for_each(v2_config_option);
                }
                let line = Value::Object(frame.clone()).to_string();
                let key = frame.get("id").map(Value::to_string).unwrap_or_default();
                let Some(pending) = state.pending.remove(&key) else {
                    return vec![line];
                };
                let failed = frame.contains_key("error");
                match pending {
                    Pending::Resume { session_id, .. } => {
                        if failed {
                            return vec![line];
                        }
                        if let Some(Value::Object(result)) = frame.get_mut("result") {
                            result.remove("modes");
                        }
                        vec![idle(&session_id, None), Value::Object(frame).to_string()]
                    }
                    Pending::Prompt { session_id } => {
                        if failed {
                            return vec![idle(&session_id, None), line];
                        }
                        let result = frame.remove("result").unwrap_or(Value::Null);
                        let turn = result["_meta"][TURN_META].as_u64().unwrap_or_default();
                        let stop = result["stopReason"].clone();
                        frame.insert(
                            "result".into(),
                            json!({"messageId": message_id(&session_id, "user", turn)}),
                        );
                        vec![
                            idle(&session_id, Some(stop)),
                            Value::Object(frame).to_string(),
                        ]
                    }
                }
            }
        }
    }

    fn v2_initialize_result(&self) -> Value {
        let mut capabilities = Map::new();
        if self.session == SessionCapability::Present {
            capabilities.insert("session".into(), json!({}));
        }
        json!({
            "protocolVersion": 2,
            "info": {"name": self.name, "version": self.version},
            "capabilities": capabilities,
        })
    }
}

/// A v1 `session/request_permission`'s params, rewritten for v2: the tool call becomes the
/// request's `subject`, and its title the request's required `title`.
fn v2_permission_request(params: &mut Value) {
    let Some(params) = params.as_object_mut() else {
        return;
    };
    let Some(tool_call) = params.remove("toolCall") else {
        return;
    };
    let title = tool_call
        .get("title")
        .and_then(Value::as_str)
        .unwrap_or("permission")
        .to_owned();
    params.insert("title".into(), Value::from(title));
    params.insert(
        "subject".into(),
        json!({"type": "tool_call", "toolCall": tool_call}),
    );
}

/// A v1 config option, rewritten for v2: its `id` is `configId`.
fn v2_config_option(option: &mut Value) {
    if let Some(option) = option.as_object_mut()
        && let Some(id) = option.remove("id")
    {
        option.insert("configId".into(), id);
    }
}

/// A v1 `session/update`'s params, rewritten for v2: text chunks get their message id (and
/// replayed ones become full-content message updates), the turn marker leaves `_meta`.
fn v2_update(params: &mut Value, replaying: bool) {
    let session_id = params["sessionId"].as_str().unwrap_or_default().to_owned();
    let Some(update) = params.get_mut("update").and_then(Value::as_object_mut) else {
        return;
    };
    let kind = update
        .get("sessionUpdate")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let role = match kind.as_str() {
        "user_message_chunk" => "user",
        "agent_message_chunk" => "agent",
        _ => return,
    };
    let turn = update
        .get("_meta")
        .and_then(|m| m.get(TURN_META))
        .and_then(Value::as_u64)
        .unwrap_or_default();
    if let Some(Value::Object(meta)) = update.get_mut("_meta") {
        meta.remove(TURN_META);
        if meta.is_empty() {
            update.remove("_meta");
        }
    }
    update.insert(
        "messageId".into(),
        Value::from(message_id(&session_id, role, turn)),
    );
    if replaying {
        let content = update.remove("content").unwrap_or(Value::Null);
        update.insert("content".into(), json!([content]));
        update.insert(
            "sessionUpdate".into(),
            Value::from(format!("{role}_message")),
        );
    }
}

fn message_id(session_id: &str, role: &str, turn: u64) -> String {
    format!("{session_id}/{role}/{turn}")
}

fn update(session_id: &str, update: Value) -> String {
    json!({"jsonrpc": "2.0", "method": "session/update",
        "params": {"sessionId": session_id, "update": update}})
    .to_string()
}

fn idle(session_id: &str, stop: Option<Value>) -> String {
    let mut state = json!({"sessionUpdate": "state_update", "state": "idle"});
    if let Some(stop) = stop.filter(|s| !s.is_null()) {
        state["stopReason"] = stop;
    }
    update(session_id, state)
}

fn response(id: Option<Value>, result: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id.unwrap_or(Value::Null), "result": result}).to_string()
}

fn error(id: Option<Value>, code: i64, message: &str, data: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id.unwrap_or(Value::Null),
        "error": {"code": code, "message": message, "data": data}})
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusing_front_answers_a_request_for_another_version_with_an_error() {
        let front = Front::new(Protocol::V1Refusing, SessionCapability::Present, "n", "1");
        let routes = front.from_client(
            r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":2,"info":{"name":"c","version":"1"}}}"#.into(),
        );
        assert!(
            matches!(&routes[..], [Route::Client(e)] if e.contains("-32602")),
            "{routes:?}"
        );
        let v1 = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}}"#;
        assert_eq!(front.from_client(v1.into()), [Route::Agent(v1.into())]);
    }

    #[test]
    fn negotiation_answers_the_request_if_supported_else_the_latest() {
        let cases = [
            (Protocol::V1, Some(1), Negotiated::V1),
            (Protocol::V1, Some(2), Negotiated::V1),
            (Protocol::V2, Some(1), Negotiated::V2),
            (Protocol::V2, Some(2), Negotiated::V2),
            (Protocol::Both, Some(1), Negotiated::V1),
            (Protocol::Both, Some(2), Negotiated::V2),
            (Protocol::Both, Some(7), Negotiated::V2),
            (Protocol::Both, None, Negotiated::V2),
            (Protocol::V1Refusing, Some(1), Negotiated::V1),
        ];
        for (protocol, requested, want) in cases {
            assert_eq!(
                protocol.negotiate(requested),
                want,
                "{protocol:?} {requested:?}"
            );
        }
    }

    fn v2_front() -> Front {
        let front = Front::new(Protocol::Both, SessionCapability::Present, "n", "1");
        let routes = front.from_client(
            r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":2,"info":{"name":"c","version":"1"}}}"#.into(),
        );
        assert_eq!(routes.len(), 2);
        front
    }

    #[test]
    fn v2_initialize_is_answered_by_the_front_and_the_inner_answer_swallowed() {
        let front = Front::new(Protocol::Both, SessionCapability::Present, "n", "1");
        let routes = front.from_client(
            r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":2}}"#
                .into(),
        );
        let Route::Client(answer) = &routes[1] else {
            panic!("{routes:?}")
        };
        let answer: Value = serde_json::from_str(answer).unwrap();
        assert_eq!(
            answer["result"],
            json!({"protocolVersion": 2, "info": {"name": "n", "version": "1"},
                   "capabilities": {"session": {}}})
        );
        assert!(
            front
                .from_agent(format!(
                    r#"{{"jsonrpc":"2.0","id":"{INNER_INITIALIZE_ID}","result":{{}}}}"#
                ))
                .is_empty()
        );
        let v1 = Front::new(Protocol::Both, SessionCapability::Present, "n", "1");
        let line =
            r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}"#;
        assert_eq!(v1.from_client(line.into()), [Route::Agent(line.into())]);
        assert!(!v1.is_v2());
    }

    #[test]
    fn v2_has_no_load_and_resume_replays_only_when_asked() {
        let front = v2_front();
        let load = front.from_client(
            r#"{"jsonrpc":"2.0","id":1,"method":"session/load","params":{"sessionId":"s","cwd":"/"}}"#.into(),
        );
        assert!(matches!(&load[..], [Route::Client(e)] if e.contains("-32601")));
        let plain = front.from_client(
            r#"{"jsonrpc":"2.0","id":2,"method":"session/resume","params":{"sessionId":"s","cwd":"/"}}"#.into(),
        );
        let [Route::Agent(plain)] = &plain[..] else {
            panic!("{plain:?}")
        };
        assert!(plain.contains("\"session/resume\"") && plain.contains("mcpServers"));
        let replay = front.from_client(
            r#"{"jsonrpc":"2.0","id":3,"method":"session/resume","params":{"sessionId":"s","cwd":"/","replayFrom":{"type":"start"}}}"#.into(),
        );
        let [Route::Agent(replay)] = &replay[..] else {
            panic!("{replay:?}")
        };
        assert!(replay.contains("\"session/load\"") && !replay.contains("replayFrom"));
        let chunk = front.from_agent(format!(
            r#"{{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"s","update":{{"sessionUpdate":"user_message_chunk","content":{{"type":"text","text":"hi"}},"_meta":{{"{TURN_META}":0}}}}}}}}"#
        ));
        let chunk: Value = serde_json::from_str(&chunk[0]).unwrap();
        assert_eq!(
            chunk["params"]["update"],
            json!({"sessionUpdate": "user_message", "messageId": "s/user/0",
                   "content": [{"type": "text", "text": "hi"}]})
        );
        let answer = front.from_agent(r#"{"jsonrpc":"2.0","id":3,"result":{}}"#.into());
        assert_eq!(answer.len(), 2, "snapshot, then the answer");
        assert!(answer[0].contains("state_update") && answer[0].contains("idle"));
        let bad = front.from_client(
            r#"{"jsonrpc":"2.0","id":4,"method":"session/resume","params":{"sessionId":"s","cwd":"/","replayFrom":{"type":"message","id":"m"}}}"#.into(),
        );
        assert!(matches!(&bad[..], [Route::Client(e)] if e.contains("-32602")));
    }

    #[test]
    fn a_v2_prompt_reports_running_chunks_with_ids_idle_then_its_message_id() {
        let front = v2_front();
        let routes = front.from_client(
            r#"{"jsonrpc":"2.0","id":5,"method":"session/prompt","params":{"sessionId":"s","prompt":[{"type":"text","text":"q"}]}}"#.into(),
        );
        assert!(matches!(&routes[0], Route::Client(r) if r.contains("running")));
        let chunk = front.from_agent(format!(
            r#"{{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"s","update":{{"sessionUpdate":"agent_message_chunk","content":{{"type":"text","text":"a"}},"_meta":{{"{TURN_META}":2}}}}}}}}"#
        ));
        let chunk: Value = serde_json::from_str(&chunk[0]).unwrap();
        assert_eq!(chunk["params"]["update"]["messageId"], "s/agent/2");
        assert!(chunk["params"]["update"].get("_meta").is_none());
        let end = front.from_agent(format!(
            r#"{{"jsonrpc":"2.0","id":5,"result":{{"stopReason":"end_turn","_meta":{{"{TURN_META}":2}}}}}}"#
        ));
        let idle: Value = serde_json::from_str(&end[0]).unwrap();
        assert_eq!(idle["params"]["update"]["stopReason"], "end_turn");
        let answer: Value = serde_json::from_str(&end[1]).unwrap();
        assert_eq!(answer["result"], json!({"messageId": "s/user/2"}));
    }

    #[test]
    fn a_permission_request_gets_the_v2_title_and_subject() {
        let front = v2_front();
        let asked = front.from_agent(
            r#"{"jsonrpc":"2.0","id":"p","method":"session/request_permission","params":{"sessionId":"s","toolCall":{"toolCallId":"perm-1","title":"check","kind":"other"},"options":[{"optionId":"allow","name":"Allow once","kind":"allow_once"}]}}"#.into(),
        );
        let asked: Value = serde_json::from_str(&asked[0]).unwrap();
        assert_eq!(
            asked["params"],
            json!({"sessionId": "s", "title": "check",
                   "subject": {"type": "tool_call", "toolCall": {"toolCallId": "perm-1", "title": "check", "kind": "other"}},
                   "options": [{"optionId": "allow", "name": "Allow once", "kind": "allow_once"}]})
        );
    }

    #[test]
    fn without_the_session_capability_the_baseline_methods_are_not_found() {
        let front = Front::new(Protocol::V2, SessionCapability::Absent, "n", "1");
        front.from_client(
            r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":1}}"#
                .into(),
        );
        for method in ["session/resume", "session/close", "session/list"] {
            let routes = front.from_client(format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"{method}","params":{{"sessionId":"s","cwd":"/"}}}}"#
            ));
            assert!(
                matches!(&routes[..], [Route::Client(e)] if e.contains("-32601")),
                "{method}"
            );
        }
    }
}
