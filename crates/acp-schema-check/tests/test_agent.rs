//! The test agent conforms: driven over stdio in each `--protocol` mode with v1 and v2
//! requests, it negotiates as the specification says, serves the negotiated version, and every
//! frame of the exchange (both directions, from its `--wire-log-sent` log) is valid ACP.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use acp_schema_check::{Checker, Closure, check_wire_log};
use acp_test_agent::harness::{read_wire_log, test_agent_bin};
use serde_json::{Value, json};

/// Upper bound for one answer; the agent answers in milliseconds.
const ANSWER: Duration = Duration::from_secs(20);

struct Agent {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<Value>,
    next_id: u64,
}

impl Agent {
    fn start(state: &std::path::Path, log: &std::path::Path, flags: &[&str]) -> Agent {
        let mut child = Command::new(test_agent_bin())
            .arg("--state-dir")
            .arg(state)
            .arg("--wire-log")
            .arg(log)
            .arg("--wire-log-sent")
            .args(flags)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the test agent starts");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(value) = serde_json::from_str(&line)
                    && tx.send(value).is_err()
                {
                    break;
                }
            }
        });
        Agent {
            child,
            stdin,
            lines,
            next_id: 0,
        }
    }

    /// Sends a request; returns the notifications before its answer, and the answer.
    fn call(&mut self, method: &str, params: Value) -> (Vec<Value>, Value) {
        let id = self.next_id;
        self.next_id += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(self.stdin, "{line}").unwrap();
        let mut notes = Vec::new();
        loop {
            let frame = self.lines.recv_timeout(ANSWER).expect("an answer");
            if frame["id"] == json!(id) && frame.get("method").is_none() {
                return (notes, frame);
            }
            notes.push(frame);
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn v1_init() -> Value {
    json!({"protocolVersion": 1, "clientCapabilities": {}, "clientInfo": {"name": "t", "version": "1"}})
}

fn v2_init() -> Value {
    json!({"protocolVersion": 2, "capabilities": {}, "info": {"name": "t", "version": "1"}})
}

fn updates(notes: &[Value]) -> Vec<String> {
    notes
        .iter()
        .map(|n| {
            let u = &n["params"]["update"];
            match u["state"].as_str() {
                Some(state) => format!("state_update:{state}"),
                None => u["sessionUpdate"].as_str().unwrap_or_default().to_owned(),
            }
        })
        .collect()
}

fn assert_log_valid(log: &std::path::Path, at_least: usize) {
    let frames = read_wire_log(log).unwrap();
    let report = check_wire_log(&Checker::new(Closure::Closed).unwrap(), &frames, None);
    // The v2 scenario sends session/load on purpose, to see it refused.
    let found: Vec<String> = report
        .violations
        .iter()
        .map(ToString::to_string)
        .filter(|v| !v.contains("ACP v2 has no method \"session/load\""))
        .collect();
    assert!(found.is_empty(), "{}", found.join("\n"));
    assert!(report.checked >= at_least, "{report:?}");
}

#[test]
fn a_v2_agent_serves_the_v2_session_surface_in_valid_frames() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wire.jsonl");
    let mut agent = Agent::start(dir.path(), &log, &["--protocol", "v2"]);
    let (_, init) = agent.call("initialize", v2_init());
    assert_eq!(init["result"]["protocolVersion"], 2);
    assert_eq!(init["result"]["capabilities"]["session"], json!({}));
    let (_, new) = agent.call("session/new", json!({"cwd": "/w"}));
    let sid = new["result"]["sessionId"].as_str().unwrap().to_owned();
    let (notes, prompt) = agent.call(
        "session/prompt",
        json!({"sessionId": sid, "prompt": [{"type": "text", "text": "remember alpha-7301"}]}),
    );
    assert_eq!(
        updates(&notes),
        [
            "state_update:running",
            "agent_message_chunk",
            "agent_message_chunk",
            "usage_update",
            "state_update:idle"
        ]
    );
    assert_eq!(prompt["result"]["messageId"], format!("{sid}/user/0"));
    let (notes, resumed) = agent.call("session/resume", json!({"sessionId": sid, "cwd": "/w"}));
    assert_eq!(
        updates(&notes),
        ["state_update:idle"],
        "no replay without replayFrom"
    );
    assert!(resumed.get("result").is_some(), "{resumed}");
    let (notes, _) = agent.call(
        "session/resume",
        json!({"sessionId": sid, "cwd": "/w", "replayFrom": {"type": "start"}}),
    );
    assert_eq!(
        updates(&notes),
        ["user_message", "agent_message", "state_update:idle"]
    );
    assert_eq!(
        notes[0]["params"]["update"]["messageId"],
        format!("{sid}/user/0")
    );
    let (_, load) = agent.call("session/load", json!({"sessionId": sid, "cwd": "/w"}));
    assert_eq!(load["error"]["code"], -32601);
    let (_, gone) = agent.call(
        "session/resume",
        json!({"sessionId": "ts-gone", "cwd": "/w"}),
    );
    assert_eq!(gone["error"]["code"], -32002);
    assert_eq!(gone["error"]["data"]["sessionId"], "ts-gone");
    let (_, list) = agent.call("session/list", json!({}));
    assert_eq!(list["result"]["sessions"][0]["sessionId"], sid.as_str());
    let (_, closed) = agent.call("session/close", json!({"sessionId": sid}));
    assert_eq!(closed["result"], json!({}));
    drop(agent);
    assert_log_valid(&log, 20);
}

#[test]
fn each_mode_answers_the_requested_version_if_supported_else_its_latest() {
    let cases: [(&str, Value, u64); 6] = [
        ("v1", v1_init(), 1),
        ("v1", v2_init(), 1),
        ("both", v1_init(), 1),
        ("both", v2_init(), 2),
        ("v2", v2_init(), 2),
        ("v2", v1_init(), 2),
    ];
    for (mode, request, answered) in cases {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("wire.jsonl");
        let mut agent = Agent::start(dir.path(), &log, &["--protocol", mode, "--session-resume"]);
        let (_, init) = agent.call("initialize", request.clone());
        assert_eq!(
            init["result"]["protocolVersion"], answered,
            "{mode} {request}"
        );
        if answered == 1 {
            assert_eq!(
                init["result"]["agentCapabilities"]["sessionCapabilities"]["resume"],
                json!({})
            );
            let (_, new) = agent.call("session/new", json!({"cwd": "/w", "mcpServers": []}));
            let sid = new["result"]["sessionId"].as_str().unwrap().to_owned();
            let (notes, prompt) = agent.call(
                "session/prompt",
                json!({"sessionId": sid, "prompt": [{"type": "text", "text": "hi"}]}),
            );
            assert_eq!(prompt["result"]["stopReason"], "end_turn", "{mode}");
            assert_eq!(
                updates(&notes),
                ["agent_message_chunk", "agent_message_chunk", "usage_update"]
            );
            let (notes, _) = agent.call(
                "session/load",
                json!({"sessionId": sid, "cwd": "/w", "mcpServers": []}),
            );
            assert_eq!(
                updates(&notes),
                ["user_message_chunk", "agent_message_chunk"],
                "v1 load replays"
            );
        }
        drop(agent);
        // A v1 client must not go on after a v2 answer; the log of the v1 exchange is checked.
        if answered == 1 || request["protocolVersion"] == 2 {
            assert_log_valid(&log, 2);
        }
    }
}

#[test]
fn a_v2_agent_without_the_session_capability_has_no_session_methods() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wire.jsonl");
    let mut agent = Agent::start(
        dir.path(),
        &log,
        &["--protocol", "v2", "--session-capability", "absent"],
    );
    let (_, init) = agent.call("initialize", v2_init());
    assert!(
        init["result"]["capabilities"].get("session").is_none(),
        "{init}"
    );
    for method in ["session/resume", "session/close", "session/list"] {
        let (_, answer) = agent.call(method, json!({"sessionId": "s", "cwd": "/w"}));
        assert_eq!(answer["error"]["code"], -32601, "{method}");
    }
}
