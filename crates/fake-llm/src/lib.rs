//! `fake-llm`: a loopback-only fake of the LLM APIs that real ACP adapters call, so they can be
//! run offline in tests and measurements.
//!
//! It speaks Anthropic Messages (`/v1/messages`, JSON and SSE; claude-agent-acp), OpenAI
//! Responses (`/v1/responses`, SSE; codex-acp) and Chat Completions (`/v1/chat/completions`, SSE
//! or JSON; opencode), plus the small probes adapters send at startup (`HEAD` anything,
//! `GET /v1/models`, `POST /v1/messages/count_tokens`). Every reply reports what the request
//! contained (see [`oracle`]) and the token usage a provider would report (see [`usage`]); a
//! prompt over its model's context window is answered the way the provider answers overflow
//! (see [`models`]); and a request log records what each call made the model read, and how
//! much of it a prompt cache could have served (see [`log`], [`cache`]). The provider's clock
//! can be pushed ahead, so idle gaps of minutes cost nothing to simulate (see [`clock`]).
//!
//! Modules:
//! - [`oracle`]: the pure "what did the model receive" tag and its parser.
//! - [`prompt`]: a request's prompt in cache order, its kind (turn or background) and the
//!   token estimate (bytes / 4).
//! - [`cache`]: the prompt-cache ledger (5-minute and 1-hour lifetimes).
//! - [`usage`]: usage objects in each provider's shape.
//! - [`models`]: the model catalogue and context windows.
//! - [`clock`]: the fake provider clock.
//! - [`protocol`]: routing and the answer of each API, pure.
//! - [`sse`]: server-sent-event framing (encode and decode).
//! - [`http`]: the small HTTP/1.1 reader and writers.
//! - [`log`]: the JSONL request log.
//! - [`server`]: the tokio accept loop binding 127.0.0.1 only, and the control requests.

pub mod cache;
pub mod clock;
pub mod http;
pub mod log;
pub mod models;
pub mod oracle;
pub mod prompt;
pub mod protocol;
pub mod server;
pub mod sse;
pub mod usage;

pub use log::{Outcome, RequestLog, RequestRecord, read_log};
pub use oracle::Observation;
pub use prompt::RequestKind;
pub use server::{FakeLlm, Options, ServerError};
