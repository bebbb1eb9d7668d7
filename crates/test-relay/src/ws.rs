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
//! * **Faults.** `refuse_auth` answers `AUTH` with `OK false`; `closed` and
//!   `closed_subscription` answer the next `REQ`s (of any id, of one id) with `CLOSED`; `notice`
//!   follows the first challenge; `after_auth` frames follow the `OK true` for the client's
//!   `AUTH`; `drop_connections_after` ends the connection without a close frame.
//! * **Actions** a test sends every connection at once ([`Action`]), acted on in the order they
//!   were sent: [`TestRelay::close_subscriptions`](crate::TestRelay::close_subscriptions) and
//!   [`TestRelay::close_subscription`](crate::TestRelay::close_subscription) end live
//!   subscriptions (the front keeps their ids for this) with `CLOSED` to the client and
//!   `CLOSE` to the builder; [`TestRelay::send_notice`](crate::TestRelay::send_notice) sends a
//!   `NOTICE`.
//! * **The record.** Every `REQ` the client sends is noted with the connection's number and
//!   the time ([`TestRelay::requests`](crate::TestRelay::requests)).
//!
//! Every other frame (`EVENT`, `REQ`, `CLOSE`, `COUNT`, and everything the builder sends) passes
//! through unchanged. Pings are answered by the websocket layer itself.

use std::borrow::Cow;
use std::collections::{BTreeSet, HashSet};
use std::net::SocketAddr;
use std::sync::Arc;

use futures::{SinkExt as _, StreamExt as _};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use nostr::{ClientMessage, Event, EventId, JsonUtil as _, Kind, RelayMessage, SubscriptionId};
use tokio::sync::broadcast;
use tokio::time::Instant;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;

use crate::link::{self, CHALLENGE_SUBSCRIPTION};
use crate::nip98::same_url;
use crate::state::{Action, Shared};

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
    let connection = shared.next_connection();
    let faults = shared.faults.snapshot();
    let deadline = faults
        .drop_connections_after
        .map(|after| Instant::now() + after);
    let mut notice = faults.notice;
    let mut stopped = shared.stopped.clone();
    let mut actions = shared.actions.subscribe();
    // The client's subscriptions the builder serves now (for the `Close…` actions).
    let mut live: BTreeSet<SubscriptionId> = BTreeSet::new();
    // The client's `AUTH` events the builder has not answered yet (for `after_auth`).
    let mut auth_pending: HashSet<EventId> = HashSet::new();

    let (mut to_client, mut from_client) = client.split();
    let (mut to_builder, mut from_builder) = builder.split();
    tracing::debug!(%peer, "websocket client connected");

    let ending = loop {
        // What to send, and to whom, for the frame that arrived.
        let (client_out, builder_out): (Vec<Message>, Vec<Message>) = tokio::select! {
            frame = from_client.next() => match frame {
                Some(Ok(Message::Text(text))) => {
                    match from_client_text(&shared, connection, &relay_url, text.as_str()) {
                        Step::Forward(note) => {
                            match note {
                                Some(Note::Opened(id)) => { live.insert(id); }
                                Some(Note::Closed(id)) => { live.remove(&id); }
                                Some(Note::Auth(id)) => { auth_pending.insert(id); }
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
                        Ok(RelayMessage::Ok { event_id, status, .. })
                            if auth_pending.remove(&event_id) =>
                        {
                            let mut out = vec![Message::Text(text)];
                            let frames = if status { shared.faults.take_after_auth() } else { Vec::new() };
                            if !frames.is_empty() {
                                tracing::info!(%peer, frames = frames.len(), "fault: raw frames after AUTH");
                                out.extend(frames.iter().map(|frame| Message::text(frame.text())));
                            }
                            (out, Vec::new())
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
            action = actions.recv() => match action {
                Ok(Action::CloseAll(reason)) => {
                    tracing::info!(%peer, subscriptions = live.len(), "fault: CLOSED {reason:?}");
                    close(std::mem::take(&mut live), &reason)
                }
                Ok(Action::Close { subscription, reason }) => {
                    let id = SubscriptionId::new(subscription);
                    if !live.remove(&id) {
                        continue;
                    }
                    tracing::info!(%peer, "fault: CLOSED {id} {reason:?}");
                    close([id], &reason)
                }
                Ok(Action::Notice(text)) => {
                    tracing::info!(%peer, "fault: NOTICE {text:?}");
                    (vec![Message::text(RelayMessage::notice(text).as_json())], Vec::new())
                }
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::warn!(%peer, missed, "missed actions: the test sent too many at once");
                    continue;
                }
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

/// `CLOSED` with `reason` to the client and `CLOSE` to the builder, for each of `ids`.
fn close(
    ids: impl IntoIterator<Item = SubscriptionId>,
    reason: &str,
) -> (Vec<Message>, Vec<Message>) {
    ids.into_iter()
        .map(|id| {
            let to_client = RelayMessage::Closed {
                subscription_id: Cow::Owned(id.clone()),
                message: Cow::Owned(reason.to_owned()),
            };
            (
                Message::text(to_client.as_json()),
                Message::text(ClientMessage::close(id).as_json()),
            )
        })
        .unzip()
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
    /// Pass it to the builder as it is (and note what it changes).
    Forward(Option<Note>),
    /// Answer the client with this message (JSON) instead.
    Answer(String),
}

/// What a frame passed to the builder changes for the front.
enum Note {
    /// A subscription the builder now serves.
    Opened(SubscriptionId),
    /// One it no longer serves.
    Closed(SubscriptionId),
    /// An `AUTH` answer, whose `OK` is still to come.
    Auth(EventId),
}

fn from_client_text(shared: &Shared, connection: u64, relay_url: &str, text: &str) -> Step {
    match ClientMessage::from_json(text) {
        Ok(ClientMessage::Auth(event)) => match check_auth(shared, relay_url, &event) {
            Step::Forward(_) => Step::Forward(Some(Note::Auth(event.id))),
            refused => refused,
        },
        Ok(ClientMessage::Req {
            subscription_id, ..
        }) => {
            shared.record_request(connection, subscription_id.as_str());
            match shared.faults.take_closed(subscription_id.as_str()) {
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
                None => Step::Forward(Some(Note::Opened(subscription_id.into_owned()))),
            }
        }
        Ok(ClientMessage::Event(event)) => {
            shared.record_socket_event(connection, &event);
            Step::Forward(None)
        }
        Ok(ClientMessage::Close(subscription_id)) => {
            Step::Forward(Some(Note::Closed(subscription_id.into_owned())))
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
