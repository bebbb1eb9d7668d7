//! The server: one TCP port on 127.0.0.1 for the websocket and the REST routes.
//!
//! Each accepted connection is served by hyper (HTTP/1.1, upgrades on). A `GET /` that asks for
//! a websocket upgrade is answered `101` and its upgraded stream goes to the [`ws`](crate::ws)
//! front; `GET /` with `Accept: application/nostr+json` and `GET /info` get the NIP-11
//! document; the `POST` routes go to [`rest`](crate::rest). Behind all of them sits one
//! nostr-relay-builder `LocalRelay` with one in-memory store.

use std::convert::Infallible;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use nostr::{Keys, PublicKey, RelayUrl};
use nostr_relay_builder::prelude::{MemoryDatabase, MemoryDatabaseOptions, NostrDatabase};
use nostr_relay_builder::{LocalRelay, RelayBuilder, builder};
use tokio::net::TcpListener;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;

use crate::config::{FaultState, Faults, RelayConfig};
use crate::nip98::Nip98Verifier;
use crate::rest::{self, Post, Reply, Route};
use crate::state::{Action, ReceivedRequest, RestCall, Shared, SocketEvent};
use crate::ws;

/// Kind of the NIP-29 group metadata (`d` = the channel, `name`, `t` = its type).
const KIND_GROUP_METADATA: u16 = 39000;
/// Kind of the NIP-29 group members list (`d` = the channel, one `p` per member).
const KIND_GROUP_MEMBERS: u16 = 39002;
/// Kind of a NIP-29 member removal (`h` = the channel, `p` = the member removed).
const KIND_REMOVE_MEMBER: u16 = 9001;

/// The largest request body served (the Buzz relay's events are far smaller).
const MAX_BODY_BYTES: usize = 1 << 20;

/// Why the relay could not start.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// Binding the port failed.
    #[error("binding 127.0.0.1:{port}: {source}")]
    Bind {
        /// The port asked for (0 = any).
        port: u16,
        /// The cause.
        source: std::io::Error,
    },
    /// The bound address could not be read back.
    #[error("reading the bound address: {0}")]
    LocalAddr(std::io::Error),
    /// The TLS identity could not be made.
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// A channel's group events could not be stored.
    #[error("seeding channel {channel}: {reason}")]
    Seed {
        /// The channel.
        channel: String,
        /// Why.
        reason: String,
    },
    /// A member could not be removed from a channel.
    #[error("removing a member from channel {channel}: {reason}")]
    Removal {
        /// The channel.
        channel: String,
        /// Why.
        reason: String,
    },
    /// The relay's own URL did not parse (it always should).
    #[error("relay URL {url}: {reason}")]
    Url {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
}

/// A running relay. Dropping it stops the listener and ends every connection (websocket
/// clients get a close frame).
#[derive(Debug)]
pub struct TestRelay {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
    /// With TLS: the CA that signed the relay's certificate (PEM).
    ca_pem: Option<String>,
    /// Dropped with the relay, which tells every connection to end.
    _stop: watch::Sender<()>,
}

