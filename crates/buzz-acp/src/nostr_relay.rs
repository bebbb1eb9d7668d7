//! Upstream's transport: a Nostr relay over a websocket (NIP-01 subscriptions, NIP-42 AUTH) and
//! its REST side (see [`crate::rest`]).
//!
//! The socket lives in a task of its own, beside the event loop: it connects, answers the
//! relay's AUTH challenge, subscribes to every channel the agent belongs to (`ch-<uuid>`, `#h`,
//! `since`) and to its membership changes, keeps the connection alive with pings, and
//! reconnects with upstream's backoff when it drops, resubscribing from the older of "last event
//! seen" and "when it dropped", minus 5 s. What it reads reaches the loop through a bounded
//! channel; [`Relay::poll`] only drains that channel, so the loop never waits on the network.
//! Replies are signed with the agent's key and handed to a publisher task (`POST /events`).
//!
//! What the relay says about the connection is acted on as upstream does: `CLOSED` for a
//! channel's membership drops that channel, `CLOSED rate-limited:` parks the subscription until
//! the relay's "retry in N s" has passed, an auth reason reconnects, any other reason requests
//! the subscription again; `NOTICE rate-limited:` holds every `REQ` for as long as it asks. A
//! frame that is not a relay message is logged and skipped; one over the websocket limits
//! ([`MAX_FRAME_BYTES`], [`MAX_MESSAGE_BYTES`]) breaks the connection, which is then opened
//! again like any dropped one.
//!
//! Like upstream, the first subscription starts at the harness's start: a mention posted while
//! the harness was stopped is not delivered (the loss upstream's #4903 describes). Like
//! upstream, incoming events are parsed, not verified.
//!
//! The history the context windows read comes from the same relay: each channel's recent
//! events are fetched with `POST /query` when the channel is subscribed, and every event the
//! subscription delivers is added to it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use futures::{SinkExt as _, StreamExt as _};
use nostr::{
    Alphabet, ClientMessage, Filter, JsonUtil as _, Keys, Kind, RelayMessage, RelayUrl,
    SingleLetterTag, SubscriptionId, Timestamp,
};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use crate::config::AgentKeys;
use crate::event_index::EventIndex;
use crate::relay::{
    ChannelId, ChannelInfo, ChannelKind, Event, EventBuilder, Incoming, LogPosition, Poll, Relay,
    RelayError, Typing,
};
use crate::rest::RestClient;

/// Kind of the NIP-29 group metadata event (name, type).
pub const KIND_GROUP_METADATA: u16 = 39000;
/// Kind of the NIP-29 group members event (`d` = channel, `p` = members).
pub const KIND_GROUP_MEMBERS: u16 = 39002;
/// Kind of a membership addition (NIP-29 put-user).
pub const KIND_ADD_MEMBER: u16 = 9000;

/// How long a connect may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the client waits for the relay's AUTH challenge after connecting.
pub const CHALLENGE_TIMEOUT: Duration = Duration::from_secs(20);
/// A ping is sent this often…
pub const PING_INTERVAL: Duration = Duration::from_secs(30);
/// …and the connection counts as dead when no pong came this long after it.
pub const PONG_TIMEOUT: Duration = Duration::from_secs(10);
/// Resubscriptions start this much before the last event seen.
pub const SINCE_SKEW_SECS: u64 = 5;
/// Events waiting for the loop; a full buffer drops the event and forces a resubscribe.
pub const EVENT_BUFFER: usize = 256;
/// Kind of a presence update: ephemeral, sent over the socket only, content `online`
/// (upstream-facts §10: presence 20001; the relay's REST bridge refuses ephemeral kinds).
pub const KIND_PRESENCE: u16 = 20001;
/// Kind of a typing indicator: ephemeral, sent over the socket only, an `h` tag and the
/// thread's `e` tags (§10).
pub const KIND_TYPING: u16 = 20002;
/// How often presence is said again on a live connection (the model's choice: §10 names no
/// interval; once a minute, so a relay's short presence expiry sees a live agent as live).
pub const PRESENCE_INTERVAL: Duration = Duration::from_secs(60);
/// Ephemeral events waiting for the socket. One more is dropped: an indicator is worth
/// nothing late, and the next is due in seconds.
pub const EPHEMERAL_BUFFER: usize = 64;
/// How long one frame may take to send (§10: every send has a 10 s time-out).
pub const SEND_TIMEOUT: Duration = Duration::from_secs(10);
/// Events of each channel fetched for its history when it is subscribed.
pub const HISTORY_FETCH: usize = 500;
/// How far [`NostrRelay::history`] follows a reply chain to place a message in its thread.
pub const MAX_REPLY_DEPTH: usize = 10_000;
/// Ids remembered for de-duplication (two generations of this size).
pub const DEDUP_GENERATION: usize = 6_000;
/// The largest websocket frame read from the relay: tokio-tungstenite's default. Upstream
/// speaks websocket through tokio-tungstenite too, and no limit of its own is known, so the
/// model keeps the library's. A larger frame breaks the connection.
pub const MAX_FRAME_BYTES: usize = 16 << 20;
/// The largest websocket message (all its frames) read from the relay: tokio-tungstenite's
/// default, kept for the same reason as [`MAX_FRAME_BYTES`].
pub const MAX_MESSAGE_BYTES: usize = 64 << 20;
/// The shortest wait a `rate-limited:` message imposes: what a hint under
/// [`RATE_LIMIT_SHORT_HINT_SECS`], or no hint, comes to.
pub const RATE_LIMIT_FLOOR: Duration = Duration::from_secs(5);
/// A "retry in N s" hint shorter than this is read as [`RATE_LIMIT_FLOOR`].
pub const RATE_LIMIT_SHORT_HINT_SECS: f64 = 2.0;
/// The longest wait a `rate-limited:` hint can impose (a model choice: no wait of the transport
/// is longer than its reconnect ladder's 60 s).
pub const RATE_LIMIT_CEILING: Duration = Duration::from_secs(60);
/// The `CLOSED` reasons that end a channel's subscription for good (exact, as upstream).
pub const CLOSED_FOR_GOOD: [&str; 2] = [
    "restricted: not a channel member",
    "restricted: channel access revoked",
];

