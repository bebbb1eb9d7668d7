//! The relay's REST side (upstream's "Nostr HTTP bridge"): `POST /events` publishes one signed
//! event, `POST /query` answers NIP-01 filters with events (newest first). Every request carries
//! a NIP-98 authorization signed with the agent's key: a kind 27235 event tagged with the URL,
//! the method, a fresh nonce and the SHA-256 of the body, standard base64 after `Nostr `.
//!
//! Requests that meet 429, 502, 503, 504 or a time-out are tried again after 0.5, 1 and 2 s,
//! signed afresh each time (the relay refuses a NIP-98 event it has seen).

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use nostr::hashes::Hash as _;
use nostr::hashes::sha256::Hash as Sha256Hash;
use nostr::{EventBuilder, JsonUtil as _, Keys, Kind, Tag};

use crate::auth_tag::AuthTag;

/// Delays before the second, third and fourth try of a request.
pub const RETRY_DELAYS: [Duration; 3] = [
    Duration::from_millis(500),
    Duration::from_secs(1),
    Duration::from_secs(2),
];
/// How long one request may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a REST request failed for good.
#[derive(Debug, thiserror::Error)]
pub enum RestError {
    /// The relay answered with an error status.
    #[error("POST {path}: the relay answered {status}: {message}")]
    Status {
        /// The route.
        path: &'static str,
        /// The HTTP status.
        status: u16,
        /// The relay's `error` message, or the body.
        message: String,
    },
    /// No answer: connection refused, reset, or no answer in time.
    #[error("POST {path}: {reason}")]
    Transport {
        /// The route.
        path: &'static str,
        /// What failed.
        reason: String,
    },
    /// The answer is not the JSON the route promises.
    #[error("POST {path}: unreadable answer: {reason}")]
    Answer {
        /// The route.
        path: &'static str,
        /// What serde said.
        reason: String,
    },
    /// The NIP-98 event could not be signed.
    #[error("signing the NIP-98 authorization: {0}")]
    Sign(String),
}

/// What `POST /events` answered for an accepted request.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct Published {
    /// The event's id.
    pub event_id: String,
    /// Whether the relay stored it (`false` with a reason, e.g. a duplicate).
    pub accepted: bool,
    /// The relay's message (empty, or `duplicate: …`).
    #[serde(default)]
    pub message: String,
}

/// A NIP-98-signing client of one relay's REST routes.
///
/// Each request opens its own connection (TCP, then TLS for `https://`): the harness's REST
/// traffic is a reply now and then and a query per channel, not worth a pool.
#[derive(Clone)]
pub struct RestClient {
    base: String,
    keys: Keys,
    /// Sent as `x-auth-tag` with every request, when configured.
    auth_tag: Option<AuthTag>,
}

impl std::fmt::Debug for RestClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestClient")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// The REST base of a relay URL: ws → http, wss → https, no trailing slash.
pub fn rest_base(relay_url: &str) -> String {
    let base = if let Some(rest) = relay_url.strip_prefix("wss://") {
        format!("https://{rest}")
    } else if let Some(rest) = relay_url.strip_prefix("ws://") {
        format!("http://{rest}")
    } else {
        relay_url.to_owned()
    };
    base.trim_end_matches('/').to_owned()
}

impl RestClient {
    /// A client of the relay at `relay_url` signing as `keys`.
    pub fn new(relay_url: &str, keys: Keys) -> Self {
        RestClient {
            base: rest_base(relay_url),
            keys,
            auth_tag: None,
        }
    }

    /// The same client, sending `tag` (the owner's attestation of the agent's key) in the
    /// `x-auth-tag` header of every request.
    #[must_use]
    pub fn with_auth_tag(mut self, tag: Option<AuthTag>) -> Self {
        self.auth_tag = tag;
        self
    }

    /// Publishes one signed event (`POST /events`).
    pub async fn publish(&self, event: &nostr::Event) -> Result<Published, RestError> {
        let body = self.post("/events", event.as_json().into_bytes()).await?;
        serde_json::from_slice(&body).map_err(|e| RestError::Answer {
            path: "/events",
            reason: e.to_string(),
        })
    }

