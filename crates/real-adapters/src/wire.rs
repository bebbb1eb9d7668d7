//! What crossed the wire between a harness and its agent, read back from the harness's observer
//! log.
//!
//! A real adapter keeps no wire log of its own, but buzz-acp records every JSON-RPC line it
//! writes to an agent (`acp_write`) and reads from it (`acp_read`) in its `--observer-log`, one
//! record per line, in the order they crossed (the owner's view of the agent, as upstream
//! republishes it). That is enough to say what the harness asked of the agent and what the agent
//! answered: which session a prompt went to, whether a `session/load` was refused, which
//! session `session/new` opened, what `session/set_config_option` set. The scenarios assert on
//! these frames, never on the harness's log lines.
//!
//! JSON-RPC ids restart with every agent process (a `--once` run, an idle pool's respawn), and
//! the log of one scenario spans several of them: an answer is therefore the first frame read
//! after its request, on the same worker slot, that carries the request's id and no method.
//!
//! The harness hides the history an agent replays during `session/load` from the observer
//! (block/buzz#2633): those `session/update` notifications are absent here, the request and its
//! answer are not.

use std::path::Path;

use serde_json::Value;

use crate::adapter::TierError;

/// Which way a frame went, from the harness's side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// The harness wrote it to the agent (`acp_write`).
    Sent,
    /// The harness read it from the agent (`acp_read`).
    Received,
}

/// One JSON-RPC frame.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// Which way it went.
    pub direction: Direction,
    /// The worker slot of the agent process.
    pub slot: u64,
    /// The JSON-RPC message.
    pub body: Value,
}

impl Frame {
    /// The method of a request or notification.
    #[must_use]
    pub fn method(&self) -> Option<&str> {
        self.body["method"].as_str()
    }

    /// Whether the harness sent this request with `method`.
    #[must_use]
    pub fn is_request(&self, method: &str) -> bool {
        self.direction == Direction::Sent
            && self.method() == Some(method)
            && self.body.get("id").is_some()
    }

    /// `params.sessionId`.
    #[must_use]
    pub fn session_id(&self) -> Option<&str> {
        self.body["params"]["sessionId"].as_str()
    }

    /// The text blocks of a `session/prompt`, joined.
    #[must_use]
    pub fn prompt_text(&self) -> String {
        self.body["params"]["prompt"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|block| block["text"].as_str())
            .collect()
    }

    /// The `error` of an answer.
    #[must_use]
    pub fn error(&self) -> Option<&Value> {
        self.body.get("error")
    }
}

/// A request the harness sent and, if it came, the agent's answer.
#[derive(Debug, Clone, Copy)]
pub struct Exchange<'a> {
    /// Position of the request in the log's frames.
    pub at: usize,
    /// The request.
    pub request: &'a Frame,
    /// Its answer.
    pub answer: Option<&'a Frame>,
}

impl Exchange<'_> {
    /// Whether the agent answered with a result (not an error).
    #[must_use]
    pub fn succeeded(&self) -> bool {
        self.answer.is_some_and(|a| a.error().is_none())
    }

    /// Whether the agent answered with an error.
    #[must_use]
    pub fn failed(&self) -> bool {
        self.answer.is_some_and(|a| a.error().is_some())
    }
}

/// Every frame of one observer log, in order.
#[derive(Debug, Clone, Default)]
pub struct Wire {
    frames: Vec<Frame>,
}

