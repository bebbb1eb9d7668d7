//! The accept loop: binds 127.0.0.1 only, serves each connection in its own task, and answers
//! every request through [`protocol`](crate::protocol).
//!
//! A connection's failure (malformed request, a client that hangs up) is answered where
//! possible, logged, and ends that connection only; the listener keeps serving.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::BufReader;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use crate::http::{self, HttpError, Request};
use crate::log::{LogError, RequestLog, RequestRecord};
use crate::oracle::Observation;
use crate::protocol::{self, Endpoint, Reply};
use crate::sse;

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
}

/// State shared by every connection.
#[derive(Debug)]
struct Shared {
    /// Where completion requests are recorded, if anywhere.
    log: Option<RequestLog>,
    /// Source of unique ids in answers.
    seq: AtomicU64,
}

/// A bound, not yet serving, fake LLM.
#[derive(Debug)]
pub struct FakeLlm {
    listener: TcpListener,
    shared: Arc<Shared>,
}

impl FakeLlm {
    /// Binds `127.0.0.1:port` (0 picks a free port) and opens the request log if one is given.
    ///
    /// # Errors
    ///
    /// [`ServerError`] when the port is taken or the log cannot be opened.
    pub async fn bind(port: u16, log: Option<&Path>) -> Result<Self, ServerError> {
        let log = log.map(RequestLog::open).transpose()?;
        let listener = TcpListener::bind(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port))
            .await
            .map_err(|source| ServerError::Bind { port, source })?;
        Ok(Self {
            listener,
            shared: Arc::new(Shared {
                log,
                seq: AtomicU64::new(0),
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
        loop {
            match self.listener.accept().await {
                Ok((stream, peer)) => {
                    let shared = Arc::clone(&self.shared);
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
        Ok(RunningFakeLlm {
            addr,
            task: tokio::spawn(self.serve()),
        })
    }
}

/// A fake LLM serving in the background; aborted on drop.
#[derive(Debug)]
pub struct RunningFakeLlm {
    addr: SocketAddr,
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
    if !endpoint.takes_json() {
        return protocol::answer(
            endpoint,
            &serde_json::Value::Null,
            &Observation::default(),
            0,
        );
    }
    let body = match protocol::parse_body(endpoint, &request.body) {
        Ok(body) => body,
        Err(e) => {
            tracing::warn!(path = %request.path, error = %e, "rejected a request body");
            return protocol::error(400, &e.to_string());
        }
    };
    // Observed once: the log records it and the reply's tag carries it.
    let seen = if endpoint.is_completion() {
        let seen = Observation::of(&body);
        tracing::info!(path = %request.path, user_messages = seen.user_messages, nonces = ?seen.nonces, "completion");
        if let Some(log) = &shared.log {
            let record = RequestRecord {
                path: request.path.clone(),
                model: body
                    .get("model")
                    .and_then(|m| m.as_str())
                    .map(str::to_owned),
                bytes: request.body.len(),
                user_messages: seen.user_messages,
                nonces: seen.nonces.iter().cloned().collect(),
                stream: protocol::wants_stream(&body),
            };
            if let Err(e) = log.append(&record) {
                tracing::error!(error = %e, "cannot write the request log");
            }
        }
        seen
    } else {
        // Count tokens: its answer carries no tag.
        Observation::default()
    };
    protocol::answer(
        endpoint,
        &body,
        &seen,
        shared.seq.fetch_add(1, Ordering::Relaxed) + 1,
    )
}
