//! `buzz-test-relay`: a real Nostr relay on 127.0.0.1 for end-to-end tests, shaped like the
//! Buzz relay as far as buzz-acp can see.
//!
//! One TCP port serves both sides the Buzz relay serves:
//!
//! * the **websocket** at `/` (NIP-01 with NIP-42 `AUTH` required), from rust-nostr's
//!   `nostr-relay-builder`, behind a thin front that challenges every client as it connects
//!   and injects faults;
//! * the **REST bridge**: `POST /events`, `POST /query`, `POST /count` (each checked with
//!   NIP-98) and `GET /info` (NIP-11).
//!
//! An event written over REST goes through the builder's own `EVENT` handler, so it reaches
//! websocket subscribers exactly as one sent over the socket; both sides read one store.
//!
//! ```no_run
//! # async fn demo() -> Result<(), buzz_test_relay::RelayError> {
//! use buzz_test_relay::{RelayConfig, TestRelay};
//! let relay = TestRelay::start(RelayConfig::default()).await?;
//! println!("{} {}", relay.ws_url(), relay.http_url());
//! # Ok(()) }
//! ```
//!
//! Modules, one concept each:
//! - [`config`]: settings and the typed faults (all off by default).
//! - [`nip98`]: the REST authorization check and its replay guard.
//! - [`rest`]: the REST routes and the NIP-11 document.
//! - `ingest`: publishing a REST write through the builder's ingest path.
//! - `link`: a websocket into the builder over an in-memory pipe.
//! - `ws`: the websocket front between a client and its link.
//! - `state`: what every connection of a relay shares (and the record of `REQ`s,
//!   [`ReceivedRequest`]).
//! - [`server`]: the listener, the HTTP routing and the [`TestRelay`] handle.
//!
//! `docs/TEST-RELAY.md` says what it follows of the Buzz relay and where it differs.

pub mod config;
mod ingest;
mod link;
pub mod nip98;
pub mod rest;
pub mod server;
mod state;
pub mod tls;
mod ws;

pub use config::{
    ClosedFault, ClosedSubscriptionFault, Faults, RawFrame, RelayConfig, RestFailure,
    RestFailureKind,
};
pub use rest::{EventsAnswer, RelayInfo};
pub use server::{RelayError, TestRelay};
pub use state::{ReceivedRequest, RestCall, SocketEvent};
