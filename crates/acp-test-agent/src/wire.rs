//! The tap on every line the agent receives: the `--wire-log` writer and the `--exit-on-request`
//! fault switch.
//!
//! Both run inside the `Stdio` debug callback, which the SDK calls synchronously for each raw
//! stdin line *before* parsing and dispatching it. That is what makes the log complete and
//! ordered (it sees the exact bytes, in arrival order, including messages no handler claims) and
//! what lets `--exit-on-request` die before the request is answered, with the fatal request
//! already in the log.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::error::AgentError;
use crate::harness::{Direction, FrameKind, WireFrame};

/// Exit status used by `--exit-on-request`, distinct from 1 (startup errors) and signals.
pub(crate) const EXIT_ON_REQUEST_STATUS: i32 = 3;

/// When to kill the process on purpose.
#[derive(Debug)]
struct ExitRule {
    /// The 1-based number of the request that triggers the exit.
    nth: u64,
    /// Only requests of this method count, when set.
    method: Option<String>,
}

/// Observes every received line; shared by the debug callback.
#[derive(Debug)]
pub(crate) struct WireTap {
    /// Append-mode handle of the wire log, if one was asked for.
    log: Option<File>,
    /// The `--exit-on-request` rule, if any.
    exit: Option<ExitRule>,
    /// Requests counted so far towards the exit rule.
    counted: AtomicU64,
    /// The agent id written into every frame: the process id, or a per-instance number for an
    /// agent served inside its client's process.
    pid: u32,
    /// Whether the lines the agent writes are logged too.
    log_sent: bool,
}

impl WireTap {
    /// Opens the wire log (append, created if missing) and arms the exit rule.
    ///
    /// # Errors
    ///
    /// [`AgentError::WireLog`] if the log cannot be opened.
    pub fn new(
        wire_log: Option<&Path>,
        exit_on_request: Option<u64>,
        exit_on_method: Option<String>,
    ) -> Result<Self, AgentError> {
        let log = wire_log
            .map(|path| {
                OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map_err(|source| AgentError::WireLog {
                        path: path.to_owned(),
                        source,
                    })
            })
            .transpose()?;
        Ok(Self {
            log,
            exit: exit_on_request.map(|nth| ExitRule {
                nth,
                method: exit_on_method,
            }),
            counted: AtomicU64::new(0),
            pid: std::process::id(),
            log_sent: false,
        })
    }

    /// The same tap for an agent served inside its client's process: frames carry `pid`
    /// instead of the process id, and there is no exit rule (exiting would end the client).
    pub fn in_process(wire_log: Option<&Path>, pid: u32) -> Result<Self, AgentError> {
        Ok(Self {
            pid,
            ..Self::new(wire_log, None, None)?
        })
    }

    /// Also logs the lines the agent writes (`--wire-log-sent`), as [`Direction::Sent`] frames.
    #[must_use]
    pub fn logging_sent(mut self, log_sent: bool) -> Self {
        self.log_sent = log_sent;
        self
    }

    /// Logs the frames of one line the agent wrote, when asked to.
    pub fn on_sent_line(&self, line: &str) {
        if !self.log_sent {
            return;
        }
        if let Some(log) = &self.log {
            for frame in frames_of_line(line, now_ms(), self.pid, Direction::Sent) {
                append_frame(log, &frame);
            }
        }
    }

    /// Logs the frames of one received line, then exits the process if the exit rule fires.
    pub fn on_received_line(&self, line: &str) {
        let frames = frames_of_line(line, now_ms(), self.pid, Direction::Received);
        if let Some(log) = &self.log {
            for frame in &frames {
                append_frame(log, frame);
            }
        }
        let Some(rule) = &self.exit else {
            return;
        };
        for frame in &frames {
            let counts = frame.kind == FrameKind::Request
                && rule
                    .method
                    .as_deref()
                    .is_none_or(|m| frame.method.as_deref() == Some(m));
            if counts && self.counted.fetch_add(1, Ordering::SeqCst) + 1 == rule.nth {
                tracing::warn!(method = ?frame.method, nth = rule.nth, "--exit-on-request: exiting");
                std::process::exit(EXIT_ON_REQUEST_STATUS);
            }
        }
    }
}

