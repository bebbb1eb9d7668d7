//! The websocket front: one client's socket, relayed frame by frame to the builder.
//!
//! The client's upgraded connection is not handed to the builder directly, because the Buzz
//! relay's behaviour needs a few things the builder does not do on its own (see `docs/
//! TEST-RELAY.md`). Instead each client gets a [`link`](crate::link) into the builder, and this
//! module passes frames between the two, stepping in only here:
//!
//! * **Challenge on connect.** The link's first `AUTH` reaches the client at once; the builder's
//!   `CLOSED` for the link's own challenge request is dropped.
//! * **`AUTH` checks the builder skips.** The answer must be kind 22242 with a `relay` tag
//!   naming this relay (loopback spellings are one host, as in NIP-98); the builder then checks
//!   the challenge, the signature and the time.
//! * **Unreadable frames** get a `NOTICE` here (the builder would end the connection).
//! * **Faults.** `refuse_auth` answers `AUTH` with `OK false`; `closed` answers the next `REQ`s
//!   with `CLOSED`; `notice` follows the first challenge; `drop_connections_after` ends the
//!   connection without a close frame; [`TestRelay::close_subscriptions`](crate::TestRelay::close_subscriptions)
//!   ends the subscriptions that are live (the front keeps their ids for this) with `CLOSED`
//!   to the client and `CLOSE` to the builder.
//!
//! Every other frame (`EVENT`, `REQ`, `CLOSE`, `COUNT`, and everything the builder sends) passes
//! through unchanged. Pings are answered by the websocket layer itself.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;

use futures::{SinkExt as _, StreamExt as _};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use nostr::{ClientMessage, Event, JsonUtil as _, Kind, RelayMessage, SubscriptionId};
use tokio::sync::broadcast;
use tokio::time::Instant;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

use crate::link::{self, CHALLENGE_SUBSCRIPTION};
use crate::nip98::same_url;
use crate::state::Shared;

/// A client's websocket, as hyper upgraded it.
pub(crate) type ClientSocket = WebSocketStream<TokioIo<Upgraded>>;

/// Serves one client until either side closes (or a fault drops it). `relay_url` is the
/// websocket URL the client connected to (`ws://` + its `Host` header): what its `AUTH` must
/// name.
pub(crate) async fn serve(
    client: ClientSocket,
    shared: Arc<Shared>,
    peer: SocketAddr,
    relay_url: String,
) {
    let builder = match link::open(&shared.relay, peer).await {
        Ok(builder) => builder,
        Err(e) => {
            tracing::warn!(%peer, "could not open a link into the relay: {e}");
            return;
        }
    };
    let faults = shared.faults.snapshot();
    let deadline = faults
        .drop_connections_after
        .map(|after| Instant::now() + after);
    let mut notice = faults.notice;
    let mut stopped = shared.stopped.clone();
    let mut closing = shared.closing.subscribe();
    // The client's subscriptions the builder serves now (for `close_subscriptions`).
    let mut live: BTreeSet<SubscriptionId> = BTreeSet::new();

    let (mut to_client, mut from_client) = client.split();
    let (mut to_builder, mut from_builder) = builder.split();
    tracing::debug!(%peer, "websocket client connected");

    let ending = loop {
        // What to send, and to whom, for the frame that arrived.
        let (client_out, builder_out): (Vec<Message>, Vec<Message>) = tokio::select! {
            frame = from_client.next() => match frame {
                Some(Ok(Message::Text(text))) => {
                    match from_client_text(&shared, &relay_url, text.as_str()) {
                        Step::Forward(change) => {
                            match change {
                                Some(Live::Opened(id)) => { live.insert(id); }
                                Some(Live::Closed(id)) => { live.remove(&id); }
                                None => {}
                            }
                            (Vec::new(), vec![Message::Text(text)])
                        }
                        Step::Answer(answer) => (vec![Message::text(answer)], Vec::new()),
                    }
                }
                Some(Ok(Message::Binary(bytes))) => (Vec::new(), vec![Message::Binary(bytes)]),
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => continue,
                Some(Ok(Message::Close(_))) | None => break Ending::ClientLeft,
                Some(Err(e)) => {
                    tracing::debug!(%peer, "client socket failed: {e}");
                    break Ending::Cut;
                }
            },
            frame = from_builder.next() => match frame {
                Some(Ok(Message::Text(text))) => {
                    match RelayMessage::from_json(text.as_str()) {
                        Ok(RelayMessage::Closed { subscription_id, .. })
                            if subscription_id.as_str() == CHALLENGE_SUBSCRIPTION => continue,
                        Ok(RelayMessage::Closed { subscription_id, .. }) => {
                            live.remove(subscription_id.as_ref());
                            (vec![Message::Text(text)], Vec::new())
                        }
                        Ok(RelayMessage::Auth { .. }) => {
                            let mut out = vec![Message::Text(text)];
                            if let Some(notice) = notice.take() {
                                tracing::info!(%peer, "fault: NOTICE {notice:?}");
                                out.push(Message::text(RelayMessage::notice(notice).as_json()));
                            }
                            (out, Vec::new())
                        }
                        _ => (vec![Message::Text(text)], Vec::new()),
                    }
                }
                Some(Ok(Message::Close(_))) | None => break Ending::RelayLeft,
                Some(Ok(_)) => continue,
                Some(Err(e)) => {
                    tracing::debug!(%peer, "link into the relay failed: {e}");
                    break Ending::RelayLeft;
                }
            },
            reason = closing.recv() => match reason {
                Ok(reason) => {
                    tracing::info!(%peer, subscriptions = live.len(), "fault: CLOSED {reason:?}");
                    std::mem::take(&mut live)
                        .into_iter()
                        .map(|id| {
                            let to_client = RelayMessage::Closed {
                                subscription_id: Cow::Owned(id.clone()),
                                message: Cow::Owned(reason.clone()),
                            };
                            (
                                Message::text(to_client.as_json()),
                                Message::text(ClientMessage::close(id).as_json()),
                            )
                        })
                        .unzip()
                }
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => break Ending::RelayLeft,
            },
            _ = stopped.changed() => break Ending::RelayLeft,
            () = sleep_until(deadline) => {
                tracing::info!(%peer, "fault: dropping the websocket connection");
                break Ending::Cut;
            }
        };
        for message in client_out {
            if to_client.send(message).await.is_err() {
                return;
            }
        }
        for message in builder_out {
            if to_builder.send(message).await.is_err() {
                return;
            }
        }
    };
    match ending {
        // Completes the closing handshake the client started (or, when the relay shut down,
        // starts one); a close frame is a courtesy, so a failure is not reported.
        Ending::ClientLeft | Ending::RelayLeft => {
            let _ = to_client.close().await;
        }
        // Dropping the socket closes the TCP connection without a close frame.
        Ending::Cut => {}
    }
    tracing::debug!(%peer, "websocket client gone: {ending:?}");
}