/// Reconnect delays after a drop: 1 … 32 s, then 60 s flat.
fn reconnect_delay(attempt: u32) -> Duration {
    match attempt {
        0..=5 => Duration::from_secs(1 << attempt),
        _ => Duration::from_secs(60),
    }
}

/// How long a `rate-limited:` message (a `NOTICE` or a `CLOSED` reason) asks the client to
/// wait: its "retry in N s" hint, [`RATE_LIMIT_FLOOR`] when the hint is under
/// [`RATE_LIMIT_SHORT_HINT_SECS`] or missing, at most [`RATE_LIMIT_CEILING`].
pub fn rate_limit_pause(message: &str) -> Duration {
    const HINT: &str = "retry in";
    // ASCII lowercasing keeps every byte where it was, so an index into it is one into `message`.
    let lower = message.to_ascii_lowercase();
    let hint = lower.find(HINT).and_then(|at| {
        let number: String = lower[at + HINT.len()..]
            .trim_start()
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        number.parse::<f64>().ok().filter(|secs| secs.is_finite())
    });
    match hint {
        Some(secs) if secs >= RATE_LIMIT_SHORT_HINT_SECS => {
            Duration::from_secs_f64(secs.min(RATE_LIMIT_CEILING.as_secs_f64()))
        }
        _ => RATE_LIMIT_FLOOR,
    }
}

/// One of the socket's subscriptions.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Subscription {
    /// `members`: the agent's membership changes.
    Members,
    /// `ch-<uuid>`: a channel's events.
    Channel(ChannelId),
}

impl Subscription {
    const MEMBERS: &str = "members";

    /// The subscription a relay's subscription id names, if it is one of ours.
    fn from_id(id: &str) -> Option<Self> {
        if id == Self::MEMBERS {
            return Some(Subscription::Members);
        }
        id.strip_prefix("ch-")
            .and_then(|c| ChannelId::parse(c).ok())
            .map(Subscription::Channel)
    }

    fn id(&self) -> String {
        match self {
            Subscription::Members => Self::MEMBERS.to_owned(),
            Subscription::Channel(channel) => format!("ch-{channel}"),
        }
    }
}

/// What the socket task hands the loop.
enum Inbound {
    /// A live event from a subscription.
    Live(nostr::Event),
    /// A channel's recent events, for the history only (oldest first).
    History(Vec<nostr::Event>),
    /// What a channel is.
    Channel(ChannelId, ChannelInfo),
}

/// A relay's event as the model's event (its signature is not kept: the harness checks none).
impl From<&nostr::Event> for Event {
    fn from(event: &nostr::Event) -> Event {
        Event {
            id: event.id.to_hex(),
            pubkey: event.pubkey.to_hex(),
            created_at: event.created_at.as_secs(),
            kind: u32::from(event.kind.as_u16()),
            tags: event.tags.iter().map(|t| t.as_slice().to_vec()).collect(),
            content: event.content.clone(),
        }
    }
}

/// A channel's info from its metadata event: `name`, and `t` = `dm` for a direct-message
/// channel (anything else is a stream).
fn channel_info(metadata: &nostr::Event) -> ChannelInfo {
    let value = |name: &str| {
        metadata
            .tags
            .iter()
            .map(|t| t.as_slice())
            .find(|t| t.first().map(String::as_str) == Some(name))
            .and_then(|t| t.get(1).cloned())
    };
    ChannelInfo {
        name: value("name").unwrap_or_default(),
        kind: if value("t").as_deref() == Some("dm") {
            ChannelKind::Dm
        } else {
            ChannelKind::Stream
        },
    }
}

fn tag_h() -> SingleLetterTag {
    SingleLetterTag::lowercase(Alphabet::H)
}

fn tag_d() -> SingleLetterTag {
    SingleLetterTag::lowercase(Alphabet::D)
}

/// The relay as the event loop sees it.
pub struct NostrRelay {
    identity: String,
    keys: Keys,
    inbound: mpsc::Receiver<Inbound>,
    publisher: mpsc::UnboundedSender<nostr::Event>,
    /// Ephemeral events (typing) for the socket to send.
    ephemeral: mpsc::Sender<nostr::Event>,
    socket_task: tokio::task::JoinHandle<()>,
    publisher_task: tokio::task::JoinHandle<()>,
    seq: u64,
    seen: HashSet<String>,
    seen_old: HashSet<String>,
    /// Every event delivered, fetched or published: history, lookups, answers.
    index: EventIndex,
    channels: HashMap<ChannelId, ChannelInfo>,
}

