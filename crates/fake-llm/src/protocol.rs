//! The APIs the adapters call, as pure functions from a request to the answer's shape.
//!
//! [`route`] maps a method and path to an [`Endpoint`]; [`complete`] turns a parsed completion
//! request into a [`Reply`] (a JSON body or an SSE stream) carrying the reply text and the
//! [`Usage`] the server worked out; [`models`] answers the model listing in either provider's
//! shape and [`context_overflow`] the provider's answer to a prompt over the model's window.
//! Ids come from a caller-supplied sequence number, so every answer is deterministic and
//! testable without a socket.

use serde_json::{Value, json};

use crate::models::Catalogue;
use crate::prompt::Api;
use crate::sse::SseEvent;
use crate::usage::Usage;

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST …/v1/messages`: Anthropic Messages, JSON or SSE (claude-agent-acp).
    AnthropicMessages,
    /// `POST …/v1/messages/count_tokens`: the estimate of the request's input tokens.
    AnthropicCountTokens,
    /// `POST …/v1/responses`: OpenAI Responses, SSE (codex-acp).
    OpenAiResponses,
    /// `POST …/v1/chat/completions`: OpenAI Chat Completions, SSE or JSON (opencode).
    ChatCompletions,
    /// `GET …/v1/models`: the catalogue, in Anthropic's shape when the request carries an
    /// `anthropic-version` header and in OpenAI's otherwise.
    ListModels,
    /// `GET …/v1/models/{id}`: one model of the catalogue, or 404.
    GetModel,
    /// `HEAD` of any path: a reachability probe (claude-agent-acp sends `HEAD /api/hello`).
    Probe,
    /// `GET /fake/clock` reads the fake clock; `POST /fake/clock` with `{"advance_seconds": N}`
    /// pushes it ahead (see [`crate::clock`]).
    Clock,
    /// `GET /fake/context-limit` lists the windows; `POST` with `{"tokens": N}` sets the default
    /// window, with `{"model": "m", "tokens": N}` one model's.
    ContextLimit,
    /// Anything else: 404 with a JSON error naming the path.
    Unknown,
    /// A known path with the wrong method: 405.
    WrongMethod,
}

impl Endpoint {
    /// The completion API of this endpoint, if it is a completion the request log records.
    #[must_use]
    pub fn api(self) -> Option<Api> {
        match self {
            Self::AnthropicMessages => Some(Api::Anthropic),
            Self::OpenAiResponses => Some(Api::Responses),
            Self::ChatCompletions => Some(Api::Chat),
            _ => None,
        }
    }

    /// Whether a reply to this endpoint is a completion the request log records.
    #[must_use]
    pub fn is_completion(self) -> bool {
        self.api().is_some()
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
    let only = |allowed: &[&str], endpoint| {
        if allowed.contains(&method) {
            endpoint
        } else {
            Endpoint::WrongMethod
        }
    };
    if path == "/fake/clock" {
        only(&["GET", "POST"], Endpoint::Clock)
    } else if path == "/fake/context-limit" {
        only(&["GET", "POST"], Endpoint::ContextLimit)
    } else if path.ends_with("/messages/count_tokens") {
        only(&["POST"], Endpoint::AnthropicCountTokens)
    } else if path.ends_with("/messages") {
        only(&["POST"], Endpoint::AnthropicMessages)
    } else if path.ends_with("/responses") {
        only(&["POST"], Endpoint::OpenAiResponses)
    } else if path.ends_with("/chat/completions") {
        only(&["POST"], Endpoint::ChatCompletions)
    } else if path.ends_with("/models") {
        only(&["GET"], Endpoint::ListModels)
    } else if model_id(path).is_some() {
        only(&["GET"], Endpoint::GetModel)
    } else {
        Endpoint::Unknown
    }
}

/// The `{id}` of a `…/models/{id}` path.
#[must_use]
pub fn model_id(path: &str) -> Option<&str> {
    let (_, id) = path.rsplit_once("/models/")?;
    (!id.is_empty() && !id.contains('/')).then_some(id)
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

/// What the server decided to answer a completion with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion<'a> {
    /// The reply text ([`crate::oracle::reply_text`]).
    pub text: &'a str,
    /// The usage the answer reports.
    pub usage: Usage,
    /// Makes the ids unique within one server.
    pub seq: u64,
}

/// The answer to a checked completion request of `api`.
#[must_use]
pub fn complete(api: Api, body: &Value, completion: &Completion<'_>) -> Reply {
    match api {
        Api::Anthropic => anthropic(body, completion),
        Api::Responses => responses(body, completion),
        Api::Chat => chat(body, completion),
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

/// The Responses API's message for a prompt over the window.
const RESPONSES_OVERFLOW: &str =
    "Your input exceeds the context window of this model. Please adjust your input and try again.";

/// The provider's answer to a prompt of `tokens` estimated tokens over a window of `limit`:
///
/// * Anthropic: 400, `invalid_request_error`, "prompt is too long: N tokens > M maximum";
/// * Responses, streamed: the stream opens (`response.created`) and ends with
///   `response.failed`, whose `response.error` has `code: "context_length_exceeded"` (a
///   streamed response is accepted before its input is measured; codex maps exactly this
///   event to its context-window error);
/// * Responses, not streamed: 400, `invalid_request_error` with
///   `code: "context_length_exceeded"` and `param: "input"`;
/// * Chat Completions: 400, `invalid_request_error` with `code: "context_length_exceeded"` and
///   `param: "messages"`, "This model's maximum context length is M tokens. However, your
///   messages resulted in N tokens. …".
///
/// `seq` makes the ids of a failed stream unique.
#[must_use]
pub fn context_overflow(api: Api, body: &Value, tokens: u64, limit: u64, seq: u64) -> Reply {
    if api == Api::Responses && wants_stream(body) {
        return responses_failed(body, seq);
    }
    let body = match api {
        Api::Anthropic => json!({"type": "error", "error": {"type": "invalid_request_error",
            "message": format!("prompt is too long: {tokens} tokens > {limit} maximum")}}),
        Api::Responses => json!({"error": {"type": "invalid_request_error",
            "code": "context_length_exceeded", "param": "input",
            "message": RESPONSES_OVERFLOW}}),
        Api::Chat => json!({"error": {"type": "invalid_request_error",
            "code": "context_length_exceeded", "param": "messages",
            "message": format!("This model's maximum context length is {limit} tokens. However, your messages resulted in {tokens} tokens. Please reduce the length of the messages.")}}),
    };
    Reply::Json(400, body)
}

/// `GET …/v1/models` (`id: None`) or `GET …/v1/models/{id}`, in Anthropic's shape when
/// `anthropic` (the request carried an `anthropic-version` header), else in OpenAI's.
#[must_use]
pub fn models(catalogue: &Catalogue, anthropic: bool, id: Option<&str>) -> Reply {
    let Some(id) = id else {
        let list = if anthropic {
            catalogue.anthropic_list()
        } else {
            catalogue.openai_list()
        };
        return Reply::Json(200, list);
    };
    let found = if anthropic {
        catalogue.anthropic_get(id)
    } else {
        catalogue.openai_get(id)
    };
    match found {
        Some(model) => Reply::Json(200, model),
        None if anthropic => Reply::Json(
            404,
            json!({"type": "error", "error": {"type": "not_found_error",
                "message": format!("model: {id}")}}),
        ),
        None => Reply::Json(
            404,
            json!({"error": {"type": "invalid_request_error", "code": "model_not_found",
                "param": "model", "message": format!("The model `{id}` does not exist")}}),
        ),
    }
}

/// Anthropic Messages: one text block, `end_turn`.
fn anthropic(body: &Value, c: &Completion<'_>) -> Reply {
    let id = format!("msg_fake{:08}", c.seq);
    if !wants_stream(body) {
        return Reply::Json(
            200,
            json!({"id": id, "type": "message", "role": "assistant", "model": model(body),
                "content": [{"type": "text", "text": c.text}], "stop_reason": "end_turn",
                "stop_sequence": null, "usage": c.usage.anthropic()}),
        );
    }
    Reply::Stream(vec![
        SseEvent::named(
            "message_start",
            &json!({"type": "message_start", "message": {"id": id, "type": "message",
                "role": "assistant", "model": model(body), "content": [], "stop_reason": null,
                "stop_sequence": null, "usage": c.usage.anthropic_start()}}),
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
                "delta": {"type": "text_delta", "text": c.text}}),
        ),
        SseEvent::named(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": 0}),
        ),
        // The usage of `message_delta` is cumulative: the whole message's counts.
        SseEvent::named(
            "message_delta",
            &json!({"type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": null},
                "usage": c.usage.anthropic()}),
        ),
        SseEvent::named("message_stop", &json!({"type": "message_stop"})),
    ])
}

/// OpenAI Responses: always streamed (codex-acp only streams), one output message; the usage
/// comes with `response.completed` (`response.created` has none yet, as with the real API).
fn responses(body: &Value, c: &Completion<'_>) -> Reply {
    let response_id = format!("resp_fake{:08}", c.seq);
    let item_id = format!("msg_fake{:08}", c.seq);
    let item = json!({"type": "message", "id": item_id, "status": "completed", "role": "assistant",
        "content": [{"type": "output_text", "text": c.text, "annotations": []}]});
    let response = |status: &str, output: Value, usage: Value| {
        json!({"id": response_id, "object": "response", "status": status, "model": model(body),
            "output": output, "usage": usage})
    };
    let in_progress = json!({"type": "message", "id": item_id, "status": "in_progress",
        "role": "assistant", "content": []});
    Reply::Stream(vec![
        SseEvent::named(
            "response.created",
            &json!({"type": "response.created", "sequence_number": 0,
                "response": response("in_progress", json!([]), Value::Null)}),
        ),
        SseEvent::named(
            "response.output_item.added",
            &json!({"type": "response.output_item.added", "sequence_number": 1,
                "output_index": 0, "item": in_progress}),
        ),
        SseEvent::named(
            "response.output_text.delta",
            &json!({"type": "response.output_text.delta", "sequence_number": 2,
                "item_id": item_id, "output_index": 0, "content_index": 0, "delta": c.text}),
        ),
        SseEvent::named(
            "response.output_item.done",
            &json!({"type": "response.output_item.done", "sequence_number": 3,
                "output_index": 0, "item": item}),
        ),
        SseEvent::named(
            "response.completed",
            &json!({"type": "response.completed", "sequence_number": 4,
                "response": response("completed", json!([item]), c.usage.responses())}),
        ),
    ])
}

/// A Responses stream that fails for context overflow: `response.created`, then
/// `response.failed` with the error.
fn responses_failed(body: &Value, seq: u64) -> Reply {
    let response_id = format!("resp_fake{seq:08}");
    let response = |status: &str, error: Value| {
        json!({"id": response_id, "object": "response", "status": status, "model": model(body),
            "output": [], "usage": null, "error": error})
    };
    let error = json!({"code": "context_length_exceeded", "message": RESPONSES_OVERFLOW});
    Reply::Stream(vec![
        SseEvent::named(
            "response.created",
            &json!({"type": "response.created", "sequence_number": 0,
                "response": response("in_progress", Value::Null)}),
        ),
        SseEvent::named(
            "response.failed",
            &json!({"type": "response.failed", "sequence_number": 1,
                "response": response("failed", error)}),
        ),
    ])
}

/// Chat Completions: SSE chunks ending in `[DONE]` (with a usage chunk when asked), or one JSON
/// completion without `stream`.
fn chat(body: &Value, c: &Completion<'_>) -> Reply {
    let id = format!("chatcmpl-fake{:08}", c.seq);
    if !wants_stream(body) {
        return Reply::Json(
            200,
            json!({"id": id, "object": "chat.completion", "created": 0, "model": model(body),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": c.text},
                    "finish_reason": "stop"}], "usage": c.usage.chat()}),
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
            "delta": {"content": c.text}, "finish_reason": null}]))),
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
        last["usage"] = c.usage.chat();
        events.push(SseEvent::unnamed(&last));
    }
    events.push(SseEvent::raw("[DONE]"));
    Reply::Stream(events)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::CacheReport;
    use crate::oracle::{Observation, reply_text};
    use crate::prompt::Prompt;

    /// [`complete`] as the server would answer `body` when nothing is cached.
    fn answer_to(api: Api, body: &Value, seq: u64) -> Reply {
        let text = reply_text(body, &Observation::of(body));
        let prompt = Prompt::of(api, body);
        let report = CacheReport {
            prompt_bytes: prompt.text.len(),
            ..CacheReport::default()
        };
        let usage = Usage::of(api, &prompt, &report, text.len());
        complete(
            api,
            body,
            &Completion {
                text: &text,
                usage,
                seq,
            },
        )
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

    fn stream_values(reply: &Reply) -> Vec<Value> {
        let Reply::Stream(events) = reply else {
            panic!("expected a stream, got {reply:?}");
        };
        events
            .iter()
            .filter_map(|e| serde_json::from_str::<Value>(&e.data).ok())
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
        assert_eq!(route("GET", "/v1/models/test-large"), Endpoint::GetModel);
        assert_eq!(model_id("/v1/models/test-large"), Some("test-large"));
        assert_eq!(route("GET", "/v1/models/"), Endpoint::Unknown);
        assert_eq!(route("HEAD", "/api/hello"), Endpoint::Probe);
        assert_eq!(route("GET", "/v1/messages"), Endpoint::WrongMethod);
        assert_eq!(route("POST", "/v1/models"), Endpoint::WrongMethod);
        assert_eq!(route("POST", "/v1/embeddings"), Endpoint::Unknown);
        assert_eq!(route("POST", "/fake/clock"), Endpoint::Clock);
        assert_eq!(route("PUT", "/fake/clock"), Endpoint::WrongMethod);
        assert_eq!(route("POST", "/fake/context-limit"), Endpoint::ContextLimit);
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
    fn anthropic_json_and_stream_carry_the_oracle_and_usage() {
        let body = json!({"model": "claude-x", "messages": [
            {"role": "user", "content": "remember alpha-7301"}]});
        let Reply::Json(200, json) = answer_to(Api::Anthropic, &body, 7) else {
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
        let prompt_tokens = Prompt::of(Api::Anthropic, &body).tokens();
        assert_eq!(json["usage"]["input_tokens"], prompt_tokens);
        assert_eq!(json["usage"]["output_tokens"], text.len().div_ceil(4));
        assert_eq!(json["usage"]["cache_read_input_tokens"], 0);

        let mut stream_body = body.clone();
        stream_body["stream"] = json!(true);
        let reply = answer_to(Api::Anthropic, &stream_body, 8);
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
        let values = stream_values(&reply);
        let start = &values[0]["message"]["usage"];
        let delta = &values[5]["usage"];
        assert_eq!(start["input_tokens"], delta["input_tokens"]);
        assert_eq!(start["output_tokens"], 1);
        assert_eq!(delta["output_tokens"], text.len().div_ceil(4));
    }

    #[test]
    fn responses_stream_ends_completed_with_the_same_text_and_usage() {
        let body = json!({"model": "gpt-fake", "stream": true,
            "input": [{"type": "message", "role": "user",
                "content": [{"type": "input_text", "text": "hi bravo-2212"}]}]});
        let reply = answer_to(Api::Responses, &body, 1);
        let delta = streamed_text(&reply, |v| {
            (v["type"] == "response.output_text.delta").then(|| v["delta"].as_str())?
        });
        let done = streamed_text(&reply, |v| {
            (v["type"] == "response.completed")
                .then(|| v.pointer("/response/output/0/content/0/text")?.as_str())?
        });
        assert_eq!(delta, done);
        assert_eq!(Observation::parse(&delta).map(|o| o.user_messages), Some(1));
        let values = stream_values(&reply);
        assert!(values[0]["response"]["usage"].is_null());
        let usage = &values[4]["response"]["usage"];
        let input = Prompt::of(Api::Responses, &body).tokens();
        assert_eq!(usage["input_tokens"], input);
        assert_eq!(usage["input_tokens_details"]["cached_tokens"], 0);
        assert_eq!(
            usage["total_tokens"].as_u64(),
            Some(input + delta.len().div_ceil(4) as u64)
        );
    }

    #[test]
    fn chat_stream_ends_with_done_and_optional_usage() {
        let body = json!({"model": "m", "stream": true,
            "stream_options": {"include_usage": true},
            "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]});
        let Reply::Stream(events) = answer_to(Api::Chat, &body, 3) else {
            panic!("expected a stream");
        };
        assert_eq!(events.last().map(|e| e.data.as_str()), Some("[DONE]"));
        let usage: Value = serde_json::from_str(&events[events.len() - 2].data).unwrap();
        let input = Prompt::of(Api::Chat, &body).tokens();
        assert_eq!(usage["usage"]["prompt_tokens"], input);
        assert_eq!(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
        let mut plain = body.clone();
        plain["stream"] = json!(false);
        let Reply::Json(200, json) = answer_to(Api::Chat, &plain, 4) else {
            panic!("expected JSON");
        };
        assert_eq!(json["choices"][0]["finish_reason"], "stop");
        assert_eq!(json["usage"]["prompt_tokens"], input);
    }

    #[test]
    fn context_overflow_in_each_providers_shape() {
        let any = json!({"model": "m"});
        let Reply::Json(400, a) = context_overflow(Api::Anthropic, &any, 1200, 1000, 1) else {
            panic!("expected a 400");
        };
        assert_eq!(a["type"], "error");
        assert_eq!(a["error"]["type"], "invalid_request_error");
        assert_eq!(
            a["error"]["message"],
            "prompt is too long: 1200 tokens > 1000 maximum"
        );
        let Reply::Json(400, r) = context_overflow(Api::Responses, &any, 1200, 1000, 1) else {
            panic!("expected a 400");
        };
        assert_eq!(r["error"]["code"], "context_length_exceeded");
        assert_eq!(r["error"]["param"], "input");
        let streamed = json!({"model": "m", "stream": true});
        let failed = stream_values(&context_overflow(Api::Responses, &streamed, 1200, 1000, 2));
        assert_eq!(failed[0]["type"], "response.created");
        assert_eq!(failed[1]["type"], "response.failed");
        assert_eq!(failed[1]["response"]["status"], "failed");
        assert_eq!(
            failed[1]["response"]["error"]["code"],
            "context_length_exceeded"
        );
        let Reply::Json(400, c) = context_overflow(Api::Chat, &streamed, 1200, 1000, 3) else {
            panic!("expected a 400");
        };
        assert_eq!(c["error"]["code"], "context_length_exceeded");
        assert!(
            c["error"]["message"]
                .as_str()
                .unwrap()
                .contains("maximum context length is 1000 tokens")
        );
    }

    #[test]
    fn models_in_either_shape_and_unknown_ids() {
        let catalogue = Catalogue::default();
        let Reply::Json(200, openai) = models(&catalogue, false, None) else {
            panic!("expected a list");
        };
        assert_eq!(openai["object"], "list");
        let Reply::Json(200, anthropic) = models(&catalogue, true, None) else {
            panic!("expected a list");
        };
        assert_eq!(anthropic["has_more"], false);
        let Reply::Json(200, one) = models(&catalogue, true, Some("test-large")) else {
            panic!("expected a model");
        };
        assert_eq!(one["type"], "model");
        assert!(matches!(
            models(&catalogue, true, Some("x")),
            Reply::Json(404, _)
        ));
        let Reply::Json(404, missing) = models(&catalogue, false, Some("x")) else {
            panic!("expected a 404");
        };
        assert_eq!(missing["error"]["code"], "model_not_found");
    }
}
