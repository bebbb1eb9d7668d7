//! Good and bad frames of both versions, one JSON-RPC frame at a time and as a wire log.

use acp_schema_check::{Checker, Closure, Frame, Part, Sender, Version, check_wire_log};
use acp_test_agent::harness::{Direction, FrameKind, WireFrame};
use serde_json::{Value, json};

fn checker() -> Checker {
    Checker::new(Closure::Closed).expect("the schemas compile")
}

fn call(checker: &Checker, version: Version, sender: Sender, message: Value) -> Vec<String> {
    checker
        .check(
            version,
            Frame::Call {
                sender,
                message: &message,
            },
        )
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn response(checker: &Checker, version: Version, method: &str, message: Value) -> Vec<String> {
    checker
        .check(
            version,
            Frame::Response {
                method,
                message: &message,
            },
        )
        .iter()
        .map(ToString::to_string)
        .collect()
}

fn request(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": "7f3c", "method": method, "params": params})
}

#[test]
fn valid_v1_client_frames_pass() {
    let c = checker();
    let good = [
        request(
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": false}},
                   "clientInfo": {"name": "buzz-acp", "version": "0.10.1"}}),
        ),
        request(
            "session/new",
            json!({"cwd": "/srv", "mcpServers": [], "_meta": {"channelId": "c1"}}),
        ),
        request(
            "session/load",
            json!({"sessionId": "s1", "cwd": "/srv", "mcpServers": []}),
        ),
        request(
            "session/resume",
            json!({"sessionId": "s1", "cwd": "/srv", "mcpServers": [], "_meta": {"x": 1}}),
        ),
        request("session/close", json!({"sessionId": "s1"})),
        request(
            "session/prompt",
            json!({"sessionId": "s1", "prompt": [{"type": "text", "text": "hi"}]}),
        ),
        json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s1"}}),
        request("_buzz/anything", json!({"free": ["form"]})),
    ];
    for frame in good {
        assert_eq!(
            call(&c, Version::V1, Sender::Client, frame.clone()),
            Vec::<String>::new(),
            "{frame}"
        );
    }
}

#[test]
fn invalid_v1_client_frames_fail_with_method_and_path() {
    let c = checker();
    let missing_cwd = call(
        &c,
        Version::V1,
        Sender::Client,
        request("session/load", json!({"sessionId": "s1", "mcpServers": []})),
    );
    assert_eq!(missing_cwd.len(), 1, "{missing_cwd:?}");
    assert!(
        missing_cwd[0].starts_with("session/load params /:") && missing_cwd[0].contains("cwd"),
        "{missing_cwd:?}"
    );
    let wrong_type = c.check(
        Version::V1,
        Frame::Call {
            sender: Sender::Client,
            message: &request(
                "session/prompt",
                json!({"sessionId": "s1", "prompt": [{"type": "text", "text": 5}]}),
            ),
        },
    );
    assert_eq!(wrong_type.len(), 1, "{wrong_type:?}");
    assert_eq!(wrong_type[0].part, Part::Params);
    // A tagged union reports at the union: no branch matched the block.
    assert_eq!(wrong_type[0].path, "/prompt/0");
    assert!(wrong_type[0].message.contains("oneOf"), "{wrong_type:?}");
    assert_eq!(wrong_type[0].method, "session/prompt");
    let unknown_field = c.check(
        Version::V1,
        Frame::Call {
            sender: Sender::Client,
            message: &request(
                "session/resume",
                json!({"sessionId": "s1", "cwd": "/", "replayFrom": {"type": "start"}}),
            ),
        },
    );
    assert_eq!(unknown_field.len(), 1, "{unknown_field:?}");
    assert!(
        unknown_field[0].message.contains("replayFrom"),
        "a v2 field in a v1 frame: {unknown_field:?}"
    );
    let v2_only = call(
        &c,
        Version::V1,
        Sender::Client,
        request("auth/login", json!({"methodId": "x"})),
    );
    assert_eq!(
        v2_only,
        ["auth/login envelope /method: ACP v1 has no method \"auth/login\""]
    );
    let wrong_side = call(
        &c,
        Version::V1,
        Sender::Client,
        json!({"jsonrpc": "2.0", "method": "session/update", "params": {}}),
    );
    assert_eq!(wrong_side.len(), 1, "{wrong_side:?}");
    let no_id = call(
        &c,
        Version::V1,
        Sender::Client,
        json!({"jsonrpc": "2.0", "method": "session/close", "params": {"sessionId": "s"}}),
    );
    assert_eq!(no_id.len(), 1, "{no_id:?}");
    let bad_envelope = call(
        &c,
        Version::V1,
        Sender::Client,
        json!({"jsonrpc": "1.0", "id": 1.5, "method": "_x", "params": []}),
    );
    assert_eq!(bad_envelope.len(), 3, "{bad_envelope:?}");
}

