//! The JSON schemas of every ACP method, per protocol version, generated from the SDK's types.
//!
//! The types are those of `agent-client-protocol-schema` 1.17.0 (the exact version the SDK 5.2.0
//! pins), module `v1` and, with its `unstable_protocol_v2` feature, `v2`. Each type derives
//! `schemars::JsonSchema` (feature `schemars`) and carries its method in the `x-method`
//! extension, which is how the ACP project generates its published `schema.json`. Here one schema
//! is generated per method and part (the request's or notification's `params`, the response's
//! `result`), so a failure names the method and the path inside its params.
//!
//! Only stable methods are listed, plus the v2 draft's methods (v2 is itself a draft): the
//! `unstable_*` features of the schema crate stay off, so a frame using an unstable method (or an
//! unstable field) fails as outside the schema.
//!
//! # Closed objects
//!
//! The generated schemas leave objects open (serde ignores unknown fields), but the
//! specification does not: "Implementations MUST NOT add any custom fields at the root of a type
//! that's part of the specification. All possible names are reserved for future protocol
//! versions." (ACP v1 "Extensibility", <https://agentclientprotocol.com/protocol/v1/extensibility>;
//! custom data goes in `_meta`). [`Closure::Closed`] therefore adds `unevaluatedProperties:
//! false` at every place a value is used (the root, property values, array items, map values),
//! never inside a definition or a `oneOf`/`anyOf` branch: JSON Schema 2020-12 lets
//! `unevaluatedProperties` see what `$ref` and the matching branch evaluated, so a tagged variant
//! (`{"type": "text"}` plus the fields of `TextContent`) and a struct with a flattened enum are
//! closed correctly, while `_meta` (declared `additionalProperties: true`) stays open.

use std::collections::BTreeMap;

use agent_client_protocol_schema::{v1, v2};
use jsonschema::Validator;
use schemars::JsonSchema;
use serde_json::Value;

/// An ACP protocol version with a schema here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum Version {
    /// ACP v1 (`protocolVersion: 1`).
    V1,
    /// The ACP v2 draft (`protocolVersion: 2`).
    V2,
}

impl Version {
    /// The version of a `protocolVersion` value, if it has a schema here.
    pub fn of_protocol_version(value: &Value) -> Option<Version> {
        match value.as_u64() {
            Some(1) => Some(Version::V1),
            Some(2) => Some(Version::V2),
            _ => None,
        }
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Version::V1 => "v1",
            Version::V2 => "v2",
        })
    }
}

/// Whether unknown fields fail (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Closure {
    /// Unknown fields fail, as the specification requires; extensions go in `_meta`.
    #[default]
    Closed,
    /// Only what the generated schemas check: types, required fields, enumerations.
    Open,
}

/// Which side sends a method's request or notification.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Sender {
    /// The client (the harness).
    Client,
    /// The agent.
    Agent,
}

/// A request (with its result schema) or a notification.
pub(crate) enum Shape {
    /// A request: the schema of its `params` and of its `result`.
    Request {
        params: Validator,
        result: Validator,
    },
    /// A notification: the schema of its `params`.
    Notification { params: Validator },
}

/// One method of one version.
pub(crate) struct Method {
    /// Who sends the request or notification.
    pub sender: Sender,
    /// Its schemas.
    pub shape: Shape,
}

/// Why the schemas could not be built (a bug in this crate or the SDK's schema, never input).
#[derive(Debug, thiserror::Error)]
#[error("the generated schema of {type_name} does not compile: {reason}")]
pub struct BuildError {
    type_name: &'static str,
    reason: String,
}

/// Every method of one version, by name.
pub(crate) type MethodTable = BTreeMap<&'static str, Method>;

/// The schema of `T`, closed or open, compiled.
fn compile<T: JsonSchema>(closure: Closure) -> Result<Validator, BuildError> {
    let mut schema = serde_json::to_value(schemars::schema_for!(T)).map_err(|e| BuildError {
        type_name: std::any::type_name::<T>(),
        reason: e.to_string(),
    })?;
    if closure == Closure::Closed {
        close(&mut schema, true);
    }
    jsonschema::validator_for(&schema).map_err(|e| BuildError {
        type_name: std::any::type_name::<T>(),
        reason: e.to_string(),
    })
}

/// The generated schema of `T` with `closure` applied, as JSON (for inspection and tests).
pub fn schema_of<T: JsonSchema>(closure: Closure) -> Value {
    let mut schema = serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null);
    if closure == Closure::Closed {
        close(&mut schema, true);
    }
    schema
}

