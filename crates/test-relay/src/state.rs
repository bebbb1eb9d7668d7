//! What every connection of one relay shares: the builder's relay and its store, the relay's
//! key and URL, the faults, the NIP-98 replay guard, the stop signal, the actions a test sends
//! every connection, and the record of the `REQ`s clients sent.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use nostr::{Keys, RelayUrl};
use nostr_relay_builder::LocalRelay;
use nostr_relay_builder::prelude::NostrDatabase;
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

use crate::config::FaultState;
use crate::nip98::Nip98Verifier;

#[derive(Debug)]
pub(crate) struct Shared {
    /// The builder's relay: subscriptions, NIP-42 challenges, ingest.
    pub relay: LocalRelay,
    /// Its store, read directly by `/query` and `/count`.
    pub database: Arc<dyn NostrDatabase>,
    /// The relay's own key.
    pub keys: Keys,
    /// `ws://127.0.0.1:PORT`.
    pub relay_url: RelayUrl,
    /// Whether connections come through TLS (`wss://`, `https://` is what clients address).
    pub secure: bool,
    /// The faults in force and their counters.
    pub faults: FaultState,
    /// The NIP-98 check and its replay guard.
    pub nip98: Nip98Verifier,
    /// Resolves `changed()` (with an error) once the [`TestRelay`](crate::TestRelay) is dropped: every
    /// connection task watches it and ends.
    pub stopped: watch::Receiver<()>,
    /// What a test asks of every open connection now ([`Action`]), in the order it asked.
    pub actions: broadcast::Sender<Action>,
    /// Every `REQ` a websocket client sent, in the order the connections read them.
    pub requests: Mutex<Vec<ReceivedRequest>>,
    /// Every `EVENT` a websocket client sent (ephemeral ones included, which the relay passes
    /// on and never stores), in the order the connections read them.
    pub socket_events: Mutex<Vec<SocketEvent>>,
    /// How many websocket connections were opened (the last one's number).
    pub connections: AtomicU64,
    /// Members only: who is served without an `x-auth-tag` ([`crate::RelayConfig::members`]).
    pub members: Option<Vec<nostr::PublicKey>>,
    /// Every REST request whose NIP-98 authorization held, in the order they were read.
    pub rest_calls: Mutex<Vec<RestCall>>,
}

impl Shared {
    /// Numbers a new websocket connection (1, 2, …).
    pub fn next_connection(&self) -> u64 {
        self.connections.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Notes a `REQ` the client of `connection` sent.
    pub fn record_request(&self, connection: u64, subscription_id: &str) {
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(ReceivedRequest {
                subscription_id: subscription_id.to_owned(),
                connection,
                at: Instant::now(),
            });
    }

    /// Notes an `EVENT` the client of `connection` sent.
    pub fn record_socket_event(&self, connection: u64, event: &nostr::Event) {
        self.socket_events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(SocketEvent {
                event: event.clone(),
                connection,
                at: Instant::now(),
            });
    }

    /// A copy of the `EVENT` record.
    pub fn record_rest_call(&self, call: RestCall) {
        self.rest_calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(call);
    }

    pub fn rest_calls(&self) -> Vec<RestCall> {
        self.rest_calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    pub fn socket_events(&self) -> Vec<SocketEvent> {
        self.socket_events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// A copy of the record.
    pub fn requests(&self) -> Vec<ReceivedRequest> {
        self.requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// What a test asks of every open websocket connection at once. One channel carries all of
/// them, so a connection acts on them in the order they were asked for.
#[derive(Debug, Clone)]
pub(crate) enum Action {
    /// End every live subscription with `CLOSED` and this reason.
    CloseAll(String),
    /// End the live subscription with this id (if the connection has it) with `CLOSED`.
    Close {
        /// The subscription id.
        subscription: String,
        /// The `CLOSED` message.
        reason: String,
    },
    /// Send `["NOTICE", text]`.
    Notice(String),
}

/// A `REQ` a websocket client sent, as the relay read it (served or answered by a fault).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedRequest {
    /// Its subscription id.
    pub subscription_id: String,
    /// Which websocket connection sent it: 1 for the relay's first, 2 for the next, …
    pub connection: u64,
    /// When the relay read it.
    pub at: Instant,
}

/// A REST request the relay read, once its NIP-98 authorization held (before the relay served
/// or refused it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestCall {
    /// The route's path (`/events`, `/query`, `/count`).
    pub path: &'static str,
    /// Who signed its NIP-98 authorization.
    pub signer: nostr::PublicKey,
    /// Its `x-auth-tag` header, if any.
    pub auth_tag: Option<String>,
}

/// An `EVENT` a websocket client sent, as the relay read it (before the relay's own checks).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketEvent {
    /// The event.
    pub event: nostr::Event,
    /// Which websocket connection sent it: 1 for the relay's first, 2 for the next, …
    pub connection: u64,
    /// When the relay read it.
    pub at: Instant,
}
