//! A real client for the test relay: a websocket (tokio-tungstenite) speaking NIP-01/NIP-42
//! through the `nostr` crate's messages, and a REST caller (hyper) that signs NIP-98 headers
//! with the `nostr` crate. Every wait has a generous timeout that only guards against a hang.

#![allow(dead_code)] // each test binary uses a part

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use futures::{SinkExt as _, StreamExt as _};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use nostr::hashes::Hash as _;
use nostr::hashes::sha256::Hash as Sha256Hash;
use nostr::{
    ClientMessage, Event, EventBuilder, JsonUtil as _, Keys, Kind, RelayMessage, RelayUrl,
    SubscriptionId, Tag, Timestamp,
};
use serde_json::Value;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use buzz_test_relay::{Faults, RelayConfig, TestRelay};

/// Only a hang guard: every wait normally ends in milliseconds.
pub const HANG_GUARD: Duration = Duration::from_secs(30);

pub async fn start() -> TestRelay {
    start_with(Faults::default()).await
}

pub async fn start_with(faults: Faults) -> TestRelay {
    TestRelay::start(RelayConfig::default().faults(faults))
        .await
        .expect("relay starts")
}

/// An open websocket to the relay.
pub struct WsClient {
    socket: WebSocketStream<MaybeTlsStream<TcpStream>>,
    url: String,
}

impl WsClient {
    pub async fn connect(url: &str) -> Self {
        let (socket, _) = tokio::time::timeout(HANG_GUARD, tokio_tungstenite::connect_async(url))
            .await
            .expect("connect in time")
            .expect("websocket connects");
        Self {
            socket,
            url: url.to_owned(),
        }
    }

    pub async fn send(&mut self, message: ClientMessage<'_>) {
        self.socket
            .send(Message::text(message.as_json()))
            .await
            .expect("send");
    }

    /// Starts the closing handshake; whether the relay answered with a close frame.
    pub async fn close(&mut self) -> bool {
        self.socket
            .send(Message::Close(None))
            .await
            .expect("send close");
        loop {
            let frame = tokio::time::timeout(HANG_GUARD, self.socket.next())
                .await
                .expect("no hang");
            match frame {
                Some(Ok(Message::Close(_))) => return true,
                Some(Ok(_)) => {}
                None | Some(Err(_)) => return false,
            }
        }
    }

    /// Sends a text frame as it is.
    pub async fn send_raw(&mut self, text: &str) {
        self.socket.send(Message::text(text)).await.expect("send");
    }

    /// The next relay message; panics when the socket ends first.
    pub async fn next(&mut self) -> RelayMessage<'static> {
        self.next_or_end().await.expect("a message, not the end")
    }

    /// The next relay message, or `None` once the connection is gone.
    pub async fn next_or_end(&mut self) -> Option<RelayMessage<'static>> {
        loop {
            let frame = tokio::time::timeout(HANG_GUARD, self.socket.next())
                .await
                .expect("no hang");
            match frame {
                Some(Ok(Message::Text(text))) => {
                    return Some(RelayMessage::from_json(text.as_str()).expect("relay message"));
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return None,
                Some(Ok(_)) => {}
            }
        }
    }

    /// The next frame as the websocket gives it (pings and pongs skipped): a text that need not
    /// be a relay message, or the error that ended the connection. `None` once it is gone.
    pub async fn next_frame(
        &mut self,
    ) -> Option<Result<Message, tokio_tungstenite::tungstenite::Error>> {
        loop {
            let frame = tokio::time::timeout(HANG_GUARD, self.socket.next())
                .await
                .expect("no hang");
            match frame {
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                other => return other,
            }
        }
    }

    /// The next frame's text; panics on anything else.
    pub async fn next_text(&mut self) -> String {
        match self.next_frame().await {
            Some(Ok(Message::Text(text))) => text.as_str().to_owned(),
            other => panic!("expected a text frame, got {other:?}"),
        }
    }

    /// Sends a websocket ping and waits for its pong (skipping relay messages meanwhile).
    pub async fn ping(&mut self, payload: &'static [u8]) {
        self.socket
            .send(Message::Ping(payload.into()))
            .await
            .expect("ping");
        loop {
            let frame = tokio::time::timeout(HANG_GUARD, self.socket.next())
                .await
                .expect("no hang");
            match frame {
                Some(Ok(Message::Pong(got))) => {
                    assert_eq!(&got[..], payload);
                    return;
                }
                Some(Ok(_)) => {}
                other => panic!("socket ended before the pong: {other:?}"),
            }
        }
    }

    /// Waits for the relay's challenge.
    pub async fn challenge(&mut self) -> String {
        match self.next().await {
            RelayMessage::Auth { challenge } => challenge.into_owned(),
            other => panic!("expected AUTH first, got {}", other.as_json()),
        }
    }

    /// Answers `challenge` as `keys`; the relay's `OK` status and message.
    pub async fn answer(&mut self, keys: &Keys, challenge: &str) -> (bool, String) {
        let relay = RelayUrl::parse(&self.url).expect("relay url");
        let auth = EventBuilder::auth(challenge, relay)
            .sign_with_keys(keys)
            .expect("sign");
        let id = auth.id;
        self.send(ClientMessage::auth(auth)).await;
        self.ok_for(id).await
    }

    /// Challenge, answer, and insist on success.
    pub async fn authenticate(&mut self, keys: &Keys) {
        let challenge = self.challenge().await;
        let (ok, message) = self.answer(keys, &challenge).await;
        assert!(ok, "AUTH refused: {message}");
    }

    /// Reads until the `OK` for `id`.
    pub async fn ok_for(&mut self, id: nostr::EventId) -> (bool, String) {
        loop {
            if let RelayMessage::Ok {
                event_id,
                status,
                message,
            } = self.next().await
                && event_id == id
            {
                return (status, message.into_owned());
            }
        }
    }

    pub async fn subscribe(&mut self, id: &str, filters: Vec<nostr::Filter>) {
        self.send(ClientMessage::req(SubscriptionId::new(id), filters))
            .await;
    }
}

