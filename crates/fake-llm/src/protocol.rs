//! The APIs the adapters call, as pure functions from a request to the answer's shape.
//!
//! [`route`] maps a method and path to an [`Endpoint`]; [`answer`] turns a parsed request body
//! into a [`Reply`] (a JSON body or an SSE stream). Ids come from a caller-supplied sequence
//! number, so every answer is deterministic and testable without a socket.

use serde_json::{Value, json};

use crate::oracle::{Observation, reply_text};
use crate::sse::SseEvent;

/// Fake token counts: small and constant, so adapters' usage bookkeeping has numbers to add.
const INPUT_TOKENS: u64 = 10;
const OUTPUT_TOKENS: u64 = 5;

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST …/v1/messages`: Anthropic Messages, JSON or SSE (claude-agent-acp).
    AnthropicMessages,
    /// `POST …/v1/messages/count_tokens`.
    AnthropicCountTokens,
    /// `POST …/v1/responses`: OpenAI Responses, SSE (codex-acp).
    OpenAiResponses,
    /// `POST …/v1/chat/completions`: OpenAI Chat Completions, SSE or JSON (opencode).
    ChatCompletions,
    /// `GET …/v1/models`: an empty model list, so adapters that list models at startup carry on.
    ListModels,
    /// `HEAD` of any path: a reachability probe (claude-agent-acp sends `HEAD /api/hello`).
    Probe,
    /// Anything else: 404 with a JSON error naming the path.
    Unknown,
    /// A known path with the wrong method: 405.
    WrongMethod,
}

impl Endpoint {
    /// Whether a reply to this endpoint is a completion the request log records.
    #[must_use]
    pub fn is_completion(self) -> bool {
        matches!(
            self,
            Self::AnthropicMessages | Self::OpenAiResponses | Self::ChatCompletions
        )
    }

    /// Whether this endpoint reads a JSON request body.
    #[must_use]
    pub fn takes_json(self) -> bool {
        self.is_completion() || self == Self::AnthropicCountTokens
    }
}

/// The endpoint of `method` and `path` (query string already removed). Any prefix before `/v1/`
/// is accepted, because base URLs are configured with and without it.
#[must_use]
pub fn route(method: &str, path: &str) -> Endpoint {
    if method == "HEAD" {
        return Endpoint::Probe;
    }
    let post = |endpoint| {
        if method == "POST" {
            endpoint
        } else {
            Endpoint::WrongMethod
        }
    };
    if path.ends_with("/messages/count_tokens") {
        post(Endpoint::AnthropicCountTokens)
    } else if path.ends_with("/messages") {
        post(Endpoint::AnthropicMessages)
    } else if path.ends_with("/responses") {
        post(Endpoint::OpenAiResponses)
    } else if path.ends_with("/chat/completions") {
        post(Endpoint::ChatCompletions)
    } else if path.ends_with("/models") {
        if method == "GET" {
            Endpoint::ListModels
        } else {
            Endpoint::WrongMethod
        }
    } else {
        Endpoint::Unknown
    }
}

/// An answer body.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `application/json` with this status.
    Json(u16, Value),
    /// `text/event-stream`, status 200.
    Stream(Vec<SseEvent>),
}

/// Why a request body cannot be answered (the server turns it into a 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadRequest {
    /// The body is not JSON.
    #[error("request body is not valid JSON: {0}")]
    NotJson(String),
    /// The body is JSON but not an object.
    #[error("request body must be a JSON object")]
    NotAnObject,
    /// A field the API requires is missing or has the wrong type.
    #[error("field `{field}` must be {expected}")]
    Field {
        /// The field.
        field: &'static str,
        /// What it must be.
        expected: &'static str,
    },
}

/// Parses and checks a completion request body: a JSON object whose conversation field has the
/// right type for the endpoint.
///
/// # Errors
///
/// [`BadRequest`] naming what is wrong.
pub fn parse_body(endpoint: Endpoint, bytes: &[u8]) -> Result<Value, BadRequest> {
    let body: Value =
        serde_json::from_slice(bytes).map_err(|e| BadRequest::NotJson(e.to_string()))?;
    if !body.is_object() {
        return Err(BadRequest::NotAnObject);
    }
    let array = |field: &'static str| {
        if body.get(field).is_some_and(Value::is_array) {
            Ok(())
        } else {
            Err(BadRequest::Field {
                field,
                expected: "an array",
            })
        }
    };
    match endpoint {
        Endpoint::AnthropicMessages
        | Endpoint::AnthropicCountTokens
        | Endpoint::ChatCompletions => array("messages")?,
        Endpoint::OpenAiResponses
            if !body
                .get("input")
                .is_some_and(|i| i.is_array() || i.is_string()) =>
        {
            return Err(BadRequest::Field {
                field: "input",
                expected: "an array or a string",
            });
        }
        _ => {}
    }
    Ok(body)
}

/// Whether the request asked for a stream (the server's request log records it too).
pub(crate) fn wants_stream(body: &Value) -> bool {
    body.get("stream").and_then(Value::as_bool) == Some(true)
}

/// The model the request named, echoed back in answers.
fn model(body: &Value) -> Value {
    body.get("model").cloned().unwrap_or(Value::Null)
}

/// The answer to a checked request body. `seen` is the body's [`Observation`], which completion
/// replies carry (made once by the caller, who logs it too; other endpoints ignore it). `seq`
/// makes the ids unique within one server.
#[must_use]
pub fn answer(endpoint: Endpoint, body: &Value, seen: &Observation, seq: u64) -> Reply {
    match endpoint {
        Endpoint::AnthropicMessages => anthropic(body, seen, seq),
        Endpoint::AnthropicCountTokens => Reply::Json(200, json!({"input_tokens": INPUT_TOKENS})),
        Endpoint::OpenAiResponses => responses(body, seen, seq),
        Endpoint::ChatCompletions => chat(body, seen, seq),
        Endpoint::ListModels => Reply::Json(200, json!({"object": "list", "data": []})),
        Endpoint::Probe => Reply::Json(200, json!({})),
        Endpoint::WrongMethod => error(405, "method not allowed on this path"),
        Endpoint::Unknown => error(404, "fake-llm serves no such path"),
    }
}

/// A JSON error body in the shape both API families accept (`error.message`, `error.type`).
#[must_use]
pub fn error(status: u16, message: &str) -> Reply {
    Reply::Json(
        status,
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}}),
    )
}

/// Anthropic Messages: one text block, `end_turn`.
fn anthropic(body: &Value, seen: &Observation, seq: u64) -> Reply {
    let id = format!("msg_fake{seq:08}");
    let text = reply_text(body, seen);
    let usage = json!({"input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS,
        "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0});
    if !wants_stream(body) {
        return Reply::Json(
            200,
            json!({"id": id, "type": "message", "role": "assistant", "model": model(body),
                "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
                "stop_sequence": null, "usage": usage}),
        );
    }
    Reply::Stream(vec![
        SseEvent::named(
            "message_start",
            &json!({"type": "message_start", "message": {"id": id, "type": "message",
                "role": "assistant", "model": model(body), "content": [], "stop_reason": null,
                "stop_sequence": null, "usage": usage}}),
        ),
        SseEvent::named(
            "content_block_start",
            &json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}}),
        ),
        SseEvent::named("ping", &json!({"type": "ping"})),
        SseEvent::named(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": text}}),
        ),
        SseEvent::named(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": 0}),
        ),
        SseEvent::named(
            "message_delta",
            &json!({"type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": null},
                "usage": {"output_tokens": OUTPUT_TOKENS}}),
        ),
        SseEvent::named("message_stop", &json!({"type": "message_stop"})),
    ])
}

/// OpenAI Responses: always streamed (codex-acp only streams), one output message.
fn responses(body: &Value, seen: &Observation, seq: u64) -> Reply {
    let response_id = format!("resp_fake{seq:08}");
    let item_id = format!("msg_fake{seq:08}");
    let text = reply_text(body, seen);
    let item = json!({"type": "message", "id": item_id, "status": "completed", "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}]});
    let usage = json!({"input_tokens": INPUT_TOKENS, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": OUTPUT_TOKENS, "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS});
    let response = |status: &str, output: Value| {
        json!({"id": response_id, "object": "response", "status": status, "model": model(body),
            "output": output, "usage": usage})
    };
    let in_progress = json!({"type": "message", "id": item_id, "status": "in_progress",
        "role": "assistant", "content": []});
    Reply::Stream(vec![
        SseEvent::named(
            "response.created",
            &json!({"type": "response.created", "sequence_number": 0,
                "response": response("in_progress", json!([]))}),
        ),
        SseEvent::named(
            "response.output_item.added",
            &json!({"type": "response.output_item.added", "sequence_number": 1,
                "output_index": 0, "item": in_progress}),
        ),
        SseEvent::named(
            "response.output_text.delta",
            &json!({"type": "response.output_text.delta", "sequence_number": 2,
                "item_id": item_id, "output_index": 0, "content_index": 0, "delta": text}),
        ),
        SseEvent::named(
            "response.output_item.done",
            &json!({"type": "response.output_item.done", "sequence_number": 3,
                "output_index": 0, "item": item}),
        ),
        SseEvent::named(
            "response.completed",
            &json!({"type": "response.completed", "sequence_number": 4,
                "response": response("completed", json!([item]))}),
        ),
    ])
}

/// Chat Completions: SSE chunks ending in `[DONE]` (with a usage chunk when asked), or one JSON
/// completion without `stream`.
fn chat(body: &Value, seen: &Observation, seq: u64) -> Reply {
    let id = format!("chatcmpl-fake{seq:08}");
    let text = reply_text(body, seen);
    let usage = json!({"prompt_tokens": INPUT_TOKENS, "completion_tokens": OUTPUT_TOKENS,
        "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS});
    if !wants_stream(body) {
        return Reply::Json(
            200,
            json!({"id": id, "object": "chat.completion", "created": 0, "model": model(body),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop"}], "usage": usage}),
        );
    }
    let chunk = |choices: Value| {
        json!({"id": id, "object": "chat.completion.chunk", "created": 0, "model": model(body),
            "choices": choices})
    };
    let mut events = vec![
        SseEvent::unnamed(&chunk(json!([{"index": 0,
            "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]))),
        SseEvent::unnamed(&chunk(json!([{"index": 0,
            "delta": {"content": text}, "finish_reason": null}]))),
        SseEvent::unnamed(&chunk(
            json!([{"index": 0, "delta": {}, "finish_reason": "stop"}]),
        )),
    ];
    let include_usage = body
        .pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        == Some(true);
    if include_usage {
        let mut last = chunk(json!([]));
        last["usage"] = usage;
        events.push(SseEvent::unnamed(&last));
    }
    events.push(SseEvent::raw("[DONE]"));
    Reply::Stream(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`answer`] with the observation the server would make of `body`.
    fn answer_to(endpoint: Endpoint, body: &Value, seq: u64) -> Reply {
        answer(endpoint, body, &Observation::of(body), seq)
    }

    fn streamed_text(reply: &Reply, pick: impl Fn(&Value) -> Option<&str>) -> String {
        let Reply::Stream(events) = reply else {
            panic!("expected a stream, got {reply:?}");
        };
        events
            .iter()
            .filter_map(|e| serde_json::from_str::<Value>(&e.data).ok())
            .filter_map(|v| pick(&v).map(str::to_owned))
            .collect()
    }

    #[test]
    fn routes_by_method_and_path_suffix() {
        assert_eq!(route("POST", "/v1/messages"), Endpoint::AnthropicMessages);
        assert_eq!(
            route("POST", "/v1/messages/count_tokens"),
            Endpoint::AnthropicCountTokens
        );
        assert_eq!(
            route("POST", "/api/v1/responses"),
            Endpoint::OpenAiResponses
        );
        assert_eq!(
            route("POST", "/v1/chat/completions"),
            Endpoint::ChatCompletions
        );
        assert_eq!(route("GET", "/v1/models"), Endpoint::ListModels);
        assert_eq!(route("HEAD", "/api/hello"), Endpoint::Probe);
        assert_eq!(route("GET", "/v1/messages"), Endpoint::WrongMethod);
        assert_eq!(route("POST", "/v1/models"), Endpoint::WrongMethod);
        assert_eq!(route("POST", "/v1/embeddings"), Endpoint::Unknown);
    }

    #[test]
    fn rejects_bodies_that_are_not_requests() {
        let e = Endpoint::AnthropicMessages;
        assert!(matches!(parse_body(e, b"{"), Err(BadRequest::NotJson(_))));
        assert_eq!(parse_body(e, b"[1]"), Err(BadRequest::NotAnObject));
        assert_eq!(
            parse_body(e, br#"{"messages": "x"}"#),
            Err(BadRequest::Field {
                field: "messages",
                expected: "an array"
            })
        );
        assert!(parse_body(Endpoint::OpenAiResponses, br#"{"input": 3}"#).is_err());
        assert!(parse_body(Endpoint::OpenAiResponses, br#"{"input": "hi"}"#).is_ok());
    }

    #[test]
    fn anthropic_json_and_stream_carry_the_oracle() {
        let body = json!({"model": "claude-x", "messages": [
            {"role": "user", "content": "remember alpha-7301"}]});
        let Reply::Json(200, json) = answer_to(Endpoint::AnthropicMessages, &body, 7) else {
            panic!("expected JSON");
        };
        assert_eq!(json["id"], "msg_fake00000007");
        assert_eq!(json["model"], "claude-x");
        let text = json["content"][0]["text"].as_str().unwrap_or_default();
        assert!(
            Observation::parse(text)
                .unwrap()
                .nonces
                .contains("alpha-7301")
        );

        let mut stream_body = body.clone();
        stream_body["stream"] = json!(true);
        let reply = answer_to(Endpoint::AnthropicMessages, &stream_body, 8);
        let Reply::Stream(events) = &reply else {
            panic!("expected a stream");
        };
        let names: Vec<_> = events.iter().filter_map(|e| e.event.as_deref()).collect();
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "ping",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        let text = streamed_text(&reply, |v| v.pointer("/delta/text")?.as_str());
        assert_eq!(
            text,
            reply_text(&stream_body, &Observation::of(&stream_body))
        );
    }

    #[test]
    fn responses_stream_ends_completed_with_the_same_text() {
        let body = json!({"model": "gpt-fake", "stream": true,
            "input": [{"type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "hi bravo-2212"}]}]});
        let reply = answer_to(Endpoint::OpenAiResponses, &body, 1);
        let delta = streamed_text(&reply, |v| {
            (v["type"] == "response.output_text.delta").then(|| v["delta"].as_str())?
        });
        let done = streamed_text(&reply, |v| {
            (v["type"] == "response.completed")
                .then(|| v.pointer("/response/output/0/content/0/text")?.as_str())?
        });
        assert_eq!(delta, done);
        assert_eq!(Observation::parse(&delta).map(|o| o.user_messages), Some(1));
    }

    #[test]
    fn chat_stream_ends_with_done_and_optional_usage() {
        let body = json!({"model": "m", "stream": true,
            "stream_options": {"include_usage": true},
            "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]});
        let Reply::Stream(events) = answer_to(Endpoint::ChatCompletions, &body, 3) else {
            panic!("expected a stream");
        };
        assert_eq!(events.last().map(|e| e.data.as_str()), Some("[DONE]"));
        let usage: Value = serde_json::from_str(&events[events.len() - 2].data).unwrap();
        assert_eq!(usage["usage"]["total_tokens"], 15);
        let mut plain = body.clone();
        plain["stream"] = json!(false);
        let Reply::Json(200, json) = answer_to(Endpoint::ChatCompletions, &plain, 4) else {
            panic!("expected JSON");
        };
        assert_eq!(json["choices"][0]["finish_reason"], "stop");
    }
}
