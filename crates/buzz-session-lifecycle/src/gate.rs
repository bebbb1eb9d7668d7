//! Which session methods the agent allows, read by the protocol version both sides agreed on.
//!
//! An ACP client must not call a session method the agent did not advertise at `initialize`,
//! and what "advertised" means depends on the negotiated protocol version: the `protocolVersion`
//! of the agent's `initialize` answer. The client asks for the latest version it supports; the
//! agent answers with that version if it supports it, else with the latest one it supports, and
//! both then act by that version's specification. So this module reads the answer's version
//! first, then that version's layout, and nothing else: capability keys of the other layout
//! mean nothing (they are an extension at best) and are ignored.
//!
//! | negotiated | where the session methods are advertised | restore | close |
//! |---|---|---|---|
//! | 1 | `agentCapabilities.loadSession`; `agentCapabilities.sessionCapabilities.{list, resume, close, delete}` (each `{}` when supported) | `session/resume` if advertised, else `session/load` if advertised (its replay is kept private by [`crate::wire`]), else none | if `sessionCapabilities.close` |
//! | 2 | `capabilities.session` present: `session/new`, `list`, `resume`, `close`, `prompt`, `cancel`, `update` are all required. Optional markers: `session.prompt`, `session.mcp`, `session.delete`, `session.additionalDirectories`, `session.systemPrompt`, unstable `session.fork` | `session/resume` **without** `replayFrom` (no replay); never `session/load`, which v2 does not have | always, when `capabilities.session` is present |
//! | 2, no `capabilities.session` | no session methods beyond creating and prompting | none | never |
//! | anything else | nothing | none | never |
//!
//! Of the optional v2 markers only `session.delete` names a method; the others qualify
//! parameters the harness does not send, so they are not read. `capabilities.session.{load,
//! resume, close}` (and `list`) were fields of an earlier v2 draft schema; the current draft
//! removed them, and the one adapter we observed answering v2, claude-agent-acp 0.101.0, sends none
//! of them (docs/REAL_ADAPTERS.md, "Re-observed 2026-12-01"), so they are not read either: an
//! agent that sends them is told nothing by them.
//!
//! # Sources
//!
//! * ACP v1, "Initialization" (version negotiation; `loadSession`; "Clients and Agents MUST
//!   treat all capabilities omitted … as UNSUPPORTED"),
//!   <https://agentclientprotocol.com/protocol/v1/initialization>, repository
//!   agentclientprotocol/agent-client-protocol `docs/protocol/v1/initialization.mdx` at
//!   e923612d. `session/resume` was stabilised on 2026-04-22 and `session/close` on 2026-04-23
//!   (<https://agentclientprotocol.com/announcements/session-resume-stabilized>,
//!   <https://agentclientprotocol.com/announcements/session-close-stabilized>), `session/delete`
//!   on 2026-06-05 (<https://agentclientprotocol.com/announcements/session-delete-stabilized>);
//!   `session/list` earlier (RFD updates, 2026-03-09). `session/fork` is not stable.
//! * ACP v2 draft, "Session Setup" (`session/resume` with `replayFrom`; "When `replayFrom` is
//!   omitted or `null`, the Agent MUST NOT replay"; `session/close` required with the session
//!   surface), <https://agentclientprotocol.com/protocol/v2/draft/session-setup>, same
//!   repository, `docs/protocol/v2/draft/session-setup.mdx` at 3ab2fb4e.
//! * RFD "v2 Required Session Methods", draft, revision history "2026-07-02: Initial draft",
//!   <https://agentclientprotocol.com/rfds/v2/required-session-methods>.
//! * RFD "v2 Session Resume Replay", draft, revision history "2026-07-02: Initial draft",
//!   <https://agentclientprotocol.com/rfds/v2/session-resume-replay>.
//! * The SDK's schema, agent-client-protocol-schema 1.17.0, `v2::SessionCapabilities` (fields
//!   `prompt`, `mcp`, `delete`, `additionalDirectories`, `systemPrompt`, unstable `fork`, …; no
//!   `load`, `list`, `resume`, `close`) and `v2::ResumeSessionRequest::replay_from`.
//!
//! Where the two RFDs disagree: one published text of "Required Session Methods" (the web
//! page, and the copy of the same date in forks of the repository) still lists `session/load`
//! among the required methods and removes a `session.load` marker, while "Session Resume
//! Replay" removes `session/load` from v2 altogether. We follow "Session Resume Replay" (and
//! the later text of "Required Session Methods" in agentclientprotocol/agent-client-protocol
//! at 3700e6de, which drops `session/load` from its list and defers to it), because that is
//! what the v2 schema and the v2 "Session Setup" page implement: the SDK's v2 schema has no
//! `session/load` method and no `load` marker. A v2 client that sent `session/load` would call
//! a method the negotiated version does not define.

