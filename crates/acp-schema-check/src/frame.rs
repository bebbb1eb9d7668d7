//! Checking one JSON-RPC frame against the schema of its method.

use jsonschema::Validator;
use serde_json::Value;

use crate::schemas::{
    BuildError, Closure, Method, MethodTable, Sender, Shape, Version, v1_methods, v2_methods,
};

/// Which part of a frame a violation is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Part {
    /// The JSON-RPC envelope (`jsonrpc`, `id`, `method`, `result`/`error`).
    Envelope,
    /// A request's or notification's `params`.
    Params,
    /// A response's `result`.
    Result,
    /// A response's `error`.
    Error,
}

/// One way a frame is outside the schema.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Violation {
    /// The method of the frame (for a response: of the request it answers); empty when unknown.
    pub method: String,
    /// The part of the frame.
    pub part: Part,
    /// JSON pointer of the offending value inside that part (`""` is the part itself).
    pub path: String,
    /// What is wrong, as the validator says it.
    pub message: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let part = match self.part {
            Part::Envelope => "envelope",
            Part::Params => "params",
            Part::Result => "result",
            Part::Error => "error",
        };
        let path = if self.path.is_empty() {
            "/"
        } else {
            &self.path
        };
        write!(f, "{} {part} {path}: {}", self.method, self.message)
    }
}

/// A frame as the checker sees it: what it is and who sent it.
#[derive(Clone, Copy, Debug)]
pub enum Frame<'a> {
    /// A request or notification (`method` present) sent by `sender`.
    Call {
        /// The sender.
        sender: Sender,
        /// The whole JSON-RPC message.
        message: &'a Value,
    },
    /// A response, to a request of `method` that the other side sent.
    Response {
        /// The method of the request it answers.
        method: &'a str,
        /// The whole JSON-RPC message.
        message: &'a Value,
    },
}

/// The compiled schemas of both versions. Building compiles every method's schema (a few
/// milliseconds); build once and check many frames.
pub struct Checker {
    v1: MethodTable,
    v2: MethodTable,
}

