//! The accept loop: binds 127.0.0.1 only, serves each connection in its own task, and answers
//! every request through [`protocol`](crate::protocol).
//!
//! The server's state is the request log, the fake clock, the model catalogue (with its
//! context windows) and the prompt-cache ledger; every completion is checked against its
//! model's window, reported to the ledger, and logged with what the cache could have served.
//!
//! A connection's failure (malformed request, a client that hangs up) is answered where
//! possible, logged, and ends that connection only; the listener keeps serving.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::BufReader;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::cache::CacheLedger;
use crate::clock::FakeClock;
use crate::http::{self, HttpError, Request};
use crate::log::{LogError, Outcome, RequestLog, RequestRecord};
use crate::models::Catalogue;
use crate::oracle::{Observation, reply_text};
use crate::prompt::{Api, Lifetime, Prompt};
use crate::protocol::{self, Completion, Endpoint, Reply};
use crate::sse;
use crate::usage::Usage;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Binding the loopback port failed.
    #[error("binding 127.0.0.1:{port}: {source}")]
    Bind {
        /// The requested port (0 = any free port).
        port: u16,
        /// The cause.
        source: std::io::Error,
    },
    /// The request log could not be opened.
    #[error(transparent)]
    Log(#[from] LogError),
    /// The capture directory could not be created.
    #[error("capture directory {}: {source}", path.display())]
    Capture {
        /// The directory.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

/// How a fake LLM is set up.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Append one JSON line per completion request here.
    pub log: Option<PathBuf>,
    /// Write every completion request body here, as `NNNNNN.json` (for looking at what an
    /// adapter really sends).
    pub capture_dir: Option<PathBuf>,
    /// The models and their context windows.
    pub catalogue: Catalogue,
}

/// State shared by every connection.
#[derive(Debug)]
struct Shared {
    /// Where completion requests are recorded, if anywhere.
    log: Option<RequestLog>,
    /// Where request bodies are captured, if anywhere.
    capture_dir: Option<PathBuf>,
    /// Source of unique ids in answers.
    seq: AtomicU64,
    /// The provider's time.
    clock: FakeClock,
    /// Models and windows; a std mutex: held for a lookup, never across an await.
    catalogue: Mutex<Catalogue>,
    /// Earlier prompts, for the cache figures; held while one request is compared.
    ledger: Mutex<CacheLedger>,
}

impl Shared {
    fn catalogue(&self) -> MutexGuard<'_, Catalogue> {
        self.catalogue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn ledger(&self) -> MutexGuard<'_, CacheLedger> {
        self.ledger
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A bound, not yet serving, fake LLM.
#[derive(Debug)]
pub struct FakeLlm {
    listener: TcpListener,
    shared: Arc<Shared>,
}

impl FakeLlm {
    /// Binds `127.0.0.1:port` (0 picks a free port) and opens the request log if one is given;
    /// default models and windows.
    ///
    /// # Errors
    ///
    /// [`ServerError`] when the port is taken or the log cannot be opened.
    pub async fn bind(port: u16, log: Option<&Path>) -> Result<Self, ServerError> {
        let options = Options {
            log: log.map(Path::to_path_buf),
            ..Options::default()
        };
        Self::bind_with(port, options).await
    }

    /// Binds `127.0.0.1:port` (0 picks a free port) set up by `options`.
    ///
    /// # Errors
    ///
    /// [`ServerError`] when the port is taken, the log cannot be opened or the capture
    /// directory cannot be created.
    pub async fn bind_with(port: u16, options: Options) -> Result<Self, ServerError> {
        let log = options.log.as_deref().map(RequestLog::open).transpose()?;
        if let Some(dir) = &options.capture_dir {
            std::fs::create_dir_all(dir).map_err(|source| ServerError::Capture {
                path: dir.clone(),
                source,
            })?;
        }
        let listener = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port))
            .await
            .map_err(|source| ServerError::Bind { port, source })?;
        Ok(Self {
            listener,
            shared: Arc::new(Shared {
                log,
                capture_dir: options.capture_dir,
                seq: AtomicU64::new(0),
                clock: FakeClock::new(),
                catalogue: Mutex::new(options.catalogue),
                ledger: Mutex::new(CacheLedger::new()),
            }),
        })
    }

    /// The bound address (the real port when 0 was asked for).
    ///
    /// # Errors
    ///
    /// The socket cannot report its address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until the task is dropped or aborted.
    pub async fn serve(self) {
        Self::accept_loop(self.listener, self.shared).await;
    }

    async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
        loop {
            match listener.accept().await {
                Ok((stream, peer)) => {
                    let shared = Arc::clone(&shared);
                    tokio::spawn(async move {
                        if let Err(e) = serve_connection(stream, &shared).await {
                            tracing::debug!(%peer, error = %e, "connection ended with an error");
                        }
                    });
                }
                Err(e) => {
                    // Out of file descriptors and the like: wait a little instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
    }

    /// Serves in a background task; the server stops when the returned handle is dropped.
    ///
    /// # Errors
    ///
    /// The socket cannot report its address.
    pub fn spawn(self) -> std::io::Result<RunningFakeLlm> {
        let addr = self.local_addr()?;
        let shared = Arc::clone(&self.shared);
        Ok(RunningFakeLlm {
            addr,
            shared,
            task: tokio::spawn(Self::accept_loop(self.listener, self.shared)),
        })
    }
}

/// A fake LLM serving in the background; aborted on drop.
#[derive(Debug)]
pub struct RunningFakeLlm {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl RunningFakeLlm {
    /// The address it listens on.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, the base URL adapters are given.
    #[must_use]
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Pushes the fake clock ahead by `by` (an idle gap the caches see); returns the new
    /// reading.
    pub fn advance_clock(&self, by: Duration) -> Duration {
        let now = self.shared.clock.advance(by);
        tracing::info!(
            advanced_ms = by.as_millis() as u64,
            now_ms = now.as_millis() as u64,
            "clock advanced"
        );
        now
    }

    /// The fake clock's reading.
    #[must_use]
    pub fn clock_now(&self) -> Duration {
        self.shared.clock.now()
    }

    /// Sets the context window of `model`, or with `None` the default window (of every model
    /// without one of its own).
    pub fn set_context_limit(&self, model: Option<&str>, tokens: u64) {
        let mut catalogue = self.shared.catalogue();
        match model {
            Some(model) => catalogue.set_limit(model, tokens),
            None => catalogue.set_default_limit(tokens),
        }
    }
}

impl Drop for RunningFakeLlm {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves requests on one connection until the client closes it, asks to close, or a stream
/// (which is delimited by closing) has been sent.
async fn serve_connection(stream: TcpStream, shared: &Shared) -> Result<(), HttpError> {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    loop {
        let request = match http::read_request(&mut reader, &mut write).await {
            Ok(Some(request)) => request,
            Ok(None) => return Ok(()),
            Err(e) => {
                if let Some(status) = e.status() {
                    tracing::warn!(status, error = %e, "rejected a malformed request");
                    let Reply::Json(status, body) = protocol::error(status, &e.to_string()) else {
                        return Err(e);
                    };
                    let body = body.to_string();
                    http::write_sized(
                        &mut write,
                        status,
                        "application/json",
                        body.as_bytes(),
                        false,
                        true,
                    )
                    .await?;
                }
                return Err(e);
            }
        };
        let close = request.wants_close();
        let endpoint = protocol::route(&request.method, &request.path);
        let reply = respond(endpoint, &request, shared);
        match reply {
            Reply::Json(status, body) => {
                let body = body.to_string();
                let head_only = request.method == "HEAD";
                http::write_sized(
                    &mut write,
                    status,
                    "application/json",
                    body.as_bytes(),
                    head_only,
                    close,
                )
                .await?;
                if close {
                    return Ok(());
                }
            }
            Reply::Stream(events) => {
                http::write_stream(&mut write, &sse::encode(&events)).await?;
                return Ok(());
            }
        }
    }
}

/// The answer to one request, recording completions in the log.
fn respond(endpoint: Endpoint, request: &Request, shared: &Shared) -> Reply {
    tracing::info!(method = %request.method, path = %request.path, bytes = request.body.len(), ?endpoint, "request");
    match endpoint {
        Endpoint::Probe => Reply::Json(200, json!({})),
        Endpoint::WrongMethod => protocol::error(405, "method not allowed on this path"),
        Endpoint::Unknown => protocol::error(404, "fake-llm serves no such path"),
        Endpoint::ListModels | Endpoint::GetModel => {
            // Anthropic clients always send `anthropic-version`; OpenAI clients never do.
            let anthropic = request.header("anthropic-version").is_some();
            let id = protocol::model_id(&request.path);
            protocol::models(&shared.catalogue(), anthropic, id)
        }
        Endpoint::Clock => clock_control(request, shared),
        Endpoint::ContextLimit => limit_control(request, shared),
        Endpoint::AnthropicCountTokens => match protocol::parse_body(endpoint, &request.body) {
            Ok(body) => {
                let prompt = Prompt::of(Api::Anthropic, &body);
                Reply::Json(200, json!({"input_tokens": prompt.tokens()}))
            }
            Err(e) => protocol::error(400, &e.to_string()),
        },
        Endpoint::AnthropicMessages | Endpoint::OpenAiResponses | Endpoint::ChatCompletions => {
            completion(endpoint, request, shared)
        }
    }
}

/// A completion: checked against the model's window, reported to the cache ledger, logged,
/// answered.
fn completion(endpoint: Endpoint, request: &Request, shared: &Shared) -> Reply {
    let Some(api) = endpoint.api() else {
        return protocol::error(404, "not a completion endpoint");
    };
    let body = match protocol::parse_body(endpoint, &request.body) {
        Ok(body) => body,
        Err(e) => {
            tracing::warn!(path = %request.path, error = %e, "rejected a request body");
            return protocol::error(400, &e.to_string());
        }
    };
    let seq = shared.seq.fetch_add(1, Ordering::Relaxed) + 1;
    capture(shared, seq, &request.body);
    // Observed once: the log records it and the reply's tag carries it.
    let seen = Observation::of(&body);
    let prompt = Prompt::of(api, &body);
    let model = body.get("model").and_then(Value::as_str).map(str::to_owned);
    let model_key = model.as_deref().unwrap_or_default();
    let now = shared.clock.now();
    let limit = shared.catalogue().limit_of(model.as_deref());
    let input_tokens = prompt.tokens();
    let overflow = input_tokens > limit;
    let report = if overflow {
        shared.ledger().peek(model_key, &prompt.text, now)
    } else {
        shared.ledger().observe(model_key, &prompt.text, now)
    };
    let (reply, usage, outcome) = if overflow {
        let reply = protocol::context_overflow(api, &body, input_tokens, limit, seq);
        (reply, None, Outcome::ContextOverflow)
    } else {
        let text = reply_text(&body, &seen);
        let usage = Usage::of(api, &prompt, &report, text.len());
        let completion = Completion {
            text: &text,
            usage,
            seq,
        };
        let reply = protocol::complete(api, &body, &completion);
        (reply, Some(usage), Outcome::Answered)
    };
    tracing::info!(
        path = %request.path,
        user_messages = seen.user_messages,
        nonces = ?seen.nonces,
        kind = ?prompt.kind,
        input_tokens,
        limit,
        cached_5m = report.cached_5m,
        cached_1h = report.cached_1h,
        ?outcome,
        "completion"
    );
    if let Some(log) = &shared.log {
        let record = RequestRecord {
            path: request.path.clone(),
            model,
            bytes: request.body.len(),
            user_messages: seen.user_messages,
            nonces: seen.nonces.iter().cloned().collect(),
            stream: protocol::wants_stream(&body),
            kind: prompt.kind,
            at_ms: millis(now),
            prompt_bytes: report.prompt_bytes,
            cached_bytes_5m: report.cached(Lifetime::FiveMinutes),
            cached_bytes_1h: report.cached(Lifetime::OneHour),
            input_tokens,
            cache_read_tokens: usage.map_or(0, |u| u.cache_read_tokens),
            output_tokens: usage.map_or(0, |u| u.output_tokens),
            context_limit_tokens: limit,
            outcome,
        };
        if let Err(e) = log.append(&record) {
            tracing::error!(error = %e, "cannot write the request log");
        }
    }
    reply
}

/// Writes a request body to the capture directory, if there is one (best effort).
fn capture(shared: &Shared, seq: u64, body: &[u8]) {
    if let Some(dir) = &shared.capture_dir {
        let path = dir.join(format!("{seq:06}.json"));
        if let Err(e) = std::fs::write(&path, body) {
            tracing::warn!(path = %path.display(), error = %e, "cannot capture a request body");
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `POST /fake/clock` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClockAdvance {
    /// Seconds to push the clock ahead by.
    advance_seconds: u64,
}

/// `GET /fake/clock` reads the clock; `POST` advances it.
fn clock_control(request: &Request, shared: &Shared) -> Reply {
    if request.method == "POST" {
        match serde_json::from_slice::<ClockAdvance>(&request.body) {
            Ok(advance) => {
                let by = Duration::from_secs(advance.advance_seconds);
                shared.clock.advance(by);
                tracing::info!(advanced_s = advance.advance_seconds, "clock advanced");
            }
            Err(e) => {
                return protocol::error(400, &format!("expected {{\"advance_seconds\": N}}: {e}"));
            }
        }
    }
    Reply::Json(
        200,
        json!({"now_ms": millis(shared.clock.now()), "advanced_ms": millis(shared.clock.skipped())}),
    )
}

/// `POST /fake/context-limit` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LimitChange {
    /// The model whose window changes; none: the default window.
    #[serde(default)]
    model: Option<String>,
    /// The new window in tokens.
    tokens: u64,
}

/// `GET /fake/context-limit` lists the windows; `POST` changes one.
fn limit_control(request: &Request, shared: &Shared) -> Reply {
    let mut catalogue = shared.catalogue();
    if request.method == "POST" {
        match serde_json::from_slice::<LimitChange>(&request.body) {
            Ok(LimitChange {
                model: Some(model),
                tokens,
            }) => catalogue.set_limit(&model, tokens),
            Ok(LimitChange {
                model: None,
                tokens,
            }) => catalogue.set_default_limit(tokens),
            Err(e) => {
                return protocol::error(
                    400,
                    &format!(
                        "expected {{\"tokens\": N}} or {{\"model\": \"m\", \"tokens\": N}}: {e}"
                    ),
                );
            }
        }
    }
    let models: serde_json::Map<String, Value> = catalogue
        .models()
        .into_iter()
        .map(|(id, tokens)| (id, json!(tokens)))
        .collect();
    Reply::Json(
        200,
        json!({"default_tokens": catalogue.limit_of(None), "models": models}),
    )
}