impl Wire {
    /// Reads the frames of the observer log at `path` (none when it does not exist yet).
    ///
    /// # Errors
    ///
    /// [`TierError::Io`] when the log exists but cannot be read.
    pub fn read(path: &Path) -> Result<Self, TierError> {
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(source) => {
                return Err(TierError::Io {
                    action: "reading the observer log",
                    path: path.to_path_buf(),
                    source,
                });
            }
        };
        Ok(Self::parse(&text))
    }

    /// The frames of an observer log's text (lines that are not frames are skipped).
    #[must_use]
    pub fn parse(text: &str) -> Self {
        let frames = text
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter_map(|record| {
                let direction = match record["type"].as_str()? {
                    "acp_write" => Direction::Sent,
                    "acp_read" => Direction::Received,
                    _ => return None,
                };
                Some(Frame {
                    direction,
                    slot: record["slot"].as_u64().unwrap_or_default(),
                    body: record["frame"].clone(),
                })
            })
            .collect();
        Self { frames }
    }

    /// How many frames there are: a mark to look at only what came after it ([`Wire::since`]).
    #[must_use]
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// Whether there is no frame at all.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// The frames from position `mark` on, as a wire of their own.
    #[must_use]
    pub fn since(&self, mark: usize) -> Self {
        Self {
            frames: self.frames.get(mark..).unwrap_or_default().to_vec(),
        }
    }

    /// Every frame.
    #[must_use]
    pub fn frames(&self) -> &[Frame] {
        &self.frames
    }

    /// The requests with `method` the harness sent, each with its answer, in order.
    #[must_use]
    pub fn exchanges(&self, method: &str) -> Vec<Exchange<'_>> {
        self.frames
            .iter()
            .enumerate()
            .filter(|(_, f)| f.is_request(method))
            .map(|(at, request)| Exchange {
                at,
                request,
                answer: self.answer_to(at),
            })
            .collect()
    }

    /// Methods of the requests the harness sent, in order.
    #[must_use]
    pub fn methods_sent(&self) -> Vec<String> {
        self.frames
            .iter()
            .filter(|f| f.direction == Direction::Sent && f.body.get("id").is_some())
            .filter_map(|f| f.method().map(str::to_owned))
            .collect()
    }

    /// The ids of the sessions `session/new` opened, in order.
    #[must_use]
    pub fn sessions_opened(&self) -> Vec<String> {
        self.exchanges("session/new")
            .iter()
            .filter_map(|e| e.answer?.body["result"]["sessionId"].as_str())
            .map(str::to_owned)
            .collect()
    }

    /// The `session/prompt` requests, as (position, session id, text), in order.
    #[must_use]
    pub fn prompts(&self) -> Vec<(usize, String, String)> {
        self.exchanges("session/prompt")
            .iter()
            .map(|e| {
                let session = e.request.session_id().unwrap_or_default().to_owned();
                (e.at, session, e.request.prompt_text())
            })
            .collect()
    }

    /// What the agent wrote for the request `exchange` (a `session/prompt`): the text of its
    /// session's agent messages read while the turn ran: until the answer in v1, until the
    /// session went idle in v2 (chunks appended, whole-message upserts replacing, by message).
    #[must_use]
    pub fn agent_text(&self, exchange: &Exchange<'_>) -> String {
        let session = exchange.request.session_id();
        let of_turn = |f: &Frame| {
            f.direction == Direction::Received
                && f.slot == exchange.request.slot
                && f.method() == Some("session/update")
                && f.session_id() == session
        };
        let after = &self.frames[exchange.at + 1..];
        // v2: the answer only accepts the prompt; the turn ends when the session goes idle.
        // v1: the answer ends the turn.
        let idle = after.iter().position(|f| {
            of_turn(f)
                && f.body["params"]["update"]["sessionUpdate"] == "state_update"
                && f.body["params"]["update"]["state"] == "idle"
        });
        let answer = exchange
            .answer
            .and_then(|a| after.iter().position(|f| std::ptr::eq(f, a)));
        let end = idle.or(answer).unwrap_or(after.len());
        let mut messages: Vec<(Option<&str>, String)> = Vec::new();
        for f in after[..end].iter().filter(|f| of_turn(f)) {
            let update = &f.body["params"]["update"];
            let id = update["messageId"].as_str();
            let (text, whole) = match update["sessionUpdate"].as_str() {
                Some("agent_message_chunk") => (
                    update["content"]["text"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    false,
                ),
                // A v2 upsert of the whole message.
                Some("agent_message") => match update["content"].as_array() {
                    Some(blocks) => (
                        blocks.iter().filter_map(|b| b["text"].as_str()).collect(),
                        true,
                    ),
                    None => continue,
                },
                _ => continue,
            };
            match messages.iter_mut().find(|(m, _)| *m == id) {
                Some((_, kept)) if whole => *kept = text,
                Some((_, kept)) => kept.push_str(&text),
                None => messages.push((id, text)),
            }
        }
        messages.into_iter().map(|(_, text)| text).collect()
    }

    /// The first answer read after the request at `at`, on its slot, with its id.
    fn answer_to(&self, at: usize) -> Option<&Frame> {
        let request = self.frames.get(at)?;
        let id = request.body.get("id")?;
        self.frames[at + 1..].iter().find(|f| {
            f.direction == Direction::Received
                && f.slot == request.slot
                && f.method().is_none()
                && f.body.get("id") == Some(id)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn line(kind: &str, slot: u64, frame: Value) -> String {
        json!({"type": kind, "slot": slot, "frame": frame}).to_string()
    }

    #[test]
    fn pairs_answers_by_slot_and_id_across_agent_processes() {
        let log = [
            line(
                "acp_write",
                0,
                json!({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {}}),
            ),
            line(
                "acp_read",
                0,
                json!({"jsonrpc": "2.0", "id": 1, "result": {"sessionId": "s-1"}}),
            ),
            json!({"type": "pool_sleep"}).to_string(),
            // A later process: ids start over.
            line(
                "acp_write",
                0,
                json!({"jsonrpc": "2.0", "id": 1, "method": "session/load",
                       "params": {"sessionId": "s-1"}}),
            ),
            line(
                "acp_read",
                1,
                json!({"jsonrpc": "2.0", "id": 1, "result": {}}),
            ),
            line(
                "acp_read",
                0,
                json!({"jsonrpc": "2.0", "method": "session/update",
                       "params": {"sessionId": "s-1"}}),
            ),
            line(
                "acp_read",
                0,
                json!({"jsonrpc": "2.0", "id": 1,
                       "error": {"code": -32002, "message": "Resource not found"}}),
            ),
            line(
                "acp_write",
                0,
                json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
                       "params": {"sessionId": "s-2",
                                  "prompt": [{"type": "text", "text": "a"},
                                             {"type": "text", "text": "b"}]}}),
            ),
            "not json".to_owned(),
        ]
        .join("\n");
        let wire = Wire::parse(&log);
        assert_eq!(wire.len(), 7);
        assert_eq!(wire.sessions_opened(), ["s-1"]);
        let loads = wire.exchanges("session/load");
        assert_eq!(loads.len(), 1);
        assert!(loads[0].failed(), "the slot-0 error answers the load");
        assert!(!loads[0].succeeded());
        assert_eq!(wire.prompts(), [(6, "s-2".to_owned(), "ab".to_owned())]);
        assert!(wire.exchanges("session/prompt")[0].answer.is_none());
        assert_eq!(wire.agent_text(&wire.exchanges("session/prompt")[0]), "");
        assert_eq!(
            wire.methods_sent(),
            ["session/new", "session/load", "session/prompt"]
        );
        let later = wire.since(2);
        assert_eq!(later.methods_sent(), ["session/load", "session/prompt"]);
        assert!(wire.since(100).is_empty());
    }

    #[test]
    fn agent_text_is_the_prompted_sessions_chunks_before_the_answer() {
        let chunk = |session: &str, text: &str| {
            line(
                "acp_read",
                0,
                json!({"jsonrpc": "2.0", "method": "session/update",
                       "params": {"sessionId": session,
                                  "update": {"sessionUpdate": "agent_message_chunk",
                                             "content": {"type": "text", "text": text}}}}),
            )
        };
        let log = [
            line(
                "acp_write",
                0,
                json!({"jsonrpc": "2.0", "id": 4, "method": "session/prompt",
                       "params": {"sessionId": "old", "prompt": []}}),
            ),
            chunk("old", "hand"),
            chunk("other", "not this"),
            line(
                "acp_read",
                0,
                json!({"jsonrpc": "2.0", "method": "session/update",
                       "params": {"sessionId": "old",
                                  "update": {"sessionUpdate": "agent_thought_chunk",
                                             "content": {"type": "text", "text": "no"}}}}),
            ),
            chunk("old", "off"),
            line(
                "acp_read",
                0,
                json!({"jsonrpc": "2.0", "id": 4, "result": {"stopReason": "end_turn"}}),
            ),
            chunk("old", " later"),
        ]
        .join("\n");
        let wire = Wire::parse(&log);
        let prompts = wire.exchanges("session/prompt");
        assert!(prompts[0].succeeded());
        assert_eq!(wire.agent_text(&prompts[0]), "handoff");
    }

    #[test]
    fn in_v2_agent_text_runs_until_the_session_goes_idle() {
        let update = |update: Value| {
            line(
                "acp_read",
                0,
                json!({"jsonrpc": "2.0", "method": "session/update",
                       "params": {"sessionId": "old", "update": update}}),
            )
        };
        let chunk = |id: &str, text: &str| {
            update(
                json!({"sessionUpdate": "agent_message_chunk", "messageId": id,
                          "content": {"type": "text", "text": text}}),
            )
        };
        let log = [
            line(
                "acp_write",
                0,
                json!({"jsonrpc": "2.0", "id": 4, "method": "session/prompt",
                       "params": {"sessionId": "old", "prompt": []}}),
            ),
            line(
                "acp_read",
                0,
                json!({"jsonrpc": "2.0", "id": 4, "result": {"messageId": "u1"}}),
            ),
            chunk("a1", "hand"),
            chunk("a1", "off"),
            update(json!({"sessionUpdate": "agent_message", "messageId": "a2",
                          "content": [{"type": "text", "text": "draft"}]})),
            update(json!({"sessionUpdate": "agent_message", "messageId": "a2",
                          "content": [{"type": "text", "text": " done"}]})),
            update(json!({"sessionUpdate": "state_update", "state": "idle",
                          "stopReason": "end_turn"})),
            chunk("a3", " later"),
        ]
        .join("\n");
        let wire = Wire::parse(&log);
        let prompts = wire.exchanges("session/prompt");
        assert_eq!(wire.agent_text(&prompts[0]), "handoff done");
    }
}
