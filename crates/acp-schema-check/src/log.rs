//! Checking a whole wire log of `acp-test-agent` (`--wire-log`, and `--wire-log-sent` for the
//! agent's own frames).
//!
//! Per agent process (the frames' `pid`), the `initialize` exchange comes first: the request is
//! checked against the schema of the version it asks for (the client claims to speak it), the
//! answer's `protocolVersion` is the negotiated version, and every later frame is checked against
//! the schema of its method in that version: each request and notification the client wrote,
//! each response it read (matched to its request by id), and each frame the agent wrote. A log
//! without the agent's frames has no answer to read the version from; the caller then names the
//! version ([`check_wire_log`]'s `assumed`).

use std::collections::HashMap;

use acp_test_agent::harness::{Direction, FrameKind, WireFrame};
use serde_json::{Map, Value};

use crate::frame::{Checker, Frame, Part, Violation};
use crate::schemas::{Sender, Version};

/// A violation found in a wire log, with where it is.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct LogViolation {
    /// 1-based index of the frame in the log.
    pub frame: usize,
    /// The agent process.
    pub pid: u32,
    /// Who wrote the frame.
    pub sender: Sender,
    /// The version it was checked against (`None`: none could be told).
    pub version: Option<Version>,
    /// What is wrong.
    pub violation: Violation,
}

impl std::fmt::Display for LogViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let version = self.version.map_or("?".to_owned(), |v| v.to_string());
        write!(
            f,
            "frame {} (pid {}, {:?}, {version}): {}",
            self.frame, self.pid, self.sender, self.violation
        )
    }
}

/// What checking a log found.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct LogReport {
    /// Frames checked against a schema.
    pub checked: usize,
    /// Responses whose request is not in the log (nothing to check them against).
    pub unmatched: usize,
    /// Everything outside the schema.
    pub violations: Vec<LogViolation>,
}

/// What one agent process has negotiated so far.
#[derive(Default)]
struct Connection {
    /// The answer's version, once the agent's `initialize` answer was seen.
    negotiated: Option<Version>,
    /// Requests waiting for their answer: (who sent the request, id) → method.
    pending: HashMap<(Sender, String), String>,
}

/// Checks every frame of a wire log. `assumed` is the version used when the log does not show
/// the agent's `initialize` answer.
#[must_use]
pub fn check_wire_log(
    checker: &Checker,
    frames: &[WireFrame],
    assumed: Option<Version>,
) -> LogReport {
    let mut report = LogReport::default();
    let mut connections: HashMap<u32, Connection> = HashMap::new();
    for (index, wire) in frames.iter().enumerate() {
        let connection = connections.entry(wire.pid).or_default();
        let sender = match wire.direction {
            Direction::Received => Sender::Client,
            Direction::Sent => Sender::Agent,
        };
        let message = message_of(wire);
        let id = wire.id.as_ref().map(Value::to_string).unwrap_or_default();
        let (version, found) = match (wire.kind, wire.method.as_deref()) {
            (FrameKind::Request, Some("initialize")) => {
                connection
                    .pending
                    .insert((sender, id), "initialize".to_owned());
                let requested = Version::of_protocol_version(&wire.params["protocolVersion"]);
                let version = requested.or(Some(Version::V1));
                let mut found = checker.check(
                    version.unwrap_or(Version::V1),
                    Frame::Call {
                        sender,
                        message: &message,
                    },
                );
                if requested.is_none() {
                    found.push(unversioned("initialize", &wire.params["protocolVersion"]));
                }
                (version, found)
            }
            (FrameKind::Request | FrameKind::Notification, Some(method)) => {
                if wire.kind == FrameKind::Request {
                    connection.pending.insert((sender, id), method.to_owned());
                }
                let version = connection.negotiated.or(assumed);
                let found = match version {
                    Some(version) => checker.check(
                        version,
                        Frame::Call {
                            sender,
                            message: &message,
                        },
                    ),
                    None => vec![no_version(method)],
                };
                (version, found)
            }
            _ => {
                let requester = match sender {
                    Sender::Client => Sender::Agent,
                    Sender::Agent => Sender::Client,
                };
                let Some(method) = connection.pending.remove(&(requester, id)) else {
                    report.unmatched += 1;
                    continue;
                };
                if method == "initialize" && sender == Sender::Agent && !wire.error {
                    connection.negotiated =
                        Version::of_protocol_version(&wire.params["protocolVersion"]);
                }
                let version = if method == "initialize" {
                    connection.negotiated.or(Version::of_protocol_version(
                        &wire.params["protocolVersion"],
                    ))
                } else {
                    connection.negotiated.or(assumed)
                };
                let found = match version {
                    Some(version) => checker.check(
                        version,
                        Frame::Response {
                            method: &method,
                            message: &message,
                        },
                    ),
                    None if method == "initialize" && !wire.error => {
                        vec![unversioned("initialize", &wire.params["protocolVersion"])]
                    }
                    None if method == "initialize" => Vec::new(),
                    None => vec![no_version(&method)],
                };
                (version, found)
            }
        };
        report.checked += 1;
        report
            .violations
            .extend(found.into_iter().map(|violation| LogViolation {
                frame: index + 1,
                pid: wire.pid,
                sender,
                version,
                violation,
            }));
    }
    report
}

/// The JSON-RPC message a wire frame records (the log keeps no `jsonrpc` member: it is
/// restored as `"2.0"`, so the envelope check covers id, method and params only).
fn message_of(wire: &WireFrame) -> Value {
    let mut message = Map::new();
    message.insert("jsonrpc".into(), Value::from("2.0"));
    if let Some(id) = &wire.id {
        message.insert("id".into(), id.clone());
    }
    match (&wire.method, wire.kind) {
        (Some(method), _) => {
            message.insert("method".into(), Value::from(method.clone()));
            if !wire.params.is_null() {
                message.insert("params".into(), wire.params.clone());
            }
        }
        (None, _) => {
            let key = if wire.error { "error" } else { "result" };
            message.insert(key.into(), wire.params.clone());
        }
    }
    Value::Object(message)
}

fn unversioned(method: &str, version: &Value) -> Violation {
    Violation {
        method: method.to_owned(),
        part: Part::Params,
        path: "/protocolVersion".into(),
        message: format!("protocolVersion {version} is not a version with a schema (1 or 2)"),
    }
}

fn no_version(method: &str) -> Violation {
    Violation {
        method: method.to_owned(),
        part: Part::Envelope,
        path: String::new(),
        message: "no negotiated version: the log has no initialize answer and none was assumed"
            .into(),
    }
}