/// Adds `unevaluatedProperties: false` to every use site under `schema` (see the module docs).
/// `use_site` says whether `schema` itself is one.
fn close(schema: &mut Value, use_site: bool) {
    let Value::Object(map) = schema else {
        return;
    };
    if use_site && !map.contains_key("additionalProperties") {
        map.insert("unevaluatedProperties".into(), Value::Bool(false));
    }
    for (key, child) in map.iter_mut() {
        match key.as_str() {
            "properties" | "patternProperties" | "$defs" | "definitions" => {
                let children_are_use_sites = key.ends_with("roperties");
                if let Value::Object(entries) = child {
                    for entry in entries.values_mut() {
                        close(entry, children_are_use_sites);
                    }
                }
            }
            "items" | "additionalProperties" | "contains" | "unevaluatedItems" => {
                close(child, true)
            }
            "prefixItems" => {
                if let Value::Array(items) = child {
                    items.iter_mut().for_each(|item| close(item, true));
                }
            }
            "oneOf" | "anyOf" | "allOf" => {
                if let Value::Array(branches) = child {
                    branches.iter_mut().for_each(|branch| close(branch, false));
                }
            }
            "not" | "if" | "then" | "else" => close(child, false),
            _ => {}
        }
    }
}

/// Adds a request method.
macro_rules! request {
    ($table:ident, $closure:ident, $sender:ident, $name:literal, $params:ty, $result:ty) => {
        $table.insert(
            $name,
            Method {
                sender: Sender::$sender,
                shape: Shape::Request {
                    params: compile::<$params>($closure)?,
                    result: compile::<$result>($closure)?,
                },
            },
        );
    };
}

/// Adds a notification method.
macro_rules! notification {
    ($table:ident, $closure:ident, $sender:ident, $name:literal, $params:ty) => {
        $table.insert(
            $name,
            Method {
                sender: Sender::$sender,
                shape: Shape::Notification {
                    params: compile::<$params>($closure)?,
                },
            },
        );
    };
}

/// The stable methods of ACP v1 (schema crate 1.17.0, no `unstable_*` feature).
pub(crate) fn v1_methods(closure: Closure) -> Result<MethodTable, BuildError> {
    let mut t = MethodTable::new();
    request!(
        t,
        closure,
        Client,
        "initialize",
        v1::InitializeRequest,
        v1::InitializeResponse
    );
    request!(
        t,
        closure,
        Client,
        "authenticate",
        v1::AuthenticateRequest,
        v1::AuthenticateResponse
    );
    request!(
        t,
        closure,
        Client,
        "logout",
        v1::LogoutRequest,
        v1::LogoutResponse
    );
    request!(
        t,
        closure,
        Client,
        "session/new",
        v1::NewSessionRequest,
        v1::NewSessionResponse
    );
    request!(
        t,
        closure,
        Client,
        "session/load",
        v1::LoadSessionRequest,
        v1::LoadSessionResponse
    );
    request!(
        t,
        closure,
        Client,
        "session/list",
        v1::ListSessionsRequest,
        v1::ListSessionsResponse
    );
    request!(
        t,
        closure,
        Client,
        "session/delete",
        v1::DeleteSessionRequest,
        v1::DeleteSessionResponse
    );
    request!(
        t,
        closure,
        Client,
        "session/resume",
        v1::ResumeSessionRequest,
        v1::ResumeSessionResponse
    );
    request!(
        t,
        closure,
        Client,
        "session/close",
        v1::CloseSessionRequest,
        v1::CloseSessionResponse
    );
    request!(
        t,
        closure,
        Client,
        "session/set_mode",
        v1::SetSessionModeRequest,
        v1::SetSessionModeResponse
    );
    request!(
        t,
        closure,
        Client,
        "session/set_config_option",
        v1::SetSessionConfigOptionRequest,
        v1::SetSessionConfigOptionResponse
    );
    request!(
        t,
        closure,
        Client,
        "session/prompt",
        v1::PromptRequest,
        v1::PromptResponse
    );
    notification!(t, closure, Client, "session/cancel", v1::CancelNotification);
    notification!(
        t,
        closure,
        Client,
        "$/cancel_request",
        v1::CancelRequestNotification
    );
    request!(
        t,
        closure,
        Agent,
        "session/request_permission",
        v1::RequestPermissionRequest,
        v1::RequestPermissionResponse
    );
    request!(
        t,
        closure,
        Agent,
        "fs/read_text_file",
        v1::ReadTextFileRequest,
        v1::ReadTextFileResponse
    );
    request!(
        t,
        closure,
        Agent,
        "fs/write_text_file",
        v1::WriteTextFileRequest,
        v1::WriteTextFileResponse
    );
    request!(
        t,
        closure,
        Agent,
        "terminal/create",
        v1::CreateTerminalRequest,
        v1::CreateTerminalResponse
    );
    request!(
        t,
        closure,
        Agent,
        "terminal/output",
        v1::TerminalOutputRequest,
        v1::TerminalOutputResponse
    );
    request!(
        t,
        closure,
        Agent,
        "terminal/release",
        v1::ReleaseTerminalRequest,
        v1::ReleaseTerminalResponse
    );
    request!(
        t,
        closure,
        Agent,
        "terminal/wait_for_exit",
        v1::WaitForTerminalExitRequest,
        v1::WaitForTerminalExitResponse
    );
    request!(
        t,
        closure,
        Agent,
        "terminal/kill",
        v1::KillTerminalRequest,
        v1::KillTerminalResponse
    );
    request!(
        t,
        closure,
        Agent,
        "elicitation/create",
        v1::CreateElicitationRequest,
        v1::CreateElicitationResponse
    );
    notification!(t, closure, Agent, "session/update", v1::SessionNotification);
    notification!(
        t,
        closure,
        Agent,
        "elicitation/complete",
        v1::CompleteElicitationNotification
    );
    Ok(t)
}