impl TestRelay {
    /// Binds `127.0.0.1:config.port` and starts serving.
    ///
    /// # Errors
    ///
    /// [`RelayError`] when the port cannot be bound.
    pub async fn start(config: RelayConfig) -> Result<Self, RelayError> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, config.port))
            .await
            .map_err(|source| RelayError::Bind {
                port: config.port,
                source,
            })?;
        let addr = listener.local_addr().map_err(RelayError::LocalAddr)?;
        let url = format!("ws://{addr}");
        let relay_url = RelayUrl::parse(&url).map_err(|e| RelayError::Url {
            url,
            reason: e.to_string(),
        })?;

        let database: Arc<dyn NostrDatabase> =
            Arc::new(MemoryDatabase::with_opts(MemoryDatabaseOptions {
                events: true,
                max_events: None,
            }));
        // The builder never listens itself (`run` is not called): connections come from our
        // listener through `take_connection`. NIP-42 is required for reads and writes, as on
        // the Buzz relay; the limits follow its NIP-11 document.
        let relay = LocalRelay::new(
            RelayBuilder::default()
                .database(database.clone())
                .nip42(builder::RelayBuilderNip42 {
                    mode: builder::RelayBuilderNip42Mode::Both,
                })
                .rate_limit(builder::RateLimit {
                    max_reqs: rest::MAX_SUBSCRIPTIONS as usize,
                    notes_per_minute: 1_000_000,
                })
                .max_subid_length(rest::MAX_SUBID_LENGTH as usize)
                .max_filter_limit(rest::MAX_LIMIT)
                .default_filter_limit(rest::MAX_LIMIT),
        );
        let tls = if config.tls {
            Some(crate::tls::Identity::generate()?)
        } else {
            None
        };
        let (stop, stopped) = watch::channel(());
        let shared = Arc::new(Shared {
            relay,
            database,
            keys: config.keys.unwrap_or_else(Keys::generate),
            relay_url,
            secure: tls.is_some(),
            faults: FaultState::new(config.faults),
            nip98: Nip98Verifier::new(),
            stopped,
            actions: broadcast::channel(64).0,
            requests: Mutex::new(Vec::new()),
            socket_events: Mutex::new(Vec::new()),
            connections: AtomicU64::new(0),
            members: config.members,
            rest_calls: Mutex::new(Vec::new()),
        });
        let (acceptor, ca_pem) = match tls {
            Some(identity) => (Some(identity.acceptor), Some(identity.ca_pem)),
            None => (None, None),
        };
        let accept = tokio::spawn(accept_loop(listener, shared.clone(), acceptor));
        tracing::info!(%addr, "buzz-test-relay listening");
        Ok(Self {
            addr,
            shared,
            accept,
            ca_pem,
            _stop: stop,
        })
    }

    /// The bound address.
    #[must_use]
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `ws://127.0.0.1:PORT` (`wss://localhost:PORT` with TLS: the name its certificate has)
    #[must_use]
    pub fn ws_url(&self) -> String {
        match self.ca_pem {
            Some(_) => format!("wss://localhost:{}", self.addr.port()),
            None => format!("ws://{}", self.addr),
        }
    }

    /// `http://127.0.0.1:PORT` (the REST base URL; `https://localhost:PORT` with TLS)
    #[must_use]
    pub fn http_url(&self) -> String {
        match self.ca_pem {
            Some(_) => format!("https://localhost:{}", self.addr.port()),
            None => format!("http://{}", self.addr),
        }
    }

    /// With TLS: the CA certificate (PEM) a client must trust to reach the relay.
    #[must_use]
    pub fn ca_certificate_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// The relay's own public key (NIP-11 `pubkey` and `self`).
    #[must_use]
    pub fn public_key(&self) -> PublicKey {
        self.shared.keys.public_key()
    }

    /// Replaces the faults; counters start again from the new values. Connections already
    /// open keep the `notice` and `drop_connections_after` they opened with.
    pub fn set_faults(&self, faults: Faults) {
        self.shared.faults.replace(faults);
    }

    /// Makes `members` the members of channel `channel` (a UUID) called `name`, of type
    /// `channel_type` (`stream`, `dm`, …): the NIP-29 group events a Buzz relay keeps, signed with
    /// this relay's own key as the Buzz relay signs them: kind 39002 (`d` = the channel, one `p`
    /// per member) and kind 39000 (`d`, `name`, `t` = the type). A client discovers its channels
    /// by querying 39002 for its own key, and what they are from 39000.
    ///
    /// # Errors
    ///
    /// [`RelayError::Seed`] when an event cannot be signed or is not stored.
    pub async fn add_channel(
        &self,
        channel: &str,
        name: &str,
        channel_type: &str,
        members: &[PublicKey],
    ) -> Result<(), RelayError> {
        let seed = |reason: String| RelayError::Seed {
            channel: channel.to_owned(),
            reason,
        };
        let d = nostr::Tag::parse(["d", channel]).map_err(|e| seed(e.to_string()))?;
        let mut member_tags = vec![d.clone()];
        member_tags.extend(members.iter().map(|m| nostr::Tag::public_key(*m)));
        let metadata_tags = vec![
            d,
            nostr::Tag::parse(["name", name]).map_err(|e| seed(e.to_string()))?,
            nostr::Tag::parse(["t", channel_type]).map_err(|e| seed(e.to_string()))?,
        ];
        for (kind, tags) in [
            (KIND_GROUP_MEMBERS, member_tags),
            (KIND_GROUP_METADATA, metadata_tags),
        ] {
            self.publish_own(kind, tags, nostr::Timestamp::now())
                .await
                .map_err(seed)?;
        }
        Ok(())
    }

    /// Removes `member` from channel `channel`, as a Buzz relay does when a member is removed:
    /// it replaces the channel's members list (kind 39002) with one that no longer names the
    /// member, then publishes the removal itself (kind 9001, NIP-29's remove-user: `h` = the
    /// channel, `p` = the member), both signed with this relay's own key. A client subscribed
    /// to its own `#p` or to the channel's `#h` gets the removal live; one that looks for its
    /// channels afterwards no longer finds this one. Open subscriptions stay open (see
    /// [`TestRelay::close_subscriptions`] for a relay that also ends them).
    ///
    /// # Errors
    ///
    /// [`RelayError::Removal`] when the channel has no members list (it was never added), or an
    /// event cannot be signed or is not stored.
    pub async fn remove_member(&self, channel: &str, member: PublicKey) -> Result<(), RelayError> {
        let removal = |reason: String| RelayError::Removal {
            channel: channel.to_owned(),
            reason,
        };
        let current = self
            .shared
            .database
            .query(
                nostr::Filter::new()
                    .kind(nostr::Kind::Custom(KIND_GROUP_MEMBERS))
                    .author(self.public_key())
                    .identifier(channel),
            )
            .await
            .map_err(|e| removal(e.to_string()))?
            .first_owned()
            .ok_or_else(|| removal("the channel has no members list".into()))?;
        // The list keeps its `d` tag and every member but the removed one.
        let tags: Vec<nostr::Tag> = current
            .tags
            .iter()
            .filter(|tag| {
                let parts = tag.as_slice();
                !(parts.first().map(String::as_str) == Some("p")
                    && parts.get(1) == Some(&member.to_hex()))
            })
            .cloned()
            .collect();
        // An addressable event replaces the stored one only when it is not older, and of two
        // lists dated the same second a relay may keep either: the new list is dated after the
        // old one.
        let after = nostr::Timestamp::from(current.created_at.as_secs() + 1);
        self.publish_own(KIND_GROUP_MEMBERS, tags, nostr::Timestamp::now().max(after))
            .await
            .map_err(removal)?;
        let tags = vec![
            nostr::Tag::parse(["h", channel]).map_err(|e| removal(e.to_string()))?,
            nostr::Tag::public_key(member),
        ];
        self.publish_own(KIND_REMOVE_MEMBER, tags, nostr::Timestamp::now())
            .await
            .map_err(removal)
    }

    /// Signs an event of `kind` with `tags` and no content with the relay's own key and stores
    /// it through the one ingest path (so live subscriptions get it); why not, as text.
    async fn publish_own(
        &self,
        kind: u16,
        tags: Vec<nostr::Tag>,
        created_at: nostr::Timestamp,
    ) -> Result<(), String> {
        let event = nostr::EventBuilder::new(nostr::Kind::Custom(kind), "")
            .tags(tags)
            .custom_created_at(created_at)
            .sign_with_keys(&self.shared.keys)
            .map_err(|e| e.to_string())?;
        let verdict = crate::ingest::publish(
            &self.shared.relay,
            &self.shared.keys,
            &self.shared.relay_url,
            self.addr,
            event,
        )
        .await
        .map_err(|e| e.to_string())?;
        if verdict.accepted {
            Ok(())
        } else {
            Err(verdict.message)
        }
    }

    /// Closes every live subscription of every open connection now: each client gets `CLOSED`
    /// with `reason` for each of its subscriptions, and they end (the connections stay). Returns
    /// how many connections were told.
    pub fn close_subscriptions(&self, reason: &str) -> usize {
        self.act(Action::CloseAll(reason.to_owned()))
    }

    /// Closes the live subscription `subscription` (e.g. `ch-<channel uuid>`) of every open
    /// connection that has one now: its client gets `CLOSED` with `reason`, the subscription
    /// ends, the connection stays. Returns how many connections were told (each acts only if
    /// the subscription is live on it).
    pub fn close_subscription(&self, subscription: &str, reason: &str) -> usize {
        self.act(Action::Close {
            subscription: subscription.to_owned(),
            reason: reason.to_owned(),
        })
    }

    /// Sends `["NOTICE", text]` to every open websocket connection now. Returns how many
    /// connections were told. Connections act on these actions and on
    /// [`TestRelay::close_subscription`]'s in the order they were asked for.
    pub fn send_notice(&self, text: &str) -> usize {
        self.act(Action::Notice(text.to_owned()))
    }

    /// Every `REQ` websocket clients sent so far, in the order each connection read them (a
    /// `REQ` a fault answered with `CLOSED` included), with the connection's number and when
    /// it was read.
    #[must_use]
    pub fn requests(&self) -> Vec<ReceivedRequest> {
        self.shared.requests()
    }

    /// Every `EVENT` websocket clients sent so far (typing indicators and presence included,
    /// which a relay passes on and never stores), in the order each connection read them, with
    /// the connection's number and when it was read.
    #[must_use]
    pub fn socket_events(&self) -> Vec<SocketEvent> {
        self.shared.socket_events()
    }

    /// Every REST request so far whose NIP-98 authorization held (served or refused
    /// afterwards), in the order they were read, with their signer and `x-auth-tag`.
    #[must_use]
    pub fn rest_calls(&self) -> Vec<RestCall> {
        self.shared.rest_calls()
    }

    /// How many websocket connections have been opened so far.
    #[must_use]
    pub fn connections(&self) -> u64 {
        self.shared
            .connections
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    fn act(&self, action: Action) -> usize {
        self.shared.actions.send(action).unwrap_or(0)
    }
}