use serde::Serialize;
use serde_json::Value;

/// The protocol version both sides agreed on at `initialize` (the answer's `protocolVersion`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Negotiated {
    /// ACP v1 (`protocolVersion: 1`).
    #[default]
    V1,
    /// The ACP v2 draft (`protocolVersion: 2`).
    V2,
    /// Any other answer (missing, not a number, a version this crate does not know). The SDK
    /// refuses such a connection; if one gets through, nothing is advertised.
    Unknown,
}

impl Negotiated {
    /// The generation an `initialize` result (the JSON-RPC `result` object) negotiated.
    pub fn of_initialize(result: &Value) -> Negotiated {
        match result.get("protocolVersion").and_then(Value::as_u64) {
            Some(1) => Negotiated::V1,
            Some(2) => Negotiated::V2,
            _ => Negotiated::Unknown,
        }
    }
}

/// The session methods the agent's `initialize` answer makes available, under the negotiated
/// version. Each field says whether the client may send that method; it is a set of methods,
/// so it is a set of flags. Build it with [`AgentCaps::from_initialize`]; the default is a v1
/// agent that advertised nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AgentCaps {
    /// The version the fields were read by.
    pub negotiated: Negotiated,
    /// `session/load` (v1 only; replays the history as `session/update` before answering).
    pub load: bool,
    /// `session/list`.
    pub list: bool,
    /// `session/resume` (without `replayFrom`: no replay).
    pub resume: bool,
    /// `session/close`.
    pub close: bool,
    /// `session/delete`.
    pub delete: bool,
}

/// A v1 capability is advertised by presence: `true` for `loadSession`, an object for the
/// `sessionCapabilities` entries. `false`, `null` and anything else mean "not advertised".
fn advertised(v: Option<&Value>) -> bool {
    matches!(v, Some(Value::Bool(true)) | Some(Value::Object(_)))
}

/// A v2 marker is advertised by an object; omitted and `null` are equivalent and mean no.
fn marker(v: Option<&Value>) -> bool {
    matches!(v, Some(Value::Object(_)))
}

impl AgentCaps {
    /// Reads an `initialize` result (the JSON-RPC `result` object) by its negotiated version.
    pub fn from_initialize(result: &Value) -> AgentCaps {
        let negotiated = Negotiated::of_initialize(result);
        match negotiated {
            Negotiated::V1 => {
                let caps = &result["agentCapabilities"];
                let session = &caps["sessionCapabilities"];
                AgentCaps {
                    negotiated,
                    load: advertised(caps.get("loadSession")),
                    list: advertised(session.get("list")),
                    resume: advertised(session.get("resume")),
                    close: advertised(session.get("close")),
                    delete: advertised(session.get("delete")),
                }
            }
            Negotiated::V2 => match result["capabilities"].get("session") {
                Some(session @ Value::Object(_)) => AgentCaps {
                    negotiated,
                    load: false,
                    list: true,
                    resume: true,
                    close: true,
                    delete: marker(session.get("delete")),
                },
                _ => AgentCaps {
                    negotiated,
                    ..AgentCaps::default()
                },
            },
            Negotiated::Unknown => AgentCaps {
                negotiated,
                ..AgentCaps::default()
            },
        }
    }