/// Writes one frame as one line with a single `write_all` on an `O_APPEND` handle, so agents
/// sharing a log file never interleave within a line. A failure is logged, never fatal: the wire
/// log is a diagnostic and must not change protocol behaviour.
fn append_frame(mut log: &File, frame: &WireFrame) {
    let mut buf = match serde_json::to_vec(frame) {
        Ok(buf) => buf,
        Err(e) => {
            tracing::warn!(error = %e, "cannot encode wire frame");
            return;
        }
    };
    buf.push(b'\n');
    if let Err(e) = log.write_all(&buf).and_then(|()| log.flush()) {
        tracing::warn!(error = %e, "cannot append to wire log");
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or_default()
}

/// The frames of one raw line: one for a single message, one per element for a batch, none for
/// a line that is not JSON-RPC (the SDK answers those itself; they are only traced here).
fn frames_of_line(line: &str, ts_ms: u64, pid: u32, direction: Direction) -> Vec<WireFrame> {
    let bytes = line.len() as u64;
    let messages = match serde_json::from_str::<Value>(line) {
        Ok(Value::Array(items)) => items,
        Ok(message) => vec![message],
        Err(e) => {
            tracing::warn!(error = %e, bytes, "received a line that is not JSON");
            return Vec::new();
        }
    };
    messages
        .into_iter()
        .filter_map(|message| {
            let Value::Object(mut fields) = message else {
                return None;
            };
            let id = fields.remove("id");
            let mut error = false;
            let (kind, method, params) = match fields.remove("method") {
                Some(Value::String(method)) => {
                    let kind = if id.is_some() {
                        FrameKind::Request
                    } else {
                        FrameKind::Notification
                    };
                    (
                        kind,
                        Some(method),
                        fields.remove("params").unwrap_or(Value::Null),
                    )
                }
                _ => {
                    error = fields.contains_key("error") && !fields.contains_key("result");
                    let outcome = fields.remove("result").or_else(|| fields.remove("error"))?;
                    (FrameKind::Response, None, outcome)
                }
            };
            Some(WireFrame {
                ts_ms,
                pid,
                kind,
                method,
                id,
                bytes,
                params,
                direction,
                error,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_requests_notifications_and_responses() {
        let frames = frames_of_line(
            r#"[{"jsonrpc":"2.0","id":"a","method":"session/prompt","params":{"x":1}},
               {"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s"}},
               {"jsonrpc":"2.0","id":7,"result":{"outcome":{"outcome":"cancelled"}}},
               {"jsonrpc":"2.0","id":8,"error":{"code":-1,"message":"m"}},
               {"jsonrpc":"2.0"}]"#,
            5,
            42,
            Direction::Received,
        );
        let kinds: Vec<_> = frames.iter().map(|f| f.kind).collect();
        assert_eq!(
            kinds,
            [
                FrameKind::Request,
                FrameKind::Notification,
                FrameKind::Response,
                FrameKind::Response
            ]
        );
        assert_eq!(frames[0].method.as_deref(), Some("session/prompt"));
        assert_eq!(frames[0].id, Some(Value::from("a")));
        assert_eq!(frames[1].id, None);
        assert_eq!(frames[2].params["outcome"]["outcome"], "cancelled");
        assert_eq!(frames[3].params["code"], -1);
        assert!(frames[3].error && !frames[2].error);
        assert!(frames.iter().all(|f| f.pid == 42 && f.ts_ms == 5));
        assert!(frames_of_line("not json", 0, 0, Direction::Sent).is_empty());
    }

    #[test]
    fn appends_one_line_per_frame() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wire.jsonl");
        let tap = WireTap::new(Some(&path), None, None).unwrap();
        let line = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#;
        tap.on_received_line(line);
        tap.on_received_line(line);
        let frames = crate::harness::read_wire_log(&path).unwrap();
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[1].bytes, line.len() as u64);
        assert_eq!(frames[1].pid, std::process::id());
    }
}
