//! A websocket connection into nostr-relay-builder's relay over an in-memory pipe.
//!
//! `LocalRelay::take_connection` accepts any already-upgraded byte stream and serves the
//! websocket protocol on it, exactly as it serves a socket it accepted itself. We hand it one
//! end of a `tokio::io::duplex` pipe and speak websocket (client role) on the other. Every
//! connection the relay serves goes through such a link: the websocket front forwards a real
//! client's frames over one, and a REST write publishes over one (see [`crate::ingest`]), so
//! both reach the builder's one ingest path and one store.
//!
//! **Why a challenge is provoked.** With NIP-42 required, the builder issues a challenge only
//! when an unauthenticated client asks for something: a `REQ` is answered with `AUTH` and a
//! `CLOSED auth-required: …`. The Buzz relay challenges every client as soon as it connects, and
//! buzz-acp waits for that challenge. So a link opens with a `REQ` of its own under
//! [`CHALLENGE_SUBSCRIPTION`]; the `AUTH` that comes back is the builder's real challenge (it is
//! what the builder will check the answer against), and the link's users drop the `CLOSED` for
//! that subscription.

use std::net::SocketAddr;

use nostr::{ClientMessage, Filter, JsonUtil as _, SubscriptionId};
use nostr_relay_builder::LocalRelay;
use tokio::io::DuplexStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::Role;

/// The subscription id of the `REQ` a link opens with to get a challenge.
pub(crate) const CHALLENGE_SUBSCRIPTION: &str = "buzz-test-relay-challenge";

/// The pipe's buffer; a websocket frame larger than this just takes more than one write.
const PIPE_BYTES: usize = 256 * 1024;

/// The link's websocket (we are the client end).
pub(crate) type LinkSocket = WebSocketStream<DuplexStream>;

/// Opens a link into `relay` on behalf of `peer` (the address the builder logs and hands to
/// its policies) and asks for a challenge.
///
/// # Errors
///
/// When the challenge request cannot be written (the relay has shut down).
pub(crate) async fn open(
    relay: &LocalRelay,
    peer: SocketAddr,
) -> Result<LinkSocket, tokio_tungstenite::tungstenite::Error> {
    use futures::SinkExt as _;

    let (ours, theirs) = tokio::io::duplex(PIPE_BYTES);
    let relay = relay.clone();
    tokio::spawn(async move {
        if let Err(e) = relay.take_connection(theirs, peer).await {
            tracing::debug!(%peer, "builder connection ended: {e}");
        }
    });
    let mut socket = WebSocketStream::from_raw_socket(ours, Role::Client, None).await;
    let ask = ClientMessage::req(
        SubscriptionId::new(CHALLENGE_SUBSCRIPTION),
        vec![Filter::new().limit(0)],
    );
    socket.send(Message::text(ask.as_json())).await?;
    Ok(socket)
}