    /// How a stored session is reopened with this agent, if at all: `session/resume` when
    /// available (it does not replay the history: nothing to hide from the observer, no replay
    /// cost), else `session/load` (v1 only), else none (the receipt cannot be used; a new
    /// session replaces it). In v2 the resume is sent without `replayFrom`.
    pub fn restore(self) -> Option<RestoreMethod> {
        if self.resume {
            Some(RestoreMethod::Resume)
        } else if self.load && self.negotiated == Negotiated::V1 {
            Some(RestoreMethod::Load)
        } else {
            None
        }
    }

    /// Whether `session/close` may be sent to release a session.
    pub fn may_close(self) -> bool {
        self.close
    }
}

/// How a stored session is reopened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum RestoreMethod {
    /// `session/resume` (v1 and v2; sent without `replayFrom`, so no history is replayed).
    #[serde(rename = "session/resume")]
    Resume,
    /// `session/load` (v1 only; the agent replays the history before answering).
    #[serde(rename = "session/load")]
    Load,
}

impl RestoreMethod {
    /// The method with this JSON-RPC name, if it is a restore method.
    pub fn named(method: &str) -> Option<RestoreMethod> {
        [RestoreMethod::Load, RestoreMethod::Resume]
            .into_iter()
            .find(|m| m.method() == method)
    }

    /// The JSON-RPC method name, as sent.
    pub fn method(self) -> &'static str {
        match self {
            RestoreMethod::Resume => "session/resume",
            RestoreMethod::Load => "session/load",
        }
    }
}

