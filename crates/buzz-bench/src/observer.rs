//! A websocket subscribed to the agent's replies, as a person's client would be: NIP-42
//! authenticated, a `REQ` for the agent's chat events (kind 9) from now on. The benchmarks time
//! an answer from the moment it reaches this socket, the whole path a user sees.

use std::time::Duration;

use futures::{SinkExt as _, StreamExt as _};
use nostr::{
    ClientMessage, EventBuilder, Filter, JsonUtil as _, Keys, Kind, RelayMessage, RelayUrl,
    SubscriptionId, Timestamp,
};
use tokio_tungstenite::tungstenite::Message;

use buzz_test_relay::{RelayConfig, TestRelay};

use crate::{BenchError, ctx};

/// How long the observer waits for the relay's next message.
const WAIT: Duration = Duration::from_secs(30);

/// The observer's websocket.
pub type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Connects to the relay at `ws_url` as `reader`, answers its AUTH challenge, subscribes to
/// `agent`'s chat events from now on and returns once the relay has sent what it stored (`EOSE`).
pub async fn subscribe_to_agent(
    ws_url: &str,
    reader: &Keys,
    agent: &Keys,
) -> Result<Socket, BenchError> {
    let (mut socket, _) = ctx(
        tokio_tungstenite::connect_async(ws_url).await,
        "observer: connecting",
    )?;
    let challenge = loop {
        if let RelayMessage::Auth { challenge } = next_message(&mut socket).await? {
            break challenge.into_owned();
        }
    };
    let url = ctx(RelayUrl::parse(ws_url), "observer: relay url")?;
    let auth = ctx(
        EventBuilder::auth(challenge, url).sign_with_keys(reader),
        "observer: signing AUTH",
    )?;
    send(&mut socket, ClientMessage::auth(auth)).await?;
    let filter = Filter::new()
        .author(agent.public_key())
        .kind(Kind::Custom(9))
        .since(Timestamp::now());
    send(
        &mut socket,
        ClientMessage::req(SubscriptionId::new("answers"), vec![filter]),
    )
    .await?;
    loop {
        if let RelayMessage::EndOfStoredEvents(_) = next_message(&mut socket).await? {
            return Ok(socket);
        }
    }
}

/// Sends one client message.
pub async fn send(socket: &mut Socket, message: ClientMessage<'_>) -> Result<(), BenchError> {
    ctx(
        socket.send(Message::text(message.as_json())).await,
        "observer: sending",
    )
}

/// The relay's next message (other frames are skipped), waiting at most 30 s.
pub async fn next_message(socket: &mut Socket) -> Result<RelayMessage<'static>, BenchError> {
    loop {
        let frame = ctx(
            tokio::time::timeout(WAIT, socket.next()).await,
            "observer: waiting for the relay",
        )?;
        match frame {
            Some(Ok(Message::Text(text))) => {
                return ctx(RelayMessage::from_json(text.as_str()), "observer: reading");
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(BenchError(format!("observer: {e}"))),
            None => return Err(BenchError("observer: the relay closed the socket".into())),
        }
    }
}

/// A fresh test relay where a new agent belongs to `channel` (a stream), with the agent's keys and
/// an owner's.
pub async fn relay_with_agent(channel: &str) -> Result<(TestRelay, Keys, Keys), BenchError> {
    let relay = ctx(
        TestRelay::start(RelayConfig::default()).await,
        "starting the relay",
    )?;
    let (agent, owner) = (Keys::generate(), Keys::generate());
    ctx(
        relay
            .add_channel(channel, "general", "stream", &[agent.public_key()])
            .await,
        "seeding the channel",
    )?;
    Ok((relay, agent, owner))
}

/// The owner's mention of the agent in `channel`, posted through the relay's REST side as a
/// person's client posts it; `thread` = (root, parent).
pub async fn post_mention(
    relay: &TestRelay,
    owner: &Keys,
    agent: &Keys,
    channel: &str,
    text: &str,
    thread: Option<(&str, &str)>,
) -> Result<nostr::Event, BenchError> {
    let message = buzz_acp::testing::ChatMessage {
        channel,
        mention: Some(agent.public_key()),
        text,
        thread,
        at: Timestamp::now(),
    };
    ctx(
        buzz_acp::testing::post_chat(&relay.ws_url(), owner, message).await,
        "posting a mention",
    )
}

/// The command that runs `harness` on `relay` as `agent` (its secret key), answering `owner`,
/// with the test agent `agent_bin` and the files of `s` (the host-wide lease of
/// `one-harness-per-agent` in the scenario too); stdout discarded, stderr into a new file at
/// `log`. The caller adds its environment and spawns it.
pub fn harness_on_relay(
    s: &buzz_acp::testing::Scenario,
    harness: &std::path::Path,
    agent_bin: &std::path::Path,
    relay: &TestRelay,
    agent: &Keys,
    owner: &Keys,
    log: &std::path::Path,
) -> Result<std::process::Command, BenchError> {
    let file = ctx(std::fs::File::create(log), "creating the harness log")?;
    let (url, secret, owner) = (
        relay.ws_url(),
        agent.secret_key().to_secret_hex(),
        owner.public_key().to_hex(),
    );
    let relay_args = buzz_acp::testing::NostrRelayArgs {
        url: &url,
        secret_key_hex: &secret,
        owner_hex: &owner,
    };
    let mut cmd =
        s.nostr_harness_command(harness, &s.agent_command(agent_bin, &[]), relay_args, &[]);
    cmd.env("BUZZ_ACP_LEASE_DIR", s.root.join("leases"))
        .stdout(std::process::Stdio::null())
        .stderr(file);
    Ok(cmd)
}
