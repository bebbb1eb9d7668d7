//! What every connection of one relay shares: the builder's relay and its store, the relay's
//! key and URL, the faults, the NIP-98 replay guard, and the stop signal.

use std::sync::Arc;

use nostr::{Keys, RelayUrl};
use nostr_relay_builder::LocalRelay;
use nostr_relay_builder::prelude::NostrDatabase;
use tokio::sync::{broadcast, watch};

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
    /// [`TestRelay::close_subscriptions`](crate::TestRelay::close_subscriptions): a reason
    /// sent here closes every live subscription of every connection with it.
    pub closing: broadcast::Sender<String>,
}