#[test]
fn unknown_fields_pass_only_when_open_and_meta_passes_everywhere() {
    let open = Checker::new(Closure::Open).unwrap();
    let frame = request(
        "session/resume",
        json!({"sessionId": "s1", "cwd": "/", "bogus": 1}),
    );
    assert!(call(&open, Version::V1, Sender::Client, frame.clone()).is_empty());
    assert_eq!(
        call(&checker(), Version::V1, Sender::Client, frame).len(),
        1
    );
    let nested_meta = request(
        "session/prompt",
        json!({"sessionId": "s1", "prompt": [{"type": "text", "text": "a", "_meta": {"k": [1]}}],
               "_meta": {"traceparent": "00-1"}}),
    );
    assert!(call(&checker(), Version::V1, Sender::Client, nested_meta).is_empty());
    let nested_unknown = request(
        "session/prompt",
        json!({"sessionId": "s1", "prompt": [{"type": "text", "text": "a", "colour": "red"}]}),
    );
    let found = checker().check(
        Version::V1,
        Frame::Call {
            sender: Sender::Client,
            message: &nested_unknown,
        },
    );
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].path.starts_with("/prompt/0"), "{found:?}");
}

#[test]
fn agent_responses_are_checked_against_the_method_they_answer() {
    let c = checker();
    let ok = json!({"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "end_turn"}});
    assert!(response(&c, Version::V1, "session/prompt", ok).is_empty());
    let bad = json!({"jsonrpc": "2.0", "id": 1, "result": {"stopReason": "done"}});
    let found = response(&c, Version::V1, "session/prompt", bad);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("session/prompt result /stopReason"),
        "{found:?}"
    );
    let error = json!({"jsonrpc": "2.0", "id": 1,
        "error": {"code": -32002, "message": "Resource not found", "data": {"sessionId": "s"}}});
    assert!(response(&c, Version::V1, "session/resume", error).is_empty());
    let bad_error = json!({"jsonrpc": "2.0", "id": 1, "error": {"code": "x"}});
    assert_eq!(
        response(&c, Version::V1, "session/resume", bad_error).len(),
        2
    );
    let init = json!({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 1,
        "agentCapabilities": {"loadSession": true, "sessionCapabilities": {"resume": {}, "close": {}}},
        "agentInfo": {"name": "a", "version": "1"}, "authMethods": []}});
    assert!(response(&c, Version::V1, "initialize", init).is_empty());
    let invented = json!({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 1,
        "capabilities": {"session": {"load": {}}}, "info": {"name": "a", "version": "1"}}});
    let found = response(&c, Version::V1, "initialize", invented);
    assert!(!found.is_empty(), "the v2 layout in a v1 answer");
}

#[test]
fn v2_frames_follow_the_v2_schema() {
    let c = checker();
    let good = [
        request(
            "initialize",
            json!({"protocolVersion": 2, "capabilities": {}, "info": {"name": "c", "version": "1"}}),
        ),
        request(
            "session/resume",
            json!({"sessionId": "s1", "cwd": "/srv", "replayFrom": {"type": "start"}}),
        ),
        request("session/resume", json!({"sessionId": "s1", "cwd": "/srv"})),
        request("session/list", json!({})),
        json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s1"}}),
    ];
    for frame in good {
        assert_eq!(
            call(&c, Version::V2, Sender::Client, frame.clone()),
            Vec::<String>::new(),
            "{frame}"
        );
    }
    let v1_shaped_init = call(
        &c,
        Version::V2,
        Sender::Client,
        request(
            "initialize",
            json!({"protocolVersion": 2, "clientCapabilities": {}, "clientInfo": {"name": "c", "version": "1"}}),
        ),
    );
    assert!(
        v1_shaped_init.iter().any(|v| v.contains("info")),
        "{v1_shaped_init:?}"
    );
    let load = call(
        &c,
        Version::V2,
        Sender::Client,
        request("session/load", json!({"sessionId": "s1", "cwd": "/"})),
    );
    assert_eq!(
        load,
        ["session/load envelope /method: ACP v2 has no method \"session/load\""]
    );
    let bad_cursor = call(
        &c,
        Version::V2,
        Sender::Client,
        request(
            "session/resume",
            json!({"sessionId": "s1", "cwd": "/", "replayFrom": "start"}),
        ),
    );
    assert!(!bad_cursor.is_empty());
    let v2_answer = json!({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": 2,
        "info": {"name": "a", "version": "1"}, "capabilities": {"session": {"delete": {}}}}});
    assert!(response(&c, Version::V2, "initialize", v2_answer).is_empty());
    let prompt_v1_style = json!({"jsonrpc": "2.0", "id": 3, "result": {"stopReason": "end_turn"}});
    assert!(!response(&c, Version::V2, "session/prompt", prompt_v1_style).is_empty());
    let prompt = json!({"jsonrpc": "2.0", "id": 3, "result": {"messageId": "m1"}});
    assert!(response(&c, Version::V2, "session/prompt", prompt).is_empty());
    let state = json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1",
        "update": {"sessionUpdate": "state_update", "state": "idle", "stopReason": "end_turn"}}});
    assert!(call(&c, Version::V2, Sender::Agent, state).is_empty());
    let chunk_without_id = json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s1",
        "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "x"}}}});
    assert!(!call(&c, Version::V2, Sender::Agent, chunk_without_id).is_empty());
}