/// The restore method for `caps`; the same as [`AgentCaps::restore`].
pub fn restore_method(caps: AgentCaps) -> Option<RestoreMethod> {
    caps.restore()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// One row of the gate's table: an `initialize` result and what it allows.
    struct Row {
        name: &'static str,
        result: Value,
        negotiated: Negotiated,
        restore: Option<RestoreMethod>,
        close: bool,
        list: bool,
        delete: bool,
    }

    fn rows() -> Vec<Row> {
        let v1_full = json!({"protocolVersion": 1, "agentCapabilities": {"loadSession": true,
            "sessionCapabilities": {"list": {}, "resume": {}, "close": {}, "delete": {}}}});
        vec![
            Row {
                name: "v1, everything advertised: resume wins over load",
                result: v1_full,
                negotiated: Negotiated::V1,
                restore: Some(RestoreMethod::Resume),
                close: true,
                list: true,
                delete: true,
            },
            Row {
                name: "v1, loadSession only (codex-acp before resume, the test agent's default)",
                result: json!({"protocolVersion": 1, "agentCapabilities": {"loadSession": true}}),
                negotiated: Negotiated::V1,
                restore: Some(RestoreMethod::Load),
                close: false,
                list: false,
                delete: false,
            },
            Row {
                name: "v1, resume and close without loadSession",
                result: json!({"protocolVersion": 1, "agentCapabilities": {
                    "sessionCapabilities": {"resume": {}, "close": {}}}}),
                negotiated: Negotiated::V1,
                restore: Some(RestoreMethod::Resume),
                close: true,
                list: false,
                delete: false,
            },
            Row {
                name: "v1, nothing: loadSession false, null markers",
                result: json!({"protocolVersion": 1, "agentCapabilities": {"loadSession": false,
                    "sessionCapabilities": {"resume": null, "close": false}}}),
                negotiated: Negotiated::V1,
                restore: None,
                close: false,
                list: false,
                delete: false,
            },
            Row {
                name: "v1 answer in the v2 layout is read as v1: nothing advertised",
                result: json!({"protocolVersion": 1,
                    "capabilities": {"session": {"load": {}, "resume": {}, "close": {}}}}),
                negotiated: Negotiated::V1,
                restore: None,
                close: false,
                list: false,
                delete: false,
            },
            Row {
                name: "v2, capabilities.session {}: the whole baseline",
                result: json!({"protocolVersion": 2, "capabilities": {"session": {}},
                    "info": {"name": "a", "version": "1"}}),
                negotiated: Negotiated::V2,
                restore: Some(RestoreMethod::Resume),
                close: true,
                list: true,
                delete: false,
            },
            Row {
                name: "v2 with the optional markers (delete read, others ignored)",
                result: json!({"protocolVersion": 2, "capabilities": {"session": {
                    "prompt": {"image": {}}, "mcp": {"stdio": {}}, "delete": {},
                    "additionalDirectories": {}, "fork": {}}}}),
                negotiated: Negotiated::V2,
                restore: Some(RestoreMethod::Resume),
                close: true,
                list: true,
                delete: true,
            },
            Row {
                name: "v2 with the removed draft markers: load never, resume/close by presence",
                result: json!({"protocolVersion": 2,
                    "capabilities": {"session": {"load": {}, "resume": null, "close": null}}}),
                negotiated: Negotiated::V2,
                restore: Some(RestoreMethod::Resume),
                close: true,
                list: true,
                delete: false,
            },
            Row {
                name: "v2 without capabilities.session: creating and prompting only",
                result: json!({"protocolVersion": 2, "capabilities": {}}),
                negotiated: Negotiated::V2,
                restore: None,
                close: false,
                list: false,
                delete: false,
            },
            Row {
                name: "v2 with capabilities.session null",
                result: json!({"protocolVersion": 2, "capabilities": {"session": null}}),
                negotiated: Negotiated::V2,
                restore: None,
                close: false,
                list: false,
                delete: false,
            },
            Row {
                name: "v2 answer carrying the v1 layout is read as v2: no session surface",
                result: json!({"protocolVersion": 2, "agentCapabilities": {"loadSession": true,
                    "sessionCapabilities": {"resume": {}, "close": {}}}}),
                negotiated: Negotiated::V2,
                restore: None,
                close: false,
                list: false,
                delete: false,
            },
            Row {
                name: "unknown version: nothing",
                result: json!({"protocolVersion": 3, "capabilities": {"session": {}}}),
                negotiated: Negotiated::Unknown,
                restore: None,
                close: false,
                list: false,
                delete: false,
            },
            Row {
                name: "no version at all: nothing",
                result: json!({"agentCapabilities": {"loadSession": true}}),
                negotiated: Negotiated::Unknown,
                restore: None,
                close: false,
                list: false,
                delete: false,
            },
            Row {
                name: "not an object: nothing",
                result: json!(null),
                negotiated: Negotiated::Unknown,
                restore: None,
                close: false,
                list: false,
                delete: false,
            },
        ]
    }

    #[test]
    fn the_gate_reads_the_layout_of_the_negotiated_version() {
        for row in rows() {
            let caps = AgentCaps::from_initialize(&row.result);
            assert_eq!(caps.negotiated, row.negotiated, "{}", row.name);
            assert_eq!(caps.restore(), row.restore, "{}", row.name);
            assert_eq!(restore_method(caps), row.restore, "{}", row.name);
            assert_eq!(caps.may_close(), row.close, "{}", row.name);
            assert_eq!(caps.list, row.list, "{}", row.name);
            assert_eq!(caps.delete, row.delete, "{}", row.name);
        }
    }

    #[test]
    fn v2_never_restores_with_load() {
        let caps = AgentCaps {
            negotiated: Negotiated::V2,
            load: true,
            ..AgentCaps::default()
        };
        assert_eq!(caps.restore(), None);
        let v1 = AgentCaps {
            load: true,
            ..AgentCaps::default()
        };
        assert_eq!(v1.restore(), Some(RestoreMethod::Load));
    }

    #[test]
    fn restore_methods_have_their_wire_names() {
        assert_eq!(
            RestoreMethod::named("session/resume"),
            Some(RestoreMethod::Resume)
        );
        assert_eq!(
            RestoreMethod::named("session/load"),
            Some(RestoreMethod::Load)
        );
        assert_eq!(RestoreMethod::named("session/new"), None);
        assert_eq!(
            serde_json::to_value(RestoreMethod::Load).ok(),
            Some(json!("session/load"))
        );
    }
}
