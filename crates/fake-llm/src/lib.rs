//! `fake-llm`: a loopback-only fake of the LLM APIs that real ACP adapters call, so they can be
//! run offline in tests and measurements.
//!
//! It speaks Anthropic Messages (`/v1/messages`, JSON and SSE; claude-agent-acp), OpenAI
//! Responses (`/v1/responses`, SSE; codex-acp) and Chat Completions (`/v1/chat/completions`, SSE
//! or JSON; opencode), plus the small probes adapters send at startup (`HEAD` anything,
//! `GET /v1/models`, `POST /v1/messages/count_tokens`). Every reply reports what the request
//! contained (see [`oracle`]), and a request log records what each call made the model read
//! (see [`log`]).
//!
//! Modules:
//! - [`oracle`]: the pure "what did the model receive" tag and its parser.
//! - [`protocol`]: routing and the answer of each API, pure.
//! - [`sse`]: server-sent-event framing (encode and decode).
//! - [`http`]: the small HTTP/1.1 reader and writers.
//! - [`log`]: the JSONL request log.
//! - [`server`]: the tokio accept loop binding 127.0.0.1 only.

pub mod http;
pub mod log;
pub mod oracle;
pub mod protocol;
pub mod server;
pub mod sse;

pub use log::{RequestLog, RequestRecord, read_log};
pub use oracle::Observation;
pub use server::{FakeLlm, ServerError};