impl std::fmt::Debug for NostrRelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NostrRelay")
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

impl Drop for NostrRelay {
    fn drop(&mut self) {
        self.socket_task.abort();
        self.publisher_task.abort();
    }
}

impl NostrRelay {
    /// Connects to the relay at `url` as `agent`: finds the agent's channels (`POST /query`),
    /// then opens the socket (one try, then retries after 1, 2, 4, 8 and 16 s) and returns once
    /// it is authenticated and subscribed. Its REST requests carry the owner's attestation of
    /// the agent's key when `agent` has one.
    pub async fn connect(url: &str, agent: AgentKeys) -> Result<Self, RelayError> {
        let AgentKeys { keys, auth_tag } = agent;
        let relay_url = RelayUrl::parse(url).map_err(|e| RelayError::Network {
            what: format!("relay URL {url}"),
            reason: e.to_string(),
        })?;
        let rest = RestClient::new(url, keys.clone()).with_auth_tag(auth_tag);
        let (tx, rx) = mpsc::channel(EVENT_BUFFER);
        let (ephemeral, ephemeral_queue) = mpsc::channel(EPHEMERAL_BUFFER);
        let mut socket = Socket {
            url: relay_url,
            keys: keys.clone(),
            rest: rest.clone(),
            inbound: tx,
            channels: Vec::new(),
            since: Timestamp::now(),
            last_seen: None,
            quiet_until: None,
            parked: Vec::new(),
            backlog: VecDeque::new(),
            ephemeral: ephemeral_queue,
        };
        let mut attempt = 0;
        let stream = loop {
            match socket.open().await {
                Ok(stream) => break stream,
                // A refused AUTH, or REST refusing the agent's access, is final: the key is
                // not allowed there, and trying again would not change that.
                Err(e)
                    if attempt < 5
                        && !matches!(
                            e,
                            RelayError::AuthRefused { .. } | RelayError::AccessRefused { .. }
                        ) =>
                {
                    let delay = Duration::from_secs(1 << attempt);
                    tracing::warn!(error = %e, retry_in_s = delay.as_secs(), "cannot reach the relay; trying again");
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        };
        tracing::info!(relay = %url, channels = socket.channels.len(), "connected, authenticated and subscribed");
        let socket_task = tokio::spawn(socket.serve(stream));
        let (publisher, mut queue) = mpsc::unbounded_channel::<nostr::Event>();
        let publisher_task = tokio::spawn(async move {
            while let Some(event) = queue.recv().await {
                match rest.publish(&event).await {
                    Ok(published)
                        if published.accepted || published.message.starts_with("duplicate") => {}
                    Ok(published) => {
                        tracing::error!(event_id = %event.id, message = %published.message, "the relay refused a reply")
                    }
                    Err(e) => {
                        tracing::error!(event_id = %event.id, error = %e, "a reply could not be published")
                    }
                }
            }
        });
        Ok(NostrRelay {
            identity: url.trim_end_matches('/').to_owned(),
            keys,
            inbound: rx,
            publisher,
            ephemeral,
            socket_task,
            publisher_task,
            seq: 0,
            seen: HashSet::new(),
            seen_old: HashSet::new(),
            index: EventIndex::default(),
            channels: HashMap::new(),
        })
    }

    /// `event`, built by the harness as the agent, signed with the agent's key (the same id).
    fn sign(&self, event: &Event) -> Result<nostr::Event, RelayError> {
        let tags = event
            .tags
            .iter()
            .map(|t| nostr::Tag::parse(t.clone()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| RelayError::Network {
                what: format!("the tags of {}", event.id),
                reason: e.to_string(),
            })?;
        let signed = nostr::EventBuilder::new(Kind::Custom(event.kind as u16), &event.content)
            .tags(tags)
            .custom_created_at(Timestamp::from(event.created_at))
            .sign_with_keys(&self.keys)
            .map_err(|e| RelayError::Network {
                what: format!("signing {}", event.id),
                reason: e.to_string(),
            })?;
        if signed.id.to_hex() != event.id {
            return Err(RelayError::Network {
                what: format!("event {}", event.id),
                reason: format!(
                    "signed as {}: the harness built it for another key",
                    signed.id
                ),
            });
        }
        Ok(signed)
    }

    fn remember(&mut self, event: Event) {
        self.index.insert(event);
    }

    /// Where `event` sits in its thread: the latest `created_at` along its reply chain (its
    /// `reply` marker, that message's, …) and how many known messages stand above it, following
    /// at most [`MAX_REPLY_DEPTH`] of them. A reply never sorts before what it answers, even when
    /// it is dated earlier (the harness dates its own replies a second after their trigger, so a
    /// person's answer to them in that second would otherwise come first).
    fn thread_position(&self, event: &Event) -> (u64, usize) {
        let mut latest = event.created_at;
        let mut depth = 0;
        let mut parent = event
            .thread_refs()
            .reply
            .or_else(|| event.thread_refs().root);
        while let Some(id) = parent {
            let Some(known) = self.index.find(&id) else {
                break;
            };
            latest = latest.max(known.created_at);
            depth += 1;
            if depth >= MAX_REPLY_DEPTH {
                break;
            }
            let refs = known.thread_refs();
            parent = refs.reply.or(refs.root).filter(|p| *p != id);
        }
        (latest, depth)
    }

    /// Whether `id` was delivered before (two bounded generations, as upstream).
    fn first_delivery(&mut self, id: &str) -> bool {
        if self.seen.contains(id) || self.seen_old.contains(id) {
            return false;
        }
        if self.seen.len() >= DEDUP_GENERATION {
            self.seen_old = std::mem::take(&mut self.seen);
        }
        self.seen.insert(id.to_owned());
        true
    }
}

impl Relay for NostrRelay {
    fn resume_from(&mut self, _position: Option<LogPosition>) {
        // Upstream keeps no position: the subscription starts at the harness's start.
    }

    async fn poll(&mut self) -> Result<Poll, RelayError> {
        let mut lines = Vec::new();
        while let Ok(inbound) = self.inbound.try_recv() {
            match inbound {
                Inbound::History(events) => {
                    for event in events {
                        self.remember(Event::from(&event));
                    }
                }
                Inbound::Channel(channel, info) => {
                    self.channels.insert(channel, info);
                }
                Inbound::Live(event) => {
                    let model = Event::from(&event);
                    let replayed = !self.first_delivery(&model.id);
                    self.remember(model.clone());
                    lines.push(Incoming {
                        offset: self.seq,
                        end: self.seq + 1,
                        event: Ok(model),
                        replayed,
                        before_resume: false,
                    });
                    self.seq += 1;
                }
            }
        }
        Ok(Poll { lines, reset: None })
    }

    fn position(&self) -> Option<LogPosition> {
        None
    }

    async fn publish(&mut self, event: &Event) -> Result<(), RelayError> {
        let signed = self.sign(event)?;
        self.remember(event.clone());
        self.first_delivery(&event.id);
        self.publisher
            .send(signed)
            .map_err(|_| RelayError::Network {
                what: "the reply publisher".into(),
                reason: "stopped".into(),
            })
    }

    fn history(&self, channel: &ChannelId) -> Vec<&Event> {
        let mut events = self.index.channel(channel);
        // By time, but a reply after what it answers: `created_at` has a resolution of one
        // second (messages of one second tie) and need not grow along a thread. Then the order
        // the events were added decides.
        events.sort_by_cached_key(|e| self.thread_position(e));
        events
    }

    fn find(&self, id: &str) -> Option<&Event> {
        self.index.find(id)
    }

    fn reply_by(&self, author: &str, trigger_id: &str) -> Option<&Event> {
        self.index.reply_by(author, trigger_id)
    }

    fn channel_info(&self, channel: &ChannelId) -> ChannelInfo {
        self.channels
            .get(channel)
            .cloned()
            .unwrap_or_else(ChannelInfo::unresolved)
    }

    fn identity(&self) -> &str {
        &self.identity
    }

    fn typing(&mut self, typing: &Typing) {
        // §10's shape: the channel's `h` tag; the root marked `root` when it is not the event
        // being answered, which is marked `reply`.
        let mut indicator = EventBuilder::new(
            u32::from(KIND_TYPING),
            &self.keys.public_key().to_hex(),
            &typing.channel,
            "",
        )
        .created_at(Timestamp::now().as_secs());
        if typing.root != typing.parent {
            indicator = indicator.tag(&["e", &typing.root, "", "root"]);
        }
        let indicator = indicator.tag(&["e", &typing.parent, "", "reply"]).build();
        match self.sign(&indicator) {
            Ok(event) => {
                if self.ephemeral.try_send(event).is_err() {
                    tracing::debug!(channel = %typing.channel, "typing indicator dropped: the socket is behind or gone");
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot build a typing indicator"),
        }
    }
}

type Stream =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// The socket's side: connection, AUTH, subscriptions, reconnects.
struct Socket {
    url: RelayUrl,
    keys: Keys,
    rest: RestClient,
    inbound: mpsc::Sender<Inbound>,
    channels: Vec<ChannelId>,
    /// Where the next subscription starts.
    since: Timestamp,
    /// The newest `created_at` delivered.
    last_seen: Option<Timestamp>,
    /// Until when the relay asked for quiet (`NOTICE rate-limited: …`): every `REQ` until then
    /// is held. It belongs to the connection: a new one starts without.
    quiet_until: Option<Instant>,
    /// Subscriptions waiting to be requested again, each with the moment it may be: parked by a
    /// `CLOSED rate-limited: …`, or held by the quiet. A new connection requests them all anyway.
    parked: Vec<(Subscription, Instant)>,
    /// Frames read while an `AUTH` on the live connection waited for its `OK`, handled next.
    backlog: VecDeque<String>,
    /// Ephemeral events the harness says (typing), sent as they come on a live connection.
    ephemeral: mpsc::Receiver<nostr::Event>,
}

impl Socket {
    /// Connects, authenticates, finds the channels and subscribes.
    async fn open(&mut self) -> Result<Stream, RelayError> {
        let network = |what: &str, reason: String| RelayError::Network {
            what: what.to_owned(),
            reason,
        };
        // `wss://` goes through rustls with the system's CAs (crate::tls); `ws://` stays plain.
        let tls = if self.url.as_str().starts_with("wss://") {
            let config = crate::tls::client_config()
                .map_err(|e| network("connecting to the relay", e.to_string()))?;
            Some(tokio_tungstenite::Connector::Rustls(config))
        } else {
            None
        };
        // Rate limits and parked subscriptions belong to the connection that was told of them:
        // a new one requests every subscription at once.
        self.quiet_until = None;
        self.parked.clear();
        self.backlog.clear();
        let limits = WebSocketConfig::default()
            .max_frame_size(Some(MAX_FRAME_BYTES))
            .max_message_size(Some(MAX_MESSAGE_BYTES));
        let (mut stream, _) = tokio::time::timeout(
            CONNECT_TIMEOUT,
            tokio_tungstenite::connect_async_tls_with_config(
                self.url.as_str(),
                Some(limits),
                false,
                tls,
            ),
        )
        .await
        .map_err(|_| {
            network(
                "connecting to the relay",
                format!("no connection in {} s", CONNECT_TIMEOUT.as_secs()),
            )
        })?
        .map_err(|e| network("connecting to the relay", e.to_string()))?;
        // NIP-42: the relay challenges first; frames before the challenge are held back.
        let mut held = VecDeque::new();
        let challenge = tokio::time::timeout(CHALLENGE_TIMEOUT, async {
            while let Some(frame) = stream.next().await {
                match frame.map_err(|e| network("reading from the relay", e.to_string()))? {
                    Message::Text(text) => match RelayMessage::from_json(text.as_str()) {
                        Ok(RelayMessage::Auth { challenge }) => return Ok(challenge.into_owned()),
                        Ok(other) => held.push_back(other.as_json()),
                        Err(e) => unreadable(text.as_str(), &e),
                    },
                    Message::Close(_) => break,
                    _ => {}
                }
            }
            Err(network(
                "authenticating",
                "the relay closed the connection before its AUTH challenge".into(),
            ))
        })
        .await
        .map_err(|_| {
            network(
                "authenticating",
                format!("no AUTH challenge in {} s", CHALLENGE_TIMEOUT.as_secs()),
            )
        })??;
        held.extend(self.authenticate(&mut stream, &challenge).await?);
        self.discover().await?;
        self.subscribe(&mut stream).await?;
        for text in held {
            self.handle(&mut stream, &text).await?;
        }
        Ok(stream)
    }

    /// Answers `challenge` and waits for the relay's `OK`; the other frames read meanwhile, to
    /// be handled after it (a `NOTICE` or an event is not lost to the wait).
    async fn authenticate(
        &self,
        stream: &mut Stream,
        challenge: &str,
    ) -> Result<Vec<String>, RelayError> {
        let network = |reason: String| RelayError::Network {
            what: "authenticating".into(),
            reason,
        };
        let auth = nostr::EventBuilder::auth(challenge, self.url.clone())
            .sign_with_keys(&self.keys)
            .map_err(|e| network(e.to_string()))?;
        let id = auth.id;
        stream
            .send(Message::text(ClientMessage::auth(auth).as_json()))
            .await
            .map_err(|e| network(e.to_string()))?;
        let mut meanwhile = Vec::new();
        loop {
            let frame = tokio::time::timeout(CHALLENGE_TIMEOUT, stream.next())
                .await
                .map_err(|_| network("no answer to AUTH in time".into()))?;
            let Some(frame) = frame else {
                return Err(network("the relay closed the connection".into()));
            };
            let Message::Text(text) = frame.map_err(|e| network(e.to_string()))? else {
                continue;
            };
            match RelayMessage::from_json(text.as_str()) {
                Ok(RelayMessage::Ok {
                    event_id,
                    status,
                    message,
                }) if event_id == id => {
                    return if status {
                        Ok(meanwhile)
                    } else {
                        Err(RelayError::AuthRefused {
                            message: message.into_owned(),
                        })
                    };
                }
                Ok(_) => meanwhile.push(text.as_str().to_owned()),
                Err(e) => unreadable(text.as_str(), &e),
            }
        }
    }

    /// The agent's channels (kind 39002 naming it) and what each is (kind 39000), with each
    /// new channel's recent history.
    async fn discover(&mut self) -> Result<(), RelayError> {
        let rest_error = |e: crate::rest::RestError| match e {
            crate::rest::RestError::Status {
                status: status @ (401 | 403),
                message,
                ..
            } => RelayError::AccessRefused {
                what: "finding the agent's channels".into(),
                status,
                message,
            },
            e => RelayError::Network {
                what: "finding the agent's channels".into(),
                reason: e.to_string(),
            },
        };
        let members = self
            .rest
            .query(&[Filter::new()
                .kind(Kind::Custom(KIND_GROUP_MEMBERS))
                .pubkey(self.keys.public_key())])
            .await
            .map_err(rest_error)?;
        let mut found: Vec<ChannelId> = members
            .iter()
            .flat_map(|e| e.tags.iter().map(|t| t.as_slice().to_vec()))
            .filter(|t| t.first().map(String::as_str) == Some("d"))
            .filter_map(|t| t.get(1).and_then(|d| ChannelId::parse(d).ok()))
            .collect();
        found.sort();
        found.dedup();
        for channel in found {
            if !self.channels.contains(&channel) {
                self.add_channel(channel).await?;
            }
        }
        Ok(())
    }

    async fn add_channel(&mut self, channel: ChannelId) -> Result<(), RelayError> {
        let rest_error = |e: crate::rest::RestError| RelayError::Network {
            what: format!("reading channel {channel}"),
            reason: e.to_string(),
        };
        let metadata = self
            .rest
            .query(&[Filter::new()
                .kind(Kind::Custom(KIND_GROUP_METADATA))
                .custom_tag(tag_d(), channel.as_str())
                .limit(1)])
            .await
            .map_err(rest_error)?;
        if let Some(meta) = metadata.first() {
            self.forward(Inbound::Channel(channel.clone(), channel_info(meta)))
                .await;
        }
        let mut history = self
            .rest
            .query(&[Filter::new()
                .custom_tag(tag_h(), channel.as_str())
                .limit(HISTORY_FETCH)])
            .await
            .map_err(rest_error)?;
        history.reverse();
        self.forward(Inbound::History(history)).await;
        self.channels.push(channel);
        Ok(())
    }

    async fn forward(&self, inbound: Inbound) {
        // A closed receiver means the harness is gone; the task ends with the next read.
        let _ = self.inbound.send(inbound).await;
    }

    /// Requests the membership subscription and every channel's.
    async fn subscribe(&mut self, stream: &mut Stream) -> Result<(), RelayError> {
        let mut all = vec![Subscription::Members];
        all.extend(self.channels.iter().cloned().map(Subscription::Channel));
        for subscription in all {
            self.request(stream, subscription).await?;
        }
        Ok(())
    }

    /// The `REQ` for `subscription`, from [`Socket::since`].
    fn request_message(&self, subscription: &Subscription) -> ClientMessage<'static> {
        let filter = match subscription {
            Subscription::Members => Filter::new()
                .kinds([
                    Kind::Custom(KIND_ADD_MEMBER),
                    Kind::Custom(crate::relay::KIND_REMOVE_MEMBER as u16),
                ])
                .pubkey(self.keys.public_key()),
            Subscription::Channel(channel) => Filter::new().custom_tag(tag_h(), channel.as_str()),
        };
        ClientMessage::req(
            SubscriptionId::new(subscription.id()),
            vec![filter.since(self.since)],
        )
    }

    /// Requests `subscription` now, or, while the relay has asked for quiet, parks it until
    /// the quiet ends.
    async fn request(
        &mut self,
        stream: &mut Stream,
        subscription: Subscription,
    ) -> Result<(), RelayError> {
        if let Some(until) = self.quiet_until.filter(|until| *until > Instant::now()) {
            tracing::info!(
                subscription = %subscription.id(),
                wait_s = until.saturating_duration_since(Instant::now()).as_secs_f64(),
                "holding a subscription until the relay's rate limit is over"
            );
            self.park(subscription, until);
            return Ok(());
        }
        stream
            .send(Message::text(self.request_message(&subscription).as_json()))
            .await
            .map_err(|e| RelayError::Network {
                what: "subscribing".into(),
                reason: e.to_string(),
            })
    }

    /// Holds `subscription` back until `until` (the later moment, if it is held already).
    fn park(&mut self, subscription: Subscription, until: Instant) {
        match self.parked.iter_mut().find(|(s, _)| *s == subscription) {
            Some((_, at)) => *at = (*at).max(until),
            None => self.parked.push((subscription, until)),
        }
    }

    /// When the next parked subscription may be requested again (never before the quiet ends).
    fn next_release(&self) -> Option<Instant> {
        let earliest = self.parked.iter().map(|(_, at)| *at).min()?;
        Some(
            self.quiet_until
                .map_or(earliest, |quiet| quiet.max(earliest)),
        )
    }

    /// Requests again every parked subscription whose wait is over; a channel dropped since
    /// it was parked is not.
    async fn release_parked(&mut self, stream: &mut Stream) -> Result<(), RelayError> {
        let now = Instant::now();
        if self.quiet_until.is_some_and(|quiet| quiet > now) {
            return Ok(());
        }
        let (due, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.parked)
            .into_iter()
            .partition(|(_, at)| *at <= now);
        self.parked = waiting;
        for (subscription, _) in due {
            if let Subscription::Channel(channel) = &subscription
                && !self.channels.contains(channel)
            {
                continue;
            }
            tracing::info!(subscription = %subscription.id(), "the relay's rate limit is over; subscribing again");
            self.request(stream, subscription).await?;
        }
        Ok(())
    }

    /// One relay message on a live connection.
    async fn handle(&mut self, stream: &mut Stream, text: &str) -> Result<(), RelayError> {
        let message = match RelayMessage::from_json(text) {
            Ok(message) => message,
            Err(e) => {
                unreadable(text, &e);
                return Ok(());
            }
        };
        match message {
            RelayMessage::Event { event, .. } => {
                let event = event.into_owned();
                // Typing indicators and presence (the agent's own come back too) are for
                // people's clients; the harness reads none, and they are not kept, so they say
                // nothing about where a resubscription should start.
                if event.kind.is_ephemeral() {
                    return Ok(());
                }
                self.last_seen = Some(
                    self.last_seen
                        .map_or(event.created_at, |s| s.max(event.created_at)),
                );
                if event.kind.as_u16() == KIND_ADD_MEMBER
                    && event
                        .tags
                        .public_keys()
                        .any(|p| *p == self.keys.public_key())
                {
                    if let Some(channel) = event
                        .tags
                        .iter()
                        .find(|t| t.as_slice().first().map(String::as_str) == Some("h"))
                        .and_then(|t| t.as_slice().get(1))
                        .and_then(|h| ChannelId::parse(h).ok())
                        && !self.channels.contains(&channel)
                    {
                        self.add_channel(channel.clone()).await?;
                        self.request(stream, Subscription::Channel(channel)).await?;
                    }
                    return Ok(());
                }
                if self.inbound.try_send(Inbound::Live(event)).is_err() {
                    tracing::warn!(
                        "the event buffer is full; dropping the event and resubscribing"
                    );
                    return Err(RelayError::Network {
                        what: "the event buffer".into(),
                        reason: "full".into(),
                    });
                }
            }
            RelayMessage::Auth { challenge } => {
                let meanwhile = self.authenticate(stream, &challenge).await?;
                self.backlog.extend(meanwhile);
            }
            RelayMessage::Closed {
                subscription_id,
                message,
            } => {
                let subscription = Subscription::from_id(subscription_id.as_str());
                if CLOSED_FOR_GOOD.contains(&message.as_ref()) {
                    tracing::warn!(subscription = %subscription_id, reason = %message, "the relay closed a channel's subscription for good; the channel is dropped");
                    if let Some(Subscription::Channel(channel)) = subscription {
                        self.channels.retain(|c| *c != channel);
                        self.parked
                            .retain(|(s, _)| *s != Subscription::Channel(channel.clone()));
                    }
                } else if message.starts_with("rate-limited:") {
                    let pause = rate_limit_pause(&message);
                    tracing::warn!(subscription = %subscription_id, reason = %message, retry_in_s = pause.as_secs_f64(), "the relay rate-limited a subscription; parked until then");
                    if let Some(subscription) = subscription {
                        self.park(subscription, Instant::now() + pause);
                    }
                } else if message.contains("auth") {
                    return Err(RelayError::Network {
                        what: "the subscription".into(),
                        reason: format!("closed: {message}"),
                    });
                } else if let Some(subscription) = subscription {
                    tracing::warn!(subscription = %subscription_id, reason = %message, "the relay closed a subscription; subscribing again");
                    self.request(stream, subscription).await?;
                } else {
                    tracing::warn!(subscription = %subscription_id, reason = %message, "the relay closed a subscription that is not the agent's; ignored");
                }
            }
            RelayMessage::Notice(message) if message.starts_with("rate-limited:") => {
                let pause = rate_limit_pause(&message);
                let until = Instant::now() + pause;
                self.quiet_until = Some(self.quiet_until.map_or(until, |quiet| quiet.max(until)));
                tracing::warn!(notice = %message, quiet_s = pause.as_secs_f64(), "the relay asks the client to slow down; holding subscriptions until then");
            }
            RelayMessage::Notice(message) => tracing::warn!(notice = %message, "the relay says"),
            RelayMessage::Ok {
                status: false,
                message,
                ..
            } if message.starts_with("auth") => {
                return Err(RelayError::Network {
                    what: "the connection".into(),
                    reason: format!("refused: {message}"),
                });
            }
            _ => {}
        }
        Ok(())
    }

    /// The agent's presence update: kind 20001, content `online`, no tags.
    fn presence(&self) -> Result<nostr::Event, String> {
        nostr::EventBuilder::new(Kind::Custom(KIND_PRESENCE), "online")
            .sign_with_keys(&self.keys)
            .map_err(|e| e.to_string())
    }

    /// Serves a live connection until it drops, then reconnects, for as long as the harness runs.
    async fn serve(mut self, mut stream: Stream) {
        let mut attempt = 0u32;
        loop {
            let dropped = self.read(&mut stream).await;
            if self.inbound.is_closed() {
                return;
            }
            let now = Timestamp::now();
            let from = self.last_seen.map_or(now, |seen| seen.min(now));
            self.since = Timestamp::from(from.as_secs().saturating_sub(SINCE_SKEW_SECS));
            tracing::warn!(reason = %dropped, "the relay connection dropped; reconnecting");
            loop {
                let delay = reconnect_delay(attempt);
                tokio::time::sleep(delay).await;
                match self.open().await {
                    Ok(fresh) => {
                        stream = fresh;
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, retry_in_s = reconnect_delay(attempt + 1).as_secs(), "cannot reach the relay");
                        attempt = attempt.saturating_add(1);
                    }
                }
            }
            tracing::info!("reconnected to the relay");
        }
    }

    /// Reads a connection until it fails; why it ended.
    async fn read(&mut self, stream: &mut Stream) -> String {
        let mut ping = tokio::time::interval(PING_INTERVAL);
        ping.tick().await;
        // Its first tick is at once: each connection starts by saying the agent is online.
        let mut presence = tokio::time::interval(PRESENCE_INTERVAL);
        let mut awaiting_pong: Option<tokio::time::Instant> = None;
        loop {
            while let Some(text) = self.backlog.pop_front() {
                if let Err(e) = self.handle(stream, &text).await {
                    return e.to_string();
                }
            }
            let release = self.next_release();
            let pong_deadline = async {
                match awaiting_pong {
                    Some(at) => tokio::time::sleep_until(at + PONG_TIMEOUT).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                frame = stream.next() => match frame {
                    Some(Ok(Message::Text(text))) => {
                        if let Err(e) = self.handle(stream, text.as_str()).await {
                            return e.to_string();
                        }
                    }
                    Some(Ok(Message::Pong(_))) => awaiting_pong = None,
                    Some(Ok(Message::Close(frame))) => return format!("the relay closed the connection ({frame:?})"),
                    Some(Ok(Message::Binary(bytes))) => {
                        tracing::warn!(bytes = bytes.len(), "a binary frame from the relay (Nostr speaks text); skipped");
                    }
                    Some(Ok(_)) => {}
                    Some(Err(tokio_tungstenite::tungstenite::Error::Capacity(e))) => {
                        tracing::warn!(error = %e, max_frame_bytes = MAX_FRAME_BYTES, max_message_bytes = MAX_MESSAGE_BYTES, "the relay sent a frame over the websocket limits; the connection is treated as broken");
                        return format!("a frame over the limits: {e}");
                    }
                    Some(Err(e)) => return e.to_string(),
                    None => return "the connection ended".into(),
                },
                _ = ping.tick() => {
                    if stream.send(Message::Ping(Vec::new().into())).await.is_err() {
                        return "a ping could not be sent".into();
                    }
                    awaiting_pong.get_or_insert_with(tokio::time::Instant::now);
                }
                _ = presence.tick() => {
                    match self.presence() {
                        Ok(event) => {
                            if let Err(e) = send_event(stream, event).await {
                                return e;
                            }
                        }
                        Err(e) => tracing::warn!(error = %e, "cannot build a presence update"),
                    }
                }
                Some(event) = self.ephemeral.recv() => {
                    if let Err(e) = send_event(stream, event).await {
                        return e;
                    }
                }
                _ = pong_deadline => return format!("no pong in {} s", PONG_TIMEOUT.as_secs()),
                () = sleep_until(release) => {
                    if let Err(e) = self.release_parked(stream).await {
                        return e.to_string();
                    }
                }
            }
        }
    }
}

/// Sends `event` on the socket (`["EVENT", …]`) within [`SEND_TIMEOUT`]; why the connection is
/// broken when it cannot. The relay's `OK` comes back like any frame and needs nothing more: an
/// ephemeral event is not kept, so a refusal loses nothing to retry.
async fn send_event(stream: &mut Stream, event: nostr::Event) -> Result<(), String> {
    let kind = event.kind.as_u16();
    let frame = Message::Text(ClientMessage::event(event).as_json().into());
    match tokio::time::timeout(SEND_TIMEOUT, stream.send(frame)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(format!("an event of kind {kind} could not be sent: {e}")),
        Err(_) => Err(format!(
            "an event of kind {kind} was not sent in {} s",
            SEND_TIMEOUT.as_secs()
        )),
    }
}

/// Sleeps until `deadline`, or forever without one.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Logs a frame that is not a relay message (its start only: a frame can be megabytes) and
/// skips it; the connection carries on.
fn unreadable(text: &str, error: &dyn std::fmt::Display) {
    let start: String = text.chars().take(120).collect();
    tracing::warn!(%error, bytes = text.len(), frame = %start, "a frame from the relay is not a relay message; skipped");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_limit_waits_as_its_hint_says_within_the_floor_and_the_ceiling() {
        let secs = |message: &str| rate_limit_pause(message).as_secs_f64();
        assert_eq!(secs("rate-limited: slow down; retry in 30 s"), 30.0);
        assert_eq!(secs("rate-limited: quota exceeded; retry in 3s"), 3.0);
        assert_eq!(secs("rate-limited: Retry in 2.5 seconds"), 2.5);
        // Under 2 s, or no hint, or one that is no number: the floor.
        assert_eq!(secs("rate-limited: retry in 1 s"), 5.0);
        assert_eq!(secs("rate-limited: retry in 0s"), 5.0);
        assert_eq!(secs("rate-limited: slow down"), 5.0);
        assert_eq!(secs("rate-limited: retry in a while"), 5.0);
        // A hint past the ceiling, however large, is the ceiling.
        assert_eq!(secs("rate-limited: retry in 3600 s"), 60.0);
        assert_eq!(
            secs(&format!("rate-limited: retry in {}0 s", u64::MAX)),
            60.0
        );
    }

    #[test]
    fn subscription_ids_are_ours_or_not() {
        let channel = ChannelId::parse("0b8e2d4c-1f3a-4c5e-9d7b-2a6f8e1c3b5d").expect("uuid");
        for subscription in [Subscription::Members, Subscription::Channel(channel)] {
            assert_eq!(
                Subscription::from_id(&subscription.id()),
                Some(subscription)
            );
        }
        assert_eq!(Subscription::from_id("ch-not-a-uuid"), None);
        assert_eq!(Subscription::from_id("someone-elses"), None);
    }
}
