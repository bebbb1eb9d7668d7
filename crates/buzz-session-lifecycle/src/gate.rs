//! Which session methods the agent allows.
//!
//! An ACP client must not call a session method the agent did not advertise at `initialize`.
//! Two layouts exist: ACP v1 (`agentCapabilities.loadSession`,
//! `agentCapabilities.sessionCapabilities.{resume, close}`) and the v2 draft
//! (`capabilities.session.{load, resume, close}`); upstream already speaks protocol version 2, so
//! both are read. This module is the only place that decides, so no path can call around it.

use serde::Serialize;
use serde_json::Value;

/// The session capabilities an agent advertised.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AgentCaps {
    /// `session/load` (replays the history as `session/update`).
    pub load: bool,
    /// `session/resume` (no replay).
    pub resume: bool,
    /// `session/close`.
    pub close: bool,
}

/// A capability is advertised by presence: `true`, or an object (the v1 and v2 `resume`/`close`
/// entries are objects). `false`, `null` and anything else mean "not advertised".
fn advertised(v: Option<&Value>) -> bool {
    matches!(v, Some(Value::Bool(true)) | Some(Value::Object(_)))
}

impl AgentCaps {
    /// Reads both layouts from an `initialize` result (the JSON-RPC `result` object). A
    /// capability advertised in either place counts.
    pub fn from_initialize(result: &Value) -> AgentCaps {
        let v1 = &result["agentCapabilities"];
        let v1_session = &v1["sessionCapabilities"];
        let v2 = &result["capabilities"]["session"];
        AgentCaps {
            load: advertised(v1.get("loadSession")) || advertised(v2.get("load")),
            resume: advertised(v1_session.get("resume")) || advertised(v2.get("resume")),
            close: advertised(v1_session.get("close")) || advertised(v2.get("close")),
        }
    }
}

/// How a stored session is reopened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum RestoreMethod {
    /// `session/resume`.
    #[serde(rename = "session/resume")]
    Resume,
    /// `session/load`.
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

/// Picks the restore method: `session/resume` when advertised (it does not replay the history:
/// nothing to filter out of the observer path, no replay cost), else `session/load`, else none
/// (the receipt cannot be used; a new session replaces it).
pub fn restore_method(caps: AgentCaps) -> Option<RestoreMethod> {
    if caps.resume {
        Some(RestoreMethod::Resume)
    } else if caps.load {
        Some(RestoreMethod::Load)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn restore_method_table() {
        for (load, resume, want) in [
            (false, false, None),
            (true, false, Some(RestoreMethod::Load)),
            (false, true, Some(RestoreMethod::Resume)),
            (true, true, Some(RestoreMethod::Resume)),
        ] {
            let caps = AgentCaps {
                load,
                resume,
                close: false,
            };
            assert_eq!(restore_method(caps), want, "{caps:?}");
        }
        assert_eq!(
            RestoreMethod::named("session/resume"),
            Some(RestoreMethod::Resume)
        );
        assert_eq!(
            RestoreMethod::named("session/load"),
            Some(RestoreMethod::Load)
        );
        assert_eq!(RestoreMethod::named("session/new"), None);
    }

    #[test]
    fn both_capability_layouts_are_read() {
        let v1 = json!({"agentCapabilities": {"loadSession": true,
            "sessionCapabilities": {"resume": {}, "close": {}}}});
        let v2 = json!({"capabilities": {"session": {"load": {}, "resume": {}, "close": {}}}});
        let full = AgentCaps {
            load: true,
            resume: true,
            close: true,
        };
        assert_eq!(AgentCaps::from_initialize(&v1), full);
        assert_eq!(AgentCaps::from_initialize(&v2), full);
        let v2_load_only = json!({"capabilities": {"session": {"load": true, "close": null}}});
        assert_eq!(
            AgentCaps::from_initialize(&v2_load_only),
            AgentCaps {
                load: true,
                resume: false,
                close: false
            }
        );
        let none = json!({"agentCapabilities": {"loadSession": false}, "capabilities": 3});
        assert_eq!(AgentCaps::from_initialize(&none), AgentCaps::default());
        assert_eq!(
            AgentCaps::from_initialize(&json!(null)),
            AgentCaps::default()
        );
    }
}
