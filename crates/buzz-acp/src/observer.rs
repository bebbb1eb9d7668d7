//! The observer: a JSONL record of every ACP frame and lifecycle event.
//!
//! Upstream republishes each frame it reads (`acp_read`) and writes
//! (`acp_write`) to the relay for owners watching their agent. This model
//! records the same stream to a local file (`--observer-log`), one JSON object
//! per line, so tests can assert exactly what an observer would have seen.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

/// Direction of an ACP frame, from the harness's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameDirection {
    /// A line the harness wrote to the agent.
    Write,
    /// A line the harness read from the agent.
    Read,
}

/// A cheap, cloneable handle on the observer log (disabled when no file).
#[derive(Debug, Clone, Default)]
pub struct Observer {
    sink: Option<Arc<Mutex<File>>>,
}

impl Observer {
    /// An observer that records nothing.
    pub fn disabled() -> Self {
        Observer { sink: None }
    }

    /// Opens (appends to) an observer log file.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)?;
        }
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Observer {
            sink: Some(Arc::new(Mutex::new(file))),
        })
    }

    /// Whether records are kept.
    pub fn is_enabled(&self) -> bool {
        self.sink.is_some()
    }

    /// Records an ACP frame of worker `slot`.
    pub fn frame(&self, slot: usize, direction: FrameDirection, line: &str) {
        if self.sink.is_none() {
            return;
        }
        let kind = match direction {
            FrameDirection::Write => "acp_write",
            FrameDirection::Read => "acp_read",
        };
        let frame = serde_json::from_str::<Value>(line).unwrap_or_else(|_| json!({"raw": line}));
        self.record(json!({"type": kind, "slot": slot, "frame": frame}));
    }

    /// Records a lifecycle event (`{"type": kind, ...fields}`).
    pub fn event(&self, kind: &str, fields: Value) {
        if self.sink.is_none() {
            return;
        }
        let mut record = json!({ "type": kind });
        if let (Some(obj), Value::Object(extra)) = (record.as_object_mut(), fields) {
            obj.extend(extra);
        }
        self.record(record);
    }

    fn record(&self, value: Value) {
        let Some(sink) = &self.sink else { return };
        let mut line = value.to_string();
        line.push('\n');
        // A poisoned lock only means another thread panicked mid-write; the
        // file itself is still usable, so keep recording.
        let mut file = sink.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = file.write_all(line.as_bytes()) {
            tracing::warn!(error = %e, "observer log write failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_frames_and_events_as_jsonl() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("obs/observer.jsonl");
        let obs = Observer::open(&path).unwrap();
        obs.frame(0, FrameDirection::Write, r#"{"method":"initialize"}"#);
        obs.frame(1, FrameDirection::Read, "not json");
        obs.event("pool_sleep", json!({"slots": 2}));
        let lines: Vec<Value> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines[0]["type"], "acp_write");
        assert_eq!(lines[0]["frame"]["method"], "initialize");
        assert_eq!(lines[1]["frame"]["raw"], "not json");
        assert_eq!(lines[2], json!({"type": "pool_sleep", "slots": 2}));
    }

    #[test]
    fn disabled_observer_is_a_no_op() {
        let obs = Observer::disabled();
        assert!(!obs.is_enabled());
        obs.event("x", json!({}));
    }
}