impl Drop for TestRelay {
    fn drop(&mut self) {
        self.accept.abort();
        // `_stop` is dropped next, which ends every connection task; this ends the builder's
        // sessions as well (they also end when their link closes).
        self.shared.relay.shutdown();
    }
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!("accept: {e}");
                continue;
            }
        };
        let shared = shared.clone();
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            match acceptor {
                None => serve_connection(stream, shared, peer).await,
                Some(acceptor) => match acceptor.accept(stream).await {
                    Ok(tls) => serve_connection(tls, shared, peer).await,
                    Err(e) => tracing::debug!(%peer, "TLS handshake: {e}"),
                },
            }
        });
    }
}

/// Serves HTTP/1 (REST, NIP-11, the websocket upgrade) on one accepted connection until it ends
/// or the relay stops.
async fn serve_connection<S>(stream: S, shared: Arc<Shared>, peer: SocketAddr)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut stopped = shared.stopped.clone();
    let service = service_fn(move |request| {
        let shared = shared.clone();
        async move { Ok::<_, Infallible>(route(shared, peer, request).await) }
    });
    let connection = http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    // A kept-alive REST connection would otherwise outlive the relay.
    tokio::select! {
        served = connection => if let Err(e) = served {
            tracing::debug!(%peer, "connection: {e}");
        },
        _ = stopped.changed() => {}
    }
}