    /// Events matching `filters` (`POST /query`), as the relay orders them.
    pub async fn query(&self, filters: &[nostr::Filter]) -> Result<Vec<nostr::Event>, RestError> {
        let body = serde_json::to_vec(
            &filters
                .iter()
                .map(|f| f.as_json())
                .map(|j| serde_json::from_str::<serde_json::Value>(&j))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| RestError::Answer {
                    path: "/query",
                    reason: e.to_string(),
                })?,
        )
        .map_err(|e| RestError::Answer {
            path: "/query",
            reason: e.to_string(),
        })?;
        let answer = self.post("/query", body).await?;
        let values: Vec<serde_json::Value> =
            serde_json::from_slice(&answer).map_err(|e| RestError::Answer {
                path: "/query",
                reason: e.to_string(),
            })?;
        // One unreadable event does not cost the others.
        Ok(values
            .into_iter()
            .filter_map(|v| match nostr::Event::from_json(v.to_string()) {
                Ok(event) => Some(event),
                Err(e) => {
                    tracing::warn!(error = %e, "skipping an unreadable event in a /query answer");
                    None
                }
            })
            .collect())
    }

    /// One POST with its retries; the body of a 2xx answer.
    async fn post(&self, path: &'static str, body: Vec<u8>) -> Result<Vec<u8>, RestError> {
        let mut delays = RETRY_DELAYS.iter();
        loop {
            let outcome = self.post_once(path, &body).await;
            let retry = match &outcome {
                Ok(_) => false,
                Err(RestError::Status { status, .. }) => matches!(*status, 429 | 502 | 503 | 504),
                Err(RestError::Transport { .. }) => true,
                Err(_) => false,
            };
            match (retry, delays.next()) {
                (true, Some(delay)) => {
                    if let Err(e) = &outcome {
                        tracing::warn!(error = %e, retry_in_ms = delay.as_millis() as u64, "relay request failed; trying again");
                    }
                    tokio::time::sleep(*delay).await;
                }
                _ => return outcome,
            }
        }
    }

    async fn post_once(&self, path: &'static str, body: &[u8]) -> Result<Vec<u8>, RestError> {
        let url = format!("{}{path}", self.base);
        let auth = self.authorization(&url, body)?;
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(&url)
            .header("authorization", auth)
            .header("content-type", "application/json");
        if let Some(tag) = &self.auth_tag {
            request = request.header("x-auth-tag", tag.header_value());
        }
        let request = request
            .body(Full::new(Bytes::copy_from_slice(body)))
            .map_err(|e| RestError::Transport {
                path,
                reason: e.to_string(),
            })?;
        let response = tokio::time::timeout(REQUEST_TIMEOUT, send(&url, request))
            .await
            .map_err(|_| RestError::Transport {
                path,
                reason: format!("no answer in {} s", REQUEST_TIMEOUT.as_secs()),
            })?
            .map_err(|e| RestError::Transport {
                path,
                reason: e.to_string(),
            })?;
        let status = response.status();
        let bytes = tokio::time::timeout(REQUEST_TIMEOUT, response.into_body().collect())
            .await
            .map_err(|_| RestError::Transport {
                path,
                reason: "the answer's body did not arrive in time".into(),
            })?
            .map_err(|e| RestError::Transport {
                path,
                reason: e.to_string(),
            })?
            .to_bytes()
            .to_vec();
        if status == StatusCode::OK {
            return Ok(bytes);
        }
        let message = serde_json::from_slice::<serde_json::Value>(&bytes)
            .ok()
            .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
            .unwrap_or_else(|| String::from_utf8_lossy(&bytes).into_owned());
        Err(RestError::Status {
            path,
            status: status.as_u16(),
            message,
        })
    }

    /// The `Authorization` header for a POST of `body` to `url` (NIP-98).
    fn authorization(&self, url: &str, body: &[u8]) -> Result<String, RestError> {
        let payload = Sha256Hash::hash(body).to_string();
        let nonce = uuid::Uuid::new_v4().to_string();
        let tags = [
            ["u", url],
            ["method", "POST"],
            ["nonce", nonce.as_str()],
            ["payload", payload.as_str()],
        ]
        .into_iter()
        .map(Tag::parse)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| RestError::Sign(e.to_string()))?;
        let event = EventBuilder::new(Kind::HttpAuth, "")
            .tags(tags)
            .sign_with_keys(&self.keys)
            .map_err(|e| RestError::Sign(e.to_string()))?;
        Ok(format!("Nostr {}", BASE64.encode(event.as_json())))
    }
}

/// Sends `request` to `url` on a connection of its own: the request line names the path, the
/// `Host` header the authority (what the relay's NIP-98 check rebuilds the URL from).
async fn send(
    url: &str,
    mut request: Request<Full<Bytes>>,
) -> Result<hyper::Response<hyper::body::Incoming>, String> {
    let parsed = nostr::Url::parse(url).map_err(|e| format!("URL {url}: {e}"))?;
    let named = parsed
        .host_str()
        .ok_or_else(|| format!("URL {url} names no host"))?;
    let authority = match parsed.port() {
        Some(port) => format!("{named}:{port}"),
        None => named.to_owned(),
    };
    // An IPv6 address is written in brackets in a URL, not in a socket address or a TLS name.
    let host = named
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let secure = parsed.scheme() == "https";
    let port = parsed
        .port_or_known_default()
        .ok_or_else(|| format!("URL {url} names no port"))?;
    *request.uri_mut() = parsed
        .path()
        .parse()
        .map_err(|e| format!("path of {url}: {e}"))?;
    request.headers_mut().insert(
        hyper::header::HOST,
        authority
            .parse()
            .map_err(|e| format!("host of {url}: {e}"))?,
    );
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .map_err(|e| format!("connecting to {host}:{port}: {e}"))?;
    if secure {
        let config = crate::tls::client_config().map_err(|e| e.to_string())?;
        let name = rustls::pki_types::ServerName::try_from(host.clone())
            .map_err(|e| format!("{host}: {e}"))?;
        let tls = tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await
            .map_err(|e| format!("TLS with {host}: {e}"))?;
        exchange(tls, request).await
    } else {
        exchange(tcp, request).await
    }
}

/// One HTTP/1 exchange on an open connection.
async fn exchange<S>(
    stream: S,
    request: Request<Full<Bytes>>,
) -> Result<hyper::Response<hyper::body::Incoming>, String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    // The connection is driven beside the request and ends with it.
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "REST connection ended with an error");
        }
    });
    sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())
}