impl std::fmt::Debug for Checker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checker")
            .field("v1_methods", &self.v1.keys().collect::<Vec<_>>())
            .field("v2_methods", &self.v2.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Checker {
    /// Compiles the schemas of both versions with `closure`.
    ///
    /// # Errors
    ///
    /// [`BuildError`] if a generated schema does not compile (a bug, not bad input).
    pub fn new(closure: Closure) -> Result<Checker, BuildError> {
        Ok(Checker {
            v1: v1_methods(closure)?,
            v2: v2_methods(closure)?,
        })
    }

    fn table(&self, version: Version) -> &MethodTable {
        match version {
            Version::V1 => &self.v1,
            Version::V2 => &self.v2,
        }
    }

    /// The method names `version` defines.
    pub fn methods(&self, version: Version) -> impl Iterator<Item = &'static str> + '_ {
        self.table(version).keys().copied()
    }

    /// Checks one frame under `version`. An empty list means the frame is valid.
    ///
    /// Extension methods (names starting with `_`) are accepted with any object (or absent)
    /// `params` and any `result`; `_meta` is accepted wherever the schema declares it.
    pub fn check(&self, version: Version, frame: Frame<'_>) -> Vec<Violation> {
        match frame {
            Frame::Call { sender, message } => self.check_call(version, sender, message),
            Frame::Response { method, message } => self.check_response(version, method, message),
        }
    }

    fn check_call(&self, version: Version, sender: Sender, message: &Value) -> Vec<Violation> {
        let method = message["method"].as_str().unwrap_or_default();
        let mut out = envelope(method, message);
        if !out.is_empty() || method.starts_with('_') {
            return out;
        }
        let is_request = message.get("id").is_some();
        let violation = |message: String| Violation {
            method: method.to_owned(),
            part: Part::Envelope,
            path: "/method".into(),
            message,
        };
        let Some(Method {
            sender: owner,
            shape,
        }) = self.table(version).get(method)
        else {
            out.push(violation(format!("ACP {version} has no method {method:?}")));
            return out;
        };
        if *owner != sender {
            out.push(violation(format!(
                "{method} is sent by the {owner:?} in ACP {version}, not by the {sender:?}"
            )));
            return out;
        }
        let params = message.get("params").unwrap_or(&Value::Null);
        match (shape, is_request) {
            (Shape::Request { params: schema, .. }, true)
            | (Shape::Notification { params: schema }, false) => {
                out.extend(violations(schema, params, method, Part::Params));
            }
            (Shape::Request { .. }, false) => {
                out.push(violation(format!("{method} is a request but has no id")));
            }
            (Shape::Notification { .. }, true) => {
                out.push(violation(format!(
                    "{method} is a notification but has an id"
                )));
            }
        }
        out
    }

    fn check_response(&self, version: Version, method: &str, message: &Value) -> Vec<Violation> {
        let mut out = envelope(method, message);
        if !out.is_empty() {
            return out;
        }
        if let Some(error) = message.get("error") {
            out.extend(error_object(method, error));
            return out;
        }
        if method.starts_with('_') {
            return out;
        }
        let result = message.get("result").unwrap_or(&Value::Null);
        match self.table(version).get(method).map(|m| &m.shape) {
            Some(Shape::Request { result: schema, .. }) => {
                out.extend(violations(schema, result, method, Part::Result));
            }
            _ => out.push(Violation {
                method: method.to_owned(),
                part: Part::Envelope,
                path: String::new(),
                message: format!("a response, but ACP {version} has no request {method:?}"),
            }),
        }
        out
    }
}

/// The JSON-RPC 2.0 envelope: `jsonrpc: "2.0"`, an id that is a string, number or null, a
/// string method, `params` an object when present (ACP params are always objects), and exactly
/// one of `result` / `error` in a response.
fn envelope(method: &str, message: &Value) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut fail = |path: &str, text: &str| {
        out.push(Violation {
            method: method.to_owned(),
            part: Part::Envelope,
            path: path.to_owned(),
            message: text.to_owned(),
        });
    };
    let Some(object) = message.as_object() else {
        fail("", "a JSON-RPC message must be an object");
        return out;
    };
    if message["jsonrpc"] != "2.0" {
        fail("/jsonrpc", "must be \"2.0\"");
    }
    if let Some(id) = object.get("id")
        && !(id.is_string() || id.is_i64() || id.is_u64() || id.is_null())
    {
        fail("/id", "must be a string, an integer or null");
    }
    match object.get("method") {
        Some(Value::String(_)) => {
            if object.get("params").is_some_and(|p| !p.is_object()) {
                fail("/params", "ACP params are an object");
            }
            for key in object.keys() {
                if !matches!(key.as_str(), "jsonrpc" | "id" | "method" | "params") {
                    fail(&format!("/{key}"), "not a member of a JSON-RPC request");
                }
            }
        }
        Some(_) => fail("/method", "must be a string"),
        None => {
            if object.contains_key("result") == object.contains_key("error") {
                fail("", "a response has exactly one of result and error");
            }
            if !object.contains_key("id") {
                fail("/id", "a response has an id");
            }
            for key in object.keys() {
                if !matches!(key.as_str(), "jsonrpc" | "id" | "result" | "error") {
                    fail(&format!("/{key}"), "not a member of a JSON-RPC response");
                }
            }
        }
    }
    out
}

/// A JSON-RPC error object: an integer `code`, a string `message`, any `data`.
fn error_object(method: &str, error: &Value) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut fail = |path: &str, text: &str| {
        out.push(Violation {
            method: method.to_owned(),
            part: Part::Error,
            path: path.to_owned(),
            message: text.to_owned(),
        });
    };
    let Some(object) = error.as_object() else {
        fail("", "an error is an object");
        return out;
    };
    if !object.get("code").is_some_and(Value::is_i64) {
        fail("/code", "must be an integer");
    }
    if !object.get("message").is_some_and(Value::is_string) {
        fail("/message", "must be a string");
    }
    for key in object.keys() {
        if !matches!(key.as_str(), "code" | "message" | "data") {
            fail(&format!("/{key}"), "not a member of a JSON-RPC error");
        }
    }
    out
}

/// Every error of `instance` against `schema`, with its path. When a value fails for another
/// reason (a `oneOf` no branch matched, a wrong type), the "unevaluated properties" error the
/// failure causes at the same path is left out: it repeats the first one.
fn violations(schema: &Validator, instance: &Value, method: &str, part: Part) -> Vec<Violation> {
    let errors: Vec<_> = schema.iter_errors(instance).collect();
    let is_unevaluated = |e: &jsonschema::ValidationError<'_>| {
        matches!(
            e.kind(),
            jsonschema::error::ValidationErrorKind::UnevaluatedProperties { .. }
        )
    };
    let failed_paths: Vec<String> = errors
        .iter()
        .filter(|e| !is_unevaluated(e))
        .map(|e| e.instance_path().to_string())
        .collect();
    errors
        .iter()
        .filter(|e| !(is_unevaluated(e) && failed_paths.contains(&e.instance_path().to_string())))
        .map(|e| Violation {
            method: method.to_owned(),
            part,
            path: e.instance_path().to_string(),
            message: e.to_string(),
        })
        .collect()
}