fn wire(
    pid: u32,
    direction: Direction,
    kind: FrameKind,
    method: Option<&str>,
    id: Option<Value>,
    params: Value,
) -> WireFrame {
    WireFrame {
        ts_ms: 0,
        pid,
        kind,
        method: method.map(str::to_owned),
        id,
        bytes: 0,
        params,
        direction,
        error: false,
    }
}

#[test]
fn a_wire_log_is_checked_by_the_version_each_agent_negotiated() {
    use Direction::{Received, Sent};
    use FrameKind::{Notification, Request, Response};
    let frames = vec![
        // Agent 1 negotiates v2 for a v2 request.
        wire(
            1,
            Received,
            Request,
            Some("initialize"),
            Some(json!(0)),
            json!({"protocolVersion": 2, "capabilities": {}, "info": {"name": "c", "version": "1"}}),
        ),
        wire(
            1,
            Sent,
            Response,
            None,
            Some(json!(0)),
            json!({"protocolVersion": 2, "info": {"name": "a", "version": "1"}, "capabilities": {"session": {}}}),
        ),
        wire(
            1,
            Received,
            Request,
            Some("session/load"),
            Some(json!(1)),
            json!({"sessionId": "s", "cwd": "/"}),
        ),
        wire(
            1,
            Received,
            Request,
            Some("session/resume"),
            Some(json!(2)),
            json!({"sessionId": "s", "cwd": "/"}),
        ),
        wire(
            1,
            Sent,
            Notification,
            Some("session/update"),
            None,
            json!({"sessionId": "s", "update": {"sessionUpdate": "state_update", "state": "idle"}}),
        ),
        wire(1, Sent, Response, None, Some(json!(2)), json!({})),
        // Agent 2 answers v1 to a v2 request: v1 from then on.
        wire(
            2,
            Received,
            Request,
            Some("initialize"),
            Some(json!(0)),
            json!({"protocolVersion": 2, "capabilities": {}, "info": {"name": "c", "version": "1"}}),
        ),
        wire(
            2,
            Sent,
            Response,
            None,
            Some(json!(0)),
            json!({"protocolVersion": 1, "agentCapabilities": {"loadSession": true}}),
        ),
        wire(
            2,
            Received,
            Request,
            Some("session/load"),
            Some(json!(1)),
            json!({"sessionId": "s", "cwd": "/", "mcpServers": []}),
        ),
        wire(
            2,
            Sent,
            Response,
            None,
            Some(json!(1)),
            json!({"bogus": true}),
        ),
        wire(2, Sent, Response, None, Some(json!(99)), json!({})),
    ];
    let report = check_wire_log(&checker(), &frames, None);
    let found: Vec<(usize, String)> = report
        .violations
        .iter()
        .map(|v| (v.frame, v.violation.to_string()))
        .collect();
    assert_eq!(report.checked, 10);
    assert_eq!(report.unmatched, 1);
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(found[0].0, 3, "v2 has no session/load: {found:?}");
    assert_eq!(
        found[1].0, 10,
        "a field LoadSessionResponse does not have: {found:?}"
    );
    assert_eq!(report.violations[1].version, Some(Version::V1));
}

#[test]
fn a_log_without_the_agents_frames_needs_an_assumed_version() {
    let frames = vec![
        wire(
            1,
            Direction::Received,
            FrameKind::Request,
            Some("initialize"),
            Some(json!(0)),
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        ),
        wire(
            1,
            Direction::Received,
            FrameKind::Request,
            Some("session/new"),
            Some(json!(1)),
            json!({"cwd": "/w", "mcpServers": []}),
        ),
    ];
    let unknown = check_wire_log(&checker(), &frames, None);
    assert_eq!(unknown.violations.len(), 1, "{:?}", unknown.violations);
    assert_eq!(unknown.violations[0].version, None);
    let assumed = check_wire_log(&checker(), &frames, Some(Version::V1));
    assert!(assumed.violations.is_empty(), "{:?}", assumed.violations);
}