type HttpResponse = Response<Full<Bytes>>;

async fn route(shared: Arc<Shared>, peer: SocketAddr, request: Request<Incoming>) -> HttpResponse {
    let path = request.uri().path().to_owned();
    let method = request.method().clone();
    if method == Method::GET && path == "/" && is_websocket_upgrade(&request) {
        return upgrade(shared, peer, request);
    }
    if method == Method::GET && (path == "/info" || (path == "/" && wants_nip11(&request))) {
        let mut response = json_response(&Reply {
            status: StatusCode::OK,
            body: serde_json::json!(rest::info(&shared)),
            retry_after_secs: None,
        });
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/nostr+json"),
        );
        return response;
    }
    if method == Method::GET && path == "/" {
        return text_response(
            StatusCode::OK,
            "buzz-test-relay: connect with a websocket, or see /info\n",
        );
    }
    let Some(route) = Route::from_path(&path) else {
        return json_response(&Reply::error(StatusCode::NOT_FOUND, "not found"));
    };
    if method != Method::POST {
        return json_response(&Reply::error(
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed",
        ));
    }
    // The URL the client addressed: what its NIP-98 `u` tag must name.
    let host = header_text(&request, header::HOST).unwrap_or_default();
    let scheme = if shared.secure { "https" } else { "http" };
    let url = format!("{scheme}://{host}{path}");
    let authorization = header_text(&request, header::AUTHORIZATION);
    let auth_tag = header_text(&request, header::HeaderName::from_static("x-auth-tag"));
    let body = match Limited::new(request.into_body(), MAX_BODY_BYTES)
        .collect()
        .await
    {
        Ok(body) => body.to_bytes(),
        Err(e) => {
            return json_response(&Reply::error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("body: {e}"),
            ));
        }
    };
    let reply = rest::post(
        &shared,
        Post {
            route,
            url: &url,
            authorization: authorization.as_deref(),
            auth_tag: auth_tag.as_deref(),
            body: &body,
            peer,
        },
    )
    .await;
    json_response(&reply)
}