/// Why a client's connection ended.
#[derive(Debug, Clone, Copy)]
enum Ending {
    /// The client sent a close frame or hung up.
    ClientLeft,
    /// The relay is shutting down (or the builder ended the session).
    RelayLeft,
    /// The socket failed, or the `drop_connections_after` fault cut it.
    Cut,
}

/// What to do with a text frame from the client.
enum Step {
    /// Pass it to the builder as it is (and note the subscription it opens or closes).
    Forward(Option<Live>),
    /// Answer the client with this message (JSON) instead.
    Answer(String),
}

/// A change to the client's live subscriptions.
enum Live {
    Opened(SubscriptionId),
    Closed(SubscriptionId),
}

fn from_client_text(shared: &Shared, relay_url: &str, text: &str) -> Step {
    match ClientMessage::from_json(text) {
        Ok(ClientMessage::Auth(event)) => check_auth(shared, relay_url, &event),
        Ok(ClientMessage::Req {
            subscription_id, ..
        }) => match shared.faults.take_closed() {
            Some(reason) => {
                tracing::info!("fault: CLOSED {subscription_id} {reason:?}");
                Step::Answer(
                    RelayMessage::Closed {
                        subscription_id,
                        message: Cow::Owned(reason),
                    }
                    .as_json(),
                )
            }
            None => Step::Forward(Some(Live::Opened(subscription_id.into_owned()))),
        },
        Ok(ClientMessage::Close(subscription_id)) => {
            Step::Forward(Some(Live::Closed(subscription_id.into_owned())))
        }
        // The builder ends the whole connection on a frame it cannot parse; a relay answers
        // with a NOTICE and carries on.
        Err(e) => Step::Answer(
            RelayMessage::notice(format!("invalid: unreadable message: {e}")).as_json(),
        ),
        // Everything else is the builder's to answer.
        Ok(_) => Step::Forward(None),
    }
}

/// The checks on an `AUTH` that come before the builder's own.
fn check_auth(shared: &Shared, relay_url: &str, event: &Event) -> Step {
    let refuse = |why: String| Step::Answer(RelayMessage::ok(event.id, false, why).as_json());
    if shared.faults.refuse_auth() {
        tracing::info!("fault: refusing AUTH from {}", event.pubkey);
        return refuse("restricted: authentication refused by the test relay".into());
    }
    if event.kind != Kind::Authentication {
        return refuse(format!(
            "invalid: AUTH must be kind 22242, not {}",
            event.kind.as_u16()
        ));
    }
    let named = event.tags.iter().find_map(|tag| match tag.as_slice() {
        [name, url, ..] if name == "relay" => Some(url.as_str()),
        _ => None,
    });
    match named {
        Some(url) if same_url(url, relay_url) => Step::Forward(None),
        Some(url) => refuse(format!(
            "invalid: AUTH relay tag {url:?} does not name this relay ({relay_url})"
        )),
        None => refuse("invalid: AUTH has no relay tag".into()),
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}