/// A signed kind 9 event in `channel`, mentioning `mentions`, at `created_at`.
pub fn chat(keys: &Keys, channel: &str, mentions: &[&Keys], text: &str, created_at: u64) -> Event {
    let mut tags = vec![Tag::parse(["h", channel]).expect("h tag")];
    for mentioned in mentions {
        tags.push(Tag::public_key(mentioned.public_key()));
    }
    EventBuilder::new(Kind::Custom(9), text)
        .tags(tags)
        .custom_created_at(Timestamp::from(created_at))
        .sign_with_keys(keys)
        .expect("sign")
}

/// What a NIP-98 auth event says; start from [`AuthSpec::for_post`] and change one thing.
#[derive(Debug, Clone)]
pub struct AuthSpec {
    pub url: String,
    pub method: String,
    /// `None` leaves the tag out.
    pub payload: Option<String>,
    pub created_at: Timestamp,
    pub kind: Kind,
}

impl AuthSpec {
    /// Right for a `POST` of `body` to `url`, now.
    pub fn for_post(url: &str, body: &[u8]) -> Self {
        Self {
            url: url.to_owned(),
            method: "POST".into(),
            payload: Some(Sha256Hash::hash(body).to_string()),
            created_at: Timestamp::now(),
            kind: Kind::HttpAuth,
        }
    }

    /// `Nostr <base64>`, signed by `keys`, with a fresh nonce (as buzz-acp sends it).
    pub fn header(&self, keys: &Keys) -> String {
        let nonce = Keys::generate().public_key().to_hex();
        let mut tags = vec![
            Tag::parse(["u", self.url.as_str()]).expect("u"),
            Tag::parse(["method", self.method.as_str()]).expect("method"),
            Tag::parse(["nonce", nonce.as_str()]).expect("nonce"),
        ];
        if let Some(payload) = &self.payload {
            tags.push(Tag::parse(["payload", payload.as_str()]).expect("payload"));
        }
        let event = EventBuilder::new(self.kind, "")
            .tags(tags)
            .custom_created_at(self.created_at)
            .sign_with_keys(keys)
            .expect("sign");
        format!("Nostr {}", BASE64.encode(event.as_json()))
    }
}

/// An HTTP answer: status and JSON body (`Value::Null` when empty).
#[derive(Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub body: Value,
    pub headers: hyper::HeaderMap,
}

/// Sends one request to `http_url` + `path`.
pub async fn request(
    http_url: &str,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Answer {
    let authority = http_url.trim_start_matches("http://").to_owned();
    let stream = TcpStream::connect(&authority).await.expect("tcp connect");
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(connection);
    let mut builder = Request::builder()
        .method(method)
        .uri(path)
        .header("host", authority);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let request = builder.body(Full::new(Bytes::from(body))).expect("request");
    let response = tokio::time::timeout(HANG_GUARD, sender.send_request(request))
        .await
        .expect("no hang")
        .expect("response");
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).expect("JSON body")
    };
    Answer {
        status,
        body,
        headers,
    }
}

/// A NIP-98-signed `POST` of `body` to `path`, signed by `keys`.
pub async fn post(relay: &TestRelay, keys: &Keys, path: &str, body: &[u8]) -> Answer {
    let url = format!("{}{path}", relay.http_url());
    let header = AuthSpec::for_post(&url, body).header(keys);
    post_with(relay, path, Some(&header), body).await
}

/// A `POST` of `body` to `path` with this `Authorization` header (or none).
pub async fn post_with(
    relay: &TestRelay,
    path: &str,
    authorization: Option<&str>,
    body: &[u8],
) -> Answer {
    let mut headers = vec![("content-type", "application/json")];
    if let Some(authorization) = authorization {
        headers.push(("authorization", authorization));
    }
    request(
        &relay.http_url(),
        Method::POST,
        path,
        &headers,
        body.to_vec(),
    )
    .await
}

/// Publishes `event` over REST as its author; insists on a 200 accepted.
pub async fn publish(relay: &TestRelay, keys: &Keys, event: &Event) {
    let answer = post(relay, keys, "/events", event.as_json().as_bytes()).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.body["accepted"], true, "{}", answer.body);
}
