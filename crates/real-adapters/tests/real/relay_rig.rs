//! The tier over a real Nostr relay: the fork's test relay runs in the test's process, the
//! harness connects to it as the agent (`--relay-url`, its key in `BUZZ_PRIVATE_KEY`), and the
//! owner and other people post signed events through the relay's REST side, as a Buzz client
//! does. The agent, the fake LLM and the readings (the observer log, what the model received)
//! are the [`Rig`]'s.
//!
//! Like upstream's, the harness's subscription starts when it starts: [`Rig::live_on_relay`]
//! returns once the harness says it is subscribed, and messages for it are posted after that.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use buzz_acp::relay::Event;
use buzz_acp::testing::{ChatMessage, NostrRelayArgs, agent_messages, post_chat, wait_until};
use buzz_test_relay::{RelayConfig, TestRelay};
use fake_llm::Observation;
use nostr::{Keys, Timestamp};

use crate::rig::{Result, Rig, fail};

const CHANNEL: &str = "0b8e2d4c-1f3a-4c5e-9d7b-2a6f8e1c3b5d";
const SUBSCRIBED: &str = "connected, authenticated and subscribed";
/// How long a harness may take to connect and subscribe.
const CONNECT: Duration = Duration::from_secs(30);

/// The relay, the agent's and the people's keys.
pub struct RelaySide {
    pub relay: TestRelay,
    pub agent: Keys,
    pub owner: Keys,
    /// Someone in the channel who is not the owner (their messages are context only).
    pub someone: Keys,
    runtime: tokio::runtime::Runtime,
}

impl RelaySide {
    /// A relay where the agent belongs to one stream channel.
    pub fn start() -> Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| fail(format!("a runtime for the relay: {e}")))?;
        let relay = runtime
            .block_on(TestRelay::start(RelayConfig::default()))
            .map_err(|e| fail(e.to_string()))?;
        let agent = Keys::generate();
        runtime
            .block_on(relay.add_channel(CHANNEL, "general", "stream", &[agent.public_key()]))
            .map_err(|e| fail(e.to_string()))?;
        Ok(RelaySide {
            relay,
            agent,
            owner: Keys::generate(),
            someone: Keys::generate(),
            runtime,
        })
    }

    /// `author` says `text` in the channel, mentioning the agent; `thread` = (root, parent).
    pub fn say(
        &self,
        author: &Keys,
        text: &str,
        thread: Option<(&Event, &Event)>,
    ) -> Result<Event> {
        let message = ChatMessage {
            channel: CHANNEL,
            mention: Some(self.agent.public_key()),
            text,
            thread: thread.map(|(root, parent)| (root.id.as_str(), parent.id.as_str())),
            at: Timestamp::now(),
        };
        let event = self
            .runtime
            .block_on(post_chat(&self.relay.ws_url(), author, message))
            .map_err(|e| fail(e.to_string()))?;
        Ok(Event::from(&event))
    }

    /// Every chat event the agent published, ids and signatures checked.
    pub fn agent_events(&self) -> Result<Vec<Event>> {
        self.runtime
            .block_on(agent_messages(
                &self.relay.ws_url(),
                &self.owner,
                self.agent.public_key(),
            ))
            .map_err(|e| fail(e.to_string()))
    }
}

/// A harness running on the relay: stopped with SIGTERM by [`LiveHarness::stop`], killed when
/// dropped.
pub struct LiveHarness {
    child: Child,
}

impl LiveHarness {
    /// Asks the harness to stop and waits for it.
    pub fn stop(mut self) -> Result<()> {
        let term = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        if !term.is_ok_and(|s| s.success()) {
            let _ = self.child.kill();
        }
        self.child
            .wait()
            .map(|_| ())
            .map_err(|e| fail(format!("waiting for the harness: {e}")))
    }
}

impl Drop for LiveHarness {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Rig {
    /// Starts `harness` on the relay as the agent and waits until it is subscribed.
    pub fn live_on_relay(
        &self,
        side: &RelaySide,
        harness: &Path,
        extra: &[&str],
    ) -> Result<LiveHarness> {
        static STARTS: AtomicUsize = AtomicUsize::new(0);
        let n = STARTS.fetch_add(1, Ordering::Relaxed);
        let log_path = self.s.root.join(format!("harness-relay-{n}.log"));
        let log = std::fs::File::create(&log_path).map_err(|e| fail(e.to_string()))?;
        let (url, secret, owner) = (
            side.relay.ws_url(),
            side.agent.secret_key().to_secret_hex(),
            side.owner.public_key().to_hex(),
        );
        let relay = NostrRelayArgs {
            url: &url,
            secret_key_hex: &secret,
            owner_hex: &owner,
        };
        let mut cmd = self
            .s
            .nostr_harness_command(harness, &self.agent.command(), relay, extra);
        cmd.env("NO_COLOR", "1").stdout(Stdio::null()).stderr(log);
        let child = cmd
            .spawn()
            .map_err(|e| fail(format!("cannot start {}: {e}", harness.display())))?;
        let live = LiveHarness { child };
        let read = || std::fs::read_to_string(&log_path).unwrap_or_default();
        if wait_until(CONNECT, || read().contains(SUBSCRIBED).then_some(())).is_none() {
            return Err(fail(format!(
                "{} did not subscribe:\n{}",
                harness.display(),
                read()
            )));
        }
        Ok(live)
    }

    /// The model's answer to `event` on the relay and what the model received.
    pub fn relay_reply_to(
        &self,
        side: &RelaySide,
        event: &Event,
        within: Duration,
    ) -> Result<(Event, Observation)> {
        wait_until(within, || {
            side.agent_events().ok()?.into_iter().find_map(|reply| {
                let to_event = reply.thread_refs().reply.as_deref() == Some(event.id.as_str());
                let seen = Observation::parse(&reply.content)?;
                to_event.then_some((reply, seen))
            })
        })
        .ok_or_else(|| {
            fail(format!(
                "no answer from the model to {:?} on the relay",
                event.content
            ))
        })
    }
}