/// Answers `101 Switching Protocols` and hands the upgraded stream to the websocket front.
fn upgrade(shared: Arc<Shared>, peer: SocketAddr, mut request: Request<Incoming>) -> HttpResponse {
    let Some(key) = request.headers().get(header::SEC_WEBSOCKET_KEY) else {
        return json_response(&Reply::error(
            StatusCode::BAD_REQUEST,
            "missing Sec-WebSocket-Key",
        ));
    };
    let accept = derive_accept_key(key.as_bytes());
    let host = header_text(&request, header::HOST).unwrap_or_else(|| peer.to_string());
    let scheme = if shared.secure { "wss" } else { "ws" };
    let relay_url = format!("{scheme}://{host}");
    let on_upgrade = hyper::upgrade::on(&mut request);
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => {
                let socket =
                    WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None)
                        .await;
                ws::serve(socket, shared, peer, relay_url).await;
            }
            Err(e) => tracing::warn!(%peer, "websocket upgrade: {e}"),
        }
    });
    let mut response = Response::new(Full::new(Bytes::new()));
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    if let Ok(accept) = HeaderValue::from_str(&accept) {
        headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    }
    response
}

fn is_websocket_upgrade(request: &Request<Incoming>) -> bool {
    let has_token = |name: header::HeaderName, token: &str| {
        request
            .headers()
            .get_all(name)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .any(|part| part.trim().eq_ignore_ascii_case(token))
    };
    has_token(header::CONNECTION, "upgrade") && has_token(header::UPGRADE, "websocket")
}

fn wants_nip11(request: &Request<Incoming>) -> bool {
    header_text(request, header::ACCEPT)
        .is_some_and(|accept| accept.contains("application/nostr+json"))
}

fn header_text(request: &Request<Incoming>, name: header::HeaderName) -> Option<String> {
    request
        .headers()
        .get(name)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
}

fn json_response(reply: &Reply) -> HttpResponse {
    let mut response = Response::new(Full::new(Bytes::from(reply.body.to_string())));
    *response.status_mut() = reply.status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(secs) = reply.retry_after_secs {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

fn text_response(status: StatusCode, text: &'static str) -> HttpResponse {
    let mut response = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}
