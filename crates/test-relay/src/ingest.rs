//! Publishing an event the way a websocket client does, for `POST /events`.
//!
//! The Buzz relay runs its websocket `EVENT` and its REST `POST /events` through one ingest
//! path. Here that path is nostr-relay-builder's `EVENT` handler: id and signature checks,
//! duplicate detection, storing (ephemeral kinds are only broadcast), and the broadcast that
//! live subscriptions match against. A REST write opens a [`link`](crate::link) into the
//! builder, answers the builder's challenge with an `AUTH` signed by the relay's own key, sends
//! `EVENT`, and returns the builder's `OK`. Nothing here decides whether an event is valid.

use std::net::SocketAddr;
use std::time::Duration;

use futures::{SinkExt as _, StreamExt as _};
use nostr::{
    ClientMessage, Event, EventBuilder, EventId, JsonUtil as _, Keys, RelayMessage, RelayUrl,
};
use nostr_relay_builder::LocalRelay;
use tokio_tungstenite::tungstenite::Message;

use crate::link::{self, LinkSocket};

/// How long the in-memory exchange may take before the REST call fails with 500. It takes
/// about a millisecond; this only guards against a hang.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(10);

/// The builder's `OK` for a published event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The event's id.
    pub event_id: EventId,
    /// `true` when the relay has the event (new or a duplicate).
    pub accepted: bool,
    /// Empty, or a NIP-01 machine-readable reason (`invalid: …`, `duplicate: …`, …).
    pub message: String,
}

/// Why an event could not be handed to the builder at all (not: why it was refused).
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    /// The link's websocket failed.
    #[error("link to the relay: {0}")]
    Link(#[from] tokio_tungstenite::tungstenite::Error),
    /// The builder closed the link before answering.
    #[error("the relay closed the link before answering")]
    Closed,
    /// The builder did not answer in time.
    #[error("the relay did not answer within {EXCHANGE_TIMEOUT:?}")]
    Timeout,
    /// The builder refused the relay's own `AUTH`.
    #[error("the relay refused its own AUTH: {0}")]
    Auth(String),
    /// Signing the relay's `AUTH` failed.
    #[error("signing the relay's AUTH: {0}")]
    Sign(#[from] nostr::event::builder::Error),
}

/// Publishes `event` into `relay`, on behalf of the REST client at `peer`; the builder's verdict.
///
/// # Errors
///
/// [`IngestError`] when the builder could not be asked or did not answer; a refused event is a
/// [`Verdict`] with `accepted: false`, not an error.
pub async fn publish(
    relay: &LocalRelay,
    keys: &Keys,
    relay_url: &RelayUrl,
    peer: SocketAddr,
    event: Event,
) -> Result<Verdict, IngestError> {
    tokio::time::timeout(
        EXCHANGE_TIMEOUT,
        exchange(relay, keys, relay_url, peer, event),
    )
    .await
    .map_err(|_| IngestError::Timeout)?
}

async fn exchange(
    relay: &LocalRelay,
    keys: &Keys,
    relay_url: &RelayUrl,
    peer: SocketAddr,
    event: Event,
) -> Result<Verdict, IngestError> {
    let mut socket = link::open(relay, peer).await?;

    // 1. The challenge the link provoked.
    let challenge = loop {
        if let RelayMessage::Auth { challenge } = next_message(&mut socket).await? {
            break challenge.into_owned();
        }
    };

    // 2. Authenticate as the relay.
    let auth = EventBuilder::auth(challenge, relay_url.clone()).sign_with_keys(keys)?;
    let auth_id = auth.id;
    send(&mut socket, ClientMessage::auth(auth)).await?;
    let (accepted, message) = ok_for(&mut socket, auth_id).await?;
    if !accepted {
        return Err(IngestError::Auth(message));
    }

    // 3. Publish.
    let event_id = event.id;
    send(&mut socket, ClientMessage::event(event)).await?;
    let (accepted, message) = ok_for(&mut socket, event_id).await?;
    // Closing is a courtesy; the builder ends the session when the pipe drops either way.
    let _ = socket.close(None).await;
    Ok(Verdict {
        event_id,
        accepted,
        message,
    })
}

async fn send(socket: &mut LinkSocket, message: ClientMessage<'_>) -> Result<(), IngestError> {
    socket.send(Message::text(message.as_json())).await?;
    Ok(())
}

/// Reads until the `OK` for `id`: its status and message.
async fn ok_for(socket: &mut LinkSocket, id: EventId) -> Result<(bool, String), IngestError> {
    loop {
        if let RelayMessage::Ok {
            event_id,
            status,
            message,
        } = next_message(socket).await?
            && event_id == id
        {
            return Ok((status, message.into_owned()));
        }
    }
}

/// The next relay message; frames that are not one are skipped.
async fn next_message(socket: &mut LinkSocket) -> Result<RelayMessage<'static>, IngestError> {
    loop {
        match socket.next().await {
            Some(Ok(Message::Text(text))) => match RelayMessage::from_json(text.as_str()) {
                Ok(message) => return Ok(message),
                Err(e) => tracing::warn!("unreadable message from the relay: {e}"),
            },
            Some(Ok(Message::Close(_))) | None => return Err(IngestError::Closed),
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(e.into()),
        }
    }
}
