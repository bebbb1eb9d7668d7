//! The fake LLM over a real loopback socket: every protocol end to end, keep-alive, the request
//! log, model listings, cache figures across a pushed clock, context overflow, and malformed
//! requests answered with a 4xx while the server keeps serving.

use std::time::Duration;

use fake_llm::sse::decode;
use fake_llm::{FakeLlm, Observation, Outcome, RequestKind, read_log};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Status, lowercased headers and body of one raw exchange.
struct Answer {
    status: u16,
    headers: String,
    body: String,
}

/// Sends `raw` on a fresh connection and reads until the server closes it.
async fn exchange(addr: std::net::SocketAddr, raw: &[u8]) -> Answer {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(raw).await.unwrap();
    let mut bytes = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut bytes))
        .await
        .expect("the server closes the connection")
        .unwrap();
    parse_answer(&String::from_utf8(bytes).unwrap())
}

fn parse_answer(text: &str) -> Answer {
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    Answer {
        status,
        headers: head.to_ascii_lowercase(),
        body: body.to_owned(),
    }
}

fn post(path: &str, body: &Value) -> Vec<u8> {
    let body = body.to_string();
    format!(
        "POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

async fn start(log: Option<&std::path::Path>) -> fake_llm::server::RunningFakeLlm {
    FakeLlm::bind(0, log).await.unwrap().spawn().unwrap()
}

#[tokio::test]
async fn anthropic_messages_stream_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.jsonl");
    let server = start(Some(&log)).await;
    let request = json!({"model": "claude-fake", "stream": true, "max_tokens": 10, "messages": [
        {"role": "user", "content": "remember alpha-7301"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": [{"type": "text", "text": "and bravo-2212?"}]}]});
    let answer = exchange(server.addr(), &post("/v1/messages?beta=true", &request)).await;
    assert_eq!(answer.status, 200);
    assert!(answer.headers.contains("content-type: text/event-stream"));
    let events = decode(&answer.body);
    assert_eq!(
        events.first().and_then(|e| e.event.as_deref()),
        Some("message_start")
    );
    assert_eq!(
        events.last().and_then(|e| e.event.as_deref()),
        Some("message_stop")
    );
    let text: String = events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(&e.data).ok())
        .filter_map(|v| {
            v.pointer("/delta/text")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .collect();
    let seen = Observation::parse(&text).unwrap();
    assert_eq!(seen.user_messages, 2);
    assert!(seen.nonces.contains("alpha-7301") && seen.nonces.contains("bravo-2212"));

    let mut plain = request.clone();
    plain["stream"] = json!(false);
    let answer = exchange(server.addr(), &post("/v1/messages", &plain)).await;
    assert_eq!(answer.status, 200);
    let body: Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(body["stop_reason"], "end_turn");

    let records = read_log(&log).unwrap();
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].path, "/v1/messages");
    assert_eq!(records[0].model.as_deref(), Some("claude-fake"));
    assert_eq!(records[0].user_messages, 2);
    assert_eq!(records[0].nonces, ["alpha-7301", "bravo-2212"]);
    assert!(records[0].stream && !records[1].stream);
    assert_eq!(records[0].bytes, request.to_string().len());
}

#[tokio::test]
async fn openai_responses_stream() {
    let server = start(None).await;
    let request = json!({"model": "gpt-fake", "stream": true, "instructions": "be brief",
        "input": [{"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "fact charlie-5150"}]}]});
    let answer = exchange(server.addr(), &post("/v1/responses", &request)).await;
    assert_eq!(answer.status, 200);
    let events = decode(&answer.body);
    let completed: Value = serde_json::from_str(&events.last().unwrap().data).unwrap();
    assert_eq!(completed["type"], "response.completed");
    assert_eq!(completed["response"]["status"], "completed");
    let text = completed
        .pointer("/response/output/0/content/0/text")
        .and_then(Value::as_str)
        .unwrap();
    assert!(text.starts_with("fake reply to: fact charlie-5150"));
    assert_eq!(Observation::parse(text).unwrap().nonces.len(), 1);
}

#[tokio::test]
async fn chat_completions_stream_over_a_chunked_request() {
    let server = start(None).await;
    let body = json!({"model": "m", "stream": true, "messages": [
        {"role": "system", "content": "sys delta-4040"}, {"role": "user", "content": "q"}]})
    .to_string();
    let (a, b) = body.split_at(body.len() / 2);
    let raw = format!(
        "POST /v1/chat/completions HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n{:x}\r\n{a}\r\n{:x}\r\n{b}\r\n0\r\n\r\n",
        a.len(),
        b.len()
    );
    let answer = exchange(server.addr(), raw.as_bytes()).await;
    assert_eq!(answer.status, 200);
    let events = decode(&answer.body);
    assert_eq!(events.last().unwrap().data, "[DONE]");
    assert!(events.iter().all(|e| e.event.is_none()));
    let text: String = events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(&e.data).ok())
        .filter_map(|v| {
            v.pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .collect();
    let seen = Observation::parse(&text).unwrap();
    assert_eq!(seen.user_messages, 1);
    assert!(seen.nonces.contains("delta-4040"));
}

#[tokio::test]
async fn keeps_the_connection_alive_for_json_answers() {
    let server = start(None).await;
    let mut stream = TcpStream::connect(server.addr()).await.unwrap();
    let body = json!({"messages": [{"role": "user", "content": "x"}]}).to_string();
    let one = format!(
        "HEAD /api/hello HTTP/1.1\r\n\r\nGET /v1/models HTTP/1.1\r\n\r\nPOST /v1/messages/count_tokens HTTP/1.1\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(one.as_bytes()).await.unwrap();
    let mut bytes = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut bytes))
        .await
        .unwrap()
        .unwrap();
    let text = String::from_utf8(bytes).unwrap();
    assert_eq!(text.matches("HTTP/1.1 200 OK").count(), 3, "{text}");
    assert!(text.contains("\"object\":\"list\""), "{text}");
    // The estimate of the count_tokens body: the role and the text block "x", one line each.
    let counted = json!({"role": "user"}).to_string().len()
        + 1
        + json!({"type": "text", "text": "x"}).to_string().len();
    assert!(
        text.ends_with(&format!("{{\"input_tokens\":{}}}", counted.div_ceil(4))),
        "{text}"
    );
}

fn get(path: &str, headers: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nhost: x\r\n{headers}connection: close\r\n\r\n").into_bytes()
}

#[tokio::test]
async fn lists_models_in_the_shape_of_the_asking_client() {
    let server = start(None).await;
    let openai = exchange(
        server.addr(),
        &get("/v1/models", "authorization: Bearer k\r\n"),
    )
    .await;
    let openai: Value = serde_json::from_str(&openai.body).unwrap();
    assert_eq!(openai["object"], "list");
    let ids: Vec<&str> = openai["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    assert_eq!(ids, ["fake-model", "test-large"]);
    let anthropic = exchange(
        server.addr(),
        &get("/v1/models?limit=20", "anthropic-version: 2023-06-01\r\n"),
    )
    .await;
    let anthropic: Value = serde_json::from_str(&anthropic.body).unwrap();
    assert_eq!(anthropic["data"][1]["type"], "model");
    assert_eq!(anthropic["data"][1]["max_input_tokens"], 1_000_000);
    assert_eq!(anthropic["last_id"], "test-large");
    let one = exchange(server.addr(), &get("/v1/models/fake-model", "")).await;
    assert_eq!(one.status, 200);
    let missing = exchange(server.addr(), &get("/v1/models/none", "")).await;
    assert_eq!(missing.status, 404);
}

/// A conversation of `turns` user/assistant pairs on the Anthropic API, with tools and a
/// breakpoint on the last message, as Claude Code sends it.
fn conversation(turns: usize) -> Value {
    let mut messages = Vec::new();
    for i in 0..turns {
        if i > 0 {
            messages.push(json!({"role": "assistant", "content": format!("answer {i}")}));
        }
        messages.push(json!({"role": "user", "content": [{"type": "text",
            "text": format!("question {i} {}", "padding ".repeat(50))}]}));
    }
    if let Some(last) = messages.last_mut() {
        last["content"][0]["cache_control"] = json!({"type": "ephemeral"});
    }
    json!({"model": "fake-model", "max_tokens": 100, "stream": false,
        "tools": [{"name": "Read", "description": "reads a file", "input_schema": {}}],
        "system": [{"type": "text", "text": "You are a test agent.", "cache_control": {"type": "ephemeral"}}],
        "messages": messages})
}

async fn usage_of(server: &fake_llm::server::RunningFakeLlm, body: &Value) -> Value {
    let answer = exchange(server.addr(), &post("/v1/messages", body)).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let reply: Value = serde_json::from_str(&answer.body).unwrap();
    reply["usage"].clone()
}

#[tokio::test]
async fn cache_figures_follow_the_pushed_clock() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.jsonl");
    let server = start(Some(&log)).await;
    let first = usage_of(&server, &conversation(1)).await;
    assert_eq!(first["cache_read_input_tokens"], 0);
    assert!(first["cache_creation_input_tokens"].as_u64().unwrap() > 0);

    // A minute later the whole first prompt is a cached prefix of the second.
    server.advance_clock(Duration::from_secs(60));
    let hot = usage_of(&server, &conversation(2)).await;
    assert!(hot["cache_read_input_tokens"].as_u64().unwrap() > 0);

    // Fifteen idle minutes later (pushed through the control request), the 5-minute cache
    // is cold: nothing is read, everything is written again.
    let advance = json!({"advance_seconds": 900});
    let answer = exchange(server.addr(), &post("/fake/clock", &advance)).await;
    assert_eq!(answer.status, 200);
    let clock: Value = serde_json::from_str(&answer.body).unwrap();
    assert!(clock["now_ms"].as_u64().unwrap() >= 960_000);
    let warm = usage_of(&server, &conversation(3)).await;
    assert_eq!(warm["cache_read_input_tokens"], 0);

    let records = read_log(&log).unwrap();
    assert_eq!(records.len(), 3);
    assert!(records.iter().all(|r| r.kind == RequestKind::Turn));
    assert_eq!(
        (records[0].cached_bytes_5m, records[0].cached_bytes_1h),
        (0, 0)
    );
    assert_eq!(records[1].cached_bytes_5m, records[0].prompt_bytes);
    assert_eq!(
        records[1].cache_read_tokens,
        hot["cache_read_input_tokens"].as_u64().unwrap()
    );
    assert_eq!(records[2].cached_bytes_5m, 0);
    assert_eq!(
        records[2].cached_bytes_1h, records[1].prompt_bytes,
        "the hour cache still holds the second prompt"
    );
    assert!(records[2].at_ms >= records[1].at_ms + 900_000);
    assert_eq!(
        records[2].input_tokens,
        records[2].prompt_bytes.div_ceil(4) as u64
    );
}

#[tokio::test]
async fn requests_without_tools_are_logged_as_background() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.jsonl");
    let server = start(Some(&log)).await;
    let title = json!({"model": "fake-model", "max_tokens": 10,
        "system": "Write a five-word title.", "messages": [{"role": "user", "content": "hello"}]});
    usage_of(&server, &title).await;
    usage_of(&server, &conversation(1)).await;
    let kinds: Vec<RequestKind> = read_log(&log).unwrap().iter().map(|r| r.kind).collect();
    assert_eq!(kinds, [RequestKind::Background, RequestKind::Turn]);
}

#[tokio::test]
async fn a_prompt_over_the_window_gets_each_providers_overflow_error() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("requests.jsonl");
    let server = start(Some(&log)).await;
    let body = conversation(4);
    let limit = json!({"tokens": 100});
    let answer = exchange(server.addr(), &post("/fake/context-limit", &limit)).await;
    assert_eq!(answer.status, 200);

    let anthropic = exchange(server.addr(), &post("/v1/messages", &body)).await;
    assert_eq!(anthropic.status, 400);
    let error: Value = serde_json::from_str(&anthropic.body).unwrap();
    assert_eq!(error["error"]["type"], "invalid_request_error");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("prompt is too long: ") && message.ends_with(" tokens > 100 maximum"),
        "{message}"
    );

    let chat = json!({"model": "fake-model", "stream": true,
        "messages": [{"role": "user", "content": "x".repeat(1000)}]});
    let answer = exchange(server.addr(), &post("/v1/chat/completions", &chat)).await;
    assert_eq!(answer.status, 400);
    let error: Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(error["error"]["code"], "context_length_exceeded");

    let responses = json!({"model": "fake-model", "stream": true, "input": "y".repeat(1000)});
    let answer = exchange(server.addr(), &post("/v1/responses", &responses)).await;
    assert_eq!(
        answer.status, 200,
        "a streamed response fails inside the stream"
    );
    let events = decode(&answer.body);
    assert_eq!(
        events.last().unwrap().event.as_deref(),
        Some("response.failed")
    );
    let failed: Value = serde_json::from_str(&events.last().unwrap().data).unwrap();
    assert_eq!(
        failed["response"]["error"]["code"],
        "context_length_exceeded"
    );

    // The larger model has its own window: the same prompt is answered there.
    let mut large = body.clone();
    large["model"] = json!("test-large");
    let answer = exchange(server.addr(), &post("/v1/messages", &large)).await;
    assert_eq!(answer.status, 200);

    let outcomes: Vec<Outcome> = read_log(&log).unwrap().iter().map(|r| r.outcome).collect();
    assert_eq!(
        outcomes,
        [
            Outcome::ContextOverflow,
            Outcome::ContextOverflow,
            Outcome::ContextOverflow,
            Outcome::Answered
        ]
    );
    let bad = exchange(
        server.addr(),
        &post("/fake/context-limit", &json!({"tokenz": 1})),
    )
    .await;
    assert_eq!(bad.status, 400);
}

#[tokio::test]
async fn malformed_requests_get_a_4xx_and_the_server_keeps_serving() {
    let server = start(None).await;
    let cases: [(&[u8], u16); 8] = [
        (b"NONSENSE\r\n\r\n", 400),
        (b"POST /v1/messages HTTP/1.1\r\n\r\n", 411),
        (
            b"POST /v1/messages HTTP/1.1\r\ncontent-length: 5\r\nconnection: close\r\n\r\n{nope",
            400,
        ),
        (
            b"POST /v1/messages HTTP/1.1\r\ncontent-length: 2\r\nconnection: close\r\n\r\n[]",
            400,
        ),
        (
            b"POST /v1/responses HTTP/1.1\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}",
            400,
        ),
        (
            b"POST /v1/x HTTP/1.1\r\ntransfer-encoding: gzip\r\n\r\n",
            501,
        ),
        (
            b"GET /v1/messages HTTP/1.1\r\nconnection: close\r\n\r\n",
            405,
        ),
        (b"GET /elsewhere HTTP/1.1\r\nconnection: close\r\n\r\n", 404),
    ];
    for (raw, status) in cases {
        let answer = exchange(server.addr(), raw).await;
        assert_eq!(answer.status, status, "{}", String::from_utf8_lossy(raw));
        let body: Value = serde_json::from_str(&answer.body).unwrap();
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }
    // A client that hangs up mid-body gets nothing, and the server is unaffected.
    let mut stream = TcpStream::connect(server.addr()).await.unwrap();
    stream
        .write_all(b"POST /v1/messages HTTP/1.1\r\ncontent-length: 100\r\n\r\n{")
        .await
        .unwrap();
    drop(stream);
    let ok = json!({"messages": [{"role": "user", "content": "still here"}]});
    assert_eq!(
        exchange(server.addr(), &post("/v1/messages", &ok))
            .await
            .status,
        200
    );
}