/// The methods of the ACP v2 draft (schema crate 1.17.0, `unstable_protocol_v2` only).
pub(crate) fn v2_methods(closure: Closure) -> Result<MethodTable, BuildError> {
    let mut t = MethodTable::new();
    request!(
        t,
        closure,
        Client,
        "initialize",
        v2::InitializeRequest,
        v2::InitializeResponse
    );
    request!(
        t,
        closure,
        Client,
        "auth/login",
        v2::LoginAuthRequest,
        v2::LoginAuthResponse
    );
    request!(
        t,
        closure,
        Client,
        "auth/logout",
        v2::LogoutAuthRequest,
        v2::LogoutAuthResponse
    );
    request!(
        t,
        closure,
        Client,
        "session/new",
        v2::NewSessionRequest,
        v2::NewSessionResponse
    );
    request!(
        t,
        closure,
        Client,
        "session/list",
        v2::ListSessionsRequest,
        v2::ListSessionsResponse
    );
    request!(
        t,
        closure,
        Client,
        "session/delete",
        v2::DeleteSessionRequest,
        v2::DeleteSessionResponse
    );
    request!(
        t,
        closure,
        Client,
        "session/resume",
        v2::ResumeSessionRequest,
        v2::ResumeSessionResponse
    );
    request!(
        t,
        closure,
        Client,
        "session/close",
        v2::CloseSessionRequest,
        v2::CloseSessionResponse
    );
    request!(
        t,
        closure,
        Client,
        "session/set_config_option",
        v2::SetSessionConfigOptionRequest,
        v2::SetSessionConfigOptionResponse
    );
    request!(
        t,
        closure,
        Client,
        "session/prompt",
        v2::PromptRequest,
        v2::PromptResponse
    );
    request!(
        t,
        closure,
        Client,
        "tool_call/cancel",
        v2::CancelToolCallRequest,
        v2::CancelToolCallResponse
    );
    request!(
        t,
        closure,
        Client,
        "terminal/cancel",
        v2::CancelTerminalRequest,
        v2::CancelTerminalResponse
    );
    notification!(
        t,
        closure,
        Client,
        "session/cancel",
        v2::CancelSessionNotification
    );
    notification!(
        t,
        closure,
        Client,
        "$/cancel_request",
        v2::CancelRequestNotification
    );
    request!(
        t,
        closure,
        Agent,
        "session/request_permission",
        v2::RequestPermissionRequest,
        v2::RequestPermissionResponse
    );
    request!(
        t,
        closure,
        Agent,
        "elicitation/create",
        v2::CreateElicitationRequest,
        v2::CreateElicitationResponse
    );
    notification!(
        t,
        closure,
        Agent,
        "session/update",
        v2::UpdateSessionNotification
    );
    notification!(
        t,
        closure,
        Agent,
        "elicitation/complete",
        v2::CompleteElicitationNotification
    );
    Ok(t)
}
